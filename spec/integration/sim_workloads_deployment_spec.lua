-- The simulator's ReplicaSet and Deployment controllers: Pods and
-- ReplicaSets as kube-controller-manager makes them, the status fields and
-- conditions it writes, scaling, a rollout of a template change
-- (RollingUpdate and Recreate), failures, deletion through the garbage
-- collector.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local support = require "spec.support"
local conditions, pods = support.conditions, support.live_pods

local function template(image, labels)
  return { metadata = { labels = labels or { app = "web" } },
    spec = { containers = { { name = "c", image = image or "nginx" } } } }
end

local function deployment(name, replicas, extra)
  local d = { apiVersion = "apps/v1", kind = "Deployment",
    metadata = { name = name, namespace = "demo" },
    spec = { replicas = replicas, selector = { matchLabels = { app = "web" } },
      template = template() } }
  for k, v in pairs(extra or {}) do d.spec[k] = v end
  return d
end

local function counts(st)
  return { replicas = st.replicas, updatedReplicas = st.updatedReplicas,
    readyReplicas = st.readyReplicas, availableReplicas = st.availableReplicas,
    unavailableReplicas = st.unavailableReplicas, observedGeneration = st.observedGeneration }
end

-- The Deployment once its status says it rolled out generation gen:
-- replicas up to date and available.
local function rolled_out(t, name, n, gen)
  return t:eventually(function()
    local d = t:get("apps/v1", "deployments", "demo", name)
    local st = d.status or {}
    return st.observedGeneration == (gen or 1) and (st.updatedReplicas or 0) == n
      and (st.availableReplicas or 0) == n and (st.replicas or 0) == n
      and #pods(t) == n and d
  end)
end

describe("kubelua sim workloads: ReplicaSet", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("keeps spec.replicas Pods it owns, and reports them in status", function()
    t = testing.start{ namespaces = { "demo" } }
    local rs = t:create{ apiVersion = "apps/v1", kind = "ReplicaSet",
      metadata = { name = "rs", namespace = "demo" },
      spec = { replicas = 3, selector = { matchLabels = { app = "web" } }, template = template() } }
    local got = t:eventually(function()
      local x = t:get("apps/v1", "replicasets", "demo", "rs")
      return x.status.readyReplicas == 3 and x
    end)
    assert.same({ replicas = 3, fullyLabeledReplicas = 3, readyReplicas = 3,
      availableReplicas = 3, observedGeneration = 1 }, got.status)
    local ps = pods(t)
    assert.equal(3, #ps)
    for _, p in ipairs(ps) do
      assert.matches("^rs%-%w%w%w%w%w$", p.metadata.name)
      assert.same({ { apiVersion = "apps/v1", kind = "ReplicaSet", name = "rs",
        uid = rs.metadata.uid, controller = true, blockOwnerDeletion = true } },
        p.metadata.ownerReferences)
      assert.same({ app = "web" }, p.metadata.labels)
    end
    -- a Pod deleted is replaced; scaled down, the extra ones go
    t:delete("v1", "pods", "demo", ps[1].metadata.name, { grace_period_seconds = 0 })
    t:eventually(function()
      local names = {}
      for _, p in ipairs(pods(t)) do names[p.metadata.name] = true end
      local n = 0
      for _ in pairs(names) do n = n + 1 end
      return n == 3 and not names[ps[1].metadata.name]
    end)
    got = t:get("apps/v1", "replicasets", "demo", "rs")
    got.spec.replicas = 1
    t:update(got)
    got = t:eventually(function()
      local x = t:get("apps/v1", "replicasets", "demo", "rs")
      return x.status.replicas == 1 and x.status.observedGeneration == 2 and x
    end)
    assert.same({ replicas = 1, fullyLabeledReplicas = 1, readyReplicas = 1,
      availableReplicas = 1, observedGeneration = 2 }, got.status)
    t:eventually(function() return #t:list("v1", "pods", "demo") == 1 end)
  end)
end)

describe("kubelua sim workloads: ReplicaSet written into the store", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("is left alone without a template, its Pods kept", function()
    t = testing.start{ namespaces = { "demo" } }
    local s = t.sim.store
    s:put(s:resource("apps/v1", "replicasets"), { apiVersion = "apps/v1", kind = "ReplicaSet",
      metadata = { name = "bare", namespace = "demo", uid = "u-bare",
        resourceVersion = tostring(s:next_rv()) } }, "ADDED")
    for i = 1, 2 do
      t:create{ apiVersion = "v1", kind = "Pod", metadata = { name = "p" .. i, namespace = "demo",
        ownerReferences = { { apiVersion = "apps/v1", kind = "ReplicaSet", name = "bare",
          uid = "u-bare", controller = true } } },
        spec = { containers = { { name = "c", image = "x" } } } }
    end
    t:eventually(function()
      local ps = pods(t)
      return #ps == 2 and ps[1].status.phase == "Running" and ps[2].status.phase == "Running"
    end)
    kube.sleep(0.2)
    assert.equal(2, #pods(t))
    assert.is_nil(t:get("apps/v1", "replicasets", "demo", "bare").status)
  end)
end)

describe("kubelua sim workloads: Deployment", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("makes a ReplicaSet of its template and becomes Available", function()
    t = testing.start{ namespaces = { "demo" } }
    local created = t:create(deployment("web", 3))
    local d = rolled_out(t, "web", 3)
    assert.same({ replicas = 3, updatedReplicas = 3, readyReplicas = 3, availableReplicas = 3,
      observedGeneration = 1 }, counts(d.status))
    assert.equal("1", d.metadata.annotations["deployment.kubernetes.io/revision"])
    local rses = t:list("apps/v1", "replicasets", "demo")
    assert.equal(1, #rses)
    local rs = rses[1]
    local hash = rs.metadata.labels["pod-template-hash"]
    assert.matches("^[bcdfghjklmnpqrstvwxz2456789]+$", hash)
    assert.equal("web-" .. hash, rs.metadata.name)
    assert.same({ app = "web", ["pod-template-hash"] = hash }, rs.spec.selector.matchLabels)
    assert.same({ app = "web", ["pod-template-hash"] = hash }, rs.spec.template.metadata.labels)
    assert.same({ ["deployment.kubernetes.io/revision"] = "1",
      ["deployment.kubernetes.io/desired-replicas"] = "3",
      ["deployment.kubernetes.io/max-replicas"] = "4" }, rs.metadata.annotations)
    assert.same({ { apiVersion = "apps/v1", kind = "Deployment", name = "web",
      uid = created.metadata.uid, controller = true, blockOwnerDeletion = true } },
      rs.metadata.ownerReferences)
    assert.same({ { "Available", "True", "MinimumReplicasAvailable",
      "Deployment has minimum availability." },
      { "Progressing", "True", "NewReplicaSetAvailable",
        'ReplicaSet "' .. rs.metadata.name .. '" has successfully progressed.' } }, conditions(d))
    for _, p in ipairs(pods(t)) do
      assert.equal(hash, p.metadata.labels["pod-template-hash"])
      assert.equal(rs.metadata.uid, p.metadata.ownerReferences[1].uid)
    end
  end)

  it("scales up and down through its ReplicaSet", function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(deployment("web", 2))
    local d = rolled_out(t, "web", 2)
    d.spec.replicas = 5
    t:update(d)
    d = rolled_out(t, "web", 5, 2)
    assert.same({ replicas = 5, updatedReplicas = 5, readyReplicas = 5, availableReplicas = 5,
      observedGeneration = 2 }, counts(d.status))
    d.spec.replicas = 1
    t:update(d)
    rolled_out(t, "web", 1, 3)
    local rses = t:list("apps/v1", "replicasets", "demo")
    assert.same({ 1, 1, "1" }, { #rses, rses[1].spec.replicas,
      rses[1].metadata.annotations["deployment.kubernetes.io/desired-replicas"] })
  end)

  it("rolls a template change out to a new ReplicaSet, the old one scaled to 0", function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(deployment("web", 4))
    local d = rolled_out(t, "web", 4)
    local old = t:list("apps/v1", "replicasets", "demo")[1]
    d.spec.template.spec.containers[1].image = "nginx:1.25"
    t:update(d)
    d = rolled_out(t, "web", 4, 2)
    assert.equal("2", d.metadata.annotations["deployment.kubernetes.io/revision"])
    local by_name = {}
    for _, rs in ipairs(t:list("apps/v1", "replicasets", "demo")) do
      by_name[rs.metadata.name] = rs
    end
    local new
    for name, rs in pairs(by_name) do if name ~= old.metadata.name then new = rs end end
    assert.same({ 0, "1" }, { by_name[old.metadata.name].spec.replicas,
      by_name[old.metadata.name].metadata.annotations["deployment.kubernetes.io/revision"] })
    assert.same({ 4, "2", "nginx:1.25" }, { new.spec.replicas,
      new.metadata.annotations["deployment.kubernetes.io/revision"],
      new.spec.template.spec.containers[1].image })
    for _, p in ipairs(pods(t)) do
      assert.equal("nginx:1.25", p.spec.containers[1].image)
    end
    assert.same({ "Progressing", "True", "NewReplicaSetAvailable",
      'ReplicaSet "' .. new.metadata.name .. '" has successfully progressed.' }, conditions(d)[2])
  end)

  it("never has more than maxSurge extra or maxUnavailable missing Pods in a rollout", function()
    -- each Pod takes 0.2 s to start, so the rollout goes in steps
    t = testing.start{ namespaces = { "demo" }, pods = { start_delay = 0.2 } }
    t:create(deployment("web", 4, { strategy = { type = "RollingUpdate",
      rollingUpdate = { maxSurge = 1, maxUnavailable = 0 } } }))
    local d = rolled_out(t, "web", 4)
    local most, fewest_ready = 0, math.huge
    d.spec.template.spec.containers[1].image = "nginx:2"
    t:update(d)
    t:eventually(function()
      local live, ready = 0, 0
      for _, p in ipairs(t:list("v1", "pods", "demo")) do
        if not p.metadata.deletionTimestamp then
          live = live + 1
          for _, c in ipairs(p.status and p.status.conditions or {}) do
            if c.type == "Ready" and c.status == "True" then ready = ready + 1 end
          end
        end
      end
      most, fewest_ready = math.max(most, live), math.min(fewest_ready, ready)
      local x = t:get("apps/v1", "deployments", "demo", "web")
      return x.status.observedGeneration == 2 and x.status.updatedReplicas == 4
        and x.status.availableReplicas == 4 and (x.status.replicas or 0) == 4
    end, 20, 0.01)
    assert.is_true(most <= 5, "at most 4 + maxSurge 1 Pods, saw " .. most)
    assert.is_true(fewest_ready >= 4, "at least 4 - maxUnavailable 0 ready, saw " .. fewest_ready)
  end)

  it("Recreate: the old Pods go before the new ReplicaSet scales up", function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(deployment("web", 2, { strategy = { type = "Recreate" } }))
    local d = rolled_out(t, "web", 2)
    d.spec.template.spec.containers[1].image = "nginx:2"
    t:update(d)
    rolled_out(t, "web", 2, 2)
    local rses = t:list("apps/v1", "replicasets", "demo")
    table.sort(rses, function(a, b)
      return a.metadata.annotations["deployment.kubernetes.io/revision"]
        < b.metadata.annotations["deployment.kubernetes.io/revision"]
    end)
    assert.same({ 0, 2 }, { rses[1].spec.replicas, rses[2].spec.replicas })
  end)

  it("is not Available while its Pods fail: MinimumReplicasUnavailable", function()
    t = testing.start{ namespaces = { "demo" }, pods = { fail = function() return true end } }
    t:create(deployment("web", 2))
    t:eventually(function()
      return t:get("apps/v1", "deployments", "demo", "web").status.replicas == 2
    end)
    kube.sleep(0.2) -- and no Pod becomes ready
    local d = t:get("apps/v1", "deployments", "demo", "web")
    local rs = t:list("apps/v1", "replicasets", "demo")[1]
    assert.same({ replicas = 2, updatedReplicas = 2, unavailableReplicas = 2,
      observedGeneration = 1 }, counts(d.status))
    -- Pods were made (updatedReplicas grew): progressing, put last
    assert.same({ { "Available", "False", "MinimumReplicasUnavailable",
      "Deployment does not have minimum availability." },
      { "Progressing", "True", "ReplicaSetUpdated",
        'ReplicaSet "' .. rs.metadata.name .. '" is progressing.' } }, conditions(d))
  end)

  it("goes with its ReplicaSets and Pods through the garbage collector", function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(deployment("web", 2))
    rolled_out(t, "web", 2)
    t:delete("apps/v1", "deployments", "demo", "web")
    t:eventually(function()
      return #t:list("apps/v1", "replicasets", "demo") == 0
        and #t:list("v1", "pods", "demo") == 0
    end)
  end)

  it("is off with controllers = { deployment = false }: no ReplicaSet", function()
    t = testing.start{ namespaces = { "demo" }, controllers = { deployment = false } }
    t:create(deployment("web", 2))
    t:create{ apiVersion = "apps/v1", kind = "ReplicaSet",
      metadata = { name = "rs", namespace = "demo" },
      spec = { replicas = 1, selector = { matchLabels = { app = "web" } }, template = template() } }
    t:eventually(function() return #pods(t) == 1 end) -- the ReplicaSet controller still runs
    kube.sleep(0.2)
    assert.equal(1, #t:list("apps/v1", "replicasets", "demo"))
    assert.same({}, t:get("apps/v1", "deployments", "demo", "web").status)
  end)
end)
