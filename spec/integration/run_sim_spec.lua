-- `kubelua run --sim`: the simulator the controller runs against is
-- served where other clients (kubectl) can reach it, its URL and a
-- kubeconfig for it said in one line at start, with --sim-listen,
-- --sim-kubeconfig and --sim-load. #sim
local kube = require "kubelua"
local json = require "kubelua.json"
local process = require "kubelua.process"
local support = require "spec.support"
local helper = require "spec.integration.sim_helper"
local proc_helper = require "spec.integration.proc_helper"

local read_file, sh = helper.read_file, support.sh

-- A controller that logs each ConfigMap it reconciles.
local SCRIPT = [[
local kube = require "kubelua"
kube.controller{ name = "seer", watches = { "v1", "ConfigMap" },
  reconcile = function(req)
    kube.log.info("seen", { key = req.namespace .. "/" .. req.name })
  end }
]]

-- The log's "simulator listening" line with its time taken off, and the
-- URL it names.
local function listening(out)
  local line = out:match("[^\n]* INFO  (simulator listening [^\n]*)\n")
  return line, line and line:match("url=(%S+)")
end

describe("kubelua run --sim", function()
  local dir, script
  before_each(function()
    dir = assert(process.mkdtemp("/tmp/kubelua-run-sim-"))
    script = dir .. "/seer.lua"
    local f = assert(io.open(script, "w"))
    f:write(SCRIPT)
    f:close()
  end)
  after_each(function() sh("rm -rf " .. helper.quote(dir)) end)

  it("serves the controller's world where another client reaches it", function()
    local load = dir .. "/seed"
    assert(os.execute("mkdir " .. helper.quote(load)) == 0)
    local f = assert(io.open(load .. "/cm.yaml", "w"))
    f:write("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: seeded\n"
      .. "  namespace: default\ndata:\n  a: \"1\"\n")
    f:close()
    local kc = dir .. "/sim.kubeconfig"
    local proc = proc_helper.start("--sim --sim-listen 127.0.0.1:0 --sim-kubeconfig "
      .. helper.quote(kc) .. " --sim-load " .. helper.quote(load) .. " " .. helper.quote(script))
    local out = proc_helper.wait_log(proc, "seen key=default/seeded\n")
    local line, url = listening(out)
    local port = url and url:match("^http://127%.0%.0%.1:(%d+)$")
    assert(port, out)
    assert.equal("simulator listening kubeconfig=" .. kc .. " url=" .. url, line)
    assert.equal(1, proc_helper.count(out, "simulator listening"))
    -- the kubeconfig names the simulator, and a client it makes is heard
    local cfg = json.decode(read_file(kc))
    assert.same({ { name = "kubelua-sim", cluster = { server = url } } }, cfg.clusters)
    assert.equal("kubelua-sim", cfg["current-context"])
    local c = kube.client.new{ server = cfg.clusters[1].cluster.server, qps = 0 }
    assert(c:create{ apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "from-outside", namespace = "default" } })
    proc_helper.wait_log(proc, "seen key=default/from%-outside\n")
    helper.stop(proc)
    -- a kubeconfig it was given stays
    assert.is_truthy(read_file(kc))
  end)

  it("writes its default kubeconfig in XDG_RUNTIME_DIR, named after its pid, and removes it",
    function()
      local proc = proc_helper.start(helper.quote(script) .. " --sim",
        { env = "XDG_RUNTIME_DIR=" .. helper.quote(dir) })
      local out = proc_helper.wait_log(proc, "seen key=default/kube%-root%-ca%.crt\n")
      local kc = dir .. "/kubelua-sim-" .. proc.pid .. ".kubeconfig"
      local line, url = listening(out)
      assert.equal("simulator listening kubeconfig=" .. kc .. " url=" .. url, line)
      assert.same({ { name = "kubelua-sim", cluster = { server = url } } },
        json.decode(read_file(kc)).clusters)
      helper.stop(proc)
      assert.is_nil(read_file(kc))
    end)

  it("serves the reconciles a graceful stop waits for until they end", function()
    local slow = dir .. "/slow.lua"
    local f = assert(io.open(slow, "w"))
    f:write([[
local kube = require "kubelua"
kube.controller{ name = "slow", watches = { "v1", "ConfigMap" },
  reconcile = function(req)
    if req.name ~= "kube-root-ca.crt" or req.namespace ~= "default" then return end
    kube.log.info("reconciling")
    kube.sleep(1)
    local cm, err = kube.get("v1", "configmaps", req.namespace, req.name)
    kube.log.info("read after the stop began", { found = cm ~= nil, err = err and err.message })
  end }
]])
    f:close()
    local proc = proc_helper.start("--sim " .. helper.quote(slow))
    proc_helper.wait_log(proc, "INFO  reconciling\n")
    local out = helper.stop(proc)
    assert.matches("INFO  stopping: waiting for 1 running reconciles\n", out, 1, true)
    assert.matches("INFO  read after the stop began found=true\n", out, 1, true)
    assert.is_nil(out:find("ERROR", 1, true), out)
  end)

  it("refuses its options without --sim, and says what is wrong with their values", function()
    for _, c in ipairs {
      { "--sim-listen 127.0.0.1:0", 2, "kubelua: --sim-listen needs --sim\n" },
      { "--sim-load /tmp", 2, "kubelua: --sim-load needs --sim\n" },
      { "--sim --sim-listen nonsense", 1,
        "kubelua: --sim: --sim-listen needs HOST:PORT, got nonsense\n" },
      { "--sim --sim-load " .. helper.quote(dir .. "/none"), 1,
        "kubelua: --sim: --sim-load: " .. dir .. "/none: not a readable directory\n" },
      { "--sim --sim-kubeconfig " .. helper.quote(dir .. "/none/kc"), 1,
        "kubelua: --sim: --sim-kubeconfig: " .. dir .. "/none/kc: No such file or directory\n" },
    } do
      local status, out = sh(support.kubelua .. " run " .. c[1] .. " " .. helper.quote(script))
      assert.equal(c[2], status)
      assert.equal(c[3], out:match("^[^\n]*\n"))
    end
  end)
end)
