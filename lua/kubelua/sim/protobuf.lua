-- kubelua.sim.protobuf: the request bodies kubectl's generators send
-- (kubectl create namespace, configmap, secret, serviceaccount,
-- deployment, and kubectl run) as Kubernetes protobuf (Content-Type
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

local util = require "kubelua.sim.util"
local json = require "kubelua.json"

local byte, sub, format = string.byte, string.sub, string.format

local _M = {}

-- Per message, field number -> { JSON name, type, element type, set }:
-- type "string", "bytes", "int", "bool", "time", a message name, or
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
  Pod = { { "metadata", "ObjectMeta" }, { "spec", "PodSpec" }, { "status", "Empty" } },
  PodSpec = { partial = true, [2] = { "containers", "list", "Container" },
    [3] = { "restartPolicy", "string" },
    [4] = { "terminationGracePeriodSeconds", "int", nil, true },
    [5] = { "activeDeadlineSeconds", "int", nil, true }, [6] = { "dnsPolicy", "string" },
    [7] = { "nodeSelector", "map", "string" }, [8] = { "serviceAccountName", "string" },
    [9] = { "serviceAccount", "string" }, [10] = { "nodeName", "string" },
    [11] = { "hostNetwork", "bool" }, [12] = { "hostPID", "bool" }, [13] = { "hostIPC", "bool" },
    [15] = { "imagePullSecrets", "list", "LocalObjectReference" },
    [16] = { "hostname", "string" }, [17] = { "subdomain", "string" },
    [19] = { "schedulerName", "string" }, [20] = { "initContainers", "list", "Container" },
    [21] = { "automountServiceAccountToken", "bool", nil, true },
    [24] = { "priorityClassName", "string" }, [25] = { "priority", "int", nil, true },
    [27] = { "shareProcessNamespace", "bool", nil, true },
    [29] = { "runtimeClassName", "string", nil, true },
    [30] = { "enableServiceLinks", "bool", nil, true },
    [31] = { "preemptionPolicy", "string", nil, true } },
  Container = { partial = true, [1] = { "name", "string" }, [2] = { "image", "string" },
    [3] = { "command", "list", "string" }, [4] = { "args", "list", "string" },
    [5] = { "workingDir", "string" }, [6] = { "ports", "list", "ContainerPort" },
    [7] = { "env", "list", "EnvVar" }, [8] = { "resources", "ResourceRequirements" },
    [13] = { "terminationMessagePath", "string" }, [14] = { "imagePullPolicy", "string" },
    [16] = { "stdin", "bool" }, [17] = { "stdinOnce", "bool" }, [18] = { "tty", "bool" },
    [20] = { "terminationMessagePolicy", "string" } },
  ContainerPort = { { "name", "string" }, { "hostPort", "int" }, { "containerPort", "int" },
    { "protocol", "string" }, { "hostIP", "string" } },
  EnvVar = { partial = true, { "name", "string" }, { "value", "string" } },
  ResourceRequirements = { partial = true, { "limits", "map", "quantity" },
    { "requests", "map", "quantity" } },
  -- kubectl create deployment
  Deployment = { { "metadata", "ObjectMeta" }, { "spec", "DeploymentSpec" },
    { "status", "Empty" } },
  DeploymentSpec = { [1] = { "replicas", "int", nil, true }, [2] = { "selector", "LabelSelector" },
    [3] = { "template", "PodTemplateSpec" }, [4] = { "strategy", "DeploymentStrategy" },
    [5] = { "minReadySeconds", "int" }, [6] = { "revisionHistoryLimit", "int", nil, true },
    [7] = { "paused", "bool" }, [9] = { "progressDeadlineSeconds", "int", nil, true } },
  DeploymentStrategy = { { "type", "string" }, { "rollingUpdate", "RollingUpdateDeployment" } },
  RollingUpdateDeployment = { { "maxUnavailable", "intorstr" }, { "maxSurge", "intorstr" } },
  PodTemplateSpec = { { "metadata", "ObjectMeta" }, { "spec", "PodSpec" } },
  LabelSelector = { { "matchLabels", "map", "string" },
    { "matchExpressions", "list", "LabelSelectorRequirement" } },
  LabelSelectorRequirement = { { "key", "string" }, { "operator", "string" },
    { "values", "list", "string" } },
  Empty = {}, -- a status a client sends empty
}

-- The kinds read, by apiVersion/kind.
local KINDS = { ["v1/ConfigMap"] = "ConfigMap", ["v1/Secret"] = "Secret",
  ["v1/Namespace"] = "Namespace", ["v1/ServiceAccount"] = "ServiceAccount", ["v1/Pod"] = "Pod",
  ["apps/v1/Deployment"] = "Deployment" }

local function fail(why) error({ protobuf = why }, 0) end

-- The varint at s[i]; returns it and the index after it.
local function varint(s, i, j)
  local n, mul = 0, 1
  repeat
    if i > j then fail("truncated varint") end
    local b = byte(s, i)
    i = i + 1
    n = n + (b % 128) * mul
    mul = mul * 128
  until b < 128
  if n >= 2 ^ 63 then n = n - 2 ^ 64 end -- an int64 written as two's complement
  return n, i
end

-- Calls fn(number, wire type, value) for each field of s[i..j]: value is
-- the number for a varint, the bytes for a length-delimited field.
local function fields(s, i, j, fn)
  while i <= j do
    local key
    key, i = varint(s, i, j)
    local num, wt = math.floor(key / 8), key % 8
    if wt == 0 then
      local v
      v, i = varint(s, i, j)
      fn(num, wt, v)
    elseif wt == 2 then
      local len
      len, i = varint(s, i, j)
      if len < 0 or i + len - 1 > j then fail("truncated field " .. num) end
      fn(num, wt, sub(s, i, i + len - 1))
      i = i + len
    elseif wt == 1 or wt == 5 then
      i = i + (wt == 1 and 8 or 4)
      if i - 1 > j then fail("truncated field " .. num) end
    else
      fail(format("wire type %d of field %d", wt, num))
    end
  end
end

local message

-- A scalar of type typ from a field's value; nil for the zero value of a
-- plain (not pointer) field.
local function scalar(typ, wt, v, set)
  if typ == "string" or typ == "bytes" then
    if wt ~= 2 then fail("a " .. typ .. " that is not length-delimited") end
    if v == "" and not set then return nil end
    return typ == "bytes" and util.b64encode(v) or v
  elseif typ == "int" or typ == "bool" then
    if wt ~= 0 then fail("an " .. typ .. " that is not a varint") end
    if v == 0 and not set then return nil end
    if typ == "bool" then return v ~= 0 end
    return v
  elseif typ == "quantity" or typ == "intorstr" then
    if wt ~= 2 then fail("a " .. typ .. " that is not length-delimited") end
    local kind, int, str = 0, 0, ""
    fields(v, 1, #v, function(n, _, x)
      if typ == "quantity" then
        if n == 1 then str = x end
      elseif n == 1 then kind = x elseif n == 2 then int = x elseif n == 3 then str = x end
    end)
    if typ == "intorstr" and kind == 0 then return int end
    return str
  elseif typ == "time" then
    if wt ~= 2 then fail("a time that is not length-delimited") end
    local secs, nanos = 0, 0
    fields(v, 1, #v, function(n, _, x)
      if n == 1 then secs = x elseif n == 2 then nanos = x end
    end)
    if secs == 0 and nanos == 0 and v == "" then return json.null end
    return util.timestamp(secs)
  end
  if wt ~= 2 then fail("a " .. typ .. " that is not length-delimited") end
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
      local k, val = "", ""
      if wt ~= 2 then fail("a map entry that is not length-delimited") end
      fields(v, 1, #v, function(n, _, x)
        if n == 1 then k = x elseif n == 2 then val = x end
      end)
      out[key] = out[key] or {}
      if elem == "quantity" then
        out[key][k] = scalar("quantity", 2, val, true)
      else
        out[key][k] = elem == "bytes" and util.b64encode(val) or val
      end
    elseif typ == "list" then
      out[key] = out[key] or json.array {}
      local x = scalar(elem, wt, v, true)
      out[key][#out[key] + 1] = x
    else
      out[key] = scalar(typ, wt, v, set)
    end
  end)
  return out
end

-- decode(body) -> the object, or nil and why (for a 400), or nil, nil and
-- what is not read here (for a 415): the apiVersion/kind, or the field.
function _M.decode(body)
  if sub(body, 1, 4) ~= "k8s\0" then return nil, "the body does not start with k8s\\0" end
  local ok, obj, gvk = pcall(function()
    local av, kind, raw = "", "", nil
    fields(body, 5, #body, function(num, wt, v)
      if num == 1 and wt == 2 then
        fields(v, 1, #v, function(n, _, x)
          if n == 1 then av = x elseif n == 2 then kind = x end
        end)
      elseif num == 2 and wt == 2 then
        raw = v
      end
    end)
    local name = KINDS[av .. "/" .. kind]
    if not name then return nil, av .. "/" .. kind end
    local o = message(name, raw or "")
    o.apiVersion, o.kind = av, kind
    return o
  end)
  if not ok then
    if type(obj) == "table" and obj.protobuf then return nil, "protobuf: " .. obj.protobuf end
    if type(obj) == "table" and obj.unread then return nil, nil, obj.unread end
    error(obj, 0)
  end
  if not obj then return nil, nil, gvk end
  return obj
end

-- The kinds decode reads, for messages: "ConfigMap, Namespace, ...".
function _M.kinds()
  local names = {}
  for _, n in pairs(KINDS) do names[#names + 1] = n end
  table.sort(names)
  return table.concat(names, ", ")
end

return _M
