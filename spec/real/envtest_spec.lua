-- kubelua.envtest and kubelua.testing against a real etcd and
-- kube-apiserver (KUBEBUILDER_ASSETS: scripts/envtest-assets). One server
-- for the file, as the harness keeps it; the failure cases start their own.
local kube = require "kubelua"
local envtest = require "kubelua.envtest"
local testing = require "kubelua.testing"
local helper = require "spec.integration.sim_helper"
local proc_helper = require "spec.integration.proc_helper"
local support = require "spec.support"

local alive = helper.alive

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

describe("kubelua.envtest (real servers)", function()
  describe("start", function()
    it("says which server failed, with the tail of its log, and leaves nothing behind", function()
      local tmp = assert(require("kubelua.process").mkdtemp(os.tmpname() .. "-"))
      local cp, err = envtest.start{ apiserver_args = { "--no-such-flag" }, tmpdir = tmp }
      assert.is_nil(cp)
      assert.equal("envtest: kube-apiserver exited with status 1 before it was ready; the end of "
        .. "its log:\n  Error: unknown flag: --no-such-flag", err)
      -- etcd was stopped, the directory removed
      assert.equal("", (select(2, support.sh("ls -A " .. tmp))))
      assert.equal(0, (support.sh("! pgrep -f '[-]-data-dir " .. tmp .. "'")))
      os.remove(tmp)
    end)
  end)

  describe("the harness", function()
    local t
    after_each(function() if t then t:stop() end end)

    it("serves a real API server with an admin token, CA and kubeconfig", function()
      t = testing.start{ apiserver = "real", namespaces = { "demo" } }
      assert.equal("real", t.apiserver)
      local cp = t.cp
      assert.equal(kube.server(), cp.server)
      assert.truthy(cp.server:match("^https://127%.0%.0%.1:%d+$"))
      assert.truthy(support.read(cp.ca_file):find("-----BEGIN CERTIFICATE-----", 1, true))
      -- the kubeconfig works on its own
      local kc = assert(require("kubelua.kubeconfig").load{ kubeconfig = cp.kubeconfig })
      assert.equal(cp.server, kc.server)
      local c = cp:client()
      assert.equal("demo", assert(c:get("v1", "namespaces", nil, "demo")).metadata.name)
      -- a real server: its own version and its own validation
      local _, err = c:create{ apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = "Bad_Name", namespace = "demo" } }
      assert.equal(422, err.code)
      t:create{ apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = "kept", namespace = "demo", finalizers = { "example.com/hold" } } }
      t:create{ apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = "kept", namespace = "default", finalizers = { "example.com/hold" } } }
      t:create{ apiVersion = "rbac.authorization.k8s.io/v1", kind = "ClusterRole",
        metadata = { name = "envtest-spec" } }
    end)

    it("keeps the server for the next start, and cleans it between specs", function()
      local before = t and t.cp
      t = testing.start{ apiserver = "real", namespaces = { "demo" } }
      assert.equal(before, t.cp)
      assert.is_nil(t:get("v1", "configmaps", "demo", "kept"))
      assert.is_nil(t:get("v1", "configmaps", "default", "kept"))
      assert.is_nil(t:get("rbac.authorization.k8s.io/v1", "clusterroles", nil, "envtest-spec"))
      -- what the server made for itself stays
      assert.truthy(t:get("v1", "services", "default", "kubernetes"))
      assert.truthy(t:get("rbac.authorization.k8s.io/v1", "clusterroles", nil, "cluster-admin"))
      -- the namespace is new, not one that is terminating
      assert.is_nil(t:get("v1", "namespaces", nil, "demo").metadata.deletionTimestamp)
    end)

    it("waits until a CRD has gone with its objects, so that one of the same name starts empty",
      function()
      local crd = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
        metadata = { name = "widgets.example.com" },
        spec = { group = "example.com", scope = "Namespaced",
          names = { plural = "widgets", singular = "widget", kind = "Widget", listKind = "WidgetList" },
          versions = { { name = "v1", served = true, storage = true,
            schema = { openAPIV3Schema = { type = "object",
              ["x-kubernetes-preserve-unknown-fields"] = true } } } } } }
        for round = 1, 2 do
          t = testing.start{ apiserver = "real" }
          t:create(crd)
          t:eventually(function() return t:list("example.com/v1", "widgets", "default") end)
          assert.same({}, t:list("example.com/v1", "widgets", "default"), "round " .. round)
          t:create{ apiVersion = "example.com/v1", kind = "Widget",
            metadata = { name = "w", namespace = "default", finalizers = { "example.com/hold" } } }
          t:stop()
        end
        t = nil
      end)

    it("lets Pods be made without a controller manager, which would make their ServiceAccount",
      function()
        t = testing.start{ apiserver = "real", namespaces = { "demo" } }
        assert.is_nil(t:get("v1", "serviceaccounts", "demo", "default"))
        local pod = t:create{ apiVersion = "v1", kind = "Pod", metadata = { name = "p", namespace = "demo" },
          spec = { containers = { { name = "c", image = "busybox" } } } }
        assert.equal("Pending", pod.status.phase)
      end)

    it("runs the controller manager when asked, and waits for a namespace's ServiceAccount",
      function()
        local before = t and t.cp
        t = testing.start{ apiserver = "real", controller_manager = true, namespaces = { "demo" } }
        assert.not_equal(before, t.cp) -- restarted, with it
        assert.truthy(t:get("v1", "serviceaccounts", "demo", "default"))
        t:create{ apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "d", namespace = "demo" },
          spec = { selector = { matchLabels = { app = "d" } }, template = {
            metadata = { labels = { app = "d" } },
            spec = { containers = { { name = "c", image = "busybox" } } } } } }
        -- its controllers work: a ReplicaSet for the Deployment
        t:eventually(function() return #t:list("apps/v1", "replicasets", "demo") == 1 end, 30)
      end)

    it("names the simulator's features, which a real server has not", function()
      t = testing.start{ apiserver = "real" }
      local ok, err = pcall(function() return t.sim end)
      assert.is_false(ok)
      assert.truthy(err:find("spec/real/envtest_spec.lua:%d+: kubelua.testing: t.sim: the "
        .. "simulator's features %(faults, history, its options%) are not there: this harness "
        .. 'runs against a real API server %(apiserver = "real"%)$'), err)
      t:stop()
      support.raises("kubelua.testing: start: opts.load (seed files) needs the simulator, and "
        .. 'this harness runs against a real API server (apiserver = "real")',
        function() testing.start{ apiserver = "real", load = "spec/fixtures" } end)
      support.raises("kubelua.testing: start: opts.sim (simulator options) needs the simulator, "
        .. 'and this harness runs against a real API server (apiserver = "real")',
        function() testing.start{ apiserver = "real", sim = {} } end)
      t = nil
    end)
  end)

  describe("kubelua test --apiserver real", function()
    -- A spec file whose one case, name, starts the real server, writes its
    -- directory and its servers' pids to out, one a line, then runs body.
    local function recording_spec(out, name, body)
      return support.tempfile(([[
        local testing = require "kubelua.testing"
        it(%q, function()
          local t = testing.start{}
          local f = io.open(%q, "w")
          f:write(t.cp.dir, "\n")
          for _, p in ipairs(t.cp.procs) do f:write(p.proc:pid(), "\n") end
          f:close()
          %s
        end)
      ]]):format(name, out, body), "_spec.lua")
    end

    it("stops the servers and removes their directory when a spec fails", function()
      local out = os.tmpname()
      local spec = recording_spec(out, "fails", 'assert.equal("expected", "got")')
      local status, log = support.sh(support.kubelua .. " test --apiserver real -o TAP " .. spec)
      os.remove(spec)
      assert.equal(1, status, log)
      assert.matches("^not ok 1 %- fails\n", log)
      local lines = {}
      for l in support.read(out):gmatch("[^\n]+") do lines[#lines + 1] = l end
      os.remove(out)
      assert.equal(3, #lines) -- the directory, etcd, kube-apiserver
      assert.is_false(exists(lines[1]))
      assert.is_false(alive(lines[2]))
      assert.is_false(alive(lines[3]))
    end)

    it("stops the servers and removes their directory when interrupted", function()
      local out = os.tmpname()
      local spec = recording_spec(out, "waits", 'require("kubelua").sleep(600)')
      os.remove(out)
      local pid = proc_helper.background("exec " .. support.kubelua .. " test --apiserver real " .. spec,
        out .. ".log")
      local lines
      assert.is_true(support.eventually(function()
        local f = io.open(out)
        local s = f and f:read("*a")
        if f then f:close() end
        lines = {}
        for l in (s or ""):gmatch("[^\n]+") do lines[#lines + 1] = l end
        return #lines == 3 -- the directory, etcd, kube-apiserver
      end, 120), support.read(out .. ".log"))
      assert.is_true(exists(lines[1]))
      assert.is_true(alive(lines[2]) and alive(lines[3]))
      require("ffi").C.kill(pid, 2) -- SIGINT
      assert.is_true(support.eventually(function()
        return not alive(pid) and not alive(lines[2]) and not alive(lines[3])
      end, 30), support.read(out .. ".log"))
      assert.is_false(exists(lines[1]))
      os.remove(out)
      os.remove(out .. ".log")
      os.remove(spec)
    end)
  end)
end)
