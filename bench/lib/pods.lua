-- Generated Pods for the benchmarks: copies of shared/fixtures/bench's
-- pod-2.4k.json (managedFields included, about 2.4 KB compact) with distinct
-- names web-I, namespaces ns-(I mod 50), uids and resourceVersions, and
-- status.hostIP varied between MODIFIED events, as fixtures/bench/README.md
-- asks so that figures compare across runs and with peers.
local kube = require "kubelua"

local _M = {}

local FIXTURE = "spec/fixtures/json/pod-2.4k.json"

local function template()
  local f = assert(io.open(FIXTURE))
  local pod = assert(kube.json.decode(f:read("*a")))
  f:close()
  local m = pod.metadata
  m.name, m.namespace, m.uid, m.resourceVersion = "@1@", "@2@", "@3@", "@4@"
  pod.status.hostIP = "@5@"
  local t = kube.json.encode(pod):gsub("%%", "%%%%")
  for i = 1, 5 do t = t:gsub("@" .. i .. "@", "%%s") end
  return t
end

local tmpl = template()

-- The compact JSON of Pod i (resourceVersion rv, host ip variant v).
function _M.pod(i, rv, v)
  return tmpl:format("web-" .. i, "ns-" .. (i % 50),
    ("%08d-1234-5678-9abc-def012345678"):format(i), tostring(rv),
    "10.0." .. (v or 0) % 256 .. "." .. i % 256)
end

-- A watch event line for Pod i.
function _M.event(kind, i, rv, v)
  return '{"type":"' .. kind .. '","object":' .. _M.pod(i, rv, v) .. '}\n'
end

-- Watch-stream bytes for events first..last of `kind`, in chunks of about
-- `size` bytes (an array of strings).
function _M.stream(kind, first, last, size, rv0)
  local chunks, parts, bytes = {}, {}, 0
  for i = first, last do
    local e = _M.event(kind, i, (rv0 or 1000) + i, rv0)
    parts[#parts + 1] = e
    bytes = bytes + #e
    if bytes >= size then
      chunks[#chunks + 1] = table.concat(parts)
      parts, bytes = {}, 0
    end
  end
  if #parts > 0 then chunks[#chunks + 1] = table.concat(parts) end
  return chunks
end

local shared -- the fixture decoded, for table()

local function shallow(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- Pod i as a new table for the simulator's store, sharing the fixture's
-- unchanged parts: namespace ns, resourceVersion rv (a string), host ip
-- variant v, and when `annotate`, the annotation bench/variant = v (an
-- update the store keeps: a Pod's status alone is not, through PUT).
function _M.table(i, ns, v, rv, annotate)
  if not shared then
    local f = assert(io.open(FIXTURE))
    shared = assert(kube.json.decode(f:read("*a")))
    f:close()
  end
  local p = shallow(shared)
  local md = shallow(shared.metadata)
  md.name, md.namespace = "web-" .. i, ns
  md.uid = ("%08d-1234-5678-9abc-def012345678"):format(i)
  md.resourceVersion = rv
  if annotate then
    md.annotations = shallow(shared.metadata.annotations)
    md.annotations["bench/variant"] = tostring(v)
  end
  p.metadata = md
  local st = shallow(shared.status)
  st.hostIP = "10.0." .. v % 256 .. "." .. i % 256
  p.status = st
  return p
end

-- Resident set size of this process, in bytes.
function _M.rss()
  local f = assert(io.open("/proc/self/statm"))
  local _, resident = f:read("*n", "*n")
  f:close()
  return resident * 4096
end

return _M
