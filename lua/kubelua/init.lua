-- kubelua: the Lua API that controller scripts use.
--
--   local kube = require "kubelua"
--
-- Time and tasks: kube.now, kube.monotonic, kube.spawn, kube.sleep,
-- kube.after, kube.stop. Work: kube.workqueue, kube.workers,
-- kube.requeue_after. Logs: kube.log.{debug,info,warn,error}.
-- The C core is "kubelua.core"; this module adds argument checks and the
-- worker loop, which is plain Lua over the queue's get/done.

local core = require "kubelua.core"
local json = require "kubelua.json"
local informer = require "kubelua.informer"

local error, type, tostring, pairs, select = error, type, tostring, pairs, select
local setmetatable, getmetatable, xpcall = setmetatable, getmetatable, xpcall
local concat, sort, format = table.concat, table.sort, string.format
local traceback = debug.traceback
local unpack = unpack

local function pack(...) return { n = select("#", ...), ... } end

local _M = { version = core.version }

-- The exact JSON boundary: kube.json.decode/encode, kube.null, kube.array.
_M.json = json
_M.null = json.null
_M.array = json.array

_M.now = core.now
_M.monotonic = core.monotonic
_M.sleep = core.sleep
_M.after = core.after
_M.stop = core.stop
_M.stopping = core.stopping

-- kube.run(fn [, timeout]) -> fn's results: runs fn in a new task and waits
-- for it (default timeout 60 s); raises fn's error, with its traceback.
-- Only inside a task: specs (kubelua test runs them in one) and tools.
function _M.run(fn, timeout)
  if type(fn) ~= "function" then
    error("kube.run: expected a function, got " .. type(fn), 2)
  end
  local r = pack(core.run(fn, timeout))
  if r[1] then
    local res = r[2]
    return unpack(res, 1, res.n)
  end
  error(r[3] and "kube.run: " .. r[2] or r[2], r[3] and 2 or 0)
end

-- kube.spawn(fn, ...): runs fn(...) in a new task (a coroutine on the loop).
function _M.spawn(fn, ...)
  if type(fn) ~= "function" then
    error("kube.spawn: expected a function, got " .. type(fn), 2)
  end
  return core.spawn(fn, ...)
end

-- Logs ---------------------------------------------------------------------

local function quote(v)
  v = tostring(v)
  if v:find('[%s"=]') or v == "" then
    return '"' .. v:gsub('[\\"]', "\\%0"):gsub("\n", "\\n") .. '"'
  end
  return v
end

-- Formats a table of fields as " k=v k2=v2", keys sorted.
local function format_fields(fields)
  if fields == nil then return nil end
  if type(fields) ~= "table" then
    error("kube.log: fields must be a table, got " .. type(fields), 3)
  end
  local keys = {}
  for k in pairs(fields) do keys[#keys + 1] = tostring(k) end
  sort(keys)
  local out = {}
  for i = 1, #keys do
    local k = keys[i]
    local v = fields[k]
    if v == nil then v = fields[tonumber(k)] end
    out[i] = " " .. k .. "=" .. quote(v)
  end
  return concat(out)
end

local log = {}
for _, level in pairs({ "debug", "info", "warn", "error" }) do
  log[level] = function(msg, fields)
    core.log(level, tostring(msg), format_fields(fields))
  end
end
_M.log = log

-- Informers ---------------------------------------------------------------

-- kube.local_informer(opts) -> an informer whose cache is fed by the caller
-- (inf:feed(watch_bytes), inf:replace(list), inf:add/update/delete(obj))
-- instead of a watch: the same store, indexers, handlers and events as a
-- watching informer, for tests and tools. opts: name, resync, indexers,
-- transform, keep_managed_fields, api_version and kind (for list items).
_M.local_informer = informer.new

-- The API server this process talks to. kube.connect{server = URL,
-- token = T, tls = {…}} names it; kube.connect() or kube.connect{kubeconfig
-- = PATH, context = NAME} finds it as controller-runtime does (--kubeconfig,
-- KUBECONFIG, in-cluster service account, ~/.kube/config); `kubelua run
-- --sim` points it at an in-process simulator. Informers and requests
-- connect on first use when nothing was said.
local conn = {}
local run_opts = {}

-- Set by `kubelua run` from --kubeconfig and --context.
function _M._run_options(o) run_opts = o or {} end

function _M.connect(cfg)
  cfg = cfg or run_opts
  if type(cfg) ~= "table" then
    error("kube.connect: expected a table, got " .. type(cfg), 2)
  end
  local new
  if cfg.server then
    if type(cfg.server) ~= "string" then
      error("kube.connect: server must be a URL string", 2)
    end
    new = { server = cfg.server, token = cfg.token, tls = cfg.tls, namespace = cfg.namespace }
  else
    local kc, creds = require("kubelua.kubeconfig").load(cfg)
    if not kc then return nil, "kube.connect: " .. creds end
    new = { server = kc.server, creds = creds, namespace = kc.namespace, origin = kc.origin,
            tls = { ca_file = kc.ca_file, ca = kc.ca, cert_file = kc.cert_file, cert = kc.cert,
                    key_file = kc.key_file, key = kc.key, insecure = kc.insecure,
                    server_name = kc.tls_server_name } }
  end
  new.server = new.server:gsub("/+$", "")
  conn = new
  local ok, client = pcall(require, "kubelua.client")
  if ok and type(client) == "table" and client.new and client.set_default then
    client.set_default(client.new(conn))
  end
  return true
end

local function connected(fname)
  if conn.server then return true end
  local ok, err = _M.connect()
  if not ok then error(fname .. ": not connected: " .. tostring(err), 3) end
  return true
end

-- The Authorization header value for the next request, or nil.
local function authorization()
  local token = conn.token
  if not token and conn.creds then token = conn.creds:token() end
  return token and "Bearer " .. token or nil
end

function _M.server() return conn.server end

-- The connection in use: server, namespace (the context's or the pod's),
-- origin ("kubeconfig PATH", "in-cluster"), and tls.
function _M.connection()
  return { server = conn.server, namespace = conn.namespace, origin = conn.origin,
           tls = conn.tls, authorization = authorization }
end

-- kube.start_sim([opts]) -> sim: an API simulator in this process on a
-- loopback port, and the connection pointed at it (kubelua run --sim).
function _M.start_sim(opts)
  local sim = require("kubelua.sim").new(opts)
  local srv = assert(sim:listen{ host = "127.0.0.1", port = 0 })
  _M.connect{ server = "http://127.0.0.1:" .. srv:port() }
  _M.sim = sim
  return sim
end

-- The collection URL of a resource: /api/v1/… for the core group,
-- /apis/GROUP/VERSION/… otherwise; namespaced when ns is given.
local function collection_url(api_version, resource, ns)
  local prefix = api_version:find("/", 1, true) and "/apis/" or "/api/"
  return conn.server .. prefix .. api_version
    .. (ns and ns ~= "" and "/namespaces/" .. ns or "") .. "/" .. resource
end

local informers = {}

-- kube.informer(api_version, resource, opts) -> a shared informer: the same
-- arguments give the same informer (one watch, one cache). resource is the
-- plural name ("configmaps"); opts: namespace, label_selector,
-- field_selector, resync, indexers, transform, keep_managed_fields,
-- watch_list (default true: stream the initial list as watch events,
-- sendInitialEvents, as client-go does from 1.35; a server that refuses it
-- gets list+watch; false: always list+watch).
function _M.informer(api_version, resource, opts)
  if type(api_version) ~= "string" or type(resource) ~= "string" then
    error("kube.informer: expected an apiVersion and a resource name", 2)
  end
  connected("kube.informer")
  opts = opts or {}
  local id = table.concat({ api_version, resource, opts.namespace or "",
    opts.label_selector or "", opts.field_selector or "" }, "\0")
  local inf = informers[id]
  if inf then return inf end
  -- credentials that change (token files, exec plugins) are asked before
  -- each list and watch; a fixed token goes in the headers
  local headers = { Accept = "application/json",
                    Authorization = conn.token and "Bearer " .. conn.token or nil }
  local group_kind = resource -- list items carry no kind; the watch names it
  inf = informer.new{
    name = api_version .. "/" .. group_kind .. (opts.namespace and "@" .. opts.namespace or ""),
    resync = opts.resync, indexers = opts.indexers, transform = opts.transform,
    keep_managed_fields = opts.keep_managed_fields,
    watch = { url = collection_url(api_version, resource, opts.namespace),
              label_selector = opts.label_selector, field_selector = opts.field_selector,
              headers = headers, tls = conn.tls, creds = conn.creds,
              watch_list = opts.watch_list ~= false },
  }
  informers[id] = inf
  return inf
end

-- kube.wait_for_sync(inf, … [, timeout]) -> true once every informer has
-- synced, false when timeout seconds (default 60) pass first. In a task.
function _M.wait_for_sync(...)
  local n = select("#", ...)
  local timeout = 60
  if n > 0 and type(select(n, ...)) == "number" then
    timeout = select(n, ...)
    n = n - 1
  end
  local infs = { ... }
  local deadline = core.monotonic() + timeout
  while true do
    local all = true
    for i = 1, n do
      if not infs[i]:has_synced() then all = false break end
    end
    if all then return true end
    if core.monotonic() >= deadline then return false end
    core.sleep(0.01)
  end
end

-- Workqueues and workers ---------------------------------------------------

-- kube.workqueue(name [, opts]) -> the queue of that name (created on first
-- use). opts.rate_limiter, read only when the queue is created:
--   { type = "default", base = 0.005, max = 1000, qps = 10, burst = 100 }
--   { type = "exponential", base = 0.005, max = 1000 }
--   { type = "bucket", qps = 10, burst = 100 }
--   { type = "fast_slow", fast = 0.005, slow = 10, max_fast = 5 }
--   { type = "max_of", limiters = { spec, spec, ... } }
_M.workqueue = core.workqueue

local requeue_mt = { __tostring = function(r)
  return format("requeue_after(%g)", r.seconds)
end }

-- kube.requeue_after(seconds): a reconcile's result that asks for another
-- run after `seconds` (the failure count is forgotten).
function _M.requeue_after(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds then
    error("kube.requeue_after: seconds must be a number, got " .. type(seconds), 2)
  end
  return setmetatable({ seconds = seconds }, requeue_mt)
end

local function worker_loop(q, fn, qname)
  local get, done, forget = q.get, q.done, q.forget
  local add_after, add_rate_limited = q.add_after, q.add_rate_limited
  while true do
    local key = get(q)
    if key == nil then return end
    local ok, res, err = xpcall(fn, traceback, key)
    if not ok then
      log.error("reconcile failed", { queue = qname, key = key, error = res })
      add_rate_limited(q, key)
    elseif res == nil and err ~= nil then
      log.error("reconcile failed", { queue = qname, key = key,
                                      error = tostring(err) })
      add_rate_limited(q, key)
    elseif getmetatable(res) == requeue_mt then
      forget(q, key)
      add_after(q, key, res.seconds)
    else
      forget(q, key)
    end
    done(q, key)
  end
end

-- kube.workers(q, n, fn): n tasks that call fn(key) for each key of q.
-- fn returns normally → forget; raises or returns nil, err → logged and
-- re-added rate limited; returns kube.requeue_after(s) → forget, add after s.
function _M.workers(q, n, fn)
  if getmetatable(q) ~= "workqueue" then
    error("kube.workers: bad argument #1 (workqueue expected, got " .. type(q) .. ")", 2)
  end
  if type(n) ~= "number" or n < 1 or n % 1 ~= 0 then
    error("kube.workers: bad argument #2 (a positive whole number of workers expected, got "
          .. (type(n) == "number" and tostring(n) or type(n)) .. ")", 2)
  end
  if type(fn) ~= "function" then
    error("kube.workers: bad argument #3 (function expected, got " .. type(fn) .. ")", 2)
  end
  local qname = q:name()
  for i = 1, n do
    core.spawn_named(qname .. "#" .. i, worker_loop, q, fn, qname)
  end
end

-- The REST client (kubelua.client): verbs on the default client, and the
-- error predicates. kube.client.new / kube.client.set_default make clients.
local client = require "kubelua.client"
_M.client = client
for _, k in pairs({ "get", "list", "list_all", "create", "update", "update_status", "patch",
                    "delete", "apply", "is_not_found", "is_conflict", "is_already_exists",
                    "is_gone", "is_expired", "is_forbidden", "is_invalid", "is_unauthorized",
                    "is_too_many_requests" }) do
  _M[k] = client[k]
end

return _M
