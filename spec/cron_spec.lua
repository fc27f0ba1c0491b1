-- kubelua.cron: five-field specs, their errors, and the next fire time.
local cron = require "kubelua.cron"

local function at(y, m, d, h, mi)
  return os.time{ year = y, month = m, day = d, hour = h, min = mi, sec = 0, isdst = false }
    - os.time{ year = 1970, month = 1, day = 1, hour = 0, min = 0, sec = 0, isdst = false }
end

-- The next n fire times after t, as "YYYY-MM-DD HH:MM" in UTC.
local function next_n(spec, t, n, tz)
  local s = cron.parse(spec, tz)
  local out = {}
  for i = 1, n do
    t = cron.next(s, t)
    out[i] = os.date("!%Y-%m-%d %H:%M", t)
  end
  return out
end

local function fails(msg, spec, tz)
  local ok, err = pcall(cron.parse, spec, tz)
  assert.is_false(ok)
  assert.equal(msg, err)
end

describe("kubelua.cron", function()
  local t0 = at(2026, 12, 5, 11, 58) + 30 -- Saturday 2026-12-05 11:58:30 UTC

  describe("next", function()
    it("steps, ranges and lists", function()
      assert.same({ "2026-12-05 12:00", "2026-12-05 12:05", "2026-12-05 12:10" },
                  next_n("*/5 * * * *", t0, 3))
      assert.same({ "2026-12-05 11:59", "2026-12-05 12:00" }, next_n("* * * * *", t0, 2))
      assert.same({ "2026-12-05 13:10", "2026-12-05 13:30", "2026-12-05 13:50",
                    "2026-12-05 14:10" }, next_n("10-50/20 13-14 * * *", t0, 4))
      assert.same({ "2026-12-15 02:30", "2027-01-01 02:30", "2027-01-15 02:30" },
                  next_n("30 2 1,15 * *", t0, 3))
    end)

    it("month and day names, Sunday as 0 or 7, and the macros", function()
      assert.same({ "2026-12-07 09:00", "2026-12-08 09:00", "2026-12-11 09:00",
                    "2026-12-14 09:00" }, next_n("0 9 * * MON-tue,fri", t0, 4))
      assert.same({ "2026-12-06 00:00", "2026-12-13 00:00" }, next_n("0 0 * * 7", t0, 2))
      assert.same({ "2026-12-06 00:00", "2026-12-13 00:00" }, next_n("@weekly", t0, 2))
      assert.same({ "2027-02-01 00:00", "2027-03-01 00:00" }, next_n("0 0 1 feb-mar *", t0, 2))
      assert.same({ "2026-12-05 12:00" }, next_n("@hourly", t0, 1))
      assert.same({ "2027-01-01 00:00" }, next_n("@yearly", t0, 1))
    end)

    it("fires on either day when both day fields are restricted (Vixie cron)", function()
      -- every 13th and every Friday
      assert.same({ "2026-12-11 00:00", "2026-12-13 00:00", "2026-12-18 00:00" },
                  next_n("0 0 13 * fri", t0, 3))
      -- day-of-week unrestricted: only the 13th
      assert.same({ "2026-12-13 00:00", "2027-01-13 00:00" }, next_n("0 0 13 * *", t0, 2))
      -- "*/2" counts as unrestricted, as in Vixie cron: both must match
      assert.same({ "2027-04-01 00:00" }, next_n("0 0 1 * */2", t0, 1)) -- a Thursday
    end)

    it("in a fixed offset from UTC, and leap days", function()
      assert.same({ "2026-12-05 22:30" }, next_n("0 4 * * *", t0, 1, "+05:30"))
      assert.same({ "2026-12-06 07:00" }, next_n("0 2 * * *", t0, 1, "UTC-5"))
      assert.same({ "2028-02-29 00:00", "2032-02-29 00:00" }, next_n("0 0 29 2 *", t0, 2))
      assert.is_nil(cron.next(cron.parse("0 0 30 2 *"), t0))
    end)
  end)

  describe("parse", function()
    it("names the field that is wrong", function()
      fails('a cron spec has 5 fields (minute hour day-of-month month day-of-week), got 4 in'
            .. ' "* * * *"', "* * * *")
      fails('bad minute field "61": 61 is out of range 0-59', "61 * * * *")
      fails('bad hour field "*/0": step "0" is not a positive number', "* */0 * * *")
      fails('bad day-of-month field "0": 0 is out of range 1-31', "* * 0 * *")
      fails('bad month field "foo": "foo" is not a number or a name', "* * * foo *")
      fails('bad day-of-week field "5-2": range 5-2 starts after it ends', "* * * * 5-2")
      fails('bad minute field "1,,2": an empty list item', "1,,2 * * * *")
      fails('tz must be "UTC" or a fixed offset such as "+02:00", got "Europe/Paris"',
            "* * * * *", "Europe/Paris")
      fails("a cron spec must be a string, got nil", nil)
    end)
  end)
end)
