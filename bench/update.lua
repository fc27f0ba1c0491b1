-- bench/update.lua: MODIFIED watch events through the whole cache pipeline
-- for objects already cached — watch decoder → DeltaFIFO → store →
-- processor → a Lua on_update handler that reads ev.key, as
-- bench/compare/kubelua_client.lua does. N Pods (default 20,000) are fed as
-- ADDED first, untimed; then M MODIFIED events (default 200,000) cycle over
-- them, each with a new resourceVersion and host ip, and are timed. Prints
-- one JSON line:
--   events_per_s       MODIFIED events fed until the last handler call,
--                      per second
--   cpu_events_per_s   the same events per second of this process's CPU time
--                      (user + system), which other processes on a shared
--                      machine disturb much less than the wall clock
-- BENCH_N and BENCH_M override N and M (a small M for callgrind).
local kube = require "kubelua"
local pods = require "bench.lib.pods"

local N = tonumber(os.getenv("BENCH_N")) or 20000
local M = tonumber(os.getenv("BENCH_M")) or 200000
local CHUNK = 256 * 1024

-- The MODIFIED events as watch-stream chunks: event j is for Pod
-- (j - 1) % N + 1, in round r = ceil(j / N), with resourceVersion
-- 1000 + N * r + i and host ip variant r, so every event changes its Pod.
local function modified()
  return pods.chunks(M, CHUNK, function(j)
    local i, r = (j - 1) % N + 1, math.floor((j - 1) / N) + 1
    return pods.event("MODIFIED", i, 1000 + N * r + i, r)
  end)
end

kube.spawn(function()
  local inf = kube.local_informer{ name = "bench-update" }
  local added, updates, others, last_key = 0, 0, 0, nil
  inf:on_add(function() added = added + 1 end)
  inf:on_update(function(ev)
    last_key = ev.key
    updates = updates + 1
  end)
  inf:on_delete(function() others = others + 1 end)

  local chunks = pods.stream("ADDED", 1, N, CHUNK)
  for i = 1, #chunks do
    assert(inf:feed(chunks[i]))
    coroutine.yield()
  end
  while added < N do coroutine.yield() end
  chunks = modified()
  collectgarbage()
  collectgarbage()

  local elapsed, cpu = pods.feed(inf, chunks, function() return updates >= M end)

  assert(updates == M, "updates: " .. updates .. " ~= " .. M)
  assert(added == N and others == 0, "unexpected add or delete events")
  assert(inf:len() == N)
  local want = "ns-" .. ((M - 1) % N + 1) % 50 .. "/web-" .. (M - 1) % N + 1
  assert(last_key == want, "last key " .. tostring(last_key) .. " ~= " .. want)
  print(string.format('{"bench":"update","objects":%d,"events":%d,"events_per_s":%.0f,' ..
    '"cpu_events_per_s":%.0f}', N, M, M / elapsed, M / cpu))
  kube.stop()
end)
