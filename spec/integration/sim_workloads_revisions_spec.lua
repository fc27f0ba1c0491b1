-- The simulator's StatefulSet and DaemonSet controllers keep each pod
-- template as a ControllerRevision (apps/v1), as kube-controller-manager
-- does: named <owner>-<hash>, revision numbers counting up, an old
-- template back given the next number, the history cut to
-- revisionHistoryLimit; the Pods and the status name the revision.
local testing = require "kubelua.testing"
local support = require "spec.support"

local function template(image)
  return { metadata = { labels = { app = "web" } }, spec = { containers = {
    { name = "c", image = image } } } }
end

-- The owner's ControllerRevisions, by revision number.
local function revisions(t)
  local out = {}
  for _, r in ipairs(t:list("apps/v1", "controllerrevisions", "demo")) do
    out[r.revision] = r
  end
  return out
end

local function count(m)
  local n = 0
  for _ in pairs(m) do n = n + 1 end
  return n
end

local function set_image(t, resource, name, image, limit)
  local x = t:get("apps/v1", resource, "demo", name)
  x.spec.template.spec.containers[1].image = image
  if limit then x.spec.revisionHistoryLimit = limit end
  t:update(x)
end

describe("kubelua sim workloads: ControllerRevisions", function()
  local t
  after_each(function() if t then t:stop() end end)

  it("keeps a StatefulSet's templates as revisions its status and Pods name", function()
    t = testing.start{ namespaces = { "demo" } }
    local sts = t:create{ apiVersion = "apps/v1", kind = "StatefulSet", metadata = {
      name = "web", namespace = "demo" }, spec = { replicas = 2, serviceName = "web",
        selector = { matchLabels = { app = "web" } }, template = template("nginx:1") } }
    local function settled(rev)
      return t:eventually(function()
        local x = t:get("apps/v1", "statefulsets", "demo", "web")
        return x.status.currentRevision == rev and x.status.updateRevision == rev
          and x.status.readyReplicas == 2 and x.status.updatedReplicas == 2 and x
      end, 20)
    end
    local r1 = t:eventually(function() return revisions(t)[1] end)
    local hash = r1.metadata.labels["controller.kubernetes.io/hash"]
    assert.equal("web-" .. hash, r1.metadata.name)
    assert.same({ app = "web", ["controller.kubernetes.io/hash"] = hash }, r1.metadata.labels)
    assert.same({ { apiVersion = "apps/v1", kind = "StatefulSet", name = "web",
      uid = sts.metadata.uid, controller = true, blockOwnerDeletion = true } },
      r1.metadata.ownerReferences)
    local data = r1.data.spec.template
    assert.same({ "replace", "nginx:1", { app = "web" } }, { data["$patch"],
      data.spec.containers[1].image, data.metadata.labels })
    settled(r1.metadata.name)
    for _, p in ipairs(support.live_pods(t)) do
      assert.equal(r1.metadata.name, p.metadata.labels["controller-revision-hash"])
    end
    set_image(t, "statefulsets", "web", "nginx:2")
    local r2 = t:eventually(function() return revisions(t)[2] end)
    assert.are_not.equal(r1.metadata.name, r2.metadata.name)
    settled(r2.metadata.name)
    -- the first template back: its revision gets the next number
    set_image(t, "statefulsets", "web", "nginx:1")
    local again = t:eventually(function() return revisions(t)[3] end)
    assert.equal(r1.metadata.name, again.metadata.name)
    assert.equal(2, count(revisions(t)))
    settled(r1.metadata.name)
  end)

  it("keeps a DaemonSet's templates as revisions, cut to revisionHistoryLimit", function()
    t = testing.start{ namespaces = { "demo" }, nodes = 2 }
    t:create{ apiVersion = "apps/v1", kind = "DaemonSet", metadata = { name = "agent",
      namespace = "demo" }, spec = { selector = { matchLabels = { app = "web" } },
        template = template("agent:1") } }
    local r1 = t:eventually(function() return revisions(t)[1] end)
    local hash = r1.metadata.labels["controller-revision-hash"]
    assert.equal("agent-" .. hash, r1.metadata.name)
    assert.same({ app = "web", ["controller-revision-hash"] = hash }, r1.metadata.labels)
    assert.same({ ["deprecated.daemonset.template.generation"] = "1" }, r1.metadata.annotations)
    assert.equal("agent:1", r1.data.spec.template.spec.containers[1].image)
    local function rolled(image)
      return t:eventually(function()
        local ps = support.live_pods(t)
        if #ps ~= 2 then return false end
        for _, p in ipairs(ps) do
          if p.spec.containers[1].image ~= image or not p.status.conditions then return false end
        end
        return ps
      end, 20)
    end
    for _, p in ipairs(rolled("agent:1")) do
      assert.equal(hash, p.metadata.labels["controller-revision-hash"])
    end
    set_image(t, "daemonsets", "agent", "agent:2", 1)
    rolled("agent:2")
    set_image(t, "daemonsets", "agent", "agent:3")
    rolled("agent:3")
    -- agent:3 in use, agent:2 kept as the one older revision, agent:1 gone
    local left = t:eventually(function()
      local rs = revisions(t)
      return count(rs) == 2 and rs
    end)
    assert.same({ nil, "agent:2", "agent:3" }, { left[1],
      left[2] and left[2].data.spec.template.spec.containers[1].image,
      left[3] and left[3].data.spec.template.spec.containers[1].image })
  end)
end)
