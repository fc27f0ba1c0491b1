-- Renders a kustomization as `kubectl kustomize` (and `kubectl apply -k`)
-- does, for the subset the manifests under deploy/ and examples/ use, so
-- that specs check what a user applies on a machine without kubectl:
--   resources           files (several documents each) and directories
--                       holding a kustomization.yaml (bases), in order
--   configMapGenerator  name, namespace, files (the key is the file's name),
--                       with generatorOptions.disableNameSuffixHash: true
--   patches             strategic merge patches, inline (patch) or in a
--                       file (path), applied to the resource of the same
--                       kind, name and namespace
-- A strategic merge merges maps, replaces scalars and lists, and merges
-- the lists Kubernetes declares with a merge key (containers and volumes by
-- name, ports by containerPort, ...) item by item. Anything else (another
-- field, a generator option, a $patch directive, a null) is an error that
-- names it, so a manifest cannot rely on what this renderer gets wrong.
local json = require "kubelua.json"
local yaml = require "kubelua.sim.yaml"

local format = string.format

local _M = {}

local FIELDS = { apiVersion = true, kind = true, resources = true, configMapGenerator = true,
                 generatorOptions = true, patches = true }
local GENERATOR_FIELDS = { name = true, namespace = true, files = true }
local PATCH_FIELDS = { patch = true, path = true }
-- patchMergeKey of the lists of a pod template that a patch may touch
local MERGE_KEYS = { containers = "name", initContainers = "name", env = "name",
                     volumes = "name", volumeMounts = "mountPath", ports = "containerPort",
                     imagePullSecrets = "name", tolerations = "key" }

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then error("kustomize: " .. err, 0) end
  local text = f:read("*a")
  f:close()
  return text
end

local function is_dir(path)
  local f = io.open(path .. "/kustomization.yaml", "rb")
  if f then f:close() end
  return f ~= nil
end

-- dir/entry with "." and ".." resolved (relative paths stay relative).
local function join(dir, entry)
  local parts = {}
  for part in (dir .. "/" .. entry):gmatch("[^/]+") do
    if part == ".." and #parts > 0 and parts[#parts] ~= ".." then
      table.remove(parts)
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  return (dir:sub(1, 1) == "/" and "/" or "") .. table.concat(parts, "/")
end

local function check_fields(t, known, what)
  for k in pairs(t) do
    if not known[k] then error(format("kustomize: %s: %s is not supported here", what, k), 0) end
  end
end

local function id(obj)
  local md = obj.metadata or {}
  return format("%s %s/%s", tostring(obj.kind), md.namespace or "", tostring(md.name))
end

-- Merges patch into target (both decoded objects) as a strategic merge
-- patch does for the fields above; returns the result (target is changed).
local function merge(target, patch, path)
  if type(patch) ~= "table" or type(target) ~= "table" then return patch end
  for k, v in pairs(patch) do
    if type(k) == "string" and k:sub(1, 1) == "$" then
      error(format("kustomize: %s: the directive %s is not supported here", path, k), 0)
    end
    if v == json.null then error(format("kustomize: %s.%s: null is not supported here", path, k), 0) end
    local key = MERGE_KEYS[k]
    if key and type(v) == "table" and type(target[k]) == "table" then
      for _, item in ipairs(v) do
        local found
        for _, have in ipairs(target[k]) do
          if have[key] ~= nil and have[key] == item[key] then found = have end
        end
        if found then
          merge(found, item, path .. "." .. k .. "[" .. tostring(item[key]) .. "]")
        else
          table.insert(target[k], item)
        end
      end
    elseif type(v) == "table" and v[1] == nil and next(v) ~= nil and type(target[k]) == "table" then
      target[k] = merge(target[k], v, path .. "." .. k)
    else
      target[k] = v
    end
  end
  return target
end
_M.merge = merge

local render

local function add(out, obj, from)
  for _, have in ipairs(out.objects) do
    if id(have) == id(obj) then error(format("kustomize: %s: %s is already defined", from, id(obj)), 0) end
  end
  table.insert(out.objects, obj)
end

local function load_resource(dir, entry, out)
  local path = join(dir, entry)
  if is_dir(path) then
    for _, obj in ipairs(render(path, out.files)) do add(out, obj, path) end
    return
  end
  local docs, err = yaml.decode_all(read(path))
  if not docs then error(format("kustomize: %s: %s", path, err), 0) end
  out.files[path] = true
  for _, obj in ipairs(docs) do add(out, obj, path) end
end

local function generate(dir, gen, options, out)
  check_fields(gen, GENERATOR_FIELDS, dir .. ": configMapGenerator")
  if not (options and options.disableNameSuffixHash == true) then
    error(format("kustomize: %s: a generated name needs generatorOptions.disableNameSuffixHash"
      .. " (a hash suffix is not supported here)", dir), 0)
  end
  local data = {}
  for _, f in ipairs(gen.files or {}) do
    local key = f:match("([^/]+)$")
    data[key] = read(join(dir, f))
  end
  add(out, { apiVersion = "v1", kind = "ConfigMap",
             metadata = { name = gen.name, namespace = gen.namespace }, data = data }, dir)
end

local function apply_patch(dir, p, out)
  check_fields(p, PATCH_FIELDS, dir .. ": patches")
  local text = p.patch or read(join(dir, p.path))
  local patch, err = yaml.decode(text)
  if not patch then error(format("kustomize: %s: patch: %s", dir, err), 0) end
  for _, obj in ipairs(out.objects) do
    if id(obj) == id(patch) then
      merge(obj, patch, id(patch))
      return
    end
  end
  error(format("kustomize: %s: the patch of %s matches no resource", dir, id(patch)), 0)
end

-- Returns the objects of the kustomization in dir, in the order of its
-- resources, generators and then anything patched in place. files, when
-- given, gets the path of every manifest file read as a key.
function render(dir, files)
  local k, err = yaml.decode(read(dir .. "/kustomization.yaml"))
  if not k then error(format("kustomize: %s/kustomization.yaml: %s", dir, err), 0) end
  check_fields(k, FIELDS, dir .. "/kustomization.yaml")
  local out = { objects = {}, files = files or {} }
  for _, entry in ipairs(k.resources or {}) do load_resource(dir, entry, out) end
  for _, gen in ipairs(k.configMapGenerator or {}) do generate(dir, gen, k.generatorOptions, out) end
  for _, p in ipairs(k.patches or {}) do apply_patch(dir, p, out) end
  return out.objects
end
_M.render = render

return _M
