-- kubelua.sim.workloads.daemonset: the DaemonSet controller of
-- kube-controller-manager, for the simulator. Each Node the template's
-- nodeSelector and node affinity allow, and whose NoSchedule and
-- NoExecute taints it tolerates (with the tolerations the controller
-- adds: not-ready, unreachable, disk-, memory- and pid-pressure,
-- unschedulable), gets one Pod (pinned to it by a
-- required node affinity on metadata.name, which the scheduler honours;
-- labels controller-revision-hash and pod-template-generation); a Pod on
-- a Node it no longer fits is deleted; a template change (RollingUpdate)
-- replaces the Pods, no more than maxUnavailable unready at once. status:
-- desiredNumberScheduled, currentNumberScheduled, numberMisscheduled,
-- numberReady, numberAvailable, numberUnavailable,
-- updatedNumberScheduled, observedGeneration. Each template is kept as a
-- ControllerRevision <name>-<hash> (labels: the template's and
-- controller-revision-hash, the DaemonSet's annotations, revision numbers
-- counting up, the history beyond revisionHistoryLimit deleted but for
-- the revisions its Pods run).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"
local nodes = require "kubelua.sim.workloads.nodes"

local pairs, ipairs, tostring, max = pairs, ipairs, tostring, math.max
local sort = table.sort
local copy = util.copy
local is_object, is_array = common.is_object, json.is_array

local _M = {}

local REV = "controller-revision-hash"
local GEN = "pod-template-generation"

-- The Node a daemon Pod is for: its nodeName, else its affinity's.
local function target(pod)
  local spec = pod.spec
  if type(spec.nodeName) == "string" and spec.nodeName ~= "" then return spec.nodeName end
  local aff = is_object(spec.affinity) and spec.affinity.nodeAffinity
  local req = is_object(aff) and aff.requiredDuringSchedulingIgnoredDuringExecution
  for _, term in ipairs(is_object(req) and is_array(req.nodeSelectorTerms)
      and req.nodeSelectorTerms or {}) do
    for _, f in ipairs(is_array(term.matchFields) and term.matchFields or {}) do
      if f.key == "metadata.name" and is_array(f.values) then return f.values[1] end
    end
  end
  return nil
end

local function pin(pod, node)
  pod.spec.affinity = is_object(pod.spec.affinity) and pod.spec.affinity or {}
  pod.spec.affinity.nodeAffinity = { requiredDuringSchedulingIgnoredDuringExecution = {
    nodeSelectorTerms = json.array { { matchFields = json.array { { key = "metadata.name",
      operator = "In", values = json.array { node } } } } } } }
end

-- The tolerations the controller adds to every daemon Pod
-- (AddOrUpdateDaemonPodTolerations), in its order.
local DAEMON_TOLERATIONS = {
  { "node.kubernetes.io/not-ready", "NoExecute" },
  { "node.kubernetes.io/unreachable", "NoExecute" },
  { "node.kubernetes.io/disk-pressure", "NoSchedule" },
  { "node.kubernetes.io/memory-pressure", "NoSchedule" },
  { "node.kubernetes.io/pid-pressure", "NoSchedule" },
  { "node.kubernetes.io/unschedulable", "NoSchedule" } }

-- A copy of pod spec spec with those tolerations, each unless it has one
-- of that key and effect.
local function daemon_spec(spec)
  local out = copy(spec)
  local list = json.array {}
  for _, t in ipairs(is_array(spec.tolerations) and spec.tolerations or {}) do
    list[#list + 1] = t
  end
  for _, kt in ipairs(DAEMON_TOLERATIONS) do
    local has = false
    for _, t in ipairs(list) do
      if type(t) == "table" and t.key == kt[1] and t.effect == kt[2] then has = true end
    end
    if not has then
      list[#list + 1] = { key = kt[1], operator = "Exists", effect = kt[2] }
    end
  end
  out.tolerations = list
  return out
end

local function sync(self, e)
  local s = self.store
  local ds = e.obj
  local spec = is_object(ds.spec) and ds.spec or {}
  local template = is_object(spec.template) and spec.template or {}
  local hash = common.hash(template)
  local pspec = daemon_spec(is_object(template.spec) and template.spec or {})
  local want = {}
  local names = {}
  for name, ne in pairs(s:resource("v1", "nodes").objects) do
    if nodes.fits({ spec = pspec }, ne.obj) and not nodes.untolerated(pspec, ne.obj) then
      want[name] = true
      names[#names + 1] = name
    end
  end
  sort(names)
  local on = {} -- node → active daemon pods
  local mis = 0
  for _, pe in ipairs(common.owned_pods(s, e.ns, ds.metadata.uid)) do
    local pod = pe.obj
    if not common.is_terminal(pod) and not pod.metadata.deletionTimestamp then
      local n = target(pod) or ""
      on[n] = on[n] or {}
      on[n][#on[n] + 1] = pe
    elseif common.is_terminal(pod) and not pod.metadata.deletionTimestamp
        and not ds.metadata.deletionTimestamp then
      common.delete_pod(s, pe) -- replaced once gone
    end
  end
  if not ds.metadata.deletionTimestamp then
    local live = {}
    for _, list in pairs(on) do
      for _, pe in ipairs(list) do
        local l = pe.obj.metadata.labels
        if is_object(l) and l[REV] then live[ds.metadata.name .. "-" .. l[REV]] = true end
      end
    end
    common.revision(s, ds, e.ns, hash, REV, ds.metadata.annotations, live)
    for n, list in pairs(on) do
      if not want[n] then
        for _, pe in ipairs(list) do common.delete_pod(s, pe) end
        on[n] = nil
      end
    end
    local labels = { [REV] = hash, [GEN] = tostring(ds.metadata.generation or 1) }
    for _, n in ipairs(names) do
      if not on[n] then
        local pod = common.pod_from(template, ds, e.ns, nil, labels)
        pod.spec.tolerations = copy(pspec.tolerations)
        pin(pod, n)
        on[n] = { common.create_pod(s, pod) }
      end
    end
    -- a rolling update: an old Pod goes while fewer than maxUnavailable are unready
    local strategy = is_object(spec.updateStrategy) and spec.updateStrategy or {}
    if strategy.type ~= "OnDelete" then
      local ru = is_object(strategy.rollingUpdate) and strategy.rollingUpdate or {}
      local budget = max(1, common.scaled(ru.maxUnavailable, #names, true, 1))
      for _, n in ipairs(names) do
        local pod = on[n] and on[n][1] and on[n][1].obj
        if not (pod and common.is_ready(pod)) then budget = budget - 1 end
      end
      for _, n in ipairs(names) do
        if budget <= 0 then break end
        local pe = on[n] and on[n][1]
        local l = pe and pe.obj.metadata.labels
        if pe and common.is_ready(pe.obj) and not (is_object(l) and l[REV] == hash) then
          common.delete_pod(s, pe)
          budget = budget - 1
        end
      end
    end
  end
  local current, ready, avail, updated = 0, 0, 0, 0
  for _, n in ipairs(names) do
    local pe = on[n] and on[n][1]
    pe = pe and s:resource("v1", "pods").objects[pe.key]
    local pod = common.obj_of(pe)
    if pod and not pod.metadata.deletionTimestamp then
      current = current + 1
      if common.is_ready(pod) then ready, avail = ready + 1, avail + 1 end
      local l = pod.metadata.labels
      if is_object(l) and l[REV] == hash then updated = updated + 1 end
    end
  end
  for n in pairs(on) do
    if not want[n] then mis = mis + 1 end
  end
  local obj = copy(ds)
  obj.status = { currentNumberScheduled = current, numberMisscheduled = mis,
    desiredNumberScheduled = #names, numberReady = ready,
    observedGeneration = ds.metadata.generation,
    updatedNumberScheduled = common.omit_zero(updated),
    numberAvailable = common.omit_zero(avail),
    numberUnavailable = common.omit_zero(#names - avail) }
  common.write(s, e.res, e, obj)
end

function _M.new(store, defer)
  return common.new_owner(store, defer, { name = "daemonset", kind = "DaemonSet",
    gv = "apps/v1", resource = "daemonsets", nodes = true, sync = sync })
end

return _M
