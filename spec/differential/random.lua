-- Randomized sequences for the differential suite: each works in a
-- namespace of its own over several kinds (ConfigMaps, Secrets,
-- Deployments, Services, Leases, a CRD's objects and Namespaces), with
-- create, update, patch (merge, JSON, strategic), server-side apply,
-- delete, get and list — a quarter of them invalid on purpose (bad names,
-- wrong types, stale resourceVersions, missing objects, malformed
-- patches) — then lists every kind it touched and replays its watches
-- from the namespace's creation. Names come from a pool of three per kind
-- so that creates collide and updates find (or miss) their objects. The
-- same seed gives the same sequences.
local json = require "kubelua.json"

local format = string.format
local array = json.array

local _M = {}

-- A small deterministic generator (a 31-bit LCG), independent of
-- math.random's state.
local function rng(seed)
  local s = seed % 2147483647
  if s <= 0 then s = s + 2147483646 end
  return function(n)
    s = (s * 16807) % 2147483647
    return s % n + 1
  end
end

local function pick(r, list) return list[r(#list)] end

local function b64(s)
  return (require("kubelua.sim.util").b64encode(s))
end

-- The CRD the sequences use (created once, before them).
local CRD = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
  metadata = { name = "gadgets.example.org" },
  spec = { group = "example.org", scope = "Namespaced",
    names = { plural = "gadgets", singular = "gadget", kind = "Gadget",
      listKind = "GadgetList" },
    versions = array { { name = "v1", served = true, storage = true,
      subresources = { status = {} },
      schema = { openAPIV3Schema = { type = "object", properties = {
        spec = { type = "object", properties = { size = { type = "integer" },
          color = { type = "string" } } },
        status = { type = "object", properties = { ready = { type = "boolean" } } } } } } } } } }

-- kind → how to make and spoil its objects. collection(ns) is its URL;
-- make(name, v) a valid object; spoil(obj) makes it invalid (a value of
-- the wrong form, which the validation of its kind refuses; values of the
-- wrong JSON type are the "wrong types" sequence's); change(v) a merge
-- patch that changes it.
local kinds = {
  configmaps = {
    collection = function(ns) return "/api/v1/namespaces/" .. ns .. "/configmaps" end,
    make = function(name, v)
      return { apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = name, labels = { app = name, v = tostring(v % 2) } },
        data = { key = "value" .. v } }
    end,
    spoil = function(obj) obj.data = { ["bad key!"] = "x" } end,
    change = function(v) return { data = { key = "patched" .. v, ["extra" .. v % 3] = "x" } } end,
  },
  secrets = {
    collection = function(ns) return "/api/v1/namespaces/" .. ns .. "/secrets" end,
    make = function(name, v)
      return { apiVersion = "v1", kind = "Secret", type = "Opaque",
        metadata = { name = name, labels = { app = name } },
        data = { token = b64("secret" .. v) } }
    end,
    spoil = function(obj) obj.data = { token = "not base64!" } end,
    change = function(v) return { data = { token = b64("patched" .. v) } } end,
  },
  deployments = {
    collection = function(ns) return "/apis/apps/v1/namespaces/" .. ns .. "/deployments" end,
    make = function(name, v)
      return { apiVersion = "apps/v1", kind = "Deployment",
        metadata = { name = name, labels = { app = name } },
        spec = { replicas = v % 3, selector = { matchLabels = { app = name } },
          template = { metadata = { labels = { app = name } },
            spec = { containers = array { { name = "main", image = "nginx:1." .. v } } } } } }
    end,
    spoil = function(obj)
      obj.spec.strategy = { type = "Recreate", rollingUpdate = { maxSurge = 1 } }
    end,
    change = function(v) return { spec = { replicas = v % 4 } } end,
    strategic = function(v)
      return { spec = { template = { spec = { containers = array {
        { name = "side" .. v % 2, image = "busybox:1." .. v } } } } } }
    end,
  },
  services = {
    collection = function(ns) return "/api/v1/namespaces/" .. ns .. "/services" end,
    make = function(name, v)
      return { apiVersion = "v1", kind = "Service", metadata = { name = name },
        spec = { selector = { app = name },
          ports = array { { name = "http", port = 80 + v % 5, targetPort = 8080 } } } }
    end,
    spoil = function(obj) obj.spec.ports[1].port = 0 end,
    change = function(v) return { spec = { selector = { app = "other" .. v % 2 } } } end,
    strategic = function(v)
      return { spec = { ports = array { { name = "extra", port = 9000 + v % 5 } } } }
    end,
  },
  leases = {
    collection = function(ns)
      return "/apis/coordination.k8s.io/v1/namespaces/" .. ns .. "/leases"
    end,
    make = function(name, v)
      return { apiVersion = "coordination.k8s.io/v1", kind = "Lease", metadata = { name = name },
        spec = { holderIdentity = "node-" .. v % 3, leaseDurationSeconds = 10 + v % 5,
          renewTime = format("2026-01-01T00:00:%02d.000000Z", v % 60) } }
    end,
    spoil = function(obj) obj.spec.renewTime = "2026-01-01T00:00:00Z" end,
    change = function(v) return { spec = { holderIdentity = "node-" .. v % 4 } } end,
  },
  gadgets = {
    collection = function(ns) return "/apis/example.org/v1/namespaces/" .. ns .. "/gadgets" end,
    make = function(name, v)
      return { apiVersion = "example.org/v1", kind = "Gadget", metadata = { name = name },
        spec = { size = v, color = pick(rng(v + 1), { "red", "blue" }) } }
    end,
    spoil = function(obj) obj.spec.size = "big" end,
    change = function(v) return { spec = { size = v + 100 } } end,
    status = function(v) return { status = { ready = v % 2 == 0 } } end,
  },
}

local KINDS = { "configmaps", "secrets", "deployments", "services", "leases", "gadgets" }
local NAMES = { "a", "b", "c" }

-- The steps of one sequence (number i, generator r).
local function sequence(i, r)
  local ns = "seq-" .. i
  local steps = {}
  local function add(s) steps[#steps + 1] = s end
  local nspath = "/api/v1/namespaces/" .. ns
  add{ label = "create namespace", method = "POST", path = "/api/v1/namespaces",
    body = { apiVersion = "v1", kind = "Namespace",
      metadata = { name = ns, labels = { seq = tostring(i) } } } }
  local used, order = {}, {}
  local function use(k)
    if not used[k] then used[k] = true order[#order + 1] = k end
  end
  for _ = 1, 10 + r(6) do
    local kname = pick(r, KINDS)
    local k = kinds[kname]
    local coll = k.collection(ns)
    local name = pick(r, NAMES)
    local path = coll .. "/" .. name
    local v = r(1000)
    local bad = r(4) == 1
    local op = pick(r, { "create", "create", "update", "merge", "json", "strategic", "apply",
      "apply", "delete", "get", "list", "status" })
    use(kname)
    local step = { method = "GET", path = path }
    local function current_rv(which)
      return function(st, rq)
        local o = st[which or "last"][path]
        if o and type(rq.body) == "table" then
          rq.body.metadata.resourceVersion = o.metadata.resourceVersion
        end
      end
    end
    if op == "create" then
      local obj = k.make(name, v)
      local how = bad and pick(r, { "name", "type", "none" }) or pick(r, { "plain", "plain",
        "generate", "empty" })
      if how == "name" then obj.metadata.name = "Bad_Name" end
      if how == "type" then k.spoil(obj) end
      if how == "none" then obj.metadata.name = nil end
      if how == "empty" then obj.metadata.labels, obj.metadata.annotations = {}, {} end
      if how == "generate" then
        obj.metadata.name = nil
        obj.metadata.generateName = name .. "-"
      end
      step = { label = "create " .. kname .. " (" .. how .. ")", method = "POST", path = coll,
        body = obj }
    elseif op == "update" then
      local obj = k.make(name, v)
      local how = bad and pick(r, { "stale", "missing", "type" }) or pick(r, { "current",
        "unconditional" })
      step = { label = "update " .. kname .. " (" .. how .. ")", method = "PUT", path = path,
        body = obj }
      if how == "current" or how == "type" then step.prepare = current_rv() end
      if how == "type" then k.spoil(obj) end
      if how == "stale" then step.prepare = current_rv("first") end
      if how == "missing" then
        obj.metadata.name = "missing"
        step.path = coll .. "/missing"
      end
    elseif op == "merge" then
      local how = bad and pick(r, { "malformed", "missing" }) or "valid"
      step = { label = "merge patch " .. kname .. " (" .. how .. ")", method = "PATCH",
        path = path, body = k.change(v),
        headers = { ["Content-Type"] = "application/merge-patch+json" } }
      if how == "malformed" then step.body = '{"metadata": {' end
      if how == "missing" then step.path = coll .. "/missing" end
    elseif op == "json" then
      local how = bad and pick(r, { "test", "remove", "object" }) or "valid"
      local ops = array { { op = "add", path = "/metadata/labels", value = { j = tostring(v) } } }
      if how == "test" then
        ops = array { { op = "test", path = "/metadata/name", value = "wrong" } }
      elseif how == "remove" then
        ops = array { { op = "remove", path = "/metadata/nothing" } }
      elseif how == "object" then
        ops = { op = "remove", path = "/metadata/labels" }
      end
      step = { label = "json patch " .. kname .. " (" .. how .. ")", method = "PATCH",
        path = path, body = ops,
        headers = { ["Content-Type"] = "application/json-patch+json" } }
    elseif op == "strategic" then
      local body = k.strategic and k.strategic(v) or k.change(v)
      step = { label = "strategic patch " .. kname, method = "PATCH", path = path, body = body,
        headers = { ["Content-Type"] = "application/strategic-merge-patch+json" } }
    elseif op == "apply" then
      local obj = k.make(name, v)
      obj.metadata.labels = nil
      local manager = pick(r, { "alpha", "beta" })
      local how = bad and pick(r, { "no-manager", "type" }) or pick(r, { "plain", "force" })
      local query = "?fieldManager=" .. manager
      if how == "force" then query = query .. "&force=true" end
      if how == "no-manager" then query = "" end
      if how == "type" then k.spoil(obj) end
      step = { label = "apply " .. kname .. " (" .. how .. ")", method = "PATCH",
        path = path .. query, body = json.encode(obj),
        headers = { ["Content-Type"] = "application/apply-patch+yaml" } }
    elseif op == "delete" then
      local how = bad and pick(r, { "missing", "stale" }) or pick(r, { "plain", "Foreground",
        "Background", "Orphan" })
      step = { label = "delete " .. kname .. " (" .. how .. ")", method = "DELETE", path = path }
      if how == "missing" then step.path = coll .. "/missing" end
      if how == "Foreground" or how == "Background" or how == "Orphan" then
        step.body = { apiVersion = "v1", kind = "DeleteOptions", propagationPolicy = how }
      end
      if how == "stale" then
        step.body = { apiVersion = "v1", kind = "DeleteOptions",
          preconditions = { resourceVersion = "1" } }
      end
    elseif op == "get" then
      step = { label = "get " .. kname, method = "GET", path = bad and coll .. "/missing" or path }
    elseif op == "list" then
      local q = pick(r, { "", "?limit=1", "?labelSelector=app%3D" .. name })
      step = { label = "list " .. kname .. (q ~= "" and " (" .. q:match("^%?(%w+)") .. ")" or ""),
        method = "GET", path = coll .. q }
    elseif op == "status" then
      local body = k.status and k.status(v) or { status = {} }
      step = { label = "merge patch " .. kname .. "/status", method = "PATCH",
        path = path .. "/status", body = body,
        headers = { ["Content-Type"] = "application/merge-patch+json" } }
    end
    add(step)
  end
  -- a third of the sequences also change and delete their namespace
  if r(3) == 1 then
    add{ label = "merge patch namespace", method = "PATCH", path = nspath,
      body = { metadata = { labels = { phase = "done" } } },
      headers = { ["Content-Type"] = "application/merge-patch+json" } }
    add{ label = "delete namespace", method = "DELETE", path = nspath }
    add{ label = "get namespace", method = "GET", path = nspath }
    add{ label = "create configmaps in a deleted namespace", method = "POST",
      path = kinds.configmaps.collection(ns), body = kinds.configmaps.make("late", 1) }
  end
  table.sort(order)
  for _, kname in ipairs(order) do
    add{ label = "list " .. kname .. " at the end", method = "GET",
      path = kinds[kname].collection(ns) }
  end
  local function from_start(st, rq)
    rq.path = rq.path .. "&resourceVersion=" .. st.marks.start .. "&timeoutSeconds=1"
  end
  steps[1].after = function(st, res) st.marks.start = res.body.metadata.resourceVersion end
  for _, kname in ipairs(order) do
    add{ label = "watch " .. kname, method = "GET", watch = true, concurrent = true,
      path = kinds[kname].collection(ns) .. "?watch=true", prepare = from_start }
  end
  add{ label = "watch namespaces", method = "GET", watch = true, concurrent = true,
    path = "/api/v1/namespaces?watch=true&labelSelector=seq%3D" .. i, prepare = from_start }
  return steps
end

-- The steps that prepare every sequence: the CRD, once established, and a
-- list of its objects (a real server starts a custom resource's watch
-- cache at its first use: a watch from before that is 410 Expired).
function _M.setup()
  return {
    { label = "create the CRD", method = "POST",
      path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body = CRD },
    { label = "get the CRD once established", method = "GET",
      path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.org",
      wait = require("spec.differential.fixtures").established },
    { label = "list gadgets", method = "GET", path = "/apis/example.org/v1/gadgets" },
  }
end

-- Values of the wrong JSON type in built-in kinds, once each.
function _M.wrong_types()
  local ns = "wrong-types"
  local steps = {
    { label = "create namespace", method = "POST", path = "/api/v1/namespaces",
      body = { apiVersion = "v1", kind = "Namespace", metadata = { name = ns } } },
  }
  local dep = kinds.deployments.make("replicas", 1)
  dep.spec.replicas = "two"
  steps[2] = { label = "create deployments (replicas a string)", method = "POST",
    path = kinds.deployments.collection(ns), body = dep }
  local cm = kinds.configmaps.make("number", 1)
  cm.data.key = 7
  steps[3] = { label = "create configmaps (data a number)", method = "POST",
    path = kinds.configmaps.collection(ns), body = cm }
  return steps
end

-- sequences(seed, n) -> { { case, steps } … }
function _M.sequences(seed, n)
  local out = {}
  for i = 1, n do
    local r = rng(seed * 7919 + i)
    out[i] = { case = format("random %d/%d", seed, i), steps = sequence(i, r) }
  end
  return out
end

return _M
