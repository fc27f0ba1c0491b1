-- kubelua.httpd's req:on_close: the callback runs when the client ends a
-- request first, never after its owner ended it, and is let go in every
-- case (a server keeps no callback, nor what it holds, of a request that
-- is over: the simulator's watches hold their resource's history there).
local kube = require "kubelua"
local http = require "kubelua.http"
local httpd = require "kubelua.httpd"
local support = require "spec.support"

describe("kubelua.httpd req:on_close", function()
  local srv, base
  local held = setmetatable({}, { __mode = "v" }) -- what each callback holds
  local ran = {}

  -- A callback for case `name` that holds a table of its own.
  local function callback(name)
    local token = {}
    held[name] = token
    return function(_, why)
      assert(token) -- the callback holds it
      ran[name] = why
    end
  end

  -- Whether the callback for `name` was collected. The compiled code goes
  -- first: a trace recorded through a callback keeps that closure as a
  -- constant (LuaJIT guards on the function when it constifies an
  -- upvalue), a hold that is the JIT's, not the server's.
  local function let_go(name)
    return support.eventually(function()
      jit.flush()
      collectgarbage()
      collectgarbage()
      return held[name] == nil
    end)
  end

  setup(function()
    srv = assert(httpd.listen { host = "127.0.0.1", port = 0, handler = function(req)
      local path = req:path()
      if path == "/finish" then
        req:stream_begin(200)
        req:on_close(callback("finish"))
        req:write("x")
        req:finish()
      elseif path == "/hold" then
        req:stream_begin(200)
        req:on_close(callback("hold"))
        req:write("held\n")
      elseif path == "/late" then
        req:reply(200, nil, "ok")
        req:on_close(callback("late"))
      end
    end })
    base = "http://127.0.0.1:" .. srv:port()
  end)

  teardown(function() srv:close() end)

  it("lets go of a callback that ran when the client went away", function()
    local r, err = http.request { url = base .. "/hold", timeout = 0.3 }
    assert.is_nil(r)
    assert.matches("^http: ", err)
    assert.is_true(support.eventually(function() return ran.hold ~= nil end))
    assert.equal("closed", ran.hold)
    assert.is_true(let_go("hold"))
  end)

  it("lets go of a callback its owner's finish made moot, without running it", function()
    local r = assert(http.request { url = base .. "/finish" })
    assert.equal(200, r.status)
    assert.equal("x", r.body)
    assert.is_true(let_go("finish"))
    kube.sleep(0.05)
    assert.is_nil(ran.finish)
  end)

  it("keeps no callback given after the request ended", function()
    local r = assert(http.request { url = base .. "/late" })
    assert.equal("ok", r.body)
    assert.is_true(let_go("late"))
    assert.is_nil(ran.late)
  end)
end)
