-- kubelua.sim.workloads.defaults: what kube-apiserver 1.26 fills in when
-- it stores a Pod, a pod template or a Job, beyond the container and pod
-- spec defaults the store applies itself (kubelua.sim.store's
-- default_pod_spec, which calls pod_spec here), so that what a controller
-- reads back is what a cluster gives it:
--   every pod spec (Pods and templates): probes' timeoutSeconds 1,
--     periodSeconds 10, successThreshold 1, failureThreshold 3; an httpGet
--     action's path "/" and scheme HTTP; configMap, secret, projected and
--     downwardAPI volumes' defaultMode 420; a hostPath's type ""; a
--     fieldRef's apiVersion "v1"; a projected token's expirationSeconds
--     3600 (SetDefaults_*);
--   a Pod: requests copied from limits where unset, enableServiceLinks
--     true (SetDefaults_Pod); on create, the two NoExecute tolerations of
--     the DefaultTolerationSeconds admission plugin, priority 0 and
--     preemptionPolicy PreemptLowerPriority (the Priority plugin, for a
--     Pod without priorityClassName), status phase Pending and its
--     qosClass (the Pod strategy);
--   a Job: parallelism, completions, backoffLimit, completionMode,
--     suspend (SetDefaults_Job), its template's pod spec; on create, an
--     empty status, the selector controller-uid and the template's labels
--     controller-uid and job-name (unless manualSelector), the Job's
--     labels from them when it has none, the annotation
--     batch.kubernetes.io/job-tracking;
--   a CronJob: concurrencyPolicy, suspend, the history limits, its job
--     template's pod spec; on create, an empty status;
--   a DaemonSet, on create: the annotation
--     deprecated.daemonset.template.generation and its zero counts.

local json = require "kubelua.json"

local type, pairs, ipairs, next, tostring = type, pairs, ipairs, next, tostring
local is_array, null = json.is_array, json.null

local _M = {}

local function is_object(v) return type(v) == "table" and not is_array(v) and v ~= null end

local function list(v) return is_array(v) and v or {} end

local function field_ref(ref)
  if is_object(ref) and ref.apiVersion == nil then ref.apiVersion = "v1" end
end

local function http_get(action)
  if not is_object(action) then return end
  if action.path == nil or action.path == "" then action.path = "/" end
  if action.scheme == nil or action.scheme == "" then action.scheme = "HTTP" end
end

local function probe(p)
  if not is_object(p) then return end
  if p.timeoutSeconds == nil then p.timeoutSeconds = 1 end
  if p.periodSeconds == nil then p.periodSeconds = 10 end
  if p.successThreshold == nil then p.successThreshold = 1 end
  if p.failureThreshold == nil then p.failureThreshold = 3 end
  http_get(p.httpGet)
end

local function container(c)
  if not is_object(c) then return end
  for _, name in ipairs { "livenessProbe", "readinessProbe", "startupProbe" } do probe(c[name]) end
  local lc = is_object(c.lifecycle) and c.lifecycle
  if lc then
    for _, name in ipairs { "postStart", "preStop" } do
      if is_object(lc[name]) then http_get(lc[name].httpGet) end
    end
  end
  for _, env in ipairs(list(c.env)) do
    if is_object(env) and is_object(env.valueFrom) then field_ref(env.valueFrom.fieldRef) end
  end
end

local function items(source)
  for _, item in ipairs(list(source.items)) do
    if is_object(item) then field_ref(item.fieldRef) end
  end
end

local MODE_420 = { "configMap", "secret", "downwardAPI", "projected" }

local function volume(v)
  if not is_object(v) then return end
  for _, kind in ipairs(MODE_420) do
    local src = v[kind]
    if is_object(src) and src.defaultMode == nil then src.defaultMode = 420 end
  end
  if is_object(v.downwardAPI) then items(v.downwardAPI) end
  if is_object(v.hostPath) and v.hostPath.type == nil then v.hostPath.type = "" end
  local projected = is_object(v.projected) and v.projected
  for _, src in ipairs(projected and list(projected.sources) or {}) do
    if is_object(src) and is_object(src.downwardAPI) then items(src.downwardAPI) end
    local token = is_object(src) and src.serviceAccountToken
    if is_object(token) and token.expirationSeconds == nil then token.expirationSeconds = 3600 end
  end
end

-- The defaults of every pod spec, a Pod's or a template's.
function _M.pod_spec(spec)
  if not is_object(spec) then return end
  for _, key in ipairs { "containers", "initContainers", "ephemeralContainers" } do
    for _, c in ipairs(list(spec[key])) do container(c) end
  end
  for _, v in ipairs(list(spec.volumes)) do volume(v) end
end

-- SetDefaults_Pod: a Pod's, not a template's.
function _M.pod(obj)
  local spec = obj.spec
  if not is_object(spec) then return end
  for _, key in ipairs { "containers", "initContainers" } do
    for _, c in ipairs(list(spec[key])) do
      local r = is_object(c) and is_object(c.resources) and c.resources
      if r and is_object(r.limits) and next(r.limits) then
        r.requests = is_object(r.requests) and r.requests or {}
        for name, q in pairs(r.limits) do
          if r.requests[name] == nil then r.requests[name] = q end
        end
      end
    end
  end
  if spec.enableServiceLinks == nil then spec.enableServiceLinks = true end
end

local function quantity_set(m)
  local out = {}
  for _, name in ipairs { "cpu", "memory" } do
    local q = is_object(m) and m[name]
    if q ~= nil and q ~= null and not tostring(q):match("^[+-]?0*%.?0*[a-zA-Z]*$") then
      out[name] = q
    end
  end
  return out
end

-- The QoS class of a pod spec (BestEffort, Burstable or Guaranteed), as
-- GetPodQOS computes it from the cpu and memory of every container.
function _M.qos(spec)
  local any, guaranteed = false, true
  for _, key in ipairs { "containers", "initContainers" } do
    for _, c in ipairs(list(is_object(spec) and spec[key])) do
      local r = is_object(c) and is_object(c.resources) and c.resources or {}
      local req, lim = quantity_set(r.requests), quantity_set(r.limits)
      for _, name in ipairs { "cpu", "memory" } do
        if req[name] or lim[name] then any = true end
        if not lim[name] then guaranteed = false end
        if req[name] and req[name] ~= lim[name] then guaranteed = false end
      end
    end
  end
  if not any then return "BestEffort" end
  return guaranteed and "Guaranteed" or "Burstable"
end

local NOT_READY, UNREACHABLE = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"

-- What the admission plugins DefaultTolerationSeconds and Priority add
-- to a Pod on create.
local function pod_admit(obj)
  local spec = obj.spec
  if not is_object(spec) then return end
  local tolerations = is_array(spec.tolerations) and spec.tolerations or json.array {}
  local has = {}
  for _, t in ipairs(tolerations) do
    if is_object(t) and (t.effect == nil or t.effect == "" or t.effect == "NoExecute") then
      for _, key in ipairs { NOT_READY, UNREACHABLE } do
        if t.key == nil or t.key == "" or t.key == key then has[key] = true end
      end
    end
  end
  for _, key in ipairs { NOT_READY, UNREACHABLE } do
    if not has[key] then
      tolerations[#tolerations + 1] = { key = key, operator = "Exists", effect = "NoExecute",
        tolerationSeconds = 300 }
    end
  end
  spec.tolerations = tolerations
  if spec.priorityClassName == nil or spec.priorityClassName == "" then
    if spec.priority == nil then spec.priority = 0 end
    if spec.preemptionPolicy == nil then spec.preemptionPolicy = "PreemptLowerPriority" end
  end
end

-- SetDefaults_Job, and the pod spec defaults of its template through
-- template(spec) (the store's).
local function job_spec(spec, template)
  if not is_object(spec) then return end
  if spec.completions == nil and spec.parallelism == nil then spec.completions = 1 end
  if spec.parallelism == nil then spec.parallelism = 1 end
  if spec.backoffLimit == nil then spec.backoffLimit = 6 end
  if spec.completionMode == nil then spec.completionMode = "NonIndexed" end
  if spec.suspend == nil then spec.suspend = false end
  template(spec)
end

-- The Job strategy's generated selector (in its Validate, after the
-- fields' owners were recorded: they are no manager's), and the Job's
-- labels from its template's when it has none.
local function job_select(obj)
  local spec, md = obj.spec, obj.metadata
  if not is_object(spec) then return end
  if spec.manualSelector ~= true then
    spec.selector = is_object(spec.selector) and spec.selector or {}
    local sel = spec.selector
    sel.matchLabels = is_object(sel.matchLabels) and sel.matchLabels or {}
    sel.matchLabels["controller-uid"] = md.uid
    local t = is_object(spec.template) and spec.template or {}
    spec.template = t
    t.metadata = is_object(t.metadata) and t.metadata or { creationTimestamp = null }
    t.metadata.labels = is_object(t.metadata.labels) and t.metadata.labels or {}
    t.metadata.labels["controller-uid"] = md.uid
    t.metadata.labels["job-name"] = md.name
  end
  local tl = is_object(spec.template) and is_object(spec.template.metadata)
    and spec.template.metadata.labels
  if is_object(tl) and not (is_object(md.labels) and next(md.labels)) then
    md.labels = {}
    for k, v in pairs(tl) do md.labels[k] = v end
  end
  md.annotations = is_object(md.annotations) and md.annotations or {}
  md.annotations["batch.kubernetes.io/job-tracking"] = ""
end

-- The defaults of every write of res's obj that the store leaves to this
-- module; template(spec) applies the store's pod spec defaults to
-- spec.template.
function _M.write(res, obj, template)
  if not res.builtin then return end
  if res.gv == "v1" and res.name == "pods" then
    _M.pod(obj)
  elseif res.gv == "batch/v1" and res.name == "jobs" then
    job_spec(obj.spec, template)
  elseif res.gv == "batch/v1" and res.name == "cronjobs" and is_object(obj.spec) then
    local spec = obj.spec
    if spec.concurrencyPolicy == nil then spec.concurrencyPolicy = "Allow" end
    if spec.suspend == nil then spec.suspend = false end
    if spec.successfulJobsHistoryLimit == nil then spec.successfulJobsHistoryLimit = 3 end
    if spec.failedJobsHistoryLimit == nil then spec.failedJobsHistoryLimit = 1 end
    local jt = spec.jobTemplate
    if is_object(jt) then
      if jt.metadata == nil then jt.metadata = { creationTimestamp = null } end
      local t = is_object(jt.spec) and jt.spec.template
      if is_object(t) and t.metadata == nil then t.metadata = {} end
      template(jt.spec)
    end
  end
end

-- The fields res's obj gets on create, after write's defaults.
function _M.create(res, obj)
  if not res.builtin then return end
  if res.gv == "v1" and res.name == "pods" then
    obj.status = { phase = "Pending", qosClass = _M.qos(obj.spec) }
  elseif res.gv == "batch/v1" and (res.name == "jobs" or res.name == "cronjobs") then
    obj.status = {}
  elseif res.gv == "apps/v1" and res.name == "daemonsets" then
    local md = obj.metadata
    md.annotations = is_object(md.annotations) and md.annotations or {}
    md.annotations["deprecated.daemonset.template.generation"] = "1"
    obj.status = { currentNumberScheduled = 0, numberMisscheduled = 0,
      desiredNumberScheduled = 0, numberReady = 0 }
  end
end

-- What res's obj gets on create after its fields' owners were recorded
-- (they are no manager's): admission's, a Job's selector.
function _M.create_unowned(res, obj)
  if not res.builtin then return end
  if res.gv == "v1" and res.name == "pods" then
    pod_admit(obj)
  elseif res.gv == "batch/v1" and res.name == "jobs" then
    job_select(obj)
  end
end

return _M
