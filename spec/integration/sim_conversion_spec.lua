-- The simulator's conversion webhooks (kubelua.sim.conversion): a CRD with
-- conversion.strategy Webhook converts its objects through the script's
-- webhook (kube.webhook convert, registered with t:webhooks) between its
-- versions, as kube-apiserver 1.26 does: the storage version (v1 here) is
-- what is stored; a get or a list of another version converts each object
-- when it is made, a write through one converts it to storage and back,
-- and that version's watches get each change converted, in order, by its
-- watch cache.
-- #sim
local kube = require "kubelua"
local testing = require "kubelua.testing"
local http = require "kubelua.http"

local core = require "kubelua.core"

local reviews = {} -- "from → to" of each object the webhook converted (one a review)
local names = {} -- the name of each object it converted
local prefix = "" -- put before what it converts to v1alpha1 (the webhook "fixed")
local refuse -- the name of an object it refuses to convert
local seen -- the last AdmissionReview request the validating webhook got

local function schema()
  return { openAPIV3Schema = { type = "object", properties = { spec = { type = "object",
    ["x-kubernetes-preserve-unknown-fields"] = true } } } }
end

local CRD = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
  metadata = { name = "greetings.example.com" },
  spec = { group = "example.com", scope = "Namespaced",
    names = { plural = "greetings", singular = "greeting", kind = "Greeting" },
    versions = {
      { name = "v1", served = true, storage = true, schema = schema() },
      { name = "v1alpha1", served = true, storage = false, schema = schema() },
    },
    conversion = { strategy = "Webhook", webhook = { conversionReviewVersions = { "v1" },
      clientConfig = { service = { namespace = "webhooks", name = "hooks",
        path = "/convert" } } } } } }

local function greeting(version, spec)
  return { apiVersion = "example.com/" .. version, kind = "Greeting",
    metadata = { name = "hello", namespace = "demo" }, spec = spec }
end

-- A request to the simulator -> status, the decoded body.
local function call(method, path)
  local r = assert(http.request{ method = method, url = kube.server() .. path })
  return r.status, kube.json.decode(r.body)
end

local ALPHA = "/apis/example.com/v1alpha1/namespaces/demo/greetings"
local V1 = "/apis/example.com/v1/namespaces/demo/greetings"

-- Watches the v1alpha1 greetings of demo from resourceVersion rv for the
-- given seconds, in a task; returns the events (filled when it ends) and a
-- function that says whether it has ended. It has started on return.
local function watch_v1alpha1(rv, seconds)
  local events, ended = {}, false
  kube.spawn(function()
    local r = http.request{ url = kube.server() .. "/apis/example.com/v1alpha1/"
      .. "namespaces/demo/greetings?watch=true&timeoutSeconds=" .. seconds
      .. "&resourceVersion=" .. rv }
    for line in r.body:gmatch("[^\n]+") do events[#events + 1] = kube.json.decode(line) end
    ended = true
  end)
  kube.sleep(0.3)
  return events, function() return ended end
end

describe("simulator conversion webhooks", function()
  local t

  setup(function()
    kube.webhook{ path = "/convert", convert = function(obj, to)
      local s = obj.spec
      reviews[#reviews + 1] = obj.apiVersion .. " → " .. to
      names[#names + 1] = obj.metadata.name
      if s.text == "fail" or s.message == "fail" or prefix == "fail" then
        return nil, "cannot convert fail"
      end
      if obj.metadata.name == refuse then return nil, "cannot convert " .. refuse end
      if to == "example.com/v1" then
        s.message, s.text = s.text, nil
      else
        s.text, s.message = prefix .. s.message, nil
      end
      return obj
    end }
    kube.webhook{ path = "/check", validate = function(req)
      seen = req
      return true
    end }
  end)

  before_each(function()
    reviews, names, prefix, seen, refuse = {}, {}, "", nil, nil
    t = testing.start{ namespaces = { "demo", "webhooks" }, controllers = { root_ca = false } }
    t:webhooks{ CRD }
  end)
  after_each(function() t:stop() end)

  it("stores a write through another version converted, answers it converted back", function()
    local made = t:create(greeting("v1alpha1", { text = "hi" }))
    assert.same({ text = "hi" }, made.spec)
    -- to storage, the answer back, and (in its own time) the version's cache
    t:eventually(function() return #reviews == 3 end, 10)
    assert.same({ "example.com/v1alpha1 → example.com/v1", "example.com/v1 → example.com/v1alpha1",
      "example.com/v1 → example.com/v1alpha1" }, reviews)
    reviews = {}
    local v1 = t:get("example.com/v1", "greetings", "demo", "hello")
    assert.same({}, reviews) -- the storage version's reads convert nothing
    assert.same({ message = "hi" }, v1.spec)
    assert.equal("example.com/v1", v1.apiVersion)
    assert.equal(made.metadata.uid, v1.metadata.uid)
    assert.equal(made.metadata.resourceVersion, v1.metadata.resourceVersion)
    assert.same({ text = "hi" }, t:get("example.com/v1alpha1", "greetings", "demo", "hello").spec)
  end)

  it("serves lists and watches of the other version converted", function()
    local made = t:create(greeting("v1", { message = "hi" }))
    local list = t:list("example.com/v1alpha1", "greetings", "demo")
    assert.same({ text = "hi" }, list[1].spec)
    local events, finished = watch_v1alpha1(made.metadata.resourceVersion, 2)
    made.spec.message = "hello"
    t:update(made)
    t:eventually(finished, 10)
    assert.equal(1, #events)
    assert.equal("MODIFIED", events[1].type)
    assert.equal("example.com/v1alpha1", events[1].object.apiVersion)
    assert.same({ text = "hello" }, events[1].object.spec)
  end)

  it("converts a get and a list of the other version when they are made, one review an "
    .. "object: a webhook changed since the writes is what they see", function()
      for _, name in ipairs { "a", "b", "c" } do
        local g = greeting("v1", { message = "hi " .. name })
        g.metadata.name = name
        t:create(g)
      end
      -- a write through the storage version converts nothing itself: these are the
      -- v1alpha1 cache's, in its own time
      t:eventually(function() return #reviews == 3 end, 10)
      assert.same({ "a", "b", "c" }, names)
      assert.same({ "example.com/v1 → example.com/v1alpha1", "example.com/v1 → example.com/v1alpha1",
        "example.com/v1 → example.com/v1alpha1" }, reviews)
      reviews, names, prefix = {}, {}, "fixed: "
      assert.same({ text = "fixed: hi b" },
        t:get("example.com/v1alpha1", "greetings", "demo", "b").spec)
      assert.same({ "b" }, names)
      names = {}
      local list = t:list("example.com/v1alpha1", "greetings", "demo")
      assert.same({ "a", "b", "c" }, names)
      assert.same({ "example.com/v1 → example.com/v1alpha1", "example.com/v1 → example.com/v1alpha1",
        "example.com/v1 → example.com/v1alpha1", "example.com/v1 → example.com/v1alpha1" },
        reviews)
      assert.same({ { text = "fixed: hi a" }, { text = "fixed: hi b" }, { text = "fixed: hi c" } },
        { list[1].spec, list[2].spec, list[3].spec })
      assert.equal("example.com/v1alpha1", list[1].apiVersion)
      names = {}
      -- a list at resourceVersion 0 is the watch cache's: converted when written
      local cached = kube.list("example.com/v1alpha1", "greetings", "demo",
        { resource_version = "0" })
      assert.same({}, names)
      assert.same({ text = "hi a" }, cached.items[1].spec)
      assert.equal(3, #t:list("example.com/v1", "greetings", "demo"))
      assert.same({}, names)
    end)

  it("fails a get and a list of the other version while the webhook fails, in kube-apiserver's "
    .. "words; the storage version's reads and writes go on", function()
      t:create(greeting("v1", { message = "hi" }))
      t:eventually(function() return #reviews == 1 end, 10)
      prefix = "fail"
      local want = { code = 500, reason = "InternalError", message = "conversion webhook for "
        .. "example.com/v1, Kind=Greeting failed: cannot convert fail" }
      local obj, err = kube.get("example.com/v1alpha1", "greetings", "demo", "hello")
      assert.is_nil(obj)
      assert.same(want, { code = err.code, reason = err.reason, message = err.message })
      obj, err = kube.list("example.com/v1alpha1", "greetings", "demo")
      assert.is_nil(obj)
      assert.same(want, { code = err.code, reason = err.reason, message = err.message })
      assert.same({ message = "hi" }, t:get("example.com/v1", "greetings", "demo", "hello").spec)
      local other = greeting("v1", { message = "yo" })
      other.metadata.name = "other"
      assert.same({ message = "yo" }, t:create(other).spec)
    end)

  it("sends a watch of the other version each change converted, in order; while the webhook "
    .. "fails the watch waits, said once in the log, and goes on when it answers", function()
      local made = t:create(greeting("v1", { message = "m0" }))
      t:eventually(function() return #reviews == 1 end, 10)
      local events, finished = watch_v1alpha1(made.metadata.resourceVersion, 8)
      local function set(message)
        made = kube.patch("example.com/v1", "greetings", "demo", "hello",
          { spec = { message = message } }, "merge")
      end
      local logs, saved = {}, core.log
      core.log = function(level, msg, fields)
        if msg:find("^sim: ") then logs[#logs + 1] = { level, msg, fields } end
        saved(level, msg, fields)
      end
      local ok, err = pcall(function()
        set("m1")
        set("m2")
        prefix = "fail"
        set("m3")
        set("m4")
        -- tried again and again (every 0.1 s) while it fails; said once
        t:eventually(function() return #reviews >= 8 end, 10)
        prefix = ""
        t:eventually(function() return made and #reviews >= 9 and #logs >= 2 end, 10)
      end)
      core.log = saved
      assert(ok, err)
      t:eventually(finished, 15)
      local got = {}
      for _, ev in ipairs(events) do
        got[#got + 1] = { ev.type, ev.object.apiVersion, ev.object.spec.text,
          ev.object.metadata.resourceVersion }
      end
      local rv = tonumber(made.metadata.resourceVersion)
      local function v1a(text, back)
        return { "MODIFIED", "example.com/v1alpha1", text, tostring(rv - back) }
      end
      assert.same({ v1a("m1", 3), v1a("m2", 2), v1a("m3", 1), v1a("m4", 0) }, got)
      local line = " resource=greetings.example.com version=example.com/v1alpha1"
      assert.same({ { "warn", "sim: the version's cache cannot convert an event, its watchers "
        .. "wait until the webhook answers", ' error="conversion webhook for example.com/v1, '
        .. 'Kind=Greeting failed: cannot convert fail"' .. line },
        { "info", "sim: the conversion webhook answers again, the version's cache catches up",
          line } }, logs)
    end)

  it("lets the garbage collector and the namespace controller delete custom resources, their "
    .. "finalizers removed through the other version", function()
      local owner = t:create{ apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = "owner", namespace = "demo" } }
      local owned = greeting("v1alpha1", { text = "hi" })
      owned.metadata.name = "owned"
      owned.metadata.ownerReferences = { { apiVersion = "v1", kind = "ConfigMap", name = "owner",
        uid = owner.metadata.uid } }
      t:create(owned)
      local held = greeting("v1alpha1", { text = "held" })
      held.metadata.finalizers = { "example.com/keep" }
      t:create(held)
      t:delete("v1", "configmaps", "demo", "owner")
      t:eventually(function()
        return kube.get("example.com/v1alpha1", "greetings", "demo", "owned") == nil
      end, 10)
      t:delete("v1", "namespaces", nil, "demo")
      t:eventually(function()
        local g = kube.get("example.com/v1alpha1", "greetings", "demo", "hello")
        return g and g.metadata.deletionTimestamp
      end, 10)
      assert.truthy(kube.get("v1", "namespaces", nil, "demo"))
      assert(kube.patch("example.com/v1alpha1", "greetings", "demo", "hello",
        { metadata = { finalizers = kube.null } }, "merge"))
      t:eventually(function() return kube.get("v1", "namespaces", nil, "demo") == nil end, 10)
      assert.is_nil(kube.get("example.com/v1", "greetings", "demo", "hello"))
      assert.equal(0, #t:list("example.com/v1alpha1", "greetings"))
    end)

  it("converts every object in a selector's scope for a list of the other version, then "
    .. "matches: a refused one that does not match fails it; metadata.name= reads one",
    function()
      for _, name in ipairs { "a", "b", "c" } do
        local g = greeting("v1", { message = "hi " .. name })
        g.metadata.name = name
        g.metadata.labels = name == "b" and { x = "y" } or nil
        t:create(g)
      end
      t:eventually(function() return #reviews == 3 end, 10)
      names = {}
      local code, list = call("GET", ALPHA .. "?labelSelector=x%3Dy")
      assert.equal(200, code)
      assert.equal(1, #list.items)
      assert.same({ text = "hi b" }, list.items[1].spec)
      assert.same({ "a", "b", "c" }, names)
      names = {}
      code, list = call("GET", ALPHA .. "?labelSelector=x%3Dy&limit=1")
      assert.equal(200, code)
      assert.same({ "b" }, { list.items[1].metadata.name, list.items[2] })
      -- the page is full and keys are left in its range: a continue, as
      -- the storage gives it, though none of them matches
      assert.is_true(#list.metadata.continue > 0)
      assert.same({ "a", "b" }, names)
      names = {}
      code, list = call("GET", ALPHA .. "?fieldSelector=metadata.name%3Dc")
      assert.equal(200, code)
      assert.equal("c", list.items[1].metadata.name)
      assert.same({ "c" }, names)
      refuse, names = "a", {}
      code, list = call("GET", ALPHA .. "?labelSelector=x%3Dy")
      assert.same({ 500, "conversion webhook for example.com/v1, Kind=Greeting failed: "
        .. "cannot convert a" }, { code, list.message })
      assert.same({ "a" }, names)
      code, list = call("GET", ALPHA .. "?fieldSelector=metadata.name%3Db")
      assert.same({ 200, "b" }, { code, list.items[1].metadata.name })
    end)

  it("converts a delete through the other version as the registry does: a review for each of "
    .. "its reads and writes, its answer converted from what it stored; a refusal fails it",
    function()
      local held = greeting("v1", { message = "hi" })
      held.metadata.finalizers = { "example.com/keep" }
      t:create(held)
      t:eventually(function() return #reviews == 1 end, 10)
      reviews, prefix = {}, "fixed: "
      -- its Get, its state (the cache's object), the object it writes, the
      -- answer, and the cache's event
      local code, out = call("DELETE", ALPHA .. "/hello")
      assert.equal(200, code)
      assert.equal("example.com/v1alpha1", out.apiVersion)
      assert.same({ text = "fixed: hi" }, out.spec)
      assert.truthy(out.metadata.deletionTimestamp)
      assert.equal(2, out.metadata.generation)
      t:eventually(function() return #reviews == 5 end, 10)
      table.sort(reviews)
      local to_v1, to_alpha = "example.com/v1alpha1 → example.com/v1",
        "example.com/v1 → example.com/v1alpha1"
      assert.same({ to_alpha, to_alpha, to_alpha, to_v1, to_v1 }, reviews)
      assert.same({ message = "hi" }, t:get("example.com/v1", "greetings", "demo", "hello").spec)
      refuse = "hello"
      code, out = call("DELETE", ALPHA .. "/hello")
      assert.same({ 500, "conversion webhook for example.com/v1, Kind=Greeting failed: "
        .. "cannot convert hello" }, { code, out.message })
    end)

  it("answers a dry run's delete with what the delete would give, storing nothing",
    function()
      local held = greeting("v1", { message = "hi" })
      held.metadata.finalizers = { "example.com/keep" }
      local made = t:create(held)
      local code, out = call("DELETE", V1 .. "/hello?dryRun=All")
      assert.equal(200, code)
      assert.truthy(out.metadata.deletionTimestamp)
      assert.same({ 0, 2, made.metadata.resourceVersion }, { out.metadata.deletionGracePeriodSeconds,
        out.metadata.generation, out.metadata.resourceVersion })
      local now = t:get("example.com/v1", "greetings", "demo", "hello")
      assert.is_nil(now.metadata.deletionTimestamp)
      assert.equal(made.metadata.resourceVersion, now.metadata.resourceVersion)
      t:eventually(function() return #reviews == 1 end, 10)
      reviews = {}
      local other = greeting("v1", { message = "yo" })
      other.metadata.name = "other"
      other = t:create(other)
      t:eventually(function() return #reviews == 1 end, 10)
      reviews = {}
      -- through the other version: its Get and the dry run's own
      code, out = call("DELETE", ALPHA .. "/other?dryRun=All")
      assert.equal(200, code)
      assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Success",
        details = { name = "other", group = "example.com", kind = "greetings",
          uid = other.metadata.uid } }, out)
      assert.same({ "example.com/v1 → example.com/v1alpha1",
        "example.com/v1 → example.com/v1alpha1" }, reviews)
      assert.truthy(t:get("example.com/v1", "greetings", "demo", "other"))
    end)

  it("keeps a managedFields entry per manager, operation and apiVersion, each entry's fields "
    .. "in its own version: the object before and after a write converted into it", function()
      local r = assert(http.request{ method = "POST", url = kube.server() .. ALPHA
        .. "?fieldManager=m", headers = { ["Content-Type"] = "application/json" },
        body = kube.json.encode(greeting("v1alpha1", { text = "hi" })) })
      assert.equal(201, r.status)
      t:eventually(function() return #reviews == 3 end, 10)
      reviews = {}
      r = assert(http.request{ method = "PATCH", url = kube.server() .. V1 .. "/hello?fieldManager=m",
        headers = { ["Content-Type"] = "application/merge-patch+json" },
        body = '{"spec":{"message":"one"}}' })
      assert.equal(200, r.status)
      local mf = kube.json.decode(r.body).metadata.managedFields
      for _, e in ipairs(mf) do e.time = nil end
      -- (in the order of their times, then apiVersions: within a second, v1 first)
      table.sort(mf, function(a, b) return a.apiVersion > b.apiVersion end)
      -- the v1alpha1 entry lost spec.text, changed in its terms; spec stays its
      assert.same({
        { manager = "m", operation = "Update", apiVersion = "example.com/v1alpha1",
          fieldsType = "FieldsV1", fieldsV1 = { ["f:spec"] = {} } },
        { manager = "m", operation = "Update", apiVersion = "example.com/v1",
          fieldsType = "FieldsV1", fieldsV1 = { ["f:spec"] = { ["f:message"] = {} } } } }, mf)
      -- the object as it was, checked against the entry, then before and after
      -- the write, and the cache's event
      t:eventually(function() return #reviews == 4 end, 10)
      assert.same({ "example.com/v1 → example.com/v1alpha1", "example.com/v1 → example.com/v1alpha1",
        "example.com/v1 → example.com/v1alpha1", "example.com/v1 → example.com/v1alpha1" }, reviews)
    end)

  it("converts an update through the other version as the registry does: its state (the "
    .. "cache's object) and what it writes; unchanged, it reads the storage again", function()
      -- (its managedFields entry in v1alpha1: no field manager's reviews)
      t:create(greeting("v1alpha1", { text = "hi" }))
      t:eventually(function() return #reviews == 3 end, 10)
      local to_v1, to_alpha = "example.com/v1alpha1 → example.com/v1",
        "example.com/v1 → example.com/v1alpha1"
      for _, text in ipairs { "yo", "yo" } do
        reviews = {}
        local out = assert(kube.patch("example.com/v1alpha1", "greetings", "demo", "hello",
          { spec = { text = text } }, "merge"))
        assert.same({ text = "yo" }, out.spec)
        -- its state, what it writes, the answer; then the cache's event, or
        -- (unchanged) the storage read again
        t:eventually(function() return #reviews == 4 end, 10)
        table.sort(reviews)
        assert.same({ to_alpha, to_alpha, to_v1, to_v1 }, reviews)
      end
    end)

  it("stores a write without managedFields when an entry's version cannot be converted, as "
    .. "kube-apiserver's field manager fails, said in the log", function()
      t:create(greeting("v1alpha1", { text = "hi" }))
      t:eventually(function() return #reviews == 3 end, 10)
      local logs, saved = {}, core.log
      core.log = function(level, msg, fields)
        if msg:find("^sim: managedFields") then logs[#logs + 1] = { level, msg, fields } end
        saved(level, msg, fields)
      end
      refuse = "hello"
      local ok, out = pcall(kube.patch, "example.com/v1", "greetings", "demo", "hello",
        { spec = { message = "one" } }, "merge")
      core.log = saved
      assert(ok, out)
      assert.same({ message = "one" }, out.spec)
      assert.is_nil(out.metadata.managedFields)
      assert.same({ { "error", "sim: managedFields dropped, an apiVersion's conversion failed",
        ' error="conversion webhook for example.com/v1, Kind=Greeting failed: cannot convert '
        .. 'hello" name=hello resource=greetings.example.com' } }, logs)
    end)

  it("fails a request that waits for a version's cache whose task has stopped", function()
    t.sim.store.conversion.serving = function() return false end -- as once the servers close
    t:create(greeting("v1", { message = "hi" }))
    local obj, err = kube.get("example.com/v1alpha1", "greetings", "demo", "hello")
    assert.is_nil(obj)
    assert.same({ code = 500, reason = "InternalError", message = "Internal error occurred: the "
      .. "cache of example.com/v1alpha1 greetings has stopped" },
      { code = err.code, reason = err.reason, message = err.message })
    assert.same({}, reviews)
  end)

  it("fails a write the webhook cannot convert, in kube-apiserver's words", function()
    local obj, err = kube.create(greeting("v1alpha1", { text = "fail" }))
    assert.is_nil(obj)
    assert.same({ code = 500, reason = "InternalError", message = "conversion webhook for "
      .. "example.com/v1alpha1, "
      .. "Kind=Greeting failed: cannot convert fail" },
      { code = err.code, reason = err.reason, message = err.message })
    assert.is_nil(t:get("example.com/v1", "greetings", "demo", "hello"))
    assert.is_nil(t:get("example.com/v1alpha1", "greetings", "demo", "hello"))
  end)

  it("sends an admission webhook for one version a write through another, converted "
    .. "(matchPolicy Equivalent)", function()
      t:webhooks{ CRD, { apiVersion = "admissionregistration.k8s.io/v1",
        kind = "ValidatingWebhookConfiguration", metadata = { name = "check" },
        webhooks = { { name = "check.example.com", admissionReviewVersions = { "v1" },
          sideEffects = "None", clientConfig = { service = { namespace = "webhooks",
            name = "hooks", path = "/check" } },
          rules = { { operations = { "CREATE" }, apiGroups = { "example.com" },
            apiVersions = { "v1" }, resources = { "greetings" } } } } } } }
      t:create(greeting("v1alpha1", { text = "hi" }))
      assert.same({ group = "example.com", version = "v1", kind = "Greeting" }, seen.kind)
      assert.same({ group = "example.com", version = "v1alpha1", kind = "Greeting" },
        seen.requestKind)
      assert.same({ message = "hi" }, seen.object.spec)
      assert.equal("example.com/v1", seen.object.apiVersion)
    end)
end)
