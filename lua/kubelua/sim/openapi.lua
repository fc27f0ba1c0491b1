-- kubelua.sim.openapi: the OpenAPI v3 documents the simulator serves
-- (GET /openapi/v3, then each path's serverRelativeURL).
--
-- The built-in group versions are served as kube-apiserver v1.26 sent
-- them (data/surface/openapi, embedded in the binary, each document
-- compressed on its own by kl_embed and decompressed when first asked
-- for): every kind's schema, so `kubectl explain` explains and kubectl's
-- client-side apply finds its patch strategies and merge keys.
--
-- A CustomResourceDefinition's group version gets a document made here,
-- as far as clients act on it: the operations of every path with their
-- x-kubernetes-group-version-kind and x-kubernetes-action, their query
-- parameters (fieldValidation among them) and the patch types each PATCH
-- takes (no strategic merge for custom resources). kubectl reads that
-- before it applies or creates: a kind whose PATCH takes fieldValidation
-- is validated by the server (the simulator does it), so kubectl needs no
-- schema; without a document it falls back to OpenAPI v2, which the
-- simulator does not serve, and refuses ("failed to download openapi").

local json = require "kubelua.json"
local bit = require "bit"
local embed = require "kubelua.embed"

local ipairs, pairs, byte, upper = ipairs, pairs, string.byte, string.upper

local _M = {}

-- The path of a group version's document: "api/v1", "apis/apps/v1".
local function gv_path(gv)
  return gv == "v1" and "api/v1" or "apis/" .. gv
end
_M.gv_path = gv_path

-- A query parameter; a path parameter when `path`.
local function param(name, typ, path)
  return { name = name, ["in"] = path and "path" or "query", required = path or nil,
    schema = { type = typ, uniqueItems = not path or nil } }
end

local P = {
  name = param("name", "string", true), namespace = param("namespace", "string", true),
  pretty = param("pretty", "string"), dryRun = param("dryRun", "string"),
  fieldManager = param("fieldManager", "string"),
  fieldValidation = param("fieldValidation", "string"), force = param("force", "boolean"),
  labelSelector = param("labelSelector", "string"),
  fieldSelector = param("fieldSelector", "string"),
  limit = param("limit", "integer"), continue = param("continue", "string"),
  resourceVersion = param("resourceVersion", "string"),
  resourceVersionMatch = param("resourceVersionMatch", "string"),
  timeoutSeconds = param("timeoutSeconds", "integer"), watch = param("watch", "boolean"),
  allowWatchBookmarks = param("allowWatchBookmarks", "boolean"),
  sendInitialEvents = param("sendInitialEvents", "boolean"),
  propagationPolicy = param("propagationPolicy", "string"),
  gracePeriodSeconds = param("gracePeriodSeconds", "integer"),
  orphanDependents = param("orphanDependents", "boolean"),
}

-- The parameters named in list `names`.
local function params(names)
  local t = json.array {}
  for i, n in ipairs(names) do t[i] = P[n] end
  return t
end

-- A path item's parameters, those given as nil left out.
local function item_params(...)
  local t = json.array {}
  for i = 1, select("#", ...) do t[#t + 1] = select(i, ...) end
  return t
end

local LIST = { "allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit",
  "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds", "watch" }
local WRITE = { "dryRun", "fieldManager", "fieldValidation" }
local PATCH = { "dryRun", "fieldManager", "fieldValidation", "force" }
local DELETE = { "dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy" }
local DELETE_ALL = { "dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy",
  "labelSelector", "fieldSelector", "limit", "continue", "resourceVersion" }

local OBJECT = { schema = { type = "object" } }
local ANY_BODY = { ["*/*"] = OBJECT } -- what create, replace and delete take
local OK = { ["200"] = { description = "OK" } }
local CREATED = { ["200"] = { description = "OK" }, ["201"] = { description = "Created" },
  ["202"] = { description = "Accepted" } }

-- The media types a PATCH takes: strategic merge for built-in kinds only.
local function patch_types(builtin)
  local t = { ["application/apply-patch+yaml"] = OBJECT,
    ["application/json-patch+json"] = OBJECT, ["application/merge-patch+json"] = OBJECT }
  if builtin then t["application/strategic-merge-patch+json"] = OBJECT end
  return t
end

-- The operationId the real server gives: verb, group, version, scope,
-- kind and subresource (patchAppsV1NamespacedDeploymentStatus,
-- deleteCoreV1CollectionNamespacedConfigMap).
local function op_id(verb, gvk, e, sub, collection)
  local g = gvk.group:gsub("%.k8s%.io$", ""):gsub("[.-](%a)", upper):gsub("^%l", upper)
  return verb .. (g == "" and "Core" or g) .. gvk.version:gsub("^%l", upper)
    .. (collection and "Collection" or "") .. (e.namespaced and "Namespaced" or "") .. e.kind
    .. sub:gsub("^%l", upper)
end

-- An operation: its id, action (x-kubernetes-action), what it acts on
-- (gvk), its query parameters, and the media types of its body.
local function op(id, action, gvk, names, body)
  local optional = action == "delete" or action == "deletecollection"
  return { operationId = id, ["x-kubernetes-action"] = action,
    ["x-kubernetes-group-version-kind"] = gvk, parameters = params(names),
    requestBody = body and { content = body, required = not optional or nil } or nil,
    responses = (action == "post" or action == "put") and CREATED or OK }
end

-- Adds the paths of one discovery entry (a resource or a subresource) of
-- res to paths.
local function entry_paths(paths, res, e)
  local plural, sub = e.name:match("^([^/]+)/?(.*)$")
  local base = "/" .. gv_path(res.gv) .. (e.namespaced and "/namespaces/{namespace}/" or "/")
    .. plural
  local gvk = { group = e.group or res.group, version = e.version or res.version, kind = e.kind }
  local can = {}
  for _, v in ipairs(e.verbs) do can[v] = true end
  local scope = e.namespaced and P.namespace or nil
  if sub == "" and (can.list or can.create or can.deletecollection) then
    local item = { parameters = item_params(scope, P.pretty) }
    if can.list then item.get = op(op_id("list", gvk, e, ""), "list", gvk, LIST) end
    if can.create then
      item.post = op(op_id("create", gvk, e, ""), "post", gvk, WRITE, ANY_BODY)
    end
    if can.deletecollection then
      item.delete = op(op_id("delete", gvk, e, "", true), "deletecollection", gvk, DELETE_ALL,
        ANY_BODY)
    end
    paths[base] = item
  end
  local item = { parameters = item_params(P.name, scope, P.pretty) }
  if can.get then item.get = op(op_id("read", gvk, e, sub), "get", gvk, {}) end
  if can.update then item.put = op(op_id("replace", gvk, e, sub), "put", gvk, WRITE, ANY_BODY) end
  if can.patch then
    item.patch = op(op_id("patch", gvk, e, sub), "patch", gvk, PATCH, patch_types(res.builtin))
  end
  if can.delete then
    item.delete = op(op_id("delete", gvk, e, sub), "delete", gvk, DELETE, ANY_BODY)
  end
  if can.get or can.update or can.patch or can.delete then -- not for create-only reviews
    paths[base .. "/{name}" .. (sub ~= "" and "/" .. sub or "")] = item
  end
end

-- The document of a group version as JSON text (g: the store's entry for
-- it, its resources in g.list); server_version goes in its info.
function _M.document(g, server_version)
  local paths = {}
  for _, res in ipairs(g.list) do
    for _, e in ipairs(res.disco) do entry_paths(paths, res, e) end
  end
  return json.encode { openapi = "3.0.0",
    info = { title = "Kubernetes", version = server_version },
    paths = paths, components = { schemas = {} } }
end

-- The hash a document's serverRelativeURL carries: its 64-bit FNV-1a, in
-- the uppercase hex the real server writes its own in.
function _M.hash(text)
  local h = 0xcbf29ce484222325ULL
  for i = 1, #text do h = bit.bxor(h, byte(text, i)) * 0x100000001b3ULL end
  return bit.tohex(h, -16)
end

-- The captured documents --------------------------------------------------

local function embedded(name)
  return embed.read("kl_surface_openapi", name)
end

local index -- path → serverRelativeURL, as the real server's index lists them

-- The real server's index: { path = { serverRelativeURL = url } }, a new
-- table each call (the caller adds the documents of its own).
function _M.captured_index()
  if not index then index = json.decode(embedded("index.json")).paths end
  local t = {}
  for path, p in pairs(index) do t[path] = { serverRelativeURL = p.serverRelativeURL } end
  return t
end

local docs = {} -- path → its text, once asked for

-- The real server's document at path ("apis/apps/v1") and the hash its
-- URL carries, or nil when the capture has none there.
function _M.captured(path)
  _M.captured_index()
  local p = index[path]
  if not p then return nil end
  local text = docs[path]
  if not text then
    text = embedded(path:gsub("/", "_") .. ".json")
    if not text then return nil end
    docs[path] = text
  end
  return text, p.serverRelativeURL:match("hash=(%x+)$")
end

return _M
