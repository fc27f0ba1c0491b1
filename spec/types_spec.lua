-- kubelua.types and `kubelua types`: the LuaLS annotation files of the
-- built-in kinds (committed in types/, which must match what the binary
-- writes) and of custom resources, checked line by line with a small
-- parser of the annotations they use (lua-language-server is not packaged
-- in Debian), every type they name being defined.
local support = require "spec.support"
local types = require "kubelua.types"

local quote = require("spec.integration.sim_helper").quote

-- The annotations of a file: { classes = { name = { fields } },
-- aliases = { name = type }, refs = { type names used } }; raises with
-- the line for anything else.
local TYPE_WORDS = { any = true, string = true, integer = true, number = true, boolean = true,
                     table = true }

local function parse_type(t, refs, where)
  local pos = 1
  local union
  local function fail(what) error(where .. ": " .. what .. " in type " .. t, 0) end
  local function primary()
    local c = t:sub(pos, pos)
    if c == '"' then
      local e = t:find('"', pos + 1, true) or fail("an unterminated literal")
      pos = e + 1
    elseif c == "(" then
      pos = pos + 1
      union()
      if t:sub(pos, pos) ~= ")" then fail("a missing )") end
      pos = pos + 1
    else
      local name = t:match("^[%a_][%w_.%-]*", pos) or fail("no type at " .. pos)
      pos = pos + #name
      if name == "table" and t:sub(pos, pos) == "<" then
        pos = pos + 1
        union()
        if t:sub(pos, pos + 1) ~= ", " then fail("a table without ', '") end
        pos = pos + 2
        union()
        if t:sub(pos, pos) ~= ">" then fail("a missing >") end
        pos = pos + 1
      elseif not TYPE_WORDS[name] then
        refs[#refs + 1] = { name = name, where = where }
      end
    end
    while t:sub(pos, pos + 1) == "[]" do pos = pos + 2 end
  end
  function union()
    primary()
    while t:sub(pos, pos) == "|" do
      pos = pos + 1
      primary()
    end
  end
  union()
  if t:sub(pos, pos) == "?" then pos = pos + 1 end
  if pos ~= #t + 1 then fail("trailing text at " .. pos) end
end

-- Raises msg (no position: the parser's messages are exact) unless ok.
local function need(ok, msg)
  if not ok then error(msg, 0) end
end

local function parse(text, name, into)
  into = into or { classes = {}, aliases = {}, refs = {} }
  local class
  local n = 0
  for line in text:gmatch("([^\n]*)\n") do
    n = n + 1
    local where = name .. ":" .. n
    local c = line:match("^%-%-%-@class ([%w_.%-]+)$")
    local aname, atype = line:match("^%-%-%-@alias ([%w_.%-]+) (.+)$")
    local fname, rest = line:match("^%-%-%-@field (%S+) (.+)$")
    local ftype, desc = (rest or ""):match("^(.-) # (.+)$")
    ftype = ftype or rest
    if n == 1 then
      need(line == "---@meta", where .. ": not ---@meta")
    elseif c then
      need(not into.classes[c], where .. ": class " .. c .. " is defined twice")
      class = {}
      into.classes[c] = class
    elseif aname then
      parse_type(atype, into.refs, where)
      into.aliases[aname] = atype
      class = nil
    elseif fname then
      need(class, where .. ": a field outside a class")
      need(fname:match("^[%a_][%w_]*%??$") or fname:match('^%[".+"%]%??$')
        or fname == "[string]", where .. ": bad field name " .. fname)
      need(desc == nil or desc:match("^%S"), where .. ": bad description")
      parse_type(ftype, into.refs, where)
      class[fname] = ftype
    elseif line == "" then
      class = nil
    else
      need(not line:match("^%-%-%-@"), where .. ": unknown annotation: " .. line)
      need(line == "---" or line:match("^%-%-%- ") or line:match("^%-%- "),
        where .. ": not an annotation: " .. line)
    end
  end
  return into
end

local function undefined(p)
  local missing = {}
  for _, r in ipairs(p.refs) do
    if not p.classes[r.name] and not p.aliases[r.name] then
      missing[#missing + 1] = r.where .. ": " .. r.name
    end
  end
  return missing
end

describe("the annotation check", function()
  it("refuses a bad type, a stray field and names an undefined type", function()
    local function check(text) return select(2, pcall(parse, text, "f")) end
    assert.equal("f:3: a table without ', ' in type table<string>",
      check("---@meta\n---@class a\n---@field x table<string>\n"))
    assert.equal("f:2: a field outside a class", check("---@meta\n---@field x string\n"))
    assert.equal("f:2: unknown annotation: ---@clas a", check("---@meta\n---@clas a\n"))
    assert.same({ "f:3: b" }, undefined(parse("---@meta\n---@class a\n---@field x b[]\n", "f")))
  end)
end)

describe("kubelua.types", function()
  describe("class_name", function()
    it("drops the Go package path of a schema name", function()
      assert.same({ "k8s.core.v1.Pod", "k8s.apps.v1.Deployment", "k8s.meta.v1.ObjectMeta",
        "k8s.resource.Quantity", "k8s.intstr.IntOrString", "k8s.runtime.RawExtension",
        "k8s.apiextensions.v1.CustomResourceDefinition", "com.example.Thing" }, {
        types.class_name("io.k8s.api.core.v1.Pod"),
        types.class_name("io.k8s.api.apps.v1.Deployment"),
        types.class_name("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
        types.class_name("io.k8s.apimachinery.pkg.api.resource.Quantity"),
        types.class_name("io.k8s.apimachinery.pkg.util.intstr.IntOrString"),
        types.class_name("io.k8s.apimachinery.pkg.runtime.RawExtension"),
        types.class_name(
          "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"),
        types.class_name("com.example.Thing") })
    end)
  end)

  describe("builtin", function()
    local files = types.builtin()
    local parsed = { classes = {}, aliases = {}, refs = {} }
    for _, name in ipairs(support.sorted_keys(files)) do parse(files[name], name, parsed) end

    it("writes one file per group version", function()
      assert.same({ "k8s.admissionregistration.v1.lua", "k8s.apiextensions.v1.lua",
        "k8s.apps.v1.lua", "k8s.authentication.v1.lua", "k8s.authorization.v1.lua",
        "k8s.autoscaling.v1.lua", "k8s.autoscaling.v2.lua", "k8s.batch.v1.lua",
        "k8s.certificates.v1.lua", "k8s.coordination.v1.lua", "k8s.core.v1.lua",
        "k8s.discovery.v1.lua", "k8s.events.v1.lua", "k8s.flowcontrol.v1beta2.lua",
        "k8s.flowcontrol.v1beta3.lua", "k8s.intstr.lua", "k8s.meta.v1.lua",
        "k8s.networking.v1.lua", "k8s.node.v1.lua", "k8s.policy.v1.lua", "k8s.rbac.v1.lua",
        "k8s.resource.lua", "k8s.runtime.lua", "k8s.scheduling.v1.lua", "k8s.storage.v1.lua",
        "k8s.storage.v1beta1.lua" }, support.sorted_keys(files))
    end)

    it("types a Pod's fields: arrays, required fields, enums, kinds", function()
      local pod, spec = parsed.classes["k8s.core.v1.Pod"], parsed.classes["k8s.core.v1.PodSpec"]
      assert.same({ ["apiVersion?"] = '"v1"', ["kind?"] = '"Pod"',
        metadata = "k8s.meta.v1.ObjectMeta", ["spec?"] = "k8s.core.v1.PodSpec",
        ["status?"] = "k8s.core.v1.PodStatus" }, pod)
      assert.equal("k8s.core.v1.Container[]", spec.containers)
      assert.is_nil(spec["containers?"])
      assert.equal("table<string, string>", spec["nodeSelector?"])
      local c = parsed.classes["k8s.core.v1.Container"]
      assert.equal("string", c.name)
      assert.equal("string", c["image?"])
      assert.equal('"Always"|"IfNotPresent"|"Never"', c["imagePullPolicy?"])
      assert.equal("table<string, k8s.resource.Quantity>",
        parsed.classes["k8s.core.v1.ResourceRequirements"]["limits?"])
      assert.equal("k8s.intstr.IntOrString", parsed.classes["k8s.core.v1.HTTPGetAction"].port)
    end)

    it("writes a field's description after it, a class's above it", function()
      local text = files["k8s.core.v1.lua"]
      assert.matches("\n---@field containers k8s.core.v1.Container[] # List of containers"
        .. " belonging to the pod. Containers cannot currently be added or removed. There must"
        .. " be at least one container in a Pod. Cannot be updated.\n", text, 1, true)
      assert.matches("\n--- Pod is a collection of containers that can run on a host. This"
        .. " resource is created by clients and scheduled onto hosts.\n---@class"
        .. " k8s.core.v1.Pod\n", text, 1, true)
    end)

    it("makes scalars of quantities, int-or-string and times", function()
      assert.same({ ["k8s.resource.Quantity"] = "string|number",
        ["k8s.intstr.IntOrString"] = "integer|string", ["k8s.meta.v1.Time"] = "string",
        ["k8s.meta.v1.MicroTime"] = "string", ["k8s.meta.v1.FieldsV1"] = "table<string, any>",
        ["k8s.runtime.RawExtension"] = "table<string, any>",
        ["k8s.meta.v1.Patch"] = "table<string, any>",
        ["k8s.apiextensions.v1.JSON"] = "any",
        ["k8s.apiextensions.v1.JSONSchemaPropsOrArray"] = "any",
        ["k8s.apiextensions.v1.JSONSchemaPropsOrBool"] = "any",
        ["k8s.apiextensions.v1.JSONSchemaPropsOrStringArray"] = "any",
        ["k8s.apiextensions.v1.CustomResourceSubresourceStatus"] = "table<string, any>" },
        parsed.aliases)
    end)

    it("quotes the fields that are not names", function()
      local props = parsed.classes["k8s.apiextensions.v1.JSONSchemaProps"]
      assert.equal("string", props['["$ref"]?'])
      assert.equal("boolean", props['["x-kubernetes-preserve-unknown-fields"]?'])
      assert.equal("k8s.core.v1.LocalVolumeSource",
        parsed.classes["k8s.core.v1.PersistentVolumeSpec"]['["local"]?'])
    end)

    it("are annotations only, each type they name defined", function()
      assert.is_true(#parsed.refs > 700, #parsed.refs .. " references")
      assert.same({}, undefined(parsed))
    end)

    it("are what types/ holds (scripts/types writes it; types/kubelua/ is the API's)", function()
      local listed = io.popen("ls types | grep '^k8s[.]'")
      local have = {}
      for name in listed:lines() do have[#have + 1] = name end
      listed:close()
      assert.same(support.sorted_keys(files), have)
      for _, name in ipairs(have) do
        assert(files[name] == support.read("types/" .. name),
          "types/" .. name .. " is stale: run scripts/types")
      end
    end)
  end)

  describe("crds", function()
    local CRD = [[
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: backups.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {"plural": "backups", "singular": "backup", "kind": "Backup"}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        description: A Backup of a volume.
        type: object
        required: ["spec"]
        properties:
          spec:
            type: object
            required: ["source"]
            properties:
              source: {"type": "string", "description": "The claim to copy."}
              schedule: {"type": "string"}
              keep: {"x-kubernetes-int-or-string": true}
              mode: {"type": "string", "enum": ["Full", "Incremental"]}
              labels: {"type": "object", "additionalProperties": {"type": "string"}}
              hooks:
                type: array
                items:
                  type: object
                  properties:
                    command: {"type": "array", "items": {"type": "string"}}
                    end: {"type": "integer"}
              extra: {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
              options:
                type: object
                x-kubernetes-preserve-unknown-fields: true
                properties:
                  compress: {"type": "boolean"}
          status:
            type: object
            properties:
              size: {"type": "number"}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema: {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
]]

    it("writes a class per kind and nested object, by path", function()
      local path = support.tempfile(CRD, ".yaml")
      local files, err = types.crds({ path })
      os.remove(path)
      assert.is_nil(err)
      assert.same({ "backups.example.com.lua" }, support.sorted_keys(files))
      assert.equal([[
---@meta
-- Backup (example.com), from its CustomResourceDefinition.
-- Generated by `kubelua types`: do not edit.

--- A Backup of a volume.
---@class example.com.v1.Backup
---@field apiVersion? "example.com/v1"
---@field kind? "Backup"
---@field metadata k8s.meta.v1.ObjectMeta
---@field spec example.com.v1.Backup.spec
---@field status? example.com.v1.Backup.status

---@class example.com.v1.Backup.spec
---@field extra? table<string, any>
---@field hooks? example.com.v1.Backup.spec.hooks[]
---@field keep? integer|string
---@field labels? table<string, string>
---@field mode? "Full"|"Incremental"
---@field options? example.com.v1.Backup.spec.options
---@field schedule? string
---@field source string # The claim to copy.

---@class example.com.v1.Backup.spec.hooks
---@field command? string[]
---@field ["end"]? integer

---@class example.com.v1.Backup.spec.options
---@field compress? boolean
---@field [string] any

---@class example.com.v1.Backup.status
---@field size? number

---@class example.com.v1beta1.Backup
---@field apiVersion? "example.com/v1beta1"
---@field kind? "Backup"
---@field metadata k8s.meta.v1.ObjectMeta
---@field [string] any
]], files["backups.example.com.lua"])
      local parsed = parse(files["backups.example.com.lua"], "backups.example.com.lua")
      for name, text in pairs(types.builtin()) do parse(text, name, parsed) end
      assert.same({}, undefined(parsed))
    end)

    local function crds_error(text, suffix)
      local path = support.tempfile(text, suffix or ".yaml")
      local files, err = types.crds({ path })
      os.remove(path)
      assert.is_nil(files)
      return (err:gsub(path:gsub("%p", "%%%0"), "FILE"))
    end

    it("names the file and what is wrong with it", function()
      assert.equal("FILE: document 2 is v1 ConfigMap, not a CustomResourceDefinition"
        .. " (apiextensions.k8s.io/v1)",
        crds_error(CRD .. "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {\"name\": \"x\"}\n"))
      assert.equal("FILE: document 1 is apiextensions.k8s.io/v1beta1 CustomResourceDefinition,"
        .. " not a CustomResourceDefinition (apiextensions.k8s.io/v1)",
        crds_error((CRD:gsub("k8s.io/v1\n", "k8s.io/v1beta1\n", 1))))
      assert.equal("FILE: CustomResourceDefinition backups.example.com: spec.names.kind is"
        .. " missing", crds_error((CRD:gsub(', "kind": "Backup"', ""))))
      assert.equal("FILE: CustomResourceDefinition backups.example.com: version v1:"
        .. " spec.schedule: unknown type strin",
        crds_error((CRD:gsub('schedule: {"type": "string"}', 'schedule: {"type": "strin"}'))))
      assert.equal("FILE: CustomResourceDefinition backups.example.com: version v1beta1 has no"
        .. " schema.openAPIV3Schema",
        crds_error((CRD:gsub('\n      openAPIV3Schema: {"type": "object", [^\n]+', ""))))
      assert.equal("FILE: yaml: line 2: bad indentation",
        crds_error("a: b\n  - nope\n"))
      assert.equal("FILE: no documents", crds_error("# nothing\n"))
      assert.equal("FILE: document 1 is nil nil, not a CustomResourceDefinition"
        .. " (apiextensions.k8s.io/v1)", crds_error('{"items": []}', ".json"))
    end)

    it("reads JSON and Lists", function()
      local json = require "kubelua.json"
      local yaml = require "kubelua.sim.yaml"
      local list = json.encode { apiVersion = "v1", kind = "List",
        items = json.array { assert(yaml.decode(CRD)) } }
      local path = support.tempfile(list, ".json")
      local files = types.crds({ path })
      os.remove(path)
      assert.same({ "backups.example.com.lua" }, support.sorted_keys(files))
    end)
  end)
end)

describe("kubelua types", function()
  local function run(args)
    return support.sh(support.kubelua .. " types " .. args)
  end

  it("writes the built-in kinds' files without a CRD, each named on stdout", function()
    local dir = os.tmpname()
    os.remove(dir)
    local status, out = run("-o " .. quote(dir .. "/t"))
    local same = support.read(dir .. "/t/k8s.core.v1.lua") == support.read("types/k8s.core.v1.lua")
    os.execute("rm -rf " .. quote(dir))
    assert.equal(0, status, out)
    assert.matches("^" .. (dir .. "/t/k8s.admissionregistration.v1.lua\n"):gsub("%p", "%%%0"), out)
    assert.equal(26, select(2, out:gsub("\n", "")))
    assert.is_true(same)
  end)

  it("writes a CRD's file into -o DIR", function()
    local dir = os.tmpname()
    os.remove(dir)
    local status, out = run("examples/greeting-operator/deploy/01-crd.yaml --output=" .. quote(dir))
    local text = support.read(dir .. "/greetings.example.kubelua.io.lua")
    os.execute("rm -rf " .. quote(dir))
    assert.equal(0, status, out)
    assert.equal(dir .. "/greetings.example.kubelua.io.lua\n", out)
    assert.matches("\n---@class example.kubelua.io.v1.Greeting\n", text, 1, true)
    assert.matches("\n---@field message? string\n", text, 1, true)
  end)

  it("fails naming the file that is not a CRD, writing nothing", function()
    local dir = os.tmpname()
    os.remove(dir)
    local status, out = run("examples/greeting-operator/deploy/02-rbac.yaml -o " .. quote(dir))
    local written = io.open(dir)
    assert.equal(1, status)
    assert.is_nil(written)
    assert.equal("kubelua types: examples/greeting-operator/deploy/02-rbac.yaml: document 1 is"
      .. " rbac.authorization.k8s.io/v1 ClusterRole, not a CustomResourceDefinition"
      .. " (apiextensions.k8s.io/v1)\n", out)
  end)

  it("refuses unknown options with its usage", function()
    local status, out = run("--out x")
    assert.equal(2, status)
    assert.matches("^kubelua types: unknown option %-%-out\nusage: kubelua types ", out)
    status, out = run("-o")
    assert.equal(2, status)
    assert.matches("^kubelua types: option %-o needs a directory\nusage: ", out)
  end)

  it("answers --help with its usage on stdout", function()
    local status, out = run("--help")
    assert.equal(0, status)
    assert.matches("^usage: kubelua types %[CRD%.yaml%.%.%.%] %[%-o DIR%]\n", out)
  end)
end)
