-- The controller API against the in-process simulator: kinds resolved by
-- discovery (built-in and CRD), multi-namespace informers, the builder
-- (owned objects enqueue their owner, mapped watches, predicates, workers
-- after sync, outcomes) and the server-side finalizer helpers.
local kube = require "kubelua"
local support = require "spec.support"
local testing = require "kubelua.testing"
local json = kube.json
local raises = support.raises

local eventually = support.eventually

local function cm(ns, name, data, labels)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = ns, labels = labels }, data = data }
end

local function greeting(ns, name, spec)
  return { apiVersion = "example.com/v1", kind = "Greeting",
           metadata = { name = name, namespace = ns }, spec = spec }
end

local crd = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
  metadata = { name = "greetings.example.com" },
  spec = { group = "example.com", scope = "Namespaced",
    names = { plural = "greetings", singular = "greeting", kind = "Greeting" },
    versions = json.array { { name = "v1", served = true, storage = true,
      subresources = { status = {} },
      schema = { openAPIV3Schema = { type = "object",
        ["x-kubernetes-preserve-unknown-fields"] = true } } } } } }

local names = {}
local function sorted_names(list)
  names = {}
  for _, o in ipairs(list) do names[#names + 1] = (o.metadata.namespace or "") .. "/" .. o.metadata.name end
  table.sort(names)
  return names
end

local t -- one server for the file (the simulator, or a real one: kubelua test --apiserver real)

describe("controller API", function()
  setup(function()
    t = testing.start{ namespaces = { "k1", "m1", "m2", "m3", "b1", "b2", "b3", "b4", "f1", "md1" } }
    -- the kube-root-ca.crt of a cluster's every namespace
    for _, ns in ipairs({ "k1", "m1", "m2", "m3", "b1", "b2", "b3", "b4", "f1", "md1" }) do
      support.root_ca(t, ns)
    end
    assert(kube.create(crd))
    -- a real server serves a new CRD's resource a moment later
    t:eventually(function() return t:list("example.com/v1", "greetings", "k1") end)
  end)
  teardown(function() t:stop() end)

  describe("kube.informer by kind", function()
    it("resolves a built-in kind to the informer of its resource", function()
      local by_kind = assert(kube.informer("v1", "ConfigMap", { namespace = "k1" }))
      assert.equal(kube.informer("v1", "configmaps", { namespace = "k1" }), by_kind)
      assert.equal(by_kind, kube.informer("v1", "ConfigMap", { namespace = "k1" }))
      assert.equal("v1/configmaps@k1", by_kind:name())
    end)

    it("resolves a CRD's kind and follows its objects", function()
      assert(kube.create(greeting("k1", "hi", { text = "hello" })))
      local inf = assert(kube.informer("example.com/v1", "Greeting", { namespace = "k1" }))
      assert.is_true(kube.wait_for_sync(inf, 5))
      assert.equal("hello", inf:get("k1/hi").spec.text)
      assert.equal(inf, kube.informer("example.com/v1", "greetings", { namespace = "k1" }))
    end)

    it("gives listed objects their apiVersion and kind (list items carry none)", function()
      assert(kube.create(cm("k1", "listed", {}, { listed = "yes" })))
      -- two specs, so that each makes its own informer and lists
      for what, selector in pairs({ configmaps = "listed=yes", ConfigMap = "listed in (yes)" }) do
        local inf = kube.informer("v1", what, { namespace = "k1", label_selector = selector })
        assert.is_true(kube.wait_for_sync(inf, 5))
        local obj = inf:get("k1/listed")
        assert.same({ "v1", "ConfigMap" }, { obj.apiVersion, obj.kind })
      end
    end)

    it("returns nil, err for a kind discovery does not know", function()
      local inf, err, code = kube.informer("example.com/v1", "Farewell")
      assert.is_nil(inf)
      assert.equal('kube.informer: NoKindMatch: no matches for kind "Farewell" in version'
                   .. ' "example.com/v1"', err)
      assert.equal("NoKindMatch", code)
    end)
  end)

  describe("kube.informer with namespaces", function()
    it("spans one watch per namespace", function()
      assert(kube.create(cm("m1", "a", { v = "1" })))
      assert(kube.create(cm("m2", "b", { v = "2" })))
      assert(kube.create(cm("m3", "c", { v = "3" })))
      -- (a real server leaves out an empty data map: m2/d has none)
      local inf = kube.informer("v1", "configmaps", { namespaces = { "m1", "m2" },
        indexers = { by_v = function(o) return { o.data and o.data.v } end } })
      assert.equal(inf, kube.informer("v1", "configmaps", { namespaces = { "m1", "m2" },
        indexers = { by_v = function(o) return { o.data and o.data.v } end } }))
      local seen = {}
      local h = inf:on_add(function(ev) seen[#seen + 1] = ev.key end)
      assert.is_true(kube.wait_for_sync(inf, 5))
      -- with the kube-root-ca.crt every namespace has
      assert.is_true(eventually(function() return #seen == 4 end))
      assert.is_true(h:has_synced())
      table.sort(seen)
      assert.same({ "m1/a", "m1/kube-root-ca.crt", "m2/b", "m2/kube-root-ca.crt" }, seen)
      assert.same(seen, sorted_names(inf:list()))
      assert.same({ "m2/b", "m2/kube-root-ca.crt" }, sorted_names(inf:list("m2")))
      assert.same({}, inf:list("m3"))
      assert.equal("1", inf:get("m1/a").data.v)
      assert.equal("2", inf:get("m2", "b").data.v)
      assert.is_nil(inf:get("m3/c"))
      assert.same({ "m2/b" }, sorted_names(inf:by_index("by_v", "2")))
      assert.equal(4, inf:len())
      local keys = inf:list_keys()
      table.sort(keys)
      assert.same(seen, keys)
      assert.is_nil(inf:last_sync_resource_version())

      h:remove()
      assert(kube.create(cm("m2", "d", { v = "4" })))
      assert.is_true(eventually(function() return inf:get("m2/d") ~= nil end))
      assert.equal(4, #seen)
    end)

    it("rejects bad namespace lists", function()
      raises("kube.informer: opts.namespaces must be a non-empty list of namespace names",
        function() kube.informer("v1", "configmaps", { namespaces = {} }) end)
      raises("kube.informer: opts.namespaces must be a non-empty list of namespace names",
        function() kube.informer("v1", "configmaps", { namespaces = { "a", 3 } }) end)
      raises("kube.informer: opts.namespace and opts.namespaces exclude each other",
        function() kube.informer("v1", "configmaps", { namespace = "a", namespaces = { "a" } }) end)
      raises("kube.informer: opts must be a table, got string",
        function() kube.informer("v1", "configmaps", "a") end)
    end)
  end)

  describe("kube.controller", function()
    it("reconciles the watched objects once caches sync; owned objects enqueue their owner",
       function()
      assert(kube.create(greeting("b1", "one", { text = "hello" })))
      local calls, synced_at_first, why = {}, nil, {}
      local ctl
      ctl = kube.controller{
        name = "greeter-b1",
        watches = { "example.com/v1", "Greeting", { namespace = "b1" } },
        owns = { { "v1", "ConfigMap", { namespace = "b1" } } },
        workers = 2,
        reconcile = function(req, ctx)
          if synced_at_first == nil then
            synced_at_first = true
            for _, inf in ipairs(ctl.informers) do
              synced_at_first = synced_at_first and inf:has_synced()
            end
          end
          calls[#calls + 1] = req.key
          why[#why + 1] = table.concat(ctx.triggers, ",")
          assert.same({ namespace = "b1", name = req.name, key = "b1/" .. req.name }, req)
          assert.equal(req.key, ctx.key)
          local g = ctl.informers[1]:get(req.key)
          if not g then return end
          local want = cm("b1", req.name .. "-greeting", { text = g.spec.text })
          assert(kube.set_controller_reference(g, want))
          local have, err = kube.get("v1", "configmaps", "b1", want.metadata.name)
          if err and not kube.is_not_found(err) then return nil, err end
          if not have then
            local _, cerr = kube.create(want)
            if cerr then return nil, cerr end
          elseif have.data.text ~= g.spec.text then
            have.data = want.data
            local _, uerr = kube.update(have)
            if uerr then return nil, uerr end
          end
        end,
      }
      assert.equal("greeter-b1", ctl.name)
      assert.equal("greeter-b1", ctl.queue:name())
      assert.equal(2, #ctl.informers)
      assert.is_true(eventually(function()
        local c = ctl.informers[2]:get("b1/one-greeting")
        return c and c.data.text == "hello"
      end))
      assert.is_true(ctl.started)
      assert.is_true(synced_at_first)
      assert.equal("add b1/one", why[1]) -- what queued the first run
      local owned = ctl.informers[2]:get("b1/one-greeting")
      assert.same({ apiVersion = "example.com/v1", kind = "Greeting", name = "one",
                    uid = ctl.informers[1]:get("b1/one").metadata.uid, controller = true,
                    blockOwnerDeletion = true }, owned.metadata.ownerReferences[1])

      -- the owned object is changed behind the controller's back: its owner is
      -- reconciled, which puts it back
      local n = #calls
      owned.data.text = "tampered"
      assert(kube.update(owned))
      -- a run the creation queued may still come after n: wait for the one
      -- the update is told as
      local function told()
        for i = n + 1, #why do
          if why[i]:find("update owned b1/one-greeting", 1, true) then return true end
        end
        return false
      end
      assert.is_true(eventually(function()
        local c = ctl.informers[2]:get("b1/one-greeting")
        return told() and c and c.data.text == "hello"
      end))
      assert.equal("b1/one", calls[#calls])

      -- and deleted: recreated
      assert(kube.delete("v1", "configmaps", "b1", "one-greeting"))
      assert.is_true(eventually(function() return ctl.informers[2]:get("b1/one-greeting") end))

      -- a ConfigMap controlled by something else does not enqueue anything
      t:settle() -- the recreation's own events and reconciles first
      n = #calls
      local stranger = cm("b1", "stranger", {})
      stranger.metadata.ownerReferences = json.array { { apiVersion = "apps/v1", kind = "Greeting",
        name = "one", uid = "x", controller = true } }
      assert(kube.create(stranger))
      assert.is_true(eventually(function() return ctl.informers[2]:get("b1/stranger") end))
      t:settle()
      assert.equal(n, #calls)
    end)

    it("owns objects metadata-only: their owner is enqueued, their cache holds metadata",
       function()
      local g = assert(kube.create(greeting("md1", "two", { text = "hi" })))
      local owned = cm("md1", "two-x", { big = "data" })
      owned.metadata.ownerReferences = json.array { { apiVersion = "example.com/v1",
        kind = "Greeting", name = "two", uid = g.metadata.uid, controller = true } }
      owned = assert(kube.create(owned))
      local why = {}
      local ctl = kube.controller{
        name = "greeter-md1",
        watches = { "example.com/v1", "Greeting", { namespace = "md1" } },
        owns = { { "v1", "ConfigMap", { namespace = "md1", metadata_only = true } } },
        reconcile = function(req, ctx) why[#why + 1] = req.key .. " " .. table.concat(ctx.triggers, ",") end,
      }
      assert.is_true(eventually(function() return ctl.started end))
      local c = ctl.informers[2]:get("md1/two-x")
      assert.same({ "apiVersion", "kind", "metadata" }, support.sorted_keys(c))
      assert.equal("PartialObjectMetadata", c.kind)
      assert.equal("two", c.metadata.ownerReferences[1].name)
      owned.metadata.labels = { changed = "yes" }
      assert(kube.update(owned))
      assert.is_true(eventually(function()
        return why[#why] and why[#why]:find("^md1/two update owned md1/two%-x") ~= nil
      end))
    end)

    it("retries errors with ctx.attempt, honours requeue_after and terminal", function()
      for _, name in ipairs({ "flaky", "later", "broken" }) do
        assert(kube.create(cm("b2", name, {})))
      end
      local attempts = { flaky = {}, later = {}, broken = {} }
      local logs = {}
      local saved = kube.log.error
      kube.log.error = function(msg, f) logs[#logs + 1] = { msg, f.controller, f.key } end
      local ok, err = pcall(function()
        kube.controller{
          name = "outcomes-b2",
          watches = { "v1", "configmaps", { namespace = "b2" } },
          rate_limiter = { type = "exponential", base = 0.001, max = 0.01 },
          reconcile = function(req, ctx)
            local a = attempts[req.name]
            if not a then return end -- kube-root-ca.crt
            a[#a + 1] = ctx.attempt
            if req.name == "flaky" and #a < 3 then return nil, "not yet" end
            if req.name == "later" and #a < 2 then return kube.requeue_after(0.02) end
            if req.name == "broken" then return kube.terminal("cannot ever work") end
          end,
        }
        assert.is_true(eventually(function()
          return #attempts.flaky == 3 and #attempts.later == 2 and #attempts.broken == 1
        end))
        kube.sleep(0.05)
      end)
      kube.log.error = saved
      assert(ok, err)
      assert.same({ flaky = { 0, 1, 2 }, later = { 0, 0 }, broken = { 0 } }, attempts)
      table.sort(logs, function(a, b) return a[3] .. a[1] < b[3] .. b[1] end)
      assert.same({ { "reconcile failed terminally, not retried", "outcomes-b2", "b2/broken" },
                    { "reconcile failed", "outcomes-b2", "b2/flaky" },
                    { "reconcile failed", "outcomes-b2", "b2/flaky" } }, logs)
    end)

    it("enqueues what a mapped watch returns and filters by generation", function()
      assert(kube.create(greeting("b3", "g", { text = "a" })))
      local calls = {}
      local ctl = kube.controller{
        name = "mapped-b3",
        watches = { "example.com/v1", "Greeting", { namespace = "b3" } },
        watches_mapped = { { { "v1", "ConfigMap", { namespace = "b3" } }, function(ev)
          local target = ev.object.metadata.labels and ev.object.metadata.labels.greeting
          return target and { "b3/" .. target, { namespace = "b3", name = target .. "-too" } }
        end } },
        predicates = { generation_changed = true },
        reconcile = function(req) calls[#calls + 1] = req.key end,
      }
      assert.is_true(eventually(function() return #calls == 1 end))
      assert.same({ "b3/g" }, calls)

      -- a status change keeps the generation: filtered out
      local g = assert(kube.get("example.com/v1", "greetings", "b3", "g"))
      g.status = { seen = true }
      assert(kube.update_status(g))
      assert.is_true(eventually(function()
        local c = ctl.informers[1]:get("b3/g")
        return c.status and c.status.seen
      end))
      kube.sleep(0.05)
      assert.same({ "b3/g" }, calls)
      -- a spec change bumps it
      g = assert(kube.get("example.com/v1", "greetings", "b3", "g"))
      g.spec.text = "b"
      assert(kube.update(g))
      assert.is_true(eventually(function() return #calls == 2 end))

      assert(kube.create(cm("b3", "pointer", {}, { greeting = "g" })))
      assert.is_true(eventually(function() return #calls == 4 end))
      table.sort(calls)
      assert.same({ "b3/g", "b3/g", "b3/g", "b3/g-too" }, calls)
    end)

    it("does not start workers before the caches sync", function()
      local calls = 0
      local ctl = kube.controller{
        name = "never-synced",
        watches = { "v1", "configmaps", { namespace = "b4" } },
        owns = { { "v1", "nosuchthings", { namespace = "b4" } } },
        reconcile = function() calls = calls + 1 end,
      }
      ctl.queue:add("b4/x")
      assert.is_true(eventually(function() return ctl.informers[1]:has_synced() end))
      kube.sleep(0.1)
      assert.is_false(ctl.started)
      assert.equal(0, calls)
      assert.equal(2, ctl.queue:len()) -- b4/x and b4/kube-root-ca.crt
    end)

    it("rejects a bad spec", function()
      local r = function() end
      raises("kube.controller: expected a table, got nil", function() kube.controller() end)
      raises("kube.controller: name must be a non-empty string",
        function() kube.controller{ watches = { "v1", "Pod" }, reconcile = r } end)
      raises("kube.controller: watches must be {apiVersion, kind_or_resource [, opts]}",
        function() kube.controller{ name = "x", watches = { "v1" }, reconcile = r } end)
      raises("kube.controller: reconcile must be a function, got nil",
        function() kube.controller{ name = "x", watches = { "v1", "Pod" } } end)
      raises("kube.controller: workers must be a positive whole number, got 0",
        function() kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                                    workers = 0 } end)
      raises("kube.controller: owns[2] must be {apiVersion, kind_or_resource [, opts]}",
        function() kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                                    owns = { { "v1", "Secret" }, { "v1" } } } end)
      raises("kube.controller: watches_mapped[1] must be {informer_or_spec, function(ev) -> keys}",
        function() kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                                    watches_mapped = { { { "v1", "Secret" } } } } end)
      raises('unknown key "label_changed" in kube.controller{} predicates; did you mean'
        .. ' "labels_changed"?', function()
          kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                           predicates = { label_changed = true } }
        end)
    end)
  end)

  describe("patch_add_finalizer / patch_remove_finalizer", function()
    it("patches the server, guarded by resourceVersion", function()
      local obj = assert(kube.create(cm("f1", "fin", { a = "1" })))
      local out, changed = kube.patch_add_finalizer(obj, "example.com/cleanup")
      assert.is_true(changed)
      assert.same({ "example.com/cleanup" }, out.metadata.finalizers)
      assert.is_nil(obj.metadata.finalizers) -- the argument is left alone
      local again, changed2 = kube.patch_add_finalizer(out, "example.com/cleanup")
      assert.equal(out, again)
      assert.is_false(changed2)

      -- a stale copy conflicts
      local stale, err = kube.patch_add_finalizer(obj, "other")
      assert.is_nil(stale)
      assert.is_true(kube.is_conflict(err))

      -- deletion waits for the finalizer, which the controller removes
      assert(kube.delete("v1", "configmaps", "f1", "fin"))
      local dying = assert(kube.get("v1", "configmaps", "f1", "fin"))
      assert.is_true(kube.is_being_deleted(dying))
      local gone, changed3 = kube.patch_remove_finalizer(dying, "example.com/cleanup")
      assert.truthy(gone)
      assert.is_true(changed3)
      local _, gerr = kube.get("v1", "configmaps", "f1", "fin")
      assert.is_true(kube.is_not_found(gerr))
    end)
  end)
end)

describe("kube.informer by kind at a script's top level", function()
  it("returns at once and starts the watch once discovery answers", function()
    local status, out = support.run_script([[
      local kube = require "kubelua"
      local inf = kube.informer("v1", "ConfigMap", { namespace = "default" })
      print("synced before: " .. tostring(inf:has_synced()) .. " " .. #inf:list())
      inf:on_add(function(ev) print("add " .. ev.key) io.stdout:flush() end)
      assert(inf == kube.informer("v1", "ConfigMap", { namespace = "default" }))
      kube.spawn(function()
        assert(kube.create{ apiVersion = "v1", kind = "ConfigMap",
                            metadata = { name = "x", namespace = "default" } })
        assert(kube.wait_for_sync(inf, 5))
        for _ = 1, 100 do
          if inf:get("default/x") then break end
          kube.sleep(0.01)
        end
        print("name " .. inf:name() .. " got " .. inf:get("default/x").metadata.name)
        kube.stop()
      end)
    ]], "", t.apiserver == "real" and "--kubeconfig " .. t.cp.kubeconfig or "--sim")
    assert.equal(0, status, out)
    assert.matches("synced before: false 0\n", out, 1, true)
    assert.matches("add default/x\n", out, 1, true)
    assert.matches("name v1/ConfigMap@default got x\n", out, 1, true)
  end)
end)
