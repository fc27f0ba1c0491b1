-- The simulator's API semantics beyond the captured fixtures: selectors,
-- deletecollection, strategic merge patch (fixtures 44-47), generation and
-- the status subresource, preconditions, namespace deletion, --load and
-- TLS.
local json = require "kubelua.json"
local support = require "spec.support"
local H = require "spec.integration.sim_helper"

local CMS = "/api/v1/namespaces/default/configmaps"

local function api(sim, method, path, body, ct)
  local code, _, raw, obj = H.request(sim, method, path, { body = body,
    headers = ct and { ["Content-Type"] = ct } or nil })
  return code, obj, raw
end

local names = H.names

describe("kubelua sim API", function()
  local sim
  -- no Deployment controller: its writes beside the specs' own would make
  -- their conditional updates race it (409), as they would in a cluster
  setup(function() sim = H.start("--no-controller deployment --no-controller replicaset") end)
  teardown(function() H.stop(sim) end)

  it("filters lists by label and field selectors", function()
    for _, c in ipairs { { "s1", { app = "a", tier = "web" } }, { "s2", { app = "b" } },
        { "s3", { app = "c", tier = "db" } } } do
      assert.equal(201, (api(sim, "POST", CMS, { metadata = { name = c[1], labels = c[2] } })))
    end
    local function sel(q)
      local code, list, raw = api(sim, "GET", CMS .. "?" .. q)
      assert(code == 200, raw)
      return names(list)
    end
    assert.same({ "s1" }, sel("labelSelector=app%3Da"))
    assert.same({ "s1" }, sel("labelSelector=app%3D%3Da"))
    -- kube-root-ca.crt, which every namespace has, has no labels
    assert.same({ "kube-root-ca.crt", "s2", "s3" }, sel("labelSelector=app!%3Da"))
    assert.same({ "s1", "s2" }, sel("labelSelector=app%20in%20(a,b)"))
    assert.same({ "kube-root-ca.crt", "s3" }, sel("labelSelector=app%20notin%20(a,b)"))
    assert.same({ "s1", "s3" }, sel("labelSelector=tier"))
    assert.same({ "kube-root-ca.crt", "s2" }, sel("labelSelector=!tier"))
    assert.same({ "s3" }, sel("labelSelector=tier,app%3Dc"))
    assert.same({ "s2" }, sel("fieldSelector=metadata.name%3Ds2"))
    assert.same({ "kube-root-ca.crt", "s1", "s3" }, sel("fieldSelector=metadata.name!%3Ds2"))
    assert.same({ "kube-root-ca.crt", "s1", "s2", "s3" },
      sel("fieldSelector=metadata.namespace%3Ddefault"))
    local code, st = api(sim, "GET", CMS .. "?fieldSelector=spec.x%3Dy")
    assert.equal(400, code)
    assert.equal("field label not supported: spec.x", st.message)
    code, st = api(sim, "GET", CMS .. "?labelSelector=a%20b%20c")
    assert.equal(400, code)
    assert.equal("BadRequest", st.reason)
    -- values are label values: "(b" is none (found by the selector fuzzer)
    code, st = api(sim, "GET", CMS .. "?labelSelector=x%20in%20(a,(b)")
    assert.equal(400, code)
    assert.equal("unable to parse requirement: values[0][x]: Invalid value: \"(b\": a valid label "
      .. "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
      .. "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
      .. "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
      st.message)
  end)

  it("pages through a list with limit and continue", function()
    local seen = {}
    local code, page = api(sim, "GET", CMS .. "?limit=2")
    assert.equal(200, code)
    local rv = page.metadata.resourceVersion
    while true do
      for _, n in ipairs(names(page)) do seen[#seen + 1] = n end
      if not page.metadata.continue then break end
      assert.equal(rv, page.metadata.resourceVersion)
      code, page = api(sim, "GET", CMS .. "?limit=2&continue=" .. page.metadata.continue)
      assert.equal(200, code)
    end
    assert.same({ "kube-root-ca.crt", "s1", "s2", "s3" }, seen)
    code = api(sim, "GET", CMS .. "?limit=2&continue=bm90IGpzb24&resourceVersion=5")
    assert.equal(400, code)
  end)

  it("deletes a collection by selector and returns what it deleted", function()
    local _, before = api(sim, "GET", CMS)
    local code, list = api(sim, "DELETE", CMS .. "?labelSelector=tier")
    assert.equal(200, code)
    assert.equal("ConfigMapList", list.kind)
    assert.same({ "s1", "s3" }, names(list))
    -- the list the deletions were made from, at its resourceVersion
    assert.equal(before.metadata.resourceVersion, list.metadata.resourceVersion)
    local _, left = api(sim, "GET", CMS)
    assert.same({ "kube-root-ca.crt", "s2" }, names(left))
    assert.equal(tonumber(before.metadata.resourceVersion) + 2,
      tonumber(left.metadata.resourceVersion))
  end)

  it("merges containers by name with a strategic merge patch (fixtures 44-47)", function()
    assert.equal(201, (api(sim, "POST", "/api/v1/namespaces", { apiVersion = "v1",
      kind = "Namespace", metadata = { name = "demo" } })))
    local path = "/apis/apps/v1/namespaces/demo/deployments"
    local code, dep = api(sim, "POST", path, H.fixture("44").request.body)
    assert.equal(201, code)
    assert.equal(1, dep.metadata.generation)
    local function images(d)
      local out = {}
      for i, c in ipairs(d.spec.template.spec.containers) do out[i] = c.name .. "=" .. c.image end
      return out
    end
    for _, n in ipairs { "45", "46", "47" } do
      local fx = H.fixture(n)
      local got
      code, got = api(sim, "PATCH", path .. "/web", fx.request.body,
        fx.request.headers["Content-Type"])
      assert.equal(200, code)
      assert.same(images(fx.response.body), images(got))
    end
    local _, last = api(sim, "GET", path .. "/web")
    assert.equal(4, last.metadata.generation)
    -- as the real server orders them: an item the object did not have comes
    -- before those it had, unless the patch names them after it
    local got
    code, got = api(sim, "PATCH", path .. "/web", { spec = { template = { spec = {
      containers = { { name = "z", image = "z:1" } } } } } },
      "application/strategic-merge-patch+json")
    assert.equal(200, code)
    assert.same({ "z=z:1", "b=busybox:1.37" }, images(got))
    code, got = api(sim, "PATCH", path .. "/web", { spec = { template = { spec = {
      containers = { { name = "b", image = "b:2" }, { name = "y", image = "y:1" },
        { name = "z", image = "z:2" } } } } } }, "application/strategic-merge-patch+json")
    assert.equal(200, code)
    assert.same({ "b=b:2", "y=y:1", "z=z:2" }, images(got))
  end)

  it("bumps generation on spec changes only, and keeps status to /status", function()
    api(sim, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
      H.fixture("09").request.body)
    H.sleep(0.05)
    local path = "/apis/example.com/v1/namespaces/demo/widgets"
    local code, w = api(sim, "POST", path, { apiVersion = "example.com/v1", kind = "Widget",
      metadata = { name = "g" }, spec = { size = 1 }, status = { ready = true } })
    assert.equal(201, code)
    assert.is_nil(w.status)
    code, w = api(sim, "PATCH", path .. "/g/status", { status = { ready = true } },
      "application/merge-patch+json")
    assert.equal(200, code)
    assert.equal(1, w.metadata.generation)
    assert.is_true(w.status.ready)
    local rv = w.metadata.resourceVersion
    code, w = api(sim, "PATCH", path .. "/g", { metadata = { labels = { x = "y" } } },
      "application/merge-patch+json")
    assert.equal(200, code)
    assert.equal(1, w.metadata.generation)
    assert.is_true(tonumber(w.metadata.resourceVersion) > tonumber(rv))
    code, w = api(sim, "PATCH", path .. "/g", { spec = { size = 3 } },
      "application/merge-patch+json")
    assert.equal(200, code)
    assert.equal(2, w.metadata.generation)
    -- an update of a custom resource needs a resourceVersion
    w.metadata.resourceVersion = nil
    code = api(sim, "PUT", path .. "/g", w)
    assert.equal(422, code)
  end)

  it("defaults a Deployment's strategy on every write, server-side apply included", function()
    local path = "/apis/apps/v1/namespaces/default/deployments"
    local function dep(strategy, name)
      return json.encode { apiVersion = "apps/v1", kind = "Deployment",
        metadata = { name = name or "strat" }, spec = { strategy = strategy,
          selector = { matchLabels = { app = "s" } },
          template = { metadata = { labels = { app = "s" } },
            spec = { containers = { { name = "c", image = "nginx:1" } } } } } }
    end
    local apply = "application/apply-patch+yaml"
    local code, d = api(sim, "PATCH", path .. "/strat?fieldManager=a",
      dep { type = "Recreate" }, apply)
    assert.equal(201, code)
    assert.same({ type = "Recreate" }, d.spec.strategy)
    -- the manager applies no strategy now: what it owned goes, and the
    -- object is defaulted again
    code, d = api(sim, "PATCH", path .. "/strat?fieldManager=a", dep(nil), apply)
    assert.equal(200, code)
    assert.same({ type = "RollingUpdate",
      rollingUpdate = { maxUnavailable = "25%", maxSurge = "25%" } }, d.spec.strategy)
    -- Recreate beside the defaulted rollingUpdate is refused, as a real
    -- server refuses it
    code, d = api(sim, "PATCH", path .. "/strat", { spec = { strategy = { type = "Recreate" } } },
      "application/strategic-merge-patch+json")
    assert.equal(422, code)
    assert.equal('Deployment.apps "strat" is invalid: spec.strategy.rollingUpdate: Forbidden: '
      .. "may not be specified when strategy `type` is 'Recreate'", d.message)
    assert.same({ { reason = "FieldValueForbidden", field = "spec.strategy.rollingUpdate",
      message = "Forbidden: may not be specified when strategy `type` is 'Recreate'" } },
      d.details.causes)
    -- $retainKeys (what kubectl apply sends for a strategy change) keeps
    -- only the named fields, and must name every field the patch sets
    for _, bad in ipairs { { ["$retainKeys"] = "type", type = "Recreate" },
        { ["$retainKeys"] = { "type" }, type = "Recreate", rollingUpdate = { maxSurge = 1 } } } do
      code, d = api(sim, "PATCH", path .. "/strat", { spec = { strategy = bad } },
        "application/strategic-merge-patch+json")
      assert.same({ 400, "invalid patch format of retainKeys" }, { code, d.message })
    end
    code, d = api(sim, "PATCH", path .. "/strat",
      { spec = { strategy = { ["$retainKeys"] = { "type" }, type = "Recreate" } } },
      "application/strategic-merge-patch+json")
    assert.equal(200, code)
    assert.same({ type = "Recreate" }, d.spec.strategy)
    -- a null rollingUpdate is no rollingUpdate
    d.spec.strategy = { type = "Recreate", rollingUpdate = json.null }
    code, d = api(sim, "PUT", path .. "/strat", d)
    assert.equal(200, code)
    assert.same({ type = "Recreate" }, d.spec.strategy)
    -- and on create
    code, d = api(sim, "POST", path,
      dep({ type = "Recreate", rollingUpdate = { maxSurge = 1 } }, "strat2"))
    assert.equal(422, code)
    assert.equal('Deployment.apps "strat2" is invalid: spec.strategy.rollingUpdate: Forbidden: '
      .. "may not be specified when strategy `type` is 'Recreate'", d.message)
  end)

  it("stores resource quantities in their canonical form, and refuses malformed ones", function()
    local pods = "/api/v1/namespaces/default/pods"
    local function pod(name, resources)
      return { apiVersion = "v1", kind = "Pod", metadata = { name = name },
        spec = { containers = { { name = "c", image = "busybox", resources = resources } } } }
    end
    local code, p = api(sim, "POST", pods, pod("q", {
      requests = { cpu = "0.5", memory = "1024Mi", ["ephemeral-storage"] = "1000000" },
      limits = { cpu = 2, memory = "1.5Gi" } }))
    assert.equal(201, code)
    assert.same({ requests = { cpu = "500m", memory = "1Gi", ["ephemeral-storage"] = "1M" },
      limits = { cpu = "2", memory = "1536Mi" } }, p.spec.containers[1].resources)
    -- every write: a patch too
    code, p = api(sim, "PATCH", pods .. "/q", { spec = { containers = { { name = "c",
      resources = { limits = { memory = "2048Mi" } } } } } },
      "application/strategic-merge-patch+json")
    assert.equal(200, code)
    assert.equal("2Gi", p.spec.containers[1].resources.limits.memory)
    -- and a workload's pod template
    code, p = api(sim, "POST", "/apis/apps/v1/namespaces/default/deployments", {
      apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "q" },
      spec = { selector = { matchLabels = { app = "q" } }, template = {
        metadata = { labels = { app = "q" } }, spec = pod("", { requests = { cpu = "1000m" } })
          .spec } } })
    assert.equal(201, code)
    assert.same({ requests = { cpu = "1" } }, p.spec.template.spec.containers[1].resources)
    code, p = api(sim, "POST", pods, pod("bad", { limits = { cpu = "one" } }))
    assert.equal(400, code)
    assert.equal('Pod in version "v1" cannot be handled as a Pod: quantities must match the '
      .. "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'", p.message)
    assert.equal(404, (api(sim, "GET", pods .. "/bad")))
  end)

  it("validates ConfigMap and Secret keys, Secret types and immutable objects", function()
    local secrets = "/api/v1/namespaces/default/secrets"
    local code, st = api(sim, "POST", CMS, { metadata = { name = "keys" },
      data = { ["a/b"] = "x", ok = "y" } })
    assert.equal(422, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = 'ConfigMap "keys" is invalid: data[a/b]: Invalid value: "a/b": a valid config '
        .. "key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
        .. "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
      reason = "Invalid", details = { name = "keys", kind = "ConfigMap", causes = { {
        reason = "FieldValueInvalid", field = "data[a/b]", message = 'Invalid value: "a/b": a '
          .. "valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
          .. "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
          .. "'[-._a-zA-Z0-9]+')" } } }, code = 422 }, st)
    code, st = api(sim, "POST", CMS, { metadata = { name = "keys" }, data = { [".."] = "x" },
      binaryData = { ["..a"] = "eA==" } })
    assert.equal(422, code)
    assert.equal('ConfigMap "keys" is invalid: [data[..]: Invalid value: "..": must not be \'..\', '
      .. 'binaryData[..a]: Invalid value: "..a": must not start with \'..\']', st.message)
    code, st = api(sim, "POST", CMS, { metadata = { name = "keys" }, data = { k = "x" },
      binaryData = { k = "eA==" } })
    assert.equal(422, code)
    assert.equal('ConfigMap "keys" is invalid: data[k]: Invalid value: "k": duplicate of key '
      .. "present in binaryData", st.message)
    -- a Secret's keys are checked after stringData is merged in; its type
    -- needs its keys
    code, st = api(sim, "POST", secrets, { metadata = { name = "s" }, stringData = { ["x y"] = "1" } })
    assert.equal(422, code)
    assert.equal('Secret "s" is invalid: data[x y]: Invalid value: "x y": a valid config key must '
      .. "consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  "
      .. "or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')", st.message)
    code, st = api(sim, "POST", secrets, { metadata = { name = "s" }, type = "kubernetes.io/tls",
      data = { ["tls.crt"] = "eA==" } })
    assert.equal(422, code)
    assert.equal('Secret "s" is invalid: data[tls.key]: Required value', st.message)
    assert.same({ reason = "FieldValueRequired", message = "Required value",
      field = "data[tls.key]" }, st.details.causes[1])
    -- data is base64, as Go's decoder reads it
    code, st = api(sim, "POST", secrets, { metadata = { name = "s" }, data = { a = "eHk=eHk=" } })
    assert.equal(400, code)
    assert.equal('Secret in version "v1" cannot be handled as a Secret: illegal base64 data at '
      .. "input byte 4", st.message)
    code, st = api(sim, "POST", CMS, { metadata = { name = "b" }, binaryData = { a = "eA" } })
    assert.equal(400, code)
    assert.equal('ConfigMap in version "v1" cannot be handled as a ConfigMap: illegal base64 '
      .. "data at input byte 0", st.message)
    -- the type may not change; an immutable object's data may not either
    code = api(sim, "POST", secrets, { metadata = { name = "s" }, immutable = true,
      data = { a = "eA==" } })
    assert.equal(201, code)
    code, st = api(sim, "PATCH", secrets .. "/s", { type = "kubernetes.io/basic-auth" },
      "application/merge-patch+json")
    assert.equal(422, code)
    assert.equal('Secret "s" is invalid: [type: Invalid value: "kubernetes.io/basic-auth": field '
      .. "is immutable, data[username]: Required value, data[password]: Required value]",
      st.message)
    code, st = api(sim, "PATCH", secrets .. "/s", { data = { a = "eQ==" }, immutable = false },
      "application/merge-patch+json")
    assert.equal(422, code)
    assert.equal('Secret "s" is invalid: [immutable: Forbidden: field is immutable when '
      .. "`immutable` is set, data: Forbidden: field is immutable when `immutable` is set]",
      st.message)
    -- metadata still changes
    code = api(sim, "PATCH", secrets .. "/s", { metadata = { labels = { x = "y" } } },
      "application/merge-patch+json")
    assert.equal(200, code)
  end)

  it("refuses a Service whose name is no DNS-1035 label or whose ports are out of range",
    function()
      local SVCS = "/api/v1/namespaces/default/services"
      local code, st = api(sim, "POST", SVCS, { apiVersion = "v1", kind = "Service",
        metadata = { name = "1abc" }, spec = { ports = { { port = 80 } } } })
      assert.equal(422, code)
      assert.equal('Service "1abc" is invalid: metadata.name: Invalid value: "1abc": a DNS-1035 '
        .. "label must consist of lower case alphanumeric characters or '-', start with an "
        .. "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
        .. "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')", st.message)
      code, st = api(sim, "POST", SVCS, { apiVersion = "v1", kind = "Service",
        metadata = { name = "p0" }, spec = { ports = { { port = 0 }, { name = "b", port = 70000 } } } })
      assert.equal(422, code)
      assert.equal('Service "p0" is invalid: [spec.ports[0].name: Required value, '
        .. "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, "
        .. "spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive, "
        .. "spec.ports[1].port: Invalid value: 70000: must be between 1 and 65535, inclusive, "
        .. "spec.ports[1].targetPort: Invalid value: 70000: must be between 1 and 65535, "
        .. "inclusive]", st.message)
      assert.same({ reason = "FieldValueRequired", message = "Required value",
        field = "spec.ports[0].name" }, st.details.causes[1])
      code, st = api(sim, "POST", SVCS, { apiVersion = "v1", kind = "Service",
        metadata = { name = "dup" }, spec = { ports = { { name = "http", port = 80 },
          { name = "http", port = 81 } } } })
      assert.equal(422, code)
      assert.equal('Service "dup" is invalid: spec.ports[1].name: Duplicate value: "http"',
        st.message)
      -- validation comes before the check that the name is free
      assert.equal(201, (api(sim, "POST", SVCS, { apiVersion = "v1", kind = "Service",
        metadata = { name = "taken" }, spec = { ports = { { port = 80 } } } })))
      code, st = api(sim, "POST", SVCS, { apiVersion = "v1", kind = "Service",
        metadata = { name = "taken" }, spec = { ports = { { port = 0 } } } })
      assert.same({ 422, "Invalid" }, { code, st.reason })
      code, st = api(sim, "POST", SVCS, { apiVersion = "v1", kind = "Service",
        metadata = { name = "taken" }, spec = { ports = { { port = 80 } } } })
      assert.same({ 409, 'services "taken" already exists' }, { code, st.message })
    end)

  it("fills in a Service as a real server's defaults and registry do", function()
    local svcs = "/api/v1/namespaces/default/services"
    -- the apiserver's own, as in every cluster
    local code0, k = api(sim, "GET", svcs .. "/kubernetes")
    assert.same({ 200, "10.96.0.1", { { name = "https", port = 443, protocol = "TCP",
      targetPort = 6443 } }, "kube-apiserver" }, { code0, k.spec.clusterIP, k.spec.ports,
      k.metadata.managedFields[1].manager })
    local function svc(name, spec)
      local code, o, raw = api(sim, "POST", svcs, { apiVersion = "v1", kind = "Service",
        metadata = { name = name }, spec = spec })
      assert.equal(201, code, raw)
      return o
    end
    local function in_range(ip)
      local a = ip:match("^10%.(%d+)%.%d+%.%d+$")
      return a ~= nil and tonumber(a) >= 96 and tonumber(a) <= 111
    end
    local s = svc("web", { selector = { app = "web" }, ports = { { port = 80 } } })
    assert.is_true(in_range(s.spec.clusterIP))
    assert.same({ selector = { app = "web" }, ports = { { port = 80, protocol = "TCP",
      targetPort = 80 } }, clusterIP = s.spec.clusterIP, clusterIPs = { s.spec.clusterIP },
      type = "ClusterIP", sessionAffinity = "None", ipFamilies = { "IPv4" },
      ipFamilyPolicy = "SingleStack", internalTrafficPolicy = "Cluster" }, s.spec)
    assert.same({ loadBalancer = {} }, s.status)
    -- the creator owns the defaults, not what the registry allocated
    assert.same({ ["f:internalTrafficPolicy"] = {}, ["f:ports"] = { ["."] = {},
      ['k:{"port":80,"protocol":"TCP"}'] = { ["."] = {}, ["f:port"] = {}, ["f:protocol"] = {},
        ["f:targetPort"] = {} } }, ["f:selector"] = {}, ["f:sessionAffinity"] = {},
      ["f:type"] = {} }, s.metadata.managedFields[1].fieldsV1["f:spec"])
    local n = svc("np", { type = "NodePort", sessionAffinity = "ClientIP",
      ports = { { port = 443, targetPort = "https" } } })
    local port = n.spec.ports[1].nodePort
    assert.is_true(port >= 30000 and port <= 32767)
    assert.same({ "Cluster", "https", { clientIP = { timeoutSeconds = 10800 } } },
      { n.spec.externalTrafficPolicy, n.spec.ports[1].targetPort, n.spec.sessionAffinityConfig })
    assert.not_equal(s.spec.clusterIP, n.spec.clusterIP)
    -- an update that leaves out what was allocated keeps it
    local code, u = api(sim, "PUT", svcs .. "/np", { apiVersion = "v1", kind = "Service",
      metadata = { name = "np", resourceVersion = n.metadata.resourceVersion },
      spec = { type = "NodePort", sessionAffinity = "ClientIP", ports = { { port = 443,
        targetPort = "https" } } } })
    assert.equal(200, code)
    assert.same({ n.spec.clusterIP, port }, { u.spec.clusterIP, u.spec.ports[1].nodePort })
    -- node ports follow port names; a type that needs none drops them
    code, u = api(sim, "PUT", svcs .. "/np", { apiVersion = "v1", kind = "Service",
      metadata = { name = "np" }, spec = { type = "NodePort", ports = { { name = "web",
        port = 8443 } } } })
    assert.equal(200, code)
    local named = u.spec.ports[1].nodePort
    code, u = api(sim, "PUT", svcs .. "/np", { apiVersion = "v1", kind = "Service",
      metadata = { name = "np" }, spec = { type = "NodePort", ports = { { name = "web",
        port = 9443 } } } })
    assert.same({ 200, named }, { code, u.spec.ports[1].nodePort })
    code, u = api(sim, "PATCH", svcs .. "/np", { spec = { type = "ClusterIP" } },
      "application/merge-patch+json")
    assert.equal(200, code)
    assert.same({ "ClusterIP", n.spec.clusterIP }, { u.spec.type, u.spec.clusterIP })
    assert.same({ nil, nil }, { u.spec.ports[1].nodePort, u.spec.externalTrafficPolicy })
    -- what is asked for must be free and in range
    local st
    code, st = api(sim, "POST", svcs, { apiVersion = "v1", kind = "Service",
      metadata = { name = "taken" }, spec = { clusterIP = "10.96.0.1", ports = { { port = 1 } } } })
    assert.equal(422, code)
    assert.equal('Service "taken" is invalid: spec.clusterIPs: Invalid value: []string{"10.96.0.1"}: '
      .. "failed to allocate IP 10.96.0.1: provided IP is already allocated", st.message)
    code, st = api(sim, "POST", svcs, { apiVersion = "v1", kind = "Service",
      metadata = { name = "far" }, spec = { clusterIP = "192.168.1.1", type = "NodePort",
        ports = { { port = 1, nodePort = 5 } } } })
    assert.equal(422, code)
    assert.equal('Service "far" is invalid: [spec.clusterIPs: Invalid value: []string{'
      .. '"192.168.1.1"}: failed to allocate IP 192.168.1.1: the provided IP (192.168.1.1) is '
      .. "not in the valid range. The range of valid IPs is 10.96.0.0/12, spec.ports[0].nodePort: "
      .. "Invalid value: 5: provided port is not in the valid range. The range of valid ports "
      .. "is 30000-32767]", st.message)
    -- one node port for a port number served over two protocols; a health
    -- check port for a load balancer that keeps traffic local
    local dns = svc("dns", { type = "NodePort", ports = { { name = "t", port = 53 },
      { name = "u", port = 53, protocol = "UDP" } } })
    assert.equal(dns.spec.ports[1].nodePort, dns.spec.ports[2].nodePort)
    local local_lb = svc("local", { type = "LoadBalancer", externalTrafficPolicy = "Local",
      ports = { { port = 80 } } })
    assert.equal("number", type(local_lb.spec.healthCheckNodePort))
    local lb = svc("lb", { type = "LoadBalancer", ports = { { port = 53, protocol = "UDP" } } })
    assert.same({ true, "Cluster", "number" }, { lb.spec.allocateLoadBalancerNodePorts,
      lb.spec.externalTrafficPolicy, type(lb.spec.ports[1].nodePort) })
    local ext = svc("ext", { type = "ExternalName", externalName = "example.com" })
    assert.same({ type = "ExternalName", externalName = "example.com", sessionAffinity = "None" },
      ext.spec)
    -- headless: as many IP families as the cluster has unless it selects pods
    local hl = svc("hl", { clusterIP = "None" })
    assert.same({ "None", { "None" }, "RequireDualStack" },
      { hl.spec.clusterIP, hl.spec.clusterIPs, hl.spec.ipFamilyPolicy })
    assert.equal("SingleStack",
      svc("hl2", { clusterIP = "None", selector = { a = "b" } }).spec.ipFamilyPolicy)
    -- kubectl get services
    local t
    code, t = H.api(sim, "GET", svcs .. "/lb", nil,
      { Accept = "application/json;as=Table;v=v1;g=meta.k8s.io" })
    assert.equal(200, code)
    local cols = {}
    for i, c in ipairs(t.columnDefinitions) do cols[i] = c.name end
    assert.same({ "Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector" },
      cols)
    assert.same({ "lb", "LoadBalancer", lb.spec.clusterIP, "<pending>",
      "53:" .. lb.spec.ports[1].nodePort .. "/UDP", "<none>" },
      { t.rows[1].cells[1], t.rows[1].cells[2], t.rows[1].cells[3], t.rows[1].cells[4],
        t.rows[1].cells[5], t.rows[1].cells[7] })
  end)

  it("checks delete preconditions", function()
    local _, cm = api(sim, "GET", CMS .. "/s2")
    local code, st = api(sim, "DELETE", CMS .. "/s2", { preconditions = { uid = "nope" } })
    assert.equal(409, code)
    -- as kube-apiserver 1.26 answers (its storage's words, the Kind's name)
    assert.equal('Operation cannot be fulfilled on ConfigMap "s2": the UID in the precondition '
      .. "(nope) does not match the UID in record (" .. cm.metadata.uid .. "). The object might "
      .. "have been deleted and then recreated", st.message)
    assert.same({ kind = "ConfigMap", name = "s2" }, st.details)
    code, st = api(sim, "DELETE", CMS .. "/s2", { preconditions = { resourceVersion = "1" } })
    assert.equal(409, code)
    assert.equal('Operation cannot be fulfilled on ConfigMap "s2": the ResourceVersion in the '
      .. "precondition (1) does not match the ResourceVersion in record ("
      .. cm.metadata.resourceVersion .. "). The object might have been modified", st.message)
    code = api(sim, "DELETE", CMS .. "/s2", { preconditions = { uid = cm.metadata.uid } })
    assert.equal(200, code)
  end)

  it("gives an applier the items of keyed lists it applies, as members of their own", function()
    local body = json.encode { apiVersion = "v1", kind = "Service", metadata = { name = "ap" },
      spec = { ports = { { name = "http", port = 80 } } } }
    local code, svc, raw = api(sim, "PATCH", "/api/v1/namespaces/default/services/ap"
      .. "?fieldManager=me", body, "application/apply-patch+yaml")
    assert(code == 201, raw)
    local f = svc.metadata.managedFields[1]
    assert.equal("Apply", f.operation)
    assert.same({ ["f:spec"] = { ["f:ports"] = { ['k:{"port":80,"protocol":"TCP"}'] = {
      ["."] = {}, ["f:name"] = {}, ["f:port"] = {} } } } }, f.fieldsV1)
    -- a conflict names such an item by its key's fields
    local st
    code, st = api(sim, "PATCH", "/api/v1/namespaces/default/services/ap?fieldManager=you",
      body:gsub('"http"', '"web"'), "application/apply-patch+yaml")
    assert.equal(409, code)
    assert.equal('Apply failed with 1 conflict: conflict with "me": '
      .. '.spec.ports[port=80,protocol="TCP"].name', st.message)
    -- the same values applied by another manager: a write, that makes them
    -- shared (no conflict, so force changes nothing); again: nothing to write
    local path = "/api/v1/namespaces/default/services/ap?fieldManager=you&force=true"
    local taken, again
    code, taken = api(sim, "PATCH", path, body, "application/apply-patch+yaml")
    assert.equal(200, code)
    assert.is_true(tonumber(taken.metadata.resourceVersion)
      > tonumber(svc.metadata.resourceVersion))
    -- the object unchanged, the new entry has no time (the real server sets
    -- one only when the object changes), so it sorts first
    assert.same({ "you", "me" }, { taken.metadata.managedFields[1].manager,
      taken.metadata.managedFields[2].manager })
    assert.same(taken.metadata.managedFields[1].fieldsV1, taken.metadata.managedFields[2].fieldsV1)
    assert.is_nil(taken.metadata.managedFields[1].time)
    assert.is_string(taken.metadata.managedFields[2].time)
    code, again = api(sim, "PATCH", path, body, "application/apply-patch+yaml")
    assert.same({ 200, taken.metadata.resourceVersion }, { code, again.metadata.resourceVersion })
  end)

  it("lists apply conflicts in the field manager's order, leaves before what is below",
    function()
      local DEPS = "/apis/apps/v1/namespaces/default/deployments"
      local function dep(replicas, strategy)
        return { apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "order" },
          spec = { replicas = replicas, strategy = strategy,
            selector = { matchLabels = { app = "o" } }, template = { metadata = {
              labels = { app = "o" } }, spec = { containers = { { name = "c", image = "i" } } } } } }
      end
      assert.equal(201, (api(sim, "POST", DEPS, dep(1, { type = "RollingUpdate",
        rollingUpdate = { maxSurge = 1 } }))))
      local code, st = api(sim, "PATCH", DEPS .. "/order?fieldManager=x", json.encode(dep(2,
        { type = "Recreate", rollingUpdate = { maxSurge = 2 } })), "application/apply-patch+yaml")
      assert.equal(409, code)
      assert.equal('Apply failed with 3 conflicts: conflicts with "curl" using apps/v1:\n'
        .. "- .spec.replicas\n- .spec.strategy.type\n- .spec.strategy.rollingUpdate.maxSurge",
        st.message)
    end)

  it("stores no empty labels, annotations or data, as a real server writes none", function()
    local code, obj, raw = api(sim, "POST", CMS, { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "empties", labels = {}, annotations = {} }, data = {} })
    assert(code == 201, raw)
    assert.same({ "apiVersion", "kind", "metadata" }, support.sorted_keys(obj))
    -- nothing owned: no managedFields entry either
    assert.same({ "creationTimestamp", "name", "namespace", "resourceVersion", "uid" },
      support.sorted_keys(obj.metadata))
    obj.metadata.labels = { a = "b" }
    code, obj = api(sim, "PUT", CMS .. "/empties", obj)
    assert.equal(200, code)
    obj.metadata.labels, obj.data = {}, { k = "v" }
    code, obj = api(sim, "PUT", CMS .. "/empties", obj)
    assert.equal(200, code)
    assert.is_nil(obj.metadata.labels)
    assert.same({ k = "v" }, obj.data)
  end)

  it("creates a Lease, Event or Service that an update names, but no ConfigMap", function()
    local leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    local code, lease, raw = api(sim, "PUT", leases .. "/fresh", { apiVersion =
      "coordination.k8s.io/v1", kind = "Lease", metadata = { name = "fresh",
      resourceVersion = "12345" }, spec = { holderIdentity = "a" } })
    assert(code == 201, raw)
    assert.equal("a", lease.spec.holderIdentity)
    assert.equal(1, #lease.metadata.managedFields)
    assert.equal("Update", lease.metadata.managedFields[1].operation)
    code = api(sim, "PUT", leases .. "/fresh", lease)
    assert.equal(200, code)
    code = api(sim, "PUT", "/api/v1/namespaces/default/events/fresh.1", { apiVersion = "v1",
      kind = "Event", metadata = { name = "fresh.1" }, involvedObject = { kind = "ConfigMap",
      name = "fresh", namespace = "default" }, reason = "Test" })
    assert.equal(201, code)
    local svc
    code, svc = api(sim, "PUT", "/api/v1/namespaces/default/services/fresh", { apiVersion = "v1",
      kind = "Service", metadata = { name = "fresh" }, spec = { ports = { { port = 80 } } } })
    assert.equal(201, code)
    assert.matches("^10%.", svc.spec.clusterIP)
    local st
    code, st = api(sim, "PUT", CMS .. "/fresh", { metadata = { name = "fresh" } })
    assert.equal(404, code)
    assert.equal('configmaps "fresh" not found', st.message)
  end)

  it("deletes a namespace's objects with it", function()
    assert.equal(201, (api(sim, "POST", "/api/v1/namespaces", { metadata = { name = "gone" } })))
    assert.equal(201, (api(sim, "POST", "/api/v1/namespaces/gone/configmaps",
      { metadata = { name = "x" } })))
    assert.equal(200, (api(sim, "DELETE", "/api/v1/namespaces/gone")))
    assert.equal(404, (api(sim, "GET", "/api/v1/namespaces/gone/configmaps/x")))
    local code, st = api(sim, "POST", "/api/v1/namespaces/gone/configmaps",
      { metadata = { name = "x" } })
    assert.equal(404, code)
    assert.equal('namespaces "gone" not found', st.message)
  end)

  it("answers a Service's delete with the Service, and counts a deletion in generation",
    function()
      local SVCS = "/api/v1/namespaces/default/services"
      local code, svc = api(sim, "POST", SVCS, { apiVersion = "v1", kind = "Service",
        metadata = { name = "gone" }, spec = { ports = { { port = 80 } } } })
      assert.equal(201, code)
      local gone
      code, gone = api(sim, "DELETE", SVCS .. "/gone")
      assert.equal(200, code)
      assert.same({ "Service", "gone", svc.metadata.uid }, { gone.kind, gone.metadata.name,
        gone.metadata.uid })
      assert.is_true(tonumber(gone.metadata.resourceVersion)
        > tonumber(svc.metadata.resourceVersion))
      -- an object with a generation that starts deleting is one generation on
      local DEPS = "/apis/apps/v1/namespaces/default/deployments"
      local dep
      code, dep = api(sim, "POST", DEPS, { apiVersion = "apps/v1", kind = "Deployment",
        metadata = { name = "held", finalizers = { "example.com/hold" } },
        spec = { selector = { matchLabels = { app = "h" } }, template = { metadata = {
          labels = { app = "h" } }, spec = { containers = { { name = "c", image = "i" } } } } } })
      assert.equal(201, code)
      assert.equal(1, dep.metadata.generation)
      code, dep = api(sim, "DELETE", DEPS .. "/held")
      assert.equal(200, code)
      assert.equal(2, dep.metadata.generation)
      code, dep = api(sim, "DELETE", DEPS .. "/held")
      assert.same({ 200, 2 }, { code, dep.metadata.generation })
      assert.equal(200, (api(sim, "PATCH", DEPS .. "/held", { metadata = { finalizers = json.null } },
        "application/merge-patch+json")))
    end)

  it("says what is wrong with a malformed patch in Go's decoder's words", function()
    assert.equal(201, (api(sim, "POST", CMS, { metadata = { name = "mp" } })))
    local function msg(body, ct)
      local code, st = api(sim, "PATCH", CMS .. "/mp", body, ct)
      assert.equal(400, code)
      return st.message
    end
    local MERGE, JSONP = "application/merge-patch+json", "application/json-patch+json"
    assert.equal("error decoding patch: unexpected end of JSON input",
      msg('{"metadata": {', MERGE))
    assert.equal("error decoding patch: invalid character 'x' looking for beginning of value",
      msg('{"a": x}', MERGE))
    assert.equal("error decoding patch: invalid character '}' after top-level value",
      msg('{"a":1}}', MERGE))
    assert.equal("error decoding patch: unexpected end of JSON input", msg('[{"op":', JSONP))
    assert.equal("unexpected end of JSON input",
      msg('{"metadata": {', "application/strategic-merge-patch+json"))
  end)

  it("refuses methods a resource does not have with 405", function()
    local code, st = api(sim, "POST", CMS .. "/s2", {})
    assert.equal(405, code)
    assert.equal("MethodNotAllowed", st.reason)
  end)

  it("serves the same objects in every served version of a CRD", function()
    local CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    local function version(name, storage)
      return { name = name, served = true, storage = storage,
        schema = { openAPIV3Schema = { type = "object",
          ["x-kubernetes-preserve-unknown-fields"] = true } } }
    end
    local code = api(sim, "POST", CRDS, { apiVersion = "apiextensions.k8s.io/v1",
      kind = "CustomResourceDefinition", metadata = { name = "gadgets.example.com" },
      spec = { group = "example.com", scope = "Namespaced", names = { plural = "gadgets",
        singular = "gadget", kind = "Gadget" },
        versions = { version("v1", true), version("v2", false) } } })
    assert.equal(201, code)
    H.established(sim, "gadgets.example.com")
    local V1 = "/apis/example.com/v1/namespaces/default/gadgets"
    local V2 = "/apis/example.com/v2/namespaces/default/gadgets"
    local g1
    code, g1 = api(sim, "POST", V1, { apiVersion = "example.com/v1", kind = "Gadget",
      metadata = { name = "g" }, spec = { n = 1 } })
    assert.equal(201, code)
    local _, list2 = api(sim, "GET", V2)
    -- a custom resource's list writes an empty continue, as the real server
    assert.same({ "continue", "resourceVersion" }, support.sorted_keys(list2.metadata))
    assert.equal("", list2.metadata.continue)
    local w = H.watch_start(sim, V2 .. "?watch=1&resourceVersion="
      .. list2.metadata.resourceVersion)
    H.wait_watches(sim, 1)
    local code2, g2 = api(sim, "GET", V2 .. "/g")
    assert.equal(200, code2)
    assert.same({ "example.com/v2", g1.metadata.uid, g1.metadata.resourceVersion, 1 },
      { g2.apiVersion, g2.metadata.uid, g2.metadata.resourceVersion, g2.spec.n })
    -- a write through either version is seen through both, watches included
    g2.spec.n = 2
    code, g2 = api(sim, "PUT", V2 .. "/g", g2)
    assert.equal(200, code)
    local _, again = api(sim, "GET", V1 .. "/g")
    assert.same({ "example.com/v1", 2, g2.metadata.resourceVersion },
      { again.apiVersion, again.spec.n, again.metadata.resourceVersion })
    assert.equal(200, (api(sim, "DELETE", V1 .. "/g")))
    local lines = H.watch_lines(w, 2)
    H.watch_stop(w)
    local seen = {}
    for i, l in ipairs(lines) do seen[i] = { l.type, l.object.apiVersion, l.object.spec.n } end
    assert.same({ { "MODIFIED", "example.com/v2", 2 }, { "DELETED", "example.com/v2", 2 } }, seen)
    assert.equal(404, (api(sim, "GET", V2 .. "/g")))
    -- server-side apply through one version: its managed fields, and so its
    -- conflicts, are every version's
    local APPLY = "application/apply-patch+yaml"
    local body = '{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"h"},'
      .. '"spec":{"size":3}}'
    assert.equal(201, (api(sim, "PATCH", V1 .. "/h?fieldManager=bob", body, APPLY)))
    local st
    code, st = api(sim, "PATCH", V2 .. "/h?fieldManager=carol",
      body:gsub("v1", "v2"):gsub("3", "4"), APPLY)
    assert.equal(409, code)
    assert.equal('Apply failed with 1 conflict: conflict with "bob": .spec.size', st.message)
    -- a version served later starts with the objects the others hold, even
    -- when the one that held them stops being served in the same change
    local crd = H.established(sim, "gadgets.example.com")
    crd.spec.versions = { version("v3", true) }
    crd.spec.versions[1].storage = true
    code = api(sim, "PUT", CRDS .. "/gadgets.example.com", crd)
    assert.equal(200, code)
    assert.equal(404, (api(sim, "GET", V1 .. "/h")))
    local _, h3 = api(sim, "GET", "/apis/example.com/v3/namespaces/default/gadgets/h")
    assert.same({ "example.com/v3", "h", 3 }, { h3.apiVersion, h3.metadata.name, h3.spec.size })
    -- and when no version serves them for a while
    crd = H.established(sim, "gadgets.example.com")
    crd.spec.versions[1].served = false
    assert.equal(200, (api(sim, "PUT", CRDS .. "/gadgets.example.com", crd)))
    crd = H.established(sim, "gadgets.example.com")
    crd.spec.versions[1].served = true
    assert.equal(200, (api(sim, "PUT", CRDS .. "/gadgets.example.com", crd)))
    assert.equal(200, (api(sim, "GET", "/apis/example.com/v3/namespaces/default/gadgets/h")))
    assert.equal(200, (api(sim, "DELETE", CRDS .. "/gadgets.example.com")))
  end)

  it("stops serving a CRD's resources once it is deleted", function()
    assert.equal(200, (api(sim, "GET", "/apis/example.com/v1")))
    assert.equal(200, (api(sim, "DELETE",
      "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")))
    local code, _, raw = api(sim, "GET", "/apis/example.com/v1/widgets")
    assert.equal(404, code)
    assert.equal("404 page not found\n", raw)
    local _, groups = api(sim, "GET", "/apis")
    for _, g in ipairs(groups.groups) do assert.not_equal("example.com", g.name) end
  end)
end)

describe("kubelua sim --load and TLS", function()
  it("seeds objects from a directory and serves https", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) ~= nil)
    local f = assert(io.open(dir .. "/01-cms.json", "w"))
    f:write(json.encode({ { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "seeded", namespace = "team" }, data = { a = "1" } } }))
    f:close()
    -- a dump of Services: the one every cluster has, and a load balancer's
    -- status, which stays as loaded
    f = assert(io.open(dir .. "/02-svcs.yaml", "w"))
    f:write([[
apiVersion: v1
kind: Service
metadata:
  name: kubernetes
  namespace: default
  labels:
    component: apiserver
spec:
  clusterIP: 10.96.0.1
  ports:
  - name: https
    port: 443
    protocol: TCP
    targetPort: 6443
---
apiVersion: v1
kind: Service
metadata:
  name: lb
  namespace: team
spec:
  type: LoadBalancer
  ports:
  - port: 80
status:
  loadBalancer:
    ingress:
    - ip: 192.0.2.10
]])
    f:close()
    local status, out = support.sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
      .. "/CN=localhost -keyout " .. dir .. "/key.pem -out " .. dir .. "/cert.pem")
    assert(status == 0, out)
    local sim = H.start("--load " .. dir .. " --tls-cert " .. dir .. "/cert.pem --tls-key "
      .. dir .. "/key.pem")
    local code, _, raw, cm = H.request(sim, "GET", "/api/v1/namespaces/team/configmaps/seeded",
      { curl = true })
    local _, _, _, lb = H.request(sim, "GET", "/api/v1/namespaces/team/services/lb",
      { curl = true })
    H.stop(sim)
    os.execute("rm -rf " .. dir)
    assert(code == 200, raw)
    assert.same({ a = "1" }, cm.data)
    assert.same({ loadBalancer = { ingress = { { ip = "192.0.2.10" } } } }, lb.status)
    assert.equal("number", type(lb.spec.ports[1].nodePort))
    assert.equal("https", sim.base:sub(1, 5))
  end)
end)

describe("kubelua sim command line", function()
  it("refuses unknown options with usage, status 2", function()
    local status, out = support.sh(support.kubelua .. " sim --listen 127.0.0.1:0 --bogus x")
    assert.equal(2, status)
    assert.matches("^kubelua sim: unknown option %-%-bogus\nusage: kubelua sim ", out)
  end)

  it("refuses a --history that is not a whole number of events, status 2", function()
    for _, v in ipairs { "0", "2.5", "lots" } do
      local status, out = support.sh(support.kubelua .. " sim --listen 127.0.0.1:0 --history " .. v)
      assert.equal(2, status)
      assert.matches("kubelua sim: %-%-history needs a whole number of events, at least 1, got "
        .. v .. "\n", out)
    end
  end)

  it("refuses a --load directory with a bad file, status 2", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. dir)
    local f = assert(io.open(dir .. "/bad.yaml", "w"))
    f:write("apiVersion: v1\nkind: Nothing\nmetadata:\n  name: x\n")
    f:close()
    local status, out = support.sh(support.kubelua .. " sim --listen 127.0.0.1:0 --load " .. dir)
    os.execute("rm -rf " .. dir)
    assert.equal(2, status)
    assert.matches("kubelua sim: %-%-load: bad.yaml: no resource for v1 Nothing", out)
  end)
end)
