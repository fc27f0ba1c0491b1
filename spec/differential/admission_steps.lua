-- Writes through admission webhooks on both servers: the same
-- MutatingWebhookConfiguration and ValidatingWebhookConfiguration sent to
-- each, calling the same kubelua webhooks (served by this process over
-- HTTPS: register() and the url and CA given to steps()), then creates,
-- updates and dry runs of ConfigMaps that a mutating webhook patches, a
-- validating one refuses, one whose server is down lets through under
-- failurePolicy Ignore and fails under Fail, ones that a
-- namespaceSelector or an objectSelector leaves out, and one that three
-- mutating webhooks change in turn (their order, a reinvocation).
local kube = require "kubelua"

local _M = {}

local REG = "/apis/admissionregistration.k8s.io/v1/"
local NS = "/api/v1/namespaces"
local ON = NS .. "/adm-on/configmaps"
local OFF = NS .. "/adm-off/configmaps"
-- a loopback port nothing listens on: a webhook server that is down
local DOWN = "https://127.0.0.1:1/adm-down"

local registered = false

-- register(): the webhooks the configurations call, once per process.
function _M.register()
  if registered then return end
  registered = true
  kube.webhook{ path = "/adm-deny", validate = function(req)
    return false, "kubelua says no to " .. req.name
  end }
  for _, letter in ipairs { "a", "b", "c" } do
    kube.webhook{ path = "/adm-append-" .. letter, mutate = function(req)
      local md = req.object.metadata
      md.annotations = md.annotations or {}
      md.annotations.order = (md.annotations.order or "") .. letter
    end }
  end
  kube.webhook{ path = "/adm-patch", mutate = function(req)
    local o = req.object
    o.metadata.labels.patched = "yes"
    o.data = o.data or {}
    o.data.added = "by-webhook"
  end }
end

local function hook(name, url, ca, case, extra)
  local w = { name = name .. ".adm.kubelua.io", admissionReviewVersions = { "v1" },
    sideEffects = "None", clientConfig = { url = url, caBundle = ca },
    namespaceSelector = { matchLabels = { hooks = "on" } },
    objectSelector = { matchLabels = { adm = case } },
    rules = { { operations = { "CREATE", "UPDATE" }, apiGroups = { "" },
      apiVersions = { "v1" }, resources = { "configmaps" } } } }
  for k, v in pairs(extra or {}) do w[k] = v end
  return w
end

local function configmap(name, case, data)
  return { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = name, labels = case and { adm = case } or nil }, data = data }
end

local function create(label, path, body, wait)
  return { label = label, method = "POST", path = path, body = body, wait = wait }
end

-- steps(url, ca) -> the sequence; url: the webhook server's
-- https://127.0.0.1:PORT, ca: its CA, base64 (caBundle).
function _M.steps(url, ca)
  return {
    create("create namespace adm-on", NS, { apiVersion = "v1", kind = "Namespace",
      metadata = { name = "adm-on", labels = { hooks = "on" } } }),
    create("create namespace adm-off", NS, { apiVersion = "v1", kind = "Namespace",
      metadata = { name = "adm-off" } }),
    -- called in the order of the configurations' names, then of their
    -- webhooks: b, c, a; b once more (IfNeeded) as c and a changed the object
    create("create mutating configuration adm-order-2", REG .. "mutatingwebhookconfigurations", {
      apiVersion = "admissionregistration.k8s.io/v1", kind = "MutatingWebhookConfiguration",
      metadata = { name = "adm-order-2" }, webhooks = {
        hook("c", url .. "/adm-append-c", ca, "order"),
        hook("a", url .. "/adm-append-a", ca, "order") } }),
    create("create mutating configuration adm-order-1", REG .. "mutatingwebhookconfigurations", {
      apiVersion = "admissionregistration.k8s.io/v1", kind = "MutatingWebhookConfiguration",
      metadata = { name = "adm-order-1" }, webhooks = {
        hook("b", url .. "/adm-append-b", ca, "order", { reinvocationPolicy = "IfNeeded" }) } }),
    create("create mutating configuration", REG .. "mutatingwebhookconfigurations", {
      apiVersion = "admissionregistration.k8s.io/v1", kind = "MutatingWebhookConfiguration",
      metadata = { name = "adm" }, webhooks = { hook("patch", url .. "/adm-patch", ca, "patch") } }),
    create("create validating configuration", REG .. "validatingwebhookconfigurations", {
      apiVersion = "admissionregistration.k8s.io/v1", kind = "ValidatingWebhookConfiguration",
      metadata = { name = "adm" }, webhooks = {
        hook("down-ignore", DOWN, ca, "down", { failurePolicy = "Ignore" }),
        hook("down-fail", DOWN, ca, "down-fail", { failurePolicy = "Fail" }),
        hook("deny", url .. "/adm-deny", ca, "deny") } }),
    -- the real server's admission plugins see the configurations a moment
    -- later (one informer per kind, its events in order): a write that the
    -- last configuration of a kind answers tells that all are seen
    create("dry-run create deny (waits for the validating webhooks)", ON .. "?dryRun=All",
      configmap("adm-wait", "deny"), function(res) return res.status == 403 end),
    create("dry-run create patch (waits for the mutating webhooks)", ON .. "?dryRun=All",
      configmap("adm-wait", "patch"), function(res)
        local md = type(res.body) == "table" and res.body.metadata
        return type(md) == "table" and type(md.labels) == "table" and md.labels.patched == "yes"
      end),
    create("create order", ON, configmap("adm-order", "order")),
    create("create deny", ON, configmap("adm-deny", "deny", { x = "1" })),
    { label = "get deny", method = "GET", path = ON .. "/adm-deny" },
    create("create patch", ON, configmap("adm-patch", "patch", { x = "1" })),
    { label = "update patch", method = "PUT", path = ON .. "/adm-patch",
      body = configmap("adm-patch", "patch", { x = "2" }) },
    create("create down, failurePolicy Ignore", ON, configmap("adm-down", "down")),
    create("create down, failurePolicy Fail", ON, configmap("adm-down-fail", "down-fail")),
    create("create deny where the namespaceSelector misses", OFF,
      configmap("adm-deny", "deny")),
    create("create where the objectSelector misses", ON, configmap("adm-plain", nil, { x = "1" })),
    create("dry-run create deny", ON .. "?dryRun=All", configmap("adm-dry", "deny")),
    create("dry-run create patch", ON .. "?dryRun=All", configmap("adm-dry", "patch")),
    { label = "get dry-run patch", method = "GET", path = ON .. "/adm-dry" },
    { label = "list adm-on", method = "GET", path = ON },
    { label = "delete validating configuration", method = "DELETE",
      path = REG .. "validatingwebhookconfigurations/adm" },
    { label = "delete mutating configuration", method = "DELETE",
      path = REG .. "mutatingwebhookconfigurations/adm" },
    { label = "delete mutating configuration adm-order-1", method = "DELETE",
      path = REG .. "mutatingwebhookconfigurations/adm-order-1" },
    { label = "delete mutating configuration adm-order-2", method = "DELETE",
      path = REG .. "mutatingwebhookconfigurations/adm-order-2" },
  }
end

return _M
