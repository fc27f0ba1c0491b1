-- The simulator's admission webhooks (kubelua.sim.admission): Mutating- and
-- ValidatingWebhookConfigurations honoured on every write as kube-apiserver
-- honours them, calling webhooks served by this process (kube.webhook)
-- through t:webhooks, which routes their Service here with a CA of its own.
-- #sim
local kube = require "kubelua"
local testing = require "kubelua.testing"
local core = require "kubelua.core"
local http = require "kubelua.http"
local httpd = require "kubelua.httpd"

local calls = {} -- { "path OPERATION name" } in the order the webhooks saw them
local scales = {} -- what /scale saw of each request

local function record(path, req)
  calls[#calls + 1] = path .. " " .. req.operation .. " " .. tostring(req.name)
    .. (req.dryRun and " dry-run" or "")
end

local function cm(name, data, ns, labels)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name,
    namespace = ns or "demo", labels = labels }, data = data or { k = "v" } }
end

-- A webhook of kind ("Validating" or "Mutating") at path, through the
-- Service webhooks/hooks, for ConfigMaps; extra's fields override.
local function hook(name, path, extra)
  local w = { name = name, admissionReviewVersions = { "v1" }, sideEffects = "None",
    clientConfig = { service = { namespace = "webhooks", name = "hooks", path = path } },
    rules = { { operations = { "CREATE", "UPDATE", "DELETE" }, apiGroups = { "" },
      apiVersions = { "v1" }, resources = { "configmaps" } } } }
  for k, v in pairs(extra or {}) do w[k] = v end
  return w
end

local function config(kind, name, webhooks)
  return { apiVersion = "admissionregistration.k8s.io/v1", kind = kind .. "WebhookConfiguration",
    metadata = { name = name }, webhooks = webhooks }
end

-- The error of a write that must fail, as { code, reason, message }.
local function refused(obj, err)
  assert.is_nil(obj)
  return { code = err.code, reason = err.reason, message = err.message }
end

describe("simulator admission webhooks", function()
  local t

  setup(function()
    kube.webhook{ path = "/check", validate = function(req)
      record("/check", req)
      local data = req.object ~= kube.null and req.object.data or req.oldObject.data
      if data.msg == "" then return false, "data.msg must not be empty" end
      if data.keep == "yes" and req.operation == "DELETE" then return false, "kept" end
      return true, nil, data.warn and { data.warn } or nil
    end }
    kube.webhook{ path = "/append-a", mutate = function(req)
      record("/append-a", req)
      req.object.data.trail = (req.object.data.trail or "") .. "a"
    end }
    kube.webhook{ path = "/append-b", mutate = function(req)
      record("/append-b", req)
      req.object.data.trail = (req.object.data.trail or "") .. "b"
    end }
    kube.webhook{ path = "/seen", mutate = function(req)
      record("/seen", req)
      req.object.data.seen = req.object.data.trail or "nothing"
    end }
    kube.webhook{ path = "/note", validate = function(req)
      calls[#calls + 1] = "/note " .. req.operation .. " " .. req.name .. " "
        .. tostring(req.subResource)
      return true
    end }
    kube.webhook{ path = "/scale", validate = function(req)
      scales[#scales + 1] = { req.kind.kind, req.kind.group, req.resource.resource,
        req.subResource, req.object.spec.replicas, req.oldObject.spec.replicas }
      return req.object.spec.replicas <= 3, "at most 3 replicas"
    end }
    -- the first time it is asked about ConfigMap "raced", another client
    -- changes that ConfigMap before the webhook answers
    kube.webhook{ path = "/race", validate = function(req)
      calls[#calls + 1] = "/race " .. req.operation .. " " .. tostring(req.object.data.k)
      if req.name == "raced" and #calls == 1 then
        assert(kube.patch("v1", "configmaps", "demo", "raced",
          { data = { other = req.object.data.k .. "!" } }))
      end
      return true
    end }
    kube.webhook{ path = "/slow", validate = function()
      kube.sleep(30)
      return true
    end, timeout = 60 }
    -- denies only once /deny-now was asked (at most 20 s later), then one
    -- second after it: asked one after the other, it would answer first
    kube.webhook{ path = "/deny-late", validate = function(req)
      calls[#calls + 1] = "/deny-late " .. req.name
      for _ = 1, 2000 do
        if calls[1] == "/deny-now " .. req.name or calls[2] == "/deny-now " .. req.name then
          break
        end
        kube.sleep(0.01)
      end
      kube.sleep(1)
      return false, "late"
    end, timeout = 60 }
    kube.webhook{ path = "/deny-now", validate = function(req)
      calls[#calls + 1] = "/deny-now " .. req.name
      return false, "now"
    end }
  end)

  before_each(function()
    calls = {}
    -- no Deployment controller: the Scale spec counts its webhook calls, and
    -- a status write between them would make the scale be admitted again
    t = testing.start{ namespaces = { "demo", "webhooks" },
      controllers = { root_ca = false, deployment = false } }
  end)
  after_each(function() t:stop() end)

  it("refuses a write a validating webhook denies, in kube-apiserver's words", function()
    t:webhooks{ config("Validating", "check", { hook("check.example.com", "/check") }) }
    local made = t:create(cm("ok", { msg = "fine" }))
    assert.matches("^%d+$", made.metadata.resourceVersion)
    assert.equal(made.metadata.resourceVersion,
      t:get("v1", "configmaps", "demo", "ok").metadata.resourceVersion)
    local obj, err = kube.create(cm("x", { msg = "" }))
    assert.same({ code = 403, reason = "Forbidden", message = 'admission webhook '
      .. '"check.example.com" denied the request: data.msg must not be empty' }, refused(obj, err))
    assert.is_nil(t:get("v1", "configmaps", "demo", "x"))
    assert.same({ "/check CREATE ok", "/check CREATE x" }, calls)
  end)

  it("calls mutating webhooks by configuration name, then validating ones on the result",
    function()
      t:webhooks{
        config("Validating", "a-check", { hook("check.example.com", "/check") }),
        config("Mutating", "b-config", { hook("b.example.com", "/append-b") }),
        config("Mutating", "a-config", { hook("a1.example.com", "/append-a"),
          hook("a2.example.com", "/append-b") }),
      }
      local obj = t:create(cm("x", { msg = "hi" }))
      assert.equal("abb", obj.data.trail)
      assert.equal("abb", t:get("v1", "configmaps", "demo", "x").data.trail)
      assert.same({ "/append-a CREATE x", "/append-b CREATE x", "/append-b CREATE x",
        "/check CREATE x" }, calls)
    end)

  it("reinvokes an IfNeeded webhook once when a later one changed the object", function()
    t:webhooks{
      config("Mutating", "a", { hook("seen.example.com", "/seen",
        { reinvocationPolicy = "IfNeeded" }) }),
      config("Mutating", "b", { hook("b.example.com", "/append-b") }),
    }
    local obj = t:create(cm("x"))
    assert.same({ k = "v", seen = "b", trail = "b" }, obj.data)
    assert.same({ "/seen CREATE x", "/append-b CREATE x", "/seen CREATE x" }, calls)
  end)

  it("calls a webhook that does not ask for it only once (reinvocationPolicy Never)", function()
    t:webhooks{
      config("Mutating", "a", { hook("seen.example.com", "/seen") }),
      config("Mutating", "b", { hook("b.example.com", "/append-b") }),
    }
    assert.same({ k = "v", seen = "nothing", trail = "b" }, t:create(cm("x")).data)
    assert.same({ "/seen CREATE x", "/append-b CREATE x" }, calls)
  end)

  it("calls a webhook only for the operations, groups, versions, resources and scope of its "
    .. "rules", function()
      local function rule(r) return { rules = { r } } end
      t:webhooks{ config("Mutating", "m", {
        hook("update.example.com", "/append-a", rule{ operations = { "UPDATE" },
          apiGroups = { "" }, apiVersions = { "v1" }, resources = { "configmaps" } }),
        hook("apps.example.com", "/append-a", rule{ operations = { "*" },
          apiGroups = { "apps" }, apiVersions = { "*" }, resources = { "*" } }),
        hook("cluster.example.com", "/append-a", rule{ operations = { "*" },
          apiGroups = { "*" }, apiVersions = { "*" }, resources = { "*" }, scope = "Cluster" }),
        hook("secrets.example.com", "/append-a", rule{ operations = { "*" },
          apiGroups = { "*" }, apiVersions = { "*" }, resources = { "secrets" } }),
        hook("all.example.com", "/append-b", rule{ operations = { "CREATE" },
          apiGroups = { "*" }, apiVersions = { "*" }, resources = { "*/*" },
          scope = "Namespaced" }),
      }) }
      local obj = t:create(cm("x"))
      assert.equal("b", obj.data.trail)
      obj.data.other = "1"
      assert.equal("ba", t:update(obj).data.trail)
      assert.same({ "/append-b CREATE x", "/append-a UPDATE x" }, calls)
    end)

  it("calls a webhook only where its namespaceSelector and objectSelector match", function()
    t:namespace("prod")
    local ns = t:get("v1", "namespaces", nil, "prod")
    ns.metadata.labels.env = "prod"
    t:update(ns)
    t:webhooks{ config("Mutating", "m", {
      hook("prod.example.com", "/append-a", { namespaceSelector = { matchLabels = { env = "prod" } } }),
      hook("labelled.example.com", "/append-b", { objectSelector = { matchExpressions = { {
        key = "tier", operator = "In", values = { "web" } } } } }),
    }) }
    assert.is_nil(t:create(cm("plain")).data.trail)
    assert.equal("a", t:create(cm("in-prod", nil, "prod")).data.trail)
    assert.equal("b", t:create(cm("web", nil, "demo", { tier = "web" })).data.trail)
    assert.same({ "/append-a CREATE in-prod", "/append-b CREATE web" }, calls)
  end)

  it("fails a write when a webhook cannot be called and its failurePolicy is Fail", function()
    t:create(config("Validating", "gone", { hook("gone.example.com", "/check", {
      clientConfig = { url = "https://127.0.0.1:1/check" } }) }))
    local obj, err = kube.create(cm("x"))
    local msg = 'failed calling webhook "gone.example.com": failed to call webhook: Post '
      .. '"https://127.0.0.1:1/check?timeout=10s": dial tcp 127.0.0.1:1: connect: connection refused'
    assert.same({ code = 500, reason = "InternalError", message = "Internal error occurred: "
      .. msg }, refused(obj, err))
    assert.same({ causes = { { message = msg } } }, err.details)
  end)

  it("goes on without a webhook that cannot be called when its failurePolicy is Ignore",
    function()
      t:create(config("Validating", "gone", { hook("gone.example.com", "/check", {
        failurePolicy = "Ignore", clientConfig = { url = "https://127.0.0.1:1/check" } }) }))
      local logs, saved = {}, core.log
      core.log = function(level, msg, fields) logs[#logs + 1] = { level, msg, fields } end
      local ok, obj = pcall(t.create, t, cm("x"))
      core.log = saved
      assert(ok, obj)
      assert.equal("x", obj.metadata.name)
      assert.same({ { "warn", "sim: failed calling webhook, failing open", ' error="failed '
        .. 'calling webhook \\"gone.example.com\\": failed to call webhook: Post '
        .. '\\"https://127.0.0.1:1/check?timeout=10s\\": dial tcp 127.0.0.1:1: connect: '
        .. 'connection refused" webhook=gone.example.com' } }, logs)
    end)

  it("fails a call that outlasts timeoutSeconds", function()
    t:webhooks{ config("Validating", "slow", { hook("slow.example.com", "/slow",
      { timeoutSeconds = 1 }) }) }
    local obj, err = kube.create(cm("x"))
    assert.same({ code = 500, reason = "InternalError", message = "Internal error occurred: "
      .. 'failed calling webhook "slow.example.com": failed to call webhook: Post '
      .. '"https://hooks.webhooks.svc:443/slow?timeout=1s": context deadline exceeded' },
      refused(obj, err))
  end)

  it("names a Service no route leads to", function()
    t:create(config("Validating", "nowhere", { hook("nowhere.example.com", "/check", {
      clientConfig = { service = { namespace = "webhooks", name = "nowhere", port = 8443 } } }) }))
    local obj, err = kube.create(cm("x"))
    assert.same({ code = 500, reason = "InternalError", message = "Internal error occurred: "
      .. 'failed calling webhook "nowhere.example.com": failed to call webhook: Post '
      .. '"https://nowhere.webhooks.svc:8443?timeout=10s": no endpoints available for service '
      .. '"nowhere"' }, refused(obj, err))
  end)

  it("sends a dry run to webhooks without side effects and refuses it for the others", function()
    t:webhooks{ config("Validating", "check", { hook("check.example.com", "/check") }) }
    local made, e = kube.create(cm("x"), { dry_run = true })
    assert.is_nil(e)
    assert.equal("x", made.metadata.name)
    assert.same({ "/check CREATE x dry-run" }, calls)
    assert.is_nil(t:get("v1", "configmaps", "demo", "x"))
    t:webhooks{ config("Validating", "check", { hook("check.example.com", "/check",
      { sideEffects = "Some" }) }) }
    local obj, err = kube.create(cm("x"), { dry_run = true })
    assert.same({ code = 400, reason = "BadRequest",
      message = 'admission webhook "check.example.com" does not support dry run' },
      refused(obj, err))
  end)

  it("asks on a delete, with the old object, and keeps what a webhook refuses to delete",
    function()
      t:create(cm("x", { keep = "yes" }))
      t:webhooks{ config("Validating", "check", { hook("check.example.com", "/check") }) }
      local out, err = kube.delete("v1", "configmaps", "demo", "x")
      assert.same({ code = 403, reason = "Forbidden", message = 'admission webhook '
        .. '"check.example.com" denied the request: kept' }, refused(out, err))
      assert.is_not_nil(t:get("v1", "configmaps", "demo", "x"))
      assert.same({ "/check DELETE x" }, calls)
    end)

  it("calls a webhook for a subresource only when a rule names it", function()
    local schema = { openAPIV3Schema = { type = "object",
      ["x-kubernetes-preserve-unknown-fields"] = true } }
    t:create{ apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
      metadata = { name = "widgets.example.com" }, spec = { group = "example.com",
        scope = "Namespaced", names = { plural = "widgets", singular = "widget", kind = "Widget" },
        versions = { { name = "v1", served = true, storage = true, schema = schema,
          subresources = { status = {} } } } } }
    t:eventually(function() return t:list("example.com/v1", "widgets", "demo") end)
    local function rule(resources)
      return { rules = { { operations = { "*" }, apiGroups = { "example.com" },
        apiVersions = { "v1" }, resources = resources } } }
    end
    t:webhooks{ config("Validating", "notes", {
      hook("main.example.com", "/note", rule{ "widgets" }),
      hook("status.example.com", "/note", rule{ "widgets/status" }),
      hook("all.example.com", "/note", rule{ "*/*" }),
    }) }
    local w = t:create{ apiVersion = "example.com/v1", kind = "Widget",
      metadata = { name = "w", namespace = "demo" }, spec = { size = 1 } }
    w.status = { ready = true }
    assert(kube.update(w, { subresource = "status" }))
    assert.same({ "/note CREATE w nil", "/note CREATE w nil", "/note UPDATE w status",
      "/note UPDATE w status" }, calls)
  end)

  it("sends the Scale of a scale subresource write", function()
    scales = {}
    t:webhooks{ config("Validating", "scale", { hook("scale.example.com", "/scale", {
      rules = { { operations = { "UPDATE" }, apiGroups = { "apps" }, apiVersions = { "v1" },
        resources = { "deployments/scale" } } } }) }) }
    t:create{ apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "d",
      namespace = "demo" }, spec = { replicas = 1, selector = { matchLabels = { app = "d" } },
      template = { metadata = { labels = { app = "d" } }, spec = { containers = { {
        name = "c", image = "nginx" } } } } } }
    local function scale(n)
      return http.request{ method = "PATCH", url = kube.server()
        .. "/apis/apps/v1/namespaces/demo/deployments/d/scale",
        headers = { ["Content-Type"] = "application/merge-patch+json" },
        body = '{"spec":{"replicas":' .. n .. '}}' }
    end
    assert.equal(200, scale(2).status)
    local r = scale(5)
    assert.equal(403, r.status)
    assert.equal('admission webhook "scale.example.com" denied the request: at most 3 replicas',
      kube.json.decode(r.body).message)
    assert.equal(2, t:get("apps/v1", "deployments", "demo", "d").spec.replicas)
    assert.same({ { "Scale", "autoscaling", "deployments", "scale", 2, 1 },
      { "Scale", "autoscaling", "deployments", "scale", 5, 2 } }, scales)
  end)

  it("tries a patch again when the object changed while the webhooks were asked", function()
    t:create(cm("raced"))
    t:webhooks{ config("Validating", "race", { hook("race.example.com", "/race",
      { rules = { { operations = { "UPDATE" }, apiGroups = { "" }, apiVersions = { "v1" },
        resources = { "configmaps" } } } }) }) }
    local obj = assert(kube.patch("v1", "configmaps", "demo", "raced", { data = { k = "w" } }))
    assert.same({ k = "w", other = "w!" }, obj.data)
    -- asked about the patch, then the other client's patch, then the patch again
    assert.same({ "/race UPDATE w", "/race UPDATE v", "/race UPDATE w" }, calls)
    -- a patch that names the resourceVersion it read is not tried again
    calls = {}
    local rv = obj.metadata.resourceVersion
    local none, err = kube.patch("v1", "configmaps", "demo", "raced",
      { metadata = { resourceVersion = rv }, data = { k = "z" } })
    assert.is_nil(none)
    assert.same({ 409, "Conflict", 'Operation cannot be fulfilled on configmaps "raced": the '
      .. "object has been modified; please apply your changes to the latest version and try "
      .. "again" }, { err.code, err.reason, err.message })
    assert.same({ "/race UPDATE z", "/race UPDATE w" }, calls)
  end)

  it("mutates a server-side apply's object", function()
    t:webhooks{ config("Mutating", "m", { hook("a.example.com", "/append-a") }) }
    t:apply(cm("x"))
    local obj = cm("x", { k = "w" })
    assert.equal("aa", t:apply(obj).data.trail)
  end)

  it("passes a webhook's warnings to the client", function()
    t:webhooks{ config("Validating", "check", { hook("check.example.com", "/check") }) }
    local r = assert(http.request{ method = "POST", url = kube.server()
      .. "/api/v1/namespaces/demo/configmaps", headers = { ["Content-Type"] = "application/json" },
      body = kube.json.encode(cm("x", { warn = "be careful" })) })
    assert.equal(201, r.status)
    assert.equal('299 - "be careful"', r.headers.warning)
  end)

  it("never asks webhooks about their own configurations", function()
    t:webhooks{ config("Validating", "all", { hook("all.example.com", "/check", { rules = { {
      operations = { "*" }, apiGroups = { "*" }, apiVersions = { "*" }, resources = { "*" } } } }) })
    }
    t:create(cm("x"))
    assert.same({ "/check CREATE x" }, calls)
    assert.is_true(t:delete("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations",
      nil, "all"))
    assert.same({ "/check CREATE x" }, calls)
  end)

  it("asks every validating webhook at once and answers the first refusal to arrive", function()
    t:webhooks{
      config("Validating", "a", { hook("late.example.com", "/deny-late", { timeoutSeconds = 30 }) }),
      config("Validating", "b", { hook("now.example.com", "/deny-now") }),
    }
    local obj, err = kube.create(cm("x"))
    assert.same({ code = 403, reason = "Forbidden", message = 'admission webhook '
      .. '"now.example.com" denied the request: now' }, refused(obj, err))
    table.sort(calls)
    assert.same({ "/deny-late x", "/deny-now x" }, calls)
    assert.is_nil(t:get("v1", "configmaps", "demo", "x"))
  end)

  it("sends the first AdmissionReview version a webhook accepts, and fails one it cannot",
    function()
      local seen = {}
      local srv = assert(httpd.listen { host = "127.0.0.1", port = 0, handler = function(req)
        local review = kube.json.decode(tostring(req:body()))
        seen[#seen + 1] = review.apiVersion
        -- v1beta1's answer needs no uid
        req:reply(200, { ["Content-Type"] = "application/json" }, kube.json.encode {
          apiVersion = review.apiVersion, kind = "AdmissionReview",
          response = { allowed = true } })
      end })
      local url = "http://127.0.0.1:" .. srv:port() .. "/review"
      t:create(config("Validating", "versions", {
        hook("beta.example.com", "/", { admissionReviewVersions = { "v2", "v1beta1", "v1" },
          clientConfig = { url = url } }) }))
      t:create(cm("x"))
      assert.same({ "admission.k8s.io/v1beta1" }, seen)
      local c = t:get("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", nil,
        "versions")
      c.webhooks[1].admissionReviewVersions = { "v2" }
      t:update(c)
      local obj, err = kube.create(cm("y"))
      local msg = 'failed calling webhook "beta.example.com": could not create admission '
        .. "objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)"
      assert.same({ code = 500, reason = "InternalError", message = "Internal error occurred: "
        .. msg }, refused(obj, err))
      assert.same({ "admission.k8s.io/v1beta1" }, seen)
      srv:close()
    end)
end)
