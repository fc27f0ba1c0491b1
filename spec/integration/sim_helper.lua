-- Helpers for the simulator specs: start `kubelua sim` as a separate
-- process on an ephemeral port, talk HTTP to it with the curl CLI, read
-- fixtures, and compare answers with volatile values (uids, timestamps,
-- resourceVersions) masked. The spec process blocks in curl; that is fine,
-- because the server is another process.
local json = require "kubelua.json"
local support = require "spec.support"

local _M = {}

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
_M.quote = shell_quote

local function read_file(name)
  local f = io.open(name, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end
_M.read_file = read_file

local ffi = require "ffi"
ffi.cdef [[
  int usleep(unsigned int usec);
  int kill(int pid, int sig);
]]

local function sleep(s) ffi.C.usleep(math.floor(s * 1e6)) end
_M.sleep = sleep

-- Whether pid runs (a zombie waiting for a reaper does not count).
local function alive(pid)
  if ffi.C.kill(tonumber(pid), 0) ~= 0 then return false end
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local stat = f:read("*l") or ""
  f:close()
  return not stat:match("^%d+ %b() [ZX]")
end
_M.alive = alive

-- Starts a simulator; args are extra command-line options. Returns
-- { pid, port, base, log }.
function _M.start(args)
  local log = os.tmpname()
  local cmd = "exec " .. support.kubelua .. " sim --listen 127.0.0.1:0 " .. (args or "")
  local p = io.popen("sh -c " .. shell_quote(cmd .. " >" .. log .. " 2>&1 & echo $!"))
  local pid = p:read("*l")
  p:close()
  local port
  for _ = 1, 500 do
    local out = read_file(log) or ""
    port = out:match("listening on https?://[^\n]*:(%d+)\n")
    if port then break end
    if out:match("kubelua sim: ") and not out:match("listening") then break end
    sleep(0.01)
  end
  assert(port, "the simulator did not start: " .. (read_file(log) or ""))
  local scheme = (args or ""):find("--tls-cert", 1, true) and "https" or "http"
  return { pid = pid, port = tonumber(port), base = scheme .. "://127.0.0.1:" .. port, log = log }
end

-- Stops it with SIGTERM and waits; returns its log.
function _M.stop(sim)
  ffi.C.kill(tonumber(sim.pid), 15)
  for _ = 1, 500 do
    if not alive(sim.pid) then break end
    sleep(0.01)
  end
  local out = read_file(sim.log) or ""
  os.remove(sim.log)
  -- the ASan+UBSan build reports leaks and undefined behaviour here
  assert(not out:find("Sanitizer", 1, true) and not out:find("runtime error:", 1, true),
    "the simulator reported:\n" .. out)
  return out
end

-- A minimal blocking HTTP/1.1 client over a plain socket (LuaJIT FFI): one
-- request per connection. curl costs ~50 ms a process here, which adds up
-- over hundreds of requests; this costs well under one.
ffi.cdef [[
  int socket(int domain, int type, int protocol);
  int connect(int fd, const void *addr, unsigned int len);
  long write(int fd, const void *buf, unsigned long n);
  long read(int fd, void *buf, unsigned long n);
  int close(int fd);
  int setsockopt(int fd, int level, int name, const void *val, unsigned int len);
  struct kl_spec_sockaddr_in { unsigned short family; unsigned short port;
                               unsigned char addr[4]; unsigned char zero[8]; };
  struct kl_spec_timeval { long sec; long usec; };
]]

local function dechunk(body)
  local out, i = {}, 1
  while true do
    local size, rest = body:match("^(%x+)[^\r]*\r\n()", i)
    if not size then break end
    local n = tonumber(size, 16)
    if n == 0 then break end
    out[#out + 1] = body:sub(rest, rest + n - 1)
    i = rest + n + 2
  end
  return table.concat(out)
end

local function raw_request(sim, method, path, headers, body)
  local fd = ffi.C.socket(2, 1, 0)
  assert(fd >= 0, "socket failed")
  local tv = ffi.new("struct kl_spec_timeval", 10, 0)
  ffi.C.setsockopt(fd, 1, 20, tv, ffi.sizeof(tv)) -- SO_RCVTIMEO
  local sa = ffi.new("struct kl_spec_sockaddr_in")
  sa.family = 2
  sa.port = bit.bor(bit.rshift(sim.port, 8), bit.lshift(bit.band(sim.port, 255), 8))
  sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = 127, 0, 0, 1
  assert(ffi.C.connect(fd, sa, ffi.sizeof(sa)) == 0, "connect failed")
  local lines = { method .. " " .. path .. " HTTP/1.1", "Host: 127.0.0.1", "Connection: close" }
  for k, v in pairs(headers) do lines[#lines + 1] = k .. ": " .. v end
  if body then lines[#lines + 1] = "Content-Length: " .. #body end
  local req = table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or "")
  local off = 0
  while off < #req do
    local n = ffi.C.write(fd, ffi.cast("const char *", req) + off, #req - off)
    assert(n > 0, "write failed")
    off = off + tonumber(n)
  end
  local buf, parts = ffi.new("char[65536]"), {}
  while true do
    local n = tonumber(ffi.C.read(fd, buf, 65536))
    if n <= 0 then break end
    parts[#parts + 1] = ffi.string(buf, n)
  end
  ffi.C.close(fd)
  local resp = table.concat(parts)
  local head, rest = resp:match("^(.-)\r\n\r\n(.*)$")
  assert(head, "no response")
  local code = tonumber(head:match("^HTTP/1%.%d (%d+)"))
  local hs = {}
  for line in head:gmatch("[^\r\n]+") do
    local k, v = line:match("^([^:]+):%s*(.*)$")
    if k then hs[k:lower()] = v end
  end
  if (hs["transfer-encoding"] or ""):lower() == "chunked" then rest = dechunk(rest) end
  return code, hs, rest
end

-- request(sim, method, path, opts) -> status, headers, body, decoded
-- opts.headers: { name = value } or list of "Name: value"; opts.body: a
-- string or a table (sent as JSON); opts.user_agent (default curl's, as
-- the fixtures were captured with curl 7.88.1); opts.curl: go through the
-- curl CLI (always for https).
function _M.request(sim, method, path, opts)
  opts = opts or {}
  if not opts.curl and sim.base:sub(1, 5) == "http:" then
    local headers = { ["User-Agent"] = opts.user_agent or "curl/7.88.1", Accept = "*/*" }
    for k, v in pairs(opts.headers or {}) do
      if type(k) == "number" then
        local name, value = v:match("^([^:]+):%s*(.*)$")
        headers[name] = value
      else
        headers[k] = v
      end
    end
    local body = opts.body
    if body ~= nil and type(body) ~= "string" then body = json.encode(body) end
    if body ~= nil then
      local has_ct = false
      for k in pairs(headers) do has_ct = has_ct or k:lower() == "content-type" end
      if not has_ct then headers["Content-Type"] = "application/json" end
    end
    local code, hs, raw = raw_request(sim, method, path, headers, body)
    return code, hs, raw, json.decode(raw)
  end
  local hdr, out = os.tmpname(), os.tmpname()
  local args = { "curl -s -S -k -X " .. method, "-o " .. out, "-D " .. hdr,
    "-w '%{http_code}'" }
  for k, v in pairs(opts.headers or {}) do
    args[#args + 1] = "-H " .. shell_quote(type(k) == "number" and v or (k .. ": " .. v))
  end
  if opts.user_agent then args[#args + 1] = "-A " .. shell_quote(opts.user_agent) end
  local reqfile
  if opts.body ~= nil then
    local body = opts.body
    if type(body) ~= "string" then body = json.encode(body) end
    reqfile = support.tempfile(body)
    args[#args + 1] = "--data-binary @" .. reqfile
    local has_ct = false
    for k, v in pairs(opts.headers or {}) do
      local name = type(k) == "number" and v:match("^[^:]+") or k
      if name:lower() == "content-type" then has_ct = true end
    end
    if not has_ct then args[#args + 1] = "-H 'Content-Type: application/json'" end
  end
  args[#args + 1] = shell_quote(sim.base .. path)
  local p = io.popen(table.concat(args, " ") .. " 2>&1")
  local code = p:read("*a")
  p:close()
  if reqfile then os.remove(reqfile) end
  local headers = {}
  for line in (read_file(hdr) or ""):gmatch("[^\r\n]+") do
    local k, v = line:match("^([^:]+):%s*(.*)$")
    if k then headers[k:lower()] = v end
  end
  local body = read_file(out) or ""
  os.remove(hdr)
  os.remove(out)
  local decoded = json.decode(body)
  return tonumber(code), headers, body, decoded
end

-- api(sim, method, path, body, headers, user_agent) -> status, decoded
-- body, raw body: request() for the specs that need no response headers.
function _M.api(sim, method, path, body, headers, user_agent)
  local code, _, raw, obj = _M.request(sim, method, path, { body = body, headers = headers,
    user_agent = user_agent })
  return code, obj, raw
end

-- The names of a list's items, in order.
function _M.names(list)
  local out = {}
  for i, it in ipairs(list.items) do out[i] = it.metadata.name end
  return out
end

-- A fixture from spec/fixtures/apiserver by its number ("15").
local fixture_names
function _M.fixture(n)
  if not fixture_names then
    fixture_names = {}
    local p = io.popen("ls spec/fixtures/apiserver/")
    for line in p:lines() do
      local num = line:match("^(%d+)%-.*%.json$")
      if num then fixture_names[num] = "spec/fixtures/apiserver/" .. line end
    end
    p:close()
  end
  local name = fixture_names[n]
  assert(name, "no fixture " .. n)
  return assert(json.decode(read_file(name)))
end

local volatile = { uid = true, creationTimestamp = true, resourceVersion = true, time = true,
  lastTransitionTime = true, deletionTimestamp = true, continue = true,
  serverAddress = true }

-- The server orders managedFields by operation, time (in seconds), manager,
-- apiVersion and subresource. With the times masked, the order they decide
-- goes too: two writes a second apart swap two entries that the recording
-- (made within one second) has the other way round.
local function managed_key(e)
  if type(e) ~= "table" then return "" end
  return table.concat({ tostring(e.operation), tostring(e.manager), tostring(e.apiVersion),
    tostring(e.subresource or "") }, "\0")
end

-- A copy of v with volatile values replaced by "<x>" (strings only, so a
-- null stays null and a missing field stays missing).
local function mask(v)
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do
    if volatile[k] and type(x) == "string" then
      t[k] = "<x>"
    else
      t[k] = mask(x)
    end
  end
  if type(t.managedFields) == "table" then
    table.sort(t.managedFields, function(a, b) return managed_key(a) < managed_key(b) end)
  end
  return setmetatable(t, getmetatable(v))
end
_M.mask = mask

-- Drops managedFields (for bodies whose ownership details are not modelled).
function _M.without_managed(v)
  v = mask(v)
  if type(v) == "table" and type(v.metadata) == "table" then v.metadata.managedFields = nil end
  if type(v) == "table" and type(v.items) == "table" then
    for _, it in ipairs(v.items) do
      if type(it.metadata) == "table" then it.metadata.managedFields = nil end
    end
  end
  return v
end

-- Starts `curl -N` on a watch in the background, writing to a file.
function _M.watch_start(sim, path, headers)
  local out = os.tmpname()
  local h = ""
  for k, v in pairs(headers or {}) do h = h .. " -H " .. shell_quote(k .. ": " .. v) end
  local p = io.popen("sh -c " .. shell_quote("curl -s -N -k" .. h .. " " .. shell_quote(sim.base
    .. path) .. " >" .. out .. " 2>/dev/null & echo $!"))
  local pid = p:read("*l")
  p:close()
  return { pid = pid, out = out }
end

-- Waits until the simulator serves n watches (GET /_sim/state).
function _M.wait_watches(sim, n)
  for _ = 1, 500 do
    local _, _, _, st = _M.request(sim, "GET", "/_sim/state")
    if st and st.watches >= n then return end
    sleep(0.005)
  end
  error("the watches did not start")
end

-- Waits until the CRD name is Established (the simulator's CRD controller
-- sets it just after the create) and returns it as it is then.
function _M.established(sim, name)
  for _ = 1, 500 do
    local _, _, _, crd = _M.request(sim, "GET",
      "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" .. name)
    local conds = type(crd) == "table" and type(crd.status) == "table" and crd.status.conditions
    for _, c in ipairs(type(conds) == "table" and conds or {}) do
      if c.type == "Established" and c.status == "True" then return crd end
    end
    sleep(0.005)
  end
  error("the CRD " .. name .. " was not established")
end

-- Waits until the watch output has n lines (or the timeout passes) and
-- returns the decoded lines.
function _M.watch_lines(w, n, timeout)
  local lines
  for _ = 1, (timeout or 5) * 100 do
    lines = {}
    for line in (read_file(w.out) or ""):gmatch("[^\n]+") do
      lines[#lines + 1] = json.decode(line) or line
    end
    if #lines >= n then break end
    sleep(0.01)
  end
  return lines
end

function _M.watch_done(w)
  for _ = 1, 500 do
    if not alive(w.pid) then break end
    sleep(0.01)
  end
end

function _M.watch_stop(w)
  ffi.C.kill(tonumber(w.pid), 15)
  os.remove(w.out)
end

-- The compact form of a captured (pretty-printed) body: the whitespace
-- outside strings removed, key order as the server wrote it.
function _M.compact(text)
  local out, in_str, esc = {}, false, false
  for c in text:gmatch(".") do
    if in_str then
      out[#out + 1] = c
      if esc then
        esc = false
      elseif c == "\\" then
        esc = true
      elseif c == '"' then
        in_str = false
      end
    elseif c == '"' then
      in_str = true
      out[#out + 1] = c
    elseif not c:match("%s") then
      out[#out + 1] = c
    end
  end
  return table.concat(out)
end

return _M
