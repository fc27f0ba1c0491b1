-- bench/soak.lua: a writer and random faults against the simulator while a
-- kubelua controller (bench/soak/mirror.lua, its own `kubelua run`
-- process) mirrors ConfigMaps; then checks that nothing was lost. Run it
-- with `bench/run soak [--faults N | --seconds S]` (default: until 10,000
-- faults); spec/integration/soak_spec.lua runs a short one.
--
-- This process is the API server (kubelua.sim), the writer and the fault
-- injector. The writer creates, updates (data and labels) and deletes
-- ConfigMaps cm-1..cm-40 at random in the namespaces src-0..src-3 through
-- the store's request paths (Store:create/update/delete, what POST, PUT
-- and DELETE call). The injector calls Sim:inject, the function behind
-- POST /_sim/faults, at random intervals with one of:
--   drop_watches (abort, or end the stream cleanly), watch_abort_after
--   (mid-event cuts), fail_next 1-5 with 429/500/503 and retry_after 0-1,
--   compact (410 on resume), delay (0.01-0.3 s, turned off again later).
-- reset is left out: it forgets every object and restarts resourceVersions,
-- so the writer's namespaces and objects vanish under it and a client's
-- resourceVersion runs ahead of the server's; "the final state" stops being
-- defined by the writer's operations.
--
-- When the writer stops, faults stop too; then the driver waits until
--   the controller's informer cache (DUMP, key -> resourceVersion, every
--   ConfigMap in every namespace) equals the server's, and
--   every source object has its copy in "mirror" with the same data and
--   soak/source-rv = the source's resourceVersion, and no copy is left
--   without its source.
-- Prints one JSON line: operations, faults by kind, events (handler calls in
-- the controller), relists (lists and watch-list streams of ConfigMaps the
-- server answered), convergence_s (last write to converged), peak_rss_mb
-- (the controller's VmHWM), lost (source objects whose final state the
-- cache or the mirror does not show when the wait ends: must be 0),
-- converged, crashed (the controller exited).
-- Usage: kubelua run --no-watch bench/soak.lua KUBELUA_BINARY [--faults N | --seconds S]
--          [--interval S]   (mean seconds between faults, default 0.05)
local kube = require "kubelua"
local json = require "kubelua.json"
local simlib = require "kubelua.sim"
local proc = require "bench.lib.proc"

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
local cms = s:resource("v1", "configmaps")
local ctx = { user_agent = "soak-writer" }

-- relists: lists of ConfigMaps, and watches that start from the full state
local relists = 0
local serve_resource, watch = sim.serve_resource, sim.watch
function sim.serve_resource(self, req, r, user)
  local ret = serve_resource(self, req, r, user)
  if r.verb == "list" and r.res == cms then relists = relists + 1 end
  return ret
end
function sim.watch(self, req, res, ns, params, r)
  local rv = params.resourceVersion
  if res == cms and (params.sendInitialEvents == "true" or not rv or rv == "" or rv == "0") then
    relists = relists + 1
  end
  return watch(self, req, res, ns, params, r)
end

for _, ns in ipairs { "src-0", "src-1", "src-2", "src-3", "mirror" } do
  assert(s:create(s:resource("v1", "namespaces"), nil,
    { apiVersion = "v1", kind = "Namespace", metadata = { name = ns } }, ctx))
end

local operations, writing = 0, true
local function write_one()
  local ns = "src-" .. math.random(0, NAMESPACES - 1)
  local name = "cm-" .. math.random(1, NAMES)
  local e = cms.objects[ns .. "/" .. name]
  local n = operations + 1
  local ok, err
  if not e then
    ok, err = s:create(cms, ns, { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = name, namespace = ns, labels = { gen = tostring(n % 7) } },
      data = { n = tostring(n), text = string.rep("x", math.random(0, 400)) } }, ctx)
  elseif math.random() < 0.75 then
    local obj = { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = name, namespace = ns, resourceVersion = e.obj.metadata.resourceVersion,
                   labels = { gen = tostring(n % 7) } },
      data = { n = tostring(n), text = string.rep("y", math.random(0, 400)) } }
    ok, err = s:update(cms, ns, name, obj, ctx)
  else
    ok, err = s:delete(cms, ns, name, nil, ctx)
  end
  if not ok then error("writer: " .. tostring(err and err.message)) end
  operations = n
end

local faults, nfaults = {}, 0
local function fault_one()
  local kind = ({ "drop_watches", "watch_abort_after", "fail_next", "compact", "delay" })
    [math.random(1, 5)]
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

-- Source keys whose final state the controller's cache or mirror does
-- not show; extra keys (in the cache or the mirror, not on the server)
-- count too.
local function lost_objects(d)
  if not d then return math.huge end
  local lost = 0
  local cache = d.cache
  for key, e in pairs(cms.objects) do
    if cache[key] ~= e.obj.metadata.resourceVersion then lost = lost + 1 end
    if e.ns:match("^src%-") then
      local m = cms.objects["mirror/" .. e.ns .. "." .. e.name]
      if not m or (m.obj.metadata.annotations or {})["soak/source-rv"]
          ~= e.obj.metadata.resourceVersion or not same(m.obj.data, e.obj.data) then
        lost = lost + 1
      end
    end
  end
  for key in pairs(cache) do
    if not cms.objects[key] then lost = lost + 1 end
  end
  for _, e in pairs(cms.objects) do
    if e.ns == "mirror" then
      local ns, name = e.name:match("^([^.]+)%.(.+)$")
      if not cms.objects[ns .. "/" .. name] then lost = lost + 1 end
    end
  end
  return lost
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
  sim:inject { delay = 0, fail_next = 0 }
  local t_last = kube.monotonic()
  local lost
  while true do
    lost = lost_objects(dump(dumpfile))
    if lost == 0 or kube.monotonic() - t_last > CONVERGE_TIMEOUT then break end
    if not running(pid) then crashed = true break end
    kube.sleep(0.05)
  end
  local convergence = kube.monotonic() - t_last
  local d = dump(dumpfile) or {}
  local peak = proc.status_kb(pid, "VmHWM") or 0
  crashed = crashed or not running(pid)
  os.execute("kill " .. pid)
  while running(pid) do kube.sleep(0.01) end
  local out = (read(log) or "") .. (read(log .. ".err") or "")
  os.remove(kubeconfig)
  os.remove(dumpfile)
  os.remove(log)
  os.remove(log .. ".err")
  local fk = {}
  for k, v in pairs(faults) do fk[#fk + 1] = ('"%s":%d'):format(k, v) end
  table.sort(fk)
  print(('{"bench":"soak","operations":%d,"faults":{%s},"events":%d,"relists":%d,'
    .. '"convergence_s":%.2f,"peak_rss_mb":%.1f,"lost":%d,"converged":%s,"crashed":%s,'
    .. '"objects":%d,"seconds":%.0f}'):format(operations, table.concat(fk, ","),
    d.events or 0, relists, convergence, peak / 1024, lost == math.huge and -1 or lost,
    tostring(lost == 0), tostring(crashed), cms.count, t_last - t0))
  if crashed then io.stderr:write("the controller's log:\n", out, "\n") end
  return lost == 0 and not crashed
end

kube.spawn(function()
  local ok, res = xpcall(main, debug.traceback)
  if not ok then io.stderr:write("bench/soak: ", tostring(res), "\n") end
  srv:close()
  kube.stop((ok and res) and 0 or 1)
end)
