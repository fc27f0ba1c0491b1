-- bench/sim.lua: how fast the API simulator serves (a benchmark, not a
-- test; bench/run sim prints its one JSON line).
--
--   one_watcher_events_per_s   MODIFIED events of 2.4 KB Pods delivered to
--                              one watcher (a curl process reading the
--                              stream) while a writer changes objects
--   ten_watchers_events_per_s  the same events to 10 watchers at once
--                              (each event counted once)
--   replay_events_per_s        the same number of events written while
--                              one watcher is held, then sent to it from
--                              the history: delivery without the writer,
--                              what bench/compare's clients get
--   list_mb_per_s              a list of 100,000 Pods read by curl
--   writer_events_per_s        the writer with no watcher: its own limit,
--                              and a gauge of how fast this machine runs
--                              at the time (the live figures follow it)
--
-- The writer changes Pods through the store's event path for objects given
-- as JSON bytes (Store:put_json: the metadata read, a new resourceVersion,
-- the history, the event written to every watcher), pausing when a
-- watcher's unsent output passes 4 MiB, as the simulator's own handlers do.
-- Time runs from the first event to the moment every watcher has read the
-- end of its stream. The watch and writer figures are medians over SIM_RUNS
-- rounds (default 5; the *_each lists give every round's): single runs on
-- this 2-core VM vary by tens of percent.
local kube = require "kubelua"
local json = require "kubelua.json"
local simlib = require "kubelua.sim"
local podlib = require "bench.lib.pods"
local median = require("bench.lib.stats").median

local EVENTS = tonumber(arg and arg[1]) or 200000
local RUNS = tonumber(os.getenv("SIM_RUNS")) or 5
local OBJECTS = 1000
local LIST_OBJECTS = tonumber(arg and arg[2]) or 100000

local function quote(x) return "'" .. x:gsub("'", "'\\''") .. "'" end

local function sh_bg(cmd)
  local p = io.popen("sh -c " .. quote(cmd .. " & echo $!"))
  local pid = p:read("*l")
  p:close()
  return pid
end

local running = require("bench.lib.proc").running

local function wait_exit(pids)
  for _, pid in ipairs(pids) do
    while running(pid) do kube.sleep(0.002) end
  end
end

local function watcher_count(res)
  local n = 0
  for _ in pairs(res.watchers) do n = n + 1 end
  return n
end

local sim = simlib.new { history_size = 1000 }
local s = sim.store
local srv = assert(sim:listen { host = "127.0.0.1", port = 0 })
local base = "http://127.0.0.1:" .. srv:port()
local pods = s:resource("v1", "pods")

-- Pod i as a new table sharing the template's unchanged parts.
local function pod(i, ns, variant)
  return podlib.table(i, ns, variant, tostring(s:next_rv()))
end

-- Pod i as JSON bytes (its namespace is ns-(i mod 50)).
local function pod_json(i, variant)
  return podlib.pod_bytes(i, s:next_rv(), variant)
end

local function populate(n)
  for i = 1, n do s:put(pods, pod(i, podlib.namespace(s, i), 0), "ADDED") end
end

-- Runs EVENTS modifications with nwatchers watching; returns events/s.
local function watch_phase(nwatchers)
  local pids = {}
  for i = 1, nwatchers do
    pids[i] = sh_bg("exec curl -s -N -A kube-bench -o /dev/null " .. quote(base
      .. "/api/v1/pods?watch=true&resourceVersion=" .. s.rv .. "&timeoutSeconds=600"))
  end
  while watcher_count(pods) < nwatchers do kube.sleep(0.005) end
  local keys, ids = podlib.cycle(s, pods)
  local nkeys = #keys -- not #keys per event: a length is a search
  local t0 = kube.now()
  for n = 1, EVENTS do
    local j = n % nkeys + 1
    s:put_json(pods, pod_json(ids[j], n), "MODIFIED", pods.objects[keys[j]])
    if n % 256 == 0 then
      for w in pairs(pods.watchers) do
        if w.req:buffered() > 4 * 1024 * 1024 then w.req:wait_drain() end
      end
    end
  end
  sim:inject { drop_watches = "end" }
  wait_exit(pids)
  return EVENTS / (kube.now() - t0)
end

-- EVENTS modifications written while one watcher is held (the hold_watches
-- fault), then sent to it from the history as fast as it reads: the
-- simulator's delivery without the writer. A simulator of its own, whose
-- history holds them all; returns events/s from the release to the
-- watcher's end of stream.
local function replay_phase()
  local rsim = simlib.new { history_size = EVENTS + 1 }
  local rs = rsim.store
  local rsrv = assert(rsim:listen { host = "127.0.0.1", port = 0 })
  local rpods = rs:resource("v1", "pods")
  for i = 1, OBJECTS do
    podlib.namespace(rs, i)
    rs:put_json(rpods, podlib.pod_bytes(i, rs:next_rv(), 0), "ADDED")
  end
  local pid = sh_bg("exec curl -s -N -A kube-bench -o /dev/null " .. quote("http://127.0.0.1:"
    .. rsrv:port() .. "/api/v1/pods?watch=true&resourceVersion=" .. rs.rv
    .. "&timeoutSeconds=600"))
  while watcher_count(rpods) < 1 do kube.sleep(0.005) end
  rsim:inject { hold_watches = true }
  local keys, ids = podlib.cycle(rs, rpods)
  local nkeys = #keys -- not #keys per event: a length is a search
  for n = 1, EVENTS do
    local j = n % nkeys + 1
    rs:put_json(rpods, podlib.pod_bytes(ids[j], rs:next_rv(), n), "MODIFIED",
      rpods.objects[keys[j]])
  end
  local t0 = kube.now()
  rsim:inject { hold_watches = false }
  local w
  repeat -- caught up: live again, nothing left unsent
    kube.sleep(0.002)
    w = next(rpods.watchers)
  until w and w.req:buffered() == 0
  rsim:inject { drop_watches = "end" }
  wait_exit { pid }
  local rate = EVENTS / (kube.now() - t0)
  rsrv:close()
  return rate
end

-- replay_phase, then what lets its simulator (half a gigabyte of history)
-- go, so that the phases after it run without it: a moment for the
-- watch's handler to see its request end (it wakes when it does), and
-- jit.flush(), as compiled traces keep the functions they were recorded
-- with (the simulator's closures among them).
local function replay_alone()
  local rate = replay_phase()
  kube.sleep(0.05)
  jit.flush()
  return rate
end

local function list_phase()
  -- top the Pods up to LIST_OBJECTS
  for i = pods.count + 1, LIST_OBJECTS do
    s:put(pods, pod(i, podlib.namespace(s, i), 0), "ADDED")
  end
  local out = os.tmpname()
  local t0 = kube.now()
  local pid = sh_bg("exec curl -s -A kube-bench -o /dev/null -w %{size_download} "
    .. quote(base .. "/api/v1/pods") .. " >" .. out)
  wait_exit { pid }
  local dt = kube.now() - t0
  local fh = io.open(out)
  local bytes = tonumber(fh:read("*a"))
  fh:close()
  os.remove(out)
  return bytes / dt / 1e6, bytes
end

kube.spawn(function()
  populate(OBJECTS)
  local one, ten, replay, writer = {}, {}, {}, {}
  for r = 1, RUNS do
    writer[r] = math.floor(watch_phase(0))
    one[r] = math.floor(watch_phase(1))
    ten[r] = math.floor(watch_phase(10))
    replay[r] = math.floor(replay_alone())
    collectgarbage() -- the replay's simulator and its history
  end
  local list_mb, bytes = list_phase()
  print(json.encode {
    bench = "sim",
    one_watcher_events_per_s = median(one),
    ten_watchers_events_per_s = median(ten),
    replay_events_per_s = median(replay),
    writer_events_per_s = median(writer),
    list_mb_per_s = math.floor(list_mb * 10) / 10,
    list_objects = LIST_OBJECTS,
    list_bytes = bytes,
    events = EVENTS,
    runs = RUNS,
    one_watcher_events_per_s_each = json.array(one),
    ten_watchers_events_per_s_each = json.array(ten),
    replay_events_per_s_each = json.array(replay),
    writer_events_per_s_each = json.array(writer),
  })
  srv:close()
  kube.stop()
end)
