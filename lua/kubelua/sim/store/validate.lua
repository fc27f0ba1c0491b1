-- kubelua.sim.store.validate: what a real apiserver refuses in a body,
-- with its words: what its decoder refuses (kind and apiVersion, types,
-- MicroTimes, quantities, base64: 400), the fields a kind does not know
-- (field validation Strict, Warn or Ignore), names, and the checks it
-- makes after defaulting and on an update (422). Each returns nil or a
-- Status table (kubelua.sim.store.errors).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local yaml = require "kubelua.sim.yaml"
local quantity = require "kubelua.sim.quantity"
local crds = require "kubelua.sim.crds"
local schemalib = require "kubelua.sim.schema"
local errors = require "kubelua.sim.store.errors"
local kinds = require "kubelua.sim.store.defaults"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local concat, sort = table.concat, table.sort
local format, sub = string.format, string.sub
local decode, null, is_array = json.decode, json.null, json.is_array
local equal = util.equal
local bad_request, undecodable, invalid = errors.bad_request, errors.undecodable, errors.invalid
local is_service, is_secret, is_configmap = kinds.is_service, kinds.is_secret, kinds.is_configmap
local each_quantity, pod_spec_of = kinds.each_quantity, kinds.pod_spec_of

local _M = {}

local function is_object(v) return type(v) == "table" and not is_array(v) end

local function check_name(res, name, generate)
  if (name == nil or name == "") and (generate == nil or generate == "") then
    return invalid(res, "", { { field = "metadata.name", reason = "FieldValueRequired",
      message = "Required value: name or generateName is required" } })
  end
  if name and name ~= "" then
    local why = (is_service(res) and util.check_dns1035 or util.check_subdomain)(name)
    if why then
      return invalid(res, name, { { field = "metadata.name", reason = "FieldValueInvalid",
        message = format('Invalid value: "%s": %s', name, why) } })
    end
  end
  return nil
end

local json_types = { string = "string", boolean = "boolean", table = "object" }

local function value_type(v)
  if v == null then return "null" end
  if type(v) == "number" then return v == math.floor(v) and "integer" or "number" end
  if type(v) == "table" then return is_array(v) and "array" or "object" end
  return json_types[type(v)] or type(v)
end

-- A small part of OpenAPI v3 schema validation: types, recursively.
local function check_schema(schema, v, path, causes)
  if type(schema) ~= "table" or v == nil then return end
  local want = schema.type
  local have = value_type(v)
  if want and want ~= have and not (want == "number" and have == "integer")
      and not (v == null and schema.nullable) then
    local shown = have
    causes[#causes + 1] = { field = path, reason = "FieldValueTypeInvalid",
      message = format('Invalid value: "%s": %s in body must be of type %s: "%s"',
        shown, path, want, shown) }
    return
  end
  if have == "object" and type(schema.properties) == "table" then
    for k, sub_schema in pairs(schema.properties) do
      check_schema(sub_schema, v[k], path == "" and k or path .. "." .. k, causes)
    end
  elseif have == "array" and type(schema.items) == "table" then
    for i, x in ipairs(v) do
      check_schema(schema.items, x, format("%s[%d]", path, i - 1), causes)
    end
  end
end

local function validate(res, obj)
  if res.schema then
    local causes = {}
    for k, v in pairs(obj) do
      if k ~= "metadata" and k ~= "apiVersion" and k ~= "kind" and res.schema.properties then
        check_schema(res.schema.properties[k], v, k, causes)
      end
    end
    if #causes > 0 then return invalid(res, obj.metadata.name, causes) end
  end
  return nil
end

-- Field validation: the fields a kind knows, from its schema
-- (kubelua.sim.schema); the rest are unknown, dropped from the object, and
-- reported as a warning (fieldValidation=Warn, the default), an error
-- (Strict) or not at all (Ignore). A built-in kind without a captured
-- schema (apiregistration.k8s.io's) knows spec and status at its top level
-- and ObjectMeta's fields; custom resources are pruned by their schema.
local known_meta = {}
for _, f in ipairs { "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
    "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
    "labels", "annotations", "ownerReferences", "finalizers", "managedFields" } do
  known_meta[f] = true
end

local spec_status = { apiVersion = true, kind = true, metadata = true, spec = true,
  status = true }

local function prune(schema, v, path, out)
  if type(schema) ~= "table" or not is_object(v) then return end
  if schema["x-kubernetes-preserve-unknown-fields"] then return end
  local props = schema.properties
  if type(props) ~= "table" then
    if is_object(schema.additionalProperties) then
      for k, x in pairs(v) do prune(schema.additionalProperties, x, path .. "." .. k, out) end
    end
    return
  end
  for k, x in pairs(v) do
    local p = path == "" and k or path .. "." .. k
    if props[k] == nil then
      v[k] = nil
      out[#out + 1] = p
    else
      prune(props[k], x, p, out)
    end
  end
end

-- Drops the unknown fields of obj (changed in place) and returns their
-- paths, sorted, and the decoder's type error (built-in kinds with a
-- schema) or nil.
local function unknown_fields(res, obj)
  local out = {}
  local checker = res.builtin and schemalib.checker(res)
  if checker then
    return schemalib.check(checker, obj)
  elseif res.builtin then
    for k in pairs(obj) do
      if not spec_status[k] then
        obj[k] = nil
        out[#out + 1] = k
      end
    end
  elseif res.schema then
    local props = res.schema.properties
    if type(props) == "table" and not res.schema["x-kubernetes-preserve-unknown-fields"] then
      for k, x in pairs(obj) do
        if k ~= "apiVersion" and k ~= "kind" and k ~= "metadata" then
          if props[k] == nil then
            obj[k] = nil
            out[#out + 1] = k
          else
            prune(props[k], x, k, out)
          end
        end
      end
    end
  end
  if is_object(obj.metadata) then
    for k in pairs(obj.metadata) do
      if not known_meta[k] then
        obj.metadata[k] = nil
        out[#out + 1] = "metadata." .. k
      end
    end
  end
  sort(out)
  return out
end

-- Applies ctx.field_validation to the unknown fields of obj: nil, or a
-- 400 Status for Strict or for a value of the wrong type (whatever
-- fieldValidation, as the decoder refuses it); warnings go to ctx.warnings.
local function field_validation(res, obj, ctx)
  if ctx.trusted then return nil end
  local unknown, type_error = unknown_fields(res, obj)
  if type_error then return undecodable(res, type_error) end
  if #unknown == 0 or ctx.field_validation == "Ignore" then return nil end
  local msgs = {}
  for i, f in ipairs(unknown) do msgs[i] = format('unknown field "%s"', f) end
  if ctx.field_validation == "Strict" then
    return undecodable(res, "strict decoding error: " .. concat(msgs, ", "))
  end
  ctx.warnings = ctx.warnings or {}
  for _, m in ipairs(msgs) do ctx.warnings[#ctx.warnings + 1] = m end
  return nil
end

-- The body's kind and apiVersion must be the resource's (when given).
local function check_kind(res, obj)
  local kind, av = obj.kind, obj.apiVersion
  if (kind ~= nil and kind ~= res.kind) or (av ~= nil and av ~= res.api_version) then
    local k = type(kind) == "string" and kind or "<unknown>"
    local v = type(av) == "string" and av or res.api_version
    if res.builtin then
      local from_ver = v:match("[^/]+$")
      return bad_request(format('%s in version "%s" cannot be handled as a %s: converting '
        .. '(%s.%s) to (%s.%s): unknown conversion', k, from_ver, res.kind, from_ver, k,
        res.internal, res.kind))
    end
    return bad_request(format("the API version in the data (%s) does not match the expected "
      .. "API version (%s)", v, res.api_version))
  end
  return nil
end

-- Decodes a request body as an object of res.
local function decode_body(res, body)
  local obj, err = decode(body)
  if obj == nil or not is_object(obj) then
    local snippet = #body > 30 and sub(body, 1, 30) .. " ..." or body
    if obj ~= nil then
      return nil, bad_request(format("the object provided is unrecognized (must be of type %s): "
        .. "couldn't get version/kind; json parse error: json: cannot unmarshal %s into Go "
        .. "value of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; "
        .. "Kind string \"json:\\\"kind,omitempty\\\"\" } (%s)", res.kind, value_type(obj),
        snippet))
    end
    return nil, bad_request(format("the object provided is unrecognized (must be of type %s): "
      .. "couldn't get version/kind; json parse error: %s (%s)", res.kind,
      util.go_syntax_error(body, err), snippet))
  end
  return obj
end

-- Decodes a request body sent as application/yaml as an object of res.
local function decode_yaml_body(res, body)
  local obj, err = yaml.decode(body)
  if obj == nil or not is_object(obj) then
    local why = err and err:gsub("^yaml: ", "") or "the document is not an object"
    return nil, bad_request(format("the object provided is unrecognized (must be of type %s): "
      .. "couldn't get version/kind; yaml: %s", res.kind, why))
  end
  return obj
end

-- MicroTime fields need exactly 6 fractional digits, as Go parses them.
local microtime_fields = { leases = { "acquireTime", "renewTime" }, events = { "eventTime" } }

local function check_microtimes(res, obj)
  local fields = microtime_fields[res.name]
  if not fields or not res.builtin then return nil end
  local where = res.name == "leases" and obj.spec or obj
  if not is_object(where) then return nil end
  for _, f in ipairs(fields) do
    local v = where[f]
    if type(v) == "string" then
      local rest = v:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d(.*)$")
      if rest and not rest:match("^%.%d%d%d%d%d%d[Z+-]") then
        return undecodable(res, format('parsing time "%s" as "2006-01-02T15:04:05.000000Z07:00": '
          .. 'cannot parse "%s" as ".000000"', v, rest))
      end
    end
  end
  return nil
end

-- What the decoder refuses in a Pod's or pod template's quantities.
local function check_quantities(res, obj)
  local err
  each_quantity(pod_spec_of(res, obj), function(_, _, v)
    local ok, why = quantity.canonical(v)
    if not ok and not err then
      err = undecodable(res, why)
    end
  end)
  return err
end

-- The base64 of a Secret's data and a ConfigMap's binaryData, as Go's
-- decoder reads []byte.
local function check_base64(res, obj)
  local m = res.builtin and res.gv == "v1" and (res.name == "secrets" and obj.data
    or res.name == "configmaps" and obj.binaryData)
  if not is_object(m) then return nil end
  for _, k in ipairs(util.sorted_keys(m)) do
    local at = type(m[k]) == "string" and util.b64_error(m[k])
    if at then
      return undecodable(res, "illegal base64 data at input byte " .. at)
    end
  end
  return nil
end

-- What a real server's decoder refuses in a body (a 400), or nil.
local function check_decoding(res, obj)
  return check_kind(res, obj) or check_microtimes(res, obj) or check_quantities(res, obj)
    or check_base64(res, obj)
end

local function cause(causes, field, reason, message)
  causes[#causes + 1] = { field = field, reason = reason, message = message }
end

-- The keys of a ConfigMap's or Secret's map at obj[field] (sorted: the
-- real server reports them in map order, which is random).
local function check_keys(causes, obj, field)
  local m = obj[field]
  if not is_object(m) then return end
  for _, k in ipairs(util.sorted_keys(m)) do
    for _, msg in ipairs(util.config_key_errors(k)) do
      cause(causes, field .. "[" .. k .. "]", "FieldValueInvalid",
        "Invalid value: " .. util.go_quote(k) .. ": " .. msg)
    end
    if field == "data" and is_object(obj.binaryData) and obj.binaryData[k] ~= nil then
      cause(causes, "data[" .. k .. "]", "FieldValueInvalid", "Invalid value: "
        .. util.go_quote(k) .. ": duplicate of key present in binaryData")
    end
  end
end

-- The keys each Secret type needs (ValidateSecret).
local function check_secret_type(causes, obj)
  local data = is_object(obj.data) and obj.data or {}
  local function need(key) cause(causes, "data[" .. key .. "]", "FieldValueRequired",
      "Required value") end
  local t = obj.type
  if t == "kubernetes.io/service-account-token" then
    local ann = obj.metadata.annotations
    if not is_object(ann) or ann["kubernetes.io/service-account.name"] == nil then
      cause(causes, "metadata.annotations[kubernetes.io/service-account.name]",
        "FieldValueRequired", "Required value")
    end
  elseif t == "kubernetes.io/dockercfg" and data[".dockercfg"] == nil then
    need(".dockercfg")
  elseif t == "kubernetes.io/dockerconfigjson" and data[".dockerconfigjson"] == nil then
    need(".dockerconfigjson")
  elseif t == "kubernetes.io/basic-auth" and data.username == nil and data.password == nil then
    need("username")
    need("password")
  elseif t == "kubernetes.io/ssh-auth" and (data["ssh-privatekey"] == nil
      or data["ssh-privatekey"] == "") then
    need("ssh-privatekey")
  elseif t == "kubernetes.io/tls" then
    if data["tls.crt"] == nil then need("tls.crt") end
    if data["tls.key"] == nil then need("tls.key") end
  end
end

-- A CRD version's scale subresource paths (ValidateCustomResourceDefinition-
-- Subresources): simple JSON paths under .spec and .status.
local function check_scale_paths(causes, i, scale)
  local at = format("spec.versions[%d].subresources.scale.", i - 1)
  local function path(name, under, what, required)
    local p = scale[name]
    if p == nil or p == null or p == "" then
      if required then cause(causes, at .. name, "FieldValueRequired", "Required value") end
      return
    end
    p = tostring(p)
    local bad = sub(p, 1, 1) ~= "." and "must be a simple json path starting with ."
    if not bad then
      bad = "should be a json path under " .. what
      for _, u in ipairs(under) do
        if sub(p, 1, #u) == u then bad = nil end
      end
    end
    if bad then
      cause(causes, at .. name, "FieldValueInvalid", "Invalid value: " .. util.go_quote(p)
        .. ": " .. bad)
    end
  end
  path("specReplicasPath", { ".spec." }, ".spec", true)
  path("statusReplicasPath", { ".status." }, ".status", true)
  path("labelSelectorPath", { ".spec.", ".status." }, ".spec or .status", false)
end

-- ValidateService's port checks: a name, not another's, for each of
-- several ports, port and a numeric targetPort in 1-65535.
local function check_service_ports(causes, spec)
  local ports = is_array(spec.ports) and spec.ports or {}
  local function in_range(p, field, i)
    local v = p[field]
    if type(v) == "number" and (v < 1 or v > 65535) then
      cause(causes, format("spec.ports[%d].%s", i - 1, field), "FieldValueInvalid",
        format("Invalid value: %s: must be between 1 and 65535, inclusive", tostring(v)))
    end
  end
  local names = {}
  for i, p in ipairs(ports) do
    if is_object(p) then
      if #ports > 1 and (p.name == nil or p.name == null or p.name == "") then
        cause(causes, format("spec.ports[%d].name", i - 1), "FieldValueRequired", "Required value")
      elseif type(p.name) == "string" and names[p.name] then
        cause(causes, format("spec.ports[%d].name", i - 1), "FieldValueDuplicate",
          format("Duplicate value: %s", util.go_quote(p.name)))
      end
      if type(p.name) == "string" then names[p.name] = true end
      in_range(p, "port", i)
      in_range(p, "targetPort", i)
    end
  end
end

-- The checks a real server makes after defaulting (its validation sees the
-- defaulted object), and on an update what may not change (old: the stored
-- object); nil or an Invalid status.
local function validate_defaulted(res, obj, old)
  local causes = {}
  if old and (is_configmap(res) or is_secret(res)) then
    -- ValidateSecretUpdate, ValidateConfigMapUpdate
    if is_secret(res) and obj.type ~= old.type then
      cause(causes, "type", "FieldValueInvalid", "Invalid value: "
        .. util.go_quote(tostring(obj.type)) .. ": field is immutable")
    end
    if old.immutable == true then
      local forbid = "Forbidden: field is immutable when `immutable` is set"
      if obj.immutable ~= true then cause(causes, "immutable", "FieldValueForbidden", forbid) end
      for _, f in ipairs(is_secret(res) and { "data" } or { "data", "binaryData" }) do
        local a, b = old[f], obj[f]
        if a == null then a = nil end
        if b == null then b = nil end
        if not equal(a or {}, b or {}) then cause(causes, f, "FieldValueForbidden", forbid) end
      end
    end
  end
  if res.builtin and res.group == "apps" and res.name == "deployments" then
    local st = is_object(obj.spec) and obj.spec.strategy
    if is_object(st) and st.type == "Recreate" and st.rollingUpdate ~= nil
        and st.rollingUpdate ~= null then
      cause(causes, "spec.strategy.rollingUpdate", "FieldValueForbidden",
        "Forbidden: may not be specified when strategy `type` is 'Recreate'")
    end
  elseif is_service(res) and is_object(obj.spec) then
    check_service_ports(causes, obj.spec)
  elseif is_configmap(res) then
    check_keys(causes, obj, "data")
    check_keys(causes, obj, "binaryData")
  elseif is_secret(res) then
    check_keys(causes, obj, "data")
    check_secret_type(causes, obj)
  elseif res.builtin and res.name == "customresourcedefinitions" then
    crds.validate_name(obj, causes)
    local spec = is_object(obj.spec) and obj.spec or {}
    for i, v in ipairs(is_array(spec.versions) and spec.versions or {}) do
      local scale = is_object(v) and is_object(v.subresources) and v.subresources.scale
      if is_object(scale) then check_scale_paths(causes, i, scale) end
    end
    crds.validate_names(obj, causes)
  end
  return #causes > 0 and invalid(res, obj.metadata.name, causes) or nil
end

_M.check_name = check_name
_M.value_type = value_type
_M.validate = validate
_M.unknown_fields = unknown_fields
_M.field_validation = field_validation
_M.decode_body = decode_body
_M.decode_yaml_body = decode_yaml_body
_M.check_decoding = check_decoding
_M.validate_defaulted = validate_defaulted
return _M
