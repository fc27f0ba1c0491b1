-- kube.local_informer: the store, its indices, the DeltaFIFO and the shared
-- processor as Lua sees them (CLIENTGO.md 3, 4, 7, 9, 10; cases T-01..T-13
-- and T-27..T-34 where Lua can observe them), the feeding side (watch bytes,
-- list bodies, single objects), exact errors, and the round trip of every
-- apiserver fixture object through the cache.
local kube = require "kubelua"
local json = kube.json
local support = require "spec.support"
local raises = support.raises

local FIXTURES = "spec/fixtures/json/apiserver/"

-- Lets the loop deliver everything queued.
local function drain(inf)
  local rounds = 0
  while inf:pending() > 0 do
    kube.sleep(0)
    rounds = rounds + 1
    assert(rounds < 100000, "the informer does not drain")
  end
end

local function pod(ns, name, rv, labels, extra)
  local o = { apiVersion = "v1", kind = "Pod",
              metadata = { name = name, namespace = ns, resourceVersion = rv,
                           labels = labels } }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function rv_of(o)
  return o and o.metadata.resourceVersion or "-"
end

-- One line per event: "add ns/a 1 initial", "update ns/a 1>2 sync",
-- "delete ns/b 1 tombstone".
local function line(ev)
  local s = ev.type .. " " .. ev.key .. " "
  if ev.type == "update" then s = s .. rv_of(ev.old) .. ">" end
  s = s .. rv_of(ev.object)
  if ev.initial then s = s .. " initial" end
  if ev.tombstone then s = s .. " tombstone" end
  if ev.sync then s = s .. " sync" end
  return s
end

-- A handler recording every event as a line; returns the lines and the
-- handle.
local function recorder(inf, opts)
  local got = {}
  local function rec(ev) got[#got + 1] = line(ev) end
  opts = opts or {}
  local h = inf:add_handler{ add = rec, update = rec, delete = rec,
                             name = opts.name, resync = opts.resync }
  return got, h
end

local function watch(kind, obj)
  return json.encode({ type = kind, object = obj }) .. "\n"
end

local function sorted(t)
  local c = {}
  for i = 1, #t do c[i] = t[i] end
  table.sort(c)
  return c
end

local function keys_of(objs)
  local ks = {}
  for i = 1, #objs do
    local m = objs[i].metadata
    ks[i] = (m.namespace and m.namespace ~= "" and m.namespace .. "/" or "") .. m.name
  end
  return sorted(ks)
end

-- A copy of a decoded JSON value in which arrays, objects and null can be
-- told apart by assert.same (which ignores metatables).
local function tagged(v)
  if v == json.null then return { ["<null>"] = true } end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = tagged(x) end
  if json.is_array(v) then return { ["<array>"] = out } end
  return out
end

local read = support.read

-- Runs `source` with `kubelua run` inside a task; returns its output.
local function run_logged(source)
  local status, out = support.run_script(
    "local kube = require 'kubelua'\nkube.spawn(function()\n" .. source
    .. "\nkube.stop()\nend)\n")
  assert.equal(0, status, out)
  return out
end

describe("kube.local_informer", function()
  describe("keys", function()
    it("keys namespaced objects ns/name and cluster-scoped ones by name", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      assert(inf:add(pod("demo", "a", "1")))
      assert(inf:add({ apiVersion = "v1", kind = "Namespace",
                       metadata = { name = "demo", resourceVersion = "2" } }))
      assert(inf:add(pod("", "c", "3"))) -- an empty namespace is cluster scope
      drain(inf)
      assert.same({ "add demo/a 1", "add demo 2", "add c 3" }, got)
      assert.same({ "c", "demo", "demo/a" }, sorted(inf:list_keys()))
      assert.equal("a", inf:get("demo/a").metadata.name)
      assert.equal("a", inf:get("demo", "a").metadata.name)
      assert.equal("demo", inf:get("demo").metadata.name)
      assert.equal("demo", inf:get("", "demo").metadata.name)
      assert.is_nil(inf:get("demo/b"))
      assert.is_nil(inf:get("other", "a"))
      assert.equal(3, inf:len())
    end)
  end)

  describe("events", function()
    it("delivers add, update and delete with ev.object and ev.old", function()
      local inf = kube.local_informer{ name = "ev" }
      local evs = {}
      local function rec(ev) evs[#evs + 1] = ev end
      inf:add_handler{ add = rec, update = rec, delete = rec }
      assert(inf:feed(watch("ADDED", pod("ns", "a", "1", { app = "x" }))))
      drain(inf)
      assert(inf:feed(watch("MODIFIED", pod("ns", "a", "2", { app = "y" }))))
      drain(inf)
      assert(inf:feed(watch("DELETED", pod("ns", "a", "3", { app = "z" }))))
      drain(inf)
      assert.equal(3, #evs)
      local add, upd, del = evs[1], evs[2], evs[3]
      assert.equal("add", add.type)
      assert.equal("ns/a", add.key)
      assert.equal("x", add.object.metadata.labels.app)
      assert.is_nil(add.old)
      assert.is_nil(add.initial)
      assert.equal("update", upd.type)
      assert.equal("x", upd.old.metadata.labels.app)
      assert.equal("y", upd.object.metadata.labels.app)
      assert.is_nil(upd.sync)
      -- A watch DELETED carries the final state from the event.
      assert.equal("delete", del.type)
      assert.equal("z", del.object.metadata.labels.app)
      assert.equal("3", del.object.metadata.resourceVersion)
      assert.is_nil(del.tombstone)
      assert.is_nil(del.old)
      assert.equal(0, inf:len())
      assert.equal("3", inf:last_sync_resource_version())
    end)

    it("decodes ev.object once per event and never aliases the cache", function()
      local inf = kube.local_informer()
      local seen = {}
      inf:on_add(function(ev)
        local o = ev.object
        assert.equal(o, ev.object) -- decoded once, then kept in the event
        o.metadata.labels.app = "changed"
        o.spec = { nodeName = "n1" }
        seen[#seen + 1] = o
      end)
      inf:on_add(function(ev)
        -- The first handler's changes are not visible to the second.
        seen[#seen + 1] = ev.object.metadata.labels.app
      end)
      inf:add(pod("ns", "a", "1", { app = "x" }))
      drain(inf)
      assert.equal("x", seen[2])
      local got = inf:get("ns/a")
      assert.equal("x", got.metadata.labels.app)
      assert.is_nil(got.spec)
      got.metadata.labels.app = "again"
      inf:list()[1].metadata.name = "renamed"
      inf:by_index("namespace", "ns")[1].metadata.labels.app = "by-index"
      assert.equal("x", inf:get("ns/a").metadata.labels.app)
      assert.equal("a", inf:get("ns/a").metadata.name)
      assert.are_not.equal(inf:get("ns/a"), inf:get("ns/a"))
      assert.same({ "ns/a" }, inf:index_keys("namespace", "ns"))
    end)

    it("turns an Added delta for a cached key into an update (9.2)", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      inf:add(pod("ns", "a", "1"))
      drain(inf)
      inf:add(pod("ns", "a", "2"))
      inf:update(pod("ns", "b", "3")) -- Updated for an unknown key: an add
      drain(inf)
      assert.same({ "add ns/a 1", "update ns/a 1>2", "add ns/b 3" }, got)
    end)

    it("keeps every delta of a key together, in its first position (T-01)", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      inf:add(pod("ns", "a", "1"))
      inf:add(pod("ns", "b", "1"))
      inf:update(pod("ns", "a", "2"))
      assert.equal(2, inf:pending()) -- two keys queued
      drain(inf)
      assert.same({ "add ns/a 1", "update ns/a 1>2", "add ns/b 1" }, got)
    end)

    it("collapses two deletes in a row into the older one (T-02)", function()
      local inf = kube.local_informer()
      inf:add(pod("ns", "a", "1"))
      drain(inf)
      local got = recorder(inf)
      drain(inf)
      inf:delete(pod("ns", "a", "2"))
      inf:delete(pod("ns", "a", "3"))
      drain(inf)
      assert.same({ "add ns/a 1 initial", "delete ns/a 2" }, got)
    end)

    it("lets a real delete replace a queued tombstone (T-03)", function()
      local inf = kube.local_informer()
      inf:add(pod("ns", "a", "1"))
      drain(inf)
      local got = recorder(inf)
      drain(inf)
      assert(inf:replace({}, "5")) -- a is known but not listed: a tombstone
      inf:delete(pod("ns", "a", "4"))
      drain(inf)
      assert.same({ "add ns/a 1 initial", "delete ns/a 4" }, got)
    end)

    it("ignores the delete of a key neither cached nor queued (T-04)", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      assert(inf:delete(pod("ns", "x", "1")))
      assert.equal(0, inf:pending())
      drain(inf)
      assert.same({}, got)
      -- Queued but not yet cached: the delete follows the add.
      inf:add(pod("ns", "y", "1"))
      inf:delete(pod("ns", "y", "2"))
      drain(inf)
      assert.same({ "add ns/y 1", "delete ns/y 2" }, got)
      assert.equal(0, inf:len())
    end)
  end)

  describe("replace", function()
    it("marks the first list's adds initial and syncs after they are popped (T-07)", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      assert.is_false(inf:has_synced())
      assert(inf:replace({ pod("ns", "x", "1"), pod("ns", "y", "2") }, "10"))
      assert.is_false(inf:has_synced())
      assert.equal(2, inf:pending())
      assert.equal("10", inf:last_sync_resource_version())
      drain(inf)
      assert.is_true(inf:has_synced())
      inf:add(pod("ns", "z", "3"))
      drain(inf)
      assert.same({ "add ns/x 1 initial", "add ns/y 2 initial", "add ns/z 3" }, got)
    end)

    it("drains a large first list in batches, in order, all initial", function()
      local inf = kube.local_informer()
      local list = {}
      for i = 1, 3000 do list[i] = pod("ns", string.format("p%04d", i), tostring(i)) end
      local keys, synced_seen, h = {}, {}, nil
      h = inf:on_add(function(ev)
        assert.is_true(ev.initial)
        keys[#keys + 1] = ev.key
        synced_seen[inf:has_synced()] = true
        assert.is_false(h:has_synced())
      end)
      assert(inf:replace(list, "3000"))
      assert.equal(3000, inf:pending())
      drain(inf)
      assert.equal(3000, #keys)
      for i = 1, 3000 do assert.equal(string.format("ns/p%04d", i), keys[i]) end
      assert.same({ [false] = true, [true] = true }, synced_seen)
      assert.is_true(h:has_synced())
      assert.equal(3000, inf:len())
      assert.equal(3000, #inf:list("ns"))
    end)

    it("syncs at once on an empty first list (T-08)", function()
      local inf = kube.local_informer()
      assert(inf:replace({}, "5"))
      assert.is_true(inf:has_synced())
      assert.equal("5", inf:last_sync_resource_version())
    end)

    it("is synced by an add that came before any list", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      inf:add(pod("ns", "a", "1"))
      assert.is_true(inf:has_synced())
      inf:replace({ pod("ns", "b", "1") }, "2")
      drain(inf)
      -- Not the first list any more: nothing is initial.
      -- a is still queued, so its tombstone joins its deltas.
      assert.same({ "add ns/a 1", "delete ns/a 1 tombstone", "add ns/b 1" }, got)
    end)

    it("emits updates, adds and tombstones with the cached state (T-05, T-33)", function()
      local inf = kube.local_informer()
      local evs = {}
      local function rec(ev) evs[#evs + 1] = ev end
      inf:add_handler{ add = rec, update = rec, delete = rec }
      inf:replace({ pod("ns", "a", "1"), pod("ns", "b", "1", { app = "cached" }),
                    pod("ns", "d", "1") }, "1")
      drain(inf)
      evs = {}
      local late = recorder(inf) -- joins late: three synthetic adds first
      drain(inf)
      -- a changed, b vanished, c is new, d is unchanged.
      inf:replace({ pod("ns", "a", "2"), pod("ns", "c", "1"), pod("ns", "d", "1") }, "7")
      drain(inf)
      local lines = {}
      for i = 1, #evs do lines[i] = line(evs[i]) end
      assert.same({ "update ns/a 1>2", "add ns/c 1", "update ns/d 1>1 sync",
                    "delete ns/b 1 tombstone" }, lines)
      assert.same(lines, { late[4], late[5], late[6], late[7] })
      assert.equal(7, #late)
      -- The tombstone carries the last state the cache knew.
      assert.equal("cached", evs[4].object.metadata.labels.app)
      assert.same({ "ns/a", "ns/c", "ns/d" }, sorted(inf:list_keys()))
      assert.equal("7", inf:last_sync_resource_version())
    end)

    it("gives a queued key that vanished a tombstone with its newest object", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      inf:replace({}, "1")
      inf:add(pod("ns", "a", "1"))
      inf:update(pod("ns", "a", "2"))
      inf:replace({ pod("ns", "b", "1") }, "3")
      drain(inf)
      assert.same({ "add ns/a 1", "update ns/a 1>2", "delete ns/a 2 tombstone",
                    "add ns/b 1" }, got)
    end)

    it("takes list bodies and injects apiVersion and kind into the items", function()
      local inf = kube.local_informer{ api_version = "v1", kind = "ConfigMap" }
      local body = json.decode(read(FIXTURES .. "18-cm-list.json")).response.body
      local text = json.encode(body)
      assert(inf:replace(text))
      drain(inf)
      assert.equal(body.metadata.resourceVersion, inf:last_sync_resource_version())
      assert.equal(#body.items, inf:len())
      for _, item in ipairs(body.items) do
        local got = inf:get(item.metadata.namespace, item.metadata.name)
        assert.equal("v1", got.apiVersion)
        assert.equal("ConfigMap", got.kind)
        assert.is_nil(got.metadata.managedFields)
        item.apiVersion, item.kind = "v1", "ConfigMap"
        item.metadata.managedFields = nil
        assert.same(tagged(item), tagged(got))
      end
      -- Without the options the items stay as listed.
      local bare = kube.local_informer()
      assert(bare:replace(text))
      drain(bare)
      assert.is_nil(bare:list()[1].kind)
    end)

    it("takes objects as tables or as JSON text", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      assert(inf:replace({ '{"metadata":{"name":"a","namespace":"ns","resourceVersion":"1"}}',
                           pod("ns", "b", "1") }, "2"))
      assert(inf:add('{"metadata":{"name":"c","namespace":"ns","resourceVersion":"3"}}'))
      assert(inf:delete('{"metadata":{"name":"a","namespace":"ns","resourceVersion":"4"}}'))
      drain(inf)
      assert.same({ "add ns/a 1 initial", "delete ns/a 4", "add ns/b 1 initial", "add ns/c 3" },
                  got)
    end)

    it("rejects malformed list bodies and keeps the cache", function()
      local inf = kube.local_informer()
      inf:add(pod("ns", "a", "1"))
      drain(inf)
      assert.same({ nil, "informer:replace: byte 35: unexpected end of stream inside "
                    .. "the list object that starts at byte 0" },
                  { inf:replace('{"items":[{"metadata":{"name":"z"}}') })
      assert.same({ nil, "informer:replace: item 2 has no name" },
                  { inf:replace('{"items":[{"metadata":{"name":"z"}},{"metadata":{}}],'
                                .. '"metadata":{"resourceVersion":"9"}}') })
      assert.same({ nil, "informer:replace: item 2 is not an object" },
                  { inf:replace({ pod("ns", "b", "1"), 5 }, "3") })
      assert.same({ nil, "informer:replace: item 1 has no name" },
                  { inf:replace({ { metadata = {} } }, "3") })
      assert.equal(0, inf:pending())
      assert.same({ "ns/a" }, inf:list_keys())
      assert(inf:replace('{"items":[{"metadata":{"name":"a","namespace":"ns",'
                         .. '"resourceVersion":"1"}}]}')) -- no list metadata at all
      assert.equal("", inf:last_sync_resource_version())
      drain(inf)
      assert.same({ "ns/a" }, inf:list_keys())
    end)
  end)

  describe("resync", function()
    it("sends sync updates from the cache to every handler by hand", function()
      local inf = kube.local_informer()
      local evs = {}
      inf:on_update(function(ev) evs[#evs + 1] = ev end)
      local got = recorder(inf)
      inf:replace({ pod("ns", "a", "1", { app = "x" }), pod("ns", "b", "1") }, "1")
      drain(inf)
      inf:resync()
      assert.equal(2, inf:pending())
      drain(inf)
      assert.same({ "add ns/a 1 initial", "add ns/b 1 initial" }, { got[1], got[2] })
      assert.same({ "update ns/a 1>1 sync", "update ns/b 1>1 sync" }, sorted({ got[3], got[4] }))
      assert.equal(4, #got)
      assert.equal(2, #evs)
      assert.is_true(evs[1].sync)
      assert.same(tagged(evs[1].old), tagged(evs[1].object))
    end)

    it("skips keys with pending deltas (T-09)", function()
      local inf = kube.local_informer()
      inf:replace({ pod("ns", "a", "1"), pod("ns", "b", "1") }, "1")
      drain(inf)
      local got = recorder(inf)
      drain(inf)
      for i = #got, 1, -1 do got[i] = nil end
      inf:update(pod("ns", "a", "2"))
      inf:resync()
      drain(inf)
      assert.same({ "update ns/a 1>2", "update ns/b 1>1 sync" }, got)
    end)

    it("sends no-op relist updates to every handler without resync periods (T-27)", function()
      local inf = kube.local_informer()
      local h1 = recorder(inf, { resync = 0 })
      local h2 = recorder(inf)
      inf:replace({ pod("ns", "x", "1") }, "1")
      drain(inf)
      inf:replace({ pod("ns", "x", "1") }, "1")
      drain(inf)
      local want = { "add ns/x 1 initial", "update ns/x 1>1 sync" }
      assert.same(want, h1)
      assert.same(want, h2)
    end)

    it("sends resyncs and same-RV updates only to handlers due (T-27, T-28)", function()
      local inf = kube.local_informer{ name = "t27", resync = 1 }
      local h0 = recorder(inf, { resync = 0 })
      local h1 = recorder(inf)
      inf:replace({ pod("ns", "x", "1") }, "1")
      drain(inf)
      local deadline = kube.monotonic() + 5
      while #h1 < 2 and kube.monotonic() < deadline do kube.sleep(0.02) end
      drain(inf)
      assert.same({ "add ns/x 1 initial", "update ns/x 1>1 sync" }, h1)
      assert.same({ "add ns/x 1 initial" }, h0)
      -- A no-op relist before the next check: only the handler marked due.
      inf:replace({ pod("ns", "x", "1") }, "1")
      drain(inf)
      assert.equal("update ns/x 1>1 sync", h1[3])
      assert.same({ "add ns/x 1 initial" }, h0)
      -- A changed resourceVersion goes to everyone (T-28).
      inf:update(pod("ns", "x", "2"))
      drain(inf)
      assert.equal("update ns/x 1>2", h0[2])
      assert.equal("update ns/x 1>2", h1[#h1])
    end)
  end)

  describe("resync periods", function()
    it("adjusts handler periods as client-go does, with its warnings (10.4)", function()
      local out = run_logged([[
        local a = kube.local_informer{ name = "r0" }
        a:add_handler{ add = function() end, resync = 30 }
        local b = kube.local_informer{ name = "r2", resync = 2 }
        b:add_handler{ add = function() end, resync = 0.5 }
        b:add_handler{ add = function() end, resync = 1.5 }
        b:add_handler{ add = function() end, resync = 0 }
        b:add_handler{ add = function() end, resync = 3 }
        b:add_handler{ add = function() end }]])
      local warnings = {}
      for l in out:gmatch("WARN  ([^\n]*)") do warnings[#warnings + 1] = l end
      assert.same({
        "informer r0: The specified resyncPeriod 30s is invalid because this shared "
          .. "informer doesn't support resyncing",
        "informer r2: resyncPeriod 0.5s is too small. Changing it to the minimum allowed "
          .. "value of 1s",
        "informer r2: resyncPeriod 1s is smaller than resyncCheckPeriod 2s and the informer "
          .. "has already started. Changing it to 2s",
        "informer r2: resyncPeriod 1.5s is smaller than resyncCheckPeriod 2s and the "
          .. "informer has already started. Changing it to 2s",
      }, warnings)
    end)
  end)

  describe("handlers", function()
    it("gives a late handler synthetic initial adds before live events (T-29)", function()
      local inf = kube.local_informer()
      local old = recorder(inf)
      inf:replace({ pod("ns", "a", "1"), pod("ns", "b", "1") }, "1")
      drain(inf)
      local late, h3 = recorder(inf)
      assert.is_false(h3:has_synced())
      assert.equal(2, inf:pending())
      inf:update(pod("ns", "a", "2"))
      drain(inf)
      assert.is_true(h3:has_synced())
      assert.same({ "add ns/a 1 initial", "add ns/b 1 initial" }, sorted({ late[1], late[2] }))
      assert.equal("update ns/a 1>2", late[3])
      assert.equal(3, #late)
      assert.same({ "add ns/a 1 initial", "add ns/b 1 initial", "update ns/a 1>2" }, old)
    end)

    it("has_synced of a handle waits for its initial adds to return (T-30)", function()
      local inf = kube.local_informer()
      local h
      local seen = {}
      h = inf:on_add(function(ev)
        seen[#seen + 1] = { ev.key, inf:has_synced(), h:has_synced() }
      end)
      assert.is_false(h:has_synced())
      inf:replace({ pod("ns", "a", "1"), pod("ns", "b", "1"), pod("ns", "c", "1") }, "1")
      drain(inf)
      assert.same({ { "ns/a", true, false }, { "ns/b", true, false },
                    { "ns/c", true, false } }, seen)
      assert.is_true(h:has_synced())
      assert.is_true(inf:has_synced())
    end)

    it("has_synced of a handle stays false before the first list", function()
      local inf = kube.local_informer()
      local _, h = recorder(inf)
      drain(inf)
      assert.is_false(h:has_synced())
      inf:replace({}, "1")
      assert.is_true(h:has_synced())
      assert.is_true(h:remove())
      assert.is_false(h:has_synced())
    end)

    it("calls each handler in order and isolates a failing one (T-31)", function()
      local inf = kube.local_informer{ name = "t31" }
      local fails, order, busy = 0, {}, false
      inf:on_update(function(ev)
        fails = fails + 1
        if ev.object.metadata.resourceVersion:find("0$") then error("boom") end
      end, "bad")
      inf:on_update(function(ev)
        assert(not busy)
        busy = true
        order[#order + 1] = ev.object.metadata.resourceVersion
        busy = false
      end, "good")
      inf:add(pod("ns", "k", "0"))
      drain(inf)
      local stream = {}
      for i = 1, 100 do stream[i] = watch("MODIFIED", pod("ns", "k", tostring(i))) end
      assert(inf:feed(table.concat(stream)))
      drain(inf)
      assert.equal(100, fails)
      assert.equal(100, #order)
      for i = 1, 100 do assert.equal(tostring(i), order[i]) end
      assert.equal("100", inf:get("ns/k").metadata.resourceVersion)
    end)

    it("logs a failing handler with its informer, name, key and traceback", function()
      local out = run_logged([[
        local inf = kube.local_informer{ name = "cms" }
        inf:on_add(function() error("boom") end, "bad")
        local ok = 0
        inf:on_add(function() ok = ok + 1 end, "good")
        inf:add({ metadata = { name = "a", namespace = "ns" } })
        while inf:pending() > 0 do kube.sleep(0) end
        print("ok=" .. ok .. " len=" .. inf:len())]])
      assert.truthy(out:find("ok=1 len=1", 1, true), out)
      local pattern = "ERROR handler failed: [^\n]+:%d+: boom informer=cms handler=bad key=ns/a\n"
        .. "    stack traceback:\n        "
      assert.truthy(out:find(pattern), out)
    end)

    it("warns about a handler that holds the loop for 100 ms or more", function()
      local out = run_logged([[
        local inf = kube.local_informer{ name = "slow" }
        inf:on_add(function()
          local t = os.clock() + 0.15 -- CPU time: the wall clock goes as fast
          repeat until os.clock() >= t
        end, "busy")
        inf:on_add(function() end, "quick")
        inf:add({ metadata = { name = "a", namespace = "ns" } })
        while inf:pending() > 0 do kube.sleep(0) end]])
      assert.truthy(out:find("WARN  slow handler: %d+%.%d%d%ds holding the loop informer=slow "
                             .. "handler=busy key=ns/a\n"), out)
      assert.falsy(out:find("handler=quick", 1, true), out)
    end)

    it("drops what a removed handler had pending (T-32)", function()
      local inf = kube.local_informer()
      local h2
      local first, second = {}, {}
      local h1 = inf:on_add(function(ev)
        first[#first + 1] = ev.key
        if #first == 1 then
          assert.is_true(h2:remove())
          assert.is_false(h2:remove())
        end
      end)
      h2 = inf:on_add(function(ev) second[#second + 1] = ev.key end)
      for i = 1, 10 do inf:add(pod("ns", "p" .. i, "1")) end
      drain(inf)
      assert.equal(10, #first)
      assert.same({}, second)
      assert.is_false(h2:remove())
      -- A handler may remove itself; nothing reaches it afterwards.
      local n = 0
      local h3
      h3 = inf:on_update(function()
        n = n + 1
        h3:remove()
      end)
      for i = 1, 10 do inf:update(pod("ns", "p" .. i, "2")) end
      drain(inf)
      assert.equal(1, n)
      assert.is_true(h1:remove())
      inf:add(pod("ns", "q", "1"))
      drain(inf)
      assert.equal(10, #first)
    end)

    it("dispatches add_handler's functions by type and skips missing ones", function()
      local inf = kube.local_informer()
      local got = {}
      inf:add_handler{ update = function(ev) got[#got + 1] = line(ev) end }
      inf:on_delete(function(ev) got[#got + 1] = line(ev) end, "deletes")
      inf:add(pod("ns", "a", "1"))
      inf:update(pod("ns", "a", "2"))
      inf:delete(pod("ns", "a", "2"))
      drain(inf)
      assert.same({ "update ns/a 1>2", "delete ns/a 2" }, got)
    end)

    it("filters events as FilteringResourceEventHandler does (T-34)", function()
      local inf = kube.local_informer()
      local got, seen = {}, {}
      local function rec(ev) got[#got + 1] = line(ev) end
      inf:add_handler{
        add = rec, update = rec, delete = rec,
        filter = function(o)
          seen[#seen + 1] = o and o.metadata.resourceVersion or "nil"
          return o ~= nil and o.metadata.labels ~= nil and o.metadata.labels.app == "x"
        end,
      }
      inf:add(pod("ns", "a", "1", { app = "y" }))   -- filtered out
      drain(inf)
      inf:update(pod("ns", "a", "2", { app = "x" })) -- y -> x: an add, not initial
      drain(inf)
      inf:update(pod("ns", "a", "3", { app = "x" })) -- x -> x: an update
      drain(inf)
      inf:update(pod("ns", "a", "4", { app = "z" })) -- x -> z: a delete of the old
      drain(inf)
      inf:update(pod("ns", "a", "5", { app = "w" })) -- z -> w: nothing
      drain(inf)
      inf:delete(pod("ns", "a", "6", { app = "x" })) -- passes
      inf:add(pod("ns", "b", "1", { app = "x" }))
      drain(inf)
      assert(inf:replace({}, "9"))                  -- b's tombstone passes
      drain(inf)
      assert.same({ "add ns/a 2", "update ns/a 2>3", "delete ns/a 3", "delete ns/a 6",
                    "add ns/b 1", "delete ns/b 1 tombstone" }, got)
      assert.same({ "1", "2", "1", "3", "2", "4", "3", "5", "4", "6", "1", "1" }, seen)
      -- Only an update function: a transition to passing is an add, dropped.
      local inf2 = kube.local_informer()
      local ups = {}
      inf2:add_handler{ update = function(ev) ups[#ups + 1] = line(ev) end,
                        filter = function(o) return o.metadata.labels.app == "x" end }
      inf2:add(pod("ns", "a", "1", { app = "y" }))
      inf2:update(pod("ns", "a", "2", { app = "x" }))
      inf2:update(pod("ns", "a", "3", { app = "x" }))
      drain(inf2)
      assert.same({ "update ns/a 2>3" }, ups)
    end)

    it("lets handlers feed the informer, add handlers and read the cache", function()
      local inf = kube.local_informer()
      local got, late = {}, nil
      inf:on_add(function(ev)
        got[#got + 1] = ev.key
        assert.equal(ev.object.metadata.name, inf:get(ev.key).metadata.name)
        if ev.key == "ns/a" then
          assert(inf:add(pod("ns", "b", "1")))
          late = recorder(inf)
        end
      end)
      inf:add(pod("ns", "a", "1"))
      drain(inf)
      assert.same({ "ns/a", "ns/b" }, got)
      assert.same({ "add ns/a 1 initial", "add ns/b 1" }, late)
    end)

    it("keeps delivering when handlers drop the informer", function()
      local got = {}
      do
        local inf = kube.local_informer()
        inf:on_add(function(ev)
          got[#got + 1] = ev.key
          collectgarbage()
        end)
        for i = 1, 600 do inf:add(pod("ns", "p" .. i, "1")) end
      end
      kube.sleep(0.01)
      collectgarbage()
      -- Delivered, or dropped with the informer once collected; never a use
      -- after free (the batch in progress keeps it alive).
      assert.is_true(#got <= 600)
    end)
  end)

  describe("indexers", function()
    it("has the namespace index built in", function()
      local inf = kube.local_informer()
      inf:add(pod("a", "x", "1"))
      inf:add(pod("a", "y", "1"))
      inf:add(pod("b", "x", "1"))
      inf:add({ metadata = { name = "cluster" } })
      drain(inf)
      assert.same({ "", "a", "b" }, sorted(inf:index_values("namespace")))
      assert.same({ "a/x", "a/y" }, sorted(inf:index_keys("namespace", "a")))
      assert.same({ "a/x", "a/y" }, keys_of(inf:list("a")))
      assert.same({ "cluster" }, keys_of(inf:by_index("namespace", "")))
      -- "" lists every namespace (client-go's NamespaceAll).
      assert.same({ "a/x", "a/y", "b/x", "cluster" }, keys_of(inf:list("")))
      assert.same({ "a/x", "a/y", "b/x", "cluster" }, keys_of(inf:list()))
      assert.same({}, inf:list("none"))
      assert.is_true(json.is_array(inf:list("none")))
    end)

    it("maintains indices across updates and deletes (T-11)", function()
      local inf = kube.local_informer{ indexers = { by_label = { label = "app" } } }
      inf:add(pod("ns", "p1", "1", { app = "x" }))
      drain(inf)
      assert.same({ "ns/p1" }, inf:index_keys("by_label", "x"))
      inf:update(pod("ns", "p1", "2", { app = "y" }))
      drain(inf)
      assert.same({}, inf:index_keys("by_label", "x"))
      assert.same({ "y" }, inf:index_values("by_label"))
      assert.same({ "ns/p1" }, keys_of(inf:by_index("by_label", "y")))
      inf:delete(pod("ns", "p1", "2", { app = "y" }))
      drain(inf)
      assert.same({}, inf:index_values("by_label"))
      assert.same({}, inf:index_values("namespace"))
    end)

    it("indexes a populated cache when indexers are added (T-12)", function()
      local inf = kube.local_informer()
      inf:add(pod("ns", "a", "1", { app = "x" }))
      inf:add(pod("ns", "b", "1", { app = "y" }))
      drain(inf)
      inf:add_indexers{ app = { label = "app" },
                        names = function(o) return { o.metadata.name, "all" } end }
      assert.same({ "x", "y" }, sorted(inf:index_values("app")))
      assert.same({ "ns/a", "ns/b" }, sorted(inf:index_keys("names", "all")))
      raises("informer:add_indexers: indexer conflict: app", function()
        inf:add_indexers{ app = { label = "other" } }
      end)
      raises("informer:add_indexers: indexer conflict: namespace", function()
        inf:add_indexers{ namespace = "namespace" }
      end)
      raises("kube.local_informer: indexer conflict: namespace", function()
        kube.local_informer{ indexers = { namespace = "namespace" } }
      end)
    end)

    it("rebuilds indices on replace (T-13)", function()
      local inf = kube.local_informer{ indexers = { app = { label = "app" } } }
      inf:add(pod("ns", "a", "1", { app = "x" }))
      drain(inf)
      inf:replace({ pod("ns", "b", "1", { app = "y" }) }, "7")
      drain(inf)
      assert.same({ "ns/b" }, inf:list_keys())
      assert.same({ "y" }, inf:index_values("app"))
      assert.same({ "ns" }, inf:index_values("namespace"))
    end)

    it("has label and controller-owner built-ins", function()
      local inf = kube.local_informer{ indexers = { app = { label = "app" },
                                                    owner = "controller" } }
      local a = pod("ns", "a", "1", { app = "a" })
      a.metadata.ownerReferences = { { apiVersion = "apps/v1", kind = "ReplicaSet",
                                       name = "rs", uid = "u1", controller = true } }
      local b = pod("ns", "b", "1", { app = "b" })
      b.metadata.ownerReferences = { { apiVersion = "apps/v1", kind = "ReplicaSet",
                                       name = "rs2", uid = "u2" } } -- not a controller
      local c = pod("ns", "c", "1") -- no labels, no owners
      inf:add(a)
      inf:add(b)
      inf:add(c)
      drain(inf)
      assert.same({ "u1" }, inf:index_values("owner"))
      assert.same({ "ns/a" }, inf:index_keys("owner", "u1"))
      assert.same({ "a", "b" }, sorted(inf:index_values("app")))
      a.metadata.ownerReferences[1].uid = "u3"
      inf:update(a)
      drain(inf)
      assert.same({ "u3" }, inf:index_values("owner"))
    end)

    it("takes custom Lua indexers with several values, none, or duplicates", function()
      local inf = kube.local_informer{ indexers = {
        tags = function(o)
          local t = {}
          local tags = o.metadata.annotations and o.metadata.annotations.tags or ""
          for tag in tags:gmatch("[^,]+") do t[#t + 1] = tag end
          return t
        end,
        none = function() return nil end,
      } }
      inf:add(pod("ns", "a", "1"))
      local b = pod("ns", "b", "1")
      b.metadata.annotations = { tags = "x,y,x" }
      inf:add(b)
      drain(inf)
      assert.same({ "x", "y" }, sorted(inf:index_values("tags")))
      assert.same({ "ns/b" }, inf:index_keys("tags", "x"))
      assert.same({}, inf:index_values("none"))
      b.metadata.annotations.tags = "y,z"
      inf:update(b)
      drain(inf)
      assert.same({ "y", "z" }, sorted(inf:index_values("tags")))
      -- Many values, repeated (the sorted dedup), empty strings included.
      local many = {}
      for i = 1, 40 do many[#many + 1] = "v" .. (i % 20) end
      many[#many + 1] = ""
      many[#many + 1] = ""
      local c = pod("ns", "c", "1")
      local inf2 = kube.local_informer{ indexers = { many = function(o)
        return o.metadata.name == "c" and many or {}
      end } }
      inf2:add(c)
      inf2:add(b)
      drain(inf2)
      local want = { "" }
      for i = 0, 19 do want[#want + 1] = "v" .. i end
      assert.same(sorted(want), sorted(inf2:index_values("many")))
      assert.same({ "ns/c" }, inf2:index_keys("many", ""))
      inf2:delete(c)
      drain(inf2)
      assert.same({}, inf2:index_values("many"))
    end)

    it("keeps the last good state of a key whose index function fails", function()
      local inf = kube.local_informer{ name = "ix", indexers = {
        bad = function(o)
          if o.metadata.labels and o.metadata.labels.fail then error("nope") end
          return { o.metadata.name }
        end } }
      local got = recorder(inf)
      inf:add(pod("ns", "a", "1"))
      drain(inf)
      inf:update(pod("ns", "a", "2", { fail = "yes" }))
      inf:add(pod("ns", "b", "1", { fail = "yes" }))
      inf:add(pod("ns", "c", "1"))
      drain(inf)
      assert.same({ "add ns/a 1", "add ns/c 1" }, got)
      assert.same({ "ns/a", "ns/c" }, sorted(inf:list_keys()))
      assert.equal("1", inf:get("ns/a").metadata.resourceVersion)
      assert.same({ "a", "c" }, sorted(inf:index_values("bad")))
      -- Values that are not strings fail the same way.
      local inf2 = kube.local_informer{ indexers = { num = function() return { 1 } end,
                                                     str = function() return "x" end } }
      inf2:add(pod("ns", "a", "1"))
      drain(inf2)
      assert.equal(0, inf2:len())
    end)

    it("logs the failing key and the index function's error", function()
      local out = run_logged([[
        local inf = kube.local_informer{ name = "ix", indexers = {
          bad = function() error("nope") end } }
        inf:add({ metadata = { name = "a", namespace = "ns" } })
        while inf:pending() > 0 do kube.sleep(0) end
        local inf2 = kube.local_informer{ name = "ix2", indexers = {
          num = function() return { 1 } end } }
        inf2:add({ metadata = { name = "b" } })
        while inf2:pending() > 0 do kube.sleep(0) end
        local inf3 = kube.local_informer{ name = "ix3", indexers = {
          str = function() return "x" end } }
        inf3:add({ metadata = { name = "c" } })
        while inf3:pending() > 0 do kube.sleep(0) end
        local inf4 = kube.local_informer{ name = "ix4", indexers = {
          big = function() local t = {} for i = 1, 5000 do t[i] = "v" .. i end return t end } }
        inf4:add({ metadata = { name = "d" } })
        while inf4:pending() > 0 do kube.sleep(0) end
        print("len=" .. inf:len() + inf2:len() + inf3:len() + inf4:len())]])
      assert.truthy(out:find("len=0", 1, true), out)
      assert.truthy(out:find("ERROR informer ix: ns/a: index bad: [^\n]+:%d+: nope\n    stack "
                             .. "traceback:\n"), out)
      assert.truthy(out:find("ERROR informer ix2: b: index num: index function returned a "
                             .. "value that is not a string\n", 1, true), out)
      assert.truthy(out:find("ERROR informer ix3: c: index str: index function must "
                             .. "return a list of strings\n", 1, true), out)
      assert.truthy(out:find("ERROR informer ix4: d: index big: more than 4096 values or "
                             .. "1048576 bytes\n", 1, true), out)
    end)

    it("raises when an indexer fails on a populated cache", function()
      local inf = kube.local_informer()
      inf:add(pod("ns", "a", "1"))
      drain(inf)
      local ok, err = pcall(inf.add_indexers, inf, { bad = function() error("no") end })
      assert.is_false(ok)
      assert.truthy(err:find("informer:add_indexers: index bad: ", 1, true), err)
      assert.has_error(function() inf:index_values("bad") end,
                       nil) -- nothing was added
    end)
  end)

  describe("objects", function()
    it("drops managedFields unless keep_managed_fields", function()
      local o = pod("ns", "a", "1")
      o.metadata.managedFields = { { manager = "kubectl", operation = "Apply" } }
      local inf = kube.local_informer()
      local keep = kube.local_informer{ keep_managed_fields = true }
      inf:add(o)
      keep:add(o)
      assert(inf:feed(watch("ADDED", pod("ns", "b", "1", nil,
        { metadata = { name = "b", namespace = "ns", managedFields = {} } }))))
      drain(inf)
      drain(keep)
      assert.is_nil(inf:get("ns/a").metadata.managedFields)
      assert.is_nil(inf:get("ns/b").metadata.managedFields)
      assert.same(tagged(json.decode(json.encode(o))), tagged(keep:get("ns/a")))
    end)

    it("applies the transform to adds, updates, deletes and listed items (T-10)", function()
      local calls = 0
      local inf = kube.local_informer{ transform = function(o)
        calls = calls + 1
        o.metadata.annotations = nil
        o.seen = true
        return o
      end }
      local evs = {}
      local function rec(ev) evs[#evs + 1] = ev end
      inf:add_handler{ add = rec, update = rec, delete = rec }
      local a = pod("ns", "a", "1")
      a.metadata.annotations = { big = "x" }
      inf:add(a)                                   -- 1
      inf:update(pod("ns", "a", "2"))              -- 2
      drain(inf)
      inf:replace({ pod("ns", "b", "1") }, "3")    -- 3 (a: a tombstone, not transformed)
      drain(inf)
      inf:resync()                                 -- not transformed
      drain(inf)
      assert(inf:feed(watch("DELETED", pod("ns", "b", "4")))) -- 4
      drain(inf)
      assert.equal(4, calls)
      assert.is_true(evs[1].object.seen)
      assert.is_nil(evs[1].object.metadata.annotations)
      for _, ev in ipairs(evs) do assert.is_true(ev.object.seen) end
    end)

    it("refuses to be fed from its own transform", function()
      local inf
      inf = kube.local_informer{ transform = function(o)
        inf:replace({}, "1")
        return o
      end }
      local ok, err = inf:add(pod("ns", "a", "1"))
      assert.is_nil(ok)
      assert.truthy(err:find("^informer:add: ADDED ns/a: transform failed: spec/informer_spec.lua:%d+: "
                             .. "informer:replace: the informer cannot be fed from its transform"), err)
      assert.equal(0, inf:pending())
    end)

    it("returns a transform's error from add and skips the event in feed", function()
      local inf = kube.local_informer{ name = "tx", transform = function(o)
        if o.metadata.name == "bad" then error("refused") end
        if o.metadata.name == "num" then return 5 end
        return o
      end }
      local ok, err = inf:add(pod("ns", "bad", "1"))
      assert.is_nil(ok)
      assert.truthy(err:find("^informer:add: ADDED ns/bad: transform failed: "
                             .. "spec/informer_spec.lua:%d+: refused\nstack traceback:"), err)
      assert.same({ nil, "informer:add: ADDED ns/num: transform returned number, not a table" },
                  { inf:add(pod("ns", "num", "1")) })
      -- In a watch stream the event is dropped and the stream goes on.
      assert(inf:feed(watch("ADDED", pod("ns", "bad", "1")) .. watch("ADDED", pod("ns", "ok", "1"))))
      drain(inf)
      assert.same({ "ns/ok" }, inf:list_keys())
      -- A relist fails and the items before the bad one stay queued.
      assert.same({ nil, "informer:replace: transform returned number, not a table" },
                  { inf:replace({ pod("ns", "x", "1"), pod("ns", "num", "1") }, "9") })
    end)
  end)

  describe("feed", function()
    local stream = table.concat({
      watch("ADDED", pod("ns", "a", "1", { app = "x" })),
      watch("ADDED", pod("ns", "b", "2")),
      watch("MODIFIED", pod("ns", "a", "3", { app = "\u{e9}\"\\" })),
      '{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1",'
        .. '"metadata":{"resourceVersion":"4"}}}\n',
      watch("DELETED", pod("ns", "b", "5")),
      watch("ADDED", { metadata = { name = "n1", resourceVersion = "6" },
                       data = { list = json.array({}), n = 9007199254740993 - 1 } }),
    })

    local function run(chunks)
      local inf = kube.local_informer()
      local got = recorder(inf)
      for _, c in ipairs(chunks) do assert(inf:feed(c)) end
      drain(inf)
      local objs = {}
      for _, k in ipairs(sorted(inf:list_keys())) do
        objs[#objs + 1] = json.encode(inf:get(k))
      end
      return { events = got, objects = objs, rv = inf:last_sync_resource_version() }
    end

    it("gives the same result wherever the stream is cut", function()
      local whole = run({ stream })
      assert.same({ "add ns/a 1", "update ns/a 1>3", "add ns/b 2", "delete ns/b 5",
                    "add n1 6" }, whole.events)
      assert.equal("6", whole.rv)
      for i = 0, #stream do
        assert.same(whole, run({ stream:sub(1, i), stream:sub(i + 1) }))
      end
      -- And byte by byte.
      local bytes = {}
      for i = 1, #stream do bytes[i] = stream:sub(i, i) end
      assert.same(whole, run(bytes))
    end)

    it("keeps long opaque resourceVersions whole", function()
      local inf = kube.local_informer()
      local rv = ("7"):rep(300)
      assert(inf:feed(watch("ADDED", pod("ns", "a", rv))))
      assert.equal(rv, inf:last_sync_resource_version())
      drain(inf)
      assert.equal(rv, inf:get("ns/a").metadata.resourceVersion)
      assert(inf:replace('{"metadata":{"resourceVersion":"' .. rv .. '8"},"items":[]}'))
      assert.equal(rv .. "8", inf:last_sync_resource_version())
    end)

    it("moves the resourceVersion on bookmarks", function()
      local inf = kube.local_informer()
      assert(inf:feed('{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"77"}}}'))
      assert.equal("77", inf:last_sync_resource_version())
      assert.equal(0, inf:pending())
    end)

    it("reports malformed bytes with their offset and starts a new stream", function()
      local inf = kube.local_informer()
      local got = recorder(inf)
      local good = watch("ADDED", pod("ns", "a", "1"))
      assert.same({ nil, "informer:feed: byte " .. (#good + 15)
                    .. ": expected ',' or '}', found 'x'" },
                  { inf:feed(good .. '{"type":"ADDED"x') })
      assert.same({ nil, "informer:feed: byte 0: top-level value is not an object" },
                  { inf:feed("[1]") })
      assert.same({ nil, 'informer:feed: byte 8: unknown watch event type "FOO"' },
                  { inf:feed('{"type":"FOO","object":{"metadata":{"name":"b"}}}') })
      assert.same({ nil, "informer:feed: byte 0: watch event has no object" },
                  { inf:feed('{"type":"ADDED"}') })
      -- After each error a new stream starts: the informer goes on.
      assert(inf:feed(watch("ADDED", pod("ns", "b", "1"))))
      drain(inf)
      assert.same({ "add ns/a 1", "add ns/b 1" }, got)
    end)

    it("returns an ERROR event's Status message and code (410)", function()
      local inf = kube.local_informer()
      local body = json.decode(read(FIXTURES .. "95-watch-too-old-rv.json"))
      local bytes = body.response.raw_sample:match("\r\n(.-)\r\n")
      assert.same({ nil, "informer:feed: too old resource version: 1 (277)", "Gone", 410 },
                  { inf:feed(bytes) })
      assert(inf:feed(watch("ADDED", pod("ns", "a", "1"))))
      drain(inf)
      assert.equal(1, inf:len())
    end)

    it("logs and skips a watch event whose object has no name", function()
      local out = run_logged([[
        local inf = kube.local_informer{ name = "w" }
        assert(inf:feed('{"type":"ADDED","object":{"metadata":{}}}'
          .. '{"type":"ADDED","object":{"metadata":{"name":"ok"}}}'))
        while inf:pending() > 0 do kube.sleep(0) end
        print("keys=" .. table.concat(inf:list_keys(), ","))]])
      assert.truthy(out:find("keys=ok", 1, true), out)
      assert.truthy(out:find("ERROR informer w: watch event dropped: ADDED: object has no name\n",
                             1, true), out)
    end)
  end)

  describe("round trip", function()
    -- Every object of the apiserver fixtures: response bodies with a name,
    -- list items and watch events.
    local function fixture_objects()
      local objs = {}
      local p = io.popen("ls " .. FIXTURES)
      for name in p:lines() do
        local fx = json.decode(read(FIXTURES .. name))
        local body = fx.response.body
        local function take(o, where)
          if type(o) == "table" and type(o.metadata) == "table" and o.metadata.name then
            objs[#objs + 1] = { where = name .. " " .. where, obj = o }
          end
        end
        if type(body) == "table" then
          take(body, "body")
          if type(body.items) == "table" then
            for i, item in ipairs(body.items) do take(item, "item " .. i) end
          end
        end
        if type(fx.response.body_lines) == "table" then
          for i, ev in ipairs(fx.response.body_lines) do
            if ev.type ~= "ERROR" then take(ev.object, "event " .. i) end
          end
        end
      end
      p:close()
      return objs
    end

    local function without_managed_fields(o)
      local c = json.decode(json.encode(o))
      c.metadata.managedFields = nil
      return c
    end

    it("keeps every fixture object's value, managedFields aside", function()
      local objs = fixture_objects()
      assert.equal(79, #objs)
      for _, x in ipairs(objs) do
        local inf = kube.local_informer()
        local got
        inf:on_add(function(ev) got = ev.object end)
        assert(inf:feed(watch("ADDED", x.obj)))
        drain(inf)
        local m = x.obj.metadata
        local cached = inf:get(m.namespace or "", m.name)
        local want = tagged(without_managed_fields(x.obj))
        assert.same(want, tagged(cached), x.where)
        assert.same(want, tagged(json.decode(json.encode(cached))), x.where)
        assert.same(want, tagged(got), x.where)
        -- And with managedFields kept, byte for byte as kube.json writes them.
        local keep = kube.local_informer{ keep_managed_fields = true }
        assert(keep:add(x.obj))
        drain(keep)
        assert.equal(json.encode(x.obj), json.encode(keep:get(m.namespace or "", m.name)))
      end
    end)

    it("replays every recorded watch stream into the cache it describes", function()
      local p = io.popen("ls " .. FIXTURES)
      local streams = 0
      for name in p:lines() do
        local lines = json.decode(read(FIXTURES .. name)).response.body_lines
        if type(lines) == "table" and lines[1].type ~= "ERROR" then
          streams = streams + 1
          local inf = kube.local_informer()
          local bytes, want, rv = {}, {}, ""
          for i, ev in ipairs(lines) do
            bytes[i] = json.encode(ev) .. "\n"
            local m = ev.object.metadata
            local key = m.name and (m.namespace and m.namespace .. "/" or "") .. m.name
            if ev.type == "DELETED" then
              want[key] = nil
            elseif ev.type ~= "BOOKMARK" then
              want[key] = tagged(without_managed_fields(ev.object))
            end
            rv = m.resourceVersion or rv
          end
          assert(inf:feed(table.concat(bytes)))
          drain(inf)
          local got = {}
          for _, o in ipairs(inf:list()) do
            got[o.metadata.namespace .. "/" .. o.metadata.name] = tagged(o)
          end
          assert.same(want, got, name)
          assert.equal(rv, inf:last_sync_resource_version(), name)
        end
      end
      p:close()
      assert.equal(6, streams)
    end)

    it("keeps generated objects: empty arrays, nulls, big integers, floats, unicode", function()
      local objs = {
        { metadata = { name = "arrays", finalizers = json.array({}) },
          spec = { a = json.array({}), b = {}, c = { json.array({}), {}, json.array({ {} }) } } },
        { metadata = { name = "nulls", labels = json.null },
          spec = { x = json.null, list = json.array({ json.null, 1, json.null }) } },
        { metadata = { name = "ints", generation = 9007199254740992 },
          spec = { max = 9007199254740992, min = -9007199254740992, zero = 0,
                   big = 123456789012345, neg = -1 } },
        { metadata = { name = "floats" },
          spec = { half = 0.5, tiny = 1.5e-300, huge = 1e300, neg = -2.25, third = 1 / 3 } },
        { metadata = { name = "unicode", namespace = "ns\u{e9}",
                       annotations = { ["k\u{2603}"] = "caf\u{e9} \u{1f600} \u{0}\u{1f}" } },
          data = { esc = "\"\\/\b\f\n\r\t", ctl = "\1\2\127", long = ("x"):rep(70000) } },
        { metadata = { name = "bools" }, spec = { t = true, f = false, s = "" } },
      }
      for _, o in ipairs(objs) do
        local inf = kube.local_informer()
        assert(inf:feed(watch("ADDED", o)))
        drain(inf)
        local cached = inf:get(o.metadata.namespace or "", o.metadata.name)
        assert.same(tagged(json.decode(json.encode(o))), tagged(cached), o.metadata.name)
        assert.is_true(json.is_array(cached.spec and cached.spec.c or json.array({})))
        assert.equal(json.encode(o), json.encode(cached))
      end
    end)
  end)

  describe("misuse", function()
    local inf = kube.local_informer{ name = "misuse" }
    local f = function() end

    it("checks kube.local_informer's options", function()
      raises("kube.local_informer: opts must be a table, got number", function()
        kube.local_informer(5)
      end)
      raises("kube.local_informer: opts.name must be a string, got number", function()
        kube.local_informer{ name = 5 }
      end)
      raises("kube.local_informer: opts.api_version must be a string, got boolean", function()
        kube.local_informer{ api_version = true }
      end)
      raises("kube.local_informer: opts.kind must be a string, got table", function()
        kube.local_informer{ kind = {} }
      end)
      raises("kube.local_informer: opts.resync must be a number >= 0, got number", function()
        kube.local_informer{ resync = -1 }
      end)
      raises("kube.local_informer: opts.resync must be a number >= 0, got string", function()
        kube.local_informer{ resync = "1" }
      end)
      raises("kube.local_informer: opts.compress_min_objects must be a number >= 0, got string",
        function() kube.local_informer{ compress_min_objects = "many" } end)
      raises("kube.local_informer: opts.transform must be a function, got table", function()
        kube.local_informer{ transform = {} }
      end)
      raises("kube.local_informer: indexers must be a table, got string", function()
        kube.local_informer{ indexers = "x" }
      end)
      raises("kube.local_informer: indexer names must be strings", function()
        kube.local_informer{ indexers = { f } }
      end)
      raises("kube.local_informer: indexer x: {label = KEY} needs a string key", function()
        kube.local_informer{ indexers = { x = {} } }
      end)
      raises('kube.local_informer: indexer x must be a function, {label = KEY}, '
             .. '"controller" or "namespace", got number', function()
        kube.local_informer{ indexers = { x = 1 } }
      end)
    end)

    it("checks the informer argument of every method", function()
      for _, m in ipairs({ "on_add", "on_update", "on_delete", "add_handler", "get", "list",
                           "list_keys", "by_index", "index_keys", "index_values",
                           "add_indexers", "has_synced", "last_sync_resource_version",
                           "len", "pending", "feed", "replace", "add", "update", "delete",
                           "resync", "name" }) do
        raises("informer:" .. m .. ": expected an informer, got table", function()
          inf[m]({})
        end)
      end
      raises("informer:len: expected an informer, got no value", function() inf.len() end)
    end)

    it("checks handler arguments", function()
      raises("informer:on_add: expected a function, got no value", function() inf:on_add() end)
      raises("informer:on_update: expected a function, got number", function()
        inf:on_update(1)
      end)
      raises("informer:on_delete: name must be a string, got table", function()
        inf:on_delete(f, {})
      end)
      raises("informer:add_handler: expected a table of handlers, got function", function()
        inf:add_handler(f)
      end)
      raises("informer:add_handler: handlers.add must be a function, got string", function()
        inf:add_handler{ add = "x" }
      end)
      raises("informer:add_handler: no add, update or delete function given", function()
        inf:add_handler{ name = "x" }
      end)
      raises("informer:add_handler: handlers.name must be a string, got number", function()
        inf:add_handler{ add = f, name = 1 }
      end)
      raises("informer:add_handler: handlers.resync must be a number >= 0, got -1", function()
        inf:add_handler{ add = f, resync = -1 }
      end)
      raises("informer:add_handler: handlers.resync must be a number >= 0, got string",
             function() inf:add_handler{ add = f, resync = "1" } end)
      raises("informer:add_handler: handlers.filter must be a function, got boolean",
             function() inf:add_handler{ add = f, filter = true } end)
      local h = inf:on_add(f)
      raises("handle:remove: expected a handler handle, got no value", function() h.remove() end)
      raises("handle:has_synced: expected a handler handle, got userdata", function()
        h.has_synced(inf)
      end)
      assert.is_true(h:remove())
    end)

    it("checks reading arguments", function()
      raises("informer:get: key must be a string, got no value", function() inf:get() end)
      raises("informer:get: name must be a string, got number", function() inf:get("ns", 1) end)
      raises("informer:list: namespace must be a string, got number", function() inf:list(1) end)
      raises("informer:by_index: index name must be a string, got no value", function()
        inf:by_index()
      end)
      raises("informer:by_index: value must be a string, got no value", function()
        inf:by_index("namespace")
      end)
      raises('informer:by_index: no index named "nope"', function() inf:by_index("nope", "x") end)
      raises("informer:index_keys: value must be a string, got number", function()
        inf:index_keys("namespace", 1)
      end)
      raises('informer:index_keys: no index named "nope"', function()
        inf:index_keys("nope", "x")
      end)
      raises("informer:index_values: index name must be a string, got boolean", function()
        inf:index_values(true)
      end)
      raises('informer:index_values: no index named "nope"', function()
        inf:index_values("nope")
      end)
      raises("informer:add_indexers: indexers must be a table, got no value", function()
        inf:add_indexers()
      end)
    end)

    it("checks feeding arguments", function()
      raises("informer:feed: bytes must be a string, got table", function() inf:feed({}) end)
      raises("informer:replace: expected a list body or a table of objects, got no value", function()
        inf:replace()
      end)
      raises("informer:replace: resource_version must be a string, got number", function()
        inf:replace({}, 5)
      end)
      raises("informer:add: object must be a table or JSON text, got number", function()
        inf:add(5)
      end)
      raises("informer:update: object must be a table or JSON text, got no value", function()
        inf:update()
      end)
      raises("informer:delete: byte 12: unexpected end of stream inside the value that "
             .. "starts at byte 0", function() inf:delete('{"metadata":') end)
      assert.same({ nil, "informer:add: ADDED: object has no name" },
                  { inf:add({ metadata = {} }) })
      assert.same({ nil, "informer:update: MODIFIED: object has no name" },
                  { inf:update('{"metadata":{"namespace":"x"}}') })
      assert.equal("misuse", inf:name())
      assert.equal("local", kube.local_informer():name())
    end)
  end)
end)
