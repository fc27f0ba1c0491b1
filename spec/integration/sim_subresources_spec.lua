-- The simulator's subresources beyond status and scale, answered as a real
-- kube-apiserver 1.26 answers them (the messages were read off one):
-- pods/binding, pods/eviction with PodDisruptionBudgets (and the
-- disruption controller's status they rely on), serviceaccounts/token,
-- namespaces/finalize, pods/log, and exec/attach/portforward/proxy, which
-- the simulator cannot stream.
local json = require "kubelua.json"
local H = require "spec.integration.sim_helper"

local ADMIN = { Authorization = "Bearer T" }
local PODS = "/api/v1/namespaces/sub/pods"
local PDBS = "/apis/policy/v1/namespaces/sub/poddisruptionbudgets"

local function api(sim, method, path, body, headers)
  return H.api(sim, method, path, body, headers or ADMIN, "probe/1.0")
end

-- Polls fn until it returns a value (5 s at most).
local function eventually(fn)
  for _ = 1, 500 do
    local v = fn()
    if v then return v end
    H.sleep(0.01)
  end
  error("condition not reached")
end

local function pod(name, labels, spec)
  return { apiVersion = "v1", kind = "Pod", metadata = { name = name, labels = labels },
    spec = spec or { containers = { { name = "c1", image = "nginx" } } } }
end

local function condition(obj, ctype)
  for _, c in ipairs(obj.status and obj.status.conditions or {}) do
    if c.type == ctype then return c end
  end
  return nil
end

local function ready(sim, name)
  return eventually(function()
    local _, p = api(sim, "GET", PODS .. "/" .. name)
    local c = condition(p, "Ready")
    return c and c.status == "True" and p
  end)
end

-- Seconds since the epoch of a metav1.Time ("2006-01-02T15:04:05Z").
local function seconds(ts)
  local y, mo, d, h, mi, sec = ts:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)Z$")
  return os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = sec }
end

-- Waits until the simulator serves n watches.
local function wait_watches(sim, n)
  eventually(function()
    local _, _, _, st = H.request(sim, "GET", "/_sim/state", { headers = ADMIN })
    return st.watches >= n
  end)
end

-- A Pod no Node fits: it stays Pending, without a node.
local function unschedulable(name, labels)
  local p = pod(name, labels)
  p.spec.nodeSelector = { ["example.com/none"] = "x" }
  return p
end

local SUCCESS = { kind = "Status", apiVersion = "v1", metadata = {}, status = "Success",
  code = 201 }

describe("kubelua sim subresources", function()
  local sim
  setup(function()
    sim = H.start("--token T --user bob=B")
    assert.equal(201, (api(sim, "POST", "/api/v1/namespaces", { apiVersion = "v1",
      kind = "Namespace", metadata = { name = "sub" } })))
  end)
  teardown(function() H.stop(sim) end)

  describe("pods/binding", function()
    it("sets spec.nodeName once, with PodScheduled and the Binding's annotations", function()
      -- a Pod the scheduler does not see: another scheduler's
      assert.equal(201, (api(sim, "POST", PODS, unschedulable("b1"))))
      local w = H.watch_start(sim, PODS .. "?watch=true&fieldSelector=metadata.name%3Db1",
        ADMIN)
      wait_watches(sim, 1)
      local code, st = api(sim, "POST", PODS .. "/b1/binding", { apiVersion = "v1",
        kind = "Binding", metadata = { name = "b1", annotations = { x = "y" } },
        target = { apiVersion = "v1", kind = "Node", name = "node-1" } })
      assert.same({ 201, SUCCESS }, { code, st })
      local lines = H.watch_lines(w, 2)
      H.watch_stop(w)
      assert.same({ "ADDED", "MODIFIED" }, { lines[1].type, lines[2].type })
      local got = lines[2].object
      assert.equal("node-1", got.spec.nodeName)
      assert.same({ x = "y" }, got.metadata.annotations)
      local c = condition(got, "PodScheduled")
      assert.same({ type = "PodScheduled", status = "True", lastProbeTime = json.null },
        { type = c.type, status = c.status, lastProbeTime = c.lastProbeTime })
      -- the second binding is refused, naming the node
      code, st = api(sim, "POST", PODS .. "/b1/binding", { apiVersion = "v1", kind = "Binding",
        metadata = { name = "b1" }, target = { name = "node-2" } })
      assert.equal(409, code)
      assert.same({ message = 'Operation cannot be fulfilled on pods/binding "b1": pod b1 is '
        .. 'already assigned to node "node-1"', reason = "Conflict",
        details = { name = "b1", kind = "pods/binding" } },
        { message = st.message, reason = st.reason, details = st.details })
    end)

    it("refuses another name, a target that is not a Node, a missing Pod and a GET", function()
      local code, st = api(sim, "POST", PODS .. "/b1/binding", { apiVersion = "v1",
        kind = "Binding", metadata = { name = "other" }, target = { name = "n" } })
      assert.same({ 400, "BadRequest", "name in URL does not match name in Binding object" },
        { code, st.reason, st.message })
      code, st = api(sim, "POST", PODS .. "/b1/binding", { apiVersion = "v1", kind = "Binding",
        metadata = { name = "b1" }, target = { kind = "Pod", name = "n" } })
      -- an aggregate error: the real server's 500 without a reason
      assert.same({ 500, nil, 'target.kind: Unsupported value: "Pod": supported values: '
        .. '"Node", "<empty>"' }, { code, st.reason, st.message })
      code, st = api(sim, "POST", PODS .. "/nope/binding", { apiVersion = "v1", kind = "Binding",
        metadata = { name = "nope" }, target = { name = "n" } })
      assert.same({ 404, 'pods "nope" not found' }, { code, st.message })
      code, st = api(sim, "GET", PODS .. "/b1/binding")
      assert.same({ 405, "MethodNotAllowed" }, { code, st.reason })
    end)
  end)

  describe("v1 bindings", function()
    it("binds the Pod the Binding names instead of storing it", function()
      assert.equal(201, (api(sim, "POST", PODS, unschedulable("tb"))))
      local code, st = api(sim, "POST", "/api/v1/namespaces/sub/bindings", { apiVersion = "v1",
        kind = "Binding", metadata = { name = "tb" }, target = { name = "node-2" } })
      assert.same({ 201, SUCCESS }, { code, st })
      local _, p = api(sim, "GET", PODS .. "/tb")
      assert.equal("node-2", p.spec.nodeName)
      code, st = api(sim, "POST", "/api/v1/namespaces/sub/bindings", { apiVersion = "v1",
        kind = "Binding", metadata = { name = "tb" }, target = { name = "node-1" } })
      assert.same({ 409, 'Operation cannot be fulfilled on pods/binding "tb": pod tb is already '
        .. 'assigned to node "node-2"' }, { code, st.message })
      assert.equal(405, (api(sim, "GET", "/api/v1/namespaces/sub/bindings")))
    end)
  end)

  describe("pods/eviction", function()
    it("deletes a Pod no budget covers, with DisruptionTarget first, 201 Success", function()
      assert.equal(201, (api(sim, "POST", PODS, pod("e1", { app = "free" }))))
      ready(sim, "e1")
      local w = H.watch_start(sim, PODS .. "?watch=true&fieldSelector=metadata.name%3De1",
        ADMIN)
      wait_watches(sim, 1)
      local code, st = api(sim, "POST", PODS .. "/e1/eviction", { apiVersion = "policy/v1",
        kind = "Eviction", metadata = { name = "e1" } })
      assert.same({ 201, SUCCESS }, { code, st })
      local lines = H.watch_lines(w, 3)
      H.watch_stop(w)
      assert.same({ "ADDED", "MODIFIED", "MODIFIED" },
        { lines[1].type, lines[2].type, lines[3].type })
      local c = condition(lines[2].object, "DisruptionTarget")
      assert.same({ "True", "EvictionByEvictionAPI", "Eviction API: evicting" },
        { c.status, c.reason, c.message })
      -- on a Node: deleted gracefully, then gone once its kubelet confirms
      assert.is_string(lines[3].object.metadata.deletionTimestamp)
      eventually(function() return api(sim, "GET", PODS .. "/e1") == 404 end)
    end)

    it("takes a policy/v1beta1 body and its deleteOptions; refuses another kind", function()
      assert.equal(201, (api(sim, "POST", PODS, pod("e2", { app = "free" }))))
      ready(sim, "e2")
      local code, st = api(sim, "POST", PODS .. "/e2/eviction", { apiVersion = "v1",
        kind = "Pod", metadata = { name = "e2" } })
      assert.same({ 400, 'Pod in version "v1" cannot be handled as a Eviction: converting '
        .. "(v1.Pod) to (policy.Eviction): unknown conversion" }, { code, st.message })
      code, st = api(sim, "POST", PODS .. "/e2/eviction", { apiVersion = "policy/v1beta1",
        kind = "Eviction", metadata = { name = "e2" }, deleteOptions = { preconditions = {
          uid = "nope" } } })
      assert.equal(409, code)
      assert.matches("the UID in the precondition %(nope%) does not match", st.message)
      code = api(sim, "POST", PODS .. "/e2/eviction", { apiVersion = "policy/v1beta1",
        kind = "Eviction", metadata = { name = "e2" }, deleteOptions = {
          gracePeriodSeconds = 0 } })
      assert.equal(201, code)
      assert.equal(404, (api(sim, "GET", PODS .. "/e2")))
      code, st = api(sim, "POST", PODS .. "/e2/eviction", { apiVersion = "policy/v1",
        kind = "Eviction", metadata = { name = "other" } })
      assert.same({ 400, "name in URL does not match name in Eviction object" },
        { code, st.message })
    end)

    it("honours the PodDisruptionBudget whose status the disruption controller writes",
      function()
        for _, n in ipairs { "w1", "w2", "w3" } do
          assert.equal(201, (api(sim, "POST", PODS, pod(n, { app = "web" }))))
          ready(sim, n)
        end
        assert.equal(201, (api(sim, "POST", PDBS, { apiVersion = "policy/v1",
          kind = "PodDisruptionBudget", metadata = { name = "web" },
          spec = { minAvailable = 2, selector = { matchLabels = { app = "web" } } } })))
        local pdb = eventually(function()
          local _, b = api(sim, "GET", PDBS .. "/web")
          return b.status and b.status.observedGeneration == 1 and b
        end)
        local c = pdb.status.conditions[1]
        assert.same({ observedGeneration = 1, disruptionsAllowed = 1, currentHealthy = 3,
          desiredHealthy = 2, expectedPods = 3, conditions = { { type = "DisruptionAllowed",
            status = "True", observedGeneration = 1, lastTransitionTime = c.lastTransitionTime,
            reason = "SufficientPods", message = "" } } }, pdb.status)
        -- one disruption allowed: w1 goes, the budget notes it at once (the
        -- controller then counts w1 as deleted and drops it from disruptedPods)
        local w = H.watch_start(sim, PDBS .. "?watch=true&resourceVersion="
          .. pdb.metadata.resourceVersion, ADMIN)
        wait_watches(sim, 1)
        local code, st = api(sim, "POST", PODS .. "/w1/eviction", { apiVersion = "policy/v1",
          kind = "Eviction", metadata = { name = "w1" } })
        assert.same({ 201, SUCCESS }, { code, st })
        local lines = H.watch_lines(w, 2)
        H.watch_stop(w)
        local noted, seen = lines[1].object.status, lines[2].object.status
        assert.same({ "MODIFIED", 0, "False", "InsufficientPods", 3 }, { lines[1].type,
          noted.disruptionsAllowed, noted.conditions[1].status, noted.conditions[1].reason,
          noted.currentHealthy })
        assert.is_string(noted.disruptedPods.w1)
        assert.same({ "MODIFIED", 0, 2 }, { lines[2].type, seen.disruptionsAllowed,
          seen.currentHealthy })
        assert.is_nil(seen.disruptedPods)
        -- none left: 429 with the budget's cause, and w2 stays
        local headers
        code, headers, st = H.request(sim, "POST", PODS .. "/w2/eviction", { headers = ADMIN,
          body = { apiVersion = "policy/v1", kind = "Eviction", metadata = { name = "w2" } } })
        assert.equal(429, code)
        assert.is_nil(headers["retry-after"])
        st = json.decode(st)
        assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
          message = "Cannot evict pod as it would violate the pod's disruption budget.",
          reason = "TooManyRequests", details = { causes = { { reason = "DisruptionBudget",
            message = "The disruption budget web needs 2 healthy pods and has 2 currently" } } },
          code = 429 }, st)
        local _, w2 = api(sim, "GET", PODS .. "/w2")
        assert.is_nil(w2.metadata.deletionTimestamp)
        -- a Pod that is not Ready does not count: it goes while the budget
        -- holds (2 healthy of 2), which keeps its disruptionsAllowed
        local p = pod("w4", { app = "web" }, { containers = { { name = "c1", image = "nginx" } },
          nodeSelector = { ["example.com/none"] = "x" } })
        assert.equal(201, (api(sim, "POST", PODS, p)))
        local _, w4 = api(sim, "GET", PODS .. "/w4")
        w4.status = { phase = "Running", conditions = { { type = "Ready", status = "False" } } }
        assert.equal(200, (api(sim, "PUT", PODS .. "/w4/status", w4)))
        code, st = api(sim, "POST", PODS .. "/w4/eviction", { apiVersion = "policy/v1",
          kind = "Eviction", metadata = { name = "w4" } })
        assert.same({ 201, SUCCESS }, { code, st })
        local _, kept = api(sim, "GET", PDBS .. "/web")
        assert.is_nil(kept.status.disruptedPods)
      end)

    it("counts a Deployment's scale for maxUnavailable; Pods without a controller fail it",
      function()
        local DEPS = "/apis/apps/v1/namespaces/sub/deployments"
        assert.equal(201, (api(sim, "POST", DEPS, { apiVersion = "apps/v1", kind = "Deployment",
          metadata = { name = "api" }, spec = { replicas = 3, selector = { matchLabels = {
            app = "api" } }, template = { metadata = { labels = { app = "api" } },
            spec = { containers = { { name = "c", image = "nginx" } } } } } })))
        assert.equal(201, (api(sim, "POST", PDBS, { apiVersion = "policy/v1",
          kind = "PodDisruptionBudget", metadata = { name = "api" },
          spec = { maxUnavailable = "34%", selector = { matchLabels = { app = "api" } } } })))
        local st = eventually(function()
          local _, b = api(sim, "GET", PDBS .. "/api")
          return b.status and b.status.currentHealthy == 3 and b.status
        end)
        -- 34% of 3, rounded up: 2 may go, 1 must stay
        assert.same({ 1, 3, 2, 3, "SufficientPods" }, { st.desiredHealthy, st.expectedPods,
          st.disruptionsAllowed, st.currentHealthy, st.conditions[1].reason })
        -- a Pod it selects that no controller owns: the controller cannot
        -- count the scale and allows nothing
        assert.equal(201, (api(sim, "POST", PODS, pod("loose", { app = "api" }))))
        st = eventually(function()
          local _, b = api(sim, "GET", PDBS .. "/api")
          return b.status.disruptionsAllowed == 0 and b.status
        end)
        local c = st.conditions[1]
        assert.same({ "DisruptionAllowed", "False", "SyncFailed",
          'found no controller ref for pod "loose"', 1, 3 },
          { c.type, c.status, c.reason, c.message, c.observedGeneration, st.expectedPods })
        assert.equal(200, (api(sim, "DELETE", PODS .. "/loose?gracePeriodSeconds=0")))
        st = eventually(function()
          local _, b = api(sim, "GET", PDBS .. "/api")
          return b.status.disruptionsAllowed == 2 and b.status
        end)
        assert.same({ "True", "SufficientPods", "" }, { st.conditions[1].status,
          st.conditions[1].reason, st.conditions[1].message })
      end)

    it("refuses a Pod two budgets select with the real server's 500", function()
      assert.equal(201, (api(sim, "POST", PODS, pod("m1", { app = "multi" }))))
      ready(sim, "m1")
      for _, n in ipairs { "pa", "pb" } do
        assert.equal(201, (api(sim, "POST", PDBS, { apiVersion = "policy/v1",
          kind = "PodDisruptionBudget", metadata = { name = n },
          spec = { maxUnavailable = 1, selector = { matchLabels = { app = "multi" } } } })))
      end
      local code, st = api(sim, "POST", PODS .. "/m1/eviction", { apiVersion = "policy/v1",
        kind = "Eviction", metadata = { name = "m1" } })
      assert.same({ 500, "This pod has more than one PodDisruptionBudget, which the eviction "
        .. "subresource does not support." }, { code, st.message })
    end)
  end)

  describe("pods/eviction without the disruption controller", function()
    local bare
    setup(function()
      bare = H.start("--token T --no-controller disruption")
      assert.equal(201, (api(bare, "POST", "/api/v1/namespaces", { apiVersion = "v1",
        kind = "Namespace", metadata = { name = "sub" } })))
    end)
    teardown(function() H.stop(bare) end)

    it("says a budget not yet processed is, with Retry-After 10", function()
      assert.equal(201, (api(bare, "POST", PODS, pod("r1", { app = "r" }))))
      ready(bare, "r1")
      assert.equal(201, (api(bare, "POST", PDBS, { apiVersion = "policy/v1",
        kind = "PodDisruptionBudget", metadata = { name = "r" },
        spec = { maxUnavailable = 1, selector = { matchLabels = { app = "r" } } } })))
      local code, headers, _, st = H.request(bare, "POST", PODS .. "/r1/eviction",
        { headers = ADMIN, body = { apiVersion = "policy/v1", kind = "Eviction",
          metadata = { name = "r1" } } })
      assert.same({ 429, "10", { causes = { { reason = "DisruptionBudget", message = "The "
        .. "disruption budget r is still being processed by the server." } },
        retryAfterSeconds = 10 } }, { code, headers["retry-after"], st.details })
      -- a Pod that is not running is not the budget's to keep
      assert.equal(201, (api(bare, "POST", PODS, unschedulable("r2", { app = "r" }))))
      code = api(bare, "POST", PODS .. "/r2/eviction", { apiVersion = "policy/v1",
        kind = "Eviction", metadata = { name = "r2" } })
      assert.equal(201, code)
      assert.equal(404, (api(bare, "GET", PODS .. "/r2")))
    end)
  end)

  describe("serviceaccounts/token", function()
    it("issues a token the simulator then authenticates as the ServiceAccount", function()
      local code, tr = api(sim, "POST", "/api/v1/namespaces/sub/serviceaccounts/default/token",
        { apiVersion = "authentication.k8s.io/v1", kind = "TokenRequest", spec = {} })
      assert.equal(201, code)
      assert.same({ audiences = { "https://kubernetes.default.svc.cluster.local" },
        expirationSeconds = 3600, boundObjectRef = json.null }, tr.spec)
      assert.same({ kind = "TokenRequest", apiVersion = "authentication.k8s.io/v1",
        name = "default", namespace = "sub" },
        { kind = tr.kind, apiVersion = tr.apiVersion, name = tr.metadata.name,
          namespace = tr.metadata.namespace })
      assert.equal(seconds(tr.metadata.creationTimestamp) + 3600,
        seconds(tr.status.expirationTimestamp))
      local token = tr.status.token
      assert.matches("^[%w_-]+%.[%w_-]+%.[%w_-]+$", token)
      -- the token's user: known, and without permissions (RBAC grants none)
      local st
      code, st = api(sim, "GET", "/api/v1/namespaces/sub/pods", nil,
        { Authorization = "Bearer " .. token })
      assert.same({ 403, 'pods is forbidden: User "system:serviceaccount:sub:default" cannot '
        .. 'list resource "pods" in API group "" in the namespace "sub"' }, { code, st.message })
      -- a changed signature is not a token of this simulator
      code = api(sim, "GET", "/api/v1/namespaces/sub/pods", nil,
        { Authorization = "Bearer " .. token:sub(1, -2) .. (token:sub(-1) == "A" and "B" or "A") })
      assert.equal(401, code)
      -- nor one whose ServiceAccount is gone (a new one of that name has another uid)
      assert.equal(201, (api(sim, "POST", "/api/v1/namespaces/sub/serviceaccounts", {
        apiVersion = "v1", kind = "ServiceAccount", metadata = { name = "short" } })))
      local _, tr2 = api(sim, "POST", "/api/v1/namespaces/sub/serviceaccounts/short/token",
        { apiVersion = "authentication.k8s.io/v1", kind = "TokenRequest", spec = {} })
      local bearer = { Authorization = "Bearer " .. tr2.status.token }
      assert.equal(403, (api(sim, "GET", "/api/v1/namespaces/sub/pods", nil, bearer)))
      assert.equal(200, (api(sim, "DELETE", "/api/v1/namespaces/sub/serviceaccounts/short")))
      assert.equal(201, (api(sim, "POST", "/api/v1/namespaces/sub/serviceaccounts", {
        apiVersion = "v1", kind = "ServiceAccount", metadata = { name = "short" } })))
      code, st = api(sim, "GET", "/api/v1/namespaces/sub/pods", nil, bearer)
      assert.same({ 401, "Unauthorized" }, { code, st.message })
    end)

    it("refuses less than ten minutes, another name and a missing ServiceAccount", function()
      local path = "/api/v1/namespaces/sub/serviceaccounts/default/token"
      local code, st = api(sim, "POST", path, { apiVersion = "authentication.k8s.io/v1",
        kind = "TokenRequest", spec = { expirationSeconds = 100 } })
      assert.same({ 422, 'TokenRequest.authentication.k8s.io "" is invalid: '
        .. "spec.expirationSeconds: Invalid value: 100: may not specify a duration less than 10 "
        .. "minutes" }, { code, st.message })
      code, st = api(sim, "POST", path, { apiVersion = "authentication.k8s.io/v1",
        kind = "TokenRequest", metadata = { name = "other" }, spec = {} })
      assert.same({ 422, 'TokenRequest.authentication.k8s.io "default" is invalid: '
        .. 'metadata.name: Invalid value: "other": must match the service account name if '
        .. "specified" }, { code, st.message })
      code, st = api(sim, "POST", "/api/v1/namespaces/sub/serviceaccounts/none/token",
        { apiVersion = "authentication.k8s.io/v1", kind = "TokenRequest", spec = {} })
      assert.same({ 404, 'serviceaccounts "none" not found' }, { code, st.message })
      code, st = api(sim, "POST", path, { apiVersion = "authentication.k8s.io/v1",
        kind = "TokenRequest", spec = { expirationSeconds = 7200, audiences = { "a" } } })
      assert.same({ 201, { "a" }, 7200 }, { code, st.spec.audiences, st.spec.expirationSeconds })
    end)
  end)

  describe("namespaces/finalize", function()
    it("sets spec.finalizers; the last one gone, a Terminating namespace goes", function()
      assert.equal(201, (api(sim, "POST", "/api/v1/namespaces", { apiVersion = "v1",
        kind = "Namespace", metadata = { name = "fin" } })))
      local code, ns = api(sim, "PUT", "/api/v1/namespaces/fin/finalize", { apiVersion = "v1",
        kind = "Namespace", metadata = { name = "fin" },
        spec = { finalizers = { "example.com/x" } } })
      assert.same({ 200, { "example.com/x" } }, { code, ns.spec.finalizers })
      local mf = ns.metadata.managedFields[#ns.metadata.managedFields]
      assert.same({ "probe", "finalize", { ["f:spec"] = { ["f:finalizers"] = {} } } },
        { mf.manager, mf.subresource, mf.fieldsV1 })
      -- the namespace controller empties it, and it waits for example.com/x
      assert.equal(200, (api(sim, "DELETE", "/api/v1/namespaces/fin")))
      local _, held = api(sim, "GET", "/api/v1/namespaces/fin")
      assert.same({ "Terminating", { "example.com/x" } }, { held.status.phase,
        held.spec.finalizers })
      code = api(sim, "PUT", "/api/v1/namespaces/fin/finalize", { apiVersion = "v1",
        kind = "Namespace", metadata = { name = "fin" }, spec = {} })
      assert.equal(200, code)
      eventually(function() return api(sim, "GET", "/api/v1/namespaces/fin") == 404 end)
    end)

    it("refuses a bad finalizer name, another name, and a GET", function()
      local code, st = api(sim, "PUT", "/api/v1/namespaces/sub/finalize", { apiVersion = "v1",
        kind = "Namespace", metadata = { name = "sub" }, spec = { finalizers = { "bad name!" } } })
      assert.equal(422, code)
      assert.equal('Namespace "sub" is invalid: [spec.finalizers[0]: Invalid value: "bad name!": '
        .. "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
        .. "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
        .. "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), "
        .. 'spec.finalizers[0]: Invalid value: "bad name!": name is neither a standard '
        .. "finalizer name nor is it fully qualified]", st.message)
      code, st = api(sim, "PUT", "/api/v1/namespaces/sub/finalize", { apiVersion = "v1",
        kind = "Namespace", metadata = { name = "other" }, spec = {} })
      assert.same({ 400, "the name of the object (other) does not match the name on the URL "
        .. "(sub)" }, { code, st.message })
      assert.equal(405, (api(sim, "GET", "/api/v1/namespaces/sub/finalize")))
      assert.equal(405, (api(sim, "PATCH", "/api/v1/namespaces/sub/finalize", {})))
    end)
  end)

  describe("pods/ephemeralcontainers", function()
    local path = PODS .. "/dbg/ephemeralcontainers"
    local SMP = { ["Content-Type"] = "application/strategic-merge-patch+json",
      Authorization = "Bearer T" }

    local function patch(body, ctype)
      local h = SMP
      if ctype then h = { ["Content-Type"] = ctype, Authorization = "Bearer T" } end
      return api(sim, "PATCH", path, body, h)
    end

    it("adds an ephemeral container, defaulted; nothing else of the Pod changes", function()
      assert.equal(201, (api(sim, "POST", PODS, unschedulable("dbg"))))
      local code, p = api(sim, "GET", path)
      assert.same({ 200, "Pod", "dbg" }, { code, p.kind, p.metadata.name })
      code, p = patch({ spec = { ephemeralContainers = { { name = "debug", image = "busybox" } },
        containers = { { name = "c1", image = "changed" } } } })
      assert.equal(200, code)
      assert.same({ { name = "debug", image = "busybox", resources = {},
        terminationMessagePath = "/dev/termination-log", terminationMessagePolicy = "File",
        imagePullPolicy = "Always" } }, p.spec.ephemeralContainers)
      assert.equal("nginx", p.spec.containers[1].image)
    end)

    it("refuses removing or changing one, a duplicate name, a stale PUT and a POST", function()
      local code, st = patch({ spec = { ephemeralContainers = json.null } },
        "application/merge-patch+json")
      assert.same({ 422, 'Pod "dbg" is invalid: spec.ephemeralContainers: Forbidden: existing '
        .. 'ephemeral containers "debug" may not be removed\n' }, { code, st.message })
      code, st = patch({ spec = { ephemeralContainers = { { name = "debug", image = "x" } } } })
      assert.same({ 422, 'Pod "dbg" is invalid: spec.ephemeralContainers: Forbidden: existing '
        .. 'ephemeral containers "debug" may not be changed\n' }, { code, st.message })
      code, st = patch({ spec = { ephemeralContainers = { { name = "c1", image = "x" } } } })
      -- the strategic merge puts the new one first, as the real server's does
      assert.same({ 422, 'Pod "dbg" is invalid: spec.ephemeralContainers[0].name: Duplicate '
        .. 'value: "c1"' }, { code, st.message })
      code, st = api(sim, "PUT", path, { apiVersion = "v1", kind = "Pod", metadata = {
        name = "dbg", resourceVersion = "1" }, spec = { containers = {} } })
      assert.same({ 409, 'Operation cannot be fulfilled on pods "dbg": the object has been '
        .. "modified; please apply your changes to the latest version and try again" },
        { code, st.message })
      assert.equal(405, (api(sim, "POST", path, {})))
    end)
  end)

  describe("certificatesigningrequests/approval", function()
    local CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
    local MERGE = { ["Content-Type"] = "application/merge-patch+json",
      Authorization = "Bearer T" }

    it("approves once: only the conditions change, Approved and Denied exclusive", function()
      assert.equal(201, (api(sim, "POST", CSRS, { apiVersion = "certificates.k8s.io/v1",
        kind = "CertificateSigningRequest", metadata = { name = "bob" }, spec = {
          request = "cmVxdWVzdA==", signerName = "example.com/x", usages = { "client auth" } } })))
      local code, csr = api(sim, "PUT", CSRS .. "/bob/approval", {
        apiVersion = "certificates.k8s.io/v1", kind = "CertificateSigningRequest",
        metadata = { name = "bob" }, spec = { signerName = "example.com/other" },
        status = { conditions = { { type = "Approved", status = "True", reason = "R",
          message = "ok" } } } })
      assert.equal(200, code)
      local c = csr.status.conditions[1]
      assert.same({ "example.com/x", "Approved", "True", "R", "ok", true, true },
        { csr.spec.signerName, c.type, c.status, c.reason, c.message,
          type(c.lastUpdateTime) == "string", c.lastTransitionTime == c.lastUpdateTime })
      local st
      code, st = api(sim, "PATCH", CSRS .. "/bob/approval", { status = { conditions = {
        { type = "Approved", status = "True" }, { type = "Denied", status = "True" } } } },
        MERGE)
      assert.same({ 422, 'CertificateSigningRequest.certificates.k8s.io "bob" is invalid: '
        .. 'status.conditions[1].type: Invalid value: "Denied": Approved and Denied conditions '
        .. "are mutually exclusive" }, { code, st.message })
      code, st = api(sim, "PATCH", CSRS .. "/bob/approval", { status = { conditions = {
        { type = "Approved", status = "False" } } } }, MERGE)
      assert.same({ 422, 'CertificateSigningRequest.certificates.k8s.io "bob" is invalid: '
        .. 'status.conditions[0].status: Unsupported value: "False": supported values: "True"' },
        { code, st.message })
      code, st = api(sim, "PATCH", CSRS .. "/bob/approval", { status = { conditions = json.array {} } },
        MERGE)
      assert.same({ 422, 'CertificateSigningRequest.certificates.k8s.io "bob" is invalid: '
        .. 'status.conditions: Forbidden: updates may not remove a condition of type '
        .. '"Approved"' }, { code, st.message })
      assert.equal(200, (api(sim, "GET", CSRS .. "/bob/approval")))
    end)
  end)

  describe("pods/log and the streaming subresources", function()
    setup(function()
      assert.equal(201, (api(sim, "POST", PODS, pod("two", nil, { containers = {
        { name = "a", image = "nginx" }, { name = "b", image = "nginx" } } }))))
      ready(sim, "two")
    end)

    it("serves one line per container start as text/plain", function()
      local code, headers, body = H.request(sim, "GET", PODS .. "/two/log?container=a",
        { headers = ADMIN })
      assert.same({ 200, "text/plain", "kubelua sim: container a started (image "
        .. "docker.io/library/nginx:latest); the simulator runs no container\n" },
        { code, headers["content-type"], body })
      code, headers, body = H.request(sim, "GET", PODS .. "/two/log?container=a&tailLines=0",
        { headers = ADMIN })
      assert.same({ 200, "text/plain", "" }, { code, headers["content-type"], body })
      local st
      code, st = api(sim, "GET", PODS .. "/two/log?container=a&previous=true")
      assert.same({ 400, 'previous terminated container "a" in pod "two" not found' },
        { code, st.message })
    end)

    it("asks for a container among several, as for exec and attach", function()
      for _, sub in ipairs { "log", "exec", "attach" } do
        local code, st = api(sim, "GET", PODS .. "/two/" .. sub)
        assert.same({ 400, "BadRequest", "a container name must be specified for pod two, "
          .. "choose one of: [a b]" }, { code, st.reason, st.message })
      end
      local code, st = api(sim, "GET", PODS .. "/two/log?container=zz")
      assert.same({ 400, "container zz is not valid for pod two" }, { code, st.message })
    end)

    it("answers exec, attach and portforward without an upgrade as the real server", function()
      for _, sub in ipairs { "exec?container=a&command=ls", "attach?container=a",
        "portforward" } do
        for _, method in ipairs { "GET", "POST" } do
          local code, st = api(sim, method, PODS .. "/two/" .. sub)
          assert.same({ 400, "BadRequest", "Upgrade request required" },
            { code, st.reason, st.message })
        end
      end
      -- a Pod without a node: nothing to reach
      assert.equal(201, (api(sim, "POST", PODS, unschedulable("nowhere"))))
      local code, st = api(sim, "POST", PODS .. "/nowhere/exec?command=ls")
      assert.same({ 400, "pod nowhere does not have a host assigned" }, { code, st.message })
      code = H.request(sim, "GET", PODS .. "/nowhere/log", { headers = ADMIN })
      assert.equal(204, code)
    end)

    it("answers a proxy with 503: nothing listens behind the simulator's objects", function()
      local code, st = api(sim, "GET", PODS .. "/two/proxy/some/path")
      assert.same({ 503, "ServiceUnavailable", "error trying to reach pod: the simulator's "
        .. "pods run nothing to proxy to" }, { code, st.reason, st.message })
      code, st = api(sim, "GET", "/api/v1/namespaces/default/services/kubernetes/proxy")
      assert.same({ 503, 'no endpoints available for service "kubernetes"' },
        { code, st.message })
      code, st = api(sim, "GET", "/api/v1/namespaces/sub/services/none/proxy")
      assert.same({ 404, 'services "none" not found' }, { code, st.message })
    end)

    it("forbids them to a user without permissions", function()
      local code, st = api(sim, "GET", PODS .. "/two/log?container=a", nil,
        { Authorization = "Bearer B" })
      assert.same({ 403, 'pods "two" is forbidden: User "bob" cannot get resource "pods/log" '
        .. 'in API group "" in the namespace "sub"' }, { code, st.message })
      -- a proxy is authorized as its method's verb
      code, st = api(sim, "DELETE", PODS .. "/two/proxy/x", nil, { Authorization = "Bearer B" })
      assert.same({ 403, 'pods "two" is forbidden: User "bob" cannot delete resource '
        .. '"pods/proxy" in API group "" in the namespace "sub"' }, { code, st.message })
    end)
  end)
end)
