-- bench/shards.lua: what sharding a controller across replicas buys. N
-- realistic Pods (BENCH_N, default 100,000; bench/lib/pods.lua) are
-- assigned as the sharder assigns them (kubelua.sharding's consistent
-- hashing of the root owner's key, here the Pod's own: its ReplicaSet is
-- not on the ring) to 1, 2 and 4 replicas; each replica's informer caches
-- its share, fed as its label-selected watch would deliver it. Prints one
-- JSON line:
--   bytes_per_replica  the cached bytes (informer:stats().bytes) of the
--                      largest share, for 1, 2 and 4 replicas: ~1/N
--   moves_on_join      objects that move when a 5th replica joins 4
--                      (~N/5: only the newcomer's share moves)
-- Usage: kubelua run --no-watch bench/shards.lua
local kube = require "kubelua"
local pods = require "bench.lib.pods"
local sharding = require "kubelua.sharding"

local N = tonumber(os.getenv("BENCH_N")) or 100000
local REPLICAS = { 1, 2, 4 }
local BLOCK = 5000

local function members(n)
  local m = {}
  for i = 1, n do m[i] = "replica-" .. i end
  return m
end

kube.spawn(function()
  local g = pods.objects("realistic", 1)
  local keys = {}
  for i = 1, N do keys[i] = g.key(i) end
  local bytes = {}
  for r, n in ipairs(REPLICAS) do
    local ring = sharding.hash_ring(members(n))
    local share = {}
    for i = 1, N do
      local who = sharding.lookup(ring, keys[i])
      share[who] = share[who] or {}
      local s = share[who]
      s[#s + 1] = i
    end
    local most = 0
    for _, m in ipairs(members(n)) do
      local ids = share[m] or {}
      local inf = kube.local_informer{ name = m }
      -- in blocks, each fed before the next is made: the loop runs between
      for first = 1, #ids, BLOCK do
        local last = math.min(first + BLOCK - 1, #ids)
        local chunks = pods.chunks(last - first + 1, 256 * 1024, function(k)
          local i = ids[first + k - 1]
          return '{"type":"ADDED","object":' .. g.object(i, 1000 + i, 0) .. '}\n'
        end)
        pods.feed(inf, chunks, function() return inf:len() == last end)
      end
      local b = inf:stats().bytes
      if b > most then most = b end
      inf:stop()
      collectgarbage()
    end
    bytes[r] = most
  end
  local four, five = sharding.hash_ring(members(4)), sharding.hash_ring(members(5))
  local moves = 0
  for i = 1, N do
    if sharding.lookup(four, keys[i]) ~= sharding.lookup(five, keys[i]) then moves = moves + 1 end
  end
  print(string.format('{"bench":"shards","objects":%d,"replicas":[%s],"bytes_per_replica":[%s],'
    .. '"moves_on_join":%d}', N, table.concat(REPLICAS, ","), table.concat(bytes, ","), moves))
  kube.stop()
end)
