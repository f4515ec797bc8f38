/* ckdir.c — the layout of a --checkpoint directory, the one statement of
 * it that the runtime (checkpoint.c and the ckpt_*.c files) and the
 * supervisor gslrun both link: the names, what counts as a complete
 * checkpoint, which is the newest, and a manifest's run identity.
 *
 * DIR/step-NNNNNNNN/ (the steps done, 8 digits or more) holds one .npy
 * file per param and per state, NAME.npy, of the tensor's global shape
 * in C order, exactly as numpy.save writes it (header padded so that the
 * data starts at a multiple of 64 bytes), and manifest.json (its schema:
 * ckpt_manifest.c). A name is read back as a step only with 1 to 18
 * digits (CKDIR_MAX_DIGITS): --steps is at most 18 digits (options.c),
 * so the runtime never writes a longer one, and a 19th digit could pass
 * what an int64 holds; any other name is not a checkpoint, and neither
 * the runtime (resuming, pruning, the start's check of DIR) nor gslrun
 * (the newest it restarts from, the runs it notes) looks at it. A
 * directory is a complete checkpoint when it holds manifest.json as a
 * regular file; an entry that is a symbolic link is never one
 * (CKDIR_LINK), and a manifest is never read through a link. The newest
 * is the complete checkpoint of the highest step. DIR/step-N.tmp.PID/ is
 * a checkpoint being written by rank 0 of process PID, and
 * DIR/step-N.tmp.old.PID/ an existing one moved aside to be replaced;
 * both are temporaries. DIR/.lock holds "pid PID host HOST" of the run
 * that has DIR (ckpt_lock.c takes it; gslrun reads it).
 *
 * Every function works relative to DIR opened once (openat, fstatat), as
 * the runtime's rank 0 keeps it; gslrun opens DIR for each look. A
 * manifest's run identity is read with jansson as the runtime reads the
 * whole manifest (no key twice, at most 64 MiB, not through a link), but
 * checked only for its length: a run identity is 32 hex digits. No MPI:
 * the errors go into the caller's buffer (seterr.c). */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckdir.h"
#include "seterr.h"

int64_t gslrt_ckdir_step_of(const char *name) {
  const char *p = name + 5;
  if (strncmp(name, "step-", 5) || !*p || strspn(p, "0123456789") != strlen(p) || strlen(p) > CKDIR_MAX_DIGITS)
    return -1;
  return strtoll(p, NULL, 10);
}

int gslrt_ckdir_is_temp(const char *name) { return !strncmp(name, "step-", 5) && strstr(name, ".tmp."); }

int gslrt_ckdir_step_name(char *buf, size_t cap, int64_t step) {
  return snprintf(buf, cap, "step-%08lld", (long long)step);
}

int gslrt_ckdir_temp_name(char *buf, size_t cap, int64_t step, long pid) {
  return snprintf(buf, cap, "step-%08lld.tmp.%ld", (long long)step, pid);
}

int gslrt_ckdir_aside_name(char *buf, size_t cap, const char *final, long pid) {
  return snprintf(buf, cap, "%s.tmp.old.%ld", final, pid);
}

int gslrt_ckdir_join(char *buf, const char *dir, const char *name) {
  return snprintf(buf, CKDIR_PATH, "%s/%s", dir, name) < CKDIR_PATH;
}

int gslrt_ckdir_entry_kind(int dfd, const char *name) {
  char path[CKDIR_PATH];
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return CKDIR_NONE;
  if (S_ISLNK(st.st_mode))
    return CKDIR_LINK;
  if (!S_ISDIR(st.st_mode))
    return CKDIR_FILE;
  return gslrt_ckdir_join(path, name, CKDIR_MANIFEST) && fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                 S_ISREG(st.st_mode)
             ? CKDIR_COMPLETE
             : CKDIR_BARE_DIR;
}

DIR *gslrt_ckdir_list(int dfd) {
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (fd >= 0 && !d)
    close(fd);
  return d;
}

int64_t gslrt_ckdir_newest(int dfd, char *found, size_t cap) {
  DIR *d = gslrt_ckdir_list(dfd);
  struct dirent *e;
  int64_t best = -1;
  if (!d)
    return -2;
  while ((e = readdir(d))) {
    int64_t s = gslrt_ckdir_step_of(e->d_name);
    if (s > best && gslrt_ckdir_entry_kind(dfd, e->d_name) == CKDIR_COMPLETE) {
      best = s;
      snprintf(found, cap, "%s", e->d_name);
    }
  }
  closedir(d);
  return best;
}

char *gslrt_ckdir_read_manifest_fd(int fd, const char *path, size_t *len, char *err, int errlen) {
  struct stat st;
  char *text = NULL;
  size_t got = 0;
  if (fstat(fd, &st) != 0) {
    gslrt_seterr(err, errlen, "cannot read %s: %s", path, strerror(errno));
    goto fn_fail;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > CKDIR_MAX_MANIFEST) {
    gslrt_seterr(err, errlen, "%s: %s", path,
                 S_ISREG(st.st_mode) ? "longer than 64 MiB, not a manifest" : "not a regular file");
    goto fn_fail;
  }
  if (!(text = malloc((size_t)st.st_size + 1))) {
    gslrt_seterr(err, errlen, "%s: out of memory", path);
    goto fn_fail;
  }
  while (got < (size_t)st.st_size) {
    ssize_t k = pread(fd, text + got, (size_t)st.st_size - got, (off_t)got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      gslrt_seterr(err, errlen, "cannot read %s: %s", path, k < 0 ? strerror(errno) : "it shrank");
      goto fn_fail;
    }
    got += (size_t)k;
  }
  text[got] = 0;
  *len = got;
  return text;
fn_fail:
  free(text);
  return NULL;
}

/* DIR/name/manifest.json opened for reading, not through a link, its
 * path (name/manifest.json, "" if too long) in path; -1 with errno. */
static int open_manifest(int dfd, const char *name, char *path) {
  return gslrt_ckdir_join(path, name, CKDIR_MANIFEST) ? openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
}

char *gslrt_ckdir_read_manifest(int dfd, const char *name, size_t *len, char *err, int errlen) {
  char path[CKDIR_PATH] = "";
  char *text = NULL;
  int fd = open_manifest(dfd, name, path);
  if (fd < 0)
    gslrt_seterr(err, errlen, "cannot read %s: %s", path, strerror(errno));
  else
    text = gslrt_ckdir_read_manifest_fd(fd, path, len, err, errlen);
  if (fd >= 0)
    close(fd);
  return text;
}

int gslrt_ckdir_run_of(int dfd, const char *name, char *run, struct timespec *mtime) {
  char path[CKDIR_PATH] = "", err[256];
  size_t len = 0;
  struct stat st;
  int fd = open_manifest(dfd, name, path);
  char *text = fd >= 0 ? gslrt_ckdir_read_manifest_fd(fd, path, &len, err, sizeof err) : NULL;
  json_t *doc = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  const char *s = json_string_value(json_object_get(doc, "run"));
  int rc = s && strlen(s) == 32 && (!mtime || fstat(fd, &st) == 0) ? 0 : -1;
  if (rc == 0) {
    memcpy(run, s, CKDIR_RUN);
    if (mtime)
      *mtime = st.st_mtim;
  }
  json_decref(doc);
  free(text);
  if (fd >= 0)
    close(fd);
  return rc;
}

int gslrt_ckdir_lock_line(char *buf, size_t cap, long pid, const char *host) {
  return snprintf(buf, cap, "pid %ld host %s\n", pid, host);
}

int gslrt_ckdir_lock_holder(const char *line, long *pid, char *host) {
  return sscanf(line, "pid %ld host %255s", pid, host) == 2;
}
