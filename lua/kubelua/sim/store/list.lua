-- kubelua.sim.store.list: list and its parameters as a real apiserver
-- reads them: label and field selectors, limit and continue (a token that
-- names the list's resourceVersion and the next key), resourceVersion and
-- resourceVersionMatch (0: the watch cache's; an exact one in the past:
-- rebuilt from the event history). A list body is built from the entries'
-- stored JSON, never re-encoded. Methods of the store (kubelua.sim.store
-- mixes them in).

local json = require "kubelua.json"
local util = require "kubelua.sim.util"
local httpd = require "kubelua.httpd"
local errors = require "kubelua.sim.store.errors"
local entries = require "kubelua.sim.store.encode"
local history = require "kubelua.sim.store.history"

local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber
local sort = table.sort
local format = string.format
local encode, decode, is_array = json.encode, json.decode, json.is_array
local join_bytes = httpd.join
local status, bad_request = errors.status, errors.bad_request
local item_json, matches = entries.item_json, history.matches

local _M = {}
local Store = {}
_M.methods = Store

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- Reads the selectors of a list or watch; nil, status when malformed.
local function filters(res, ns, params)
  local f = { ns = res.namespaced and ns or nil }
  local err
  f.labels, err = util.parse_label_selector(params.labelSelector)
  if not f.labels then return nil, bad_request(err) end
  f.fields, err = util.parse_field_selector(params.fieldSelector, res.fields)
  if not f.fields then return nil, bad_request(err) end
  f.simple = not f.ns and #f.labels == 0 and #f.fields == 0
  return f
end

local continue_msg = "The provided continue parameter is too old to display a consistent list "
  .. "result. You can start a new list without the continue parameter, or use the continue "
  .. "token in this response to retrieve the remainder of the results. Continuing with the "
  .. "provided token results in an inconsistent list - objects that were created, modified, "
  .. "or deleted between the time the first chunk was returned and now may show up in the list."

local function continue_token(rv, start)
  return util.b64encode('{"v":"meta.k8s.io/v1","rv":' .. rv .. ',"start":' .. encode(start)
    .. "}")
end

-- The name a field selector asks for with metadata.name=, which a
-- registry reads alone (its key) where it can name the key: in a
-- namespace, or of a resource that has none; nil otherwise.
local function single_name(res, f)
  if res.namespaced and not f.ns then return nil end
  for _, r in ipairs(f.fields) do
    if r.op == "=" and #r.path == 2 and r.path[1] == "metadata" and r.path[2] == "name" then
      return r.value
    end
  end
  return nil
end

-- list(res, ns, params, read) -> list body { head, items, n, tail } (the
-- JSON text is head, the items joined by commas, tail) | nil, status
-- [, retry_after]. read(e) -> entry | nil, status, when given, is the
-- storage's decoding of each entry it reads (kubelua.sim.conversion's,
-- for a version that converts): called, as kube-apiserver's storage
-- decodes them, on every entry in the list's scope (the namespace, or
-- the one name metadata.name= selects) from where it starts until the
-- page is full, before the selectors are matched on what it gives; its
-- failure fails the list.
function Store:list(res, ns, params, read)
  local f, err = filters(res, ns, params)
  if not f then return nil, err end
  local rv, rvm = params.resourceVersion, params.resourceVersionMatch
  local limit = tonumber(params.limit or "")
  if limit and limit <= 0 then limit = nil end
  local cont = params.continue
  if cont == "" then cont = nil end
  if cont and rv and rv ~= "" and rv ~= "0" then
    return nil, bad_request("specifying resource version is not allowed when using continue")
  end
  if rvm and rvm ~= "" then
    if rvm ~= "Exact" and rvm ~= "NotOlderThan" then
      return nil, bad_request(format('unsupported resourceVersionMatch "%s"', rvm))
    end
    if not rv or rv == "" or (rvm == "Exact" and rv == "0") then
      return nil, status(422, "Invalid", "resourceVersionMatch: Forbidden: resourceVersionMatch "
        .. "is forbidden unless resourceVersion is provided")
    end
    if cont then
      return nil, bad_request("resourceVersionMatch is forbidden when continue is provided")
    end
  end
  local n = rv and rv ~= "" and tonumber(rv)
  if rv and rv ~= "" and not n then
    return nil, bad_request(format('invalid resource version: "%s"', rv))
  end
  if n and n > self.rv then
    return nil, status(504, "Timeout", format("Timeout: Too large resource version: %d, "
      .. "current: %d", n, self.rv), { causes = json.array { { reason = "ResourceVersionTooLarge",
        message = "Too large resource version" } }, retryAfterSeconds = 1 }), 1
  end
  local expired = status(410, "Expired", "The resourceVersion for the provided list is too old.")
  if n and n ~= 0 and rvm == "Exact" and n < self.compacted then return nil, expired end
  local list_rv = self.rv
  local start
  if cont then
    local t = util.b64decode(cont)
    t = t and decode(t)
    if not is_object(t) or type(t.rv) ~= "number" or type(t.start) ~= "string" then
      return nil, bad_request("continue key is not valid: incorrect encoded start resourceVersion"
        .. " (version meta.k8s.io/v1)")
    end
    if t.rv < self.compacted or t.rv <= 0 then
      local st = status(410, "Expired", continue_msg)
      st.metadata = { continue = continue_token(-1, t.start) }
      return nil, st
    end
    list_rv, start = t.rv, t.start
  end
  if rv == "0" then -- served by the watch cache: no limit, its own revision
    limit = nil
    list_rv = res.last_rv
  end
  -- An exact resourceVersion (or a continued list) in the past: the state
  -- then, rebuilt from the event history while it reaches back so far.
  local objects, keys = res.objects
  if rvm == "Exact" and n and n ~= 0 then
    objects = self:snapshot(res, n)
    if not objects then return nil, expired end
    list_rv = n
  elseif cont then
    objects = self:snapshot(res, list_rv) or res.objects
  end
  if objects == res.objects then
    keys = self:sorted_keys(res)
  else
    keys = {}
    for k in pairs(objects) do keys[#keys + 1] = k end
    sort(keys)
  end
  local items, ents, count, last = {}, {}, 0, nil
  local remaining, more = 0, false
  local scoped = res.namespaced and ns
  local single = single_name(res, f)
  for _, key in ipairs(keys) do
    local e = objects[key]
    local k = scoped and e.name or key
    local after = not start or k >= start
    local ranged = (not f.ns or f.ns == e.ns) and (not single or single == e.name)
    if read and after and ranged and not (limit and count >= limit) then
      e, err = read(e)
      if not e then return nil, err end
    end
    -- a page is full with more keys in the storage's range: there is
    -- more, matched by the selectors or not
    if after and ranged and limit and count >= limit then more = true end
    if after and (f.simple or matches(f, e)) then
      if limit and count >= limit then
        remaining = remaining + 1
      else
        count = count + 1
        items[count] = item_json(e)
        ents[count] = e
        last = k
      end
    end
  end
  local meta = { resourceVersion = tostring(list_rv) }
  if more then
    meta.continue = continue_token(list_rv, last .. "\0")
    if #f.labels == 0 and #f.fields == 0 then meta.remainingItemCount = remaining end
  end
  local md = '{"resourceVersion":"' .. list_rv .. '"'
  if meta.continue then
    md = md .. ',"continue":"' .. meta.continue .. '"'
    if meta.remainingItemCount then
      md = md .. ',"remainingItemCount":' .. remaining
    end
  end
  md = md .. "}"
  if not res.builtin then
    -- a custom resource's list is a map to the server: every member
    -- written, in key order, continue too when it is empty (a Table's
    -- ListMeta, from meta, leaves it out)
    md = '{"continue":"' .. (meta.continue or "") .. '"'
      .. (meta.remainingItemCount and ',"remainingItemCount":' .. remaining or "")
      .. ',"resourceVersion":"' .. list_rv .. '"}'
  end
  return { head = '{"kind":"' .. res.list_kind .. '","apiVersion":"' .. res.api_version
    .. '","metadata":' .. md .. ',"items":[', items = items, n = count, tail = "]}",
    entries = ents, meta = meta }
end

-- The whole JSON text of a list body from list().
local function join(lb)
  return lb.head .. tostring(join_bytes(lb.items, 1, lb.n, ",")) .. lb.tail
end

_M.filters = filters
_M.join = join
return _M
