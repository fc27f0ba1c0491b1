-- Realistic Pods for the benchmarks: what a real cluster's Pods look like,
-- not copies of one template. From a seed, deterministically:
--   - ~40 namespaces and a few hundred Deployments spread over them, each
--     with 1-3 containers from ~40 images with real tags, 0-12 env vars of
--     varied names and values (some valueFrom.fieldRef), 2-6 labels from the
--     app.kubernetes.io set plus pod-template-hash;
--   - Pod i: a Deployment, name <deployment>-<10-char hash>-<5 random
--     chars>, a random v4 uid, a creation time in the last 30 days, one of
--     ~200 nodes (hostIP), a random pod IP, per container the image's
--     imageID (a random sha256 digest per image) and a random 64-hex
--     containerID, and two managedFields entries consistent with the object
--     (kube-controller-manager's spec, kubelet's status);
--   - round r of Pod i (r >= 1): a kubelet status update after its first
--     container restarted r times: a new containerID, lastState.terminated
--     with the previous one, restartCount r, new Ready/ContainersReady
--     condition times and kubelet managedFields time.
-- Seed 1: 3,755 bytes on average as list items, 2.8-6.4 KB (events
-- about 4 KB, lastState included). The JSON is compact, fields in the
-- order kube-apiserver writes them;
-- list items carry no kind/apiVersion, as in a real list. Pod i's bytes
-- depend only on (seed, i, round, resourceVersion), so any event can be
-- made on its own.
local bit = require "bit"

local bxor, lshift, rshift, tobit = bit.bxor, bit.lshift, bit.rshift, bit.tobit
local concat, format = table.concat, string.format

local _M = {}

-- A small deterministic generator (xorshift32) seeded from up to three
-- numbers; draw(n) is a whole number in [0, n).
local function rng(a, b, c)
  local x = tobit(a * 2654435761 + (b or 0) * 40503 + (c or 0) * 69069 + 12345)
  if x == 0 then x = 1 end
  local r = {}
  local function next32()
    x = bxor(x, lshift(x, 13))
    x = bxor(x, rshift(x, 17))
    x = bxor(x, lshift(x, 5))
    return x % 4294967296
  end
  for _ = 1, 4 do next32() end -- close seeds give unrelated streams
  function r.draw(n) return next32() % n end
  function r.hex(n) -- n hex digits
    local t = {}
    for k = 1, math.ceil(n / 8) do t[k] = format("%08x", next32()) end
    return concat(t):sub(1, n)
  end
  function r.pick(list) return list[next32() % #list + 1] end
  return r
end

-- kube's SafeEncodeString alphabet (names of ReplicaSets and Pods)
local SAFE = "bcdfghjklmnpqrstvwxz2456789"
local function safe(r, n)
  local t = {}
  for k = 1, n do
    local d = r.draw(#SAFE) + 1
    t[k] = SAFE:sub(d, d)
  end
  return concat(t)
end

-- A 5-char suffix of Pod i that looks random and is distinct for every i
-- below 27^5 (a multiplier prime to 3 permutes the residues), so that no
-- two Pods of a Deployment share a name.
local function suffix(i)
  local x, t = (i * 7368787 + 1234567) % 14348907, {}
  for k = 1, 5 do
    local d = x % 27 + 1
    t[k] = SAFE:sub(d, d)
    x = math.floor(x / 27)
  end
  return concat(t)
end

local function uuid(r)
  local h = r.hex(32)
  return format("%s-%s-4%s-%x%s-%s", h:sub(1, 8), h:sub(9, 12), h:sub(14, 16),
    8 + r.draw(4), h:sub(18, 20), h:sub(21, 32))
end

local EPOCH = 1793491200 -- 2026-11-01T00:00:00Z
local function stamp(t) return os.date("!%Y-%m-%dT%H:%M:%SZ", t) end

local WORDS = { "payments", "checkout", "search", "identity", "billing", "catalog",
  "orders", "shipping", "inventory", "notifications", "analytics", "ledger", "profile",
  "gateway", "auth", "recommendations", "media", "reporting", "pricing", "fraud" }
local ROLES = { "api", "worker", "frontend", "consumer", "scheduler", "backend", "proxy",
  "indexer", "sync", "grpc", "web", "cron", "exporter", "writer", "reader" }
local ENVS = { "prod", "staging", "dev" }

local IMAGES = {
  "docker.io/library/nginx:1.25.3", "docker.io/library/redis:7.2.4-alpine",
  "docker.io/library/postgres:15.5", "docker.io/library/python:3.11.7-slim",
  "docker.io/library/node:20.11.0-alpine", "docker.io/library/golang:1.21.6",
  "docker.io/bitnami/kafka:3.6.1-debian-11-r0", "docker.io/bitnami/rabbitmq:3.12.12",
  "docker.io/envoyproxy/envoy:v1.29.1", "docker.io/grafana/grafana:10.3.1",
  "docker.io/grafana/loki:2.9.4", "docker.io/grafana/promtail:2.9.4",
  "quay.io/prometheus/prometheus:v2.49.1", "quay.io/prometheus/node-exporter:v1.7.0",
  "quay.io/prometheus/alertmanager:v0.26.0", "quay.io/jetstack/cert-manager-controller:v1.13.3",
  "quay.io/argoproj/argocd:v2.9.5", "quay.io/cilium/cilium:v1.14.6",
  "registry.k8s.io/coredns/coredns:v1.11.1", "registry.k8s.io/kube-proxy:v1.29.1",
  "registry.k8s.io/ingress-nginx/controller:v1.9.5",
  "registry.k8s.io/metrics-server/metrics-server:v0.7.0",
  "registry.k8s.io/pause:3.9", "ghcr.io/fluxcd/source-controller:v1.2.4",
  "ghcr.io/external-secrets/external-secrets:v0.9.11", "ghcr.io/dexidp/dex:v2.38.0",
  "gcr.io/distroless/java17-debian12:nonroot", "gcr.io/datadoghq/agent:7.50.3",
  "public.ecr.aws/aws-observability/aws-for-fluent-bit:2.32.0",
  "public.ecr.aws/eks/aws-load-balancer-controller:v2.7.1",
  "mcr.microsoft.com/dotnet/aspnet:8.0.1", "docker.elastic.co/elasticsearch/elasticsearch:8.12.0",
  "docker.elastic.co/beats/filebeat:8.12.0", "docker.io/istio/proxyv2:1.20.2",
  "docker.io/library/memcached:1.6.23", "docker.io/library/haproxy:2.9.3",
  "docker.io/openpolicyagent/opa:0.61.0", "docker.io/jaegertracing/all-in-one:1.53.0",
  "docker.io/otel/opentelemetry-collector-contrib:0.93.0", "docker.io/vault:1.13.3",
}

local ENV_NAMES = { "LOG_LEVEL", "LOG_FORMAT", "PORT", "HTTP_PORT", "GRPC_PORT", "DATABASE_URL",
  "DB_HOST", "DB_PORT", "DB_NAME", "REDIS_HOST", "REDIS_PORT", "KAFKA_BROKERS", "JAVA_OPTS",
  "JVM_XMX", "GOMAXPROCS", "GOGC", "NODE_ENV", "ENVIRONMENT", "REGION", "CLUSTER_NAME",
  "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "FEATURE_FLAGS", "CACHE_TTL_SECONDS",
  "MAX_CONNECTIONS", "WORKER_CONCURRENCY", "QUEUE_NAME", "S3_BUCKET", "SENTRY_DSN",
  "TZ", "TIMEOUT_MS", "RETRY_LIMIT", "METRICS_ENABLED", "TRACING_SAMPLE_RATE", "API_BASE_URL" }
local FIELD_REFS = { { "POD_NAME", "metadata.name" }, { "POD_NAMESPACE", "metadata.namespace" },
  { "POD_IP", "status.podIP" }, { "NODE_NAME", "spec.nodeName" }, { "HOST_IP", "status.hostIP" },
  { "SERVICE_ACCOUNT", "spec.serviceAccountName" } }
local LABELS = { "app.kubernetes.io/instance", "app.kubernetes.io/version",
  "app.kubernetes.io/component", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by" }

local function env_value(r, name, dep)
  local d = r.draw(6)
  if d == 0 then return tostring(r.draw(65535)) end
  if d == 1 then return r.pick({ "debug", "info", "warn", "true", "false", "json" }) end
  if d == 2 then
    return format("postgres://%s-%s.%s.svc.cluster.local:5432/%s", dep.ns, r.hex(6), dep.ns,
      name:lower())
  end
  if d == 3 then return format("http://%s.%s:%d", dep.name, dep.ns, 8000 + r.draw(1000)) end
  if d == 4 then return format("-Xms%dm -Xmx%dm -XX:+UseG1GC", 256 * (1 + r.draw(4)),
    512 * (1 + r.draw(8))) end
  return r.hex(8 + r.draw(8))
end

-- The universe of a seed: namespaces, images, nodes, Deployments.
local function universe(seed)
  local r = rng(seed, 1)
  local u = { namespaces = {}, images = {}, nodes = {}, deployments = {} }
  local used = {}
  while #u.namespaces < 40 do
    local ns = r.pick(WORDS) .. "-" .. r.pick(ENVS)
    if r.draw(3) == 0 then ns = ns .. "-" .. r.draw(10) end
    if not used[ns] then used[ns] = true; u.namespaces[#u.namespaces + 1] = ns end
  end
  for k, image in ipairs(IMAGES) do
    local repo = image:match("^(.*):[^:/]*$")
    u.images[k] = { image = image, id = repo .. "@sha256:" .. r.hex(64),
      name = repo:match("([^/]+)$") }
  end
  for k = 1, 200 do
    local a, b = r.draw(64), 1 + r.draw(254)
    u.nodes[k] = { name = format("ip-10-0-%d-%d.eu-west-1.compute.internal", a, b),
      ip = format("10.0.%d.%d", a, b) }
  end
  used = {}
  while #u.deployments < 300 do
    local name = r.pick(WORDS) .. "-" .. r.pick(ROLES)
    if r.draw(2) == 0 then name = name .. "-" .. r.pick(ROLES) end
    local ns = r.pick(u.namespaces)
    if not used[ns .. "/" .. name] then
      used[ns .. "/" .. name] = true
      local dep = { name = name, ns = ns, hash = safe(r, 10), rs_uid = uuid(r),
        containers = {}, labels = {} }
      local n = ({ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 3 })[r.draw(14) + 1]
      for c = 1, n do
        local img = r.pick(u.images)
        local ct = { image = img, name = c == 1 and name:match("^[^-]+%-(.*)$") or img.name,
          env = {}, port = c == 1 and r.draw(2) == 0 and 8080 + r.draw(10) or nil,
          cpu = (1 + r.draw(20)) * 50 .. "m", mem = (1 + r.draw(16)) * 64 .. "Mi" }
        if c > 1 and ct.name == dep.containers[1].name then ct.name = ct.name .. "-" .. c end
        local seen = {}
        -- 0-12, mostly few
        for _ = 1, math.min(r.draw(13), r.draw(13), r.draw(13), r.draw(13), r.draw(13)) do
          local e
          if r.draw(4) == 0 then
            local f = r.pick(FIELD_REFS)
            e = { name = f[1], field = f[2] }
          else
            local en = r.pick(ENV_NAMES)
            e = { name = en, value = env_value(r, en, dep) }
          end
          if not seen[e.name] then seen[e.name] = true; ct.env[#ct.env + 1] = e end
        end
        dep.containers[c] = ct
      end
      local labels = { { "app.kubernetes.io/name", name } }
      for k = 1, r.draw(5) do
        local l = LABELS[k]
        local v = l:match("version$") and dep.containers[1].image.image:match(":([^:]*)$")
          or l:match("instance$") and name .. "-" .. ns
          or l:match("managed%-by$") and r.pick({ "Helm", "argocd", "kustomize" })
          or l:match("part%-of$") and ns
          or r.pick(ROLES)
        labels[#labels + 1] = { l, v }
      end
      labels[#labels + 1] = { "pod-template-hash", dep.hash }
      table.sort(labels, function(x, y) return x[1] < y[1] end)
      dep.labels = labels
      u.deployments[#u.deployments + 1] = dep
    end
  end
  return u
end

local function quote(s) return '"' .. s .. '"' end

-- The stable facts of Pod i (made once per Pod and kept).
local function facts(u, seed, i)
  local r = rng(seed, 2, i)
  local dep = u.deployments[r.draw(#u.deployments) + 1]
  local node = u.nodes[r.draw(#u.nodes) + 1]
  local created = EPOCH - r.draw(30 * 86400)
  local p = { i = i, dep = dep, node = node, uid = uuid(r), created = created,
    name = dep.name .. "-" .. dep.hash .. "-" .. suffix(i),
    pod_ip = format("10.%d.%d.%d", 100 + r.draw(20), r.draw(256), 1 + r.draw(254)),
    started = created + 1 + r.draw(5), ids = {} }
  for c = 1, #dep.containers do p.ids[c] = r.hex(64) end
  return p
end

-- The first container's id in round `round`.
local function container_id(seed, p, round)
  if round == 0 then return p.ids[1] end
  return rng(seed, 1000003 + round, p.i).hex(64)
end

local function env_json(b, ct)
  if #ct.env == 0 then return end
  b[#b + 1] = ',"env":['
  for k, e in ipairs(ct.env) do
    if k > 1 then b[#b + 1] = "," end
    if e.field then
      b[#b + 1] = format('{"name":"%s","valueFrom":{"fieldRef":{"apiVersion":"v1",'
        .. '"fieldPath":"%s"}}}', e.name, e.field)
    else
      b[#b + 1] = format('{"name":"%s","value":"%s"}', e.name, e.value)
    end
  end
  b[#b + 1] = "]"
end

-- Pod p's JSON in round `round` at resourceVersion rv; with kind/apiVersion
-- unless `item` (a list's item).
local function render(seed, p, rv, round, item)
  local dep, b = p.dep, {}
  local ns = dep.ns
  local r = rng(seed, 3 + round, p.i)
  local t_round = round == 0 and p.started or p.started + round * 900 + r.draw(600)
  local kcm_t, kubelet_t = stamp(p.created), stamp(t_round + 2)
  b[1] = item and "{" or '{"kind":"Pod","apiVersion":"v1",'
  b[#b + 1] = format('"metadata":{"name":"%s","generateName":"%s-%s-","namespace":"%s",'
    .. '"uid":"%s","resourceVersion":"%s","creationTimestamp":"%s","labels":{',
    p.name, dep.name, dep.hash, ns, p.uid, rv, stamp(p.created))
  for k, l in ipairs(dep.labels) do
    b[#b + 1] = (k > 1 and "," or "") .. quote(l[1]) .. ":" .. quote(l[2])
  end
  b[#b + 1] = format('},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet",'
    .. '"name":"%s-%s","uid":"%s","controller":true,"blockOwnerDeletion":true}],'
    .. '"managedFields":[{"manager":"kube-controller-manager","operation":"Update",'
    .. '"apiVersion":"v1","time":"%s","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":'
    .. '{"f:generateName":{},"f:labels":{".":{}', dep.name, dep.hash, dep.rs_uid, kcm_t)
  for _, l in ipairs(dep.labels) do b[#b + 1] = ',"f:' .. l[1] .. '":{}' end
  b[#b + 1] = format('},"f:ownerReferences":{".":{},"k:{\\"uid\\":\\"%s\\"}":{}}},'
    .. '"f:spec":{"f:containers":{', dep.rs_uid)
  for c, ct in ipairs(dep.containers) do
    b[#b + 1] = (c > 1 and "," or "") .. '"k:{\\"name\\":\\"' .. ct.name .. '\\"}":{".":{}'
    if #ct.env > 0 then
      b[#b + 1] = ',"f:env":{".":{}'
      for _, e in ipairs(ct.env) do
        b[#b + 1] = ',"k:{\\"name\\":\\"' .. e.name .. '\\"}":{".":{},"f:name":{},'
          .. (e.field and '"f:valueFrom":{".":{},"f:fieldRef":{}}}' or '"f:value":{}}')
      end
      b[#b + 1] = "}"
    end
    b[#b + 1] = ',"f:image":{},"f:imagePullPolicy":{},"f:name":{}'
    if ct.port then
      b[#b + 1] = ',"f:ports":{".":{},"k:{\\"containerPort\\":' .. ct.port
        .. ',\\"protocol\\":\\"TCP\\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}}'
    end
    b[#b + 1] = ',"f:resources":{".":{},"f:requests":'
      .. '{".":{},"f:cpu":{},"f:memory":{}}},"f:terminationMessagePath":{}}'
  end
  b[#b + 1] = '},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{}}}},'
  b[#b + 1] = format('{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"%s",'
    .. '"fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:conditions":{'
    .. '"k:{\\"type\\":\\"Ready\\"}":{".":{},"f:lastProbeTime":{},'
    .. '"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},'
    .. '"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:startTime":{}}},'
    .. '"subresource":"status"}]},"spec":{"containers":[', kubelet_t)
  for c, ct in ipairs(dep.containers) do
    b[#b + 1] = format('%s{"name":"%s","image":"%s"', c > 1 and "," or "", ct.name,
      ct.image.image)
    if ct.port then
      b[#b + 1] = format(',"ports":[{"name":"http","containerPort":%d,"protocol":"TCP"}]',
        ct.port)
    end
    env_json(b, ct)
    b[#b + 1] = format(',"resources":{"requests":{"cpu":"%s","memory":"%s"}},'
      .. '"terminationMessagePath":"/dev/termination-log","imagePullPolicy":"IfNotPresent"}',
      ct.cpu, ct.mem)
  end
  local ready_t = stamp(round == 0 and p.started + 4 or t_round + 3)
  b[#b + 1] = format('],"restartPolicy":"Always","terminationGracePeriodSeconds":30,'
    .. '"dnsPolicy":"ClusterFirst","serviceAccountName":"default",'
    .. '"nodeName":"%s","securityContext":{},"schedulerName":"default-scheduler",'
    .. '"priority":0},'
    .. '"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True",'
    .. '"lastProbeTime":null,"lastTransitionTime":"%s"},{"type":"ContainersReady",'
    .. '"status":"True","lastProbeTime":null,"lastTransitionTime":"%s"},'
    .. '{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"%s"}],'
    .. '"hostIP":"%s","podIP":"%s",'
    .. '"startTime":"%s","containerStatuses":[', p.node.name, ready_t, ready_t,
    stamp(p.created), p.node.ip, p.pod_ip, stamp(p.started))
  for c, ct in ipairs(dep.containers) do
    local id, started, last = p.ids[c], p.started + 2, ""
    if c == 1 and round > 0 then
      local prev = container_id(seed, p, round - 1)
      id = container_id(seed, p, round)
      last = format('"terminated":{"exitCode":%d,"reason":"%s","startedAt":"%s",'
        .. '"finishedAt":"%s","containerID":"containerd://%s"}',
        r.pick({ 1, 137, 143, 2 }), r.pick({ "Error", "OOMKilled", "Error" }),
        stamp(t_round - 300 - r.draw(300)), stamp(t_round - 1), prev)
      started = t_round
    end
    b[#b + 1] = format('%s{"name":"%s","state":{"running":{"startedAt":"%s"}},'
      .. '"lastState":{%s},"ready":true,"restartCount":%d,"image":"%s","imageID":"%s",'
      .. '"containerID":"containerd://%s","started":true}', c > 1 and "," or "", ct.name,
      stamp(started), last, c == 1 and round or 0, ct.image.image, ct.image.id, id)
  end
  b[#b + 1] = '],"qosClass":"Burstable"}}'
  return concat(b)
end

-- A generator of seed's Pods: g:object(i, rv, round), g:item(i, rv) (a
-- list's item, round 0), g:key(i) ("namespace/name").
function _M.new(seed)
  local u, pods = universe(seed), {}
  local g = {}
  local function get(i)
    local p = pods[i]
    if not p then p = facts(u, seed, i); pods[i] = p end
    return p
  end
  function g.object(i, rv, round) return render(seed, get(i), rv, round or 0, false) end
  function g.item(i, rv) return render(seed, get(i), rv, 0, true) end
  function g.key(i)
    local p = get(i)
    return p.dep.ns .. "/" .. p.name
  end
  return g
end

return _M
