-- kube.schedule in a loaded script, on a clock the spec drives: fire
-- times, errors, and named schedules across a reload.
local kube = require "kubelua"
local support = require "spec.support"
local testing = require "kubelua.testing"

local T = os.time{ year = 2026, month = 12, day = 5, hour = 12, min = 0, sec = 30, isdst = false }
  - os.time{ year = 1970, month = 1, day = 1, hour = 0, min = 0, sec = 0, isdst = false }

local function hhmm(at) return os.date("!%H:%M", at) end

describe("kube.schedule", function()
  local t, saved, clock
  before_each(function()
    t = testing.start()
    saved = kube._schedule_clock
    -- the spec's clock: it moves only when the spec says; hold keeps every
    -- schedule waiting
    clock = { t = T, hold = false }
    kube._schedule_clock = {
      now = function() return clock.t end,
      sleep = function(s)
        local target = clock.t + s
        while clock.hold or clock.t < target do kube.sleep(0.005) end
      end,
    }
    _G.fired, _G.first = {}, {}
  end)
  after_each(function()
    t:stop()
    kube._schedule_clock = saved
    _G.fired, _G.first = nil, nil
  end)

  local function script(body)
    return support.tempfile("local kube = require 'kubelua'\n" .. body, ".lua")
  end

  it("calls fn at each time the spec names, with that time; an error is logged", function()
    local logs = {}
    local save_error = kube.log.error
    kube.log.error = function(msg, f) logs[#logs + 1] = msg .. " " .. f.schedule end
    t:load(script([[
      kube.schedule("*/5 * * * *", function(at)
        _G.fired[#_G.fired + 1] = at
        if #_G.fired == 2 then error("boom") end
      end)
    ]]))
    clock.t = T + 60 * 5 -- 12:05:30
    t:eventually(function() return #_G.fired == 1 end)
    clock.t = T + 60 * 10
    t:eventually(function() return #_G.fired == 2 end)
    kube.sleep(0.05)
    kube.log.error = save_error
    assert.same({ "12:05", "12:10" }, { hhmm(_G.fired[1]), hhmm(_G.fired[2]) })
    assert.same({ "schedule failed */5 * * * *" }, logs)
    -- the clock jumps (the process was held): 12:15 and 12:20 fire once,
    -- late, as 12:15, and 12:25 comes next
    clock.t = T + 60 * 22
    t:eventually(function() return #_G.fired == 3 end)
    assert.equal("12:15", hhmm(_G.fired[3]))
    clock.t = T + 60 * 25
    t:eventually(function() return #_G.fired == 4 end)
    assert.equal("12:25", hhmm(_G.fired[4]))
  end)

  it("a named schedule keeps its next fire time across a reload, and fires once", function()
    local path = script([[
      _G.first[#_G.first + 1] = kube.schedule("job", "*/5 * * * *", function(at)
        _G.fired[#_G.fired + 1] = "job " .. os.date("!%H:%M", at)
      end)
      _G.first[#_G.first + 1] = kube.schedule("*/5 * * * *", function(at)
        _G.fired[#_G.fired + 1] = "unnamed " .. os.date("!%H:%M", at)
      end)
    ]])
    t:load(path)
    clock.hold = true
    clock.t = T + 5 * 60 -- 12:05:30: due, and nothing fired yet
    t:reload()
    -- the named one keeps 12:05; the unnamed one starts again: 12:10
    assert.same({ "12:05", "12:05", "12:05", "12:10" }, {
      hhmm(_G.first[1]), hhmm(_G.first[2]), hhmm(_G.first[3]), hhmm(_G.first[4]) })
    clock.hold = false
    t:eventually(function() return #_G.fired == 1 end)
    kube.sleep(0.05)
    assert.same({ "job 12:05" }, _G.fired)
    clock.t = T + 10 * 60
    t:eventually(function() return #_G.fired == 3 end)
    table.sort(_G.fired)
    assert.same({ "job 12:05", "job 12:10", "unnamed 12:10" }, _G.fired)
  end)

  it("rejects a bad spec, naming the field", function()
    support.raises('kube.schedule: bad minute field "61": 61 is out of range 0-59',
                   function() kube.schedule("61 * * * *", function() end) end)
    support.raises('kube.schedule: fn must be a function, got nil',
                   function() kube.schedule("x", "* * * * *") end)
    support.raises('kube.schedule: "0 0 30 2 *" never fires',
                   function() kube.schedule("0 0 30 2 *", function() end) end)
    support.raises('unknown key "tx" in kube.schedule opts; did you mean "tz"?',
                   function() kube.schedule("* * * * *", function() end, { tx = "UTC" }) end)
  end)
end)
