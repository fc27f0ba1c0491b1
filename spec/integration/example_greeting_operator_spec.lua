-- examples/greeting-operator with kubelua.testing: with its CRD manifest
-- installed (the simulator has no RBAC for the rest), a Greeting gets an
-- owned ConfigMap, an index line, a finalizer and status; an invalid one
-- is reported; deletion cleans up.
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
    local g = t:eventually(function() return ready("hello") end)
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
