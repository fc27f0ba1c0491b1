-- The known differences between the simulator and a real kube-apiserver
-- 1.26.1, each with its reason; spec/real/differential_spec.lua
-- reads this list. An entry matches a difference with Lua patterns over
-- its case ("fixtures", "wrong types", "random SEED/N", "random setup"),
-- its step's label, the field's path (".status", ".body.spec.replicas",
-- ".body.items[name=a].data") and the two values as JSON text ("<absent>"
-- when missing); a pattern left out matches anything. A difference no
-- entry matches fails the suite, and so does an entry whose steps ran
-- without its difference: this list says only what is still true. A
-- pattern may be a list of patterns, any of which may match.

local APPLY_UNDECODABLE = { "^apply leases %(type%)$", "^apply gadgets %(type%)$",
  "^apply secrets %(type%)$" }

return {
  { case = "^fixtures$", step = "^01%-version$", path = "^%.body%.%a+$",
    reason = "/version: the simulator answers as the recorded v1.26.0 build (fixture 01); "
      .. "the 1.26.1 binaries the suite runs were built without a version stamp "
      .. "(gitVersion v0.0.0-master+f52833d2, empty major and minor)" },
  { case = "^random ", step = APPLY_UNDECODABLE, path = "^%.status$", real = "^500$",
    reason = "a server-side apply whose value cannot be decoded (a MicroTime without 6 "
      .. "fractional digits, a string for a custom resource's integer, data that is not "
      .. "base64) is a 500 on kube-apiserver 1.26 ('failed to create typed patch object', "
      .. "'failed to convert new object'); the simulator answers as its create would (400 or "
      .. "422), or 409 when the field is another manager's" },
  { case = "^random ", step = APPLY_UNDECODABLE, path = "^%.body%.",
    reason = "the Status of the 500 above: message, no reason, no details" },
  { case = "^pods subresources$", step = "^web running$",
    path = { "^%.body%.status%.conditions%[0%]%.lastProbeTime$",
      "^%.body%.status%.conditions%[0%]%.lastTransitionTime$",
      "^%.body%.metadata%.managedFields%[1%]%.fieldsV1%.f:status%.f:conditions%." },
    reason = "a condition written without its times gets lastProbeTime and lastTransitionTime "
      .. "null on the real server (Go's zero metav1.Time), and those fields then count as "
      .. "owned; the simulator leaves them out" },
  { case = "^pods subresources$", step = { "^create budget$", "^budget status 0$" },
    path = { "^%.body%.status$",
      "^%.body%.metadata%.managedFields%[1%]%.fieldsV1%.f:status%.f:disruptionsAllowed$" },
    reason = "a new PodDisruptionBudget's status is all zeros on the real server (the "
      .. "registry's empty status, its int fields not omitted); the simulator stores none, so "
      .. "the status patch that follows owns disruptionsAllowed there" },
  { case = "^pods subresources$", step = "^get budget$",
    path = "^%.body%.metadata%.managedFields%[0%]%.fieldsV1%.f:status%.f:conditions%.%.$",
    reason = "a list map that a write creates gets its \".\" member in the real server's "
      .. "managedFields; the simulator's has only the items" },
  { case = "^other subresources$", step = "^finalize none$",
    path = "^%.body%.metadata%.managedFields%[1%]$",
    reason = "an entry of managedFields left with no fields (spec.finalizers emptied) goes on "
      .. "the real server; the simulator keeps it with \"f:spec\": {}" },
  { case = "^autoscaling$",
    path = "%.metadata%.managedFields%[%d%]%.fieldsV1%.f:status%.f:conditions%.%.$",
    reason = "as for the PodDisruptionBudget above: the status conditions a write creates get "
      .. "their \".\" member in the real server's managedFields; the simulator's has only "
      .. "the items" },
  { case = "^conversion$", path = "%.clientConfig%.url$",
    reason = "each server calls the conversion webhook at its own path (/sim, /real), so that "
      .. "the reviews each one makes are told apart" },
}
