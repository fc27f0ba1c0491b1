-- `kubelua run`: load errors, exit statuses, graceful stop on signals.
local kube = require "kubelua"
local support = require "spec.support"
local helper = require "spec.integration.sim_helper"
local proc_helper = require "spec.integration.proc_helper"
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
      .. ":3: no config\n    stack traceback:\n", out)
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
      .. " kube.spawn, kube.after or a worker to run code that sleeps)\n    stack traceback:\n", out, 1, true)
    status, out, path = run_script("require('kubelua').run(print)")
    assert.equal(1, status)
    assert.matches("ERROR script failed: " .. path .. ":1: kube.run: not inside a task (kubelua"
      .. " test runs specs in one; a script's main chunk uses kube.spawn)\n    stack traceback:\n", out, 1, true)
  end)

  it("writes print output line by line when stdout is a file or a pipe", function()
    -- from a task: once the loop runs, SIGTERM stops the process gracefully
    local path = support.tempfile([[
      local kube = require "kubelua"
      kube.spawn(function()
        print("first line")
        io.write("second ")
        io.write("line\n")
        io.write("no newline yet")
        kube.sleep(60)
      end)
    ]], ".lua")
    local proc = proc_helper.start(path)
    finally(function() os.execute("kill -9 " .. proc.pid .. " 2>/dev/null") end)
    local out = proc_helper.wait_log(proc, "second line\n")
    assert.matches("^first line\nsecond line\n", out)
    assert.is_nil(out:find("no newline yet", 1, true))
    out = helper.stop(proc)
    os.remove(path)
    assert.matches("^first line\nsecond line\n.*no newline yet$", out)
  end)

  it("writes unfinished print output when a second signal ends it at once", function()
    local path = support.tempfile([[
      local kube = require "kubelua"
      local q = kube.workqueue("work")
      kube.workers(q, 1, function()
        io.write("no newline yet")
        kube.log.info("working")
        kube.sleep(60)
      end)
      q:add("default/a")
    ]], ".lua")
    local proc = proc_helper.start("--shutdown-timeout 120 " .. path)
    finally(function() os.execute("kill -9 " .. proc.pid .. " 2>/dev/null") end)
    proc_helper.wait_log(proc, "working")
    assert(os.execute("kill -TERM " .. proc.pid) == 0)
    proc_helper.wait_log(proc, "stopping: waiting for 1 running reconciles\n")
    local out = helper.stop(proc) -- the second SIGTERM
    os.remove(path)
    assert.matches("WARN  second signal 15: exiting at once\nno newline yet$", out)
  end)

  it("exits with the status given to kube.stop", function()
    local status = run_script("require('kubelua').stop(3)")
    assert.equal(3, status)
  end)

  it("seeds math.random from the kernel, so that two processes draw differently", function()
    local draw = "io.write(('%.17g %.17g'):format(math.random(), math.random())) require('kubelua').stop()"
    local status1, out1 = run_script(draw)
    local status2, out2 = run_script(draw)
    assert.equal(0, status1)
    assert.equal(0, status2)
    local draws1, draws2 = out1:match("\n(0%.%d+ 0%.%d+)$"), out2:match("\n(0%.%d+ 0%.%d+)$")
    assert.is_string(draws1, out1)
    assert.is_string(draws2, out2)
    assert.not_equal(draws1, draws2)
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

  it("takes its options after the script too, and gives the script all after --", function()
    local status, out = run_script([[
      print(select("#", ...), ...)
      require("kubelua").stop()
    ]], "one --log-format json two --health-probe-bind-address=127.0.0.1:0 -- --three -h")
    assert.equal(0, status)
    assert.matches('^{"ts":"[^"]+","level":"info","msg":"probes: serving on http://127%.0%.0%.1:%d+'
      .. '/healthz and /readyz"}\n4\tone\ttwo\t%-%-three\t%-h\n{"ts":"[^"]+","level":"info",'
      .. '"msg":"stopping: waiting for 0 running reconciles"}\n$', out)
  end)

  it("refuses an unknown option before --, naming it", function()
    local status, out = sh(support.kubelua .. " run x.lua --metrics-bind-adress :8080")
    assert.equal(2, status)
    assert.matches('^kubelua: unknown option %-%-metrics%-bind%-adress %(the script\'s own options go '
      .. 'after "%-%-"%)\nusage: kubelua run %[options%] SCRIPT%.lua %[args%.%.%.%] %[%-%- args%.%.%.%]\n', out)
    status, out = sh(support.kubelua .. " run --kubeconfig")
    assert.equal(2, status)
    assert.matches("^kubelua: option %-%-kubeconfig needs a value\nusage: kubelua run ", out)
  end)

  it("prints its version", function()
    local status, out = sh(support.kubelua .. " version")
    assert.equal(0, status)
    assert.matches("^kubelua %d+%.%d+%.%d+ %(LuaJIT 2%.1", out)
  end)
end)

describe("kubelua --help", function()
  local function first_lines(out, n)
    local lines = {}
    for line in (out .. "\n"):gmatch("([^\n]*)\n") do
      if #lines == n then break end
      lines[#lines + 1] = line
    end
    return lines
  end

  it("answers -h and --help for every command with its own usage, status 0", function()
    local firsts = {
      [""] = "usage: kubelua run [options] SCRIPT.lua [args...] [-- args...]",
      run = "usage: kubelua run [options] SCRIPT.lua [args...] [-- args...]",
      sim = "usage: kubelua sim [--listen HOST:PORT] [options]",
      test = "usage: kubelua test [options] [busted options] [spec paths...]",
      types = "usage: kubelua types [CRD.yaml...] [-o DIR]",
      new = "usage: kubelua new NAME [--kind KIND --group G --version V]",
      version = "usage: kubelua version",
    }
    for cmd, first in pairs(firsts) do
      for _, flag in ipairs({ "-h", "--help" }) do
        local status, out = sh(support.kubelua .. " " .. cmd .. " " .. flag)
        assert.equal(0, status, cmd .. " " .. flag)
        assert.equal(first, first_lines(out, 1)[1], cmd .. " " .. flag)
      end
    end
    local _, out = sh(support.kubelua .. " --help")
    assert.same({ "usage: kubelua run [options] SCRIPT.lua [args...] [-- args...]",
                  "       kubelua test [options] [busted options] [spec paths...]",
                  "       kubelua sim [--listen HOST:PORT] [options]",
                  "       kubelua types [CRD.yaml...] [-o DIR]",
                  "       kubelua new NAME [--kind KIND --group G --version V]",
                  "       kubelua version", "",
                  "`kubelua COMMAND --help` lists a command's options." }, first_lines(out, 8))
  end)

  it("lists each command's own options", function()
    local _, out = sh(support.kubelua .. " run --help")
    assert.matches("\n  --health-probe-bind-address ADDR ", out, 1, true)
    assert.matches("\n  --shard-ring NAME        put kube.controller's controllers on this\n", out,
                   1, true)
    assert.equal("\n  -h, --help               this help\n", out:sub(-38))
    _, out = sh(support.kubelua .. " sim -h")
    assert.matches("\n  --bookmark-interval SECS how often a watch gets a bookmark (default 60)\n", out,
                   1, true)
    assert.is_nil(out:find("--kubeconfig", 1, true))
    _, out = sh(support.kubelua .. " test --help")
    assert.same({ "usage: kubelua test [options] [busted options] [spec paths...]", "",
                  "Runs busted specs inside the runtime, in a task.", "", "options:",
                  "  --apiserver sim|real     the server testing.start serves: the",
                  "                           simulator (default) or a real",
                  "                           kube-apiserver and etcd, found in",
                  "                           KUBEBUILDER_ASSETS, else PATH",
                  "  --controller-manager     with real: run kube-controller-manager too",
                  "  --log-level LEVEL        debug, info, warn or error (default info)",
                  "  --log-format FORMAT      text (default) or json",
                  "  -h, --help               this help, then busted's", "",
                  "busted options:", "Usage: busted [OPTIONS] [--] [ROOT-1 [ROOT-2 [...]]]" },
                first_lines(out, 16))
    assert.matches("\n  -l, --list ", out, 1, true)
  end)

  it("runs kubelua test with --log-level, which busted never sees", function()
    local path = support.tempfile([[
      describe("x", function() it("passes", function() end) end)
    ]], "_spec.lua")
    local status, out = sh(support.kubelua .. " test -o TAP " .. path)
    assert.equal(0, status)
    assert.matches("\n[%d:.TZ-]+ INFO  stopping: waiting for 0 running reconciles\n", out)
    status, out = sh(support.kubelua .. " test --log-level warn -o TAP " .. path)
    assert.equal(0, status)
    assert.matches("^ok 1 %- x passes\n1%.%.1\n$", out)
    status, out = sh(support.kubelua .. " test --log-level=loud " .. path)
    os.remove(path)
    assert.equal(2, status)
    assert.matches('^kubelua: unknown log level "loud"\nusage: kubelua test ', out)
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
      .. ":12: cannot go on task=main\n    stack traceback:\n        " .. path
      .. ":12: in function <" .. path .. ":9>\n", out, 1, true)
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
    assert.matches("ERROR task failed: (error object is a table value) task=task\n"
      .. "    stack traceback:\n        " .. path .. ":3: in function <" .. path .. ":3>\n",
      out, 1, true)
    assert.matches("ERROR main task failed; stopping with exit status 1: AlreadyExists: "
      .. 'namespaces "demo" already exists task=main\n    stack traceback:\n        '
      .. path .. ":5: in function <" .. path .. ":2>\n", out, 1, true)
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
    assert.matches("ERROR task failed: [^\n]*: child task broke task=task\n    stack traceback:\n",
      out)
    assert.matches("ERROR task failed: [^\n]*: timer task broke task=after\n    stack traceback:\n",
      out)
    assert.matches("ERROR reconcile failed [^\n]*reconcile broke", out)
    assert.matches("ERROR handler failed: " .. path .. ":15: handler broke "
      .. "informer=local handler=on_add key=d/x\n    stack traceback:\n        " .. path .. ":15:",
      out, 1, true)
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

describe("examples/greeting-operator/controller.lua -- --demo", function()
  -- The README's command. It creates a Greeting just after the CRD, while
  -- discovery may still say NoKindMatch, and ends on an emptied index,
  -- which the server returns without data.
  it("installs its CRD, greets, updates, cleans up and stops", function()
    local status, out = sh("timeout 60 " .. support.kubelua
      .. " run --sim examples/greeting-operator/controller.lua -- --demo")
    assert.equal(0, status, out)
    local at = 1
    for _, line in ipairs({ 'INFO  scene: ready configmap="Hello, world"\n',
                            'INFO  scene: updated configmap="Hello again"\n',
                            "INFO  scene: deleted, the index is empty; stopping\n" }) do
      local i = out:find(line, at, true)
      assert(i, "no " .. line .. " in order in:\n" .. out)
      at = i
    end
    assert.is_nil(out:find("ERROR", 1, true))
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
      local sim = helper.start("--token secret")
      local c = kube.client.new{ server = sim.base, token = "secret", qps = 0 }
      local seeded = {}
      for _, ns in ipairs({ "demo", "mirror" }) do
        assert(c:create{ apiVersion = "v1", kind = "Namespace", metadata = { name = ns } })
        -- the simulator's root-CA publisher puts one in every namespace
        for _ = 1, 500 do
          seeded[ns] = c:get("v1", "configmaps", ns, "kube-root-ca.crt")
          if seeded[ns] then break end
          helper.sleep(0.01)
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
      helper.stop(sim)
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

describe("kubelua run --hang-timeout", function()
  local function alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0 end
  local function signal(proc) assert(os.execute("kill -TERM " .. proc.pid) == 0) end

  local function wait_gone(proc)
    for _ = 1, 1000 do
      if not alive(proc.pid) then return end
      helper.sleep(0.01)
    end
    error("process " .. proc.pid .. " is still running")
  end

  -- GET /healthz on the probes' port named in the log: status and body.
  local function healthz(out)
    local port = assert(out:match("probes: serving on http://127%.0%.0%.1:(%d+)/healthz"))
    local _, res = sh("curl -s -m 10 -w ' %{http_code}' http://127.0.0.1:" .. port .. "/healthz")
    return tonumber(res:match(" (%d+)$")), res:match("^(.*) %d+$")
  end

  local function start(source, timeout)
    local path = support.tempfile(source, ".lua")
    local proc = proc_helper.start("--hang-timeout " .. timeout
                                   .. " --health-probe-bind-address 127.0.0.1:0 " .. path)
    proc.path = path
    -- a spinning process must not outlive a failed spec
    finally(function() os.execute("kill -9 " .. proc.pid .. " 2>/dev/null") end)
    return proc
  end

  local function finish(proc)
    os.remove(proc.path)
    local out = helper.read_file(proc.log) or ""
    os.remove(proc.log)
    assert(not out:find("Sanitizer", 1, true) and not out:find("runtime error:", 1, true), out)
    return out
  end

  it("reports a reconcile that never yields, fails /healthz and exits on a second SIGTERM",
     function()
    local proc = start([[
      local kube = require "kubelua"
      local q = kube.workqueue("work")
      io.write("written before the hang, without a newline")
      kube.workers(q, 1, function() while true do end end)
      q:add("default/a")
    ]], 0.5)
    local out = proc_helper.wait_log(proc, "has not yielded")
    -- `while true do end` runs as JIT-compiled code, where no Lua hook
    -- fires: the line says what is known, without a traceback
    assert.matches("\n[%d:.TZ-]+ ERROR reconcile of default/a %(controller work%) has not yielded "
      .. "for [%d.]+ s; /healthz fails until it does\n", out)
    local status, body = healthz(out)
    assert.equal(500, status)
    assert.matches("^reconcile of default/a %(controller work%) has not yielded for [%d.]+ s\n$", body)
    signal(proc)
    proc_helper.wait_log(proc, "WARN  signal 15: stopping once reconcile of default/a %(controller "
      .. "work%) yields %(it has run for [%d.]+ s%); a second signal exits at once\n")
    assert.is_true(alive(proc.pid))
    signal(proc)
    wait_gone(proc)
    out = finish(proc)
    assert.matches("WARN  second signal 15: exiting at once %(reconcile of default/a %(controller "
      .. "work%) has not yielded for [%d.]+ s%)\n", out)
    assert.matches("written before the hang, without a newline", out, 1, true)
    assert.is_nil(out:find("stack traceback", 1, true))
  end)

  it("logs the traceback of interpreted code that never yields", function()
    local proc = start([[
      jit.off()
      local kube = require "kubelua"
      local q = kube.workqueue("work")
      local function spin() while true do end end
      kube.workers(q, 1, function() spin() end)
      q:add("default/a")
    ]], 0.5)
    local out = proc_helper.wait_log(proc, "in function <")
    local p = proc.path:gsub("%p", "%%%0")
    assert.matches("ERROR reconcile of default/a %(controller work%) has not yielded for [%d.]+ s; "
      .. "/healthz fails until it does\n    stack traceback:\n        " .. p
      .. ":4: in function 'spin'\n        " .. p .. ":5: in function <" .. p .. ":5>\n", out)
    signal(proc)
    proc_helper.wait_log(proc, "stopping once")
    signal(proc)
    wait_gone(proc)
    finish(proc)
  end)

  it("reports an informer's handler that never yields", function()
    local proc = start([[
      jit.off()
      local kube = require "kubelua"
      kube.start_sim()
      local function spin() while true do end end
      kube.informer("v1", "namespaces"):on_add(function() spin() end)
    ]], 0.5)
    local out = proc_helper.wait_log(proc, "in function <")
    local p = proc.path:gsub("%p", "%%%0")
    assert.matches("ERROR a handler of informer v1/namespaces has not yielded for [%d.]+ s; "
      .. "/healthz fails until it does\n    stack traceback:\n        " .. p
      .. ":4: in function 'spin'\n        " .. p .. ":5: in function <" .. p .. ":5>\n", out)
    assert.equal(500, (healthz(out)))
    signal(proc)
    proc_helper.wait_log(proc, "stopping once a handler of informer v1/namespaces yields")
    signal(proc)
    wait_gone(proc)
    finish(proc)
  end)

  it("says when a reconcile yields again, and then stops on the signal it was sent", function()
    local flag = os.tmpname()
    os.remove(flag)
    local proc = start(([[
      local kube = require "kubelua"
      local q = kube.workqueue("work")
      kube.workers(q, 1, function()
        while true do
          local f = io.open(%q)
          if f then f:close() break end
        end
      end)
      q:add("default/a")
    ]]):format(flag), 0.5)
    local out = proc_helper.wait_log(proc, "has not yielded")
    assert.equal(500, (healthz(out)))
    signal(proc)
    proc_helper.wait_log(proc, "stopping once")
    assert(io.open(flag, "w")):close()
    out = proc_helper.wait_log(proc, "stopping gracefully")
    wait_gone(proc)
    os.remove(flag)
    finish(proc)
    assert.matches("INFO  reconcile of default/a %(controller work%) yielded after [%d.]+ s; "
      .. "/healthz is ok again\n[%d:.TZ-]+ INFO  signal 15: stopping gracefully\n", out)
  end)

  it("leaves a reconcile that yields alone, however long it takes", function()
    local status, out = run_script([[
      local kube = require "kubelua"
      local q = kube.workqueue("work")
      kube.workers(q, 1, function()
        for _ = 1, 10 do kube.sleep(0.1) end
        kube.stop()
      end)
      q:add("default/a")
    ]], "", "--hang-timeout 0.3")
    assert.equal(0, status)
    assert.is_nil(out:find("yield", 1, true))
  end)
end)
