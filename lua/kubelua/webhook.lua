-- kubelua.webhook: admission and conversion webhooks written in Lua, served
-- by the runtime over HTTPS (controller-runtime's webhook.Server).
--
--   kube.webhook{ name = "greeting-check", path = "/validate-greeting",
--     validate = function(req) return false, "message is empty" end }
--   kube.webhook{ path = "/mutate-greeting",
--     mutate = function(req) req.object.spec.replicas = 1 end }
--   kube.webhook{ path = "/convert", convert = function(obj, to) … return obj end }
--
-- Admission (admission.k8s.io/v1 AdmissionReview): the handler gets the
-- request as a Lua table (uid, kind, resource, subResource, name,
-- namespace, operation, userInfo, object, oldObject, dryRun, options…,
-- decoded exactly: arrays keep their mark, nulls are kube.null).
-- validate(req) -> true | false, message [, warnings], where message may be
-- a list of field errors ({ field = "spec.message", type = "Required",
-- detail = "…" }; types Required, Forbidden, Invalid, Duplicate and
-- NotSupported, the last three with the value) answered as 422 Invalid
-- with a cause each, as controller-runtime answers them; mutate(req) changes
-- req.object in place and may return as validate does: the response
-- carries the RFC 6902 JSON Patch of the change (patchType JSONPatch), none
-- when nothing changed. Conversion (apiextensions.k8s.io/v1
-- ConversionReview): convert(obj, desiredAPIVersion) -> the converted
-- object (or obj changed in place) | nil, message; one failure fails the
-- review. The converted objects get apiVersion = desiredAPIVersion.
--
-- read_only = true (validate only) hands the handler a read-only view of
-- the request instead (json.view): each object is decoded when a member of
-- it is first read, so a handler that reads a few fields does not pay for
-- the whole object; values read are exactly the decoded ones, a write
-- raises, and pairs, ipairs and # see nothing (json.pairs, json.ipairs and
-- json.len iterate and count; json.encode writes a view whole).
--
-- Handlers run as tasks (they may read caches and call the API), at most
-- `timeout` seconds (default 10, kube-apiserver's default timeoutSeconds).
-- One that raises or times out answers allowed = false, code 500 with the
-- message, logged once with its traceback; the server goes on.
--
-- Hot reload: each generation registers its own webhooks; a request is
-- served by the active generation's, so new requests go to the new code
-- once it has loaded, and a review in progress finishes where it began.
--
-- The server: serve{ address =, cert_dir =, poll = } listens with TLS
-- (tls.crt and tls.key in cert_dir, as cert-manager mounts them), looks at
-- the files every `poll` seconds (default 10, controller-runtime's
-- certwatcher interval) and loads them again when their content changed,
-- for the connections that come next (open ones are not dropped).
-- `kubelua run --webhook-bind-address --webhook-cert-dir` configure it;
-- it starts when the first webhook is registered (at once when the address
-- was given). The server and its certificate watch belong to the process,
-- not to a generation: a reload keeps both.

local core = require "kubelua.core"
local json = require "kubelua.json"
local metrics = require "kubelua.metrics"
local generation = require "kubelua.generation"
local util = require "kubelua.sim.util"

local type, pairs, ipairs, error, tostring, pcall = type, pairs, ipairs, error, tostring, pcall
local next, select, xpcall, unpack = next, select, xpcall, unpack
local sort, format, find, traceback = table.sort, string.format, string.find, debug.traceback

local array, is_array = json.array, json.is_array
local b64encode, equal, deep_copy = util.b64encode, util.equal, util.copy

local _M = {}

-- Metrics, as controller-runtime names them; the webhook label is the path.
local requests_total = metrics.counter{ name = "controller_runtime_webhook_requests_total",
  help = "Total number of admission requests by HTTP status code.",
  labels = { "webhook", "code" } }
local in_flight = metrics.gauge{ name = "controller_runtime_webhook_requests_in_flight",
  help = "Current number of admission requests being served.", labels = { "webhook" } }
local latency = metrics.histogram{ name = "controller_runtime_webhook_latency_seconds",
  help = "Histogram of the latency of processing admission requests",
  labels = { "webhook" }, buckets = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 } }

-- controller-runtime's bound on a request body: 7 MiB, beyond etcd's
-- 1.5 MiB objects twice over (old and new) with room for the envelope.
_M.MAX_BODY = 7 * 1024 * 1024

-- JSON Patch ------------------------------------------------------------------

local function is_object(v)
  if type(v) ~= "table" or is_array(v) then return false end
  return v[1] == nil or next(v) == nil
end

local function is_list(v)
  return type(v) == "table" and (is_array(v) or (v[1] ~= nil))
end

-- RFC 6901: "~" is "~0", "/" is "~1".
local function escape(k)
  return (tostring(k):gsub("~", "~0"):gsub("/", "~1"))
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  sort(ks)
  return ks
end

local diff

local function diff_array(ops, path, a, b)
  local na, nb = #a, #b
  for i = 1, na < nb and na or nb do diff(ops, path .. "/" .. (i - 1), a[i], b[i]) end
  for i = na + 1, nb do
    ops[#ops + 1] = { op = "add", path = path .. "/" .. (i - 1), value = b[i] }
  end
  for i = na, nb + 1, -1 do ops[#ops + 1] = { op = "remove", path = path .. "/" .. (i - 1) } end
end

function diff(ops, path, a, b)
  if equal(a, b) then return end
  if is_object(a) and is_object(b) then
    for _, k in ipairs(sorted_keys(a)) do
      if b[k] == nil then ops[#ops + 1] = { op = "remove", path = path .. "/" .. escape(k) } end
    end
    for _, k in ipairs(sorted_keys(b)) do
      local p = path .. "/" .. escape(k)
      if a[k] == nil then
        ops[#ops + 1] = { op = "add", path = p, value = b[k] }
      else
        diff(ops, p, a[k], b[k])
      end
    end
  elseif is_list(a) and is_list(b) then
    diff_array(ops, path, a, b)
  else
    ops[#ops + 1] = { op = "replace", path = path, value = b }
  end
end

-- json_patch(old, new) -> the RFC 6902 operations that turn old into new
-- (a list, empty when they are equal): objects key by key in byte order,
-- arrays index by index (then adds at the end, or removes from the end).
function _M.json_patch(old, new)
  local ops = array{}
  diff(ops, "", old, new)
  return ops
end

-- Reviews ----------------------------------------------------------------------

local function status(code, message, reason)
  return { code = code, message = message ~= "" and message or nil, reason = reason }
end

local function admission_response(uid, allowed, message, warnings)
  local r = { uid = uid, allowed = allowed,
    status = status(allowed and 200 or 403, message, not allowed and "Forbidden" or nil) }
  if warnings ~= nil then
    if type(warnings) ~= "table" then error("warnings must be a list of strings", 0) end
    local w = array{}
    for i = 1, #warnings do w[i] = tostring(warnings[i]) end
    if #w > 0 then r.warnings = w end
  end
  return r
end

-- field.ErrorType: the reason of a cause and the words its message opens
-- with; the ones marked with a value say the value too.
local FIELD_ERRORS = {
  Required = { "FieldValueRequired", "Required value" },
  Forbidden = { "FieldValueForbidden", "Forbidden" },
  Invalid = { "FieldValueInvalid", "Invalid value", true },
  Duplicate = { "FieldValueDuplicate", "Duplicate value", true },
  NotSupported = { "FieldValueNotSupported", "Unsupported value", true },
}

-- A refusal given as field errors ({ {field =, type =, value =, detail =} }),
-- answered as controller-runtime answers a validator's field.ErrorList
-- (apierrors.NewInvalid): 422 Invalid, "KIND.GROUP "NAME" is invalid: …",
-- one cause per error.
local function invalid(req, errs)
  local causes = {}
  for i, e in ipairs(errs) do
    local t = type(e) == "table" and FIELD_ERRORS[e.type]
    if not t or type(e.field) ~= "string" then
      error("a field error needs field and type (Required, Forbidden, Invalid, Duplicate or "
        .. "NotSupported), got " .. (type(e) == "table" and tostring(e.type) or type(e)), 0)
    end
    local body = t[2]
    if t[3] then
      body = body .. ": " .. (type(e.value) == "string" and util.go_quote(e.value)
        or json.encode(e.value == nil and json.null or e.value))
    end
    if e.detail ~= nil and e.detail ~= "" then body = body .. ": " .. tostring(e.detail) end
    causes[i] = { field = e.field, reason = t[1], message = body }
  end
  local kind = type(req.kind) == "table" and req.kind or {}
  local st = require("kubelua.sim.store").invalid({ group = kind.group or "",
    kind = kind.kind or "" }, req.name, causes)
  return { code = 422, reason = "Invalid", message = st.message, details = st.details }
end

local function errored(uid, code, message)
  return { uid = uid, allowed = false, status = status(code, message) }
end

local function admission_review(resp)
  return { apiVersion = "admission.k8s.io/v1", kind = "AdmissionReview", response = resp }
end

local function conversion_review(resp)
  return { apiVersion = "apiextensions.k8s.io/v1", kind = "ConversionReview", response = resp }
end

-- decode(kind, body [, view]) -> review, request | nil, message: the
-- review's envelope as the API server sends it; view: as a json.view (a
-- body it refuses is decoded, so that the message is decode's).
function _M.decode(kind, body, view)
  local review, err
  if view then review = json.view(body) end
  if review == nil then review, err = json.decode(body) end
  if review == nil then return nil, "cannot decode the body: " .. tostring(err) end
  if not is_object(review) then return nil, "the body is not a JSON object" end
  local want = kind == "convert" and "ConversionReview" or "AdmissionReview"
  local group = kind == "convert" and "apiextensions.k8s.io/v1" or "admission.k8s.io/v1"
  if review.kind ~= want or review.apiVersion ~= group then
    return nil, format("expected a %s of %s, got kind %q apiVersion %q", want, group,
      tostring(review.kind), tostring(review.apiVersion))
  end
  local req = review.request
  if not is_object(req) then return nil, "the review has no request" end
  if type(req.uid) ~= "string" or req.uid == "" then return nil, "the request has no uid" end
  if kind == "convert" then
    if type(req.desiredAPIVersion) ~= "string" or req.desiredAPIVersion == "" then
      return nil, "the request has no desiredAPIVersion"
    end
    if not is_list(req.objects) and not (type(req.objects) == "table" and next(req.objects) == nil)
    then
      return nil, "the request's objects are not a list"
    end
  end
  return review, req
end

-- Runs fn(...) in a task for at most hook.timeout seconds -> true, results
-- | false, message (the traceback included for an error).
local function call(hook, fn, ...)
  local args, n = { ... }, select("#", ...)
  local ok, res = core.run(function()
    local ok, a, b, c = xpcall(fn, traceback, unpack(args, 1, n))
    if not ok then error(a, 0) end
    return a, b, c -- all that admit and convert read
  end, hook.timeout)
  if not ok then return false, tostring(res) end
  return true, res[1], res[2], res[3]
end

local function failed(hook, uid, msg)
  core.log("error", format("webhook %s: the handler failed: %s", hook.name, msg),
    format(" uid=%s", uid))
  return msg:match("^[^\n]*")
end

local function admit(hook, req)
  local uid = req.uid
  if hook.validate then
    local ok, allowed, message, warnings = call(hook, hook.validate, req)
    if not ok then return errored(uid, 500, failed(hook, uid, allowed)) end
    if allowed ~= true and type(message) == "table" then
      local resp = admission_response(uid, false, nil, warnings)
      ok, resp.status = pcall(invalid, req, message)
      if not ok then return errored(uid, 500, failed(hook, uid, resp.status)) end
      return resp
    end
    return admission_response(uid, allowed == true, message ~= nil and tostring(message) or nil,
      warnings)
  end
  local before = deep_copy(req.object)
  local ok, res, message, warnings = call(hook, hook.mutate, req)
  if not ok then return errored(uid, 500, failed(hook, uid, res)) end
  local allowed = res == nil or res == true
  local resp = admission_response(uid, allowed, message ~= nil and tostring(message) or nil,
    warnings)
  if allowed then
    local ops = _M.json_patch(before, req.object)
    if #ops > 0 then
      resp.patchType = "JSONPatch"
      resp.patch = b64encode(json.encode(ops))
    end
  end
  return resp
end

local function convert(hook, req)
  local uid, to = req.uid, req.desiredAPIVersion
  local out = array{}
  for i, obj in ipairs(req.objects) do
    local ok, res, message = call(hook, hook.convert, obj, to)
    if not ok then
      message = failed(hook, uid, res)
      return { uid = uid, result = { status = "Failure", message = message } }
    end
    if res == nil and message ~= nil then
      return { uid = uid, result = { status = "Failure", message = tostring(message) } }
    end
    if res == nil then res = obj end
    if not is_object(res) then
      return { uid = uid, result = { status = "Failure",
        message = format("convert returned a %s for object %d, not an object", type(res), i) } }
    end
    res.apiVersion = to
    out[i] = res
  end
  return { uid = uid, convertedObjects = out, result = { status = "Success" } }
end

-- serve_review(hook, body) -> the response review (a table) for the body
-- of one POST.
function _M.review(hook, body)
  local wrap = hook.kind == "convert" and conversion_review or admission_review
  local review, req = _M.decode(hook.kind, body, hook.read_only)
  if not review then
    local uid = type(req) == "table" and req.uid or ""
    if hook.kind == "convert" then
      return wrap{ uid = uid, result = { status = "Failure", message = req } }
    end
    return wrap(errored("", 400, req))
  end
  if hook.kind == "convert" then return wrap(convert(hook, req)) end
  return wrap(admit(hook, req))
end

-- Registration -----------------------------------------------------------------

local by_gen = {} -- generation -> { path -> hook }
local server      -- the listening server, once started
local config      -- serve's options, kept until the first webhook

generation.on_retire(function(gen) by_gen[gen] = nil end)

local KINDS = { "validate", "mutate", "convert" }

local function check(spec, level)
  if type(spec) ~= "table" then
    error("kube.webhook: expected a table {path = …, validate | mutate | convert = fn}, got "
      .. type(spec), level)
  end
  if type(spec.path) ~= "string" or spec.path:sub(1, 1) ~= "/" then
    error("kube.webhook: path must be a string starting with \"/\", got "
      .. (type(spec.path) == "string" and format("%q", spec.path) or type(spec.path)), level)
  end
  local kind
  for _, k in ipairs(KINDS) do
    if spec[k] ~= nil then
      if type(spec[k]) ~= "function" then
        error(format("kube.webhook %s: %s must be a function, got %s", spec.path, k,
          type(spec[k])), level)
      end
      if kind then
        error(format("kube.webhook %s: one of validate, mutate or convert, not %s and %s",
          spec.path, kind, k), level)
      end
      kind = k
    end
  end
  if not kind then
    error(format("kube.webhook %s: needs validate, mutate or convert", spec.path), level)
  end
  if spec.name ~= nil and type(spec.name) ~= "string" then
    error(format("kube.webhook %s: name must be a string, got %s", spec.path, type(spec.name)),
      level)
  end
  if spec.read_only ~= nil and type(spec.read_only) ~= "boolean" then
    error(format("kube.webhook %s: read_only must be a boolean, got %s", spec.path,
      type(spec.read_only)), level)
  end
  if spec.read_only and kind ~= "validate" then
    error(format("kube.webhook %s: read_only is for validate, not %s", spec.path, kind), level)
  end
  local timeout = spec.timeout
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout <= 0) then
    error(format("kube.webhook %s: timeout must be seconds > 0", spec.path), level)
  end
  return { name = spec.name or spec.path, path = spec.path, kind = kind,
    validate = spec.validate, mutate = spec.mutate, convert = spec.convert,
    timeout = spec.timeout or 10, read_only = spec.read_only or false }
end

local JSON_TYPE = { ["Content-Type"] = "application/json" }

-- A path's series, bound on its first request (a reload keeps them):
-- { in_flight, latency, ok = requests_total's code 200 }.
local series = {}

local function series_of(path)
  local s = series[path]
  if not s then
    local labels = { webhook = path }
    s = { in_flight = in_flight:with(labels), latency = latency:with(labels),
      ok = requests_total:with{ webhook = path, code = "200" } }
    series[path] = s
  end
  return s
end

-- The requests the server got at each path, whatever their answer (a 404
-- included): kubelua.testing waits on them to know that kube-apiserver
-- calls a webhook it was just given.
local received = {}

local function handle(req)
  local path = req:path()
  if find(path, "?", 1, true) then path = path:gsub("%?.*", "") end
  received[path] = (received[path] or 0) + 1
  local hooks = by_gen[generation.current()]
  local hook = hooks and hooks[path]
  if not hook then
    return req:reply(404, { ["Content-Type"] = "text/plain; charset=utf-8" },
      "404 page not found\n")
  end
  local s = series_of(path)
  local t0 = core.monotonic()
  s.in_flight:inc()
  local code, out = 200, nil
  if req:method() ~= "POST" then
    code = 405
  else
    local ctype = (req:header("Content-Type") or ""):match("^[^;%s]*")
    if ctype ~= "application/json" then
      out = (hook.kind == "convert" and conversion_review or admission_review)(
        hook.kind == "convert"
          and { uid = "", result = { status = "Failure", message = format(
            "contentType=%s, expected application/json", ctype) } }
          or errored("", 400, format("contentType=%s, expected application/json", ctype)))
    else
      local ok, res = pcall(_M.review, hook, tostring(req:body()))
      if ok then
        out = res
      else
        code = 500
        core.log("error", format("webhook %s: %s", hook.name, tostring(res)))
      end
    end
  end
  if out then
    local ok, body = pcall(json.encode, out)
    if ok then
      req:reply(200, JSON_TYPE, body)
    else
      code = 500
      core.log("error", format("webhook %s: cannot encode the response: %s", hook.name,
        tostring(body)))
    end
  end
  if code ~= 200 then
    req:reply(code, { ["Content-Type"] = "text/plain; charset=utf-8" },
      code == 405 and "405 method not allowed\n" or "500 internal server error\n")
  end
  s.in_flight:dec()
  if code == 200 then
    s.ok:inc()
  else
    requests_total:inc{ webhook = path, code = tostring(code) }
  end
  s.latency:observe(core.monotonic() - t0)
end

local read = generation.read_file

-- Looks at the certificate files every poll seconds; new content is
-- loaded for the next connections. A failure is said once per content.
-- The task is the process's, as the server is: a reload does not end it.
local function watch_certs(srv, cert, key, poll)
  local seen = (read(cert) or "") .. "\0" .. (read(key) or "")
  local bad
  core.spawn_system("webhook certificates", function()
    while server == srv do
      core.sleep(poll)
      if server ~= srv then return end
      local now = (read(cert) or "") .. "\0" .. (read(key) or "")
      if now ~= seen and now ~= bad then
        local ok, err = srv:set_tls(cert, key)
        if ok then
          seen, bad = now, nil
          core.log("info", "webhook: loaded the new certificate " .. cert)
        else
          bad = now
          core.log("error", "webhook: cannot load the new certificate, the old one stays: "
            .. tostring(err))
        end
      end
    end
  end)
end

local function start(opts)
  local host, port = metrics.parse_address(opts.address)
  if not host then
    if port then return nil, "webhook: " .. port end
    return true
  end
  local dir = opts.cert_dir or "/tmp/k8s-webhook-server/serving-certs"
  local cert, key = dir .. "/tls.crt", dir .. "/tls.key"
  local httpd = require "kubelua.httpd"
  -- The server belongs to the process, not to the generation whose first
  -- webhook started it: requests go to the active generation's hooks.
  local srv, err = core.system(httpd.listen, { host = host, port = port, handler = handle,
    tls_cert = cert, tls_key = key, max_body_bytes = opts.max_body_bytes or _M.MAX_BODY,
    read_timeout = opts.read_timeout, idle_timeout = opts.idle_timeout,
    max_header_bytes = opts.max_header_bytes,
    tls_keep_buffers = true }) -- the API servers' few connections, each busy
  if not srv then
    return nil, format("webhook: cannot listen on %s: %s", opts.address, tostring(err))
  end
  server = srv
  watch_certs(srv, cert, key, opts.poll or 10)
  local shown = host == "" and "0.0.0.0" or host:find(":", 1, true) and "[" .. host .. "]" or host
  core.log("info", format("webhook: serving on https://%s:%d", shown, srv:port()))
  return srv
end

-- serve{ address = ADDR, cert_dir = DIR, poll = SECS, lazy = bool, limits }
-- -> server | true | nil, message. lazy: start when the first webhook is
-- registered (kubelua run's default address in a pod).
function _M.serve(opts)
  if server then return nil, "webhook: the server is running already" end
  if opts.lazy then
    config = opts
    return true
  end
  config = nil
  return start(opts)
end

-- stop(): closes the server (specs).
function _M.stop()
  if server then server:close() end
  server, config = nil, nil
end

-- new(spec) -> hook: kube.webhook.
---Registers an admission or conversion webhook, served over HTTPS by
---`kubelua run` (--webhook-bind-address): {path, name, timeout = 10,
---validate = fn(req) -> true | false, message [, warnings], mutate =
---fn(req) changing req.object, or convert = fn(obj, to_api_version);
---read_only = true: validate gets a read-only view, decoded as it is read}.
---@param spec table
---@param level? integer where errors point (for wrappers)
---@return table hook
---@usage
--- kube.webhook{
---   path = "/validate-greeting",
---   validate = function(req) return req.object.spec.message ~= "", "message is empty" end,
--- }
function _M.new(spec, level)
  local hook = check(spec, (level or 2) + 1)
  local gen = core.generation()
  local hooks = by_gen[gen]
  if not hooks then
    hooks = {}
    by_gen[gen] = hooks
  end
  if hooks[hook.path] then
    error(format("kube.webhook: path %s is registered already", hook.path), (level or 2) + 1)
  end
  hooks[hook.path] = hook
  if config and not server then
    local cfg = config
    config = nil
    local ok, err = start(cfg)
    if not ok then error("kube.webhook: " .. err, (level or 2) + 1) end
  end
  return hook
end

-- received(path) -> the requests the server got at path since the process
-- started, whatever it answered (an unknown path's 404 included).
function _M.received(path) return received[path] or 0 end

-- The hooks of a generation, for the tests: { path -> hook }.
function _M.registered(gen) return by_gen[gen or generation.current()] or {} end

return _M
