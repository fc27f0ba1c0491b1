-- The simulator reads the protobuf bodies kubectl's generators send
-- (kubectl create namespace, configmap, secret, serviceaccount,
-- deployment, and kubectl run) as the
-- objects they encode, skips fields it does not know as the real decoder
-- does, and refuses the kinds it does not read with a 415 that says so.
-- Secrets, whatever their encoding, get stringData merged into data and
-- the type Opaque, as a real server does.
local H = require "spec.integration.sim_helper"
local json = require "kubelua.json"

local PB = { ["Content-Type"] = "application/vnd.kubernetes.protobuf",
  Accept = "application/vnd.kubernetes.protobuf,application/json" }

-- The kinds read from protobuf, as a 415 lists them.
local KINDS = "ConfigMap, Deployment, LocalSubjectAccessReview, Namespace, Pod, Secret, "
  .. "SelfSubjectAccessReview, SelfSubjectRulesReview, Service, ServiceAccount, "
  .. "SubjectAccessReview, TokenRequest"
local ffi = require "ffi"
local protobuf = require "kubelua.sim.protobuf"

-- A protobuf writer: varints (a negative one as its 64-bit two's
-- complement, ten bytes), and fields of wire types 0 and 2.
local function varint(n)
  local u, out = ffi.cast("uint64_t", ffi.cast("int64_t", n)), {}
  repeat
    local b = tonumber(u % 128ULL)
    u = u / 128ULL
    out[#out + 1] = string.char(u > 0ULL and b + 128 or b)
  until u == 0ULL
  return table.concat(out)
end

local function f(num, v) -- a length-delimited field, or a varint when v is a number
  if type(v) == "number" then return varint(num * 8) .. varint(v) end
  return varint(num * 8 + 2) .. varint(#v) .. v
end

local function entry(num, k, v) return f(num, f(1, k) .. f(2, v)) end

-- The envelope: runtime.Unknown { typeMeta { apiVersion, kind }, raw }.
local function envelope(api_version, kind, raw)
  return "k8s\0" .. f(1, f(1, api_version) .. f(2, kind)) .. f(2, raw)
end

-- ObjectMeta as gogo-protobuf writes a generator's: every plain field,
-- empty or not, and an empty creationTimestamp.
local function meta(name, namespace, extra)
  return f(1, f(1, name) .. f(2, "") .. f(3, namespace or "") .. f(4, "") .. f(5, "")
    .. f(6, "") .. f(7, 0) .. f(8, "") .. (extra or ""))
end

local function api(sim, method, path, body, headers) -- as kubectl
  return H.api(sim, method, path, body, headers,
    "kubectl/v1.32.4 (linux/amd64) kubernetes/59526cd")
end

describe("kubelua sim protobuf bodies", function()
  local sim
  setup(function() sim = H.start() end)
  teardown(function() H.stop(sim) end)

  it("creates a namespace, as kubectl create namespace sends it", function()
    local code, ns, raw = api(sim, "POST", "/api/v1/namespaces",
      envelope("v1", "Namespace", meta("pb") .. f(2, "") .. f(3, f(1, ""))), PB)
    assert.equal(201, code, raw)
    assert.same({ "pb", { ["kubernetes.io/metadata.name"] = "pb" }, { finalizers = { "kubernetes" } },
      { phase = "Active" } }, { ns.metadata.name, ns.metadata.labels, ns.spec, ns.status })
    assert.is_nil(ns.metadata.generateName)
  end)

  it("creates a ConfigMap with its labels, empty values and binary data", function()
    local body = envelope("v1", "ConfigMap",
      meta("cm", "pb", entry(11, "app", "web") .. f(14, "example.com/keep"))
      .. entry(2, "a", "b") .. entry(2, "empty", "") .. entry(3, "bin", "\0\255\1"))
    local code, cm, raw = api(sim, "POST", "/api/v1/namespaces/pb/configmaps", body, PB)
    assert.equal(201, code, raw)
    assert.same({ a = "b", empty = "" }, cm.data)
    assert.same({ bin = "AP8B" }, cm.binaryData)
    assert.same({ app = "web" }, cm.metadata.labels)
    assert.same({ "example.com/keep" }, cm.metadata.finalizers)
    assert.is_nil(cm.immutable)
  end)

  it("creates a Secret, base64 in data, stringData merged, Opaque by default", function()
    local body = envelope("v1", "Secret", meta("s", "pb") .. entry(2, "pw", "hunter2")
      .. entry(4, "user", "admin") .. f(3, "") .. f(5, 1))
    local code, s, raw = api(sim, "POST", "/api/v1/namespaces/pb/secrets", body, PB)
    assert.equal(201, code, raw)
    assert.same({ pw = "aHVudGVyMg==", user = "YWRtaW4=" }, s.data)
    assert.same({ "Opaque", true }, { s.type, s.immutable })
    assert.is_nil(s.stringData)
    -- stringData's keys win over data's; a null value is an empty one
    code, s = api(sim, "POST", "/api/v1/namespaces/pb/secrets", { metadata = { name = "m" },
      data = { a = "eA==", b = "eQ==" }, stringData = { a = "over", n = json.null } })
    assert.equal(201, code)
    assert.same({ a = "b3Zlcg==", b = "eQ==", n = "" }, s.data)
    -- and through server-side apply to a Secret that exists
    local _, _, raw2 = H.request(sim, "PATCH", "/api/v1/namespaces/pb/secrets/m?fieldManager=t",
      { body = '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"m"},'
        .. '"stringData":{"c":"z"}}', headers = { ["Content-Type"] = "application/apply-patch+yaml" } })
    s = json.decode(raw2)
    assert.same({ "eg==", true }, { s.data.c, s.stringData == nil })
    -- and as JSON: the same merge, and a type given stays
    code, s = api(sim, "POST", "/api/v1/namespaces/pb/secrets", { metadata = { name = "j" },
      type = "kubernetes.io/basic-auth", stringData = { username = "u", password = "p" } })
    assert.equal(201, code)
    assert.same({ { username = "dQ==", password = "cA==" }, "kubernetes.io/basic-auth" },
      { s.data, s.type })
    local _, got = api(sim, "GET", "/api/v1/namespaces/pb/secrets/j")
    assert.is_nil(got.stringData)
  end)

  it("creates a ServiceAccount, keeping a pointer field set to false", function()
    local body = envelope("v1", "ServiceAccount", meta("bot", "pb")
      .. f(2, f(3, "tok") .. f(2, "pb")) .. f(3, f(1, "reg")) .. f(4, 0))
    local code, sa, raw = api(sim, "POST", "/api/v1/namespaces/pb/serviceaccounts", body, PB)
    assert.equal(201, code, raw)
    assert.same({ { { name = "tok", namespace = "pb" } }, { { name = "reg" } }, false },
      { sa.secrets, sa.imagePullSecrets, sa.automountServiceAccountToken })
  end)

  it("skips fields it does not know, as the real decoder does", function()
    local body = envelope("v1", "ConfigMap", meta("skip", "pb", f(99, "x") .. f(98, 7))
      .. f(77, "junk") .. entry(2, "k", "v"))
    local code, cm, raw = api(sim, "POST", "/api/v1/namespaces/pb/configmaps", body, PB)
    assert.equal(201, code, raw)
    assert.same({ k = "v" }, cm.data)
  end)

  it("updates with a protobuf body too", function()
    local _, cm = api(sim, "GET", "/api/v1/namespaces/pb/configmaps/skip")
    local body = envelope("v1", "ConfigMap", meta("skip", "pb", f(6, cm.metadata.resourceVersion))
      .. entry(2, "k", "w"))
    local code, got, raw = api(sim, "PUT", "/api/v1/namespaces/pb/configmaps/skip", body, PB)
    assert.equal(200, code, raw)
    assert.same({ k = "w" }, got.data)
  end)

  -- A container as kubectl writes one: name, image, command, a port,
  -- an env var and empty resources (limits given: a Quantity map).
  local function container(name, extra)
    return f(1, name) .. f(2, "nginx") .. f(3, "sh") .. f(3, "-c") .. f(5, "")
      .. f(6, f(1, "") .. f(2, 0) .. f(3, 80) .. f(4, "") .. f(5, ""))
      .. f(7, f(1, "A") .. f(2, "b")) .. f(8, entry(1, "cpu", f(1, "500m")))
      .. f(13, "") .. f(14, "") .. f(16, 0) .. (extra or "")
  end

  it("creates a Deployment, as kubectl create deployment sends it", function()
    local labels = entry(11, "app", "web")
    local spec = f(1, 3) .. f(2, entry(1, "app", "web"))
      .. f(3, meta("", "", labels) .. f(2, f(2, container("nginx")) .. f(3, "")))
      .. f(4, f(1, "RollingUpdate") .. f(2, f(1, f(1, 1) .. f(3, "30%")) .. f(2, f(1, 0) .. f(2, 2))))
      .. f(5, 0) .. f(7, 0)
    local code, d, raw = api(sim, "POST", "/apis/apps/v1/namespaces/pb/deployments",
      envelope("apps/v1", "Deployment", meta("web", "pb", labels) .. f(2, spec) .. f(3, "")), PB)
    assert.equal(201, code, raw)
    local c = d.spec.template.spec.containers[1]
    assert.same({ 3, { matchLabels = { app = "web" } }, { type = "RollingUpdate",
      rollingUpdate = { maxUnavailable = "30%", maxSurge = 2 } } },
      { d.spec.replicas, d.spec.selector, d.spec.strategy })
    assert.same({ "nginx", "nginx", { "sh", "-c" }, { { containerPort = 80, protocol = "TCP" } },
      { { name = "A", value = "b" } }, { limits = { cpu = "500m" } } },
      { c.name, c.image, c.command, c.ports, c.env, c.resources })
    assert.same({ app = "web" }, d.spec.template.metadata.labels)
    assert.is_nil(d.spec.paused)
    -- an empty strategy (what the generator sends when none is given) is
    -- defaulted as a missing one, field by field, as SetDefaults_Deployment does
    local tmpl = { metadata = { labels = { app = "x" } }, spec = { containers = {
      { name = "c", image = "x" } } } }
    for i, strategy in ipairs { {}, { rollingUpdate = { maxSurge = 1 } },
      { type = json.null, rollingUpdate = { maxSurge = json.null } } } do
      code, d = api(sim, "POST", "/apis/apps/v1/namespaces/pb/deployments", { metadata = {
        name = "s" .. i }, spec = { selector = { matchLabels = { app = "x" } }, template = tmpl,
        strategy = strategy } })
      assert.equal(201, code)
      assert.same({ type = "RollingUpdate", rollingUpdate = { maxUnavailable = "25%",
        maxSurge = i == 2 and 1 or "25%" } }, d.spec.strategy)
    end
  end)

  it("creates a Pod, as a client set to protobuf sends it", function()
    local code, p, raw = api(sim, "POST", "/api/v1/namespaces/pb/pods", envelope("v1", "Pod",
      meta("run", "pb") .. f(2, f(2, container("run", f(18, 1))) .. f(3, "Never")
        .. f(4, 5) .. f(21, 0)) .. f(3, "")), PB)
    assert.equal(201, code, raw)
    assert.same({ "Never", 5, false, true }, { p.spec.restartPolicy,
      p.spec.terminationGracePeriodSeconds, p.spec.automountServiceAccountToken,
      p.spec.containers[1].tty })
    assert.is_nil(p.spec.containers[1].stdin)
  end)

  it("creates a Service, as kubectl create service sends it, filled in as a real one", function()
    local port = f(1, "80-8080") .. f(2, "TCP") .. f(3, 80) .. f(4, f(1, 0) .. f(2, 8080)
      .. f(3, "")) .. f(5, 0)
    local code, svc = api(sim, "POST", "/api/v1/namespaces/pb/services", envelope("v1", "Service",
      meta("api", "pb") .. f(2, f(1, port) .. entry(2, "app", "api") .. f(3, "") .. f(4, "ClusterIP")
        .. f(7, "") .. f(10, "") .. f(12, 0) .. f(13, 0)) .. f(3, f(1, ""))), PB)
    assert.equal(201, code)
    assert.same({ ports = { { name = "80-8080", protocol = "TCP", port = 80, targetPort = 8080 } },
      selector = { app = "api" }, clusterIP = svc.spec.clusterIP,
      clusterIPs = { svc.spec.clusterIP }, type = "ClusterIP", sessionAffinity = "None",
      ipFamilies = { "IPv4" }, ipFamilyPolicy = "SingleStack",
      internalTrafficPolicy = "Cluster" }, svc.spec)
  end)

  it("reads the access reviews of kubectl auth can-i", function()
    local attrs = f(1, "default") .. f(2, "get") .. f(3, "") .. f(4, "") .. f(5, "pods")
      .. f(6, "") .. f(7, "")
    local code, r = api(sim, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
      envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview",
        meta("") .. f(2, f(1, attrs)) .. f(3, f(1, 0) .. f(2, "") .. f(3, ""))), PB)
    assert.equal(201, code)
    assert.same({ { resourceAttributes = { namespace = "default", verb = "get",
      resource = "pods" } }, { allowed = true } }, { r.spec, r.status })
    code, r = api(sim, "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
      envelope("authorization.k8s.io/v1", "SelfSubjectRulesReview",
        meta("") .. f(2, f(1, "default")) .. f(3, f(3, 0))), PB)
    assert.equal(201, code)
    assert.same({ {}, false }, { r.spec, r.status.incomplete })
    -- a field newer than v1.26 (fieldSelector, 1.31) is skipped, as its
    -- decoder skips it
    code, r = api(sim, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
      envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview",
        meta("") .. f(2, f(1, attrs .. f(8, f(1, "spec.nodeName=n"))))), PB)
    assert.equal(201, code)
    assert.same({ resourceAttributes = { namespace = "default", verb = "get",
      resource = "pods" } }, r.spec)
  end)

  it("refuses a field of a Pod it does not read rather than losing it", function()
    local code, st = api(sim, "POST", "/api/v1/namespaces/pb/pods", envelope("v1", "Pod",
      meta("vol", "pb") .. f(2, f(1, f(1, "v")) .. f(2, container("c")))), PB)
    assert.equal(415, code)
    assert.equal("the body of the request was in an unknown format - accepted media types "
      .. "include: application/json, application/yaml (application/vnd.kubernetes.protobuf "
      .. "for " .. KINDS .. " only, not field 1 of PodSpec)", st.message)
    assert.equal(404, (api(sim, "GET", "/api/v1/namespaces/pb/pods/vol")))
  end)

  it("refuses kinds it does not read, and bodies that are not protobuf", function()
    local code, st = api(sim, "POST", "/apis/apps/v1/namespaces/pb/statefulsets",
      envelope("apps/v1", "StatefulSet", meta("db", "pb")), PB)
    assert.equal(415, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = "the body of the request was in an unknown format - accepted media types "
        .. "include: application/json, application/yaml (application/vnd.kubernetes.protobuf "
        .. "for " .. KINDS .. " only, not apps/v1/StatefulSet)", reason = "UnsupportedMediaType", code = 415 }, st)
    code, st = api(sim, "POST", "/api/v1/namespaces/pb/configmaps", '{"metadata":{}}', PB)
    assert.equal(400, code)
    assert.equal("the body does not start with k8s\\0", st.message)
    code, st = api(sim, "POST", "/api/v1/namespaces/pb/configmaps",
      "k8s\0" .. f(1, f(1, "v1") .. f(2, "ConfigMap")) .. "\18\5ab", PB)
    assert.equal(400, code)
    assert.equal("protobuf: truncated field 2", st.message)
    code, st = api(sim, "POST", "/api/v1/namespaces/pb/configmaps",
      "k8s\0" .. f(1, f(1, "v1") .. f(2, "ConfigMap")) .. "\18\200", PB)
    assert.equal(400, code)
    assert.equal("protobuf: truncated varint", st.message)
    -- fields of the wrong wire type, a varint too long: 400s naming them
    local function bad(kind, raw, msg)
      local c, s2 = api(sim, "POST", "/api/v1/namespaces/pb/configmaps",
        envelope("v1", kind, raw), PB)
      assert.same({ 400, msg }, { c, s2.message })
    end
    bad("ConfigMap", f(1, f(1, "x") .. f(11, f(1, 5) .. f(2, "v"))),
      "protobuf: field 1 of ObjectMeta.labels key has wire type 0")
    bad("ConfigMap", f(1, f(1, "x")) .. f(3, f(1, "k") .. f(2, 7)),
      "protobuf: field 2 of ConfigMap.binaryData value has wire type 0")
    bad("ConfigMap", f(1, f(1, "x") .. f(8, f(1, "soon"))),
      "protobuf: field 1 of Time has wire type 2")
    bad("ConfigMap", f(1, f(1, "x") .. "\56" .. ("\255"):rep(10) .. "\1"),
      "protobuf: varint longer than 10 bytes")
    bad("ConfigMap", f(1, f(1, "x")) .. "\33" .. ("\0"):rep(8),
      "protobuf: field 4 of ConfigMap has wire type 1")
    assert.same({}, select(2, api(sim, "GET", "/api/v1/namespaces/pb/configmaps?"
      .. "fieldSelector=metadata.name%3Dx")).items)
    -- a security context that is not empty: refused, not dropped
    code, st = api(sim, "POST", "/api/v1/namespaces/pb/pods", envelope("v1", "Pod",
      meta("sc", "pb") .. f(2, f(2, container("c")) .. f(14, f(5, 1000)))), PB)
    assert.same({ 415, true }, { code,
      st.message:find("not field 5 of PodSecurityContext)", 1, true) ~= nil })
    -- the status subresource reads JSON only
    code, st = api(sim, "PUT", "/api/v1/namespaces/pb/pods/run/status", envelope("v1", "Pod",
      meta("run", "pb") .. f(3, f(1, "Running"))), PB)
    assert.same({ 415, "the body of the request was in an unknown format - accepted media types "
      .. "include: application/json, application/yaml (application/vnd.kubernetes.protobuf for "
      .. "objects, not their status)" }, { code, st.message })
  end)

  it("issues a token for a TokenRequest, as kubectl create token sends it", function()
    local code, tr, raw = api(sim, "POST", "/api/v1/namespaces/default/serviceaccounts/default/"
      .. "token", envelope("authentication.k8s.io/v1", "TokenRequest", meta("", "")
        .. f(2, f(1, "aud") .. f(4, 7200))), PB)
    assert.equal(201, code, raw)
    assert.same({ { "aud" }, 7200, "default" }, { tr.spec.audiences, tr.spec.expirationSeconds,
      tr.metadata.name })
    assert.matches("^[%w_-]+%.[%w_-]+%.[%w_-]+$", tr.status.token)
  end)

  it("reads negative and 64-bit varints as the Go types they were written from", function()
    local obj = assert(protobuf.decode(envelope("apps/v1", "Deployment", meta("n", "pb")
      .. f(2, f(1, -1) .. f(5, 2 ^ 32 + 3)) .. "")))
    assert.same({ -1, 3 }, { obj.spec.replicas, obj.spec.minReadySeconds })
    obj = assert(protobuf.decode(envelope("v1", "Pod", meta("n", "pb", f(10, -30))
      .. f(2, f(4, 2 ^ 40)))))
    assert.same({ -30, 2 ^ 40 }, { obj.metadata.deletionGracePeriodSeconds,
      obj.spec.terminationGracePeriodSeconds })
  end)
end)
