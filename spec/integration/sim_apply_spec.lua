-- The simulator's server-side apply, led by each kind's schema as a real
-- server's is: keyed lists merged item by item (by every key of
-- x-kubernetes-list-map-keys, a key left out taking its default), sets
-- value by value, atomic lists, structs and maps replaced, items another
-- manager owns kept, and conflicts named by their keyed paths; for
-- built-in kinds from the captured OpenAPI, for custom resources from
-- their CRD's openAPIV3Schema. Every expected value is what kube-apiserver
-- 1.26.1 answered to the same requests (spec/differential/schema_steps.lua
-- sends them to both).
local H = require "spec.integration.sim_helper"
local schema_steps = require "spec.differential.schema_steps"

local APPLY = { ["Content-Type"] = "application/apply-patch+yaml" }

describe("kubelua sim server-side apply", function()
  local sim
  setup(function() sim = H.start("--no-controllers") end)
  teardown(function() H.stop(sim) end)

  -- Applies body as manager (forced when force); returns the status and
  -- the decoded body.
  local function apply(path, manager, body, force)
    local code, obj = H.api(sim, "PATCH", path .. "?fieldManager=" .. manager
      .. (force and "&force=true" or ""), body, APPLY)
    return code, obj
  end

  -- manager → its fieldsV1
  local function owners(obj)
    local out = {}
    for _, e in ipairs(obj.metadata.managedFields or {}) do out[e.manager] = e.fieldsV1 end
    return out
  end

  local function conflict(field, manager)
    return { kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      reason = "Conflict", code = 409,
      message = "Apply failed with 1 conflict: conflict with \"" .. manager .. "\": " .. field,
      details = { causes = { { reason = "FieldManagerConflict", field = field,
        message = "conflict with \"" .. manager .. "\"" } } } }
  end

  it("merges a Service's ports by port and protocol, keeping the items others own", function()
    local path = "/api/v1/namespaces/default/services/s"
    local function svc(ports)
      return { apiVersion = "v1", kind = "Service", metadata = { name = "s" },
        spec = { ports = ports } }
    end
    local function ports(obj)
      local out = {}
      for i, p in ipairs(obj.spec.ports) do out[i] = p.name .. "/" .. p.port .. "/" .. p.protocol end
      return out
    end
    local code = apply(path, "a", svc { { name = "http", port = 80 },
      { name = "https", port = 443 } })
    assert.equal(201, code)
    local s
    code, s = apply(path, "b", svc { { name = "metrics", port = 9090 } })
    assert.equal(200, code)
    assert.same({ "http/80/TCP", "https/443/TCP", "metrics/9090/TCP" }, ports(s))
    -- a's https goes (nobody else owns it), its new grpc comes before the
    -- http both have
    code, s = apply(path, "a", svc { { name = "grpc", port = 81 }, { name = "http", port = 80 } })
    assert.equal(200, code)
    assert.same({ "grpc/81/TCP", "http/80/TCP", "metrics/9090/TCP" }, ports(s))
    code, s = apply(path, "b", svc { { name = "web", port = 80 } })
    assert.equal(409, code)
    assert.same(conflict('.spec.ports[port=80,protocol="TCP"].name', "a"), s)
    code, s = apply(path, "b", svc { { name = "web", port = 80 },
      { name = "x", port = 81, protocol = "UDP" } }, true)
    assert.equal(200, code)
    assert.same({ "grpc/81/TCP", "web/80/TCP", "x/81/UDP" }, ports(s))
    local item = { ["."] = {}, ["f:name"] = {}, ["f:port"] = {} }
    assert.same({
      a = { ["f:spec"] = { ["f:ports"] = {
        ['k:{"port":80,"protocol":"TCP"}'] = { ["."] = {}, ["f:port"] = {} },
        ['k:{"port":81,"protocol":"TCP"}'] = item } } },
      b = { ["f:spec"] = { ["f:ports"] = {
        ['k:{"port":80,"protocol":"TCP"}'] = item,
        ['k:{"port":81,"protocol":"UDP"}'] = { ["."] = {}, ["f:name"] = {}, ["f:port"] = {},
          ["f:protocol"] = {} } } } } }, owners(s))
    -- a name another item has is refused by validation, as on a real server
    code, s = apply(path, "c", svc { { name = "web", port = 84 } })
    assert.equal(422, code)
    assert.equal('Service "s" is invalid: spec.ports[3].name: Duplicate value: "web"', s.message)
  end)

  it("merges containers and their ports by the schema's keys, and finalizers as a set",
    function()
      local path = "/apis/apps/v1/namespaces/default/deployments/d"
      local function dep(containers, finalizers)
        return { apiVersion = "apps/v1", kind = "Deployment",
          metadata = { name = "d", finalizers = finalizers },
          spec = { selector = { matchLabels = { app = "d" } }, template = {
            metadata = { labels = { app = "d" } }, spec = { containers = containers } } } }
      end
      local function names(obj)
        local out = {}
        for i, c in ipairs(obj.spec.template.spec.containers) do out[i] = c.name end
        return out
      end
      local code = apply(path, "a", dep({ { name = "x", image = "x:1",
        ports = { { containerPort = 80 } } } }, { "f.io/a" }))
      assert.equal(201, code)
      local d
      code, d = apply(path, "b", dep({ { name = "y", image = "y:1" } }, { "f.io/b" }))
      assert.equal(200, code)
      assert.same({ { "x", "y" }, { "f.io/a", "f.io/b" } }, { names(d), d.metadata.finalizers })
      code, d = apply(path, "a", dep({ { name = "z", image = "z:1" }, { name = "x", image = "x:2",
        ports = { { containerPort = 80 }, { containerPort = 80, protocol = "UDP" } } } },
        { "f.io/c", "f.io/a" }))
      assert.equal(200, code)
      assert.same({ { "z", "x", "y" }, { "f.io/c", "f.io/a", "f.io/b" } },
        { names(d), d.metadata.finalizers })
      assert.same({ { containerPort = 80, protocol = "TCP" },
        { containerPort = 80, protocol = "UDP" } }, d.spec.template.spec.containers[2].ports)
      local labels = { ["f:metadata"] = { ["f:labels"] = { ["f:app"] = {} } } }
      assert.same({
        a = { ["f:metadata"] = { ["f:finalizers"] = { ['v:"f.io/a"'] = {}, ['v:"f.io/c"'] = {} } },
          ["f:spec"] = { ["f:selector"] = {}, ["f:template"] = { ["f:metadata"] = labels["f:metadata"],
            ["f:spec"] = { ["f:containers"] = {
              ['k:{"name":"x"}'] = { ["."] = {}, ["f:image"] = {}, ["f:name"] = {}, ["f:ports"] = {
                ['k:{"containerPort":80,"protocol":"TCP"}'] = { ["."] = {}, ["f:containerPort"] = {} },
                ['k:{"containerPort":80,"protocol":"UDP"}'] = { ["."] = {}, ["f:containerPort"] = {},
                  ["f:protocol"] = {} } } },
              ['k:{"name":"z"}'] = { ["."] = {}, ["f:image"] = {}, ["f:name"] = {} } } } } } },
        b = { ["f:metadata"] = { ["f:finalizers"] = { ['v:"f.io/b"'] = {} } },
          ["f:spec"] = { ["f:selector"] = {}, ["f:template"] = { ["f:metadata"] = labels["f:metadata"],
            ["f:spec"] = { ["f:containers"] = {
              ['k:{"name":"y"}'] = { ["."] = {}, ["f:image"] = {}, ["f:name"] = {} } } } } } } },
        owners(d))
    end)

  it("applies a custom resource by its CRD's list and map types", function()
    local code, _, raw = H.api(sim, "POST",
      "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", schema_steps.CRD)
    assert(code == 201, raw)
    H.established(sim, "gizmos.ex.io")
    local path = "/apis/ex.io/v1/namespaces/default/gizmos/g"
    local function gizmo(spec, finalizers)
      return { apiVersion = "ex.io/v1", kind = "Gizmo",
        metadata = { name = "g", finalizers = finalizers }, spec = spec }
    end
    local g
    code, g = apply(path, "a", gizmo({ items = { { name = "x", zone = "1", size = 1 },
      { name = "x", zone = "2" } }, tags = { "t1", "t2" }, plain = { "p1" }, sel = { a = "1" },
      labels = { k = "v" } }, { "f.io/a" }))
    assert.equal(201, code)
    local xz = { ["."] = {}, ["f:name"] = {}, ["f:zone"] = {} }
    assert.same({ a = { ["f:metadata"] = { ["f:finalizers"] = { ['v:"f.io/a"'] = {} } },
      ["f:spec"] = { ["f:items"] = {
        ['k:{"name":"x","zone":"1"}'] = { ["."] = {}, ["f:name"] = {}, ["f:size"] = {},
          ["f:zone"] = {} },
        ['k:{"name":"x","zone":"2"}'] = xz },
        ["f:labels"] = {}, ["f:plain"] = {}, ["f:sel"] = {},
        ["f:tags"] = { ['v:"t1"'] = {}, ['v:"t2"'] = {} } } } }, owners(g))
    -- an atomic list, an atomic struct, a keyed item's field: a's
    for _, c in ipairs {
      { { items = { { name = "y", zone = "1" } }, tags = { "t3" }, plain = { "p2" } },
        ".spec.plain" },
      { { sel = { b = "2" } }, ".spec.sel" },
      { { items = { { name = "x", zone = "1", size = 5 } } },
        '.spec.items[name="x",zone="1"].size' } } do
      code, g = apply(path, "b", gizmo(c[1]))
      assert.equal(409, code)
      assert.same(conflict(c[2], "a"), g)
    end
    code, g = apply(path, "b", gizmo { items = { { name = "x", zone = "1", size = 5 } },
      labels = { j = "w" } }, true)
    assert.equal(200, code)
    assert.same({ items = { { name = "x", size = 5, zone = "1" }, { name = "x", zone = "2" } },
      labels = { j = "w" }, plain = { "p1" }, sel = { a = "1" }, tags = { "t1", "t2" } }, g.spec)
    -- what a no longer applies and nobody else owns goes
    code, g = apply(path, "a", gizmo { items = { { name = "x", zone = "2" } }, tags = { "t2" } })
    assert.equal(200, code)
    assert.same({ items = { { name = "x", size = 5, zone = "1" }, { name = "x", zone = "2" } },
      labels = { j = "w" }, tags = { "t2" } }, g.spec)
    assert.is_nil(g.metadata.finalizers)
    assert.same({
      a = { ["f:spec"] = { ["f:items"] = { ['k:{"name":"x","zone":"2"}'] = xz },
        ["f:tags"] = { ['v:"t2"'] = {} } } },
      b = { ["f:spec"] = { ["f:items"] = { ['k:{"name":"x","zone":"1"}'] = { ["."] = {},
        ["f:name"] = {}, ["f:size"] = {}, ["f:zone"] = {} } }, ["f:labels"] = {} } } },
      owners(g))
  end)
end)
