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
local util = require "kubelua.sim.util"

local type, pairs, ipairs, next, tostring, tonumber = type, pairs, ipairs, next, tostring, tonumber
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

local function needs_hc_node_port(spec)
  return spec.type == "LoadBalancer" and spec.externalTrafficPolicy == "Local"
end

local function node_ports(spec)
  local out = {}
  for i, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
    out[i] = is_object(p) and p.nodePort or nil
  end
  return out
end

-- Whether an update left a value as it was (null and absent alike).
local function same(a, b)
  if a == null then a = nil end
  if b == null then b = nil end
  return util.equal(a, b)
end

-- dropTypeDependentFields: a type change drops what the new type has no
-- use for, when the update left it as it was.
local function drop_type_dependent(obj, spec, ospec)
  if ospec.type ~= "ExternalName" and spec.type == "ExternalName" then
    if same(spec.clusterIP, ospec.clusterIP) and same(spec.clusterIPs, ospec.clusterIPs) then
      spec.clusterIP, spec.clusterIPs = nil, nil
    end
    if same(spec.ipFamilies, ospec.ipFamilies) then spec.ipFamilies = nil end
    if same(spec.ipFamilyPolicy, ospec.ipFamilyPolicy) then spec.ipFamilyPolicy = nil end
  end
  if needs_node_ports(ospec) and not needs_node_ports(spec)
      and same(node_ports(spec), node_ports(ospec)) then
    for _, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
      if is_object(p) then p.nodePort = nil end
    end
  end
  if needs_hc_node_port(ospec) and not needs_hc_node_port(spec)
      and same(spec.healthCheckNodePort, ospec.healthCheckNodePort) then
    spec.healthCheckNodePort = nil
  end
  if ospec.type == "LoadBalancer" and spec.type ~= "LoadBalancer" then
    if same(spec.allocateLoadBalancerNodePorts, ospec.allocateLoadBalancerNodePorts) then
      spec.allocateLoadBalancerNodePorts = nil
    end
    if same(spec.loadBalancerClass, ospec.loadBalancerClass) then spec.loadBalancerClass = nil end
  end
  local etp = function(t) return t == "NodePort" or t == "LoadBalancer" end
  if etp(ospec.type) and not etp(spec.type)
      and same(spec.externalTrafficPolicy, ospec.externalTrafficPolicy) then
    spec.externalTrafficPolicy = nil
  end
  if spec.type ~= "LoadBalancer" then obj.status = { loadBalancer = {} } end
end

-- patchAllocatedValues: what the update leaves out of what was allocated
-- stays (node ports by port name, unless another port took them).
local function patch_allocated(spec, ospec)
  if spec.type ~= "ExternalName" and ospec.type ~= "ExternalName" then
    if absent(spec.clusterIP) then spec.clusterIP = ospec.clusterIP end
    if absent(spec.clusterIPs) and spec.clusterIP == ospec.clusterIP then
      spec.clusterIPs = ospec.clusterIPs
    end
    if absent(spec.ipFamilies) then spec.ipFamilies = ospec.ipFamilies end
    if absent(spec.ipFamilyPolicy) then spec.ipFamilyPolicy = ospec.ipFamilyPolicy end
  end
  if needs_node_ports(spec) and needs_node_ports(ospec) then
    local used, was = {}, {}
    for _, n in pairs(node_ports(spec)) do used[n] = true end
    for _, p in ipairs(is_array(ospec.ports) and ospec.ports or {}) do
      if is_object(p) then was[tostring(p.name or "")] = p.nodePort end
    end
    for _, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
      local n = is_object(p) and absent(p.nodePort) and was[tostring(p.name or "")]
      if n and not used[n] then p.nodePort = n end
    end
  end
  if needs_hc_node_port(spec) and needs_hc_node_port(ospec)
      and absent(spec.healthCheckNodePort) then
    spec.healthCheckNodePort = ospec.healthCheckNodePort
  end
end

local function cause(causes, field, message)
  causes[#causes + 1] = { field = field, reason = "FieldValueInvalid", message = message }
end

-- Fills what the registry allocates into obj, a Service being created
-- (old nil) or updated (old: the stored one); others: the stored
-- Services, for what is taken; keep_status: a status given stays (objects
-- loaded with --load). Returns the causes of a 422 when an address or port
-- asked for is out of range or taken, else nil.
function _M.allocate(obj, old, others, keep_status)
  local spec = obj.spec
  local ospec = old and is_object(old.spec) and old.spec or nil
  if ospec then
    drop_type_dependent(obj, spec, ospec)
    patch_allocated(spec, ospec)
  end
  local ips, ports = taken(others)
  if ospec then -- what it holds is its own
    ips[ospec.clusterIP or ""] = nil
    for _, n in pairs(node_ports(ospec)) do ports[n] = nil end
    if ospec.healthCheckNodePort then ports[ospec.healthCheckNodePort] = nil end
  end
  local causes = {}
  if spec.type == "ExternalName" then
    spec.clusterIP, spec.clusterIPs, spec.ipFamilies, spec.ipFamilyPolicy = nil, nil, nil, nil
  else
    if absent(spec.clusterIP) then
      local first = is_array(spec.clusterIPs) and spec.clusterIPs[1]
      spec.clusterIP = type(first) == "string" and first or free_ip(ips)
    elseif spec.clusterIP ~= "None" and not (ospec and spec.clusterIP == ospec.clusterIP) then
      local ip = tostring(spec.clusterIP)
      local a, b = ip:match("^(%d+)%.(%d+)%.%d+%.%d+$")
      local why = ips[ip] and "provided IP is already allocated"
      if not (a == "10" and tonumber(b) >= 96 and tonumber(b) <= 111) then
        why = format("the provided IP (%s) is not in the valid range. The range of valid IPs "
          .. "is 10.96.0.0/12", ip)
      end
      if why then
        cause(causes, "spec.clusterIPs", format('Invalid value: []string{"%s"}: failed to '
          .. "allocate IP %s: %s", ip, ip, why))
      end
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
    local by_port = {} -- one node port for a port number, whatever its protocols
    local mine = ospec and node_ports(ospec) or {}
    local held = {}
    for _, n in pairs(mine) do held[n] = true end
    for i, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
      if is_object(p) and not absent(p.nodePort) then
        local n = p.nodePort
        local why = (type(n) ~= "number" or n < 30000 or n > 32767)
          and "provided port is not in the valid range. The range of valid ports is 30000-32767"
          or (ports[n] and not held[n] and not by_port[p.port]) and "provided port is already "
            .. "allocated"
        if why then
          cause(causes, format("spec.ports[%d].nodePort", i - 1), format("Invalid value: %s: %s",
            tostring(n), why))
        end
        by_port[p.port] = n
        ports[n] = true
      end
    end
    for _, p in ipairs(is_array(spec.ports) and spec.ports or {}) do
      if is_object(p) and absent(p.nodePort) then
        p.nodePort = by_port[p.port] or free_port(ports)
        by_port[p.port] = p.nodePort
        ports[p.nodePort] = true
      end
    end
  end
  if needs_hc_node_port(spec) and absent(spec.healthCheckNodePort) then
    spec.healthCheckNodePort = free_port(ports)
  end
  if not old and not (keep_status and is_object(obj.status)) then
    obj.status = { loadBalancer = {} }
  end
  return #causes > 0 and causes or nil
end

return _M
