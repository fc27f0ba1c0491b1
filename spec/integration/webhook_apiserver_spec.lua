-- kubelua's webhook server called by the API server (t:webhooks): the
-- simulator, and a real kube-apiserver under `kubelua test --apiserver
-- real` (scripts/test's real_specs), each answer asserted as the real
-- server gives it: a mutating webhook's JSON Patch applied, a validating
-- webhook's refusal, a handler that raises or outlives timeoutSeconds
-- under failurePolicy Fail and Ignore, and a conversion both ways.
local kube = require "kubelua"
local testing = require "kubelua.testing"

local format = string.format

local REG = "admissionregistration.k8s.io/v1"

local function hook(name, path, case, extra)
  local w = { name = name .. ".hooks.kubelua.io", admissionReviewVersions = { "v1" },
    sideEffects = "None", failurePolicy = "Fail", timeoutSeconds = 5,
    clientConfig = { url = "https://webhooks.invalid" .. path },
    namespaceSelector = { matchLabels = { hooks = "on" } },
    objectSelector = { matchLabels = { case = case } },
    rules = { { operations = { "CREATE", "UPDATE" }, apiGroups = { "" }, apiVersions = { "v1" },
      resources = { "configmaps" } } } }
  for k, v in pairs(extra or {}) do w[k] = v end
  return w
end

local OBJECTS = {
  { apiVersion = REG, kind = "MutatingWebhookConfiguration",
    metadata = { name = "kubelua-spec" }, webhooks = { hook("mutate", "/mutate", "mutate") } },
  { apiVersion = REG, kind = "ValidatingWebhookConfiguration",
    metadata = { name = "kubelua-spec" }, webhooks = {
      hook("validate", "/validate", "validate"),
      hook("raise-fail", "/raise", "raise-fail"),
      hook("raise-ignore", "/raise", "raise-ignore", { failurePolicy = "Ignore" }),
      hook("slow-fail", "/slow", "slow-fail", { timeoutSeconds = 1 }),
      hook("slow-ignore", "/slow", "slow-ignore", { timeoutSeconds = 1,
        failurePolicy = "Ignore" }) } },
}

-- the Widgets' CRD, converted by the webhook
do
  local f = assert(io.open("spec/fixtures/webhooks/widgets.yaml", "rb"))
  OBJECTS[#OBJECTS + 1] = assert(require("kubelua.sim.yaml").decode(f:read("*a")))
  f:close()
end

local function configmap(name, case, data)
  return { apiVersion = "v1", kind = "ConfigMap",
    metadata = { namespace = "hooks", name = name, labels = { case = case } }, data = data }
end

-- The error of a write that must fail: { code, reason, message }.
local function refusal(obj, err)
  assert.is_nil(obj)
  return { err.code, err.reason, err.message }
end

describe("webhooks called by the API server", function()
  local t, url
  before_each(function()
    t = testing.start()
    t:create{ apiVersion = "v1", kind = "Namespace",
      metadata = { name = "hooks", labels = { hooks = "on" } } }
    t:load("spec/fixtures/webhooks/hooks.lua")
    url = t:webhooks(OBJECTS)
  end)
  after_each(function() t:stop() end)

  it("stores the configurations with the defaults of the webhooks they leave out", function()
    local w = t:get(REG, "mutatingwebhookconfigurations", nil, "kubelua-spec").webhooks[1]
    assert.same({ "Fail", "Equivalent", "Never", 5, "*" },
      { w.failurePolicy, w.matchPolicy, w.reinvocationPolicy, w.timeoutSeconds, w.rules[1].scope })
    w = t:get(REG, "validatingwebhookconfigurations", nil, "kubelua-spec").webhooks[5]
    assert.same({ "slow-ignore.hooks.kubelua.io", "Ignore", "Equivalent", 1, "*" },
      { w.name, w.failurePolicy, w.matchPolicy, w.timeoutSeconds, w.rules[1].scope })
    assert.is_nil(w.reinvocationPolicy)
    local c = t:create{ apiVersion = REG, kind = "ValidatingWebhookConfiguration",
      metadata = { name = "kubelua-spec-unused" }, webhooks = { hook("unused", "/none", "none") } }
    -- a struct held by value in a list's item owns a "." of its own
    local fields = { ["."] = {}, ["f:admissionReviewVersions"] = {},
      ["f:clientConfig"] = { ["."] = {}, ["f:url"] = {} }, ["f:failurePolicy"] = {},
      ["f:matchPolicy"] = {}, ["f:name"] = {}, ["f:namespaceSelector"] = {},
      ["f:objectSelector"] = {}, ["f:rules"] = {}, ["f:sideEffects"] = {},
      ["f:timeoutSeconds"] = {} }
    assert.same({ ["f:webhooks"] = { ["."] = {}, ['k:{"name":"unused.hooks.kubelua.io"}'] = fields } },
      c.metadata.managedFields[1].fieldsV1)
  end)

  it("applies a mutating webhook's JSON Patch to the object stored", function()
    t:create(configmap("m", "mutate", { x = "1" }))
    local cm = t:get("v1", "configmaps", "hooks", "m")
    assert.same({ case = "mutate", ["mutated-by"] = "kubelua" }, cm.metadata.labels)
    assert.same({ ["hooks.kubelua.io/mutated"] = "yes" }, cm.metadata.annotations)
    assert.same({ y = "2" }, cm.data)
    -- the field manager ran before the webhook: its fields are the request's
    assert.same({ { "kubelua", { ["f:data"] = { ["."] = {}, ["f:x"] = {} },
      ["f:metadata"] = { ["f:labels"] = { ["."] = {}, ["f:case"] = {} } } } } },
      { { cm.metadata.managedFields[1].manager, cm.metadata.managedFields[1].fieldsV1 } })
    assert.equal(1, #cm.metadata.managedFields)
  end)

  it("applies it to an update too, with or without a resourceVersion", function()
    t:create(configmap("m", "mutate", { x = "1" }))
    local cm = t:get("v1", "configmaps", "hooks", "m")
    cm.data = { z = "3" }
    cm.metadata.annotations = nil
    assert.same({ y = "2", z = "3" }, t:update(cm).data)
    local put = configmap("m", "mutate", { w = "4" })
    local got = t:update(put)
    assert.same({ y = "2", w = "4" }, got.data)
    assert.same({ ["hooks.kubelua.io/mutated"] = "yes" }, got.metadata.annotations)
    -- a body without its namespace: the request's is the object's, for the
    -- namespaceSelector too
    put = configmap("m", "mutate", { v = "5" })
    put.metadata.namespace = nil
    got = assert(kube.client.default():request("PUT", "/api/v1/namespaces/hooks/configmaps/m",
      nil, kube.json.encode(put), "application/json"))
    assert.same({ "hooks", { v = "5", y = "2" } }, { got.metadata.namespace, got.data })
  end)

  it("refuses with a validating webhook's message as 403 Forbidden, allows the rest", function()
    assert.same({ 403, "Forbidden", 'admission webhook "validate.hooks.kubelua.io" denied the '
      .. "request: data.forbidden is not allowed here" },
      refusal(kube.create(configmap("v", "validate", { forbidden = "1" }))))
    assert.is_nil(t:get("v1", "configmaps", "hooks", "v"))
    t:create(configmap("v", "validate", { fine = "1" }))
  end)

  it("refuses a write whose handler raises with the error's first line, 500, whatever "
    .. "failurePolicy says (the webhook answered)", function()
    for _, case in ipairs { "raise-fail", "raise-ignore" } do
      assert.same({ 500, "InternalError", format('admission webhook "%s.hooks.kubelua.io" denied '
        .. "the request: spec/fixtures/webhooks/hooks.lua:24: no verdict today", case) },
        refusal(kube.create(configmap("r", case))))
    end
    assert.is_nil(t:get("v1", "configmaps", "hooks", "r"))
  end)

  it("fails a write whose webhook outlives timeoutSeconds under Fail, not under Ignore",
    function()
      assert.same({ 500, "InternalError", format('Internal error occurred: failed calling webhook '
        .. '"slow-fail.hooks.kubelua.io": failed to call webhook: Post "%s/slow?timeout=1s": '
        .. "context deadline exceeded", url) }, refusal(kube.create(configmap("s", "slow-fail"))))
      assert.is_nil(t:get("v1", "configmaps", "hooks", "s"))
      t:create(configmap("s", "slow-ignore"))
      assert.same({ case = "slow-ignore" }, t:get("v1", "configmaps", "hooks", "s").metadata.labels)
    end)

  it("converts a Widget written through one version when it is read through the other",
    function()
      local V1, V2 = "hooks.kubelua.io/v1", "hooks.kubelua.io/v2"
      assert.same({ shape = { size = 3 } }, t:create{ apiVersion = V2, kind = "Widget",
        metadata = { namespace = "hooks", name = "w" }, spec = { shape = { size = 3 } } }.spec)
      local w = t:get(V1, "widgets", "hooks", "w")
      assert.same({ V1, { size = 3 } }, { w.apiVersion, w.spec })
      w.spec.size = 4
      t:update(w)
      w = t:get(V2, "widgets", "hooks", "w")
      assert.same({ V2, { shape = { size = 4 } } }, { w.apiVersion, w.spec })
      local items = t:list(V2, "widgets", "hooks")
      assert.same({ { V2, { shape = { size = 4 } } } }, { { items[1].apiVersion, items[1].spec } })
    end)
end)
