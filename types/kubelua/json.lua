---@meta kubelua.json
-- kubelua.json (runtime/lua_json.c), also kube.json: exact JSON. Arrays
-- carry a metatable (also when empty), null is kube.null, integers up to
-- 2^53 stay integers, object keys are written sorted.

local json = {}

---Decodes JSON text (a string, or bytes from httpd.join).
---@param s string
---@return any|nil value
---@return string? err "json: byte N: reason"
---@usage local obj = assert(kube.json.decode('{"a": [1, 2]}'))
function json.decode(s) end

---Checks JSON text as decode does, without building anything.
---@param s string
---@return true|nil ok
---@return string? err "json: byte N: reason"
---@usage assert(kube.json.check(body))
function json.check(s) end

---What a store needs to file an object given as JSON, without decoding it.
---@param s string one JSON object
---@param ns? string the namespace expected (returned itself when equal)
---@param name? string the name expected
---@return string|nil namespace "" when absent
---@return string name
---@return string resource_version
---@usage local ns, name, rv = kube.json.meta(text)
function json.meta(s, ns, name) end

---The JSON object s without its top-level members named, the rest byte
---for byte.
---@param s string one JSON object
---@param ... string the member names
---@return any bytes
---@usage local item = kube.json.omit(text, "kind", "apiVersion")
function json.omit(s, ...) end

---Encodes a value as compact JSON; raises "json: <reason> at <path>" for a
---value with no exact JSON form.
---@param v any
---@return string
---@usage local text = kube.json.encode({ data = { color = "blue" } })
function json.encode(v) end

---Marks a table as a JSON array (a new empty one by default), so that an
---empty list encodes as [] rather than {}.
---@param t? table
---@return table t
---@usage obj.spec.finalizers = kube.json.array()
function json.array(t) end

---Whether v carries the array mark.
---@param v any
---@return boolean
---@usage if kube.json.is_array(v) then ... end
function json.is_array(v) end

return json
