-- fuzz_status.lua: the Lua half of spec/fuzz/fuzz_status.c. The client
-- turns a non-2xx answer into an error table in response_error, a local of
-- kubelua.client; it is found among the upvalues of the module's functions
-- (the library is compiled with debug information). Called with an HTTP
-- status and a body (and what the C Status reader found in it); raises
-- when the error is not well formed or disagrees with the C reader.

local client = require "kubelua.client"
local json = require "kubelua.json"

local type, pairs, tostring, error = type, pairs, tostring, error
local format, gsub = string.format, string.gsub
local getupvalue = debug.getupvalue
local floor, abs = math.floor, math.abs

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
  "is_forbidden", "is_invalid", "is_unauthorized", "is_too_many_requests", "is_no_match",
  "is_error" }

-- The C reader's form of a string: a NUL reads as the six characters \u0000.
local function c_form(s) return (gsub(s, "%z", "\\u0000")) end

-- The client's error agrees with the C reader (c_code, c_reason,
-- c_message: kl_obj_status of the same body) on what the Status gives.
local function agree(err, body, c_code, c_reason, c_message)
  local st = json.decode(body)
  if type(st) ~= "table" or st.kind ~= "Status" then return end
  if type(st.message) == "string" and c_form(err.message) ~= c_message then
    error(format("message: client %q, C %q", err.message, c_message), 0)
  end
  if type(st.reason) == "string" and st.reason ~= "" and c_form(err.reason) ~= c_reason then
    error(format("reason: client %q, C %q", err.reason, c_reason), 0)
  end
  local code = st.code
  if c_code and type(code) == "number" and code == floor(code) and abs(code) < 2 ^ 53
    and err.code ~= c_code then
    error(format("code: client %.17g, C %.17g", err.code, c_code), 0)
  end
end

return function(status, body, c_code, c_reason, c_message)
  local err = response_error({ status = status, body = body, headers = {} })
  if c_reason then agree(err, body, c_code, c_reason, c_message) end
  if not client.is_error(err) then error("not a client error: " .. tostring(err), 0) end
  if type(err.code) ~= "number" then error(format("code is a %s", type(err.code)), 0) end
  if type(err.reason) ~= "string" or err.reason == "" then error("no reason", 0) end
  if type(err.message) ~= "string" then error("message is not a string", 0) end
  local s = tostring(err)
  if type(s) ~= "string" then error("tostring failed", 0) end
  for _, p in pairs(predicates) do client[p](err) end
end
