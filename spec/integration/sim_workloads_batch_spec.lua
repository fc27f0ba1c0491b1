-- The simulator's Job, StatefulSet and DaemonSet controllers: the
-- Pods each makes, in which order, and the status fields and conditions
-- kube-controller-manager writes; a Job's failure path, scaling, a
-- rollout, Nodes coming and going.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local support = require "spec.support"
local conditions, live_pods = support.conditions, support.live_pods

local function template(labels, policy, annotations)
  return { metadata = { labels = labels, annotations = annotations },
    spec = { restartPolicy = policy, containers = { { name = "c", image = "busybox" } } } }
end

local function job(name, spec)
  return { apiVersion = "batch/v1", kind = "Job", metadata = { name = name, namespace = "demo" },
    spec = spec }
end


describe("kubelua sim workloads: Job", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("runs parallelism Pods at a time until completions succeeded: Complete", function()
    t = testing.start{ namespaces = { "demo" }, pods = { run_time = 0.1 } }
    local j = t:create(job("batch", { completions = 5, parallelism = 2,
      template = template({ app = "b" }, "Never") }))
    local most = 0
    local done = t:eventually(function()
      local active = 0
      for _, p in ipairs(t:list("v1", "pods", "demo")) do
        local phase = p.status and p.status.phase
        if phase ~= "Succeeded" and phase ~= "Failed" then active = active + 1 end
      end
      most = math.max(most, active)
      local x = t:get("batch/v1", "jobs", "demo", "batch")
      return x.status.completionTime and x
    end, 20, 0.01)
    assert.is_true(most <= 2, "at most parallelism 2 Pods at once, saw " .. most)
    assert.same({ 5, 0 }, { done.status.succeeded, done.status.ready })
    assert.same({ nil, nil }, { done.status.active, done.status.failed })
    assert.same({}, done.status.uncountedTerminatedPods)
    assert.is_string(done.status.startTime)
    assert.same({ { "Complete", "True" } }, conditions(done))
    local ps = t:list("v1", "pods", "demo")
    assert.equal(5, #ps)
    for _, p in ipairs(ps) do
      assert.matches("^batch%-%w%w%w%w%w$", p.metadata.name)
      assert.same({ app = "b", ["controller-uid"] = j.metadata.uid, ["job-name"] = "batch" },
        p.metadata.labels)
      assert.same({ "Job", "batch", true, true }, { p.metadata.ownerReferences[1].kind,
        p.metadata.ownerReferences[1].name, p.metadata.ownerReferences[1].controller,
        p.metadata.ownerReferences[1].blockOwnerDeletion })
      assert.equal("Succeeded", p.status.phase)
    end
  end)

  it("reports active and ready Pods while they run", function()
    t = testing.start{ namespaces = { "demo" }, pods = { run_time = 60 } }
    t:create(job("long", { parallelism = 3, completions = 3, template = template(nil, "Never") }))
    local j = t:eventually(function()
      local x = t:get("batch/v1", "jobs", "demo", "long")
      return x.status.ready == 3 and x
    end)
    assert.same({ 3, 3, nil, nil }, { j.status.active, j.status.ready, j.status.succeeded,
      j.status.conditions })
  end)

  it("replaces failed Pods until more than backoffLimit failed: BackoffLimitExceeded", function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(job("bad", { backoffLimit = 2, template = template(nil, "Never",
      { ["sim.kubelua.io/fail"] = "true" }) }))
    local j = t:eventually(function()
      local x = t:get("batch/v1", "jobs", "demo", "bad")
      return x.status.conditions and x
    end)
    assert.same({ { "Failed", "True", "BackoffLimitExceeded",
      "Job has reached the specified backoff limit" } }, conditions(j))
    assert.same({ 3, nil, nil, 0 }, { j.status.failed, j.status.active, j.status.succeeded,
      j.status.ready })
    assert.is_nil(j.status.completionTime)
    kube.sleep(0.2) -- and no Pod more
    assert.equal(3, #t:list("v1", "pods", "demo"))
  end)
end)

describe("kubelua sim workloads: StatefulSet", function()
  local t
  after_each(function() if t then t:stop() end end)

  local function sts(replicas, extra)
    local s = { apiVersion = "apps/v1", kind = "StatefulSet",
      metadata = { name = "db", namespace = "demo" },
      spec = { replicas = replicas, serviceName = "db", selector = { matchLabels = { app = "db" } },
        template = template({ app = "db" }) } }
    for k, v in pairs(extra or {}) do s.spec[k] = v end
    return s
  end

  local function ready_sts(h, n, gen)
    return h:eventually(function()
      local x = h:get("apps/v1", "statefulsets", "demo", "db")
      return x.status.observedGeneration == (gen or 1) and (x.status.readyReplicas or 0) == n
        and x.status.updatedReplicas == n and x.status.replicas == n
        and x.status.currentRevision == x.status.updateRevision and #live_pods(h) == n and x
    end, 20)
  end

  it("makes db-0, db-1, db-2 in order, each once the one before is Ready", function()
    t = testing.start{ namespaces = { "demo" }, pods = { start_delay = 0.1 } }
    -- what the store sees, in order: each Pod's creation and its becoming Ready
    local seen = {}
    local store = t.sim.store
    local observe = store.observe
    store.observe = function(res, e, etype, prev)
      if res.name == "pods" then
        local p = e.obj
        local ready = false
        for _, c in ipairs(p.status and p.status.conditions or {}) do
          ready = ready or (c.type == "Ready" and c.status == "True")
        end
        local step = etype == "ADDED" and "made" or (ready and "ready" or nil)
        if step and seen[#seen] ~= p.metadata.name .. " " .. step then
          seen[#seen + 1] = p.metadata.name .. " " .. step
        end
      end
      observe(res, e, etype, prev)
    end
    local created = t:create(sts(3))
    local s = ready_sts(t, 3)
    store.observe = observe
    assert.same({ "db-0 made", "db-0 ready", "db-1 made", "db-1 ready", "db-2 made",
      "db-2 ready" }, seen)
    local rev = s.status.updateRevision
    assert.matches("^db%-%w+$", rev)
    assert.same({ observedGeneration = 1, replicas = 3, readyReplicas = 3, currentReplicas = 3,
      updatedReplicas = 3, availableReplicas = 3, currentRevision = rev, updateRevision = rev,
      collisionCount = 0 }, s.status)
    for i, p in ipairs(live_pods(t)) do
      local name = "db-" .. (i - 1)
      assert.equal(name, p.metadata.name)
      assert.same({ app = "db", ["controller-revision-hash"] = rev,
        ["statefulset.kubernetes.io/pod-name"] = name }, p.metadata.labels)
      assert.same({ name, "db" }, { p.spec.hostname, p.spec.subdomain })
      assert.equal(created.metadata.uid, p.metadata.ownerReferences[1].uid)
    end
  end)

  it("scales down from the highest ordinal, and rolls a template change out", function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(sts(3))
    local s = ready_sts(t, 3)
    local old = s.status.currentRevision
    s.spec.replicas = 2
    t:update(s)
    s = ready_sts(t, 2, 2)
    local ps = live_pods(t)
    assert.same({ "db-0", "db-1" }, { ps[1].metadata.name, ps[2].metadata.name })
    s.spec.template.spec.containers[1].image = "busybox:2"
    t:update(s)
    s = t:eventually(function()
      local x = ready_sts(t, 2, 3)
      return x.status.currentRevision ~= old and x
    end, 20)
    assert.same({ 2, 2, 2 }, { s.status.replicas, s.status.updatedReplicas,
      s.status.currentReplicas })
    for _, p in ipairs(live_pods(t)) do
      assert.same({ "busybox:2", s.status.updateRevision }, { p.spec.containers[1].image,
        p.metadata.labels["controller-revision-hash"] })
    end
  end)
end)

describe("kubelua sim workloads: DaemonSet", function()
  local t
  after_each(function() if t then t:stop() end end)

  local function ds(selector)
    local tpl = template({ app = "agent" })
    tpl.spec.nodeSelector = selector
    return { apiVersion = "apps/v1", kind = "DaemonSet",
      metadata = { name = "agent", namespace = "demo" },
      spec = { selector = { matchLabels = { app = "agent" } }, template = tpl } }
  end

  it("runs one Pod on each Node, and reports it", function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(ds())
    local d = t:eventually(function()
      local x = t:get("apps/v1", "daemonsets", "demo", "agent")
      return x.status.numberReady == 3 and x
    end)
    assert.same({ currentNumberScheduled = 3, desiredNumberScheduled = 3, numberMisscheduled = 0,
      numberReady = 3, numberAvailable = 3, updatedNumberScheduled = 3, observedGeneration = 1 },
      d.status)
    local on = {}
    for _, p in ipairs(live_pods(t)) do
      on[#on + 1] = p.spec.nodeName
      assert.matches("^agent%-%w%w%w%w%w$", p.metadata.name)
      assert.equal("1", p.metadata.labels["pod-template-generation"])
      assert.same({ { key = "metadata.name", operator = "In", values = { p.spec.nodeName } } },
        p.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
          .nodeSelectorTerms[1].matchFields)
    end
    table.sort(on)
    assert.same({ "node-1", "node-2", "node-3" }, on)
  end)

  it("follows its nodeSelector as Node labels change", function()
    t = testing.start{ namespaces = { "demo" }, nodes = 2 }
    t:create(ds({ role = "edge" }))
    kube.sleep(0.2)
    local d = t:get("apps/v1", "daemonsets", "demo", "agent")
    assert.same({ 0, 0, 0 }, { d.status.desiredNumberScheduled, d.status.currentNumberScheduled,
      #live_pods(t) })
    local n = t:get("v1", "nodes", nil, "node-2")
    n.metadata.labels.role = "edge"
    t:update(n)
    d = t:eventually(function()
      local x = t:get("apps/v1", "daemonsets", "demo", "agent")
      return x.status.numberReady == 1 and x
    end)
    assert.same({ 1, 1, 1, nil }, { d.status.desiredNumberScheduled,
      d.status.currentNumberScheduled, d.status.numberAvailable, d.status.numberUnavailable })
    assert.equal("node-2", live_pods(t)[1].spec.nodeName)
    n = t:get("v1", "nodes", nil, "node-2")
    n.metadata.labels.role = nil
    t:update(n)
    t:eventually(function() return #live_pods(t) == 0 end)
  end)
end)
