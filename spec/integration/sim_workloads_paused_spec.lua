-- The simulator's Deployment controller on a paused Deployment, as
-- kube-controller-manager 1.26 treats one: no rollout while paused (a
-- scale still goes to its ReplicaSet), the Progressing condition
-- DeploymentPaused, then DeploymentResumed and the rollout once resumed.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local support = require "spec.support"
local pods = support.live_pods

local function deployment(spec)
  spec.selector = { matchLabels = { app = "web" } }
  spec.template = { metadata = { labels = { app = "web" } }, spec = { containers = {
    { name = "c", image = "nginx:1" } } } }
  return { apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "web",
    namespace = "demo" }, spec = spec }
end

local function progressing(d)
  for _, c in ipairs(d.status and d.status.conditions or {}) do
    if c.type == "Progressing" then return { c.status, c.reason, c.message } end
  end
  return nil
end

local function images(t)
  local out = {}
  for _, p in ipairs(pods(t)) do out[#out + 1] = p.spec.containers[1].image end
  return out
end

describe("kubelua sim workloads: paused Deployment", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("rolls nothing out while paused, scales its ReplicaSet, and rolls out once resumed",
      function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(deployment{ replicas = 2 })
    local function get() return t:get("apps/v1", "deployments", "demo", "web") end
    local function at(gen, want)
      return t:eventually(function()
        local d = get()
        return d.status.observedGeneration == gen and (want == nil or want(d)) and d
      end, 20)
    end
    at(1, function(d) return d.status.availableReplicas == 2 end)
    local d = get()
    d.spec.paused = true
    t:update(d)
    d = at(2, function(x) return progressing(x)[2] == "DeploymentPaused" end)
    assert.same({ "Unknown", "DeploymentPaused", "Deployment is paused" }, progressing(d))
    -- a template change while paused: no new ReplicaSet
    d.spec.template.spec.containers[1].image = "nginx:2"
    t:update(d)
    d = at(3)
    assert.equal(1, #t:list("apps/v1", "replicasets", "demo"))
    assert.same({ "Unknown", "DeploymentPaused", "Deployment is paused" }, progressing(d))
    assert.same({ nil, 2 }, { d.status.updatedReplicas, d.status.availableReplicas })
    -- a scale while paused goes to the one ReplicaSet, of the old template
    d.spec.replicas = 3
    t:update(d)
    at(4, function(x) return x.status.availableReplicas == 3 end)
    assert.same({ "nginx:1", "nginx:1", "nginx:1" }, images(t))
    assert.equal(1, #t:list("apps/v1", "replicasets", "demo"))
    d = get()
    d.spec.paused = false
    t:update(d)
    at(5, function(x)
      local p = progressing(x)
      return p[2] == "NewReplicaSetAvailable" and x.status.updatedReplicas == 3
        and x.status.replicas == 3 and x
    end)
    assert.same({ "nginx:2", "nginx:2", "nginx:2" }, images(t))
    assert.equal(2, #t:list("apps/v1", "replicasets", "demo"))
  end)

  it("says it is paused, then resumed, each in a status write of its own", function()
    t = testing.start{ namespaces = { "demo" } }
    local reasons = {}
    local inf = kube.informer("apps/v1", "deployments", { namespace = "demo" })
    local function note(ev)
      local p = progressing(ev.object)
      if p and p[2] ~= reasons[#reasons] then reasons[#reasons + 1] = p[2] end
    end
    inf:add_handler{ add = note, update = note }
    assert.is_true(kube.wait_for_sync(inf, 5))
    t:create(deployment{ replicas = 1, paused = true })
    local d = t:eventually(function()
      local x = t:get("apps/v1", "deployments", "demo", "web")
      return progressing(x) and x
    end)
    assert.same({ "Unknown", "DeploymentPaused", "Deployment is paused" }, progressing(d))
    assert.same({}, t:list("apps/v1", "replicasets", "demo"))
    d.spec.paused = false
    t:update(d)
    t:eventually(function() return reasons[#reasons] == "NewReplicaSetAvailable" end)
    -- (ReplicaSetUpdated may come between, as the Pod gets ready)
    assert.same({ "DeploymentPaused", "DeploymentResumed", "NewReplicaSetCreated" },
      { reasons[1], reasons[2], reasons[3] })
  end)
end)
