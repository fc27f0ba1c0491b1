-- Watches on the simulator: the event stream a real apiserver sends
-- (fixtures 63, 79, 80, 95), resourceVersion semantics, selectors,
-- bookmarks, timeoutSeconds, sendInitialEvents, and the bounded history.
-- (The API server alone, --no-controllers: what is checked here is its
-- own events and bytes, which kube-root-ca.crt and the default
-- ServiceAccount would add to.)
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"

assert:set_parameter("TableFormatLevel", -1)

local function api(sim, method, path, body, ct)
  local code, _, raw, obj = H.request(sim, method, path, { body = body,
    headers = ct and { ["Content-Type"] = ct } or nil })
  assert(code < 300, raw)
  return obj
end

local function cm(name, labels, data)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name, labels = labels },
    data = data or { a = "b" } }
end

local CMS = "/api/v1/namespaces/demo/configmaps"

local function list_rv(sim)
  return api(sim, "GET", CMS).metadata.resourceVersion
end

describe("kubelua sim watch", function()
  local sim
  setup(function()
    sim = H.start("--no-controllers --bookmark-interval 0.3 --history 10")
    api(sim, "POST", "/api/v1/namespaces", { apiVersion = "v1", kind = "Namespace",
      metadata = { name = "demo" } })
  end)
  teardown(function() H.stop(sim) end)

  it("streams the finalizer sequence as the real server does (fixture 63)", function()
    local rv = list_rv(sim)
    local w = H.watch_start(sim, CMS .. "?watch=true&fieldSelector=metadata.name%3Dheld"
      .. "&resourceVersion=" .. rv .. "&timeoutSeconds=5")
    H.wait_watches(sim, 1)
    api(sim, "POST", CMS, { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "held", finalizers = { "example.com/hold" } }, data = { a = "b" } })
    api(sim, "POST", CMS, cm("other"))
    api(sim, "DELETE", CMS .. "/held")
    api(sim, "PATCH", CMS .. "/held", { metadata = { finalizers = json.null } },
      "application/merge-patch+json")
    local lines = H.watch_lines(w, 3)
    H.watch_stop(w)
    local want = H.fixture("63").response.body_lines
    assert.same(H.mask(want), H.mask(lines))
    -- resourceVersions increase; DELETED has its own
    local a, b, c = tonumber(lines[1].object.metadata.resourceVersion),
      tonumber(lines[2].object.metadata.resourceVersion),
      tonumber(lines[3].object.metadata.resourceVersion)
    assert.is_true(a < b and b < c)
  end)

  it("turns label changes into ADDED and DELETED for a labelSelector watch (fixture 80)",
    function()
      local rv = list_rv(sim)
      local w = H.watch_start(sim, CMS .. "?watch=true&labelSelector=app%3Dx&resourceVersion="
        .. rv .. "&timeoutSeconds=5")
      H.wait_watches(sim, 1)
      api(sim, "POST", CMS, cm("watch-a", { app = "x" }, { v = "1" }))
      api(sim, "POST", CMS, cm("watch-b", { app = "y" }, { v = "1" }))
      api(sim, "PATCH", CMS .. "/watch-a", { data = { v = "2" } }, "application/merge-patch+json")
      api(sim, "PATCH", CMS .. "/watch-b", { metadata = { labels = { app = "x" } } },
        "application/merge-patch+json")
      local before = api(sim, "PATCH", CMS .. "/watch-a", { metadata = { labels = { app = "z" } } },
        "application/merge-patch+json")
      api(sim, "DELETE", CMS .. "/watch-b")
      api(sim, "DELETE", CMS .. "/watch-a")
      local lines = H.watch_lines(w, 5)
      H.watch_stop(w)
      local kinds = {}
      for i, l in ipairs(lines) do kinds[i] = l.type .. " " .. l.object.metadata.name end
      assert.same({ "ADDED watch-a", "MODIFIED watch-a", "ADDED watch-b", "DELETED watch-a",
        "DELETED watch-b" }, kinds)
      -- the DELETED for a relabelled object: old content, new resourceVersion
      assert.same({ app = "x" }, lines[4].object.metadata.labels)
      assert.equal(before.metadata.resourceVersion, lines[4].object.metadata.resourceVersion)
      local want = H.fixture("80").response.body_lines
      for i = 1, 5 do
        want[i].object.metadata.managedFields = nil
        lines[i].object.metadata.managedFields = nil
      end
      assert.same(H.mask(want), H.mask(lines))
    end)

  it("sends the current state as ADDED for resourceVersion=0, then ends at timeoutSeconds",
    function()
      local w = H.watch_start(sim, CMS .. "?watch=true&resourceVersion=0&timeoutSeconds=1")
      H.watch_done(w)
      local lines = H.watch_lines(w, 1)
      H.watch_stop(w)
      local names = {}
      for i, l in ipairs(lines) do
        assert.equal("ADDED", l.type)
        assert.equal("ConfigMap", l.object.kind)
        names[i] = l.object.metadata.name
      end
      assert.same({ "other" }, names)
    end)

  it("sends bookmarks carrying only the resourceVersion (fixture 79)", function()
    local rv = list_rv(sim)
    local w = H.watch_start(sim, CMS .. "?watch=true&allowWatchBookmarks=true&resourceVersion="
      .. rv .. "&timeoutSeconds=2")
    local lines = H.watch_lines(w, 1)
    H.watch_stop(w)
    local want = H.fixture("79").response.body_lines
    local bookmark
    for _, l in ipairs(want) do
      if l.type == "BOOKMARK" then bookmark = l end
    end
    assert.same(H.mask(bookmark), H.mask(lines[1]))
  end)

  it("ends the initial events with an annotated bookmark for sendInitialEvents", function()
    local w = H.watch_start(sim, CMS .. "?watch=true&sendInitialEvents=true"
      .. "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=10")
    local lines = H.watch_lines(w, 2)
    H.watch_stop(w)
    assert.equal("ADDED", lines[1].type)
    assert.equal("BOOKMARK", lines[2].type)
    assert.same({ ["k8s.io/initial-events-end"] = "true" },
      lines[2].object.metadata.annotations)
  end)

  it("answers a resourceVersion older than the history with a 410 ERROR event (fixture 95)",
    function()
      for i = 1, 15 do api(sim, "POST", CMS, cm("bulk-" .. i)) end
      local w = H.watch_start(sim, CMS .. "?watch=true&resourceVersion=1&timeoutSeconds=3")
      H.watch_done(w)
      local lines = H.watch_lines(w, 1)
      H.watch_stop(w)
      assert.equal(1, #lines)
      local want = H.fixture("95").response.body_lines[1]
      local oldest = lines[1].object.message:match("^too old resource version: 1 %((%d+)%)$")
      assert.truthy(oldest)
      want.object.message = "too old resource version: 1 (" .. oldest .. ")"
      assert.same(want, lines[1])
    end)

  it("watches custom resources across namespaces (fixture 71)", function()
    api(sim, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
      H.fixture("09").request.body)
    H.sleep(0.05)
    local rv = api(sim, "GET", "/apis/example.com/v1/widgets").metadata.resourceVersion
    local w = H.watch_start(sim, "/apis/example.com/v1/widgets?watch=true&resourceVersion=" .. rv
      .. "&timeoutSeconds=5")
    H.wait_watches(sim, 1)
    for _, n in ipairs { "72", "73", "74", "75", "76", "78" } do
      local rq = H.fixture(n).request
      local body = rq.body
      if n == "73" then
        local cur = api(sim, "GET", "/apis/example.com/v1/namespaces/demo/widgets/w1")
        body.metadata.resourceVersion = cur.metadata.resourceVersion
      end
      api(sim, rq.method, rq.path, body ~= json.null and body or nil,
        rq.headers["Content-Type"])
    end
    local want = H.fixture("71").response.body_lines
    local lines = H.watch_lines(w, #want)
    H.watch_stop(w)
    assert.same(H.mask(want), H.mask(lines))
  end)
end)
