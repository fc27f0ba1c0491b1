-- kubelua.sim.store.verbs: the writes of the API on the store — create,
-- update (and the commit every change of a stored object ends in), patch
-- (merge, strategic merge, JSON patch; server-side apply is
-- kubelua.sim.store.apply's, the scale subresource
-- kubelua.sim.store.scale's), delete (finalizers, propagation, graceful
-- Pods, Terminating namespaces) — with the checks, defaults, managed
-- fields and admission a real apiserver applies, in its order. Methods of
-- the store (kubelua.sim.store mixes them in).

-- luacheck: ignore 212/self

local kube = require "kubelua"
local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local patchlib = require "kubelua.sim.patch"
local managed = require "kubelua.sim.managed"
local services = require "kubelua.sim.services"
local schemalib = require "kubelua.sim.schema"
local errors = require "kubelua.sim.store.errors"
local entries = require "kubelua.sim.store.encode"
local kinds = require "kubelua.sim.store.defaults"
local checks = require "kubelua.sim.store.validate"
local wdefaults = require "kubelua.sim.workloads.defaults"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local concat = table.concat
local format, find = string.format, string.find
local decode, null, is_array = json.decode, json.null, json.is_array
local copy, equal = util.copy, util.equal
local status, res_details, not_found, conflict, bad_request = errors.status,
  errors.res_details, errors.not_found, errors.conflict, errors.bad_request
local namespace_mismatch, stale, other_name = errors.namespace_mismatch, errors.stale,
  errors.other_name
local kind_label, invalid = errors.kind_label, errors.invalid
local obj_key, make_entry = entries.obj_key, entries.make_entry
local is_service = kinds.is_service
local spec_defaults, drop_empty_maps, defaults = kinds.spec_defaults, kinds.drop_empty_maps,
  kinds.defaults
local check_name, value_type, validate, field_validation = checks.check_name,
  checks.value_type, checks.validate, checks.field_validation
local check_decoding, validate_defaulted = checks.check_decoding, checks.validate_defaulted

local _M = {}
local Store = {}
_M.methods = Store

local function is_object(v) return type(v) == "table" and not is_array(v) end

local function manager_of(ctx)
  return ctx.field_manager or (ctx.user_agent and ctx.user_agent:match("^[^/]*")) or "unknown"
end

local function spec_of(obj)
  local t = {}
  for k, v in pairs(obj) do
    if k ~= "metadata" and k ~= "status" and k ~= "kind" and k ~= "apiVersion" then t[k] = v end
  end
  return t
end

-- The schema server-side apply and managedFields follow for res (nil:
-- none): a built-in kind's, or its CRD's.
local function managed_node(res)
  if res.builtin then return schemalib.checker(res) end
  return schemalib.custom(res.schema)
end

-- The other apiVersions res's objects are served in, for
-- kubelua.sim.managed's op.version: each one's schema and the conversion
-- into it (through a CRD's webhook, kubelua.sim.conversion: a review
-- each).
local function versions_of(self, res)
  return function(api_version)
    for _, m in ipairs(res.mirrors or {}) do
      if m.res.api_version == api_version then
        local conv = self.conversion
        local hook = conv and res.crd and conv:webhook_of(res)
        return { node = managed_node(m.res), convert = function(obj)
          if hook then return conv:convert(res, m.res, obj) end
          return m.convert(obj)
        end }
      end
    end
    return nil
  end
end

local function set_managed(self, res, old, new, ctx, operation, owned)
  if ctx.internal or ctx.apply then
    if old then new.metadata.managedFields = old.metadata.managedFields end
    return
  end
  local basis = new
  if ctx.unmutate then
    -- kube-apiserver's field manager runs before the mutating webhooks, so
    -- what their patches changed is no manager's: the fields are counted
    -- on the object as it was without those changes
    local back = patchlib.json_patch(new, ctx.unmutate)
    if back then
      basis = back
      spec_defaults(res, basis)
    end
  end
  -- the field manager sees the object as it is stored, converted back
  -- into the request's version (res.managed_canon: kubelua.sim.store.resources)
  if res.managed_canon then basis = res.canon(basis) end
  local mf, err = managed.update(old, basis, {
    manager = manager_of(ctx), operation = operation or "Update", api_version = res.api_version,
    time = util.timestamp(), subresource = ctx.subresource, custom = not res.builtin,
    has_status = res.status, owned = owned, node = managed_node(res),
    version = versions_of(self, res) })
  if not mf then
    -- as kube-apiserver's field manager fails (UpdateNoErrors): the
    -- object goes on without managedFields, said in the log
    kube.log.error("sim: managedFields dropped, an apiVersion's conversion failed",
      { resource = res.gr, name = new.metadata.name, error = type(err) == "table"
        and err.message or tostring(err) })
  end
  new.metadata.managedFields = mf and #mf > 0 and mf or nil
end

-- What the service registry allocates (cluster IP, node ports), given
-- the Services stored now.
local function allocate_service(res, obj, old, keep_status)
  local others = {}
  for _, e in pairs(res.objects) do others[#others + 1] = e.obj end
  local causes = services.allocate(obj, old, others, keep_status)
  return causes and invalid(res, obj.metadata.name, causes) or nil
end

-- The admission webhooks' word on a write that came over HTTP (ctx.admit;
-- the simulator's own changes are not admitted): kubelua.sim.admission,
-- which the simulator sets as store.admission. Phase "mutate" -> the
-- object as the mutating webhooks leave it; "validate" -> obj (old for a
-- DELETE); nil, status when one refuses. It may yield the request's task.
-- Phase "mutate" leaves in ctx.unmutate the JSON Patch that undoes what
-- the webhooks changed (set_managed's).
local function admit(self, phase, op, res, obj, old, ctx)
  local a = self.admission
  if not a or not ctx.admit then return obj or old end
  local out, err = a:admit(phase, op, res, obj, old, ctx)
  if phase == "mutate" then
    ctx.unmutate = nil
    if out and obj and out ~= obj and not equal(out, obj) then
      ctx.unmutate = require("kubelua.webhook").json_patch(out, obj)
    end
  end
  return out, err
end

-- A custom resource written over HTTP through a version other than its
-- CRD's storage version, about to be stored: converted into the storage
-- version through its conversion webhook (kubelua.sim.conversion, set as
-- store.conversion), which put then stores. e: the entry an update
-- starts from, whose object (the watch cache's) the registry converts
-- into the storage version first, as its state. true | nil, status. It
-- may yield the request's task.
local function convert_versions(self, res, obj, ctx, e)
  local c = self.conversion
  if not c or not ctx.admit or not res.mirrors then return true end
  if e and not ctx.dry_run and c:is_cache(res) then
    local state, err = c:encode(res, e.obj)
    if not state then return nil, err end
  end
  return c:prepare(res, obj)
end

-- A write's body as the decoder leaves it: checked, a copy whose unknown
-- fields ctx.field_validation handled, with the resource's kind and
-- apiVersion; or nil, status.
local function decoded(res, obj, ctx)
  local err = check_decoding(res, obj)
  if err then return nil, err end
  obj = copy(obj)
  err = field_validation(res, obj, ctx)
  if err then return nil, err end
  obj.kind, obj.apiVersion = res.kind, res.api_version
  return obj
end

-- create(res, ns, obj, ctx) -> entry | nil, status. ctx: user_agent,
-- field_manager, dry_run, internal, trusted (a body the simulator made:
-- no field validation).
function Store:create(res, ns, obj, ctx, operation, owned)
  ctx = ctx or {}
  local err
  obj, err = decoded(res, obj, ctx)
  if not obj then return nil, err end
  local md = obj.metadata
  if not is_object(md) then
    md = {}
    obj.metadata = md
  end
  if res.namespaced then
    if md.namespace ~= nil and md.namespace ~= "" and ns and md.namespace ~= ns then
      return nil, namespace_mismatch()
    end
    md.namespace = ns or md.namespace
  else
    md.namespace = nil
  end
  obj, err = admit(self, "mutate", "CREATE", res, obj, nil, ctx)
  if not obj then return nil, err end
  obj.kind, obj.apiVersion = res.kind, res.api_version
  if not is_object(obj.metadata) then obj.metadata = {} end
  md = obj.metadata
  if (md.name == nil or md.name == "") and type(md.generateName) == "string"
      and md.generateName ~= "" then
    md.name = md.generateName .. util.random_suffix()
  end
  err = check_name(res, md.name, md.generateName)
  if err then return nil, err end
  err = validate(res, obj)
  if err then return nil, err end
  if res.namespaced then
    local nsres = self:resource("v1", "namespaces")
    local nse = nsres.objects[md.namespace]
    if not nse then return nil, not_found(nsres, md.namespace) end
    if nse.obj.metadata.deletionTimestamp then
      return nil, status(403, "Forbidden", format('%s "%s" is forbidden: unable to create new '
        .. "content in namespace %s because it is being terminated", res.gr, md.name,
        md.namespace), res_details(res, md.name, { causes = json.array { {
        reason = "NamespaceTerminating", field = "metadata.namespace",
        message = format("namespace %s is being terminated", md.namespace) } } }))
    end
  end
  if res.status and not ctx.internal then obj.status = nil end
  md.uid = util.uid()
  md.creationTimestamp = util.timestamp()
  md.resourceVersion = nil
  md.generation = (res.generation or not res.builtin) and 1 or nil
  md.deletionTimestamp, md.deletionGracePeriodSeconds = nil, nil
  md.selfLink = nil
  md.managedFields = nil
  drop_empty_maps(res, obj)
  defaults(res, obj)
  err = validate_defaulted(res, obj)
  if err then return nil, err end
  set_managed(self, res, nil, obj, ctx, operation, owned)
  wdefaults.create_unowned(res, obj)
  if is_service(res) then
    err = allocate_service(res, obj, nil, ctx.internal)
    if err then return nil, err end
  end
  obj, err = admit(self, "validate", "CREATE", res, obj, nil, ctx)
  if not obj then return nil, err end
  local ok
  ok, err = convert_versions(self, res, obj, ctx)
  if not ok then return nil, err end
  -- storage refuses a name in use only after validation (and a Service's
  -- allocations) passed
  if res.objects[obj_key(md.namespace, md.name)] then
    return nil, status(409, "AlreadyExists", format('%s "%s" already exists', res.gr, md.name),
      res_details(res, md.name))
  end
  if res.gv == "v1" and res.name == "namespaces" then
    -- set by the namespace strategy, after field ownership is computed
    obj.spec = is_object(obj.spec) and obj.spec or {}
    obj.spec.finalizers = obj.spec.finalizers or json.array { "kubernetes" }
    obj.status = { phase = "Active" }
  end
  if ctx.dry_run then return make_entry(obj, res) end
  md.resourceVersion = tostring(self:next_rv())
  return self:put(res, obj, "ADDED")
end

-- A namespace stays, Terminating, while spec.finalizers (the namespace
-- controller's) are left, whatever its metadata.finalizers.
local function namespace_held(res, obj)
  return res.gv == "v1" and res.name == "namespaces" and is_object(obj.spec)
    and is_array(obj.spec.finalizers) and #obj.spec.finalizers > 0
end

-- Finishes a change from old entry e to obj (a new table): keeps what
-- clients may not change, defaults, bumps generation, stores and emits.
-- Returns the entry to answer with. ctx.internal: the simulator's own
-- change (no defaults, managed fields kept); ctx.apply: server-side apply,
-- whose managed fields commit_apply sets.
function Store:commit(res, e, obj, ctx)
  local old = e.obj
  local md, omd = obj.metadata, old.metadata
  md.uid, md.creationTimestamp = omd.uid, omd.creationTimestamp
  md.deletionTimestamp, md.deletionGracePeriodSeconds = omd.deletionTimestamp,
    omd.deletionGracePeriodSeconds
  md.name, md.namespace = omd.name, omd.namespace
  md.generation = omd.generation
  md.selfLink = nil
  drop_empty_maps(res, obj)
  if res.status then
    -- a CSR's approval writes its status too (kubelua.sim.subresources)
    if ctx.subresource == "status" or ctx.subresource == "approval" then
      local keep = copy(old)
      keep.status = obj.status
      keep.metadata = md
      obj = keep
      -- metadata changes through /status are ignored, except these
      md.labels, md.annotations = omd.labels, omd.annotations
      md.finalizers, md.ownerReferences = omd.finalizers, omd.ownerReferences
    else
      obj.status = old.status
    end
  end
  md.managedFields = omd.managedFields
  if omd.deletionTimestamp then
    local had = {}
    for _, f in ipairs(omd.finalizers or {}) do had[f] = true end
    local new = {}
    for _, f in ipairs(md.finalizers ~= null and md.finalizers or {}) do
      if not had[f] then new[#new + 1] = format("%q", f) end
    end
    if #new > 0 then
      local msg = "Forbidden: no new finalizers can be added if the object is being deleted, "
        .. "found new finalizers []string{" .. concat(new, ", ") .. "}"
      local c = { field = "metadata.finalizers", reason = "FieldValueForbidden", message = msg }
      return nil, invalid(res, omd.name, { c, c })
    end
  end
  if not ctx.internal then
    spec_defaults(res, obj)
    local err = is_service(res) and ctx.subresource ~= "status"
      and allocate_service(res, obj, old) or validate_defaulted(res, obj, old)
    if err then return nil, err end
  end
  if (res.generation or not res.builtin) and not equal(spec_of(obj), spec_of(old)) then
    md.generation = (omd.generation or 0) + 1
  end
  if ctx.admit and self.admission then
    local err
    obj, err = admit(self, "validate", "UPDATE", res, obj, old, ctx)
    if not obj then return nil, err end
    md = obj.metadata
    local ok
    ok, err = convert_versions(self, res, obj, ctx, e)
    if not ok then return nil, err end
    -- the webhooks took time: a change made meanwhile wins ("raced": a
    -- write without a resourceVersion of its own is tried again)
    if res.objects[e.key] ~= e then return nil, stale(res, omd.name), "raced" end
  end
  md.resourceVersion = omd.resourceVersion
  -- An update that changes nothing is no change: same resourceVersion, no event.
  local without = copy(obj)
  without.metadata.managedFields = nil
  local before = copy(old)
  before.metadata.managedFields = nil
  if equal(without, before) then
    -- what it would write is what the state holds: through another
    -- version the registry reads the storage again before it answers
    local c = self.conversion
    if ctx.admit and not ctx.dry_run and c and res.crd and c:is_cache(res) then
      local now, err = c:decode(res, e.key)
      if not now then return nil, err end
    end
    return e
  end
  set_managed(self, res, old, obj, ctx)
  if ctx.dry_run then return make_entry(obj, res) end
  if omd.deletionTimestamp and (md.finalizers == nil or md.finalizers == null
      or #md.finalizers == 0) and not namespace_held(res, obj) then
    -- the last finalizer went: the object goes; the answer keeps the old rv
    local gone = copy(old)
    gone.metadata.resourceVersion = tostring(self:next_rv())
    self:put(res, gone, "DELETED", e)
    return make_entry(obj, res)
  end
  md.resourceVersion = tostring(self:next_rv())
  return self:put(res, obj, "MODIFIED", e)
end

-- update(res, ns, name, obj, ctx) -> entry, created | nil, status. A
-- resource that allows it (Leases, Events) is created by an update of a
-- missing name, whatever resourceVersion the body says.
function Store:update(res, ns, name, obj, ctx)
  ctx = ctx or {}
  local err
  obj, err = decoded(res, obj, ctx)
  if not obj then return nil, err end
  if not is_object(obj.metadata) then obj.metadata = {} end
  local md = obj.metadata
  if md.name ~= nil and md.name ~= name then
    return nil, other_name(tostring(md.name), name)
  end
  if res.namespaced and md.namespace ~= nil and md.namespace ~= "" and md.namespace ~= ns then
    return nil, bad_request("the namespace of the provided object does not match the namespace "
      .. "sent on the request")
  end
  -- the request's, as kube-apiserver's handler fills it in before the
  -- admission webhooks see the object (their namespaceSelector with it)
  if res.namespaced then md.namespace = ns end
  local e
  e, err = self:get(res, ns, name)
  if not e and res.create_on_update and not ctx.subresource then
    -- a create (201): its checks say again what the update's said
    md.resourceVersion = nil
    ctx.warnings = nil
    e, err = self:create(res, ns, obj, ctx)
    return e, err, e ~= nil
  end
  if not e then return nil, err end
  local rv = md.resourceVersion
  if rv ~= nil and rv ~= "" and rv ~= e.obj.metadata.resourceVersion then
    return nil, stale(res, name)
  end
  if (rv == nil or rv == "") and not res.builtin then
    return nil, invalid(res, name, { { field = "metadata.resourceVersion",
      reason = "FieldValueInvalid",
      message = "Invalid value: 0x0: must be specified for an update" } })
  end
  obj, err = admit(self, "mutate", "UPDATE", res, obj, e.obj, ctx)
  if not obj then return nil, err end
  err = validate(res, obj)
  if err then return nil, err end
  return self:commit(res, e, obj, ctx)
end

local patch_types = {
  ["application/merge-patch+json"] = "merge",
  ["application/json-patch+json"] = "json",
  ["application/strategic-merge-patch+json"] = "strategic",
  ["application/apply-patch+yaml"] = "apply",
  ["application/apply-patch+json"] = "apply",
}

-- The kind of patch a Content-Type names, or nil.
local function patch_type(content_type)
  return patch_types[(content_type or ""):match("^[^;%s]*")]
end

local function rejected()
  return status(422, "Invalid", "the server rejected our request due to an error in our request",
    {})
end

-- The object doc with the patch `body` of type ptype ("merge",
-- "strategic" or "json") applied, or nil, the Status a real server sends;
-- node: the schema a strategic merge patch follows (nil: none).
local function patched(doc, ptype, body, node)
  local p, derr = decode(body)
  if p == nil then
    -- the strategic merge patch handler says it without the prefix
    local why = util.go_syntax_error(body, derr)
    return nil, bad_request(ptype == "strategic" and why or "error decoding patch: " .. why)
  end
  local obj, why
  if ptype == "merge" or ptype == "strategic" then
    if not is_object(p) then return nil, bad_request("error decoding patch: not an object") end
    local code
    if ptype == "merge" then
      obj = patchlib.merge(doc, p)
    else
      obj, why, code = patchlib.strategic(doc, p, node)
    end
    if not obj and code == 400 then return nil, bad_request(why) end
    if not obj then return nil, status(code, nil, why) end
  else
    if not is_array(p) then
      return nil, bad_request("error decoding patch: json: cannot unmarshal " .. value_type(p)
        .. " into Go value of type []handlers.jsonPatchOp")
    end
    obj, why = patchlib.json_patch(doc, p)
    if not obj then
      if why == "malformed" then
        return nil, bad_request("error decoding patch: json: cannot unmarshal into Go value of "
          .. "type []handlers.jsonPatchOp")
      end
      return nil, rejected()
    end
  end
  if not is_object(obj) or not is_object(obj.metadata) then return nil, rejected() end
  return obj
end

-- patch(res, ns, name, content_type, body, ctx) -> entry, created | nil, status
-- Tries a patch again, on the object as it is now, while it loses the race
-- with another write that came in as the admission webhooks were asked, as
-- kube-apiserver's GuaranteedUpdate does; unless the patch names a
-- resourceVersion, which is then a precondition that failed.
local RETRIES = 5

local function retried(body, fn)
  local pinned = type(body) == "string" and find(body, '"resourceVersion"', 1, true)
  for _ = 1, RETRIES do
    local r, err, more = fn() -- more: "raced", or a create's created
    if r ~= nil or more ~= "raced" or pinned then return r, err, more end
  end
  return fn()
end

function Store:patch(res, ns, name, content_type, body, ctx)
  return retried(body, function()
    return self:patch_once(res, ns, name, content_type, body, ctx)
  end)
end

function Store:patch_once(res, ns, name, content_type, body, ctx)
  ctx = ctx or {}
  local ptype = patch_type(content_type)
  if not ptype or (ptype == "strategic" and not res.builtin) then
    if res.builtin then
      return nil, status(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
    end
    return nil, status(415, "UnsupportedMediaType", "the body of the request was in an unknown "
      .. "format - accepted media types include: application/json-patch+json, "
      .. "application/merge-patch+json, application/apply-patch+yaml")
  end
  if ptype == "apply" then return self:apply(res, ns, name, body, ctx) end
  local e, err = self:get(res, ns, name)
  if not e then return nil, err end
  local obj
  obj, err = patched(e.obj, ptype, body, res.builtin and schemalib.checker(res) or nil)
  if not obj then return nil, err end
  local md = obj.metadata
  if md.resourceVersion ~= nil and md.resourceVersion ~= e.obj.metadata.resourceVersion then
    return nil, stale(res, name)
  end
  obj, err = admit(self, "mutate", "UPDATE", res, obj, e.obj, ctx)
  if not obj then return nil, err end
  local cerr = check_decoding(res, obj)
    or field_validation(res, obj, ctx)
  if cerr then return nil, cerr end
  cerr = validate(res, obj)
  if cerr then return nil, cerr end
  return self:commit(res, e, obj, ctx)
end

-- Resources whose registry orphans dependents when a DELETE names no
-- propagation (DefaultGarbageCollectionPolicy, kept for compatibility).
local orphan_by_default = { ["batch/v1 jobs"] = true, ["v1 replicationcontrollers"] = true }

-- The propagation a DELETE asks for: propagationPolicy, else the
-- deprecated orphanDependents, else a finalizer the object carries, else
-- its resource's default (Orphan, or Background).
local function propagation(res, opts, finalizers)
  if opts.propagationPolicy ~= nil then return opts.propagationPolicy end
  if type(opts.orphanDependents) == "boolean" then
    return opts.orphanDependents and "Orphan" or "Background"
  end
  for _, f in ipairs(is_array(finalizers) and finalizers or {}) do
    if f == "orphan" then return "Orphan" elseif f == "foregroundDeletion" then return nil end
  end
  return orphan_by_default[res.gv .. " " .. res.name] and "Orphan" or nil
end

-- The conversion a delete over HTTP through res goes through, when res is
-- a version of a CRD stored in another one (kubelua.sim.conversion); nil
-- otherwise. kube-apiserver's registry reads and writes such an object
-- through its codec, each time a ConversionReview: its Get converts what
-- etcd holds into the request's version; its update for the deletion
-- starts from the watch cache's object, converted into the storage
-- version as its state, and converts the object it makes into it to
-- write (or to find it unchanged: then etcd's is read again), and what
-- it wrote back into the request's version for the answer; the delete
-- itself converts its state likewise and decodes what it removed. A dry
-- run reads again (Get) and, for an update, converts the object it made
-- there and back. Any conversion that fails fails the delete.
local function delete_conversion(self, res, ctx)
  local c = self.conversion
  if c and ctx.admit and res.crd and c:is_cache(res) then return c end
  return nil
end

-- obj, of res's version, into the storage version's and back through
-- delete_conversion's via, as a dry run's update converts the object it
-- made: two ConversionReviews. -> obj converted | nil, status.
local function round_trip(via, res, obj)
  local stored, err = via:encode(res, obj)
  if not stored then return nil, err end
  return via:convert(via:storage_of(res), res, stored)
end

-- The object a deletion makes of base: extra (the finalizer a propagation
-- asks for, or nil) added and, unless it was being deleted already, its
-- deletionTimestamp (and a new generation, where it keeps one); and
-- whether that changed nothing.
local function marked(base, extra)
  local obj = copy(base)
  local md = obj.metadata
  local added = false
  if extra then
    md.finalizers = is_array(md.finalizers) and md.finalizers or json.array {}
    local present = false
    for _, f in ipairs(md.finalizers) do present = present or f == extra end
    if not present then md.finalizers[#md.finalizers + 1] = extra end
    added = not present
  end
  if md.deletionTimestamp and not added then return obj, true end
  if not md.deletionTimestamp and type(md.generation) == "number" and md.generation > 0 then
    -- the registry's markAsDeleting: a generation-changed predicate sees it
    md.generation = md.generation + 1
  end
  md.deletionTimestamp = md.deletionTimestamp or util.timestamp()
  md.deletionGracePeriodSeconds = md.deletionGracePeriodSeconds or 0
  return obj, false
end

-- A deletion's update through a version that converts (delete_conversion),
-- as the registry's GuaranteedUpdate makes it: its state is the watch
-- cache's object encoded, and the object it makes of it is written unless
-- it encodes into that state; then the storage is read again and, if that
-- is what it encodes into too, decoded for the answer; if not, it goes
-- round again from what it read. -> the object to store (the conversion
-- keeps its storage version's), or nil, the answer | nil, nil, status.
local function converted_update(via, res, e, extra)
  local state, err = via:encode(res, e.obj)
  if not state then return nil, nil, err end
  local base, current = e.obj, false
  while true do
    local obj = marked(base, extra)
    local c
    c, err = via:prepare(res, obj)
    if not c then return nil, nil, err end
    if not equal(c, state) then return obj end
    if current then break end
    current, state = true, via:storage_of(res).objects[e.key].obj
    base, err = via:decode(res, e.key)
    if not base then return nil, nil, err end
    if equal(c, state) then break end
  end
  local answer
  answer, err = via:decode(res, e.key)
  if not answer then return nil, nil, err end
  return nil, answer
end

-- delete(res, ns, name, opts, ctx) -> body table, code | nil, status.
-- opts: DeleteOptions (propagationPolicy, orphanDependents, preconditions).
-- An object with finalizers, or one whose dependents the garbage collector
-- handles first (Foreground, Orphan), gets its deletionTimestamp (and a
-- new generation, where it keeps one) and stays until they are gone. A
-- dry run answers what the delete would (that object, not stored, or the
-- Status of an object deleted), as the registry does.
function Store:delete(res, ns, name, opts, ctx)
  ctx = ctx or {}
  opts = is_object(opts) and opts or {}
  local e, err = self:get(res, ns, name)
  if not e then return nil, err end
  local via = delete_conversion(self, res, ctx)
  local function read(x)
    if via then return via:decode(res, x.key) end
    return x.obj
  end
  local old
  old, err = read(e)
  if not old then return nil, err end
  local pre = is_object(opts.preconditions) and opts.preconditions or {}
  -- as the storage checks them: the conflict names the Kind ("ConfigMap",
  -- "Deployment.apps"), not the resource
  local by_kind = { gr = kind_label(res), name = res.kind, group = res.group }
  if pre.uid and pre.uid ~= old.metadata.uid then
    return nil, conflict(by_kind, name, format("the UID in the precondition (%s) does not match "
      .. "the UID in record (%s). The object might have been deleted and then recreated",
      pre.uid, old.metadata.uid))
  end
  if pre.resourceVersion and pre.resourceVersion ~= old.metadata.resourceVersion then
    return nil, conflict(by_kind, name, format("the ResourceVersion in the precondition (%s) "
      .. "does not match the ResourceVersion in record (%s). The object might have been modified",
      pre.resourceVersion, old.metadata.resourceVersion))
  end
  if ctx.admit and self.admission then
    for _, phase in ipairs { "mutate", "validate" } do
      local ok, aerr = admit(self, phase, "DELETE", res, nil, old, ctx)
      if not ok then return nil, aerr end
    end
    local was = e
    e, err = self:get(res, ns, name) -- as it is once the webhooks have answered
    if not e then return nil, err end
    if e ~= was then
      old, err = read(e)
      if not old then return nil, err end
    end
  end
  if namespace_held(res, old) then
    -- the namespace registry: Terminating until the namespace controller
    -- (kubelua.sim.namespaces, when it runs) has emptied it and removed
    -- its finalizer; without it, Terminating for good
    if old.metadata.deletionTimestamp or ctx.dry_run then return old, 200 end
    local obj = copy(old)
    obj.metadata.deletionTimestamp = util.timestamp()
    obj.status = { phase = "Terminating" }
    obj.metadata.resourceVersion = tostring(self:next_rv())
    return self:put(res, obj, "MODIFIED", e).obj, 200
  end
  -- a Pod on a node waits for its kubelet to confirm (store.graceful, set
  -- while the simulator's kubelets run: the seconds it may take, or nil)
  local grace = self.graceful and self.graceful(res, old, opts)
  if grace then
    local md = old.metadata
    if (md.deletionTimestamp and (md.deletionGracePeriodSeconds or 0) <= grace)
        or ctx.dry_run then
      return old, 200
    end
    local obj = copy(old)
    obj.metadata.deletionTimestamp = util.timestamp(os.time() + grace)
    obj.metadata.deletionGracePeriodSeconds = grace
    obj.metadata.resourceVersion = tostring(self:next_rv())
    return self:put(res, obj, "MODIFIED", e).obj, 200
  end
  local finalizers = old.metadata.finalizers
  local policy = propagation(res, opts, finalizers)
  local extra = policy == "Foreground" and "foregroundDeletion"
    or (policy == "Orphan" and "orphan") or nil
  local has = type(finalizers) == "table" and #finalizers > 0
  if has or extra then
    if via and not ctx.dry_run then
      local obj, answer
      obj, answer, err = converted_update(via, res, e, extra)
      if not (obj or answer) then return nil, err end
      if obj then
        obj.metadata.resourceVersion = tostring(self:next_rv())
        self:put(res, obj, "MODIFIED", e)
        answer, err = via:decode(res, e.key)
        if not answer then return nil, err end
      end
      return answer, 200
    end
    local base = old
    if via then -- a dry run's Get of its own
      base, err = via:decode(res, e.key)
      if not base then return nil, err end
    end
    local obj, same = marked(base, extra)
    if ctx.dry_run then
      if via then
        obj, err = round_trip(via, res, obj)
        if not obj then return nil, err end
      end
      return obj, 200
    end
    if same then return old, 200 end
    obj.metadata.resourceVersion = tostring(self:next_rv())
    return self:put(res, obj, "MODIFIED", e).obj, 200
  end
  local st = { kind = "Status", apiVersion = "v1", metadata = {}, status = "Success",
    details = res_details(res, name, { uid = old.metadata.uid }) }
  if ctx.dry_run then
    if via then -- the dry run's Get of its own
      local ok
      ok, err = via:decode(res, e.key)
      if not ok then return nil, err end
    end
    -- the Service registry answers with the object it deleted
    return is_service(res) and old or st, 200
  end
  local removed
  if via then
    removed, err = via:encode(res, e.obj) -- the delete's state
    if not removed then return nil, err end
    removed = via:storage_of(res).objects[e.key].obj
  end
  local gone = copy(old)
  gone.metadata.resourceVersion = tostring(self:next_rv())
  self:put(res, gone, "DELETED", e)
  if via then
    -- what it removed, decoded into the request's version
    local ok
    ok, err = via:convert(via:storage_of(res), res, removed)
    if not ok then return nil, err end
  end
  if is_service(res) then return gone, 200 end
  if res.gv == "v1" and res.name == "namespaces" then self:drop_namespace(name) end
  return st, 200
end

-- What a namespace controller does once a namespace goes: its objects go.
function Store:drop_namespace(ns)
  for _, res in pairs(self.resources) do
    if res.namespaced then
      for _, key in ipairs(self:sorted_keys(res)) do
        local e = res.objects[key]
        if e and e.ns == ns then
          local gone = copy(e.obj)
          gone.metadata.resourceVersion = tostring(self:next_rv())
          self:put(res, gone, "DELETED", e)
        end
      end
    end
  end
end

-- Removes the finalizer a deletion with propagationPolicy added, as the
-- garbage collector (kubelua.sim.gc) does once the dependents are handled.
function Store:finish_propagation(res, key, finalizer)
  local e = res.objects[key]
  if not e then return end
  local obj = copy(e.obj)
  local keep = json.array {}
  for _, f in ipairs(obj.metadata.finalizers or {}) do
    if f ~= finalizer then keep[#keep + 1] = f end
  end
  obj.metadata.finalizers = #keep > 0 and keep or nil
  self:commit(res, e, obj, { internal = true })
end

_M.manager_of = manager_of
_M.admit = admit
_M.managed_node = managed_node
_M.patch_type = patch_type
_M.patched = patched
_M.retried = retried
return _M
