-- The controller author's API against the in-process simulator: ctx.object,
-- strict keys for kube.controller{} and kube.informer's opts, change
-- predicates and kube.diff, and the harness's load and settle.
local kube = require "kubelua"
local support = require "spec.support"
local testing = require "kubelua.testing"
local raises = support.raises

local function cm(ns, name, data, labels)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = ns, labels = labels }, data = data }
end

local t

describe("controller API", function()
  setup(function() t = testing.start{ namespaces = { "o1", "p1" } } end)
  teardown(function() t:stop() end)

  describe("ctx.object", function()
    it("is the watched object from the cache, nil once it is gone", function()
      local seen = {}
      kube.controller{
        name = "object-o1",
        watches = { "v1", "ConfigMap", { namespace = "o1" } },
        reconcile = function(req, ctx)
          local o = ctx.object
          seen[#seen + 1] = req.name .. "=" .. (o and o.data.color or "gone")
        end,
      }
      t:create(cm("o1", "a", { color = "blue" }))
      t:eventually(function() return #seen == 1 end)
      t:delete("v1", "configmaps", "o1", "a")
      t:eventually(function() return #seen == 2 end)
      assert.same({ "a=blue", "a=gone" }, seen)
    end)
  end)

  describe("strict keys", function()
    local r = function() end
    it("rejects an unknown key of kube.controller{} with the nearest valid one", function()
      raises('unknown key "own" in kube.controller{}; did you mean "owns"?', function()
        kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r, own = {} }
      end)
      raises('unknown key "reconcle" in kube.controller{}; did you mean "reconcile"?', function()
        kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcle = r }
      end)
      raises('unknown key "wacthes" in kube.controller{}; did you mean "watches"?', function()
        kube.controller{ name = "x", wacthes = { "v1", "Pod" }, reconcile = r }
      end)
      raises('unknown key "zzzzzzzz" in kube.controller{}', function()
        kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r, zzzzzzzz = 1 }
      end)
    end)

    it("says the type and value of a wrong one", function()
      raises('kube.controller: workers must be a number, got string "2"', function()
        kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r, workers = "2" }
      end)
      raises('kube.controller: reconcile must be a function, got boolean true', function()
        kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = true }
      end)
    end)

    it("rejects an unknown key of kube.informer's opts with the nearest valid one", function()
      raises('unknown key "namespce" in kube.informer opts; did you mean "namespace"?', function()
        kube.informer("v1", "configmaps", { namespce = "o1" })
      end)
      raises('unknown key "labelSelector" in kube.informer opts; did you mean "label_selector"?',
        function() kube.informer("v1", "configmaps", { labelSelector = "a=b" }) end)
    end)
  end)
end)
