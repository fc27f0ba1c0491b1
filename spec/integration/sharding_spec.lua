-- Sharding across replicas: five `kubelua run` processes on one ring
-- against one `kubelua sim`, with ConfigMaps created, changed and deleted
-- all along while replicas join, are killed (SIGKILL) and stopped
-- (SIGTERM). Every reconcile is recorded (replica, key, start, end, the
-- version it saw): no key is reconciled by two replicas at overlapping
-- times, every change is reconciled within 5 s plus the Lease duration (and
-- an allowance for a loaded machine), and at the end each replica caches
-- exactly the objects labelled with it.
local support = require "spec.support"
local helper = require "spec.integration.sim_helper"
local procs = require "spec.integration.proc_helper"

local ffi = require "ffi" -- kill(), declared by sim_helper
local sleep, read_file, quote = helper.sleep, helper.read_file, helper.quote

local LEASE = 2 -- seconds: the replicas' Lease duration
-- How long a change may wait for its reconcile: the 5 s plus the Lease
-- duration the design promises, and 30 s for a loaded machine (the
-- sanitizer build, under a whole test run, needs 25). A change
-- the protocol loses (a key waiting for a dead replica, a drain never
-- finished) is never reconciled, so it fails all the same.
local BOUND = 5 + LEASE + 30

-- Each replica records its reconciles in RECORD (one line each, appended
-- at once) and writes the keys it caches to RECORD.<replica> every 0.2 s.
local SCRIPT = support.tempfile([[
local kube = require "kubelua"
local server, id, record = ...
kube.connect{ server = server }
local f = assert(io.open(record, "a"))
f:setvbuf("line")
local ctl = kube.controller{
  name = "sharded",
  watches = { "v1", "configmaps", { namespace = "shard" } },
  sharding = { ring = "cms", identity = id, lease_duration = ]] .. LEASE .. [[,
               renew_deadline = 1.2, retry_period = 0.3 },
  workers = 2,
  reconcile = function(req, ctx)
    local start = kube.now()
    local obj = ctx.object
    kube.sleep(0.05) -- long enough for an overlap to show, were there one
    local seen = obj and obj.data and obj.data.v or "gone"
    -- a finalizer, so that a deletion is a change the ring hands over too
    local fin
    if obj and obj.metadata.deletionTimestamp then
      seen, fin = "gone", '{"metadata":{"finalizers":null}}'
    elseif obj and not obj.metadata.finalizers then
      fin = '{"metadata":{"finalizers":["shard.example.com/f"]}}'
    end
    if fin then
      local _, err = kube.patch("v1", "configmaps", req.namespace, req.name, fin, "merge")
      if err and not kube.is_not_found(err) then return nil, err end
    end
    f:write(string.format("%s %s %.6f %.6f %s\n", id, req.key, start, kube.now(), seen))
  end,
}
kube.spawn(function()
  while true do
    local keys = ctl.informers[1]:list_keys()
    table.sort(keys)
    local c = assert(io.open(record .. "." .. id .. ".tmp", "w"))
    c:write(table.concat(keys, "\n"), "\n")
    c:close()
    os.rename(record .. "." .. id .. ".tmp", record .. "." .. id)
    kube.sleep(0.2)
  end
end)
]], ".lua")

local function request(sim, method, path, body)
  local code, obj = helper.api(sim, method, path, body)
  return code, obj
end

-- Created with the controller's finalizer (as a mutating webhook would
-- add it), so that a deletion is a change some replica sees, whenever it
-- comes.
local function cm(name, v)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = "shard", finalizers = { "shard.example.com/f" } },
           data = { v = tostring(v) } }
end

local function now()
  local t = ffi.new("struct { long sec; long nsec; }")
  ffi.C.clock_gettime(0, ffi.cast("void *", t))
  return tonumber(t.sec) + tonumber(t.nsec) / 1e9
end

ffi.cdef [[ int clock_gettime(int clk, void *ts); ]]

describe("sharding", function()
  it("puts a script's controllers on the ring that --shard-ring names", function()
    local script = support.tempfile([[
local kube = require "kubelua"
kube.controller{ name = "c", watches = { "v1", "configmaps" }, reconcile = function() end }
]], ".lua")
    local p = procs.start("--sim --shard-ring cli " .. quote(script))
    procs.wait_log(p, "sharding: ring changed")
    local out = helper.stop(p)
    assert.matches("INFO  sharding: working replica=[%w-]+ ring=cli\n", out)
    assert.matches('INFO  sharding: ring changed joined=[%w-]+ left="" members=[%w-]+ ring=cli '
                   .. "size=1\n", out)
    os.remove(script)
  end)

  it("puts the ring's Leases in the pod's namespace when none is given", function()
    local sim = helper.start("--no-controllers")
    assert.equal(201, (request(sim, "POST", "/api/v1/namespaces",
      { apiVersion = "v1", kind = "Namespace", metadata = { name = "team-b" } })))
    local script = support.tempfile([[
local kube = require "kubelua"
kube.connect{ server = ... }
kube.controller{ name = "c", watches = { "v1", "configmaps" }, reconcile = function() end }
]], ".lua")
    local p = procs.start("--shard-ring pods " .. quote(script) .. " " .. sim.base,
      { env = "POD_NAMESPACE=team-b" })
    procs.wait_log(p, "sharding: ring changed")
    local _, list = request(sim, "GET", "/apis/coordination.k8s.io/v1/namespaces/team-b/leases")
    helper.stop(p)
    helper.stop(sim)
    os.remove(script)
    -- the replica's own Lease, and the sharder's leader election
    local names = {}
    for _, l in ipairs(list.items) do
      local ring = l.metadata.labels and l.metadata.labels["shard.kubelua.io/ring"]
      names[#names + 1] = l.metadata.name .. (ring and " ring=" .. ring or "")
    end
    assert.equal(2, #names)
    if names[1] == "pods-sharder" then names[1], names[2] = names[2], names[1] end
    assert.matches("^pods%-[%w-]+ ring=pods$", names[1])
    assert.equal("pods-sharder", names[2])
  end)

  it("stops working at its renew deadline while a renewal hangs", function()
    local sim = helper.start("--no-controllers")
    local record = os.tmpname()
    local p = procs.start(quote(SCRIPT) .. " " .. sim.base .. " z " .. quote(record))
    procs.wait_log(p, "sharding: working")
    -- every answer a minute late: only the deadline, not the renewal's
    -- failure, can stop it within wait_log's 10 s
    request(sim, "POST", "/_sim/faults", { delay = 60 })
    local out = procs.wait_log(p, "sharding: stopped working")
    assert.matches("WARN  sharding: stopped working reason=\"the lease was not renewed within the "
                   .. "deadline\" replica=z ring=cms\n", out)
    ffi.C.kill(p.pid, 9)
    request(sim, "POST", "/_sim/faults", { delay = 0 })
    helper.stop(sim)
    for _, f in ipairs({ p.log, record, record .. ".z" }) do os.remove(f) end
  end)

  it("never reconciles a key on two replicas at once, reconciles every change and caches "
     .. "each replica's share, while replicas join, are killed and stopped", function()
    local sim = helper.start("--no-controllers")
    local record = os.tmpname()
    request(sim, "POST", "/api/v1/namespaces",
            { apiVersion = "v1", kind = "Namespace", metadata = { name = "shard" } })
    local replicas = {}
    local function start(id)
      replicas[id] = procs.start(quote(SCRIPT) .. " " .. sim.base .. " " .. id .. " "
                                 .. quote(record))
    end
    for _, id in ipairs({ "a", "b", "c" }) do start(id) end
    for _, id in ipairs({ "a", "b", "c" }) do procs.wait_log(replicas[id], "sharding: working") end

    -- churn: up to 40 objects; each step creates, changes or deletes one
    local changes = {} -- { key, version, at }
    local version, names = {}, {}
    local n = 0
    math.randomseed(7)
    local function step()
      n = n + 1
      local r = math.random()
      local name
      if #names == 0 or (#names < 40 and r < 0.3) then name = "o" .. n
      else name = names[math.random(#names)] end
      local key = "shard/" .. name
      local at = now()
      if not version[name] then
        assert.equal(201, (request(sim, "POST", "/api/v1/namespaces/shard/configmaps", cm(name, n))))
        names[#names + 1], version[name] = name, n
      elseif r < 0.45 then
        assert.equal(200, (request(sim, "DELETE", "/api/v1/namespaces/shard/configmaps/" .. name)))
        for i, x in ipairs(names) do
          if x == name then table.remove(names, i) break end
        end
        version[name] = math.huge
      else
        -- a merge patch: the sharder's label stays
        local code = helper.request(sim, "PATCH", "/api/v1/namespaces/shard/configmaps/" .. name,
          { body = { data = { v = tostring(n) } },
            headers = { ["Content-Type"] = "application/merge-patch+json" } })
        assert.equal(200, code)
        version[name] = n
      end
      changes[#changes + 1] = { key = key, version = version[name], at = at }
      sleep(0.05)
    end
    local killed_at
    for s = 1, 400 do
      step()
      if s == 60 then start("d") start("e") end
      if s == 120 then ffi.C.kill(replicas.b.pid, 9) killed_at = now() end
      if s == 300 then ffi.C.kill(replicas.c.pid, 15) end
      if s == 340 then start("f") end
    end
    local last_change = now()
    local live = { "a", "d", "e", "f" }

    -- reconciles, from the record
    local function records()
      local out = {}
      for line in (read_file(record) or ""):gmatch("[^\n]+") do
        local id, key, s, e, v = line:match("^(%S+) (%S+) (%S+) (%S+) (%S+)$")
        out[#out + 1] = { id = id, key = key, start = tonumber(s), stop = tonumber(e),
                          version = v == "gone" and math.huge or tonumber(v) }
      end
      return out
    end
    -- a change is reconciled once a reconcile that started after it saw it
    -- or a later version
    local function reconciled(rs, c)
      for _, r in ipairs(rs) do
        if r.key == c.key and r.start >= c.at and r.version >= c.version then return r end
      end
      return nil
    end
    local deadline = last_change + BOUND
    local rs
    repeat
      sleep(0.2)
      rs = records()
      local all = true
      for _, c in ipairs(changes) do
        if not reconciled(rs, c) then all = false break end
      end
    until all or now() > deadline

    -- no key on two replicas at overlapping times
    local by_key = {}
    for _, r in ipairs(rs) do
      by_key[r.key] = by_key[r.key] or {}
      table.insert(by_key[r.key], r)
    end
    local overlaps = {}
    for key, list in pairs(by_key) do
      table.sort(list, function(x, y) return x.start < y.start end)
      for i = 2, #list do
        for j = 1, i - 1 do
          if list[j].id ~= list[i].id and list[j].stop > list[i].start then
            overlaps[#overlaps + 1] = key .. ": " .. list[j].id .. " and " .. list[i].id
          end
        end
      end
    end
    assert.same({}, overlaps)
    -- every change reconciled, within BOUND
    local late = {}
    for _, c in ipairs(changes) do
      local r = reconciled(rs, c)
      if not r or r.stop - c.at > BOUND then
        late[#late + 1] = c.key .. "@" .. c.version .. ": " .. (r and (r.stop - c.at) .. " s"
          or "never")
      end
    end
    assert.same({}, late)
    assert.is_true(#rs > #changes / 2)
    local by_replica = {}
    for _, r in ipairs(rs) do by_replica[r.id] = true end
    for _, id in ipairs({ "a", "b", "c", "d", "e", "f" }) do assert.is_true(by_replica[id], id) end
    assert.is_number(killed_at)

    -- each replica caches exactly the objects labelled with it
    local ok, why
    for _ = 1, 100 do
      local _, list = request(sim, "GET", "/api/v1/namespaces/shard/configmaps")
      local want = {}
      for _, id in ipairs(live) do want[id] = {} end
      ok, why = true, nil
      for _, o in ipairs(list.items) do
        local who = o.metadata.labels and o.metadata.labels["shard.kubelua.io/cms"]
        if not want[who] then
          ok, why = false, o.metadata.name .. " is labelled " .. tostring(who)
        else
          table.insert(want[who], "shard/" .. o.metadata.name)
        end
      end
      for _, id in ipairs(live) do
        table.sort(want[id])
        local cached = read_file(record .. "." .. id) or ""
        local expect = table.concat(want[id], "\n") .. "\n"
        if cached ~= expect then
          ok, why = false, id .. " caches:\n" .. cached .. "its objects are:\n" .. expect
        end
      end
      if ok then break end
      sleep(0.1)
    end
    assert(ok, why)

    local logs = {}
    for _, id in ipairs(live) do
      logs[id] = helper.stop(replicas[id])
      assert.matches("sharding: left the ring replica=" .. id .. " ring=cms", logs[id])
    end
    local sharders, all = 0, ""
    for _, id in ipairs({ "a", "b", "c", "d", "e", "f" }) do
      local out = logs[id] or read_file(replicas[id].log) or ""
      all = all .. out
      sharders = sharders + procs.count(out, "sharding: sharding the ring")
      os.remove(replicas[id].log)
      os.remove(record .. "." .. id)
    end
    assert.is_true(sharders >= 1)
    assert.matches("sharding: ring changed joined=\"\" left=b members=a,c,d,e ring=cms size=4",
                   all)
    helper.stop(sim)
    os.remove(record)
  end)
end)

describe("a replica back from a lapse of its Lease", function()
  local kube = require "kubelua"
  local testing = require "kubelua.testing"
  local core = require "kubelua.core"
  local sharding = require "kubelua.sharding"

  -- The sharder moves a lapsed replica's objects without waiting for it,
  -- and the replica's watch may not show that yet when it renews: before
  -- a key's first run after the lapse, it asks the server.
  it("reconciles a key again only if the server still labels it for this replica", function()
    local t = testing.start{ namespaces = { "s" }, controllers = { root_ca = false } }
    local ring = sharding.ring{ ring = "lapse", identity = "a", lease_duration = 3,
                                renew_deadline = 2, retry_period = 0.1 }
    t:eventually(function() return ring.working end)
    local function labelled(name, owner)
      t:create{ apiVersion = "v1", kind = "ConfigMap", metadata = { name = name,
        namespace = "s", labels = { ["shard.kubelua.io/lapse"] = owner } } }
    end
    labelled("mine", "a")
    labelled("moved", "b")
    -- no lapse yet: no question asked, whatever the server says
    assert.is_true(ring:confirmed("s/moved", "v1", "configmaps"))
    -- the process was away past its renew deadline, then renews
    local before = ring.lapses
    ring.last_ok = core.monotonic() - 10
    t:eventually(function() return ring.lapses == before + 1 end)
    assert.is_true(ring:confirmed("s/mine", "v1", "configmaps"))
    assert.is_false(ring:confirmed("s/moved", "v1", "configmaps"))
    assert.is_false(ring:confirmed("s/gone", "v1", "configmaps"))
    -- a drain mark is the sharder's: not this replica's to start
    local m = t:get("v1", "configmaps", "s", "mine")
    m.metadata.labels["drain.shard.kubelua.io/lapse"] = "true"
    t:update(m)
    assert.is_true(ring:confirmed("s/mine", "v1", "configmaps")) -- confirmed once per lapse
    ring.last_ok = core.monotonic() - 10
    t:eventually(function() return ring.lapses == before + 2 end)
    assert.is_false(ring:confirmed("s/mine", "v1", "configmaps"))
    ring.stopping = true
    kube.sleep(0.2)
    t:stop()
  end)
end)
