-- bench/compare.lua: kubelua's informer side by side with
-- @kubernetes/client-node's makeInformer (a benchmark, not a test; run it
-- with `bench/run compare [N M]`, which installs client-node first), list
-- then watch as a user meets it.
--
-- The server is a replay server (bench/replay.lua, its own process, which
-- writes prepared bytes, so that its cost stays out of the figures): N Pods
-- (default 20,000; BENCH_OBJECTS: realistic, the default, or alike) and M
-- kubelet status updates of them (default 200,000), which it holds until
-- the client has synced and then sends as fast as the client reads. It
-- answers the streaming-list request with 422 as kube-apiserver 1.26 does,
-- so both clients list (kubelua asks limit=500&resourceVersion=0, which the
-- server answers whole as 1.26's watch cache does; client-node asks no
-- limit), then watch ("list-watch" lines). A second server serves streaming lists:
-- kubelua's line on that path ("watch-list"; client-node has none). Each
-- client runs in its own process (`node bench/compare/client-node.mjs`,
-- `kubelua run bench/compare/kubelua_client.lua`), COMPARE_RUNS times each
-- (default 3), in rounds; each figure is the median over the runs (see
-- bench/lib/listwatch.lua for how each is measured):
--   sync_s               start of the informer until the list is cached
--   bytes_per_object     RSS growth with every Pod cached, after a full GC
--   heap_bytes_per_object  the runtime's own heap figure, the same way
--                        (kubelua: the Lua heap, the cache being C memory
--                        outside it; client-node: the V8 heap)
--   peak_rss_ratio       peak RSS during the list / RSS after sync
--   watch_events_per_s   M events: release of the held events to the M-th
--                        reaching the client's handler (exactly M update
--                        events, no other event, or the run fails)
--   cpu_us_per_event     the client's CPU time over the watch, per event
-- The last line gives kubelua's list-watch figures over client-node's.
-- Usage: kubelua run --no-watch bench/compare.lua KUBELUA_BINARY [N [M [SYSTEMS]]]
local listwatch = require "bench.lib.listwatch"

local BIN = arg and arg[1] or "build/kubelua"
local N = tonumber(arg and arg[2]) or 20000
local M = tonumber(arg and arg[3]) or 200000
local SYSTEMS = arg and arg[4] or "client-node,kubelua"

local RUNS = tonumber(os.getenv("COMPARE_RUNS") or "3")
assert(RUNS and RUNS >= 1 and RUNS % 1 == 0, "COMPARE_RUNS is a whole number >= 1")

listwatch.spawn("bench/compare", function()
  local systems, streaming = {}, {}
  for name in SYSTEMS:gmatch("[^,]+") do
    systems[#systems + 1] = name
    if name ~= "client-node" then streaming[#streaming + 1] = name end
  end
  local paths = { { path = "list-watch", systems = systems } }
  if #streaming > 0 then paths[2] = { path = "watch-list", systems = streaming } end
  local res = listwatch.main { name = "compare", bin = BIN, n = N, m = M, runs = RUNS,
    paths = paths }
  local k, c = res["list-watch kubelua"], res["list-watch client-node"]
  if k and c then
    print(('{"bench":"compare","objects":"%s","count":%d,"events":%d,"path":"list-watch",'
      .. '"events_ratio":%.2f,"cpu_ratio":%.2f,"bytes_ratio":%.3f,"sync_ratio":%.3f}'):format(
      listwatch.objects, N, M, k.watch_events_per_s / c.watch_events_per_s,
      c.cpu_us_per_event / k.cpu_us_per_event, k.bytes_per_object / c.bytes_per_object,
      k.sync_s / c.sync_s))
  end
end)
