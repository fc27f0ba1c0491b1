-- kubelua.sim.workloads.replicaset: the ReplicaSet controller of
-- kube-controller-manager, for the simulator. It keeps spec.replicas
-- active Pods (not ended, not being deleted) made from the template, each
-- owned by the ReplicaSet (controller, blockOwnerDeletion) and named from
-- it, deleting the least advanced first when there are too many, and
-- writes status.replicas, fullyLabeledReplicas, readyReplicas,
-- availableReplicas (ready for minReadySeconds) and observedGeneration.
-- Pods it does not own are not adopted.

local kube = require "kubelua"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"

local pairs, ipairs, sort = pairs, ipairs, table.sort
local copy = util.copy
local is_object = common.is_object

local _M = {}

-- How far a Pod has come, for choosing which to delete first: unbound,
-- then Pending, then not ready, then the newest.
local function rank(e)
  local pod = e.obj
  local bound = is_object(pod.spec) and pod.spec.nodeName and 1 or 0
  local running = is_object(pod.status) and pod.status.phase == "Running" and 1 or 0
  local ready = common.is_ready(pod) and 1 or 0
  return bound, running, ready
end

local function delete_first(a, b)
  local ab, ar, ay = rank(a)
  local bb, br, by = rank(b)
  if ab ~= bb then return ab < bb end
  if ar ~= br then return ar < br end
  if ay ~= by then return ay < by end
  local at, bt = a.obj.metadata.creationTimestamp, b.obj.metadata.creationTimestamp
  if at ~= bt then return at > bt end
  return a.name > b.name
end

-- Whether a ready pod has been ready for min seconds; when not yet, in
-- how many seconds it will have been.
function _M.available(pod, min)
  if not common.is_ready(pod) then return false end
  if (min or 0) <= 0 then return true end
  local since = common.seconds(common.pod_condition(pod, "Ready").lastTransitionTime)
  local left = since and since + min - os.time() or 0
  if left <= 0 then return true end
  return false, left
end

local function labeled(pod, labels)
  local have = pod.metadata.labels
  for k, v in pairs(is_object(labels) and labels or {}) do
    if not (is_object(have) and have[k] == v) then return false end
  end
  return true
end

local function sync(self, e)
  local s = self.store
  local rs = e.obj
  -- one written straight into the store without a template (the
  -- benchmarks' stand-in owners) has nothing to make Pods from
  if not (is_object(rs.spec) and is_object(rs.spec.template)) then return end
  local spec = rs.spec
  local uid = rs.metadata.uid
  local active = {}
  for _, pe in ipairs(common.owned_pods(s, e.ns, uid)) do
    if common.is_active(pe.obj) then active[#active + 1] = pe end
  end
  local want = common.count(spec.replicas, 1)
  if not rs.metadata.deletionTimestamp then
    if #active < want then
      for _ = #active + 1, want do
        active[#active + 1] = common.create_pod(s, common.pod_from(spec.template, rs, e.ns))
      end
    elseif #active > want then
      sort(active, delete_first)
      for i = 1, #active - want do common.delete_pod(s, active[i]) end
      local keep = {}
      for i = #active - want + 1, #active do keep[#keep + 1] = active[i] end
      active = keep
    end
  end
  local tlabels = is_object(spec.template) and is_object(spec.template.metadata)
    and spec.template.metadata.labels
  local full, ready, avail, wait = 0, 0, 0, nil
  for _, pe in ipairs(active) do
    local pod = pe.obj
    if labeled(pod, tlabels) then full = full + 1 end
    if common.is_ready(pod) then ready = ready + 1 end
    local ok, left = _M.available(pod, spec.minReadySeconds)
    if ok then avail = avail + 1 elseif left and (not wait or left < wait) then wait = left end
  end
  if wait then kube.after(wait, function() self:note(e.key) end) end
  local obj = copy(rs)
  local st = is_object(obj.status) and obj.status or {}
  obj.status = st
  st.replicas = #active
  st.fullyLabeledReplicas = common.omit_zero(full)
  st.readyReplicas = common.omit_zero(ready)
  st.availableReplicas = common.omit_zero(avail)
  st.observedGeneration = rs.metadata.generation
  common.write(s, e.res, e, obj)
end

function _M.new(store, defer)
  return common.new_owner(store, defer, { name = "replicaset", kind = "ReplicaSet",
    gv = "apps/v1", resource = "replicasets", sync = sync })
end

return _M
