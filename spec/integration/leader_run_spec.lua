-- Leader election between kubelua processes sharing one simulator: only the
-- leader's workers take keys, a killed leader is replaced once its lease
-- expires, a stopped one hands over at once, and `--leader-elect` works.
local support = require "spec.support"
local helper = require "spec.integration.sim_helper"
local procs = require "spec.integration.proc_helper"
local testing = require "kubelua.testing"

local ffi = require "ffi" -- kill(), declared by sim_helper
local sleep, read_file, quote = helper.sleep, helper.read_file, helper.quote

-- Every 50 ms a key; the worker logs each 5th key it processes.
local SCRIPT = support.tempfile([[
local kube = require "kubelua"
local server, id = ...
if server ~= "-" then kube.connect{ server = server } end -- "-": --kubeconfig's
if id ~= "cli" then
  kube.leader_election{ name = "ctl", namespace = "default", identity = id,
                        lease_duration = 1, renew_deadline = 0.6, retry_period = 0.1 }
end
local q = kube.workqueue("w")
kube.spawn(function() while true do q:add("tick") kube.sleep(0.05) end end)
local n = 0
kube.workers(q, 1, function() n = n + 1 if n % 5 == 1 then kube.log.info("working", { n = n }) end end)
]], ".lua")

-- The server the processes share: a `kubelua sim`, or under `kubelua test
-- --apiserver real` the harness's real one, through its kubeconfig.
local real = testing.apiserver() == "real"
local t

local function serve()
  if not real then return helper.start() end
  t = testing.start()
  return { kubeconfig = t.cp.kubeconfig }
end

local function unserve(sim)
  if real then t:stop() else helper.stop(sim) end
end

local function lease(sim, name)
  if real then return t:get("coordination.k8s.io/v1", "leases", "default", name) end
  local _, _, _, l = helper.request(sim, "GET",
    "/apis/coordination.k8s.io/v1/namespaces/default/leases/" .. name)
  return l
end

local function start(sim, id, options, env)
  local server = sim.base or "-"
  if sim.kubeconfig then options = (options or "") .. " --kubeconfig " .. quote(sim.kubeconfig) end
  return procs.start((options or "") .. " " .. quote(SCRIPT) .. " " .. server .. " " .. id,
    { env = env })
end

local count, wait_log = procs.count, procs.wait_log

-- The random part of a default identity: a version 4 UUID.
local UUID4 = "%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-" .. ("%x"):rep(12)

describe("leader election between processes", function()
  local sim
  before_each(function() sim = serve() end)
  after_each(function() unserve(sim) end)

  it("lets only the leader work, and replaces a killed one after its lease", function()
    local a = start(sim, "a")
    wait_log(a, "leading identity=a")
    wait_log(a, "working")
    local b = start(sim, "b")
    sleep(0.5)
    assert.equal(0, count(read_file(b.log), "working"))
    ffi.C.kill(a.pid, 9)
    local killed = os.time()
    local out = wait_log(b, "working")
    assert.matches("leading identity=b lease=default/ctl", out)
    assert.is_true(os.time() - killed <= 3)
    local l = lease(sim, "ctl")
    assert.equal("b", l.spec.holderIdentity)
    assert.equal(1, l.spec.leaseTransitions)
    helper.stop(b)
    os.remove(a.log)
  end)

  it("elects exactly one of three, and one of the two left when it is killed", function()
    local ps = { start(sim, "a"), start(sim, "b"), start(sim, "c") }
    local function leaders()
      local n, who = 0, nil
      for i = 1, #ps do
        local c = count(read_file(ps[i].log) or "", "leading identity=")
        if c > 0 then n, who = n + c, i end
      end
      return n, who
    end
    for _ = 1, 500 do
      if leaders() >= 1 then break end
      sleep(0.01)
    end
    sleep(0.5) -- long enough for a second leader to show, were there one
    local n, who = leaders()
    assert.equal(1, n)
    ffi.C.kill(ps[who].pid, 9)
    os.remove(ps[who].log)
    table.remove(ps, who)
    for _ = 1, 500 do
      if leaders() >= 1 then break end
      sleep(0.01)
    end
    sleep(0.5)
    assert.equal(1, (leaders()))
    for _, p in ipairs(ps) do helper.stop(p) end
  end)

  it("says once who holds the lease while standing by, and again when that changes", function()
    local a = start(sim, "a")
    wait_log(a, "leading identity=a")
    local ps = { b = start(sim, "b"), c = start(sim, "c") }
    wait_log(ps.b, "standing by")
    wait_log(ps.c, "standing by")
    sleep(0.5) -- five retries each
    for id, p in pairs(ps) do
      local out = read_file(p.log)
      assert.equal(1, count(out, "standing by"))
      assert.matches("INFO  leader election: standing by holder=a identity=" .. id
        .. " lease=default/ctl\n", out)
    end
    ffi.C.kill(a.pid, 9)
    os.remove(a.log)
    local new, other
    for _ = 1, 500 do
      if count(read_file(ps.b.log), "leading identity=b") > 0 then new, other = "b", "c" break end
      if count(read_file(ps.c.log), "leading identity=c") > 0 then new, other = "c", "b" break end
      sleep(0.01)
    end
    assert.is_string(new)
    wait_log(ps[other], "standing by", 2)
    sleep(0.5)
    local out = read_file(ps[other].log)
    assert.equal(2, count(out, "standing by"))
    assert.matches("INFO  leader election: standing by holder=" .. new .. " identity=" .. other
      .. " lease=default/ctl\n", out)
    assert.equal(0, count(read_file(ps[new].log), "standing by holder=" .. new))
    helper.stop(ps.b)
    helper.stop(ps.c)
  end)

  it("hands over at once on SIGTERM, releasing the lease", function()
    local a = start(sim, "a")
    wait_log(a, "leading identity=a")
    local b = start(sim, "b")
    sleep(0.3)
    local out_a = helper.stop(a)
    assert.matches("leader election: released the lease identity=a", out_a)
    local out_b = wait_log(b, "working")
    assert.matches("leading identity=b", out_b)
    helper.stop(b)
  end)

  it("gives two processes on hosts of one name their own identities: exactly one leads", function()
    local function twin()
      return start(sim, "cli", "--leader-elect --leader-election-id twin "
        .. "--leader-election-namespace default", "HOSTNAME=twin-host")
    end
    local ps = { twin(), twin() }
    local function leading()
      local n = 0
      for i = 1, 2 do n = n + count(read_file(ps[i].log) or "", "leading identity=") end
      return n
    end
    for _ = 1, 500 do
      if leading() >= 1 then break end
      sleep(0.01)
    end
    -- each tries the lease at once when it starts: one leads, one stands by
    for i = 1, 2 do
      for _ = 1, 1000 do
        local out = read_file(ps[i].log) or ""
        if out:find("leading identity=", 1, true) or out:find("standing by", 1, true) then break end
        sleep(0.01)
      end
    end
    assert.equal(1, leading())
    for i = 1, 2 do -- the leader works: wait for it to say so
      if count(read_file(ps[i].log) or "", "leading identity=") > 0 then wait_log(ps[i], "working") end
    end
    local l = lease(sim, "twin")
    assert.matches("^twin%-host_" .. UUID4 .. "$", l.spec.holderIdentity)
    -- the standby names the leader: the same host, another identity
    local holder = l.spec.holderIdentity:gsub("%p", "%%%0")
    local worked, standby = 0, nil
    for i = 1, 2 do
      local out = helper.stop(ps[i])
      if count(out, "working") > 0 then worked = worked + 1 else standby = out end
    end
    assert.equal(1, worked)
    assert.matches("standing by holder=" .. holder .. " identity=twin%-host_" .. UUID4
      .. " lease=default/twin\n", standby)
    assert.equal(0, count(standby, "identity=" .. holder))
  end)

  it("campaigns with --leader-elect", function()
    local status, out = support.sh(support.kubelua .. " run --leader-elect " .. SCRIPT)
    assert.equal(2, status)
    assert.matches("kubelua: --leader-elect needs --leader-election-id NAME", out, 1, true)
    local p = start(sim, "cli", "--leader-elect --leader-election-id cli-ctl "
      .. "--leader-election-namespace default")
    wait_log(p, "working")
    local out_p = helper.stop(p)
    assert.matches("leading identity=[^ ]+_" .. UUID4 .. " lease=default/cli%-ctl", out_p)
    assert.matches("released the lease", out_p)
  end)

  it("puts --leader-elect's Lease in the pod's namespace when none is given", function()
    local ns = { apiVersion = "v1", kind = "Namespace", metadata = { name = "team-b" } }
    if real then
      assert(t:create(ns))
    else
      assert.equal(201, (helper.api(sim, "POST", "/api/v1/namespaces", ns)))
    end
    local p = start(sim, "cli", "--leader-elect --leader-election-id pod-ctl",
      "POD_NAMESPACE=team-b")
    wait_log(p, "working")
    local out = helper.stop(p)
    assert.matches("leading identity=[^ ]+_" .. UUID4 .. " lease=team%-b/pod%-ctl", out)
  end)
end)
