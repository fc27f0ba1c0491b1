-- The simulator's fake Nodes, scheduler and kubelets: Nodes as a
-- kubelet reports them, Pods bound by the scheduler and run through the
-- states a kubelet reports, delays and failures injected, graceful
-- deletion confirmed by the kubelet.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local support = require "spec.support"
local H = require "spec.integration.sim_helper"
local conditions = support.conditions

local function pod(name, spec, annotations)
  spec = spec or {}
  spec.containers = spec.containers or { { name = "c", image = "nginx" } }
  return { apiVersion = "v1", kind = "Pod",
    metadata = { name = name, namespace = "demo", annotations = annotations }, spec = spec }
end

local function phase_of(t, name, want)
  return t:eventually(function()
    local p = t:get("v1", "pods", "demo", name)
    return p and p.status and p.status.phase == want and p
  end)
end

describe("kubelua sim workloads: nodes, scheduler, kubelet", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("makes 3 Ready Nodes by default, as a kubelet reports them, and N on request", function()
    t = testing.start{}
    local nodes = t:eventually(function()
      local l = t:list("v1", "nodes")
      return #l == 3 and l
    end)
    assert.same({ "node-1", "node-2", "node-3" }, H.names({ items = nodes }))
    local n = nodes[1]
    assert.same({ { "MemoryPressure", "False", "KubeletHasSufficientMemory",
      "kubelet has sufficient memory available" },
      { "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure" },
      { "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available" },
      { "Ready", "True", "KubeletReady", "kubelet is posting ready status" } }, conditions(n))
    assert.same({ cpu = "32", memory = "256Gi", pods = "110" },
      n.status.capacity)
    assert.same(n.status.capacity, n.status.allocatable)
    assert.same({ { type = "InternalIP", address = "172.18.0.2" },
      { type = "Hostname", address = "node-1" } }, n.status.addresses)
    assert.same({ "v1.26.0", "linux", "amd64" }, { n.status.nodeInfo.kubeletVersion,
      n.status.nodeInfo.operatingSystem, n.status.nodeInfo.architecture })
    assert.equal("node-1", n.metadata.labels["kubernetes.io/hostname"])
    assert.equal("10.244.1.0/24", n.spec.podCIDR)
    t:stop()
    t = testing.start{ nodes = 5 }
    t:eventually(function() return #t:list("v1", "nodes") == 5 end)
    t:stop()
    t = testing.start{ nodes = 0, namespaces = { "demo" } }
    t:create(pod("p"))
    local p = t:eventually(function()
      local x = t:get("v1", "pods", "demo", "p")
      return x.status and x.status.conditions and x
    end)
    assert.same({ { "PodScheduled", "False", "Unschedulable",
      "no nodes available to schedule pods" } }, conditions(p))
    assert.same({}, t:list("v1", "nodes"))
  end)

  it("binds Pods to the Node with the fewest, honouring nodeSelector and nodeName", function()
    t = testing.start{ namespaces = { "demo" } }
    for i = 1, 3 do t:create(pod("p" .. i)) end
    local on = {}
    for i = 1, 3 do
      local p = phase_of(t, "p" .. i, "Running")
      on[#on + 1] = p.spec.nodeName
    end
    table.sort(on)
    assert.same({ "node-1", "node-2", "node-3" }, on)
    t:create(pod("sel", { nodeSelector = { ["kubernetes.io/hostname"] = "node-2" } }))
    t:create(pod("named", { nodeName = "node-3" }))
    assert.equal("node-2", phase_of(t, "sel", "Running").spec.nodeName)
    assert.equal("node-3", phase_of(t, "named", "Running").spec.nodeName)
    t:create(pod("nowhere", { nodeSelector = { disk = "ssd" } }))
    local p = t:eventually(function()
      local x = t:get("v1", "pods", "demo", "nowhere")
      return x.status and x.status.conditions and x
    end)
    assert.same({ { "PodScheduled", "False", "Unschedulable", "0/3 nodes are available: 3 "
      .. "node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are "
      .. "available: 3 Preemption is not helpful for scheduling.." } }, conditions(p))
    assert.equal("Pending", p.status.phase)
    assert.is_nil(p.spec.nodeName)
    -- a Node that comes to fit lets it be bound
    local n = t:get("v1", "nodes", nil, "node-1")
    n.metadata.labels.disk = "ssd"
    t:update(n)
    assert.equal("node-1", phase_of(t, "nowhere", "Running").spec.nodeName)
  end)

  it("runs a Pod: Running and Ready, with its containers' statuses", function()
    t = testing.start{ namespaces = { "demo" }, nodes = 1 }
    t:create(pod("web", { containers = { { name = "b", image = "example.com/app:v2" },
      { name = "a", image = "nginx" } } }))
    local p = phase_of(t, "web", "Running")
    assert.same({ { "Initialized", "True" }, { "Ready", "True" }, { "ContainersReady", "True" },
      { "PodScheduled", "True" } }, conditions(p))
    assert.same({ "172.18.0.2", "10.244.1.2", { { ip = "10.244.1.2" } }, "BestEffort" },
      { p.status.hostIP, p.status.podIP, p.status.podIPs, p.status.qosClass })
    assert.is_string(p.status.startTime)
    local cs = p.status.containerStatuses
    assert.same({ "a", "b" }, { cs[1].name, cs[2].name }) -- by name, as the kubelet sorts them
    assert.same({ "docker.io/library/nginx:latest", "example.com/app:v2" },
      { cs[1].image, cs[2].image })
    assert.matches("^docker%.io/library/nginx@sha256:%x+$", cs[1].imageID)
    assert.matches("^containerd://" .. ("%x"):rep(64) .. "$", cs[1].containerID)
    assert.same({ true, true, 0, {}, p.status.startTime },
      { cs[1].ready, cs[1].started, cs[1].restartCount, cs[1].lastState,
        cs[1].state.running.startedAt })
  end)

  it("ends a Pod that does not restart after run_time: Succeeded, or Failed as fail says",
    function()
      t = testing.start{ namespaces = { "demo" },
        pods = { fail = function(p) return p.metadata.name == "bad" end } }
      t:create(pod("good", { restartPolicy = "Never" }))
      t:create(pod("bad", { restartPolicy = "Never" }))
      t:create(pod("ann", { restartPolicy = "OnFailure" }, { ["sim.kubelua.io/fail"] = "true" }))
      local good = phase_of(t, "good", "Succeeded")
      assert.same({ { "Initialized", "True", "PodCompleted" },
        { "Ready", "False", "PodCompleted" }, { "ContainersReady", "False", "PodCompleted" },
        { "PodScheduled", "True" } }, conditions(good))
      local term = good.status.containerStatuses[1].state.terminated
      assert.same({ 0, "Completed" }, { term.exitCode, term.reason })
      for _, name in ipairs { "bad", "ann" } do
        local bad = phase_of(t, name, "Failed")
        assert.same({ "Ready", "False", "PodFailed" }, conditions(bad)[2])
        term = bad.status.containerStatuses[1].state.terminated
        assert.same({ 1, "Error" }, { term.exitCode, term.reason })
      end
    end)

  it("crash-loops a failing Pod that restarts: Running, not Ready", function()
    t = testing.start{ namespaces = { "demo" }, pods = { fail = function() return true end } }
    t:create(pod("loop"))
    local p = phase_of(t, "loop", "Running")
    local why = "containers with unready status: [c]"
    assert.same({ { "Initialized", "True" }, { "Ready", "False", "ContainersNotReady", why },
      { "ContainersReady", "False", "ContainersNotReady", why }, { "PodScheduled", "True" } },
      conditions(p))
    local cs = p.status.containerStatuses[1]
    assert.same({ false, 1, "CrashLoopBackOff", 1 }, { cs.ready, cs.restartCount,
      cs.state.waiting.reason, cs.lastState.terminated.exitCode })
  end)

  it("waits start_delay and run_time, from the options or the Pod's annotations", function()
    -- 60 s: only the annotation's 0 can start or end a Pod within the spec
    t = testing.start{ namespaces = { "demo" }, pods = { start_delay = 60, run_time = 60 } }
    t:create(pod("slow", { restartPolicy = "Never" }))
    t:create(pod("quick", { restartPolicy = "Never" }, { ["sim.kubelua.io/start-delay"] = "0",
      ["sim.kubelua.io/run-time"] = "0" }))
    t:create(pod("runs", { restartPolicy = "Never" }, { ["sim.kubelua.io/start-delay"] = "0" }))
    phase_of(t, "quick", "Succeeded")
    phase_of(t, "runs", "Running")
    local slow = t:get("v1", "pods", "demo", "slow")
    assert.same({ "Pending", "PodScheduled" }, { slow.status.phase, slow.status.conditions[1].type })
    kube.sleep(0.3)
    assert.equal("Running", t:get("v1", "pods", "demo", "runs").status.phase)
  end)

  it("deletes a Pod on a Node gracefully; its kubelet confirms", function()
    t = testing.start{ namespaces = { "demo" }, pods = { stop_delay = 60 } }
    t:create(pod("p", { terminationGracePeriodSeconds = 45 }))
    phase_of(t, "p", "Running")
    local gone = assert(kube.delete("v1", "pods", "demo", "p"))
    assert.same({ 45, true }, { gone.metadata.deletionGracePeriodSeconds,
      gone.metadata.deletionTimestamp ~= nil })
    kube.sleep(0.3) -- the kubelet confirms only after stop_delay (60 s)
    assert.equal(45, t:get("v1", "pods", "demo", "p").metadata.deletionGracePeriodSeconds)
    -- a shorter grace period shortens it; 0 deletes at once
    local again = assert(kube.delete("v1", "pods", "demo", "p", { grace_period_seconds = 10 }))
    assert.equal(10, again.metadata.deletionGracePeriodSeconds)
    assert(kube.delete("v1", "pods", "demo", "p", { grace_period_seconds = 0 }))
    assert.is_nil(t:get("v1", "pods", "demo", "p"))
    t:stop()
    t = testing.start{ namespaces = { "demo" } }
    t:create(pod("q"))
    phase_of(t, "q", "Running")
    local q = assert(kube.delete("v1", "pods", "demo", "q"))
    assert.equal(30, q.metadata.deletionGracePeriodSeconds)
    t:eventually(function() return t:get("v1", "pods", "demo", "q") == nil end)
    -- without kubelets, a Pod goes at once, as it always did
    t:stop()
    t = testing.start{ namespaces = { "demo" }, controllers = { kubelet = false } }
    t:create(pod("r"))
    t:eventually(function() return t:get("v1", "pods", "demo", "r").spec.nodeName end)
    assert(kube.delete("v1", "pods", "demo", "r"))
    assert.is_nil(t:get("v1", "pods", "demo", "r"))
  end)

  it("makes its Nodes again, and runs Pods again, after a store reset", function()
    t = testing.start{ nodes = 2 }
    t:eventually(function() return #t:list("v1", "nodes") == 2 end)
    t.sim:inject{ reset = true }
    t:eventually(function() return #t:list("v1", "nodes") == 2 end)
    t:namespace("demo")
    t:create(pod("after"))
    assert.equal("node-1", phase_of(t, "after", "Running").spec.nodeName)
  end)

  it("empties a deleted namespace of running Pods once their kubelets confirm", function()
    t = testing.start{ namespaces = { "demo" } }
    t:create(pod("a"))
    t:create(pod("b"))
    phase_of(t, "a", "Running")
    phase_of(t, "b", "Running")
    t:delete("v1", "namespaces", nil, "demo")
    t:eventually(function() return t:get("v1", "namespaces", nil, "demo") == nil end)
  end)

  it("turns the scheduler and the kubelets off by name", function()
    t = testing.start{ namespaces = { "demo" }, controllers = { scheduler = false } }
    t:create(pod("p"))
    t:create(pod("n", { nodeName = "node-1" }))
    phase_of(t, "n", "Running")
    local p = t:get("v1", "pods", "demo", "p")
    assert.same({ nil, "Pending" }, { p.spec.nodeName, p.status.phase })
    t:stop()
    t = testing.start{ namespaces = { "demo" }, controllers = { nodes = false } }
    kube.sleep(0.2)
    assert.same({}, t:list("v1", "nodes"))
  end)

  it("refuses bad nodes and pods options, naming what was wrong", function()
    support.raises("kubelua.testing: start: sim: nodes must be a whole number from 0 to 250 "
      .. "or a table { count, allocatable }, "
      .. "got -1", function() testing.start{ nodes = -1 } end)
    support.raises("kubelua.testing: start: sim: pods.start_delay must be a number of seconds, "
      .. "at least 0, got string", function() testing.start{ pods = { start_delay = "1" } } end)
    support.raises("kubelua.testing: start: sim: pods.fail must be a function, got boolean",
      function() testing.start{ pods = { fail = true } } end)
    support.raises("kubelua.testing: start: sim: unknown pods option delay (known: fail, "
      .. "run_time, start_delay, stop_delay)", function() testing.start{ pods = { delay = 1 } } end)
  end)

  it("kubelua sim --nodes N makes N Nodes", function()
    local sim = H.start("--nodes 2")
    local list
    for _ = 1, 200 do
      local _, l = H.api(sim, "GET", "/api/v1/nodes")
      list = l
      if #list.items == 2 then break end
      H.sleep(0.02)
    end
    H.stop(sim)
    assert.same({ "node-1", "node-2" }, H.names(list))
    local status, out = support.sh(support.kubelua .. " sim --nodes many 2>&1")
    assert.same({ 2, "kubelua sim: --nodes needs a whole number of Nodes from 0 to 250, got many" },
      { status, out:match("^[^\n]*") })
  end)

  it("kubelua run --sim --sim-nodes N gives the script's simulator N Nodes", function()
    local script = [[
      local kube = require "kubelua"
      kube.spawn(function()
        local deadline, n = kube.monotonic() + 10, 0
        repeat
          kube.sleep(0.02)
          n = #assert(kube.list("v1", "nodes")).items
        until n > 0 or kube.monotonic() > deadline
        print("nodes: " .. n)
        kube.stop()
      end)
    ]]
    local status, out = support.run_script(script, "", "--sim --sim-nodes 5")
    assert.same({ 0, "nodes: 5" }, { status, out:match("nodes: %d+") })
    status, out = support.run_script(script, "", "--sim")
    assert.same({ 0, "nodes: 3" }, { status, out:match("nodes: %d+") })
    status, out = support.run_script(script, "", "--sim --sim-nodes 1x")
    assert.same({ 2, 'kubelua: --sim-nodes needs a whole number of Nodes from 0 to 250, got "1x"' },
      { status, out:match("^[^\n]*") })
    status, out = support.run_script(script, "", "--sim-nodes 1")
    assert.same({ 2, "kubelua: --sim-nodes needs --sim" }, { status, out:match("^[^\n]*") })
  end)
end)
