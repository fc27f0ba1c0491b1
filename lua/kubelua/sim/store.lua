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

-- luacheck: ignore 212/self

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local resources = require "kubelua.sim.resources"
local events = require "kubelua.sim.events"
local errors = require "kubelua.sim.store.errors"
local entries = require "kubelua.sim.store.encode"
local history = require "kubelua.sim.store.history"
local checks = require "kubelua.sim.store.validate"
local listing = require "kubelua.sim.store.list"
local verbs = require "kubelua.sim.store.verbs"
local scaling = require "kubelua.sim.store.scale"
local apply = require "kubelua.sim.store.apply"

local type, pairs, ipairs, tostring, tonumber, setmetatable =
  type, pairs, ipairs, tostring, tonumber, setmetatable
local sort, remove = table.sort, table.remove
local sub = string.sub
local floor = math.floor
local decode, null, is_array = json.decode, json.null, json.is_array
local copy = util.copy
local status, not_found, bad_request = errors.status, errors.not_found, errors.bad_request
local obj_key, new_entry, make_entry = entries.obj_key, entries.new_entry, entries.make_entry
local path_names = scaling.path_names

local _M = {}
local Store = {}
Store.__index = Store

-- The store's methods are written by concern in kubelua.sim.store.*; each
-- module's methods are copied into Store, so that a call finds its method
-- in the one table.
local function mix(m)
  for k, f in pairs(m.methods) do Store[k] = f end
end
mix(history)
mix(listing)
mix(verbs)
mix(scaling)
mix(apply)

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- Resources -------------------------------------------------------------------

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

-- Forgets every object and starts resourceVersions again (an etcd
-- restore): the built-in resources and namespaces are back, CRDs are gone.
function Store:reset()
  if self.resources then
    for _, res in pairs(self.resources) do self:close_watchers(res) end
  end
  self.rv = self.opts.start_rv or 1
  self.compacted = 0
  self.resources = {} -- "gv/plural" → res
  self.crd_objects = {} -- CRD name → its objects while a change of it is made
  self.gvs = {}       -- gv → { group, version, list = {res...} }
  self.groups = {}    -- group → { versions in order }
  self.group_list = {}
  for _, r in ipairs(resources.builtins()) do self:add_resource(r) end
  local core, v1 = self:resource("v1", "events"), self:resource("events.k8s.io/v1", "events")
  core.mirrors, core.canon = { { res = v1, convert = events.to_v1 } }, events.canon_core
  v1.mirrors, v1.canon = { { res = core, convert = events.to_core } }, events.canon_v1
  resources.link_versions(self)
  -- (trusted: made here, so not decoded against a schema, which would
  -- load the core group's at every start)
  local system = { user_agent = "kube-apiserver", trusted = true }
  for _, ns in ipairs(self.opts.namespaces or { "default", "kube-system", "kube-public",
      "kube-node-lease" }) do
    self:create(self:resource("v1", "namespaces"), nil,
      { apiVersion = "v1", kind = "Namespace", metadata = { name = ns } }, system)
  end
  -- the Service every cluster has, for the apiserver itself
  if self:resource("v1", "namespaces").objects.default then
    self:create(self:resource("v1", "services"), "default", { apiVersion = "v1",
      kind = "Service", metadata = { name = "kubernetes", labels = { component = "apiserver",
        provider = "kubernetes" } }, spec = { clusterIP = "10.96.0.1", ports = json.array { {
          name = "https", port = 443, protocol = "TCP", targetPort = 6443 } } } }, system)
  end
end

function Store:add_resource(r)
  r.objects, r.count, r.sorted = {}, 0, nil
  -- the events hist_first .. hist_last (numbered from 1 since the last
  -- compaction) in a ring of history_size slots: Store:event(res, i)
  r.history, r.hist_first, r.hist_last = {}, 1, 0
  r.hist_start = self.rv
  r.last_rv = self.rv
  r.watchers, r.watch_list, r.nwatch = {}, {}, 0
  r.gr = r.group == "" and r.name or r.name .. "." .. r.group
  r.api_version = r.gv
  self.resources[r.gv .. "/" .. r.name] = r
  local g = self.gvs[r.gv]
  if not g then
    g = { group = r.group, version = r.version, list = {} }
    self.gvs[r.gv] = g
    if r.group ~= "" then
      local gr = self.groups[r.group]
      if not gr then
        gr = {}
        self.groups[r.group] = gr
        self.group_list[#self.group_list + 1] = r.group
      end
      gr[#gr + 1] = r.version
    end
  end
  g.list[#g.list + 1] = r
end

function Store:remove_resource(r)
  self:close_watchers(r)
  self.resources[r.gv .. "/" .. r.name] = nil
  local g = self.gvs[r.gv]
  if not g then return end
  for i, x in ipairs(g.list) do
    if x == r then remove(g.list, i) break end
  end
  if #g.list == 0 then
    self.gvs[r.gv] = nil
    local gr = self.groups[r.group]
    for i, v in ipairs(gr or {}) do
      if v == r.version then remove(gr, i) break end
    end
    if gr and #gr == 0 then
      self.groups[r.group] = nil
      for i, name in ipairs(self.group_list) do
        if name == r.group then remove(self.group_list, i) break end
      end
    end
  end
end

function Store:resource(gv, name) return self.resources[gv .. "/" .. name] end

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

-- Stores obj (its resourceVersion set) and emits the event. A resource
-- served through other APIs too (Events in two groups, a CRD's versions)
-- stores each one's form as well, with the same resourceVersion. Then
-- store.observe, when set (the control plane: kubelua.sim.controllers),
-- sees the change as observe(res, entry, etype, prev); it may not write.
function Store:put(res, obj, etype, prev)
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

-- CRDs ------------------------------------------------------------------------------

-- The objects of resource r, in key order.
local function objects_of(self, r)
  local objs = {}
  for _, k in ipairs(self:sorted_keys(r)) do objs[#objs + 1] = r.objects[k].obj end
  return objs
end

function Store:crd_changed(obj, etype)
  local spec = obj.spec
  if not is_object(spec) or not is_object(spec.names) then return end
  local group, plural = spec.group, spec.names.plural
  local crd = obj.metadata.name
  -- drop what this CRD served before; the objects of a version no longer
  -- served are kept aside (etcd keeps them) for the versions served next
  for key, r in pairs(self.resources) do
    if r.crd == crd then
      local still = false
      if etype ~= "DELETED" then
        for _, v in ipairs(spec.versions or {}) do
          if v.name == r.version and v.served ~= false then still = true end
        end
      end
      if not still then
        if r.count > 0 and not self.crd_objects[crd] then
          self.crd_objects[crd] = objects_of(self, r)
        end
        self:remove_resource(r)
        self.resources[key] = nil
      end
    end
  end
  if etype == "DELETED" then
    self.crd_objects[crd] = nil
    return
  end
  for _, v in ipairs(spec.versions or {}) do
    local had = self:resource(group .. "/" .. v.name, plural)
    -- a resource served by something else (a built-in, another CRD) stays
    if v.served ~= false and (not had or had.crd == obj.metadata.name) then
      local namespaced = spec.scope ~= "Cluster"
      local subs = is_object(v.subresources) and v.subresources or {}
      local names = spec.names
      local disco = { name = plural, singularName = names.singular or "",
        namespaced = namespaced, kind = names.kind,
        verbs = json.array { "delete", "deletecollection", "get", "list", "patch", "create",
          "update", "watch" },
        storageVersionHash = util.b64encode(sub(names.kind .. group .. "........", 1, 8)) }
      if is_array(names.shortNames) and #names.shortNames > 0 then
        disco.shortNames = names.shortNames
      end
      if is_array(names.categories) and #names.categories > 0 then
        disco.categories = names.categories
      end
      local r = { group = group, version = v.name, gv = group .. "/" .. v.name, name = plural,
        kind = names.kind, list_kind = names.listKind or names.kind .. "List",
        namespaced = namespaced, status = subs.status ~= nil, generation = true,
        builtin = false, crd = obj.metadata.name, fields = resources.common_fields,
        disco = { disco },
        schema = is_object(v.schema) and is_object(v.schema.openAPIV3Schema)
          and v.schema.openAPIV3Schema or nil }
      local scale = is_object(subs.scale) and subs.scale
      if scale then
        r.scale = true
        r.scale_paths = { spec = path_names(scale.specReplicasPath),
          status = path_names(scale.statusReplicasPath),
          selector = type(scale.labelSelectorPath) == "string"
            and path_names(scale.labelSelectorPath) or nil }
        r.disco[#r.disco + 1] = { name = plural .. "/scale", singularName = "",
          namespaced = namespaced, group = "autoscaling", version = "v1", kind = "Scale",
          verbs = json.array { "get", "patch", "update" } }
      end
      if r.status then
        r.disco[#r.disco + 1] = { name = plural .. "/status", singularName = "",
          namespaced = namespaced, kind = names.kind, verbs = json.array { "get", "patch",
            "update" } }
      end
      if had then
        -- an update of the CRD: the same objects, served as it says now
        for _, k in ipairs { "status", "scale", "scale_paths", "disco", "schema", "kind",
            "list_kind" } do
          had[k] = r[k]
        end
      else
        self:add_resource(r)
      end
    end
  end
  self:link_versions(obj.metadata.name)
end

-- The served versions of a CRD serve the same objects, each in its own
-- apiVersion (conversion None): a write through one is stored in every
-- one, and a version served anew starts with the objects the others hold.
function Store:link_versions(crd)
  local served = {}
  for _, r in pairs(self.resources) do
    if r.crd == crd then served[#served + 1] = r end
  end
  sort(served, function(a, b) return a.version < b.version end)
  -- a version without objects gets those of a version still served, else
  -- those kept aside
  local objs, empty, source = self.crd_objects[crd], false, nil
  for _, r in ipairs(served) do
    if r.count == 0 then empty = true else source = source or r end
  end
  if empty and source then objs = objects_of(self, source) end
  if #served > 0 then self.crd_objects[crd] = nil end
  for _, r in ipairs(served) do
    local gv = r.gv
    r.as_version = function(obj)
      -- through the CRD's conversion webhook (kubelua.sim.conversion)
      local o = self.conversion and self.conversion:stored_form(obj, r)
      if o then return o end
      o = copy(obj)
      o.apiVersion = gv
      return o
    end
    if objs and r.count == 0 then
      for _, obj in ipairs(objs) do
        local e = make_entry(r.as_version(obj), r)
        r.objects[e.key] = e
        r.count = r.count + 1
      end
      r.sorted = nil
    end
  end
  for _, r in ipairs(served) do
    local mirrors = {}
    for _, other in ipairs(served) do
      if other ~= r then mirrors[#mirrors + 1] = { res = other, convert = other.as_version } end
    end
    r.mirrors = #mirrors > 0 and mirrors or nil
  end
end

-- The CRD controller's part: NamesAccepted and Established, once.
function Store:establish(name)
  local res = self:resource("apiextensions.k8s.io/v1", "customresourcedefinitions")
  local e = res.objects[name]
  if not e or (is_object(e.obj.status) and e.obj.status.conditions ~= null
      and e.obj.status.conditions ~= nil) then
    return
  end
  local obj = copy(e.obj)
  local now = util.timestamp()
  local names = copy(obj.spec.names)
  obj.status = {
    conditions = json.array {
      { type = "NamesAccepted", status = "True", lastTransitionTime = now, reason = "NoConflicts",
        message = "no conflicts found" },
      { type = "Established", status = "True", lastTransitionTime = now,
        reason = "InitialNamesAccepted", message = "the initial names have been accepted" },
    },
    acceptedNames = names,
    storedVersions = obj.status and obj.status.storedVersions or json.array {},
  }
  self:commit(res, e, obj, { subresource = "status", user_agent = "kube-apiserver" })
end

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
_M.not_found = not_found
_M.bad_request = bad_request
_M.undecodable = errors.undecodable
_M.namespace_mismatch = errors.namespace_mismatch
_M.invalid = errors.invalid
return _M
