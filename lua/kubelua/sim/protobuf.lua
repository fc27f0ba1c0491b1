-- kubelua.sim.protobuf: the request bodies kubectl's generators send
-- (kubectl create namespace, configmap, secret, serviceaccount,
-- deployment, service; kubectl auth can-i's access reviews), and clients set to
-- protobuf send for Pods, as Kubernetes
-- protobuf (Content-Type
-- application/vnd.kubernetes.protobuf): the "k8s\0" envelope (a
-- runtime.Unknown holding the apiVersion, kind and the object's bytes),
-- then the object, read into the table a client would have sent as JSON.
--
-- Only the kinds below are known, with the fields of k8s.io/api's
-- generated.proto. As the real decoder does, a field it does not know is
-- skipped, except in the messages read in part (`partial`: a Pod's spec
-- and containers, whose volumes, probes or affinity are not read here),
-- where it is refused (a 415): the simulator loses nothing silently.
-- Scalars go to the table as gogo-protobuf writes them: a plain field is
-- written even when empty (""/0/false, which JSON would omit: dropped
-- here), a pointer field (marked `set`) only when set (kept).

local ffi = require "ffi"
local bit = require "bit"
local util = require "kubelua.sim.util"
local json = require "kubelua.json"

local byte, sub, format = string.byte, string.sub, string.format

local _M = {}

-- Per message, field number -> { JSON name, type, element type, set }:
-- type "string", "bytes" (base64 in JSON), "raw" (bytes as they are),
-- "int" (int64), "int32", "bool", "time", "quantity", "intorstr", a
-- message name, or
-- "map" (of element type "string" or "bytes") and "list" (of element
-- type) for repeated fields.
local MESSAGES = {
  ObjectMeta = { { "name", "string" }, { "generateName", "string" }, { "namespace", "string" },
    { "selfLink", "string" }, { "uid", "string" }, { "resourceVersion", "string" },
    { "generation", "int" }, { "creationTimestamp", "time" }, { "deletionTimestamp", "time" },
    { "deletionGracePeriodSeconds", "int", nil, true }, { "labels", "map", "string" },
    { "annotations", "map", "string" }, { "ownerReferences", "list", "OwnerReference" },
    { "finalizers", "list", "string" } },
  OwnerReference = { [1] = { "kind", "string" }, [3] = { "name", "string" },
    [4] = { "uid", "string" }, [5] = { "apiVersion", "string" },
    [6] = { "controller", "bool", nil, true }, [7] = { "blockOwnerDeletion", "bool", nil, true } },
  ObjectReference = { { "kind", "string" }, { "namespace", "string" }, { "name", "string" },
    { "uid", "string" }, { "apiVersion", "string" }, { "resourceVersion", "string" },
    { "fieldPath", "string" } },
  LocalObjectReference = { { "name", "string" } },
  ConfigMap = { { "metadata", "ObjectMeta" }, { "data", "map", "string" },
    { "binaryData", "map", "bytes" }, { "immutable", "bool", nil, true } },
  Secret = { { "metadata", "ObjectMeta" }, { "data", "map", "bytes" }, { "type", "string" },
    { "stringData", "map", "string" }, { "immutable", "bool", nil, true } },
  Namespace = { { "metadata", "ObjectMeta" }, { "spec", "NamespaceSpec" },
    { "status", "NamespaceStatus" } },
  NamespaceSpec = { { "finalizers", "list", "string" } },
  NamespaceStatus = { { "phase", "string" } },
  ServiceAccount = { { "metadata", "ObjectMeta" }, { "secrets", "list", "ObjectReference" },
    { "imagePullSecrets", "list", "LocalObjectReference" },
    { "automountServiceAccountToken", "bool", nil, true } },
  -- kubectl run
  Pod = { { "metadata", "ObjectMeta" }, { "spec", "PodSpec" }, { "status", "PodStatus" } },
  PodSpec = { partial = true, [2] = { "containers", "list", "Container" },
    [3] = { "restartPolicy", "string" },
    [4] = { "terminationGracePeriodSeconds", "int", nil, true },
    [5] = { "activeDeadlineSeconds", "int", nil, true }, [6] = { "dnsPolicy", "string" },
    [7] = { "nodeSelector", "map", "string" }, [8] = { "serviceAccountName", "string" },
    [9] = { "serviceAccount", "string" }, [10] = { "nodeName", "string" },
    [11] = { "hostNetwork", "bool" }, [12] = { "hostPID", "bool" }, [13] = { "hostIPC", "bool" },
    [14] = { "securityContext", "PodSecurityContext" },
    [15] = { "imagePullSecrets", "list", "LocalObjectReference" },
    [16] = { "hostname", "string" }, [17] = { "subdomain", "string" },
    [19] = { "schedulerName", "string" }, [20] = { "initContainers", "list", "Container" },
    [21] = { "automountServiceAccountToken", "bool", nil, true },
    [24] = { "priorityClassName", "string" }, [25] = { "priority", "int32", nil, true },
    [27] = { "shareProcessNamespace", "bool", nil, true },
    [29] = { "runtimeClassName", "string", nil, true },
    [30] = { "enableServiceLinks", "bool", nil, true },
    [31] = { "preemptionPolicy", "string", nil, true } },
  Container = { partial = true, [1] = { "name", "string" }, [2] = { "image", "string" },
    [3] = { "command", "list", "string" }, [4] = { "args", "list", "string" },
    [5] = { "workingDir", "string" }, [6] = { "ports", "list", "ContainerPort" },
    [7] = { "env", "list", "EnvVar" }, [8] = { "resources", "ResourceRequirements" },
    [13] = { "terminationMessagePath", "string" }, [14] = { "imagePullPolicy", "string" },
    [15] = { "securityContext", "SecurityContext" },
    [16] = { "stdin", "bool" }, [17] = { "stdinOnce", "bool" }, [18] = { "tty", "bool" },
    [20] = { "terminationMessagePolicy", "string" } },
  ContainerPort = { { "name", "string" }, { "hostPort", "int32" }, { "containerPort", "int32" },
    { "protocol", "string" }, { "hostIP", "string" } },
  EnvVar = { partial = true, { "name", "string" }, { "value", "string" } },
  ResourceRequirements = { partial = true, { "limits", "map", "quantity" },
    { "requests", "map", "quantity" } },
  -- kubectl create deployment
  Deployment = { { "metadata", "ObjectMeta" }, { "spec", "DeploymentSpec" },
    { "status", "DeploymentStatus" } },
  DeploymentSpec = { [1] = { "replicas", "int32", nil, true },
    [2] = { "selector", "LabelSelector" },
    [3] = { "template", "PodTemplateSpec" }, [4] = { "strategy", "DeploymentStrategy" },
    [5] = { "minReadySeconds", "int32" }, [6] = { "revisionHistoryLimit", "int32", nil, true },
    [7] = { "paused", "bool" }, [9] = { "progressDeadlineSeconds", "int32", nil, true } },
  DeploymentStrategy = { { "type", "string" }, { "rollingUpdate", "RollingUpdateDeployment" } },
  RollingUpdateDeployment = { { "maxUnavailable", "intorstr" }, { "maxSurge", "intorstr" } },
  PodTemplateSpec = { { "metadata", "ObjectMeta" }, { "spec", "PodSpec" } },
  LabelSelector = { { "matchLabels", "map", "string" },
    { "matchExpressions", "list", "LabelSelectorRequirement" } },
  LabelSelectorRequirement = { { "key", "string" }, { "operator", "string" },
    { "values", "list", "string" } },
  -- kubectl create service, and clients set to protobuf
  Service = { { "metadata", "ObjectMeta" }, { "spec", "ServiceSpec" },
    { "status", "ServiceStatus" } },
  ServiceSpec = { [1] = { "ports", "list", "ServicePort" }, [2] = { "selector", "map", "string" },
    [3] = { "clusterIP", "string" }, [4] = { "type", "string" },
    [5] = { "externalIPs", "list", "string" }, [7] = { "sessionAffinity", "string" },
    [8] = { "loadBalancerIP", "string" }, [9] = { "loadBalancerSourceRanges", "list", "string" },
    [10] = { "externalName", "string" }, [11] = { "externalTrafficPolicy", "string" },
    [12] = { "healthCheckNodePort", "int32" }, [13] = { "publishNotReadyAddresses", "bool" },
    [14] = { "sessionAffinityConfig", "SessionAffinityConfig" },
    [17] = { "ipFamilyPolicy", "string", nil, true }, [18] = { "clusterIPs", "list", "string" },
    [19] = { "ipFamilies", "list", "string" },
    [20] = { "allocateLoadBalancerNodePorts", "bool", nil, true },
    [21] = { "loadBalancerClass", "string", nil, true },
    [22] = { "internalTrafficPolicy", "string", nil, true } },
  ServicePort = { { "name", "string" }, { "protocol", "string" }, { "port", "int32" },
    { "targetPort", "intorstr" }, { "nodePort", "int32" }, { "appProtocol", "string", nil, true } },
  SessionAffinityConfig = { { "clientIP", "ClientIPConfig" } },
  ClientIPConfig = { { "timeoutSeconds", "int32", nil, true } },
  -- kubectl auth can-i (and clients checking their permissions); a review's
  -- status is the server's to fill in
  SelfSubjectAccessReview = { { "metadata", "ObjectMeta" },
    { "spec", "SelfSubjectAccessReviewSpec" }, { "status", "SubjectAccessReviewStatus" } },
  SelfSubjectAccessReviewSpec = { { "resourceAttributes", "ResourceAttributes" },
    { "nonResourceAttributes", "NonResourceAttributes" } },
  ResourceAttributes = { { "namespace", "string" }, { "verb", "string" },
    { "group", "string" }, { "version", "string" }, { "resource", "string" },
    { "subresource", "string" }, { "name", "string" } },
  NonResourceAttributes = { { "path", "string" }, { "verb", "string" } },
  SelfSubjectRulesReview = { { "metadata", "ObjectMeta" },
    { "spec", "SelfSubjectRulesReviewSpec" }, { "status", "SubjectRulesReviewStatus" } },
  SelfSubjectRulesReviewSpec = { { "namespace", "string" } },
  SubjectAccessReview = { { "metadata", "ObjectMeta" }, { "spec", "SubjectAccessReviewSpec" },
    { "status", "SubjectAccessReviewStatus" } },
  SubjectAccessReviewSpec = { partial = true, [1] = { "resourceAttributes", "ResourceAttributes" },
    [2] = { "nonResourceAttributes", "NonResourceAttributes" }, [3] = { "user", "string" },
    [4] = { "groups", "list", "string" }, [6] = { "uid", "string" } },
  -- kubectl create token (serviceaccounts/token)
  TokenRequest = { { "metadata", "ObjectMeta" }, { "spec", "TokenRequestSpec" },
    { "status", "TokenRequestStatus" } },
  TokenRequestSpec = { [1] = { "audiences", "list", "string" },
    [3] = { "boundObjectRef", "BoundObjectReference" },
    [4] = { "expirationSeconds", "int", nil, true } },
  BoundObjectReference = { { "kind", "string" }, { "apiVersion", "string" },
    { "name", "string" }, { "uid", "string" } },
  -- the envelope: runtime.Unknown, and runtime's TypeMeta (apiVersion
  -- first, unlike meta/v1's)
  Unknown = { { "typeMeta", "TypeMeta" }, { "raw", "raw" } },
  TypeMeta = { { "apiVersion", "string" }, { "kind", "string" } },
  -- the values Quantity, IntOrString and Time are written as
  Quantity = { { "string", "string" } },
  IntOrString = { { "type", "int" }, { "intVal", "int32" }, { "strVal", "string" } },
  Time = { { "seconds", "int" }, { "nanos", "int32" } },
  -- a status is not read (a create or update of the object sets none; the
  -- status subresource takes JSON only); a security context only empty,
  -- as a spec read back carries it: a field in it is refused
  PodStatus = {}, DeploymentStatus = {}, ServiceStatus = {}, SubjectAccessReviewStatus = {},
  SubjectRulesReviewStatus = {}, TokenRequestStatus = {},
  PodSecurityContext = { partial = true }, SecurityContext = { partial = true },
}

-- The kinds read, by apiVersion/kind.
local KINDS = { ["v1/ConfigMap"] = "ConfigMap", ["v1/Secret"] = "Secret",
  ["v1/Namespace"] = "Namespace", ["v1/ServiceAccount"] = "ServiceAccount", ["v1/Pod"] = "Pod",
  ["v1/Service"] = "Service",
  ["apps/v1/Deployment"] = "Deployment",
  ["authorization.k8s.io/v1/SelfSubjectAccessReview"] = "SelfSubjectAccessReview",
  ["authorization.k8s.io/v1/SelfSubjectRulesReview"] = "SelfSubjectRulesReview",
  ["authorization.k8s.io/v1/SubjectAccessReview"] = "SubjectAccessReview",
  ["authorization.k8s.io/v1/LocalSubjectAccessReview"] = "SubjectAccessReview",
  ["authentication.k8s.io/v1/TokenRequest"] = "TokenRequest" }

local function fail(why) error({ protobuf = why }, 0) end

-- The varint at s[i] as a uint64_t; returns it and the index after it.
-- Ten bytes at most, as protobuf writes a 64-bit value.
local function varint(s, i, j)
  local n, shift = 0ULL, 0
  repeat
    if i > j then fail("truncated varint") end
    if shift > 63 then fail("varint longer than 10 bytes") end
    local b = byte(s, i)
    i = i + 1
    n = n + bit.lshift(ffi.cast("uint64_t", b % 128), shift)
    shift = shift + 7
  until b < 128
  return n, i
end

-- A varint as the Lua number of the Go type it was written from.
local function as_int64(n) return tonumber(ffi.cast("int64_t", n)) end
local function as_int32(n) return tonumber(ffi.cast("int32_t", ffi.cast("uint32_t", n))) end

-- Calls fn(number, wire type, value) for each field of s[i..j]: value is
-- the uint64_t of a varint, the bytes of a length-delimited field; fixed
-- 32 and 64-bit fields (no field read here is one) go to fn as nil.
local function fields(s, i, j, fn)
  while i <= j do
    local key
    key, i = varint(s, i, j)
    local num, wt = tonumber(key / 8ULL), tonumber(key % 8ULL)
    if wt == 0 then
      local v
      v, i = varint(s, i, j)
      fn(num, wt, v)
    elseif wt == 2 then
      local len
      len, i = varint(s, i, j)
      if len > j - i + 1 then fail("truncated field " .. num) end
      len = tonumber(len)
      fn(num, wt, sub(s, i, i + len - 1))
      i = i + len
    elseif wt == 1 or wt == 5 then
      i = i + (wt == 1 and 8 or 4)
      if i - 1 > j then fail("truncated field " .. num) end
      fn(num, wt, nil)
    else
      fail(format("wire type %d of field %d", wt, num))
    end
  end
end

-- Fails unless field num of message `name` came with wire type want.
local function expect(wt, want, num, name)
  if wt ~= want then fail(format("field %d of %s has wire type %d", num, name, wt)) end
end

local message

-- A scalar of type typ from field num of message `name`; nil for the zero
-- value of a plain (not pointer) field.
local function scalar(typ, wt, v, set, num, name)
  if typ == "raw" then -- bytes kept as they are
    expect(wt, 2, num, name)
    return v
  elseif typ == "string" or typ == "bytes" then
    expect(wt, 2, num, name)
    if v == "" and not set then return nil end
    return typ == "bytes" and util.b64encode(v) or v
  elseif typ == "int" or typ == "int32" or typ == "bool" then
    expect(wt, 0, num, name)
    local n = typ == "int32" and as_int32(v) or as_int64(v)
    if n == 0 and not set then return nil end
    if typ == "bool" then return n ~= 0 end
    return n
  elseif typ == "quantity" then
    expect(wt, 2, num, name)
    return message("Quantity", v).string or "0"
  elseif typ == "intorstr" then
    expect(wt, 2, num, name)
    local m = message("IntOrString", v)
    if (m.type or 0) == 0 then return m.intVal or 0 end
    return m.strVal or ""
  elseif typ == "time" then
    expect(wt, 2, num, name)
    if v == "" then return json.null end -- a zero Time is written empty
    return util.timestamp(message("Time", v).seconds or 0)
  end
  expect(wt, 2, num, name)
  return message(typ, v)
end

-- The table of message `name` read from bytes s.
message = function(name, s)
  local spec, out = MESSAGES[name], {}
  fields(s, 1, #s, function(num, wt, v)
    local f = spec[num]
    if not f then -- unknown: skipped, as the real decoder does, unless read in part
      if spec.partial then
        error({ unread = format("field %d of %s", num, name) }, 0)
      end
      return
    end
    local key, typ, elem, set = f[1], f[2], f[3], f[4]
    if typ == "map" then
      expect(wt, 2, num, name)
      local k, val = "", nil
      fields(v, 1, #v, function(n, w, x)
        if n == 1 then
          expect(w, 2, n, name .. "." .. key .. " key")
          k = x
        elseif n == 2 then
          val = scalar(elem, w, x, true, n, name .. "." .. key .. " value")
        end
      end)
      if val == nil then val = elem == "quantity" and "0" or "" end
      out[key] = out[key] or {}
      out[key][k] = val
    elseif typ == "list" then
      out[key] = out[key] or json.array {}
      local list = out[key]
      list[#list + 1] = scalar(elem, wt, v, true, num, name)
    else
      out[key] = scalar(typ, wt, v, set, num, name)
    end
  end)
  return out
end

-- decode(body) -> the object, or nil and why (for a 400), or nil, nil and
-- what is not read here (for a 415): the apiVersion/kind, or the field.
function _M.decode(body)
  if sub(body, 1, 4) ~= "k8s\0" then return nil, "the body does not start with k8s\\0" end
  local ok, obj, gvk = pcall(function()
    local u = message("Unknown", sub(body, 5))
    local tm = u.typeMeta or {}
    local av, kind = tm.apiVersion or "", tm.kind or ""
    local name = KINDS[av .. "/" .. kind]
    if not name then return nil, av .. "/" .. kind end
    local o = message(name, u.raw or "")
    o.apiVersion, o.kind = av, kind
    return o
  end)
  if not ok then
    if type(obj) == "table" and obj.unread then return nil, nil, obj.unread end
    if type(obj) == "table" and obj.protobuf then return nil, "protobuf: " .. obj.protobuf end
    return nil, "protobuf: malformed body"
  end
  if not obj then return nil, nil, gvk end
  return obj
end

-- The kinds decode reads, for messages: "ConfigMap, Namespace, ...".
function _M.kinds()
  local names = {}
  for gvk in pairs(KINDS) do names[#names + 1] = gvk:match("[^/]+$") end
  table.sort(names)
  return table.concat(names, ", ")
end

return _M
