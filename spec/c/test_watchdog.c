/* test_watchdog.c — the watchdog thread: a run past the hang timeout is
 * reported once (the hang callback armed, a traceback taken, disarmed),
 * short runs never are, and /healthz gets a 500 from the watchdog while a
 * run hangs and nothing from it afterwards.
 *
 * The watchdog measures how long the loop's thread is really away, on the
 * process's clock and in its own thread, so these tests wait for it: with
 * hang timeouts of a few tens of milliseconds and bounds of seconds. */
#define _DEFAULT_SOURCE /* usleep */
#include "watchdog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

typedef struct hang {
  pthread_mutex_t mu;
  int armed, disarmed;
} hang_t;

static void on_hang(void *ud, int arm) {
  hang_t *h = ud;
  pthread_mutex_lock(&h->mu);
  if (arm)
    h->armed++;
  else
    h->disarmed++;
  pthread_mutex_unlock(&h->mu);
}

static int count(hang_t *h, int armed) {
  pthread_mutex_lock(&h->mu);
  int n = armed ? h->armed : h->disarmed;
  pthread_mutex_unlock(&h->mu);
  return n;
}

/* Waits (at most 10 s) until the hang callback has run n times with arm. */
static int wait_count(hang_t *h, int armed, int n) {
  for (int i = 0; i < 10000 && count(h, armed) < n; i++)
    usleep(1000);
  return count(h, armed) >= n;
}

/* stderr into a file while a test runs, to read the log lines back. */
typedef struct capture {
  int saved;
  FILE *f;
} capture_t;

static void capture_start(capture_t *c) {
  fflush(stderr);
  c->f = tmpfile();
  c->saved = dup(2);
  dup2(fileno(c->f), 2);
}

/* Restores stderr; returns what was written (free it). */
static char *capture_end(capture_t *c) {
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  long n = ftell(c->f);
  char *s = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
  rewind(c->f);
  size_t got = fread(s, 1, (size_t)(n > 0 ? n : 0), c->f);
  s[got] = '\0';
  fclose(c->f);
  return s;
}

static void test_reports_a_run_past_the_timeout_once(void) {
  hang_t h = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
  capture_t cap;
  capture_start(&cap);
  kl_watchdog_t *wd = kl_watchdog_new(0.05, on_hang, &h);
  KT_TRUE(wd != NULL);
  KT_EQ_INT(kl_watchdog_wants_trace(wd), 0);
  kl_watchdog_enter(wd, "task worker#1");
  kl_watchdog_enter(wd, "reconcile of ns/a (controller q)"); /* renamed */
  KT_TRUE(wait_count(&h, 1, 1));
  KT_EQ_INT(kl_watchdog_wants_trace(wd), 1); /* the hook's question */
  kl_watchdog_set_trace(wd, "stack traceback:\n\tx.lua:1: in main chunk");
  KT_EQ_INT(kl_watchdog_wants_trace(wd), 0);
  KT_TRUE(wait_count(&h, 0, 1));
  usleep(200000); /* many ticks: still reported once */
  KT_EQ_INT(count(&h, 1), 1);
  kl_watchdog_leave(wd);
  kl_watchdog_free(wd);
  char *log = capture_end(&cap);
  /* the time it names depends on the machine's load */
  const char *line = strstr(log, " ERROR reconcile of ns/a (controller q) has "
                                 "not yielded for ");
  KT_TRUE(line != NULL);
  KT_TRUE(line && strstr(line, " s\n    stack traceback:\n        x.lua:1: "
                               "in main chunk\n") != NULL);
  KT_TRUE(strstr(log, " INFO  reconcile of ns/a (controller q) yielded "
                      "after ") != NULL);
  KT_TRUE(strstr(log, "/healthz") == NULL); /* no probes to fail */
  free(log);
}

static void test_short_runs_are_not_reported(void) {
  hang_t h = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
  kl_watchdog_t *wd = kl_watchdog_new(1, on_hang, &h);
  for (int i = 0; i < 150; i++) { /* 1.5 s of runs of 10 ms */
    kl_watchdog_enter(wd, "task t");
    usleep(10000);
    kl_watchdog_leave(wd);
  }
  KT_EQ_INT(count(&h, 1), 0);
  KT_EQ_INT(kl_watchdog_wants_trace(wd), 0);
  kl_watchdog_free(wd);
}

/* A listening socket on 127.0.0.1, non-blocking like the HTTP server's. */
static int listen_local(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sl) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

/* Sends a GET /healthz; returns the connection. */
static int get_healthz(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons((unsigned short)port);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads what arrives on fd within `ms` milliseconds, until its end. */
static size_t read_for(int fd, char *buf, size_t cap, int ms) {
  size_t n = 0;
  struct pollfd p = {fd, POLLIN, 0};
  while (n < cap - 1 && poll(&p, 1, ms) > 0) {
    ssize_t got = read(fd, buf + n, cap - 1 - n);
    if (got <= 0) break;
    n += (size_t)got;
  }
  buf[n] = '\0';
  return n;
}

static void test_answers_healthz_while_a_run_hangs(void) {
  hang_t h = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
  int port = 0, lfd = listen_local(&port);
  KT_TRUE(lfd >= 0);
  capture_t cap;
  capture_start(&cap);
  kl_watchdog_t *wd = kl_watchdog_new(0.05, on_hang, &h);
  kl_watchdog_set_probes(wd, lfd);
  kl_watchdog_enter(wd, "reconcile of ns/a (controller q)");
  KT_TRUE(wait_count(&h, 0, 1)); /* reported, without a traceback */
  int c = get_healthz(port);
  KT_TRUE(c >= 0);
  char buf[1024];
  read_for(c, buf, sizeof buf, 10000);
  close(c);
  static const char head[] = "HTTP/1.1 500 Internal Server Error\r\n"
                             "Content-Type: text/plain; charset=utf-8\r\n";
  KT_EQ_MEM(buf, strlen(head), head);
  KT_TRUE(strstr(buf, "\r\nConnection: close\r\n\r\nreconcile of ns/a "
                      "(controller q) has not yielded for ") != NULL);
  kl_watchdog_leave(wd);
  /* the loop is back: the watchdog leaves the socket to it */
  c = get_healthz(port);
  KT_EQ_INT(read_for(c, buf, sizeof buf, 300), 0);
  close(c);
  kl_watchdog_free(wd);
  close(lfd);
  char *log = capture_end(&cap);
  KT_TRUE(strstr(log, " has not yielded for ") != NULL);
  KT_TRUE(strstr(log, " s; /healthz fails until it does\n") != NULL);
  KT_TRUE(strstr(log, " s; /healthz is ok again\n") != NULL);
  KT_TRUE(strstr(log, "stack traceback") == NULL);
  free(log);
}

int main(void) {
  KT_RUN(test_reports_a_run_past_the_timeout_once);
  KT_RUN(test_short_runs_are_not_reported);
  KT_RUN(test_answers_healthz_while_a_run_hangs);
  return KT_DONE();
}
