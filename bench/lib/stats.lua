-- Figures over repeated runs, for the benchmarks that repeat them (single
-- runs on a small VM vary by tens of percent).
local _M = {}

-- The median of the numbers in v (left as it was).
function _M.median(v)
  local s = {}
  for i, x in ipairs(v) do s[i] = x end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

return _M
