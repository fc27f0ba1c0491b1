-- bench/cache.lua: 100,000 Pods from their JSON bytes through the whole
-- cache pipeline — watch decoder → DeltaFIFO → store → processor → a Lua
-- handler that adds ev.key to a workqueue. Prints one JSON line:
--   events_per_s       events fed until the last handler call, per second
--   bytes_per_object   RSS growth with every Pod cached / N
--   json_bytes_per_object  the Pod's JSON as received (compact, managedFields
--                      included), for the ratio
--   cpu_events_per_s   the same events per second of this process's CPU time
--                      (user + system), which other processes on a shared
--                      machine disturb much less than the wall clock
local kube = require "kubelua"
local pods = require "bench.lib.pods"

local N = tonumber(os.getenv("BENCH_N")) or 100000
local CHUNK = 256 * 1024 -- large strings are mapped apart, so freeing returns them

kube.spawn(function()
  local inf = kube.local_informer{ name = "bench" }
  local q = kube.workqueue("bench-cache")
  local seen = 0
  inf:on_add(function(ev)
    q:add(ev.key)
    seen = seen + 1
  end)
  collectgarbage()
  collectgarbage()
  local rss0 = pods.rss()

  local chunks = pods.stream("ADDED", 1, N, CHUNK)
  local json_bytes = #pods.pod(1, 1001)
  local elapsed, cpu = pods.feed(inf, chunks, function() return seen >= N end)

  chunks = nil -- luacheck: ignore
  collectgarbage()
  collectgarbage()
  local rss1 = pods.rss()
  assert(inf:len() == N and q:len() == N)
  print(string.format('{"bench":"cache","objects":%d,"events_per_s":%.0f,' ..
    '"bytes_per_object":%.0f,"json_bytes_per_object":%d,"cpu_events_per_s":%.0f}',
    N, N / elapsed, (rss1 - rss0) / N, json_bytes, N / cpu))
  kube.stop()
end)
