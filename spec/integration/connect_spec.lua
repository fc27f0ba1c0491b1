-- Connecting: kubeconfig files, in-cluster service accounts, credentials
-- that change (token files, exec plugins), and
-- `kubelua run --kubeconfig` against a simulator that wants a token.
local kube = require "kubelua"
local http = require "kubelua.http"
local kubeconfig = require "kubelua.kubeconfig"
local simulator = require "kubelua.sim"
local sim_helper = require "spec.integration.sim_helper"
local support = require "spec.support"

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. d) == 0)
  return d
end

-- A kubeconfig with contexts "dev" (current, namespace ns) and "other";
-- user is the YAML of the user's fields, or a token.
local function kubeconfig_text(server, user, ns)
  if not user:find(":", 1, true) then user = "    token: " .. user end
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
%s
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
]]):format(server, user, ns)
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

local eventually = support.eventually

-- A request with a given token, past any credentials object.
local function call(base, token, method, path, obj)
  local r = assert(http.request{
    method = method, url = base .. path,
    headers = { Authorization = "Bearer " .. token, ["Content-Type"] = "application/json" },
    body = obj and kube.json.encode(obj) or nil,
  })
  return r.status
end

local function cm(name)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = "creds" }, data = { k = name } }
end

-- Credentials that change while informers watch and requests flow: a token
-- file rotated under a running informer, and an exec credential plugin
-- cached until its expirationTimestamp and run again after a 401. The
-- simulator runs in this process; the test changes the token it accepts.
describe("credentials that change", function()
  local sim, base, dir

  setup(function()
    dir = tmpdir()
    sim = simulator.new{ token = "old-token" }
    local srv = assert(sim:listen{ host = "127.0.0.1", port = 0 })
    base = "http://127.0.0.1:" .. srv:port()
    assert.equal(201, call(base, "old-token", "POST", "/api/v1/namespaces",
      { apiVersion = "v1", kind = "Namespace", metadata = { name = "creds" } }))
  end)
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("an informer re-lists and re-watches with a rotated token file", function()
    write(dir .. "/token", "old-token\n")
    write(dir .. "/config", kubeconfig_text(base, "    tokenFile: " .. dir .. "/token", "creds"))
    assert(kube.connect{ kubeconfig = dir .. "/config" })
    assert.equal(201, call(base, "old-token", "POST", "/api/v1/namespaces/creds/configmaps",
      cm("a")))
    local inf = kube.informer("v1", "configmaps", { namespace = "creds" })
    assert.is_true(kube.wait_for_sync(inf, 5))
    assert.is_true(eventually(function() return inf:get("creds/a") ~= nil end))

    -- The token rotates: the server accepts only the new one, the file
    -- holds it, and the watch breaks. The reflector's next watch carries
    -- the cached old token, is refused, and the retry re-reads the file.
    write(dir .. "/token", "new-token\n")
    sim.opts.token = "new-token"
    sim:inject{ drop_watches = true }
    assert.equal(401, call(base, "old-token", "POST", "/api/v1/namespaces/creds/configmaps",
      cm("b")))
    assert.equal(201, call(base, "new-token", "POST", "/api/v1/namespaces/creds/configmaps",
      cm("b")))
    assert.is_true(eventually(function() return inf:get("creds/b") ~= nil end, 10))
    -- and it keeps following the watch
    assert.equal(201, call(base, "new-token", "POST", "/api/v1/namespaces/creds/configmaps",
      cm("c")))
    assert.is_true(eventually(function() return inf:get("creds/c") ~= nil end))
    -- the REST client shares the credentials
    assert.equal("a", assert(kube.get("v1", "configmaps", "creds", "a")).metadata.name)
  end)

  -- An exec plugin that prints the token in exec-token, valid for the
  -- seconds in ttl, and counts its runs; a kubeconfig that uses it.
  -- It sleeps `delay` seconds first, if given. Returns the count of runs so
  -- far, as a function.
  local function exec_plugin(token, delay)
    write(dir .. "/exec-token", token)
    write(dir .. "/ttl", "3600")
    write(dir .. "/runs", "")
    write(dir .. "/plugin.sh", ([[#!/bin/sh
sleep %s
echo run >> %s/runs
exp=$(date -u -d "+$(cat %s/ttl) seconds" +%%Y-%%m-%%dT%%H:%%M:%%SZ)
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
printf '"status":{"token":"%%s","expirationTimestamp":"%%s"}}\n' "$(cat %s/exec-token)" "$exp"
]]):format(delay or 0, dir, dir, dir))
    os.execute("chmod +x " .. dir .. "/plugin.sh")
    write(dir .. "/exec-config", kubeconfig_text(base, ([[
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: %s/plugin.sh
      interactiveMode: Never]]):format(dir), "creds"))
    return function()
      local _, n = (read(dir .. "/runs") or ""):gsub("run", "")
      return n
    end
  end

  it("keeps the loop running while an exec plugin runs", function()
    local runs = exec_plugin(sim.opts.token, 0.3)
    local _, creds = kubeconfig.load{ kubeconfig = dir .. "/exec-config" }
    local c = kube.client.new{ server = base, creds = creds }
    local ticks, done = 0, false
    kube.spawn(function()
      while not done do
        ticks = ticks + 1
        kube.sleep(0.01)
      end
    end)
    assert(c:get("v1", "configmaps", "creds", "a"))
    done = true
    assert.equal(1, runs())
    assert.is_true(ticks >= 10, "the loop stalled: " .. ticks .. " ticks")
  end)

  it("an informer runs its exec plugin again after a 401", function()
    local runs = exec_plugin(sim.opts.token)
    assert(kube.connect{ kubeconfig = dir .. "/exec-config" })
    local inf = kube.informer("v1", "configmaps", { namespace = "creds", label_selector = "x!=y" })
    assert.is_true(kube.wait_for_sync(inf, 5))
    assert.equal(1, runs())
    write(dir .. "/exec-token", "exec-token-x")
    sim.opts.token = "exec-token-x"
    sim:inject{ drop_watches = true }
    assert.equal(201, call(base, "exec-token-x", "POST", "/api/v1/namespaces/creds/configmaps",
      cm("x")))
    assert.is_true(eventually(function() return inf:get("creds/x") ~= nil end, 10))
    assert.equal(2, runs())
  end)

  it("runs an exec plugin once, until its credential expires or is refused", function()
    local runs = exec_plugin(sim.opts.token)
    local cfg, creds = kubeconfig.load{ kubeconfig = dir .. "/exec-config" }
    assert(cfg, creds)
    local c = kube.client.new{ server = base, creds = creds }
    assert(c:get("v1", "configmaps", "creds", "a"))
    assert(c:get("v1", "configmaps", "creds", "a"))
    assert.equal(1, runs()) -- cached

    -- refused: run again, and the request is retried with the new token
    write(dir .. "/exec-token", "exec-token-2")
    sim.opts.token = "exec-token-2"
    assert(c:get("v1", "configmaps", "creds", "a"))
    assert.equal(2, runs())

    -- expired: run again before the request
    write(dir .. "/ttl", "2") -- the next run's credential expires soon
    sim.opts.token = "exec-token-3"
    write(dir .. "/exec-token", "exec-token-3")
    assert(c:get("v1", "configmaps", "creds", "a"))
    assert.equal(3, runs())
    kube.sleep(2.2)
    assert(c:get("v1", "configmaps", "creds", "a"))
    assert.equal(4, runs())

    -- a plugin that fails: the error names the plugin, never a token
    write(dir .. "/plugin.sh", "#!/bin/sh\necho 'no login' >&2\nexit 3\n")
    sim.opts.token = "exec-token-5"
    local res, err = c:get("v1", "configmaps", "creds", "a")
    assert.is_nil(res)
    assert.is_true(kube.is_unauthorized(err))
    assert.matches("plugin.sh", tostring(err), 1, true)
    assert.is_nil(tostring(err):find("exec-token", 1, true))
  end)
end)
