-- The simulator's Job controller with completionMode Indexed: one Pod per
-- completion index (its name, annotation, hostname and environment as
-- kube-controller-manager 1.26 makes them), a failed index run again, and
-- status.completedIndexes in the controller's compressed form.
local testing = require "kubelua.testing"
local job_controller = require "kubelua.sim.workloads.job"
local support = require "spec.support"
local conditions = support.conditions

local INDEX = "batch.kubernetes.io/job-completion-index"

local function job(name, spec)
  spec.completionMode = "Indexed"
  spec.template = { spec = { restartPolicy = "Never", containers = {
    { name = "c", image = "busybox", env = { { name = "A", value = "1" } } },
    { name = "d", image = "busybox", env = { { name = "JOB_COMPLETION_INDEX", value = "x" } } } },
    initContainers = { { name = "i", image = "busybox" } } } }
  return { apiVersion = "batch/v1", kind = "Job", metadata = { name = name, namespace = "demo" },
    spec = spec }
end

local function index_of(pod)
  return tonumber(pod.metadata.annotations[INDEX])
end

describe("kubelua sim workloads: Indexed Job", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("starts the lowest pending indexes, parallelism at a time", function()
    t = testing.start{ namespaces = { "demo" }, pods = { run_time = 60 } }
    t:create(job("slow", { completions = 4, parallelism = 2 }))
    local j = t:eventually(function()
      local x = t:get("batch/v1", "jobs", "demo", "slow")
      return x.status.ready == 2 and x
    end)
    assert.same({ 2, nil, nil }, { j.status.active, j.status.succeeded,
      j.status.completedIndexes })
    local started = {}
    for _, p in ipairs(t:list("v1", "pods", "demo")) do started[#started + 1] = index_of(p) end
    table.sort(started)
    assert.same({ 0, 1 }, started)
  end)

  it("runs one Pod per index, named and set up for it, until each succeeded: Complete",
      function()
    t = testing.start{ namespaces = { "demo" }, pods = { run_time = 0.1 } }
    t:create(job("idx", { completions = 4, parallelism = 2 }))
    local done = t:eventually(function()
      local x = t:get("batch/v1", "jobs", "demo", "idx")
      return x.status.completionTime and x
    end, 20)
    assert.same({ "0-3", 4 }, { done.status.completedIndexes, done.status.succeeded })
    assert.same({ { "Complete", "True" } }, conditions(done))
    local seen = {}
    for _, p in ipairs(t:list("v1", "pods", "demo")) do
      local i = index_of(p)
      seen[#seen + 1] = i
      assert.matches("^idx%-" .. i .. "%-%w%w%w%w%w$", p.metadata.name)
      assert.equal("idx-" .. i .. "-", p.metadata.generateName)
      assert.equal("idx-" .. i, p.spec.hostname)
      local from = { fieldRef = { apiVersion = "v1",
        fieldPath = "metadata.annotations['batch.kubernetes.io/job-completion-index']" } }
      assert.same({ { name = "A", value = "1" }, { name = "JOB_COMPLETION_INDEX",
        valueFrom = from } }, p.spec.containers[1].env)
      assert.same({ { name = "JOB_COMPLETION_INDEX", value = "x" } }, p.spec.containers[2].env)
      assert.same({ { name = "JOB_COMPLETION_INDEX", valueFrom = from } },
        p.spec.initContainers[1].env)
      assert.equal("Succeeded", p.status.phase)
    end
    table.sort(seen)
    assert.same({ 0, 1, 2, 3 }, seen)
  end)

  it("runs a failed index again and lists the succeeded ones as the controller does",
      function()
    local failures = 0
    t = testing.start{ namespaces = { "demo" }, pods = { run_time = 0.2, fail = function(pod)
      local i = tonumber(pod.metadata.annotations[INDEX])
      if i == 3 or i == 5 then
        failures = failures + 1
        return true
      end
      return false
    end } }
    t:create(job("gaps", { completions = 8, parallelism = 8, backoffLimit = 1000 }))
    local x = t:eventually(function()
      local j = t:get("batch/v1", "jobs", "demo", "gaps")
      return j.status.completedIndexes == "0-2,4,6,7" and (j.status.failed or 0) >= 2 and j
    end, 20)
    assert.equal(6, x.status.succeeded)
    assert.is_nil(x.status.conditions)
    -- each failed index has a new Pod of its own
    t:eventually(function()
      local live = {}
      for _, p in ipairs(t:list("v1", "pods", "demo")) do
        if p.status.phase ~= "Succeeded" and p.status.phase ~= "Failed" then
          live[#live + 1] = index_of(p)
        end
      end
      table.sort(live)
      return #live == 2 and live[1] == 3 and live[2] == 5
    end, 20)
    assert.is_true(failures >= 2)
  end)

  it("writes completed indexes as ranges of three or more, pairs and singles", function()
    local f = job_controller.format_indexes
    assert.same({ "", "0", "0,1", "0-2,4,6,7", "1,3-5,9" }, { f({}), f({ [0] = true }),
      f({ [0] = true, [1] = true }),
      f({ [0] = true, [1] = true, [2] = true, [4] = true, [6] = true, [7] = true }),
      f({ [1] = true, [3] = true, [4] = true, [5] = true, [9] = true }) })
  end)
end)
