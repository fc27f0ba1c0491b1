/* informer.h — an informer's cache pipeline: decoder → DeltaFIFO → store →
 * shared processor.
 *
 * An informer takes what a reflector receives — watch-stream bytes, list
 * bodies, or single objects — turns it into deltas, and drains them on the
 * loop in bounded batches: each popped key updates the store and becomes
 * notifications for the listeners, which the processor's pump delivers.
 * Everything runs on the loop; nothing here blocks. The reflector (list and
 * watch over HTTP) drives this same interface. */
#ifndef KL_INFORMER_H
#define KL_INFORMER_H

#include <stdbool.h>
#include <stddef.h>

#include "deltafifo.h"
#include "object.h"
#include "processor.h"
#include "store.h"
#include "timer.h"

typedef struct kl_informer kl_informer_t;

typedef struct kl_informer_opts {
  const char *name; /* for logs; copied */
  kl_timers_t *timers;
  double resync_period; /* seconds; 0: no resync */
  bool keep_managed_fields;
  /* apiVersion and kind written into list items, which carry none. */
  const char *api_version, *kind;
  /* Applied to every object before it is queued (client-go's transform);
   * stores a new reference in *out, or fails. */
  int (*transform)(void *ud, kl_obj_t *in, kl_obj_t **out);
  /* Work is pending: call kl_informer_run soon (from the loop, not from
   * inside this callback's caller). */
  void (*on_work)(kl_informer_t *inf, void *ud);
  void *ud;
} kl_informer_opts_t;

kl_informer_t *kl_informer_new(const kl_informer_opts_t *opts);
/* Stops and frees: listeners are dropped (their ud_free called). */
void kl_informer_free(kl_informer_t *inf);
const char *kl_informer_name(const kl_informer_t *inf);

kl_store_t *kl_informer_store(kl_informer_t *inf);
kl_fifo_t *kl_informer_fifo(kl_informer_t *inf);
kl_proc_t *kl_informer_proc(kl_informer_t *inf);

/* Feeds watch-stream bytes (one JSON event after another, cut anywhere).
 * Each complete event is queued: ADDED → Add, MODIFIED → Update, DELETED →
 * Delete, BOOKMARK → only the resourceVersion moves. Returns 0; or
 * KL_EPARSE / KL_ELIMIT with "byte N: reason" in err for malformed input,
 * KL_EIO with the Status message for an ERROR event (its code in *code when
 * code is not NULL). After an error the stream must be restarted with
 * kl_informer_watch_reset; events before the bad one were queued. */
int kl_informer_feed(kl_informer_t *inf, const char *p, size_t n, int *code,
                     char *err, size_t errlen);
/* Forgets a partial event: a new watch stream starts. Returns KL_EPARSE if
 * the old stream ended in the middle of an event (it is dropped). */
int kl_informer_watch_reset(kl_informer_t *inf);

/* Replaces the whole content with the items of a list body (bytes of a
 * complete JSON list object), as a relist does: Replaced deltas for every
 * item, tombstones for keys that vanished. Sets the resourceVersion to the
 * list's. Returns 0 or KL_EPARSE / KL_ELIMIT with the reason in err; on
 * error nothing is replaced. */
int kl_informer_replace_list(kl_informer_t *inf, const char *p, size_t n,
                             char *err, size_t errlen);
/* The same with objects at hand (borrowed) and a resourceVersion. */
int kl_informer_replace(kl_informer_t *inf, kl_obj_t *const *objs, size_t n,
                        const char *rv, char *err, size_t errlen);

/* Queues one object (borrowed) as Added, Updated or Deleted. */
int kl_informer_add(kl_informer_t *inf, kl_obj_t *o);
int kl_informer_update(kl_informer_t *inf, kl_obj_t *o);
int kl_informer_delete(kl_informer_t *inf, kl_obj_t *o);
/* Queues Sync deltas for every cached key not already queued. */
int kl_informer_resync(kl_informer_t *inf);

/* Pops up to `budget` keys and delivers up to `budget` notifications.
 * Returns true when work remains. Handler callbacks run from here. */
bool kl_informer_run(kl_informer_t *inf, size_t budget);

/* True once the first Replace has been fully popped (client-go's
 * HasSynced). */
bool kl_informer_has_synced(const kl_informer_t *inf);
/* The last resourceVersion seen (list, event or bookmark), "" at first. */
const char *kl_informer_last_rv(const kl_informer_t *inf);

/* Builds an object from JSON text (one object) with the informer's options.
 * Returns 0 with a new reference in *out, or an error with the reason. */
int kl_informer_parse(kl_informer_t *inf, const char *p, size_t n,
                      kl_obj_t **out, char *err, size_t errlen);

#endif
