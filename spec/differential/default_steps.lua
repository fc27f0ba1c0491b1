-- Creates of minimal objects whose answers show what the server fills in
-- on its own: a Pod (container, probe and volume defaults, admission's
-- tolerations and priority, its first status, requests copied from
-- limits), the same pod spec in a Deployment's, a DaemonSet's, a Job's
-- and a CronJob's template (no admission there), a Job's generated
-- selector and labels, Indexed or not.
local _M = {}

local NS = "/api/v1/namespaces/default"
local APPS = "/apis/apps/v1/namespaces/default"
local BATCH = "/apis/batch/v1/namespaces/default"

local function pod_spec()
  return {
    containers = { {
      name = "c", image = "nginx", ports = { { containerPort = 80 } },
      env = { { name = "NAME", valueFrom = { fieldRef = { fieldPath = "metadata.name" } } } },
      readinessProbe = { httpGet = { port = 80 } },
      livenessProbe = { tcpSocket = { port = 80 }, periodSeconds = 5 },
      lifecycle = { preStop = { httpGet = { port = 80, path = "/stop" } } },
      volumeMounts = { { name = "cm", mountPath = "/cm" } } } },
    volumes = {
      { name = "cm", configMap = { name = "x", items = { { key = "a", path = "b" } } } },
      { name = "secret", secret = { secretName = "y", defaultMode = 256 } },
      { name = "projected", projected = { sources = {
        { configMap = { name = "x" } },
        { downwardAPI = { items = { { path = "n", fieldRef = { fieldPath = "metadata.name" } } } } },
      } } },
      { name = "downward", downwardAPI = { items = {
        { path = "n", fieldRef = { fieldPath = "metadata.name" } } } } },
      { name = "empty", emptyDir = {} },
      { name = "host", hostPath = { path = "/x" } } } }
end

local function template(spec) return { metadata = { labels = { app = "d" } }, spec = spec } end

function _M.steps()
  local job_spec = pod_spec()
  job_spec.restartPolicy = "Never"
  local tolerating = pod_spec()
  tolerating.tolerations = { { key = "node.kubernetes.io/not-ready", operator = "Exists" } }
  return {
    { label = "create pod", method = "POST", path = NS .. "/pods",
      body = { apiVersion = "v1", kind = "Pod", metadata = { name = "defaults" },
        spec = pod_spec() } },
    { label = "create pod (tolerating not-ready)", method = "POST", path = NS .. "/pods",
      body = { apiVersion = "v1", kind = "Pod", metadata = { name = "tolerating" },
        spec = tolerating } },
    { label = "create pod (best effort)", method = "POST", path = NS .. "/pods",
      body = { apiVersion = "v1", kind = "Pod", metadata = { name = "minimal" },
        spec = { containers = { { name = "c", image = "nginx:1.25" } } } } },
    { label = "create pod (limits)", method = "POST", path = NS .. "/pods",
      body = { apiVersion = "v1", kind = "Pod", metadata = { name = "limits" },
        spec = { containers = { { name = "c", image = "nginx:1.25", resources = {
          limits = { cpu = "1", memory = "1Gi" }, requests = { cpu = "500m" } } } } } } },
    { label = "create pod (guaranteed)", method = "POST", path = NS .. "/pods",
      body = { apiVersion = "v1", kind = "Pod", metadata = { name = "guaranteed" },
        spec = { containers = { { name = "c", image = "nginx:1.25", resources = {
          limits = { cpu = "1", memory = "1Gi" } } } } } } },
    { label = "create deployment", method = "POST", path = APPS .. "/deployments",
      body = { apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "d" },
        spec = { selector = { matchLabels = { app = "d" } }, template = template(pod_spec()) } } },
    { label = "create daemonset", method = "POST", path = APPS .. "/daemonsets",
      body = { apiVersion = "apps/v1", kind = "DaemonSet", metadata = { name = "d" },
        spec = { selector = { matchLabels = { app = "d" } }, template = template(pod_spec()) } } },
    { label = "create job", method = "POST", path = BATCH .. "/jobs",
      body = { apiVersion = "batch/v1", kind = "Job", metadata = { name = "j" },
        spec = { template = { spec = job_spec } } } },
    { label = "create indexed job", method = "POST", path = BATCH .. "/jobs",
      body = { apiVersion = "batch/v1", kind = "Job", metadata = { name = "indexed",
        labels = { team = "a" } }, spec = { completionMode = "Indexed", completions = 3,
        parallelism = 2, template = { metadata = { labels = { app = "i" } },
          spec = job_spec } } } },
    { label = "create cronjob", method = "POST", path = BATCH .. "/cronjobs",
      body = { apiVersion = "batch/v1", kind = "CronJob", metadata = { name = "c" },
        spec = { schedule = "*/5 * * * *", jobTemplate = { spec = { template = {
          spec = job_spec } } } } } },
    { label = "delete pods", method = "DELETE", path = NS .. "/pods" },
    { label = "delete deployment", method = "DELETE", path = APPS .. "/deployments/d" },
    { label = "delete daemonset", method = "DELETE", path = APPS .. "/daemonsets/d" },
    { label = "delete job", method = "DELETE", path = BATCH .. "/jobs/j",
      body = { propagationPolicy = "Background" } },
    { label = "delete indexed job", method = "DELETE", path = BATCH .. "/jobs/indexed",
      body = { propagationPolicy = "Background" } },
    { label = "delete cronjob", method = "DELETE", path = BATCH .. "/cronjobs/c" },
  }
end

return _M
