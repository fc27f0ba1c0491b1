-- kubelua.sim.reviews: the access reviews of authorization.k8s.io/v1, which
-- `kubectl auth can-i` and controllers that check their own permissions
-- create. Nothing is stored: the answer is the request with its status
-- filled in, as the real server answers (201, managed fields included).
--
-- Who may do what follows the simulator's users: the admin (the --token
-- user, or everyone without one) is in system:masters and may do
-- anything; the --user users are only system:authenticated, whose default
-- cluster roles allow discovery, the health paths and these reviews.

local json = require "kubelua.json"
local managed = require "kubelua.sim.managed"
local store = require "kubelua.sim.store"
local util = require "kubelua.sim.util"

local type, ipairs, format, sub = type, ipairs, string.format, string.sub
local is_array, null = json.is_array, json.null

local function is_object(v) return type(v) == "table" and not is_array(v) end

local _M = {}

local function rule(verbs, groups, resources)
  return { verbs = json.array(verbs), apiGroups = json.array(groups),
    resources = json.array(resources) }
end

local function url_rule(verbs, urls)
  return { verbs = json.array(verbs), nonResourceURLs = json.array(urls) }
end

local function binding(name)
  return format('RBAC: allowed by ClusterRoleBinding "%s" of ClusterRole "%s" to Group '
    .. '"system:authenticated"', name, name)
end

-- The rules each group holds, with the reason an allowed review gives.
local masters = {
  resource = { { rule = rule({ "*" }, { "*" }, { "*" }), reason = "" } },
  non_resource = { { rule = url_rule({ "*" }, { "*" }), reason = "" } },
}
local authenticated = {
  resource = { { rule = rule({ "create" }, { "authorization.k8s.io" },
    { "selfsubjectaccessreviews", "selfsubjectrulesreviews" }),
    reason = binding("system:basic-user") } },
  non_resource = {
    { rule = url_rule({ "get" }, { "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
      "/openapi", "/openapi/*", "/readyz", "/version", "/version/" }),
      reason = binding("system:discovery") },
    { rule = url_rule({ "get" }, { "/healthz", "/livez", "/readyz", "/version", "/version/" }),
      reason = binding("system:public-info-viewer") },
  },
}

local unauthenticated = {
  resource = {},
  non_resource = { { rule = url_rule({ "get" }, { "/healthz", "/livez", "/readyz", "/version",
    "/version/" }), reason = 'RBAC: allowed by ClusterRoleBinding "system:public-info-viewer" '
      .. 'of ClusterRole "system:public-info-viewer" to Group "system:unauthenticated"' } },
}

-- The rule sets of a user's groups, in the authorizers' order.
local function rule_sets(groups)
  local sets = {}
  local has = {}
  for _, g in ipairs(groups) do has[g] = true end
  if has["system:masters"] then sets[#sets + 1] = masters end
  if has["system:authenticated"] then sets[#sets + 1] = authenticated end
  if has["system:unauthenticated"] then sets[#sets + 1] = unauthenticated end
  return sets
end

-- The groups the simulator's authenticator gives a user.
function _M.groups(user)
  if user == "admin" then return { "system:masters", "system:authenticated" } end
  if user == "system:anonymous" then return { "system:unauthenticated" } end
  return { "system:authenticated" }
end

local function has(list, want)
  for _, v in ipairs(list) do
    if v == "*" or v == want then return true end
  end
  return false
end

local function str(v) return type(v) == "string" and v or "" end

local function allows_resource(r, a)
  local what = str(a.resource)
  if str(a.subresource) ~= "" then what = what .. "/" .. a.subresource end
  return has(r.verbs, str(a.verb)) and has(r.apiGroups, str(a.group))
    and has(r.resources, what)
end

local function allows_url(r, a)
  if not has(r.verbs, str(a.verb)) then return false end
  local path = str(a.path)
  for _, u in ipairs(r.nonResourceURLs) do
    if u == "*" or u == path or (sub(u, -1) == "*" and sub(path, 1, #u - 1) == sub(u, 1, -2)) then
      return true
    end
  end
  return false
end

-- The status of an access review of spec (resourceAttributes or
-- nonResourceAttributes) for these groups.
local function decide(groups, spec)
  local resource = is_object(spec.resourceAttributes)
  local attrs = resource and spec.resourceAttributes or spec.nonResourceAttributes
  for _, set in ipairs(rule_sets(groups)) do
    for _, r in ipairs(resource and set.resource or set.non_resource) do
      if (resource and allows_resource or allows_url)(r.rule, attrs) then
        return { allowed = true, reason = r.reason ~= "" and r.reason or nil }
      end
    end
  end
  return { allowed = false }
end

-- Whether user may do what attrs (a review's resourceAttributes) names.
function _M.allows(user, attrs)
  return decide(_M.groups(user), { resourceAttributes = attrs }).allowed
end

-- Go's %#v of the internal NonResourceAttributes, as a validation error
-- prints a bad value that is a struct.
local function go_value(v)
  if not is_object(v) then return '"null"' end
  return format('authorization.NonResourceAttributes{Path:"%s", Verb:"%s"}', str(v.path),
    str(v.verb))
end

local function cause(causes, field, message)
  causes[#causes + 1] = { field = field, reason = "FieldValueInvalid", message = message }
end

-- The validation of a review (its kind's name, its spec, the request's
-- namespace): a list of causes.
local function check_spec(name, spec, ns)
  local subject = name == "subjectaccessreviews" or name == "localsubjectaccessreviews"
  local causes = {}
  local r, n = spec.resourceAttributes, spec.nonResourceAttributes
  local has_r, has_n = r ~= nil and r ~= null, n ~= nil and n ~= null
  if has_r and has_n then
    cause(causes, "spec.nonResourceAttributes", "Invalid value: " .. go_value(n)
      .. ": cannot be specified in combination with resourceAttributes")
  elseif not has_r and not has_n then
    cause(causes, "spec.resourceAttributes", 'Invalid value: "null": exactly one of '
      .. "nonResourceAttributes or resourceAttributes must be specified")
  end
  if subject and str(spec.user) == "" and not (is_array(spec.groups) and #spec.groups > 0) then
    cause(causes, "spec.user", format('Invalid value: "%s": at least one of user or group '
      .. "must be specified", str(spec.user)))
  end
  if name == "localsubjectaccessreviews" then
    if is_object(r) and str(r.namespace) ~= ns then
      cause(causes, "spec.resourceAttributes.namespace", format('Invalid value: "%s": must '
        .. "match metadata.namespace", str(r.namespace)))
    end
    if has_n then
      cause(causes, "spec.nonResourceAttributes", "Invalid value: " .. go_value(n)
        .. ": disallowed on this kind of request")
    end
  end
  return causes
end

-- The rules review's status: every rule of the groups, as RBAC lists them.
local function rules_status(groups)
  local resource, non_resource = json.array {}, json.array {}
  for _, set in ipairs(rule_sets(groups)) do
    for _, r in ipairs(set.resource) do resource[#resource + 1] = r.rule end
    for _, r in ipairs(set.non_resource) do non_resource[#non_resource + 1] = r.rule end
  end
  return { resourceRules = resource, nonResourceRules = non_resource, incomplete = false }
end

-- The Go types of a review's spec, for the decoder's errors: per spec
-- struct, field -> Go type (a struct's name when it is one).
local STRUCTS = {
  SelfSubjectAccessReviewSpec = { resourceAttributes = "ResourceAttributes",
    nonResourceAttributes = "NonResourceAttributes" },
  SubjectAccessReviewSpec = { resourceAttributes = "ResourceAttributes",
    nonResourceAttributes = "NonResourceAttributes", user = "string", groups = "[]string",
    uid = "string" },
  SelfSubjectRulesReviewSpec = { namespace = "string" },
  ResourceAttributes = { namespace = "string", verb = "string", group = "string",
    version = "string", resource = "string", subresource = "string", name = "string" },
  NonResourceAttributes = { path = "string", verb = "string" },
}
local SPEC = { selfsubjectaccessreviews = "SelfSubjectAccessReviewSpec",
  subjectaccessreviews = "SubjectAccessReviewSpec",
  localsubjectaccessreviews = "SubjectAccessReviewSpec",
  selfsubjectrulesreviews = "SelfSubjectRulesReviewSpec" }

-- The first value of v (a struct's JSON object, at path) that does not fit
-- its Go type: the decoder's message, or nil.
local function type_error(struct, v, path)
  local fields = STRUCTS[struct]
  for _, k in ipairs(util.sorted_keys(v)) do
    local typ, x = fields[k], v[k]
    if typ and x ~= null then
      local at = path .. "." .. k
      local field = struct .. "." .. at -- Go names the innermost struct, then the path
      if STRUCTS[typ] then
        if not is_object(x) then return util.unmarshal_error(x, field, "v1." .. typ) end
        local err = type_error(typ, x, at)
        if err then return err end
      elseif typ == "[]string" then
        if not is_array(x) then return util.unmarshal_error(x, field, typ) end
        for _, g in ipairs(x) do
          if type(g) ~= "string" then return util.unmarshal_error(g, field, "string") end
        end
      elseif type(x) ~= "string" then
        return util.unmarshal_error(x, field, typ)
      end
    end
  end
  return nil
end

-- Whether res is one of the reviews.
function _M.is_review(res)
  return res.builtin and res.group == "authorization.k8s.io"
end

-- review(res, ns, obj, user, manager) -> the answer, or nil, status. The
-- real server names the kind of the object it decoded, whose type fields
-- are gone by then: its 422 reads '.authorization.k8s.io "" is invalid:
-- ...'.
function _M.review(res, ns, obj, user, manager)
  local struct = SPEC[res.name]
  local spec = obj.spec
  local err
  if spec ~= nil and spec ~= null and not is_object(spec) then
    err = util.unmarshal_error(spec, res.kind .. ".spec", "v1." .. struct)
  end
  err = err or is_object(spec) and type_error(struct, spec, "spec")
  if err then return nil, store.undecodable(res, err) end
  spec = is_object(spec) and spec or {}
  obj.spec = spec
  local md = is_object(obj.metadata) and obj.metadata or {}
  obj.metadata = md
  if ns and md.namespace ~= nil and md.namespace ~= "" and md.namespace ~= ns then
    return nil, store.namespace_mismatch()
  end
  md.creationTimestamp = null
  md.managedFields = nil
  obj.kind, obj.apiVersion = res.kind, res.api_version
  local name = res.name
  local groups = _M.groups(user)
  if name == "selfsubjectrulesreviews" then
    -- answered with a new object: the rules alone
    if str(spec.namespace) == "" then
      return nil, store.bad_request("no namespace on request")
    end
    return { kind = res.kind, apiVersion = res.api_version,
      metadata = { creationTimestamp = null }, spec = {}, status = rules_status(groups) }
  else
    local causes = check_spec(name, spec, ns)
    if #causes > 0 then
      return nil, store.invalid({ kind = "", group = res.group }, "", causes)
    end
    if ns then md.namespace = ns end
    if name == "subjectaccessreviews" or name == "localsubjectaccessreviews" then
      groups = is_array(spec.groups) and spec.groups or {}
    else
      spec.user, spec.groups = nil, nil
    end
    obj.status = decide(groups, spec)
  end
  local mf = managed.update(nil, obj, { manager = manager, operation = "Update",
    api_version = res.api_version, time = util.timestamp(), custom = false, has_status = true })
  md.managedFields = #mf > 0 and mf or nil
  return obj
end

return _M
