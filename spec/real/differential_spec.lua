-- The simulator against a real kube-apiserver: the same sequences of
-- requests go to both (the recorded fixture scenario, then randomized
-- sequences over several kinds, invalid requests included), and every
-- answer and watch stream is compared field by field once what must
-- differ is normalized (spec/differential/normalize.lua). A difference
-- fails the spec unless spec/differential/known.lua lists it with its
-- reason; a listed difference that no longer occurs fails it too.
--
-- The real server comes from kubelua.envtest (KUBEBUILDER_ASSETS, else
-- PATH); without one this file says so in one line and defines no test.
-- KUBELUA_DIFF_SEQUENCES sets how many randomized sequences run (default
-- 20), KUBELUA_DIFF_SEED their seed (default 1, so that a run in CI is
-- the same run each time; another seed explores other sequences, and the
-- seed is printed, so a failure can be replayed).
local envtest = require "kubelua.envtest"
local target = require "spec.differential.target"
local runner = require "spec.differential.runner"
local compare = require "spec.differential.compare"
local fixtures = require "spec.differential.fixtures"
local random = require "spec.differential.random"
local known = require "spec.differential.known"
local schema_steps = require "spec.differential.schema_steps"
local subresource_steps = require "spec.differential.subresource_steps"
local default_steps = require "spec.differential.default_steps"
local autoscaling_steps = require "spec.differential.autoscaling_steps"
local admission_steps = require "spec.differential.admission_steps"
local conversion_steps = require "spec.differential.conversion_steps"

local concat = table.concat

local _, missing = envtest.find()
if missing then
  print("differential: skipped, no real kube-apiserver: " .. missing)
  return
end

local SEQUENCES = tonumber(os.getenv("KUBELUA_DIFF_SEQUENCES") or "") or 20
local SEED = tonumber(os.getenv("KUBELUA_DIFF_SEED") or "") or 1

local function report(lines)
  if #lines == 0 then return end
  error(#lines .. " differences not in spec/differential/known.lua:\n" .. concat(lines, "\n"), 2)
end

describe("the simulator against a real kube-apiserver", function()
  local cp, targets, tally
  setup(function()
    local err
    cp, err = envtest.start{ controller_manager = false }
    assert(cp, err)
    targets = { target.sim(cp.token), target.new{ name = "real", server = cp.server,
      token = cp.token, ca_file = cp.ca_file } }
    tally = compare.new(known)
  end)
  teardown(function()
    if targets then targets[1].close() end
    if cp then cp:stop() end
  end)

  it("answers the recorded fixture scenario as the real server does", function()
    report(runner.run(targets, "fixtures", fixtures.steps(), tally))
  end)

  it("answers values of the wrong JSON type as the real server does", function()
    report(runner.run(targets, "wrong types", random.wrong_types(), tally))
  end)

  -- Runs the sequences ({ case, steps }) in turn and reports their
  -- differences together.
  local function run_cases(cases)
    local lines = {}
    for _, c in ipairs(cases) do
      for _, line in ipairs(runner.run(targets, c[1], c[2], tally)) do
        lines[#lines + 1] = line
      end
    end
    report(lines)
  end

  it("patches and applies as each kind's schema says, as the real server does", function()
    run_cases { { "strategic merge patches", schema_steps.strategic() },
      { "server-side applies", schema_steps.apply() } }
  end)

  it("binds, evicts, issues tokens and finalizes as the real server does", function()
    run_cases { { "pods subresources", subresource_steps.pods() },
      { "other subresources", subresource_steps.others() } }
  end)

  it("fills in what it stores as the real server does (pods, templates, jobs)", function()
    report(runner.run(targets, "defaults", default_steps.steps(), tally))
  end)

  it("converts a HorizontalPodAutoscaler between autoscaling/v1 and v2 as the real server does",
    function()
      report(runner.run(targets, "autoscaling", autoscaling_steps.steps(), tally))
    end)

  it("calls kubelua's admission webhooks as the real server does", function()
    local testing = require "kubelua.testing"
    local url, ca = testing.serve_webhooks()
    admission_steps.register()
    local ok, lines = pcall(runner.run, targets, "admission", admission_steps.steps(url, ca), tally)
    testing.stop_webhooks()
    assert(ok, lines)
    report(lines)
  end)
  it("converts a custom resource through its conversion webhook as the real server does: "
    .. "reads, writes, watches, the reviews the webhook gets", function()
      local steps, stop = conversion_steps.steps()
      local ok, lines = pcall(runner.run, targets, "conversion", steps, tally)
      stop()
      assert(ok, lines)
      report(lines)
    end)

  it("answers randomized sequences as the real server does", function()
    print(string.format("differential: %d randomized sequences, seed %d "
      .. "(KUBELUA_DIFF_SEED=%d replays them)", SEQUENCES, SEED, SEED))
    local lines = runner.run(targets, "random setup", random.setup(), tally)
    for _, seq in ipairs(random.sequences(SEED, SEQUENCES)) do
      for _, line in ipairs(runner.run(targets, seq.case, seq.steps, tally)) do
        lines[#lines + 1] = line
      end
    end
    report(lines)
  end)

  it("lists only differences that still occur", function()
    -- counted from what ran, so that the line stays true as cases are added
    local fixed = {}
    for _, case in ipairs(tally.cases) do
      if not case:find("^random %d") then fixed[#fixed + 1] = case end
    end
    print(string.format("differential: %d sequences (%s, %d randomized with seed %d), %d steps; "
      .. "%d differences explained by %d of %d known entries", #tally.cases, concat(fixed, ", "),
      #tally.cases - #fixed, SEED, tally.steps, tally.listed, tally:entries_seen(), #known))
    assert.same({}, tally:stale())
  end)
end)
