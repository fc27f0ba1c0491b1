-- kubelua.sim.controllers: the control plane the simulator runs beside its
-- API server, as kube-controller-manager runs beside kube-apiserver: the
-- garbage collector (kubelua.sim.gc), the namespace controller, the
-- root-CA publisher and the service-account controller
-- (kubelua.sim.namespaces); and, toward KWOK's model, fake Nodes, the
-- scheduler and their kubelets (kubelua.sim.workloads.nodes, .kubelet)
-- and the workload controllers (kubelua.sim.workloads.replicaset,
-- .deployment, .job, .statefulset, .daemonset), and the disruption
-- controller (kubelua.sim.disruption).
--
-- Each sees every change the store makes (store.observe) and only notes
-- the work it calls for; the work runs on a later turn of the loop, one
-- batch at a time, so that controllers act after the write that woke them
-- has answered, as real ones do. A batch runs each noted task once; what
-- it writes wakes the next batch. A task that fails is logged with its
-- controller and the error, and the others go on.

local kube = require "kubelua"
local gc = require "kubelua.sim.gc"
local from_bytes = require("kubelua.sim.store").from_bytes
local namespaces = require "kubelua.sim.namespaces"
local disruption = require "kubelua.sim.disruption"
local nodes = require "kubelua.sim.workloads.nodes"
local kubelet = require "kubelua.sim.workloads.kubelet"

-- The workload controllers, each in its own file, in the order they run.
local WORKLOADS = { "replicaset", "deployment", "job", "statefulset", "daemonset" }
local workloads = {}
for _, name in ipairs(WORKLOADS) do workloads[name] = require("kubelua.sim.workloads." .. name) end

local type, pairs, ipairs, pcall, tostring, setmetatable, error =
  type, pairs, ipairs, pcall, tostring, setmetatable, error
local concat, sort = table.concat, table.sort

local _M = {}
local Plane = {}
Plane.__index = Plane

-- The controllers, by the name opts.controllers turns them off with.
local NAMES = { gc = true, namespace = true, root_ca = true, service_account = true,
  nodes = true, scheduler = true, kubelet = true, disruption = true }
for _, name in ipairs(WORKLOADS) do NAMES[name] = true end
_M.names = NAMES

-- The names, sorted, as a message lists them.
function _M.known()
  local known = {}
  for n in pairs(NAMES) do known[#known + 1] = n end
  sort(known)
  return concat(known, ", ")
end

-- Which controllers run for opts.controllers: nil or true, all; false,
-- none; a table { name = false, ... }, all but those. Raises on anything
-- else, naming what was wrong.
function _M.enabled(spec)
  local on = {}
  for name in pairs(NAMES) do on[name] = spec ~= false end
  if spec == nil or spec == true or spec == false then return on end
  if type(spec) ~= "table" then
    error("sim: controllers must be true, false or a table of controller names, got "
      .. type(spec), 3)
  end
  for name, v in pairs(spec) do
    if not NAMES[name] then
      error("sim: unknown controller " .. tostring(name) .. " (known: " .. _M.known() .. ")", 3)
    end
    if type(v) ~= "boolean" then
      error("sim: controllers." .. name .. " must be true or false, got " .. type(v), 3)
    end
    on[name] = v
  end
  return on
end

-- Raises, naming what was wrong, when opts.nodes or opts.pods is not
-- what new takes.
function _M.check(opts)
  local ok, err = pcall(nodes.options, opts.nodes)
  if not ok then error(err, 3) end
  kubelet.check(opts.pods)
end

-- new(store, spec, ca, opts) -> the control plane watching store, or nil
-- when spec turns every controller off. ca() returns the PEM the root-CA
-- publisher puts in kube-root-ca.crt; opts.nodes (default 3; or
-- { count =, allocatable = }: kubelua.sim.workloads.nodes) and
-- opts.pods (kubelua.sim.workloads.kubelet) shape the workloads.
function _M.new(store, spec, ca, opts)
  opts = opts or {}
  _M.check(opts)
  local on = _M.enabled(spec)
  store.graceful = nil
  local any = false
  for _, v in pairs(on) do any = any or v end
  if not any then return nil end
  local self = setmetatable({ store = store, tasks = {}, order = {}, armed = false }, Plane)
  local defer = function(id, name, fn) self:defer(id, name, fn) end
  self.parts = {}
  if on.gc then self.parts[#self.parts + 1] = gc.new(store, defer) end
  if on.namespace or on.root_ca or on.service_account then
    self.parts[#self.parts + 1] = namespaces.new(store, defer, on, ca)
  end
  -- the workload parts never look at what a writer stored as JSON bytes
  -- (Store:put_json, the benchmarks' path): one test skips them all
  local wl = {}
  if on.nodes then wl[#wl + 1] = nodes.new_nodes(store, defer, opts) end
  if on.scheduler then wl[#wl + 1] = nodes.new_scheduler(store, defer) end
  if on.kubelet then wl[#wl + 1] = kubelet.new(store, defer, opts) end
  for _, name in ipairs(WORKLOADS) do
    if on[name] then wl[#wl + 1] = workloads[name].new(store, defer) end
  end
  if on.disruption then wl[#wl + 1] = disruption.new(store, defer) end
  local parts = self.parts
  store.observe = function(res, e, etype, prev)
    for i = 1, #parts do parts[i]:observe(res, e, etype, prev) end
    if #wl > 0 and not from_bytes(e) then
      for i = 1, #wl do wl[i]:observe(res, e, etype, prev) end
    end
  end
  for _, p in ipairs(parts) do p:sync() end
  for _, p in ipairs(wl) do p:sync() end
  self.workloads = wl
  return self
end

-- Notes task fn (of controller `name`) under id: a task already noted
-- under the same id for the next batch is not noted twice.
function Plane:defer(id, name, fn)
  if self.tasks[id] then return end
  self.tasks[id] = { name = name, fn = fn }
  self.order[#self.order + 1] = id
  if not self.armed then
    self.armed = true
    kube.after(0, function() self:run() end)
  end
end

-- Runs the batch noted so far; tasks noted meanwhile wait for the next.
function Plane:run()
  local tasks, order = self.tasks, self.order
  self.tasks, self.order, self.armed = {}, {}, false
  for _, id in ipairs(order) do
    local t = tasks[id]
    local ok, err = pcall(t.fn)
    if not ok then
      kube.log.error("sim: controller task failed", { controller = t.name, task = id,
        error = tostring(err) })
    end
  end
end

return _M
