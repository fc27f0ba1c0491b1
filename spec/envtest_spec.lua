-- kubelua.envtest without the servers: where it looks for them, and what
-- it says when they are not there. (spec/real/ starts them.)
local envtest = require "kubelua.envtest"
local process = require "kubelua.process"
local support = require "spec.support"
local quote = require("spec.integration.sim_helper").quote

local ffi = require "ffi"
pcall(ffi.cdef, [[
  int setenv(const char *name, const char *value, int overwrite);
  int unsetenv(const char *name);
]])

local function setenv(name, value)
  if value then ffi.C.setenv(name, value, 1) else ffi.C.unsetenv(name) end
end

local function touch(path, mode)
  local f = assert(io.open(path, "w"))
  f:write("#!/bin/sh\n")
  f:close()
  os.execute("chmod " .. (mode or "755") .. " " .. path)
end

describe("kubelua.envtest", function()
  local dir, saved_assets, saved_path
  before_each(function()
    dir = assert(process.mkdtemp(os.tmpname() .. "-envtest-"))
    saved_assets, saved_path = os.getenv("KUBEBUILDER_ASSETS"), os.getenv("PATH")
  end)
  after_each(function()
    setenv("KUBEBUILDER_ASSETS", saved_assets)
    setenv("PATH", saved_path)
    os.execute("rm -rf " .. dir)
  end)

  describe("find", function()
    it("names what is missing from KUBEBUILDER_ASSETS", function()
      setenv("KUBEBUILDER_ASSETS", dir)
      touch(dir .. "/etcd")
      local bins, err = envtest.find()
      assert.is_nil(bins)
      assert.equal("envtest: kube-apiserver not found in KUBEBUILDER_ASSETS=" .. dir
        .. " (set KUBEBUILDER_ASSETS to a directory holding kube-apiserver, etcd and, for the "
        .. "controller manager, kube-controller-manager, as setup-envtest installs them)", err)
      touch(dir .. "/kube-apiserver")
      assert.same({ etcd = dir .. "/etcd", ["kube-apiserver"] = dir .. "/kube-apiserver" },
        envtest.find())
      bins, err = envtest.find{ controller_manager = true }
      assert.is_nil(bins)
      assert.equal("envtest: kube-controller-manager not found in KUBEBUILDER_ASSETS=" .. dir
        .. " (set KUBEBUILDER_ASSETS to a directory holding kube-apiserver, etcd and, for the "
        .. "controller manager, kube-controller-manager, as setup-envtest installs them)", err)
    end)

    it("looks in PATH when KUBEBUILDER_ASSETS is unset, and not at directories", function()
      os.execute("mkdir -p " .. dir .. "/a/etcd " .. dir .. "/b")
      setenv("KUBEBUILDER_ASSETS", nil)
      setenv("PATH", dir .. "/a:" .. dir .. "/b")
      touch(dir .. "/b/etcd")
      local bins, err = envtest.find()
      assert.is_nil(bins)
      assert.equal("envtest: kube-apiserver not found in PATH=" .. dir .. "/a:" .. dir .. "/b"
        .. " (set KUBEBUILDER_ASSETS to a directory holding kube-apiserver, etcd and, for the "
        .. "controller manager, kube-controller-manager, as setup-envtest installs them)", err)
      touch(dir .. "/a/kube-apiserver")
      assert.same({ etcd = dir .. "/b/etcd", ["kube-apiserver"] = dir .. "/a/kube-apiserver" },
        envtest.find())
    end)

    it("takes opts.assets before KUBEBUILDER_ASSETS", function()
      setenv("KUBEBUILDER_ASSETS", "/nonexistent")
      local bins, err = envtest.find{ assets = dir }
      assert.is_nil(bins)
      assert.equal("envtest: etcd and kube-apiserver not found in the assets directory " .. dir
        .. " (set KUBEBUILDER_ASSETS to a directory holding kube-apiserver, etcd and, for the "
        .. "controller manager, kube-controller-manager, as setup-envtest installs them)", err)
    end)
  end)

  describe("start", function()
    it("returns find's error, and leaves no directory behind when a server cannot run", function()
      local _, err = envtest.start{ assets = dir }
      assert.equal("envtest: etcd and kube-apiserver not found in the assets directory " .. dir
        .. " (set KUBEBUILDER_ASSETS to a directory holding kube-apiserver, etcd and, for the "
        .. "controller manager, kube-controller-manager, as setup-envtest installs them)", err)
      touch(dir .. "/etcd", "644") -- not executable
      touch(dir .. "/kube-apiserver")
      local tmp = dir .. "/tmp"
      os.execute("mkdir " .. tmp)
      setenv("TMPDIR", tmp)
      local cp
      cp, err = envtest.start{ assets = dir }
      setenv("TMPDIR", nil)
      assert.is_nil(cp)
      assert.equal("envtest: etcd: cannot run " .. dir .. "/etcd: Permission denied", err)
      assert.equal("", (select(2, support.sh("ls -A " .. tmp))))
    end)

    it("removes the directories that a kubelua killed before its stop left", function()
      local p = assert(process.spawn{ path = "/bin/true", log = dir .. "/log" })
      local dead = p:pid()
      assert.is_true(support.eventually(function() return p:poll() ~= nil end))
      local mine = assert(io.open("/proc/self/stat")):read("*n")
      local tmp = dir .. "/tmp"
      os.execute("mkdir -p " .. tmp .. "/kubelua-envtest-" .. dead .. "-AbC123/etcd "
        .. tmp .. "/kubelua-envtest-" .. mine .. "-AbC123 " .. tmp .. "/other-" .. dead)
      local _, err = envtest.start{ assets = dir, tmpdir = tmp }
      assert.matches("^envtest: etcd and kube%-apiserver not found", err)
      assert.equal("kubelua-envtest-" .. mine .. "-AbC123\nother-" .. dead .. "\n",
        (select(2, support.sh("ls -A " .. tmp))))
    end)

    it("raises on misuse", function()
      support.raises("envtest.start: opts must be a table, got string",
        function() envtest.start("x") end)
    end)
  end)

  describe("kubelua test", function()
    it("--apiserver real fails at once, naming what is missing and where it looked", function()
      local status, out = support.sh("KUBEBUILDER_ASSETS=" .. dir .. " " .. support.kubelua
        .. " test --apiserver real --controller-manager spec/envtest_spec.lua")
      assert.equal(1, status)
      assert.equal("kubelua test: envtest: etcd, kube-apiserver and kube-controller-manager "
        .. "not found in KUBEBUILDER_ASSETS=" .. dir .. " (set KUBEBUILDER_ASSETS to a directory "
        .. "holding kube-apiserver, etcd and, for the controller manager, "
        .. "kube-controller-manager, as setup-envtest installs them)\n", out)
    end)

    it("fails when interrupted, saying so, whatever the specs said so far", function()
      local marker = dir .. "/started"
      local spec = support.tempfile(([[
        it("waits", function()
          io.open(%q, "w"):close()
          require("kubelua").sleep(600)
        end)
      ]]):format(marker), "_spec.lua")
      local status, out = support.sh("sh -c " .. quote(support.kubelua .. " test " .. spec
        .. " & p=$!; while [ ! -f " .. marker .. " ]; do sleep 0.05; done; kill -INT $p; wait $p"))
      os.remove(spec)
      assert.equal(1, status)
      assert.matches("\nkubelua test: interrupted by signal 2\n$", out)
    end)

    it("refuses a server it does not know, and a controller manager without a real server",
      function()
        local status, out = support.sh(support.kubelua .. " test --apiserver=kind x")
        assert.equal(2, status)
        assert.equal('kubelua: --apiserver needs sim or real, got "kind"', out:match("^[^\n]*"))
        status, out = support.sh(support.kubelua .. " test --controller-manager x")
        assert.equal(2, status)
        assert.equal("kubelua: --controller-manager needs --apiserver real", out:match("^[^\n]*"))
      end)
  end)
end)
