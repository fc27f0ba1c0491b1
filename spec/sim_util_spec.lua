-- kubelua.sim.util's checks that follow Go's: base64 as encoding/base64's
-- StdEncoding reads it, ConfigMap keys as validation.IsConfigMapKey, and
-- values quoted as strconv.Quote; SHA-256 and its HMAC.
local util = require "kubelua.sim.util"

describe("kubelua.sim.util", function()
  it("hashes with SHA-256 and HMAC-SHA-256 (FIPS 180-2 and RFC 4231's forms)", function()
    local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
    assert.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      hex(util.sha256("")))
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      hex(util.sha256("abc")))
    assert.equal("f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8",
      hex(util.hmac_sha256("key", "The quick brown fox jumps over the lazy dog")))
  end)

  it("finds where Go's base64 decoder stops, or nothing when it reads through", function()
    local cases = { { "eA==", nil }, { "eHl6", nil }, { "", nil }, { "eHl6\n", nil },
      { "\r\neHl6", nil }, { "eA\n=\n=", nil }, { "eHk=", nil },
      { "eA", 0 }, { "e", 0 }, { "=", 0 }, { "eA=", 3 }, { "eA=x", 2 }, { "eA==x", 4 },
      { "eHk=eHk=", 4 }, { "not base64!", 3 }, { "eHl6eHl6eHl6eHl6eHl6!", 20 },
      { "eHl6-", 4 } }
    for _, c in ipairs(cases) do assert.equal(c[2], util.b64_error(c[1]), c[1]) end
  end)

  it("checks ConfigMap keys as the real server does", function()
    local re = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
      .. "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
      .. "'[-._a-zA-Z0-9]+')"
    assert.same({}, util.config_key_errors("a-b_c.D9"))
    assert.same({ re }, util.config_key_errors("a/b"))
    assert.same({ re }, util.config_key_errors(""))
    assert.same({ "must not be '.'" }, util.config_key_errors("."))
    assert.same({ "must not be '..'" }, util.config_key_errors(".."))
    assert.same({ "must not start with '..'" }, util.config_key_errors("..x"))
    assert.same({ "must be no more than 253 characters", re, "must not start with '..'" },
      util.config_key_errors(".." .. string.rep("x", 252) .. "/"))
  end)

  it("takes only an integer after gt and lt in a label selector", function()
    local reqs = assert(util.parse_label_selector("n>2,m< -5"))
    assert.same({ { key = "n", op = ">", value = 2 }, { key = "m", op = "<", value = -5 } }, reqs)
    assert.equal(9223372036854775807, util.parse_label_selector("n>9223372036854775807")[1].value)
    assert.equal(-9223372036854775808, util.parse_label_selector("n<-9223372036854775808")[1].value)
    for _, v in ipairs({ "nAn", "inf", "0x10", "1e3", "1.5", "", "9223372036854775808",
      "-9223372036854775809" }) do
      local none, err = util.parse_label_selector("A>" .. v)
      assert.is_nil(none, v)
      assert.equal("unable to parse requirement: found 'A>" .. v .. "', expected: in, notin, "
        .. "=, ==, !=, gt, lt", err)
    end
  end)

  it("quotes as Go's %q", function()
    assert.equal('"a\\"b\\\\c\\n\\t\\x00\\x1f\\x7fé"', util.go_quote('a"b\\c\n\t\0\31\127é'))
  end)
end)
