-- pod-labeler: adds a label and an annotation to every Pod that matches a
-- label selector (by default app, that is: Pods that have an app label).
--
--   kubelua run --sim examples/pod-labeler/controller.lua [SELECTOR]
--   kubelua run examples/pod-labeler/controller.lua "app in (web,api)"
--
-- The update carries the resourceVersion the cache saw; when the Pod has
-- changed since (409 Conflict), the reconcile returns the error and the
-- key is retried with the queue's rate limiter, against the newer copy
-- the cache will have by then.
local kube = require "kubelua"

local selector = arg[1] or os.getenv("POD_SELECTOR") or "app"
local LABEL, VALUE = "kubelua.io/labeled", "true"
local ANNOTATION = "kubelua.io/labeled-by"

kube.controller{
  name = "pod-labeler",
  watches = { "v1", "Pod", { label_selector = selector } },
  workers = 4,
  rate_limiter = { type = "max_of", limiters = {
    { type = "exponential", base = 0.005, max = 60 },
    { type = "bucket", qps = 10, burst = 100 } } },
  reconcile = function(_, ctx)
    local pod = ctx.object
    if not pod or kube.is_being_deleted(pod) then return end
    local md = pod.metadata
    if md.labels and md.labels[LABEL] == VALUE then return end -- done already
    md.labels = md.labels or {}
    md.labels[LABEL] = VALUE
    md.annotations = md.annotations or {}
    md.annotations[ANNOTATION] = "pod-labeler (selector " .. selector .. ")"
    local _, err = kube.update(pod)
    if kube.is_conflict(err) then
      ctx.log.info("the pod changed meanwhile; retrying", { attempt = ctx.attempt })
      return nil, err
    elseif kube.is_not_found(err) then
      return -- deleted meanwhile
    elseif err then
      return nil, err
    end
    ctx.log.info("labeled")
  end,
}
