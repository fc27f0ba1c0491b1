-- kubelua.sim.util: small pieces the API simulator needs and that have no
-- better home: base64 (continue tokens), SHA-256 and its HMAC (from the
-- libcrypto the binary links), uids, timestamps, deep copies that
-- keep kubelua.array marks, DNS-1123 checks, label and field selectors, and
-- the 2-space indentation a real apiserver gives curl users.

local ffi = require "ffi"
local json = require "kubelua.json"

local byte, char, sub, find, format, gsub = string.byte, string.char, string.sub,
  string.find, string.format, string.gsub
local concat = table.concat
local floor, random = math.floor, math.random
local type, pairs, ipairs, setmetatable, getmetatable, tostring, tonumber =
  type, pairs, ipairs, setmetatable, getmetatable, tostring, tonumber
local null = json.null
local is_array = json.is_array

local _M = {}

-- SHA-256 ------------------------------------------------------------------

ffi.cdef [[
  typedef struct evp_md_st EVP_MD;
  const EVP_MD *EVP_sha256(void);
  int EVP_Digest(const void *data, size_t count, unsigned char *md,
                 unsigned int *size, const EVP_MD *type, void *impl);
  unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len,
                      const unsigned char *d, size_t n, unsigned char *md,
                      unsigned int *md_len);
]]

-- The 32 bytes of SHA-256 of s.
function _M.sha256(s)
  local md, n = ffi.new("unsigned char[32]"), ffi.new("unsigned int[1]")
  assert(ffi.C.EVP_Digest(s, #s, md, n, ffi.C.EVP_sha256(), nil) == 1, "EVP_Digest failed")
  return ffi.string(md, n[0])
end

-- The 32 bytes of HMAC-SHA-256 of text under key.
function _M.hmac_sha256(key, text)
  local md, n = ffi.new("unsigned char[32]"), ffi.new("unsigned int[1]")
  assert(ffi.C.HMAC(ffi.C.EVP_sha256(), key, #key, text, #text, md, n) ~= nil, "HMAC failed")
  return ffi.string(md, n[0])
end

-- base64 ------------------------------------------------------------------

local b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local b64_index = {}
for i = 1, 64 do b64_index[byte(b64, i)] = i - 1 end

function _M.b64encode(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local c1, c2 = floor(n / 262144) % 64, floor(n / 4096) % 64
    local c3, c4 = floor(n / 64) % 64, n % 64
    out[#out + 1] = sub(b64, c1 + 1, c1 + 1) .. sub(b64, c2 + 1, c2 + 1)
      .. (b and sub(b64, c3 + 1, c3 + 1) or "=") .. (c and sub(b64, c4 + 1, c4 + 1) or "=")
  end
  return concat(out)
end

-- Returns the decoded string, or nil for input that is not base64.
function _M.b64decode(s)
  s = gsub(s, "=+$", "")
  if #s % 4 == 1 then return nil end
  local out, bits, nbits = {}, 0, 0
  for i = 1, #s do
    local v = b64_index[byte(s, i)]
    if not v then return nil end
    bits = bits * 64 + v
    nbits = nbits + 6
    if nbits >= 8 then
      nbits = nbits - 8
      local p = 2 ^ nbits
      out[#out + 1] = char(floor(bits / p))
      bits = bits % p
    end
  end
  return concat(out)
end

-- Where Go's base64.StdEncoding stops reading s ("illegal base64 data at
-- input byte N", N from 0), or nil when s decodes: line breaks are skipped,
-- padding is required, bits after the last byte are ignored.
function _M.b64_error(s)
  local n, si = #s, 0 -- si: the offset of the next byte
  local function skip_breaks()
    while si < n and (byte(s, si + 1) == 10 or byte(s, si + 1) == 13) do si = si + 1 end
  end
  while true do
    local j = 0 -- characters of the current quantum
    while j < 4 do
      if si == n then
        if j == 0 then return nil end
        return si - j
      end
      local c = byte(s, si + 1)
      si = si + 1
      if b64_index[c] then
        j = j + 1
      elseif c ~= 10 and c ~= 13 then
        if c ~= 61 or j < 2 then return si - 1 end -- not base64, or "=" too soon
        if j == 2 then -- a second "=" must follow
          skip_breaks()
          if si == n then return n end
          if byte(s, si + 1) ~= 61 then return si - 1 end
          si = si + 1
        end
        skip_breaks()
        if si < n then return si end -- something after the padding
        return nil
      end
    end
  end
end

-- ids and time (math.random is seeded by the runtime) ---------------------

function _M.uid()
  local function hex(n)
    local t = {}
    for i = 1, n do t[i] = format("%x", random(0, 15)) end
    return concat(t)
  end
  return hex(8) .. "-" .. hex(4) .. "-4" .. hex(3) .. "-" .. format("%x", random(8, 11))
    .. hex(3) .. "-" .. hex(12)
end

local gen_chars = "bcdfghjklmnpqrstvwxz2456789"
-- The 5 random characters of generateName, from the apiserver's alphabet.
function _M.random_suffix()
  local t = {}
  for i = 1, 5 do
    local k = random(1, #gen_chars)
    t[i] = sub(gen_chars, k, k)
  end
  return concat(t)
end

-- metav1.Time: whole seconds, UTC, "Z".
function _M.timestamp(t)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", floor(t or os.time()))
end

-- tables ------------------------------------------------------------------

-- A deep copy; arrays keep their kubelua.array metatable.
local function copy(v)
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = copy(x) end
  local mt = getmetatable(v)
  if mt then setmetatable(t, mt) end
  return t
end
_M.copy = copy

-- Whether two decoded JSON values are equal.
local function equal(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  if is_array(a) ~= is_array(b) then return false end
  for k, x in pairs(a) do
    if not equal(x, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end
_M.equal = equal

function _M.array(t) return json.array(t or {}) end

-- names -------------------------------------------------------------------

local dns1123_msg = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
  .. "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
  .. "'example.com', regex used for validation is "
  .. "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"

-- The messages of a key that is not a valid ConfigMap or Secret key
-- (validation.IsConfigMapKey), in order; an empty list when it is one.
function _M.config_key_errors(key)
  local errs = {}
  if #key > 253 then errs[#errs + 1] = "must be no more than 253 characters" end
  if not key:match("^[-._a-zA-Z0-9]+$") then
    errs[#errs + 1] = "a valid config key must consist of alphanumeric characters, '-', '_' or "
      .. "'.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
      .. "'[-._a-zA-Z0-9]+')"
  end
  if key == "." then
    errs[#errs + 1] = "must not be '.'"
  elseif key == ".." then
    errs[#errs + 1] = "must not be '..'"
  elseif key:sub(1, 2) == ".." then
    errs[#errs + 1] = "must not start with '..'"
  end
  return errs
end

-- The keys of table t, sorted (for the maps whose errors the real server
-- reports in its random map order: one order here).
function _M.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- Go's JSON decoder's words for a syntax error in body, from the message
-- kubelua.json gave (err, "json: byte N: ...").
function _M.go_syntax_error(body, err)
  err = tostring(err)
  local at = tonumber(err:match("byte (%d+)")) or #body
  local c = sub(body, at + 1, at + 1)
  if find(err, "unexpected end of stream", 1, true) or c == "" then
    return "unexpected end of JSON input"
  elseif find(err, "trailing data", 1, true) then
    return format("invalid character '%s' after top-level value", c)
  elseif find(err, "expected ':'", 1, true) then
    return format("invalid character '%s' after object key", c)
  elseif find(err, "expected a string key", 1, true) then
    return format("invalid character '%s' looking for beginning of object key string", c)
  end
  return format("invalid character '%s' looking for beginning of value", c)
end

-- Go's JSON decoder's error for a value that does not fit a field
-- (UnmarshalTypeError): field as "Struct.path.to.field", typ as Go names it.
function _M.unmarshal_error(v, field, typ)
  local what = type(v)
  if what == "table" then
    what = json.is_array(v) and "array" or "object"
  elseif what == "boolean" then
    what = "bool"
  elseif what == "number" then
    what = "number " .. string.format("%.17g", v)
  end
  return string.format("json: cannot unmarshal %s into Go struct field %s of type %s", what, field,
    typ)
end

local go_escapes = { [7] = "\\a", [8] = "\\b", [9] = "\\t", [10] = "\\n", [11] = "\\v",
  [12] = "\\f", [13] = "\\r", [34] = '\\"', [92] = "\\\\" }

-- s as Go's %q writes it (strconv.Quote), for the values in messages.
function _M.go_quote(s)
  return '"' .. s:gsub('[%z\1-\31"\\\127]', function(c)
    local b = c:byte()
    return go_escapes[b] or string.format("\\x%02x", b)
  end) .. '"'
end

-- Returns nil when name is a DNS-1123 subdomain, else the reason.
function _M.check_subdomain(name)
  if #name > 253 then return "must be no more than 253 characters" end
  for label in (name .. "."):gmatch("([^.]*)%.") do
    if not find(label, "^[a-z0-9]$") and not find(label, "^[a-z0-9][-a-z0-9]*[a-z0-9]$") then
      return dns1123_msg
    end
  end
  return nil
end

local dns1035_msg = "a DNS-1035 label must consist of lower case alphanumeric characters or "
  .. "'-', start with an alphabetic character, and end with an alphanumeric character (e.g. "
  .. "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"

-- Returns nil when name is a DNS-1035 label (a Service's name), else the
-- reason.
function _M.check_dns1035(name)
  if #name > 63 then return "must be no more than 63 characters" end
  if not find(name, "^[a-z]$") and not find(name, "^[a-z][-a-z0-9]*[a-z0-9]$") then
    return dns1035_msg
  end
  return nil
end

-- selectors ---------------------------------------------------------------

local function trim(s) return (gsub(s, "^%s+", ""):gsub("%s+$", "")) end

-- Splits on commas outside parentheses.
local function split_terms(s)
  local terms, depth, start = {}, 0, 1
  for i = 1, #s do
    local c = sub(s, i, i)
    if c == "(" then depth = depth + 1
    elseif c == ")" then depth = depth - 1
    elseif c == "," and depth == 0 then
      terms[#terms + 1] = sub(s, start, i - 1)
      start = i + 1
    end
  end
  terms[#terms + 1] = sub(s, start)
  return terms
end

local label_key = "^[%w][%w._/-]*$"

local label_value_msg = "a valid label must be an empty string or consist of alphanumeric "
  .. "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
  .. "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
  .. "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"

-- nil when v is a valid label value, else the requirement's error.
local function check_label_value(key, v, i)
  if v == "" or (#v <= 63 and (find(v, "^%w$") or find(v, "^%w[%w._-]*%w$"))) then
    return nil
  end
  local why = #v > 63 and "must be no more than 63 characters" or label_value_msg
  return format('unable to parse requirement: values[%d][%s]: Invalid value: "%s": %s',
                i, key, v, why)
end

-- Parses a labelSelector into a list of requirements; nil, message when
-- it is malformed.
function _M.parse_label_selector(s)
  local reqs = {}
  if s == nil or trim(s) == "" then return reqs end
  for _, term in ipairs(split_terms(s)) do
    term = trim(term)
    local k, op, v
    local key, set = term:match("^([^%s!=<>()]+)%s+in%s+%((.*)%)$")
    if key then
      op = "in"
    else
      key, set = term:match("^([^%s!=<>()]+)%s+notin%s+%((.*)%)$")
      if key then op = "notin" end
    end
    if op then
      local values = {}
      for _, x in ipairs(split_terms(set)) do values[trim(x)] = true end
      k, v = key, values
    elseif term:match("^!") then
      k, op = trim(sub(term, 2)), "!"
    else
      local a, o, b = term:match("^([^!=<>]+)([!=]?=?)(.*)$")
      if not a or (o == "" and b ~= "") then
        a, o, b = term:match("^([^<>]+)([<>])(.*)$")
        -- gt and lt take a 64-bit integer (apimachinery's ParseInt), not
        -- every number Lua reads ("nan", "inf", "0x10", "1e3")
        local sign, digits = nil, nil
        if b then sign, digits = b:match("^%s*([+-]?)0*(%d+)%s*$") end
        local max = sign == "-" and "9223372036854775808" or "9223372036854775807"
        if not a or not digits or #digits > 19 or (#digits == 19 and digits > max) then
          return nil, format("unable to parse requirement: found '%s', expected: in, notin, "
            .. "=, ==, !=, gt, lt", term)
        end
        k, op, v = trim(a), o, tonumber(b)
      elseif o == "" then
        k, op = trim(a), "exists"
      else
        if o == "!" then return nil, "unable to parse requirement: " .. term end
        k, op, v = trim(a), (o == "!=" and "!=" or "="), trim(b)
      end
    end
    if not k or not find(k, label_key) then
      return nil, format("unable to parse requirement: invalid label key \"%s\"", tostring(k))
    end
    if op == "=" or op == "!=" then
      local err = check_label_value(k, v, 0)
      if err then return nil, err end
    elseif op == "in" or op == "notin" then
      local sorted = {}
      for x in pairs(v) do sorted[#sorted + 1] = x end
      table.sort(sorted)
      for i, x in ipairs(sorted) do
        local err = check_label_value(k, x, i - 1)
        if err then return nil, err end
      end
    end
    reqs[#reqs + 1] = { key = k, op = op, value = v }
  end
  return reqs
end

function _M.labels_match(reqs, labels)
  if #reqs == 0 then return true end
  if labels == nil or labels == null then labels = {} end
  for i = 1, #reqs do
    local r = reqs[i]
    local have = labels[r.key]
    local op = r.op
    if op == "=" then
      if have ~= r.value then return false end
    elseif op == "!=" then
      if have == r.value then return false end
    elseif op == "in" then
      if have == nil or not r.value[have] then return false end
    elseif op == "notin" then
      if have ~= nil and r.value[have] then return false end
    elseif op == "exists" then
      if have == nil then return false end
    elseif op == "!" then
      if have ~= nil then return false end
    elseif op == ">" or op == "<" then
      local n = tonumber(have)
      if not n then return false end
      if op == ">" and n <= r.value then return false end
      if op == "<" and n >= r.value then return false end
    end
  end
  return true
end

-- Parses a fieldSelector; fields outside `allowed` (a set of paths) are an
-- error, as on a real server.
function _M.parse_field_selector(s, allowed)
  local reqs = {}
  if s == nil or trim(s) == "" then return reqs end
  for _, term in ipairs(split_terms(s)) do
    term = trim(term)
    local f, op, v = term:match("^([^!=]+)(!=)(.*)$")
    if not f then f, op, v = term:match("^([^!=]+)(==?)(.*)$") end
    if not f then
      return nil, format("invalid selector: '%s'; can't understand '%s'", s, term)
    end
    f = trim(f)
    if not allowed[f] then return nil, "field label not supported: " .. f end
    v = gsub(v, "\\(.)", "%1")
    local path = {}
    for part in f:gmatch("[^.]+") do path[#path + 1] = part end
    reqs[#reqs + 1] = { path = path, op = op == "!=" and "!=" or "=", value = v }
  end
  return reqs
end

function _M.fields_match(reqs, obj)
  for i = 1, #reqs do
    local r = reqs[i]
    local v = obj
    for j = 1, #r.path do
      if type(v) ~= "table" then v = nil break end
      v = v[r.path[j]]
    end
    if v == nil or v == null then v = "" end
    v = tostring(v)
    if r.op == "=" then
      if v ~= r.value then return false end
    elseif v == r.value then
      return false
    end
  end
  return true
end

-- pretty printing ------------------------------------------------------------

-- Re-indents compact JSON as Go's json.Indent(prefix "", indent "  ") does,
-- plus a final newline.
function _M.indent(s)
  local out, n, depth = {}, 0, 0
  local i, len = 1, #s
  local function nl()
    n = n + 1
    out[n] = "\n" .. string.rep("  ", depth)
  end
  while i <= len do
    local c = byte(s, i)
    if c == 34 then -- a string: copy through its closing quote
      local j = i + 1
      while true do
        local q = find(s, '["\\]', j)
        if byte(s, q) == 92 then
          j = q + 2
        else
          j = q
          break
        end
      end
      n = n + 1
      out[n] = sub(s, i, j)
      i = j + 1
    elseif c == 123 or c == 91 then -- { [
      local close = c == 123 and 125 or 93
      if byte(s, i + 1) == close then
        n = n + 1
        out[n] = sub(s, i, i + 1)
        i = i + 2
      else
        n = n + 1
        out[n] = char(c)
        depth = depth + 1
        nl()
        i = i + 1
      end
    elseif c == 125 or c == 93 then
      depth = depth - 1
      nl()
      n = n + 1
      out[n] = char(c)
      i = i + 1
    elseif c == 44 then
      n = n + 1
      out[n] = ","
      nl()
      i = i + 1
    elseif c == 58 then
      n = n + 1
      out[n] = ": "
      i = i + 1
    else
      local j = find(s, '[,:{}%[%]"]', i) or len + 1
      n = n + 1
      out[n] = sub(s, i, j - 1)
      i = j
    end
  end
  n = n + 1
  out[n] = "\n"
  return concat(out)
end

return _M
