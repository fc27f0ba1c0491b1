-- bench/reload.lua [RELOADS]: hot reload RELOADS times (default 1000)
-- while events flow, against an in-process simulator whose event history is
-- kept short (500 events), so that its own memory levels off and what is
-- left to see is the runtime's.
-- A writer keeps creating and updating ConfigMaps; a controller, loaded as
-- generations the way `kubelua run` loads a script, records the last state
-- its reconcile saw of each object. Every 100 reloads it samples RSS and
-- the Lua heap (after a full collection). At the end: lost = objects whose
-- final state no generation reconciled (must be 0). Prints one JSON line:
-- {"bench":"reload","reloads":…,"rss_mb":[…],"lua_heap_kb":[…],"events":…,"lost":…}
local kube = require "kubelua"
local generation = require "kubelua.generation"

local RELOADS = tonumber(arg[1]) or 1000
local N = 200 -- objects

local probe = { seen = {}, reconciles = 0 }
package.loaded["reload_bench_probe"] = probe

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)
local path = dir .. "/controller.lua"

local function write_controller(version)
  local f = assert(io.open(path, "w"))
  f:write(([[
local kube = require "kubelua"
local probe = require "reload_bench_probe"
local VERSION = %d
local cms = kube.informer("v1", "configmaps", { namespace = "bench" })
local q = kube.workqueue("reload-bench")
local function enqueue(ev) q:add(ev.key) end
cms:add_handler{ add = enqueue, update = enqueue, delete = enqueue }
kube.workers(q, 2, function(key)
  local cm = cms:get(key)
  probe.seen[key] = cm and cm.data.n or "deleted"
  probe.reconciles = probe.reconciles + 1
  probe.version = VERSION
end)
]]):format(version))
  f:close()
end

local function rss_mb()
  local f = io.open("/proc/self/status")
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)")) / 1024
end

kube.start_sim{ history_size = 500 }

kube.spawn(function()
  kube.client.set_default(kube.client.new{ server = kube.server(), qps = 0 })
  assert(kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = "bench" } })
  write_controller(0)
  assert(generation.load(path))
  local want, writing, writes = {}, true, 0
  kube.spawn(function()
    local i = 0
    while writing do
      i = i + 1
      local name = "c" .. (i % N)
      local v = tostring(i)
      local obj = kube.get("v1", "configmaps", "bench", name)
      if obj then
        obj.data = { n = v }
        if kube.update(obj) then want["bench/" .. name] = v end
      elseif kube.create{ apiVersion = "v1", kind = "ConfigMap",
                          metadata = { name = name, namespace = "bench" }, data = { n = v } } then
        want["bench/" .. name] = v
      end
      writes = writes + 1
      kube.sleep(0.001)
    end
  end)
  local rss, heap = {}, {}
  local function sample()
    collectgarbage()
    collectgarbage()
    rss[#rss + 1] = string.format("%.1f", rss_mb())
    heap[#heap + 1] = string.format("%.0f", collectgarbage("count"))
  end
  sample()
  for r = 1, RELOADS do
    write_controller(r)
    local ok, err = generation.reload(true)
    assert(ok, err)
    kube.sleep(0.005)
    if r % 100 == 0 then sample() end
  end
  writing = false
  kube.sleep(0.05)
  local lost
  for _ = 1, 600 do
    lost = 0
    for key, v in pairs(want) do
      if probe.seen[key] ~= v then lost = lost + 1 end
    end
    if lost == 0 then break end
    kube.sleep(0.05)
  end
  print(string.format('{"bench":"reload","reloads":%d,"writes":%d,"reconciles":%d,'
    .. '"rss_mb":[%s],"lua_heap_kb":[%s],"last_generation":%d,"lost":%d}',
    RELOADS, writes, probe.reconciles, table.concat(rss, ","), table.concat(heap, ","),
    generation.current(), lost))
  os.execute("rm -rf " .. dir)
  kube.stop(lost == 0 and 0 or 1)
end)
