-- kubelua.sim.workloads.job: the Job controller of
-- kube-controller-manager, for the simulator. It runs up to parallelism
-- Pods at once (labels controller-uid and job-name) until completions of
-- them have Succeeded, replacing failed ones until more than backoffLimit
-- have Failed, and writes status.startTime, active, ready, succeeded,
-- failed, completionTime and the condition Complete, or Failed
-- (BackoffLimitExceeded: the active Pods deleted). Without completions,
-- the first Pod to succeed completes the Job once none is active.
-- completionMode Indexed: each index from 0 to completions - 1 gets its
-- Pod (generateName <job>-<index>-, annotation
-- batch.kubernetes.io/job-completion-index, hostname <job>-<index>, env
-- JOB_COMPLETION_INDEX from the annotation in each container), the lowest
-- pending indexes first, a failed one again; status.completedIndexes
-- lists the succeeded ones ("0-2,4,6,7": runs of three or more as
-- ranges), and the Job is Complete once every index has succeeded.
-- Suspend, activeDeadlineSeconds, pod failure policies and the delay
-- between retries are not simulated.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"

local ipairs, pairs, tonumber, tostring, max, min =
  ipairs, pairs, tonumber, tostring, math.max, math.min
local concat, sort = table.concat, table.sort
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

local INDEX = "batch.kubernetes.io/job-completion-index"

-- The completion index of a Pod, or nil.
local function index_of(pod)
  local a = pod.metadata.annotations
  local i = tonumber(is_object(a) and a[INDEX] or nil)
  if i and i >= 0 and i % 1 == 0 then return i end
  return nil
end

-- The indexes of "0-2,4" as a set.
local function parse_indexes(s, into)
  for part in tostring(s or ""):gmatch("[^,]+") do
    local a, b = part:match("^(%d+)%-(%d+)$")
    a, b = tonumber(a or part), tonumber(b or part)
    for i = a or 1, (a and b) or 0 do into[i] = true end
  end
  return into
end

-- A set of indexes as the controller writes it: "0-2,4,6,7".
local function format_indexes(set)
  local list = {}
  for i in pairs(set) do list[#list + 1] = i end
  sort(list)
  local out, k = {}, 1
  while k <= #list do
    local j = k
    while j < #list and list[j + 1] == list[j] + 1 do j = j + 1 end
    if j == k then
      out[#out + 1] = tostring(list[k])
    elseif j == k + 1 then
      out[#out + 1] = list[k] .. "," .. list[j]
    else
      out[#out + 1] = list[k] .. "-" .. list[j]
    end
    k = j + 1
  end
  return concat(out, ",")
end
_M.format_indexes = format_indexes

-- The Pod of index i of an Indexed Job.
local function indexed_pod(job, ns, labels, i)
  local pod = common.pod_from(job.spec.template, job, ns, nil, labels)
  local md = pod.metadata
  md.generateName = job.metadata.name .. "-" .. i .. "-"
  md.annotations = md.annotations or {}
  md.annotations[INDEX] = tostring(i)
  pod.spec.hostname = job.metadata.name .. "-" .. i
  for _, key in ipairs { "initContainers", "containers" } do
    for _, c in ipairs(json.is_array(pod.spec[key]) and pod.spec[key] or {}) do
      local env = json.is_array(c.env) and c.env or json.array {}
      local has = false
      for _, v in ipairs(env) do
        if v.name == "JOB_COMPLETION_INDEX" then has = true end
      end
      if not has then
        env[#env + 1] = { name = "JOB_COMPLETION_INDEX", valueFrom = { fieldRef = {
          fieldPath = "metadata.annotations['" .. INDEX .. "']" } } }
      end
      c.env = env
    end
  end
  return pod
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
  local indexed = spec.completionMode == "Indexed" and completions ~= nil
  local done = indexed and parse_indexes(old.completedIndexes, {}) or nil
  local running = {} -- index → true, for the active Pods of an Indexed Job
  local active, succeeded, failed, ready = {}, 0, 0, 0
  for _, pe in ipairs(common.owned_pods(s, e.ns, job.metadata.uid)) do
    local phase = is_object(pe.obj.status) and pe.obj.status.phase
    local i = indexed and index_of(pe.obj)
    if phase == "Succeeded" then
      succeeded = succeeded + 1
      if i and i < completions then done[i] = true end
    elseif phase == "Failed" then
      failed = failed + 1
    elseif not pe.obj.metadata.deletionTimestamp then
      active[#active + 1] = pe
      if i then running[i] = true end
      if common.is_ready(pe.obj) then ready = ready + 1 end
    end
  end
  if indexed then
    succeeded = 0
    for _ in pairs(done) do succeeded = succeeded + 1 end
  end
  -- counted Pods stay counted when they are deleted
  if not indexed then succeeded = max(succeeded, old.succeeded or 0) end
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
      local i = 0
      for _ = #active + 1, want do
        local pod
        if indexed then
          while done[i] or running[i] do i = i + 1 end
          if i >= completions then break end
          running[i] = true
          pod = indexed_pod(job, e.ns, labels, i)
        else
          pod = common.pod_from(spec.template, job, e.ns, nil, labels)
        end
        active[#active + 1] = common.create_pod(s, pod)
      end
    end
  end
  st.active = common.omit_zero(#active)
  st.succeeded = common.omit_zero(succeeded)
  st.failed = common.omit_zero(failed)
  st.ready = ready
  st.uncountedTerminatedPods = st.uncountedTerminatedPods or {}
  if indexed then
    local text = format_indexes(done)
    st.completedIndexes = text ~= "" and text or nil
  end
  common.write(s, e.res, e, obj)
end

function _M.new(store, defer)
  return common.new_owner(store, defer, { name = "job", kind = "Job", gv = "batch/v1",
    resource = "jobs", sync = sync })
end

return _M
