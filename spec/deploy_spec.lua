-- The container image and the manifests, checked without Docker or a
-- cluster: the manifests are what scripts/manifests writes and say what
-- issue 7 asks (replicas, probes, least privilege, a locked-down pod), the
-- image's runtime packages provide every library the binary links, and
-- the binary runs from a bare directory with an empty environment.
local yaml = require "kubelua.sim.yaml"
local support = require "spec.support"

local read = support.read

local function docs_by_kind(text)
  local docs = assert(yaml.decode_all(text))
  local out = {}
  for _, d in ipairs(docs) do
    out[d.kind] = out[d.kind] or {}
    table.insert(out[d.kind], d)
  end
  return out, docs
end

describe("deploy/kubelua.yaml", function()
  local text = read("deploy/kubelua.yaml")
  local kinds, docs = docs_by_kind(text)

  it("is what scripts/manifests writes", function()
    local status, out = support.sh("scripts/manifests")
    assert.equal(0, status)
    assert.equal(out, text)
  end)

  it("holds the example's script, unchanged, in its ConfigMap", function()
    assert.equal(1, #kinds.ConfigMap)
    assert.equal(read("examples/mirror/controller.lua"), kinds.ConfigMap[1].data["controller.lua"])
  end)

  it("runs two replicas with leader election, probes and a locked-down pod", function()
    assert.equal(1, #kinds.Deployment)
    local d = kinds.Deployment[1]
    assert.equal(2, d.spec.replicas)
    local pod = d.spec.template.spec
    assert.equal("kubelua", pod.serviceAccountName)
    assert.is_true(pod.securityContext.runAsNonRoot)
    assert.equal(65532, pod.securityContext.runAsUser)
    assert.equal("RuntimeDefault", pod.securityContext.seccompProfile.type)
    local c = pod.containers[1]
    assert.same({ "--leader-elect", "--leader-election-id=kubelua-mirror", "--log-format=json",
                  "/scripts/controller.lua", "--", "--demo=false" }, c.args)
    assert.same({ path = "/healthz", port = "health" }, c.livenessProbe.httpGet)
    assert.same({ path = "/readyz", port = "health" }, c.readinessProbe.httpGet)
    assert.is_false(c.securityContext.allowPrivilegeEscalation)
    assert.is_true(c.securityContext.readOnlyRootFilesystem)
    assert.same({ "ALL" }, c.securityContext.capabilities.drop)
    assert.equal("kubelua-controller", pod.volumes[1].configMap.name)
    assert.is_truthy(c.resources.requests.memory)
  end)

  it("grants only namespaced roles: leases and events, reads of the source, writes of the copies", function()
    assert.is_nil(kinds.ClusterRole)
    assert.is_nil(kinds.ClusterRoleBinding)
    local roles = {}
    for _, r in ipairs(kinds.Role) do roles[r.metadata.namespace .. "/" .. r.metadata.name] = r.rules end
    assert.same({ "get", "create", "update" }, roles["kubelua-system/kubelua-leader-election"][1].verbs)
    assert.same({ "get", "list", "watch" }, roles["demo/kubelua-mirror-source"][1].verbs)
    assert.same({ "configmaps" }, roles["mirror/kubelua-mirror-target"][1].resources)
    for _, b in ipairs(kinds.RoleBinding) do
      assert.same({ { kind = "ServiceAccount", name = "kubelua", namespace = "kubelua-system" } },
                  b.subjects)
    end
    for _, d in ipairs(docs) do assert.is_string(d.metadata.name) end
  end)
end)

describe("the Dockerfile", function()
  local dockerfile = read("Dockerfile")
  local final = dockerfile:match("\nFROM debian:12%-slim\n(.*)$")

  it("runs kubelua run as a numeric non-root user", function()
    assert.matches('\nUSER 65532:65532\n', final, 1, true)
    assert.matches('\nENTRYPOINT %["/usr/local/bin/kubelua", "run"%]\n', final)
  end)

  it("installs a package for every library the binary links", function()
    local pkgs = {}
    for p in final:match("apt%-get install %-y %-%-no%-install%-recommends(.-)&&"):gmatch("[%w%.%-+]+") do
      if p ~= "\\" then pkgs[#pkgs + 1] = p end
    end
    -- what those packages bring along, and what the base image has
    local status, closure = support.sh("{ apt-cache depends --recurse --no-recommends --no-suggests"
      .. " --no-conflicts --no-breaks --no-replaces --no-enhances " .. table.concat(pkgs, " ")
      .. " | grep -v '^ ' | sort -u; dpkg-query -W -f='${Package} ${Priority}\\n'"
      .. " | awk '$2 == \"required\" {print $1}'; }")
    assert.equal(0, status)
    local have = {}
    for p in closure:gmatch("[^\n]+") do have[p:gsub(":.*", "")] = true end
    -- one dpkg -S for all (it reads every file list each time); a library
    -- may be known under its symlink's name or its real file's
    local _, libs = support.sh("ldd " .. support.kubelua .. " | awk '/=> \\// {print $3}'")
    local paths, wanted = {}, {}
    -- the sanitizer build's runtime (and the C++ library it brings) is not
    -- part of a release image
    local sanitized = libs:find("/libasan%.") ~= nil
    for lib in libs:gmatch("[^\n]+") do
      if not lib:find("/lib[at]san%.") and not lib:find("/libubsan%.")
         and not (sanitized and lib:find("/libstdc%+%+%.")) then
        wanted[#wanted + 1] = lib
        local _, real = support.sh("readlink -f " .. lib)
        paths[#paths + 1] = lib
        paths[#paths + 1] = (real:gsub("%s+$", ""))
      end
    end
    local _, owners = support.sh("dpkg -S " .. table.concat(paths, " ") .. " 2>/dev/null")
    local owner_of = {}
    for pkg, path in owners:gmatch("([^:\n]+):[^:\n]*: ([^\n]+)") do owner_of[path] = pkg end
    local n = 0
    for i, lib in ipairs(wanted) do
      local owner = owner_of[lib] or owner_of[paths[2 * i]] or "nothing"
      assert.is_true(have[owner] == true, lib .. " comes from " .. owner
        .. ", which the image does not install")
      n = n + 1
    end
    assert.is_true(n >= 5)
  end)

  it("needs nothing but the binary: it runs the demo from a bare directory", function()
    local stage = os.tmpname()
    os.remove(stage)
    assert.equal(0, (support.sh("mkdir -p " .. stage .. "/bin && cp " .. support.kubelua .. " "
      .. stage .. "/bin/ && cp examples/mirror/controller.lua " .. stage .. "/")))
    local status, out = support.sh("cd / && env -i " .. stage .. "/bin/kubelua run --sim "
      .. stage .. "/controller.lua")
    os.execute("rm -rf " .. stage)
    assert.equal(0, status)
    assert.matches("the copies match their sources; stopping", out, 1, true)
  end)
end)
