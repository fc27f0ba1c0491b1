-- kubelua.leader: leader election on a coordination.k8s.io/v1 Lease, as
-- client-go's tools/leaderelection does it.
--
--   local le = kube.leader_election{ name = "my-controller", namespace = "ops" }
--   kube.on_leading(function() … end)          -- this replica now leads
--   kube.on_stopped_leading(function() … end)  -- and no longer does
--
-- A candidate tries to acquire the Lease every retry_period (jittered by up
-- to 20 %); the Lease is free when it has no holder, or when its record has
-- not changed for lease_duration seconds as this candidate observed it (its
-- own clock; the holder's renewTime is never compared with ours). The
-- leader renews every retry_period; when no renewal succeeds within
-- renew_deadline it stops leading at once — kube.workers stop taking keys —
-- and becomes a candidate again. Updates carry the Lease's resourceVersion,
-- so two candidates can never both win one round. On a graceful stop the
-- leader releases the Lease (no holder, a 1 s duration) so that a successor
-- takes over without waiting for it to expire.

local core = require "kubelua.core"
local client = require "kubelua.client"
local metrics = require "kubelua.metrics"

local type, error, tostring, pairs, unpack = type, error, tostring, pairs, unpack
local setmetatable, getmetatable = setmetatable, getmetatable
local xpcall, traceback = xpcall, debug.traceback
local floor, random, format = math.floor, math.random, string.format
local byte, band, bor = string.byte, bit.band, bit.bor

local _M = {}

local LEASES = "coordination.k8s.io/v1"
local JITTER = 1.2
local RELEASE_TRIES = 3 -- reads and writes of the Lease when released

local started_fns, stopped_fns = {}, {}

-- The elector of this process, if any: kube.workers take keys only while
-- it leads.
local current

local function log(level, msg, fields)
  local out = {}
  for k, v in pairs(fields or {}) do out[#out + 1] = " " .. k .. "=" .. tostring(v) end
  table.sort(out)
  core.log(level, msg, table.concat(out))
end

-- A Kubernetes MicroTime: RFC 3339 in UTC with exactly six fractional digits.
local function micro_time(t)
  local s = floor(t)
  return os.date("!%Y-%m-%dT%H:%M:%S", s) .. format(".%06dZ", floor((t - s) * 1e6))
end
_M.micro_time = micro_time

local function record_of(lease)
  local spec = lease.spec or {}
  return { holder = spec.holderIdentity or "", duration = spec.leaseDurationSeconds,
           acquire = spec.acquireTime, renew = spec.renewTime,
           transitions = spec.leaseTransitions or 0 }
end

local function same(a, b)
  return a.holder == b.holder and a.duration == b.duration and a.acquire == b.acquire
    and a.renew == b.renew and a.transitions == b.transitions
end

---A leader elector (kube.leader_election): campaigns for a
---coordination.k8s.io Lease as client-go's leaderelection does.
---@class kubelua.leader.elector
local Elector = {}
Elector.__index = Elector

-- A version 4 UUID from 16 bytes of the kernel's randomness.
local function uuid4()
  local b = { byte(core.random_bytes(16), 1, 16) }
  b[7] = bor(band(b[7], 0x0f), 0x40)
  b[9] = bor(band(b[9], 0x3f), 0x80)
  local h = format(("%02x"):rep(16), unpack(b))
  return h:sub(1, 8) .. "-" .. h:sub(9, 12) .. "-" .. h:sub(13, 16) .. "-" .. h:sub(17, 20)
    .. "-" .. h:sub(21)
end

-- The pod's name (HOSTNAME in a pod), else the kernel's host name.
local function host_name()
  local host = os.getenv("HOSTNAME")
  if not host or host == "" then
    local f = io.open("/proc/sys/kernel/hostname")
    host = f and f:read("*l") or "kubelua"
    if f then f:close() end
  end
  return host
end
_M.host_name = host_name

-- The identity default: the host name and a UUID, as client-go makes it,
-- unique per process even where hosts share a name.
local function default_identity() return host_name() .. "_" .. uuid4() end

local function check_number(opts, k, dflt)
  local v = opts[k]
  if v == nil then return dflt end
  if type(v) ~= "number" or v ~= v or v <= 0 then
    error("kube.leader_election: " .. k .. " must be a positive number of seconds, got "
      .. tostring(v), 3)
  end
  return v
end

-- pod_namespace() -> the namespace this process's pod runs in, where its
-- Leases go unless told: POD_NAMESPACE (as the in-cluster connection reads
-- it), else the service account's namespace file, else "default".
function _M.pod_namespace()
  local ns = os.getenv("POD_NAMESPACE")
  if ns and ns ~= "" then return ns end
  local f = io.open("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
  ns = f and f:read("*l")
  if f then f:close() end
  return (ns and ns ~= "") and ns or "default"
end

-- new(opts) -> elector (not started: elector:run() in a task). opts: name
-- (the Lease), namespace, identity, lease_duration (15), renew_deadline
-- (10), retry_period (2), client (the default client), and callbacks of
-- this elector only: on_started_leading, on_stopped_leading,
-- on_new_leader(identity).
function _M.new(opts)
  if type(opts) ~= "table" then
    error("kube.leader_election: expected a table, got " .. type(opts), 2)
  end
  if type(opts.name) ~= "string" or opts.name == "" then
    error("kube.leader_election: name (the Lease's) must be a non-empty string", 2)
  end
  if type(opts.namespace) ~= "string" or opts.namespace == "" then
    error("kube.leader_election: namespace must be a non-empty string", 2)
  end
  local self = setmetatable({
    name = opts.name, namespace = opts.namespace,
    identity = opts.identity or default_identity(),
    lease_duration = check_number(opts, "lease_duration", 15),
    renew_deadline = check_number(opts, "renew_deadline", 10),
    retry_period = check_number(opts, "retry_period", 2),
    client = opts.client, on_started_leading = opts.on_started_leading,
    on_stopped_leading = opts.on_stopped_leading, on_new_leader = opts.on_new_leader,
    leading = false, observed = nil, observed_at = nil, stopped = false,
    reported = nil, -- the holder last noted
  }, Elector)
  if self.lease_duration <= self.renew_deadline then
    error("kube.leader_election: lease_duration must be greater than renew_deadline", 2)
  end
  if self.renew_deadline <= JITTER * self.retry_period then
    error("kube.leader_election: renew_deadline must be greater than retry_period*1.2", 2)
  end
  return self
end

-- A verb on the elector's client (or the default one), with requests cut
-- off at renew_deadline, as client-go's context does: a hung server must
-- not keep a leader that cannot renew from stepping down.
---@package
function Elector:call(verb, ...)
  local base = self.client or client.default()
  if not base then return client[verb](...) end -- connects on first use
  if self.base ~= base then
    local c = setmetatable({}, getmetatable(base))
    for k, v in pairs(base) do c[k] = v end
    c.timeout = self.renew_deadline
    self.base, self.derived = base, c
  end
  return self.derived[verb](self.derived, ...)
end

-- Notes the holder a round saw: another one is said (and on_new_leader
-- called) once, when it first shows, not at each retry or renewal.
---@package
function Elector:note_holder(holder)
  if holder == self.reported then return end
  self.reported = holder
  if holder == "" or holder == self.identity then return end
  log("info", "leader election: standing by", { holder = holder, identity = self.identity,
                                                lease = self.namespace .. "/" .. self.name })
  if self.on_new_leader then self.on_new_leader(holder) end
end

-- One round of client-go's tryAcquireOrRenew. Returns true when this
-- candidate holds the Lease afterwards.
---@package
function Elector:try()
  local now, wall = core.monotonic(), micro_time(core.now())
  local lease, err = self:call("get", LEASES, "leases", self.namespace, self.name)
  local mine = { holder = self.identity, duration = floor(self.lease_duration + 0.5),
                 acquire = wall, renew = wall, transitions = 0 }
  local function to_lease(rec, base)
    base = base or { apiVersion = LEASES, kind = "Lease",
                     metadata = { name = self.name, namespace = self.namespace } }
    base.spec = { holderIdentity = rec.holder, leaseDurationSeconds = rec.duration,
                  acquireTime = rec.acquire, renewTime = rec.renew,
                  leaseTransitions = rec.transitions }
    return base
  end
  if not lease then
    if not client.is_not_found(err) then
      log("warn", "leader election: cannot get the lease",
          { lease = self.namespace .. "/" .. self.name, error = tostring(err) })
      return false
    end
    local created, cerr = self:call("create", to_lease(mine))
    if not created then
      log("debug", "leader election: cannot create the lease", { error = tostring(cerr) })
      return false
    end
    self.observed, self.observed_at = mine, now
    self:note_holder(mine.holder)
    return true
  end
  local old = record_of(lease)
  if not self.observed or not same(old, self.observed) then
    self.observed, self.observed_at = old, now
  end
  self:note_holder(old.holder)
  local is_leader = old.holder == self.identity
  if old.holder ~= "" and not is_leader and self.observed_at + self.lease_duration > now then
    return false
  end
  if is_leader then
    mine.acquire, mine.transitions = old.acquire, old.transitions
  else
    mine.transitions = old.transitions + 1
  end
  local updated, uerr = self:call("update", to_lease(mine, lease))
  if not updated then
    log("debug", "leader election: cannot update the lease", { error = tostring(uerr) })
    return false
  end
  self.observed, self.observed_at = mine, now
  self:note_holder(mine.holder)
  return true
end

local function jittered(s) return s * (1 + random() * (JITTER - 1)) end

local function notify(fns, own, what)
  local all = { own }
  for i = 1, #fns do all[#all + 1] = fns[i] end
  for i = 1, #all do
    local ok, err = xpcall(all[i], traceback)
    if not ok then log("error", what .. " callback failed", { error = err }) end
  end
end

-- leader_election_master_status{name}: 1 while leading, else 0.
local function report(self, leading)
  metrics.leader_status:set(leading and 1 or 0, { name = self.name })
end

---@package
function Elector:set_leading(leading)
  if self.leading == leading then return end
  self.leading = leading
  report(self, leading)
  if leading then
    log("info", "leader election: leading", { identity = self.identity,
                                               lease = self.namespace .. "/" .. self.name })
    notify(started_fns, self.on_started_leading, "on_leading")
  else
    log("warn", "leader election: lost the lease", { identity = self.identity,
                                                      lease = self.namespace .. "/" .. self.name })
    notify(stopped_fns, self.on_stopped_leading, "on_stopped_leading")
  end
end

-- The election loop: acquire, renew until a deadline passes, again.
---@package
function Elector:run()
  while not self.stopped do
    if not self.leading then
      if self:try() then
        self:set_leading(true)
      else
        core.sleep(jittered(self.retry_period))
      end
    else
      local last_ok = core.monotonic()
      while not self.stopped do
        core.sleep(self.retry_period)
        if self.stopped then break end
        if self:try() then
          last_ok = core.monotonic()
        elseif core.monotonic() - last_ok >= self.renew_deadline then
          break
        end
      end
      if not self.stopped then self:set_leading(false) end
    end
  end
end

---Whether this process holds the Lease now.
---@return boolean
---@usage if elector:is_leader() then kube.log.info("leading") end
function Elector:is_leader() return self.leading end

-- The holder last observed ("" when none).
---The identity of the Lease's holder as last seen ("" when none).
---@return string
---@usage kube.log.info("leader", { holder = elector:leader() })
function Elector:leader() return self.observed and self.observed.holder or "" end

-- Gives the Lease up (a graceful stop): the loop ends; when leading, the
-- Lease is updated to have no holder, so a successor need not wait.
---Gives the Lease up now (a graceful stop does it too).
---@usage elector:release()
function Elector:release()
  self.stopped = true
  if not self.leading then return true end
  self.leading = false
  report(self, false)
  -- A Conflict is this elector's own renewal, in flight when the release
  -- began, writing the Lease after it was read: read it again (the loop
  -- starts no other renewal once stopped).
  local ok, err
  for _ = 1, RELEASE_TRIES do
    local lease = self:call("get", LEASES, "leases", self.namespace, self.name)
    if not lease or record_of(lease).holder ~= self.identity then return false end
    local wall = micro_time(core.now())
    lease.spec = { holderIdentity = "", leaseDurationSeconds = 1, acquireTime = wall,
                   renewTime = wall, leaseTransitions = self.observed.transitions }
    ok, err = self:call("update", lease)
    if ok or not client.is_conflict(err) then break end
  end
  if not ok then
    log("warn", "leader election: cannot release the lease", { error = tostring(err) })
    return false
  end
  log("info", "leader election: released the lease", { identity = self.identity })
  notify(stopped_fns, self.on_stopped_leading, "on_stopped_leading")
  return true
end

-- start(opts) -> elector: the process's elector, running in a task of the
-- runtime's own (a hot reload does not end it: the reloaded script asking
-- again for the same Lease gets it back); released on a graceful stop.
function _M.start(opts)
  if current then
    local same_lease = type(opts) == "table" and opts.name == current.name
      and opts.namespace == current.namespace
    if same_lease then
      return current
    end
    error("kube.leader_election: this process campaigns for " .. current.namespace .. "/"
      .. current.name .. " already", 2)
  end
  local le = _M.new(opts)
  current = le
  report(le, false)
  core.spawn_system("leader-election", function() le:run() end)
  core.on_stop(function() le:release() end)
  return le
end

-- Whether kube.workers may take keys: no election, or leading.
function _M.may_work() return current == nil or current.leading end

function _M.current() return current end

---fn() runs each time this process starts leading.
---@param fn function
---@usage kube.on_leading(function() kube.log.info("now leading") end)
function _M.on_leading(fn) started_fns[#started_fns + 1] = fn end
---fn() runs each time this process stops leading.
---@param fn function
---@usage kube.on_stopped_leading(function() kube.log.warn("lost the Lease") end)
function _M.on_stopped_leading(fn) stopped_fns[#stopped_fns + 1] = fn end

return _M
