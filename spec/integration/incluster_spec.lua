-- `kubelua run` as it runs in a Pod, without Docker or a cluster: no flags,
-- an empty environment but KUBERNETES_SERVICE_HOST/PORT, and the
-- service-account token, ca.crt and namespace at the path the kubelet
-- mounts them (/var/run/secrets/kubernetes.io/serviceaccount, put there in
-- a private mount namespace), against the simulator over TLS with a token.
local support = require "spec.support"
local helper = require "spec.integration.sim_helper"

local quote = helper.quote

local function sh(cmd)
  local status, out = support.sh(cmd)
  assert(status == 0, cmd .. "\n" .. out)
  return out
end

describe("kubelua run in a Pod", function()
  local dir, sim
  local token = "sa-token-" .. tostring(os.time())

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    sh("mkdir -p " .. dir .. "/sa")
    sh("cd " .. dir .. " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
      .. " -nodes -keyout tls.key -out tls.crt -subj /CN=kubernetes -days 1"
      .. " -addext subjectAltName=IP:127.0.0.1")
    sh("cp " .. dir .. "/tls.crt " .. dir .. "/sa/ca.crt")
    for name, text in pairs({ token = token, namespace = "team-a" }) do
      local f = assert(io.open(dir .. "/sa/" .. name, "w"))
      f:write(text)
      f:close()
    end
    sim = helper.start("--token " .. token .. " --tls-cert " .. dir .. "/tls.crt --tls-key "
      .. dir .. "/tls.key")
  end)

  teardown(function()
    helper.stop(sim)
    sh("rm -rf " .. quote(dir))
  end)

  it("finds the service account and the namespace, and verifies the server", function()
    local script = support.tempfile([[
      local kube = require "kubelua"
      kube.after(20, function() kube.stop(3) end) -- never hang the spec
      kube.spawn(function()
        assert(kube.connect())
        local c = kube.connection()
        kube.log.info("connected", { origin = c.origin, server = c.server, namespace = c.namespace })
        local _, err = kube.create{ apiVersion = "v1", kind = "Namespace",
                                    metadata = { name = c.namespace } }
        if err then error(tostring(err)) end
        local cms = kube.informer("v1", "configmaps", { namespace = c.namespace })
        _, err = kube.create{ apiVersion = "v1", kind = "ConfigMap",
                              metadata = { name = "from-pod", namespace = c.namespace } }
        if err then error(tostring(err)) end
        assert(kube.wait_for_sync(cms, 10))
        for _ = 1, 200 do
          if cms:get(c.namespace .. "/from-pod") then break end
          kube.sleep(0.02)
        end
        kube.log.info("cached", { key = cms:list_keys()[1] })
        kube.stop()
      end)
    ]], ".lua")
    local bin = sh("readlink -f " .. support.kubelua):gsub("%s+$", "")
    local sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    local inner = "mount -t tmpfs tmpfs /run && mkdir -p " .. sa .. " && cp " .. dir .. "/sa/* "
      .. sa .. "/ && exec " .. bin .. " run --metrics-bind-address 127.0.0.1:0"
      .. " --health-probe-bind-address 127.0.0.1:0 " .. script
    local status, out = support.sh("cd / && env -i KUBERNETES_SERVICE_HOST=127.0.0.1"
      .. " KUBERNETES_SERVICE_PORT=" .. sim.port .. " unshare --mount sh -c " .. quote(inner))
    os.remove(script)
    assert.equal(0, status, out)
    assert.matches("INFO  connected namespace=team-a origin=in-cluster server=https://127.0.0.1:"
      .. sim.port .. "\n", out, 1, true)
    assert.matches("INFO  cached key=team-a/from-pod\n", out, 1, true)
    assert.matches("INFO  probes: serving on http://127.0.0.1:%d+/healthz and /readyz\n", out)
    assert.is_nil(out:find(token, 1, true))
  end)
end)
