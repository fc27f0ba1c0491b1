-- kubelua.sim.store.scale: the scale subresource (autoscaling/v1 Scale)
-- of the kinds that have one, read and written (update or patch) as the
-- real server does. Methods of the store (kubelua.sim.store mixes them
-- in).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local errors = require "kubelua.sim.store.errors"
local verbs = require "kubelua.sim.store.verbs"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local concat, sort = table.concat, table.sort
local format = string.format
local floor = math.floor
local decode, null, is_array = json.decode, json.null, json.is_array
local copy = util.copy
local status, conflict, bad_request = errors.status, errors.conflict, errors.bad_request
local undecodable, stale, other_name, invalid = errors.undecodable, errors.stale,
  errors.other_name, errors.invalid
local admit, patch_type, patched, retried = verbs.admit, verbs.patch_type, verbs.patched,
  verbs.retried

local _M = {}
local Store = {}
_M.methods = Store

local function is_object(v) return type(v) == "table" and not is_array(v) end

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

-- A scale that loses a race with the admission webhooks is tried again, as
-- a patch is (kubelua.sim.store.verbs).
function Store:scale(res, ns, name, verb, content_type, body, ctx)
  return retried(body, function()
    return self:scale_once(res, ns, name, verb, content_type, body, ctx)
  end)
end

_M.selector_string = selector_string
_M.path_names = path_names
return _M
