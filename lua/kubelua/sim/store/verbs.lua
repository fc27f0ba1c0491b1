-- kubelua.sim.store.verbs: the writes of the API on the store — create,
-- update (and the commit every change of a stored object ends in), patch
-- (merge, strategic merge, JSON patch), the scale subresource, server-side
-- apply, delete (finalizers, propagation, graceful Pods, Terminating
-- namespaces) — with the checks, defaults, managed fields and admission a
-- real apiserver applies, in its order. Methods of the store
-- (kubelua.sim.store mixes them in).

-- luacheck: ignore 212/self

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local patchlib = require "kubelua.sim.patch"
local managed = require "kubelua.sim.managed"
local yaml = require "kubelua.sim.yaml"
local services = require "kubelua.sim.services"
local schemalib = require "kubelua.sim.schema"
local errors = require "kubelua.sim.store.errors"
local entries = require "kubelua.sim.store.encode"
local history = require "kubelua.sim.store.history"
local kinds = require "kubelua.sim.store.defaults"
local checks = require "kubelua.sim.store.validate"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local concat, sort = table.concat, table.sort
local format, find = string.format, string.find
local floor = math.floor
local decode, null, is_array = json.decode, json.null, json.is_array
local copy, equal = util.copy, util.equal
local status, res_details, not_found, conflict, bad_request = errors.status,
  errors.res_details, errors.not_found, errors.conflict, errors.bad_request
local namespace_mismatch, undecodable, stale, other_name = errors.namespace_mismatch,
  errors.undecodable, errors.stale, errors.other_name
local kind_label, invalid = errors.kind_label, errors.invalid
local obj_key, make_entry = entries.obj_key, entries.make_entry
local replace_last = history.replace_last
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

local function set_managed(res, old, new, ctx, operation, owned)
  if ctx.internal or ctx.apply then
    if old then new.metadata.managedFields = old.metadata.managedFields end
    return
  end
  local mf = managed.update(old, new, {
    manager = manager_of(ctx), operation = operation or "Update", api_version = res.api_version,
    time = util.timestamp(), subresource = ctx.subresource, custom = not res.builtin,
    has_status = res.status, owned = owned, node = managed_node(res) })
  new.metadata.managedFields = #mf > 0 and mf or nil
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
local function admit(self, phase, op, res, obj, old, ctx)
  local a = self.admission
  if not a or not ctx.admit then return obj or old end
  return a:admit(phase, op, res, obj, old, ctx)
end

-- A custom resource written over HTTP, about to be stored: converted into
-- its CRD's other versions through its conversion webhook
-- (kubelua.sim.conversion, set as store.conversion), which put then
-- stores. true | nil, status. It may yield the request's task.
local function convert_versions(self, res, obj, ctx)
  local c = self.conversion
  if not c or not ctx.admit or not res.mirrors then return true end
  return c:prepare(res, obj)
end

-- create(res, ns, obj, ctx) -> entry | nil, status. ctx: user_agent,
-- field_manager, dry_run, internal, trusted (a body the simulator made:
-- no field validation).
function Store:create(res, ns, obj, ctx, operation, owned)
  ctx = ctx or {}
  local err = check_decoding(res, obj)
  if err then return nil, err end
  obj = copy(obj)
  err = field_validation(res, obj, ctx)
  if err then return nil, err end
  obj.kind, obj.apiVersion = res.kind, res.api_version
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
  set_managed(res, nil, obj, ctx, operation, owned)
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
    if ctx.subresource == "status" then
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
    ok, err = convert_versions(self, res, obj, ctx)
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
  if equal(without, before) then return e end
  set_managed(res, old, obj, ctx)
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
  local err = check_decoding(res, obj)
  if err then return nil, err end
  obj = copy(obj)
  err = field_validation(res, obj, ctx)
  if err then return nil, err end
  obj.kind, obj.apiVersion = res.kind, res.api_version
  if not is_object(obj.metadata) then obj.metadata = {} end
  local md = obj.metadata
  if md.name ~= nil and md.name ~= name then
    return nil, other_name(tostring(md.name), name)
  end
  if res.namespaced and md.namespace ~= nil and md.namespace ~= "" and md.namespace ~= ns then
    return nil, bad_request("the namespace of the provided object does not match the namespace "
      .. "sent on the request")
  end
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

function Store:scale(res, ns, name, verb, content_type, body, ctx)
  return retried(body, function()
    return self:scale_once(res, ns, name, verb, content_type, body, ctx)
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

-- The scale subresource (autoscaling/v1 Scale) of the kinds that have one
-- (Deployments, ReplicaSets, StatefulSets, and custom resources whose CRD
-- version declares subresources.scale): what kubectl scale and the
-- HorizontalPodAutoscaler read and write. Its metadata is the object's
-- identity, spec.replicas the object's, status its replicas and its label
-- selector as a selector string (a custom resource's: at the CRD's
-- specReplicasPath, statusReplicasPath and labelSelectorPath).
local SCALE = { group = "autoscaling", kind = "Scale" } -- for invalid()

-- metav1.LabelSelector as its selector string (labels.Selector.String):
-- requirements sorted by key, "k=v", "k in (a,b)", "k notin (a,b)", "k",
-- "!k".
local function selector_string(sel)
  if not is_object(sel) then return nil end
  local reqs = {}
  for k, v in pairs(is_object(sel.matchLabels) and sel.matchLabels or {}) do
    reqs[#reqs + 1] = { k, k .. "=" .. tostring(v) }
  end
  for _, x in ipairs(is_array(sel.matchExpressions) and sel.matchExpressions or {}) do
    if is_object(x) then
      local vals = {}
      for i, v in ipairs(is_array(x.values) and x.values or {}) do vals[i] = tostring(v) end
      sort(vals)
      local op, k = x.operator, tostring(x.key)
      local r = op == "In" and k .. " in (" .. concat(vals, ",") .. ")"
        or op == "NotIn" and k .. " notin (" .. concat(vals, ",") .. ")"
        or op == "Exists" and k or op == "DoesNotExist" and "!" .. k
      if r then reqs[#reqs + 1] = { k, r } end
    end
  end
  for i, r in ipairs(reqs) do r[3] = i end -- same keys keep their order, as Go's sort does here
  sort(reqs, function(a, b) return a[1] < b[1] or a[1] == b[1] and a[3] < b[3] end)
  local out = {}
  for i, r in ipairs(reqs) do out[i] = r[2] end
  return #out > 0 and concat(out, ",") or nil
end

-- A custom resource's scale paths (".spec.replicas") as lists of names.
local function path_names(path)
  local names = {}
  for name in tostring(path):gmatch("[^.]+") do names[#names + 1] = name end
  return names
end

local function path_get(obj, names)
  local v = obj
  for _, name in ipairs(names) do
    if not is_object(v) then return nil end
    v = v[name]
  end
  return v
end

-- Sets the value at names, making the objects on the way as needed.
local function path_set(obj, names, value)
  local v = obj
  for i = 1, #names - 1 do
    if not is_object(v[names[i]]) then v[names[i]] = {} end
    v = v[names[i]]
  end
  v[names[#names]] = value
end

-- The integer at a path, 0 when absent (as unstructured.NestedInt64).
local function int_at(obj, names)
  local v = path_get(obj, names)
  return type(v) == "number" and v or 0
end

local function to_scale(res, obj)
  local md = obj.metadata
  local spec = is_object(obj.spec) and obj.spec or {}
  local st = is_object(obj.status) and obj.status or {}
  -- a ReplicationController's selector is a map of labels
  local replicas, status_replicas, selector = spec.replicas, st.replicas or 0,
    selector_string(res.gv == "v1" and { matchLabels = spec.selector } or spec.selector)
  local paths = res.scale_paths
  if paths then
    replicas, status_replicas = int_at(obj, paths.spec), int_at(obj, paths.status)
    selector = paths.selector and path_get(obj, paths.selector)
    if type(selector) ~= "string" then selector = nil end
  end
  return { kind = "Scale", apiVersion = "autoscaling/v1",
    metadata = { name = md.name, namespace = md.namespace, uid = md.uid,
      resourceVersion = md.resourceVersion, creationTimestamp = md.creationTimestamp },
    spec = { replicas = replicas ~= 0 and replicas or nil },
    status = { replicas = status_replicas, selector = selector } }
end

-- The 400 of a Scale whose metadata, spec or replicas has the wrong JSON
-- type (or replicas no int32), as the real server's decoder words it.
local function scale_type_error(sc)
  local function bad(v, field, typ)
    return undecodable({ kind = "Scale", version = "v1" }, util.unmarshal_error(v, field, typ))
  end
  local md, spec = sc.metadata, sc.spec
  if md ~= nil and md ~= null and not is_object(md) then
    return bad(md, "Scale.metadata", "v1.ObjectMeta")
  end
  if spec ~= nil and spec ~= null and not is_object(spec) then
    return bad(spec, "Scale.spec", "v1.ScaleSpec")
  end
  local r = is_object(spec) and spec.replicas
  if r and r ~= null and (type(r) ~= "number" or r ~= floor(r) or r < -2147483648
      or r > 2147483647) then
    return bad(r, "ScaleSpec.spec.replicas", "int32")
  end
  return nil
end

-- scale(res, ns, name, verb, content_type, body, ctx) -> Scale | nil,
-- status: "get", "update" (body: a Scale) or "patch" (body: a patch of
-- the Scale, of content_type). A Scale that names a resourceVersion is
-- applied to that version only; replicas below 0 are invalid.
function Store:scale_once(res, ns, name, verb, content_type, body, ctx)
  local e, err = self:get(res, ns, name)
  if not e then return nil, err end
  local cur = to_scale(res, e.obj)
  if verb == "get" then return cur end
  local sc
  if verb == "update" then
    sc, err = decode(body)
    if not is_object(sc) then
      return nil, bad_request("the body of the request could not be read as a Scale: "
        .. tostring(err or "not an object"))
    end
  else
    local ptype = patch_type(content_type)
    if ptype ~= "merge" and ptype ~= "strategic" and ptype ~= "json" then
      return nil, status(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
    end
    sc, err = patched(cur, ptype, body)
    if not sc then return nil, err end
  end
  err = scale_type_error(sc)
  if err then return nil, err end
  -- the admission webhooks see the Scale, as the real server sends it
  sc, err = admit(self, "mutate", "UPDATE", res, sc, cur, ctx)
  if not sc then return nil, err end
  local md = is_object(sc.metadata) and sc.metadata or {}
  local spec = is_object(sc.spec) and sc.spec or {}
  local replicas = spec.replicas ~= null and spec.replicas or 0
  if md.name ~= name then
    return nil, other_name(type(md.name) == "string" and md.name or "", name)
  end
  if replicas < 0 then
    return nil, invalid(SCALE, name, { { field = "spec.replicas", reason = "FieldValueInvalid",
      message = format("Invalid value: %d: must be greater than or equal to 0", replicas) } })
  end
  local uid = e.obj.metadata.uid
  if md.uid ~= nil and md.uid ~= null and md.uid ~= "" and md.uid ~= uid then
    local scale = { gr = res.name .. "/scale." .. res.group, name = res.name .. "/scale",
      group = res.group }
    return nil, conflict(scale, name, format("Precondition failed: UID in precondition: %s, UID "
      .. "in object meta: %s", tostring(md.uid), uid))
  end
  local rv = md.resourceVersion
  if rv ~= nil and rv ~= "" and rv ~= e.obj.metadata.resourceVersion then
    return nil, stale(res, name)
  end
  local admitted = ctx.admit
  if admitted and self.admission then
    sc, err = admit(self, "validate", "UPDATE", res, sc, cur, ctx)
    if not sc then return nil, err end
    if res.objects[e.key] ~= e then return nil, stale(res, name), "raced" end
  end
  local obj = copy(e.obj)
  path_set(obj, res.scale_paths and res.scale_paths.spec or { "spec", "replicas" }, replicas)
  local ne, raced
  ctx.admit = false -- the webhooks were asked about the Scale
  ne, err, raced = self:commit(res, e, obj, ctx)
  ctx.admit = admitted
  if not ne then return nil, err, raced end
  return to_scale(res, ne.obj)
end

-- Server-side apply: the applied configuration is merged into the object
-- as the kind's schema says (kubelua.sim.managed.merge: keyed lists by
-- their keys, sets by value, atomic lists and structs replaced); fields
-- this manager applied before and leaves out now are removed if nobody
-- else owns them; fields another manager owns with a different value
-- conflict unless force.
function Store:apply(res, ns, name, body, ctx)
  if not ctx.field_manager or ctx.field_manager == "" then
    return nil, status(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
      .. "Required value: is required for apply patch", { group = "meta.k8s.io",
        kind = "PatchOptions", causes = json.array { { reason = "FieldValueRequired",
          message = "Required value: is required for apply patch", field = "fieldManager" } } })
  end
  local cfg = decode(body)
  if cfg == nil then
    local yerr
    cfg, yerr = yaml.decode(body)
    if cfg == nil then return nil, bad_request("error decoding YAML: " .. tostring(yerr)) end
  end
  if not is_object(cfg) then
    return nil, bad_request("error decoding YAML: the apply body must be an object")
  end
  local part = ctx.subresource == "status" and "status" or (res.status and "main" or "all")
  local node = managed_node(res)
  local applied = managed.leaves(cfg, not res.builtin, part, node)
  -- an applier owns the leaves it names, without "." markers, except a
  -- keyed list's items: an item is itself a member of its list
  local owned = {}
  for p in pairs(applied) do
    local parent = p:match("([^\1]*)\1%.$")
    if not parent or parent:find("^[kv]:") then owned[p] = true end
  end
  local e = res.objects[obj_key(res.namespaced and ns or nil, name)]
  if not e then
    local obj = copy(cfg)
    obj.metadata = is_object(obj.metadata) and obj.metadata or {}
    obj.metadata.name = obj.metadata.name or name
    local created, err = self:create(res, ns, obj, ctx, "Apply", owned)
    return created, err, true
  end
  local current = managed.leaves(e.obj, not res.builtin, "all", node)
  local conflicts = managed.conflicts(e.obj, applied, current, ctx.field_manager)
  if #conflicts > 0 and not ctx.force then
    -- one conflict is said in a line; several are grouped by manager
    -- (managers sorted), a field a line
    local causes, by, managers = json.array {}, {}, {}
    for i, c in ipairs(conflicts) do
      local field = managed.format_path(c.path)
      causes[i] = { reason = "FieldManagerConflict",
        message = "conflict with " .. c.manager, field = field }
      if not by[c.manager] then
        by[c.manager] = {}
        managers[#managers + 1] = c.manager
      end
      by[c.manager][#by[c.manager] + 1] = "- " .. field
    end
    local said
    if #conflicts == 1 then
      said = format("conflict with %s: %s", conflicts[1].manager, causes[1].field)
    else
      sort(managers)
      local lines = {}
      for _, m in ipairs(managers) do
        lines[#lines + 1] = format("conflicts with %s:", m)
        for _, l in ipairs(by[m]) do lines[#lines + 1] = l end
      end
      said = concat(lines, "\n")
    end
    local msg = format("Apply failed with %d conflict%s: %s", #conflicts,
      #conflicts == 1 and "" or "s", said)
    return nil, status(409, "Conflict", msg, { causes = causes })
  end
  local obj = managed.merge(e.obj, cfg, not res.builtin, node)
  -- fields this manager owned before and no longer applies
  local gone = {}
  for _, mfe in ipairs(e.obj.metadata.managedFields or {}) do
    if mfe.manager == ctx.field_manager and mfe.operation == "Apply" then
      for p in pairs(managed.paths(mfe.fieldsV1 or {})) do
        if not applied[p] then
          local others = false
          for _, o in ipairs(e.obj.metadata.managedFields) do
            if o ~= mfe and managed.paths(o.fieldsV1 or {})[p] then others = true end
          end
          if not others then gone[#gone + 1] = p end
        end
      end
    end
  end
  managed.remove(obj, gone)
  obj.kind, obj.apiVersion = res.kind, res.api_version
  local err
  obj, err = admit(self, "mutate", "UPDATE", res, obj, e.obj, ctx)
  if not obj then return nil, err end
  err = check_decoding(res, obj) or validate(res, obj)
  if err then return nil, err end
  -- commit with ownership of exactly the applied fields
  local saved = ctx.field_manager
  local out, cerr = self:commit_apply(res, e, obj, ctx, owned)
  ctx.field_manager = saved
  return out, cerr
end

-- Whether two managedFields lists say the same but for their times.
local function same_owners(a, b)
  local function untimed(list)
    local out = {}
    for i, x in ipairs(type(list) == "table" and list or {}) do
      out[i] = copy(x)
      out[i].time = nil
    end
    return out
  end
  return equal(untimed(a), untimed(b))
end

function Store:commit_apply(res, e, obj, ctx, owned)
  local old = e.obj
  local r, err = self:commit(res, e, obj, { apply = true, subresource = ctx.subresource,
    dry_run = ctx.dry_run, admit = ctx.admit, user = ctx.user, warnings = ctx.warnings })
  if not r then return r, err end
  local op = { manager = ctx.field_manager, operation = "Apply",
    api_version = res.api_version, time = util.timestamp(), subresource = ctx.subresource,
    custom = not res.builtin, has_status = res.status, owned = owned, node = managed_node(res) }
  if r == e then
    -- the same values: still a write when their owners change (a forced
    -- apply takes them over, another one shares them), not when only a time
    -- would
    -- (and, the object unchanged, the applier's entry keeps the time it
    -- had, or gets none)
    op.time = nil
    for _, m in ipairs(old.metadata.managedFields or {}) do
      if m.manager == op.manager and m.operation == "Apply" then op.time = m.time end
    end
    local mf = managed.update(old, old, op)
    if same_owners(mf, old.metadata.managedFields) then return e end
    local o = copy(old)
    o.metadata.managedFields = #mf > 0 and mf or nil
    if ctx.dry_run then return make_entry(o, res) end
    o.metadata.resourceVersion = tostring(self:next_rv())
    return self:put(res, o, "MODIFIED", e)
  end
  local mf = managed.update(old, r.obj, op)
  local o = copy(r.obj)
  o.metadata.managedFields = #mf > 0 and mf or nil
  if ctx.dry_run then return make_entry(o, res) end
  -- replace the stored entry's content without a second event, in every
  -- API the object is served through
  local ne = make_entry(o, res)
  if res.objects[ne.key] == r then
    res.objects[ne.key] = ne
    replace_last(self, res, r, ne)
    for _, m in ipairs(res.mirrors or {}) do
      local mr = m.res.objects[ne.key]
      if mr then
        local me = make_entry(m.convert(o), m.res)
        m.res.objects[ne.key] = me
        replace_last(self, m.res, mr, me)
      end
    end
  end
  return ne
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

-- delete(res, ns, name, opts, ctx) -> body table, code | nil, status.
-- opts: DeleteOptions (propagationPolicy, orphanDependents, preconditions).
-- An object with finalizers, or one whose dependents the garbage collector
-- handles first (Foreground, Orphan), gets its deletionTimestamp (and a
-- new generation, where it keeps one) and stays until they are gone.
function Store:delete(res, ns, name, opts, ctx)
  ctx = ctx or {}
  opts = is_object(opts) and opts or {}
  local e, err = self:get(res, ns, name)
  if not e then return nil, err end
  local old = e.obj
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
    e, err = self:get(res, ns, name) -- as it is once the webhooks have answered
    if not e then return nil, err end
    old = e.obj
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
    if ctx.dry_run then return old, 200 end
    local obj = copy(old)
    local md = obj.metadata
    local added = false
    if extra then
      md.finalizers = is_array(md.finalizers) and md.finalizers or json.array {}
      local present = false
      for _, f in ipairs(md.finalizers) do present = present or f == extra end
      if not present then md.finalizers[#md.finalizers + 1] = extra end
      added = not present
    end
    if md.deletionTimestamp and not added then return old, 200 end
    if not md.deletionTimestamp and type(md.generation) == "number" and md.generation > 0 then
      -- the registry's markAsDeleting: a generation-changed predicate sees it
      md.generation = md.generation + 1
    end
    md.deletionTimestamp = md.deletionTimestamp or util.timestamp()
    md.deletionGracePeriodSeconds = md.deletionGracePeriodSeconds or 0
    md.resourceVersion = tostring(self:next_rv())
    return self:put(res, obj, "MODIFIED", e).obj, 200
  end
  if ctx.dry_run then return old, 200 end
  local gone = copy(old)
  gone.metadata.resourceVersion = tostring(self:next_rv())
  self:put(res, gone, "DELETED", e)
  -- the Service registry answers with the object it deleted
  if is_service(res) then return gone, 200 end
  if res.gv == "v1" and res.name == "namespaces" then self:drop_namespace(name) end
  local st = { kind = "Status", apiVersion = "v1", metadata = {}, status = "Success",
    details = res_details(res, name, { uid = old.metadata.uid }) }
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
_M.selector_string = selector_string
_M.path_names = path_names
return _M
