-- kubelua.cron: the five-field cron specs of kube.schedule (Vixie cron's,
-- as shell-operator's crontab bindings and Kubernetes CronJobs take them),
-- parsed once, and the next time one fires.
--
--   minute hour day-of-month month day-of-week
--   "*/5 * * * *"   "0 9-17 * * mon-fri"   "30 2 1,15 * *"   "@daily"
--
-- A field is a list (",") of "*", a value or a range "a-b", each with an
-- optional step "/n" ("*/15", "10-50/20", "5/10" = 5 to the end by 10).
-- Months take jan…dec, days of the week sun…sat (0 and 7 are Sunday),
-- both in any case. The macros @yearly (@annually), @monthly, @weekly,
-- @daily (@midnight) and @hourly stand for their five fields. When both
-- day-of-month and day-of-week are restricted (neither starts with "*"),
-- a day matching either fires (Vixie cron's rule: "0 0 13 * fri" is every
-- 13th and every Friday); otherwise both must match.
--
-- Time zones: UTC, or a fixed offset from it ("+02:00", "-05:30",
-- "UTC+2"); named zones with daylight saving are not supported (a spec in
-- local time would fire twice or never on the days clocks change).

local type, tonumber, error, ipairs = type, tonumber, error, ipairs
local floor, format = math.floor, string.format

local _M = {}

local FIELDS = {
  { name = "minute", min = 0, max = 59 },
  { name = "hour", min = 0, max = 23 },
  { name = "day-of-month", min = 1, max = 31 },
  { name = "month", min = 1, max = 12, names = { jan = 1, feb = 2, mar = 3, apr = 4, may = 5,
    jun = 6, jul = 7, aug = 8, sep = 9, oct = 10, nov = 11, dec = 12 } },
  { name = "day-of-week", min = 0, max = 7, names = { sun = 0, mon = 1, tue = 2, wed = 3,
    thu = 4, fri = 5, sat = 6 } },
}

local MACROS = { ["@yearly"] = "0 0 1 1 *", ["@annually"] = "0 0 1 1 *",
  ["@monthly"] = "0 0 1 * *", ["@weekly"] = "0 0 * * 0", ["@daily"] = "0 0 * * *",
  ["@midnight"] = "0 0 * * *", ["@hourly"] = "0 * * * *" }

local function bad(f, text, why)
  error(format("bad %s field %q: %s", f.name, text, why), 0)
end

local function value(f, text, s)
  local n = tonumber(s:match("^%d+$") or nil)
  if not n and f.names then n = f.names[s:lower()] end
  if not n then
    bad(f, text, format("%q is not a number%s", s, f.names and " or a name" or ""))
  end
  if n < f.min or n > f.max then
    bad(f, text, format("%d is out of range %d-%d", n, f.min, f.max))
  end
  return n
end

-- One field → a set of the values it matches, and whether it starts with
-- "*" (unrestricted, for the day rule).
local function field(f, text)
  local set = {}
  for item in (text .. ","):gmatch("([^,]*),") do
    if item == "" then bad(f, text, "an empty list item") end
    local range, step = item:match("^([^/]+)/(.*)$")
    range = range or item
    local by = 1
    if step then
      by = tonumber(step:match("^%d+$") or nil)
      if not by or by == 0 then bad(f, text, format("step %q is not a positive number", step)) end
    end
    local lo, hi
    if range == "*" then
      lo, hi = f.min, f.max
    else
      local a, b = range:match("^([^-]+)-([^-]+)$")
      if a then
        lo, hi = value(f, text, a), value(f, text, b)
        if lo > hi then bad(f, text, format("range %s starts after it ends", range)) end
      else
        lo = value(f, text, range)
        hi = step and f.max or lo
      end
    end
    for v = lo, hi, by do set[v] = true end
  end
  if f.name == "day-of-week" and set[7] then set[0] = true end
  return set, text:sub(1, 1) == "*"
end

-- The offset in seconds of a time zone, or raises.
local function offset(tz)
  if tz == nil or tz == "UTC" or tz == "Z" then return 0 end
  local s = type(tz) == "string" and tz:gsub("^UTC", "") or ""
  local sign, h, m = s:match("^([+-])(%d%d?):?(%d?%d?)$")
  h, m = tonumber(h), tonumber(m ~= "" and m or "0")
  if not sign or h > 14 or m > 59 then
    error(format('tz must be "UTC" or a fixed offset such as "+02:00", got %s',
                 type(tz) == "string" and format("%q", tz) or type(tz)), 0)
  end
  return (sign == "-" and -1 or 1) * (h * 3600 + m * 60)
end

-- parse(spec [, tz]) -> a schedule, or raises with a message naming the
-- field ("bad minute field \"61\": 61 is out of range 0-59").
function _M.parse(spec, tz)
  if type(spec) ~= "string" then error("a cron spec must be a string, got " .. type(spec), 0) end
  local text = MACROS[spec:lower()] or spec
  local parts = {}
  for p in text:gmatch("%S+") do parts[#parts + 1] = p end
  if #parts ~= 5 then
    error(format("a cron spec has 5 fields (minute hour day-of-month month day-of-week), "
                 .. "got %d in %q", #parts, spec), 0)
  end
  local s = { spec = spec, offset = offset(tz) }
  for i, f in ipairs(FIELDS) do
    local set, star = field(f, parts[i])
    s[i] = set
    if i == 3 then s.dom_star = star elseif i == 5 then s.dow_star = star end
  end
  return s
end

-- Days since 1970-01-01 of a civil date, and back (proleptic Gregorian).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local d = doy - floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
end

local function day_matches(s, days, d)
  local dom, dow = s[3][d], s[5][(days + 4) % 7] -- 1970-01-01 was a Thursday
  if not s.dom_star and not s.dow_star then return dom or dow end
  return dom and dow
end

-- next(s, t) -> the first time (seconds since the epoch) after t when s
-- fires, or nil when it never does within 8 years ("0 0 30 2 *").
function _M.next(s, t)
  local lt = floor((t + s.offset) / 60) * 60 + 60 -- the next whole minute, local
  local days = floor(lt / 86400)
  local mins = (lt - days * 86400) / 60
  local last = days + 366 * 8
  while days <= last do
    local y, m, d = civil_from_days(days)
    if not s[4][m] then
      days = days_from_civil(m == 12 and y + 1 or y, m == 12 and 1 or m + 1, 1)
      mins = 0
    elseif not day_matches(s, days, d) then
      days, mins = days + 1, 0
    else
      local h, mi = floor(mins / 60), mins % 60
      while h < 24 do
        if s[2][h] then
          while mi < 60 do
            if s[1][mi] then return days * 86400 + h * 3600 + mi * 60 - s.offset end
            mi = mi + 1
          end
        end
        h, mi = h + 1, 0
      end
      days, mins = days + 1, 0
    end
  end
  return nil
end

return _M
