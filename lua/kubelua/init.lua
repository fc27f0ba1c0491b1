-- kubelua: the Lua API that controller scripts use.
--
--   local kube = require "kubelua"
--
-- Time and tasks: kube.now, kube.monotonic, kube.spawn, kube.sleep,
-- kube.after, kube.stop. Work: kube.workqueue, kube.workers,
-- kube.requeue_after, kube.terminal, kube.controller (kubelua.controller).
-- Objects: kube.key, owner references, finalizers, conditions, merge
-- patches (kubelua.helpers). Logs: kube.log.{debug,info,warn,error}.
-- The C core is "kubelua.core"; this module adds argument checks and the
-- worker loop, which is plain Lua over the queue's get/done.

local core = require "kubelua.core"
local json = require "kubelua.json"
local informer = require "kubelua.informer"
local group = require "kubelua.informer_group"
local leader = require "kubelua.leader"
local metrics = require "kubelua.metrics"
local generation = require "kubelua.generation"
local strict = require "kubelua.strict"

local error, type, tostring, pairs, ipairs, select = error, type, tostring, pairs, ipairs, select
local setmetatable, getmetatable, xpcall = setmetatable, getmetatable, xpcall
local concat, sort, format = table.concat, table.sort, string.format
local user_traceback, getinfo = core.traceback, debug.getinfo
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
---Runs fn in a new task and waits for it; raises fn's error with its
---traceback. Only inside a task (specs, tools).
---@param fn function
---@param timeout? number seconds (default 60)
---@return any ... fn's results
---@usage local n = kube.run(function() return #kube.list("v1", "pods", "demo").items end)
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
---Runs fn(...) in a new task (a coroutine on the loop), from the next turn.
---@param fn function
---@param ... any fn's arguments
---@usage kube.spawn(function() while true do poll(); kube.sleep(10) end end)
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
  ---Logs a line at this level (kube.log.debug, info, warn, error) with
  ---fields written as k=v, keys sorted (or JSON with --log-format json).
  ---@param msg string
  ---@param fields? table
  ---@usage kube.log.info("copied", { from = key, to = target })
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
-- transform, keep_managed_fields, api_version and kind (for list items),
-- plain_objects (true: keep cached JSON uncompressed) and
-- compress_min_objects (the cache size from which it is compressed with a
-- dictionary learned from the first objects; default 512).
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
function _M._run_options(o)
  run_opts = o or {}
  if run_opts.leader_elect then
    leader.start{ name = run_opts.leader_election_id,
                  namespace = run_opts.leader_election_namespace or leader.pod_namespace() }
  end
end

-- The ring that `kubelua run --shard-ring NAME` puts kube.controller's
-- controllers on, or nil.
function _M._shard_ring() return run_opts.shard_ring end

---Names the API server to talk to: {server = URL, token, tls, namespace},
---or finds it as controller-runtime does from {kubeconfig = PATH, context
---= NAME} or nothing (--kubeconfig, KUBECONFIG, in-cluster, ~/.kube/config).
---Informers and requests connect on first use when nothing was said.
---@param cfg? table
---@return true|nil ok
---@return string? err
---@usage
--- assert(kube.connect{ kubeconfig = os.getenv("HOME") .. "/.kube/config", context = "kind" })
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

---The URL of the API server in use, or nil before a connection.
---@return string|nil
---@usage kube.log.info("server", { url = kube.server() })
function _M.server() return conn.server end

-- The connection in use: server, namespace (the context's or the pod's),
-- origin ("kubeconfig PATH", "in-cluster"), and tls.
---The connection in use: server, namespace (the context's or the pod's),
---origin ("kubeconfig PATH", "in-cluster") and tls.
---@return table
---@usage local ns = kube.connection().namespace or "default"
function _M.connection()
  return { server = conn.server, namespace = conn.namespace, origin = conn.origin,
           tls = conn.tls, authorization = authorization }
end

local START_SIM = { listen = true, load = true, kubeconfig = true, announce = true }

---Starts an API simulator in this process and points the connection at
---it (what `kubelua run --sim` does). opts: the simulator's own
---(kubelua.sim.new), and listen ("HOST:PORT"; default 127.0.0.1 on an
---ephemeral port), load (a directory whose objects it starts with),
---kubeconfig (a path to write a kubeconfig for it to, e.g. for kubectl),
---announce (log its URL and the kubeconfig's path in one info line).
---Raises when it cannot start.
---@param opts? table the simulator's options and the above
---@return table sim
---@usage local sim = kube.start_sim{ listen = "127.0.0.1:6443", kubeconfig = "/tmp/kc" }
function _M.start_sim(opts)
  opts = opts or {}
  local simlib = require "kubelua.sim"
  local sim_opts = {}
  for k, v in pairs(opts) do
    if not START_SIM[k] then sim_opts[k] = v end
  end
  local host, port = simlib.host_port(opts.listen or "127.0.0.1:0")
  if not host then error("--sim-listen needs HOST:PORT, got " .. opts.listen, 0) end
  local sim = simlib.new(sim_opts)
  if opts.load then
    local n, err = sim:load(opts.load)
    if not n then error("--sim-load: " .. err, 0) end
  end
  -- it serves the reconciles a graceful stop waits for until the end
  local srv, err = sim:listen{ host = host, port = port, serve_while_stopping = true }
  if not srv then error("--sim-listen " .. opts.listen .. ": " .. err, 0) end
  local url = simlib.url(host, srv:port())
  if opts.kubeconfig then
    local f, ferr = io.open(opts.kubeconfig, "wb")
    if not f then error("--sim-kubeconfig: " .. ferr, 0) end
    f:write(json.encode { apiVersion = "v1", kind = "Config",
      clusters = { { name = "kubelua-sim", cluster = { server = url } } },
      users = { { name = "kubelua-sim", user = {} } },
      contexts = { { name = "kubelua-sim", context = { cluster = "kubelua-sim",
        user = "kubelua-sim", namespace = "default" } } },
      ["current-context"] = "kubelua-sim" }, "\n")
    f:close()
  end
  _M.connect{ server = url }
  _M.sim = sim
  if opts.announce then
    log.info("simulator listening", { url = url, kubeconfig = opts.kubeconfig })
  end
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
-- The generations that asked for each shared informer: one that no live
-- generation uses any more stops watching (hot reload).
local informer_users = {}

-- What each generation asked for, for the test harness: the informers
-- kube.informer gave it and the queues of its controllers and workers, as
-- sets (t:load waits for the first to sync, t:settle for the second to
-- drain).
local asked = {}

local function asked_by(gen)
  local a = asked[gen]
  if not a then a = { informers = {}, queues = {} } asked[gen] = a end
  return a
end

-- kube._asked(gen) -> { informers = set, queues = set } or nil.
function _M._asked(gen) return asked[gen] end

-- kube._note_queue(q): q serves the current generation (kube.controller).
function _M._note_queue(q) asked_by(core.generation()).queues[q] = true end

local function use_informer(id, inf)
  local users = informer_users[id]
  if not users then users = {} informer_users[id] = users end
  local gen = core.generation()
  users[gen] = true
  asked_by(gen).informers[inf] = true
  return inf
end

generation.on_retire(function(gen)
  asked[gen] = nil
  for id, users in pairs(informer_users) do
    users[gen] = nil
    if next(users) == nil then
      informers[id]:stop()
      informers[id], informer_users[id] = nil, nil
    end
  end
end)

-- /metrics reports the shared informers; /readyz waits for their caches.
metrics.informers(function()
  local list = {}
  for _, inf in pairs(informers) do list[#list + 1] = inf end
  return list
end)
metrics.readiness("informers", function()
  local waiting = {}
  for _, inf in pairs(informers) do
    if not inf:has_synced() then waiting[#waiting + 1] = inf:name() end
  end
  if #waiting == 0 then return true end
  sort(waiting)
  return false, "not synced: " .. concat(waiting, ", ")
end)

-- What a metadata-only informer asks for (client-go's metadata client,
-- controller-runtime's OnlyMetadata): lists as PartialObjectMetadataList,
-- watches as PartialObjectMetadata, whose objects are kind
-- PartialObjectMetadata of meta.k8s.io/v1 holding only the metadata.
local METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
local METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

-- The informer of one watch: the same arguments give the same one. kind
-- (when known) is written into list items, which carry none.
local function shared_informer(api_version, resource, opts, kind)
  local meta = opts.metadata_only == true
  local id = table.concat({ conn.server, api_version, resource, opts.namespace or "",
    opts.label_selector or "", opts.field_selector or "", meta and "metadata" or "" }, "\0")
  local inf = informers[id]
  if inf then return use_informer(id, inf) end
  -- credentials that change (token files, exec plugins) are asked before
  -- each list and watch; a fixed token goes in the headers
  local headers = { Accept = meta and METADATA_LIST or "application/json",
                    Authorization = conn.token and "Bearer " .. conn.token or nil }
  local group_kind = resource -- list items carry no kind; the watch names it
  local item_av = kind and api_version
  if meta then item_av, kind = "meta.k8s.io/v1", "PartialObjectMetadata" end
  inf = informer.new{
    name = (meta and "metadata:" or "") .. api_version .. "/" .. group_kind
      .. (opts.namespace and "@" .. opts.namespace or ""),
    resync = opts.resync, indexers = opts.indexers, transform = opts.transform,
    keep_managed_fields = opts.keep_managed_fields,
    plain_objects = opts.plain_objects, compress_min_objects = opts.compress_min_objects,
    api_version = item_av, kind = kind,
    watch = { url = collection_url(api_version, resource, opts.namespace),
              label_selector = opts.label_selector, field_selector = opts.field_selector,
              headers = headers, watch_accept = meta and METADATA_WATCH or nil,
              tls = conn.tls, creds = conn.creds, watch_list = opts.watch_list ~= false },
  }
  informers[id] = inf
  return use_informer(id, inf)
end

-- The groups kube.informer returned for a Kind named outside a task or a
-- namespaces list, by server, generation and spec: thin Lua objects over
-- shared informers, so each generation has its own.
local by_spec = {}

-- Stops the shared informers of a server (the test harness, when it closes
-- its simulator).
function _M._stop_informers(server)
  local prefix = server .. "\0"
  for id, inf in pairs(informers) do
    if id:sub(1, #prefix) == prefix then
      inf:stop()
      informers[id], informer_users[id] = nil, nil
    end
  end
  for id in pairs(by_spec) do
    if id:sub(1, #prefix) == prefix then by_spec[id] = nil end
  end
end

generation.on_retire(function(gen)
  for id, g in pairs(by_spec) do
    if g.generation == gen then by_spec[id] = nil end
  end
end)

-- Whether the running code is a task, where API calls can wait: a
-- script's main chunk is not, even when it runs in a coroutine (a reload
-- from a spec's task).
local in_task = core.in_task

local function check_namespaces(namespaces, single)
  if type(namespaces) ~= "table" or namespaces[1] == nil then
    error("kube.informer: opts.namespaces must be a non-empty list of namespace names", 3)
  end
  for _, ns in ipairs(namespaces) do
    if type(ns) ~= "string" or ns == "" then
      error("kube.informer: opts.namespaces must be a non-empty list of namespace names", 3)
    end
  end
  if single ~= nil then
    error("kube.informer: opts.namespace and opts.namespaces exclude each other", 3)
  end
end

-- The keys of kube.informer's opts: any other raises, naming the nearest.
---The options of kube.informer.
---@class kube.InformerOpts
---@field namespace? string watch one namespace (default: all)
---@field namespaces? string[] watch each of these; one object spans them (kubelua.informer_group)
---@field label_selector? string "app=web,tier!=db"
---@field field_selector? string "metadata.name=x"
---@field resync? number seconds between resyncs of the handlers (default none)
---@field indexers? table {name = fn(obj) -> keys}, {label = "app"}, "namespace", "controller"
---@field transform? fun(obj: table): table applied before caching
---@field keep_managed_fields? boolean keep metadata.managedFields (dropped by default)
---@field watch_list? boolean stream the initial list as watch events (default true)
---@field plain_objects? boolean keep cached JSON uncompressed
---@field compress_min_objects? integer the cache size from which it is compressed (default 512)
---@field metadata_only? boolean list and watch PartialObjectMetadata: cache metadata only
---@usage
--- kube.informer("v1", "Pod", {
---   namespace = "demo", label_selector = "app=web", indexers = { "controller" },
--- })
---@type table<string, boolean>
local INFORMER_KEYS = { namespace = true, namespaces = true, label_selector = true,
  field_selector = true, resync = true, indexers = true, transform = true,
  keep_managed_fields = true, watch_list = true, plain_objects = true,
  compress_min_objects = true, metadata_only = true }

-- kube.informer(api_version, kind_or_resource, opts) -> a shared informer:
-- the same arguments give the same informer (one watch, one cache).
-- kind_or_resource is the plural resource ("configmaps"), a Kind
-- ("ConfigMap", a CRD's kind) or a singular ("configmap"), found by
-- discovery as the client's positional calls find it (c:resource_info; a
-- singular only from a task or discovery's cache). opts: namespace or
-- namespaces, label_selector, field_selector, resync, indexers, transform,
-- keep_managed_fields, watch_list (default true: stream the initial list as
-- watch events, sendInitialEvents, as client-go does from 1.35; a server
-- that refuses it gets list+watch; false: always list+watch),
-- metadata_only (true: list and watch PartialObjectMetadata, so the cache
-- holds each object's metadata alone, kind PartialObjectMetadata of
-- meta.k8s.io/v1: for a controller that reads only labels, annotations
-- and owners). An unknown key raises, naming the nearest valid one.
--
-- opts.namespaces = {"a", "b"} watches each namespace and returns one
-- object spanning them (kubelua.informer_group). A Kind is resolved at once
-- when discovery has it cached or when called in a task (which then
-- yields; an unknown kind returns nil, err). Outside a task (a script's
-- top level) it cannot wait: it returns a group at once, empty and not
-- synced, and a task resolves the kind and starts the watch when discovery
-- answers, retrying with backoff (1 s up to 30 s) while it fails, so a CRD
-- installed later is picked up.
---A shared informer: the same arguments give the same one (one watch, one
---cache). kind_or_resource is a Kind ("ConfigMap"), a plural
---("configmaps") or a singular, found by discovery. Outside a task a Kind
---not yet discovered gives an empty group that starts when discovery
---answers; in a task an unknown kind returns nil, err. An unknown option
---raises, naming the nearest valid one.
---@param api_version string "v1", "apps/v1", "example.com/v1"
---@param kind_or_resource string
---@param opts? kube.InformerOpts
---@return kubelua.informer|kubelua.informer_group|nil
---@return string? err
---@usage local pods = kube.informer("v1", "Pod", { namespace = "demo" })
function _M.informer(api_version, resource, opts)
  if type(api_version) ~= "string" or type(resource) ~= "string" then
    error("kube.informer: expected an apiVersion and a resource name", 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("kube.informer: opts must be a table, got " .. type(opts), 2)
  end
  opts = opts or {}
  strict.keys(opts, INFORMER_KEYS, "kube.informer opts", 2)
  local namespaces = opts.namespaces
  if namespaces ~= nil then check_namespaces(namespaces, opts.namespace) end
  if opts.metadata_only ~= nil and type(opts.metadata_only) ~= "boolean" then
    error("kube.informer: " .. strict.type_error("opts.metadata_only", "a boolean",
                                                opts.metadata_only), 2)
  end
  connected("kube.informer")
  -- Discovery gives the plural of a Kind, and the Kind of a plural (for
  -- list items, which carry none, so a cached object has its apiVersion
  -- and kind as an owner reference needs). It yields: in a task it asks
  -- at once; outside one only the cache is read, and a Kind waits (below).
  local is_kind = resource:find("^%u") ~= nil
  local c = require("kubelua.client").default()
  local info = c:cached_resource_info(api_version, resource)
  if not info and in_task() then
    local err
    info, err = c:resource_info(api_version, resource)
    if not info and is_kind then return nil, "kube.informer: " .. tostring(err), err.reason end
  end
  if not is_kind and not namespaces then
    return shared_informer(api_version, info and info.name or resource, opts, info and info.kind)
  end

  local id = table.concat({ conn.server, core.generation(), api_version, resource,
    opts.namespace or "", opts.label_selector or "", opts.field_selector or "",
    namespaces and table.concat(namespaces, ",") or "", opts.metadata_only and "metadata" or "" },
    "\0")
  local found = by_spec[id]
  if found then return found end

  local function members(plural, kind)
    if not namespaces then return { shared_informer(api_version, plural, opts, kind) } end
    local infs = {}
    for i, ns in ipairs(namespaces) do
      local o = {}
      for k, v in pairs(opts) do o[k] = v end
      o.namespaces, o.namespace = nil, ns
      infs[i] = shared_informer(api_version, plural, o, kind)
    end
    return infs
  end

  local plural = info and info.name or not is_kind and resource or nil
  local kind = info and info.kind
  if plural and not namespaces then return members(plural, kind)[1] end

  found = group.new(api_version .. "/" .. resource
                    .. (namespaces and "@" .. table.concat(namespaces, ",")
                        or opts.namespace and "@" .. opts.namespace or ""))
  found.generation = core.generation()
  by_spec[id] = found
  asked_by(found.generation).informers[found] = true
  if plural then
    found:attach(members(plural, kind), namespaces)
    return found
  end
  core.spawn_named("resolve " .. found:name(), function()
    local delay = 1
    while true do
      local res, err = c:resource_info(api_version, resource)
      if res then
        found.resolve_error = nil
        found:attach(members(res.name, res.kind), namespaces)
        return
      end
      found.resolve_error = tostring(err)
      log.warn("kube.informer: cannot resolve the kind, retrying",
               { informer = found:name(), error = tostring(err), retry_in = delay })
      core.sleep(delay)
      delay = math.min(delay * 2, 30)
    end
  end)
  return found
end

-- kube.wait_for_sync(inf, … [, timeout]) -> true once every informer has
-- synced, false when timeout seconds (default 60) pass first. In a task.
---Waits (in a task) until every informer given has synced.
---@param ... kubelua.informer informers, then optionally a timeout in seconds (default 60)
---@return boolean synced false when the timeout passed first
---@usage assert(kube.wait_for_sync(pods, configmaps, 30))
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

-- Schedules ----------------------------------------------------------------

local cron = require "kubelua.cron"

-- Named schedules, by name: { key = spec and time zone, at = the next fire
-- time }, kept across reloads so that a new generation fires when the old
-- one would have, once.
local schedules = {}

-- The clock schedules read and wait on (a spec may drive its own).
_M._schedule_clock = { now = core.now, sleep = core.sleep }

-- kube.schedule([name,] spec, fn [, opts]): calls fn(at) at each time the
-- five-field cron spec names (kubelua.cron: "*/5 * * * *", ranges, steps,
-- lists, month and day names, @daily…; Vixie cron's rule when both days
-- are restricted), at being that time in seconds since the epoch. opts.tz:
-- "UTC" (the default) or a fixed offset ("+02:00"); named zones are not
-- supported. A schedule belongs to the generation that made it and stops
-- with it; a named one is taken over by the next generation that
-- schedules the same name with the same spec, which fires at the time
-- already planned (a reload neither skips nor repeats a firing). Times
-- missed while the process was held (or the clock jumped) fire once,
-- late, and the next firing is the spec's first time after now. fn runs
-- in its own task; an error it raises is logged with its traceback and
-- the schedule goes on. A bad spec raises naming the field
-- ("kube.schedule: bad minute field \"61\": 61 is out of range 0-59").
-- Returns the next fire time.
---Runs fn(at) on a standard 5-field cron schedule (UTC unless opts.tz, a
---fixed offset such as "+02:00"). A named schedule survives reloads: the
---next generation's schedule of the same name and spec fires when the
---old one would have. A bad spec raises naming the field.
---@param name_or_spec string the schedule's name, or its spec when unnamed
---@param spec_or_fn string|function
---@param fn? function|table fn(at), or opts when unnamed
---@param opts? {tz?: string}
---@return number next the next fire time (seconds since the epoch)
---@usage kube.schedule("cleanup", "*/5 * * * *", function(at) prune() end)
function _M.schedule(a, b, c, d)
  local name, spec, fn, opts = nil, a, b, c
  if type(b) ~= "function" then name, spec, fn, opts = a, b, c, d end
  if name ~= nil and (type(name) ~= "string" or name == "") then
    error("kube.schedule: the name must be a non-empty string, got " .. strict.describe(name), 2)
  end
  if type(fn) ~= "function" then
    error("kube.schedule: " .. strict.type_error("fn", "a function", fn), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("kube.schedule: opts must be a table, got " .. type(opts), 2)
  end
  opts = opts or {}
  strict.keys(opts, { tz = true }, "kube.schedule opts", 2)
  local ok, s = pcall(cron.parse, spec, opts.tz)
  if not ok then error("kube.schedule: " .. s, 2) end
  local clock = _M._schedule_clock
  local key = spec .. "\0" .. tostring(opts.tz or "UTC")
  local rec = name and schedules[name]
  if not rec or rec.key ~= key then
    local at = cron.next(s, clock.now())
    if not at then error("kube.schedule: " .. format("%q", spec) .. " never fires", 2) end
    rec = { key = key, at = at }
    if name then schedules[name] = rec end
  end
  local label = name or spec
  core.spawn_named("schedule " .. label, function()
    while true do
      local now = clock.now()
      if now < rec.at then
        clock.sleep(rec.at - now)
      else
        local at = rec.at
        rec.at = cron.next(s, now > at + 60 and now or at)
        core.spawn_named("schedule " .. label .. " run", function()
          local fok, err = xpcall(fn, user_traceback, at)
          if not fok then log.error("schedule failed", { schedule = label, error = err }) end
        end)
        if not rec.at then return end
      end
    end
  end)
  return rec.at
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
---A reconcile's result asking for another run after seconds (the key's
---failures are forgotten).
---@param seconds number
---@return table
---@usage return kube.requeue_after(30)
function _M.requeue_after(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds then
    error("kube.requeue_after: seconds must be a number, got " .. type(seconds), 2)
  end
  return setmetatable({ seconds = seconds }, requeue_mt)
end

local terminal_mt = { __tostring = function(t) return "terminal: " .. t.message end }

-- kube.terminal(msg): a reconcile's result (returned or raised) that gives
-- up on the key: logged, forgotten, not retried until the key is added
-- again (controller-runtime's TerminalError).
---A reconcile's result (returned or raised) that gives up on the key:
---logged, forgotten, not retried until the key is added again
---(controller-runtime's TerminalError).
---@param msg string why
---@return table
---@usage return kube.terminal("spec.size must be positive")
function _M.terminal(msg)
  if type(msg) ~= "string" then
    error("kube.terminal: msg must be a string, got " .. type(msg), 2)
  end
  return setmetatable({ message = msg }, terminal_mt)
end

-- The fields a reconcile's logs carry: the worker's own (queue or
-- controller) and the key.
local function bound_log(base, key)
  local bound = {}
  for k, v in pairs(base) do bound[k] = v end
  bound.key = key
  local out = {}
  for _, level in pairs({ "debug", "info", "warn", "error" }) do
    out[level] = function(msg, fields)
      local all = bound
      if fields ~= nil then
        if type(fields) ~= "table" then
          error("ctx.log: fields must be a table, got " .. type(fields), 2)
        end
        all = {}
        for k, v in pairs(bound) do all[k] = v end
        for k, v in pairs(fields) do all[k] = v end
      end
      return log[level](msg, all)
    end
  end
  return out
end

-- ctx, a reconcile's second argument: key, namespace and name (nil for a
-- cluster-scoped key), attempt (the queue's NumRequeues of the key: 0 on a
-- first try), log (kube.log with the worker's fields and the key bound)
-- and triggers (what queued the key since its last run began, as noted by
-- kube.note_trigger: "update demo/a", "add owned demo/a-copy", …) and,
-- for kube.controller's reconcile, object (the watched object from the
-- informer's cache as the reconcile first reads it, nil when it is gone).
-- namespace, name, attempt, log and object are computed when first read.
---A reconcile's second argument (kube.controller and kube.workers).
---@class kube.ctx
---@field key string "namespace/name", or "name"
---@field namespace string? nil for a cluster-scoped key
---@field name string
---@field attempt integer failures since the key was last forgotten (0 on a first try)
---@field log table kube.log with the controller and key bound: ctx.log.info(msg, fields)
---@field triggers string[] what queued the key since its last run ("update demo/a")
---@field object table? kube.controller's: the watched object from the cache, nil when gone
---@usage reconcile = function(req, ctx) if not ctx.object then return end ctx.log.info("seen") end
---@type table<string, function>
local ctx_fields = {
  namespace = function(ctx)
    local ns = ctx.key:match("^([^/]*)/")
    return ns ~= "" and ns or nil
  end,
  name = function(ctx) return (ctx.key:match("([^/]*)$")) end,
  attempt = function(ctx) return ctx._q:num_requeues(ctx.key) end,
  log = function(ctx) return bound_log(ctx._fields, ctx.key) end,
  object = function(ctx)
    local cache = rawget(ctx, "_cache")
    return cache and cache:get(ctx.key)
  end,
}
_M._bound_log = bound_log -- for kube.controller's timers
local ctx_mt = { __index = function(ctx, k)
  local f = ctx_fields[k]
  if not f then return nil end
  local v = f(ctx)
  rawset(ctx, k, v)
  return v
end }

-- A reconcile's error handler: a raised terminal result stays a table;
-- another error gets a traceback from the user's frame that raised it (past
-- error() and the library functions that raised it on its behalf) down to
-- the reconcile function, without the worker's own frames below it.
local WORKER_FRAMES = "\n\t%[C%]: in function 'xpcall'\n\tkubelua/init%.lua:%d+: in function "
  .. "<kubelua/init%.lua:%d+>$"
local function on_error(e)
  if getmetatable(e) == terminal_mt then return e end
  local tb = user_traceback(e, 2)
  if type(tb) ~= "string" then return tb end
  return (tb:gsub(WORKER_FRAMES, ""))
end

local function failed(fields, key, msg, what)
  local f = { key = key, error = msg }
  for k, v in pairs(fields) do f[k] = v end
  log.error(what, f)
end

-- Each worker: get a key, run fn(key[, ctx]) protected, settle the
-- outcome, done. ctx is only built for a function that can receive it.
local may_work = leader.may_work
local reconcile_total, reconcile_errors = metrics.reconcile_total, metrics.reconcile_errors
local reconcile_time = metrics.reconcile_time

-- controller-runtime's reconcile metrics, the controller being the queue:
-- series bound once per worker, so a reconcile pays two clock reads and
-- two C calls for them.
local function reconcile_series(qname)
  local c = { controller = qname }
  local function result(r)
    return reconcile_total:with{ controller = qname, result = r }
  end
  return { success = result("success"), error = result("error"), requeue = result("requeue"),
           requeue_after = result("requeue_after"), terminal = result("error"),
           errors = reconcile_errors:with(c), time = reconcile_time:with(c) }
end

-- Counts a reconcile; at debug level, also logs it (controller-runtime's
-- "Reconcile successful" line, with the key, duration and outcome).
local function count_reconcile(m, result, started, fields, key)
  local took = core.monotonic() - started
  m[result]:inc()
  if result == "error" or result == "terminal" then m.errors:inc() end
  m.time:observe(took)
  if m.debug then
    local f = { key = key, result = result, duration = format("%.6f", took) }
    for k, v in pairs(fields) do f[k] = v end
    log.debug("reconcile", f)
  end
end

-- Why keys were queued, by queue and key, until their reconcile starts:
-- ctx.triggers, for logs (kube.controller notes them; plain kube.workers
-- users may call kube.note_trigger). At most MAX_TRIGGERS per key.
local triggers, MAX_TRIGGERS, NO_TRIGGERS = {}, 16, setmetatable({}, { __newindex = error })

-- kube.note_trigger(q, key, what): remember what queued key (a string).
---Remembers what queued key, for ctx.triggers of its next reconcile
---(kube.controller notes its own).
---@param q kubelua.workqueue|string the queue or its name
---@param key string
---@param what string "update demo/a"
---@usage kube.note_trigger(q, key, "tick")
function _M.note_trigger(q, key, what)
  local qname = type(q) == "string" and q or q:name()
  local t = triggers[qname]
  if not t then t = {} triggers[qname] = t end
  local list = t[key]
  if not list then list = {} t[key] = list end
  if #list < MAX_TRIGGERS then list[#list + 1] = what end
end

local function worker_loop(q, fn, fields, with_ctx)
  local get, done, forget, add = q.get, q.done, q.forget, q.add
  local add_after, add_rate_limited = q.add_after, q.add_rate_limited
  local dead, gen = generation.dead, core.generation()
  local qname = q:name()
  local series, monotonic = reconcile_series(qname), core.monotonic
  series.debug = core.log_level() == "debug"
  -- A hot reload retires this worker's generation: it finishes the key in
  -- hand and returns (one parked in get ends with its generation). With
  -- leader election, workers take keys only while this replica leads.
  while not dead[gen] do
    if not may_work() then
      core.sleep(0.05)
      goto continue
    end
    local key = get(q)
    if key == nil then return end
    if not may_work() then -- leadership went while it waited: give it back
      add(q, key)
      done(q, key)
      goto continue
    end
    local started, result = monotonic(), "success"
    local tq, trig = triggers[qname], nil
    if tq then trig = tq[key] tq[key] = nil end
    local ok, res, err
    if with_ctx then
      local ctx = setmetatable({ key = key, _q = q, _fields = fields,
                                 triggers = trig or NO_TRIGGERS }, ctx_mt)
      ok, res, err = xpcall(fn, on_error, key, ctx)
      local after = rawget(ctx, "_after") -- kube.controller's: the key's run ended
      if after then after(key) end
    else
      ok, res, err = xpcall(fn, on_error, key)
    end
    if ok and res == nil then
      if err == nil then
        forget(q, key)
      else
        failed(fields, key, tostring(err), "reconcile failed")
        add_rate_limited(q, key)
        result = "error"
      end
    else
      local mt = getmetatable(res)
      if mt == requeue_mt and ok then
        forget(q, key)
        add_after(q, key, res.seconds)
        result = res.seconds > 0 and "requeue_after" or "requeue"
      elseif mt == terminal_mt then
        failed(fields, key, res.message, "reconcile failed terminally, not retried")
        forget(q, key)
        result = "terminal"
      elseif not ok then
        failed(fields, key, tostring(res), "reconcile failed")
        add_rate_limited(q, key)
        result = "error"
      else
        forget(q, key)
      end
    end
    count_reconcile(series, result, started, fields, key)
    done(q, key)
    ::continue::
  end
end

-- Whether fn can take a second argument.
local function takes_ctx(fn)
  local info = getinfo(fn, "u")
  return info.isvararg or (info.nparams or 0) >= 2 or info.what == "C"
end

local function start_workers(q, n, fn, fields)
  _M._note_queue(q)
  local qname = q:name()
  local with_ctx = takes_ctx(fn)
  for i = 1, n do
    core.spawn_named(qname .. "#" .. i, worker_loop, q, fn, fields, with_ctx)
  end
end

-- kube.workers(q, n, fn): n tasks that call fn(key, ctx) for each key of q.
-- fn returns normally → forget; raises or returns nil, err → logged (a
-- raised error with its traceback) and re-added rate limited; returns
-- kube.requeue_after(s) → forget, add after s; returns (or raises)
-- kube.terminal(msg) → logged, forgotten, not retried until added again.
-- ctx: key, namespace, name, attempt, log, triggers (see ctx_fields above).
---Starts n tasks that call fn(key, ctx) for each key of q. fn returns
---normally: forget; raises or returns nil, err: logged and re-added rate
---limited; returns kube.requeue_after(s): added after s; returns or raises
---kube.terminal(msg): logged and forgotten.
---@param q kubelua.workqueue
---@param n integer
---@param fn fun(key: string, ctx: kube.ctx): any
---@usage kube.workers(kube.workqueue("sync"), 2, function(key, ctx) ctx.log.info("sync") end)
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
  start_workers(q, n, fn, { queue = q:name() })
end
_M._start_workers = start_workers -- for kubelua.controller

-- Leader election ------------------------------------------------------------

-- kube.leader_election{ name, namespace, identity, lease_duration = 15,
-- renew_deadline = 10, retry_period = 2 } -> elector: this process
-- campaigns for the Lease; kube.workers take keys only while it leads. It
-- survives hot reloads and releases the Lease on a graceful stop.
-- `kubelua run --leader-elect` starts it. kube.on_leading(fn) and
-- kube.on_stopped_leading(fn) are told of each change.
---Campaigns for a Lease: kube.workers take keys only while this process
---leads. opts: name, namespace, identity, lease_duration (15),
---renew_deadline (10), retry_period (2). Survives reloads; the Lease is
---released on a graceful stop. `kubelua run --leader-elect` starts it.
---@param opts table
---@return kubelua.leader.elector
---@usage kube.leader_election{ name = "mirror", namespace = "kube-system" }
function _M.leader_election(opts)
  return leader.start(opts)
end
_M.on_leading = leader.on_leading
_M.on_stopped_leading = leader.on_stopped_leading

-- kube.event(obj, "Normal"|"Warning", reason, message [, action]): posts
-- a Kubernetes Event about obj, aggregated and rate limited as client-go's
-- recorder does (kubelua.events); returns at once.
local events = require "kubelua.events"
_M.event = events.event
_M.events = events

-- kube.metrics.counter/gauge/histogram{name, help, labels, buckets}: the
-- script's own metrics on /metrics (see lua/kubelua/metrics.lua).
_M.metrics = { counter = metrics.counter, gauge = metrics.gauge,
               histogram = metrics.histogram, render = metrics.render }

-- The REST client (kubelua.client): verbs on the default client, and the
-- error predicates. kube.client.new / kube.client.set_default make clients.
local client = require "kubelua.client"
_M.client = client
for _, k in pairs({ "get", "list", "list_all", "create", "update", "update_status", "patch",
                    "delete", "apply", "is_not_found", "is_conflict", "is_already_exists",
                    "is_gone", "is_expired", "is_forbidden", "is_invalid", "is_unauthorized",
                    "is_too_many_requests", "is_no_match" }) do
  _M[k] = client[k]
end

-- Object helpers (kubelua.helpers): kube.key, owner references,
-- finalizers, conditions, merge patches.
local helpers = require "kubelua.helpers"
for _, k in pairs(helpers.exports) do _M[k] = helpers[k] end

-- kube.webhook{path =, validate | mutate | convert = fn}: admission and
-- conversion webhooks (kubelua.webhook).
_M.webhook = require("kubelua.webhook").new

-- kube.controller{…}: the builder (kubelua.controller).
_M.controller = require("kubelua.controller").new

return _M
