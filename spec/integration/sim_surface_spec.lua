-- The simulator serves the whole built-in API of kube-apiserver v1.26, as
-- captured in spec/fixtures/apiserver/surface: the discovery documents
-- byte for byte, and every kind created from a minimal valid object, read
-- back, listed and deleted.
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"

local DIR = "spec/fixtures/apiserver/surface/discovery/"

local read = require("spec.support").read

local compact = H.compact

-- A client that is not curl gets the compact JSON the real server sends.
local UA = "kubectl/v1.26.1 (linux/amd64) kubernetes/8f94681"

local function get_raw(sim, path)
  local code, h, raw = H.request(sim, "GET", path, { user_agent = UA })
  return code, raw, h
end

local function ls(dir)
  local p = io.popen("ls " .. dir)
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

-- A minimal valid object of each kind the surface serves with create and
-- get, by "group/version/resource" ("v1/pods" for the core group).
local pod_spec = { containers = json.array { { name = "c", image = "nginx" } } }
local selector = { matchLabels = { app = "a" } }
local template = { metadata = { labels = { app = "a" } }, spec = pod_spec }
local subjects = json.array { { kind = "User", name = "alice",
  apiGroup = "rbac.authorization.k8s.io" } }
local role_ref = { apiGroup = "rbac.authorization.k8s.io", kind = "ClusterRole", name = "view" }
local webhook = { name = "w.example.com", sideEffects = "None",
  admissionReviewVersions = json.array { "v1" },
  clientConfig = { url = "https://127.0.0.1:9443/hook" } }
local hpa_v2 = { scaleTargetRef = { apiVersion = "apps/v1", kind = "Deployment", name = "d" },
  maxReplicas = 3 }
local flow_schema = { priorityLevelConfiguration = { name = "exempt" } }
local priority_level = { type = "Exempt" }
local capacity = { storageClassName = "standard" }

local minimal = {
  ["v1/componentstatuses"] = false, -- get and list only: the server's own health
  ["v1/configmaps"] = { data = { a = "1" } },
  ["v1/endpoints"] = {},
  ["v1/events"] = { involvedObject = { kind = "Pod", name = "p", namespace = "default" } },
  ["v1/limitranges"] = { spec = { limits = json.array { { type = "Container",
    default = { cpu = "100m" } } } } },
  ["v1/namespaces"] = {},
  ["v1/nodes"] = {},
  ["v1/persistentvolumeclaims"] = { spec = { accessModes = json.array { "ReadWriteOnce" },
    resources = { requests = { storage = "1Gi" } } } },
  ["v1/persistentvolumes"] = { spec = { capacity = { storage = "1Gi" },
    accessModes = json.array { "ReadWriteOnce" }, hostPath = { path = "/tmp/pv" } } },
  ["v1/pods"] = { spec = pod_spec },
  ["v1/podtemplates"] = { template = template },
  ["v1/replicationcontrollers"] = { spec = { selector = { app = "a" }, template = template } },
  ["v1/resourcequotas"] = { spec = { hard = { pods = "10" } } },
  ["v1/secrets"] = { stringData = { a = "1" } },
  ["v1/serviceaccounts"] = {},
  ["v1/services"] = { spec = { ports = json.array { { port = 80 } } } },
  ["apiregistration.k8s.io/v1/apiservices"] = { name = "v1.example.com",
    spec = { group = "example.com", version = "v1", groupPriorityMinimum = 100,
      versionPriority = 10, service = { namespace = "default", name = "api" } } },
  ["apps/v1/controllerrevisions"] = { revision = 1 },
  ["apps/v1/daemonsets"] = { spec = { selector = selector, template = template } },
  ["apps/v1/deployments"] = { spec = { selector = selector, template = template } },
  ["apps/v1/replicasets"] = { spec = { selector = selector, template = template } },
  ["apps/v1/statefulsets"] = { spec = { selector = selector, template = template,
    serviceName = "s" } },
  ["events.k8s.io/v1/events"] = { eventTime = "2026-01-01T00:00:00.000000Z",
    reportingController = "example.com/c", reportingInstance = "c-1", action = "Sync",
    reason = "Synced", regarding = { kind = "Pod", name = "p", namespace = "default" },
    type = "Normal" },
  ["autoscaling/v2/horizontalpodautoscalers"] = { spec = hpa_v2 },
  ["autoscaling/v1/horizontalpodautoscalers"] = { spec = hpa_v2 },
  ["batch/v1/cronjobs"] = { spec = { schedule = "*/5 * * * *", jobTemplate = { spec = {
    template = { spec = { containers = pod_spec.containers, restartPolicy = "Never" } } } } } },
  ["batch/v1/jobs"] = { spec = { template = { spec = { containers = pod_spec.containers,
    restartPolicy = "Never" } } } },
  ["certificates.k8s.io/v1/certificatesigningrequests"] = { spec = {
    request = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K",
    signerName = "example.com/signer", usages = json.array { "digital signature" } } },
  ["networking.k8s.io/v1/ingressclasses"] = { spec = { controller = "example.com/ingress" } },
  ["networking.k8s.io/v1/ingresses"] = { spec = { defaultBackend = { service = { name = "s",
    port = { number = 80 } } } } },
  ["networking.k8s.io/v1/networkpolicies"] = { spec = { podSelector = {} } },
  ["policy/v1/poddisruptionbudgets"] = { spec = { selector = selector, minAvailable = 1 } },
  ["rbac.authorization.k8s.io/v1/clusterrolebindings"] = { subjects = subjects,
    roleRef = role_ref },
  ["rbac.authorization.k8s.io/v1/clusterroles"] = { rules = json.array { {
    apiGroups = json.array { "" }, resources = json.array { "pods" },
    verbs = json.array { "get" } } } },
  ["rbac.authorization.k8s.io/v1/rolebindings"] = { subjects = subjects, roleRef = role_ref },
  ["rbac.authorization.k8s.io/v1/roles"] = { rules = json.array {} },
  ["storage.k8s.io/v1/csidrivers"] = { name = "csi.example.com", spec = {} },
  ["storage.k8s.io/v1/csinodes"] = { spec = { drivers = json.array {} } },
  ["storage.k8s.io/v1/csistoragecapacities"] = capacity,
  ["storage.k8s.io/v1/storageclasses"] = { provisioner = "example.com/p" },
  ["storage.k8s.io/v1/volumeattachments"] = { spec = { attacher = "csi.example.com",
    nodeName = "n1", source = { persistentVolumeName = "pv1" } } },
  ["storage.k8s.io/v1beta1/csistoragecapacities"] = capacity,
  ["admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"] = {
    webhooks = json.array { webhook } },
  ["admissionregistration.k8s.io/v1/validatingwebhookconfigurations"] = {
    webhooks = json.array { webhook } },
  ["apiextensions.k8s.io/v1/customresourcedefinitions"] = { name = "widgets.example.com",
    spec = { group = "example.com", scope = "Namespaced", names = { plural = "widgets",
      singular = "widget", kind = "Widget", listKind = "WidgetList" },
      versions = json.array { { name = "v1", served = true, storage = true,
        schema = { openAPIV3Schema = { type = "object",
          ["x-kubernetes-preserve-unknown-fields"] = true } } } } } },
  ["scheduling.k8s.io/v1/priorityclasses"] = { value = 1000 },
  ["coordination.k8s.io/v1/leases"] = { spec = { holderIdentity = "h" } },
  ["node.k8s.io/v1/runtimeclasses"] = { handler = "runc" },
  ["discovery.k8s.io/v1/endpointslices"] = { addressType = "IPv4",
    endpoints = json.array { { addresses = json.array { "10.0.0.1" } } } },
  ["flowcontrol.apiserver.k8s.io/v1beta3/flowschemas"] = { spec = flow_schema },
  ["flowcontrol.apiserver.k8s.io/v1beta3/prioritylevelconfigurations"] = {
    spec = priority_level },
  ["flowcontrol.apiserver.k8s.io/v1beta2/flowschemas"] = { spec = flow_schema },
  ["flowcontrol.apiserver.k8s.io/v1beta2/prioritylevelconfigurations"] = {
    spec = priority_level },
}

-- The kinds whose only verb is create: answered, not stored.
local create_only = { ["v1/bindings"] = true, ["authentication.k8s.io/v1/tokenreviews"] = true,
  ["authorization.k8s.io/v1/localsubjectaccessreviews"] = true,
  ["authorization.k8s.io/v1/selfsubjectaccessreviews"] = true,
  ["authorization.k8s.io/v1/selfsubjectrulesreviews"] = true,
  ["authorization.k8s.io/v1/subjectaccessreviews"] = true }

describe("kubelua sim serves the built-in API surface of kube-apiserver v1.26", function()
  local sim
  setup(function() sim = H.start() end)
  teardown(function() H.stop(sim) end)

  it("serves /apis and every group version's discovery as captured, byte for byte", function()
    local files = ls(DIR)
    assert.equal(25, #files) -- api.json, apis.json and the 23 group versions
    local code, raw = get_raw(sim, "/apis")
    assert.equal(200, code)
    assert.equal(compact(read(DIR .. "apis.json")) .. "\n", raw)
    local n = 0
    for _, f in ipairs(files) do
      local path = f:match("^(api_v1)%.json$") and "/api/v1"
        or f:match("^apis_(.+)%.json$") and "/apis/" .. f:match("^apis_(.+)_([^_]+)%.json$")
          .. "/" .. f:match("_([^_]+)%.json$")
      if f ~= "apis.json" and path then
        code, raw = get_raw(sim, path)
        assert.equal(200, code, path)
        assert.equal(compact(read(DIR .. f)) .. "\n", raw, path)
        n = n + 1
      end
    end
    assert.equal(23, n)
  end)

  it("serves each group as the real server's APIGroup", function()
    local code, raw = get_raw(sim, "/apis/autoscaling")
    assert.equal(200, code)
    assert.equal('{"kind":"APIGroup","apiVersion":"v1","name":"autoscaling","versions":['
      .. '{"groupVersion":"autoscaling/v2","version":"v2"},{"groupVersion":"autoscaling/v1",'
      .. '"version":"v1"}],"preferredVersion":{"groupVersion":"autoscaling/v2",'
      .. '"version":"v2"}}\n', raw)
  end)

  it("creates every kind from a minimal valid object and reads it back", function()
    local apis = json.decode(read(DIR .. "apis.json"))
    local gvs = { "v1" }
    for _, g in ipairs(apis.groups) do
      for _, v in ipairs(g.versions) do gvs[#gvs + 1] = v.groupVersion end
    end
    local served = 0
    for _, gv in ipairs(gvs) do
      local file = gv == "v1" and "api_v1.json" or "apis_" .. gv:gsub("/", "_") .. ".json"
      local list = json.decode(read(DIR .. file))
      local prefix = gv == "v1" and "/api/v1" or "/apis/" .. gv
      for _, e in ipairs(list.resources) do
        local key = gv .. "/" .. e.name
        if not e.name:find("/", 1, true) and not create_only[key] then
          local body = minimal[key]
          assert(body ~= nil, "no minimal object for " .. key)
          local verbs = {}
          for _, v in ipairs(e.verbs) do verbs[v] = true end
          if body then
            assert(verbs.create and verbs.get and verbs.list and verbs.delete, key)
            local obj = json.decode(json.encode(body))
            local name = obj.name or "min-" .. e.name:sub(1, 20)
            obj.name = nil
            obj.apiVersion, obj.kind = gv, e.kind
            obj.metadata = { name = name }
            local base = prefix .. (e.namespaced and "/namespaces/default/" or "/") .. e.name
            local code, got, raw = H.api(sim, "POST", base, obj)
            assert.equal(201, code, key .. ": " .. tostring(raw))
            assert.equal(e.kind, got.kind, key)
            assert.equal(gv, got.apiVersion, key)
            code, got, raw = H.api(sim, "GET", base .. "/" .. name)
            assert.equal(200, code, key .. ": " .. tostring(raw))
            assert.equal(name, got.metadata.name, key)
            assert.equal(e.kind, got.kind, key)
            code, got = H.api(sim, "GET", base .. "?fieldSelector=metadata.name%3D" .. name)
            assert.equal(200, code, key)
            assert.equal(e.kind .. "List", got.kind, key)
            assert.same({ name }, H.names(got), key)
            code, _, raw = H.api(sim, "DELETE", base .. "/" .. name)
            assert.equal(200, code, key .. ": " .. tostring(raw))
            served = served + 1
          else
            assert.is_nil(verbs.create, key)
          end
        end
      end
    end
    assert.equal(52, served)
  end)

  describe("CustomResourceDefinition validation", function()
    local function crd(name, group, names)
      return { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
        metadata = { name = name }, spec = { group = group, scope = "Namespaced", names = names,
          versions = json.array { { name = "v1", served = true, storage = true,
            schema = { openAPIV3Schema = { type = "object" } } } } } }
    end
    local path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

    it("answers 422 when the name is not <plural>.<group> and the group is empty", function()
      local code, st = H.api(sim, "POST", path, crd("wrongname", "", { plural = "gadgets",
        singular = "gadget", kind = "Gadget" }))
      assert.equal(422, code)
      assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
        reason = "Invalid", code = 422,
        message = 'CustomResourceDefinition.apiextensions.k8s.io "wrongname" is invalid: '
          .. '[metadata.name: Invalid value: "wrongname": must be spec.names.plural+"."+'
          .. 'spec.group, spec.group: Required value]',
        details = { name = "wrongname", group = "apiextensions.k8s.io",
          kind = "CustomResourceDefinition", causes = {
            { reason = "FieldValueInvalid", field = "metadata.name",
              message = 'Invalid value: "wrongname": must be spec.names.plural+"."+spec.group' },
            { reason = "FieldValueRequired", field = "spec.group",
              message = "Required value" } } } }, st)
      code = H.api(sim, "GET", path .. "/wrongname")
      assert.equal(404, code)
    end)

    it("answers 422 for a group without a dot and names that are not DNS-1035 labels",
        function()
      local code, st = H.api(sim, "POST", path, crd("x.example", "example",
        { plural = "Gadgets", singular = "gadget", kind = "Gad_get" }))
      assert.equal(422, code)
      local label = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
        .. "start with an alphabetic character, and end with an alphanumeric character (e.g. "
        .. "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
      assert.equal('CustomResourceDefinition.apiextensions.k8s.io "x.example" is invalid: '
        .. '[metadata.name: Invalid value: "x.example": must be spec.names.plural+"."+spec.group, '
        .. 'spec.group: Invalid value: "example": should be a domain with at least one dot, '
        .. 'spec.names.plural: Invalid value: "Gadgets": ' .. label .. ", "
        .. 'spec.names.kind: Invalid value: "Gad_get": may have mixed case, but should '
        .. "otherwise match: " .. label .. ", "
        .. 'spec.names.listKind: Invalid value: "Gad_getList": may have mixed case, but should '
        .. "otherwise match: " .. label .. "]", st.message)
    end)

    it("accepts <plural>.<group>", function()
      local code, _, raw = H.api(sim, "POST", path, crd("gadgets.example.com", "example.com",
        { plural = "gadgets", singular = "gadget", kind = "Gadget" }))
      assert.equal(201, code, raw)
    end)
  end)

  describe("decoding from each kind's schema", function()
    local deploy = "/apis/apps/v1/namespaces/default/deployments"
    local function deployment(name, extra)
      return { apiVersion = "apps/v1", kind = "Deployment",
        metadata = { name = name, bogus = "x" }, spec = { replicas = extra or 1,
          selector = { matchLabels = { app = "a" } }, template = { metadata = {
            labels = { app = "a" } }, spec = { containers = json.array { { name = "c",
              image = "nginx", foo = 1 } } } } } }
    end

    it("refuses a value of the wrong type as the decoder does, whatever fieldValidation",
        function()
      for _, fv in ipairs { "", "?fieldValidation=Strict", "?fieldValidation=Warn",
          "?fieldValidation=Ignore" } do
        local code, st = H.api(sim, "POST", "/api/v1/namespaces/default/configmaps" .. fv,
          { apiVersion = "v1", kind = "ConfigMap", metadata = { name = "typed" },
            data = { x = 1 } })
        assert.equal(400, code, fv)
        assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
          reason = "BadRequest", code = 400, message = 'ConfigMap in version "v1" cannot be '
            .. "handled as a ConfigMap: json: cannot unmarshal number into Go struct field "
            .. "ConfigMap.data of type string" }, st)
      end
      local code, st = H.api(sim, "POST", deploy, deployment("typed", "3"))
      assert.equal(400, code)
      assert.equal('Deployment in version "v1" cannot be handled as a Deployment: json: cannot '
        .. "unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32",
        st.message)
      code, st = H.api(sim, "POST", "/apis/batch/v1/namespaces/default/jobs", {
        apiVersion = "batch/v1", kind = "Job", metadata = { name = "typed" },
        spec = { backoffLimit = 1.5, template = { spec = { restartPolicy = "Never",
          containers = "c" } } } })
      assert.equal(400, code)
      assert.equal('Job in version "v1" cannot be handled as a Job: json: cannot unmarshal '
        .. "number 1.5 into Go struct field JobSpec.spec.backoffLimit of type int32", st.message)
      assert.equal(404, (H.api(sim, "GET", "/api/v1/namespaces/default/configmaps/typed")))
    end)

    it("finds unknown fields at any depth: Strict refuses, Warn warns, Ignore drops", function()
      local code, st = H.api(sim, "POST", deploy .. "?fieldValidation=Strict",
        deployment("strict"))
      assert.equal(400, code)
      assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
        reason = "BadRequest", code = 400, message = 'Deployment in version "v1" cannot be '
          .. 'handled as a Deployment: strict decoding error: unknown field "metadata.bogus", '
          .. 'unknown field "spec.template.spec.containers[0].foo"' }, st)
      local h, got, raw
      code, h, raw, got = H.request(sim, "POST", deploy .. "?fieldValidation=Warn",
        { body = deployment("warn") })
      assert.equal(201, code, raw)
      assert.equal('299 - "unknown field \\"metadata.bogus\\"", 299 - "unknown field '
        .. '\\"spec.template.spec.containers[0].foo\\""', h.warning)
      assert.is_nil(got.metadata.bogus)
      assert.is_nil(got.spec.template.spec.containers[1].foo)
      code, h, raw, got = H.request(sim, "POST", deploy .. "?fieldValidation=Ignore",
        { body = deployment("ignore") })
      assert.equal(201, code, raw)
      assert.is_nil(h.warning)
      assert.is_nil(got.spec.template.spec.containers[1].foo)
      -- a kind the simulator has no code of its own for
      code, h, raw = H.request(sim, "POST", "/apis/policy/v1/namespaces/default/"
        .. "poddisruptionbudgets", { body = { apiVersion = "policy/v1",
          kind = "PodDisruptionBudget", metadata = { name = "pdb" }, spec = { minAvailable = 1,
            maxSurprise = 2 } } })
      assert.equal(201, code, raw)
      assert.equal('299 - "unknown field \\"spec.maxSurprise\\""', h.warning)
    end)
  end)

  it("serves a kind stored once through both its versions", function()
    local v1 = "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities"
    local beta = "/apis/storage.k8s.io/v1beta1/namespaces/default/csistoragecapacities"
    local code, _, raw = H.api(sim, "POST", v1, { apiVersion = "storage.k8s.io/v1",
      kind = "CSIStorageCapacity", metadata = { name = "cap" }, storageClassName = "fast" })
    assert.equal(201, code, raw)
    local got
    code, got = H.api(sim, "GET", beta .. "/cap")
    assert.equal(200, code)
    assert.same({ "storage.k8s.io/v1beta1", "fast" }, { got.apiVersion, got.storageClassName })
    assert.equal(200, (H.api(sim, "DELETE", beta .. "/cap")))
    assert.equal(404, (H.api(sim, "GET", v1 .. "/cap")))
    -- the limited shares under each version's name
    local fc = "/apis/flowcontrol.apiserver.k8s.io/"
    code, _, raw = H.api(sim, "POST", fc .. "v1beta2/prioritylevelconfigurations", {
      apiVersion = "flowcontrol.apiserver.k8s.io/v1beta2", kind = "PriorityLevelConfiguration",
      metadata = { name = "pl" }, spec = { type = "Limited", limited = {
        assuredConcurrencyShares = 5, limitResponse = { type = "Reject" } } } })
    assert.equal(201, code, raw)
    code, got = H.api(sim, "GET", fc .. "v1beta3/prioritylevelconfigurations/pl")
    assert.equal(200, code)
    assert.same({ nominalConcurrencyShares = 5, limitResponse = { type = "Reject" } },
      got.spec.limited)
    code, got = H.api(sim, "GET", fc .. "v1beta2/prioritylevelconfigurations/pl")
    assert.equal(200, code)
    assert.same({ assuredConcurrencyShares = 5, limitResponse = { type = "Reject" } },
      got.spec.limited)
  end)

  it("scales a ReplicationController, its selector a map of labels", function()
    local rcs = "/api/v1/namespaces/default/replicationcontrollers"
    local code, _, raw = H.api(sim, "POST", rcs, { apiVersion = "v1",
      kind = "ReplicationController", metadata = { name = "rc" }, spec = { replicas = 2,
        selector = { app = "a", tier = "web" }, template = { metadata = { labels = {
          app = "a", tier = "web" } }, spec = pod_spec } } })
    assert.equal(201, code, raw)
    local got
    code, got = H.api(sim, "GET", rcs .. "/rc/scale")
    assert.equal(200, code)
    assert.same({ "Scale", { replicas = 2 }, { replicas = 0, selector = "app=a,tier=web" } },
      { got.kind, got.spec, got.status })
  end)
end)
