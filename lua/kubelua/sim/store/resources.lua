-- kubelua.sim.store.resources: the resources a store serves, by group
-- version: the built-in ones (kubelua.sim.resources) and those a CRD
-- defines, which its changes add, update and remove, each served version
-- storing the same objects in its own apiVersion. Methods of the store
-- (kubelua.sim.store mixes them in).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local builtins = require "kubelua.sim.resources"
local events = require "kubelua.sim.events"
local hpa = require "kubelua.sim.hpa"
local entries = require "kubelua.sim.store.encode"
local scaling = require "kubelua.sim.store.scale"

local type, pairs, ipairs = type, pairs, ipairs
local sort, remove = table.sort, table.remove
local sub, format = string.sub, string.format
local null, is_array = json.null, json.is_array
local copy = util.copy
local make_entry = entries.make_entry
local path_names = scaling.path_names

local _M = {}
local Store = {}
_M.methods = Store

local function is_object(v) return type(v) == "table" and not is_array(v) end

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
  for _, r in ipairs(builtins.builtins()) do self:add_resource(r) end
  local core, v1 = self:resource("v1", "events"), self:resource("events.k8s.io/v1", "events")
  core.mirrors, core.canon = { { res = v1, convert = events.to_v1 } }, events.canon_core
  v1.mirrors, v1.canon = { { res = core, convert = events.to_core } }, events.canon_v1
  local hpa1 = self:resource("autoscaling/v1", "horizontalpodautoscalers")
  local hpa2 = self:resource("autoscaling/v2", "horizontalpodautoscalers")
  hpa1.mirrors, hpa1.canon = { { res = hpa2, convert = hpa.to_v2 } }, hpa.canon_v1
  hpa2.mirrors, hpa2.canon = { { res = hpa1, convert = hpa.to_v1 } }, hpa.canon_v2
  -- the field manager counts what an HPA's round trip through the other
  -- version fills in (v1's targetCPUUtilizationPercentage from v2's
  -- default metric), not an Event's empty fields
  hpa1.managed_canon, hpa2.managed_canon = true, true
  builtins.link_versions(self)
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
  -- discovery's storageVersionHash: the first 8 bytes of SHA-256 of
  -- group/storage version/kind, as the real server hashes them
  local storage = ""
  for _, v in ipairs(spec.versions or {}) do
    if v.storage then storage = v.name end
  end
  local hash = util.b64encode(sub(util.sha256(format("%s/%s/%s", group, storage,
    spec.names.kind)), 1, 8))
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
        storageVersionHash = hash }
      if is_array(names.shortNames) and #names.shortNames > 0 then
        disco.shortNames = names.shortNames
      end
      if is_array(names.categories) and #names.categories > 0 then
        disco.categories = names.categories
      end
      local r = { group = group, version = v.name, gv = group .. "/" .. v.name, name = plural,
        kind = names.kind, list_kind = names.listKind or names.kind .. "List",
        namespaced = namespaced, status = subs.status ~= nil, generation = true,
        builtin = false, crd = obj.metadata.name, fields = builtins.common_fields,
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

return _M
