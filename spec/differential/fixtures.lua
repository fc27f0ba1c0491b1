-- The fixture scenario: the requests recorded in spec/fixtures/apiserver
-- (index.md there), replayed in order on both servers, with the objects
-- the recording made between them, and each server's own resourceVersions,
-- uids and continue tokens put where the recording had its own. Watches
-- replay their events from the resourceVersion they started at (taken by
-- a list just before the writes they saw) and end after one second.
local json = require "kubelua.json"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring

local _M = {}

local DIR = "spec/fixtures/apiserver/"

local files
local function fixture(n)
  if not files then
    files = {}
    local p = io.popen("ls " .. DIR)
    for line in p:lines() do
      local num = line:match("^(%d+)%-.*%.json$")
      if num then files[num] = line end
    end
    p:close()
  end
  local name = assert(files[n], "no fixture " .. n)
  local f = assert(io.open(DIR .. name, "rb"))
  local fx = assert(json.decode(f:read("*a")))
  f:close()
  return fx, name:gsub("%.json$", "")
end

-- The step that replays fixture n; extra fields are added to it.
local function replay(n, extra)
  local fx, name = fixture(n)
  local rq = fx.request
  local headers = {}
  for k, v in pairs(rq.headers or {}) do
    if k ~= "Authorization" then headers[k] = v end
  end
  local step = { label = name, method = rq.method, path = rq.path, headers = headers }
  if rq.body ~= json.null then step.body = rq.body end
  for k, v in pairs(extra or {}) do step[k] = v end
  return step
end

-- A write the recording made between fixtures (not itself recorded).
local function write(label, method, path, body, ctype)
  return { label = label, method = method, path = path, body = body,
    headers = ctype and { ["Content-Type"] = ctype } or nil }
end

local CMS = "/api/v1/namespaces/demo/configmaps"

local function cm(name, labels, data)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name, labels = labels },
    data = data }
end

-- A list that marks where a later watch starts.
local function mark(name, path)
  return { label = "list " .. path .. " (start of " .. name .. ")", method = "GET", path = path,
    after = function(st, res) st.marks[name] = res.body.metadata.resourceVersion end }
end

-- The watch of fixture n from the mark's resourceVersion, for one second.
local function watch(n, from, extra)
  local step = replay(n, { watch = true, concurrent = true })
  step.prepare = function(st, rq)
    local rv = from and st.marks[from] or "0"
    rq.path = rq.path:gsub("resourceVersion=%d+", "resourceVersion=" .. rv)
      :gsub("timeoutSeconds=%d+", "timeoutSeconds=1")
  end
  for k, v in pairs(extra or {}) do step[k] = v end
  return step
end

-- The current metadata of the object at path as this server has it.
local function own_metadata(path)
  return function(st, rq)
    local last = assert(st.last[path], "nothing read at " .. path)
    local md = json.decode(json.encode(last.metadata))
    for k, v in pairs(rq.body.metadata) do
      if md[k] == nil then md[k] = v end
    end
    rq.body.metadata = md
  end
end

local function rv_of(path, which)
  return function(st, rq)
    local obj = assert(st[which or "last"][path], "nothing read at " .. path)
    rq.body.metadata.resourceVersion = obj.metadata.resourceVersion
  end
end

-- Whether a CRD's answer says Established.
local function established(res)
  local conds = type(res.body) == "table" and type(res.body.status) == "table"
    and res.body.status.conditions
  for _, c in ipairs(type(conds) == "table" and conds or {}) do
    if c.type == "Established" and c.status == "True" then return true end
  end
  return false
end
_M.established = established

local function get(path) return { label = "get " .. path, method = "GET", path = path } end

-- The steps, in order.
function _M.steps()
  local s = {}
  local function add(step) s[#s + 1] = step end
  for i = 1, 8 do add(replay(string.format("%02d", i))) end
  add(replay("09"))
  add({ label = "get the CRD once established", method = "GET", wait = established,
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com" })
  for _, n in ipairs { "10", "11", "12", "13", "14", "15", "16", "17" } do add(replay(n)) end
  for i = 2, 4 do
    local item = fixture("18").response.body.items[i]
    add(write("create " .. item.metadata.name, "POST", CMS,
      cm(item.metadata.name, item.metadata.labels, item.data)))
  end
  add(replay("18"))
  add(replay("19", { after = function(st, res) st.marks.continue = res.body.metadata.continue end }))
  add(replay("20", { prepare = function(st, rq)
    rq.path = CMS .. "?limit=2&continue=" .. tostring(st.marks.continue)
  end }))
  -- (from the watch cache: once it has the four ConfigMaps)
  add(replay("21", { unordered = true, wait = function(res)
    return type(res.body) == "table" and type(res.body.items) == "table" and #res.body.items == 4
  end }))
  add(get(CMS .. "/cm1"))
  add(replay("22", { prepare = rv_of(CMS .. "/cm1") }))
  add(replay("23", { prepare = rv_of(CMS .. "/cm1", "first") }))
  for _, n in ipairs { "24", "25", "26", "27", "28", "29", "30", "31" } do add(replay(n)) end
  add(write("create cm4 again", "POST", CMS, cm("cm4", { app = "demo", tier = "batch" },
    { n = "cm4" })))
  for _, n in ipairs { "32", "33", "34", "35", "36", "37" } do add(replay(n)) end
  add(write("create patchme", "POST", CMS, cm("patchme", nil, { a = "1", b = "2" })))
  for i = 38, 54 do add(replay(tostring(i))) end
  for i = 55, 62 do add(replay(tostring(i))) end
  add(mark("63", CMS))
  for i = 64, 69 do add(replay(tostring(i))) end
  add(write("create fg", "POST", CMS, cm("fg", nil, { a = "b" })))
  add(replay("70"))
  add(watch("63", "63"))
  add(mark("71", "/apis/example.com/v1/widgets"))
  add(replay("72"))
  add(replay("73", { prepare = own_metadata("/apis/example.com/v1/namespaces/demo/widgets/w1") }))
  for i = 74, 78 do add(replay(tostring(i))) end
  add(watch("71", "71"))
  add(mark("79", CMS))
  add(write("create watch-a", "POST", CMS, cm("watch-a", { app = "x" }, { v = "1" })))
  add(write("create watch-b", "POST", CMS, cm("watch-b", { app = "y" }, { v = "1" })))
  add(write("patch watch-a", "PATCH", CMS .. "/watch-a", { data = { v = "2" } },
    "application/merge-patch+json"))
  add(write("relabel watch-b", "PATCH", CMS .. "/watch-b",
    { metadata = { labels = { app = "x" } } }, "application/merge-patch+json"))
  add(write("relabel watch-a", "PATCH", CMS .. "/watch-a",
    { metadata = { labels = { app = "z" } } }, "application/merge-patch+json"))
  add(write("delete watch-b", "DELETE", CMS .. "/watch-b"))
  add(write("delete watch-a", "DELETE", CMS .. "/watch-a"))
  -- a real server's watch cache catches up with the deletions a moment
  -- later; a watch from resourceVersion=0 starts from the cache
  add({ label = "list " .. CMS .. "?resourceVersion=0 once the deletes are cached",
    method = "GET", path = CMS .. "?resourceVersion=0", unordered = true,
    wait = function(res)
      for _, item in ipairs(type(res.body) == "table" and res.body.items or {}) do
        if item.metadata.name == "watch-a" or item.metadata.name == "watch-b" then return false end
      end
      return true
    end })
  add(watch("79", "79"))
  add(watch("80", "79"))
  add(watch("81", nil, { unordered = true }))
  add(replay("82"))
  local lease = "/apis/coordination.k8s.io/v1/namespaces/demo/leases/demo-lease"
  add(replay("83", { prepare = own_metadata(lease) }))
  add(replay("84", { prepare = function(st, rq)
    own_metadata(lease)(st, rq)
    rv_of(lease, "first")(st, rq)
  end }))
  add(replay("85", { prepare = own_metadata(lease) }))
  for i = 86, 89 do add(replay(tostring(i))) end
  add(replay("91", { token = false }))
  add(replay("92", { token = "not-a-valid-token" }))
  add(watch("95", nil, { prepare = function(_, rq)
    rq.path = rq.path:gsub("timeoutSeconds=%d+", "timeoutSeconds=1")
  end }))
  add(get(CMS .. "?limit=1"))
  add(replay("96", { prepare = function(st, rq)
    rq.path = CMS .. "?limit=1&continue=" .. tostring(st.marks.continue)
  end }))
  add(replay("97", { prepare = function(st, rq)
    rq.path = CMS .. "?resourceVersion=" .. st.marks["79"] .. "&resourceVersionMatch=Exact"
  end }))
  return s
end

return _M
