-- kubelua.metrics: Prometheus metrics, and the /metrics, /healthz and
-- /readyz endpoints.
--
--   local kube = require "kubelua"
--   local synced = kube.metrics.counter{ name = "app_synced_total",
--     help = "Objects synced.", labels = { "kind" } }
--   synced:inc({ kind = "ConfigMap" })        -- or :inc(labels, n)
--   kube.metrics.gauge{ … }:set(3, labels)    -- :inc, :dec too
--   kube.metrics.histogram{ …, buckets = { 0.1, 1, 10 } }:observe(0.4, labels)
--   local pods = synced:with{ kind = "Pod" }  -- bound once: pods:inc() is
--                                            -- two C calls, no label lookup
--
-- Metrics live in the runtime's C registry (kubelua.metrics.core), not in a
-- script generation: after a hot reload the same name gives the same
-- metric and its values; a different type, label set or bucket list is an
-- error. The runtime's own metrics (client-go's workqueue and REST client
-- names, controller-runtime's reconcile names, informer, leader election,
-- hot reload, Lua heap and process_*) are defined here or in C.
--
-- serve{ metrics = ADDR, probes = ADDR } is what `kubelua run
-- --metrics-bind-address / --health-probe-bind-address` call: ADDR is
-- "HOST:PORT", ":PORT" (every interface) or "0" (off). /readyz answers 200
-- once every readiness check passes (informers synced), else 503 with the
-- reasons; /healthz answers 200 while the loop runs, and 500 from the
-- watchdog's thread while a task hangs past --hang-timeout.

local core = require "kubelua.core"
local mcore = require "kubelua.metrics.core"

local type, error, pcall, tostring, tonumber = type, error, pcall, tostring, tonumber
local concat, format = table.concat, string.format

local _M = {}

local function constructor(fn, what)
  ---A metric family of the script's own on /metrics (kube.metrics.counter,
  ---gauge, histogram): {name, help, labels = {...}, buckets = {...}}. The
  ---same name after a reload gives the same family and its values.
  ---@param spec table
  ---@return kubelua.metric
  ---@usage
  --- local synced = kube.metrics.counter{
  ---   name = "app_synced_total", help = "Objects synced.", labels = { "kind" },
  --- }
  return function(spec)
    if type(spec) ~= "table" then
      error("kube.metrics." .. what .. ": expected a table {name = …}, got " .. type(spec), 2)
    end
    local ok, m = pcall(fn, spec)
    if not ok then
      local msg = tostring(m):gsub("^metrics%.%w+: ", "")
      error("kube.metrics." .. what .. ": " .. msg, 2)
    end
    return m
  end
end

_M.counter = constructor(mcore.counter, "counter")
_M.gauge = constructor(mcore.gauge, "gauge")
_M.histogram = constructor(mcore.histogram, "histogram")

-- The runtime's metrics ------------------------------------------------------

-- controller-runtime's buckets for reconcile time, client-go's for requests.
local RECONCILE_BUCKETS = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4,
  0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7,
  8, 9, 10, 15, 20, 25, 30, 40, 50, 60 }
local REQUEST_BUCKETS = { 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0 }

_M.reconcile_total = mcore.counter{ name = "controller_runtime_reconcile_total",
  help = "Total number of reconciliations per controller", labels = { "controller", "result" } }
_M.reconcile_errors = mcore.counter{ name = "controller_runtime_reconcile_errors_total",
  help = "Total number of reconciliation errors per controller", labels = { "controller" } }
_M.reconcile_time = mcore.histogram{ name = "controller_runtime_reconcile_time_seconds",
  help = "Length of time per reconciliation per controller", labels = { "controller" },
  buckets = RECONCILE_BUCKETS }
_M.requests = mcore.counter{ name = "rest_client_requests_total",
  help = "Number of HTTP requests, partitioned by status code, method, and host.",
  labels = { "code", "method", "host" } }
_M.request_duration = mcore.histogram{ name = "rest_client_request_duration_seconds",
  help = "Request latency in seconds. Broken down by verb, and host.",
  labels = { "verb", "host" }, buckets = REQUEST_BUCKETS }
_M.leader_status = mcore.gauge{ name = "leader_election_master_status",
  help = "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
    .. "backup, 1 indicates master. 'name' is the string used to identify the lease.",
  labels = { "name" } }
_M.reload_generation = mcore.gauge{ name = "kubelua_reload_generation",
  help = "The generation of the scripts now running (1 for the first load)." }
_M.reload_failures = mcore.counter{ name = "kubelua_reload_failures_total",
  help = "Hot reloads whose script failed to load; the old generation kept running." }

local informer_labels = { "informer" }
local inf_events = mcore.counter{ name = "kubelua_informer_events_total",
  help = "Watch events an informer received (bookmarks included).", labels = informer_labels }
local inf_relists = mcore.counter{ name = "kubelua_informer_relists_total",
  help = "Lists an informer completed after its first.", labels = informer_labels }
local inf_restarts = mcore.counter{ name = "kubelua_informer_watch_restarts_total",
  help = "Watch requests an informer made after its first (a watch ended, failed, expired "
    .. "or was found dead).", labels = informer_labels }
local inf_objects = mcore.gauge{ name = "kubelua_informer_objects",
  help = "Objects in an informer's cache.", labels = informer_labels }
local inf_bytes = mcore.gauge{ name = "kubelua_informer_bytes",
  help = "Bytes of JSON held by an informer's cache.", labels = informer_labels }

-- Lua collectors: functions run before each render, to copy values kept
-- elsewhere into metrics.
local collectors = {}
function _M.on_collect(fn) collectors[#collectors + 1] = fn end

-- Informers are reported by whoever owns them (kubelua's shared
-- informers): fn() -> a list of informers, each with :name() and :stats().
local informer_sources = {}
function _M.informers(fn) informer_sources[#informer_sources + 1] = fn end

local function max_set(m, v, labels)
  -- a counter copied from a C total: an informer that was stopped and made
  -- again starts from 0; the metric keeps its total (never goes down)
  if v > m:value(labels) then m:set(v, labels) end
end

local function collect_informers()
  for i = 1, #informer_sources do
    local infs = informer_sources[i]()
    for j = 1, #infs do
      local inf = infs[j]
      local ok, st = pcall(inf.stats, inf)
      if ok and st then
        local l = { informer = inf:name() }
        max_set(inf_relists, st.relists, l)
        max_set(inf_restarts, st.watches > 0 and st.watches - 1 or 0, l)
        max_set(inf_events, st.events, l)
        inf_objects:set(st.objects, l)
        inf_bytes:set(st.bytes, l)
      end
    end
  end
end

-- render() -> the exposition text of every metric.
---The Prometheus exposition text of every metric, as /metrics serves it.
---@return string
---@usage assert(kube.metrics.render():find("app_synced_total"))
function _M.render()
  collect_informers()
  for i = 1, #collectors do
    local ok, err = pcall(collectors[i])
    if not ok then core.log("warn", "metrics: a collector failed: " .. tostring(err)) end
  end
  return mcore.render()
end

-- Probes ----------------------------------------------------------------------

-- Readiness checks: fn() -> true | false, reason.
local checks = {}
function _M.readiness(name, fn) checks[#checks + 1] = { name = name, fn = fn } end

-- ready() -> true | false, reasons (a list of strings).
function _M.ready()
  local reasons = {}
  for i = 1, #checks do
    local ok, res, why = pcall(checks[i].fn)
    if not ok then
      reasons[#reasons + 1] = checks[i].name .. ": " .. tostring(res)
    elseif not res then
      reasons[#reasons + 1] = checks[i].name .. ": " .. tostring(why or "not ready")
    end
  end
  return #reasons == 0, reasons
end

local function text(req, status, body)
  req:reply(status, { ["Content-Type"] = "text/plain; charset=utf-8" }, body)
end

local function handle_metrics(req)
  local path = req:path():gsub("%?.*", "")
  if path ~= "/metrics" then return text(req, 404, "404 page not found\n") end
  req:reply(200, { ["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8" }, _M.render())
end

local function handle_probes(req)
  local path = req:path()
  if path == "/healthz" or path == "/livez" then return text(req, 200, "ok") end
  if path == "/readyz" then
    local ok, reasons = _M.ready()
    if ok then return text(req, 200, "ok") end
    return text(req, 503, "not ready: " .. concat(reasons, "; ") .. "\n")
  end
  return text(req, 404, "404 page not found\n")
end

-- "HOST:PORT", ":PORT", "[v6]:PORT" -> host, port; "0" or "" -> nil (off).
function _M.parse_address(addr)
  if addr == nil or addr == "" or addr == "0" then return nil end
  local host, port = addr:match("^%[([^%]]*)%]:(%d+)$")
  if not host then host, port = addr:match("^([^:]*):(%d+)$") end
  port = tonumber(port)
  if not port or port > 65535 then
    return nil, format("bad address %q (HOST:PORT, :PORT or 0)", addr)
  end
  return host, port
end

local servers = {}

local function listen(what, addr, handler, path)
  local host, port = _M.parse_address(addr)
  if not host then
    if port then return nil, what .. ": " .. port end
    return true
  end
  local httpd = require "kubelua.httpd"
  local srv, err = httpd.listen{ host = host, port = port, handler = handler }
  if not srv then
    return nil, format("%s: cannot listen on %s: %s", what, addr, tostring(err))
  end
  servers[#servers + 1] = srv
  local shown = host == "" and "0.0.0.0" or host:find(":", 1, true) and "[" .. host .. "]" or host
  core.log("info", format("%s: serving on http://%s:%d%s", what, shown, srv:port(), path))
  return srv
end

-- serve{ metrics = ADDR, probes = ADDR } -> true | nil, message.
function _M.serve(opts)
  local ok, err = listen("metrics", opts.metrics, handle_metrics, "/metrics")
  if not ok then return nil, err end
  ok, err = listen("probes", opts.probes, handle_probes, "/healthz and /readyz")
  if not ok then return nil, err end
  -- while the loop hangs, the watchdog answers /healthz itself
  if ok ~= true then core.hang_probes(ok:fd()) end
  return true
end

return _M
