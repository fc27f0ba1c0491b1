-- HTTP/2 over TLS, negotiated by ALPN as with a real kube-apiserver: curl
-- against a `kubelua sim` process, and kubelua's own client (libcurl,
-- which multiplexes requests on one h2 connection as client-go does)
-- against a simulator and a bare kubelua.httpd server in this process.
-- A certificate for 127.0.0.1 is made here with the openssl CLI.
local kube = require "kubelua"
local http = require "kubelua.http"
local httpd = require "kubelua.httpd"
local simulator = require "kubelua.sim"
local H = require "spec.integration.sim_helper"

local dir, cert, key

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("*a")
  p:close()
  return out
end

local function curl(args)
  return sh("curl -s -S --cacert " .. cert .. " " .. args)
end

-- Polls in the task until fn() is truthy, a bounded number of times.
local function wait(fn)
  for _ = 1, 3000 do
    if fn() then return end
    kube.sleep(0.01)
  end
  error("gave up waiting", 2)
end

local function configmap(ns, name)
  return kube.json.encode{ apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = name, namespace = ns }, data = { k = name } }
end

describe("HTTP/2", function()
  setup(function()
    dir = sh("mktemp -d"):gsub("%s+$", "")
    cert, key = dir .. "/server.crt", dir .. "/server.key"
    local out = sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
      .. " -nodes -keyout " .. key .. " -out " .. cert .. " -subj /CN=localhost"
      .. " -addext subjectAltName=IP:127.0.0.1 -days 1")
    assert(H.read_file(cert), "openssl could not make a certificate: " .. out)
  end)

  teardown(function() os.execute("rm -rf " .. dir) end)

  describe("with curl against kubelua sim", function()
    local sim

    setup(function() sim = H.start("--tls-cert " .. cert .. " --tls-key " .. key) end)
    teardown(function() H.stop(sim) end)

    it("answers /version and a list over h2", function()
      local out = curl("--http2 -i " .. sim.base .. "/version")
      assert.matches("^HTTP/2 200 \r\n", out)
      assert.matches('"gitVersion": "v1.26.0"', out, 1, true)
      out = curl("--http2 -i " .. sim.base .. "/api/v1/namespaces/default/configmaps")
      assert.matches("^HTTP/2 200 \r\n", out)
      assert.matches("\r\ncontent%-type: application/json\r\n", out)
      assert.matches('"kind": "ConfigMapList"', out, 1, true)
    end)

    it("creates an object from a POST body sent over h2", function()
      local body = configmap("default", "posted")
      local out = curl("--http2 -i -X POST -H 'Content-Type: application/json' --data-binary "
        .. H.quote(body) .. " " .. sim.base .. "/api/v1/namespaces/default/configmaps")
      assert.matches("^HTTP/2 201 \r\n", out)
      out = curl("--http2 " .. sim.base .. "/api/v1/namespaces/default/configmaps/posted")
      local obj = kube.json.decode(out)
      assert.equal("posted", obj.metadata.name)
      assert.equal("posted", obj.data.k)
    end)

    it("still speaks HTTP/1.1 to a client that asks for it", function()
      local out = curl("--http1.1 -i " .. sim.base .. "/version")
      assert.matches("^HTTP/1.1 200 OK\r\n", out)
      assert.matches('"gitVersion": "v1.26.0"', out, 1, true)
    end)

    it("carries two watches on one connection, each with its events", function()
      local a, b, err = dir .. "/a.out", dir .. "/b.out", dir .. "/watch.err"
      local ns = sim.base .. "/api/v1/namespaces/"
      local bg = io.popen("curl -s -S -v -N -Z --http2 --cacert " .. cert .. " -o " .. a
        .. " " .. H.quote(ns .. "wa/configmaps?watch=1") .. " -o " .. b .. " "
        .. H.quote(ns .. "wb/configmaps?watch=1") .. " 2>" .. err)
      -- both watches are open once the simulator answers a change in each
      for _, n in ipairs{ "wa", "wb" } do
        curl("-X POST -H 'Content-Type: application/json' --data-binary "
          .. H.quote(kube.json.encode{ apiVersion = "v1", kind = "Namespace",
            metadata = { name = n } }) .. " " .. sim.base .. "/api/v1/namespaces")
      end
      local function has(file, name)
        return (H.read_file(file) or ""):find('"name":"' .. name .. '"', 1, true)
      end
      local seen
      for round = 1, 100 do -- an object in each namespace, until each watch saw one
        for _, n in ipairs{ "wa", "wb" } do
          curl("-X POST -H 'Content-Type: application/json' --data-binary "
            .. H.quote(configmap(n, "c" .. round)) .. " " .. ns .. n .. "/configmaps")
        end
        H.sleep(0.05)
        seen = has(a, "c" .. round) and has(b, "c" .. round)
        if seen then break end
      end
      assert.truthy(seen, H.read_file(err))
      curl("-X POST --data-binary '{\"drop_watches\":\"end\"}' " .. sim.base .. "/_sim/faults")
      bg:read("*a")
      bg:close()
      local log = H.read_file(err)
      local _, connects = log:gsub("Connected to 127%.0%.0%.1", "")
      assert.equal(1, connects)
      assert.matches("Multiplexed connection found", log, 1, true)
      for file, n in pairs{ [a] = "wa", [b] = "wb" } do
        local out = H.read_file(file)
        assert.matches('{"type":"ADDED","object":{"apiVersion":"v1","data":{"k":"c1"}', out, 1, true)
        assert.matches('"namespace":"' .. n .. '"', out, 1, true)
        assert.is_nil(out:find('"namespace":"' .. (n == "wa" and "wb" or "wa") .. '"', 1, true))
      end
    end)
  end)

  it("tells an h2 client with GOAWAY when the simulator stops", function()
    local sim = H.start("--tls-cert " .. cert .. " --tls-key " .. key)
    local err = dir .. "/goaway.err"
    local bg = io.popen("curl -s -S -v -N --http2 --cacert " .. cert .. " -o /dev/null "
      .. H.quote(sim.base .. "/api/v1/namespaces/default/configmaps?watch=1") .. " 2>" .. err)
    for _ = 1, 500 do -- until the watch's response head has come
      if (H.read_file(err) or ""):find("< HTTP/2 200", 1, true) then break end
      H.sleep(0.01)
    end
    H.stop(sim)
    bg:read("*a")
    bg:close()
    assert.matches("GOAWAY, error=0, last_stream=1", H.read_file(err), 1, true)
  end)

  describe("with kubelua's client against a simulator in this process", function()
    local sim, srv, base, tls

    setup(function()
      sim = simulator.new{}
      srv = assert(sim:listen{ host = "127.0.0.1", port = 0, tls_cert = cert, tls_key = key })
      base = "https://127.0.0.1:" .. srv:port()
      tls = { ca_file = cert }
      for _, n in ipairs{ "m1", "m2" } do
        local r = http.request{ method = "POST", url = base .. "/api/v1/namespaces", tls = tls,
          headers = { ["Content-Type"] = "application/json" },
          body = kube.json.encode{ apiVersion = "v1", kind = "Namespace", metadata = { name = n } } }
        assert.equal(201, r.status)
      end
    end)

    teardown(function() srv:close() end)

    -- Starts a watch in a task; the table it returns gets r, err when it ends.
    local function watch(ns)
      local w = {}
      kube.spawn(function()
        w.r, w.err = http.request{ url = base .. "/api/v1/namespaces/" .. ns
          .. "/configmaps?watch=1&allowWatchBookmarks=false", tls = tls, timeout = 0 }
        w.done = true
      end)
      return w
    end

    local function create(ns, name)
      local r = http.request{ method = "POST", url = base .. "/api/v1/namespaces/" .. ns
        .. "/configmaps", tls = tls, headers = { ["Content-Type"] = "application/json" },
        body = configmap(ns, name) }
      assert.equal(201, r.status)
    end

    it("multiplexes two watches on one connection and delivers both", function()
      local before = srv:stats().accepted
      local w1, w2 = watch("m1"), watch("m2")
      wait(function() return srv:stats().streams == 2 end)
      create("m1", "one")
      create("m2", "two")
      local st = srv:stats()
      assert.equal(1, st.connections)
      assert.equal(before, st.accepted) -- the connection the setup opened
      sim:inject{ drop_watches = "end" }
      wait(function() return w1.done and w2.done end)
      assert.equal(200, w1.r.status)
      assert.equal(200, w2.r.status)
      -- each namespace's kube-root-ca.crt comes too
      local function own(body)
        for line in body:gmatch("[^\n]+") do
          local e = kube.json.decode(line)
          if e.object.metadata.name ~= "kube-root-ca.crt" then return e end
        end
      end
      local e1, e2 = own(w1.r.body), own(w2.r.body)
      assert.same({ "ADDED", "one", "m1" }, { e1.type, e1.object.metadata.name,
        e1.object.metadata.namespace })
      assert.same({ "ADDED", "two", "m2" }, { e2.type, e2.object.metadata.name,
        e2.object.metadata.namespace })
    end)

    it("resets a dropped watch's stream and goes on with the connection", function()
      local before = srv:stats().accepted
      local w = watch("m1")
      wait(function() return srv:stats().streams == 1 end)
      local out = sim:inject{ drop_watches = true }
      assert.equal(1, out.dropped)
      wait(function() return w.done end)
      assert.is_nil(w.r)
      assert.matches("HTTP/2 stream %d+ was not closed cleanly: INTERNAL_ERROR", w.err)
      local r = http.request{ url = base .. "/api/v1/namespaces/m1/configmaps", tls = tls }
      assert.equal(200, r.status)
      assert.equal("ConfigMapList", kube.json.decode(r.body).kind)
      local st = srv:stats()
      assert.equal(1, st.connections)
      assert.equal(before, st.accepted)
      assert.equal(0, st.streams)
    end)

    it("cuts a watch mid-object with a reset after the bytes asked for", function()
      local w = watch("m2")
      wait(function() return srv:stats().streams == 1 end)
      assert.equal(1, sim:inject{ watch_abort_after = 20 }.aborting)
      create("m2", "cut")
      wait(function() return w.done end)
      assert.is_nil(w.r)
      assert.matches("INTERNAL_ERROR", w.err)
      assert.equal(1, srv:stats().connections)
    end)
  end)

  describe("kubelua.httpd's streams", function()
    -- The client runs on this loop, so it reads nothing while a handler
    -- writes without yielding: the slowest reader there is.
    local state, held

    local function server(tls_on)
      return assert(httpd.listen{ host = "127.0.0.1", port = 0,
        tls_cert = tls_on and cert or nil, tls_key = tls_on and key or nil,
        max_stream_buffer = 256 * 1024, handler = function(req)
          if req:path() == "/hold" then
            held[req:param("id")] = req
            req:stream_begin(200)
            req:write("held\n")
            return
          end
          req:on_close(function(_, why) state.closed = why end)
          req:stream_begin(200)
          local chunk = string.rep("x", 16384)
          for _ = 1, 16384 do -- 256 MiB, far past any socket buffer
            local ok, err = req:write(chunk)
            if not ok then
              state.write = err
              state.buffered = req:buffered()
              return
            end
          end
          state.write = "all written"
        end })
    end

    local function get(base, path, opts)
      local w = {}
      kube.spawn(function()
        w.r, w.err = http.request{ url = base .. path, tls = opts, timeout = 0 }
        w.done = true
      end)
      return w
    end

    before_each(function() state, held = {}, {} end)

    it("reset one stream when its owner aborts it, and the others go on", function()
      local srv = server(true)
      local base = "https://127.0.0.1:" .. srv:port()
      local a = get(base, "/hold?id=a", { ca_file = cert })
      local b = get(base, "/hold?id=b", { ca_file = cert })
      wait(function() return held.a and held.b end)
      assert.is_true(held.a:abort(0))
      wait(function() return a.done end)
      assert.is_nil(a.r)
      assert.matches("INTERNAL_ERROR", a.err)
      assert.is_true(held.b:write("more\n"))
      assert.is_true(held.b:finish())
      wait(function() return b.done end)
      assert.equal("held\nmore\n", b.r.body)
      assert.same({ connections = 1, accepted = 1, streams = 0 },
        { connections = srv:stats().connections, accepted = srv:stats().accepted,
          streams = srv:stats().streams })
      srv:close()
    end)

    it("reset a slow reader's h2 stream at the cap, and the connection's others go on",
      function()
      local srv = server(true)
      local base = "https://127.0.0.1:" .. srv:port()
      local hold = get(base, "/hold?id=h", { ca_file = cert })
      wait(function() return held.h end)
      local flood = get(base, "/flood", { ca_file = cert })
      wait(function() return flood.done and state.closed end)
      assert.equal("limit", state.write)
      assert.equal("limit", state.closed)
      assert.equal(0, state.buffered) -- the request ended with its stream
      assert.is_nil(flood.r)
      assert.matches("INTERNAL_ERROR", flood.err)
      assert.equal(1, srv:stats().accepted)
      assert.equal(1, srv:stats().streams)
      assert.is_true(held.h:write("more\n"))
      assert.is_true(held.h:finish())
      wait(function() return hold.done end)
      assert.equal(200, hold.r.status)
      assert.equal("held\nmore\n", hold.r.body)
      assert.equal(1, srv:stats().accepted)
      srv:close()
    end)

    it("close a slow reader's HTTP/1.1 connection at the same cap", function()
      local srv = server(false)
      local base = "http://127.0.0.1:" .. srv:port()
      local flood = get(base, "/flood")
      wait(function() return flood.done and state.closed end)
      assert.equal("limit", state.write)
      assert.equal("limit", state.closed)
      assert.is_nil(flood.r)
      assert.equal(0, srv:stats().connections)
      srv:close()
    end)
  end)
end)
