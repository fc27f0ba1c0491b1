-- kubelua.helpers: the small object chores every controller repeats, on
-- plain decoded tables (kube exports each one: kube.key, kube.add_finalizer…).
--
--   key(obj)                              "ns/name", or "name" when cluster-scoped
--   controller_of(obj)                    the ownerReference with controller = true
--   set_controller_reference(owner, obj)  make owner obj's controller
--   has_finalizer / add_finalizer / remove_finalizer     on the table
--   patch_add_finalizer / patch_remove_finalizer         on the server
--   is_being_deleted(obj)                 metadata.deletionTimestamp is set
--   set_condition / get_condition / is_condition_true    status.conditions
--   merge_patch(old, new)                 an RFC 7386 merge patch by diff
--   diff(old, new)                        the changes, as {op, path, old, new}
--
-- Misuse (a missing object, a condition without type) raises; a refusal
-- the caller must expect (another controller owns the object) returns
-- nil, message, code as the client does. The functions that change a
-- table change it in place and return whether anything changed, like
-- apimachinery's meta.SetStatusCondition and controllerutil's finalizer
-- helpers. Arrays they create carry the kubelua.array metatable, so an
-- empty list still encodes as [].

local json = require "kubelua.json"

local error, type, pairs, ipairs, tostring = error, type, pairs, ipairs, tostring
local next, floor = next, math.floor
local format, date = string.format, os.date
local array, is_array, null = json.array, json.is_array, json.null

local _M = {}

-- level: where errors point, counted from the caller of check_* (3 is the
-- caller of the public function that calls check_* itself).
local function check_object(fname, obj, what, level)
  if type(obj) ~= "table" then
    error(format("kube.%s: %s must be a table, got %s", fname, what or "obj", type(obj)),
          level or 3)
  end
  local md = obj.metadata
  if md ~= nil and type(md) ~= "table" then
    error(format("kube.%s: %s.metadata must be a table, got %s", fname, what or "obj", type(md)),
          level or 3)
  end
  return md
end

local function check_string(fname, what, v, level)
  if type(v) ~= "string" or v == "" then
    error(format("kube.%s: %s must be a non-empty string, got %s", fname, what,
                 type(v) == "string" and '""' or type(v)), level or 3)
  end
end

-- A present value: not nil and not JSON null.
local function present(v) return v ~= nil and v ~= null end

-- The group of an apiVersion: "" for the core group ("v1").
local function group_of(api_version)
  return api_version:match("^(.*)/") or ""
end

-- key(obj) -> "namespace/name", or "name" for a cluster-scoped object
-- (client-go's MetaNamespaceKeyFunc).
---An object's cache key: "namespace/name", or "name" for a cluster-scoped
---object (client-go's MetaNamespaceKeyFunc).
---@param obj table
---@return string
---@usage q:add(kube.key(obj))
function _M.key(obj)
  local md = check_object("key", obj)
  if not md or type(md.name) ~= "string" then
    error("kube.key: the object has no metadata.name", 2)
  end
  local ns = md.namespace
  if type(ns) == "string" and ns ~= "" then return ns .. "/" .. md.name end
  return md.name
end

-- Owner references ----------------------------------------------------------

-- controller_of(obj) -> the owner reference that has controller = true, or nil.
---The owner reference of obj that has controller = true, or nil.
---@param obj table
---@return table|nil ref {apiVersion, kind, name, uid, controller}
---@usage local owner = kube.controller_of(pod); if owner then print(owner.kind, owner.name) end
function _M.controller_of(obj)
  local md = check_object("controller_of", obj)
  local refs = md and md.ownerReferences
  if type(refs) ~= "table" then return nil end
  for _, ref in ipairs(refs) do
    if type(ref) == "table" and ref.controller == true then return ref end
  end
  return nil
end

-- set_controller_reference(owner, obj) -> true, or nil, message,
-- "AlreadyOwned" when another object controls obj. Adds (or updates) the
-- owner reference {apiVersion, kind, name, uid, controller = true,
-- blockOwnerDeletion = true}, as controllerutil.SetControllerReference:
-- owner and obj must be in the same namespace, and a cluster-scoped obj
-- cannot have a namespaced owner (these raise).
---Makes owner obj's controller (an owner reference with controller and
---blockOwnerDeletion), as controllerutil.SetControllerReference. Both must
---be in the same namespace (else it raises).
---@param owner table
---@param obj table changed in place
---@return true|nil ok
---@return string? err
---@return string? code "AlreadyOwned" when another object controls obj
---@usage assert(kube.set_controller_reference(greeting, cm)); kube.create(cm)
function _M.set_controller_reference(owner, obj)
  local omd = check_object("set_controller_reference", owner, "owner")
  local md = check_object("set_controller_reference", obj)
  if type(owner.apiVersion) ~= "string" or type(owner.kind) ~= "string" or not omd
      or type(omd.name) ~= "string" or type(omd.uid) ~= "string" then
    error("kube.set_controller_reference: the owner needs apiVersion, kind, metadata.name"
          .. " and metadata.uid (an object read from the server)", 2)
  end
  if not md then
    md = {}
    obj.metadata = md
  end
  local ons, ns = omd.namespace, md.namespace
  if ons == "" then ons = nil end
  if ns == "" then ns = nil end
  if ons and not ns then
    error("kube.set_controller_reference: a cluster-scoped object cannot be owned by the"
          .. " namespaced " .. owner.kind .. " " .. ons .. "/" .. omd.name, 2)
  end
  if ons and ons ~= ns then
    error(format("kube.set_controller_reference: cross-namespace owner references are"
                 .. " not allowed (owner in %s, object in %s)", ons, ns), 2)
  end
  local group = group_of(owner.apiVersion)
  local function same_owner(ref)
    return type(ref.apiVersion) == "string" and group_of(ref.apiVersion) == group
      and ref.kind == owner.kind and ref.name == omd.name
  end
  local current = _M.controller_of(obj)
  if current and not same_owner(current) then
    return nil, format("kube.set_controller_reference: %s is already controlled by %s %s",
                       md.name and _M.key(obj) or "the object", tostring(current.kind),
                       tostring(current.name)), "AlreadyOwned"
  end
  local ref = { apiVersion = owner.apiVersion, kind = owner.kind, name = omd.name,
                uid = omd.uid, controller = true, blockOwnerDeletion = true }
  local refs = md.ownerReferences
  if type(refs) ~= "table" then
    md.ownerReferences = array { ref }
    return true
  end
  for i, r in ipairs(refs) do
    if type(r) == "table" and same_owner(r) then
      refs[i] = ref
      return true
    end
  end
  refs[#refs + 1] = ref
  return true
end

-- Finalizers ------------------------------------------------------------------

local function finalizers_of(fname, obj, f)
  local md = check_object(fname, obj, nil, 4)
  check_string(fname, "finalizer", f, 4)
  local list = md and md.finalizers
  if type(list) ~= "table" then list = nil end
  return md, list
end

-- has_finalizer(obj, f) -> whether metadata.finalizers holds f.
---Whether metadata.finalizers holds f.
---@param obj table
---@param f string
---@return boolean
---@usage if not kube.has_finalizer(obj, "example.com/cleanup") then ... end
function _M.has_finalizer(obj, f)
  local _, list = finalizers_of("has_finalizer", obj, f)
  if not list then return false end
  for _, v in ipairs(list) do
    if v == f then return true end
  end
  return false
end

-- add_finalizer(obj, f) -> true when f was added, false when already there.
---Adds f to metadata.finalizers of the table.
---@param obj table changed in place
---@param f string
---@return boolean added false when it was there already
---@usage if kube.add_finalizer(obj, FIN) then obj = assert(kube.update(obj)) end
function _M.add_finalizer(obj, f)
  local md, list = finalizers_of("add_finalizer", obj, f)
  if list then
    for _, v in ipairs(list) do
      if v == f then return false end
    end
    list[#list + 1] = f
    return true
  end
  if not md then
    md = {}
    obj.metadata = md
  end
  md.finalizers = array { f }
  return true
end

-- remove_finalizer(obj, f) -> true when f was removed (every copy of it),
-- false when it was not there.
---Removes every copy of f from metadata.finalizers of the table.
---@param obj table changed in place
---@param f string
---@return boolean removed false when it was not there
---@usage if kube.remove_finalizer(obj, FIN) then kube.update(obj) end
function _M.remove_finalizer(obj, f)
  local md, list = finalizers_of("remove_finalizer", obj, f)
  if not list then return false end
  local kept = array()
  for _, v in ipairs(list) do
    if v ~= f then kept[#kept + 1] = v end
  end
  if #kept == #list then return false end
  md.finalizers = kept
  return true
end

-- The merge patch that sets metadata.finalizers, guarded by the object's
-- resourceVersion (a changed object gives 409 Conflict, as
-- controller-runtime's MergeFromWithOptimisticLock).
local function patch_finalizers(obj, copy)
  local md = obj.metadata
  local kube = require "kubelua"
  local body = { metadata = { finalizers = copy.metadata.finalizers,
                              resourceVersion = md.resourceVersion } }
  local out, err = kube.patch(obj, body, "merge")
  if not out then return nil, err end
  return out, true
end

local function shallow_copy(obj)
  local c = {}
  for k, v in pairs(obj) do c[k] = v end
  local md = {}
  for k, v in pairs(obj.metadata or {}) do md[k] = v end
  if type(md.finalizers) == "table" then
    local l = array()
    for i, v in ipairs(md.finalizers) do l[i] = v end
    md.finalizers = l
  end
  c.metadata = md
  return c
end

-- patch_add_finalizer(obj, f) -> the object as the server now has it, true;
-- or obj, false when f is there already (no request); or nil, err (a
-- Conflict when the object changed since obj was read). In a task.
---Adds f on the server with a merge patch guarded by the object's
---resourceVersion (a changed object gives a Conflict). In a task.
---@param obj table
---@param f string
---@return table|nil obj the object as the server now has it (or obj when f was there)
---@return boolean|string changed true, false when nothing was sent; or the error
---@usage local obj, err = kube.patch_add_finalizer(ctx.object, "example.com/cleanup")
function _M.patch_add_finalizer(obj, f)
  finalizers_of("patch_add_finalizer", obj, f)
  local copy = shallow_copy(obj)
  if not _M.add_finalizer(copy, f) then return obj, false end
  return patch_finalizers(obj, copy)
end

-- patch_remove_finalizer(obj, f) -> as patch_add_finalizer, removing f.
-- The usual last step of a deletion: the server deletes the object once
-- its last finalizer goes.
---Removes f on the server as patch_add_finalizer adds it: the usual last
---step of a deletion (the server deletes the object once its last
---finalizer goes). In a task.
---@param obj table
---@param f string
---@return table|nil obj
---@return boolean|string changed or the error
---@usage if kube.is_being_deleted(obj) then cleanup(obj); kube.patch_remove_finalizer(obj, FIN) end
function _M.patch_remove_finalizer(obj, f)
  finalizers_of("patch_remove_finalizer", obj, f)
  local copy = shallow_copy(obj)
  if not _M.remove_finalizer(copy, f) then return obj, false end
  return patch_finalizers(obj, copy)
end

-- is_being_deleted(obj) -> whether metadata.deletionTimestamp is set: the
-- object waits for its finalizers.
---Whether metadata.deletionTimestamp is set: the object waits for its
---finalizers.
---@param obj table
---@return boolean
---@usage if kube.is_being_deleted(obj) then return finalize(obj) end
function _M.is_being_deleted(obj)
  local md = check_object("is_being_deleted", obj)
  return md ~= nil and present(md.deletionTimestamp)
end

-- Status conditions -----------------------------------------------------------

local function now_rfc3339()
  local kube = require "kubelua"
  return date("!%Y-%m-%dT%H:%M:%SZ", floor(kube.now()))
end

local function find_condition(obj, ctype)
  local st = obj.status
  local list = type(st) == "table" and st.conditions
  if type(list) ~= "table" then return nil end
  for _, c in ipairs(list) do
    if type(c) == "table" and c.type == ctype then return c end
  end
  return nil
end

-- get_condition(obj, type) -> the condition of that type in
-- status.conditions, or nil.
---The condition of that type in status.conditions, or nil.
---@param obj table
---@param ctype string
---@return table|nil
---@usage local ready = kube.get_condition(obj, "Ready")
function _M.get_condition(obj, ctype)
  check_object("get_condition", obj)
  check_string("get_condition", "type", ctype)
  return find_condition(obj, ctype)
end

-- is_condition_true(obj, type) -> whether that condition has status "True".
---Whether the condition of that type has status "True".
---@param obj table
---@param ctype string
---@return boolean
---@usage if kube.is_condition_true(deploy, "Available") then ... end
function _M.is_condition_true(obj, ctype)
  check_object("is_condition_true", obj)
  check_string("is_condition_true", "type", ctype)
  local c = find_condition(obj, ctype)
  return c ~= nil and c.status == "True"
end

local statuses = { True = true, False = true, Unknown = true }

-- set_condition(obj, {type =, status =, reason =, message =,
-- observedGeneration =, lastTransitionTime =}) -> whether it changed.
-- As meta.SetStatusCondition: a new condition, or one whose status changes,
-- gets lastTransitionTime (the given one, else now); otherwise the time is
-- kept and reason, message and observedGeneration are updated.
---Sets a condition in status.conditions as meta.SetStatusCondition does: a
---new condition, or one whose status changes, gets lastTransitionTime
---(the given one, else now); otherwise the time is kept.
---@param obj table changed in place
---@param cond table {type, status, reason, message, observedGeneration, lastTransitionTime}
---@return boolean changed
---@usage
--- if kube.set_condition(obj, { type = "Ready", status = "True", reason = "Synced" }) then
---   kube.update_status(obj)
--- end
function _M.set_condition(obj, cond)
  check_object("set_condition", obj)
  if type(cond) ~= "table" then
    error("kube.set_condition: the condition must be a table, got " .. type(cond), 2)
  end
  check_string("set_condition", "condition.type", cond.type)
  if not statuses[cond.status] then
    error('kube.set_condition: condition.status must be "True", "False" or "Unknown", got '
          .. (type(cond.status) == "string" and format("%q", cond.status) or type(cond.status)), 2)
  end
  local st = obj.status
  if st == nil or st == null then
    st = {}
    obj.status = st
  elseif type(st) ~= "table" then
    error("kube.set_condition: obj.status must be a table, got " .. type(st), 2)
  end
  local list = st.conditions
  if type(list) ~= "table" then
    list = array()
    st.conditions = list
  end
  local cur
  for _, c in ipairs(list) do
    if type(c) == "table" and c.type == cond.type then cur = c break end
  end
  if not cur then
    list[#list + 1] = { type = cond.type, status = cond.status, reason = cond.reason,
      message = cond.message, observedGeneration = cond.observedGeneration,
      lastTransitionTime = cond.lastTransitionTime or now_rfc3339() }
    return true
  end
  local changed = false
  if cur.status ~= cond.status then
    cur.status = cond.status
    cur.lastTransitionTime = cond.lastTransitionTime or now_rfc3339()
    changed = true
  end
  for _, k in ipairs({ "reason", "message", "observedGeneration" }) do
    if cur[k] ~= cond[k] then
      cur[k] = cond[k]
      changed = true
    end
  end
  return changed
end

-- Merge patches -----------------------------------------------------------------

-- A JSON object, as the encoder sees it: a table without the array mark
-- whose keys are not 1..n (an empty plain table is {}).
local function is_object(v)
  if type(v) ~= "table" or is_array(v) then return false end
  return v[1] == nil or next(v) == nil
end

local function equal(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  if next(a) == nil and next(b) == nil then return is_array(a) == is_array(b) end -- {} vs []
  for k, v in pairs(a) do
    if not equal(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

local function diff(old, new)
  local out = {}
  for k, nv in pairs(new) do
    local ov = old[k]
    if nv == null then
      if present(ov) then out[k] = null end
    elseif ov == nil or ov == null then
      out[k] = nv
    elseif is_object(ov) and is_object(nv) then
      local d = diff(ov, nv)
      if next(d) ~= nil then out[k] = d end
    elseif not equal(ov, nv) then
      out[k] = nv -- scalars, arrays (replaced whole) and a change of type
    end
  end
  for k, ov in pairs(old) do
    if new[k] == nil and present(ov) then out[k] = null end
  end
  return out
end

-- Raises at the caller's caller unless old and new are object tables.
local function check_objects(fname, old, new)
  for _, a in ipairs({ { "old", old }, { "new", new } }) do
    local v = a[2]
    if not is_object(v) then
      error(fname .. ": " .. a[1] .. " must be an object table, got "
            .. (type(v) == "table" and "an array" or type(v)), 3)
    end
  end
end

-- merge_patch(old, new) -> the RFC 7386 merge patch that turns old into
-- new: changed and added fields, kube.null for removed ones, objects
-- diffed key by key, arrays (kubelua.array or 1..n tables) replaced whole.
-- {} when nothing changed. Send it with kube.patch(obj, patch, "merge").
---The RFC 7386 merge patch that turns old into new: changed and added
---fields, kube.null for removed ones, arrays replaced whole; {} when
---nothing changed.
---@param old table
---@param new table
---@return table patch
---@usage kube.patch(old, kube.merge_patch(old, new), "merge")
function _M.merge_patch(old, new)
  check_objects("kube.merge_patch", old, new)
  return diff(old, new)
end

-- equal(a, b) -> whether two decoded values are the same JSON value
-- (kube.controller's field predicates).
_M.equal = equal

-- Changes ------------------------------------------------------------------------

-- A path's next step: .name for a Lua identifier, ["key"] for any other
-- key (labels such as "app.kubernetes.io/name"), [i] for an array index.
local function step(path, k)
  if type(k) == "number" then return format("%s[%d]", path, k) end
  if k:find("^[%a_][%w_]*$") then return path == "" and k or path .. "." .. k end
  return format("%s[%q]", path, k)
end

local function changes(out, path, old, new)
  if equal(old, new) then return end
  if is_object(old) and is_object(new) and (next(old) ~= nil or next(new) ~= nil) then
    local keys = {}
    for k in pairs(old) do keys[#keys + 1] = tostring(k) end
    for k in pairs(new) do
      if old[k] == nil then keys[#keys + 1] = tostring(k) end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local ov, nv = old[k], new[k]
      if not present(ov) and present(nv) then
        out[#out + 1] = { op = "add", path = step(path, k), new = nv }
      elseif present(ov) and not present(nv) then
        out[#out + 1] = { op = "remove", path = step(path, k), old = ov }
      elseif present(ov) then
        changes(out, step(path, k), ov, nv)
      end
    end
  elseif type(old) == "table" and type(new) == "table" and not is_object(old)
      and not is_object(new) then
    local n = math.max(#old, #new)
    for i = 1, n do
      if old[i] == nil then
        out[#out + 1] = { op = "add", path = step(path, i), new = new[i] }
      elseif new[i] == nil then
        out[#out + 1] = { op = "remove", path = step(path, i), old = old[i] }
      else
        changes(out, step(path, i), old[i], new[i])
      end
    end
  else
    out[#out + 1] = { op = "replace", path = path, old = old, new = new }
  end
end

-- diff(old, new) -> the list of changes that turn object old into new,
-- each { op = "add" | "remove" | "replace", path, old, new } (old absent
-- for an add, new for a remove), in the order of the paths' keys. A path
-- is Lua-like, from the object's root: "spec.replicas",
-- 'metadata.labels["app.kubernetes.io/name"]' (a key that is no
-- identifier is quoted), "spec.containers[1].image" (arrays compared by
-- index, from 1; an element past the shorter one's end is an add or a
-- remove). Objects are compared key by key, a change of type (an object
-- for a string, an array for an object) is one replace, and kube.null
-- counts as absent. {} when they are equal.
---The changes that turn object old into new, each {op = "add" | "remove" |
---"replace", path, old, new}, paths Lua-like ("spec.replicas",
---'metadata.labels["app.kubernetes.io/name"]', "spec.containers[1].image");
---{} when they are equal.
---@param old table
---@param new table
---@return table[] changes
---@usage
--- for _, c in ipairs(kube.diff(ev.old, ev.object)) do
---   kube.log.info("changed", { path = c.path, op = c.op })
--- end
function _M.diff(old, new)
  check_objects("kube.diff", old, new)
  local out = {}
  changes(out, "", old, new)
  return out
end

-- kube exports these under the same names.
_M.exports = { "key", "controller_of", "set_controller_reference", "has_finalizer",
  "add_finalizer", "remove_finalizer", "patch_add_finalizer", "patch_remove_finalizer",
  "is_being_deleted", "get_condition", "is_condition_true", "set_condition", "merge_patch",
  "diff" }

return _M
