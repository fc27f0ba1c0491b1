-- What the simulator fills in when it stores a Pod, a workload's pod
-- template or a Job, as kube-apiserver 1.26 does (the differential suite
-- compares the same creates with a real server's answers): volume modes,
-- probes, fieldRefs, requests from limits, admission's tolerations and
-- priority, a Pod's first status, a Job's defaults and generated selector.
local testing = require "kubelua.testing"

local function volumes()
  return { { name = "cm", configMap = { name = "x" } },
    { name = "secret", secret = { secretName = "y", defaultMode = 256 } },
    { name = "projected", projected = { sources = { { downwardAPI = { items = {
      { path = "n", fieldRef = { fieldPath = "metadata.name" } } } } } } } },
    { name = "downward", downwardAPI = { items = { { path = "l", fieldRef = {
      fieldPath = "metadata.labels" } } } } },
    { name = "host", hostPath = { path = "/x" } } }
end

local function container()
  return { name = "c", image = "nginx", readinessProbe = { httpGet = { port = 80 } },
    env = { { name = "N", valueFrom = { fieldRef = { fieldPath = "metadata.name" } } } },
    resources = { limits = { cpu = "1", memory = "1Gi" }, requests = { cpu = "500m" } } }
end

describe("kubelua sim workloads: defaults", function()
  local t
  before_each(function()
    t = testing.start{ namespaces = { "demo" }, controllers = false }
  end)
  after_each(function() t:stop() end)

  it("defaults a Pod's volumes, probes, fieldRefs and requests; admission adds the rest",
      function()
    local p = t:create{ apiVersion = "v1", kind = "Pod", metadata = { name = "p",
      namespace = "demo" }, spec = { containers = { container() }, volumes = volumes() } }
    local v = p.spec.volumes
    assert.same({ 420, 256, 420, 420, "" }, { v[1].configMap.defaultMode,
      v[2].secret.defaultMode, v[3].projected.defaultMode, v[4].downwardAPI.defaultMode,
      v[5].hostPath.type })
    assert.equal("v1", v[3].projected.sources[1].downwardAPI.items[1].fieldRef.apiVersion)
    local c = p.spec.containers[1]
    assert.same({ timeoutSeconds = 1, periodSeconds = 10, successThreshold = 1,
      failureThreshold = 3, httpGet = { path = "/", port = 80, scheme = "HTTP" } },
      c.readinessProbe)
    assert.equal("v1", c.env[1].valueFrom.fieldRef.apiVersion)
    assert.same({ cpu = "500m", memory = "1Gi" }, c.resources.requests)
    assert.same({ true, 0, "PreemptLowerPriority" }, { p.spec.enableServiceLinks,
      p.spec.priority, p.spec.preemptionPolicy })
    assert.same({
      { key = "node.kubernetes.io/not-ready", operator = "Exists", effect = "NoExecute",
        tolerationSeconds = 300 },
      { key = "node.kubernetes.io/unreachable", operator = "Exists", effect = "NoExecute",
        tolerationSeconds = 300 } }, p.spec.tolerations)
    assert.same({ phase = "Pending", qosClass = "Burstable" }, p.status)
    -- admission's fields are no manager's
    local owned = p.metadata.managedFields[1].fieldsV1["f:spec"]
    assert.same({ nil, nil, nil, {} }, { owned["f:tolerations"], owned["f:priority"],
      owned["f:preemptionPolicy"], owned["f:enableServiceLinks"] })
  end)

  it("keeps a Pod's own toleration of not-ready and gives it the QoS class of its resources",
      function()
    local own = { key = "node.kubernetes.io/not-ready", operator = "Exists" }
    local p = t:create{ apiVersion = "v1", kind = "Pod", metadata = { name = "p",
      namespace = "demo" }, spec = { tolerations = { own }, containers = { { name = "c",
        image = "nginx", resources = { limits = { cpu = "1", memory = "1Gi" } } } } } }
    assert.same({ own, { key = "node.kubernetes.io/unreachable", operator = "Exists",
      effect = "NoExecute", tolerationSeconds = 300 } }, p.spec.tolerations)
    assert.equal("Guaranteed", p.status.qosClass)
    local b = t:create{ apiVersion = "v1", kind = "Pod", metadata = { name = "b",
      namespace = "demo" }, spec = { containers = { { name = "c", image = "nginx" } } } }
    assert.equal("BestEffort", b.status.qosClass)
  end)

  it("defaults a Deployment's pod template without admission's fields", function()
    local d = t:create{ apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "d",
      namespace = "demo" }, spec = { selector = { matchLabels = { app = "d" } }, template = {
        metadata = { labels = { app = "d" } }, spec = { containers = { container() },
          volumes = volumes() } } } }
    local spec = d.spec.template.spec
    assert.equal(420, spec.volumes[1].configMap.defaultMode)
    assert.equal("/", spec.containers[1].readinessProbe.httpGet.path)
    assert.same({ cpu = "500m" }, spec.containers[1].resources.requests)
    assert.same({ nil, nil, nil }, { spec.tolerations, spec.priority, spec.enableServiceLinks })
  end)

  it("defaults a Job and generates its selector and labels from its uid", function()
    local j = t:create{ apiVersion = "batch/v1", kind = "Job", metadata = { name = "j",
      namespace = "demo" }, spec = { template = { spec = { restartPolicy = "Never",
        containers = { { name = "c", image = "busybox" } }, volumes = volumes() } } } }
    local uid = j.metadata.uid
    assert.same({ 1, 1, 6, "NonIndexed", false }, { j.spec.completions, j.spec.parallelism,
      j.spec.backoffLimit, j.spec.completionMode, j.spec.suspend })
    assert.same({ matchLabels = { ["controller-uid"] = uid } }, j.spec.selector)
    assert.same({ ["controller-uid"] = uid, ["job-name"] = "j" }, j.spec.template.metadata.labels)
    assert.same({ ["controller-uid"] = uid, ["job-name"] = "j" }, j.metadata.labels)
    assert.same({ ["batch.kubernetes.io/job-tracking"] = "" }, j.metadata.annotations)
    local spec = j.spec.template.spec
    assert.same({ 420, "ClusterFirst", "File" }, { spec.volumes[1].configMap.defaultMode,
      spec.dnsPolicy, spec.containers[1].terminationMessagePolicy })
    assert.same({}, j.status)
  end)

  it("keeps a Job's own labels and a manual selector", function()
    local j = t:create{ apiVersion = "batch/v1", kind = "Job", metadata = { name = "m",
      namespace = "demo", labels = { team = "a" } }, spec = { manualSelector = true,
        selector = { matchLabels = { app = "m" } }, completions = 3, template = {
          metadata = { labels = { app = "m" } }, spec = { restartPolicy = "Never",
            containers = { { name = "c", image = "busybox" } } } } } }
    assert.same({ team = "a" }, j.metadata.labels)
    assert.same({ matchLabels = { app = "m" } }, j.spec.selector)
    assert.same({ app = "m" }, j.spec.template.metadata.labels)
    assert.same({ 3, 1 }, { j.spec.completions, j.spec.parallelism })
  end)
end)
