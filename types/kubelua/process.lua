---@meta kubelua.process
-- kubelua.process (runtime/lua_process.c): child processes that cannot
-- outlive kubelua, each in a process group of its own.

local process = {}

---Starts a program: {path (no PATH search), args = {...}, log = file for
---its stdout and stderr (appended)}.
---@param opts table
---@return kubelua.process|nil proc
---@return string? err
---@usage local p = assert(process.spawn{ path = "/usr/bin/etcd", args = { "--data-dir", dir }, log = dir .. "/etcd.log" })
function process.spawn(opts) end

---A TCP port on 127.0.0.1 that was free a moment ago.
---@return integer|nil port
---@return string? err
---@usage local port = assert(process.free_port())
function process.free_port() end

---A new private directory (mode 0700) named prefix and six random characters.
---@param prefix string
---@return string|nil path
---@return string? err
---@usage local dir = assert(process.mkdtemp("/tmp/kubelua-"))
function process.mkdtemp(prefix) end

---A child process.
---@class kubelua.process
local proc = {}

---Its pid, also the id of its process group.
---@return integer
---@usage print(p:pid())
function proc:pid() end

---nil while it runs; "exited", code or "signaled", signum once it ended.
---@return string|nil how
---@return integer? code
---@usage local how, code = p:poll()
function proc:poll() end

---Sends SIGname ("TERM", "KILL", ...) to its process group.
---@param name string
---@return boolean sent false when it was already reaped
---@usage p:kill("TERM")
function proc:kill(name) end

return process
