-- kube.http.request: HTTP from a task, against a `kubelua sim` process.
local kube = require "kubelua"
local http = require "kubelua.http"
local sim_helper = require "spec.integration.sim_helper"
local support = require "spec.support"

describe("kube.http.request", function()
  local sim
  setup(function() sim = sim_helper.start() end)
  teardown(function() sim_helper.stop(sim) end)

  it("returns status, kept headers and body", function()
    local r = http.request{ url = sim.base .. "/version" }
    assert.equal(200, r.status)
    assert.equal("application/json", r.headers["content-type"])
    assert.equal("v1.26.0", kube.json.decode(r.body).gitVersion)
  end)

  it("sends the method, headers and body", function()
    local r = http.request{
      method = "POST", url = sim.base .. "/api/v1/namespaces",
      headers = { ["Content-Type"] = "application/json" },
      body = '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"http-spec"}}',
    }
    assert.equal(201, r.status)
    assert.equal("http-spec", kube.json.decode(r.body).metadata.name)
    r = http.request{ url = sim.base .. "/api/v1/namespaces/http-spec" }
    assert.equal(200, r.status)
  end)

  it("returns HTTP errors as responses, not failures", function()
    local r = http.request{ url = sim.base .. "/api/v1/namespaces/nope" }
    assert.equal(404, r.status)
    assert.equal("NotFound", kube.json.decode(r.body).reason)
  end)

  it("reports transport failures as nil, message, code", function()
    local r, err, code = http.request{ url = "http://127.0.0.1:1/x", timeout = 5 }
    assert.is_nil(r)
    assert.matches("^http: Failed to connect to 127%.0%.0%.1 port 1", err)
    assert.equal("Transport", code)
  end)

  it("completes 200 concurrent requests from 200 tasks", function()
    local done = 0
    for _ = 1, 200 do
      kube.spawn(function()
        local r = http.request{ url = sim.base .. "/api/v1/namespaces/http-spec" }
        if r and r.status == 200 then done = done + 1 end
      end)
    end
    for _ = 1, 1000 do
      if done == 200 then break end
      kube.sleep(0.01)
    end
    assert.equal(200, done)
  end)

  it("rejects bad options with the function's name", function()
    support.raises("kube.http.request: opts must be a table, got string",
      function() http.request("http://x") end)
    support.raises("kube.http.request: opts.url is required",
      function() http.request{} end)
    support.raises("kube.http.request: headers must map names to string values",
      function() http.request{ url = sim.base, headers = { 1 } } end)
    local r, err, code = http.request{ url = sim.base, headers = { ["X-Bad"] = "a\r\nb" } }
    assert.is_nil(r)
    assert.equal("Invalid", code)
    assert.matches("^http: ", err)
    assert.is_nil(err:find("a\r\nb", 1, true))
  end)
end)
