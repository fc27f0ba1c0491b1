/* processor.h — client-go's sharedProcessor and processDeltas, on one
 * thread.
 *
 * The processor applies popped deltas to the informer's store and turns
 * them into notifications (add, update, delete; CLIENTGO.md 9.2, 10.5), which
 * it copies to every listener (a registered handler) that should get them:
 * all listeners, except that sync notifications (updates that kept the
 * resourceVersion) go only to listeners whose resync is due (10.6, T-27).
 * Each listener has its own unbounded ring of notifications, so a slow one
 * never holds up the FIFO or the others. Delivery is a pump the loop runs in
 * bounded slices: kl_proc_run calls handlers, one notification at a time
 * per listener, in order, round-robin across listeners (T-31).
 *
 * A listener added after kl_proc_start first gets a synthetic add (initial)
 * for every cached object, before anything distributed later (T-29); it has
 * synced once the upstream (the FIFO) has and every initial add queued to it
 * has been delivered (T-30). Removal discards what is buffered (T-32).
 * Resync checks run on a timer of the caller's heap with its clock.
 *
 * Notifications hold their own object references; a handler borrows them
 * for the call. No Lua or libev here. */
#ifndef KL_PROCESSOR_H
#define KL_PROCESSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "deltafifo.h"
#include "object.h"
#include "store.h"
#include "timer.h"

typedef struct kl_proc kl_proc_t;

typedef enum kl_proc_note_type {
  KL_PROC_ADD = 1,
  KL_PROC_UPDATE,
  KL_PROC_DELETE,
} kl_proc_note_type_t;

/* A notification as a handler sees it; everything is borrowed for the
 * call. */
typedef struct kl_proc_note {
  kl_proc_note_type_t type;
  const char *key; /* NUL-terminated */
  size_t len;
  /* add, update: the new object; delete: the object's final state as the
   * delta carried it, for a tombstone the last state known (NULL when even
   * that is unknown). */
  kl_obj_t *obj;
  kl_obj_t *old;  /* update: the previous object; NULL otherwise */
  bool initial;   /* add: part of the initial list (or a late join's) */
  bool tombstone; /* delete: inferred by a relist, final state unknown */
  bool sync;      /* update: same resourceVersion (resync or no-op relist) */
} kl_proc_note_t;

/* Handles one notification. It may call any kl_proc_* function on p
 * (remove any listener, itself included, add listeners, process deltas),
 * except kl_proc_free; kl_proc_run from inside skips this listener. */
typedef void kl_proc_handler_fn(kl_proc_t *p, uint64_t id,
                                const kl_proc_note_t *n, void *ud);

/* Ask for the informer's default resync period. */
#define KL_PROC_DEFAULT_RESYNC (-1.0)
/* client-go's minimumResyncPeriod, seconds. */
#define KL_PROC_MIN_RESYNC 1.0

typedef struct kl_proc_opts {
  kl_store_t *store; /* required; borrowed, must outlive the processor */
  /* The heap for the resync check timer (borrowed; may be NULL: then no
   * timer, and the owner calls kl_proc_should_resync itself). */
  kl_timers_t *timers;
  /* Time for resync bookkeeping; NULL: the timers' clock, or the system's. */
  const kl_clock_t *clock;
  /* The informer's ResyncPeriod in seconds: the initial resync check period
   * and the default listener period. 0: no resyncs. */
  double resync_period;
  /* The check timer found a listener due: resync now (the informer calls
   * kl_fifo_resync). Without it, no timer is armed. */
  void (*resync)(kl_proc_t *p, void *ud);
  /* A warning in client-go's words (a resync period adjusted or ignored).
   * Must not call the processor. */
  void (*warn)(kl_proc_t *p, const char *msg, void *ud);
  /* Notifications became pending (none were): schedule kl_proc_run. Called
   * last in the operation that queued them; must not call kl_proc_run. */
  void (*on_ready)(kl_proc_t *p, void *ud);
  void *ud;
} kl_proc_opts_t;

typedef struct kl_proc_listener_opts {
  kl_proc_handler_fn *fn; /* required */
  void *ud;
  /* Called once with ud when the processor lets go of the listener (after
   * kl_proc_remove_listener, kl_proc_stop or kl_proc_free, possibly later
   * than the call when a delivery is in progress); may be NULL. */
  void (*ud_free)(void *ud);
  /* Requested resync period in seconds: 0 none, KL_PROC_DEFAULT_RESYNC for
   * the informer's default. Adjusted as client-go does (10.4). */
  double resync_period;
  /* The notification types fn acts on, a bit (1u << type) each; 0: all.
   * Others are not queued to it, as fn would ignore them, except initial
   * adds, which its HasSynced waits for as client-go's does. */
  unsigned types;
} kl_proc_listener_opts_t;

typedef struct kl_proc_listener_info {
  size_t depth;         /* notifications buffered */
  size_t high_water;    /* the most ever buffered at once */
  uint64_t delivered;   /* notifications handed to the handler */
  double requested;     /* requested period after adjustment */
  double resync_period; /* the effective period (0: no resyncs) */
  double next_resync;   /* on the processor's clock */
  bool syncing;         /* the last check found it due */
  bool synced;          /* kl_proc_listener_synced */
} kl_proc_listener_info_t;

/* Returns a new processor (not started), or NULL when opts->store is NULL.
 * opts is copied. */
kl_proc_t *kl_proc_new(const kl_proc_opts_t *opts);
/* Disarms the timer, drops every buffered notification and listener
 * (calling their ud_free) and frees the processor. NULL is a no-op. Not from
 * a handler. */
void kl_proc_free(kl_proc_t *p);

/* Marks the processor started (the informer runs): the resync check period
 * is final, later listeners join late (synthetic adds), and the check timer
 * is armed when there is a period, a heap and a resync callback. Returns 0,
 * or KL_EINVAL once stopped. Idempotent. */
int kl_proc_start(kl_proc_t *p);
/* Stops: disarms the timer, removes every listener (buffered notifications
 * dropped, as client-go's pop tasks drop theirs) and refuses new ones.
 * Never calls a handler. */
void kl_proc_stop(kl_proc_t *p);

/* AddEventHandlerWithResyncPeriod: registers a listener and returns its id
 * (> 0), or 0 when the processor has stopped (client-go: "handler was not
 * added … because it has stopped already"). Before start, a period smaller
 * than the check period lowers the check period (and re-derives every
 * listener's period); after start it is raised to the check period. When
 * started, queues a synthetic add (initial) of every cached object to this
 * listener only. May call warn, then on_ready. */
uint64_t kl_proc_add_listener(kl_proc_t *p, const kl_proc_listener_opts_t *lo);
/* RemoveEventHandler: discards the listener's buffered notifications; no
 * later notification reaches it. Safe from inside any handler, its own
 * included (the struct is freed after the delivery in progress). Returns 0,
 * or KL_ENOENT for an unknown or already removed id (not an error in
 * client-go: callers may ignore it). May call ud_free. */
int kl_proc_remove_listener(kl_proc_t *p, uint64_t id);
/* Retires a listener: nothing more is queued to it, what is buffered is
 * still delivered, and it is removed (ud_free called) after the last one —
 * at once when nothing is buffered. A hot reload retires the old
 * generation's handlers this way, so that a notification distributed before
 * the swap still reaches code that can act on it. Returns 0, or KL_ENOENT
 * for an unknown or removed id. */
int kl_proc_retire_listener(kl_proc_t *p, uint64_t id);
/* Registration HasSynced: the upstream has synced and every initial add
 * queued to the listener has been delivered. False for an unknown id. */
bool kl_proc_listener_synced(const kl_proc_t *p, uint64_t id);
/* Fills *info; returns 0 or KL_ENOENT. */
int kl_proc_listener_info(const kl_proc_t *p, uint64_t id,
                          kl_proc_listener_info_t *info);
/* The number of listeners (removed ones excluded, retiring ones counted). */
size_t kl_proc_listeners(const kl_proc_t *p);

/* The informer's queue has synced (its first list is in the store). Sticky.
 * Wire the FIFO's on_synced to it. */
void kl_proc_upstream_synced(kl_proc_t *p);
bool kl_proc_has_upstream_synced(const kl_proc_t *p);

/* The current resync check period (0: none). */
double kl_proc_resync_check_period(const kl_proc_t *p);
/* shouldResync: marks each listener syncing iff its period is non-zero and
 * due on the clock (then moving its next resync a period on); returns
 * whether any was due. The check timer calls it; callable directly. */
bool kl_proc_should_resync(kl_proc_t *p);

/* processDeltas: applies the n deltas of key (len bytes), oldest first, to
 * the store (Add/Update for Sync, Replaced, Added, Updated; Delete for
 * Deleted) and distributes an add (with `initial`), update (sync when the
 * resourceVersion did not change) or delete notification for each. A store
 * error stops there and is returned (message in err, errlen may be 0);
 * notifications already distributed stay. Never calls a handler; may call
 * the store's index functions and on_ready. */
int kl_proc_process_deltas(kl_proc_t *p, const char *key, size_t len,
                           const kl_delta_t *deltas, size_t n, bool initial,
                           char *err, size_t errlen);
/* The same as a kl_fifo_process_fn (ud: the processor), for
 * kl_fifo_pop(fifo, kl_proc_handle_deltas, p); an error's message is then
 * in kl_proc_error(p). */
int kl_proc_handle_deltas(void *p, kl_fifo_popped_t *it);
/* The message of the last kl_proc_handle_deltas error ("" if none). */
const char *kl_proc_error(const kl_proc_t *p);

/* The delivery pump: hands up to `budget` notifications in total to the
 * handlers, one at a time, taking listeners in turn (one notification each
 * per turn, resuming the rotation where the last call stopped), each
 * listener's in order; skips a listener whose handler is running (a nested
 * call). Returns whether notifications remain buffered. Calls handlers,
 * then may call ud_free of listeners removed meanwhile. */
bool kl_proc_run(kl_proc_t *p, size_t budget);
/* Notifications buffered across all listeners. */
size_t kl_proc_pending(const kl_proc_t *p);

#endif
