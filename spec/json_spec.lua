-- kubelua.json: exact decode and encode (arrays, null, integers, escapes),
-- exact error messages, and the round trip of every real apiserver fixture.
local json = require "kubelua.json"
local httpd = require "kubelua.httpd"
local support = require "spec.support"
local raises = support.raises

local FIXTURES = "spec/fixtures/json/"

local read = support.read

-- Deep comparison that also checks which tables are arrays.
local function same_json(a, b, path)
  path = path or "(root)"
  if type(a) ~= type(b) then
    return false, path .. ": " .. type(a) .. " vs " .. type(b)
  end
  if type(a) ~= "table" then
    if a == b or (a ~= a and b ~= b) then return true end
    return false, path .. ": " .. tostring(a) .. " vs " .. tostring(b)
  end
  if json.is_array(a) ~= json.is_array(b) then
    return false, path .. ": array vs object"
  end
  for k, v in pairs(a) do
    local ok, err = same_json(v, b[k], path .. "." .. tostring(k))
    if not ok then return false, err end
  end
  for k in pairs(b) do
    if a[k] == nil then return false, path .. "." .. tostring(k) .. " missing" end
  end
  return true
end

describe("kubelua.json", function()
  describe("decode", function()
    it("returns objects as tables and arrays with the array metatable", function()
      local v = assert(json.decode('{"a":[1,2,{"b":[]}],"c":{},"d":[]}'))
      assert.same({ a = { 1, 2, { b = {} } }, c = {}, d = {} }, v)
      assert.is_true(json.is_array(v.a))
      assert.is_true(json.is_array(v.a[3].b))
      assert.is_true(json.is_array(v.d))
      assert.is_false(json.is_array(v.c))
      assert.is_false(json.is_array(v))
      assert.equal(debug.getregistry()["kubelua.array"], getmetatable(v.d))
    end)

    it("decodes null as json.null, the registry's kubelua.null", function()
      local v = assert(json.decode('{"a":null,"b":[null,1]}'))
      assert.equal(json.null, v.a)
      assert.equal(json.null, v.b[1])
      assert.equal(2, #v.b)
      assert.equal(debug.getregistry()["kubelua.null"], json.null)
      assert.equal("userdata", type(json.null))
    end)

    it("is the same value as cjson.null", function()
      local ok, cjson = pcall(require, "cjson")
      if ok then assert.equal(cjson.null, json.null) end
    end)

    it("keeps integers up to 2^53 exact", function()
      local v = assert(json.decode(
        '[9007199254740992,-9007199254740992,123456789012345,0,-0,4294967296]'))
      assert.equal(2 ^ 53, v[1])
      assert.equal(-2 ^ 53, v[2])
      assert.equal(123456789012345, v[3])
      assert.equal(0, v[4])
      assert.equal(-math.huge, 1 / v[5])
      assert.equal(4294967296, v[6])
    end)

    it("refuses integers a double cannot hold, naming the value and offset", function()
      assert.same({ nil, "json: byte 5: integer 9007199254740993 cannot be "
        .. "represented exactly (beyond 2^53)" },
        { json.decode('{"a":9007199254740993}') })
      assert.same({ nil, "json: byte 1: integer -12345678901234567890 cannot "
        .. "be represented exactly (beyond 2^53)" },
        { json.decode('[-12345678901234567890]') })
      local long = string.rep("9", 60)
      assert.same({ nil, "json: byte 0: integer " .. string.rep("9", 40)
        .. "... cannot be represented exactly (beyond 2^53)" },
        { json.decode(long) })
    end)

    it("reads floats as numbers", function()
      local v = assert(json.decode('[0.1,-1.5e-300,1E+300,2e10,1.0,-0.0,5e-324]'))
      assert.equal(0.1, v[1])
      assert.equal(-1.5e-300, v[2])
      assert.equal(1e300, v[3])
      assert.equal(2e10, v[4])
      assert.equal(1, v[5])
      assert.equal(-math.huge, 1 / v[6])
      assert.equal(5e-324, v[7])
    end)

    it("refuses floats beyond a double's range (found by spec/fuzz/fuzz_json)", function()
      assert.same({ nil, "json: byte 0: cannot convert number 8e1111" },
        { json.decode("8e1111") })
      assert.same({ nil, "json: byte 5: cannot convert number -1.5E+400" },
        { json.decode('{"a":-1.5E+400}') })
      assert.equal(0, json.decode("1e-400"))
    end)

    it("decodes escapes and keeps raw UTF-8", function()
      local v = assert(json.decode(
        '{"e":"\\u00e9","p":"\\ud83d\\ude00","s":"\\/\\"\\\\\\b\\f\\n\\r\\t",'
        .. '"z":"a\\u0000b","raw":"caf\195\169 \240\159\152\128","k\\u00e9y":1}'))
      assert.equal("\195\169", v.e)
      assert.equal("\240\159\152\128", v.p)
      assert.equal('/"\\\b\f\n\r\t', v.s)
      assert.equal("a\0b", v.z)
      assert.equal("caf\195\169 \240\159\152\128", v.raw)
      assert.equal(1, v["k\195\169y"])
      local long = string.rep("x\\n", 400)
      assert.equal(string.rep("x\n", 400), json.decode('"' .. long .. '"'))
    end)

    it("decodes any top-level value, whitespace around it", function()
      assert.equal(5, json.decode(" 5 "))
      assert.equal("x", json.decode('"x"'))
      assert.equal(true, json.decode("true"))
      assert.equal(false, json.decode("false"))
      assert.equal(json.null, json.decode("null"))
      assert.is_true(json.is_array(json.decode("\n[ ]\t")))
    end)

    it("builds big objects and arrays completely", function()
      for _, n in ipairs({ 1, 15, 16, 17, 33, 100 }) do
        local keys, items = {}, {}
        for i = 1, n do
          keys[i] = string.format('"k%d":%d', i, i)
          items[i] = tostring(i)
        end
        local o = assert(json.decode("{" .. table.concat(keys, ",") .. "}"))
        local a = assert(json.decode("[" .. table.concat(items, ",") .. "]"))
        local count = 0
        for k, v in pairs(o) do
          count = count + 1
          assert.equal("k" .. v, k)
        end
        assert.equal(n, count)
        assert.equal(n, #a)
        for i = 1, n do assert.equal(i, a[i]) end
        assert.is_true(json.is_array(a))
      end
      local nested = assert(json.decode('[[1,[2,[3,{"a":[4]}]]],{"b":{"c":[]}}]'))
      assert.equal(4, nested[1][2][2][2].a[1])
      assert.is_true(json.is_array(nested[2].b.c))
    end)

    it("lets a later duplicate key win", function()
      assert.same({ a = 2 }, json.decode('{"a":1,"a":2}'))
      assert.same({ a = 3, b = 2 }, json.decode('{"a":1,"b":2,"a":3}'))
      assert.same({ a = 2 }, json.decode('{"a":1,"\\u0061":2}'))
      assert.same({ a = 2 }, json.decode('{"\\u0061":1,"a":2}'))
      assert.same({ [""] = 2 }, json.decode('{"":1,"":2}'))
    end)

    it("builds containers too big to hold on the stack exactly", function()
      -- Members wait on the Lua stack until their container closes; past
      -- a few thousand slots the container becomes a table at once.
      for _, n in ipairs({ 100, 3000, 10000 }) do
        local parts, items = {}, {}
        for i = 1, n do parts[i] = string.format('"k%d":%d', i, i) end
        for i = 1, n, 7 do
          parts[#parts + 1] = string.format('"k%d":%d', i, -i)
        end
        for i = 1, n do
          items[i] = string.format('{"i":%d,"a":[%d,[%d]],"i":%d}', -i, i, i, i)
        end
        local object = "{" .. table.concat(parts, ",") .. "}"
        local array = "[" .. table.concat(items, ",") .. "]"
        local doc = string.rep("[", 100) .. array .. "," .. object
          .. string.rep("]", 100)
        local v = assert(json.decode(doc))
        for _ = 1, 99 do
          assert.equal(1, #v)
          v = v[1]
        end
        assert.equal(2, #v)
        local a, o = v[1], v[2]
        assert.is_true(json.is_array(a))
        assert.equal(n, #a)
        for i = 1, n do
          assert.equal(i, a[i].i)
          assert.equal(i, a[i].a[2][1])
        end
        local count = 0
        for _ in pairs(o) do count = count + 1 end
        assert.equal(n, count)
        for i = 1, n do assert.equal(i % 7 == 1 and -i or i, o["k" .. i]) end
      end
    end)

    it("reports malformed input with the byte offset and the reason", function()
      local cases = {
        { '{"a":1', "json: byte 6: unexpected end of stream inside the value "
          .. "that starts at byte 0" },
        { '{"a":"\\q"}', "json: byte 6: invalid escape '\\q'" },
        { '{"a":"\\u12G4"}', "json: byte 6: invalid \\u escape" },
        { '["\\ud800"]', "json: byte 2: unpaired UTF-16 surrogate in \\u escape" },
        { '["\255"]', "json: byte 2: invalid UTF-8" },
        { '["a\nb"]', "json: byte 3: control character 0x0a in a string" },
        { '{"a" 1}', "json: byte 5: expected ':', found '1'" },
        { "[1 2]", "json: byte 3: expected ',' or ']', found '2'" },
        { "[01]", "json: byte 2: invalid number (leading zero)" },
        { "[tru]", "json: byte 4: invalid literal (expected true)" },
        { "{} {}", "json: byte 3: trailing data after the top-level value" },
        { "", "json: byte 0: unexpected end of stream: no value" },
        { string.rep("[", 129), "json: byte 128: nesting deeper than 128 levels" },
      }
      for _, c in ipairs(cases) do
        assert.same({ nil, c[2] }, { json.decode(c[1]) })
      end
      local deep = string.rep("[", 128) .. string.rep("]", 128)
      assert.is_table(json.decode(deep))
    end)

    it("accepts exactly what the stream decoder's scanner accepts", function()
      -- decode checks as it builds; json.check is the scanner of the watch
      -- stream decoder. Random mutations of valid documents must get the
      -- same verdict and the same message from both.
      local seeds = {
        read(FIXTURES .. "pod-2.4k.json"),
        '{"a":[1,-2.5e-3,true,false,null,{}],"s":"x\\u00e9\\ud83d\\ude00\\n\\"",'
          .. '"u":"caf\195\169","n":-0,"e":[]}',
        '[[[]],{"":""},0,1e5,"\\/"]',
      }
      local bytes = { '"', "\\", "{", "}", "[", "]", ",", ":", "0", "1", "-",
        ".", "e", "+", "t", "n", "u", "x", " ", "\0", "\31", "\127", "\128",
        "\195", "\169", "\237", "\240", "\255" }
      local rng = 12345
      local function rand(n)
        rng = (rng * 1103515245 + 12345) % 2147483648
        return rng % n + 1
      end
      local cases = 0
      for _, seed in ipairs(seeds) do
        for _ = 1, 700 do
          local s, k = seed, rand(4)
          for _ = 1, rand(3) do
            local i = rand(#s)
            if k == 1 then
              s = s:sub(1, i - 1) .. bytes[rand(#bytes)] .. s:sub(i + 1)
            elseif k == 2 then
              s = s:sub(1, i - 1) .. s:sub(i + 1)
            elseif k == 3 then
              s = s:sub(1, i) .. bytes[rand(#bytes)] .. s:sub(i + 1)
            else
              s = s:sub(1, i)
            end
          end
          local v, derr = json.decode(s)
          local ok, cerr = json.check(s)
          if v == nil and not derr:find("cannot be represented exactly", 1, true) then
            assert.equal(cerr, derr, s)
          elseif v ~= nil then
            assert.is_true(ok, s)
          end
          cases = cases + 1
        end
      end
      assert.equal(2100, cases)
    end)

    it("raises on a non-string argument", function()
      assert.has_error(function() json.decode(42) end)
      assert.has_error(function() json.decode() end)
    end)
  end)

  describe("check", function()
    it("checks without building, with decode's messages", function()
      assert.is_true(json.check('{"a":[1,{}]}'))
      assert.same({ nil, "json: byte 6: invalid escape '\\q'" },
        { json.check('{"a":"\\q"}') })
      assert.is_true(json.check("[12345678901234567890]"))
    end)
  end)

  describe("meta", function()
    it("reads namespace, name and resourceVersion without building", function()
      assert.same({ "ns", "a", "12" }, { json.meta(
        '{"kind":"Pod","metadata":{"name":"x","namespace":"ns","resourceVersion":"12",'
        .. '"labels":{"name":"y"},"name":"a"},"spec":{"name":"z"}}') })
      assert.same({ "", "n\"1", "" }, { json.meta(' {"metadata":{"name":"n\\"1","namespace":null}} ') })
      assert.same({ "", "", "" }, { json.meta('{"kind":"Status"}') })
      assert.same({ "", "", "" }, { json.meta('{"metadata":[1]}') })
      -- the last "metadata" counts, and member names are compared decoded
      assert.same({ "n", "", "" }, { json.meta('{"metadata":{"name":"a"},"metadata":{"namespace":"n"}}') })
      assert.same({ "", "", "" }, { json.meta('{"metadata":{"name":"a"},"metadata":"b"}') })
      assert.same({ "", "a", "7" }, { json.meta('{"metad\\u0061ta":{"n\\u0061me":"a","resourceVersion":"7"}}') })
      assert.same({ "b", "a", "" }, { json.meta(' { "metadata" : { "name" : "a" ,\n "namespace" : "b" } } ') })
    end)

    it("returns the namespace and name it is given when the object's are the same", function()
      local s = '{"metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}}'
      assert.same({ "ns", "a", "3" }, { json.meta(s, "ns", "a") })
      assert.same({ "ns", "a", "3" }, { json.meta(s, "nsx", "ab") })
      assert.same({ "ns", "a", "3" }, { json.meta(s, "n", "") })
      assert.same({ "ns", "a", "3" }, { json.meta(s, 1, false) })
      assert.same({ "", "", "" }, { json.meta('{"metadata":{}}', "ns", "a") })
      -- an escaped name is compared decoded, never by its raw text
      assert.same({ "", 'n"1', "" }, { json.meta('{"metadata":{"name":"n\\"1"}}', "", 'n\\"1') })
      assert.same({ "", 'n"1', "" }, { json.meta('{"metadata":{"name":"n\\"1"}}', "", 'n"1') })
    end)

    it("takes bytes as strings", function()
      local b = httpd.join { '{"metadata":{"name":', '"b","namespace":"d"}}' }
      assert.same({ "d", "b", "" }, { json.meta(b) })
      assert.same({ metadata = { name = "b", namespace = "d" } }, json.decode(b))
    end)

    it("refuses what is not one object, or metadata fields that are not strings", function()
      assert.same({ nil, "json: byte 13: unexpected end of stream inside the value that starts at byte 0" },
        { json.meta('{"metadata":"') })
      assert.same({ nil, "json: byte 0: top-level value is not an object" }, { json.meta("[1]") })
      assert.same({ nil, "json: metadata.resourceVersion is not a string" },
        { json.meta('{"metadata":{"name":"a","resourceVersion":12}}') })
      local ok, err = pcall(json.meta, 12)
      assert.is_false(ok)
      assert.matches("json.meta: expected a string or bytes, got number$", err)
    end)
  end)

  describe("view", function()
    -- The plain value a view reads as, walked through json.pairs.
    local function plain(v)
      if type(v) ~= "table" then return v end
      local t = json.is_array(v) and json.array() or {}
      for k, x in json.pairs(v) do t[k] = plain(x) end
      return t
    end

    it("reads as decode decodes: escapes, numbers, null, nesting, the last duplicate", function()
      local text = ' {"a":1,"a":{"b":[true,false,null,-0.5e2,"x\\u00e9\\n"]},"c":{},"d":[],'
        .. '"k\\u0065y":"v","e":[[1],{"f":2}]} '
      local v = assert(json.view(text))
      assert.equal("table", type(v))
      assert.is_true(v.a.b[1])
      assert.equal(json.null, v.a.b[3])
      assert.equal(-50, v.a.b[4])
      assert.equal("x\195\169\n", v.a.b[5])
      assert.equal("v", v.key)
      assert.equal(2, v.e[2].f)
      assert.is_nil(v.nope)
      assert.is_true(json.is_array(v.d))
      assert.is_false(json.is_array(v.c))
      assert.is_true(same_json(plain(v), assert(json.decode(text))))
      assert.equal(json.encode(json.decode(text)), json.encode(v))
      assert.equal('{"f":2}', json.encode(v.e[2]))
      assert.equal('{"x":[[1],{"f":2}]}', json.encode{ x = v.e })
    end)

    it("keeps the member a later duplicate name gives, and the same view for each read",
      function()
        local v = assert(json.view('{"a":{"x":1},"a":2,"b":2,"b":{"y":[3]},"c":[{"z":1},5,[6]],'
          .. '"d":{"e":{"f":1}}}'))
        assert.equal(2, v.a)
        assert.equal(3, v.b.y[1])
        assert.equal(1, v.c[1].z)
        assert.equal(5, v.c[2])
        assert.equal(v.c[3], v.c[3])
        local e = v.d.e
        local seen = {}
        for k, x in json.pairs(v.d) do seen[k] = x end
        assert.equal(e, seen.e)
        assert.equal(1, e.f)
        assert.equal(3, json.len(v.c))
      end)

    it("reads every apiserver fixture as decode does", function()
      local n = 0
      for line in io.lines(FIXTURES .. "sorted.tsv") do
        local name, expected = line:match("^([^\t]+)\t(.*)$")
        local v = assert(json.view(read(FIXTURES .. "apiserver/" .. name)))
        assert.equal(expected, json.encode(plain(v)), name)
        assert.equal(expected, json.encode(v), name)
        n = n + 1
      end
      assert.equal(99, n)
    end)

    it("is counted and iterated by json.len, json.pairs and json.ipairs, as tables are",
      function()
        local v = assert(json.view('{"l":["a","b","c"],"m":{"x":1}}'))
        assert.equal(0, #v.l)
        assert.equal(3, json.len(v.l))
        assert.equal(2, json.len{ 1, 2 })
        local got = {}
        for i, x in json.ipairs(v.l) do got[#got + 1] = i .. x end
        for k, x in json.pairs(v.m) do got[#got + 1] = k .. x end
        for i, x in json.ipairs{ "p", "q" } do got[#got + 1] = i .. x end
        assert.same({ "1a", "2b", "3c", "x1", "1p", "2q" }, got)
        assert.is_nil(next(v))
        local ok, err = pcall(json.len, "s")
        assert.is_false(ok)
        assert.matches("json.len: expected a table or a view, got string$", err)
      end)

    it("refuses writes, naming the member", function()
      local v = assert(json.view('{"m":{"x":1},"l":[1]}'))
      raises("json: cannot set x: a view is read-only", function() v.m.x = 2 end)
      raises("json: cannot set y: a view is read-only", function() v.y = 2 end)
      raises("json: cannot set [2]: a view is read-only", function() v.l[2] = 2 end)
      assert.equal(1, v.m.x)
    end)

    it("refuses what check refuses with its message, and raises decode's number error when "
      .. "the number is read", function()
      assert.same({ nil, "json: byte 0: top-level value is not an object" }, { json.view("[1]") })
      assert.same({ json.check('{"a":') }, { json.view('{"a":') })
      local text = '{"a":1,"b":{"c":12345678901234567890}}'
      assert.same({ nil, "json: byte 16: integer 12345678901234567890 cannot be represented "
        .. "exactly (beyond 2^53)" }, { json.decode(text) })
      local v = assert(json.view(text))
      assert.equal(1, v.a)
      raises("json: byte 16: integer 12345678901234567890 cannot be represented exactly "
        .. "(beyond 2^53)", function() return v.b.c end)
      local ok, err = pcall(json.encode, { b = v.b })
      assert.is_false(ok)
      assert.equal("json: byte 16: integer 12345678901234567890 cannot be represented exactly "
        .. "(beyond 2^53) at b", err)
    end)
  end)

  describe("omit", function()
    it("drops top-level members by name, keeping the others byte for byte", function()
      assert.equal('{"metadata":{"kind":"x","apiVersion":"y"},"spec":{}}', tostring(json.omit(
        '{"apiVersion":"v1","kind":"Pod","metadata":{"kind":"x","apiVersion":"y"},"spec":{}}',
        "apiVersion", "kind")))
      -- every member of that name, escaped names too; whitespace inside a member stays
      assert.equal('{"a" : 1,"b":[ ]}', tostring(json.omit(
        ' { "a" : 1 , "kind":2, "b":[ ], "k\\u0069nd":3 } ', "kind")))
      assert.equal("{}", tostring(json.omit('{"kind":1}', "kind")))
      assert.equal('{"a":1}', tostring(json.omit('{"a":1}')))
      assert.equal("{}", tostring(json.omit("{}", "a")))
      -- more members than one walk records (32): walked again
      local parts = {}
      for i = 1, 40 do parts[i] = ('"k%d":%d'):format(i, i) end
      local want = "{" .. table.concat(parts, ",", 1, 6) .. "," .. table.concat(parts, ",", 8) .. "}"
      assert.equal(want, tostring(json.omit("{" .. table.concat(parts, ",") .. ',"kind":"X"}',
        "kind", "k7")))
      local long = ("a"):rep(300)
      assert.equal('{"b":2}', tostring(json.omit('{"' .. long .. '\\u0062":1,"b":2}', long .. "b")))
    end)

    it("gives bytes, and takes them", function()
      local b = json.omit(httpd.join { '{"kind":"Pod",', '"n":12345678901234}' }, "kind")
      assert.equal("userdata", type(b))
      assert.equal(20, #b)
      assert.same({ n = 12345678901234 }, json.decode(b))
    end)

    it("refuses what is not one object", function()
      assert.same({ nil, "json: byte 5: unexpected end of stream inside the value that starts "
        .. "at byte 0" }, { json.omit('{"a":', "kind") })
      assert.same({ nil, "json: byte 0: top-level value is not an object" },
        { json.omit("[1]", "kind") })
      local ok, err = pcall(json.omit, "{}", "kind", 1)
      assert.is_false(ok)
      assert.matches("json.omit: expected member names, got number$", err)
    end)
  end)

  describe("encode", function()
    it("writes scalars", function()
      assert.equal("null", json.encode(json.null))
      assert.equal("null", json.encode(nil))
      assert.equal("true", json.encode(true))
      assert.equal("false", json.encode(false))
      assert.equal('"x"', json.encode("x"))
    end)

    it("writes integers up to 2^53 without exponent or decimal point", function()
      assert.equal("123456789012345", json.encode(123456789012345))
      assert.equal("9007199254740992", json.encode(2 ^ 53))
      assert.equal("-9007199254740992", json.encode(-2 ^ 53))
      assert.equal("0", json.encode(0))
      assert.equal("-0", json.encode(-1 / math.huge))
      assert.equal("[1,2,300]", json.encode({ 1, 2, 300 }))
    end)

    it("writes other numbers with the fewest digits that read back exactly", function()
      assert.equal("0.1", json.encode(0.1))
      assert.equal("0.30000000000000004", json.encode(0.1 + 0.2))
      assert.equal("0.3333333333333333", json.encode(1 / 3))
      assert.equal("1e+300", json.encode(1e300))
      assert.equal("-1.5e-300", json.encode(-1.5e-300))
      assert.equal("9.007199254740994e+15", json.encode(2 ^ 53 + 2))
      assert.equal("1e+21", json.encode(1e21))
      assert.equal("5e-324", json.encode(5e-324))
      for _, x in ipairs({ 0.1, 1 / 3, 2 ^ 53 + 2, 1e-7, 123.456, -2.5e-8, math.pi }) do
        assert.equal(x, json.decode(json.encode(x)))
      end
    end)

    it("refuses NaN and infinities, naming the path", function()
      raises("json: cannot encode NaN at a.b", function()
        json.encode({ a = { b = 0 / 0 } })
      end)
      raises("json: cannot encode inf at [2]", function()
        json.encode({ 1, math.huge })
      end)
      raises("json: cannot encode -inf at (root)", function()
        json.encode(-math.huge)
      end)
    end)

    it("tells arrays from objects", function()
      assert.equal("[]", json.encode(json.array()))
      assert.equal("{}", json.encode({}))
      assert.equal("[1,2]", json.encode(json.array({ 1, 2 })))
      assert.equal('[{},[],"x"]', json.encode({ {}, json.array(), "x" }))
      assert.equal('{"a":[],"b":{}}', json.encode({ a = json.array(), b = {} }))
      local t = json.array({ 1 })
      assert.equal(t, json.array(t))
      assert.is_true(json.is_array(t))
      assert.is_false(json.is_array({}))
      assert.is_false(json.is_array("x"))
    end)

    it("writes object keys in byte order", function()
      assert.equal('{"A":4,"B":5,"a":1,"aa":3,"b":2,"\195\169":6}',
        json.encode({ b = 2, a = 1, aa = 3, A = 4, B = 5, ["\195\169"] = 6 }))
    end)

    it("refuses keys that are not strings, naming the path", function()
      raises("json: cannot encode key of type boolean at spec.x", function()
        json.encode({ spec = { x = { [true] = 1 } } })
      end)
      raises("json: cannot encode key 1.5 at (root)", function()
        json.encode({ [1.5] = 1 })
      end)
      raises("json: cannot encode key 0 at a", function()
        json.encode({ a = { [0] = 1 } })
      end)
      raises("json: cannot encode a table with mixed keys at items[1]", function()
        json.encode({ items = { { 1, x = 2 } } })
      end)
      raises("json: cannot encode an array with string keys at (root)", function()
        local t = json.array({ 1 })
        t.x = 1
        json.encode(t)
      end)
      raises("json: cannot encode a sparse array at list", function()
        json.encode({ list = { [1] = 1, [3] = 3 } })
      end)
    end)

    it("writes each value afresh after one that raised half-way and after a big one", function()
      raises("json: cannot encode a value of type function at b", function()
        json.encode({ a = string.rep("x", 100), b = print })
      end)
      assert.equal('{"a":1}', json.encode({ a = 1 }))
      assert.equal(100002, #json.encode(string.rep("y", 100000)))
      assert.equal('[-9007199254740992,10,-7]', json.encode({ -2 ^ 53, 10, -7 }))
    end)

    it("sorts the keys of small and big objects, also past the C stack's 8000 slots", function()
      assert.equal('{"a":{"":0,"b":[1]},"ab":true,"b":"x"}',
        json.encode({ b = "x", ab = true, a = { b = json.array({ 1 }), [""] = 0 } }))
      local big, parts = {}, {}
      for i = 1, 10000 do big[string.format("k%05d", i)] = { i } end
      for i = 1, 10000 do parts[i] = string.format('"k%05d":[%d]', i, i) end
      assert.equal("{" .. table.concat(parts, ",") .. "}", json.encode(big))
    end)

    it("refuses cycles and nesting deeper than 128", function()
      local t = { a = {} }
      t.a.b = t
      raises("json: cannot encode a reference cycle at a.b", function()
        json.encode(t)
      end)
      local deep = {}
      local cur = deep
      for _ = 1, 128 do
        cur[1] = {}
        cur = cur[1]
      end
      raises("json: nesting deeper than 128 levels at " .. string.rep("[1]", 128),
        function() json.encode(deep) end)
      local long = {}
      local node = long
      for _ = 1, 100 do
        node[string.rep("k", 60)] = {}
        node = node[string.rep("k", 60)]
      end
      node.f = print
      local ok, err = pcall(json.encode, long)
      assert.is_false(ok)
      assert.equal(1023, #err:match("at (.*)$")) -- the path, truncated
      local shared = { 1 }
      assert.equal('{"a":[1],"b":[1]}', json.encode({ a = shared, b = shared }))
    end)

    it("refuses values that have no JSON form", function()
      raises("json: cannot encode a value of type function at f", function()
        json.encode({ f = print })
      end)
      raises("json: cannot encode a value of type thread at [1]", function()
        json.encode({ coroutine.create(print) })
      end)
      raises("json: cannot encode a value of type userdata at (root)", function()
        json.encode(io.stdout)
      end)
    end)

    it("escapes strings per RFC 8259 and checks their UTF-8", function()
      assert.equal('"q\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\127"',
        json.encode('q"b\\s/\b\f\n\r\t\1\31\127'))
      assert.equal('"caf\195\169 \240\159\152\128"', json.encode("caf\195\169 \240\159\152\128"))
      assert.equal('"a\\u0000b"', json.encode("a\0b"))
      raises("json: invalid UTF-8 in a string at s", function()
        json.encode({ s = "a\255" })
      end)
      raises("json: invalid UTF-8 in a string at (root)", function()
        json.encode("\237\160\128") -- an encoded surrogate
      end)
      raises("json: invalid UTF-8 in a key at \192\175", function()
        json.encode({ ["\192\175"] = 1 })
      end)
    end)
  end)

  describe("round trip", function()
    it("gives back sorted compact JSON byte for byte", function()
      local text = '{"a":[],"b":{},"c":null,"d":[9007199254740992,-9007199254740992,'
        .. '123456789012345],"e":[0.1,-1.5e-300,1e+300],"f":"caf\195\169 '
        .. '\240\159\152\128 \\"\\\\\\n\\u0001","g":[[],[{}],[null]],"h":true}'
      assert.equal(text, json.encode(assert(json.decode(text))))
    end)

    it("keeps every apiserver fixture's value, byte for byte", function()
      local n = 0
      for line in io.lines(FIXTURES .. "sorted.tsv") do
        local name, expected = line:match("^([^\t]+)\t(.*)$")
        local text = read(FIXTURES .. "apiserver/" .. name)
        local v = assert(json.decode(text))
        local out = json.encode(v)
        assert.equal(expected, out, name)
        assert.is_true(same_json(v, assert(json.decode(out))))
        n = n + 1
      end
      assert.equal(99, n)
    end)

    it("keeps every object of the fixtures as the same JSON value", function()
      local n = 0
      for line in io.lines(FIXTURES .. "expected.tsv") do
        local cols = {}
        for c in (line .. "\t"):gmatch("([^\t]*)\t") do cols[#cols + 1] = c end
        if #cols == 15 then
          local full = cols[15]
          local v = assert(json.decode(full))
          local again = assert(json.decode(json.encode(v)))
          local ok, err = same_json(v, again)
          assert(ok, cols[1] .. " " .. cols[2] .. ": " .. tostring(err))
          n = n + 1
        end
      end
      assert.equal(134, n)
    end)

    it("keeps the benchmark Pod", function()
      local v = assert(json.decode(read(FIXTURES .. "pod-2.4k.json")))
      assert.equal("web-7", v.metadata.name)
      assert.is_true(json.is_array(v.metadata.ownerReferences))
      assert.is_true(v.metadata.ownerReferences[1].controller)
      assert.same({}, v.spec.securityContext)
      assert.is_false(json.is_array(v.spec.securityContext))
      assert.is_true(same_json(v, assert(json.decode(json.encode(v)))))
    end)
  end)
end)
