-- The short soak (bench/soak.lua for 30 s): a writer changes ConfigMaps and
-- Widgets (a CRD with a status subresource) in four namespaces while every
-- fault kind is injected at random, and a kubelua controller mirrors them.
-- Afterwards nothing is lost, of either kind: the controller's caches
-- equal the server's state, every source's last version is mirrored, no
-- copy is left over, and the controller is alive.
local support = require "spec.support"

local function quote(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end

describe("soak", function()
  it("loses nothing under random faults", function()
    local bin = quote(support.kubelua)
    local p = io.popen(bin .. " run --no-watch bench/soak.lua -- " .. bin
      .. " --seconds 30 2>/dev/null; echo status=$?")
    local out = p:read("*a")
    p:close()
    local line = out:match('({"bench":"soak".-})\n')
    assert.is_not_nil(line, out)
    local r = assert(require("kubelua.json").decode(line))
    assert.equal("status=0", out:match("status=%d+"), out)
    assert.equal(0, r.lost, line)
    assert.is_true(r.converged, line)
    assert.is_false(r.crashed, line)
    for _, kind in ipairs { "drop_watches", "watch_abort_after", "fail_next", "compact",
                            "delay", "hold_watches" } do
      assert.is_true((r.faults[kind] or 0) > 0, kind .. " was never injected: " .. line)
    end
    assert.is_true(r.operations > 1000, line)
    assert.is_true(r.events > 0, line)
    for _, res in ipairs { "configmaps", "widgets" } do
      local k = r.kinds[res]
      assert.equal(0, k.lost, res .. ": " .. line)
      assert.is_number(k.convergence_s, res .. " did not converge: " .. line)
      assert.is_true(k.operations > 500, res .. ": " .. line)
      assert.is_true(k.events > 0, res .. ": " .. line)
    end
    assert.is_true(r.peak_rss_mb < 200, line)
  end)
end)
