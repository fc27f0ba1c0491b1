-- The container image as the Dockerfile declares it, for specs that run
-- what a container would run without building it: the final stage's
-- ENTRYPOINT, CMD and USER, and its files mapped to this checkout (the
-- entrypoint is the binary under test, a COPY of a directory of the
-- repository is that directory).
local json = require "kubelua.json"
local support = require "spec.support"

local _M = {}

local function first_line(cmd)
  local p = io.popen(cmd)
  local line = p:read("*l")
  p:close()
  return line
end

local function instruction(stage, name)
  local value = stage:match("\n" .. name .. " ([^\n]+)")
  return value
end

-- Parses text (the Dockerfile); returns { entrypoint = {...}, cmd = {...},
-- user = "uid:gid", base = "scratch", paths = { [image path] = host path } }.
function _M.parse(text)
  local final = ("\n" .. text):match(".*(\nFROM .*)$")
  assert(final, "the Dockerfile has no FROM")
  local img = { base = final:match("^\nFROM (%S+)"), user = instruction(final, "USER"),
                paths = {} }
  for _, name in ipairs({ "ENTRYPOINT", "CMD" }) do
    local value = instruction(final, name)
    img[name:lower()] = value and assert(json.decode(value), name .. " is not an exec form")
  end
  local cwd = first_line("pwd")
  for src, dst in final:gmatch("\nCOPY (%S+) (%S+)") do
    if not src:match("^%-%-") then img.paths[dst] = src:match("^/") and src or cwd .. "/" .. src end
  end
  return img
end

-- The image of this checkout's Dockerfile.
function _M.load()
  return _M.parse(support.read("Dockerfile"))
end

-- The command line of a container (Kubernetes' rule: command replaces the
-- ENTRYPOINT, args the CMD; command alone drops the CMD) with the image's
-- paths mapped to the host: the entrypoint's binary to the one under test,
-- a COPY's destination to its source, and mounts (image path → host
-- directory) to theirs.
function _M.argv(img, command, args, mounts)
  local argv = {}
  for _, a in ipairs(command or img.entrypoint or {}) do argv[#argv + 1] = a end
  for _, a in ipairs(args or (not command and img.cmd) or {}) do argv[#argv + 1] = a end
  assert(argv[1] == (img.entrypoint or {})[1], "the command runs " .. tostring(argv[1])
    .. ", not the image's entrypoint")
  argv[1] = first_line("readlink -f " .. support.kubelua)
  local maps = {}
  for dst, src in pairs(img.paths) do maps[#maps + 1] = { dst, src } end
  for dst, src in pairs(mounts or {}) do maps[#maps + 1] = { dst, src } end
  for i = 2, #argv do
    for _, m in ipairs(maps) do
      local dst = m[1]:gsub("/$", "")
      if argv[i]:sub(1, #dst + 1) == dst .. "/" then
        argv[i] = m[2]:gsub("/$", "") .. argv[i]:sub(#dst + 1)
      end
    end
  end
  return argv
end

return _M
