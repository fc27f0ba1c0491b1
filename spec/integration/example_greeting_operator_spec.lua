-- examples/greeting-operator with kubelua.testing: with its CRD manifest
-- installed (the simulator has no RBAC for the rest), a Greeting gets an
-- owned ConfigMap, an index line, a finalizer and status; an invalid one
-- is reported; deletion cleans up.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local yaml = require "kubelua.sim.yaml"

local GV = "example.kubelua.io/v1"

local function greeting(name, message)
  return { apiVersion = GV, kind = "Greeting", metadata = { name = name, namespace = "demo" },
           spec = { message = message } }
end

describe("examples/greeting-operator", function()
  local t
  before_each(function()
    t = testing.start{ namespaces = { "demo" } }
    local f = assert(io.open("examples/greeting-operator/deploy/01-crd.yaml"))
    t:create(assert(yaml.decode(f:read("*a"))))
    f:close()
    -- a real server serves a new CRD's resource a moment later
    t:eventually(function() return t:list(GV, "greetings", "demo") end)
    t:load("examples/greeting-operator/controller.lua")
  end)
  after_each(function()
    t:settle() -- a reconcile still running would finish against the next case's server
    t:stop()
  end)

  local function ready(name)
    local g = t:get(GV, "greetings", "demo", name)
    local c = g and g.status and g.status.conditions and g.status.conditions[1]
    return c and c.status == "True" and g
  end

  it("makes the owned ConfigMap, the index line, the finalizer and the status", function()
    t:create(greeting("hello", "Hello, world"))
    local g = t:eventually(function() return ready("hello") end)
    assert.same({ "example.kubelua.io/index" }, g.metadata.finalizers)
    assert.equal(1, g.status.observedGeneration)
    local c = g.status.conditions[1]
    assert.same({ "Ready", "True", "Ready", "ConfigMap hello-greeting holds the greeting", 1 },
                { c.type, c.status, c.reason, c.message, c.observedGeneration })
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", c.lastTransitionTime)
    local cm = t:get("v1", "configmaps", "demo", "hello-greeting")
    assert.equal("Hello, world", cm.data.message)
    assert.same({ apiVersion = GV, kind = "Greeting", name = "hello", uid = g.metadata.uid,
                  controller = true, blockOwnerDeletion = true }, cm.metadata.ownerReferences[1])
    assert.equal("Hello, world", t:get("v1", "configmaps", "demo", "greetings-index").data.hello)
  end)

  it("follows a spec change and keeps lastTransitionTime while Ready stays True", function()
    t:create(greeting("hello", "one"))
    t:eventually(function() return ready("hello") end)
    -- the operator's last status write is in, so the update is not a
    -- Conflict; a run on an object the cache had before the first status
    -- write may have set the condition again since Ready was first seen
    t:settle()
    local g = t:get(GV, "greetings", "demo", "hello")
    local since = g.status.conditions[1].lastTransitionTime
    g.spec.message = "two"
    t:update(g)
    g = t:eventually(function()
      local x = ready("hello")
      return x and x.status.observedGeneration == 2 and x
    end)
    assert.equal(since, g.status.conditions[1].lastTransitionTime)
    assert.equal(2, g.status.conditions[1].observedGeneration)
    assert.equal("two", t:get("v1", "configmaps", "demo", "hello-greeting").data.message)
    assert.equal("two", t:get("v1", "configmaps", "demo", "greetings-index").data.hello)
  end)

  it("reports an invalid spec and does not retry it until it is edited", function()
    t:create(greeting("empty", ""))
    local g = t:eventually(function()
      local x = t:get(GV, "greetings", "demo", "empty")
      return x.status and x.status.conditions and x
    end)
    local c = g.status.conditions[1]
    assert.same({ "False", "InvalidSpec" }, { c.status, c.reason })
    assert.is_nil(t:get("v1", "configmaps", "demo", "empty-greeting"))
    t:settle()
    g = t:get(GV, "greetings", "demo", "empty")
    g.spec.message = "fixed"
    t:update(g)
    t:eventually(function() return ready("empty") end)
  end)

  it("takes a deleted Greeting out of the index, then lets it go", function()
    t:create(greeting("a", "A"))
    t:create(greeting("b", "B"))
    t:eventually(function() return ready("a") and ready("b") end)
    t:delete(GV, "greetings", "demo", "a")
    t:eventually(function() return t:get(GV, "greetings", "demo", "a") == nil end)
    assert.same({ b = "B" }, t:get("v1", "configmaps", "demo", "greetings-index").data)
  end)
end)

-- With its webhooks: the webhook overlay (examples/greeting-operator/webhook,
-- as kubectl kustomize renders it) gives the CRD with its conversion webhook
-- and the webhook configurations, which t:webhooks points at the script
-- loaded with --webhooks; every write then goes through them (a real
-- server calls them at https://127.0.0.1:PORT, t:webhooks' stand-in for
-- the Service).
describe("examples/greeting-operator's webhooks", function()
  local kustomize = require "spec.kustomize"
  local rendered = kustomize.render("examples/greeting-operator/webhook", {})
  local t
  before_each(function()
    t = testing.start{ namespaces = { "demo", "kubelua-system" } }
    t:webhooks(rendered)
    t:eventually(function() return t:list(GV, "greetings", "demo") end)
    t:load("examples/greeting-operator/controller.lua", "--webhooks")
  end)
  after_each(function()
    t:settle()
    t:stop()
  end)

  local function ready(name, version)
    local g = t:get(version or GV, "greetings", "demo", name)
    local c = g and g.status and g.status.conditions and g.status.conditions[1]
    return c and c.status == "True" and g
  end

  it("are all in the overlay: configurations, the CRD's conversion, the certificate", function()
    local kinds = {}
    for _, o in ipairs(rendered) do
      local md = o.metadata
      kinds[#kinds + 1] = o.kind .. " " .. (md.namespace and md.namespace .. "/" or "") .. md.name
        .. (md.annotations and md.annotations["cert-manager.io/inject-ca-from"]
          and " ← " .. md.annotations["cert-manager.io/inject-ca-from"] or "")
    end
    table.sort(kinds)
    assert.same({ "Certificate kubelua-system/greeting-webhook",
      "ClusterRole greeting-operator", "ClusterRoleBinding greeting-operator",
      "ConfigMap kubelua-system/kubelua-controller",
      "CustomResourceDefinition greetings.example.kubelua.io ← kubelua-system/greeting-webhook",
      "Deployment kubelua-system/kubelua", "Issuer kubelua-system/greeting-selfsigned",
      "MutatingWebhookConfiguration greeting-operator ← kubelua-system/greeting-webhook",
      "Namespace kubelua-system", "Role kubelua-system/kubelua-leader-election",
      "RoleBinding kubelua-system/kubelua-leader-election",
      "Service kubelua-system/greeting-webhook",
      "ServiceAccount kubelua-system/kubelua",
      "ValidatingWebhookConfiguration greeting-operator ← kubelua-system/greeting-webhook" },
      kinds)
  end)

  it("refuses a Greeting without a message, with a cause naming the field", function()
    local g, err = kube.create(greeting("empty", ""))
    assert.is_nil(g)
    assert.same({ 422, "Invalid", 'admission webhook "vgreeting.example.kubelua.io" denied the '
      .. 'request: Greeting.example.kubelua.io "empty" is invalid: spec.message: Required value: '
      .. "a greeting needs a message" }, { err.code, err.reason, err.message })
    assert.same({ { reason = "FieldValueRequired", field = "spec.message",
      message = "Required value: a greeting needs a message" } }, err.details.causes)
    assert.is_nil(t:get(GV, "greetings", "demo", "empty"))
  end)

  it("defaults spec.from, then the operator makes the Greeting ready", function()
    assert.same({ message = "Hello", from = "kubelua" },
      t:create(greeting("hello", "Hello")).spec)
    t:eventually(function() return ready("hello") end)
    t:settle()
    local g = t:get(GV, "greetings", "demo", "hello")
    g.spec.from = "me"
    assert.equal("me", t:update(g).spec.from)
  end)

  it("converts a v1alpha1 Greeting to v1 for the operator, and back", function()
    local made = t:create{ apiVersion = "example.kubelua.io/v1alpha1", kind = "Greeting",
      metadata = { name = "hallo", namespace = "demo" }, spec = { text = "Hallo" } }
    assert.same({ text = "Hallo", from = "kubelua" }, made.spec)
    t:eventually(function() return ready("hallo") end)
    assert.equal("Hallo", t:get("v1", "configmaps", "demo", "hallo-greeting").data.message)
    assert.same({ message = "Hallo", from = "kubelua" }, t:get(GV, "greetings", "demo", "hallo").spec)
    local old = ready("hallo", "example.kubelua.io/v1alpha1")
    assert.same({ text = "Hallo", from = "kubelua" }, old.spec)
    assert.equal("True", old.status.conditions[1].status)
  end)
end)
