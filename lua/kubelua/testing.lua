-- kubelua.testing: a harness for testing controllers with `kubelua test`.
--
--   local testing = require "kubelua.testing"
--
--   describe("my controller", function()
--     local t
--     before_each(function() t = testing.start{ namespaces = { "demo" } } end)
--     after_each(function() t:stop() end)
--
--     it("copies labelled ConfigMaps", function()
--       t:load("controller.lua")
--       t:create{ apiVersion = "v1", kind = "ConfigMap", … }
--       local copy = t:eventually(function()
--         return t:get("v1", "secrets", "demo", "settings")
--       end)
--       assert.equal("blue", copy.data.color)
--     end)
--   end)
--
-- start() serves a fresh, empty API simulator in this process on a
-- loopback port and points kubelua's connection at it; load() runs the
-- controller script as `kubelua run` would (its own generation: globals,
-- handlers and workers of its own), and stop() retires it — its workers and
-- informers stop — and closes the simulator. `kubelua test` runs every spec
-- inside a task, so the API calls here simply wait for their answers.

-- Methods that need no state of the harness are methods all the same: a
-- spec reads t:create(…) as "the harness creates".
-- luacheck: ignore 212/self

local kube = require "kubelua"
local generation = require "kubelua.generation"

local type, error, tostring, select, unpack = type, error, tostring, select, unpack
local ipairs, pairs, pcall, setmetatable = ipairs, pairs, pcall, setmetatable
local format = string.format

local function pack(...) return { n = select("#", ...), ... } end

local _M = {}

local Harness = {}
Harness.__index = Harness

local active

local function fail(fname, msg, level)
  error("kubelua.testing: " .. fname .. ": " .. msg, (level or 1) + 1)
end

-- start([opts]) -> harness. opts.namespaces: names to create;
-- opts.load: a directory of .json/.yaml objects to seed the simulator
-- with; opts.sim: options for the simulator (token, history_size, …);
-- opts.qps: the client's rate limit (default 0: none, so that specs are
-- not slowed down by it; give 20 for client-go's default);
-- opts.controllers: the simulator's control plane (default: all of it;
-- false: the API server alone, as envtest runs it; { gc = false, … }:
-- all but those; kubelua.sim.controllers names them).
function _M.start(opts)
  opts = opts or {}
  if type(opts) ~= "table" then fail("start", "opts must be a table, got " .. type(opts), 2) end
  if active then active:stop() end
  local simopts = opts.sim
  if opts.controllers ~= nil then
    simopts = {}
    for k, v in pairs(opts.sim or {}) do simopts[k] = v end
    simopts.controllers = opts.controllers
  end
  local ok, sim = pcall(kube.start_sim, simopts)
  if not ok then fail("start", (tostring(sim):gsub("^.-sim: ", "sim: ")), 2) end
  kube.client.set_default(kube.client.new{ server = kube.server(), qps = opts.qps or 0 })
  local t = setmetatable({ sim = sim }, Harness)
  active = t
  if opts.load then
    local n, err = sim:load(opts.load)
    if not n then fail("start", "cannot load " .. tostring(opts.load) .. ": " .. err, 2) end
  end
  for _, ns in ipairs(opts.namespaces or {}) do t:namespace(ns) end
  return t
end

-- t:load(path, ...) -> the generation number: runs the controller script
-- with ... as its arguments; a script that fails raises its message.
function Harness:load(path, ...)
  local g, err = generation.load(path, { ... })
  if not g then fail("load", err, 2) end
  return g.n
end

-- t:reload() -> the new generation number: loads the script again, as a
-- change of its file or SIGHUP does in `kubelua run`; raises on failure.
function Harness:reload()
  local before = generation.current()
  local ok, err = generation.reload(true)
  if not ok then fail("reload", err, 2) end
  if generation.current() == before then fail("reload", "no script loaded", 2) end
  return generation.current()
end

-- t:stop(): the controller's generation retires (its workers and
-- informers stop; reconciles in progress get up to 5 s to finish, so that
-- none outlives its spec) and the simulator closes. Idempotent. Queues
-- keep what was queued, as they do across reloads: give each spec's
-- controller its own queue names when that matters.
function Harness:stop()
  if self.stopped then return end
  self.stopped = true
  generation.unload(5)
  kube._stop_informers(kube.server())
  for _, srv in ipairs(self.sim.servers) do srv:close() end
  if active == self then active = nil end
end

local function check(fname, obj, err)
  if obj == nil and err ~= nil then fail(fname, tostring(err), 3) end
  return obj
end

-- t:namespace(name) -> the Namespace (created if missing).
function Harness:namespace(name)
  local ns, err = kube.create{ apiVersion = "v1", kind = "Namespace", metadata = { name = name } }
  if ns then return ns end
  if kube.is_already_exists(err) then
    local r = check("namespace", kube.get("v1", "namespaces", nil, name))
    return r
  end
  fail("namespace", tostring(err), 2)
end

-- t:create(obj) / t:apply(obj) / t:update(obj) -> the server's object;
-- raise on an error with the server's reason and message. (Not tail
-- calls: the error names the spec's line.)
function Harness:create(obj)
  local r = check("create", kube.create(obj))
  return r
end

function Harness:update(obj)
  local r = check("update", kube.update(obj))
  return r
end

function Harness:apply(obj, opts)
  opts = opts or { field_manager = "kubelua-test", force = true }
  local r = check("apply", kube.apply(obj, opts))
  return r
end

-- t:get(api_version, resource, namespace, name) -> the object, or nil when
-- it does not exist (other errors raise).
function Harness:get(api_version, resource, namespace, name)
  local obj, err = kube.get(api_version, resource, namespace, name)
  if obj == nil and not kube.is_not_found(err) then fail("get", tostring(err), 2) end
  return obj
end

-- t:list(api_version, resource [, namespace [, opts]]) -> the items.
function Harness:list(api_version, resource, namespace, opts)
  local list, err = kube.list(api_version, resource, namespace, opts)
  if not list then fail("list", tostring(err), 2) end
  return list.items
end

-- t:delete(api_version, resource, namespace, name [, opts]) -> true, or
-- false when it did not exist.
function Harness:delete(api_version, resource, namespace, name, opts)
  local res, err = kube.delete(api_version, resource, namespace, name, opts)
  if res then return true end
  if kube.is_not_found(err) then return false end
  fail("delete", tostring(err), 2)
end

local function describe_value(ok, v)
  if not ok then return "the last call raised: " .. tostring(v) end
  return "the last call returned " .. tostring(v)
end

-- t:eventually(fn [, timeout [, interval]]) -> fn's results, once its first
-- result is truthy: calls fn every interval seconds (default 0.05) until
-- then, for at most timeout seconds (default 10), and raises when time runs
-- out, with what the last call returned or raised. An error raised by fn
-- counts as "not yet".
function Harness:eventually(fn, timeout, interval)
  if type(fn) ~= "function" then fail("eventually", "expected a function, got " .. type(fn), 2) end
  timeout, interval = timeout or 10, interval or 0.05
  local deadline = kube.monotonic() + timeout
  while true do
    local r = pack(pcall(fn))
    if r[1] and r[2] then return unpack(r, 2, r.n) end
    if kube.monotonic() >= deadline then
      fail("eventually", format("condition not met within %gs (%s)", timeout,
                                describe_value(r[1], r[2])), 2)
    end
    kube.sleep(interval)
  end
end

return _M
