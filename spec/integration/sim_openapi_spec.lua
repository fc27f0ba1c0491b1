-- The simulator's OpenAPI v3 documents: what kubectl reads before it
-- applies or creates (is fieldValidation a query parameter of the kind's
-- PATCH? does the PATCH take strategic merge?). kubectl 1.32 against
-- `kubelua sim` applies, diffs and server-side applies with them; without
-- them it refused with "failed to download openapi". The built-in group
-- versions' documents are kube-apiserver v1.26's, with every kind's
-- schema (spec/fixtures/apiserver/surface/openapi), so `kubectl explain`
-- explains.
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"

-- The PATCH operation of `path` in the document at url, and the document.
local function patch_op(sim, url, path)
  local code, h, raw, doc = H.request(sim, "GET", url)
  assert.equal(200, code, raw)
  assert.equal("application/json", h["content-type"])
  return doc.paths[path] and doc.paths[path].patch, doc, h
end

-- The names of an operation's query parameters, sorted.
local function query_params(o)
  local names = {}
  for _, p in ipairs(o.parameters) do
    if p["in"] == "query" then names[#names + 1] = p.name end
  end
  table.sort(names)
  return names
end

local keys = require("spec.support").sorted_keys
local read = require("spec.support").read

local DIR = "spec/fixtures/apiserver/surface/openapi/"

local compact = H.compact

describe("kubelua sim OpenAPI v3", function()
  local sim
  setup(function() sim = H.start() end)
  teardown(function() H.stop(sim) end)

  local function index()
    local code, _, raw, idx = H.request(sim, "GET", "/openapi/v3")
    assert.equal(200, code, raw)
    return idx.paths
  end

  it("serves the real server's index and documents byte for byte", function()
    local ua = { user_agent = "kubectl/v1.26.1 (linux/amd64) kubernetes/8f94681" }
    local code, _, raw = H.request(sim, "GET", "/openapi/v3", ua)
    assert.equal(200, code)
    assert.equal(compact(read(DIR .. "index.json")), raw)
    local paths = index()
    assert.equal(46, #keys(paths)) -- 23 group versions, their groups, and the server's own
    local url = paths["apis/coordination.k8s.io/v1"].serverRelativeURL
    local h
    code, h, raw = H.request(sim, "GET", url) -- as sent, even to curl
    assert.equal(200, code)
    assert.equal("application/json", h["content-type"])
    assert.equal(read(DIR .. "apis_coordination.k8s.io_v1.json"), raw)
    -- with every kind's schema and the extensions apply and patches follow
    local doc = json.decode(raw)
    local lease = doc.components.schemas["io.k8s.api.coordination.v1.Lease"]
    assert.same({ { group = "coordination.k8s.io", kind = "Lease", version = "v1" } },
      lease["x-kubernetes-group-version-kind"])
    local owners = doc.components.schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
      .properties.ownerReferences
    assert.same({ "uid", "merge" }, { owners["x-kubernetes-patch-merge-key"],
      owners["x-kubernetes-patch-strategy"] })
  end)

  it("gives each PATCH its kind, fieldValidation and the patch types it takes", function()
    local paths = index()
    local op, doc, h = patch_op(sim, paths["api/v1"].serverRelativeURL,
      "/api/v1/namespaces/{namespace}/configmaps/{name}")
    assert.equal("3.0.0", doc.openapi)
    assert.equal("public, immutable", h["cache-control"])
    assert.equal('"' .. paths["api/v1"].serverRelativeURL:match("hash=(%x+)") .. '"', h.etag)
    assert.same({ group = "", version = "v1", kind = "ConfigMap" },
      op["x-kubernetes-group-version-kind"])
    assert.equal("patch", op["x-kubernetes-action"])
    assert.equal("patchCoreV1NamespacedConfigMap", op.operationId)
    assert.same({ "dryRun", "fieldManager", "fieldValidation", "force" }, query_params(op))
    assert.same({ "application/apply-patch+yaml", "application/json-patch+json",
      "application/merge-patch+json", "application/strategic-merge-patch+json" },
      keys(op.requestBody.content))
    -- cluster-scoped kinds, subresources and the collection's operations
    assert.same({ group = "", version = "v1", kind = "Namespace" },
      doc.paths["/api/v1/namespaces/{name}"].patch["x-kubernetes-group-version-kind"])
    assert.equal("patchCoreV1NamespacedPodStatus",
      doc.paths["/api/v1/namespaces/{namespace}/pods/{name}/status"].patch.operationId)
    local coll = doc.paths["/api/v1/namespaces/{namespace}/configmaps"]
    assert.same({ "list", "post", "deletecollection" }, { coll.get["x-kubernetes-action"],
      coll.post["x-kubernetes-action"], coll.delete["x-kubernetes-action"] })
    assert.equal("deleteCoreV1CollectionNamespacedConfigMap", coll.delete.operationId)
    assert.same({ "dryRun", "fieldManager", "fieldValidation" }, query_params(coll.post))
    -- the scale subresource acts on autoscaling/v1 Scale
    local _, apps = patch_op(sim, paths["apis/apps/v1"].serverRelativeURL, "")
    assert.same({ group = "autoscaling", version = "v1", kind = "Scale" },
      apps.paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]
        .get["x-kubernetes-group-version-kind"])
    assert.is_nil(doc.paths["/api/v1/namespaces/{namespace}/leases/{name}"])
    assert.truthy(doc.components.schemas["io.k8s.api.core.v1.ConfigMap"])
    assert.same({ "*/*" }, keys(coll.post.requestBody.content))
    local del = doc.paths["/api/v1/namespaces/{namespace}/configmaps/{name}"].delete
    assert.same({ "dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy" },
      query_params(del))
    assert.is_nil(del.requestBody.required)
    -- a year's caching for a hashed URL, and a 304 for the Etag the client holds
    assert.matches("^%a%a%a, %d%d %a%a%a %d%d%d%d %d%d:%d%d:%d%d UTC$", h.expires)
    local code, h304, body = H.request(sim, "GET", paths["api/v1"].serverRelativeURL,
      { headers = { ["If-None-Match"] = h.etag } })
    assert.same({ 304, h.etag, "" }, { code, h304.etag, body })
  end)

  it("publishes a CRD's kinds, without strategic merge", function()
    assert.is_nil(index()["apis/example.com/v1"])
    local crd = H.fixture("09").request.body
    assert.equal(201, (H.request(sim, "POST",
      "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", { body = crd })))
    local url
    for _ = 1, 200 do
      url = (index()["apis/example.com/v1"] or {}).serverRelativeURL
      if url then break end
      H.sleep(0.01)
    end
    assert.truthy(url)
    local op = patch_op(sim, url, "/apis/example.com/v1/namespaces/{namespace}/widgets/{name}")
    assert.same({ group = "example.com", version = "v1", kind = "Widget" },
      op["x-kubernetes-group-version-kind"])
    assert.equal("patchExampleComV1NamespacedWidget", op.operationId)
    assert.same({ "dryRun", "fieldManager", "fieldValidation", "force" }, query_params(op))
    assert.same({ "application/apply-patch+yaml", "application/json-patch+json",
      "application/merge-patch+json" }, keys(op.requestBody.content))
  end)

  it("redirects a stale hash to the current document and 404s what it does not serve", function()
    local url = index()["api/v1"].serverRelativeURL
    assert.equal(200, (H.request(sim, "GET", "/openapi/v3/api/v1?hash="))) -- empty: no hash
    local code, h, body = H.request(sim, "GET", "/openapi/v3/api/v1?hash=0123ABCD")
    assert.equal(301, code)
    assert.equal(url, h.location)
    assert.equal('<a href="' .. url .. '">Moved Permanently</a>.\n\n', body)
    -- without a hash: the document, not to be cached as immutable
    local _, doc, h2 = patch_op(sim, "/openapi/v3/api/v1", "")
    assert.equal("3.0.0", doc.openapi)
    assert.equal("no-cache, private", h2["cache-control"])
    code, _, body = H.request(sim, "GET", "/openapi/v3/apis/nope.example/v1")
    assert.equal(404, code)
    assert.equal("404 page not found\n", body)
    assert.is_true(json.is_array(doc.paths["/api/v1/namespaces/{name}"].parameters))
  end)
end)
