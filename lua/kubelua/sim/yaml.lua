-- kubelua.sim.yaml: the YAML that Kubernetes manifests use, read into the
-- same values kubelua.json gives (arrays marked, null as json.null), for
-- server-side apply bodies (application/apply-patch+yaml) and `--load`.
--
-- It reads block mappings and sequences by indentation, plain, single- and
-- double-quoted scalars, comments, "---" between documents, literal (|)
-- and folded (>) block scalars, and flow collections written as JSON. It
-- is not a full YAML 1.2 parser (no anchors, tags or multi-line plain
-- scalars); anything else is an error with a line number, never a guess.

local json = require "kubelua.json"

local tonumber, type, format = tonumber, type, string.format
local find, sub, match, gsub = string.find, string.sub, string.match, string.gsub
local concat = table.concat
local null = json.null

local _M = {}

local function scalar(s, lineno)
  if s == "" or s == "~" or s == "null" or s == "Null" or s == "NULL" then return null end
  if s == "true" or s == "True" or s == "TRUE" then return true end
  if s == "false" or s == "False" or s == "FALSE" then return false end
  local c = sub(s, 1, 1)
  if c == '"' then
    local v = json.decode(s)
    if type(v) ~= "string" then error(format("line %d: bad double-quoted string", lineno), 0) end
    return v
  end
  if c == "'" then
    if sub(s, -1) ~= "'" or #s < 2 then
      error(format("line %d: bad single-quoted string", lineno), 0)
    end
    return (gsub(sub(s, 2, -2), "''", "'"))
  end
  if c == "[" or c == "{" then
    local v, err = json.decode(s)
    if v == nil then
      error(format("line %d: flow collections must be JSON here: %s", lineno, err), 0)
    end
    return v
  end
  if find(s, "^[-+]?%d+$") then
    local n = tonumber(s)
    if n and n < 2 ^ 53 and n > -2 ^ 53 then return n end
  end
  if find(s, "^[-+]?%d*%.%d+$") or find(s, "^[-+]?%d+%.?%d*[eE][-+]?%d+$") then
    return tonumber(s)
  end
  if c == "&" or c == "*" or c == "!" or c == "%" or c == "@" or c == "`" then
    error(format("line %d: unsupported YAML: %s", lineno, s), 0)
  end
  return s
end

-- Strips a comment that starts with " #" outside quotes.
local function strip_comment(s)
  local q
  for i = 1, #s do
    local c = sub(s, i, i)
    if q then
      if c == q then q = nil end
    elseif c == '"' or c == "'" then
      if i == 1 or find(sub(s, i - 1, i - 1), "[%s:%[{,]") then q = c end
    elseif c == "#" and (i == 1 or find(sub(s, i - 1, i - 1), "%s")) then
      return (gsub(sub(s, 1, i - 1), "%s+$", ""))
    end
  end
  return (gsub(s, "%s+$", ""))
end

-- Parses the lines of one document. lines: { {indent, text, lineno, raw} }
local function parse_doc(lines)
  local pos = 1

  local parse_block

  local function skip_blank()
    while lines[pos] and lines[pos].text == "" do pos = pos + 1 end
  end

  -- A literal or folded block scalar after "key: |" or "- |".
  local function block_scalar(style, parent_indent)
    local out, indent = {}, nil
    while pos <= #lines do
      local l = lines[pos]
      if l.text ~= "" and l.indent <= parent_indent then break end
      if l.text ~= "" and not indent then indent = l.indent end
      out[#out + 1] = l.text == "" and "" or sub(l.raw, (indent or 0) + 1)
      pos = pos + 1
    end
    while #out > 0 and out[#out] == "" do out[#out] = nil end
    local chomp = style:sub(2, 2)
    local text = style:sub(1, 1) == ">" and (gsub(concat(out, "\n"), "([^\n])\n([^\n])", "%1 %2"))
      or concat(out, "\n")
    if chomp ~= "-" then text = text .. "\n" end
    return text
  end

  local function value_after(rest, indent, lineno)
    if rest == "" then
      skip_blank()
      local nxt = lines[pos]
      if nxt and (nxt.indent > indent or (nxt.indent == indent and find(nxt.text, "^%- ")
          or nxt and nxt.indent == indent and nxt.text == "-")) then
        return parse_block(nxt.indent)
      end
      return null
    end
    if find(rest, "^[|>][-+]?$") then return block_scalar(rest, indent) end
    return scalar(rest, lineno)
  end

  parse_block = function(indent)
    skip_blank()
    local first = lines[pos]
    if find(first.text, "^%-$") or find(first.text, "^%- ") then
      local arr = json.array {}
      while pos <= #lines do
        skip_blank()
        local l = lines[pos]
        if not l then break end
        if l.indent ~= indent or not (find(l.text, "^%-$") or find(l.text, "^%- ")) then break end
        pos = pos + 1
        local rest = match(l.text, "^%-%s*(.*)$")
        if rest ~= "" and (find(rest, "^[^\"'%[{][^:]*:%s") or find(rest, "^[^\"'%[{][^:]*:$")) then
          -- "- key: value" opens a mapping indented at the key
          local sub_indent = indent + (#l.text - #rest)
          table.insert(lines, pos, { indent = sub_indent, text = rest, lineno = l.lineno,
            raw = string.rep(" ", sub_indent) .. rest })
          arr[#arr + 1] = parse_block(sub_indent)
        else
          arr[#arr + 1] = value_after(rest, indent, l.lineno)
        end
      end
      return arr
    end
    local obj = {}
    while pos <= #lines do
      skip_blank()
      local l = lines[pos]
      if not l or l.indent < indent then break end
      if l.indent > indent then error(format("line %d: bad indentation", l.lineno), 0) end
      local key, rest
      if find(l.text, '^"') then
        local q = match(l.text, '^("[^"\\]*")')
        key, rest = json.decode(q or '""'), match(sub(l.text, #(q or "") + 1), "^:%s*(.*)$")
      elseif find(l.text, "^'") then
        local q = match(l.text, "^'([^']*)'")
        key, rest = q, match(sub(l.text, #(q or "") + 3), "^:%s*(.*)$")
      else
        key, rest = match(l.text, "^([^:]-)%s*:%s+(.*)$")
        if not key then key = match(l.text, "^([^:]-)%s*:$") rest = "" end
      end
      if not key or rest == nil then
        if find(l.text, "^%- ") or l.text == "-" then break end
        error(format("line %d: expected \"key: value\", got %q", l.lineno, l.text), 0)
      end
      pos = pos + 1
      obj[key] = value_after(rest, indent, l.lineno)
    end
    return obj
  end

  skip_blank()
  if pos > #lines then return nil end
  local v = parse_block(lines[pos].indent)
  skip_blank()
  if pos <= #lines then
    error(format("line %d: unexpected %q", lines[pos].lineno, lines[pos].text), 0)
  end
  return v
end

-- decode_all(text) -> { documents } | nil, "yaml: line N: reason"
function _M.decode_all(text)
  local docs, lines = {}, {}
  local lineno = 0
  local ok, err = pcall(function()
    for raw in (text .. "\n"):gmatch("([^\n]*)\n") do
      lineno = lineno + 1
      raw = gsub(raw, "\r$", "")
      if find(raw, "\t") and find(raw, "^%s*\t") then
        error(format("line %d: tabs are not allowed for indentation", lineno), 0)
      end
      if find(raw, "^%-%-%-") then
        local d = parse_doc(lines)
        if d ~= nil then docs[#docs + 1] = d end
        lines = {}
      elseif not find(raw, "^%.%.%.") and not find(raw, "^%%") then
        local text_ = strip_comment(raw)
        local indent = #match(raw, "^ *")
        local t = sub(text_, indent + 1)
        if t ~= "" then
          lines[#lines + 1] = { indent = indent, text = t, lineno = lineno, raw = raw }
        elseif #lines > 0 then
          lines[#lines + 1] = { indent = indent, text = "", lineno = lineno, raw = raw }
        end
      end
    end
    local d = parse_doc(lines)
    if d ~= nil then docs[#docs + 1] = d end
  end)
  if not ok then return nil, "yaml: " .. tostring(err) end
  return docs
end

-- decode(text) -> value | nil, message: exactly one document.
function _M.decode(text)
  local docs, err = _M.decode_all(text)
  if not docs then return nil, err end
  if #docs ~= 1 then return nil, format("yaml: expected one document, found %d", #docs) end
  return docs[1]
end

return _M
