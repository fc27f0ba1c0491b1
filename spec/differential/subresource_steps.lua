-- Sequences of the subresources beyond status and scale, for both servers
-- (kube-apiserver alone, no controller manager: no scheduler, kubelet or
-- disruption controller on either side, so a test writes the statuses
-- they would): pods/binding, pods/eviction against a
-- PodDisruptionBudget, serviceaccounts/token, namespaces/finalize.
local json = require "kubelua.json"

local _M = {}

local PODS = "/api/v1/namespaces/default/pods"
local PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
local MERGE = { ["Content-Type"] = "application/merge-patch+json" }

local function pod(name, labels)
  return { apiVersion = "v1", kind = "Pod", metadata = { name = name, labels = labels },
    spec = { containers = { { name = "c", image = "nginx" } } } }
end

local function evict(label, name, version)
  return { label = label, method = "POST", path = PODS .. "/" .. name .. "/eviction",
    body = { apiVersion = version or "policy/v1", kind = "Eviction",
      metadata = { name = name } } }
end

local function binding(name, target, as)
  return { apiVersion = "v1", kind = "Binding", metadata = { name = as or name },
    target = { name = target } }
end

-- Binding, eviction and the budget's answers.
function _M.pods()
  local ready = { status = { phase = "Running", conditions = { { type = "Ready",
    status = "True" } } } }
  local function budget(allowed, healthy)
    return { label = "budget status " .. allowed, method = "PATCH", path = PDBS .. "/sub/status",
      headers = MERGE, body = { status = { observedGeneration = 1, disruptionsAllowed = allowed,
        currentHealthy = healthy, desiredHealthy = 1, expectedPods = healthy } } }
  end
  return {
    { label = "create bound", method = "POST", path = PODS, body = pod("sub-bound") },
    { label = "bind", method = "POST", path = PODS .. "/sub-bound/binding",
      body = binding("sub-bound", "node-x") },
    { label = "bind again", method = "POST", path = PODS .. "/sub-bound/binding",
      body = binding("sub-bound", "node-y") },
    { label = "bind another name", method = "POST", path = PODS .. "/sub-bound/binding",
      body = binding("sub-bound", "node-y", "other") },
    { label = "bind a missing pod", method = "POST", path = PODS .. "/sub-none/binding",
      body = binding("sub-none", "node-y") },
    { label = "get bound", method = "GET", path = PODS .. "/sub-bound" },
    { label = "create pending", method = "POST", path = PODS, body = pod("sub-pending") },
    evict("evict pending", "sub-pending", "policy/v1beta1"),
    { label = "get evicted pending", method = "GET", path = PODS .. "/sub-pending" },
    { label = "create web", method = "POST", path = PODS, body = pod("sub-web", { app = "sub" }) },
    { label = "web running", method = "PATCH", path = PODS .. "/sub-web/status",
      headers = MERGE, body = ready },
    { label = "create budget", method = "POST", path = PDBS, body = {
      apiVersion = "policy/v1", kind = "PodDisruptionBudget", metadata = { name = "sub" },
      spec = { minAvailable = 1, selector = { matchLabels = { app = "sub" } } } } },
    evict("evict unprocessed", "sub-web"),
    budget(0, 1),
    evict("evict over budget", "sub-web"),
    budget(1, 2),
    evict("evict within budget", "sub-web"),
    { label = "get budget", method = "GET", path = PDBS .. "/sub" },
    { label = "get evicted web", method = "GET", path = PODS .. "/sub-web" },
  }
end

-- Tokens of a ServiceAccount, and a namespace held by finalize.
function _M.others()
  local SA = "/api/v1/namespaces/default/serviceaccounts"
  local function token(label, spec, name)
    return { label = label, method = "POST", path = SA .. "/sub-sa/token", body = {
      apiVersion = "authentication.k8s.io/v1", kind = "TokenRequest",
      metadata = name and { name = name } or nil, spec = spec } }
  end
  local NS = "/api/v1/namespaces"
  local function finalize(label, finalizers)
    return { label = label, method = "PUT", path = NS .. "/sub-fin/finalize", body = {
      apiVersion = "v1", kind = "Namespace", metadata = { name = "sub-fin" },
      spec = { finalizers = finalizers } } }
  end
  return {
    { label = "create sa", method = "POST", path = SA, body = { apiVersion = "v1",
      kind = "ServiceAccount", metadata = { name = "sub-sa" } } },
    token("token", {}),
    token("token audiences", { audiences = { "a", "b" }, expirationSeconds = 7200 }),
    token("token too short", { expirationSeconds = 100 }),
    token("token other name", {}, "other"),
    { label = "token missing sa", method = "POST", path = SA .. "/sub-none/token", body = {
      apiVersion = "authentication.k8s.io/v1", kind = "TokenRequest", spec = {} } },
    { label = "create namespace", method = "POST", path = NS, body = { apiVersion = "v1",
      kind = "Namespace", metadata = { name = "sub-fin" } } },
    finalize("finalize", { "example.com/x" }),
    finalize("finalize bad name", { "bad name!" }),
    { label = "get finalize", method = "GET", path = NS .. "/sub-fin/finalize" },
    { label = "delete namespace", method = "DELETE", path = NS .. "/sub-fin" },
    { label = "get terminating", method = "GET", path = NS .. "/sub-fin" },
    finalize("finalize none", json.array {}),
    { label = "get finalized", method = "GET", path = NS .. "/sub-fin",
      wait = function(res) return res.status == 404 end },
  }
end

return _M
