-- Leader election on a Lease, against the in-process simulator: several
-- candidates in one process, each its own task, with short durations.
local kube = require "kubelua"
local leader = require "kubelua.leader"
local testing = require "kubelua.testing"
local support = require "spec.support"

local LEASE = 0.6   -- lease_duration, seconds
local RENEW = 0.4   -- renew_deadline
local RETRY = 0.1   -- retry_period

local function candidate(identity, log)
  local le = leader.new{
    name = "ctl", namespace = "default", identity = identity,
    lease_duration = LEASE, renew_deadline = RENEW, retry_period = RETRY,
    on_started_leading = function() log[#log + 1] = "+" .. identity end,
    on_stopped_leading = function() log[#log + 1] = "-" .. identity end,
  }
  kube.spawn(function() le:run() end)
  return le
end

local function leaders(les)
  local out = {}
  for _, le in ipairs(les) do if le:is_leader() then out[#out + 1] = le.identity end end
  return out
end

local function lease(t) return t:get("coordination.k8s.io/v1", "leases", "default", "ctl") end

describe("leader election", function()
  local t, les, log

  before_each(function()
    t = testing.start()
    les, log = {}, {}
  end)

  after_each(function()
    for _, le in ipairs(les) do le.stopped = true end
    kube.sleep(RETRY * 2) -- their loops end
    t:stop()
  end)

  it("elects exactly one of three and records it in the Lease", function()
    for i = 1, 3 do les[i] = candidate("c" .. i, log) end
    local l = t:eventually(function() return #leaders(les) == 1 and lease(t) end)
    local who = leaders(les)[1]
    assert.same({ "+" .. who }, log)
    assert.equal(who, l.spec.holderIdentity)
    assert.equal(1, l.spec.leaseDurationSeconds) -- 0.6 s, rounded
    assert.equal(0, l.spec.leaseTransitions)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%d%d%d%dZ$", l.spec.renewTime)
    assert.equal(l.spec.acquireTime, l.spec.renewTime)
    -- it renews; the others stay candidates the whole time
    for _ = 1, 10 do
      kube.sleep(RETRY)
      assert.same({ who }, leaders(les))
    end
    local renewed = lease(t)
    assert.are_not.equal(l.spec.renewTime, renewed.spec.renewTime)
    assert.equal(l.spec.acquireTime, renewed.spec.acquireTime)
    for _, le in ipairs(les) do assert.equal(who, le:leader()) end
  end)

  it("hands over once a leader that stopped renewing has let the lease expire", function()
    les[1] = candidate("a", log)
    t:eventually(function() return les[1]:is_leader() end)
    les[2] = candidate("b", log)
    kube.sleep(RETRY * 2)
    les[1].stopped = true        -- a crash: no release, no more renewals
    local gone = kube.monotonic()
    t:eventually(function() return les[2]:is_leader() end)
    -- b had to see the record unchanged for a whole lease duration
    assert.is_true(kube.monotonic() - gone >= LEASE - RETRY * 2)
    local l = lease(t)
    assert.equal("b", l.spec.holderIdentity)
    assert.equal(1, l.spec.leaseTransitions)
  end)

  it("hands over at once when the leader releases the lease", function()
    les[1] = candidate("a", log)
    t:eventually(function() return les[1]:is_leader() end)
    les[2] = candidate("b", log)
    kube.sleep(RETRY * 2)
    assert.is_true(les[1]:release())
    assert.equal("", lease(t).spec.holderIdentity)
    local released = kube.monotonic()
    t:eventually(function() return les[2]:is_leader() end)
    assert.is_true(kube.monotonic() - released < LEASE)
    assert.same({ "+a", "-a", "+b" }, log)
  end)

  it("releases the lease that its own renewal wrote after the release read it", function()
    les[1] = candidate("a", log)
    t:eventually(function() return les[1]:is_leader() end)
    les[1].stopped = true -- its loop ends, still leading
    kube.sleep(RETRY * 2)
    local call, renewed = les[1].call, false
    les[1].call = function(self, verb, ...)
      local res, err = call(self, verb, ...)
      if verb == "get" and not renewed then
        renewed = true -- the renewal in flight when the release began lands now
        local l = lease(t)
        l.spec.renewTime = "2026-01-01T00:00:00.000000Z"
        t:update(l)
      end
      return res, err
    end
    assert.is_true(les[1]:release())
    assert.is_true(renewed)
    assert.equal("", lease(t).spec.holderIdentity)
    assert.same({ "+a", "-a" }, log)
  end)

  it("calls on_new_leader once for each new holder, not at each renewal", function()
    local seen = {}
    les[1] = candidate("a", log)
    t:eventually(function() return les[1]:is_leader() end)
    les[2] = leader.new{
      name = "ctl", namespace = "default", identity = "b",
      lease_duration = LEASE, renew_deadline = RENEW, retry_period = RETRY,
      on_new_leader = function(id) seen[#seen + 1] = id end,
    }
    kube.spawn(function() les[2]:run() end)
    kube.sleep(RETRY * 5) -- several renewals by a
    assert.same({ "a" }, seen)
    les[3] = candidate("c", log)
    kube.sleep(RETRY * 2)
    les[1].stopped = true -- a crash: b or c takes the lease once it expires
    t:eventually(function() return les[2]:is_leader() or les[3]:is_leader() end)
    kube.sleep(RETRY * 3)
    if les[3]:is_leader() then
      assert.same({ "a", "c" }, seen)
    else
      assert.same({ "a" }, seen)
    end
  end)

  it("steps down when it cannot renew within the deadline", function()
    t = testing.start{ apiserver = "sim" } -- its faults
    les[1] = candidate("a", log)
    t:eventually(function() return les[1]:is_leader() end)
    t.sim:inject{ fail_next = 1000, code = 500, retry_after = 0 }
    local failing = kube.monotonic()
    t:eventually(function() return not les[1]:is_leader() end)
    assert.is_true(kube.monotonic() - failing >= RENEW - RETRY)
    assert.same({ "+a", "-a" }, log)
    t.sim:inject{ fail_next = 0 }
    t:eventually(function() return les[1]:is_leader() end)
    assert.same({ "+a", "-a", "+a" }, log)
  end)

  it("checks its options", function()
    support.raises("kube.leader_election: name (the Lease's) must be a non-empty string",
      function() leader.new{ namespace = "x" } end)
    support.raises("kube.leader_election: lease_duration must be greater than renew_deadline",
      function() leader.new{ name = "n", namespace = "x", lease_duration = 5, renew_deadline = 5 } end)
    support.raises("kube.leader_election: renew_deadline must be greater than retry_period*1.2",
      function() leader.new{ name = "n", namespace = "x", renew_deadline = 2, retry_period = 2 } end)
    support.raises("kube.leader_election: retry_period must be a positive number of seconds, got -1",
      function() leader.new{ name = "n", namespace = "x", retry_period = -1 } end)
  end)
end)
