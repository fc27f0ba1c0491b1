-- kubelua.sim.patch: the patch formats a Kubernetes API server accepts, on
-- decoded JSON values (kubelua.json tables): JSON merge patch (RFC 7386),
-- JSON patch (RFC 6902) and strategic merge patch (lists of objects merged
-- by their key, "$patch" directives). Each function returns a new value and
-- never changes its inputs.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"

local type, pairs, ipairs, tonumber = type, pairs, ipairs, tonumber
local copy, equal = util.copy, util.equal
local null, is_array = json.null, json.is_array
local gsub, sub = string.gsub, string.sub
local remove, insert = table.remove, table.insert

local _M = {}

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- RFC 7386
local function merge(target, patch)
  if not is_object(patch) then return copy(patch) end
  local out = is_object(target) and copy(target) or {}
  for k, v in pairs(patch) do
    if v == null then
      out[k] = nil
    else
      out[k] = merge(out[k], v)
    end
  end
  return out
end
_M.merge = merge

-- RFC 6902 -------------------------------------------------------------------

local function parse_pointer(p)
  if type(p) ~= "string" then return nil end
  if p == "" then return {} end
  if sub(p, 1, 1) ~= "/" then return nil end
  local parts = {}
  for seg in (sub(p, 2) .. "/"):gmatch("([^/]*)/") do
    parts[#parts + 1] = (gsub(gsub(seg, "~1", "/"), "~0", "~"))
  end
  return parts
end

-- The container of the pointer's last segment and that segment (an index
-- for arrays, "-" kept as is).
local function resolve(doc, parts)
  local cur = doc
  for i = 1, #parts - 1 do
    if type(cur) ~= "table" then return nil end
    local seg = parts[i]
    if is_array(cur) then
      local n = tonumber(seg)
      if not n then return nil end
      cur = cur[n + 1]
    else
      cur = cur[seg]
    end
  end
  if type(cur) ~= "table" then return nil end
  local last = parts[#parts]
  if is_array(cur) and last ~= "-" then
    local n = tonumber(last)
    if not n or n ~= math.floor(n) or n < 0 then return nil end
    return cur, n + 1
  end
  return cur, last
end

local function get_at(doc, parts)
  if #parts == 0 then return doc end
  local c, k = resolve(doc, parts)
  if not c or k == "-" then return nil end
  return c[k]
end

local function add_at(doc, parts, value)
  if #parts == 0 then return value end
  local c, k = resolve(doc, parts)
  if not c then return nil, "missing path" end
  if is_array(c) then
    if k == "-" then
      c[#c + 1] = value
    elseif k > #c + 1 then
      return nil, "index out of range"
    else
      insert(c, k, value)
    end
  else
    c[k] = value
  end
  return doc
end

local function remove_at(doc, parts)
  local c, k = resolve(doc, parts)
  if not c or k == "-" then return nil, "missing path" end
  if is_array(c) then
    if not c[k] then return nil, "missing path" end
    local v = remove(c, k)
    return doc, v
  end
  if c[k] == nil then return nil, "missing path" end
  local v = c[k]
  c[k] = nil
  return doc, v
end

-- Returns the patched document, or nil, kind where kind is "malformed" (the
-- patch is not a list of operations: 400) or "invalid" (an operation
-- failed: 422).
function _M.json_patch(doc, ops)
  if not is_array(ops) then return nil, "malformed" end
  doc = copy(doc)
  for _, op in ipairs(ops) do
    if not is_object(op) then return nil, "malformed" end
    local path = parse_pointer(op.path)
    if not path then return nil, "invalid" end
    local kind, err = op.op, nil
    if kind == "add" then
      if op.value == nil then return nil, "invalid" end
      doc, err = add_at(doc, path, copy(op.value))
    elseif kind == "remove" then
      if #path == 0 then return nil, "invalid" end
      doc, err = remove_at(doc, path)
    elseif kind == "replace" then
      if #path == 0 then
        doc = copy(op.value)
      else
        doc, err = remove_at(doc, path)
        if doc then doc, err = add_at(doc, path, copy(op.value)) end
      end
    elseif kind == "move" or kind == "copy" then
      local from = parse_pointer(op.from)
      if not from or #from == 0 then return nil, "invalid" end
      local v
      if kind == "move" then
        doc, v = remove_at(doc, from)
        if not doc then return nil, "invalid" end
      else
        v = copy(get_at(doc, from))
        if v == nil then return nil, "invalid" end
      end
      doc, err = add_at(doc, path, v)
    elseif kind == "test" then
      if not equal(get_at(doc, path), op.value) then return nil, "invalid" end
    else
      return nil, "invalid"
    end
    if doc == nil then return nil, "invalid", err end
  end
  return doc
end

-- Strategic merge patch --------------------------------------------------------

-- The merge key of a list of objects: "name" for most (containers, volumes,
-- env, ...), "containerPort" for container ports, "type" for conditions.
local function merge_key(list)
  local first = list[1]
  if not is_object(first) then return nil end
  for _, k in ipairs { "name", "containerPort", "type", "ip", "devicePath", "mountPath" } do
    local ok = true
    for _, item in ipairs(list) do
      if not is_object(item) or (item[k] == nil and item["$patch"] == nil) then
        ok = false
        break
      end
    end
    if ok then return k end
  end
  return nil
end

local smp

local function position(list, item, key)
  for i, x in ipairs(list) do
    if is_object(x) and equal(x[key], item[key]) then return i end
  end
  return nil
end

-- The order a real server gives a merged list (normalizeElementOrder):
-- the patch's items in the patch's order and the others in the object's,
-- merged so that of two items the object had, the earlier comes first,
-- and an item the object did not have comes before one it had.
local function ordered(merged, orig, patch, key)
  local right, left = json.array {}, json.array {}
  for _, p in ipairs(patch) do
    local i = p["$patch"] ~= "delete" and position(merged, p, key)
    if i and not position(right, p, key) then right[#right + 1] = merged[i] end
  end
  for _, item in ipairs(merged) do
    if not position(right, item, key) then left[#left + 1] = item end
  end
  local out, i, j = json.array {}, 1, 1
  while i <= #left or j <= #right do
    local take_left = j > #right
    if not take_left and i <= #left then
      local li, ri = position(orig, left[i], key), position(orig, right[j], key)
      take_left = li ~= nil and ri ~= nil and li < ri
    end
    if take_left then
      out[#out + 1] = left[i]
      i = i + 1
    else
      out[#out + 1] = right[j]
      j = j + 1
    end
  end
  return out
end

local function smp_list(orig, patch)
  local key = merge_key(patch)
  if not key or not is_array(orig) then
    local out = json.array {}
    for _, v in ipairs(patch) do
      if not (is_object(v) and v["$patch"]) then out[#out + 1] = copy(v) end
    end
    return out
  end
  for _, item in ipairs(orig) do
    if not is_object(item) or item[key] == nil then return copy(patch) end
  end
  local out = copy(orig)
  for _, p in ipairs(patch) do
    local pos
    for i, item in ipairs(out) do
      if equal(item[key], p[key]) then
        pos = i
        break
      end
    end
    local directive = p["$patch"]
    if directive == "delete" then
      if pos then remove(out, pos) end
    elseif directive == "replace" then
      local v = copy(p)
      v["$patch"] = nil
      if pos then out[pos] = v else out[#out + 1] = v end
    elseif pos then
      out[pos] = smp(out[pos], p)
    else
      out[#out + 1] = smp(nil, p)
    end
  end
  return ordered(out, orig, patch, key)
end

smp = function(target, patch)
  if not is_object(patch) then return copy(patch) end
  if patch["$patch"] == "replace" then
    local v = copy(patch)
    v["$patch"] = nil
    return v
  end
  local out = is_object(target) and copy(target) or {}
  local retain = patch["$retainKeys"]
  if retain ~= nil and retain ~= null then
    -- the fields to keep (a union's members, e.g. a Deployment's strategy):
    -- the others go, then the patch merges in; the patch may name no other
    if not is_array(retain) then error({ patch = "invalid patch format of retainKeys" }, 0) end
    local keep = {}
    for _, k in ipairs(retain) do keep[k] = true end
    for k, v in pairs(patch) do
      if v ~= null and not keep[k] and sub(k, 1, 1) ~= "$" then
        error({ patch = "invalid patch format of retainKeys" }, 0)
      end
    end
    for k in pairs(out) do
      if not keep[k] then out[k] = nil end
    end
  end
  for k, v in pairs(patch) do
    if sub(k, 1, 1) == "$" then
      -- other directives ($patch, $setElementOrder/...): ordering hints
      -- are ignored
      out[k] = nil
    elseif v == null then
      out[k] = nil
    elseif is_object(v) and v["$patch"] == "delete" then
      out[k] = nil
    elseif is_array(v) then
      out[k] = smp_list(out[k], v)
    else
      out[k] = smp(out[k], v)
    end
  end
  for k in pairs(out) do
    if type(k) == "string" and sub(k, 1, 1) == "$" then out[k] = nil end
  end
  return out
end
-- strategic(target, patch) -> the patched value, or nil and why the patch
-- is malformed (for a 400).
function _M.strategic(target, patch)
  local ok, out = pcall(smp, target, patch)
  if ok then return out end
  if type(out) == "table" and out.patch then return nil, out.patch end
  error(out, 0)
end

return _M
