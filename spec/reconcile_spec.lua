-- kube.workers' reconcile outcomes (done, error, nil-err, requeue_after,
-- terminal) and the ctx argument.
local kube = require "kubelua"
local support = require "spec.support"
local raises = support.raises

local n = 0
local function fresh(prefix)
  n = n + 1
  return prefix .. "-reconcile-" .. n
end

-- Captures kube.log.error calls while fn runs (the worker loop and ctx.log
-- look the level functions up at each call).
local function capture_logs(fn)
  local logs, saved = {}, {}
  for _, level in ipairs({ "info", "error" }) do
    saved[level] = kube.log[level]
    kube.log[level] = function(msg, fields)
      logs[#logs + 1] = { level = level, msg = msg, fields = fields }
    end
  end
  local ok, err = pcall(fn)
  for level, f in pairs(saved) do kube.log[level] = f end
  assert(ok, err)
  return logs
end

-- Waits until the queue has nothing queued or in progress.
local function settle(q, cond)
  for _ = 1, 500 do
    if (cond == nil or cond()) and q:len() == 0 and q:stats().processing == 0 then return end
    kube.sleep(0.002)
  end
  error("the queue did not settle")
end

describe("kube.workers outcomes", function()
  it("hands ctx.triggers what queued the key since its last run, then nothing", function()
    local q = kube.workqueue(fresh("triggers"))
    local seen = {}
    kube.note_trigger(q, "k", "update a/k")
    kube.note_trigger(q:name(), "k", "add owned a/k-copy")
    kube.workers(q, 1, function(_, ctx)
      seen[#seen + 1] = table.concat(ctx.triggers, "|")
      if #seen == 1 then return kube.requeue_after(0) end
    end)
    q:add("k")
    for _ = 1, 500 do
      if #seen >= 2 then break end
      kube.sleep(0.01)
    end
    assert.same({ "update a/k|add owned a/k-copy", "" }, seen)
  end)

  it("forgets a key whose reconcile returns normally", function()
    local q = kube.workqueue(fresh("ok"))
    local runs = 0
    kube.workers(q, 1, function() runs = runs + 1 end)
    kube.run(function()
      q:add("a")
      settle(q, function() return runs == 1 end)
    end)
    q:shutdown()
    assert.equal(1, runs)
    assert.equal(0, q:num_requeues("a"))
  end)

  it("logs a raised error with its traceback and retries it rate limited", function()
    local q = kube.workqueue(fresh("err"), { rate_limiter = { type = "exponential", base = 0.001,
                                                               max = 0.01 } })
    local attempts = {}
    kube.workers(q, 1, function(_, ctx)
      attempts[#attempts + 1] = ctx.attempt
      if #attempts < 3 then error("boom " .. #attempts) end
    end)
    local logs = capture_logs(function()
      kube.run(function()
        q:add("ns/a")
        settle(q, function() return #attempts == 3 end)
      end)
    end)
    q:shutdown()
    assert.same({ 0, 1, 2 }, attempts)
    assert.equal(0, q:num_requeues("ns/a"))
    assert.equal(2, #logs)
    assert.equal("reconcile failed", logs[1].msg)
    assert.equal("ns/a", logs[1].fields.key)
    assert.equal(q:name(), logs[1].fields.queue)
    assert.matches("^spec/reconcile_spec%.lua:%d+: boom 1\nstack traceback:\n", logs[1].fields.error)
    assert.matches("spec/reconcile_spec.lua:", logs[1].fields.error:match("\n.*"), 1, true)
  end)

  it("logs nil, err and retries it rate limited", function()
    local q = kube.workqueue(fresh("nilerr"), { rate_limiter = { type = "exponential",
                                                                  base = 0.001, max = 0.01 } })
    local attempts = {}
    kube.workers(q, 1, function(_, ctx)
      attempts[#attempts + 1] = ctx.attempt
      if #attempts < 2 then return nil, "not yet" end
    end)
    local logs = capture_logs(function()
      kube.run(function()
        q:add("a")
        settle(q, function() return #attempts == 2 end)
      end)
    end)
    q:shutdown()
    assert.same({ 0, 1 }, attempts)
    assert.same({ { level = "error", msg = "reconcile failed",
                    fields = { queue = q:name(), key = "a", error = "not yet" } } }, logs)
  end)

  it("forgets and re-adds after the delay for kube.requeue_after", function()
    local q = kube.workqueue(fresh("requeue"))
    local runs, at = 0, {}
    kube.workers(q, 1, function(_, ctx)
      runs = runs + 1
      at[runs] = { kube.monotonic(), ctx.attempt }
      if runs < 2 then return kube.requeue_after(0.05) end
    end)
    kube.run(function()
      q:add("a")
      settle(q, function() return runs == 2 end)
    end)
    q:shutdown()
    assert.equal(0, at[2][2])
    assert.is_true(at[2][1] - at[1][1] >= 0.045)
  end)

  it("logs kube.terminal, returned or raised, forgets it and does not retry", function()
    local q = kube.workqueue(fresh("terminal"), { rate_limiter = { type = "exponential",
                                                                    base = 0.001, max = 0.01 } })
    local runs = {}
    kube.workers(q, 1, function(key)
      runs[key] = (runs[key] or 0) + 1
      if runs[key] == 1 then return nil, "transient" end -- a retry first: attempt 1
      if key == "returned" then return kube.terminal("bad spec: no image") end
      error(kube.terminal("bad spec: no port"))
    end)
    local logs = capture_logs(function()
      kube.run(function()
        q:add("returned")
        q:add("raised")
        settle(q, function() return runs.returned == 2 and runs.raised == 2 end)
        kube.sleep(0.03) -- a retry would have come by now
      end)
    end)
    q:shutdown()
    assert.same({ returned = 2, raised = 2 }, runs)
    assert.equal(0, q:num_requeues("returned"))
    assert.equal(0, q:num_requeues("raised"))
    local terminal = {}
    for _, l in ipairs(logs) do
      if l.msg ~= "reconcile failed" then terminal[l.fields.key] = l end
    end
    assert.same({ level = "error", msg = "reconcile failed terminally, not retried",
                  fields = { queue = q:name(), key = "returned", error = "bad spec: no image" } },
                terminal.returned)
    assert.equal("bad spec: no port", terminal.raised.fields.error)
    assert.equal("terminal: bad spec: no port", tostring(kube.terminal("bad spec: no port")))
  end)

  it("runs a terminal key again when it is added again", function()
    local q = kube.workqueue(fresh("terminal-again"))
    local runs = 0
    kube.workers(q, 1, function()
      runs = runs + 1
      return kube.terminal("no")
    end)
    capture_logs(function()
      kube.run(function()
        q:add("a")
        settle(q, function() return runs == 1 end)
        q:add("a")
        settle(q, function() return runs == 2 end)
      end)
    end)
    q:shutdown()
    assert.equal(2, runs)
  end)
end)

describe("kube.workers ctx", function()
  it("gives key, namespace, name and attempt", function()
    local q = kube.workqueue(fresh("ctx"))
    local seen = {}
    kube.workers(q, 1, function(key, ctx)
      seen[key] = { ctx.key, ctx.namespace, ctx.name, ctx.attempt }
    end)
    kube.run(function()
      q:add("ns1/obj")
      q:add("cluster-obj")
      settle(q, function() return seen["cluster-obj"] and seen["ns1/obj"] end)
    end)
    q:shutdown()
    assert.same({ "ns1/obj", "ns1", "obj", 0 }, seen["ns1/obj"])
    assert.same({ "cluster-obj", nil, "cluster-obj", 0 }, seen["cluster-obj"])
  end)

  it("gives a logger with the queue and key bound", function()
    local q = kube.workqueue(fresh("ctxlog"))
    local done = false
    kube.workers(q, 1, function(_, ctx)
      ctx.log.info("working", { step = 1 })
      ctx.log.info("plain")
      done = true
    end)
    local logs = capture_logs(function()
      kube.run(function()
        q:add("ns/x")
        settle(q, function() return done end)
      end)
    end)
    q:shutdown()
    assert.same({
      { level = "info", msg = "working", fields = { queue = q:name(), key = "ns/x", step = 1 } },
      { level = "info", msg = "plain", fields = { queue = q:name(), key = "ns/x" } },
    }, logs)
  end)

  it("is passed to a vararg function", function()
    local q = kube.workqueue(fresh("ctxvar"))
    local got
    kube.workers(q, 1, function(...) got = select(2, ...).key end)
    kube.run(function()
      q:add("k")
      settle(q, function() return got end)
    end)
    q:shutdown()
    assert.equal("k", got)
  end)

  it("rejects bad terminal messages", function()
    raises("kube.terminal: msg must be a string, got nil", function() kube.terminal() end)
  end)
end)
