-- fuzz_selector.lua: the Lua half of spec/fuzz/fuzz_selector.c. The
-- simulator's label and field selector parsers (kubelua.sim.util) must
-- return requirements or nil, message for any string, never raise, and
-- the requirements must match objects without raising.

local util = require "kubelua.sim.util"

local type, ipairs, error, format = type, ipairs, error, string.format

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

return function(s)
  local reqs = check("labels", util.parse_label_selector(s))
  if reqs then
    for _, r in ipairs(reqs) do
      if type(r.key) ~= "string" then error("label requirement without a key", 0) end
    end
    util.labels_match(reqs, labels)
    util.labels_match(reqs, {})
  end
  reqs = check("fields", util.parse_field_selector(s, allowed))
  if reqs then util.fields_match(reqs, obj) end
end
