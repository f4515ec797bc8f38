/* checkpoint.c — --checkpoint, --checkpoint-every, --keep and --resume:
 * saving every param and optimizer state, and restoring them on any mesh;
 * here the write and the resume, every rank together, over the files of
 * their parts (ckpt.h): the directory's layout (ckdir.c, which gslrun
 * links too), the directory on rank 0 (ckpt_lock.c: its lock, its checks,
 * the commit, pruning, the readers' lock), the manifest's schema and the
 * build record (ckpt_manifest.c), and the tiled MPI-IO of each tensor's
 * file with the ranks' agreements on it (ckpt_tiles.c).
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
 * it (see "Readers beside a run", ckpt_lock.c). A crash at any moment leaves the
 * complete checkpoints as they were, and at most a .tmp. directory, which
 * resuming ignores.
 *
 * Resuming. Rank 0 finds the newest complete checkpoint and reads its
 * manifest, which every rank then parses and checks alike against the
 * program (every param and state, the same kind, dtype (f32 and bf16 may
 * stand for each other: "bf16", ckpt_tiles.c) and global shape,
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
 * Generation (--generate, generate.c) only reads. DIR must exist, and
 * DIR/.lock is not taken: a run still training in DIR may be sampled (a
 * checkpoint appears whole, by a rename). The newest complete checkpoint
 * is checked and read as for --resume, but the generation keeps its own
 * --seed, and its note goes to stderr (stdout has the text alone); a DIR
 * with no checkpoint is an error.
 *
 * Modes. Every directory is made with 0777 and every file with 0666, less
 * the umask: the manifest and .lock by open (ckpt_manifest.c,
 * ckpt_lock.c); the tensors' files by
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
 * of N files. */
#include "ckpt.h"
#include "seterr.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CKPT_GONE_WAIT_NS 200000000L /* for a checkpoint that lacks a file to be gone (200 ms) */
#define CKPT_READ_TRIES 5          /* a reader's reads of a checkpoint that vanished while read */

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

/* The names of step done's checkpoint: its temporary, made by the rank 0
 * of process pid (name, 64 bytes; tmp, DIR/name), and its own (fname,
 * final). */
static void checkpoint_names(const gslrt_ctx *ctx, int64_t done, long pid, char *name, char *tmp, char *fname,
                             char *final) {
  gslrt_ckdir_temp_name(name, 64, done, pid);
  gslrt_ckdir_step_name(fname, 64, done);
  snprintf(tmp, CKDIR_PATH, "%s/%s", ctx->opts.checkpoint, name);
  snprintf(final, CKDIR_PATH, "%s/%s", ctx->opts.checkpoint, fname);
}

void gslrt_checkpoint_write(gslrt_ctx *ctx, int64_t done) {
  char err[GSLRT_ERRLEN] = "", msg[GSLRT_ERRLEN], tmp[CKDIR_PATH], final[CKDIR_PATH], path[CKDIR_PATH], name[64];
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
      all = gslrt_ckpt_tile_io(ctx, t, path, head, hlen, 1, &phase, msg) != 0;
    }
    if (phase && key == INT_MAX)
      key = gslrt_ckpt_tile_key(k, phase), memcpy(err, msg, sizeof err);
    k++;
  }
  /* one agreement on every file; it also orders every rank's writes before the reads below */
  if (gslrt_ckpt_agree(ctx, key, err))
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
          gslrt_ckpt_file_crc(path, path, 1, &c, &bytes[k], err) != 0)
        key = 0; /* ordered by rank */
      else
        crc[k] = c;
    }
    k++;
  }
  /* one reduction to rank 0 of every rank's failure, crc32s and sizes
   * (each file's known to one rank, 0 on the others) */
  facts[0] = gslrt_ckpt_failure_order(ctx, key);
  gslrt_world_reduce(ctx, ctx->rank == 0 ? MPI_IN_PLACE : facts, facts, 2 * n + 1, MPI_INT64_T, MPI_MAX, 0,
                     "the gathering of the checkpoint's checksums");
  if (ctx->rank == 0 && facts[0] != INT64_MIN)
    verdict[0] = 1, verdict[1] = gslrt_ckpt_failure_rank(ctx, facts[0]);
  else if (ctx->rank == 0)
    verdict[0] = gslrt_ckpt_commit(ctx, name, fname, done, crc, bytes, err) != 0;
  gslrt_world_bcast(ctx, verdict, 2, MPI_INT, 0, "the sharing of the checkpoint's verdict");
  if (verdict[0] && verdict[1] != 0)
    gslrt_world_bcast(ctx, err, GSLRT_ERRLEN, MPI_CHAR, verdict[1], "the sharing of the checkpoint's failure");
  if (verdict[0])
    goto fn_fail;
  if (ctx->rank == 0) {
    gslrt_ckpt_prune(ctx, name);
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
    gslrt_ckpt_remove_entry(ctx->ckpt_dir, name);
  free(facts);
  gslrt_fail_all(ctx, "checkpoint %s: %s (the previous checkpoints are intact)", final, err);
}

/* ---- resuming ------------------------------------------------------------- */

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
  char path[CKDIR_PATH];
  struct stat st;
  int gone = 0, lacks = 0;
  if (ctx->rank == 0 && gen && *lock >= 0) {
    gone = !gslrt_ckpt_still_there(ctx->ckpt_dir, name, *lock);
    for (int k = 0; k < n && !gone && !lacks; k++)
      lacks = snprintf(path, sizeof path, "%s/%s", name, list[k].file) < (int)sizeof path &&
              fstatat(ctx->ckpt_dir, path, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    if (lacks) {
      struct timespec wait = {0, CKPT_GONE_WAIT_NS};
      nanosleep(&wait, NULL);
      gone = !gslrt_ckpt_still_there(ctx->ckpt_dir, name, *lock);
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
  char err[GSLRT_ERRLEN] = "", where[CKDIR_PATH], path[CKDIR_PATH];
  char *text = NULL;
  size_t tlen = 0;
  ckpt_manifest m;
  ckpt_entry *list = NULL;
  int64_t *disp = NULL;
  int n = 0, fail = 0, lock = -1;
  struct {
    int status;             /* find_newest's: 0 found, 1 none, -1 error (rank 0's err) */
    int len;                /* the manifest's length */
    char found[CKDIR_NAME]; /* the checkpoint's name in DIR */
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
      newest.status = gslrt_ckpt_find_newest(ctx, newest.found, &text, &tlen, gen ? &lock : NULL, err);
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
    if (gslrt_ckpt_parse_manifest(text, (size_t)newest.len, gslrt_ckdir_step_of(newest.found), &m, err) != 0) {
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
    if (gslrt_ckpt_match(ctx, list, n, err) != 0) {
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
      else if (gslrt_ckpt_file_crc(path, e->file, 0, &crc, &bytes, err) != 0)
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
    if (gslrt_ckpt_agree_facts(ctx, key, err, disp, n, "the agreement on the checkpoint's files and offsets")) {
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
      all = gslrt_ckpt_tile_io(ctx, t, path, NULL, disp[k], 0, &phase, msg) != 0;
      if (phase && key == INT_MAX)
        key = gslrt_ckpt_tile_key(j, phase), memcpy(err, msg, sizeof err);
      j++;
    }
    /* one agreement on every tile read */
    fail = gslrt_ckpt_agree(ctx, key, err);
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
    gslrt_ckpt_precision_notes(ctx, where, &m), gslrt_ckpt_build_note(ctx, where, &m);
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
