-- kubelua.helpers through kube: keys, owner references, finalizers,
-- conditions and merge patches, on plain tables (the patch-based finalizer
-- helpers are in spec/integration/controller_spec.lua).
local kube = require "kubelua"
local support = require "spec.support"
local raises = support.raises
local null, array, json = kube.null, kube.array, kube.json

local function cm(ns, name, md)
  local m = md or {}
  m.name, m.namespace = name, ns
  return { apiVersion = "v1", kind = "ConfigMap", metadata = m }
end

local owner = { apiVersion = "example.com/v1", kind = "Greeting",
                metadata = { name = "hello", namespace = "demo", uid = "u-1" } }

describe("kubelua.helpers", function()
  describe("key", function()
    it("joins namespace and name, or gives the name alone", function()
      assert.equal("demo/a", kube.key(cm("demo", "a")))
      assert.equal("node-1", kube.key({ metadata = { name = "node-1" } }))
      assert.equal("n", kube.key({ metadata = { name = "n", namespace = "" } }))
    end)

    it("rejects an object without a name", function()
      raises("kube.key: the object has no metadata.name", function() kube.key({ metadata = {} }) end)
      raises("kube.key: obj must be a table, got string", function() kube.key("x") end)
    end)
  end)

  describe("set_controller_reference", function()
    it("adds the controller reference and controller_of finds it", function()
      local obj = cm("demo", "hello-cm")
      assert.is_true(kube.set_controller_reference(owner, obj))
      local want = { apiVersion = "example.com/v1", kind = "Greeting", name = "hello", uid = "u-1",
                     controller = true, blockOwnerDeletion = true }
      assert.same({ want }, obj.metadata.ownerReferences)
      assert.is_true(json.is_array(obj.metadata.ownerReferences))
      assert.same(want, kube.controller_of(obj))
    end)

    it("updates its own reference and keeps other, non-controller ones", function()
      local other = { apiVersion = "v1", kind = "Pod", name = "p", uid = "u-9" }
      local obj = cm("demo", "x", { ownerReferences = array {
        other, { apiVersion = "example.com/v1beta1", kind = "Greeting", name = "hello", uid = "old",
                 controller = true } } })
      assert.is_true(kube.set_controller_reference(owner, obj))
      assert.equal(2, #obj.metadata.ownerReferences)
      assert.same(other, obj.metadata.ownerReferences[1])
      assert.equal("u-1", obj.metadata.ownerReferences[2].uid)
      assert.equal("example.com/v1", obj.metadata.ownerReferences[2].apiVersion)
    end)

    it("refuses when another object controls it", function()
      local obj = cm("demo", "x", { ownerReferences = array {
        { apiVersion = "apps/v1", kind = "ReplicaSet", name = "rs", uid = "u-2", controller = true } } })
      local ok, err, code = kube.set_controller_reference(owner, obj)
      assert.is_nil(ok)
      assert.equal("kube.set_controller_reference: demo/x is already controlled by ReplicaSet rs", err)
      assert.equal("AlreadyOwned", code)
      assert.equal(1, #obj.metadata.ownerReferences)
    end)

    it("rejects owners it cannot reference and namespaces that do not match", function()
      raises("kube.set_controller_reference: the owner needs apiVersion, kind, metadata.name and "
        .. "metadata.uid (an object read from the server)",
        function() kube.set_controller_reference({ kind = "X", metadata = {} }, cm("demo", "x")) end)
      raises("kube.set_controller_reference: cross-namespace owner references are not allowed"
        .. " (owner in demo, object in other)",
        function() kube.set_controller_reference(owner, cm("other", "x")) end)
      raises("kube.set_controller_reference: a cluster-scoped object cannot be owned by the"
        .. " namespaced Greeting demo/hello",
        function() kube.set_controller_reference(owner, { metadata = { name = "n" } }) end)
    end)

    it("gives nil for an object without a controller", function()
      assert.is_nil(kube.controller_of(cm("demo", "x")))
      assert.is_nil(kube.controller_of(cm("demo", "x", { ownerReferences = array {
        { apiVersion = "v1", kind = "Pod", name = "p", uid = "u" } } })))
    end)
  end)

  describe("finalizers", function()
    it("adds once, reports presence, removes every copy", function()
      local obj = cm("demo", "x")
      assert.is_false(kube.has_finalizer(obj, "example.com/cleanup"))
      assert.is_true(kube.add_finalizer(obj, "example.com/cleanup"))
      assert.is_false(kube.add_finalizer(obj, "example.com/cleanup"))
      assert.is_true(kube.add_finalizer(obj, "other"))
      assert.same({ "example.com/cleanup", "other" }, obj.metadata.finalizers)
      assert.is_true(kube.has_finalizer(obj, "other"))
      obj.metadata.finalizers[3] = "other"
      assert.is_true(kube.remove_finalizer(obj, "other"))
      assert.is_false(kube.remove_finalizer(obj, "other"))
      assert.is_true(kube.remove_finalizer(obj, "example.com/cleanup"))
      assert.equal("[]", json.encode(obj.metadata.finalizers))
    end)

    it("rejects a finalizer that is no string", function()
      raises("kube.add_finalizer: finalizer must be a non-empty string, got nil",
        function() kube.add_finalizer(cm("a", "b")) end)
      raises('kube.has_finalizer: finalizer must be a non-empty string, got ""',
        function() kube.has_finalizer(cm("a", "b"), "") end)
    end)

    it("tells an object being deleted", function()
      assert.is_false(kube.is_being_deleted(cm("demo", "x")))
      assert.is_false(kube.is_being_deleted(cm("demo", "x", { deletionTimestamp = null })))
      assert.is_true(kube.is_being_deleted(cm("demo", "x",
        { deletionTimestamp = "2026-01-01T00:00:00Z" })))
    end)
  end)

  describe("conditions", function()
    it("sets lastTransitionTime only when the status changes", function()
      local obj = { status = {} }
      assert.is_true(kube.set_condition(obj, { type = "Ready", status = "False", reason = "Creating",
        message = "creating", observedGeneration = 1, lastTransitionTime = "2026-01-01T00:00:00Z" }))
      assert.same({ type = "Ready", status = "False", reason = "Creating", message = "creating",
        observedGeneration = 1, lastTransitionTime = "2026-01-01T00:00:00Z" },
        kube.get_condition(obj, "Ready"))
      assert.is_false(kube.set_condition(obj, { type = "Ready", status = "False", reason = "Creating",
        message = "creating", observedGeneration = 1 }))
      assert.is_true(kube.set_condition(obj, { type = "Ready", status = "False", reason = "Waiting",
        message = "waiting", observedGeneration = 2 }))
      local c = kube.get_condition(obj, "Ready")
      assert.equal("2026-01-01T00:00:00Z", c.lastTransitionTime)
      assert.same({ "Waiting", "waiting", 2 }, { c.reason, c.message, c.observedGeneration })
      assert.is_false(kube.is_condition_true(obj, "Ready"))

      assert.is_true(kube.set_condition(obj, { type = "Ready", status = "True", reason = "Done" }))
      c = kube.get_condition(obj, "Ready")
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", c.lastTransitionTime)
      assert.equal(os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(kube.now())):sub(1, 15),
                   c.lastTransitionTime:sub(1, 15))
      assert.is_true(kube.is_condition_true(obj, "Ready"))
      assert.equal(1, #obj.status.conditions)
    end)

    it("keeps conditions of other types and creates status when needed", function()
      local obj = {}
      kube.set_condition(obj, { type = "A", status = "True" })
      kube.set_condition(obj, { type = "B", status = "Unknown" })
      assert.same({ "A", "B" }, { obj.status.conditions[1].type, obj.status.conditions[2].type })
      assert.is_true(json.is_array(obj.status.conditions))
      assert.is_nil(kube.get_condition(obj, "C"))
      assert.is_nil(kube.get_condition({}, "A"))
    end)

    it("rejects a condition without type or with a bad status", function()
      raises("kube.set_condition: condition.type must be a non-empty string, got nil",
        function() kube.set_condition({}, { status = "True" }) end)
      raises('kube.set_condition: condition.status must be "True", "False" or "Unknown", got "yes"',
        function() kube.set_condition({}, { type = "A", status = "yes" }) end)
      raises("kube.set_condition: the condition must be a table, got nil",
        function() kube.set_condition({}) end)
    end)
  end)

  describe("merge_patch", function()
    it("gives changed, added and removed fields, objects by key, arrays whole", function()
      local old = json.decode([[{"metadata":{"name":"a","labels":{"x":"1","y":"2"}},
        "data":{"k":"v","gone":"g"},"spec":{"ports":[1,2],"same":[3]}}]])
      local new = json.decode([[{"metadata":{"name":"a","labels":{"x":"1","z":"3"}},
        "data":{"k":"v2"},"spec":{"ports":[1],"same":[3]},"extra":true}]])
      local p = kube.merge_patch(old, new)
      assert.same({ metadata = { labels = { y = null, z = "3" } }, data = { k = "v2", gone = null },
                    spec = { ports = { 1 } }, extra = true }, p)
      assert.is_true(json.is_array(p.spec.ports))
      assert.same(json.decode(json.encode(p)), p)
    end)

    it("gives {} when nothing changed, and handles null and type changes", function()
      local old = { a = { 1, 2 }, b = { c = 1 }, n = null, e = {} }
      assert.equal("{}", json.encode(kube.merge_patch(old, { a = array { 1, 2 }, b = { c = 1 },
                                                               e = {} })))
      assert.same({ a = { x = 1 }, b = null },
                  kube.merge_patch({ a = { 1 }, b = { c = 1 } }, { a = { x = 1 }, b = null }))
      assert.same({ e = array() }, kube.merge_patch({ e = {} }, { e = array() }))
    end)

    it("rejects arrays and non-tables", function()
      raises("kube.merge_patch: old must be an object table, got an array",
        function() kube.merge_patch(array { 1 }, {}) end)
      raises("kube.merge_patch: new must be an object table, got nil",
        function() kube.merge_patch({}) end)
    end)
  end)
end)
