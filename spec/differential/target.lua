-- A server the differential suite talks to: the simulator in this process
-- or a real kube-apiserver. Both get the very same requests through
-- kube.http.request (the real one over TLS with its CA and bearer token),
-- inside a task, so a request yields until its answer arrives.
local kube = require "kubelua"
local http = require "kubelua.http"
local json = require "kubelua.json"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local encode, decode = json.encode, json.decode

local _M = {}
local Target = {}
Target.__index = Target

-- Sent by both sides: a client that is not curl gets compact JSON, and
-- the field manager of every non-apply write is "kubelua-differential".
_M.USER_AGENT = "kubelua-differential/1"

-- new{ name, server, token, ca_file } -> target
function _M.new(o)
  return setmetatable({ name = o.name, server = o.server, token = o.token,
    tls = o.ca_file and { ca_file = o.ca_file } or nil }, Target)
end

-- The simulator, in this process on a loopback port, with token as its
-- admin's, without the controllers envtest does not run either; its
-- watches look at their timeout every 50 ms.
function _M.sim(token)
  local sim = require("kubelua.sim").new{ token = token, watch_check = 0.05,
    controllers = false }
  local srv = assert(sim:listen{ host = "127.0.0.1", port = 0 })
  local t = _M.new{ name = "sim", server = "http://127.0.0.1:" .. srv:port(), token = token }
  t.close = function() srv:close() end
  return t
end

-- t:request{ method, path, body (string or table), headers, token } ->
-- { status, content_type, warning, body (decoded JSON or the raw text),
-- raw }. token = false sends no Authorization header.
function Target:request(rq)
  local headers = { ["User-Agent"] = _M.USER_AGENT, Accept = "application/json" }
  local token = rq.token
  if token == nil then token = self.token end
  if token then headers.Authorization = "Bearer " .. token end
  local body = rq.body
  if body ~= nil and type(body) ~= "string" then body = encode(body) end
  if body ~= nil then headers["Content-Type"] = "application/json" end
  for k, v in pairs(rq.headers or {}) do headers[k] = v end
  local r, err = http.request{ method = rq.method, url = self.server .. rq.path,
    headers = headers, body = body, tls = self.tls, timeout = rq.timeout or 30 }
  if not r then error(self.name .. ": " .. rq.method .. " " .. rq.path .. ": " .. tostring(err)) end
  local out = { status = r.status, content_type = r.headers["content-type"],
    warning = r.headers.warning, raw = r.body }
  local v = decode(r.body)
  if v ~= nil then out.body = v else out.body = r.body end
  return out
end

-- t:watch(path) -> the events of a watch that ends by itself (the path
-- carries timeoutSeconds), decoded one per line; a line that is not JSON
-- stays text.
function Target:watch(path, timeout)
  local r = self:request{ method = "GET", path = path, timeout = timeout or 30 }
  local events = {}
  for line in r.raw:gmatch("[^\n]+") do
    local ev = decode(line)
    if ev == nil then ev = line end
    events[#events + 1] = ev
  end
  r.events = events
  return r
end

-- Runs fn(target) for every target at once, each in its own task, and
-- returns their results in the same order; an error in one raises here.
function _M.each(targets, fn)
  local results, errors, left = {}, {}, #targets
  for i, t in ipairs(targets) do
    kube.spawn(function()
      local ok, res = pcall(fn, t)
      if ok then results[i] = res else errors[#errors + 1] = tostring(res) end
      left = left - 1
    end)
  end
  while left > 0 do kube.sleep(0.002) end
  if #errors > 0 then error(table.concat(errors, "\n"), 2) end
  return results
end

return _M
