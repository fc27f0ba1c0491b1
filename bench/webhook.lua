-- bench/webhook.lua: AdmissionReviews per second through kubelua's webhook
-- server, and through a Node.js peer in the same run (a benchmark, not a
-- test; bench/run webhook prints its four JSON lines).
--
-- The review carries a realistic Pod of about 3 KB (bench/lib/realistic.lua)
-- and goes to a validating webhook that reads one field (metadata.name):
-- kubelua is measured twice, with the review decoded whole (the first
-- line, "webhook") and read through a view (read_only = true, the second
-- line, "webhook_view"), so that each figure says what a handler pays.
-- h2load (Debian's nghttp2-client) sends it over TLS with keep-alive from 50
-- concurrent connections, HTTP/1.1 (--h1: what the Node.js https server
-- speaks), for WEBHOOK_SECONDS (default 10) after a second of warm-up. Each
-- server runs in its own process, one after the other; where taskset is
-- there, the server is held to one CPU and h2load to the other.
-- Two kinds of line:
--   webhook, webhook_view: capacity. Each connection sends its next review
--     as soon as the last is answered, so the server is always busy and a
--     review waits behind the 49 others: the mean latency is then 50 /
--     reviews_per_s whatever the server does (Little's law), and these
--     lines measure throughput, not latency.
--   webhook_at_rate, webhook_view_at_rate: latency at a fixed offered rate,
--     WEBHOOK_RATE reviews/s (default 20,000: the target) spread over the
--     50 connections (h2load --rps, per connection). A server that keeps up
--     answers them all (reviews_per_s ~ offered_per_s) and its latency is
--     its cost per review plus queueing behind other connections' reviews;
--     one that cannot keep up answers fewer. h2load times a review from
--     when it is sent, so one that waited in h2load behind a slow answer
--     on its connection does not count its wait: compare reviews_per_s
--     with offered_per_s first. Each connection is paced by its own timer
--     from when it connected, so reviews come in bunches rather than evenly
--     spaced, and a review may wait behind its bunch.
--   reviews_per_s   reviews answered per second (h2load's figure)
--   offered_per_s   the rate asked of h2load (the _at_rate lines)
--   p50_ms, p99_ms  latency of a review, from h2load's request log
--   node_*          the same for bench/webhook/server.mjs (node's https)
--                   (the full-decode lines only)
--   loadavg         /proc/loadavg's first figure when the run began: the
--                   machine is shared
-- Every review must be answered 200 with allowed: true, or the run fails.
-- Usage: kubelua run --no-watch bench/webhook.lua KUBELUA_BINARY
local kube = require "kubelua"
local json = require "kubelua.json"
local proc = require "bench.lib.proc"
local realistic = require "bench.lib.realistic"

local BIN = arg and arg[1] or "build/kubelua"
local SECONDS = tonumber(os.getenv("WEBHOOK_SECONDS") or "10")
local CONNECTIONS = 50
local RATE = tonumber(os.getenv("WEBHOOK_RATE") or "20000")
assert(RATE and RATE >= CONNECTIONS and RATE % CONNECTIONS == 0,
  "WEBHOOK_RATE must be a multiple of " .. CONNECTIONS .. " reviews/s")

local quote, read = proc.quote, proc.read

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  p:close()
  return out
end

local dir = sh("mktemp -d"):gsub("%s+$", "")
local loadavg = tonumber((read("/proc/loadavg") or ""):match("^(%S+)"))
local taskset = sh("command -v taskset"):match("%S") and tonumber(sh("nproc")) >= 2

-- A Pod of about 3 KB, and its review.
local g, pod = realistic.new(1), nil
for i = 1, 1000 do
  pod = g.object(i, "1")
  if #pod >= 2900 and #pod <= 3300 then break end
end
local body = '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{'
  .. '"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","kind":{"group":"","version":"v1",'
  .. '"kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},'
  .. '"requestKind":{"group":"","version":"v1","kind":"Pod"},"requestResource":{"group":"",'
  .. '"version":"v1","resource":"pods"},"name":"' .. json.decode(pod).metadata.name
  .. '","namespace":"' .. json.decode(pod).metadata.namespace .. '","operation":"CREATE",'
  .. '"userInfo":{"username":"system:serviceaccount:kube-system:replicaset-controller",'
  .. '"uid":"a1b2","groups":["system:serviceaccounts","system:authenticated"]},'
  .. '"object":' .. pod .. ',"oldObject":null,"dryRun":false,"options":{"apiVersion":'
  .. '"meta.k8s.io/v1","kind":"CreateOptions"}}}'
local body_file = dir .. "/review.json"
local f = assert(io.open(body_file, "w"))
f:write(body)
f:close()

local made = sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  .. " -keyout " .. dir .. "/tls.key -out " .. dir .. "/tls.crt -subj /CN=127.0.0.1"
  .. " -addext subjectAltName=IP:127.0.0.1 -days 1")
assert(read(dir .. "/tls.crt"), "openssl could not make a certificate: " .. made)

local function pinned(cpu, cmd)
  return taskset and ("taskset -c " .. cpu .. " " .. cmd) or cmd
end

-- Starts a server (cmd writes its port to dir/NAME.port); its pid and port.
local function start(name, cmd)
  local port_file = dir .. "/" .. name .. ".port"
  local pid = proc.start(pinned(0, cmd .. " " .. quote(dir) .. " " .. quote(port_file)),
    dir .. "/" .. name .. ".out", dir .. "/" .. name .. ".err")
  for _ = 1, 1000 do
    local port = tonumber((read(port_file) or ""):match("%d+"))
    if port then return pid, port end
    if not proc.running(pid) then break end
    kube.sleep(0.01)
  end
  error(name .. " did not start: " .. (read(dir .. "/" .. name .. ".err") or ""))
end

local function percentile(sorted, p)
  return sorted[math.max(1, math.ceil(#sorted * p))]
end

-- h2load against port's path, as fast as the server answers or at offered
-- reviews/s in all: reviews/s, p50 and p99 in ms.
local function load(name, port, path, offered)
  local log = dir .. "/" .. name .. ".h2load"
  local paced = offered and (" --rps " .. offered / CONNECTIONS) or ""
  local out = sh(pinned(1, "h2load --h1 -c " .. CONNECTIONS .. " -t 1 -D " .. SECONDS
    .. paced .. " --warm-up-time 1 -d " .. quote(body_file)
    .. " -H 'Content-Type: application/json'"
    .. " --log-file " .. quote(log) .. " https://127.0.0.1:" .. port .. path))
  local rate = tonumber(out:match("finished in [%d.]+m?s, ([%d.]+) req/s"))
  local total, done, ok, failed = out:match("requests: (%d+) total, %d+ started, (%d+) done, "
    .. "(%d+) succeeded, (%d+) failed")
  local codes2xx = tonumber(out:match("status codes: (%d+) 2xx"))
  assert(rate and tonumber(failed) == 0 and tonumber(ok) == tonumber(done)
    and codes2xx == tonumber(done), name .. ": h2load: " .. out)
  local d = {}
  for line in io.lines(log) do
    local status, us = line:match("^%S+\t(%d+)\t(%d+)")
    if status then
      assert(status == "200", name .. ": a review answered " .. status)
      d[#d + 1] = tonumber(us)
    end
  end
  table.sort(d)
  assert(#d > 0, name .. ": no request in h2load's log")
  return { rate = rate, total = tonumber(total), p50 = percentile(d, 0.5) / 1000,
    p99 = percentile(d, 0.99) / 1000 }
end

-- One review answered as expected, so that a wrong answer fails the run.
local function check(name, port, path)
  local out = sh("curl -s -S --cacert " .. quote(dir .. "/tls.crt") .. " -H 'Content-Type: "
    .. "application/json' --data-binary @" .. quote(body_file) .. " https://127.0.0.1:" .. port
    .. path)
  local r = json.decode(out)
  assert(type(r) == "table" and r.response and r.response.allowed == true
    and r.response.uid == "705ab4f5-6393-11e8-b7cc-42010a800002", name .. ": " .. out)
end

kube.spawn(function()
  local results = {}
  for _, s in ipairs{
    { "kubelua", BIN .. " run --no-watch --log-level warn bench/webhook/server.lua",
      { kubelua = "/validate", kubelua_view = "/validate-view" } },
    { "node", "node bench/webhook/server.mjs", { node = "/validate" } } } do
    local pid, port = start(s[1], s[2])
    local ok, res = pcall(function()
      local r = {}
      for name, path in pairs(s[3]) do
        check(name, port, path)
        r[name] = load(name, port, path)
        r[name .. "_at_rate"] = load(name .. "_at_rate", port, path, RATE)
      end
      return r
    end)
    os.execute("kill " .. pid .. " 2>/dev/null")
    assert(ok, res)
    for name, r in pairs(res) do results[name] = r end
  end
  os.execute("rm -rf " .. quote(dir))

  local tail = string.format(',"object_bytes":%d,"connections":%d,"seconds":%g,'
    .. '"one_cpu_each":%s,"loadavg":%s}', #pod, CONNECTIONS, SECONDS, tostring(taskset),
    tostring(loadavg))
  local function line(bench, k, n, rate)
    local s = string.format('{"bench":"%s",', bench)
    if rate then s = s .. string.format('"offered_per_s":%d,', rate) end
    s = s .. string.format('"reviews_per_s":%.0f,"p50_ms":%.3f,"p99_ms":%.3f', k.rate, k.p50,
      k.p99)
    if n then
      s = s .. string.format(',"node_reviews_per_s":%.0f,"node_p50_ms":%.3f,"node_p99_ms":%.3f',
        n.rate, n.p50, n.p99)
    end
    print(s .. tail)
  end
  line("webhook", results.kubelua, results.node)
  line("webhook_view", results.kubelua_view)
  line("webhook_at_rate", results.kubelua_at_rate, results.node_at_rate, RATE)
  line("webhook_view_at_rate", results.kubelua_view_at_rate, nil, RATE)
  kube.stop(0)
end)
