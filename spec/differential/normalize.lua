-- What must differ between two servers, made the same: a sequence's
-- answers from one server, rewritten so that they can be compared field by
-- field with another's. Values are replaced, never dropped, so presence
-- and order still count:
-- - uids (and the controller-uid labels holding a Job's) become
--   "uid@STEP", STEP the label of the step whose answer first carried it
--   ("#N" for the Nth new one of a step): a recreated object gets a new
--   one, an updated object keeps its own;
-- - resourceVersions (an object's metadata.resourceVersion) become
--   "rv@STEP", STEP the label of the step whose answer first carried that
--   version (with "#N" for the Nth new version of one step, in order), so
--   one write more on one side shifts nothing else; any other version (a
--   list's, one in an error message) becomes "rv>=rv@STEP" after the last
--   object version at or below it, since a real server's revision also
--   moves with its own writes (a list's, even when it is an object's);
-- - server timestamps become "<time>" (those of a PodDisruptionBudget's
--   disruptedPods too); a TokenRequest's token "<token>" (each server
--   signs with its own key); the server's address "<address>"; generated names keep their prefix
--   and become "prefix<gen#N>"; cluster IPs "<ip>", node ports "<port>";
--   continue tokens "<continue>"; a Table's ages ("3s") "<age>";
-- - managedFields entries are sorted by what identifies them (their order
--   follows their times, which are masked).
local json = require "kubelua.json"

local type, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable =
  type, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable
local sort, concat = table.sort, table.concat
local null = json.null

local _M = {}

local TIME_KEYS = { creationTimestamp = true, deletionTimestamp = true, time = true,
  lastTransitionTime = true, lastUpdateTime = true, lastProbeTime = true,
  expirationTimestamp = true }
local TIME_PATTERN = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d[%.%d]*Z$"
local IP_PATTERN = "^%d+%.%d+%.%d+%.%d+$"

-- Calls fn(t, key, value) for every member of every table in v, in a
-- stable order (keys sorted), depth first.
local function walk(v, fn)
  if type(v) ~= "table" then return end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  sort(keys, function(a, b)
    if type(a) == type(b) then return a < b end
    return type(a) == "number"
  end)
  for _, k in ipairs(keys) do
    fn(v, k, v[k])
    walk(v[k], fn)
  end
end

local function is_list(t)
  return type(t) == "table" and (t.items ~= nil
    or (type(t.kind) == "string" and t.kind:sub(-4) == "List"))
end

-- The context of one server's sequence: feed it every answer with
-- ctx:see(v), then ctx:apply(v) rewrites them.
local Ctx = {}
Ctx.__index = Ctx

function _M.new()
  return setmetatable({ rvs = {}, uids = {}, gens = {}, ngen = 0 }, Ctx)
end

-- Records the object versions, uids and generated names in v, the answer
-- of the step labelled label.
function Ctx:see(v, label)
  local new, seen, new_uids = {}, {}, {}
  walk({ v }, function(t, k, x)
    if k == "metadata" and type(x) == "table" and not is_list(t) and x.name ~= nil then
      local rv = tonumber(x.resourceVersion)
      if rv and not self.rvs[rv] and not seen[rv] then
        seen[rv] = true
        new[#new + 1] = rv
      end
      local gen, name = x.generateName, x.name
      if type(gen) == "string" and type(name) == "string" and #name > #gen
          and name:sub(1, #gen) == gen and not self.gens[name] then
        self.ngen = self.ngen + 1
        self.gens[name] = gen .. "<gen#" .. self.ngen .. ">"
      end
    end
    if k == "uid" and type(x) == "string" and x:match("^%x+%-%x+%-%x+%-%x+%-%x+$")
        and not self.uids[x] then
      new_uids[#new_uids + 1] = x
      self.uids[x] = true
    end
  end)
  sort(new)
  for i, rv in ipairs(new) do
    self.rvs[rv] = "rv@" .. label .. (i > 1 and "#" .. i or "")
  end
  for i, uid in ipairs(new_uids) do
    self.uids[uid] = "uid@" .. label .. (i > 1 and "#" .. i or "")
  end
end

-- The name of version s: an object's own, or (as_list: always) after the
-- last one at or below it.
function Ctx:rv(s, as_list)
  local n = tonumber(s)
  if not n then return s end
  if self.rvs[n] and not as_list then return self.rvs[n] end
  if not self.sorted then
    local list = {}
    for r in pairs(self.rvs) do list[#list + 1] = r end
    sort(list)
    self.sorted = list
  end
  local below = "rv@start"
  for _, r in ipairs(self.sorted) do
    if r <= n then below = self.rvs[r] end
  end
  return "rv>=" .. below
end

local function managed_key(e)
  if type(e) ~= "table" then return "" end
  return concat({ tostring(e.operation), tostring(e.manager), tostring(e.apiVersion),
    tostring(e.subresource or "") }, "\0")
end

-- Replaces generated names and resourceVersions inside a message.
function Ctx:text(s)
  for name, as in pairs(self.gens) do
    local i = s:find(name, 1, true)
    while i do
      s = s:sub(1, i - 1) .. as .. s:sub(i + #name)
      i = s:find(name, i + #as, true)
    end
  end
  s = s:gsub("(resource version: )(%d+)", function(p, n) return p .. self:rv(n) end)
  s = s:gsub("(current: )(%d+)", function(p, n) return p .. self:rv(n) end)
  s = s:gsub("%((%d+)%)$", function(n) return "(" .. self:rv(n) .. ")" end)
  return s
end

-- A rewritten copy of v; key is v's member name, parent its container's.
function Ctx:apply(v, key, parent)
  if type(v) == "string" then
    if key == "resourceVersion" and parent == "metadata" then return self:rv(v) end
    -- a Job's selector and labels carry its uid
    if (key == "uid" or key == "controller-uid") and self.uids[v] then return self.uids[v] end
    if (TIME_KEYS[key] or parent == "disruptedPods") and v:match(TIME_PATTERN) then
      return "<time>"
    end
    if key == "token" and parent == "status" then return "<token>" end
    if (key == "clusterIP" or key == "clusterIPs") and v:match(IP_PATTERN) then
      return "<ip>"
    end
    if key == "continue" and v ~= "" then return "<continue>" end
    if key == "serverAddress" then return "<address>" end
    if key == "cells" and v:match("^%d+[smhd]$") then return "<age>" end
    if self.gens[v] then return self.gens[v] end
    if key == "message" then return self:text(v) end
    return v
  end
  if type(v) == "number" and (key == "nodePort" or key == "healthCheckNodePort") then
    return "<port>"
  end
  if type(v) ~= "table" or v == null then return v end
  local t = {}
  for k, x in pairs(v) do
    -- array members take their array's key (clusterIPs' members are IPs)
    t[k] = self:apply(x, type(k) == "number" and key or k, type(k) == "number" and parent or key)
  end
  if is_list(v) and type(v.metadata) == "table" and v.metadata.resourceVersion then
    t.metadata.resourceVersion = self:rv(v.metadata.resourceVersion, true)
  end
  if type(t.managedFields) == "table" then
    sort(t.managedFields, function(a, b) return managed_key(a) < managed_key(b) end)
  end
  return setmetatable(t, getmetatable(v))
end

return _M
