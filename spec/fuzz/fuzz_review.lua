-- fuzz_review.lua: the Lua half of spec/fuzz/fuzz_review.c. A review body
-- goes through kubelua.webhook as the server's handler sends it (decode,
-- the handler, the response review, JSON), with the handlers run at once
-- (a fuzz run turns no loop: core.run is replaced by a direct call). Raises
-- when the answer cannot be encoded, is not the review the API server
-- expects (its envelope, the request's uid), or when a mutation's JSON
-- Patch, applied to the object that came in, does not give the object the
-- handler left.

local core = require "kubelua.core"
local json = require "kubelua.json"
local webhook = require "kubelua.webhook"
local util = require "kubelua.sim.util"

local type, pairs, next, tostring, error, pcall, tonumber = type, pairs, next, tostring, error,
  pcall, tonumber
local format, byte = string.format, string.byte
local insert, remove = table.insert, table.remove
local array, is_array, null = json.array, json.is_array, json.null
local equal, copy = util.equal, util.copy

core.run = function(fn)
  local ok, r = pcall(fn)
  if ok then return true, { r } end
  return false, r
end
core.log = function() end

local function b64decode(s)
  local map = {}
  local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  for i = 1, #chars do map[byte(chars, i)] = i - 1 end
  local out, bits, n = {}, 0, 0
  for i = 1, #s do
    local v = map[byte(s, i)]
    if v then
      bits, n = bits * 64 + v, n + 6
      if n >= 8 then
        n = n - 8
        local b = math.floor(bits / 2 ^ n)
        out[#out + 1] = string.char(b)
        bits = bits - b * 2 ^ n
      end
    end
  end
  return table.concat(out)
end

local function is_list(v)
  return type(v) == "table" and (is_array(v) or v[1] ~= nil)
end

-- RFC 6902 on decoded values, for the operations json_patch writes.
local function apply(doc, ops)
  for _, op in pairs(ops) do
    if op.path == "" then
      if op.op ~= "replace" then error("a root " .. op.op, 0) end
      doc = copy(op.value)
    else
      local parent, key = nil, nil
      local node = doc
      for raw in (op.path:sub(2) .. "/"):gmatch("([^/]*)/") do
        local k = raw:gsub("~1", "/"):gsub("~0", "~")
        if parent ~= nil then node = parent[key] end
        if type(node) ~= "table" then error("no container at " .. op.path, 0) end
        parent = node
        key = is_list(node) and tonumber(k) + 1 or k
      end
      local value = op.value
      if type(value) == "table" then value = copy(value) end
      if op.op == "remove" then
        if is_list(parent) then remove(parent, key) else parent[key] = nil end
      elseif op.op == "add" and is_list(parent) then
        insert(parent, key, value)
      else
        parent[key] = value
      end
    end
  end
  return doc
end

local mode = 0
local changed -- what the mutating handler left

local function mutate(req)
  local o = req.object
  if type(o) ~= "table" or is_list(o) then return end
  if mode % 2 == 1 then o.metadata = { labels = { ["a/b~c"] = "x" } } end
  if mode % 4 >= 2 then
    local k = next(o)
    if k ~= nil then o[k] = nil end
  end
  if mode % 8 >= 4 and type(o.spec) == "table" then
    local items = o.spec.items
    if is_list(items) then
      items[#items] = nil
      items[1] = null
    else
      o.spec.items = array{ 1, "two" }
    end
  end
  if mode % 16 >= 8 then o["~/"] = null end
  if mode % 32 >= 16 then req.object = { replaced = true } end
  changed = req.object
  if req.name == "deny" then return false, "denied" end
end

local hooks = {
  { name = "v", path = "/v", kind = "validate", timeout = 1, validate = function(req)
    if req.name == "boom" then error("boom") end
    local o = req.object
    if type(o) == "table" and type(o.spec) == "table" then
      return o.spec.message ~= "", "spec.message is empty", { "warned" }
    end
    return true
  end },
  { name = "m", path = "/m", kind = "mutate", timeout = 1, mutate = mutate },
  { name = "c", path = "/c", kind = "convert", timeout = 1, convert = function(obj, to)
    if type(obj) ~= "table" then return nil, "not an object" end
    obj.converted = to
    return obj
  end },
}

return function(b0, body)
  local hook = hooks[b0 % 4 == 3 and 1 or b0 % 4 + 1]
  mode = math.floor(b0 / 4)
  changed = nil
  local review = webhook.review(hook, body)
  local out = json.encode(review)
  local back = json.decode(out)
  local want = hook.kind == "convert" and "ConversionReview" or "AdmissionReview"
  if type(back) ~= "table" or back.kind ~= want or type(back.response) ~= "table" then
    error("not a " .. want .. ": " .. out, 0)
  end
  local resp = back.response
  local _, req = webhook.decode(hook.kind, body)
  if type(req) == "table" and resp.uid ~= req.uid then
    error(format("uid %s answered as %s", tostring(req.uid), tostring(resp.uid)), 0)
  end
  if hook.kind == "convert" then
    if resp.result.status ~= "Success" and resp.result.status ~= "Failure" then
      error("result " .. tostring(resp.result.status), 0)
    end
    return
  end
  if type(resp.allowed) ~= "boolean" or type(resp.status) ~= "table" then
    error("no allowed or status: " .. out, 0)
  end
  if hook.kind == "mutate" and resp.patch then
    if resp.patchType ~= "JSONPatch" then error("patch without JSONPatch", 0) end
    local ops = json.decode(b64decode(resp.patch))
    local before = json.decode(body).request.object
    local after = apply(before, ops)
    if not equal(after, changed) then
      error(format("the patch %s gives %s, not %s", b64decode(resp.patch), json.encode(after),
        json.encode(changed)), 0)
    end
  end
end
