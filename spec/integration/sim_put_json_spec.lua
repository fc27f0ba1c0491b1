-- The simulator store's path for objects given as JSON bytes
-- (Store:put_json, the writer of bench/sim and bench/compare): what a
-- client reads back through GET, list and watch is the object as given,
-- selectors see it, and what cannot be stored is refused by name.
local kube = require "kubelua"
local httpd = require "kubelua.httpd"
local json = require "kubelua.json"
local support = require "spec.support"

local sim, store, pods

local eventually = support.eventually

-- Pod `name` in namespace pj as JSON bytes, with a label app=<app>.
local function pod(name, app, rv, extra)
  return httpd.join { '{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"app":"', app,
    '"},"name":"', name, '","namespace":"pj","resourceVersion":"', tostring(rv),
    '","uid":"u-', name, '"},"spec":{"containers":[{"image":"x","name":"c"}],"volumes":[]}',
    extra or "", "}" }
end

local function put(name, app, etype, extra)
  local prev = pods.objects["pj/" .. name]
  return store:put_json(pods, pod(name, app, store:next_rv(), extra), etype, prev)
end

local function raises(pattern, fn)
  local ok, err = pcall(fn)
  assert.is_false(ok)
  assert.matches(pattern, err)
end

describe("Store:put_json", function()
  setup(function()
    sim = kube.start_sim()
    store = sim.store
    pods = store:resource("v1", "pods")
    assert(kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = "pj" } })
  end)

  it("serves the object as given through GET, list and an informer's watch", function()
    local all, web = {}, {}
    local inf = kube.informer("v1", "pods", { namespace = "pj" })
    local sel = kube.informer("v1", "pods", { namespace = "pj", label_selector = "app=web" })
    inf:add_handler{ name = "all",
      add = function(ev) all[#all + 1] = "add " .. ev.key end,
      update = function(ev) all[#all + 1] = "update " .. ev.key .. " " .. ev.object.metadata.labels.app end,
      delete = function(ev) all[#all + 1] = "delete " .. ev.key end }
    sel:add_handler{ name = "web",
      add = function(ev) web[#web + 1] = "add " .. ev.key end,
      update = function(ev) web[#web + 1] = "update " .. ev.key end,
      delete = function(ev) web[#web + 1] = "delete " .. ev.key .. " " .. ev.object.metadata.labels.app end }
    assert.is_true(kube.wait_for_sync(inf, 5))
    assert.is_true(kube.wait_for_sync(sel, 5))

    local e = put("a", "web", "ADDED")
    assert.equal("pj/a", e.key)
    assert.equal(store.rv, e.rv)
    local want = json.decode(pod("a", "web", e.rv))
    -- the table is decoded when asked for, and is the object as given
    assert.same(want, e.obj)
    assert.same(want, assert(kube.get("v1", "pods", "pj", "a")))
    local list = assert(kube.list("v1", "pods", { namespace = "pj" }))
    assert.equal(1, #list.items)
    assert.same(want.spec, list.items[1].spec)
    assert.is_true(json.is_array(list.items[1].spec.volumes))
    assert.is_true(eventually(function() return #all == 1 and #web == 1 end))
    assert.same(want, inf:get("pj/a"))

    put("a", "web", "MODIFIED", ',"status":{"phase":"Running"}')
    put("a", "db", "MODIFIED") -- leaves the selector: DELETED with the old labels
    put("b", "db", "ADDED")
    put("b", "db", "DELETED")
    assert.is_true(eventually(function() return #all == 5 and #web == 3 end))
    assert.same({ "add pj/a", "update pj/a web", "update pj/a db", "add pj/b", "delete pj/b" }, all)
    assert.same({ "add pj/a", "update pj/a", "delete pj/a web" }, web)
    assert.equal("db", inf:get("pj/a").metadata.labels.app)
    assert.is_nil(inf:get("pj/b"))
    assert.equal(1, pods.count)
    inf:stop()
    sel:stop()
  end)

  it("refuses JSON that is not one object, a missing name, or a made-up resourceVersion", function()
    raises("put_json: json: byte 1: ", function()
      store:put_json(pods, "{,}", "ADDED")
    end)
    raises("put_json: the object has no metadata.name$", function()
      store:put_json(pods, '{"metadata":{"namespace":"pj","resourceVersion":"1"}}', "ADDED")
    end)
    raises("put_json: metadata.resourceVersion must come from next_rv$", function()
      store:put_json(pods, pod("c", "x", store.rv + 1), "ADDED")
    end)
    raises("put_json: metadata.resourceVersion must come from next_rv$", function()
      store:put_json(pods, '{"metadata":{"name":"c","namespace":"pj"}}', "ADDED")
    end)
    raises("put_json: events must be stored from tables %(put%)$", function()
      store:put_json(store:resource("v1", "events"), pod("c", "x", store:next_rv()), "ADDED")
    end)
    assert.is_nil(pods.objects["pj/c"])
  end)

  it("files a version under the key of the object it holds, whatever prev is", function()
    local a = put("ka", "web", "ADDED")
    -- prev given as another object's entry: its key must not be taken
    local b = store:put_json(pods, pod("kb", "web", store:next_rv()), "ADDED", a)
    assert.same({ "pj/kb", "kb", "pj" }, { b.key, b.name, b.ns })
    local a2 = put("ka", "db", "MODIFIED")
    assert.same({ "pj/ka", "ka", "pj" }, { a2.key, a2.name, a2.ns })
    assert.equal(a2, pods.objects["pj/ka"])
    assert.equal(b, pods.objects["pj/kb"])
    assert.equal("db", assert(kube.get("v1", "pods", "pj", "ka")).metadata.labels.app)
    put("ka", "db", "DELETED")
    put("kb", "web", "DELETED")
    assert.is_nil(pods.objects["pj/ka"])
    assert.is_nil(pods.objects["pj/kb"])
    assert.equal(1, pods.count) -- "a", from the first case
  end)
end)
