-- kubelua.sim.store.defaults: what a real apiserver fills into a body it
-- decodes before it validates and stores it: pod spec and workload
-- defaults, a Secret's stringData and type, a Service's (through
-- kubelua.sim.services), a webhook configuration's, a Namespace's name
-- label, a CRD's status, and the empty maps it drops. Each function
-- changes the object in place (a copy the store made of the body).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local quantity = require "kubelua.sim.quantity"
local services = require "kubelua.sim.services"
local hpa = require "kubelua.sim.hpa"
local wdefaults = require "kubelua.sim.workloads.defaults"

local type, pairs, ipairs, tostring, next = type, pairs, ipairs, tostring, next
local null, is_array = json.null, json.is_array

local _M = {}

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- The kinds with code of their own.
local function is_service(res)
  return res.builtin and res.gv == "v1" and res.name == "services"
end

local function is_secret(res)
  return res.builtin and res.gv == "v1" and res.name == "secrets"
end

local function is_configmap(res)
  return res.builtin and res.gv == "v1" and res.name == "configmaps"
end

-- Calls fn(map, name, value) for each resource quantity of a pod spec's
-- containers (resources.limits and requests).
local function each_quantity(spec, fn)
  if not is_object(spec) then return end
  for _, list in ipairs { spec.containers, spec.initContainers, spec.ephemeralContainers } do
    for _, c in ipairs(is_array(list) and list or {}) do
      local r = is_object(c) and is_object(c.resources) and c.resources
      for _, kind in ipairs { "limits", "requests" } do
        local m = r and r[kind]
        if is_object(m) then
          for name, v in pairs(m) do fn(m, name, v) end
        end
      end
    end
  end
end

-- The pod spec of a Pod, or of a workload's pod template.
local function pod_spec_of(res, obj)
  if not res.builtin or not is_object(obj.spec) then return nil end
  if res.gv == "v1" and res.name == "pods" then return obj.spec end
  if res.group == "apps" and is_object(obj.spec.template) then return obj.spec.template.spec end
  return nil
end

-- The defaults a real server fills into a pod spec (and into the pod
-- templates of workloads), so that what a controller reads back is what a
-- cluster would give it; quantities in their canonical form.
local function default_containers(list)
  for _, c in ipairs(is_array(list) and list or {}) do
    if is_object(c) then
      if c.terminationMessagePath == nil then c.terminationMessagePath = "/dev/termination-log" end
      if c.terminationMessagePolicy == nil then c.terminationMessagePolicy = "File" end
      if c.imagePullPolicy == nil then
        local image = type(c.image) == "string" and c.image or ""
        local tag = image:match(":([^:/]+)$")
        c.imagePullPolicy = (tag == nil or tag == "latest") and not image:find("@")
          and "Always" or "IfNotPresent"
      end
      if c.resources == nil then c.resources = {} end
      for _, port in ipairs(is_array(c.ports) and c.ports or {}) do
        if is_object(port) and port.protocol == nil then port.protocol = "TCP" end
      end
    end
  end
end

local function default_pod_spec(spec)
  if not is_object(spec) then return end
  each_quantity(spec, function(m, name, v) m[name] = quantity.canonical(v) or v end)
  default_containers(spec.containers)
  default_containers(spec.initContainers)
  if spec.restartPolicy == nil then spec.restartPolicy = "Always" end
  if spec.terminationGracePeriodSeconds == nil then spec.terminationGracePeriodSeconds = 30 end
  if spec.dnsPolicy == nil then spec.dnsPolicy = "ClusterFirst" end
  if spec.securityContext == nil then spec.securityContext = {} end
  if spec.schedulerName == nil then spec.schedulerName = "default-scheduler" end
  wdefaults.pod_spec(spec)
end

local function default_template(spec)
  if not is_object(spec) or not is_object(spec.template) then return end
  local t = spec.template
  if is_object(t.metadata) and t.metadata.creationTimestamp == nil then
    t.metadata.creationTimestamp = null
  end
  default_pod_spec(t.spec)
end

local workload_defaults = {
  deployments = function(spec)
    if spec.replicas == nil then spec.replicas = 1 end
    local st = is_object(spec.strategy) and spec.strategy or {}
    spec.strategy = st
    if st.type == nil or st.type == null or st.type == "" then st.type = "RollingUpdate" end
    if st.rollingUpdate == null then st.rollingUpdate = nil end
    if st.type == "RollingUpdate" then
      local ru = is_object(st.rollingUpdate) and st.rollingUpdate or {}
      st.rollingUpdate = ru
      if ru.maxUnavailable == nil or ru.maxUnavailable == null then ru.maxUnavailable = "25%" end
      if ru.maxSurge == nil or ru.maxSurge == null then ru.maxSurge = "25%" end
    end
    if spec.revisionHistoryLimit == nil then spec.revisionHistoryLimit = 10 end
    if spec.progressDeadlineSeconds == nil then spec.progressDeadlineSeconds = 600 end
  end,
  replicasets = function(spec)
    if spec.replicas == nil then spec.replicas = 1 end
  end,
  statefulsets = function(spec)
    if spec.replicas == nil then spec.replicas = 1 end
    if spec.podManagementPolicy == nil then spec.podManagementPolicy = "OrderedReady" end
    if spec.updateStrategy == nil then
      spec.updateStrategy = { type = "RollingUpdate", rollingUpdate = { partition = 0 } }
    end
    if spec.revisionHistoryLimit == nil then spec.revisionHistoryLimit = 10 end
  end,
  daemonsets = function(spec)
    if spec.updateStrategy == nil then
      spec.updateStrategy = { type = "RollingUpdate",
        rollingUpdate = { maxUnavailable = 1, maxSurge = 0 } }
    end
    if spec.revisionHistoryLimit == nil then spec.revisionHistoryLimit = 10 end
  end,
}

-- A Secret's stringData is write-only: merged into data (its keys win), as
-- the v1 conversion does; type defaults to Opaque.
local function secret_defaults(obj)
  if is_object(obj.stringData) then
    obj.data = is_object(obj.data) and obj.data or {}
    for k, v in pairs(obj.stringData) do
      obj.data[k] = util.b64encode(v == null and "" or tostring(v))
    end
  end
  obj.stringData = nil
  if obj.type == nil or obj.type == null or obj.type == "" then obj.type = "Opaque" end
end

-- The webhooks of a MutatingWebhookConfiguration or
-- ValidatingWebhookConfiguration, as admissionregistration/v1's defaults
-- fill them: failurePolicy Fail, matchPolicy Equivalent, both selectors
-- {} (everything), timeoutSeconds 10, a mutating one's
-- reinvocationPolicy Never, each rule's scope "*", a Service's port 443.
local function webhook_defaults(res, obj)
  for _, w in ipairs(is_array(obj.webhooks) and obj.webhooks or {}) do
    if is_object(w) then
      local function set(k, v) if w[k] == nil or w[k] == null then w[k] = v end end
      set("failurePolicy", "Fail")
      set("matchPolicy", "Equivalent")
      set("namespaceSelector", {})
      set("objectSelector", {})
      set("timeoutSeconds", 10)
      if res.name == "mutatingwebhookconfigurations" then set("reinvocationPolicy", "Never") end
      for _, rule in ipairs(is_array(w.rules) and w.rules or {}) do
        if is_object(rule) and (rule.scope == nil or rule.scope == null) then rule.scope = "*" end
      end
      local cc = w.clientConfig
      local svc = is_object(cc) and cc.service
      if is_object(svc) and (svc.port == nil or svc.port == null) then svc.port = 443 end
    end
  end
end

local webhook_configurations = { mutatingwebhookconfigurations = true,
  validatingwebhookconfigurations = true }

-- The defaults of every write (the apiserver defaults what it decodes).
local function spec_defaults(res, obj)
  wdefaults.write(res, obj, default_template)
  if res.builtin and workload_defaults[res.name] and res.group == "apps" then
    obj.spec = is_object(obj.spec) and obj.spec or {}
    workload_defaults[res.name](obj.spec)
    default_template(obj.spec)
  elseif res.builtin and res.name == "pods" then
    default_pod_spec(obj.spec)
  elseif is_secret(res) then
    secret_defaults(obj)
  elseif is_service(res) then
    services.defaults(obj)
  elseif res.builtin and res.group == "autoscaling" and res.name == "horizontalpodautoscalers" then
    hpa.defaults(res.version, obj)
  elseif res.builtin and res.group == "admissionregistration.k8s.io"
      and webhook_configurations[res.name] then
    webhook_defaults(res, obj)
  end
end

-- Maps a built-in kind declares omitempty: the server decodes an empty
-- one and writes nothing, so it neither stores nor owns it.
local omitted_maps = { labels = true, annotations = true, data = true, binaryData = true,
  stringData = true, matchLabels = true, nodeSelector = true }

-- Drops the empty maps of obj a real server drops: metadata's labels and
-- annotations for every kind, any of omitted_maps (and a Service's
-- selector) in a built-in kind.
local function drop_empty_maps(res, obj)
  local function empty(v) return is_object(v) and next(v) == nil end
  local md = obj.metadata
  if empty(md.labels) then md.labels = nil end
  if empty(md.annotations) then md.annotations = nil end
  if not res.builtin then return end
  local function walk(t)
    for k, v in pairs(t) do
      if type(v) == "table" and v ~= null then
        if omitted_maps[k] and empty(v) then t[k] = nil else walk(v) end
      end
    end
  end
  walk(obj)
  if is_service(res) and is_object(obj.spec) and empty(obj.spec.selector) then
    obj.spec.selector = nil
  end
end

-- Defaults a real server adds to some kinds on create.
local function defaults(res, obj)
  spec_defaults(res, obj)
  if res.builtin and workload_defaults[res.name] and res.group == "apps" then
    obj.status = {}
  elseif res.gv == "v1" and res.name == "namespaces" then
    local md = obj.metadata
    md.labels = md.labels ~= null and md.labels or {}
    md.labels["kubernetes.io/metadata.name"] = md.name
  elseif res.name == "customresourcedefinitions" then
    local spec = is_object(obj.spec) and obj.spec or {}
    if is_object(spec.names) and spec.names.kind and not spec.names.listKind then
      spec.names.listKind = spec.names.kind .. "List"
    end
    spec.conversion = spec.conversion or { strategy = "None" }
    local stored = json.array {}
    for _, v in ipairs(spec.versions or {}) do
      if v.storage then stored[#stored + 1] = v.name end
    end
    obj.status = { conditions = null, acceptedNames = { plural = "", kind = "" },
      storedVersions = stored }
  end
  wdefaults.create(res, obj)
end

_M.is_service = is_service
_M.is_secret = is_secret
_M.is_configmap = is_configmap
_M.each_quantity = each_quantity
_M.default_containers = default_containers
_M.pod_spec_of = pod_spec_of
_M.spec_defaults = spec_defaults
_M.drop_empty_maps = drop_empty_maps
_M.defaults = defaults
return _M
