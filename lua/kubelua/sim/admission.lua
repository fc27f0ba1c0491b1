-- kubelua.sim.admission: the simulator's admission webhooks, as
-- kube-apiserver's webhook admission plugins call them (admissionregistration
-- .k8s.io/v1 MutatingWebhookConfiguration and ValidatingWebhookConfiguration).
--
-- On every write that came over HTTP (create, update, patch, delete; the
-- status subresource included), the store asks admit() twice: phase
-- "mutate" before the object is validated, phase "validate" once it would be
-- stored. The mutating webhooks run one after another, in the order of
-- their configuration's name, then their order in it; the validating ones
-- all at once, the first refusal to arrive being the answer. Each gets the
-- AdmissionReview version first in its admissionReviewVersions that the
-- server knows (v1, v1beta1), or fails the call. A webhook is called
-- when a rule matches the request (operations, apiGroups, apiVersions,
-- resources with "*", "*/*", "r/*", "*/sub", scope; with matchPolicy
-- Equivalent, the default, through another version of the same resource,
-- the object then sent in the webhook's version) and its namespaceSelector
-- and objectSelector match. A mutating webhook's JSON Patch is applied to
-- the object; with reinvocationPolicy IfNeeded it is called once more when a
-- later webhook changed the object. failurePolicy Fail (the default) turns a
-- call that fails (unreachable, timeoutSeconds passed, an invalid answer)
-- into the server's 500; Ignore goes on without it, logged once per call.
-- A dry-run request is refused by a webhook whose sideEffects are not None
-- or NoneOnDryRun. The configurations themselves are never admitted.
--
-- Calls go out with kube.http.request from the request's task, so the loop
-- serves others meanwhile. clientConfig.url is called as given;
-- clientConfig.service only through a route the simulator was given to a
-- loopback address (Sim:route_service: a Service of the spec's cluster
-- whose endpoints are the script's webhook server), with the certificate
-- checked for <name>.<namespace>.svc against caBundle, as kube-apiserver
-- checks it. Nothing is sent off loopback through a Service.

local http = require "kubelua.http"
local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local patchlib = require "kubelua.sim.patch"

local type, pairs, ipairs, tostring, setmetatable = type, pairs, ipairs, tostring, setmetatable
local format, find = string.format, string.find
local sort = table.sort
local encode, decode, null, array, is_array = json.encode, json.decode, json.null, json.array,
  json.is_array
local copy, equal = util.copy, util.equal

local kube = require "kubelua"
local log = kube.log

local _M = {}
local Admission = {}
Admission.__index = Admission

local REG = "admissionregistration.k8s.io/v1"
-- the kind of the scale subresource's objects, whatever the resource
local SCALE = { group = "autoscaling", version = "v1", kind = "Scale" }

local function is_object(v) return type(v) == "table" and not is_array(v) end
local function list(v) return is_array(v) and v or {} end

-- Resources no webhook is called for: those that configure admission, so
-- that a broken webhook can always be removed (IsExemptAdmissionConfigurationResource).
local exempt = { validatingwebhookconfigurations = true, mutatingwebhookconfigurations = true,
  validatingadmissionpolicies = true, validatingadmissionpolicybindings = true }

-- new(store, routes, selector) -> the admission of store. routes: "ns/name:port"
-- → "127.0.0.1:port" (shared with the simulator, which fills it); selector:
-- a metav1.LabelSelector → its selector string (store's).
function _M.new(store, routes, selector)
  return setmetatable({ store = store, routes = routes, selector = selector,
    convert = _M.as_version }, Admission)
end

-- The object of resource `from` in the version of resource `to` when the
-- versions hold the same fields (conversion None).
function _M.as_version(_, to, obj)
  local o = copy(obj)
  o.apiVersion = to.gv
  return o
end

-- Statuses ---------------------------------------------------------------------

-- apierrors.NewInternalError(err)
local failure = require("kubelua.sim.store").status

local function internal(msg)
  return failure(500, "InternalError", "Internal error occurred: " .. msg,
    { causes = array { { message = msg } } })
end
_M.internal = internal

-- webhookerrors.ToStatusErr: a webhook's refusal as the client gets it.
local function denied(name, result)
  local st = is_object(result) and copy(result) or {}
  local by = format("admission webhook %q denied the request", name)
  if type(st.code) ~= "number" or st.code < 400 then st.code = 400 end
  if st.status == nil or st.status == "" or st.status == "Success" then st.status = "Failure" end
  if type(st.message) == "string" and st.message ~= "" then
    st.message = by .. ": " .. st.message
  elseif type(st.reason) == "string" and st.reason ~= "" then
    st.message = by .. ": " .. st.reason
  else
    st.message = by .. " without explanation"
  end
  st.kind, st.apiVersion, st.metadata = "Status", "v1", st.metadata or {}
  return st
end

-- Matching -----------------------------------------------------------------------

local function has(l, x)
  for _, v in ipairs(list(l)) do
    if v == "*" or v == x then return true end
  end
  return false
end

-- rule.resources against resource r and subresource sub ("" for none):
-- "r", "r/sub", "*" (every resource, no subresource), "*/*" (all),
-- "r/*" and "*/sub".
local function resource_matches(names, r, sub)
  for _, n in ipairs(list(names)) do
    local nr, ns = n:match("^([^/]*)/(.*)$")
    if not nr then nr, ns = n, "" end
    if (nr == "*" or nr == r) and (ns == "*" or ns == sub) then return true end
  end
  return false
end

local function rule_matches(rule, op, res, sub)
  if not is_object(rule) then return false end
  if not has(rule.operations, op) or not has(rule.apiGroups, res.group)
      or not has(rule.apiVersions, res.version)
      or not resource_matches(rule.resources, res.name, sub) then
    return false
  end
  local scope = rule.scope or "*"
  if scope == "Cluster" then return not res.namespaced end
  if scope == "Namespaced" then return res.namespaced end
  return true
end

local function rules_match(w, op, res, sub)
  for _, rule in ipairs(list(w.rules)) do
    if rule_matches(rule, op, res, sub) then return true end
  end
  return false
end

-- The resources that serve the same objects as res in other versions (a
-- CRD's versions, a built-in's): those matchPolicy Equivalent matches through.
function Admission:equivalents(res)
  local out = {}
  for _, r in pairs(self.store.resources) do
    if r ~= res and r.group == res.group and r.name == res.name and r.crd == res.crd then
      out[#out + 1] = r
    end
  end
  sort(out, function(a, b) return a.version < b.version end)
  return out
end

-- The resource w is called through for a request on res: res itself, an
-- equivalent one, or nil.
function Admission:matched(w, op, res, sub)
  if rules_match(w, op, res, sub) then return res end
  if w.matchPolicy == "Exact" then return nil end
  for _, r in ipairs(self:equivalents(res)) do
    if rules_match(w, op, r, sub) then return r end
  end
  return nil
end

local function labels_of(obj)
  local md = is_object(obj) and obj.metadata
  return is_object(md) and is_object(md.labels) and md.labels or {}
end

-- A LabelSelector (nil or empty: everything) against labels.
function Admission:selects(sel, labels)
  if not is_object(sel) then return true end
  local s = self.selector(sel)
  if not s then return true end
  local reqs = util.parse_label_selector(s)
  return reqs ~= nil and util.labels_match(reqs, labels)
end

function Admission:namespace_selects(w, a)
  local res = a.res
  if res.gv == "v1" and res.name == "namespaces" then
    return self:selects(w.namespaceSelector, labels_of(a.obj or a.old))
  end
  if not res.namespaced then return true end
  local nse = self.store:resource("v1", "namespaces").objects[a.ns or ""]
  return self:selects(w.namespaceSelector, labels_of(nse and nse.obj))
end

function Admission:object_selects(w, a)
  return self:selects(w.objectSelector, labels_of(a.obj))
    or (a.old ~= nil and self:selects(w.objectSelector, labels_of(a.old)))
end

-- The webhooks of kind ("mutatingwebhookconfigurations" or
-- "validatingwebhookconfigurations"), in the order they are called:
-- { w, config } by configuration name, then order in it.
function Admission:hooks(kind)
  local res = self.store:resource(REG, kind)
  local names = {}
  for name in pairs(res.objects) do names[#names + 1] = name end
  sort(names)
  local out = {}
  for _, name in ipairs(names) do
    for _, w in ipairs(list(res.objects[name].obj.webhooks)) do
      out[#out + 1] = { w = w, config = name }
    end
  end
  return out
end

-- Calls ----------------------------------------------------------------------------

-- The URL shown in messages, the URL called and the TLS options of a
-- clientConfig cc (query added to the URL); nil, why when there is none
-- to call.
local function target(routes, cc, query)
  cc = is_object(cc) and cc or {}
  local tls = {}
  if type(cc.caBundle) == "string" and cc.caBundle ~= "" then
    tls.ca = util.b64decode(cc.caBundle)
  end
  if type(cc.url) == "string" then
    local u = cc.url
    if query ~= "" then u = u .. (find(u, "?", 1, true) and "&" .. query:sub(2) or query) end
    return u, u, tls
  end
  local svc = is_object(cc.service) and cc.service
  if not svc then return nil, "no clientConfig.url or clientConfig.service" end
  local port = svc.port or 443
  local host = format("%s.%s.svc", tostring(svc.name), tostring(svc.namespace))
  local path = type(svc.path) == "string" and svc.path or ""
  local shown = format("https://%s:%d%s%s", host, port, path, query)
  local addr = routes[format("%s/%s:%d", tostring(svc.namespace), tostring(svc.name), port)]
  if not addr then
    return nil, format('Post %q: no endpoints available for service "%s"', shown, svc.name)
  end
  tls.server_name = host
  return shown, format("https://%s%s%s", addr, path, query), tls
end

-- What Go's client says of a transport failure that curl reports as msg.
local function transport_error(msg, code, addr)
  if code == "Timeout" then return "context deadline exceeded" end
  if find(msg, "Connection refused", 1, true) or find(msg, "Couldn't connect", 1, true)
      or find(msg, "Failed to connect", 1, true) then
    return format("dial tcp %s: connect: connection refused", addr)
  end
  if find(msg, "certificate", 1, true) or find(msg, "SSL", 1, true) then
    return "x509: certificate signed by unknown authority"
  end
  return msg
end

-- What client-go's rest client says of an answer that is not a 2xx.
local function http_error(status, body)
  if status == 404 then return "the server could not find the requested resource" end
  if status >= 500 then
    return format("an error on the server (%q) has prevented the request from succeeding",
      (tostring(body):gsub("%s+$", "")))
  end
  return format("the server responded with the status code %d but did not return more "
    .. "information", status)
end

-- post(routes, cc, timeout, query, review) -> the answer's review (a
-- table) | nil, why (as Go's rest client words it): POSTs a review to a
-- webhook's clientConfig cc from the calling task, for at most timeout
-- seconds. Shared by the admission and the conversion webhooks.
function _M.post(routes, cc, timeout, query, review)
  local shown, url, tls = target(routes, cc, query)
  if not shown then return nil, url end
  local r, msg, code = http.request { method = "POST", url = url, body = encode(review),
    tls = tls, timeout = timeout, connect_timeout = timeout,
    headers = { ["Content-Type"] = "application/json", Accept = "application/json, */*" } }
  if not r then
    return nil, format("Post %q: %s", shown, transport_error(tostring(msg), code,
      url:match("^https?://([^/?]+)")))
  end
  if r.status < 200 or r.status > 299 then return nil, http_error(r.status, r.body) end
  local out = decode(r.body)
  if not is_object(out) then return nil, "the answer is not a JSON object" end
  return out
end

-- The AdmissionReview version a webhook is sent: the first of its
-- admissionReviewVersions the server knows (CreateAdmissionObjects).
local REVIEW_VERSIONS = { v1 = true, v1beta1 = true }

local function review_version(w)
  for _, v in ipairs(list(w.admissionReviewVersions)) do
    if REVIEW_VERSIONS[v] then return v end
  end
  return nil
end

-- call(w, request) -> the AdmissionReview's response | nil, the reason of
-- an ErrCallingWebhook. The review goes in the version review_version
-- picks; the answer's uid is checked for v1 only, as kube-apiserver checks it.
function Admission:call(w, request)
  local version = review_version(w)
  if not version then
    return nil, "could not create admission objects: webhook does not accept known "
      .. "AdmissionReview versions (v1, v1beta1)"
  end
  local timeout = type(w.timeoutSeconds) == "number" and w.timeoutSeconds or 10
  local review, why = _M.post(self.routes, w.clientConfig, timeout,
    format("?timeout=%ds", timeout), { apiVersion = "admission.k8s.io/" .. version,
      kind = "AdmissionReview", request = request })
  if not review then return nil, "failed to call webhook: " .. why end
  local resp = review.response
  if not is_object(resp) then
    return nil, "received invalid webhook response: webhook response was absent"
  end
  if version == "v1" and resp.uid ~= request.uid then
    return nil, format("received invalid webhook response: expected response.uid=%q, got %q",
      request.uid, tostring(resp.uid or ""))
  end
  return resp
end

-- The AdmissionReview request of a: in the version of resource `via`
-- (the matched one), with the object converted to it | nil, status when
-- it cannot be.
function Admission:request(a, via)
  local function as(obj)
    if obj == nil then return null end
    if via == a.res or a.sub == "scale" then return obj end
    return self.convert(a.res, via, obj)
  end
  local res, sub = a.res, a.sub or ""
  local obj, err = as(a.obj)
  if not obj then return nil, err end
  local old
  old, err = as(a.old)
  if not old then return nil, err end
  local r = { uid = util.uid(),
    kind = a.sub == "scale" and SCALE or { group = via.group, version = via.version,
      kind = via.kind },
    resource = { group = via.group, version = via.version, resource = via.name },
    requestKind = a.sub == "scale" and SCALE or { group = res.group, version = res.version,
      kind = res.kind },
    requestResource = { group = res.group, version = res.version, resource = res.name },
    name = a.name, namespace = a.ns, operation = a.op,
    userInfo = { username = a.user, groups = array(a.user == "admin"
      and { "system:masters", "system:authenticated" } or { "system:authenticated" }) },
    object = obj, oldObject = old, dryRun = a.dry_run == true,
    options = { apiVersion = "meta.k8s.io/v1", kind = a.op == "CREATE" and "CreateOptions"
      or a.op == "DELETE" and "DeleteOptions" or "UpdateOptions" } }
  if sub ~= "" then r.subResource, r.requestSubResource = sub, sub end
  if a.dry_run then r.options.dryRun = array { "All" } end
  if a.field_manager then r.options.fieldManager = a.field_manager end
  return r
end

-- Calls one webhook of kind "mutate" or "validate" -> the result:
-- true (allowed), "changed" (a patch changed a.obj) | nil, status.
function Admission:invoke(kind, h, via, a)
  local w = h.w
  local name = tostring(w.name)
  if a.dry_run and w.sideEffects ~= "None" and w.sideEffects ~= "NoneOnDryRun" then
    return nil, failure(400, "BadRequest", format("admission webhook %q does not support dry run",
      name))
  end
  -- an ErrCallingWebhook: the server's 500, or nothing under failurePolicy Ignore
  local function bad(why)
    local msg = format("failed calling webhook %q: %s", name, why)
    if w.failurePolicy == "Ignore" then
      log.warn("sim: failed calling webhook, failing open", { webhook = name, error = msg })
      return true
    end
    return nil, internal(msg)
  end
  local request, err = self:request(a, via)
  if not request then return nil, err end
  local resp, why = self:call(w, request)
  if not resp then return bad(why) end
  for _, m in ipairs(list(resp.warnings)) do
    a.ctx.warnings = a.ctx.warnings or {}
    a.ctx.warnings[#a.ctx.warnings + 1] = tostring(m)
  end
  if resp.allowed ~= true then return nil, denied(name, resp.status) end
  if kind ~= "mutate" or resp.patch == nil or resp.patch == null then return true end
  if resp.patchType ~= "JSONPatch" then
    return bad(format("unsupported patch type %q", tostring(resp.patchType or "")))
  end
  local ops = decode(util.b64decode(tostring(resp.patch)) or "")
  if not is_array(ops) then
    return bad("received undecodable patch in webhook response: invalid JSON Patch")
  end
  if #ops == 0 then return true end
  if a.obj == nil then
    return nil, internal(format("admission webhook %q attempted to modify the object, which is "
      .. "not supported for this operation", name))
  end
  local out
  out, err = patchlib.json_patch(request.object, ops)
  if not out then return nil, internal("the JSON Patch could not be applied: " .. err) end
  if via ~= a.res then
    out, err = self.convert(via, a.res, out)
    if not out then return nil, err end
  end
  if equal(out, a.obj) then return true end
  a.obj = out
  return "changed"
end

-- The mutating webhooks, then once more those with reinvocationPolicy
-- IfNeeded that a later webhook's change followed (kube-apiserver's one
-- reinvocation).
function Admission:mutate(a)
  local hooks = self:hooks("mutatingwebhookconfigurations")
  local called, again = {}, {}
  local function call(h)
    local via = self:matched(h.w, a.op, a.res, a.sub or "")
    if not (via and self:namespace_selects(h.w, a) and self:object_selects(h.w, a)) then
      return true
    end
    return self:invoke("mutate", h, via, a)
  end
  for i, h in ipairs(hooks) do
    local r, st = call(h)
    if not r then return nil, st end
    if r == "changed" then
      for j in pairs(called) do again[j] = true end
    end
    if h.w.reinvocationPolicy == "IfNeeded" then called[i] = true end
  end
  for i, h in ipairs(hooks) do
    if again[i] then
      local r, st = call(h)
      if not r then return nil, st end
    end
  end
  return true
end

-- The validating webhooks that match, called at once as kube-apiserver
-- calls them (one goroutine each): every one is asked even when another
-- denies, and the first refusal to arrive is the answer (the others are
-- dropped, as the server's dispatcher drops them). The first webhook is
-- called from the request's task, the others from tasks of their own.
function Admission:validate(a)
  local matched = {}
  for _, h in ipairs(self:hooks("validatingwebhookconfigurations")) do
    local via = self:matched(h.w, a.op, a.res, a.sub or "")
    if via and self:namespace_selects(h.w, a) and self:object_selects(h.w, a) then
      matched[#matched + 1] = { h = h, via = via }
    end
  end
  local left, refusal = #matched, nil
  local function ask(m)
    local ok, r, st = pcall(self.invoke, self, "validate", m.h, m.via, a)
    if not ok then
      r, st = nil, internal(format("ValidatingAdmissionWebhook/%s has panicked: %s",
        tostring(m.h.w.name), tostring(r)))
    end
    if not r and refusal == nil then refusal = st end
    left = left - 1
  end
  for i = 2, #matched do kube.spawn(ask, matched[i]) end
  if matched[1] then ask(matched[1]) end
  -- the others end within their timeoutSeconds
  while left > 0 do kube.sleep(0.001) end
  if refusal then return nil, refusal end
  return true
end

-- admit(phase, op, res, obj, old, ctx) -> the object (a new one, the
-- mutating webhooks' result, in phase "mutate"; obj itself in phase
-- "validate"; old for a DELETE) | nil, status.
-- ctx: the request's (user, dry_run, subresource, field_manager, warnings).
function Admission:admit(phase, op, res, obj, old, ctx)
  local s = self.store
  if res.group == "admissionregistration.k8s.io" and exempt[res.name]
      or s:resource(REG, phase == "mutate" and "mutatingwebhookconfigurations"
        or "validatingwebhookconfigurations").count == 0 then
    return obj or old
  end
  local md = obj and obj.metadata or old.metadata
  local a = { op = op, res = res, sub = ctx.subresource, obj = obj, old = old,
    name = md.name ~= "" and md.name or nil, ns = res.namespaced and md.namespace or nil,
    user = ctx.user or "admin",
    dry_run = ctx.dry_run, field_manager = ctx.field_manager, ctx = ctx }
  if a.obj ~= nil then a.obj = copy(a.obj) end
  local ok, st
  if phase == "mutate" then
    ok, st = self:mutate(a)
  else
    ok, st = self:validate(a)
  end
  if not ok then return nil, st end
  if phase ~= "mutate" or obj == nil then return obj or old end
  return a.obj
end

return _M
