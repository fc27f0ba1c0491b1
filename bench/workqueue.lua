-- bench/workqueue.lua C_OPS_PER_S: the workqueue through Lua.
--
-- An op is add + get + done of a fresh key. lua_ops_per_s goes through
-- kube.workers with a no-op reconcile (so it also pays for the worker loop,
-- xpcall and forget): a producer task adds keys in batches of BATCH and
-- yields, so the queue stays short as in the C benchmark, which does add,
-- get and done one key at a time. The baseline is a plain Lua-table FIFO
-- with dirty and processing sets, same batches, in the same process.
-- Prints one JSON line.
local kube = require "kubelua"

local N = tonumber(os.getenv("BENCH_N")) or 1000000
local BATCH = 1000
local c_ops = tonumber(arg[1]) or 0

local keys = {}
for i = 1, N do keys[i] = "ns-" .. (i % 50) .. "/pod-" .. i end

local function best_of(runs, fn)
  local best = 0
  for _ = 1, runs do
    collectgarbage()
    local t0 = kube.monotonic()
    fn()
    local rate = N / (kube.monotonic() - t0)
    if rate > best then best = rate end
  end
  return best
end

-- The baseline: what a script could do with tables alone.
local function table_fifo()
  local queue, head, tail, dirty, processing = {}, 1, 0, {}, {}
  for first = 1, N, BATCH do
    for i = first, math.min(first + BATCH - 1, N) do
      local k = keys[i]
      if not dirty[k] and not processing[k] then
        dirty[k] = true
        tail = tail + 1
        queue[tail] = k
      end
    end
    while head <= tail do
      local k = queue[head]
      queue[head] = nil
      head = head + 1
      dirty[k] = nil
      processing[k] = true
      processing[k] = nil -- done
    end
  end
end

local round = 0
local function through_workers()
  round = round + 1
  local q = kube.workqueue("bench-" .. round)
  local left = N
  kube.workers(q, 1, function() left = left - 1 end)
  for first = 1, N, BATCH do
    for i = first, math.min(first + BATCH - 1, N) do q:add(keys[i]) end
    coroutine.yield() -- the worker drains the batch
  end
  while left > 0 do coroutine.yield() end
  q:shutdown()
end

kube.spawn(function()
  local lua_ops = best_of(3, through_workers)
  local baseline = best_of(3, table_fifo)
  print(string.format(
    '{"bench":"workqueue","ops":%d,"c_ops_per_s":%.0f,"lua_ops_per_s":%.0f,' ..
    '"baseline_lua_table_ops_per_s":%.0f}', N, c_ops, lua_ops, baseline))
  kube.stop()
end)
