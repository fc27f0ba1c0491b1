-- kube.informer against the in-process simulator: list, watch, resume and
-- relist through the reflector, and the cache converging after faults.
local kube = require "kubelua"
local http = require "kubelua.http"
local support = require "spec.support"

local sim

local function call(method, path, obj)
  local r = http.request{
    method = method, url = kube.server() .. path,
    headers = obj and { ["Content-Type"] = "application/json" } or nil,
    body = obj and kube.json.encode(obj) or nil,
  }
  assert(r, "request failed")
  return r.status, r.body ~= "" and kube.json.decode(r.body) or nil
end

local function cm(ns, name, data, labels)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = ns, labels = labels }, data = data }
end

local eventually = support.eventually

-- The server's names in a namespace, sorted.
local function server_names(ns)
  local _, list = call("GET", "/api/v1/namespaces/" .. ns .. "/configmaps")
  local names = {}
  for _, item in ipairs(list.items) do names[#names + 1] = item.metadata.name end
  table.sort(names)
  return names
end

local function cache_names(inf, ns)
  local names = {}
  for _, obj in ipairs(inf:list(ns)) do names[#names + 1] = obj.metadata.name end
  table.sort(names)
  return names
end

describe("kube.informer", function()
  setup(function()
    -- the namespaces hold only what each spec writes: no root-CA publisher
    sim = kube.start_sim{ controllers = { root_ca = false } }
    for _, ns in ipairs({ "w1", "w2", "w3" }) do
      call("POST", "/api/v1/namespaces", { apiVersion = "v1", kind = "Namespace",
                                           metadata = { name = ns } })
    end
  end)

  it("lists, syncs, then follows the watch in order", function()
    for i = 1, 3 do call("POST", "/api/v1/namespaces/w1/configmaps", cm("w1", "c" .. i, { i = "" .. i })) end
    local inf = kube.informer("v1", "configmaps", { namespace = "w1", watch_list = false })
    local events = {}
    inf:add_handler{
      add = function(ev) events[#events + 1] = { "add", ev.key, ev.initial or false } end,
      update = function(ev)
        events[#events + 1] = { "update", ev.key, ev.old.data.i .. "->" .. ev.object.data.i }
      end,
      delete = function(ev) events[#events + 1] = { "delete", ev.key, ev.tombstone or false } end,
    }
    assert.is_true(kube.wait_for_sync(inf, 5))
    assert.equal(3, inf:len())
    assert.is_true(eventually(function() return #events == 3 end))
    table.sort(events, function(a, b) return a[2] < b[2] end)
    assert.same({ { "add", "w1/c1", true }, { "add", "w1/c2", true }, { "add", "w1/c3", true } }, events)

    events = {}
    call("PUT", "/api/v1/namespaces/w1/configmaps/c2", cm("w1", "c2", { i = "22" }))
    call("DELETE", "/api/v1/namespaces/w1/configmaps/c3")
    call("POST", "/api/v1/namespaces/w1/configmaps", cm("w1", "c4", { i = "4" }))
    assert.is_true(eventually(function() return #events == 3 end))
    assert.same({ { "update", "w1/c2", "2->22" }, { "delete", "w1/c3", false },
                  { "add", "w1/c4", false } }, events)
    assert.same(server_names("w1"), cache_names(inf, "w1"))
    assert.equal(inf:last_sync_resource_version(), sim:inject{}.resourceVersion)
  end)

  it("returns the same informer for the same spec", function()
    local a = kube.informer("v1", "configmaps", { namespace = "w1" })
    assert.equal(a, kube.informer("v1", "configmaps", { namespace = "w1" }))
    assert.are_not.equal(a, kube.informer("v1", "configmaps", { namespace = "w2" }))
  end)

  it("watches only what the label selector selects", function()
    call("POST", "/api/v1/namespaces/w2/configmaps", cm("w2", "yes", {}, { mirror = "true" }))
    call("POST", "/api/v1/namespaces/w2/configmaps", cm("w2", "no", {}, { mirror = "false" }))
    local inf = kube.informer("v1", "configmaps", { namespace = "w2", label_selector = "mirror=true" })
    assert.is_true(kube.wait_for_sync(inf, 5))
    call("POST", "/api/v1/namespaces/w2/configmaps", cm("w2", "yes2", {}, { mirror = "true" }))
    call("POST", "/api/v1/namespaces/w2/configmaps", cm("w2", "no2", {}))
    assert.is_true(eventually(function() return inf:len() == 2 end))
    assert.same({ "yes", "yes2" }, cache_names(inf, "w2"))
  end)

  it("resumes a dropped watch and relists after a compaction, converging", function()
    local inf = kube.informer("v1", "configmaps", { namespace = "w3" })
    local deleted = {}
    inf:on_delete(function(ev) deleted[ev.key] = ev.tombstone and "tombstone" or "delete" end)
    for i = 1, 5 do call("POST", "/api/v1/namespaces/w3/configmaps", cm("w3", "k" .. i, {})) end
    assert.is_true(kube.wait_for_sync(inf, 5))
    assert.is_true(eventually(function() return inf:len() == 5 end))

    sim:inject{ drop_watches = true } -- the reflector resumes from its resourceVersion
    call("DELETE", "/api/v1/namespaces/w3/configmaps/k1")
    assert.is_true(eventually(function() return inf:get("w3/k1") == nil end))
    assert.equal("delete", deleted["w3/k1"])

    -- While the watch is down, changes happen and the history is compacted:
    -- the resume gets 410, the reflector relists, a vanished key becomes a
    -- tombstone.
    sim:inject{ drop_watches = true }
    call("DELETE", "/api/v1/namespaces/w3/configmaps/k2")
    call("POST", "/api/v1/namespaces/w3/configmaps", cm("w3", "k6", {}))
    sim:inject{ compact = true }
    assert.is_true(eventually(function()
      return table.concat(cache_names(inf, "w3"), ",") == table.concat(server_names("w3"), ",")
    end))
    assert.same({ "k3", "k4", "k5", "k6" }, cache_names(inf, "w3"))
    assert.truthy(deleted["w3/k2"])
  end)

  it("streams its lists (watch_list, the default), and converges after faults", function()
    call("POST", "/api/v1/namespaces", { apiVersion = "v1", kind = "Namespace",
                                         metadata = { name = "w4" } })
    for i = 1, 3 do call("POST", "/api/v1/namespaces/w4/configmaps", cm("w4", "s" .. i, {})) end
    -- the reflector's requests for w4's configmaps (the spec's own have no
    -- Accept header), as the simulator sees them
    local seen, handle = {}, sim.handle
    sim.handle = function(self, req)
      if req:path():find("/namespaces/w4/configmaps", 1, true)
          and req:header("Accept") == "application/json" then
        seen[#seen + 1] = req:query() or ""
      end
      return handle(self, req)
    end
    local inf = kube.informer("v1", "configmaps", { namespace = "w4" })
    assert.is_true(kube.wait_for_sync(inf, 5))
    assert.same({ "s1", "s2", "s3" }, cache_names(inf, "w4"))
    assert.matches("sendInitialEvents=true", seen[1], 1, true)
    assert.equal(inf:last_sync_resource_version(), sim:inject{}.resourceVersion)
    call("POST", "/api/v1/namespaces/w4/configmaps", cm("w4", "s4", {}))
    assert.is_true(eventually(function() return inf:get("w4/s4") ~= nil end))

    sim:inject{ drop_watches = true }
    call("DELETE", "/api/v1/namespaces/w4/configmaps/s1")
    sim:inject{ compact = true }
    call("POST", "/api/v1/namespaces/w4/configmaps", cm("w4", "s5", {}))
    assert.is_true(eventually(function()
      return table.concat(cache_names(inf, "w4"), ",") == table.concat(server_names("w4"), ",")
    end))
    assert.same({ "s2", "s3", "s4", "s5" }, cache_names(inf, "w4"))
    sim.handle = nil -- the class's again
    for _, q in ipairs(seen) do assert.matches("watch=true", q, 1, true) end -- never a list
  end)

  it("lists and watches where the server refuses streaming lists", function()
    call("POST", "/api/v1/namespaces", { apiVersion = "v1", kind = "Namespace",
                                         metadata = { name = "w5" } })
    call("POST", "/api/v1/namespaces/w5/configmaps", cm("w5", "t1", {}))
    -- a server older than 1.27: resourceVersionMatch on a watch is invalid
    local seen, handle = {}, sim.handle
    sim.handle = function(self, req)
      local q = req:query() or ""
      if req:path():find("/namespaces/w5/configmaps", 1, true)
          and req:header("Accept") == "application/json" then
        seen[#seen + 1] = q
        if q:find("sendInitialEvents", 1, true) then
          return req:reply(422, { ["Content-Type"] = "application/json" }, kube.json.encode{
            kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure", code = 422,
            reason = "Invalid", message = "resourceVersionMatch: Forbidden: "
              .. "resourceVersionMatch is forbidden for watch" })
        end
      end
      return handle(self, req)
    end
    local inf = kube.informer("v1", "configmaps", { namespace = "w5" })
    assert.is_true(kube.wait_for_sync(inf, 5))
    call("POST", "/api/v1/namespaces/w5/configmaps", cm("w5", "t2", {}))
    assert.is_true(eventually(function() return inf:get("w5/t2") ~= nil end))
    sim:inject{ drop_watches = true } -- the resume is an ordinary watch
    call("POST", "/api/v1/namespaces/w5/configmaps", cm("w5", "t3", {}))
    assert.is_true(eventually(function() return inf:get("w5/t3") ~= nil end))
    sim.handle = nil
    assert.same({ "t1", "t2", "t3" }, cache_names(inf, "w5"))
    assert.matches("sendInitialEvents=true", seen[1], 1, true)
    assert.equal("limit=500&resourceVersion=0", seen[2])
    for i = 3, #seen do
      assert.is_nil(seen[i]:find("sendInitialEvents", 1, true))
    end
  end)

  it("reports no sync for a resource the server does not have", function()
    local inf = kube.informer("v1", "nosuchthings", { namespace = "w1" })
    assert.is_false(kube.wait_for_sync(inf, 0.2))
    assert.is_false(inf:has_synced())
  end)

  it("rejects bad arguments", function()
    support.raises("kube.informer: expected an apiVersion and a resource name",
      function() kube.informer("v1") end)
  end)
end)
