-- kubelua.sharding: one controller sharded across replicas, the cluster as
-- the coordinator (kube.controller{ sharding = { ring = "NAME" } } and
-- `kubelua run --shard-ring NAME`):
--
--  * membership: each replica holds a Lease of its own, "<ring>-<replica>",
--    labelled shard.kubelua.io/ring=<ring>, and renews it every
--    retry_period. A replica works on the ring's keys only while its last
--    renewal was sent less than renew_deadline ago (< lease_duration), so
--    it has stopped before anyone can take its Lease for expired. On a
--    graceful stop it finishes its reconciles and deletes its Lease.
--  * assignment: one replica, elected on the Lease "<ring>-sharder" with
--    the ordinary elector (kubelua.leader), is the sharder. It watches the
--    ring's kinds metadata-only and the ring's Leases; a replica is live
--    while its Lease changed less than leaseDurationSeconds ago as the
--    sharder observed it (its own clock). Each object goes to a live
--    replica by consistent hashing (VNODES virtual nodes per replica) of
--    its root owner's key (ownerReferences walked through the metadata
--    caches of the ring's kinds), so an owner and what it owns land
--    together; the sharder writes the label shard.kubelua.io/<ring>.
--  * handover: an object whose replica is live but no longer the one the
--    ring names is first marked drain.shard.kubelua.io/<ring>=true; its
--    replica stops taking the key, waits for the key's running reconcile,
--    then removes its label and the mark; only then does the sharder write
--    the new replica. An object of a replica that left (Lease expired or
--    deleted) is written at once. Every write carries the resourceVersion
--    the sharder saw, so a write from a stale view fails (409) and is done
--    again from the next one.
--  * each replica's informers of the ring's kinds select
--    shard.kubelua.io/<ring>=<replica>: its cache holds its share only.

local core = require "kubelua.core"
local json = require "kubelua.json"
local leader = require "kubelua.leader"
local metrics = require "kubelua.metrics"

local type, pairs, ipairs, tostring, error = type, pairs, ipairs, tostring, error
local setmetatable, next, unpack = setmetatable, next, unpack
local floor, format, byte = math.floor, string.format, string.byte
local sort, concat = table.sort, table.concat
local bxor, band, rshift, tobit = bit.bxor, bit.band, bit.rshift, bit.tobit

local _M = {}

local LEASES = "coordination.k8s.io/v1"
local RING_LABEL = "shard.kubelua.io/ring"
local VNODES = 100
local ROUND = 0.25 -- the sharder's pass over the objects, seconds

local assigned = metrics.gauge{ name = "kubelua_shard_objects",
  help = "Objects of a ring assigned to each replica, as its sharder last counted.",
  labels = { "ring", "replica" } }
local moves = metrics.counter{ name = "kubelua_shard_moves_total",
  help = "Objects the sharder assigned to another replica than the one they had.",
  labels = { "ring" } }
local drains = metrics.counter{ name = "kubelua_shard_drains_total",
  help = "Objects the sharder marked for draining before a move.", labels = { "ring" } }
local ring_size = metrics.gauge{ name = "kubelua_shard_ring_size",
  help = "Live replicas of a ring, as its sharder sees them.", labels = { "ring" } }

local function log(level, msg, fields) require("kubelua").log[level](msg, fields) end

local function client() return require("kubelua.client") end

-- Hashing ---------------------------------------------------------------------

-- a * b modulo 2^32 (both 32-bit), exact in doubles.
local function mul32(a, b)
  local alo, ahi = band(a, 0xffff), rshift(a, 16)
  return tobit(((ahi * band(b, 0xffff) + alo * rshift(b, 16)) % 65536) * 65536
    + alo * band(b, 0xffff))
end

-- FNV-1a over s, then murmur3's finalizer: a 32-bit hash spread over the
-- whole range (FNV alone clusters the hashes of similar names).
local function hash(s)
  local h = tobit(2166136261)
  for i = 1, #s do h = mul32(bxor(h, byte(s, i)), 16777619) end
  h = bxor(h, rshift(h, 16))
  h = mul32(h, 0x85ebca6b)
  h = bxor(h, rshift(h, 13))
  h = mul32(h, 0xc2b2ae35)
  h = bxor(h, rshift(h, 16))
  return h % 4294967296
end
_M.hash = hash

-- hash_ring(members) -> { points, owner }: VNODES points per member.
local function hash_ring(members)
  local points, owner = {}, {}
  for _, m in ipairs(members) do
    for v = 1, VNODES do
      local p = hash(m .. "#" .. v)
      if not owner[p] then
        points[#points + 1] = p
        owner[p] = m
      end
    end
  end
  sort(points)
  return { points = points, owner = owner }
end
_M.hash_ring = hash_ring

-- The member of hash ring r that key falls to (the first point at or after
-- its hash, wrapping), nil for an empty ring.
local function lookup(r, key)
  local pts = r.points
  local n = #pts
  if n == 0 then return nil end
  local h = hash(key)
  local lo, hi = 1, n
  if h > pts[n] then return r.owner[pts[1]] end
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if pts[mid] < h then lo = mid + 1 else hi = mid end
  end
  return r.owner[pts[lo]]
end
_M.lookup = lookup

-- Rings -------------------------------------------------------------------------

local rings = {}

---A replica's membership of a sharding ring (kube.controller{ sharding = … }):
---internal to the controller, which calls its methods.
---@class kubelua.sharding.Ring
local Ring = {}
Ring.__index = Ring

local function check_name(v, what)
  if type(v) ~= "string" or #v > 40 or not v:find("^[a-z0-9]") or not v:find("[a-z0-9]$")
      or v:find("[^a-z0-9-]") then
    error("sharding: " .. what .. " must be a DNS label of at most 40 characters "
      .. "(lowercase letters, digits, '-'), got " .. (type(v) == "string" and format("%q", v)
      or type(v)), 4)
  end
  return v
end

-- The replica's name default: the host name (the pod's), lowercased to a
-- DNS label, and 8 random hex digits, unique per process.
local function default_identity()
  local host = leader.host_name():lower():gsub("[^a-z0-9-]", "-"):gsub("^-+", ""):sub(1, 31)
  local r = { byte(core.random_bytes(4), 1, 4) }
  return (host ~= "" and host .. "-" or "") .. format("%02x%02x%02x%02x", r[1], r[2], r[3], r[4])
end

local function number_opt(o, k, dflt)
  local v = o[k]
  if v == nil then return dflt end
  if type(v) ~= "number" or v ~= v or v <= 0 then
    error("sharding: " .. k .. " must be a positive number of seconds, got " .. tostring(v), 4)
  end
  return v
end

-- ring(opts) -> the process's ring of that name, started on first use.
-- opts: ring (the name), namespace of the Leases (leader.pod_namespace()),
-- identity (the replica's name), lease_duration (15), renew_deadline (10),
-- retry_period (2). Later calls for the same ring get the same one.
function _M.ring(opts)
  local name = check_name(opts.ring, "ring")
  local r = rings[name]
  if r then return r end
  r = setmetatable({
    name = name, namespace = opts.namespace or leader.pod_namespace(),
    identity = check_name(opts.identity or default_identity(), "identity"),
    lease_duration = number_opt(opts, "lease_duration", 15),
    renew_deadline = number_opt(opts, "renew_deadline", 10),
    retry_period = number_opt(opts, "retry_period", 2),
    label = "shard.kubelua.io/" .. name, drain_label = "drain.shard.kubelua.io/" .. name,
    kinds = {}, active = {}, leaving = {}, last_ok = nil, working = false,
    stopping = false, members = {}, seen = {}, lapses = 0, confirmed_at = {},
  }, Ring)
  if r.lease_duration <= r.renew_deadline or r.renew_deadline <= r.retry_period then
    error("sharding: lease_duration > renew_deadline > retry_period is required", 3)
  end
  rings[name] = r
  r:start()
  return r
end

-- The label selector of a ring's informer: the user's, and this replica's
-- label.
---@package
function Ring:selector(user)
  local own = self.label .. "=" .. self.identity
  return (user and user ~= "") and user .. "," .. own or own
end

-- ring:add_kind(api_version, kind_or_resource, opts): the sharder assigns
-- this kind's objects (opts: namespace).
---@package
function Ring:add_kind(api_version, what, opts)
  local id = api_version .. "/" .. what .. "@" .. (opts and opts.namespace or "")
  for _, k in ipairs(self.kinds) do
    if k.id == id then return end
  end
  self.kinds[#self.kinds + 1] = { id = id, api_version = api_version, what = what,
                                  namespace = opts and opts.namespace }
end

-- Membership --------------------------------------------------------------------

---@package
function Ring:lease_name() return self.name .. "-" .. self.identity end

---@package
function Ring:set_working(on, why)
  if self.working == on then return end
  self.working = on
  if on then
    log("info", "sharding: working", { ring = self.name, replica = self.identity })
  else
    log("warn", "sharding: stopped working", { ring = self.name, replica = self.identity,
                                              reason = why })
  end
end

-- One renewal of the replica's Lease; true when it was written.
---@package
function Ring:renew(c)
  local wall = leader.micro_time(core.now())
  local lease, err = c:get(LEASES, "leases", self.namespace, self:lease_name())
  if not lease then
    if not client().is_not_found(err) then return false, err end
    lease = { apiVersion = LEASES, kind = "Lease",
              metadata = { name = self:lease_name(), namespace = self.namespace,
                           labels = { [RING_LABEL] = self.name } },
              spec = { holderIdentity = self.identity, acquireTime = wall } }
    lease.spec.leaseDurationSeconds = floor(self.lease_duration + 0.5)
    lease.spec.renewTime = wall
    local ok, cerr = c:create(lease)
    return ok ~= nil, cerr
  end
  lease.spec.holderIdentity = self.identity
  lease.spec.leaseDurationSeconds = floor(self.lease_duration + 0.5)
  lease.spec.renewTime = wall
  local ok, uerr = c:update(lease)
  return ok ~= nil, uerr
end

---@package
function Ring:membership()
  local c = client().default()
  local failing = false
  while not self.stopping do
    local sent = core.monotonic()
    local ok, err = self:renew(c)
    if self.stopping then break end
    if ok then
      -- renewed after the deadline had passed (a lapse: a partition, a
      -- frozen process): objects may have moved meanwhile (see confirmed)
      if self.last_ok and self:deadline_left() <= 0 then self.lapses = self.lapses + 1 end
      self.last_ok = sent
      if failing then
        log("info", "sharding: the lease is renewed again", { ring = self.name,
                                                                replica = self.identity })
      end
      failing = false
      self:set_working(true)
    elseif not failing then
      failing = true
      log("warn", "sharding: cannot renew the lease", { ring = self.name,
        replica = self.identity, error = tostring(err) })
    end
    core.sleep(self.retry_period)
  end
end

-- Seconds left before the renew deadline (<= 0: past it).
---@package
function Ring:deadline_left()
  if not self.last_ok then return 0 end
  return self.last_ok + self.renew_deadline - core.monotonic()
end

-- The replica stops at renew_deadline after the last renewal sent that
-- succeeded, even while a renewal hangs.
---@package
function Ring:deadline()
  while not self.stopping do
    local left = self:deadline_left()
    if self.working and left <= 0 then
      self:set_working(false, "the lease was not renewed within the deadline")
    end
    core.sleep(left > 0.01 and left or self.retry_period)
  end
end

-- Whether a worker may run key now: the replica works, and key is not
-- being handed over.
---@package
function Ring:may_run(key)
  return self.working and self:deadline_left() > 0 and not self.stopping
    and not self.leaving[key]
end

-- ring:confirmed(key, api_version, kind_or_resource) -> true | false | nil,
-- err: whether the object is still this replica's to reconcile. After a
-- lapse the sharder may have moved it (the replica's Lease had expired: it
-- is not waited for) while this replica's watch does not show it yet, so
-- the first run of each key after a lapse asks the server: labelled for
-- this replica and not being drained. Without a lapse, no request.
---@package
function Ring:confirmed(key, api_version, what)
  local lapses = self.lapses
  if lapses == 0 or self.confirmed_at[key] == lapses then return true end
  local ns, name = key:match("^([^/]*)/(.*)$")
  if not ns then name = key end
  local obj, err = client().default():get(api_version, what, ns, name)
  if not obj then
    if client().is_not_found(err) then return false end
    return nil, err
  end
  local labels = obj.metadata.labels
  local mine = type(labels) == "table" and labels[self.label] == self.identity
    and labels[self.drain_label] ~= "true"
  if mine then
    self.confirmed_at[key] = lapses
  else
    log("info", "sharding: not reconciled: moved while the lease had lapsed",
        { ring = self.name, key = key, replica = self.identity })
  end
  return mine
end

---@package
function Ring:begin(key) self.active[key] = true end
---@package
function Ring:finish(key) self.active[key] = nil end

-- The replica's part of a handover: key (whose object obj carries the
-- drain mark) is taken no more; once its running reconcile ends, the
-- replica's label and the mark are removed. An object deleted before it
-- was handed over stays this replica's: requeue(key) reconciles it.
---@package
function Ring:drain(key, obj, api_version, what, requeue)
  if self.leaving[key] then return end
  self.leaving[key] = true
  core.spawn_named("drain " .. key, function()
    while self.active[key] do core.sleep(0.01) end
    local c = client().default()
    local md = obj.metadata
    local _, err = c:patch(api_version, c:resource_name(api_version, what) or what, md.namespace,
      md.name,
      { metadata = { labels = { [self.label] = json.null, [self.drain_label] = json.null } } },
      "merge")
    if client().is_not_found(err) then
      self.leaving[key] = nil
      if requeue then requeue(key) end
      return
    end
    if err then
      self.leaving[key] = nil -- tried again at the next event
      log("warn", "sharding: cannot hand an object over", { ring = self.name, key = key,
                                                           error = tostring(err) })
      return
    end
    log("debug", "sharding: handed over", { ring = self.name, key = key })
  end)
end

-- An event of the ring's watched kind: false when the key is not this
-- replica's to reconcile (handed over or marked for it: the mark starts
-- the handover).
---@package
function Ring:accepts(ev, api_version, what, requeue)
  local key = ev.key
  if ev.type == "add" then self.leaving[key] = nil end
  local obj = ev.object
  local labels = obj and obj.metadata and obj.metadata.labels
  if ev.type ~= "delete" and type(labels) == "table" and labels[self.drain_label] == "true" then
    self:drain(key, obj, api_version, what, requeue)
    return false
  end
  return not self.leaving[key]
end

-- The sharder --------------------------------------------------------------------

-- The key of an object's root owner: its controller owner (or first owner)
-- found in the ring's caches, then that one's, up to an object with none
-- there; "group/Kind/namespace/name".
local function root_key(obj, by_uid)
  local seen = 0
  while seen < 16 do
    local md = obj.metadata
    local refs = md.ownerReferences
    local up
    if type(refs) == "table" then
      for _, ref in ipairs(refs) do
        if ref.controller == true then up = by_uid[ref.uid] end
      end
      if not up and refs[1] then up = by_uid[refs[1].uid] end
    end
    if not up then break end
    obj, seen = up.obj, seen + 1
  end
  return obj._kind .. "/" .. (obj.metadata.namespace or "") .. "/" .. obj.metadata.name
end
_M.root_key = root_key

---@package
function Ring:live_members(leases)
  local now, live = core.monotonic(), {}
  local seen = self.seen
  local present = {}
  for _, l in ipairs(leases:list()) do
    local md, spec = l.metadata, l.spec or {}
    local who = spec.holderIdentity
    if type(who) == "string" and who ~= "" and md.name == self.name .. "-" .. who then
      present[who] = true
      local s = seen[who]
      if not s or s.rv ~= md.resourceVersion then
        s = { rv = md.resourceVersion, at = now }
        seen[who] = s
      end
      if now - s.at < (spec.leaseDurationSeconds or 15) then live[#live + 1] = who end
    end
  end
  for who in pairs(seen) do
    if not present[who] then seen[who] = nil end
  end
  sort(live)
  return live
end

-- One pass over the ring's objects. Returns the counts per replica.
---@package
function Ring:assign(c, infs, hring, live_set)
  local by_uid = {}
  for i, inf in ipairs(infs) do
    for _, o in ipairs(inf:list()) do
      o._kind = self.kinds[i].id
      by_uid[o.metadata.uid] = { obj = o, k = self.kinds[i] }
    end
  end
  local counts = {}
  for _, e in pairs(by_uid) do
    local o, k = e.obj, e.k
    local md = o.metadata
    local labels = type(md.labels) == "table" and md.labels or {}
    local have, draining = labels[self.label], labels[self.drain_label] == "true"
    local want = lookup(hring, root_key(o, by_uid))
    local patch
    if have and have == want and not draining then
      counts[have] = (counts[have] or 0) + 1
    elseif have and live_set[have] and have ~= want then
      if not draining then
        patch = { [self.drain_label] = "true" }
        drains:inc({ ring = self.name })
      end
      counts[have] = (counts[have] or 0) + 1
    elseif not (have and live_set[have] and draining) then
      -- unassigned, or its replica left: the new one at once
      patch = { [self.label] = want, [self.drain_label] = json.null }
      if have and have ~= want then moves:inc({ ring = self.name }) end
      counts[want] = (counts[want] or 0) + 1
    end
    if patch then
      local _, err = c:patch(k.api_version, k.resource, md.namespace, md.name,
        { metadata = { resourceVersion = md.resourceVersion, labels = patch } }, "merge")
      if err and not client().is_conflict(err) and not client().is_not_found(err) then
        log("warn", "sharding: cannot label an object", { ring = self.name,
          object = (md.namespace or "") .. "/" .. md.name, error = tostring(err) })
      end
    end
  end
  return counts
end

---@package
function Ring:shard(le)
  local kube = require "kubelua"
  local c = client().default()
  local leases = kube.informer(LEASES, "leases",
    { namespace = self.namespace, label_selector = RING_LABEL .. "=" .. self.name })
  local infs = {}
  for i, k in ipairs(self.kinds) do
    local info, err = c:resource_info(k.api_version, k.what)
    while not info do
      log("warn", "sharding: cannot resolve a kind, retrying",
          { ring = self.name, kind = k.id, error = tostring(err) })
      core.sleep(1)
      info, err = c:resource_info(k.api_version, k.what)
    end
    k.resource = info.name
    infs[i] = kube.informer(k.api_version, info.name,
                            { namespace = k.namespace, metadata_only = true })
  end
  infs[#infs + 1] = leases
  while le:is_leader() and not kube.wait_for_sync(unpack(infs)) do end
  infs[#infs] = nil
  local members, hring = nil, nil
  local last_counts = {}
  while le:is_leader() and not self.stopping do
    local live = self:live_members(leases)
    local sig = concat(live, ",")
    if sig ~= members then
      local before = {}
      for m in (members or ""):gmatch("[^,]+") do before[m] = true end
      local joined, left = {}, {}
      for _, m in ipairs(live) do
        if not before[m] then joined[#joined + 1] = m end
        before[m] = nil
      end
      for m in pairs(before) do left[#left + 1] = m end
      sort(left)
      log("info", "sharding: ring changed", { ring = self.name, size = #live,
        members = sig, joined = concat(joined, ","), left = concat(left, ",") })
      ring_size:set(#live, { ring = self.name })
      members, hring = sig, hash_ring(live)
    end
    if #live > 0 then
      local live_set = {}
      for _, m in ipairs(live) do live_set[m] = true end
      local counts = self:assign(c, infs, hring, live_set)
      for m in pairs(last_counts) do
        if not counts[m] then assigned:set(0, { ring = self.name, replica = m }) end
      end
      for m, n in pairs(counts) do assigned:set(n, { ring = self.name, replica = m }) end
      last_counts = counts
    end
    core.sleep(ROUND)
  end
end

---@package
function Ring:start()
  core.spawn_system("shard " .. self.name, function() self:membership() end)
  core.spawn_system("shard deadline " .. self.name, function() self:deadline() end)
  local le = leader.new{ name = self.name .. "-sharder", namespace = self.namespace,
    identity = self.identity, lease_duration = self.lease_duration,
    renew_deadline = self.renew_deadline, retry_period = self.retry_period,
    on_started_leading = function()
      log("info", "sharding: sharding the ring", { ring = self.name, replica = self.identity })
      core.spawn_system("sharder " .. self.name, function() self:shard(self.elector) end)
    end }
  self.elector = le
  core.spawn_system("sharder election " .. self.name, function() le:run() end)
  core.on_stop(function()
    -- no new keys; the running reconciles end; the Lease goes, so that the
    -- sharder moves this replica's objects at once
    self.stopping = true
    le:release()
    local deadline = core.monotonic() + 30
    while next(self.active) ~= nil and core.monotonic() < deadline do core.sleep(0.01) end
    local c = client().default()
    local _, err = c:delete(LEASES, "leases", self.namespace, self:lease_name())
    if err and not client().is_not_found(err) then
      log("warn", "sharding: cannot delete the lease", { ring = self.name, error = tostring(err) })
    else
      log("info", "sharding: left the ring", { ring = self.name, replica = self.identity })
    end
  end)
end

return _M
