-- kubelua.sim.resources: the built-in resources the simulator serves, with
-- their discovery entries exactly as kube-apiserver v1.26 lists them
-- (spec/fixtures/apiserver/0[3-8]-*.json), and what the server needs to
-- know about each: kind, scope, status subresource, whether
-- metadata.generation is kept, which field selectors it accepts.

-- luacheck: no max line length

local json = require "kubelua.json"

local _M = {}

-- Discovery entries per group version (resource and subresources), as the
-- real server sends them.
local discovery = {
  ["v1"] = [==[[{"name":"configmaps","singularName":"","namespaced":true,"kind":"ConfigMap","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["cm"],"storageVersionHash":"qFsyl6wFWjQ="},{"name":"events","singularName":"","namespaced":true,"kind":"Event","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["ev"],"storageVersionHash":"r2yiGXH7wu8="},{"name":"namespaces","singularName":"","namespaced":false,"kind":"Namespace","verbs":["create","delete","get","list","patch","update","watch"],"shortNames":["ns"],"storageVersionHash":"Q3oi5N2YM8M="},{"name":"namespaces/status","singularName":"","namespaced":false,"kind":"Namespace","verbs":["get","patch","update"]},{"name":"pods","singularName":"","namespaced":true,"kind":"Pod","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["po"],"categories":["all"],"storageVersionHash":"xPOwRZ+Yhw8="},{"name":"pods/status","singularName":"","namespaced":true,"kind":"Pod","verbs":["get","patch","update"]},{"name":"secrets","singularName":"","namespaced":true,"kind":"Secret","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"storageVersionHash":"S6u1pOWzb84="},{"name":"serviceaccounts","singularName":"","namespaced":true,"kind":"ServiceAccount","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["sa"],"storageVersionHash":"pbx9ZvyFpBE="},{"name":"services","singularName":"","namespaced":true,"kind":"Service","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["svc"],"categories":["all"],"storageVersionHash":"0/CO1lhkEBI="},{"name":"services/status","singularName":"","namespaced":true,"kind":"Service","verbs":["get","patch","update"]}]]==],
  ["apps/v1"] = [==[[{"name":"daemonsets","singularName":"","namespaced":true,"kind":"DaemonSet","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["ds"],"categories":["all"],"storageVersionHash":"dd7pWHUlMKQ="},{"name":"daemonsets/status","singularName":"","namespaced":true,"kind":"DaemonSet","verbs":["get","patch","update"]},{"name":"deployments","singularName":"","namespaced":true,"kind":"Deployment","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["deploy"],"categories":["all"],"storageVersionHash":"8aSe+NMegvE="},{"name":"deployments/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1","kind":"Scale","verbs":["get","patch","update"]},{"name":"deployments/status","singularName":"","namespaced":true,"kind":"Deployment","verbs":["get","patch","update"]},{"name":"replicasets","singularName":"","namespaced":true,"kind":"ReplicaSet","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["rs"],"categories":["all"],"storageVersionHash":"P1RzHs8/mWQ="},{"name":"replicasets/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1","kind":"Scale","verbs":["get","patch","update"]},{"name":"replicasets/status","singularName":"","namespaced":true,"kind":"ReplicaSet","verbs":["get","patch","update"]},{"name":"statefulsets","singularName":"","namespaced":true,"kind":"StatefulSet","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["sts"],"categories":["all"],"storageVersionHash":"H+vl74LkKdo="},{"name":"statefulsets/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1","kind":"Scale","verbs":["get","patch","update"]},{"name":"statefulsets/status","singularName":"","namespaced":true,"kind":"StatefulSet","verbs":["get","patch","update"]}]]==],
  ["coordination.k8s.io/v1"] = [==[[{"name":"leases","singularName":"","namespaced":true,"kind":"Lease","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"storageVersionHash":"gqkMMb/YqFM="}]]==],
  ["events.k8s.io/v1"] = [==[[{"name":"events","singularName":"","namespaced":true,"kind":"Event","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["ev"],"storageVersionHash":"r2yiGXH7wu8="}]]==],
  ["authorization.k8s.io/v1"] = [==[[{"name":"localsubjectaccessreviews","singularName":"","namespaced":true,"kind":"LocalSubjectAccessReview","verbs":["create"]},{"name":"selfsubjectaccessreviews","singularName":"","namespaced":false,"kind":"SelfSubjectAccessReview","verbs":["create"]},{"name":"selfsubjectrulesreviews","singularName":"","namespaced":false,"kind":"SelfSubjectRulesReview","verbs":["create"]},{"name":"subjectaccessreviews","singularName":"","namespaced":false,"kind":"SubjectAccessReview","verbs":["create"]}]]==],
  ["apiextensions.k8s.io/v1"] = [==[[{"name":"customresourcedefinitions","singularName":"","namespaced":false,"kind":"CustomResourceDefinition","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["crd","crds"],"categories":["api-extensions"],"storageVersionHash":"jfWCUB31mvA="},{"name":"customresourcedefinitions/status","singularName":"","namespaced":false,"kind":"CustomResourceDefinition","verbs":["get","patch","update"]}]]==],
}

-- The order of /apis (the real server's order, for the groups served here).
_M.group_order = { "apps", "events.k8s.io", "authorization.k8s.io", "apiextensions.k8s.io",
  "coordination.k8s.io" }
_M.core_order = { "v1" }

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

-- Per resource: internal group name (for conversion messages), generation,
-- field selectors, whether an update of a missing object creates it (as
-- the registry's AllowCreateOnUpdate says).
local extra = {
  ["v1/pods"] = { fields = fields { "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
    "spec.serviceAccountName", "status.phase", "status.podIP", "status.nominatedNodeName" } },
  ["v1/events"] = { fields = event_fields, create_on_update = true },
  ["events.k8s.io/v1/events"] = { fields = event_fields, create_on_update = true },
  ["coordination.k8s.io/v1/leases"] = { create_on_update = true },
  ["v1/secrets"] = { fields = fields { "type" } },
  ["v1/services"] = { create_on_update = true },
  ["v1/namespaces"] = { fields = fields { "status.phase" } },
  ["apps/v1/deployments"] = { generation = true },
  ["apps/v1/replicasets"] = { generation = true, fields = fields { "status.replicas" } },
  ["apps/v1/statefulsets"] = { generation = true },
  ["apps/v1/daemonsets"] = { generation = true },
  ["apiextensions.k8s.io/v1/customresourcedefinitions"] = { generation = true },
}

-- Returns a list of resource descriptions:
-- { group, version, gv, name, kind, list_kind, namespaced, status,
--   generation, builtin = true, fields, create_on_update, disco = { entries } }
function _M.builtins()
  local out = {}
  for _, gv in ipairs { "v1", "apps/v1", "events.k8s.io/v1", "authorization.k8s.io/v1",
      "apiextensions.k8s.io/v1", "coordination.k8s.io/v1" } do
    local entries = assert(json.decode(discovery[gv]))
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

_M.common_fields = common_fields

return _M
