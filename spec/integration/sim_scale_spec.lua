-- The simulator's scale subresource (autoscaling/v1 Scale) of Deployments,
-- ReplicaSets and StatefulSets: what kubectl scale (a merge patch, or a
-- get and a conditional put with --current-replicas) and a
-- HorizontalPodAutoscaler read and write.
local H = require "spec.integration.sim_helper"

local DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"

local function api(sim, method, path, body, headers) -- as kubectl
  return H.api(sim, method, path, body, headers, "kubectl/v1.32.4")
end

local MERGE = { ["Content-Type"] = "application/merge-patch+json" }

describe("kubelua sim scale subresource", function()
  local sim, dep
  setup(function()
    -- no workload controllers: what is read back is what the scale
    -- subresource wrote, with no status or revision written beside it
    sim = H.start("--no-controller deployment --no-controller replicaset "
      .. "--no-controller statefulset")
    local code, raw
    code, dep, raw = api(sim, "POST", DEPLOYS, { apiVersion = "apps/v1", kind = "Deployment",
      metadata = { name = "web" }, spec = { replicas = 2,
        selector = { matchLabels = { app = "web", tier = "front" },
          matchExpressions = { { key = "env", operator = "In", values = { "prod", "dev" } },
            { key = "canary", operator = "DoesNotExist" } } },
        template = { metadata = { labels = { app = "web", tier = "front", env = "dev" } },
          spec = { containers = { { name = "c", image = "nginx" } } } } } })
    assert.equal(201, code, raw)
  end)
  teardown(function() H.stop(sim) end)

  it("reads the object's replicas, identity and selector as a Scale", function()
    local code, sc = api(sim, "GET", DEPLOYS .. "/web/scale")
    assert.equal(200, code)
    local md = dep.metadata
    assert.same({ kind = "Scale", apiVersion = "autoscaling/v1",
      metadata = { name = "web", namespace = "default", uid = md.uid,
        resourceVersion = md.resourceVersion, creationTimestamp = md.creationTimestamp },
      spec = { replicas = 2 },
      status = { replicas = 0, selector = "app=web,!canary,env in (dev,prod),tier=front" } }, sc)
  end)

  it("scales by a merge patch, bumping the generation, as kubectl scale does", function()
    local code, sc, raw = api(sim, "PATCH", DEPLOYS .. "/web/scale",
      '{"spec":{"replicas":5}}', MERGE)
    assert.equal(200, code, raw)
    assert.equal(5, sc.spec.replicas)
    local _, d = api(sim, "GET", DEPLOYS .. "/web")
    assert.same({ 5, 2, sc.metadata.resourceVersion },
      { d.spec.replicas, d.metadata.generation, d.metadata.resourceVersion })
    local last = d.metadata.managedFields[#d.metadata.managedFields]
    assert.same({ "kubectl", "Update", "scale", { ["f:spec"] = { ["f:replicas"] = {} } } },
      { last.manager, last.operation, last.subresource, last.fieldsV1 })
    -- to zero: the Scale's spec omits replicas, as its omitempty field does
    code, sc = api(sim, "PATCH", DEPLOYS .. "/web/scale", '{"spec":{"replicas":0}}', MERGE)
    assert.equal(200, code)
    assert.same({}, sc.spec)
    _, d = api(sim, "GET", DEPLOYS .. "/web")
    assert.equal(0, d.spec.replicas)
  end)

  it("puts a Scale on the version it names only", function()
    local _, sc = api(sim, "GET", DEPLOYS .. "/web/scale")
    local stale = sc.metadata.resourceVersion
    sc.spec.replicas = 3
    local code, got = api(sim, "PUT", DEPLOYS .. "/web/scale", sc)
    assert.equal(200, code)
    assert.equal(3, got.spec.replicas)
    sc.spec.replicas = 4 -- still carrying the version before the put
    local st
    code, st = api(sim, "PUT", DEPLOYS .. "/web/scale", sc)
    assert.equal(409, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = 'Operation cannot be fulfilled on deployments.apps "web": the object has been '
        .. "modified; please apply your changes to the latest version and try again",
      reason = "Conflict", details = { name = "web", group = "apps", kind = "deployments" },
      code = 409 }, st)
    local _, d = api(sim, "GET", DEPLOYS .. "/web")
    assert.equal(3, d.spec.replicas)
    -- a uid that is not the object's: the precondition fails
    sc.metadata.resourceVersion, sc.metadata.uid = nil, "bogus"
    code, st = api(sim, "PUT", DEPLOYS .. "/web/scale", sc)
    assert.equal(409, code)
    assert.equal('Operation cannot be fulfilled on deployments/scale.apps "web": Precondition '
      .. "failed: UID in precondition: bogus, UID in object meta: " .. d.metadata.uid, st.message)
    assert.same({ name = "web", group = "apps", kind = "deployments/scale" }, st.details)
    assert.equal(stale ~= d.metadata.resourceVersion, true)
  end)

  it("refuses a Scale of the wrong shape or name, leaving the object as it was", function()
    local _, before = api(sim, "GET", DEPLOYS .. "/web")
    local function bad(body, msg)
      local code, st = api(sim, "PUT", DEPLOYS .. "/web/scale", body)
      assert.equal(400, code, body)
      assert.equal(msg, st.message)
    end
    local pre = 'Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal '
    bad('{"metadata":{"name":"web"},"spec":"x"}',
      pre .. "string into Go struct field Scale.spec of type v1.ScaleSpec")
    bad('{"metadata":"x","spec":{"replicas":1}}',
      pre .. "string into Go struct field Scale.metadata of type v1.ObjectMeta")
    bad('{"metadata":{"name":"web"},"spec":{"replicas":"3"}}',
      pre .. "string into Go struct field ScaleSpec.spec.replicas of type int32")
    bad('{"metadata":{"name":"web"},"spec":{"replicas":1.5}}',
      pre .. "number 1.5 into Go struct field ScaleSpec.spec.replicas of type int32")
    bad('{"spec":{"replicas":2}}',
      "the name of the object () does not match the name on the URL (web)")
    bad('{"metadata":{"name":"other"},"spec":{"replicas":2}}',
      "the name of the object (other) does not match the name on the URL (web)")
    -- a JSON patch renaming it is refused as well
    local code, st = api(sim, "PATCH", DEPLOYS .. "/web/scale",
      '[{"op":"replace","path":"/metadata/name","value":"x"}]',
      { ["Content-Type"] = "application/json-patch+json" })
    assert.equal(400, code)
    assert.equal("the name of the object (x) does not match the name on the URL (web)", st.message)
    local _, after = api(sim, "GET", DEPLOYS .. "/web")
    assert.same(before, after)
  end)

  it("scales by a JSON patch, leaves the object alone on a dry run, and serves ReplicaSets",
    function()
      local code, sc = api(sim, "PATCH", DEPLOYS .. "/web/scale",
        '[{"op":"replace","path":"/spec/replicas","value":7}]',
        { ["Content-Type"] = "application/json-patch+json" })
      assert.equal(200, code)
      assert.equal(7, sc.spec.replicas)
      local _, before = api(sim, "GET", DEPLOYS .. "/web")
      code, sc = api(sim, "PATCH", DEPLOYS .. "/web/scale?dryRun=All", '{"spec":{"replicas":9}}',
        MERGE)
      assert.equal(200, code)
      assert.equal(9, sc.spec.replicas)
      local _, after = api(sim, "GET", DEPLOYS .. "/web")
      assert.same(before, after)
      local RS = "/apis/apps/v1/namespaces/default/replicasets"
      assert.equal(201, (api(sim, "POST", RS, { metadata = { name = "rs" }, spec = { replicas = 1,
        selector = { matchLabels = { a = "b" } }, template = { metadata = { labels = { a = "b" } },
          spec = { containers = { { name = "c", image = "x" } } } } } })))
      code, sc = api(sim, "PATCH", RS .. "/rs/scale", '{"spec":{"replicas":4}}', MERGE)
      assert.equal(200, code)
      assert.same({ 4, "a=b" }, { sc.spec.replicas, sc.status.selector })
      local _, rs = api(sim, "GET", RS .. "/rs")
      assert.equal(4, rs.spec.replicas)
    end)

  it("refuses fewer than zero replicas, and a kind without a scale", function()
    local code, st = api(sim, "PATCH", DEPLOYS .. "/web/scale", '{"spec":{"replicas":-1}}', MERGE)
    assert.equal(422, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = 'Scale.autoscaling "web" is invalid: spec.replicas: Invalid value: -1: must be '
        .. "greater than or equal to 0", reason = "Invalid",
      details = { name = "web", group = "autoscaling", kind = "Scale", causes = {
        { reason = "FieldValueInvalid", message = "Invalid value: -1: must be greater than or "
          .. "equal to 0", field = "spec.replicas" } } }, code = 422 }, st)
    code = api(sim, "GET", "/api/v1/namespaces/default/configmaps/x/scale")
    assert.equal(404, code)
    code, st = api(sim, "GET", DEPLOYS .. "/nope/scale")
    assert.equal(404, code)
    assert.equal('deployments.apps "nope" not found', st.message)
    code = api(sim, "POST", DEPLOYS .. "/web/scale", {})
    assert.equal(405, code)
  end)

  it("serves a custom resource's scale at the paths its CRD declares", function()
    local crd = H.fixture("09").request.body
    local CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    local code = api(sim, "POST", CRDS, crd)
    assert.equal(201, code)
    local c = H.established(sim, "widgets.example.com")
    local WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
    code = api(sim, "POST", WIDGETS, { apiVersion = "example.com/v1", kind = "Widget",
      metadata = { name = "w" }, spec = { size = 3 } })
    assert.equal(201, code)
    -- no scale until the CRD declares one
    assert.equal(404, (api(sim, "GET", WIDGETS .. "/w/scale")))
    c.spec.versions[1].subresources.scale = { specReplicasPath = ".spec.size",
      statusReplicasPath = ".status.count", labelSelectorPath = ".status.selector" }
    local status = c.spec.versions[1].schema.openAPIV3Schema.properties.status
    status.properties.count, status.properties.selector = { type = "integer" },
      { type = "string" }
    -- the paths are checked first
    local bad = H.mask(c)
    bad.metadata.resourceVersion = c.metadata.resourceVersion
    bad.spec.versions[1].subresources.scale = { specReplicasPath = "spec.size",
      labelSelectorPath = ".metadata.labels" }
    local st
    code, st = api(sim, "PUT", CRDS .. "/widgets.example.com", bad)
    assert.equal(422, code)
    assert.equal('CustomResourceDefinition.apiextensions.k8s.io "widgets.example.com" is invalid: '
      .. '[spec.versions[0].subresources.scale.specReplicasPath: Invalid value: "spec.size": must '
      .. "be a simple json path starting with ., spec.versions[0].subresources.scale."
      .. "statusReplicasPath: Required value, spec.versions[0].subresources.scale."
      .. 'labelSelectorPath: Invalid value: ".metadata.labels": should be a json path under .spec '
      .. "or .status]", st.message)
    code = api(sim, "PUT", CRDS .. "/widgets.example.com", c)
    assert.equal(200, code)
    local _, disco = api(sim, "GET", "/apis/example.com/v1")
    assert.same({ name = "widgets/scale", singularName = "", namespaced = true,
      group = "autoscaling", version = "v1", kind = "Scale",
      verbs = { "get", "patch", "update" } }, disco.resources[2])
    assert.equal("widgets/status", disco.resources[3].name)
    local sc
    code, sc = api(sim, "GET", WIDGETS .. "/w/scale")
    assert.equal(200, code)
    assert.same({ { replicas = 3 }, { replicas = 0 } }, { sc.spec, sc.status })
    code = api(sim, "PATCH", WIDGETS .. "/w/status", { status = { count = 2, selector = "app=w" } },
      MERGE)
    assert.equal(200, code)
    code, sc = api(sim, "PATCH", WIDGETS .. "/w/scale", { spec = { replicas = 5 } }, MERGE)
    assert.equal(200, code)
    assert.same({ { replicas = 5 }, { replicas = 2, selector = "app=w" } }, { sc.spec, sc.status })
    local w
    code, w = api(sim, "GET", WIDGETS .. "/w")
    assert.same({ 200, 5, 2 }, { code, w.spec.size, w.metadata.generation })
    local by_scale
    for _, m in ipairs(w.metadata.managedFields) do
      if m.subresource == "scale" then by_scale = m end
    end
    assert.same({ ["f:spec"] = { ["f:size"] = {} } }, by_scale.fieldsV1)
  end)

  it("keeps a built-in resource when a CRD names the same one", function()
    local CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    local code = api(sim, "POST", CRDS, { apiVersion = "apiextensions.k8s.io/v1",
      kind = "CustomResourceDefinition", metadata = { name = "leases.coordination.k8s.io" },
      spec = { group = "coordination.k8s.io", scope = "Namespaced", names = { plural = "leases",
        singular = "lease", kind = "Foo" }, versions = { { name = "v1", served = true,
          storage = true, schema = { openAPIV3Schema = { type = "object" } } } } } })
    assert.equal(201, code)
    H.established(sim, "leases.coordination.k8s.io")
    assert.equal(200, (api(sim, "DELETE", CRDS .. "/leases.coordination.k8s.io")))
    local _, disco = api(sim, "GET", "/apis/coordination.k8s.io/v1")
    assert.same({ "leases", "Lease" }, { disco.resources[1].name, disco.resources[1].kind })
    code = api(sim, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", {
      apiVersion = "coordination.k8s.io/v1", kind = "Lease", metadata = { name = "l" } })
    assert.equal(201, code)
  end)
end)
