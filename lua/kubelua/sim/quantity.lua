-- kubelua.sim.quantity: resource quantities ("500m", "1Gi", "1e3") in the
-- canonical form a real server stores and returns them in, so that a
-- controller comparing what it wrote with what it reads back sees what a
-- cluster would show it ("0.5" comes back "500m", "1024Mi" comes back
-- "1Gi").
--
-- As apimachinery's resource.Quantity: a text its parser finds canonical
-- already (scale a multiple of 3, no trailing "000" nor leading 0 in its
-- digits; binary: whole and not a multiple of 8) is kept as written, sign
-- and all ("+1", "5.", "1E3", "1.500"). Otherwise the suffix picks the format (none
-- and k, M, G, T, P, E, m, u, n: decimal SI; Ki … Ei: binary SI; e or E
-- and an exponent: decimal exponent); a value finer than 1n is rounded up
-- (away from zero); a binary SI value beyond int64 is capped to its largest;
-- trailing zeros go, then the exponent is brought down to a multiple of 3
-- (decimal) or the largest power of 1024 that divides the value (binary).
-- A binary value below 1024 or not whole is written as decimal SI. The
-- arithmetic is on strings of digits, so nothing is rounded by accident.

local json = require "kubelua.json"

local type, pairs, tonumber = type, pairs, tonumber
local floor = math.floor
local format, rep, sub, byte, char = string.format, string.rep, string.sub, string.byte,
  string.char
local concat = table.concat

local _M = {}

_M.FORMAT_ERROR = "quantities must match the regular expression "
  .. "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_M.SUFFIX_ERROR = "unable to parse quantity's suffix"

local MAX = "9223372036854775807" -- int64's largest

local DECIMAL = { n = -9, u = -6, m = -3, [""] = 0, k = 3, M = 6, G = 9, T = 12, P = 15, E = 18 }
local BINARY = { Ki = 1, Mi = 2, Gi = 3, Ti = 4, Pi = 5, Ei = 6 }
local DECIMAL_SUFFIX, BINARY_SUFFIX = {}, { [0] = "" }
for s, e in pairs(DECIMAL) do DECIMAL_SUFFIX[e] = s end
for s, e in pairs(BINARY) do BINARY_SUFFIX[e] = s end

-- Digit strings (no leading zeros; "" is zero) --------------------------------

local function trim(d) return (d:gsub("^0+", "")) end

local function mul(d, k)
  local out, carry = {}, 0
  for i = #d, 1, -1 do
    local v = (byte(d, i) - 48) * k + carry
    out[#out + 1] = char(48 + v % 10)
    carry = (v - v % 10) / 10
  end
  while carry > 0 do
    out[#out + 1] = char(48 + carry % 10)
    carry = (carry - carry % 10) / 10
  end
  return trim(concat(out):reverse())
end

-- d / k and d % k, for a small k.
local function divmod(d, k)
  local out, r = {}, 0
  for i = 1, #d do
    local v = r * 10 + byte(d, i) - 48
    out[i] = char(48 + (v - v % k) / k)
    r = v % k
  end
  return trim(concat(out)), r
end

local function less(a, b) return #a < #b or (#a == #b and a < b) end

local function increment(d)
  local i = #d
  while i > 0 and sub(d, i, i) == "9" do i = i - 1 end
  if i == 0 then return "1" .. rep("0", #d) end
  return sub(d, 1, i - 1) .. char(byte(d, i) + 1) .. rep("0", #d - i)
end

-- Whether digits * 10^exp is beyond int64.
local function beyond(digits, exp)
  if exp >= 0 then
    local whole = digits .. rep("0", exp)
    return less(MAX, whole)
  end
  local whole = trim(sub(digits, 1, #digits + exp))
  return less(MAX, whole) or (whole == MAX and sub(digits, #digits + exp + 1):find("[1-9]") ~= nil)
end

-- A JSON number as a client writes it: a whole one plainly, another in
-- its shortest form that reads back the same.
local function json_text(v)
  if v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then return format("%.0f", v) end
  local s
  for digits = 1, 17 do
    s = format("%." .. digits .. "g", v)
    if tonumber(s) == v then break end
  end
  return s
end

-- Whether ParseQuantity keeps the text as it came (its fast path takes
-- a text as canonical and reuses it): int and frac the digits around the
-- point (int without leading zeros), exp the decimal exponent, binary the
-- power of 1024.
local function cached(int, frac, exp, binary)
  if binary then
    -- whole, few enough digits, and not a multiple of 8 (then it is
    -- written anew, in the largest unit that divides it)
    local precision = 15 - #int - floor(binary * 10 * 3 / 10) - 1
    return frac == "" and precision >= 0 and tonumber(int) % 8 ~= 0
  end
  local shifted = int .. frac
  local scale = exp - #frac
  return #shifted <= 18 and scale >= -9 and scale % 3 == 0 and sub(shifted, -3) ~= "000"
    and sub(shifted, 1, 1) ~= "0"
end

-- The canonical text of a quantity given as a string or a JSON number (null
-- is the zero quantity); nil and the message a real server's decoder gives
-- when it is not one.
function _M.canonical(v)
  local s = v
  if type(v) == "number" then
    s = json_text(v)
  elseif v == nil or v == json.null then
    return "0"
  end
  if type(s) ~= "string" then return nil, _M.FORMAT_ERROR end
  s = s:match("^%s*(.-)%s*$") -- as UnmarshalJSON trims it
  if s == "" then return nil, _M.FORMAT_ERROR end
  -- parseQuantityString: a sign, digits (leading zeros dropped; none is
  -- zero), "." and digits, suffix letters, a sign and digits
  local sign, rest = s:match("^([+-]?)(.*)$")
  local int, frac, suffix = rest:match("^0*(%d*)%.?(%d*)(.*)$")
  if int == "" then int = "0" end
  local letters = suffix:match("^[eEinumkKMGTP]*")
  if not suffix:sub(#letters + 1):match("^[-+]?%d*$") then return nil, _M.FORMAT_ERROR end
  local exp, fmt, binary = 0, "decimal", nil
  if DECIMAL[suffix] then
    exp = DECIMAL[suffix]
  elseif BINARY[suffix] then
    fmt, binary = "binary", BINARY[suffix]
  else
    local e = #suffix > 1 and suffix:match("^[eE]([-+]?%d+)$")
    e = e and tonumber(e)
    if not e or e >= 2 ^ 31 or e < -2 ^ 31 then return nil, _M.SUFFIX_ERROR end
    fmt, exp = "exponent", e
  end
  if cached(int, frac, exp, binary) then return s end
  sign = sign == "-" and "-" or ""
  -- the value is sign digits * 10^exp (* 1024^binary)
  local digits = trim(int .. frac)
  exp = exp - #frac
  if digits == "" then return "0" end
  if binary then
    for _ = 1, binary do digits = mul(digits, 1024) end
    if exp >= 0 then
      digits, exp = digits .. rep("0", exp), 0
    elseif not sub(digits, exp):find("[1-9]") and #digits > -exp then
      digits, exp = sub(digits, 1, #digits + exp), 0
    end
    if beyond(digits, exp) then return sign .. MAX end
    if exp == 0 and not less(digits, "1024") then
      local k = 0
      while true do
        local q, r = divmod(digits, 1024)
        if r ~= 0 or less(digits, "1024") then break end
        digits, k = q, k + 1
      end
      return sign .. digits .. BINARY_SUFFIX[k]
    end
    fmt = "decimal" -- below 1024 or not whole
  end
  -- finer than 1n: rounded up to it
  if exp < -9 then
    local keep = #digits + exp + 9
    local cut = keep > 0 and sub(digits, keep + 1) or digits
    digits = keep > 0 and sub(digits, 1, keep) or ""
    if cut:find("[1-9]") then digits = increment(digits == "" and "0" or digits) end
    digits, exp = trim(digits), -9
    if digits == "" then return "0" end
  end
  local stripped = digits:gsub("0+$", "")
  digits, exp = stripped, exp + #digits - #stripped
  local down = exp % 3
  digits, exp = digits .. rep("0", down), exp - down
  if fmt == "decimal" and DECIMAL_SUFFIX[exp] then return sign .. digits .. DECIMAL_SUFFIX[exp] end
  if exp == 0 then return sign .. digits end
  return sign .. digits .. "e" .. exp
end

return _M
