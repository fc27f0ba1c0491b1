-- Fault injection through POST /_sim/faults: failing requests (429 with
-- Retry-After, 500, 503), delays, dropped and truncated watches, history
-- compaction, servers without streaming lists, quiet and short watches,
-- and a full reset.
-- (The API server alone, --no-controllers: what is checked here is its
-- own events and bytes, which kube-root-ca.crt and the default
-- ServiceAccount would add to.)
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
  before_each(function() sim = H.start("--no-controllers") end)
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

  it("holds watches: their events wait in the history, then arrive in order", function()
    local w = H.watch_start(sim, CMS .. "?watch=true&timeoutSeconds=30")
    H.wait_watches(sim, 1)
    assert.same({ held = 1, resourceVersion = fault(sim, {}).resourceVersion },
      fault(sim, { hold_watches = true }))
    for i = 1, 3 do api(sim, "POST", CMS, cm("h" .. i)) end
    -- a watch that starts while held is held too, after what it asked for
    local _, list = api(sim, "GET", CMS)
    local w2 = H.watch_start(sim, CMS .. "?watch=true&timeoutSeconds=30&resourceVersion="
      .. list.metadata.resourceVersion)
    local st
    for _ = 1, 500 do
      st = select(2, api(sim, "GET", "/_sim/state"))
      if st.held_watches == 2 then break end
      H.sleep(0.005)
    end
    assert.same({ 0, 2 }, { st.watches, st.held_watches })
    api(sim, "DELETE", CMS .. "/h1")
    assert.equal("", H.read_file(w.out))
    assert.equal("", H.read_file(w2.out))
    assert.same({ released = 2, resourceVersion = list.metadata.resourceVersion + 1 .. "" },
      fault(sim, { hold_watches = false }))
    local lines = H.watch_lines(w, 4)
    local got = {}
    for i, l in ipairs(lines) do got[i] = l.type .. " " .. l.object.metadata.name end
    assert.same({ "ADDED h1", "ADDED h2", "ADDED h3", "DELETED h1" }, got)
    lines = H.watch_lines(w2, 1)
    assert.same({ "DELETED", "h1" }, { lines[1].type, lines[1].object.metadata.name })
    -- released watches follow live, and saw nothing twice
    api(sim, "POST", CMS, cm("h4"))
    lines = H.watch_lines(w, 5)
    assert.same({ 5, "h4" }, { #lines, lines[5].object.metadata.name })
    lines = H.watch_lines(w2, 2)
    assert.same({ 2, "h4" }, { #lines, lines[2].object.metadata.name })
    H.watch_stop(w)
    H.watch_stop(w2)
  end)

  it("ends a held watch whose events left the history; its resume gets 410", function()
    H.stop(sim)
    sim = H.start("--no-controllers --history 3")
    local _, list = api(sim, "GET", CMS)
    local w = H.watch_start(sim, CMS .. "?watch=true&timeoutSeconds=30")
    H.wait_watches(sim, 1)
    fault(sim, { hold_watches = true })
    for i = 1, 5 do api(sim, "POST", CMS, cm("g" .. i)) end
    fault(sim, { hold_watches = false })
    H.watch_done(w)
    assert.equal("", H.read_file(w.out))
    H.watch_stop(w)
    w = H.watch_start(sim, CMS .. "?watch=true&resourceVersion=" .. list.metadata.resourceVersion)
    H.watch_done(w)
    local lines = H.watch_lines(w, 1)
    H.watch_stop(w)
    assert.same({ "ERROR", 410 }, { lines[1].type, lines[1].object.code })
  end)

  it("drops held watches too", function()
    local w = H.watch_start(sim, CMS .. "?watch=true&timeoutSeconds=30")
    H.wait_watches(sim, 1)
    fault(sim, { hold_watches = true })
    assert.equal(1, fault(sim, { drop_watches = true }).dropped)
    H.watch_done(w)
    H.watch_stop(w)
    assert.equal(0, fault(sim, { hold_watches = false }).released)
  end)

  it("replays a long history whole", function()
    -- 12 MiB of events after the watch's resourceVersion, more than a
    -- stream's unsent bytes may reach: the replay waits for the client
    -- when it is behind
    local _, list = api(sim, "GET", CMS)
    local big = ("x"):rep(700 * 1024)
    for i = 1, 18 do
      local obj = cm("big" .. i)
      obj.data = { a = big }
      assert.equal(201, (api(sim, "POST", CMS, obj)))
    end
    local w = H.watch_start(sim, CMS .. "?watch=true&timeoutSeconds=30&resourceVersion="
      .. list.metadata.resourceVersion)
    local lines = H.watch_lines(w, 18, 20)
    H.watch_stop(w)
    assert.equal(18, #lines)
    assert.equal("big18", lines[18].object.metadata.name)
    assert.equal(#big, #lines[18].object.data.a)
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

  it("refuses streaming lists as a 1.26 server does (watch_list = \"refused\")", function()
    api(sim, "POST", CMS, cm("a"))
    fault(sim, { watch_list = "refused" })
    local q = "?watch=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
      .. "&sendInitialEvents=true&timeoutSeconds=5"
    local code, st = api(sim, "GET", CMS .. q)
    assert.equal(422, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = 'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: '
        .. "resourceVersionMatch is forbidden for watch, resourceVersionMatch: Forbidden: "
        .. "resourceVersionMatch is forbidden unless resourceVersion is provided]",
      reason = "Invalid", code = 422,
      details = { group = "meta.k8s.io", kind = "ListOptions", causes = {
        { reason = "FieldValueForbidden", field = "resourceVersionMatch",
          message = "Forbidden: resourceVersionMatch is forbidden for watch" },
        { reason = "FieldValueForbidden", field = "resourceVersionMatch",
          message = "Forbidden: resourceVersionMatch is forbidden unless resourceVersion "
            .. "is provided" } } } }, st)
    code, st = api(sim, "GET", CMS .. q .. "&resourceVersion=1")
    assert.equal(422, code)
    assert.equal('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
      .. "resourceVersionMatch is forbidden for watch", st.message)
    -- sendInitialEvents alone is a parameter it does not know: a plain watch
    local w = H.watch_start(sim, CMS .. "?watch=true&sendInitialEvents=true&timeoutSeconds=1")
    H.watch_done(w)
    local lines = H.watch_lines(w, 1)
    H.watch_stop(w)
    assert.same({ 1, "ADDED", "a" }, { #lines, lines[1].type, lines[1].object.metadata.name })
    fault(sim, { watch_list = "served" })
    assert.equal(200, (api(sim, "GET", CMS .. q)))
  end)

  it("ignores the streaming-list parameters (watch_list = \"ignored\")", function()
    api(sim, "POST", CMS, cm("a"))
    fault(sim, { watch_list = "ignored" })
    local w = H.watch_start(sim, CMS .. "?watch=true&allowWatchBookmarks=true"
      .. "&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=30")
    H.wait_watches(sim, 1)
    local changed = cm("a")
    changed.data.a = "c"
    api(sim, "PUT", CMS .. "/a", changed)
    local lines = H.watch_lines(w, 2)
    H.watch_stop(w)
    local got = {}
    for i, l in ipairs(lines) do got[i] = l.type .. " " .. l.object.metadata.name end
    assert.same({ "ADDED a", "MODIFIED a" }, got) -- and no initial-events-end bookmark
  end)

  it("keeps watches silent until their end (quiet_watches, watch_timeout)", function()
    fault(sim, { quiet_watches = true, watch_timeout = 3 })
    -- bookmarks were asked for, and a 1.26 server's come ~2 s before the end
    local w = H.watch_start(sim, CMS .. "?watch=true&allowWatchBookmarks=true&timeoutSeconds=600")
    H.wait_watches(sim, 1)
    H.watch_done(w) -- the server ends it at 3 s, not 600
    assert.equal("", H.read_file(w.out))
    H.watch_stop(w)
    fault(sim, { quiet_watches = false, watch_timeout = 0 })
    w = H.watch_start(sim, CMS .. "?watch=true&allowWatchBookmarks=true&timeoutSeconds=3")
    H.watch_done(w)
    local lines = H.watch_lines(w, 1)
    H.watch_stop(w)
    assert.equal("BOOKMARK", lines[1].type)
  end)

  it("refuses fault values it cannot use", function()
    local code, st = api(sim, "POST", "/_sim/faults", { watch_list = "sometimes" })
    assert.equal(400, code)
    assert.equal('watch_list must be "served", "refused" or "ignored", got "sometimes"', st.message)
    code, st = api(sim, "POST", "/_sim/faults", { watch_timeout = "soon" })
    assert.equal(400, code)
    assert.equal('watch_timeout must be a number of seconds, got "soon"', st.message)
  end)

  it("refuses a control request that is not a JSON object", function()
    local code, st = api(sim, "POST", "/_sim/faults", "[1]")
    assert.equal(400, code)
    assert.equal("BadRequest", st.reason)
  end)
end)

describe("kubelua sim, a watch ended by a fault", function()
  local kube = require "kubelua"
  local support = require "spec.support"

  for _, mode in ipairs { "end", true } do
    it("ends its handler at once (drop_watches = " .. tostring(mode) .. "), not at its "
      .. "next look at the clock", function()
      -- a handler that looks once an hour: only the drop can end it now
      local sim = require("kubelua.sim").new { watch_check = 3600 }
      local srv = assert(sim:listen { host = "127.0.0.1", port = 0 })
      local p = io.popen("sh -c 'exec curl -s -N -o /dev/null http://127.0.0.1:" .. srv:port()
        .. CMS .. "?watch=true </dev/null >/dev/null 2>&1 & echo $!'")
      local pid = p:read("*l")
      p:close()
      assert.is_true(support.eventually(function() return sim.watch_handlers == 1 end))
      kube.sleep(0.05) -- the handler sleeps
      assert.equal(1, sim:inject { drop_watches = mode }.dropped)
      assert.is_true(support.eventually(function() return sim.watch_handlers == 0 end))
      os.execute("kill " .. pid .. " 2>/dev/null")
      srv:close()
    end)
  end
end)
