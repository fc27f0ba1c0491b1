-- kubelua.types: editor types for Kubernetes objects, as the LuaLS
-- annotation files (---@meta, ---@class, ---@field) that lua-language-server
-- reads, so that an editor completes `pod.spec.containers[1].image` and
-- flags a misspelt field (`kubelua types`).
--
-- The built-in kinds come from the real server's OpenAPI v3 documents the
-- binary carries (kubelua.sim.openapi): every schema a class named after
-- it without the Go package path (io.k8s.api.core.v1.Pod → k8s.core.v1.Pod,
-- io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta → k8s.meta.v1.ObjectMeta),
-- one file per group version. A custom resource's come from each version's
-- openAPIV3Schema in its CustomResourceDefinition: the kind a class named
-- <group>.<version>.<Kind>, each nested object a class named by its path
-- below it (example.com.v1.Backup.spec), one file per definition.
--
-- A schema becomes a type as: a $ref → its class; an array → T[]; a map
-- (additionalProperties) → table<string, T>; an enum of strings → the union
-- of its literals; int-or-string → integer|string; a Quantity → string|number
-- (a number is accepted where a quantity is written); an object that keeps
-- unknown fields (x-kubernetes-preserve-unknown-fields) → its fields and
-- [string] any. A required property is a field without `?` (and so is a
-- kind's metadata, which every stored object has). Everything is
-- written sorted, so the same schemas always give the same bytes.

local json = require "kubelua.json"
local util = require "kubelua.sim.util"

local type, pairs, ipairs, tostring, format = type, pairs, ipairs, tostring, string.format
local concat, sorted_keys = table.concat, util.sorted_keys

local _M = {}

-- The class of a schema name: the Go package path dropped
-- (io.k8s.api.core.v1.Pod → k8s.core.v1.Pod,
-- io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON →
-- k8s.apiextensions.v1.JSON, io.k8s.apimachinery.pkg.api.resource.Quantity
-- → k8s.resource.Quantity); a name outside io.k8s stays as it is.
function _M.class_name(schema)
  local rest = schema:match("^io%.k8s%.(.+)$")
  if not rest then return schema end
  rest = rest:match("^[%w-]+%.pkg%.(.+)$") or rest
  rest = rest:match("^apis?%.(.+)$") or rest:match("^util%.(.+)$") or rest
  return "k8s." .. rest
end

-- A schema's description on one line.
local function one_line(s)
  if type(s) ~= "string" then return nil end
  s = s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
  return s ~= "" and s or nil
end

local KEYWORDS = {}
for w in ("and break do else elseif end false for function goto if in local nil not or repeat"
  .. " return then true until while"):gmatch("%a+") do
  KEYWORDS[w] = true
end

-- A field's name as an annotation writes it: bare, or quoted in brackets.
local function field_name(name)
  if name:match("^[%a_][%w_]*$") and not KEYWORDS[name] then return name end
  return format("[%q]", name)
end

-- A path segment in a class name.
local function segment(name)
  return (name:gsub("[^%w_]", "_"))
end

local SCALARS = { string = "string", integer = "integer", number = "number",
  boolean = "boolean" }

-- The union of an enum's string literals, or nil when it has another value.
local function enum_type(values)
  local t = {}
  for i, v in ipairs(values) do
    if type(v) ~= "string" or v:find('["\\\n]') then return nil end
    t[i] = '"' .. v .. '"'
  end
  return #t > 0 and concat(t, "|") or nil
end

local function is_object(v) return type(v) == "table" and not json.is_array(v) end

-- The type of schema s, where it stands at class name `at` (for a nested
-- object's class). cx holds ref(name, at) → the class of a $ref, and
-- emit(class, s) for a nested object; errors raise "at: reason".
local function type_of(s, at, cx)
  if not is_object(s) then
    if s == true or s == nil then return "any" end
    error(format("%s: a schema must be an object", at), 0)
  end
  local ref = s["$ref"]
  if ref == nil and json.is_array(s.allOf) and #s.allOf == 1 then ref = s.allOf[1]["$ref"] end
  if type(ref) == "string" then return cx.ref(ref:match("([^/]+)$"), at) end
  if s["x-kubernetes-int-or-string"] == true or s.format == "int-or-string" then
    return "integer|string"
  end
  local alts = json.is_array(s.oneOf) and s.oneOf or json.is_array(s.anyOf) and s.anyOf
  if alts and s.type == nil and s.properties == nil then
    local seen, t = {}, {}
    for i, a in ipairs(alts) do
      local u = type_of(a, at .. "." .. i, cx)
      if not seen[u] then seen[u], t[#t + 1] = true, u end
    end
    return concat(t, "|")
  end
  local ty = s.type
  if ty == nil or ty == json.null then
    if s.properties ~= nil then ty = "object" else return "any" end
  end
  if SCALARS[ty] then
    return ty == "string" and json.is_array(s.enum) and enum_type(s.enum) or SCALARS[ty]
  end
  if ty == "array" then
    local item = type_of(s.items, at, cx)
    return (item:find("|", 1, true) and "(" .. item .. ")" or item) .. "[]"
  end
  if ty ~= "object" then error(format("%s: unknown type %s", at, tostring(ty)), 0) end
  if is_object(s.properties) and next(s.properties) ~= nil then
    cx.emit(at, s)
    return at
  end
  if is_object(s.additionalProperties) then
    return "table<string, " .. type_of(s.additionalProperties, at, cx) .. ">"
  end
  return "table<string, any>"
end

-- Lines of `--- text`, one per line of the description (none without one).
local function doc_lines(out, description)
  if type(description) ~= "string" then return end
  for line in (description:gsub("%s+$", "") .. "\n"):gmatch("([^\n]*)\n") do
    out[#out + 1] = line == "" and "---" or "--- " .. line
  end
end

-- The annotations of class `class` from object schema s: its description,
-- ---@class and a ---@field per property. fixed, for a kind, maps a
-- property to a type that replaces its schema's (apiVersion, kind and a
-- custom resource's metadata); a kind's metadata is required, though no
-- schema says so: every object a server returns has it, and one sent to
-- it needs its name there.
local function class_text(class, s, cx, fixed)
  local out = {}
  doc_lines(out, s.description)
  out[#out + 1] = "---@class " .. class
  local required = {}
  for _, r in ipairs(json.is_array(s.required) and s.required or {}) do required[r] = true end
  if fixed then required.metadata = true end
  local props = is_object(s.properties) and s.properties or {}
  for _, name in ipairs(sorted_keys(props)) do
    local p = props[name]
    local t = fixed and fixed[name] or type_of(p, class .. "." .. segment(name), cx)
    local desc = is_object(p) and one_line(p.description)
    out[#out + 1] = format("---@field %s%s %s%s", field_name(name), required[name] and "" or "?",
      t, desc and " # " .. desc or "")
  end
  if s["x-kubernetes-preserve-unknown-fields"] == true then
    out[#out + 1] = "---@field [string] any"
  end
  return concat(out, "\n") .. "\n"
end

local HEADER = "---@meta\n-- %s\n-- Generated by `kubelua types`: do not edit.\n"

-- The text of a file of classes (class → its text), sorted by name.
local function file_text(what, classes)
  local out = { format(HEADER, what) }
  for _, name in ipairs(sorted_keys(classes)) do out[#out + 1] = classes[name] end
  return concat(out, "\n")
end

-- Built-in kinds -----------------------------------------------------------

-- Types that are scalars on the wire, whose schema says less than a
-- client may write: a quantity is read as a string but may be given as a
-- number.
local ALIASES = { ["io.k8s.apimachinery.pkg.api.resource.Quantity"] = "string|number" }

-- The schemas of the captured documents: name → schema, and the version
-- of the server they came from.
local function captured_schemas()
  local openapi = require "kubelua.sim.openapi"
  local schemas, version = {}, nil
  for _, path in ipairs(sorted_keys(openapi.captured_index())) do
    local text = openapi.captured(path)
    local doc = text and json.decode(text)
    local comp = doc and is_object(doc.components) and doc.components.schemas
    if is_object(comp) then
      version = version or (doc.info and doc.info.version)
      for name, s in pairs(comp) do schemas[name] = s end
    end
  end
  return schemas, version
end

-- The files of the built-in kinds: { ["k8s.core.v1.lua"] = text, ... },
-- one per group version of the captured server's schemas.
function _M.builtin()
  local schemas, version = captured_schemas()
  local files = {} -- file name → { class → text }
  local function add(class, text)
    local name = class:match("^(.+)%.[^.]+$") .. ".lua"
    files[name] = files[name] or {}
    files[name][class] = text
  end
  local cx = { ref = function(name) return _M.class_name(name) end }
  function cx.emit(class, s) add(class, class_text(class, s, cx)) end
  for _, name in ipairs(sorted_keys(schemas)) do
    local s, class = schemas[name], _M.class_name(name)
    if ALIASES[name] or not (is_object(s.properties) and next(s.properties) ~= nil) then
      local out = {}
      doc_lines(out, s.description)
      local t = ALIASES[name] or type_of(s, class, cx)
      out[#out + 1] = "---@alias " .. class .. " " .. t
      add(class, concat(out, "\n") .. "\n")
    else
      local gvks = json.is_array(s["x-kubernetes-group-version-kind"])
        and s["x-kubernetes-group-version-kind"] or {}
      local fixed
      if #gvks == 1 and is_object(s.properties.kind) then
        local g = gvks[1]
        fixed = { apiVersion = format('"%s"', g.group == "" and g.version
          or g.group .. "/" .. g.version), kind = format('"%s"', g.kind) }
      end
      add(class, class_text(class, s, cx, fixed))
    end
  end
  local out = {}
  for name, classes in pairs(files) do
    out[name] = file_text(format("Kubernetes %s: %s, from the API server's OpenAPI v3.",
      tostring(version), name:sub(1, -5)), classes)
  end
  return out
end

-- Custom resources ---------------------------------------------------------

local CRD_API = "apiextensions.k8s.io/v1"

-- The file of one CustomResourceDefinition (decoded): its name and text,
-- or raises "what is wrong".
local function crd_file(crd)
  local md = is_object(crd.metadata) and crd.metadata or {}
  local name = type(md.name) == "string" and md.name or "(no name)"
  local function fail(fmt, ...)
    error(format("CustomResourceDefinition %s: " .. fmt, name, ...), 0)
  end
  local spec = is_object(crd.spec) and crd.spec or fail("spec is missing")
  local names = is_object(spec.names) and spec.names or fail("spec.names is missing")
  for _, f in ipairs({ { spec, "group" }, { names, "kind" }, { names, "plural" } }) do
    if type(f[1][f[2]]) ~= "string" or f[1][f[2]] == "" then
      fail("spec.%s%s is missing", f[1] == names and "names." or "", f[2])
    end
  end
  if not (json.is_array(spec.versions) and #spec.versions > 0) then
    fail("spec.versions is missing")
  end
  local classes = {}
  for i, v in ipairs(spec.versions) do
    if not is_object(v) or type(v.name) ~= "string" then
      fail("spec.versions[%d].name is missing", i - 1)
    end
    local schema = is_object(v.schema) and v.schema.openAPIV3Schema
    if not is_object(schema) then fail("version %s has no schema.openAPIV3Schema", v.name) end
    local class = format("%s.%s.%s", spec.group, v.name, names.kind)
    local cx = {}
    function cx.ref(ref, at) error(format("%s: $ref %s is not allowed here", at, ref), 0) end
    function cx.emit(c, s) classes[c] = class_text(c, s, cx) end
    local ok, err = pcall(function()
      local s = { description = schema.description, properties = {}, required = schema.required,
        ["x-kubernetes-preserve-unknown-fields"] = schema["x-kubernetes-preserve-unknown-fields"] }
      for k, p in pairs(is_object(schema.properties) and schema.properties or {}) do
        s.properties[k] = p
      end
      s.properties.apiVersion = s.properties.apiVersion or {}
      s.properties.kind = s.properties.kind or {}
      s.properties.metadata = s.properties.metadata or {}
      classes[class] = class_text(class, s, cx, { apiVersion = format('"%s/%s"', spec.group,
        v.name), kind = format('"%s"', names.kind), metadata = "k8s.meta.v1.ObjectMeta" })
    end)
    if not ok then
      fail("version %s: %s", v.name, (err:gsub("^" .. class:gsub("%p", "%%%0") .. "%.?", "")))
    end
  end
  return names.plural .. "." .. spec.group .. ".lua",
    file_text(format("%s (%s), from its CustomResourceDefinition.", names.kind, spec.group),
      classes)
end

-- The documents of a file: YAML (several, "---" between them) or JSON.
local function read_docs(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local text = f:read("*a")
  f:close()
  if text:match("^%s*{") then
    local v, jerr = json.decode(text)
    if v == nil then return nil, path .. ": " .. tostring(jerr) end
    return { v }
  end
  local docs, yerr = require("kubelua.sim.yaml").decode_all(text)
  if not docs then return nil, path .. ": " .. yerr end
  if #docs == 0 then return nil, path .. ": no documents" end
  return docs
end

-- Adds to out (file name → text) the files of the custom resources that
-- docs define (the decoded documents of file `path`: each a
-- CustomResourceDefinition, or a List of them): out | nil, "path: what is
-- wrong".
function _M.add_crds(out, docs, path)
  local all = {}
  for _, d in ipairs(docs) do
    if is_object(d) and d.kind == "List" and json.is_array(d.items) then
      for _, item in ipairs(d.items) do all[#all + 1] = item end
    else
      all[#all + 1] = d
    end
  end
  for i, d in ipairs(all) do
    if not is_object(d) then
      return nil, format("%s: document %d is not an object", path, i)
    end
    if d.kind ~= "CustomResourceDefinition" or d.apiVersion ~= CRD_API then
      return nil, format("%s: document %d is %s %s, not a CustomResourceDefinition (%s)",
        path, i, tostring(d.apiVersion), tostring(d.kind), CRD_API)
    end
    local ok, name, text = pcall(crd_file, d)
    if not ok then return nil, path .. ": " .. name end
    out[name] = text
  end
  return out
end

-- The files of the custom resources defined in the files at paths (YAML
-- or JSON): { ["backups.example.com.lua"] = text } | nil, message.
function _M.crds(paths)
  local out = {}
  for _, path in ipairs(paths) do
    local docs, err = read_docs(path)
    if not docs then return nil, err end
    local ok, aerr = _M.add_crds(out, docs, path)
    if not ok then return nil, aerr end
  end
  return out
end

-- Writing ------------------------------------------------------------------

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Writes files (name → text) into dir, made when missing: the names
-- written, sorted | nil, message.
function _M.write(files, dir)
  if not os.execute("mkdir -p -- " .. quote(dir) .. " 2>/dev/null") then
    return nil, dir .. ": cannot make the directory"
  end
  local names = sorted_keys(files)
  for _, name in ipairs(names) do
    local path = dir .. "/" .. name
    local f, err = io.open(path, "wb")
    if not f then return nil, err end
    local ok, werr = f:write(files[name])
    f:close()
    if not ok then return nil, path .. ": " .. tostring(werr) end
  end
  return names
end

-- kubelua types [CRD.yaml...] [-o DIR]: the built-in kinds' files without
-- a file, else those of the custom resources in the files, written into
-- DIR (default ./types), each named on stdout. -> true | nil, message
-- (and "usage" when the arguments are wrong).
function _M.main(args)
  local dir, paths = "types", {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "-o" or a == "--output" then
      dir = args[i + 1]
      if not dir then return nil, "option " .. a .. " needs a directory", "usage" end
      i = i + 1
    elseif a:match("^%-%-output=") then
      dir = a:sub(10)
    elseif a:match("^%-") then
      return nil, "unknown option " .. a, "usage"
    else
      paths[#paths + 1] = a
    end
    i = i + 1
  end
  local files, err
  if #paths == 0 then
    files = _M.builtin()
  else
    files, err = _M.crds(paths)
    if not files then return nil, err end
  end
  local names, werr = _M.write(files, dir)
  if not names then return nil, werr end
  for _, name in ipairs(names) do io.stdout:write(dir, "/", name, "\n") end
  return true
end

return _M
