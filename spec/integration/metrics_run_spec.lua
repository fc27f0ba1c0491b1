-- /metrics, /healthz and /readyz of `kubelua run --sim`, scraped with curl:
-- exact lines for a known scenario, promtool's check of a real scrape,
-- readiness that waits for informers, the defaults and binding errors.
local helper = require "spec.integration.sim_helper"
local procs = require "spec.integration.proc_helper"
local support = require "spec.support"

local quote = helper.quote
local wait_log = procs.wait_log

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- GET url -> status, body (curl, which is what a kubelet or Prometheus
-- would be to us).
local function get(url)
  local p = assert(io.popen("curl -s -m 5 -w '\\n%{http_code}' " .. quote(url)))
  local out = p:read("*a")
  p:close()
  local body, code = out:match("^(.*)\n(%d+)$")
  return tonumber(code), body
end

local function lines_of(text)
  local set = {}
  for line in text:gmatch("[^\n]+") do set[line] = true end
  return set
end

local ENDPOINTS = "--metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0"

local function start(path, options)
  local proc = procs.start("--sim " .. (options or ENDPOINTS) .. " " .. quote(path))
  return proc
end

local function urls(proc)
  local out = wait_log(proc, "probes: serving on ")
  local m = out:match("metrics: serving on (http://127%.0%.0%.1:%d+)/metrics\n")
  local p = out:match("probes: serving on (http://127%.0%.0%.1:%d+)/healthz and /readyz\n")
  assert(m and p, out)
  return m, p
end

-- Five keys, one that fails once, one that asks for a requeue in an hour;
-- a GET of a missing ConfigMap; two ConfigMaps in an informer's cache.
local SCENARIO = [[
local kube = require "kubelua"
local things = kube.metrics.counter{ name = "app_things_total", help = "Things \"done\".",
  labels = { "kind" } }
local q = kube.workqueue("q")
local failed, done = false, 0
kube.workers(q, 2, function(key)
  if key == "bad" and not failed then failed = true error("boom") end
  done = done + 1
  if key == "later" then return kube.requeue_after(3600) end
  things:inc({ kind = key:sub(1, 1) })
  if done == 7 then kube.log.info("all reconciled") end
end)
kube.spawn(function()
  for i = 1, 2 do
    assert(kube.create{ apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "cm" .. i, namespace = "default" }, data = { k = "v" } })
  end
  local _, err = kube.get("v1", "configmaps", "default", "missing")
  assert(kube.is_not_found(err))
  local inf = kube.informer("v1", "configmaps")
  assert(kube.wait_for_sync(inf, 10))
  for i = 1, 5 do q:add("k" .. i) end
  q:add("k1") -- queued already: deduplicated
  q:add("bad")
  q:add("later")
end)
]]

describe("kubelua run /metrics", function()
  local dir, proc

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. quote(dir)) == 0)
  end)

  after_each(function()
    if proc then helper.stop(proc) proc = nil end
    os.execute("rm -rf " .. quote(dir))
  end)

  it("reports the workqueue, reconciles, requests and informers of a run", function()
    write(dir .. "/c.lua", SCENARIO)
    proc = start(dir .. "/c.lua")
    local murl = urls(proc)
    wait_log(proc, "all reconciled")
    local code, body = get(murl .. "/metrics")
    assert.equal(200, code)
    local have = lines_of(body)
    for _, want in ipairs({
      -- 5 keys + bad + later + bad's rate-limited retry; the duplicate k1
      -- found k1 queued and, as in client-go, is not counted
      'workqueue_adds_total{name="q"} 8',
      'workqueue_depth{name="q"} 0',
      -- bad's add_rate_limited and later's add_after
      'workqueue_retries_total{name="q"} 2',
      'workqueue_work_duration_seconds_count{name="q"} 8',
      'workqueue_unfinished_work_seconds{name="q"} 0',
      'controller_runtime_reconcile_total{controller="q",result="success"} 6',
      'controller_runtime_reconcile_total{controller="q",result="error"} 1',
      'controller_runtime_reconcile_total{controller="q",result="requeue_after"} 1',
      'controller_runtime_reconcile_errors_total{controller="q"} 1',
      'controller_runtime_reconcile_time_seconds_count{controller="q"} 8',
      'controller_runtime_reconcile_time_seconds_bucket{controller="q",le="+Inf"} 8',
      'app_things_total{kind="k"} 5',
      'app_things_total{kind="b"} 1',
      '# HELP app_things_total Things "done".',
      '# TYPE app_things_total counter',
      -- cm1, cm2 and the kube-root-ca.crt of the four namespaces a cluster starts with
      'kubelua_informer_objects{informer="v1/configmaps"} 6',
      'kubelua_informer_relists_total{informer="v1/configmaps"} 0',
      'kubelua_reload_generation 1',
    }) do
      assert(have[want], "missing line: " .. want .. "\nin:\n" .. body)
    end
    assert.matches('\nrest_client_requests_total{code="201",method="POST",host="127%.0%.0%.1:%d+"} 2\n',
                   body)
    assert.matches('\nrest_client_requests_total{code="404",method="GET",host="127%.0%.0%.1:%d+"} 1\n',
                   body)
    -- discovery (GET /api/v1, for create's kind) and the missing ConfigMap
    assert.matches('\nrest_client_requests_total{code="200",method="GET",host="[^"]+"} 1\n', body)
    assert.matches('\nrest_client_request_duration_seconds_count{verb="GET",host="[^"]+"} 2\n', body)
    assert.matches('\nkubelua_informer_bytes{informer="v1/configmaps"} [1-9]%d*\n', body)
    assert.matches("\nkubelua_lua_heap_bytes [1-9]%d*\n", body)
    assert.matches("\nprocess_open_fds [1-9]%d*\n", body)
    assert.matches("\nprocess_resident_memory_bytes [1-9]%d*\n", body)
    assert.matches("\nprocess_cpu_seconds_total [%d.e+-]+\n", body)
    assert.matches("\nprocess_start_time_seconds 1%d%d%d%d%d%d%d%d%d[%d.]*\n", body)
    assert.matches("\nprocess_max_fds %d+\n", body)

    -- promtool (Debian's prometheus package, scripts/deps) checks the format
    -- and the naming conventions.
    local scrape = dir .. "/scrape.txt"
    write(scrape, body)
    local p = io.popen("promtool check metrics < " .. quote(scrape) .. " 2>&1; echo rc=$?")
    local out = p:read("*a")
    p:close()
    assert.equal("rc=0\n", out)

    assert.same({ 404, "404 page not found\n" }, { get(murl .. "/other") })
  end)

  it("answers /healthz, and /readyz once every informer has synced", function()
    write(dir .. "/c.lua", [[
local kube = require "kubelua"
kube.informer("v1", "configmaps")
kube.informer("v1", "nosuchthings") -- the simulator answers 404: never synced
]])
    proc = start(dir .. "/c.lua")
    local _, purl = urls(proc)
    assert.same({ 200, "ok" }, { get(purl .. "/healthz") })
    local code, body
    for _ = 1, 200 do
      code, body = get(purl .. "/readyz")
      if body:find("not synced: v1/nosuchthings\n", 1, true) then break end
      helper.sleep(0.02)
    end
    assert.equal(503, code)
    assert.equal("not ready: informers: not synced: v1/nosuchthings\n", body)

    helper.stop(proc)
    write(dir .. "/c.lua", [[
local kube = require "kubelua"
kube.informer("v1", "configmaps")
]])
    proc = start(dir .. "/c.lua")
    _, purl = urls(proc)
    for _ = 1, 200 do
      code, body = get(purl .. "/readyz")
      if code == 200 then break end
      helper.sleep(0.02)
    end
    assert.same({ 200, "ok" }, { code, body })
  end)

  it("keeps a script's metrics across a hot reload and refuses a changed shape", function()
    local path = dir .. "/c.lua"
    local function version(v, kind)
      return ([[
local kube = require "kubelua"
local c = kube.metrics.%s{ name = "app_loads_total", help = "Loads." }
c:inc()
kube.log.info("loaded", { version = %q })
]]):format(kind, v)
    end
    write(path, version("A", "counter"))
    proc = start(path)
    local murl = urls(proc)
    wait_log(proc, "loaded version=A")
    write(path, version("B", "counter"))
    wait_log(proc, "loaded version=B")
    write(path, version("C", "gauge"))
    local out = wait_log(proc, "reload failed")
    assert.matches("kube.metrics.gauge: app_loads_total is registered as a counter, not a gauge", out,
                   1, true)
    local _, body = get(murl .. "/metrics")
    local have = lines_of(body)
    for _, want in ipairs({ "app_loads_total 2", "kubelua_reload_generation 2",
                            "kubelua_reload_failures_total 1" }) do
      assert(have[want], "missing line: " .. want .. "\nin:\n" .. body)
    end
  end)

  it("reports leader_election_master_status", function()
    write(dir .. "/c.lua", 'require("kubelua").on_leading(function() require("kubelua").log.info("leads") end)\n')
    proc = start(dir .. "/c.lua", ENDPOINTS .. " --leader-elect --leader-election-id spec-lease")
    local murl = urls(proc)
    wait_log(proc, "INFO  leads")
    local _, body = get(murl .. "/metrics")
    assert(lines_of(body)['leader_election_master_status{name="spec-lease"} 1'], body)
  end)

  it("is off by default with --sim and fails the start on a bad address", function()
    local path = dir .. "/c.lua"
    write(path, 'require("kubelua").log.info("up") require("kubelua").stop(0)\n')
    local status, out = support.sh(support.kubelua .. " run --sim " .. quote(path))
    assert.equal(0, status)
    assert.not_matches("serving on", out)

    status, out = support.sh(support.kubelua .. " run --sim --metrics-bind-address 127.0.0.1 "
                             .. quote(path))
    assert.equal(1, status)
    assert.matches('metrics: bad address "127.0.0.1" (HOST:PORT, :PORT or 0)', out, 1, true)

    -- a port in use (the first process's)
    write(dir .. "/idle.lua", 'require("kubelua").log.info("idle")\n')
    proc = start(dir .. "/idle.lua", "--health-probe-bind-address 127.0.0.1:0")
    local port = wait_log(proc, "probes: serving on"):match("http://127%.0%.0%.1:(%d+)/")
    status, out = support.sh(support.kubelua .. " run --sim --metrics-bind-address 0"
                             .. " --health-probe-bind-address 127.0.0.1:" .. port .. " " .. quote(path))
    assert.equal(1, status)
    assert.matches("probes: cannot listen on 127.0.0.1:" .. port .. ": ", out, 1, true)
    assert.not_matches("INFO  up", out)
  end)
end)

describe("kubelua.metrics.parse_address", function()
  local metrics = require "kubelua.metrics"
  it("reads HOST:PORT, :PORT, [v6]:PORT and 0", function()
    assert.same({ "127.0.0.1", 8080 }, { metrics.parse_address("127.0.0.1:8080") })
    assert.same({ "", 8081 }, { metrics.parse_address(":8081") })
    assert.same({ "::1", 0 }, { metrics.parse_address("[::1]:0") })
    assert.same({}, { metrics.parse_address("0") })
    assert.same({ nil, 'bad address "x:99999" (HOST:PORT, :PORT or 0)' },
                { metrics.parse_address("x:99999") })
  end)
end)

