-- kubelua.sim.quantity: resource quantities in the canonical form that
-- apimachinery's resource.Quantity gives them (what a real server returns).
local quantity = require "kubelua.sim.quantity"
local json = require "kubelua.json"

describe("kubelua.sim.quantity", function()
  it("writes decimal SI with the largest suffix that keeps the value whole", function()
    local cases = { { "0.5", "500m" }, { "1000m", "1" }, { "1.5", "1500m" }, { "2000", "2k" },
      { "1500", "1500" }, { "100M", "100M" }, { "0.1", "100m" }, { "1000000", "1M" },
      { "1.25", "1250m" }, { "+1", "1" }, { ".5", "500m" }, { "5.", "5" }, { "-0.5", "-500m" },
      { "100n", "100n" }, { "0", "0" }, { "0Mi", "0" }, { "000.000k", "0" },
      { "100000000000000000000", "100E" }, { "1000E", "1e21" } }
    for _, c in ipairs(cases) do assert.equal(c[2], quantity.canonical(c[1]), c[1]) end
  end)

  it("writes binary SI in the largest power of 1024 that divides it", function()
    local cases = { { "1024Mi", "1Gi" }, { "1.5Gi", "1536Mi" }, { "512Ki", "512Ki" },
      { "1Mi", "1Mi" }, { "-1.5Gi", "-1536Mi" }, { "2048Ki", "2Mi" }, { "1536", "1536" },
      -- below 1024, or not whole: decimal SI
      { "0.5Ki", "512" }, { "1.1Gi", "1181116006400m" },
      -- beyond int64: capped
      { "7Ei", "7Ei" }, { "8Ei", "9223372036854775807" }, { "-9Ei", "-9223372036854775807" } }
    for _, c in ipairs(cases) do assert.equal(c[2], quantity.canonical(c[1]), c[1]) end
  end)

  it("keeps the exponent form, its exponent a multiple of 3", function()
    local cases = { { "1e3", "1e3" }, { "1E3", "1e3" }, { "12e2", "1200" }, { "1e-3", "1e-3" },
      { "1e21", "1e21" }, { "1e20", "100e18" } }
    for _, c in ipairs(cases) do assert.equal(c[2], quantity.canonical(c[1]), c[1]) end
  end)

  it("rounds a value finer than 1n up, away from zero", function()
    local cases = { { "0.1n", "1n" }, { "1.5e-9", "2e-9" }, { "1.0000000001", "1000000001n" },
      { "0.0000000001Ki", "103n" }, { "-0.1n", "-1n" }, { "0.0000000019", "2n" } }
    for _, c in ipairs(cases) do assert.equal(c[2], quantity.canonical(c[1]), c[1]) end
  end)

  it("reads JSON numbers as they were written, and null as zero", function()
    assert.same({ "500m", "2", "100m", "100e18", "0" }, { quantity.canonical(0.5),
      quantity.canonical(2), quantity.canonical(0.1), quantity.canonical(1e20),
      quantity.canonical(json.null) })
  end)

  it("refuses what is not a quantity with the real decoder's message", function()
    local re = "quantities must match the regular expression "
      .. "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    for _, bad in ipairs { "abc", "1.2.3", "1Q", "", ".", "1 Gi", "Gi", true } do
      assert.same({ nil, re }, { quantity.canonical(bad) }, tostring(bad))
    end
    assert.same({ nil, "unable to parse quantity's suffix" }, { quantity.canonical("1Kii") })
    assert.same({ nil, "unable to parse quantity's suffix" }, { quantity.canonical("1e") })
  end)
end)
