-- The container image, checked without building it: the Dockerfile's final
-- stage is scratch with the binary as its entrypoint, a numeric non-root
-- user that its passwd and group name, and the demo as its default
-- command; that command line and `version` run here as the image would run
-- them, and the binary runs from a bare directory with an empty environment.
-- (scripts/image builds the image and runs it locked down; the manifests
-- are spec/integration/manifests_spec.lua's.)
local image = require "spec.image"
local support = require "spec.support"

local quote = require("spec.integration.sim_helper").quote

local function run(argv)
  local words = {}
  for i, a in ipairs(argv) do words[i] = quote(a) end
  return support.sh("cd / && env -i " .. table.concat(words, " "))
end

describe("the Dockerfile", function()
  local text = support.read("Dockerfile")
  local img = image.parse(text)

  it("runs the binary from scratch as 65532, whom its passwd and group name", function()
    assert.equal("scratch", img.base)
    assert.equal("65532:65532", img.user)
    assert.same({ "/usr/bin/kubelua" }, img.entrypoint)
    assert.matches("kubelua:x:65532:65532:kubelua:/home/kubelua:", text, 1, true)
    assert.matches("kubelua:x:65532:", text, 1, true)
    assert.matches("chown 65532:65532 /rootfs/home/kubelua", text, 1, true)
  end)

  it("builds FROM a base given as a build argument, debian:12 by default", function()
    assert.matches("\nARG BASE=debian:12\nFROM ${BASE} AS build\n", text, 1, true)
  end)

  it("runs subcommands: version", function()
    local status, out = run(image.argv(img, nil, { "version" }))
    assert.equal(0, status)
    assert.matches("^kubelua %d+%.%d+%.%d+ %(LuaJIT [^)]+%)\n$", out)
  end)

  it("runs the demo by default, from the examples it carries", function()
    assert.same({ "run", "--sim", "/examples/mirror/controller.lua" }, img.cmd)
    local status, out = run(image.argv(img))
    assert.equal(0, status, out)
    assert.matches("the copies match their sources; stopping", out, 1, true)
  end)

  it("keeps build trees, history and downloads out of the build context", function()
    local ignore = support.read(".dockerignore")
    for _, p in ipairs({ ".git", "build", "build-*", "bench/compare/node_modules" }) do
      assert.matches("\n" .. p .. "\n", "\n" .. ignore, 1, true)
    end
  end)

  it("needs nothing but the binary: it runs the demo from a bare directory", function()
    local stage = os.tmpname()
    os.remove(stage)
    assert.equal(0, (support.sh("mkdir -p " .. stage .. "/bin && cp " .. support.kubelua .. " "
      .. stage .. "/bin/ && cp examples/mirror/controller.lua " .. stage .. "/")))
    local status, out = support.sh("cd / && env -i " .. stage .. "/bin/kubelua run --sim "
      .. stage .. "/controller.lua")
    os.execute("rm -rf " .. stage)
    assert.equal(0, status)
    assert.matches("the copies match their sources; stopping", out, 1, true)
  end)
end)
