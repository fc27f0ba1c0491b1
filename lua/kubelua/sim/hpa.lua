-- kubelua.sim.hpa: a HorizontalPodAutoscaler is one object served through
-- autoscaling/v1 and autoscaling/v2, as kube-apiserver 1.26 serves it
-- (stored in v1, read through each version's conversion). These are the
-- conversions. v1 has a CPU utilization target and reading only
-- (targetCPUUtilizationPercentage, currentCPUUtilizationPercentage); what
-- else v2 says is kept in v1 under annotations, as JSON text written in
-- the field order of the Go types the real server marshals: the metrics
-- other than CPU utilization and the current metrics (autoscaling/v1's
-- MetricSpec and MetricStatus), the conditions, and the behavior (the
-- internal type, whose field names are capitalized). Reading v1 back
-- takes them out of the annotations again, with a CPU utilization target
-- of 80 when no metric is left; v2's decoder defaults what a behavior
-- leaves out (defaults).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"

local type, pairs, ipairs, select, next = type, pairs, ipairs, select, next
local concat = table.concat
local lower = string.lower
local encode, decode, null, is_array = json.encode, json.decode, json.null, json.is_array
local copy = util.copy

local _M = {}

local METRICS = "autoscaling.alpha.kubernetes.io/metrics"
local CURRENT = "autoscaling.alpha.kubernetes.io/current-metrics"
local CONDITIONS = "autoscaling.alpha.kubernetes.io/conditions"
local BEHAVIOR = "autoscaling.alpha.kubernetes.io/behavior"
local ROUND_TRIP = { METRICS, CURRENT, CONDITIONS, BEHAVIOR }

-- v1 has no metrics: a CPU utilization target of this is what it means
-- when it names none (autoscaling.DefaultCPUUtilization).
local DEFAULT_CPU = 80

local function is_object(v) return type(v) == "table" and not is_array(v) end
local function present(v) return v ~= nil and v ~= null end
local function list(v) return is_array(v) and v or {} end
local function object(v) return is_object(v) and v or {} end

-- The value of field name in t, the name matched without regard to case,
-- as Go's encoding/json reads a field.
local function field(t, name)
  if not is_object(t) then return nil end
  local v = t[name]
  if v ~= nil then return v end
  local want = lower(name)
  for k, x in pairs(t) do
    if type(k) == "string" and lower(k) == want then return x end
  end
  return nil
end

-- JSON text in a Go type's field order: fields(k1, text1, k2, text2...)
-- -> '{"k1":text1,...}', a nil text leaving its field out.
local function fields(...)
  local parts = {}
  for i = 1, select("#", ...), 2 do
    local k, v = select(i, ...)
    if v ~= nil then parts[#parts + 1] = encode(k) .. ":" .. v end
  end
  return "{" .. concat(parts, ",") .. "}"
end

-- The JSON text of a value, nil for none (a field left out).
local function opt(v) if present(v) then return encode(v) end return nil end

-- A resource.Quantity, which has no omitempty: "0" when not set.
local function quantity(v) if present(v) then return encode(v) end return '"0"' end

-- The JSON array text of items, each written by fn.
local function texts(items, fn)
  local out = {}
  for i, x in ipairs(items) do out[i] = fn(object(x)) end
  return "[" .. concat(out, ",") .. "]"
end

-- metav1.LabelSelector: matchLabels, then matchExpressions.
local function selector_text(sel)
  if not is_object(sel) then return nil end
  local exprs
  if is_array(sel.matchExpressions) then
    exprs = texts(sel.matchExpressions, function(x)
      return fields("key", opt(x.key), "operator", opt(x.operator), "values", opt(x.values))
    end)
  end
  return fields("matchLabels", opt(sel.matchLabels), "matchExpressions", exprs)
end

local function ref_text(r)
  if not is_object(r) then r = {} end
  return fields("kind", encode(r.kind or ""), "name", encode(r.name or ""), "apiVersion",
    present(r.apiVersion) and r.apiVersion ~= "" and encode(r.apiVersion) or nil)
end

-- v2's MetricSpec (status false: its target) or MetricStatus (status
-- true: its current value) as autoscaling/v1's, whose fields are named
-- target... or current...; a status's values are Quantities, written
-- when not set.
local function v1_metric_text(m, status)
  local t = m.type
  local pre = status and "current" or "target"
  local function value(v) if status then return quantity(v) end return opt(v) end
  local key, body
  if t == "Resource" or t == "ContainerResource" then
    key = t == "Resource" and "resource" or "containerResource"
    local r = object(m[key])
    local v = object(r[pre])
    body = fields("name", encode(r.name or ""), pre .. "AverageUtilization",
      opt(v.averageUtilization), pre .. "AverageValue", value(v.averageValue), "container",
      t == "ContainerResource" and encode(r.container or "") or nil)
  elseif t == "Pods" or t == "Object" or t == "External" then
    key = lower(t)
    local x = object(m[key])
    local id, v = object(x.metric), object(x[pre])
    if t == "Pods" then
      body = fields("metricName", encode(id.name or ""), pre .. "AverageValue",
        quantity(v.averageValue), "selector", selector_text(id.selector))
    elseif t == "Object" then
      body = fields("target", ref_text(x.describedObject), "metricName", encode(id.name or ""),
        pre .. "Value", quantity(v.value), "selector", selector_text(id.selector),
        "averageValue", opt(v.averageValue))
    else
      body = fields("metricName", encode(id.name or ""), "metricSelector",
        selector_text(id.selector), pre .. "Value", value(v.value), pre .. "AverageValue",
        opt(v.averageValue))
    end
  end
  return fields("type", encode(t or ""), key, body)
end

local function metric_text(m) return v1_metric_text(m, false) end

local function status_text(m) return v1_metric_text(m, true) end

local function condition_text(c)
  return fields("type", encode(c.type or ""), "status", encode(c.status or ""),
    "lastTransitionTime", opt(c.lastTransitionTime), "reason", opt(c.reason), "message",
    opt(c.message))
end

-- The internal HorizontalPodAutoscalerBehavior, marshaled without json
-- tags: its Go field names.
local function rules_text(r)
  if not is_object(r) then return "null" end
  local policies = "null"
  if is_array(r.policies) then
    policies = texts(r.policies, function(p)
      return fields("Type", encode(p.type or ""), "Value", encode(p.value or 0),
        "PeriodSeconds", encode(p.periodSeconds or 0))
    end)
  end
  return fields("StabilizationWindowSeconds", opt(r.stabilizationWindowSeconds) or "null",
    "SelectPolicy", opt(r.selectPolicy) or "null", "Policies", policies)
end

local function behavior_text(b)
  return fields("ScaleUp", rules_text(b.scaleUp), "ScaleDown", rules_text(b.scaleDown))
end

-- The scaling rules v2 defaults a behavior's scaleUp and scaleDown to
-- (GenerateHPAScaleUpRules, GenerateHPAScaleDownRules); a scale-down
-- stabilization window is left to the controller's flag.
local function default_rules(up)
  if up then
    return { stabilizationWindowSeconds = 0, selectPolicy = "Max", policies = json.array {
      { type = "Pods", value = 4, periodSeconds = 15 },
      { type = "Percent", value = 100, periodSeconds = 15 } } }
  end
  return { selectPolicy = "Max", policies = json.array {
    { type = "Percent", value = 100, periodSeconds = 15 } } }
end

-- Rules r with the defaults filling what they leave out.
local function defaulted_rules(r, up)
  local out = default_rules(up)
  if not is_object(r) then return out end
  for _, k in ipairs { "stabilizationWindowSeconds", "selectPolicy", "policies" } do
    if present(r[k]) then out[k] = r[k] end
  end
  return out
end

-- Rules read from the behavior annotation (Go field names, any case); the
-- conversion fills in no defaults.
local function rules_of(r)
  if not is_object(r) then return nil end
  local window, select_policy = field(r, "StabilizationWindowSeconds"), field(r, "SelectPolicy")
  local out = { stabilizationWindowSeconds = present(window) and window or nil,
    selectPolicy = present(select_policy) and select_policy or nil }
  local policies = field(r, "Policies")
  if is_array(policies) then
    local ps = json.array {}
    for i, p in ipairs(policies) do
      ps[i] = { type = field(p, "Type"), value = field(p, "Value"),
        periodSeconds = field(p, "PeriodSeconds") }
    end
    out.policies = ps
  end
  return out
end

local function is_cpu(m)
  return is_object(m) and m.type == "Resource" and is_object(m.resource)
    and m.resource.name == "cpu"
end

-- minReplicas, which both versions default to 1.
local function min_replicas(spec)
  if present(spec.minReplicas) then return spec.minReplicas end
  return 1
end

-- The annotations of a HorizontalPodAutoscaler without those conversion
-- writes (a copy, or nil for none left), and the values they had.
local function take_round_trip(ann)
  if not is_object(ann) then return nil, {} end
  local rest, taken = {}, {}
  for k, v in pairs(ann) do rest[k] = v end
  for _, k in ipairs(ROUND_TRIP) do
    taken[k] = rest[k]
    rest[k] = nil
  end
  if next(rest) == nil then rest = nil end
  return rest, taken
end

-- The autoscaling/v1 form of a HorizontalPodAutoscaler in the v2 form.
function _M.to_v1(h)
  local md = copy(object(h.metadata))
  local spec, st = object(h.spec), object(h.status)
  local ann = take_round_trip(md.annotations) or {}
  local s = { scaleTargetRef = copy(spec.scaleTargetRef), minReplicas = min_replicas(spec),
    maxReplicas = spec.maxReplicas }
  -- the first CPU metric says the target; every CPU utilization target
  -- is left out of the others
  local others, first = {}, true
  for _, m in ipairs(list(spec.metrics)) do
    local cpu = is_cpu(m) and object(m.resource.target).averageUtilization or nil
    if is_cpu(m) and first then
      s.targetCPUUtilizationPercentage = present(cpu) and cpu or nil
      first = false
    end
    if not present(cpu) then others[#others + 1] = m end
  end
  local status = { observedGeneration = st.observedGeneration, lastScaleTime = st.lastScaleTime,
    currentReplicas = st.currentReplicas or 0, desiredReplicas = st.desiredReplicas or 0 }
  local current = list(st.currentMetrics)
  for _, m in ipairs(current) do
    local u = is_cpu(m) and object(m.resource.current).averageUtilization or nil
    if present(u) then status.currentCPUUtilizationPercentage = u end
  end
  if #others > 0 then ann[METRICS] = texts(others, metric_text) end
  if #current > 0 then ann[CURRENT] = texts(current, status_text) end
  if #list(st.conditions) > 0 then ann[CONDITIONS] = texts(st.conditions, condition_text) end
  if is_object(spec.behavior) then ann[BEHAVIOR] = behavior_text(spec.behavior) end
  md.annotations = next(ann) ~= nil and ann or nil
  return { apiVersion = "autoscaling/v1", kind = "HorizontalPodAutoscaler", metadata = md,
    spec = s, status = status }
end

-- autoscaling/v1's MetricSpec (status false) or MetricStatus (status
-- true) as v2's: a target says its type, a current value does not; a
-- status's values are Quantities, "0" when not set.
local function v2_metric(m, status)
  local t = field(m, "type")
  local pre = status and "current" or "target"
  local out = { type = t }
  if t == "Resource" or t == "ContainerResource" then
    local key = t == "Resource" and "resource" or "containerResource"
    local r = object(field(m, key))
    local v = { averageUtilization = field(r, pre .. "AverageUtilization"),
      averageValue = field(r, pre .. "AverageValue") }
    if status then
      v.averageValue = v.averageValue or "0"
    else
      v.type = present(v.averageUtilization) and "Utilization" or "AverageValue"
    end
    out[key] = { name = field(r, "name"), [pre] = v,
      container = t == "ContainerResource" and field(r, "container") or nil }
  elseif t == "Pods" or t == "Object" or t == "External" then
    local x = object(field(m, lower(t)))
    local v
    if t == "Pods" then
      v = { type = not status and "AverageValue" or nil,
        averageValue = field(x, pre .. "AverageValue") or "0" }
    elseif t == "Object" then
      v = { value = field(x, pre .. "Value") or "0", averageValue = field(x, "averageValue") }
      if not status then v.type = present(v.averageValue) and "AverageValue" or "Value" end
    else
      v = { value = field(x, pre .. "Value"), averageValue = field(x, pre .. "AverageValue") }
      if status then
        v.value = v.value or "0"
      else
        v.type = present(v.value) and "Value" or "AverageValue"
      end
    end
    local source = { [pre] = v, metric = { name = field(x, "metricName"),
      selector = field(x, t == "External" and "metricSelector" or "selector") } }
    if t == "Object" then
      local ref = object(field(x, "target"))
      source.describedObject = { kind = field(ref, "kind"), name = field(ref, "name"),
        apiVersion = field(ref, "apiVersion") }
    end
    out[lower(t)] = source
  end
  return out
end

local function metric_of(m) return v2_metric(m, false) end

local function status_of(m) return v2_metric(m, true) end

local function condition_of(c)
  return { type = field(c, "type"), status = field(c, "status"),
    lastTransitionTime = field(c, "lastTransitionTime"), reason = field(c, "reason"),
    message = field(c, "message") }
end

-- The decoded list of annotation text s, each item through fn; nil for
-- none or for text that is not a JSON array.
local function decoded_list(s, fn)
  local v = type(s) == "string" and decode(s)
  if not is_array(v) then return nil end
  local out = json.array {}
  for i, x in ipairs(v) do out[i] = fn(object(x)) end
  return out
end

-- The autoscaling/v2 form of a HorizontalPodAutoscaler in the v1 form.
function _M.to_v2(h)
  local md = copy(object(h.metadata))
  local spec, st = object(h.spec), object(h.status)
  local ann, taken = take_round_trip(md.annotations)
  md.annotations = ann
  local metrics = decoded_list(taken[METRICS], metric_of) or json.array {}
  if present(spec.targetCPUUtilizationPercentage) then
    metrics[#metrics + 1] = { type = "Resource", resource = { name = "cpu", target = {
      type = "Utilization", averageUtilization = spec.targetCPUUtilizationPercentage } } }
  end
  if #metrics == 0 then
    metrics[1] = { type = "Resource", resource = { name = "cpu", target = {
      type = "Utilization", averageUtilization = DEFAULT_CPU } } }
  end
  local s = { scaleTargetRef = copy(spec.scaleTargetRef), minReplicas = min_replicas(spec),
    maxReplicas = spec.maxReplicas, metrics = metrics }
  local b = type(taken[BEHAVIOR]) == "string" and decode(taken[BEHAVIOR])
  if is_object(b) then
    s.behavior = { scaleUp = rules_of(field(b, "ScaleUp")),
      scaleDown = rules_of(field(b, "ScaleDown")) }
  end
  local current = decoded_list(taken[CURRENT], status_of)
  if not current and present(st.currentCPUUtilizationPercentage) then
    current = json.array { { type = "Resource", resource = { name = "cpu", current = {
      averageUtilization = st.currentCPUUtilizationPercentage } } } }
  end
  local status = { observedGeneration = st.observedGeneration, lastScaleTime = st.lastScaleTime,
    desiredReplicas = st.desiredReplicas or 0, currentMetrics = current or null,
    conditions = decoded_list(taken[CONDITIONS], condition_of) }
  if present(st.currentReplicas) and st.currentReplicas ~= 0 then
    status.currentReplicas = st.currentReplicas
  end
  return { apiVersion = "autoscaling/v2", kind = "HorizontalPodAutoscaler", metadata = md,
    spec = s, status = status }
end

-- The defaults each version's decoder gives a HorizontalPodAutoscaler obj
-- (changed in place): minReplicas 1, and in v2 a CPU utilization target
-- of 80 when it names no metric and every rule a behavior leaves out.
function _M.defaults(version, obj)
  if not is_object(obj.spec) then obj.spec = {} end
  local spec = obj.spec
  spec.minReplicas = min_replicas(spec)
  if version ~= "v2" then return end
  if #list(spec.metrics) == 0 then
    spec.metrics = json.array { { type = "Resource", resource = { name = "cpu", target = {
      type = "Utilization", averageUtilization = DEFAULT_CPU } } } }
  end
  local b = spec.behavior
  if is_object(b) then
    b.scaleUp = defaulted_rules(b.scaleUp, true)
    b.scaleDown = defaulted_rules(b.scaleDown, false)
  end
end

-- Each version's form as the real server gives it back: through the v1
-- it stores.
function _M.canon_v1(h) return _M.to_v1(_M.to_v2(h)) end

function _M.canon_v2(h) return _M.to_v2(_M.to_v1(h)) end

return _M
