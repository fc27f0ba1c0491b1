-- Fault injection through POST /_sim/faults: failing requests (429 with
-- Retry-After, 500, 503), delays, dropped and truncated watches, history
-- compaction and a full reset.
local H = require "spec.integration.sim_helper"

local CMS = "/api/v1/namespaces/default/configmaps"

local function api(sim, method, path, body)
  local code, h, raw, obj = H.request(sim, method, path, { body = body })
  return code, obj, h, raw
end

local function fault(sim, f)
  local code, obj = api(sim, "POST", "/_sim/faults", f)
  assert.equal(200, code)
  return obj
end

local function cm(name)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name }, data = { a = "b" } }
end

describe("kubelua sim faults", function()
  local sim
  before_each(function() sim = H.start() end)
  after_each(function() H.stop(sim) end)

  it("answers the next N requests with 429 and Retry-After", function()
    fault(sim, { fail_next = 2, code = 429, retry_after = 3 })
    for _ = 1, 2 do
      local code, st, h = api(sim, "GET", CMS)
      assert.equal(429, code)
      assert.equal("3", h["retry-after"])
      assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
        message = "Too many requests, please try again later.", reason = "TooManyRequests",
        details = { retryAfterSeconds = 3 }, code = 429 }, st)
    end
    assert.equal(200, (api(sim, "GET", CMS)))
  end)

  it("answers with 500 and 503", function()
    fault(sim, { fail_next = 1, code = 500 })
    local code, st = api(sim, "GET", CMS)
    assert.equal(500, code)
    assert.equal("InternalError", st.reason)
    fault(sim, { fail_next = 1, code = 503 })
    code, st = api(sim, "GET", CMS)
    assert.equal(503, code)
    assert.equal("ServiceUnavailable", st.reason)
    assert.equal(200, (api(sim, "GET", CMS)))
  end)

  it("delays responses until the delay is turned off", function()
    fault(sim, { delay = 0.3 })
    local p = io.popen("date +%s.%N")
    local before = tonumber(p:read("*l"))
    p:close()
    assert.equal(200, (api(sim, "GET", CMS)))
    p = io.popen("date +%s.%N")
    local after = tonumber(p:read("*l"))
    p:close()
    assert.is_true(after - before >= 0.3, "took " .. (after - before))
    fault(sim, { delay = 0 })
  end)

  it("drops every watch", function()
    local w = H.watch_start(sim, CMS .. "?watch=true&timeoutSeconds=30")
    H.wait_watches(sim, 1)
    local out = fault(sim, { drop_watches = true })
    assert.equal(1, out.dropped)
    H.watch_done(w)
    H.watch_stop(w)
  end)

  it("cuts a watch after N bytes, mid-object", function()
    local w = H.watch_start(sim, CMS .. "?watch=true&timeoutSeconds=30")
    H.wait_watches(sim, 1)
    local out = fault(sim, { watch_abort_after = 20 })
    assert.equal(1, out.aborting)
    api(sim, "POST", CMS, cm("cut"))
    H.watch_done(w)
    local text = H.read_file(w.out)
    H.watch_stop(w)
    assert.equal('{"type":"ADDED","ob', text:sub(1, 19))
    assert.equal(20, #text)
  end)

  it("compacts the history: resuming from an older resourceVersion gets 410", function()
    local _, obj = api(sim, "POST", CMS, cm("a"))
    local rv = obj.metadata.resourceVersion
    api(sim, "POST", CMS, cm("b"))
    fault(sim, { compact = true })
    local w = H.watch_start(sim, CMS .. "?watch=true&resourceVersion=" .. rv)
    H.watch_done(w)
    local lines = H.watch_lines(w, 1)
    H.watch_stop(w)
    assert.equal("ERROR", lines[1].type)
    assert.equal(410, lines[1].object.code)
    assert.equal("Expired", lines[1].object.reason)
    -- a fresh list gives a resourceVersion that a watch may start from
    local _, list = api(sim, "GET", CMS)
    w = H.watch_start(sim, CMS .. "?watch=true&timeoutSeconds=1&resourceVersion="
      .. list.metadata.resourceVersion)
    H.watch_done(w)
    assert.equal("", H.read_file(w.out))
    H.watch_stop(w)
  end)

  it("forgets everything and restarts resourceVersions on reset", function()
    for i = 1, 5 do api(sim, "POST", CMS, cm("x" .. i)) end
    local _, before = api(sim, "GET", CMS)
    assert.equal(5, #before.items)
    local out = fault(sim, { reset = true })
    assert.is_true(out.reset)
    local _, after = api(sim, "GET", CMS)
    assert.equal(0, #after.items)
    assert.is_true(tonumber(after.metadata.resourceVersion)
      < tonumber(before.metadata.resourceVersion))
    assert.equal(200, (api(sim, "GET", "/api/v1/namespaces/default")))
  end)

  it("refuses a control request that is not a JSON object", function()
    local code, st = api(sim, "POST", "/_sim/faults", "[1]")
    assert.equal(400, code)
    assert.equal("BadRequest", st.reason)
  end)
end)
