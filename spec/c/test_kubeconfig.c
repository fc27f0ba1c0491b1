/* test_kubeconfig.c — configuration and credentials: kubeconfig files
 * written by each test into its own temporary directory (one file, two
 * contexts and --context, KUBECONFIG merges, every -data field, the server
 * URL rules, the checks on the chosen context), in-cluster configuration
 * from an injected environment and service-account directory (T-42),
 * controller-runtime's precedence, token files rotating under the fake
 * clock, exec credential plugins written as shell scripts (caching until
 * expiry, invalidation, v1beta1, failures, the non-blocking split), YAML
 * errors with their lines, and secrets that never reach an error message.
 * Nothing reads the real environment or the real service-account files. */
#include <dirent.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base64.h"
#include "error.h"
#include "kubeconfig.h"
#include "test.h"

/* --- helpers ------------------------------------------------------------- */

static char tmp[256];

static void tmp_make(void) {
  snprintf(tmp, sizeof tmp, "/tmp/kl-kc-XXXXXX");
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    exit(2);
  }
}

static void rm_rf(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      rm_rf(sub);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static void tmp_remove(void) { rm_rf(tmp); }

/* tmp/rel, in one of eight rotating buffers. */
static const char *P(const char *rel) {
  static char bufs[8][512];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", tmp, rel);
  return b;
}

static void mkdirs_for(const char *path) {
  char d[512];
  snprintf(d, sizeof d, "%s", path);
  for (char *s = d + strlen(tmp) + 1; (s = strchr(s, '/')); s++) {
    *s = '\0';
    mkdir(d, 0755);
    *s = '/';
  }
}

__attribute__((format(printf, 2, 3))) static void writef(const char *rel,
                                                         const char *fmt, ...) {
  static char buf[16384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  const char *path = P(rel);
  mkdirs_for(path);
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(2);
  }
  fputs(buf, f);
  fclose(f);
}

static void write_script(const char *rel, const char *body) {
  writef(rel, "#!/bin/sh\n%s", body);
  chmod(P(rel), 0755);
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[16384];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* The injected environment. */
static const char *env_k[16], *env_v[16];
static int env_n;

static void env_clear(void) { env_n = 0; }

static void env_set(const char *k, const char *v) {
  for (int i = 0; i < env_n; i++)
    if (!strcmp(env_k[i], k)) {
      env_v[i] = v;
      return;
    }
  env_k[env_n] = k;
  env_v[env_n++] = v;
}

static void env_unset(const char *k) {
  for (int i = 0; i < env_n; i++)
    if (!strcmp(env_k[i], k)) {
      env_k[i] = env_k[--env_n];
      env_v[i] = env_v[env_n];
      return;
    }
}

static const char *fake_getenv(void *ud, const char *name) {
  (void)ud;
  for (int i = 0; i < env_n; i++)
    if (!strcmp(env_k[i], name)) return env_v[i];
  return NULL;
}

/* Options with the fake environment and tmp/sa as the service-account
 * directory; the path strings are copied, as P's buffers rotate. */
static kl_kc_opts_t opts_with(const char *kubeconfig, const char *context) {
  static char sa[512], flag[512];
  snprintf(sa, sizeof sa, "%s", P("sa"));
  snprintf(flag, sizeof flag, "%s", kubeconfig ? kubeconfig : "");
  kl_kc_opts_t o = {flag, context, fake_getenv, NULL, sa};
  return o;
}

static char err[1024];

/* Loads one file with the fake environment (nothing else set). */
static int load1(const char *rel, const char *context, kl_kc_config_t **cfg) {
  env_clear();
  kl_kc_opts_t o = opts_with(P(rel), context);
  err[0] = '\0';
  return kl_kc_load(&o, cfg, err, sizeof err);
}

#define KT_NO_SECRET(s) KT_TRUE(strstr((s), "SECRET") == NULL)

static const char *const plugin_env[] = {"PATH=/usr/bin:/bin", NULL};
static const kl_kc_creds_opts_t fake_creds = {&kt_clock, &kt_clock, 0, 0,
                                              plugin_env};

#define T0 1767225600.0 /* 2026-01-01T00:00:00Z */

/* "-----BEGIN CERTIFICATE-----\nCA\n" and friends, base64. */
#define CA_PEM "-----BEGIN CERTIFICATE-----\nCA\n"
#define CA_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCg=="

/* --- base64 and RFC 3339 ------------------------------------------------- */

static void test_base64(void) {
  char *out;
  size_t n, bad = 99;
  KT_EQ_INT(kl_base64_decode(CA_B64, strlen(CA_B64), &out, &n, &bad), KL_OK);
  KT_EQ_MEM(out, n, CA_PEM);
  free(out);
  /* Whitespace anywhere, padding optional. */
  KT_EQ_INT(kl_base64_decode(" aGVs\n bG8=\r\n", 13, &out, &n, &bad), KL_OK);
  KT_EQ_MEM(out, n, "hello");
  free(out);
  KT_EQ_INT(kl_base64_decode("aGVsbG8", 7, &out, &n, &bad), KL_OK);
  KT_EQ_MEM(out, n, "hello");
  free(out);
  KT_EQ_INT(kl_base64_decode("aGk=", 4, &out, &n, &bad), KL_OK);
  KT_EQ_MEM(out, n, "hi");
  free(out);
  KT_EQ_INT(kl_base64_decode("", 0, &out, &n, &bad), KL_OK);
  KT_EQ_INT(n, 0);
  free(out);
  /* Errors give the offset of the bad byte. */
  KT_EQ_INT(kl_base64_decode("aGV!bG8=", 8, &out, &n, &bad), KL_EPARSE);
  KT_TRUE(out == NULL);
  KT_EQ_INT(bad, 3);
  KT_EQ_INT(kl_base64_decode("aGk=x", 5, &out, &n, &bad), KL_EPARSE);
  KT_EQ_INT(bad, 4);
  KT_EQ_INT(kl_base64_decode("a===", 4, &out, &n, &bad), KL_EPARSE);
  KT_EQ_INT(bad, 1);
  KT_EQ_INT(kl_base64_decode("aGVsb", 5, &out, &n, &bad), KL_EPARSE);
  KT_EQ_INT(bad, 5);
  KT_EQ_INT(kl_base64_decode("aG=", 3, &out, &n, &bad), KL_EPARSE);
  KT_EQ_INT(bad, 3);
  /* Encoding round-trips every length. */
  const char *src = "any carnal pleasure";
  for (size_t len = 0; len <= strlen(src); len++) {
    char enc[64];
    size_t e = kl_base64_encode(src, len, enc);
    KT_EQ_INT(e, kl_base64_encoded_len(len));
    KT_EQ_INT(kl_base64_decode(enc, e, &out, &n, &bad), KL_OK);
    KT_EQ_INT(n, len);
    KT_TRUE(memcmp(out, src, len) == 0);
    free(out);
  }
  char enc[16];
  kl_base64_encode("hi", 2, enc);
  KT_EQ_STR(enc, "aGk=");
}

static void test_rfc3339(void) {
  double t;
  KT_TRUE(kl_kc_parse_rfc3339("2026-01-01T00:00:00Z", 20, &t));
  KT_EQ_DBL(t, T0, 0);
  KT_TRUE(kl_kc_parse_rfc3339("1970-01-01T00:00:00Z", 20, &t));
  KT_EQ_DBL(t, 0, 0);
  KT_TRUE(kl_kc_parse_rfc3339("1970-01-01T01:00:00+01:00", 25, &t));
  KT_EQ_DBL(t, 0, 0);
  KT_TRUE(kl_kc_parse_rfc3339("2024-02-29t12:30:15.25z", 23, &t));
  KT_EQ_DBL(t, 1709209815.25, 1e-6);
  KT_TRUE(kl_kc_parse_rfc3339("2024-02-29T12:30:15-00:30", 25, &t));
  KT_EQ_DBL(t, 1709209815.0 + 1800, 1e-6);
  const char *bad[] = {"2023-02-29T00:00:00Z",     "2026-01-01 00:00:00Z",
                       "2026-01-01T00:00:00",      "2026-13-01T00:00:00Z",
                       "2026-01-01T24:00:00Z",     "2026-01-01T00:00:00.Z",
                       "2026-01-01T00:00:00+0100", "yesterday"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    KT_TRUE(!kl_kc_parse_rfc3339(bad[i], strlen(bad[i]), &t));
}

/* --- one file ------------------------------------------------------------ */

static void test_single_file(void) {
  tmp_make();
  writef("certs/ca.crt", CA_PEM);
  writef("certs/client.crt", "cert");
  writef("certs/client.key", "key");
  writef("kube/config",
         "apiVersion: v1\n"
         "kind: Config\n"
         "preferences: {}\n"
         "current-context: dev\n"
         "clusters:\n"
         "- name: dev-cluster\n"
         "  cluster:\n"
         "    server: https://api.example.com:6443/\n"
         "    certificate-authority: ../certs/ca.crt\n"
         "    tls-server-name: kubernetes.default\n"
         "    proxy-url: http://proxy.local:3128\n"
         "    disable-compression: true\n"
         "users:\n"
         "- name: dev-user\n"
         "  user:\n"
         "    client-certificate: ../certs/client.crt\n"
         "    client-key: %s\n"
         "    as: jane\n"
         "    as-uid: \"1000\"\n"
         "    as-groups: [devs, ops]\n"
         "    as-user-extra:\n"
         "      scopes: [view]\n"
         "contexts:\n"
         "- name: dev\n"
         "  context:\n"
         "    cluster: dev-cluster\n"
         "    user: dev-user\n"
         "    namespace: team-a\n",
         P("certs/client.key"));
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("kube/config", NULL, &cfg), KL_OK);
  KT_EQ_STR(err, "");
  KT_EQ_INT(cfg->source, KL_KC_SOURCE_FLAG);
  char want[512];
  snprintf(want, sizeof want, "kubeconfig %s", P("kube/config"));
  KT_EQ_STR(cfg->origin, want);
  KT_EQ_STR(cfg->context, "dev");
  KT_EQ_STR(cfg->cluster, "dev-cluster");
  KT_EQ_STR(cfg->user, "dev-user");
  KT_EQ_STR(cfg->server, "https://api.example.com:6443");
  KT_EQ_STR(cfg->scheme, "https");
  KT_EQ_STR(cfg->host, "api.example.com");
  KT_EQ_INT(cfg->port, 6443);
  KT_EQ_STR(cfg->path, "");
  /* Relative paths resolve against the file's directory. */
  KT_EQ_STR(cfg->ca.path, P("certs/ca.crt"));
  KT_TRUE(cfg->ca.data == NULL);
  KT_EQ_STR(cfg->client_cert.path, P("certs/client.crt"));
  KT_EQ_STR(cfg->client_key.path, P("certs/client.key"));
  KT_TRUE(!cfg->insecure);
  KT_EQ_STR(cfg->tls_server_name, "kubernetes.default");
  KT_EQ_STR(cfg->proxy_url, "http://proxy.local:3128");
  KT_TRUE(cfg->disable_compression);
  KT_TRUE(cfg->token == NULL && cfg->token_file == NULL && cfg->exec == NULL);
  KT_EQ_STR(cfg->impersonate, "jane");
  KT_EQ_STR(cfg->impersonate_uid, "1000");
  KT_EQ_INT(cfg->nimpersonate_groups, 2);
  KT_EQ_STR(cfg->impersonate_groups[1], "ops");
  KT_EQ_INT(cfg->nimpersonate_extra, 1);
  KT_EQ_STR(cfg->impersonate_extra[0].key, "scopes");
  KT_EQ_INT(cfg->impersonate_extra[0].nvalues, 1);
  KT_EQ_STR(cfg->impersonate_extra[0].values[0], "view");
  KT_EQ_STR(cfg->namespace, "team-a");
  kl_kc_config_free(cfg);

  /* A missing --kubeconfig file is an error, not a fallback. */
  KT_EQ_INT(load1("kube/nope", NULL, &cfg), KL_ENOENT);
  KT_TRUE(cfg == NULL);
  snprintf(want, sizeof want, "kubeconfig %s: No such file or directory",
           P("kube/nope"));
  KT_EQ_STR(err, want);
  tmp_remove();
}

static const char two_contexts[] =
    "current-context: a\n"
    "clusters:\n"
    "- name: ca\n"
    "  cluster: {server: \"https://a.example\"}\n"
    "- name: cb\n"
    "  cluster: {server: \"http://b.example\"}\n"
    "users:\n"
    "- name: ua\n"
    "  user: {token: token-a}\n"
    "- name: ub\n"
    "  user: {username: bob, password: pw}\n"
    "contexts:\n"
    "- name: a\n"
    "  context: {cluster: ca, user: ua}\n"
    "- name: b\n"
    "  context: {cluster: cb, user: ub, namespace: kube-system}\n"
    "- name: anonymous\n"
    "  context: {cluster: cb}\n";

static void test_two_contexts_and_override(void) {
  tmp_make();
  writef("config", "%s", two_contexts);
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  KT_EQ_STR(cfg->context, "a");
  KT_EQ_STR(cfg->server, "https://a.example:443");
  KT_EQ_STR(cfg->token, "token-a");
  KT_EQ_STR(cfg->namespace, "default");
  kl_kc_config_free(cfg);

  KT_EQ_INT(load1("config", "b", &cfg), KL_OK);
  KT_EQ_STR(cfg->context, "b");
  KT_EQ_STR(cfg->server, "http://b.example:80");
  KT_EQ_INT(cfg->port, 80);
  KT_TRUE(cfg->token == NULL);
  KT_EQ_STR(cfg->username, "bob");
  KT_EQ_STR(cfg->password, "pw");
  KT_EQ_STR(cfg->namespace, "kube-system");
  kl_kc_creds_t *c = kl_kc_creds_new(cfg, &fake_creds);
  kl_kc_cred_t cred;
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_OK);
  KT_EQ_STR(cred.username, "bob");
  KT_EQ_STR(cred.password, "pw");
  KT_TRUE(cred.token == NULL);
  KT_TRUE(!kl_kc_creds_uses_exec(c));
  kl_kc_creds_free(c);
  kl_kc_config_free(cfg);

  /* A context without a user: no credentials at all. */
  KT_EQ_INT(load1("config", "anonymous", &cfg), KL_OK);
  KT_TRUE(cfg->user == NULL && cfg->token == NULL && cfg->username == NULL);
  c = kl_kc_creds_new(cfg, &fake_creds);
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_OK);
  KT_TRUE(cred.token == NULL && cred.username == NULL && cred.cert == NULL);
  kl_kc_creds_free(c);
  kl_kc_config_free(cfg);
  tmp_remove();
}

/* --- KUBECONFIG merging -------------------------------------------------- */

static void test_kubeconfig_merge(void) {
  tmp_make();
  /* The first file sets no current-context; its "shared" cluster wins. */
  writef("one/config", "clusters:\n"
                       "- name: shared\n"
                       "  cluster:\n"
                       "    server: https://one.example\n"
                       "    certificate-authority: ca.crt\n"
                       "users:\n"
                       "- name: u1\n"
                       "  user: {tokenFile: token}\n"
                       "contexts:\n"
                       "- name: ctx\n"
                       "  context: {cluster: shared, user: u2}\n");
  writef("one/ca.crt", CA_PEM);
  writef("one/token", "one-token\n");
  writef("two/config",
         "current-context: ctx\n"
         "clusters:\n"
         "- name: shared\n"
         "  cluster: {server: https://two.example}\n"
         "- name: only-two\n"
         "  cluster:\n"
         "    server: https://only-two.example:8443\n"
         "    certificate-authority: ca.crt\n"
         "users:\n"
         "- name: u2\n"
         "  user: {tokenFile: token}\n"
         "contexts:\n"
         "- name: ctx\n"
         "  context: {cluster: only-two, user: u1}\n"
         "- name: two\n"
         "  context: {cluster: only-two, user: u2, namespace: two-ns}\n");
  writef("two/ca.crt", CA_PEM);
  writef("two/token", "two-token\n");

  char list[2048];
  snprintf(list, sizeof list, "%s::%s:%s:%s", P("missing/config"),
           P("one/config"), P("two/config"), P("one/config"));
  env_clear();
  env_set("KUBECONFIG", list);
  kl_kc_opts_t o = opts_with(NULL, NULL);
  kl_kc_config_t *cfg;
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_STR(err, "");
  KT_EQ_INT(cfg->source, KL_KC_SOURCE_ENV);
  /* current-context from two; the context "ctx" from one (first wins). */
  KT_EQ_STR(cfg->context, "ctx");
  char want[4096];
  snprintf(want, sizeof want, "kubeconfig %s", P("one/config"));
  KT_EQ_STR(cfg->origin, want);
  KT_EQ_STR(cfg->server, "https://one.example:443");
  KT_EQ_STR(cfg->ca.path, P("one/ca.crt"));
  /* u2 is defined only in two: its tokenFile resolves against two/. */
  KT_EQ_STR(cfg->user, "u2");
  KT_EQ_STR(cfg->token_file, P("two/token"));
  KT_EQ_STR(cfg->token, "two-token");
  kl_kc_config_free(cfg);

  o.context = "two";
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_STR(cfg->server, "https://only-two.example:8443");
  KT_EQ_STR(cfg->ca.path, P("two/ca.crt"));
  KT_EQ_STR(cfg->namespace, "two-ns");
  kl_kc_config_free(cfg);

  /* A context no file defines names the whole list. */
  o.context = "prod";
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_EINVAL);
  snprintf(want, sizeof want, "kubeconfig %s:%s: context \"prod\" not found",
           P("one/config"), P("two/config"));
  KT_EQ_STR(err, want);

  /* Only missing files: an error, no fallback to in-cluster. */
  snprintf(list, sizeof list, "%s:%s", P("a/config"), P("b/config"));
  env_set("KUBECONFIG", list);
  env_set("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  env_set("KUBERNETES_SERVICE_PORT", "443");
  writef("sa/token", "t");
  o.context = NULL;
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_ENOENT);
  snprintf(want, sizeof want, "KUBECONFIG=%s: none of these files exists",
           list);
  KT_EQ_STR(err, want);

  /* A broken file in the list fails the load. */
  writef("bad/config", "clusters: {oops\n");
  snprintf(list, sizeof list, "%s:%s", P("one/config"), P("bad/config"));
  env_set("KUBECONFIG", list);
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_EPARSE);
  KT_TRUE(strstr(err, P("bad/config")) != NULL);
  tmp_remove();
}

/* --- choosing a context -------------------------------------------------- */

static void test_missing_current_context(void) {
  tmp_make();
  writef("config", "clusters:\n- name: c\n  cluster: {server: https://c}\n"
                   "contexts:\n- name: x\n  context: {cluster: c}\n");
  kl_kc_config_t *cfg;
  char want[512];
  KT_EQ_INT(load1("config", NULL, &cfg), KL_EINVAL);
  KT_TRUE(cfg == NULL);
  snprintf(want, sizeof want,
           "kubeconfig %s: no current-context is set and "
           "no --context was given",
           P("config"));
  KT_EQ_STR(err, want);
  KT_EQ_INT(load1("config", "x", &cfg), KL_OK);
  kl_kc_config_free(cfg);
  /* An empty file is a config with nothing in it. */
  writef("empty", "%s", "");
  KT_EQ_INT(load1("empty", NULL, &cfg), KL_EINVAL);
  snprintf(want, sizeof want,
           "kubeconfig %s: no current-context is set and "
           "no --context was given",
           P("empty"));
  KT_EQ_STR(err, want);
  tmp_remove();
}

static void test_unknown_context_cluster_user(void) {
  tmp_make();
  writef("config", "current-context: good\n"
                   "clusters:\n"
                   "- name: c\n"
                   "  cluster: {server: https://c}\n"
                   "users:\n"
                   "- name: u\n"
                   "  user: {token: t}\n"
                   "contexts:\n"
                   "- name: good\n"
                   "  context: {cluster: c, user: u}\n"
                   "- name: no-cluster\n"
                   "  context: {cluster: nope, user: u}\n"
                   "- name: no-user\n"
                   "  context: {cluster: c, user: nobody}\n"
                   "- name: empty\n"
                   "  context: {user: u}\n");
  kl_kc_config_t *cfg;
  char want[512];
  KT_EQ_INT(load1("config", "prod", &cfg), KL_EINVAL);
  snprintf(want, sizeof want, "kubeconfig %s: context \"prod\" not found",
           P("config"));
  KT_EQ_STR(err, want);
  KT_EQ_INT(load1("config", "no-cluster", &cfg), KL_EINVAL);
  snprintf(want, sizeof want,
           "kubeconfig %s: line 11: context "
           "\"no-cluster\": cluster \"nope\" not found",
           P("config"));
  KT_EQ_STR(err, want);
  KT_EQ_INT(load1("config", "no-user", &cfg), KL_EINVAL);
  snprintf(want, sizeof want,
           "kubeconfig %s: line 13: context \"no-user\": "
           "user \"nobody\" not found",
           P("config"));
  KT_EQ_STR(err, want);
  KT_EQ_INT(load1("config", "empty", &cfg), KL_EINVAL);
  snprintf(want, sizeof want,
           "kubeconfig %s: line 15: context \"empty\" "
           "names no cluster",
           P("config"));
  KT_EQ_STR(err, want);
  KT_TRUE(cfg == NULL);
  tmp_remove();
}

/* --- fields -------------------------------------------------------------- */

static void test_data_fields(void) {
  tmp_make();
  /* -data fields: base64 of PEM; a block scalar may wrap it. */
  writef("config",
         "current-context: x\n"
         "clusters:\n"
         "- name: c\n"
         "  cluster:\n"
         "    server: https://c.example\n"
         "    certificate-authority-data: %s\n"
         "users:\n"
         "- name: u\n"
         "  user:\n"
         "    client-certificate-data: Y2VydC1ieXRlcw==\n"
         "    client-key-data: |\n"
         "      a2V5\n"
         "      LWJ5dGVz\n"
         "contexts:\n"
         "- name: x\n"
         "  context: {cluster: c, user: u}\n",
         CA_B64);
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  KT_EQ_STR(err, "");
  KT_TRUE(cfg->ca.path == NULL);
  KT_EQ_MEM(cfg->ca.data, cfg->ca.len, CA_PEM);
  KT_EQ_MEM(cfg->client_cert.data, cfg->client_cert.len, "cert-bytes");
  KT_EQ_MEM(cfg->client_key.data, cfg->client_key.len, "key-bytes");
  KT_TRUE(cfg->client_cert.path == NULL && cfg->client_key.path == NULL);
  /* A client certificate makes an unqualified server https. */
  kl_kc_config_free(cfg);

  /* Invalid base64 anywhere fails the load, with the line, not the bytes. */
  writef("bad", "clusters:\n"
                "- name: unused\n"
                "  cluster:\n"
                "    server: https://c.example\n"
                "    certificate-authority-data: SECRET!!\n");
  KT_EQ_INT(load1("bad", NULL, &cfg), KL_EPARSE);
  char want[512];
  snprintf(want, sizeof want,
           "kubeconfig %s: line 5: cluster \"unused\": "
           "certificate-authority-data: invalid base64 at byte 6",
           P("bad"));
  KT_EQ_STR(err, want);
  KT_NO_SECRET(err);
  tmp_remove();
}

static void test_insecure_and_server_rules(void) {
  tmp_make();
  struct {
    const char *cluster; /* the cluster's body, flow style */
    const char *server;  /* normalized, or NULL for an error */
    const char *why;     /* the end of the error */
  } cases[] = {
      {"{server: https://h, insecure-skip-tls-verify: true}", "https://h:443",
       NULL},
      {"{server: h:6443, insecure-skip-tls-verify: true}", "https://h:6443",
       NULL},
      {"{server: h:6443}", "http://h:6443", NULL},
      {"{server: h, tls-server-name: k}", "https://h:443", NULL},
      {"{server: \"https://[fd00::1]:6443\"}", "https://[fd00::1]:6443", NULL},
      {"{server: \"https://[::1]\"}", "https://[::1]:443", NULL},
      {"{server: \"https://h:8443/k8s/clusters/c-1///?x=1#f\"}",
       "https://h:8443/k8s/clusters/c-1", NULL},
      {"{server: \"HTTPS://h\"}", "https://h:443", NULL},
      {"{server: \"ftp://h\"}", NULL,
       "server: unsupported scheme (use https or http)"},
      {"{server: \"https://u:SECRET@h\"}", NULL,
       "server: user information in the URL is not supported"},
      {"{server: \"https://fd00::1\"}", NULL,
       "server: an IPv6 address must be in brackets"},
      {"{server: \"https://h:99999\"}", NULL, "server: invalid port"},
      {"{server: \"https://h:x\"}", NULL, "server: invalid port"},
      {"{server: \"https://[::1\"}", NULL, "server: unterminated IPv6 address"},
      {"{server: \"https:///path\"}", NULL, "server: no host"},
      {"{server: \"\"}", NULL, "no server"},
      {"{insecure-skip-tls-verify: true}", NULL, "no server"},
      {"{server: https://h, insecure-skip-tls-verify: true, "
       "certificate-authority-data: " CA_B64 "}",
       NULL,
       "insecure-skip-tls-verify cannot be combined with a certificate "
       "authority"},
      {"{server: https://h, certificate-authority: ca.crt, "
       "certificate-authority-data: " CA_B64 "}",
       NULL,
       "certificate-authority and certificate-authority-data are both set"},
      {"{server: https://h, proxy-url: \"ftp://SECRET@p\"}", NULL,
       "proxy-url: unsupported scheme (use http, https or socks5)"},
      {"{server: https://h, proxy-url: \"socks5://p:1080\"}", "https://h:443",
       NULL},
  };
  writef("ca.crt", CA_PEM);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    writef("config",
           "current-context: x\n"
           "clusters:\n"
           "- name: c\n"
           "  cluster: %s\n"
           "contexts:\n"
           "- name: x\n"
           "  context: {cluster: c}\n",
           cases[i].cluster);
    kl_kc_config_t *cfg;
    int rc = load1("config", NULL, &cfg);
    if (cases[i].server) {
      KT_EQ_INT(rc, KL_OK);
      KT_EQ_STR(err, "");
      if (cfg) KT_EQ_STR(cfg->server, cases[i].server);
      if (cfg && i == 0) KT_TRUE(cfg->insecure);
      if (cfg && i == 4) KT_EQ_STR(cfg->host, "fd00::1");
      if (cfg && i == 6) KT_EQ_STR(cfg->path, "/k8s/clusters/c-1");
    } else {
      KT_EQ_INT(rc, KL_EINVAL);
      char want[512];
      snprintf(want, sizeof want, "kubeconfig %s: line 3: cluster \"c\": %s",
               P("config"), cases[i].why);
      KT_EQ_STR(err, want);
      KT_NO_SECRET(err);
    }
    kl_kc_config_free(cfg);
  }
  /* A CA file that cannot be read. */
  writef("config", "current-context: x\n"
                   "clusters:\n"
                   "- name: c\n"
                   "  cluster: {server: https://h, certificate-authority: "
                   "nope.crt}\n"
                   "contexts:\n- name: x\n  context: {cluster: c}\n");
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("config", NULL, &cfg), KL_EIO);
  char want[512];
  snprintf(want, sizeof want,
           "kubeconfig %s: line 3: cluster \"c\": cannot "
           "read certificate-authority %s: No such file or directory",
           P("config"), P("nope.crt"));
  KT_EQ_STR(err, want);
  tmp_remove();
}

static void test_user_checks(void) {
  tmp_make();
  writef("c.crt", "c");
  struct {
    const char *user, *why;
  } cases[] = {
      {"{client-certificate: c.crt}", "client-certificate without client-key"},
      {"{client-key-data: U0VDUkVU}", "client-key without client-certificate"},
      {"{client-certificate: c.crt, client-certificate-data: Yw==, "
       "client-key-data: U0VDUkVU}",
       "client-certificate and client-certificate-data are both set"},
      {"{client-certificate: nope.crt, client-key-data: U0VDUkVU}", NULL},
      {"{token: SECRET, username: u}",
       "more than one authentication method (token and basic auth); only one "
       "is allowed"},
      {"{as-groups: [g]}", "as-groups or as-user-extra without as"},
      {"{auth-provider: {name: oidc, config: {id-token: SECRET}}}",
       "auth-provider \"oidc\" is not supported; use an exec plugin"},
      {"{tokenFile: missing-token}", NULL},
      {"{exec: {apiVersion: client.authentication.k8s.io/v1}}",
       "exec: command is not set"},
      {"{exec: {command: x}}", "exec: apiVersion is not set"},
      {"{exec: {command: x, apiVersion: "
       "client.authentication.k8s.io/v1alpha1}}",
       "exec: apiVersion \"client.authentication.k8s.io/v1alpha1\" is not "
       "supported (use client.authentication.k8s.io/v1 or "
       "client.authentication.k8s.io/v1beta1)"},
      {"{exec: {command: x, apiVersion: client.authentication.k8s.io/v1}}",
       "exec: interactiveMode must be set for client.authentication.k8s.io/v1"},
      {"{exec: {command: x, apiVersion: client.authentication.k8s.io/v1, "
       "interactiveMode: Sometimes}}",
       "exec: interactiveMode \"Sometimes\" is not Never, IfAvailable or "
       "Always"},
      {"{exec: {command: x, apiVersion: client.authentication.k8s.io/v1beta1, "
       "env: [{value: SECRET}]}}",
       "exec: env[0] has no name"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    writef("config",
           "current-context: x\n"
           "clusters:\n- name: c\n  cluster: {server: https://h}\n"
           "users:\n"
           "- name: u\n"
           "  user: %s\n"
           "contexts:\n- name: x\n  context: {cluster: c, user: u}\n",
           cases[i].user);
    kl_kc_config_t *cfg;
    int rc = load1("config", NULL, &cfg);
    KT_TRUE(rc != KL_OK);
    KT_TRUE(cfg == NULL);
    char want[512];
    if (cases[i].why) {
      KT_EQ_INT(rc, KL_EINVAL);
      snprintf(want, sizeof want, "kubeconfig %s: line 6: user \"u\": %s",
               P("config"), cases[i].why);
      KT_EQ_STR(err, want);
    } else if (i == 3) {
      KT_EQ_INT(rc, KL_EIO);
      snprintf(want, sizeof want,
               "kubeconfig %s: line 6: user \"u\": cannot "
               "read client-certificate %s: No such file or directory",
               P("config"), P("nope.crt"));
      KT_EQ_STR(err, want);
    } else {
      KT_EQ_INT(rc, KL_EIO);
      snprintf(want, sizeof want,
               "kubeconfig %s: line 6: user \"u\": cannot "
               "read token file %s: No such file or directory",
               P("config"), P("missing-token"));
      KT_EQ_STR(err, want);
    }
    KT_NO_SECRET(err);
  }

  /* A namespace must be a DNS label; names must be unique in a file. */
  writef("config", "current-context: x\n"
                   "clusters:\n- name: c\n  cluster: {server: https://h}\n"
                   "contexts:\n- name: x\n"
                   "  context: {cluster: c, namespace: Team_A}\n");
  kl_kc_config_t *cfg;
  char want[512];
  KT_EQ_INT(load1("config", NULL, &cfg), KL_EINVAL);
  snprintf(want, sizeof want,
           "kubeconfig %s: line 6: context \"x\": "
           "namespace \"Team_A\" is not a valid DNS label",
           P("config"));
  KT_EQ_STR(err, want);
  writef("config", "clusters:\n"
                   "- name: c\n  cluster: {server: https://h}\n"
                   "- name: c\n  cluster: {server: https://i}\n");
  KT_EQ_INT(load1("config", "x", &cfg), KL_EPARSE);
  snprintf(want, sizeof want,
           "kubeconfig %s: line 4: duplicate cluster "
           "name \"c\"",
           P("config"));
  KT_EQ_STR(err, want);
  tmp_remove();
}

/* --- YAML errors and secrets --------------------------------------------- */

static void test_yaml_errors(void) {
  tmp_make();
  struct {
    const char *text;
    const char *why; /* after "kubeconfig PATH: " */
  } cases[] = {
      {"clusters:\n"
       "- name: a\n"
       "  cluster:\n"
       "    server: https://a\n"
       "   bad: indent\n",
       "line 5: did not find expected key"},
      {"users:\n- name: u\n  user:\n    token: \"SECRET-unterminated\n",
       "line 5: found unexpected end of stream"},
      {"current-context: [a, b]\n",
       "line 1: current-context: expected a string"},
      {"- just\n- a list\n", "line 1: expected a mapping at the top level"},
      {"clusters: {a: b}\n", "line 1: clusters: expected a list"},
      {"clusters:\n- oops\n",
       "line 2: clusters[0]: expected a mapping with name and cluster"},
      {"users:\n- name: u\n  user:\n    token: [SECRET]\n",
       "line 4: user \"u\": token: expected a string"},
      {"clusters:\n- name: c\n  cluster:\n    insecure-skip-tls-verify: "
       "\"true\"\n",
       "line 4: cluster \"c\": insecure-skip-tls-verify: expected true or "
       "false"},
      {"users:\n- name: u\n  user:\n    exec:\n      args: SECRET\n",
       "line 5: user \"u\": exec.args: expected a list of strings"},
      {"users:\n- name: u\n  user:\n    exec:\n      env: [SECRET]\n",
       "line 5: user \"u\": exec.env[0]: expected name and value"},
      {"clusters:\n- name: c\n  cluster: [1]\n",
       "line 3: cluster \"c\": cluster: expected a mapping"},
      {"a: \"\\xff\"\nb: \x01\n",
       "byte 13: control characters are not allowed"},
      {"a: b\n@c: d\n", "line 2: found character that cannot start any token"},
      {"clusters:\n- name: c\n  cluster:\n    extensions:\n"
       "    - name: client.authentication.k8s.io/exec\n"
       "      extension: &loop [*loop]\n",
       "line 6: cluster \"c\": extension client.authentication.k8s.io/exec: "
       "nested more than 64 deep"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    writef("config", "%s", cases[i].text);
    kl_kc_config_t *cfg;
    KT_EQ_INT(load1("config", "x", &cfg), KL_EPARSE);
    char want[512];
    snprintf(want, sizeof want, "kubeconfig %s: %s", P("config"), cases[i].why);
    KT_EQ_STR(err, want);
    KT_NO_SECRET(err);
  }
  tmp_remove();
}

static void test_secrets_never_in_errors(void) {
  tmp_make();
  /* Every way a secret sits next to a mistake. */
  const char *texts[] = {
      "users:\n- name: u\n  user:\n    token: SECRET-1\n    client-key-data: "
      "SECRET-2\n",
      "users:\n- name: u\n  user: {password: SECRET, token: SECRET: x}\n",
      "users:\n- name: u\n  user:\n    token: SECRET\n  - x\n",
      "users:\n- name: u\n  user:\n    exec:\n      env:\n      - name: K\n"
      "        value: [SECRET]\n",
      "current-context: x\n"
      "clusters:\n- name: c\n  cluster: {server: \"https://SECRET@h\"}\n"
      "users:\n- name: u\n  user: {token: SECRET, password: SECRET}\n"
      "contexts:\n- name: x\n  context: {cluster: c, user: u}\n",
      "\tSECRET: x\n",
  };
  for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
    writef("config", "%s", texts[i]);
    kl_kc_config_t *cfg;
    KT_TRUE(load1("config", NULL, &cfg) != KL_OK);
    KT_TRUE(err[0] != '\0');
    KT_NO_SECRET(err);
  }
  tmp_remove();
}

/* --- tokens -------------------------------------------------------------- */

static void test_token_file_rotation(void) {
  tmp_make();
  kt_now = 1000;
  writef("tok", "  first\n");
  writef("config", "current-context: x\n"
                   "clusters:\n- name: c\n  cluster: {server: https://h}\n"
                   "users:\n- name: u\n  user: {tokenFile: tok}\n"
                   "contexts:\n- name: x\n  context: {cluster: c, user: u}\n");
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  KT_EQ_STR(cfg->token, "first");
  KT_EQ_STR(cfg->token_file, P("tok"));
  kl_kc_creds_t *c = kl_kc_creds_new(cfg, &fake_creds);
  kl_kc_config_free(cfg);

  const char *tok;
  kl_kc_cred_t cred;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "first");
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_OK);
  KT_EQ_DBL(cred.obtained, 1000, 0);
  writef("tok", "second");
  kt_now += 49.9;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "first");
  kt_now += 0.1; /* 50 s: client-go's minute less its leeway */
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "second");

  /* A failed re-read keeps the old token and says why, without it. */
  unlink(P("tok"));
  kt_now += 60;
  err[0] = '\0';
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_EIO);
  KT_EQ_STR(tok, "second");
  char want[512];
  snprintf(want, sizeof want,
           "cannot read token file %s: No such file or "
           "directory; keeping the previous token",
           P("tok"));
  KT_EQ_STR(err, want);
  writef("tok", "\n");
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_EIO);
  KT_EQ_STR(tok, "second");
  snprintf(want, sizeof want,
           "token file %s is empty; keeping the previous "
           "token",
           P("tok"));
  KT_EQ_STR(err, want);
  /* ...and tries again at once on the next call. */
  writef("tok", "third\n");
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "third");

  /* A 401: a token read at or before the request's start is re-read. */
  writef("tok", "fourth");
  kl_kc_invalidate(c, kt_now - 1); /* request started before the read */
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "third");
  kl_kc_invalidate(c, kt_now);
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "fourth");
  kl_kc_creds_free(c);

  /* A configurable period. */
  kl_kc_creds_opts_t o = fake_creds;
  o.token_max_age = 5;
  writef("config", "current-context: x\n"
                   "clusters:\n- name: c\n  cluster: {server: https://h}\n"
                   "users:\n- name: u\n  user: {tokenFile: tok}\n"
                   "contexts:\n- name: x\n  context: {cluster: c, user: u}\n");
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  c = kl_kc_creds_new(cfg, &o);
  kl_kc_config_free(cfg);
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "fourth");
  writef("tok", "fifth");
  kt_now += 5;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "fifth");
  kl_kc_creds_free(c);

  /* Both token and tokenFile: the file wins while it can be read, the
   * token is the fallback (client-go's bearer round tripper). */
  writef("config", "current-context: x\n"
                   "clusters:\n- name: c\n  cluster: {server: https://h}\n"
                   "users:\n- name: u\n  user: {token: lit, tokenFile: gone}\n"
                   "contexts:\n- name: x\n  context: {cluster: c, user: u}\n");
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  KT_EQ_STR(cfg->token, "lit");
  c = kl_kc_creds_new(cfg, &fake_creds);
  kl_kc_config_free(cfg);
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_EIO);
  KT_EQ_STR(tok, "lit");
  writef("gone", "from-file");
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "from-file");
  kl_kc_creds_free(c);

  /* A static token never changes. */
  writef("config", "current-context: x\n"
                   "clusters:\n- name: c\n  cluster: {server: https://h}\n"
                   "users:\n- name: u\n  user: {token: static}\n"
                   "contexts:\n- name: x\n  context: {cluster: c, user: u}\n");
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  c = kl_kc_creds_new(cfg, &fake_creds);
  kl_kc_config_free(cfg);
  kt_now += 1e6;
  kl_kc_invalidate(c, kt_now);
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "static");
  kl_kc_creds_free(c);
  tmp_remove();
}

/* --- in-cluster (T-42) --------------------------------------------------- */

static void in_cluster_env(const char *host, const char *port) {
  env_clear();
  env_set("KUBERNETES_SERVICE_HOST", host);
  env_set("KUBERNETES_SERVICE_PORT", port);
}

static void test_in_cluster(void) {
  tmp_make();
  kt_now = 1000;
  writef("sa/token", "sa-token-1\n");
  writef("sa/ca.crt", CA_PEM);
  writef("sa/namespace", "  team-a \n");
  kl_kc_opts_t o = opts_with(NULL, NULL);
  kl_kc_config_t *cfg;

  in_cluster_env("fd00::1", "443");
  KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_INT(cfg->source, KL_KC_SOURCE_IN_CLUSTER);
  KT_EQ_STR(cfg->origin, "in-cluster");
  KT_EQ_STR(cfg->server, "https://[fd00::1]:443");
  KT_EQ_STR(cfg->host, "fd00::1");
  KT_EQ_INT(cfg->port, 443);
  KT_EQ_STR(cfg->token, "sa-token-1");
  KT_EQ_STR(cfg->token_file, P("sa/token"));
  KT_EQ_STR(cfg->ca.path, P("sa/ca.crt"));
  KT_TRUE(!cfg->insecure);
  KT_EQ_STR(cfg->namespace, "team-a");
  KT_TRUE(cfg->context == NULL && cfg->user == NULL);

  /* The rotated token is used by requests made 60 s later. */
  kl_kc_creds_t *c = kl_kc_creds_new(cfg, &fake_creds);
  kl_kc_config_free(cfg);
  const char *tok;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "sa-token-1");
  writef("sa/token", "sa-token-2\n");
  kt_now += 60;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "sa-token-2");
  kl_kc_creds_free(c);

  in_cluster_env("10.96.0.1", "6443");
  env_set("POD_NAMESPACE", "from-env");
  KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_STR(cfg->server, "https://10.96.0.1:6443");
  KT_EQ_STR(cfg->namespace, "from-env");
  kl_kc_config_free(cfg);

  env_set("POD_NAMESPACE", "");
  writef("sa/namespace", " \n");
  KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_STR(cfg->namespace, "default");
  kl_kc_config_free(cfg);
  unlink(P("sa/namespace"));
  KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_STR(cfg->namespace, "default");
  kl_kc_config_free(cfg);

  /* Either variable empty or unset: not in a cluster, not an error. */
  const char *cases[][2] = {
      {"", "443"}, {"10.0.0.1", ""}, {NULL, "443"}, {"10.0.0.1", NULL}};
  for (size_t i = 0; i < 4; i++) {
    env_clear();
    if (cases[i][0]) env_set("KUBERNETES_SERVICE_HOST", cases[i][0]);
    if (cases[i][1]) env_set("KUBERNETES_SERVICE_PORT", cases[i][1]);
    KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err),
              KL_KC_NOT_IN_CLUSTER);
    KT_TRUE(cfg == NULL);
    KT_EQ_STR(err, "in-cluster: KUBERNETES_SERVICE_HOST or "
                   "KUBERNETES_SERVICE_PORT is not set");
  }

  in_cluster_env("10.0.0.1", "https");
  KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err), KL_EINVAL);
  KT_EQ_STR(err, "in-cluster: KUBERNETES_SERVICE_PORT is not a port number");

  /* The token file must be readable at start-up. */
  in_cluster_env("10.0.0.1", "443");
  unlink(P("sa/token"));
  KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err), KL_EIO);
  char want[512];
  snprintf(want, sizeof want,
           "in-cluster: cannot read token file %s: No "
           "such file or directory",
           P("sa/token"));
  KT_EQ_STR(err, want);
  writef("sa/token", " \n");
  KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err), KL_EPARSE);
  snprintf(want, sizeof want, "in-cluster: token file %s is empty",
           P("sa/token"));
  KT_EQ_STR(err, want);

  /* A missing ca.crt is only a warning (client-go logs it). */
  writef("sa/token", "t");
  unlink(P("sa/ca.crt"));
  KT_EQ_INT(kl_kc_in_cluster(&o, &cfg, err, sizeof err), KL_OK);
  KT_TRUE(cfg->ca.path == NULL && cfg->ca.data == NULL);
  kl_kc_config_free(cfg);
  tmp_remove();
}

/* --- precedence ---------------------------------------------------------- */

static void write_simple(const char *rel, const char *server) {
  writef(rel,
         "current-context: x\n"
         "clusters:\n- name: c\n  cluster: {server: \"%s\"}\n"
         "contexts:\n- name: x\n  context: {cluster: c}\n",
         server);
}

static void test_precedence(void) {
  tmp_make();
  write_simple("flag.yaml", "https://flag");
  write_simple("env.yaml", "https://env");
  write_simple("home/.kube/config", "https://home");
  writef("sa/token", "t");
  writef("sa/ca.crt", CA_PEM);
  env_clear();
  env_set("KUBECONFIG", P("env.yaml"));
  env_set("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  env_set("KUBERNETES_SERVICE_PORT", "443");
  env_set("HOME", P("home"));
  kl_kc_opts_t o = opts_with(P("flag.yaml"), NULL);
  kl_kc_config_t *cfg;

  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_INT(cfg->source, KL_KC_SOURCE_FLAG);
  KT_EQ_STR(cfg->server, "https://flag:443");
  kl_kc_config_free(cfg);

  o.kubeconfig = "";
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_INT(cfg->source, KL_KC_SOURCE_ENV);
  KT_EQ_STR(cfg->server, "https://env:443");
  kl_kc_config_free(cfg);

  env_set("KUBECONFIG", "");
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_INT(cfg->source, KL_KC_SOURCE_IN_CLUSTER);
  KT_EQ_STR(cfg->server, "https://10.0.0.1:443");
  kl_kc_config_free(cfg);

  env_unset("KUBERNETES_SERVICE_HOST");
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_INT(cfg->source, KL_KC_SOURCE_HOME);
  KT_EQ_STR(cfg->server, "https://home:443");
  char want[512];
  snprintf(want, sizeof want, "kubeconfig %s", P("home/.kube/config"));
  KT_EQ_STR(cfg->origin, want);
  kl_kc_config_free(cfg);

  /* --context applies to whichever file is used. */
  o.context = "nope";
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_EINVAL);
  snprintf(want, sizeof want, "kubeconfig %s: context \"nope\" not found",
           P("home/.kube/config"));
  KT_EQ_STR(err, want);
  o.context = NULL;

  /* In a cluster but without its token: the home file still works (as in
   * controller-runtime, with a warning); without one, the in-cluster error
   * is the answer. */
  env_set("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  unlink(P("sa/token"));
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_OK);
  KT_EQ_INT(cfg->source, KL_KC_SOURCE_HOME);
  kl_kc_config_free(cfg);
  unlink(P("home/.kube/config"));
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_EIO);
  snprintf(want, sizeof want,
           "in-cluster: cannot read token file %s: No "
           "such file or directory",
           P("sa/token"));
  KT_EQ_STR(err, want);

  /* Nothing anywhere. */
  env_unset("KUBERNETES_SERVICE_HOST");
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_ENOENT);
  KT_TRUE(cfg == NULL);
  snprintf(want, sizeof want,
           "no configuration: no --kubeconfig, KUBECONFIG "
           "is not set, not in a cluster (KUBERNETES_SERVICE_HOST is not set), "
           "and %s does not exist",
           P("home/.kube/config"));
  KT_EQ_STR(err, want);
  env_unset("HOME");
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_ENOENT);
  KT_TRUE(strstr(err, "and HOME is not set") != NULL);
  /* A broken home file is reported as such. */
  env_set("HOME", P("home"));
  writef("home/.kube/config", "clusters: [\n");
  KT_EQ_INT(kl_kc_load(&o, &cfg, err, sizeof err), KL_EPARSE);
  KT_TRUE(strstr(err, P("home/.kube/config")) != NULL);
  tmp_remove();
}

/* --- exec plugins -------------------------------------------------------- */

/* A plugin that counts its runs, saves KUBERNETES_EXEC_INFO, and prints a
 * token made of its argument, its env and the run number, valid 1 h. */
static const char counting_plugin[] =
    "n=$(cat \"$DIR/count\" 2>/dev/null || echo 0)\n"
    "n=$((n + 1))\n"
    "echo $n > \"$DIR/count\"\n"
    "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$DIR/info\"\n"
    "cat <<EOF\n"
    "{\"apiVersion\": \"client.authentication.k8s.io/v1\",\n"
    " \"kind\": \"ExecCredential\",\n"
    " \"status\": {\"token\": \"tok-$1-$GREETING-$n\",\n"
    "            \"expirationTimestamp\": \"2026-01-01T01:00:00Z\"}}\n"
    "EOF\n";

static void write_exec_config(const char *user) {
  writef("config",
         "current-context: x\n"
         "clusters:\n"
         "- name: c\n"
         "  cluster:\n"
         "    server: https://api.example:6443\n"
         "    certificate-authority-data: %s\n"
         "    tls-server-name: api\n"
         "    extensions:\n"
         "    - name: other\n"
         "      extension: {a: 1}\n"
         "    - name: client.authentication.k8s.io/exec\n"
         "      extension:\n"
         "        audience: \"x\"\n"
         "        n: 3\n"
         "        ratio: -0.5e2\n"
         "        flag: true\n"
         "        none: ~\n"
         "        zip: \"01234\"\n"
         "        list: [a, 'b', 010]\n"
         "users:\n"
         "- name: u\n"
         "  user:\n"
         "%s"
         "contexts:\n"
         "- name: x\n"
         "  context: {cluster: c, user: u}\n",
         CA_B64, user);
}

static kl_kc_creds_t *exec_creds(const char *user) {
  write_exec_config(user);
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  KT_EQ_STR(err, "");
  if (!cfg) return NULL;
  kl_kc_creds_t *c = kl_kc_creds_new(cfg, &fake_creds);
  kl_kc_config_free(cfg);
  return c;
}

static int runs(void) {
  const char *s = read_all(P("count"));
  return s ? atoi(s) : 0;
}

static void test_exec_token_cached_until_expiry(void) {
  tmp_make();
  kt_now = T0;
  write_script("bin/plugin.sh", counting_plugin);
  char user[1024];
  snprintf(user, sizeof user,
           "    exec:\n"
           "      apiVersion: client.authentication.k8s.io/v1\n"
           "      command: ./bin/plugin.sh\n"
           "      args: [a1]\n"
           "      env:\n"
           "      - {name: DIR, value: \"%s\"}\n"
           "      - {name: GREETING, value: hi}\n"
           "      interactiveMode: Never\n"
           "      provideClusterInfo: true\n"
           "      installHint: get it\n",
           tmp);
  write_exec_config(user);
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  KT_EQ_STR(cfg->exec->command, P("bin/plugin.sh"));
  KT_EQ_INT(cfg->exec->nargs, 1);
  KT_EQ_INT(cfg->exec->nenv, 2);
  KT_EQ_INT(cfg->exec->interactive_mode, KL_KC_INTERACTIVE_NEVER);
  KT_TRUE(cfg->exec->provide_cluster_info);
  KT_EQ_STR(cfg->exec->install_hint, "get it");
  KT_EQ_STR(cfg->exec->cluster_config,
            "{\"audience\":\"x\",\"n\":3,\"ratio\":-0.5e2,\"flag\":true,"
            "\"none\":null,\"zip\":\"01234\",\"list\":[\"a\",\"b\",\"010\"]}");
  kl_kc_creds_t *c = kl_kc_creds_new(cfg, &fake_creds);
  kl_kc_config_free(cfg);
  KT_TRUE(kl_kc_creds_uses_exec(c));

  kl_kc_cred_t cred;
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_EAGAIN);
  KT_EQ_INT(runs(), 0);
  const char *tok;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "tok-a1-hi-1");
  KT_EQ_INT(runs(), 1);
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_OK);
  KT_EQ_DBL(cred.expiry, T0 + 3600, 0);
  KT_EQ_DBL(cred.obtained, T0, 0);
  KT_TRUE(cred.cert == NULL && cred.key == NULL);

  /* What the plugin was told. */
  char want[1024];
  snprintf(want, sizeof want,
           "{\"kind\":\"ExecCredential\",\"apiVersion\":"
           "\"client.authentication.k8s.io/v1\",\"spec\":{\"cluster\":{"
           "\"server\":\"https://api.example:6443\",\"tls-server-name\":"
           "\"api\",\"certificate-authority-data\":\"%s\",\"config\":{"
           "\"audience\":\"x\",\"n\":3,\"ratio\":-0.5e2,\"flag\":true,"
           "\"none\":null,\"zip\":\"01234\",\"list\":[\"a\",\"b\",\"010\"]}},"
           "\"interactive\":false}}",
           CA_B64);
  KT_EQ_STR(read_all(P("info")), want);

  /* Cached while the expiry is ahead on the wall clock. */
  kt_now = T0 + 3599;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "tok-a1-hi-1");
  KT_EQ_INT(runs(), 1);

  /* A 401 drops the credential the request used, and the plugin runs. */
  kl_kc_invalidate(c, T0 - 1); /* an older request: keep */
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "tok-a1-hi-1");
  KT_EQ_INT(runs(), 1);
  kl_kc_invalidate(c, kt_now);
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_EAGAIN);
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "tok-a1-hi-2");
  KT_EQ_INT(runs(), 2);
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_OK);
  KT_EQ_DBL(cred.obtained, T0 + 3599, 0);

  /* At the expiry the plugin runs again; this run hands back a credential
   * that has already expired, which is an error. */
  kt_now = T0 + 3600;
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_EAGAIN);
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_EIO);
  KT_TRUE(tok == NULL);
  snprintf(want, sizeof want,
           "exec plugin %s: returned an expired "
           "credential",
           P("bin/plugin.sh"));
  KT_EQ_STR(err, want);
  KT_EQ_INT(runs(), 3);
  kl_kc_creds_free(c);
  tmp_remove();
}

static void test_exec_v1beta1_certificate(void) {
  tmp_make();
  kt_now = T0;
  write_script(
      "plugin.sh",
      "test -z \"$HOME\" || exit 9 # the base env, not ours\n"
      "cat <<'EOF'\n"
      "{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\","
      "\"kind\":\"ExecCredential\",\"status\":{"
      "\"clientCertificateData\":\"-----BEGIN CERTIFICATE-----\\nC\\n\","
      "\"clientKeyData\":\"-----BEGIN PRIVATE KEY-----\\nK\\n\","
      "\"token\":null}}\n"
      "EOF\n");
  kl_kc_creds_t *c =
      exec_creds("    exec:\n"
                 "      apiVersion: client.authentication.k8s.io/v1beta1\n"
                 "      command: ./plugin.sh\n");
  kl_kc_cred_t cred;
  KT_EQ_INT(kl_kc_plugin_run(c, err, sizeof err), KL_OK);
  KT_EQ_STR(err, "");
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_OK);
  KT_TRUE(cred.token == NULL);
  KT_EQ_MEM(cred.cert, cred.cert_len, "-----BEGIN CERTIFICATE-----\nC\n");
  KT_EQ_MEM(cred.key, cred.key_len, "-----BEGIN PRIVATE KEY-----\nK\n");
  KT_EQ_DBL(cred.expiry, 0, 0); /* no expiry: cached until a 401 */
  kt_now += 1e7;
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_OK);
  const char *tok = "x";
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_TRUE(tok == NULL);
  kl_kc_creds_free(c);

  /* A token from the kubeconfig wins over the plugin, as in client-go. */
  write_exec_config("    token: static\n"
                    "    exec:\n"
                    "      apiVersion: client.authentication.k8s.io/v1beta1\n"
                    "      command: ./plugin.sh\n");
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  c = kl_kc_creds_new(cfg, &fake_creds);
  kl_kc_config_free(cfg);
  KT_TRUE(!kl_kc_creds_uses_exec(c));
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "static");
  kl_kc_plugin_t *p;
  KT_EQ_INT(kl_kc_plugin_start(c, &p, err, sizeof err), KL_EINVAL);
  KT_EQ_STR(err, "no exec plugin is configured");
  kl_kc_creds_free(c);
  tmp_remove();
}

static void test_exec_failures(void) {
  tmp_make();
  kt_now = T0;
  const char *v1 = "      apiVersion: client.authentication.k8s.io/v1\n"
                   "      interactiveMode: IfAvailable\n";
  struct {
    const char *script; /* NULL: no such command */
    int rc;
    const char *why; /* after "exec plugin CMD: " */
  } cases[] = {
      {"echo 'SECRET-partial' >&1\necho 'boom: bad credentials' >&2\n"
       "echo second line >&2\nexit 3\n",
       KL_EIO, "exited with status 3: boom: bad credentials"},
      {"exit 1\n", KL_EIO, "exited with status 1"},
      {"kill -9 $$\n", KL_EIO, "killed by signal 9"},
      {"", KL_EPARSE, "wrote nothing to stdout"},
      {"echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",'\n"
       "echo '\"status\":{\"token\":\"SECRET-TOKEN\"'\n",
       KL_EPARSE, "stdout is not a JSON object (malformed at byte 82)"},
      {"echo 'SECRET-TOKEN'\n", KL_EPARSE,
       "stdout is not a JSON object (malformed at byte 0)"},
      {"echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\","
       "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"SECRET\"}}'\n",
       KL_EPARSE,
       "the ExecCredential's apiVersion is not "
       "client.authentication.k8s.io/v1 as configured"},
      {"echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
       "\"kind\":\"Secret\",\"status\":{\"token\":\"SECRET\"}}'\n",
       KL_EPARSE, "stdout is not an ExecCredential"},
      {"echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
       "\"kind\":\"ExecCredential\"}'\n",
       KL_EPARSE, "the ExecCredential has no status"},
      {"echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
       "\"kind\":\"ExecCredential\",\"status\":{}}'\n",
       KL_EPARSE, "returned neither a token nor a client certificate and key"},
      {"echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
       "\"kind\":\"ExecCredential\",\"status\":{\"clientKeyData\":\"SECRET\"}}'"
       "\n",
       KL_EPARSE, "returned a client key without a certificate"},
      {"echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
       "\"kind\":\"ExecCredential\",\"status\":{\"token\":7}}'\n",
       KL_EPARSE, "a status field is not a string"},
      {"cat <<'EOF'\n{\"apiVersion\":\"client.authentication.k8s.io/v1\","
       "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"SECRET\\r\\nX: "
       "y\"}}\nEOF\n",
       KL_EPARSE, "the token holds control characters"},
      {"echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
       "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"SECRET\","
       "\"expirationTimestamp\":\"SECRET-tomorrow\"}}'\n",
       KL_EPARSE, "expirationTimestamp is not an RFC 3339 time"},
      {NULL, KL_ENOENT, "executable not found\n\nbrew install kl-plugin"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char user[1024];
    const char *cmd = cases[i].script ? P("plugin.sh") : "kl-no-such-plugin";
    if (cases[i].script) write_script("plugin.sh", cases[i].script);
    snprintf(user, sizeof user,
             "    exec:\n%s"
             "      command: %s\n"
             "      args: [--secret, SECRET-ARG]\n"
             "      env: [{name: K, value: SECRET-ENV}]\n"
             "      installHint: brew install kl-plugin\n",
             v1, cmd);
    kl_kc_creds_t *c = exec_creds(user);
    const char *tok = "x";
    err[0] = '\0';
    KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), cases[i].rc);
    KT_TRUE(tok == NULL);
    char want[512];
    snprintf(want, sizeof want, "exec plugin %s: %s", cmd, cases[i].why);
    KT_EQ_STR(err, want);
    KT_NO_SECRET(err);
    kl_kc_cred_t cred;
    KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_EAGAIN);
    kl_kc_creds_free(c);
  }

  /* A failure keeps the credential from the last good run. */
  write_script("plugin.sh", counting_plugin);
  char user[1024];
  snprintf(user, sizeof user,
           "    exec:\n%s"
           "      command: ./plugin.sh\n"
           "      env: [{name: DIR, value: \"%s\"}]\n",
           v1, tmp);
  kl_kc_creds_t *c = exec_creds(user);
  const char *tok;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "tok---1");
  write_script("plugin.sh", "exit 2\n");
  KT_EQ_INT(kl_kc_plugin_run(c, err, sizeof err), KL_EIO);
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "tok---1");
  kl_kc_creds_free(c);

  /* interactiveMode Always cannot be satisfied by a controller. */
  c = exec_creds("    exec:\n"
                 "      apiVersion: client.authentication.k8s.io/v1\n"
                 "      interactiveMode: Always\n"
                 "      command: ./plugin.sh\n");
  kl_kc_plugin_t *p;
  KT_EQ_INT(kl_kc_plugin_start(c, &p, err, sizeof err), KL_EINVAL);
  KT_TRUE(p == NULL);
  char want[512];
  snprintf(want, sizeof want,
           "exec plugin %s: interactiveMode is Always, but "
           "a controller has no terminal to give it",
           P("plugin.sh"));
  KT_EQ_STR(err, want);
  kl_kc_creds_free(c);
  tmp_remove();
}

static void test_exec_nonblocking_and_timeout(void) {
  tmp_make();
  kt_now = T0;
  write_script("plugin.sh",
               "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",'\n"
               "printf '\"kind\":\"ExecCredential\",'\n"
               "printf '\"status\":{\"token\":\"nb-%s\"}}' \"$X\"\n");
  kl_kc_creds_opts_t o = fake_creds;
  o.exec_timeout = 0.3;
  write_exec_config(
      "    exec:\n"
      "      apiVersion: client.authentication.k8s.io/v1\n"
      "      interactiveMode: Never\n"
      "      command: ./plugin.sh\n"
      "      env: [{name: X, value: one}, {name: X, value: two}]\n");
  kl_kc_config_t *cfg;
  KT_EQ_INT(load1("config", NULL, &cfg), KL_OK);
  kl_kc_creds_t *c = kl_kc_creds_new(cfg, &o);
  kl_kc_config_free(cfg);

  /* The loop's way: watch the two fds, poll, finish. */
  kl_kc_plugin_t *p;
  KT_EQ_INT(kl_kc_plugin_start(c, &p, err, sizeof err), KL_OK);
  KT_TRUE(kl_kc_plugin_pid(p) > 0);
  KT_EQ_DBL(kl_kc_plugin_deadline(p), T0 + 0.3, 1e-9);
  KT_TRUE(kl_kc_plugin_fd(p, 0) >= 0 && kl_kc_plugin_fd(p, 1) >= 0);
  KT_EQ_INT(kl_kc_plugin_fd(p, 2), -1);
  int spins = 0;
  while (kl_kc_plugin_poll(p) == KL_EAGAIN && spins++ < 2000) {
    struct pollfd pf[2];
    nfds_t n = 0;
    for (int i = 0; i < 2; i++)
      if (kl_kc_plugin_fd(p, i) >= 0)
        pf[n++] = (struct pollfd){kl_kc_plugin_fd(p, i), POLLIN, 0};
    poll(pf, n, n ? 1000 : 2);
  }
  KT_EQ_INT(kl_kc_plugin_fd(p, 0), -1);
  KT_EQ_INT(kl_kc_plugin_finish(c, p, err, sizeof err), KL_OK);
  const char *tok;
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_OK);
  KT_EQ_STR(tok, "nb-two"); /* the last of a repeated env name wins */

  /* Abandoning a run kills it and caches nothing. */
  kl_kc_invalidate(c, kt_now);
  write_script("plugin.sh", "exec sleep 5\n");
  KT_EQ_INT(kl_kc_plugin_start(c, &p, err, sizeof err), KL_OK);
  kl_kc_plugin_free(p);
  kl_kc_cred_t cred;
  KT_EQ_INT(kl_kc_creds_get(c, &cred, err, sizeof err), KL_EAGAIN);

  /* kl_kc_token_nowait: KL_EAGAIN while the plugin runs, then its token;
   * past the deadline (the creds' clock) the run is killed. */
  char wnb[512];
  kl_kc_invalidate(c, kt_now);
  write_script(
      "plugin.sh",
      "sleep 0.2\n"
      "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",'\n"
      "printf "
      "'\"kind\":\"ExecCredential\",\"status\":{\"token\":\"later\"}}'\n");
  KT_EQ_INT(kl_kc_token_nowait(c, &tok, err, sizeof err), KL_EAGAIN);
  KT_TRUE(tok == NULL);
  snprintf(wnb, sizeof wnb, "exec plugin %s: running", P("plugin.sh"));
  KT_EQ_STR(err, wnb);
  int rc;
  spins = 0;
  while ((rc = kl_kc_token_nowait(c, &tok, err, sizeof err)) == KL_EAGAIN &&
         spins++ < 2000)
    poll(NULL, 0, 5);
  KT_EQ_INT(rc, KL_OK);
  KT_EQ_STR(tok, "later");
  KT_EQ_INT(kl_kc_token_nowait(c, &tok, err, sizeof err), KL_OK); /* cached */
  KT_EQ_STR(tok, "later");
  kl_kc_invalidate(c, kt_now);
  write_script("plugin.sh", "exec sleep 5\n");
  KT_EQ_INT(kl_kc_token_nowait(c, &tok, err, sizeof err), KL_EAGAIN);
  kt_now += 0.5;
  KT_EQ_INT(kl_kc_token_nowait(c, &tok, err, sizeof err), KL_EIO);
  KT_TRUE(tok == NULL);
  KT_TRUE(strstr(err, "timed out") != NULL);
  /* A run left in progress is the creds': freed with them. */
  KT_EQ_INT(kl_kc_token_nowait(c, &tok, err, sizeof err), KL_EAGAIN);

  /* A plugin that outlives the timeout is killed with what it started. */
  write_script("plugin.sh", "sleep 5 &\nsleep 5\n");
  double t0 = kl_clock_monotonic(NULL);
  KT_EQ_INT(kl_kc_token(c, &tok, err, sizeof err), KL_EIO);
  double took = kl_clock_monotonic(NULL) - t0;
  KT_TRUE(took >= 0.29 && took < 3);
  char want[512];
  snprintf(want, sizeof want, "exec plugin %s: timed out after 0.3 s",
           P("plugin.sh"));
  KT_EQ_STR(err, want);
  kl_kc_creds_free(c);
  tmp_remove();
}

int main(void) {
  KT_RUN(test_base64);
  KT_RUN(test_rfc3339);
  KT_RUN(test_single_file);
  KT_RUN(test_two_contexts_and_override);
  KT_RUN(test_kubeconfig_merge);
  KT_RUN(test_missing_current_context);
  KT_RUN(test_unknown_context_cluster_user);
  KT_RUN(test_data_fields);
  KT_RUN(test_insecure_and_server_rules);
  KT_RUN(test_user_checks);
  KT_RUN(test_yaml_errors);
  KT_RUN(test_secrets_never_in_errors);
  KT_RUN(test_token_file_rotation);
  KT_RUN(test_in_cluster);
  KT_RUN(test_precedence);
  KT_RUN(test_exec_token_cached_until_expiry);
  KT_RUN(test_exec_v1beta1_certificate);
  KT_RUN(test_exec_failures);
  KT_RUN(test_exec_nonblocking_and_timeout);
  return KT_DONE();
}
