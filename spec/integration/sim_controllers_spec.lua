-- The simulator without its controllers (opts.controllers = false): the API
-- server alone, as envtest runs kube-apiserver, with no garbage collector
-- and no namespace controller behind it.
local kube = require "kubelua"
local testing = require "kubelua.testing"

local function cm(name, ns)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name, namespace = ns },
    data = { a = "b" } }
end

describe("kubelua sim without controllers", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("keeps a deleted namespace Terminating, with its objects, and refuses new ones", function()
    t = testing.start{ sim = { controllers = false }, namespaces = { "going" } }
    t:create(cm("kept", "going"))
    local ns = assert(kube.delete("v1", "namespaces", nil, "going"))
    assert.equal("Namespace", ns.kind)
    assert.equal("Terminating", ns.status.phase)
    assert.is_string(ns.metadata.deletionTimestamp)
    assert.same({ "kubernetes" }, ns.spec.finalizers)
    -- a second delete changes nothing
    local again = assert(kube.delete("v1", "namespaces", nil, "going"))
    assert.equal(ns.metadata.resourceVersion, again.metadata.resourceVersion)
    assert.equal("Terminating", t:get("v1", "namespaces", nil, "going").status.phase)
    assert.equal("b", t:get("v1", "configmaps", "going", "kept").data.a)
    local _, err = kube.create(cm("late", "going"))
    assert.same({ 403, "Forbidden", 'configmaps "late" is forbidden: unable to create new '
      .. "content in namespace going because it is being terminated" },
      { err.code, err.reason, err.message })
    assert.same({ { reason = "NamespaceTerminating", field = "metadata.namespace",
      message = "namespace going is being terminated" } }, err.details.causes)
  end)

  it("leaves the finalizer of a Foreground deletion in place", function()
    t = testing.start{ sim = { controllers = false }, namespaces = { "demo" } }
    t:create(cm("fg", "demo"))
    local obj = assert(kube.delete("v1", "configmaps", "demo", "fg",
      { propagation_policy = "Foreground" }))
    assert.same({ "foregroundDeletion" }, obj.metadata.finalizers)
    kube.sleep(0.1)
    assert.same({ "foregroundDeletion" }, t:get("v1", "configmaps", "demo", "fg").metadata.finalizers)
  end)

  it("with its controllers, empties a deleted namespace and ends a Foreground deletion", function()
    t = testing.start{ namespaces = { "going" } }
    t:create(cm("kept", "going"))
    t:create(cm("fg", "going"))
    assert(kube.delete("v1", "configmaps", "going", "fg", { propagation_policy = "Foreground" }))
    t:eventually(function() return t:get("v1", "configmaps", "going", "fg") == nil end)
    assert(kube.delete("v1", "namespaces", nil, "going"))
    t:eventually(function() return t:get("v1", "namespaces", nil, "going") == nil end)
    assert.is_nil(t:get("v1", "configmaps", "going", "kept"))
  end)
end)
