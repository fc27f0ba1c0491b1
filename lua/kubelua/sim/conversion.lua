-- kubelua.sim.conversion: CustomResourceDefinitions whose
-- spec.conversion.strategy is Webhook, converted as kube-apiserver 1.26
-- converts them: one apiextensions.k8s.io/v1 ConversionReview per object
-- and desired version, POSTed to spec.conversion.webhook.clientConfig
-- (url, or a Service the simulator routes to loopback:
-- kubelua.sim.admission's post), the answer checked (uid, Success, one
-- object of the desired apiVersion and the same kind, name, namespace and
-- uid) and the object's metadata restored but for its labels and
-- annotations. A failure is the server's plain 500 (no reason):
-- "conversion webhook for GROUP/VERSION, Kind=KIND failed: …", in the
-- version converted from.
--
-- Such a CRD's objects are stored in its storage version only (the
-- store's put files them there). Each other served version is a cache,
-- as each version's watch cache is in kube-apiserver: a task per version
-- converts the storage version's events in order and files them there,
-- from where its watches and its lists and gets at resourceVersion "0"
-- are served; put() never waits for it. A conversion that fails is tried
-- again every RETRY seconds (said once in the log, and once when it
-- passes again): the version's watchers get nothing newer meanwhile and
-- stay open, as a real watch cache's do. The other reads of that version
-- (get, list) convert the storage version's objects when they are made,
-- one review per object, so a webhook fixed since a write is what they
-- see and a webhook that is down fails them; a list converts every object
-- its storage range holds (the namespace, or the one name metadata.name=
-- selects) before its selectors match, so a refused object that does not
-- match fails it too; the storage version's own reads call no webhook. A
-- write through another version is converted into the storage version
-- (prepare; an update's state, the cache's object, first, and an
-- unchanged one reads the storage again) and its answer back (fresh); a
-- delete through one converts
-- each read and write of the registry's (decode, encode: see
-- kubelua.sim.store.verbs) and answers what it stored, converted back; a
-- write or delete through the storage version calls no webhook.

local kube = require "kubelua"
local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local admission = require "kubelua.sim.admission"
local stores = require "kubelua.sim.store"

local type, ipairs, tostring, pcall, setmetatable = type, ipairs, tostring, pcall, setmetatable
local format = string.format
local array, is_array = json.array, json.is_array
local copy = util.copy
local obj_key, status, make_entry = stores.obj_key, stores.status, stores.make_entry

local _M = {}
local Conversion = {}
Conversion.__index = Conversion

-- kube-apiserver sets no timeout of its own on a conversion call; the
-- simulator's bound, so that a hung webhook fails the request in the end.
local TIMEOUT = 30

-- How long a version's cache waits before it tries a failed conversion
-- again (a real watch cache's reflector watches again at once; its
-- etcd watch's backoff spaces the tries about so).
local RETRY = 0.1

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- new(store, routes, serving) -> the conversion of store's CRDs (routes:
-- the simulator's, as kubelua.sim.admission takes them; serving() false
-- once the simulator serves no more: the caches' tasks end).
function _M.new(store, routes, serving)
  return setmetatable({ store = store, routes = routes, serving = serving,
    converted = setmetatable({}, { __mode = "k" }), queues = setmetatable({}, { __mode = "k" }) },
    Conversion)
end

-- The spec.conversion.webhook of res's CRD when it converts through one.
function Conversion:webhook_of(res)
  if not res.crd then return nil end
  local crds = self.store:resource("apiextensions.k8s.io/v1", "customresourcedefinitions")
  local e = crds.objects[res.crd]
  local conv = e and is_object(e.obj.spec) and e.obj.spec.conversion
  if is_object(conv) and conv.strategy == "Webhook" and is_object(conv.webhook) then
    return conv.webhook
  end
  return nil
end

-- restoreObjectMeta: obj's metadata with the labels and annotations the
-- webhook answered.
local function restore_meta(md, answered)
  local out = copy(md)
  answered = is_object(answered) and answered or {}
  out.labels, out.annotations = answered.labels, answered.annotations
  return out
end

-- convert(from, to, obj) -> obj (of resource from) in the version of
-- resource to | nil, status. Through the webhook when the CRD says so;
-- else only its apiVersion changes.
function Conversion:convert(from, to, obj)
  local w = self:webhook_of(from)
  if not w then return admission.as_version(from, to, obj) end
  if obj.apiVersion == to.gv then return obj end
  local gvk = format("%s, Kind=%s", from.gv, from.kind)
  local function failed(fmt, ...)
    return nil, status(500, nil, format("conversion webhook for %s ", gvk) .. format(fmt, ...))
  end
  local uid = util.uid()
  local review, why = admission.post(self.routes, w.clientConfig, TIMEOUT, "",
    { apiVersion = "apiextensions.k8s.io/v1", kind = "ConversionReview",
      request = { uid = uid, desiredAPIVersion = to.gv, objects = array { obj } } })
  if not review then return failed("failed: %s", why) end
  if review.apiVersion ~= "apiextensions.k8s.io/v1" or review.kind ~= "ConversionReview" then
    return failed("failed: expected webhook response of apiextensions.k8s.io/v1, "
      .. "Kind=ConversionReview, got %s, Kind=%s", tostring(review.apiVersion or ""),
      tostring(review.kind or ""))
  end
  local resp = review.response
  if not is_object(resp) then return failed("failed: no response provided") end
  if resp.uid ~= uid then
    return failed("failed: expected response.uid=%q, got %q", uid, tostring(resp.uid or ""))
  end
  local result = is_object(resp.result) and resp.result or {}
  if result.status ~= "Success" then
    if type(result.message) == "string" and result.message ~= "" then
      return failed("failed: %s", result.message)
    end
    return failed("failed: response.result.status was '%s', not 'Success'",
      tostring(result.status or ""))
  end
  local out = is_array(resp.convertedObjects) and resp.convertedObjects or {}
  if #out ~= 1 then return failed("returned %d objects, expected 1", #out) end
  local c = out[1]
  if not is_object(c) then return failed("returned invalid object at index 0: not an object") end
  if c.apiVersion ~= to.gv then
    return failed("returned invalid object at index 0: invalid groupVersion (expected %s, "
      .. "received %s)", to.gv, tostring(c.apiVersion))
  end
  if c.kind ~= obj.kind then
    return failed("returned invalid object at index 0: invalid kind (expected %s, received %s)",
      tostring(obj.kind), tostring(c.kind))
  end
  local md, cmd = obj.metadata, is_object(c.metadata) and c.metadata or {}
  for _, f in ipairs { "name", "namespace", "uid" } do
    if (cmd[f] or "") ~= (md[f] or "") then
      return failed("returned invalid object: must have the same %s: %s != %s", f,
        tostring(md[f] or ""), tostring(cmd[f] or ""))
    end
  end
  c.metadata = restore_meta(md, cmd)
  return c
end

-- The CRD's storage version's resource, when res is one of the served
-- versions of a CRD that converts through a webhook and that version is
-- served too; nil otherwise (its versions then mirror each other).
function Conversion:storage_of(res)
  if not res.mirrors or not self:webhook_of(res) then return nil end
  local crds = self.store:resource("apiextensions.k8s.io/v1", "customresourcedefinitions")
  local versions = crds.objects[res.crd].obj.spec.versions
  for _, v in ipairs(is_array(versions) and versions or {}) do
    if is_object(v) and v.storage == true then
      local s = self.store:resource(res.group .. "/" .. tostring(v.name), res.name)
      return s and s.crd == res.crd and s or nil
    end
  end
  return nil
end

-- Whether res is a cache of another version's objects (storage_of).
function Conversion:is_cache(res)
  local s = self:storage_of(res)
  return s ~= nil and s ~= res
end

-- prepare(res, obj) -> the converted object, or true when res is stored
-- as it is | nil, status: obj, about to be stored through res, converted
-- into the storage version, kept for put (stored_form).
function Conversion:prepare(res, obj)
  local s = self:storage_of(res)
  if not s or s == res then return true end
  local c, err = self:convert(res, s, obj)
  if not c then return nil, err end
  self.converted[obj] = { [s.gv] = c }
  return c
end

-- stored_form(obj, to) -> obj in resource to's version for the store:
-- what prepare made, with obj's metadata as it is stored; or, for the
-- simulator's own change of an object converted before (a finalizer the
-- garbage collector removes), to's form of it with the new metadata; nil
-- when neither is there (then only the apiVersion changes).
function Conversion:stored_form(obj, to)
  local done = self.converted[obj]
  local c = done and done[to.gv]
  if c then
    c = copy(c)
    c.metadata = restore_meta(obj.metadata, c.metadata)
    return c
  end
  if not self:webhook_of(to) then return nil end
  local md = obj.metadata
  local e = to.objects[obj_key(md.namespace, md.name)]
  if not e then return nil end
  c = copy(e.obj)
  c.metadata = copy(md)
  return c
end

-- Files the queue's events in version v's cache, converted, in order;
-- runs as one task per version while events wait.
local function drain(self, s, v, q)
  local failing
  while q.first <= q.last and self.store:resource(v.gv, v.name) == v and self.serving() do
    local item = q[q.first]
    local c, err = self:convert(s, v, item.e.obj)
    if c then
      if failing then
        kube.log.info("sim: the conversion webhook answers again, the version's cache "
          .. "catches up", { resource = v.gr, version = v.gv })
        failing = nil
      end
      q[q.first], q.first, q.failed = nil, q.first + 1, nil
      self.store:put_cached(v, c, item.etype)
    else
      if not failing then
        kube.log.warn("sim: the version's cache cannot convert an event, its watchers wait "
          .. "until the webhook answers", { resource = v.gr, version = v.gv,
          error = err.message })
        failing = true
      end
      q.failed = err
      kube.sleep(RETRY)
    end
  end
  q.task = nil
end

-- enqueue(s, v, e): entry e, just stored in storage version s as the
-- event e.etype, for version v's cache. Does not wait.
function Conversion:enqueue(s, v, e)
  local q = self.queues[v]
  if not q then
    q = { first = 1, last = 0 }
    self.queues[v] = q
  end
  q.last = q.last + 1
  q[q.last] = { e = e, etype = e.etype }
  if not q.task then
    q.task = true
    kube.spawn(function()
      local ok, err = pcall(drain, self, s, v, q)
      if not ok then
        q.task = nil
        kube.log.error("sim: the version's cache stopped", { resource = v.gr, version = v.gv,
          error = tostring(err) })
      end
    end)
  end
end

-- settle(v) -> true | nil, status: waits (in the calling task) until
-- version v's cache holds every event stored so far; the conversion's
-- failure while it cannot, a 500 when its task has stopped.
function Conversion:settle(v)
  local q = self.queues[v]
  while q and q.first <= q.last and self.store:resource(v.gv, v.name) == v do
    if q.failed then return nil, q.failed end
    if not q.task then
      return nil, status(500, "InternalError", "Internal error occurred: the cache of "
        .. v.gv .. " " .. v.name .. " has stopped")
    end
    kube.sleep(0.002)
  end
  return true
end

-- decode(v, key) -> the object the storage version holds under key,
-- converted into cache v's version now (a read of kube-apiserver's
-- registry through v: its codec converts what etcd holds) | nil, status.
function Conversion:decode(v, key)
  local se = self:storage_of(v).objects[key]
  if not se then return nil, stores.not_found(v, key:match("[^/]*$")) end
  return self:convert(self:storage_of(v), v, se.obj)
end

-- encode(v, obj) -> obj, of cache v's version, converted into the storage
-- version (what the registry's codec writes, or compares with what etcd
-- holds) | nil, status.
function Conversion:encode(v, obj)
  return self:convert(v, self:storage_of(v), obj)
end

-- fresh(v, e) -> entry e of cache v converted now from the storage
-- version's object of the same resourceVersion (a get or a list's item,
-- as kube-apiserver decodes it from etcd), e when that one is not kept
-- any more | nil, status.
function Conversion:fresh(v, e)
  local s = self:storage_of(v)
  local se = s and s.objects[e.key]
  if not se or se.rv ~= e.rv then return e end
  local c, err = self:convert(s, v, se.obj)
  if not c then return nil, err end
  return make_entry(c, v)
end

return _M
