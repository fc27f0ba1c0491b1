-- A HorizontalPodAutoscaler is one object served through autoscaling/v1
-- and autoscaling/v2, as kube-apiserver 1.26 serves it: what v1 cannot
-- say is kept under annotations (autoscaling.alpha.kubernetes.io/...), so
-- that a v1 client that writes the object back keeps the v2 parts. The
-- expected bodies are the real server's answers to the same requests
-- (spec/differential/autoscaling_steps.lua replays them on both).
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"

assert:set_parameter("TableFormatLevel", -1)

local array = json.array

local V1 = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers"
local V2 = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"

local BEHAVIOR = '{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max","Policies":'
  .. '[{"Type":"Pods","Value":4,"PeriodSeconds":15},{"Type":"Percent","Value":100,'
  .. '"PeriodSeconds":15}]},"ScaleDown":{"StabilizationWindowSeconds":120,"SelectPolicy":"Max",'
  .. '"Policies":[{"Type":"Pods","Value":1,"PeriodSeconds":60}]}}'
local MEMORY = '[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"500Mi"}}]'

local TARGET = { apiVersion = "apps/v1", kind = "Deployment", name = "web" }

-- The object of an answer with status want, without what differs per
-- write (uid, times, resourceVersion, managedFields).
local function object(want, code, obj, raw)
  assert.equal(want, code, raw)
  local md = obj.metadata
  md.uid, md.creationTimestamp, md.resourceVersion, md.managedFields = nil, nil, nil, nil
  return obj
end

local function v2_web()
  return { apiVersion = "autoscaling/v2", kind = "HorizontalPodAutoscaler",
    metadata = { name = "web", annotations = { note = "x" } },
    spec = { scaleTargetRef = TARGET, minReplicas = 2, maxReplicas = 5, metrics = array {
      { type = "Resource", resource = { name = "cpu", target = { type = "Utilization",
        averageUtilization = 60 } } },
      { type = "Resource", resource = { name = "memory", target = { type = "AverageValue",
        averageValue = "500Mi" } } } },
      behavior = { scaleDown = { stabilizationWindowSeconds = 120, policies = array {
        { type = "Pods", value = 1, periodSeconds = 60 } } } } } }
end

-- The v2 view of web: the other metrics before the CPU target (as the v1
-- the server stores gives them back), the behavior's rules defaulted.
local function v2_view(max, cpu)
  return { apiVersion = "autoscaling/v2", kind = "HorizontalPodAutoscaler",
    metadata = { name = "web", namespace = "default", annotations = { note = "x" } },
    spec = { scaleTargetRef = TARGET, minReplicas = 2, maxReplicas = max, metrics = array {
      { type = "Resource", resource = { name = "memory", target = { type = "AverageValue",
        averageValue = "500Mi" } } },
      { type = "Resource", resource = { name = "cpu", target = { type = "Utilization",
        averageUtilization = cpu } } } },
      behavior = {
        scaleUp = { stabilizationWindowSeconds = 0, selectPolicy = "Max", policies = array {
          { type = "Pods", value = 4, periodSeconds = 15 },
          { type = "Percent", value = 100, periodSeconds = 15 } } },
        scaleDown = { stabilizationWindowSeconds = 120, selectPolicy = "Max", policies = array {
          { type = "Pods", value = 1, periodSeconds = 60 } } } } },
    status = { currentMetrics = json.null, desiredReplicas = 0 } }
end

local function v1_view(max, cpu)
  return { apiVersion = "autoscaling/v1", kind = "HorizontalPodAutoscaler",
    metadata = { name = "web", namespace = "default", annotations = { note = "x",
      ["autoscaling.alpha.kubernetes.io/behavior"] = BEHAVIOR,
      ["autoscaling.alpha.kubernetes.io/metrics"] = MEMORY } },
    spec = { scaleTargetRef = TARGET, minReplicas = 2, maxReplicas = max,
      targetCPUUtilizationPercentage = cpu },
    status = { currentReplicas = 0, desiredReplicas = 0 } }
end

-- The events of a watch from resourceVersion rv that ends after a second.
local function events(sim, path, rv)
  local code, _, raw = H.request(sim, "GET", path .. "?watch=1&resourceVersion=" .. rv
    .. "&timeoutSeconds=1")
  assert.equal(200, code, raw)
  local out = {}
  for line in raw:gmatch("[^\n]+") do
    local ev = json.decode(line)
    out[#out + 1] = { ev.type, ev.object.apiVersion, ev.object.spec.maxReplicas }
  end
  return out
end

describe("kubelua sim serves HorizontalPodAutoscalers through autoscaling/v1 and v2", function()
  local sim
  setup(function() sim = H.start("--no-controllers") end)
  teardown(function() H.stop(sim) end)

  it("keeps the v2 parts in v1's annotations through a v1 update, and watches see both",
    function()
      local _, list = H.api(sim, "GET", V1)
      local rv = list.metadata.resourceVersion
      assert.same(v2_view(5, 60), object(201, H.api(sim, "POST", V2, v2_web())))
      -- read through v1: the CPU target, the memory metric and the behavior
      -- as annotations
      local v1 = object(200, H.api(sim, "GET", V1 .. "/web"))
      assert.same(v1_view(5, 60), v1)
      -- a v1 client's update keeps them
      local _, got = H.api(sim, "GET", V1 .. "/web")
      got.spec.maxReplicas, got.spec.targetCPUUtilizationPercentage = 7, 70
      assert.same(v1_view(7, 70), object(200, H.api(sim, "PUT", V1 .. "/web", got)))
      assert.same(v2_view(7, 70), object(200, H.api(sim, "GET", V2 .. "/web")))
      -- a list through each version holds that version's form
      local _, l1 = H.api(sim, "GET", V1)
      local _, l2 = H.api(sim, "GET", V2)
      assert.same({ "HorizontalPodAutoscalerList", 70, 1 }, { l1.kind,
        l1.items[1].spec.targetCPUUtilizationPercentage, #l1.items })
      assert.same({ "memory", "cpu" }, { l2.items[1].spec.metrics[1].resource.name,
        l2.items[1].spec.metrics[2].resource.name })
      -- each version's watch sees both writes, in its own form
      assert.same({ { "ADDED", "autoscaling/v1", 5 }, { "MODIFIED", "autoscaling/v1", 7 } },
        events(sim, V1, rv))
      assert.same({ { "ADDED", "autoscaling/v2", 5 }, { "MODIFIED", "autoscaling/v2", 7 } },
        events(sim, V2, rv))
      assert.equal(200, (H.api(sim, "DELETE", V1 .. "/web")))
      assert.equal(404, (H.api(sim, "GET", V2 .. "/web")))
    end)

  it("keeps current metrics and conditions written through v2's status in v1", function()
    local web = v2_web()
    assert.equal(201, (H.api(sim, "POST", V2, web)))
    local _, got = H.api(sim, "GET", V2 .. "/web")
    got.status = { currentReplicas = 2, desiredReplicas = 3, currentMetrics = array {
      { type = "Resource", resource = { name = "cpu", current = { averageUtilization = 55,
        averageValue = "110m" } } },
      { type = "Resource", resource = { name = "memory", current = {
        averageValue = "300Mi" } } } },
      conditions = array { { type = "AbleToScale", status = "True",
        lastTransitionTime = "2026-12-05T10:00:00Z", reason = "ReadyForNewScale",
        message = "ok" } } }
    assert.equal(200, (H.api(sim, "PUT", V2 .. "/web/status", got)))
    local v1 = object(200, H.api(sim, "GET", V1 .. "/web"))
    local want = v1_view(5, 60)
    want.metadata.annotations["autoscaling.alpha.kubernetes.io/current-metrics"] =
      '[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":55,'
      .. '"currentAverageValue":"110m"}},{"type":"Resource","resource":{"name":"memory",'
      .. '"currentAverageValue":"300Mi"}}]'
    want.metadata.annotations["autoscaling.alpha.kubernetes.io/conditions"] =
      '[{"type":"AbleToScale","status":"True","lastTransitionTime":"2026-12-05T10:00:00Z",'
      .. '"reason":"ReadyForNewScale","message":"ok"}]'
    want.status = { currentReplicas = 2, desiredReplicas = 3,
      currentCPUUtilizationPercentage = 55 }
    assert.same(want, v1)
    -- written back through v1, the status is v2's again
    assert.equal(200, (H.api(sim, "PUT", V1 .. "/web", v1)))
    local _, v2 = H.api(sim, "GET", V2 .. "/web")
    assert.same(got.status, v2.status)
    assert.equal(200, (H.api(sim, "DELETE", V2 .. "/web")))
  end)

  it("gives a v1 object without a target the default CPU target of 80", function()
    assert.equal(201, (H.api(sim, "POST", V1, { apiVersion = "autoscaling/v1",
      kind = "HorizontalPodAutoscaler", metadata = { name = "plain" },
      spec = { scaleTargetRef = TARGET, maxReplicas = 3 } })))
    local _, v1 = H.api(sim, "GET", V1 .. "/plain")
    local _, v2 = H.api(sim, "GET", V2 .. "/plain")
    assert.same({ 1, 80 }, { v1.spec.minReplicas, v1.spec.targetCPUUtilizationPercentage })
    assert.same({ 1, array { { type = "Resource", resource = { name = "cpu", target = {
      type = "Utilization", averageUtilization = 80 } } } } },
      { v2.spec.minReplicas, v2.spec.metrics })
    assert.equal(200, (H.api(sim, "DELETE", V1 .. "/plain")))
  end)

  it("keeps a managedFields Update entry per apiVersion, each entry's fields in its own version",
    function()
      local _, made = H.api(sim, "POST", V1, { apiVersion = "autoscaling/v1",
        kind = "HorizontalPodAutoscaler", metadata = { name = "owned" },
        spec = { scaleTargetRef = TARGET, maxReplicas = 3 } })
      -- a v1 create owns the target its round trip through v2 fills in
      local mf = made.metadata.managedFields
      assert.same({ 1, "autoscaling/v1", {} }, { #mf, mf[1].apiVersion,
        mf[1].fieldsV1["f:spec"]["f:targetCPUUtilizationPercentage"] })
      local code, patched = H.api(sim, "PATCH", V2 .. "/owned", { spec = { maxReplicas = 4 } },
        { ["Content-Type"] = "application/merge-patch+json" })
      assert.equal(200, code)
      mf = patched.metadata.managedFields
      table.sort(mf, function(a, b) return a.apiVersion < b.apiVersion end)
      -- v1's entry lost maxReplicas, changed in v1's terms too
      assert.same({ "autoscaling/v1", "autoscaling/v2" }, { mf[1].apiVersion, mf[2].apiVersion })
      assert.same({ ["f:spec"] = { ["f:maxReplicas"] = {} } }, mf[2].fieldsV1)
      assert.is_nil(mf[1].fieldsV1["f:spec"]["f:maxReplicas"])
      assert.same({}, mf[1].fieldsV1["f:spec"]["f:targetCPUUtilizationPercentage"])
      assert.equal(200, (H.api(sim, "DELETE", V1 .. "/owned")))
    end)
end)
