-- kube.metrics: scripts' own counters, gauges and histograms over the
-- runtime's registry (the exposition itself is checked in spec/c and in
-- spec/integration/metrics_run_spec.lua).
local kube = require "kubelua"
local support = require "spec.support"

local metrics = kube.metrics

local function lines(text)
  local set = {}
  for line in text:gmatch("[^\n]+") do set[line] = true end
  return set
end

describe("kube.metrics", function()
  describe("counter", function()
    it("counts by labels, and the same name gives the same counter", function()
      local c = metrics.counter{ name = "spec_events_total", help = "Events.", labels = { "kind", "ok" } }
      c:inc({ kind = "Pod", ok = true })
      c:inc({ kind = "Pod", ok = true }, 2)
      c:inc(3, { kind = "Node", ok = false })
      local again = metrics.counter{ name = "spec_events_total", labels = { "kind", "ok" } }
      assert.equal(c, again)
      again:inc({ kind = "Pod", ok = true })
      assert.equal(4, c:value({ kind = "Pod", ok = true }))
      local have = lines(metrics.render())
      assert.is_true(have['spec_events_total{kind="Pod",ok="true"} 4'])
      assert.is_true(have['spec_events_total{kind="Node",ok="false"} 3'])
      assert.is_true(have["# TYPE spec_events_total counter"])
    end)

    it("raises on misuse", function()
      local c = metrics.counter{ name = "spec_misuse_total", labels = { "a" } }
      support.raises("metric:inc: spec_misuse_total needs labels (a table with a)",
                     function() c:inc() end)
      support.raises("metric:inc: spec_misuse_total: labels must be exactly {a} (2 given)",
                     function() c:inc({ a = 1, b = 2 }) end)
      support.raises("metric:inc: spec_misuse_total: a counter only goes up (got -1)",
                     function() c:inc({ a = 1 }, -1) end)
      support.raises("metric:observe: spec_misuse_total is a counter",
                     function() c:observe(1, { a = 1 }) end)
      support.raises("kube.metrics.gauge: spec_misuse_total is registered as a counter, not a gauge",
                     function() metrics.gauge{ name = "spec_misuse_total", labels = { "a" } } end)
      support.raises("kube.metrics.counter: spec_misuse_total is registered with labels {a}",
                     function() metrics.counter{ name = "spec_misuse_total" } end)
      support.raises('kube.metrics.counter: invalid metric name "bad-name"',
                     function() metrics.counter{ name = "bad-name" } end)
      support.raises("kube.metrics.counter: expected a table {name = …}, got string",
                     function() metrics.counter("x") end)
    end)
  end)

  describe("with", function()
    it("binds label values once for the hot path", function()
      local c = metrics.counter{ name = "spec_bound_total", labels = { "q" } }
      local s = c:with{ q = "a" }
      s:inc()
      s:inc(2)
      assert.equal(3, c:value{ q = "a" })
      assert.equal(3, s:value())
      local h = metrics.histogram{ name = "spec_bound_seconds", buckets = { 1 } }:with{}
      h:observe(2)
      assert.same({ 1, 2 }, { h:value() })
      support.raises("series:observe: spec_bound_total is a counter", function() s:observe(1) end)
      support.raises("series:set: spec_bound_total is a counter", function() s:set(1) end)
    end)
  end)

  describe("gauge", function()
    it("sets, increments and decrements", function()
      local g = metrics.gauge{ name = "spec_inflight" }
      g:set(5)
      g:inc()
      g:dec(2)
      assert.equal(4, g:value())
      assert.is_true(lines(metrics.render())["spec_inflight 4"])
    end)
  end)

  describe("histogram", function()
    it("observes into cumulative buckets", function()
      local h = metrics.histogram{ name = "spec_wait_seconds", labels = { "q" }, buckets = { 0.5, 1 } }
      h:observe(0.25, { q = "a" })
      h:observe(0.5, { q = "a" })
      h:observe(4, { q = "a" })
      assert.same({ 3, 4.75 }, { h:value({ q = "a" }) })
      local have = lines(metrics.render())
      assert.is_true(have['spec_wait_seconds_bucket{q="a",le="0.5"} 2'])
      assert.is_true(have['spec_wait_seconds_bucket{q="a",le="1"} 2'])
      assert.is_true(have['spec_wait_seconds_bucket{q="a",le="+Inf"} 3'])
      assert.is_true(have['spec_wait_seconds_sum{q="a"} 4.75'])
      assert.is_true(have['spec_wait_seconds_count{q="a"} 3'])
      support.raises("kube.metrics.histogram: spec_wait_seconds is registered with other buckets",
                     function() metrics.histogram{ name = "spec_wait_seconds", labels = { "q" } } end)
    end)
  end)
end)
