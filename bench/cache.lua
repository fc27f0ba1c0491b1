-- bench/cache.lua: the initial list of N Pods (BENCH_N, default 100,000)
-- into kubelua's cache, as a user meets it: a replay server
-- (bench/replay.lua) holds them; kubelua's informer
-- (bench/compare/kubelua_client.lua, its own process) lists them after the
-- server refused the streaming list with 422 as kube-apiserver 1.26 does
-- (limit=500&resourceVersion=0, which the server answers whole as 1.26's
-- watch cache does: "list-watch"), and, on a second line, streams them
-- ("watch-list"). Figures are medians of BENCH_RUNS runs (default 1);
-- see bench/lib/listwatch.lua for how each is measured:
--   sync_s, objects_per_s  start of the informer until the list is cached
--   bytes_per_object       RSS growth with every Pod cached, after a full GC
--   heap_bytes_per_object  the Lua heap's growth, the same way (the cache is
--                          C memory outside it)
--   peak_rss_ratio         peak RSS during the list / RSS after sync
-- BENCH_OBJECTS=alike for the alike Pods (default realistic).
-- Usage: kubelua run --no-watch bench/cache.lua KUBELUA_BINARY
local listwatch = require "bench.lib.listwatch"

listwatch.spawn("bench/cache", function()
  listwatch.main {
    name = "cache", bin = arg[1] or "build/kubelua",
    n = tonumber(os.getenv("BENCH_N")) or 100000, m = 0,
    runs = tonumber(os.getenv("BENCH_RUNS")) or 1,
    paths = { { path = "list-watch", systems = { "kubelua" } },
              { path = "watch-list", systems = { "kubelua" } } },
  }
end)
