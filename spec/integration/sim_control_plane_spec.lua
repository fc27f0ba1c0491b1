-- The simulator's control plane against real traces: each scenario of
-- spec/fixtures/apiserver/control-plane (recorded from kube-apiserver 1.26
-- with kube-controller-manager running) is replayed against `kubelua sim`
-- with the same watches open, and each watch sees the same events in the
-- same order, changing the same fields: deletionTimestamp, finalizers,
-- generation, ownerReferences, status.phase and status.conditions; each
-- call gets the same status and answer.
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"
local deepcompare = require("luassert.util").deepcompare

local DIR = "spec/fixtures/apiserver/control-plane/"

local function load(name) return assert(json.decode(H.read_file(DIR .. name .. ".json"))) end

local function is_table(v) return type(v) == "table" end

-- What a step shows of an object: the fields the control plane changes.
local function project(o)
  if not is_table(o) then return o end
  if o.kind == "Status" then
    local d = is_table(o.details) and o.details or {}
    return { kind = "Status", status = o.status, reason = o.reason, message = o.message,
      code = o.code, details = { name = d.name, kind = d.kind, causes = d.causes } }
  end
  if o.kind and o.kind:match("List$") then
    local names = {}
    for i, it in ipairs(o.items) do names[i] = it.metadata.name end
    return { kind = o.kind, names = names }
  end
  local md = o.metadata
  local owners
  if is_table(md.ownerReferences) then
    owners = {}
    for i, r in ipairs(md.ownerReferences) do
      owners[i] = { r.kind, r.name, r.controller, r.blockOwnerDeletion }
    end
  end
  local st = is_table(o.status) and o.status or {}
  local conds
  if o.kind == "Namespace" and is_table(st.conditions) then
    conds = {}
    for i, c in ipairs(st.conditions) do conds[i] = { c.type, c.status, c.reason, c.message } end
  end
  return { kind = o.kind, name = md.name, namespace = md.namespace,
    deleting = md.deletionTimestamp ~= nil, grace = md.deletionGracePeriodSeconds,
    finalizers = md.finalizers, generation = md.generation, owners = owners,
    phase = o.kind == "Namespace" and st.phase or nil, conditions = conds,
    spec_finalizers = o.kind == "Namespace" and o.spec.finalizers or nil,
    data_keys = o.kind == "ConfigMap" and o.data and (function()
      local ks = {}
      for k in pairs(o.data) do ks[#ks + 1] = k end
      table.sort(ks)
      return ks
    end)() or nil }
end

-- The garbage collector handles an owner's dependents in no defined order
-- (the trace has dep-2 before dep-1 in one run, after it in another): a
-- run of events of one type on siblings (the same owners) is compared as
-- sorted by name.
local function settle(steps)
  local out, i = {}, 1
  while i <= #steps do
    local j = i
    local function key(s) return s.type .. json.encode(s.object.owners or {}) end
    while j < #steps and key(steps[j + 1]) == key(steps[i]) and steps[i].object.owners do
      j = j + 1
    end
    local run = {}
    for k = i, j do run[#run + 1] = steps[k] end
    table.sort(run, function(a, b) return a.object.name < b.object.name end)
    for _, s in ipairs(run) do out[#out + 1] = s end
    i = j + 1
  end
  return out
end

-- The fixture's watch events of one stream, projected, each with its
-- time (t).
local function recorded(records, stream)
  local steps = {}
  for _, r in ipairs(records) do
    if r.kind == "watch" and r.stream == stream and r.type ~= "BOOKMARK" then
      steps[#steps + 1] = { type = r.type, object = project(r.object), t = r.t }
    end
  end
  return steps
end

-- The events watch w has seen so far for objects of namespace ns (or the
-- namespace ns itself), projected.
local function seen(w, ns)
  local steps = {}
  for line in (H.read_file(w.out) or ""):gmatch("[^\n]+") do
    local ev = json.decode(line)
    local o = is_table(ev) and ev.object
    if o and ev.type ~= "BOOKMARK" and (o.metadata.namespace == ns
        or (o.kind == "Namespace" and o.metadata.name == ns)) then
      steps[#steps + 1] = { type = ev.type, object = project(o) }
    end
  end
  return steps
end

local function untimed(steps)
  local out = {}
  for i, st in ipairs(steps) do out[i] = { type = st.type, object = st.object } end
  return settle(out)
end

-- Waits (at most 5 s) until every stream has seen as many events as the
-- trace had recorded by time t.
local function wait_for(streams, t)
  for _ = 1, 500 do
    local behind = false
    for _, st in pairs(streams) do
      local n = 0
      for _, step in ipairs(st.expect) do
        if step.t < t then n = n + 1 end
      end
      behind = behind or #seen(st.watch, st.ns) < n
    end
    if not behind then return end
    H.sleep(0.01)
  end
end

-- Replays the calls of a trace at its pace: each call once the watches
-- have seen what the trace had seen 50 ms before that call answered; the
-- same objects (ownerReferences pointing at the objects made here),
-- deletions and finalizer removals. Returns each call's { call, status,
-- projected answer }, and the recorded ones.
local function replay(sim, records, ns, paths, streams)
  local uids = {} -- recorded uid → this run's
  local got, want = {}, {}
  for _, r in ipairs(records) do
    if r.kind == "call" then
      wait_for(streams, r.t - 0.05)
      local o = r.result
      local method, path, body
      if r.call:match("^create namespace") then
        method, path = "POST", "/api/v1/namespaces"
        body = { apiVersion = "v1", kind = "Namespace", metadata = { name = ns } }
      elseif r.call:match("^create") then
        local md = o.kind == "Status" and { name = o.details.name } or o.metadata
        local refs
        if md.ownerReferences then
          refs = {}
          for i, ref in ipairs(md.ownerReferences) do
            refs[i] = { apiVersion = ref.apiVersion, kind = ref.kind, name = ref.name,
              uid = uids[ref.uid], controller = ref.controller,
              blockOwnerDeletion = ref.blockOwnerDeletion }
          end
        end
        method = "POST"
        local kind = o.kind == "Status" and "ConfigMap" or o.kind
        path = paths[kind]
        body = { apiVersion = o.apiVersion or "v1", kind = kind, metadata = { name = md.name,
          finalizers = md.finalizers, ownerReferences = refs }, data = o.data, spec = o.spec }
        if kind == "ConfigMap" and not body.data then body.data = { k = "v" } end
      elseif r.call:match("^delete") then
        method = "DELETE"
        local policy = r.call:match("propagationPolicy=(%a+)")
        local target = r.call:match("^delete (%S+)")
        path = target == "namespace" and "/api/v1/namespaces/" .. ns
          or paths[target == "owner" and "ConfigMap" or "Deployment"] .. "/"
            .. (target == "owner" and "owner" or "d")
        body = policy and { propagationPolicy = policy } or nil
      elseif r.call:match("^remove finalizer") then
        method = "PATCH"
        path = paths[o.kind] .. "/" .. o.metadata.name
        body = { metadata = { finalizers = json.null } }
      elseif r.call:match("^list") then
        method, path = "GET", paths.ConfigMap
      elseif r.call:match("^get namespace") then
        method, path = "GET", "/api/v1/namespaces/" .. ns
      else
        error("no replay for call " .. r.call)
      end
      local headers = method == "PATCH" and { ["Content-Type"] = "application/merge-patch+json" }
        or nil
      local code, answer = H.api(sim, method, path, body, headers)
      if is_table(o) and is_table(o.metadata) and o.metadata.uid and is_table(answer)
          and is_table(answer.metadata) then
        uids[o.metadata.uid] = answer.metadata.uid
      end
      got[#got + 1] = { r.call, code, project(answer) }
      want[#want + 1] = { r.call, r.status, project(o) }
    end
  end
  return got, want
end

describe("kubelua sim control plane, against kube-controller-manager's traces", function()
  local sim
  setup(function() sim = H.start() end)
  teardown(function() H.stop(sim) end)

  -- scenario: the fixture's name and namespace, its streams (name → watch
  -- path), and the number of events each stream sees.
  local function check(name, ns, paths_of, keep)
    local records = load(name)
    local streams = {}
    local n = 0
    for stream, path in pairs(paths_of) do
      local expect = recorded(records, stream)
      if keep then expect = keep(expect) end
      streams[stream] = { watch = H.watch_start(sim, path .. "?watch=true"), expect = expect,
        ns = ns }
      n = n + 1
    end
    H.wait_watches(sim, n)
    local paths = { ConfigMap = "/api/v1/namespaces/" .. ns .. "/configmaps",
      Deployment = "/apis/apps/v1/namespaces/" .. ns .. "/deployments" }
    local got, want = replay(sim, records, ns, paths, streams)
    wait_for(streams, math.huge)
    H.sleep(0.2) -- and nothing more comes
    for stream, st in pairs(streams) do
      local events = seen(st.watch, ns)
      if keep then events = keep(events) end
      H.watch_stop(st.watch)
      assert.same({ stream, untimed(st.expect) }, { stream, untimed(events) })
    end
    assert.same(want, got)
  end

  it("Background: the owner goes at once, its dependents after it (gc-background)", function()
    check("gc-background", "gc-background", { configmaps = "/api/v1/configmaps" })
  end)

  it("Foreground: dependents first, then the owner (gc-foreground)", function()
    check("gc-foreground", "gc-foreground", { configmaps = "/api/v1/configmaps" })
  end)

  it("Orphan: dependents lose their ownerReferences, then the owner goes (gc-orphan)",
    function()
      check("gc-orphan", "gc-orphan", { configmaps = "/api/v1/configmaps" })
    end)

  it("a namespace goes Terminating, is emptied, waits for finalizers (namespace-deletion)",
    function()
      check("namespace-deletion", "nsdel", { configmaps = "/api/v1/configmaps",
        serviceaccounts = "/api/v1/serviceaccounts", namespaces = "/api/v1/namespaces" })
    end)

  it("a new namespace gets kube-root-ca.crt and ServiceAccount default (namespace-creation)",
    function()
      check("namespace-creation", "fresh-ns", { ["all-configmaps"] = "/api/v1/configmaps",
        ["all-serviceaccounts"] = "/api/v1/serviceaccounts" })
    end)

  it("a deletion held by a finalizer bumps metadata.generation (generation-on-delete)",
    function()
      -- the other MODIFIED events (of the trace, and of the simulator's
      -- own Deployment controller) are the controller's writes (revision,
      -- observedGeneration, conditions), which change none of the fields
      -- compared: they are left out on both sides
      check("generation-on-delete", "gen-del", { deployments = "/apis/apps/v1/deployments" },
        function(steps)
          local out = {}
          for _, st in ipairs(steps) do
            local last = out[#out]
            if not (last and st.type == "MODIFIED"
                and deepcompare(last.object, st.object, true)) then
              out[#out + 1] = st
            end
          end
          return out
        end)
    end)
end)
