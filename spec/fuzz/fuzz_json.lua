-- fuzz_json.lua: the Lua half of spec/fuzz/fuzz_json.c. Called with the
-- value kubelua.json decoded, the input text and, when the input is an
-- object, the compact JSON of its kl_obj_t and the fields C extracted from
-- it (else nil, nil), and the number of ':' outside strings in the input.
-- Raises when the round trip is not exact or C and Lua disagree; returns
-- the encoded text and the number of object members in the value.
local json = require "kubelua.json"
local has_cjson, cjson = pcall(require, "cjson")

local type, pairs, ipairs, tostring, error, format, assert =
  type, pairs, ipairs, tostring, error, string.format, assert

if has_cjson then cjson.decode_max_depth(1000) end

-- a (kubelua.json's value) equals b (lua-cjson's) at path.
local function same(a, b, path)
  if type(a) ~= type(b) then
    error(format("%s: kubelua %s, cjson %s", path, type(a), type(b)), 0)
  end
  if type(a) == "table" then
    -- Debian's cjson marks no arrays: compare the keys (the C side checks
    -- that arrays, empty ones too, stay arrays in the encoded text).
    for k, v in pairs(a) do same(v, b[k], path .. "/" .. tostring(k)) end
    for k in pairs(b) do
      if a[k] == nil then error(format("%s/%s: only cjson has it", path, tostring(k)), 0) end
    end
  elseif a ~= b then
    error(format("%s: kubelua %q, cjson %q", path, tostring(a), tostring(b)), 0)
  end
end

-- a equals b exactly, arrays marked alike (both kubelua.json values).
local function identical(a, b, path)
  if type(a) ~= type(b) then error(format("%s: %s became %s", path, type(a), type(b)), 0) end
  if type(a) == "table" then
    if json.is_array(a) ~= json.is_array(b) then
      error(format("%s: array mark lost or gained", path), 0)
    end
    for k, v in pairs(a) do identical(v, b[k], path .. "/" .. tostring(k)) end
    for k in pairs(b) do
      if a[k] == nil then error(format("%s/%s: appeared", path, tostring(k)), 0) end
    end
  elseif a ~= b then
    local f = type(a) == "number" and "%s: %.17g became %.17g" or "%s: %q became %q"
    error(format(f, path, a, b), 0)
  end
end

-- The number of object members in v (arrays' elements are not members).
local function members(v)
  if type(v) ~= "table" then return 0 end
  local n, obj = 0, not json.is_array(v)
  for _, x in pairs(v) do
    if obj then n = n + 1 end
    n = n + members(x)
  end
  return n
end

-- json.decode that raises (assert would refuse a decoded false).
local function decode(s)
  local v, err = json.decode(s)
  if err then error(err, 0) end
  return v
end

-- The fields C extracted (c: see push_fields in fuzz_json.c) equal the
-- decoded object's; C reads an absent or null string as "".
local function fields_agree(v, c)
  local md = type(v.metadata) == "table" and not json.is_array(v.metadata) and v.metadata or {}
  local want = { name = md.name, namespace = md.namespace, uid = md.uid,
    resource_version = md.resourceVersion, kind = v.kind, api_version = v.apiVersion }
  for k, x in pairs(want) do
    if type(x) == "string" and x ~= c[k] then
      error(format("%s: Lua %q, C %q", k, x, c[k]), 0)
    elseif (x == nil or x == json.null) and c[k] ~= "" then
      error(format("%s: absent in Lua, C %q", k, c[k]), 0)
    end
  end
  if type(md.generation) == "number" and md.generation ~= c.generation then
    error(format("generation: Lua %.17g, C %.17g", md.generation, c.generation), 0)
  end
  local labels = md.labels
  if type(labels) == "table" and not json.is_array(labels) then
    for k, x in pairs(labels) do
      if c.labels[k] ~= x then error(format("label %q: Lua %q, C %q", k, x, tostring(c.labels[k])), 0) end
    end
    for k in pairs(c.labels) do
      if labels[k] == nil then error(format("label %q: only in C", k), 0) end
    end
  end
end

-- json.meta reads what decode reads; json.omit drops exactly the named
-- top-level members (v: the decoded object).
local function meta_and_omit(v, input)
  local md = type(v.metadata) == "table" and not json.is_array(v.metadata) and v.metadata or {}
  local got, err = { json.meta(input) }, nil
  if got[1] == nil then err = got[2] end
  for i, k in ipairs({ "namespace", "name", "resourceVersion" }) do
    local x = md[k]
    if type(x) == "string" then
      if got[i] ~= x then error(format("json.meta %s: %q, decode %q", k, tostring(got[i]), x), 0) end
    elseif x == nil or x == json.null then
      if not err and got[i] ~= "" then error(format("json.meta %s: %q, absent", k, got[i]), 0) end
    elseif not err then
      error(format("json.meta %s: %q for a %s", k, tostring(got[i]), type(x)), 0)
    end
  end
  local rest = decode(assert(json.omit(input, "kind", "metadata")))
  local want = {}
  for k, x in pairs(v) do
    if k ~= "kind" and k ~= "metadata" then want[k] = x end
  end
  identical(want, rest, "omit")
end

-- w, a json.view read by indexing alone, holds what v holds.
local function read_as(v, w, path)
  if type(v) ~= "table" then
    if v ~= w and not (v ~= v and w ~= w) then
      error(format("%s: view %s, decode %s", path, tostring(w), tostring(v)), 0)
    end
    return
  end
  if type(w) ~= "table" or json.is_array(v) ~= json.is_array(w) then
    error(format("%s: view %s, decode %s", path, type(w), type(v)), 0)
  end
  for k, x in pairs(v) do read_as(x, w[k], path .. "/" .. tostring(k)) end
end

-- The plain value a view is, walked through json.pairs.
local function plain(w)
  if type(w) ~= "table" then return w end
  local t = json.is_array(w) and json.array() or {}
  for k, x in json.pairs(w) do t[k] = plain(x) end
  return t
end

-- json.view reads what decode reads, indexed and iterated, and encodes
-- as it does (v: the decoded object).
local function view_agrees(v, input, e1)
  read_as(v, assert(json.view(input)), "view")
  identical(v, plain(assert(json.view(input))), "view")
  local e = json.encode(assert(json.view(input)))
  if e ~= e1 then error(format("view encodes differently:\n%s\n%s", e1, e), 0) end
end

return function(v, input, obj_json, c_fields, colons)
  local e1 = json.encode(v)
  local v2 = decode(e1)
  identical(v, v2, "")
  local e2 = json.encode(v2)
  if e1 ~= e2 then error(format("encode(decode(encode(x))) differs:\n%s\n%s", e1, e2), 0) end
  if has_cjson then
    local ok, c = pcall(cjson.decode, input)
    if ok then same(v, c, "") end
  end
  local nmembers
  if obj_json then
    local e3 = json.encode(decode(obj_json))
    if e3 ~= e1 then error(format("kl_obj JSON decodes differently:\n%s\n%s", e1, e3), 0) end
    -- Repeated keys are read differently by design: a repeated "labels"
    -- adds to the first in C (as Go's encoding/json merges maps) but
    -- replaces it in Lua. Compare only objects without them.
    nmembers = members(v)
    if nmembers == colons then fields_agree(v, c_fields) end
    meta_and_omit(v, input)
    view_agrees(v, input, e1)
  end
  return e1, nmembers or members(v)
end
