-- kubelua.sim.workloads.statefulset: the StatefulSet controller of
-- kube-controller-manager, for the simulator. Pods <name>-0, <name>-1 …
-- (labels controller-revision-hash and statefulset.kubernetes.io/
-- pod-name, hostname and subdomain set) are made in order and, for
-- podManagementPolicy OrderedReady, each once the ones before it are
-- Running and Ready; extra ones go from the highest ordinal down; a
-- template change (RollingUpdate) replaces the Pods from the highest
-- ordinal down to the partition, one at a time. A failed or succeeded Pod
-- is replaced. status: replicas, readyReplicas, currentReplicas,
-- updatedReplicas, availableReplicas, currentRevision, updateRevision,
-- collisionCount, observedGeneration. Each template is kept as a
-- ControllerRevision <name>-<hash> (label controller.kubernetes.io/hash,
-- revision numbers counting up, the history beyond revisionHistoryLimit
-- deleted but for the revisions in use), whose name the Pods carry in
-- their controller-revision-hash label. volumeClaimTemplates make no
-- claims.

local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"

local ipairs, tonumber = ipairs, tonumber
local copy = util.copy
local is_object = common.is_object

local _M = {}

local REV = "controller-revision-hash"
local POD_NAME = "statefulset.kubernetes.io/pod-name"

local function ordinal(sts, pod)
  local prefix = sts.metadata.name .. "-"
  local name = pod.metadata.name
  if name:sub(1, #prefix) ~= prefix then return nil end
  return tonumber(name:sub(#prefix + 1):match("^%d+$"))
end

local function rev_of(pod)
  local l = pod.metadata.labels
  return is_object(l) and l[REV] or nil
end

local function healthy(pod)
  return pod.metadata.deletionTimestamp == nil and is_object(pod.status)
    and pod.status.phase == "Running" and common.is_ready(pod)
end

local function sync(self, e)
  local s = self.store
  local sts = e.obj
  local spec = is_object(sts.spec) and sts.spec or {}
  local name = sts.metadata.name
  local replicas = common.count(spec.replicas, 1)
  local parallel = spec.podManagementPolicy == "Parallel"
  local update_rev = name .. "-" .. common.hash(spec.template or {})
  local old = is_object(sts.status) and sts.status or {}
  local current_rev = old.currentRevision or update_rev
  local by_ord, extra = {}, {}
  local live = { [current_rev] = true, [update_rev] = true }
  for _, pe in ipairs(common.owned_pods(s, e.ns, sts.metadata.uid)) do
    local i = ordinal(sts, pe.obj)
    if i and i < replicas then by_ord[i] = pe elseif i then extra[#extra + 1] = pe end
    if rev_of(pe.obj) then live[rev_of(pe.obj)] = true end
  end
  if not sts.metadata.deletionTimestamp then
    common.revision(s, sts, e.ns, update_rev:sub(#name + 2), "controller.kubernetes.io/hash", nil,
      live)
  end
  local function make(i)
    -- made from the current template (no older revision is kept)
    local pod = common.pod_from(spec.template, sts, e.ns, name .. "-" .. i,
      { [REV] = update_rev, [POD_NAME] = name .. "-" .. i })
    pod.spec.hostname = name .. "-" .. i
    pod.spec.subdomain = spec.serviceName
    by_ord[i] = common.create_pod(s, pod)
  end
  if not sts.metadata.deletionTimestamp then
    local waiting = false
    for i = 0, replicas - 1 do
      local pe = by_ord[i]
      if pe and common.is_terminal(pe.obj) and not pe.obj.metadata.deletionTimestamp then
        common.delete_pod(s, pe) -- replaced once gone
        waiting = true
      elseif not pe then
        if not (waiting and not parallel) then make(i) end
        waiting = true
      elseif not healthy(pe.obj) then
        waiting = true
      end
      if waiting and not parallel then break end
    end
    table.sort(extra, function(a, b) return ordinal(sts, a.obj) > ordinal(sts, b.obj) end)
    for _, pe in ipairs(extra) do
      if waiting and not parallel then break end
      if not pe.obj.metadata.deletionTimestamp then common.delete_pod(s, pe) end
      waiting = true
      if not parallel then break end
    end
    local strategy = is_object(spec.updateStrategy) and spec.updateStrategy or {}
    if not waiting and strategy.type ~= "OnDelete" then
      local ru = is_object(strategy.rollingUpdate) and strategy.rollingUpdate or {}
      local partition = common.count(ru.partition, 0)
      for i = replicas - 1, partition, -1 do
        local pe = by_ord[i]
        if pe and rev_of(pe.obj) ~= update_rev then
          common.delete_pod(s, pe)
          break
        end
      end
    end
  end
  local count, ready, cur, upd = 0, 0, 0, 0
  for i = 0, replicas - 1 do
    local pe = s:resource("v1", "pods").objects[e.ns .. "/" .. name .. "-" .. i]
    local pod = common.obj_of(pe)
    if pod and pod.metadata.deletionTimestamp == nil then
      local ref = common.controller_of(pod)
      if ref and ref.uid == sts.metadata.uid then
        count = count + 1
        if common.is_ready(pod) then ready = ready + 1 end
        if rev_of(pod) == current_rev then cur = cur + 1 end
        if rev_of(pod) == update_rev then upd = upd + 1 end
      end
    end
  end
  if upd == replicas and ready == replicas and current_rev ~= update_rev then
    current_rev, cur = update_rev, upd
  end
  local obj = copy(sts)
  obj.status = { observedGeneration = sts.metadata.generation, replicas = count,
    readyReplicas = common.omit_zero(ready), currentReplicas = common.omit_zero(cur),
    updatedReplicas = common.omit_zero(upd), currentRevision = current_rev,
    updateRevision = update_rev, collisionCount = old.collisionCount or 0,
    availableReplicas = ready }
  common.write(s, e.res, e, obj)
end

function _M.new(store, defer)
  return common.new_owner(store, defer, { name = "statefulset", kind = "StatefulSet",
    gv = "apps/v1", resource = "statefulsets", sync = sync })
end

return _M
