-- kubelua.httpd's waits on a request: a handler blocked in req:wait_drain
-- hears at once that the request ended, whoever ended it (another task's
-- req:finish), rather than waiting on a client that may never read again;
-- req:sleep(s) sleeps like kube.sleep but returns early, false, when the
-- request ends (its client went, or another task ended it).
local kube = require "kubelua"
local httpd = require "kubelua.httpd"
local support = require "spec.support"

describe("kubelua.httpd waits", function()
  local srv, port
  local reqs, waited = {}, {}

  setup(function()
    srv = assert(httpd.listen { host = "127.0.0.1", port = 0, handler = function(req)
      local name = req:path():sub(2)
      req:stream_begin(200)
      reqs[name] = req
      if name:match("^sleep") then
        req:write("sleeping\n")
        local t0 = kube.monotonic()
        local alive = req:sleep(name == "sleep_short" and 0.05 or 30)
        waited[name] = { alive, kube.monotonic() - t0 }
        if alive then req:finish() end
        return
      end
      local mib = string.rep("x", 1024 * 1024)
      while req:buffered() <= 2 * 1024 * 1024 do
        if not req:write(mib) then return end
      end
      local t0 = kube.monotonic()
      local ok = req:wait_drain()
      waited[name] = { ok, kube.monotonic() - t0 }
    end })
    port = srv:port()
  end)

  teardown(function() srv:close() end)

  -- A client of /name that reads a few bytes a second: the handler's
  -- output stays over the low-water mark. Returns its pid.
  local function slow_client(name)
    local p = io.popen("sh -c 'exec curl -s -N --limit-rate 1k -o /dev/null "
      .. "http://127.0.0.1:" .. port .. "/" .. name .. " </dev/null >/dev/null 2>&1 & echo $!'")
    local pid = p:read("*l")
    p:close()
    return pid
  end

  it("sleeps the seconds given while the request is on, and says it is", function()
    local r = assert(require("kubelua.http").request {
      url = "http://127.0.0.1:" .. port .. "/sleep_short" })
    assert.equal("sleeping\n", r.body)
    assert.is_true(waited.sleep_short[1])
    assert.is_true(waited.sleep_short[2] >= 0.04)
  end)

  it("wakes a sleeping handler, with false, when another task ends its request", function()
    local pid = slow_client("sleep_finish")
    assert.is_true(support.eventually(function() return reqs.sleep_finish ~= nil end))
    kube.sleep(0.1)
    assert.is_nil(waited.sleep_finish)
    assert.is_true(reqs.sleep_finish:finish())
    assert.is_true(support.eventually(function() return waited.sleep_finish ~= nil end, 2))
    assert.same({ false }, { waited.sleep_finish[1] })
    assert.is_true(waited.sleep_finish[2] < 2)
    os.execute("kill " .. pid .. " 2>/dev/null")
  end)

  it("wakes a sleeping handler, with false, when its client goes", function()
    local pid = slow_client("sleep_gone")
    assert.is_true(support.eventually(function() return reqs.sleep_gone ~= nil end))
    kube.sleep(0.1)
    os.execute("kill " .. pid .. " 2>/dev/null")
    assert.is_true(support.eventually(function() return waited.sleep_gone ~= nil end, 2))
    assert.same({ false }, { waited.sleep_gone[1] })
    assert.is_false(reqs.sleep_gone:sleep(1)) -- over: at once
  end)

  it("refuses seconds that are not a finite number, and a caller outside a task", function()
    local req = reqs.sleep_gone
    support.raises("req:sleep: seconds must be a number, got string",
      function() req:sleep("1") end)
    support.raises("req:sleep: seconds must be finite, got inf", function() req:sleep(1 / 0) end)
    local ok, err = coroutine.wrap(function() -- a coroutine that is not a task
      return pcall(function() req:sleep(1) end)
    end)()
    assert.is_false(ok)
    assert.matches("^spec/integration/httpd_waits_spec.lua:%d+: req:sleep: not inside a task$", err)
  end)

  for _, how in ipairs { "finish" } do
    it("wakes a handler waiting for a drain when another task calls req:" .. how, function()
      local pid = slow_client(how)
      assert.is_true(support.eventually(function()
        return reqs[how] and reqs[how]:buffered() > 2 * 1024 * 1024
      end))
      kube.sleep(0.1) -- the handler is waiting now
      assert.is_nil(waited[how])
      assert.is_true(reqs[how]:finish())
      assert.is_true(support.eventually(function() return waited[how] ~= nil end, 2))
      assert.is_false(waited[how][1])
      assert.is_true(waited[how][2] < 2)
      os.execute("kill " .. pid .. " 2>/dev/null")
    end)
  end
end)
