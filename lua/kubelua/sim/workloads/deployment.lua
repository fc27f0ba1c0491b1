-- kubelua.sim.workloads.deployment: the Deployment controller of
-- kube-controller-manager, for the simulator. Each template gets a
-- ReplicaSet named <deployment>-<pod-template-hash>, with that label on it,
-- its selector and its template, and the revision annotations; a template
-- change rolls out to a new ReplicaSet, by RollingUpdate (maxSurge,
-- maxUnavailable) or Recreate (the old Pods gone first), scaling the old
-- ones to 0; old ReplicaSets beyond revisionHistoryLimit are deleted. The
-- status (replicas, updatedReplicas, readyReplicas, availableReplicas,
-- unavailableReplicas, observedGeneration) and the conditions Available
-- and Progressing are written with the real controller's reasons and
-- messages. A paused Deployment rolls nothing out (no new ReplicaSet; a
-- change of replicas scales its one active ReplicaSet) and says so in
-- Progressing (Unknown, DeploymentPaused "Deployment is paused"); resumed
-- (DeploymentResumed "Deployment is resumed"), it rolls out what changed
-- meanwhile. Proportional scaling of several ReplicaSets at once and
-- progressDeadlineSeconds are not simulated.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"

local ipairs, tostring, tonumber, error, max, min =
  ipairs, tostring, tonumber, error, math.max, math.min
local format = string.format
local sort = table.sort
local copy, equal = util.copy, util.equal
local is_object = common.is_object

local _M = {}

local HASH = "pod-template-hash"
local REVISION = "deployment.kubernetes.io/revision"
local DESIRED = "deployment.kubernetes.io/desired-replicas"
local MAX = "deployment.kubernetes.io/max-replicas"

local function revision(rs)
  local a = rs.metadata.annotations
  return tonumber(is_object(a) and a[REVISION]) or 0
end

local function replicas_of(rs)
  return common.count(is_object(rs.spec) and rs.spec.replicas, 0)
end

local function st(rs, field)
  return is_object(rs.status) and tonumber(rs.status[field]) or 0
end

-- maxSurge and maxUnavailable of a RollingUpdate Deployment (both 0: 1
-- unavailable), as the controller resolves them against replicas.
local function limits(d, replicas)
  local strategy = is_object(d.spec.strategy) and d.spec.strategy or {}
  if strategy.type == "Recreate" then return 0, 0 end
  local ru = is_object(strategy.rollingUpdate) and strategy.rollingUpdate or {}
  local surge = common.scaled(ru.maxSurge, replicas, true, "25%")
  local unavailable = common.scaled(ru.maxUnavailable, replicas, false, "25%")
  if surge == 0 and unavailable == 0 then unavailable = 1 end
  return surge, unavailable
end

local function max_unavailable(d, replicas)
  if replicas == 0 then return 0 end
  local _, u = limits(d, replicas)
  return min(u, replicas)
end

local function condition(ctype, status, reason, message)
  local now = util.timestamp()
  return { type = ctype, status = status, lastUpdateTime = now, lastTransitionTime = now,
    reason = reason, message = message }
end

local function get_condition(status, ctype)
  for _, c in ipairs(is_object(status) and json.is_array(status.conditions)
      and status.conditions or {}) do
    if c.type == ctype then return c end
  end
  return nil
end

-- Sets ReplicaSet rs (entry) to n replicas, with the annotations a scale
-- writes; returns the new entry.
local function scale(s, e, d, n, surge)
  local obj = copy(e.obj)
  obj.spec.replicas = n
  local a = is_object(obj.metadata.annotations) and obj.metadata.annotations or {}
  obj.metadata.annotations = a
  a[DESIRED] = tostring(common.count(d.spec.replicas, 1))
  a[MAX] = tostring(common.count(d.spec.replicas, 1) + surge)
  return common.write(s, e.res, e, obj, common.CTX)
end

-- Creates the ReplicaSet of d's current template, revision rev.
local function create_rs(s, d, ns, hash, rev, n, surge)
  local template = copy(d.spec.template)
  template.metadata = is_object(template.metadata) and template.metadata or {}
  template.metadata.labels = is_object(template.metadata.labels) and template.metadata.labels or {}
  template.metadata.labels[HASH] = hash
  local selector = copy(d.spec.selector)
  selector.matchLabels = is_object(selector.matchLabels) and selector.matchLabels or {}
  selector.matchLabels[HASH] = hash
  local labels = copy(template.metadata.labels)
  local replicas = common.count(d.spec.replicas, 1)
  local rs = { apiVersion = "apps/v1", kind = "ReplicaSet",
    metadata = { name = d.metadata.name .. "-" .. hash, namespace = ns, labels = labels,
      annotations = { [DESIRED] = tostring(replicas), [MAX] = tostring(replicas + surge),
        [REVISION] = tostring(rev) },
      ownerReferences = common.owner_ref(d) },
    spec = { replicas = n, minReadySeconds = d.spec.minReadySeconds, selector = selector,
      template = template } }
  local res = s:resource("apps/v1", "replicasets")
  local e, err = s:create(res, ns, rs, common.CTX)
  if not e then
    error(format("creating replicaset %s/%s: %s", ns, rs.metadata.name, tostring(err.message)), 0)
  end
  return e
end

-- The rollout's status, as calculateStatus and syncRolloutStatus write it
-- (only calculateStatus while paused).
local function rollout_status(d, all, new, paused)
  local replicas = common.count(d.spec.replicas, 1)
  local total, actual, ready, avail = 0, 0, 0, 0
  for _, e in ipairs(all) do
    total = total + replicas_of(e.obj)
    actual = actual + st(e.obj, "replicas")
    ready = ready + st(e.obj, "readyReplicas")
    avail = avail + st(e.obj, "availableReplicas")
  end
  local updated = new and st(new.obj, "replicas") or 0
  local old = is_object(d.status) and d.status or {}
  local status = { observedGeneration = d.metadata.generation,
    replicas = common.omit_zero(actual), updatedReplicas = common.omit_zero(updated),
    readyReplicas = common.omit_zero(ready), availableReplicas = common.omit_zero(avail),
    unavailableReplicas = common.omit_zero(max(total - avail, 0)),
    collisionCount = old.collisionCount, conditions = old.conditions }
  if avail >= replicas - max_unavailable(d, replicas) then
    status.conditions = common.set_condition(status.conditions, condition("Available", "True",
      "MinimumReplicasAvailable", "Deployment has minimum availability."))
  else
    status.conditions = common.set_condition(status.conditions, condition("Available", "False",
      "MinimumReplicasUnavailable", "Deployment does not have minimum availability."))
  end
  local cur = get_condition(old, "Progressing")
  local complete = (status.replicas or 0) == (status.updatedReplicas or 0) and cur ~= nil
    and cur.reason == "NewReplicaSetAvailable"
  if not complete and not paused then
    local what = new and format("ReplicaSet %q", new.name)
      or format("Deployment %q", d.metadata.name)
    if updated == replicas and (status.replicas or 0) == replicas and avail == replicas then
      status.conditions = common.set_condition(status.conditions, condition("Progressing", "True",
        "NewReplicaSetAvailable", what .. " has successfully progressed."))
    elseif updated > st(d, "updatedReplicas")
        or (status.replicas or 0) - updated < st(d, "replicas") - st(d, "updatedReplicas")
        or ready > st(d, "readyReplicas") or avail > st(d, "availableReplicas") then
      local c = condition("Progressing", "True", "ReplicaSetUpdated", what .. " is progressing.")
      if cur and cur.status == "True" then c.lastTransitionTime = cur.lastTransitionTime end
      local conds = json.array {}
      for _, x in ipairs(status.conditions or {}) do
        if x.type ~= "Progressing" then conds[#conds + 1] = x end
      end
      conds[#conds + 1] = c
      status.conditions = conds
    end
  end
  if status.conditions and #status.conditions == 0 then status.conditions = nil end
  return status
end

-- Scales the ReplicaSets toward a RollingUpdate's next step; true when
-- it scaled one.
local function roll(s, d, new, olds, surge, unavailable)
  local replicas = common.count(d.spec.replicas, 1)
  local all = { new }
  for _, o in ipairs(olds) do all[#all + 1] = o end
  local current = 0
  for _, e in ipairs(all) do current = current + replicas_of(e.obj) end
  local nr = replicas_of(new.obj)
  if nr > replicas then
    scale(s, new, d, replicas, surge)
    return true
  elseif nr < replicas and current < replicas + surge then
    scale(s, new, d, nr + min(replicas + surge - current, replicas - nr), surge)
    return true
  end
  -- old ones down, keeping replicas - maxUnavailable available
  local min_available = replicas - unavailable
  local new_unavailable = replicas_of(new.obj) - st(new.obj, "availableReplicas")
  local budget = current - min_available - new_unavailable
  if budget <= 0 then return false end
  local scaled = false
  sort(olds, function(a, b) return a.obj.metadata.creationTimestamp
    < b.obj.metadata.creationTimestamp end)
  -- first the unhealthy Pods of old ReplicaSets
  for i, o in ipairs(olds) do
    local r = replicas_of(o.obj)
    local n = min(budget, r - st(o.obj, "availableReplicas"))
    if n > 0 then
      olds[i] = scale(s, o, d, r - n, surge)
      budget, scaled = budget - n, true
    end
  end
  -- then available ones, while enough stay available
  local available = 0
  for _, e in ipairs(all) do available = available + st(e.obj, "availableReplicas") end
  local allowed = min(budget, available - min_available)
  for _, o in ipairs(olds) do
    if allowed <= 0 then break end
    local r = replicas_of(o.obj)
    local n = min(allowed, r)
    if n > 0 then
      scale(s, o, d, r - n, surge)
      allowed, scaled = allowed - n, true
    end
  end
  return scaled
end

local function sync(self, e)
  local s = self.store
  local d = e.obj
  if not is_object(d.spec) or not is_object(d.spec.template) then return end
  local rses = common.owned(s, "apps/v1", "replicasets", e.ns, d.metadata.uid)
  local template = d.spec.template
  local hash = common.hash(template)
  local new, olds, top = nil, {}, 0
  for _, re in ipairs(rses) do
    top = max(top, revision(re.obj))
    local t = is_object(re.obj.spec) and re.obj.spec.template
    if not new and t and equal(common.without_label(t, HASH), template) then
      new = re
    else
      olds[#olds + 1] = re
    end
  end
  local replicas = common.count(d.spec.replicas, 1)
  local surge, unavailable = limits(d, replicas)
  -- checkPausedConditions: a status write of its own, before the rollout
  local paused = d.spec.paused == true
  local progressing = get_condition(d.status, "Progressing")
  local paused_cond = progressing ~= nil and progressing.reason == "DeploymentPaused"
  if paused ~= paused_cond then
    local o = copy(d)
    o.status = is_object(o.status) and o.status or {}
    o.status.conditions = common.set_condition(o.status.conditions, paused
      and condition("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
      or condition("Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed"))
    e = common.write(s, e.res, e, o)
    d = e.obj
  end
  local obj = copy(d)
  obj.status = is_object(obj.status) and obj.status or {}
  if paused and not d.metadata.deletionTimestamp then
    -- sync: the one active (else the latest) ReplicaSet follows replicas
    local active, latest = {}, new
    for _, o in ipairs(olds) do
      if replicas_of(o.obj) > 0 then active[#active + 1] = o end
      if not latest or o.obj.metadata.creationTimestamp > latest.obj.metadata.creationTimestamp
          then latest = o end
    end
    if new and replicas_of(new.obj) > 0 then active[#active + 1] = new end
    local only = #active == 1 and active[1] or (#active == 0 and latest) or nil
    if only and replicas_of(only.obj) ~= replicas then
      local scaled = scale(s, only, d, replicas, surge)
      if new and only.key == new.key then new = scaled end
    end
    self:clean(d, new, olds)
  elseif not d.metadata.deletionTimestamp then
    local recreate = is_object(d.spec.strategy) and d.spec.strategy.type == "Recreate"
    local old_active = false
    for i, o in ipairs(olds) do
      if recreate and replicas_of(o.obj) > 0 then olds[i] = scale(s, o, d, 0, surge) end
      if st(o.obj, "replicas") > 0 or replicas_of(olds[i].obj) > 0 then old_active = true end
    end
    if not new and not (recreate and old_active) then
      local n = replicas
      if not recreate and #olds > 0 then
        local current = 0
        for _, o in ipairs(olds) do current = current + replicas_of(o.obj) end
        n = max(0, min(replicas + surge - current, replicas))
      end
      new = create_rs(s, d, e.ns, hash, top + 1, n, surge)
      obj.status.conditions = common.set_condition(obj.status.conditions, condition(
        "Progressing", "True", "NewReplicaSetCreated", format("Created new replica set %q",
          new.name)))
    elseif new and revision(new.obj) < top then
      -- an old template back: its ReplicaSet gets the next revision
      local o = copy(new.obj)
      o.metadata.annotations[REVISION] = tostring(top + 1)
      new = common.write(s, new.res, new, o, common.CTX)
    elseif new and not get_condition(d.status, "Progressing") then
      obj.status.conditions = common.set_condition(obj.status.conditions, condition(
        "Progressing", "True", "FoundNewReplicaSet", format("Found new replica set %q",
          new.name)))
    end
    if new then
      if recreate then
        if not old_active and replicas_of(new.obj) ~= replicas then
          new = scale(s, new, d, replicas, surge)
        end
      else
        roll(s, d, new, olds, surge, unavailable)
        new = s:resource("apps/v1", "replicasets").objects[new.key] or new
      end
      local a = is_object(obj.metadata.annotations) and obj.metadata.annotations or {}
      if a[REVISION] ~= tostring(revision(new.obj)) then
        local meta = copy(d)
        meta.metadata.annotations = a
        a[REVISION] = tostring(revision(new.obj))
        e = common.write(s, e.res, e, meta, common.CTX)
        obj.metadata = copy(e.obj.metadata)
      end
    end
    self:clean(d, new, olds)
  end
  rses = common.owned(s, "apps/v1", "replicasets", e.ns, d.metadata.uid)
  for i, re in ipairs(rses) do
    if new and re.key == new.key then new = rses[i] end
  end
  local d2 = copy(d)
  d2.status = obj.status
  local status = rollout_status(d2, rses, new, paused)
  obj.status = status
  common.write(s, e.res, e, obj)
end

-- Deletes old ReplicaSets scaled to 0 beyond revisionHistoryLimit, the
-- oldest revisions first.
function _M.clean(self, d, new, olds)
  local limit = common.count(d.spec.revisionHistoryLimit, 10)
  local idle = {}
  for _, o in ipairs(olds) do
    local cur = self.store:resource("apps/v1", "replicasets").objects[o.key]
    if cur and replicas_of(cur.obj) == 0 and st(cur.obj, "replicas") == 0
        and not cur.obj.metadata.deletionTimestamp then
      idle[#idle + 1] = cur
    end
  end
  if #idle <= limit or not new then return end
  sort(idle, function(a, b) return revision(a.obj) < revision(b.obj) end)
  local res = self.store:resource("apps/v1", "replicasets")
  for i = 1, #idle - limit do
    local out, err = self.store:delete(res, idle[i].ns, idle[i].name, {}, common.CTX)
    if not out and err.code ~= 404 then
      error(format("deleting replicaset %s/%s: %s", idle[i].ns, idle[i].name,
        tostring(err.message)), 0)
    end
  end
end

function _M.new(store, defer)
  local c = common.new_owner(store, defer, { name = "deployment", kind = "Deployment",
    gv = "apps/v1", resource = "deployments", owns = { "apps/v1", "replicasets" },
    sync = sync })
  c.clean = _M.clean
  return c
end

return _M
