/* main.c — the kubelua command line.
 *
 *   kubelua run [options] SCRIPT.lua [args] [-- args]   run a script
 *   kubelua test [options] [busted options] [paths]   run busted specs
 *   kubelua sim --listen HOST:PORT [options]  serve the API simulator
 *   kubelua types [CRD.yaml...] [-o DIR]      write editor types
 *   kubelua new NAME [options]                write a controller project
 *   kubelua version
 *
 * Each command answers -h and --help with its own usage, on stdout.
 *
 * main wires the loop and the Lua runtime together and turns their outcome
 * into an exit status; everything else lives in the modules. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <luajit.h>

#include "log.h"
#include "loop.h"
#include "lua_kube.h"

static void usage(FILE *out) {
  fputs("usage: kubelua run [options] SCRIPT.lua [args...] [-- args...]\n"
        "       kubelua test [options] [busted options] [spec paths...]\n"
        "       kubelua sim [--listen HOST:PORT] [options]\n"
        "       kubelua types [CRD.yaml...] [-o DIR]\n"
        "       kubelua new NAME [--kind KIND --group G --version V]\n"
        "       kubelua version\n"
        "\n"
        "`kubelua COMMAND --help` lists a command's options.\n",
        out);
}

static void usage_run(FILE *out) {
  fputs(
      "usage: kubelua run [options] SCRIPT.lua [args...] [-- args...]\n"
      "\n"
      "Runs a controller script. Options may come before or after the\n"
      "script; the other arguments, and every one after \"--\", go to the\n"
      "script (as ... and arg).\n"
      "\n"
      "options:\n"
      "  --sim                    serve the API from an in-process simulator;\n"
      "                           its URL and kubeconfig are logged at start\n"
      "  --sim-listen HOST:PORT   where it serves (default 127.0.0.1:0, an\n"
      "                           ephemeral port)\n"
      "  --sim-kubeconfig PATH    the kubeconfig written for kubectl (default\n"
      "                           kubelua-sim-PID.kubeconfig in "
      "$XDG_RUNTIME_DIR\n"
      "                           or /tmp, removed at exit)\n"
      "  --sim-load DIR           create the JSON and YAML objects in DIR "
      "first\n"
      "  --sim-nodes N            its fake Nodes (default 3)\n"
      "  --kubeconfig PATH        the kubeconfig file (else KUBECONFIG, the\n"
      "                           pod's service account, ~/.kube/config)\n"
      "  --context NAME           the kubeconfig context to use\n"
      "  --leader-elect           work only while holding the Lease\n"
      "  --leader-election-id NAME        the Lease's name\n"
      "  --leader-election-namespace NS   its namespace (default: the pod's,\n"
      "                           else \"default\")\n"
      "  --shard-ring NAME        put kube.controller's controllers on this\n"
      "                           sharding ring (a Lease per replica)\n"
      "  --no-watch               reload the script on SIGHUP only, not when\n"
      "                           its files change\n"
      "  --watch-poll SECS        look at the script's files this often even\n"
      "                           without a change notice (default 5)\n"
      "  --metrics-bind-address ADDR   serve /metrics on HOST:PORT or :PORT;\n"
      "                           0 turns it off (default :8080 in a pod, else "
      "0)\n"
      "  --health-probe-bind-address ADDR   serve /healthz and /readyz\n"
      "                           (default :8081 in a pod, else 0)\n"
      "  --webhook-bind-address ADDR   serve the script's webhooks over HTTPS\n"
      "                           (default :9443 in a pod, else 0)\n"
      "  --webhook-cert-dir DIR   tls.crt and tls.key, reloaded when they "
      "change\n"
      "                           (default "
      "/tmp/k8s-webhook-server/serving-certs)\n"
      "  --log-level LEVEL        debug, info, warn or error (default info)\n"
      "  --v N                    klog's verbosity: 4 and above is debug\n"
      "  --log-format FORMAT      text (default) or json: one object a line\n"
      "  --graceful-shutdown-timeout SECS (or --shutdown-timeout)\n"
      "                           how long a graceful stop may take "
      "(default 30)\n"
      "  --hang-timeout SECS      a reconcile, task or informer handler that\n"
      "                           runs this long without yielding is logged\n"
      "                           and fails /healthz (default 60; 0 turns\n"
      "                           it off)\n"
      "  -h, --help               this help\n",
      out);
}

static void usage_test(FILE *out) {
  fputs("usage: kubelua test [options] [busted options] [spec paths...]\n"
        "\n"
        "Runs busted specs inside the runtime, in a task.\n"
        "\n"
        "options:\n"
        "  --apiserver sim|real     the server testing.start serves: the\n"
        "                           simulator (default) or a real\n"
        "                           kube-apiserver and etcd, found in\n"
        "                           KUBEBUILDER_ASSETS, else PATH\n"
        "  --controller-manager     with real: run kube-controller-manager "
        "too\n"
        "  --log-level LEVEL        debug, info, warn or error (default info)\n"
        "  --log-format FORMAT      text (default) or json\n"
        "  -h, --help               this help, then busted's\n",
        out);
}

static void usage_sim(FILE *out) {
  fputs("usage: kubelua sim [--listen HOST:PORT] [options]\n"
        "\n"
        "Serves the Kubernetes API from memory until SIGINT or SIGTERM.\n"
        "\n"
        "options:\n"
        "  --listen HOST:PORT       where to serve (default 127.0.0.1:6443)\n"
        "  --token T                the bearer token of an admin (without it,\n"
        "                           every request is the admin's)\n"
        "  --user NAME=T            a user allowed discovery and access "
        "reviews\n"
        "  --tls-cert F --tls-key F serve HTTPS (HTTP/2 by ALPN, or "
        "HTTP/1.1)\n"
        "  --load DIR               create the JSON and YAML objects in DIR\n"
        "  --history N              watch events kept per resource "
        "(default 10000)\n"
        "  --bookmark-interval SECS how often a watch gets a bookmark "
        "(default 60)\n"
        "  --no-controllers         serve the API server alone: no garbage\n"
        "                           collector, namespace controller, root CA\n"
        "                           or default ServiceAccount publisher, no\n"
        "                           Nodes, scheduler, kubelets, workloads or\n"
        "                           disruption budgets' status\n"
        "  --no-controller NAME     turn one off: gc, namespace, root_ca,\n"
        "                           service_account, disruption, nodes,\n"
        "                           scheduler, kubelet, replicaset,\n"
        "                           deployment, job, statefulset, daemonset\n"
        "  --nodes N                fake Nodes to run Pods on (default 3)\n"
        "  -h, --help               this help\n",
        out);
}

static void usage_types(FILE *out) {
  fputs("usage: kubelua types [CRD.yaml...] [-o DIR]\n"
        "\n"
        "Writes LuaLS annotation files (---@class, ---@field), the types that\n"
        "lua-language-server completes and checks objects with: without a\n"
        "file, of every built-in kind (k8s.core.v1.Pod, ...); else of the\n"
        "custom resources the CustomResourceDefinitions in the files define\n"
        "(<group>.<version>.<Kind>), from each version's openAPIV3Schema.\n"
        "\n"
        "options:\n"
        "  -o, --output DIR         where to write them (default ./types)\n"
        "  -h, --help               this help\n",
        out);
}

static void usage_new(FILE *out) {
  fputs("usage: kubelua new NAME [--kind KIND --group G --version V]\n"
        "\n"
        "Writes a controller project into the new directory NAME: its\n"
        "script, a spec that `kubelua test` runs, kustomize manifests\n"
        "(deploy/), the editor types and their .luarc.json, and a README.\n"
        "\n"
        "options:\n"
        "  --kind KIND              a custom resource to reconcile, with its\n"
        "                           CustomResourceDefinition (else the\n"
        "                           controller watches ConfigMaps); also\n"
        "                           GROUP/VERSION/KIND\n"
        "  --group G                its group (default example.com)\n"
        "  --version V              its version (default v1alpha1)\n"
        "  -h, --help               this help\n",
        out);
}

static void usage_version(FILE *out) {
  fputs("usage: kubelua version\n"
        "\n"
        "Prints the versions of kubelua and LuaJIT.\n",
        out);
}

typedef void usage_fn(FILE *out);

static int bad_usage(usage_fn *usage_of, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int bad_usage(usage_fn *usage_of, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kubelua: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n", stderr);
  usage_of(stderr);
  return 2;
}

static int is_help(const char *arg) {
  return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

/* Pushes require(mod)[fn]. Returns 0, or 1 with the error message pushed
 * (the stack otherwise as it was). */
static int push_module_fn(lua_State *L, const char *mod, const char *fn) {
  lua_getglobal(L, "require");
  lua_pushstring(L, mod);
  if (lua_pcall(L, 1, 1, 0) != 0) return 1;
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  return 0;
}

typedef struct run_opts {
  const char *kubeconfig, *context;
  const char *metrics_addr, *probes_addr; /* NULL: the default */
  const char *webhook_addr, *webhook_cert_dir;
  int leader_elect;
  const char *election_id, *election_ns;
  const char *shard_ring;
  const char *sim_listen, *sim_kubeconfig, *sim_load; /* NULL: the default */
  char sim_default_kubeconfig[4096]; /* "" or the default, removed at exit */
  const char *sim_nodes;             /* NULL: the simulator's default */
} run_opts_t;

/* Sets each {name, value} of fields whose value is not NULL in the table
 * at the top of L's stack. */
static void set_strings(lua_State *L, const char *fields[][2], size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!fields[i][1]) continue;
    lua_pushstring(L, fields[i][1]);
    lua_setfield(L, -2, fields[i][0]);
  }
}

/* --sim: an API simulator in this process (kube.start_sim with
 * --sim-listen, --sim-kubeconfig, --sim-load and --sim-nodes), the
 * script's connection pointed at it. */
static int start_sim(kl_rt_t *rt, const run_opts_t *o) {
  lua_State *L = kl_rt_lua(rt);
  int status = 1;
  if (push_module_fn(L, "kubelua", "start_sim")) goto out;
  lua_createtable(L, 0, 5);
  const char *strs[][2] = {{"listen", o->sim_listen},
                           {"kubeconfig", o->sim_kubeconfig},
                           {"load", o->sim_load}};
  set_strings(L, strs, sizeof strs / sizeof strs[0]);
  if (o->sim_nodes) { /* checked: a whole number */
    lua_pushinteger(L, (lua_Integer)strtol(o->sim_nodes, NULL, 10));
    lua_setfield(L, -2, "nodes");
  }
  if (!o->sim_kubeconfig) {
    lua_pushstring(L, o->sim_default_kubeconfig);
    lua_setfield(L, -2, "kubeconfig");
  }
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "announce");
  if (lua_pcall(L, 1, 0, 0) == 0) status = 0;
out:
  if (status) fprintf(stderr, "kubelua: --sim: %s\n", lua_tostring(L, -1));
  lua_settop(L, 0);
  return status;
}

/* --kubeconfig and --context, for the connection made on first use, and
 * leader election. */
static int run_options(kl_rt_t *rt, const run_opts_t *o) {
  lua_State *L = kl_rt_lua(rt);
  if (push_module_fn(L, "kubelua", "_run_options")) {
    fprintf(stderr, "kubelua: %s\n", lua_tostring(L, -1));
    lua_settop(L, 0);
    return 1;
  }
  lua_createtable(L, 0, 6);
  const char *strs[][2] = {{"kubeconfig", o->kubeconfig},
                           {"context", o->context},
                           {"leader_election_id", o->election_id},
                           {"leader_election_namespace", o->election_ns},
                           {"shard_ring", o->shard_ring}};
  set_strings(L, strs, sizeof strs / sizeof strs[0]);
  lua_pushboolean(L, o->leader_elect);
  lua_setfield(L, -2, "leader_elect");
  if (lua_pcall(L, 1, 0, 0) != 0) {
    fprintf(stderr, "kubelua: %s\n", lua_tostring(L, -1));
    lua_settop(L, 0);
    return 1;
  }
  lua_settop(L, 0);
  return 0;
}

/* Whether kubelua runs in a pod (KUBERNETES_SERVICE_HOST set), and not
 * with --sim: where controller-runtime's default addresses apply. */
static int in_pod(int sim) {
  const char *host = getenv("KUBERNETES_SERVICE_HOST");
  return !sim && host && *host;
}

/* Logs the message on top of the stack and clears it; returns 1. */
static int serve_failed(lua_State *L) {
  kl_log(KL_LOG_ERROR, "%s", lua_tostring(L, -1));
  lua_settop(L, 0);
  return 1;
}

/* Calls the serve function below its options table: -> true | nil, msg.
 * Returns 0, or 1 with the message logged. */
static int serve_call(lua_State *L) {
  if (lua_pcall(L, 1, 2, 0) != 0 || !lua_toboolean(L, -2))
    return serve_failed(L);
  lua_settop(L, 0);
  return 0;
}

/* Starts the /metrics and probe servers before the script loads, so that
 * /healthz answers while it starts and /readyz says what it waits for.
 *
 * Defaults: controller-runtime's :8080 and :8081, but only in a pod
 * (KUBERNETES_SERVICE_HOST set) and not with --sim. Elsewhere, on a
 * workstation or in tests, several `kubelua run` at once are the normal
 * case, and binding every interface by default would make all but the
 * first fail (and expose the endpoints beyond loopback): they are off
 * unless asked for. A port that cannot be bound is a startup failure with
 * a clear message, as in controller-runtime, never a silent one. */
static int serve_endpoints(kl_rt_t *rt, const run_opts_t *o, int sim) {
  int pod = in_pod(sim);
  const char *maddr = o->metrics_addr ? o->metrics_addr : pod ? ":8080" : "0";
  const char *paddr = o->probes_addr ? o->probes_addr : pod ? ":8081" : "0";
  if (strcmp(maddr, "0") == 0 && strcmp(paddr, "0") == 0) return 0;
  lua_State *L = kl_rt_lua(rt);
  if (push_module_fn(L, "kubelua.metrics", "serve")) return serve_failed(L);
  lua_createtable(L, 0, 2);
  lua_pushstring(L, maddr);
  lua_setfield(L, -2, "metrics");
  lua_pushstring(L, paddr);
  lua_setfield(L, -2, "probes");
  return serve_call(L);
}

/* The webhook server: at once when --webhook-bind-address was given (a
 * port or a certificate that cannot be used is a startup failure); in a
 * pod, :9443 when the script registers its first webhook, as
 * controller-runtime starts its webhook server only when one is
 * registered. */
static int serve_webhooks(kl_rt_t *rt, const run_opts_t *o, int sim) {
  const char *addr = o->webhook_addr ? o->webhook_addr
                     : in_pod(sim)   ? ":9443"
                                     : "0";
  if (strcmp(addr, "0") == 0) return 0;
  lua_State *L = kl_rt_lua(rt);
  if (push_module_fn(L, "kubelua.webhook", "serve")) return serve_failed(L);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, addr);
  lua_setfield(L, -2, "address");
  if (o->webhook_cert_dir) {
    lua_pushstring(L, o->webhook_cert_dir);
    lua_setfield(L, -2, "cert_dir");
  }
  lua_pushboolean(L, !o->webhook_addr);
  lua_setfield(L, -2, "lazy");
  return serve_call(L);
}

/* One option: "--name=value" is split into its name and value. */
typedef struct opt {
  const char *name, *inline_val; /* inline_val: NULL unless --name=value */
  char buf[64];
} opt_t;

static void opt_split(opt_t *o, const char *arg) {
  const char *eq = strchr(arg, '=');
  o->name = arg;
  o->inline_val = NULL;
  if (eq && (size_t)(eq - arg) < sizeof o->buf) {
    memcpy(o->buf, arg, (size_t)(eq - arg));
    o->buf[eq - arg] = '\0';
    o->name = o->buf;
    o->inline_val = eq + 1;
  }
}

/* The value of option o at argv[*i]: inline, or the next argument (then
 * *i moves past it); NULL after saying that it is missing. */
static const char *opt_value(const opt_t *o, int argc, char **argv, int *i,
                             usage_fn *usage_of) {
  if (o->inline_val) return o->inline_val;
  if (*i + 1 < argc) return argv[++*i];
  bad_usage(usage_of, "option %s needs a value", o->name);
  return NULL;
}

/* --log-level, --v and --log-format, which run and test share. Returns 0
 * when name is none of them, 1 when it took val, or 2 after saying what
 * is wrong with val. */
static int log_option(const char *name, const char *val, usage_fn *usage_of) {
  if (strcmp(name, "--log-level") == 0) {
    int level = kl_log_parse_level(val);
    if (level < 0) return bad_usage(usage_of, "unknown log level \"%s\"", val);
    kl_log_set_level((kl_log_level_t)level);
  } else if (strcmp(name, "--v") == 0) { /* klog's verbosity */
    char *end;
    long v = strtol(val, &end, 10);
    if (*end || end == val || v < 0)
      return bad_usage(usage_of, "--v needs a number, got \"%s\"", val);
    kl_log_set_level(v >= 4 ? KL_LOG_DEBUG : KL_LOG_INFO);
  } else if (strcmp(name, "--log-format") == 0) {
    int f = kl_log_parse_format(val);
    if (f < 0)
      return bad_usage(usage_of, "unknown log format \"%s\" (text, json)", val);
    kl_log_set_format((kl_log_format_t)f);
  } else {
    return 0;
  }
  return 1;
}

/* An argument for the script: the first names the script itself. The
 * others are gathered at the front of argv, which they were behind. */
static void script_arg(const char **script, char **argv, int *nargs,
                       char *arg) {
  if (!*script)
    *script = arg;
  else
    argv[(*nargs)++] = arg;
}

/* The options of run that take a value. */
static const char *const run_valued[] = {"--kubeconfig",
                                         "--context",
                                         "--metrics-bind-address",
                                         "--health-probe-bind-address",
                                         "--leader-election-id",
                                         "--leader-election-namespace",
                                         "--shard-ring",
                                         "--shutdown-timeout",
                                         "--graceful-shutdown-timeout",
                                         "--hang-timeout",
                                         "--watch-poll",
                                         "--webhook-bind-address",
                                         "--webhook-cert-dir",
                                         "--sim-listen",
                                         "--sim-kubeconfig",
                                         "--sim-load",
                                         "--sim-nodes",
                                         "--log-level",
                                         "--v",
                                         "--log-format",
                                         NULL};

/* The options of test that take a value (busted has none of these). */
static const char *const test_valued[] = {"--log-level", "--v", "--log-format",
                                          NULL};

static int is_one_of(const char *name, const char *const *names) {
  for (; *names; names++)
    if (strcmp(name, *names) == 0) return 1;
  return 0;
}

/* kubelua run. Options may come anywhere before "--": the first argument
 * that is not an option is the script, the others are its arguments, and
 * so is everything after "--". An unknown --option is refused, so that a
 * misspelt or misplaced runtime option never silently reaches the script. */
static int run_script(int argc, char **argv) {
  double shutdown_timeout = 30, hang_timeout = 60, watch_poll = 5;
  int sim = 0, watch = 1, nargs = 0;
  const char *script = NULL;
  run_opts_t ro = {0};
  for (int i = 0; i < argc; i++) {
    char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      while (++i < argc)
        script_arg(&script, argv, &nargs, argv[i]);
      break;
    }
    if (strncmp(arg, "--", 2) != 0 && strcmp(arg, "-h") != 0) {
      script_arg(&script, argv, &nargs, arg);
      continue;
    }
    if (is_help(arg)) {
      usage_run(stdout);
      return 0;
    }
    opt_t o;
    opt_split(&o, arg);
    const char *opt = o.name;
    if (strcmp(opt, "--sim") == 0) {
      sim = 1;
      continue;
    }
    if (strcmp(opt, "--no-watch") == 0) {
      watch = 0;
      continue;
    }
    if (strcmp(opt, "--leader-elect") == 0) {
      ro.leader_elect = 1;
      continue;
    }
    if (!is_one_of(opt, run_valued))
      return bad_usage(usage_run,
                       "unknown option %s (the script's own options go "
                       "after \"--\")",
                       opt);
    const char *val = opt_value(&o, argc, argv, &i, usage_run);
    if (!val) return 2;
    int logged = log_option(opt, val, usage_run);
    if (logged == 2) return 2;
    if (logged) continue;
    if (strcmp(opt, "--kubeconfig") == 0) {
      ro.kubeconfig = val;
    } else if (strcmp(opt, "--context") == 0) {
      ro.context = val;
    } else if (strcmp(opt, "--metrics-bind-address") == 0) {
      ro.metrics_addr = val;
    } else if (strcmp(opt, "--health-probe-bind-address") == 0) {
      ro.probes_addr = val;
    } else if (strcmp(opt, "--webhook-bind-address") == 0) {
      ro.webhook_addr = val;
    } else if (strcmp(opt, "--webhook-cert-dir") == 0) {
      ro.webhook_cert_dir = val;
    } else if (strcmp(opt, "--sim-listen") == 0) {
      ro.sim_listen = val;
    } else if (strcmp(opt, "--sim-kubeconfig") == 0) {
      ro.sim_kubeconfig = val;
    } else if (strcmp(opt, "--sim-load") == 0) {
      ro.sim_load = val;
    } else if (strcmp(opt, "--leader-election-id") == 0) {
      ro.election_id = val;
    } else if (strcmp(opt, "--leader-election-namespace") == 0) {
      ro.election_ns = val;
    } else if (strcmp(opt, "--shard-ring") == 0) {
      ro.shard_ring = val;
    } else if (strcmp(opt, "--sim-nodes") == 0) {
      char *end;
      long n = strtol(val, &end, 10);
      if (*end || end == val || n < 0 || n > 250)
        return bad_usage(usage_run,
                         "--sim-nodes needs a whole number of Nodes from 0 "
                         "to 250, got \"%s\"",
                         val);
      ro.sim_nodes = val;
    } else if (strcmp(opt, "--watch-poll") == 0) {
      char *end;
      watch_poll = strtod(val, &end);
      if (*end || end == val || !(watch_poll > 0) || isinf(watch_poll))
        return bad_usage(
            usage_run, "--watch-poll needs positive seconds, got \"%s\"", val);
    } else {
      int hang = strcmp(opt, "--hang-timeout") == 0;
      char *end;
      double secs = strtod(val, &end);
      if (*end || end == val || !(secs >= 0) || secs > 1e9)
        return bad_usage(usage_run, "%s needs seconds, got \"%s\"",
                         hang ? "--hang-timeout" : "--shutdown-timeout", val);
      *(hang ? &hang_timeout : &shutdown_timeout) = secs;
    }
  }
  if (!script) return bad_usage(usage_run, "%s", "run needs a script");
  if (!sim &&
      (ro.sim_listen || ro.sim_kubeconfig || ro.sim_load || ro.sim_nodes))
    return bad_usage(usage_run, "%s",
                     ro.sim_listen       ? "--sim-listen needs --sim"
                     : ro.sim_kubeconfig ? "--sim-kubeconfig needs --sim"
                     : ro.sim_load       ? "--sim-load needs --sim"
                                         : "--sim-nodes needs --sim");
  if (sim && !ro.sim_kubeconfig) {
    /* a file of this process's, where kubectl can be pointed at */
    const char *dir = getenv("XDG_RUNTIME_DIR");
    int n =
        snprintf(ro.sim_default_kubeconfig, sizeof ro.sim_default_kubeconfig,
                 "%s/kubelua-sim-%ld.kubeconfig", dir && *dir ? dir : "/tmp",
                 (long)getpid());
    if (n < 0 || (size_t)n >= sizeof ro.sim_default_kubeconfig)
      return bad_usage(usage_run, "%s",
                       "XDG_RUNTIME_DIR is too long for the simulator's "
                       "kubeconfig (give --sim-kubeconfig PATH)");
  }
  if (ro.leader_elect && !ro.election_id)
    return bad_usage(usage_run, "%s",
                     "--leader-elect needs --leader-election-id NAME");

  kl_loop_t *loop = kl_loop_new(NULL);
  if (!loop) {
    fprintf(stderr, "kubelua: cannot create the event loop\n");
    return 1;
  }
  kl_rt_t *rt = kl_rt_new(loop);
  if (!rt) {
    fprintf(stderr, "kubelua: cannot create the Lua state\n");
    kl_loop_free(loop);
    return 1;
  }
  kl_rt_set_shutdown_timeout(rt, shutdown_timeout);
  int status = 0;
  if (kl_rt_set_hang_timeout(rt, hang_timeout) != 0) {
    fprintf(stderr, "kubelua: cannot start the watchdog thread\n");
    status = 1;
  }
  if (status == 0 && sim) status = start_sim(rt, &ro);
  if (status == 0) status = serve_endpoints(rt, &ro, sim);
  if (status == 0) status = serve_webhooks(rt, &ro, sim);
  if (status == 0 && (!sim || ro.leader_elect || ro.shard_ring))
    status = run_options(rt, &ro);
  if (status == 0)
    status =
        kl_rt_start_script(rt, script, nargs, argv, watch ? watch_poll : 0);
  if (status == 0) status = kl_rt_loop_until_stopped(rt);
  kl_rt_free(rt);
  kl_loop_free(loop);
  if (*ro.sim_default_kubeconfig) remove(ro.sim_default_kubeconfig);
  return status;
}

/* busted's own help, after kubelua test's lines. busted answers --help as
 * a usage error that carries the help, so the text is taken from there. */
static const char busted_help[] =
    "local cli = require('busted.modules.cli')({ standalone = false })\n"
    "cli:set_name('busted')\n"
    "local _, text = cli:parse({ '--help' })\n"
    "text = tostring(text):gsub('^busted: error: ', '')\n"
    "  :gsub('; re%-run with %-%-help for usage%.$', '')\n"
    "io.stdout:write('\\nbusted options:\\n', text, '\\n')\n";

/* kubelua.testing.configure{apiserver=, controller_manager=}: the server
 * the harnesses start. Returns 0, or 1 with the reason said (a binary that
 * is not there). */
static int test_options(kl_rt_t *rt, const char *apiserver, int cm) {
  lua_State *L = kl_rt_lua(rt);
  int status = 1;
  if (push_module_fn(L, "kubelua.testing", "configure")) goto out;
  lua_createtable(L, 0, 2);
  lua_pushstring(L, apiserver);
  lua_setfield(L, -2, "apiserver");
  lua_pushboolean(L, cm);
  lua_setfield(L, -2, "controller_manager");
  if (lua_pcall(L, 1, 2, 0) != 0) goto out;
  if (lua_toboolean(L, -2)) status = 0;
out:
  if (status) fprintf(stderr, "kubelua test: %s\n", lua_tostring(L, -1));
  lua_settop(L, 0);
  return status;
}

/* Runs busted inside the runtime, in a task: specs get the same Lua state,
 * library and loop as scripts, and kube.run waits for tasks from a spec.
 * kubelua's own options (logs, help) are taken out of the arguments before
 * "--"; the rest are busted's. */
static int run_tests(int argc, char **argv) {
  /* Ours, taken out of busted's: --apiserver sim|real,
   * --controller-manager, the log options and help. */
  const char *apiserver = "sim";
  int cm = 0, nargs = 0, help = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      while (i < argc)
        argv[nargs++] = argv[i++];
      break;
    }
    opt_t o;
    opt_split(&o, argv[i]);
    if (is_help(argv[i])) {
      help = 1;
    } else if (strcmp(argv[i], "--controller-manager") == 0) {
      cm = 1;
    } else if (strcmp(o.name, "--apiserver") == 0) {
      apiserver = opt_value(&o, argc, argv, &i, usage_test);
      if (!apiserver) return 2;
    } else if (is_one_of(o.name, test_valued)) {
      const char *val = opt_value(&o, argc, argv, &i, usage_test);
      if (!val || log_option(o.name, val, usage_test) == 2) return 2;
    } else {
      argv[nargs++] = argv[i];
    }
  }
  if (strcmp(apiserver, "sim") != 0 && strcmp(apiserver, "real") != 0)
    return bad_usage(usage_test, "--apiserver needs sim or real, got \"%s\"",
                     apiserver);
  if (cm && strcmp(apiserver, "real") != 0)
    return bad_usage(usage_test, "%s",
                     "--controller-manager needs --apiserver real");
  if (help) usage_test(stdout);
  static const char runner[] =
      "local kube = require 'kubelua'\n"
      "kube.spawn(function()\n"
      "  local compat = require 'busted.compatibility'\n"
      "  compat.exit = function(code) error({kubelua_exit = code}, 0) end\n"
      "  local ok, err = pcall(require('busted.runner'), {standalone = "
      "false})\n"
      "  local status = 0\n"
      "  if not ok and type(err) == 'table' and err.kubelua_exit then\n"
      "    status = err.kubelua_exit ~= 0 and 1 or 0\n"
      "  elseif not ok then\n"
      "    io.stderr:write('kubelua test: ', tostring(err), '\\n')\n"
      "    status = 1\n"
      "  end\n"
      "  kube.stop(status)\n"
      "end)\n";
  kl_loop_t *loop = kl_loop_new(NULL);
  kl_rt_t *rt = loop ? kl_rt_new(loop) : NULL;
  if (!rt) {
    fprintf(stderr, "kubelua: cannot start the runtime\n");
    kl_loop_free(loop);
    return 1;
  }
  lua_State *L = kl_rt_lua(rt);
  if (help) {
    if (luaL_loadbuffer(L, busted_help, sizeof busted_help - 1,
                        "=kubelua test") != 0 ||
        lua_pcall(L, 0, 0, 0) != 0)
      fprintf(stderr, "kubelua test: %s\n", lua_tostring(L, -1));
    kl_rt_free(rt);
    kl_loop_free(loop);
    return 0;
  }
  lua_createtable(L, nargs, 1);
  lua_pushliteral(L, "kubelua test");
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < nargs; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  int status = test_options(rt, apiserver, cm);
  if (status == 0) {
    if (luaL_loadbuffer(L, runner, sizeof runner - 1, "=kubelua test") == 0 &&
        lua_pcall(L, 0, 0, 0) == 0) {
      status = kl_rt_loop_until_stopped(rt);
      /* specs cut short are no success, whatever they said so far */
      if (kl_rt_stop_signal(rt)) {
        fprintf(stderr, "kubelua test: interrupted by signal %d\n",
                kl_rt_stop_signal(rt));
        status = 1;
      }
    } else {
      fprintf(stderr, "kubelua test: %s\n", lua_tostring(L, -1));
      status = 1;
    }
  }
  kl_rt_free(rt);
  kl_loop_free(loop);
  return status;
}

/* Whether an argument before "--" asks for help (-h, --help). */
static int asks_help(int argc, char **argv) {
  for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (is_help(argv[i])) return 1;
  return 0;
}

/* Calls require(mod).main(args), args being argv's arguments, with its
 * three results left on the stack: true | nil, message[, "usage"].
 * Returns 0, or 1 after saying why it failed ("kubelua NAME: ..."). */
static int call_main(lua_State *L, const char *name, const char *mod, int argc,
                     char **argv) {
  if (push_module_fn(L, mod, "main") == 0) {
    lua_createtable(L, argc, 0);
    for (int i = 0; i < argc; i++) {
      lua_pushstring(L, argv[i]);
      lua_rawseti(L, -2, i + 1);
    }
    if (lua_pcall(L, 1, 3, 0) == 0) return 0;
  }
  fprintf(stderr, "kubelua %s: %s\n", name, lua_tostring(L, -1));
  return 1;
}

/* A command whose Lua module does the work: kubelua sim, types and new.
 * require(mod).main(args) -> true | nil, message[, "usage"]. With serve
 * (sim: main parses the options, listens and prints one line with the
 * address), the loop then runs until SIGINT or SIGTERM, and every failure
 * of main is a usage error; else only those that say "usage" are. A usage
 * error is answered with the usage on stderr and status 2, any other
 * failure with its message and status 1. */
static int run_lua_command(const char *name, const char *mod,
                           usage_fn *usage_of, int serve, int argc,
                           char **argv) {
  if (asks_help(argc, argv)) {
    usage_of(stdout);
    return 0;
  }
  kl_loop_t *loop = kl_loop_new(NULL);
  kl_rt_t *rt = loop ? kl_rt_new(loop) : NULL;
  if (!rt) {
    fprintf(stderr, "kubelua: cannot start the runtime\n");
    kl_loop_free(loop);
    return 1;
  }
  lua_State *L = kl_rt_lua(rt);
  int status = 1;
  if (call_main(L, name, mod, argc, argv)) goto out;
  if (!lua_toboolean(L, -3)) {
    fprintf(stderr, "kubelua %s: %s\n", name, lua_tostring(L, -2));
    if (serve ||
        (lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "usage") == 0)) {
      usage_of(stderr);
      status = 2;
    }
    goto out;
  }
  lua_settop(L, 0);
  status = serve ? kl_rt_loop_until_stopped(rt) : 0;
out:
  lua_settop(L, 0);
  kl_rt_free(rt);
  kl_loop_free(loop);
  return status;
}

int main(int argc, char **argv) {
  /* print() reaches a pipe (a container's log) line by line, not when a
   * block fills or the process ends. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  static const struct {
    const char *name;
    usage_fn *usage;
  } cmds[] = {{"run", usage_run}, {"test", usage_test},
              {"sim", usage_sim}, {"types", usage_types},
              {"new", usage_new}, {"version", usage_version}};
  const char *cmd = argv[1];
  if (strcmp(cmd, "help") == 0 || is_help(cmd)) {
    for (size_t i = 0; argc > 2 && i < sizeof cmds / sizeof cmds[0]; i++) {
      if (strcmp(argv[2], cmds[i].name) == 0) {
        cmds[i].usage(stdout); /* kubelua help COMMAND */
        return 0;
      }
    }
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    if (argc > 2 && is_help(argv[2])) {
      usage_version(stdout);
      return 0;
    }
    if (argc > 2)
      return bad_usage(usage_version, "version takes no arguments, got %s",
                       argv[2]);
    printf("kubelua %s (%s)\n", KL_VERSION, LUAJIT_VERSION);
    return 0;
  }
  if (strcmp(cmd, "run") == 0) return run_script(argc - 2, argv + 2);
  if (strcmp(cmd, "test") == 0) return run_tests(argc - 2, argv + 2);
  if (strcmp(cmd, "sim") == 0)
    return run_lua_command("sim", "kubelua.sim", usage_sim, 1, argc - 2,
                           argv + 2);
  if (strcmp(cmd, "types") == 0)
    return run_lua_command("types", "kubelua.types", usage_types, 0, argc - 2,
                           argv + 2);
  if (strcmp(cmd, "new") == 0)
    return run_lua_command("new", "kubelua.new", usage_new, 0, argc - 2,
                           argv + 2);
  return bad_usage(usage, "unknown command \"%s\"", cmd);
}
