-- kubelua.sim: the API simulator — a Kubernetes API server in memory, served
-- over HTTP by kubelua.httpd on the runtime's loop (DESIGN.md section 7).
--
--   local sim = require("kubelua.sim").new{ token = "t" }
--   local srv = assert(sim:listen{ host = "127.0.0.1", port = 0 })
--
-- This file is the HTTP side: URL routing, discovery, auth, watches, the
-- /_sim control endpoint for fault injection, and `kubelua sim` (main).
-- The API semantics live in kubelua.sim.store.

local kube = require "kubelua"
local json = require "kubelua.json"
local httpd = require "kubelua.httpd"
local store = require "kubelua.sim.store"
local util = require "kubelua.sim.util"
local yaml = require "kubelua.sim.yaml"
local tables = require "kubelua.sim.table"
local openapi = require "kubelua.sim.openapi"
local resources = require "kubelua.sim.resources"
local protobuf = require "kubelua.sim.protobuf"
local reviews = require "kubelua.sim.reviews"
local controllers = require "kubelua.sim.controllers"
local namespaces = require "kubelua.sim.namespaces"
local admission = require "kubelua.sim.admission"
local conversion = require "kubelua.sim.conversion"
local subresources = require "kubelua.sim.subresources"

local type, pairs, ipairs, tostring, tonumber, setmetatable, pcall =
  type, pairs, ipairs, tostring, tonumber, setmetatable, pcall
local format, sub, find, lower = string.format, string.sub, string.find, string.lower
local concat = table.concat
local encode, decode, is_array = json.encode, json.decode, json.is_array
local status = store.status

local _M = {}
local Sim = {}
Sim.__index = Sim

local FLOWSCHEMA_UID = "535dd7f4-7a84-4abd-bb0d-8dfcef46336c"
local PRIORITY_UID = "fc470be8-1e9e-4a61-a0b9-b20d072636c4"

local version_info = {
  major = "1", minor = "26", gitVersion = "v1.26.0",
  gitCommit = "d2e245fcc3f3d67b3bbedfe317ad0106f1b23f5d", gitTreeState = "clean",
  buildDate = "2026-11-29T22:06:51Z", goVersion = "go1.19.8", compiler = "gc",
  platform = "linux/amd64",
}

-- new(opts): opts.token (the admin's bearer token; none: no auth),
-- opts.users ({ [token] = "name" }: valid users without any permission),
-- opts.history_size (events kept per resource, default 10000),
-- opts.bookmark_interval (seconds, default 60), opts.too_large_wait
-- (seconds before the 504 for a future resourceVersion, default 3),
-- opts.watch_check (seconds, default 1: the longest a watch's handler
-- sleeps between looks at its timeout and bookmarks; an ended watch wakes
-- it at once), opts.controllers (default true; false: kube-apiserver alone,
-- as envtest runs it — no garbage collector removes the finalizer a
-- Foreground or Orphan deletion adds, and no namespace controller empties
-- a deleted namespace, which stays Terminating; or a table turning some
-- off: { gc = false, namespace = false, root_ca = false,
-- service_account = false, deployment = false, … }:
-- kubelua.sim.controllers), opts.nodes (fake Nodes, default 3),
-- opts.pods (the Pods' lifecycle: kubelua.sim.workloads.kubelet).
function _M.new(opts)
  opts = opts or {}
  local self = setmetatable({ opts = opts }, Sim)
  self.store = store.new(opts)
  self.plane = controllers.new(self.store, opts.controllers,
    function() return self.ca_pem or namespaces.DEFAULT_CA end, opts)
  self.faults = { fail_next = 0 }
  self.held = {} -- watcher → resource, while hold_watches holds them
  self.bookmark_interval = opts.bookmark_interval or 60
  self.too_large_wait = opts.too_large_wait or 3
  self.watch_check = opts.watch_check or 1
  self.watch_handlers = 0 -- watch requests being served
  self.servers = {}
  self.routes = {} -- "ns/name:port" → "127.0.0.1:port": route_service
  self.store.admission = admission.new(self.store, self.routes, store.selector_string)
  -- a version's cache stops converting once every server is closed
  self.store.conversion = conversion.new(self.store, self.routes, function()
    for _, srv in ipairs(self.servers) do
      if srv:port() then return true end
    end
    return #self.servers == 0
  end)
  self.store.admission.convert = function(from, to, obj)
    return self.store.conversion:convert(from, to, obj)
  end
  self.subs = subresources.new(self.store)
  return self
end

-- route_service(namespace, name, port, address): the webhooks whose
-- clientConfig names Service namespace/name on port (default 443) are
-- called at address, which must be a loopback "127.0.0.1:PORT" or
-- "[::1]:PORT" (the script's webhook server in a spec): the simulator
-- sends nothing off loopback. address nil: the route goes.
function Sim:route_service(namespace, name, port, address)
  port = port or 443
  if address ~= nil and not (type(address) == "string"
      and (address:match("^127%.%d+%.%d+%.%d+:%d+$") or address:match("^%[::1%]:%d+$"))) then
    error(format("sim: route_service: address must be a loopback host:port (127.0.0.1:PORT), "
      .. "got %s", type(address) == "string" and format("%q", address) or type(address)), 2)
  end
  self.routes[format("%s/%s:%d", namespace, name, port)] = address
end

-- Responses -------------------------------------------------------------------

local function base_headers(apf)
  local h = { ["Cache-Control"] = "no-cache, private", ["Content-Type"] = "application/json",
    ["Audit-Id"] = util.uid() }
  if apf then
    h["X-Kubernetes-Pf-Flowschema-Uid"] = FLOWSCHEMA_UID
    h["X-Kubernetes-Pf-Prioritylevel-Uid"] = PRIORITY_UID
  end
  return h
end

local function wants_pretty(req)
  local p = req:param("pretty")
  if p then return p == "true" or p == "1" end
  local ua = req:header("User-Agent") or ""
  return find(ua, "^curl") or find(ua, "^Wget") or find(ua, "^Mozilla/5%.0") or false
end

local BODY_SLICE = 1024 * 1024

-- Waits while the client is more than 4 MiB behind a long response; false
-- when it went away.
local function keep_up(req)
  return req:buffered() <= 4 * 1024 * 1024 or req:wait_drain()
end

-- Sends body, then tail ("" or a newline), with headers h. As Go's
-- net/http does for the apiserver, a body over 2048 bytes goes out
-- chunked, without Content-Length.
local function send_body(req, code, h, body, tail)
  if #body < 2048 then return req:reply(code, h, body .. tail) end
  if not req:stream_begin(code, h) then return end
  -- in slices, pausing while the client is behind: a body over the stream
  -- buffer's cap (a pretty-printed list of thousands) cannot go in one write
  local n = #body
  for i = 1, n, BODY_SLICE do
    if not req:write(sub(body, i, i + BODY_SLICE - 1)) then return end
    if not keep_up(req) then return end
  end
  if tail ~= "" then req:write(tail) end
  return req:finish()
end

-- Sends a JSON body (a table, JSON text or bytes). As Go's net/http does for the
-- apiserver, a body over 2048 bytes goes out chunked, one without
-- Content-Length.
local function reply_json(req, code, body, extra, no_apf, warnings)
  if type(body) == "userdata" then
    body = tostring(body)
  elseif type(body) ~= "string" then
    body = encode(body)
  end
  local h = base_headers(not no_apf)
  if extra then
    for k, v in pairs(extra) do h[k] = v end
  end
  if warnings and #warnings > 0 then
    local w = {}
    for i, m in ipairs(warnings) do w[i] = "299 - " .. encode(m) end
    h.Warning = concat(w, ", ")
  end
  if wants_pretty(req) then body = util.indent(body) end
  return send_body(req, code, h, body, sub(body, -1) ~= "\n" and "\n" or "")
end

-- Streams a list body from the store: the items go out in chunks of a few
-- hundred, pausing while the client is behind, so a list of 100,000
-- objects never becomes one string.
local function reply_list(req, lb)
  if wants_pretty(req) or lb.n < 16 then return reply_json(req, 200, store.join(lb)) end
  if not req:stream_begin(200, base_headers(true)) then return end
  local items, n = lb.items, lb.n
  local step = 256
  for i = 1, n, step do
    local j = math.min(i + step - 1, n)
    local ok = req:write(i == 1 and lb.head or ",", httpd.join(items, i, j, ","))
    if not ok then return end
    if not keep_up(req) then return end
  end
  if n == 0 then req:write(lb.head) end
  req:write(lb.tail, "\n")
  return req:finish()
end

-- The object of a create or update body: JSON, or YAML when the request
-- says so (Content-Type application/yaml), as a real server accepts both,
-- or protobuf for the kinds kubectl's generators send that way (kubectl
-- create namespace, configmap, secret, serviceaccount). Another type, or
-- protobuf of another kind, gets the real server's 415 listing what the
-- simulator reads. A body without a type is read as JSON.
local yaml_types = { ["application/yaml"] = true, ["application/x-yaml"] = true,
  ["text/yaml"] = true }
local function unsupported(what)
  return status(415, "UnsupportedMediaType", "the body of the request was in an unknown "
    .. "format - accepted media types include: application/json, application/yaml" .. what)
end
local function body_object(res, req, subresource)
  local ct = lower((req:header("Content-Type") or ""):match("^[^;%s]*"))
  if yaml_types[ct] then return store.decode_yaml_body(res, req:body()) end
  -- a TokenRequest is the one subresource body a client sends as protobuf
  -- (kubectl create token)
  if ct == "application/vnd.kubernetes.protobuf" and subresource and subresource ~= "token" then
    return nil, unsupported(" (application/vnd.kubernetes.protobuf for objects, not their "
      .. subresource .. ")")
  elseif ct == "application/vnd.kubernetes.protobuf" then
    local obj, why, gvk = protobuf.decode(req:body())
    if obj then return obj end
    if why then return nil, store.bad_request(why) end
    return nil, unsupported(format(" (application/vnd.kubernetes.protobuf for %s only, not %s)",
      protobuf.kinds(), gvk))
  end
  if ct ~= "" and ct ~= "application/json" then return nil, unsupported("") end
  return store.decode_body(res, req:body())
end

local function reply_status(req, st, extra)
  return reply_json(req, st.code, st, extra, st.code == 401)
end

local function reply_text_404(req)
  return req:reply(404, { ["Content-Type"] = "text/plain; charset=utf-8",
    ["X-Content-Type-Options"] = "nosniff", ["Cache-Control"] = "no-cache, private" },
    "404 page not found\n")
end

local function not_found_resource()
  return status(404, "NotFound", "the server could not find the requested resource", {})
end

local function method_not_allowed()
  return status(405, "MethodNotAllowed",
    "the server does not allow this method on the requested resource", {})
end

-- Discovery -------------------------------------------------------------------------

-- GET /apis as JSON text: the built-in groups in the real server's order,
-- then those of CustomResourceDefinitions.
function Sim:discovery_groups()
  local s = self.store
  local groups, seen = {}, {}
  local function add(g)
    if s.groups[g] and not seen[g] then
      seen[g] = true
      groups[#groups + 1] = resources.group_text(g, s.groups[g])
    end
  end
  for _, g in ipairs(resources.group_order) do add(g) end
  for _, g in ipairs(s.group_list) do add(g) end
  return resources.group_list_text(groups)
end

function Sim:resource_list(gv)
  local entries = {}
  for _, r in ipairs(self.store.gvs[gv].list) do
    for _, e in ipairs(r.disco) do entries[#entries + 1] = e end
  end
  table.sort(entries, function(a, b) return a.name < b.name end)
  return resources.resource_list_text(gv, entries)
end

-- OpenAPI v3: the index of the documents, then each one at the URL the
-- index gives: the real server's for the built-in groups (as it sent them:
-- not indented, no newline), one made here for each group version of a
-- CRD. A stale hash is redirected to the current one, as the real server
-- does (a CRD changes its group version's).
function Sim:openapi(req, path)
  local gvs = self.store.gvs
  -- the document at index path p, its hash and whether it is the real
  -- server's; nil when there is none (the real server's index has no
  -- apiregistration.k8s.io/v1, served by its aggregator: neither here)
  local function doc(p)
    local text, hash = openapi.captured(p)
    if text then return text, hash, true end
    for gv, g in pairs(gvs) do
      if openapi.gv_path(gv) == p and not g.list[1].builtin then
        text = openapi.document(g, version_info.gitVersion)
        return text, openapi.hash(text), false
      end
    end
    return nil
  end
  if path == "/openapi/v3" then
    local paths = openapi.captured_index()
    for gv, g in pairs(gvs) do
      local p = openapi.gv_path(gv)
      if not paths[p] and not g.list[1].builtin then
        local _, hash = doc(p)
        paths[p] = { serverRelativeURL = "/openapi/v3/" .. p .. "?hash=" .. hash }
      end
    end
    return send_body(req, 200, base_headers(true), encode { paths = paths }, "")
  end
  local want = path:sub(#"/openapi/v3/" + 1)
  local text, hash, captured = doc(want)
  if not text then return reply_text_404(req) end
  local url = "/openapi/v3/" .. want .. "?hash=" .. hash
  local asked = req:param("hash")
  if asked == "" then asked = nil end
  if asked and asked ~= hash then
    return req:reply(301, { Location = url, ["Content-Type"] = "text/html; charset=utf-8" },
      '<a href="' .. url:gsub("&", "&amp;") .. '">Moved Permanently</a>.\n\n')
  end
  local h = { Etag = '"' .. hash .. '"' }
  if asked then -- cached for a year: the hash changes with the document
    h["Cache-Control"], h.Vary = "public, immutable", "Accept"
    h.Expires = os.date("!%a, %d %b %Y %H:%M:%S UTC", os.time() + 365 * 86400)
  end
  if req:header("If-None-Match") == h.Etag then return req:reply(304, h, "") end
  if not captured then return reply_json(req, 200, text, h) end
  local all = base_headers(true)
  for k, v in pairs(h) do all[k] = v end
  return send_body(req, 200, all, text, "")
end

-- Auth ------------------------------------------------------------------------------

-- Returns the user name, or nil, status.
function Sim:authenticate(req)
  if not self.opts.token then return "admin" end
  local auth = req:header("Authorization")
  if not auth then return "system:anonymous" end
  local token = auth:match("^[Bb]earer%s+(.-)%s*$")
  if token == self.opts.token then return "admin" end
  if token and self.opts.users and self.opts.users[token] then return self.opts.users[token] end
  local sa = token and self.subs:token_user(token) -- a serviceaccounts/token token
  if sa then return sa end
  return nil, status(401, "Unauthorized", "Unauthorized")
end

local anonymous_paths = { ["/version"] = true, ["/healthz"] = true, ["/readyz"] = true,
  ["/livez"] = true }

local function forbidden(user, r)
  local what = r.group == "" and r.res_name or r.res_name .. "." .. r.group
  if r.name then what = format('%s "%s"', what, r.name) end
  local subject = r.sub and (r.res_name .. "/" .. r.sub) or r.res_name
  local scope = r.ns and format('in the namespace "%s"', r.ns) or "at the cluster scope"
  local d = { kind = r.res_name }
  if r.name then d.name = r.name end
  if r.group ~= "" then d.group = r.group end
  return status(403, "Forbidden", format('%s is forbidden: User "%s" cannot %s resource "%s" '
    .. 'in API group "%s" %s', what, user, r.verb, subject, r.group, scope), d)
end

-- Routing -----------------------------------------------------------------------------

-- Splits an API path into { group, version, gv, ns, res_name, name, sub,
-- watch }; nil when the path is not an API resource path.
local function parse_path(path)
  local segs = {}
  for s in path:gmatch("[^/]+") do segs[#segs + 1] = s end
  local r = {}
  local i
  if segs[1] == "api" and segs[2] then
    r.group, r.version, r.gv, i = "", segs[2], segs[2], 3
  elseif segs[1] == "apis" and segs[3] then
    r.group, r.version, r.gv, i = segs[2], segs[3], segs[2] .. "/" .. segs[3], 4
  else
    return nil
  end
  if segs[i] == "watch" then
    r.watch = true
    i = i + 1
  end
  r.rest = {}
  for j = i, #segs do r.rest[#r.rest + 1] = segs[j] end
  return r
end

function Sim:resolve(r)
  local rest = r.rest
  local s = self.store
  if rest[1] == "namespaces" and rest[3] then
    local res = s:resource(r.gv, rest[3])
    if res and res.namespaced then
      r.ns, r.res, r.res_name, r.name, r.sub = rest[2], res, rest[3], rest[4], rest[5]
      return #rest <= 5 or r.sub == "proxy"
    end
  end
  r.res_name = rest[1]
  r.res = rest[1] and s:resource(r.gv, rest[1])
  r.name, r.sub = rest[2], rest[3]
  if r.res and r.res.namespaced and r.name then return false end
  return #rest <= 3 or r.sub == "proxy"
end

local function query_params(req)
  return req:params() or {}
end

-- A request's context for the store: its writes are admitted (admit).
local function ctx_of(req, params, r, user)
  return { user_agent = req:header("User-Agent"), field_manager = params.fieldManager,
    dry_run = params.dryRun == "All", force = params.force == "true", subresource = r.sub,
    field_validation = params.fieldValidation, admit = true, user = user }
end

local function verb_of(method, r, params)
  if method == "GET" or method == "HEAD" then
    if r.watch or params.watch == "true" or params.watch == "1" then return "watch" end
    return r.name and "get" or "list"
  end
  if method == "POST" then
    if r.name then return nil end
    return "create"
  end
  if not r.name and (method == "PUT" or method == "PATCH") then return nil end
  if method == "PUT" then return "update" end
  if method == "PATCH" then return "patch" end
  if method == "DELETE" then return r.name and "delete" or "deletecollection" end
  return nil
end

local function has_verb(verbs, verb)
  for _, v in ipairs(verbs) do
    if v == verb then return true end
  end
  return false
end

function Sim:serve_resource(req, r, user)
  local method = req:method()
  local params = query_params(req)
  if not r.res then return reply_status(req, not_found_resource()) end
  local res = r.res
  if r.sub and subresources.handles(res, r.sub) then
    return self:serve_subresource(req, r, user, params)
  end
  if r.sub == "scale" and not res.scale then return reply_status(req, not_found_resource()) end
  if r.sub and r.sub ~= "status" and r.sub ~= "scale" then
    return reply_status(req, not_found_resource())
  end
  if r.sub == "status" and not res.status then return reply_status(req, not_found_resource()) end
  local verb = verb_of(method, r, params)
  if not verb or (r.sub and verb ~= "get" and verb ~= "update" and verb ~= "patch") then
    return reply_status(req, method_not_allowed())
  end
  r.verb = verb
  local review = reviews.is_review(res)
  if not (user == "admin" or review
      and reviews.allows(user, { verb = verb, group = res.group, resource = res.name })) then
    return reply_status(req, forbidden(user, r))
  end
  -- what the resource's routes lack: no item routes (a create-only
  -- review), no route outside a namespace (a local review), no such verb
  local entry = res.disco and res.disco[1]
  if not r.sub and entry then
    local item = has_verb(entry.verbs, "get") or has_verb(entry.verbs, "update")
      or has_verb(entry.verbs, "patch") or has_verb(entry.verbs, "delete")
    if (r.name and not item) or (res.namespaced and not r.ns and not has_verb(entry.verbs,
        "list")) then
      return reply_status(req, not_found_resource())
    end
    if not has_verb(entry.verbs, verb) then return reply_status(req, method_not_allowed()) end
  end
  local s = self.store
  local ctx = ctx_of(req, params, r, user)
  if review then
    local obj, err = body_object(res, req)
    if not obj then return reply_status(req, err) end
    obj, err = reviews.review(res, r.ns, obj, user, store.manager_of(ctx))
    if not obj then return reply_status(req, err) end
    return reply_json(req, 201, obj)
  end
  local ns = r.ns
  local form, api = tables.form(req:header("Accept"))
  r.form, r.form_api = form, api -- the watch reads them too
  -- a form's fit and a Table's options are checked once the objects are
  -- there, as the real server does: the Status refusing them, or nil
  local function refused(list)
    local misfit = tables.misfit(form, res, list)
    if misfit then return status(406, "NotAcceptable", misfit) end
    local bad = form == "Table" and tables.options_error(params.includeObject)
    return bad and store.bad_request(bad) or nil
  end
  -- A version of a CRD whose storage version's conversion fills it
  -- (kubelua.sim.conversion): its watches, and its gets and lists at
  -- resourceVersion "0", are served from that cache as kube-apiserver
  -- serves them from its watch cache; any other request waits until the
  -- cache holds every change, and a get's or a list's objects, and a
  -- write's answer, are converted from the storage version now.
  local conv = s.conversion
  local cache = verb ~= "watch" and conv and res.crd and conv:is_cache(res)
    and not (params.resourceVersion == "0" and (verb == "get" or verb == "list"))
  if cache then
    local ok, err = conv:settle(res)
    if not ok then return reply_status(req, err) end
  end
  if r.sub == "scale" then
    local sc, err = s:scale(res, ns, r.name, verb, req:header("Content-Type"), req:body(), ctx)
    if not sc then return reply_status(req, err) end
    return reply_json(req, 200, sc, nil, nil, ctx.warnings)
  end
  -- an object in the form asked for (after a write too: the write stands
  -- when the form does not fit, as the real server transforms its answer)
  local function reply_entry(code, e, warnings)
    if cache then
      local err
      e, err = conv:fresh(res, e)
      if not e then return reply_status(req, err) end
    end
    if form then
      local st = refused(false)
      if st then return reply_status(req, st) end
      local body = form == "PartialObjectMetadata" and tables.partial(e.obj, api)
        or tables.one(res, e.obj, params.includeObject, os.time(), api)
      return reply_json(req, code, body, nil, nil, warnings)
    end
    return reply_json(req, code, e.json, nil, nil, warnings)
  end
  if verb == "get" then
    local e, err = s:get(res, ns, r.name)
    if not e then return reply_status(req, err) end
    return reply_entry(200, e)
  elseif verb == "list" then
    -- a cache's objects converted as the storage reads them: every one in
    -- the list's scope, the selectors matched after
    local lb, err, retry = s:list(res, ns, params, cache and function(e)
      return conv:fresh(res, e)
    end or nil)
    if not lb then
      if retry then kube.sleep(self.too_large_wait) end
      return reply_status(req, err, retry and { ["Retry-After"] = tostring(retry) } or nil)
    end
    if form then
      local st = refused(true)
      if st then return reply_status(req, st) end
      local objs = {}
      for i = 1, lb.n do objs[i] = lb.entries[i].obj end
      if form == "PartialObjectMetadataList" then
        return reply_json(req, 200, tables.partial_list(objs, lb.meta, api))
      end
      local t = tables.build(res, objs, nil, params.includeObject, os.time(), api)
      t.metadata = lb.meta
      return reply_json(req, 200, t)
    end
    return reply_list(req, lb)
  elseif verb == "watch" then
    self.watch_handlers = self.watch_handlers + 1
    local ok, err = pcall(self.watch, self, req, res, ns, params, r)
    self.watch_handlers = self.watch_handlers - 1
    if not ok then error(err, 0) end
    return
  elseif verb == "create" then
    local obj, err = body_object(res, req, r.sub)
    if not obj then return reply_status(req, err) end
    if subresources.is_bindings(res) then -- binds the Pod it names
      local code, out = self.subs:bind(ns, type(obj.metadata) == "table" and obj.metadata.name,
        obj, ctx)
      if not code then return reply_status(req, out) end
      return reply_json(req, code, out)
    end
    local e
    e, err = s:create(res, ns, obj, ctx)
    if not e then return reply_status(req, err) end
    if res.name == "customresourcedefinitions" and not ctx.dry_run then
      local name = e.name
      kube.after(0.01, function() s:establish(name) end)
    end
    return reply_entry(201, e, ctx.warnings)
  elseif verb == "update" then
    local obj, err = body_object(res, req, r.sub)
    if not obj then return reply_status(req, err) end
    local e, created
    e, err, created = s:update(res, ns, r.name, obj, ctx)
    if not e then return reply_status(req, err) end
    return reply_entry(created and 201 or 200, e, ctx.warnings)
  elseif verb == "patch" then
    local e, err, created = s:patch(res, ns, r.name, req:header("Content-Type"), req:body(), ctx)
    if not e then return reply_status(req, err) end
    return reply_entry(created and 201 or 200, e, ctx.warnings)
  elseif verb == "delete" then
    local opts = {}
    local body = req:body()
    if body and body ~= "" then
      opts = decode(body)
      if type(opts) ~= "table" then
        return reply_status(req, store.bad_request("invalid DeleteOptions body"))
      end
    end
    opts.propagationPolicy = params.propagationPolicy or opts.propagationPolicy
    if params.orphanDependents then opts.orphanDependents = params.orphanDependents == "true" end
    opts.gracePeriodSeconds = tonumber(params.gracePeriodSeconds) or opts.gracePeriodSeconds
    local out, err = s:delete(res, ns, r.name, opts, ctx)
    if not out then return reply_status(req, err) end
    return reply_json(req, 200, out)
  elseif verb == "deletecollection" then
    local f, err = store.filters(res, ns, params)
    if not f then return reply_status(req, err) end
    -- as the registry: a list, then a delete of each of its items; the
    -- answer is that list, at its resourceVersion
    local items, list_rv = {}, s.rv
    local keys = s:sorted_keys(res)
    local victims = {}
    for _, key in ipairs(keys) do
      local e = res.objects[key]
      if store.matches(f, e) then victims[#victims + 1] = e end
    end
    for _, e in ipairs(victims) do
      local out = s:delete(res, e.ns ~= "" and e.ns or nil, e.name, {}, ctx)
      if out then
        local t = {}
        local src = out.kind == "Status" and e.obj or out
        for k, v in pairs(src) do
          if not res.builtin or (k ~= "kind" and k ~= "apiVersion") then t[k] = v end
        end
        items[#items + 1] = encode(t)
      end
    end
    return reply_json(req, 200, '{"kind":"' .. res.list_kind .. '","apiVersion":"'
      .. res.api_version .. '","metadata":{"resourceVersion":"' .. list_rv .. '"},"items":['
      .. concat(items, ",") .. "]}")
  end
  return reply_status(req, method_not_allowed())
end

-- The subresources beyond status and scale (kubelua.sim.subresources).
function Sim:serve_subresource(req, r, user, params)
  local res = r.res
  local method = req:method()
  local verb = not r.watch and subresources.verb(res, r.sub, method)
  if not verb then return reply_status(req, method_not_allowed()) end
  r.verb = verb
  if user ~= "admin" then return reply_status(req, forbidden(user, r)) end
  local function read()
    return body_object({ kind = subresources.body_kind[r.sub] or res.kind }, req, r.sub)
  end
  local upgrade = req:header("Upgrade") ~= nil
    or lower(req:header("Connection") or ""):find("upgrade", 1, true) ~= nil
  local code, body, ctype = self.subs:serve(res, r, { read = read, body = req:body(),
    content_type = req:header("Content-Type"), params = params, upgrade = upgrade },
    ctx_of(req, params, r, user))
  if not code then
    local retry = type(body.details) == "table" and body.details.retryAfterSeconds
    return reply_status(req, body, retry and { ["Retry-After"] = tostring(retry) } or nil)
  end
  if ctype then
    return req:reply(code, { ["Content-Type"] = ctype, ["Cache-Control"] = "no-cache, private" },
      body)
  end
  if code == 204 then return req:reply(204, { ["Cache-Control"] = "no-cache, private" }, "") end
  return reply_json(req, code, body)
end

-- Watch -------------------------------------------------------------------------------

-- Sends watcher w the history's events after resourceVersion `from`, at the
-- client's pace, until none is left: true then, with no yield since the last
-- one, so the caller registers w before any other event. False when the
-- watch ended: the client went away, or events it still needs left the
-- history while it read (the stream ends, as the apiserver closes a watcher
-- that falls behind; the client's resume then gets 410).
local function catch_up(s, res, w, req, from)
  local h, i = res.history, res.hist_first
  -- events it needs are gone: trimmed, compacted, or the store was reset
  local function overtaken()
    return i < res.hist_first or res.history ~= h or s:resource(res.gv, res.name) ~= res
  end
  if from < res.hist_start then
    req:finish()
    return false
  end
  repeat
    if overtaken() then
      req:finish()
      return false
    end
    if i > res.hist_last then return true end
    local ev = s:event(res, i)
    if ev.rv > from then
      store.deliver(res, w, ev)
      if not req:alive() or not keep_up(req) then return false end
    end
    i = i + 1
  until false
end

function Sim:watch(req, res, ns, params, r)
  local s = self.store
  if r.name then
    params.fieldSelector = "metadata.name=" .. r.name
      .. (params.fieldSelector and params.fieldSelector ~= "" and "," .. params.fieldSelector or "")
  end
  local w, err = store.filters(res, ns, params)
  if not w then return reply_status(req, err) end
  local rv = params.resourceVersion
  local served = self.faults.watch_list
  if served then params.sendInitialEvents = nil end -- unknown to an older server
  if served == "ignored" then params.resourceVersionMatch = nil end
  local initial = params.sendInitialEvents == "true"
  local rvm = params.resourceVersionMatch
  if served == "refused" and rvm and rvm ~= "" then
    -- 1.26's ValidateListOptions, to which sendInitialEvents is unknown
    local causes = { { field = "resourceVersionMatch", reason = "FieldValueForbidden",
                       message = "Forbidden: resourceVersionMatch is forbidden for watch" } }
    if not rv or rv == "" then
      causes[2] = { field = "resourceVersionMatch", reason = "FieldValueForbidden",
        message = "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is "
          .. "provided" }
    end
    local opts = { kind = "ListOptions", group = "meta.k8s.io" }
    return reply_status(req, store.invalid(opts, "", causes))
  end
  if rvm and rvm ~= "" and not initial then
    return reply_status(req, status(422, "Invalid", "resourceVersionMatch: Forbidden: "
      .. "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"))
  end
  if initial and rvm ~= "NotOlderThan" then
    return reply_status(req, status(422, "Invalid", "resourceVersionMatch: Unsupported value: "
      .. '"' .. tostring(rvm or "") .. '": supported values: "NotOlderThan"'))
  end
  local n = rv and rv ~= "" and tonumber(rv)
  if rv and rv ~= "" and not n then
    return reply_status(req, store.bad_request(format('invalid resource version: "%s"', rv)))
  end
  w.req = req
  w.bookmarks = params.allowWatchBookmarks == "true" and not self.faults.quiet_watches
  local form = r.form -- from the Accept header (serve_resource)
  local bad = form == "Table" and tables.options_error(params.includeObject)
  if bad then return reply_status(req, store.bad_request(bad)) end -- kubectl get --watch
  w.transform = tables.watch_encoder(res, form, params.includeObject, r.form_api)
  -- A resourceVersion that has not happened yet: as the watch cache does,
  -- the watch starts and stays quiet (no bookmarks either) until changes
  -- pass it.
  if n and n > s.rv and not initial then w.after = n end
  local timeout = tonumber(params.timeoutSeconds or "")
  if not timeout or timeout <= 0 then timeout = 1800 + math.random() * 1800 end
  if self.faults.watch_timeout then timeout = math.min(timeout, self.faults.watch_timeout) end
  local h = base_headers(true)
  if not req:stream_begin(200, h) then return end
  if n and n ~= 0 and not initial and n < res.hist_start then
    req:write(encode { type = "ERROR", object = status(410, "Expired",
      format("too old resource version: %d (%d)", n, res.hist_start)) } .. "\n")
    req:finish()
    return
  end
  if not n or n == 0 or initial then
    -- The initial events are a snapshot (entries are immutable) sent at
    -- the client's pace, as lists are: unpaced, 100,000 Pods pass the
    -- stream's unsent-bytes cap and the watch is cut. Changes made while
    -- it drains follow from the history before the watch joins.
    local rv0, snap = res.last_rv, {}
    for i, key in ipairs(s:sorted_keys(res)) do snap[i] = res.objects[key] end
    for _, e in ipairs(snap) do
      if w.simple or store.matches(w, e) then
        if not store.write_event(w, "ADDED", e.json, e) then return end
        if not keep_up(req) then return end
      end
    end
    if res.last_rv ~= rv0 then
      if res.hist_start > rv0 then return req:finish() end -- history gone: the client retries
      if not catch_up(s, res, w, req, rv0) then return end
    end
    if initial then
      store.write_event(w, "BOOKMARK", s:bookmark(res, { ["k8s.io/initial-events-end"] = "true" }))
    end
  elseif not catch_up(s, res, w, req, n) then
    return
  end
  local held = self.held
  if self.hold_watches then
    held[w], w.held = res, res.last_rv
  else
    store.watch(res, w)
  end
  req:on_close(function()
    store.unwatch(res, w)
    held[w] = nil
  end)
  local start = kube.monotonic()
  local deadline = start + timeout
  local next_bookmark = start + self.bookmark_interval
  local final_bookmark = w.bookmarks and timeout > 2 and deadline - 2 or nil
  while (res.watchers[w] or held[w]) and req:alive() do
    if held[w] and not self.hold_watches then -- released: the events it missed, then live
      held[w] = nil
      if not catch_up(s, res, w, req, w.held) then return end
      w.held = nil
      store.watch(res, w)
    end
    local now = kube.monotonic()
    if now >= deadline then break end
    if w.bookmarks and not w.held and not (w.after and res.last_rv <= w.after)
        and (now >= next_bookmark or (final_bookmark and now >= final_bookmark)) then
      if final_bookmark and now >= final_bookmark then final_bookmark = nil end
      next_bookmark = now + self.bookmark_interval
      store.write_event(w, "BOOKMARK", s:bookmark(res))
    end
    local wake = deadline
    if w.bookmarks then
      wake = math.min(wake, next_bookmark, final_bookmark or deadline)
    end
    -- req:sleep returns at once when the request ends (a dropped watch)
    req:sleep(math.max(0.001, math.min(wake - now, w.held and 0.01 or self.watch_check)))
  end
  store.unwatch(res, w)
  held[w] = nil
  if req:alive() then req:finish() end
end

-- Faults ---------------------------------------------------------------------------------

-- Applies a fault-injection request (the body of POST /_sim/faults, or a
-- table from Lua). Keys, all optional:
--   drop_watches = true | "end"   close every watch now (drop the
--                                 connection, or end the stream cleanly)
--   watch_abort_after = N         every open watch closes after N more bytes
--   fail_next = N, code = 429|500|503, retry_after = S
--                                 the next N API requests fail
--   delay = S                     answer every API request S seconds late
--                                 (0 turns it off)
--   compact = true                forget the event history (watches from
--                                 older resourceVersions get 410)
--   hold_watches = true | false   true: open and new watches get no
--                                 events (they wait in the history); false:
--                                 each catches up at its client's pace,
--                                 then follows live (one whose events left
--                                 the history meanwhile ends). The summary
--                                 says how many are held, or released.
--   reset = true                  forget everything, restart resourceVersions
--   watch_list = "refused"        streaming lists as a 1.26 server: a watch
--                                 with resourceVersionMatch is invalid (422)
--              | "ignored"        as a server that does not know the
--                                 parameters: a plain watch, no end bookmark
--              | "served"         as a 1.27+ server (the default)
--   quiet_watches = true | false  true: watches get no bookmark at all, as
--                                 from a 1.26 server, silent until their end
--   watch_timeout = S             every watch ends (cleanly) after at most
--                                 S seconds, as at its timeoutSeconds (0:
--                                 the client's timeoutSeconds again)
-- Returns a summary table, or nil and a message for a value it cannot use.
local watch_list_modes = { refused = true, ignored = true, served = true }

function Sim:inject(f)
  local out = {}
  if f.watch_list ~= nil and not watch_list_modes[f.watch_list] then
    return nil, 'watch_list must be "served", "refused" or "ignored", got ' .. encode(f.watch_list)
  end
  if f.watch_timeout ~= nil and (type(f.watch_timeout) ~= "number" or f.watch_timeout < 0) then
    return nil, "watch_timeout must be a number of seconds, got " .. encode(f.watch_timeout)
  end
  if f.reset then
    for w in pairs(self.held) do
      self.held[w] = nil
      w.req:finish()
    end
    self.store:reset()
    out.reset = true
  end
  if f.compact then
    self.store:compact()
    out.compacted = self.store.rv
  end
  if f.drop_watches then
    local n = 0
    local function drop(res, w) -- res nil: a held watch
      if res then store.unwatch(res, w) else self.held[w] = nil end
      n = n + 1
      if f.drop_watches == "end" then w.req:finish() else w.req:abort(0) end
    end
    for _, res in pairs(self.store.resources) do
      for w in pairs(res.watchers) do drop(res, w) end
    end
    for w in pairs(self.held) do drop(nil, w) end
    out.dropped = n
  end
  if f.watch_abort_after then
    local n = 0
    local function arm(w)
      w.req:abort(tonumber(f.watch_abort_after) or 0)
      n = n + 1
    end
    for _, res in pairs(self.store.resources) do
      for w in pairs(res.watchers) do arm(w) end
    end
    for w in pairs(self.held) do arm(w) end
    out.aborting = n
  end
  if f.hold_watches ~= nil then
    local hold = f.hold_watches == true
    if hold and not self.hold_watches then
      for _, res in pairs(self.store.resources) do
        for w in pairs(res.watchers) do
          store.unwatch(res, w)
          self.held[w], w.held = res, res.last_rv
        end
      end
    end
    self.hold_watches = hold
    local n = 0
    for _ in pairs(self.held) do n = n + 1 end
    if hold then out.held = n else out.released = n end
  end
  if f.fail_next then
    self.faults.fail_next = tonumber(f.fail_next) or 0
    self.faults.code = tonumber(f.code) or 500
    self.faults.retry_after = tonumber(f.retry_after) or 1
  end
  if f.delay then self.faults.delay = tonumber(f.delay) or 0 end
  if f.watch_list ~= nil then
    self.faults.watch_list = f.watch_list ~= "served" and f.watch_list or nil
  end
  if f.quiet_watches ~= nil then self.faults.quiet_watches = f.quiet_watches == true end
  if f.watch_timeout ~= nil then
    self.faults.watch_timeout = f.watch_timeout > 0 and f.watch_timeout or nil
  end
  out.resourceVersion = tostring(self.store.rv)
  return out
end

local function fault_status(code, retry_after)
  if code == 429 then
    return status(429, "TooManyRequests", "Too many requests, please try again later.",
      { retryAfterSeconds = retry_after }), { ["Retry-After"] = tostring(retry_after) }
  elseif code == 503 then
    return status(503, "ServiceUnavailable", "the server is currently unable to handle the "
      .. "request", {}), { ["Retry-After"] = tostring(retry_after) }
  elseif code == 504 then
    return status(504, "Timeout", "the server was unable to return a response in the time "
      .. "allotted, but may still be processing the request", {})
  end
  return status(code, "InternalError", "Internal error occurred: injected fault",
    { causes = json.array { { message = "injected fault" } } })
end

function Sim:control(req, path)
  if path == "/_sim/faults" and req:method() == "POST" then
    local f = decode(req:body() ~= "" and req:body() or "{}")
    if type(f) ~= "table" or is_array(f) then
      return reply_status(req, store.bad_request("the body must be a JSON object"))
    end
    local out, ierr = self:inject(f)
    if not out then return reply_status(req, store.bad_request(ierr)) end
    return reply_json(req, 200, out)
  elseif path == "/_sim/state" and req:method() == "GET" then
    local counts, watches = {}, 0
    for key, res in pairs(self.store.resources) do
      counts[key] = res.count
      for _ in pairs(res.watchers) do watches = watches + 1 end
    end
    local held = 0
    for _ in pairs(self.held) do held = held + 1 end
    return reply_json(req, 200, { resourceVersion = tostring(self.store.rv), objects = counts,
      watches = watches, held_watches = held, watch_handlers = self.watch_handlers })
  end
  return reply_status(req, not_found_resource())
end

-- The request handler ----------------------------------------------------------------------

function Sim:handle(req)
  local path = req:path()
  local q = find(path, "%%")
  if q then path = path:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end) end
  if path ~= "/" and sub(path, -1) == "/" then path = sub(path, 1, -2) end

  local user, aerr = self:authenticate(req)
  if not user then return reply_status(req, aerr) end
  if sub(path, 1, 6) == "/_sim/" then
    if user ~= "admin" then
      return reply_status(req, status(403, "Forbidden", format('forbidden: User "%s" cannot %s '
        .. 'path "%s"', user, lower(req:method()), path), {}))
    end
    return self:control(req, path)
  end

  local f = self.faults
  if f.delay and f.delay > 0 then kube.sleep(f.delay) end
  if f.fail_next > 0 then
    f.fail_next = f.fail_next - 1
    local st, h = fault_status(f.code, f.retry_after)
    return reply_status(req, st, h)
  end

  if user == "system:anonymous" and not anonymous_paths[path] and sub(path, 1, 5) ~= "/api/"
      and sub(path, 1, 6) ~= "/apis/" then
    return reply_status(req, status(403, "Forbidden", format('forbidden: User "%s" cannot %s '
      .. 'path "%s"', user, lower(req:method()), path), {}))
  end
  if req:method() ~= "GET" and (path == "/version" or path == "/api" or path == "/apis") then
    return reply_status(req, method_not_allowed())
  end
  if path == "/version" then return reply_json(req, 200, version_info) end
  if path == "/healthz" or path == "/readyz" or path == "/livez" then
    return req:reply(200, { ["Content-Type"] = "text/plain; charset=utf-8",
      ["Cache-Control"] = "no-cache, private" }, "ok")
  end
  local anonymous_api = user == "system:anonymous"
  if path == "/openapi/v3" or sub(path, 1, 12) == "/openapi/v3/" then
    return self:openapi(req, path)
  end
  if path == "/api" then
    if anonymous_api then
      return reply_status(req, status(403, "Forbidden",
        'forbidden: User "system:anonymous" cannot get path "/api"', {}))
    end
    return reply_json(req, 200, { kind = "APIVersions", versions = json.array { "v1" },
      serverAddressByClientCIDRs = json.array { { clientCIDR = "0.0.0.0/0",
        serverAddress = self.address or "127.0.0.1:6443" } } })
  end
  if path == "/apis" then
    if anonymous_api then
      return reply_status(req, status(403, "Forbidden",
        'forbidden: User "system:anonymous" cannot get path "/apis"', {}))
    end
    return reply_json(req, 200, self:discovery_groups())
  end
  local g = path:match("^/apis/([^/]+)$")
  if g then
    if not self.store.groups[g] then return reply_text_404(req) end
    if anonymous_api then
      return reply_status(req, status(403, "Forbidden", format('forbidden: User '
        .. '"system:anonymous" cannot get path "%s"', path), {}))
    end
    return reply_json(req, 200, resources.group_text(g, self.store.groups[g],
      '"kind":"APIGroup","apiVersion":"v1",'))
  end
  local r = parse_path(path)
  if not r or not self.store.gvs[r.gv] then return reply_text_404(req) end
  if #r.rest == 0 then
    if anonymous_api then
      return reply_status(req, status(403, "Forbidden", format('forbidden: User '
        .. '"system:anonymous" cannot get path "%s"', path), {}))
    end
    return reply_json(req, 200, self:resource_list(r.gv))
  end
  -- the group-version's handler answers for any path under it that names
  -- no resource of its (".../ConfigMap/x", ".../configmap/x")
  if not self:resolve(r) then return reply_status(req, not_found_resource()) end
  return self:serve_resource(req, r, user)
end

-- A real apiserver reads at most 3 MiB of a request body.
local MAX_BODY = 3 * 1024 * 1024

-- listen{host, port, tls_cert, tls_key, max_body, serve_while_stopping}
-- -> server | nil, message (serve_while_stopping: httpd.listen's, for a
-- simulator in the process of the controllers it serves)
function Sim:listen(opts)
  local max_body = opts.max_body or MAX_BODY
  local too_large = encode(status(413, "RequestEntityTooLarge",
    format("Request entity too large: limit is %d", max_body))) .. "\n"
  local srv, err = httpd.listen {
    host = opts.host, port = opts.port or 0, tls_cert = opts.tls_cert, tls_key = opts.tls_key,
    send_date = true, max_body_bytes = max_body, serve_while_stopping = opts.serve_while_stopping,
    send_thread = true, -- watches' bursts leave the writer's core
    error_pages = { [413] = { "application/json", too_large } },
    handler = function(req)
      local ok, e = pcall(self.handle, self, req)
      if not ok then
        kube.log.error("sim: request failed", { path = req:path(), error = tostring(e) })
        if not req:answered() and req:alive() then
          reply_status(req, status(500, "InternalError", "Internal error occurred: "
            .. tostring(e), {}))
        end
      end
    end,
  }
  if not srv then return nil, err end
  if opts.tls_cert and not self.ca_pem then -- what kube-root-ca.crt publishes
    local f = io.open(opts.tls_cert)
    if f then
      self.ca_pem = f:read("*a")
      f:close()
    end
  end
  self.servers[#self.servers + 1] = srv
  self.address = (opts.host or "127.0.0.1") .. ":" .. srv:port()
  return srv
end

-- Loads every .json, .yaml and .yml file of dir (sorted by name): one
-- object, a List (items), or an array of objects per document (YAML files
-- may hold several); namespaces are created as needed. Returns the
-- number of objects or nil, message.
function Sim:load(dir)
  local d = io.open(dir .. "/.")
  if not d then return nil, dir .. ": not a readable directory" end
  d:close()
  local p = io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
  local names = {}
  for line in p:lines() do
    if line:match("%.json$") or line:match("%.ya?ml$") then names[#names + 1] = line end
  end
  p:close()
  local n = 0
  for _, name in ipairs(names) do
    local f, ferr = io.open(dir .. "/" .. name)
    if not f then return nil, ferr end
    local text = f:read("*a")
    f:close()
    local docs, derr
    if name:match("%.json$") then
      local doc
      doc, derr = decode(text)
      docs = doc ~= nil and { doc } or nil
    else
      docs, derr = yaml.decode_all(text)
    end
    if not docs then return nil, name .. ": " .. derr end
    for _, doc in ipairs(docs) do
      local objs = is_array(doc) and doc or (type(doc.items) == "table" and doc.items or { doc })
      for _, obj in ipairs(objs) do
        local ok, err = self:apply_object(obj)
        if not ok then return nil, name .. ": " .. err end
        n = n + 1
      end
    end
  end
  return n
end

-- Creates (or replaces) one object given as a table, finding its resource
-- by apiVersion and kind.
function Sim:apply_object(obj)
  local s = self.store
  if type(obj) ~= "table" or type(obj.apiVersion) ~= "string" or type(obj.kind) ~= "string" then
    return nil, "an object needs apiVersion and kind"
  end
  local g = s.gvs[obj.apiVersion]
  local res
  for _, r in ipairs(g and g.list or {}) do
    if r.kind == obj.kind then res = r end
  end
  if not res then return nil, format("no resource for %s %s", obj.apiVersion, obj.kind) end
  local md = type(obj.metadata) == "table" and obj.metadata or {}
  local ns = res.namespaced and (md.namespace or "default") or nil
  if ns and not s:resource("v1", "namespaces").objects[ns] then
    s:create(s:resource("v1", "namespaces"), nil, { apiVersion = "v1", kind = "Namespace",
      metadata = { name = ns } }, { user_agent = "kubelua-sim" })
  end
  local ctx = { user_agent = "kubelua-sim", internal = true }
  local old = type(md.name) == "string" and res.objects[store.obj_key(ns, md.name)]
  local e, err
  if old then -- a dump holds what the simulator made at start (default/kubernetes)
    local o = util.copy(obj)
    o.metadata = util.copy(md)
    o.metadata.namespace = ns
    o.kind, o.apiVersion = res.kind, res.api_version
    e, err = s:commit(res, old, o, ctx)
  else
    e, err = s:create(res, ns, obj, ctx)
  end
  if not e then return nil, err.message end
  if res.name == "customresourcedefinitions" then s:establish(e.name) end
  return e
end

-- kubelua sim --listen HOST:PORT [--token T] [--user NAME=TOKEN]
--             [--tls-cert F --tls-key F] [--load DIR] [--history N]
--             [--bookmark-interval S] [--no-controllers]
--             [--no-controller NAME]... [--nodes N]
-- Returns true once listening (the loop then serves), or nil, message.
-- The host and port of "HOST:PORT" ("[::1]:PORT" for IPv6), or nil.
function _M.host_port(s)
  local host, port = s:match("^%[?([^%]]*)%]?:(%d+)$")
  return host, tonumber(port)
end

-- The URL of a server listening on host and port (over TLS when tls).
function _M.url(host, port, tls)
  local shown = host:find(":") and "[" .. host .. "]" or host
  return format("%s://%s:%d", tls and "https" or "http", shown, port)
end

function _M.main(args)
  local opts = { users = {} }
  local listen = "127.0.0.1:6443"
  local tls_cert, tls_key, load
  local i = 1
  while i <= #args do
    local a = args[i]
    local v = args[i + 1]
    if a == "--no-controllers" then -- a flag: takes no value
      opts.controllers = false
      i = i + 1
      goto continue
    end
    if a == "--listen" then listen = v
    elseif a == "--no-controller" then
      if v and not controllers.names[v] then
        return nil, "--no-controller: unknown controller " .. v
          .. " (known: " .. controllers.known() .. ")"
      end
      if opts.controllers ~= false then
        opts.controllers = opts.controllers or {}
        if v then opts.controllers[v] = false end
      end
    elseif a == "--token" then opts.token = v
    elseif a == "--user" then
      local name, tok = (v or ""):match("^([^=]+)=(.+)$")
      if not name then return nil, "--user needs NAME=TOKEN" end
      opts.users[tok] = name
    elseif a == "--tls-cert" then tls_cert = v
    elseif a == "--tls-key" then tls_key = v
    elseif a == "--load" then load = v
    elseif a == "--history" then
      local n = tonumber(v)
      opts.history_size = n
      if v and not (n and n >= 1 and n % 1 == 0) then
        return nil, "--history needs a whole number of events, at least 1, got " .. v
      end
    elseif a == "--bookmark-interval" then opts.bookmark_interval = tonumber(v)
    elseif a == "--nodes" then
      local n = tonumber(v)
      if v and not (n and n >= 0 and n <= 250 and n % 1 == 0) then
        return nil, "--nodes needs a whole number of Nodes from 0 to 250, got " .. v
      end
      opts.nodes = n
    else
      return nil, "unknown option " .. tostring(a)
    end
    if v == nil then return nil, "option " .. a .. " needs a value" end
    i = i + 2
    ::continue::
  end
  local host, port = _M.host_port(listen)
  if not host then return nil, "--listen needs HOST:PORT, got " .. listen end
  if (tls_cert == nil) ~= (tls_key == nil) then
    return nil, "--tls-cert and --tls-key go together"
  end
  local sim = _M.new(opts)
  if load then
    local n, err = sim:load(load)
    if not n then return nil, "--load: " .. err end
  end
  local srv, err = sim:listen { host = host, port = tonumber(port), tls_cert = tls_cert,
    tls_key = tls_key }
  if not srv then return nil, err end
  io.stdout:write("kubelua sim: listening on " .. _M.url(host, srv:port(), tls_cert) .. "\n")
  io.stdout:flush()
  _M.current = sim
  return true
end

return _M
