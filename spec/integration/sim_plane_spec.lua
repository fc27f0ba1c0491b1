-- The simulator's control plane beyond the recorded traces
-- (sim_control_plane_spec): dependents made for an owner that is gone,
-- owners that block, the propagation a DELETE defaults to, what every
-- namespace holds, and the switches that turn each controller off.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local simlib = require "kubelua.sim"
local namespaces = require "kubelua.sim.namespaces"
local support = require "spec.support"
local H = require "spec.integration.sim_helper"

local function cm(name, ns, extra)
  local o = { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name, namespace = ns },
    data = { k = "v" } }
  for k, v in pairs(extra or {}) do o.metadata[k] = v end
  return o
end

local function ref(owner, block)
  return { apiVersion = "v1", kind = "ConfigMap", name = owner.metadata.name,
    uid = owner.metadata.uid, controller = true, blockOwnerDeletion = block }
end

describe("kubelua sim control plane", function()
  local t
  after_each(function() if t then t:stop() end end)

  describe("garbage collector", function()
    it("deletes a dependent created for an owner that is gone", function()
      t = testing.start{ namespaces = { "gc" } }
      local owner = t:create(cm("owner", "gc"))
      t:delete("v1", "configmaps", "gc", "owner")
      t:create(cm("late", "gc", { ownerReferences = { ref(owner, true) } }))
      t:eventually(function() return t:get("v1", "configmaps", "gc", "late") == nil end)
      -- one whose owner is another object of the same name is deleted too
      t:create(cm("owner", "gc"))
      t:create(cm("stale", "gc", { ownerReferences = { ref(owner, true) } }))
      t:eventually(function() return t:get("v1", "configmaps", "gc", "stale") == nil end)
    end)

    it("keeps a dependent with a live owner, dropping its reference to the gone one", function()
      t = testing.start{ namespaces = { "gc" } }
      local a = t:create(cm("a", "gc"))
      local b = t:create(cm("b", "gc"))
      local rb = ref(b, false)
      rb.controller = false
      t:create(cm("dep", "gc", { ownerReferences = { ref(a, true), rb } }))
      t:delete("v1", "configmaps", "gc", "a")
      local dep = t:eventually(function()
        local d = t:get("v1", "configmaps", "gc", "dep")
        return d and #d.metadata.ownerReferences == 1 and d
      end)
      assert.equal("b", dep.metadata.ownerReferences[1].name)
    end)

    it("leaves alone a reference it cannot follow (no uid)", function()
      t = testing.start{ namespaces = { "gc" } }
      local a = t:create(cm("a", "gc"))
      t:create(cm("dep", "gc", { ownerReferences = { ref(a, true),
        { apiVersion = "v1", kind = "ConfigMap", name = "nouid" } } }))
      t:delete("v1", "configmaps", "gc", "a")
      local dep = t:eventually(function()
        local d = t:get("v1", "configmaps", "gc", "dep")
        return d and #d.metadata.ownerReferences == 1 and d
      end)
      assert.equal("nouid", dep.metadata.ownerReferences[1].name)
    end)

    it("holds a Foreground owner while a dependent that blocks it is held", function()
      t = testing.start{ namespaces = { "gc" } }
      local owner = t:create(cm("owner", "gc"))
      t:create(cm("blocker", "gc", { ownerReferences = { ref(owner, true) },
        finalizers = { "example.com/hold" } }))
      t:create(cm("free", "gc", { ownerReferences = { ref(owner, false) },
        finalizers = { "example.com/hold" } }))
      kube.delete("v1", "configmaps", "gc", "owner", { propagation_policy = "Foreground" })
      -- both dependents are being deleted; only the one that blocks holds the owner
      t:eventually(function()
        local b = t:get("v1", "configmaps", "gc", "blocker")
        local f = t:get("v1", "configmaps", "gc", "free")
        return b.metadata.deletionTimestamp and f.metadata.deletionTimestamp
      end)
      kube.sleep(0.1)
      assert.same({ "foregroundDeletion" },
        t:get("v1", "configmaps", "gc", "owner").metadata.finalizers)
      local blocker = t:get("v1", "configmaps", "gc", "blocker")
      blocker.metadata.finalizers = nil
      t:update(blocker)
      t:eventually(function() return t:get("v1", "configmaps", "gc", "owner") == nil end)
      assert.is_table(t:get("v1", "configmaps", "gc", "free"))
    end)

    it("is off with controllers = { gc = false }: owned objects stay", function()
      t = testing.start{ namespaces = { "gc" }, controllers = { gc = false } }
      local owner = t:create(cm("owner", "gc"))
      t:create(cm("dep", "gc", { ownerReferences = { ref(owner, true) } }))
      t:delete("v1", "configmaps", "gc", "owner")
      kube.sleep(0.1)
      assert.is_table(t:get("v1", "configmaps", "gc", "dep"))
      -- the other controllers run
      assert.is_table(t:get("v1", "serviceaccounts", "gc", "default"))
    end)
  end)

  describe("DELETE with no propagation", function()
    -- the registry's default, which a plain DELETE gets: resources that are
    -- not served here yet are added to a bare store
    local function store_with(gv, name, kind)
      local s = simlib.new({ controllers = false }).store
      local group, version = gv:match("^(.-)/(.*)$")
      if not group then group, version = "", gv end
      local r = { group = group, version = version, gv = gv, name = name, kind = kind,
        list_kind = kind .. "List", namespaced = true, builtin = true, generation = true,
        fields = {}, disco = {} }
      s:add_resource(r)
      return s, r
    end

    it("orphans a batch/v1 Job's and a v1 ReplicationController's dependents", function()
      for _, case in ipairs { { "batch/v1", "jobs", "Job" },
          { "v1", "replicationcontrollers", "ReplicationController" } } do
        local s, r = store_with(case[1], case[2], case[3])
        assert(s:create(r, "default", { apiVersion = case[1], kind = case[3],
          metadata = { name = "j" }, spec = { x = 1 } }, {}))
        local out = assert(s:delete(r, "default", "j", {}, {}))
        assert.same({ case[3], { "orphan" }, 2 },
          { out.kind, out.metadata.finalizers, out.metadata.generation })
        -- orphanDependents = false asks for Background: it goes at once
        assert(s:create(r, "default", { apiVersion = case[1], kind = case[3],
          metadata = { name = "k" }, spec = { x = 1 } }, {}))
        out = assert(s:delete(r, "default", "k", { orphanDependents = false }, {}))
        assert.same({ "Status", "Success" }, { out.kind, out.status })
      end
    end)

    it("is Background for apps/v1 and the rest, unless a finalizer says otherwise", function()
      local s = simlib.new({ controllers = false }).store
      local deps = s:resource("apps/v1", "deployments")
      assert(s:create(deps, "default", { apiVersion = "apps/v1", kind = "Deployment",
        metadata = { name = "d" }, spec = { selector = { matchLabels = { a = "b" } },
          template = { metadata = { labels = { a = "b" } },
            spec = { containers = { { name = "c", image = "i" } } } } } }, {}))
      assert.equal("Status", assert(s:delete(deps, "default", "d", {}, {})).kind)
      local cms = s:resource("v1", "configmaps")
      assert(s:create(cms, "default", cm("o", "default", { finalizers = { "orphan" } }), {}))
      local out = assert(s:delete(cms, "default", "o", {}, {}))
      assert.same({ "orphan" }, out.metadata.finalizers)
      assert.is_string(out.metadata.deletionTimestamp)
    end)
  end)

  describe("namespaces", function()
    it("each gets kube-root-ca.crt and ServiceAccount default, put back when deleted", function()
      t = testing.start{ namespaces = { "ns1" } }
      for _, ns in ipairs { "default", "kube-system", "ns1" } do
        local ca = t:eventually(function()
          return t:get("v1", "configmaps", ns, "kube-root-ca.crt")
        end)
        assert.equal(namespaces.DEFAULT_CA, ca.data["ca.crt"])
        assert.is_table(t:get("v1", "serviceaccounts", ns, "default"))
      end
      local first = t:get("v1", "configmaps", "ns1", "kube-root-ca.crt")
      t:delete("v1", "configmaps", "ns1", "kube-root-ca.crt")
      t:delete("v1", "serviceaccounts", "ns1", "default")
      local again = t:eventually(function()
        return t:get("v1", "configmaps", "ns1", "kube-root-ca.crt")
      end)
      assert.are_not.equal(first.metadata.uid, again.metadata.uid)
      t:eventually(function() return t:get("v1", "serviceaccounts", "ns1", "default") end)
    end)

    it("get none with controllers = { root_ca = false, service_account = false }", function()
      t = testing.start{ namespaces = { "ns1" },
        controllers = { root_ca = false, service_account = false } }
      kube.sleep(0.1)
      assert.same({}, t:list("v1", "configmaps", "ns1"))
      assert.same({}, t:list("v1", "serviceaccounts", "ns1"))
    end)

    it("stay Terminating with their objects with controllers = { namespace = false }",
      function()
        t = testing.start{ namespaces = { "ns1" }, controllers = { namespace = false } }
        t:create(cm("kept", "ns1"))
        assert(kube.delete("v1", "namespaces", nil, "ns1"))
        kube.sleep(0.1)
        assert.equal("Terminating", t:get("v1", "namespaces", nil, "ns1").status.phase)
        assert.is_table(t:get("v1", "configmaps", "ns1", "kept"))
      end)
  end)

  describe("switches", function()
    it("refuses an unknown controller, naming the known ones", function()
      support.raises("kubelua.testing: start: sim: unknown controller gcc (known: daemonset, "
        .. "deployment, disruption, gc, job, kubelet, namespace, nodes, replicaset, root_ca, "
        .. "scheduler, service_account, statefulset)",
        function() testing.start{ controllers = { gcc = false } } end)
      support.raises("kubelua.testing: start: sim: controllers.gc must be true or false, got "
        .. "string", function() testing.start{ controllers = { gc = "no" } } end)
    end)

    it("kubelua sim --no-controllers serves the API server alone", function()
      local sim = H.start("--no-controllers")
      local _, list = H.api(sim, "GET", "/api/v1/namespaces/default/configmaps")
      H.stop(sim)
      assert.same({}, list.items)
      local status, out = support.sh(support.kubelua .. " sim --no-controller gcc 2>&1")
      assert.same({ 2, "kubelua sim: --no-controller: unknown controller gcc (known: "
        .. "daemonset, deployment, disruption, gc, job, kubelet, namespace, nodes, replicaset, "
        .. "root_ca, scheduler, service_account, statefulset)" }, { status, out:match("^[^\n]*") })
      -- and its help names each one
      status, out = support.sh(support.kubelua .. " sim --help 2>&1")
      assert.same({ 0, true }, { status, out:find("turn one off: gc, namespace, root_ca,\n"
        .. "%s+service_account, disruption, nodes,\n%s+scheduler, kubelet, replicaset,\n"
        .. "%s+deployment, job, statefulset, daemonset\n") ~= nil })
    end)

    it("publishes the served certificate as kube-root-ca.crt over TLS", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p " .. dir) == 0)
      local status, out = support.sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
        .. "/CN=localhost -keyout " .. dir .. "/key.pem -out " .. dir .. "/cert.pem 2>&1")
      assert(status == 0, out)
      local sim = H.start("--tls-cert " .. dir .. "/cert.pem --tls-key " .. dir .. "/key.pem")
      local ca
      for _ = 1, 100 do
        local _, _, _, cmap = H.request(sim, "GET",
          "/api/v1/namespaces/default/configmaps/kube-root-ca.crt", { curl = true })
        ca = cmap and cmap.data and cmap.data["ca.crt"]
        if ca then break end
        H.sleep(0.02)
      end
      H.stop(sim)
      local pem = H.read_file(dir .. "/cert.pem")
      os.execute("rm -rf " .. dir)
      assert.equal(pem, ca)
    end)
  end)
end)
