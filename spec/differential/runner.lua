-- Runs one sequence of requests against every target and compares the
-- answers step by step.
--
-- A step is { label, method, path, body, headers, token, watch, concurrent,
-- unordered, wait, prepare, after }: label names it in reports
-- ("create configmaps");
-- body is a table (sent as JSON) or a string (sent as is); token = false
-- sends no credentials, a string sends that token; watch = true reads the
-- answer as a watch stream; consecutive steps with concurrent = true are
-- sent at once (watches that each wait for their timeout); unordered =
-- true compares a list's items or a watch's events sorted by name (a real
-- server's watch cache keeps no order); wait(res) false sends the request
-- again 50 ms later (for at most 5 s); call(t, st) -> res replaces the
-- request (something else to compare, or requests of its own). prepare(st, rq)
-- fills in what differs per server (a resourceVersion, a continue token)
-- from st, the target's state; after(st, res) records what later steps
-- need. st.last[path] is the last object read or written at an object's
-- path (without the query), st.first[path] the first; st.marks[name] is
-- free for prepare and after.
local kube = require "kubelua"
local json = require "kubelua.json"
local target = require "spec.differential.target"
local normalize = require "spec.differential.normalize"
local compare = require "spec.differential.compare"

local type, ipairs, pairs, tostring, pcall, setmetatable, getmetatable =
  type, ipairs, pairs, tostring, pcall, setmetatable, getmetatable

local _M = {}

local function copy(v)
  if type(v) ~= "table" or v == json.null then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = copy(x) end
  return setmetatable(t, getmetatable(v))
end
_M.copy = copy

-- The path of the object an answer is about: the request's path without
-- its query, plus the name for a create.
local function object_path(rq, obj)
  local path = rq.path:match("^[^?]*")
  local name = type(obj.metadata) == "table" and obj.metadata.name
  if rq.method == "POST" and type(name) == "string" then path = path .. "/" .. name end
  return path:gsub("/status$", ""):gsub("/scale$", "")
end

local function remember(st, rq, res)
  local obj = res.body
  if type(obj) ~= "table" or type(obj.metadata) ~= "table" or obj.items ~= nil
      or obj.kind == "Status" or res.status >= 300 then
    return
  end
  local path = object_path(rq, obj)
  st.last[path] = obj
  if not st.first[path] then st.first[path] = obj end
end

local function send(t, st, step)
  local rq = { method = step.method, path = step.path, body = copy(step.body),
    headers = step.headers, token = step.token }
  if step.prepare then step.prepare(st, rq) end
  local res
  for _ = 1, 100 do
    if step.call then
      res = step.call(t, st)
    elseif step.watch then
      res = t:watch(rq.path)
    else
      res = t:request(rq)
    end
    if not step.wait or step.wait(res) then break end
    kube.sleep(0.05)
  end
  if not step.call then remember(st, rq, res) end
  if step.after then step.after(st, res) end
  return res
end

-- Runs the steps on target t; returns the answers in order.
local function play(t, steps)
  local st = { last = {}, first = {}, marks = {}, target = t.name }
  local out = {}
  local i = 1
  while i <= #steps do
    local j = i
    while steps[j + 1] and steps[i].concurrent and steps[j + 1].concurrent do j = j + 1 end
    if j == i then
      out[i] = send(t, st, steps[i])
    else
      local left = j - i + 1
      for k = i, j do
        kube.spawn(function()
          local ok, res = pcall(send, t, st, steps[k])
          out[k] = ok and res or { status = 0, body = "error: " .. tostring(res) }
          left = left - 1
        end)
      end
      while left > 0 do kube.sleep(0.005) end
    end
    i = j + 1
  end
  return out
end

local function name_of(v)
  if type(v) ~= "table" then return "" end
  local obj = v.object or v
  return type(obj.metadata) == "table" and tostring(obj.metadata.name) or ""
end

-- What a comparison looks at in one answer.
local function view(res, step)
  local body = res.events or res.body
  if step.unordered and type(body) == "table" then
    body = copy(body)
    local list = body.items or body
    if type(list) == "table" then
      table.sort(list, function(a, b) return name_of(a) < name_of(b) end)
    end
  end
  return { status = res.status, ["content-type"] = res.content_type,
    warning = res.warning, body = body }
end

-- run(targets, case, steps, tally) -> the differences no known entry
-- explains, as lines. targets[1] is the simulator, targets[2] the real
-- server.
function _M.run(targets, case, steps, tally)
  local answers = target.each(targets, function(t) return play(t, steps) end)
  local views = {}
  for n, list in ipairs(answers) do
    local ctx = normalize.new()
    for i, res in ipairs(list) do ctx:see(view(res, steps[i]).body, steps[i].label) end
    views[n] = {}
    for i, res in ipairs(list) do views[n][i] = ctx:apply(view(res, steps[i])) end
  end
  local lines = {}
  for i, step in ipairs(steps) do
    tally:step(case, step.label)
    local diffs = compare.diff(views[1][i], views[2][i], "", {})
    for _, d in ipairs(tally:differences(case, step.label, diffs)) do
      lines[#lines + 1] = compare.describe(d)
    end
  end
  return lines, answers
end

return _M
