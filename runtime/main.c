/* main.c — the kubelua command line.
 *
 *   kubelua run [options] SCRIPT.lua [args]   run a controller script
 *   kubelua test [busted options] [paths]    run busted specs in the runtime
 *   kubelua sim --listen HOST:PORT [options]  serve the API simulator
 *   kubelua version
 *
 * main wires the loop and the Lua runtime together and turns their outcome
 * into an exit status; everything else lives in the modules. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <luajit.h>

#include "log.h"
#include "loop.h"
#include "lua_kube.h"

static void usage(FILE *out) {
  fputs(
      "usage: kubelua run [options] SCRIPT.lua [args...]\n"
      "       kubelua test [busted options] [spec paths...]\n"
      "       kubelua sim --listen HOST:PORT [--token T] [--user NAME=T]\n"
      "                   [--tls-cert F --tls-key F] [--load DIR]\n"
      "                   [--history N] [--bookmark-interval SECS]\n"
      "                   [--no-controllers] [--no-controller NAME]\n"
      "       kubelua version\n"
      "\n"
      "run options:\n"
      "  --sim                    serve the API from an in-process simulator\n"
      "  --kubeconfig PATH        the kubeconfig file (else KUBECONFIG, the\n"
      "                           pod's service account, ~/.kube/config)\n"
      "  --context NAME           the kubeconfig context to use\n"
      "  --leader-elect           work only while holding the Lease\n"
      "  --leader-election-id NAME        the Lease's name\n"
      "  --leader-election-namespace NS   its namespace (default: the pod's,\n"
      "                           else \"default\")\n"
      "  --no-watch               reload the script on SIGHUP only, not when\n"
      "                           its files change\n"
      "  --metrics-bind-address ADDR   serve /metrics on HOST:PORT or :PORT;\n"
      "                           0 turns it off (default :8080 in a pod, else "
      "0)\n"
      "  --health-probe-bind-address ADDR   serve /healthz and /readyz\n"
      "                           (default :8081 in a pod, else 0)\n"
      "  --log-level LEVEL        debug, info, warn or error (default info)\n"
      "  --v N                    klog's verbosity: 4 and above is debug\n"
      "  --log-format FORMAT      text (default) or json: one object a line\n"
      "  --graceful-shutdown-timeout SECS (or --shutdown-timeout)\n"
      "                           how long a graceful stop may take "
      "(default 30)\n",
      out);
}

static int bad_usage(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kubelua: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n", stderr);
  usage(stderr);
  return 2;
}

/* --sim: an API simulator in this process, the script's connection
 * pointed at it. */
static int start_sim(kl_rt_t *rt) {
  lua_State *L = kl_rt_lua(rt);
  static const char code[] = "require('kubelua').start_sim()";
  if (luaL_loadbuffer(L, code, sizeof code - 1, "=--sim") != 0 ||
      lua_pcall(L, 0, 0, 0) != 0) {
    fprintf(stderr, "kubelua: --sim: %s\n", lua_tostring(L, -1));
    lua_settop(L, 0);
    return 1;
  }
  return 0;
}

typedef struct run_opts {
  const char *kubeconfig, *context;
  const char *metrics_addr, *probes_addr; /* NULL: the default */
  int leader_elect;
  const char *election_id, *election_ns;
} run_opts_t;

/* --kubeconfig and --context, for the connection made on first use, and
 * leader election. */
static int run_options(kl_rt_t *rt, const run_opts_t *o) {
  lua_State *L = kl_rt_lua(rt);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "kubelua");
  if (lua_pcall(L, 1, 1, 0) != 0) {
    fprintf(stderr, "kubelua: %s\n", lua_tostring(L, -1));
    lua_settop(L, 0);
    return 1;
  }
  lua_getfield(L, -1, "_run_options");
  lua_createtable(L, 0, 5);
  const char *strs[][2] = {{"kubeconfig", o->kubeconfig},
                           {"context", o->context},
                           {"leader_election_id", o->election_id},
                           {"leader_election_namespace", o->election_ns}};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    if (!strs[i][1]) continue;
    lua_pushstring(L, strs[i][1]);
    lua_setfield(L, -2, strs[i][0]);
  }
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
  int pod = !sim && getenv("KUBERNETES_SERVICE_HOST") &&
            *getenv("KUBERNETES_SERVICE_HOST");
  const char *maddr = o->metrics_addr ? o->metrics_addr : pod ? ":8080" : "0";
  const char *paddr = o->probes_addr ? o->probes_addr : pod ? ":8081" : "0";
  if (strcmp(maddr, "0") == 0 && strcmp(paddr, "0") == 0) return 0;
  lua_State *L = kl_rt_lua(rt);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "kubelua.metrics");
  if (lua_pcall(L, 1, 1, 0) != 0) goto fail;
  lua_getfield(L, -1, "serve");
  lua_createtable(L, 0, 2);
  lua_pushstring(L, maddr);
  lua_setfield(L, -2, "metrics");
  lua_pushstring(L, paddr);
  lua_setfield(L, -2, "probes");
  if (lua_pcall(L, 1, 2, 0) != 0) goto fail;
  if (!lua_toboolean(L, -2)) goto fail;
  lua_settop(L, 0);
  return 0;
fail:
  kl_log(KL_LOG_ERROR, "%s", lua_tostring(L, -1));
  lua_settop(L, 0);
  return 1;
}

static int run_script(int argc, char **argv) {
  double shutdown_timeout = 30;
  int sim = 0, watch = 1;
  run_opts_t ro = {0};
  int i = 0;
  char opt_buf[64];
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    const char *opt = argv[i], *inline_val = NULL;
    const char *eq = strchr(opt, '=');
    if (eq && (size_t)(eq - opt) < sizeof opt_buf) { /* --name=value */
      memcpy(opt_buf, opt, (size_t)(eq - opt));
      opt_buf[eq - opt] = '\0';
      opt = opt_buf;
      inline_val = eq + 1;
    }
    if (strcmp(opt, "--") == 0) {
      i++;
      break;
    }
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
    if (!inline_val && i + 1 >= argc)
      return bad_usage("option %s needs a value", opt);
    const char *val = inline_val ? inline_val : argv[++i];
    if (strcmp(opt, "--log-level") == 0) {
      int level = kl_log_parse_level(val);
      if (level < 0) return bad_usage("unknown log level \"%s\"", val);
      kl_log_set_level((kl_log_level_t)level);
    } else if (strcmp(opt, "--v") == 0) { /* klog's verbosity */
      char *end;
      long v = strtol(val, &end, 10);
      if (*end || end == val || v < 0)
        return bad_usage("--v needs a number, got \"%s\"", val);
      kl_log_set_level(v >= 4 ? KL_LOG_DEBUG : KL_LOG_INFO);
    } else if (strcmp(opt, "--log-format") == 0) {
      int f = kl_log_parse_format(val);
      if (f < 0)
        return bad_usage("unknown log format \"%s\" (text, json)", val);
      kl_log_set_format((kl_log_format_t)f);
    } else if (strcmp(opt, "--kubeconfig") == 0) {
      ro.kubeconfig = val;
    } else if (strcmp(opt, "--context") == 0) {
      ro.context = val;
    } else if (strcmp(opt, "--metrics-bind-address") == 0) {
      ro.metrics_addr = val;
    } else if (strcmp(opt, "--health-probe-bind-address") == 0) {
      ro.probes_addr = val;
    } else if (strcmp(opt, "--leader-election-id") == 0) {
      ro.election_id = val;
    } else if (strcmp(opt, "--leader-election-namespace") == 0) {
      ro.election_ns = val;
    } else if (strcmp(opt, "--shutdown-timeout") == 0 ||
               strcmp(opt, "--graceful-shutdown-timeout") == 0) {
      char *end;
      shutdown_timeout = strtod(val, &end);
      if (*end || end == val || !(shutdown_timeout >= 0))
        return bad_usage("--shutdown-timeout needs seconds, got \"%s\"", val);
    } else {
      return bad_usage("unknown option %s", opt);
    }
  }
  if (i >= argc) return bad_usage("%s", "run needs a script");
  if (ro.leader_elect && !ro.election_id)
    return bad_usage("%s", "--leader-elect needs --leader-election-id NAME");

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
  int status = sim ? start_sim(rt) : 0;
  if (status == 0) status = serve_endpoints(rt, &ro, sim);
  if (status == 0 && (!sim || ro.leader_elect)) status = run_options(rt, &ro);
  if (status == 0)
    status = kl_rt_start_script(rt, argv[i], argc - i - 1, argv + i + 1, watch);
  if (status == 0) status = kl_rt_loop_until_stopped(rt);
  kl_rt_free(rt);
  kl_loop_free(loop);
  return status;
}

/* Runs busted inside the runtime, in a task: specs get the same Lua state,
 * library and loop as scripts, and kube.run waits for tasks from a spec. */
static int run_tests(int argc, char **argv) {
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
  lua_createtable(L, argc, 1);
  lua_pushliteral(L, "kubelua test");
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  int status = 1;
  if (luaL_loadbuffer(L, runner, sizeof runner - 1, "=kubelua test") == 0 &&
      lua_pcall(L, 0, 0, 0) == 0)
    status = kl_rt_loop_until_stopped(rt);
  else
    fprintf(stderr, "kubelua test: %s\n", lua_tostring(L, -1));
  kl_rt_free(rt);
  kl_loop_free(loop);
  return status;
}

/* Serves the API simulator (lua/kubelua/sim) until SIGINT or SIGTERM. Its
 * main parses the options, listens and prints one line with the address. */
static int run_sim(int argc, char **argv) {
  kl_loop_t *loop = kl_loop_new(NULL);
  kl_rt_t *rt = loop ? kl_rt_new(loop) : NULL;
  if (!rt) {
    fprintf(stderr, "kubelua: cannot start the runtime\n");
    kl_loop_free(loop);
    return 1;
  }
  lua_State *L = kl_rt_lua(rt);
  int status = 1;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "kubelua.sim");
  if (lua_pcall(L, 1, 1, 0) != 0) {
    fprintf(stderr, "kubelua sim: %s\n", lua_tostring(L, -1));
    goto out;
  }
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  if (lua_pcall(L, 1, 2, 0) != 0) {
    fprintf(stderr, "kubelua sim: %s\n", lua_tostring(L, -1));
    goto out;
  }
  if (!lua_toboolean(L, -2)) {
    fprintf(stderr, "kubelua sim: %s\n", lua_tostring(L, -1));
    usage(stderr);
    status = 2;
    goto out;
  }
  lua_settop(L, 0);
  status = kl_rt_loop_until_stopped(rt);
out:
  kl_rt_free(rt);
  kl_loop_free(loop);
  return status;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("kubelua %s (%s)\n", KL_VERSION, LUAJIT_VERSION);
    return 0;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 ||
      strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "run") == 0) return run_script(argc - 2, argv + 2);
  if (strcmp(cmd, "test") == 0) return run_tests(argc - 2, argv + 2);
  if (strcmp(cmd, "sim") == 0) return run_sim(argc - 2, argv + 2);
  return bad_usage("unknown command \"%s\"", cmd);
}
