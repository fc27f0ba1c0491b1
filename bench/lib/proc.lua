-- Process and file helpers for the benchmarks that drive other processes
-- (bench/compare.lua, bench/soak.lua): start one in the background, tell
-- whether it still runs, read its /proc figures, and write the kubeconfig
-- that points a client at an in-process simulator.
local _M = {}

function _M.quote(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end

-- The whole file, or nil.
function _M.read(path)
  local f = io.open(path)
  local s = f and f:read("*a")
  if f then f:close() end
  return s
end

-- Starts `cmd` in the background (stdout to out, stderr to err); its pid.
function _M.start(cmd, out, err)
  local p = io.popen("sh -c " .. _M.quote("exec " .. cmd .. " >" .. out .. " 2>" .. err
    .. " & echo $!"))
  local pid = p:read("*l")
  p:close()
  return pid
end

-- Whether pid runs (a zombie waiting for its reaper does not count).
function _M.running(pid)
  local st = io.open("/proc/" .. pid .. "/stat")
  if not st then return false end
  local s = st:read("*l") or ""
  st:close()
  return not s:match("^%d+ %b() [ZX]")
end

-- A "kB" field of /proc/PID/status (VmRSS, VmHWM) in kB, or nil.
function _M.status_kb(pid, field)
  local s = _M.read("/proc/" .. pid .. "/status") or ""
  return tonumber(s:match(field .. ":%s+(%d+) kB"))
end

-- A temporary kubeconfig for http://127.0.0.1:port (plain HTTP, which
-- client-node accepts only with insecure-skip-tls-verify); its path.
function _M.kubeconfig(port)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(([[
apiVersion: v1
kind: Config
clusters:
- name: sim
  cluster: {server: "http://127.0.0.1:%d", insecure-skip-tls-verify: true}
users:
- name: bench
  user: {token: bench}
contexts:
- name: sim
  context: {cluster: sim, user: bench}
current-context: sim
]]):format(port))
  f:close()
  return path
end

return _M
