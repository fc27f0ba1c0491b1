-- kubelua.sim.schema: what a real server's decoder makes of a built-in
-- kind's body, from the kind's OpenAPI schema (kubelua.sim.openapi's
-- captured documents): a value of the wrong JSON type is refused with Go's
-- UnmarshalTypeError text ("json: cannot unmarshal number into Go struct
-- field ConfigMap.data of type string"), and fields the type does not have
-- are dropped and named ("spec.template.spec.containers[0].foo"), for
-- fieldValidation to warn of or refuse.
--
-- A group version's document is decoded the first time one of its kinds is
-- written, every kind in it compiled into a checker (a tree of small nodes,
-- one per named schema, shared), and the document let go; a write then
-- costs one walk of the body. Types that decode themselves (Time,
-- Quantity, IntOrString, RawExtension, JSON...) take any value here.

local json = require "kubelua.json"
local openapi = require "kubelua.sim.openapi"

local type, pairs, ipairs, format, sort = type, pairs, ipairs, string.format, table.sort
local is_array, null = json.is_array, json.null

local _M = {}

local ANY = { t = "any" }

-- The schema a property points at (through allOf: [{$ref}] or $ref) and
-- its name when it is a named one.
local function target(s, schemas)
  if type(s) ~= "table" then return nil end
  local ref = s["$ref"] or type(s.allOf) == "table" and #s.allOf == 1 and s.allOf[1]["$ref"]
  if not ref then return s, nil end
  local name = ref:match("^#/components/schemas/(.+)$")
  return schemas[name], name
end

-- Go's name of a named schema's type: its package's last element and the
-- type ("io.k8s.api.core.v1.PodSpec" → "v1.PodSpec").
local function go_name(name) return name:match("([^.]+%.[^.]+)$") end

-- The patch and apply extensions of a property (on the property itself,
-- beside its $ref): x-kubernetes-patch-strategy and -patch-merge-key, which
-- strategic merge patch follows, and x-kubernetes-list-type,
-- -list-map-keys and -map-type, which server-side apply follows; nil when
-- it has none.
local function extensions(p)
  if type(p) ~= "table" then return nil end
  local strategy, key = p["x-kubernetes-patch-strategy"], p["x-kubernetes-patch-merge-key"]
  local list_type, map_keys = p["x-kubernetes-list-type"], p["x-kubernetes-list-map-keys"]
  local map_type = p["x-kubernetes-map-type"]
  if not (strategy or key or list_type or map_keys or map_type) then return nil end
  return { strategy = strategy, merge_key = key, list_type = list_type, map_keys = map_keys,
    map_type = map_type }
end

local function compile(s, name, schemas, memo)
  if name and memo[name] then return memo[name] end
  if type(s) ~= "table" or s["x-kubernetes-preserve-unknown-fields"]
      or s["x-kubernetes-int-or-string"] or (s.type == nil and not s.properties) then
    return ANY
  end
  local t = s.type
  if t == "object" and type(s.properties) == "table" then
    local node = { t = "object", props = {}, go = name and go_name(name) or "struct",
      struct = name and name:match("([^.]+)$"), map_type = s["x-kubernetes-map-type"] }
    if name then memo[name] = node end
    for k, p in pairs(s.properties) do
      local ps, pname = target(p, schemas)
      node.props[k] = compile(ps, pname, schemas, memo)
      local ext = extensions(p)
      if ext then
        node.ext = node.ext or {}
        node.ext[k] = ext
      end
      if type(p.default) == "table" then
        -- a struct held by value, there even when zero (no "." of its own in
        -- managedFields)
        node.always = node.always or {}
        node.always[k] = true
      elseif p.default ~= nil then
        node.defaults = node.defaults or {} -- what a list map's key is when left out
        node.defaults[k] = p.default
      end
    end
    return node
  elseif t == "object" then
    local vs, vname = target(s.additionalProperties, schemas)
    local v = vs and compile(vs, vname, schemas, memo) or ANY
    return { t = "map", value = v, go = "map[string]" .. (v.go or "interface {}"),
      map_type = s["x-kubernetes-map-type"] }
  elseif t == "array" then
    local is, iname = target(s.items, schemas)
    local item = compile(is, iname, schemas, memo)
    return { t = "array", items = item, go = "[]" .. (item.go or "interface {}") }
  elseif t == "integer" then
    return { t = "integer", go = s.format == "int64" and "int64" or "int32" }
  elseif t == "number" then
    return { t = "number", go = "float64" }
  elseif t == "string" then
    if name then return ANY end -- a named string type decodes itself (Time, Quantity)
    return { t = "string", go = s.format == "byte" and "[]uint8" or "string" }
  elseif t == "boolean" then
    return { t = "boolean", go = "bool" }
  end
  return ANY
end

local checkers = {} -- "gv/Kind" → root node (false: none), filled a group version at a time

local function load(gv)
  local text = openapi.captured(openapi.gv_path(gv))
  checkers[gv] = true
  if not text then return end
  local doc = json.decode(text)
  local schemas = doc.components and doc.components.schemas or {}
  local memo = {}
  for name, s in pairs(schemas) do
    for _, gvk in ipairs(type(s["x-kubernetes-group-version-kind"]) == "table"
        and s["x-kubernetes-group-version-kind"] or {}) do
      local g = gvk.group == "" and gvk.version or gvk.group .. "/" .. gvk.version
      if g == gv and s.properties and s.properties.metadata then
        checkers[gv .. "/" .. gvk.kind] = compile(s, name, schemas, memo)
      end
    end
  end
end

-- The checker of a built-in resource's kind, or nil when its group version
-- has no captured schema.
function _M.checker(res)
  if not checkers[res.gv] then load(res.gv) end
  return checkers[res.gv .. "/" .. res.kind]
end

-- The schema of a custom resource's version (its CRD's openAPIV3Schema) as
-- a node of the checker's kind, for server-side apply: its
-- x-kubernetes-list-type, -list-map-keys and -map-type, and ObjectMeta's
-- own rules for metadata (finalizers a set, ownerReferences keyed by uid).
-- Compiled once per schema table.
local customs = setmetatable({}, { __mode = "k" })

function _M.custom(s)
  if type(s) ~= "table" then return nil end
  local node = customs[s]
  if node == nil then
    node = compile(s, nil, {}, {})
    if node.t == "object" then
      local cm = _M.checker { gv = "v1", kind = "ConfigMap" }
      node.props.metadata = cm and cm.props.metadata or node.props.metadata
    end
    customs[s] = node
  end
  return node
end

-- The schema node of field k of node (nil: none), the field's extensions
-- (kubelua.sim.schema's patch and apply extensions, or nil), and whether
-- the field is a struct held by value (always there, even zero).
function _M.field(node, k)
  if not node then return nil, nil, false end
  if node.t == "object" then
    return node.props[k], node.ext and node.ext[k], node.always and node.always[k] or false
  end
  if node.t == "map" then return node.value, nil, false end
  return nil, nil, false
end

-- How server-side apply treats a list with extensions ext, as the real
-- server's schema converter reads them: "atomic", "set", or "map" and its
-- keys (x-kubernetes-list-type, else a patch strategy of merge: keyed by
-- the merge key, a set without one; atomic by default).
function _M.list_kind(ext)
  if not ext then return "atomic" end
  local lt = ext.list_type
  if lt == "set" then return "set" end
  if lt == "map" and type(ext.map_keys) == "table" then return "map", ext.map_keys end
  if lt == nil and (ext.strategy == "merge" or ext.strategy == "merge,retainKeys") then
    if ext.merge_key then return "map", { ext.merge_key } end
    return "set"
  end
  return "atomic"
end

-- Whether a struct or map (node, extensions ext) is applied as a whole.
function _M.atomic(node, ext)
  return (node and node.map_type == "atomic") or (ext and ext.map_type == "atomic") or false
end

-- The JSON type of v as Go's decoder names it; a Lua sequence given in
-- process (no kube.array mark) is an array, as it is encoded.
local function json_kind(v)
  local t = type(v)
  if t == "table" then return (is_array(v) or v[1] ~= nil) and "array" or "object" end
  if t == "boolean" then return "bool" end
  return t
end

-- Keeps the type error at path when it is the first: the decoder reports
-- the first in the body's order, which a decoded table has lost; the first
-- path in byte order stands for it.
local function type_error(st, path, what, struct, field, go)
  if not st.err or path < st.err_path then
    st.err, st.err_path = format("json: cannot unmarshal %s into Go struct field %s.%s of "
      .. "type %s", what, struct, field, go), path
  end
end

-- The walk: drops the unknown fields of v (node's value, at path) into
-- st.unknown and keeps the first type error in st.err. struct and field:
-- Go's innermost struct and the field path from it, for the message.
local function walk(node, v, path, st, struct, field)
  local t = node.t
  if t == "any" or v == null then return end
  local have = json_kind(v)
  local ok
  if t == "object" or t == "map" then
    ok = have == "object"
  elseif t == "array" then
    ok = have == "array"
  elseif t == "integer" then
    if have == "number" and v % 1 ~= 0 then
      return type_error(st, path, "number " .. json.encode(v), struct, field, node.go)
    end
    ok = have == "number"
  elseif t == "number" then
    ok = have == "number"
  elseif t == "boolean" then
    ok = have == "bool"
  else
    ok = have == "string"
  end
  if not ok then return type_error(st, path, have, struct, field, node.go) end
  if t == "object" then
    local props = node.props
    for k, x in pairs(v) do
      local p = path == "" and k or path .. "." .. k
      local pn = props[k]
      if pn == nil then
        if not (path == "" and (k == "apiVersion" or k == "kind")) then
          v[k] = nil -- clearing a field during next() is allowed
          st.unknown[#st.unknown + 1] = p
        end
      else
        walk(pn, x, p, st, node.struct or struct, field == "" and k or field .. "." .. k)
      end
    end
  elseif t == "map" and node.value ~= ANY then
    for k, x in pairs(v) do walk(node.value, x, path .. "." .. k, st, struct, field) end
  elseif t == "array" and node.items ~= ANY then
    for i, x in ipairs(v) do
      walk(node.items, x, format("%s[%d]", path, i - 1), st, struct, field)
    end
  end
end

-- Checks obj (a body of checker's kind) as the decoder does: drops its
-- unknown fields (obj changed in place) and returns their paths, sorted,
-- and the first type error's message or nil.
function _M.check(checker, obj)
  local st = { unknown = {} }
  walk(checker, obj, "", st, checker.struct, "")
  sort(st.unknown)
  return st.unknown, st.err
end

return _M
