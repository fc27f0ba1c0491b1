-- bench/compare/kubelua_client.lua: kubelua's informer against the server
-- bench/lib/listwatch.lua runs (run with `kubelua run --kubeconfig F`).
-- Prints the same two JSON lines as client-node.mjs:
--   {"phase":"synced",...}  after the initial list is cached
--   {"phase":"done",...}    after M update events reached the handler
-- then waits to be killed. The handler takes ev.key, as a controller that
-- queues keys does; the object is decoded only if a handler asks for it.
-- Usage: kubelua run --kubeconfig F kubelua_client.lua M [keep_managed_fields]
local kube = require "kubelua"

local M = assert(tonumber(arg and arg[1]), "usage: kubelua_client.lua M")
local KEEP = arg and arg[2] == "keep_managed_fields"

local function rss(field) -- VmRSS or VmHWM (the peak)
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("*a")
  f:close()
  return tonumber(s:match((field or "VmRSS") .. ":%s+(%d+) kB")) * 1024
end

-- utime + stime in seconds (clock(3), to the microsecond)
local cpu = os.clock

-- The runtime's own heap figure: the Lua heap (the cache itself is C
-- memory outside it, which the RSS counts).
local function heap() return collectgarbage("count") * 1024 end

local function out(s)
  io.stdout:write(s, "\n")
  io.stdout:flush()
end

kube.spawn(function()
  collectgarbage()
  collectgarbage()
  local rss0, heap0, cpu0, t0 = rss(), heap(), cpu(), kube.monotonic()
  local inf = assert(kube.informer("v1", "pods", { keep_managed_fields = KEEP or nil }))
  local updates, others, first, last_key = 0, 0, 0, nil
  inf:on_update(function(ev)
    if updates == 0 then first = kube.monotonic() end
    last_key = ev.key
    updates = updates + 1
    if updates == M then
      out(string.format('{"phase":"done","events":%d,"other_events":%d,"watch_s":%.6f,'
        .. '"cpu_s":%.6f,"at":%.6f,"last_key":"%s"}', updates, others, kube.monotonic() - first,
        cpu() - cpu0, kube.monotonic(), last_key))
    end
  end)
  inf:on_add(function() if updates > 0 then others = others + 1 end end)
  inf:on_delete(function() others = others + 1 end)
  assert(kube.wait_for_sync(inf, 600), "the informer did not sync")
  local sync_s = kube.monotonic() - t0
  collectgarbage()
  collectgarbage()
  out(string.format('{"phase":"synced","sync_s":%.6f,"objects":%d,"rss_before":%d,'
    .. '"rss_after":%d,"rss_peak":%d,"heap_before":%d,"heap_after":%d,"cpu_s":%.6f}', sync_s,
    inf:len(), rss0, rss(), rss("VmHWM"), heap0, heap(), cpu() - cpu0))
end)
