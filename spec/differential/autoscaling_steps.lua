-- A HorizontalPodAutoscaler written and read through autoscaling/v1 and
-- autoscaling/v2 on both servers: the v2 parts v1 keeps under annotations
-- (metrics other than a CPU utilization target, current metrics,
-- conditions, behavior) and the exact text of each, a v1 client's update
-- that keeps them, the defaults each version's conversion applies (a CPU
-- target of 80, minReplicas 1, a behavior's missing rules), every kind
-- of metric in both directions, and the watches of both versions.
local json = require "kubelua.json"
local runner = require "spec.differential.runner"

local array = json.array

local _M = {}

local V1 = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers"
local V2 = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"

local TARGET = { apiVersion = "apps/v1", kind = "Deployment", name = "web" }
local SEL = { matchLabels = { app = "web" }, matchExpressions = array { { key = "tier",
  operator = "In", values = array { "a", "b" } } } }

local function hpa(version, name, spec, annotations)
  spec.scaleTargetRef = spec.scaleTargetRef or TARGET
  return { apiVersion = "autoscaling/" .. version, kind = "HorizontalPodAutoscaler",
    metadata = { name = name, annotations = annotations }, spec = spec }
end

local function get(path) return { label = "get " .. path, method = "GET", path = path } end

-- A PUT of the object last read at path, changed by edit.
local function put_back(label, path, edit)
  return { label = label, method = "PUT", path = path, body = {},
    prepare = function(st, rq)
      local obj = runner.copy(assert(st.last[path:gsub("/status$", "")],
        "nothing read at " .. path))
      obj.metadata.managedFields = nil
      if edit then edit(obj) end
      rq.body = obj
    end }
end

local function watch(path)
  return { label = "watch " .. path, method = "GET", path = path, watch = true,
    concurrent = true, prepare = function(st, rq)
      rq.path = path .. "?watch=1&resourceVersion=" .. st.marks.start .. "&timeoutSeconds=1"
    end }
end

function _M.steps()
  local web1, web2 = V1 .. "/web", V2 .. "/web"
  return {
    { label = "list (start of the watches)", method = "GET", path = V1,
      after = function(st, res) st.marks.start = res.body.metadata.resourceVersion end },
    { label = "create v2 web", method = "POST", path = V2, body = hpa("v2", "web", {
      minReplicas = 2, maxReplicas = 5, metrics = array {
        { type = "Resource", resource = { name = "cpu", target = { type = "Utilization",
          averageUtilization = 60 } } },
        { type = "Resource", resource = { name = "memory", target = { type = "AverageValue",
          averageValue = "500Mi" } } } },
      behavior = { scaleDown = { stabilizationWindowSeconds = 120, policies = array {
        { type = "Pods", value = 1, periodSeconds = 60 } } } } }, { note = "x" }) },
    get(web1),
    put_back("update v1 web", web1, function(o)
      o.spec.maxReplicas, o.spec.targetCPUUtilizationPercentage = 7, 70
    end),
    get(web2),
    put_back("status v2 web", web2 .. "/status", function(o)
      o.status = { currentReplicas = 2, desiredReplicas = 3, currentMetrics = array {
        { type = "Resource", resource = { name = "cpu", current = { averageUtilization = 55,
          averageValue = "110m" } } },
        { type = "Resource", resource = { name = "memory", current = {
          averageValue = "300Mi" } } } },
        conditions = array { { type = "AbleToScale", status = "True",
          lastTransitionTime = "2026-12-05T10:00:00Z", reason = "ReadyForNewScale",
          message = "ok" } } }
    end),
    get(web1),
    put_back("update v1 web again", web1, function(o) o.spec.minReplicas = 3 end),
    get(web2),
    watch(V1),
    watch(V2),
    { label = "create v2 up", method = "POST", path = V2, body = hpa("v2", "up", {
      maxReplicas = 4, behavior = { scaleUp = { selectPolicy = "Min" } } }) },
    get(V1 .. "/up"),
    { label = "create v1 plain", method = "POST", path = V1,
      body = hpa("v1", "plain", { maxReplicas = 3 }) },
    get(V2 .. "/plain"),
    { label = "create v2 kinds", method = "POST", path = V2, body = hpa("v2", "kinds", {
      maxReplicas = 9, metrics = array {
        { type = "Pods", pods = { metric = { name = "qps", selector = SEL },
          target = { type = "AverageValue", averageValue = "10" } } },
        { type = "Object", object = { describedObject = { apiVersion = "v1",
          kind = "Service", name = "web" }, metric = { name = "hits" },
          target = { type = "Value", value = "2k" } } },
        { type = "External", external = { metric = { name = "queue", selector = SEL },
          target = { type = "AverageValue", averageValue = "30" } } },
        { type = "Resource", resource = { name = "cpu", target = { type = "AverageValue",
          averageValue = "200m" } } } } }) },
    get(V1 .. "/kinds"),
    { label = "create v1 annotated", method = "POST", path = V1, body = hpa("v1", "annotated",
      { maxReplicas = 2, targetCPUUtilizationPercentage = 40 }, {
        ["autoscaling.alpha.kubernetes.io/metrics"] = '[{"type":"External","external":'
          .. '{"metricName":"queue","targetValue":"7"}},{"type":"Object","object":{"target":'
          .. '{"kind":"Service","name":"web"},"metricName":"hits","targetValue":"1"}}]',
        ["autoscaling.alpha.kubernetes.io/behavior"] = '{"ScaleDown":{"SelectPolicy":"Min",'
          .. '"Policies":[{"Type":"Pods","Value":2,"PeriodSeconds":30}]}}',
      }) },
    get(V2 .. "/annotated"),
    get(V1 .. "/annotated"),
    { label = "delete v2 web", method = "DELETE", path = web2 },
    get(web1),
  }
end

return _M
