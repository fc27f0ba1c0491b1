/* lua_process.c — "kubelua.process": child processes that cannot outlive
 * their parent, for servers a test starts (kubelua.envtest).
 *
 *   local process = require "kubelua.process"
 *   local p = process.spawn{ path = "/usr/bin/etcd", args = { … },
 *                            log = dir .. "/etcd.log" }
 *   p:pid()              -- also the id of its process group
 *   p:poll()             -- nil while it runs, then "exited", code or
 *                        -- "signaled", signum (it is reaped once)
 *   p:kill("TERM")       -- signals its whole process group
 *   process.free_port()  -- a loopback TCP port that nobody listens on now
 *   process.mkdtemp(prefix) -- a new private directory
 *
 * A child runs in a process group of its own (so a signal reaches what it
 * starts too), with stdin from /dev/null, stdout and stderr appended to
 * its log file, no descriptor of ours, an empty signal mask and default
 * dispositions (the loop blocks SIGINT/SIGTERM/SIGHUP for its signalfd and
 * ignores SIGPIPE; a server must not inherit that). Between fork and exec
 * it asks the kernel for SIGKILL when its parent dies
 * (PR_SET_PDEATHSIG), so a crash or a SIGKILL of kubelua leaves no server
 * behind. Only async-signal-safe calls run in the child; everything it
 * needs is built before the fork. An exec failure comes back through a
 * close-on-exec pipe as an errno.
 *
 * The userdata owns the child: when it is collected (the Lua state closes)
 * a child still running is killed with its group and reaped. Polling, not
 * SIGCHLD: a caller in a task polls between sleeps. */
#define _GNU_SOURCE /* close_range, pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "lua_kube.h"
#include "mem.h"

#define PROC_MT "kubelua.process"
#define MAX_ARGS 256

typedef struct proc {
  pid_t pid;  /* 0 once reaped (or never started) */
  int status; /* waitpid's, once reaped */
} proc_t;

static const struct {
  const char *name;
  int sig;
} signames[] = {{"TERM", SIGTERM}, {"KILL", SIGKILL}, {"INT", SIGINT},
                {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"STOP", SIGSTOP},
                {"CONT", SIGCONT}};

/* Reaps p if it has ended (block: wait for it). Returns 1 when reaped. */
static int proc_reap(proc_t *p, int block) {
  if (p->pid <= 0) return 1;
  int st;
  pid_t r;
  do
    r = waitpid(p->pid, &st, block ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return 0;
  p->status = r == p->pid ? st : 0;
  p->pid = 0;
  return 1;
}

static int proc_gc(lua_State *L) {
  proc_t *p = lua_touserdata(L, 1);
  if (p->pid > 0 && !proc_reap(p, 0)) {
    kill(-p->pid, SIGKILL);
    proc_reap(p, 1);
  }
  return 0;
}

static proc_t *check_proc(lua_State *L) {
  return luaL_checkudata(L, 1, PROC_MT);
}

/* The child's side of spawn: never returns. */
static void child(const char *path, char *const *argv, int logfd, int errfd,
                  pid_t parent) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setpgid(0, 0);
  /* The parent may have died before this line: then nobody will kill. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
  int in = open("/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
    goto fail;
  if (errfd != 3 && (dup2(errfd, 3) < 0 || fcntl(3, F_SETFD, FD_CLOEXEC) < 0))
    goto fail;
  close_range(4, ~0U, 0);
  execv(path, argv);
fail:;
  int eno = errno;
  ssize_t w = write(3, &eno, sizeof eno);
  (void)w;
  _exit(127);
}

/* process.spawn{ path=, args={…}, log= } -> proc, or nil, message.
 * path: the executable (no PATH search); args: argv[1..]; log: a file
 * that gets stdout and stderr (appended, created 0600). */
static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "path");
  const char *path = lua_tostring(L, -1);
  if (lua_type(L, -1) != LUA_TSTRING)
    return kl_lua_error(L, "process.spawn", "opts.path must be a string");
  lua_getfield(L, 1, "log");
  const char *log = lua_tostring(L, -1);
  if (lua_type(L, -1) != LUA_TSTRING)
    return kl_lua_error(L, "process.spawn", "opts.log must be a string");
  lua_getfield(L, 1, "args");
  int args = lua_gettop(L);
  size_t nargs = 0;
  if (!lua_isnil(L, args)) {
    if (!lua_istable(L, args))
      return kl_lua_error(L, "process.spawn", "opts.args must be a list");
    nargs = lua_objlen(L, args);
  }
  if (nargs > MAX_ARGS)
    return kl_lua_error(L, "process.spawn", "more than %d args", MAX_ARGS);
  for (size_t i = 1; i <= nargs; i++) {
    lua_rawgeti(L, args, (int)i);
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
      return kl_lua_error(L, "process.spawn", "opts.args[%zu] must be a string",
                          i);
  }
  /* The args are on the stack now, so their strings stay put. */
  proc_t *p = lua_newuserdata(L, sizeof *p);
  p->pid = 0;
  p->status = 0;
  luaL_getmetatable(L, PROC_MT);
  lua_setmetatable(L, -2);

  char **argv = kl_xcalloc(nargs + 2, sizeof *argv);
  argv[0] = (char *)path;
  for (size_t i = 1; i <= nargs; i++)
    argv[i] = (char *)lua_tostring(L, args + (int)i);
  int logfd = -1, ep[2] = {-1, -1}, nret = 1;
  char msg[512] = "";
  logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (logfd < 0) {
    snprintf(msg, sizeof msg, "cannot open %s: %s", log, strerror(errno));
    goto done;
  }
  if (pipe2(ep, O_CLOEXEC) != 0) {
    snprintf(msg, sizeof msg, "pipe: %s", strerror(errno));
    goto done;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(msg, sizeof msg, "fork: %s", strerror(errno));
    goto done;
  }
  if (pid == 0) child(path, argv, logfd, ep[1], parent);
  /* Both sides set the group, so a signal sent right after spawn returns
   * reaches it whichever runs first. */
  setpgid(pid, pid);
  p->pid = pid;
  close(ep[1]);
  ep[1] = -1;
  int eno = 0;
  ssize_t r;
  do
    r = read(ep[0], &eno, sizeof eno);
  while (r < 0 && errno == EINTR);
  if (r == (ssize_t)sizeof eno) {
    proc_reap(p, 1);
    snprintf(msg, sizeof msg, "cannot run %s: %s", path, strerror(eno));
  }
done:
  if (logfd >= 0) close(logfd);
  if (ep[0] >= 0) close(ep[0]);
  if (ep[1] >= 0) close(ep[1]);
  free(argv);
  if (*msg) {
    lua_pushnil(L);
    lua_pushstring(L, msg);
    nret = 2;
  }
  return nret;
}

static int l_pid(lua_State *L) {
  proc_t *p = check_proc(L);
  if (p->pid <= 0) return 0;
  lua_pushinteger(L, p->pid);
  return 1;
}

/* p:poll() -> nil while the child runs; "exited", code or "signaled",
 * signum once it has ended. */
static int l_poll(lua_State *L) {
  proc_t *p = check_proc(L);
  if (!proc_reap(p, 0)) return 0;
  if (WIFSIGNALED(p->status)) {
    lua_pushliteral(L, "signaled");
    lua_pushinteger(L, WTERMSIG(p->status));
  } else {
    lua_pushliteral(L, "exited");
    lua_pushinteger(L, WEXITSTATUS(p->status));
  }
  return 2;
}

/* p:kill(name) -> true: sends SIGname ("TERM", "KILL", …) to the child's
 * process group; false when it has already been reaped. */
static int l_kill(lua_State *L) {
  proc_t *p = check_proc(L);
  const char *name = luaL_checkstring(L, 2);
  int sig = 0;
  for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
    if (strcmp(name, signames[i].name) == 0) sig = signames[i].sig;
  if (!sig) return kl_lua_error(L, "process.kill", "unknown signal %s", name);
  if (p->pid <= 0 || proc_reap(p, 0)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (kill(-p->pid, sig) != 0 && errno == ESRCH) kill(p->pid, sig);
  lua_pushboolean(L, 1);
  return 1;
}

/* process.free_port() -> a TCP port on 127.0.0.1 that was free a moment
 * ago (the kernel's pick for port 0), or nil, message. */
static int l_free_port(lua_State *L) {
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
           getsockname(fd, (struct sockaddr *)&sa, &len) == 0;
  int eno = errno;
  if (fd >= 0) close(fd);
  if (!ok) {
    lua_pushnil(L);
    lua_pushfstring(L, "free port: %s", strerror(eno));
    return 2;
  }
  lua_pushinteger(L, ntohs(sa.sin_port));
  return 1;
}

/* process.mkdtemp(prefix) -> the path of a new directory (mode 0700)
 * named prefix .. six random characters, or nil, message. */
static int l_mkdtemp(lua_State *L) {
  size_t n;
  const char *prefix = luaL_checklstring(L, 1, &n);
  char *tmpl = kl_xmalloc(n + 7);
  memcpy(tmpl, prefix, n);
  memcpy(tmpl + n, "XXXXXX", 7);
  int nret = 1;
  if (mkdtemp(tmpl)) {
    lua_pushstring(L, tmpl);
  } else {
    lua_pushnil(L);
    lua_pushfstring(L, "mkdtemp %sXXXXXX: %s", prefix, strerror(errno));
    nret = 2;
  }
  free(tmpl);
  return nret;
}

int kl_luaopen_process(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"pid", l_pid}, {"poll", l_poll}, {"kill", l_kill}, {NULL, NULL}};
  static const luaL_Reg funcs[] = {{"spawn", l_spawn},
                                   {"free_port", l_free_port},
                                   {"mkdtemp", l_mkdtemp},
                                   {NULL, NULL}};
  if (luaL_newmetatable(L, PROC_MT)) {
    lua_pushcfunction(L, proc_gc);
    lua_setfield(L, -2, "__gc");
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_setfuncs(L, funcs, 0);
  return 1;
}
