-- bench/soak/mirror.lua: the controller under test in bench/soak.lua (run
-- with `kubelua run --kubeconfig F mirror.lua DUMP`). It watches every
-- ConfigMap and mirrors each one of the namespaces src-* into the
-- namespace "mirror" as "<namespace>.<name>", with the source's data and
-- its resourceVersion in the annotation soak/source-rv (so the driver can
-- tell that the last version was reconciled). Deleting the source deletes
-- the copy. Every 0.2 s it writes DUMP (atomically): its informer cache as
-- key -> resourceVersion, and the events its handlers saw.
local kube = require "kubelua"

local DUMP = assert(arg and arg[1], "usage: mirror.lua DUMP")
local TARGET = "mirror"

local events = 0

kube.spawn(function()
  local cms = assert(kube.informer("v1", "configmaps"))
  local q = kube.workqueue("soak-mirror")
  local function enqueue(ev)
    events = events + 1
    if ev.key:match("^src%-") then q:add(ev.key) end
  end
  cms:on_add(enqueue)
  cms:on_update(enqueue)
  cms:on_delete(enqueue)

  kube.workers(q, 2, function(key)
    local ns, name = key:match("^([^/]+)/(.+)$")
    local copy = ns .. "." .. name
    local src = cms:get(key)
    local dst, err = kube.get("v1", "configmaps", TARGET, copy)
    if err and not kube.is_not_found(err) then return nil, err end
    if not src then
      if dst then
        local _, derr = kube.delete("v1", "configmaps", TARGET, copy)
        if derr and not kube.is_not_found(derr) then return nil, derr end
      end
      return
    end
    local rv = src.metadata.resourceVersion
    if not dst then
      local _, cerr = kube.create { apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = copy, namespace = TARGET, annotations = { ["soak/source-rv"] = rv } },
        data = src.data }
      if cerr then return nil, cerr end -- an AlreadyExists is retried too
    elseif (dst.metadata.annotations or {})["soak/source-rv"] ~= rv then
      dst.data = src.data
      dst.metadata.annotations = dst.metadata.annotations or {}
      dst.metadata.annotations["soak/source-rv"] = rv
      local _, uerr = kube.update(dst) -- a 409 is retried with backoff
      if uerr then return nil, uerr end
    end
  end)

  while true do
    local parts = {}
    for _, obj in ipairs(cms:list()) do
      local md = obj.metadata
      parts[#parts + 1] = string.format('"%s/%s":"%s"', md.namespace, md.name,
        md.resourceVersion)
    end
    local f = assert(io.open(DUMP .. ".tmp", "w"))
    f:write('{"events":', events, ',"synced":', tostring(cms:has_synced()), ',"cache":{',
      table.concat(parts, ","), "}}\n")
    f:close()
    assert(os.rename(DUMP .. ".tmp", DUMP))
    kube.sleep(0.2)
  end
end)
