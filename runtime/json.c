/* json.c — the incremental, validating JSON stream decoder (see json.h).
 *
 * Design. One resumable state machine reads every byte once, checks the full
 * grammar and finds where each value to yield begins and ends. Its state
 * between two feeds is a handful of integers (the state label, the container
 * stack, the partial \u escape or UTF-8 sequence, the literal being matched),
 * so input may be cut at any byte. Inside a feed it runs as straight-line
 * code with tight loops for strings (eight bytes at a time), whitespace and
 * digits; it suspends only where the input ends. An object that lies whole
 * in the bytes fed (all but the one a feed cuts) first goes through
 * check_value, the same checks without suspend points or state in memory
 * (on realistic Pod events 14% fewer instructions); only when that says
 * no, because the object is cut or bad, does the state machine read it,
 * and say where and why a bad one fails. On x86-64 check_value finds where
 * strings end from one mask per 64 bytes (json_simd.h; SSE2, or AVX2 where
 * the processor has it); a structural index of whole blocks, stage one of
 * simdjson, was tried and cost more than it saved: a Pod's 3.7 KB hold
 * about a thousand tokens, and walking them costs what this walk does.
 *
 * Ownership. The bytes fed belong to the caller and are not copied while a
 * value lies inside them: the yielded span points there. Only when a value
 * is cut by the end of a feed is its unfinished part appended to the stream's
 * tail buffer (then each later feed appends the part it scanned), so the
 * stream holds at most one partial value, never whole lines. In list mode the
 * bytes of the top-level object outside "items" go to a second buffer, the
 * envelope, read once the object ends. Both buffers are capped at max_value.
 *
 * Why not yajl or jsmn (both in Debian). Measured on the 2.4 KB Pod watch
 * stream in 16 KiB pieces (bench/c/bench_decode.c, gcc -O2): this scanner
 * validates and frames at about 1.9 GB/s; yajl with empty callbacks parses
 * at about 0.55 GB/s and jsmn, given each line's bounds and producing tokens
 * only, at about 0.88 GB/s. Neither fits the job either: jsmn cannot resume
 * inside a value (it restarts from the value's beginning, quadratic on a big
 * list body) and checks neither UTF-8 nor number syntax; yajl resumes but
 * gives no byte offsets for what it delivers, so keeping the raw bytes would
 * mean regenerating them with its generator. So neither is linked.
 *
 * The container index. While it checks a value the scanner also notes where
 * each of its shallow containers opens and closes (kl_json_value_t), which
 * costs a few stores per container. A reader that wants only some members
 * of an object (object.c: metadata, not spec or status) then skips the
 * others by a lookup instead of scanning them a second time: on a Pod that
 * is three quarters of its bytes.
 *
 * Invariants: depth == number of open containers; stack[0..depth) holds
 * their kinds; a value is yielded only after its last byte has been
 * validated; after an error every call returns the same error. */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json_swar.h"
#include "json_simd.h" /* after json_swar.h, whose scans it uses */
#include "mem.h"

/* Scanner states: where to resume when more input arrives. */
enum {
  S_TOP,       /* between top-level values */
  S_VALUE,     /* a value is expected (after ':' or an array ',') */
  S_ARR_FIRST, /* after '[': a value or ']' */
  S_OBJ_FIRST, /* after '{': a key or '}' */
  S_OBJ_KEY,   /* after ',' in an object: a key */
  S_COLON,     /* after a key */
  S_AFTER,     /* after a value inside a container: ',' or the closer */
  S_STR,       /* inside a string */
  S_ESC,       /* after a backslash */
  S_UHEX,      /* inside the four hex digits of \u */
  S_SURR_BS,   /* after a high surrogate: '\' expected */
  S_SURR_U,    /* after a high surrogate and '\': 'u' expected */
  S_UTF8,      /* inside a multi-byte UTF-8 sequence */
  S_NUM_MINUS, /* after '-' */
  S_NUM_ZERO,  /* after a leading '0' */
  S_NUM_INT,   /* in the integer digits */
  S_NUM_DOT,   /* after '.' */
  S_NUM_FRAC,  /* in the fraction digits */
  S_NUM_E,     /* after 'e' */
  S_NUM_ESIGN, /* after the exponent's sign */
  S_NUM_EXP,   /* in the exponent digits */
  S_LIT,       /* inside true/false/null */
  S_FAILED,    /* sticky error */
};

/* Private mode of kl_json_validate: one value of any type. */
#define MODE_ANY ((kl_json_mode_t)2)

/* Container kinds on the stack. */
enum { C_OBJ = 'o', C_ARR = 'a', C_ITEMS = 'i' };

#define NO_ENTRY UINT32_MAX /* ct_at: the container there is not indexed */

typedef struct buf {
  char *p;
  size_t len, cap;
} buf_t;

struct kl_json_stream {
  kl_json_mode_t mode;
  size_t max_value;
  unsigned max_depth;

  /* Input of the current feed. */
  const uint8_t *chunk, *cur, *end;
  const uint8_t *last_nl; /* its last '\n' (KL_JSON_VALUES), or NULL */
  size_t last_len;        /* bytes of the list item yielded last */
  uint64_t base;          /* stream offset of chunk[0] */

  /* Scanner. */
  int state;
  unsigned depth;
  uint8_t *stack;
  bool key;                      /* the string being read is an object key */
  uint8_t hex_left;              /* \u digits still to read */
  uint32_t ucp;                  /* \u code unit being read */
  uint32_t hi_surr;              /* pending high surrogate, 0 if none */
  uint64_t esc_off;              /* offset of the current escape's backslash */
  uint64_t hi_off;               /* offset of the high surrogate's backslash */
  uint8_t u8_need, u8_lo, u8_hi; /* UTF-8 continuation bytes to come */
  uint64_t u8_off;               /* offset of the sequence's lead byte */
  const char *lit;               /* literal being matched */
  uint8_t lit_i;

  /* The value to yield in progress. */
  bool in_value, ws_seen, tail_used;
  const uint8_t *vstart; /* its first byte in this chunk, NULL if earlier */
  uint64_t voff;
  buf_t tail;
  kl_json_container_t *ct; /* its container index, ct_cap entries */
  size_t nct, ct_cap;
  uint32_t ct_at[KL_JSON_INDEX_DEPTH]; /* ct entry of the open containers */

  /* List mode (list_started also means "a value was seen" in MODE_ANY). */
  bool capture, items_next, list_started, list_done, env_on;
  uint8_t keylen; /* bytes of the depth-1 key read so far; > 5: not "items" */
  char keybuf[8];
  const uint8_t *env_from; /* where the envelope resumes in this chunk */
  uint64_t list_off;
  buf_t env;
  char *meta;
  kl_json_list_t list;

  int code;
  char err[192];
  uint8_t stack_small[KL_JSON_MAX_DEPTH];
};

static void describe(uint8_t c, char *out, size_t n) {
  if (c > 0x20 && c < 0x7f)
    snprintf(out, n, "'%c'", c);
  else
    snprintf(out, n, "0x%02x", c);
}

#ifdef __GNUC__
__attribute__((format(printf, 4, 5)))
#endif
static int
fail(kl_json_stream_t *s, int code, uint64_t off, const char *fmt, ...) {
  int k =
      snprintf(s->err, sizeof s->err, "byte %llu: ", (unsigned long long)off);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err + k, sizeof s->err - (size_t)k, fmt, ap);
  va_end(ap);
  s->code = code;
  s->state = S_FAILED;
  return code;
}

static void buf_add(buf_t *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n)
      cap *= 2;
    b->p = kl_xrealloc(b->p, cap);
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
}

static void init(kl_json_stream_t *s, const kl_json_opts_t *opts) {
  memset(s, 0, offsetof(kl_json_stream_t, stack_small));
  s->mode = opts ? opts->mode : KL_JSON_VALUES;
  s->max_value = opts && opts->max_value ? opts->max_value : KL_JSON_MAX_VALUE;
  s->max_depth = opts && opts->max_depth ? opts->max_depth : KL_JSON_MAX_DEPTH;
  s->stack = s->max_depth <= KL_JSON_MAX_DEPTH ? s->stack_small
                                               : kl_xmalloc(s->max_depth);
  s->state = S_TOP;
  s->list.remaining_item_count = -1;
}

static void clear(kl_json_stream_t *s) {
  if (s->stack != s->stack_small) free(s->stack);
  free(s->ct);
  free(s->tail.p);
  free(s->env.p);
  free(s->meta);
}

kl_json_stream_t *kl_json_stream_new(const kl_json_opts_t *opts) {
  kl_json_stream_t *s = kl_xmalloc(sizeof *s);
  init(s, opts);
  return s;
}

void kl_json_stream_free(kl_json_stream_t *s) {
  if (!s) return;
  clear(s);
  free(s);
}

int kl_json_stream_feed(kl_json_stream_t *s, const void *buf, size_t len) {
  if (s->cur != s->end) return KL_EINVAL;
  s->base += (uint64_t)(s->end - s->chunk);
  s->chunk = s->cur = buf;
  s->end = s->chunk + len;
  s->last_nl =
      s->mode == KL_JSON_VALUES
          ? (const uint8_t *)kl_scan_last(buf, (const char *)s->end, '\n')
          : NULL;
  return KL_OK;
}

const char *kl_json_stream_error(const kl_json_stream_t *s) { return s->err; }

uint64_t kl_json_stream_offset(const kl_json_stream_t *s) {
  return s->base + (uint64_t)(s->cur - s->chunk);
}

const kl_json_list_t *kl_json_stream_list(const kl_json_stream_t *s) {
  return s->mode == KL_JSON_LIST && s->list_done ? &s->list : NULL;
}

/* Reads the list envelope's strings into s->meta (decoded, NUL-terminated). */
static int read_envelope(kl_json_stream_t *s) {
  kl_json_span_t obj = {s->env.p, s->env.len}, meta, v;
  char *m = s->meta = kl_xmalloc(s->env.len + 8);
  static const char *const names[] = {"kind", "apiVersion", "resourceVersion",
                                      "continue"};
  kl_json_span_t *outs[] = {&s->list.kind, &s->list.api_version,
                            &s->list.resource_version, &s->list.continue_token};
  bool have_meta = kl_json_member(obj, "metadata", &meta) && meta.p[0] == '{';
  s->list.envelope = obj;
  for (int i = 0; i < 4; i++) {
    bool found = i < 2 ? kl_json_member(obj, names[i], &v)
                       : have_meta && kl_json_member(meta, names[i], &v);
    outs[i]->p = m;
    outs[i]->n = 0;
    if (found && v.p[0] == '"') {
      outs[i]->n = kl_json_unescape(v.p + 1, v.n - 2, m);
      m += outs[i]->n;
    } else if (found && v.p[0] != 'n') {
      return fail(s, KL_EPARSE, s->list_off, "list %s%s is not a string",
                  i < 2 ? "" : "metadata.", names[i]);
    }
    *m++ = '\0';
  }
  if (have_meta && kl_json_member(meta, "remainingItemCount", &v) &&
      v.p[0] != 'n' && !kl_json_int64(v, &s->list.remaining_item_count))
    return fail(s, KL_EPARSE, s->list_off,
                "list metadata.remainingItemCount is not an integer");
  return KL_OK;
}

/* Limits are checked where a value ends or a feed ends, so a malformed byte
 * found past the cap of the value (or list envelope) it is in must report
 * the cap: a cut just before that byte would have. Then the outcome does not
 * depend on where the input was cut. p is where the error was detected. */
static bool over_limit(const kl_json_stream_t *s, const uint8_t *p) {
  if (s->in_value &&
      s->base + (uint64_t)(p - s->chunk) - s->voff > s->max_value)
    return true;
  if (s->env_on) {
    const uint8_t *from = s->env_from ? s->env_from : s->chunk;
    if (s->env.len + (size_t)(p - from) > s->max_value) return true;
  }
  return false;
}

/* The limit error over_limit() found (value first, as suspend checks). */
static int limit_fail(kl_json_stream_t *s, const uint8_t *p) {
  if (s->in_value &&
      s->base + (uint64_t)(p - s->chunk) - s->voff > s->max_value)
    return fail(s, KL_ELIMIT, s->voff + s->max_value,
                "value starting at byte %llu exceeds the %zu-byte limit",
                (unsigned long long)s->voff, s->max_value);
  return fail(s, KL_ELIMIT, s->list_off,
              "list envelope (all but the items) exceeds the %zu-byte limit",
              s->max_value);
}

#define OFF(q) (s->base + (uint64_t)((q)-s->chunk))
#define SUSPEND(st)                                                            \
  do {                                                                         \
    state = (st);                                                              \
    goto suspend;                                                              \
  } while (0)
#define SKIP_WS(st)                                                            \
  do {                                                                         \
    if (p < end && kl_json_ws_tab[*p]) {                                       \
      s->ws_seen = true;                                                       \
      do                                                                       \
        p++;                                                                   \
      while (p < end && kl_json_ws_tab[*p]);                                   \
    }                                                                          \
    if (p == end) SUSPEND(st);                                                 \
  } while (0)
#define FAIL(code, q, ...)                                                     \
  do {                                                                         \
    s->cur = (q);                                                              \
    if (over_limit(s, p)) return limit_fail(s, p);                             \
    return fail(s, code, OFF(q), __VA_ARGS__);                                 \
  } while (0)
#define FAIL_AT(off, ...)                                                      \
  do {                                                                         \
    s->cur = p;                                                                \
    if (over_limit(s, p)) return limit_fail(s, p);                             \
    return fail(s, KL_EPARSE, (off), __VA_ARGS__);                             \
  } while (0)
#define FOUND(c) (describe((c), found, sizeof found), found)

/* A container of the value opens at p, depth containers deep. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void
ct_open(kl_json_stream_t *s, const uint8_t *p, unsigned depth) {
  if (!s->in_value || depth >= KL_JSON_INDEX_DEPTH) return;
  uint64_t off = OFF(p) - s->voff;
  s->ct_at[depth] = NO_ENTRY;
  if (s->nct == KL_JSON_INDEX_MAX || off >= UINT32_MAX) return;
  if (s->nct == s->ct_cap) {
    s->ct_cap = s->ct_cap ? 2 * s->ct_cap : 256;
    s->ct = kl_xrealloc(s->ct, s->ct_cap * sizeof *s->ct);
  }
  s->ct[s->nct].open = (uint32_t)off;
  s->ct[s->nct].close = 0;
  s->ct_at[depth] = (uint32_t)s->nct++;
}

/* The container open at depth closes at p. */
static inline void ct_close(kl_json_stream_t *s, const uint8_t *p,
                            unsigned depth) {
  if (!s->in_value || depth >= KL_JSON_INDEX_DEPTH ||
      s->ct_at[depth] == NO_ENTRY)
    return;
  s->ct[s->ct_at[depth]].close = (uint32_t)(OFF(p) + 1 - s->voff);
}

/* Appends the envelope bytes from where it resumed up to p, and pauses it. */
static void env_add(kl_json_stream_t *s, const uint8_t *p) {
  const uint8_t *from = s->env_from ? s->env_from : s->chunk;
  buf_add(&s->env, from, (size_t)(p - from));
  s->env_on = false;
  s->env_from = NULL;
}

/* Appends n bytes of a depth-1 key (list mode: is it "items"?). */
static inline void key_add(kl_json_stream_t *s, const void *a, size_t n) {
  if (s->keylen + n > 5) {
    s->keylen = 6;
    return;
  }
  memcpy(s->keybuf + s->keylen, a, n);
  s->keylen = (uint8_t)(s->keylen + n);
}

static bool fast_value(kl_json_stream_t *s, const uint8_t *p, unsigned d0,
                       kl_json_value_t *v);

/* The parser, made twice (see kl_json_stream_next): list is a constant in
 * each copy, so the checks for a list's items and captured keys vanish
 * from the one that reads single objects. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int
stream_next(kl_json_stream_t *s, kl_json_value_t *v, const bool list) {
  const uint8_t *p = s->cur, *end = s->end, *run;
  unsigned depth = s->depth;
  uint8_t *stk = s->stack;
  int state = s->state;
  char found[16];
  uint8_t c;

  if (state == S_FAILED) return s->code;
  if (s->tail_used) {
    s->tail_used = false;
    s->tail.len = 0;
    if (s->tail.cap > (1u << 20)) {
      free(s->tail.p);
      s->tail.p = NULL;
      s->tail.cap = 0;
    }
  }

  switch (state) {
  case S_TOP: goto top;
  case S_VALUE: goto value;
  case S_ARR_FIRST: goto arr_first;
  case S_OBJ_FIRST: goto obj_first;
  case S_OBJ_KEY: goto obj_key;
  case S_COLON: goto colon;
  case S_AFTER: goto after;
  case S_STR: goto str;
  case S_ESC: goto esc;
  case S_UHEX: goto uhex;
  case S_SURR_BS: goto surr_bs;
  case S_SURR_U: goto surr_u;
  case S_UTF8: goto utf8;
  case S_NUM_MINUS: goto num_minus;
  case S_NUM_ZERO: goto num_zero;
  case S_NUM_INT: goto num_int;
  case S_NUM_DOT: goto num_dot;
  case S_NUM_FRAC: goto num_frac;
  case S_NUM_E: goto num_e;
  case S_NUM_ESIGN: goto num_esign;
  case S_NUM_EXP: goto num_exp;
  case S_LIT: goto lit;
  default: return KL_EINVAL;
  }

top:
  while (p < end && kl_json_ws_tab[*p])
    p++;
  if (p == end) SUSPEND(S_TOP);
  if (s->mode == KL_JSON_LIST && s->list_started)
    FAIL(KL_EPARSE, p, "trailing data after the list object");
  if (s->mode == MODE_ANY) {
    if (s->list_started)
      FAIL(KL_EPARSE, p, "trailing data after the top-level value");
    s->list_started = true; /* in_value stays false: no tail for one feed */
    s->vstart = p;
    s->voff = OFF(p);
    goto value_nows;
  }
  if (*p != '{') FAIL(KL_EPARSE, p, "top-level value is not an object");
  if (s->mode == KL_JSON_LIST) {
    s->list_started = s->env_on = true;
    s->env_from = p;
    s->list_off = OFF(p);
  } else {
    /* A watch stream ends each event with a newline: one that starts
     * after the feed's last is cut, and the state machine takes it at
     * once. */
    if (s->last_nl && p < s->last_nl && fast_value(s, p, 0, v)) {
      s->state = S_TOP;
      s->depth = 0;
      return KL_OK;
    }
    s->in_value = true;
    s->vstart = p;
    s->voff = OFF(p);
    s->ws_seen = false;
    s->nct = 0;
  }
  goto open_obj;

open_obj: /* *p == '{' */
  if (depth >= s->max_depth)
    FAIL(KL_EPARSE, p, "nesting deeper than %u levels", s->max_depth);
  ct_open(s, p, depth);
  stk[depth++] = C_OBJ;
  p++;
obj_first:
  SKIP_WS(S_OBJ_FIRST);
  if (*p == '"') goto key_start;
  if (*p == '}') goto close;
  FAIL(KL_EPARSE, p, "expected a string key or '}', found %s", FOUND(*p));

obj_key:
  SKIP_WS(S_OBJ_KEY);
  if (*p == '"') goto key_start;
  FAIL(KL_EPARSE, p, "expected a string key, found %s", FOUND(*p));

key_start:
  s->key = true;
  s->capture = list && depth == 1;
  s->keylen = 0;
  p++;
  goto str;

colon:
  SKIP_WS(S_COLON);
  if (*p != ':') FAIL(KL_EPARSE, p, "expected ':', found %s", FOUND(*p));
  p++;
value:
  SKIP_WS(S_VALUE);
value_nows:
  c = *p;
  if (!list) {
  } else if (s->items_next) {
    s->items_next = false;
    if (c == '[') {
      if (depth >= s->max_depth)
        FAIL(KL_EPARSE, p, "nesting deeper than %u levels", s->max_depth);
      stk[depth++] = C_ITEMS;
      p++;
      env_add(s, p);
      if (s->env.len > s->max_value) goto env_limit;
      goto arr_first;
    }
    if (c != 'n') FAIL(KL_EPARSE, p, "\"items\" is not an array");
  } else if (depth && stk[depth - 1] == C_ITEMS) {
    if (c != '{') FAIL(KL_EPARSE, p, "list item is not an object");
    /* A list has no newlines between its items: an item is taken for
     * whole when the feed holds as many bytes as the last one had. */
    if ((size_t)(s->end - p) >= s->last_len && fast_value(s, p, depth, v)) {
      s->last_len = v->json.n;
      s->list.items++;
      s->state = S_AFTER;
      s->depth = depth;
      return KL_OK;
    }
    s->in_value = true;
    s->vstart = p;
    s->voff = OFF(p);
    s->ws_seen = false;
    s->nct = 0;
    goto open_obj;
  }
  switch (c) {
  case '{': goto open_obj;
  case '[':
    if (depth >= s->max_depth)
      FAIL(KL_EPARSE, p, "nesting deeper than %u levels", s->max_depth);
    ct_open(s, p, depth);
    stk[depth++] = C_ARR;
    p++;
    goto arr_first;
  case '"':
    s->key = s->capture = false;
    p++;
    goto str;
  case '-': p++; goto num_minus;
  case '0': p++; goto num_zero;
  case '1':
  case '2':
  case '3':
  case '4':
  case '5':
  case '6':
  case '7':
  case '8':
  case '9': p++; goto num_int;
  case 't': s->lit = "true"; goto lit_start;
  case 'f': s->lit = "false"; goto lit_start;
  case 'n': s->lit = "null"; goto lit_start;
  default: FAIL(KL_EPARSE, p, "expected a value, found %s", FOUND(c));
  }

arr_first:
  SKIP_WS(S_ARR_FIRST);
  if (*p == ']') goto close;
  goto value_nows;

after:
  if (end - p >= 2 && p[0] == ',' && p[1] == '"' && stk[depth - 1] == C_OBJ) {
    p++; /* compact input: the next key follows the comma */
    goto key_start;
  }
  SKIP_WS(S_AFTER);
  c = *p;
  if (stk[depth - 1] == C_OBJ) {
    if (c == ',') {
      p++;
      goto obj_key;
    }
    if (c == '}') goto close;
    FAIL(KL_EPARSE, p, "expected ',' or '}', found %s", FOUND(c));
  }
  if (c == ',') {
    p++;
    goto value;
  }
  if (c == ']') goto close;
  FAIL(KL_EPARSE, p, "expected ',' or ']', found %s", FOUND(c));

close: /* *p closes stk[depth - 1] */
  ct_close(s, p, depth - 1);
  if (stk[--depth] == C_ITEMS) {
    s->env_on = true;
    s->env_from = p;
  }
  p++;
  if (depth == 0) {
    if (s->mode != KL_JSON_LIST) goto yield;
    /* The list object is complete. */
    env_add(s, p);
    if (s->env.len > s->max_value) goto env_limit;
    s->cur = p;
    if (read_envelope(s) != KL_OK) return s->code;
    s->list_done = true;
    goto top;
  }
  if (s->in_value && depth == 2 && stk[1] == C_ITEMS) goto yield;
  goto after;

value_done:                   /* a scalar ended */
  if (depth == 0) goto yield; /* MODE_ANY only */
  goto after;

  /* --- strings --- */
str:
  run = p;
  for (;;) {
    p = (const uint8_t *)kl_scan_special((const char *)p, (const char *)end);
    /* p == end or *p is not plain */
    if (p == end) {
      if (s->capture) key_add(s, run, (size_t)(p - run));
      SUSPEND(S_STR);
    }
    c = *p;
    if (c == '"') {
      if (s->capture) key_add(s, run, (size_t)(p - run));
      p++;
      if (!s->key) goto value_done;
      if (s->capture)
        s->items_next = s->keylen == 5 && memcmp(s->keybuf, "items", 5) == 0;
      if (end - p >= 2 && *p == ':' && !kl_json_ws_tab[p[1]]) {
        p++; /* compact input: the value follows the colon */
        goto value_nows;
      }
      goto colon;
    }
    if (c == '\\') {
      if (s->capture) key_add(s, run, (size_t)(p - run));
      s->esc_off = OFF(p);
      p++;
      goto esc;
    }
    if (c < 0x20) FAIL(KL_EPARSE, p, "control character 0x%02x in a string", c);
    /* A UTF-8 lead byte. */
    s->u8_off = OFF(p);
    if (c < 0xc2) FAIL(KL_EPARSE, p, "invalid UTF-8");
    if (c < 0xe0) {
      s->u8_need = 1;
      s->u8_lo = 0x80;
      s->u8_hi = 0xbf;
    } else if (c < 0xf0) {
      s->u8_need = 2;
      s->u8_lo = c == 0xe0 ? 0xa0 : 0x80;
      s->u8_hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c < 0xf5) {
      s->u8_need = 3;
      s->u8_lo = c == 0xf0 ? 0x90 : 0x80;
      s->u8_hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
      FAIL(KL_EPARSE, p, "invalid UTF-8");
    }
    if (s->capture) s->keylen = 6;
    p++;
  utf8:
    while (s->u8_need) {
      if (p == end) SUSPEND(S_UTF8);
      if (*p < s->u8_lo || *p > s->u8_hi) FAIL_AT(s->u8_off, "invalid UTF-8");
      s->u8_lo = 0x80;
      s->u8_hi = 0xbf;
      s->u8_need--;
      p++;
    }
    run = p;
  }

esc:
  if (p == end) SUSPEND(S_ESC);
  c = *p;
  switch (c) {
  case '"':
  case '\\':
  case '/': break;
  case 'b': c = '\b'; break;
  case 'f': c = '\f'; break;
  case 'n': c = '\n'; break;
  case 'r': c = '\r'; break;
  case 't': c = '\t'; break;
  case 'u':
    p++;
    s->hex_left = 4;
    s->ucp = 0;
    goto uhex;
  default:
    FAIL_AT(s->esc_off, "invalid escape '\\%c'",
            c > 0x20 && c < 0x7f ? c : '?');
  }
  if (s->capture) key_add(s, &c, 1);
  p++;
  goto str;

uhex:
  while (s->hex_left) {
    if (p == end) SUSPEND(S_UHEX);
    int h = kl_json_hexval(*p);
    if (h < 0) FAIL_AT(s->esc_off, "invalid \\u escape");
    s->ucp = s->ucp << 4 | (uint32_t)h;
    s->hex_left--;
    p++;
  }
  if (s->hi_surr) {
    if (s->ucp < 0xdc00 || s->ucp > 0xdfff)
      FAIL_AT(s->hi_off, "unpaired UTF-16 surrogate in \\u escape");
    s->hi_surr = 0;
    if (s->capture) s->keylen = 6;
    goto str;
  }
  if (s->ucp >= 0xd800 && s->ucp <= 0xdbff) {
    s->hi_surr = s->ucp;
    s->hi_off = s->esc_off;
    goto surr_bs;
  }
  if (s->ucp >= 0xdc00 && s->ucp <= 0xdfff)
    FAIL_AT(s->esc_off, "unpaired UTF-16 surrogate in \\u escape");
  if (s->capture) {
    if (s->ucp < 0x80) {
      c = (uint8_t)s->ucp;
      key_add(s, &c, 1);
    } else {
      s->keylen = 6;
    }
  }
  goto str;

surr_bs:
  if (p == end) SUSPEND(S_SURR_BS);
  if (*p != '\\') FAIL_AT(s->hi_off, "unpaired UTF-16 surrogate in \\u escape");
  s->esc_off = OFF(p);
  p++;
surr_u:
  if (p == end) SUSPEND(S_SURR_U);
  if (*p != 'u') FAIL_AT(s->hi_off, "unpaired UTF-16 surrogate in \\u escape");
  p++;
  s->hex_left = 4;
  s->ucp = 0;
  goto uhex;

  /* --- numbers --- */
num_minus:
  if (p == end) SUSPEND(S_NUM_MINUS);
  if (*p == '0') {
    p++;
    goto num_zero;
  }
  if (!kl_json_is_digit(*p)) FAIL(KL_EPARSE, p, "invalid number");
  p++;
num_int:
  while (p < end && kl_json_is_digit(*p))
    p++;
  if (p == end) SUSPEND(S_NUM_INT);
  goto num_tail;
num_zero:
  if (p == end) SUSPEND(S_NUM_ZERO);
  if (kl_json_is_digit(*p)) FAIL(KL_EPARSE, p, "invalid number (leading zero)");
num_tail:
  if (*p == '.') {
    p++;
    goto num_dot;
  }
  if ((*p | 0x20) == 'e') {
    p++;
    goto num_e;
  }
  goto value_done;
num_dot:
  if (p == end) SUSPEND(S_NUM_DOT);
  if (!kl_json_is_digit(*p)) FAIL(KL_EPARSE, p, "invalid number");
  p++;
num_frac:
  while (p < end && kl_json_is_digit(*p))
    p++;
  if (p == end) SUSPEND(S_NUM_FRAC);
  if ((*p | 0x20) == 'e') {
    p++;
    goto num_e;
  }
  goto value_done;
num_e:
  if (p == end) SUSPEND(S_NUM_E);
  if (*p == '+' || *p == '-') {
    p++;
    goto num_esign;
  }
  if (!kl_json_is_digit(*p)) FAIL(KL_EPARSE, p, "invalid number");
  p++;
  goto num_exp;
num_esign:
  if (p == end) SUSPEND(S_NUM_ESIGN);
  if (!kl_json_is_digit(*p)) FAIL(KL_EPARSE, p, "invalid number");
  p++;
num_exp:
  while (p < end && kl_json_is_digit(*p))
    p++;
  if (p == end) SUSPEND(S_NUM_EXP);
  goto value_done;

  /* --- true, false, null --- */
lit_start:
  s->lit_i = 1;
  p++;
lit:
  while (s->lit[s->lit_i]) {
    if (p == end) SUSPEND(S_LIT);
    if (*p != (uint8_t)s->lit[s->lit_i])
      FAIL(KL_EPARSE, p, "invalid literal (expected %s)", s->lit);
    s->lit_i++;
    p++;
  }
  goto value_done;

yield : {
  uint64_t len = OFF(p) - s->voff;
  if (len > s->max_value) {
    s->cur = p;
    return fail(s, KL_ELIMIT, s->voff + s->max_value,
                "value starting at byte %llu exceeds the %zu-byte limit",
                (unsigned long long)s->voff, s->max_value);
  }
  if (s->vstart) {
    v->json.p = (const char *)s->vstart;
    v->json.n = (size_t)(p - s->vstart);
  } else {
    buf_add(&s->tail, s->chunk, (size_t)(p - s->chunk));
    v->json.p = s->tail.p;
    v->json.n = s->tail.len;
    s->tail_used = true;
  }
  v->offset = s->voff;
  v->compact = !s->ws_seen;
  v->containers = s->nct ? s->ct : NULL;
  v->ncontainers = s->nct;
  s->in_value = false;
  s->vstart = NULL;
  if (s->mode == KL_JSON_LIST) {
    s->list.items++;
    s->last_len = v->json.n;
  }
  s->state = depth ? S_AFTER : S_TOP;
  s->depth = depth;
  s->cur = p;
  return KL_OK;
}

env_limit:
  s->cur = p;
  return fail(s, KL_ELIMIT, s->list_off,
              "list envelope (all but the items) exceeds the %zu-byte limit",
              s->max_value);

suspend: /* p == end */
  s->state = state;
  s->depth = depth;
  s->cur = p;
  if (s->in_value) {
    const uint8_t *from = s->vstart ? s->vstart : s->chunk;
    if (s->tail.len + (size_t)(end - from) > s->max_value)
      return fail(s, KL_ELIMIT, s->voff + s->max_value,
                  "value starting at byte %llu exceeds the %zu-byte limit",
                  (unsigned long long)s->voff, s->max_value);
    buf_add(&s->tail, from, (size_t)(end - from));
    s->vstart = NULL;
  }
  if (s->env_on) {
    const uint8_t *from = s->env_from ? s->env_from : s->chunk;
    if (s->env.len + (size_t)(end - from) > s->max_value) goto env_limit;
    buf_add(&s->env, from, (size_t)(end - from));
    s->env_from = NULL;
  }
  return KL_EAGAIN;
}

int kl_json_stream_next(kl_json_stream_t *s, kl_json_value_t *v) {
  /* only a list has items and captured keys */
  return s->mode == KL_JSON_LIST ? stream_next(s, v, true)
                                 : stream_next(s, v, false);
}

int kl_json_stream_end(kl_json_stream_t *s) {
  if (s->state == S_FAILED) return s->code;
  if (s->cur != s->end) return KL_EINVAL;
  uint64_t off = kl_json_stream_offset(s);
  if (s->mode == KL_JSON_LIST) {
    if (!s->list_started)
      return fail(s, KL_EPARSE, off,
                  "unexpected end of stream: no list object");
    if (!s->list_done)
      return fail(s, KL_EPARSE, off,
                  "unexpected end of stream inside the list object that "
                  "starts at byte %llu",
                  (unsigned long long)s->list_off);
    return KL_OK;
  }
  if (s->mode == MODE_ANY && s->depth == 0 &&
      (s->state == S_NUM_INT || s->state == S_NUM_ZERO ||
       s->state == S_NUM_FRAC || s->state == S_NUM_EXP))
    return KL_OK; /* a top-level number ends with the input */
  if (s->state != S_TOP)
    return fail(s, KL_EPARSE, off,
                "unexpected end of stream inside the value that starts at "
                "byte %llu",
                (unsigned long long)s->voff);
  if (s->mode == MODE_ANY && !s->list_started)
    return fail(s, KL_EPARSE, off, "unexpected end of stream: no value");
  return KL_OK;
}

/* --- Checking a whole object at once --- */

/* The end of the number that starts at p, or NULL when it is not one. */
static const uint8_t *number_end(const uint8_t *p, const uint8_t *end) {
  if (*p == '-' && ++p == end) return NULL;
  if (*p == '0') {
    p++;
  } else {
    if (!kl_json_is_digit(*p)) return NULL;
    while (++p < end && kl_json_is_digit(*p))
      ;
  }
  if (p < end && *p == '.') {
    if (++p == end || !kl_json_is_digit(*p)) return NULL;
    while (++p < end && kl_json_is_digit(*p))
      ;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    if (++p < end && (*p == '+' || *p == '-')) p++;
    if (p == end || !kl_json_is_digit(*p)) return NULL;
    while (++p < end && kl_json_is_digit(*p))
      ;
  }
  return p;
}

/* Indexes a container that opens at p, depth deep in the value (as ct_open
 * does); ixd: how deep in the value the index goes. */
static inline void whole_open(kl_json_ctbuf_t *ix, size_t *nct, uint32_t *at,
                              const uint8_t *p, const uint8_t *start,
                              unsigned depth, unsigned ixd) {
  if (depth >= ixd) return;
  at[depth] = NO_ENTRY;
  if (*nct == KL_JSON_INDEX_MAX) return;
  if (*nct == ix->cap) {
    ix->cap = ix->cap ? 2 * ix->cap : 256;
    ix->ct = kl_xrealloc(ix->ct, ix->cap * sizeof *ix->ct);
  }
  ix->ct[*nct] = (kl_json_container_t){(uint32_t)(p - start), 0};
  at[depth] = (uint32_t)(*nct)++;
}

/* Notes where the container closing at p ends (as ct_close does). */
static inline void whole_close(kl_json_ctbuf_t *ix, const uint32_t *at,
                               const uint8_t *p, const uint8_t *start,
                               unsigned depth, unsigned ixd) {
  if (depth < ixd && at[depth] != NO_ENTRY)
    ix->ct[at[depth]].close = (uint32_t)(p + 1 - start);
}

#define WHOLE_WS()                                                             \
  do {                                                                         \
    if (p < end && kl_json_ws_tab[*p]) {                                       \
      ws = true;                                                               \
      do                                                                       \
        p++;                                                                   \
      while (p < end && kl_json_ws_tab[*p]);                                   \
    }                                                                          \
    if (p == end) return false;                                                \
  } while (0)

/* Where meta (kl_json_check_meta) is in a checked object's top levels:
 * the top level's member named "metadata" comes, its value is the object
 * open now, or neither. */
enum { MD_OUT, MD_KEY, MD_IN };

/* The value that follows the member name ending at the quote q (the colon
 * and whitespace are not checked here: the check goes on over them). */
static const uint8_t *after_colon(const uint8_t *q, const uint8_t *end) {
  q++;
  while (q < end && (kl_json_ws_tab[*q] || *q == ':'))
    q++;
  return q;
}

/* Looks at the member name [ks, q) (q its closing quote) of the object
 * depth levels deep, for kl_json_check_meta: notes metadata's place and
 * where the values of its name, namespace and resourceVersion start. esc:
 * the name holds an escape, which is not compared here (m->unsure). */
static inline void meta_key(kl_json_meta_t *m, int *md, unsigned depth,
                            const uint8_t *ks, const uint8_t *q,
                            const uint8_t *end, bool esc) {
  size_t n = (size_t)(q - ks);
  if (depth == 1) {
    *md = !esc && n == 8 && !memcmp(ks, "metadata", 8) ? MD_KEY : MD_OUT;
    if (*md == MD_KEY) /* a repeated "metadata": the last one wins */
      m->ns = m->name = m->rv = NULL;
    m->unsure |= esc;
    return;
  }
  if (*md != MD_IN) return;
  if (esc)
    m->unsure = true;
  else if (n == 4 && !memcmp(ks, "name", 4))
    m->name = (const char *)after_colon(q, end);
  else if (n == 9 && !memcmp(ks, "namespace", 9))
    m->ns = (const char *)after_colon(q, end);
  else if (n == 15 && !memcmp(ks, "resourceVersion", 15))
    m->rv = (const char *)after_colon(q, end);
}

/* Where check_value looks for the end of a string. The portable way scans
 * from the string's first byte (kl_json_str_close). With SSE2 or AVX2 it
 * keeps the special bytes ('"', '\\', control and high bytes) of a 64-byte
 * window as one mask, made once for the window (json_simd.h), and a string
 * that starts inside the window takes its end from the mask: most of a
 * Pod's strings are short, so one window serves several. A two-byte escape
 * is stepped over in the mask too (a managedFields name such as
 * k:{\"type\":\"Ready\"} holds four); anything else special (\u, UTF-8,
 * a control byte) goes to kl_json_str_rest, which checks it. */
typedef struct win {
  const uint8_t *base; /* the window's first byte */
  size_t n;            /* its length: 64, or 0 before the first */
  uint64_t special;    /* its special bytes, bit i for base[i] */
} win_t;

/* The bytes that make a two-byte escape after a backslash. */
static const uint8_t short_escape[256] = {
    ['"'] = 1, ['\\'] = 1, ['/'] = 1, ['b'] = 1,
    ['f'] = 1, ['n'] = 1,  ['r'] = 1, ['t'] = 1};

static inline __attribute__((always_inline)) const uint8_t *
str_close(const uint8_t *s, const uint8_t *end, win_t *w, bool *esc,
          const int isa) {
#if KL_SIMD_X86
  if (isa != KL_JSON_ISA_PORTABLE) {
    for (;;) {
      size_t off = (size_t)(s - w->base);
      if (off >= w->n) {
        if (end - s < 64) break; /* too near the end for a window */
        w->base = s;
        w->n = 64;
        w->special = isa == KL_JSON_ISA_AVX2 ? kl_simd_special64_avx2(s)
                                             : kl_simd_special64_sse2(s);
        off = 0;
      }
      uint64_t sp = w->special >> off;
      if (!sp) {
        s = w->base + 64; /* the string goes on past the window */
        continue;
      }
      const uint8_t *q = s + __builtin_ctzll(sp);
      if (__builtin_expect(*q == '"', 1)) return q;
      if (*q != '\\' || end - q < 2 || !short_escape[q[1]])
        return (const uint8_t *)kl_json_str_rest((const char *)q,
                                                 (const char *)end, esc);
      *esc = true;
      s = q + 2; /* the string goes on after the escape */
    }
  }
#else
  (void)w;
  (void)isa;
#endif
  return (const uint8_t *)kl_json_str_close((const char *)s, (const char *)end,
                                            esc);
}

/* The stream's grammar, limits and index for one object that starts at p
 * (its '{', d0 containers deep in the stream: the index and the nesting
 * limit max_depth count from there) and lies whole in [p, end), without
 * the stream's suspend points and state: on true, *v is filled (offset 0)
 * and *stop is the byte after the object. It answers only yes or no; for
 * no (a bad object, or one that does not end before end) the stream reads
 * the bytes itself and says where and why. With m, it finds metadata's
 * members instead of indexing (kl_json_check_meta). Inlined for each
 * caller, so each pays only for its own options. */
static inline __attribute__((always_inline)) bool
check_value(const uint8_t *p, const uint8_t *end, unsigned d0,
            unsigned max_depth, kl_json_value_t *v, kl_json_ctbuf_t *ix,
            kl_json_meta_t *m, const uint8_t **stop, const int isa) {
  const uint8_t *start = p, *ks;
  win_t win = {p, 0, 0};            /* none yet: the first string makes it */
  uint8_t stk[KL_JSON_MAX_DEPTH];   /* each open container's closer */
  uint32_t at[KL_JSON_INDEX_DEPTH]; /* each indexed container's entry */
  unsigned depth = 0;
  size_t nct = 0;
  uint8_t cl; /* the innermost container's closer: '}' or ']' */
  bool ws = false, esc = false;
  int md = MD_OUT;
  /* Containers open at once, and indexed ones, counted in the value. */
  unsigned lim = d0 < max_depth ? max_depth - d0 : 0;
  unsigned ixd = d0 < KL_JSON_INDEX_DEPTH ? KL_JSON_INDEX_DEPTH - d0 : 0;
  if (lim > KL_JSON_MAX_DEPTH) lim = KL_JSON_MAX_DEPTH;
  /* Where an empty object after a name is taken in one step: depth - flat
   * < nflat, for depth >= ixd, > 1 and < lim, in one comparison. */
  unsigned flat = ixd > 2 ? ixd : 2, nflat = lim > flat ? lim - flat : 0;
  for (unsigned i = 0; i < KL_JSON_INDEX_DEPTH; i++)
    at[i] = NO_ENTRY; /* whole_open sets each before use: for the compiler */
  if (m) *m = (kl_json_meta_t){NULL, NULL, NULL, false};
open:
  if (depth >= lim) return false;
  if (m && depth == 1) md = md == MD_KEY && *p == '{' ? MD_IN : MD_OUT;
  if (!m) whole_open(ix, &nct, at, p, start, depth, ixd);
  cl = *p == '{' ? '}' : ']';
  stk[depth++] = cl;
  p++;
  if (p < end && *p == '"') { /* compact input: a name, or a string */
    if (cl == '}') goto key;
    goto string;
  }
  WHOLE_WS();
  if (*p == cl) goto close;
  if (cl == ']') goto value;
key:
  if (*p != '"') return false;
  ks = ++p;
  if (m) esc = false; /* for meta_key: whether this name holds an escape */
  p = str_close(p, end, &win, &esc, isa);
  if (!p) return false;
  if (m && depth <= 2) meta_key(m, &md, depth, ks, p, end, esc);
  if (end - p >= 3 && p[1] == ':') {
    p += 2; /* compact input: the value follows the colon */
    if (*p == '"') goto string;
    if (*p == '{' && end - p >= 2 && p[1] == '}' && depth - flat < nflat) {
      p += 2; /* {}, unindexed: a leaf of managedFields' fieldsV1 */
      goto after;
    }
  } else {
    p++;
    WHOLE_WS();
    if (*p != ':') return false;
    p++;
  }
value:
  if (p == end) return false;
  switch (*p) { /* whitespace among the cases: compact input meets none */
  case ' ':
  case '\t':
  case '\n':
  case '\r': WHOLE_WS(); goto value;
  case '"':
  string:
    p = str_close(p + 1, end, &win, &esc, isa);
    if (!p) return false;
    p++;
    break;
  case '{':
  case '[': goto open;
  case 't':
    if (end - p < 4 || memcmp(p, "true", 4) != 0) return false;
    p += 4;
    break;
  case 'f':
    if (end - p < 5 || memcmp(p, "false", 5) != 0) return false;
    p += 5;
    break;
  case 'n':
    if (end - p < 4 || memcmp(p, "null", 4) != 0) return false;
    p += 4;
    break;
  default:
    if (*p != '-' && !kl_json_is_digit(*p)) return false;
    if (!(p = number_end(p, end))) return false;
  }
after:
  if (p == end) return false;
  if (*p == ',') {
    p++;
    if (cl == '}') {
      if (p < end && *p == '"') goto key; /* compact: the next key */
      WHOLE_WS();
      goto key;
    }
    goto value;
  }
  if (*p != cl) {
    WHOLE_WS();
    if (*p == ',') goto after;
    if (*p != cl) return false;
  }
close:
  depth--;
  if (!m) whole_close(ix, at, p, start, depth, ixd);
  p++;
  if (depth) {
    cl = stk[depth - 1];
    goto after;
  }
  v->json = (kl_json_span_t){(const char *)start, (size_t)(p - start)};
  v->offset = 0;
  v->compact = !ws;
  v->containers = nct ? ix->ct : NULL;
  v->ncontainers = nct;
  *stop = p;
  return true;
}

#if KL_SIMD_X86
/* check_value with the window of each instruction set, compiled for it,
 * one copy to index (m NULL) and one to find metadata (ix NULL). */
#define CHECK_VALUE_ISA(name, target_attr, isa, ix_arg, m_arg)                 \
  static target_attr bool name(const uint8_t *p, const uint8_t *end,           \
                               unsigned d0, unsigned max_depth,                \
                               kl_json_value_t *v, kl_json_ctbuf_t *ix,        \
                               kl_json_meta_t *m, const uint8_t **stop) {      \
    (void)ix;                                                                  \
    (void)m;                                                                   \
    return check_value(p, end, d0, max_depth, v, ix_arg, m_arg, stop, isa);    \
  }
CHECK_VALUE_ISA(check_index_sse2, __attribute__((flatten)), KL_JSON_ISA_SSE2,
                ix, NULL)
CHECK_VALUE_ISA(check_meta_sse2, __attribute__((flatten)), KL_JSON_ISA_SSE2,
                NULL, m)
CHECK_VALUE_ISA(check_index_avx2, __attribute__((target("avx2"), flatten)),
                KL_JSON_ISA_AVX2, ix, NULL)
CHECK_VALUE_ISA(check_meta_avx2, __attribute__((target("avx2"), flatten)),
                KL_JSON_ISA_AVX2, NULL, m)
#undef CHECK_VALUE_ISA

static inline bool have_avx2(void) { return __builtin_cpu_supports("avx2"); }
#endif
/* check_value with isa (KL_JSON_ISA_BEST: the best the processor has). */
static inline __attribute__((always_inline)) bool
check_value_isa(kl_json_isa_t isa, const uint8_t *p, const uint8_t *end,
                unsigned d0, unsigned max_depth, kl_json_value_t *v,
                kl_json_ctbuf_t *ix, kl_json_meta_t *m, const uint8_t **stop) {
#if KL_SIMD_X86
  if (isa == KL_JSON_ISA_BEST)
    isa = have_avx2() ? KL_JSON_ISA_AVX2 : KL_JSON_ISA_SSE2;
  if (isa == KL_JSON_ISA_AVX2)
    return (m ? check_meta_avx2 : check_index_avx2)(p, end, d0, max_depth, v,
                                                    ix, m, stop);
  if (isa == KL_JSON_ISA_SSE2)
    return (m ? check_meta_sse2 : check_index_sse2)(p, end, d0, max_depth, v,
                                                    ix, m, stop);
#endif
  return check_value(p, end, d0, max_depth, v, ix, m, stop,
                     KL_JSON_ISA_PORTABLE);
}

bool kl_json_isa_has(kl_json_isa_t isa) {
  switch (isa) {
  case KL_JSON_ISA_BEST:
  case KL_JSON_ISA_PORTABLE: return true;
#if KL_SIMD_X86
  case KL_JSON_ISA_SSE2: return true;
  case KL_JSON_ISA_AVX2: return have_avx2();
#endif
  default: return false;
  }
}

/* The stream's fast path: the object that starts at p, d0 containers deep,
 * when it lies whole in this feed and check_value passes it; then *v is
 * the value the state machine would yield and s->cur its end. false
 * leaves everything to the state machine, which reads the object again
 * and says where and why a bad one fails: that costs a second pass only
 * for errors and the object a feed cuts, which the callers mostly leave
 * to the state machine at once (by the feed's last newline in a watch
 * stream, by the last item's size in a list). */
static bool fast_value(kl_json_stream_t *s, const uint8_t *p, unsigned d0,
                       kl_json_value_t *v) {
  size_t room = (size_t)(s->end - p), cap = s->max_value;
  const uint8_t *stop;
  kl_json_ctbuf_t ix = {s->ct, s->ct_cap};
  if (cap > UINT32_MAX - 1) cap = UINT32_MAX - 1; /* offsets are 32-bit */
  bool ok = check_value_isa(KL_JSON_ISA_BEST, p, room > cap ? p + cap : s->end,
                            d0, s->max_depth, v, &ix, NULL, &stop);
  s->ct = ix.ct;
  s->ct_cap = ix.cap;
  if (!ok) return false;
  v->offset = OFF(p);
  s->cur = stop;
  return true;
}

/* kl_json_check_indexed's fast path, for a text that is all there: one
 * object with whitespace around it (check_value). */
static inline __attribute__((always_inline)) bool
check_whole(kl_json_isa_t isa, const void *buf, size_t len, kl_json_value_t *v,
            kl_json_ctbuf_t *ix, kl_json_meta_t *m) {
  const uint8_t *base = buf, *p = base, *end = base + len;
  if (len > KL_JSON_MAX_VALUE || len >= UINT32_MAX) return false;
  while (p < end && kl_json_ws_tab[*p])
    p++;
  if (p == end || *p != '{') return false;
  if (!check_value_isa(isa, p, end, 0, KL_JSON_MAX_DEPTH, v, ix, m, &p))
    return false;
  v->offset = (uint64_t)(v->json.p - (const char *)base);
  while (p < end && kl_json_ws_tab[*p])
    p++;
  return p == end;
}

#undef WHOLE_WS

bool kl_json_check_whole(const void *buf, size_t len, kl_json_value_t *v,
                         kl_json_ctbuf_t *ix) {
  return check_whole(KL_JSON_ISA_BEST, buf, len, v, ix, NULL);
}

bool kl_json_check_meta(const void *buf, size_t len, kl_json_value_t *v,
                        kl_json_meta_t *m) {
  return check_whole(KL_JSON_ISA_BEST, buf, len, v, NULL, m);
}

bool kl_json_check_whole_isa(kl_json_isa_t isa, const void *buf, size_t len,
                             kl_json_value_t *v, kl_json_ctbuf_t *ix,
                             kl_json_meta_t *m) {
  if (!kl_json_isa_has(isa)) return false;
  return check_whole(isa, buf, len, v, m ? NULL : ix, m);
}

int kl_json_check_indexed(const void *buf, size_t len, kl_json_value_t *v,
                          kl_json_ctbuf_t *ix, char *err, size_t errlen) {
  if (kl_json_check_whole(buf, len, v, ix)) return KL_OK;
  kl_json_stream_t s;
  int rc;
  init(&s, NULL);
  s.ct = ix->ct;
  s.ct_cap = ix->cap;
  kl_json_stream_feed(&s, buf, len);
  rc = kl_json_stream_next(&s, v);
  if (rc == KL_OK) {
    const char *p = kl_json_ws(v->json.p + v->json.n, (const char *)buf + len);
    if (p != (const char *)buf + len)
      rc = fail(&s, KL_EPARSE, (uint64_t)(p - (const char *)buf),
                "trailing data after the top-level object");
  } else if (rc == KL_EAGAIN) {
    rc = kl_json_stream_end(&s);
    if (rc == KL_OK)
      rc = fail(&s, KL_EPARSE, len, "unexpected end of stream: no object");
  }
  if (rc != KL_OK && errlen) snprintf(err, errlen, "%s", s.err);
  ix->ct = s.ct; /* the index stays in ix, where v->containers points */
  ix->cap = s.ct_cap;
  s.ct = NULL;
  clear(&s);
  return rc;
}

int kl_json_check(const void *buf, size_t len, kl_json_value_t *v, char *err,
                  size_t errlen) {
  kl_json_ctbuf_t ix = {NULL, 0};
  int rc = kl_json_check_indexed(buf, len, v, &ix, err, errlen);
  free(ix.ct);
  v->containers = NULL;
  v->ncontainers = 0;
  return rc;
}

int kl_json_validate(const void *buf, size_t len, unsigned max_depth, char *err,
                     size_t errlen) {
  kl_json_stream_t s;
  kl_json_opts_t opts = {MODE_ANY, (size_t)-1, max_depth};
  kl_json_value_t v;
  int rc;
  init(&s, &opts);
  kl_json_stream_feed(&s, buf, len);
  while ((rc = kl_json_stream_next(&s, &v)) == KL_OK)
    continue;
  if (rc == KL_EAGAIN) rc = kl_json_stream_end(&s);
  if (rc != KL_OK && errlen) snprintf(err, errlen, "%s", s.err);
  clear(&s);
  return rc;
}

/* --- Reading validated JSON --- */

const char *kl_json_ws(const char *p, const char *end) {
  while (p < end && kl_json_ws_tab[(uint8_t)*p])
    p++;
  return p;
}

/* Returns the byte after the closing quote of the string whose contents
 * start at p, or NULL. */
static const char *skip_str(const char *p, const char *end) {
  for (;;) {
    p = kl_scan_quote_bs(p, end);
    if (p >= end) return NULL;
    if (*p == '"') return p + 1;
    p += 2;
  }
}

const char *kl_json_skip(const char *p, const char *end) {
  if (p >= end) return NULL;
  switch (*p) {
  case '"': return skip_str(p + 1, end);
  case '{':
  case '[': {
    int depth = 0;
    while (p < end) {
      switch (*p) {
      case '"':
        p = skip_str(p + 1, end);
        if (!p) return NULL;
        continue;
      case '{':
      case '[': depth++; break;
      case '}':
      case ']':
        if (--depth == 0) return p + 1;
        break;
      default: break;
      }
      p++;
    }
    return NULL;
  }
  default:
    while (p < end && *p != ',' && *p != '}' && *p != ']' &&
           !kl_json_ws_tab[(uint8_t)*p])
      p++;
    return p;
  }
}

/* Writes code point cp as UTF-8 at out; returns the byte count. */
static size_t put_utf8(uint32_t cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | cp >> 12);
    out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | cp >> 18);
  out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
  out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

static uint32_t hex4(const char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    int h = kl_json_hexval((uint8_t)p[i]);
    v = v << 4 | (uint32_t)(h < 0 ? 0 : h);
  }
  return v;
}

size_t kl_json_unescape(const char *p, size_t n, char *out) {
  const char *end = p + n;
  char *o = out;
  while (p < end) {
    const char *q = memchr(p, '\\', (size_t)(end - p));
    if (!q) q = end;
    memmove(o, p, (size_t)(q - p));
    o += q - p;
    p = q;
    if (p + 1 >= end) break;
    char c = p[1];
    p += 2;
    switch (c) {
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      if (end - p < 4) return (size_t)(o - out);
      uint32_t cp = hex4(p);
      p += 4;
      if (cp >= 0xd800 && cp <= 0xdbff && end - p >= 6 && p[0] == '\\' &&
          p[1] == 'u') {
        uint32_t lo = hex4(p + 2);
        if (lo >= 0xdc00 && lo <= 0xdfff) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          p += 6;
        }
      }
      o += put_utf8(cp, o);
      break;
    }
    default: *o++ = c; break;
    }
  }
  return (size_t)(o - out);
}

/* Compares the raw string contents [p, p+n) with key after decoding; esc:
 * whether they hold a backslash. */
static bool key_equals(const char *p, size_t n, bool esc, const char *key,
                       size_t klen) {
  if (!esc) return n == klen && memcmp(p, key, n) == 0;
  /* an escape makes the raw name longer than the decoded one */
  if (n <= klen || n > 1024) return false;
  char tmp[1024];
  size_t m = kl_json_unescape(p, n, tmp);
  return m == klen && memcmp(tmp, key, m) == 0;
}

const char *kl_json_skip_in(const kl_json_value_t *v, const char *p,
                            const char *end) {
  if (v && v->ncontainers && p < end && (*p == '{' || *p == '[') &&
      p >= v->json.p) {
    size_t off = (size_t)(p - v->json.p), lo = 0, hi = v->ncontainers;
    while (lo < hi) { /* the index is ordered by open */
      size_t mid = lo + (hi - lo) / 2;
      if (v->containers[mid].open < off)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo < v->ncontainers && v->containers[lo].open == off) {
      const char *e = v->json.p + v->containers[lo].close;
      if (e > p && e <= end) return e;
    }
  }
  return kl_json_skip(p, end);
}

#define KEYS_FIXED 8 /* key lengths measured once, for this many keys */

bool kl_json_members_in(const kl_json_value_t *v, kl_json_span_t obj,
                        const char *const *keys, size_t n,
                        kl_json_span_t *vals) {
  const char *p = obj.p, *end = obj.p + obj.n;
  size_t klen[KEYS_FIXED];
  for (size_t i = 0; i < n; i++) {
    vals[i] = (kl_json_span_t){NULL, 0};
    if (i < KEYS_FIXED) klen[i] = strlen(keys[i]);
  }
  p = kl_json_ws(p, end);
  if (p == end || *p != '{') return false;
  p = kl_json_ws(p + 1, end);
  if (p < end && *p == '}') return true;
  while (p < end && *p == '"') {
    const char *ks = p + 1, *ke = kl_scan_quote_bs(ks, end);
    bool esc = ke < end && *ke == '\\'; /* the first stop is a backslash */
    ke = esc ? skip_str(ke, end) : ke < end ? ke + 1 : NULL;
    if (!ke) return false;
    p = ke;
    if (end - p >= 2 && *p == ':' && !kl_json_ws_tab[(uint8_t)p[1]]) {
      p++; /* compact: the value follows the colon */
    } else {
      p = kl_json_ws(p, end);
      if (p == end || *p != ':') return false;
      p = kl_json_ws(p + 1, end);
    }
    const char *ve = p < end && *p == '"' ? skip_str(p + 1, end)
                                          : kl_json_skip_in(v, p, end);
    if (!ve) return false;
    /* A repeated key: the last one wins, as in kl_obj_parse, kubelua.json
     * and Go's encoding/json, so every reader sees the same value. */
    size_t kn = (size_t)(ke - 1 - ks);
    for (size_t i = 0; i < n; i++) {
      size_t kl = i < KEYS_FIXED ? klen[i] : strlen(keys[i]);
      /* a plain name is compared here: a call a key is too dear */
      if (esc ? key_equals(ks, kn, esc, keys[i], kl)
              : kn == kl &&
                    (!kn || (*ks == *keys[i] && !memcmp(ks, keys[i], kn)))) {
        vals[i] = (kl_json_span_t){p, (size_t)(ve - p)};
        break;
      }
    }
    p = ve;
    if (end - p >= 2 && p[0] == ',' && p[1] == '"') {
      p++; /* compact: the next key follows the comma */
      continue;
    }
    p = kl_json_ws(p, end);
    if (p < end && *p == '}') return true;
    if (p == end || *p != ',') return false;
    p = kl_json_ws(p + 1, end);
  }
  return false;
}

bool kl_json_members(kl_json_span_t obj, const char *const *keys, size_t n,
                     kl_json_span_t *vals) {
  return kl_json_members_in(NULL, obj, keys, n, vals);
}

bool kl_json_member(kl_json_span_t obj, const char *key, kl_json_span_t *val) {
  kl_json_span_t v;
  if (!kl_json_members(obj, &key, 1, &v) || !v.p) return false;
  *val = v;
  return true;
}

bool kl_json_int64(kl_json_span_t v, int64_t *out) {
  const char *p = v.p, *end = v.p + v.n;
  bool neg = false;
  uint64_t acc = 0, lim;
  if (p < end && *p == '-') {
    neg = true;
    p++;
  }
  if (p == end) return false;
  lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; p < end; p++) {
    if (!kl_json_is_digit((uint8_t)*p)) return false;
    unsigned d = (unsigned)(*p - '0');
    if (acc > (lim - d) / 10) return false;
    acc = acc * 10 + d;
  }
  *out = neg ? (acc ? -(int64_t)(acc - 1) - 1 : 0) : (int64_t)acc;
  return true;
}

size_t kl_json_quote(const char *s, size_t n, char *out) {
  static const char hex[] = "0123456789abcdef";
  char *o = out;
  *o++ = '"';
  for (size_t i = 0; i < n; i++) {
    uint8_t c = (uint8_t)s[i];
    if (c == '"' || c == '\\') {
      *o++ = '\\';
      *o++ = (char)c;
    } else if (c < 0x20) {
      *o++ = '\\';
      switch (c) {
      case '\b': *o++ = 'b'; break;
      case '\f': *o++ = 'f'; break;
      case '\n': *o++ = 'n'; break;
      case '\r': *o++ = 'r'; break;
      case '\t': *o++ = 't'; break;
      default:
        *o++ = 'u';
        *o++ = '0';
        *o++ = '0';
        *o++ = hex[c >> 4];
        *o++ = hex[c & 15];
      }
    } else {
      *o++ = (char)c;
    }
  }
  *o++ = '"';
  return (size_t)(o - out);
}
