-- `kubelua run`: load errors, exit statuses, graceful stop on signals.
local kube = require "kubelua"
local support = require "spec.support"
local sim_helper = require "spec.integration.sim_helper"
local run_script, sh = support.run_script, support.sh

describe("kubelua run", function()
  it("reports a syntax error with file and line, status 1", function()
    local status, out, path = run_script("local x = 1\nlocal = 2\n")
    assert.equal(1, status)
    assert.matches("ERROR cannot load script: " .. path:gsub("%p", "%%%0")
      .. ":2: '<name>' expected near '='\n$", out)
  end)

  it("reports an error at top level with file, line and traceback, status 1", function()
    local status, out, path = run_script("local kube = require 'kubelua'\n\nerror('no config')\n")
    assert.equal(1, status)
    assert.matches("ERROR script failed: " .. path:gsub("%p", "%%%0")
      .. ":3: no config\\nstack traceback:", out)
  end)

  it("reports a missing script, status 1", function()
    local status, out = sh(support.kubelua .. " run /nonexistent/x.lua")
    assert.equal(1, status)
    assert.matches("ERROR cannot load script: cannot open /nonexistent/x.lua", out, 1, true)
  end)

  it("passes arguments to the script", function()
    local status, out = run_script([[
      local a, b = ...
      print(arg[0]:match("%.lua$") and "script", a, b, arg[2])
      require("kubelua").stop()
    ]], "one two")
    assert.equal(0, status)
    assert.matches("\nscript\tone\ttwo\ttwo\n", "\n" .. out, 1, true)
  end)

  it("refuses to sleep or wait in the main chunk, which is not a task", function()
    local status, out, path = run_script("require('kubelua').sleep(1)")
    assert.equal(1, status)
    assert.matches("ERROR script failed: " .. path .. ":1: kube.sleep: not inside a task (use"
      .. " kube.spawn, kube.after or a worker to run code that sleeps)\\nstack traceback:", out, 1, true)
    status, out, path = run_script("require('kubelua').run(print)")
    assert.equal(1, status)
    assert.matches("ERROR script failed: " .. path .. ":1: kube.run: not inside a task (kubelua"
      .. " test runs specs in one; a script's main chunk uses kube.spawn)\\nstack traceback:", out, 1, true)
  end)

  it("exits with the status given to kube.stop", function()
    local status = run_script("require('kubelua').stop(3)")
    assert.equal(3, status)
  end)

  it("stops from inside a task once the task yields", function()
    local status, out = run_script([[
      local kube = require "kubelua"
      kube.spawn(function()
        kube.stop()
        print("still running until the next yield")
        kube.sleep(1)
        print("never printed")
      end)
    ]])
    assert.equal(0, status)
    assert.matches("still running until the next yield\n", out, 1, true)
    assert.is_nil(out:find("never printed", 1, true))
  end)

  it("lets a running reconcile finish on SIGTERM and takes no new work", function()
    local status, out = run_script([[
      local kube = require "kubelua"
      local q = kube.workqueue("work")
      local pid = io.open("/proc/self/stat"):read("*n")
      kube.workers(q, 1, function(key)
        print("start " .. key)
        io.stdout:flush()
        if key == "a" then os.execute("kill -TERM " .. pid) end
        kube.sleep(0.05)
        print("finish " .. key)
      end)
      q:add("a")
      q:add("b")
    ]])
    assert.equal(0, status)
    assert.matches("start a\n.*signal 15: stopping gracefully.*finish a\n", out)
    assert.is_nil(out:find("start b", 1, true))
  end)

  it("gives up on reconciles that outlast --shutdown-timeout, status 1", function()
    local status, out = run_script([[
      local kube = require "kubelua"
      local q = kube.workqueue("slow")
      kube.workers(q, 1, function()
        kube.stop()
        kube.sleep(30)
      end)
      q:add("a")
    ]], "", "--shutdown-timeout 0.1")
    assert.equal(1, status)
    assert.matches("shutdown timed out after 0.1s with 1 reconciles still running", out, 1, true)
  end)

  it("explains a bad command line, status 2", function()
    local status, out = sh(support.kubelua .. " run --log-level loud x.lua")
    assert.equal(2, status)
    assert.matches('kubelua: unknown log level "loud"\nusage: kubelua run', out, 1, true)
    status, out = sh(support.kubelua .. " frobnicate")
    assert.equal(2, status)
    assert.matches('kubelua: unknown command "frobnicate"', out, 1, true)
  end)

  it("prints its version", function()
    local status, out = sh(support.kubelua .. " version")
    assert.equal(0, status)
    assert.matches("^kubelua %d+%.%d+%.%d+ %(LuaJIT 2%.1", out)
  end)
end)

describe("kubelua run: a script's main tasks", function()
  -- Without a stop, the process would idle on: `timeout` ends it (124).
  local function run_bounded(path)
    return sh("timeout 30 " .. support.kubelua .. " run " .. path)
  end

  it("stops, status 1, after a graceful stop when a main task fails", function()
    local path = support.tempfile([[
      local kube = require "kubelua"
      local q = kube.workqueue("busy")
      local started = false
      kube.workers(q, 1, function(key)
        started = true
        kube.sleep(0.2)
        kube.log.info("reconcile finished", { key = key })
      end)
      kube.spawn(function()
        q:add("a")
        while not started do kube.sleep(0.01) end
        error("cannot go on")
      end)
    ]], ".lua")
    local status, out = run_bounded(path)
    os.remove(path)
    assert.equal(1, status)
    assert.matches("ERROR main task failed; stopping with exit status 1: " .. path
      .. ":12: cannot go on\\nstack traceback:\\n\t[C]: in function 'error'\\n\t" .. path
      .. ":12: in function <" .. path .. ":9> task=main\n", out, 1, true)
    -- the reconcile in progress finishes: a graceful stop
    local failed = out:find("main task failed", 1, true)
    local waiting = out:find("INFO  stopping: waiting for 1 running reconciles\n", 1, true)
    local finished = out:find("INFO  reconcile finished key=a\n", 1, true)
    assert.is_true(failed < waiting and waiting < finished, out)
    assert.equal(1, select(2, out:gsub("main task failed", "")))
  end)

  it("says what a raised error table is: the client's errors, through __tostring", function()
    local path = support.tempfile([[
      local kube = require "kubelua"
      kube.spawn(function()
        kube.spawn(function() error({}) end)
        kube.sleep(0.05)
        assert(nil, kube.client.new_error(409, "AlreadyExists", 'namespaces "demo" already exists'))
      end)
    ]], ".lua")
    local status, out = run_bounded(path)
    os.remove(path)
    assert.equal(1, status)
    assert.matches("ERROR task failed: (error object is a table value)\\nstack traceback:\\n\t"
      .. "[C]: in function 'error'\\n\t" .. path .. ":3: in function <" .. path .. ":3> task=task\n",
      out, 1, true)
    assert.matches("ERROR main task failed; stopping with exit status 1: AlreadyExists: "
      .. 'namespaces "demo" already exists\\nstack traceback:\\n\t[C]: in function \'assert\'\\n\t'
      .. path .. ":5: in function <" .. path .. ":2> task=main\n", out, 1, true)
  end)

  it("counts a task that a module spawns as the script requires it", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir) == 0)
    local f = assert(io.open(dir .. "/starter.lua", "w"))
    f:write("require('kubelua').spawn(function() error('module task failed') end)\n")
    f:close()
    f = assert(io.open(dir .. "/main.lua", "w"))
    f:write("require('starter')\n")
    f:close()
    local status, out = run_bounded(dir .. "/main.lua")
    os.execute("rm -rf " .. dir)
    assert.equal(1, status)
    assert.matches("ERROR main task failed; stopping with exit status 1: " .. dir
      .. "/starter.lua:1: module task failed", out, 1, true)
  end)

  it("only logs the failures of other tasks, reconciles and handlers", function()
    local path = support.tempfile([[
      local kube = require "kubelua"
      local q = kube.workqueue("failing")
      local reconciled, after, handled = false, false, false
      kube.workers(q, 1, function()
        reconciled = true
        error("reconcile broke")
      end)
      kube.after(0, function()
        after = true
        error("timer task broke")
      end)
      local inf = kube.local_informer{ name = "local" }
      inf:on_add(function()
        handled = true
        error("handler broke")
      end)
      kube.spawn(function()
        kube.spawn(function() error("child task broke") end)
        q:add("a")
        inf:add{ apiVersion = "v1", kind = "ConfigMap", metadata = { name = "x", namespace = "d" } }
        while not (reconciled and after and handled) do kube.sleep(0.01) end
        kube.sleep(0.05)
        kube.log.info("still running")
        kube.stop()
      end)
    ]], ".lua")
    local status, out = run_bounded(path)
    os.remove(path)
    assert.equal(0, status)
    assert.matches("ERROR task failed: [^\n]*: child task broke\\nstack traceback:[^\n]* task=task\n",
      out)
    assert.matches("ERROR task failed: [^\n]*: timer task broke\\nstack traceback:[^\n]* task=after\n",
      out)
    assert.matches("ERROR reconcile failed [^\n]*reconcile broke", out)
    assert.matches("ERROR handler failed: [^\n]*: handler broke\\nstack traceback:[^\n]* "
      .. "informer=local handler=on_add key=d/x\n", out)
    assert.matches("INFO  still running\n", out, 1, true)
    assert.is_nil(out:find("main task failed", 1, true))
  end)
end)

describe("examples/queue/controller.lua", function()
  it("reconciles every app to its desired state and stops", function()
    local status, out = sh(support.kubelua .. " run examples/queue/controller.lua")
    assert.equal(0, status)
    assert.matches("reconcile failed.*key=batch/flaky", out)
    for _, key in ipairs({ "default/web", "default/api", "batch/report", "batch/flaky" }) do
      assert.matches("in sync key=" .. key:gsub("%p", "%%%0"), out)
    end
    assert.matches("all apps converged, stopping", out, 1, true)
  end)
end)

describe("examples/mirror/controller.lua", function()
  it("mirrors, updates and deletes copies against the simulator, then stops", function()
    local status, out = sh(support.kubelua .. " run --sim examples/mirror/controller.lua")
    assert.equal(0, status)
    for _, line in ipairs({ "created copy key=demo/settings", "created copy key=demo/flags",
                            "updated copy key=demo/settings", "deleted copy key=demo/flags",
                            "the copies match their sources; stopping" }) do
      assert.matches(line, out, 1, true)
    end
    assert.is_nil(out:find("demo/private", 1, true))
  end)

  it("runs its demo in a cluster that has its namespaces and a kube-root-ca.crt in each",
    function()
      local sim = sim_helper.start("--token secret")
      local c = kube.client.new{ server = sim.base, token = "secret", qps = 0 }
      local seeded = {}
      for _, ns in ipairs({ "demo", "mirror" }) do
        assert(c:create{ apiVersion = "v1", kind = "Namespace", metadata = { name = ns } })
        -- the simulator's root-CA publisher puts one in every namespace
        for _ = 1, 500 do
          seeded[ns] = c:get("v1", "configmaps", ns, "kube-root-ca.crt")
          if seeded[ns] then break end
          sim_helper.sleep(0.01)
        end
        assert(seeded[ns], "no kube-root-ca.crt in " .. ns)
      end
      local config = support.tempfile(([[
apiVersion: v1
kind: Config
current-context: c
clusters: [{name: s, cluster: {server: "%s"}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: c, context: {cluster: s, user: u}}]
]]):format(sim.base))
      local status, out = sh("timeout 60 " .. support.kubelua .. " run --kubeconfig " .. config
        .. " examples/mirror/controller.lua")
      os.remove(config)
      local after = {}
      for _, ns in ipairs({ "demo", "mirror" }) do
        after[ns] = c:get("v1", "configmaps", ns, "kube-root-ca.crt")
      end
      local copies = assert(c:list("v1", "configmaps", "mirror"))
      sim_helper.stop(sim)
      assert.equal(0, status, out)
      assert.matches("the copies match their sources; stopping", out, 1, true)
      assert.is_nil(out:find("kube-root-ca.crt", 1, true))
      -- what it did not make is as it was
      assert.same(seeded, after)
      local names = {}
      for _, item in ipairs(copies.items) do names[#names + 1] = item.metadata.name end
      table.sort(names)
      assert.same({ "kube-root-ca.crt", "settings" }, names)
    end)
end)
