---@meta kubelua.http
-- kubelua.http (runtime/lua_http.c): HTTP requests from a task.

local http = {}

---Sends one HTTP request and waits (in a task) for the answer; an HTTP
---status is a result, not an error. opts: method, url, headers
---{name = value}, body, timeout, connect_timeout, idle_timeout, tls
---{ca_file, ca, cert_file, cert, key_file, key, insecure, server_name}.
---@param opts table
---@return {status: integer, headers: table, body: string}|nil response headers by lower-case name
---@return string? err
---@return string? code
---@usage local res = assert(require("kubelua.http").request{ url = "http://127.0.0.1:8080/healthz" })
function http.request(opts) end

return http
