-- bench/replay.lua, the benchmarks' API server: its lists are paged as
-- kube-apiserver 1.26 pages them, so that the list-then-watch figures
-- measure what a client meets there.
local kube = require "kubelua"
local http = require "kubelua.http"
local proc = require "bench.lib.proc"
local support = require "spec.support"

describe("bench/replay.lua", function()
  local pid, out, base
  setup(function()
    out = os.tmpname()
    pid = proc.start(proc.quote(support.kubelua) .. " run --no-watch bench/replay.lua 5 0 alike 1"
      .. " refuse", out, out .. ".err")
    local deadline = kube.monotonic() + 60
    while not base and kube.monotonic() < deadline do
      local port = (proc.read(out) or ""):match('"port":(%d+)')
      if port then base = "http://127.0.0.1:" .. port .. "/api/v1/pods" else kube.sleep(0.05) end
    end
    assert(base, (proc.read(out) or "") .. (proc.read(out .. ".err") or ""))
  end)
  teardown(function()
    os.execute("kill " .. pid)
    while proc.running(pid) do kube.sleep(0.01) end
    os.remove(out)
    os.remove(out .. ".err")
  end)

  local function list(query)
    local r = assert(http.request { url = base .. query })
    assert.equal(200, r.status)
    local l = kube.json.decode(r.body)
    return l.metadata, #l.items
  end

  it("pages a list by limit and continue", function()
    local meta, n = list("?limit=2")
    assert.same({ resourceVersion = "1005", continue = "next-3", remainingItemCount = 3 }, meta)
    assert.equal(2, n)
    meta, n = list("?limit=2&continue=next-5")
    assert.same({ resourceVersion = "1005" }, meta)
    assert.equal(1, n)
  end)

  it("serves a resourceVersion=0 list whole, ignoring limit, as the watch cache does", function()
    local meta, n = list("?limit=2&resourceVersion=0")
    assert.same({ resourceVersion = "1005" }, meta)
    assert.equal(5, n)
  end)
end)
