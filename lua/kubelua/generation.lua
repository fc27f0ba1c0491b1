-- kubelua.generation: loading controller scripts, and hot reload.
--
-- A generation is one load of a script: its main chunk runs in a fresh
-- global environment (globals do not leak from one generation to the next)
-- with its own `require` for the user's modules, which are loaded again for
-- each generation. What the C core owns survives a reload: informers with
-- their watches and caches, workqueues with their contents and rate-limiter
-- history, the simulator. What the scripts own belongs to their generation:
-- handlers, workers, tasks, timers.
--
-- A reload builds the new generation, then swaps: only when its main chunk
-- returns do the old generation's handlers stop (after delivering what was
-- already queued to them), its idle workers and tasks end (a reconcile in
-- progress finishes), and the informers no generation asked for any more
-- stop watching. New handlers join late, so they first see a synthetic add
-- for every cached object: the new code sees the whole state without a
-- relist. A script that fails to load is logged with file and line, and the
-- old generation keeps running untouched; the failure is logged once for
-- each content its files take (the next trigger with the same bytes does not
-- try again), and their return to the running content is said once.
--
-- Numbers: g.n identifies a generation to the core (its tasks, timers and
-- informers), and every load uses one, failed or not, so that nothing late
-- of a failed load is taken for a later one's; g.number counts the loads
-- that succeeded, and is what the log and kubelua_reload_generation show.
--
-- Triggers: a change of the script or of a module it required (or of their
-- directories: an editor's rename-over-write, a ConfigMap volume's `..data`
-- symlink swap), when the content really changed; and SIGHUP, always.

local core = require "kubelua.core"
local informer = require "kubelua.informer"
local metrics = require "kubelua.metrics"

local type, setmetatable, setfenv = type, setmetatable, setfenv
local loadfile, loadstring = loadfile, loadstring
local error, tostring, unpack, concat = error, tostring, unpack, table.concat
local pairs, ipairs, sort = pairs, ipairs, table.sort
local io_open, searchpath = io.open, package.searchpath

local _M = {}

local last = 0     -- the last generation number handed out (g.n)
local numbered = 0 -- the loads that succeeded (g.number)
local current      -- the active generation
local failed       -- the last reload that failed since current began, if any
local watcher      -- core.watch handle on its files
local poll         -- its poll period (nil: the runtime's default)
local retire_hooks = {}

-- fn(gen) runs when generation gen retires or fails to load: kubelua's
-- shared informers use it to stop the ones nobody asks for any more.
function _M.on_retire(fn) retire_hooks[#retire_hooks + 1] = fn end

-- Generations that retired or failed to load, as a set: a worker asks it
-- once per key, which is cheaper than asking the runtime.
_M.dead = {}

local function retired(n, drain)
  _M.dead[n] = true
  informer.retire(n, drain)
  for i = 1, #retire_hooks do retire_hooks[i](n) end
end

local function log(level, msg, fields)
  local out = {}
  for k, v in pairs(fields) do out[#out + 1] = " " .. k .. "=" .. tostring(v) end
  sort(out)
  core.log(level, msg, concat(out))
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

-- The whole of file path, or nil when it cannot be read (also for the
-- webhook server's certificate files).
local function read_file(path)
  local f = io_open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end
_M.read_file = read_file

-- The user's modules next to the script are found by require.
local dirs_added = {}
local function add_script_dir(path)
  local dir = dirname(path)
  if dirs_added[dir] then return end
  dirs_added[dir] = true
  package.path = dir .. "/?.lua;" .. dir .. "/?/init.lua;" .. package.path
end

-- Loads a file as a chunk and notes the exact text that was loaded (false:
-- none could be read), which later tells a real change from a touch.
local function load_noted(g, path)
  local text = read_file(path)
  g.files[#g.files + 1] = path
  g.texts[#g.texts + 1] = text or false
  if not text then return loadfile(path) end -- its "cannot open" message
  return loadstring(text, "@" .. path)
end

local function changed(g)
  for i = 1, #g.files do
    if (read_file(g.files[i]) or false) ~= g.texts[i] then return true end
  end
  return false
end

-- Whether two loads read the same files with the same bytes.
local function same_content(a, b)
  if #a.files ~= #b.files then return false end
  for i = 1, #a.files do
    if a.files[i] ~= b.files[i] or a.texts[i] ~= b.texts[i] then return false end
  end
  return true
end

-- require for one generation: modules the runtime or the test runner have
-- loaded stay shared; Lua modules found on package.path are loaded afresh,
-- in the generation's environment, and their files are watched.
local function generation_require(g)
  return function(name)
    if type(name) ~= "string" then
      error("bad argument #1 to 'require' (string expected, got " .. type(name) .. ")", 2)
    end
    local v = g.loaded[name]
    if v ~= nil then return v end
    if package.loaded[name] ~= nil or package.preload[name] then return require(name) end
    local path = searchpath(name, package.path)
    if not path then return require(name) end -- a C module, or the usual error
    local chunk, err = load_noted(g, path)
    if not chunk then error(err, 2) end
    setfenv(chunk, g.env)
    g.loaded[name] = true -- a cycle gets true, as with the standard require
    local r = chunk(name, path)
    if r == nil then r = true end
    g.loaded[name] = r
    return r
  end
end

-- load(path [, args]) -> generation | nil, message, attempt: runs the script
-- as a new generation and, when it succeeds, retires the active one; a
-- failed attempt still tells which files it read.
-- Messages: "cannot load script: FILE:LINE: …" (syntax, missing file) and
-- "script failed: FILE:LINE: …" with a traceback (an error at top level).
function _M.load(path, args)
  if type(path) ~= "string" then
    error("kubelua.generation.load: expected a script path, got " .. type(path), 2)
  end
  args = args or {}
  add_script_dir(path)
  local g = { path = path, args = args, loaded = {}, files = {}, texts = {} }
  local chunk, err = load_noted(g, path)
  if not chunk then return nil, "cannot load script: " .. err, g end
  last = last + 1
  g.n = last
  local env = setmetatable({}, { __index = _G })
  env._G = env
  env.require = generation_require(g)
  local arg = { [0] = path }
  for i = 1, #args do arg[i] = args[i] end
  env.arg = arg
  g.env = env
  setfenv(chunk, env)
  local ok, msg = core.load(g.n, chunk, unpack(args))
  if not ok then
    retired(g.n, false)
    return nil, "script failed: " .. tostring(msg), g
  end
  local old = current
  numbered = numbered + 1
  g.number = numbered
  current, failed = g, nil
  metrics.reload_generation:set(g.number)
  if old then
    core.retire(old.n)
    retired(old.n, true)
  end
  return g
end

-- unload(): the active generation retires with nothing to replace it
-- (the test harness, between specs).
-- In a task, it then waits (at most `wait` seconds, default 0) until the
-- generation's reconciles in progress have finished.
function _M.unload(wait)
  local g = current
  current, failed = nil, nil
  if watcher then watcher:close() watcher = nil end
  if not g then return end
  core.retire(g.n)
  retired(g.n, true)
  local deadline = core.monotonic() + (wait or 0)
  while core.generation_busy(g.n) > 0 and core.monotonic() < deadline do core.sleep(0.01) end
end

function _M.current() return current and current.n or 0 end

local watch

-- reload([force]) -> true | nil, message: loads the active generation's
-- script again. Without force, nothing happens when no file it loaded has
-- changed (a touch, an atime update, a second event for one change), nor
-- when the files still hold what the last failed reload read.
function _M.reload(force)
  local g = current
  if not g then return nil, "no script loaded" end
  if not force then
    if not changed(g) then
      if failed then
        failed = nil
        log("info", "files back to generation " .. g.number .. "'s content; it keeps running",
            { script = g.path })
        if watcher then watch(g) end
      end
      return true
    end
    if failed and not changed(failed) then return nil, failed.err end
  end
  local new, err, attempt = _M.load(g.path, g.args)
  if not new then
    if force or not failed or not same_content(attempt, failed) then
      metrics.reload_failures:inc()
      log("error", "reload failed; generation " .. g.number .. " keeps running: " .. err,
          { script = g.path })
    end
    attempt.err, failed = err, attempt
    if watcher then watch(g, attempt) end
    return nil, err
  end
  log("info", "reloaded: generation " .. new.number,
      { script = new.path, modules = #new.files - 1 })
  if watcher then watch(new) end
  return true
end

-- Watches a generation's files (the runtime adds their directories) and
-- those a failed attempt read besides, if any.
watch = function(g, attempt)
  local files, seen = {}, {}
  for _, l in ipairs({ g, attempt }) do
    for i = 1, #l.files do
      if not seen[l.files[i]] then files[#files + 1], seen[l.files[i]] = l.files[i], true end
    end
  end
  if watcher then watcher:close() end
  watcher = core.watch(files, function() _M.reload(false) end, poll)
  -- A change made while it loaded, before the watch began.
  if changed(attempt or g) then watcher:poke() end
end

-- start(path, args, opts) -> true | nil, message: `kubelua run`'s first
-- load; then reloads on SIGHUP, and on file changes unless opts.watch is
-- false (opts.poll: how often the files are looked at regardless).
function _M.start(path, args, opts)
  poll = opts and opts.poll
  local g, err = _M.load(path, args)
  if not g then return nil, err end
  core.on_hup(function()
    log("info", "SIGHUP: reloading", { script = current and current.path or path })
    _M.reload(true)
  end)
  if not opts or opts.watch ~= false then watch(g) end
  return true
end

return _M
