-- kube.informer against the in-process simulator (or a real server under
-- kubelua test --apiserver real): list, watch, resume and relist through
-- the reflector, and the cache converging after faults (#sim: the
-- simulator's).
local kube = require "kubelua"
local http = require "kubelua.http"
local support = require "spec.support"
local testing = require "kubelua.testing"

local sim, t

local function call(method, path, obj)
  local conn = kube.connection()
  local r = http.request{
    method = method, url = kube.server() .. path, tls = conn.tls,
    headers = { ["Content-Type"] = obj and "application/json" or nil,
                Authorization = conn.authorization() },
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

-- GET path with Accept accept: the status and the body's text.
local function get_as(path, accept)
  local conn = kube.connection()
  local r = assert(http.request{ url = kube.server() .. path, tls = conn.tls,
    headers = { Accept = accept, Authorization = conn.authorization() } })
  return r.status, r.body
end

local PARTIAL_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
local PARTIAL = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

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
    t = testing.start{ namespaces = { "w1", "w2", "w3", "meta" }, controllers = { root_ca = false } }
    sim = t.apiserver == "sim" and t.sim
  end)
  teardown(function() t:stop() end)

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
    local _, c4 = call("POST", "/api/v1/namespaces/w1/configmaps", cm("w1", "c4", { i = "4" }))
    assert.is_true(eventually(function() return #events == 3 end))
    assert.same({ { "update", "w1/c2", "2->22" }, { "delete", "w1/c3", false },
                  { "add", "w1/c4", false } }, events)
    assert.same(server_names("w1"), cache_names(inf, "w1"))
    assert.equal(c4.metadata.resourceVersion, inf:last_sync_resource_version())
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

  it("resumes a dropped watch and relists after a compaction, converging #sim", function()
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

  it("streams its lists (watch_list, the default), and converges after faults #sim", function()
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

  it("lists and watches where the server refuses streaming lists #sim", function()
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

  it("answers a metadata-only list and watch as the API server does", function()
    call("POST", "/api/v1/namespaces/meta/configmaps", cm("meta", "m1", { big = "x" }, { a = "1" }))
    local status, body = get_as("/api/v1/namespaces/meta/configmaps", PARTIAL_LIST)
    assert.equal(200, status)
    local list = kube.json.decode(body)
    assert.same({ "apiVersion", "items", "kind", "metadata" }, support.sorted_keys(list))
    assert.equal("PartialObjectMetadataList", list.kind)
    assert.equal("meta.k8s.io/v1", list.apiVersion)
    assert.same({ "resourceVersion" }, support.sorted_keys(list.metadata))
    assert.equal(1, #list.items)
    assert.equal("PartialObjectMetadata", list.items[1].kind)
    assert.equal("meta.k8s.io/v1", list.items[1].apiVersion)
    assert.equal("m1", list.items[1].metadata.name)
    assert.same({ "apiVersion", "kind", "metadata" }, support.sorted_keys(list.items[1]))
    assert.same({ a = "1" }, list.items[1].metadata.labels)
    -- a list asked for as one object is refused; a watch's events are
    -- PartialObjectMetadata
    status, body = get_as("/api/v1/namespaces/meta/configmaps", PARTIAL)
    assert.equal(406, status)
    assert.equal("NotAcceptable", kube.json.decode(body).reason)
    assert.equal("you requested PartialObjectMetadata, but the requested object is a list "
      .. "(*core.ConfigMapList)", kube.json.decode(body).message)
    call("POST", "/api/v1/namespaces/meta/configmaps", cm("meta", "m2", { big = "y" }))
    status, body = get_as("/api/v1/namespaces/meta/configmaps?watch=true&timeoutSeconds=1"
      .. "&resourceVersion=" .. list.metadata.resourceVersion, PARTIAL)
    assert.equal(200, status)
    local ev = kube.json.decode(body:match("^[^\n]*"))
    assert.equal("ADDED", ev.type)
    assert.equal("PartialObjectMetadata", ev.object.kind)
    assert.equal("meta.k8s.io/v1", ev.object.apiVersion)
    assert.equal("m2", ev.object.metadata.name)
    assert.same({ "apiVersion", "kind", "metadata" }, support.sorted_keys(ev.object))
  end)

  it("caches only the metadata (metadata_only), listing or streaming", function()
    call("POST", "/api/v1/namespaces/meta/configmaps", cm("meta", "n1", { big = "x" }, { a = "1" }))
    for _, wl in ipairs({ false, true }) do
      local inf = kube.informer("v1", "configmaps", { namespace = "meta", metadata_only = true,
                                                      watch_list = wl, label_selector = "a" })
      assert.are_not.equal(inf, kube.informer("v1", "configmaps",
                                              { namespace = "meta", label_selector = "a" }))
      local events = {}
      inf:add_handler{ add = function(ev) events[#events + 1] = ev.object end,
                       update = function(ev) events[#events + 1] = ev.object end }
      assert.is_true(kube.wait_for_sync(inf, 5))
      local o = inf:get("meta/n1")
      assert.same({ "apiVersion", "kind", "metadata" }, support.sorted_keys(o))
      assert.equal("meta.k8s.io/v1", o.apiVersion)
      assert.equal("PartialObjectMetadata", o.kind)
      assert.same({ a = wl and "2" or "1" }, o.metadata.labels)
      assert.is_nil(o.metadata.managedFields)
      -- a change the watch brings is metadata only too
      call("PUT", "/api/v1/namespaces/meta/configmaps/n1",
           cm("meta", "n1", { big = "z" }, { a = wl and "3" or "2" }))
      assert.is_true(eventually(function()
        local last = events[#events]
        return last and last.metadata.labels.a == (wl and "3" or "2")
      end))
      local last = events[#events]
      assert.same({ "apiVersion", "kind", "metadata" }, support.sorted_keys(last))
      assert.equal("PartialObjectMetadata", last.kind)
      assert.same(last, inf:get("meta/n1"))
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
    support.raises('kube.informer: opts.metadata_only must be a boolean, got string "yes"',
      function() kube.informer("v1", "configmaps", { metadata_only = "yes" }) end)
  end)
end)

-- The same against a server that behaves as a 1.26 one, in `kubelua run`
-- (the simulator in the script's process), reading what an operator reads:
-- its log.
describe("kube.informer, its log", function()
  local run_script = support.run_script

  -- The script's prelude: a simulator as a 1.26 server without a watch
  -- cache (no streaming lists, silent quiet watches, each ended after
  -- 1.5 s as at its timeoutSeconds; the API server alone, so that ns holds
  -- only what the script writes), setup() (in a task: namespace ns with
  -- configmaps c1..c3), and `seen`: the GETs of ns's configmaps (the reflectors' requests) with
  -- their time. inf(name, backoff) makes an informer of ns's configmaps.
  local prelude = [[
    local kube = require "kubelua"
    local informer = require "kubelua.informer"
    local json = kube.json
    local sim = kube.start_sim{ controllers = false }
    sim:inject{ watch_list = "refused", quiet_watches = true, watch_timeout = 1.5 }
    local ns = "q"
    local path = "/api/v1/namespaces/" .. ns .. "/configmaps"
    local seen, handle = {}, sim.handle
    sim.handle = function(self, req)
      if req:method() == "GET" and req:path() == path then
        seen[#seen + 1] = { t = kube.monotonic(), q = req:query() or "" }
      end
      return handle(self, req)
    end
    local function cm(name, v)
      return { apiVersion = "v1", kind = "ConfigMap",
               metadata = { name = name, namespace = ns }, data = { v = v } }
    end
    local function setup() -- in a task
      assert(kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = ns } })
      for i = 1, 3 do assert(kube.create(cm("c" .. i, "0"))) end
    end
    local function inf(name, backoff)
      return informer.new{ name = name, api_version = "v1", kind = "ConfigMap",
        watch = { url = kube.server() .. path, watch_list = true, backoff_initial = backoff } }
    end
    local function count(pattern)
      local n = 0
      for _, r in ipairs(seen) do if r.q:find(pattern) then n = n + 1 end end
      return n
    end
    local function names(list)
      local out = {}
      for _, o in ipairs(list) do out[#out + 1] = o.metadata.name .. "=" .. o.data.v end
      table.sort(out)
      return table.concat(out, ",")
    end
    local function server_names()
      return names(assert(kube.list("v1", "configmaps", ns)).items)
    end
    local function until_(cond, what)
      for _ = 1, 2000 do
        if cond() then return end
        kube.sleep(0.01)
      end
      error("gave up waiting for " .. what)
    end
    local function result(t) io.stdout:write("RESULT ", json.encode(t), "\n") end
    -- runs fn in a task after setup(), then stops, whatever happens
    local function main(fn)
      kube.spawn(function()
        local ok, err = pcall(function() setup() fn() end)
        if not ok then io.stdout:write("FAILED ", tostring(err), "\n") end
        kube.stop()
      end)
    end
  ]]

  local function result(out)
    assert.is_nil(out:match("FAILED [^\n]*"))
    local line = out:match("RESULT ([^\n]*)")
    assert(line, "no result in:\n" .. out)
    return kube.json.decode(line)
  end

  local count = function(s, plain)
    local n, at = 0, 1
    while true do
      local i = s:find(plain, at, true)
      if not i then return n end
      n, at = n + 1, i + #plain
    end
  end

  it("relists at once when a compaction expires a quiet watch's resourceVersion, " ..
     "however often, and says so once each time", function()
    local status, out = run_script(prelude .. [[
      main(function()
        -- any backoff would wait a minute: only a relist at once can pass
        local a = inf("v1/configmaps@q", 60)
        assert(kube.wait_for_sync(a, 10))
        local delays = {}
        for round = 1, 3 do
          -- quiet watches the server ends, resumed from the same version
          local w = count("^allowWatchBookmarks=true&resourceVersion=")
          until_(function() return count("^allowWatchBookmarks=true&resourceVersion=") >= w + 3 end,
                 "three quiet rounds")
          -- changes the quiet watch does not get (held), then the history
          -- compacted under it: when the server ends it, the resume gets 410
          local mark = #seen
          sim:inject{ hold_watches = true }
          assert(kube.update(cm("c1", "r" .. round)))
          assert(kube.delete("v1", "configmaps", ns, round < 3 and "c" .. (round + 1) or "n1"))
          assert(kube.create(cm("n" .. round, "r" .. round)))
          sim:inject{ compact = true }
          local function listed()
            for i = mark + 1, #seen do
              if not seen[i].q:find("watch=true", 1, true) then return i end
            end
          end
          until_(listed, "the relist")
          local i = listed()
          assert(seen[i - 1].q:find("watch=true", 1, true), "the relist follows a watch")
          delays[round] = seen[i].t - seen[i - 1].t
          sim:inject{ hold_watches = false }
          until_(function() return names(a:list()) == server_names() end, "the cache")
        end
        result{ delays = delays, cache = names(a:list()), server = server_names(),
                stats = a:stats() }
      end)
    ]], "", "--log-level debug")
    assert.equal(0, status, out)
    local r = result(out)
    assert.equal(r.server, r.cache)
    assert.equal("c1=r3,n2=r2,n3=r3", r.cache)
    for round = 1, 3 do
      -- a minute's backoff is the only other way: a generous bound
      assert.is_true(r.delays[round] < 30, "relist " .. round .. " after " .. r.delays[round])
    end
    -- one line each time, naming the resource, the version and the relist
    local lines = {}
    for rv, at in out:gmatch("INFO  reflector v1/configmaps@q: resourceVersion (%d+) is gone "
        .. "%(watch: 410 Expired: too old resource version: (%d+) %(%d+%)%): relisting\n") do
      assert.equal(rv, at)
      lines[#lines + 1] = rv
    end
    assert.equal(3, #lines)
    assert.equal(0, count(out, "WARN "))
    assert.equal(0, count(out, "ERROR "))
    -- quiet watches ended by the server: restarted at debug, never torn down
    assert.is_true(count(out, "DEBUG reflector v1/configmaps@q: the server ended the watch after ")
      >= 9)
    assert.equal(0, count(out, "received nothing"))
    assert.equal(0, r.stats.watch_restarts)
  end)

  it("asks a server once whether it streams lists, and says once that it does not", function()
    local status, out = run_script(prelude .. [[
      main(function()
        local infs = { inf("one"), inf("two"), inf("three") }
        assert(kube.wait_for_sync(infs[1], infs[2], infs[3], 10))
        local later = inf("later")
        assert(kube.wait_for_sync(later, 10))
        result{ streaming = count("sendInitialEvents"), lists = count("^limit=500&resourceVersion=0$"),
                names = names(later:list()) }
      end)
    ]])
    assert.equal(0, status, out)
    local r = result(out)
    assert.same({ streaming = 1, lists = 4, names = "c1=0,c2=0,c3=0" }, r)
    local n = count(out, ": streaming list: watch: 422 Invalid: ListOptions.meta.k8s.io \"\" is "
      .. "invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch, "
      .. "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
      .. "resourceVersion is provided]: http://127.0.0.1:")
    assert.equal(1, n)
    assert.equal(1, count(out, " does not serve streaming lists; listing and watching from now on\n"))
    assert.equal(0, count(out, "WARN "))
  end)

  it("lists and watches where a server ignores the streaming-list parameters", function()
    local status, out = run_script(prelude .. [[
      sim:inject{ watch_list = "ignored" }
      main(function()
        local a = inf("v1/configmaps@q", 60)
        -- a plain watch: ADDED events, no end bookmark, then a change
        until_(function() return count("sendInitialEvents") == 1 end, "the streaming list")
        kube.sleep(0.2)
        assert(kube.update(cm("c2", "1")))
        assert(kube.wait_for_sync(a, 10))
        local b = inf("b")
        assert(kube.wait_for_sync(b, 10))
        result{ streaming = count("sendInitialEvents"), a = names(a:list()), b = names(b:list()) }
      end)
    ]])
    assert.equal(0, status, out)
    assert.same({ streaming = 1, a = "c1=0,c2=1,c3=0", b = "c1=0,c2=1,c3=0" }, result(out))
    assert.equal(1, count(out, "INFO  reflector v1/configmaps@q: streaming list: a MODIFIED "
      .. "event among a streaming list's initial events: http://127.0.0.1:"))
    assert.equal(1, count(out, " does not serve streaming lists; listing and watching from now on\n"))
    assert.equal(0, count(out, "WARN "))
    assert.equal(0, count(out, "ERROR "))
  end)

  it("says once when a watch is back after an outage: how long, how many tries", function()
    local status, out = run_script(prelude .. [[
      main(function()
        local a = inf("v1/configmaps@q", 0.05)
        assert(kube.wait_for_sync(a, 10))
        kube.sleep(1.2) -- a watch that worked
        sim:inject{ fail_next = 3, code = 503, drop_watches = true }
        until_(function() return a:stats().errors >= 3 and sim.faults.fail_next == 0 end,
               "three failures")
        local w = count("^allowWatchBookmarks=true&resourceVersion=")
        until_(function() return count("^allowWatchBookmarks=true&resourceVersion=") > w end,
               "the watch")
        kube.sleep(2) -- a routine restart after it says nothing more
      end)
    ]])
    assert.equal(0, status, out)
    assert.equal(1, count(out, "INFO  reflector v1/configmaps@q: watching again after 3 failed "
      .. "attempts in "))
    assert.matches("INFO  reflector v1/configmaps@q: watching again after 3 failed attempts in "
      .. "%d+%.%ds\n", out)
    assert.equal(1, count(out, "watching again after"))
  end)
end)
