-- kubelua.strict: the checks that make a misspelt option an error instead
-- of a silent default. kube.controller{} and kube.informer's opts name
-- their keys; a key outside them raises with the nearest valid one (by
-- Damerau-Levenshtein distance, optimal string alignment: a swap of two
-- neighbours costs one), and a value of the wrong type names the type and
-- the value it got.

local type, pairs, ipairs, error, tostring = type, pairs, ipairs, error, tostring
local min, max, floor = math.min, math.max, math.floor
local sort, format = table.sort, string.format

local _M = {}

-- distance(a, b) -> the edits (insert, delete, replace, swap of two
-- neighbours) that turn a into b.
function _M.distance(a, b)
  local la, lb = #a, #b
  local d = {}
  for i = 0, la do d[i] = { [0] = i } end
  for j = 0, lb do d[0][j] = j end
  for i = 1, la do
    local ca = a:byte(i)
    for j = 1, lb do
      local cb = b:byte(j)
      local cost = ca == cb and 0 or 1
      local v = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and ca == b:byte(j - 1) and a:byte(i - 1) == cb then
        v = min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[la][lb]
end

-- nearest(word, valid) -> the valid key closest to word, or nil when none
-- is within a third of the longer one's length (at least 2 edits), so
-- that a word unlike any gets no suggestion. Ties go to the first in
-- sorted order.
function _M.nearest(word, valid)
  local names = {}
  for k in pairs(valid) do names[#names + 1] = k end
  sort(names)
  local best, best_d
  for _, k in ipairs(names) do
    local d = _M.distance(word, k)
    local limit = max(2, floor(max(#word, #k) / 3))
    if d <= limit and (best_d == nil or d < best_d) then best, best_d = k, d end
  end
  return best
end

-- keys(t, valid, where, level): raises for the first key of t (in sorted
-- order, so the message is stable) that valid (a set) lacks:
-- `unknown key "own" in kube.controller{}; did you mean "owns"?`.
function _M.keys(t, valid, where, level)
  local bad = {}
  for k in pairs(t) do
    if type(k) ~= "string" or not valid[k] then bad[#bad + 1] = tostring(k) end
  end
  if #bad == 0 then return end
  sort(bad)
  local k = bad[1]
  local near = _M.nearest(k, valid)
  local hint = near and format("; did you mean %q?", near) or ""
  error(format("unknown key %q in %s", k, where) .. hint, (level or 1) + 1)
end

-- describe(v) -> its type and, for a string, number or boolean, its value:
-- `string "2"`, `number 2`, `boolean true`, `table`.
function _M.describe(v)
  local t = type(v)
  if t == "string" then return format("string %q", v) end
  if t == "number" or t == "boolean" then return t .. " " .. tostring(v) end
  return t
end

-- type_error(name, want, v) -> "name must be a want, got string \"2\"".
function _M.type_error(name, want, v)
  return name .. " must be " .. want .. ", got " .. _M.describe(v)
end

return _M
