-- kubelua.sim.store.history: each resource's bounded event history and
-- its watchers. Every stored version of an object is the event that made
-- it (entry.etype, entry.prev); a resource keeps its last history_size
-- events in a ring, from which a watch from a past resourceVersion is
-- replayed and a list at an exact resourceVersion is rebuilt. Methods of
-- the store (kubelua.sim.store mixes them in).

-- luacheck: ignore 212/self

local kube = require "kubelua"
local json = require "kubelua.json"
local util = require "kubelua.sim.util"

local pairs, tostring = pairs, tostring
local encode = json.encode
local copy = util.copy

local _M = {}
local Store = {}
_M.methods = Store

-- A watch event is written as three pieces in one chunk: the envelope's
-- head, the object's JSON as stored, and its tail; no copy of the object.
local heads = { ADDED = '{"type":"ADDED","object":', MODIFIED = '{"type":"MODIFIED","object":',
  DELETED = '{"type":"DELETED","object":', BOOKMARK = '{"type":"BOOKMARK","object":' }
local TAIL = "}\n"

-- Writes the event etype of the object whose JSON is body (e: its entry,
-- when there is one) to watcher w, in the form it asked for (a Table or
-- PartialObjectMetadata: w.transform); false when its request has ended.
-- An object the form cannot show (a printer failing on it) or cannot
-- carry at all ends that watch, logged in the first case, as the real
-- server's watch ends when its encoder fails; the other watchers go on.
local function write_event(w, etype, body, e)
  local t = w.transform
  if t then
    local ok, text = pcall(t, e and e.obj or body)
    if not ok or text == nil then
      if not ok then
        kube.log.warn("sim: failed to transform object", { error = tostring(text) })
      end
      w.req:finish()
      return false
    end
    body = text
  end
  return w.req:write(heads[etype], body, TAIL)
end

-- The filters of a watcher or a list: namespace, label and field selectors.
local function matches(f, e)
  if f.ns and f.ns ~= e.ns then return false end
  local md = e.obj.metadata
  if f.labels and #f.labels > 0 and not util.labels_match(f.labels, md.labels) then
    return false
  end
  if f.fields and #f.fields > 0 and not util.fields_match(f.fields, e.obj) then
    return false
  end
  return true
end

-- A resource's watchers: the set res.watchers (w -> true), and the same
-- watchers in res.watch_list[1 .. res.nwatch] (w.slot: w's place there),
-- which emit walks: traversing the set would take pairs, which on the
-- LuaJIT it guards against (lua_kube.c, jitfix_next) is a C function
-- called twice for every event.
local function watch(res, w)
  if res.watchers[w] then return end
  res.watchers[w] = true
  local n = res.nwatch + 1
  res.watch_list[n], w.slot, res.nwatch = w, n, n
end

local function unwatch(res, w)
  if not res.watchers[w] then return end
  res.watchers[w] = nil
  local l, n = res.watch_list, res.nwatch
  local last = l[n]
  l[w.slot], last.slot = last, w.slot
  l[n], w.slot, res.nwatch = nil, nil, n - 1
end

local function send(res, w, etype, body, e)
  if not write_event(w, etype, body, e) then unwatch(res, w) end
end

-- Sends the event of entry e (e.etype, e.prev: every stored version is
-- the event that made it) to one watcher, turning it into what a watcher
-- with selectors sees (ADDED when an object starts to match, DELETED with
-- the previous content when it stops).
local function deliver(res, w, e)
  local after = w.after
  if after then -- a watch from a resourceVersion that had not happened yet
    if e.rv <= after then return end
    w.after = nil
  end
  if w.simple then return send(res, w, e.etype, e.json, e) end
  local now = matches(w, e)
  if e.etype == "MODIFIED" then
    local before = e.prev and matches(w, e.prev)
    if now and before then
      send(res, w, "MODIFIED", e.json, e)
    elseif now then
      send(res, w, "ADDED", e.json, e)
    elseif before then
      local o = copy(e.prev.obj)
      o.metadata.resourceVersion = tostring(e.rv)
      send(res, w, "DELETED", encode(o))
    end
  elseif now then
    send(res, w, e.etype, e.json, e)
  end
end

-- Records entry e as the event etype (prev: the version it replaces) in
-- the history and sends it to the watchers. An entry that leaves the
-- history lets go of its previous version.
function Store:emit(res, etype, e, prev)
  e.etype, e.prev = etype, prev
  local h, size = res.history, self.history_size
  local last = res.hist_last + 1
  local slot = (last - 1) % size + 1
  if last - res.hist_first == size then -- full: the oldest event goes
    local old = h[slot]
    res.hist_start = old.rv
    old.prev = nil
    res.hist_first = res.hist_first + 1
  end
  h[slot] = e
  res.hist_last = last
  res.last_rv = e.rv
  local l = res.watch_list
  for i = res.nwatch, 1, -1 do deliver(res, l[i], e) end -- one may leave: l[i] changes
end

-- Event i of res's history (hist_first <= i <= hist_last): the entry it
-- stored.
function Store:event(res, i)
  return res.history[(i - 1) % self.history_size + 1]
end

-- Puts entry ne in place of r, the last event, keeping r's event.
local function replace_last(self, res, r, ne)
  if res.hist_last < res.hist_first then return end
  local slot = (res.hist_last - 1) % self.history_size + 1
  if res.history[slot] == r then
    ne.etype, ne.prev = r.etype, r.prev
    res.history[slot] = ne
  end
end

-- Forgets every resource's history: watches from earlier resourceVersions
-- get 410 (as after an etcd compaction past the watch cache).
function Store:compact()
  self:next_rv() -- a revision of its own, so lists after it are valid
  for _, res in pairs(self.resources) do
    for i = res.hist_first, res.hist_last do self:event(res, i).prev = nil end
    res.history, res.hist_first, res.hist_last = {}, 1, 0
    res.hist_start = self.rv
    res.last_rv = self.rv
  end
  self.compacted = self.rv
end

function Store:close_watchers(res, mode)
  for w in pairs(res.watchers) do
    unwatch(res, w)
    if w.req:alive() then
      if mode == "drop" then w.req:abort(0) else w.req:finish() end
    end
  end
end

-- The objects of res (key → entry) as they were at resourceVersion rv,
-- undoing the history's later events; nil when the history does not reach
-- back to rv (it was compacted or trimmed).
function Store:snapshot(res, rv)
  if rv >= res.last_rv then return res.objects end
  if rv < res.hist_start or rv < self.compacted then return nil end
  local objects = {}
  for k, e in pairs(res.objects) do objects[k] = e end
  for i = res.hist_last, res.hist_first, -1 do
    local e = self:event(res, i)
    if e.rv <= rv then break end
    if e.etype == "ADDED" then
      objects[e.key] = nil
    else
      objects[e.key] = e.prev
    end
  end
  return objects
end

-- The object of a BOOKMARK event now: the resource's kind with only a
-- resourceVersion (and the annotations given) in its metadata.
function Store:bookmark(res, annotations)
  local md = '{"resourceVersion":"' .. res.last_rv .. '","creationTimestamp":null'
  if annotations then md = md .. ',"annotations":' .. encode(annotations) end
  return '{"kind":"' .. res.kind .. '","apiVersion":"' .. res.api_version .. '","metadata":'
    .. md .. "}}"
end

_M.write_event = write_event
_M.matches = matches
_M.watch = watch
_M.unwatch = unwatch
_M.deliver = deliver
_M.replace_last = replace_last
return _M
