-- The simulator's request bodies and read paths beyond the basic verbs:
-- bodies over the size limit (413), YAML bodies, snapshot lists at an
-- exact older resourceVersion, watches from a resourceVersion that has not
-- happened yet, and kubectl's Table output.
-- (The API server alone, --no-controllers: what is checked here is its
-- own events and bytes, which kube-root-ca.crt and the default
-- ServiceAccount would add to.)
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"
local tables = require "kubelua.sim.table"

local CMS = "/api/v1/namespaces/default/configmaps"
local TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"

local names = H.names

local api = H.api -- status, decoded body, raw body

describe("kubelua sim reads and bodies", function()
  local sim
  setup(function() sim = H.start("--no-controllers") end)
  teardown(function() H.stop(sim) end)

  it("answers a body over 3 MiB with the real server's 413 Status", function()
    local big = '{"metadata":{"name":"big"},"data":{"x":"' .. ("x"):rep(3 * 1024 * 1024) .. '"}}'
    local code, h, raw, st = H.request(sim, "POST", CMS, { body = big, curl = true })
    assert.equal(413, code, raw)
    assert.equal("application/json", h["content-type"])
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = "Request entity too large: limit is 3145728", reason = "RequestEntityTooLarge",
      code = 413 }, st)
    -- and the server goes on serving
    assert.equal(200, (api(sim, "GET", CMS)))
  end)

  it("refuses a body type it does not read with the real server's 415", function()
    local want = { kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = "the body of the request was in an unknown format - accepted media types "
        .. "include: application/json, application/yaml", reason = "UnsupportedMediaType",
      code = 415 }
    local PUB = "/api/v1/namespaces/kube-public/configmaps" -- the other cases' stay as they are
    -- CBOR, which newer clients may try (protobuf: sim_protobuf_spec.lua)
    local code, st = api(sim, "POST", PUB, "\161\104metadata\160",
      { ["Content-Type"] = "application/cbor" })
    assert.equal(415, code)
    assert.same(want, st)
    code, st = api(sim, "PUT", PUB .. "/x", '{"metadata":{"name":"x"}}',
      { ["Content-Type"] = "text/plain" })
    assert.equal(415, code)
    assert.same(want, st)
    assert.equal(404, (api(sim, "GET", PUB .. "/x")))
    -- JSON with a charset, and a body with no type at all, are read as JSON
    code = api(sim, "POST", PUB, '{"metadata":{"name":"typed"}}',
      { ["Content-Type"] = "application/json; charset=utf-8" })
    assert.equal(201, code)
    local _, _, raw = H.request(sim, "POST", PUB, { body = '{"metadata":{"name":"untyped"}}',
      headers = { "Content-Type:" }, curl = true })
    assert.equal("untyped", json.decode(raw).metadata.name)
  end)

  it("sends curl a pretty-printed list larger than a stream's buffer cap", function()
    local big = ("x"):rep(1024 * 1024)
    for i = 1, 10 do
      assert.equal(201, (api(sim, "POST", "/api/v1/namespaces", { apiVersion = "v1",
        kind = "Namespace", metadata = { name = "big-" .. i } })))
      assert.equal(201, (api(sim, "POST", "/api/v1/namespaces/big-" .. i .. "/configmaps",
        { apiVersion = "v1", kind = "ConfigMap", metadata = { name = "big" }, data = { x = big } })))
    end
    -- curl's User-Agent asks for indented JSON: about 10.5 MiB, over the 8 MiB cap
    local code, h, raw, list = H.request(sim, "GET", "/api/v1/configmaps?fieldSelector="
      .. "metadata.name%3Dbig", { curl = true })
    assert.equal(200, code)
    assert.equal("application/json", h["content-type"])
    assert.is_true(#raw > 10 * 1024 * 1024)
    assert.equal("\n", raw:sub(-1))
    assert.equal(10, #list.items)
    for _, cm in ipairs(list.items) do assert.equal(big, cm.data.x) end
    for i = 1, 10 do
      assert.equal(200, (api(sim, "DELETE", "/api/v1/namespaces/big-" .. i)))
    end
  end)

  it("creates and updates from YAML bodies", function()
    local yaml_ct = { ["Content-Type"] = "application/yaml" }
    local code, cm, raw = api(sim, "POST", CMS, table.concat({
      "apiVersion: v1", "kind: ConfigMap", "metadata:", "  name: from-yaml", "  labels:",
      "    app: y", "data:", "  n: \"1\"", "  text: hello world", "" }, "\n"), yaml_ct)
    assert.equal(201, code, raw)
    assert.same({ n = "1", text = "hello world" }, cm.data)
    assert.same({ app = "y" }, cm.metadata.labels)
    code, cm, raw = api(sim, "PUT", CMS .. "/from-yaml", table.concat({
      "apiVersion: v1", "kind: ConfigMap", "metadata:", "  name: from-yaml",
      "  resourceVersion: \"" .. cm.metadata.resourceVersion .. "\"", "data:", "  n: \"2\"",
      "" }, "\n"), { ["Content-Type"] = "application/yaml; charset=utf-8" })
    assert.equal(200, code, raw)
    assert.same({ n = "2" }, cm.data)
    local st
    code, st = api(sim, "POST", CMS, "metadata:\n  name: [unclosed\n", yaml_ct)
    assert.equal(400, code)
    assert.equal("BadRequest", st.reason)
    assert.matches("^the object provided is unrecognized %(must be of type ConfigMap%)", st.message)
    code, st = api(sim, "POST", CMS, "- a\n- b\n", yaml_ct)
    assert.equal(400, code)
    assert.equal("BadRequest", st.reason)
  end)

  it("lists the state at an exact older resourceVersion while the history has it", function()
    local _, a = api(sim, "POST", CMS, { metadata = { name = "snap-a" }, data = { v = "1" } })
    local _, before = api(sim, "GET", CMS)
    local rv = before.metadata.resourceVersion
    api(sim, "POST", CMS, { metadata = { name = "snap-b" } })
    a.data.v = "2"
    assert.equal(200, (api(sim, "PUT", CMS .. "/snap-a", a)))
    assert.equal(200, (api(sim, "DELETE", CMS .. "/from-yaml")))
    local code, old, raw = api(sim, "GET", CMS .. "?resourceVersion=" .. rv
      .. "&resourceVersionMatch=Exact")
    assert.equal(200, code, raw)
    assert.equal(rv, old.metadata.resourceVersion)
    assert.same(names(before), names(old))
    assert.same(before, old)
    local _, now = api(sim, "GET", CMS)
    assert.same({ "snap-a", "snap-b" }, names(now))
    -- pages of an old list stay on that snapshot
    local _, page = api(sim, "GET", CMS .. "?limit=1")
    api(sim, "POST", CMS, { metadata = { name = "snap-0" } })
    local _, rest = api(sim, "GET", CMS .. "?limit=5&continue=" .. page.metadata.continue)
    assert.same({ "snap-b" }, names(rest))
    -- past the history: 410 Expired, as for a compacted revision
    local _, f = api(sim, "POST", "/_sim/faults", { compact = true })
    assert.truthy(f.compacted)
    local st
    code, st = api(sim, "GET", CMS .. "?resourceVersion=" .. rv .. "&resourceVersionMatch=Exact")
    assert.equal(410, code)
    assert.same(H.fixture("97").response.body, st)
  end)

  it("starts a watch from a future resourceVersion and stays quiet until it passes", function()
    local _, list = api(sim, "GET", CMS)
    local future = tonumber(list.metadata.resourceVersion) + 2
    local w = H.watch_start(sim, CMS .. "?watch=true&allowWatchBookmarks=true&timeoutSeconds=5"
      .. "&resourceVersion=" .. future)
    H.wait_watches(sim, 1)
    api(sim, "POST", CMS, { metadata = { name = "fut-1" } }) -- rv future - 1
    api(sim, "POST", CMS, { metadata = { name = "fut-2" } }) -- rv future
    api(sim, "POST", CMS, { metadata = { name = "fut-3" } }) -- rv future + 1
    local lines = H.watch_lines(w, 1)
    H.watch_stop(w)
    assert.equal(1, #lines)
    assert.equal("ADDED", lines[1].type)
    assert.equal("fut-3", lines[1].object.metadata.name)
    assert.equal(tostring(future + 1), lines[1].object.metadata.resourceVersion)
  end)

  it("answers kubectl's Table for lists and gets", function()
    local code, t, raw = api(sim, "GET", "/api/v1/namespaces?labelSelector="
      .. "kubernetes.io%2Fmetadata.name%3Ddefault", nil, { Accept = TABLE })
    assert.equal(200, code, raw)
    assert.equal("Table", t.kind)
    assert.equal("meta.k8s.io/v1", t.apiVersion)
    local cols = {}
    for i, c in ipairs(t.columnDefinitions) do cols[i] = c.name end
    assert.same({ "Name", "Status", "Age" }, cols)
    assert.equal(1, #t.rows)
    assert.equal("default", t.rows[1].cells[1])
    assert.equal("Active", t.rows[1].cells[2])
    assert.matches("^%d+[smhdy]", t.rows[1].cells[3])
    assert.equal("PartialObjectMetadata", t.rows[1].object.kind)
    assert.is_nil(t.rows[1].object.spec)
    code, t = api(sim, "GET", CMS .. "/snap-a?includeObject=Object", nil, { Accept = TABLE })
    assert.equal(200, code)
    assert.equal(1, #t.rows)
    -- a get's Table carries the object's resourceVersion
    assert.equal(t.rows[1].object.metadata.resourceVersion, t.metadata.resourceVersion)
    assert.same({ "snap-a", 1 }, { t.rows[1].cells[1], t.rows[1].cells[2] })
    assert.equal("ConfigMap", t.rows[1].object.kind)
    code, t = api(sim, "GET", CMS .. "?includeObject=None", nil, { Accept = TABLE })
    assert.equal(200, code)
    assert.is_nil(t.rows[1].object)
    -- a custom resource without printer columns: Name and Created At
    local crd = H.fixture("09").request.body
    assert.equal(201, (api(sim, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
      crd)))
    H.sleep(0.1)
    local widgets = "/apis/example.com/v1/namespaces/default/widgets"
    local wcode, _, wraw = api(sim, "POST", widgets, { apiVersion = "example.com/v1",
      kind = "Widget", metadata = { name = "w1" }, spec = { size = 1 } })
    assert.equal(201, wcode, wraw)
    code, t = api(sim, "GET", widgets, nil, { Accept = TABLE })
    assert.equal(200, code)
    assert.same({ "Name", "Created At" }, { t.columnDefinitions[1].name,
      t.columnDefinitions[2].name })
    assert.equal("date", t.columnDefinitions[2].type)
    assert.equal("w1", t.rows[1].cells[1])
    assert.matches("^%d+%-%d+%-%d+T", t.rows[1].cells[2])
    -- without the Accept header, the plain list
    code, t = api(sim, "GET", widgets)
    assert.equal(200, code)
    assert.equal("WidgetList", t.kind)
    assert.is_true(json.is_array(t.items))
  end)
end)

describe("kubelua sim watches as Tables", function()
  local sim
  setup(function() sim = H.start("--no-controllers") end)
  teardown(function() H.stop(sim) end)

  -- The columns a Table event defines.
  local function columns(t)
    local cols = {}
    for i, c in ipairs(t.columnDefinitions) do cols[i] = c.name end
    return cols
  end

  it("sends kubectl get --watch a Table of one row per event, columns first only", function()
    local NS = "/api/v1/namespaces/tw/configmaps"
    assert.equal(201, (api(sim, "POST", "/api/v1/namespaces", { metadata = { name = "tw" } })))
    local code, a = api(sim, "POST", NS, { metadata = { name = "a" }, data = { x = "1" } })
    assert.equal(201, code)
    local w = H.watch_start(sim, NS .. "?watch=true&sendInitialEvents=true"
      .. "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5",
      { Accept = TABLE })
    H.wait_watches(sim, 1)
    local _, b = api(sim, "POST", NS, { metadata = { name = "b" } })
    local _, a2 = api(sim, "PUT", NS .. "/a", { metadata = { name = "a",
      resourceVersion = a.metadata.resourceVersion }, data = { x = "1", y = "2" } })
    assert.equal(200, (api(sim, "DELETE", NS .. "/b")))
    local lines = H.watch_lines(w, 5)
    H.watch_stop(w)
    local got = {}
    for i, ev in ipairs(lines) do
      local t = ev.object
      assert.equal("Table", t.kind)
      assert.equal("meta.k8s.io/v1", t.apiVersion)
      assert.equal(1, #t.rows)
      got[i] = { ev.type, t.rows[1].cells[1], t.rows[1].cells[2], t.metadata.resourceVersion,
        t.rows[1].object.kind }
    end
    local bm = lines[2].object.rows[1].object
    assert.same({
      { "ADDED", "a", 1, a.metadata.resourceVersion, "PartialObjectMetadata" },
      { "BOOKMARK", "", 0, bm.metadata.resourceVersion, "PartialObjectMetadata" },
      { "ADDED", "b", 0, b.metadata.resourceVersion, "PartialObjectMetadata" },
      { "MODIFIED", "a", 2, a2.metadata.resourceVersion, "PartialObjectMetadata" },
      { "DELETED", "b", 0, lines[5].object.rows[1].object.metadata.resourceVersion,
        "PartialObjectMetadata" },
    }, got)
    assert.same({ ["k8s.io/initial-events-end"] = "true" }, bm.metadata.annotations)
    assert.same({ "Name", "Data", "Age" }, columns(lines[1].object))
    for i = 2, 5 do assert.equal(json.null, lines[i].object.columnDefinitions) end
    assert.is_true(tonumber(lines[5].object.metadata.resourceVersion)
      > tonumber(a2.metadata.resourceVersion))
  end)

  it("gives each watch its own column definitions and keeps includeObject", function()
    local NS = "/api/v1/namespaces/tw/configmaps"
    local w1 = H.watch_start(sim, NS .. "?watch=true&includeObject=Object&timeoutSeconds=5"
      .. "&resourceVersion=" .. select(2, api(sim, "GET", NS)).metadata.resourceVersion,
      { Accept = TABLE })
    local w2 = H.watch_start(sim, NS .. "?watch=true&includeObject=None&timeoutSeconds=5"
      .. "&resourceVersion=" .. select(2, api(sim, "GET", NS)).metadata.resourceVersion,
      { Accept = TABLE })
    H.wait_watches(sim, 2)
    api(sim, "POST", NS, { metadata = { name = "c" } })
    api(sim, "POST", NS, { metadata = { name = "d" } })
    local l1, l2 = H.watch_lines(w1, 2), H.watch_lines(w2, 2)
    H.watch_stop(w1)
    H.watch_stop(w2)
    assert.equal(2, #l1)
    assert.equal(2, #l2)
    assert.same({ "Name", "Data", "Age" }, columns(l1[1].object))
    assert.same({ "Name", "Data", "Age" }, columns(l2[1].object))
    assert.equal(json.null, l1[2].object.columnDefinitions)
    assert.equal(json.null, l2[2].object.columnDefinitions)
    assert.same({ "ConfigMap", "d" }, { l1[2].object.rows[1].object.kind,
      l1[2].object.rows[1].object.metadata.name })
    assert.is_nil(l2[1].object.rows[1].object)
    assert.equal("d", l2[2].object.rows[1].cells[1])
  end)

  it("refuses an includeObject that is none of the three, as the real server words it", function()
    local NS = "/api/v1/namespaces/tw/configmaps"
    local want = { kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = "Unable to convert to Table as requested: includeObject: Invalid value: "
        .. [["Full": must be 'Metadata', 'Object', 'None', or empty]],
      reason = "BadRequest", code = 400 }
    for _, path in ipairs { NS, NS .. "/c", NS .. "?watch=true" } do
      local sep = path:find("?", 1, true) and "&" or "?"
      local code, st = api(sim, "GET", path .. sep .. "includeObject=Full", nil, { Accept = TABLE })
      assert.equal(400, code, path)
      assert.same(want, st, path)
    end
    -- a missing object is still a 404 first
    assert.equal(404, (api(sim, "GET", NS .. "/nope?includeObject=Full", nil, { Accept = TABLE })))
    -- and without a Table, includeObject means nothing
    assert.equal(200, (api(sim, "GET", NS .. "/c?includeObject=Full")))
  end)

  it("sends the 410 of a watch from too old a resourceVersion as a Status", function()
    api(sim, "POST", "/_sim/faults", { compact = true })
    local w = H.watch_start(sim, "/api/v1/namespaces/tw/configmaps?watch=true&resourceVersion=1",
      { Accept = TABLE })
    local lines = H.watch_lines(w, 1)
    H.watch_stop(w)
    assert.equal("ERROR", lines[1].type)
    assert.same({ "Status", 410, "Expired" }, { lines[1].object.kind, lines[1].object.code,
      lines[1].object.reason })
  end)
end)

describe("kubelua sim metadata-only reads", function()
  local sim
  setup(function() sim = H.start("--no-controllers") end)
  teardown(function() H.stop(sim) end)

  -- What client-go's metadata client sends (protobuf first, which the
  -- simulator does not serve).
  local function accept(as)
    return { Accept = "application/vnd.kubernetes.protobuf;as=" .. as .. ";g=meta.k8s.io;v=v1,"
      .. "application/json;as=" .. as .. ";g=meta.k8s.io;v=v1,application/json" }
  end
  local NS = "/api/v1/namespaces/pm/configmaps"

  it("answers gets, lists and watches with the objects' metadata alone", function()
    assert.equal(201, (api(sim, "POST", "/api/v1/namespaces", { metadata = { name = "pm" } })))
    local _, a = api(sim, "POST", NS, { metadata = { name = "a", labels = { x = "1" } },
      data = { k = "v" } })
    local code, got, raw = api(sim, "GET", NS .. "/a", nil, accept("PartialObjectMetadata"))
    assert.equal(200, code, raw)
    assert.same({ kind = "PartialObjectMetadata", apiVersion = "meta.k8s.io/v1",
      metadata = a.metadata }, got)
    local list
    code, list, raw = api(sim, "GET", NS, nil, accept("PartialObjectMetadataList"))
    assert.equal(200, code, raw)
    assert.same({ kind = "PartialObjectMetadataList", apiVersion = "meta.k8s.io/v1",
      metadata = { resourceVersion = list.metadata.resourceVersion },
      items = { { kind = "PartialObjectMetadata", apiVersion = "meta.k8s.io/v1",
        metadata = a.metadata } } }, list)
    assert.is_true(json.is_array(list.items))
    local w = H.watch_start(sim, NS .. "?watch=true&sendInitialEvents=true"
      .. "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5",
      accept("PartialObjectMetadata"))
    H.wait_watches(sim, 1)
    local _, b = api(sim, "POST", NS, { metadata = { name = "b" }, data = { big = "x" } })
    local lines = H.watch_lines(w, 3)
    H.watch_stop(w)
    assert.equal(3, #lines)
    assert.same({ type = "ADDED", object = got }, lines[1])
    assert.same({ type = "BOOKMARK", object = { kind = "PartialObjectMetadata",
      apiVersion = "meta.k8s.io/v1", metadata = { resourceVersion = a.metadata.resourceVersion,
        creationTimestamp = json.null,
        annotations = { ["k8s.io/initial-events-end"] = "true" } } } }, lines[2])
    assert.same({ type = "ADDED", object = { kind = "PartialObjectMetadata",
      apiVersion = "meta.k8s.io/v1", metadata = b.metadata } }, lines[3])
  end)

  it("answers writes in the metadata form asked for, as a metadata client patches", function()
    local code, got, raw = api(sim, "PATCH", NS .. "/a", '{"metadata":{"labels":{"y":"2"}}}',
      { ["Content-Type"] = "application/merge-patch+json",
        Accept = accept("PartialObjectMetadata").Accept })
    assert.equal(200, code, raw)
    local _, a = api(sim, "GET", NS .. "/a")
    assert.same({ kind = "PartialObjectMetadata", apiVersion = "meta.k8s.io/v1",
      metadata = a.metadata }, got)
    assert.same({ x = "1", y = "2" }, a.metadata.labels)
    code, got = api(sim, "POST", NS, { metadata = { name = "t" } }, { Accept = TABLE })
    assert.same({ 201, "Table", "t" }, { code, got.kind, got.rows[1].cells[1] })
    -- a form that does not fit: the write stands, the answer is a 406
    code, got = api(sim, "PUT", NS .. "/t", { metadata = { name = "t" }, data = { k = "v" } },
      accept("PartialObjectMetadataList"))
    assert.equal(406, code)
    assert.equal("you requested PartialObjectMetadataList, but the requested object is not a "
      .. "list (*core.ConfigMap)", got.message)
    assert.same({ k = "v" }, select(2, api(sim, "GET", NS .. "/t")).data)
    assert.equal(200, (api(sim, "DELETE", NS .. "/t")))
  end)

  it("refuses a form that does not fit the answer with the real server's 406", function()
    local code, st = api(sim, "GET", NS, nil, accept("PartialObjectMetadata"))
    assert.equal(406, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
      message = "you requested PartialObjectMetadata, but the requested object is a list "
        .. "(*core.ConfigMapList)", reason = "NotAcceptable", code = 406 }, st)
    code, st = api(sim, "GET", NS .. "/a", nil, accept("PartialObjectMetadataList"))
    assert.equal(406, code)
    assert.equal("you requested PartialObjectMetadataList, but the requested object is not a "
      .. "list (*core.ConfigMap)", st.message)
    code, st = api(sim, "GET", "/apis/apps/v1/namespaces/pm/deployments", nil,
      accept("PartialObjectMetadata"))
    assert.equal(406, code)
    assert.equal("you requested PartialObjectMetadata, but the requested object is a list "
      .. "(*apps.DeploymentList)", st.message)
    -- a watch asking for lists starts, and ends at its first event, which
    -- the real server's encoder cannot write in that form
    local w = H.watch_start(sim, NS .. "?watch=true&timeoutSeconds=5&resourceVersion="
      .. select(2, api(sim, "GET", NS)).metadata.resourceVersion,
      accept("PartialObjectMetadataList"))
    H.wait_watches(sim, 1)
    api(sim, "POST", NS, { metadata = { name = "c" } })
    H.watch_done(w)
    local lines = H.watch_lines(w, 0)
    H.watch_stop(w)
    assert.same({}, lines)
    assert.equal(200, (api(sim, "GET", NS .. "/c"))) -- the write itself went through
  end)

  it("answers in the version asked for, v1beta1 too", function()
    local v1b1 = { Accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1" }
    local code, got = api(sim, "GET", NS .. "/a", nil, v1b1)
    assert.equal(200, code)
    assert.same({ "PartialObjectMetadata", "meta.k8s.io/v1beta1" }, { got.kind, got.apiVersion })
    local list
    code, list = api(sim, "GET", NS, nil, { Accept = "application/json;as="
      .. "PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1" })
    assert.equal(200, code)
    assert.same({ "meta.k8s.io/v1beta1", "meta.k8s.io/v1beta1" },
      { list.apiVersion, list.items[1].apiVersion })
    local t
    code, t = api(sim, "GET", NS, nil, { Accept = "application/json;as=Table;g=meta.k8s.io;"
      .. "v=v1beta1" })
    assert.equal(200, code)
    assert.same({ "Table", "meta.k8s.io/v1beta1", "meta.k8s.io/v1beta1" },
      { t.kind, t.apiVersion, t.rows[1].object.apiVersion })
  end)

  it("sends a metadata watch with a selector the object that left it, as metadata", function()
    local _, d = api(sim, "POST", NS, { metadata = { name = "d", labels = { tier = "web" } } })
    local w = H.watch_start(sim, NS .. "?watch=true&labelSelector=tier%3Dweb&timeoutSeconds=5"
      .. "&resourceVersion=" .. d.metadata.resourceVersion, accept("PartialObjectMetadata"))
    H.wait_watches(sim, 1)
    local code, d2 = api(sim, "PUT", NS .. "/d", { metadata = { name = "d",
      resourceVersion = d.metadata.resourceVersion, labels = { tier = "db" } } })
    assert.equal(200, code)
    local lines = H.watch_lines(w, 1)
    H.watch_stop(w)
    assert.equal(1, #lines)
    assert.equal("DELETED", lines[1].type)
    assert.same({ "PartialObjectMetadata", "web", d2.metadata.resourceVersion },
      { lines[1].object.kind, lines[1].object.metadata.labels.tier,
        lines[1].object.metadata.resourceVersion })
  end)
end)

describe("kubelua sim watches in a form its objects do not fit", function()
  local sim
  setup(function() sim = H.start("--no-controllers") end)
  teardown(function() H.stop(sim) end)

  it("never has one: the decoder refuses what the printer could not show", function()
    local PODS = "/api/v1/namespaces/default/pods"
    local tab = H.watch_start(sim, PODS .. "?watch=true&timeoutSeconds=5", { Accept = TABLE })
    H.wait_watches(sim, 1)
    -- containers that are no list: refused as the real decoder refuses it
    local code, st = api(sim, "POST", PODS, { metadata = { name = "odd" },
      spec = { containers = "oops" } })
    assert.equal(400, code)
    assert.equal('Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string '
      .. "into Go struct field PodSpec.spec.containers of type []v1.Container", st.message)
    local _, q = api(sim, "POST", PODS, { metadata = { name = "even" },
      spec = { containers = { { name = "c", image = "x" } } } })
    local t = H.watch_lines(tab, 1)
    H.watch_stop(tab)
    assert.equal(1, #t)
    assert.same({ "ADDED", "Table", "even", q.metadata.resourceVersion }, { t[1].type,
      t[1].object.kind, t[1].object.rows[1].cells[1],
      t[1].object.rows[1].object.metadata.resourceVersion })
    assert.not_matches("sim: failed to transform object", H.stop(sim))
    sim = H.start("--no-controllers")
  end)
end)

describe("kubelua.sim.table", function()
  it("orders an Accept header's ranges as the apiserver does: by q, concrete types first",
    function()
      local f = tables.form
      assert.equal("Table",
        f("application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io"))
      assert.is_nil(f("*/*;as=Table;g=meta.k8s.io;v=v1,application/json"))
      -- goautoneg's order: a concrete type before a wildcard whatever its
      -- q, and q=0 is not left out
      assert.equal("Table", f("*/*,application/json;as=Table;v=v1;g=meta.k8s.io;q=0.5"))
      assert.equal("Table", f("application/json;as=Table;v=v1;g=meta.k8s.io;q=0"))
      assert.equal("PartialObjectMetadata", f("application/json;as=Table;v=v1;g=meta.k8s.io;"
        .. "q=0.9,application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io;q=0.95"))
      -- a Table asked for with a lower q than the plain object: the object
      assert.is_nil(f("application/json;as=Table;v=v1;g=meta.k8s.io;q=0.5,application/json"))
    end)

  it("reads the form an Accept header asks for from its first JSON range", function()
    local f = tables.form
    assert.same({ "Table", "PartialObjectMetadata", "PartialObjectMetadataList", "Table" }, {
      (f("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")),
      (f("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,"
        .. "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")),
      (f("application/json; as=PartialObjectMetadataList; g=meta.k8s.io; v=v1beta1")),
      (f("*/*;as=Table;g=meta.k8s.io;v=v1")) })
    assert.same({ "Table", "meta.k8s.io/v1beta1" },
      { f("application/json;as=Table;v=v1beta1;g=meta.k8s.io") })
    assert.is_nil(f(nil))
    assert.is_nil(f(""))
    assert.is_nil(f("application/json"))
    assert.is_nil(f("application/json,application/json;as=Table;v=v1;g=meta.k8s.io"))
    assert.is_nil(f("application/json;as=Table;v=v1;g=example.com"))
    assert.is_nil(f("application/json;as=Table;v=v2;g=meta.k8s.io"))
    assert.is_nil(f("application/yaml;as=Table;v=v1;g=meta.k8s.io"))
  end)

  it("shows ages as kubectl does", function()
    local d = tables.human_duration
    assert.same({ "0s", "59s", "119s", "2m", "2m5s", "10m", "179m", "3h", "3h20m", "8h",
      "47h", "2d", "2d3h", "8d", "729d", "2y", "2y10d", "8y" },
      { d(0), d(59), d(119), d(120), d(125), d(600), d(179 * 60), d(3 * 3600),
        d(3 * 3600 + 1200), d(8 * 3600), d(47 * 3600), d(48 * 3600), d(51 * 3600),
        d(8 * 86400), d(729 * 86400), d(730 * 86400), d(740 * 86400), d(8 * 365 * 86400) })
  end)

  it("reads RFC 3339 times as UTC", function()
    assert.equal(0, tables.epoch("1970-01-01T00:00:00Z"))
    assert.equal(951782400, tables.epoch("2000-02-29T00:00:00Z"))
    assert.equal(1798588800, tables.epoch("2026-12-30T00:00:00Z"))
  end)
end)
