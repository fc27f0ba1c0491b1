-- A user's controller that makes a Deployment and waits for it to be
-- Available, tested with `kubelua test` against the simulator's
-- workloads: its Deployment's Pods are scheduled, run and become Ready,
-- and the Deployment's Available condition tells the controller so.
local testing = require "kubelua.testing"

local SCRIPT = "spec/fixtures/workloads/webapp.lua"

local function app(name, image, replicas)
  return { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = name, namespace = "shop", labels = { ["webapp.kubelua.io/name"] = name } },
    data = { image = image, replicas = tostring(replicas) } }
end

local function state(t, name)
  local cm = t:get("v1", "configmaps", "shop", name)
  return cm and cm.metadata.annotations and cm.metadata.annotations["webapp.kubelua.io/state"]
end

describe("a controller waiting for its Deployment (spec/fixtures/workloads/webapp.lua)", function()
  local t
  after_each(function()
    t:settle()
    t:stop()
  end)

  it("sees its Deployment become Available once its Pods are Ready", function()
    t = testing.start{ namespaces = { "shop" } }
    t:load(SCRIPT)
    t:create(app("store", "nginx:1.25", 2))
    t:eventually(function() return state(t, "store") == "Available" end)
    local d = t:get("apps/v1", "deployments", "shop", "store")
    assert.same({ 2, 2, 2 }, { d.status.readyReplicas, d.status.availableReplicas,
      d.status.updatedReplicas })
    local ready = 0
    for _, p in ipairs(t:list("v1", "pods", "shop")) do
      assert.same({ "Running", "nginx:1.25" }, { p.status.phase, p.spec.containers[1].image })
      ready = ready + 1
    end
    assert.equal(2, ready)
  end)

  it("sees it stay Unavailable while its Pods crash", function()
    t = testing.start{ namespaces = { "shop" },
      pods = { fail = function(pod) return pod.spec.containers[1].image == "broken" end } }
    t:load(SCRIPT)
    t:create(app("bad", "broken", 1))
    t:eventually(function()
      return state(t, "bad") == "Unavailable: Deployment does not have minimum availability."
    end)
  end)
end)
