---@meta kubelua.httpd
-- kubelua.httpd (runtime/lua_httpd.c): an HTTP/1.1 and HTTP/2 server on
-- the runtime's loop; each request runs its handler in a new task.

local httpd = {}

---Starts a server: {host, port (0: any free one), handler = fn(req),
---tls_cert, tls_key, limits (read_timeout, max_header_bytes, ...),
---send_date, send_thread, tls_keep_buffers, error_pages,
---serve_while_stopping}. A handler that ends without answering gets a 500
---sent for it. Once the runtime is stopping a server answers 503, unless
---serve_while_stopping. tls_keep_buffers: each TLS connection keeps its
---buffers (~34 KiB) instead of allocating them for every record, for a
---server of few busy connections.
---@param opts table
---@return kubelua.httpd.server|nil server
---@return string? err
---@usage local srv = assert(require("kubelua.httpd").listen{ host = "127.0.0.1", port = 0, handler = function(req) req:reply(200, nil, "ok") end })
function httpd.listen(opts) end

---Joins strings, numbers, bytes and nested tables of them into an
---immutable bytes value that req:write sends like a string.
---@param parts table
---@param i? integer first part (default 1)
---@param j? integer last part (default #parts)
---@param sep? string between top-level parts (default "")
---@return any bytes
---@usage local body = httpd.join({ "[", items, "]" })
function httpd.join(parts, i, j, sep) end

---A request, valid until it is answered or its client goes.
---@class kubelua.httpd.request
local req = {}

---The method ("GET"), nil once the request ended.
---@return string
---@usage if req:method() ~= "GET" then return req:reply(405) end
function req:method() end

---The path, without the query.
---@return string
---@usage local path = req:path()
function req:path() end

---The raw query string ("" when none).
---@return string
---@usage local q = req:query()
function req:query() end

---The nth (default 1) decoded value of a query parameter, or nil.
---@param key string
---@param nth? integer
---@return string|nil
---@usage local watch = req:param("watch") == "true"
function req:param(key, nth) end

---The query parameters, each name's first value.
---@return table<string, string>
---@usage local p = req:params()
function req:params() end

---A header's value (name case-insensitive), or nil.
---@param name string
---@return string|nil
---@usage local ct = req:header("content-type")
function req:header(name) end

---The headers in the order sent, as {name, value} pairs.
---@return table[]
---@usage for _, h in ipairs(req:headers()) do print(h[1], h[2]) end
function req:headers() end

---The request body.
---@return string
---@usage local obj = kube.json.decode(req:body())
function req:body() end

---The client's address.
---@return string
---@usage kube.log.debug("request", { from = req:remote() })
function req:remote() end

---Whether the request came over TLS.
---@return boolean
---@usage if not req:is_tls() then return req:reply(403) end
function req:is_tls() end

---Whether the request is still on (not answered, client not gone).
---@return boolean
---@usage if req:alive() then req:write(chunk) end
function req:alive() end

---Whether an answer was begun.
---@return boolean
---@usage if not req:answered() then req:reply(500) end
function req:answered() end

---Answers with a status, headers {name = value} and a body.
---@param status integer
---@param headers? table
---@param body? string
---@return true|nil ok
---@return string? err "closed"
---@usage req:reply(200, { ["content-type"] = "application/json" }, kube.json.encode(obj))
function req:reply(status, headers, body) end

---Begins a streamed answer (chunked, or HTTP/2 data frames).
---@param status integer
---@param headers? table
---@return true|nil ok
---@return string? err "closed"
---@usage req:stream_begin(200, { ["content-type"] = "application/json" })
function req:stream_begin(status, headers) end

---Sends strings or bytes as one chunk of a streamed answer.
---@param ... string
---@return true|nil ok
---@return string? err "closed" or "limit"
---@usage req:write(kube.json.encode(ev), "\n")
function req:write(...) end

---Ends a streamed answer.
---@return true|nil ok
---@return string? err "closed"
---@usage req:finish()
function req:finish() end

---Closes the connection after n more payload bytes (default 0), or on
---HTTP/2 resets the request's stream.
---@param n? integer
---@return true|nil ok
---@return string? err "closed"
---@usage req:abort()
function req:abort(n) end

---Bytes written but not yet sent.
---@return integer
---@usage if req:buffered() > 1e6 then req:wait_drain() end
function req:buffered() end

---Waits (in a task) until the buffered output fell to the low-water mark.
---@return boolean alive false if the request ended
---@usage if not req:wait_drain() then return end
function req:wait_drain() end

---Waits the seconds, or less when the request ends first.
---@param seconds number
---@return boolean alive
---@usage while req:sleep(1) do req:write("\n") end
function req:sleep(seconds) end

---fn(req, reason) runs in a task when the request ends before its owner
---ended it (reason "closed", "limit" or "shutdown").
---@param fn fun(req: kubelua.httpd.request, reason: string)
---@usage req:on_close(function(_, why) kube.log.debug("watch ended", { why = why }) end)
function req:on_close(fn) end

---A listening server.
---@class kubelua.httpd.server
local srv = {}

---The port it listens on (the kernel's pick for port 0).
---@return integer
---@usage local url = "http://127.0.0.1:" .. srv:port()
function srv:port() end

---The listening socket's descriptor.
---@return integer
---@usage local fd = srv:fd()
function srv:fd() end

---Stops listening and closes the connections.
---@usage srv:close()
function srv:close() end

---Counters: connections, requests, streams, accepted, responses.
---@return table
---@usage print(srv:stats().requests)
function srv:stats() end

---Ends ("end", the default) or drops ("drop") every streamed answer.
---@param mode? string
---@return integer n the streams closed
---@usage srv:close_streams("drop")
function srv:close_streams(mode) end

---Loads a new certificate for the next connections; open ones keep theirs.
---@param cert_file string
---@param key_file string
---@return true|nil ok
---@return string? err
---@usage assert(srv:set_tls(dir .. "/tls.crt", dir .. "/tls.key"))
function srv:set_tls(cert_file, key_file) end

return httpd
