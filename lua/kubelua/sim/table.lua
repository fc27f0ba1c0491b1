-- kubelua.sim.table: the meta.k8s.io/v1 forms a real apiserver answers
-- reads in when a client asks for one by its Accept header:
--   - Table (as=Table;v=v1;g=meta.k8s.io, what kubectl get sends): column
--     definitions and one row per object, each row's object a
--     PartialObjectMetadata (includeObject=Metadata, the default), or the
--     whole object (Object) or nothing (None);
--   - PartialObjectMetadata and PartialObjectMetadataList (what
--     metadata-only informers ask for: client-go's metadata client,
--     controller-runtime's OnlyMetadata, kube-rs's metadata watcher): kind,
--     apiVersion and the object's metadata alone.
--
-- The columns are the real server's printers for the kinds where they are
-- cheap to compute (ConfigMap, Secret, Namespace, ServiceAccount, Lease,
-- Deployment, ReplicaSet, StatefulSet, Pod, Service...), Name and Age for the other
-- built-ins, and Name and "Created At" for custom resources, as the
-- apiserver's default table convertor gives when a CRD lists no
-- additionalPrinterColumns.

local json = require "kubelua.json"

local type, pairs, ipairs, tostring, floor = type, pairs, ipairs, tostring, math.floor
local format = string.format
local null, is_array = json.null, json.is_array

local _M = {}

local NAME_DESC = "Name must be unique within a namespace. Is required when creating "
  .. "resources, although some resources may allow a client to request the generation of an "
  .. "appropriate name automatically. Name is primarily intended for creation idempotence and "
  .. "configuration definition. Cannot be updated. More info: "
  .. "http://kubernetes.io/docs/user-guide/identifiers#names"
local AGE_DESC = "CreationTimestamp is a timestamp representing the server time when this "
  .. "object was created. It is not guaranteed to be set in happens-before order across "
  .. "separate operations. Clients may not set this value. It is represented in RFC3339 form "
  .. "and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
  .. "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
  .. "#metadata"

local function col(name, desc, typ, fmt, priority)
  return { name = name, type = typ or "string", format = fmt or "", description = desc or "",
    priority = priority or 0 }
end

local NAME = col("Name", NAME_DESC, "string", "name")
local AGE = col("Age", AGE_DESC)

-- "3h" or "3h20m": a count of a unit and, unless 0, of the next one.
local function two(a, ua, b, ub)
  return b == 0 and a .. ua or format("%d%s%d%s", a, ua, b, ub)
end

-- Go's duration.HumanDuration (k8s.io/apimachinery), as kubectl shows ages.
function _M.human_duration(seconds)
  local s = floor(seconds)
  if s < -1 then return "<invalid>" end
  if s < 0 then return "0s" end
  if s < 120 then return s .. "s" end
  local m = floor(s / 60)
  if m < 10 then return two(m, "m", s % 60, "s") end
  if m < 180 then return m .. "m" end
  local h = floor(s / 3600)
  if h < 8 then return two(h, "h", m % 60, "m") end
  if h < 48 then return h .. "h" end
  local d = floor(h / 24)
  if h < 24 * 8 then return two(d, "d", h % 24, "h") end
  if h < 24 * 365 * 2 then return d .. "d" end
  if h < 24 * 365 * 8 then return two(floor(d / 365), "y", d % 365, "d") end
  return floor(d / 365) .. "y"
end

-- Seconds since the epoch of an RFC 3339 UTC time "2006-01-02T15:04:05Z".
local function epoch(ts)
  if type(ts) ~= "string" then return nil end
  local y, mo, d, h, mi, s = ts:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  -- days from civil (Howard Hinnant's algorithm): no time zone involved
  if mo <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local doy = floor((153 * (mo + (mo > 2 and -3 or 9)) + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
end
_M.epoch = epoch

local function count(t)
  local n = 0
  if type(t) == "table" then
    for _ in pairs(t) do n = n + 1 end
  end
  return n
end

local function field(o, ...)
  for _, k in ipairs { ... } do
    if type(o) ~= "table" then return nil end
    o = o[k]
  end
  if o == null then return nil end
  return o
end

local function num(v) return type(v) == "number" and v or 0 end

local function workload(ready_of)
  return {
    cols = { NAME, col("Ready", "Number of the pods ready / desired"),
      col("Up-to-date", "Total number of non-terminated pods targeted by this deployment that "
        .. "have the desired template spec.", "integer"),
      col("Available", "Total number of available pods (ready for at least minReadySeconds) "
        .. "targeted by this deployment.", "integer"), AGE },
    cells = function(o)
      return { ready_of(o), num(field(o, "status", "updatedReplicas")),
        num(field(o, "status", "availableReplicas")) }
    end,
  }
end

local function ready_desired(o)
  return format("%d/%d", num(field(o, "status", "readyReplicas")),
    num(field(o, "spec", "replicas")))
end

-- Per resource: the columns between Name and Age, and their cells.
local printers = {
  configmaps = {
    cols = { NAME, col("Data", "Data contains the configuration data. Each key must consist of "
      .. "alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must "
      .. "use the BinaryData field. The keys stored in Data must not overlap with the keys in "
      .. "the BinaryData field, this is enforced during validation process.", "string"), AGE },
    cells = function(o) return { count(o.data) + count(o.binaryData) } end,
  },
  secrets = {
    cols = { NAME, col("Type", "The type of secret"),
      col("Data", "The number of items in the secret", "string"), AGE },
    cells = function(o) return { o.type or "Opaque", count(o.data) } end,
  },
  namespaces = {
    cols = { NAME, col("Status", "The status of the namespace"), AGE },
    cells = function(o) return { field(o, "status", "phase") or "" } end,
  },
  serviceaccounts = {
    cols = { NAME, col("Secrets", "Secrets is the list of secrets allowed to be used by pods "
      .. "running using this ServiceAccount. More info: "
      .. "https://kubernetes.io/docs/concepts/configuration/secret", "string"), AGE },
    cells = function(o) return { is_array(o.secrets) and #o.secrets or 0 } end,
  },
  leases = {
    cols = { NAME, col("Holder", "The holder of the lease"), AGE },
    cells = function(o) return { field(o, "spec", "holderIdentity") or "" } end,
  },
  pods = {
    cols = { NAME, col("Ready", "The aggregate readiness state of this pod for accepting "
      .. "traffic."), col("Status", "The aggregate status of the containers in this pod."),
      col("Restarts", "The number of times the containers in this pod have been restarted and "
        .. "when the last container in this pod has restarted."), AGE },
    cells = function(o)
      local total, ready, restarts = 0, 0, 0
      for _, c in ipairs(field(o, "spec", "containers") or {}) do
        if type(c) == "table" then total = total + 1 end
      end
      for _, cs in ipairs(field(o, "status", "containerStatuses") or {}) do
        if type(cs) == "table" then
          if cs.ready == true then ready = ready + 1 end
          restarts = restarts + num(cs.restartCount)
        end
      end
      local st = field(o, "status", "phase") or "Pending"
      if field(o, "metadata", "deletionTimestamp") then st = "Terminating" end
      return { format("%d/%d", ready, total), st, tostring(restarts) }
    end,
  },
  deployments = workload(ready_desired),
  statefulsets = {
    cols = { NAME, col("Ready", "Number of the pods ready / desired"), AGE },
    cells = function(o) return { ready_desired(o) } end,
  },
  replicasets = {
    cols = { NAME, col("Desired", "Replicas is the number of desired replicas.", "integer"),
      col("Current", "Replicas is the most recently oberved number of replicas.", "integer"),
      col("Ready", "The number of ready replicas for this replica set.", "integer"), AGE },
    cells = function(o)
      return { num(field(o, "spec", "replicas")), num(field(o, "status", "replicas")),
        num(field(o, "status", "readyReplicas")) }
    end,
  },
}

-- Services, as printService: the first cluster IP, the external IPs for
-- the type, the ports ("80/TCP", "80:30080/TCP"); the selector (wide) after
-- the age.
local function external_ip(o)
  local t, ext = field(o, "spec", "type"), field(o, "spec", "externalIPs")
  local ips = is_array(ext) and #ext > 0 and table.concat(ext, ",") or nil
  if t == "ClusterIP" or t == "NodePort" then return ips or "<none>" end
  if t == "ExternalName" then return field(o, "spec", "externalName") or "" end
  if t == "LoadBalancer" then
    local lb = {}
    for _, ing in ipairs(field(o, "status", "loadBalancer", "ingress") or {}) do
      if type(ing) == "table" then lb[#lb + 1] = ing.ip or ing.hostname end
    end
    if ips then lb[#lb + 1] = ips end
    return #lb > 0 and table.concat(lb, ",") or "<pending>"
  end
  return "<unknown>"
end

printers.services = {
  cols = { NAME, col("Type", "type determines how the Service is exposed."),
    col("Cluster-IP", "clusterIP is the IP address of the service and is usually assigned "
      .. "randomly."),
    col("External-IP", "externalIPs is a list of IP addresses for which nodes in the cluster "
      .. "will also accept traffic for this service."),
    col("Port(s)", "The list of ports that are exposed by this service."), AGE,
    col("Selector", "Route service traffic to pods with label keys and values matching this "
      .. "selector.", "string", "", 1) },
  cells = function(o)
    local ips = field(o, "spec", "clusterIPs")
    local ports = {}
    for _, p in ipairs(field(o, "spec", "ports") or {}) do
      if type(p) == "table" then
        ports[#ports + 1] = num(p.nodePort) > 0
          and format("%d:%d/%s", num(p.port), p.nodePort, tostring(p.protocol))
          or format("%d/%s", num(p.port), tostring(p.protocol))
      end
    end
    return { field(o, "spec", "type") or "", is_array(ips) and ips[1] or "<none>",
      external_ip(o), #ports > 0 and table.concat(ports, ",") or "<none>" }
  end,
  after = function(o)
    local sel, keys = field(o, "spec", "selector"), {}
    for k in pairs(type(sel) == "table" and sel or {}) do keys[#keys + 1] = k end
    table.sort(keys)
    for i, k in ipairs(keys) do keys[i] = k .. "=" .. tostring(sel[k]) end
    return { #keys > 0 and table.concat(keys, ",") or "<none>" }
  end,
}

local plain = { cols = { NAME, AGE }, cells = function() return {} end }
local custom = { cols = { NAME, col("Created At", AGE_DESC, "date") } }

local FORMS = { Table = true, PartialObjectMetadata = true, PartialObjectMetadataList = true }

-- The media ranges of an Accept header in the order the apiserver tries
-- them: goautoneg's, an insertion sort (Go's sort for so few) by its Less,
-- which puts a higher q first, or else a concrete type (or subtype) before
-- a wildcard, whatever their q (q=0 included). Each: { type, params }.
local function ranges(accept)
  local list = {}
  for range in accept:gmatch("[^,]+") do
    local mt = (range:match("^%s*([^;%s]+)") or ""):lower()
    local p = {}
    for k, v in range:gmatch(";%s*([^=;%s]+)%s*=%s*([^;%s]*)") do p[k] = v end
    local t, st = mt:match("^([^/]*)/?(.*)$")
    list[#list + 1] = { type = mt, params = p, q = tonumber(p.q) or 1, t = t, st = st }
  end
  local function less(a, b)
    return a.q > b.q or (a.t ~= "*" and b.t == "*") or (a.st ~= "*" and b.st == "*")
  end
  for i = 2, #list do
    local j = i
    while j > 1 and less(list[j], list[j - 1]) do
      list[j], list[j - 1] = list[j - 1], list[j]
      j = j - 1
    end
  end
  return list
end

-- form(accept) -> "Table", "PartialObjectMetadata" or
-- "PartialObjectMetadataList", and its apiVersion ("meta.k8s.io/v1" or
-- "meta.k8s.io/v1beta1"); or nil (the object as it is): what the first
-- JSON media range of an Accept header that the simulator serves asks for
-- (a range of another type, protobuf among them, is passed over; a plain
-- application/json or */* first means the object itself).
function _M.form(accept)
  if type(accept) ~= "string" then return nil end
  for _, r in ipairs(ranges(accept)) do
    local mt, p = r.type, r.params
    if mt == "application/json" or mt == "*/*" or mt == "application/*" then
      if not p.as then return nil end
      if FORMS[p.as] and p.g == "meta.k8s.io" and (p.v == "v1" or p.v == "v1beta1") then
        return p.as, "meta.k8s.io/" .. p.v
      end
    end
  end
  return nil
end

-- The type the real server names in the 406 for a form that does not fit
-- the answer: its internal object's Go type (%T), "*core.ConfigMap" or
-- "*unstructured.UnstructuredList".
local PACKAGES = { [""] = "core", apps = "apps", ["coordination.k8s.io"] = "coordination",
  ["events.k8s.io"] = "core", ["apiextensions.k8s.io"] = "apiextensions" }

local function go_type(res, list)
  local t = res.builtin and "*" .. (PACKAGES[res.group] or res.group:match("^[^.]*")) .. "."
    .. res.kind or "*unstructured.Unstructured"
  return list and t .. "List" or t
end

-- The message of the 406 NotAcceptable a read gets when the form it asks
-- for does not fit its answer (`list`: the answer is a list), or nil.
function _M.misfit(form, res, list)
  if form == "PartialObjectMetadata" and list then
    return "you requested PartialObjectMetadata, but the requested object is a list ("
      .. go_type(res, true) .. ")"
  elseif form == "PartialObjectMetadataList" and not list then
    return "you requested PartialObjectMetadataList, but the requested object is not a list ("
      .. go_type(res, false) .. ")"
  end
  return nil
end

local INCLUDE = { Metadata = true, Object = true, None = true, [""] = true }

-- The message of the 400 a request for a Table gets when its
-- includeObject is none of the three, or nil.
function _M.options_error(include)
  if include == nil or INCLUDE[include] then return nil end
  return format("Unable to convert to Table as requested: includeObject: Invalid value: %s: "
    .. "must be 'Metadata', 'Object', 'None', or empty", json.encode(include))
end

local V1 = "meta.k8s.io/v1"

-- The PartialObjectMetadata of an object (api: its apiVersion, the one
-- asked for; meta.k8s.io/v1 by default).
local function partial(o, api)
  return { kind = "PartialObjectMetadata", apiVersion = api or V1, metadata = o.metadata }
end
_M.partial = partial

-- The PartialObjectMetadataList of a list's objects (meta: the list's
-- metadata).
function _M.partial_list(objects, meta, api)
  local items = json.array {}
  for i, o in ipairs(objects) do items[i] = partial(o, api) end
  return { kind = "PartialObjectMetadataList", apiVersion = api or V1, metadata = meta,
    items = items }
end

-- build(res, objects, rv, include, now, api) -> the Table (a table to
-- encode). include: "Metadata" (default), "Object" or "None"; now: epoch
-- seconds; api: the apiVersion asked for (meta.k8s.io/v1 by default).
function _M.build(res, objects, rv, include, now, api)
  local p = res.builtin and (printers[res.name] or plain) or custom
  local rows = json.array {}
  for i, o in ipairs(objects) do
    local md = o.metadata or {}
    local cells = json.array { md.name or "" }
    if res.builtin then
      for _, v in ipairs(p.cells(o)) do cells[#cells + 1] = v end
      local born = epoch(md.creationTimestamp)
      cells[#cells + 1] = born and _M.human_duration(now - born) or "<unknown>"
      for _, v in ipairs(p.after and p.after(o) or {}) do cells[#cells + 1] = v end
    else
      cells[2] = md.creationTimestamp or null
    end
    local row = { cells = cells }
    if include == "Object" then
      row.object = o
    elseif include ~= "None" then
      row.object = partial(o, api)
    end
    rows[i] = row
  end
  return { kind = "Table", apiVersion = api or V1,
    metadata = { resourceVersion = rv and tostring(rv) or nil },
    columnDefinitions = json.array(p.cols), rows = rows }
end

-- The Table of one object, as a get answers it: its metadata carries the
-- object's resourceVersion.
function _M.one(res, o, include, now, api)
  return _M.build(res, { o }, o.metadata and o.metadata.resourceVersion, include, now, api)
end

-- watch_encoder(res, form, include, api) -> function(object) -> the JSON
-- text that a watch asking for a form sends in place of an event's object
-- (given as a table or as its JSON text; a bookmark's too, an ERROR's
-- Status stays as it is), or nil when it sends the objects as they are.
-- A Table's column definitions come with the first event only: the later
-- ones carry null, as kube-apiserver's watch encoder sets NoHeaders after
-- its first object. A watch that asks for a PartialObjectMetadataList can
-- carry no object: the function returns nil, and the watch ends there, as
-- the real server's does when its encoder fails.
function _M.watch_encoder(res, form, include, api)
  local function object(x) return type(x) == "table" and x or assert(json.decode(x)) end
  if form == "PartialObjectMetadata" then
    return function(x) return json.encode(partial(object(x), api)) end
  elseif form == "PartialObjectMetadataList" then
    return function() return nil end
  elseif form ~= "Table" then
    return nil
  end
  local headers = true
  return function(x)
    local t = _M.one(res, object(x), include, os.time(), api)
    if not headers then t.columnDefinitions = null end
    headers = false
    return json.encode(t)
  end
end

return _M
