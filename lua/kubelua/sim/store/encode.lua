-- kubelua.sim.store.encode: the store's entries and their JSON. An entry
-- is { obj, json, key, ns, name, rv, res } (and, once stored, etype and
-- prev: the event that made it); json is a kubelua.httpd bytes value made
-- once per change from the object's layout.

local json = require "kubelua.json"
local httpd = require "kubelua.httpd"

local type, ipairs, tonumber, setmetatable, next =
  type, ipairs, tonumber, setmetatable, next
local concat, sort = table.concat, table.sort
local format, find = string.format, string.find
local floor = math.floor
local encode, is_array = json.encode, json.is_array
local join_bytes = httpd.join
local new_tab = require "table.new"

local _M = {}

-- An object's key in its resource's objects: "ns/name", or the name.
local function obj_key(ns, name)
  if ns and ns ~= "" then return ns .. "/" .. name end
  return name
end

-- Encoding. Stored objects are never changed (every change builds new
-- tables, sharing the unchanged ones), so a table's JSON stays valid for as
-- long as the table lives. Each entry keeps the layout of its object's top
-- two levels (the object, then metadata, spec, status...): a list of the
-- JSON parts, key by key ('{"apiVersion":', '"v1"', ',"kind":', ...),
-- where the part of a value that is an object is that object's layout.
-- A new version is laid out against the previous entry's layout: a value
-- that is the same (the same string, number or shared table) reuses its
-- part, and only what changed is encoded; the key order is reused when the
-- keys are the same. httpd.join then copies the parts, nested layouts
-- included, into the object's JSON once. A writer that changes one field
-- of a 2.4 KB Pod pays for that field and one copy, not for the object.

-- "k1\0k2..." → the sorted keys, with .pre[i] = ',"ki":' and .idx[ki] = i;
-- shared by the layouts that have these keys
local key_lists = setmetatable({}, { __mode = "v" })

local function key_list(ks)
  sort(ks)
  local sig = concat(ks, "\0")
  local kl = key_lists[sig]
  if kl then return kl end
  local pre, idx = {}, {}
  for i, k in ipairs(ks) do
    pre[i] = (i == 1 and "{" or ",") .. encode(k) .. ":"
    idx[k] = i
  end
  ks.pre, ks.idx = pre, idx
  key_lists[sig] = ks
  return ks
end

local function enc_scalar(v)
  local t = type(v)
  if t == "string" and not find(v, '[%c"\\\128-\255]') then return '"' .. v .. '"' end
  if t == "number" and v == floor(v) and v > -1e15 and v < 1e15 then
    return format("%d", v)
  end
  if t == "boolean" then return v and "true" or "false" end
  return encode(v)
end

local lay_out

-- The part of value x at depth (1 or 2): its JSON, or for an object at
-- depth 1 its layout; pl is the previous part at the same place.
local function enc_value(x, depth, pl)
  if type(x) ~= "table" then return enc_scalar(x) end
  if depth < 2 and next(x) ~= nil and not is_array(x) then
    return lay_out(x, depth, type(pl) == "table" and pl or nil)
  end
  return encode(x)
end

-- The layout of object v at depth 0 or 1, against pl (the previous
-- version's layout at this place, or nil): parts[1 .. 2n+1] and the
-- fields obj (v) and keys.
function lay_out(v, depth, pl)
  local pv = pl and pl.obj
  local keys = pl and pl.keys
  local l
  if keys then -- the previous keys, if v has exactly those
    local idx, pre, n = keys.idx, keys.pre, 0
    l = new_tab(2 * #keys + 1, 2)
    for k, x in next, v do
      local i = idx[k]
      if not i then keys = nil break end
      n = n + 1
      l[2 * i - 1] = pre[i]
      if x == pv[k] then
        l[2 * i] = pl[2 * i]
      else
        l[2 * i] = enc_value(x, depth + 1, pl[2 * i])
      end
    end
    if keys and n ~= #keys then keys = nil end
  end
  if not keys then
    local ks = {}
    for k in next, v do ks[#ks + 1] = k end
    keys = key_list(ks)
    local pidx, pre = pl and pl.keys.idx, keys.pre
    l = new_tab(2 * #keys + 1, 2)
    for i, k in ipairs(keys) do
      local x = v[k]
      local j = pidx and pidx[k]
      l[2 * i - 1] = pre[i]
      if j and x == pv[k] then
        l[2 * i] = pl[2 * j]
      else
        l[2 * i] = enc_value(x, depth + 1, j and pl[2 * j] or nil)
      end
    end
  end
  l[2 * #keys + 1] = "}"
  l.obj, l.keys = v, keys
  return l
end

-- A new entry: a copy of a constant template that has every field an
-- entry gets (emit's too), so that filling it stores into slots that are
-- there; built from fields with variable values, the table would grow
-- (and rehash) key by key, in compiled code too.
local function new_entry()
  return { obj = false, json = false, lay = false, name = false, ns = false, rv = false,
    key = false, res = false, etype = false, prev = false }
end

-- prev: the previous version's entry, whose layout this one reuses.
local function make_entry(obj, res, prev)
  local md = obj.metadata
  local lay = lay_out(obj, 0, prev and prev.lay)
  local e = new_entry()
  e.obj, e.json, e.lay, e.name = obj, join_bytes(lay), lay, md.name
  e.ns, e.rv = md.namespace or "", tonumber(md.resourceVersion)
  e.key, e.res = obj_key(md.namespace, md.name), res
  return e
end

-- The JSON of an entry as a list item: built-in kinds carry no kind and
-- apiVersion there; custom resources do.
local function item_json(e)
  if not e.res.builtin then return e.json end
  local lj = e.ljson
  if not lj then
    lj = assert(json.omit(e.json, "apiVersion", "kind"))
    e.ljson = lj
  end
  return lj
end

_M.obj_key = obj_key
_M.new_entry = new_entry
_M.make_entry = make_entry
_M.item_json = item_json
return _M
