-- `kubelua new`: a project written into a clean temporary directory passes
-- its own `kubelua test` at once and runs with `kubelua run --sim`, with
-- and without a kind of its own; its deploy/base is the repository's; its
-- types are those of `kubelua types`; it never writes over a directory
-- with something in it, and names what is wrong with its arguments. (Its
-- manifests get manifests_spec's checks, as the examples' do.)
local support = require "spec.support"

local quote = require("spec.integration.sim_helper").quote

local function absolute(path)
  local p = io.popen("readlink -f " .. quote(path))
  local abs = p:read("*l")
  p:close()
  return abs
end

local kubelua = absolute(support.kubelua)

local function files_in(dir)
  local p = io.popen("cd " .. quote(dir) .. " && find . -type f | sed 's#^./##' | sort")
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

describe("kubelua new", function()
  local tmp
  before_each(function()
    tmp = os.tmpname()
    os.remove(tmp)
    assert(os.execute("mkdir " .. quote(tmp)))
  end)
  after_each(function()
    os.execute("rm -rf " .. quote(tmp))
  end)

  -- Runs a shell command in tmp with only PATH set: -> status, output.
  local function sh(cmd)
    return support.sh("cd " .. quote(tmp) .. " && env -i PATH=" .. quote(os.getenv("PATH"))
      .. " sh -c " .. quote(cmd))
  end

  local TYPES = {}
  -- the kinds' types, as the binary writes them (types/kubelua/ holds the API's own)
  for name in io.popen("ls types | grep '^k8s[.]'"):lines() do TYPES[#TYPES + 1] = "types/" .. name end

  local function with_types(list, extra)
    local all = {}
    for _, f in ipairs(list) do all[#all + 1] = f end
    for _, f in ipairs(TYPES) do all[#all + 1] = f end
    if extra then all[#all + 1] = extra end
    table.sort(all)
    return all
  end

  it("writes a ConfigMap controller whose spec passes at once", function()
    local status, out = sh(kubelua .. " new demo && cd demo && " .. kubelua .. " test")
    assert.equal(0, status, out)
    assert.matches("^wrote demo: cd demo && kubelua test\n", out)
    assert.matches("\n1 success / 0 failures / 0 errors / 0 pending", out)
    assert.matches("INFO  marked controller=demo key=test/one\n", out, 1, true)
    assert.same(with_types({ ".luarc.json", "README.md", "controller.lua",
      "deploy/base/deployment.yaml", "deploy/base/kustomization.yaml",
      "deploy/base/namespace.yaml", "deploy/base/rbac.yaml", "deploy/rbac.yaml",
      "kustomization.yaml", "spec/controller_spec.lua" }), files_in(tmp .. "/demo"))
    for _, f in ipairs({ "deployment.yaml", "kustomization.yaml", "namespace.yaml",
                         "rbac.yaml" }) do
      assert.equal(support.read("deploy/base/" .. f),
        support.read(tmp .. "/demo/deploy/base/" .. f), f)
    end
    for _, f in ipairs(TYPES) do
      assert(support.read(f) == support.read(tmp .. "/demo/" .. f), f .. " differs")
    end
    local controller = support.read(tmp .. "/demo/controller.lua")
    assert.matches('\n  watches = { "v1", "ConfigMap" },\n', controller, 1, true)
    assert.matches("\n    ---@type k8s.core.v1.ConfigMap?\n    local cm = ctx.object", controller,
      1, true)
    assert.matches('\n  resources: ["configmaps"]\n  verbs: ["get", "list", "watch", "update",'
      .. ' "patch"]\n', support.read(tmp .. "/demo/deploy/rbac.yaml"), 1, true)
    local luarc = require("kubelua.json").decode(support.read(tmp .. "/demo/.luarc.json"))
    assert.equal("LuaJIT", luarc["runtime.version"])
    assert.same({ "types" }, luarc["workspace.library"])
  end)

  it("writes the CRD, its types and a controller of the kind with --kind", function()
    local status, out = sh(kubelua .. " new ops --kind backup.example.com/v1/Backup && cd ops && "
      .. kubelua .. " test")
    assert.equal(0, status, out)
    assert.matches("\n1 success / 0 failures / 0 errors / 0 pending", out)
    assert.matches("INFO  reconciled controller=ops generation=1 key=test/one\n", out, 1, true)
    assert.same(with_types({ ".luarc.json", "README.md", "controller.lua",
      "deploy/base/deployment.yaml", "deploy/base/kustomization.yaml",
      "deploy/base/namespace.yaml", "deploy/base/rbac.yaml", "deploy/crd.yaml",
      "deploy/rbac.yaml", "kustomization.yaml", "spec/controller_spec.lua" },
      "types/backups.backup.example.com.lua"), files_in(tmp .. "/ops"))
    local _, typed = sh(kubelua .. " types ops/deploy/crd.yaml -o t && cat t/*")
    assert.equal(typed:gsub("^t/backups.backup.example.com.lua\n", ""),
      support.read(tmp .. "/ops/types/backups.backup.example.com.lua"))
    assert.matches("\n---@class backup.example.com.v1.Backup.spec\n---@field message? string #"
      .. " An example field.\n", typed, 1, true)
    assert.matches("\n    ---@type backup.example.com.v1.Backup?\n    local obj = ctx.object",
      support.read(tmp .. "/ops/controller.lua"), 1, true)
    local rbac = support.read(tmp .. "/ops/deploy/rbac.yaml")
    assert.matches('\n- apiGroups: ["backup.example.com"]\n  resources: ["backups/status"]\n', rbac,
      1, true)
  end)

  it("takes --kind with --group and --version, and defaults them", function()
    local status, out = sh(kubelua .. " new a --kind Policy --group ops.example.org --version"
      .. " v2beta1 && " .. kubelua .. " new b --kind=Box")
    assert.equal(0, status, out)
    assert.matches("\n  name: policies.ops.example.org\n", support.read(tmp .. "/a/deploy/crd.yaml"),
      1, true)
    assert.matches('\nlocal GROUP_VERSION = "ops.example.org/v2beta1"\n',
      support.read(tmp .. "/a/controller.lua"), 1, true)
    assert.matches("\n  name: boxes.example.com\n", support.read(tmp .. "/b/deploy/crd.yaml"), 1,
      true)
    assert.matches("\n  - name: v1alpha1\n", support.read(tmp .. "/b/deploy/crd.yaml"), 1, true)
  end)

  it("runs the project with kubelua run --sim", function()
    local status, out = sh(kubelua .. " new demo >/dev/null && cd demo && : >run.log && (" .. kubelua
      .. " run --sim controller.lua >run.log 2>&1 & pid=$!;"
      .. " i=0; until grep -q 'controller started' run.log; do i=$((i+1));"
      .. " [ $i -lt 600 ] && kill -0 $pid 2>/dev/null || break; sleep 0.1; done;"
      .. " kill -TERM $pid; wait $pid; echo \"exit: $?\"; cat run.log)")
    assert.equal(0, status, out)
    assert.matches("^exit: 0\n", out)
    assert.matches("INFO  controller started controller=demo workers=2\n", out, 1, true)
    assert.is_nil(out:find("ERROR", 1, true), out)
  end)

  it("writes into an empty directory but refuses one with something in it", function()
    local status, out = sh("mkdir empty full && touch full/.keep && " .. kubelua .. " new empty"
      .. " && " .. kubelua .. " new full")
    assert.equal(1, status)
    assert.equal("wrote empty: cd empty && kubelua test\n"
      .. "kubelua new: full: the directory exists and is not empty\n", out)
    assert.same({ ".keep" }, files_in(tmp .. "/full"))
    status, out = sh("touch file && " .. kubelua .. " new file")
    assert.equal(1, status)
    assert.equal("kubelua new: file: not a directory that can be written to\n", out)
  end)

  it("names what is wrong with its arguments", function()
    local cases = {
      { "Demo", 1, 'the project name "Demo" must be a DNS-1123 label: lower case letters,'
        .. " digits and '-', starting and ending with a letter or digit, at most 63 of them" },
      { "demo --kind backup", 1, '--kind "backup" must be a CamelCase kind: a capital letter,'
        .. " then letters and digits" },
      { "demo --kind Backup --group example", 1, '--group "example" must be a DNS subdomain'
        .. " with a dot, as a CustomResourceDefinition's group is (example.com)" },
      { "demo --kind Backup --version 1", 1, '--version "1" must be a Kubernetes API version:'
        .. " v1, v1beta1, v1alpha1, ..." },
      { "demo --kind a/b", 2, '--kind "a/b": give KIND, or GROUP/VERSION/KIND without --group'
        .. " and --version" },
      { "demo --group example.com", 2, "--group and --version need --kind" },
      { "demo --kind", 2, "option --kind needs a value" },
      { "demo --force", 2, "unknown option --force" },
      { "demo other", 2, "new takes one project name, got demo and other" },
      { "", 2, "new needs a project name" },
    }
    for _, c in ipairs(cases) do
      local status, out = sh(kubelua .. " new " .. c[1])
      assert.equal(c[2], status, c[1])
      local first = out:match("^[^\n]*")
      assert.equal("kubelua new: " .. c[3], first, c[1])
      if c[2] == 2 then
        assert.matches("\nusage: kubelua new NAME ", out, 1, true)
      end
    end
    assert.same({}, files_in(tmp))
  end)
end)
