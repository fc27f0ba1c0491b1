-- Helpers shared by the specs.
local assert = require "luassert"

local _M = {}

-- Asserts that fn(...) raises exactly `msg`, positioned at the spec's own
-- line ("spec/….lua:N: msg"), as misuse errors are.
function _M.raises(msg, fn, ...)
  local ok, err = pcall(fn, ...)
  assert(not ok, "expected an error: " .. msg)
  err = tostring(err)
  local where, rest = err:match("^(spec/[%w_/]+%.lua:%d+): (.*)$")
  assert(where, "the error names no spec position: " .. err)
  assert.equal(msg, rest)
end

-- Waits until fn() is true, at most `secs` (default 5) while the loop runs
-- (inside a task); returns whether it became true.
function _M.eventually(fn, secs)
  local kube = require "kubelua"
  local deadline = kube.monotonic() + (secs or 5)
  while kube.monotonic() < deadline do
    if fn() then return true end
    kube.sleep(0.01)
  end
  return fn() and true or false
end

-- The kube-root-ca.crt ConfigMap of namespace ns on harness t's server:
-- waited for where a control plane publishes it (the simulator's, or a
-- real kube-controller-manager), created as its root-CA publisher would
-- where none runs (a real API server alone), so that a spec sees the
-- objects a cluster has in every namespace on either server.
function _M.root_ca(t, ns)
  if t.apiserver == "real" and not t.controller_manager then
    return t:create{ apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "kube-root-ca.crt", namespace = ns },
      data = { ["ca.crt"] = assert(_M.read(t.cp.ca_file)) } }
  end
  return t:eventually(function() return t:get("v1", "configmaps", ns, "kube-root-ca.crt") end)
end

-- The keys of table t, sorted.
_M.sorted_keys = require("kubelua.sim.util").sorted_keys

-- An object's conditions as { type, status, reason, message } each, in
-- order: what the workload specs compare.
function _M.conditions(obj)
  local out = {}
  for i, c in ipairs(obj.status.conditions or {}) do
    out[i] = { c.type, c.status, c.reason, c.message }
  end
  return out
end

-- The Pods of namespace ns (default "demo") not being deleted, by name.
function _M.live_pods(t, ns)
  local out = {}
  for _, p in ipairs(t:list("v1", "pods", ns or "demo")) do
    if not p.metadata.deletionTimestamp then out[#out + 1] = p end
  end
  table.sort(out, function(a, b) return a.metadata.name < b.metadata.name end)
  return out
end

-- The whole of file path (raises when it cannot be read).
function _M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- The kubelua binary under test.
_M.kubelua = os.getenv("KUBELUA") or "build/kubelua"

-- Writes `text` to a new temporary file and returns its name.
function _M.tempfile(text, suffix)
  local name = os.tmpname()
  if suffix then
    os.remove(name)
    name = name .. suffix
  end
  local f = assert(io.open(name, "w"))
  f:write(text)
  f:close()
  return name
end

-- Runs a shell command; returns its exit status and its output.
function _M.sh(cmd)
  local out_name = os.tmpname()
  local status = os.execute(cmd .. " >" .. out_name .. " 2>&1")
  local f = assert(io.open(out_name))
  local out = f:read("*a")
  f:close()
  os.remove(out_name)
  if type(status) == "number" then status = status / 256 end -- Lua 5.1
  return math.floor(status), out
end

-- Runs a Lua script with `kubelua run`; returns its exit status and output.
function _M.run_script(source, args, options)
  local path = _M.tempfile(source, ".lua")
  local status, out = _M.sh(_M.kubelua .. " run " .. (options or "") .. " " .. path
                            .. " " .. (args or ""))
  os.remove(path)
  return status, out, path
end

return _M
