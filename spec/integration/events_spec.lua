-- kube.event: Events about objects, aggregated and rate limited as
-- client-go's recorder does, against the in-process simulator.
local kube = require "kubelua"
local testing = require "kubelua.testing"
local support = require "spec.support"

describe("kube.event", function()
  local t, cm

  before_each(function()
    kube.events._reset()
    t = testing.start{ namespaces = { "e" } }
    cm = t:create{ apiVersion = "v1", kind = "ConfigMap", metadata = { name = "c1", namespace = "e" } }
  end)
  after_each(function() t:stop() end)

  local function events()
    return t:list("events.k8s.io/v1", "events", "e")
  end

  it("posts an events.k8s.io/v1 Event about the object, without waiting", function()
    assert.is_true(kube.event(cm, "Warning", "SyncFailed", "cannot sync: boom"))
    local list = t:eventually(function() local l = events() return #l == 1 and l end)
    local ev = list[1]
    assert.matches("^c1%.%x+$", ev.metadata.name)
    assert.equal("Warning", ev.type)
    assert.equal("SyncFailed", ev.reason)
    assert.equal("SyncFailed", ev.action)
    assert.equal("cannot sync: boom", ev.note)
    assert.equal("kubelua", ev.reportingController)
    assert.same({ apiVersion = "v1", kind = "ConfigMap", namespace = "e", name = "c1",
                  uid = cm.metadata.uid, resourceVersion = cm.metadata.resourceVersion },
                ev.regarding)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%d%d%d%dZ$", ev.eventTime)
    assert.is_nil(ev.series)
  end)

  it("counts a repeated Event in its series instead of posting another", function()
    for _ = 1, 3 do kube.event(cm, "Normal", "Synced", "in sync") end
    kube.event(cm, "Normal", "Synced", "something else")
    local list = t:eventually(function()
      local l = events()
      table.sort(l, function(a, b) return a.note < b.note end)
      return #l == 2 and l[1].series and l[1].series.count == 3 and l
    end)
    assert.equal("in sync", list[1].note)
    assert.equal("something else", list[2].note)
    assert.is_nil(list[2].series)
  end)

  it("drops Events beyond the per-object burst and counts them in the next", function()
    local posted = 0
    for i = 1, 30 do
      if kube.event(cm, "Normal", "Tick", "tick " .. i) then posted = posted + 1 end
    end
    assert.equal(25, posted)
    t:eventually(function() return #events() == 25 end)
  end)

  it("posts core/v1 Events to a server without events.k8s.io/v1, counting repeats", function()
    -- a server without events.k8s.io: the simulator's, with it taken out
    t = testing.start{ apiserver = "sim", namespaces = { "e" } }
    cm = t:create{ apiVersion = "v1", kind = "ConfigMap", metadata = { name = "c1", namespace = "e" } }
    local store = t.sim.store
    local core_events = store:resource("v1", "events")
    store:remove_resource(store:resource("events.k8s.io/v1", "events"))
    core_events.mirrors, core_events.canon = nil, nil
    for _ = 1, 2 do kube.event(cm, "Warning", "SyncFailed", "cannot sync: boom") end
    local list = t:eventually(function()
      local l = t:list("v1", "events", "e")
      return #l == 1 and l[1].count == 2 and l
    end)
    local ev = list[1]
    assert.matches("^c1%.%x+$", ev.metadata.name)
    assert.equal("Warning", ev.type)
    assert.equal("SyncFailed", ev.reason)
    assert.equal("cannot sync: boom", ev.message)
    assert.same({ component = "kubelua" }, ev.source)
    assert.equal("kubelua", ev.reportingComponent)
    assert.same({ apiVersion = "v1", kind = "ConfigMap", namespace = "e", name = "c1",
                  uid = cm.metadata.uid, resourceVersion = cm.metadata.resourceVersion },
                ev.involvedObject)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", ev.firstTimestamp)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", ev.lastTimestamp)
  end)

  it("checks its arguments", function()
    support.raises('kube.event: type must be "Normal" or "Warning", got Info',
      function() kube.event(cm, "Info", "R", "m") end)
    support.raises("kube.event: reason must be a non-empty string",
      function() kube.event(cm, "Normal", "", "m") end)
    support.raises("kube.event: the object needs apiVersion and kind",
      function() kube.event({ metadata = { name = "x" } }, "Normal", "R", "m") end)
  end)
end)
