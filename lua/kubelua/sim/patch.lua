-- kubelua.sim.patch: the patch formats a Kubernetes API server accepts, on
-- decoded JSON values (kubelua.json tables): JSON merge patch (RFC 7386),
-- JSON patch (RFC 6902) and strategic merge patch (the lists the kind's
-- schema says to merge merged by their key, its directives followed). Each
-- function returns a new value and never changes its inputs.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local schema = require "kubelua.sim.schema"

local type, pairs, ipairs, tonumber = type, pairs, ipairs, tonumber
local copy, equal = util.copy, util.equal
local field = schema.field
local null, is_array = json.null, json.is_array
local format, gsub, sub = string.format, string.gsub, string.sub
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
--
-- As apimachinery's strategicpatch applies one on a server (parallel lists
-- merged, unmatched nulls ignored), led by the kind's schema (a
-- kubelua.sim.schema node): a list whose field has the patch strategy
-- "merge" is merged, by its x-kubernetes-patch-merge-key for objects, as a
-- set for scalars (finalizers); every other list is replaced by the
-- patch's; "$retainKeys", "$setElementOrder/<list>" and
-- "$deleteFromPrimitiveList/<list>" are followed, "$patch" (replace,
-- delete) on objects and list items. Without a schema (node nil at the
-- top) a list of objects is merged by the first of a few usual keys its
-- items all have, as most built-in lists are.

local DELETE_PREFIX, ORDER_PREFIX = "$deleteFromPrimitiveList/", "$setElementOrder/"

-- A malformed patch: strategic() answers nil, msg, code.
local function malformed(msg, code) error({ patch = msg, code = code or 400 }, 0) end

-- Go's %v of a decoded JSON value, as apimachinery's messages print one
-- (map[image:x name:a]).
local function go_value(v)
  if is_object(v) then
    local keys, parts = {}, {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    for i, k in ipairs(keys) do parts[i] = k .. ":" .. go_value(v[k]) end
    return "map[" .. table.concat(parts, " ") .. "]"
  elseif is_array(v) then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = go_value(x) end
    return "[" .. table.concat(parts, " ") .. "]"
  elseif v == null then
    return "<nil>"
  end
  return tostring(v)
end

-- The merge key of a list of objects without a schema: "name" for most
-- (containers, volumes, env, ...), "containerPort" for container ports,
-- "type" for conditions.
local function guessed_key(list)
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

-- What an item is found by: its merge key's value, or the item itself (a
-- scalar, key nil).
local function key_of(item, key)
  if key == nil then return item end
  return is_object(item) and item[key] or nil
end

local function position(list, item, key)
  local want = key_of(item, key)
  if want == nil then return nil end
  for i, x in ipairs(list) do
    if equal(key_of(x, key), want) then return i end
  end
  return nil
end

local function is_directive(v) return is_object(v) and v["$patch"] ~= nil end

-- The order a real server gives a merged list (normalizeElementOrder):
-- the items `order` names in its order and the others in the object's,
-- merged so that of two items the object had, the earlier comes first,
-- and an item the object did not have comes before one it had.
local function ordered(merged, orig, order, key)
  local right, left = json.array {}, json.array {}
  for _, p in ipairs(order) do
    local i = not is_directive(p) and position(merged, p, key)
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

-- A patch value taken where the object has nothing to merge it into
-- (removeDirectives, nulls discarded): objects with "$patch" left out;
-- other directives stay, for the decoder to name as unknown fields.
local function undirected(v)
  if is_object(v) then
    if v["$patch"] ~= nil then return nil end
    local out = {}
    for k, x in pairs(v) do
      if x ~= null then out[k] = undirected(x) end
    end
    return out
  elseif is_array(v) then
    local out = json.array {}
    for _, x in ipairs(v) do
      local y = undirected(x)
      if y ~= nil then out[#out + 1] = y end
    end
    return out
  end
  return v
end

local merge_map, merge_list

-- A list merged without a schema: by the usual key its items all have,
-- else replaced.
local function guessed_merge(have, v)
  local key = guessed_key(v)
  for _, item in ipairs(have) do
    if not is_object(item) or item[key] == nil then key = nil end
  end
  return key and merge_list(have, v, nil, key, false) or undirected(v)
end

-- Merges list patch into list orig (a copy) by key (nil: scalars), items
-- of schema node `items` (typed: the kind has a schema); removing: patch
-- is a $deleteFromPrimitiveList, after which an empty list is none.
merge_list = function(orig, patch, items, key, typed, removing)
  if #orig == 0 and #patch == 0 then return copy(orig) end
  local first = orig[1]
  if first == nil then first = patch[1] end
  if is_array(first) then malformed("lists of lists are not supported", 422) end
  if not is_object(first) then
    if removing then
      local out = json.array {}
      for _, v in ipairs(orig) do
        if not position(patch, v, nil) then out[#out + 1] = copy(v) end
      end
      return #out > 0 and out or nil
    end
    local merged = json.array {}
    for _, list in ipairs { orig, patch } do
      for _, v in ipairs(list) do
        if not position(merged, v, nil) then merged[#merged + 1] = copy(v) end
      end
    end
    return ordered(merged, orig, patch, nil)
  end
  if not key then malformed("cannot merge lists without merge key", 500) end
  local out, plain, replace = copy(orig), json.array {}, false
  for _, p in ipairs(patch) do
    local directive = is_object(p) and p["$patch"]
    if directive == nil then
      plain[#plain + 1] = p
    elseif directive == "delete" then
      if not is_object(p) or p[key] == nil then
        malformed(format("map: %s does not contain declared merge key: %s", go_value(p), key),
          500)
      end
      for i = #out, 1, -1 do
        if equal(key_of(out[i], key), p[key]) then remove(out, i) end
      end
    elseif directive == "replace" then
      replace = true
    elseif directive == "merge" then
      malformed("merging lists cannot yet be specified in the patch", 500)
    else
      malformed(format("unknown patch type: %s in map: %s", go_value(directive), go_value(p)),
        500)
    end
  end
  if replace then return ordered(copy(plain), plain, {}, key) end
  local base = out
  out = copy(base)
  for _, p in ipairs(plain) do
    if not is_object(p) or p[key] == nil then
      malformed(format("map: %s does not contain declared merge key: %s", go_value(p), key),
        500)
    end
    local pos = position(out, p, key)
    if pos then
      out[pos] = merge_map(out[pos], p, items, typed)
    else
      out[#out + 1] = undirected(p)
    end
  end
  return ordered(out, base, plain, key)
end

-- The list value of field k merged: strategy ext (nil: replaced), node
-- its schema node.
local function merge_field_list(orig, patch, node, ext, removing)
  local items = node and node.t == "array" and node.items or nil
  if ext and ext.strategy and ext.strategy:find("merge", 1, true) or removing then
    return merge_list(orig, patch, items, ext and ext.merge_key, true, removing)
  end
  return copy(patch)
end

-- $setElementOrder/<list>: the list merged, then ordered as it says.
local function set_order(out, patch, k, order, node, typed)
  local name = sub(k, #ORDER_PREFIX + 1)
  if name == "" or not is_array(order) then
    malformed("invalid patch format of setElementOrder list")
  end
  local child, ext = field(node, name)
  local key = ext and ext.merge_key
  if not typed then key = guessed_key(order) end
  local have, given = out[name], patch[name]
  local merged
  if is_array(have) and is_array(given) then
    merged = typed and merge_field_list(have, given, child, ext) or guessed_merge(have, given)
  elseif is_array(given) then
    merged = undirected(given)
  elseif is_array(have) then
    merged = have
  else
    return
  end
  -- the patch's items (deletions aside) in the order's order
  local at = 1
  for _, p in ipairs(given or {}) do
    if not is_directive(p) then
      while at <= #order and not equal(key_of(order[at], key), key_of(p, key)) do at = at + 1 end
      if at > #order then
        malformed(format("The order in patch list:\n%s\n doesn't match %s list:\n%s\n",
          go_value(given), "$setElementOrder", go_value(order)), 500)
      end
      at = at + 1
    end
  end
  out[name] = ordered(merged, is_array(have) and have or {}, order, key)
  return true
end

-- mergeMap: patch merged into target (neither changed) at schema node;
-- typed: the kind has a schema.
merge_map = function(target, patch, node, typed)
  local directive = patch["$patch"]
  if directive == "replace" then
    local v = copy(patch)
    v["$patch"] = nil
    return v
  elseif directive == "delete" then
    return {}
  elseif directive ~= nil then
    malformed(format("unknown patch type: %s in map: %s", go_value(directive), go_value(patch)),
      500)
  end
  local out = is_object(target) and copy(target) or {}
  local retain = patch["$retainKeys"]
  if retain ~= nil and retain ~= null then
    -- the fields to keep (a union's members, e.g. a Deployment's strategy):
    -- the others go, then the patch merges in; the patch may name no other
    if not is_array(retain) then malformed("invalid patch format of retainKeys") end
    local keep = {}
    for _, k in ipairs(retain) do keep[k] = true end
    for k, v in pairs(patch) do
      if v ~= null and not keep[k] and sub(k, 1, 1) ~= "$" then
        malformed("invalid patch format of retainKeys")
      end
    end
    for k in pairs(out) do
      if not keep[k] then out[k] = nil end
    end
  end
  local done = {}
  for k, v in pairs(patch) do
    if sub(k, 1, #ORDER_PREFIX) == ORDER_PREFIX then
      if set_order(out, patch, k, v, node, typed) then done[sub(k, #ORDER_PREFIX + 1)] = true end
    end
  end
  for k, v in pairs(patch) do
    local have = out[k]
    local removing = sub(k, 1, #DELETE_PREFIX) == DELETE_PREFIX
    -- $patch, $retainKeys and the ordered lists are done above; a
    -- directive this server does not know is dropped
    if done[k] or (sub(k, 1, 1) == "$" and not removing) then goto continue end
    if removing then
      local name = sub(k, #DELETE_PREFIX + 1)
      if name == "" then malformed("invalid patch format of primitive list") end
      if v == null then
        out[name] = nil
      elseif is_array(out[name]) and is_array(v) then
        local child, ext = field(node, name)
        out[name] = merge_field_list(out[name], v, child, ext, true)
      end
    elseif v == null then
      out[k] = nil
    elseif have == nil or is_object(have) ~= is_object(v) or is_array(have) ~= is_array(v) then
      out[k] = undirected(v)
    elseif is_object(v) then
      local child, ext = field(node, k)
      if typed and ext and ext.strategy == "replace" then
        out[k] = copy(v)
      else
        out[k] = merge_map(have, v, child, typed)
      end
    elseif is_array(v) then
      if typed then
        local child, ext = field(node, k)
        out[k] = merge_field_list(have, v, child, ext)
      else
        out[k] = guessed_merge(have, v)
      end
    else
      out[k] = v
    end
    ::continue::
  end
  return out
end

-- strategic(target, patch[, node]) -> the patched value, or nil, why the
-- patch is malformed and the status code to answer with. node: the kind's
-- schema (kubelua.sim.schema's checker), nil when it has none.
function _M.strategic(target, patch, node)
  if not is_object(patch) then return copy(patch) end
  local ok, out = pcall(merge_map, target, patch, node, node ~= nil)
  if ok then return out end
  if type(out) == "table" and out.patch then return nil, out.patch, out.code end
  error(out, 0)
end

return _M
