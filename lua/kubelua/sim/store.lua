-- kubelua.sim.store: the simulator's state and the API semantics on it —
-- resources (built-in and CRD-defined), objects, the one global
-- resourceVersion counter, each resource's bounded event history, watchers,
-- and the verbs (get, list, create, update, patch, delete,
-- deletecollection) with the errors a real apiserver gives.
--
-- Objects are kept as entries { obj, json, key, ns, name, rv }: obj is the
-- decoded table (never changed once stored: every change builds a new
-- one), json its compact encoding with kind and apiVersion, made once per
-- change, so a list or a watch event copies bytes and never re-encodes.
-- json is a kubelua.httpd bytes value (see lua_httpd.c for why not a
-- string): req:write takes it as it is, tostring() makes it a string.
-- Each watch event line is built once and written to every watcher.
-- Failures are returned as nil, status where status is a Status table.
--
-- This file holds the store itself, its objects and how they are stored
-- (put, put_json); each other concern is a file of kubelua.sim.store.*:
-- errors (Status bodies), encode (entries and their JSON), history (event
-- history, watchers), resources (the served resources, CRDs), defaults and
-- validate (what a body gets and what it is refused for), verbs, scale,
-- apply and list. Their methods are the Store's.

-- luacheck: ignore 212/self

local json = require "kubelua.json"
local errors = require "kubelua.sim.store.errors"
local entries = require "kubelua.sim.store.encode"
local history = require "kubelua.sim.store.history"
local checks = require "kubelua.sim.store.validate"
local listing = require "kubelua.sim.store.list"
local verbs = require "kubelua.sim.store.verbs"
local scaling = require "kubelua.sim.store.scale"
local apply = require "kubelua.sim.store.apply"
local served = require "kubelua.sim.store.resources"

local type, pairs, ipairs, tostring, tonumber, setmetatable =
  type, pairs, ipairs, tostring, tonumber, setmetatable
local sort = table.sort
local floor = math.floor
local decode = json.decode
local copy = require("kubelua.sim.util").copy
local status, not_found, bad_request = errors.status, errors.not_found, errors.bad_request
local obj_key, new_entry, make_entry = entries.obj_key, entries.new_entry, entries.make_entry

local _M = {}
local Store = {}
Store.__index = Store

function _M.new(opts)
  local self = setmetatable({ opts = opts or {} }, Store)
  self.history_size = self.opts.history_size or 10000
  local size = self.history_size
  if type(size) ~= "number" or size < 1 or size % 1 ~= 0 then
    error("sim: history_size must be a whole number of events, at least 1, got "
      .. tostring(size), 2)
  end
  self:reset()
  return self
end

-- Objects ------------------------------------------------------------------------

function Store:next_rv()
  self.rv = self.rv + 1
  return self.rv
end

-- Files entry e under its key (takes it out for DELETED) and emits the
-- event.
local function file_entry(self, res, e, etype, prev)
  local objects = res.objects
  if etype == "DELETED" then
    if objects[e.key] then
      objects[e.key] = nil
      res.count = res.count - 1
      res.sorted = nil
    end
  else
    if not objects[e.key] then
      res.count = res.count + 1
      res.sorted = nil
    end
    objects[e.key] = e
  end
  self:emit(res, etype, e, prev)
  return e
end

local function is_crd_resource(res)
  return res.name == "customresourcedefinitions" and res.group == "apiextensions.k8s.io"
end

local function store_one(self, res, obj, etype, prev)
  return file_entry(self, res, make_entry(obj, res, prev), etype, prev)
end

-- A CRD that converts through a webhook keeps its objects in its storage
-- version s alone; each other version's cache gets the event through its
-- conversion task (kubelua.sim.conversion), later. Returns the entry
-- stored, or for a write through another version obj's entry there.
local function put_converted(self, conv, s, res, obj, etype)
  local sobj = obj
  if res ~= s then
    sobj = conv:stored_form(obj, s)
    if not sobj then
      sobj = copy(obj)
      sobj.apiVersion = s.gv
    end
  end
  local md = sobj.metadata
  local sprev = s.objects[obj_key(md.namespace, md.name)]
  local e = store_one(self, s, sobj, etype, sprev)
  for _, m in ipairs(s.mirrors) do conv:enqueue(s, m.res, e) end
  local observe = self.observe
  if observe then observe(s, e, etype, sprev) end
  if res == s then return e end
  return make_entry(obj, res)
end

-- Stores obj (its resourceVersion set) and emits the event. A resource
-- served through other APIs too (Events in two groups, a CRD's versions)
-- stores each one's form as well, with the same resourceVersion, but for
-- a CRD that converts through a webhook (put_converted). Then
-- store.observe, when set (the control plane: kubelua.sim.controllers),
-- sees the change as observe(res, entry, etype, prev); it may not write.
function Store:put(res, obj, etype, prev)
  local conv = self.conversion
  local s = conv and res.crd and conv:storage_of(res)
  if s then return put_converted(self, conv, s, res, obj, etype) end
  if res.canon then obj = res.canon(obj) end
  local e = store_one(self, res, obj, etype, prev)
  for _, m in ipairs(res.mirrors or {}) do
    store_one(self, m.res, m.convert(obj), etype, m.res.objects[e.key])
  end
  if is_crd_resource(res) then
    self:crd_changed(obj, etype)
  end
  local observe = self.observe
  if observe then observe(res, e, etype, prev) end
  return e
end

-- Files obj in the cache res (a CRD's version that its storage version's
-- conversion fills: kubelua.sim.conversion) as the event etype, for its
-- watchers; no one else observes it.
function Store:put_cached(res, obj, etype)
  local md = obj.metadata
  return store_one(self, res, obj, etype, res.objects[obj_key(md.namespace, md.name)])
end

-- An entry made from JSON decodes its object when first asked for it.
local lazy_entry = { __index = function(e, k)
  if k ~= "obj" then return nil end
  local obj = assert(decode(e.json))
  e.obj = obj
  return obj
end }

-- Whether entry e was stored as JSON bytes (put_json), decoded or not.
function _M.from_bytes(e) return getmetatable(e) == lazy_entry end

-- Stores an object given as its compact JSON (a string, kind and
-- apiVersion included, metadata.resourceVersion set from next_rv) and
-- emits the event: the path for writers that already hold the bytes
-- (benchmarks, replays). Only the metadata is read; the table is decoded
-- when something asks for it (a selector, a patch, a list). Resources that
-- keep a second form (Events) or define others (CRDs) need put's tables.
-- store.observe sees it as it sees put's.
function Store:put_json(res, body, etype, prev)
  if res.canon or res.mirrors or is_crd_resource(res) then
    error("put_json: " .. res.name .. " must be stored from tables (put)", 2)
  end
  -- the previous version's namespace and name strings serve again
  local ns, name, rv = json.meta(body, prev and prev.ns, prev and prev.name)
  if not ns then error("put_json: " .. name, 2) end
  if name == "" then error("put_json: the object has no metadata.name", 2) end
  rv = tonumber(rv)
  if not rv or rv ~= floor(rv) or rv > self.rv then
    error("put_json: metadata.resourceVersion must come from next_rv", 2)
  end
  local e = new_entry()
  e.obj = nil -- decoded when asked for (lazy_entry)
  -- a new version of the same object keeps its key (no concatenation)
  local key = prev and prev.name == name and prev.ns == ns and prev.key or obj_key(ns, name)
  e.json, e.name, e.ns, e.rv, e.key, e.res = body, name, ns, rv, key, res
  setmetatable(e, lazy_entry)
  file_entry(self, res, e, etype, prev)
  local observe = self.observe
  if observe then observe(res, e, etype, prev) end
  return e
end

function Store:get(res, ns, name)
  local e = res.objects[obj_key(ns, name)]
  if not e then return nil, not_found(res, name) end
  return e
end

function Store:sorted_keys(res)
  if not res.sorted then
    local keys = {}
    for k in pairs(res.objects) do keys[#keys + 1] = k end
    sort(keys)
    res.sorted = keys
  end
  return res.sorted
end

-- The store's other methods are written by concern in
-- kubelua.sim.store.*; each module's methods are copied into Store, so
-- that a call finds its method in the one table; a name defined twice
-- (here or by two of them) is a mistake.
local function mix(m)
  for k, f in pairs(m.methods) do
    if Store[k] then error("sim.store: method " .. k .. " is defined twice") end
    Store[k] = f
  end
end
mix(history)
mix(listing)
mix(verbs)
mix(scaling)
mix(apply)
mix(served)

_M.status = status
_M.write_event = history.write_event
_M.matches = history.matches
_M.watch = history.watch
_M.unwatch = history.unwatch
_M.deliver = history.deliver
_M.unknown_fields = checks.unknown_fields
_M.decode_body = checks.decode_body
_M.decode_yaml_body = checks.decode_yaml_body
_M.filters = listing.filters
_M.join = listing.join
_M.manager_of = verbs.manager_of
_M.item_json = entries.item_json
_M.selector_string = scaling.selector_string
_M.obj_key = obj_key
_M.make_entry = make_entry
_M.not_found = not_found
_M.bad_request = bad_request
_M.undecodable = errors.undecodable
_M.namespace_mismatch = errors.namespace_mismatch
_M.invalid = errors.invalid
return _M
