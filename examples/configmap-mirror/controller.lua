-- configmap-mirror: copies every ConfigMap labelled
-- kubelua.io/mirror=secret into a Secret of the same name and namespace,
-- owned by the ConfigMap, kept in step with it, and deleted with it.
--
--   kubelua run --sim examples/configmap-mirror/controller.lua   (no cluster)
--   kubelua run examples/configmap-mirror/controller.lua         (kubeconfig)
--
-- In a cluster the garbage collector deletes an owned Secret when its
-- ConfigMap goes; the controller deletes it too, so that it also works
-- where no garbage collector runs (the simulator).
local kube = require "kubelua"

local LABEL = "kubelua.io/mirror"
local MANAGED_BY = "configmap-mirror"

local b64chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

-- Secret data is base64.
local function base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local chunk = {}
    for j = 1, 4 do
      local idx = math.floor(n / 64 ^ (4 - j)) % 64
      chunk[j] = b64chars:sub(idx + 1, idx + 1)
    end
    if not b then chunk[3] = "=" end
    if not c then chunk[4] = "=" end
    out[#out + 1] = table.concat(chunk)
  end
  return table.concat(out)
end

kube.controller{
  name = "configmap-mirror",
  watches = { "v1", "ConfigMap", { label_selector = LABEL .. "=secret" } },
  owns = { { "v1", "Secret", { label_selector = "app.kubernetes.io/managed-by=" .. MANAGED_BY } } },
  workers = 2,
  reconcile = function(req, ctx)
    local cm = ctx.object
    local secret, err = kube.get("v1", "secrets", req.namespace, req.name)
    if err and not kube.is_not_found(err) then return nil, err end

    if not cm or kube.is_being_deleted(cm) then
      -- the source is gone: so is the copy, if it is ours
      local ref = secret and kube.controller_of(secret)
      if ref and ref.kind == "ConfigMap" and ref.name == req.name then
        local _, derr = kube.delete("v1", "secrets", req.namespace, req.name)
        if derr and not kube.is_not_found(derr) then return nil, derr end
        ctx.log.info("deleted the copy")
      end
      return
    end

    local data = {}
    for k, v in pairs(cm.data or {}) do data[k] = base64(v) end
    if not secret then
      secret = { apiVersion = "v1", kind = "Secret", type = "Opaque",
                 metadata = { name = req.name, namespace = req.namespace,
                              labels = { ["app.kubernetes.io/managed-by"] = MANAGED_BY } },
                 data = data }
      assert(kube.set_controller_reference(cm, secret))
      local _, cerr = kube.create(secret)
      if cerr then return nil, cerr end
      ctx.log.info("created the copy")
      return
    end
    local adopt = kube.controller_of(secret) == nil
    local ok, owned_err = kube.set_controller_reference(cm, secret)
    if not ok then
      -- a Secret of that name that something else controls: retrying will not help
      return kube.terminal(owned_err)
    end
    -- an empty merge patch: nothing differs
    if not adopt and next(kube.merge_patch(secret.data or {}, data)) == nil then return end
    secret.data = data
    local _, uerr = kube.update(secret) -- a 409 here is retried with backoff
    if uerr then return nil, uerr end
    ctx.log.info("updated the copy")
  end,
}
