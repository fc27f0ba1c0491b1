-- kubelua.controller: kube.controller{…}, the builder that wires the common
-- controller (controller-runtime's builder.ControllerManagedBy):
--
--   kube.controller{
--     name = "greeter",
--     watches = { "example.com/v1", "Greeting", { namespace = "demo" } },
--     owns = { { "v1", "ConfigMap" } },
--     watches_mapped = { { informer_or_spec, function(ev) return { "ns/name" } end } },
--     predicates = { generation_changed = true, labels_changed = true,
--                    annotations_changed = true, fields = { "spec.replicas" },
--                    function(ev) return … end },
--     workers = 2, rate_limiter = { type = "exponential", base = 0.005, max = 1000 },
--     reconcile = function(req, ctx) … end,   -- req = {namespace, name, key}
--     webhooks = { { path = "/validate", validate = fn } },  -- kube.webhook specs
--     timers = { { every = 60, idle = 10, fn = function(obj, ctx) … end } },
--     sharding = { ring = "NAME" },      -- or `kubelua run --shard-ring NAME`
--   }
--
-- A key kube.controller{} does not take raises, naming the nearest valid
-- one (`unknown key "own" in kube.controller{}; did you mean "owns"?`).
-- predicates filter the watched object's events: an update passes when
-- one of the changes named happened (the generation, the labels, the
-- annotations, the value at a dotted path of fields: any of them) and
-- every function(ev) returns true; adds and deletes meet only the
-- functions. kube.diff(ev.old, ev.object) says what changed.
-- timers run fn(obj, ctx) for each cached object of the watched kind
-- (see object_timers below).
-- ctx.object in reconcile is the watched object from the cache (nil when
-- it is gone): no ctl.informers[1]:get(req.key) needed.
-- sharding puts the watched and owned kinds on a ring of replicas
-- (kubelua.sharding): their informers select this replica's label, a key
-- runs only while the replica's Lease is fresh, and an object marked for
-- draining is handed over once its running reconcile ends. Options besides
-- ring: namespace (of the Leases), identity, lease_duration,
-- renew_deadline, retry_period.
--
-- One workqueue named after the controller. The watched object's events
-- enqueue its key; an owned object's events enqueue the key of its
-- controller owner (the ownerReference with controller = true whose group
-- and kind are the watched kind's), before and after an update; a mapped
-- watch enqueues the keys its function returns. The workers start once
-- every informer has synced. reconcile's outcomes and ctx are
-- kube.workers' (kube.terminal, kube.requeue_after, nil, err, errors).
--
-- Informers are asked for at once (kube.informer, so a Kind named at a
-- script's top level is resolved lazily); a setup task resolves the
-- watched kind (its owner references name a kind; its scope says whether
-- an owner's key has a namespace), adds the handlers, waits for the sync
-- and starts the workers, logging and retrying while discovery fails.
-- Called in a task, kube.informer resolves a kind at once, and a kind
-- discovery does not know raises here ("kube.controller: kube.informer:
-- NoKindMatch: …"), as controller-runtime fails a controller's start.

local type, pairs, ipairs, error, tostring = type, pairs, ipairs, error, tostring
local setmetatable, getmetatable = setmetatable, getmetatable
local format = string.format
local strict = require "kubelua.strict"
local generation = require "kubelua.generation"
local sharding = require "kubelua.sharding"
local core = require "kubelua.core"

local _M = {}

local helpers = require "kubelua.helpers"

-- The change predicates, and every key predicates takes by name.
local CHANGED = { generation_changed = true, labels_changed = true, annotations_changed = true }
---The change predicates of kube.controller{}: an update passes when one of
---the changes named happened and every function(ev) in the list returns
---true; adds and deletes meet only the functions.
---@class kube.Predicates
---@field generation_changed? boolean metadata.generation changed (spec edits)
---@field labels_changed? boolean metadata.labels changed
---@field annotations_changed? boolean metadata.annotations changed
---@field fields? string[] dotted paths whose value changed ("spec.replicas")
---@usage
--- predicates = {
---   generation_changed = true, fields = { "metadata.labels" },
---   function(ev) return ev.object.metadata.namespace ~= "kube-system" end,
--- }
---@type table<string, boolean>
local PREDICATE_KEYS = { generation_changed = true, labels_changed = true,
                         annotations_changed = true, fields = true }

-- The keys kube.controller{} takes: any other raises, naming the nearest.
---What kube.controller{} takes.
---@class kube.ControllerOpts
---@field name string the controller's name (its workqueue's, its logs')
---@field watches table {apiVersion, kind_or_resource [, informer opts]}: the reconciled kind
---@field owns? table[] {apiVersion, kind [, opts]} each: queues its object's controller owner
---@field watches_mapped? table[] {informer_or_spec, function(ev) -> keys} each
---@field predicates? kube.Predicates filters the watched object's events
---@field workers? integer how many reconciles run at once (default 1)
---@field rate_limiter? table the workqueue's (see kube.workqueue)
---@field reconcile fun(req: kube.req, ctx: kube.ctx): any
---@field timers? kube.Timer[] per-object timers
---@field sharding? table {ring = NAME}: this replica works only on its share of the ring's objects
---@field webhooks? table[] kube.webhook specs served with the controller
---@usage
--- kube.controller{
---   name = "greeter",
---   watches = { "example.com/v1", "Greeting" },
---   owns = { { "v1", "ConfigMap" } },
---   reconcile = reconcile,
--- }
---@type table<string, boolean>
local KEYS = { name = true, watches = true, owns = true, watches_mapped = true,
               predicates = true, workers = true, rate_limiter = true, reconcile = true,
               timers = true, sharding = true, webhooks = true }
---A per-object timer of kube.controller{}: fn(obj, ctx) runs every
---seconds for each cached object of the watched kind while it exists,
---serialized with its reconcile; stopped at deletion and reload.
---@class kube.Timer
---@field every number seconds between runs
---@field fn fun(obj: table, ctx: kube.ctx) what runs
---@field idle? number seconds the object must have been left alone first
---@usage timers = { { every = 60, idle = 10, fn = function(obj, ctx) ctx.log.info("tick") end } }
---@type table<string, boolean>
local TIMER_KEYS = { every = true, fn = true, idle = true }

-- Raises at the caller of kube.controller: level counts misuse, the
-- checking function(s) and new.
local function misuse(msg, level) error("kube.controller: " .. msg, level or 4) end

local function is_informer(v)
  if type(v) == "userdata" then return getmetatable(v) ~= "workqueue" end
  return type(v) == "table" and getmetatable(v) ~= nil and type(v.has_synced) == "function"
    and type(v.on_add) == "function"
end

-- {apiVersion, kind_or_resource, opts} → checked.
local function check_spec(what, s)
  if type(s) ~= "table" or type(s[1]) ~= "string" or type(s[2]) ~= "string"
      or (s[3] ~= nil and type(s[3]) ~= "table") then
    misuse(what .. " must be {apiVersion, kind_or_resource [, opts]}", 5)
  end
  return s
end

local function check(spec)
  if type(spec) ~= "table" then
    error("kube.controller: expected a table, got " .. type(spec), 3)
  end
  strict.keys(spec, KEYS, "kube.controller{}", 3)
  if type(spec.name) ~= "string" or spec.name == "" then
    misuse("name must be a non-empty string")
  end
  check_spec("watches", spec.watches)
  if type(spec.reconcile) ~= "function" then
    misuse(strict.type_error("reconcile", "a function", spec.reconcile))
  end
  local w = spec.workers
  if w ~= nil and type(w) ~= "number" then misuse(strict.type_error("workers", "a number", w)) end
  if w ~= nil and (w < 1 or w % 1 ~= 0) then
    misuse("workers must be a positive whole number, got " .. tostring(w))
  end
  if spec.timers ~= nil then
    if type(spec.timers) ~= "table" then
      misuse("timers must be a list of { every = seconds, fn = function(obj, ctx) [, idle] }")
    end
    for i, tm in ipairs(spec.timers) do
      local what = "timers[" .. i .. "]"
      if type(tm) ~= "table" then misuse(strict.type_error(what, "a table", tm)) end
      strict.keys(tm, TIMER_KEYS, "kube.controller{} " .. what, 3)
      if type(tm.every) ~= "number" or tm.every <= 0 then
        misuse(strict.type_error(what .. ".every", "a positive number of seconds", tm.every))
      end
      if type(tm.fn) ~= "function" then
        misuse(strict.type_error(what .. ".fn", "a function", tm.fn))
      end
      if tm.idle ~= nil and (type(tm.idle) ~= "number" or tm.idle < 0) then
        misuse(strict.type_error(what .. ".idle", "a number of seconds", tm.idle))
      end
    end
  end
  if spec.owns ~= nil then
    if type(spec.owns) ~= "table" then
      misuse("owns must be a list of {apiVersion, kind [, opts]}")
    end
    for i, s in ipairs(spec.owns) do check_spec("owns[" .. i .. "]", s) end
  end
  if spec.watches_mapped ~= nil then
    if type(spec.watches_mapped) ~= "table" then
      misuse("watches_mapped must be a list of {informer_or_spec, function}")
    end
    for i, m in ipairs(spec.watches_mapped) do
      if type(m) ~= "table" or type(m[2]) ~= "function"
          or not (is_informer(m[1]) or type(m[1]) == "table" and type(m[1][1]) == "string") then
        misuse("watches_mapped[" .. i .. "] must be {informer_or_spec, function(ev) -> keys}")
      end
      if not is_informer(m[1]) then check_spec("watches_mapped[" .. i .. "][1]", m[1]) end
    end
  end
  local sh = spec.sharding
  if sh ~= nil and (type(sh) ~= "table" or type(sh.ring) ~= "string") then
    misuse(strict.type_error("sharding", "a table { ring = NAME }", spec.sharding))
  end
  if spec.webhooks ~= nil and (type(spec.webhooks) ~= "table" or getmetatable(spec.webhooks)) then
    misuse("webhooks must be a list of kube.webhook specs")
  end
  local p = spec.predicates
  if p ~= nil then
    if type(p) ~= "table" then misuse("predicates must be a table, got " .. type(p)) end
    for k, v in pairs(p) do
      if CHANGED[k] then
        if type(v) ~= "boolean" then
          misuse(strict.type_error("predicates." .. k, "a boolean", v))
        end
      elseif k == "fields" then
        if type(v) ~= "table" or v[1] == nil then
          misuse("predicates.fields must be a non-empty list of paths (\"spec.replicas\")")
        end
        for i, f in ipairs(v) do
          if type(f) ~= "string" or f == "" or f:find("^%.") or f:find("%.$")
              or f:find("..", 1, true) then
            misuse(strict.type_error("predicates.fields[" .. i .. "]",
                                     "a dotted path (\"spec.replicas\")", f))
          end
        end
      elseif type(k) == "string" then
        strict.keys({ [k] = true }, PREDICATE_KEYS, "kube.controller{} predicates", 3)
      elseif type(k) ~= "number" or type(v) ~= "function" then
        misuse("predicates holds generation_changed, labels_changed, annotations_changed, "
               .. "fields and functions(ev) -> boolean, got " .. tostring(k))
      end
    end
  end
end

local function group_of(api_version) return api_version:match("^(.*)/") or "" end

-- The key a mapped function's answer names: "ns/name", "name", or
-- {namespace =, name =} / {key =}.
local function key_of(v)
  if type(v) == "string" then return v end
  if type(v) == "table" then
    if type(v.key) == "string" then return v.key end
    if type(v.name) == "string" then
      local ns = v.namespace
      return (type(ns) == "string" and ns ~= "") and ns .. "/" .. v.name or v.name
    end
  end
  return nil
end

-- The value at a dotted path of obj ("spec.replicas"), nil when absent.
local function at(obj, path)
  local v = obj
  for i = 1, #path do
    if type(v) ~= "table" then return nil end
    v = v[path[i]]
  end
  return v
end

-- Whether an event passes the watched object's predicates: an update
-- passes when one of the changes named happened (generation_changed,
-- labels_changed, annotations_changed, a path of fields: they are ORed, as
-- predicate.Or) and every function agrees; adds and deletes pass the
-- changes and meet the functions.
local function predicate(preds)
  if not preds then return nil end
  local fns = {}
  for _, f in ipairs(preds) do fns[#fns + 1] = f end
  local paths = {}
  if preds.labels_changed then paths[#paths + 1] = { "metadata", "labels" } end
  if preds.annotations_changed then paths[#paths + 1] = { "metadata", "annotations" } end
  for _, f in ipairs(preds.fields or {}) do
    local p = {}
    for part in f:gmatch("[^.]+") do p[#p + 1] = part end
    paths[#paths + 1] = p
  end
  local gen = preds.generation_changed
  if not gen and #paths == 0 and #fns == 0 then return nil end
  local equal = helpers.equal
  local function changed(ev)
    if gen and ev.old.metadata.generation ~= ev.object.metadata.generation then return true end
    for i = 1, #paths do
      if not equal(at(ev.old, paths[i]), at(ev.object, paths[i])) then return true end
    end
    return false
  end
  local any = gen or #paths > 0
  return function(ev)
    if any and ev.type == "update" and not changed(ev) then return false end
    for i = 1, #fns do
      if not fns[i](ev) then return false end
    end
    return true
  end
end

-- Per-object timers (kopf's @timer): for each cached object of the
-- watched kind, timer i runs fn(obj, ctx) every `every` seconds, the first
-- time at once; with idle, only once the object has not changed for idle
-- seconds (a change puts the run off). Deadlines are kept in one min-heap
-- per controller, with one kube.after armed to the earliest. A deleted
-- object's runs are dropped when they come up; a reload retires the timer
-- with its generation, whose successor starts its own from the synthetic
-- adds. A timer and a reconcile of the same key never run at once: each
-- waits for the other (busy), as kopf serializes an object's handlers.
-- ctx: key, namespace, name, log (as a reconcile's).
local function heap_push(h, e)
  local i = #h + 1
  h[i] = e
  while i > 1 do
    local p = (i - i % 2) / 2
    if h[p].at <= e.at then break end
    h[i], h[p] = h[p], e
    i = p
  end
end

local function heap_pop(h)
  local top, n = h[1], #h
  h[1], h[n] = h[n], nil
  n = n - 1
  local i = 1
  while true do
    local l, r, m = 2 * i, 2 * i + 1, i
    if l <= n and h[l].at < h[m].at then m = l end
    if r <= n and h[r].at < h[m].at then m = r end
    if m == i then break end
    h[i], h[m] = h[m], h[i]
    i = m
  end
  return top
end

local function object_timers(kube, name, timers, primary, busy)
  local heap, objects, armed, armed_at = {}, {}, nil, nil
  local now = kube.monotonic
  local arm
  -- one run, in its own task, so that a slow fn holds up no other key
  local function run_timer(e, tm)
    local obj = primary:get(e.key)
    if obj then
      local ctx = { key = e.key, name = e.key:match("([^/]*)$"),
                    namespace = e.key:match("^([^/]*)/"),
                    log = kube._bound_log({ controller = name, timer = e.i }, e.key) }
      local ok, err = xpcall(tm.fn, debug.traceback, obj, ctx)
      if not ok then
        kube.log.error("timer failed", { controller = name, key = e.key, timer = e.i,
                                         error = tostring(err) })
      end
    end
    busy[e.key] = nil
    e.at = now() + tm.every
    heap_push(heap, e)
    arm()
  end
  local function fire()
    armed, armed_at = nil, nil
    local t = now()
    while heap[1] and heap[1].at <= t do
      local e = heap_pop(heap)
      local o = objects[e.key]
      if o and o.seq == e.seq then
        local tm = timers[e.i]
        local quiet = tm.idle and o.changed + tm.idle or t
        if quiet > t then
          e.at = quiet
          heap_push(heap, e)
        elseif busy[e.key] then
          e.at = t + 0.01
          heap_push(heap, e)
        else
          busy[e.key] = true
          kube.spawn(run_timer, e, tm)
        end
      end
    end
    arm()
  end
  arm = function()
    local top = heap[1]
    if not top or (armed and armed_at <= top.at) then return end
    if armed then armed:cancel() end
    armed_at = top.at
    armed = kube.after(math.max(0, top.at - now()), fire)
  end
  local seq = 0
  local function seen(ev)
    local key = ev.key
    if ev.type == "delete" then objects[key] = nil return end
    local o = objects[key]
    if o then o.changed = now() return end
    seq = seq + 1
    objects[key] = { changed = now(), seq = seq }
    for i = 1, #timers do heap_push(heap, { at = now(), key = key, i = i, seq = seq }) end
    arm()
  end
  primary:add_handler{ add = seen, update = seen, delete = seen }
end

---The first argument of kube.controller's reconcile.
---@class kube.req
---@field key string "namespace/name", or "name"
---@field namespace string? nil for a cluster-scoped object
---@field name string
---@usage
--- reconcile = function(req, ctx)
---   local cm = kube.get("v1", "configmaps", req.namespace, req.name)
--- end

---What kube.controller{} returns.
---@class kube.Controller
---@field name string
---@field queue kubelua.workqueue its workqueue
---@field informers table the watched kind's informer first, then the owned, then the mapped
---@field started boolean true once the workers run
---@usage local ctl = kube.controller{ ... }; local cached = ctl.informers[1]:list()

-- kube.controller(spec) -> { name, queue, informers = { watched, owned…,
-- mapped… }, started = false until the workers run }.
---The common controller (controller-runtime's builder): one workqueue
---named after it; the watched object's events queue its key, an owned
---object's its controller owner's, a mapped watch the keys its function
---returns; workers start once every informer has synced. An unknown key
---raises naming the nearest ("did you mean owns?"); a wrong type names
---the type.
---@param spec kube.ControllerOpts
---@return kube.Controller
---@usage
--- kube.controller{
---   name = "mirror",
---   watches = { "v1", "ConfigMap" },
---   reconcile = function(req, ctx)
---     if ctx.object then ctx.log.info("seen", { key = req.key }) end
---   end,
--- }
function _M.new(spec)
  check(spec)
  local kube = require "kubelua"
  local webhook = require "kubelua.webhook"
  for _, w in ipairs(spec.webhooks or {}) do webhook.new(w, 3) end
  local name = spec.name
  local q = kube.workqueue(name, spec.rate_limiter and { rate_limiter = spec.rate_limiter } or nil)
  kube._note_queue(q)
  local av, what = spec.watches[1], spec.watches[2]

  local shard = spec.sharding or (kube._shard_ring() and { ring = kube._shard_ring() })
  local ring
  if shard then
    local ok, r = pcall(sharding.ring, shard)
    if not ok then misuse(tostring(r):gsub("^[^:]*:%d+: ", ""), 3) end
    ring = r
  end
  -- a kind of the ring: this replica's objects only
  local function on_ring(s)
    if not ring then return s end
    local o = {}
    for k, v in pairs(s[3] or {}) do o[k] = v end
    o.label_selector = ring:selector(o.label_selector)
    ring:add_kind(s[1], s[2], s[3])
    return { s[1], s[2], o }
  end

  local function informer(s)
    local inf, err = kube.informer(s[1], s[2], s[3])
    if not inf then misuse(err) end
    return inf
  end
  local ctl = { name = name, queue = q, informers = {}, started = false }
  local primary = informer(on_ring(spec.watches))
  ctl.informers[1] = primary
  local owned, mapped = {}, {}
  for i, s in ipairs(spec.owns or {}) do
    owned[i] = informer(on_ring(s))
    ctl.informers[#ctl.informers + 1] = owned[i]
  end
  for i, m in ipairs(spec.watches_mapped or {}) do
    mapped[i] = is_informer(m[1]) and m[1] or informer(m[1])
    ctl.informers[#ctl.informers + 1] = mapped[i]
  end
  local log_fields = { controller = name }
  local reconcile = spec.reconcile
  local filter = predicate(spec.predicates)

  local function requeue(key) q:add(key) end
  local function handlers(owner_group, owner_kind, namespaced)
    local note = kube.note_trigger
    local function primary_event(ev)
      if ring and not ring:accepts(ev, av, what, requeue) then return end
      if filter == nil or filter(ev) then
        note(q, ev.key, ev.type .. " " .. ev.key)
        q:add(ev.key)
      end
    end
    primary:add_handler{ add = primary_event, update = primary_event, delete = primary_event }

    local function enqueue_owner(obj, why)
      local md = obj and obj.metadata
      local refs = md and md.ownerReferences
      if type(refs) ~= "table" then return end
      for _, r in ipairs(refs) do
        if type(r) == "table" and r.controller == true and r.kind == owner_kind
            and type(r.apiVersion) == "string" and group_of(r.apiVersion) == owner_group
            and type(r.name) == "string" then
          local ns = md.namespace
          local key = (namespaced and type(ns) == "string" and ns ~= "") and ns .. "/" .. r.name
            or r.name
          note(q, key, why)
          q:add(key)
          return
        end
      end
    end
    local function owned_event(ev, i)
      local why = ev.type .. " owned " .. ev.key
      local s = spec.owns[i]
      if ring and not ring:accepts(ev, s[1], s[2]) then return end
      if ev.type == "update" then enqueue_owner(ev.old, why) end
      enqueue_owner(ev.object, why)
    end
    for i, inf in ipairs(owned) do
      local function event(ev) return owned_event(ev, i) end
      inf:add_handler{ add = event, update = event, delete = event }
    end

    for i, inf in ipairs(mapped) do
      local fn = spec.watches_mapped[i][2]
      local function mapped_event(ev)
        local keys = fn(ev)
        if keys == nil then return end
        if type(keys) ~= "table" then
          kube.log.error("watches_mapped function returned no list of keys",
                         { controller = name, got = type(keys) })
          return
        end
        for _, k in ipairs(keys) do
          local key = key_of(k)
          if key then
            note(q, key, ev.type .. " mapped " .. ev.key)
            q:add(key)
          end
        end
      end
      inf:add_handler{ add = mapped_event, update = mapped_event, delete = mapped_event }
    end
  end

  local busy = {} -- keys whose reconcile or timer runs
  local function unbusy(key) busy[key] = nil end
  local function run(key, ctx)
    -- a timer of key runs: wait for it, unless it can no longer end (its
    -- task is gone with a stop or with this generation)
    local dead, gen = generation.dead, core.generation()
    while busy[key] and not kube.stopping() and not dead[gen] do kube.sleep(0.01) end
    if spec.timers then
      busy[key] = true
      ctx._after = unbusy
    end
    if ring then
      -- the replica's Lease is fresh and the key is not being handed over
      while not ring:may_run(key) do
        if ring.leaving[key] or kube.stopping() or dead[gen] then return end
        kube.sleep(0.05)
      end
      local mine, err = ring:confirmed(key, av, what)
      if mine == nil then return nil, err end -- retried
      if not mine then return end
      ring:begin(key)
      local after = ctx._after
      ctx._after = function(k)
        if after then after(k) end
        ring:finish(k)
      end
    end
    ctx._cache = primary
    return reconcile({ namespace = ctx.namespace, name = ctx.name, key = key }, ctx)
  end

  kube.spawn(function()
    local c = kube.client.default()
    local delay = 1
    local info
    while true do
      local err
      info, err = c:resource_info(av, what)
      if info then break end
      kube.log.warn("kube.controller: cannot resolve the watched kind, retrying",
                    { controller = name, kind = av .. "/" .. what, error = tostring(err),
                      retry_in = delay })
      kube.sleep(delay)
      delay = delay < 30 and delay * 2 or 30
    end
    handlers(group_of(av), info.kind, info.namespaced)
    if spec.timers and spec.timers[1] then object_timers(kube, name, spec.timers, primary, busy) end
    -- the workers start once every cache has synced
    local infs, start = ctl.informers, kube.monotonic()
    local warn_at = start + 10
    while true do
      local all = true
      for i = 1, #infs do
        if not infs[i]:has_synced() then all = false break end
      end
      if all then break end
      kube.sleep(0.01)
      if kube.monotonic() >= warn_at then
        warn_at = warn_at + 10
        kube.log.warn("kube.controller: waiting for caches to sync",
                      { controller = name, waited = math.floor(kube.monotonic() - start) })
      end
    end
    kube._start_workers(q, spec.workers or 1, run, log_fields)
    ctl.started = true
    kube.log.info("controller started", { controller = name, workers = spec.workers or 1 })
  end)
  return setmetatable(ctl, { __tostring = function() return format("controller %q", name) end })
end

return _M
