-- Hot reload in one process, through kubelua.testing: a new generation
-- replaces handlers and workers at once, informers and queues survive with
-- no relist, nothing is lost while events flow, and a script that fails to
-- load leaves the old generation running.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local support = require "spec.support"

-- What the controllers under test report to the spec: generation-local
-- require returns modules already loaded, so this table is shared.
local probe = {}
package.loaded["reload_probe"] = probe

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)

local function write(name, text)
  local f = assert(io.open(dir .. "/" .. name, "w"))
  f:write(text)
  f:close()
  return dir .. "/" .. name
end

-- A controller whose reconcile records (version, key); VERSION, SLEEP and
-- the informers it uses vary by test.
local function controller(version, opts)
  opts = opts or {}
  return ([[
local kube = require "kubelua"
local probe = require "reload_probe"
local VERSION = %q
probe.loaded = (probe.loaded or 0) + 1
probe.leaked = LEAKED
LEAKED = VERSION
local cms = kube.informer("v1", "configmaps", { namespace = "r" })
probe.cms = cms
%s
local q = kube.workqueue("reload")
probe.q = q
cms:on_add(function(ev) q:add(ev.key) end)
cms:on_update(function(ev) q:add(ev.key) end)
cms:on_delete(function(ev) q:add(ev.key) end)
kube.workers(q, %d, function(key)
  probe.started[#probe.started + 1] = VERSION .. " " .. key
  %s
  probe.done[#probe.done + 1] = VERSION .. " " .. key
  local cm = cms:get(key)
  probe.seen[key] = cm and cm.data and cm.data.n or "deleted"
end)
%s
]]):format(version, opts.extra_informer or "", opts.workers or 2,
           opts.sleep and ("kube.sleep(" .. opts.sleep .. ")") or "", opts.tail or "")
end

local function cm(name, n)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name, namespace = "r" },
           data = { n = tostring(n) } }
end

local function count(list, pattern)
  local n = 0
  for _, v in ipairs(list) do if v:match(pattern) then n = n + 1 end end
  return n
end

-- The LISTs of ConfigMaps a real server has answered, from its /metrics
-- (megabytes that a loaded server can take longer than the default 30 s
-- to write: no bound of its own but the spec's).
local function real_lists(cp)
  local r = assert(require("kubelua.http").request{ url = cp.server .. "/metrics",
    headers = { Authorization = "Bearer " .. cp.token }, tls = { ca_file = cp.ca_file },
    timeout = 600 })
  local n = 0
  for line in r.body:gmatch("[^\n]+") do
    if line:match("^apiserver_request_total{") and line:find('resource="configmaps"', 1, true)
       and line:find('verb="LIST"', 1, true) then
      n = n + tonumber(line:match(" (%S+)$"))
    end
  end
  return n
end

describe("hot reload", function()
  local t, sim_lists, lists_at_start

  -- The lists of ConfigMaps the server answered since the spec started
  -- (plain, or streamed as a watch with sendInitialEvents): a relist
  -- shows here.
  local function lists()
    if t.apiserver == "real" then return real_lists(t.cp) - lists_at_start end
    return sim_lists
  end

  before_each(function()
    for k in pairs(probe) do probe[k] = nil end
    probe.started, probe.done, probe.seen = {}, {}, {}
    -- "r" holds only what each spec writes: no root-CA publisher
    t = testing.start{ namespaces = { "r" }, controllers = { root_ca = false } }
    if t.apiserver == "real" then
      lists_at_start = real_lists(t.cp)
      return
    end
    sim_lists = 0
    local handle = t.sim.handle
    t.sim.handle = function(self, req)
      local q = req:query() or ""
      if req:method() == "GET" and req:path():match("/configmaps$")
         and (not q:find("watch=", 1, true) or q:find("sendInitialEvents=true", 1, true)) then
        sim_lists = sim_lists + 1
      end
      return handle(self, req)
    end
  end)

  after_each(function() t:stop() end)

  it("swaps handlers and workers; informers and queues survive with no relist", function()
    local path = write("swap.lua", controller("A"))
    assert.is_true(t:load(path) > 0)
    for i = 1, 3 do t:create(cm("c" .. i, i)) end
    t:eventually(function() return count(probe.done, "^A ") == 3 end)
    local cms, q, lists_before = probe.cms, probe.q, lists()
    assert.equal(1, lists_before)

    write("swap.lua", controller("B"))
    t:reload()
    -- The new handlers first get a synthetic add for every cached object.
    t:eventually(function() return count(probe.done, "^B ") == 3 end)
    assert.equal(cms, probe.cms)   -- the same informer: one watch, one cache
    assert.equal(q, probe.q)       -- the same queue
    assert.equal(lists_before, lists())
    assert.equal(2, probe.loaded)
    assert.is_nil(probe.leaked)    -- globals do not leak between generations

    t:create(cm("c4", 4))
    t:eventually(function() return probe.seen["r/c4"] == "4" end)
    assert.equal(3, count(probe.done, "^A "))
    assert.same({ "B r/c4" }, { probe.done[#probe.done] })
  end)

  it("keeps the old generation when the new script has a syntax error", function()
    local path = write("syntax.lua", controller("A"))
    t:load(path)
    write("syntax.lua", controller("B") .. "\nlocal = 1\n")
    local lines = select(2, controller("B"):gsub("\n", "")) + 2
    support.raises("kubelua.testing: reload: cannot load script: " .. path .. ":" .. lines
      .. ": '<name>' expected near '='", function() t:reload() end)
    t:create(cm("x", 1))
    t:eventually(function() return probe.seen["r/x"] == "1" end)
    assert.same({ "A r/x" }, probe.done)
    assert.equal(1, probe.loaded)
  end)

  it("undoes what a script that raises at top level started", function()
    local path = write("raises.lua", controller("A"))
    t:load(path)
    write("raises.lua", controller("B", { tail = [[
      kube.spawn(function() probe.spawned = true end)
      kube.after(0, function() probe.timer = true end)
      error("bad config")]] }))
    local ok, err = pcall(t.reload, t)
    assert.is_false(ok)
    assert.matches("^kubelua.testing: reload: script failed: " .. dir:gsub("%p", "%%%0")
      .. "/raises.lua:%d+: bad config\nstack traceback:", err)
    t:create(cm("y", 2))
    t:eventually(function() return probe.seen["r/y"] == "2" end)
    kube.sleep(0.1)
    assert.same({ "A r/y" }, probe.done)  -- B's handlers and workers never ran
    assert.is_nil(probe.spawned)
    assert.is_nil(probe.timer)
  end)

  it("lets a reconcile in progress finish and hands the queued keys to the new workers", function()
    local path = write("queue.lua", controller("A", { workers = 1, sleep = 0.2 }))
    t:load(path)
    for i = 1, 4 do t:create(cm("q" .. i, i)) end
    t:eventually(function() return #probe.started == 1 end)
    write("queue.lua", controller("B", { workers = 1 }))
    t:reload()
    -- B's four: the three that waited, and A's own key again once A is done
    -- with it (the new generation's adds came while A held it); A's done
    -- can come after B's three, so all four seen does not mean B is through
    t:eventually(function() return count(probe.done, "^B ") >= 4 end)
    for i = 1, 4 do assert.is_string(probe.seen["r/q" .. i]) end
    -- A's one key finished there; the rest waited in the queue for B.
    assert.equal(1, count(probe.started, "^A "))
    assert.equal(1, count(probe.done, "^A "))
    assert.equal(1, count(probe.done, "^" .. probe.started[1] .. "$"))
    assert.equal(4, count(probe.done, "^B "))
  end)

  it("loses no event while objects change during reloads", function()
    local path = write("flow.lua", controller("A"))
    t:load(path)
    local writer_done = false
    kube.spawn(function()
      for i = 1, 60 do
        t:create(cm("f" .. i, i))
        if i % 3 == 0 then
          local obj = t:get("v1", "configmaps", "r", "f" .. (i - 1))
          obj.data.n = "u" .. (i - 1)
          t:update(obj)
        end
        if i % 10 == 0 then t:delete("v1", "configmaps", "r", "f" .. (i - 5)) end
        kube.sleep(0.005)
      end
      writer_done = true
    end)
    for v = 1, 5 do
      kube.sleep(0.06)
      write("flow.lua", controller("V" .. v))
      t:reload()
    end
    t:eventually(function() return writer_done end)
    -- Every object's last state reached a reconcile.
    t:eventually(function()
      for i = 1, 60 do
        local want = i % 10 == 5 and "deleted" or (i % 3 == 2 and i < 60 and "u" .. i or tostring(i))
        if probe.seen["r/f" .. i] ~= want then return false, i end
      end
      return true
    end)
    assert.equal(1, lists())
  end)

  it("stops the informers the new generation no longer uses", function()
    local path = write("drop.lua", controller("A", { extra_informer = [[
      probe.secrets = kube.informer("v1", "secrets", { namespace = "r" })]] }))
    t:load(path)
    local secrets = probe.secrets
    t:eventually(function() return secrets:has_synced() end)
    t:create{ apiVersion = "v1", kind = "Secret", metadata = { name = "s1", namespace = "r" } }
    t:eventually(function() return secrets:get("r/s1") end)
    write("drop.lua", controller("B"))
    t:reload()
    t:create{ apiVersion = "v1", kind = "Secret", metadata = { name = "s2", namespace = "r" } }
    t:create(cm("after", 1))
    t:eventually(function() return probe.seen["r/after"] == "1" end)
    kube.sleep(0.1)
    assert.is_nil(secrets:get("r/s2"))   -- its watch ended
    assert.is_truthy(secrets:get("r/s1")) -- its cache is still readable
    -- asking for it again gives a new informer that lists afresh
    assert.are_not.equal(secrets, kube.informer("v1", "secrets", { namespace = "r" }))
  end)

  it("loads the user's modules afresh in each generation", function()
    write("helper.lua", "return { version = 'h1' }\n")
    local path = write("mods.lua", [[
      local probe = require "reload_probe"
      probe.helper = require("helper").version
    ]])
    t:load(path)
    assert.equal("h1", probe.helper)
    write("helper.lua", "return { version = 'h2' }\n")
    t:reload()
    assert.equal("h2", probe.helper)
    assert.is_nil(package.loaded.helper)
  end)

  it("seeds math.random afresh for each generation", function()
    -- each generation draws, then seeds 7: a generation that went on with
    -- the one before it would draw 7's first number
    local path = write("draws.lua", [[
      local probe = require "reload_probe"
      probe.draws[#probe.draws + 1] = math.random()
      math.randomseed(7)
    ]])
    probe.draws = {}
    t:load(path)
    t:reload()
    t:reload()
    math.randomseed(7)
    local sevens = math.random()
    assert.equal(3, #probe.draws)
    assert.not_equal(sevens, probe.draws[2])
    assert.not_equal(sevens, probe.draws[3])
    assert.not_equal(probe.draws[2], probe.draws[3])
  end)
end)
