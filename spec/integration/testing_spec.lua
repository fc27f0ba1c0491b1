-- kubelua.testing, the harness users write controller specs with.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local support = require "spec.support"

describe("kubelua.testing", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("serves a fresh simulator per start, with the namespaces asked for", function()
    -- (a real server is kept from start to start: spec/real/envtest_spec.lua)
    t = testing.start{ apiserver = "sim", namespaces = { "a", "b" } }
    assert.equal("a", t:get("v1", "namespaces", nil, "a").metadata.name)
    t:create{ apiVersion = "v1", kind = "ConfigMap", metadata = { name = "x", namespace = "a" } }
    assert.equal(2, #t:list("v1", "configmaps", "a")) -- and the namespace's kube-root-ca.crt
    assert.equal("a", t:namespace("a").metadata.name) -- already there: fine
    local first = kube.server()
    t:stop()
    t = testing.start{ apiserver = "sim" }
    assert.are_not.equal(first, kube.server())
    assert.is_nil(t:get("v1", "namespaces", nil, "a"))
  end)

  it("returns nil for a missing object and raises other errors with the server's words", function()
    t = testing.start{ namespaces = { "a" } }
    assert.is_nil(t:get("v1", "configmaps", "a", "nope"))
    assert.is_false(t:delete("v1", "configmaps", "a", "nope"))
    local cm = { apiVersion = "v1", kind = "ConfigMap", metadata = { name = "x", namespace = "a" } }
    t:create(cm)
    support.raises('kubelua.testing: create: AlreadyExists: configmaps "x" already exists',
      function() t:create(cm) end)
    assert.is_true(t:delete("v1", "configmaps", "a", "x"))
  end)

  it("waits with eventually and says what the last try gave", function()
    t = testing.start()
    local n = 0
    assert.equal(3, t:eventually(function() n = n + 1 return n >= 3 and n end))
    support.raises("kubelua.testing: eventually: condition not met within 0.1s (the last call "
      .. "returned false)", function() t:eventually(function() return false end, 0.1) end)
    local ok, err = pcall(t.eventually, t, function() error("boom", 0) end, 0.1)
    assert.is_false(ok)
    assert.matches("condition not met within 0.1s %(the last call raised: boom%)$", err)
  end)

  it("loads a controller script and reports one that fails", function()
    t = testing.start{ namespaces = { "a" } }
    local path = support.tempfile([[
      local kube = require "kubelua"
      local cms = kube.informer("v1", "configmaps", { namespace = "a" })
      local q = kube.workqueue("testing-spec")
      cms:on_add(function(ev) q:add(ev.key) end)
      kube.workers(q, 1, function(key)
        local cm = cms:get(key)
        assert(kube.patch("v1", "configmaps", cm.metadata.namespace, cm.metadata.name,
                          { data = { seen = "yes" } }))
      end)
    ]], ".lua")
    assert.is_true(t:load(path) > 0)
    t:create{ apiVersion = "v1", kind = "ConfigMap", metadata = { name = "x", namespace = "a" } }
    local cm = t:eventually(function()
      local obj = t:get("v1", "configmaps", "a", "x")
      return obj.data and obj.data.seen == "yes" and obj
    end)
    assert.equal("yes", cm.data.seen)
    local bad = support.tempfile("error('no config')\n", ".lua")
    support.raises("kubelua.testing: load: cannot load script: cannot open /nonexistent.lua: "
      .. "No such file or directory",
      function() t:load("/nonexistent.lua") end)
    local ok, err = pcall(t.load, t, bad)
    assert.is_false(ok)
    assert.matches("^kubelua.testing: load: script failed: " .. bad:gsub("%p", "%%%0")
      .. ":1: no config\nstack traceback:", err)
    os.remove(path)
    os.remove(bad)
  end)
end)
