/* fuzz_server.c — a fork server for scripts/fuzz.py: a program loaded once
 * (the sanitized gslc, or a compiled GSL program) and run many times by
 * forking, so that a run no longer pays exec, the dynamic loader (libLLVM's
 * relocations and constructors) and the sanitizers' start.
 *
 * It is linked with a target whose main was renamed fuzz_target_main:
 * gslc's compiler/main.c compiled with -Dmain=fuzz_target_main (Makefile.am's
 * scripts/gslc_server, built by scripts/fuzz.sh alone). A compiled program's
 * object would do as well (`objcopy --redefine-sym main=fuzz_target_main`),
 * but gains nothing: its gslrt_main calls MPI_Init first, whose singleton
 * start is most of a run and cannot happen in the parent. The parent never
 * calls into the target: each child
 * starts from the state the loader left, as an exec'd process would, and
 * the child's exit runs the target's atexit handlers (LeakSanitizer's
 * check among them).
 *
 * Protocol, on stdin and stdout: a request is NUL-terminated fields ended
 * by an empty one:
 *   TIMEOUT_MS \0 LEAKS \0 DIR \0 STDOUT_PATH \0 STDERR_PATH \0 ARGV0 \0 ARGV1 \0 ... \0 \0
 * The child runs in DIR in a process group of its own, stdin /dev/null and
 * stdout and stderr written to the two files (created or truncated,
 * relative to DIR); the answer is one line: "exit N", "signal N", or
 * "timeout" (after TIMEOUT_MS the child's group is killed). With LEAKS 1
 * the child ends with LeakSanitizer's check (exit status 23 and a report
 * if the target leaked), as exit() would; with 0 it does not, which makes
 * a small run several times cheaper (the check scans libLLVM's data). The
 * child ends by _exit either way: the target's static destructors and
 * the sanitizers' teardown cost more than the run. A malformed request or
 * EOF ends the server. */
#ifndef _GNU_SOURCE /* configure may have defined it */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
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

typedef struct Reader {
  char *buf;  /* bytes read from stdin */
  size_t len; /* of them */
  size_t cap; /* buf's size */
  size_t pos; /* the start of the next request */
} Reader;

/* The next request's fields, pointing into r->buf (valid until the next
 * call); their count, or -1 at EOF or on a malformed request. */
static int read_request(Reader *r, char **fields) {
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
    ssize_t got = read(0, r->buf + r->len, r->cap - r->len);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return -1;
    r->len += (size_t)got;
  }
}

static void answer(const char *fmt, int n) {
  char line[64];
  int k = snprintf(line, sizeof line, fmt, n);
  if (write(1, line, (size_t)k) != k)
    exit(1);
}

/* In the child: its files in place, then the target; never returns. */
static void child(bool leaks, char *dir, char *out, char *err, int argc, char **argv, const sigset_t *old) {
  setpgid(0, 0);
  signal(SIGCHLD, SIG_DFL);
  sigprocmask(SIG_SETMASK, old, NULL);
  if (chdir(dir) != 0)
    _exit(125);
  int in = open("/dev/null", O_RDONLY);
  int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
    _exit(125);
  close(in);
  close(o);
  close(e);
  int rc = fuzz_target_main(argc, argv);
  fflush(NULL);
  if (leaks && __lsan_do_leak_check)
    __lsan_do_leak_check();
  _exit(rc);
}

int main(void) {
  Reader r = {0};
  static char *fields[MAX_FIELDS + 1];
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old); /* waited for with sigtimedwait */
  int n;
  while ((n = read_request(&r, fields)) >= 6) {
    long ms = strtol(fields[0], NULL, 10);
    int argc = n - 5;
    char **argv = fields + 5;
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0)
      return 1;
    if (pid == 0)
      child(fields[1][0] == '1', fields[2], fields[3], fields[4], argc, argv, &old);
    setpgid(pid, pid); /* as the child does: no race with the kill below */
    struct timespec end, now;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += ms / 1000;
    end.tv_nsec += (ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
      end.tv_sec++;
      end.tv_nsec -= 1000000000L;
    }
    int status;
    for (;;) {
      pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid)
        break;
      clock_gettime(CLOCK_MONOTONIC, &now);
      long left = (end.tv_sec - now.tv_sec) * 1000000000L + (end.tv_nsec - now.tv_nsec);
      if (left <= 0) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        status = -1;
        break;
      }
      struct timespec wait = {left / 1000000000L, left % 1000000000L};
      sigtimedwait(&chld, NULL, &wait); /* a SIGCHLD (of this child) or the time left */
    }
    if (status == -1)
      answer("timeout\n", 0);
    else if (WIFSIGNALED(status))
      answer("signal %d\n", WTERMSIG(status));
    else
      answer("exit %d\n", WEXITSTATUS(status));
  }
  return n == -1 ? 0 : 1;
}
