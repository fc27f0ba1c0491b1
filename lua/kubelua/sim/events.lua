-- kubelua.sim.events: core/v1 Events and events.k8s.io/v1 Events are one
-- kind of object stored once and served through two APIs, each with its
-- own field names (involvedObject/regarding, message/note, source/
-- deprecatedSource, ...). These are the conversions, as the apiserver
-- does them (fixtures 86-89): each API's form carries the fields the
-- other API has no name for under deprecated or reporting names.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"

local null = json.null
local copy = util.copy

local _M = {}

local function present(v) return v ~= nil and v ~= null end

-- The core/v1 form of an events.k8s.io/v1 Event.
function _M.to_core(e)
  local c = { apiVersion = "v1", kind = "Event", metadata = copy(e.metadata) }
  c.involvedObject = copy(e.regarding) or {}
  c.related = copy(e.related)
  c.reason, c.type, c.action = e.reason, e.type, e.action
  c.message = e.note
  c.source = present(e.deprecatedSource) and copy(e.deprecatedSource) or {}
  c.firstTimestamp = present(e.deprecatedFirstTimestamp) and e.deprecatedFirstTimestamp or null
  c.lastTimestamp = present(e.deprecatedLastTimestamp) and e.deprecatedLastTimestamp or null
  c.count = e.deprecatedCount
  c.eventTime = present(e.eventTime) and e.eventTime or null
  c.series = copy(e.series)
  c.reportingComponent = e.reportingController or ""
  c.reportingInstance = e.reportingInstance or ""
  return c
end

-- The events.k8s.io/v1 form of a core/v1 Event.
function _M.to_v1(c)
  local e = { apiVersion = "events.k8s.io/v1", kind = "Event", metadata = copy(c.metadata) }
  e.regarding = copy(c.involvedObject)
  e.related = copy(c.related)
  e.reason, e.type, e.action = c.reason, c.type, c.action
  e.note = c.message
  e.deprecatedSource = present(c.source) and copy(c.source) or {}
  e.deprecatedFirstTimestamp = present(c.firstTimestamp) and c.firstTimestamp or null
  e.deprecatedLastTimestamp = present(c.lastTimestamp) and c.lastTimestamp or null
  if present(c.count) and c.count ~= 0 then e.deprecatedCount = c.count end
  e.eventTime = present(c.eventTime) and c.eventTime or null
  e.series = copy(c.series)
  if present(c.reportingComponent) and c.reportingComponent ~= "" then
    e.reportingController = c.reportingComponent
  end
  if present(c.reportingInstance) and c.reportingInstance ~= "" then
    e.reportingInstance = c.reportingInstance
  end
  return e
end

-- The stored core form of a core Event as written: the defaults the
-- apiserver adds.
function _M.canon_core(c) return _M.to_core(_M.to_v1(c)) end

function _M.canon_v1(e) return _M.to_v1(_M.to_core(e)) end

return _M
