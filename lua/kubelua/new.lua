-- kubelua.new: `kubelua new NAME [--kind KIND --group G --version V]`, a
-- controller project in one command, that `kubelua test` passes at once:
--
--   controller.lua           a kube.controller reconciling ctx.object
--   spec/controller_spec.lua the controller against the simulator
--                            (kubelua.testing)
--   kustomization.yaml       `kubectl apply -k .`: the runtime's base with
--   deploy/base/             controller.lua in its ConfigMap, as the
--   deploy/rbac.yaml         examples' overlays are (deploy/base is the
--   deploy/crd.yaml          binary's own copy of the repository's), RBAC
--                            for the watched kind, the CRD with --kind
--   types/, .luarc.json      the editor types (kubelua.types) of the
--                            built-in kinds and of the CRD, and the
--                            lua-language-server settings that read them
--   README.md
--
-- Without --kind the controller watches ConfigMaps; with it, the custom
-- resource (Namespaced, a status subresource, spec.message as an example
-- field). NAME must be a new or empty directory: nothing is overwritten.

local embed = require "kubelua.embed"
local types = require "kubelua.types"
local util = require "kubelua.sim.util"
local yaml = require "kubelua.sim.yaml"

local format, concat = string.format, table.concat

local _M = {}

-- Templates: {{WORD}} is replaced by vars.WORD; a line holding only
-- {{?kind}} or {{?nokind}} starts a part kept with or without --kind,
-- {{/}} ends it.
local function render(template, vars)
  local out, keep = {}, true
  for line in template:gmatch("([^\n]*)\n") do
    local cond = line:match("^%s*{{%?(%a+)}}%s*$")
    if cond then
      keep = (cond == "kind") == (vars.KIND ~= nil)
    elseif line:match("^%s*{{/}}%s*$") then
      keep = true
    elseif keep then
      out[#out + 1] = (line:gsub("{{(%u+)}}", function(k)
        return assert(vars[k], "new: no value for " .. k)
      end))
    end
  end
  return concat(out, "\n") .. "\n"
end

local CONTROLLER = [=[
-- {{NAME}}: a kubelua controller.
{{?kind}}
-- It reconciles each {{KIND}} ({{PLURAL}}.{{GROUP}}, deploy/crd.yaml): it
-- reports status.observedGeneration and a Ready condition. Act on the
-- object's spec where the comment says so.
{{/}}
{{?nokind}}
-- It marks each ConfigMap with the annotation {{ANNOTATION}}; put your own
-- logic in reconcile.
{{/}}
--
--   kubelua run --sim controller.lua   against an in-process API simulator
--   kubelua run controller.lua         against your kubeconfig's cluster
--   kubelua test                       the specs in spec/
local kube = require "kubelua"

{{?kind}}
local GROUP_VERSION = "{{GROUP}}/{{VERSION}}"

kube.controller{
  name = "{{NAME}}",
  watches = { GROUP_VERSION, "{{KIND}}" },
  workers = 2,
  reconcile = function(_, ctx)
    ---@type {{CLASS}}?
    local obj = ctx.object -- from the cache; nil once it is gone
    if not obj or kube.is_being_deleted(obj) then return end
    local generation = obj.metadata.generation
    obj.status = obj.status or {}
    if obj.status.observedGeneration == generation then return end -- done already
    -- act on obj.spec here
    obj.status.observedGeneration = generation
    kube.set_condition(obj, { type = "Ready", status = "True", reason = "Reconciled",
                              message = "generation " .. tostring(generation),
                              observedGeneration = generation })
    local _, err = kube.patch(obj, { status = obj.status }, "merge", { subresource = "status" })
    if err and not kube.is_not_found(err) then return nil, err end -- retried with backoff
    ctx.log.info("reconciled", { generation = generation })
  end,
}
{{/}}
{{?nokind}}
local ANNOTATION = "{{ANNOTATION}}"

kube.controller{
  name = "{{NAME}}",
  watches = { "v1", "ConfigMap" },
  workers = 2,
  reconcile = function(_, ctx)
    ---@type k8s.core.v1.ConfigMap?
    local cm = ctx.object -- from the cache; nil once it is gone
    if not cm or kube.is_being_deleted(cm) then return end
    local annotations = cm.metadata.annotations or {}
    if annotations[ANNOTATION] == "true" then return end -- done already
    local _, err = kube.patch(cm, { metadata = { annotations = { [ANNOTATION] = "true" } } },
      "merge")
    if err and not kube.is_not_found(err) then return nil, err end -- retried with backoff
    ctx.log.info("marked")
  end,
}
{{/}}
]=]

local SPEC = [=[
-- {{NAME}}'s controller against the API simulator: `kubelua test`.
local testing = require "kubelua.testing"
{{?kind}}
local util = require "kubelua.sim.util"
local yaml = require "kubelua.sim.yaml"

local GROUP_VERSION = "{{GROUP}}/{{VERSION}}"
{{/}}

describe("{{NAME}}", function()
  local t
  before_each(function()
    t = testing.start{ namespaces = { "test" } }
{{?kind}}
    local f = assert(io.open("deploy/crd.yaml"))
    t:create(assert(yaml.decode(f:read("*a"))))
    f:close()
    -- a new CRD's resource is served a moment after it is created
    t:eventually(function() return t:list(GROUP_VERSION, "{{PLURAL}}", "test") end)
{{/}}
    t:load("controller.lua")
  end)
  after_each(function()
    t:settle()
    t:stop()
  end)

{{?kind}}
  it("reports a {{KIND}} Ready at its generation", function()
    t:create{ apiVersion = GROUP_VERSION, kind = "{{KIND}}",
              metadata = { name = "one", namespace = "test" }, spec = { message = "hello" } }
    local obj = t:eventually(function()
      local o = t:get(GROUP_VERSION, "{{PLURAL}}", "test", "one")
      return o and o.status and o.status.observedGeneration == 1 and o
    end)
    local c = obj.status.conditions[1]
    assert.same({ "Ready", "True", "Reconciled", "generation 1" },
                { c.type, c.status, c.reason, c.message })
  end)
{{/}}
{{?nokind}}
  it("marks a ConfigMap", function()
    t:create{ apiVersion = "v1", kind = "ConfigMap",
              metadata = { name = "one", namespace = "test" }, data = { key = "value" } }
    local cm = t:eventually(function()
      local c = t:get("v1", "configmaps", "test", "one")
      return c and c.metadata.annotations and c
    end)
    assert.same({ ["{{ANNOTATION}}"] = "true" }, cm.metadata.annotations)
  end)
{{/}}
end)
]=]

local CRD = [=[
# The {{KIND}} kind: spec.message is an example field; the controller
# reports status.observedGeneration and conditions.
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {{PLURAL}}.{{GROUP}}
spec:
  group: {{GROUP}}
  scope: Namespaced
  names:
    plural: {{PLURAL}}
    singular: {{SINGULAR}}
    kind: {{KIND}}
    listKind: {{KIND}}List
  versions:
  - name: {{VERSION}}
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What the {{KIND}} asks for.
            properties:
              message:
                type: string
                description: An example field.
          status:
            type: object
            description: What the controller observed and did.
            properties:
              observedGeneration:
                type: integer
                description: The generation the status is about.
              conditions:
                type: array
                items:
                  type: object
                  required: ["type", "status"]
                  properties:
                    type:
                      type: string
                    status:
                      type: string
                      enum: ["True", "False", "Unknown"]
                    reason:
                      type: string
                    message:
                      type: string
                    lastTransitionTime:
                      type: string
                      format: date-time
                    observedGeneration:
                      type: integer
]=]

local RBAC = [=[
# What the controller may do, bound to the runtime's ServiceAccount
# (deploy/base): its Lease and Events are the base's.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{NAME}}
rules:
{{?kind}}
- apiGroups: ["{{GROUP}}"]
  resources: ["{{PLURAL}}"]
  verbs: ["get", "list", "watch", "update", "patch"]
- apiGroups: ["{{GROUP}}"]
  resources: ["{{PLURAL}}/status"]
  verbs: ["get", "update", "patch"]
{{/}}
{{?nokind}}
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "update", "patch"]
{{/}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{NAME}}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{NAME}}
subjects:
- kind: ServiceAccount
  name: kubelua
  namespace: kubelua-system
]=]

local KUSTOMIZATION = [=[
# {{NAME}} in a cluster: kubectl apply -k .
# The kubelua runtime (deploy/base) with controller.lua in its ConfigMap (a
# stable name: editing controller.lua and applying again reloads it in place).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- deploy/base
{{?kind}}
- deploy/crd.yaml
{{/}}
- deploy/rbac.yaml
configMapGenerator:
- name: kubelua-controller
  namespace: kubelua-system
  files:
  - controller.lua
generatorOptions:
  disableNameSuffixHash: true
]=]

local LUARC = [=[
{
  "runtime.version": "LuaJIT",
  "workspace.library": ["types"],
  "workspace.checkThirdParty": false,
  "diagnostics.globals": ["describe", "it", "before_each", "after_each", "setup", "teardown",
    "finally", "pending", "spy", "stub", "mock"]
}
]=]

local README = [=[
# {{NAME}}

A Kubernetes controller written for kubelua: `controller.lua`.

    kubelua test                        # spec/, against the API simulator
    kubelua run --sim controller.lua    # run it against an in-process simulator
    kubelua run controller.lua          # against your kubeconfig's cluster
{{?kind}}
                                        # (kubectl apply -f deploy/crd.yaml first)
{{/}}
    kubectl apply -k .                  # in the cluster: the kubelua image runs
                                        # controller.lua from a ConfigMap

`types/` holds the editor types of the built-in kinds (`k8s.core.v1.Pod`,
...), and `.luarc.json` points lua-language-server at them, so that an
editor completes object fields and flags misspelt ones.
{{?kind}}

`types/{{PLURAL}}.{{GROUP}}.lua` holds those of {{KIND}} (`{{CLASS}}`);
after a change of the CRD, write it again with
`kubelua types deploy/crd.yaml -o types`.
{{/}}
]=]

local function plural_of(lower)
  if lower:match("[sxz]$") or lower:match("[cs]h$") then return lower .. "es" end
  if lower:match("[^aeiou]y$") then return lower:sub(1, -2) .. "ies" end
  return lower .. "s"
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Whether dir is missing or an empty directory; nil, reason when it is
-- neither.
local function usable(dir)
  local q = quote(dir)
  local p = io.popen("if [ ! -e " .. q .. " ]; then echo absent; elif [ -d " .. q .. " ] && [ -w "
    .. q .. " ]; then ls -A -- " .. q .. " | wc -l; else echo unwritable; fi")
  local out = p:read("*a"):match("^%s*(.-)%s*$")
  p:close()
  if out == "absent" or out == "0" then return true end
  if out == "unwritable" then return nil, "not a directory that can be written to" end
  return nil, "the directory exists and is not empty"
end

local USAGE = "usage"

-- The options of `kubelua new`: { dir, name, kind, group, version } | nil,
-- message, "usage" when the arguments are wrong.
local function parse(args)
  local o = {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local opt, inline = a:match("^(%-%-%a+)=(.*)$")
    opt = opt or a
    if opt == "--kind" or opt == "--group" or opt == "--version" then
      local v = inline or args[i + 1]
      if not v then return nil, "option " .. opt .. " needs a value", USAGE end
      if not inline then i = i + 1 end
      o[opt:sub(3)] = v
    elseif a:match("^%-") then
      return nil, "unknown option " .. a, USAGE
    elseif o.dir then
      return nil, "new takes one project name, got " .. o.dir .. " and " .. a, USAGE
    else
      o.dir = a
    end
    i = i + 1
  end
  if not o.dir then return nil, "new needs a project name", USAGE end
  o.name = o.dir:gsub("/+$", ""):match("([^/]+)$") or ""
  if not (o.name:match("^[a-z0-9]$") or o.name:match("^[a-z0-9][-a-z0-9]*[a-z0-9]$"))
    or #o.name > 63 then
    return nil, format("the project name %q must be a DNS-1123 label: lower case letters,"
      .. " digits and '-', starting and ending with a letter or digit, at most 63 of them",
      o.name)
  end
  if o.kind and o.kind:find("/", 1, true) then -- GROUP/VERSION/KIND
    local g, v, k = o.kind:match("^([^/]+)/([^/]+)/([^/]+)$")
    if not g or o.group or o.version then
      return nil, format("--kind %q: give KIND, or GROUP/VERSION/KIND without --group and"
        .. " --version", o.kind), USAGE
    end
    o.group, o.version, o.kind = g, v, k
  end
  if not o.kind and (o.group or o.version) then
    return nil, "--group and --version need --kind", USAGE
  end
  if o.kind then
    o.group, o.version = o.group or "example.com", o.version or "v1alpha1"
    if not o.kind:match("^%u[%w]*$") or #o.kind > 63 then
      return nil, format("--kind %q must be a CamelCase kind: a capital letter, then letters"
        .. " and digits", o.kind)
    end
    if util.check_subdomain(o.group) or not o.group:find(".", 1, true) then
      return nil, format("--group %q must be a DNS subdomain with a dot, as a"
        .. " CustomResourceDefinition's group is (example.com)", o.group)
    end
    if not (o.version:match("^v[1-9]%d*$") or o.version:match("^v[1-9]%d*alpha[1-9]%d*$")
      or o.version:match("^v[1-9]%d*beta[1-9]%d*$")) then
      return nil, format("--version %q must be a Kubernetes API version: v1, v1beta1,"
        .. " v1alpha1, ...", o.version)
    end
  end
  return o
end

-- The project's files: relative path → text.
function _M.files(o)
  local vars = { NAME = o.name, ANNOTATION = o.name .. ".kubelua.io/reconciled" }
  local files = {}
  if o.kind then
    local singular = o.kind:lower()
    vars.KIND, vars.GROUP, vars.VERSION = o.kind, o.group, o.version
    vars.SINGULAR, vars.PLURAL = singular, plural_of(singular)
    vars.CLASS = format("%s.%s.%s", o.group, o.version, o.kind)
    files["deploy/crd.yaml"] = render(CRD, vars)
  end
  files["controller.lua"] = render(CONTROLLER, vars)
  files["spec/controller_spec.lua"] = render(SPEC, vars)
  files["deploy/rbac.yaml"] = render(RBAC, vars)
  files["kustomization.yaml"] = render(KUSTOMIZATION, vars)
  files[".luarc.json"] = LUARC
  files["README.md"] = render(README, vars)
  for _, name in ipairs(embed.names("kl_deploy_base")) do
    files["deploy/base/" .. name] = embed.read("kl_deploy_base", name)
  end
  local typed = types.builtin()
  if o.kind then
    local docs = assert(yaml.decode_all(files["deploy/crd.yaml"]))
    assert(types.add_crds(typed, docs, "deploy/crd.yaml"))
  end
  for name, text in pairs(typed) do files["types/" .. name] = text end
  return files
end

-- kubelua new NAME [options] -> true | nil, message[, "usage"].
function _M.main(args)
  local o, err, usage = parse(args)
  if not o then return nil, err, usage end
  local ok, why = usable(o.dir)
  if not ok then return nil, o.dir .. ": " .. why end
  local files = _M.files(o)
  local dirs = {} -- directory → { file name → text }
  for path, text in pairs(files) do
    local dir, name = path:match("^(.-)/?([^/]+)$")
    dir = dir == "" and o.dir or o.dir .. "/" .. dir
    dirs[dir] = dirs[dir] or {}
    dirs[dir][name] = text
  end
  for dir, set in pairs(dirs) do
    local written, werr = types.write(set, dir)
    if not written then return nil, werr end
  end
  io.stdout:write(format("wrote %s: cd %s && kubelua test\n", o.dir, o.dir))
  return true
end

return _M
