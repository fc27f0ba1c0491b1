-- bench/soak.lua: a writer and random faults against the simulator while a
-- kubelua controller (bench/soak/mirror.lua, its own `kubelua run`
-- process) mirrors ConfigMaps and custom objects; then checks that nothing
-- was lost. Run it with `bench/run soak [--faults N | --seconds S]`
-- (default: until 10,000 faults); spec/integration/soak_spec.lua runs a
-- short one.
--
-- This process is the API server (kubelua.sim), the writer and the fault
-- injector. It installs the Widget CRD (bench/soak/kinds.lua: namespaced,
-- with a status subresource) before the controller starts. The writer
-- picks a kind, a namespace src-0..src-3 and a name (cm-1..cm-40 or
-- w-1..w-40) at random and creates, updates or deletes that object through
-- the store's request paths (Store:create/update/delete, what POST, PUT and
-- DELETE call): ConfigMaps change data and labels, Widgets change spec and
-- labels or, through the status subresource, only their status. The
-- injector calls Sim:inject, the function behind POST /_sim/faults, at
-- random intervals with one of:
--   drop_watches (abort, or end the stream cleanly), watch_abort_after
--   (mid-event cuts), fail_next 1-5 with 429/500/503 and retry_after 0-1,
--   compact (410 on resume), delay (0.01-0.3 s, turned off again later),
--   hold_watches (0.05-0.5 s without events, then a burst of what was
--   written meanwhile, from the history).
-- reset is left out: it forgets every object and restarts resourceVersions,
-- so the writer's namespaces and objects vanish under it and a client's
-- resourceVersion runs ahead of the server's; "the final state" stops being
-- defined by the writer's operations.
--
-- When the writer stops, faults stop too; then the driver waits until, for
-- each kind,
--   the controller's informer cache (DUMP, key -> resourceVersion, every
--   object of the kind in every namespace, the copies among the
--   ConfigMaps) equals the server's, and
--   every source object has its copy in "mirror" with its content and
--   soak/source-rv = the source's resourceVersion, and no copy is left
--   without its source.
-- Prints one JSON line: operations, faults by kind, events (handler calls in
-- the controller), relists (lists and watch-list streams of the source
-- kinds the server answered), convergence_s (last write to converged),
-- peak_rss_mb (the controller's VmHWM), lost (source objects whose final
-- state the cache or the mirror does not show when the wait ends: must be
-- 0), converged, crashed (the controller exited), objects (on the server,
-- copies included), seconds (of writing), cache_s (last write to the
-- caches equal to the server's: the rest of convergence_s is the workers
-- catching up), and the same figures by kind under "kinds", with retries
-- (failed reconciles retried through the rate limiter) and
-- reflector_wait_s (see below).
--
-- Where convergence_s goes, and why it is long (tens of seconds) by design:
-- the reflectors back off as client-go's do (CLIENTGO.md 6.3: 0.8 s
-- doubling to 30 s, jittered to [d, 2d), reset only after 2 min without a
-- backoff). A 410 after compaction, a 5xx on a list or a 429 each cost a
-- backoff, so a fault every 0.05 s holds every informer at [30, 60) s
-- waits within about a minute: it relists a few times a minute and sees
-- the rest of the writes through those relists, not its watch (events is a
-- small part of operations). When the writer stops, each informer still
-- has what is left of its current wait to serve (reflector_wait_s),
-- sometimes two waits (a watch retried after a 429, then its 410). Then
-- the workers catch up, one write per changed source at the client's 20
-- QPS (controller-runtime's default) since nearly every key changed while
-- the caches waited. The workqueue's rate limiter is not on that path:
-- every reconcile that fails after the last write (a stale cached copy) is
-- followed by an event that adds its key again, and an add does not wait
-- out a backoff.
-- Usage: kubelua run --no-watch bench/soak.lua -- KUBELUA_BINARY [--faults N | --seconds S]
--          [--interval S]   (mean seconds between faults, default 0.05)
local kube = require "kubelua"
local json = require "kubelua.json"
local simlib = require "kubelua.sim"
local proc = require "bench.lib.proc"
local soak = require "bench.soak.kinds"

local BIN = arg and arg[1] or "build/kubelua"
local MAX_FAULTS, MAX_SECONDS = 10000, nil
local FAULT_INTERVAL = 0.05 -- mean seconds between faults
do
  local i = 2
  while arg and arg[i] do
    if arg[i] == "--faults" then MAX_FAULTS = assert(tonumber(arg[i + 1]), "--faults N")
    elseif arg[i] == "--seconds" then
      MAX_SECONDS, MAX_FAULTS = assert(tonumber(arg[i + 1]), "--seconds S"), math.huge
    elseif arg[i] == "--interval" then
      FAULT_INTERVAL = assert(tonumber(arg[i + 1]), "--interval S")
    else error("unknown option " .. arg[i]) end
    i = i + 2
  end
end
local NAMESPACES, NAMES = 4, 40
local WRITE_INTERVAL = 0.004
local CONVERGE_TIMEOUT = 180

local quote, read, running = proc.quote, proc.read, proc.running

local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local sim = simlib.new {}
local s = sim.store
local srv = assert(sim:listen { host = "127.0.0.1", port = 0 })
local ctx = { user_agent = "soak-writer" }
local status_ctx = { user_agent = "soak-writer", subresource = "status" }

for _, ns in ipairs { "src-0", "src-1", "src-2", "src-3", soak.MIRROR } do
  assert(s:create(s:resource("v1", "namespaces"), nil,
    { apiVersion = "v1", kind = "Namespace", metadata = { name = ns } }, ctx))
end
assert(sim:apply_object(soak.crd)) -- established at once

-- The writer's changes of one object, e its store entry (nil: absent);
-- n numbers the operation.
local function write_configmap(res, e, ns, name, n)
  local obj = { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = name, namespace = ns, labels = { gen = tostring(n % 7) } },
    data = { n = tostring(n), text = string.rep(e and "y" or "x", math.random(0, 400)) } }
  if not e then return s:create(res, ns, obj, ctx) end
  if math.random() < 0.75 then
    obj.metadata.resourceVersion = e.obj.metadata.resourceVersion
    return s:update(res, ns, name, obj, ctx)
  end
  return s:delete(res, ns, name, nil, ctx)
end

local function write_widget(res, e, ns, name, n)
  local obj = { apiVersion = res.api_version, kind = "Widget",
    metadata = { name = name, namespace = ns, labels = { gen = tostring(n % 7) } },
    spec = { n = n, text = string.rep(e and "y" or "x", math.random(0, 400)) } }
  if not e then return s:create(res, ns, obj, ctx) end
  local r = math.random()
  obj.metadata.resourceVersion = e.obj.metadata.resourceVersion
  if r < 0.4 then return s:update(res, ns, name, obj, ctx) end
  if r < 0.75 then -- the status alone, through its subresource: no generation bump
    obj.spec, obj.metadata.labels = nil, nil
    obj.status = { observed = n, phase = ({ "Pending", "Ready", "Failed" })[math.random(1, 3)] }
    return s:update(res, ns, name, obj, status_ctx)
  end
  return s:delete(res, ns, name, nil, ctx)
end

-- Each kind: its definition (bench/soak/kinds.lua), store resource, writer
-- and figures.
local writers = { configmaps = { "cm-", write_configmap }, widgets = { "w-", write_widget } }
local kinds, by_res = {}, {}
for i, k in ipairs(soak.kinds) do
  local w = writers[k.resource]
  kinds[i] = { def = k, res = assert(s:resource(k.api_version, k.resource)),
               prefix = w[1], write = w[2], operations = 0, relists = 0 }
  by_res[kinds[i].res] = kinds[i]
end
local cms = s:resource("v1", "configmaps") -- every copy is a ConfigMap

-- relists: lists of a source kind, and its watches that start from the
-- full state. reflector_wait_s: from the last write (t_last) until the
-- kind's reflector next asked for a list or a watch, which is what was
-- left of the backoff it served then (none if its watch stayed open).
local t_last
local function asked(k)
  if t_last and not k.reflector_wait_s then k.reflector_wait_s = kube.monotonic() - t_last end
end
local serve_resource, watch = sim.serve_resource, sim.watch
function sim.serve_resource(self, req, r, user)
  local ret = serve_resource(self, req, r, user)
  local k = by_res[r.res]
  if k and r.verb == "list" then
    k.relists = k.relists + 1
    asked(k)
  end
  return ret
end
function sim.watch(self, req, res, ns, params, r) -- streams until the watch ends
  local rv, k = params.resourceVersion, by_res[res]
  if k then
    if params.sendInitialEvents == "true" or not rv or rv == "" or rv == "0" then
      k.relists = k.relists + 1
    end
    asked(k)
  end
  return watch(self, req, res, ns, params, r)
end

local operations, writing = 0, true
local function write_one()
  local k = kinds[math.random(1, #kinds)]
  local ns = "src-" .. math.random(0, NAMESPACES - 1)
  local name = k.prefix .. math.random(1, NAMES)
  local n = operations + 1
  local ok, err = k.write(k.res, k.res.objects[ns .. "/" .. name], ns, name, n)
  if not ok then error("writer: " .. tostring(err and err.message)) end
  operations, k.operations = n, k.operations + 1
end

local faults, nfaults = {}, 0
local function fault_one()
  local kind = ({ "drop_watches", "watch_abort_after", "fail_next", "compact", "delay",
    "hold_watches" })[math.random(1, 6)]
  local f = {}
  if kind == "drop_watches" then
    f.drop_watches = math.random() < 0.5 and "end" or true
  elseif kind == "watch_abort_after" then
    f.watch_abort_after = math.random(0, 3000)
  elseif kind == "fail_next" then
    f.fail_next = math.random(1, 5)
    f.code = ({ 429, 500, 503 })[math.random(1, 3)]
    f.retry_after = math.random(0, 1)
  elseif kind == "compact" then
    f.compact = true
  elseif kind == "hold_watches" then
    f.hold_watches = true
    kube.after(0.05 + math.random() * 0.45, function() sim:inject { hold_watches = false } end)
  else
    f.delay = 0.01 + math.random() * 0.29
    kube.after(0.2 + math.random(), function() sim:inject { delay = 0 } end)
  end
  sim:inject(f)
  faults[kind] = (faults[kind] or 0) + 1
  nfaults = nfaults + 1
end

-- The controller's view, or nil while DUMP is missing.
local function dump(path)
  local t = json.decode(read(path) or "")
  return type(t) == "table" and t or nil
end

-- What kind k's final state lacks: keys whose resourceVersion the
-- controller's cache does not show (stale, missing, or extra: not on the
-- server), and source keys whose copy is missing or stale plus copies left
-- without their source. math.huge twice while DUMP is missing.
local function lost_of(k, d)
  if not d then return math.huge, math.huge end
  local resource, objects = k.def.resource, k.res.objects
  local cache = d.cache[resource] or {}
  local stale, unmirrored = 0, 0
  for key, e in pairs(objects) do
    local rv = e.obj.metadata.resourceVersion
    if cache[key] ~= rv then stale = stale + 1 end
    if e.ns:match("^src%-") then
      local m = cms.objects[soak.MIRROR .. "/" .. soak.copy_name(resource, e.ns, e.name)]
      if not m or (m.obj.metadata.annotations or {})["soak/source-rv"] ~= rv
          or not same(m.obj.data, k.def.copy_data(e.obj)) then
        unmirrored = unmirrored + 1
      end
    end
  end
  for key in pairs(cache) do
    if not objects[key] then stale = stale + 1 end
  end
  for _, e in pairs(cms.objects) do
    local of, key = soak.source_of(e.key)
    if of == resource and not objects[key] then unmirrored = unmirrored + 1 end
  end
  return stale, unmirrored
end

local function seconds(t) return t and ("%.2f"):format(t) or "null" end
local function count(n) return n == math.huge and -1 or n end

-- The JSON line; the totals are sums over the kinds, cache_s their latest.
local function report(d, lost, waited, peak, crashed, writing_s)
  local fk, per, events, relists, objects, cache_s = {}, {}, 0, 0, 0, 0
  for k, v in pairs(faults) do fk[#fk + 1] = ('"%s":%d'):format(k, v) end
  table.sort(fk)
  for _, k in ipairs(kinds) do
    local ev, retries = d.events[k.def.resource] or 0, d.retries[k.def.resource] or 0
    events, relists, objects = events + ev, relists + k.relists, objects + k.res.count
    cache_s = k.cache_s and cache_s and math.max(cache_s, k.cache_s) or nil
    per[#per + 1] = ('"%s":{"operations":%d,"events":%d,"retries":%d,"relists":%d,'
      .. '"reflector_wait_s":%.2f,"cache_s":%s,"convergence_s":%s,"lost":%d,"objects":%d}'):format(
      k.def.resource, k.operations, ev, retries, k.relists, k.reflector_wait_s or 0,
      seconds(k.cache_s), seconds(k.convergence_s), count(k.lost), k.res.count)
  end
  return ('{"bench":"soak","operations":%d,"faults":{%s},"events":%d,"relists":%d,'
    .. '"convergence_s":%.2f,"peak_rss_mb":%.1f,"lost":%d,"converged":%s,"crashed":%s,'
    .. '"objects":%d,"seconds":%.0f,"cache_s":%s,"kinds":{%s}}'):format(operations,
    table.concat(fk, ","), events, relists, waited, peak / 1024, count(lost),
    tostring(lost == 0), tostring(crashed), objects, writing_s, seconds(cache_s),
    table.concat(per, ","))
end

local function main()
  local kubeconfig, dumpfile, log = proc.kubeconfig(srv:port()), os.tmpname(), os.tmpname()
  os.remove(dumpfile)
  local pid = proc.start(quote(BIN) .. " run --no-watch --kubeconfig " .. quote(kubeconfig)
    .. " bench/soak/mirror.lua " .. quote(dumpfile), log, log .. ".err")
  local deadline = kube.monotonic() + 30
  repeat
    kube.sleep(0.05)
    assert(running(pid), "the controller exited: " .. (read(log .. ".err") or ""))
    assert(kube.monotonic() < deadline, "the controller did not sync")
    local d = dump(dumpfile)
  until d and d.synced

  local t0 = kube.monotonic()
  kube.spawn(function()
    while writing do
      write_one()
      kube.sleep(WRITE_INTERVAL * 2 * math.random())
    end
  end)
  local crashed = false
  while nfaults < MAX_FAULTS and (not MAX_SECONDS or kube.monotonic() - t0 < MAX_SECONDS) do
    fault_one()
    kube.sleep(FAULT_INTERVAL * 2 * math.random())
    if not running(pid) then crashed = true break end
  end
  writing = false
  kube.sleep(0.01) -- the writer's last operation is done
  sim:inject { delay = 0, fail_next = 0, hold_watches = false }
  t_last = kube.monotonic()
  -- Each kind's cache_s and convergence_s: since the last write, until the
  -- check that began the final run of clean checks (a kind's ConfigMap
  -- cache also holds the other kind's copies, so it may go stale again).
  local lost, waited
  while true do
    local d = dump(dumpfile)
    waited, lost = kube.monotonic() - t_last, 0
    for _, k in ipairs(kinds) do
      local stale, unmirrored = lost_of(k, d)
      k.lost = stale + unmirrored
      if stale > 0 then k.cache_s = nil elseif not k.cache_s then k.cache_s = waited end
      if k.lost > 0 then k.convergence_s = nil
      elseif not k.convergence_s then k.convergence_s = waited end
      lost = lost + k.lost
    end
    if lost == 0 or waited > CONVERGE_TIMEOUT then break end
    if not running(pid) then crashed = true break end
    kube.sleep(0.05)
  end
  local d = dump(dumpfile) or { events = {}, retries = {} }
  local peak = proc.status_kb(pid, "VmHWM") or 0
  crashed = crashed or not running(pid)
  os.execute("kill " .. pid)
  while running(pid) do kube.sleep(0.01) end
  local out = (read(log) or "") .. (read(log .. ".err") or "")
  os.remove(kubeconfig)
  os.remove(dumpfile)
  os.remove(log)
  os.remove(log .. ".err")
  print(report(d, lost, waited, peak, crashed, t_last - t0))
  if crashed then io.stderr:write("the controller's log:\n", out, "\n") end
  return lost == 0 and not crashed
end

kube.spawn(function()
  local ok, res = xpcall(main, debug.traceback)
  if not ok then io.stderr:write("bench/soak: ", tostring(res), "\n") end
  srv:close()
  kube.stop((ok and res) and 0 or 1)
end)
