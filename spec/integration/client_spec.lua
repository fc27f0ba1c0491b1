-- kubelua.client: the REST client against a `kubelua sim` process, or
-- under `kubelua test --apiserver real` a real kube-apiserver of its own.
-- Specs tagged #sim need the simulator's faults.
local kube = require "kubelua"
local client = require "kubelua.client"
local envtest = require "kubelua.envtest"
local json = require "kubelua.json"
local sim_helper = require "spec.integration.sim_helper"
local support = require "spec.support"
local testing = require "kubelua.testing"

local real = testing.apiserver() == "real"

local NS = "client-spec"

local function cm(name, data, labels)
  return { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = name, namespace = NS, labels = labels }, data = data }
end

local function fault(sim, body)
  local code = sim_helper.request(sim, "POST", "/_sim/faults",
    { headers = { Authorization = "Bearer secret" }, body = body })
  assert.equal(200, code)
end

describe("kubelua.client", function()
  local sim, cp, srv, c

  -- A client of the server: opts with its URL, CA and (unless given) the
  -- admin's token.
  local function new_client(opts)
    opts.server, opts.tls = srv.base, srv.tls
    if opts.token == nil and opts.creds == nil then opts.token = srv.token end
    return client.new(opts)
  end

  setup(function()
    if real then
      cp = assert(envtest.start{ users = { bob = "bobtoken" } })
      srv = { base = cp.server, token = cp.token, tls = { ca_file = cp.ca_file } }
    else
      sim = sim_helper.start("--token secret --user bob=bobtoken")
      srv = { base = sim.base, token = "secret" }
    end
    c = new_client{ qps = 0 }
    client.set_default(c)
    assert(kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = NS } })
  end)
  teardown(function()
    client.set_default(nil)
    if real then cp:stop() else sim_helper.stop(sim) end
  end)

  describe("get, create, update, delete", function()
    it("round-trips an object exactly", function()
      local obj = cm("rt", { a = "1", empty = "" })
      obj.binaryData = { b = "AAE=" }
      local created, err = kube.create(obj)
      assert.is_nil(err)
      assert.equal("rt", created.metadata.name)
      assert.is_string(created.metadata.resourceVersion)
      local got = assert(kube.get("v1", "configmaps", NS, "rt"))
      assert.same(created, got)
      assert.equal(json.encode(created), json.encode(got))
      -- the object form resolves the kind by discovery
      assert.same(got, assert(kube.get(obj)))
      -- managedFields name the client by its User-Agent, "kubelua/VERSION"
      assert.equal("kubelua", got.metadata.managedFields[1].manager)
    end)

    it("updates, and gets a 409 for a stale resourceVersion until it reads again", function()
      local obj = assert(kube.create(cm("upd", { v = "1" })))
      local stale = json.decode(json.encode(obj))
      obj.data.v = "2"
      local upd = assert(kube.update(obj))
      assert.equal("2", upd.data.v)
      stale.data.v = "3"
      local res, err = kube.update(stale)
      assert.is_nil(res)
      assert.is_true(kube.is_conflict(err))
      assert.equal(409, err.code)
      assert.equal("Conflict", err.reason)
      assert.equal('Operation cannot be fulfilled on configmaps "upd": the object has been '
        .. "modified; please apply your changes to the latest version and try again",
        err.message)
      assert.equal('Conflict: Operation cannot be fulfilled on configmaps "upd": the object has '
        .. "been modified; please apply your changes to the latest version and try again",
        tostring(err))
      assert.same({ name = "upd", kind = "configmaps" }, err.details)
      local fresh = assert(kube.get("v1", "configmaps", NS, "upd"))
      fresh.data.v = "3"
      assert.equal("3", assert(kube.update(fresh)).data.v)
    end)

    it("maps 404 and 409 AlreadyExists to the predicates", function()
      local res, err = kube.get("v1", "configmaps", NS, "nope")
      assert.is_nil(res)
      assert.is_true(kube.is_not_found(err))
      assert.is_false(kube.is_conflict(err))
      assert.equal('NotFound: configmaps "nope" not found', tostring(err))
      assert(kube.create(cm("dup")))
      res, err = kube.create(cm("dup"))
      assert.is_nil(res)
      assert.is_true(kube.is_already_exists(err))
      assert.is_false(kube.is_conflict(err)) -- a known reason: no fallback to the code
      assert.equal(409, err.code)
      assert.equal('AlreadyExists: configmaps "dup" already exists', tostring(err))
    end)

    it("reports 422 Invalid with its causes", function()
      local res, err = kube.create(cm("Bad_Name"))
      assert.is_nil(res)
      assert.is_true(kube.is_invalid(err))
      assert.equal(422, err.code)
      assert.matches('^Invalid: ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: '
        .. '"Bad_Name": ', tostring(err))
      assert.equal("metadata.name", err.details.causes[1].field)
    end)

    it("deletes with options and preconditions", function()
      local obj = assert(kube.create(cm("del")))
      local res, err = kube.delete("v1", "configmaps", NS, "del",
        { preconditions = { uid = "not-the-uid" } })
      assert.is_nil(res)
      assert.is_true(kube.is_conflict(err))
      assert.equal('Conflict: Operation cannot be fulfilled on ConfigMap "del": the UID in the '
        .. "precondition (not-the-uid) does not match the UID in record (" .. obj.metadata.uid
        .. "). The object might have been deleted and then recreated", tostring(err))
      assert.same({ kind = "ConfigMap", name = "del" }, err.details)
      res = assert(kube.delete("v1", "configmaps", NS, "del", { propagation_policy = "Background",
        grace_period_seconds = 0, preconditions = { uid = obj.metadata.uid } }))
      assert.equal("Success", res.status)
      res, err = kube.get("v1", "configmaps", NS, "del")
      assert.is_nil(res)
      assert.is_true(kube.is_not_found(err))
      res, err = kube.delete(obj)
      assert.is_nil(res)
      assert.is_true(kube.is_not_found(err))
    end)

    it("works with cluster-scoped resources", function()
      local ns = assert(kube.get("v1", "namespaces", nil, NS))
      assert.equal(NS, ns.metadata.name)
      assert.same(ns, assert(kube.get{ apiVersion = "v1", kind = "Namespace",
        metadata = { name = NS } }))
    end)
  end)

  describe("list", function()
    it("filters by label selector and pages through all items", function()
      for i = 1, 25 do
        assert(kube.create(cm(string.format("page-%02d", i), { i = tostring(i) },
          { app = "pages", parity = i % 2 == 0 and "even" or "odd" })))
      end
      local l = assert(kube.list("v1", "configmaps", NS, { label_selector = "app=pages",
        limit = 10 }))
      assert.equal("ConfigMapList", l.kind)
      assert.equal(10, #l.items)
      assert.is_true(json.is_array(l.items))
      assert.is_string(l.metadata.continue)
      local odd = assert(kube.list("v1", "configmaps", NS,
        { label_selector = "app=pages,parity=odd" }))
      assert.equal(13, #odd.items)
      local named = assert(kube.list("v1", "configmaps", NS,
        { field_selector = "metadata.name=page-07" }))
      assert.equal(1, #named.items)

      local pages = 0
      local request = c.request
      c.request = function(...)
        pages = pages + 1
        return request(...)
      end
      local all, err = kube.list_all("v1", "configmaps", NS, { label_selector = "app=pages",
        limit = 10 })
      c.request = nil
      assert.is_nil(err)
      assert.equal(3, pages)
      assert.equal(25, #all.items)
      assert.is_true(json.is_array(all.items))
      assert.is_nil(all.metadata.continue)
      for i = 1, 25 do
        assert.equal(string.format("page-%02d", i), all.items[i].metadata.name)
      end
      -- all namespaces, by kind
      local every = assert(kube.list_all({ apiVersion = "v1", kind = "ConfigMap" },
        { label_selector = "app=pages" }))
      assert.equal(25, #every.items)
    end)

    it("lists all again when a continue token expires between pages #sim", function()
      local request = c.request
      local answers = {}
      c.request = function(self, method, path, q, ...)
        if #answers == 1 then fault(sim, { compact = true }) end
        local res, rerr = request(self, method, path, q, ...)
        answers[#answers + 1] = { q.limit, q.continue and true, rerr and rerr.reason }
        return res, rerr
      end
      local all, err = kube.list_all("v1", "configmaps", NS, { label_selector = "app=pages",
        limit = 10 })
      c.request = nil
      assert.is_nil(err)
      assert.same({ { "10" }, { "10", true, "Expired" }, {} }, answers)
      assert.equal(25, #all.items)
    end)
  end)

  describe("patch", function()
    it("applies merge, json and strategic patches", function()
      assert(kube.create(cm("p", { a = "1" })))
      local p = assert(kube.patch("v1", "configmaps", NS, "p", { data = { b = "2" } }, "merge"))
      assert.same({ a = "1", b = "2" }, p.data)
      p = assert(kube.patch("v1", "configmaps", NS, "p",
        json.array { { op = "replace", path = "/data/a", value = "9" } }, "json"))
      assert.same({ a = "9", b = "2" }, p.data)
      p = assert(kube.patch("v1", "configmaps", NS, "p",
        '[{"op":"remove","path":"/data/b"}]', "json"))
      assert.same({ a = "9" }, p.data)
      p = assert(kube.patch(cm("p"), { metadata = { labels = { x = "y" } } }, "strategic"))
      assert.same({ x = "y" }, p.metadata.labels)
      local res, err = kube.patch("v1", "configmaps", NS, "p",
        '[{"op":"test","path":"/data/a","value":"0"}]', "json")
      assert.is_nil(res)
      assert.is_true(kube.is_invalid(err))
    end)

    it("applies server-side, with a conflict between managers until forced", function()
      local a = assert(kube.apply(cm("ssa", { k = "a" }), { field_manager = "alice" }))
      assert.same({ k = "a" }, a.data)
      local res, err = kube.apply(cm("ssa", { k = "b" }), { field_manager = "bob" })
      assert.is_nil(res)
      assert.is_true(kube.is_conflict(err))
      assert.equal(409, err.code)
      assert.matches('^Conflict: Apply failed with 1 conflict: conflict with "alice"',
        tostring(err))
      local b = assert(kube.apply(cm("ssa", { k = "b" }), { field_manager = "bob", force = true }))
      assert.same({ k = "b" }, b.data)
      local m = assert(kube.patch("v1", "configmaps", NS, "ssa", json.encode(cm("ssa",
        { k = "b", more = "1" })), "apply", { field_manager = "bob" }))
      assert.same({ k = "b", more = "1" }, m.data)
      -- a field an update wrote names its manager with the version it used
      m.data.k = "c"
      assert(kube.update(m))
      res, err = kube.apply(cm("ssa", { k = "d" }), { field_manager = "bob" })
      assert.is_nil(res)
      assert.equal('Apply failed with 1 conflict: conflict with "kubelua" using v1: .data.k',
        err.message)
      assert.same({ { reason = "FieldManagerConflict", field = ".data.k",
        message = 'conflict with "kubelua" using v1' } }, err.details.causes)
      -- several conflicts: grouped by manager, a field a line
      res, err = kube.apply(cm("ssa", { k = "e", more = "2" }), { field_manager = "carol" })
      assert.is_nil(res)
      assert.equal('Apply failed with 2 conflicts: conflicts with "bob":\n- .data.more\n'
        .. 'conflicts with "kubelua" using v1:\n- .data.k', err.message)
      assert.equal(2, #err.details.causes)
    end)
  end)

  describe("discovery", function()
    local crd = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
      metadata = { name = "widgets.example.com" },
      spec = { group = "example.com", scope = "Namespaced",
        names = { plural = "widgets", singular = "widget", kind = "Widget" },
        versions = json.array { { name = "v1", served = true, storage = true,
          subresources = { status = {} },
          schema = { openAPIV3Schema = { type = "object",
            ["x-kubernetes-preserve-unknown-fields"] = true } } } } } }

    local function widget(name)
      return { apiVersion = "example.com/v1", kind = "Widget",
        metadata = { name = name, namespace = NS }, spec = { size = 3 } }
    end

    it("resolves built-in kinds, namespaced and not", function()
      local info = assert(c:resolve("apps/v1", "Deployment"))
      assert.equal("deployments", info.name)
      assert.is_true(info.namespaced)
      assert.is_true(info.subresources.status)
      assert.is_true(info.subresources.scale)
      info = assert(c:resolve("v1", "Namespace"))
      assert.equal("namespaces", info.name)
      assert.is_false(info.namespaced)
      local res, err = c:resolve("v1", "Nothing")
      assert.is_nil(res)
      assert.equal('NoKindMatch: no matches for kind "Nothing" in version "v1"', tostring(err))
      assert.is_false(kube.is_not_found(err))
      assert.is_true(kube.is_no_match(err))
      assert.is_false(kube.is_no_match(client.new_error(404, "NotFound", "x")))
    end)

    it("takes a Kind or a singular wherever a resource is named", function()
      local obj = assert(kube.create(cm("kinded", { k = "1" })))
      for _, res in ipairs({ "ConfigMap", "configmap", "configmaps", "ConfigMaps" }) do
        assert.same(obj, assert(kube.get("v1", res, NS, "kinded")), res)
      end
      local only = { field_selector = "metadata.name=kinded" }
      local list = assert(kube.list("v1", "ConfigMap", NS, only))
      assert.equal(1, #list.items)
      assert.equal("kinded", list.items[1].metadata.name)
      assert.same(list.items, assert(kube.list_all("v1", "configmap", NS, only)).items)
      local p = assert(kube.patch("v1", "ConfigMap", NS, "kinded", { data = { k = "2" } }))
      assert.equal("2", p.data.k)
      assert.equal(NS, assert(kube.get("v1", "Namespace", nil, NS)).metadata.name)
      -- kube.informer finds a singular the same way
      assert(kube.connect{ server = srv.base, token = srv.token, tls = srv.tls })
      local inf = kube.informer("v1", "configmap", { namespace = NS })
      client.set_default(c)
      assert.equal("v1/configmaps@" .. NS, inf:name())
      assert.is_true(kube.wait_for_sync(inf, 10))
      assert.same(obj.metadata.uid, inf:get(NS .. "/kinded").metadata.uid)
      kube._stop_informers(srv.base)
      assert(kube.delete("v1", "ConfigMap", NS, "kinded"))
      -- get-then-create: a missing object of a known kind is a real NotFound
      local res, err = kube.get("v1", "ConfigMap", NS, "kinded")
      assert.is_nil(res)
      assert.equal('NotFound: configmaps "kinded" not found', tostring(err))
      assert.is_true(kube.is_not_found(err))
    end)

    it("refuses a kind or resource discovery does not know, which is no NotFound", function()
      local cases = {
        { "v1", "Nope", 'NoKindMatch: no matches for kind "Nope" in version "v1"' },
        { "v1", "nothings", "NoResourceMatch: no matches for /v1, Resource=nothings" },
        { "apps/v1", "deploymentz", "NoResourceMatch: no matches for apps/v1, Resource=deploymentz" },
        { "nope.example.com/v1", "bars",
          "NoResourceMatch: no matches for nope.example.com/v1, Resource=bars" },
        { "nope.example.com/v1", "Bar",
          'NoKindMatch: no matches for kind "Bar" in version "nope.example.com/v1"' },
      }
      for _, case in ipairs(cases) do
        local av, res, want = case[1], case[2], case[3]
        for _, call in ipairs({
          function() return kube.get(av, res, NS, "x") end,
          function() return kube.list(av, res, NS) end,
          function() return kube.list_all(av, res) end,
          function() return kube.patch(av, res, NS, "x", { data = {} }) end,
          function() return kube.delete(av, res, NS, "x") end,
        }) do
          local r, err = call()
          assert.is_nil(r)
          assert.equal(want, tostring(err))
          assert.equal(0, err.code)
          assert.is_false(kube.is_not_found(err))
          assert.is_true(kube.is_no_match(err))
        end
      end

    end)

    it("fetches discovery again on a miss at most once per discovery_refresh", function()
      local fetches = {}
      local function counting(refresh)
        local cc = new_client{ qps = 0, discovery_refresh = refresh }
        cc.request = function(self, method, path, ...)
          if path == "/api/v1" or path:match("^/apis/[^/]+/[^/]+$") then
            fetches[path] = (fetches[path] or 0) + 1
          end
          return c.request(self, method, path, ...)
        end
        return cc
      end
      local slow = counting(60)
      for _ = 1, 3 do
        assert.equal("NoKindMatch", select(2, slow:get("v1", "Nope", NS, "x")).reason)
        assert.equal("NoResourceMatch", select(2, slow:get("nope.example.com/v1", "bars",
          NS, "x")).reason)
      end
      assert(slow:get("v1", "Namespace", nil, NS)) -- a hit fetches nothing
      assert.same({ ["/api/v1"] = 1, ["/apis/nope.example.com/v1"] = 1 }, fetches)
      fetches = {}
      local eager = counting(0)
      for _ = 1, 3 do eager:get("v1", "Nope", NS, "x") end
      assert(eager:get("v1", "ConfigMap", NS, "rt"))
      assert.same({ ["/api/v1"] = 3 }, fetches)
    end)

    it("resolves a CRD created during the run, and refreshes on a miss", function()
      local res, err = kube.create(widget("w1"))
      assert.is_nil(res)
      assert.equal('NoKindMatch: no matches for kind "Widget" in version "example.com/v1"',
        tostring(err))
      assert(kube.create(crd))
      -- the miss above fetched discovery: the next fetch may come a second later
      assert.is_true(support.eventually(function() return c:resolve("example.com/v1", "Widget") end))
      local w = assert(kube.create(widget("w1")))
      assert.equal(3, w.spec.size)
      w.status = { ready = true }
      local st = assert(kube.update_status(w))
      assert.is_true(st.status.ready)
      assert.same(st, assert(kube.get("example.com/v1", "widgets", NS, "w1")))
      assert.same(st, assert(kube.get(widget("w1"), { subresource = "status" })))
      -- a second kind in the cached group-version: found by one refresh
      local gadgets = json.decode(json.encode(crd))
      gadgets.metadata.name = "gadgets.example.com"
      gadgets.spec.names = { plural = "gadgets", singular = "gadget", kind = "Gadget" }
      assert(kube.create(gadgets))
      assert.is_true(support.eventually(function() return c:resolve("example.com/v1", "Gadget") end))
      local g = widget("g1")
      g.kind = "Gadget"
      assert.equal("g1", assert(kube.apply(g, { field_manager = "spec" })).metadata.name)
      assert(kube.delete(g))
    end)
  end)

  describe("errors", function()
    it("maps 401 for a wrong token and 403 for a user without rights", function()
      local bad = new_client{ token = "wrong" }
      local res, err = bad:get("v1", "configmaps", NS, "rt")
      assert.is_nil(res)
      assert.is_true(kube.is_unauthorized(err))
      assert.equal(401, err.code)
      assert.equal("Unauthorized: Unauthorized", tostring(err))
      local bob = new_client{ token = "bobtoken" }
      res, err = bob:get("v1", "configmaps", NS, "rt")
      assert.is_nil(res)
      assert.is_true(kube.is_forbidden(err))
      assert.equal('Forbidden: configmaps "rt" is forbidden: User "bob" cannot get resource '
        .. '"configmaps" in API group "" in the namespace "client-spec"', tostring(err))
    end)

    it("takes each request's token from creds, and refreshes it once after a 401", function()
      local creds = { tokens = { "stale", srv.token }, calls = 0, invalidated = {} }
      function creds.token(self)
        self.calls = self.calls + 1
        return self.tokens[1]
      end
      function creds.invalidate(self, start)
        self.invalidated[#self.invalidated + 1] = start
        table.remove(self.tokens, 1)
      end
      local cc = new_client{ creds = creds }
      local t0 = kube.now()
      -- the first request, discovery's, is tried twice; the get once
      assert.equal("rt", assert(cc:get("v1", "configmaps", NS, "rt")).metadata.name)
      assert.equal(3, creds.calls)
      assert.equal(1, #creds.invalidated)
      assert.is_true(math.abs(creds.invalidated[1] - t0) < 1)
      assert(cc:get("v1", "configmaps", NS, "rt"))
      assert.equal(4, creds.calls)
      -- a second 401 in a row is the answer
      creds.tokens = { "wrong", "also-wrong", srv.token }
      local res, err = cc:get("v1", "configmaps", NS, "rt")
      assert.is_nil(res)
      assert.equal("Unauthorized: Unauthorized", tostring(err))
      -- a token that cannot be had
      function creds.token() return nil, "exec plugin failed" end
      res, err = cc:get("v1", "configmaps", NS, "rt")
      assert.is_nil(res)
      assert.is_true(kube.is_unauthorized(err))
      assert.equal(0, err.code)
      assert.equal("Unauthorized: credentials: exec plugin failed", tostring(err))
    end)

    it("builds errors from non-Status bodies and transport failures", function()
      local res, err = c:request("GET", "/apis/no.such.group")
      assert.is_nil(res)
      assert.equal(404, err.code)
      assert.equal("NotFound", err.reason)
      assert.equal("404 page not found\n", err.message)
      assert.is_true(kube.is_not_found(err))
      local down = client.new{ server = "http://127.0.0.1:1", timeout = 5 }
      res, err = down:get("v1", "configmaps", "default", "x")
      assert.is_nil(res)
      assert.equal(0, err.code)
      assert.equal("Transport", err.reason)
      assert.matches("^Transport: http: Failed to connect to 127%.0%.0%.1 port 1", tostring(err))
    end)

    it("classifies by reason, and by code only for unknown reasons", function()
      local e = client.new_error
      assert.is_true(kube.is_gone(e(410, "Gone", "x")))
      assert.is_true(kube.is_gone(e(410, "Strange", "x")))
      assert.is_false(kube.is_gone(e(410, "Expired", "x")))
      assert.is_true(kube.is_expired(e(410, "Expired", "x")))
      assert.is_true(kube.is_too_many_requests(e(429, "TooManyRequests", "x")))
      assert.is_true(kube.is_not_found(e(404, "Unknown", "x")))
      assert.is_false(kube.is_not_found(e(404, "Forbidden", "x")))
      assert.is_false(kube.is_already_exists(e(409, "Unknown", "x")))
      assert.is_false(kube.is_not_found(nil))
      assert.is_false(kube.is_not_found("NotFound"))
    end)

    it("retries 429 with Retry-After, sleeping as told #sim", function()
      fault(sim, { fail_next = 2, code = 429, retry_after = 1 })
      local t0 = kube.monotonic()
      local got = assert(kube.get("v1", "configmaps", NS, "rt"))
      assert.equal("rt", got.metadata.name)
      local took = kube.monotonic() - t0
      assert.is_true(took >= 1.9 and took < 4, "took " .. took)
      -- writes too, and 503
      fault(sim, { fail_next = 1, code = 503, retry_after = 0 })
      assert(kube.patch("v1", "configmaps", NS, "rt", { data = { retried = "yes" } }))
    end)

    it("gives up after 10 retries, and does not retry without Retry-After #sim", function()
      fault(sim, { fail_next = 11, code = 429, retry_after = 0 })
      local res, err = kube.get("v1", "configmaps", NS, "rt")
      assert.is_nil(res)
      assert.is_true(kube.is_too_many_requests(err))
      assert.equal("TooManyRequests: Too many requests, please try again later.", tostring(err))
      assert.equal(0, err.details.retryAfterSeconds)
      assert(kube.get("v1", "configmaps", NS, "rt")) -- all 11 were used
      fault(sim, { fail_next = 1, code = 500 })
      res, err = kube.get("v1", "configmaps", NS, "rt")
      assert.is_nil(res)
      assert.equal("InternalError: Internal error occurred: injected fault", tostring(err))
      assert(kube.get("v1", "configmaps", NS, "rt"))
    end)
  end)

  describe("tasks and the rate limit", function()
    it("completes 200 concurrent gets from 200 tasks", function()
      local done = 0
      for _ = 1, 200 do
        kube.spawn(function()
          local obj = kube.get("v1", "configmaps", NS, "rt")
          if obj and obj.metadata.name == "rt" then done = done + 1 end
        end)
      end
      for _ = 1, 1000 do
        if done == 200 then break end
        kube.sleep(0.01)
      end
      assert.equal(200, done)
    end)

    it("fetches a group-version once for many tasks that resolve at the same time", function()
      local fresh = new_client{ qps = 0 }
      local fetches, done = 0, 0
      fresh.request = function(...)
        fetches = fetches + 1
        return c.request(...)
      end
      for _ = 1, 50 do
        kube.spawn(function()
          if fresh:resolve("apps/v1", "Deployment") then done = done + 1 end
        end)
      end
      for _ = 1, 500 do
        if done == 50 then break end
        kube.sleep(0.01)
      end
      assert.equal(50, done)
      assert.equal(1, fetches)
    end)

    it("spends the burst at once, then waits for tokens at qps", function()
      local limited = new_client{ qps = 50, burst = 5 }
      local t0 = kube.monotonic()
      for _ = 1, 5 do assert(limited:get("v1", "namespaces", nil, NS)) end
      assert.is_true(kube.monotonic() - t0 < 0.5)
      local done = 0
      for _ = 1, 10 do
        kube.spawn(function()
          if limited:get("v1", "namespaces", nil, NS) then done = done + 1 end
        end)
      end
      for _ = 1, 300 do
        if done == 10 then break end
        kube.sleep(0.01)
      end
      assert.equal(10, done)
      local took = kube.monotonic() - t0
      assert.is_true(took >= 0.18 and took < 1, "took " .. took)
    end)

    it("refuses to run outside a task", function()
      local status, out, path = support.run_script(
        "local kube = require('kubelua'); kube.client.set_default(kube.client.new{ server = "
        .. "'http://127.0.0.1:1' }); kube.get('v1', 'configmaps', 'default', 'x')")
      assert.equal(1, status)
      assert.matches("ERROR script failed: " .. path .. ":1: kube.get: not inside a task (use "
        .. "kube.spawn or a worker)\n    stack traceback:\n", out, 1, true)
    end)

    it("raises on misuse at the caller's line", function()
      support.raises("kube.get: name must be a non-empty string, got nil",
        function() kube.get("v1", "configmaps", NS) end)
      support.raises("kube.get: api_version must be a non-empty string, got number",
        function() kube.get(1) end)
      support.raises("kube.list: opts must be a table, got string",
        function() kube.list("v1", "configmaps", NS, "x") end)
      support.raises("kube.create: expected an object table, got nil",
        function() kube.create() end)
      support.raises("kube.create: the object needs apiVersion and kind strings",
        function() kube.create{ metadata = {} } end)
      support.raises('kube.patch: type must be "merge", "json", "strategic" or "apply", got xml',
        function() kube.patch("v1", "configmaps", NS, "p", {}, "xml") end)
      support.raises("kube.update: the object has no metadata.name",
        function() kube.update{ apiVersion = "v1", kind = "ConfigMap", metadata = {} } end)
      support.raises('kube.update: opts.subresource must be "status" or "scale", got x',
        function() kube.update(cm("p"), { subresource = "x" }) end)
      support.raises("kube.patch: opts.force is only for an apply",
        function() kube.patch(cm("p"), {}, "merge", { force = true }) end)
      support.raises("kube.delete: opts.preconditions must be a table, got string",
        function() kube.delete(cm("p"), { preconditions = "x" }) end)
      support.raises("kube.list: metadata must be a table, got string",
        function() kube.list{ apiVersion = "v1", kind = "ConfigMap", metadata = "x" } end)
      support.raises("kube.apply: opts.field_manager is required for an apply",
        function() kube.apply(cm("ssa")) end)
      support.raises("kube.get: expected a client as self (use c:get(…))",
        function() c.get("v1", "configmaps", NS, "x") end)
      support.raises("client.new: opts.server must be an http(s) URL, got \"x\"",
        function() client.new{ server = "x" } end)
    end)

    it("connects on first use when no default client is set", function()
      local path = support.tempfile("require('kubelua').get('v1', 'configmaps', 'default', 'x')",
        ".lua")
      local status, out = support.sh("KUBECONFIG=/nonexistent/kubeconfig " .. support.kubelua
        .. " run " .. path)
      os.remove(path)
      assert.equal(1, status)
      assert.matches(path .. ":1: kube.get: not connected: ", out, 1, true)
    end)
  end)
end)
