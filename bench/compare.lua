-- bench/compare.lua: kubelua's informer side by side with
-- @kubernetes/client-node's makeInformer (a benchmark, not a test; run it
-- with `bench/run compare [N M]`, which installs client-node first).
--
-- This process is the API server: the simulator (kubelua.sim) holding N
-- generated 2.4 KB Pods (bench/lib/pods' template: managedFields included,
-- namespaces ns-(i mod 50)). Each client runs in its own process, one after
-- the other: `node bench/compare/client-node.mjs`, then `kubelua run
-- bench/compare/kubelua_client.lua`. For each:
--   sync_s              start of the informer until the initial list is cached
--   bytes_per_object    (VmRSS after sync, after a full GC) - (VmRSS before
--                       the informer starts) / N
--   watch_events_per_s  M MODIFIED events: first to M-th event reaching the
--                       client's handler (the client counts them: exactly M
--                       update events, no other event, or the run fails)
--   cpu_s               the client's utime + stime (/proc/self/stat) from
--                       the informer's start to the M-th event
-- Each system runs COMPARE_RUNS times (default 3), in rounds; each figure
-- printed is its median over the runs (watch_events_per_s_each lists the
-- runs' events/s), and the ratios are those of the medians.
--   events_per_cpu_s    M / the client's CPU seconds in the watch phase:
--                       what the client could take if the writer were not
--                       the limit (see below)
-- The writer is this process: it changes Pods (an annotation and
-- status.hostIP), each given as its JSON bytes, through the store's event
-- path for such objects, Store:put_json: the JSON checked and its metadata
-- read, a new resourceVersion, the history. It skips what a PUT does
-- before that (decoding the body, validation, managedFields, encoding),
-- which runs at about 1,700 Pods/s here and would make both clients wait
-- for the writer.
-- Delivery (COMPARE_DELIVERY):
--   held (default)  the client's watch is held (the simulator's
--                   hold_watches fault) while the writer makes the M
--                   events, then released: the events reach the client
--                   from the history as fast as it reads them, so
--                   watch_events_per_s is the client's own rate, the same
--                   replay for every client.
--   live            the writer sends each event as it makes it, pausing
--                   while the watcher's unsent output passes 4 MiB: a
--                   client faster than the writer is held to the writer's
--                   rate.
-- writer_events_per_s is what the writer reached (with the watcher, when
-- live).
-- Usage: kubelua run --no-watch bench/compare.lua KUBELUA_BINARY [N [M [SYSTEMS]]]
local kube = require "kubelua"
local json = require "kubelua.json"
local simlib = require "kubelua.sim"
local median = require("bench.lib.stats").median
local proc = require "bench.lib.proc"
local podlib = require "bench.lib.pods"

local BIN = arg and arg[1] or "build/kubelua"
local N = tonumber(arg and arg[2]) or 20000
local M = tonumber(arg and arg[3]) or 200000
local SYSTEMS = arg and arg[4] or "client-node,kubelua"
local TIMEOUT = 1800

local quote, read, running = proc.quote, proc.read, proc.running

local RUNS = tonumber(os.getenv("COMPARE_RUNS") or "3")
assert(RUNS and RUNS >= 1 and RUNS % 1 == 0, "COMPARE_RUNS is a whole number >= 1")
local DELIVERY = os.getenv("COMPARE_DELIVERY") or "held"
assert(DELIVERY == "held" or DELIVERY == "live", "COMPARE_DELIVERY is held or live")

-- held: the history keeps every event of a run
local sim = simlib.new { history_size = math.max(20000, M + 1) }
local s = sim.store
local srv = assert(sim:listen { host = "127.0.0.1", port = 0 })
local pods = s:resource("v1", "pods")

local function pod(i, ns, variant, rv) return podlib.table(i, ns, variant, rv, true) end

local function populate(n)
  for i = 1, n do
    local p = pod(i, podlib.namespace(s, i), 0, tostring(s:next_rv()))
    s:put(pods, p, "ADDED")
  end
end

-- Starts a client; returns its pid and output file.
local function start(cmd)
  local out = os.tmpname()
  return proc.start(cmd, out, out .. ".err"), out
end

-- Waits for the client's line of `phase`; returns it decoded.
local function wait_line(pid, out, phase)
  local deadline = kube.monotonic() + TIMEOUT
  while kube.monotonic() < deadline do
    for line in (read(out) or ""):gmatch("[^\n]+") do
      local t = json.decode(line)
      if t and t.phase == phase then return t end
      if t and t.phase == "error" then error("client failed: " .. line) end
    end
    if not running(pid) then
      error("the client exited: " .. (read(out) or "") .. (read(out .. ".err") or ""))
    end
    kube.sleep(0.02)
  end
  error("the client gave no " .. phase .. " line in " .. TIMEOUT .. " s")
end

local variant = 0

-- M modifications through the store's event path; returns events/s.
local function write_events()
  local keys, ids = podlib.cycle(s, pods)
  local nkeys = #keys -- not #keys per event: a length is a search
  local t0 = kube.monotonic()
  for n = 1, M do
    local j = n % nkeys + 1
    variant = variant + 1
    s:put_json(pods, podlib.pod_bytes(ids[j], s:next_rv(), variant, true), "MODIFIED",
      pods.objects[keys[j]])
    if n % 256 == 0 then
      for w in pairs(pods.watchers) do
        while w.req:alive() and w.req:buffered() > 4 * 1024 * 1024 do w.req:wait_drain() end
      end
      kube.sleep(0)
    end
  end
  return M / (kube.monotonic() - t0)
end

local function run_system(name, cmd)
  local pid, out = start(cmd)
  local synced = wait_line(pid, out, "synced")
  assert(synced.objects == N, name .. ": cached " .. tostring(synced.objects) .. " of " .. N)
  -- the watch is open (client-node's start() resolves then; kubelua's
  -- watch-list stream carried the list), so every write reaches it
  local deadline = kube.monotonic() + 30
  while next(pods.watchers) == nil do
    assert(kube.monotonic() < deadline, name .. ": no watch opened")
    kube.sleep(0.01)
  end
  if DELIVERY == "held" then sim:inject { hold_watches = true } end
  local writer = write_events()
  if DELIVERY == "held" then
    -- the writer's garbage collected now, not while the client reads on
    -- the other core (a collection over this heap competes for memory)
    collectgarbage()
    sim:inject { hold_watches = false }
  end
  local done = wait_line(pid, out, "done")
  kube.sleep(0.5) -- an extra event would arrive now
  local extra
  for line in (read(out) or ""):gmatch("[^\n]+") do
    local t = json.decode(line)
    if t and t.phase ~= "synced" and t.phase ~= "done" then extra = line end
  end
  os.execute("kill " .. pid)
  while running(pid) do kube.sleep(0.01) end
  os.remove(out)
  os.remove(out .. ".err")
  assert(not extra, name .. ": " .. tostring(extra))
  assert(done.events == M and done.other_events == 0,
    name .. ": " .. done.events .. " updates and " .. done.other_events .. " other events")
  -- drop the watch's leftovers before the next client
  sim:inject { drop_watches = "end" }
  local watch_cpu = done.cpu_s - synced.cpu_s
  return {
    system = name,
    sync_s = synced.sync_s,
    watch_events_per_s = M / done.watch_s,
    bytes_per_object = (synced.rss_after - synced.rss_before) / N,
    cpu_s = done.cpu_s,
    events_per_cpu_s = M / math.max(watch_cpu, 0.01),
    writer_events_per_s = writer,
  }
end

local FIELDS = { "sync_s", "watch_events_per_s", "bytes_per_object", "cpu_s", "events_per_cpu_s",
  "writer_events_per_s" }

-- Each figure's median over a system's runs, and its events/s in each run.
local function median_of(rs)
  local m = { system = rs[1].system, each = {} }
  for i, r in ipairs(rs) do m.each[i] = ("%.0f"):format(r.watch_events_per_s) end
  for _, f in ipairs(FIELDS) do
    local v = {}
    for i, r in ipairs(rs) do v[i] = r[f] end
    m[f] = median(v)
  end
  return m
end

local function line(r)
  return ('{"system":"%s","objects":%d,"events":%d,"runs":%d,"sync_s":%.3f,'
    .. '"watch_events_per_s":%.0f,"bytes_per_object":%.0f,"cpu_s":%.2f,"events_per_cpu_s":%.0f,'
    .. '"writer_events_per_s":%.0f,"watch_events_per_s_each":[%s]}'):format(r.system, N, M,
    #r.each, r.sync_s, r.watch_events_per_s, r.bytes_per_object, r.cpu_s, r.events_per_cpu_s,
    r.writer_events_per_s, table.concat(r.each, ","))
end

local function main()
  populate(N)
  local kubeconfig = proc.kubeconfig(srv:port())
  local cmds = {
    ["client-node"] = "node --expose-gc bench/compare/client-node.mjs " .. quote(kubeconfig)
      .. " " .. M,
    kubelua = quote(BIN) .. " run --no-watch --kubeconfig " .. quote(kubeconfig)
      .. " bench/compare/kubelua_client.lua " .. M,
    ["kubelua-managed-fields"] = quote(BIN) .. " run --no-watch --kubeconfig "
      .. quote(kubeconfig)
      .. " bench/compare/kubelua_client.lua " .. M .. " keep_managed_fields",
  }
  local runs, names = {}, {}
  for name in SYSTEMS:gmatch("[^,]+") do
    assert(cmds[name], "unknown system " .. name)
    names[#names + 1], runs[name] = name, {}
  end
  for _ = 1, RUNS do -- rounds, so that drift in the machine reaches every system alike
    for _, name in ipairs(names) do
      local r = run_system(name, cmds[name])
      table.insert(runs[name], r)
    end
  end
  local results = {}
  for _, name in ipairs(names) do
    local r = median_of(runs[name])
    results[name] = r
    print(line(r))
    io.stdout:flush()
  end
  os.remove(kubeconfig)
  local k, c = results.kubelua, results["client-node"]
  if k and c then
    print(('{"bench":"compare","objects":%d,"events":%d,"delivery":"%s","events_ratio":%.2f,'
      .. '"bytes_ratio":%.3f,"sync_ratio":%.3f,"cpu_events_ratio":%.2f}'):format(N, M, DELIVERY,
      k.watch_events_per_s / c.watch_events_per_s, k.bytes_per_object / c.bytes_per_object,
      k.sync_s / c.sync_s, k.events_per_cpu_s / c.events_per_cpu_s))
  end
  srv:close()
end

kube.spawn(function()
  local ok, err = xpcall(main, debug.traceback)
  if not ok then io.stderr:write("bench/compare: ", tostring(err), "\n") end
  kube.stop(ok and 0 or 1)
end)
