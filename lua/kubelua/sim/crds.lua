-- kubelua.sim.crds: what the real server's apiextensions validation
-- (ValidateCustomResourceDefinition) says of a CustomResourceDefinition's
-- name, group and names, in its order and words: the name must be
-- <spec.names.plural>.<spec.group>, the group a DNS subdomain with a dot,
-- the names present and DNS-1035 labels (Kind and ListKind in any case).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"

local type, ipairs, format, lower = type, ipairs, string.format, string.lower
local go_quote = util.go_quote

local _M = {}

local function is_object(v) return type(v) == "table" and not json.is_array(v) end
local function str(v) return type(v) == "string" and v or "" end

local dns1035_msg = "a DNS-1035 label must consist of lower case alphanumeric characters or "
  .. "'-', start with an alphabetic character, and end with an alphanumeric character (e.g. "
  .. "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"

-- The messages of a value that is not a DNS-1035 label
-- (validation.IsDNS1035Label), joined as the server joins them.
local function dns1035_errors(s)
  local errs = {}
  if #s > 63 then errs[#errs + 1] = "must be no more than 63 characters" end
  if not s:match("^[a-z]$") and not s:match("^[a-z][-a-z0-9]*[a-z0-9]$") then
    errs[#errs + 1] = dns1035_msg
  end
  return #errs > 0 and table.concat(errs, ",") or nil
end

local function add(causes, field, reason, message)
  causes[#causes + 1] = { field = field, reason = reason, message = message }
end

local function spec_names(crd)
  local spec = is_object(crd.spec) and crd.spec or {}
  return spec, is_object(spec.names) and spec.names or {}
end

-- Adds to causes ({field, reason, message}, as store's invalid() takes them)
-- what is wrong with crd's name and group: the server's first errors,
-- before those of its versions.
function _M.validate_name(crd, causes)
  local spec, names = spec_names(crd)
  local group, plural = str(spec.group), str(names.plural)
  local name = str(crd.metadata.name)
  if name ~= plural .. "." .. group then
    add(causes, "metadata.name", "FieldValueInvalid", format('Invalid value: %s: must be '
      .. 'spec.names.plural+"."+spec.group', go_quote(name)))
  end
  if group == "" then
    add(causes, "spec.group", "FieldValueRequired", "Required value")
  else
    local why = util.check_subdomain(group)
    if why then
      add(causes, "spec.group", "FieldValueInvalid", format("Invalid value: %s: %s",
        go_quote(group), why))
    elseif not group:find(".", 1, true) then
      add(causes, "spec.group", "FieldValueInvalid", format("Invalid value: %s: should be a "
        .. "domain with at least one dot", go_quote(group)))
    end
  end
end

-- Adds to causes what is wrong with crd's names: the server's errors after
-- those of its versions.
function _M.validate_names(crd, causes)
  local _, names = spec_names(crd)
  for _, f in ipairs { "plural", "singular", "kind", "listKind" } do
    if str(names[f]) == "" then
      add(causes, "spec.names." .. f, "FieldValueRequired", "Required value")
    end
  end
  for _, f in ipairs { "plural", "singular", "kind", "listKind" } do
    local v = str(names[f])
    local why = v ~= "" and dns1035_errors((f == "kind" or f == "listKind") and lower(v) or v)
    if why then
      if f == "kind" or f == "listKind" then
        why = "may have mixed case, but should otherwise match: " .. why
      end
      add(causes, "spec.names." .. f, "FieldValueInvalid", format("Invalid value: %s: %s",
        go_quote(v), why))
    end
  end
end

return _M
