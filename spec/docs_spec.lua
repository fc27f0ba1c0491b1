-- scripts/docs: the reference is complete and current on the tree, and its
-- check fails, saying what to add, on a copy of the sources where a public
-- function, method or option has lost its entry or was added without one,
-- and where docs/ no longer matches the annotations.
local support = require "spec.support"

-- Runs scripts/docs.lua (with --check unless write) on root; returns its
-- exit status and output.
local function docs(root, write)
  return support.sh(support.kubelua .. " run --no-watch --log-level warn scripts/docs.lua -- --root "
    .. root .. " --kubelua " .. support.kubelua .. (write and "" or " --check"))
end

-- The 1-based number of the line of path (under root) that holds text.
local function line_of(root, path, text)
  local n = 0
  for line in io.lines(root .. "/" .. path) do
    n = n + 1
    if line:find(text, 1, true) then return n end
  end
  error(path .. " has no line " .. text)
end

-- Rewrites path under root with fn(text) -> text.
local function edit(root, path, fn)
  local text = support.read(root .. "/" .. path)
  local new = fn(text)
  assert(new ~= text, "the edit of " .. path .. " changed nothing")
  local f = assert(io.open(root .. "/" .. path, "w"))
  f:write(new)
  f:close()
end

local ADD_LUA = 'add "---" lines directly above its definition: a description, '
  .. '"---@param NAME TYPE what", "---@return TYPE what" and "---@usage" with an example '
  .. '(or "---@package" if scripts are not meant to call it)'
local STALE = "scripts/docs: docs/reference.md is stale: run scripts/docs and commit "
  .. "docs/reference.md\n"

describe("scripts/docs", function()
  local root

  before_each(function()
    root = os.tmpname()
    os.remove(root)
    assert.equal(0, (support.sh("mkdir " .. root .. " && cp -r lua types docs " .. root)))
  end)

  after_each(function() os.execute("rm -rf " .. root) end)

  it("passes on the tree: every public function has an entry and docs/ is current", function()
    local status, out = docs(".")
    assert.equal(0, status, out)
    local n, total = out:match("^scripts/docs: (%d+) of (%d+) public functions, methods and "
      .. "options have an entry\n$")
    assert.is_not_nil(n, out)
    assert.equal(total, n)
  end)

  it("names a public function whose annotation was removed, and docs/ as stale", function()
    edit(root, "lua/kubelua/init.lua", function(text)
      return (text:gsub("%-%-%-A reconcile's result asking for another run after seconds %(the "
        .. "key's\n%-%-%-failures are forgotten%)%.\n%-%-%-@param seconds number\n%-%-%-@return "
        .. "table\n%-%-%-@usage return kube%.requeue_after%(30%)\n", ""))
    end)
    local n = line_of(root, "lua/kubelua/init.lua", "function _M.requeue_after(")
    local status, out = docs(root)
    assert.equal(1, status, out)
    assert.equal("scripts/docs: kube.requeue_after (lua/kubelua/init.lua:" .. n .. ") has no "
      .. "entry: " .. ADD_LUA .. "\n" .. STALE, (out:gsub("scripts/docs: %d+ of %d+ .*$", "")))
  end)

  -- Adds `definition` at the end of path (before its return) and checks
  -- that the check names label at its line.
  local function added_without_entry(path, definition, label)
    edit(root, path, function(text)
      return (text:gsub("\nreturn _M\n$", "\n" .. definition .. " end\n\nreturn _M\n"))
    end)
    local n = line_of(root, path, definition)
    local status, out = docs(root)
    assert.equal(1, status, out)
    assert.matches("scripts/docs: " .. label .. " (" .. path .. ":" .. n .. ") has no entry: "
      .. ADD_LUA .. "\n", out, 1, true)
  end

  it("names a function added to a module table without an entry", function()
    added_without_entry("lua/kubelua/init.lua", "function _M.shiny()", "kube.shiny")
  end)

  it("names a method added to an object's type without an entry", function()
    added_without_entry("lua/kubelua/testing.lua", "function Harness:shiny()",
      "kubelua.testing.harness:shiny")
  end)

  it("names a method of a C type whose stub was removed, and where to declare it", function()
    edit(root, "types/kubelua/core.lua", function(text)
      return (text:gsub("%-%-%-Queues key now %(once, however many times it is added before a "
        .. "get%)%.\n%-%-%-@param key string\n%-%-%-@usage q:add%(\"demo/settings\"%)\nfunction "
        .. "workqueue:add%(key%) end\n", ""))
    end)
    local status, out = docs(root)
    assert.equal(1, status, out)
    assert.equal("scripts/docs: kubelua.workqueue:add (C) has no entry: declare it in "
      .. "types/kubelua/core.lua as `function workqueue:add(...) end`, with \"---\" lines above "
      .. "it: a description, \"---@param NAME TYPE what\", \"---@return TYPE what\" and "
      .. "\"---@usage\" with an example\n" .. STALE, (out:gsub("scripts/docs: %d+ of %d+ .*$", "")))
  end)

  it("names an option of kube.controller{} without a field", function()
    edit(root, "lua/kubelua/controller.lua", function(text)
      return (text:gsub("%-%-%-@field workers%? [^\n]*\n", ""))
    end)
    local n = line_of(root, "lua/kubelua/controller.lua", "local KEYS = {")
    local status, out = docs(root)
    assert.equal(1, status, out)
    assert.equal("scripts/docs: option workers of kube.controller{} (lua/kubelua/controller.lua:"
      .. n .. ") has no entry: add \"---@field workers TYPE what\" to the \"---@class\" directly "
      .. "above KEYS\n" .. STALE, (out:gsub("scripts/docs: %d+ of %d+ .*$", "")))
  end)

  it("fails on docs/ older than the annotations, and passes once it is written again", function()
    edit(root, "lua/kubelua/init.lua", function(text)
      return (text:gsub("%-%-%-Runs fn%(%.%.%.%) in a new task", "---Starts fn(...) in a new task"))
    end)
    local status, out = docs(root)
    assert.equal(1, status, out)
    assert.equal(STALE, (out:gsub("scripts/docs: %d+ of %d+ .*$", "")))
    status, out = docs(root, true)
    assert.equal(0, status, out)
    assert.matches("### `kube.spawn(fn, ...)`\n\nStarts fn(...) in a new task",
      support.read(root .. "/docs/reference.md"), 1, true)
    status, out = docs(root)
    assert.equal(0, status, out)
  end)
end)
