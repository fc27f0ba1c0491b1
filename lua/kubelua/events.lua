-- kubelua.events: Kubernetes Events about objects, as client-go's event
-- recorder posts them.
--
--   kube.event(obj, "Warning", "SyncFailed", "cannot create the Secret: …")
--
-- kube.event returns at once (from a handler, a reconcile, anywhere): one
-- task posts the Events in order. It writes events.k8s.io/v1 Events
-- (regarding, note, reportingController, reportingInstance, action,
-- eventTime), or core/v1 ones (involvedObject, message, source, count,
-- first/lastTimestamp) when the server has no events.k8s.io/v1.
-- Aggregation as client-go's: an Event that repeats one already posted
-- (same object, type, reason, action and message) within 10 minutes
-- updates that Event's series (count and lastObservedTime; core/v1: count
-- and lastTimestamp) instead of creating another. Rate limit as client-go's
-- EventSourceObjectSpamFilter: a token bucket per object, burst 25,
-- refilled one every 5 minutes; an Event beyond it is dropped and counted
-- in the next one that goes out (its count says how many happened).

local core = require "kubelua.core"
local client = require "kubelua.client"
local leader = require "kubelua.leader"

local type, error, tostring, pairs = type, error, tostring, pairs
local floor, format, concat = math.floor, string.format, table.concat

local _M = {}

local MERGE_WINDOW = 600  -- seconds: a repeat within this updates the Event
local BURST, REFILL = 25, 300 -- per object: 25 at once, then one per 5 min
local MAX_CACHE = 4096    -- Events remembered for aggregation

local controller_name = "kubelua"
local instance

-- The reportingController (and core/v1 source.component) of this process.
---Names the reportingController (and source.component) of the Events
---this process posts (default "kubelua").
---@param name string
---@usage kube.events.set_controller("greeting-operator")
function _M.set_controller(name)
  if type(name) ~= "string" or name == "" then
    error("kube.events.set_controller: expected a non-empty name", 2)
  end
  controller_name = name
end

local function reporting_instance()
  if not instance then
    local le = leader.current()
    instance = le and le.identity or (os.getenv("HOSTNAME") or "kubelua")
  end
  return instance
end

local function log(level, msg, fields)
  local out = {}
  for k, v in pairs(fields) do out[#out + 1] = " " .. k .. "=" .. tostring(v) end
  table.sort(out)
  core.log(level, msg, concat(out))
end

local queue, running = {}, false
local seen, seen_n = {}, 0      -- aggregation key -> { name, ns, count, api }
local buckets = {}              -- object key -> { tokens, last }
local use_core = nil            -- nil: not known yet; true: no events.k8s.io/v1

local function take_token(okey, now)
  local b = buckets[okey]
  if not b then b = { tokens = BURST, last = now } buckets[okey] = b end
  b.tokens = math.min(BURST, b.tokens + (now - b.last) / REFILL)
  b.last = now
  if b.tokens < 1 then return false end
  b.tokens = b.tokens - 1
  return true
end

local function regarding_of(obj)
  local m = obj.metadata or {}
  return { apiVersion = obj.apiVersion, kind = obj.kind, namespace = m.namespace,
           name = m.name, uid = m.uid, resourceVersion = m.resourceVersion }
end

local function event_name(ref, now)
  return format("%s.%x", ref.name, floor(now * 1e9))
end

local function new_event(ev, ns, name)
  local ref, t = ev.ref, ev.micro
  if use_core then
    return "v1", { apiVersion = "v1", kind = "Event",
      metadata = { name = name, namespace = ns },
      involvedObject = ref, reason = ev.reason, message = ev.message, type = ev.type,
      count = ev.count, firstTimestamp = ev.rfc, lastTimestamp = ev.rfc,
      source = { component = controller_name },
      reportingComponent = controller_name, reportingInstance = reporting_instance() }
  end
  return "events.k8s.io/v1", { apiVersion = "events.k8s.io/v1", kind = "Event",
    metadata = { name = name, namespace = ns },
    eventTime = t, reportingController = controller_name,
    reportingInstance = reporting_instance(), action = ev.action, reason = ev.reason,
    note = ev.message, type = ev.type, regarding = ref,
    series = ev.count > 1 and { count = ev.count, lastObservedTime = t } or nil }
end

local function post(ev)
  local ns = ev.ref.namespace or "default"
  local prev = seen[ev.key]
  if prev and ev.now - prev.first <= MERGE_WINDOW then
    prev.count = prev.count + ev.count
    local patch = prev.api == "v1"
      and { count = prev.count, lastTimestamp = ev.rfc }
      or { series = { count = prev.count, lastObservedTime = ev.micro } }
    local _, err = client.patch(prev.api, "events", prev.ns, prev.name, patch, "merge")
    if not err then return end
    if not client.is_not_found(err) then
      log("warn", "event: cannot update", { event = prev.name, error = tostring(err) })
      return
    end
    ev.count = prev.count -- it was deleted meanwhile: post it again
  end
  local name = event_name(ev.ref, ev.now)
  local api, obj = new_event(ev, ns, name)
  local _, err = client.create(obj)
  if err and (client.is_no_match(err) or client.is_not_found(err)) and use_core == nil
    and api ~= "v1" then
    use_core = true -- a server without events.k8s.io/v1 (discovery says so, or the POST)
    api, obj = new_event(ev, ns, name)
    _, err = client.create(obj)
  end
  if err then
    log("warn", "event: cannot post",
        { reason = ev.reason, object = ev.okey, error = tostring(err) })
    return
  end
  if use_core == nil then use_core = false end
  if seen_n >= MAX_CACHE then seen, seen_n = {}, 0 end
  if not seen[ev.key] then seen_n = seen_n + 1 end
  seen[ev.key] = { api = api, ns = ns, name = name, count = ev.count, first = ev.now }
end

local function drain()
  while #queue > 0 do
    local ev = table.remove(queue, 1)
    local ok, err = pcall(post, ev)
    if not ok then log("error", "event: failed", { error = tostring(err) }) end
  end
  running = false
end

local dropped = {} -- object key -> events refused by the rate limit

-- kube.event(obj, type, reason, message [, action]): see the top.
---Posts a Kubernetes Event about obj, aggregated and rate limited as
---client-go's recorder does (a repeat within 10 minutes updates the
---count); returns at once, the request is made by a task.
---@param obj table the object the Event is about
---@param etype string "Normal" or "Warning"
---@param reason string CamelCase, "Synced"
---@param message string
---@param action? string
---@usage kube.event(obj, "Warning", "InvalidSpec", "spec.size must be positive")
function _M.event(obj, etype, reason, message, action)
  local m = type(obj) == "table" and obj.metadata
  if type(m) ~= "table" or type(m.name) ~= "string" then
    error("kube.event: expected an object with metadata.name, got " .. type(obj), 2)
  end
  if type(obj.apiVersion) ~= "string" or type(obj.kind) ~= "string" then
    error("kube.event: the object needs apiVersion and kind", 2)
  end
  if etype ~= "Normal" and etype ~= "Warning" then
    error("kube.event: type must be \"Normal\" or \"Warning\", got " .. tostring(etype), 2)
  end
  if type(reason) ~= "string" or reason == "" then
    error("kube.event: reason must be a non-empty string", 2)
  end
  if type(message) ~= "string" then
    error("kube.event: message must be a string, got " .. type(message), 2)
  end
  action = action or reason
  local ref = regarding_of(obj)
  local okey = (ref.namespace or "") .. "/" .. ref.kind .. "/" .. ref.name .. "/" .. (ref.uid or "")
  local now = core.now()
  if not take_token(okey, core.monotonic()) then
    dropped[okey] = (dropped[okey] or 0) + 1
    return false
  end
  local count = 1 + (dropped[okey] or 0)
  dropped[okey] = nil
  local s = floor(now)
  queue[#queue + 1] = {
    ref = ref, okey = okey, type = etype, reason = reason, message = message, action = action,
    key = concat({ okey, etype, reason, action, message }, "\0"), count = count, now = now,
    micro = leader.micro_time(now),
    rfc = os.date("!%Y-%m-%dT%H:%M:%SZ", s),
  }
  if not running then
    running = true
    core.spawn_system("events", drain) -- outlives the generation that asked
  end
  return true
end

-- Forgets what was posted (tests).
function _M._reset()
  seen, seen_n, buckets, dropped, use_core, instance = {}, 0, {}, {}, nil, nil
end

return _M
