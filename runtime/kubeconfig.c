/* kubeconfig.c — API server configuration and credentials (see kubeconfig.h).
 *
 * Loading goes in three steps. Each file is read whole (capped), loaded with
 * libyaml's document API (first document only), and walked into a kc_file:
 * arrays of clusters, users and contexts, each entry remembering its file
 * and line, with relative paths already resolved against the file's
 * directory and every *-data field already base64-decoded (so, as with
 * client-go, a malformed entry anywhere fails the load, with its line). A
 * set of files is then searched in order, which is kubectl's merge: the
 * first file that defines a name wins, and current-context comes from the
 * first file that sets it. Finally the chosen context, cluster and user are
 * checked (ConfirmUsable's rules, plus unknown users) and their fields are
 * moved into a fresh kl_kc_config_t; the files are freed.
 *
 * Messages name the file and line, the entry and the field, never a value
 * that may be secret (tokens, keys, passwords, exec args and env values,
 * plugin stdout); a failing plugin's first stderr line is quoted, as its
 * own diagnostic. The YAML parser's messages are static strings.
 *
 * A kl_kc_creds_t owns copies of what it needs from a config (it never
 * points into one): the static or last good file token with the clock time
 * it was read, and the exec plugin's spec, the cluster facts
 * provideClusterInfo passes, and the last ExecCredential. A kl_kc_plugin_t
 * is one run of a plugin; it points to nothing else, so the creds and the run
 * can be freed in either order. Secret strings are zeroed before they are
 * freed. */
#include "kubeconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml.h>

#include "base64.h"
#include "json.h"
#include "log.h"
#include "mem.h"

extern char **environ;

#define KC_FILE_MAX (16u << 20) /* a kubeconfig file */
#define KC_SMALL_MAX (1u << 20) /* token, namespace and CA files */
#define KC_JSON_MAX (1u << 20)  /* an extension converted to JSON */
#define KC_YAML_DEPTH 64        /* nesting converted to JSON */
#define KC_OUT_MAX (1u << 20)   /* a plugin's stdout */
#define KC_ERRHEAD 4096         /* the head of a plugin's stderr */
#define KC_API_V1 "client.authentication.k8s.io/v1"
#define KC_API_V1BETA1 "client.authentication.k8s.io/v1beta1"
#define KC_EXEC_EXTENSION "client.authentication.k8s.io/exec"
#define KC_LABEL_SIZE 300 /* an entry's label: its kind and name */

/* --- small helpers ------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static void
seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* Zeroes a secret string before it is freed; the volatile store keeps the
 * compiler from dropping it. */
static void wipe(char *s, size_t n) {
  volatile char *v = s;
  if (!s) return;
  for (size_t i = 0; i < n; i++)
    v[i] = 0;
}

static void free_secret(char *s) {
  if (!s) return;
  wipe(s, strlen(s));
  free(s);
}

static void free_pem(kl_kc_pem_t *p, bool secret) {
  free(p->path);
  if (p->data && secret) wipe(p->data, p->len);
  free(p->data);
  memset(p, 0, sizeof *p);
}

static void free_strs(char **v, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

/* A growable string, capped by whoever appends to it. */
typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t more) {
  if (b->n + more + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + more + 1)
    cap *= 2;
  b->p = kl_xrealloc(b->p, cap);
  b->cap = cap;
}

static void sb_add(sbuf *b, const char *s, size_t n) {
  sb_reserve(b, n);
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_quote(sbuf *b, const char *s, size_t n) {
  sb_reserve(b, 6 * n + 2);
  b->n += kl_json_quote(s, n, b->p + b->n);
  b->p[b->n] = '\0';
}

/* Reads a whole file of at most cap bytes into a new NUL-terminated buffer.
 * Returns KL_OK, KL_ENOENT, KL_EIO (errno in *eno) or KL_ELIMIT. */
static int slurp(const char *path, size_t cap, char **out, size_t *n,
                 int *eno) {
  *out = NULL;
  *n = 0;
  *eno = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *eno = errno;
    return errno == ENOENT ? KL_ENOENT : KL_EIO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *eno = errno;
    close(fd);
    return KL_EIO;
  }
  if (S_ISDIR(st.st_mode)) {
    *eno = EISDIR;
    close(fd);
    return KL_EIO;
  }
  size_t size = 0, bufcap = 4096;
  if (st.st_size > 0 && (size_t)st.st_size < cap) bufcap = (size_t)st.st_size;
  char *buf = kl_xmalloc(bufcap + 1);
  for (;;) {
    if (size == bufcap) {
      if (bufcap > cap) break;
      bufcap *= 2;
      buf = kl_xrealloc(buf, bufcap + 1);
    }
    ssize_t r = read(fd, buf + size, bufcap - size);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      *eno = errno;
      close(fd);
      wipe(buf, size);
      free(buf);
      return KL_EIO;
    }
    if (r == 0) break;
    size += (size_t)r;
  }
  close(fd);
  if (size > cap) {
    wipe(buf, size);
    free(buf);
    return KL_ELIMIT;
  }
  buf[size] = '\0';
  *out = buf;
  *n = size;
  return KL_OK;
}

/* Whether path can be opened for reading; *eno gets errno when not. */
static bool readable(const char *path, int *eno) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *eno = errno;
    return false;
  }
  close(fd);
  return true;
}

/* The directory part of a file path ("" when it has none). */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return kl_xstrdup("");
  if (slash == path) return kl_xstrdup("/");
  return kl_xstrndup(path, (size_t)(slash - path));
}

/* A path cleaned lexically, as Go's filepath.Clean: repeated slashes
 * collapse, "." elements go, ".." removes the element before it (or
 * disappears at the root). Frees p and returns the result. */
static char *clean_path(char *p) {
  size_t n = strlen(p), o = 0;
  bool rooted = p[0] == '/';
  char *out = kl_xmalloc(n + 2);
  size_t keep = 0; /* out[0..keep) cannot be backed over by ".." */
  if (rooted) out[o++] = '/', keep = 1;
  for (size_t i = 0; i < n;) {
    while (i < n && p[i] == '/')
      i++;
    size_t start = i;
    while (i < n && p[i] != '/')
      i++;
    size_t len = i - start;
    if (len == 0 || (len == 1 && p[start] == '.')) continue;
    if (len == 2 && p[start] == '.' && p[start + 1] == '.') {
      if (o > keep) { /* drop the last element */
        while (o > keep && out[o - 1] != '/')
          o--;
        if (o > keep) o--;
        continue;
      }
      if (rooted) continue; /* "/.." is "/" */
      /* a leading ".." of a relative path stays */
      if (o > 0) out[o++] = '/';
      out[o++] = '.';
      out[o++] = '.';
      keep = o;
      continue;
    }
    if (o > 0 && out[o - 1] != '/') out[o++] = '/';
    memcpy(out + o, p + start, len);
    o += len;
  }
  if (o == 0) out[o++] = '.';
  out[o] = '\0';
  free(p);
  return out;
}

/* rel resolved against dir (kept when absolute or when dir is ""), then
 * cleaned, as client-go's filepath.Join. */
static char *join_path(const char *dir, const char *rel) {
  if (rel[0] == '/' || dir[0] == '\0') return clean_path(kl_xstrdup(rel));
  size_t d = strlen(dir), r = strlen(rel);
  char *s = kl_xmalloc(d + r + 2);
  memcpy(s, dir, d);
  s[d] = '/';
  memcpy(s + d + 1, rel, r + 1);
  return clean_path(s);
}

/* Trims ASCII whitespace in place; returns the new length. */
static size_t trim(char *s, size_t n) {
  size_t a = 0;
  while (a < n && is_space(s[a]))
    a++;
  while (n > a && is_space(s[n - 1]))
    n--;
  memmove(s, s + a, n - a);
  s[n - a] = '\0';
  return n - a;
}

static bool has_ctl(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return true;
  return false;
}

/* Parses a decimal port 1-65535. */
static int parse_port(const char *s, size_t n) {
  if (n == 0 || n > 5) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= 65535 ? v : -1;
}

/* A Kubernetes namespace: an RFC 1123 label. */
static bool dns_label(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 63) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (c != '-' || i == 0 || i == n - 1)) return false;
  }
  return true;
}

/* Reads a token file: trimmed, non-empty, no control characters. On
 * failure writes "cannot read token file PATH: reason" or similar into why
 * (never the contents). */
static int read_token(const char *path, char **out, char *why, size_t whylen) {
  char *buf;
  size_t n;
  int eno, rc = slurp(path, KC_SMALL_MAX, &buf, &n, &eno);
  *out = NULL;
  if (rc == KL_ELIMIT) {
    seterr(why, whylen, "token file %s is larger than 1 MiB", path);
    return KL_ELIMIT;
  }
  if (rc != KL_OK) {
    seterr(why, whylen, "cannot read token file %s: %s", path, strerror(eno));
    return KL_EIO;
  }
  n = trim(buf, n);
  if (n == 0 || has_ctl(buf, n)) {
    seterr(why, whylen, "token file %s %s", path,
           n == 0 ? "is empty" : "holds control characters");
    wipe(buf, n);
    free(buf);
    return KL_EPARSE;
  }
  *out = buf;
  return KL_OK;
}

/* --- parsed files -------------------------------------------------------- */

typedef struct kc_file kc_file;

/* The part every named entry (clusters[], users[], contexts[]) shares. */
typedef struct kc_entry {
  char *name;
  int line;
  const kc_file *file;
} kc_entry;

typedef struct kc_cluster {
  kc_entry e;
  char *server, *tls_server_name, *proxy_url;
  kl_kc_pem_t ca;
  bool insecure, disable_compression;
  char *exec_config; /* the exec extension as JSON */
} kc_cluster;

typedef struct kc_user {
  kc_entry e;
  kl_kc_pem_t cert, key;
  char *token, *token_file, *username, *password;
  char *as, *as_uid;
  char **as_groups;
  size_t nas_groups;
  kl_kc_extra_t *extra;
  size_t nextra;
  bool auth_provider;
  char *auth_provider_name;
  kl_kc_exec_t *exec;
  char *exec_interactive; /* as written; checked when the user is used */
} kc_user;

typedef struct kc_context {
  kc_entry e;
  char *cluster, *user, *namespace;
} kc_context;

struct kc_file {
  char *path, *dir;
  char *current_context;
  kc_cluster *clusters;
  size_t nclusters;
  kc_user *users;
  size_t nusers;
  kc_context *contexts;
  size_t ncontexts;
};

static void exec_free(kl_kc_exec_t *x) {
  if (!x) return;
  free(x->command);
  for (size_t i = 0; i < x->nargs; i++)
    free_secret(x->args[i]);
  free(x->args);
  for (size_t i = 0; i < x->nenv; i++) {
    free(x->env[i].name);
    free_secret(x->env[i].value);
  }
  free(x->env);
  free(x->api_version);
  free(x->install_hint);
  free(x->cluster_config);
  free(x);
}

static void extras_free(kl_kc_extra_t *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(x[i].key);
    free_strs(x[i].values, x[i].nvalues);
  }
  free(x);
}

static void cluster_clear(kc_cluster *c) {
  free(c->e.name);
  free(c->server);
  free(c->tls_server_name);
  free_secret(c->proxy_url);
  free_pem(&c->ca, false);
  free(c->exec_config);
}

static void user_clear(kc_user *u) {
  free(u->e.name);
  free_pem(&u->cert, false);
  free_pem(&u->key, true);
  free_secret(u->token);
  free(u->token_file);
  free(u->username);
  free_secret(u->password);
  free(u->as);
  free(u->as_uid);
  free_strs(u->as_groups, u->nas_groups);
  extras_free(u->extra, u->nextra);
  free(u->auth_provider_name);
  exec_free(u->exec);
  free(u->exec_interactive);
}

static void context_clear(kc_context *c) {
  free(c->e.name);
  free(c->cluster);
  free(c->user);
  free(c->namespace);
}

static void clusters_free(kc_cluster *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    cluster_clear(&v[i]);
  free(v);
}

static void users_free(kc_user *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    user_clear(&v[i]);
  free(v);
}

static void contexts_free(kc_context *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    context_clear(&v[i]);
  free(v);
}

static void file_free(kc_file *f) {
  if (!f) return;
  clusters_free(f->clusters, f->nclusters);
  users_free(f->users, f->nusers);
  contexts_free(f->contexts, f->ncontexts);
  free(f->current_context);
  free(f->path);
  free(f->dir);
  free(f);
}

/* --- walking the YAML document ------------------------------------------- */

typedef struct kc_parser {
  kc_file *f;
  yaml_document_t *doc;
  char *err;
  size_t errlen;
} kc_parser;

static int line_of(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }

__attribute__((format(printf, 3, 4))) static int
perr(kc_parser *p, const yaml_node_t *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  seterr(p->err, p->errlen, "kubeconfig %s: line %d: %s", p->f->path,
         line_of(n), msg);
  return KL_EPARSE;
}

static yaml_node_t *node_at(kc_parser *p, int id) {
  return yaml_document_get_node(p->doc, id);
}

static bool key_is(const yaml_node_t *k, const char *s) {
  size_t n = strlen(s);
  return k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == n &&
         memcmp(k->data.scalar.value, s, n) == 0;
}

static bool scalar_is(const yaml_node_t *n, const char *s) {
  return key_is(n, s);
}

static bool is_null(const yaml_node_t *n) {
  if (!n) return true;
  if (n->type != YAML_SCALAR_NODE ||
      n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return false;
  return n->data.scalar.length == 0 || scalar_is(n, "~") ||
         scalar_is(n, "null") || scalar_is(n, "Null") || scalar_is(n, "NULL");
}

/* 1 for YAML 1.1's true forms, 0 for the false forms, -1 otherwise. */
static int yaml_bool(const yaml_node_t *n) {
  static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes",
                                  "YES",  "on",   "On",   "ON"};
  static const char *const f[] = {"false", "False", "FALSE", "no", "No",
                                  "NO",    "off",   "Off",   "OFF"};
  if (n->type != YAML_SCALAR_NODE ||
      n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return -1;
  for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
    if (scalar_is(n, t[i])) return 1;
    if (scalar_is(n, f[i])) return 0;
  }
  return -1;
}

/* "label: field" for messages; label may be NULL (top level). */
#define WHAT(label, field) (label) ? (label) : "", (label) ? ": " : "", (field)

/* A string field: any scalar; null leaves *out NULL. A repeated key
 * replaces the earlier value, as yaml.v2 does. */
static int get_str(kc_parser *p, const yaml_node_t *n, const char *label,
                   const char *field, char **out) {
  if (is_null(n)) return KL_OK;
  if (n->type != YAML_SCALAR_NODE)
    return perr(p, n, "%s%s%s: expected a string", WHAT(label, field));
  free_secret(*out);
  *out = kl_xstrndup((const char *)n->data.scalar.value, n->data.scalar.length);
  return KL_OK;
}

static int get_bool(kc_parser *p, const yaml_node_t *n, const char *label,
                    const char *field, bool *out) {
  if (is_null(n)) {
    *out = false;
    return KL_OK;
  }
  int b = yaml_bool(n);
  if (b < 0)
    return perr(p, n, "%s%s%s: expected true or false", WHAT(label, field));
  *out = b;
  return KL_OK;
}

/* A file reference, resolved against the directory of the file. */
static int get_path(kc_parser *p, const yaml_node_t *n, const char *label,
                    const char *field, char **out) {
  char *s = NULL;
  int rc = get_str(p, n, label, field, &s);
  if (rc != KL_OK || !s) return rc;
  free(*out);
  *out = s[0] ? join_path(p->f->dir, s) : NULL;
  free(s);
  return KL_OK;
}

/* A *-data field: base64 of PEM bytes. */
static int get_data(kc_parser *p, const yaml_node_t *n, const char *label,
                    const char *field, kl_kc_pem_t *pem) {
  if (is_null(n)) return KL_OK;
  if (n->type != YAML_SCALAR_NODE)
    return perr(p, n, "%s%s%s: expected a string", WHAT(label, field));
  char *data;
  size_t len, bad;
  if (kl_base64_decode((const char *)n->data.scalar.value,
                       n->data.scalar.length, &data, &len, &bad) != KL_OK)
    return perr(p, n, "%s%s%s: invalid base64 at byte %zu", WHAT(label, field),
                bad);
  if (pem->data) wipe(pem->data, pem->len);
  free(pem->data);
  pem->data = data;
  pem->len = len;
  if (len == 0) { /* an empty value is an unset one */
    free(pem->data);
    pem->data = NULL;
  }
  return KL_OK;
}

static int get_strs(kc_parser *p, const yaml_node_t *n, const char *label,
                    const char *field, char ***out, size_t *nout) {
  if (is_null(n)) return KL_OK;
  if (n->type != YAML_SEQUENCE_NODE)
    return perr(p, n, "%s%s%s: expected a list of strings", WHAT(label, field));
  free_strs(*out, *nout);
  size_t count =
      (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
  *out = kl_xcalloc(count, sizeof **out);
  *nout = 0;
  for (size_t i = 0; i < count; i++) {
    yaml_node_t *it = node_at(p, n->data.sequence.items.start[i]);
    if (!it || it->type != YAML_SCALAR_NODE)
      return perr(p, it ? it : n, "%s%s%s[%zu]: expected a string",
                  WHAT(label, field), i);
    (*out)[(*nout)++] = kl_xstrndup((const char *)it->data.scalar.value,
                                    it->data.scalar.length);
  }
  return KL_OK;
}

/* 0 for a mapping, 1 for null (nothing to read), or an error. */
static int want_map(kc_parser *p, const yaml_node_t *n, const char *label,
                    const char *field) {
  if (is_null(n)) return 1;
  if (n->type != YAML_MAPPING_NODE)
    return perr(p, n, "%s%s%s: expected a mapping", WHAT(label, field));
  return 0;
}

#define PAIRS(m) (m)->data.mapping.pairs

/* --- YAML to JSON (the exec extension) --------------------------------- */

static bool json_number(const char *s, size_t n) {
  size_t i = 0;
  if (i < n && s[i] == '-') i++;
  if (i >= n) return false;
  if (s[i] == '0') {
    i++;
  } else if (s[i] >= '1' && s[i] <= '9') {
    while (i < n && s[i] >= '0' && s[i] <= '9')
      i++;
  } else {
    return false;
  }
  if (i < n && s[i] == '.') {
    size_t d = ++i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
      i++;
    if (i == d) return false;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    size_t d = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
      i++;
    if (i == d) return false;
  }
  return i == n;
}

/* Converts a node as sigs.k8s.io/yaml would: plain scalars that read as
 * null, booleans or JSON numbers become those, other scalars strings. */
static int to_json(kc_parser *p, const yaml_node_t *n, sbuf *out, int depth,
                   const char *label) {
  if (depth > KC_YAML_DEPTH)
    return perr(p, n, "%s: nested more than %d deep", label, KC_YAML_DEPTH);
  if (out->n > KC_JSON_MAX)
    return perr(p, n, "%s: larger than 1 MiB as JSON", label);
  switch (n->type) {
  case YAML_SCALAR_NODE: {
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    bool plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    int b = yaml_bool(n);
    if (is_null(n))
      sb_str(out, "null");
    else if (b >= 0)
      sb_str(out, b ? "true" : "false");
    else if (plain && json_number(s, len))
      sb_add(out, s, len);
    else
      sb_quote(out, s, len);
    return KL_OK;
  }
  case YAML_SEQUENCE_NODE: {
    sb_str(out, "[");
    for (yaml_node_item_t *it = n->data.sequence.items.start;
         it < n->data.sequence.items.top; it++) {
      if (it != n->data.sequence.items.start) sb_str(out, ",");
      int rc = to_json(p, node_at(p, *it), out, depth + 1, label);
      if (rc != KL_OK) return rc;
    }
    sb_str(out, "]");
    return KL_OK;
  }
  case YAML_MAPPING_NODE: {
    sb_str(out, "{");
    for (yaml_node_pair_t *pr = PAIRS(n).start; pr < PAIRS(n).top; pr++) {
      yaml_node_t *k = node_at(p, pr->key);
      if (!k || k->type != YAML_SCALAR_NODE)
        return perr(p, k ? k : n, "%s: a key is not a string", label);
      if (pr != PAIRS(n).start) sb_str(out, ",");
      sb_quote(out, (const char *)k->data.scalar.value, k->data.scalar.length);
      sb_str(out, ":");
      int rc = to_json(p, node_at(p, pr->value), out, depth + 1, label);
      if (rc != KL_OK) return rc;
    }
    sb_str(out, "}");
    return KL_OK;
  }
  default: sb_str(out, "null"); return KL_OK;
  }
}

/* --- clusters, users, contexts ------------------------------------------- */

static int parse_extensions(kc_parser *p, const yaml_node_t *n,
                            const char *label, char **exec_config) {
  if (is_null(n)) return KL_OK;
  if (n->type != YAML_SEQUENCE_NODE)
    return perr(p, n, "%s: extensions: expected a list", label);
  for (yaml_node_item_t *it = n->data.sequence.items.start;
       it < n->data.sequence.items.top; it++) {
    yaml_node_t *e = node_at(p, *it);
    if (!e || e->type != YAML_MAPPING_NODE)
      return perr(p, e ? e : n, "%s: extensions: expected name and extension",
                  label);
    yaml_node_t *name = NULL, *ext = NULL;
    for (yaml_node_pair_t *pr = PAIRS(e).start; pr < PAIRS(e).top; pr++) {
      yaml_node_t *k = node_at(p, pr->key);
      if (key_is(k, "name")) name = node_at(p, pr->value);
      if (key_is(k, "extension")) ext = node_at(p, pr->value);
    }
    if (!scalar_is(name, KC_EXEC_EXTENSION) || is_null(ext)) continue;
    sbuf b = {0};
    /* room for any label and the suffix: never truncated */
    char what[KC_LABEL_SIZE + sizeof ": extension " KC_EXEC_EXTENSION];
    snprintf(what, sizeof what, "%s: extension %s", label, KC_EXEC_EXTENSION);
    int rc = to_json(p, ext, &b, 0, what);
    if (rc != KL_OK) {
      free(b.p);
      return rc;
    }
    free(*exec_config);
    *exec_config = b.p;
  }
  return KL_OK;
}

static int parse_cluster(kc_parser *p, const yaml_node_t *m, void *entry,
                         const char *label) {
  kc_cluster *c = entry;
  for (yaml_node_pair_t *pr = PAIRS(m).start; pr < PAIRS(m).top; pr++) {
    yaml_node_t *k = node_at(p, pr->key), *v = node_at(p, pr->value);
    int rc = KL_OK;
    if (key_is(k, "server"))
      rc = get_str(p, v, label, "server", &c->server);
    else if (key_is(k, "certificate-authority"))
      rc = get_path(p, v, label, "certificate-authority", &c->ca.path);
    else if (key_is(k, "certificate-authority-data"))
      rc = get_data(p, v, label, "certificate-authority-data", &c->ca);
    else if (key_is(k, "insecure-skip-tls-verify"))
      rc = get_bool(p, v, label, "insecure-skip-tls-verify", &c->insecure);
    else if (key_is(k, "tls-server-name"))
      rc = get_str(p, v, label, "tls-server-name", &c->tls_server_name);
    else if (key_is(k, "proxy-url"))
      rc = get_str(p, v, label, "proxy-url", &c->proxy_url);
    else if (key_is(k, "disable-compression"))
      rc =
          get_bool(p, v, label, "disable-compression", &c->disable_compression);
    else if (key_is(k, "extensions"))
      rc = parse_extensions(p, v, label, &c->exec_config);
    if (rc != KL_OK) return rc;
  }
  return KL_OK;
}

static int parse_exec_env(kc_parser *p, const yaml_node_t *n, const char *label,
                          kl_kc_exec_t *x) {
  if (is_null(n)) return KL_OK;
  if (n->type != YAML_SEQUENCE_NODE)
    return perr(p, n, "%s: exec.env: expected a list", label);
  size_t count =
      (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
  for (size_t i = 0; i < x->nenv; i++) {
    free(x->env[i].name);
    free_secret(x->env[i].value);
  }
  free(x->env);
  x->env = kl_xcalloc(count, sizeof *x->env);
  x->nenv = 0;
  for (size_t i = 0; i < count; i++) {
    yaml_node_t *e = node_at(p, n->data.sequence.items.start[i]);
    if (!e || e->type != YAML_MAPPING_NODE)
      return perr(p, e ? e : n, "%s: exec.env[%zu]: expected name and value",
                  label, i);
    kl_kc_env_var_t *var = &x->env[x->nenv++];
    char field[64];
    snprintf(field, sizeof field, "exec.env[%zu]", i);
    for (yaml_node_pair_t *pr = PAIRS(e).start; pr < PAIRS(e).top; pr++) {
      yaml_node_t *k = node_at(p, pr->key), *v = node_at(p, pr->value);
      int rc = KL_OK;
      if (key_is(k, "name"))
        rc = get_str(p, v, label, field, &var->name);
      else if (key_is(k, "value"))
        rc = get_str(p, v, label, field, &var->value);
      if (rc != KL_OK) return rc;
    }
    if (!var->value) var->value = kl_xstrdup("");
  }
  return KL_OK;
}

static int parse_exec(kc_parser *p, const yaml_node_t *m, const char *label,
                      kc_user *u) {
  exec_free(u->exec);
  kl_kc_exec_t *x = u->exec = kl_xcalloc(1, sizeof *x);
  for (yaml_node_pair_t *pr = PAIRS(m).start; pr < PAIRS(m).top; pr++) {
    yaml_node_t *k = node_at(p, pr->key), *v = node_at(p, pr->value);
    int rc = KL_OK;
    if (key_is(k, "command"))
      rc = get_str(p, v, label, "exec.command", &x->command);
    else if (key_is(k, "args"))
      rc = get_strs(p, v, label, "exec.args", &x->args, &x->nargs);
    else if (key_is(k, "env"))
      rc = parse_exec_env(p, v, label, x);
    else if (key_is(k, "apiVersion"))
      rc = get_str(p, v, label, "exec.apiVersion", &x->api_version);
    else if (key_is(k, "installHint"))
      rc = get_str(p, v, label, "exec.installHint", &x->install_hint);
    else if (key_is(k, "provideClusterInfo"))
      rc = get_bool(p, v, label, "exec.provideClusterInfo",
                    &x->provide_cluster_info);
    else if (key_is(k, "interactiveMode"))
      rc = get_str(p, v, label, "exec.interactiveMode", &u->exec_interactive);
    if (rc != KL_OK) return rc;
  }
  /* Like client-go, only a command with a path separator is a file
   * reference; a bare name is looked up in PATH when it runs. */
  if (x->command && strchr(x->command, '/') && x->command[0] != '/') {
    char *abs = join_path(p->f->dir, x->command);
    free(x->command);
    x->command = abs;
  }
  return KL_OK;
}

static int parse_extra(kc_parser *p, const yaml_node_t *n, const char *label,
                       kc_user *u) {
  if (is_null(n)) return KL_OK;
  if (n->type != YAML_MAPPING_NODE)
    return perr(p, n, "%s: as-user-extra: expected a mapping", label);
  extras_free(u->extra, u->nextra);
  size_t count = (size_t)(PAIRS(n).top - PAIRS(n).start);
  u->extra = kl_xcalloc(count, sizeof *u->extra);
  u->nextra = 0;
  for (yaml_node_pair_t *pr = PAIRS(n).start; pr < PAIRS(n).top; pr++) {
    yaml_node_t *k = node_at(p, pr->key), *v = node_at(p, pr->value);
    if (!k || k->type != YAML_SCALAR_NODE)
      return perr(p, k ? k : n, "%s: as-user-extra: a key is not a string",
                  label);
    kl_kc_extra_t *x = &u->extra[u->nextra++];
    x->key =
        kl_xstrndup((const char *)k->data.scalar.value, k->data.scalar.length);
    int rc = get_strs(p, v, label, "as-user-extra", &x->values, &x->nvalues);
    if (rc != KL_OK) return rc;
  }
  return KL_OK;
}

static int parse_user(kc_parser *p, const yaml_node_t *m, void *entry,
                      const char *label) {
  kc_user *u = entry;
  for (yaml_node_pair_t *pr = PAIRS(m).start; pr < PAIRS(m).top; pr++) {
    yaml_node_t *k = node_at(p, pr->key), *v = node_at(p, pr->value);
    int rc = KL_OK;
    if (key_is(k, "client-certificate"))
      rc = get_path(p, v, label, "client-certificate", &u->cert.path);
    else if (key_is(k, "client-certificate-data"))
      rc = get_data(p, v, label, "client-certificate-data", &u->cert);
    else if (key_is(k, "client-key"))
      rc = get_path(p, v, label, "client-key", &u->key.path);
    else if (key_is(k, "client-key-data"))
      rc = get_data(p, v, label, "client-key-data", &u->key);
    else if (key_is(k, "token"))
      rc = get_str(p, v, label, "token", &u->token);
    else if (key_is(k, "tokenFile"))
      rc = get_path(p, v, label, "tokenFile", &u->token_file);
    else if (key_is(k, "username"))
      rc = get_str(p, v, label, "username", &u->username);
    else if (key_is(k, "password"))
      rc = get_str(p, v, label, "password", &u->password);
    else if (key_is(k, "as"))
      rc = get_str(p, v, label, "as", &u->as);
    else if (key_is(k, "as-uid"))
      rc = get_str(p, v, label, "as-uid", &u->as_uid);
    else if (key_is(k, "as-groups"))
      rc = get_strs(p, v, label, "as-groups", &u->as_groups, &u->nas_groups);
    else if (key_is(k, "as-user-extra"))
      rc = parse_extra(p, v, label, u);
    else if (key_is(k, "auth-provider")) {
      if ((rc = want_map(p, v, label, "auth-provider")) == 0) {
        u->auth_provider = true;
        for (yaml_node_pair_t *q = PAIRS(v).start; q < PAIRS(v).top; q++)
          if (key_is(node_at(p, q->key), "name"))
            rc = get_str(p, node_at(p, q->value), label, "auth-provider.name",
                         &u->auth_provider_name);
      }
    } else if (key_is(k, "exec")) {
      if ((rc = want_map(p, v, label, "exec")) == 0)
        rc = parse_exec(p, v, label, u);
    }
    if (rc > 0) rc = KL_OK; /* a null mapping */
    if (rc != KL_OK) return rc;
  }
  /* Empty strings are unset ones, as for Go's zero values. */
  char **opt[] = {&u->token,    &u->token_file, &u->username,
                  &u->password, &u->as,         &u->as_uid};
  for (size_t i = 0; i < sizeof opt / sizeof *opt; i++)
    if (*opt[i] && !**opt[i]) {
      free(*opt[i]);
      *opt[i] = NULL;
    }
  return KL_OK;
}

static int parse_context(kc_parser *p, const yaml_node_t *m, void *entry,
                         const char *label) {
  kc_context *c = entry;
  for (yaml_node_pair_t *pr = PAIRS(m).start; pr < PAIRS(m).top; pr++) {
    yaml_node_t *k = node_at(p, pr->key), *v = node_at(p, pr->value);
    int rc = KL_OK;
    if (key_is(k, "cluster"))
      rc = get_str(p, v, label, "cluster", &c->cluster);
    else if (key_is(k, "user"))
      rc = get_str(p, v, label, "user", &c->user);
    else if (key_is(k, "namespace"))
      rc = get_str(p, v, label, "namespace", &c->namespace);
    if (rc != KL_OK) return rc;
  }
  return KL_OK;
}

typedef int kc_entry_fn(kc_parser *p, const yaml_node_t *body, void *entry,
                        const char *label);

/* Reads a list of {name: N, <kind>: {...}} into a new array of entries
 * (each beginning with a kc_entry). Duplicate names in one file are an
 * error, as in client-go. *n counts the entries started, so the caller
 * frees them all even on failure. */
static int parse_list(kc_parser *p, const yaml_node_t *seq, const char *section,
                      const char *kind, void **arr, size_t *n, size_t esize,
                      kc_entry_fn *fn) {
  if (is_null(seq)) return KL_OK;
  if (seq->type != YAML_SEQUENCE_NODE)
    return perr(p, seq, "%s: expected a list", section);
  size_t count =
      (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
  *arr = kl_xcalloc(count, esize);
  for (size_t i = 0; i < count; i++) {
    yaml_node_t *it = node_at(p, seq->data.sequence.items.start[i]);
    if (!it || it->type != YAML_MAPPING_NODE)
      return perr(p, it ? it : seq,
                  "%s[%zu]: expected a mapping with name "
                  "and %s",
                  section, i, kind);
    kc_entry *e = (kc_entry *)(void *)((char *)*arr + i * esize);
    (*n)++;
    e->line = line_of(it);
    e->file = p->f;
    yaml_node_t *body = NULL;
    char field[64];
    snprintf(field, sizeof field, "%s[%zu]", section, i);
    for (yaml_node_pair_t *pr = PAIRS(it).start; pr < PAIRS(it).top; pr++) {
      yaml_node_t *k = node_at(p, pr->key);
      if (key_is(k, "name")) {
        int rc = get_str(p, node_at(p, pr->value), field, "name", &e->name);
        if (rc != KL_OK) return rc;
      } else if (key_is(k, kind)) {
        body = node_at(p, pr->value);
      }
    }
    if (!e->name) e->name = kl_xstrdup("");
    for (size_t j = 0; j < i; j++) {
      kc_entry *o = (kc_entry *)(void *)((char *)*arr + j * esize);
      if (strcmp(o->name, e->name) == 0)
        return perr(p, it, "duplicate %s name \"%s\"", kind, e->name);
    }
    char label[KC_LABEL_SIZE];
    snprintf(label, sizeof label, "%s \"%s\"", kind, e->name);
    int rc = want_map(p, body, label, kind);
    if (rc == 0) rc = fn(p, body, e, label);
    if (rc < 0) return rc;
  }
  return KL_OK;
}

static int parse_top(kc_parser *p, const yaml_node_t *root) {
  kc_file *f = p->f;
  if (is_null(root)) return KL_OK;
  if (root->type != YAML_MAPPING_NODE)
    return perr(p, root, "expected a mapping at the top level");
  for (yaml_node_pair_t *pr = PAIRS(root).start; pr < PAIRS(root).top; pr++) {
    yaml_node_t *k = node_at(p, pr->key), *v = node_at(p, pr->value);
    int rc = KL_OK;
    if (key_is(k, "clusters")) {
      clusters_free(f->clusters, f->nclusters);
      f->clusters = NULL;
      f->nclusters = 0;
      rc = parse_list(p, v, "clusters", "cluster", (void **)&f->clusters,
                      &f->nclusters, sizeof(kc_cluster), parse_cluster);
    } else if (key_is(k, "users")) {
      users_free(f->users, f->nusers);
      f->users = NULL;
      f->nusers = 0;
      rc = parse_list(p, v, "users", "user", (void **)&f->users, &f->nusers,
                      sizeof(kc_user), parse_user);
    } else if (key_is(k, "contexts")) {
      contexts_free(f->contexts, f->ncontexts);
      f->contexts = NULL;
      f->ncontexts = 0;
      rc = parse_list(p, v, "contexts", "context", (void **)&f->contexts,
                      &f->ncontexts, sizeof(kc_context), parse_context);
    } else if (key_is(k, "current-context")) {
      rc = get_str(p, v, NULL, "current-context", &f->current_context);
    }
    if (rc != KL_OK) return rc;
  }
  return KL_OK;
}

/* Reads and parses one file. A missing file with skip_missing set gives
 * KL_OK and *out NULL. */
static int load_file(const char *path, bool skip_missing, kc_file **out,
                     char *err, size_t errlen) {
  char *buf;
  size_t n;
  int eno, rc = slurp(path, KC_FILE_MAX, &buf, &n, &eno);
  *out = NULL;
  if (rc == KL_ENOENT && skip_missing) return KL_OK;
  if (rc == KL_ELIMIT) {
    seterr(err, errlen, "kubeconfig %s: larger than %u MiB", path,
           KC_FILE_MAX >> 20);
    return KL_ELIMIT;
  }
  if (rc != KL_OK) {
    seterr(err, errlen, "kubeconfig %s: %s", path, strerror(eno));
    return rc;
  }

  kc_file *f = kl_xcalloc(1, sizeof *f);
  f->path = kl_xstrdup(path);
  f->dir = dir_of(path);
  yaml_parser_t yp;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&yp)) {
    fprintf(stderr, "kubelua: out of memory initializing libyaml\n");
    abort();
  }
  yaml_parser_set_input_string(&yp, (const unsigned char *)buf, n);
  if (!yaml_parser_load(&yp, &doc)) {
    const char *what = yp.problem ? yp.problem : "malformed YAML";
    if (yp.error == YAML_READER_ERROR)
      seterr(err, errlen, "kubeconfig %s: byte %zu: %s", path,
             yp.problem_offset, what);
    else
      seterr(err, errlen, "kubeconfig %s: line %lu: %s", path,
             (unsigned long)yp.problem_mark.line + 1, what);
    rc = KL_EPARSE;
  } else {
    kc_parser p = {f, &doc, err, errlen};
    rc = parse_top(&p, yaml_document_get_root_node(&doc));
    yaml_document_delete(&doc);
  }
  yaml_parser_delete(&yp);
  wipe(buf, n);
  free(buf);
  if (rc != KL_OK) {
    file_free(f);
    return rc;
  }
  *out = f;
  return KL_OK;
}

/* --- choosing and checking a context ------------------------------------- */

typedef struct kc_set {
  kc_file **files;
  size_t n;
  char *where; /* "kubeconfig a:b", for messages about the whole set */
} kc_set;

#define FIND(set, arr, cnt, type, nm)                                          \
  for (size_t fi_ = 0; fi_ < (set)->n; fi_++)                                  \
    for (size_t i_ = 0; i_ < (set)->files[fi_]->cnt; i_++)                     \
      if (strcmp((set)->files[fi_]->arr[i_].e.name, (nm)) == 0)                \
        return &(set)->files[fi_]->arr[i_];                                    \
  return NULL

static kc_context *find_context(const kc_set *s, const char *name) {
  FIND(s, contexts, ncontexts, kc_context, name);
}
static kc_cluster *find_cluster(const kc_set *s, const char *name) {
  FIND(s, clusters, nclusters, kc_cluster, name);
}
static kc_user *find_user(const kc_set *s, const char *name) {
  FIND(s, users, nusers, kc_user, name);
}

/* Splits a server URL into cfg's scheme, host, port and path and builds the
 * normalized cfg->server. Without a scheme, https when TLS is configured
 * (client-go's DefaultServerURL), else http. why gets a reason that never
 * quotes the URL (it may carry user info). */
static int parse_server(kl_kc_config_t *cfg, const char *raw, bool tls,
                        char *why, size_t whylen) {
  const char *sep = strstr(raw, "://"), *rest = raw;
  const char *scheme = tls ? "https" : "http";
  if (sep) {
    size_t n = (size_t)(sep - raw);
    if (n == 5 && strncasecmp(raw, "https", 5) == 0)
      scheme = "https";
    else if (n == 4 && strncasecmp(raw, "http", 4) == 0)
      scheme = "http";
    else {
      seterr(why, whylen, "server: unsupported scheme (use https or http)");
      return KL_EINVAL;
    }
    rest = sep + 3;
  }
  size_t alen = strcspn(rest, "/?#");
  const char *auth = rest, *path = rest + alen;
  size_t plen = strcspn(path, "?#");
  if (memchr(auth, '@', alen)) {
    seterr(why, whylen,
           "server: user information in the URL is not "
           "supported");
    return KL_EINVAL;
  }
  const char *host = auth, *port = NULL;
  size_t hlen, portlen = 0;
  if (alen && auth[0] == '[') {
    const char *rb = memchr(auth, ']', alen);
    if (!rb) {
      seterr(why, whylen, "server: unterminated IPv6 address");
      return KL_EINVAL;
    }
    host = auth + 1;
    hlen = (size_t)(rb - host);
    const char *after = rb + 1, *end = auth + alen;
    if (after < end) {
      if (*after != ':') {
        seterr(why, whylen, "server: malformed host");
        return KL_EINVAL;
      }
      port = after + 1;
      portlen = (size_t)(end - port);
    }
  } else {
    const char *colon = memchr(auth, ':', alen);
    if (colon && memchr(colon + 1, ':', alen - (size_t)(colon + 1 - auth))) {
      seterr(why, whylen, "server: an IPv6 address must be in brackets");
      return KL_EINVAL;
    }
    hlen = colon ? (size_t)(colon - auth) : alen;
    if (colon) {
      port = colon + 1;
      portlen = alen - hlen - 1;
    }
  }
  if (hlen == 0) {
    seterr(why, whylen, "server: no host");
    return KL_EINVAL;
  }
  int portnum = strcmp(scheme, "https") == 0 ? 443 : 80;
  if (port && portlen) {
    portnum = parse_port(port, portlen);
    if (portnum < 0) {
      seterr(why, whylen, "server: invalid port");
      return KL_EINVAL;
    }
  }
  while (plen && path[plen - 1] == '/')
    plen--;

  cfg->scheme = kl_xstrdup(scheme);
  cfg->host = kl_xstrndup(host, hlen);
  cfg->port = portnum;
  cfg->path = kl_xstrndup(path, plen);
  bool v6 = memchr(host, ':', hlen) != NULL;
  size_t cap = strlen(scheme) + hlen + plen + 16;
  cfg->server = kl_xmalloc(cap);
  snprintf(cfg->server, cap, "%s://%s%s%s:%d%s", scheme, v6 ? "[" : "",
           cfg->host, v6 ? "]" : "", portnum, cfg->path);
  return KL_OK;
}

static int check_exec(kc_user *u, char *why, size_t whylen) {
  kl_kc_exec_t *x = u->exec;
  if (!x->command || !*x->command) {
    seterr(why, whylen, "exec: command is not set");
    return KL_EINVAL;
  }
  bool v1 = x->api_version && strcmp(x->api_version, KC_API_V1) == 0;
  bool beta = x->api_version && strcmp(x->api_version, KC_API_V1BETA1) == 0;
  if (!v1 && !beta) {
    if (!x->api_version || !*x->api_version)
      seterr(why, whylen, "exec: apiVersion is not set");
    else
      seterr(why, whylen,
             "exec: apiVersion \"%s\" is not supported (use %s "
             "or %s)",
             x->api_version, KC_API_V1, KC_API_V1BETA1);
    return KL_EINVAL;
  }
  for (size_t i = 0; i < x->nenv; i++)
    if (!x->env[i].name || !*x->env[i].name) {
      seterr(why, whylen, "exec: env[%zu] has no name", i);
      return KL_EINVAL;
    }
  const char *mode = u->exec_interactive;
  if (!mode || !*mode) {
    if (v1) {
      seterr(why, whylen, "exec: interactiveMode must be set for %s",
             KC_API_V1);
      return KL_EINVAL;
    }
    x->interactive_mode = KL_KC_INTERACTIVE_IF_AVAILABLE;
  } else if (strcmp(mode, "Never") == 0) {
    x->interactive_mode = KL_KC_INTERACTIVE_NEVER;
  } else if (strcmp(mode, "IfAvailable") == 0) {
    x->interactive_mode = KL_KC_INTERACTIVE_IF_AVAILABLE;
  } else if (strcmp(mode, "Always") == 0) {
    x->interactive_mode = KL_KC_INTERACTIVE_ALWAYS;
  } else {
    seterr(why, whylen,
           "exec: interactiveMode \"%.40s\" is not Never, "
           "IfAvailable or Always",
           mode);
    return KL_EINVAL;
  }
  return KL_OK;
}

#define STEAL(dst, src) ((dst) = (src), (src) = NULL)

static void steal_pem(kl_kc_pem_t *dst, kl_kc_pem_t *src) {
  *dst = *src;
  memset(src, 0, sizeof *src);
}

/* Checks the chosen user (client-go's validateAuthInfo, plus what it would
 * fail on later) and moves its fields into cfg. */
static int take_user(kl_kc_config_t *cfg, kc_user *u, char *why,
                     size_t whylen) {
  int eno;
  if (u->cert.path && u->cert.data) {
    seterr(why, whylen,
           "client-certificate and client-certificate-data "
           "are both set");
    return KL_EINVAL;
  }
  if (u->key.path && u->key.data) {
    seterr(why, whylen, "client-key and client-key-data are both set");
    return KL_EINVAL;
  }
  bool cert = u->cert.path || u->cert.data, key = u->key.path || u->key.data;
  if (cert != key) {
    seterr(why, whylen, "%s",
           cert ? "client-certificate without client-key"
                : "client-key without client-certificate");
    return KL_EINVAL;
  }
  if (u->cert.path && !readable(u->cert.path, &eno)) {
    seterr(why, whylen, "cannot read client-certificate %s: %s", u->cert.path,
           strerror(eno));
    return KL_EIO;
  }
  if (u->key.path && !readable(u->key.path, &eno)) {
    seterr(why, whylen, "cannot read client-key %s: %s", u->key.path,
           strerror(eno));
    return KL_EIO;
  }
  if (u->token && (u->username || u->password)) {
    seterr(why, whylen,
           "more than one authentication method (token and "
           "basic auth); only one is allowed");
    return KL_EINVAL;
  }
  if ((u->nas_groups || u->nextra) && !u->as) {
    seterr(why, whylen, "as-groups or as-user-extra without as");
    return KL_EINVAL;
  }
  if (u->auth_provider) {
    seterr(why, whylen,
           "auth-provider \"%s\" is not supported; use an exec "
           "plugin",
           u->auth_provider_name ? u->auth_provider_name : "");
    return KL_EINVAL;
  }
  if (u->exec) {
    int rc = check_exec(u, why, whylen);
    if (rc != KL_OK) return rc;
  }
  if (u->token_file && !u->token) {
    /* As client-go: read now (failing now), then re-read as it rotates. */
    int rc = read_token(u->token_file, &u->token, why, whylen);
    if (rc != KL_OK) return rc;
  }
  steal_pem(&cfg->client_cert, &u->cert);
  steal_pem(&cfg->client_key, &u->key);
  STEAL(cfg->token, u->token);
  STEAL(cfg->token_file, u->token_file);
  STEAL(cfg->username, u->username);
  STEAL(cfg->password, u->password);
  STEAL(cfg->exec, u->exec);
  STEAL(cfg->impersonate, u->as);
  STEAL(cfg->impersonate_uid, u->as_uid);
  STEAL(cfg->impersonate_groups, u->as_groups);
  cfg->nimpersonate_groups = u->nas_groups;
  u->nas_groups = 0;
  STEAL(cfg->impersonate_extra, u->extra);
  cfg->nimpersonate_extra = u->nextra;
  u->nextra = 0;
  return KL_OK;
}

/* Checks the chosen cluster (validateClusterInfo, plus the transport's
 * insecure-with-CA rule) and moves its fields into cfg. */
static int take_cluster(kl_kc_config_t *cfg, kc_cluster *c, char *why,
                        size_t whylen) {
  int eno;
  if (!c->server || !*c->server) {
    seterr(why, whylen, "no server");
    return KL_EINVAL;
  }
  if (c->ca.path && c->ca.data) {
    seterr(why, whylen,
           "certificate-authority and certificate-authority-data "
           "are both set");
    return KL_EINVAL;
  }
  if (c->insecure && (c->ca.path || c->ca.data)) {
    seterr(why, whylen,
           "insecure-skip-tls-verify cannot be combined with a "
           "certificate authority");
    return KL_EINVAL;
  }
  if (c->ca.path && !readable(c->ca.path, &eno)) {
    seterr(why, whylen, "cannot read certificate-authority %s: %s", c->ca.path,
           strerror(eno));
    return KL_EIO;
  }
  if (c->proxy_url && *c->proxy_url) {
    const char *u = c->proxy_url;
    if (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0 &&
        strncmp(u, "socks5://", 9) != 0) {
      seterr(why, whylen,
             "proxy-url: unsupported scheme (use http, https or "
             "socks5)");
      return KL_EINVAL;
    }
  }
  bool tls = c->ca.path || c->ca.data || c->insecure || c->tls_server_name ||
             cfg->client_cert.path || cfg->client_cert.data;
  int rc = parse_server(cfg, c->server, tls, why, whylen);
  if (rc != KL_OK) return rc;
  steal_pem(&cfg->ca, &c->ca);
  cfg->insecure = c->insecure;
  cfg->disable_compression = c->disable_compression;
  STEAL(cfg->tls_server_name, c->tls_server_name);
  if (cfg->tls_server_name && !*cfg->tls_server_name) {
    free(cfg->tls_server_name);
    cfg->tls_server_name = NULL;
  }
  if (c->proxy_url && *c->proxy_url) STEAL(cfg->proxy_url, c->proxy_url);
  if (cfg->exec && c->exec_config)
    STEAL(cfg->exec->cluster_config, c->exec_config);
  return KL_OK;
}

static int build(kc_set *s, const char *context, kl_kc_source_t source,
                 kl_kc_config_t **out, char *err, size_t errlen) {
  const char *name = context && *context ? context : NULL;
  for (size_t i = 0; !name && i < s->n; i++)
    if (s->files[i]->current_context && *s->files[i]->current_context)
      name = s->files[i]->current_context;
  if (!name) {
    seterr(err, errlen,
           "%s: no current-context is set and no --context was "
           "given",
           s->where);
    return KL_EINVAL;
  }
  kc_context *ctx = find_context(s, name);
  if (!ctx) {
    seterr(err, errlen, "%s: context \"%s\" not found", s->where, name);
    return KL_EINVAL;
  }
  const char *f = ctx->e.file->path;
  int line = ctx->e.line;
  if (!ctx->cluster || !*ctx->cluster) {
    seterr(err, errlen,
           "kubeconfig %s: line %d: context \"%s\" names no "
           "cluster",
           f, line, name);
    return KL_EINVAL;
  }
  kc_cluster *cl = find_cluster(s, ctx->cluster);
  if (!cl) {
    seterr(err, errlen,
           "kubeconfig %s: line %d: context \"%s\": cluster "
           "\"%s\" not found",
           f, line, name, ctx->cluster);
    return KL_EINVAL;
  }
  kc_user *u = NULL;
  if (ctx->user && *ctx->user && !(u = find_user(s, ctx->user))) {
    seterr(err, errlen,
           "kubeconfig %s: line %d: context \"%s\": user \"%s\" "
           "not found",
           f, line, name, ctx->user);
    return KL_EINVAL;
  }
  if (ctx->namespace && *ctx->namespace && !dns_label(ctx->namespace)) {
    seterr(err, errlen,
           "kubeconfig %s: line %d: context \"%s\": namespace "
           "\"%.80s\" is not a valid DNS label",
           f, line, name, ctx->namespace);
    return KL_EINVAL;
  }

  kl_kc_config_t *cfg = kl_xcalloc(1, sizeof *cfg);
  char why[512];
  int rc = KL_OK;
  if (u && (rc = take_user(cfg, u, why, sizeof why)) != KL_OK) {
    seterr(err, errlen, "kubeconfig %s: line %d: user \"%s\": %s",
           u->e.file->path, u->e.line, u->e.name, why);
    goto fail;
  }
  if ((rc = take_cluster(cfg, cl, why, sizeof why)) != KL_OK) {
    seterr(err, errlen, "kubeconfig %s: line %d: cluster \"%s\": %s",
           cl->e.file->path, cl->e.line, cl->e.name, why);
    goto fail;
  }
  cfg->source = source;
  size_t olen = strlen(f) + 16;
  cfg->origin = kl_xmalloc(olen);
  snprintf(cfg->origin, olen, "kubeconfig %s", f);
  cfg->context = kl_xstrdup(name);
  cfg->cluster = kl_xstrdup(cl->e.name);
  cfg->user = u ? kl_xstrdup(u->e.name) : NULL;
  cfg->namespace = kl_xstrdup(ctx->namespace && *ctx->namespace ? ctx->namespace
                                                                : "default");
  *out = cfg;
  return KL_OK;

fail:
  kl_kc_config_free(cfg);
  return rc;
}

/* Loads paths (in order) and builds the config. With skip_missing, missing
 * files are skipped and *found says whether any existed. */
static int load_paths(char **paths, size_t n, bool skip_missing,
                      kl_kc_source_t source, const char *context,
                      kl_kc_config_t **out, bool *found, char *err,
                      size_t errlen) {
  kc_set s = {kl_xcalloc(n, sizeof(kc_file *)), 0, NULL};
  sbuf where = {0};
  int rc = KL_OK;
  *found = false;
  for (size_t i = 0; i < n; i++) {
    kc_file *f;
    rc = load_file(paths[i], skip_missing, &f, err, errlen);
    if (rc != KL_OK) {
      *found = true; /* it exists, but is broken */
      goto done;
    }
    if (!f) continue;
    sb_str(&where, s.n ? ":" : "kubeconfig ");
    sb_str(&where, f->path);
    s.files[s.n++] = f;
  }
  if (s.n == 0) {
    rc = KL_ENOENT;
    goto done;
  }
  *found = true;
  s.where = where.p;
  rc = build(&s, context, source, out, err, errlen);
done:
  for (size_t i = 0; i < s.n; i++)
    file_free(s.files[i]);
  free(s.files);
  free(where.p);
  return rc;
}

/* --- precedence ---------------------------------------------------------- */

static const char *env_get(const kl_kc_opts_t *o, const char *name) {
  return o->getenv ? o->getenv(o->getenv_ud, name) : getenv(name);
}

void kl_kc_config_free(kl_kc_config_t *cfg) {
  if (!cfg) return;
  free(cfg->origin);
  free(cfg->context);
  free(cfg->cluster);
  free(cfg->user);
  free(cfg->server);
  free(cfg->scheme);
  free(cfg->host);
  free(cfg->path);
  free_pem(&cfg->ca, false);
  free(cfg->tls_server_name);
  free_secret(cfg->proxy_url);
  free_pem(&cfg->client_cert, false);
  free_pem(&cfg->client_key, true);
  free_secret(cfg->token);
  free(cfg->token_file);
  free(cfg->username);
  free_secret(cfg->password);
  exec_free(cfg->exec);
  free(cfg->impersonate);
  free(cfg->impersonate_uid);
  free_strs(cfg->impersonate_groups, cfg->nimpersonate_groups);
  extras_free(cfg->impersonate_extra, cfg->nimpersonate_extra);
  free(cfg->namespace);
  free(cfg);
}

int kl_kc_in_cluster(const kl_kc_opts_t *opts, kl_kc_config_t **out, char *err,
                     size_t errlen) {
  kl_kc_opts_t none = {0};
  const kl_kc_opts_t *o = opts ? opts : &none;
  *out = NULL;
  const char *host = env_get(o, "KUBERNETES_SERVICE_HOST");
  const char *port = env_get(o, "KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port) {
    seterr(err, errlen,
           "in-cluster: KUBERNETES_SERVICE_HOST or "
           "KUBERNETES_SERVICE_PORT is not set");
    return KL_KC_NOT_IN_CLUSTER;
  }
  int portnum = parse_port(port, strlen(port));
  if (portnum < 0) {
    seterr(err, errlen,
           "in-cluster: KUBERNETES_SERVICE_PORT is not a port "
           "number");
    return KL_EINVAL;
  }
  const char *dir = o->sa_dir && *o->sa_dir ? o->sa_dir : KL_KC_SA_DIR;
  char *token_path = join_path(dir, "token");
  char *ca_path = join_path(dir, "ca.crt");
  char *ns_path = join_path(dir, "namespace");
  char *token = NULL, why[512];
  int rc = read_token(token_path, &token, why, sizeof why);
  if (rc != KL_OK) {
    seterr(err, errlen, "in-cluster: %s", why);
    free(token_path);
    free(ca_path);
    free(ns_path);
    return rc;
  }

  kl_kc_config_t *cfg = kl_xcalloc(1, sizeof *cfg);
  cfg->source = KL_KC_SOURCE_IN_CLUSTER;
  cfg->origin = kl_xstrdup("in-cluster");
  size_t hlen = strlen(host);
  bool bracketed = host[0] == '[' && hlen > 2 && host[hlen - 1] == ']';
  cfg->host = bracketed ? kl_xstrndup(host + 1, hlen - 2) : kl_xstrdup(host);
  bool v6 = strchr(cfg->host, ':') != NULL;
  cfg->scheme = kl_xstrdup("https");
  cfg->port = portnum;
  cfg->path = kl_xstrdup("");
  size_t cap = hlen + 32;
  cfg->server = kl_xmalloc(cap);
  snprintf(cfg->server, cap, "https://%s%s%s:%d", v6 ? "[" : "", cfg->host,
           v6 ? "]" : "", portnum);
  cfg->token = token;
  cfg->token_file = token_path;

  int eno;
  if (readable(ca_path, &eno)) {
    cfg->ca.path = ca_path;
  } else {
    kl_log(KL_LOG_WARN,
           "in-cluster: cannot read %s (%s); using the system's "
           "certificate authorities",
           ca_path, strerror(eno));
    free(ca_path);
  }

  const char *ns = env_get(o, "POD_NAMESPACE");
  if (ns && *ns) {
    cfg->namespace = kl_xstrdup(ns);
  } else {
    char *buf;
    size_t n;
    if (slurp(ns_path, KC_SMALL_MAX, &buf, &n, &eno) == KL_OK) {
      if (trim(buf, n) > 0)
        cfg->namespace = buf;
      else
        free(buf);
    }
    if (!cfg->namespace) cfg->namespace = kl_xstrdup("default");
  }
  free(ns_path);
  *out = cfg;
  return KL_OK;
}

/* $HOME/.kube/config; with the real environment and no HOME, the user
 * database's home directory (as controller-runtime does). */
static char *home_config(const kl_kc_opts_t *o) {
  const char *home = env_get(o, "HOME");
  char pwbuf[4096];
  struct passwd pw, *res = NULL;
  if (!home && !o->getenv &&
      getpwuid_r(getuid(), &pw, pwbuf, sizeof pwbuf, &res) == 0 && res)
    home = res->pw_dir;
  if (!home || !*home) return NULL;
  return join_path(home, ".kube/config");
}

int kl_kc_load(const kl_kc_opts_t *opts, kl_kc_config_t **out, char *err,
               size_t errlen) {
  kl_kc_opts_t none = {0};
  const kl_kc_opts_t *o = opts ? opts : &none;
  bool found;
  int rc;
  *out = NULL;

  if (o->kubeconfig && *o->kubeconfig) {
    char *path = (char *)o->kubeconfig;
    return load_paths(&path, 1, false, KL_KC_SOURCE_FLAG, o->context, out,
                      &found, err, errlen);
  }

  const char *list = env_get(o, "KUBECONFIG");
  if (list && *list) {
    /* Split on ':', drop empty and repeated entries, keep the order. */
    char *copy = kl_xstrdup(list), **paths = NULL;
    size_t n = 0;
    for (char *s = copy, *next; s; s = next) {
      next = strchr(s, ':');
      if (next) *next++ = '\0';
      if (!*s) continue;
      bool dup = false;
      for (size_t i = 0; i < n && !dup; i++)
        dup = strcmp(paths[i], s) == 0;
      if (dup) continue;
      paths = kl_xrealloc(paths, (n + 1) * sizeof *paths);
      paths[n++] = s;
    }
    rc = load_paths(paths, n, true, KL_KC_SOURCE_ENV, o->context, out, &found,
                    err, errlen);
    if (rc == KL_ENOENT && !found)
      seterr(err, errlen, "KUBECONFIG=%s: none of these files exists", list);
    free(paths);
    free(copy);
    return rc;
  }

  char icerr[512] = "";
  rc = kl_kc_in_cluster(o, out, icerr, sizeof icerr);
  if (rc == KL_OK) return KL_OK;
  bool in_cluster_failed = rc != KL_KC_NOT_IN_CLUSTER;
  int icrc = rc;

  char *home = home_config(o);
  if (home) {
    rc = load_paths(&home, 1, true, KL_KC_SOURCE_HOME, o->context, out, &found,
                    err, errlen);
    if (found) {
      if (rc == KL_OK && in_cluster_failed)
        kl_log(KL_LOG_WARN, "%s; using %s", icerr, home);
      free(home);
      return rc;
    }
  }
  if (in_cluster_failed) {
    seterr(err, errlen, "%s", icerr);
    free(home);
    return icrc;
  }
  seterr(err, errlen,
         "no configuration: no --kubeconfig, KUBECONFIG is not "
         "set, not in a cluster (KUBERNETES_SERVICE_HOST is not set), and %s%s",
         home ? home : "HOME is not set", home ? " does not exist" : "");
  free(home);
  return KL_ENOENT;
}

/* --- credentials --------------------------------------------------------- */

enum kc_mode { MODE_NONE, MODE_STATIC, MODE_FILE, MODE_EXEC };

struct kl_kc_creds {
  int refs; /* kl_kc_creds_ref; the last kl_kc_creds_free frees */
  kl_clock_t clock, wall;
  double max_age, timeout;
  char **base_env; /* NULL: the process's environment at run time */
  enum kc_mode mode;

  char *token; /* static, or the last good file token */
  char *token_file;
  double token_at; /* clock time of the last read; -INFINITY: stale */
  char *username, *password;

  /* MODE_EXEC */
  kl_kc_exec_t *exec;
  char *server, *tls_server_name, *proxy_url;
  kl_kc_pem_t ca;
  bool insecure, disable_compression;
  bool have; /* a cached ExecCredential */
  char *x_token, *x_cert, *x_key;
  size_t x_cert_len, x_key_len;
  double x_obtained, x_expiry;
  kl_kc_plugin_t *run; /* kl_kc_token_nowait's run in progress */
};

static double wall_now(void *ud) {
  (void)ud;
  return kl_clock_wall();
}

static char *dup_or_null(const char *s) { return s ? kl_xstrdup(s) : NULL; }

static kl_kc_exec_t *exec_dup(const kl_kc_exec_t *x) {
  kl_kc_exec_t *y = kl_xcalloc(1, sizeof *y);
  y->command = dup_or_null(x->command);
  y->args = kl_xcalloc(x->nargs, sizeof *y->args);
  for (size_t i = 0; i < x->nargs; i++)
    y->args[i] = kl_xstrdup(x->args[i]);
  y->nargs = x->nargs;
  y->env = kl_xcalloc(x->nenv, sizeof *y->env);
  for (size_t i = 0; i < x->nenv; i++) {
    y->env[i].name = dup_or_null(x->env[i].name);
    y->env[i].value = dup_or_null(x->env[i].value);
  }
  y->nenv = x->nenv;
  y->api_version = dup_or_null(x->api_version);
  y->install_hint = dup_or_null(x->install_hint);
  y->provide_cluster_info = x->provide_cluster_info;
  y->interactive_mode = x->interactive_mode;
  y->cluster_config = dup_or_null(x->cluster_config);
  return y;
}

kl_kc_creds_t *kl_kc_creds_new(const kl_kc_config_t *cfg,
                               const kl_kc_creds_opts_t *opts) {
  kl_kc_creds_opts_t none = {0};
  const kl_kc_creds_opts_t *o = opts ? opts : &none;
  kl_kc_creds_t *c = kl_xcalloc(1, sizeof *c);
  c->refs = 1;
  c->clock = o->clock ? *o->clock : kl_clock_system;
  c->wall = o->wall ? *o->wall : (kl_clock_t){wall_now, NULL};
  c->max_age = o->token_max_age > 0 ? o->token_max_age : KL_KC_TOKEN_MAX_AGE;
  c->timeout = o->exec_timeout > 0 ? o->exec_timeout : KL_KC_EXEC_TIMEOUT;
  if (o->base_env) {
    size_t n = 0;
    while (o->base_env[n])
      n++;
    c->base_env = kl_xcalloc(n + 1, sizeof *c->base_env);
    for (size_t i = 0; i < n; i++)
      c->base_env[i] = kl_xstrdup(o->base_env[i]);
  }
  c->token_at = -INFINITY;
  c->token = dup_or_null(cfg->token);
  c->username = dup_or_null(cfg->username);
  c->password = dup_or_null(cfg->password);

  bool cert = cfg->client_cert.path || cfg->client_cert.data;
  if (cfg->token_file) {
    /* As client-go's bearer round tripper: a fresh file source, with the
     * token the config holds as the fallback should the first read fail. */
    c->mode = MODE_FILE;
    c->token_file = kl_xstrdup(cfg->token_file);
  } else if (cfg->token || cfg->username || cfg->password) {
    c->mode = MODE_STATIC;
  } else if (cfg->exec && !cert) {
    c->mode = MODE_EXEC;
    c->exec = exec_dup(cfg->exec);
    c->server = dup_or_null(cfg->server);
    c->tls_server_name = dup_or_null(cfg->tls_server_name);
    c->proxy_url = dup_or_null(cfg->proxy_url);
    c->ca.path = dup_or_null(cfg->ca.path);
    if (cfg->ca.data) {
      c->ca.data = kl_xstrndup(cfg->ca.data, cfg->ca.len);
      c->ca.len = cfg->ca.len;
    }
    c->insecure = cfg->insecure;
    c->disable_compression = cfg->disable_compression;
  }
  return c;
}

static void exec_cred_clear(kl_kc_creds_t *c) {
  free_secret(c->x_token);
  if (c->x_cert) wipe(c->x_cert, c->x_cert_len);
  if (c->x_key) wipe(c->x_key, c->x_key_len);
  free(c->x_cert);
  free(c->x_key);
  c->x_token = c->x_cert = c->x_key = NULL;
  c->x_cert_len = c->x_key_len = 0;
  c->have = false;
}

kl_kc_creds_t *kl_kc_creds_ref(kl_kc_creds_t *c) {
  c->refs++;
  return c;
}

double kl_kc_creds_now(const kl_kc_creds_t *c) {
  return kl_clock_now(&c->clock);
}

void kl_kc_creds_free(kl_kc_creds_t *c) {
  if (!c || --c->refs > 0) return;
  if (c->base_env) {
    for (char **e = c->base_env; *e; e++)
      free_secret(*e);
    free(c->base_env);
  }
  free_secret(c->token);
  free(c->token_file);
  free(c->username);
  free_secret(c->password);
  exec_free(c->exec);
  free(c->server);
  free(c->tls_server_name);
  free_secret(c->proxy_url);
  free_pem(&c->ca, false);
  exec_cred_clear(c);
  kl_kc_plugin_free(c->run);
  free(c);
}

bool kl_kc_creds_uses_exec(const kl_kc_creds_t *c) {
  return c->mode == MODE_EXEC;
}

int kl_kc_creds_get(kl_kc_creds_t *c, kl_kc_cred_t *out, char *err,
                    size_t errlen) {
  memset(out, 0, sizeof *out);
  switch (c->mode) {
  case MODE_NONE: return KL_OK;
  case MODE_STATIC:
    out->token = c->token;
    out->username = c->username;
    out->password = c->password;
    return KL_OK;
  case MODE_FILE: {
    double now = kl_clock_now(&c->clock);
    int rc = KL_OK;
    if (!(now - c->token_at < c->max_age)) {
      char *tok, why[512];
      rc = read_token(c->token_file, &tok, why, sizeof why);
      if (rc == KL_OK) {
        free_secret(c->token);
        c->token = tok;
        c->token_at = now;
      } else {
        /* Keep the old token; the next call tries the file again. */
        seterr(err, errlen, "%s; keeping the previous token", why);
        rc = KL_EIO;
      }
    }
    out->token = c->token;
    out->obtained = c->token_at;
    return rc;
  }
  case MODE_EXEC:
    if (c->have && (c->x_expiry == 0 || kl_clock_now(&c->wall) < c->x_expiry)) {
      out->token = c->x_token;
      out->cert = c->x_cert;
      out->cert_len = c->x_cert_len;
      out->key = c->x_key;
      out->key_len = c->x_key_len;
      out->obtained = c->x_obtained;
      out->expiry = c->x_expiry;
      return KL_OK;
    }
    seterr(err, errlen,
           "exec plugin %s: no current credential; run the "
           "plugin",
           c->exec->command);
    return KL_EAGAIN;
  }
  return KL_OK;
}

/* The token after a plugin run that returned KL_OK: the credential it
 * cached, or KL_EIO when that had already expired. */
static int token_after_run(kl_kc_creds_t *c, kl_kc_cred_t *cred, char *err,
                           size_t errlen) {
  int rc = kl_kc_creds_get(c, cred, err, errlen);
  if (rc == KL_EAGAIN) {
    seterr(err, errlen, "exec plugin %s: returned an expired credential",
           c->exec->command);
    rc = KL_EIO;
  }
  return rc;
}

int kl_kc_token(kl_kc_creds_t *c, const char **token, char *err,
                size_t errlen) {
  kl_kc_cred_t cred;
  int rc = kl_kc_creds_get(c, &cred, err, errlen);
  if (rc == KL_EAGAIN) {
    kl_kc_plugin_free(c->run); /* one run at a time: this one */
    c->run = NULL;
    rc = kl_kc_plugin_run(c, err, errlen);
    if (rc == KL_OK) rc = token_after_run(c, &cred, err, errlen);
  }
  *token = rc == KL_OK || rc == KL_EIO ? cred.token : NULL;
  return rc;
}

int kl_kc_token_nowait(kl_kc_creds_t *c, const char **token, char *err,
                       size_t errlen) {
  kl_kc_cred_t cred;
  int rc;
  *token = NULL;
  if (!c->run) {
    rc = kl_kc_creds_get(c, &cred, err, errlen);
    if (rc != KL_EAGAIN) {
      *token = rc == KL_OK || rc == KL_EIO ? cred.token : NULL;
      return rc;
    }
    rc = kl_kc_plugin_start(c, &c->run, err, errlen);
    if (rc != KL_OK) {
      c->run = NULL;
      return rc;
    }
  }
  if (kl_kc_plugin_poll(c->run) != KL_OK &&
      kl_clock_now(&c->clock) < kl_kc_plugin_deadline(c->run)) {
    seterr(err, errlen, "exec plugin %s: running", c->exec->command);
    return KL_EAGAIN;
  }
  kl_kc_plugin_t *p = c->run;
  c->run = NULL;
  rc = kl_kc_plugin_finish(c, p, err, errlen);
  if (rc == KL_OK) rc = token_after_run(c, &cred, err, errlen);
  *token = rc == KL_OK ? cred.token : NULL;
  return rc;
}

void kl_kc_invalidate(kl_kc_creds_t *c, double request_start) {
  if (c->mode == MODE_FILE && c->token_at <= request_start)
    c->token_at = -INFINITY; /* re-read; the old token stays as fallback */
  if (c->mode == MODE_EXEC && c->have && c->x_obtained <= request_start)
    exec_cred_clear(c);
}

/* --- exec plugins -------------------------------------------------------- */

struct kl_kc_plugin {
  pid_t pid;
  bool reaped;
  int status; /* waitpid status once reaped */
  int fd[2];  /* stdout, stderr read ends; -1 when closed */
  sbuf out;
  bool overflow;
  char errhead[KC_ERRHEAD];
  size_t nerr;
  double deadline, timeout;
};

/* KUBERNETES_EXEC_INFO: the ExecCredential the plugin reads. */
static int exec_info(kl_kc_creds_t *c, sbuf *b, char *err, size_t errlen) {
  kl_kc_exec_t *x = c->exec;
  sb_str(b, "{\"kind\":\"ExecCredential\",\"apiVersion\":");
  sb_quote(b, x->api_version, strlen(x->api_version));
  sb_str(b, ",\"spec\":{");
  if (x->provide_cluster_info) {
    sb_str(b, "\"cluster\":{\"server\":");
    sb_quote(b, c->server ? c->server : "", c->server ? strlen(c->server) : 0);
    if (c->tls_server_name) {
      sb_str(b, ",\"tls-server-name\":");
      sb_quote(b, c->tls_server_name, strlen(c->tls_server_name));
    }
    if (c->insecure) sb_str(b, ",\"insecure-skip-tls-verify\":true");
    char *ca = c->ca.data;
    size_t calen = c->ca.len;
    int eno;
    if (!ca && c->ca.path &&
        slurp(c->ca.path, KC_SMALL_MAX, &ca, &calen, &eno) != KL_OK) {
      seterr(err, errlen,
             "exec plugin %s: cannot read certificate-authority "
             "%s for the cluster information: %s",
             x->command, c->ca.path, strerror(eno ? eno : EFBIG));
      return KL_EIO;
    }
    if (ca) {
      sb_str(b, ",\"certificate-authority-data\":\"");
      sb_reserve(b, kl_base64_encoded_len(calen));
      b->n += kl_base64_encode(ca, calen, b->p + b->n);
      sb_str(b, "\"");
      if (ca != c->ca.data) free(ca);
    }
    if (c->proxy_url) {
      sb_str(b, ",\"proxy-url\":");
      sb_quote(b, c->proxy_url, strlen(c->proxy_url));
    }
    if (c->disable_compression) sb_str(b, ",\"disable-compression\":true");
    if (x->cluster_config) {
      sb_str(b, ",\"config\":");
      sb_str(b, x->cluster_config);
    }
    sb_str(b, "},");
  }
  sb_str(b, "\"interactive\":false}}");
  return KL_OK;
}

static bool env_named(const char *entry, const char *name) {
  size_t n = strlen(name);
  return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static char *env_entry(const char *name, const char *value) {
  size_t n = strlen(name), v = strlen(value);
  char *s = kl_xmalloc(n + v + 2);
  memcpy(s, name, n);
  s[n] = '=';
  memcpy(s + n + 1, value, v + 1);
  return s;
}

/* The command's path: as is when it holds a '/' (if it exists), else the
 * first executable regular file in PATH (empty entries are skipped, as
 * Go's LookPath refuses the current directory). NULL when not found. */
static char *look_path(const char *cmd, const char *path) {
  struct stat st;
  if (strchr(cmd, '/')) return stat(cmd, &st) == 0 ? kl_xstrdup(cmd) : NULL;
  if (!path) return NULL;
  size_t clen = strlen(cmd);
  for (const char *s = path; *s;) {
    size_t n = strcspn(s, ":");
    if (n) {
      char *cand = kl_xmalloc(n + clen + 2);
      memcpy(cand, s, n);
      cand[n] = '/';
      memcpy(cand + n + 1, cmd, clen + 1);
      if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) &&
          access(cand, X_OK) == 0)
        return cand;
      free(cand);
    }
    s += n;
    if (*s == ':') s++;
  }
  return NULL;
}

static int set_cloexec(int fd) {
  int fl = fcntl(fd, F_GETFD);
  if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0) return -1;
  return 0;
}

int kl_kc_plugin_start(kl_kc_creds_t *c, kl_kc_plugin_t **out, char *err,
                       size_t errlen) {
  *out = NULL;
  if (c->mode != MODE_EXEC) {
    seterr(err, errlen, "no exec plugin is configured");
    return KL_EINVAL;
  }
  kl_kc_exec_t *x = c->exec;
  if (x->interactive_mode == KL_KC_INTERACTIVE_ALWAYS) {
    seterr(err, errlen,
           "exec plugin %s: interactiveMode is Always, but a "
           "controller has no terminal to give it",
           x->command);
    return KL_EINVAL;
  }

  /* The environment: base, minus what the exec env and KUBERNETES_EXEC_INFO
   * replace, then the exec env (the last of a repeated name wins), then
   * KUBERNETES_EXEC_INFO. */
  char **base = c->base_env ? c->base_env : environ;
  size_t nbase = 0;
  while (base && base[nbase])
    nbase++;
  char **envp = kl_xcalloc(nbase + x->nenv + 2, sizeof *envp);
  size_t ne = 0;
  const char *path_env = NULL;
  for (size_t i = 0; i < nbase; i++) {
    if (env_named(base[i], "PATH")) path_env = base[i] + 5;
    bool replaced = env_named(base[i], "KUBERNETES_EXEC_INFO");
    for (size_t j = 0; j < x->nenv && !replaced; j++)
      replaced = env_named(base[i], x->env[j].name);
    if (!replaced) envp[ne++] = kl_xstrdup(base[i]);
  }
  for (size_t j = 0; j < x->nenv; j++) {
    bool later = strcmp(x->env[j].name, "KUBERNETES_EXEC_INFO") == 0;
    for (size_t k = j + 1; k < x->nenv && !later; k++)
      later = strcmp(x->env[j].name, x->env[k].name) == 0;
    if (!later) envp[ne++] = env_entry(x->env[j].name, x->env[j].value);
  }
  sbuf info = {0};
  char **argv = NULL;
  char *file = NULL;
  int rc = exec_info(c, &info, err, errlen);
  if (rc != KL_OK) goto done;
  envp[ne++] = env_entry("KUBERNETES_EXEC_INFO", info.p);

  file = look_path(x->command, path_env);
  if (!file) {
    seterr(err, errlen, "exec plugin %s: executable not found%s%s", x->command,
           x->install_hint ? "\n\n" : "",
           x->install_hint ? x->install_hint : "");
    rc = KL_ENOENT;
    goto done;
  }
  argv = kl_xcalloc(x->nargs + 2, sizeof *argv);
  argv[0] = x->command;
  for (size_t i = 0; i < x->nargs; i++)
    argv[i + 1] = x->args[i];

  int po[2] = {-1, -1}, pe[2] = {-1, -1};
  if (pipe(po) != 0 || pipe(pe) != 0 || set_cloexec(po[0]) ||
      set_cloexec(po[1]) || set_cloexec(pe[0]) || set_cloexec(pe[1])) {
    int eno = errno;
    for (int i = 0; i < 2; i++) {
      if (po[i] >= 0) close(po[i]);
      if (pe[i] >= 0) close(pe[i]);
    }
    seterr(err, errlen, "exec plugin %s: pipe: %s", x->command, strerror(eno));
    rc = KL_EIO;
    goto done;
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  sigset_t none, def;
  sigemptyset(&none);
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, po[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
  posix_spawnattr_init(&attr);
  /* Its own process group, so a timeout kills what it started too. */
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &def);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                      POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  pid_t pid;
  int src = posix_spawn(&pid, file, &fa, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(po[1]);
  close(pe[1]);
  if (src != 0) {
    close(po[0]);
    close(pe[0]);
    seterr(err, errlen, "exec plugin %s: cannot run %s: %s", x->command, file,
           strerror(src));
    rc = src == ENOENT ? KL_ENOENT : KL_EIO;
    goto done;
  }
  fcntl(po[0], F_SETFL, fcntl(po[0], F_GETFL) | O_NONBLOCK);
  fcntl(pe[0], F_SETFL, fcntl(pe[0], F_GETFL) | O_NONBLOCK);

  kl_kc_plugin_t *p = kl_xcalloc(1, sizeof *p);
  p->pid = pid;
  p->fd[0] = po[0];
  p->fd[1] = pe[0];
  p->timeout = c->timeout;
  p->deadline = kl_clock_now(&c->clock) + c->timeout;
  *out = p;

done:
  for (size_t i = 0; i < ne; i++)
    free_secret(envp[i]);
  free(envp);
  free(info.p);
  free(argv);
  free(file);
  return rc;
}

int kl_kc_plugin_fd(const kl_kc_plugin_t *p, int which) {
  return which == 0 || which == 1 ? p->fd[which] : -1;
}

pid_t kl_kc_plugin_pid(const kl_kc_plugin_t *p) { return p->pid; }

double kl_kc_plugin_deadline(const kl_kc_plugin_t *p) { return p->deadline; }

static void drain(kl_kc_plugin_t *p, int which) {
  char buf[16384];
  while (p->fd[which] >= 0) {
    ssize_t r = read(p->fd[which], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) { /* end of file, or an error that ends the stream */
      close(p->fd[which]);
      p->fd[which] = -1;
      return;
    }
    if (which == 0) {
      if (p->out.n + (size_t)r > KC_OUT_MAX)
        p->overflow = true;
      else
        sb_add(&p->out, buf, (size_t)r);
    } else {
      size_t room = sizeof p->errhead - 1 - p->nerr;
      size_t k = (size_t)r < room ? (size_t)r : room;
      memcpy(p->errhead + p->nerr, buf, k);
      p->nerr += k;
      p->errhead[p->nerr] = '\0';
    }
  }
}

static void reap(kl_kc_plugin_t *p, bool block) {
  while (!p->reaped) {
    int st;
    pid_t r = waitpid(p->pid, &st, block ? 0 : WNOHANG);
    if (r < 0 && errno == EINTR) continue;
    if (r == p->pid) {
      p->reaped = true;
      p->status = st;
    } else if (r < 0) { /* reaped by someone else: status unknown */
      p->reaped = true;
      p->status = -1;
    }
    return;
  }
}

int kl_kc_plugin_poll(kl_kc_plugin_t *p) {
  drain(p, 0);
  drain(p, 1);
  reap(p, false);
  return p->fd[0] < 0 && p->fd[1] < 0 && p->reaped ? KL_OK : KL_EAGAIN;
}

void kl_kc_plugin_free(kl_kc_plugin_t *p) {
  if (!p) return;
  if (!p->reaped || p->fd[0] >= 0 || p->fd[1] >= 0) {
    kill(-p->pid, SIGKILL);
    reap(p, true);
  }
  for (int i = 0; i < 2; i++)
    if (p->fd[i] >= 0) close(p->fd[i]);
  if (p->out.p) wipe(p->out.p, p->out.n);
  free(p->out.p);
  free(p);
}

/* The first non-empty line of the plugin's stderr, at most 200 bytes, with
 * control bytes replaced. */
static void first_line(const kl_kc_plugin_t *p, char *out, size_t n) {
  const char *s = p->errhead, *end = s + p->nerr;
  out[0] = '\0';
  while (s < end) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *e = nl ? nl : end;
    while (s < e && is_space(*s))
      s++;
    while (e > s && is_space(e[-1]))
      e--;
    if (e > s) {
      size_t k = (size_t)(e - s);
      if (k > 200) k = 200;
      if (k > n - 1) k = n - 1;
      for (size_t i = 0; i < k; i++)
        out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
      out[k] = '\0';
      return;
    }
    s = nl ? nl + 1 : end;
  }
}

/* A string member: 1 when set (a new NUL-terminated copy), 0 when absent,
 * null or "", -1 when it is not a string. */
static int json_string(kl_json_span_t obj, const char *key, char **out,
                       size_t *n) {
  kl_json_span_t v;
  *out = NULL;
  *n = 0;
  if (!kl_json_member(obj, key, &v)) return 0;
  if (v.n == 4 && memcmp(v.p, "null", 4) == 0) return 0;
  if (v.n < 2 || v.p[0] != '"') return -1;
  char *s = kl_xmalloc(v.n - 1);
  size_t k = kl_json_unescape(v.p + 1, v.n - 2, s);
  s[k] = '\0';
  if (k == 0) {
    free(s);
    return 0;
  }
  *out = s;
  *n = k;
  return 1;
}

/* Parses an ExecCredential into c's cache. Messages never quote output. */
static int parse_cred(kl_kc_creds_t *c, const char *buf, size_t len, char *err,
                      size_t errlen) {
  const char *cmd = c->exec->command;
  kl_json_value_t v;
  char jerr[128];
  if (len == 0) {
    seterr(err, errlen, "exec plugin %s: wrote nothing to stdout", cmd);
    return KL_EPARSE;
  }
  if (kl_json_check(buf, len, &v, jerr, sizeof jerr) != KL_OK) {
    unsigned long long at = strtoull(jerr + 5, NULL, 10); /* "byte N: " */
    seterr(err, errlen,
           "exec plugin %s: stdout is not a JSON object "
           "(malformed at byte %llu)",
           cmd, at);
    return KL_EPARSE;
  }
  char *api = NULL, *kind = NULL, *token = NULL, *cert = NULL, *key = NULL,
       *exp = NULL;
  size_t apin, kindn, tokn, certn, keyn, expn;
  int rc = KL_EPARSE;
  kl_json_span_t status;
  json_string(v.json, "apiVersion", &api, &apin);
  json_string(v.json, "kind", &kind, &kindn);
  if (!kind || strcmp(kind, "ExecCredential") != 0) {
    seterr(err, errlen, "exec plugin %s: stdout is not an ExecCredential", cmd);
    goto done;
  }
  if (!api || strcmp(api, c->exec->api_version) != 0) {
    seterr(err, errlen,
           "exec plugin %s: the ExecCredential's apiVersion is "
           "not %s as configured",
           cmd, c->exec->api_version);
    goto done;
  }
  if (!kl_json_member(v.json, "status", &status) || status.n == 0 ||
      status.p[0] != '{') {
    seterr(err, errlen, "exec plugin %s: the ExecCredential has no status",
           cmd);
    goto done;
  }
  if (json_string(status, "token", &token, &tokn) < 0 ||
      json_string(status, "clientCertificateData", &cert, &certn) < 0 ||
      json_string(status, "clientKeyData", &key, &keyn) < 0 ||
      json_string(status, "expirationTimestamp", &exp, &expn) < 0) {
    seterr(err, errlen, "exec plugin %s: a status field is not a string", cmd);
    goto done;
  }
  if (!token && !cert && !key) {
    seterr(err, errlen,
           "exec plugin %s: returned neither a token nor a "
           "client certificate and key",
           cmd);
    goto done;
  }
  if (!cert != !key) {
    seterr(err, errlen, "exec plugin %s: returned a client %s without a %s",
           cmd, cert ? "certificate" : "key", cert ? "key" : "certificate");
    goto done;
  }
  if (token && has_ctl(token, tokn)) {
    seterr(err, errlen, "exec plugin %s: the token holds control characters",
           cmd);
    goto done;
  }
  double expiry = 0;
  if (exp && !kl_kc_parse_rfc3339(exp, expn, &expiry)) {
    seterr(err, errlen,
           "exec plugin %s: expirationTimestamp is not an RFC "
           "3339 time",
           cmd);
    goto done;
  }
  exec_cred_clear(c);
  c->have = true;
  STEAL(c->x_token, token);
  STEAL(c->x_cert, cert);
  STEAL(c->x_key, key);
  c->x_cert_len = c->x_cert ? certn : 0;
  c->x_key_len = c->x_key ? keyn : 0;
  c->x_expiry = expiry;
  c->x_obtained = kl_clock_now(&c->clock);
  rc = KL_OK;
done:
  free(api);
  free(kind);
  free_secret(token);
  if (cert) wipe(cert, certn);
  if (key) wipe(key, keyn);
  free(cert);
  free(key);
  free(exp);
  return rc;
}

int kl_kc_plugin_finish(kl_kc_creds_t *c, kl_kc_plugin_t *p, char *err,
                        size_t errlen) {
  const char *cmd = c->exec ? c->exec->command : "?";
  int rc = KL_EIO;
  char line[256];
  kl_kc_plugin_poll(p);
  if (!p->reaped || p->fd[0] >= 0 || p->fd[1] >= 0) {
    seterr(err, errlen, "exec plugin %s: timed out after %g s", cmd,
           p->timeout);
    goto done;
  }
  first_line(p, line, sizeof line);
  if (p->status == -1) {
    seterr(err, errlen, "exec plugin %s: exit status unknown", cmd);
  } else if (WIFSIGNALED(p->status)) {
    seterr(err, errlen, "exec plugin %s: killed by signal %d%s%s", cmd,
           WTERMSIG(p->status), line[0] ? ": " : "", line);
  } else if (WEXITSTATUS(p->status) != 0) {
    seterr(err, errlen, "exec plugin %s: exited with status %d%s%s", cmd,
           WEXITSTATUS(p->status), line[0] ? ": " : "", line);
  } else if (p->overflow) {
    seterr(err, errlen, "exec plugin %s: wrote more than 1 MiB to stdout", cmd);
  } else if (c->mode != MODE_EXEC) {
    seterr(err, errlen, "no exec plugin is configured");
    rc = KL_EINVAL;
  } else {
    rc = parse_cred(c, p->out.p ? p->out.p : "", p->out.n, err, errlen);
  }
done:
  kl_kc_plugin_free(p);
  return rc;
}

int kl_kc_plugin_run(kl_kc_creds_t *c, char *err, size_t errlen) {
  kl_kc_plugin_t *p;
  int rc = kl_kc_plugin_start(c, &p, err, errlen);
  if (rc != KL_OK) return rc;
  double end = kl_clock_monotonic(NULL) + c->timeout;
  while (kl_kc_plugin_poll(p) != KL_OK) {
    double left = end - kl_clock_monotonic(NULL);
    if (left <= 0) break;
    struct pollfd pf[2];
    nfds_t n = 0;
    for (int i = 0; i < 2; i++)
      if (p->fd[i] >= 0) pf[n++] = (struct pollfd){p->fd[i], POLLIN, 0};
    int ms = (int)ceil(left * 1000);
    if (n == 0 && ms > 5) ms = 5; /* pipes closed: wait for the exit */
    poll(pf, n, ms);
  }
  return kl_kc_plugin_finish(c, p, err, errlen);
}

/* --- RFC 3339 ------------------------------------------------------------ */

static bool digits(const char *s, size_t n, int *out) {
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil). */
static long days_from_civil(long y, int m, int d) {
  y -= m <= 2;
  long era = (y >= 0 ? y : y - 399) / 400;
  long yoe = y - era * 400;
  long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool kl_kc_parse_rfc3339(const char *s, size_t n, double *out) {
  int y, mo, d, h, mi, sec;
  if (n < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
      s[13] != ':' || s[16] != ':')
    return false;
  if (!digits(s, 4, &y) || !digits(s + 5, 2, &mo) || !digits(s + 8, 2, &d) ||
      !digits(s + 11, 2, &h) || !digits(s + 14, 2, &mi) ||
      !digits(s + 17, 2, &sec))
    return false;
  static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
      (mo == 2 && d == 29 && !leap) || h > 23 || mi > 59 || sec > 59)
    return false;
  size_t i = 19;
  double frac = 0, scale = 0.1;
  if (i < n && s[i] == '.') {
    size_t start = ++i;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      frac += (s[i] - '0') * scale;
      scale /= 10;
      i++;
    }
    if (i == start) return false;
  }
  long off = 0;
  if (i < n && (s[i] == 'Z' || s[i] == 'z')) {
    i++;
  } else if (i + 6 == n && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
    int oh, om;
    if (!digits(s + i + 1, 2, &oh) || !digits(s + i + 4, 2, &om) || oh > 23 ||
        om > 59)
      return false;
    off = (oh * 60L + om) * 60L * (s[i] == '+' ? 1 : -1);
    i += 6;
  } else {
    return false;
  }
  if (i != n) return false;
  double t = (double)days_from_civil(y, mo, d) * 86400.0 + h * 3600.0 +
             mi * 60.0 + sec - (double)off;
  *out = t + frac;
  return true;
}
