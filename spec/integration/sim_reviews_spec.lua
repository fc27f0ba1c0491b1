-- The simulator's access reviews (authorization.k8s.io/v1), which
-- `kubectl auth can-i` and controllers checking their permissions create:
-- answered, never stored, for the admin (system:masters), a --user user
-- (system:authenticated only) and the anonymous user.
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"

local AUTHZ = "/apis/authorization.k8s.io/v1/"
local ADMIN = { Authorization = "Bearer T" }
local BOB = { Authorization = "Bearer B" }

local function review(sim, who, resource, spec, path)
  local code, _, raw, obj = H.request(sim, "POST", path or (AUTHZ .. resource), {
    body = { apiVersion = "authorization.k8s.io/v1", kind = resource, spec = spec },
    headers = who, user_agent = "can-i/1.0" })
  return code, obj, raw
end

local function ssar(sim, who, spec)
  return review(sim, who, "selfsubjectaccessreviews", spec)
end

local function basic(role)
  return ('RBAC: allowed by ClusterRoleBinding "%s" of ClusterRole "%s" to Group '
    .. '"system:authenticated"'):format(role, role)
end

describe("kubelua sim access reviews", function()
  local sim
  setup(function() sim = H.start("--token T --user bob=B") end)
  teardown(function() H.stop(sim) end)

  it("answers a SelfSubjectAccessReview with the request and its status, as kubectl reads it",
    function()
      local code, r = ssar(sim, ADMIN, { resourceAttributes = { namespace = "default",
        verb = "list", group = "batch", resource = "jobs", name = "bar" } })
      assert.equal(201, code)
      assert.same({ apiVersion = "authorization.k8s.io/v1", kind = "SelfSubjectAccessReview",
        metadata = { creationTimestamp = json.null, managedFields = { {
          manager = "can-i", operation = "Update", apiVersion = "authorization.k8s.io/v1",
          time = "<x>", fieldsType = "FieldsV1", fieldsV1 = { ["f:spec"] = {
            ["f:resourceAttributes"] = { ["."] = {}, ["f:group"] = {}, ["f:name"] = {},
              ["f:namespace"] = {}, ["f:resource"] = {}, ["f:verb"] = {} } } } } } },
        spec = { resourceAttributes = { namespace = "default", verb = "list", group = "batch",
          resource = "jobs", name = "bar" } },
        status = { allowed = true } }, H.mask(r))
      -- nothing is kept
      assert.equal(405, (H.api(sim, "GET", AUTHZ .. "selfsubjectaccessreviews", nil, ADMIN)))
    end)

  it("allows a --user user discovery and reviews only, naming the binding that allows", function()
    local code, r = ssar(sim, BOB, { resourceAttributes = { verb = "get", resource = "pods" } })
    assert.equal(201, code)
    assert.same({ allowed = false }, r.status)
    code, r = ssar(sim, BOB, { nonResourceAttributes = { path = "/apis/apps", verb = "get" } })
    assert.equal(201, code)
    assert.same({ allowed = true, reason = basic("system:discovery") }, r.status)
    code, r = ssar(sim, BOB, { nonResourceAttributes = { path = "/metrics", verb = "get" } })
    assert.same({ 201, { allowed = false } }, { code, r.status })
    code, r = ssar(sim, BOB, { resourceAttributes = { verb = "create",
      group = "authorization.k8s.io", resource = "selfsubjectrulesreviews" } })
    assert.same({ 201, { allowed = true, reason = basic("system:basic-user") } },
      { code, r.status })
    -- what the review says is what the server does
    code, r = H.api(sim, "GET", "/api/v1/namespaces/default/pods", nil, BOB)
    assert.equal(403, code)
    assert.equal('pods is forbidden: User "bob" cannot list resource "pods" in API group "" in '
      .. 'the namespace "default"', r.message)
  end)

  it("lists a user's rules in a SelfSubjectRulesReview", function()
    local code, r = review(sim, BOB, "selfsubjectrulesreviews", { namespace = "default" })
    assert.equal(201, code)
    -- a new object: the rules alone
    assert.same({ apiVersion = "authorization.k8s.io/v1", kind = "SelfSubjectRulesReview",
      metadata = { creationTimestamp = json.null }, spec = {} },
      { apiVersion = r.apiVersion, kind = r.kind, metadata = r.metadata, spec = r.spec })
    assert.same({ resourceRules = { { verbs = { "create" }, apiGroups = { "authorization.k8s.io" },
      resources = { "selfsubjectaccessreviews", "selfsubjectrulesreviews" } } },
      nonResourceRules = {
        { verbs = { "get" }, nonResourceURLs = { "/api", "/api/*", "/apis", "/apis/*", "/healthz",
          "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/" } },
        { verbs = { "get" }, nonResourceURLs = { "/healthz", "/livez", "/readyz", "/version",
          "/version/" } } },
      incomplete = false }, r.status)
    code, r = review(sim, ADMIN, "selfsubjectrulesreviews", { namespace = "default" })
    assert.equal(201, code)
    assert.same({ verbs = { "*" }, apiGroups = { "*" }, resources = { "*" } },
      r.status.resourceRules[1])
    assert.same({ verbs = { "*" }, nonResourceURLs = { "*" } }, r.status.nonResourceRules[1])
    code, r = review(sim, BOB, "selfsubjectrulesreviews", {})
    assert.same({ 400, "no namespace on request" }, { code, r.message })
  end)

  it("refuses the anonymous user", function()
    local code, r = ssar(sim, nil, { resourceAttributes = { verb = "get", resource = "pods" } })
    assert.equal(403, code)
    assert.equal('selfsubjectaccessreviews.authorization.k8s.io is forbidden: User '
      .. '"system:anonymous" cannot create resource "selfsubjectaccessreviews" in API group '
      .. '"authorization.k8s.io" at the cluster scope', r.message)
  end)

  it("refuses a review without exactly one kind of attributes with the real 422", function()
    local code, r = ssar(sim, BOB, {})
    assert.equal(422, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = '.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: '
        .. '"null": exactly one of nonResourceAttributes or resourceAttributes must be '
        .. "specified", reason = "Invalid",
      details = { group = "authorization.k8s.io", causes = { { reason = "FieldValueInvalid",
        message = 'Invalid value: "null": exactly one of nonResourceAttributes or '
          .. "resourceAttributes must be specified", field = "spec.resourceAttributes" } } },
      code = 422 }, r)
    code, r = ssar(sim, BOB, { resourceAttributes = { verb = "get" },
      nonResourceAttributes = { path = "/api", verb = "get" } })
    assert.equal(422, code)
    assert.equal('.authorization.k8s.io "" is invalid: spec.nonResourceAttributes: Invalid '
      .. 'value: authorization.NonResourceAttributes{Path:"/api", Verb:"get"}: cannot be '
      .. "specified in combination with resourceAttributes", r.message)
  end)

  it("reviews another subject with a SubjectAccessReview, its groups deciding", function()
    local attrs = { verb = "delete", group = "apps", resource = "deployments",
      namespace = "default" }
    local code, r = review(sim, ADMIN, "subjectaccessreviews", { resourceAttributes = attrs,
      user = "carol", groups = { "system:masters" } })
    assert.same({ 201, { allowed = true } }, { code, r.status })
    assert.equal("carol", r.spec.user)
    code, r = review(sim, ADMIN, "subjectaccessreviews", { resourceAttributes = attrs,
      user = "admin" })
    assert.same({ 201, { allowed = false } }, { code, r.status })
    code, r = review(sim, ADMIN, "subjectaccessreviews", { nonResourceAttributes = {
      path = "/healthz", verb = "get" }, groups = { "system:unauthenticated" } })
    assert.same({ 201, { allowed = true, reason = 'RBAC: allowed by ClusterRoleBinding '
      .. '"system:public-info-viewer" of ClusterRole "system:public-info-viewer" to Group '
      .. '"system:unauthenticated"' } }, { code, r.status })
    code, r = review(sim, ADMIN, "subjectaccessreviews", {})
    assert.equal(422, code)
    assert.equal('.authorization.k8s.io "" is invalid: [spec.resourceAttributes: Invalid value: '
      .. '"null": exactly one of nonResourceAttributes or resourceAttributes must be specified, '
      .. 'spec.user: Invalid value: "": at least one of user or group must be specified]',
      r.message)
    -- only the admin may review others
    code, r = review(sim, BOB, "subjectaccessreviews", { resourceAttributes = attrs,
      user = "carol" })
    assert.equal(403, code)
    assert.equal("Forbidden", r.reason)
  end)

  it("reviews within the request's namespace with a LocalSubjectAccessReview", function()
    local path = "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews"
    local code, r = review(sim, ADMIN, "localsubjectaccessreviews", { resourceAttributes = {
      verb = "get", resource = "pods", namespace = "default" },
      groups = { "system:masters" } }, path)
    assert.same({ 201, { allowed = true }, "default" }, { code, r.status, r.metadata.namespace })
    code, r = review(sim, ADMIN, "localsubjectaccessreviews", { resourceAttributes = {
      verb = "get", resource = "pods", namespace = "other" }, user = "carol" }, path)
    assert.equal(422, code)
    assert.equal('.authorization.k8s.io "" is invalid: spec.resourceAttributes.namespace: '
      .. 'Invalid value: "other": must match metadata.namespace', r.message)
    local _, _, _, st = H.request(sim, "POST", path, { headers = ADMIN, body = {
      apiVersion = "authorization.k8s.io/v1", kind = "LocalSubjectAccessReview",
      metadata = { namespace = "other" }, spec = { resourceAttributes = { namespace = "default",
        verb = "get", resource = "pods" }, user = "carol" } } })
    assert.same({ 400, "the namespace of the provided object does not match the namespace sent "
      .. "on the request" }, { st.code, st.message })
  end)

  it("describes the reviews in OpenAPI v3 as create-only", function()
    local _, idx = H.api(sim, "GET", "/openapi/v3", nil, ADMIN)
    local _, doc = H.api(sim, "GET",
      idx.paths["apis/authorization.k8s.io/v1"].serverRelativeURL, nil, ADMIN)
    local ops = {}
    for path, item in pairs(doc.paths) do
      local verbs = {}
      for k in pairs(item) do
        if k ~= "parameters" then verbs[#verbs + 1] = k end
      end
      ops[path] = table.concat(verbs, ",")
    end
    local base = "/apis/authorization.k8s.io/v1/"
    assert.same({ [base] = "get", -- the group version's discovery, as the real server has it
      [base .. "namespaces/{namespace}/localsubjectaccessreviews"] = "post",
      [base .. "selfsubjectaccessreviews"] = "post", [base .. "selfsubjectrulesreviews"] = "post",
      [base .. "subjectaccessreviews"] = "post" }, ops)
    assert.same({ group = "authorization.k8s.io", version = "v1",
      kind = "SelfSubjectAccessReview" },
      doc.paths[base .. "selfsubjectaccessreviews"].post["x-kubernetes-group-version-kind"])
  end)

  it("answers 405 to a verb a resource does not have, 404 where it has no route", function()
    local code, r = H.api(sim, "DELETE", "/api/v1/namespaces", nil, ADMIN)
    assert.equal(405, code)
    assert.equal("the server does not allow this method on the requested resource", r.message)
    -- reviews have no item routes, and a local review no cluster-wide one
    code, r = H.api(sim, "PUT", AUTHZ .. "selfsubjectaccessreviews/x", "{}", ADMIN)
    assert.same({ 404, "the server could not find the requested resource" }, { code, r.message })
    code = review(sim, ADMIN, "localsubjectaccessreviews", { resourceAttributes = {
      verb = "get", resource = "pods" }, user = "carol" })
    assert.equal(404, code)
    -- authorization comes first: a user who may not list them is refused
    code, r = H.api(sim, "GET", AUTHZ .. "selfsubjectaccessreviews", nil, BOB)
    assert.equal(403, code)
    assert.equal('selfsubjectaccessreviews.authorization.k8s.io is forbidden: User "bob" cannot '
      .. 'list resource "selfsubjectaccessreviews" in API group "authorization.k8s.io" at the '
      .. "cluster scope", r.message)
  end)

  it("refuses a review whose values do not fit their types with the decoder's 400", function()
    local code, r = ssar(sim, BOB, { resourceAttributes = "pods" })
    assert.equal(400, code)
    assert.equal('SelfSubjectAccessReview in version "v1" cannot be handled as a '
      .. "SelfSubjectAccessReview: json: cannot unmarshal string into Go struct field "
      .. "SelfSubjectAccessReviewSpec.spec.resourceAttributes of type v1.ResourceAttributes",
      r.message)
    code, r = ssar(sim, BOB, { resourceAttributes = { verb = { "get" } } })
    assert.equal(400, code)
    assert.equal('SelfSubjectAccessReview in version "v1" cannot be handled as a '
      .. "SelfSubjectAccessReview: json: cannot unmarshal array into Go struct field "
      .. "ResourceAttributes.spec.resourceAttributes.verb of type string", r.message)
    code, r = review(sim, ADMIN, "subjectaccessreviews", { resourceAttributes = {},
      groups = "g" })
    assert.equal(400, code)
    assert.equal('SubjectAccessReview in version "v1" cannot be handled as a '
      .. "SubjectAccessReview: json: cannot unmarshal string into Go struct field "
      .. "SubjectAccessReviewSpec.spec.groups of type []string", r.message)
    code, r = ssar(sim, BOB, 5)
    assert.equal(400, code)
    assert.equal('SelfSubjectAccessReview in version "v1" cannot be handled as a '
      .. "SelfSubjectAccessReview: json: cannot unmarshal number 5 into Go struct field "
      .. "SelfSubjectAccessReview.spec of type v1.SelfSubjectAccessReviewSpec", r.message)
  end)
end)
