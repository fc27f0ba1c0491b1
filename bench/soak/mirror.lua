-- bench/soak/mirror.lua: the controller under test in bench/soak.lua (run
-- with `kubelua run --kubeconfig F mirror.lua DUMP`). It watches every
-- ConfigMap and every Widget and mirrors each one of the namespaces src-*
-- into the namespace "mirror" as bench/soak/kinds.lua says: a ConfigMap
-- with the source's content and its resourceVersion in the annotation
-- soak/source-rv (so the driver can tell that the last version was
-- reconciled). Deleting the source deletes the copy. One workqueue and two
-- workers per kind, as two controllers would have. Every 0.2 s it writes
-- DUMP (atomically): its informer caches as resource -> key ->
-- resourceVersion, and by resource the events its handlers saw and the
-- rate-limited retries of failed reconciles (the queue's retries_total).
local kube = require "kubelua"
local soak = require "bench.soak.kinds"

local DUMP = assert(arg and arg[1], "usage: mirror.lua DUMP")
local MIRROR = soak.MIRROR

local events = {}

kube.spawn(function()
  local cms = assert(kube.informer("v1", "configmaps")) -- sources, and every copy
  local by_res = {}
  for _, k in ipairs(soak.kinds) do
    by_res[k.resource] = { kind = k, queue = kube.workqueue("soak-" .. k.resource),
      informer = k.resource == "configmaps" and cms
        or assert(kube.informer(k.api_version, k.resource)) }
    events[k.resource] = 0
  end

  for res, c in pairs(by_res) do
    local q = c.queue
    -- A copy's change queues its source (as controller-runtime's Owns
    -- queues an owned object's owner): a reconcile that read a copy the
    -- cache had not caught up with, and failed on it, runs again as soon
    -- as the cache has, not after its rate-limited backoff.
    local function enqueue(ev)
      events[res] = events[res] + 1
      if ev.key:match("^src%-") then
        q:add(ev.key)
      else
        local of, key = soak.source_of(ev.key)
        if of then by_res[of].queue:add(key) end
      end
    end
    c.informer:on_add(enqueue)
    c.informer:on_update(enqueue)
    c.informer:on_delete(enqueue)

    kube.workers(q, 2, function(key)
      local ns, name = key:match("^([^/]+)/(.+)$")
      local copy = soak.copy_name(res, ns, name)
      local src = c.informer:get(key)
      local dst = cms:get(MIRROR .. "/" .. copy)
      if not src then
        if dst then -- a copy the cache does not show yet is deleted when its add arrives
          local _, err = kube.delete("v1", "configmaps", MIRROR, copy)
          if err and not kube.is_not_found(err) then return nil, err end
        end
        return
      end
      local rv = src.metadata.resourceVersion
      if not dst then
        local _, err = kube.create { apiVersion = "v1", kind = "ConfigMap",
          metadata = { name = copy, namespace = MIRROR, annotations = { ["soak/source-rv"] = rv } },
          data = c.kind.copy_data(src) }
        if err then return nil, err end -- AlreadyExists too: retried
      elseif (dst.metadata.annotations or {})["soak/source-rv"] ~= rv then
        dst.apiVersion, dst.kind = "v1", "ConfigMap"
        dst.data = c.kind.copy_data(src)
        dst.metadata.annotations = dst.metadata.annotations or {}
        dst.metadata.annotations["soak/source-rv"] = rv
        local _, err = kube.update(dst) -- a 409 (a stale cached copy) is retried
        if err then return nil, err end
      end
    end)
  end

  while true do
    local caches, counts, retries, synced = {}, {}, {}, true
    for res, c in pairs(by_res) do
      local parts = {}
      for _, obj in ipairs(c.informer:list()) do
        local md = obj.metadata
        parts[#parts + 1] = string.format('"%s/%s":"%s"', md.namespace, md.name,
          md.resourceVersion)
      end
      caches[#caches + 1] = string.format('"%s":{%s}', res, table.concat(parts, ","))
      counts[#counts + 1] = string.format('"%s":%d', res, events[res])
      retries[#retries + 1] = string.format('"%s":%d', res, c.queue:stats().retries_total)
      synced = synced and c.informer:has_synced()
    end
    local f = assert(io.open(DUMP .. ".tmp", "w"))
    f:write('{"events":{', table.concat(counts, ","), '},"retries":{', table.concat(retries, ","),
      '},"synced":', tostring(synced),
      ',"cache":{', table.concat(caches, ","), "}}\n")
    f:close()
    assert(os.rename(DUMP .. ".tmp", DUMP))
    kube.sleep(0.2)
  end
end)
