-- kubelua.client: the Kubernetes REST client in Lua, over kube.http.request.
--
--   local client = require "kubelua.client"
--   local c = client.new{ server = "https://10.0.0.1:6443", token = "…" }
--   local cm, err = c:get("v1", "configmaps", "default", "app")
--   if client.is_not_found(err) then … end
--
-- Resources are named either by (api_version, resource) — ("v1",
-- "configmaps"), ("apps/v1", "Deployment"), ("v1", "secret"): a plural, a
-- Kind or a singular — or by an object with apiVersion and kind, all
-- resolved through discovery (GET /api/v1 or /apis/G/V, cached per
-- group-version, fetched again once on a miss, at most once a second). A
-- name the server does not serve is a NoKindMatch or NoResourceMatch
-- error (client.is_no_match), never a NotFound.
-- Every call yields the calling task until the answer arrives; outside a
-- task it raises. Objects in and out are kubelua.json tables (exact round
-- trip). Failures return nil, err where err is a table built from the
-- server's Status ({code, reason, message, details}, tostring gives
-- "Reason: message"); transport failures have code 0, reason "Transport".
--
-- Rate limit: a token bucket per client (qps, burst; qps = 0 turns it off)
-- taken before every request, including retries and list pages; a task
-- that finds no token sleeps until one is due. Retries (as client-go's
-- rest client, CLIENTGO.md 2.10): a 429 or 5xx answer that carries an
-- integer Retry-After is retried, whatever the method, up to 10 times,
-- sleeping Retry-After seconds capped at 10 s each time.
--
-- The module functions (get, list, …) use the default client, set with
-- client.set_default(c); kubelua wires it from kubeconfig or --sim.
-- Outside a task (a script's main chunk, a plain coroutine) every verb
-- raises "not inside a task".

local core = require "kubelua.core"
local http = require "kubelua.http"
local json = require "kubelua.json"
local metrics = require "kubelua.metrics"

local type, tostring, tonumber, pairs, setmetatable, getmetatable, error =
  type, tostring, tonumber, pairs, setmetatable, getmetatable, error
local format, sub, find, match, byte = string.format, string.sub, string.find, string.match,
  string.byte
local lower = string.lower
local concat, sort = table.concat, table.sort
local min, floor = math.min, math.floor
local in_task = core.in_task
local encode, decode, array, is_array = json.encode, json.decode, json.array, json.is_array
local request, sleep, monotonic, now = http.request, core.sleep, core.monotonic, core.now

local _M = {}

local MAX_RETRIES = 10       -- as client-go's maxRetries
local MAX_RETRY_WAIT = 10    -- seconds, per retry
local DEFAULT_PAGE = 500     -- list_all's page size when opts.limit is unset
local MESSAGE_BYTES = 200    -- of a non-Status error body

-- Errors -------------------------------------------------------------------

local error_mt = {}
error_mt.__index = error_mt
error_mt.__tostring = function(e) return tostring(e.reason) .. ": " .. tostring(e.message) end

local reasons = {
  [400] = "BadRequest", [401] = "Unauthorized", [403] = "Forbidden", [404] = "NotFound",
  [405] = "MethodNotAllowed", [406] = "NotAcceptable", [409] = "Conflict", [410] = "Gone",
  [413] = "RequestEntityTooLarge", [415] = "UnsupportedMediaType", [422] = "Invalid",
  [429] = "TooManyRequests", [500] = "InternalError", [503] = "ServiceUnavailable",
  [504] = "Timeout",
}

-- The reasons apimachinery knows; a predicate falls back to the HTTP code
-- only when the reason is none of these (as client-go's errors package).
local known = {
  Unauthorized = true, Forbidden = true, NotFound = true, AlreadyExists = true,
  Conflict = true, Gone = true, Invalid = true, ServerTimeout = true, Timeout = true,
  TooManyRequests = true, BadRequest = true, MethodNotAllowed = true, NotAcceptable = true,
  RequestEntityTooLarge = true, UnsupportedMediaType = true, InternalError = true,
  Expired = true, ServiceUnavailable = true,
}

---An error table like the client's own {code, reason, message, details},
---for tests and for code that wraps the client.
---@param code integer the HTTP code
---@param reason string "NotFound", "Conflict", ...
---@param message string
---@param details? table
---@return table err
---@usage return nil, kube.client.new_error(404, "NotFound", 'configmaps "x" not found')
local function new_error(code, reason, message, details)
  return setmetatable({ code = code, reason = reason, message = message, details = details },
    error_mt)
end

-- new_error(code, reason, message [, details]) -> an error table like the
-- client's own (for tests and for code that wraps the client).
_M.new_error = new_error

-- The error for a non-2xx response.
local function response_error(r)
  local st = decode(r.body)
  if type(st) == "table" and st.kind == "Status" then
    local code = tonumber(st.code) or r.status
    local reason = st.reason
    if type(reason) ~= "string" or reason == "" then reason = reasons[code] or "Unknown" end
    local details = st.details
    if details == json.null then details = nil end
    return new_error(code, reason, type(st.message) == "string" and st.message or "", details)
  end
  return new_error(r.status, reasons[r.status] or "Unknown", sub(r.body, 1, MESSAGE_BYTES))
end

local function reason_of(err)
  if type(err) ~= "table" then return nil end
  return err.reason, err.code
end

local function predicate(reason, code)
  ---Whether err (a client error) has this reason (kube.is_not_found: 404
  ---NotFound, is_conflict: 409, is_already_exists, is_gone: 410,
  ---is_expired, is_forbidden: 403, is_invalid: 422, is_unauthorized: 401,
  ---is_too_many_requests: 429), or, for a reason apimachinery does not
  ---know, this HTTP code.
  ---@param err any
  ---@return boolean
  ---@usage
  --- local cm, err = kube.get("v1", "configmaps", "demo", "x")
  --- if kube.is_not_found(err) then return end
  return function(err)
    local r, c = reason_of(err)
    if r == reason then return true end
    return code ~= nil and c == code and not known[r]
  end
end

_M.is_not_found = predicate("NotFound", 404)
_M.is_conflict = predicate("Conflict", 409)
_M.is_already_exists = predicate("AlreadyExists")
_M.is_gone = predicate("Gone", 410)
_M.is_expired = predicate("Expired")
_M.is_forbidden = predicate("Forbidden", 403)
_M.is_invalid = predicate("Invalid", 422)
_M.is_unauthorized = predicate("Unauthorized", 401)
_M.is_too_many_requests = predicate("TooManyRequests", 429)
-- The server serves no such kind or resource (apimachinery's
-- meta.IsNoMatchError: NoKindMatch, NoResourceMatch): found out by
-- discovery, before any request.
---Whether err says the server serves no such kind or resource
---(NoKindMatch, NoResourceMatch: apimachinery's meta.IsNoMatchError),
---found out by discovery before any request.
---@param err any
---@return boolean
---@usage
--- local inf, err = kube.informer("example.com/v1", "Backup")
--- if kube.is_no_match(err) then install_crd() end
_M.is_no_match = function(err)
  local r = reason_of(err)
  return r == "NoKindMatch" or r == "NoResourceMatch"
end
---Whether err is an error table of the client.
---@param err any
---@return boolean
---@usage if kube.client.is_error(err) then print(err.code, err.reason) end
_M.is_error = function(err) return getmetatable(err) == error_mt end

-- Argument checks (misuse raises at the caller's line) ------------------------

-- Raises "name: msg" at the line that called the public function. depth 1:
-- misuse is called by the public function itself; 2: by a helper that the
-- public function calls; and so on. (A function reached by a tail call
-- takes its caller's frame, so it counts as the public function.)
local function misuse(name, msg, depth)
  error(name .. ": " .. msg, (depth or 1) + 2)
end

local function check_task(name)
  if not in_task() then
    misuse(name, "not inside a task (use kube.spawn or a worker)", 2)
  end
end

local function check_string(name, what, v, optional, depth)
  if v == nil and optional then return end
  if type(v) ~= "string" or v == "" then
    misuse(name, format("%s must be a non-empty string, got %s", what,
      type(v) == "string" and '""' or type(v)), (depth or 1) + 1)
  end
end

local function check_opts(name, opts, depth)
  if opts ~= nil and type(opts) ~= "table" then
    misuse(name, "opts must be a table, got " .. type(opts), (depth or 1) + 1)
  end
  return opts or {}
end

-- URLs -----------------------------------------------------------------------

local function escape(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c) return format("%%%02X", byte(c)) end))
end

local function query_string(params)
  local keys = {}
  for k in pairs(params) do keys[#keys + 1] = k end
  if #keys == 0 then return "" end
  sort(keys)
  local out = {}
  for i = 1, #keys do out[i] = keys[i] .. "=" .. escape(params[keys[i]]) end
  return "?" .. concat(out, "&")
end

-- /api/v1/… for the core group, /apis/G/V/… for the others.
---The path of a resource: /api/v1/... for the core group, /apis/G/V/...
---otherwise, namespaced when ns is given.
---@param api_version string
---@param resource string the plural
---@param ns? string
---@param name? string
---@param subresource? string
---@return string
---@usage kube.client.resource_path("apps/v1", "deployments", "demo", "web", "scale")
local function resource_path(api_version, resource, ns, name, subresource)
  local parts = { find(api_version, "/", 1, true) and "/apis/" or "/api/", api_version }
  if ns then parts[#parts + 1] = "/namespaces/" .. escape(ns) end
  parts[#parts + 1] = "/" .. resource
  if name then parts[#parts + 1] = "/" .. escape(name) end
  if subresource then parts[#parts + 1] = "/" .. subresource end
  return concat(parts)
end
_M.resource_path = resource_path

-- Clients --------------------------------------------------------------------

---A REST client of one API server. kube.get, kube.list, ... use the
---default one (kube.client.default()).
---@class kubelua.client
local Client = {}
Client.__index = Client

-- client.new{ server = URL, token = T?, creds = C?, tls = {…}?, qps = 20,
-- burst = 30, user_agent = "kubelua/VERSION", timeout = 30,
-- connect_timeout = 10, idle_timeout = 0 (none), namespace = "default",
-- field_manager = nil } -> a client. tls (server_name included) and the
-- timeouts as kube.http.request's.
-- creds (kubelua.kubeconfig's): creds:token() gives the bearer token of
-- each request (it overrides token); after a 401, creds:invalidate(start)
-- and the request is tried once more. namespace is used for namespaced
-- objects without metadata.namespace; field_manager for apply when the call
-- gives none; discovery_refresh = 1: the seconds that must pass before a
-- name discovery does not know fetches its group-version again.
---A client: {server = URL, token, creds, tls, qps = 20, burst = 30,
---user_agent, timeout = 30, connect_timeout = 10, idle_timeout,
---namespace = "default", field_manager, discovery_refresh = 1}.
---@param opts table
---@return kubelua.client
---@usage local c = kube.client.new{ server = kube.server(), token = token, qps = 50 }
function _M.new(opts)
  if type(opts) ~= "table" then misuse("client.new", "opts must be a table, got " .. type(opts)) end
  local server = opts.server
  if type(server) ~= "string" or not server:match("^https?://") then
    misuse("client.new", "opts.server must be an http(s) URL, got "
      .. (type(server) == "string" and format("%q", server) or type(server)))
  end
  for _, k in pairs({ "token", "user_agent", "namespace", "field_manager" }) do
    if opts[k] ~= nil and type(opts[k]) ~= "string" then
      misuse("client.new", "opts." .. k .. " must be a string, got " .. type(opts[k]))
    end
  end
  for _, k in pairs({ "qps", "burst", "timeout", "connect_timeout", "idle_timeout",
                      "discovery_refresh" }) do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v ~= v or v < 0) then
      misuse("client.new", "opts." .. k .. " must be a number >= 0, got "
        .. (type(v) == "number" and tostring(v) or type(v)))
    end
  end
  local creds = opts.creds
  if creds ~= nil and (type(creds) ~= "table" and type(creds) ~= "userdata"
      or type(creds.token) ~= "function") then
    misuse("client.new", "opts.creds must have a token method")
  end
  if opts.tls ~= nil and type(opts.tls) ~= "table" then
    misuse("client.new", "opts.tls must be a table, got " .. type(opts.tls))
  end
  local qps = opts.qps or 20
  local burst = opts.burst or 30
  if burst < 1 then burst = 1 end
  local headers = {
    Accept = "application/json",
    ["User-Agent"] = opts.user_agent or ("kubelua/" .. core.version),
  }
  if opts.token then headers.Authorization = "Bearer " .. opts.token end
  return setmetatable({
    server = (server:gsub("/+$", "")),
    headers = headers,
    tls = opts.tls,
    creds = opts.creds,
    timeout = opts.timeout or 30,
    connect_timeout = opts.connect_timeout, idle_timeout = opts.idle_timeout,
    namespace = opts.namespace or "default",
    field_manager = opts.field_manager,
    qps = qps, burst = burst, tokens = burst, last = nil,
    discovery = {}, discovering = {}, discovery_refresh = opts.discovery_refresh or 1,
  }, Client)
end

-- The bearer token of the next request from creds: without blocking the
-- loop when they can tell (kubeconfig's poll_token: an exec plugin runs
-- while this task sleeps), else with their token method.
local function creds_token(creds)
  if not creds.poll_token then return creds:token() end
  while true do
    local token, err, pending = creds:poll_token()
    if not pending then return token, err end
    sleep(0.05)
  end
end

-- The TLS options with the client certificate that the creds' exec plugin
-- returned, if any (kept while the certificate stays the same).
---@package
function Client:creds_tls()
  local creds = self.creds
  local cert, key
  if creds.client_cert then cert, key = creds:client_cert() end
  if not cert then return self.tls end
  local cached = self.cert_tls
  if cached and cached.cert == cert and cached.key == key then return cached end
  cached = {}
  for k, v in pairs(self.tls or {}) do cached[k] = v end
  cached.cert_file, cached.key_file, cached.cert, cached.key = nil, nil, cert, key
  self.cert_tls = cached
  return cached
end

-- Waits for a token of the bucket (reserving it first, so tasks that wait
-- together are served in turn, each at its own due time).
---@package
function Client:take_token()
  local qps = self.qps
  if qps <= 0 then return end
  local t = monotonic()
  local tokens = self.tokens
  if self.last then tokens = min(self.burst, tokens + (t - self.last) * qps) end
  self.last = t
  tokens = tokens - 1
  self.tokens = tokens
  if tokens < 0 then sleep(-tokens / qps) end
end

-- c:request(method, path, query, body, content_type) -> decoded body | nil, err.
-- The raw verb under all the others; path is relative to the server.
-- client-go's rest_client_requests_total{code,method,host} ("<error>" when
-- no answer came) and rest_client_request_duration_seconds{verb,host}.
local requests_total, request_duration = metrics.requests, metrics.request_duration
local function count_request(self, method, r, started)
  local host = self.metrics_host
  if not host then
    host = self.server:match("^%a[%w+.-]*://([^/]*)") or self.server
    self.metrics_host = host
  end
  requests_total:inc({ code = r and tostring(r.status) or "<error>", method = method, host = host })
  request_duration:observe(monotonic() - started, { verb = method, host = host })
end

---The raw verb under all the others; path is relative to the server. In
---a task.
---@param method string "GET", "POST", ...
---@param path string
---@param query? table
---@param body? string|table
---@param content_type? string
---@return table|nil body decoded
---@return table? err
---@usage local v = assert(c:request("GET", "/version"))
function Client:request(method, path, query, body, content_type)
  local creds = self.creds
  local headers = self.headers
  if content_type or creds then
    headers = { ["Content-Type"] = content_type }
    for k, v in pairs(self.headers) do headers[k] = v end
  end
  local opts = { method = method, url = self.server .. path .. query_string(query or {}),
    headers = headers, body = body, timeout = self.timeout, tls = self.tls,
    connect_timeout = self.connect_timeout, idle_timeout = self.idle_timeout }
  local r, msg
  local reauthorized = false
  for attempt = 0, MAX_RETRIES do
    self:take_token()
    if creds then
      local token, terr = creds_token(creds)
      if terr then return nil, new_error(0, "Unauthorized", "credentials: " .. tostring(terr)) end
      headers.Authorization = token and "Bearer " .. token or nil
      opts.tls = self:creds_tls()
    end
    -- on the creds' own clock when they have one (kubeconfig's: monotonic)
    local start = creds and creds.now and creds:now() or now()
    local started = monotonic()
    r, msg = request(opts)
    count_request(self, method, r, started)
    if not r then return nil, new_error(0, "Transport", msg) end
    local st = r.status
    if st >= 200 and st < 300 then
      if r.body == "" then return {} end
      local obj, derr = decode(r.body)
      if obj == nil then
        return nil, new_error(st, "InternalError", "decoding the response: " .. tostring(derr))
      end
      return obj
    end
    local wait = tonumber(r.headers["retry-after"] or "")
    if st == 401 and creds and creds.invalidate and not reauthorized then
      -- a rotated or expired token: drop it and try once with a fresh one
      creds:invalidate(start)
      reauthorized, wait = true, 0
    elseif not (wait and (st == 429 or st >= 500)) then
      break
    end
    if attempt == MAX_RETRIES then break end
    if wait > 0 then sleep(min(MAX_RETRY_WAIT, floor(wait))) end
  end
  return nil, response_error(r)
end

-- Discovery ------------------------------------------------------------------

-- Fetches the APIResourceList of a group-version into the cache. A
-- group-version the server does not serve (404) is cached as one with no
-- resources, so that its misses are rate limited as any other's.
---@package
function Client:discover(gv)
  -- another task fetches it: wait for it (bounded, in case that task dies)
  local start = monotonic()
  if (self.discovering[gv] or 0) > start then
    while (self.discovering[gv] or 0) > monotonic() do sleep(0.005) end
    local entry = self.discovery[gv]
    if entry and entry.at >= start then return entry end
  end
  self.discovering[gv] = monotonic() + self.timeout + 1
  local list, err = self:request("GET", resource_path(gv, ""):sub(1, -2))
  self.discovering[gv] = nil
  if not list and err.code ~= 404 then return nil, err end
  local entry = { kinds = {}, resources = {}, names = {} }
  local items = list and type(list.resources) == "table" and list.resources or {}
  for _, r in pairs(items) do
    if type(r) == "table" and type(r.name) == "string" and not find(r.name, "/", 1, true) then
      local info = { name = r.name, kind = r.kind, namespaced = r.namespaced == true,
        verbs = r.verbs, subresources = {} }
      entry.resources[r.name] = info
      if type(r.kind) == "string" then entry.kinds[r.kind] = info end
      -- the singular, as client-go's RESTMapper has it: singularName, or
      -- (empty for built-in resources before 1.27) the kind in lower case
      local singular = r.singularName
      if type(singular) ~= "string" or singular == "" then
        singular = type(r.kind) == "string" and lower(r.kind) or nil
      end
      if singular then entry.names[singular] = entry.names[singular] or info end
      entry.names[lower(r.name)] = info
    end
  end
  for _, r in pairs(items) do
    local base, subres
    if type(r) == "table" and type(r.name) == "string" then
      base, subres = r.name:match("^([^/]+)/(.+)$")
    end
    if base and entry.resources[base] then entry.resources[base].subresources[subres] = true end
  end
  entry.at = monotonic()
  self.discovery[gv] = entry
  return entry
end

-- What name stands for in a group-version's discovery: a Kind (exactly,
-- when kind_only), else also a plural resource or a singular, in any case
-- ("configmaps", "configmap", "ConfigMap", "ConfigMaps").
local function find_info(entry, name, kind_only)
  local info = entry.kinds[name]
  if info or kind_only then return info end
  return entry.resources[name] or entry.names[lower(name)]
end

-- Looks name up in a group-version's discovery. A miss, or nothing cached,
-- fetches the group-version again (for CRDs created since), at most once
-- per discovery_refresh seconds: a miss in between is answered from the
-- cache. -> info, or nil and the request's error (none for a plain miss).
local function lookup(self, api_version, name, kind_only)
  local entry = self.discovery[api_version]
  local info = entry and find_info(entry, name, kind_only)
  if info or entry and monotonic() - entry.at < self.discovery_refresh then return info end
  local err
  entry, err = self:discover(api_version)
  if not entry then return nil, err end
  return find_info(entry, name, kind_only)
end

-- The error for a name discovery does not know (apimachinery's
-- NoKindMatchError and NoResourceMatchError): no request was made, so no
-- "not found" about an object.
local function no_match(api_version, name, kind)
  if kind then
    return new_error(0, "NoKindMatch", format('no matches for kind "%s" in version "%s"',
      name, api_version))
  end
  local group, version = match(api_version, "^(.*)/([^/]*)$")
  return new_error(0, "NoResourceMatch", format("no matches for %s/%s, Resource=%s",
    group or "", version or api_version, name))
end

-- c:resolve(api_version, kind) -> { name, kind, namespaced, verbs,
-- subresources } | nil, err (NoKindMatch, or discovery's own error).
---What discovery says of a Kind: {name, kind, namespaced, verbs,
---subresources}, or nil, err (NoKindMatch). In a task.
---@param api_version string
---@param kind string
---@return table|nil info
---@return table? err
---@usage local info = assert(c:resolve("apps/v1", "Deployment")); print(info.name)
function Client:resolve(api_version, kind)
  local info, err = lookup(self, api_version, kind, true)
  if info or err then return info, err end
  return nil, no_match(api_version, kind, true)
end

-- c:resource_info(api_version, name) -> as c:resolve, for a Kind
-- ("ConfigMap"), a plural resource ("configmaps") or a singular
-- ("configmap"). An unknown name is a NoKindMatch when it starts with a
-- capital, else a NoResourceMatch.
---As c:resolve, for a Kind, a plural resource or a singular.
---@param api_version string
---@param name string
---@return table|nil info
---@return table? err
---@usage local info = c:resource_info("v1", "configmap")
function Client:resource_info(api_version, name)
  local info, err = lookup(self, api_version, name)
  if info or err then return info, err end
  return nil, no_match(api_version, name, find(name, "^%u") ~= nil)
end

-- c:resource_name(api_version, name) -> the plural resource that name
-- stands for (c:resource_info's), for a request's path | nil, err. When
-- discovery itself fails, a name in lower case goes to the server as
-- given (the server's answer then tells); a Kind cannot.
---The plural resource that name stands for, for a request's path.
---@param api_version string
---@param name string
---@return string|nil resource
---@return table? err
---@usage c:resource_name("v1", "ConfigMap") --> "configmaps"
function Client:resource_name(api_version, name)
  local info, err = self:resource_info(api_version, name)
  if info then return info.name end
  if _M.is_no_match(err) or find(name, "^%u") then return nil, err end
  return name
end

-- c:cached_resource_info(api_version, name) -> as c:resource_info when the
-- group-version's discovery is cached, else nil (no request, so no task
-- needed).
---As c:resource_info when the group-version's discovery is cached, else
---nil (no request, so no task needed).
---@param api_version string
---@param name string
---@return table|nil info
---@usage local info = c:cached_resource_info("v1", "Pod")
function Client:cached_resource_info(api_version, name)
  local entry = self.discovery[api_version]
  return entry and find_info(entry, name) or nil
end

-- Targets --------------------------------------------------------------------

-- From an object: api_version, resource, namespace, name (or nil, err).
-- A namespaced object without metadata.namespace goes to the client's
-- namespace, except for a list (all namespaces).
local function object_target(self, name, obj, depth, for_list)
  local av, kind = obj.apiVersion, obj.kind
  if type(av) ~= "string" or type(kind) ~= "string" then
    misuse(name, "the object needs apiVersion and kind strings", depth + 1)
  end
  local md = obj.metadata
  if md ~= nil and type(md) ~= "table" then
    misuse(name, "metadata must be a table, got " .. type(md), depth + 1)
  end
  md = md or {}
  local info, err = self:resolve(av, kind)
  if not info then return nil, err end
  local ns
  if info.namespaced then
    ns = md.namespace
    if type(ns) ~= "string" or ns == "" then ns = not for_list and self.namespace or nil end
  end
  return av, info.name, ns, md.name
end

-- (api_version, resource, namespace, name, x) or (obj, x) ->
-- api_version, plural resource, namespace, name, x; or nil, err.
local function target(self, name, a, b, c, d, e)
  if type(a) == "table" then
    local av, res, ns, oname = object_target(self, name, a, 2)
    if not av then return nil, res end
    if type(oname) ~= "string" or oname == "" then
      misuse(name, "the object has no metadata.name", 2)
    end
    return av, res, ns, oname, b
  end
  check_string(name, "api_version", a, false, 2)
  check_string(name, "resource", b, false, 2)
  check_string(name, "namespace", c, true, 2)
  check_string(name, "name", d, false, 2)
  local res, err = self:resource_name(a, b)
  if not res then return nil, err end
  return a, res, c, d, e
end

local function check_self(name, self)
  if getmetatable(self) ~= Client then
    misuse(name, "expected a client as self (use c:" .. name:match("[%w_]+$") .. "(…))", 2)
  end
end

local subresources = { status = true, scale = true }

local function check_subresource(name, sr)
  if sr ~= nil and not subresources[sr] then
    misuse(name, 'opts.subresource must be "status" or "scale", got ' .. tostring(sr), 2)
  end
end

-- Query parameters of writes: fieldManager, dryRun, fieldValidation.
local function write_query(opts, field_manager)
  local q = {}
  q.fieldManager = opts.field_manager or field_manager
  if opts.dry_run then q.dryRun = "All" end
  q.fieldValidation = opts.field_validation
  return q
end

-- Verbs ----------------------------------------------------------------------

-- In the positional forms, resource is a plural, a Kind or a singular
-- (c:resource_name).

-- c:get(api_version, resource, namespace, name [, opts]) or c:get(obj [, opts])
-- -> the object | nil, err. opts: subresource ("status", "scale"),
-- resource_version.
---Reads one object: (api_version, resource, namespace, name [, opts]) or
---(obj [, opts]). opts: subresource ("status", "scale"), resource_version.
---resource may be a plural, a Kind or a singular. In a task.
---@param ... any
---@return table|nil obj
---@return table? err
---@usage local cm, err = c:get("v1", "ConfigMap", "demo", "settings")
function Client:get(...)
  local name = "kube.get"
  check_self(name, self)
  check_task(name)
  local av, res, ns, oname, opts = target(self, name, ...)
  if not av then return nil, res end
  opts = check_opts(name, opts)
  check_subresource(name, opts.subresource)
  return self:request("GET", resource_path(av, res, ns, oname, opts.subresource),
    { resourceVersion = opts.resource_version })
end

local list_params = {
  label_selector = "labelSelector", field_selector = "fieldSelector", limit = "limit",
  continue = "continue", resource_version = "resourceVersion",
  resource_version_match = "resourceVersionMatch", timeout_seconds = "timeoutSeconds",
}

local function list_args(self, name, a, b, c, d)
  local av, res, ns, opts
  if type(a) == "table" then
    av, res, ns = object_target(self, name, a, 2, true)
    if not av then return nil, res end
    opts = check_opts(name, b, 2)
  else
    check_string(name, "api_version", a, false, 2)
    check_string(name, "resource", b, false, 2)
    if type(c) == "table" and d == nil then c, d = nil, c end
    check_string(name, "namespace", c, true, 2)
    opts = check_opts(name, d, 2)
    local err
    res, err = self:resource_name(a, b)
    if not res then return nil, err end
    av, ns = a, c
  end
  local q = {}
  for k, p in pairs(list_params) do
    if opts[k] ~= nil then q[p] = tostring(opts[k]) end
  end
  return av, res, ns, q
end

-- c:list(api_version, resource [, namespace] [, opts]) or c:list(obj [, opts])
-- -> the list (kind "…List", metadata.continue when more remain) | nil, err.
-- opts: label_selector, field_selector, limit, continue, resource_version,
-- resource_version_match, timeout_seconds. No namespace: all namespaces.
---Lists objects: (api_version, resource [, namespace] [, opts]) or (obj [,
---opts]); no namespace: all. opts: label_selector, field_selector, limit,
---continue, resource_version, resource_version_match, timeout_seconds.
---@param ... any
---@return table|nil list metadata.continue when more remain
---@return table? err
---@usage local pods = assert(c:list("v1", "pods", "demo", { label_selector = "app=web" }))
function Client:list(...)
  local name = "kube.list"
  check_self(name, self)
  check_task(name)
  local av, res, ns, q = list_args(self, name, ...)
  if not av then return nil, res end
  return self:request("GET", resource_path(av, res, ns), q)
end

-- c:list_all(same as list) -> one list with the items of every page,
-- fetched opts.limit (default 500) at a time; metadata.resourceVersion is
-- the first page's. As client-go's pager, an expired continue token (410)
-- falls back to one full list.
---As c:list, one list with the items of every page (opts.limit, default
---500, at a time); an expired continue token falls back to a full list.
---@param ... any
---@return table|nil list
---@return table? err
---@usage
--- for _, ns in ipairs(assert(c:list_all("v1", "namespaces")).items) do print(ns.metadata.name) end
function Client:list_all(...)
  local name = "kube.list_all"
  check_self(name, self)
  check_task(name)
  local av, res, ns, q = list_args(self, name, ...)
  if not av then return nil, res end
  local path = resource_path(av, res, ns)
  q.limit = q.limit or tostring(DEFAULT_PAGE)
  local first, items = nil, array {}
  while true do
    local page, err = self:request("GET", path, q)
    if not page then
      if first and (_M.is_expired(err) or _M.is_gone(err)) then
        q.limit, q.continue = nil, nil
        q.resourceVersion, q.resourceVersionMatch = nil, nil
        return self:request("GET", path, q)
      end
      return nil, err
    end
    first = first or page
    if type(page.items) == "table" then
      for i = 1, #page.items do items[#items + 1] = page.items[i] end
    end
    local md = type(page.metadata) == "table" and page.metadata or {}
    local cont = md.continue
    if type(cont) ~= "string" or cont == "" then break end
    q.continue = cont
    q.resourceVersion, q.resourceVersionMatch = nil, nil -- 400 with a continue token
  end
  first.items = items
  if type(first.metadata) == "table" then
    first.metadata.continue = nil
    first.metadata.remainingItemCount = nil
  end
  return first
end

local function check_object(name, obj)
  if type(obj) ~= "table" or is_array(obj) then
    misuse(name, "expected an object table, got " .. (type(obj) == "table" and "an array"
      or type(obj)), 2)
  end
end

-- c:create(obj [, opts]) -> the created object | nil, err.
-- opts: field_manager, dry_run, field_validation.
---Creates an object. opts: field_manager, dry_run, field_validation.
---@param obj table
---@param opts? table
---@return table|nil obj as created
---@return table? err AlreadyExists, Invalid, ...
---@usage
--- local cm = assert(c:create{
---   apiVersion = "v1", kind = "ConfigMap",
---   metadata = { namespace = "demo", name = "x" },
---   data = { a = "1" },
--- })
function Client:create(obj, opts)
  local name = "kube.create"
  check_self(name, self)
  check_task(name)
  check_object(name, obj)
  opts = check_opts(name, opts)
  local av, res, ns = object_target(self, name, obj, 1)
  if not av then return nil, res end
  return self:request("POST", resource_path(av, res, ns), write_query(opts), encode(obj),
    "application/json")
end

-- update and patch are tail-called by the methods, so their frame stands
-- for the public function's: their checks raise at depth 1.
local function update(self, name, obj, opts, subresource)
  check_self(name, self)
  check_task(name)
  check_object(name, obj)
  opts = check_opts(name, opts)
  subresource = subresource or opts.subresource
  check_subresource(name, subresource)
  local av, res, ns, oname = object_target(self, name, obj, 1)
  if not av then return nil, res end
  if type(oname) ~= "string" or oname == "" then
    misuse(name, "the object has no metadata.name")
  end
  return self:request("PUT", resource_path(av, res, ns, oname, subresource),
    write_query(opts), encode(obj), "application/json")
end

-- c:update(obj [, opts]) -> the updated object | nil, err (409 Conflict
-- when metadata.resourceVersion is stale). opts: subresource,
-- field_manager, dry_run, field_validation.
---Replaces an object (a Conflict when metadata.resourceVersion is stale).
---opts: subresource, field_manager, dry_run, field_validation.
---@param obj table
---@param opts? table
---@return table|nil obj
---@return table? err
---@usage
--- obj.data.color = "blue"
--- local _, err = c:update(obj)
--- if kube.is_conflict(err) then return kube.requeue_after(0) end
function Client:update(obj, opts)
  return update(self, "kube.update", obj, opts)
end

-- c:update_status(obj [, opts]): update of the status subresource.
---Replaces the status subresource of an object.
---@param obj table
---@param opts? table
---@return table|nil obj
---@return table? err
---@usage obj.status = { ready = true }; assert(c:update_status(obj))
function Client:update_status(obj, opts)
  return update(self, "kube.update_status", obj, opts, "status")
end

local patch_types = {
  merge = "application/merge-patch+json",
  json = "application/json-patch+json",
  strategic = "application/strategic-merge-patch+json",
  apply = "application/apply-patch+yaml", -- JSON is YAML
}

local function patch(self, name, av, res, ns, oname, body, ptype, opts)
  opts = check_opts(name, opts)
  if ptype == nil then ptype = "merge" end
  local ct = patch_types[ptype]
  if not ct then
    misuse(name, 'type must be "merge", "json", "strategic" or "apply", got '
      .. tostring(ptype))
  end
  if type(body) == "table" then
    body = encode(body)
  elseif type(body) ~= "string" then
    misuse(name, "the patch must be a table or a string, got " .. type(body))
  end
  check_subresource(name, opts.subresource)
  local q = write_query(opts, ptype == "apply" and self.field_manager or nil)
  if ptype == "apply" then
    if type(q.fieldManager) ~= "string" or q.fieldManager == "" then
      misuse(name, "opts.field_manager is required for an apply")
    end
    if opts.force then q.force = "true" end
  elseif opts.force then
    misuse(name, "opts.force is only for an apply")
  end
  return self:request("PATCH", resource_path(av, res, ns, oname, opts.subresource), q, body, ct)
end

-- c:patch(api_version, resource, namespace, name, patch, type [, opts]) or
-- c:patch(obj, patch, type [, opts]) -> the patched object | nil, err.
-- patch: a table (encoded) or a string; type: "merge" (the default),
-- "json", "strategic", "apply". opts: field_manager (required for apply,
-- unless the client has one), force (apply only), subresource, dry_run.
---Patches an object: (api_version, resource, namespace, name, patch, type
---[, opts]) or (obj, patch, type [, opts]). patch: a table or a string;
---type: "merge" (default), "json", "strategic", "apply". opts:
---field_manager, force, subresource, dry_run.
---@param a any
---@param ... any
---@return table|nil obj
---@return table? err
---@usage c:patch(obj, { metadata = { labels = { seen = "yes" } } }, "merge")
function Client:patch(a, ...)
  local name = "kube.patch"
  check_self(name, self)
  check_task(name)
  local av, res, ns, oname, body, ptype, opts
  if type(a) == "table" then
    body, ptype, opts = ...
    av, res, ns, oname = target(self, name, a)
  else
    local b, c, d
    b, c, d, body, ptype, opts = ...
    av, res, ns, oname = target(self, name, a, b, c, d)
  end
  if not av then return nil, res end
  return patch(self, name, av, res, ns, oname, body, ptype, opts)
end

-- c:apply(obj [, opts]) -> the object after a server-side apply | nil, err.
-- opts: field_manager (required unless the client has one), force,
-- subresource, dry_run. A conflict with another manager is a 409.
---Server-side apply. opts: field_manager (required unless the client has
---one), force, subresource, dry_run. A conflict with another manager is a
---409.
---@param obj table
---@param opts? table
---@return table|nil obj
---@return table? err
---@usage c:apply(desired, { field_manager = "mirror", force = true })
function Client:apply(obj, opts)
  local name = "kube.apply"
  check_self(name, self)
  check_task(name)
  check_object(name, obj)
  local av, res, ns, oname = target(self, name, obj)
  if not av then return nil, res end
  return patch(self, name, av, res, ns, oname, obj, "apply", opts)
end

-- c:delete(api_version, resource, namespace, name [, opts]) or
-- c:delete(obj [, opts]) -> the server's answer (the object, marked for
-- deletion, or a Status) | nil, err. opts: propagation_policy
-- ("Foreground", "Background", "Orphan"), preconditions {uid,
-- resourceVersion}, grace_period_seconds, dry_run.
---Deletes an object: (api_version, resource, namespace, name [, opts]) or
---(obj [, opts]). opts: propagation_policy ("Foreground", "Background",
---"Orphan"), preconditions {uid, resourceVersion}, grace_period_seconds,
---dry_run.
---@param ... any
---@return table|nil answer the object marked for deletion, or a Status
---@return table? err
---@usage
--- local _, err = c:delete("v1", "configmaps", "demo", "x")
--- if err and not kube.is_not_found(err) then error(err.message) end
function Client:delete(...)
  local name = "kube.delete"
  check_self(name, self)
  check_task(name)
  local av, res, ns, oname, opts = target(self, name, ...)
  if not av then return nil, res end
  opts = check_opts(name, opts)
  local body = { kind = "DeleteOptions", apiVersion = "v1" }
  body.propagationPolicy = opts.propagation_policy
  body.gracePeriodSeconds = opts.grace_period_seconds
  if opts.preconditions ~= nil then
    if type(opts.preconditions) ~= "table" then
      misuse(name, "opts.preconditions must be a table, got " .. type(opts.preconditions))
    end
    body.preconditions = opts.preconditions
  end
  if opts.dry_run then body.dryRun = array { "All" } end
  return self:request("DELETE", resource_path(av, res, ns, oname), nil, encode(body),
    "application/json")
end

-- The default client and the module functions ---------------------------------

local default

-- client.set_default(c): the client the module functions (kube.get, …) use.
---Sets the client that the module functions (kube.get, ...) use.
---@param c kubelua.client|nil
---@usage kube.client.set_default(kube.client.new{ server = url, token = t })
function _M.set_default(c)
  if c ~= nil and getmetatable(c) ~= Client then
    misuse("client.set_default", "expected a client or nil, got " .. type(c))
  end
  default = c
end

-- client.default() -> the default client, or nil.
---The default client, or nil.
---@return kubelua.client|nil
---@usage local c = kube.client.default()
function _M.default() return default end

local function default_client(name)
  if not default then
    -- kubelua connects on first use (kubeconfig, in-cluster), as informers do
    local kube = package.loaded.kubelua
    if type(kube) == "table" and kube.connect then
      local ok, err = kube.connect()
      if not ok then misuse(name, "not connected: " .. tostring(err), 2) end
    end
  end
  if not default then
    misuse(name, "no default client (kubelua sets one from kubeconfig or --sim; "
      .. "or call client.set_default)", 2)
  end
  return default
end

for _, verb in pairs({ "get", "list", "list_all", "create", "update", "update_status",
                       "patch", "delete", "apply" }) do
  local method, name = Client[verb], "kube." .. verb
  ---The client's verb on the default client (connecting on first use):
  ---kube.get, kube.list, kube.list_all, kube.create, kube.update,
  ---kube.update_status, kube.patch, kube.delete, kube.apply take the
  ---arguments of kubelua.client's methods of the same names. In a task.
  ---@param ... any
  ---@return table|nil result
  ---@return table? err {code, reason, message}
  ---@usage local cm, err = kube.get("v1", "configmaps", "demo", "settings")
  _M[verb] = function(...)
    return method(default_client(name), ...)
  end
end

_M.Client = Client

return _M
