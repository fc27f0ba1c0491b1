-- corpus.lua: writes the seed corpora of the fuzz targets into
-- spec/fuzz/corpus/<target>/ (run from the repository root by kubelua, for
-- kubelua.json's sorted, exact encoding: `scripts/fuzz --seed`). The seeds are
-- small and committed: apiserver bodies and watch streams from
-- spec/fixtures/json/apiserver (copies of ../shared/fixtures), Status bodies,
-- kubeconfig files like the specs', selectors from the specs, and the
-- webhook specs' requests: over HTTP/1.1, as HTTP/2 frames, and their
-- AdmissionReview and ConversionReview bodies.

local json = require "kubelua.json"

local FIXTURES = "spec/fixtures/json/apiserver"
local OUT = "spec/fuzz/corpus"
local MAX_SEED = 4096 -- bytes; larger bodies only slow the fuzzer down
local MAX_SEEDS = 40  -- per target: a few dozen cover the fixtures' shapes

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local count = {}

local function write(target, name, data)
  if #data > MAX_SEED or (count[target] or 0) >= MAX_SEEDS then return end
  count[target] = (count[target] or 0) + 1
  local f = assert(io.open(OUT .. "/" .. target .. "/" .. name, "wb"))
  f:write(data)
  f:close()
end

local function fixtures()
  local p = assert(io.popen("ls " .. FIXTURES .. "/*.json"))
  local list = {}
  for path in p:lines() do list[#list + 1] = path end
  p:close()
  return list
end

for _, t in ipairs({ "stream", "json", "kubeconfig", "status", "selector", "http1", "http2",
  "review" }) do
  os.execute("rm -rf " .. OUT .. "/" .. t .. " && mkdir -p " .. OUT .. "/" .. t)
end

-- stream: byte 0 (bit 0 list mode, bits 1-3 value cap, bits 4-6 depth),
-- byte 1 the number of cuts, two bytes per cut, then the payload.
local function stream_seed(mode, cuts, payload)
  local head = { string.char(mode, #cuts) }
  for _, c in ipairs(cuts) do head[#head + 1] = string.char(c % 256, math.floor(c / 256)) end
  return table.concat(head) .. payload
end

write("stream", "capped-list", stream_seed(0x13, { 3 }, '{"kind":"L","items":[{"a":1},{}],"x":[]}'))
write("status", "plain-text", string.char(11) .. "upstream connect error")
write("json", "exact", '{"a":[],"b":{},"c":[[]],"i":9007199254740992,"f":-1.5e-300,'
  .. '"s":"\\u00e9\\ud83d\\ude00\\u0000","n":null,"t":true}')

for _, path in ipairs(fixtures()) do
  local name = path:match("([^/]+)%.json$")
  local fx = json.decode(read(path))
  local r = fx.response
  if r.body_lines then
    local lines = {}
    for i, l in ipairs(r.body_lines) do
      if i <= 3 then lines[#lines + 1] = json.encode(l) end
    end
    local payload = table.concat(lines, "\n") .. "\n"
    write("stream", name, stream_seed(0, { 7, 100, 101, 300 }, payload))
  elseif type(r.body) == "table" then
    local body = json.encode(r.body)
    write("json", name, body)
    if r.body.items then write("stream", name, stream_seed(1, { 1, 50, 51, 400 }, body)) end
    if r.body.kind == "Status" then
      local codes = { [400] = 2, [401] = 3, [403] = 4, [404] = 5, [409] = 6, [410] = 7,
        [415] = 8, [422] = 9, [429] = 10, [500] = 11, [503] = 12, [504] = 13 }
      write("status", name, string.char(codes[r.status] or 15) .. body)
      write("status", name .. "-event",
        string.char(0) .. json.encode({ type = "ERROR", object = r.body }))
    end
  end
end

local kubeconfigs = {
  full = [[
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c
  cluster:
    server: https://[::1]:6443/api/
    certificate-authority-data: aGVsbG8=
    tls-server-name: kubernetes.default
    proxy-url: http://proxy.local:3128
    disable-compression: true
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: {audience: x, n: [1, 2]}
users:
- name: u
  user:
    client-certificate-data: aGVsbG8=
    client-key-data: aGVsbG8=
    as: jane
    as-uid: "1000"
    as-groups: [devs, ops]
    as-user-extra:
      scopes: [view]
contexts:
- name: dev
  context: {cluster: c, user: u, namespace: ns}
]],
  exec = [[
clusters: [{name: s, cluster: {server: "http://127.0.0.1:8080"}}]
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: ./plugin
      args: [a, b]
      env: [{name: A, value: b}]
      provideClusterInfo: true
      interactiveMode: IfAvailable
      installHint: install it
contexts: [{name: x, context: {cluster: s, user: u}}]
current-context: x
]],
  token = [[
clusters:
- name: c
  cluster: {server: "https://10.0.0.1", insecure-skip-tls-verify: true}
users:
- {name: u, user: {token: abc, username: a, password: b, tokenFile: /nonexistent}}
contexts:
- {name: c, context: {cluster: c, user: u}}
current-context: c
preferences: {}
]],
  anchors = "a: &x {server: https://h:1}\nclusters: [{name: c, cluster: *x}]\n"
    .. "contexts: [{name: c, context: {cluster: c, user: ''}}]\ncurrent-context: c\n",
  flow = '{"clusters":[{"name":"c","cluster":{"server":"https://h"}}],'
    .. '"contexts":[{"name":"c","context":{"cluster":"c"}}],"current-context":"c"}',
  bad = "clusters: {oops\n",
  merged = "# context: b\nclusters: [{name: c, cluster: {server: https://one}}]\n"
    .. "contexts: [{name: a, context: {cluster: c}}]\ncurrent-context: a\n# next\n"
    .. "clusters: [{name: c, cluster: {server: https://two}}, {name: d, cluster: {server: h:2}}]\n"
    .. "contexts: [{name: b, context: {cluster: d, namespace: x}}]\n",
  rfc3339 = "2024-05-01T10:00:00.123456+02:00",
}
for name, text in pairs(kubeconfigs) do write("kubeconfig", name, text) end

local selectors = { "app=demo", "app==demo,tier!=web", "app in (a, b),!x", "tier notin (x,y)",
  "app", "!app", "n>2,n<5", "a.b/c-d_e=f", "metadata.name=a,status.phase!=Running",
  "metadata.namespace==demo", "spec.nodeName=n\\,1", " app = demo , x ", "app in ()", "=x",
  "a!b", "(a,b)", "x in (a,(b)),y", "" }
for i, s in ipairs(selectors) do write("selector", string.format("%02d", i), s) end

-- The webhook specs' reviews (spec/integration/webhook_spec.lua).
local function admission(uid, object, name)
  return json.encode{ apiVersion = "admission.k8s.io/v1", kind = "AdmissionReview",
    request = { uid = uid, kind = { group = "example.com", version = "v1", kind = "Greeting" },
      resource = { group = "example.com", version = "v1", resource = "greetings" },
      name = name or "hello", namespace = "demo", operation = "CREATE",
      userInfo = { username = "alice", groups = json.array{ "devs" } }, object = object,
      oldObject = json.null, dryRun = false } }
end
local function greeting(message, extra)
  local o = { apiVersion = "example.com/v1", kind = "Greeting",
    metadata = { name = "hello", namespace = "demo" }, spec = { message = message } }
  for k, v in pairs(extra or {}) do o.spec[k] = v end
  return o
end
local reviews = {
  allow = admission("u-1", greeting("hi")),
  deny = admission("u-2", greeting("")),
  boom = admission("u-3", greeting("boom"), "boom"),
  items = admission("u-6", greeting("hi", { items = json.array{ "a", "b" }, ["t~"] = 1,
    gone = true, ["a/b"] = "x" })),
  convert = json.encode{ apiVersion = "apiextensions.k8s.io/v1", kind = "ConversionReview",
    request = { uid = "c-1", desiredAPIVersion = "example.com/v1", objects = json.array{
      { apiVersion = "example.com/v1alpha1", kind = "Greeting", metadata = { name = "a" },
        spec = { text = "hi" } } } } },
  wrong = json.encode{ apiVersion = "v1", kind = "Pod", request = { uid = "x" } },
  broken = "{nope",
}
local kinds = { validate = 0, mutate = 1, convert = 2 }
for name, body in pairs(reviews) do
  for kind, b in pairs(kinds) do
    if (kind == "convert") == (name == "convert" or name == "broken") then
      write("review", name .. "-" .. kind, string.char(b + (kind == "mutate" and 4 * 31 or 0))
        .. body)
    end
  end
end

-- HTTP/1.1: the reviews POSTed, probes, keep-alive and pipelining, chunked
-- bodies with trailers, Expect: 100-continue, HEAD and HTTP/1.0, streams.
local function post(path, body, extra)
  return "POST " .. path .. " HTTP/1.1\r\nHost: 127.0.0.1:9443\r\n"
    .. "Content-Type: application/json\r\n" .. (extra or "")
    .. "Content-Length: " .. #body .. "\r\n\r\n" .. body
end
local http1 = {
  review = post("/validate", reviews.allow),
  convert = post("/convert", reviews.convert),
  pipelined = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz?verbose=1 HTTP/1.1\r\n"
    .. "Host: x\r\n\r\n" .. post("/mutate", reviews.items),
  chunked = "POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    .. "5\r\n{\"a\":\r\n3;ext=1\r\n[]}\r\n0\r\nX-Trailer: t\r\n\r\n",
  expect = post("/validate", "{}", "Expect: 100-continue\r\n"),
  head = "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.0\r\n\r\n",
  stream = "GET /stream?watch=1&labelSelector=a%3Db HTTP/1.1\r\nHost: x\r\n\r\n"
    .. post("/streamx", "abcdef"),
  close = "GET /v HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /after HTTP/1.1\r\n\r\n",
  toolarge = "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\n{}",
}
for name, text in pairs(http1) do write("http1", name, text) end

-- HTTP/2 after the client preface (fuzz_http2.c sends it): SETTINGS, then
-- HEADERS (HPACK: static entries and literals without indexing) and DATA.
local function frame(ftype, flags, id, payload)
  local n = #payload
  return string.char(math.floor(n / 65536), math.floor(n / 256) % 256, n % 256, ftype, flags,
    math.floor(id / 16777216) % 128, math.floor(id / 65536) % 256, math.floor(id / 256) % 256,
    id % 256) .. payload
end
local function lit(index, value) -- literal without indexing, name from the static table
  local head = index < 15 and string.char(index) or string.char(15, index - 15)
  return head .. string.char(#value) .. value
end
local settings = frame(4, 0, 0, "")
local function h2_post(id, path, body, flags)
  return frame(1, 4, id, "\131\135" .. lit(4, path) .. lit(1, "127.0.0.1:9443")
    .. lit(31, "application/json") .. lit(28, tostring(#body)))
    .. frame(0, flags or 1, id, body)
end
local http2 = {
  review = settings .. h2_post(1, "/validate", reviews.deny),
  two = settings .. h2_post(1, "/mutate", reviews.items) .. frame(1, 5, 3, "\130\134"
    .. lit(4, "/healthz") .. lit(1, "x")),
  ping = settings .. frame(6, 0, 0, "12345678") .. frame(8, 0, 0, "\0\0\1\0")
    .. frame(1, 5, 1, "\130\134\132\65\1x") .. frame(3, 0, 1, "\0\0\0\8"),
  stream = settings .. frame(1, 5, 1, "\130\134" .. lit(4, "/stream?watch=1") .. lit(1, "x"))
    .. frame(1, 5, 3, "\130\134" .. lit(4, "/streamx") .. lit(1, "x")),
  continuation = settings .. frame(1, 1, 1, "\130\134") .. frame(9, 4, 1, lit(4, "/c")
    .. lit(1, "x")),
  toolarge = settings .. frame(1, 4, 1, "\131\135" .. lit(4, "/v") .. lit(1, "x")
    .. lit(28, "9000")) .. frame(0, 0, 1, string.rep("b", 900)) .. frame(0, 1, 1, "}"),
  goaway = settings .. h2_post(1, "/convert", reviews.convert, 0) .. frame(7, 0, 0,
    "\0\0\0\1\0\0\0\0"),
}
for name, text in pairs(http2) do write("http2", name, text) end

require("kubelua.core").stop(0) -- run as a script: nothing left to serve
