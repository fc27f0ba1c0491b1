-- kubelua.sim.gc: the garbage collector of kube-controller-manager, for
-- the simulator. An object whose owners (metadata.ownerReferences) are all
-- gone is deleted; an owner deleted with propagationPolicy Foreground
-- (finalizer foregroundDeletion) sees its dependents deleted first and
-- goes once none with blockOwnerDeletion is left; one deleted with Orphan
-- (finalizer orphan) sees its dependents lose their reference to it, then
-- goes. Background deletion is the first case: the owner goes at once and
-- its dependents after it.
--
-- Dependents are indexed by owner uid as they are written (only objects
-- that have ownerReferences enter the index), so no change ever makes the
-- collector look at objects other than the owner's own dependents. An
-- object a writer stores as JSON bytes (Store:put_json, the benchmarks'
-- path) is not looked into, except when it is deleted: its owners are
-- those of the version last stored as a table or text.

local json = require "kubelua.json"
local store_mod = require "kubelua.sim.store"
local util = require "kubelua.sim.util"

local type, pairs, ipairs, next, rawget, setmetatable, tostring, error =
  type, pairs, ipairs, next, rawget, setmetatable, tostring, error
local find = string.find
local sort = table.sort
local is_array = json.is_array
local copy = util.copy
local obj_key = store_mod.obj_key

local _M = {}
local GC = {}
GC.__index = GC

local CTX = { user_agent = "kube-controller-manager" }

-- new(store, defer) -> the collector; defer(id, controller, fn) runs fn on
-- a later turn of the loop (kubelua.sim.controllers).
function _M.new(store, defer)
  local self = setmetatable({ store = store, defer = defer }, GC)
  self:forget()
  return self
end

-- Starts an empty index (a new store or a reset one).
function GC:forget()
  self.resources = self.store.resources
  self.owners = {}     -- res → { key → owner_uids }: each dependent's owners
  self.dependents = {} -- owner uid → { res → { key → true } }
  self.waiting = {}    -- owner uid → { res, key }: in foreground deletion
end

local function has(list, x)
  if not is_array(list) then return false end
  for _, v in ipairs(list) do
    if v == x then return true end
  end
  return false
end

-- The owner uids of ownerReferences refs: nil for none, the uid itself
-- for one (most objects: no table per indexed object), else a list.
local function owner_uids(refs)
  if not is_array(refs) or #refs == 0 then return nil end
  local uids = {}
  for _, ref in ipairs(refs) do
    if type(ref) == "table" and type(ref.uid) == "string" then uids[#uids + 1] = ref.uid end
  end
  if #uids < 2 then return uids[1] end
  return uids
end

local NONE = {}

-- owner_uids' value as a list.
local function uid_list(u)
  if u == nil then return NONE end
  if type(u) == "string" then return { u } end
  return u
end

local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

-- Moves the dependent res/key from the owners `before` to `after`.
function GC:reindex(res, key, before, after)
  local deps = self.dependents
  for _, uid in ipairs(uid_list(before)) do
    local d = deps[uid]
    local keys = d and d[res]
    if keys then
      keys[key] = nil
      if next(keys) == nil then d[res] = nil end
      if next(d) == nil then deps[uid] = nil end
    end
  end
  for _, uid in ipairs(uid_list(after)) do
    local d = deps[uid]
    if not d then
      d = {}
      deps[uid] = d
    end
    local keys = d[res]
    if not keys then
      keys = {}
      d[res] = keys
    end
    keys[key] = true
  end
  local by_res = self.owners[res]
  if not by_res then
    by_res = {}
    self.owners[res] = by_res
  end
  by_res[key] = after
end

-- The order the control plane walks objects in, { res, key } each: by
-- resource, then key, so that what it does is the same from run to run.
function _M.by_place(a, b)
  if a.res ~= b.res then return a.res.gv .. "/" .. a.res.name < b.res.gv .. "/" .. b.res.name end
  return a.key < b.key
end

-- The dependents of owner uid as a sorted list of { res, key }.
function GC:dependents_of(uid)
  local list = {}
  for res, keys in pairs(self.dependents[uid] or {}) do
    for key in pairs(keys) do list[#list + 1] = { res = res, key = key } end
  end
  sort(list, _M.by_place)
  return list
end

-- store.observe: indexes the change and notes the work it calls for.
function GC:observe(res, e, etype)
  if self.resources ~= self.store.resources then self:forget() end
  local by_res = self.owners[res]
  local before = by_res and by_res[e.key]
  local obj = rawget(e, "obj")
  if obj == nil then -- an entry stored as JSON: decoded only when it may matter
    local body = e.json
    if type(body) ~= "string" then -- bytes: a writer's fast path, not looked into
      if etype ~= "DELETED" then return end
      if next(self.dependents) == nil then
        if before then self:reindex(res, e.key, before, nil) end
        return
      end
    elseif not before and not find(body, '"ownerReferences"', 1, true)
        and not find(body, '"finalizers"', 1, true)
        and (etype ~= "DELETED" or next(self.dependents) == nil) then
      return
    end
    obj = e.obj
  end
  local md = obj.metadata
  local after = etype ~= "DELETED" and owner_uids(md.ownerReferences) or nil
  if not same(before, after) then
    self:reindex(res, e.key, before, after)
    if after then self:note_dependent(res, e.key) end
  end
  if etype == "DELETED" then
    local uid = md.uid
    if uid and self.dependents[uid] then
      for _, d in ipairs(self:dependents_of(uid)) do self:note_dependent(d.res, d.key) end
    end
    if uid then self.waiting[uid] = nil end
    for _, u in ipairs(uid_list(before)) do -- an owner in foreground deletion may go now
      local w = self.waiting[u]
      if w then self:note_owner(w.res, w.key) end
    end
  elseif md.deletionTimestamp and (has(md.finalizers, "orphan")
      or has(md.finalizers, "foregroundDeletion")) then
    self:note_owner(res, e.key)
  end
end

local function live(self, res)
  return self.store:resource(res.gv, res.name) == res
end

function GC:note_dependent(res, key)
  self.defer("gc dependent " .. res.gv .. "/" .. res.name .. " " .. key, "garbagecollector",
    function() if live(self, res) then self:attempt_dependent(res, key) end end)
end

function GC:note_owner(res, key)
  self.defer("gc owner " .. res.gv .. "/" .. res.name .. " " .. key, "garbagecollector",
    function() if live(self, res) then self:attempt_owner(res, key) end end)
end

-- What became of the owner ref names for a dependent in namespace ns:
-- "absent" (no such object, or another uid), "waiting" (in foreground
-- deletion), "solid", or "unknown" (a kind the server does not serve: it
-- may yet, so the reference is left alone).
function GC:owner_state(ref, ns)
  local g = type(ref) == "table" and type(ref.apiVersion) == "string"
    and self.store.gvs[ref.apiVersion]
  local r
  for _, x in ipairs(g and g.list or {}) do
    if x.kind == ref.kind then
      r = x
      break
    end
  end
  if not r then return "unknown" end
  local e = type(ref.name) == "string" and r.objects[obj_key(r.namespaced and ns or nil, ref.name)]
  if not e or e.obj.metadata.uid ~= ref.uid then return "absent" end
  local md = e.obj.metadata
  if md.deletionTimestamp and has(md.finalizers, "foregroundDeletion") then return "waiting" end
  return "solid"
end

-- A dependent whose owners may be gone: deleted when none is left
-- (Foreground when an owner waits for it and it has dependents itself,
-- else as its own finalizers say, else Background); with a live owner
-- left, its references to the others are removed.
function GC:attempt_dependent(res, key)
  local e = res.objects[key]
  if not e then return end
  local md = e.obj.metadata
  local refs = md.ownerReferences
  if not is_array(refs) then return end
  local solid, waiting, gone = false, false, {}
  for _, ref in ipairs(refs) do
    local st = type(ref) == "table" and type(ref.uid) == "string"
      and self:owner_state(ref, e.ns) or "unknown"
    if st == "solid" or st == "unknown" then
      solid = true
    else
      gone[ref.uid] = true
      waiting = waiting or st == "waiting"
    end
  end
  if next(gone) == nil then return end
  if solid then
    self:drop_refs(res, e, gone)
    return
  end
  if md.deletionTimestamp then return end
  local policy = "Background"
  if waiting and self.dependents[md.uid] then
    policy = "Foreground"
  elseif has(md.finalizers, "orphan") then
    policy = "Orphan"
  elseif has(md.finalizers, "foregroundDeletion") then
    policy = "Foreground"
  end
  self.store:delete(res, e.ns ~= "" and e.ns or nil, e.name,
    { propagationPolicy = policy, preconditions = { uid = md.uid } }, CTX)
end

-- Removes from dependent e the ownerReferences to the uids in `gone`.
function GC:drop_refs(res, e, gone)
  local obj = copy(e.obj)
  local keep = json.array {}
  for _, ref in ipairs(obj.metadata.ownerReferences) do
    if not gone[ref.uid] then keep[#keep + 1] = ref end
  end
  obj.metadata.ownerReferences = #keep > 0 and keep or nil
  local _, err = self.store:commit(res, e, obj, CTX)
  if err then error("removing ownerReferences of " .. e.key .. ": " .. tostring(err.message)) end
end

local function blocks(obj, uid)
  for _, ref in ipairs(obj.metadata.ownerReferences or {}) do
    if ref.uid == uid and ref.blockOwnerDeletion == true then return true end
  end
  return false
end

-- An owner being deleted with the finalizer orphan (its dependents lose
-- their reference to it, then the finalizer goes) or foregroundDeletion
-- (its dependents are deleted; the finalizer goes once none that blocks
-- its deletion is left).
function GC:attempt_owner(res, key)
  local e = res.objects[key]
  if not e then return end
  local md = e.obj.metadata
  local uid = md.uid
  if not md.deletionTimestamp then return end
  local s = self.store
  if has(md.finalizers, "orphan") then
    for _, d in ipairs(self:dependents_of(uid)) do
      local de = d.res.objects[d.key]
      if de then self:drop_refs(d.res, de, { [uid] = true }) end
    end
    s:finish_propagation(res, key, "orphan")
  elseif has(md.finalizers, "foregroundDeletion") then
    self.waiting[uid] = { res = res, key = key }
    local blocked = false
    for _, d in ipairs(self:dependents_of(uid)) do
      self:attempt_dependent(d.res, d.key)
      local de = d.res.objects[d.key]
      if de and blocks(de.obj, uid) then blocked = true end
    end
    if not blocked then
      self.waiting[uid] = nil
      s:finish_propagation(res, key, "foregroundDeletion")
    end
  end
end

-- At start: indexes the objects already stored (a --load) and notes each
-- dependent, so one whose owners are gone is collected.
function GC:sync()
  for _, res in pairs(self.store.resources) do
    for key, e in pairs(res.objects) do
      local obj = rawget(e, "obj")
      if obj == nil and type(e.json) == "string" and find(e.json, '"ownerReferences"', 1, true)
      then
        obj = e.obj
      end
      local uids = obj and owner_uids(obj.metadata.ownerReferences)
      if uids then
        self:reindex(res, key, nil, uids)
        self:note_dependent(res, key)
      end
    end
  end
end

return _M
