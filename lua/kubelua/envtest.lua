-- kubelua.envtest: a real control plane for tests, as controller-runtime's
-- envtest gives Go controllers: etcd and kube-apiserver (and, on request,
-- kube-controller-manager) on free loopback ports.
--
--   local envtest = require "kubelua.envtest"
--   local cp, err = envtest.start{ apiserver_args = { "--watch-cache=false" } }
--   if not cp then error(err) end
--   local c = cp:client{ qps = 0 }   -- a kubelua.client for it
--   …
--   cp:stop()
--
-- Binaries are found as envtest finds them: opts.assets, else the
-- KUBEBUILDER_ASSETS directory (kube-apiserver, etcd and optionally
-- kube-controller-manager, as setup-envtest installs them), else PATH.
-- start() makes a private temporary directory with a fresh CA, a serving
-- certificate for 127.0.0.1, an admin token (group system:masters) in a
-- token file, service-account keys and an admin kubeconfig; runs the
-- servers with their logs there; and waits (yielding the task) until etcd
-- is healthy and kube-apiserver's /readyz says ok. Without the controller
-- manager, the ServiceAccount admission plugin is off (no default
-- ServiceAccount would ever be made for Pods to use). Failures return nil,
-- "envtest: …" with the tail of the failing server's log.
--
-- The servers cannot outlive kubelua: each runs in a process group of its
-- own that stop() signals, kubelua.process asks the kernel to kill them if
-- kubelua dies, and a graceful stop of kubelua (the end of `kubelua test`,
-- SIGINT, SIGTERM) stops every control plane still running and removes its
-- directory.

local core = require "kubelua.core"
local http = require "kubelua.http"
local json = require "kubelua.json"
local process = require "kubelua.process"

local type, tostring, pairs, ipairs, error, setmetatable = type, tostring, pairs, ipairs, error,
  setmetatable
local format, concat, sort = string.format, table.concat, table.sort
local open, getenv = io.open, os.getenv

local _M = {}

local CP = {}
CP.__index = CP

local running = {} -- control planes not stopped yet, for kubelua's stop

local function sleep(s)
  if core.in_task() then core.sleep(s) end
end

-- A file's last lines (at most 20 of its last 4 KiB), indented, for a
-- failure message.
local function tail(path)
  local f = open(path, "rb")
  if not f then return "" end
  local size = f:seek("end")
  f:seek("set", size > 4096 and size - 4096 or 0)
  local s = f:read("*a") or ""
  f:close()
  local lines = {}
  for line in s:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local first = #lines > 20 and #lines - 19 or 1
  local out = {}
  for i = first, #lines do out[#out + 1] = "  " .. lines[i] end
  if #out == 0 then return "" end
  return "\n" .. concat(out, "\n")
end

local function write_file(path, s)
  local f, err = open(path, "wb")
  if not f then return nil, err end
  f:write(s)
  f:close()
  return true
end

local function is_file(path)
  local f = open(path, "rb")
  if not f then return false end
  f:close()
  local d = open(path .. "/.", "rb") -- opens only for a directory
  if d then d:close() end
  return d == nil
end

-- The executable called name in the directories of the PATH string, or nil.
local function look_path(name, path)
  for d in (path or ""):gmatch("[^:]+") do
    if is_file(d .. "/" .. name) then return d .. "/" .. name end
  end
end

-- find(opts) -> { etcd = path, ["kube-apiserver"] = path,
-- ["kube-controller-manager"] = path or nil }, or nil, message: where
-- start() finds its binaries (kube-controller-manager only needed when
-- opts.controller_manager).
function _M.find(opts)
  opts = opts or {}
  local assets = opts.assets or getenv("KUBEBUILDER_ASSETS")
  if assets == "" then assets = nil end
  local path = getenv("PATH") or ""
  local where = assets and ("KUBEBUILDER_ASSETS=" .. assets) or ("PATH=" .. path)
  if opts.assets then where = "the assets directory " .. assets end
  local names = { "etcd", "kube-apiserver" }
  if opts.controller_manager then names[3] = "kube-controller-manager" end
  local found, missing = {}, {}
  for _, name in ipairs(names) do
    local p
    if assets then
      p = is_file(assets .. "/" .. name) and assets .. "/" .. name or nil
    else
      p = look_path(name, path)
    end
    found[name] = p
    if not p then missing[#missing + 1] = name end
  end
  if #missing > 0 then
    local last = table.remove(missing)
    if #missing > 0 then last = concat(missing, ", ") .. " and " .. last end
    return nil, format("envtest: %s not found in %s (set KUBEBUILDER_ASSETS to a directory "
      .. "holding kube-apiserver, etcd and, for the controller manager, "
      .. "kube-controller-manager, as setup-envtest installs them)",
      last, where)
  end
  return found
end

-- Runs a short command to its end; true, or nil, message with its output.
local function run(dir, name, path, args)
  local log = dir .. "/" .. name .. ".log"
  local p, err = process.spawn{ path = path, args = args, log = log }
  if not p then return nil, format("envtest: %s: %s", name, err) end
  while true do
    local how, code = p:poll()
    if how == "exited" and code == 0 then return true end
    if how then
      return nil, format("envtest: %s %s %d; the end of its log:%s", name,
        how == "exited" and "exited with status" or "was killed by signal", code, tail(log))
    end
    sleep(0.01)
  end
end

-- Runs openssl with each list of arguments in turn; true, or nil, message.
local function run_all(dir, openssl, steps)
  for _, args in ipairs(steps) do
    local ok, err = run(dir, "openssl", openssl, args)
    if not ok then return nil, err end
  end
  return true
end

local OPENSSL_CNF = [[
[req]
distinguished_name = dn
prompt = no
[dn]
CN = %s
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = @alt
[alt]
IP.1 = 127.0.0.1
%s
]]

-- serving_certs(dir, cn, dns_names) -> true | nil, message: a CA
-- (dir/ca.crt, ca.key) and a serving certificate it signed (server.crt,
-- server.key) for 127.0.0.1 and the DNS names, made with openssl (P-256
-- keys: quick to make).
function _M.serving_certs(dir, cn, dns_names)
  local openssl = look_path("openssl", getenv("PATH"))
  if not openssl then
    return nil, "envtest: openssl not found in PATH=" .. (getenv("PATH") or "")
  end
  local alt = {}
  for i, name in ipairs(dns_names) do alt[i] = format("DNS.%d = %s", i, name) end
  local ok, err = write_file(dir .. "/openssl.cnf", format(OPENSSL_CNF, cn, concat(alt, "\n")))
  if not ok then return nil, "envtest: " .. err end
  local ec = { "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2" }
  local function req(extra)
    local args = { "req", "-config", dir .. "/openssl.cnf", "-x509" }
    for _, a in ipairs(ec) do args[#args + 1] = a end
    for _, a in ipairs(extra) do args[#args + 1] = a end
    return args
  end
  local steps = {
    req{ "-extensions", "ca", "-subj", "/CN=" .. cn .. "-ca",
         "-keyout", dir .. "/ca.key", "-out", dir .. "/ca.crt" },
    req{ "-extensions", "server", "-subj", "/CN=" .. cn,
         "-CA", dir .. "/ca.crt", "-CAkey", dir .. "/ca.key",
         "-keyout", dir .. "/server.key", "-out", dir .. "/server.crt" },
  }
  return run_all(dir, openssl, steps)
end

-- The CA, the serving certificate and the service-account key pair.
local function make_certs(dir)
  local ok, err = _M.serving_certs(dir, "kube-apiserver", { "localhost", "kubernetes",
    "kubernetes.default", "kubernetes.default.svc" })
  if not ok then return nil, err end
  local openssl = look_path("openssl", getenv("PATH"))
  local steps = {
    { "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
      "-out", dir .. "/sa.key" },
    { "pkey", "-in", dir .. "/sa.key", "-pubout", "-out", dir .. "/sa.pub" },
  }
  return run_all(dir, openssl, steps)
end

-- 32 hex digits from the kernel's random source.
local function random_token()
  local f = open("/dev/urandom", "rb")
  local b = f and f:read(16)
  if f then f:close() end
  if not b or #b ~= 16 then return nil end
  return (b:gsub(".", function(c) return format("%02x", c:byte()) end))
end

local function kubeconfig(server, ca_file, token)
  return format([[{
  "apiVersion": "v1", "kind": "Config",
  "clusters": [{"name": "envtest", "cluster": {"server": %q, "certificate-authority": %q}}],
  "users": [{"name": "admin", "user": {"token": %q}}],
  "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "admin"}}],
  "current-context": "envtest"
}
]], server, ca_file, token)
end

-- Runs one server (args, then the caller's extra flags), remembered in
-- cp.procs for stop(), and waits until check() is true; fails when the
-- server exits first or when cp.timeout seconds pass.
function CP:_serve(name, path, args, extra, check)
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  local log = self.dir .. "/" .. name .. ".log"
  local p, err = process.spawn{ path = path, args = args, log = log }
  if not p then return nil, format("envtest: %s: %s", name, err) end
  self.procs[#self.procs + 1] = { name = name, proc = p }
  local deadline = core.monotonic() + self.timeout
  while true do
    local how, code = p:poll()
    if how then
      return nil, format("envtest: %s %s %d before it was ready; the end of its log:%s", name,
        how == "exited" and "exited with status" or "was killed by signal", code, tail(log))
    end
    if check() then return true end
    if core.monotonic() >= deadline then
      return nil, format("envtest: %s was not ready within %gs; the end of its log:%s", name,
        self.timeout, tail(log))
    end
    sleep(0.1)
  end
end

local function get(url, headers, tls)
  local res = http.request{ method = "GET", url = url, headers = headers, tls = tls,
                            timeout = 5 }
  return res
end

local function port()
  local p, err = process.free_port()
  if not p then error("envtest: " .. err, 0) end
  return p
end

function CP:_start_etcd(bins)
  local client_port, peer_port = port(), port()
  local url = "http://127.0.0.1:" .. client_port
  local peer = "http://127.0.0.1:" .. peer_port
  self.etcd = url
  return self:_serve("etcd", bins.etcd, {
    "--name", "default", "--data-dir", self.dir .. "/etcd",
    "--listen-client-urls", url, "--advertise-client-urls", url,
    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
    "--initial-cluster", "default=" .. peer, "--log-level", "warn",
  }, nil, function()
    local res = get(url .. "/health")
    return res and res.status == 200 and res.body:find('"health":"true"', 1, true)
  end)
end

function CP:_start_apiserver(bins, extra, cm)
  local d = self.dir
  local secure_port = port()
  local args = {
    "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
    "--secure-port=" .. secure_port, "--etcd-servers=" .. self.etcd,
    "--cert-dir=" .. d .. "/apiserver",
    "--tls-cert-file=" .. d .. "/server.crt", "--tls-private-key-file=" .. d .. "/server.key",
    "--client-ca-file=" .. d .. "/ca.crt", "--token-auth-file=" .. d .. "/tokens.csv",
    "--authorization-mode=Node,RBAC",
    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
    "--service-account-key-file=" .. d .. "/sa.pub",
    "--service-account-signing-key-file=" .. d .. "/sa.key",
    "--service-cluster-ip-range=10.96.0.0/12", "--allow-privileged=true", "--profiling=false",
  }
  -- Without the controller manager nothing makes the default
  -- ServiceAccount that this plugin wants a Pod's namespace to have.
  if not cm then args[#args + 1] = "--disable-admission-plugins=ServiceAccount" end
  self.server = "https://127.0.0.1:" .. secure_port
  local headers = { Authorization = "Bearer " .. self.token }
  local tls = { ca_file = self.ca_file }
  return self:_serve("kube-apiserver", bins["kube-apiserver"], args, extra, function()
    local res = get(self.server .. "/readyz", headers, tls)
    return res and res.status == 200
  end)
end

function CP:_start_controller_manager(bins, extra)
  local d = self.dir
  local healthz_port = port()
  local args = {
    "--kubeconfig=" .. self.kubeconfig, "--authentication-kubeconfig=" .. self.kubeconfig,
    "--authorization-kubeconfig=" .. self.kubeconfig,
    "--bind-address=127.0.0.1", "--secure-port=" .. healthz_port,
    "--cert-dir=" .. d .. "/controller-manager",
    "--controllers=*", "--use-service-account-credentials=false",
    "--service-account-private-key-file=" .. d .. "/sa.key", "--root-ca-file=" .. d .. "/ca.crt",
    "--leader-elect=false",
    "--cluster-signing-cert-file=" .. d .. "/ca.crt",
    "--cluster-signing-key-file=" .. d .. "/ca.key",
    "--service-cluster-ip-range=10.96.0.0/12",
  }
  return self:_serve("kube-controller-manager", bins["kube-controller-manager"], args, extra,
                     function()
    local res = get("https://127.0.0.1:" .. healthz_port .. "/healthz", nil, { insecure = true })
    return res and res.status == 200
  end)
end

-- What clean() keeps besides the server's own objects: what the controller
-- manager publishes into every namespace (it would only put them back).
local KEEP = {
  ["v1/serviceaccounts/default"] = true,
  ["v1/configmaps/kube-root-ca.crt"] = true,
  ["v1/configmaps/openshift-service-ca.crt"] = true,
}

-- Every resource that can be listed and deleted, in each group's preferred
-- version (namespaces aside): { api_version, name, namespaced }.
local function deletable(c)
  local gvs = { "v1" }
  local groups, err = c:request("GET", "/apis")
  if not groups then return nil, err end
  for _, g in ipairs(groups.groups or {}) do
    if g.preferredVersion then gvs[#gvs + 1] = g.preferredVersion.groupVersion end
  end
  local out = {}
  for _, gv in ipairs(gvs) do
    local entry
    entry, err = c:discover(gv)
    if not entry then return nil, err end
    for name, info in pairs(entry.resources) do
      local verbs = {}
      for _, v in ipairs(info.verbs or {}) do verbs[v] = true end
      if verbs.list and verbs.delete and name ~= "namespaces" then
        out[#out + 1] = { api_version = gv, name = name, namespaced = info.namespaced }
      end
    end
  end
  -- CRDs last: their objects go first (a CRD that goes deletes its
  -- objects, but waits for their finalizers)
  local function rank(r)
    return (r.name == "customresourcedefinitions" and "1" or "0") .. r.api_version .. "/" .. r.name
  end
  sort(out, function(a, b) return rank(a) < rank(b) end)
  return out
end

-- The uids of every object there is now, namespaces included.
local function snapshot(c)
  local res, err = deletable(c)
  if not res then return nil, err end
  res[#res + 1] = { api_version = "v1", name = "namespaces" }
  local uids = {}
  for _, r in ipairs(res) do
    local list = c:list_all(r.api_version, r.name)
    for _, o in ipairs(list and list.items or {}) do uids[o.metadata.uid] = true end
  end
  return uids
end

local function ignore_not_found(res, err)
  if res or err.code == 404 then return true end
  return nil, err
end

-- cp:clean([c]) -> true, or nil, err: deletes every object made since the
-- server became ready (all namespaces made since, and everything in the
-- others, finalizers cleared first), so that a server serves one spec
-- after another as if new; waits until the namespaces are gone, which a
-- real server does only once their contents are (the controller manager's
-- namespace controller, when it runs, does the same).
function CP:clean(c)
  c = c or self:client{ qps = 0 }
  local res, err = deletable(c)
  if not res then return nil, err end
  local keep = self.baseline
  local doomed, going = {}, {}
  local nss = c:list_all("v1", "namespaces")
  for _, ns in ipairs(nss and nss.items or {}) do
    if not keep[ns.metadata.uid] then
      doomed[#doomed + 1] = ns.metadata.name
      going[ns.metadata.name] = true
      local ok, derr = ignore_not_found(c:delete("v1", "namespaces", nil, ns.metadata.name))
      if not ok then return nil, derr end
    end
  end
  local crds = {}
  -- twice: a controller may have made objects from the ones deleted
  for _ = 1, 2 do
    local deleted = 0
    for _, r in ipairs(res) do
      local list = c:list_all(r.api_version, r.name)
      for _, o in ipairs(list and list.items or {}) do
        local md = o.metadata
        -- what the controller manager makes in every namespace stays, but
        -- not in a namespace that goes: finalizing it below would leave
        -- its contents behind, for a namespace of the same name to find
        if not keep[md.uid] and (going[md.namespace]
            or not KEEP[r.api_version .. "/" .. r.name .. "/" .. md.name]) then
          local ok, derr = true, nil
          if r.name == "customresourcedefinitions" then crds[#crds + 1] = md.name end
          if md.finalizers and #md.finalizers > 0 then
            ok, derr = ignore_not_found(c:patch(r.api_version, r.name, md.namespace, md.name,
              { metadata = { finalizers = json.null } }))
          end
          if ok then
            ok, derr = ignore_not_found(c:delete(r.api_version, r.name, md.namespace, md.name,
              { grace_period_seconds = 0, propagation_policy = "Background" }))
          end
          if not ok then return nil, derr end
          deleted = deleted + 1
        end
      end
    end
    if deleted == 0 then break end
  end
  for _, name in ipairs(crds) do
    local deadline = core.monotonic() + 30
    while c:get("apiextensions.k8s.io/v1", "customresourcedefinitions", nil, name) do
      if core.monotonic() >= deadline then
        return nil, "envtest: CustomResourceDefinition " .. name .. " is still there after 30s"
      end
      sleep(0.05)
    end
  end
  for _, name in ipairs(doomed) do
    local deadline = core.monotonic() + 30
    while true do
      local ns, gerr = c:get("v1", "namespaces", nil, name)
      if not ns then
        if gerr.code == 404 then break end
        return nil, gerr
      end
      if ns.metadata.finalizers and #ns.metadata.finalizers > 0 then
        ignore_not_found(c:patch("v1", "namespaces", nil, name,
          { metadata = { finalizers = json.null } }))
      end
      if ns.spec and ns.spec.finalizers and #ns.spec.finalizers > 0 then
        ns.spec.finalizers = json.array{}
        ignore_not_found(c:request("PUT", "/api/v1/namespaces/" .. name .. "/finalize", nil,
          json.encode(ns), "application/json"))
      end
      if core.monotonic() >= deadline then
        return nil, "envtest: namespace " .. name .. " is still there after 30s"
      end
      sleep(0.05)
    end
  end
  return true
end

-- The servers in order, each ready before the next starts.
local function boot(cp, bins, opts)
  local dir = cp.dir
  cp.token = random_token()
  if not cp.token then return nil, "envtest: cannot read /dev/urandom" end
  local ok, err = make_certs(dir)
  if not ok then return nil, err end
  local lines = { cp.token .. ',admin,admin,"system:masters"' }
  for user, token in pairs(opts.users or {}) do
    lines[#lines + 1] = format("%s,%s,%s", token, user, user)
  end
  ok, err = write_file(dir .. "/tokens.csv", concat(lines, "\n") .. "\n")
  if not ok then return nil, "envtest: " .. err end
  ok, err = cp:_start_etcd(bins)
  if not ok then return nil, err end
  ok, err = cp:_start_apiserver(bins, opts.apiserver_args, opts.controller_manager)
  if not ok then return nil, err end
  ok, err = write_file(cp.kubeconfig, kubeconfig(cp.server, cp.ca_file, cp.token))
  if not ok then return nil, "envtest: " .. err end
  if opts.controller_manager then
    ok, err = cp:_start_controller_manager(bins, opts.controller_manager_args)
    if not ok then return nil, err end
  end
  cp.baseline, err = snapshot(cp:client{ qps = 0 })
  if not cp.baseline then return nil, "envtest: " .. tostring(err) end
  return true
end

local function own_pid()
  local f = open("/proc/self/stat")
  local pid = f and f:read("*n")
  if f then f:close() end
  return pid or 0
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Removes the directories in tmp that a kubelua which died without a stop
-- (SIGKILL, a crash) left: their name says whose they were. (Its servers
-- died with it.)
local function sweep(tmp)
  local ls = io.popen("ls -1 " .. quote(tmp) .. " 2>/dev/null")
  if not ls then return end
  for name in ls:lines() do
    local pid = tonumber(name:match("^kubelua%-envtest%-(%d+)%-%w+$"))
    local f = pid and open("/proc/" .. pid .. "/stat")
    if f then
      f:close()
    elseif pid then
      os.execute("rm -rf -- " .. quote(tmp .. "/" .. name))
    end
  end
  ls:close()
end

local stop_hooked = false

-- start([opts]) -> cp, or nil, "envtest: …". opts: assets (a directory,
-- else KUBEBUILDER_ASSETS, else PATH), controller_manager (boolean),
-- apiserver_args and controller_manager_args (extra flags, after ours, so
-- they may override), timeout (seconds each server may take to be ready,
-- default 60), tmpdir (where its directory goes: else TMPDIR, else /tmp),
-- users ({ name = token }: more users, in no group, so that RBAC lets them
-- do nothing until a spec grants it).
-- Call it from a task.
function _M.start(opts)
  opts = opts or {}
  if type(opts) ~= "table" then
    error("envtest.start: opts must be a table, got " .. type(opts), 2)
  end
  if not core.in_task() then error("envtest.start: not inside a task (use kube.spawn)", 2) end
  for user, token in pairs(opts.users or {}) do
    if type(user) ~= "string" or type(token) ~= "string" or user:find("[,\n\"]")
       or token:find("[,\n\"]") then
      error("envtest.start: opts.users must map names to tokens (strings without , \" or a "
        .. "line break)", 2)
    end
  end
  local tmp = opts.tmpdir or getenv("TMPDIR")
  if not tmp or tmp == "" then tmp = "/tmp" end
  sweep(tmp)
  local bins, err = _M.find(opts)
  if not bins then return nil, err end
  local dir
  dir, err = process.mkdtemp(tmp .. "/kubelua-envtest-" .. own_pid() .. "-")
  if not dir then return nil, "envtest: " .. err end
  if not stop_hooked then
    stop_hooked = true
    core.on_stop(function()
      for cp in pairs(running) do cp:stop() end
    end)
  end
  local cp = setmetatable({ dir = dir, procs = {}, timeout = opts.timeout or 60,
                            ca_file = dir .. "/ca.crt", kubeconfig = dir .. "/kubeconfig" },
                          CP)
  running[cp] = true
  local ok, res, berr = pcall(boot, cp, bins, opts)
  if ok and res then return cp end
  cp:stop()
  return nil, ok and berr or "envtest: " .. tostring(res)
end

-- cp:client([opts]) -> a kubelua.client for this server, as its admin;
-- opts (qps, burst, timeout, user_agent, …) are passed on.
function CP:client(opts)
  local o = { server = self.server, token = self.token, tls = { ca_file = self.ca_file } }
  for k, v in pairs(opts or {}) do o[k] = v end
  return require("kubelua.client").new(o)
end

-- cp:stop([grace]): SIGTERM to every server (the last started first),
-- SIGKILL to those still running after grace seconds (default 5), then
-- the directory goes. Idempotent.
function CP:stop(grace)
  if self.stopped then return end
  self.stopped = true
  running[self] = nil
  grace = grace or 5
  for i = #self.procs, 1, -1 do
    local p = self.procs[i].proc
    if p:kill("TERM") then
      local deadline = core.monotonic() + grace
      while not p:poll() do
        if not core.in_task() or core.monotonic() >= deadline then
          p:kill("KILL")
          while not p:poll() do sleep(0.01) end
        end
        sleep(0.01)
      end
    end
  end
  os.execute("rm -rf -- " .. quote(self.dir))
end

return _M
