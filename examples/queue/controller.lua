-- A first controller: no cluster needed.
--
-- A small in-memory "cluster" holds apps, each with a desired and an actual
-- replica count. A feeder adds each app's key to a workqueue; two workers
-- reconcile: they move the actual count one step toward the desired one and
-- ask to be requeued until they match. One app's reconcile fails twice on
-- purpose, to show the rate-limited retry. When every app has converged, the
-- controller stops.
--
--   kubelua run examples/queue/controller.lua
local kube = require "kubelua"

local cluster = {
  ["default/web"] = { desired = 3, actual = 0 },
  ["default/api"] = { desired = 2, actual = 0 },
  ["batch/report"] = { desired = 1, actual = 0 },
  ["batch/flaky"] = { desired = 1, actual = 0, failures_left = 2 },
}

local q = kube.workqueue("apps")

-- Every app has been seen in sync by a reconcile (not merely scaled: its
-- confirming pass may still be waiting in the queue).
local function converged()
  for _, app in pairs(cluster) do
    if not app.confirmed then return false end
  end
  return true
end

local function reconcile(key)
  local app = cluster[key]
  if not app then return end -- deleted meanwhile: nothing to do
  if app.failures_left and app.failures_left > 0 then
    app.failures_left = app.failures_left - 1
    return nil, "backend unavailable (" .. app.failures_left .. " more failures to come)"
  end
  if app.actual == app.desired then
    app.confirmed = true
    kube.log.info("in sync", { key = key, replicas = app.actual })
    if converged() then
      kube.log.info("all apps converged, stopping")
      kube.stop()
    end
    return
  end
  kube.sleep(0.05) -- an API call would yield here
  app.confirmed = false
  app.actual = app.actual + (app.desired > app.actual and 1 or -1)
  kube.log.info("scaled", { key = key, actual = app.actual, desired = app.desired })
  return kube.requeue_after(0.1)
end

kube.workers(q, 2, reconcile)

for key in pairs(cluster) do
  kube.log.info("enqueue", { key = key })
  q:add(key)
end
