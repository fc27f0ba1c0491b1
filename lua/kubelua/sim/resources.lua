-- kubelua.sim.resources: the built-in resources the simulator serves: every
-- resource of kube-apiserver v1.26's discovery (kubelua.sim.surface.discovery,
-- the 23 group versions as the server lists them, subresources, shortNames
-- and categories included), and what the server needs to know about each
-- beyond discovery: whether its registry keeps metadata.generation, and
-- which field selectors it accepts. The discovery documents are written
-- back in the server's field order, so a client sees the same bytes.

local json = require "kubelua.json"
local surface = require "kubelua.sim.surface.discovery"

local type, pairs, ipairs, concat, format = type, pairs, ipairs, table.concat, string.format
local encode = json.encode

local _M = {}

local common_fields = { ["metadata.name"] = true, ["metadata.namespace"] = true }

local function fields(extra)
  local t = { ["metadata.name"] = true, ["metadata.namespace"] = true }
  for _, f in ipairs(extra or {}) do t[f] = true end
  return t
end

local event_fields = fields { "involvedObject.kind", "involvedObject.namespace",
  "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
  "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
  "reportingComponent", "source", "type" }

-- Per resource: generation, field selectors beyond metadata.name and
-- metadata.namespace (each registry's GetAttrs/field label conversion),
-- whether an update of a missing object creates it (as the registry's
-- AllowCreateOnUpdate says).
--
-- generation: the registries whose strategy sets metadata.generation to 1
-- on create and bumps it when the spec (webhooks for the webhook
-- configurations) changes: the workload controllers (Deployment,
-- ReplicaSet, StatefulSet, DaemonSet, ReplicationController, Job,
-- CronJob), PodDisruptionBudget, Ingress, IngressClass, NetworkPolicy,
-- FlowSchema and PriorityLevelConfiguration (both versions), the two
-- webhook configurations, and CustomResourceDefinition. The others
-- (Pods, Services, HorizontalPodAutoscalers among them) leave it unset.
local extra = {
  ["v1/pods"] = { fields = fields { "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
    "spec.serviceAccountName", "status.phase", "status.podIP", "status.nominatedNodeName" } },
  ["v1/events"] = { fields = event_fields, create_on_update = true },
  ["events.k8s.io/v1/events"] = { fields = event_fields, create_on_update = true },
  ["coordination.k8s.io/v1/leases"] = { create_on_update = true },
  ["v1/secrets"] = { fields = fields { "type" } },
  ["v1/services"] = { create_on_update = true },
  ["v1/namespaces"] = { fields = fields { "status.phase" } },
  ["v1/nodes"] = { fields = fields { "spec.unschedulable" } },
  ["v1/replicationcontrollers"] = { generation = true, fields = fields { "status.replicas" } },
  ["apps/v1/deployments"] = { generation = true },
  ["apps/v1/replicasets"] = { generation = true, fields = fields { "status.replicas" } },
  ["apps/v1/statefulsets"] = { generation = true },
  ["apps/v1/daemonsets"] = { generation = true },
  ["batch/v1/jobs"] = { generation = true, fields = fields { "status.successful" } },
  ["batch/v1/cronjobs"] = { generation = true },
  ["policy/v1/poddisruptionbudgets"] = { generation = true },
  ["networking.k8s.io/v1/ingresses"] = { generation = true },
  ["networking.k8s.io/v1/ingressclasses"] = { generation = true },
  ["networking.k8s.io/v1/networkpolicies"] = { generation = true },
  ["flowcontrol.apiserver.k8s.io/v1beta2/flowschemas"] = { generation = true },
  ["flowcontrol.apiserver.k8s.io/v1beta2/prioritylevelconfigurations"] = { generation = true },
  ["flowcontrol.apiserver.k8s.io/v1beta3/flowschemas"] = { generation = true },
  ["flowcontrol.apiserver.k8s.io/v1beta3/prioritylevelconfigurations"] = { generation = true },
  ["admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"] = { generation = true },
  ["admissionregistration.k8s.io/v1/validatingwebhookconfigurations"] = { generation = true },
  ["certificates.k8s.io/v1/certificatesigningrequests"] = {
    fields = fields { "spec.signerName" } },
  ["apiextensions.k8s.io/v1/customresourcedefinitions"] = { generation = true },
}

-- The order of /apis: the real server's order of the built-in groups.
_M.group_order = {}
for _, g in ipairs(json.decode(surface.apis).groups) do
  _M.group_order[#_M.group_order + 1] = g.name
end

-- Returns a list of resource descriptions:
-- { group, version, gv, name, kind, list_kind, namespaced, status, scale,
--   generation, builtin = true, fields, create_on_update, disco = { entries } }
-- in discovery order (group versions as /apis lists them, each group's
-- preferred version first).
function _M.builtins()
  local out = {}
  for _, d in ipairs(surface.gvs) do
    local gv = d[1]
    local entries = assert(json.decode(d[2])).resources
    local group, version = gv:match("^(.-)/(.*)$")
    if not group then group, version = "", gv end
    local byname = {}
    for _, e in ipairs(entries) do
      local base, sub = e.name:match("^([^/]+)/(.*)$")
      if not base then
        local x = extra[gv .. "/" .. e.name] or {}
        local r = {
          group = group, version = version, gv = gv, name = e.name, kind = e.kind,
          list_kind = e.kind .. "List", namespaced = e.namespaced,
          generation = x.generation or false, builtin = true,
          fields = x.fields or common_fields, disco = { e },
          create_on_update = x.create_on_update or false,
          internal = group == "" and "core" or group:match("^[^.]+"),
        }
        byname[e.name] = r
        out[#out + 1] = r
      else
        local r = byname[base]
        r.disco[#r.disco + 1] = e
        if sub == "status" then r.status = true end
        if sub == "scale" then r.scale = true end
      end
    end
  end
  return out
end

-- Kinds the real server stores once and serves in two versions: an object
-- written through either is read through both, in each one's apiVersion
-- (PriorityLevelConfiguration's limited shares are assuredConcurrencyShares
-- in v1beta2, nominalConcurrencyShares in v1beta3). HorizontalPodAutoscaler
-- v1 and v2 convert through annotations (kubelua.sim.hpa; the store links
-- them, as it links the two APIs of Events).
local FC = "flowcontrol.apiserver.k8s.io/"
local shared = {
  { "storage.k8s.io/v1", "storage.k8s.io/v1beta1", "csistoragecapacities" },
  { FC .. "v1beta3", FC .. "v1beta2", "flowschemas" },
  { FC .. "v1beta3", FC .. "v1beta2", "prioritylevelconfigurations",
    shares = { v1beta3 = "nominalConcurrencyShares", v1beta2 = "assuredConcurrencyShares" } },
}

-- The converter of an object into r's version (a new table sharing the
-- unchanged parts); shares: the renamed field, by version.
local function as_version(r, shares)
  return function(obj)
    local o = {}
    for k, v in pairs(obj) do o[k] = v end
    o.apiVersion = r.gv
    local limited = shares and type(o.spec) == "table" and o.spec.limited
    if type(limited) == "table" then
      local want = shares[r.version]
      local l = {}
      for k, v in pairs(limited) do
        l[(k == shares.v1beta2 or k == shares.v1beta3) and want or k] = v
      end
      local spec = {}
      for k, v in pairs(o.spec) do spec[k] = v end
      spec.limited = l
      o.spec = spec
    end
    return o
  end
end

-- Makes the kinds above mirror each other in store (its resource(gv,
-- name)).
function _M.link_versions(store)
  for _, sh in ipairs(shared) do
    local a, b = store:resource(sh[1], sh[3]), store:resource(sh[2], sh[3])
    a.mirrors = { { res = b, convert = as_version(b, sh.shares) } }
    b.mirrors = { { res = a, convert = as_version(a, sh.shares) } }
  end
end

-- Discovery documents in the real server's field order (Go's struct
-- order: encoding/json writes fields as declared, omitting empty ones).

local function field(parts, key, v)
  parts[#parts + 1] = format("%s:%s", encode(key), encode(v))
end

local function str_list(list)
  local t = {}
  for i, s in ipairs(list) do t[i] = encode(s) end
  return "[" .. concat(t, ",") .. "]"
end

-- An APIResource entry (metav1.APIResource).
local function entry_text(e)
  local p = {}
  field(p, "name", e.name)
  field(p, "singularName", e.singularName or "")
  field(p, "namespaced", e.namespaced and true or false)
  if e.group and e.group ~= "" then field(p, "group", e.group) end
  if e.version and e.version ~= "" then field(p, "version", e.version) end
  field(p, "kind", e.kind)
  p[#p + 1] = '"verbs":' .. str_list(e.verbs or {})
  if e.shortNames and #e.shortNames > 0 then
    p[#p + 1] = '"shortNames":' .. str_list(e.shortNames)
  end
  if e.categories and #e.categories > 0 then
    p[#p + 1] = '"categories":' .. str_list(e.categories)
  end
  if e.storageVersionHash and e.storageVersionHash ~= "" then
    field(p, "storageVersionHash", e.storageVersionHash)
  end
  return "{" .. concat(p, ",") .. "}"
end

-- GET /api/v1, /apis/GROUP/VERSION: the APIResourceList of gv from its
-- entries (sorted by name, as the server sorts them).
function _M.resource_list_text(gv, entries)
  local t = {}
  for i, e in ipairs(entries) do t[i] = entry_text(e) end
  return format('{"kind":"APIResourceList",%s"groupVersion":%s,"resources":[%s]}',
    gv == "v1" and "" or '"apiVersion":"v1",', encode(gv), concat(t, ","))
end

local function gv_text(group, version)
  return format('{"groupVersion":%s,"version":%s}', encode(group .. "/" .. version),
    encode(version))
end

-- An APIGroup (metav1.APIGroup) of its versions, the preferred first; head
-- is what precedes its name ('"kind":"APIGroup","apiVersion":"v1",' when
-- it is a document of its own).
function _M.group_text(name, versions, head)
  local t = {}
  for i, v in ipairs(versions) do t[i] = gv_text(name, v) end
  return format('{%s"name":%s,"versions":[%s],"preferredVersion":%s}', head or "",
    encode(name), concat(t, ","), t[1])
end

-- GET /apis: the APIGroupList of the given APIGroup texts.
function _M.group_list_text(groups)
  return '{"kind":"APIGroupList","apiVersion":"v1","groups":[' .. concat(groups, ",") .. "]}"
end

_M.common_fields = common_fields

return _M
