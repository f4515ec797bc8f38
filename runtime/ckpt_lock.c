/* ckpt_lock.c — the --checkpoint directory on rank 0: its lock, the
 * check of what it holds at the start, the commit of a checkpoint written,
 * pruning, and the readers' lock; the names it reads and makes are
 * ckdir.c's.
 *
 * The directory, as a database treats its data directory. Rank 0 opens DIR
 * once and does everything else relative to it (openat, fstatat, unlinkat,
 * renameat), never following a symbolic link in it: a link is removed
 * itself where gsl removes the entry, and refused where it would be read
 * as a checkpoint. It holds flock(2) on DIR/.lock for the whole run, so a
 * second job on DIR fails at once naming the first's pid and host, with
 * status GSLRT_EXIT_BUSY (5), before it opens any file of its own (the
 * lock is taken before the --metrics file is created). Each
 * run has an identity (128 random bits, in hex), written into every
 * manifest; --resume continues the identity of the checkpoint it resumes.
 * A run only prunes or replaces checkpoints of its own identity. At the
 * start, DIR must hold nothing named step-N but complete checkpoints, and
 * a run without --resume none at all: it would otherwise be mixing its
 * checkpoints with another run's.
 *
 * Readers beside a run. A training run prunes while generations read
 * (--checkpoint-every 1 --keep 1 removes a checkpoint every step), so
 * the reader locks what it reads: rank 0 opens DIR/step-N/manifest.json,
 * takes flock(LOCK_SH) on it (not waiting), checks that the name still
 * leads to that file (st_nlink > 0, the same inode by fstatat), reads
 * the manifest from it, and holds it until every rank has read every
 * tile; a checkpoint being removed or gone is looked for again, the
 * newest (find_newest). The pruner, before removing a checkpoint (or a
 * moved-aside one), opens its manifest and takes flock(LOCK_EX |
 * LOCK_NB): refused, a reader has it, and the checkpoint stays for a
 * later prune (DIR holds more than --keep meanwhile); granted, it holds
 * it while it removes the directory, so no reader starts on it
 * (remove_checkpoint). Should a checkpoint vanish while read all the
 * same (a pruner of an older gsl, or a step rewritten, moved aside),
 * rank 0 sees the name no longer leads to the locked manifest, and the
 * reading starts again from the newest, up to CKPT_READ_TRIES times
 * (vanished, checkpoint.c). --resume, which holds DIR/.lock, takes no
 * such lock. */
#include "ckpt.h"
#include "seterr.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CKPT_KEEP 2                /* complete checkpoints kept without --keep */
#define CKPT_FIND_TRIES 200        /* a reader's looks for the newest checkpoint, locked */
#define CKPT_FIND_WAIT_NS 10000000L /* between them (10 ms) */
#define CKPT_NONE_TRIES 3          /* of them, that find none at all */

/* ---- entries of DIR and the readers' lock ------------------------------------ */

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY), rc = -1;
  if (fd >= 0) {
    rc = fsync(fd);
    close(fd);
  }
  return rc;
}

/* Why DIR/name (of the given kind) is not a checkpoint gsl may use. */
static const char *not_checkpoint(int kind) {
  return kind == CKDIR_LINK  ? "is a symbolic link, not a checkpoint (gsl neither follows nor removes one)"
         : kind == CKDIR_FILE ? "is not a directory, so not a checkpoint"
                              : "has no manifest.json, so it is not a checkpoint, and gsl will not replace it";
}

int gslrt_ckpt_remove_entry(int dfd, const char *name) {
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d;
  struct dirent *e;
  if (fd < 0)
    return errno == ELOOP || errno == ENOTDIR ? unlinkat(dfd, name, 0) : -1;
  if (!(d = fdopendir(fd))) {
    close(fd);
    return -1;
  }
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      unlinkat(fd, e->d_name, 0);
  closedir(d);
  return unlinkat(dfd, name, AT_REMOVEDIR);
}

/* DIR/name/manifest.json opened (not through a link) and flock'd with how
 * (LOCK_SH or LOCK_EX, never waiting): its descriptor, or -1 with errno
 * (EWOULDBLOCK: another holds a lock that excludes this one). The
 * readers' lock: see "Readers beside a run" above. */
static int lock_manifest(int dfd, const char *name, int how) {
  char path[CKDIR_PATH];
  int fd =
      gslrt_ckdir_join(path, name, CKDIR_MANIFEST) ? openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
  if (fd >= 0 && flock(fd, how | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    fd = -1;
  }
  return fd;
}

int gslrt_ckpt_still_there(int dfd, const char *name, int fd) {
  char path[CKDIR_PATH];
  struct stat a, b;
  return fd >= 0 && fstat(fd, &a) == 0 && a.st_nlink > 0 && gslrt_ckdir_join(path, name, CKDIR_MANIFEST) &&
         fstatat(dfd, path, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Removes the checkpoint (or moved-aside one) DIR/name unless a reader
 * holds its manifest (LOCK_SH): with the manifest flock'd LOCK_EX, which
 * keeps new readers out until it is gone. 0 removed, 1 left for a later
 * prune (a reader has it), -1 with errno. An entry without a manifest (a
 * temporary never finished, a link) is removed as it is. */
static int remove_checkpoint(int dfd, const char *name) {
  int fd = lock_manifest(dfd, name, LOCK_EX), rc;
  if (fd < 0 && errno == EWOULDBLOCK)
    return 1;
  rc = gslrt_ckpt_remove_entry(dfd, name);
  if (fd >= 0) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return rc;
}

/* ---- the lock and the start's check ------------------------------------------ */

/* Takes DIR/.lock (flock, exclusive, not waiting) and writes our pid and
 * host into it; the descriptor stays open, and the lock held, until exit.
 * 0; GSLRT_EXIT_BUSY when another run holds it; -1 on another failure. */
static int take_lock(gslrt_ctx *ctx, int dfd, char *err) {
  const char *dir = ctx->opts.checkpoint;
  char host[256] = "", line[512];
  int fd = openat(dfd, CKDIR_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: cannot open %s/%s: %s", dir, dir, CKDIR_LOCK,
                 errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int busy = errno == EWOULDBLOCK;
    long pid = 0;
    ssize_t k = pread(fd, line, sizeof line - 1, 0);
    line[k > 0 ? k : 0] = 0;
    if (busy && gslrt_ckdir_lock_holder(line, &pid, host))
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: another run has this directory (pid %ld on host %s "
                   "holds %s/%s); wait for it to end, or give another directory", dir, pid, host, dir, CKDIR_LOCK);
    else if (busy)
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: another run has this directory (it holds %s/%s); "
                   "wait for it to end, or give another directory", dir, dir, CKDIR_LOCK);
    else
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: cannot lock %s/%s: %s", dir, dir, CKDIR_LOCK,
                   strerror(errno));
    close(fd);
    return busy ? GSLRT_EXIT_BUSY : -1;
  }
  if (gethostname(host, sizeof host - 1) != 0)
    snprintf(host, sizeof host, "unknown");
  int n = gslrt_ckdir_lock_line(line, sizeof line, (long)getpid(), host);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
    gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: cannot write %s/%s: %s", dir, dir, CKDIR_LOCK,
                 strerror(errno));
    close(fd);
    return -1;
  }
  ctx->ckpt_lock = fd;
  return 0;
}

/* Checks what DIR holds: every entry named step-N a complete checkpoint,
 * and none at all for a run without --resume. */
static int check_dir(gslrt_ctx *ctx, int dfd, char *err) {
  const char *dir = ctx->opts.checkpoint;
  DIR *d = gslrt_ckdir_list(dfd);
  struct dirent *e;
  int64_t newest = -1;
  int rc = 0;
  char name[CKDIR_NAME];
  if (!d) {
    gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: cannot read it: %s", dir, strerror(errno));
    return -1;
  }
  while ((e = readdir(d)) && rc == 0) {
    int64_t s = gslrt_ckdir_step_of(e->d_name);
    int kind = s >= 0 ? gslrt_ckdir_entry_kind(dfd, e->d_name) : CKDIR_NONE;
    if (s < 0 || kind == CKDIR_NONE)
      continue;
    if (kind != CKDIR_COMPLETE) {
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: %s/%s %s; move it away", dir, dir, e->d_name,
                   not_checkpoint(kind));
      rc = -1;
    } else if (s > newest) {
      newest = s;
    }
  }
  closedir(d);
  if (rc == 0 && newest >= 0 && !ctx->opts.resume) {
    gslrt_ckdir_step_name(name, sizeof name, newest);
    gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: it holds another run's checkpoints (the newest is "
                 "%s); add --resume to continue that run, or give another directory", dir, name);
    rc = -1;
  }
  return rc;
}

/* A new run's identity: 128 random bits in hex. */
static int new_run_id(char *run, char *err) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t k = getrandom(b + got, sizeof b - got, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint: cannot draw a run identity: %s", strerror(errno));
      return -1;
    }
    got += (size_t)k;
  }
  for (int i = 0; i < 16; i++)
    snprintf(run + 2 * i, 3, "%02x", b[i]);
  return 0;
}

void gslrt_checkpoint_open(gslrt_ctx *ctx) {
  const gslrt_options *op = &ctx->opts;
  const char *dir = op->checkpoint;
  char err[GSLRT_ERRLEN] = "";
  int status = 0;
  struct stat st;
  ctx->ckpt_dir = ctx->ckpt_lock = -1;
  if (op->checkpoint_every && !dir)
    gslrt_usage_error(ctx, "--checkpoint-every needs --checkpoint DIR");
  if (op->resume && !dir)
    gslrt_usage_error(ctx, "--resume needs --checkpoint DIR");
  if (op->keep && !dir)
    gslrt_usage_error(ctx, "--keep needs --checkpoint DIR");
  if (!dir)
    return;
  if (strlen(dir) > CKDIR_PATH - 2 * CKDIR_NAME)
    gslrt_usage_error(ctx, "--checkpoint: the directory name is too long");
  if (op->generate) { /* only read: no lock, so a run still training may be sampled */
    if (ctx->rank == 0 && (ctx->ckpt_dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
      gslrt_seterr(err, sizeof err, "--checkpoint %s: cannot open %s: %s", dir, dir,
                   errno == ENOTDIR ? "it is not a directory" : strerror(errno)), status = 1;
    gslrt_rank0_verdict(ctx, status, err);
    return;
  }
  if (ctx->rank == 0) {
    if (stat(dir, &st) != 0) {
      if (errno != ENOENT || mkdir(dir, 0777) != 0)
        gslrt_seterr(err, sizeof err, "--checkpoint %s: cannot create %s: %s", dir, dir, strerror(errno)),
            status = 1;
    } else if (!S_ISDIR(st.st_mode)) {
      gslrt_seterr(err, sizeof err, "--checkpoint %s: %s is not a directory", dir, dir), status = 1;
    } else if (access(dir, W_OK | X_OK) != 0) {
      gslrt_seterr(err, sizeof err, "--checkpoint %s: cannot write in %s: %s", dir, dir, strerror(errno)),
          status = 1;
    }
    if (!status && (ctx->ckpt_dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
      gslrt_seterr(err, sizeof err, "--checkpoint %s: cannot open %s: %s", dir, dir, strerror(errno)),
          status = 1;
    int locked = status ? 0 : take_lock(ctx, ctx->ckpt_dir, err);
    if (locked == GSLRT_EXIT_BUSY)
      status = GSLRT_EXIT_BUSY; /* not a failure of this run: gslrun ends at once, writing nothing */
    else if (!status && (locked != 0 || check_dir(ctx, ctx->ckpt_dir, err) != 0 || new_run_id(ctx->run_id, err) != 0))
      status = 1;
  }
  gslrt_rank0_verdict(ctx, status, err);
  gslrt_world_bcast(ctx, ctx->run_id, sizeof ctx->run_id, MPI_CHAR, 0, "the sharing of the run's id");
}

/* ---- a checkpoint written: commit and prune ---------------------------------- */

static int by_step(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

/* Removes, on rank 0, this run's complete checkpoints older than its
 * newest keep, and every leftover temporary but ours (a link one is
 * removed itself), each unless a reader holds it (remove_checkpoint: it
 * stays, past --keep, until a prune after the reader is done); a failure
 * is only a warning. */
void gslrt_ckpt_prune(gslrt_ctx *ctx, const char *mine) {
  const char *dir = ctx->opts.checkpoint;
  DIR *d = gslrt_ckdir_list(ctx->ckpt_dir);
  struct dirent *e;
  int64_t *steps = NULL;
  int n = 0, cap = 0, keep = ctx->opts.keep ? (int)ctx->opts.keep : CKPT_KEEP;
  char name[CKDIR_NAME], run[CKDIR_RUN];
  if (!d)
    return;
  while ((e = readdir(d))) {
    int64_t s = gslrt_ckdir_step_of(e->d_name);
    if (gslrt_ckdir_is_temp(e->d_name) && strcmp(e->d_name, mine)) {
      if (remove_checkpoint(ctx->ckpt_dir, e->d_name) < 0)
        fprintf(stderr, "%s: warning: cannot remove the leftover %s/%s: %s\n", ctx->prog, dir, e->d_name,
                strerror(errno));
    } else if (s >= 0 && gslrt_ckdir_entry_kind(ctx->ckpt_dir, e->d_name) == CKDIR_COMPLETE &&
               gslrt_ckdir_run_of(ctx->ckpt_dir, e->d_name, run, NULL) == 0 && !strcmp(run, ctx->run_id)) {
      if (n == cap) {
        int64_t *g = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
        if (!g)
          break;
        steps = g;
      }
      steps[n++] = s;
    }
  }
  closedir(d);
  if (steps)
    qsort(steps, (size_t)n, sizeof *steps, by_step);
  for (int i = 0; i + keep < n; i++) {
    gslrt_ckdir_step_name(name, sizeof name, steps[i]);
    if (remove_checkpoint(ctx->ckpt_dir, name) < 0) /* 1: a reader has it; the next prune tries again */
      fprintf(stderr, "%s: warning: cannot remove the old checkpoint %s/%s: %s\n", ctx->prog, dir, name,
              strerror(errno));
  }
  free(steps);
  fsync(ctx->ckpt_dir);
}

int gslrt_ckpt_commit(gslrt_ctx *ctx, const char *tmp, const char *final, int64_t done, const int64_t *crc,
                      const int64_t *bytes, char *err) {
  const char *dir = ctx->opts.checkpoint;
  char old[CKDIR_NAME], path[CKDIR_PATH], run[CKDIR_RUN];
  int aside = 0, kind;
  if (gslrt_ckpt_write_manifest(ctx, tmp, done, crc, bytes, err) != 0)
    return -1;
  if (!gslrt_ckdir_join(path, dir, tmp) || fsync_path(path) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot fsync %s: %s", path, strerror(errno));
    return -1;
  }
  if ((kind = gslrt_ckdir_entry_kind(ctx->ckpt_dir, final)) != CKDIR_NONE) {
    if (kind != CKDIR_COMPLETE) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s/%s %s", dir, final, not_checkpoint(kind));
      return -1;
    }
    if (gslrt_ckdir_run_of(ctx->ckpt_dir, final, run, NULL) != 0 || strcmp(run, ctx->run_id)) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s/%s is another run's checkpoint, and gsl will not replace it", dir,
                   final);
      return -1;
    }
    gslrt_ckdir_aside_name(old, sizeof old, final, (long)getpid());
    if (renameat(ctx->ckpt_dir, final, ctx->ckpt_dir, old) != 0) {
      gslrt_seterr(err, GSLRT_ERRLEN, "cannot move the existing %s/%s aside: %s", dir, final, strerror(errno));
      return -1;
    }
    aside = 1;
  }
  if (renameat(ctx->ckpt_dir, tmp, ctx->ckpt_dir, final) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot rename %s/%s to %s/%s: %s", dir, tmp, dir, final, strerror(errno));
    return -1;
  }
  if (fsync(ctx->ckpt_dir) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot fsync %s: %s", dir, strerror(errno));
    return -1;
  }
  if (aside) /* a reader of it may hold it: then the next prune removes it */
    remove_checkpoint(ctx->ckpt_dir, old);
  return 0;
}

/* ---- the newest, for a resume or a reader -------------------------------------- */

/* Rank 0: the newest complete checkpoint in DIR, its name in found. 0
 * found, 1 none, -1 error with err. */
static int newest(gslrt_ctx *ctx, char *found, char *err) {
  int64_t best = gslrt_ckdir_newest(ctx->ckpt_dir, found, CKDIR_NAME);
  if (best == -2) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s: %s", ctx->opts.checkpoint, strerror(errno));
    return -1;
  }
  return best < 0;
}

/* Rank 0: the newest complete checkpoint in DIR, its name in found and its
 * manifest in *text (malloc'd, *len bytes). 0 found, 1 none, -1 error with
 * err. A reader (lock not NULL: generation, beside a run that may prune)
 * holds the manifest flock'd LOCK_SH, its descriptor in *lock, and has
 * read the text from it; a checkpoint being removed, gone before it was
 * locked, or none seen (a listing may miss a checkpoint renamed into
 * place while the older is removed) is looked for again, up to
 * CKPT_FIND_TRIES times (CKPT_NONE_TRIES for none) CKPT_FIND_WAIT_NS
 * apart. */
int gslrt_ckpt_find_newest(gslrt_ctx *ctx, char *found, char **text, size_t *len, int *lock, char *err) {
  int rc = 1;
  *text = NULL;
  if (!lock) {
    rc = newest(ctx, found, err);
    if (rc == 0 && !(*text = gslrt_ckdir_read_manifest(ctx->ckpt_dir, found, len, err, GSLRT_ERRLEN)))
      rc = -1;
    return rc;
  }
  *lock = -1;
  for (int tries = 0, none = 0; tries < CKPT_FIND_TRIES && none < CKPT_NONE_TRIES; tries++) {
    struct timespec wait = {0, CKPT_FIND_WAIT_NS};
    char path[CKDIR_PATH];
    if (tries)
      nanosleep(&wait, NULL);
    if ((rc = newest(ctx, found, err)) < 0)
      return -1;
    if (rc == 1 && ++none)
      continue;
    int fd = lock_manifest(ctx->ckpt_dir, found, LOCK_SH);
    if (fd < 0 && errno != EWOULDBLOCK && errno != ENOENT) {
      gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s/%s/manifest.json: %s", ctx->opts.checkpoint, found,
                   strerror(errno));
      return -1;
    }
    if (fd < 0 || !gslrt_ckpt_still_there(ctx->ckpt_dir, found, fd)) { /* being removed, or gone */
      if (fd >= 0)
        close(fd);
      rc = 1;
      continue;
    }
    snprintf(path, sizeof path, "%s/" CKDIR_MANIFEST, found);
    if (!(*text = gslrt_ckdir_read_manifest_fd(fd, path, len, err, GSLRT_ERRLEN))) {
      close(fd);
      return -1;
    }
    *lock = fd;
    return 0;
  }
  return rc;
}

