-- corpus.lua: writes the seed corpora of the fuzz targets into
-- spec/fuzz/corpus/<target>/ (run from the repository root by kubelua, for
-- kubelua.json's sorted, exact encoding: `scripts/fuzz --seed`). The seeds are
-- small and committed: apiserver bodies and watch streams from
-- spec/fixtures/json/apiserver (copies of ../shared/fixtures), Status bodies,
-- kubeconfig files like the specs', and selectors from the specs.

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

for _, t in ipairs({ "stream", "json", "kubeconfig", "status", "selector" }) do
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

require("kubelua.core").stop(0) -- run as a script: nothing left to serve
