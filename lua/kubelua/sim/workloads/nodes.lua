-- kubelua.sim.workloads.nodes: the simulator's fake Nodes and its
-- scheduler, toward KWOK's model. The node controller ("nodes") makes
-- Nodes node-1 … node-N at start (opts.nodes: N, default 3, or
-- { count = N, allocatable = { cpu =, memory =, pods =, … } }), Ready,
-- with capacity and allocatable (KWOK's cpu 32, memory 256Gi, pods 110
-- unless given), addresses and nodeInfo as a kubelet reports them.
--
-- The scheduler ("scheduler") runs kube-scheduler 1.26's filters on each
-- Pod that has no spec.nodeName, in its order: the Node Ready and not
-- unschedulable, its NoSchedule and NoExecute taints tolerated, the Pod's
-- nodeSelector and required node affinity, then its requests (cpu,
-- memory, ephemeral-storage, extended resources; containers summed, the
-- largest init container, overhead) and one Pod more within what the
-- Node has allocatable beside the Pods bound to it. Among the Nodes that
-- pass, it binds to the one with the fewest untolerated PreferNoSchedule
-- taints, then the fewest Pods, then the first by name, so that Pods
-- spread round-robin. A Pod no Node fits gets PodScheduled False
-- (Unschedulable) with the scheduler's message, each Node's reason
-- counted and sorted, and the preemption's (no Pod has a lower priority
-- to evict, so none is), and is tried again when a Node changes or a
-- bound Pod goes. A Pod bound to a Node with a NoExecute taint it does
-- not tolerate is deleted, as the taint manager does (condition
-- DisruptionTarget first; after its tolerationSeconds when it tolerates
-- the taint for a while).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"

local kube = require "kubelua"

local type, pairs, ipairs, setmetatable, tostring, tonumber, error =
  type, pairs, ipairs, setmetatable, tostring, tonumber, error
local format = string.format
local sort, concat = table.sort, table.concat
local ceil = math.ceil
local is_array, null = json.is_array, json.null
local copy = util.copy
local is_object = common.is_object

local _M = {}

local NODE_CTX = { user_agent = "kubelet", internal = true }

-- KWOK's fake Node's resources.
_M.RESOURCES = { cpu = "32", memory = "256Gi", pods = "110" }

-- The fake Node number i of the simulator; resources: its capacity and
-- allocatable (default RESOURCES).
function _M.node(i, resources)
  local name = "node-" .. i
  local now = util.timestamp()
  local function cond(ctype, status, reason, message)
    return { type = ctype, status = status, lastHeartbeatTime = now, lastTransitionTime = now,
      reason = reason, message = message }
  end
  resources = resources or _M.RESOURCES
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

-- The count and resources opts.nodes asks for: a number, or { count =,
-- allocatable = }; raises, naming what was wrong, on anything else.
function _M.options(v)
  if v == nil then return 3, _M.RESOURCES end
  local function whole(n)
    return type(n) == "number" and n >= 0 and n % 1 == 0 and n <= 250
  end
  if type(v) == "number" and whole(v) then return v, _M.RESOURCES end
  if type(v) ~= "table" then
    error("sim: nodes must be a whole number from 0 to 250 or a table { count, allocatable }, "
      .. "got " .. tostring(v), 0)
  end
  for k in pairs(v) do
    if k ~= "count" and k ~= "allocatable" then
      error("sim: unknown nodes option " .. tostring(k) .. " (known: allocatable, count)", 0)
    end
  end
  if v.count ~= nil and not whole(v.count) then
    error("sim: nodes.count must be a whole number from 0 to 250, got " .. tostring(v.count), 0)
  end
  local res = {}
  for k, q in pairs(_M.RESOURCES) do res[k] = q end
  if v.allocatable ~= nil and type(v.allocatable) ~= "table" then
    error("sim: nodes.allocatable must be a table of resource quantities, got "
      .. type(v.allocatable), 0)
  end
  for k, q in pairs(v.allocatable or {}) do
    if type(k) ~= "string" or (type(q) ~= "string" and type(q) ~= "number")
        or not _M.value(q) then
      error(format("sim: nodes.allocatable.%s must be a quantity (\"4\", \"500m\", \"16Gi\"), "
        .. "got %s", tostring(k), tostring(q)), 0)
    end
    res[k] = tostring(q)
  end
  return v.count or 3, res
end

-- new(store, defer, opts): the node controller; opts.nodes as options takes.
function _M.new_nodes(store, defer, opts)
  local n, resources = _M.options(opts.nodes)
  return setmetatable({ store = store, defer = defer, n = n, allocatable = resources }, Nodes)
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
      local node = _M.node(i, self.allocatable)
      if not res.objects[node.metadata.name] then
        local _, err = s:create(res, nil, node, NODE_CTX)
        if err then error("creating node " .. node.metadata.name .. ": "
          .. tostring(err.message), 0) end
      end
    end
  end)
end

-- Resources --------------------------------------------------------------------

local SUFFIX = { n = 1e-9, u = 1e-6, m = 1e-3, [""] = 1, k = 1e3, M = 1e6, G = 1e9, T = 1e12,
  P = 1e15, E = 1e18, Ki = 2 ^ 10, Mi = 2 ^ 20, Gi = 2 ^ 30, Ti = 2 ^ 40, Pi = 2 ^ 50,
  Ei = 2 ^ 60 }

-- The value of a quantity ("500m" 0.5, "1Gi" 1073741824, "1e3" 1000),
-- or nil when q is not one.
function _M.value(q)
  if type(q) == "number" then return q end
  local num, suffix = tostring(q):match("^([+-]?%d*%.?%d*)(%a*)$")
  local n = tonumber(num)
  if n and SUFFIX[suffix] then return n * SUFFIX[suffix] end
  local m, e = tostring(q):match("^([+-]?%d*%.?%d*)[eE]([+-]?%d+)$")
  if tonumber(m) and tonumber(e) then return tonumber(m) * 10 ^ tonumber(e) end
  return nil
end

-- A resource's amount as the scheduler compares it: cpu in millicores,
-- anything else in units, rounded up.
local function amount(name, q)
  local v = _M.value(q) or 0
  return ceil((name == "cpu" and v * 1000 or v) - 1e-9)
end

local function add_to(sum, m)
  for name, q in pairs(is_object(m) and m or {}) do
    sum[name] = (sum[name] or 0) + amount(name, q)
  end
end

-- What a pod spec requests, as the scheduler counts it: its containers'
-- requests summed, at least each init container's, plus its overhead.
function _M.requests(spec)
  local sum = {}
  for _, c in ipairs(is_array(spec.containers) and spec.containers or {}) do
    add_to(sum, is_object(c.resources) and c.resources.requests)
  end
  for _, c in ipairs(is_array(spec.initContainers) and spec.initContainers or {}) do
    local one = {}
    add_to(one, is_object(c.resources) and c.resources.requests)
    for name, n in pairs(one) do
      if n > (sum[name] or 0) then sum[name] = n end
    end
  end
  add_to(sum, spec.overhead)
  return sum
end

-- Taints -----------------------------------------------------------------------

-- Whether toleration t tolerates taint (v1 Toleration.ToleratesTaint).
local function tolerates(t, taint)
  if not is_object(t) then return false end
  if t.effect ~= nil and t.effect ~= "" and t.effect ~= taint.effect then return false end
  if t.key ~= nil and t.key ~= "" and t.key ~= taint.key then return false end
  if t.operator == "Exists" then return true end
  if t.operator == nil or t.operator == "" or t.operator == "Equal" then
    return (t.value or "") == (taint.value or "")
  end
  return false
end

local function tolerated(spec, taint)
  for _, t in ipairs(is_array(spec.tolerations) and spec.tolerations or {}) do
    if tolerates(t, taint) then return t end
  end
  return nil
end

local function taints_of(node)
  local t = is_object(node.spec) and node.spec.taints
  return is_array(t) and t or {}
end

-- The first of node's taints with one of effects that spec does not
-- tolerate, or nil.
local function untolerated(spec, node, effects)
  for _, taint in ipairs(taints_of(node)) do
    if is_object(taint) and effects[taint.effect] and not tolerated(spec, taint) then
      return taint
    end
  end
  return nil
end

local FILTERED = { NoSchedule = true, NoExecute = true }

-- The first NoSchedule or NoExecute taint of node that pod spec spec
-- does not tolerate, or nil: what keeps it off the Node.
function _M.untolerated(spec, node) return untolerated(spec, node, FILTERED) end

local function preferred_taints(spec, node)
  local n = 0
  for _, taint in ipairs(taints_of(node)) do
    if is_object(taint) and taint.effect == "PreferNoSchedule" and not tolerated(spec, taint) then
      n = n + 1
    end
  end
  return n
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
  self.asked = {}   -- pod key → what it requests (requests())
  self.on_node = {} -- node name → number of such Pods
  self.used = {}    -- node name → resource → what its Pods request
  self.waiting = {} -- pod key → true: unschedulable, tried again when a Node changes
  self.evicting = {} -- pod key → true: its deletion by a NoExecute taint is noted
end

local function node_of(pod)
  local n = is_object(pod.spec) and pod.spec.nodeName
  if type(n) == "string" and n ~= "" then return n end
  return nil
end

local function charge(used, asked, sign)
  for name, n in pairs(asked) do used[name] = (used[name] or 0) + sign * n end
end

-- Counts the Pod under key on node (nil: on none); true when it left one.
function Scheduler:count(key, node, pod)
  local was = self.placed[key]
  if was == node then return false end
  if was then
    self.on_node[was] = (self.on_node[was] or 1) - 1
    charge(self.used[was], self.asked[key], -1)
    self.asked[key] = nil
  end
  if node then
    self.on_node[node] = (self.on_node[node] or 0) + 1
    self.asked[key] = _M.requests(pod.spec)
    self.used[node] = self.used[node] or {}
    charge(self.used[node], self.asked[key], 1)
  end
  self.placed[key] = node
  return was ~= nil
end

-- Gives the unschedulable Pods another try.
function Scheduler:retry()
  for key in pairs(self.waiting) do self:note(key) end
end

-- store.observe: a Pod without a node is noted for binding; a Node that
-- changes gives the unschedulable Pods another try, and has its Pods
-- checked against its NoExecute taints; a Pod that leaves a Node frees
-- room for the unschedulable ones.
function Scheduler:observe(res, e, etype)
  if self.resources ~= self.store.resources then self:forget() end
  if res.gv ~= "v1" or not res.builtin then return end
  if res.name == "nodes" then
    self:retry()
    if etype ~= "DELETED" then self:note_evictions(e.key) end
    return
  end
  if res.name ~= "pods" then return end
  local pod = common.table_of(e) -- not one a writer stored as bytes
  if etype == "DELETED" then
    self.waiting[e.key] = nil
    self.evicting[e.key] = nil
    if self:count(e.key, nil) then self:retry() end
    return
  end
  if not pod then return end
  local node = node_of(pod)
  if self:count(e.key, not common.is_terminal(pod) and node or nil, pod) then self:retry() end
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

-- A Node that is Ready and not cordoned (spec.unschedulable).
local function ready(node)
  if is_object(node.spec) and node.spec.unschedulable then return false end
  local st = is_object(node.status) and node.status
  for _, c in ipairs(st and is_array(st.conditions) and st.conditions or {}) do
    if c.type == "Ready" then return c.status == "True" end
  end
  return false
end

_M.ready = ready

local UNSCHEDULABLE = { key = "node.kubernetes.io/unschedulable", effect = "NoSchedule" }

-- Why pod may not go to node under the scheduler's filters, in their
-- order, as the reasons the Unschedulable message counts, and whether
-- preemption could help (only when resources are short); nil when it may.
function Scheduler:filter(pod, node)
  local spec = pod.spec
  if not ready(node) and not (is_object(node.spec) and node.spec.unschedulable
      and tolerated(spec, UNSCHEDULABLE)) then
    return { "node(s) were unschedulable" }
  end
  local taint = untolerated(spec, node, FILTERED)
  if taint then
    return { format("node(s) had untolerated taint {%s: %s}", tostring(taint.key),
      tostring(taint.value or "")) }
  end
  if not fits(pod, node) then return { "node(s) didn't match Pod's node affinity/selector" } end
  local name = node.metadata.name
  local alloc = is_object(node.status) and is_object(node.status.allocatable)
    and node.status.allocatable or {}
  local used = self.used[name] or {}
  local why = {}
  if (self.on_node[name] or 0) + 1 > amount("pods", alloc.pods) then
    why[1] = "Too many pods"
  end
  local asked = _M.requests(spec)
  local names = {}
  for r, n in pairs(asked) do
    if n > 0 and r ~= "pods" then names[#names + 1] = r end
  end
  local order = { cpu = 1, memory = 2, ["ephemeral-storage"] = 3 }
  sort(names, function(x, y)
    local ox, oy = order[x] or 4, order[y] or 4
    if ox ~= oy then return ox < oy end
    return x < y
  end)
  for _, r in ipairs(names) do
    local have = alloc[r] ~= nil and amount(r, alloc[r]) or 0
    if asked[r] > have - (used[r] or 0) then why[#why + 1] = "Insufficient " .. r end
  end
  if #why > 0 then return why, true end
  return nil
end

-- "N reason, M reason" of a histogram, sorted as the scheduler's FitError.
local function histogram(counts)
  local parts = {}
  for reason, n in pairs(counts) do parts[#parts + 1] = format("%d %s", n, reason) end
  sort(parts)
  return concat(parts, ", ")
end

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
  local best, best_score
  local reasons, preemption = {}, {}
  for _, node in ipairs(nodes) do
    local why, resolvable = self:filter(pod, node)
    if why then
      for _, r in ipairs(why) do reasons[r] = (reasons[r] or 0) + 1 end
      local p = resolvable and "No preemption victims found for incoming pod"
        or "Preemption is not helpful for scheduling"
      preemption[p] = (preemption[p] or 0) + 1
    else
      local score = { preferred_taints(pod.spec, node), self.on_node[node.metadata.name] or 0 }
      if not best or score[1] < best_score[1]
          or (score[1] == best_score[1] and score[2] < best_score[2]) then
        best, best_score = node, score
      end
    end
  end
  local obj = copy(pod)
  obj.status = is_object(obj.status) and obj.status or {}
  local now = util.timestamp()
  if not best then
    self.waiting[key] = true
    local msg = format("0/%d nodes are available: %s. preemption: 0/%d nodes are available: "
      .. "%s..", #nodes, histogram(reasons), #nodes, histogram(preemption))
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

-- The taint manager ----------------------------------------------------------------

-- Notes the eviction of each Pod bound to Node name that does not
-- tolerate one of its NoExecute taints: at once, or after the shortest
-- tolerationSeconds of the tolerations that let it stay for a while.
function Scheduler:note_evictions(name)
  local node = common.obj_of(self.store:resource("v1", "nodes").objects[name])
  if not node then return end
  local any = false
  for _, taint in ipairs(taints_of(node)) do
    if is_object(taint) and taint.effect == "NoExecute" then any = true end
  end
  if not any then return end
  local pods = self.store:resource("v1", "pods").objects
  for key, at in pairs(self.placed) do
    local pod = at == name and common.table_of(pods[key])
    if pod and not self.evicting[key] and not pod.metadata.deletionTimestamp then
      local wait = 0
      for _, taint in ipairs(taints_of(node)) do
        if is_object(taint) and taint.effect == "NoExecute" then
          local t = tolerated(pod.spec, taint)
          if not t then
            wait = -1
            break
          end
          local secs = tonumber(t.tolerationSeconds)
          if secs and (wait == 0 or secs < wait) then wait = secs end
        end
      end
      if wait ~= 0 then
        self.evicting[key] = true
        local function evict()
          self.defer("evict " .. key, "scheduler", function() self:evict(key, name) end)
        end
        if wait > 0 then kube.after(wait, evict) else evict() end
      end
    end
  end
end

-- Deletes the Pod under key when it is still on Node name and still
-- does not tolerate its NoExecute taints (or only for a while).
function Scheduler:evict(key, name)
  self.evicting[key] = nil
  local s = self.store
  local res = s:resource("v1", "pods")
  local e = res.objects[key]
  local pod = common.table_of(e)
  local node = common.obj_of(s:resource("v1", "nodes").objects[name])
  if not (pod and node) or node_of(pod) ~= name or pod.metadata.deletionTimestamp then return end
  local still = false
  for _, taint in ipairs(taints_of(node)) do
    if is_object(taint) and taint.effect == "NoExecute" then
      local t = tolerated(pod.spec, taint)
      if not t or t.tolerationSeconds ~= nil then still = true end
    end
  end
  if not still then return end
  local obj = copy(pod)
  obj.status = is_object(obj.status) and obj.status or {}
  obj.status.conditions = common.set_condition(obj.status.conditions, { type = "DisruptionTarget",
    status = "True", lastProbeTime = null, lastTransitionTime = util.timestamp(),
    reason = "DeletionByTaintManager", message = "Taint manager: deleting due to NoExecute taint" })
  e = common.write(s, res, e, obj)
  common.delete_pod(s, e)
end

-- At start: the Pods already stored without a node.
function Scheduler:sync()
  local res = self.store:resource("v1", "pods")
  for _, e in pairs(res.objects) do self:observe(res, e, "ADDED") end
end

return _M
