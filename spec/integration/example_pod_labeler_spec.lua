-- examples/pod-labeler with kubelua.testing: matching Pods get the label
-- and annotation, others are left alone, failures are retried.
local testing = require "kubelua.testing"

local function pod(name, labels)
  return { apiVersion = "v1", kind = "Pod",
           metadata = { name = name, namespace = "demo", labels = labels },
           spec = { containers = { { name = "c", image = "nginx" } } } }
end

local function labeled(t, name)
  local p = t:get("v1", "pods", "demo", name)
  return p and p.metadata.labels and p.metadata.labels["kubelua.io/labeled"] == "true" and p
end

describe("examples/pod-labeler", function()
  local t
  before_each(function() t = testing.start{ namespaces = { "demo" } } end)
  after_each(function()
    t:settle() -- a reconcile still running would finish against the next case's server
    t:stop()
  end)

  it("labels and annotates the Pods its selector matches, and no others", function()
    t:create(pod("web-1", { app = "web" }))
    t:load("examples/pod-labeler/controller.lua", "app=web")
    t:create(pod("web-2", { app = "web" }))
    t:create(pod("api-1", { app = "api" }))
    local p = t:eventually(function() return labeled(t, "web-1") end)
    assert.equal("pod-labeler (selector app=web)", p.metadata.annotations["kubelua.io/labeled-by"])
    assert.equal("web", p.metadata.labels.app)
    t:eventually(function() return labeled(t, "web-2") end)
    assert.is_falsy(labeled(t, "api-1"))
  end)

  it("retries a failed update with backoff until it succeeds", function()
    t = testing.start{ apiserver = "sim", namespaces = { "demo" } } -- its faults
    t:create(pod("first", { app = "x" }))
    t:load("examples/pod-labeler/controller.lua")
    t:eventually(function() return labeled(t, "first") end) -- it runs
    -- the next two requests (the controller's updates) fail; the Pod is
    -- created in the simulator itself, past the fault
    t.sim:inject{ fail_next = 2, code = 503 }
    assert(t.sim:apply_object(pod("a", { app = "x" })))
    local p = t:eventually(function() return labeled(t, "a") end)
    assert.equal("true", p.metadata.labels["kubelua.io/labeled"])
  end)
end)
