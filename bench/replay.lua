-- bench/replay.lua: an API server for the benchmarks that only replays
-- prepared bytes, so that its cost stays out of the client's measurement
-- (it runs as its own process, and everything it sends is made before it
-- says it is ready). It serves one collection, /api/v1/pods (and any
-- /api/v1/namespaces/NS/pods, the same objects), as kube-apiserver 1.26:
--   list   items without kind/apiVersion, paged by limit/continue (a
--          continue token names the next item), sent chunked; no limit,
--          or resourceVersion=0 (which 1.26 serves from its watch cache,
--          ignoring limit, as the simulator does): one list of
--          everything. resourceVersion of the list: LIST_RV.
--   watch  without sendInitialEvents: the M prepared MODIFIED events,
--          held until GET /bench/release, then written as fast as the
--          client reads (the watch stays open afterwards); each release
--          lets one watch go, so clients can follow one another. With
--          sendInitialEvents and resourceVersionMatch: 422 Invalid, as a
--          1.26 server answers (it knows no sendInitialEvents, and
--          resourceVersionMatch is forbidden for a watch), or, with the
--          streaming list served, the N objects as ADDED events and the
--          initial-events-end bookmark first.
-- Objects come from bench/lib/pods (OBJECTS: realistic or alike, SEED).
-- Prints one JSON line when ready: {"port":P,"json_bytes_per_object":B}
-- (B: the list items' mean size), then serves until killed.
-- Usage: kubelua run --no-watch bench/replay.lua N M OBJECTS SEED refuse|serve
local kube = require "kubelua"
local httpd = require "kubelua.httpd"
local pods = require "bench.lib.pods"

local N = assert(tonumber(arg[1]), "usage: replay.lua N M OBJECTS SEED refuse|serve")
local M = assert(tonumber(arg[2]), "M")
local OBJECTS, SEED = arg[3] or "realistic", tonumber(arg[4]) or 1
local STREAM = arg[5] == "serve"
local CHUNK = 256 * 1024
local HIGH_WATER = 4 * 1024 * 1024
local LIST_RV = 1000 + N

local g = pods.objects(OBJECTS, SEED)
local join = httpd.join

-- Watch-stream chunks (bytes values) of events first..last made by line(k).
local function chunks(first, last, line)
  local out, parts, bytes = {}, {}, 0
  for k = first, last do
    local e = line(k)
    parts[#parts + 1] = e
    bytes = bytes + #e
    if bytes >= CHUNK or k == last then
      out[#out + 1] = join(parts)
      parts, bytes = {}, 0
    end
  end
  return out
end

local items, item_bytes = {}, 0
for i = 1, N do
  local s = g.item(i, 1000 + i)
  item_bytes = item_bytes + #s
  items[i] = join({ s })
end
-- event j: Pod (j - 1) % N + 1 in round ceil(j / N), a new resourceVersion
local modified = chunks(1, M, function(j)
  local i, r = (j - 1) % N + 1, math.floor((j - 1) / N) + 1
  return '{"type":"MODIFIED","object":' .. g.object(i, LIST_RV + N * (r - 1) + i, r) .. '}\n'
end)
-- The whole list's items (a resourceVersion=0 list), joined by commas.
local whole = not STREAM and chunks(1, N, function(i)
  return i < N and join({ items[i], "," }) or items[i]
end)
local initial = STREAM and chunks(1, N, function(i)
  return '{"type":"ADDED","object":' .. g.object(i, 1000 + i, 0) .. '}\n'
end)
collectgarbage()

local released = false
local JSON = { ["Content-Type"] = "application/json" }

local function drain(req)
  while req:alive() and req:buffered() > HIGH_WATER do req:wait_drain() end
  return req:alive()
end

local function send(req, cs)
  for k = 1, #cs do
    if not drain(req) then return false end
    req:write(cs[k])
  end
  return true
end

local function list(req)
  local limit = tonumber(req:param("limit") or "") or 0
  local at_zero = req:param("resourceVersion") == "0" and not req:param("continue")
  if at_zero then limit = 0 end
  local from = tonumber((req:param("continue") or ""):match("^next%-(%d+)$") or 1)
  local to = limit > 0 and math.min(N, from + limit - 1) or N
  local meta = ('{"resourceVersion":"%d"'):format(LIST_RV)
  if to < N then
    meta = meta .. (',"continue":"next-%d","remainingItemCount":%d'):format(to + 1, N - to)
  end
  req:stream_begin(200, JSON)
  req:write('{"kind":"PodList","apiVersion":"v1","metadata":' .. meta .. '},"items":[')
  if at_zero and whole then
    if not send(req, whole) then return end
  else
    for k = from, to, 64 do
      if not drain(req) then return end
      req:write(join(items, k, math.min(to, k + 63), ","), k + 63 < to and "," or "")
    end
  end
  req:write("]}\n")
  req:finish()
end

local INVALID = '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
  .. '"message":"ListOptions.meta.k8s.io \\"\\" is invalid: resourceVersionMatch: Forbidden: '
  .. 'resourceVersionMatch is forbidden for watch","reason":"Invalid","details":'
  .. '{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden",'
  .. '"message":"Forbidden: resourceVersionMatch is forbidden for watch",'
  .. '"field":"resourceVersionMatch"}]},"code":422}'

local function watch(req)
  local streaming = req:param("sendInitialEvents") == "true"
  if streaming and not STREAM or req:param("resourceVersionMatch") and not streaming then
    return req:reply(422, JSON, INVALID)
  end
  req:stream_begin(200, JSON)
  if streaming then
    if not send(req, initial) then return end
    req:write(('{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":'
      .. '{"resourceVersion":"%d","annotations":{"k8s.io/initial-events-end":"true"}}}}\n')
      :format(LIST_RV))
  end
  while not released do
    if not req:sleep(0.005) then return end
  end
  released = false -- the next client's watch waits for its own release
  if not send(req, modified) then return end
  while req:sleep(3600) do end
end

local function handler(req)
  local path = req:path()
  if path == "/bench/release" then
    released = true
    return req:reply(200, JSON, "{}")
  end
  if not (path == "/api/v1/pods" or path:match("^/api/v1/namespaces/[^/]+/pods$")) then
    return req:reply(404, JSON, '{"kind":"Status","apiVersion":"v1","metadata":{},'
      .. '"status":"Failure","message":"not served","reason":"NotFound","code":404}')
  end
  if req:param("watch") == "true" or req:param("watch") == "1" then return watch(req) end
  return list(req)
end

local srv = assert(httpd.listen { host = "127.0.0.1", port = 0, handler = handler,
  max_stream_buffer = 64 * 1024 * 1024 })
io.stdout:write(('{"port":%d,"json_bytes_per_object":%.0f}\n'):format(srv:port(),
  item_bytes / math.max(N, 1)))
io.stdout:flush()
kube.spawn(function() while true do kube.sleep(3600) end end)
