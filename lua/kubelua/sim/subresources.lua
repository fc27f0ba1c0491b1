-- kubelua.sim.subresources: the subresources beyond status and scale, as
-- kube-apiserver 1.26's registries serve them (pkg/registry/core/pod,
-- serviceaccount, namespace): their status codes, messages and side
-- effects.
--
--   pods/binding              POST a v1 Binding: spec.nodeName once
--   pods/eviction             POST a policy/v1 (or v1beta1) Eviction: the
--                             PodDisruptionBudget decides, then a delete
--   serviceaccounts/token     POST a TokenRequest: a JWT (HS256, the
--                             simulator's key) the simulator's
--                             authentication accepts
--   namespaces/finalize       PUT: spec.finalizers
--   pods/ephemeralcontainers  GET, PUT, PATCH: spec.ephemeralContainers
--                             only, added to, never removed nor changed
--   certificatesigningrequests/approval
--                             GET, PUT, PATCH: status.conditions only
--                             (Approved or Denied, never removed)
--   pods/log                  GET: text, one line per container start
--                             (no container runs: the line says so)
--   pods/exec, attach,        the checks the real server makes before it
--   portforward               upgrades the connection, then its 400
--                             "Upgrade request required"; an upgrade is not
--                             offered (there is no kubelet to stream from)
--   pods, services, nodes     /proxy: 503, nothing listens behind them
--   /proxy
--
-- Everything goes through the store's verbs (get, commit, delete), so the
-- watch shows what the real server's shows.

local json = require "kubelua.json"
local store = require "kubelua.sim.store"
local store_defaults = require "kubelua.sim.store.defaults"
local util = require "kubelua.sim.util"
local disruption = require "kubelua.sim.disruption"

local type, pairs, ipairs, tostring, tonumber, setmetatable = type, pairs, ipairs, tostring,
  tonumber, setmetatable
local format, concat = string.format, table.concat
local encode, decode, null, is_array = json.encode, json.decode, json.null, json.is_array
local status, bad_request, invalid = store.status, store.bad_request, store.invalid
local copy = util.copy

local _M = {}
local Subs = {}
Subs.__index = Subs

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- The verbs each subresource answers, by method (discovery's verbs);
-- "any": every method, authorized as its verb (a proxy's).
local SERVED = {
  ["v1/pods"] = {
    binding = { POST = "create" }, eviction = { POST = "create" },
    ephemeralcontainers = { GET = "get", PUT = "update", PATCH = "patch" },
    log = { GET = "get" },
    exec = { GET = "get", POST = "create" }, attach = { GET = "get", POST = "create" },
    portforward = { GET = "get", POST = "create" }, proxy = "any",
  },
  ["v1/serviceaccounts"] = { token = { POST = "create" } },
  ["v1/namespaces"] = { finalize = { PUT = "update" } },
  ["v1/services"] = { proxy = "any" },
  ["v1/nodes"] = { proxy = "any" },
  ["certificates.k8s.io/v1/certificatesigningrequests"] = {
    approval = { GET = "get", PUT = "update", PATCH = "patch" } },
}

-- The kind each subresource's body decodes into.
_M.body_kind = { binding = "Binding", eviction = "Eviction", token = "TokenRequest",
  finalize = "Namespace", ephemeralcontainers = "Pod",
  approval = "CertificateSigningRequest" }

-- Whether res is v1 bindings, whose create binds the Pod the Binding names
-- (as pods/binding does).
function _M.is_bindings(res)
  return res.builtin and res.gv == "v1" and res.name == "bindings"
end

-- new(store) -> the subresources of that store; it holds the key that
-- signs service-account tokens (one per simulator).
function _M.new(s)
  local key = {}
  for i = 1, 4 do key[i] = util.uid() end
  return setmetatable({ store = s, key = concat(key) }, Subs)
end

local PROXY_VERBS = { GET = "get", HEAD = "get", POST = "create", PUT = "update",
  PATCH = "patch", DELETE = "delete", OPTIONS = "get" }

-- Whether this module serves subresource sub of res.
function _M.handles(res, sub)
  local t = res.builtin and SERVED[res.gv .. "/" .. res.name]
  return t and t[sub] ~= nil or false
end

-- The verb of method on res/sub, or nil when it does not allow method.
function _M.verb(res, sub, method)
  local allowed = SERVED[res.gv .. "/" .. res.name][sub]
  if allowed == "any" then return PROXY_VERBS[method] end
  return allowed[method]
end

local function success(code)
  return { kind = "Status", apiVersion = "v1", metadata = {}, status = "Success", code = code }
end

-- The body's kind must be one of kinds ({ apiVersion = kind }), else the
-- decoder's 400 (res: what the route decodes into).
local function check_body(obj, kinds, internal, kind)
  local av, k = obj.apiVersion, obj.kind
  if (av == nil and k == nil) or (type(av) == "string" and kinds[av] == k) then return nil end
  local v = type(av) == "string" and av:match("[^/]+$") or "v1"
  local ks = type(k) == "string" and k or "<unknown>"
  return bad_request(format('%s in version "%s" cannot be handled as a %s: converting '
    .. '(%s.%s) to (%s.%s): unknown conversion', ks, v, kind, v, ks, internal, kind))
end

local function name_of(obj)
  return is_object(obj.metadata) and obj.metadata.name or nil
end

local function pods(s) return s:resource("v1", "pods") end

-- Binding --------------------------------------------------------------------------------

-- Sets condition c ({ type, status, reason, message }) in pod (a copy), as
-- podutil.UpdatePodCondition: in place of the one of its type (whose
-- lastTransitionTime stays while the status does), else appended.
local function set_pod_condition(pod, c)
  pod.status = is_object(pod.status) and pod.status or {}
  local conds = json.array {}
  local new = { type = c.type, status = c.status, lastProbeTime = null,
    lastTransitionTime = util.timestamp(), reason = c.reason, message = c.message }
  for _, x in ipairs(is_array(pod.status.conditions) and pod.status.conditions or {}) do
    if x.type == c.type then
      if x.status == c.status then new.lastTransitionTime = x.lastTransitionTime end
      x, new = new, nil
    end
    conds[#conds + 1] = x
  end
  conds[#conds + 1] = new
  pod.status.conditions = conds
end

-- Sets the Pod's node, as the binding registry's assignPod: once, with
-- the Binding's annotations and the PodScheduled condition.
function Subs:bind(ns, name, obj, ctx)
  local err = check_body(obj, { v1 = "Binding" }, "core", "Binding")
  if err then return nil, err end
  if name_of(obj) ~= name then
    return nil, bad_request("name in URL does not match name in Binding object")
  end
  local target = is_object(obj.target) and obj.target or {}
  local errs = {}
  if target.kind ~= nil and target.kind ~= "" and target.kind ~= "Node" then
    errs[#errs + 1] = format('target.kind: Unsupported value: "%s": supported values: "Node", '
      .. '"<empty>"', tostring(target.kind))
  end
  if type(target.name) ~= "string" or target.name == "" then
    errs[#errs + 1] = "target.name: Required value"
  end
  if #errs > 0 then -- an aggregate error, not a Status: the real server's 500
    return nil, status(500, nil, #errs == 1 and errs[1] or "[" .. concat(errs, ", ") .. "]")
  end
  local s = self.store
  local res = pods(s)
  local e
  e, err = s:get(res, ns, name)
  if not e then return nil, err end
  local pod = e.obj
  if pod.metadata.deletionTimestamp then
    return nil, status(500, nil, format("pod %s is being deleted, cannot be assigned to a host",
      name))
  end
  local node = is_object(pod.spec) and pod.spec.nodeName
  if type(node) == "string" and node ~= "" then
    return nil, status(409, "Conflict", format('Operation cannot be fulfilled on pods/binding '
      .. '"%s": pod %s is already assigned to node "%s"', name, name, node),
      { name = name, kind = "pods/binding" })
  end
  if ctx.dry_run then return 201, success(201) end
  local p = copy(pod)
  p.spec.nodeName = target.name
  local ann = is_object(obj.metadata.annotations) and obj.metadata.annotations
  if ann then
    p.metadata.annotations = is_object(p.metadata.annotations) and p.metadata.annotations or {}
    for k, v in pairs(ann) do p.metadata.annotations[k] = v end
  end
  set_pod_condition(p, { type = "PodScheduled", status = "True" })
  p.metadata.resourceVersion = tostring(s:next_rv())
  s:put(res, p, "MODIFIED", e)
  return 201, success(201)
end

-- Eviction -------------------------------------------------------------------------------

local EVICTION_KINDS = { ["policy/v1"] = "Eviction", ["policy/v1beta1"] = "Eviction" }
local PDB_CTX = { user_agent = "kube-apiserver", subresource = "status" }

local function too_many(message, retry)
  local d = { causes = json.array { { reason = "DisruptionBudget", message = message } } }
  if retry then d.retryAfterSeconds = retry end
  return status(429, "TooManyRequests",
    "Cannot evict pod as it would violate the pod's disruption budget.", d)
end

-- The PDB's answer to evicting pod: nil when it allows it (its status is
-- then written: one disruption fewer, the pod among disruptedPods), else
-- the 429.
function Subs:check_budget(pdb_res, pe, pod, ctx)
  local s = self.store
  local pdb = pe.obj
  local st = is_object(pdb.status) and pdb.status or {}
  local name = pdb.metadata.name
  if (tonumber(st.observedGeneration) or 0) < (tonumber(pdb.metadata.generation) or 0) then
    return too_many(format("The disruption budget %s is still being processed by the server.",
      name), 10)
  end
  local allowed = tonumber(st.disruptionsAllowed) or 0
  if allowed == 0 then
    return too_many(format("The disruption budget %s needs %d healthy pods and has %d currently",
      name, tonumber(st.desiredHealthy) or 0, tonumber(st.currentHealthy) or 0))
  end
  if ctx.dry_run then return nil end
  local obj = copy(pdb)
  local nst = obj.status
  nst.disruptionsAllowed = allowed - 1
  if nst.disruptionsAllowed == 0 then
    nst.conditions = disruption.allowed_condition(nst.conditions, 0, nst.observedGeneration)
  end
  nst.disruptedPods = is_object(nst.disruptedPods) and nst.disruptedPods or {}
  nst.disruptedPods[pod.metadata.name] = util.timestamp()
  local ok, err = s:commit(pdb_res, pe, obj, PDB_CTX)
  if not ok then return err end
  return nil
end

-- Adds the DisruptionTarget condition (1.26's PodDisruptionConditions),
-- then deletes the Pod with the eviction's options.
function Subs:evict_pod(e, opts, ctx)
  local s = self.store
  local res = pods(s)
  if not ctx.dry_run then
    local p = copy(e.obj)
    set_pod_condition(p, { type = "DisruptionTarget", status = "True",
      reason = "EvictionByEvictionAPI", message = "Eviction API: evicting" })
    e = s:commit(res, e, p, { internal = true, subresource = "status" }) or e
  end
  local out, err = s:delete(res, e.ns, e.name, opts, ctx)
  if not out then return nil, err end
  return 201, success(201)
end

-- Evicts the Pod as the eviction registry does: a Pod that is not
-- running (or already going) goes at once; else the one
-- PodDisruptionBudget that selects it must allow it.
function Subs:evict(ns, name, obj, ctx)
  local err = check_body(obj, EVICTION_KINDS, "policy", "Eviction")
  if err then return nil, err end
  if name_of(obj) ~= name then
    return nil, bad_request("name in URL does not match name in Eviction object")
  end
  local opts = is_object(obj.deleteOptions) and obj.deleteOptions or {}
  local s = self.store
  local e
  e, err = s:get(pods(s), ns, name)
  if not e then return nil, err end
  local pod = e.obj
  local phase = is_object(pod.status) and pod.status.phase
  if phase == "Succeeded" or phase == "Failed" or phase == "Pending" or phase == nil
      or pod.metadata.deletionTimestamp then
    return self:evict_pod(e, opts, ctx)
  end
  local pdb_res = s:resource("policy/v1", "poddisruptionbudgets")
  local budgets = disruption.budgets_of(s, pod)
  if #budgets > 1 then
    return nil, status(500, nil, "This pod has more than one PodDisruptionBudget, which the "
      .. "eviction subresource does not support.")
  end
  local pe = budgets[1]
  if pe then
    local st = is_object(pe.obj.status) and pe.obj.status or {}
    local healthy = tonumber(st.currentHealthy) or 0
    local desired = tonumber(st.desiredHealthy) or 0
    -- a Pod that is not Ready does not count toward the budget
    if not (not disruption.is_ready(pod) and healthy >= desired and desired > 0) then
      err = self:check_budget(pdb_res, pe, pod, ctx)
      if err then return nil, err end
    end
  end
  return self:evict_pod(e, opts, ctx)
end

-- Token ----------------------------------------------------------------------------------

local ISSUER = "https://kubernetes.default.svc.cluster.local"

local function b64url(s)
  return (util.b64encode(s):gsub("+", "-"):gsub("/", "_"):gsub("=+$", ""))
end

local function b64url_decode(s)
  s = s:gsub("-", "+"):gsub("_", "/")
  return util.b64decode(s .. string.rep("=", (4 - #s % 4) % 4))
end

function Subs:sign(text)
  return b64url(util.hmac_sha256(self.key, text))
end

-- Issues a token for ServiceAccount ns/name, as the token registry: 201
-- with the request, its defaults and status.token.
function Subs:token(ns, name, obj, ctx)
  local err = check_body(obj, { ["authentication.k8s.io/v1"] = "TokenRequest" },
    "authentication", "TokenRequest")
  if err then return nil, err end
  local s = self.store
  local e
  e, err = s:get(s:resource("v1", "serviceaccounts"), ns, name)
  if not e then return nil, err end
  local md = is_object(obj.metadata) and obj.metadata or {}
  local spec = is_object(obj.spec) and obj.spec or {}
  local kind = { kind = "TokenRequest", group = "authentication.k8s.io" }
  if md.name ~= nil and md.name ~= "" and md.name ~= name then
    return nil, invalid(kind, name, { { field = "metadata.name", reason = "FieldValueInvalid",
      message = format('Invalid value: "%s": must match the service account name if specified',
        tostring(md.name)) } })
  end
  local seconds = spec.expirationSeconds
  if seconds == nil or seconds == null then seconds = 3600 end
  if type(seconds) ~= "number" or seconds < 600 then
    return nil, invalid(kind, "", { { field = "spec.expirationSeconds",
      reason = "FieldValueInvalid", message = format("Invalid value: %s: may not specify a "
        .. "duration less than 10 minutes", tostring(seconds)) } })
  end
  local audiences = is_array(spec.audiences) and #spec.audiences > 0 and spec.audiences
    or json.array { ISSUER }
  local now = os.time()
  local claims = { aud = audiences, exp = now + seconds, iat = now, iss = ISSUER, nbf = now,
    sub = format("system:serviceaccount:%s:%s", ns, name),
    ["kubernetes.io"] = { namespace = ns, serviceaccount = { name = name,
      uid = e.obj.metadata.uid } } }
  local head = b64url(encode { alg = "HS256", typ = "JWT" }) .. "." .. b64url(encode(claims))
  local mf = json.array { { manager = store.manager_of(ctx), operation = "Update",
    apiVersion = "authentication.k8s.io/v1", time = util.timestamp(now),
    fieldsType = "FieldsV1", fieldsV1 = { ["f:spec"] = { ["f:audiences"] = is_array(spec.audiences)
      and {} or nil, ["f:expirationSeconds"] = {} } }, subresource = "token" } }
  return 201, { kind = "TokenRequest", apiVersion = "authentication.k8s.io/v1",
    metadata = { name = name, namespace = ns, creationTimestamp = util.timestamp(now),
      managedFields = mf },
    spec = { audiences = audiences, expirationSeconds = seconds,
      boundObjectRef = is_object(spec.boundObjectRef) and spec.boundObjectRef or null },
    status = { token = head .. "." .. self:sign(head),
      expirationTimestamp = util.timestamp(now + seconds) } }
end

-- The user a token of this simulator names ("system:serviceaccount:NS:NAME"),
-- or nil: not one of its tokens, expired, or its ServiceAccount is gone.
function Subs:token_user(token)
  local head, body, sig = token:match("^([%w_-]+)%.([%w_-]+)%.([%w_-]+)$")
  if not head or self:sign(head .. "." .. body) ~= sig then return nil end
  local claims = decode(b64url_decode(body) or "")
  if not is_object(claims) or type(claims.exp) ~= "number" or claims.exp <= os.time() then
    return nil
  end
  local k = is_object(claims["kubernetes.io"]) and claims["kubernetes.io"]
  local sa = k and is_object(k.serviceaccount) and k.serviceaccount
  if not sa then return nil end
  local s = self.store
  local e = s:get(s:resource("v1", "serviceaccounts"), k.namespace, sa.name)
  if not e or e.obj.metadata.uid ~= sa.uid then return nil end
  return claims.sub
end

-- Finalize -------------------------------------------------------------------------------

local QUALIFIED_MSG = "name part must consist of alphanumeric characters, '-', '_' or '.', "
  .. "and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
  .. "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
local STANDARD_FINALIZERS = { kubernetes = true, orphan = true, foregroundDeletion = true }

-- What apimachinery's ValidateFinalizerName says of f: a list of messages.
local function finalizer_errors(f)
  if type(f) ~= "string" then return {} end
  local out = {}
  local q = util.go_quote(f)
  local prefix, name = f:match("^([^/]*)/(.*)$")
  if prefix then
    local why = prefix == "" and "prefix part must be non-empty"
      or (util.check_subdomain(prefix) and "prefix part " .. util.check_subdomain(prefix))
    if why then out[#out + 1] = "Invalid value: " .. q .. ": " .. why end
  else
    name = f
  end
  if name == "" then
    out[#out + 1] = "Invalid value: " .. q .. ": name part must be non-empty"
  elseif #name > 63 then
    out[#out + 1] = "Invalid value: " .. q .. ": name part must be no more than 63 characters"
  elseif not (name:find("^[A-Za-z0-9]$") or name:find("^[A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]$"))
      then
    out[#out + 1] = "Invalid value: " .. q .. ": " .. QUALIFIED_MSG
  end
  if not prefix and not STANDARD_FINALIZERS[f] then
    out[#out + 1] = "Invalid value: " .. q .. ": name is neither a standard finalizer name nor "
      .. "is it fully qualified"
  end
  return out
end

-- Sets the namespace's spec.finalizers; with the last one gone a
-- Terminating namespace goes (the store's commit).
function Subs:finalize(name, obj, ctx)
  local s = self.store
  local res = s:resource("v1", "namespaces")
  local err = check_body(obj, { v1 = "Namespace" }, "core", "Namespace")
  if err then return nil, err end
  local md = is_object(obj.metadata) and obj.metadata or {}
  if md.name ~= nil and md.name ~= name then
    return nil, bad_request(format("the name of the object (%s) does not match the name on the "
      .. "URL (%s)", tostring(md.name), name))
  end
  local e
  e, err = s:get(res, nil, name)
  if not e then return nil, err end
  local spec = is_object(obj.spec) and obj.spec or {}
  local fins = is_array(spec.finalizers) and spec.finalizers or json.array {}
  local causes = {}
  for i, f in ipairs(fins) do
    for _, c in ipairs(finalizer_errors(f)) do
      causes[#causes + 1] = { field = format("spec.finalizers[%d]", i - 1),
        reason = "FieldValueInvalid", message = c }
    end
  end
  if #causes > 0 then return nil, invalid({ kind = "Namespace", group = "" }, name, causes) end
  local ns = copy(e.obj)
  ns.spec = is_object(ns.spec) and ns.spec or {}
  ns.spec.finalizers = #fins > 0 and fins or nil
  local out
  out, err = s:commit(res, e, ns, { user_agent = ctx.user_agent, field_manager = ctx.field_manager,
    subresource = "finalize", dry_run = ctx.dry_run, internal = false })
  if not out then return nil, err end
  return out, 200
end

-- Logs, exec, attach, port-forward, proxy ----------------------------------------------

local function names_of(list)
  local out = {}
  for i, c in ipairs(is_array(list) and list or {}) do out[i] = tostring(c.name) end
  return out
end

-- The container a request names, as the pod registry's validateContainer
-- picks it; nil, the 400 when it cannot.
local function container_of(pod, want)
  local spec = is_object(pod.spec) and pod.spec or {}
  local name = pod.metadata.name
  if want == nil or want == "" then
    local main = names_of(spec.containers)
    if #main == 1 then return main[1] end
    if #main == 0 then
      return nil, bad_request(format("a container name must be specified for pod %s", name))
    end
    local msg = format("a container name must be specified for pod %s, choose one of: [%s]",
      name, concat(main, " "))
    local init = names_of(spec.initContainers)
    if #init > 0 then msg = msg .. format(" or one of the init containers: [%s]",
      concat(init, " ")) end
    return nil, bad_request(msg)
  end
  for _, field in ipairs { "containers", "initContainers", "ephemeralContainers" } do
    for _, n in ipairs(names_of(spec[field])) do
      if n == want then return want end
    end
  end
  return nil, bad_request(format("container %s is not valid for pod %s", want, name))
end

-- The Pod's Node, as the registry finds it to reach its kubelet; nil, the
-- status when there is none (the real server names it as a pod).
function Subs:node_of(pod, sub)
  local node = is_object(pod.spec) and pod.spec.nodeName
  if type(node) ~= "string" or node == "" then
    if sub == "log" then return nil end
    return nil, bad_request(format("pod %s does not have a host assigned", pod.metadata.name))
  end
  local s = self.store
  if not s:get(s:resource("v1", "nodes"), nil, node) then
    return nil, status(404, "NotFound", format('pods "%s" not found', node),
      { name = node, kind = "pods" })
  end
  return node
end

local function status_of(pod, container, init)
  local st = is_object(pod.status) and pod.status or {}
  local list = init and st.initContainerStatuses or st.containerStatuses
  for _, cs in ipairs(is_array(list) and list or {}) do
    if cs.name == container then return cs end
  end
  return nil
end

-- A container's log: one line per start the simulator's kubelet reported
-- (no container runs, so the line says it started and nothing more), as
-- text/plain; previous: the run before the last restart.
local function log_text(pod, container, params)
  local cs = status_of(pod, container) or status_of(pod, container, true)
  local name, pname = pod.metadata.name, container
  local state = cs and (params.previous == "true" and cs.lastState or cs.state) or nil
  local run = is_object(state) and (state.running or state.terminated)
  if params.previous == "true" and not is_object(run) then
    return nil, bad_request(format('previous terminated container "%s" in pod "%s" not found',
      pname, name))
  end
  if not is_object(run) then
    local w = is_object(state) and is_object(state.waiting) and state.waiting.reason
    return nil, bad_request(format('container "%s" in pod "%s" is waiting to start: %s', pname,
      name, type(w) == "string" and w or "ContainerCreating"))
  end
  local line = format("kubelua sim: container %s started (image %s); the simulator runs no "
    .. "container", pname, tostring(cs.image))
  if params.timestamps == "true" then
    line = tostring(run.startedAt):gsub("Z$", ".000000000Z") .. " " .. line
  end
  local tail = tonumber(params.tailLines)
  if tail and tail < 1 then return "" end
  local text = line .. "\n"
  local limit = tonumber(params.limitBytes)
  if limit and limit > 0 and #text > limit then text = text:sub(1, limit) end
  return text
end

local CONNECT = { exec = true, attach = true, portforward = true }

-- GET pods/log, and exec, attach, portforward, proxy on pods, services
-- and nodes: code, body, content type; nil, status on failure.
function Subs:connect(res, ns, name, sub, params, upgrade)
  local s = self.store
  local e, err = s:get(res, ns, name)
  if not e then return nil, err end
  if sub == "proxy" then
    if res.name == "services" then
      return nil, status(503, "ServiceUnavailable", format('no endpoints available for service '
        .. '"%s"', name))
    end
    return nil, status(503, "ServiceUnavailable", format("error trying to reach %s: the "
      .. "simulator's %s run nothing to proxy to", res.name == "pods" and "pod" or "node",
      res.name))
  end
  local pod = e.obj
  local container
  if sub ~= "portforward" then
    container, err = container_of(pod, params.container)
    if not container then return nil, err end
  end
  local node
  node, err = self:node_of(pod, sub)
  if err then return nil, err end
  if sub == "log" then
    if not node then return 204, "", nil end
    local text
    text, err = log_text(pod, container, params)
    if not text then return nil, err end
    return 200, text, "text/plain"
  end
  if CONNECT[sub] and not upgrade then
    return nil, bad_request("Upgrade request required")
  end
  return nil, bad_request(format("kubelua sim: pods/%s cannot be served: the simulator's "
    .. "kubelets run no container to stream from", sub))
end

-- Ephemeral containers and approvals ------------------------------------------------

-- A list of validation causes and the function adding one to it.
local function new_causes()
  local causes = {}
  return causes, function(field, reason, message)
    causes[#causes + 1] = { field = field, reason = reason, message = message }
  end
end

local LABEL_MSG = "a lowercase RFC 1123 label must consist of lower case alphanumeric "
  .. "characters or '-', and must start and end with an alphanumeric character (e.g. "
  .. "'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"

-- The causes refusing list as the Pod's new spec.ephemeralContainers (old:
-- the Pod as stored), as ValidatePodEphemeralContainersUpdate: each
-- container's name and image, names unique among all the Pod's
-- containers, and none of the old ones removed or changed. The real
-- message of a changed one goes on with a Go diff of the two, which is
-- not reproduced here.
local function ephemeral_causes(old, list)
  local causes, add = new_causes()
  local spec = is_object(old.spec) and old.spec or {}
  local names = {}
  for _, field in ipairs { "containers", "initContainers" } do
    for _, n in ipairs(names_of(spec[field])) do names[n] = true end
  end
  local new = {}
  for i, c in ipairs(list) do
    local at = format("spec.ephemeralContainers[%d]", i - 1)
    c = is_object(c) and c or {}
    local n = c.name
    if type(n) ~= "string" or n == "" then
      add(at .. ".name", "FieldValueRequired", "Required value")
    elseif #n > 63 or not (n:find("^[a-z0-9]$") or n:find("^[a-z0-9][-a-z0-9]*[a-z0-9]$")) then
      add(at .. ".name", "FieldValueInvalid", format("Invalid value: %s: %s", util.go_quote(n),
        #n > 63 and "must be no more than 63 characters" or LABEL_MSG))
    elseif names[n] then
      add(at .. ".name", "FieldValueDuplicate", format("Duplicate value: %s", util.go_quote(n)))
    else
      names[n] = true
      new[n] = c
    end
    if type(c.image) ~= "string" or c.image == "" then
      add(at .. ".image", "FieldValueRequired", "Required value")
    end
  end
  for _, c in ipairs(is_array(spec.ephemeralContainers) and spec.ephemeralContainers or {}) do
    local now = new[c.name]
    if not now then
      add("spec.ephemeralContainers", "FieldValueForbidden", format("Forbidden: existing "
        .. 'ephemeral containers "%s" may not be removed\n', c.name))
    elseif not util.equal(now, c) then
      add("spec.ephemeralContainers", "FieldValueForbidden", format("Forbidden: existing "
        .. 'ephemeral containers "%s" may not be changed\n', c.name))
    end
  end
  return causes
end

-- The object a PUT or PATCH would make of entry e: the body (a PUT's,
-- checked as an update checks it) or the patch applied to e's object
-- (computed as a dry run; part "status": its status, else the rest).
function Subs:proposed(res, e, verb, read, req_body, content_type, ctx, part)
  if verb == "patch" then
    local pe, err = self.store:patch(res, e.ns ~= "" and e.ns or nil, e.name, content_type,
      req_body, { dry_run = true, user_agent = ctx.user_agent, field_manager = ctx.field_manager,
        subresource = part })
    if not pe then return nil, err end
    return pe.obj
  end
  local obj, err = read()
  if not obj then return nil, err end
  err = check_body(obj, { [res.api_version] = res.kind }, res.internal, res.kind)
  if err then return nil, err end
  local md = is_object(obj.metadata) and obj.metadata or {}
  if md.name ~= nil and md.name ~= e.name then
    return nil, bad_request(format("the name of the object (%s) does not match the name on the "
      .. "URL (%s)", tostring(md.name), e.name))
  end
  local rv = md.resourceVersion
  if rv ~= nil and rv ~= "" and rv ~= e.obj.metadata.resourceVersion then
    return nil, status(409, "Conflict", format('Operation cannot be fulfilled on %s "%s": the '
      .. "object has been modified; please apply your changes to the latest version and try "
      .. "again", res.gr, e.name), { name = e.name, kind = res.name,
        group = res.group ~= "" and res.group or nil })
  end
  return obj
end

-- GET, PUT and PATCH of pods/ephemeralcontainers: the Pod, of which only
-- spec.ephemeralContainers changes.
function Subs:ephemeral(res, e, verb, read, req_body, content_type, ctx)
  if verb == "get" then return 200, e.json end
  local obj, err = self:proposed(res, e, verb, read, req_body, content_type, ctx)
  if not obj then return nil, err end
  local spec = is_object(obj.spec) and obj.spec or {}
  local list = is_array(spec.ephemeralContainers) and copy(spec.ephemeralContainers)
    or json.array {}
  store_defaults.default_containers(list)
  local causes = ephemeral_causes(e.obj, list)
  if #causes > 0 then return nil, invalid(res, e.name, causes) end
  local pod = copy(e.obj)
  pod.spec.ephemeralContainers = #list > 0 and list or nil
  local ne
  ne, err = self.store:commit(res, e, pod, { internal = true, dry_run = ctx.dry_run })
  if not ne then return nil, err end
  return 200, ne.json
end

local EXCLUSIVE = { Approved = "Denied", Denied = "Approved" }

-- The causes refusing conditions as a CSR's new status.conditions (old:
-- the CSR as stored), as ValidateCertificateSigningRequestApprovalUpdate.
local function approval_causes(old, conds)
  local causes, add = new_causes()
  local seen = {}
  for i, c in ipairs(conds) do
    local at = format("status.conditions[%d]", i - 1)
    c = is_object(c) and c or {}
    local t = c.type
    if type(t) ~= "string" or t == "" then
      add(at .. ".type", "FieldValueRequired", "Required value")
    elseif seen[t] then
      add(at .. ".type", "FieldValueDuplicate", format("Duplicate value: %s", util.go_quote(t)))
    elseif EXCLUSIVE[t] and seen[EXCLUSIVE[t]] then
      add(at .. ".type", "FieldValueInvalid", format("Invalid value: %s: Approved and Denied "
        .. "conditions are mutually exclusive", util.go_quote(t)))
    end
    if type(t) == "string" then seen[t] = true end
    if EXCLUSIVE[t] and c.status ~= "True" then
      add(at .. ".status", "FieldValueNotSupported", format('Unsupported value: %s: supported '
        .. 'values: "True"', util.go_quote(tostring(c.status or ""))))
    end
  end
  local st = is_object(old.status) and old.status or {}
  for _, c in ipairs(is_array(st.conditions) and st.conditions or {}) do
    if EXCLUSIVE[c.type] and not seen[c.type] then
      add("status.conditions", "FieldValueForbidden", format('Forbidden: updates may not remove '
        .. 'a condition of type "%s"', c.type))
    end
  end
  return causes
end

-- GET, PUT and PATCH of certificatesigningrequests/approval: the CSR, of
-- which only status.conditions changes (new ones get their times).
function Subs:approval(res, e, verb, read, req_body, content_type, ctx)
  if verb == "get" then return 200, e.json end
  local obj, err = self:proposed(res, e, verb, read, req_body, content_type, ctx, "status")
  if not obj then return nil, err end
  local st = is_object(obj.status) and obj.status or {}
  local conds = is_array(st.conditions) and copy(st.conditions) or json.array {}
  local causes = approval_causes(e.obj, conds)
  if #causes > 0 then return nil, invalid(res, e.name, causes) end
  -- a condition keeps its lastTransitionTime while its status stays
  local before = {}
  local ost = is_object(e.obj.status) and e.obj.status or {}
  for _, c in ipairs(is_array(ost.conditions) and ost.conditions or {}) do before[c.type] = c end
  local now = util.timestamp()
  for _, c in ipairs(conds) do
    if c.lastUpdateTime == nil or c.lastUpdateTime == null then c.lastUpdateTime = now end
    if c.lastTransitionTime == nil or c.lastTransitionTime == null then
      local b = before[c.type]
      c.lastTransitionTime = b and b.status == c.status and b.lastTransitionTime or now
    end
  end
  local csr = copy(e.obj)
  csr.status = is_object(csr.status) and csr.status or {}
  csr.status.conditions = #conds > 0 and conds or nil
  local ne
  ne, err = self.store:commit(res, e, csr, { user_agent = ctx.user_agent,
    field_manager = ctx.field_manager, subresource = "approval", dry_run = ctx.dry_run })
  if not ne then return nil, err end
  return 200, ne.json
end

-- serve(res, r, req, ctx) -> code, body (a table, JSON or text),
-- content type | nil, status. req: { read = function decoding the
-- request's body, body = its text, content_type, params, upgrade =
-- whether it asks to upgrade the connection (SPDY, WebSocket) }.
function Subs:serve(res, r, req, ctx)
  local read, params, upgrade = req.read, req.params, req.upgrade
  local req_body, content_type = req.body, req.content_type
  local sub = r.sub
  if sub == "log" or sub == "proxy" or CONNECT[sub] then
    return self:connect(res, r.ns, r.name, sub, params, upgrade)
  end
  if sub == "ephemeralcontainers" or sub == "approval" then
    local e, err = self.store:get(res, r.ns, r.name)
    if not e then return nil, err end
    local fn = sub == "approval" and self.approval or self.ephemeral
    return fn(self, res, e, r.verb, read, req_body, content_type, ctx)
  end
  local obj, err = read()
  if not obj then return nil, err end
  if sub == "binding" then return self:bind(r.ns, r.name, obj, ctx) end
  if sub == "eviction" then return self:evict(r.ns, r.name, obj, ctx) end
  if sub == "token" then return self:token(r.ns, r.name, obj, ctx) end
  if sub == "finalize" then
    local e
    e, err = self:finalize(r.name, obj, ctx)
    if not e then return nil, err end
    return 200, e.json
  end
  return nil, status(404, "NotFound", "the server could not find the requested resource", {})
end

return _M
