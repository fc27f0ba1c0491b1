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

---Whether v carries the array mark (or is a view of an array).
---@param v any
---@return boolean
---@usage if kube.json.is_array(v) then ... end
function json.is_array(v) end

---A read-only view of the JSON object s, checked whole as check does:
---each container is decoded when one of its members is first read, and
---reads give exactly what decode gives. pairs, ipairs and # see an empty
---table (use json.pairs, json.ipairs, json.len); encode writes it whole;
---a write raises "json: cannot set K: a view is read-only".
---@param s string one JSON object
---@return table|nil view
---@return string? err "json: byte N: reason"
---@usage local name = assert(kube.json.view(body)).metadata.name
function json.view(s) end

---pairs for a view as for a table.
---@param v table a table or a view
---@return function next
---@return table t
---@return nil
---@usage for k, x in kube.json.pairs(view.metadata.labels) do ... end
function json.pairs(v) end

---ipairs for a view as for a table.
---@param v table a table or a view
---@return function inext
---@return table t
---@return integer zero
---@usage for i, c in kube.json.ipairs(view.spec.containers) do ... end
function json.ipairs(v) end

---# for a view as for a table.
---@param v table a table or a view
---@return integer
---@usage local n = kube.json.len(view.spec.containers)
function json.len(v) end

return json
