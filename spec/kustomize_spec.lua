-- spec/kustomize.lua, the renderer the manifests spec uses: a strategic
-- merge as Kubernetes declares it for pod templates, and a clear error for
-- what it does not render.
local kustomize = require "spec.kustomize"

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok)
  return err
end

-- Renders a kustomization.yaml holding text, in a directory of its own.
local function render(text)
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  local f = assert(io.open(dir .. "/kustomization.yaml", "w"))
  f:write(text)
  f:close()
  local ok, out = pcall(kustomize.render, dir)
  os.execute("rm -rf " .. dir)
  return ok, out and tostring(out):gsub(dir, "DIR")
end

describe("spec.kustomize", function()
  describe("merge", function()
    it("merges containers by name and ports by containerPort, and replaces args", function()
      local target = { containers = {
        { name = "a", args = { "x", "y" }, ports = { { containerPort = 80, name = "http" } } },
        { name = "b", image = "b:1" } } }
      kustomize.merge(target, { containers = {
        { name = "a", args = { "z" }, ports = { { containerPort = 80, protocol = "TCP" } } },
        { name = "c", image = "c:1" } } }, "t")
      assert.same({ containers = {
        { name = "a", args = { "z" },
          ports = { { containerPort = 80, name = "http", protocol = "TCP" } } },
        { name = "b", image = "b:1" },
        { name = "c", image = "c:1" } } }, target)
    end)

    it("refuses a directive", function()
      assert.equal("kustomize: t.spec: the directive $patch is not supported here",
        error_of(kustomize.merge, { spec = { a = 1 } }, { spec = { ["$patch"] = "delete" } }, "t"))
    end)
  end)

  describe("render", function()
    it("names a field it does not render", function()
      assert.same({ false, "kustomize: DIR/kustomization.yaml: namePrefix is not supported here" },
        { render("resources: []\nnamePrefix: x-\n") })
    end)

    it("asks for a stable ConfigMap name", function()
      assert.same({ false, "kustomize: DIR: a generated name needs"
        .. " generatorOptions.disableNameSuffixHash (a hash suffix is not supported here)" },
        { render("configMapGenerator:\n- name: c\n  files: []\n") })
    end)
  end)
end)
