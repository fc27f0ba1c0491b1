-- A sequence for both servers about a CRD whose conversion strategy is
-- Webhook: writes through each version, gets and lists of the other
-- version (at resourceVersion 0 too), a watch of it, and the same while
-- the webhook fails. The webhook is served by this process over TLS on a
-- loopback port (a certificate for IP 127.0.0.1 from
-- kubelua.envtest.serving_certs), each server calling its own path
-- (/sim, /real), and records the ConversionReviews it gets: after a step,
-- a "reviews" step answers with those the webhook got since, as
-- "DESIRED <- APIVERSION/NAME ..." sorted (a write's answer and the watch
-- cache's conversion come in either order), so that both servers' calls
-- are compared as their answers are.
local kube = require "kubelua"
local json = require "kubelua.json"
local httpd = require "kubelua.httpd"
local envtest = require "kubelua.envtest"
local process = require "kubelua.process"
local fixtures = require "spec.differential.fixtures"
local read = require("spec.support").read

local ipairs, tostring = ipairs, tostring
local concat, sort = table.concat, table.sort

local _M = {}

local GROUP = "conv.example.com"
local CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
local V1 = "/apis/" .. GROUP .. "/v1/namespaces/default/greetings"
local ALPHA = "/apis/" .. GROUP .. "/v1alpha1/namespaces/default/greetings"
local MERGE = { ["Content-Type"] = "application/merge-patch+json" }

-- The webhook: converts spec.text (v1alpha1) to spec.message (v1) and
-- back; each server's mode (hook.mode[name]: both play at once) "fixed"
-- puts "fixed: " before what it converts to v1alpha1, "fail" refuses
-- every review, "refuse NAME" those that hold the object NAME.
local function start_webhook()
  local dir = assert(process.mkdtemp((os.getenv("TMPDIR") or "/tmp") .. "/kubelua-conv-"))
  assert(envtest.serving_certs(dir, "kubelua-conversion", {}))
  local hook = { mode = {}, got = { sim = {}, real = {} }, dir = dir,
    ca = require("kubelua.sim.util").b64encode(read(dir .. "/ca.crt")) }
  local function convert(obj, to, mode)
    local s = type(obj.spec) == "table" and obj.spec or {}
    if to == GROUP .. "/v1" then
      s.message, s.text = s.text, nil
    else
      s.text, s.message = (mode == "fixed" and "fixed: " or "") .. tostring(s.message), nil
    end
    obj.spec, obj.apiVersion = s, to
    return obj
  end
  hook.srv = assert(httpd.listen{ host = "127.0.0.1", port = 0,
    tls_cert = dir .. "/server.crt", tls_key = dir .. "/server.key",
    handler = function(req)
      local name = req:path():match("^/(%a+)")
      local got, mode = hook.got[name], hook.mode[name]
      local review = json.decode(tostring(req:body()))
      local rq = type(review) == "table" and review.request
      if not got or type(rq) ~= "table" then
        return req:reply(400, { ["Content-Type"] = "text/plain" }, "not a ConversionReview\n")
      end
      local seen, out, refused = {}, json.array {}, mode == "fail"
      for i, obj in ipairs(rq.objects) do
        seen[i] = tostring(obj.apiVersion) .. "/" .. tostring(obj.metadata.name)
        refused = refused or mode == "refuse " .. tostring(obj.metadata.name)
        out[i] = convert(obj, rq.desiredAPIVersion, mode)
      end
      got[#got + 1] = tostring(rq.desiredAPIVersion) .. " <- " .. concat(seen, " ")
      local resp = { uid = rq.uid, convertedObjects = out, result = { status = "Success" } }
      if refused then
        resp = { uid = rq.uid, result = { status = "Failed", message = "down for maintenance" } }
      end
      req:reply(200, { ["Content-Type"] = "application/json" }, json.encode{
        apiVersion = "apiextensions.k8s.io/v1", kind = "ConversionReview", response = resp })
    end })
  return hook
end

local function schema()
  return { openAPIV3Schema = { type = "object", properties = { spec = { type = "object",
    ["x-kubernetes-preserve-unknown-fields"] = true } } } }
end

local function greeting(version, name, spec, labels, finalizers)
  return { apiVersion = GROUP .. "/" .. version, kind = "Greeting",
    metadata = { name = name, labels = labels, finalizers = finalizers }, spec = spec }
end

-- steps() -> the steps, and a function that stops their webhook.
function _M.steps()
  local hook = start_webhook()
  local url = "https://127.0.0.1:" .. hook.srv:port() .. "/"
  local crd = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
    metadata = { name = "greetings." .. GROUP },
    spec = { group = GROUP, scope = "Namespaced",
      names = { plural = "greetings", singular = "greeting", kind = "Greeting" },
      versions = {
        { name = "v1", served = true, storage = true, schema = schema() },
        { name = "v1alpha1", served = true, storage = false, schema = schema() },
      },
      conversion = { strategy = "Webhook", webhook = { conversionReviewVersions = { "v1" },
        clientConfig = { caBundle = hook.ca } } } } }
  -- the reviews this target's webhook path got since the last time, sorted,
  -- once the watch cache's conversions of the last writes had time to come
  -- (distinct: each one once, where their count is the retries' timing)
  local function reviews(label, distinct)
    return { label = "reviews " .. label, call = function(t)
      kube.sleep(0.5)
      local got, out, seen = hook.got[t.name], {}, {}
      hook.got[t.name] = {}
      for _, r in ipairs(got) do
        if not (distinct and seen[r]) then out[#out + 1], seen[r] = r, true end
      end
      sort(out)
      return { status = 200, body = { reviews = json.array(out) } }
    end }
  end
  local function mode(m)
    return { label = "webhook " .. m, call = function(t)
      hook.mode[t.name] = m
      return { status = 200, body = {} }
    end }
  end
  local function get(label, path) return { label = label, method = "GET", path = path } end
  local function text_is(want)
    return function(res)
      return type(res.body) == "table" and type(res.body.spec) == "table"
        and res.body.spec.text == want
    end
  end
  -- a list of v1 for its resourceVersion, then at once a watch of v1alpha1
  -- from there for the seconds given and, half a second in, merge patches of
  -- conv-b's message through v1 (its answer is the last one's): a list of
  -- steps, in the list of steps
  local function watching(label, seconds, messages)
    return { { label = "list v1 before the watch" .. label, method = "GET", path = V1,
        after = function(st, res) st.marks.rv = res.body.metadata.resourceVersion end },
      { label = "watch v1alpha1" .. label, method = "GET", watch = true, concurrent = true,
        path = ALPHA .. "?watch=true&timeoutSeconds=" .. seconds,
        prepare = function(st, rq) rq.path = rq.path .. "&resourceVersion=" .. st.marks.rv end },
      { label = "patch b through v1" .. label, concurrent = true, call = function(t)
        kube.sleep(0.5)
        local res
        for _, m in ipairs(messages) do
          res = t:request{ method = "PATCH", path = V1 .. "/conv-b", headers = MERGE,
            body = { spec = { message = m } } }
        end
        return res
      end } }
  end
  local steps = {
    { label = "create the CRD", method = "POST", path = CRDS, body = crd,
      prepare = function(st, rq) rq.body.spec.conversion.webhook.clientConfig.url = url
        .. st.target end },
    { label = "get the CRD once established", method = "GET", wait = fixtures.established,
      path = CRDS .. "/greetings." .. GROUP },
    get("list v1alpha1 empty", ALPHA),
    reviews("before"),
    { label = "create a through v1alpha1", method = "POST", path = ALPHA,
      body = greeting("v1alpha1", "conv-a", { text = "hi" }) },
    reviews("create a"),
    { label = "create b through v1", method = "POST", path = V1,
      body = greeting("v1", "conv-b", { message = "yo" }) },
    reviews("create b"),
    get("get a v1", V1 .. "/conv-a"),
    reviews("get a v1"),
    get("get a v1alpha1", ALPHA .. "/conv-a"),
    reviews("get a v1alpha1"),
    get("list v1alpha1", ALPHA),
    reviews("list v1alpha1"),
    { label = "list v1alpha1 at 0", method = "GET", path = ALPHA .. "?resourceVersion=0",
      unordered = true },
    get("get b v1alpha1 at 0", ALPHA .. "/conv-b?resourceVersion=0"),
    reviews("reads at 0"),
    mode("fixed"),
    get("get a v1alpha1 fixed", ALPHA .. "/conv-a"),
    get("list v1alpha1 fixed", ALPHA),
    { label = "list v1alpha1 at 0 fixed", method = "GET", path = ALPHA .. "?resourceVersion=0",
      unordered = true },
    reviews("fixed"),
    mode("ok"),
    watching("", 3, { "two", "three" }),
    reviews("watch"),
    { label = "patch a through v1", method = "PATCH", path = V1 .. "/conv-a", headers = MERGE,
      body = { spec = { message = "one" } } },
    reviews("patch a"),
    mode("fail"),
    get("get a v1alpha1 down", ALPHA .. "/conv-a"),
    get("get a v1 down", V1 .. "/conv-a"),
    get("list v1alpha1 down", ALPHA),
    { label = "list v1alpha1 at 0 down", method = "GET", path = ALPHA .. "?resourceVersion=0",
      unordered = true },
    { label = "create d through v1alpha1 down", method = "POST", path = ALPHA,
      body = greeting("v1alpha1", "conv-d", { text = "d" }) },
    reviews("down"),
    watching(" down", 2, { "four" }),
    mode("ok"),
    { label = "get b v1alpha1 at 0 caught up", method = "GET", wait = text_is("four"),
      path = ALPHA .. "/conv-b?resourceVersion=0" },
    reviews("caught up", true),
    -- a list through v1alpha1 with a selector converts every object in its
    -- scope, then matches: one that does not match, refused, fails it;
    -- metadata.name= in a namespace reads that one object alone
    { label = "create c through v1 labelled", method = "POST", path = V1,
      body = greeting("v1", "conv-c", { message = "see" }, { x = "y" }) },
    reviews("create c"),
    get("list v1alpha1 x=y", ALPHA .. "?labelSelector=x%3Dy"),
    reviews("list x=y"),
    get("list v1alpha1 x!=y limit 1", ALPHA .. "?labelSelector=x%21%3Dy&limit=1"),
    reviews("list x!=y limit 1"),
    get("list v1alpha1 name=conv-c", ALPHA .. "?fieldSelector=metadata.name%3Dconv-c"),
    reviews("list name=conv-c"),
    get("list all v1alpha1 namespace=other", "/apis/" .. GROUP .. "/v1alpha1/greetings"
      .. "?fieldSelector=metadata.namespace%3Dother"),
    reviews("list namespace=other"),
    mode("refuse conv-a"),
    get("list v1alpha1 x=y refused a", ALPHA .. "?labelSelector=x%3Dy"),
    get("list v1alpha1 name=conv-c refused a", ALPHA .. "?fieldSelector=metadata.name%3Dconv-c"),
    -- (in no namespace the name names no key: every object is read)
    get("list all v1alpha1 name=conv-c refused a", "/apis/" .. GROUP .. "/v1alpha1/greetings"
      .. "?fieldSelector=metadata.name%3Dconv-c"),
    get("list all v1alpha1 namespace=other refused a", "/apis/" .. GROUP .. "/v1alpha1/greetings"
      .. "?fieldSelector=metadata.namespace%3Dother"),
    reviews("refused a"),
    -- a delete through v1alpha1: each read and write of the registry a
    -- review, its answer converted from what it stored (the webhook fixed
    -- since is seen there)
    mode("ok"),
    { label = "create e through v1 with a finalizer", method = "POST", path = V1,
      body = greeting("v1", "conv-e", { message = "ee" }, nil, { "example.com/keep" }) },
    { label = "delete e through v1 dry run", method = "DELETE", path = V1 .. "/conv-e?dryRun=All" },
    get("get e v1 after the dry run", V1 .. "/conv-e"),
    reviews("create e"),
    { label = "delete e through v1alpha1 dry run", method = "DELETE",
      path = ALPHA .. "/conv-e?dryRun=All" },
    reviews("delete e dry run"),
    mode("fixed"),
    { label = "delete e through v1alpha1", method = "DELETE", path = ALPHA .. "/conv-e" },
    reviews("delete e"),
    { label = "delete e through v1alpha1 again", method = "DELETE", path = ALPHA .. "/conv-e" },
    reviews("delete e again"),
    mode("refuse conv-e"),
    { label = "delete e through v1alpha1 refused", method = "DELETE", path = ALPHA .. "/conv-e" },
    reviews("delete e refused"),
    mode("ok"),
    { label = "delete c through v1alpha1 dry run", method = "DELETE",
      path = ALPHA .. "/conv-c?dryRun=All" },
    reviews("delete c dry run"),
    { label = "delete c through v1alpha1", method = "DELETE", path = ALPHA .. "/conv-c" },
    reviews("delete c"),
    { label = "finalize e through v1", method = "PATCH", path = V1 .. "/conv-e", headers = MERGE,
      body = { metadata = { finalizers = json.null } } },
    reviews("finalize e"),
    -- a patch through v1alpha1: its state (the watch cache's object) and
    -- what it writes converted, its answer back; unchanged, the storage
    -- read again
    { label = "patch a through v1alpha1", method = "PATCH", path = ALPHA .. "/conv-a",
      headers = MERGE, body = { spec = { text = "three" } } },
    reviews("patch a v1alpha1"),
    { label = "patch a through v1alpha1 unchanged", method = "PATCH", path = ALPHA .. "/conv-a",
      headers = MERGE, body = { spec = { text = "three" } } },
    reviews("patch a v1alpha1 unchanged"),
    -- a write whose field manager cannot convert the object into an
    -- entry's apiVersion (conv-a keeps a v1alpha1 one) is stored without
    -- managedFields
    mode("refuse conv-a"),
    { label = "patch a through v1 refused", method = "PATCH", path = V1 .. "/conv-a",
      headers = MERGE, body = { spec = { message = "two" } } },
    mode("ok"),
    { label = "get a v1alpha1 at 0 after the refusal", method = "GET", wait = text_is("two"),
      path = ALPHA .. "/conv-a?resourceVersion=0" },
    reviews("refusal caught up", true),
    -- the CRD goes (its answer is not this sequence's concern)
    { label = "delete the CRD", call = function(t)
      t:request{ method = "DELETE", path = CRDS .. "/greetings." .. GROUP }
      return { status = 200, body = {} }
    end },
  }
  local flat = {}
  for _, step in ipairs(steps) do
    if step.label then
      flat[#flat + 1] = step
    else
      for _, s in ipairs(step) do flat[#flat + 1] = s end
    end
  end
  return flat, function()
    hook.srv:close()
    os.execute("rm -rf '" .. hook.dir .. "'")
  end
end

return _M
