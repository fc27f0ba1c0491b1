-- bench/decode.lua SCAN_MB_PER_S: full decode of Pod watch events into Lua
-- tables, kubelua's exact decoder against lua-cjson, in the same run.
-- Events are Pods of bench/lib/pods.lua (BENCH_OBJECTS: realistic, the
-- default, or alike; BENCH_SEED), each a distinct string, as a watch
-- delivers them. Prints one JSON line; scan_mb_per_s (the C metadata
-- scan into kl_obj_t) comes from bench/c/bench_decode, run by bench/run.
local kube = require "kubelua"
local cjson = require "cjson"
local pods = require "bench.lib.pods"

local N = tonumber(os.getenv("BENCH_N")) or 20000
local scan = tonumber(arg[1]) or 0
local OBJECTS = os.getenv("BENCH_OBJECTS") or "realistic"
local SEED = tonumber(os.getenv("BENCH_SEED") or "1")

local g = pods.objects(OBJECTS, SEED)
local events, bytes = {}, 0
for i = 1, N do
  events[i] = '{"type":"MODIFIED","object":' .. g.object(i, 1000 + i, 1) .. '}'
  bytes = bytes + #events[i]
end

local function best_of(runs, decode)
  local best = 0
  for _ = 1, runs do
    collectgarbage()
    local t0 = kube.monotonic()
    for i = 1, N do
      local ev = decode(events[i])
      if not ev.object then error("no object") end
    end
    local rate = N / (kube.monotonic() - t0)
    if rate > best then best = rate end
  end
  return best
end

-- Interleaved, so machine noise falls on both alike.
local lua_rate, cjson_rate = 0, 0
for _ = 1, 3 do
  lua_rate = math.max(lua_rate, best_of(1, kube.json.decode))
  cjson_rate = math.max(cjson_rate, best_of(1, cjson.decode))
end

print(string.format('{"bench":"decode","objects":"%s","seed":%d,"events":%d,"event_bytes":%.0f,' ..
  '"scan_mb_per_s":%.0f,"lua_decode_events_per_s":%.0f,' ..
  '"cjson_decode_events_per_s":%.0f,"lua_vs_cjson":%.2f}',
  OBJECTS, SEED, N, bytes / N, scan, lua_rate, cjson_rate, lua_rate / cjson_rate))
kube.stop()
