-- bench/soak/kinds.lua: what bench/soak.lua writes and what its controller
-- (bench/soak/mirror.lua) mirrors, shared so that the two agree.
--
-- Two kinds change: ConfigMaps, and Widgets, a namespaced custom resource
-- with a status subresource (so the writer changes status apart from spec,
-- which bumps no generation). Every source object in the namespaces src-*
-- has a copy in "mirror", a ConfigMap named "<resource>.<namespace>.<name>"
-- whose annotation soak/source-rv is the source's resourceVersion and
-- whose data is copy_data(source). Copies of both kinds are ConfigMaps so
-- that they live in the one ConfigMap informer the controller keeps
-- anyway: it reads them from its cache, as controller-runtime's client
-- does, which costs one write per mirrored change instead of a GET and a
-- write, and no third watch (with its own relist backoff) stands between
-- the last write and convergence.
local json = require "kubelua.json"

local _M = {}

_M.GROUP = "soak.kubelua.io"
_M.MIRROR = "mirror"

_M.crd = { apiVersion = "apiextensions.k8s.io/v1", kind = "CustomResourceDefinition",
  metadata = { name = "widgets." .. _M.GROUP },
  spec = { group = _M.GROUP, scope = "Namespaced",
    names = { plural = "widgets", singular = "widget", kind = "Widget", listKind = "WidgetList" },
    versions = json.array { { name = "v1", served = true, storage = true,
      subresources = { status = {} },
      schema = { openAPIV3Schema = { type = "object",
        ["x-kubernetes-preserve-unknown-fields"] = true } } } } } }

_M.kinds = {
  { resource = "configmaps", api_version = "v1", kind = "ConfigMap",
    copy_data = function(src) return src.data end },
  -- spec and status as JSON (kubelua.json sorts keys, so equal tables
  -- give equal strings); no status, no key
  { resource = "widgets", api_version = _M.GROUP .. "/v1", kind = "Widget",
    copy_data = function(src)
      return { spec = json.encode(src.spec),
               status = src.status ~= nil and json.encode(src.status) or nil }
    end },
}

function _M.copy_name(resource, ns, name) return resource .. "." .. ns .. "." .. name end

-- The source of a copy's key ("mirror/<resource>.<ns>.<name>"): its
-- resource and key, or nil for any other key.
function _M.source_of(key)
  local res, ns, name = key:match("^" .. _M.MIRROR .. "/([^.]+)%.([^.]+)%.(.+)$")
  if res then return res, ns .. "/" .. name end
end

return _M
