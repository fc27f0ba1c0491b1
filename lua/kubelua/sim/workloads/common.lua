-- kubelua.sim.workloads.common: what the simulator's workload controllers
-- (kubelua.sim.workloads.*) share: reading the Pods a controller owns,
-- label selectors, owner references, the template hash, conditions, and
-- writing status as kube-controller-manager does (subresource status).
-- Objects a writer stored as JSON bytes (Store:put_json) are read as
-- every other object once a controller needs them.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local store_mod = require "kubelua.sim.store"

local type, pairs, ipairs, next, tostring, tonumber, error =
  type, pairs, ipairs, next, tostring, tonumber, error
local format, byte, sub = string.format, string.byte, string.sub
local concat, sort = table.concat, table.sort
local floor, ceil = math.floor, math.ceil
local bxor, lshift, tobit = bit.bxor, bit.lshift, bit.tobit
local setmetatable = setmetatable
local is_array = json.is_array
local copy, null = util.copy, json.null

local _M = {}

_M.CTX = { user_agent = "kube-controller-manager" }
_M.STATUS_CTX = { user_agent = "kube-controller-manager", subresource = "status" }

local function is_object(v) return type(v) == "table" and not is_array(v) and v ~= null end
_M.is_object = is_object

-- The object of entry e as a table, or nil for none or for one a writer
-- stored as JSON bytes (Store:put_json, the benchmarks' path), which the
-- workload controllers do not act on, decoded or not.
function _M.table_of(e)
  if not e or store_mod.from_bytes(e) then return nil end
  return e.obj
end

-- The entry's object (decoded when stored as bytes), or nil for none.
function _M.obj_of(e) return e and e.obj or nil end

-- The ownerReference of obj with controller = true, or nil.
function _M.controller_of(obj)
  local refs = obj and obj.metadata and obj.metadata.ownerReferences
  for _, r in ipairs(is_array(refs) and refs or {}) do
    if type(r) == "table" and r.controller == true then return r end
  end
  return nil
end

-- The ownerReference a controller puts on what it makes for owner.
function _M.owner_ref(owner)
  return json.array { { apiVersion = owner.apiVersion, kind = owner.kind,
    name = owner.metadata.name, uid = owner.metadata.uid, controller = true,
    blockOwnerDeletion = true } }
end

-- The requirements of a LabelSelector (matchLabels, matchExpressions)
-- for util.labels_match.
function _M.selector(sel)
  local reqs = {}
  if not is_object(sel) then return reqs end
  local keys = {}
  for k in pairs(is_object(sel.matchLabels) and sel.matchLabels or {}) do keys[#keys + 1] = k end
  sort(keys)
  for _, k in ipairs(keys) do
    reqs[#reqs + 1] = { key = k, op = "=", value = sel.matchLabels[k] }
  end
  local ops = { In = "in", NotIn = "notin", Exists = "exists", DoesNotExist = "!" }
  for _, x in ipairs(is_array(sel.matchExpressions) and sel.matchExpressions or {}) do
    local set = {}
    for _, v in ipairs(is_array(x.values) and x.values or {}) do set[v] = true end
    reqs[#reqs + 1] = { key = x.key, op = ops[x.operator] or "in", value = set }
  end
  return reqs
end

-- The objects (entries) of resource gv/resource in namespace ns whose
-- controller is owner uid, sorted by name.
function _M.owned(store, gv, resource, ns, uid)
  local out = {}
  for _, e in pairs(store:resource(gv, resource).objects) do
    if e.ns == ns then
      local ref = _M.controller_of(_M.obj_of(e))
      if ref and ref.uid == uid then out[#out + 1] = e end
    end
  end
  sort(out, function(a, b) return a.name < b.name end)
  return out
end

function _M.owned_pods(store, ns, uid) return _M.owned(store, "v1", "pods", ns, uid) end

-- new_owner(store, defer, spec) -> a controller of spec.kind
-- (spec.gv, spec.resource) whose sync(self, entry) runs for each object
-- of that kind that changes, and each time what it owns changes: Pods
-- whose controller it is, or spec.owns = { gv, resource } (a Deployment's
-- ReplicaSets); spec.nodes: every object again when a Node changes.
local Owner = {}
Owner.__index = Owner

function _M.new_owner(store, defer, spec)
  return setmetatable({ store = store, defer = defer, spec = spec }, Owner)
end

local function is(res, gv, name) return res.builtin and res.gv == gv and res.name == name end

function Owner:note(key)
  local sp = self.spec
  self.defer(sp.name .. " " .. key, sp.name, function()
    local e = self.store:resource(sp.gv, sp.resource).objects[key]
    if e then sp.sync(self, e) end
  end)
end

function Owner:observe(res, e, etype, prev)
  local sp = self.spec
  if is(res, sp.gv, sp.resource) then
    if etype ~= "DELETED" then self:note(e.key) end
    return
  end
  if sp.nodes and is(res, "v1", "nodes") then
    for key in pairs(self.store:resource(sp.gv, sp.resource).objects) do self:note(key) end
    return
  end
  local owns = sp.owns or { "v1", "pods" }
  if not is(res, owns[1], owns[2]) then return end
  local obj = _M.table_of(e)
  if not obj then return end
  local ref = _M.controller_of(obj) or _M.controller_of(_M.table_of(prev))
  if ref and ref.kind == sp.kind then self:note(e.ns .. "/" .. tostring(ref.name)) end
end

function Owner:sync()
  for key in pairs(self.store:resource(self.spec.gv, self.spec.resource).objects) do
    self:note(key)
  end
end

-- A Pod's state, as the controllers count it.
local function pod_condition(pod, ctype)
  local st = pod.status
  local conds = is_object(st) and st.conditions
  for _, c in ipairs(is_array(conds) and conds or {}) do
    if c.type == ctype then return c end
  end
  return nil
end
_M.pod_condition = pod_condition

function _M.is_terminal(pod)
  local phase = is_object(pod.status) and pod.status.phase
  return phase == "Succeeded" or phase == "Failed"
end

-- Not terminal and not being deleted: what a ReplicaSet counts.
function _M.is_active(pod)
  return not _M.is_terminal(pod) and pod.metadata.deletionTimestamp == nil
end

function _M.is_ready(pod)
  local c = pod_condition(pod, "Ready")
  return c ~= nil and c.status == "True"
end

-- A positive whole number from spec field v, or def when v is unset.
function _M.count(v, def)
  if type(v) ~= "number" then return def end
  return v
end

-- intstr: an int, or "N%" of total (rounded up or down).
function _M.scaled(v, total, round_up, def)
  if v == nil or v == null then v = def end
  if type(v) == "number" then return v end
  local pct = tonumber(tostring(v):match("^(%d+)%%$"))
  if not pct then return 0 end
  local x = pct * total / 100
  return round_up and ceil(x) or floor(x)
end

-- A canonical text of a table (keys sorted), for hashing and comparing.
local function canonical(v, out)
  if type(v) ~= "table" then
    out[#out + 1] = v == null and "null" or format("%q", tostring(v)) .. type(v):sub(1, 1)
    return
  end
  if is_array(v) then
    out[#out + 1] = "["
    for _, x in ipairs(v) do canonical(x, out) out[#out + 1] = "," end
    out[#out + 1] = "]"
    return
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  sort(keys)
  out[#out + 1] = "{"
  for _, k in ipairs(keys) do
    out[#out + 1] = format("%q:", k)
    canonical(v[k], out)
    out[#out + 1] = ","
  end
  out[#out + 1] = "}"
end

function _M.canonical(v)
  local out = {}
  canonical(v, out)
  return concat(out)
end

local SAFE = "bcdfghjklmnpqrstvwxz2456789"

-- FNV-32a of string s, as a number in [0, 2^32).
function _M.fnv(s)
  local h = tobit(2166136261)
  for i = 1, #s do
    h = bxor(h, byte(s, i))
    h = tobit(h * 403 + lshift(h, 24)) -- * 16777619, modulo 2^32
  end
  if h < 0 then h = h + 4294967296 end
  return h
end

-- 64 hex digits drawn from seed: the digest in an imageID, a containerID.
function _M.hex64(seed)
  local parts = {}
  for i = 1, 8 do parts[i] = format("%08x", _M.fnv(seed .. "/" .. i)) end
  return concat(parts)
end

-- The hash of a pod template, as the controllers name revisions: FNV-32a
-- of its canonical text, its decimal digits mapped to the alphabet that
-- keeps it from spelling words (apimachinery's rand.SafeEncodeString).
function _M.hash(template)
  local h = _M.fnv(_M.canonical(template))
  local digits = format("%d", h)
  local out = {}
  for i = 1, #digits do
    local k = byte(digits, i) % #SAFE + 1
    out[i] = sub(SAFE, k, k)
  end
  return concat(out)
end

-- A template without the labels its controller adds (pod-template-hash).
function _M.without_label(template, label)
  local t = copy(template)
  local md = is_object(t.metadata) and t.metadata
  if md and is_object(md.labels) then
    md.labels[label] = nil
    if next(md.labels) == nil then md.labels = nil end
  end
  return t
end

-- A Pod made from template for owner, in namespace ns: name (or
-- generateName when name is nil), extra labels.
function _M.pod_from(template, owner, ns, name, labels)
  local t = is_object(template) and template or {}
  local tmd = is_object(t.metadata) and t.metadata or {}
  local md = { namespace = ns, ownerReferences = _M.owner_ref(owner) }
  if name then md.name = name else md.generateName = owner.metadata.name .. "-" end
  local l = {}
  for k, v in pairs(is_object(tmd.labels) and tmd.labels or {}) do l[k] = v end
  for k, v in pairs(labels or {}) do l[k] = v end
  if next(l) then md.labels = l end
  if is_object(tmd.annotations) then md.annotations = copy(tmd.annotations) end
  if is_array(tmd.finalizers) then md.finalizers = copy(tmd.finalizers) end
  return { apiVersion = "v1", kind = "Pod", metadata = md, spec = copy(t.spec or {}) }
end

-- Creates pod in the store; raises with what failed.
function _M.create_pod(store, pod)
  local res = store:resource("v1", "pods")
  local e, err = store:create(res, pod.metadata.namespace, pod, _M.CTX)
  if not e then
    error(format("creating pod %s/%s: %s", pod.metadata.namespace,
      pod.metadata.name or pod.metadata.generateName, tostring(err.message)), 0)
  end
  return e
end

-- Deletes a Pod (entry) as a controller does: with its grace period.
function _M.delete_pod(store, e)
  local res = store:resource("v1", "pods")
  local out, err = store:delete(res, e.ns, e.name, {}, _M.CTX)
  if not out and err.code ~= 404 then
    error(format("deleting pod %s/%s: %s", e.ns, e.name, tostring(err.message)), 0)
  end
end

-- Writes obj's status over entry e of res (status subresource), or its
-- metadata and spec when ctx is CTX; raises with what failed. A write
-- that changes nothing is no write.
function _M.write(store, res, e, obj, ctx)
  local ne, err = store:commit(res, e, obj, ctx or _M.STATUS_CTX)
  if not ne then
    error(format("updating %s %s%s: %s", res.kind, e.ns ~= "" and e.ns .. "/" or "", e.name,
      tostring(err.message)), 0)
  end
  return ne
end

-- The status fields of an int32 with omitempty: 0 is left out.
function _M.omit_zero(n)
  if n == 0 then return nil end
  return n
end

-- A condition list where condition c replaces the one of its type (which
-- keeps its lastTransitionTime when the status stays, and everything when
-- status and reason stay), appended last, as the controllers' helpers do.
function _M.set_condition(list, c)
  local out = json.array {}
  local cur
  for _, x in ipairs(is_array(list) and list or {}) do
    if x.type == c.type then cur = x else out[#out + 1] = x end
  end
  if cur and cur.status == c.status and cur.reason == c.reason then return list end
  if cur and cur.status == c.status then c.lastTransitionTime = cur.lastTransitionTime end
  out[#out + 1] = c
  return out
end

-- ControllerRevisions ------------------------------------------------------------

-- The data of a revision of template: the patch that puts it back
-- ({"spec":{"template":{…,"$patch":"replace"}}}), as getPatch makes it.
local function revision_data(template)
  local t = copy(template)
  t["$patch"] = "replace"
  return { spec = { template = t } }
end

-- The ControllerRevision of owner (a StatefulSet or DaemonSet in
-- namespace ns) for its current template, whose hash is hash: made with
-- the next revision number when missing (labels: the template's, plus
-- hash_label = hash; annotations), given the next number when an older
-- template came back. Revisions neither in live (names) nor among the
-- newest revisionHistoryLimit others are deleted. Returns the entry.
function _M.revision(store, owner, ns, hash, hash_label, annotations, live)
  local res = store:resource("apps/v1", "controllerrevisions")
  local name = owner.metadata.name .. "-" .. hash
  local top, cur = 0, nil
  local revs = _M.owned(store, "apps/v1", "controllerrevisions", ns, owner.metadata.uid)
  for _, r in ipairs(revs) do
    local n = tonumber(r.obj.revision) or 0
    if n > top then top = n end
    if r.name == name then cur = r end
  end
  local template = is_object(owner.spec.template) and owner.spec.template or {}
  if not cur then
    local labels = {}
    local tl = is_object(template.metadata) and template.metadata.labels
    for k, v in pairs(is_object(tl) and tl or {}) do labels[k] = v end
    labels[hash_label] = hash
    local e, err = store:create(res, ns, { apiVersion = "apps/v1", kind = "ControllerRevision",
      metadata = { name = name, namespace = ns, labels = labels,
        annotations = annotations and copy(annotations) or nil,
        ownerReferences = _M.owner_ref(owner) },
      data = revision_data(template), revision = top + 1 }, _M.CTX)
    if not e then
      error(format("creating controllerrevision %s/%s: %s", ns, name, tostring(err.message)), 0)
    end
    cur = e
    revs[#revs + 1] = e
  elseif (tonumber(cur.obj.revision) or 0) < top then
    local obj = copy(cur.obj)
    obj.revision = top + 1
    cur = _M.write(store, res, cur, obj, _M.CTX)
  end
  -- the history beyond revisionHistoryLimit, oldest first
  local old = {}
  for _, r in ipairs(revs) do
    if r.name ~= name and not live[r.name] and not r.obj.metadata.deletionTimestamp then
      old[#old + 1] = r
    end
  end
  local limit = _M.count(owner.spec.revisionHistoryLimit, 10)
  sort(old, function(a, b)
    return (tonumber(a.obj.revision) or 0) < (tonumber(b.obj.revision) or 0)
  end)
  for i = 1, #old - limit do
    local out, err = store:delete(res, ns, old[i].name, {}, _M.CTX)
    if not out and err.code ~= 404 then
      error(format("deleting controllerrevision %s/%s: %s", ns, old[i].name,
        tostring(err.message)), 0)
    end
  end
  return cur
end

-- Whole seconds of a metav1.Time ("2006-01-02T15:04:05Z"), or nil.
function _M.seconds(ts)
  local y, mo, d, h, mi, s = tostring(ts):match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)Z$")
  if not y then return nil end
  y, mo = tonumber(y), tonumber(mo)
  -- days from the civil date (Howard Hinnant's algorithm): no timezone
  if mo <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (mo + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + tonumber(d) - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
end

return _M
