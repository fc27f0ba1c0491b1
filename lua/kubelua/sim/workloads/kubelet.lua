-- kubelua.sim.workloads.kubelet: the kubelets of the simulator's Nodes,
-- toward KWOK's model: no container runs, but each Pod bound to a Node
-- that exists goes through the states a kubelet reports. After
-- start_delay seconds it is Running with its containers started and
-- ready (conditions Initialized, Ready, ContainersReady, PodScheduled;
-- podIP, hostIP, startTime, containerStatuses). A Pod that does not
-- restart (restartPolicy Never or OnFailure: a Job's) ends run_time
-- seconds later, Succeeded, or Failed when failure is injected; one that
-- restarts (Always) with failure injected crash-loops instead (Running,
-- not Ready). A Pod on a Node is deleted gracefully (deletionTimestamp,
-- deletionGracePeriodSeconds) and goes when its kubelet confirms it,
-- after stop_delay seconds.
--
-- opts.pods = { start_delay =, run_time =, stop_delay = (seconds, default
-- 0), fail = function(pod) -> true to fail it }; a Pod's annotations
-- sim.kubelua.io/start-delay, sim.kubelua.io/run-time (seconds) and
-- sim.kubelua.io/fail ("true") say the same for that Pod.

local kube = require "kubelua"
local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local common = require "kubelua.sim.workloads.common"
local defaults = require "kubelua.sim.workloads.defaults"

local type, pairs, ipairs, setmetatable, tostring, tonumber, error, pcall =
  type, pairs, ipairs, setmetatable, tostring, tonumber, error, pcall
local format = string.format
local sort = table.sort
local is_array, null = json.is_array, json.null
local copy = util.copy
local is_object = common.is_object

local _M = {}
local Kubelet = {}
Kubelet.__index = Kubelet

local ANN = "sim.kubelua.io/"
local CTX = { user_agent = "kubelet" }
local STATUS_CTX = { user_agent = "kubelet", subresource = "status" }

local OPTIONS = { start_delay = "number", run_time = "number", stop_delay = "number",
  fail = "function" }

-- Raises, naming what was wrong, when opts.pods is not what new takes.
function _M.check(pods)
  if pods == nil then return end
  if type(pods) ~= "table" then
    error("sim: pods must be a table { start_delay, run_time, stop_delay, fail }, got "
      .. type(pods), 3)
  end
  for k, v in pairs(pods) do
    local want = OPTIONS[k]
    if not want then
      error("sim: unknown pods option " .. tostring(k)
        .. " (known: fail, run_time, start_delay, stop_delay)", 3)
    end
    if type(v) ~= want or (want == "number" and not (v >= 0 and v < math.huge)) then
      error(format("sim: pods.%s must be %s, got %s", k,
        want == "number" and "a number of seconds, at least 0" or "a function",
        type(v) == "number" and tostring(v) or type(v)), 3)
    end
  end
end

function _M.new(store, defer, opts)
  local self = setmetatable({ store = store, defer = defer, opts = opts.pods or {},
    resources = store.resources, timers = {}, ips = {} }, Kubelet)
  -- the Pod registry's graceful deletion, which waits for a kubelet
  store.graceful = _M.grace
  return self
end

-- Seconds a deletion of obj waits for its kubelet, or nil: deleted at
-- once (not a Pod on a Node, ended, or gracePeriodSeconds 0).
function _M.grace(res, obj, dopts)
  if not (res.builtin and res.gv == "v1" and res.name == "pods") then return nil end
  local spec = is_object(obj.spec) and obj.spec or {}
  if type(spec.nodeName) ~= "string" or spec.nodeName == "" or common.is_terminal(obj) then
    return nil
  end
  local g = tonumber(dopts.gracePeriodSeconds)
  if g == nil then g = tonumber(spec.terminationGracePeriodSeconds) or 30 end
  if g <= 0 then return nil end
  return g
end

local function annotation(pod, name)
  local a = pod.metadata.annotations
  return is_object(a) and a[ANN .. name] or nil
end

function Kubelet:delay(pod, name)
  local v = tonumber(annotation(pod, name:gsub("_", "-")))
  if v and v >= 0 then return v end
  return self.opts[name] or 0
end

function Kubelet:fails(pod)
  if annotation(pod, "fail") == "true" then return true end
  local f = self.opts.fail
  if not f then return false end
  local ok, r = pcall(f, copy(pod))
  if not ok then
    kube.log.error("sim: pods.fail raised", { pod = pod.metadata.namespace .. "/"
      .. pod.metadata.name, error = tostring(r) })
    return false
  end
  return r and true or false
end

-- What the kubelet does next for pod: "start", "end", "remove" or nil.
local function next_step(pod)
  local spec = pod.spec
  if not is_object(spec) or type(spec.nodeName) ~= "string" or spec.nodeName == "" then
    return nil
  end
  if pod.metadata.deletionTimestamp then
    return (pod.metadata.deletionGracePeriodSeconds or 0) > 0 and "remove" or nil
  end
  local st = is_object(pod.status) and pod.status or {}
  if st.phase == "Succeeded" or st.phase == "Failed" then return nil end
  if st.phase ~= "Running" then return "start" end
  if spec.restartPolicy ~= "Always" then return "end" end
  return nil
end

-- store.observe: notes the next step of each Pod on a Node.
function Kubelet:observe(res, e, etype)
  if self.resources ~= self.store.resources then -- a reset store: nothing runs
    self.resources, self.timers, self.ips = self.store.resources, {}, {}
  end
  if not (res.builtin and res.gv == "v1" and res.name == "pods") then return end
  local pod = common.table_of(e) -- not one a writer stored as bytes
  if etype == "DELETED" then
    self.timers[e.key] = nil
    return
  end
  if not pod then return end
  local step = next_step(pod)
  if not step then return end
  local tag = step .. " " .. tostring(pod.metadata.uid)
  if self.timers[e.key] == tag then return end
  self.timers[e.key] = tag
  local secs = step == "start" and self:delay(pod, "start_delay")
    or step == "end" and self:delay(pod, "run_time") or self:delay(pod, "stop_delay")
  local key = e.key
  local function note()
    self.defer("kubelet " .. key, "kubelet", function()
      if self.timers[key] == tag then
        self.timers[key] = nil
        self:step(key, tag)
      end
    end)
  end
  if secs > 0 then kube.after(secs, note) else note() end
end

function Kubelet:step(key, tag)
  local s = self.store
  local res = s:resource("v1", "pods")
  local e = res.objects[key]
  local pod = common.obj_of(e)
  if not pod then return end
  local step = next_step(pod)
  if not step or step .. " " .. tostring(pod.metadata.uid) ~= tag then return end
  local node = s:resource("v1", "nodes").objects[pod.spec.nodeName]
  if not node then return end -- a Node the simulator does not run
  if step == "remove" then
    local out, err = s:delete(res, e.ns, e.name, { gracePeriodSeconds = 0 }, CTX)
    if not out and err.code ~= 404 then
      error(format("deleting pod %s/%s: %s", e.ns, e.name, tostring(err.message)), 0)
    end
    return
  end
  local obj = copy(pod)
  if step == "start" then
    self:start(obj, node.obj)
  else
    self:finish(obj)
  end
  local ne, err = s:commit(res, e, obj, STATUS_CTX)
  if not ne then
    error(format("updating the status of pod %s/%s: %s", e.ns, e.name, tostring(err.message)), 0)
  end
end

-- An image as the container runtime names it: docker.io/library/nginx:latest.
local function full_image(image)
  image = tostring(image or "")
  local first = image:match("^([^/]+)/")
  if not first then
    image = "docker.io/library/" .. image
  elseif not (first:find("[.:]") or first == "localhost") then
    image = "docker.io/" .. image
  end
  if not image:find("@", 1, true) and not image:match(":[^/]+$") then image = image .. ":latest" end
  return image
end

local function containers_by_name(spec)
  local list = {}
  for _, c in ipairs(is_array(spec.containers) and spec.containers or {}) do list[#list + 1] = c end
  sort(list, function(a, b) return tostring(a.name) < tostring(b.name) end)
  return list
end

local function cond(ctype, status, since, reason, message)
  return { type = ctype, status = status, lastProbeTime = null, lastTransitionTime = since,
    reason = reason, message = message }
end

function Kubelet:pod_ip(node)
  local n = (self.ips[node.metadata.name] or 1) + 1
  self.ips[node.metadata.name] = n
  local cidr = is_object(node.spec) and node.spec.podCIDR or "10.244.0.0/24"
  local a, b, c = tostring(cidr):match("^(%d+)%.(%d+)%.(%d+)%.")
  return format("%s.%s.%s.%d", a or 10, b or 244, c or 0, (n - 2) % 253 + 2)
end

-- Running: containers started, ready unless failure is injected (a
-- crash loop: restarted once, waiting).
function Kubelet:start(pod, node)
  local now = util.timestamp()
  local st = is_object(pod.status) and pod.status or {}
  local failing = pod.spec.restartPolicy == "Always" and self:fails(pod)
  local host
  for _, a in ipairs(is_array(node.status and node.status.addresses)
      and node.status.addresses or {}) do
    if a.type == "InternalIP" then host = a.address end
  end
  local ip = self:pod_ip(node)
  local statuses, unready = json.array {}, {}
  for _, c in ipairs(containers_by_name(pod.spec)) do
    local image = full_image(c.image)
    local cs = { name = c.name, image = image,
      imageID = image:gsub(":[^:/]+$", "") .. "@sha256:" .. common.hex64(image),
      containerID = "containerd://" .. common.hex64(pod.metadata.uid .. c.name),
      restartCount = 0, started = true, ready = true, lastState = {},
      state = { running = { startedAt = now } } }
    if failing then
      cs.restartCount, cs.started, cs.ready = 1, false, false
      cs.lastState = { terminated = { exitCode = 1, reason = "Error", startedAt = now,
        finishedAt = now, containerID = cs.containerID } }
      cs.state = { waiting = { reason = "CrashLoopBackOff", message = format(
        "back-off 10s restarting failed container=%s pod=%s_%s(%s)", c.name,
        pod.metadata.name, pod.metadata.namespace, pod.metadata.uid) } }
      unready[#unready + 1] = c.name
    end
    statuses[#statuses + 1] = cs
  end
  local scheduled = common.pod_condition(pod, "PodScheduled")
  local ready, why
  if #unready > 0 then
    why = "containers with unready status: [" .. table.concat(unready, " ") .. "]"
    ready = { cond("Ready", "False", now, "ContainersNotReady", why),
      cond("ContainersReady", "False", now, "ContainersNotReady", why) }
  else
    ready = { cond("Ready", "True", now), cond("ContainersReady", "True", now) }
  end
  pod.status = { phase = "Running", conditions = json.array {
      cond("Initialized", "True", now), ready[1], ready[2],
      cond("PodScheduled", "True", scheduled and scheduled.lastTransitionTime or now) },
    hostIP = host, podIP = ip, podIPs = json.array { { ip = ip } }, startTime = now,
    containerStatuses = statuses, qosClass = st.qosClass or defaults.qos(pod.spec) }
end

-- Ended: Succeeded, or Failed when failure is injected.
function Kubelet:finish(pod)
  local now = util.timestamp()
  local failed = self:fails(pod)
  local reason = failed and "PodFailed" or "PodCompleted"
  local st = pod.status
  st.phase = failed and "Failed" or "Succeeded"
  local conds = json.array {}
  for _, c in ipairs(st.conditions) do
    if c.type == "Ready" or c.type == "ContainersReady" then
      conds[#conds + 1] = cond(c.type, "False", now, reason)
    elseif c.type == "Initialized" then
      conds[#conds + 1] = cond(c.type, "True", c.lastTransitionTime, reason)
    else
      conds[#conds + 1] = c
    end
  end
  st.conditions = conds
  for _, cs in ipairs(st.containerStatuses) do
    local started = cs.state.running and cs.state.running.startedAt or now
    cs.ready, cs.started = false, false
    cs.state = { terminated = { exitCode = failed and 1 or 0,
      reason = failed and "Error" or "Completed", startedAt = started, finishedAt = now,
      containerID = cs.containerID } }
  end
end

-- At start: the Pods already on a Node.
function Kubelet:sync()
  local res = self.store:resource("v1", "pods")
  for _, e in pairs(res.objects) do self:observe(res, e, "ADDED") end
end

return _M
