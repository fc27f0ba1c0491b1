-- Field-by-field comparison of two normalized answers, and the bookkeeping
-- of differences against the list of known ones (spec/differential/known.lua).
local json = require "kubelua.json"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local format, find = string.format, string.find
local sort, concat = table.sort, table.concat
local encode, is_array = json.encode, json.is_array

local _M = {}

local ABSENT = "<absent>"
_M.ABSENT = ABSENT

local function text(v)
  if v == nil then return ABSENT end
  if type(v) == "string" then return encode(v) end
  return encode(v)
end

local function is_seq(t)
  if is_array(t) then return true end
  return t[1] ~= nil
end

-- What identifies a member of an array: its name (discovery's resources,
-- containers, ports), its metadata.name (a list's items), or for a watch
-- event its type, object name and (normalized) resourceVersion.
local function key_of(x)
  if type(x) ~= "table" then return nil end
  if type(x.name) == "string" then return x.name end
  local md = type(x.metadata) == "table" and x.metadata
  if md and type(md.name) == "string" then return md.name end
  local obj = type(x.object) == "table" and x.object
  md = obj and type(obj.metadata) == "table" and obj.metadata
  if type(x.type) == "string" and md then
    return x.type .. " " .. tostring(md.name) .. " " .. tostring(md.resourceVersion)
  end
  return nil
end

-- The keys of an array whose members all have a distinct key, or nil.
local function names(t)
  local out, seen = {}, {}
  for i, x in ipairs(t) do
    local k = key_of(x)
    if not k or seen[k] then return nil end
    seen[k] = i
    out[i] = k
  end
  return #out > 0 and out or nil, seen
end

-- Appends to out one { path, sim, real } per leaf where a and b differ.
-- Arrays compare member by member (a missing member is <absent>); objects
-- member by member over the union of their keys.
local function diff(a, b, path, out)
  if type(a) ~= "table" or type(b) ~= "table" or a == json.null or b == json.null
      or is_seq(a) ~= is_seq(b) then
    local ta, tb = text(a), text(b)
    if ta ~= tb then out[#out + 1] = { path = path, sim = ta, real = tb } end
    return out
  end
  local na, ia = names(a)
  local nb, ib = names(b)
  if na and nb then
    -- by name, so that one member more or less is one difference; then
    -- the order of the members both have
    -- (generated names, "<gen#N>", sort as their random suffixes do)
    local oa, ob = {}, {}
    for _, n in ipairs(na) do
      if ib[n] and not find(n, "<gen#", 1, true) then oa[#oa + 1] = n end
    end
    for _, n in ipairs(nb) do
      if ia[n] and not find(n, "<gen#", 1, true) then ob[#ob + 1] = n end
    end
    for _, n in ipairs(na) do diff(a[ia[n]], b[ib[n]], path .. "[name=" .. n .. "]", out) end
    for _, n in ipairs(nb) do
      if not ia[n] then diff(nil, b[ib[n]], path .. "[name=" .. n .. "]", out) end
    end
    if concat(oa, ",") ~= concat(ob, ",") then
      out[#out + 1] = { path = path .. "(order)", sim = concat(oa, ","), real = concat(ob, ",") }
    end
    return out
  end
  if is_seq(a) then
    local n = #a > #b and #a or #b
    for i = 1, n do diff(a[i], b[i], path .. "[" .. (i - 1) .. "]", out) end
    return out
  end
  local keys, seen = {}, {}
  for k in pairs(a) do keys[#keys + 1] = k seen[k] = true end
  for k in pairs(b) do if not seen[k] then keys[#keys + 1] = k end end
  sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  for _, k in ipairs(keys) do diff(a[k], b[k], path .. "." .. tostring(k), out) end
  return out
end
_M.diff = diff

-- A tally of one run: the sequences (cases) and steps that ran and the
-- differences found.
local Run = {}
Run.__index = Run

-- new(known) -> run; known is the list of spec/differential/known.lua.
function _M.new(known)
  for i, k in ipairs(known) do
    assert(type(k.reason) == "string" and k.reason ~= "", "known[" .. i .. "] gives no reason")
    assert(k.path or k.step or k.case, "known[" .. i .. "] matches everything")
  end
  return setmetatable({ known = known, hits = {}, ran = {}, unknown = {}, listed = 0,
    steps = 0, cases = {}, case_seen = {} }, Run)
end

-- A matcher is a Lua pattern, or a list of them (any may match).
local function matches(pattern, s)
  if type(pattern) == "table" then
    for _, p in ipairs(pattern) do
      if find(s, p) then return true end
    end
    return false
  end
  return pattern == nil or find(s, pattern) ~= nil
end

-- Records that step (a label such as "create configmaps") of case ran;
-- the known entries that cover it must then see their difference.
function Run:step(case, step)
  self.steps = self.steps + 1
  if not self.case_seen[case] then
    self.case_seen[case] = true
    self.cases[#self.cases + 1] = case
  end
  for i, k in ipairs(self.known) do
    if matches(k.case, case) and matches(k.step, step) then self.ran[i] = true end
  end
end

-- Records the differences of one step (from diff); returns the ones that
-- no known entry explains.
function Run:differences(case, step, diffs)
  local new = {}
  for _, d in ipairs(diffs) do
    local hit
    for i, k in ipairs(self.known) do
      if matches(k.case, case) and matches(k.step, step) and matches(k.path, d.path)
          and matches(k.sim, d.sim) and matches(k.real, d.real) then
        hit = i
        break
      end
    end
    if hit then
      self.hits[hit] = (self.hits[hit] or 0) + 1
      self.listed = self.listed + 1
    else
      d.case, d.step = case, step
      new[#new + 1] = d
      self.unknown[#self.unknown + 1] = d
    end
  end
  return new
end

-- One line per difference, for a failure message.
function _M.describe(d)
  return format("%s | %s | %s: sim %s, real %s", d.case, d.step, d.path, d.sim, d.real)
end

-- The known entries that covered a step that ran yet matched nothing:
-- the list says something that is no longer true.
function Run:stale()
  local out = {}
  for i, k in ipairs(self.known) do
    if self.ran[i] and not self.hits[i] then
      local function said(m)
        return type(m) == "table" and concat(m, " or ") or m or ""
      end
      out[#out + 1] = format("known[%d] (%s) no longer occurs: %s", i,
        concat({ said(k.case), said(k.step), said(k.path) }, " | "), k.reason)
    end
  end
  return out
end

-- How many known entries matched at least one difference.
function Run:entries_seen()
  local n = 0
  for _ in pairs(self.hits) do n = n + 1 end
  return n
end

return _M
