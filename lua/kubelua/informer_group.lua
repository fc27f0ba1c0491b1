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

local Group = {}
Group.__index = Group

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

function Group:name() return self._name end

function Group:attached() return self.members ~= nil end

-- The member that holds a namespace's objects, or nil.
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

function Handle:attach(infs)
  for i, inf in ipairs(infs) do self.subs[i] = inf[self.method](inf, self.arg) end
end

-- handle:remove(): the handler stops on every member (and on members yet
-- to be attached).
function Handle:remove()
  self.removed = true
  for _, s in ipairs(self.subs) do s:remove() end
  self.subs = {}
end

function Handle:has_synced()
  if self.removed or #self.subs == 0 then return false end
  for _, s in ipairs(self.subs) do
    if not s:has_synced() then return false end
  end
  return true
end

function Group:on_add(fn) return add_handler(self, "on_add", fn) end
function Group:on_update(fn) return add_handler(self, "on_update", fn) end
function Group:on_delete(fn) return add_handler(self, "on_delete", fn) end
function Group:add_handler(funcs) return add_handler(self, "add_handler", funcs) end

function Group:add_indexers(idx)
  self.indexers[#self.indexers + 1] = idx
  for _, inf in ipairs(self.members or {}) do inf:add_indexers(idx) end
end

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

function Group:list(ns)
  if ns ~= nil and self.by_ns then
    local inf = self.by_ns[ns]
    return inf and inf:list(ns) or {}
  end
  return concat_all(self, "list", ns)
end

function Group:list_keys() return concat_all(self, "list_keys") end
function Group:by_index(name, value) return concat_all(self, "by_index", name, value) end
function Group:index_keys(name, value) return concat_all(self, "index_keys", name, value) end

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

function Group:len() return sum(self, "len") end
function Group:pending() return sum(self, "pending") end

function Group:resync()
  for _, inf in ipairs(self.members or {}) do inf:resync() end
end

-- The member's resourceVersion for a group of one; nil for several watches,
-- whose resourceVersions say nothing together.
function Group:last_sync_resource_version()
  local members = self.members
  if members and #members == 1 and not self.by_ns then
    return members[1]:last_sync_resource_version()
  end
  return nil
end

for _, m in ipairs({ "feed", "replace", "add", "update", "delete" }) do
  Group[m] = function()
    error("informer:" .. m .. ": not for a watching informer", 2)
  end
end

return _M
