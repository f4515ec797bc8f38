/* fuzz_server.c — a fork server for scripts/fuzz.py: gslc loaded once and
 * run many times, so that a run no longer pays exec, the dynamic loader
 * (libLLVM's relocations and constructors) and the sanitizers' start.
 *
 * It is linked with a target whose main was renamed fuzz_target_main:
 * gslc's compiler/main.c compiled with -Dmain=fuzz_target_main (Makefile.am's
 * scripts/gslc_server, built by scripts/fuzz.sh alone). A compiled
 * program's object would do as well (`objcopy --redefine-sym
 * main=fuzz_target_main`), but gains nothing: its gslrt_main calls MPI_Init
 * first, whose singleton start is most of a run and cannot happen in the
 * parent. The parent never calls into the target.
 *
 * Two ways to run a request:
 *   - fresh: a child forked for it alone, which starts from the state the
 *     loader left, as an exec'd gslc would. In this machine's VM most of
 *     its cost is the copy-on-write faults of the child's first writes
 *     (some 80 ms for a small program against 5 ms of gslc's work);
 *   - persistent: one long-lived child runs request after request in
 *     process, up to PERSIST_RUNS of them (the diagnostics and their
 *     counts live in each run's Diag, the rest in arenas and structs each
 *     run frees; only diag.c's list of the files read, for the build
 *     record and the output's check, outlives a run). A run that ends the child
 *     (a sanitizer's report, a signal, exit() from gslc, a timeout) is
 *     answered with how it ended and the next request starts a new child;
 *     fuzz.py runs any such result again fresh before it counts it, since
 *     an earlier run of the same child may have caused it (UBSan, for
 *     one, reports each place once per process).
 *
 * Protocol, on stdin and stdout: a request is NUL-terminated fields ended
 * by an empty one:
 *   TIMEOUT_MS \0 FLAGS \0 DIR \0 STDOUT_PATH \0 STDERR_PATH \0 ARGV0 \0 ARGV1 \0 ... \0 \0
 * FLAGS: "l" for a fresh run ending with LeakSanitizer's check (exit
 * status 23 and a report if the target leaked), as exit() would; "p" for
 * a persistent run; "-" for a fresh run without the check, which makes a
 * small run several times cheaper (the check scans libLLVM's data). The
 * target runs in DIR, with stdin /dev/null and stdout and stderr written
 * to the two files (created or truncated, relative to DIR); the answer is
 * one line: "exit N", "signal N", or "timeout" (after TIMEOUT_MS the
 * child's process group is killed). A child ends by _exit: the target's
 * static destructors and the sanitizers' teardown cost more than a run. A
 * malformed request or EOF ends the server. */
#ifndef _GNU_SOURCE /* configure may have defined it */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int fuzz_target_main(int argc, char **argv);
void __lsan_do_leak_check(void) __attribute__((weak)); /* LeakSanitizer's, when linked in */

#define MAX_FIELDS 4096
#define PERSIST_RUNS 1000 /* requests a persistent child runs before a new one starts */

typedef struct Reader {
  int fd;     /* read from */
  char *buf;  /* bytes read */
  size_t len; /* of them */
  size_t cap; /* buf's size */
  size_t pos; /* the start of the next request */
} Reader;

/* The next request's fields, pointing into r->buf (valid until the next
 * call), with their bytes in *raw and *rawlen; their count, or -1 at EOF
 * or on a malformed request. */
static int read_request(Reader *r, char **fields, const char **raw, size_t *rawlen) {
  if (r->pos) { /* drop the last request */
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
  }
  for (;;) {
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i < r->len; i++) {
      if (r->buf[i] != '\0')
        continue;
      if (i == start) { /* the empty field: the request is whole */
        r->pos = i + 1;
        *raw = r->buf;
        *rawlen = r->pos;
        fields[n] = NULL;
        return n;
      }
      if (n == MAX_FIELDS)
        return -1;
      fields[n++] = r->buf + start;
      start = i + 1;
    }
    if (r->len == r->cap) {
      r->cap = r->cap ? 2 * r->cap : 1 << 16;
      if (!(r->buf = realloc(r->buf, r->cap)))
        return -1;
    }
    ssize_t got = read(r->fd, r->buf + r->len, r->cap - r->len);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return -1;
    r->len += (size_t)got;
  }
}

static bool write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

static void answer(const char *fmt, int n) {
  char line[64];
  int k = snprintf(line, sizeof line, fmt, n);
  if (!write_all(1, line, (size_t)k))
    exit(1);
}

/* In a child: DIR, stdout and stderr of the request's fields[2..4] in
 * place; false if one cannot be. */
static bool redirect(char **fields) {
  int o = -1, e = -1;
  bool ok = chdir(fields[2]) == 0 && (o = open(fields[3], O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0 &&
            (e = open(fields[4], O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0 && dup2(o, 1) >= 0 && dup2(e, 2) >= 0;
  if (o > 2)
    close(o);
  if (e > 2)
    close(e);
  return ok;
}

/* In a new child: its own process group, signals as an exec'd process
 * has them, stdin and stdout /dev/null (stdout, the server's answers, is
 * redirected per request). */
static void child_start(const sigset_t *old) {
  setpgid(0, 0);
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, old, NULL);
  int in = open("/dev/null", O_RDWR);
  if (in < 0 || dup2(in, 0) < 0 || dup2(in, 1) < 0)
    _exit(125);
  if (in > 2)
    close(in);
}

/* A fresh child: runs the request in fields, then ends; never returns. */
static void fresh_child(char **fields, int n, const sigset_t *old) {
  child_start(old);
  if (!redirect(fields))
    _exit(125);
  int rc = fuzz_target_main(n - 5, fields + 5);
  fflush(NULL);
  if (fields[1][0] == 'l' && __lsan_do_leak_check)
    __lsan_do_leak_check();
  _exit(rc);
}

/* A persistent child: reads requests from fd in and answers each on fd
 * out, until EOF or PERSIST_RUNS of them; never returns. */
static void persistent_child(int in, int out, const sigset_t *old) {
  child_start(old);
  Reader r = {in, NULL, 0, 0, 0};
  static char *fields[MAX_FIELDS + 1];
  const char *raw;
  size_t rawlen;
  int n;
  for (int runs = 0; runs < PERSIST_RUNS && (n = read_request(&r, fields, &raw, &rawlen)) >= 6; runs++) {
    if (!redirect(fields))
      _exit(125);
    int rc = fuzz_target_main(n - 5, fields + 5);
    fflush(NULL);
    char line[32];
    int k = snprintf(line, sizeof line, "exit %d\n", rc);
    if (!write_all(out, line, (size_t)k))
      break;
  }
  _exit(0);
}

typedef struct Persistent {
  pid_t pid;    /* the child, or 0 */
  int to;       /* its requests' pipe */
  int from;     /* its answers' pipe */
  int runs;     /* requests it was sent */
} Persistent;

static void persistent_end(Persistent *p, int *status, bool kill_it) {
  if (kill_it) {
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL);
  }
  close(p->to);
  close(p->from);
  waitpid(p->pid, status, 0);
  p->pid = 0;
}

/* The milliseconds left until end, at least 0. */
static int ms_left(const struct timespec *end) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  long ms = (end->tv_sec - now.tv_sec) * 1000L + (end->tv_nsec - now.tv_nsec) / 1000000L;
  return ms < 0 ? 0 : ms > 1000000000L ? 1000000000 : (int)ms;
}

/* Runs a persistent request (raw: its bytes) in p's child, started if
 * there is none; answers it. */
static void run_persistent(Persistent *p, const char *raw, size_t rawlen, const struct timespec *end,
                           const sigset_t *old) {
  if (p->pid && p->runs == PERSIST_RUNS) {
    int status;
    persistent_end(p, &status, false);
  }
  if (!p->pid) {
    int a[2], b[2];
    if (pipe(a) != 0 || pipe(b) != 0)
      exit(1);
    pid_t pid = fork();
    if (pid < 0)
      exit(1);
    if (pid == 0) {
      close(a[1]);
      close(b[0]);
      persistent_child(a[0], b[1], old);
    }
    setpgid(pid, pid);
    close(a[0]);
    close(b[1]);
    *p = (Persistent){pid, a[1], b[0], 0};
  }
  p->runs++;
  int status;
  if (!write_all(p->to, raw, rawlen)) { /* it died between requests: say how */
    persistent_end(p, &status, true);
    answer("signal %d\n", SIGPIPE);
    return;
  }
  char line[64];
  size_t got = 0;
  for (;;) {
    struct pollfd pf = {p->from, POLLIN, 0};
    int k = poll(&pf, 1, ms_left(end));
    if (k == 0) {
      persistent_end(p, &status, true);
      answer("timeout\n", 0);
      return;
    }
    if (k < 0 && errno == EINTR)
      continue;
    ssize_t m = k > 0 ? read(p->from, line + got, sizeof line - 1 - got) : -1;
    if (m < 0 && errno == EINTR)
      continue;
    if (m <= 0) { /* it ended during the run: its status is the answer */
      persistent_end(p, &status, false);
      if (WIFSIGNALED(status))
        answer("signal %d\n", WTERMSIG(status));
      else
        answer("exit %d\n", WEXITSTATUS(status));
      return;
    }
    got += (size_t)m;
    if (memchr(line, '\n', got)) {
      if (!write_all(1, line, got))
        exit(1);
      return;
    }
    if (got == sizeof line - 1)
      exit(1);
  }
}

/* Runs a fresh request in a child of its own; answers it. */
static void run_fresh(char **fields, int n, const struct timespec *end, const sigset_t *old, const sigset_t *chld) {
  pid_t pid = fork();
  if (pid < 0)
    exit(1);
  if (pid == 0)
    fresh_child(fields, n, old);
  setpgid(pid, pid); /* as the child does: no race with the kill below */
  int status;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      break;
    int ms = ms_left(end);
    if (ms == 0) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      answer("timeout\n", 0);
      return;
    }
    struct timespec wait = {ms / 1000, (ms % 1000) * 1000000L};
    sigtimedwait(chld, NULL, &wait); /* a SIGCHLD (of this child) or the time left */
  }
  if (WIFSIGNALED(status))
    answer("signal %d\n", WTERMSIG(status));
  else
    answer("exit %d\n", WEXITSTATUS(status));
}

int main(void) {
  Reader r = {0, NULL, 0, 0, 0};
  static char *fields[MAX_FIELDS + 1];
  Persistent p = {0, -1, -1, 0};
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old); /* waited for with sigtimedwait */
  signal(SIGPIPE, SIG_IGN);            /* a persistent child's pipe closed: write fails instead */
  const char *raw;
  size_t rawlen;
  int n;
  while ((n = read_request(&r, fields, &raw, &rawlen)) >= 6) {
    long ms = strtol(fields[0], NULL, 10);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += ms / 1000;
    end.tv_nsec += (ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
      end.tv_sec++;
      end.tv_nsec -= 1000000000L;
    }
    if (fields[1][0] == 'p')
      run_persistent(&p, raw, rawlen, &end, &old);
    else
      run_fresh(fields, n, &end, &old, &chld);
  }
  if (p.pid) {
    int status;
    persistent_end(&p, &status, false);
  }
  return n == -1 ? 0 : 1;
}
