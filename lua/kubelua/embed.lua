-- kubelua.embed: the data files that the build put inside the binary
-- (runtime/tools/embed.c): each an array of kl_embed_file_t exported from
-- the executable, every file compressed on its own with zstd and
-- decompressed here when it is first asked for.
--
--   kl_surface_openapi   the real server's OpenAPI v3 (data/surface/openapi)
--   kl_deploy_base       the runtime's kustomize base (deploy/base)

local ffi = require "ffi"

ffi.cdef [[
typedef struct kl_embed_file {
  const char *name;
  const unsigned char *data;
  size_t size;
  size_t raw_size;
} kl_embed_file_t;
extern const kl_embed_file_t kl_surface_openapi[];
extern const kl_embed_file_t kl_deploy_base[];
size_t ZSTD_decompress(void *dst, size_t dstCapacity, const void *src, size_t compressedSize);
unsigned ZSTD_isError(size_t code);
]]

local tonumber = tonumber

local _M = {}

local sets = {} -- symbol → { file name → its kl_embed_file_t }, on first use

-- The names of the files in set `symbol` (one of the above), sorted.
function _M.names(symbol)
  local set = sets[symbol]
  if not set then
    set = {}
    local t = ffi.C[symbol]
    local i = 0
    while t[i].name ~= nil do
      set[ffi.string(t[i].name)] = t[i]
      i = i + 1
    end
    sets[symbol] = set
  end
  local names = {}
  for name in pairs(set) do names[#names + 1] = name end
  table.sort(names)
  return names, set
end

-- The text of file `name` of set `symbol`, or nil when it has none such.
function _M.read(symbol, name)
  local _, set = _M.names(symbol)
  local f = set[name]
  if not f then return nil end
  local n = tonumber(f.raw_size)
  local buf = ffi.new("char[?]", n)
  local got = ffi.C.ZSTD_decompress(buf, n, f.data, f.size)
  assert(ffi.C.ZSTD_isError(got) == 0 and tonumber(got) == n, "embed: corrupt embedded "
    .. name)
  return ffi.string(buf, n)
end

return _M
