-- kubelua.sim.managed: metadata.managedFields as a real apiserver keeps
-- them, closely enough for clients: which manager (the User-Agent up to its
-- first "/", or ?fieldManager) owns which fields, in the FieldsV1 format
-- ("f:name", "k:{key}" for list items with a merge key, "v:value" for sets,
-- "." for a map that exists, left out where nothing is owned below it). An
-- Update entry is a manager's for one apiVersion (and subresource), its
-- fields named in that version. An update gives its manager the fields it
-- changed and takes them from every other entry, as they changed in that
-- entry's apiVersion; server-side apply uses
-- the same sets to find conflicts, and merges an applied configuration into
-- the object as the real server's structured merge does.
--
-- Which lists are keyed (and by what), sets or atomic, and which structs
-- and maps are atomic, comes from the kind's schema (a kubelua.sim.schema
-- node: x-kubernetes-list-type, -list-map-keys, -map-type, or the patch
-- strategy and merge key); without one, from a hand list of the usual
-- built-in fields.

local json = require "kubelua.json"
local schema = require "kubelua.sim.schema"
local util = require "kubelua.sim.util"

local type, pairs, ipairs, next = type, pairs, ipairs, next
local copy, equal = util.copy, util.equal
local field, list_kind, atomic = schema.field, schema.list_kind, schema.atomic
local concat, sort, tremove = table.concat, table.sort, table.remove
local sub = string.sub
local null, is_array, encode = json.null, json.is_array, json.encode

local _M = {}

local SEP = "\1"

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- Fields of built-in kinds that get a "." entry of their own: maps, and
-- the structs held by pointer (plain structs do not); every object of a
-- custom resource does.
local map_fields = { data = true, binaryData = true, stringData = true, labels = true,
  annotations = true, matchLabels = true, nodeSelector = true, conversion = true,
  rollingUpdate = true, resourceAttributes = true, nonResourceAttributes = true }
-- Lists of built-in kinds merged by a key (the others are atomic, as are
-- all lists of custom resources).
local keyed_lists = { containers = true, initContainers = true, ephemeralContainers = true,
  volumes = true, env = true, ports = true, volumeMounts = true, conditions = true,
  imagePullSecrets = true, ownerReferences = true, tolerations = false }
local set_lists = { finalizers = true }

local function item_key(item)
  if not is_object(item) then return nil end
  -- ports are keyed by number and protocol, named or not (a container's
  -- by containerPort, a Service's by port)
  for _, k in ipairs { "containerPort", "port" } do
    if item[k] ~= nil and item[k] ~= null then
      return encode { [k] = item[k], protocol = item.protocol or "TCP" }
    end
  end
  for _, k in ipairs { "uid", "name", "type" } do
    if item[k] ~= nil and item[k] ~= null then return encode { [k] = item[k] } end
  end
  return nil
end

-- Structs of built-in kinds owned as a whole without a schema
-- (ObjectReference is atomic: an Event's involvedObject, regarding and
-- related).
local atomic_fields = { selector = true, involvedObject = true, regarding = true,
  related = true }

-- How a list is applied and owned: "atomic", "set", or "map" and its
-- keys; the item's key text comes from key_text(item, keys, items).
-- From the schema (node: the kind has one; ext: the list's extensions),
-- else from the hand lists by the field's name.
local function kind_of_list(typed, ext, custom, name)
  if typed then return list_kind(ext) end
  if set_lists[name] then return "set" end
  if not custom and keyed_lists[name] then return "map" end
  return "atomic"
end

-- The "k:" text of a keyed list's item: its keys (from the schema, a
-- key left out taking its default there) as a JSON object, or, without a
-- schema, the usual keys of built-in lists; nil when it has none.
local function key_text(item, keys, items)
  if not is_object(item) then return nil end
  if not keys then return item_key(item) end
  local key = {}
  for _, k in ipairs(keys) do
    local v = item[k]
    if v == nil or v == null then v = items and items.defaults and items.defaults[k] end
    if v == nil then return nil end
    key[k] = v
  end
  return encode(key)
end

-- Adds the leaf paths of value v at prefix to set (path → value text).
-- node, ext, always: v's schema node, extensions and whether it is in the
-- kind's zero object (a struct held by value, in structs held by value up
-- to the root: not in a list's item), when the kind has a schema (typed);
-- name: its field's name. A map, or a struct not in the zero object (held
-- by pointer, or in a list's item), gets a "." of its own, since the real
-- server's field manager counts what differs from that zero object:
-- without a schema, those the hand list names.
local function walk(set, prefix, v, custom, name, typed, node, ext, always)
  if is_object(v) and (typed and atomic(node, ext) or not typed and not custom
      and atomic_fields[name]) then
    set[prefix] = encode(v)
  elseif is_object(v) then
    if next(v) == nil then
      set[prefix] = "{}"
      return
    end
    local dot
    if custom or not typed or not node then
      dot = custom or map_fields[name]
    else
      dot = node.t == "map" or (node.t == "object" and not always)
    end
    if dot then set[prefix .. SEP .. "."] = "" end
    for k, x in pairs(v) do
      local cn, ce, ca = field(node, k)
      walk(set, prefix .. SEP .. "f:" .. k, x, custom, k, typed, cn, ce, ca and always)
    end
  elseif is_array(v) then
    local kind, keys = kind_of_list(typed, ext, custom, name)
    if kind == "set" then
      set[prefix .. SEP .. "."] = ""
      for _, x in ipairs(v) do set[prefix .. SEP .. "v:" .. encode(x)] = "" end
      return
    end
    local items = node and node.t == "array" and node.items or nil
    local keyed = #v > 0 and kind == "map"
    for _, x in ipairs(v) do
      if not key_text(x, keys, items) then keyed = false end
    end
    if not keyed then
      set[prefix] = encode(v)
      return
    end
    if name ~= "containers" and name ~= "conditions" then set[prefix .. SEP .. "."] = "" end
    for _, x in ipairs(v) do
      local p = prefix .. SEP .. "k:" .. key_text(x, keys, items)
      set[p .. SEP .. "."] = ""
      for k, y in pairs(x) do
        local cn, ce = field(items, k)
        -- not in the kind's zero object, and so neither are its structs
        walk(set, p .. SEP .. "f:" .. k, y, custom, k, typed, cn, ce, false)
      end
    end
  elseif v ~= null then
    set[prefix] = type(v) == "string" and v or encode(v)
  end
end

-- The leaf paths of obj that a manager can own. part: "main" (everything
-- but status when the resource has a status subresource), "status", or
-- "all". node: the kind's schema (nil: none).
function _M.leaves(obj, custom, part, node)
  local set = {}
  local typed = node ~= nil
  for k, v in pairs(obj) do
    local cn, ce, ca = field(node, k)
    if k == "metadata" then
      if is_object(v) then
        for _, mk in ipairs { "labels", "annotations", "finalizers", "ownerReferences" } do
          if v[mk] ~= nil and v[mk] ~= null then
            local mn, me, ma = field(cn, mk)
            walk(set, "f:metadata" .. SEP .. "f:" .. mk, v[mk], custom, mk, typed, mn, me, ma)
          end
        end
        if type(v.generateName) == "string" then
          set["f:metadata" .. SEP .. "f:generateName"] = v.generateName
        end
      end
    elseif k ~= "apiVersion" and k ~= "kind" then
      local want = part == "all" or (part == "status") == (k == "status")
      if want then
        if custom and is_object(v) and next(v) ~= nil then set["f:" .. k .. SEP .. "."] = "" end
        walk(set, "f:" .. k, v, custom, k, typed, cn, ce, ca)
      end
    end
  end
  return set
end

-- Server-side apply's merge ----------------------------------------------------

-- The items of a keyed list or a set merged as the real server's
-- structured merge orders them: the object's items in their order, and
-- the applied ones in theirs, each applied item that the object does not
-- have placed before the next item both have. merge_item(live, applied)
-- merges two items of the same key; key(item) is an item's key text.
local function merge_items(lhs, rhs, key, merge_item)
  local lkeys, rkeys, lby, rby = {}, {}, {}, {}
  for i, x in ipairs(lhs) do
    lkeys[i] = key(x)
    if lby[lkeys[i]] == nil then lby[lkeys[i]] = x end
  end
  for i, x in ipairs(rhs) do
    rkeys[i] = key(x)
    rby[rkeys[i]] = x
  end
  local shared = {}
  for _, k in ipairs(rkeys) do
    if lby[k] ~= nil then shared[#shared + 1] = k end
  end
  local si = 1
  local out, done = json.array {}, {}
  local li, ri = 1, 1
  while li <= #lkeys or ri <= #rkeys do
    local took = false
    if li <= #lkeys and ri <= #rkeys then
      local lk = lkeys[li]
      if lk == rkeys[ri] then
        done[lk] = true
        out[#out + 1] = merge_item(lby[lk], rby[lk])
        li, ri, si = li + 1, ri + 1, si + 1
        took = true
      elseif rby[lk] ~= nil and shared[si] ~= nil and shared[si] ~= lk then
        li = li + 1 -- an item both have, not yet its turn
        took = true
      end
    end
    if not took then
      local skip_right = false
      if li <= #lkeys then
        local lk = lkeys[li]
        if rby[lk] == nil then
          out[#out + 1] = copy(lhs[li])
          li = li + 1
          skip_right = true
        elseif done[lk] then
          li = li + 1
        end
      end
      if not skip_right and ri <= #rkeys then
        local rk = rkeys[ri]
        done[rk] = true
        out[#out + 1] = merge_item(lby[rk], rby[rk])
        ri = ri + 1
        if shared[si] == rk then si = si + 1 end
      end
    end
  end
  return out
end

local apply_merge

-- An applied value merged into the object's (live), at schema node and
-- extensions ext (typed: the kind has a schema; custom: a custom
-- resource; name: the field's name).
apply_merge = function(live, cfg, typed, node, ext, custom, name)
  if is_object(cfg) then
    if (typed and atomic(node, ext)) or (not typed and not custom and atomic_fields[name]) then
      return copy(cfg)
    end
    local out = is_object(live) and copy(live) or {}
    for k, x in pairs(cfg) do
      if x == null then
        out[k] = nil
      else
        local cn, ce = field(node, k)
        out[k] = apply_merge(out[k], x, typed, cn, ce, custom, k)
      end
    end
    return out
  elseif is_array(cfg) then
    local kind, keys = kind_of_list(typed, ext, custom, name)
    if kind == "atomic" or not is_array(live) then return copy(cfg) end
    local items = node and node.t == "array" and node.items or nil
    local key = kind == "set" and encode or function(x)
      return key_text(x, keys, items) or encode(x)
    end
    return merge_items(live, cfg, key, function(l, r)
      if kind == "set" or l == nil then return copy(r) end
      return apply_merge(l, r, typed, items, nil, custom, name)
    end)
  end
  return cfg
end

-- merge(obj, cfg, custom, node) -> obj with the applied configuration cfg
-- merged in: structs and maps field by field (atomic ones replaced), keyed
-- lists item by item and sets value by value (their order as the real
-- server gives it), other lists replaced. node: the kind's schema (nil:
-- none).
function _M.merge(obj, cfg, custom, node)
  return apply_merge(obj, cfg, node ~= nil, node, nil, custom, nil)
end

-- Removes the value at path p (see remove).
local function remove_one(obj, p)
  local segs = {}
  for seg in (p .. SEP):gmatch("([^" .. SEP .. "]*)" .. SEP) do segs[#segs + 1] = seg end
  if segs[#segs] == "." then segs[#segs] = nil end
  -- the position of an item in list: by its key ("k:") or value ("v:")
  local function find(list, seg)
    local kind, want = sub(seg, 1, 2), json.decode(sub(seg, 3))
    for i, x in ipairs(list) do
      if kind == "v:" and equal(x, want) then return i end
      if kind == "k:" and is_object(x) and is_object(want) then
        local all = true
        for k, v in pairs(want) do
          if not equal(x[k], v) then all = false end
        end
        if all then return i end
      end
    end
  end
  local cur, chain = obj, { obj }
  for i = 1, #segs do
    local s, kind = segs[i], sub(segs[i], 1, 2)
    local last = i == #segs
    local key
    if kind == "f:" and is_object(cur) then
      key = sub(s, 3)
    elseif (kind == "k:" or kind == "v:") and is_array(cur) then
      key = find(cur, s)
    end
    if key == nil or cur[key] == nil then return end
    if last then
      if is_array(cur) then tremove(cur, key) else cur[key] = nil end
    else
      cur = cur[key]
      chain[i + 1] = cur
    end
  end
  -- maps and lists below the top left empty go too (labels, ports...)
  for i = #segs - 1, 2, -1 do
    local t, parent, s = chain[i + 1], chain[i], segs[i]
    if type(t) == "table" and next(t) == nil and is_object(parent) and sub(s, 1, 2) == "f:" then
      parent[sub(s, 3)] = nil
    else
      break
    end
  end
end

-- remove(obj, paths): removes the fields, keyed list items and set values
-- that a list of managedFields paths names (a previous apply's that no
-- manager owns any longer), items before their fields (whose removal
-- would change an item's key), and the maps and lists below the top that
-- leaves empty (as omitempty drops them).
function _M.remove(obj, paths)
  local depth = {}
  for _, p in ipairs(paths) do
    local _, n = p:gsub(SEP, "")
    depth[p] = n - (p:sub(-2) == SEP .. "." and 1 or 0)
  end
  sort(paths, function(a, b)
    if depth[a] ~= depth[b] then return depth[a] < depth[b] end
    return a < b
  end)
  for _, p in ipairs(paths) do remove_one(obj, p) end
end

-- A map that is owned with nothing below it: its "." alone, written as
-- an empty object, as the field manager writes a member without children.
local function bare(node)
  for k, v in pairs(node) do
    if type(v) == "table" then
      if next(v) == "." and next(v, ".") == nil then
        node[k] = {}
      else
        bare(v)
      end
    end
  end
  return node
end

-- Builds a FieldsV1 tree from a set of paths.
function _M.tree(set)
  local root = {}
  local paths = {}
  for p in pairs(set) do paths[#paths + 1] = p end
  sort(paths)
  for _, p in ipairs(paths) do
    local node = root
    for seg in (p .. SEP):gmatch("([^" .. SEP .. "]*)" .. SEP) do
      node[seg] = node[seg] or {}
      node = node[seg]
    end
  end
  return bare(root)
end

-- The set of paths of a FieldsV1 tree.
function _M.paths(tree, prefix, out)
  out = out or {}
  for k, v in pairs(tree) do
    local p = prefix and (prefix .. SEP .. k) or k
    if type(v) == "table" and next(v) ~= nil then
      _M.paths(v, p, out)
    else
      out[p] = true
    end
  end
  return out
end

-- A path as a conflict names it: .spec.containers[name="main"].image.
function _M.format_path(p)
  local parts = {}
  for seg in (p .. SEP):gmatch("([^" .. SEP .. "]*)" .. SEP) do
    local kind, rest = seg:sub(1, 2), seg:sub(3)
    if kind == "f:" then
      parts[#parts + 1] = "." .. rest
    elseif kind == "k:" then
      -- a keyed item: [name="main"], [port=80,protocol="TCP"]
      local key = json.decode(rest)
      local names, items = {}, {}
      for k in pairs(type(key) == "table" and key or {}) do names[#names + 1] = k end
      sort(names)
      for i, k in ipairs(names) do items[i] = k .. "=" .. encode(key[k]) end
      parts[#parts + 1] = "[" .. concat(items, ",") .. "]"
    elseif kind == "v:" then
      parts[#parts + 1] = "[=" .. rest .. "]"
    elseif seg ~= "." then
      parts[#parts + 1] = "[" .. rest .. "]"
    end
  end
  return concat(parts)
end

local function entry(manager, operation, api_version, time, set, subresource)
  local e = { manager = manager, operation = operation, apiVersion = api_version, time = time,
    fieldsType = "FieldsV1", fieldsV1 = _M.tree(set) }
  if subresource then e.subresource = subresource end
  return e
end

-- Computes the new managedFields list for an update of old (nil on
-- create) into new by manager. op = { manager, operation ("Update" or
-- "Apply"), api_version, time, subresource, custom, owned = set (Apply:
-- the fields the applied configuration names), version }. As
-- kube-apiserver's field manager keeps them: an Update entry per manager,
-- apiVersion and subresource (an Apply entry per manager and
-- subresource), each entry's fields named in its own apiVersion. An entry
-- of another apiVersion loses what changed there: old and new converted
-- into it, as its set is first checked against the object converted
-- (op.version(api_version) -> { convert = fn(obj) -> obj | nil, err,
-- node = its schema }, nil for an apiVersion no longer served: its
-- entries go; without op.version, what changed in op.api_version counts
-- for all). -> the list | nil, err when a conversion fails.
function _M.update(old, new, op)
  local part = op.subresource == "status" and "status" or (op.has_status and "main" or "all")
  local new_leaves = _M.leaves(new, op.custom, "all", op.node)
  local old_leaves = old and _M.leaves(old, op.custom, "all", op.node) or {}
  local mine = op.owned
  if not mine then
    mine = {}
    local candidates = _M.leaves(new, op.custom, part, op.node)
    for p, v in pairs(candidates) do
      if old_leaves[p] ~= v then mine[p] = true end
    end
  end
  local function diff(a, b)
    local out = {}
    for p, v in pairs(b) do
      if a[p] ~= v then out[p] = true end
    end
    for p in pairs(a) do
      if b[p] == nil then out[p] = true end
    end
    return out
  end
  local list = old and old.metadata and old.metadata.managedFields
  list = type(list) == "table" and list or {}
  -- the entries of other apiVersions: each checked against the object
  -- converted into its version, then what changed there computed once a
  -- version (false: not served)
  local versions = { [op.api_version or ""] = diff(old_leaves, new_leaves) }
  local served = {}
  for _, e in ipairs(list) do
    local v = e.apiVersion
    if op.version and v ~= op.api_version and served[v] == nil then
      served[v] = op.version(v) or false
    end
    if served[v] then
      local _, err = served[v].convert(old)
      if err then return nil, err end
    end
  end
  local function changed_in(v)
    if not op.version then return versions[op.api_version or ""] end
    if versions[v] == nil then
      local ver = served[v]
      if not ver then return nil end
      local o, err = ver.convert(old)
      if not o then return nil, err end
      local n
      n, err = ver.convert(new)
      if not n then return nil, err end
      versions[v] = diff(_M.leaves(o, op.custom, "all", ver.node),
        _M.leaves(n, op.custom, "all", ver.node))
    end
    return versions[v]
  end
  -- a map owned alone reads back as a field ("f:spec": {}): its "." again
  -- where the object has it so
  local function owned(e)
    local set = _M.paths(e.fieldsV1 or {})
    for p in pairs(set) do
      local d = p .. SEP .. "."
      if old_leaves[p] == nil and new_leaves[p] == nil
          and (old_leaves[d] ~= nil or new_leaves[d] ~= nil) then
        set[p], set[d] = nil, true
      end
    end
    return set
  end
  local out = json.array {}
  local found = false
  for _, e in ipairs(list) do
    local set = owned(e)
    local same = e.manager == op.manager and e.operation == op.operation
      and (e.subresource or false) == (op.subresource or false)
      and (op.operation == "Apply" or (e.apiVersion or false) == (op.api_version or false))
    local keep = true
    if same then
      found = true
      if not op.owned then
        for p in pairs(set) do
          if new_leaves[p] ~= nil then mine[p] = true end
        end
      end
      set = mine
    else
      -- others lose what changed, in their own apiVersion; an applier
      -- naming a field with the value it has shares it
      local changed, err = changed_in(e.apiVersion or "")
      if err then return nil, err end
      keep = changed ~= nil
      for p in pairs(changed or {}) do set[p] = nil end
    end
    if keep and next(set) ~= nil then
      local ne = entry(e.manager, e.operation, same and op.api_version or e.apiVersion,
        same and op.time or e.time, set, e.subresource)
      out[#out + 1] = ne
    end
  end
  if not found and next(mine) ~= nil then
    out[#out + 1] = entry(op.manager, op.operation, op.api_version, op.time, mine, op.subresource)
  end
  -- the apiserver's order: Apply before Update, then by time (none first),
  -- manager, apiVersion, subresource
  sort(out, function(a, b)
    if a.operation ~= b.operation then return a.operation < b.operation end
    if a.time ~= b.time then return (a.time or "") < (b.time or "") end
    if a.manager ~= b.manager then return a.manager < b.manager end
    if a.apiVersion ~= b.apiVersion then return (a.apiVersion or "") < (b.apiVersion or "") end
    return (a.subresource or "") < (b.subresource or "")
  end)
  return out
end

-- How a conflict names the manager of a managedFields entry, as the real
-- server prints it: quoted, then its subresource, then for an Update the
-- apiVersion it wrote with.
local function manager_name(e)
  local s = encode(tostring(e.manager))
  if type(e.subresource) == "string" and e.subresource ~= "" then
    s = s .. " with subresource " .. encode(e.subresource)
  end
  if e.operation == "Update" then s = s .. " using " .. tostring(e.apiVersion) end
  return s
end

-- The order of the field manager's sets: at each level the fields that
-- end there come before those with fields below them, each by name
-- (.spec.strategy.type before .spec.strategy.rollingUpdate.maxSurge).
local function path_less(a, b)
  local sa, sb = {}, {}
  for seg in (a .. SEP):gmatch("([^" .. SEP .. "]*)" .. SEP) do sa[#sa + 1] = seg end
  for seg in (b .. SEP):gmatch("([^" .. SEP .. "]*)" .. SEP) do sb[#sb + 1] = seg end
  for i = 1, math.min(#sa, #sb) do
    if sa[i] ~= sb[i] then
      local la, lb = i == #sa, i == #sb
      if la ~= lb then return la end
      return sa[i] < sb[i]
    end
  end
  return #sa < #sb
end

-- Conflicts of an apply by manager: fields it names that another manager
-- owns with a different value. Returns a list of {manager, path}, manager
-- as a conflict message names it ('"kubectl" using v1').
function _M.conflicts(current, applied_leaves, current_leaves, manager)
  local out = {}
  local list = current.metadata and current.metadata.managedFields
  if type(list) ~= "table" then return out end
  for _, e in ipairs(list) do
    if e.manager ~= manager then
      local set = _M.paths(e.fieldsV1 or {})
      for p in pairs(applied_leaves) do
        if set[p] and current_leaves[p] ~= applied_leaves[p] and not p:find("%.$") then
          out[#out + 1] = { manager = manager_name(e), path = p }
        end
      end
    end
  end
  sort(out, function(a, b) return path_less(a.path, b.path) end)
  return out
end

return _M
