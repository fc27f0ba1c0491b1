-- kubelua.sim.namespaces: what kube-controller-manager does for
-- namespaces, for the simulator. The namespace controller empties a
-- namespace being deleted (Terminating: the registry refuses new content),
-- reports in status.conditions what is left and which finalizers hold it,
-- and deletes the namespace once nothing is left. The root-CA publisher
-- puts ConfigMap kube-root-ca.crt, and the service-account controller
-- ServiceAccount default, in every namespace, and put them back when they
-- are deleted. Each can be turned off (kubelua.sim.controllers).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local gc = require "kubelua.sim.gc"

local pairs, ipairs, next, setmetatable, tostring, error =
  pairs, ipairs, next, setmetatable, tostring, error
local format = string.format
local concat, sort = table.concat, table.sort
local is_array = json.is_array
local copy = util.copy

local _M = {}
local NS = {}
NS.__index = NS

local CTX = { user_agent = "kube-controller-manager" }
local STATUS_CTX = { user_agent = "kube-controller-manager", subresource = "status" }
local FINALIZE_CTX = { user_agent = "kube-controller-manager", subresource = "finalize" }

local ROOT_CA = "kube-root-ca.crt"
local DESCRIPTION = "Contains a CA bundle that can be used to verify the kube-apiserver when "
  .. "using internal endpoints such as the internal service IP or kubernetes.default.svc. No "
  .. "other usage is guaranteed across distributions of Kubernetes clusters."

-- The CA kube-root-ca.crt holds when the simulator serves plain HTTP: a
-- self-signed certificate made once for it (CN kubelua-sim-ca), whose key
-- was not kept: nothing is signed with it.
_M.DEFAULT_CA = [[
-----BEGIN CERTIFICATE-----
MIIDJTCCAg2gAwIBAgIUBM8AlLE+CU/+2Efthm+rZ1o79XAwDQYJKoZIhvcNAQEL
BQAwGTEXMBUGA1UEAwwOa3ViZWx1YS1zaW0tY2EwIBcNMjYxMjA1MTEwODQwWhgP
MjEyNjExMTExMTA4NDBaMBkxFzAVBgNVBAMMDmt1YmVsdWEtc2ltLWNhMIIBIjAN
BgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA51Cy5cyMWTm1vscWKMyHMRPuD5oA
m5gnp5zwEMDzILEp2FQXVAc/UJZzafATr8T18xgHQXAKPQ0DMFNFEhzPdftxdAaP
/LmNGnfFsKoRqL7M+XjBOMDsC4gWsxgkfUpKIOpCmR1IPhrjnJ1Om+b1S7CTDT0y
8V/vVoXdTObjTTPSUVxQfoHJWo+K759PGR+vxqX7XZfd2Ny5rL7irwMiQqs/Wk9M
RDNRysAbXJyumD6H1UKxkTFTx1FtX3ucf6kWQMBf4WchYwcuE00ynPFBavXUowTd
ep3oCQC2i81Bp20T9JdVzj4QBKLAMCqriGu3uOxhsSj/65EE2cOHbDsJRwIDAQAB
o2MwYTAdBgNVHQ4EFgQU+d503qPf7VtzyVhAMt+KWrTrNEMwHwYDVR0jBBgwFoAU
+d503qPf7VtzyVhAMt+KWrTrNEMwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8E
BAMCAQYwDQYJKoZIhvcNAQELBQADggEBABsgh6enThf8SEvj4Q34ZZ6ze6i/6pKZ
Hp5SdrzyO5g3xaok4FJoVCjNunqieOLW1gen4SHvcmBoQ5F53z3NHyjBEhT0pVWF
Sf+kFh3nCwF34taeHG4j8lKe6003DmR+PPpkjWlm2eohbh7ehUlH9wAzG23Pq1A/
vG7j/UHb3Xv5xPKZ9AS5L1HO9etX0MPnBH+yNX7CrHYrNBKTW3WazomU7O9dyY/q
O3Vf40qaC3MNaJoyyuARQ6QsP2Z/QCKyr7yBYa9uC10M3zxxesDPrpQVRvWq7Vfs
E682oshBCiaFgSRKT3lq9Bj8OgF4Wvn3GWwLbGJHMT65tBD2Clo05rI=
-----END CERTIFICATE-----
]]

-- new(store, defer, on, ca) -> the controllers on.namespace, on.root_ca
-- and on.service_account over store; ca() -> the PEM for kube-root-ca.crt.
function _M.new(store, defer, on, ca)
  return setmetatable({ store = store, defer = defer, on = on, ca = ca,
    terminating = {} }, NS)
end

local function is_namespaces(res) return res.name == "namespaces" and res.gv == "v1" end

-- store.observe: a new namespace is filled, a deleted one emptied; an
-- object leaving a Terminating namespace may let it go; a published
-- object deleted is published again.
function NS:observe(res, e, etype)
  if is_namespaces(res) then
    if etype == "ADDED" then
      self:note_publish(e.name)
    elseif etype == "DELETED" then
      self.terminating[e.name] = nil
    elseif self.on.namespace and e.obj.metadata.deletionTimestamp then
      self:note_finalize(e.name)
    end
  elseif etype == "DELETED" and res.namespaced then
    if self.terminating[e.ns] then
      self:note_finalize(e.ns)
    elseif (e.name == ROOT_CA and res.name == "configmaps" and res.gv == "v1")
        or (e.name == "default" and res.name == "serviceaccounts" and res.gv == "v1") then
      self:note_publish(e.ns)
    end
  end
end

function NS:note_publish(ns)
  if not (self.on.root_ca or self.on.service_account) then return end
  self.defer("publish " .. ns, "root-ca-cert-publisher/serviceaccount",
    function() self:publish(ns) end)
end

function NS:note_finalize(ns)
  self.defer("finalize " .. ns, "namespace", function() self:finalize(ns) end)
end

-- Creates what every namespace has, where it is missing.
function NS:publish(ns)
  local s = self.store
  local nse = s:resource("v1", "namespaces").objects[ns]
  if not nse or nse.obj.metadata.deletionTimestamp then return end
  local function ensure(on, resource, obj)
    if not on then return end
    local res = s:resource("v1", resource)
    if res.objects[ns .. "/" .. obj.metadata.name] then return end
    local _, err = s:create(res, ns, obj, CTX)
    if err then error(format("creating %s %s/%s: %s", resource, ns, obj.metadata.name,
      tostring(err.message))) end
  end
  ensure(self.on.root_ca, "configmaps", { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = ROOT_CA, annotations = { ["kubernetes.io/description"] = DESCRIPTION } },
    data = { ["ca.crt"] = self.ca() } })
  ensure(self.on.service_account, "serviceaccounts", { apiVersion = "v1",
    kind = "ServiceAccount", metadata = { name = "default" } })
end

-- The namespaced objects of namespace ns, by resource, sorted (a CRD's
-- version that only caches another's objects: kubelua.sim.conversion,
-- left out).
local function contents(s, ns)
  local list = {}
  local conv = s.conversion
  for _, res in pairs(s.resources) do
    if res.namespaced and not (conv and res.crd and conv:is_cache(res)) then
      for _, e in pairs(res.objects) do
        if e.ns == ns then list[#list + 1] = { res = res, key = e.key, e = e } end
      end
    end
  end
  sort(list, gc.by_place)
  return list
end

local function counts(map)
  local parts = {}
  for what, n in pairs(map) do
    parts[#parts + 1] = format("%s in %d resource instances", what, n)
  end
  sort(parts)
  return concat(parts, ", ")
end

-- The conditions the namespace controller reports, keeping each one's
-- lastTransitionTime while its status stays.
local function conditions(old, remaining, held)
  local now = util.timestamp()
  local before = {}
  for _, c in ipairs(is_array(old) and old or {}) do before[c.type] = c end
  local function cond(ctype, status, reason, message)
    local b = before[ctype]
    return { type = ctype, status = status,
      lastTransitionTime = b and b.status == status and b.lastTransitionTime or now,
      reason = reason, message = message }
  end
  local rem = {}
  for gr, n in pairs(remaining) do rem[#rem + 1] = format("%s has %d resource instances", gr, n) end
  sort(rem)
  return json.array {
    cond("NamespaceDeletionDiscoveryFailure", "False", "ResourcesDiscovered",
      "All resources successfully discovered"),
    cond("NamespaceDeletionGroupVersionParsingFailure", "False", "ParsedGroupVersions",
      "All legacy kube types successfully parsed"),
    cond("NamespaceDeletionContentFailure", "False", "ContentDeleted",
      "All content successfully deleted, may be waiting on finalization"),
    #rem > 0 and cond("NamespaceContentRemaining", "True", "SomeResourcesRemain",
      "Some resources are remaining: " .. concat(rem, ", "))
      or cond("NamespaceContentRemaining", "False", "ContentRemoved",
        "All content successfully removed"),
    next(held) and cond("NamespaceFinalizersRemaining", "True", "SomeFinalizersRemain",
      "Some content in the namespace has finalizers remaining: " .. counts(held))
      or cond("NamespaceFinalizersRemaining", "False", "ContentHasNoFinalizers",
        "All content-preserving finalizers finished"),
  }
end

-- One pass of the namespace controller over Terminating namespace ns:
-- deletes what is in it (Background), reports what is left, and deletes
-- the namespace when nothing is.
function NS:finalize(ns)
  local s = self.store
  local nsres = s:resource("v1", "namespaces")
  local nse = nsres.objects[ns]
  if not nse or not nse.obj.metadata.deletionTimestamp then return end
  self.terminating[ns] = true
  for _, item in ipairs(contents(s, ns)) do
    local res, e = item.res, item.e
    if res.objects[e.key] == e and not e.obj.metadata.deletionTimestamp then
      local out, err = s:delete(res, ns, e.name, { propagationPolicy = "Background" }, CTX)
      if not out and err.code ~= 404 then
        error(format("deleting %s %s/%s: %s", res.gr, ns, e.name, tostring(err.message)))
      end
    end
  end
  local remaining, held = {}, {}
  for _, item in ipairs(contents(s, ns)) do
    local gr = item.res.name .. "." .. item.res.group
    remaining[gr] = (remaining[gr] or 0) + 1
    local fins = item.e.obj.metadata.finalizers
    for _, f in ipairs(is_array(fins) and fins or {}) do held[f] = (held[f] or 0) + 1 end
  end
  nse = nsres.objects[ns]
  local obj = copy(nse.obj)
  obj.status = copy(obj.status or {})
  obj.status.conditions = conditions(obj.status.conditions, remaining, held)
  local ne, err = s:commit(nsres, nse, obj, STATUS_CTX)
  if not ne then
    error("updating the status of namespace " .. ns .. ": " .. tostring(err.message))
  end
  if next(remaining) then return end
  -- the namespace's finalizer is done (its finalize subresource); another
  -- one (set through finalize) holds the namespace until it is removed
  local keep = json.array {}
  local spec = ne.obj.spec
  for _, f in ipairs(type(spec) == "table" and is_array(spec.finalizers) and spec.finalizers
      or {}) do
    if f ~= "kubernetes" then keep[#keep + 1] = f end
  end
  if #keep > 0 then
    obj = copy(ne.obj)
    obj.spec.finalizers = keep
    ne, err = s:commit(nsres, ne, obj, FINALIZE_CTX)
    if not ne then
      error("finalizing namespace " .. ns .. ": " .. tostring(err.message))
    end
    return
  end
  -- it goes as it was last written
  local gone = copy(ne.obj)
  gone.metadata.resourceVersion = tostring(s:next_rv())
  s:put(nsres, gone, "DELETED", ne)
end

-- At start: the namespaces already stored get what every namespace has,
-- and those being deleted are emptied.
function NS:sync()
  for name, e in pairs(self.store:resource("v1", "namespaces").objects) do
    self:note_publish(name)
    if self.on.namespace and e.obj.metadata.deletionTimestamp then self:note_finalize(name) end
  end
end

return _M
