-- kubelua.process: children in their own process group, with default
-- signals and no inherited descriptors, that die with their parent.
local httpd = require "kubelua.httpd"
local process = require "kubelua.process"
local support = require "spec.support"

local ffi = require "ffi"
local alive = require("spec.integration.sim_helper").alive
local proc_helper = require "spec.integration.proc_helper"

local function wait_exit(p)
  local how, code
  assert.is_true(support.eventually(function()
    how, code = p:poll()
    return how ~= nil
  end, 10))
  return how, code
end

describe("kubelua.process", function()
  local dir
  before_each(function() dir = assert(process.mkdtemp(os.tmpname() .. "-proc-")) end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  describe("spawn", function()
    it("logs stdout and stderr to the file and reports the exit status", function()
      local p = assert(process.spawn{ path = "/bin/sh", log = dir .. "/log",
        args = { "-c", "echo out; echo err >&2; exit 3" } })
      assert.is_number(p:pid())
      assert.same({ "exited", 3 }, { wait_exit(p) })
      assert.equal("out\nerr\n", support.read(dir .. "/log"))
      -- reaped once; the answer stays
      assert.same({ "exited", 3 }, { p:poll() })
      assert.is_nil(p:pid())
      assert.is_false(p:kill("TERM"))
    end)

    it("gives the child no blocked or ignored signal and no descriptor of ours", function()
      -- the mask is read with the shell's builtins before it starts a
      -- command: dash blocks every signal while it vforks one, so a grep
      -- could read that moment's mask
      local p = assert(process.spawn{ path = "/bin/sh", log = dir .. "/log",
        args = { "-c", "while read -r l; do case $l in SigBlk*|SigIgn*) echo \"$l\";; esac;"
          .. " done </proc/$$/status; ls /proc/$$/fd" } })
      assert.same({ "exited", 0 }, { wait_exit(p) })
      assert.equal("SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n0\n1\n2\n",
        support.read(dir .. "/log"))
    end)

    it("runs the child in its own process group, and kill signals the whole group", function()
      local p = assert(process.spawn{ path = "/bin/sh", log = dir .. "/log",
        args = { "-c", "sleep 60 & echo $!; wait" } })
      local grandchild
      assert.is_true(support.eventually(function()
        grandchild = (support.read(dir .. "/log")):match("^(%d+)\n")
        return grandchild ~= nil
      end))
      local f = assert(io.open("/proc/" .. grandchild .. "/stat"))
      local pgrp = f:read("*l"):match("^%d+ %b() %a %d+ (%d+)")
      f:close()
      assert.equal(tostring(p:pid()), pgrp)
      assert.is_true(p:kill("TERM"))
      assert.same({ "signaled", 15 }, { wait_exit(p) })
      assert.is_true(support.eventually(function() return not alive(grandchild) end))
    end)

    it("returns the exec failure", function()
      local p, err = process.spawn{ path = dir .. "/nope", log = dir .. "/log" }
      assert.is_nil(p)
      assert.equal("cannot run " .. dir .. "/nope: No such file or directory", err)
      p, err = process.spawn{ path = "/bin/true", log = dir .. "/no/such/log" }
      assert.is_nil(p)
      assert.equal("cannot open " .. dir .. "/no/such/log: No such file or directory", err)
    end)

    it("kills a child still running when its handle is collected", function()
      local p = assert(process.spawn{ path = "/bin/sleep", args = { "60" }, log = dir .. "/log" })
      local pid = p:pid()
      p = nil -- luacheck: ignore 311
      collectgarbage()
      collectgarbage()
      assert.is_false(alive(pid))
    end)

    it("kills the child when kubelua dies", function()
      local script = support.tempfile(([[
        local kube = require "kubelua"
        local process = require "kubelua.process"
        local p = assert(process.spawn{ path = "/bin/sleep", args = { "60" }, log = %q })
        local f = io.open(%q, "w")
        f:write(p:pid(), "\n")
        f:close()
        kube.spawn(function() while true do kube.sleep(1) end end)
      ]]):format(dir .. "/log", dir .. "/pid"), ".lua")
      local kubelua_pid = proc_helper.background("exec " .. support.kubelua .. " run " .. script,
        dir .. "/run.log")
      local pid
      assert.is_true(support.eventually(function()
        local f = io.open(dir .. "/pid")
        pid = f and f:read("*n")
        if f then f:close() end
        return pid ~= nil
      end, 10), support.read(dir .. "/run.log"))
      assert.is_true(alive(pid))
      ffi.C.kill(kubelua_pid, 9)
      assert.is_true(support.eventually(function() return not alive(pid) end, 10))
      os.remove(script)
    end)

    it("raises on misuse", function()
      support.raises("process.spawn: opts.path must be a string",
        function() process.spawn{ log = "x" } end)
      support.raises("process.spawn: opts.log must be a string",
        function() process.spawn{ path = "x" } end)
      support.raises("process.spawn: opts.args[2] must be a string",
        function() process.spawn{ path = "x", log = "y", args = { "a", {} } } end)
      local p = assert(process.spawn{ path = "/bin/true", log = dir .. "/log" })
      support.raises("process.kill: unknown signal SIGTERM", function() p:kill("SIGTERM") end)
      wait_exit(p)
    end)
  end)

  describe("free_port", function()
    it("returns a loopback port that can be bound", function()
      local port = assert(process.free_port())
      assert.is_true(port >= 1024 and port <= 65535)
      local srv = assert(httpd.listen{ host = "127.0.0.1", port = port,
        handler = function() return 200 end })
      srv:close()
    end)
  end)

  describe("mkdtemp", function()
    it("makes a new private directory with the prefix", function()
      local a = assert(process.mkdtemp(dir .. "/x-"))
      local b = assert(process.mkdtemp(dir .. "/x-"))
      assert.not_equal(a, b)
      assert.truthy(a:match("^" .. dir:gsub("%p", "%%%0") .. "/x%-......$"))
      assert.equal(0, (support.sh("test -d " .. a .. " && [ $(stat -c %a " .. a .. ") = 700 ]")))
      local none, err = process.mkdtemp(dir .. "/no/such/x-")
      assert.is_nil(none)
      assert.equal("mkdtemp " .. dir .. "/no/such/x-XXXXXX: No such file or directory", err)
    end)
  end)
end)
