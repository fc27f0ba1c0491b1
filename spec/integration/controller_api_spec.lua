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

describe("the harness", function()
  after_each(function() t:stop() end)

  local function script(body)
    return support.tempfile("local kube = require 'kubelua'\n" .. body, ".lua")
  end

  describe("t:load", function()
    it("returns once the script's informers have synced", function()
      t = testing.start{ namespaces = { "l1" } }
      t:create(cm("l1", "a", { color = "blue" }))
      t:load(script([[
        kube.controller{ name = "load-l1", watches = { "v1", "ConfigMap", { namespace = "l1" } },
          owns = { { "v1", "Secret", { namespace = "l1" } } }, reconcile = function() end }
        kube.informer("v1", "Pod", { namespace = "l1" })
      ]]))
      local n = 0
      for inf in pairs(kube._asked(require("kubelua.generation").current()).informers) do
        assert.is_true(inf:has_synced())
        n = n + 1
      end
      assert.equal(3, n)
    end)

    it("raises with the server's answer when an informer is forbidden", function()
      t = testing.start{ sim = { token = "admin-t", users = { ["bob-t"] = "bob" } } }
      kube.client.set_default(kube.client.new{ server = kube.server(), token = "admin-t" })
      t:namespace("l2")
      kube.connect{ server = kube.server(), token = "bob-t" } -- the informers' credentials
      raises('kubelua.testing: load: informers not synced: v1/configmaps@l2: list: 403 Forbidden:'
        .. ' configmaps is forbidden: User "bob" cannot list resource "configmaps" in API group ""'
        .. ' in the namespace "l2"', function()
          t:load(script([[
            kube.informer("v1", "configmaps", { namespace = "l2" })
          ]]))
        end)
    end)

    it("raises with the reason when a kind named at the top level cannot be resolved", function()
      t = testing.start{ namespaces = { "l3" } }
      local ok, err = pcall(t.load, t, script([[
        kube.informer("example.com/v1", "Nosuch", { namespaces = { "l3" } })
      ]]))
      assert.is_false(ok)
      assert.equal("kubelua.testing: load: informers not synced: example.com/v1/Nosuch@l3:"
        .. " NoKindMatch: no matches for kind \"Nosuch\" in version"
        .. " \"example.com/v1\"", (err:gsub("^[^:]*:%d+: ", "")))
    end)
  end)

  describe("t:settle", function()
    it("waits until the queues are empty and no reconcile runs", function()
      t = testing.start{ namespaces = { "s1" } }
      _G.settle_done = {}
      t:load(script([[
        kube.controller{ name = "settle-s1", watches = { "v1", "ConfigMap", { namespace = "s1" } },
          reconcile = function(req, ctx)
            kube.sleep(0.2)
            if ctx.attempt < 2 then return nil, "not yet" end
            _G.settle_done[#_G.settle_done + 1] = req.name
          end }
      ]]))
      t:create(cm("s1", "a", {}))
      t:create(cm("s1", "b", {}))
      t:settle()
      table.sort(_G.settle_done)
      assert.same({ "a", "b" }, _G.settle_done)
    end)

    it("raises naming what is still busy when time runs out", function()
      t = testing.start{ namespaces = { "s2" } }
      t:load(script([[
        kube.controller{ name = "settle-s2", watches = { "v1", "ConfigMap", { namespace = "s2" } },
          reconcile = function() return kube.requeue_after(3600) end }
      ]]))
      t:create(cm("s2", "a", {}))
      raises("kubelua.testing: settle: not settled within 0.3s (queue settle-s2: 0 queued,"
        .. " 0 processing, 1 waiting)", function() t:settle(0.3) end)
    end)
  end)
end)
