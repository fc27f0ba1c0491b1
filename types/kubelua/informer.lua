---@meta kubelua.informer
-- kubelua.informer (runtime/lua_informer.c): the informer, client-go's
-- reflector, DeltaFIFO, indexer and processor in C. kube.informer gives a
-- watching one; kube.local_informer one fed by the caller.

local informer = {}

---An informer whose cache the caller feeds (inf:feed, inf:replace,
---inf:add/update/delete) instead of a watch: the same store, indexers,
---handlers and events as a watching informer, for tests and tools. opts:
---name, resync, indexers, transform, keep_managed_fields, api_version and
---kind (written into list items), plain_objects, compress_min_objects.
---@param opts? table
---@return kubelua.informer
---@usage local inf = kube.local_informer{ name = "pods", indexers = { "namespace" } }
function informer.new(opts) end

---What a handler gets: type ("add", "update" or "delete"), key, object
---and old (decoded on first read), initial (an add of the initial list),
---tombstone (a delete whose last state was missed) and sync (a resync).
---@class kubelua.event
---@field type string "add", "update" or "delete"
---@field key string "namespace/name", or "name" for a cluster-scoped object
---@field object table the object (for a delete, its last state)
---@field old table? the previous object of an update
---@field initial boolean? an add from the initial list
---@field tombstone boolean? a delete seen only by a relist
---@field sync boolean? an update from a periodic resync

---An informer: one watch, one cache of decoded-on-read objects, indexes
---and event handlers.
---@class kubelua.informer
local inf = {}

---Calls fn(ev) for each object added to the cache.
---@param fn fun(ev: kubelua.event)
---@param name? string the handler's name, for logs and metrics
---@return kubelua.informer.handler
---@usage inf:on_add(function(ev) q:add(ev.key) end)
function inf:on_add(fn, name) end

---Calls fn(ev) for each update of a cached object (ev.old, ev.object).
---@param fn fun(ev: kubelua.event)
---@param name? string
---@return kubelua.informer.handler
---@usage inf:on_update(function(ev)
---   if ev.old.metadata.generation ~= ev.object.metadata.generation then q:add(ev.key) end
--- end)
function inf:on_update(fn, name) end

---Calls fn(ev) for each object deleted from the cache.
---@param fn fun(ev: kubelua.event)
---@param name? string
---@return kubelua.informer.handler
---@usage inf:on_delete(function(ev) kube.log.info("gone", { key = ev.key }) end)
function inf:on_delete(fn, name) end

---One handler for all three events: {add = fn, update = fn, delete = fn,
---name = s, resync = seconds, filter = fn(obj) -> boolean}. With a
---filter, an update whose old object fails it and new passes is an add,
---the reverse a delete (client-go's FilteringResourceEventHandler).
---@param h table
---@return kubelua.informer.handler
---@usage inf:add_handler{ add = enqueue, update = enqueue, filter = function(o) return o.metadata.labels ~= nil end }
function inf:add_handler(h) end

---The cached object of a key, or nil.
---@param key_or_namespace string "ns/name", or the namespace with name
---@param name? string
---@return table|nil
---@usage local cm = inf:get("demo", "settings")
function inf:get(key_or_namespace, name) end

---The cached objects, of one namespace or ("" or none) all.
---@param namespace? string
---@return table[]
---@usage for _, pod in ipairs(inf:list("demo")) do print(pod.metadata.name) end
function inf:list(namespace) end

---The keys of the cached objects.
---@return string[]
---@usage local keys = inf:list_keys()
function inf:list_keys() end

---The cached objects whose index name holds value.
---@param name string an indexer's name
---@param value string
---@return table[]
---@usage local owned = inf:by_index("controller", owner_uid)
function inf:by_index(name, value) end

---The keys of the cached objects whose index name holds value.
---@param name string
---@param value string
---@return string[]
---@usage local keys = inf:index_keys("namespace", "demo")
function inf:index_keys(name, value) end

---The values an index holds.
---@param name string
---@return string[]
---@usage local apps = inf:index_values("app")
function inf:index_values(name) end

---Adds indexers: {name = fn(obj) -> list of strings}, {label = "app"},
---or a built-in name ("namespace", "controller").
---@param indexers table
---@usage inf:add_indexers{ by_node = function(pod) return { pod.spec.nodeName } end }
function inf:add_indexers(indexers) end

---Whether the initial list reached the cache.
---@return boolean
---@usage while not inf:has_synced() do kube.sleep(0.1) end
function inf:has_synced() end

---The resourceVersion of the last list or watch event cached.
---@return string
---@usage local rv = inf:last_sync_resource_version()
function inf:last_sync_resource_version() end

---The number of cached objects.
---@return integer
---@usage kube.log.info("cached", { n = inf:len() })
function inf:len() end

---Counters: objects, bytes, lists, relists, watches, watch_restarts,
---events, errors, and last_error (the last failed round's message).
---@return table
---@usage local s = inf:stats(); print(s.objects, s.last_error)
function inf:stats() end

---Deltas queued plus notifications not yet delivered to handlers.
---@return integer
---@usage while inf:pending() > 0 do kube.sleep(0.01) end
function inf:pending() end

---Feeds watch-stream bytes (cut anywhere) to a local informer.
---@param bytes string
---@return true|nil ok
---@return string? err "byte N: reason", or an ERROR event's message
---@return string? code "Gone" for a 410
---@usage assert(inf:feed('{"type":"ADDED","object":{...}}\n'))
function inf:feed(bytes) end

---Replaces a local informer's cache with a list (its JSON, or objects and
---a resourceVersion).
---@param list string|table
---@param resource_version? string
---@usage inf:replace({ obj1, obj2 }, "42")
function inf:replace(list, resource_version) end

---Adds an object to a local informer's cache.
---@param obj table
---@usage inf:add{ apiVersion = "v1", kind = "ConfigMap", metadata = { namespace = "demo", name = "a" } }
function inf:add(obj) end

---Updates an object in a local informer's cache.
---@param obj table
---@usage inf:update(obj)
function inf:update(obj) end

---Deletes an object from a local informer's cache.
---@param obj table
---@usage inf:delete(obj)
function inf:delete(obj) end

---Sends every cached object to the handlers again as a sync update.
---@usage inf:resync()
function inf:resync() end

---The informer's name ("v1/configmaps@demo").
---@return string
---@usage print(inf:name())
function inf:name() end

---Ends the watch for good; the cache and handlers stay readable.
---@usage inf:stop()
function inf:stop() end

---A registered handler.
---@class kubelua.informer.handler
local handler = {}

---Removes the handler.
---@return boolean registered true if it was registered
---@usage h:remove()
function handler:remove() end

---Whether the initial adds reached this handler.
---@return boolean
---@usage kube.wait_for_sync(h)
function handler:has_synced() end

return informer
