-- kubelua.sim.managed: metadata.managedFields as a real apiserver keeps
-- them, closely enough for clients: which manager (the User-Agent up to its
-- first "/", or ?fieldManager) owns which fields, in the FieldsV1 format
-- ("f:name", "k:{key}" for list items with a merge key, "v:value" for sets,
-- "." for a map that exists). An update gives its manager the fields it
-- changed and takes them from every other manager; server-side apply uses
-- the same sets to find conflicts.

local json = require "kubelua.json"

local type, pairs, ipairs, next = type, pairs, ipairs, next
local concat, sort = table.concat, table.sort
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

-- Adds the leaf paths of value v at prefix to set (path → value text).
-- Structs of built-in kinds owned as a whole (ObjectReference is atomic:
-- an Event's involvedObject, regarding and related).
local atomic_fields = { selector = true, involvedObject = true, regarding = true,
  related = true }

local function walk(set, prefix, v, custom, name)
  if is_object(v) and not custom and atomic_fields[name] then
    set[prefix] = encode(v)
  elseif is_object(v) then
    if next(v) == nil then
      set[prefix] = "{}"
      return
    end
    if custom or map_fields[name] then set[prefix .. SEP .. "."] = "" end
    for k, x in pairs(v) do
      walk(set, prefix .. SEP .. "f:" .. k, x, custom, k)
    end
  elseif is_array(v) then
    if set_lists[name] then
      set[prefix .. SEP .. "."] = ""
      for _, x in ipairs(v) do set[prefix .. SEP .. "v:" .. encode(x)] = "" end
      return
    end
    local keyed = #v > 0 and not custom and keyed_lists[name]
    for _, x in ipairs(v) do
      if not item_key(x) then keyed = false end
    end
    if not keyed then
      set[prefix] = encode(v)
      return
    end
    if name ~= "containers" and name ~= "conditions" then set[prefix .. SEP .. "."] = "" end
    for _, x in ipairs(v) do
      local p = prefix .. SEP .. "k:" .. item_key(x)
      set[p .. SEP .. "."] = ""
      for k, y in pairs(x) do walk(set, p .. SEP .. "f:" .. k, y, custom, k) end
    end
  elseif v ~= null then
    set[prefix] = type(v) == "string" and v or encode(v)
  end
end

-- The leaf paths of obj that a manager can own. part: "main" (everything
-- but status when the resource has a status subresource), "status", or
-- "all".
function _M.leaves(obj, custom, part)
  local set = {}
  for k, v in pairs(obj) do
    if k == "metadata" then
      if is_object(v) then
        for _, mk in ipairs { "labels", "annotations", "finalizers", "ownerReferences" } do
          if v[mk] ~= nil and v[mk] ~= null then
            walk(set, "f:metadata" .. SEP .. "f:" .. mk, v[mk], custom, mk)
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
        walk(set, "f:" .. k, v, custom, k)
      end
    end
  end
  return set
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
  return root
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
-- the fields the applied configuration names) }.
function _M.update(old, new, op)
  local part = op.subresource == "status" and "status" or (op.has_status and "main" or "all")
  local new_leaves = _M.leaves(new, op.custom, "all")
  local old_leaves = old and _M.leaves(old, op.custom, "all") or {}
  local mine = op.owned
  if not mine then
    mine = {}
    local candidates = _M.leaves(new, op.custom, part)
    for p, v in pairs(candidates) do
      if old_leaves[p] ~= v then mine[p] = true end
    end
  end
  local changed = {}
  for p, v in pairs(new_leaves) do
    if old_leaves[p] ~= v then changed[p] = true end
  end
  for p in pairs(old_leaves) do
    if new_leaves[p] == nil then changed[p] = true end
  end
  local out = json.array {}
  local found = false
  local list = old and old.metadata and old.metadata.managedFields
  if type(list) == "table" then
    for _, e in ipairs(list) do
      local set = _M.paths(e.fieldsV1 or {})
      local same = e.manager == op.manager and e.operation == op.operation
        and (e.subresource or false) == (op.subresource or false)
      if same then
        found = true
        if not op.owned then
          for p in pairs(set) do
            if new_leaves[p] ~= nil then mine[p] = true end
          end
        end
        set = mine
      else
        -- others lose what changed; an applier naming a field with the
        -- value it has shares it
        for p in pairs(changed) do set[p] = nil end
      end
      if next(set) ~= nil then
        local ne = entry(e.manager, e.operation, e.apiVersion,
          same and op.time or e.time, set, e.subresource)
        out[#out + 1] = ne
      end
    end
  end
  if not found and next(mine) ~= nil then
    out[#out + 1] = entry(op.manager, op.operation, op.api_version, op.time, mine, op.subresource)
  end
  -- the apiserver's order: Apply before Update, then by time (none first),
  -- manager, subresource
  sort(out, function(a, b)
    if a.operation ~= b.operation then return a.operation < b.operation end
    if a.time ~= b.time then return (a.time or "") < (b.time or "") end
    if a.manager ~= b.manager then return a.manager < b.manager end
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
