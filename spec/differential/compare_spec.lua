-- The differential suite's own machinery, without a server: what the
-- normalization makes the same and what it keeps, the field-by-field
-- comparison, and the bookkeeping of known differences.
local json = require "kubelua.json"
local normalize = require "spec.differential.normalize"
local compare = require "spec.differential.compare"

local array = json.array

-- The answers of one server's sequence, normalized: steps is a list of
-- { label, body }.
local function normalized(steps)
  local ctx = normalize.new()
  for _, s in ipairs(steps) do ctx:see(s[2], s[1]) end
  local out = {}
  for i, s in ipairs(steps) do out[i] = ctx:apply(s[2]) end
  return out
end

local function cm(name, rv, uid, extra)
  local o = { kind = "ConfigMap", metadata = { name = name, resourceVersion = rv, uid = uid,
    creationTimestamp = "2026-12-05T10:00:00Z" } }
  for k, v in pairs(extra or {}) do o.metadata[k] = v end
  return o
end

local U1 = "0ad2605b-594b-4a5a-b2bd-e36a88154a77"
local U2 = "91651728-1b7c-4849-b864-8cf10acc49a3"

describe("spec.differential.normalize", function()
  it("names versions and uids by the step that first gave them, and lists by the last below",
    function()
      local got = normalized {
        { "create a", cm("a", "10", U1) },
        { "update a", cm("a", "12", U1) },
        { "list", { kind = "ConfigMapList", metadata = { resourceVersion = "15" },
          items = array { cm("a", "12", U1) } } },
        { "create b", cm("b", "20", U2) },
      }
      assert.same({ "rv@create a", "uid@create a", "<time>" }, { got[1].metadata.resourceVersion,
        got[1].metadata.uid, got[1].metadata.creationTimestamp })
      assert.same({ "rv@update a", "uid@create a" }, { got[2].metadata.resourceVersion,
        got[2].metadata.uid })
      assert.equal("rv>=rv@update a", got[3].metadata.resourceVersion)
      assert.equal("rv@update a", got[3].items[1].metadata.resourceVersion)
      assert.same({ "rv@create b", "uid@create b" }, { got[4].metadata.resourceVersion,
        got[4].metadata.uid })
    end)

  it("keeps a generated name's prefix, masks cluster IPs, node ports, continue tokens",
    function()
      local svc = { kind = "Service", metadata = { name = "web-x7k2p", generateName = "web-" },
        spec = { clusterIP = "10.96.0.17", clusterIPs = array { "10.96.0.17" },
          ports = array { { port = 80, nodePort = 31234 } } } }
      local st = { kind = "Status", message = 'services "web-x7k2p" not found' }
      local got = normalized { { "create", svc }, { "get", st },
        { "list", { metadata = { continue = "eyJ2Ijo", resourceVersion = "3" }, items = {} } } }
      assert.same({ "web-<gen#1>", "<ip>", "<ip>", "<port>" }, { got[1].metadata.name,
        got[1].spec.clusterIP, got[1].spec.clusterIPs[1], got[1].spec.ports[1].nodePort })
      assert.equal('services "web-<gen#1>" not found', got[2].message)
      assert.equal("<continue>", got[3].metadata.continue)
    end)

  it("leaves a resourceVersion a client wrote inside an object alone", function()
    local ev = { kind = "Event", metadata = { name = "e", resourceVersion = "7" },
      involvedObject = { name = "a", resourceVersion = "211" } }
    local got = normalized { { "create", ev } }
    assert.same({ "rv@create", "211" }, { got[1].metadata.resourceVersion,
      got[1].involvedObject.resourceVersion })
  end)
end)

describe("spec.differential.compare", function()
  it("compares members of named arrays by name, and says when their order differs", function()
    local a = { items = array { { metadata = { name = "x" }, data = { k = "1" } },
      { metadata = { name = "y" } } } }
    local b = { items = array { { metadata = { name = "y" } },
      { metadata = { name = "x" }, data = { k = "2" } }, { metadata = { name = "z" } } } }
    local diffs = compare.diff(a, b, "", {})
    assert.same({
      { path = ".items[name=x].data.k", sim = '"1"', real = '"2"' },
      { path = ".items[name=z]", sim = "<absent>", real = '{"metadata":{"name":"z"}}' },
      { path = ".items(order)", sim = "x,y", real = "y,x" },
    }, diffs)
    assert.same({}, compare.diff(a, a, "", {}))
    -- generated names sort as their random suffixes do: their order is not compared
    local g1 = { items = array { { metadata = { name = "c-<gen#2>" } },
      { metadata = { name = "c-<gen#1>" } } } }
    local g2 = { items = array { { metadata = { name = "c-<gen#1>" } },
      { metadata = { name = "c-<gen#2>" } } } }
    assert.same({}, compare.diff(g1, g2, "", {}))
  end)

  it("explains a difference by a known entry, and reports entries that explain nothing",
    function()
      local known = {
        { case = "^fixtures$", step = "^01%-version$", path = "^%.body%.gitVersion$",
          reason = "the version stamp" },
        { step = { "^create", "^update" }, path = "^%.status$", reason = "no longer true" },
      }
      local run = compare.new(known)
      run:step("fixtures", "01-version")
      local left = run:differences("fixtures", "01-version", {
        { path = ".body.gitVersion", sim = '"v1.26.0"', real = '"v0.0.0"' },
        { path = ".body.major", sim = '"1"', real = '""' },
      })
      assert.same({ { path = ".body.major", sim = '"1"', real = '""', case = "fixtures",
        step = "01-version" } }, left)
      assert.equal('fixtures | 01-version | .body.major: sim "1", real ""',
        compare.describe(left[1]))
      -- the second entry's step never ran: nothing to say about it yet
      assert.same({}, run:stale())
      run:step("random 1/1", "create configmaps (plain)")
      assert.same({ "known[2] ( | ^create or ^update | ^%.status$) no longer occurs: no longer "
        .. "true" }, run:stale())
      assert.same({}, run:differences("random 1/1", "update leases (current)",
        { { path = ".status", sim = "404", real = "201" } }))
      assert.same({}, run:stale())
      assert.same({ 2, 2 }, { run.listed, run:entries_seen() })
      -- the sequences that ran, each once, in their order
      run:step("random 1/1", "update leases (current)")
      assert.same({ "fixtures", "random 1/1" }, run.cases)
      assert.equal(3, run.steps)
    end)

  it("refuses an entry without a reason or one that would match everything", function()
    assert.has_error(function() compare.new { { path = "^%.status$" } } end,
      "known[1] gives no reason")
    assert.has_error(function() compare.new { { reason = "why" } } end,
      "known[1] matches everything")
  end)
end)
