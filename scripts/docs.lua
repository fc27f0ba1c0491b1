-- scripts/docs.lua: the API reference (docs/reference.md), made from the
-- LuaLS annotations that the language server reads too, and the check that
-- keeps it complete. Run by scripts/docs inside a built kubelua, so that
-- what is public is what the runtime hands to scripts, found by walking
-- it rather than listed by hand:
-- - the functions of the module tables a script requires (ROOTS below) and
--   of their public sub-tables (kube.log, kube.client, ...), by path;
-- - the methods of the objects those functions give: every type the C
--   bindings register (a metatable named in the registry) and every Lua
--   metatable (a table with __index) reachable from a public function
--   through upvalues;
-- - the options that kube.controller{} and kube.informer check
--   (strict.keys(opts, KEYS, ...) in the sources: each key of KEYS).
-- A Lua function's entry is the block of "---" lines directly above its
-- definition (the line the bytecode says it starts on); a C function's is
-- its declaration in types/kubelua-c.lua. An entry marked ---@package is
-- internal: it stays out of the reference.
--
-- The command line comes from `kubelua --help` and each command's --help.
--
--   scripts/docs [--root DIR] [--kubelua PATH]          writes docs/
--   scripts/docs --check [--root DIR] [--kubelua PATH]  fails naming each
--       public function, method or option without an entry, and when
--       docs/reference.md differs from what the sources give

local ROOTS = {
  { "kube", "kubelua" }, { "testing", "kubelua.testing" }, { "http", "kubelua.http" },
  { "httpd", "kubelua.httpd" }, { "process", "kubelua.process" },
}
local STUB_DIR = "types"
local OUT = "docs/reference.md"

-- The process ends with kube.stop(status), the runtime's graceful stop,
-- so that a sanitized build sees every resource released.
local stop = require("kubelua").stop

local opts = { root = ".", kubelua = "build/kubelua" }
local bad_argument
do
  local args, i = arg or {}, 1
  while args[i] do
    local a = args[i]
    if a == "--check" then
      opts.check = true
    elseif a == "--root" or a == "--kubelua" then
      opts[a:sub(3)] = args[i + 1]
      i = i + 1
    else
      bad_argument = a
      break
    end
    i = i + 1
  end
end
if bad_argument then
  io.stderr:write("scripts/docs: unknown argument ", bad_argument, "\n")
  stop(2)
  return
end

local function read(path)
  local f, err = io.open(opts.root .. "/" .. path)
  if not f then return nil, err end
  local text = f:read("*a")
  f:close()
  return text
end

local files = {} -- path -> list of lines
local function lines_of(path)
  local l = files[path]
  if l then return l end
  local text = read(path)
  l = {}
  if text then
    for line in (text:gsub("\n?$", "\n")):gmatch("([^\n]*)\n") do l[#l + 1] = line end
  end
  files[path] = l
  return l
end

-- The .lua files under the root's dirs, sorted.
local function lua_files(dirs)
  local list = {}
  local p = io.popen("cd '" .. opts.root .. "' && find " .. dirs .. " -name '*.lua' | sort")
  for path in p:lines() do list[#list + 1] = path end
  p:close()
  return list
end

-- Annotations ---------------------------------------------------------------

-- The "---" block that ends on line n - 1 of lines, as its lines without
-- the dashes, or nil.
local function block_above(lines, n)
  local first = n
  while first > 1 and lines[first - 1]:find("^%s*%-%-%-") do first = first - 1 end
  if first == n then return nil end
  local out = {}
  for i = first, n - 1 do out[#out + 1] = (lines[i]:gsub("^%s*%-%-%-", "")) end
  return out
end

-- Splits "TYPE description" where TYPE may hold spaces inside brackets
-- ("fun(ev: kubelua.event)", "{tz?: string}", "table<string, boolean>")
-- and a function's return after them ("fun(k: string): any").
local function split_type(text)
  local depth, i = 0, 1
  while i <= #text do
    local c = text:sub(i, i)
    if c == "(" or c == "{" or c == "<" then
      depth = depth + 1
    elseif c == ")" or c == "}" or c == ">" then
      depth = depth - 1
    elseif c:find("%s") and depth == 0 then
      if text:sub(i - 1, i - 1) ~= ":" then break end
    end
    i = i + 1
  end
  return text:sub(1, i - 1), (text:sub(i):gsub("^%s+", ""))
end

-- A block's parts: desc (lines), params, returns, fields, usage (lines),
-- class, package (true when ---@package or ---@private).
local function parse_block(b)
  local e = { desc = {}, params = {}, returns = {}, fields = {}, usage = {} }
  local in_usage = false
  for _, line in ipairs(b) do
    local tag, rest = line:match("^@(%w+)%s*(.*)$")
    if tag == "param" then
      local name, more = rest:match("^(%S+)%s*(.*)$")
      local ty, d = split_type(more)
      e.params[#e.params + 1] = { name = name, type = ty, desc = d }
      in_usage = false
    elseif tag == "return" then
      local ty, d = split_type(rest)
      e.returns[#e.returns + 1] = { type = ty, desc = d }
      in_usage = false
    elseif tag == "field" then
      local name, more = rest:match("^(%S+)%s*(.*)$")
      local ty, d = split_type(more)
      e.fields[#e.fields + 1] = { name = name, type = ty, desc = d }
      in_usage = false
    elseif tag == "class" then
      e.class = rest:match("^(%S+)")
      in_usage = false
    elseif tag == "usage" then
      if rest ~= "" then e.usage[#e.usage + 1] = rest end
      in_usage = true
    elseif tag == "package" or tag == "private" then
      e.package = true
    elseif tag == "meta" or tag == "type" or tag == "overload" or tag == "nodiscard" then
      in_usage = false
    elseif in_usage then
      e.usage[#e.usage + 1] = line:gsub("^ ", "")
    else
      e.desc[#e.desc + 1] = line:gsub("^ ", "")
    end
  end
  return e
end

-- The stubs of the C bindings (types/kubelua/*.lua, one ---@meta module a
-- file, as the language server finds them): classes (---@class NAME above
-- `local VAR = {}`, or the file's ---@meta NAME) and their functions, by
-- NAME.f or NAME:m. class_file: NAME -> { file, var }.
local class_file = {}
local function parse_stub()
  local entries = {}
  for _, path in ipairs(lua_files(STUB_DIR)) do
    local lines = lines_of(path)
    local var_class, module = {}, nil
    for n, line in ipairs(lines) do
      local meta = line:match("^%-%-%-@meta%s+(%S+)")
      if meta then module = meta end
      local var = line:match("^local%s+([%w_]+)%s*=%s*{")
      if var then
        local b = block_above(lines, n)
        local e = b and parse_block(b)
        var_class[var] = e and e.class or module
        class_file[var_class[var]] = { path, var }
      end
      local v, sep, f = line:match("^function%s+([%w_]+)([.:])([%w_]+)%s*%(")
      if v and var_class[v] then
        local b = block_above(lines, n)
        if b then
          local e = parse_block(b)
          e.where = path .. ":" .. n
          entries[var_class[v] .. sep .. f] = e
        end
      end
    end
  end
  return entries
end

-- The Lua library is read from the tree, not the copy built into the
-- binary, so that the reference follows the sources without a rebuild:
-- every module of lua/ is loaded again from its file (the C ones stay).
do
  for _, path in ipairs(lua_files("lua")) do
    local name = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
    package.loaded[name] = nil
    package.preload[name] = function(...)
      local text = assert(read(path))
      return assert(loadstring(text, "@" .. path))(...)
    end
  end
end

-- What is public -------------------------------------------------------------

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    if type(k) == "string" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  return keys
end

-- funcs: fn -> { names = {public names}, aliases = {module.key names} }
local funcs, order = {}, {}
local function note(fn, name, public)
  local f = funcs[fn]
  if not f then
    f = { names = {}, aliases = {} }
    funcs[fn] = f
    order[#order + 1] = fn
  end
  local list = public and f.names or f.aliases
  list[#list + 1] = name
end

-- The module tables: functions by path, public sub-tables walked.
local public_tables = {}
local function walk_module(t, path)
  if public_tables[t] then return end
  public_tables[t] = path
  for _, k in ipairs(sorted_keys(t)) do
    local v = t[k]
    if not k:find("^_") then
      if type(v) == "function" then
        note(v, path .. "." .. k, true)
      elseif type(v) == "table" and getmetatable(v) == nil and rawget(v, "__index") == nil then
        walk_module(v, path .. "." .. k)
      end
    end
  end
end
local modules = {}
for _, r in ipairs(ROOTS) do
  modules[r[1]] = require(r[2])
  walk_module(modules[r[1]], r[1])
end

-- The C types: the registry's named metatables with methods.
local classes = {} -- list of { name, methods = { name -> fn }, c = bool }
local class_of = {} -- a metatable or its __index table -> class
local function methods_of(mt)
  local idx = rawget(mt, "__index")
  local src = type(idx) == "table" and idx or mt
  local m, any = {}, false
  for _, k in ipairs(sorted_keys(src)) do
    if type(src[k]) == "function" and not k:find("^__") then
      m[k] = src[k]
      any = true
    end
  end
  return any and m or nil, src
end
local registry = debug.getregistry()
for _, name in ipairs(sorted_keys(registry)) do
  local mt = registry[name]
  if type(mt) == "table" and name:find("^kubelua%.") and rawget(mt, "__index") ~= nil then
    local m, src = methods_of(mt)
    if m then
      local c = { name = name, methods = m, c = true }
      classes[#classes + 1] = c
      class_of[mt], class_of[src] = c, c
    end
  end
end

-- The Lua types: metatables reachable from the public functions.
local seen = {}
local function walk(v, via)
  local tv = type(v)
  if (tv ~= "table" and tv ~= "function") or seen[v] then return end
  seen[v] = true
  if type(v) == "table" then
    if rawget(v, "__index") ~= nil and not class_of[v] then
      local m, src = methods_of(v)
      if m and not class_of[src] then
        local c = { var = via, methods = m }
        classes[#classes + 1] = c
        class_of[v], class_of[src] = c, c
      end
    end
    for _, k in ipairs(sorted_keys(v)) do walk(v[k], k) end
  elseif type(v) == "function" then
    local i = 1
    while true do
      local n, u = debug.getupvalue(v, i)
      if not n then break end
      walk(u, n)
      i = i + 1
    end
  end
end
for i = 1, #order do walk(order[i]) end

-- The C functions' other names (kubelua.core.now for kube.now), which the
-- stub declares them by.
for _, name in ipairs(sorted_keys(package.loaded)) do
  local m = package.loaded[name]
  if type(m) == "table" and name:find("^kubelua") then
    for _, k in ipairs(sorted_keys(m)) do
      if funcs[m[k]] then note(m[k], name .. "." .. k, false) end
    end
  end
end

-- Entries --------------------------------------------------------------------

local problems = {}
local function problem(msg) problems[#problems + 1] = msg end

local stub = parse_stub()

-- The file a Lua function's source names, relative to the root.
local function source_path(info)
  return (info.source:gsub("^@", ""))
end

-- A Lua function's entry: the block above its line.
local function lua_entry(fn, label)
  local info = debug.getinfo(fn, "S")
  local path = source_path(info)
  local lines = lines_of(path)
  local line = lines[info.linedefined]
  local where = path .. ":" .. info.linedefined
  if not line or not line:find("function") then
    problem(label .. ": " .. where .. " is not the line of its definition")
    return nil, where
  end
  local b = block_above(lines, info.linedefined)
  if not b then return nil, where end
  local e = parse_block(b)
  e.where = where
  return e, where
end

local ADD_LUA = 'add "---" lines directly above its definition: a description, '
  .. '"---@param NAME TYPE what", "---@return TYPE what" and "---@usage" with an example '
  .. '(or "---@package" if scripts are not meant to call it)'

-- Every entry, by section: sections[title] = list of { names, entry }.
-- One definition (a file's line, a stub's declaration) is one entry, with
-- every public name it has.
local sections, section_order, by_where = {}, {}, {}
local function add(title, names, e)
  local it = by_where[e.where]
  if it then
    for _, n in ipairs(names) do it.names[#it.names + 1] = n end
    return
  end
  if not sections[title] then
    sections[title] = {}
    section_order[#section_order + 1] = title
  end
  it = { names = { unpack(names) }, e = e }
  by_where[e.where] = it
  table.insert(sections[title], it)
end

-- The section of a module function: its shortest name's table (kube.get,
-- not kube.client.get).
local function section_of(names)
  local best = names[1]
  for _, n in ipairs(names) do
    if select(2, n:gsub("%.", "")) < select(2, best:gsub("%.", "")) then best = n end
  end
  return best:match("^(.*)%.[^.]*$")
end
local public_count, documented = 0, 0

-- An entry needs words and an example.
local function complete(label, e, where)
  if e.package then return true end
  local missing = {}
  if not table.concat(e.desc):find("%S") then missing[#missing + 1] = "a description" end
  if #e.usage == 0 then missing[#missing + 1] = 'an example ("---@usage")' end
  if #missing > 0 then
    problem(label .. " (" .. where .. "): its entry lacks " .. table.concat(missing, " and "))
    return false
  end
  return true
end

local function stub_entry(names, label)
  for _, n in ipairs(names) do
    if stub[n] then return stub[n], n end
  end
  -- where to declare it: the stub of its class or module
  local decl = names[#names]
  for _, n in ipairs(names) do
    if n:find("^kubelua[.:]") then decl = n end
  end
  local owner, sep, f = decl:match("^(.*)([.:])([%w_]+)$")
  local cf = class_file[owner]
  local file = cf and cf[1] or STUB_DIR .. "/" .. owner:gsub("%.", "/") .. ".lua"
  local var = cf and cf[2] or owner:match("[^.]*$")
  problem(label .. " (C) has no entry: declare it in " .. file .. " as `function " .. var .. sep
    .. f .. "(...) end`" .. (cf and "" or ' under "---@meta ' .. owner .. '" and `local '
    .. var .. " = {}`") .. ', with "---" lines above it: a description, "---@param NAME TYPE '
    .. 'what", "---@return TYPE what" and "---@usage" with an example')
  return nil
end

-- Module functions, entries keyed so that one definition is one entry.
-- Counts one public function and files its entry: a C function's from
-- the stubs (declared under any of stub_names), a Lua one's from the
-- lines above its definition.
local function document(fn, label, stub_names, section, names)
  public_count = public_count + 1
  local e, where
  if debug.getinfo(fn, "S").what == "C" then
    e, where = stub_entry(stub_names, label)
  else
    e, where = lua_entry(fn, label)
    if not e and where then problem(label .. " (" .. where .. ") has no entry: " .. ADD_LUA) end
  end
  if e and complete(label, e, where) then
    documented = documented + 1
    if not e.package then add(section, names, e) end
  end
end

for _, fn in ipairs(order) do
  local f = funcs[fn]
  if #f.names > 0 then
    local all = {}
    for _, n in ipairs(f.names) do all[#all + 1] = n end
    for _, n in ipairs(f.aliases) do all[#all + 1] = n end
    document(fn, f.names[1], all, section_of(f.names), f.names)
  end
end

-- Methods: a Lua class is named by the ---@class above the table's
-- definition (`local Client = {}`) in the file of its methods.
local class_entries = {}
for _, c in ipairs(classes) do
  local name = c.name
  for _, m in ipairs(sorted_keys(c.methods)) do
    local fn = c.methods[m]
    if not name and debug.getinfo(fn, "S").what == "Lua" then
      local info = debug.getinfo(fn, "S")
      local path = source_path(info)
      for n, line in ipairs(lines_of(path)) do
        if c.var and line:find("^local%s+" .. c.var .. "%s*=%s*{") then
          local b = block_above(lines_of(path), n)
          local ce = b and parse_block(b)
          if ce and ce.class then
            name = ce.class
            class_entries[name] = ce
          end
        end
      end
      if not name then
        name = c.var or "?"
        problem("the type of " .. name .. ":" .. m .. " (" .. path .. ") has no name: add "
          .. '"---@class NAME" directly above `local ' .. tostring(c.var) .. " = {}`")
      end
      c.name = name
    end
    local label = name .. ":" .. m
    document(fn, label, { label }, name, { label })
  end
end

-- Options: each key of a table that strict.keys checks has a ---@field in
-- the ---@class above the table (or, for a table written in the call, in
-- the entry of the function that makes the call).
local option_classes = {}
for _, path in ipairs(lua_files("lua")) do
  local lines = lines_of(path)
  for n, line in ipairs(lines) do
    local arg2, label = line:match('strict%.keys%([^,]+,%s*(.-),%s*"([^"]*)"')
    if arg2 then
      label = label:gsub("%s+$", "")
      local keys, doc, where = {}, nil, path .. ":" .. n
      if arg2:find("^{") then
        for k in arg2:gmatch("([%w_]+)%s*=") do keys[#keys + 1] = k end
        for up = n, 1, -1 do
          if lines[up]:find("^function") or lines[up]:find("^local function") then
            local b = block_above(lines, up)
            doc = b and table.concat(b, "\n") or ""
            where = path .. ":" .. up
            break
          end
        end
      else
        for d, l in ipairs(lines) do
          if l:find("^local%s+" .. arg2 .. "%s*=%s*{") then
            local text = {}
            for j = d, #lines do
              text[#text + 1] = lines[j]
              if lines[j]:find("}") then break end
            end
            for k in table.concat(text, " "):match("{(.*)}"):gmatch("([%w_]+)%s*=") do
              keys[#keys + 1] = k
            end
            local b = block_above(lines, d)
            local ce = b and parse_block(b)
            doc = ""
            if ce then
              for _, fl in ipairs(ce.fields) do
                doc = doc .. "\n@field " .. fl.name:gsub("%?$", "")
              end
              if ce.class and not option_classes[ce.class] then
                option_classes[ce.class] = true
                class_entries[ce.class] = ce
                ce.label = label
              end
            end
            where = path .. ":" .. d
          end
        end
      end
      for _, k in ipairs(keys) do
        public_count = public_count + 1
        local pat = arg2:find("^{") and "[%s{,]" .. k .. "%??[%s:]" or "\n@field " .. k .. "\n"
        if doc and (doc .. "\n"):find(pat) then
          documented = documented + 1
        else
          problem("option " .. k .. " of " .. label .. " (" .. where .. ") has no entry: add "
            .. (arg2:find("^{") and '"' .. k .. '" to the "---@param opts" type of its function'
                or '"---@field ' .. k .. ' TYPE what" to the "---@class" directly above '
                .. arg2))
        end
      end
    end
  end
end

-- Rendering --------------------------------------------------------------------

local out = {}
local function w(...)
  for i = 1, select("#", ...) do out[#out + 1] = select(i, ...) end
end

local function signature(name, e)
  local ps = {}
  for _, p in ipairs(e.params) do ps[#ps + 1] = p.name end
  return name .. "(" .. table.concat(ps, ", ") .. ")"
end

local function anchor(s) return (s:lower():gsub("[^%w_%- ]", ""):gsub(" ", "-")) end

-- A type in markdown: each alternative that the reference describes (a
-- section or a type of "Types and options") links to it.
local function type_md(t)
  local parts = {}
  for alt in t:gmatch("[^|]+") do
    local base = alt:gsub("%[%]$", ""):gsub("%?$", "")
    if sections[base] or (class_entries[base] and #class_entries[base].fields > 0) then
      parts[#parts + 1] = "[`" .. alt .. "`](#" .. anchor(base) .. ")"
    else
      parts[#parts + 1] = "`" .. alt .. "`"
    end
  end
  return table.concat(parts, " or ")
end

local function render_entry(names, e)
  -- one heading per distinct function name, under its shortest path; the
  -- longer paths to the same function follow as "Also"
  local by_leaf, leaves, also = {}, {}, {}
  for _, n in ipairs(names) do
    local leaf = n:match("[^.:]*$")
    local cur = by_leaf[leaf]
    if not cur then
      leaves[#leaves + 1] = leaf
      by_leaf[leaf] = n
    elseif #n < #cur then
      also[#also + 1] = cur
      by_leaf[leaf] = n
    else
      also[#also + 1] = n
    end
  end
  table.sort(also)
  for _, leaf in ipairs(leaves) do w("### `", signature(by_leaf[leaf], e), "`\n") end
  if #also > 0 then w("\nAlso as `", table.concat(also, "`, `"), "`.\n") end
  w("\n", table.concat(e.desc, "\n"):gsub("^%s+", ""):gsub("%s+$", ""), "\n\n")
  if #e.params > 0 then
    for _, p in ipairs(e.params) do
      w("- `", p.name, "` (", type_md(p.type), ")", p.desc ~= "" and ": " .. p.desc or "", "\n")
    end
    w("\n")
  end
  for _, r in ipairs(e.returns) do
    w("Returns ", type_md(r.type), r.desc ~= "" and ": " .. r.desc or "", "\n\n")
  end
  if #e.usage > 0 then w("```lua\n", table.concat(e.usage, "\n"), "\n```\n\n") end
end

local function render_class(name, ce)
  w("### ", name, "\n\n")
  local d = table.concat(ce.desc, "\n"):gsub("^%s+", ""):gsub("%s+$", "")
  if d ~= "" then w(d, "\n\n") end
  if ce.label then w("Checked as ", ce.label, ": another key raises, naming the nearest.\n\n") end
  for _, fl in ipairs(ce.fields) do
    w("- `", fl.name, "` (", type_md(fl.type), ")", fl.desc ~= "" and ": " .. fl.desc or "", "\n")
  end
  w("\n")
  if #ce.usage > 0 then w("```lua\n", table.concat(ce.usage, "\n"), "\n```\n\n") end
end

-- The ---@class blocks with fields in the Lua sources that name no
-- method table: options, ctx, req, the controller.
do
  for _, path in ipairs(lua_files("lua " .. STUB_DIR)) do
    local lines = lines_of(path)
    for n = 1, #lines + 1 do
      local here = lines[n] or ""
      if not here:find("^%s*%-%-%-") and (lines[n - 1] or ""):find("^%s*%-%-%-") then
        local ce = parse_block(block_above(lines, n))
        if ce.class and not class_entries[ce.class] then class_entries[ce.class] = ce end
      end
    end
  end
end

w("# kubelua API reference\n\n",
  "Generated by `scripts/docs` from the LuaLS annotations in `lua/kubelua/*.lua` and `",
  STUB_DIR, "/` (stubs of the C bindings); do not edit.\nThe README is the tour; this is ",
  "every public function, method and option, each with an example.\nPoint the Lua language ",
  "server at `lua/` and `types/` and the same annotations complete and check scripts.\n\n")
w(string.format("Coverage: %d entries for %d public functions, methods and options.\n\n",
  documented, public_count))
w("## Contents\n\n")
for _, title in ipairs(section_order) do
  w("- [", title, "](#", anchor(title), ")\n")
end
w("- [Types and options](#types-and-options)\n- [Command line](#command-line)\n\n")

for _, title in ipairs(section_order) do
  w("## ", title, "\n\n")
  local ce = class_entries[title]
  if ce then
    local d = table.concat(ce.desc, "\n"):gsub("^%s+", ""):gsub("%s+$", "")
    if d ~= "" then w(d, "\n\n") end
    for _, fl in ipairs(ce.fields) do
      w("- `", fl.name, "` (", type_md(fl.type), ")", fl.desc ~= "" and ": " .. fl.desc or "", "\n")
    end
    if #ce.fields > 0 then w("\n") end
  end
  local list = sections[title]
  for _, it in ipairs(list) do table.sort(it.names) end
  table.sort(list, function(a, b) return a.names[1] < b.names[1] end)
  for _, it in ipairs(list) do render_entry(it.names, it.e) end
end

w("## Types and options\n\n")
for _, name in ipairs(sorted_keys(class_entries)) do
  if not sections[name] and #class_entries[name].fields > 0 then
    render_class(name, class_entries[name])
  end
end

-- The output of a kubelua command line.
local function output(args)
  local p = io.popen(opts.kubelua .. " " .. args .. " 2>&1")
  local text = p:read("*a")
  p:close()
  return (text:gsub("%s+$", ""))
end

-- Each command that `kubelua --help` lists, with its own --help.
w("## Command line\n\n")
for cmd in output("--help"):gmatch("kubelua (%l+)") do
  w("### kubelua ", cmd, "\n\n```\n", output(cmd .. " --help"), "\n```\n\n")
end

local doc = table.concat(out):gsub("\n\n+$", "\n")

if opts.check then
  if read(OUT) ~= doc then
    problem(OUT .. " is stale: run scripts/docs and commit " .. OUT)
  end
  for _, p in ipairs(problems) do io.stderr:write("scripts/docs: ", p, "\n") end
  io.stderr:write(string.format("scripts/docs: %d of %d public functions, methods and options "
    .. "have an entry\n", documented, public_count))
  stop(#problems == 0 and 0 or 1)
  return
end
for _, p in ipairs(problems) do io.stderr:write("scripts/docs: ", p, "\n") end
os.execute("mkdir -p '" .. opts.root .. "/docs'")
local f = assert(io.open(opts.root .. "/" .. OUT, "w"))
f:write(doc)
f:close()
io.stderr:write(string.format("scripts/docs: wrote %s (%d of %d entries)\n", OUT, documented,
  public_count))
stop(#problems == 0 and 0 or 1)
