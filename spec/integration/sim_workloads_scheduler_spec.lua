-- The simulator's scheduler against Nodes' taints and allocatable
-- resources, as kube-scheduler 1.26 filters and words it: NoSchedule and
-- NoExecute taints keep untolerating Pods off, PreferNoSchedule ones only
-- when another Node fits, requests must fit beside the Pods already
-- bound, the Unschedulable message counts each Node's reason; a NoExecute
-- taint evicts the Pods that do not tolerate it (the taint manager).
local testing = require "kubelua.testing"
local support = require "spec.support"

local function pod(name, cpu, tolerations)
  return { apiVersion = "v1", kind = "Pod", metadata = { name = name, namespace = "demo" },
    spec = { tolerations = tolerations, containers = { { name = "c", image = "nginx",
      resources = cpu and { requests = { cpu = cpu } } or nil } } } }
end

local function node_of(t, name)
  return t:eventually(function()
    local p = t:get("v1", "pods", "demo", name)
    return p and p.spec.nodeName
  end)
end

-- The PodScheduled condition of Pod name once the scheduler has said it
-- cannot place it.
local function unschedulable(t, name)
  return t:eventually(function()
    local p = t:get("v1", "pods", "demo", name)
    for _, c in ipairs(p and p.status and p.status.conditions or {}) do
      if c.type == "PodScheduled" and c.status == "False" then return c end
    end
    return false
  end)
end

local function taint(t, node, taints)
  local n = t:get("v1", "nodes", nil, node)
  n.spec.taints = taints
  return t:update(n)
end

describe("kubelua sim workloads: scheduler", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("fits requests beside the bound Pods into allocatable: Insufficient cpu, then room",
      function()
    t = testing.start{ namespaces = { "demo" }, nodes = { count = 3, allocatable = { cpu = "2" } } }
    assert.same({ cpu = "2", memory = "256Gi", pods = "110" },
      t:get("v1", "nodes", nil, "node-1").status.allocatable)
    local seen = {}
    for i = 1, 3 do seen[node_of(t, t:create(pod("p" .. i, "1500m")).metadata.name)] = true end
    assert.same({ ["node-1"] = true, ["node-2"] = true, ["node-3"] = true }, seen)
    t:create(pod("late", "600m"))
    local c = unschedulable(t, "late")
    assert.same({ "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu. preemption: "
      .. "0/3 nodes are available: 3 No preemption victims found for incoming pod.." },
      { c.reason, c.message })
    assert.equal("Pending", t:get("v1", "pods", "demo", "late").status.phase)
    -- a Pod that asks for nothing still fits
    assert.is_string(node_of(t, t:create(pod("free")).metadata.name))
    local gone = t:get("v1", "pods", "demo", "p2").spec.nodeName
    t:delete("v1", "pods", "demo", "p2", { gracePeriodSeconds = 0 })
    assert.equal(gone, node_of(t, "late"))
  end)

  it("counts one Pod more against allocatable pods: Too many pods", function()
    t = testing.start{ namespaces = { "demo" }, nodes = { count = 1, allocatable = { pods = "2" } } }
    node_of(t, t:create(pod("a")).metadata.name)
    node_of(t, t:create(pod("b")).metadata.name)
    t:create(pod("c"))
    assert.equal("0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are "
      .. "available: 1 No preemption victims found for incoming pod..",
      unschedulable(t, "c").message)
  end)

  it("keeps untolerating Pods off tainted Nodes, each Node's reason counted", function()
    t = testing.start{ namespaces = { "demo" }, nodes = { count = 3, allocatable = { cpu = "1" } } }
    local gpu = { key = "dedicated", value = "gpu", effect = "NoSchedule" }
    taint(t, "node-1", { gpu })
    taint(t, "node-2", { { key = "dedicated", value = "gpu", effect = "NoExecute" } })
    t:create(pod("big", "2"))
    local c = unschedulable(t, "big")
    assert.equal("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint "
      .. "{dedicated: gpu}. preemption: 0/3 nodes are available: 1 No preemption victims found "
      .. "for incoming pod, 2 Preemption is not helpful for scheduling..", c.message)
    -- tolerated by key and value, by Exists, or by an empty key
    t:create(pod("equal", "500m", { { key = "dedicated", operator = "Equal", value = "gpu",
      effect = "NoSchedule" } }))
    t:create(pod("exists", "500m", { { key = "dedicated", operator = "Exists" } }))
    assert.is_true(node_of(t, "equal") == "node-1" or node_of(t, "equal") == "node-3")
    assert.is_string(node_of(t, "exists"))
    t:create(pod("wrong-value", nil, { { key = "dedicated", value = "cpu" } }))
    assert.equal("node-3", node_of(t, "wrong-value"))
    -- a Node freed of its taints takes the waiting Pod's turn again; the
    -- message names the first untolerated taint, an empty value as such
    taint(t, "node-3", { { key = "maintenance", effect = "NoSchedule" } })
    t:create(pod("any", "100m"))
    assert.equal("0/3 nodes are available: 1 node(s) had untolerated taint {maintenance: }, "
      .. "2 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/3 nodes are "
      .. "available: 3 Preemption is not helpful for scheduling..", unschedulable(t, "any").message)
    taint(t, "node-3", nil)
    assert.equal("node-3", node_of(t, "any"))
  end)

  it("places Pods off Nodes with untolerated PreferNoSchedule taints while another fits",
      function()
    t = testing.start{ namespaces = { "demo" } }
    local prefer = { { key = "spot", value = "true", effect = "PreferNoSchedule" } }
    taint(t, "node-1", prefer)
    taint(t, "node-2", prefer)
    for i = 1, 3 do
      assert.equal("node-3", node_of(t, t:create(pod("p" .. i)).metadata.name))
    end
    t:create(pod("tolerant", nil, { { key = "spot", operator = "Exists" } }))
    assert.equal("node-1", node_of(t, "tolerant"))
  end)

  it("evicts the Pods a new NoExecute taint is not tolerated by, as the taint manager does",
      function()
    -- a kubelet slow to confirm keeps the evicted Pod readable
    t = testing.start{ namespaces = { "demo" }, nodes = 1, pods = { stop_delay = 60 } }
    t:create(pod("plain"))
    t:create(pod("hour", nil, { { key = "evict", operator = "Exists", effect = "NoExecute",
      tolerationSeconds = 3600 } }))
    t:create(pod("always", nil, { { key = "evict", operator = "Exists" } }))
    for _, n in ipairs { "plain", "hour", "always" } do node_of(t, n) end
    taint(t, "node-1", { { key = "evict", value = "now", effect = "NoExecute" } })
    local p = t:eventually(function()
      local x = t:get("v1", "pods", "demo", "plain")
      return x.metadata.deletionTimestamp and x
    end)
    local cond
    for _, c in ipairs(p.status.conditions) do
      if c.type == "DisruptionTarget" then cond = c end
    end
    assert.same({ "True", "DeletionByTaintManager",
      "Taint manager: deleting due to NoExecute taint" }, { cond.status, cond.reason,
      cond.message })
    assert.equal(30, p.metadata.deletionGracePeriodSeconds)
    assert.is_nil(t:get("v1", "pods", "demo", "hour").metadata.deletionTimestamp)
    assert.is_nil(t:get("v1", "pods", "demo", "always").metadata.deletionTimestamp)
  end)

  it("runs a DaemonSet's Pods on the Nodes whose taints they tolerate, cordoned ones too",
      function()
    t = testing.start{ namespaces = { "demo" } }
    taint(t, "node-1", { { key = "dedicated", value = "gpu", effect = "NoSchedule" } })
    local n2 = t:get("v1", "nodes", nil, "node-2")
    n2.spec.unschedulable = true
    t:update(n2)
    t:create{ apiVersion = "apps/v1", kind = "DaemonSet", metadata = { name = "agent",
      namespace = "demo" }, spec = { selector = { matchLabels = { app = "agent" } },
        template = { metadata = { labels = { app = "agent" } }, spec = {
          containers = { { name = "c", image = "agent" } } } } } }
    local ds = t:eventually(function()
      local x = t:get("apps/v1", "daemonsets", "demo", "agent")
      return x.status.numberReady == 2 and x
    end)
    assert.same({ 2, 2, 0 }, { ds.status.desiredNumberScheduled,
      ds.status.currentNumberScheduled, ds.status.numberMisscheduled })
    local on = {}
    for _, p in ipairs(support.live_pods(t, "demo")) do
      on[#on + 1] = p.spec.nodeName
      assert.same({
        { key = "node.kubernetes.io/not-ready", operator = "Exists", effect = "NoExecute" },
        { key = "node.kubernetes.io/unreachable", operator = "Exists", effect = "NoExecute" },
        { key = "node.kubernetes.io/disk-pressure", operator = "Exists", effect = "NoSchedule" },
        { key = "node.kubernetes.io/memory-pressure", operator = "Exists",
          effect = "NoSchedule" },
        { key = "node.kubernetes.io/pid-pressure", operator = "Exists", effect = "NoSchedule" },
        { key = "node.kubernetes.io/unschedulable", operator = "Exists", effect = "NoSchedule" },
      }, p.spec.tolerations)
    end
    table.sort(on)
    assert.same({ "node-2", "node-3" }, on)
  end)

  it("refuses bad nodes options, naming what was wrong", function()
    support.raises("kubelua.testing: start: sim: unknown nodes option size (known: allocatable, "
      .. "count)", function() testing.start{ nodes = { size = 2 } } end)
    support.raises("kubelua.testing: start: sim: nodes.count must be a whole number from 0 to "
      .. "250, got 2.5", function() testing.start{ nodes = { count = 2.5 } } end)
    support.raises('kubelua.testing: start: sim: nodes.allocatable.cpu must be a quantity ("4", '
      .. '"500m", "16Gi"), got lots', function()
        testing.start{ nodes = { allocatable = { cpu = "lots" } } }
      end)
  end)
end)
