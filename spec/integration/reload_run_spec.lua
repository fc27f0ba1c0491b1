-- Hot reload of `kubelua run`: the triggers (an edited file, an editor's
-- rename over the file, a ConfigMap volume's `..data` symlink swap, a
-- module the script requires, SIGHUP) and the log lines.
local support = require "spec.support"
local helper = require "spec.integration.sim_helper"
local procs = require "spec.integration.proc_helper"

local kube = require "kubelua"
local ffi = require "ffi" -- kill(), declared by sim_helper
local sleep, read_file, quote = helper.sleep, helper.read_file, helper.quote

local function sh(cmd) assert(os.execute(cmd) == 0, cmd) end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- Writes as an editor that renames a new file over the old one does: no
-- look at the file, however slow this process runs, finds it half written
-- (an in-place write's truncated file is an empty script, which loads).
local function replace(path, text)
  write(path .. ".new", text)
  assert(os.rename(path .. ".new", path))
end

-- The controller reports its version and the keys it reconciles in the
-- log; the simulator starts with one ConfigMap.
local function script(version, extra)
  return ([[
local kube = require "kubelua"
local VERSION = %q
kube.log.info("loaded", { version = VERSION, helper = HELPER_VERSION })
%s
]]):format(version, extra or "")
end

local function start(path, options)
  return procs.start("--sim " .. (options or "") .. " " .. quote(path))
end

local wait_log, count = procs.wait_log, procs.count

-- SIGTERM, wait, and the log (checked for sanitizer reports).
local stop = helper.stop

describe("kubelua run hot reload", function()
  local dir

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    sh("mkdir -p " .. dir)
  end)

  after_each(function() sh("rm -rf " .. quote(dir)) end)

  it("reloads when the script is edited, and only when its content changed", function()
    local path = dir .. "/c.lua"
    write(path, script("A"))
    local proc = start(path)
    wait_log(proc, "loaded version=A")
    write(path, script("B"))
    local out = wait_log(proc, "reloaded: generation 2 ")
    assert.matches("loaded version=B", out)
    assert.matches("INFO  reloaded: generation 2 modules=0 script=" .. path:gsub("%p", "%%%0") .. "\n", out)
    -- an editor's write to a new file renamed over the old one
    write(path .. ".tmp", script("C"))
    sh("mv " .. quote(path .. ".tmp") .. " " .. quote(path))
    wait_log(proc, "reloaded: generation 3 ")
    sh("touch " .. quote(path)) -- same content: no reload
    sleep(0.6)
    out = stop(proc)
    assert.equal(3, count(out, "INFO  loaded "))
    assert.equal(0, count(out, "generation 4"))
  end)

  it("logs a broken script with file and line, and keeps the old generation", function()
    local path = dir .. "/c.lua"
    write(path, script("A"))
    local proc = start(path)
    wait_log(proc, "version=A")
    write(path, "local = 1\n")
    local out = wait_log(proc, "reload failed")
    assert.matches("ERROR reload failed; generation 1 keeps running: cannot load script: "
      .. path:gsub("%p", "%%%0") .. ":1: '<name>' expected near '=' script=", out)
    write(path, script("B", "error('bad value')"))
    out = wait_log(proc, "reload failed", 2)
    assert.matches("ERROR reload failed; generation 1 keeps running: script failed: "
      .. path:gsub("%p", "%%%0") .. ":4: bad value script=[^\n]*\n    stack traceback:\n", out)
    write(path, script("C"))
    out = wait_log(proc, "reloaded: generation 2 ")
    assert.matches("version=C", out)
    -- generations are numbered by the loads that succeeded
    assert.matches("INFO  reloaded: generation 2 modules=0 script=", out)
    out = stop(proc)
    assert.equal(0, count(out, "generation 3"))
  end)

  it("logs a failed reload once for each content, and the return to the running one", function()
    -- polled every 0.2 s: each poll would log the failure again
    local path = dir .. "/c.lua"
    write(path, script("A"))
    local proc = start(path, "--watch-poll 0.2")
    wait_log(proc, "version=A")
    replace(path, "local = 1\n")
    wait_log(proc, "reload failed")
    sleep(1.5)
    local out = read_file(proc.log)
    assert.equal(1, count(out, "reload failed"))
    replace(path, "local = 2\n") -- another content: said again, once
    wait_log(proc, "reload failed", 2)
    replace(path, script("A")) -- back to what generation 1 runs
    out = wait_log(proc, "files back")
    assert.matches("reload failed; generation 1 keeps running: cannot load script: "
      .. path:gsub("%p", "%%%0") .. ":1: '<name>' expected near '=' script=", out)
    assert.matches("INFO  files back to generation 1's content; it keeps running script="
      .. path:gsub("%p", "%%%0") .. "\n", out)
    replace(path, "local = 2\n") -- after a return, the same failure is news again
    wait_log(proc, "reload failed", 3)
    replace(path, script("B"))
    wait_log(proc, "reloaded: generation 2 ")
    sleep(1)
    out = stop(proc)
    assert.equal(3, count(out, "reload failed"))
    assert.equal(1, count(out, "files back"))
    assert.equal(1, count(out, "reloaded: "))
  end)

  it("reloads on a ConfigMap volume's ..data symlink swap", function()
    -- The layout the kubelet writes: c.lua -> ..data/c.lua, ..data -> ..v1
    sh("mkdir " .. dir .. "/..v1 && ln -s ..v1 " .. dir .. "/..data && ln -s ..data/c.lua "
       .. dir .. "/c.lua")
    write(dir .. "/..v1/c.lua", script("A"))
    local proc = start(dir .. "/c.lua")
    wait_log(proc, "version=A")
    sh("mkdir " .. dir .. "/..v2")
    write(dir .. "/..v2/c.lua", script("B"))
    sh("cd " .. dir .. " && ln -s ..v2 ..data_tmp && mv -T ..data_tmp ..data && rm -rf ..v1")
    local out = wait_log(proc, "reloaded: generation 2 ")
    assert.matches("version=B", out)
    stop(proc)
  end)

  it("reloads when a module the script requires changes", function()
    write(dir .. "/settings.lua", "HELPER_VERSION = 'h1'\nreturn {}\n")
    local path = dir .. "/c.lua"
    write(path, "require 'settings'\n" .. script("A"))
    local proc = start(path)
    wait_log(proc, "loaded helper=h1 version=A")
    write(dir .. "/settings.lua", "HELPER_VERSION = 'h2'\nreturn {}\n")
    local out = wait_log(proc, "reloaded: generation 2 ")
    assert.matches("loaded helper=h2 version=A", out)
    assert.matches("reloaded: generation 2 modules=1 ", out)
    stop(proc)
  end)

  it("reloads on SIGHUP, and with --no-watch only then", function()
    local path = dir .. "/c.lua"
    write(path, script("A"))
    local proc = start(path, "--no-watch")
    wait_log(proc, "version=A")
    write(path, script("B"))
    sleep(0.6)
    assert.equal(0, count(read_file(proc.log), "version=B"))
    ffi.C.kill(proc.pid, 1)
    local out = wait_log(proc, "reloaded: generation 2 ")
    assert.matches("version=B", out)
    assert.matches("INFO  SIGHUP: reloading script=" .. path:gsub("%p", "%%%0") .. "\n", out)
    assert.matches("reloaded: generation 2 ", out)
    out = stop(proc)
    assert.matches("signal 15: stopping gracefully", out)
  end)
end)

-- inotify alone: the poll is a minute away, and the controller logs every
-- 10 ms into a file next to the script (as `kubelua run c.lua >log` in the
-- script's directory does); the new code must run within a few seconds of
-- the write (it takes about the 0.2 s settle delay).
describe("kubelua run hot reload with the poll a minute away", function()
  local dir, proc
  local BOUND = 3

  local function busy(version)
    return ([[
local kube = require "kubelua"
local VERSION = %q
kube.spawn(function()
  while true do kube.log.info("running", { version = VERSION }) kube.sleep(0.01) end
end)
]]):format(version)
  end

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    sh("mkdir -p " .. dir)
  end)

  after_each(function()
    if proc then stop(proc) end
    proc = nil
    sh("rm -rf " .. quote(dir))
  end)

  local function run(path, opts)
    opts = opts or {}
    proc = procs.start("--watch-poll 60 " .. quote(path), { cwd = opts.cwd, log = dir .. "/out.log" })
    wait_log(proc, "running version=A")
  end

  -- Runs change(), then returns how long until version runs (BOUND + 1
  -- when it does not within BOUND).
  local function until_runs(change, version)
    local t0 = kube.monotonic()
    change()
    while kube.monotonic() - t0 < BOUND do
      if (read_file(proc.log) or ""):find("running version=" .. version, 1, true) then
        return kube.monotonic() - t0
      end
      sleep(0.01)
    end
    return BOUND + 1
  end

  it("runs an in-place write at once", function()
    local path = dir .. "/c.lua"
    write(path, busy("A"))
    run(path)
    assert.is_true(until_runs(function() write(path, busy("B")) end, "B") < BOUND)
    assert.matches("INFO  reloaded: generation 2 modules=0 script=" .. path:gsub("%p", "%%%0")
      .. "\n", read_file(proc.log))
  end)

  it("runs an editor's rename over the file (sed -i) at once", function()
    local path = dir .. "/c.lua"
    write(path, busy("A"))
    run(path)
    assert.is_true(until_runs(function() sh("sed -i s/A/B/ " .. quote(path)) end, "B") < BOUND)
    -- the renamed-in file is followed in turn
    assert.is_true(until_runs(function() sh("sed -i s/B/C/ " .. quote(path)) end, "C") < BOUND)
  end)

  it("runs a change of a script named by a relative path at once", function()
    write(dir .. "/c.lua", busy("A"))
    run("c.lua", { cwd = dir })
    assert.is_true(until_runs(function() write(dir .. "/c.lua", busy("B")) end, "B") < BOUND)
    assert.is_true(until_runs(function() sh("cd " .. quote(dir) .. " && sed -i s/B/C/ c.lua") end,
                              "C") < BOUND)
    assert.matches("INFO  reloaded: generation 3 modules=0 script=c.lua\n", read_file(proc.log))
  end)

  it("runs a ConfigMap volume's ..data symlink swap at once", function()
    sh("mkdir " .. dir .. "/..v1 && ln -s ..v1 " .. dir .. "/..data && ln -s ..data/c.lua "
       .. dir .. "/c.lua")
    write(dir .. "/..v1/c.lua", busy("A"))
    run(dir .. "/c.lua")
    local function swap(from, to, version)
      return function()
        sh("mkdir " .. dir .. "/" .. to)
        write(dir .. "/" .. to .. "/c.lua", busy(version))
        sh("cd " .. dir .. " && ln -s " .. to .. " ..data_tmp && mv -T ..data_tmp ..data && rm -rf "
           .. from)
      end
    end
    assert.is_true(until_runs(swap("..v1", "..v2", "B"), "B") < BOUND)
    assert.is_true(until_runs(swap("..v2", "..v3", "C"), "C") < BOUND)
  end)

  it("refuses a --watch-poll that is not positive seconds", function()
    local status, out = support.sh(support.kubelua .. " run --watch-poll 0 x.lua")
    assert.equal(2, status)
    assert.matches('kubelua: --watch-poll needs positive seconds, got "0"', out, 1, true)
  end)
end)
