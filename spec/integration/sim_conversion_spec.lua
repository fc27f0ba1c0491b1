-- The simulator's conversion webhooks (kubelua.sim.conversion): a CRD with
-- conversion.strategy Webhook converts its objects through the script's
-- webhook (kube.webhook convert, registered with t:webhooks) between its
-- versions, on writes, reads, lists and watches, as kube-apiserver does.
-- #sim
local kube = require "kubelua"
local testing = require "kubelua.testing"
local http = require "kubelua.http"

local reviews = {} -- "from → to" of each object the webhook converted
local seen -- the last AdmissionReview request the validating webhook got

local function schema()
  return { openAPIV3Schema = { type = "object", properties = { spec = { type = "object",
    ["x-kubernetes-preserve-unknown-fields"] = true } } } }
end

local CRD = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
  metadata = { name = "greetings.example.com" },
  spec = { group = "example.com", scope = "Namespaced",
    names = { plural = "greetings", singular = "greeting", kind = "Greeting" },
    versions = {
      { name = "v1", served = true, storage = true, schema = schema() },
      { name = "v1alpha1", served = true, storage = false, schema = schema() },
    },
    conversion = { strategy = "Webhook", webhook = { conversionReviewVersions = { "v1" },
      clientConfig = { service = { namespace = "webhooks", name = "hooks",
        path = "/convert" } } } } } }

local function greeting(version, spec)
  return { apiVersion = "example.com/" .. version, kind = "Greeting",
    metadata = { name = "hello", namespace = "demo" }, spec = spec }
end

describe("simulator conversion webhooks", function()
  local t

  setup(function()
    kube.webhook{ path = "/convert", convert = function(obj, to)
      local s = obj.spec
      reviews[#reviews + 1] = obj.apiVersion .. " → " .. to
      if s.text == "fail" or s.message == "fail" then return nil, "cannot convert fail" end
      if to == "example.com/v1" then
        s.message, s.text = s.text, nil
      else
        s.text, s.message = s.message, nil
      end
      return obj
    end }
    kube.webhook{ path = "/check", validate = function(req)
      seen = req
      return true
    end }
  end)

  before_each(function()
    reviews, seen = {}, nil
    t = testing.start{ namespaces = { "demo", "webhooks" }, controllers = { root_ca = false } }
    t:webhooks{ CRD }
  end)
  after_each(function() t:stop() end)

  it("stores a write through one version in the others as the webhook converts it", function()
    local made = t:create(greeting("v1alpha1", { text = "hi" }))
    assert.same({ text = "hi" }, made.spec)
    assert.same({ "example.com/v1alpha1 → example.com/v1" }, reviews)
    local v1 = t:get("example.com/v1", "greetings", "demo", "hello")
    assert.same({ message = "hi" }, v1.spec)
    assert.equal("example.com/v1", v1.apiVersion)
    assert.equal(made.metadata.uid, v1.metadata.uid)
    assert.equal(made.metadata.resourceVersion, v1.metadata.resourceVersion)
    assert.same({ text = "hi" }, t:get("example.com/v1alpha1", "greetings", "demo", "hello").spec)
  end)

  it("serves lists and watches of the other version converted", function()
    local made = t:create(greeting("v1", { message = "hi" }))
    local list = t:list("example.com/v1alpha1", "greetings", "demo")
    assert.same({ text = "hi" }, list[1].spec)
    local events, finished = {}, false
    kube.spawn(function()
      local r = http.request{ url = kube.server() .. "/apis/example.com/v1alpha1/"
        .. "namespaces/demo/greetings?watch=true&timeoutSeconds=2&resourceVersion="
        .. made.metadata.resourceVersion }
      for line in r.body:gmatch("[^\n]+") do events[#events + 1] = kube.json.decode(line) end
      finished = true
    end)
    kube.sleep(0.3)
    made.spec.message = "hello"
    t:update(made)
    t:eventually(function() return finished end, 10)
    assert.equal(1, #events)
    assert.equal("MODIFIED", events[1].type)
    assert.equal("example.com/v1alpha1", events[1].object.apiVersion)
    assert.same({ text = "hello" }, events[1].object.spec)
  end)

  it("fails a write the webhook cannot convert, in kube-apiserver's words", function()
    local obj, err = kube.create(greeting("v1alpha1", { text = "fail" }))
    assert.is_nil(obj)
    assert.same({ code = 500, reason = "InternalError", message = "Internal error occurred: "
      .. "conversion webhook for example.com/v1alpha1, Kind=Greeting failed: cannot convert fail" },
      { code = err.code, reason = err.reason, message = err.message })
    assert.is_nil(t:get("example.com/v1", "greetings", "demo", "hello"))
    assert.is_nil(t:get("example.com/v1alpha1", "greetings", "demo", "hello"))
  end)

  it("sends an admission webhook for one version a write through another, converted "
    .. "(matchPolicy Equivalent)", function()
      t:webhooks{ CRD, { apiVersion = "admissionregistration.k8s.io/v1",
        kind = "ValidatingWebhookConfiguration", metadata = { name = "check" },
        webhooks = { { name = "check.example.com", admissionReviewVersions = { "v1" },
          sideEffects = "None", clientConfig = { service = { namespace = "webhooks",
            name = "hooks", path = "/check" } },
          rules = { { operations = { "CREATE" }, apiGroups = { "example.com" },
            apiVersions = { "v1" }, resources = { "greetings" } } } } } } }
      t:create(greeting("v1alpha1", { text = "hi" }))
      assert.same({ group = "example.com", version = "v1", kind = "Greeting" }, seen.kind)
      assert.same({ group = "example.com", version = "v1alpha1", kind = "Greeting" },
        seen.requestKind)
      assert.same({ message = "hi" }, seen.object.spec)
      assert.equal("example.com/v1", seen.object.apiVersion)
    end)
end)
