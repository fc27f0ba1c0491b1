-- Every manifest a user applies, as `kubectl apply -k` renders it
-- (spec/kustomize.lua): deploy/base, each example's overlay and the
-- projects `kubelua new` writes (with and without a kind of their own). Each
-- Deployment's command line (the image's ENTRYPOINT, as the Dockerfile
-- declares it, joined with the container's command and args) runs as in a
-- Pod: its own network and mount namespaces, the service-account token,
-- ca.crt and namespace where the kubelet mounts them, its ConfigMap volumes
-- at their mount paths, KUBERNETES_SERVICE_HOST/PORT, against `kubelua sim`
-- (TLS, the token) holding everything the overlay applies; it must pass
-- its readiness probe and stop with status 0 on SIGTERM. Every pod passes
-- the restricted Pod Security Standard, so a manifest and the image cannot
-- disagree again.
local image = require "spec.image"
local json = require "kubelua.json"
local kustomize = require "spec.kustomize"
local support = require "spec.support"

local quote = require("spec.integration.sim_helper").quote
local SA = "/var/run/secrets/kubernetes.io/serviceaccount"
local VOLUME_TYPES = { configMap = true, csi = true, downwardAPI = true, emptyDir = true,
                       ephemeral = true, persistentVolumeClaim = true, projected = true,
                       secret = true }

local function sh(cmd)
  local status, out = support.sh(cmd)
  assert(status == 0, cmd .. "\n" .. out)
  return out
end

local function lines(cmd)
  local out = {}
  for l in sh(cmd):gmatch("[^\n]+") do out[#out + 1] = l end
  return out
end

-- The restricted level of the Pod Security Standards (v1.26 and later):
-- returns its violations in pod (a PodSpec), as "field: what" strings.
local function restricted(pod)
  local v = {}
  local psc = pod.securityContext or {}
  for _, f in ipairs({ "hostNetwork", "hostPID", "hostIPC" }) do
    if pod[f] then v[#v + 1] = f .. ": must not be true" end
  end
  for _, vol in ipairs(pod.volumes or {}) do
    local ok = false
    for k in pairs(vol) do ok = ok or VOLUME_TYPES[k] ~= nil end
    if not ok then v[#v + 1] = "volumes[" .. tostring(vol.name) .. "]: a restricted volume type" end
  end
  local all = {}
  for _, c in ipairs(pod.containers or {}) do all[#all + 1] = c end
  for _, c in ipairs(pod.initContainers or {}) do all[#all + 1] = c end
  for _, c in ipairs(all) do
    local csc = c.securityContext or {}
    local at = "containers[" .. tostring(c.name) .. "]."
    if csc.privileged then v[#v + 1] = at .. "securityContext.privileged: must not be true" end
    if csc.allowPrivilegeEscalation ~= false then
      v[#v + 1] = at .. "securityContext.allowPrivilegeEscalation: must be false"
    end
    local caps = csc.capabilities or {}
    local drops_all = false
    for _, d in ipairs(caps.drop or {}) do drops_all = drops_all or d == "ALL" end
    if not drops_all then v[#v + 1] = at .. "securityContext.capabilities.drop: must include ALL" end
    for _, a in ipairs(caps.add or {}) do
      if a ~= "NET_BIND_SERVICE" then
        v[#v + 1] = at .. "securityContext.capabilities.add: must not add " .. a
      end
    end
    local non_root = csc.runAsNonRoot
    if non_root == nil then non_root = psc.runAsNonRoot end
    if non_root ~= true then v[#v + 1] = at .. "securityContext.runAsNonRoot: must be true" end
    if csc.runAsUser == 0 or (csc.runAsUser == nil and psc.runAsUser == 0) then
      v[#v + 1] = at .. "securityContext.runAsUser: must not be 0"
    end
    local seccomp = (csc.seccompProfile or psc.seccompProfile or {}).type
    if seccomp ~= "RuntimeDefault" and seccomp ~= "Localhost" then
      v[#v + 1] = at .. "securityContext.seccompProfile.type: must be RuntimeDefault or Localhost"
    end
    for _, p in ipairs(c.ports or {}) do
      if p.hostPort and p.hostPort ~= 0 then v[#v + 1] = at .. "ports.hostPort: must not be set" end
    end
  end
  return v
end

local function find(objects, kind, namespace, name)
  for _, o in ipairs(objects) do
    if o.kind == kind and o.metadata.name == name and (o.metadata.namespace == namespace) then
      return o
    end
  end
end

-- The port a probe's httpGet names (a container port's name or a number).
local function probe_port(c, probe)
  local port = probe.httpGet.port
  for _, p in ipairs(c.ports or {}) do
    if p.name == port then return p.containerPort end
  end
  return tonumber(port)
end

local function graceful_timeout(args)
  for i, a in ipairs(args) do
    local v = a:match("^%-%-graceful%-shutdown%-timeout=(%d+)$")
      or a:match("^%-%-shutdown%-timeout=(%d+)$")
    if v then return tonumber(v) end
    if a == "--graceful-shutdown-timeout" or a == "--shutdown-timeout" then
      return tonumber(args[i + 1])
    end
  end
  return 30
end

local overlays = lines("ls -d examples/*/kustomization.yaml | sed 's#/kustomization.yaml##'")
local projects = os.tmpname()
os.remove(projects)
sh("k=$(readlink -f " .. quote(support.kubelua) .. ") && mkdir " .. projects .. " && cd "
  .. projects .. " && $k new plain >/dev/null && $k new typed --kind Backup >/dev/null")
local examples = #overlays
overlays[#overlays + 1] = projects .. "/plain"
overlays[#overlays + 1] = projects .. "/typed"
-- overlays of an example's overlay (its webhooks: a Secret volume, cert-manager's
-- objects): checked as manifests, not run as a Pod here
local nested = lines("ls -d examples/*/*/kustomization.yaml | sed 's#/kustomization.yaml##'")

describe("the restricted Pod Security check", function()
  it("names what a pod without the settings violates", function()
    assert.same({
      "hostNetwork: must not be true",
      "volumes[host]: a restricted volume type",
      "containers[c].securityContext.allowPrivilegeEscalation: must be false",
      "containers[c].securityContext.capabilities.drop: must include ALL",
      "containers[c].securityContext.capabilities.add: must not add SYS_ADMIN",
      "containers[c].securityContext.runAsNonRoot: must be true",
      "containers[c].securityContext.seccompProfile.type: must be RuntimeDefault or Localhost",
      "containers[c].ports.hostPort: must not be set",
    }, restricted({
      hostNetwork = true,
      volumes = { { name = "host", hostPath = { path = "/" } } },
      containers = { { name = "c", ports = { { containerPort = 80, hostPort = 80 } },
                       securityContext = { capabilities = { add = { "SYS_ADMIN" } } } } },
    }))
  end)
end)

describe("the manifests", function()
  local img = image.load()
  local files = {}
  local rendered = { ["deploy/base"] = kustomize.render("deploy/base", files) }
  for _, dir in ipairs(overlays) do rendered[dir] = kustomize.render(dir, files) end
  for _, dir in ipairs(nested) do rendered[dir] = kustomize.render(dir, files) end

  teardown(function() os.execute("rm -rf " .. quote(projects)) end)

  it("are every file under deploy/ and examples/*/deploy/, each in a kustomization", function()
    assert.is_true(examples >= 4)
    local all = lines("find deploy examples/*/deploy -name '*.yaml' ! -name kustomization.yaml"
      .. " | sort")
    local unused = {}
    for _, f in ipairs(all) do
      if not files[f] then unused[#unused + 1] = f end
    end
    assert.same({}, unused)
  end)

  for dir, objects in pairs(rendered) do
    describe(dir, function()
      for _, d in ipairs(objects) do
        if d.kind == "Deployment" then
          local pod = d.spec.template.spec

          it("runs Deployment " .. d.metadata.name .. " in a restricted pod", function()
            assert.same({}, restricted(pod))
          end)

          it("declares its image, ports, probes and a grace period past the shutdown timeout",
            function()
              for _, c in ipairs(pod.containers) do
                assert.equal("IfNotPresent", c.imagePullPolicy)
                assert.is_truthy(probe_port(c, c.livenessProbe))
                assert.is_truthy(probe_port(c, c.readinessProbe))
                assert.is_true(pod.terminationGracePeriodSeconds > graceful_timeout(c.args or {}),
                  "terminationGracePeriodSeconds must outlast the graceful shutdown")
                for _, e in ipairs(c.env or {}) do
                  assert.is_nil(e.valueFrom, e.name .. ": only values are set")
                end
              end
            end)
        end
      end
    end)
  end

  for _, dir in ipairs(overlays) do
    it("runs " .. dir .. "'s command line as a Pod against the simulator", function()
      local objects = rendered[dir]
      local d = find(objects, "Deployment", "kubelua-system", "kubelua")
      assert.is_truthy(d, dir .. " has no Deployment kubelua-system/kubelua")
      local pod = d.spec.template.spec
      local c = pod.containers[1]
      local tmp = os.tmpname()
      os.remove(tmp)
      local token = "sa-token-" .. tostring(os.time())
      sh("mkdir -p " .. tmp .. "/sa " .. tmp .. "/load")
      sh("cd " .. tmp .. " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
        .. " -nodes -keyout tls.key -out tls.crt -subj /CN=kubernetes -days 1"
        .. " -addext subjectAltName=IP:127.0.0.1 2>/dev/null && cp tls.crt sa/ca.crt")
      local function write(path, text)
        local f = assert(io.open(path, "w"))
        f:write(text)
        f:close()
      end
      write(tmp .. "/sa/token", token)
      write(tmp .. "/sa/namespace", d.metadata.namespace)
      -- what `kubectl apply -k` creates, for the simulator to load (but
      -- RBAC: the simulator serves every user all it has)
      for i, o in ipairs(objects) do
        if not o.apiVersion:match("^rbac%.authorization%.k8s%.io/") then
          write(string.format("%s/load/%03d.json", tmp, i), json.encode(o))
        end
      end
      -- the ConfigMap volumes, at their mount paths
      local mounts = {}
      for _, vm in ipairs(c.volumeMounts or {}) do
        for _, vol in ipairs(pod.volumes or {}) do
          if vol.name == vm.name then
            assert.is_truthy(vol.configMap, vol.name .. ": only ConfigMap volumes here")
            local cm = find(objects, "ConfigMap", d.metadata.namespace, vol.configMap.name)
            assert.is_truthy(cm, "volume " .. vol.name .. ": ConfigMap " .. vol.configMap.name
              .. " is not in " .. dir)
            local host = tmp .. "/volumes/" .. vol.name
            sh("mkdir -p " .. host)
            for k, v in pairs(cm.data) do write(host .. "/" .. k, v) end
            mounts[vm.mountPath] = host
          end
        end
      end
      local words = {}
      for i, a in ipairs(image.argv(img, c.command, c.args, mounts)) do words[i] = quote(a) end
      local env = { "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=443" }
      for _, e in ipairs(c.env or {}) do env[#env + 1] = quote(e.name .. "=" .. e.value) end
      local probe = string.format("http://127.0.0.1:%d%s", probe_port(c, c.readinessProbe),
        c.readinessProbe.httpGet.path)
      local kubelua = words[1]
      local inner = table.concat({
        "ip link set lo up",
        "mount -t tmpfs tmpfs /run",
        "mkdir -p " .. SA .. " && cp " .. tmp .. "/sa/* " .. SA .. "/",
        kubelua .. " sim --listen 127.0.0.1:443 --token " .. token .. " --tls-cert " .. tmp
          .. "/tls.crt --tls-key " .. tmp .. "/tls.key --load " .. tmp .. "/load >"
          .. tmp .. "/sim.log 2>&1 & sim=$!",
        "i=0; until grep -q listening " .. tmp .. "/sim.log; do i=$((i+1));"
          .. " [ $i -lt 600 ] && kill -0 $sim 2>/dev/null || { cat " .. tmp .. "/sim.log; exit 3; };"
          .. " sleep 0.1; done",
        "(cd / && exec env -i " .. table.concat(env, " ") .. " " .. table.concat(words, " ")
          .. ") >" .. tmp .. "/pod.log 2>&1 & pod=$!",
        -- the kubelet's readiness probe, for up to a minute
        -- and the Lease: a pod whose controllers have not started yet (its
        -- script's first task still applies a CRD, say) may be ready with
        -- nothing to sync, then not until its caches sync
        "i=0; until code=$(curl -s -o /dev/null -w '%{http_code}' " .. probe .. ");"
          .. " [ \"$code\" = 200 ] && grep -q '\"leader election: leading\"' " .. tmp
          .. "/pod.log; do"
          .. " i=$((i+1)); [ $i -lt 600 ] && kill -0 $pod 2>/dev/null || break; sleep 0.1; done",
        "echo \"readiness: $code\"",
        "kill -TERM $pod; status=0; wait $pod || status=$?",
        "echo \"exit: $status\"",
        "kill -TERM $sim; wait $sim",
        "cat " .. tmp .. "/pod.log",
      }, "\n")
      local status, out = support.sh("unshare --mount --net sh -c " .. quote(inner))
      sh("rm -rf " .. quote(tmp))
      assert.equal(0, status, out)
      assert.matches("\nreadiness: 200\n", "\n" .. out, 1, true)
      assert.matches("\nexit: 0\n", out, 1, true)
      assert.matches('"msg":"leader election: leading"', out, 1, true)
      assert.is_nil(out:find('"level":"error"', 1, true), out)
      assert.is_nil(out:find(token, 1, true))
    end)
  end
end)
