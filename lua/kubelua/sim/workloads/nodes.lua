-- kubelua.sim.workloads.nodes: the simulator's fake Nodes and its
-- scheduler, toward KWOK's model. The node controller ("nodes") makes
-- Nodes node-1 … node-N at start (opts.nodes, default 3), Ready, with
-- capacity, allocatable, addresses and nodeInfo as a kubelet reports
-- them. The scheduler ("scheduler") binds each Pod that has no
-- spec.nodeName to the Ready, schedulable Node with the fewest Pods (the
-- first by name among equals, so that Pods spread round-robin), among
-- those its nodeSelector and required node affinity allow; a Pod no Node
-- fits gets PodScheduled False (Unschedulable) and is tried again when a
-- Node changes.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"

local type, pairs, ipairs, setmetatable, tostring, error =
  type, pairs, ipairs, setmetatable, tostring, error
local format = string.format
local sort = table.sort
local is_array, null = json.is_array, json.null
local copy = util.copy
local is_object = common.is_object

local _M = {}

local NODE_CTX = { user_agent = "kubelet", internal = true }

-- The fake Node number i of the simulator.
function _M.node(i)
  local name = "node-" .. i
  local now = util.timestamp()
  local function cond(ctype, status, reason, message)
    return { type = ctype, status = status, lastHeartbeatTime = now, lastTransitionTime = now,
      reason = reason, message = message }
  end
  local resources = { cpu = "4", memory = "16Gi", pods = "110", ["ephemeral-storage"] = "100Gi" }
  return { apiVersion = "v1", kind = "Node",
    metadata = { name = name,
      labels = { ["beta.kubernetes.io/arch"] = "amd64", ["beta.kubernetes.io/os"] = "linux",
        ["kubernetes.io/arch"] = "amd64", ["kubernetes.io/hostname"] = name,
        ["kubernetes.io/os"] = "linux", type = "kwok" },
      annotations = { ["node.alpha.kubernetes.io/ttl"] = "0" } },
    spec = { podCIDR = format("10.244.%d.0/24", i), podCIDRs = json.array {
      format("10.244.%d.0/24", i) } },
    status = {
      capacity = copy(resources), allocatable = copy(resources),
      conditions = json.array {
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
          "kubelet has sufficient memory available"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID",
          "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
      },
      addresses = json.array { { type = "InternalIP", address = format("172.18.0.%d", i + 1) },
        { type = "Hostname", address = name } },
      daemonEndpoints = { kubeletEndpoint = { Port = 10250 } },
      nodeInfo = { machineID = common.hex64(name):sub(1, 32),
        systemUUID = util.uid(), bootID = util.uid(),
        kernelVersion = "6.1.0-kwok", osImage = "Debian GNU/Linux 12 (bookworm)",
        containerRuntimeVersion = "containerd://1.6.19", kubeletVersion = "v1.26.0",
        kubeProxyVersion = "v1.26.0", operatingSystem = "linux", architecture = "amd64" },
    } }
end

-- Nodes ------------------------------------------------------------------------

local Nodes = {}
Nodes.__index = Nodes

-- new(store, defer, opts): the node controller; opts.nodes Nodes.
function _M.new_nodes(store, defer, opts)
  return setmetatable({ store = store, defer = defer, n = opts.nodes or 3 }, Nodes)
end

-- store.observe: a store reset (the /_sim control's) lost the Nodes.
function Nodes:observe()
  if self.resources ~= self.store.resources then self:sync() end
end

-- Makes the Nodes that are missing.
function Nodes:sync()
  self.resources = self.store.resources
  self.defer("nodes", "nodes", function()
    local s = self.store
    local res = s:resource("v1", "nodes")
    for i = 1, self.n do
      local node = _M.node(i)
      if not res.objects[node.metadata.name] then
        local _, err = s:create(res, nil, node, NODE_CTX)
        if err then error("creating node " .. node.metadata.name .. ": "
          .. tostring(err.message), 0) end
      end
    end
  end)
end

-- Scheduler --------------------------------------------------------------------

local Scheduler = {}
Scheduler.__index = Scheduler

function _M.new_scheduler(store, defer)
  local self = setmetatable({ store = store, defer = defer }, Scheduler)
  self:forget()
  return self
end

-- Starts with no Pods placed (a new store, or a reset one).
function Scheduler:forget()
  self.resources = self.store.resources
  self.placed = {}  -- pod key → node name, for the Pods that count on a node
  self.on_node = {} -- node name → number of such Pods
  self.waiting = {} -- pod key → true: unschedulable, tried again when a Node changes
end

local function node_of(pod)
  local n = is_object(pod.spec) and pod.spec.nodeName
  if type(n) == "string" and n ~= "" then return n end
  return nil
end

function Scheduler:count(key, node)
  local was = self.placed[key]
  if was == node then return end
  if was then self.on_node[was] = (self.on_node[was] or 1) - 1 end
  if node then self.on_node[node] = (self.on_node[node] or 0) + 1 end
  self.placed[key] = node
end

-- store.observe: a Pod without a node is noted for binding; a Node that
-- changes gives the unschedulable Pods another try.
function Scheduler:observe(res, e, etype)
  if self.resources ~= self.store.resources then self:forget() end
  if res.gv ~= "v1" or not res.builtin then return end
  if res.name == "nodes" then
    for key in pairs(self.waiting) do self:note(key) end
    return
  end
  if res.name ~= "pods" then return end
  local pod = common.table_of(e) -- not one a writer stored as bytes
  if etype == "DELETED" then
    self:count(e.key, nil)
    self.waiting[e.key] = nil
    return
  end
  if not pod then return end
  local node = node_of(pod)
  self:count(e.key, not common.is_terminal(pod) and node or nil)
  if node then
    self.waiting[e.key] = nil
  elseif not pod.metadata.deletionTimestamp then
    self:note(e.key)
  end
end

function Scheduler:note(key)
  self.defer("schedule " .. key, "scheduler", function() self:schedule(key) end)
end

-- Whether pod (or a pod template) may run on node: its nodeSelector and
-- required node affinity.
local function fits(pod, node)
  local spec = pod.spec
  local labels = node.metadata.labels
  if is_object(spec.nodeSelector) then
    for k, v in pairs(spec.nodeSelector) do
      if not (is_object(labels) and labels[k] == v) then return false end
    end
  end
  local aff = is_object(spec.affinity) and spec.affinity.nodeAffinity
  local req = is_object(aff) and aff.requiredDuringSchedulingIgnoredDuringExecution
  local terms = is_object(req) and req.nodeSelectorTerms
  if not is_array(terms) or #terms == 0 then return true end
  for _, term in ipairs(terms) do -- terms are ORed, their requirements ANDed
    local ok = true
    local reqs = common.selector({ matchExpressions = term.matchExpressions })
    if not util.labels_match(reqs, labels ~= null and labels or {}) then ok = false end
    for _, f in ipairs(is_array(term.matchFields) and term.matchFields or {}) do
      local sel = common.selector({ matchExpressions = { { key = f.key, operator = f.operator,
        values = f.values } } })
      if not util.labels_match(sel, { ["metadata.name"] = node.metadata.name }) then
        ok = false
      end
    end
    if ok then return true end
  end
  return false
end

_M.fits = fits

local function ready(node)
  if is_object(node.spec) and node.spec.unschedulable then return false end
  local st = is_object(node.status) and node.status
  for _, c in ipairs(st and is_array(st.conditions) and st.conditions or {}) do
    if c.type == "Ready" then return c.status == "True" end
  end
  return false
end

_M.ready = ready

-- Binds the Pod under key, or says why it cannot be.
function Scheduler:schedule(key)
  local s = self.store
  local res = s:resource("v1", "pods")
  local e = res.objects[key]
  local pod = common.obj_of(e)
  if not pod or node_of(pod) or pod.metadata.deletionTimestamp then return end
  local nodes = {}
  for _, ne in pairs(s:resource("v1", "nodes").objects) do nodes[#nodes + 1] = ne.obj end
  sort(nodes, function(a, b) return a.metadata.name < b.metadata.name end)
  local best, unready, mismatch = nil, 0, 0
  for _, node in ipairs(nodes) do
    if not ready(node) then
      unready = unready + 1
    elseif not fits(pod, node) then
      mismatch = mismatch + 1
    elseif not best or (self.on_node[node.metadata.name] or 0)
        < (self.on_node[best.metadata.name] or 0) then
      best = node
    end
  end
  local obj = copy(pod)
  obj.status = is_object(obj.status) and obj.status or {}
  local now = util.timestamp()
  if not best then
    self.waiting[key] = true
    local why = {}
    if mismatch > 0 then
      why[#why + 1] = format("%d node(s) didn't match Pod's node affinity/selector", mismatch)
    end
    if unready > 0 then why[#why + 1] = format("%d node(s) were unschedulable", unready) end
    local msg = format("0/%d nodes are available: %s. preemption: 0/%d nodes are available: "
      .. "%d Preemption is not helpful for scheduling..", #nodes, table.concat(why, ", "),
      #nodes, #nodes)
    if #nodes == 0 then msg = "no nodes available to schedule pods" end
    obj.status.phase = obj.status.phase or "Pending"
    obj.status.conditions = common.set_condition(obj.status.conditions, { type = "PodScheduled",
      status = "False", lastProbeTime = null, lastTransitionTime = now,
      reason = "Unschedulable", message = msg })
    common.write(s, res, e, obj)
    return
  end
  -- the binding subresource: spec.nodeName and PodScheduled in one write
  self.waiting[key] = nil
  obj.spec.nodeName = best.metadata.name
  obj.status.phase = obj.status.phase or "Pending"
  obj.status.conditions = common.set_condition(obj.status.conditions, { type = "PodScheduled",
    status = "True", lastProbeTime = null, lastTransitionTime = now })
  obj.metadata.resourceVersion = tostring(s:next_rv())
  s:put(res, obj, "MODIFIED", e)
end

-- At start: the Pods already stored without a node.
function Scheduler:sync()
  local res = self.store:resource("v1", "pods")
  for _, e in pairs(res.objects) do self:observe(res, e, "ADDED") end
end

return _M
