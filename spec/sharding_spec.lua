-- kubelua.sharding's assignment: consistent hashing with virtual nodes,
-- and the root owner an object's key is hashed by.
local sharding = require "kubelua.sharding"

local function members(n)
  local m = {}
  for i = 1, n do m[i] = "replica-" .. i end
  return m
end

describe("kubelua.sharding", function()
  describe("lookup", function()
    it("spreads keys evenly and moves about 1/N of them when an Nth replica joins", function()
      local four, five = sharding.hash_ring(members(4)), sharding.hash_ring(members(5))
      local counts, moved, n = {}, 0, 20000
      for i = 1, n do
        local key = "ns-" .. i % 50 .. "/web-" .. i
        local a, b = sharding.lookup(four, key), sharding.lookup(five, key)
        counts[b] = (counts[b] or 0) + 1
        if a ~= b then
          moved = moved + 1
          assert.equal("replica-5", b) -- only to the newcomer
        end
      end
      for _, m in ipairs(members(5)) do
        assert.is_true(counts[m] > n / 5 * 0.75 and counts[m] < n / 5 * 1.25, m .. ": " .. counts[m])
      end
      assert.is_true(moved > n / 5 * 0.75 and moved < n / 5 * 1.25, "moved " .. moved)
    end)

    it("gives the same answer for the same members, and nil for none", function()
      assert.equal(sharding.lookup(sharding.hash_ring({ "b", "a" }), "ns/x"),
                   sharding.lookup(sharding.hash_ring({ "a", "b" }), "ns/x"))
      assert.is_nil(sharding.lookup(sharding.hash_ring({}), "ns/x"))
    end)
  end)

  describe("root_key", function()
    it("follows the controller owner, then the first, through the ring's objects", function()
      local function obj(kind, name, uid, refs)
        return { _kind = kind, metadata = { namespace = "ns", name = name, uid = uid,
                                            ownerReferences = refs } }
      end
      local dep = obj("apps/v1/Deployment", "web", "u1")
      local rs = obj("apps/v1/ReplicaSet", "web-1", "u2",
                     { { uid = "other" }, { uid = "u1", controller = true } })
      local pod = obj("v1/Pod", "web-1-x", "u3", { { uid = "u2" } })
      local orphan = obj("v1/Pod", "lone", "u4", { { uid = "not-cached" } })
      local by_uid = { u1 = { obj = dep }, u2 = { obj = rs }, u3 = { obj = pod } }
      assert.equal("apps/v1/Deployment/ns/web", sharding.root_key(pod, by_uid))
      assert.equal("apps/v1/Deployment/ns/web", sharding.root_key(rs, by_uid))
      assert.equal("v1/Pod/ns/lone", sharding.root_key(orphan, by_uid))
    end)
  end)
end)
