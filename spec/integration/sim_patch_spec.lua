-- The simulator's strategic merge patch, led by each kind's schema as a
-- real server's is: which lists merge and by which key, finalizers as a
-- set, $deleteFromPrimitiveList, $setElementOrder, $retainKeys in list
-- items, and the errors of a malformed patch. Every expected value is what
-- kube-apiserver 1.26.1 answered to the same requests
-- (spec/differential/schema_steps.lua sends them to both).
local H = require "spec.integration.sim_helper"

local DEPS = "/apis/apps/v1/namespaces/default/deployments"
local SMP = { ["Content-Type"] = "application/strategic-merge-patch+json" }

local deployment = require("spec.differential.schema_steps").deployment

local function template(spec) return { spec = { template = { spec = spec } } } end

describe("kubelua sim strategic merge patch", function()
  local sim
  setup(function() sim = H.start("--no-controllers") end)
  teardown(function() H.stop(sim) end)

  -- Creates a Deployment named name; returns a function that patches it
  -- and answers the status, the decoded body and the response headers,
  -- and the created object.
  local function patcher(name)
    local code, created, raw = H.api(sim, "POST", DEPS, deployment(name))
    assert(code == 201, raw)
    return function(body)
      local c, headers, _, obj = H.request(sim, "PATCH", DEPS .. "/" .. name,
        { body = body, headers = SMP })
      return c, obj, headers
    end, created
  end

  local function container(d, name)
    for _, c in ipairs(d.spec.template.spec.containers) do
      if c.name == name then return c end
    end
  end

  local function column(list, key)
    local out = {}
    for i, x in ipairs(list or {}) do out[i] = x[key] end
    return out
  end

  it("merges the lists whose schema says merge, by its key, and replaces the others", function()
    local patch, created = patcher("lists")
    -- the creator owns the struct held by pointer (dnsConfig) itself too,
    -- not those held by value (template, its spec)
    local tpl = created.metadata.managedFields[1].fieldsV1["f:spec"]["f:template"]
    assert.is_nil(tpl["."])
    assert.is_nil(tpl["f:spec"]["."])
    assert.same({ ["."] = {}, ["f:options"] = {} }, tpl["f:spec"]["f:dnsConfig"])
    -- command and args have no patch strategy: replaced
    local code, d = patch(template { containers = { { name = "a", command = { "bash" },
      args = { "three" } } } })
    assert.equal(200, code)
    assert.same({ { "bash" }, { "three" } }, { container(d, "a").command, container(d, "a").args })
    -- volume mounts merge by mountPath, not by name: both of volume v's stay
    code, d = patch(template { containers = { { name = "a",
      volumeMounts = { { name = "v", mountPath = "/z" } } } } })
    assert.equal(200, code)
    assert.same({ "/z", "/x", "/y" }, column(container(d, "a").volumeMounts, "mountPath"))
    -- tolerations and DNS options have no patch strategy: replaced
    code, d = patch(template { tolerations = { { key = "k3", operator = "Exists" } },
      dnsConfig = { options = { { name = "timeout", value = "1" } } } })
    assert.equal(200, code)
    assert.same({ { key = "k3", operator = "Exists" } }, d.spec.template.spec.tolerations)
    assert.same({ options = { { name = "timeout", value = "1" } } },
      d.spec.template.spec.dnsConfig)
    -- ports merge by containerPort; the new one comes first
    code, d = patch(template { containers = { { name = "a",
      ports = { { containerPort = 82 } } } } })
    assert.equal(200, code)
    assert.same({ 82, 80, 81 }, column(container(d, "a").ports, "containerPort"))
    assert.same({ "a", "b" }, column(d.spec.template.spec.containers, "name"))
  end)

  it("merges finalizers as a set and removes them with $deleteFromPrimitiveList", function()
    local patch = patcher("fin")
    local code, d = patch { metadata = { finalizers = { "x.io/c" } } }
    assert.equal(200, code)
    assert.same({ "x.io/c", "x.io/a", "x.io/b" }, d.metadata.finalizers)
    code, d = patch { metadata = { ["$deleteFromPrimitiveList/finalizers"] = { "x.io/a" } } }
    assert.equal(200, code)
    assert.same({ "x.io/c", "x.io/b" }, d.metadata.finalizers)
    code, d = patch { metadata = { finalizers = { "x.io/b", "x.io/d" } } }
    assert.equal(200, code)
    assert.same({ "x.io/c", "x.io/b", "x.io/d" }, d.metadata.finalizers)
    -- all of them removed: no list left
    code, d = patch { metadata = { ["$deleteFromPrimitiveList/finalizers"] =
      { "x.io/b", "x.io/c", "x.io/d" } } }
    assert.equal(200, code)
    assert.is_nil(d.metadata.finalizers)
  end)

  it("orders a merged list as $setElementOrder says", function()
    local patch = patcher("order")
    local code, d = patch(template { ["$setElementOrder/containers"] =
      { { name = "b" }, { name = "a" } } })
    assert.equal(200, code)
    assert.same({ "b", "a" }, column(d.spec.template.spec.containers, "name"))
    code, d = patch(template { ["$setElementOrder/containers"] =
      { { name = "c" }, { name = "a" }, { name = "b" } },
      containers = { { name = "c", image = "c:1" } } })
    assert.equal(200, code)
    assert.same({ "c", "a", "b" }, column(d.spec.template.spec.containers, "name"))
    code, d = patch(template { containers = { { name = "a", ["$setElementOrder/ports"] =
      { { containerPort = 81 }, { containerPort = 80 } } } } })
    assert.equal(200, code)
    assert.same({ 81, 80 }, column(container(d, "a").ports, "containerPort"))
    -- the patch's items must be in the order's, in its order
    code, d = patch(template { ["$setElementOrder/containers"] = { { name = "a" } },
      containers = { { name = "b", image = "b:2" } } })
    assert.equal(500, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      code = 500, message = "The order in patch list:\n[map[image:b:2 name:b]]\n doesn't match "
        .. "$setElementOrder list:\n[map[name:a]]\n" }, d)
  end)

  it("keeps only $retainKeys in a merged item, and deletes items by their key", function()
    local patch = patcher("retain")
    -- a new item is taken as given: its directive is an unknown field
    local code, d, headers = patch(template { volumes = { { name = "w",
      ["$retainKeys"] = { "name", "configMap" }, configMap = { name = "cm" } } } })
    assert.equal(200, code)
    assert.equal('299 - "unknown field \\"spec.template.spec.volumes[0].$retainKeys\\""',
      headers.warning)
    assert.same({ "w", "v" }, column(d.spec.template.spec.volumes, "name"))
    assert.same({ name = "v", emptyDir = {} }, d.spec.template.spec.volumes[2])
    -- the union's other member goes
    code, d = patch(template { volumes = { { name = "v",
      ["$retainKeys"] = { "name", "configMap" }, configMap = { name = "cm" } } } })
    assert.equal(200, code)
    local v = d.spec.template.spec.volumes[2]
    assert.same({ "v", "cm", false }, { v.name, v.configMap.name, v.emptyDir ~= nil })
    code, d = patch(template { containers = { { name = "b", ["$patch"] = "delete" } } })
    assert.equal(200, code)
    assert.same({ "a" }, column(d.spec.template.spec.containers, "name"))
  end)

  it("answers an item without its merge key as a real server does", function()
    local patch = patcher("nokey")
    for _, c in ipairs {
      { { image = "noname" }, "map: map[image:noname] does not contain declared merge key: name" },
      { { ["$patch"] = "delete" },
        "map: map[$patch:delete] does not contain declared merge key: name" } } do
      local code, st = patch(template { containers = { c[1] } })
      assert.equal(500, code)
      assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
        code = 500, message = c[2] }, st)
    end
  end)
end)
