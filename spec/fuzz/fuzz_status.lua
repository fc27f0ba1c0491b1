-- fuzz_status.lua: the Lua half of spec/fuzz/fuzz_status.c. The client
-- turns a non-2xx answer into an error table in response_error, a local of
-- kubelua.client; it is found among the upvalues of the module's functions
-- (the library is compiled with debug information). Called with an HTTP
-- status and a body; raises when the error is not well formed.

local client = require "kubelua.client"

local type, pairs, tostring, error, format = type, pairs, tostring, error, string.format
local getupvalue = debug.getupvalue

-- Searches the functions reachable from t's values through upvalues.
local function find_local(t, name)
  local seen, queue = {}, {}
  for _, v in pairs(t) do queue[#queue + 1] = v end
  for _, v in pairs(client.Client) do queue[#queue + 1] = v end
  local i = 1
  while queue[i] do
    local f = queue[i]
    i = i + 1
    if type(f) == "function" and not seen[f] then
      seen[f] = true
      for k = 1, 255 do
        local n, v = getupvalue(f, k)
        if not n then break end
        if n == name and type(v) == "function" then return v end
        if type(v) == "function" then queue[#queue + 1] = v end
      end
    end
  end
  error("kubelua.client has no local " .. name, 0)
end

local response_error = find_local(client, "response_error")

local predicates = { "is_not_found", "is_conflict", "is_already_exists", "is_gone", "is_expired",
  "is_forbidden", "is_invalid", "is_unauthorized", "is_too_many_requests", "is_error" }

return function(status, body)
  local err = response_error({ status = status, body = body, headers = {} })
  if not client.is_error(err) then error("not a client error: " .. tostring(err), 0) end
  if type(err.code) ~= "number" then error(format("code is a %s", type(err.code)), 0) end
  if type(err.reason) ~= "string" or err.reason == "" then error("no reason", 0) end
  if type(err.message) ~= "string" then error("message is not a string", 0) end
  local s = tostring(err)
  if type(s) ~= "string" then error("tostring failed", 0) end
  for _, p in pairs(predicates) do client[p](err) end
end
