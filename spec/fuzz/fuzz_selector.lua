-- fuzz_selector.lua: the Lua half of spec/fuzz/fuzz_selector.c. The
-- simulator's label and field selector parsers (kubelua.sim.util) must
-- return requirements or nil, message for any string, never raise, and
-- the requirements must match objects without raising; label requirements
-- written back as a selector must parse to the same requirements.

local util = require "kubelua.sim.util"

local type, ipairs, pairs, tostring, error, format =
  type, ipairs, pairs, tostring, error, string.format
local concat, sort = table.concat, table.sort

local allowed = { ["metadata.name"] = true, ["metadata.namespace"] = true,
  ["status.phase"] = true, ["spec.nodeName"] = true }
local labels = { app = "demo", tier = "batch", n = "3", [""] = "", x = "a,b" }
local obj = { metadata = { name = "a", namespace = "demo", labels = labels },
  status = { phase = "Running" }, spec = {} }

local function check(what, reqs, err)
  if reqs == nil then
    if type(err) ~= "string" then error(what .. ": nil without a message", 0) end
    return nil
  end
  if type(reqs) ~= "table" then error(format("%s: returned a %s", what, type(reqs)), 0) end
  return reqs
end

-- The selector text of parsed label requirements.
local function unparse(reqs)
  local terms = {}
  for i, r in ipairs(reqs) do
    local op = r.op
    if op == "in" or op == "notin" then
      local vals = {}
      for v in pairs(r.value) do vals[#vals + 1] = v end
      sort(vals)
      terms[i] = r.key .. " " .. op .. " (" .. concat(vals, ",") .. ")"
    elseif op == "exists" then
      terms[i] = r.key
    elseif op == "!" then
      terms[i] = "!" .. r.key
    elseif op == "=" then
      terms[i] = r.key .. "==" .. r.value -- "=" before a value "=x" would read "=="
    elseif op == ">" or op == "<" then
      -- an integer, as parsed; 2^63 is how the double holds the largest
      local v = format("%.0f", r.value):gsub("^(%-?)9223372036854775808$", "%19223372036854775807")
      terms[i] = r.key .. op .. v
    else
      terms[i] = r.key .. op .. r.value
    end
  end
  return concat(terms, ",")
end

local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

return function(s)
  local reqs = check("labels", util.parse_label_selector(s))
  if reqs then
    for _, r in ipairs(reqs) do
      if type(r.key) ~= "string" then error("label requirement without a key", 0) end
    end
    util.labels_match(reqs, labels)
    util.labels_match(reqs, {})
    local text = unparse(reqs)
    local again, err = util.parse_label_selector(text)
    if not same(reqs, again) then
      error(format("%q parses, but its requirements written back, %q, %s", s, text,
        again and "parse differently" or "do not: " .. tostring(err)), 0)
    end
  end
  reqs = check("fields", util.parse_field_selector(s, allowed))
  if reqs then util.fields_match(reqs, obj) end
end
