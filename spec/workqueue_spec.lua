-- kube.workqueue and kube.workers: client-go's workqueue semantics through
-- Lua (CLIENTGO.md T-35..T-39), worker outcomes and argument errors.
local kube = require "kubelua"
local support = require "spec.support"
local raises = support.raises

local n = 0
local function fresh(prefix)
  n = n + 1
  return (prefix or "q") .. "-" .. n
end

-- Collects every key q hands out in a task until `count` arrived.
local function drain(q)
  local keys = {}
  while q:len() > 0 do
    local k = q:get()
    keys[#keys + 1] = k
    q:done(k)
  end
  return keys
end

describe("kube.workqueue", function()
  it("returns the same queue for the same name", function()
    local name = fresh()
    local a, b = kube.workqueue(name), kube.workqueue(name)
    a:add("x")
    assert.equal(1, b:len())
    assert.equal(name, b:name())
    assert.equal("workqueue(" .. name .. ")", tostring(a))
    assert.is_true(a == b)
    assert.is_false(a == kube.workqueue(fresh()))
  end)

  it("hands keys out in FIFO order and deduplicates waiting keys", function()
    local q = kube.workqueue(fresh())
    for _, k in ipairs({ "a", "b", "a", "c", "b" }) do q:add(k) end
    assert.equal(3, q:len())
    assert.same({ "a", "b", "c" }, drain(q))
  end)

  it("never hands a key being processed to a second worker (T-35)", function()
    local q = kube.workqueue(fresh())
    q:add("k")
    q:add("k")
    local k = q:get()
    assert.equal("k", k)
    assert.equal(0, q:len())
    q:add("k") -- re-added while processing: waits for done
    assert.same({ nil, "empty" }, { q:try_get() })
    q:done("k")
    assert.equal(1, q:len())
    assert.equal("k", q:get())
    q:done("k")
    assert.same({ nil, "empty" }, { q:try_get() })
    assert.equal(2, q:stats().adds_total)
  end)

  it("hands out queued keys after shutdown, then says shutdown (T-36)", function()
    local q = kube.workqueue(fresh())
    q:add("a")
    q:add("b")
    q:shutdown()
    q:add("c") -- ignored
    assert.is_true(q:shutting_down())
    local got = {}
    for _ = 1, 3 do got[#got + 1] = { q:get() } end
    assert.same({ { "a" }, { "b" }, { nil, "shutdown" } }, got)
  end)

  it("shutdown_drain waits for keys being processed (T-36)", function()
    local q = kube.workqueue(fresh())
    local order = kube.run(function()
      local order = {}
      q:add("a")
      kube.spawn(function()
        local k = q:get()
        kube.sleep(0.02)
        order[#order + 1] = "done " .. k
        q:done(k)
      end)
      kube.sleep(0)
      assert.is_true(q:shutdown_drain())
      order[#order + 1] = "drained"
      return order
    end)
    assert.same({ "done a", "drained" }, order)
  end)

  it("lets the earliest of two delays win (T-37)", function()
    local q = kube.workqueue(fresh())
    local got = kube.run(function()
      q:add_after("k", 10)
      q:add_after("k", 0.01)
      assert.equal(0, q:len())
      assert.equal(1, q:stats().waiting)
      local k = q:get() -- waits for the delay
      q:done(k)
      return { k, q:len(), q:stats().waiting }
    end)
    assert.same({ "k", 0, 0 }, got)
  end)

  it("adds at once for a zero or negative delay", function()
    local q = kube.workqueue(fresh())
    q:add_after("a", 0)
    q:add_after("b", -1)
    assert.same({ "a", "b" }, drain(q))
    assert.equal(2, q:stats().retries_total)
  end)

  it("backs off per item and forgets (T-38)", function()
    local q = kube.workqueue(fresh(), { rate_limiter = { type = "exponential", base = 5, max = 1000 } })
    for _ = 1, 3 do q:add_rate_limited("k") end
    assert.equal(3, q:num_requeues("k"))
    assert.equal(0, q:len())
    assert.equal(1, q:stats().waiting)
    q:forget("k")
    assert.equal(0, q:num_requeues("k"))
    q:shutdown() -- drops the waiting item
    assert.equal(0, q:stats().waiting)
  end)

  it("accepts each documented rate limiter", function()
    -- The bucket alone counts no requeues, as client-go's BucketRateLimiter.
    for _, case in ipairs({
      { 1, { type = "default" } },
      { 1, { type = "exponential", base = 0.001, max = 1 } },
      { 0, { type = "bucket", qps = 5, burst = 1 } },
      { 1, { type = "fast_slow", fast = 0.01, slow = 1, max_fast = 2 } },
      { 1, { type = "max_of", limiters = { { type = "exponential" }, { type = "bucket" } } } },
    }) do
      local q = kube.workqueue(fresh(), { rate_limiter = case[2] })
      q:add_rate_limited("k")
      assert.equal(case[1], q:num_requeues("k"))
      assert.equal(1, q:stats().waiting + q:len())
    end
  end)

  it("counts client-go's metrics in stats (T-39)", function()
    local q = kube.workqueue(fresh())
    q:add("a")
    q:add("a")
    q:add("b")
    local st = q:stats()
    assert.equal(2, st.depth)
    assert.equal(2, st.adds_total)
    local k = q:get()
    st = q:stats()
    assert.equal(1, st.depth)
    assert.equal(1, st.queue_duration_seconds.count)
    assert.equal(1, st.processing)
    q:done(k)
    st = q:stats()
    assert.equal(1, st.work_duration_seconds.count)
    assert.equal(11, #st.work_duration_seconds.buckets)
    assert.same({ 1e-6, 0 }, st.work_duration_seconds.buckets[1])
  end)

  describe("errors", function()
    local q = kube.workqueue("errors")
    it("names the method and the bad key type", function()
      raises("q:add: key must be a string, got number", function() q:add(1) end)
      raises("q:add_after: key must be a string, got nil", function() q:add_after(nil, 1) end)
      raises("q:add_after: seconds must be a number, got string", function() q:add_after("k", "1") end)
      raises("q:add_rate_limited: key must be a string, got table",
        function() q:add_rate_limited({}) end)
      raises("q:forget: key must be a string, got boolean", function() q:forget(true) end)
      raises("q:num_requeues: key must be a string, got nil", function() q:num_requeues(nil) end)
      raises("q:done: key \"zz\" is not being processed", function() q:done("zz") end)
    end)

    it("rejects a value that is not a queue", function()
      raises("q:add: expected a workqueue, got table", function() q.add({}, "k") end)
    end)

    it("rejects bad names and options", function()
      raises("kube.workqueue: name must be a non-empty string, got nil", function() kube.workqueue(nil) end)
      raises("kube.workqueue: name must be a non-empty string, got string", function() kube.workqueue("") end)
      raises("kube.workqueue: opts must be a table, got number", function() kube.workqueue("o1", 5) end)
      raises('kube.workqueue: unknown rate_limiter.type "fancy" (default, exponential, bucket, fast_slow or max_of)',
        function() kube.workqueue("o2", { rate_limiter = { type = "fancy" } }) end)
      raises("kube.workqueue: rate_limiter.qps must be a number, got string",
        function() kube.workqueue("o3", { rate_limiter = { type = "bucket", qps = "x" } }) end)
    end)
  end)
end)

describe("kube.workers", function()
  it("processes every key with n workers, never one key twice at once", function()
    local q = kube.workqueue(fresh("w"))
    local busy, seen, overlap = {}, {}, false
    kube.workers(q, 3, function(key)
      if busy[key] then overlap = true end
      busy[key] = true
      kube.sleep(0.001)
      busy[key] = nil
      seen[key] = (seen[key] or 0) + 1
    end)
    local total = kube.run(function()
      for i = 1, 50 do q:add("k" .. (i % 10)) end
      while q:len() > 0 or q:stats().processing > 0 do kube.sleep(0.005) end
      local total = 0
      for _, c in pairs(seen) do total = total + c end
      return total
    end)
    q:shutdown()
    assert.is_false(overlap)
    assert.is_true(total >= 10)
    for i = 0, 9 do assert.is_true(seen["k" .. i] >= 1) end
  end)

  it("retries raised errors and nil, err with backoff, forgets on success", function()
    local q = kube.workqueue(fresh("w"), { rate_limiter = { type = "exponential", base = 0.001, max = 0.01 } })
    local attempts, requeues = {}, {}
    kube.workers(q, 1, function(key)
      attempts[key] = (attempts[key] or 0) + 1
      requeues[#requeues + 1] = q:num_requeues(key)
      if attempts[key] == 1 then error("first attempt fails") end
      if attempts[key] == 2 then return nil, "second attempt fails" end
    end)
    kube.run(function()
      q:add("k")
      while (attempts.k or 0) < 3 or q:stats().processing > 0 do kube.sleep(0.002) end
    end)
    q:shutdown()
    assert.same({ 0, 1, 2 }, requeues)
    assert.equal(0, q:num_requeues("k"))
  end)

  it("requeues after the asked delay when fn returns kube.requeue_after", function()
    local q = kube.workqueue(fresh("w"))
    local runs = 0
    kube.workers(q, 1, function()
      runs = runs + 1
      if runs < 3 then return kube.requeue_after(0.005) end
    end)
    kube.run(function()
      q:add("k")
      while runs < 3 do kube.sleep(0.002) end
    end)
    q:shutdown()
    assert.equal(3, runs)
    assert.equal(0, q:num_requeues("k"))
  end)

  it("rejects bad arguments", function()
    local q = kube.workqueue(fresh("w"))
    raises("kube.workers: bad argument #1 (workqueue expected, got string)",
      function() kube.workers("q", 1, print) end)
    raises("kube.workers: bad argument #2 (a positive whole number of workers expected, got 0)",
      function() kube.workers(q, 0, print) end)
    raises("kube.workers: bad argument #3 (function expected, got nil)",
      function() kube.workers(q, 1) end)
    raises("kube.requeue_after: seconds must be a number, got string",
      function() kube.requeue_after("1") end)
  end)
end)
