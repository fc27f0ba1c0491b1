-- A randomized model test of the informer cache through Lua: long random
-- sequences of add, update, delete, replace (with keys that vanish), resync
-- and watch bytes fed in random cuts, with handlers joining and leaving, run
-- against a plain Lua model of client-go's DeltaFIFO, store, indexers and
-- shared processor (CLIENTGO.md 4, 7, 9, 10). After every drain the cache
-- (list, get, every index, has_synced, the resourceVersion) and the events
-- each handler saw must be the model's. Seeds are fixed.
local kube = require "kubelua"
local json = kube.json

local NAMESPACES = { "a", "b", "" }
local NAMES = { "p1", "p2", "p3", "p4", "p5", "p6" }
local APPS = { "x", "y", "z" }
local TAGS = { "", "t1", "t2", "t1,t2", "t2,t3,t2" }

-- A small deterministic generator (an LCG; the high bits only).
local function rng(seed)
  local s = seed
  return function(n)
    s = (s * 1103515245 + 12345) % 2147483648
    return math.floor(s / 65536) % n + 1
  end
end

local function key_of(o)
  local m = o.metadata
  return (m.namespace and m.namespace .. "/" or "") .. m.name
end

local function sorted(t)
  local c = {}
  for i = 1, #t do c[i] = t[i] end
  table.sort(c)
  return c
end

local sorted_keys = require("spec.support").sorted_keys

-- The custom indexer: the comma-separated tags annotation.
local function tags_of(o)
  local out, seen = {}, {}
  local a = o.metadata.annotations
  for t in ((a and a.tags) or ""):gmatch("[^,]+") do
    if not seen[t] then
      seen[t] = true
      out[#out + 1] = t
    end
  end
  return out
end

-- The index added on a populated cache, part way through a run (T-12).
local function first_letter(o)
  return { o.metadata.name:sub(1, 1), (o.metadata.namespace or "-"):sub(1, 1) }
end

-- The index values the model expects, per index, for one object.
local function index_values(o, late)
  local m = o.metadata
  local owner = {}
  for _, r in ipairs(m.ownerReferences or {}) do
    if r.controller then owner[#owner + 1] = r.uid end
  end
  return {
    namespace = { m.namespace or "" },
    app = m.labels and m.labels.app and { m.labels.app } or {},
    owner = owner,
    tags = tags_of(o),
    late = late and first_letter(o) or nil,
  }
end

-- One event as a line, from the informer's event or the model's.
local function line(kind, key, obj, old, flag)
  local s = kind .. " " .. key .. " "
  if old then s = s .. old.metadata.resourceVersion .. ">" end
  s = s .. (obj and obj.metadata.resourceVersion or "-")
  if flag then s = s .. " " .. flag end
  return s
end

local function event_line(ev)
  local flag = ev.initial and "initial" or ev.tombstone and "tombstone"
    or ev.sync and "sync" or nil
  return line(ev.type, ev.key, ev.object, ev.old, flag)
end

-- The model: DeltaFIFO (queue of keys, deltas per key), store, processor.
local Model = {}
Model.__index = Model

local function new_model()
  return setmetatable({ store = {}, queue = {}, items = {}, group = {},
                        populated = false, initial_count = 0, synced = false,
                        rv = "", handlers = {}, next_group = 0 }, Model)
end

function Model:check_synced()
  if not self.synced and self.populated and self.initial_count == 0 then
    self.synced = true
  end
end

-- queueAction: append, then merge two Deleted in a row (the older is kept
-- unless it is a tombstone).
function Model:enqueue(key, kind, obj, tomb, group)
  local d = self.items[key]
  if not d then
    d = {}
    self.items[key] = d
    self.queue[#self.queue + 1] = key
    self.group[key] = group
  end
  d[#d + 1] = { kind = kind, obj = obj, tomb = tomb }
  local n = #d
  if n >= 2 and d[n].kind == "Deleted" and d[n - 1].kind == "Deleted" then
    if d[n - 1].tomb then d[n - 1] = d[n] end
    d[n] = nil
  end
end

function Model:add(obj, kind)
  self.populated = true
  self:check_synced()
  self:enqueue(key_of(obj), kind, obj, false)
end

function Model:delete(obj)
  local key = key_of(obj)
  self.populated = true
  self:check_synced()
  if not self.items[key] and not self.store[key] then return end
  self:enqueue(key, "Deleted", obj, false)
end

function Model:new_group()
  self.next_group = self.next_group + 1
  return self.next_group
end

function Model:replace(list, rv)
  local listed, nlisted, deletions = {}, 0, 0
  for _, o in ipairs(list) do
    local key = key_of(o)
    self:enqueue(key, "Replaced", o, false)
    if not listed[key] then
      listed[key] = true
      nlisted = nlisted + 1
    end
  end
  -- Queued keys not listed: a tombstone with the newest object.
  for _, key in ipairs(self.queue) do
    if not listed[key] then
      local d = self.items[key]
      self:enqueue(key, "Deleted", d[#d].obj, true)
      deletions = deletions + 1
    end
  end
  -- Cached keys neither listed nor queued: queued in the store's (hash)
  -- order, which the model does not know: one unordered group.
  local g = self:new_group()
  for key, o in pairs(self.store) do
    if not listed[key] and not self.items[key] then
      self:enqueue(key, "Deleted", o, true, g)
      deletions = deletions + 1
    end
  end
  if not self.populated then
    self.populated = true
    self.initial_count = nlisted + deletions
    self:check_synced()
  end
  if rv ~= "" then self.rv = rv end
end

function Model:resync()
  local g = self:new_group()
  for key, o in pairs(self.store) do
    if not self.items[key] then self:enqueue(key, "Sync", o, false, g) end
  end
end

-- Appends a segment of expected lines to every live handler: ordered, or
-- (for a block of keys queued in hash order) a map key -> lines.
local function push_segment(h, seg)
  h.expected[#h.expected + 1] = seg
end

function Model:add_handler(h)
  h.expected, h.delivered = {}, 0
  if next(self.store) then
    local parts, n = {}, 0
    for key, o in pairs(self.store) do
      parts[key] = { line("add", key, o, nil, "initial") }
      n = n + 1
    end
    push_segment(h, { parts = parts, n = n })
  end
  self.handlers[#self.handlers + 1] = h
end

-- Removal: what was not delivered yet is dropped.
local function remove_handler(h)
  for i = #h.expected, h.delivered + 1, -1 do h.expected[i] = nil end
  h.removed = true
end

-- Pops everything, as the informer does when the loop drains it.
function Model:drain()
  local live = {}
  for _, h in ipairs(self.handlers) do
    if not h.removed then live[#live + 1] = h end
  end
  local block, block_group
  local function flush()
    if block then
      for _, h in ipairs(live) do push_segment(h, block) end
      block, block_group = nil, nil
    end
  end
  for _, key in ipairs(self.queue) do
    local deltas = self.items[key]
    local initial = not self.synced
    if self.initial_count > 0 then
      self.initial_count = self.initial_count - 1
      self:check_synced()
    end
    local lines = {}
    for _, d in ipairs(deltas) do
      if d.kind == "Deleted" then
        self.store[key] = nil
        lines[#lines + 1] = line("delete", key, d.obj, nil, d.tomb and "tombstone" or nil)
      else
        local old = self.store[key]
        self.store[key] = d.obj
        if old then
          local same = old.metadata.resourceVersion == d.obj.metadata.resourceVersion
          lines[#lines + 1] = line("update", key, d.obj, old, same and "sync" or nil)
        else
          lines[#lines + 1] = line("add", key, d.obj, nil, initial and "initial" or nil)
        end
      end
    end
    local g = self.group[key]
    if g == nil or g ~= block_group then flush() end
    if g then
      block = block or { parts = {}, n = 0 }
      block_group = g
      block.parts[key] = lines
      block.n = block.n + #lines
    else
      for _, h in ipairs(live) do push_segment(h, { lines = lines }) end
    end
  end
  flush()
  self.queue, self.items, self.group = {}, {}, {}
  for _, h in ipairs(live) do h.delivered = #h.expected end
end

local function same_lines(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- Compares what a handler got with its expected segments, from where the
-- last check stopped (delivered segments never change).
local function check_handler(h, where)
  local pos = h.cpos or 1
  for i = h.cseg or 1, #h.expected do
    local seg = h.expected[i]
    if seg.lines then
      local got = {}
      for j = 1, #seg.lines do got[j] = h.got[pos + j - 1] end
      if not same_lines(seg.lines, got) then
        assert.same(seg.lines, got, where .. " handler " .. h.name .. " segment " .. i)
      end
      pos = pos + #seg.lines
    else
      local parts = {}
      for j = pos, pos + seg.n - 1 do
        local l = h.got[j]
        assert(l, where .. " handler " .. h.name .. ": missing events")
        local key = l:match("^%a+ (%S+)")
        parts[key] = parts[key] or {}
        parts[key][#parts[key] + 1] = l
      end
      assert.same(seg.parts, parts, where .. " handler " .. h.name .. " block " .. i)
      pos = pos + seg.n
    end
  end
  assert.equal(pos - 1, #h.got, where .. " handler " .. h.name .. ": extra events")
  h.cseg, h.cpos = #h.expected + 1, pos
end

local function check_cache(inf, m, where)
  local indices = { "namespace", "app", "owner", "tags", m.late and "late" or nil }
  assert.equal(0, inf:pending(), where)
  local keys = sorted_keys(m.store)
  assert.same(keys, sorted(inf:list_keys()), where)
  assert.equal(#keys, inf:len(), where)
  local want_ix = {}
  for _, name in ipairs(indices) do want_ix[name] = {} end
  for _, key in ipairs(keys) do
    local o = m.store[key]
    assert.equal(json.encode(o), json.encode(inf:get(key)), where .. " " .. key)
    for name, vals in pairs(index_values(o, m.late)) do
      for _, v in ipairs(vals) do
        local set = want_ix[name][v] or {}
        want_ix[name][v] = set
        set[#set + 1] = key
      end
    end
  end
  local listed = {}
  for _, o in ipairs(inf:list()) do listed[#listed + 1] = key_of(o) end
  assert.same(keys, sorted(listed), where)
  for _, name in ipairs(indices) do
    local want = want_ix[name]
    assert.same(sorted_keys(want), sorted(inf:index_values(name)), where .. " index " .. name)
    for v, ks in pairs(want) do
      assert.same(sorted(ks), sorted(inf:index_keys(name, v)), where .. " " .. name .. "=" .. v)
    end
  end
  assert.equal(m.synced, inf:has_synced(), where .. " has_synced")
  assert.equal(m.rv, inf:last_sync_resource_version(), where .. " resourceVersion")
  for _, h in ipairs(m.handlers) do
    if not h.removed then assert.equal(m.synced, h.handle:has_synced(), where) end
  end
end

-- A spec field of about 600 bytes (unicode, escapes), so that the objects
-- are large enough for the informer to keep them compressed.
local function note(rv)
  local parts = {}
  for i = 1, 12 do
    parts[i] = ("container-%d \"caf\u{e9}\" \\ %d\t\226\130\172 %s"):format(
      i, rv * i % 977, ("x"):rep(i % 5))
  end
  return table.concat(parts, "; ")
end

local function run(seed, steps, big)
  local r = rng(seed)
  local function pick(t) return t[r(#t)] end
  local inf = kube.local_informer{
    name = "model-" .. seed,
    indexers = { app = { label = "app" }, owner = "controller", tags = tags_of },
  }
  local m = new_model()
  local rv = 0
  local handlers, nhandlers = {}, 0

  -- A new version of the object under a random (or given) key.
  local function version(ns, name)
    rv = rv + 1
    local md = { name = name or pick(NAMES), resourceVersion = tostring(rv) }
    ns = ns or pick(NAMESPACES)
    if ns ~= "" then md.namespace = ns end
    if r(3) > 1 then md.labels = { app = pick(APPS), n = tostring(rv) } end
    local tags = pick(TAGS)
    if tags ~= "" then md.annotations = { tags = tags } end
    if r(3) == 1 then
      md.ownerReferences = json.array({ { apiVersion = "apps/v1", kind = "ReplicaSet",
                                          name = "rs", uid = "u" .. r(3),
                                          controller = r(2) == 1 } })
    end
    return { apiVersion = "v1", kind = "Pod", metadata = md,
             spec = { containers = json.array({}), n = rv,
                      note = big and note(rv) or nil } }
  end

  local function known_or_new()
    local keys = sorted_keys(m.store)
    if #keys > 0 and r(2) == 1 then
      local o = m.store[pick(keys)]
      return version(o.metadata.namespace or "", o.metadata.name)
    end
    return version()
  end

  local function add_handler()
    nhandlers = nhandlers + 1
    local h = { name = "h" .. nhandlers, got = {} }
    local function rec(ev) h.got[#h.got + 1] = event_line(ev) end
    h.handle = inf:add_handler{ add = rec, update = rec, delete = rec, name = h.name }
    m:add_handler(h)
    handlers[#handlers + 1] = h
  end

  local function feed(events)
    local bytes = {}
    for i, e in ipairs(events) do
      bytes[i] = json.encode({ type = e[1], object = e[2] }) .. "\n"
    end
    bytes = table.concat(bytes)
    local at = 1
    while at <= #bytes do
      local n = r(60)
      assert(inf:feed(bytes:sub(at, at + n - 1)))
      at = at + n
    end
    for _, e in ipairs(events) do
      local kind, o = e[1], e[2]
      if kind == "ADDED" then m:add(o, "Added")
      elseif kind == "MODIFIED" then m:add(o, "Updated")
      elseif kind == "DELETED" then m:delete(o) end
      m.rv = o.metadata.resourceVersion
    end
  end

  if big then
    -- Enough keys for the informer to start compressing what comes next
    -- (KL_INFORMER_COMPRESS_MIN is 512); relists keep them.
    for i = 1, 520 do
      rv = rv + 1
      local o = { apiVersion = "v1", kind = "ConfigMap",
                  metadata = { name = "g" .. i, namespace = "fill",
                               resourceVersion = tostring(rv) } }
      assert(inf:add(o))
      m:add(o, "Added")
    end
    while inf:pending() > 0 do kube.sleep(0) end
    m:drain()
  end
  add_handler()
  for step = 1, steps do
    local where = "seed " .. seed .. " step " .. step
    local op = r(100)
    if op <= 18 then
      local o = known_or_new()
      assert(inf:add(o))
      m:add(o, "Added")
    elseif op <= 34 then
      local o = known_or_new()
      assert(inf:update(o))
      m:add(o, "Updated")
    elseif op <= 44 then
      -- The cached state, or a newer version; cached or not.
      local keys = sorted_keys(m.store)
      local o = (#keys > 0 and r(2) == 1) and m.store[pick(keys)] or known_or_new()
      assert(inf:delete(o))
      m:delete(o)
    elseif op <= 56 then
      local events = {}
      for i = 1, r(4) do
        local kind = pick({ "ADDED", "MODIFIED", "DELETED", "BOOKMARK" })
        if kind == "BOOKMARK" then
          rv = rv + 1
          events[i] = { kind, { kind = "Pod", apiVersion = "v1",
                                metadata = { resourceVersion = tostring(rv) } } }
        else
          events[i] = { kind, known_or_new() }
        end
      end
      feed(events)
    elseif op <= 66 then
      -- A relist: some keys kept as cached (same RV), some changed, some new,
      -- the rest vanish.
      local list = {}
      for _, key in ipairs(sorted_keys(m.store)) do
        local o = m.store[key]
        local keep = o.metadata.namespace == "fill" and 1 or r(4)
        if keep == 1 then
          list[#list + 1] = o
        elseif keep == 2 then
          list[#list + 1] = version(o.metadata.namespace or "", o.metadata.name)
        end
      end
      for _ = 1, r(3) - 1 do list[#list + 1] = version() end
      if #list > 0 and r(8) == 1 then list[#list + 1] = list[1] end -- a duplicate
      rv = rv + 1
      local lrv = r(5) == 1 and "" or tostring(rv)
      if r(2) == 1 then
        local body = json.encode({ kind = "PodList", apiVersion = "v1",
                                   metadata = { resourceVersion = lrv },
                                   items = json.array(list) })
        assert(inf:replace(body))
      else
        assert(inf:replace(list, lrv))
      end
      m:replace(list, lrv)
    elseif op <= 72 then
      inf:resync()
      m:resync()
    elseif op <= 78 then
      local live = 0
      for _, h in ipairs(handlers) do if not h.removed then live = live + 1 end end
      if live < 4 then add_handler() end
    elseif op == 83 and not m.late then
      inf:add_indexers{ late = first_letter }
      m.late = true
    elseif op <= 82 then
      local live = {}
      for _, h in ipairs(handlers) do if not h.removed then live[#live + 1] = h end end
      if #live > 1 then
        local h = pick(live)
        assert.is_true(h.handle:remove())
        remove_handler(h)
      end
    else
      while inf:pending() > 0 do kube.sleep(0) end
      m:drain()
      check_cache(inf, m, where)
      for _, h in ipairs(handlers) do check_handler(h, where) end
    end
  end
  while inf:pending() > 0 do kube.sleep(0) end
  m:drain()
  check_cache(inf, m, "seed " .. seed .. " end")
  assert(m.late, "the late indexer was never added")
  local events = 0
  for _, h in ipairs(handlers) do
    check_handler(h, "seed " .. seed .. " end")
    events = events + #h.got
  end
  return events
end

describe("the informer cache against a model", function()
  for _, seed in ipairs({ 1, 7, 42, 2024, 65537 }) do
    it("matches the model for seed " .. seed, function()
      local events = run(seed, 1200)
      assert.is_true(events > 500, "only " .. events .. " events")
    end)
  end
  -- Objects of about 1 KB, in a cache of more than 512 keys: after the
  -- first 128 KiB of them and 16 more, the informer keeps the rest
  -- compressed, and nothing may read differently. (Slower: every check
  -- reads 520 more keys.)
  for _, seed in ipairs({ 3 }) do
    it("matches the model with compressed objects for seed " .. seed, function()
      local events = run(seed, 300, true)
      assert.is_true(events > 100, "only " .. events .. " events")
    end)
  end
end)
