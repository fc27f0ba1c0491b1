/* kubeconfig.h — where and how to talk to the API server.
 *
 * kl_kc_load() resolves the configuration as controller-runtime does: an
 * explicit --kubeconfig file, else the KUBECONFIG list (merged as kubectl
 * merges it), else the in-cluster service account, else ~/.kube/config; a
 * --context picks another context than current-context. The result, a
 * kl_kc_config_t, is plain data for the REST client: the normalized server
 * URL, TLS material, the user's credentials and the namespace.
 *
 * Credentials that change while the process runs live in a kl_kc_creds_t made
 * from a config: a token file re-read when its token is old (rotated
 * service-account tokens), and exec credential plugins
 * (client.authentication.k8s.io/v1 and v1beta1) run again when their
 * credential expires or after a 401. Running a plugin can be split for the
 * event loop (start, then watch two fds, then finish) or done in one blocking
 * call bounded by a timeout.
 *
 * Every input can be injected for tests (environment lookup, service-account
 * directory, clocks, the plugins' base environment). Tokens, keys, passwords
 * and certificates never appear in an error message or a log line.
 * Pure C: libyaml for the files, no Lua, no libev, no curl. */
#ifndef KL_KUBECONFIG_H
#define KL_KUBECONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "clock.h"
#include "error.h"

/* Where the service-account token, ca.crt and namespace files live. */
#define KL_KC_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
/* A token read from a file is re-read once it is this old (seconds):
 * client-go's one-minute period less its ten-second leeway. */
#define KL_KC_TOKEN_MAX_AGE 50.0
/* How long an exec credential plugin may run (seconds). */
#define KL_KC_EXEC_TIMEOUT 30.0
/* kl_kc_in_cluster()'s "not running in a cluster" result (client-go's
 * ErrNotInCluster): not an error, the caller tries the next source. */
#define KL_KC_NOT_IN_CLUSTER KL_ENOENT

/* Looks up an environment variable; NULL when unset. */
typedef const char *(*kl_kc_getenv_fn)(void *ud, const char *name);

typedef struct kl_kc_opts {
  const char *kubeconfig; /* --kubeconfig; NULL or "" when not given */
  const char *context;    /* --context; NULL or "" for current-context */
  kl_kc_getenv_fn getenv; /* NULL: the process environment */
  void *getenv_ud;
  const char *sa_dir; /* NULL: KL_KC_SA_DIR */
} kl_kc_opts_t;

typedef enum kl_kc_source {
  KL_KC_SOURCE_FLAG,       /* the --kubeconfig file */
  KL_KC_SOURCE_ENV,        /* the files in KUBECONFIG */
  KL_KC_SOURCE_IN_CLUSTER, /* the pod's service account */
  KL_KC_SOURCE_HOME,       /* $HOME/.kube/config */
} kl_kc_source_t;

/* A certificate or key: a file to read or PEM bytes (at most one is set). */
typedef struct kl_kc_pem {
  char *path; /* relative paths already resolved; NULL when unset */
  char *data; /* the decoded *-data bytes, NUL-terminated; NULL when unset */
  size_t len; /* bytes in data */
} kl_kc_pem_t;

typedef enum kl_kc_interactive {
  KL_KC_INTERACTIVE_NEVER,
  KL_KC_INTERACTIVE_IF_AVAILABLE,
  KL_KC_INTERACTIVE_ALWAYS,
} kl_kc_interactive_t;

typedef struct kl_kc_env_var {
  char *name, *value;
} kl_kc_env_var_t;

/* users[].user.exec */
typedef struct kl_kc_exec {
  char *command; /* a path with a '/' is resolved against its file's dir */
  char **args;
  size_t nargs;
  kl_kc_env_var_t *env; /* added to the plugin's environment */
  size_t nenv;
  char *api_version;  /* client.authentication.k8s.io/v1 or /v1beta1 */
  char *install_hint; /* NULL when unset */
  bool provide_cluster_info;
  kl_kc_interactive_t interactive_mode; /* v1beta1 defaults to IfAvailable */
  /* The cluster's "client.authentication.k8s.io/exec" extension as JSON
   * (spec.cluster.config of the ExecCredential), or NULL. */
  char *cluster_config;
} kl_kc_exec_t;

typedef struct kl_kc_extra {
  char *key;
  char **values;
  size_t nvalues;
} kl_kc_extra_t;

/* A resolved configuration. Strings are NUL-terminated and owned by the
 * struct; optional ones are NULL when unset. Fields marked secret must
 * never be logged. */
typedef struct kl_kc_config {
  kl_kc_source_t source;
  /* For messages: "kubeconfig /path" (the file that defines the context),
   * or "in-cluster". */
  char *origin;
  char *context, *cluster, *user; /* names; NULL in-cluster */

  /* The server, normalized: scheme "https" or "http", host without
   * brackets, port always set, path "" or a prefix without a trailing '/';
   * server is scheme://host:port+path with an IPv6 host in brackets. */
  char *server;
  char *scheme, *host, *path;
  int port;
  kl_kc_pem_t ca;
  bool insecure; /* insecure-skip-tls-verify; never set with a CA */
  char *tls_server_name;
  char *proxy_url; /* may hold a password: treat as secret */
  bool disable_compression;

  kl_kc_pem_t client_cert, client_key; /* client_key is secret */
  char *token;                         /* secret; read from token_file if
                                          only that was given */
  char *token_file;
  char *username, *password; /* password is secret */
  kl_kc_exec_t *exec;        /* used only when no other credential is set */
  char *impersonate, *impersonate_uid;
  char **impersonate_groups;
  size_t nimpersonate_groups;
  kl_kc_extra_t *impersonate_extra;
  size_t nimpersonate_extra;

  char *namespace; /* never NULL: the context's, or "default" */
} kl_kc_config_t;

/* Resolves the configuration in controller-runtime's order (see the file
 * comment). opts may be NULL (the process environment, no flags). On
 * success returns KL_OK and a new config in *out (free it with
 * kl_kc_config_free). Otherwise *out is NULL, err (errlen bytes) names what
 * was wrong and where, and the code is KL_ENOENT (no configuration found
 * anywhere, or a file named by --kubeconfig missing), KL_EPARSE (malformed
 * YAML or base64), KL_EINVAL (an inconsistent or incomplete configuration:
 * unknown context, cluster or user, no server, conflicting fields) or
 * KL_EIO (a file that exists could not be read). When the pod's
 * in-cluster configuration is broken but ~/.kube/config works, that file is
 * used and the in-cluster error logged as a warning (controller-runtime
 * does the same). Reads files, never runs a plugin, never calls back. */
int kl_kc_load(const kl_kc_opts_t *opts, kl_kc_config_t **out, char *err,
               size_t errlen);

/* The in-cluster configuration alone (client-go's InClusterConfig): server
 * from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the token file
 * (read now: a failure is an error), ca.crt (used if readable, else a
 * warning is logged and the system roots apply), and the namespace from
 * POD_NAMESPACE, the namespace file (trimmed), or "default". Returns KL_OK,
 * KL_KC_NOT_IN_CLUSTER when either variable is empty or unset (err says
 * so), or an error as kl_kc_load does. */
int kl_kc_in_cluster(const kl_kc_opts_t *opts, kl_kc_config_t **out, char *err,
                     size_t errlen);

/* Frees a config; NULL is a no-op. Secret fields are zeroed first. */
void kl_kc_config_free(kl_kc_config_t *cfg);

/* --- Credentials ---------------------------------------------------------
 * A kl_kc_creds_t produces the credential for each request from a config:
 *   - a static token, or username and password: always the same;
 *   - a token file: the token read at most token_max_age ago, re-read (and
 *     trimmed) when older; a failed re-read keeps the old token;
 *   - an exec plugin (when the config has no token, token file, basic auth
 *     or client certificate, as in client-go): the plugin's last
 *     ExecCredential until its expirationTimestamp (wall clock) passes or a
 *     401 invalidates it; then the plugin runs again.
 * Nothing here calls back. One thread; no locking. */

typedef struct kl_kc_creds kl_kc_creds_t;

typedef struct kl_kc_creds_opts {
  const kl_clock_t *clock; /* monotonic; NULL: kl_clock_system */
  const kl_clock_t *wall;  /* Unix seconds, for expirationTimestamp; NULL:
                              the system's real-time clock */
  double token_max_age;    /* 0: KL_KC_TOKEN_MAX_AGE */
  double exec_timeout;     /* 0: KL_KC_EXEC_TIMEOUT */
  /* The environment an exec plugin starts from ("NAME=value" strings, NULL
   * terminated; copied); NULL: the process's environment. */
  const char *const *base_env;
} kl_kc_creds_opts_t;

/* The credential to put on one request. Pointers are owned by the creds
 * object and stay valid until the next call on it (other than the
 * kl_kc_creds_uses_* queries). All of it is secret. */
typedef struct kl_kc_cred {
  const char *token;               /* bearer token, or NULL */
  const char *username, *password; /* basic auth, or NULL */
  /* A client certificate and key from an exec plugin (PEM), or NULL; a
   * client certificate from the kubeconfig is in the config instead. */
  const char *cert, *key;
  size_t cert_len, key_len;
  double obtained; /* clock time the credential was read or produced */
  double expiry;   /* Unix time it expires (exec plugins), 0 when never */
} kl_kc_cred_t;

/* Makes the credential state for cfg (which it copies what it needs from:
 * cfg may be freed afterwards). opts may be NULL. Never returns NULL. */
kl_kc_creds_t *kl_kc_creds_new(const kl_kc_config_t *cfg,
                               const kl_kc_creds_opts_t *opts);

/* Drops a reference (kl_kc_creds_new gives one); the last one frees the creds.
 * NULL is a no-op. A plugin started from it and still running must be freed
 * with kl_kc_plugin_free (before or after). */
void kl_kc_creds_free(kl_kc_creds_t *c);

/* Adds a reference, for a second owner (a reflector's credentials outlive
 * the Lua object they came from); returns c. */
kl_kc_creds_t *kl_kc_creds_ref(kl_kc_creds_t *c);

/* The creds' clock now: the request_start to give kl_kc_invalidate. */
double kl_kc_creds_now(const kl_kc_creds_t *c);

/* True when requests need a credential from an exec plugin. */
bool kl_kc_creds_uses_exec(const kl_kc_creds_t *c);

/* Fills *out with the current credential without blocking (a token file
 * is read synchronously: it is a small local file). Returns
 *   KL_OK      *out is ready (all NULL when the config has no credential);
 *   KL_EAGAIN  an exec plugin must run first: kl_kc_plugin_start/poll/
 *              finish, or kl_kc_plugin_run, then call again;
 *   KL_EIO     re-reading the token file failed: err says why, and *out
 *              still holds the last good token (NULL if there never was
 *              one), which the caller should use after logging err. */
int kl_kc_creds_get(kl_kc_creds_t *c, kl_kc_cred_t *out, char *err,
                    size_t errlen);

/* The bearer token for the next request, as kl_kc_creds_get but blocking:
 * when an exec plugin must run, runs it (kl_kc_plugin_run) first. Sets
 * *token (NULL when the credential has no token, e.g. basic auth or a
 * plugin that returned a certificate) and returns KL_OK; or KL_EIO with
 * *token set to the previous token when a token file re-read failed (use
 * it, log err); or the plugin's error (KL_EIO, KL_EPARSE, KL_ENOENT,
 * KL_EINVAL; also KL_EIO when it returned an already expired credential)
 * with *token NULL. */
int kl_kc_token(kl_kc_creds_t *c, const char **token, char *err, size_t errlen);

/* kl_kc_token for an event loop, never blocking: when an exec plugin must
 * run, starts it (one run per creds; the creds own it) and returns
 * KL_EAGAIN with "exec plugin CMD: running" in err; each later call polls
 * the run (reads its pipes, reaps it) and returns KL_EAGAIN until it has
 * ended, then the token as kl_kc_token would. A run past the exec timeout is
 * killed and fails. Call again soon after KL_EAGAIN (every 50 ms or so).
 * Sets *token only with KL_OK, and with KL_EIO after a failed token file
 * re-read (the last good token, as kl_kc_creds_get). */
int kl_kc_token_nowait(kl_kc_creds_t *c, const char **token, char *err,
                       size_t errlen);

/* After a 401 to a request that started at clock time request_start:
 * forgets the file token and the exec credential if they were obtained at
 * or before that time, so the next kl_kc_creds_get re-reads the file or
 * asks for the plugin to run. A credential obtained after the request
 * started (another request refreshed it) is kept. */
void kl_kc_invalidate(kl_kc_creds_t *c, double request_start);

/* --- Exec credential plugins ---------------------------------------------
 * A run: kl_kc_plugin_start spawns the command (its own process group,
 * stdin /dev/null, stdout and stderr on non-blocking pipes); the loop
 * watches kl_kc_plugin_fd(p, 0) and (p, 1) for reading and calls
 * kl_kc_plugin_poll when either is readable (and on a short timer once
 * both are closed, until the child is reaped); when poll returns KL_OK, or
 * when kl_kc_plugin_deadline passes, kl_kc_plugin_finish parses the output,
 * caches the credential in the creds and frees the run. Run at most one
 * plugin per creds at a time. */

typedef struct kl_kc_plugin kl_kc_plugin_t;

/* Starts the exec plugin of c. The plugin's environment is the creds' base
 * environment, then the config's exec env, then KUBERNETES_EXEC_INFO (an
 * ExecCredential with spec.interactive false, and spec.cluster when
 * provideClusterInfo is set). Returns KL_OK and the run in *out, or KL_EINVAL
 * (c has no exec plugin; interactiveMode Always, which a controller cannot
 * satisfy), KL_ENOENT (the command is not found: err ends with the install
 * hint), KL_EIO (spawn failed). */
int kl_kc_plugin_start(kl_kc_creds_t *c, kl_kc_plugin_t **out, char *err,
                       size_t errlen);

/* The read end of the plugin's stdout (which 0) or stderr (which 1), or -1
 * once it is closed. */
int kl_kc_plugin_fd(const kl_kc_plugin_t *p, int which);
pid_t kl_kc_plugin_pid(const kl_kc_plugin_t *p);
/* The clock time (the creds' clock) after which the run is to be
 * abandoned: its start plus the exec timeout. */
double kl_kc_plugin_deadline(const kl_kc_plugin_t *p);

/* Reads what the pipes hold without blocking and reaps the child if it has
 * exited. Returns KL_OK when both pipes are closed and the exit status is
 * known, KL_EAGAIN otherwise. Output beyond 1 MiB on stdout is dropped and
 * makes the run fail; stderr keeps its first 4 KiB. */
int kl_kc_plugin_poll(kl_kc_plugin_t *p);

/* Ends the run and frees p (always). If the plugin is still running it is
 * killed (its whole process group) and the run fails as timed out.
 * Otherwise a zero exit status and a valid ExecCredential of the configured
 * apiVersion (status.token, or clientCertificateData with clientKeyData,
 * optional expirationTimestamp in RFC 3339) become c's cached credential
 * and KL_OK is returned. Failures: KL_EIO ("exec plugin CMD: exited with
 * status 1: <first line of stderr>", killed, timed out) or KL_EPARSE (bad
 * output; the output is never quoted). c keeps its previous credential on
 * failure. */
int kl_kc_plugin_finish(kl_kc_creds_t *c, kl_kc_plugin_t *p, char *err,
                        size_t errlen);

/* Abandons a run: kills the plugin's process group if it is still running,
 * reaps it, closes the pipes and frees p. Caches nothing. NULL is a no-op. */
void kl_kc_plugin_free(kl_kc_plugin_t *p);

/* Runs c's plugin to completion, blocking the calling thread for at most
 * the exec timeout (real monotonic time, whatever c's clock), and caches its
 * credential. Returns as kl_kc_plugin_start, then kl_kc_plugin_finish. */
int kl_kc_plugin_run(kl_kc_creds_t *c, char *err, size_t errlen);

/* Parses an RFC 3339 timestamp ("2024-05-01T10:00:00Z", optional
 * fraction, 'Z' or a +hh:mm offset) of n bytes into Unix seconds. Returns
 * false when malformed. */
bool kl_kc_parse_rfc3339(const char *s, size_t n, double *out);

#endif
