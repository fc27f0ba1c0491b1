-- A conversion webhook's refusal as kube-apiserver answers it, on the
-- simulator and (scripts/test's real_specs) on a real server: both store an
-- object in the storage version and convert on each read through another,
-- so a refusal fails the reads, not the write. t:webhooks with
-- spec/fixtures/webhooks' Widgets, whose /convert refuses a size of 13.
local kube = require "kubelua"
local testing = require "kubelua.testing"

local V1, V2 = "hooks.kubelua.io/v1", "hooks.kubelua.io/v2"

local function widget(version, name, spec)
  return { apiVersion = version, kind = "Widget", metadata = { namespace = "conv", name = name },
    spec = spec }
end

describe("a conversion webhook's refusal", function()
  local t
  before_each(function()
    t = testing.start{ namespaces = { "conv" } }
    t:load("spec/fixtures/webhooks/hooks.lua")
    t:webhooks("spec/fixtures/webhooks/widgets.yaml")
  end)
  after_each(function() t:stop() end)

  it("stores a write through the storage version and fails its reads through the other",
    function()
      t:create(widget(V1, "u", { size = 13 }))
      assert.same({ size = 13 }, t:get(V1, "widgets", "conv", "u").spec)
      local obj, err = kube.get(V2, "widgets", "conv", "u")
      assert.is_nil(obj)
      assert.same({ 500, "InternalError", "conversion webhook for hooks.kubelua.io/v1, "
        .. "Kind=Widget failed: 13 is unlucky" }, { err.code, err.reason, err.message })
      obj, err = kube.list(V2, "widgets", "conv")
      assert.is_nil(obj)
      assert.same({ 500, "InternalError", "conversion webhook for hooks.kubelua.io/v1, "
        .. "Kind=Widget failed: 13 is unlucky" }, { err.code, err.reason, err.message })
    end)

  it("fails a write through the other version", function()
    local obj, err = kube.create(widget(V2, "x", { shape = { size = 13 } }))
    assert.is_nil(obj)
    assert.same({ 500, "InternalError", "conversion webhook for hooks.kubelua.io/v2, "
      .. "Kind=Widget failed: 13 is unlucky" }, { err.code, err.reason, err.message })
    assert.is_nil(t:get(V1, "widgets", "conv", "x"))
  end)
end)
