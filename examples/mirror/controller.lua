-- Mirror: copies every ConfigMap labelled mirror=true from namespace "demo"
-- into namespace "mirror", keeps the copies in step, and deletes a copy when
-- its source goes away.
--
--   kubelua run --sim examples/mirror/controller.lua            (no cluster)
--   kubelua run examples/mirror/controller.lua -- --demo=false  (a real one)
--
-- With --sim (the default in scripts/example) the simulator starts empty, so
-- the script first creates the namespaces and a few ConfigMaps, then plays a
-- short scene — a change, a deletion — and stops once the copies match.
-- The demo also runs against a real cluster: it takes namespaces and sources
-- left by an earlier run as they are, and it checks only the objects it made
-- (a cluster has others, such as the kube-root-ca.crt in every namespace).
local kube = require "kubelua"

local SOURCE, TARGET = "demo", "mirror"
local MADE_BY = "mirrored-from" -- the label of the copies: the source namespace
local demo = (arg[1] or "--demo=true") ~= "--demo=false"

local function configmap(ns, name, data, labels)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = ns, labels = labels }, data = data }
end

local function same(a, b)
  for k, v in pairs(a or {}) do if b == nil or b[k] ~= v then return false end end
  for k in pairs(b or {}) do if a == nil or a[k] == nil then return false end end
  return true
end

kube.spawn(function()
  if demo then
    for _, ns in ipairs({ SOURCE, TARGET }) do
      local _, err = kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = ns } }
      assert(not err or kube.is_already_exists(err), tostring(err))
    end
    -- applied: what an earlier run left is set back to the scene's start
    local as_demo = { field_manager = "mirror-demo", force = true }
    local mirrored = { mirror = "true" }
    assert(kube.apply(configmap(SOURCE, "settings", { color = "blue" }, mirrored), as_demo))
    assert(kube.apply(configmap(SOURCE, "flags", { beta = "on" }, mirrored), as_demo))
    assert(kube.apply(configmap(SOURCE, "private", { secret = "no" }), as_demo))
  end

  local cms = kube.informer("v1", "configmaps", { namespace = SOURCE,
                                                  label_selector = "mirror=true" })
  local q = kube.workqueue("mirror")
  cms:on_add(function(ev) q:add(ev.key) end)
  cms:on_update(function(ev) q:add(ev.key) end)
  cms:on_delete(function(ev) q:add(ev.key) end)

  kube.workers(q, 2, function(key)
    local name = key:match("/(.+)$")
    local src = cms:get(key)
    local dst, err = kube.get("v1", "configmaps", TARGET, name)
    if err and not kube.is_not_found(err) then return nil, err end
    if not src then
      if dst then
        local _, derr = kube.delete("v1", "configmaps", TARGET, name)
        if derr and not kube.is_not_found(derr) then return nil, derr end
        kube.log.info("deleted copy", { key = key })
      end
      return
    end
    if not dst then
      local _, cerr = kube.create(configmap(TARGET, name, src.data, { [MADE_BY] = SOURCE }))
      if cerr then return nil, cerr end
      kube.log.info("created copy", { key = key })
    elseif not same(dst.data, src.data) then
      dst.data = src.data
      local _, uerr = kube.update(dst) -- a 409 here is retried with backoff
      if uerr then return nil, uerr end
      kube.log.info("updated copy", { key = key })
    else
      kube.log.info("in sync", { key = key })
    end
  end)

  if not demo then return end
  assert(kube.wait_for_sync(cms, 10), "the cache did not sync")
  -- the copies of the scene's sources, and only those
  local function copies()
    local list = assert(kube.list("v1", "configmaps", TARGET,
                                  { label_selector = MADE_BY .. "=" .. SOURCE }))
    local out = {}
    for _, item in ipairs(list.items) do out[item.metadata.name] = item.data end
    return out
  end
  local function settle(want)
    for _ = 1, 200 do
      local have = copies()
      local ok = true
      for _, name in ipairs({ "settings", "flags", "private" }) do
        ok = ok and (want[name] == nil and have[name] == nil or same(have[name], want[name]))
      end
      if ok then return true end
      kube.sleep(0.02)
    end
    return false
  end

  assert(settle({ settings = { color = "blue" }, flags = { beta = "on" } }))
  kube.log.info("scene: the source changes")
  local settings = assert(kube.get("v1", "configmaps", SOURCE, "settings"))
  settings.data.color = "green"
  assert(kube.update(settings))
  assert(settle({ settings = { color = "green" }, flags = { beta = "on" } }))
  kube.log.info("scene: a source is deleted")
  assert(kube.delete("v1", "configmaps", SOURCE, "flags"))
  assert(settle({ settings = { color = "green" } }))
  kube.log.info("the copies match their sources; stopping")
  kube.stop()
end)
