---@meta kubelua.metrics.core
-- The metric families of kube.metrics.counter/gauge/histogram
-- (runtime/lua_metrics.c). Label values come in a table keyed by label
-- name; a missing or unknown label raises.

local mcore = {}

---A metric family on /metrics.
---@class kubelua.metric
local metric = {}

---The series of these label values, bound once: the hot path's handle.
---@param labels table
---@return kubelua.metric.series
---@usage local ok = reconciles:with{ result = "ok" }; ok:inc()
function metric:with(labels) end

---Adds n (default 1) to a counter or gauge.
---@param labels? table
---@param n? number
---@usage reconciles:inc({ result = "ok" })
function metric:inc(labels, n) end

---Subtracts n (default 1) from a gauge.
---@param labels? table
---@param n? number
---@usage in_flight:dec()
function metric:dec(labels, n) end

---Sets a gauge.
---@param labels? table
---@param v number
---@usage queue_depth:set({ queue = "a" }, 3)
function metric:set(labels, v) end

---Observes a value in a histogram.
---@param v number
---@param labels? table
---@usage latency:observe(0.25, { route = "/" })
function metric:observe(v, labels) end

---The value of a series; a histogram's count and sum.
---@param labels? table
---@return number
---@usage assert(reconciles:value{ result = "ok" } == 1)
function metric:value(labels) end

---The family's name.
---@return string
---@usage print(reconciles:name())
function metric:name() end

---One series of a family, bound to its label values.
---@class kubelua.metric.series
local series = {}

---Adds n (default 1).
---@param n? number
---@usage ok:inc()
function series:inc(n) end

---Subtracts n (default 1).
---@param n? number
---@usage busy:dec()
function series:dec(n) end

---Sets the value.
---@param v number
---@usage depth:set(3)
function series:set(v) end

---Observes a value (histograms).
---@param v number
---@usage took:observe(0.012)
function series:observe(v) end

---The value; a histogram's count and sum.
---@return number
---@usage print(ok:value())
function series:value() end

return mcore
