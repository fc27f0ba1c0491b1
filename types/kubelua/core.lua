---@meta kubelua.core
-- The C core of the runtime (runtime/lua_kube.c): what `kube` re-exports
-- of it (kube.now, kube.sleep, kube.after, kube.stop, kube.workqueue, ...)
-- declared for the language server and the reference (scripts/docs).

local core = {}

---Seconds since the Unix epoch, from the wall clock, with a fraction.
---@return number seconds
---@usage local started = kube.now()
function core.now() end

---Seconds on the loop's monotonic clock: for durations, not dates.
---@return number seconds
---@usage local t0 = kube.monotonic(); work(); local took = kube.monotonic() - t0
function core.monotonic() end

---Parks the calling task for the seconds given; raises outside a task.
---@param seconds number how long, 0 to yield once
---@usage kube.sleep(0.5)
function core.sleep(seconds) end

---Runs fn in a new task once the seconds have passed.
---@param seconds number the delay
---@param fn function what to run
---@return kubelua.timer handle its :cancel() prevents the run
---@usage local h = kube.after(30, function() kube.log.info("late") end)
function core.after(seconds, fn) end

---Begins a graceful stop: workers finish their keys, the Lease is
---released, and the process exits with status.
---@param status? integer the exit status (default 0)
---@usage kube.stop(1)
function core.stop(status) end

---Whether a graceful stop has begun.
---@return boolean
---@usage while not kube.stopping() do kube.sleep(1) end
function core.stopping() end

---The queue of that name, created on first use: asking twice (or from a
---reloaded script) gives the same queue. opts.rate_limiter is read when
---the queue is created: { type = "default" | "exponential" | "bucket" |
---"fast_slow" | "max_of", ... } (see kube.workqueue in the README).
---@param name string the queue's name, also its metrics' label
---@param opts? {rate_limiter?: table}
---@return kubelua.workqueue
---@usage local q = kube.workqueue("mirror", { rate_limiter = { type = "exponential", base = 0.005, max = 1000 } })
function core.workqueue(name, opts) end

---A handle of kube.after: a pending run that can be cancelled.
---@class kubelua.timer
local timer = {}

---Prevents the run if it has not happened yet.
---@return boolean pending true if it was still pending
---@usage local h = kube.after(60, resync); h:cancel()
function timer:cancel() end

---A watch on files (the runtime's reload watcher).
---@class kubelua.filewatch
local filewatch = {}

---@package
function filewatch:close() end

---@package
function filewatch:poke() end

---A rate-limited workqueue (client-go's): a key queued twice while
---waiting is one item; a key being processed is not handed to another
---worker until q:done(key).
---@class kubelua.workqueue
local workqueue = {}

---Queues key now (once, however many times it is added before a get).
---@param key string
---@usage q:add("demo/settings")
function workqueue:add(key) end

---Queues key after the seconds given.
---@param key string
---@param seconds number
---@usage q:add_after("demo/settings", 30)
function workqueue:add_after(key, seconds) end

---Queues key after its rate limiter's delay, which grows with each
---failure until q:forget(key).
---@param key string
---@usage q:add_rate_limited(key)
function workqueue:add_rate_limited(key) end

---Forgets key's failures: the rate limiter starts again from its base.
---@param key string
---@usage q:forget(key)
function workqueue:forget(key) end

---How many times key was re-added rate limited since its last forget.
---@param key string
---@return integer
---@usage if q:num_requeues(key) > 5 then kube.log.warn("still failing", { key = key }) end
function workqueue:num_requeues(key) end

---The number of keys queued and ready.
---@return integer
---@usage local waiting = q:len()
function workqueue:len() end

---The queue's name.
---@return string
---@usage kube.log.info("queue", { name = q:name() })
function workqueue:name() end

---The next key: in a task, waits for one; elsewhere returns nil, "empty"
---at once when nothing is queued. nil, "shutdown" once the queue is shut
---down. The key is held until q:done(key).
---@return string|nil key
---@return string? why "empty" or "shutdown"
---@usage local key = q:get(); if key then reconcile(key); q:done(key) end
function workqueue:get() end

---The next key, or nil, "empty" / nil, "shutdown", never waiting.
---@return string|nil key
---@return string? why
---@usage local key = q:try_get()
function workqueue:try_get() end

---Ends the processing of key (a key added meanwhile is queued again).
---@param key string
---@usage q:done(key)
function workqueue:done(key) end

---Shuts the queue down: waiting workers get nil, "shutdown".
---@usage q:shutdown()
function workqueue:shutdown() end

---Shuts the queue down once no key is being processed; in a task it
---waits for that, elsewhere it returns whether it is so already.
---@return boolean drained
---@usage q:shutdown_drain()
function workqueue:shutdown_drain() end

---Whether the queue was shut down.
---@return boolean
---@usage if q:shutting_down() then return end
function workqueue:shutting_down() end

---client-go's workqueue metrics for this queue: depth, adds, retries,
---work and queue durations, unfinished work.
---@return table
---@usage local s = q:stats(); print(s.depth, s.adds)
function workqueue:stats() end

return core
