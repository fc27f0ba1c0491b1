-- kubelua.sim.services: what a real server fills into a Service, so that a
-- controller reading one back meets what a cluster gives it (and one that
-- compares its desired spec with the stored one learns to expect it):
-- SetDefaults_Service (sessionAffinity, type, port protocol and
-- targetPort, traffic policies), and the service registry's allocations on
-- create: a cluster IP from 10.96.0.0/12 with clusterIPs, ipFamilies and
-- ipFamilyPolicy of a single-stack IPv4 cluster, node ports from
-- 30000-32767 for NodePort and LoadBalancer services, status.loadBalancer.
-- An update keeps what was allocated when it leaves it out
-- (patchAllocatedValues).

local json = require "kubelua.json"

local type, ipairs, next, tostring = type, ipairs, next, tostring
local floor, random = math.floor, math.random
local format = string.format
local is_array, null = json.is_array, json.null

local _M = {}

local function is_object(v) return type(v) == "table" and not is_array(v) end
local function absent(v) return v == nil or v == null or v == "" end

-- SetDefaults_Service.
function _M.defaults(obj)
  local spec = is_object(obj.spec) and obj.spec or {}
  obj.spec = spec
  if absent(spec.sessionAffinity) then spec.sessionAffinity = "None" end
  if spec.sessionAffinity == "None" then spec.sessionAffinityConfig = nil end
  if spec.sessionAffinity == "ClientIP" then
    local c = spec.sessionAffinityConfig
    if not (is_object(c) and is_object(c.clientIP) and type(c.clientIP.timeoutSeconds) == "number")
    then
      spec.sessionAffinityConfig = { clientIP = { timeoutSeconds = 10800 } }
    end
  end
  if absent(spec.type) then spec.type = "ClusterIP" end
  for _, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
    if is_object(p) then
      if absent(p.protocol) then p.protocol = "TCP" end
      if absent(p.targetPort) or p.targetPort == 0 then p.targetPort = p.port end
    end
  end
  local node = spec.type == "NodePort" or spec.type == "LoadBalancer"
  local ann = obj.metadata and obj.metadata.annotations
  local beta = is_object(ann) and ann["service.beta.kubernetes.io/external-traffic"] ~= nil
  if not beta then
    if node and absent(spec.externalTrafficPolicy) then spec.externalTrafficPolicy = "Cluster" end
    if absent(spec.internalTrafficPolicy) and (node or spec.type == "ClusterIP") then
      spec.internalTrafficPolicy = "Cluster"
    end
    if spec.type == "LoadBalancer" and absent(spec.allocateLoadBalancerNodePorts) then
      spec.allocateLoadBalancerNodePorts = true
    end
  end
end

-- The cluster IPs and node ports taken by the services in list.
local function taken(list)
  local ips, ports = {}, {}
  for _, svc in ipairs(list) do
    local spec = is_object(svc.spec) and svc.spec or {}
    if type(spec.clusterIP) == "string" then ips[spec.clusterIP] = true end
    for _, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
      if is_object(p) and type(p.nodePort) == "number" then ports[p.nodePort] = true end
    end
  end
  return ips, ports
end

-- A free address of 10.96.0.0/12 (10.96.0.1 is the kubernetes Service's).
local function free_ip(ips)
  for _ = 1, 1000 do
    local n = random(2, 2 ^ 20 - 2)
    local ip = format("10.%d.%d.%d", 96 + floor(n / 65536), floor(n / 256) % 256, n % 256)
    if not ips[ip] then return ip end
  end
  error("sim: no free cluster IP")
end

local function free_port(ports)
  for _ = 1, 10000 do
    local p = random(30000, 32767)
    if not ports[p] then return p end
  end
  error("sim: no free node port")
end

local function needs_node_ports(spec)
  return spec.type == "NodePort"
    or spec.type == "LoadBalancer" and spec.allocateLoadBalancerNodePorts ~= false
end

-- Fills what the registry allocates into obj, a Service being created
-- (old nil) or updated (old: the stored one); others: the stored
-- Services, for what is taken.
function _M.allocate(obj, old, others)
  local spec = obj.spec
  local ospec = old and is_object(old.spec) and old.spec or nil
  if ospec then -- patchAllocatedValues: what the update leaves out stays
    if absent(spec.clusterIP) and spec.type ~= "ExternalName" then
      spec.clusterIP, spec.clusterIPs = ospec.clusterIP, ospec.clusterIPs
    end
    if absent(spec.ipFamilies) then spec.ipFamilies = ospec.ipFamilies end
    if absent(spec.ipFamilyPolicy) then spec.ipFamilyPolicy = ospec.ipFamilyPolicy end
    if needs_node_ports(spec) and needs_node_ports(ospec) then
      local was = {}
      for _, p in ipairs(is_array(ospec.ports) and ospec.ports or {}) do
        if is_object(p) then was[tostring(p.port) .. "/" .. tostring(p.protocol)] = p.nodePort end
      end
      for _, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
        if is_object(p) and absent(p.nodePort) then
          p.nodePort = was[tostring(p.port) .. "/" .. tostring(p.protocol)]
        end
      end
    end
  end
  local ips, ports = taken(others)
  if spec.type == "ExternalName" then
    spec.clusterIP, spec.clusterIPs, spec.ipFamilies, spec.ipFamilyPolicy = nil, nil, nil, nil
  else
    if absent(spec.clusterIP) then
      local first = is_array(spec.clusterIPs) and spec.clusterIPs[1]
      spec.clusterIP = type(first) == "string" and first or free_ip(ips)
    end
    if absent(spec.clusterIPs) then spec.clusterIPs = json.array { spec.clusterIP } end
    if absent(spec.ipFamilies) then spec.ipFamilies = json.array { "IPv4" } end
    if absent(spec.ipFamilyPolicy) then
      -- headless without a selector: as many families as the cluster has
      local headless = spec.clusterIP == "None"
      local selector = is_object(spec.selector) and next(spec.selector) ~= nil
      spec.ipFamilyPolicy = headless and not selector and "RequireDualStack" or "SingleStack"
    end
  end
  if needs_node_ports(spec) then
    for _, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
      if is_object(p) and absent(p.nodePort) then
        p.nodePort = free_port(ports)
        ports[p.nodePort] = true
      end
    end
  end
  if not old then obj.status = { loadBalancer = {} } end
end

return _M
