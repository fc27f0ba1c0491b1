-- Helpers for specs that run `kubelua run` in the background and read its
-- log: start one, wait for log lines, count them. Stop one with
-- sim_helper.stop (SIGTERM, wait, sanitizer check).
local support = require "spec.support"
local helper = require "spec.integration.sim_helper"

local read_file, quote, sleep = helper.read_file, helper.quote, helper.sleep

local _M = {}

-- The binary under test as an absolute path, for a process started in
-- another directory.
local function kubelua_path()
  if support.kubelua:sub(1, 1) == "/" then return support.kubelua end
  local p = io.popen("pwd")
  local cwd = p:read("*l")
  p:close()
  return cwd .. "/" .. support.kubelua
end

-- Runs the shell command cmd in the background, its output to the file
-- log; returns its pid.
function _M.background(cmd, log)
  local p = io.popen("sh -c " .. quote(cmd .. " >" .. log .. " 2>&1 & echo $!"))
  local pid = p:read("*l")
  p:close()
  return tonumber(pid)
end

-- Starts `kubelua run ARGS` (a shell-quoted string); returns { pid, log }.
-- opts.cwd: the directory it runs in; opts.log: the file its output goes
-- to (default a new temporary file); opts.env: NAME=VALUE settings for it.
function _M.start(args, opts)
  opts = opts or {}
  local log = opts.log or os.tmpname()
  local cmd = "exec " .. (opts.env and "env " .. opts.env .. " " or "") .. kubelua_path() .. " run "
    .. args
  if opts.cwd then cmd = "cd " .. quote(opts.cwd) .. " && " .. cmd end
  return { pid = _M.background(cmd, log), log = log }
end

-- The number of matches of pattern in s.
function _M.count(s, pattern)
  local n = 0
  for _ in s:gmatch(pattern) do n = n + 1 end
  return n
end

-- Waits (at most 10 s) until the log has n (default 1) lines matching
-- pattern; returns the log, or raises with it.
function _M.wait_log(proc, pattern, n)
  n = n or 1
  local out
  for _ = 1, 1000 do
    out = read_file(proc.log) or ""
    if _M.count(out, pattern) >= n then return out end
    sleep(0.01)
  end
  error("waited for " .. n .. " × " .. pattern .. " in:\n" .. out, 2)
end

return _M
