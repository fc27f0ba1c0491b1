-- greeting-operator: the operator of its own kind, Greeting
-- (greetings.example.kubelua.io, deploy/01-crd.yaml). For each Greeting it
--   * keeps an owned ConfigMap NAME-greeting with data.message,
--   * lists the namespace's greetings in the ConfigMap "greetings-index",
--     which no single Greeting owns: a finalizer takes a deleted Greeting
--     out of it before the Greeting goes,
--   * reports status.observedGeneration and a Ready condition.
--
-- With --webhooks (the webhook overlay, webhook/, passes it) it also
-- serves kube-apiserver's webhooks for Greetings: a validating one that
-- refuses an empty spec.message (422, a cause naming the field), a
-- mutating one that defaults spec.from, and the conversion between
-- v1alpha1 (spec.text) and v1 (spec.message).
--
--   kubelua run --sim examples/greeting-operator/controller.lua -- --demo
--   kubelua run examples/greeting-operator/controller.lua     (kubeconfig;
--                                     kubectl apply -f deploy/01-crd.yaml first)
local kube = require "kubelua"

local options = {}
for _, a in ipairs(arg) do options[a] = true end

local GROUP_VERSION = "example.kubelua.io/v1"
local FINALIZER = "example.kubelua.io/index"
local INDEX = "greetings-index"


-- Patches status (the status subresource) when it changed: conditions
-- and observedGeneration of this run.
local function report(g, status, reason, message)
  local before = kube.json.encode(g.status or {})
  g.status = g.status or {}
  kube.set_condition(g, { type = "Ready", status = status, reason = reason, message = message,
                          observedGeneration = g.metadata.generation })
  g.status.observedGeneration = g.metadata.generation
  if kube.json.encode(g.status) == before then return true end
  return kube.patch(g, { status = g.status }, "merge", { subresource = "status" })
end

-- Sets (message) or removes (nil) a Greeting's line in the namespace's index.
local function update_index(ns, name, message)
  local index, err = kube.get("v1", "configmaps", ns, INDEX)
  if err and not kube.is_not_found(err) then return nil, err end
  if not index then
    if message == nil then return true end
    return kube.create{ apiVersion = "v1", kind = "ConfigMap",
                        metadata = { name = INDEX, namespace = ns }, data = { [name] = message } }
  end
  index.data = index.data or {}
  if index.data[name] == message then return true end
  index.data[name] = message
  return kube.update(index) -- a 409 (another Greeting's run) is retried with backoff
end

local function ensure_configmap(g)
  local name = g.metadata.name .. "-greeting"
  local want = { apiVersion = "v1", kind = "ConfigMap",
                 metadata = { name = name, namespace = g.metadata.namespace },
                 data = { message = g.spec.message } }
  assert(kube.set_controller_reference(g, want))
  local have, err = kube.get("v1", "configmaps", want.metadata.namespace, name)
  if err and not kube.is_not_found(err) then return nil, err end
  if not have then return kube.create(want) end
  if have.data and have.data.message == g.spec.message then return have end
  have.data = want.data
  return kube.update(have)
end

if options["--webhooks"] then
  kube.webhook{ path = "/validate-greeting", validate = function(req)
    local spec = req.object.spec
    local message = type(spec) == "table" and spec.message
    if type(message) ~= "string" or message == "" then
      return false, { { field = "spec.message", type = "Required",
                        detail = "a greeting needs a message" } }
    end
    return true
  end }

  kube.webhook{ path = "/mutate-greeting", mutate = function(req)
    local spec = req.object.spec
    if type(spec) == "table" and spec.from == nil then spec.from = "kubelua" end
  end }

  -- v1alpha1's spec.text is v1's spec.message
  kube.webhook{ path = "/convert", convert = function(obj, to)
    local spec = type(obj.spec) == "table" and obj.spec or {}
    if to == GROUP_VERSION then
      spec.message, spec.text = spec.text, nil
    elseif to == "example.kubelua.io/v1alpha1" then
      spec.text, spec.message = spec.message, nil
    else
      return nil, "cannot convert a Greeting to " .. to
    end
    obj.spec = spec
    return obj
  end }
end

kube.controller{
  name = "greeting-operator",
  watches = { GROUP_VERSION, "Greeting" },
  owns = { { "v1", "ConfigMap" } },
  workers = 2,
  reconcile = function(req, ctx)
    local g = ctx.object
    if not g then return end

    if kube.is_being_deleted(g) then
      if not kube.has_finalizer(g, FINALIZER) then return end
      local ok, err = update_index(req.namespace, req.name, nil)
      if not ok then return nil, err end
      local gone, perr = kube.patch_remove_finalizer(g, FINALIZER)
      if not gone and not kube.is_not_found(perr) then return nil, perr end
      ctx.log.info("cleaned up")
      return
    end

    if not kube.has_finalizer(g, FINALIZER) then
      local updated, err = kube.patch_add_finalizer(g, FINALIZER)
      if not updated then return nil, err end -- a Conflict: the cache is behind; retried
      g = updated
    end

    local message = type(g.spec) == "table" and g.spec.message
    if type(message) ~= "string" or message == "" then
      local ok, err = report(g, "False", "InvalidSpec", "spec.message must be a non-empty string")
      if not ok then return nil, err end
      return kube.terminal("spec.message must be a non-empty string") -- until it is edited
    end
    local cm, err = ensure_configmap(g)
    if not cm then return nil, err end
    local ok, ierr = update_index(req.namespace, req.name, message)
    if not ok then return nil, ierr end
    local rok, rerr = report(g, "True", "Ready", "ConfigMap " .. cm.metadata.name
                                                  .. " holds the greeting")
    if not rok then return nil, rerr end
  end,
}

-- --demo (with --sim): install the CRD, create a Greeting, change it,
-- delete it, and stop once the index is empty again.
if not options["--demo"] then return end
kube.spawn(function()
  local crd = assert(io.open((arg[0]:match("^(.*)/") or ".") .. "/deploy/01-crd.yaml")):read("*a")
  local yaml = require "kubelua.sim.yaml"
  assert(kube.create(assert(yaml.decode(crd))))
  assert(kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = "demo" } })
  local function eventually(fn)
    for _ = 1, 500 do
      local v = fn()
      if v then return v end
      kube.sleep(0.02)
    end
    error("the operator did not get there")
  end
  local function get(res, name)
    return (kube.get(res == "greetings" and GROUP_VERSION or "v1", res, "demo", name))
  end
  -- the new kind is served once its CRD is Established, and discovery
  -- looks again at most once a second: until then a create is NoKindMatch
  eventually(function()
    local ok, err = kube.create{ apiVersion = GROUP_VERSION, kind = "Greeting",
                                 metadata = { name = "hello", namespace = "demo" },
                                 spec = { message = "Hello, world" } }
    if err and not kube.is_no_match(err) then error(err) end
    return ok
  end)
  eventually(function()
    local g = get("greetings", "hello")
    return kube.is_condition_true(g, "Ready")
  end)
  kube.log.info("scene: ready", { configmap = get("configmaps", "hello-greeting").data.message })
  -- a merge patch: the operator may write the status between a read and
  -- an update, and the demo's change does not depend on what it read
  assert(kube.patch(get("greetings", "hello"), { spec = { message = "Hello again" } }, "merge"))
  eventually(function()
    local cm = get("configmaps", "hello-greeting")
    return cm.data.message == "Hello again"
      and get("greetings", "hello").status.observedGeneration == 2
  end)
  kube.log.info("scene: updated", { configmap = get("configmaps", "hello-greeting").data.message })
  assert(kube.delete(GROUP_VERSION, "greetings", "demo", "hello"))
  eventually(function()
    -- an emptied index has no data at all: the server omits an empty map
    return get("greetings", "hello") == nil and (get("configmaps", INDEX).data or {}).hello == nil
  end)
  kube.log.info("scene: deleted, the index is empty; stopping")
  kube.stop()
end)
