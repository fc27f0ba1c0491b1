-- Sequences of strategic merge patches and server-side applies whose
-- outcome the kind's schema decides (patch strategies and merge keys,
-- list and map types), for both servers: which lists merge and by which
-- keys, sets, $setElementOrder, $deleteFromPrimitiveList, $retainKeys,
-- the errors of malformed patches, keyed list items kept for the other
-- managers that own them, and conflicts on keyed paths; for a built-in
-- Deployment and Service and for a custom resource whose CRD sets
-- x-kubernetes-list-type and -map-type.
local json = require "kubelua.json"
local fixtures = require "spec.differential.fixtures"

local _M = {}

local DEPS = "/apis/apps/v1/namespaces/default/deployments"
local SVCS = "/api/v1/namespaces/default/services"
local CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
local GIZMOS = "/apis/ex.io/v1/namespaces/default/gizmos"

local SMP = { ["Content-Type"] = "application/strategic-merge-patch+json" }
local APPLY = { ["Content-Type"] = "application/apply-patch+yaml" }

-- The Deployment the strategic merge patches start from.
local function deployment(name)
  return { apiVersion = "apps/v1", kind = "Deployment",
    metadata = { name = name, finalizers = { "x.io/a", "x.io/b" } },
    spec = { selector = { matchLabels = { app = name } }, template = {
      metadata = { labels = { app = name } }, spec = {
        containers = {
          { name = "a", image = "a:1", command = { "sh", "-c" }, args = { "one", "two" },
            ports = { { containerPort = 80, name = "http" }, { containerPort = 81 } },
            volumeMounts = { { name = "v", mountPath = "/x" }, { name = "v", mountPath = "/y" } } },
          { name = "b", image = "b:1" } },
        tolerations = { { key = "k1", operator = "Exists" }, { key = "k2", operator = "Exists" } },
        dnsConfig = { options = { { name = "ndots", value = "2" }, { name = "edns0" } } },
        volumes = { { name = "v", emptyDir = {} } } } } } }
end

_M.deployment = deployment

local function template(spec) return { spec = { template = { spec = spec } } } end

local function patch(label, body)
  return { label = "patch " .. label, method = "PATCH", path = DEPS .. "/smp", headers = SMP,
    body = body }
end

local function apply(label, path, manager, body, force)
  return { label = "apply " .. label, method = "PATCH", path = path .. "?fieldManager="
    .. manager .. (force and "&force=true" or ""), headers = APPLY, body = body }
end

-- Strategic merge patches of a Deployment.
function _M.strategic()
  return {
    { label = "create", method = "POST", path = DEPS, body = deployment("smp") },
    patch("command and args", template { containers = { { name = "a", command = { "bash" },
      args = { "three" } } } }),
    patch("volume mounts", template { containers = { { name = "a",
      volumeMounts = { { name = "v", mountPath = "/z" } } } } }),
    patch("tolerations", template { tolerations = { { key = "k3", operator = "Exists" } } }),
    patch("dns options", template { dnsConfig = { options = { { name = "timeout",
      value = "1" } } } }),
    patch("finalizers", { metadata = { finalizers = { "x.io/c" } } }),
    patch("finalizers deleted", { metadata = {
      ["$deleteFromPrimitiveList/finalizers"] = { "x.io/a" } } }),
    patch("finalizers again", { metadata = { finalizers = { "x.io/b", "x.io/d" } } }),
    patch("order", template { ["$setElementOrder/containers"] = { { name = "b" },
      { name = "a" } } }),
    patch("order and item", template { ["$setElementOrder/containers"] = { { name = "c" },
      { name = "a" }, { name = "b" } }, containers = { { name = "c", image = "c:1" } } }),
    patch("port", template { containers = { { name = "a",
      ports = { { containerPort = 82 } } } } }),
    patch("port order", template { containers = { { name = "a",
      ["$setElementOrder/ports"] = { { containerPort = 81 }, { containerPort = 80 } } } } }),
    patch("retained volume", template { volumes = { { name = "w",
      ["$retainKeys"] = { "name", "persistentVolumeClaim" },
      persistentVolumeClaim = { claimName = "c" } } } }),
    patch("retained keys", template { volumes = { { name = "v",
      ["$retainKeys"] = { "name", "persistentVolumeClaim" },
      persistentVolumeClaim = { claimName = "c" } } } }),
    patch("no merge key", template { containers = { { image = "noname" } } }),
    patch("order mismatch", template { ["$setElementOrder/containers"] = { { name = "a" } },
      containers = { { name = "b", image = "b:2" } } }),
    patch("delete item", template { containers = { { name = "b", ["$patch"] = "delete" } } }),
    patch("delete without key", template { containers = { { ["$patch"] = "delete" } } }),
    patch("all finalizers deleted", { metadata = { ["$deleteFromPrimitiveList/finalizers"] =
      { "x.io/b", "x.io/c", "x.io/d" } } }),
    { label = "delete", method = "DELETE", path = DEPS .. "/smp" },
  }
end

local function service(ports)
  return { apiVersion = "v1", kind = "Service", metadata = { name = "ssa" },
    spec = { ports = ports } }
end

local function applied_deployment(containers, finalizers)
  return { apiVersion = "apps/v1", kind = "Deployment",
    metadata = { name = "ssa", finalizers = finalizers },
    spec = { selector = { matchLabels = { app = "ssa" } }, template = {
      metadata = { labels = { app = "ssa" } }, spec = { containers = containers } } } }
end

-- A CRD whose schema has a keyed list, a set, an atomic list, an atomic
-- struct and an atomic map.
local CRD = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
  metadata = { name = "gizmos.ex.io" }, spec = { group = "ex.io", scope = "Namespaced",
    names = { plural = "gizmos", singular = "gizmo", kind = "Gizmo", listKind = "GizmoList" },
    versions = { { name = "v1", served = true, storage = true, schema = { openAPIV3Schema = {
      type = "object", properties = { spec = { type = "object", properties = {
        items = { type = "array", ["x-kubernetes-list-type"] = "map",
          ["x-kubernetes-list-map-keys"] = { "name", "zone" },
          items = { type = "object", required = { "name", "zone" }, properties = {
            name = { type = "string" }, zone = { type = "string" },
            size = { type = "integer" } } } },
        tags = { type = "array", ["x-kubernetes-list-type"] = "set",
          items = { type = "string" } },
        plain = { type = "array", items = { type = "string" } },
        sel = { type = "object", ["x-kubernetes-map-type"] = "atomic",
          properties = { a = { type = "string" }, b = { type = "string" } } },
        labels = { type = "object", ["x-kubernetes-map-type"] = "atomic",
          additionalProperties = { type = "string" } } } } } } } } } } }

_M.CRD = CRD

local function gizmo(spec, finalizers)
  return { apiVersion = "ex.io/v1", kind = "Gizmo",
    metadata = { name = "g", finalizers = finalizers }, spec = spec }
end

-- Server-side applies by several managers.
function _M.apply()
  local s, d, g = SVCS .. "/ssa", DEPS .. "/ssa", GIZMOS .. "/g"
  return {
    apply("service a", s, "a", service { { name = "http", port = 80 },
      { name = "https", port = 443 } }),
    apply("service b", s, "b", service { { name = "metrics", port = 9090 } }),
    apply("service a again", s, "a", service { { name = "grpc", port = 81 },
      { name = "http", port = 80 } }),
    apply("service conflict", s, "b", service { { name = "web", port = 80 } }),
    apply("service forced", s, "b", service { { name = "web", port = 80 },
      { name = "x", port = 81, protocol = "UDP" } }, true),
    apply("service duplicate name", s, "c", service { { name = "web", port = 84 } }),
    apply("deployment a", d, "a", applied_deployment({ { name = "x", image = "x:1",
      ports = { { containerPort = 80 } } } }, { "f.io/a" })),
    apply("deployment b", d, "b", applied_deployment({ { name = "y", image = "y:1" } },
      { "f.io/b" })),
    apply("deployment a again", d, "a", applied_deployment({ { name = "z", image = "z:1" },
      { name = "x", image = "x:2", ports = { { containerPort = 80 },
        { containerPort = 80, protocol = "UDP" } } } }, { "f.io/c", "f.io/a" })),
    { label = "create gizmos", method = "POST", path = CRDS, body = CRD },
    { label = "get gizmos", method = "GET", path = CRDS .. "/gizmos.ex.io",
      wait = fixtures.established },
    apply("gizmo a", g, "a", gizmo({ items = { { name = "x", zone = "1", size = 1 },
      { name = "x", zone = "2" } }, tags = { "t1", "t2" }, plain = { "p1" }, sel = { a = "1" },
      labels = { k = "v" } }, { "f.io/a" })),
    apply("gizmo atomic list", g, "b", gizmo { items = { { name = "y", zone = "1" } },
      tags = { "t3" }, plain = { "p2" } }),
    apply("gizmo atomic struct", g, "b", gizmo { sel = { b = "2" } }),
    apply("gizmo keyed item", g, "b", gizmo { items = { { name = "x", zone = "1", size = 5 } } }),
    apply("gizmo forced", g, "b", gizmo({ items = { { name = "x", zone = "1", size = 5 } },
      labels = { j = "w" } }), true),
    apply("gizmo a again", g, "a", gizmo { items = { { name = "x", zone = "2" } },
      tags = { "t2" } }),
    { label = "delete service", method = "DELETE", path = s },
    { label = "deployment finalizers", method = "PATCH", path = d,
      headers = { ["Content-Type"] = "application/merge-patch+json" },
      body = { metadata = { finalizers = json.null } } },
    { label = "delete deployment", method = "DELETE", path = d },
  }
end

return _M
