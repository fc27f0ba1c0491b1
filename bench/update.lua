-- bench/update.lua: MODIFIED watch events for cached Pods, list then watch
-- as a user meets it: a replay server (bench/replay.lua) holds N Pods
-- (BENCH_N, default 20,000) and M kubelet status updates of them (BENCH_M,
-- default 200,000); kubelua's informer (bench/compare/kubelua_client.lua,
-- its own process, an on_update handler that reads ev.key) lists, then
-- watches. Two lines: the server refusing the streaming list with 422 as
-- kube-apiserver 1.26 does ("list-watch"), and serving it ("watch-list").
-- Figures are medians of BENCH_RUNS runs (default 1); see
-- bench/lib/listwatch.lua for how each is measured:
--   watch_events_per_s  first to M-th event reaching the handler
--   cpu_us_per_event    the client's CPU time (user + system) over the
--                       watch, per event: what other processes on a shared
--                       machine disturb much less than the wall clock
-- BENCH_OBJECTS=alike for the alike Pods (default realistic).
-- Usage: kubelua run --no-watch bench/update.lua KUBELUA_BINARY
local listwatch = require "bench.lib.listwatch"

listwatch.spawn("bench/update", function()
  listwatch.main {
    name = "update", bin = arg[1] or "build/kubelua",
    n = tonumber(os.getenv("BENCH_N")) or 20000, m = tonumber(os.getenv("BENCH_M")) or 200000,
    runs = tonumber(os.getenv("BENCH_RUNS")) or 1,
    paths = { { path = "list-watch", systems = { "kubelua" } },
              { path = "watch-list", systems = { "kubelua" } } },
  }
end)
