/* checkpoint.c — --checkpoint, --checkpoint-every, --keep and --resume:
 * saving every param and optimizer state, and restoring them on any mesh.
 *
 * Layout. DIR/step-NNNNNNNN/ (the steps done, 8 digits or more) holds one
 * .npy file per param and per state, NAME.npy, of the tensor's global shape
 * in C order, exactly as numpy.save writes it (header padded so that the
 * data starts at a multiple of 64 bytes), and manifest.json: the format
 * and its version, the run's identity, the step, the seed (a decimal
 * string: it may exceed what JSON readers hold exactly), the program's
 * source and compiler, its optimizer with every hyperparameter
 * (gslrt_declare_optimizer; "none" for a program that does not train),
 * the precision it was compiled with ("f32" or "bf16", gslc --precision;
 * format version 3, a version 2 manifest has none and reads as "f32"),
 * the training signals at the step (gslrt_declare_signal: "signals", an
 * object of numbers, null where not finite, e.g. {"lr": 0.0003,
 * "grad_norm": 0.87}; empty for a program that reports none; format
 * version 4: versions 2 and 3 have none and still read),
 * the program's build record (gslrt_program_info.build, parsed once at the
 * start: "build", the object as gslc wrote it, {} for a program without
 * one; format version 5: version 4 and older have none and still read),
 * the provenance of the run that wrote it (provenance.c: the user, each
 * rank's host, gslc's version, the sources' and the binary's SHA-256,
 * argv and the start time; "provenance", the object its first --metrics
 * record also holds; format version 6: version 5 and older have none and
 * still read; resuming reads none of it),
 * the mesh it was saved on, every cycling --input's batch count and
 * position, and per tensor its name, kind, dtype, global shape, file, size
 * and zlib crc32 (of the whole file, in decimal). A directory is a
 * complete checkpoint when it has a manifest.json. DIR/.lock holds the
 * pid and host of the run that has DIR.
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
 * Manifests are written and read with jansson: any valid JSON layout reads,
 * and every field is checked by type and range (integers whole, strings
 * from their sets, no key twice, nothing after the document, the step equal
 * to the directory's); a failure names the field.
 *
 * Writing, on every rank together. Rank 0 makes DIR/step-N.tmp.PID/; then
 * per tensor all ranks open its file with MPI-IO, rank 0 writes the header,
 * and each rank writes only its own tile through a file view (a subarray of
 * the global shape at the tile's offset, displaced by the header) with
 * MPI_File_write_all; of a tile replicated over some mesh axes only the
 * copy at coordinate 0 of those axes is written (the others take part with
 * 0 elements), so no rank ever holds more than its own tile; of a padded
 * tile (an uneven split, gslrt.h) only the real box, packed, in a view of
 * the real extents, so no padding reaches a file. MPI_File_sync
 * flushes each file. After the last file every rank agrees once on how
 * the files went (see "Collectives"). Then the crc32s: file i is read
 * back (in 1 MiB chunks) and fsync'd by rank i mod nranks, the results
 * reduced to rank 0, which
 * writes manifest.json (to a temporary, fsync'd, renamed), fsyncs the
 * directory, renames it to DIR/step-N, and fsyncs DIR. Only then are this
 * run's complete checkpoints beyond the newest --keep removed, with any
 * leftover DIR/step-*.tmp.* (of a run that crashed while writing: with the
 * lock held, no live run owns one), each unless a generation is reading
 * it (see "Readers beside a run"). A crash at any moment leaves the
 * complete checkpoints as they were, and at most a .tmp. directory, which
 * resuming ignores.
 *
 * Resuming. Rank 0 finds the newest complete checkpoint and reads its
 * manifest, which every rank then parses and checks alike against the
 * program (every param and state, the same kind, dtype (f32 and bf16 may
 * stand for each other, see below) and global shape,
 * and nothing else; then the same optimizer description, character for
 * character), so all decide together. Each file's size and crc32 is
 * checked by rank i mod nranks as above, its header read, and every rank
 * agrees once on them and on the files' data offsets; then every rank
 * reads its own tile through a file view (MPI_File_read_all; the real box
 * of a padded tile, the padding set to zero), and agrees once on the
 * reads. The seed
 * comes from the manifest; a different --seed is an error. The step
 * counter resumes at the manifest's step, and inputs, drawn by (seed,
 * stream, step, global index) or read as batch step mod B, continue as if
 * the run had never stopped. So does the learning-rate schedule, which the
 * program computes from its optimizer's step count, a state saved like any
 * other; its keywords are part of the optimizer's description, so a
 * resume under another schedule or clipping is refused as another
 * learning rate is (the signals are a record, not checked). So is the
 * build record, but where its "consts" or "source_sha256" differ from
 * this program's, rank 0 says so in one note on stderr (build_note).
 *
 * bf16 (issue 19). A bf16 tensor is saved as float32, every element
 * widened exactly (its file's header says '<f4', its manifest dtype
 * "bf16"): each rank widens its tile into a temporary and writes that. On
 * resume a float32 file is read into a temporary and rounded into a bf16
 * tensor, exactly, since a widened value rounds back to itself, so a
 * resumed run continues bit for bit. Across precisions an "f32" tensor
 * restored into a bf16 one is rounded to nearest even, a "bf16" one into
 * an f32 tensor widened; each such tensor, and a precision that differs
 * from the manifest's, is one note on rank 0's stderr, not an error.
 *
 * Generation (--generate, generate.c) only reads. DIR must exist, and
 * DIR/.lock is not taken: a run still training in DIR may be sampled (a
 * checkpoint appears whole, by a rename). The newest complete checkpoint
 * is checked and read as for --resume, but the generation keeps its own
 * --seed, and its note goes to stderr (stdout has the text alone); a DIR
 * with no checkpoint is an error.
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
 * (vanished). --resume, which holds DIR/.lock, takes no such lock.
 *
 * Modes. Every directory is made with 0777 and every file with 0666, less
 * the umask: the manifest and .lock by open here; the tensors' files by
 * ROMIO (MPI_File_open without a "file_perm" hint), which reads the umask
 * and asks open for 0666 ^ umask, which the kernel masks again, 0666 less
 * the umask. A checkpoint is never more open than the user's umask allows
 * (tests/provenance_run.sh checks it under umask 077 and 022).
 *
 * Errors. A failure on any rank is shared (the first in rank or file
 * order, with its message) before anyone moves on; rank 0 removes the
 * temporary directory, prints one line, and every rank exits 1.
 *
 * Collectives (issue 43). The runtime's own collectives over every rank
 * (gslrt_world_*, watched by health.c; at -np 4 on 2 cores each costs a
 * scheduler slice) are a fixed number per checkpoint, whatever the number
 * of tensors. Writing, 4: one broadcast of rank 0's pid, which names the
 * temporary, and of whether it made it; after the last file one
 * all-reduce of the first failure (agree); one reduce to rank 0 of the
 * read-back's first failure with every file's crc32 and size (each known
 * to one rank, 0 on the others: MPI_MAX of int64s); one broadcast of rank
 * 0's verdict (the read-back or its commit). Resuming, 4: one broadcast of
 * the newest checkpoint's name, whether there is one and its manifest's
 * length; one of the manifest; one all-reduce of the files' checks with
 * their data offsets (agree_facts); after the last tile one all-reduce of
 * the reads'. A failure adds one broadcast of its message. An agreement
 * carries a failure's order (failure_order: its key and rank in one
 * int64, the first the greatest), so MINLOC and facts go in one call.
 * What stays per file are MPI-IO's own collective calls, collective by
 * definition: MPI_File_open, _set_view, _write_all, _sync and _close (5 a
 * file written), _open, _set_view, _read_all and _close (4 a file read).
 * Before, each file had three agreements of its own (before its open,
 * after it, after the transfer): 6 + 3N collectives a save and a resume
 * of N files.
 *
 * Without them, a rank that fails in a file goes on (tile_io): it still
 * makes every collective call of that file and of the files after it,
 * moving 0 elements where it has nothing sound to move, keeps its first
 * message, and the agreement after the last file shares the first
 * failure in the order the per-file agreements found it: file, then how
 * far the file's I/O went (before the open, the open, the transfer:
 * tile_key), then rank. So no rank ever waits in a call that another has
 * left out. Every rank stops at once, together, only where the failure is
 * every rank's: a file name too long or a header that cannot be made
 * (the same everywhere), or a failed MPI_File_open, which ROMIO makes
 * every rank's (ADIO_Open all-reduces the open's outcome, and fails it on
 * every rank, "**oremote_fail" where it succeeded). This is the one
 * guarantee taken from MPI-IO rather than made here; an MPI-IO without
 * it would leave ranks in different files' calls, ended by the deadline
 * of --collective-timeout (fail.c), not a hang. No per-file agreement is
 * kept: the cost is that a failed checkpoint may go on writing (or
 * reading) the files after its first failure before it is shared. The
 * agreement after the last file also orders every rank's writes before
 * the read-back of the crc32s (a rank reads files others wrote). */
#include "internal.h"
#include "seterr.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_VERSION 6             /* manifest format version written */
#define CKPT_VERSION_OLD 2         /* the oldest still read (no "precision": f32; no "signals") */
#define CKPT_VERSION_PRECISION 3   /* the first with "precision" (no "signals") */
#define CKPT_VERSION_SIGNALS 4     /* the first with "signals" (no "build") */
#define CKPT_VERSION_BUILD 5       /* the first with "build" (no "provenance") */
#define CKPT_CHUNK (1 << 20)       /* bytes read at a time for a crc32 */
#define CKPT_MAX_MANIFEST (64 << 20) /* longest manifest accepted */
#define CKPT_PATH 4096             /* room for a path */
#define CKPT_KEEP 2                /* complete checkpoints kept without --keep */
#define CKPT_NAME 256              /* room for a name in DIR, a tensor's name or file */
#define CKPT_LOCK ".lock"          /* the lock file in DIR */
#define CKPT_FIND_TRIES 200        /* a reader's looks for the newest checkpoint, locked */
#define CKPT_FIND_WAIT_NS 10000000L /* between them (10 ms) */
#define CKPT_NONE_TRIES 3          /* of them, that find none at all */
#define CKPT_GONE_WAIT_NS 200000000L /* for a checkpoint that lacks a file to be gone (200 ms) */
#define CKPT_READ_TRIES 5          /* a reader's reads of a checkpoint that vanished while read */

static int is_saved(const gslrt_tensor *t) { return t->kind == GSLRT_PARAM || t->kind == GSLRT_STATE; }
static const char *kind_name(int32_t kind) { return kind == GSLRT_STATE ? "state" : "param"; }
/* The program's precision as a manifest names it: "f32" or "bf16". */
static const char *precision_name(const gslrt_ctx *ctx) { return gslrt_dtype_name(ctx->info->precision); }

/* A failure's place in the order every rank agrees on, as one number
 * that MPI_MAX combines into the first: key is INT_MAX on a rank that did
 * not fail (INT64_MIN, below every failure), else its order (the rank, a
 * file's index, or a file's index and how far its I/O went), ties going
 * to the least rank. */
static int64_t failure_order(const gslrt_ctx *ctx, int key) {
  return key == INT_MAX ? INT64_MIN : -((int64_t)key * ctx->nranks + ctx->rank);
}

/* The rank whose failure an order combined by MPI_MAX is (not INT64_MIN). */
static int failure_rank(const gslrt_ctx *ctx, int64_t order) { return (int)(-order % ctx->nranks); }

/* Shares a failure and n facts in one all-reduce, every rank together:
 * key as failure_order's; facts[0..n) this rank's share of numbers never
 * negative, 0 where it knows nothing (a fact one rank finds: a file's
 * offset), each replaced by the greatest of every rank's. The message of
 * the least key then goes to err on every rank (a broadcast, only after a
 * failure). Whether any rank failed. */
static int agree_facts(gslrt_ctx *ctx, int key, char *err, int64_t *facts, int n, const char *what) {
  int64_t *all = malloc(((size_t)n + 1) * sizeof *all), first;
  if (!all)
    gslrt_fatal(ctx, "checkpoint: out of memory");
  all[0] = failure_order(ctx, key);
  if (n)
    memcpy(all + 1, facts, (size_t)n * sizeof *all);
  gslrt_world_allreduce(ctx, MPI_IN_PLACE, all, n + 1, MPI_INT64_T, MPI_MAX, what);
  if (n)
    memcpy(facts, all + 1, (size_t)n * sizeof *all);
  first = all[0];
  free(all);
  if (first == INT64_MIN)
    return 0;
  gslrt_world_bcast(ctx, err, GSLRT_ERRLEN, MPI_CHAR, failure_rank(ctx, first),
                    "the sharing of the checkpoint's failure");
  return 1;
}

/* Shares a failure alone (agree_facts without facts). */
static int agree(gslrt_ctx *ctx, int key, char *err) {
  return agree_facts(ctx, key, err, NULL, 0, "the checkpoint's agreement of every rank");
}

/* A failed MPI-IO call's message, into err, on one line: of an error
 * stack ("class, error stack:\nFUNC(LINE): cause ..."), the innermost
 * cause alone (e.g. "Other I/O error File too large"). */
static void mpi_err(int rc, const char *call, const char *path, char *err) {
  char msg[MPI_MAX_ERROR_STRING];
  const char *cause = msg, *nl;
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
    snprintf(msg, sizeof msg, "MPI error %d", rc);
  if ((nl = strrchr(msg, '\n')) && nl[1]) {
    const char *func = strstr(nl + 1, "): ");
    cause = func ? func + 3 : nl + 1;
  }
  gslrt_seterr(err, GSLRT_ERRLEN, "%s %s failed: %s", call, path, cause);
}

static int join(char *buf, const char *dir, const char *name) {
  return snprintf(buf, CKPT_PATH, "%s/%s", dir, name) < CKPT_PATH;
}

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY), rc = -1;
  if (fd >= 0) {
    rc = fsync(fd);
    close(fd);
  }
  return rc;
}

/* ---- the program's build record ------------------------------------------- */

void gslrt_checkpoint_build(gslrt_ctx *ctx) {
  json_error_t je;
  json_t *b;
  if (!ctx->info->build)
    return;
  if (!(b = json_loads(ctx->info->build, JSON_REJECT_DUPLICATES, &je))) {
    for (char *c = je.text; *c; c++) /* kept to one printable line */
      if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
        *c = '?';
    gslrt_fail_all(ctx, "the program's build record (gslrt_program_info.build) is not JSON (%d:%d: %s): a bug "
                   "of the gslc that compiled it (%s), not of the program; report it", je.line, je.column,
                   je.text, ctx->info->compiler_version ? ctx->info->compiler_version : "?");
  }
  if (!json_is_object(b)) {
    json_decref(b);
    gslrt_fail_all(ctx, "the program's build record (gslrt_program_info.build) is JSON but not an object: a bug "
                   "of the gslc that compiled it (%s), not of the program; report it",
                   ctx->info->compiler_version ? ctx->info->compiler_version : "?");
  }
  ctx->build = b;
}

void gslrt_checkpoint_free(gslrt_ctx *ctx) {
  json_decref(ctx->build);
  ctx->build = NULL;
}

/* ---- the directory, on rank 0 ----------------------------------------------- */

/* The step of a checkpoint's name "step-DIGITS", or -1. */
static int64_t step_of(const char *name) {
  const char *p = name + 5;
  if (strncmp(name, "step-", 5) || !*p || strspn(p, "0123456789") != strlen(p) || strlen(p) > 18)
    return -1;
  return strtoll(p, NULL, 10);
}

/* Whether name is a temporary ("step-....tmp.*"). */
static int is_temp(const char *name) { return !strncmp(name, "step-", 5) && strstr(name, ".tmp."); }

/* What DIR/name is, never following a link. */
enum { ENTRY_NONE, ENTRY_LINK, ENTRY_FILE, ENTRY_BARE_DIR, ENTRY_COMPLETE };

static int entry_kind(int dfd, const char *name) {
  char path[CKPT_PATH];
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return ENTRY_NONE;
  if (S_ISLNK(st.st_mode))
    return ENTRY_LINK;
  if (!S_ISDIR(st.st_mode))
    return ENTRY_FILE;
  return join(path, name, "manifest.json") && fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                 S_ISREG(st.st_mode)
             ? ENTRY_COMPLETE
             : ENTRY_BARE_DIR;
}

/* Why DIR/name (of the given kind) is not a checkpoint gsl may use. */
static const char *not_checkpoint(int kind) {
  return kind == ENTRY_LINK  ? "is a symbolic link, not a checkpoint (gsl neither follows nor removes one)"
         : kind == ENTRY_FILE ? "is not a directory, so not a checkpoint"
                              : "has no manifest.json, so it is not a checkpoint, and gsl will not replace it";
}

/* Removes the entry DIR/name: a link or file itself, or a directory of
 * files, each unlinked (a link in it is removed, never followed); 0, or
 * -1 with errno. */
static int remove_entry(int dfd, const char *name) {
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

/* A fresh listing of DIR (its own open file description, so that scans
 * do not share a position), or NULL with errno. */
static DIR *list_dir(int dfd) {
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (fd >= 0 && !d)
    close(fd);
  return d;
}

/* The text of the manifest open as fd, named path in messages
 * (malloc'd, NUL-terminated, its length in *len), read from its start;
 * NULL with err. fd stays open. */
static char *read_manifest_fd(int fd, const char *path, size_t *len, char *err) {
  struct stat st;
  char *text = NULL;
  size_t got = 0;
  if (fstat(fd, &st) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s: %s", path, strerror(errno));
    goto fn_fail;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > CKPT_MAX_MANIFEST) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: %s", path,
                 S_ISREG(st.st_mode) ? "longer than 64 MiB, not a manifest" : "not a regular file");
    goto fn_fail;
  }
  if (!(text = malloc((size_t)st.st_size + 1))) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: out of memory", path);
    goto fn_fail;
  }
  while (got < (size_t)st.st_size) {
    ssize_t k = pread(fd, text + got, (size_t)st.st_size - got, (off_t)got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s: %s", path, k < 0 ? strerror(errno) : "it shrank");
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

/* The text of DIR/name/manifest.json (malloc'd, NUL-terminated, its
 * length in *len), not through a link; NULL with err. */
static char *read_manifest(int dfd, const char *name, size_t *len, char *err) {
  char path[CKPT_PATH] = "";
  char *text = NULL;
  int fd = join(path, name, "manifest.json") ? openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
  if (fd < 0)
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s: %s", path, strerror(errno));
  else
    text = read_manifest_fd(fd, path, len, err);
  if (fd >= 0)
    close(fd);
  return text;
}

/* DIR/name/manifest.json opened (not through a link) and flock'd with how
 * (LOCK_SH or LOCK_EX, never waiting): its descriptor, or -1 with errno
 * (EWOULDBLOCK: another holds a lock that excludes this one). The
 * readers' lock: see "Readers beside a run" above. */
static int lock_manifest(int dfd, const char *name, int how) {
  char path[CKPT_PATH];
  int fd = join(path, name, "manifest.json") ? openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
  if (fd >= 0 && flock(fd, how | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    fd = -1;
  }
  return fd;
}

/* Whether the manifest open as fd is still DIR/name/manifest.json: not
 * removed, not renamed away, not replaced by another. */
static int still_there(int dfd, const char *name, int fd) {
  char path[CKPT_PATH];
  struct stat a, b;
  return fd >= 0 && fstat(fd, &a) == 0 && a.st_nlink > 0 && join(path, name, "manifest.json") &&
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
  rc = remove_entry(dfd, name);
  if (fd >= 0) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return rc;
}

/* The run identity in the manifest of the complete checkpoint DIR/name,
 * into run (33 bytes): 0, or -1 if it cannot be read or has none. */
static int run_of(int dfd, const char *name, char *run) {
  char err[GSLRT_ERRLEN];
  size_t len = 0;
  char *text = read_manifest(dfd, name, &len, err);
  json_t *doc = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  const char *s = json_string_value(json_object_get(doc, "run"));
  int rc = s && strlen(s) == 32 ? 0 : -1;
  if (rc == 0)
    memcpy(run, s, 33);
  json_decref(doc);
  free(text);
  return rc;
}

/* Takes DIR/.lock (flock, exclusive, not waiting) and writes our pid and
 * host into it; the descriptor stays open, and the lock held, until exit.
 * 0; GSLRT_EXIT_BUSY when another run holds it; -1 on another failure. */
static int take_lock(gslrt_ctx *ctx, int dfd, char *err) {
  const char *dir = ctx->opts.checkpoint;
  char host[256] = "", line[512];
  int fd = openat(dfd, CKPT_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: cannot open %s/%s: %s", dir, dir, CKPT_LOCK,
                 errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int busy = errno == EWOULDBLOCK;
    long pid = 0;
    ssize_t k = pread(fd, line, sizeof line - 1, 0);
    line[k > 0 ? k : 0] = 0;
    if (busy && sscanf(line, "pid %ld host %255s", &pid, host) == 2)
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: another run has this directory (pid %ld on host %s "
                   "holds %s/%s); wait for it to end, or give another directory", dir, pid, host, dir, CKPT_LOCK);
    else if (busy)
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: another run has this directory (it holds %s/%s); "
                   "wait for it to end, or give another directory", dir, dir, CKPT_LOCK);
    else
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: cannot lock %s/%s: %s", dir, dir, CKPT_LOCK,
                   strerror(errno));
    close(fd);
    return busy ? GSLRT_EXIT_BUSY : -1;
  }
  if (gethostname(host, sizeof host - 1) != 0)
    snprintf(host, sizeof host, "unknown");
  int n = snprintf(line, sizeof line, "pid %ld host %s\n", (long)getpid(), host);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
    gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: cannot write %s/%s: %s", dir, dir, CKPT_LOCK,
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
  DIR *d = list_dir(dfd);
  struct dirent *e;
  int64_t newest = -1;
  int rc = 0;
  if (!d) {
    gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: cannot read it: %s", dir, strerror(errno));
    return -1;
  }
  while ((e = readdir(d)) && rc == 0) {
    int64_t s = step_of(e->d_name);
    int kind = s >= 0 ? entry_kind(dfd, e->d_name) : ENTRY_NONE;
    if (s < 0 || kind == ENTRY_NONE)
      continue;
    if (kind != ENTRY_COMPLETE) {
      gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: %s/%s %s; move it away", dir, dir, e->d_name,
                   not_checkpoint(kind));
      rc = -1;
    } else if (s > newest) {
      newest = s;
    }
  }
  closedir(d);
  if (rc == 0 && newest >= 0 && !ctx->opts.resume) {
    gslrt_seterr(err, GSLRT_ERRLEN, "--checkpoint %s: it holds another run's checkpoints (the newest is "
                 "step-%08lld); add --resume to continue that run, or give another directory",
                 dir, (long long)newest);
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
  if (strlen(dir) > CKPT_PATH - 2 * CKPT_NAME)
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

/* The crc32 and size of a whole file, read in chunks; fsync'd if sync.
 * Only a regular file is read (not through a link; a FIFO or device, which
 * could block or never end, is refused before any read). */
static int file_crc(const char *path, const char *shown, int sync, uint32_t *crc, int64_t *bytes,
                    char *err) {
  int rc = -1, fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  unsigned char *buf = NULL;
  uLong c = crc32(0L, Z_NULL, 0);
  struct stat st;
  *bytes = 0;
  if (fd < 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot open %s: %s", shown,
                 errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    goto fn_exit;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s is not a regular file", shown);
    goto fn_exit;
  }
  if (!(buf = malloc(CKPT_CHUNK))) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: out of memory", shown);
    goto fn_exit;
  }
  for (;;) {
    ssize_t k = read(fd, buf, CKPT_CHUNK);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s: %s", shown, strerror(errno));
      goto fn_exit;
    }
    if (k == 0)
      break;
    c = crc32(c, buf, (uInt)k);
    *bytes += k;
  }
  if (sync && fsync(fd) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot fsync %s: %s", shown, strerror(errno));
    goto fn_exit;
  }
  *crc = (uint32_t)c;
  rc = 0;
fn_exit:
  free(buf);
  if (fd >= 0)
    close(fd);
  return rc;
}

/* The file type of t's real box (its tile without the padding) within its
 * global array (a scalar is [1]), and its element type (set even when the
 * file type cannot be made). An empty real box (a trailing shard of an
 * uneven split) gets a box of one element at the origin, which it moves 0
 * elements through: it still takes part in the collective calls. */
static int tile_type(const gslrt_tensor *t, MPI_Datatype *etype, MPI_Datatype *type, char *err) {
  int sizes[GSLRT_MAX_RANK], subs[GSLRT_MAX_RANK], starts[GSLRT_MAX_RANK], n = t->rank ? t->rank : 1;
  *etype = gslrt_file_dtype(t->dtype) == GSLRT_I32 ? MPI_INT32_T : MPI_FLOAT;
  sizes[0] = subs[0] = 1, starts[0] = 0;
  for (int32_t d = 0; d < t->rank; d++) {
    if (t->global_shape[d] > INT_MAX || t->global_shape[d] < 1) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s: dimension %d of size %lld cannot be saved",
                   kind_name(t->kind), t->name, (int)d, (long long)t->global_shape[d]);
      return -1;
    }
    sizes[d] = (int)t->global_shape[d], subs[d] = (int)t->local_real[d];
    starts[d] = (int)t->local_offset[d];
  }
  if (t->real_count == 0)
    for (int32_t d = 0; d < t->rank; d++)
      subs[d] = 1, starts[d] = 0;
  if (t->real_count > INT_MAX) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s %s: a tile of %lld elements is too large to save",
                 kind_name(t->kind), t->name, (long long)t->real_count);
    return -1;
  }
  if (MPI_Type_create_subarray(n, sizes, subs, starts, MPI_ORDER_C, *etype, type) != MPI_SUCCESS)
    *type = MPI_DATATYPE_NULL;
  else if (MPI_Type_commit(type) != MPI_SUCCESS)
    MPI_Type_free(type); /* MPI_DATATYPE_NULL: the caller's view falls back to etype */
  else
    return 0;
  gslrt_seterr(err, GSLRT_ERRLEN, "%s %s: MPI_Type_create_subarray failed", kind_name(t->kind), t->name);
  return -1;
}

/* Whether this rank writes t's tile: it is the copy at coordinate 0 of
 * every mesh axis that does not split t. */
static int writes_tile(const gslrt_ctx *ctx, const gslrt_tensor *t) {
  int used[GSLRT_MAX_AXES] = {0};
  for (int i = 0; i < t->rank * GSLRT_MAX_AXES; i++)
    if (t->dim_axes[i] >= 0 && t->dim_axes[i] < GSLRT_MAX_AXES)
      used[t->dim_axes[i]] = 1;
  for (int a = 0; a < ctx->naxes; a++)
    if (!used[a] && ctx->coord[a] != 0)
      return 0;
  return 1;
}

/* Where a rank's tile_io failed first: before the file's open, in it, or
 * in the header's write, the view, the transfer, the sync or the close. */
enum { TILE_PREP = 1, TILE_OPEN, TILE_MOVE };

/* The key (agree's) of a failure at phase of the k-th file: the files in
 * order, and in each the phases in order, as the per-file agreements
 * that it replaces would have found it first. */
static int tile_key(int k, int phase) { return k < INT_MAX / 4 ? 3 * k + phase - 1 : INT_MAX - 1; }

/* Writes (or, if !save, reads) t's tile in path, whose data starts at
 * disp; every rank together, with no agreement of its own. A bf16 tile
 * goes through an f32 temporary: widened before a write, rounded after a
 * read. A padded tile (gslrt.h) moves its real box alone, packed into a
 * temporary before a write and placed with zero padding after a read, so
 * nothing padded reaches the file and the file is the same on any mesh.
 * *phase is 0, or where this rank failed first (TILE_*), with err. A rank
 * that fails still makes every collective call of the file, moving 0
 * elements after a failure before the transfer, so that no rank waits for
 * it; only a failed MPI_File_open ends the file early, and that on every
 * rank alike (ROMIO's ADIO_Open all-reduces the open's outcome and fails
 * it everywhere if it failed anywhere): then -1, and the caller stops
 * with every rank; else 0. */
static int tile_io(gslrt_ctx *ctx, const gslrt_tensor *t, const char *path, const char *head,
                   int64_t disp, int save, int *phase, char *err) {
  MPI_Datatype etype = MPI_FLOAT, type = MPI_DATATYPE_NULL;
  MPI_File fh = MPI_FILE_NULL;
  MPI_Status st;
  int rc, n = 0, got = 0, shut = 0, padded = t->real_count != t->local_count;
  void *buf = *t->slot; /* what MPI-IO moves: the real box, 4-byte elements */
  void *tile = *t->slot; /* the padded tile in the file's element type */
  float *wide = NULL;
  void *packed = NULL;
  *phase = 0;
  if (tile_type(t, &etype, &type, err) != 0)
    *phase = TILE_PREP;
  if (!*phase && t->dtype == GSLRT_BF16) {
    if (!(wide = malloc((size_t)t->local_count * 4 + 4)))
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s: out of memory for its f32 copy", kind_name(t->kind), t->name),
          *phase = TILE_PREP;
    else if (save)
      gslrt_bf16_widen_n(wide, *t->slot, t->local_count);
    buf = tile = wide;
  }
  if (!*phase && padded) {
    if (!(packed = malloc((size_t)t->real_count * 4 + 4)))
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s: out of memory for its real box", kind_name(t->kind), t->name),
          *phase = TILE_PREP;
    else if (save)
      gslrt_box_pack(packed, tile, t->rank, t->local_shape, t->local_real, 4);
    buf = packed;
  }
  if (!*phase) /* a rank that failed moves nothing, but still takes part */
    n = save && !writes_tile(ctx, t) ? 0 : (int)t->real_count;
  gslrt_deadline(ctx, "the MPI_File_open of %s", path);
  /* ROMIO reads "X:" before a path's first colon as a file-system type
   * and refuses one it does not know ("moe.lm.gsl:74.bias.npy", a
   * directory "run:1"); "ufs:", its POSIX driver's, is stripped */
  char *colon = NULL;
  if (strchr(path, ':') && (colon = malloc(strlen(path) + 5)))
    sprintf(colon, "ufs:%s", path);
  rc = MPI_File_open(ctx->comm, colon ? colon : path, save ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                     MPI_INFO_NULL, &fh);
  free(colon);
  gslrt_deadline_off(ctx);
  if (rc != MPI_SUCCESS) {
    if (!*phase)
      mpi_err(rc, "MPI_File_open", path, err), *phase = TILE_OPEN;
    shut = 1;
    goto fn_exit;
  }
  /* every collective call is made by every rank; the first error is kept */
  gslrt_deadline(ctx, "the MPI-IO %s of %s %s (%s)", save ? "write" : "read", kind_name(t->kind), t->name, path);
  if (save && ctx->rank == 0 && !*phase) {
    if ((rc = MPI_File_write_at(fh, 0, head, (int)disp, MPI_BYTE, &st)) != MPI_SUCCESS)
      mpi_err(rc, "MPI_File_write_at", path, err), *phase = TILE_MOVE;
    else if (MPI_Get_count(&st, MPI_BYTE, &got) != MPI_SUCCESS || got != (int)disp)
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: short write", path), *phase = TILE_MOVE;
  }
  rc = MPI_File_set_view(fh, disp, etype, type != MPI_DATATYPE_NULL ? type : etype, "native", MPI_INFO_NULL);
  if (rc != MPI_SUCCESS && !*phase)
    mpi_err(rc, "MPI_File_set_view", path, err), *phase = TILE_MOVE;
  if (save) {
    rc = MPI_File_write_all(fh, buf, n, etype, &st);
    if (rc != MPI_SUCCESS && !*phase)
      mpi_err(rc, "MPI_File_write_all", path, err), *phase = TILE_MOVE;
    else if (!*phase && (MPI_Get_count(&st, etype, &got) != MPI_SUCCESS || got != n))
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: short write", path), *phase = TILE_MOVE;
    rc = MPI_File_sync(fh);
    if (rc != MPI_SUCCESS && !*phase)
      mpi_err(rc, "MPI_File_sync", path, err), *phase = TILE_MOVE;
  } else {
    rc = MPI_File_read_all(fh, buf, n, etype, &st);
    if (rc != MPI_SUCCESS && !*phase)
      mpi_err(rc, "MPI_File_read_all", path, err), *phase = TILE_MOVE;
    else if (!*phase && (MPI_Get_count(&st, etype, &got) != MPI_SUCCESS || got != n))
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: short read", path), *phase = TILE_MOVE;
  }
  rc = MPI_File_close(&fh);
  gslrt_deadline_off(ctx);
  if (rc != MPI_SUCCESS && !*phase)
    mpi_err(rc, "MPI_File_close", path, err), *phase = TILE_MOVE;
  if (!save && !*phase && packed)
    gslrt_box_unpack(tile, packed, t->rank, t->local_shape, t->local_real, 4);
  if (!save && !*phase && wide)
    gslrt_bf16_round_n(*t->slot, wide, t->local_count);
fn_exit:
  if (type != MPI_DATATYPE_NULL)
    MPI_Type_free(&type);
  free(packed);
  free(wide);
  return shut ? -1 : 0;
}

void gslrt_declare_optimizer(gslrt_ctx *ctx, const char *desc) {
  if (ctx->optimizer)
    gslrt_fatal(ctx, "gslrt_declare_optimizer: called twice (%s, then %s)", ctx->optimizer, desc);
  ctx->optimizer = desc;
}

int gslrt_checkpoint_due(const gslrt_ctx *ctx, int64_t done) {
  const gslrt_options *op = &ctx->opts;
  return op->checkpoint && (done == ctx->end || (op->checkpoint_every && done % op->checkpoint_every == 0));
}


/* ---- writing -------------------------------------------------------------- */

/* Sets obj's key to v (a new reference); whether it took. */
static int put(json_t *obj, const char *key, json_t *v) { return v && json_object_set_new(obj, key, v) == 0; }

/* The manifest of the checkpoint of step done, as a JSON document (NULL
 * when out of memory). */
static json_t *manifest_doc(gslrt_ctx *ctx, int64_t done, const int64_t *crc, const int64_t *bytes) {
  json_t *doc = json_object(), *mesh = json_array(), *inputs = json_array(), *tensors = json_array();
  char seed[32], shape_file[CKPT_PATH];
  int ok = doc && mesh && inputs && tensors, k = 0;
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)ctx->seed);
  ok = ok && put(doc, "format", json_string("gsl-checkpoint")) && put(doc, "version", json_integer(CKPT_VERSION)) &&
       put(doc, "run", json_string(ctx->run_id)) && put(doc, "step", json_integer(done)) &&
       put(doc, "seed", json_string(seed)) &&
       put(doc, "program", json_string(ctx->info->source ? ctx->info->source : "")) &&
       put(doc, "compiler", json_string(ctx->info->compiler_version ? ctx->info->compiler_version : "")) &&
       put(doc, "optimizer", json_string(ctx->optimizer ? ctx->optimizer : "none")) &&
       put(doc, "precision", json_string(precision_name(ctx))) &&
       put(doc, "build", ctx->build ? json_incref(ctx->build) : json_object()) &&
       put(doc, "provenance", ctx->provenance ? json_incref(ctx->provenance) : json_object());
  json_t *signals = json_object();
  ok = ok && signals && put(doc, "signals", signals);
  for (int i = 0; ok && i < ctx->nsignals; i++) {
    const gslrt_signal *s = &ctx->signals[i];
    if (!s->have)
      continue;
    if (!s->count) {
      ok = put(signals, s->name, isfinite(s->value[0]) ? json_real(s->value[0]) : json_null());
      continue;
    }
    json_t *arr = json_array();
    ok = arr && put(signals, s->name, arr);
    for (int32_t j = 0; ok && j < s->count; j++)
      ok = json_array_append_new(arr, isfinite(s->value[j]) ? json_real(s->value[j]) : json_null()) == 0;
  }
  for (int a = 0; ok && a < ctx->naxes; a++) {
    json_t *ax = json_object();
    ok = json_array_append_new(mesh, ax) == 0 && put(ax, "axis", json_string(ctx->axis_name[a])) &&
         put(ax, "size", json_integer(ctx->axis_size[a]));
  }
  for (int i = 0; ok && i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    json_t *in = json_object();
    if (t->kind != GSLRT_INPUT || !t->batches) {
      json_decref(in);
      continue;
    }
    ok = json_array_append_new(inputs, in) == 0 && put(in, "name", json_string(t->name)) &&
         put(in, "batches", json_integer(t->batches)) && put(in, "position", json_integer(done % t->batches));
  }
  for (int i = 0; ok && i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    json_t *te = json_object(), *shape = json_array();
    if (!is_saved(t)) {
      json_decref(te), json_decref(shape);
      continue;
    }
    snprintf(shape_file, sizeof shape_file, "%s.npy", t->name);
    ok = json_array_append_new(tensors, te) == 0 && put(te, "name", json_string(t->name)) &&
         put(te, "kind", json_string(kind_name(t->kind))) && put(te, "dtype", json_string(gslrt_dtype_name(t->dtype))) &&
         put(te, "shape", shape);
    for (int32_t d = 0; ok && d < t->rank; d++)
      ok = json_array_append_new(shape, json_integer(t->global_shape[d])) == 0;
    ok = ok && put(te, "file", json_string(shape_file)) && put(te, "bytes", json_integer(bytes[k])) &&
         put(te, "crc32", json_integer(crc[k]));
    k++;
  }
  ok = ok && put(doc, "mesh", mesh) && put(doc, "inputs", inputs) && put(doc, "tensors", tensors);
  if (!ok) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

/* Writes doc, an object, as JSON indented by two, each element of an array
 * of several objects on a line of its own (a manifest a person can read
 * and diff); every key and value is encoded by jansson. */
static int dump_doc(FILE *f, json_t *doc) {
  const char *key;
  json_t *v;
  int first = 1, rc = 0;
  fputc('{', f);
  json_object_foreach(doc, key, v) {
    json_t *k = json_string(key);
    fputs(first ? "\n  " : ",\n  ", f);
    first = 0;
    rc |= json_dumpf(k, f, JSON_ENCODE_ANY);
    json_decref(k);
    fputs(": ", f);
    if (json_is_array(v) && json_array_size(v) > 1 && json_is_object(json_array_get(v, 0))) {
      size_t i;
      json_t *e;
      fputc('[', f);
      json_array_foreach(v, i, e) {
        fputs(i ? ",\n    " : "\n    ", f);
        rc |= json_dumpf(e, f, 0);
      }
      fputs("\n  ]", f);
    } else {
      rc |= json_dumpf(v, f, JSON_ENCODE_ANY);
    }
  }
  fputs("\n}\n", f);
  return rc;
}

/* Writes DIR/tmp/manifest.json through a fsync'd temporary; rank 0. */
static int write_manifest(gslrt_ctx *ctx, const char *tmp, int64_t done, const int64_t *crc,
                          const int64_t *bytes, char *err) {
  char path[CKPT_PATH], part[CKPT_PATH];
  json_t *doc = manifest_doc(ctx, done, crc, bytes);
  FILE *f = NULL;
  int fd = -1, rc = -1;
  if (!doc) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: out of memory for the manifest", tmp);
    return -1;
  }
  if (!join(path, tmp, "manifest.json") || !join(part, tmp, "manifest.json.tmp")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: the path is too long", tmp);
    goto fn_exit;
  }
  if ((fd = openat(ctx->ckpt_dir, part, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)) < 0 ||
      !(f = fdopen(fd, "w"))) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot create %s/%s: %s", ctx->opts.checkpoint, part, strerror(errno));
    if (fd >= 0)
      close(fd);
    goto fn_exit;
  }
  if (dump_doc(f, doc) != 0 || fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot write %s/%s: %s", ctx->opts.checkpoint, part, strerror(errno));
    fclose(f);
    goto fn_exit;
  }
  if (fclose(f) != 0 || renameat(ctx->ckpt_dir, part, ctx->ckpt_dir, path) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot write %s/%s: %s", ctx->opts.checkpoint, path, strerror(errno));
    goto fn_exit;
  }
  rc = 0;
fn_exit:
  json_decref(doc);
  return rc;
}

static int by_step(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

/* Removes, on rank 0, this run's complete checkpoints older than its
 * newest keep, and every leftover temporary but ours (a link one is
 * removed itself), each unless a reader holds it (remove_checkpoint: it
 * stays, past --keep, until a prune after the reader is done); a failure
 * is only a warning. */
static void prune(gslrt_ctx *ctx, const char *mine) {
  const char *dir = ctx->opts.checkpoint;
  DIR *d = list_dir(ctx->ckpt_dir);
  struct dirent *e;
  int64_t *steps = NULL;
  int n = 0, cap = 0, keep = ctx->opts.keep ? (int)ctx->opts.keep : CKPT_KEEP;
  char name[CKPT_NAME], run[33];
  if (!d)
    return;
  while ((e = readdir(d))) {
    int64_t s = step_of(e->d_name);
    if (is_temp(e->d_name) && strcmp(e->d_name, mine)) {
      if (remove_checkpoint(ctx->ckpt_dir, e->d_name) < 0)
        fprintf(stderr, "%s: warning: cannot remove the leftover %s/%s: %s\n", ctx->prog, dir, e->d_name,
                strerror(errno));
    } else if (s >= 0 && entry_kind(ctx->ckpt_dir, e->d_name) == ENTRY_COMPLETE &&
               run_of(ctx->ckpt_dir, e->d_name, run) == 0 && !strcmp(run, ctx->run_id)) {
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
    snprintf(name, sizeof name, "step-%08lld", (long long)steps[i]);
    if (remove_checkpoint(ctx->ckpt_dir, name) < 0) /* 1: a reader has it; the next prune tries again */
      fprintf(stderr, "%s: warning: cannot remove the old checkpoint %s/%s: %s\n", ctx->prog, dir, name,
              strerror(errno));
  }
  free(steps);
  fsync(ctx->ckpt_dir);
}

/* Commits the complete temporary DIR/tmp as DIR/final, on rank 0:
 * manifest, fsyncs, renames. An existing final is replaced only if it is
 * a checkpoint of this run (moved aside first, then removed). */
static int commit(gslrt_ctx *ctx, const char *tmp, const char *final, int64_t done, const int64_t *crc,
                  const int64_t *bytes, char *err) {
  const char *dir = ctx->opts.checkpoint;
  char old[CKPT_NAME], path[CKPT_PATH], run[33];
  int aside = 0, kind;
  if (write_manifest(ctx, tmp, done, crc, bytes, err) != 0)
    return -1;
  if (!join(path, dir, tmp) || fsync_path(path) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot fsync %s: %s", path, strerror(errno));
    return -1;
  }
  if ((kind = entry_kind(ctx->ckpt_dir, final)) != ENTRY_NONE) {
    if (kind != ENTRY_COMPLETE) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s/%s %s", dir, final, not_checkpoint(kind));
      return -1;
    }
    if (run_of(ctx->ckpt_dir, final, run) != 0 || strcmp(run, ctx->run_id)) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s/%s is another run's checkpoint, and gsl will not replace it", dir,
                   final);
      return -1;
    }
    snprintf(old, sizeof old, "%s.tmp.old.%ld", final, (long)getpid());
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

/* The names of step done's checkpoint: its temporary, made by the rank 0
 * of process pid (name, 64 bytes; tmp, DIR/name), and its own (fname,
 * final). */
static void checkpoint_names(const gslrt_ctx *ctx, int64_t done, long pid, char *name, char *tmp, char *fname,
                             char *final) {
  snprintf(name, 64, "step-%08lld.tmp.%ld", (long long)done, pid);
  snprintf(fname, 64, "step-%08lld", (long long)done);
  snprintf(tmp, CKPT_PATH, "%s/%s", ctx->opts.checkpoint, name);
  snprintf(final, CKPT_PATH, "%s/%s", ctx->opts.checkpoint, fname);
}

void gslrt_checkpoint_write(gslrt_ctx *ctx, int64_t done) {
  char err[GSLRT_ERRLEN] = "", msg[GSLRT_ERRLEN], tmp[CKPT_PATH], final[CKPT_PATH], path[CKPT_PATH], name[64];
  char fname[64], head[1024];
  long made[2] = {(long)getpid(), 0}; /* rank 0's pid, which names the temporary; whether it failed to make it */
  int verdict[2] = {0, 0}; /* rank 0's: whether the checkpoint failed; the rank with the message */
  int n = 0, k = 0, key = INT_MAX, all = 0;
  double start = MPI_Wtime();
  for (int i = 0; i < ctx->ntensors; i++)
    n += is_saved(&ctx->tensors[i]);
  /* the failure's order (failure_order), then the files' crc32s, then their sizes */
  int64_t *facts = calloc(2 * (size_t)n + 1, sizeof *facts);
  if (!facts)
    gslrt_fatal(ctx, "checkpoint: out of memory");
  int64_t *crc = facts + 1, *bytes = facts + 1 + n;
  gslrt_doing(ctx, "writing the checkpoint of step %lld", (long long)done);
  checkpoint_names(ctx, done, made[0], name, tmp, fname, final);
  if (ctx->rank == 0 && mkdirat(ctx->ckpt_dir, name, 0777) != 0)
    gslrt_seterr(err, sizeof err, "cannot create %s: %s", tmp, strerror(errno)), made[1] = 1;
  gslrt_world_bcast(ctx, made, 2, MPI_LONG, 0, "the sharing of the checkpoint's temporary directory");
  checkpoint_names(ctx, done, made[0], name, tmp, fname, final);
  if (made[1]) {
    free(facts);
    gslrt_fail_all(ctx, "checkpoint %s: %s (the previous checkpoints are intact)", final, err);
  }
  /* every file, each rank going on past its own failure (tile_io); all
   * stop together where a failure is every rank's */
  for (int i = 0; i < ctx->ntensors && !all; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    int phase = 0;
    if (!is_saved(t))
      continue;
    int hlen = gslrt_npy_header(t->dtype, t->rank, t->global_shape, head, sizeof head);
    if (hlen < 0 || snprintf(path, sizeof path, "%s/%s.npy", tmp, t->name) >= (int)sizeof path) {
      /* the same on every rank */
      gslrt_seterr(msg, sizeof msg, "%s %s: cannot name or describe its file", kind_name(t->kind), t->name);
      phase = TILE_PREP, all = 1;
    } else {
      all = tile_io(ctx, t, path, head, hlen, 1, &phase, msg) != 0;
    }
    if (phase && key == INT_MAX)
      key = tile_key(k, phase), memcpy(err, msg, sizeof err);
    k++;
  }
  /* one agreement on every file; it also orders every rank's writes before the reads below */
  if (agree(ctx, key, err))
    goto fn_fail;
  /* the crc32s, file k on rank k mod nranks, which also fsyncs it */
  key = INT_MAX, k = 0;
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    uint32_t c = 0;
    if (!is_saved(t))
      continue;
    if (k % ctx->nranks == ctx->rank && key == INT_MAX) {
      if (snprintf(path, sizeof path, "%s/%s.npy", tmp, t->name) >= (int)sizeof path ||
          file_crc(path, path, 1, &c, &bytes[k], err) != 0)
        key = 0; /* ordered by rank */
      else
        crc[k] = c;
    }
    k++;
  }
  /* one reduction to rank 0 of every rank's failure, crc32s and sizes
   * (each file's known to one rank, 0 on the others) */
  facts[0] = failure_order(ctx, key);
  gslrt_world_reduce(ctx, ctx->rank == 0 ? MPI_IN_PLACE : facts, facts, 2 * n + 1, MPI_INT64_T, MPI_MAX, 0,
                     "the gathering of the checkpoint's checksums");
  if (ctx->rank == 0 && facts[0] != INT64_MIN)
    verdict[0] = 1, verdict[1] = failure_rank(ctx, facts[0]);
  else if (ctx->rank == 0)
    verdict[0] = commit(ctx, name, fname, done, crc, bytes, err) != 0;
  gslrt_world_bcast(ctx, verdict, 2, MPI_INT, 0, "the sharing of the checkpoint's verdict");
  if (verdict[0] && verdict[1] != 0)
    gslrt_world_bcast(ctx, err, GSLRT_ERRLEN, MPI_CHAR, verdict[1], "the sharing of the checkpoint's failure");
  if (verdict[0])
    goto fn_fail;
  if (ctx->rank == 0) {
    prune(ctx, name);
    if (!ctx->opts.quiet) {
      int64_t total = 0;
      for (int i = 0; i < n; i++)
        total += bytes[i];
      printf("checkpoint %s written (%lld bytes, %.3f s)\n", final, (long long)total, MPI_Wtime() - start);
      fflush(stdout);
    }
  }
  free(facts);
  gslrt_doing(ctx, NULL);
  return;
fn_fail:
  if (ctx->rank == 0)
    remove_entry(ctx->ckpt_dir, name);
  free(facts);
  gslrt_fail_all(ctx, "checkpoint %s: %s (the previous checkpoints are intact)", final, err);
}


/* ---- resuming ------------------------------------------------------------- */

/* One tensor of a manifest. */
typedef struct ckpt_entry {
  char name[CKPT_NAME];          /* the tensor's name */
  char file[CKPT_NAME];          /* its file, in the checkpoint's directory */
  int32_t kind;                  /* GSLRT_PARAM or GSLRT_STATE */
  int32_t dtype;                 /* GSLRT_F32 or GSLRT_I32 */
  int32_t rank;                  /* number of dimensions */
  int64_t shape[GSLRT_MAX_RANK]; /* global shape */
  int64_t bytes;                 /* the file's size */
  uint32_t crc;                  /* its crc32 */
  int used;                      /* matched by a tensor of the program */
} ckpt_entry;

/* What a manifest says that resuming uses. */
typedef struct manifest {
  char run[33];                  /* the run's identity */
  int64_t step;                  /* steps done */
  uint64_t seed;                 /* the seed */
  char optimizer[GSLRT_ERRLEN / 2]; /* the optimizer's description */
  char precision[8];             /* "f32" or "bf16" ("f32" in a version 2 manifest) */
  json_t *build;                 /* the program's build record (a reference), or NULL before version 5 */
  ckpt_entry *list;              /* the tensors (malloc'd) */
  int n;                         /* entries in list */
} manifest;

/* s (n bytes) in quotes for a message, at most 40 bytes of it, with '"',
 * '\\' and every byte outside printable ASCII escaped: a message stays
 * one line whatever the manifest holds. */
static const char *quote(char *buf, size_t len, const char *s, size_t n) {
  size_t k = 0;
  buf[k++] = '"';
  for (size_t i = 0; i < n && i < 40 && k + 8 < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      buf[k++] = '\\', buf[k++] = (char)c;
    else if (c >= 0x20 && c < 0x7f)
      buf[k++] = (char)c;
    else
      k += (size_t)snprintf(buf + k, len - k, "\\x%02x", c);
  }
  snprintf(buf + k, len - k, "%s\"", n > 40 ? "..." : "");
  return buf;
}

/* A JSON value as an error message shows it: 2.9, "f64", an object. */
static void describe(const json_t *v, char *buf, size_t len) {
  switch (json_typeof(v)) {
  case JSON_INTEGER:
    snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    break;
  case JSON_REAL: /* 3.0 stays 3.0, so that "not 3" never says a whole number is not one */
    snprintf(buf, len, fabs(json_real_value(v)) < 1e15 && json_real_value(v) == floor(json_real_value(v)) ? "%.1f" : "%.15g",
             json_real_value(v));
    break;
  case JSON_STRING:
    quote(buf, len, json_string_value(v), json_string_length(v));
    break;
  case JSON_OBJECT:
    snprintf(buf, len, "an object");
    break;
  case JSON_ARRAY:
    snprintf(buf, len, "an array");
    break;
  case JSON_TRUE:
    snprintf(buf, len, "true");
    break;
  case JSON_FALSE:
    snprintf(buf, len, "false");
    break;
  default:
    snprintf(buf, len, "null");
  }
}

/* The fields a manifest's object may have, NULL-terminated. */
static const char *const top_fields[] = {"format", "version", "run", "step", "seed", "program",
                                         "compiler", "optimizer", "precision", "build", "provenance", "signals", "mesh",
                                         "inputs", "tensors", NULL};
static const char *const axis_fields[] = {"axis", "size", NULL};
static const char *const input_fields[] = {"name", "batches", "position", NULL};
static const char *const tensor_fields[] = {"name", "kind", "dtype", "shape", "file", "bytes", "crc32", NULL};

/* Checks that obj (at path, e.g. "tensors[2]") is an object with only the
 * given fields. */
static int only_fields(const json_t *obj, const char *path, const char *const *fields, char *err) {
  const char *key;
  json_t *v;
  char got[64];
  if (!json_is_object(obj)) {
    describe(obj, got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be an object, not %s", path, got);
    return -1;
  }
  json_object_foreach((json_t *)obj, key, v) {
    int known = 0;
    for (const char *const *f = fields; *f && !known; f++)
      known = !strcmp(*f, key);
    if (!known) {
      char q[256];
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s has a field %s, which a checkpoint manifest does not have",
                   *path ? path : "the document", quote(q, sizeof q, key, strlen(key)));
      return -1;
    }
  }
  return 0;
}

/* The field key of obj (whose path is path, "" at the top), which must
 * be there. */
static json_t *field(const json_t *obj, const char *path, const char *key, char *err) {
  json_t *v = json_object_get(obj, key);
  if (!v)
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s has no \"%s\"", *path ? path : "the document", key);
  return v;
}

/* The name a field goes by in messages: "step", tensors[2].dtype. */
static const char *field_name(char *buf, size_t len, const char *path, const char *key) {
  if (*path)
    snprintf(buf, len, "%s.%s", path, key);
  else
    snprintf(buf, len, "\"%s\"", key);
  return buf;
}

/* A whole number in [lo, hi]. */
static int get_int(const json_t *obj, const char *path, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   char *err) {
  json_t *v = field(obj, path, key, err);
  char got[64], name[128];
  if (!v)
    return -1;
  field_name(name, sizeof name, path, key);
  if (!json_is_integer(v)) {
    describe(v, got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be a whole number, not %s", name, got);
    return -1;
  }
  *out = json_integer_value(v);
  if (*out < lo || *out > hi) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s is %lld, not in [%lld, %lld]", name, (long long)*out,
                 (long long)lo, (long long)hi);
    return -1;
  }
  return 0;
}

/* A string of at most max bytes (and, if set is not NULL, one of set),
 * into out (max + 1 bytes). */
static int get_str(const json_t *obj, const char *path, const char *key, size_t max, const char *const *set,
                   char *out, char *err) {
  json_t *v = field(obj, path, key, err);
  char got[64], name[128], any[128] = "";
  if (!v)
    return -1;
  field_name(name, sizeof name, path, key);
  describe(v, got, sizeof got);
  if (!json_is_string(v)) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be a string, not %s", name, got);
    return -1;
  }
  if (json_string_length(v) > max) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s is %s, longer than %zu bytes", name, got, max);
    return -1;
  }
  for (size_t i = 0; i < json_string_length(v); i++) {
    unsigned char c = (unsigned char)json_string_value(v)[i];
    if (c < 0x20 || c > 0x7e) { /* names, files, descriptions: what gsl writes is printable ASCII */
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s is %s, with a byte that is not printable ASCII", name, got);
      return -1;
    }
  }
  if (set) {
    int in = 0;
    for (const char *const *s = set; *s; s++) {
      in |= !strcmp(*s, json_string_value(v));
      snprintf(any + strlen(any), sizeof any - strlen(any), "%s\"%s\"", s == set ? "" : s[1] ? ", " : " or ", *s);
    }
    if (!in) {
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s is %s, not %s", name, got, any);
      return -1;
    }
  }
  memcpy(out, json_string_value(v), json_string_length(v) + 1);
  return 0;
}

/* An array of at most max elements. */
static json_t *get_array(const json_t *obj, const char *path, const char *key, size_t max, char *err) {
  json_t *v = field(obj, path, key, err);
  char got[64], name[128];
  if (!v)
    return NULL;
  field_name(name, sizeof name, path, key);
  if (!json_is_array(v)) {
    describe(v, got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be an array, not %s", name, got);
    return NULL;
  }
  if (json_array_size(v) > max) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s has %zu elements, at most %zu", name, json_array_size(v),
                 max);
    return NULL;
  }
  return v;
}

/* Whether s is a plain file name: no '/', not "." or "..". */
static int plain_name(const char *s) { return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, ".."); }

static const char *const kinds[] = {"param", "state", NULL};
static const char *const dtypes[] = {"f32", "i32", "bf16", NULL};
static const char *const precisions[] = {"f32", "bf16", NULL};

/* One entry of "tensors", at index i, into e. */
static int parse_tensor(const json_t *t, size_t i, ckpt_entry *e, char *err) {
  char path[64], kind[8], dtype[8], name[128];
  int64_t v;
  json_t *shape;
  size_t d;
  json_t *x;
  snprintf(path, sizeof path, "tensors[%zu]", i);
  memset(e, 0, sizeof *e);
  if (only_fields(t, path, tensor_fields, err) != 0 ||
      get_str(t, path, "name", CKPT_NAME - 1, NULL, e->name, err) != 0 ||
      get_str(t, path, "kind", sizeof kind - 1, kinds, kind, err) != 0 ||
      get_str(t, path, "dtype", sizeof dtype - 1, dtypes, dtype, err) != 0 ||
      !(shape = get_array(t, path, "shape", GSLRT_MAX_RANK, err)) ||
      get_str(t, path, "file", CKPT_NAME - 1, NULL, e->file, err) != 0 ||
      get_int(t, path, "bytes", 0, INT64_MAX, &e->bytes, err) != 0 || get_int(t, path, "crc32", 0, UINT32_MAX, &v, err) != 0)
    return -1;
  e->crc = (uint32_t)v;
  e->kind = !strcmp(kind, "state") ? GSLRT_STATE : GSLRT_PARAM;
  e->dtype = !strcmp(dtype, "i32") ? GSLRT_I32 : !strcmp(dtype, "bf16") ? GSLRT_BF16 : GSLRT_F32;
  if (!*e->name) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s.name is empty", path);
    return -1;
  }
  if (!plain_name(e->file)) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s.file is \"%s\", not a file name in the checkpoint's "
                 "directory", path, e->file);
    return -1;
  }
  json_array_foreach(shape, d, x) {
    snprintf(name, sizeof name, "%s.shape[%zu]", path, d);
    if (!json_is_integer(x) || json_integer_value(x) < 1) {
      char got[64];
      describe(x, got, sizeof got);
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: %s must be a whole number >= 1, not %s", name, got);
      return -1;
    }
    e->shape[e->rank++] = json_integer_value(x);
  }
  return 0;
}

/* "signals": an object whose every field is a number or null, or an array
 * of them. */
static int check_signals(const json_t *doc, char *err) {
  json_t *sig = field(doc, "", "signals", err), *x;
  const char *key;
  char got[64], q[256];
  if (!sig)
    return -1;
  if (!json_is_object(sig)) {
    describe(sig, got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"signals\" must be an object, not %s", got);
    return -1;
  }
  json_object_foreach(sig, key, x) {
    json_t *bad = json_is_number(x) || json_is_null(x) ? NULL : x, *y;
    size_t j;
    if (json_is_array(x)) {
      bad = NULL;
      json_array_foreach(x, j, y)
        if (!bad && !json_is_number(y) && !json_is_null(y))
          bad = y;
    }
    if (bad) {
      describe(bad, got, sizeof got);
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: signals.%s must be a number or null, or an array of them, not %s",
                   quote(q, sizeof q, key, strlen(key)), got);
      return -1;
    }
  }
  return 0;
}

/* Parses and checks a manifest's text, of the checkpoint of step
 * dir_step, into *m; 0, or -1 naming the field in err. Every rank alike. */
static int parse_manifest(const char *text, size_t len, int64_t dir_step, manifest *m, char *err) {
  static const char *const formats[] = {"gsl-checkpoint", NULL};
  json_error_t je;
  json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je), *mesh, *inputs, *tensors, *x;
  char format[16], seed[32];
  int64_t v, batches = 0;
  size_t i;
  int rc = -1;
  memset(m, 0, sizeof *m);
  if (!doc) { /* jansson's text may quote the input: kept to one printable line */
    for (char *c = je.text; *c; c++)
      if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
        *c = '?';
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json:%d:%d: %s", je.line, je.column, je.text);
    return -1;
  }
  if (only_fields(doc, "", top_fields, err) != 0 ||
      get_str(doc, "", "format", sizeof format - 1, formats, format, err) != 0 ||
      get_int(doc, "", "version", 0, INT_MAX, &v, err) != 0)
    goto fn_exit;
  if (v < CKPT_VERSION_OLD || v > CKPT_VERSION) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json has format version %lld, this runtime reads %d to %d",
                 (long long)v, CKPT_VERSION_OLD, CKPT_VERSION);
    goto fn_exit;
  }
  if (v < CKPT_VERSION_SIGNALS && json_object_get(doc, "signals")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: format version %lld has no \"signals\" (they came in %d)",
                 (long long)v, CKPT_VERSION_SIGNALS);
    goto fn_exit;
  }
  if (v >= CKPT_VERSION_SIGNALS && check_signals(doc, err) != 0)
    goto fn_exit;
  if (v == CKPT_VERSION_OLD && json_object_get(doc, "precision")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: format version %d has no \"precision\" (it came in %d)",
                 CKPT_VERSION_OLD, CKPT_VERSION_PRECISION);
    goto fn_exit;
  }
  if (v == CKPT_VERSION_OLD)
    snprintf(m->precision, sizeof m->precision, "f32");
  else if (get_str(doc, "", "precision", sizeof m->precision - 1, precisions, m->precision, err) != 0)
    goto fn_exit;
  if (v < CKPT_VERSION_BUILD && json_object_get(doc, "build")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: format version %lld has no \"build\" (it came in %d)",
                 (long long)v, CKPT_VERSION_BUILD);
    goto fn_exit;
  }
  if (v < CKPT_VERSION && json_object_get(doc, "provenance")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: format version %lld has no \"provenance\" (it came in %d)",
                 (long long)v, CKPT_VERSION);
    goto fn_exit;
  }
  if (v == CKPT_VERSION) { /* a record for audit: an object, whatever it holds; resuming reads none of it */
    json_t *p = field(doc, "", "provenance", err);
    char got[64];
    if (!p)
      goto fn_exit;
    if (!json_is_object(p)) {
      describe(p, got, sizeof got);
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"provenance\" must be an object, not %s", got);
      goto fn_exit;
    }
  }
  if (v >= CKPT_VERSION_BUILD) { /* a record: an object, whatever it holds (build_note reads what it knows) */
    json_t *b = field(doc, "", "build", err);
    char got[64];
    if (!b)
      goto fn_exit;
    if (!json_is_object(b)) {
      describe(b, got, sizeof got);
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"build\" must be an object, not %s", got);
      goto fn_exit;
    }
    m->build = json_incref(b);
  }
  if (get_str(doc, "", "run", 32, NULL, m->run, err) != 0)
    goto fn_exit;
  if (strlen(m->run) != 32 || strspn(m->run, "0123456789abcdef") != 32) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"run\" is \"%s\", not 32 hexadecimal digits", m->run);
    goto fn_exit;
  }
  if (get_int(doc, "", "step", 0, INT64_MAX, &m->step, err) != 0)
    goto fn_exit;
  if (m->step != dir_step) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"step\" is %lld, but the directory is step-%08lld",
                 (long long)m->step, (long long)dir_step);
    goto fn_exit;
  }
  if (get_str(doc, "", "seed", 20, NULL, seed, err) != 0)
    goto fn_exit;
  errno = 0;
  m->seed = strtoull(seed, NULL, 10);
  if (!*seed || strspn(seed, "0123456789") != strlen(seed) || errno || (seed[0] == '0' && seed[1])) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"seed\" is \"%s\", not a decimal integer from 0 to %llu",
                 seed, (unsigned long long)UINT64_MAX);
    goto fn_exit;
  }
  if (!json_is_string(json_object_get(doc, "program")) || !json_is_string(json_object_get(doc, "compiler"))) {
    char got[64];
    const char *which = json_is_string(json_object_get(doc, "program")) ? "compiler" : "program";
    if (!field(doc, "", which, err))
      goto fn_exit;
    describe(json_object_get(doc, which), got, sizeof got);
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: \"%s\" must be a string, not %s", which, got);
    goto fn_exit;
  }
  if (get_str(doc, "", "optimizer", sizeof m->optimizer - 1, NULL, m->optimizer, err) != 0 ||
      !(mesh = get_array(doc, "", "mesh", GSLRT_MAX_AXES, err)) ||
      !(inputs = get_array(doc, "", "inputs", INT_MAX, err)) || !(tensors = get_array(doc, "", "tensors", INT_MAX, err)))
    goto fn_exit;
  json_array_foreach(mesh, i, x) {
    char path[64], axis[CKPT_NAME];
    snprintf(path, sizeof path, "mesh[%zu]", i);
    if (only_fields(x, path, axis_fields, err) != 0 || get_str(x, path, "axis", CKPT_NAME - 1, NULL, axis, err) != 0 ||
        get_int(x, path, "size", 1, INT_MAX, &v, err) != 0)
      goto fn_exit;
  }
  json_array_foreach(inputs, i, x) {
    char path[64], name[CKPT_NAME];
    snprintf(path, sizeof path, "inputs[%zu]", i);
    if (only_fields(x, path, input_fields, err) != 0 || get_str(x, path, "name", CKPT_NAME - 1, NULL, name, err) != 0 ||
        get_int(x, path, "batches", 1, INT64_MAX, &batches, err) != 0 ||
        get_int(x, path, "position", 0, batches - 1, &v, err) != 0)
      goto fn_exit;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(json_string_value(json_object_get(json_array_get(inputs, j), "name")), name)) {
        gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: inputs[%zu] and inputs[%zu] are both \"%s\"", j, i, name);
        goto fn_exit;
      }
  }
  if (!(m->list = calloc(json_array_size(tensors) + 1, sizeof *m->list))) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: out of memory");
    goto fn_exit;
  }
  json_array_foreach(tensors, i, x) {
    ckpt_entry *e = &m->list[i];
    if (parse_tensor(x, i, e, err) != 0)
      goto fn_exit;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(m->list[j].name, e->name) || !strcmp(m->list[j].file, e->file)) {
        int same = !strcmp(m->list[j].name, e->name);
        gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: tensors[%zu] and tensors[%zu] both have the %s \"%s\"", j,
                     i, same ? "name" : "file", same ? e->name : e->file);
        goto fn_exit;
      }
    m->n++;
  }
  rc = 0;
fn_exit:
  json_decref(doc);
  if (rc != 0) {
    free(m->list);
    json_decref(m->build);
    m->list = NULL, m->n = 0, m->build = NULL;
  }
  return rc;
}
/* Matches the program's params and states with the manifest: 0, or -1
 * naming the first that differs. Every rank alike. */
static int match(gslrt_ctx *ctx, ckpt_entry *list, int n, char *err) {
  char there[256], here[256];
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    ckpt_entry *e = NULL;
    if (!is_saved(t))
      continue;
    for (int k = 0; k < n && !e; k++)
      if (!strcmp(list[k].name, t->name))
        e = &list[k];
    if (!e) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s of this program is not there", kind_name(t->kind), t->name);
      return -1;
    }
    e->used = 1;
    /* f32 and bf16 restore into each other (rounded or widened, with a note) */
    int32_t same = e->dtype != GSLRT_I32 && t->dtype != GSLRT_I32 ? t->dtype : e->dtype;
    gslrt_type_str(there, sizeof there, same, e->rank, e->shape);
    gslrt_type_str(here, sizeof here, t->dtype, t->rank, t->global_shape);
    if (strcmp(there, here)) /* the shapes differ: name both dtypes as they are */
      gslrt_type_str(there, sizeof there, e->dtype, e->rank, e->shape);
    if (e->kind != t->kind) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s is a %s there, a %s in this program", t->name, kind_name(e->kind),
                   kind_name(t->kind));
      return -1;
    }
    if (strcmp(there, here)) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s is %s there, %s in this program", kind_name(t->kind), t->name,
                   there, here);
      return -1;
    }
  }
  for (int k = 0; k < n; k++)
    if (!list[k].used) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s is there, not in this program", kind_name(list[k].kind),
                   list[k].name);
      return -1;
    }
  return 0;
}


/* Rank 0, after a resume from where: a note on stderr for a precision
 * that differs from the manifest's, and one per tensor restored from f32
 * into bf16 (rounded) or from bf16 into f32 (widened). */
static void precision_notes(const gslrt_ctx *ctx, const char *where, const manifest *m) {
  gslrt_erase_progress();
  if (strcmp(m->precision, precision_name(ctx)))
    fprintf(stderr, "%s: note: checkpoint %s was saved by a program compiled with --precision %s, this one "
            "has --precision %s: resuming\n", ctx->prog, where, m->precision, precision_name(ctx));
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    const ckpt_entry *e = NULL;
    for (int k = 0; is_saved(t) && k < m->n && !e; k++)
      if (!strcmp(m->list[k].name, t->name))
        e = &m->list[k];
    if (e && e->dtype != t->dtype)
      fprintf(stderr, "%s: note: checkpoint tensor '%s' is %s, the program's is %s: %s\n", ctx->prog, t->name,
              gslrt_dtype_name(e->dtype), gslrt_dtype_name(t->dtype),
              t->dtype == GSLRT_BF16 ? "rounded to nearest even" : "widened exactly");
  }
  fflush(stderr);
}

/* A const's value in a note: 8, 0.001, "x"; "(none)" for none. */
static void show_value(const json_t *v, char *buf, size_t len) {
  char *text;
  if (!v) {
    snprintf(buf, len, "(none)");
  } else if (json_is_real(v)) { /* the shortest of %.15g and %.17g that reads back */
    snprintf(buf, len, "%.15g", json_real_value(v));
    if (strtod(buf, NULL) != json_real_value(v))
      snprintf(buf, len, "%.17g", json_real_value(v));
  } else if ((text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT))) {
    snprintf(buf, len, "%s", text);
    free(text);
  } else {
    snprintf(buf, len, "?");
  }
}

/* Appends ", " (unless at the start) and the formatted text to buf. */
static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
  size_t n = strlen(buf);
  va_list ap;
  if (n + 3 >= len)
    return;
  if (n)
    buf[n++] = ',', buf[n++] = ' ', buf[n] = 0;
  va_start(ap, fmt);
  vsnprintf(buf + n, len - n, fmt, ap);
  va_end(ap);
}

/* The files of "sources" in a and b (arrays of {"file", "sha256"}) whose
 * sha256 differs or which only one has, into buf ("" if none). */
static void changed_sources(const json_t *a, const json_t *b, char *buf, size_t len) {
  const json_t *lists[2] = {a, b};
  size_t i, j;
  json_t *x, *y;
  *buf = 0;
  for (int side = 0; side < 2; side++)
    json_array_foreach((json_t *)lists[side], i, x) {
      const char *file = json_string_value(json_object_get(x, "file"));
      const char *sha = json_string_value(json_object_get(x, "sha256")), *other = NULL;
      int seen = 0;
      if (!file)
        continue;
      json_array_foreach((json_t *)lists[!side], j, y)
        if (json_string_value(json_object_get(y, "file")) && !strcmp(json_string_value(json_object_get(y, "file")), file))
          seen = 1, other = json_string_value(json_object_get(y, "sha256"));
      if (!seen || (side == 0 && (!sha || !other || strcmp(sha, other))))
        append(buf, len, "%s", file);
    }
}

/* Whether build record b's "mesh_consts" names key: a const that sizes
 * a mesh axis, which a resume on another mesh changes as a matter of
 * course. */
static int sizes_mesh(const json_t *b, const char *key) {
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(b, "mesh_consts"), i, x)
    if (json_is_string(x) && !strcmp(json_string_value(x), key))
      return 1;
  return 0;
}

/* Rank 0, after a resume from where: one note on stderr if the program
 * that wrote the checkpoint (its manifest's "build") was compiled with
 * other consts (but those that size the mesh: "mesh_consts"), or from
 * other sources (source_sha256), than this one; nothing where either has
 * no build record, or no such field. */
static void build_note(const gslrt_ctx *ctx, const char *where, const manifest *m) {
  const json_t *here = ctx->build, *there = m->build;
  char was[GSLRT_ERRLEN / 4] = "", is[GSLRT_ERRLEN / 4] = "", files[GSLRT_ERRLEN / 4] = "", v[128], part[GSLRT_ERRLEN];
  const char *key;
  json_t *x;
  int consts = 0, sources = 0;
  if (!here || !there)
    return;
  json_t *ca = json_object_get(there, "consts"), *cb = json_object_get(here, "consts");
  if (json_is_object(ca) && json_is_object(cb)) {
    json_object_foreach(ca, key, x) /* the checkpoint's consts, then those only this program has */
      if (!json_equal(x, json_object_get(cb, key)) && !sizes_mesh(here, key) && !sizes_mesh(there, key)) {
        show_value(x, v, sizeof v), append(was, sizeof was, "%s=%s", key, v);
        show_value(json_object_get(cb, key), v, sizeof v), append(is, sizeof is, "%s=%s", key, v);
        consts = 1;
      }
    json_object_foreach(cb, key, x)
      if (!json_object_get(ca, key) && !sizes_mesh(here, key)) {
        append(was, sizeof was, "%s=(none)", key);
        show_value(x, v, sizeof v), append(is, sizeof is, "%s=%s", key, v);
        consts = 1;
      }
  }
  const char *sa = json_string_value(json_object_get(there, "source_sha256"));
  const char *sb = json_string_value(json_object_get(here, "source_sha256"));
  sources = sa && sb && strcmp(sa, sb);
  if (!consts && !sources)
    return;
  if (sources && json_is_array(json_object_get(there, "sources")) && json_is_array(json_object_get(here, "sources")))
    changed_sources(json_object_get(here, "sources"), json_object_get(there, "sources"), files, sizeof files);
  if (consts)
    snprintf(part, sizeof part, "compiled with %s; this one has %s%s", was, is, sources ? "; and " : "");
  else
    *part = 0;
  if (sources)
    snprintf(part + strlen(part), sizeof part - strlen(part), "from other sources (%s%ssource_sha256 %.12s..., "
             "this one's %.12s...)", files, !*files ? "" : strchr(files, ',') ? " differ; " : " differs; ", sa, sb);
  gslrt_erase_progress();
  fprintf(stderr, "%s: note: checkpoint %s was written by a program %s: resuming\n", ctx->prog, where, part);
  fflush(stderr);
}

/* Rank 0: the newest complete checkpoint in DIR, its name in found. 0
 * found, 1 none, -1 error with err. */
static int newest(gslrt_ctx *ctx, char *found, char *err) {
  DIR *d = list_dir(ctx->ckpt_dir);
  struct dirent *e;
  int64_t best = -1;
  if (!d) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s: %s", ctx->opts.checkpoint, strerror(errno));
    return -1;
  }
  while ((e = readdir(d))) {
    int64_t s = step_of(e->d_name);
    if (s > best && entry_kind(ctx->ckpt_dir, e->d_name) == ENTRY_COMPLETE) {
      best = s;
      snprintf(found, CKPT_NAME, "%s", e->d_name);
    }
  }
  closedir(d);
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
static int find_newest(gslrt_ctx *ctx, char *found, char **text, size_t *len, int *lock, char *err) {
  int rc = 1;
  *text = NULL;
  if (!lock) {
    rc = newest(ctx, found, err);
    if (rc == 0 && !(*text = read_manifest(ctx->ckpt_dir, found, len, err)))
      rc = -1;
    return rc;
  }
  *lock = -1;
  for (int tries = 0, none = 0; tries < CKPT_FIND_TRIES && none < CKPT_NONE_TRIES; tries++) {
    struct timespec wait = {0, CKPT_FIND_WAIT_NS};
    char path[CKPT_PATH];
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
    if (fd < 0 || !still_there(ctx->ckpt_dir, found, fd)) { /* being removed, or gone */
      if (fd >= 0)
        close(fd);
      rc = 1;
      continue;
    }
    snprintf(path, sizeof path, "%s/manifest.json", found);
    if (!(*text = read_manifest_fd(fd, path, len, err))) {
      close(fd);
      return -1;
    }
    *lock = fd;
    return 0;
  }
  return rc;
}

/* After a failure (err) to read the checkpoint where, of files list[0..n),
 * locked by rank 0 as *lock, every rank together: whether it is because
 * the checkpoint is gone (removed or replaced since: a run pruning it
 * without the readers' lock), so that a reader (gen) may look for the
 * newest again. A checkpoint that lacks one of its files is being
 * removed (a complete one never does, and its manifest goes in its turn)
 * if its manifest is gone CKPT_GONE_WAIT_NS later. Rank 0 then lets go
 * of *lock and says so unless --quiet. Gone a CKPT_READ_TRIES-th time,
 * the reader fails, saying why. */
static int vanished(gslrt_ctx *ctx, int gen, int *lock, const char *where, const ckpt_entry *list, int n,
                    int attempt, const char *err) {
  const char *name = strrchr(where, '/') + 1;
  char path[CKPT_PATH];
  struct stat st;
  int gone = 0, lacks = 0;
  if (ctx->rank == 0 && gen && *lock >= 0) {
    gone = !still_there(ctx->ckpt_dir, name, *lock);
    for (int k = 0; k < n && !gone && !lacks; k++)
      lacks = snprintf(path, sizeof path, "%s/%s", name, list[k].file) < (int)sizeof path &&
              fstatat(ctx->ckpt_dir, path, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    if (lacks) {
      struct timespec wait = {0, CKPT_GONE_WAIT_NS};
      nanosleep(&wait, NULL);
      gone = !still_there(ctx->ckpt_dir, name, *lock);
    }
  }
  gslrt_world_bcast(ctx, &gone, 1, MPI_INT, 0, "the sharing of whether the checkpoint is gone");
  if (!gone)
    return 0;
  if (ctx->rank == 0) {
    close(*lock);
    *lock = -1;
  }
  if (attempt >= CKPT_READ_TRIES)
    gslrt_fail_all(ctx, "--generate: checkpoint %s was removed while it was read (%s), the %dth in a row; is a "
                   "run of an older gsl, which does not leave alone a checkpoint being read, pruning %s?", where,
                   err, CKPT_READ_TRIES, ctx->opts.checkpoint);
  if (ctx->rank == 0 && !ctx->opts.quiet) {
    fprintf(stderr, "%s: note: checkpoint %s was removed while it was read; reading the newest again\n",
            ctx->prog, where);
    fflush(stderr);
  }
  return 1;
}

int64_t gslrt_checkpoint_resume(gslrt_ctx *ctx) {
  const char *dir = ctx->opts.checkpoint;
  char err[GSLRT_ERRLEN] = "", where[CKPT_PATH], path[CKPT_PATH];
  char *text = NULL;
  size_t tlen = 0;
  manifest m;
  ckpt_entry *list = NULL;
  int64_t *disp = NULL;
  int n = 0, fail = 0, lock = -1;
  struct {
    int status;             /* find_newest's: 0 found, 1 none, -1 error (rank 0's err) */
    int len;                /* the manifest's length */
    char found[CKPT_NAME];  /* the checkpoint's name in DIR */
  } newest = {0, 0, ""};
  int gen = ctx->opts.generate > 0; /* generation: the newest checkpoint's params, nothing else */
  if (!dir || (!ctx->opts.resume && !gen))
    return 0;
  gslrt_doing(ctx, "reading the newest checkpoint of %s", dir);
  /* a reader beside a run reads again where the checkpoint vanished (vanished) */
  for (int attempt = 1;; attempt++) {
    if (list) /* a reading that vanished (vanished): m is that attempt's */
      json_decref(m.build);
    free(list), free(disp);
    list = NULL, disp = NULL, n = 0, fail = 0;
    if (ctx->rank == 0) {
      newest.status = find_newest(ctx, newest.found, &text, &tlen, gen ? &lock : NULL, err);
      newest.len = (int)tlen;
    }
    gslrt_world_bcast(ctx, &newest, (int)sizeof newest, MPI_BYTE, 0, "the sharing of the newest checkpoint's name");
    if (newest.status < 0)
      gslrt_fail_all(ctx, "--resume: %s", err);
    if (newest.status == 1 && gen)
      gslrt_fail_all(ctx, "--generate: --checkpoint %s holds no checkpoint to generate from", dir);
    if (newest.status == 1) {
      if (ctx->rank == 0 && !ctx->opts.quiet) {
        printf("no checkpoint in %s: starting at step 0\n", dir);
        fflush(stdout);
      }
      gslrt_doing(ctx, NULL);
      return 0;
    }
    if (ctx->rank != 0 && !(text = calloc(1, (size_t)newest.len + 1)))
      gslrt_fatal(ctx, "--resume: out of memory");
    gslrt_world_bcast(ctx, text, newest.len, MPI_CHAR, 0, "the sharing of the checkpoint's manifest");
    if (snprintf(where, sizeof where, "%s/%s", dir, newest.found) >= (int)sizeof where)
      gslrt_fail_all(ctx, "--resume: the path of %s is too long", newest.found);
    /* every rank parses and checks the same text, and decides alike */
    if (parse_manifest(text, (size_t)newest.len, step_of(newest.found), &m, err) != 0) {
      free(text);
      gslrt_fail_all(ctx, "checkpoint %s: %s", where, err);
    }
    free(text);
    text = NULL;
    list = m.list, n = m.n;
    /* before the tensors: a schedule given to sgd adds its step count */
    if (strcmp(m.optimizer, ctx->optimizer ? ctx->optimizer : "none")) {
      free(list);
      gslrt_fail_all(ctx, "checkpoint %s: the optimizer is %s there, %s in this program", where, m.optimizer,
                     ctx->optimizer ? ctx->optimizer : "none");
    }
    if (match(ctx, list, n, err) != 0) {
      free(list);
      gslrt_fail_all(ctx, "checkpoint %s: %s", where, err);
    }
    if (ctx->opts.seed_given && ctx->opts.seed != m.seed && !gen) {
      free(list);
      gslrt_fail_all(ctx, "checkpoint %s: it was saved with --seed %llu, not %llu (resume without --seed, "
                     "or with the same)", where, (unsigned long long)m.seed, (unsigned long long)ctx->opts.seed);
    }
    /* sizes and crc32s: file k on rank k mod nranks; the first bad file is named */
    int key = INT_MAX;
    if (!(disp = calloc((size_t)n + 1, sizeof *disp)))
      gslrt_fatal(ctx, "--resume: out of memory");
    for (int k = 0; k < n && key == INT_MAX; k++) {
      ckpt_entry *e = &list[k];
      uint32_t crc;
      int64_t bytes;
      gslrt_npy h;
      char msg[GSLRT_ERRLEN];
      if (k % ctx->nranks != ctx->rank)
        continue;
      if (snprintf(path, sizeof path, "%s/%s", where, e->file) >= (int)sizeof path)
        gslrt_seterr(err, sizeof err, "the path of %s is too long", e->file), fail = 1;
      else if (file_crc(path, e->file, 0, &crc, &bytes, err) != 0)
        fail = 1;
      else if (bytes != e->bytes)
        gslrt_seterr(err, sizeof err, "%s is %lld bytes, the manifest says %lld", e->file, (long long)bytes,
                     (long long)e->bytes), fail = 1;
      else if (crc != e->crc)
        gslrt_seterr(err, sizeof err, "%s has crc32 %lu, the manifest says %lu", e->file,
                     (unsigned long)crc, (unsigned long)e->crc), fail = 1;
      else if (gslrt_npy_read_header(path, &h, msg, sizeof msg) != 0)
        gslrt_seterr(err, sizeof err, "%s", msg), fail = 1;
      else if (h.dtype != gslrt_file_dtype(e->dtype) || h.rank != e->rank ||
               memcmp(h.shape, e->shape, (size_t)e->rank * sizeof *h.shape))
        gslrt_seterr(err, sizeof err, "%s: its header does not match the manifest", e->file), fail = 1;
      else
        disp[k] = h.data_offset;
      if (fail)
        key = k;
    }
    /* one agreement on every file and its offset (the one rank's that read its header) */
    if (agree_facts(ctx, key, err, disp, n, "the agreement on the checkpoint's files and offsets")) {
      if (vanished(ctx, gen, &lock, where, list, n, attempt, err))
        continue;
      free(list), free(disp);
      gslrt_fail_all(ctx, "checkpoint %s: %s", where, err);
    }
    /* every rank reads its own tiles, going on past its own failure
     * (tile_io); all stop together where a failure is every rank's */
    key = INT_MAX;
    for (int i = 0, j = 0, all = 0; i < ctx->ntensors && !all; i++) {
      const gslrt_tensor *t = &ctx->tensors[i];
      char msg[GSLRT_ERRLEN];
      int k = 0, phase = 0;
      if (!is_saved(t))
        continue;
      while (strcmp(list[k].name, t->name))
        k++;
      if (snprintf(path, sizeof path, "%s/%s", where, list[k].file) >= (int)sizeof path)
        gslrt_fail_all(ctx, "checkpoint %s: the path of %s is too long", where, list[k].file);
      all = tile_io(ctx, t, path, NULL, disp[k], 0, &phase, msg) != 0;
      if (phase && key == INT_MAX)
        key = tile_key(j, phase), memcpy(err, msg, sizeof err);
      j++;
    }
    /* one agreement on every tile read */
    fail = agree(ctx, key, err);
    if (fail && vanished(ctx, gen, &lock, where, list, n, attempt, err))
      continue;
    if (fail) {
      free(list), free(disp);
      gslrt_fail_all(ctx, "checkpoint %s: %s", where, err);
    }
    break;
  }
  if (lock >= 0) /* every rank has read every tile: the checkpoint may go */
    close(lock);
  if (!gen) /* generation draws with its own --seed */
    ctx->seed = m.seed;
  memcpy(ctx->run_id, m.run, sizeof ctx->run_id);
  if (ctx->rank == 0)
    precision_notes(ctx, where, &m), build_note(ctx, where, &m);
  json_decref(m.build);
  free(list), free(disp);
  if (ctx->rank == 0 && !ctx->opts.quiet && gen) { /* stdout has the text alone */
    fprintf(stderr, "%s: generating from checkpoint %s (step %lld)\n", ctx->prog, where, (long long)m.step);
    fflush(stderr);
  } else if (ctx->rank == 0 && !ctx->opts.quiet) {
    printf("resumed from %s at step %lld\n", where, (long long)m.step);
    fflush(stdout);
  }
  gslrt_doing(ctx, NULL);
  return m.step;
}
