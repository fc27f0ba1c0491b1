-- Logs: the text and JSON formats, verbosity, and no secret in any line.
local kube = require "kubelua"
local support = require "spec.support"
local helper = require "spec.integration.sim_helper"

local run_script = support.run_script

describe("logs", function()
  it("writes one JSON object a line with --log-format json", function()
    local status, out = run_script([[
      local kube = require "kubelua"
      kube.log.info("hello \"world\"\nnext", { a = "x y", b = 'q"uote', n = 3 })
      kube.log.debug("not shown")
      kube.log.warn("plain")
      kube.stop()
    ]], "", "--log-format json")
    assert.equal(0, status)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = kube.json.decode(line) end
    assert.equal(3, #lines)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", lines[1].ts)
    lines[1].ts, lines[2].ts, lines[3].ts = nil, nil, nil
    assert.same({ level = "info", msg = 'hello "world"\nnext', a = "x y", b = 'q"uote', n = "3" },
                lines[1])
    assert.same({ level = "warn", msg = "plain" }, lines[2])
    assert.same({ level = "info", msg = "stopping: waiting for 0 running reconciles" }, lines[3])
  end)

  it("shows debug lines from --v 4 up, as klog's verbosity", function()
    local script = "local kube = require 'kubelua' kube.log.debug('dbg') kube.stop()"
    local _, out = run_script(script, "", "--v 4")
    assert.matches("DEBUG dbg\n", out, 1, true)
    _, out = run_script(script, "", "--v 2")
    assert.is_nil(out:find("dbg", 1, true))
  end)

  it("logs every reconcile at debug with its key, duration and outcome", function()
    local status, out = run_script([[
      local kube = require "kubelua"
      local q = kube.workqueue("logged")
      local seen = 0
      kube.workers(q, 1, function(key)
        seen = seen + 1
        if key == "bad" and seen < 3 then return nil, "boom" end
        if seen >= 3 then kube.stop() end
      end)
      q:add("good")
      q:add("bad")
    ]], "", "--log-level debug")
    assert.equal(0, status)
    assert.matches("DEBUG reconcile duration=%d+%.%d%d%d%d%d%d key=good queue=logged result=success\n", out)
    assert.matches("DEBUG reconcile duration=%d+%.%d%d%d%d%d%d key=bad queue=logged result=error\n", out)
    assert.matches("ERROR reconcile failed error=boom key=bad queue=logged\n", out, 1, true)
    assert.matches("DEBUG reconcile duration=[%d.]+ key=bad queue=logged result=success\n", out)
  end)

  local failing = [[
    local kube = require "kubelua"
    local q = kube.workqueue("work")
    local function helper(t) return t.x end
    kube.workers(q, 1, function(key)
      helper(nil)
    end)
    q:add("a")
    kube.spawn(function() q:shutdown() kube.stop() end)
  ]]

  it("writes a reconcile's traceback under its line, from the user's frame to the reconcile",
     function()
    local status, out, path = run_script(failing)
    assert.equal(0, status)
    local p = path:gsub("%p", "%%%0")
    assert.matches("^[%d:.TZ-]+ ERROR reconcile failed error=\"" .. p .. ":3: attempt to index "
      .. "local 't' %(a nil value%)\" key=a queue=work\n"
      .. "    stack traceback:\n"
      .. "        " .. p .. ":3: in function 'helper'\n"
      .. "        " .. p .. ":5: in function <" .. p .. ":4>\n[%d:.TZ-]+ INFO ", out)
  end)

  it("keeps a reconcile's traceback in its error member in JSON", function()
    local status, out, path = run_script(failing, "", "--log-format json")
    assert.equal(0, status)
    local line = kube.json.decode(out:match("[^\n]*reconcile failed[^\n]*"))
    assert.equal(path .. ":3: attempt to index local 't' (a nil value)\nstack traceback:\n\t"
      .. path .. ":3: in function 'helper'\n\t" .. path .. ":5: in function <" .. path .. ":4>",
      line.error)
  end)

  it("writes a task's traceback under its line, indented, from the user's frame", function()
    local status, out, path = run_script([[
      local kube = require "kubelua"
      kube.spawn(function() error("boom\nsecond line") end)
    ]])
    assert.equal(1, status)
    local p = path:gsub("%p", "%%%0")
    assert.matches("^[%d:.TZ-]+ ERROR main task failed; stopping with exit status 1: " .. p
      .. ":2: boom\\nsecond line task=main\n"
      .. "    stack traceback:\n"
      .. "        " .. p .. ":2: in function <" .. p .. ":2>\n[%d:.TZ-]+ INFO ", out)
  end)

  it("refuses an unknown format", function()
    local status, out = support.sh(support.kubelua .. " run --log-format xml x.lua")
    assert.equal(2, status)
    assert.matches('kubelua: unknown log format "xml" (text, json)\n', out, 1, true)
  end)

  it("never prints the bearer token, even at debug and on errors", function()
    local token = "tok-" .. ("%08x"):format(math.random(0, 0x7fffffff)) .. "-secret"
    local sim = helper.start("--token " .. token)
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0)
    local f = assert(io.open(dir .. "/config", "w"))
    f:write(([[
apiVersion: v1
kind: Config
current-context: c
clusters: [{name: s, cluster: {server: "%s"}}]
users: [{name: u, user: {token: "%s"}}]
contexts: [{name: c, context: {cluster: s, user: u, namespace: default}}]
]]):format(sim.base, token))
    f:close()
    local status, out = run_script([[
      local kube = require "kubelua"
      local cms = kube.informer("v1", "configmaps", { namespace = "default" })
      kube.spawn(function()
        assert(kube.wait_for_sync(cms, 10))
        assert(kube.create{ apiVersion = "v1", kind = "ConfigMap",
                            metadata = { name = "c", namespace = "default" } })
        local _, err = kube.get("v1", "configmaps", "default", "missing")
        kube.log.info("a failed get", { error = tostring(err) })
        kube.log.info("the connection", { server = kube.connection().server })
        local bad = kube.client.new{ server = kube.server(), token = "wrong-token" }
        local _, berr = bad:get("v1", "configmaps", "default", "c")
        kube.log.info("with a wrong token", { error = tostring(berr) })
        kube.event(cms:get("default/c") or { apiVersion = "v1", kind = "ConfigMap",
                   metadata = { name = "c", namespace = "default" } }, "Normal", "Seen", "seen")
        kube.sleep(0.2)
        kube.stop()
      end)
    ]], "", "--log-level debug --kubeconfig " .. dir .. "/config")
    helper.stop(sim)
    os.execute("rm -rf " .. dir)
    assert.equal(0, status)
    assert.matches("a failed get error=\"NotFound: configmaps \\\"missing\\\" not found\"", out, 1, true)
    assert.matches("with a wrong token error=\"Unauthorized: Unauthorized\"", out, 1, true)
    assert.is_nil(out:find(token, 1, true))
    assert.is_nil(out:find("wrong-token", 1, true))
  end)
end)
