-- Connecting: kubeconfig files, in-cluster service accounts, and
-- `kubelua run --kubeconfig` against a simulator that wants a token.
local kubeconfig = require "kubelua.kubeconfig"
local sim_helper = require "spec.integration.sim_helper"
local support = require "spec.support"

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d) == 0)
  return d
end

local function kubeconfig_text(server, token, ns)
  return ([[
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: sim
  cluster:
    server: %s
users:
- name: me
  user:
    token: %s
contexts:
- name: dev
  context:
    cluster: sim
    user: me
    namespace: %s
- name: other
  context:
    cluster: sim
    user: me
]]):format(server, token, ns)
end

describe("kubelua.kubeconfig.load", function()
  it("reads a kubeconfig file, its context and its token", function()
    local d = tmpdir()
    write(d .. "/config", kubeconfig_text("http://127.0.0.1:9", "s3cret", "team-a"))
    local cfg, creds = kubeconfig.load{ kubeconfig = d .. "/config", env = {} }
    assert.equal("http://127.0.0.1:9", cfg.server)
    assert.equal("team-a", cfg.namespace)
    assert.equal("dev", cfg.context)
    assert.equal("kubeconfig " .. d .. "/config", cfg.origin)
    assert.equal("s3cret", creds:token())
    cfg = kubeconfig.load{ kubeconfig = d .. "/config", context = "other", env = {} }
    assert.equal("default", cfg.namespace)
    os.execute("rm -rf " .. d)
  end)

  it("names a missing context and never shows the token", function()
    local d = tmpdir()
    write(d .. "/config", kubeconfig_text("http://127.0.0.1:9", "s3cret", "x"))
    local cfg, err = kubeconfig.load{ kubeconfig = d .. "/config", context = "prod", env = {} }
    assert.is_nil(cfg)
    assert.equal("kubeconfig " .. d .. '/config: context "prod" not found', err)
    assert.is_nil(err:find("s3cret", 1, true))
    os.execute("rm -rf " .. d)
  end)

  it("uses the pod's service account in a cluster", function()
    local d = tmpdir()
    write(d .. "/token", "pod-token\n")
    write(d .. "/ca.crt", "-----BEGIN CERTIFICATE-----\n")
    write(d .. "/namespace", "team-b\n")
    local cfg, creds = kubeconfig.load{
      sa_dir = d,
      env = { KUBERNETES_SERVICE_HOST = "fd00::1", KUBERNETES_SERVICE_PORT = "443" },
    }
    assert.equal("https://[fd00::1]:443", cfg.server)
    assert.equal("team-b", cfg.namespace)
    assert.equal("in-cluster", cfg.origin)
    assert.equal(d .. "/ca.crt", cfg.ca_file)
    assert.equal("pod-token", creds:token())
    os.execute("rm -rf " .. d)
  end)

  it("says when there is no configuration at all", function()
    local cfg, err = kubeconfig.load{ env = { HOME = "/nonexistent" } }
    assert.is_nil(cfg)
    assert.is_string(err)
  end)
end)

describe("kubelua run --kubeconfig", function()
  local sim, dir
  setup(function()
    sim = sim_helper.start("--token secret")
    dir = tmpdir()
    write(dir .. "/good", kubeconfig_text(sim.base, "secret", "default"))
    write(dir .. "/bad", kubeconfig_text(sim.base, "wrong", "default"))
    write(dir .. "/script.lua", [[
      local kube = require "kubelua"
      kube.spawn(function()
        local nss = kube.informer("v1", "namespaces")
        local synced = kube.wait_for_sync(nss, 2)
        print(synced, nss:len(), kube.connection().origin, kube.connection().namespace)
        kube.stop()
      end)
    ]])
  end)
  teardown(function()
    sim_helper.stop(sim)
    os.execute("rm -rf " .. dir)
  end)

  it("connects with the kubeconfig's server and token", function()
    local status, out = support.sh(support.kubelua .. " run --kubeconfig " .. dir .. "/good "
      .. dir .. "/script.lua")
    assert.equal(0, status)
    assert.matches("true\t%d+\tkubeconfig " .. dir:gsub("%p", "%%%0") .. "/good\tdefault\n", out)
  end)

  it("never syncs with a token the server refuses, and logs why", function()
    local status, out = support.sh(support.kubelua .. " run --kubeconfig " .. dir .. "/bad "
      .. dir .. "/script.lua")
    assert.equal(0, status)
    assert.matches("false\t0\t", out)
    assert.matches("401", out)
    assert.is_nil(out:find("wrong", 1, true))
  end)
end)
