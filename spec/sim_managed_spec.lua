-- kubelua.sim.managed: the order of managedFields entries, which the
-- fixture comparisons cannot check (they mask times).
local managed = require "kubelua.sim.managed"

local function order(list)
  local out = {}
  for i, e in ipairs(list) do
    out[i] = e.operation .. " " .. e.manager .. " " .. (e.subresource or "-") .. " " .. e.time
  end
  return out
end

local function cr(spec, status)
  return { apiVersion = "example.com/v1", kind = "Widget", metadata = { name = "w" },
    spec = spec, status = status }
end

local function update(old, new, manager, time, subresource, operation)
  new.metadata.managedFields = managed.update(old, new, { manager = manager,
    operation = operation or "Update", api_version = "example.com/v1", time = time,
    subresource = subresource, custom = true, has_status = true })
  return new
end

describe("kubelua.sim.managed", function()
  it("orders entries by operation, time, manager and subresource, as the apiserver does", function()
    local a = update(nil, cr({ n = 1 }), "curl", "2026-11-29T22:13:44Z")
    local b = update(a, cr({ n = 1 }, { ok = true }), "curl", "2026-11-29T22:13:45Z", "status")
    -- the same second: the main resource's entry first
    local c = update(b, cr({ n = 2 }, { ok = true }), "curl", "2026-11-29T22:13:45Z")
    assert.same({ "Update curl - 2026-11-29T22:13:45Z", "Update curl status 2026-11-29T22:13:45Z" },
      order(c.metadata.managedFields))
    -- a second later: the older entry first
    local d = update(c, cr({ n = 3 }, { ok = true }), "curl", "2026-11-29T22:13:46Z")
    assert.same({ "Update curl status 2026-11-29T22:13:45Z", "Update curl - 2026-11-29T22:13:46Z" },
      order(d.metadata.managedFields))
    -- Apply before Update, whatever the times; then by time, and managers by
    -- name within a second
    local e = update(d, cr({ n = 3, m = "x" }, { ok = true }), "kubectl", "2026-11-29T22:13:47Z",
      nil, "Apply")
    local f = update(e, cr({ n = 3, m = "x", k = 1 }, { ok = true }), "abc", "2026-11-29T22:13:46Z")
    assert.same({ "Apply kubectl - 2026-11-29T22:13:47Z", "Update curl status 2026-11-29T22:13:45Z",
      "Update abc - 2026-11-29T22:13:46Z", "Update curl - 2026-11-29T22:13:46Z" },
      order(f.metadata.managedFields))
  end)
end)
