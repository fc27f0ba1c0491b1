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

#define KL_INFORMER_COMPRESS_MIN 512
/* Seconds an object changed by a watch after sync stays plain (with
 * timers): a change within them replaces it uncompressed. An object's
 * changes come in bursts (a Pod is scheduled, its containers start, become
 * ready, restart), a few seconds long. */
#define KL_INFORMER_COLD_AFTER 5.0

typedef struct kl_informer_opts {
  const char *name; /* for logs; copied */
  kl_timers_t *timers;
  double resync_period; /* seconds; 0: no resync */
  bool keep_managed_fields;
  /* Cache objects as received. By default the cached JSON is compressed
   * with a dictionary learned from the first objects (objz.h) once the
   * store and the FIFO together hold compress_min_objects keys (0:
   * KL_INFORMER_COMPRESS_MIN), a size at which the codec's own state
   * (about 400 KB) is repaid; objects taken in before stay plain. The
   * extracted metadata stays plain either way. Once synced, and given
   * timers, an object the watch changes is cached plain and compressed
   * when it has not changed for KL_INFORMER_COLD_AFTER seconds (a timer,
   * a bounded number of objects a turn): compression is off the event
   * path, and a version replaced while it is recent is never compressed.
   * At worst (every object changing faster than that) the cache is as
   * large as the plain objects; the queue of objects to compress keeps at
   * most one entry per cached key (or 64). */
  bool plain_objects;
  size_t compress_min_objects;
  /* apiVersion and kind written into list items, which carry none. */
  const char *api_version, *kind;
  /* Applied to every object before it is queued (client-go's transform);
   * stores a new reference in *out, or fails with a message in err (errlen
   * bytes). Not called for tombstones nor for resync's Sync deltas. */
  int (*transform)(void *ud, kl_obj_t *in, kl_obj_t **out, char *err,
                   size_t errlen);
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
 * Delete, BOOKMARK → only the resourceVersion moves. An event whose object
 * cannot be queued (no name, the transform failed, a limit) is logged and
 * skipped, as client-go's watch handler does, and the stream goes on.
 * Returns 0; or KL_EPARSE / KL_ELIMIT with "byte N: reason" in err for
 * malformed input, KL_EIO with the Status message for an ERROR event (its
 * code in *code when code is not NULL). After an error the stream must be
 * restarted with kl_informer_watch_reset; events before the bad one were
 * queued. */
int kl_informer_feed(kl_informer_t *inf, const char *p, size_t n, int *code,
                     char *err, size_t errlen);
/* Forgets a partial event: a new watch stream starts. Returns KL_EPARSE if
 * the old stream ended in the middle of an event (it is dropped). */
int kl_informer_watch_reset(kl_informer_t *inf);

/* Replaces the whole content with the items of a list body (bytes of a
 * complete JSON list object), as a relist does: Replaced deltas for every
 * item, tombstones for keys that vanished. Sets the resourceVersion to the
 * list's. Returns 0, or KL_EPARSE / KL_ELIMIT (malformed) or KL_EINVAL (an
 * item without a name) with the reason in err, nothing queued then; or the
 * transform's error, when the items before the failing one stay queued (as
 * in client-go, whose reflector then lists again). */
int kl_informer_replace_list(kl_informer_t *inf, const char *p, size_t n,
                             char *err, size_t errlen);
/* The same with objects at hand (borrowed) and a resourceVersion. */
int kl_informer_replace(kl_informer_t *inf, kl_obj_t *const *objs, size_t n,
                        const char *rv, char *err, size_t errlen);

/* Queues one object (borrowed) as Added, Updated or Deleted. Returns 0, or
 * an error with the reason in err: KL_EINVAL for an object without a name
 * or a failed transform, KL_ELIMIT past the FIFO's limits. */
int kl_informer_add(kl_informer_t *inf, kl_obj_t *o, char *err, size_t errlen);
int kl_informer_update(kl_informer_t *inf, kl_obj_t *o, char *err,
                       size_t errlen);
int kl_informer_delete(kl_informer_t *inf, kl_obj_t *o, char *err,
                       size_t errlen);
/* Queues Sync deltas for every cached key not already queued. */
int kl_informer_resync(kl_informer_t *inf);

/* Pops up to `budget` keys and delivers up to `budget` notifications.
 * Returns true when work remains. Handler callbacks run from here. A key
 * the store refuses (an index function failed, the transformed object has
 * no name) is logged with its key; its deltas are dropped and the store
 * keeps the key's last good state. */
bool kl_informer_run(kl_informer_t *inf, size_t budget);

/* Events waiting: queued keys plus notifications not yet delivered. */
size_t kl_informer_backlog(const kl_informer_t *inf);

/* True once the first Replace has been fully popped (client-go's
 * HasSynced). */
bool kl_informer_has_synced(const kl_informer_t *inf);
/* The last resourceVersion seen (list, event or bookmark), "" at first. */
const char *kl_informer_last_rv(const kl_informer_t *inf);

/* The objects it parses leave their labels and owners in their JSON, read
 * from there when asked (kl_obj_opts_t.lazy_refs): nothing reads them on
 * the event path but a label or controller index of the store. Call this
 * when adding one: objects parsed from then on keep tables of them. */
void kl_informer_keep_refs(kl_informer_t *inf);

/* Builds an object from JSON text (one object) with the informer's options.
 * Returns 0 with a new reference in *out, or an error with the reason. */
int kl_informer_parse(kl_informer_t *inf, const char *p, size_t n,
                      kl_obj_t **out, char *err, size_t errlen);

/* --- For the reflector (reflector.h): its own event bookkeeping, and lists
 * received page by page. --- */

/* Sees each decoded watch event before kl_informer_feed_events queues it,
 * ERROR events included. Returns 0 to queue it, 1 to skip it, or a negative
 * KL_E* code (a message in err) to stop: the feed returns that code. It must
 * not feed the informer. */
typedef int kl_informer_event_fn(void *ud, const kl_obj_event_t *ev, char *err,
                                 size_t errlen);
/* kl_informer_feed for a caller that keeps its own resourceVersion: every
 * complete event goes to fn (may be NULL) first; ADDED, MODIFIED and
 * DELETED events it accepts are queued as kl_informer_feed queues them (an
 * event that cannot be queued is logged and skipped). The informer's
 * resourceVersion does not move: the caller sets it (kl_informer_set_rv).
 * Returns 0 once every byte is used (a partial event waits for more bytes);
 * KL_EPARSE / KL_ELIMIT with "byte N: reason" in err for malformed input;
 * KL_EIO with the Status message after an ERROR event; or fn's code. After
 * an error the stream must be restarted with kl_informer_watch_reset. */
int kl_informer_feed_events(kl_informer_t *inf, const char *p, size_t n,
                            kl_informer_event_fn *fn, void *ud, char *err,
                            size_t errlen);
/* Sets what kl_informer_last_rv reports (copied; "" or NULL: unchanged). */
void kl_informer_set_rv(kl_informer_t *inf, const char *rv);

/* For a Replace being collected in objs[0..n) (a list's items, a
 * streaming list's initial events), each item holding one reference: puts
 * the items from *cached on in the form the cache keeps them, and sets
 * *cached to n. That is a compressed copy once a cache of n keys is large
 * enough for the codec, then for every item collected before too, and
 * again for those the codec kept plain while it learned from them, once
 * it has learned; else the item itself. Collecting in this form keeps a
 * large list's peak memory near what the cache holds after it (no plain
 * copy of the whole list). The user's transform still runs at the
 * Replace; it reads a compressed object like a plain one. */
void kl_informer_cache_forms(kl_informer_t *inf, kl_obj_t **objs, size_t n,
                             size_t *cached);

/* A list received page by page (limit/continue), replaced in one go at the
 * end, as client-go's pager aggregates pages before the reflector's
 * Replace. Items get the informer's apiVersion and kind when they carry
 * none, and are kept in their cache form (kl_informer_cache_forms). The
 * accumulator holds one reference on each item; the informer must outlive
 * it. */
typedef struct kl_informer_list kl_informer_list_t;
/* A new, empty accumulator. Never NULL. */
kl_informer_list_t *kl_informer_list_begin(kl_informer_t *inf);
/* Feeds bytes of the current page's body (a JSON list object, cut
 * anywhere); the first call after kl_informer_list_page_end starts a new
 * page. Returns 0, or KL_EPARSE / KL_ELIMIT with the reason in err; errors
 * are sticky until the page ends. */
int kl_informer_list_feed(kl_informer_list_t *l, const char *p, size_t n,
                          char *err, size_t errlen);
/* Ends the current page. Returns 0 and its envelope (kind, apiVersion,
 * resourceVersion, continue; owned by l, valid until the next feed, commit
 * or free) in *env, or KL_EPARSE / KL_ELIMIT (a truncated or malformed page,
 * or no bytes at all) with the reason in err. */
int kl_informer_list_page_end(kl_informer_list_t *l, const kl_json_list_t **env,
                              char *err, size_t errlen);
/* Items collected so far, over every page. */
size_t kl_informer_list_count(const kl_informer_list_t *l);
/* Replaces the informer's content with every item collected and sets its
 * resourceVersion to rv, as kl_informer_replace does (same returns). */
int kl_informer_list_commit(kl_informer_list_t *l, const char *rv, char *err,
                            size_t errlen);
/* Releases the items and frees; NULL is a no-op. */
void kl_informer_list_free(kl_informer_list_t *l);

#endif
