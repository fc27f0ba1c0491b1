-- kubelua.sim.conversion: CustomResourceDefinitions whose
-- spec.conversion.strategy is Webhook, converted as kube-apiserver converts
-- them: one apiextensions.k8s.io/v1 ConversionReview per object and
-- desired version, POSTed to spec.conversion.webhook.clientConfig (url,
-- or a Service the simulator routes to loopback: kubelua.sim.admission's
-- post), the answer checked (uid, Success, one object of the desired
-- apiVersion and the same kind, name, namespace and uid) and the object's
-- metadata restored but for its labels and annotations. Failures are the
-- server's 500: "conversion webhook for GROUP/VERSION, Kind=KIND failed: …".
--
-- The simulator stores an object in every served version of its CRD (the
-- store's mirrors), so an object is converted when it is written over HTTP:
-- prepare() converts it into each other version before the store files
-- it, and what a read, a list or a watch of another version returns is
-- what the webhook answered then. A write the webhook cannot convert
-- fails. The simulator's own changes (a finalizer the garbage collector
-- removes) keep each version's converted form and take the new metadata.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local admission = require "kubelua.sim.admission"
local obj_key = require("kubelua.sim.store").obj_key

local type, ipairs, tostring, setmetatable = type, ipairs, tostring, setmetatable
local format = string.format
local array, is_array = json.array, json.is_array
local copy = util.copy
local internal = admission.internal

local _M = {}
local Conversion = {}
Conversion.__index = Conversion

-- kube-apiserver sets no timeout of its own on a conversion call; the
-- simulator's bound, so that a hung webhook fails the request in the end.
local TIMEOUT = 30

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- new(store, routes) -> the conversion of store's CRDs (routes: the
-- simulator's, as kubelua.sim.admission takes them).
function _M.new(store, routes)
  return setmetatable({ store = store, routes = routes,
    converted = setmetatable({}, { __mode = "k" }) }, Conversion)
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
    return nil, internal(format("conversion webhook for %s ", gvk) .. format(fmt, ...))
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

-- prepare(res, obj) -> true | nil, status: obj, about to be stored through
-- res, converted into the CRD's other served versions, kept for put (as_version).
function Conversion:prepare(res, obj)
  if not res.mirrors or not self:webhook_of(res) then return true end
  local done = {}
  for _, m in ipairs(res.mirrors) do
    local c, err = self:convert(res, m.res, obj)
    if not c then return nil, err end
    done[m.res.gv] = c
  end
  self.converted[obj] = done
  return true
end

-- stored_form(obj, to) -> obj in resource to's version for the store:
-- what prepare made, with obj's metadata as it is stored; or, for the
-- simulator's own change of an object converted before, to's form of it
-- with the new metadata; nil when neither is there (then only the
-- apiVersion changes).
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

return _M
