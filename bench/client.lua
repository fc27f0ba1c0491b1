-- bench/client.lua: GET requests per second through the REST client (a
-- benchmark, not a test; bench/run client prints its one JSON line).
--
--   requests_per_s       GETs of ConfigMaps by 50 tasks with kubelua.client
--                        (rate limit off), each answer decoded into a table
--   curl_requests_per_s  the same GETs, same URLs, made by one
--                        `curl --parallel --parallel-max 50` process
--
-- Both run against one `kubelua sim` process on 127.0.0.1 (plain HTTP), one
-- after the other in this run, so the server costs the same for both.
-- Usage: kubelua run bench/client.lua KUBELUA_BINARY [REQUESTS]
local kube = require "kubelua"
local client = require "kubelua.client"

local BIN = arg and arg[1] or "build/kubelua"
local REQUESTS = tonumber(arg and arg[2]) or 20000
local TASKS = 50
local OBJECTS = 100

local function quote(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end

local function read(path)
  local f = io.open(path)
  local s = f and f:read("*a")
  if f then f:close() end
  return s
end

-- The simulator, in its own process: returns its pid, port and log file.
local function start_sim()
  local log = os.tmpname()
  local p = io.popen("sh -c " .. quote("exec " .. BIN .. " sim --listen 127.0.0.1:0 >"
    .. log .. " 2>&1 & echo $!"))
  local pid = p:read("*l")
  p:close()
  for _ = 1, 1000 do
    local port = (read(log) or ""):match("listening on http://[^\n]*:(%d+)\n")
    if port then return pid, tonumber(port), log end
    kube.sleep(0.01)
  end
  error("the simulator did not start: " .. (read(log) or ""))
end

kube.spawn(function()
  local pid, port, log = start_sim()
  local base = "http://127.0.0.1:" .. port
  local c = client.new{ server = base, qps = 0 }
  c:create{ apiVersion = "v1", kind = "Namespace", metadata = { name = "bench" } }
  for i = 1, OBJECTS do
    assert(c:create{ apiVersion = "v1", kind = "ConfigMap",
                     metadata = { name = "cm-" .. i, namespace = "bench" },
                     data = { index = tostring(i), text = string.rep("x", 200) } })
  end
  local function name(i) return "cm-" .. ((i - 1) % OBJECTS + 1) end

  -- warm-up: connections open, code compiled
  for i = 1, TASKS do assert(c:get("v1", "configmaps", "bench", name(i))) end

  -- kubelua: 50 tasks share the requests
  local done, failed = 0, 0
  local t0 = kube.monotonic()
  for t = 1, TASKS do
    kube.spawn(function()
      for i = t, REQUESTS, TASKS do
        local obj = c:get("v1", "configmaps", "bench", name(i))
        if obj then done = done + 1 else failed = failed + 1 end
      end
    end)
  end
  while done + failed < REQUESTS do kube.sleep(0.001) end
  local ours = REQUESTS / (kube.monotonic() - t0)
  assert(failed == 0, failed .. " requests failed")

  -- curl: the same URLs, 50 at a time, in one process
  local cfg = os.tmpname()
  local f = assert(io.open(cfg, "w"))
  for i = 1, REQUESTS do
    f:write('url = "', base, "/api/v1/namespaces/bench/configmaps/", name(i), '"\n',
            'output = "/dev/null"\n')
  end
  f:close()
  t0 = kube.monotonic()
  local ok = os.execute("curl --silent --fail --parallel --parallel-max " .. TASKS
    .. " -H 'Accept: application/json' --config " .. cfg .. " 2>/dev/null")
  local theirs = REQUESTS / (kube.monotonic() - t0)
  os.remove(cfg)
  assert(ok == 0 or ok == true, "curl failed")

  os.execute("kill " .. pid)
  kube.sleep(0.1)
  os.remove(log)
  print(string.format('{"bench":"client","requests":%d,"tasks":%d,"requests_per_s":%.0f,'
    .. '"curl_requests_per_s":%.0f}', REQUESTS, TASKS, ours, theirs))
  kube.stop()
end)
