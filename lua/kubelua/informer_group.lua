-- kubelua.informer_group: several shared informers seen as one, for
-- kube.informer's two cases that one watch cannot serve:
--
--  * opts.namespaces = {"a", "b"}: one watch per namespace, one object whose
--    get/list/by_index/has_synced/on_* span them all (controller-runtime's
--    multi-namespace cache);
--  * a Kind named outside a task (a script's top level), where discovery
--    cannot run yet: the group is returned at once, empty, and a task
--    resolves the kind and attaches the informer(s) when discovery answers.
--
-- Until its members are attached a group is an empty cache that has not
-- synced. Handlers and indexers added to the group are recorded and added
-- to each member when it is attached, so a handler added early still sees
-- every object (a late handler gets synthetic adds, as in client-go).

local type, ipairs, error = type, ipairs, error
local setmetatable, getmetatable = setmetatable, getmetatable
local find, sub = string.find, string.sub

local _M = {}

---What kube.informer gives for opts.namespaces, or for a Kind named
---before discovery answered: several shared informers seen as one, with
---the methods of kubelua.informer; empty and not synced until attached.
---@class kubelua.informer_group
local Group = {}
Group.__index = Group

---A handler registered on a group: on every member, and on members yet
---to be attached.
---@class kubelua.informer_group.handler
local Handle = {}
Handle.__index = Handle

-- new(name) -> an empty group; group:attach(list of informers, namespaces)
-- fills it.
function _M.new(name)
  return setmetatable({ _name = name, members = nil, by_ns = nil, handlers = {},
                        indexers = {} }, Group)
end

function _M.is_group(v) return getmetatable(v) == Group end

-- group:attach(infs, namespaces): infs[i] watches namespaces[i] (nil for a
-- group of one informer that spans whatever it watches).
---@package
function Group:attach(infs, namespaces)
  local by_ns
  if namespaces then
    by_ns = {}
    for i, ns in ipairs(namespaces) do by_ns[ns] = infs[i] end
  end
  for _, idx in ipairs(self.indexers) do
    for _, inf in ipairs(infs) do inf:add_indexers(idx) end
  end
  for _, h in ipairs(self.handlers) do
    if not h.removed then h:attach(infs) end
  end
  self.by_ns = by_ns
  self.members = infs
end

---The group's name.
---@return string
---@usage print(group:name())
function Group:name() return self._name end

---@package
function Group:attached() return self.members ~= nil end

-- The member that holds a namespace's objects, or nil.
---@package
function Group:member_for(ns)
  local members = self.members
  if not members then return nil end
  if self.by_ns then return self.by_ns[ns] end
  return members[1]
end

local function add_handler(self, method, arg)
  local h = setmetatable({ method = method, arg = arg, subs = {}, removed = false }, Handle)
  self.handlers[#self.handlers + 1] = h
  if self.members then h:attach(self.members) end
  return h
end

---@package
function Handle:attach(infs)
  for i, inf in ipairs(infs) do self.subs[i] = inf[self.method](inf, self.arg) end
end

-- handle:remove(): the handler stops on every member (and on members yet
-- to be attached).
---Removes the handler from every member.
---@usage h:remove()
function Handle:remove()
  self.removed = true
  for _, s in ipairs(self.subs) do s:remove() end
  self.subs = {}
end

---Whether the initial adds of every member reached the handler.
---@return boolean
---@usage kube.wait_for_sync(h)
function Handle:has_synced()
  if self.removed or #self.subs == 0 then return false end
  for _, s in ipairs(self.subs) do
    if not s:has_synced() then return false end
  end
  return true
end

---As informer:on_add, on every member.
---@param fn fun(ev: kubelua.event)
---@return kubelua.informer_group.handler
---@usage group:on_add(function(ev) q:add(ev.key) end)
function Group:on_add(fn) return add_handler(self, "on_add", fn) end
---As informer:on_update, on every member.
---@param fn fun(ev: kubelua.event)
---@return kubelua.informer_group.handler
---@usage group:on_update(function(ev) q:add(ev.key) end)
function Group:on_update(fn) return add_handler(self, "on_update", fn) end
---As informer:on_delete, on every member.
---@param fn fun(ev: kubelua.event)
---@return kubelua.informer_group.handler
---@usage group:on_delete(function(ev) q:add(ev.key) end)
function Group:on_delete(fn) return add_handler(self, "on_delete", fn) end
---As informer:add_handler, on every member.
---@param funcs table {add, update, delete, name, resync, filter}
---@return kubelua.informer_group.handler
---@usage group:add_handler{ add = enqueue, update = enqueue, delete = enqueue }
function Group:add_handler(funcs) return add_handler(self, "add_handler", funcs) end

---As informer:add_indexers, on every member.
---@param idx table
---@usage group:add_indexers{ by_app = function(o) return { o.metadata.labels.app } end }
function Group:add_indexers(idx)
  self.indexers[#self.indexers + 1] = idx
  for _, inf in ipairs(self.members or {}) do inf:add_indexers(idx) end
end

---Whether every member has synced (false until attached).
---@return boolean
---@usage kube.wait_for_sync(group)
function Group:has_synced()
  local members = self.members
  if not members then return false end
  for _, inf in ipairs(members) do
    if not inf:has_synced() then return false end
  end
  return true
end

-- get(key) or get(namespace, name): from the member that watches the
-- object's namespace.
---The cached object of a key, from the member that watches its namespace.
---@param a string "ns/name", or the namespace
---@param b? string the name
---@return table|nil
---@usage local cm = group:get("team-a", "settings")
function Group:get(a, b)
  local ns, key = a, a
  if b ~= nil then
    key = (a and a ~= "" and a .. "/" or "") .. b
  else
    local slash = type(a) == "string" and find(a, "/", 1, true)
    ns = slash and sub(a, 1, slash - 1) or ""
  end
  local inf = self:member_for(ns)
  if not inf then return nil end
  return inf:get(key)
end

local function concat_all(self, method, ...)
  local out = {}
  for _, inf in ipairs(self.members or {}) do
    local part = inf[method](inf, ...)
    for i = 1, #part do out[#out + 1] = part[i] end
  end
  return out
end

---The cached objects of one namespace, or of all members.
---@param ns? string
---@return table[]
---@usage for _, s in ipairs(group:list()) do print(s.metadata.name) end
function Group:list(ns)
  if ns ~= nil and self.by_ns then
    local inf = self.by_ns[ns]
    return inf and inf:list(ns) or {}
  end
  return concat_all(self, "list", ns)
end

---The keys of every member's objects.
---@return string[]
---@usage local keys = group:list_keys()
function Group:list_keys() return concat_all(self, "list_keys") end
---As informer:by_index, over every member.
---@param name string
---@param value string
---@return table[]
---@usage local owned = group:by_index("controller", uid)
function Group:by_index(name, value) return concat_all(self, "by_index", name, value) end
---As informer:index_keys, over every member.
---@param name string
---@param value string
---@return string[]
---@usage local keys = group:index_keys("namespace", "team-a")
function Group:index_keys(name, value) return concat_all(self, "index_keys", name, value) end

---The values an index holds, over every member, each once.
---@param name string
---@return string[]
---@usage local apps = group:index_values("app")
function Group:index_values(name)
  local seen, out = {}, {}
  for _, v in ipairs(concat_all(self, "index_values", name)) do
    if not seen[v] then
      seen[v] = true
      out[#out + 1] = v
    end
  end
  return out
end

local function sum(self, method)
  local n = 0
  for _, inf in ipairs(self.members or {}) do n = n + inf[method](inf) end
  return n
end

---The number of objects cached by every member.
---@return integer
---@usage print(group:len())
function Group:len() return sum(self, "len") end
---The deltas and notifications pending in every member.
---@return integer
---@usage while group:pending() > 0 do kube.sleep(0.01) end
function Group:pending() return sum(self, "pending") end

---Resyncs every member.
---@usage group:resync()
function Group:resync()
  for _, inf in ipairs(self.members or {}) do inf:resync() end
end

-- The member's resourceVersion for a group of one; nil for several watches,
-- whose resourceVersions say nothing together.
---The member's resourceVersion for a group of one; nil for several.
---@return string|nil
---@usage local rv = group:last_sync_resource_version()
function Group:last_sync_resource_version()
  local members = self.members
  if members and #members == 1 and not self.by_ns then
    return members[1]:last_sync_resource_version()
  end
  return nil
end

for _, m in ipairs({ "feed", "replace", "add", "update", "delete" }) do
  ---Raises: feed, replace, add, update and delete are for local informers
  ---(kube.local_informer), not for a watching group.
  ---@param ... any
  ---@usage local inf = kube.local_informer{}; inf:add(obj) -- not group:add(obj)
  Group[m] = function()
    error("informer:" .. m .. ": not for a watching informer", 2)
  end
end

return _M
