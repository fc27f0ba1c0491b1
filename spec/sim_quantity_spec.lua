-- kubelua.sim.quantity: resource quantities as apimachinery's
-- resource.Quantity writes them back (what a real server returns): kept as
-- written when its parser finds the text canonical, else in canonical form.
local quantity = require "kubelua.sim.quantity"
local json = require "kubelua.json"

local function check(cases)
  for _, c in ipairs(cases) do assert.equal(c[2], quantity.canonical(c[1]), c[1]) end
end

describe("kubelua.sim.quantity", function()
  it("keeps a text the parser takes as canonical as it was written", function()
    check { { "+1", "+1" }, { "5.", "5." }, { "1E3", "1E3" }, { "1e+3", "1e+3" },
      { "01", "01" }, { "007", "007" }, { "1.500", "1.500" }, { "+1Ki", "+1Ki" },
      { "1500", "1500" }, { "100M", "100M" }, { "100n", "100n" }, { "-1", "-1" },
      { "12Mi", "12Mi" }, { "1e21", "1e21" }, { " 1Gi ", "1Gi" } }
  end)

  it("writes other decimal SI with the largest suffix that keeps the value whole", function()
    check { { "0.5", "500m" }, { "1000m", "1" }, { "1.5", "1500m" }, { "2000", "2k" },
      { "0.1", "100m" }, { "1000000", "1M" }, { "1.25", "1250m" }, { ".5", "500m" },
      { "-0.5", "-500m" }, { "1.000", "1" }, { "0", "0" }, { "0Mi", "0" }, { "000.000k", "0" },
      { "100000000000000000000", "100E" }, { "1000E", "1e21" } }
  end)

  it("writes binary SI in the largest power of 1024 that divides it", function()
    check { { "1024Mi", "1Gi" }, { "1.5Gi", "1536Mi" }, { "2048Ki", "2Mi" }, { "8Mi", "8Mi" },
      { "-1.5Gi", "-1536Mi" }, { "1.0Ki", "1Ki" }, { "1Pi", "1Pi" },
      -- below 1024, or not whole: decimal SI
      { "0.5Ki", "512" }, { "1.1Gi", "1181116006400m" },
      -- beyond int64: capped
      { "7Ei", "7Ei" }, { "8Ei", "9223372036854775807" }, { "-9Ei", "-9223372036854775807" } }
  end)

  it("keeps the exponent form, its exponent a multiple of 3", function()
    check { { "12e2", "1200" }, { "1e20", "100e18" }, { "10e-4", "1e-3" }, { "1e-7", "100e-9" } }
  end)

  it("rounds a value finer than 1n up, away from zero", function()
    check { { "0.1n", "1n" }, { "1.5e-9", "2e-9" }, { "1.0000000001", "1000000001n" },
      { "0.0000000001Ki", "103n" }, { "-0.1n", "-1n" }, { "0.0000000019", "2n" } }
  end)

  it("reads what it has no digits for as zero, as the parser does", function()
    check { { ".", "0" }, { "+", "0" }, { "-", "0" }, { "Gi", "0" }, { "k", "0" } }
  end)

  it("reads JSON numbers as a client writes them, and null as zero", function()
    assert.same({ "500m", "2", "100m", "1k", "3G", "100e-9", "0" }, { quantity.canonical(0.5),
      quantity.canonical(2), quantity.canonical(0.1), quantity.canonical(1000),
      quantity.canonical(3e9), quantity.canonical(1e-7), quantity.canonical(json.null) })
  end)

  it("refuses what is not a quantity with the real decoder's message", function()
    local re = "quantities must match the regular expression "
      .. "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    for _, bad in ipairs { "abc", "1.2.3", "1..5", "1Q", "", "  ", "1 Gi", "1Gi!", true } do
      assert.same({ nil, re }, { quantity.canonical(bad) }, tostring(bad))
    end
    for _, bad in ipairs { "1Kii", "1e", "e", "1ee3", "1e99999999999999999999", "1e4294967296" } do
      assert.same({ nil, "unable to parse quantity's suffix" }, { quantity.canonical(bad) }, bad)
    end
  end)
end)
