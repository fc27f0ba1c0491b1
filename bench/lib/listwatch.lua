-- The list-then-watch benchmarks' driver (bench/compare.lua, cache.lua,
-- update.lua): a replay server (bench/replay.lua, its own process, which
-- writes prepared bytes) and clients in their own processes, one after the
-- other, each printing a "synced" line after its initial list is cached and
-- a "done" line after M update events (bench/compare/kubelua_client.lua,
-- client-node.mjs). Both clients measure themselves the same way: RSS
-- (VmRSS) before the informer starts and after sync after a full GC, peak
-- RSS (VmHWM) at sync, their runtime's heap before and after, CPU
-- (utime + stime) at sync and at the M-th event, and the time of the M-th
-- event on CLOCK_MONOTONIC: the watch takes from the release of the held
-- events to then.
local kube = require "kubelua"
local http = require "kubelua.http"
local json = require "kubelua.json"
local proc = require "bench.lib.proc"
local median = require("bench.lib.stats").median

local _M = {}

local TIMEOUT = 1800
local quote, read, running = proc.quote, proc.read, proc.running

-- The objects the benchmarks use (BENCH_OBJECTS: realistic, the default,
-- or alike) and their seed (BENCH_SEED, default 1).
_M.objects = os.getenv("BENCH_OBJECTS") or "realistic"
_M.seed = tonumber(os.getenv("BENCH_SEED") or "1")
assert(_M.objects == "realistic" or _M.objects == "alike",
  "BENCH_OBJECTS is realistic or alike")

local live = {} -- pids started and not yet ended, ended if the benchmark fails

local function start(cmd)
  local out = os.tmpname()
  local pid = proc.start(cmd, out, out .. ".err")
  live[pid] = true
  return pid, out
end

local function kill(pid)
  os.execute("kill " .. pid)
  while running(pid) do kube.sleep(0.01) end
  live[pid] = nil
end

-- Waits for a JSON line of pid's output (out) that satisfies want; returns
-- it decoded.
local function wait_line(pid, out, want, what)
  local deadline = kube.monotonic() + TIMEOUT
  while kube.monotonic() < deadline do
    for line in (read(out) or ""):gmatch("[^\n]+") do
      local t = json.decode(line)
      if t and t.phase == "error" then error(what .. " failed: " .. line) end
      if t and want(t) then return t end
    end
    if not running(pid) then
      error(what .. " exited: " .. (read(out) or "") .. (read(out .. ".err") or ""))
    end
    kube.sleep(0.02)
  end
  error(what .. " gave no line in " .. TIMEOUT .. " s")
end

-- Starts a replay server of n objects and m MODIFIED events; `stream`:
-- it serves streaming lists (else it refuses them with 422, as 1.26).
-- Returns { port, kubeconfig, json_bytes, stop = fn }.
function _M.replay(bin, n, m, stream)
  local pid, out = start(quote(bin) .. " run --no-watch bench/replay.lua " .. n .. " " .. m
    .. " " .. _M.objects .. " " .. _M.seed .. " " .. (stream and "serve" or "refuse"))
  local ready = wait_line(pid, out, function(t) return t.port end, "the replay server")
  local r = { port = ready.port, json_bytes = ready.json_bytes_per_object,
    kubeconfig = proc.kubeconfig(ready.port) }
  function r.stop()
    kill(pid)
    os.remove(out)
    os.remove(out .. ".err")
    os.remove(r.kubeconfig)
  end
  return r
end

-- The commands of the clients, by name, for replay server r and m events.
function _M.commands(bin, r, m)
  local kc = quote(r.kubeconfig)
  return {
    ["client-node"] = "node --expose-gc bench/compare/client-node.mjs " .. kc .. " " .. m,
    kubelua = quote(bin) .. " run --no-watch --kubeconfig " .. kc
      .. " bench/compare/kubelua_client.lua " .. m,
    ["kubelua-managed-fields"] = quote(bin) .. " run --no-watch --kubeconfig " .. kc
      .. " bench/compare/kubelua_client.lua " .. m .. " keep_managed_fields",
  }
end

-- Runs one client (cmd) against replay server r for n objects and m events
-- (m = 0: the list alone); returns its figures.
function _M.run(name, cmd, r, n, m)
  local pid, out = start(cmd)
  local s = wait_line(pid, out, function(t) return t.phase == "synced" end, name)
  assert(s.objects == n, name .. ": cached " .. tostring(s.objects) .. " of " .. n)
  local res = {
    system = name,
    sync_s = s.sync_s,
    bytes_per_object = (s.rss_after - s.rss_before) / n,
    heap_bytes_per_object = (s.heap_after - s.heap_before) / n,
    peak_rss_ratio = s.rss_peak / s.rss_after,
  }
  if m > 0 then
    local t0 = kube.monotonic() -- CLOCK_MONOTONIC, the clients' "at"
    local ok, err = http.request { url = ("http://127.0.0.1:%d/bench/release"):format(r.port) }
    assert(ok and ok.status == 200, "release: " .. tostring(err))
    local d = wait_line(pid, out, function(t) return t.phase == "done" end, name)
    kube.sleep(0.3) -- an extra event would arrive now
    local extra
    for line in (read(out) or ""):gmatch("[^\n]+") do
      local t = json.decode(line)
      if t and t.phase ~= "synced" and t.phase ~= "done" then extra = line end
    end
    assert(not extra, name .. ": " .. tostring(extra))
    assert(d.events == m and d.other_events == 0,
      name .. ": " .. d.events .. " updates and " .. d.other_events .. " other events")
    res.watch_events_per_s = m / (d.at - t0)
    res.cpu_us_per_event = (d.cpu_s - s.cpu_s) / m * 1e6
  end
  kill(pid)
  os.remove(out)
  os.remove(out .. ".err")
  return res
end

local FIELDS = { "sync_s", "bytes_per_object", "heap_bytes_per_object", "peak_rss_ratio",
  "watch_events_per_s", "cpu_us_per_event" }

-- Each figure's median over runs rs.
local function median_of(rs)
  local m = { system = rs[1].system, each = {} }
  for _, f in ipairs(FIELDS) do
    local v = {}
    for i, r in ipairs(rs) do v[i] = r[f] end
    if #v > 0 then m[f] = median(v) end
  end
  for i, r in ipairs(rs) do m.each[i] = ("%.0f"):format(r.watch_events_per_s or r.sync_s * 1000) end
  return m
end

-- One JSON line of figures r (medians) for benchmark b.
local function line(b, path, r, json_bytes)
  local t = { ('{"bench":"%s","objects":"%s","seed":%d,"json_bytes_per_object":%.0f,'
    .. '"path":"%s","system":"%s","count":%d,"events":%d,"runs":%d,"sync_s":%.3f,'
    .. '"objects_per_s":%.0f,"bytes_per_object":%.0f,"heap_bytes_per_object":%.0f,'
    .. '"peak_rss_ratio":%.2f'):format(b.name, _M.objects, _M.seed, json_bytes, path, r.system,
    b.n, b.m, #r.each, r.sync_s, b.n / r.sync_s, r.bytes_per_object, r.heap_bytes_per_object,
    r.peak_rss_ratio) }
  if b.m > 0 then
    t[#t + 1] = (',"watch_events_per_s":%.0f,"cpu_us_per_event":%.2f'):format(
      r.watch_events_per_s, r.cpu_us_per_event)
  end
  t[#t + 1] = (',"%s_each":[%s]}'):format(b.m > 0 and "watch_events_per_s" or "sync_ms",
    table.concat(r.each, ","))
  return table.concat(t)
end

-- Runs benchmark b = { name, bin, n, m, runs, paths = { { path, systems } } }:
-- for each path ("list-watch": the server refuses streaming lists;
-- "watch-list": it serves them), a replay server, then each system's
-- client b.runs times in rounds; prints a line per path and system (the
-- medians) and returns the medians by "path system".
function _M.main(b)
  local results = {}
  for _, p in ipairs(b.paths) do
    local r = _M.replay(b.bin, b.n, b.m, p.path == "watch-list")
    local cmds, runs = _M.commands(b.bin, r, b.m), {}
    for _ = 1, b.runs do -- rounds, so that drift in the machine reaches every system alike
      for _, name in ipairs(p.systems) do
        assert(cmds[name], "unknown system " .. name)
        runs[name] = runs[name] or {}
        table.insert(runs[name], _M.run(name, cmds[name], r, b.n, b.m))
      end
    end
    r.stop()
    for _, name in ipairs(p.systems) do
      local m = median_of(runs[name])
      results[p.path .. " " .. name] = m
      print(line(b, p.path, m, r.json_bytes))
      io.stdout:flush()
    end
  end
  return results
end

-- Runs f as the benchmark's main task, reporting its error.
function _M.spawn(what, f)
  kube.spawn(function()
    local ok, err = xpcall(f, debug.traceback)
    if not ok then
      io.stderr:write(what, ": ", tostring(err), "\n")
      for pid in pairs(live) do kill(pid) end
    end
    kube.stop(ok and 0 or 1)
  end)
end

return _M
