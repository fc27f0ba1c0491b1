-- kubelua.sim.store.errors: the Status bodies the simulator's store
-- answers failures with, worded as a real apiserver words them (a
-- resource's group resource, its kind, the causes of a 422). A resource
-- here is a store resource ({ name, kind, group, gr, version }) or a
-- table with the fields the function reads.

local json = require "kubelua.json"

local pairs, ipairs = pairs, ipairs
local concat = table.concat
local format = string.format

local _M = {}

local function status(code, reason, message, details)
  local st = { kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
    message = message, reason = reason, code = code }
  if details then st.details = details end
  return st
end

local function res_details(res, name, extra)
  local d = { name = name, kind = res.name }
  if res.group ~= "" then d.group = res.group end
  if extra then
    for k, v in pairs(extra) do d[k] = v end
  end
  return d
end

local function not_found(res, name) -- "deployments.apps": the group resource, as AlreadyExists
  return status(404, "NotFound", format('%s "%s" not found', res.gr, name),
    res_details(res, name))
end

local function conflict(res, name, why)
  return status(409, "Conflict", format('Operation cannot be fulfilled on %s "%s": %s',
    res.gr, name, why), res_details(res, name))
end

local function bad_request(msg) return status(400, "BadRequest", msg) end

-- The 400 of a body naming another namespace than its URL.
local function namespace_mismatch()
  return bad_request("the namespace of the provided object does not match the namespace sent "
    .. "on the request")
end

-- The 400 of a body the decoder refuses for a resource ({kind, version}).
local function undecodable(res, why)
  return bad_request(format('%s in version "%s" cannot be handled as a %s: %s', res.kind,
    res.version, res.kind, why))
end

-- The 409 of a write that names a resourceVersion the object has left.
local function stale(res, name)
  return conflict(res, name, "the object has been modified; please apply your changes to the "
    .. "latest version and try again")
end

-- The 400 of a body that names another object than the URL does.
local function other_name(got, name)
  return bad_request(format("the name of the object (%s) does not match the name on the URL "
    .. "(%s)", got, name))
end

local function kind_label(res)
  return res.group == "" and res.kind or res.kind .. "." .. res.group
end

-- 422 with causes { {field, type, message} }
local function invalid(res, name, causes)
  local parts, list, seen = {}, json.array {}, {}
  for i, c in ipairs(causes) do
    local part = c.field .. ": " .. c.message
    if not seen[part] then
      seen[part] = true
      parts[#parts + 1] = part
    end
    list[i] = { reason = c.reason, message = c.message, field = c.field }
  end
  local msg = format('%s "%s" is invalid: ', kind_label(res), name or "")
  if #parts == 1 then
    msg = msg .. parts[1]
  else
    msg = msg .. "[" .. concat(parts, ", ") .. "]"
  end
  local d = { kind = res.kind ~= "" and res.kind or nil, causes = list }
  if name and name ~= "" then d.name = name end
  if res.group ~= "" then d.group = res.group end
  return status(422, "Invalid", msg, d)
end

_M.status = status
_M.res_details = res_details
_M.not_found = not_found
_M.conflict = conflict
_M.bad_request = bad_request
_M.namespace_mismatch = namespace_mismatch
_M.undecodable = undecodable
_M.stale = stale
_M.other_name = other_name
_M.kind_label = kind_label
_M.invalid = invalid
return _M
