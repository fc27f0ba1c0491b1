-- The simulator against a real kube-apiserver: each request captured in
-- spec/fixtures/apiserver is replayed against `kubelua sim` (after setting
-- up the same objects) and the answer must match field for field: status
-- code, Content-Type, and the body with uids, timestamps and
-- resourceVersions masked.
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"

local null = json.null
assert:set_parameter("TableFormatLevel", -1)

-- Replays fixture n; tweak(opts, fixture) may change the request.
local function replay(sim, n, tweak)
  local fx = H.fixture(n)
  local rq = fx.request
  local headers = {}
  for k, v in pairs(rq.headers or {}) do
    if k ~= "Authorization" then headers[k] = v end
  end
  local opts = { headers = headers, path = rq.path }
  if rq.body ~= null then opts.body = rq.body end
  if tweak then tweak(opts, fx) end
  local code, h, raw, got = H.request(sim, rq.method, opts.path, opts)
  return fx, code, h, got, raw
end

-- Replays fixture n and compares; cmp(want, got) may narrow both first.
local function check(sim, n, tweak, cmp)
  local fx, code, h, got, raw = replay(sim, n, tweak)
  assert.equal(fx.response.status, code)
  assert.equal(fx.response.headers["Content-Type"], h["content-type"])
  local want = fx.response.body
  if type(want) == "string" then
    assert.equal(want, raw)
    return raw
  end
  if cmp then want, got = cmp(want, got) end
  assert.same(H.mask(want), H.mask(got))
  return got, h
end

local function unmanaged(want, got) return H.without_managed(want), H.without_managed(got) end

local function post(sim, path, body)
  local code, _, raw, obj = H.request(sim, "POST", path, { body = body })
  assert(code == 201, raw)
  return obj
end

local function group_subset(want, got)
  local names = {}
  for _, g in ipairs(got.groups) do names[g.name] = true end
  local keep = json.array {}
  for _, g in ipairs(want.groups) do
    if names[g.name] then keep[#keep + 1] = g end
  end
  want.groups = keep
  return want, got
end

describe("kubelua sim answers as kube-apiserver v1.26 does", function()
  local sim
  -- the recordings come from a server with no controller manager: no
  -- kube-root-ca.crt, no garbage collector
  setup(function() sim = H.start("--no-controllers") end)
  teardown(function() H.stop(sim) end)

  it("serves /version and the discovery documents", function()
    check(sim, "01")
    check(sim, "02")
    check(sim, "03")
    check(sim, "04")
    check(sim, "05")
    check(sim, "06")
    check(sim, "07")
    check(sim, "08")
  end)

  it("serves a CustomResourceDefinition's group once it is created", function()
    check(sim, "09")
    H.sleep(0.1)
    check(sim, "10")
    check(sim, "11")
    check(sim, "12")
    check(sim, "13", nil, group_subset)
  end)

  it("creates, reads and lists ConfigMaps", function()
    check(sim, "14")
    check(sim, "15")
    check(sim, "16")
    -- cm2..cm4 as the capture created them
    for i = 2, 4 do
      local item = H.fixture("18").response.body.items[i]
      post(sim, "/api/v1/namespaces/demo/configmaps", { apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = item.metadata.name, labels = item.metadata.labels },
        data = item.data })
    end
    check(sim, "18")
    local page = check(sim, "19")
    assert.equal(2, page.metadata.remainingItemCount)
    local token = page.metadata.continue
    local t = json.decode(require("kubelua.sim.util").b64decode(token))
    assert.same({ v = "meta.k8s.io/v1", rv = tonumber(page.metadata.resourceVersion),
      start = "cm2\0" }, t)
    local last = check(sim, "20", function(o)
      o.path = "/api/v1/namespaces/demo/configmaps?limit=2&continue=" .. token
    end)
    assert.equal(page.metadata.resourceVersion, last.metadata.resourceVersion)
    -- resourceVersion=0 (the watch cache); captured later, so only the shape
    local _, code, _, got = replay(sim, "21")
    assert.equal(200, code)
    assert.equal(4, #got.items)
    assert.equal("ConfigMapList", got.kind)
  end)

  it("updates with optimistic concurrency", function()
    local _, _, _, cm1 = H.request(sim, "GET", "/api/v1/namespaces/demo/configmaps/cm1")
    local old_rv = cm1.metadata.resourceVersion
    check(sim, "22", function(o) o.body.metadata.resourceVersion = old_rv end,
      unmanaged)
    check(sim, "23", function(o) o.body.metadata.resourceVersion = old_rv end)
    check(sim, "24", nil, unmanaged)
    -- captured after 24: a client that is not curl gets compact JSON
    local fx, code, h, got, raw = replay(sim, "17")
    assert.equal(200, code)
    assert.equal("application/json", h["content-type"])
    assert.same(H.without_managed(fx.response.body), H.without_managed(got))
    assert.is_nil(raw:find("\n  ", 1, true))
    assert.equal("\n", raw:sub(-1))
    check(sim, "25")
    check(sim, "26")
    check(sim, "27")
    check(sim, "28")
    check(sim, "29")
  end)

  it("deletes, one object or a collection", function()
    check(sim, "30")
    check(sim, "31")
    post(sim, "/api/v1/namespaces/demo/configmaps", { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "cm4", labels = { app = "demo", tier = "batch" } },
      data = { n = "cm4" } })
    local got = check(sim, "32", nil, function(want, g)
      -- the capture had deleted cm4 before; cm4 is back here
      for i = #g.items, 1, -1 do
        if g.items[i].metadata.name == "cm4" then table.remove(g.items, i) end
      end
      return want, g
    end)
    assert.equal(1, #got.items)
  end)

  it("creates with generateName and with dryRun", function()
    local got = check(sim, "33", nil, function(want, g)
      assert.matches("^gen%-[bcdfghjklmnpqrstvwxz2456789]+$", g.metadata.name)
      assert.equal(9, #g.metadata.name)
      g.metadata.name = want.metadata.name
      return want, g
    end)
    assert.equal("gen-", got.metadata.generateName)
    check(sim, "34")
    local _, h = check(sim, "35")
    assert.equal(H.fixture("35").response.headers.Warning, h.warning)
    check(sim, "36")
    local code = H.request(sim, "GET", "/api/v1/namespaces/demo/configmaps/dry")
    assert.equal(404, code)
    -- kubectl's Table: the same columns and rows (ages and the generated
    -- name aside; managedFields are not what this comparison is about)
    check(sim, "37", nil, function(want, g)
      for _, t in ipairs { want, g } do
        for _, row in ipairs(t.rows) do
          assert.matches("^%d+s$", row.cells[3])
          row.cells[3] = "<age>"
          if row.cells[1]:match("^gen%-") then
            row.cells[1] = "gen"
            row.object.metadata.name = "gen"
          end
          row.object = H.without_managed(row.object)
        end
      end
      return want, g
    end)
  end)

  it("patches with merge and JSON patches", function()
    post(sim, "/api/v1/namespaces/demo/configmaps", { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "patchme" }, data = { a = "1", b = "2" } })
    check(sim, "38")
    check(sim, "39")
    check(sim, "40")
    check(sim, "41")
    check(sim, "42")
    check(sim, "43")
    check(sim, "54")
  end)

  it("applies server-side with field managers and conflicts", function()
    check(sim, "48")
    check(sim, "49")
    check(sim, "50")
    check(sim, "51")
    check(sim, "52")
    -- the real server's demo entry was a second later, so it sorts last
    check(sim, "53", nil, function(want, got)
      local function by_manager(a, b) return a.manager < b.manager end
      table.sort(want.metadata.managedFields, by_manager)
      table.sort(got.metadata.managedFields, by_manager)
      return want, got
    end)
  end)

  it("defaults a Deployment as the real server does (fixture 44)", function()
    check(sim, "44")
  end)

  it("refuses bad input with the real Status", function()
    check(sim, "55")
    check(sim, "56")
    check(sim, "57")
    check(sim, "58")
    check(sim, "60")
    check(sim, "61")
    check(sim, "62")
  end)

  it("answers a path that names no resource of a served group-version (control-plane)",
    function()
      local calls = json.decode(H.read_file(
        "spec/fixtures/apiserver/control-plane/unknown-resource.json"))
      assert.equal(5, #calls)
      for _, call in ipairs(calls) do
        local method, path = call.call:match("^(%u+) (.+)$")
        local code, h, raw, got = H.request(sim, method, path)
        local want = call.body
        if call.content_type == "application/json" then want = json.decode(want) else got = raw end
        assert.same({ call.call, call.status, call.content_type, want },
          { call.call, code, h["content-type"], got })
      end
    end)

  it("keeps an object with finalizers until they are gone", function()
    check(sim, "64")
    check(sim, "65")
    check(sim, "66")
    check(sim, "67")
    check(sim, "68")
    check(sim, "69")
    post(sim, "/api/v1/namespaces/demo/configmaps", { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "fg" }, data = { a = "b" } })
    check(sim, "70")
  end)

  it("serves custom resources with a status subresource", function()
    check(sim, "59")
    local w1 = check(sim, "72")
    check(sim, "73", function(o) o.body.metadata.resourceVersion = w1.metadata.resourceVersion end)
    check(sim, "74")
    check(sim, "75")
    check(sim, "76")
    check(sim, "77")
    check(sim, "78")
  end)

  it("serves Leases with optimistic concurrency", function()
    check(sim, "82")
    local _, _, _, lease = H.request(sim, "GET",
      "/apis/coordination.k8s.io/v1/namespaces/demo/leases/demo-lease")
    local rv = lease.metadata.resourceVersion
    check(sim, "83", function(o) o.body.metadata.resourceVersion = rv end)
    check(sim, "84", function(o) o.body.metadata.resourceVersion = rv end)
    check(sim, "85", function(o) o.body.metadata.resourceVersion = rv end)
  end)

  it("serves one Event through core/v1 and events.k8s.io/v1 (fixtures 86-89)", function()
    check(sim, "86", nil, unmanaged)
    check(sim, "87")
    check(sim, "88")
    check(sim, "89", nil, unmanaged)
  end)

  it("answers 410 Expired for compacted continue tokens and resourceVersions", function()
    local _, _, _, page = H.request(sim, "GET", "/api/v1/namespaces/demo/configmaps?limit=1")
    local token = page.metadata.continue
    local _, _, _, f = H.request(sim, "POST", "/_sim/faults", { body = { compact = true } })
    assert.is_true(f.compacted ~= nil)
    check(sim, "96", function(o)
      o.path = "/api/v1/namespaces/demo/configmaps?limit=1&continue=" .. token
    end)
    check(sim, "97", function(o)
      o.path = "/api/v1/namespaces/demo/configmaps?resourceVersion="
        .. page.metadata.resourceVersion .. "&resourceVersionMatch=Exact"
    end)
  end)
end)

describe("kubelua sim --token", function()
  local sim
  setup(function() sim = H.start("--token admin-token --user jane=jane-token") end)
  teardown(function() H.stop(sim) end)

  local function as(token)
    return function(o) o.headers.Authorization = token and "Bearer " .. token or nil end
  end

  it("treats a request without credentials as system:anonymous (403)", function()
    check(sim, "91")
    local code = H.request(sim, "GET", "/version")
    assert.equal(200, code)
  end)

  it("refuses an unknown token with 401", function()
    local _, _, h = replay(sim, "92", as("wrong"))
    assert.is_nil(h["x-kubernetes-pf-flowschema-uid"])
    check(sim, "92", as("wrong"))
  end)

  it("refuses a user without permissions with 403", function()
    check(sim, "93", as("jane-token"))
    check(sim, "94", as("jane-token"))
    local code = H.request(sim, "GET", "/api", { headers = { Authorization = "Bearer jane-token" } })
    assert.equal(200, code)
  end)

  it("serves the admin", function()
    local code = H.request(sim, "GET", "/api/v1/namespaces/default/configmaps",
      { headers = { Authorization = "Bearer admin-token" } })
    assert.equal(200, code)
  end)
end)
