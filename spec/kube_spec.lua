-- The loop and tasks: kube.spawn, kube.sleep, kube.after, kube.run, kube.now.
local kube = require "kubelua"
local support = require "spec.support"
local raises = support.raises

describe("kubelua", function()
  describe("now", function()
    it("returns wall-clock seconds with a fraction", function()
      -- between two readings of os.time() (whole seconds, from the coarse
      -- clock): no bound on how long the machine pauses in between
      local before = os.time()
      local t = kube.now()
      local after = os.time()
      assert.is_number(t)
      assert.is_true(t >= before - 0.01, t .. " < " .. before)
      assert.is_true(t < after + 1.01, t .. " >= " .. after .. " + 1")
    end)
  end)

  describe("in_task", function()
    it("is true in a task only, not in a plain coroutine inside one", function()
      local core = require "kubelua.core"
      assert.is_true(core.in_task())
      assert.is_true(kube.run(function() return core.in_task() end))
      assert.is_false(coroutine.wrap(function() return core.in_task() end)())
    end)
  end)

  describe("core.watch", function()
    local core = require "kubelua.core"
    local dir

    local function write(path, text)
      local f = assert(io.open(path, "w"))
      f:write(text)
      f:close()
    end

    before_each(function()
      dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. dir) == 0)
    end)

    after_each(function() os.execute("rm -rf " .. dir) end)

    it("calls fn when a watched file changes, never for another file beside it", function()
      local path = dir .. "/c.lua"
      write(path, "a")
      local calls = 0
      local w = core.watch({ path }, function() calls = calls + 1 end, 60)
      finally(function() w:close() end)
      for i = 1, 25 do -- a log written next to the script
        write(dir .. "/out.log", ("line\n"):rep(i))
        kube.sleep(0.02)
      end
      kube.sleep(0.5) -- more than the settle delay
      assert.equal(0, calls)
      write(path, "b")
      assert.is_true(support.eventually(function() return calls == 1 end))
      kube.sleep(0.5)
      assert.equal(1, calls)
    end)

    it("refuses a poll that is not positive seconds", function()
      local ok, err = pcall(core.watch, {}, function() end, 0)
      assert.is_false(ok)
      assert.equal("core.watch: poll must be positive, got 0", err)
    end)
  end)

  describe("core.random_bytes", function()
    local core = require "kubelua.core"

    it("returns n bytes from the kernel, different each time", function()
      local a, b = core.random_bytes(16), core.random_bytes(16)
      assert.equal(16, #a)
      assert.equal(256, #core.random_bytes(256))
      assert.not_equal(a, b)
    end)

    it("refuses n outside 1 to 256", function()
      for _, n in ipairs({ 0, 257 }) do
        local ok, err = pcall(core.random_bytes, n)
        assert.is_false(ok)
        assert.equal("core.random_bytes: n must be 1 to 256, got " .. n, err)
      end
    end)
  end)

  describe("run", function()
    it("returns what the task returns", function()
      local a, b, c = kube.run(function() return 1, nil, "x" end)
      assert.same({ 1, nil, "x" }, { a, b, c })
    end)

    it("raises the task's error with a traceback", function()
      local ok, err = pcall(kube.run, function() error("boom") end)
      assert.is_false(ok)
      assert.matches("kube_spec.lua:%d+: boom\nstack traceback:", err)
    end)

    it("rejects a non-function", function()
      raises("kube.run: expected a function, got number", function() kube.run(42) end)
    end)

    it("gives up after its timeout", function()
      raises("kube.run: timed out after 0.05s", function()
        kube.run(function() kube.sleep(10) end, 0.05)
      end)
    end)

    it("nests: a task waits for the task it runs", function()
      local order = {}
      local r = kube.run(function()
        local inner = kube.run(function()
          kube.sleep(0.01)
          order[#order + 1] = "inner"
          return "inner result"
        end)
        order[#order + 1] = "outer"
        return inner
      end)
      assert.equal("inner result", r)
      assert.same({ "inner", "outer" }, order)
    end)

    it("ends the task it runs when the timeout passes first", function()
      local finished = false
      local ok = pcall(kube.run, function() kube.sleep(0.05); finished = true end, 0.01)
      assert.is_false(ok)
      kube.sleep(0.08)
      assert.is_false(finished)
    end)
  end)

  describe("spawn", function()
    it("runs functions in tasks on the next turn of the loop", function()
      local seen = {}
      kube.run(function()
        kube.spawn(function(a, b) seen[#seen + 1] = a .. b end, "x", "y")
        seen[#seen + 1] = "spawner"
        kube.sleep(0)
      end)
      assert.same({ "spawner", "xy" }, seen)
    end)

    it("rejects a non-function with the function's name", function()
      raises("kube.spawn: expected a function, got string", function() kube.spawn("nope") end)
    end)

    it("logs a failing task and keeps the loop running", function()
      local after = false
      kube.run(function()
        kube.spawn(function() error("task failure is only logged") end)
        kube.sleep(0.01)
        after = true
      end)
      assert.is_true(after)
    end)

    it("lets a bare coroutine.yield give other tasks a turn", function()
      local order = {}
      kube.run(function()
        kube.spawn(function()
          for i = 1, 3 do order[#order + 1] = "a" .. i; coroutine.yield() end
        end)
        kube.spawn(function()
          for i = 1, 3 do order[#order + 1] = "b" .. i; coroutine.yield() end
        end)
        kube.sleep(0.01)
      end)
      assert.same({ "a1", "b1", "a2", "b2", "a3", "b3" }, order)
    end)

    it("runs a new task on the thread of a task that returned, never of one that raised", function()
      local returned = kube.run(function() return coroutine.running(), "a result" end)
      local next_one, nargs = kube.run(function(...) return coroutine.running(), select("#", ...) end)
      assert.equal(returned, next_one)
      assert.equal(0, nargs)
      local raised
      pcall(kube.run, function() raised = coroutine.running(); error("boom") end)
      assert.equal("dead", coroutine.status(raised))
      assert.are_not.equal(raised, kube.run(function() return coroutine.running() end))
    end)
  end)

  describe("core.system", function()
    local generation = require "kubelua.generation"

    it("calls fn at once as the system's generation, whose task a reload does not end",
      function()
        local probe = {}
        package.loaded["system_probe"] = probe
        local path = support.tempfile([[
          local core = require "kubelua.core"
          local probe = require "system_probe"
          probe.gen = core.generation()
          probe.got = { core.system(function(a, b)
            core.spawn(function() core.sleep(0.05) probe.slept = core.generation() end)
            return core.generation(), a + b
          end, 1, 2) }
          probe.after = core.generation()
          probe.err = select(2, pcall(core.system, error, "no", 0))
          probe.after_err = core.generation()
        ]], ".lua")
        assert(generation.load(path))
        generation.unload()
        os.remove(path)
        package.loaded["system_probe"] = nil
        assert.is_true(probe.gen > 0)
        assert.same({ 0, 3 }, probe.got)
        assert.equal(probe.gen, probe.after)
        assert.equal("no", probe.err)
        assert.equal(probe.gen, probe.after_err)
        assert.is_true(support.eventually(function() return probe.slept ~= nil end))
        assert.equal(0, probe.slept)
      end)
  end)

  describe("sleep", function()
    it("wakes sleepers in deadline order", function()
      local order = {}
      kube.run(function()
        for _, d in ipairs({ 0.03, 0.01, 0.02 }) do
          kube.spawn(function() kube.sleep(d); order[#order + 1] = d end)
        end
        kube.sleep(0.05)
      end)
      assert.same({ 0.01, 0.02, 0.03 }, order)
    end)

    it("waits at least the time asked", function()
      local slept = kube.run(function()
        local t0 = kube.monotonic()
        kube.sleep(0.02)
        return kube.monotonic() - t0
      end)
      assert.is_true(slept >= 0.02)
    end)

    it("rejects a non-number", function()
      raises("kube.sleep: seconds must be a number, got string", function() kube.sleep("1") end)
    end)
  end)

  describe("after", function()
    it("runs the function in a task after the delay", function()
      local ran = kube.run(function()
        local ran = {}
        kube.after(0.01, function() kube.sleep(0); ran[#ran + 1] = "late" end)
        kube.after(0, function() ran[#ran + 1] = "now" end)
        -- until both ran (a fixed sleep loses to a loaded machine's late loop)
        local deadline = kube.monotonic() + 10
        while #ran < 2 and kube.monotonic() < deadline do kube.sleep(0.01) end
        return ran
      end)
      assert.same({ "now", "late" }, ran)
    end)

    it("can be cancelled while pending", function()
      local ran, first, second = kube.run(function()
        local ran = false
        local h = kube.after(0.01, function() ran = true end)
        local first = h:cancel()
        local second = h:cancel()
        kube.sleep(0.03)
        return ran, first, second
      end)
      assert.same({ false, true, false }, { ran, first, second })
    end)
  end)

  describe("log", function()
    it("rejects fields that are not a table", function()
      raises("kube.log: fields must be a table, got string", function() kube.log.info("x", "y") end)
    end)
  end)
end)
