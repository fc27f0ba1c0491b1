-- kubelua.sim.workloads.job: the Job controller of
-- kube-controller-manager, for the simulator. It runs up to parallelism
-- Pods at once (labels controller-uid and job-name) until completions of
-- them have Succeeded, replacing failed ones until more than backoffLimit
-- have Failed, and writes status.startTime, active, ready, succeeded,
-- failed, completionTime and the condition Complete, or Failed
-- (BackoffLimitExceeded: the active Pods deleted). Without completions,
-- the first Pod to succeed completes the Job once none is active.
-- Indexed completion, suspend, activeDeadlineSeconds, pod failure
-- policies and the delay between retries are not simulated.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"

local ipairs, max, min = ipairs, math.max, math.min
local copy, null = util.copy, json.null
local is_object = common.is_object

local _M = {}

local function has_condition(status, ctype)
  for _, c in ipairs(is_object(status) and json.is_array(status.conditions)
      and status.conditions or {}) do
    if c.type == ctype and c.status == "True" then return true end
  end
  return false
end

local function condition(ctype, reason, message)
  local now = util.timestamp()
  return { type = ctype, status = "True", lastProbeTime = now, lastTransitionTime = now,
    reason = reason, message = message }
end

local function sync(self, e)
  local s = self.store
  local job = e.obj
  local spec = is_object(job.spec) and job.spec or {}
  local old = is_object(job.status) and job.status or {}
  local finished = has_condition(old, "Complete") or has_condition(old, "Failed")
  local parallelism = common.count(spec.parallelism, 1)
  local completions = spec.completions
  if completions == nil or completions == null then
    completions = spec.parallelism == nil and 1 or nil
  end
  local backoff = common.count(spec.backoffLimit, 6)
  local active, succeeded, failed, ready = {}, 0, 0, 0
  for _, pe in ipairs(common.owned_pods(s, e.ns, job.metadata.uid)) do
    local phase = is_object(pe.obj.status) and pe.obj.status.phase
    if phase == "Succeeded" then
      succeeded = succeeded + 1
    elseif phase == "Failed" then
      failed = failed + 1
    elseif not pe.obj.metadata.deletionTimestamp then
      active[#active + 1] = pe
      if common.is_ready(pe.obj) then ready = ready + 1 end
    end
  end
  -- counted Pods stay counted when they are deleted
  succeeded = max(succeeded, old.succeeded or 0)
  failed = max(failed, old.failed or 0)
  local obj = copy(job)
  local st = is_object(obj.status) and obj.status or {}
  obj.status = st
  local now = util.timestamp()
  st.startTime = st.startTime or now
  if not finished and not job.metadata.deletionTimestamp then
    if failed > backoff then
      for _, pe in ipairs(active) do common.delete_pod(s, pe) end
      active, ready = {}, 0
      st.conditions = common.set_condition(st.conditions, condition("Failed",
        "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
    elseif (completions and succeeded >= completions)
        or (not completions and succeeded > 0 and #active == 0) then
      st.conditions = common.set_condition(st.conditions, condition("Complete"))
      st.completionTime = now
    else
      local want = completions and min(parallelism, completions - succeeded) or parallelism
      if not completions and succeeded > 0 then want = 0 end
      local labels = { ["controller-uid"] = job.metadata.uid, ["job-name"] = job.metadata.name }
      for _ = #active + 1, want do
        active[#active + 1] = common.create_pod(s, common.pod_from(spec.template, job, e.ns,
          nil, labels))
      end
    end
  end
  st.active = common.omit_zero(#active)
  st.succeeded = common.omit_zero(succeeded)
  st.failed = common.omit_zero(failed)
  st.ready = ready
  st.uncountedTerminatedPods = st.uncountedTerminatedPods or {}
  common.write(s, e.res, e, obj)
end

function _M.new(store, defer)
  return common.new_owner(store, defer, { name = "job", kind = "Job", gv = "batch/v1",
    resource = "jobs", sync = sync })
end

return _M
