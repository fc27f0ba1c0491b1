-- Generated Pods for the benchmarks: copies of shared/fixtures/bench's
-- pod-2.4k.json (managedFields included, about 2.4 KB compact) with distinct
-- names web-I, namespaces ns-(I mod 50), uids and resourceVersions, and
-- status.hostIP varied between MODIFIED events, as fixtures/bench/README.md
-- asks so that figures compare across runs and with peers.
local kube = require "kubelua"
local httpd = require "kubelua.httpd"
local realistic = require "bench.lib.realistic"

local _M = {}

local FIXTURE = "spec/fixtures/json/pod-2.4k.json"

-- The fixture cut around its varying fields: lits[1], field, lits[2], …
-- with the fields in the order they appear in the JSON (keys are sorted);
-- order[k] says which field goes k-th: 1 name, 2 namespace, 3 uid,
-- 4 resourceVersion, 5 and 7 the variable bytes of status.hostIP
-- (10.0.V.I) and 6, when annotated, the annotation bench/variant.
local function template(annotated)
  local f = assert(io.open(FIXTURE))
  local pod = assert(kube.json.decode(f:read("*a")))
  f:close()
  local m = pod.metadata
  m.name, m.namespace, m.uid, m.resourceVersion = "@1@", "@2@", "@3@", "@4@"
  pod.status.hostIP = "10.0.@5@.@7@"
  if annotated then m.annotations["bench/variant"] = "@6@" end
  local text, lits, order, at = kube.json.encode(pod), {}, {}, 1
  for s, d, e in text:gmatch("()@(%d)@()") do
    lits[#lits + 1] = text:sub(at, s - 1)
    order[#order + 1] = tonumber(d)
    at = e
  end
  lits[#lits + 1] = text:sub(at)
  return { lits = lits, order = order }
end

local plain, annotated = template(), template(true)

-- Pod i's uid: distinct for each i and spread over all its digits like a
-- random UUID (a counter in the first digits would put every uid in one
-- chain of LuaJIT's string table, which hashes only some of a long
-- string's bytes).
local function uid(i)
  local h = i * 2654435761 % 4294967296
  return ("%08x-%04x-4%03x-a%03x-%012d"):format(h, h % 65536, math.floor(h / 65536) % 4096,
    h % 4096, i)
end
_M.uid = uid

-- The strings of pod i that stay the same from event to event, made once.
local ids, small = {}, {}
for n = 0, 255 do small[n] = tostring(n) end
local scratch = {} -- reused: join copies the parts
local function concat_range(t, i, j) return table.concat(t, "", i, j) end

local function pod(join, i, rv, v, annotate)
  local t = annotate and annotated or plain
  local id = ids[i]
  if not id then
    id = { "web-" .. i, "ns-" .. (i % 50), uid(i), nil, nil, nil, small[i % 256] }
    ids[i] = id
  end
  v = v or 0
  id[4], id[5], id[6] = tostring(rv), small[v % 256], tostring(v)
  local lits, order = t.lits, t.order
  for k = 1, #order do
    scratch[2 * k - 1], scratch[2 * k] = lits[k], id[order[k]]
  end
  scratch[2 * #order + 1] = lits[#lits]
  return join(scratch, 1, 2 * #order + 1)
end

-- The compact JSON of Pod i (resourceVersion rv, host ip variant v), with
-- the annotation bench/variant = v when `annotate`: the object _M.table
-- makes.
function _M.pod(i, rv, v, annotate) return pod(concat_range, i, rv, v, annotate) end

-- Pod i's parts for pod_bytes: the runs of bytes that stay the same from
-- event to event (bytes values, made on first use and kept) around the
-- numbers of the fields that change (4, 5 and 6), so that a writer joins
-- five or seven parts per event instead of fifteen.
local runs = { [plain] = {}, [annotated] = {} }
local CHANGING = { [4] = true, [5] = true, [6] = true }

-- (No closure in here: a function that makes one cannot be compiled, and
-- the writer's loop, which calls this, would be left to the interpreter.)
local function runs_of(t, i)
  local r = runs[t][i]
  if r then return r end
  pod(concat_range, i, 0, 0, t == annotated) -- fills ids[i]
  local id, lits, order, acc = ids[i], t.lits, t.order, {}
  r = {}
  for k = 1, #order + 1 do -- the last time round: the closing literal alone
    acc[#acc + 1] = lits[k]
    local f = order[k]
    if f == nil or CHANGING[f] then
      r[#r + 1] = httpd.join(acc)
      acc = {}
      r[#r + 1] = f
    else
      acc[#acc + 1] = id[f]
    end
  end
  r.n = #r
  runs[t][i] = r
  return r
end

-- The same as a bytes value (kubelua.httpd.join), for a store that keeps
-- many of them: as Lua strings they would all collide in LuaJIT's string
-- table (see runtime/lua_httpd.c).
function _M.pod_bytes(i, rv, v, annotate)
  local r = runs_of(annotate and annotated or plain, i)
  local n = r.n
  v = v or 0
  for k = 1, n do
    local x = r[k]
    if x == 4 then
      x = rv -- join writes numbers as tostring does, making no string
    elseif x == 5 then
      x = small[v % 256]
    elseif x == 6 then
      x = v
    end
    scratch[k] = x
  end
  return httpd.join(scratch, 1, n)
end

-- A watch event line for Pod i.
function _M.event(kind, i, rv, v)
  return '{"type":"' .. kind .. '","object":' .. _M.pod(i, rv, v) .. '}\n'
end

-- Watch-stream bytes of the lines event(1) .. event(n), in chunks of about
-- `size` bytes (an array of strings).
function _M.chunks(n, size, event)
  local chunks, parts, bytes = {}, {}, 0
  for k = 1, n do
    local e = event(k)
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

-- Feeds the watch-stream chunks to informer inf as bytes would arrive
-- (the loop drains it after each) and waits until done() is true; returns
-- the seconds and the CPU seconds that took.
function _M.feed(inf, chunks, done)
  local t0, c0 = kube.monotonic(), os.clock()
  for i = 1, #chunks do
    assert(inf:feed(chunks[i]))
    coroutine.yield()
  end
  while not done() do coroutine.yield() end
  return kube.monotonic() - t0, os.clock() - c0
end

-- Watch-stream bytes for events first..last of `kind`, in chunks of about
-- `size` bytes (an array of strings).
function _M.stream(kind, first, last, size, rv0)
  return _M.chunks(last - first + 1, size, function(k)
    local i = first + k - 1
    return _M.event(kind, i, (rv0 or 1000) + i, rv0)
  end)
end

-- Creates Pod i's namespace, ns-(i mod 50), in the simulator store s when
-- it is missing, with the ReplicaSet the Pods name as their owner (so the
-- simulator's garbage collector, which indexes them, keeps them); returns
-- its name.
function _M.namespace(s, i)
  local ns, res = "ns-" .. (i % 50), s:resource("v1", "namespaces")
  if not res.objects[ns] then
    s:create(res, nil, { apiVersion = "v1", kind = "Namespace", metadata = { name = ns } },
      { internal = true })
    s:put(s:resource("apps/v1", "replicasets"), { apiVersion = "apps/v1", kind = "ReplicaSet",
      metadata = { name = "web-7d9f8c6b5", namespace = ns, uid = "aaaa-bbbb",
        resourceVersion = tostring(s:next_rv()) } }, "ADDED")
  end
  return ns
end

-- The Pods stored in res, in key order, and the number i of each: what a
-- writer cycles over.
function _M.cycle(s, res)
  local keys, nums = s:sorted_keys(res), {}
  for j, key in ipairs(keys) do nums[j] = tonumber(res.objects[key].name:match("%d+")) end
  return keys, nums
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
  md.uid = uid(i)
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

-- The objects the benchmarks use, by name: "realistic" (the default,
-- bench/lib/realistic.lua: what a real cluster's Pods look like, from a
-- seed) or "alike" (the copies of pod-2.4k.json above, status.hostIP
-- varied from round to round). Returns g with g.object(i, rv, round) (the
-- JSON of Pod i with kind/apiVersion, after `round` status updates),
-- g.item(i, rv) (as a list's item: no kind/apiVersion), g.key(i).
_M.KINDS = { realistic = true, alike = true }

function _M.objects(kind, seed)
  if kind == "realistic" then return realistic.new(seed or 1) end
  assert(kind == "alike", "objects are realistic or alike, not " .. tostring(kind))
  local g, head = {}, '{"apiVersion":"v1","kind":"Pod",'
  function g.object(i, rv, round) return _M.pod(i, rv, round) end
  function g.item(i, rv)
    local s = _M.pod(i, rv, 0)
    assert(s:sub(1, #head) == head)
    return "{" .. s:sub(#head + 1)
  end
  function g.key(i) return "ns-" .. i % 50 .. "/web-" .. i end
  return g
end

-- Resident set size of this process, in bytes.
function _M.rss()
  local f = assert(io.open("/proc/self/statm"))
  local _, resident = f:read("*n", "*n")
  f:close()
  return resident * 4096
end

return _M
