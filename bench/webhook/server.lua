-- bench/webhook/server.lua: kubelua's side of bench/webhook.lua, its own
-- process: the webhook server on 127.0.0.1 (an ephemeral port, written to
-- PORT_FILE) with tls.crt and tls.key from CERT_DIR, and a validating
-- webhook that reads one field of the object: /validate decodes the review
-- whole, /validate-view reads it through a view (read_only = true).
-- Usage: kubelua run --no-watch bench/webhook/server.lua CERT_DIR PORT_FILE
local kube = require "kubelua"
local webhook = require "kubelua.webhook"

local srv = assert(webhook.serve{ address = "127.0.0.1:0", cert_dir = arg[1] })
local function validate(req)
  local name = req.object.metadata.name
  if name == "" then return false, "metadata.name is empty" end
  return true
end
kube.webhook{ path = "/validate", validate = validate }
kube.webhook{ path = "/validate-view", validate = validate, read_only = true }
local f = assert(io.open(arg[2] .. ".new", "w"))
f:write(srv:port(), "\n")
f:close()
assert(os.rename(arg[2] .. ".new", arg[2]))
