-- kubelua.sim.store.apply: server-side apply, and the managed fields it
-- leaves. Methods of the store (kubelua.sim.store mixes them in).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local managed = require "kubelua.sim.managed"
local yaml = require "kubelua.sim.yaml"
local errors = require "kubelua.sim.store.errors"
local entries = require "kubelua.sim.store.encode"
local history = require "kubelua.sim.store.history"
local checks = require "kubelua.sim.store.validate"
local verbs = require "kubelua.sim.store.verbs"

local type, pairs, ipairs = type, pairs, ipairs
local concat, sort = table.concat, table.sort
local format = string.format
local decode, is_array = json.decode, json.is_array
local copy, equal = util.copy, util.equal
local status, bad_request = errors.status, errors.bad_request
local obj_key, make_entry = entries.obj_key, entries.make_entry
local replace_last = history.replace_last
local check_decoding, validate = checks.check_decoding, checks.validate
local admit, managed_node = verbs.admit, verbs.managed_node

local _M = {}
local Store = {}
_M.methods = Store

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- Server-side apply: the applied configuration is merged into the object
-- as the kind's schema says (kubelua.sim.managed.merge: keyed lists by
-- their keys, sets by value, atomic lists and structs replaced); fields
-- this manager applied before and leaves out now are removed if nobody
-- else owns them; fields another manager owns with a different value
-- conflict unless force.
function Store:apply(res, ns, name, body, ctx)
  if not ctx.field_manager or ctx.field_manager == "" then
    return nil, status(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
      .. "Required value: is required for apply patch", { group = "meta.k8s.io",
        kind = "PatchOptions", causes = json.array { { reason = "FieldValueRequired",
          message = "Required value: is required for apply patch", field = "fieldManager" } } })
  end
  local cfg = decode(body)
  if cfg == nil then
    local yerr
    cfg, yerr = yaml.decode(body)
    if cfg == nil then return nil, bad_request("error decoding YAML: " .. tostring(yerr)) end
  end
  if not is_object(cfg) then
    return nil, bad_request("error decoding YAML: the apply body must be an object")
  end
  local part = ctx.subresource == "status" and "status" or (res.status and "main" or "all")
  local node = managed_node(res)
  local applied = managed.leaves(cfg, not res.builtin, part, node)
  -- an applier owns the leaves it names, without "." markers, except a
  -- keyed list's items: an item is itself a member of its list
  local owned = {}
  for p in pairs(applied) do
    local parent = p:match("([^\1]*)\1%.$")
    if not parent or parent:find("^[kv]:") then owned[p] = true end
  end
  local e = res.objects[obj_key(res.namespaced and ns or nil, name)]
  if not e then
    local obj = copy(cfg)
    obj.metadata = is_object(obj.metadata) and obj.metadata or {}
    obj.metadata.name = obj.metadata.name or name
    local created, err = self:create(res, ns, obj, ctx, "Apply", owned)
    return created, err, true
  end
  local current = managed.leaves(e.obj, not res.builtin, "all", node)
  local conflicts = managed.conflicts(e.obj, applied, current, ctx.field_manager)
  if #conflicts > 0 and not ctx.force then
    -- one conflict is said in a line; several are grouped by manager
    -- (managers sorted), a field a line
    local causes, by, managers = json.array {}, {}, {}
    for i, c in ipairs(conflicts) do
      local field = managed.format_path(c.path)
      causes[i] = { reason = "FieldManagerConflict",
        message = "conflict with " .. c.manager, field = field }
      if not by[c.manager] then
        by[c.manager] = {}
        managers[#managers + 1] = c.manager
      end
      by[c.manager][#by[c.manager] + 1] = "- " .. field
    end
    local said
    if #conflicts == 1 then
      said = format("conflict with %s: %s", conflicts[1].manager, causes[1].field)
    else
      sort(managers)
      local lines = {}
      for _, m in ipairs(managers) do
        lines[#lines + 1] = format("conflicts with %s:", m)
        for _, l in ipairs(by[m]) do lines[#lines + 1] = l end
      end
      said = concat(lines, "\n")
    end
    local msg = format("Apply failed with %d conflict%s: %s", #conflicts,
      #conflicts == 1 and "" or "s", said)
    return nil, status(409, "Conflict", msg, { causes = causes })
  end
  local obj = managed.merge(e.obj, cfg, not res.builtin, node)
  -- fields this manager owned before and no longer applies
  local gone = {}
  for _, mfe in ipairs(e.obj.metadata.managedFields or {}) do
    if mfe.manager == ctx.field_manager and mfe.operation == "Apply" then
      for p in pairs(managed.paths(mfe.fieldsV1 or {})) do
        if not applied[p] then
          local others = false
          for _, o in ipairs(e.obj.metadata.managedFields) do
            if o ~= mfe and managed.paths(o.fieldsV1 or {})[p] then others = true end
          end
          if not others then gone[#gone + 1] = p end
        end
      end
    end
  end
  managed.remove(obj, gone)
  obj.kind, obj.apiVersion = res.kind, res.api_version
  local err
  obj, err = admit(self, "mutate", "UPDATE", res, obj, e.obj, ctx)
  if not obj then return nil, err end
  err = check_decoding(res, obj) or validate(res, obj)
  if err then return nil, err end
  -- commit with ownership of exactly the applied fields
  local saved = ctx.field_manager
  local out, cerr = self:commit_apply(res, e, obj, ctx, owned)
  ctx.field_manager = saved
  return out, cerr
end

-- Whether two managedFields lists say the same but for their times.
local function same_owners(a, b)
  local function untimed(list)
    local out = {}
    for i, x in ipairs(type(list) == "table" and list or {}) do
      out[i] = copy(x)
      out[i].time = nil
    end
    return out
  end
  return equal(untimed(a), untimed(b))
end

function Store:commit_apply(res, e, obj, ctx, owned)
  local old = e.obj
  local r, err = self:commit(res, e, obj, { apply = true, subresource = ctx.subresource,
    dry_run = ctx.dry_run, admit = ctx.admit, user = ctx.user, warnings = ctx.warnings })
  if not r then return r, err end
  local op = { manager = ctx.field_manager, operation = "Apply",
    api_version = res.api_version, time = util.timestamp(), subresource = ctx.subresource,
    custom = not res.builtin, has_status = res.status, owned = owned, node = managed_node(res) }
  if r == e then
    -- the same values: still a write when their owners change (a forced
    -- apply takes them over, another one shares them), not when only a time
    -- would
    -- (and, the object unchanged, the applier's entry keeps the time it
    -- had, or gets none)
    op.time = nil
    for _, m in ipairs(old.metadata.managedFields or {}) do
      if m.manager == op.manager and m.operation == "Apply" then op.time = m.time end
    end
    local mf = managed.update(old, old, op)
    if same_owners(mf, old.metadata.managedFields) then return e end
    local o = copy(old)
    o.metadata.managedFields = #mf > 0 and mf or nil
    if ctx.dry_run then return make_entry(o, res) end
    o.metadata.resourceVersion = tostring(self:next_rv())
    return self:put(res, o, "MODIFIED", e)
  end
  local mf = managed.update(old, r.obj, op)
  local o = copy(r.obj)
  o.metadata.managedFields = #mf > 0 and mf or nil
  if ctx.dry_run then return make_entry(o, res) end
  -- replace the stored entry's content without a second event, in every
  -- API the object is served through
  local ne = make_entry(o, res)
  if res.objects[ne.key] == r then
    res.objects[ne.key] = ne
    replace_last(self, res, r, ne)
    for _, m in ipairs(res.mirrors or {}) do
      local mr = m.res.objects[ne.key]
      if mr then
        local me = make_entry(m.convert(o), m.res)
        m.res.objects[ne.key] = me
        replace_last(self, m.res, mr, me)
      end
    end
  end
  return ne
end

return _M
