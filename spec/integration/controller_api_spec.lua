-- The controller author's API against the in-process simulator: ctx.object,
-- strict keys for kube.controller{} and kube.informer's opts, change
-- predicates and kube.diff, and the harness's load and settle.
local kube = require "kubelua"
local support = require "spec.support"
local testing = require "kubelua.testing"

-- The namespaces hold only what each spec makes: no kube-root-ca.crt or
-- default ServiceAccount for the controllers here to see.
local QUIET = { root_ca = false, service_account = false }
local raises = support.raises

local function cm(ns, name, data, labels)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = ns, labels = labels }, data = data }
end

local t

describe("controller API", function()
  setup(function() t = testing.start{ namespaces = { "o1", "p1" }, controllers = QUIET } end)
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
      t = testing.start{ namespaces = { "l1" }, controllers = QUIET }
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
      t = testing.start{ sim = { token = "admin-t", users = { ["bob-t"] = "bob" } }, controllers = QUIET }
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
      t = testing.start{ namespaces = { "l3" }, controllers = QUIET }
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
      t = testing.start{ namespaces = { "s1" }, controllers = QUIET }
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
      t = testing.start{ namespaces = { "s2" }, controllers = QUIET }
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

describe("kube.diff", function()
  it("lists the changes as {op, path, old, new}, arrays by index", function()
    local old = { metadata = { name = "a", labels = { ["app.kubernetes.io/name"] = "web", x = "1" } },
                  spec = { replicas = 1, containers = kube.json.array {
                    { name = "c", image = "nginx:1" }, { name = "d", image = "busybox" } } } }
    local new = { metadata = { name = "a", labels = { ["app.kubernetes.io/name"] = "api" },
                               annotations = { note = "n" } },
                  spec = { replicas = 3, paused = kube.null, containers = kube.json.array {
                    { name = "c", image = "nginx:2" } } } }
    assert.same({
      { op = "add", path = "metadata.annotations", new = { note = "n" } },
      { op = "replace", path = 'metadata.labels["app.kubernetes.io/name"]', old = "web",
        new = "api" },
      { op = "remove", path = "metadata.labels.x", old = "1" },
      { op = "replace", path = "spec.containers[1].image", old = "nginx:1", new = "nginx:2" },
      { op = "remove", path = "spec.containers[2]", old = { name = "d", image = "busybox" } },
      { op = "replace", path = "spec.replicas", old = 1, new = 3 },
    }, kube.diff(old, new))
    assert.same({}, kube.diff(old, old))
    assert.same({ { op = "replace", path = "spec", old = { a = 1 }, new = "x" } },
                kube.diff({ spec = { a = 1 } }, { spec = "x" }))
  end)

  it("rejects what is not an object", function()
    raises("kube.diff: old must be an object table, got nil", function() kube.diff(nil, {}) end)
    raises("kube.diff: new must be an object table, got an array",
           function() kube.diff({}, kube.json.array { 1 }) end)
  end)
end)

describe("change predicates", function()
  setup(function() t = testing.start{ namespaces = { "c1", "c2" }, controllers = QUIET } end)
  teardown(function() t:stop() end)

  local function watch(ns, predicates)
    local seen = {}
    kube.controller{ name = "pred-" .. ns, watches = { "v1", "ConfigMap", { namespace = ns } },
      predicates = predicates,
      reconcile = function(_, ctx) seen[#seen + 1] = ctx.object and ctx.object.data.v end }
    return seen
  end

  local function change(ns, fn)
    local o = t:get("v1", "configmaps", ns, "a")
    fn(o)
    t:update(o)
  end

  it("pass an update when a named field, the labels or the annotations change", function()
    t:create(cm("c1", "a", { v = "0", other = "0" }))
    local seen = watch("c1", { fields = { "data.v" }, labels_changed = true })
    t:eventually(function() return #seen == 1 end)
    change("c1", function(o) o.data.other = "1" end)
    t:settle()
    change("c1", function(o) o.metadata.annotations = { a = "1" } end)
    t:settle()
    assert.equal(1, #seen)
    change("c1", function(o) o.data.v = "2" end)
    t:eventually(function() return #seen == 2 end)
    change("c1", function(o) o.metadata.labels = { l = "1" } end)
    t:eventually(function() return #seen == 3 end)
    t:settle()
    assert.same({ "0", "2", "2" }, seen)
  end)

  it("annotations_changed passes annotation changes only", function()
    t:create(cm("c2", "a", { v = "0" }))
    local seen = watch("c2", { annotations_changed = true })
    t:eventually(function() return #seen == 1 end)
    change("c2", function(o) o.data.v = "1" end)
    t:settle()
    assert.equal(1, #seen)
    change("c2", function(o) o.metadata.annotations = { a = "1" } end)
    t:eventually(function() return #seen == 2 end)
    t:settle()
    assert.same({ "0", "1" }, seen)
  end)

  it("reject bad ones, naming them", function()
    local r = function() end
    raises('kube.controller: predicates.labels_changed must be a boolean, got string "yes"',
      function() kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                                  predicates = { labels_changed = "yes" } } end)
    raises('kube.controller: predicates.fields[2] must be a dotted path ("spec.replicas"),'
      .. ' got string "spec..x"', function()
        kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                         predicates = { fields = { "spec.a", "spec..x" } } } end)
  end)
end)

describe("timers", function()
  setup(function() t = testing.start{ namespaces = { "t1", "t2", "t3" }, controllers = QUIET } end)
  teardown(function() t:stop() end)

  it("run for each cached object while it exists, and stop at its deletion", function()
    local runs, idle_runs = {}, 0
    t:create(cm("t1", "a", { v = "1" }))
    t:create(cm("t1", "b", { v = "2" }))
    kube.controller{ name = "timers-t1", watches = { "v1", "ConfigMap", { namespace = "t1" } },
      reconcile = function() end,
      timers = {
        { every = 0.05, fn = function(obj, ctx)
          assert.equal(ctx.key, obj.metadata.namespace .. "/" .. obj.metadata.name)
          runs[ctx.key] = (runs[ctx.key] or 0) + 1
        end },
        -- never quiet for an hour: never runs
        { every = 0.05, idle = 3600, fn = function() idle_runs = idle_runs + 1 end },
      } }
    t:eventually(function() return (runs["t1/a"] or 0) >= 3 and (runs["t1/b"] or 0) >= 3 end)
    t:delete("v1", "configmaps", "t1", "a")
    t:eventually(function() return t:list("v1", "configmaps", "t1")[2] == nil end)
    kube.sleep(0.2) -- the deletion reaches the cache; a run that had begun ends
    local after, b = runs["t1/a"], runs["t1/b"]
    kube.sleep(0.3)
    assert.equal(after, runs["t1/a"])
    assert.is_true(runs["t1/b"] > b)
    assert.equal(0, idle_runs)
  end)

  it("runs with idle once the object has not changed for that long", function()
    local runs = 0
    t:create(cm("t2", "a", { v = "1" }))
    kube.controller{ name = "timers-t2", watches = { "v1", "ConfigMap", { namespace = "t2" } },
      reconcile = function() end,
      timers = { { every = 3600, idle = 0.5, fn = function() runs = runs + 1 end } } }
    -- changed every 0.1 s for 1 s: never idle for 0.5 s
    for i = 1, 10 do
      local o = t:get("v1", "configmaps", "t2", "a")
      o.data.v = tostring(i)
      t:update(o)
      kube.sleep(0.1)
    end
    assert.equal(0, runs)
    t:eventually(function() return runs == 1 end)
  end)

  it("never runs while a reconcile of the same object does", function()
    local reconciling, overlaps, timer_runs = false, 0, 0
    t:create(cm("t3", "a", { v = "1" }))
    kube.controller{ name = "timers-t3", watches = { "v1", "ConfigMap", { namespace = "t3" } },
      reconcile = function()
        reconciling = true
        kube.sleep(0.2)
        reconciling = false
        return kube.requeue_after(0.01)
      end,
      timers = { { every = 0.01, fn = function()
        if reconciling then overlaps = overlaps + 1 end
        timer_runs = timer_runs + 1
        kube.sleep(0.05)
        if reconciling then overlaps = overlaps + 1 end
      end } } }
    t:eventually(function() return timer_runs >= 3 end)
    t:delete("v1", "configmaps", "t3", "a")
    assert.equal(0, overlaps)
  end)

  it("rejects bad ones, naming them", function()
    local r = function() end
    raises('kube.controller: timers[1].every must be a positive number of seconds, got string "1"',
      function() kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                                  timers = { { every = "1", fn = r } } } end)
    raises('unknown key "evry" in kube.controller{} timers[1]; did you mean "every"?',
      function() kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                                  timers = { { evry = 1, fn = r } } } end)
    raises('kube.controller: timers[1].fn must be a function, got nil',
      function() kube.controller{ name = "x", watches = { "v1", "Pod" }, reconcile = r,
                                  timers = { { every = 1 } } } end)
  end)
end)
