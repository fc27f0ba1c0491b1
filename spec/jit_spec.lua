-- The runtime's LuaJIT workaround (runtime/lua_kube.c, jitfix_traversal):
-- on the LuaJIT snapshots whose x64 backend truncates lj_vm_next's pointer
-- result (Debian 12's among them), next, pairs and table.foreach go through
-- a C next, so no trace traverses a table; they behave as the builtins
-- otherwise.
--
-- The crash itself cannot be a deterministic test: whether a traversal's
-- trace gets the swapped registers depends on where the process's objects
-- lie relative to the dispatch table. Without the workaround, running
-- spec/informer_spec.lua 60 times in a loop crashes one or two of them.
local jutil = require "jit.util"
local vmdef = require "jit.vmdef"

local AFFECTED = jit.version == "LuaJIT 2.1.0-beta3" and jit.arch == "x64"

local NEXT_CALL
for i = 0, #vmdef.ircall do
  if vmdef.ircall[i] == "lj_vm_next" then NEXT_CALL = i end
end

local function ir_op(ot)
  local i = 6 * math.floor(ot / 256)
  return (vmdef.irnames:sub(i + 1, i + 6):gsub(" +$", ""))
end

-- Numbers of the live traces, and of those that traverse a table in
-- compiled code (IR_NEXT, or its lowering: a call of lj_vm_next).
local function traces()
  local all, traversing = {}, {}
  for tr = 1, 65535 do
    local info = jutil.traceinfo(tr)
    if info then
      all[#all + 1] = tr
      for ref = 1, info.nins do
        local _, ot, _, op2 = jutil.traceir(tr, ref)
        local op = ir_op(ot)
        if op == "NEXT" or (op:sub(1, 4) == "CALL" and op2 == NEXT_CALL) then
          traversing[#traversing + 1] = tr
          break
        end
      end
    end
  end
  return all, traversing
end

-- Hot loops over tables in each way the parser and the recorder treat
-- differently: pairs, `next, t`, next() as a function, and table.foreach.
local function traverse(t)
  local n = 0
  for _ = 1, 300 do
    for k, v in pairs(t) do
      if type(k) == "string" then n = n + #k else n = n + v end
    end
    for k in next, t do
      if k == "zz" then n = n + 1 end
    end
    local k = next(t)
    while k ~= nil do
      n = n + 1
      k = next(t, k)
    end
    table.foreach(t, function(_, v) n = n + v end)
  end
  return n
end

local function numeric()
  local n = 0
  for i = 1, 1000 do n = n + i % 7 end
  return n
end

describe("the runtime's LuaJIT", function()
  describe("next, pairs and table.foreach", function()
    it("visit every key of the array and the hash part once", function()
      local t = { 10, 20, 30, a = 1, b = 2, [true] = "x" }
      local seen, count = {}, 0
      for k, v in pairs(t) do
        assert.is_nil(seen[k])
        seen[k] = v
        count = count + 1
      end
      assert.equal(6, count)
      assert.same(t, seen)
      local k, v = next(t)
      assert.equal(t[k], v)
      assert.is_nil(next({}))
      assert.is_nil((next({ a = 1 }, "a")))
    end)

    it("allow assigning existing fields during the traversal", function()
      local t = { a = 1, b = 2, c = 3 }
      for k in pairs(t) do t[k] = nil end
      assert.is_nil(next(t))
    end)

    it("raise as the builtins do", function()
      local function err_of(f)
        local ok, err = pcall(f)
        assert.is_false(ok)
        return (err:gsub("^[^:]*:%d+: ", ""))
      end
      assert.equal("invalid key to 'next'",
                   err_of(function() local k = next({}, "missing"); return k end))
      assert.equal("bad argument #1 to 'next' (table expected, got number)",
                   err_of(function() local k = next(1); return k end))
      assert.equal("bad argument #1 to 'pairs' (table expected, got nil)",
                   err_of(function() local f = pairs(nil); return f end))
      assert.equal("bad argument #1 to 'pairs' (value expected)",
                   err_of(function() local f = pairs(); return f end))
    end)

    it("run table.foreach until its function returns a value", function()
      local seen = {}
      local foreach = table.foreach
      assert.is_nil(foreach({ a = 1, b = 2 }, function(k, v) seen[k] = v end))
      assert.same({ a = 1, b = 2 }, seen)
      assert.equal("b", foreach({ a = 1, b = 2 }, function(k, v) if v == 2 then return k end end))
      local ok, err = pcall(function() local r = foreach(nil, print); return r end)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'foreach' (table expected, got nil)", err, 1, true)
      ok, err = pcall(function() local r = foreach({}, 1); return r end)
      assert.is_false(ok)
      assert.matches("bad argument #2 to 'foreach' (function expected, got number)", err, 1,
                     true)
    end)

    it("call a cdata's __pairs", function()
      local ffi = require "ffi"
      local ok = pcall(ffi.cdef, "typedef struct { int a; } kubelua_jit_spec_t;")
      assert.is_true(ok)
      local ct = ffi.metatype("kubelua_jit_spec_t", { __pairs = function(c)
        return function(_, k) if not k then return "a", c.a end end, c, nil
      end })
      local got = {}
      for k, v in pairs(ct(7)) do got[k] = v end
      assert.same({ a = 7 }, got)
    end)
  end)

  describe("compiled code", function()
    it("never traverses a table where LuaJIT miscompiles it", function()
      if not AFFECTED then
        pending("LuaJIT " .. jit.version .. " on " .. jit.arch .. " is not affected")
        return
      end
      assert.is_number(NEXT_CALL)
      assert.is_true((jit.status()))
      jit.flush()
      local t = { 1, 2, 3 }
      for i = 1, 20 do t["key" .. i] = i end
      assert.equal(traverse(t), traverse(t))
      assert.equal(numeric(), numeric())
      local all, traversing = traces()
      assert.is_true(#all > 0, "nothing was compiled: the check proves nothing")
      assert.same({}, traversing)
    end)
  end)
end)
