-- The simulator store's event history: a ring of history_size events per
-- resource. What a watch from a resourceVersion, a list at an older one and
-- the 410 boundary see must not depend on where the ring wrapped.
local simlib = require "kubelua.sim"

local function cm(name, v, rv)
  return { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = name, namespace = "default", resourceVersion = tostring(rv) },
    data = { v = tostring(v) } }
end

-- The store's events after resourceVersion rv, as the watch replays them.
local function events_after(s, res, rv)
  local out = {}
  for i = res.hist_first, res.hist_last do
    local ev = s:event(res, i)
    if ev.rv > rv then out[#out + 1] = ev.etype .. " " .. ev.name .. " " .. ev.rv end
  end
  return out
end

describe("the simulator's event history", function()
  local s, cms, rvs

  before_each(function()
    s = simlib.new({ history_size = 4 }).store
    cms = s:resource("v1", "configmaps")
    rvs = {}
    for i = 1, 11 do -- a, b, c created, then updated in turn: the ring wraps twice
      local name = ({ "a", "b", "c" })[(i - 1) % 3 + 1]
      local prev = cms.objects["default/" .. name]
      local rv = s:next_rv()
      s:put(cms, cm(name, i, rv), prev and "MODIFIED" or "ADDED", prev)
      rvs[i] = rv
    end
  end)

  it("keeps the last history_size events, oldest first", function()
    assert.equal(4, s.history_size)
    assert.equal(8, cms.hist_first)
    assert.equal(11, cms.hist_last)
    assert.same({ "MODIFIED b " .. rvs[8], "MODIFIED c " .. rvs[9], "MODIFIED a " .. rvs[10],
      "MODIFIED b " .. rvs[11] }, events_after(s, cms, 0))
    assert.equal(rvs[7], cms.hist_start) -- watches from here on are served
    assert.same({ "MODIFIED a " .. rvs[10], "MODIFIED b " .. rvs[11] },
      events_after(s, cms, rvs[9]))
  end)

  it("lets an event that left it go of the version before", function()
    local a = cms.objects["default/a"] -- event 10, in the history
    assert.same({ "MODIFIED", rvs[10] }, { a.etype, a.rv })
    assert.equal(rvs[7], a.prev.rv) -- event 7 left the history
    assert.is_nil(a.prev.prev)
    assert.equal(rvs[5], cms.objects["default/b"].prev.prev.rv) -- 11 -> 8 -> 5
    s:compact()
    assert.is_nil(cms.objects["default/b"].prev)
  end)

  it("rebuilds the state at a resourceVersion the ring still reaches, and no older", function()
    local function values(at)
      return { a = at["default/a"].obj.data.v, b = at["default/b"].obj.data.v,
        c = at["default/c"].obj.data.v }
    end
    assert.same({ a = "10", b = "11", c = "9" }, values(cms.objects))
    assert.same({ a = "7", b = "8", c = "6" }, values(s:snapshot(cms, rvs[8])))
    assert.same({ a = "7", b = "5", c = "6" }, values(s:snapshot(cms, rvs[7])))
    assert.is_nil(s:snapshot(cms, rvs[6]))
  end)

  it("starts empty again after a compaction and fills from its first slot", function()
    s:compact()
    assert.equal(1, cms.hist_first)
    assert.equal(0, cms.hist_last)
    local rv = s:next_rv()
    local prev = cms.objects["default/a"]
    s:put(cms, cm("a", 12, rv), "MODIFIED", prev)
    assert.same({ "MODIFIED a " .. rv }, events_after(s, cms, 0))
    assert.equal(1, #cms.history)
  end)

  it("refuses a history_size that is not a whole number of events", function()
    for _, v in ipairs { 0, 2.5, "10" } do
      local ok, err = pcall(simlib.new, { history_size = v })
      assert.is_false(ok)
      assert.matches("sim: history_size must be a whole number of events, at least 1, got "
        .. tostring(v):gsub("%.", "%%."), err)
    end
  end)
end)
