-- kubelua.sim.disruption: the disruption controller of kube-controller-
-- manager for the simulator: each PodDisruptionBudget's status from the
-- Pods its selector picks in its namespace (expectedPods, currentHealthy:
-- the Ready ones not being deleted nor just evicted, desiredHealthy,
-- disruptionsAllowed, observedGeneration, the DisruptionAllowed
-- condition), written through the status subresource as the real one
-- writes it, so that pods/eviction (kubelua.sim.subresources) can read it.
--
-- expectedPods is the number of Pods for an integer minAvailable; for a
-- percentage or maxUnavailable it is the scale of the Pods' controllers
-- (ReplicaSet, its Deployment, StatefulSet, ReplicationController), and a
-- Pod without one leaves the budget allowing no disruption (SyncFailed).
-- An eviction noted in disruptedPods counts as gone for two minutes.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"

local type, pairs, ipairs, next, tostring, setmetatable =
  type, pairs, ipairs, next, tostring, setmetatable
local format = string.format
local is_array, null = json.is_array, json.null
local copy = util.copy
local is_object = common.is_object

local _M = {}
local Controller = {}
Controller.__index = Controller

local DELETION_TIMEOUT = 120 -- seconds an eviction stays in disruptedPods

_M.is_ready = common.is_ready

-- The PodDisruptionBudget's selector as requirements; nil when it picks
-- nothing (none, or empty: the eviction registry's and controller's rule).
local function selector_of(pdb)
  local sel = is_object(pdb.spec) and pdb.spec.selector
  if not is_object(sel) then return nil end
  local reqs = common.selector(sel)
  if #reqs == 0 then return nil end
  return reqs
end

-- The entries of the PodDisruptionBudgets in pod's namespace that select it.
function _M.budgets_of(s, pod)
  local out = {}
  local res = s:resource("policy/v1", "poddisruptionbudgets")
  for _, key in ipairs(s:sorted_keys(res)) do
    local e = res.objects[key]
    if e.ns == pod.metadata.namespace then
      local reqs = selector_of(e.obj)
      if reqs and util.labels_match(reqs, pod.metadata.labels) then out[#out + 1] = e end
    end
  end
  return out
end

-- The condition list with DisruptionAllowed set for allowed disruptions,
-- as the policy helper's UpdateDisruptionAllowedCondition (reason and
-- message, when given, override: SyncFailed) with apimachinery's
-- SetStatusCondition: in place, its lastTransitionTime kept while its
-- status stays.
function _M.allowed_condition(list, allowed, generation, reason, message)
  local ok = allowed > 0 and not reason
  local c = { type = "DisruptionAllowed", status = ok and "True" or "False",
    observedGeneration = generation, lastTransitionTime = util.timestamp(),
    reason = reason or (ok and "SufficientPods" or "InsufficientPods"), message = message or "" }
  local out, found = json.array {}, false
  for _, x in ipairs(is_array(list) and list or {}) do
    if x.type == c.type then
      found = true
      if x.status == c.status then c.lastTransitionTime = x.lastTransitionTime end
      x = c
    end
    out[#out + 1] = x
  end
  if not found then out[#out + 1] = c end
  return out
end

-- new(store, defer) -> the controller.
function _M.new(store, defer)
  return setmetatable({ store = store, defer = defer }, Controller)
end

local function is(res, gv, name) return res.builtin and res.gv == gv and res.name == name end

function Controller:note(key)
  self.defer("disruption " .. key, "disruption", function() self:sync_one(key) end)
end

function Controller:observe(res, e, etype, prev)
  if is(res, "policy/v1", "poddisruptionbudgets") then
    if etype ~= "DELETED" then self:note(e.key) end
    return
  end
  if not is(res, "v1", "pods") then return end
  local pdbs = self.store:resource("policy/v1", "poddisruptionbudgets")
  for key, pe in pairs(pdbs.objects) do
    if pe.ns == e.ns then
      local reqs = selector_of(pe.obj)
      local pod, old = common.table_of(e), common.table_of(prev)
      if reqs and ((pod and util.labels_match(reqs, pod.metadata.labels))
          or (old and util.labels_match(reqs, old.metadata.labels))) then
        self:note(key)
      end
    end
  end
end

function Controller:sync()
  for key in pairs(self.store:resource("policy/v1", "poddisruptionbudgets").objects) do
    self:note(key)
  end
end

-- The replicas of the controller ref names in namespace ns, and the key
-- that counts it once; nil when it has no scale.
function Controller:scale_of(ns, ref)
  local s = self.store
  local where = { ReplicaSet = { "apps/v1", "replicasets" },
    StatefulSet = { "apps/v1", "statefulsets" },
    ReplicationController = { "v1", "replicationcontrollers" } }
  local w = where[ref.kind]
  if not w or not tostring(ref.apiVersion):find("^" .. (w[1] == "v1" and "v1$" or "apps/")) then
    return nil
  end
  local e = s:get(s:resource(w[1], w[2]), ns, ref.name)
  if not e or e.obj.metadata.uid ~= ref.uid then return nil end
  local obj = e.obj
  if ref.kind == "ReplicaSet" then -- a Deployment's ReplicaSet: the Deployment's scale
    local up = common.controller_of(obj)
    if up and up.kind == "Deployment" then
      local d = s:get(s:resource("apps/v1", "deployments"), ns, up.name)
      if d and d.obj.metadata.uid == up.uid then
        return common.count(d.obj.spec.replicas, 1), "Deployment/" .. up.uid
      end
    end
  end
  return common.count(obj.spec.replicas, 1), ref.kind .. "/" .. ref.uid
end

-- The status the controller computes for PodDisruptionBudget obj.
function Controller:compute(obj, now)
  local s = self.store
  local spec = is_object(obj.spec) and obj.spec or {}
  local old = is_object(obj.status) and obj.status or {}
  local ns = obj.metadata.namespace
  local reqs = selector_of(obj)
  local pods = {}
  if reqs then
    for _, e in pairs(s:resource("v1", "pods").objects) do
      local pod = common.table_of(e)
      if pod and e.ns == ns and util.labels_match(reqs, pod.metadata.labels) then
        pods[#pods + 1] = pod
      end
    end
  end
  local st = { observedGeneration = obj.metadata.generation }
  -- evictions not yet seen through: the pod still there, not deleted, recent
  local disrupted = {}
  local by_name = {}
  for _, pod in ipairs(pods) do by_name[pod.metadata.name] = pod end
  for name, ts in pairs(is_object(old.disruptedPods) and old.disruptedPods or {}) do
    local pod = by_name[name]
    local at = common.seconds(ts)
    if pod and not pod.metadata.deletionTimestamp and at and at + DELETION_TIMEOUT > now then
      disrupted[name] = ts
    end
  end
  local expected, desired, failed = 0, 0, nil
  local min, max = spec.minAvailable, spec.maxUnavailable
  local function scale()
    local total, seen = 0, {}
    for _, pod in ipairs(pods) do
      local ref = common.controller_of(pod)
      if not ref then
        failed = format('found no controller ref for pod "%s"', pod.metadata.name)
        return 0
      end
      local n, id = self:scale_of(ns, ref)
      if not n then
        failed = format('found no controllers for pod "%s"', pod.metadata.name)
        return 0
      end
      if not seen[id] then
        seen[id] = true
        total = total + n
      end
    end
    return total
  end
  if max ~= nil and max ~= null then
    expected = scale()
    desired = expected - common.scaled(max, expected, true)
    if desired < 0 then desired = 0 end
  elseif type(min) == "number" then
    expected, desired = #pods, min
  elseif min ~= nil and min ~= null then
    expected = scale()
    desired = common.scaled(min, expected, true)
  end
  local healthy = 0
  for _, pod in ipairs(pods) do
    if not pod.metadata.deletionTimestamp and not disrupted[pod.metadata.name]
        and common.is_ready(pod) then
      healthy = healthy + 1
    end
  end
  if next(disrupted) then st.disruptedPods = disrupted end
  if failed then -- the controller's failSafe: the rest of the status stays as it was
    st = copy(old)
    st.disruptionsAllowed = 0
    st.conditions = _M.allowed_condition(old.conditions, 0, old.observedGeneration, "SyncFailed",
      failed)
    return st
  end
  local allowed = healthy - desired
  if expected <= 0 or allowed <= 0 then allowed = 0 end
  st.disruptionsAllowed, st.currentHealthy, st.desiredHealthy, st.expectedPods = allowed, healthy,
    desired, expected
  st.conditions = _M.allowed_condition(old.conditions, allowed, st.observedGeneration)
  return st
end

function Controller:sync_one(key)
  local s = self.store
  local res = s:resource("policy/v1", "poddisruptionbudgets")
  local e = res.objects[key]
  local obj = common.table_of(e)
  if not obj or obj.metadata.deletionTimestamp then return end
  local new = copy(obj)
  new.status = self:compute(obj, os.time())
  common.write(s, res, e, new)
end

return _M
