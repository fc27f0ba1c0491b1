-- examples/configmap-mirror with kubelua.testing: labelled ConfigMaps get
-- an owned Secret copy that follows them and goes with them.
local testing = require "kubelua.testing"
local support = require "spec.support"

local function cm(name, data, labels)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = "demo", labels = labels }, data = data }
end

local MIRROR = { ["kubelua.io/mirror"] = "secret" }

local function names(items)
  local out = {}
  for i, item in ipairs(items) do out[i] = item.metadata.name end
  table.sort(out)
  return out
end

describe("examples/configmap-mirror", function()
  local t, root_ca
  before_each(function()
    t = testing.start{ namespaces = { "demo" } }
    -- what the root-CA publisher puts in every namespace, as in a real
    -- cluster: an object the controller did not make
    root_ca = support.root_ca(t, "demo")
    t:load("examples/configmap-mirror/controller.lua")
  end)
  after_each(function()
    t:settle() -- a reconcile still running would finish against the next case's server
    t:stop()
  end)

  it("copies a labelled ConfigMap into an owned Secret, base64-encoded", function()
    local src = t:create(cm("settings", { color = "blue", size = "xl!" }, MIRROR))
    local secret = t:eventually(function() return t:get("v1", "secrets", "demo", "settings") end)
    assert.same({ color = "Ymx1ZQ==", size = "eGwh" }, secret.data)
    assert.same({ apiVersion = "v1", kind = "ConfigMap", name = "settings",
                  uid = src.metadata.uid, controller = true, blockOwnerDeletion = true },
                secret.metadata.ownerReferences[1])
    assert.equal("configmap-mirror", secret.metadata.labels["app.kubernetes.io/managed-by"])
  end)

  it("leaves unlabelled ConfigMaps alone", function()
    t:create(cm("private", { secret = "no" }))
    t:create(cm("public", { x = "1" }, MIRROR))
    t:eventually(function() return t:get("v1", "secrets", "demo", "public") end)
    assert.is_nil(t:get("v1", "secrets", "demo", "private"))
    assert.is_nil(t:get("v1", "secrets", "demo", "kube-root-ca.crt"))
    assert.same(root_ca, t:get("v1", "configmaps", "demo", "kube-root-ca.crt"))
    assert.same({ "public" }, names(t:list("v1", "secrets", "demo")))
  end)

  it("follows changes of the source and restores a tampered copy", function()
    local src = t:create(cm("settings", { color = "blue" }, MIRROR))
    t:eventually(function() return t:get("v1", "secrets", "demo", "settings") end)
    src.data.color = "green"
    t:update(src)
    t:eventually(function()
      local s = t:get("v1", "secrets", "demo", "settings")
      return s.data.color == "Z3JlZW4="
    end)
    local s = t:get("v1", "secrets", "demo", "settings")
    s.data.color = "dGFtcGVyZWQ="
    t:update(s)
    t:eventually(function()
      return t:get("v1", "secrets", "demo", "settings").data.color == "Z3JlZW4="
    end)
  end)

  it("deletes the copy with its source", function()
    t:create(cm("settings", { color = "blue" }, MIRROR))
    t:eventually(function() return t:get("v1", "secrets", "demo", "settings") end)
    t:delete("v1", "configmaps", "demo", "settings")
    t:eventually(function() return t:get("v1", "secrets", "demo", "settings") == nil end)
  end)

  it("does not take over a Secret that another controller owns", function()
    -- an owner that exists: the garbage collector deletes what a missing one owns
    local web = t:create{ apiVersion = "apps/v1", kind = "Deployment",
      metadata = { name = "web", namespace = "demo" },
      spec = { selector = { matchLabels = { app = "web" } }, template = {
        metadata = { labels = { app = "web" } },
        spec = { containers = { { name = "c", image = "nginx" } } } } } }
    t:create{ apiVersion = "v1", kind = "Secret",
              metadata = { name = "taken", namespace = "demo", ownerReferences = {
                { apiVersion = "apps/v1", kind = "Deployment", name = "web",
                  uid = web.metadata.uid, controller = true } } },
              data = { a = "Yg==" } }
    t:create(cm("taken", { a = "x" }, MIRROR))
    t:create(cm("other", { a = "x" }, MIRROR))
    t:eventually(function() return t:get("v1", "secrets", "demo", "other") end)
    assert.same({ a = "Yg==" }, t:get("v1", "secrets", "demo", "taken").data)
  end)
end)
