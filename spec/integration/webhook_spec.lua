-- Admission and conversion webhooks (kubelua.webhook) served over HTTPS in
-- this process, called as kube-apiserver calls them: AdmissionReview and
-- ConversionReview v1 bodies POSTed with kubelua's client, certificates
-- made here by the openssl CLI.
local kube = require "kubelua"
local core = require "kubelua.core"
local http = require "kubelua.http"
local webhook = require "kubelua.webhook"
local support = require "spec.support"
local process = require "kubelua.process"

local dir, base, tls

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  p:close()
  return out
end

-- A self-signed certificate for 127.0.0.1 as DIR/tls.crt and tls.key.
local function make_cert(cn)
  local out = sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    .. " -keyout " .. dir .. "/new.key -out " .. dir .. "/new.crt -subj /CN=" .. cn
    .. " -addext subjectAltName=IP:127.0.0.1 -days 1")
  assert(support.read(dir .. "/new.crt"), "openssl could not make a certificate: " .. out)
  -- written beside, then renamed over: a reader never sees half a file
  assert(os.rename(dir .. "/new.key", dir .. "/tls.key"))
  assert(os.rename(dir .. "/new.crt", dir .. "/tls.crt"))
  local copy = dir .. "/" .. cn .. ".crt"
  sh("cp " .. dir .. "/tls.crt " .. copy)
  return copy
end

local function b64decode(s)
  local p = io.popen("printf %s '" .. s .. "' | base64 -d")
  local out = p:read("*a")
  p:close()
  return out
end

local function post(path, body, headers)
  local r, err = http.request{ method = "POST", url = base .. path, tls = tls,
    headers = headers or { ["Content-Type"] = "application/json" }, body = body }
  assert(r, err)
  return r
end

local function review(path, request)
  local r = post(path, kube.json.encode{ apiVersion = "admission.k8s.io/v1",
    kind = "AdmissionReview", request = request })
  assert.equal(200, r.status)
  assert.equal("application/json", r.headers["content-type"])
  return kube.json.decode(r.body)
end

local function admission(uid, object, extra)
  local req = { uid = uid, kind = { group = "example.com", version = "v1", kind = "Greeting" },
    resource = { group = "example.com", version = "v1", resource = "greetings" },
    name = "hello", namespace = "demo", operation = "CREATE",
    userInfo = { username = "alice", groups = { "devs" } }, object = object,
    oldObject = kube.null, dryRun = false }
  for k, v in pairs(extra or {}) do req[k] = v end
  return req
end

local function greeting(message)
  return { apiVersion = "example.com/v1", kind = "Greeting",
    metadata = { name = "hello", namespace = "demo" }, spec = { message = message } }
end

-- Captures core.log lines while fn runs.
local function capture_logs(fn)
  local logs, saved = {}, core.log
  core.log = function(level, msg, fields)
    logs[#logs + 1] = { level = level, msg = msg, fields = fields }
  end
  local ok, err = pcall(fn)
  core.log = saved
  assert(ok, err)
  return logs
end

describe("kube.webhook", function()
  local ca

  setup(function()
    dir = sh("mktemp -d"):gsub("%s+$", "")
    ca = make_cert("first")
    local srv = assert(webhook.serve{ address = "127.0.0.1:0", cert_dir = dir, poll = 0.05,
      read_timeout = 0.5 })
    base = "https://127.0.0.1:" .. srv:port()
    tls = { ca_file = ca }
    kube.webhook{ name = "greeting-check", path = "/validate", validate = function(req)
      local msg = req.object.spec.message
      if msg == "" then return false, "spec.message must not be empty", { "be kind" } end
      if msg == "boom" then error("no such greeting") end
      if msg == "slow" then kube.sleep(60) end
      return true
    end, timeout = 0.2 }
    kube.webhook{ path = "/mutate", mutate = function(req)
      local o = req.object
      o.spec.replicas = 1
      o.spec["a/b"] = "x"
      o.spec["t~"] = kube.null
      o.spec.items[2] = nil
      o.spec.items[1] = "first"
      o.spec.gone = nil
      o.metadata.labels = { app = "hello" }
    end }
    kube.webhook{ path = "/view", read_only = true, validate = function(req)
      local o, groups = req.object, req.userInfo.groups
      if o.spec.message == "write" then o.spec.message = "x" end
      local seen = {}
      for k in kube.json.pairs(o) do seen[#seen + 1] = k end
      table.sort(seen)
      for i, g in kube.json.ipairs(groups) do seen[#seen + 1] = i .. "=" .. g end
      return false, table.concat({ o.spec.message, tostring(kube.json.is_array(groups)),
        tostring(kube.json.is_array(o.spec)), kube.json.len(groups), #groups,
        tostring(req.oldObject == kube.null), kube.json.encode(o), table.concat(seen, ",") },
        "|")
    end }
    kube.webhook{ path = "/noop", mutate = function() end }
    kube.webhook{ path = "/convert", convert = function(obj, to)
      if obj.metadata.name == "bad" then return nil, "cannot convert bad" end
      if to == "example.com/v1" then
        obj.spec.message = obj.spec.text
        obj.spec.text = nil
      end
      return obj
    end }
  end)

  teardown(function()
    webhook.stop()
    os.execute("rm -rf " .. dir)
  end)

  describe("validate", function()
    it("allows with code 200 and echoes the uid", function()
      assert.same({ apiVersion = "admission.k8s.io/v1", kind = "AdmissionReview",
        response = { uid = "u-1", allowed = true, status = { code = 200 } } },
        review("/validate", admission("u-1", greeting("hi"))))
    end)

    it("denies with 403 Forbidden, the message and the warnings", function()
      assert.same({ apiVersion = "admission.k8s.io/v1", kind = "AdmissionReview",
        response = { uid = "u-2", allowed = false, warnings = { "be kind" },
          status = { code = 403, reason = "Forbidden",
            message = "spec.message must not be empty" } } },
        review("/validate", admission("u-2", greeting(""))))
    end)

    it("answers 500 with the message for a handler that raises, logged once with its traceback",
      function()
        local resp
        local logs = capture_logs(function()
          resp = review("/validate", admission("u-3", greeting("boom"))).response
        end)
        assert.equal(false, resp.allowed)
        assert.equal(500, resp.status.code)
        assert.matches("^spec/integration/webhook_spec%.lua:%d+: no such greeting$",
          resp.status.message)
        assert.equal(1, #logs)
        assert.equal("error", logs[1].level)
        assert.matches("^webhook greeting%-check: the handler failed: spec/integration/"
          .. "webhook_spec%.lua:%d+: no such greeting\nstack traceback:\n", logs[1].msg)
        assert.equal(" uid=u-3", logs[1].fields)
        -- the server goes on
        assert.is_true(review("/validate", admission("u-4", greeting("hi"))).response.allowed)
      end)

    it("answers 500 for a handler that exceeds its timeout", function()
      local resp
      local logs = capture_logs(function()
        resp = review("/validate", admission("u-5", greeting("slow"))).response
      end)
      assert.same({ uid = "u-5", allowed = false,
        status = { code = 500, message = "timed out after 0.2s" } }, resp)
      assert.same({ { level = "error", fields = " uid=u-5",
        msg = "webhook greeting-check: the handler failed: timed out after 0.2s" } }, logs)
    end)
  end)

  describe("validate with read_only = true", function()
    it("hands the handler a view: the values decode gives, iterated and encoded through "
      .. "kube.json", function()
      local obj = greeting("hi")
      obj.spec.items = kube.array{ 1, 2.5, kube.null }
      local req = admission("u-v1", obj)
      req.userInfo.groups = kube.array{ "devs", "ops" }
      assert.same({ uid = "u-v1", allowed = false, status = { code = 403, reason = "Forbidden",
        message = "hi|true|false|2|0|true|" .. kube.json.encode(obj)
          .. "|apiVersion,kind,metadata,spec,1=devs,2=ops" } },
        review("/view", req).response)
    end)

    it("answers 500 for a handler that writes to the view, naming the member", function()
      local resp
      local logs = capture_logs(function()
        resp = review("/view", admission("u-v2", greeting("write"))).response
      end)
      assert.equal(false, resp.allowed)
      assert.equal(500, resp.status.code)
      assert.matches("^spec/integration/webhook_spec%.lua:%d+: json: cannot set message: a view "
        .. "is read%-only$", resp.status.message)
      assert.equal(1, #logs)
      assert.matches("^webhook /view: the handler failed: spec/integration/webhook_spec%.lua:%d+: "
        .. "json: cannot set message: a view is read%-only\nstack traceback:\n", logs[1].msg)
    end)

    it("answers a body that is not a JSON object as the decoding webhooks do", function()
      for body, msg in pairs{ ["{nope"] = "cannot decode the body: json: byte 1: expected a "
        .. "string key or '}', found 'n'", ["[1]"] = "the body is not a JSON object" } do
        local r = post("/view", body)
        assert.same({ apiVersion = "admission.k8s.io/v1", kind = "AdmissionReview",
          response = { uid = "", allowed = false, status = { code = 400, message = msg } } },
          kube.json.decode(r.body))
      end
    end)

    it("is refused for a mutate or convert webhook, and when it is not a boolean", function()
      assert.error_matches(function()
        kube.webhook{ path = "/m", read_only = true, mutate = function() end }
      end, "kube.webhook /m: read_only is for validate, not mutate", 1, true)
      assert.error_matches(function()
        kube.webhook{ path = "/v", read_only = "yes", validate = function() end }
      end, "kube.webhook /v: read_only must be a boolean, got string", 1, true)
    end)
  end)

  describe("in kube.controller{}", function()
    it("serves the webhooks its webhooks key lists", function()
      local t = require("kubelua.testing").start{}
      local ctl = kube.controller{ name = "hooked", watches = { "v1", "ConfigMap" },
        reconcile = function() end,
        webhooks = { { path = "/hooked", validate = function(req)
          if req.object.spec.message == "no" then return false, "hooked says no" end
          return true
        end } } }
      assert.equal("hooked", ctl.name)
      assert.same({ apiVersion = "admission.k8s.io/v1", kind = "AdmissionReview",
        response = { uid = "u-c1", allowed = false,
          status = { code = 403, reason = "Forbidden", message = "hooked says no" } } },
        review("/hooked", admission("u-c1", greeting("no"))))
      assert.same({ uid = "u-c2", allowed = true, status = { code = 200 } },
        review("/hooked", admission("u-c2", greeting("yes"))).response)
      t:stop()
    end)
  end)

  describe("mutate", function()
    it("answers the RFC 6902 patch of the change, base64, patchType JSONPatch", function()
      local obj = greeting("hi")
      obj.spec.items = kube.array{ "a", "b" }
      obj.spec["t~"] = 1
      obj.spec.gone = true
      local resp = review("/mutate", admission("u-6", obj)).response
      assert.equal("u-6", resp.uid)
      assert.is_true(resp.allowed)
      assert.equal("JSONPatch", resp.patchType)
      assert.equal('[{"op":"add","path":"/metadata/labels","value":{"app":"hello"}},'
        .. '{"op":"remove","path":"/spec/gone"},'
        .. '{"op":"add","path":"/spec/a~1b","value":"x"},'
        .. '{"op":"replace","path":"/spec/items/0","value":"first"},'
        .. '{"op":"remove","path":"/spec/items/1"},'
        .. '{"op":"add","path":"/spec/replicas","value":1},'
        .. '{"op":"replace","path":"/spec/t~0","value":null}]', b64decode(resp.patch))
    end)

    it("answers no patch when nothing changed", function()
      assert.same({ uid = "u-7", allowed = true, status = { code = 200 } },
        review("/noop", admission("u-7", greeting("hi"))).response)
    end)
  end)

  describe("convert", function()
    local function convert(objects)
      local r = post("/convert", kube.json.encode{ apiVersion = "apiextensions.k8s.io/v1",
        kind = "ConversionReview", request = { uid = "c-1",
          desiredAPIVersion = "example.com/v1", objects = objects } })
      assert.equal(200, r.status)
      return kube.json.decode(r.body)
    end

    local function alpha(name)
      return { apiVersion = "example.com/v1alpha1", kind = "Greeting",
        metadata = { name = name }, spec = { text = "hi" } }
    end

    it("converts each object to desiredAPIVersion: Success", function()
      assert.same({ apiVersion = "apiextensions.k8s.io/v1", kind = "ConversionReview",
        response = { uid = "c-1", result = { status = "Success" }, convertedObjects = {
          { apiVersion = "example.com/v1", kind = "Greeting", metadata = { name = "a" },
            spec = { message = "hi" } },
          { apiVersion = "example.com/v1", kind = "Greeting", metadata = { name = "b" },
            spec = { message = "hi" } } } } },
        convert{ alpha("a"), alpha("b") })
    end)

    it("fails the whole review when one object fails, with its message", function()
      assert.same({ apiVersion = "apiextensions.k8s.io/v1", kind = "ConversionReview",
        response = { uid = "c-1", result = { status = "Failure",
          message = "cannot convert bad" } } },
        convert{ alpha("a"), alpha("bad") })
    end)
  end)

  describe("the server", function()
    it("answers a body that is not JSON with an error review, code 400", function()
      local r = post("/validate", "{nope")
      assert.equal(200, r.status)
      local resp = kube.json.decode(r.body).response
      assert.equal(false, resp.allowed)
      assert.equal(400, resp.status.code)
      assert.equal("cannot decode the body: json: byte 1: expected a string key or '}', "
        .. "found 'n'", resp.status.message)
    end)

    it("answers a review of the wrong kind with code 400 naming it", function()
      local r = post("/validate", kube.json.encode{ apiVersion = "v1", kind = "Pod",
        request = { uid = "x" } })
      assert.same({ uid = "", allowed = false, status = { code = 400, message =
        'expected a AdmissionReview of admission.k8s.io/v1, got kind "Pod" apiVersion "v1"' } },
        kube.json.decode(r.body).response)
    end)

    it("answers another content type with code 400", function()
      local r = post("/validate", "{}", { ["Content-Type"] = "text/plain" })
      assert.same({ uid = "", allowed = false, status = { code = 400,
        message = "contentType=text/plain, expected application/json" } },
        kube.json.decode(r.body).response)
    end)

    it("answers 404 for a path no webhook has, 405 for a GET", function()
      assert.equal(404, post("/nothing", "{}").status)
      local r = assert(http.request{ url = base .. "/validate", tls = tls })
      assert.equal(405, r.status)
    end)

    it("refuses a body over 7 MiB with 413, over HTTP/1.1 and HTTP/2 alike", function()
      -- curl in a child process, since the loop must go on serving (a body
      -- whose DATA passes the bound over HTTP/2: spec/c/test_httpd.c)
      local big = support.tempfile(string.rep(" ", 7 * 1024 * 1024 + 1))
      local log, out = dir .. "/curl.log", dir .. "/curl.out"
      for _, way in ipairs{ { "--http1.1", "--data-binary", "@" .. big },
        { "--http2", "--data-binary", "@" .. big } } do
        os.remove(log)
        os.remove(out)
        local args = { "-s", "-S", "--cacert", tls.ca_file, "-o", out, "-w",
          "%{http_version} %{http_code}", "-H", "Content-Type: application/json",
          base .. "/validate" }
        for _, a in ipairs(way) do args[#args + 1] = a end
        local p = process.spawn{ path = "/usr/bin/curl", log = log, args = args }
        assert.is_true(support.eventually(function() return p:poll() ~= nil end, 60))
        assert.equal(way[1]:sub(7) .. " 413", support.read(log))
        assert.equal("413 Request Entity Too Large", support.read(out))
      end
      os.remove(big)
    end)

    it("counts requests by webhook and code, in flight, and their latency", function()
      local text = kube.metrics.render()
      local function value(series)
        return tonumber(text:match("\n" .. series:gsub("[%p]", "%%%0") .. " (%S+)"))
      end
      local before = value('controller_runtime_webhook_requests_total{webhook="/noop",'
        .. 'code="200"}') or 0
      local hist = value('controller_runtime_webhook_latency_seconds_count{webhook="/noop"}') or 0
      review("/noop", admission("m-1", greeting("hi")))
      text = kube.metrics.render()
      assert.equal(before + 1, value('controller_runtime_webhook_requests_total{webhook="/noop",'
        .. 'code="200"}'))
      assert.equal(hist + 1,
        value('controller_runtime_webhook_latency_seconds_count{webhook="/noop"}'))
      assert.equal(0, value('controller_runtime_webhook_requests_in_flight{webhook="/noop"}'))
      assert.equal(1, value('controller_runtime_webhook_requests_total{webhook="/validate",'
        .. 'code="405"}'))
      assert.truthy(text:find('controller_runtime_webhook_latency_seconds_bucket{webhook='
        .. '"/noop",le="0.005"}', 1, true))
    end)

    it("loads a rotated certificate for new connections; a key that does not match, once", function()
      local second
      local logs = capture_logs(function()
        second = make_cert("second")
        assert.is_true(support.eventually(function()
          local r = http.request{ method = "POST", url = base .. "/noop", tls = { ca_file = second },
            headers = { ["Content-Type"] = "application/json" }, body = "{}" }
          return r ~= nil
        end))
      end)
      assert.same({ { level = "info", msg = "webhook: loaded the new certificate "
        .. dir .. "/tls.crt" } }, logs)
      tls = { ca_file = second }
      -- a key that does not match is refused once, the served one stays
      logs = capture_logs(function()
        sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
          .. " -keyout " .. dir .. "/tls.key -out /dev/null -subj /CN=x -days 1")
        kube.sleep(0.3)
      end)
      assert.equal(1, #logs)
      assert.matches("^webhook: cannot load the new certificate, the old one stays: TLS key "
        .. dir:gsub("%p", "%%%0") .. "/tls.key: .*key values mismatch$", logs[1].msg)
      assert.equal(200, post("/noop", "{}").status)
    end)
  end)

  describe("kubelua run --webhook-bind-address", function()
    local script = [[
      local kube = require "kubelua"
      kube.webhook{ path = "/v", validate = function() return true end }
      kube.spawn(function() kube.stop(0) end)
    ]]

    it("serves with the certificate in --webhook-cert-dir", function()
      make_cert("third")
      local status, out = support.run_script(script, "", "--webhook-bind-address 127.0.0.1:0"
        .. " --webhook-cert-dir " .. dir)
      assert.equal(0, status)
      assert.matches("INFO  webhook: serving on https://127%.0%.0%.1:%d+\n", out)
    end)

    it("fails at the start, naming the file, when the certificate cannot be read", function()
      local status, out = support.run_script(script, "", "--webhook-bind-address 127.0.0.1:0"
        .. " --webhook-cert-dir " .. dir .. "/none")
      assert.equal(1, status)
      assert.matches("ERROR webhook: cannot listen on 127%.0%.0%.1:0: httpd%.listen: TLS "
        .. "certificate " .. dir:gsub("%p", "%%%0") .. "/none/tls%.crt: ", out)
      assert.falsy(out:find("serving on", 1, true))
    end)

    it("is off by default outside a pod", function()
      local status, out = support.run_script(script, "", "")
      assert.equal(0, status)
      assert.falsy(out:find("webhook:", 1, true))
    end)
  end)
end)


describe("kube.webhook's server started by the first webhook (in a pod)", function()
  local generation = require "kubelua.generation"
  local script

  local function write_script(version)
    local f = assert(io.open(script, "w"))
    f:write(([[
      local kube = require "kubelua"
      kube.webhook{ path = "/v", validate = function() return false, %q end }
    ]]):format(version))
    f:close()
  end

  local function message(ca_file)
    local r = http.request{ method = "POST", url = base .. "/v", tls = { ca_file = ca_file },
      headers = { ["Content-Type"] = "application/json" }, body = kube.json.encode{
        apiVersion = "admission.k8s.io/v1", kind = "AdmissionReview",
        request = admission("r-1", greeting("hi")) } }
    return r and kube.json.decode(r.body).response.status.message
  end

  setup(function()
    dir = sh("mktemp -d"):gsub("%s+$", "")
    script = dir .. "/hooks.lua"
  end)

  teardown(function()
    generation.unload()
    webhook.stop()
    os.execute("rm -rf " .. dir)
  end)

  it("keeps serving, and loading a rotated certificate, after the script reloads", function()
    local first = make_cert("first")
    assert.is_true(webhook.serve{ lazy = true, address = "127.0.0.1:0", cert_dir = dir,
      poll = 0.05 })
    write_script("v1")
    local logs = capture_logs(function() assert(generation.load(script)) end)
    assert.equal(1, #logs)
    local port = logs[1].msg:match("^webhook: serving on https://127%.0%.0%.1:(%d+)$")
    assert.truthy(port, logs[1].msg)
    base = "https://127.0.0.1:" .. port
    assert.equal("v1", message(first))

    write_script("v2")
    assert(generation.reload(true))
    assert.equal("v2", message(first))
    local second
    logs = capture_logs(function()
      second = make_cert("second")
      assert.is_true(support.eventually(function() return message(second) == "v2" end, 10))
    end)
    assert.same({ { level = "info", msg = "webhook: loaded the new certificate "
      .. dir .. "/tls.crt" } }, logs)
  end)
end)

describe("kube.webhook's server and slow or oversize clients", function()
  local metrics = require "kubelua.metrics"
  local health, ca

  setup(function()
    dir = sh("mktemp -d"):gsub("%s+$", "")
    ca = make_cert("limits")
    tls = { ca_file = ca }
    local srv = assert(webhook.serve{ address = "127.0.0.1:0", cert_dir = dir,
      read_timeout = 2, idle_timeout = 1, max_header_bytes = 4096 })
    base = "https://127.0.0.1:" .. srv:port()
    local logs = capture_logs(function() assert(metrics.serve{ probes = "127.0.0.1:0" }) end)
    health = "http://127.0.0.1:" .. assert(logs[1].msg:match(":(%d+)/healthz")) .. "/healthz"
    kube.webhook{ path = "/limits", validate = function() return true end }
  end)

  teardown(function()
    webhook.stop()
    os.execute("rm -rf " .. dir)
  end)

  -- A TLS client in a child process (openssl s_client) that sends what
  -- `feed` (shell commands) writes, and ends when the server closes;
  -- -> its process and the file that gets what the server answered.
  local function raw_client(feed)
    local out = os.tmpname()
    local p = process.spawn{ path = "/bin/bash", log = out, args = { "-c",
      "exec openssl s_client -quiet -connect " .. base:match("//(.*)") .. " 2>/dev/null < <("
      .. feed .. ")" } }
    return p, out
  end

  local function finished(p, secs)
    return support.eventually(function() return p:poll() ~= nil end, secs)
  end

  it("answers a client that trickles its head a byte a second 408 at the read timeout,"
    .. " and closes; others are served meanwhile", function()
    local head = "POST /limits HTTP/1.1\\r\\nHost: x\\r\\n"
    local feed = {}
    for i = 1, 30 do feed[i] = "printf '" .. head:sub(i, i) .. "'; sleep 1" end
    local t0 = kube.monotonic()
    local p, out = raw_client(table.concat(feed, "; "))
    for i = 1, 3 do
      kube.sleep(0.3)
      local resp = review("/limits", admission("s-" .. i, greeting("hi"))).response
      assert.same({ uid = "s-" .. i, allowed = true, status = { code = 200 } }, resp)
      local r = assert(http.request{ url = health })
      assert.equal(200, r.status)
      assert.equal("ok", r.body)
    end
    -- the head alone would take 30 s to arrive
    assert.is_true(finished(p, 25))
    local took = kube.monotonic() - t0
    assert.is_true(took >= 2, took)
    assert.equal("HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\n"
      .. "Content-Length: 19\r\nConnection: close\r\n\r\n408 Request Timeout", support.read(out))
    os.remove(out)
  end)

  it("prefers AES-128-GCM among the TLS 1.3 suites, as Go's servers do", function()
    local out = os.tmpname()
    -- openssl's own client lists AES-256-GCM first
    local p = process.spawn{ path = "/bin/bash", log = out, args = { "-c",
      "openssl s_client -brief -connect " .. base:match("//(.*)") .. " </dev/null 2>&1"
      .. " | grep -E '^(Protocol version|Ciphersuite):'" } }
    assert.is_true(finished(p, 30))
    assert.equal("Protocol version: TLSv1.3\nCiphersuite: TLS_AES_128_GCM_SHA256\n",
      support.read(out))
    os.remove(out)
  end)

  it("closes a keep-alive connection left idle for idle_timeout, after its answers", function()
    local t0 = kube.monotonic()
    local p, out = raw_client("printf 'GET /none HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'; sleep 30")
    assert.is_true(finished(p, 25))
    local took = kube.monotonic() - t0
    assert.is_true(took >= 1, took)
    assert.equal("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
      .. "Content-Length: 19\r\n\r\n404 page not found\n", support.read(out))
    os.remove(out)
  end)

  it("answers a head over max_header_bytes 431, over HTTP/1.1 and HTTP/2", function()
    local log, out = dir .. "/curl.log", dir .. "/curl.out"
    for _, v in ipairs{ "--http1.1", "--http2" } do
      os.remove(log)
      os.remove(out)
      local p = process.spawn{ path = "/usr/bin/curl", log = log, args = { "-s", "-S", v,
        "--cacert", ca, "-o", out, "-w", "%{http_version} %{http_code}", "-H",
        "X-Big: " .. string.rep("b", 5000), base .. "/limits" } }
      assert.is_true(finished(p, 60))
      assert.equal(v:sub(7) .. " 431", support.read(log))
      assert.equal("431 Request Header Fields Too Large", support.read(out))
    end
  end)
end)
