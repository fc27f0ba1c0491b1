-- TLS and configuration end to end, against the simulator in this process
-- serving HTTPS with certificates made here by the openssl CLI: the right
-- CA, a wrong CA (a clear error that names no secret), insecure-skip-tls-
-- verify, tls-server-name, a client certificate (checked by `openssl
-- s_server -Verify`, since the simulator asks for none), a kubeconfig with
-- two contexts, and in-cluster configuration from a directory and
-- environment variables.
local kube = require "kubelua"
local http = require "kubelua.http"
local simulator = require "kubelua.sim"

local dir -- certificates and kubeconfigs

local function write(path, text)
  local f = assert(io.open(dir .. "/" .. path, "w"))
  f:write(text)
  assert(f:close())
end

local function sh(cmd)
  assert(os.execute(cmd .. " >/dev/null 2>&1") == 0, "failed: " .. cmd)
end

-- A key and a certificate NAME.crt signed by CA (or self-signed when CA is
-- nil), with subjectAltName san (or none).
local function cert(name, ca, san)
  local key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "
    .. dir .. "/" .. name .. ".key"
  if not ca then
    sh("openssl req -x509" .. key .. " -out " .. dir .. "/" .. name .. ".crt -subj /CN="
      .. name .. " -days 1")
    return
  end
  sh("openssl req" .. key .. " -out " .. dir .. "/" .. name .. ".csr -subj /CN=" .. name)
  local ext = ""
  if san then
    write(name .. ".ext", "subjectAltName=" .. san .. "\n")
    ext = " -extfile " .. dir .. "/" .. name .. ".ext"
  end
  sh("openssl x509 -req -in " .. dir .. "/" .. name .. ".csr -CA " .. dir .. "/" .. ca
    .. ".crt -CAkey " .. dir .. "/" .. ca .. ".key -CAcreateserial -days 1 -out " .. dir
    .. "/" .. name .. ".crt" .. ext)
end

local function base64(path)
  local p = io.popen("base64 -w0 " .. dir .. "/" .. path)
  local s = p:read("*a")
  p:close()
  return s
end

-- A kubeconfig with one cluster per entry of clusters ({name, server,
-- fields}) and contexts "admin" (current) and "bob" on the first one.
local function kubeconfig(file, clusters, contexts)
  local out = { "apiVersion: v1", "kind: Config", "current-context: admin", "clusters:" }
  for _, c in ipairs(clusters) do
    out[#out + 1] = "- name: " .. c[1] .. "\n  cluster:\n    server: " .. c[2]
    for _, f in ipairs(c[3] or {}) do out[#out + 1] = "    " .. f end
  end
  out[#out + 1] = "users:\n- name: admin\n  user:\n    token: admin-token"
  out[#out + 1] = "- name: bob\n  user:\n    token: bob-token"
  out[#out + 1] = "contexts:"
  for _, c in ipairs(contexts or { { "admin", clusters[1][1], "admin" },
                                   { "bob", clusters[1][1], "bob" } }) do
    out[#out + 1] = ("- name: %s\n  context:\n    cluster: %s\n    user: %s\n"
      .. "    namespace: tls"):format(c[1], c[2], c[3])
  end
  write(file, table.concat(out, "\n") .. "\n")
  return dir .. "/" .. file
end

local sim, base, named_base, sserver, sserver_url

-- `openssl s_server -Verify 1 -www` on a free port, once: a server that
-- requires a client certificate signed by ca and answers any request with
-- an HTML page describing it. Returns its URL.
local function s_server()
  if sserver_url then return sserver_url end
  local log = dir .. "/s_server.log"
  local p = io.popen("sh -c 'exec openssl s_server -accept 127.0.0.1:0 -www -Verify 1 "
    .. "-cert " .. dir .. "/server.crt -key " .. dir .. "/server.key -CAfile " .. dir
    .. "/ca.crt >" .. log .. " 2>&1 & echo $!'")
  sserver = p:read("*l")
  p:close()
  local port
  for _ = 1, 200 do
    local f = io.open(log)
    port = f and f:read("*a"):match("ACCEPT [^\n]*:(%d+)")
    if f then f:close() end
    if port then break end
    kube.sleep(0.02)
  end
  assert(port, "openssl s_server did not start")
  sserver_url = "https://127.0.0.1:" .. port .. "/"
  return sserver_url
end

local function slurp(name)
  local f = assert(io.open(dir .. "/" .. name))
  local s = f:read("*a")
  f:close()
  return s
end

describe("TLS and configuration", function()
  setup(function()
    local p = io.popen("mktemp -d")
    dir = p:read("*l")
    p:close()
    cert("ca")
    cert("other-ca")
    cert("server", "ca", "IP:127.0.0.1,DNS:localhost")
    cert("named", "ca", "DNS:kubernetes.test") -- not valid for 127.0.0.1
    cert("client", "ca")
    sim = simulator.new{ token = "admin-token", users = { ["bob-token"] = "bob" } }
    local srv = assert(sim:listen{ host = "127.0.0.1", port = 0,
      tls_cert = dir .. "/server.crt", tls_key = dir .. "/server.key" })
    base = "https://127.0.0.1:" .. srv:port()
    local named = assert(sim:listen{ host = "127.0.0.1", port = 0,
      tls_cert = dir .. "/named.crt", tls_key = dir .. "/named.key" })
    named_base = "https://127.0.0.1:" .. named:port()
    assert(kube.connect{ server = base, token = "admin-token", tls = { ca_file = dir .. "/ca.crt" } })
    assert(kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = "tls" } })
    assert(kube.create{ apiVersion = "v1", kind = "ConfigMap",
                        metadata = { name = "c1", namespace = "tls" } })
  end)

  teardown(function()
    if sserver then os.execute("kill " .. sserver .. " 2>/dev/null") end
    os.execute("rm -rf " .. dir)
  end)

  it("verifies the server with the kubeconfig's CA, for requests and informers", function()
    assert(kube.connect{ kubeconfig = kubeconfig("ca-file", { { "sim", base,
      { "certificate-authority: " .. dir .. "/ca.crt" } } }) })
    assert.equal("c1", assert(kube.get("v1", "configmaps", "tls", "c1")).metadata.name)
    local inf = kube.informer("v1", "configmaps", { namespace = "tls" })
    assert.is_true(kube.wait_for_sync(inf, 5))
    assert.is_truthy(inf:get("tls/c1"))
    -- the CA as data
    assert(kube.connect{ kubeconfig = kubeconfig("ca-data", { { "sim", base,
      { "certificate-authority-data: " .. base64("ca.crt") } } }) })
    assert(kube.get("v1", "configmaps", "tls", "c1"))
  end)

  it("refuses a server its CA did not sign, with a clear error and no secret", function()
    assert(kube.connect{ kubeconfig = kubeconfig("wrong-ca", { { "sim", base,
      { "certificate-authority-data: " .. base64("other-ca.crt") } } }) })
    local obj, err = kube.get("v1", "configmaps", "tls", "c1")
    assert.is_nil(obj)
    assert.equal("Transport", err.reason)
    assert.matches("certificate", tostring(err))
    assert.is_nil(tostring(err):find("admin-token", 1, true))
    -- and the system's roots do not know it either
    assert(kube.connect{ kubeconfig = kubeconfig("no-ca", { { "sim", base } }) })
    obj, err = kube.get("v1", "configmaps", "tls", "c1")
    assert.is_nil(obj)
    assert.matches("certificate", tostring(err))
  end)

  it("skips verification only when insecure-skip-tls-verify says so", function()
    assert(kube.connect{ kubeconfig = kubeconfig("insecure", { { "sim", base,
      { "insecure-skip-tls-verify: true" } } }) })
    assert(kube.get("v1", "configmaps", "tls", "c1"))
  end)

  it("checks the certificate against tls-server-name, connecting to the server", function()
    assert(kube.connect{ kubeconfig = kubeconfig("server-name", { { "sim", named_base,
      { "certificate-authority: " .. dir .. "/ca.crt", "tls-server-name: kubernetes.test" } } }) })
    assert(kube.get("v1", "configmaps", "tls", "c1"))
    local inf = kube.informer("v1", "configmaps", { namespace = "tls", label_selector = "x!=y" })
    assert.is_true(kube.wait_for_sync(inf, 5))
    -- without it the name is 127.0.0.1, which the certificate does not have
    assert(kube.connect{ kubeconfig = kubeconfig("no-server-name", { { "sim", named_base,
      { "certificate-authority: " .. dir .. "/ca.crt" } } }) })
    local obj, err = kube.get("v1", "configmaps", "tls", "c1")
    assert.is_nil(obj)
    assert.matches("127.0.0.1", tostring(err))
  end)

  it("uses the current context, or the one asked for", function()
    local path = kubeconfig("two", { { "sim", base, { "certificate-authority: " .. dir
      .. "/ca.crt" } } })
    assert(kube.connect{ kubeconfig = path })
    assert(kube.get("v1", "configmaps", "tls", "c1"))
    assert.equal("tls", kube.connection().namespace)
    assert(kube.connect{ kubeconfig = path, context = "bob" })
    local obj, err = kube.get("v1", "configmaps", "tls", "c1")
    assert.is_nil(obj)
    assert.is_true(kube.is_forbidden(err))
    assert.matches('User "bob"', tostring(err))
  end)

  it("connects in-cluster from the service-account directory and variables", function()
    local sa = dir .. "/sa"
    sh("mkdir -p " .. sa .. " && cp " .. dir .. "/ca.crt " .. sa .. "/ca.crt")
    write("sa/token", "admin-token\n")
    write("sa/namespace", "tls\n")
    assert(kube.connect{ sa_dir = sa, env = { KUBERNETES_SERVICE_HOST = "127.0.0.1",
      KUBERNETES_SERVICE_PORT = base:match(":(%d+)$") } })
    assert.equal("in-cluster", kube.connection().origin)
    assert.equal("tls", kube.connection().namespace)
    assert(kube.get("v1", "configmaps", "tls", "c1"))
  end)

  it("presents the client certificate to a server that requires one", function()
    local url = s_server()
    local tls = { ca_file = dir .. "/ca.crt", cert_file = dir .. "/client.crt",
                  key_file = dir .. "/client.key" }
    local r = assert(http.request{ url = url, tls = tls })
    assert.equal(200, r.status)
    assert.matches("Subject: CN=client", r.body, 1, true)
    -- the same as PEM data, as kubeconfig's client-certificate-data gives it
    r = assert(http.request{ url = url, tls = { ca_file = dir .. "/ca.crt",
      cert = slurp("client.crt"), key = slurp("client.key") } })
    assert.matches("Subject: CN=client", r.body, 1, true)
    -- without one the handshake fails
    local none, err = http.request{ url = url, tls = { ca_file = dir .. "/ca.crt" } }
    assert.is_nil(none)
    assert.is_string(err)
  end)

  it("presents the client certificate an exec plugin returns", function()
    local url = s_server()
    write("cert-cred.json", kube.json.encode{
      apiVersion = "client.authentication.k8s.io/v1", kind = "ExecCredential",
      status = { clientCertificateData = slurp("client.crt"),
                 clientKeyData = slurp("client.key") } })
    write("cert-plugin.sh", "#!/bin/sh\ncat " .. dir .. "/cert-cred.json\n")
    sh("chmod +x " .. dir .. "/cert-plugin.sh")
    write("cert-config", ([[
apiVersion: v1
kind: Config
current-context: c
clusters:
- name: s
  cluster:
    server: %s
    certificate-authority: %s/ca.crt
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: %s/cert-plugin.sh
      interactiveMode: Never
contexts:
- name: c
  context: {cluster: s, user: u}
]]):format(url:sub(1, -2), dir, dir))
    local cfg, creds = require("kubelua.kubeconfig").load{ kubeconfig = dir .. "/cert-config" }
    assert(cfg, creds)
    local c = kube.client.new{ server = cfg.server, creds = creds, tls = { ca_file = cfg.ca_file } }
    -- the handshake passes: s_server answers 200 (with HTML, not JSON)
    local obj, err = c:request("GET", "/")
    assert.is_nil(obj)
    assert.equal(200, err.code)
    -- without the plugin's certificate it does not
    c = kube.client.new{ server = cfg.server, tls = { ca_file = cfg.ca_file } }
    obj, err = c:request("GET", "/")
    assert.is_nil(obj)
    assert.equal("Transport", err.reason)
  end)

  it("gives an informer the client certificate an exec plugin returns", function()
    -- (continues the test above) in a process of its own: s_server's
    -- HTML cannot be decoded, so the reflector's log tells whether the
    -- handshake passed
    local status, out = require("spec.support").run_script([[
      local kube = require "kubelua"
      kube.spawn(function()
        kube.informer("v1", "configmaps")
        kube.sleep(1)
        kube.stop()
      end)
    ]], "", "--kubeconfig " .. dir .. "/cert-config")
    assert.equal(0, status)
    assert.matches("decoding", out, 1, true) -- the streaming list got an answer
    assert.is_nil(out:find("SSL", 1, true))
  end)
end)
