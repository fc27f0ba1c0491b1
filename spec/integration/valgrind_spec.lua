-- Memory safety beyond the sanitizer build: the release binary under
-- valgrind memcheck, running the mirror example (informers, watches,
-- workers, the in-process simulator) and a run of hot reloads while
-- events flow. No invalid access, and nothing definitely lost.
local support = require "spec.support"

local function memcheck(args)
  local status, out = support.sh("valgrind --error-exitcode=9 --leak-check=full"
    .. " --errors-for-leak-kinds=definite " .. support.kubelua .. " run " .. args)
  return status, out
end

describe("valgrind memcheck", function()
  -- valgrind cannot run a binary built with AddressSanitizer
  local _, libs = support.sh("ldd " .. support.kubelua)
  local sanitized = libs:find("libasan", 1, true) ~= nil

  local check = sanitized and pending or it

  check("finds nothing in the mirror example", function()
    local status, out = memcheck("--sim examples/mirror/controller.lua")
    assert.equal(0, status, out)
    assert.matches("the copies match their sources; stopping", out, 1, true)
    assert.matches("ERROR SUMMARY: 0 errors from 0 contexts", out, 1, true)
    assert.is_truthy(out:find("no leaks are possible", 1, true)
      or out:find("definitely lost: 0 bytes", 1, true), out)
  end)

  check("finds nothing while scripts reload and events flow", function()
    local status, out = memcheck("bench/reload.lua 30")
    assert.equal(0, status, out)
    assert.matches('"reloads":30,', out, 1, true)
    assert.matches('"lost":0}', out, 1, true)
    assert.matches("ERROR SUMMARY: 0 errors from 0 contexts", out, 1, true)
  end)
end)
