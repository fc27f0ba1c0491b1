-- The build as a user or a distribution runs it: a plain CMake release
-- build (-O3) of the binary compiles without a warning, and warnings are
-- errors only where the project asks for it (KL_WERROR, which scripts/build
-- and scripts/fuzz turn on).
local support = require "spec.support"

describe("the CMake build", function()
  local dir

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
  end)

  teardown(function() os.execute("rm -rf " .. dir) end)

  it("does not turn warnings into errors unless asked", function()
    local status, out = support.sh("cmake -S . -B " .. dir .. " -DCMAKE_BUILD_TYPE=Release")
    assert.equal(0, status, out)
    local _, flags = support.sh("cat " .. dir .. "/CMakeFiles/kl_core.dir/flags.make")
    assert.matches("-Wall", flags, 1, true)
    assert.is_nil(flags:find("-Werror", 1, true))
    local _, build = support.sh("cat scripts/build")
    assert.matches("-DKL_WERROR=ON", build, 1, true)
  end)

  it("builds the binary at -O3 with no warning, even with -Werror", function()
    local status, out = support.sh("cmake -S . -B " .. dir .. " -DCMAKE_BUILD_TYPE=Release"
      .. " -DKL_WERROR=ON && cmake --build " .. dir .. " -j 2 --target kubelua")
    assert.equal(0, status, out)
    assert.is_nil(out:find("warning:", 1, true), out)
    local _, flags = support.sh("cat " .. dir .. "/CMakeFiles/kl_core.dir/flags.make")
    assert.matches("-O3", flags, 1, true)
    assert.matches("-Werror", flags, 1, true)
  end)
end)
