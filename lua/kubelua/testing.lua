-- kubelua.testing: a harness for testing controllers with `kubelua test`.
--
--   local testing = require "kubelua.testing"
--
--   describe("my controller", function()
--     local t
--     before_each(function() t = testing.start{ namespaces = { "demo" } } end)
--     after_each(function() t:stop() end)
--
--     it("copies labelled ConfigMaps", function()
--       t:load("controller.lua")
--       t:create{ apiVersion = "v1", kind = "ConfigMap", … }
--       local copy = t:eventually(function()
--         return t:get("v1", "secrets", "demo", "settings")
--       end)
--       assert.equal("blue", copy.data.color)
--     end)
--   end)
--
-- start() serves a fresh, empty API simulator in this process on a
-- loopback port and points kubelua's connection at it (or, with
-- apiserver = "real", a real kube-apiserver: see below); load() runs the
-- controller script as `kubelua run` would (its own generation: globals,
-- handlers and workers of its own), and stop() retires it — its workers and
-- informers stop — and closes the simulator. `kubelua test` runs every spec
-- inside a task, so the API calls here simply wait for their answers.

-- A real API server (start{ apiserver = "real" }, or every start under
-- `kubelua test --apiserver real`): etcd and kube-apiserver, plus
-- kube-controller-manager with controller_manager = true, started by
-- kubelua.envtest on the first start of the process and kept for the next
-- ones (`scripts/test` runs one process per spec file), stopped when
-- kubelua exits. Each t:stop() cleans it: every object made since the
-- server started is deleted, finalizers cleared, and the namespaces made
-- since are finalized, so that the next spec finds the names it uses free
-- even without a controller manager (a namespace stays Terminating on a
-- real server until something deletes its contents). What only the
-- simulator has (t.sim: faults, history, seed files with opts.load,
-- simulator options with opts.sim) raises an error naming it.

-- Methods that need no state of the harness are methods all the same: a
-- spec reads t:create(…) as "the harness creates".
-- luacheck: ignore 212/self

local kube = require "kubelua"
local generation = require "kubelua.generation"

local type, error, tostring, select, unpack = type, error, tostring, select, unpack
local ipairs, pairs, pcall, setmetatable = ipairs, pairs, pcall, setmetatable
local format = string.format

local function pack(...) return { n = select("#", ...), ... } end

local _M = {}

---The harness testing.start gives a spec (`t`): a fresh API server, the
---controller script loaded into it, and the calls a spec makes.
---@class kubelua.testing.harness
---@field apiserver string "sim" or "real"
---@field sim table the simulator (faults, history); raises on a real server
---@field cp table? the real server's control plane: server, token, ca_file, kubeconfig
---@field sync_timeout number seconds t:load waits for failing or silent informers (default 30)
---@usage local t = testing.start{ namespaces = { "demo" } }
local Harness = {}

local active
local served_dir -- serve_webhooks' certificates
local defaults = { apiserver = "sim", controller_manager = false }
local real -- the real control plane of this process: { cp, controller_manager, err }

local function fail(fname, msg, level)
  error("kubelua.testing: " .. fname .. ": " .. msg, (level or 1) + 1)
end

Harness.__index = function(t, k)
  if k == "sim" and rawget(t, "apiserver") == "real" then
    fail("t.sim", "the simulator's features (faults, history, its options) are not there: "
      .. 'this harness runs against a real API server (apiserver = "real")', 2)
  end
  return Harness[k]
end

local function check_apiserver(fname, v)
  if v ~= "sim" and v ~= "real" then
    fail(fname, 'apiserver must be "sim" or "real", got ' .. tostring(v), 3)
  end
end

-- configure(opts) -> true, or nil, message: the defaults of start()
-- (`kubelua test --apiserver real --controller-manager`): apiserver
-- ("sim" or "real") and controller_manager. With "real", the binaries
-- must be there (kubelua.envtest.find).
---Sets the defaults of start() (`kubelua test --apiserver real
-----controller-manager` calls it): apiserver ("sim" or "real") and
---controller_manager. With "real" the binaries must be found.
---@param opts {apiserver?: string, controller_manager?: boolean}
---@return true|nil ok
---@return string? err
---@usage assert(testing.configure{ apiserver = "real" })
function _M.configure(opts)
  if type(opts) ~= "table" then fail("configure", "opts must be a table, got " .. type(opts), 2) end
  local apiserver = opts.apiserver or "sim"
  check_apiserver("configure", apiserver)
  if apiserver == "real" then
    local ok, err = require("kubelua.envtest").find{ controller_manager = opts.controller_manager }
    if not ok then return nil, err end
  end
  defaults = { apiserver = apiserver, controller_manager = opts.controller_manager == true }
  return true
end

-- apiserver() -> "sim" or "real": the server start() uses when not told.
---The server start() uses when not told: "sim" or "real".
---@return string
---@usage if testing.apiserver() == "sim" then t.sim:fault{ ... } end
function _M.apiserver() return defaults.apiserver end

-- The process's real control plane, started on first use (and again when
-- the controller manager is wanted and does not run); a start that failed
-- fails the next ones at once with its message.
local function real_server(opts)
  local cm = opts.controller_manager
  if cm == nil then cm = defaults.controller_manager end
  if real and real.cp and cm and not real.controller_manager then
    real.cp:stop()
    real = nil
  end
  if not real then
    local cp, err = require("kubelua.envtest").start{ controller_manager = cm }
    real = { cp = cp, controller_manager = cm, err = err }
  end
  if not real.cp then fail("start", real.err, 3) end
  return real.cp
end

-- start([opts]) -> harness. opts.namespaces: names to create;
-- opts.load: a directory of .json/.yaml objects to seed the simulator
-- with; opts.sim: options for the simulator (token, history_size, …);
-- opts.qps: the client's rate limit (default 0: none, so that specs are
-- not slowed down by it; give 20 for client-go's default);
-- opts.controllers: the simulator's control plane (default: all of it;
-- false: the API server alone, as envtest runs it; { gc = false, … }:
-- all but those; kubelua.sim.controllers names them). A real server's
-- control plane is kube-controller-manager: opts.controller_manager.
-- opts.nodes: the simulator's fake Nodes (default 3; or { count =,
-- allocatable = { cpu =, memory =, pods = } }); opts.pods: its
-- Pods' lifecycle, { start_delay =, run_time =, stop_delay = (seconds),
-- fail = function(pod) -> true to fail it } (kubelua.sim.workloads.kubelet).
-- opts.apiserver: "sim" or "real" (default: configure's, else "sim");
-- opts.controller_manager: with "real", run kube-controller-manager too.
-- t.apiserver says which server it is; t.cp is the real one's
-- kubelua.envtest control plane (server, token, ca_file, kubeconfig).
---Serves a fresh API server and points kubelua's connection at it. opts:
---namespaces (to create), load (a directory of .json/.yaml objects to
---seed), sim (the simulator's options), qps (default 0: no limit),
---controllers (the simulator's control plane: default all, false: none,
---{gc = false, ...}), apiserver ("sim" or "real"), controller_manager.
---@param opts? table
---@return kubelua.testing.harness t
---@usage before_each(function() t = testing.start{ namespaces = { "demo" } } end)
function _M.start(opts)
  opts = opts or {}
  if type(opts) ~= "table" then fail("start", "opts must be a table, got " .. type(opts), 2) end
  local apiserver = opts.apiserver or defaults.apiserver
  check_apiserver("start", apiserver)
  if active then active:stop() end
  local t
  if apiserver == "real" then
    if opts.sim then fail("start", "opts.sim (simulator options) needs the simulator, "
      .. 'and this harness runs against a real API server (apiserver = "real")', 2) end
    if opts.load then fail("start", "opts.load (seed files) needs the simulator, "
      .. 'and this harness runs against a real API server (apiserver = "real")', 2) end
    for _, k in ipairs { "nodes", "pods" } do
      if opts[k] ~= nil then fail("start", "opts." .. k .. " shapes the simulator's workloads, "
        .. 'and this harness runs against a real API server (apiserver = "real")', 2) end
    end
    local cp = real_server(opts)
    kube.connect{ server = cp.server, token = cp.token, tls = { ca_file = cp.ca_file } }
    kube.client.set_default(cp:client{ qps = opts.qps or 0 })
    t = setmetatable({ apiserver = "real", cp = cp, controller_manager = real.controller_manager },
                     Harness)
  else
    local simopts = opts.sim
    if opts.controllers ~= nil or opts.nodes ~= nil or opts.pods ~= nil then
      simopts = {}
      for k, v in pairs(opts.sim or {}) do simopts[k] = v end
      if opts.controllers ~= nil then simopts.controllers = opts.controllers end
      if opts.nodes ~= nil then simopts.nodes = opts.nodes end
      if opts.pods ~= nil then simopts.pods = opts.pods end
    end
    local ok, sim = pcall(kube.start_sim, simopts)
    if not ok then fail("start", (tostring(sim):gsub("^.-sim: ", "sim: ")), 2) end
    kube.client.set_default(kube.client.new{ server = kube.server(), qps = opts.qps or 0 })
    t = setmetatable({ apiserver = "sim", sim = sim }, Harness)
  end
  active = t
  if opts.load then
    local n, err = t.sim:load(opts.load)
    if not n then fail("start", "cannot load " .. tostring(opts.load) .. ": " .. err, 2) end
  end
  for _, ns in ipairs(opts.namespaces or {}) do t:namespace(ns) end
  return t
end

-- Why an informer has not synced: its reflector's last error, or the
-- reason a Kind is not resolved yet, or nil when none is known.
local function sync_error(inf)
  if type(inf) == "table" then
    if inf.resolve_error then return inf.resolve_error end
    return nil
  end
  return inf:stats().last_error
end

-- Errors that retries will not mend by themselves.
local function lasting(msg)
  return msg:find("%f[%d]40[134]%f[%D]") ~= nil or msg:find("Forbidden", 1, true) ~= nil
    or msg:find("Unauthorized", 1, true) ~= nil or msg:find("NoKindMatch", 1, true) ~= nil
    or msg:find("NotFound", 1, true) ~= nil
end

-- The informers of generation n that have not synced, by name, sorted.
local function unsynced(n)
  local a = kube._asked(n)
  local out = {}
  for inf in pairs(a and a.informers or {}) do
    if not inf:has_synced() then out[#out + 1] = inf end
  end
  table.sort(out, function(x, y) return x:name() < y:name() end)
  return out
end

local function unsynced_message(infs)
  local parts = {}
  for i, inf in ipairs(infs) do
    local why = sync_error(inf)
    parts[i] = inf:name() .. (why and ": " .. why or ": no answer yet")
  end
  return table.concat(parts, "; ")
end

-- t:load(path, ...) -> the generation number: runs the controller script
-- with ... as its arguments and waits until every informer it asked for
-- (its controllers' too) has synced, so that a spec starts from a
-- controller that sees the whole state. Raises with the script's message
-- when it fails, and with each informer's reason when they cannot sync:
-- at once for an error retries do not mend (a 401, 403 or 404, a kind
-- that discovery does not know), else after t.sync_timeout seconds
-- (default 30) of failing or silent rounds ("kubelua.testing: load:
-- informers not synced: v1/configmaps@demo: …").
---Runs the controller script as `kubelua run` would (its own generation)
---with ... as its arguments, and waits until every informer it asked for
---has synced; raises with the script's error, or each informer's reason
---when they cannot sync ("kubelua.testing: load: informers not synced:
---v1/configmaps@demo: ...").
---@param path string
---@param ... any the script's arguments
---@return integer generation
---@usage t:load("examples/mirror/controller.lua")
function Harness:load(path, ...)
  local g, err = generation.load(path, { ... })
  if not g then fail("load", err, 2) end
  local deadline = kube.monotonic() + (rawget(self, "sync_timeout") or 30)
  while true do
    local waiting = unsynced(g.n)
    if #waiting == 0 then break end
    local over = kube.monotonic() >= deadline
    for _, inf in ipairs(waiting) do
      local why = sync_error(inf)
      if why and lasting(why) then over = true end
    end
    if over then fail("load", "informers not synced: " .. unsynced_message(waiting), 2) end
    kube.sleep(0.01)
  end
  return g.n
end

-- What keeps generation n's controllers busy: "" when nothing, else a
-- description (queued keys, reconciles running, keys waiting for a
-- requeue_after or a retry, events not yet delivered to handlers).
local function busy(n)
  local a = kube._asked(n)
  if not a then return "" end
  local parts = {}
  for q in pairs(a.queues) do
    local st = q:stats()
    if q:len() > 0 or st.processing > 0 or st.waiting > 0 then
      parts[#parts + 1] = format("queue %s: %d queued, %d processing, %d waiting", q:name(),
                                 q:len(), st.processing, st.waiting)
    end
  end
  for inf in pairs(a.informers) do
    local p = inf:pending()
    if p > 0 then parts[#parts + 1] = format("informer %s: %d events pending", inf:name(), p) end
  end
  table.sort(parts)
  return table.concat(parts, "; ")
end

-- t:settle([timeout]): waits until the loaded script's controllers have
-- nothing to do: their informers have delivered every event, their queues
-- are empty, no reconcile runs and no key waits for a requeue_after or a
-- retry, and that for a quiet period (0.05 s; 0.2 s against a real
-- server) in which events already on their way from the server arrive.
-- Raises after timeout seconds (default 10) naming what is still busy
-- ("kubelua.testing: settle: not settled within 10s (queue x: 1 queued,
-- 0 processing, 0 waiting)"). Without a loaded script, the controllers
-- the spec itself made are waited for.
---Waits until the loaded controllers have nothing to do (events
---delivered, queues empty, no reconcile running or due) for a quiet
---period; raises after timeout naming what is still busy.
---@param timeout? number seconds (default 10)
---@usage t:create(cm); t:settle(); assert.is_nil(t:get("v1", "secrets", "demo", "x"))
function Harness:settle(timeout)
  if timeout ~= nil and type(timeout) ~= "number" then
    fail("settle", "timeout must be a number, got " .. type(timeout), 2)
  end
  timeout = timeout or 10
  local n = generation.current()
  local quiet = self.apiserver == "real" and 0.2 or 0.05
  local deadline = kube.monotonic() + timeout
  local idle_since
  while true do
    local now = kube.monotonic()
    local what = busy(n)
    if what == "" then
      idle_since = idle_since or now
      if now - idle_since >= quiet then return end
    else
      idle_since = nil
      if now >= deadline then
        fail("settle", format("not settled within %gs (%s)", timeout, what), 2)
      end
    end
    kube.sleep(0.01)
  end
end

-- t:reload() -> the new generation number: loads the script again, as a
-- change of its file or SIGHUP does in `kubelua run`; raises on failure.
---Loads the script again, as a change of its file or SIGHUP does.
---@return integer generation
---@usage t:reload()
function Harness:reload()
  local before = generation.current()
  local ok, err = generation.reload(true)
  if not ok then fail("reload", err, 2) end
  if generation.current() == before then fail("reload", "no script loaded", 2) end
  return generation.current()
end

local REG = "admissionregistration.k8s.io/v1"
local CRDS = "apiextensions.k8s.io/v1"
local CONFIG_RESOURCES = { ValidatingWebhookConfiguration = "validatingwebhookconfigurations",
  MutatingWebhookConfiguration = "mutatingwebhookconfigurations" }

-- kube-apiserver's admission plugins see webhook configurations through
-- an informer, a moment after they are written. A probe tells when they
-- have: a configuration of each kind named so that it sorts first (the
-- mutating webhooks are called one after another in the order of their
-- configurations' names, so no other webhook's refusal ends the write
-- before it), with one webhook that failurePolicy Ignore lets fail,
-- selecting only objects labelled with a fresh value and calling a path
-- of its own on the webhook server (no webhook there: the call is
-- answered 404, and counted). Once a dry-run create of a ServiceAccount
-- so labelled reaches that path, the informer has seen the probe, and so
-- everything written to its kind before it (an informer's events come in
-- order). The probes are deleted after; one the informer still has
-- selects nothing any more.
local PROBE_NAME = "0-kubelua-testing-probe"
local PROBE_LABEL = "testing.kubelua.io/webhook-probe"

local function await_admission(self, addr, ca)
  local util = require "kubelua.sim.util"
  local webhook = require "kubelua.webhook"
  for _, kind in ipairs { "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration" } do
    local nonce = util.uid()
    local path = "/kubelua-testing/probe-" .. nonce
    self:apply({ apiVersion = REG, kind = kind, metadata = { name = PROBE_NAME },
      webhooks = { { name = "probe.testing.kubelua.io", admissionReviewVersions = { "v1" },
        sideEffects = "None", failurePolicy = "Ignore", timeoutSeconds = 5,
        clientConfig = { url = "https://" .. addr .. path, caBundle = ca },
        objectSelector = { matchLabels = { [PROBE_LABEL] = nonce } },
        rules = { { operations = { "CREATE" }, apiGroups = { "" }, apiVersions = { "v1" },
          resources = { "serviceaccounts" } } } } } },
      { field_manager = "kubelua-test-webhooks", force = true })
    local sa = { apiVersion = "v1", kind = "ServiceAccount", metadata = { namespace = "default",
      name = "kubelua-testing-probe", labels = { [PROBE_LABEL] = nonce } } }
    self:eventually(function()
      kube.create(sa, { dry_run = true })
      return webhook.received(path) > 0
    end, 60)
    local _, err = kube.delete(REG, CONFIG_RESOURCES[kind], nil, PROBE_NAME)
    if err and not kube.is_not_found(err) then fail("webhooks", tostring(err), 3) end
  end
end

-- t:stop(): the controller's generation retires (its workers and
-- informers stop; reconciles in progress get up to 5 s to finish, so that
-- none outlives its spec) and the simulator closes (a real server is
-- cleaned, and raises if it cannot be). Idempotent. Queues
-- keep what was queued, as they do across reloads: give each spec's
-- controller its own queue names when that matters.
---Retires the controller's generation (its workers and informers stop)
---and closes the simulator (a real server is cleaned). Idempotent.
---@usage after_each(function() t:stop() end)
function Harness:stop()
  if self.stopped then return end
  self.stopped = true
  generation.unload(5)
  kube._stop_informers(kube.server())
  if active == self then active = nil end
  if self.webhook_configs then
    -- kube-apiserver would still call them for a moment: the next spec's
    -- writes would find this one's webhooks gone
    for _, c in ipairs(self.webhook_configs) do
      local _, err = kube.delete(REG, c[1], nil, c[2])
      if err and not kube.is_not_found(err) then
        fail("stop", "cannot delete " .. c[1] .. " " .. c[2] .. ": " .. tostring(err), 2)
      end
    end
    await_admission(self, self.webhook_probe.addr, self.webhook_probe.ca)
  end
  if self.webhook_dir then
    require("kubelua.webhook").stop()
    os.execute("rm -rf '" .. self.webhook_dir .. "'")
  end
  if self.apiserver == "real" then
    local ok, err = self.cp:clean()
    if not ok then fail("stop", "cannot clean the API server: " .. tostring(err), 2) end
    return
  end
  for _, srv in ipairs(self.sim.servers) do srv:close() end
end

local function check(fname, obj, err)
  if obj == nil and err ~= nil then fail(fname, tostring(err), 3) end
  return obj
end

-- The clientConfigs of a webhook configuration's webhooks, or of a CRD's
-- conversion webhook.
local function client_configs(obj)
  local out = {}
  if obj.kind == "CustomResourceDefinition" then
    local conv = type(obj.spec) == "table" and obj.spec.conversion
    local w = type(conv) == "table" and conv.webhook
    if type(w) == "table" and type(w.clientConfig) == "table" then out[1] = w.clientConfig end
  elseif obj.kind == "ValidatingWebhookConfiguration"
      or obj.kind == "MutatingWebhookConfiguration" then
    for _, w in ipairs(obj.webhooks or {}) do
      if type(w.clientConfig) == "table" then out[#out + 1] = w.clientConfig end
    end
  end
  return out
end

local WEBHOOK_KINDS = { ValidatingWebhookConfiguration = true,
  MutatingWebhookConfiguration = true, CustomResourceDefinition = true }

-- The objects of t:webhooks: a list of tables, or a YAML file's documents.
local function webhook_objects(objects)
  if type(objects) == "table" then return objects end
  if type(objects) ~= "string" then
    fail("webhooks", "expected a list of objects or a YAML file's path, got " .. type(objects), 3)
  end
  local f, err = io.open(objects, "rb")
  if not f then fail("webhooks", "cannot read " .. objects .. ": " .. tostring(err), 3) end
  local text = f:read("*a")
  f:close()
  local docs, yerr = require("kubelua.sim.yaml").decode_all(text)
  if not docs then fail("webhooks", objects .. ": " .. tostring(yerr), 3) end
  return docs
end

-- The served versions of a CRD other than its storage version.
local function other_versions(crd)
  local out, storage = {}, nil
  for _, v in ipairs(type(crd.spec) == "table" and crd.spec.versions or {}) do
    if v.storage then storage = v.name end
  end
  for _, v in ipairs(type(crd.spec) == "table" and crd.spec.versions or {}) do
    if v.served ~= false and v.name ~= storage then out[#out + 1] = v.name end
  end
  return out
end

-- apiextensions-apiserver takes a CRD's conversion webhook from the CRD
-- its informer holds, a moment after the write: waits until a dry-run
-- create of an empty object through each version other than the storage
-- one reaches the webhook's path (the object is converted to the storage
-- version before it is validated).
local function await_conversion(self, crd, path)
  local webhook = require "kubelua.webhook"
  local spec = crd.spec
  local namespaced = spec.scope ~= "Cluster"
  for _, version in ipairs(other_versions(crd)) do
    local obj = { apiVersion = spec.group .. "/" .. version, kind = spec.names.kind,
      metadata = { name = "kubelua-testing-probe", namespace = namespaced and "default" or nil } }
    local before = webhook.received(path)
    self:eventually(function()
      kube.create(obj, { dry_run = true })
      return webhook.received(path) > before
    end, 60)
  end
end

-- Serves the webhooks of this process over HTTPS on a loopback port with
-- a serving certificate (for 127.0.0.1 and dns_names) of a CA made for
-- it, in a new directory: -> the server, the CA (base64, as caBundle
-- wants it), the directory. Raises naming fname, for its caller's caller.
local function serve_webhooks(fname, dns_names)
  local process = require "kubelua.process"
  local webhook = require "kubelua.webhook"
  local envtest = require "kubelua.envtest"
  local dir, err = process.mkdtemp((os.getenv("TMPDIR") or "/tmp") .. "/kubelua-webhook-")
  if not dir then fail(fname, "cannot make a directory: " .. tostring(err), 3) end
  local ok
  ok, err = envtest.serving_certs(dir, "kubelua-webhook", dns_names)
  if not ok then fail(fname, err, 3) end
  assert(os.rename(dir .. "/server.crt", dir .. "/tls.crt"))
  assert(os.rename(dir .. "/server.key", dir .. "/tls.key"))
  local f = assert(io.open(dir .. "/ca.crt", "rb"))
  local ca = require("kubelua.sim.util").b64encode(f:read("*a"))
  f:close()
  webhook.stop()
  local srv
  srv, err = webhook.serve{ address = "127.0.0.1:0", cert_dir = dir }
  if not srv then fail(fname, err, 3) end
  return srv, ca, dir
end

-- serve_webhooks() -> url, ca: the webhooks of this process (kube.webhook)
-- served over HTTPS at url (https://127.0.0.1:PORT) with a certificate of
-- a CA made for them (ca: base64, as a clientConfig's caBundle wants it),
-- for specs that write their own webhook configurations (t:webhooks does
-- it all for a harness); stop_webhooks() ends it.
---Serves the process's webhooks over HTTPS on a loopback port with a CA
---made for them, for specs that write their own configurations (t:webhooks
---does it all for a harness); stop_webhooks() ends it.
---@return string url https://127.0.0.1:PORT
---@return string ca the CA, base64 (a clientConfig's caBundle)
---@usage local url, ca = testing.serve_webhooks()
function _M.serve_webhooks()
  _M.stop_webhooks()
  local srv, ca, dir = serve_webhooks("serve_webhooks", {})
  served_dir = dir
  return "https://127.0.0.1:" .. srv:port(), ca
end

---Stops what serve_webhooks started and removes its certificates.
---@usage testing.stop_webhooks()
function _M.stop_webhooks()
  require("kubelua.webhook").stop()
  if served_dir then os.execute("rm -rf '" .. served_dir .. "'") end
  served_dir = nil
end

-- t:webhooks(objects) -> the webhook server's URL ("https://127.0.0.1:PORT"):
-- registers the script's webhooks (kube.webhook, kube.controller's
-- webhooks) with the API server in one call. It serves them over HTTPS on
-- a loopback port with a certificate of a CA made for this harness (for
-- 127.0.0.1 and the Services' names), then applies objects (server-side,
-- forced) — the deployment's ValidatingWebhookConfigurations,
-- MutatingWebhookConfigurations and CustomResourceDefinitions (conversion
-- webhooks), as a list of tables or a YAML file's path — with every
-- clientConfig pointing at that server: a url's host replaced by it,
-- caBundle that CA, and a Service routed to it by the simulator (its
-- certificate names <name>.<namespace>.svc, as in a cluster). A real
-- server cannot route a Service to this process: there a Service becomes
-- url https://127.0.0.1:PORT<its path>, and t:webhooks returns once the
-- real server calls what was applied (its admission plugins and
-- apiextensions-apiserver see configurations a moment after they are
-- written); t:stop() deletes the configurations and waits until they are
-- no longer called. Other kinds in the file are skipped (a Certificate,
-- an Issuer).
---Registers the script's webhooks with the API server in one call: serves
---them over HTTPS on a loopback port with a CA made for this harness, and
---applies the webhook configurations and CRDs given (tables, or a YAML
---file's path) with every clientConfig pointed at that server (a real
---server's Services become https://127.0.0.1:PORT URLs); against a real
---server, returns once it calls them.
---@param objects table[]|string configurations and CRDs, or a YAML file's path
---@return string url the webhook server's https://127.0.0.1:PORT
---@usage
--- t:load("controller.lua", "--webhooks")
--- t:webhooks("deploy/webhooks.yaml")
function Harness:webhooks(objects)
  local on_real = self.apiserver == "real"
  objects = webhook_objects(objects)
  local dns, seen = {}, {}
  for _, obj in ipairs(objects) do
    for _, cc in ipairs(client_configs(obj)) do
      local svc = cc.service
      if type(svc) == "table" then
        local name = format("%s.%s.svc", tostring(svc.name), tostring(svc.namespace))
        if not seen[name] then dns[#dns + 1], seen[name] = name, true end
      end
    end
  end
  local srv, ca, dir = serve_webhooks("webhooks", dns)
  self.webhook_dir = dir
  local addr = "127.0.0.1:" .. srv:port()
  local configs, conversions = {}, {}
  for _, obj in ipairs(objects) do
    if WEBHOOK_KINDS[obj.kind] then
      obj = kube.json.decode(kube.json.encode(obj)) -- the caller's stay as they were
      for _, cc in ipairs(client_configs(obj)) do
        local svc = cc.service
        if type(svc) == "table" and on_real then
          cc.service = nil
          cc.url = "https://" .. addr .. (type(svc.path) == "string" and svc.path or "")
        elseif type(svc) == "table" then
          self.sim:route_service(svc.namespace, svc.name, svc.port, addr)
        elseif type(cc.url) == "string" then
          cc.url = cc.url:gsub("^(https://)[^/]*", "%1" .. addr)
        end
        cc.caBundle = ca
        if on_real and obj.kind == "CustomResourceDefinition" then
          conversions[#conversions + 1] = { crd = obj,
            path = cc.url:match("^https://[^/]*(/[^?]*)") or "/" }
        end
      end
      self:apply(obj, { field_manager = "kubelua-test-webhooks", force = true })
      if CONFIG_RESOURCES[obj.kind] then
        configs[#configs + 1] = { CONFIG_RESOURCES[obj.kind], obj.metadata.name }
      end
    end
  end
  if on_real then
    self.webhook_configs = configs
    self.webhook_probe = { addr = addr, ca = ca }
    await_admission(self, addr, ca)
    for _, c in ipairs(conversions) do
      self:eventually(function()
        local crd = kube.get(CRDS, "customresourcedefinitions", nil, c.crd.metadata.name)
        for _, cond in ipairs(crd and crd.status and crd.status.conditions or {}) do
          if cond.type == "Established" and cond.status == "True" then return true end
        end
      end, 60)
      await_conversion(self, c.crd, c.path)
    end
  end
  return "https://" .. addr
end

-- t:namespace(name) -> the Namespace (created if missing). With a real
-- controller manager, once its default ServiceAccount is there (a Pod
-- cannot be made before).
---The Namespace of that name, created if missing.
---@param name string
---@return table
---@usage t:namespace("other")
function Harness:namespace(name)
  local ns, err = kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = name } }
  if ns and rawget(self, "controller_manager") then
    self:eventually(function() return kube.get("v1", "serviceaccounts", name, "default") end, 30)
  end
  if ns then return ns end
  if kube.is_already_exists(err) then
    local r = check("namespace", kube.get("v1", "namespaces", nil, name))
    return r
  end
  fail("namespace", tostring(err), 2)
end

-- t:create(obj) / t:apply(obj) / t:update(obj) -> the server's object;
-- raise on an error with the server's reason and message. (Not tail
-- calls: the error names the spec's line.)
---Creates an object; raises with the server's reason and message.
---@param obj table
---@return table obj as created
---@usage
--- t:create{
---   apiVersion = "v1", kind = "ConfigMap",
---   metadata = { namespace = "demo", name = "a" }, data = { x = "1" },
--- }
function Harness:create(obj)
  local r = check("create", kube.create(obj))
  return r
end

---Updates an object; raises on an error.
---@param obj table
---@return table obj
---@usage cm.data.x = "2"; t:update(cm)
function Harness:update(obj)
  local r = check("update", kube.update(obj))
  return r
end

---Server-side applies an object; raises on an error.
---@param obj table
---@param opts? table as kube.apply's
---@return table obj
---@usage t:apply(desired, { field_manager = "spec" })
function Harness:apply(obj, opts)
  opts = opts or { field_manager = "kubelua-test", force = true }
  local r = check("apply", kube.apply(obj, opts))
  return r
end

-- t:get(api_version, resource, namespace, name) -> the object, or nil when
-- it does not exist (other errors raise).
---The object, or nil when it does not exist (other errors raise).
---@param api_version string
---@param resource string
---@param namespace string|nil
---@param name string
---@return table|nil
---@usage local s = t:get("v1", "secrets", "demo", "settings")
function Harness:get(api_version, resource, namespace, name)
  local obj, err = kube.get(api_version, resource, namespace, name)
  if obj == nil and not kube.is_not_found(err) then fail("get", tostring(err), 2) end
  return obj
end

-- t:list(api_version, resource [, namespace [, opts]]) -> the items.
---The items of a list.
---@param api_version string
---@param resource string
---@param namespace? string
---@param opts? table as kube.list's
---@return table[]
---@usage assert.equal(2, #t:list("v1", "configmaps", "demo"))
function Harness:list(api_version, resource, namespace, opts)
  local list, err = kube.list(api_version, resource, namespace, opts)
  if not list then fail("list", tostring(err), 2) end
  return list.items
end

-- t:delete(api_version, resource, namespace, name [, opts]) -> true, or
-- false when it did not exist.
---Deletes an object.
---@param api_version string
---@param resource string
---@param namespace string|nil
---@param name string
---@param opts? table as kube.delete's
---@return boolean deleted false when it did not exist
---@usage t:delete("v1", "configmaps", "demo", "a")
function Harness:delete(api_version, resource, namespace, name, opts)
  local res, err = kube.delete(api_version, resource, namespace, name, opts)
  if res then return true end
  if kube.is_not_found(err) then return false end
  fail("delete", tostring(err), 2)
end

local function describe_value(ok, v)
  if not ok then return "the last call raised: " .. tostring(v) end
  return "the last call returned " .. tostring(v)
end

-- t:eventually(fn [, timeout [, interval]]) -> fn's results, once its first
-- result is truthy: calls fn every interval seconds (default 0.05) until
-- then, for at most timeout seconds (default 10), and raises when time runs
-- out, with what the last call returned or raised. An error raised by fn
-- counts as "not yet".
---Calls fn every interval seconds until its first result is truthy and
---returns its results; raises after timeout with what the last call
---returned or raised (an error counts as "not yet").
---@param fn function
---@param timeout? number seconds (default 10)
---@param interval? number seconds (default 0.05)
---@return any ...
---@usage
--- local copy = t:eventually(function() return t:get("v1", "secrets", "demo", "settings") end)
function Harness:eventually(fn, timeout, interval)
  if type(fn) ~= "function" then fail("eventually", "expected a function, got " .. type(fn), 2) end
  timeout, interval = timeout or 10, interval or 0.05
  local deadline = kube.monotonic() + timeout
  while true do
    local r = pack(pcall(fn))
    if r[1] and r[2] then return unpack(r, 2, r.n) end
    if kube.monotonic() >= deadline then
      fail("eventually", format("condition not met within %gs (%s)", timeout,
                                describe_value(r[1], r[2])), 2)
    end
    kube.sleep(interval)
  end
end

return _M
