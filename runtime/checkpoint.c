/* checkpoint.c — --checkpoint, --checkpoint-every, --keep and --resume:
 * saving every param and optimizer state, and restoring them on any mesh.
 *
 * Layout. DIR/step-NNNNNNNN/ (the steps done, 8 digits or more) holds one
 * .npy file per param and per state, NAME.npy, of the tensor's global shape
 * in C order, exactly as numpy.save writes it (header padded so that the
 * data starts at a multiple of 64 bytes), and manifest.json: the format
 * version, the step, the seed, the program's source and compiler, its
 * optimizer with every hyperparameter (gslrt_declare_optimizer; "none"
 * for a program that does not train), the mesh it was saved on, every cycling --input's batch count and position, and
 * per tensor its name, kind, dtype, global shape, file, size and zlib crc32
 * (of the whole file). A directory is a complete checkpoint when it has a
 * manifest.json; anything else in DIR is not one.
 *
 * Writing, on every rank together. Rank 0 makes DIR/step-N.tmp.PID/; then
 * per tensor all ranks open its file with MPI-IO, rank 0 writes the header,
 * and each rank writes only its own tile through a file view (a subarray of
 * the global shape at the tile's offset, displaced by the header) with
 * MPI_File_write_all; of a tile replicated over some mesh axes only the
 * copy at coordinate 0 of those axes is written (the others take part with
 * 0 elements), so no rank ever holds more than its own tile. MPI_File_sync
 * flushes each file. Then the crc32s: file i is read back (in 1 MiB chunks)
 * and fsync'd by rank i mod nranks, the results reduced to rank 0, which
 * writes manifest.json (to a temporary, fsync'd, renamed), fsyncs the
 * directory, renames it to DIR/step-N, and fsyncs DIR. Only then are the
 * complete checkpoints beyond the newest --keep removed, with any
 * leftover DIR/step-*.tmp.* directory (of a run that crashed while
 * writing). A crash at any moment leaves the complete checkpoints as they
 * were, and at most a .tmp. directory, which resuming ignores.
 *
 * Resuming. Rank 0 finds the newest complete checkpoint and reads its
 * manifest, which every rank then parses and checks alike against the
 * program (every param and state, the same kind, dtype and global shape,
 * and nothing else; then the same optimizer description, character for
 * character), so all decide together. Each file's size and crc32 is
 * checked by rank i mod nranks as above, its header read; then every rank
 * reads its own tile through a file view (MPI_File_read_all). The seed
 * comes from the manifest; a different --seed is an error. The step
 * counter resumes at the manifest's step, and inputs, drawn by (seed,
 * stream, step, global index) or read as batch step mod B, continue as if
 * the run had never stopped.
 *
 * Errors. A failure on any rank is shared (the first in rank or file
 * order, with its message) before anyone moves on; rank 0 removes the
 * temporary directory, prints one line, and every rank exits 1. */
#include "internal.h"
#include "seterr.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_VERSION 1             /* manifest format version */
#define CKPT_CHUNK (1 << 20)       /* bytes read at a time for a crc32 */
#define CKPT_MAX_MANIFEST (64 << 20) /* longest manifest accepted */
#define CKPT_PATH 4096             /* room for a path */
#define CKPT_KEEP 2                /* complete checkpoints kept without --keep */

static int is_saved(const gslrt_tensor *t) { return t->kind == GSLRT_PARAM || t->kind == GSLRT_STATE; }
static const char *kind_name(int32_t kind) { return kind == GSLRT_STATE ? "state" : "param"; }
static const char *dtype_name(int32_t dtype) { return dtype == GSLRT_I32 ? "i32" : "f32"; }

static void shape_str(char *buf, size_t len, int32_t dtype, int32_t rank, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, len, "%s[", dtype_name(dtype));
  for (int32_t i = 0; i < rank && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < len)
    snprintf(buf + n, len - n, "]");
}

/* Shares a failure: key is INT_MAX on a rank that did not fail, else its
 * order (the rank, or a file's index); the message of the least key goes
 * to err on every rank. Whether any rank failed; every rank together. */
static int agree(gslrt_ctx *ctx, int key, char *err) {
  struct {
    int key, rank;
  } in = {key, ctx->rank}, out;
  gslrt_mpi_check(ctx, MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, ctx->comm), "MPI_Allreduce");
  if (out.key == INT_MAX)
    return 0;
  gslrt_mpi_check(ctx, MPI_Bcast(err, GSLRT_ERRLEN, MPI_CHAR, out.rank, ctx->comm), "MPI_Bcast");
  return 1;
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

/* Removes a directory of plain files (a checkpoint, or a leftover). */
static int remove_dir(const char *path) {
  DIR *d = opendir(path);
  struct dirent *e;
  char file[CKPT_PATH];
  if (!d)
    return -1;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && join(file, path, e->d_name))
      unlink(file);
  closedir(d);
  return rmdir(path);
}

/* The step of a complete checkpoint's name "step-DIGITS", or -1. */
static int64_t step_of(const char *name) {
  const char *p = name + 5;
  if (strncmp(name, "step-", 5) || !*p || strspn(p, "0123456789") != strlen(p) || strlen(p) > 18)
    return -1;
  return strtoll(p, NULL, 10);
}

/* Whether name is a temporary ("step-....tmp.*"). */
static int is_temp(const char *name) { return !strncmp(name, "step-", 5) && strstr(name, ".tmp."); }

/* Whether DIR/name is a complete checkpoint: it has a manifest.json. */
static int is_complete(const char *dir, const char *name) {
  char path[CKPT_PATH], sub[CKPT_PATH];
  struct stat st;
  return join(sub, dir, name) && join(path, sub, "manifest.json") && stat(path, &st) == 0 &&
         S_ISREG(st.st_mode);
}

/* The crc32 and size of a whole file, read in chunks; fsync'd if sync. */
static int file_crc(const char *path, const char *shown, int sync, uint32_t *crc, int64_t *bytes,
                    char *err) {
  int rc = -1, fd = open(path, O_RDONLY);
  unsigned char *buf = NULL;
  uLong c = crc32(0L, Z_NULL, 0);
  *bytes = 0;
  if (fd < 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot open %s: %s", shown, strerror(errno));
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

/* The file type of t's tile within its global array (a scalar is [1]). */
static int tile_type(const gslrt_tensor *t, MPI_Datatype *etype, MPI_Datatype *type, char *err) {
  int sizes[GSLRT_MAX_RANK], subs[GSLRT_MAX_RANK], starts[GSLRT_MAX_RANK], n = t->rank ? t->rank : 1;
  sizes[0] = subs[0] = 1, starts[0] = 0;
  for (int32_t d = 0; d < t->rank; d++) {
    if (t->global_shape[d] > INT_MAX || t->global_shape[d] < 1) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s %s: dimension %d of size %lld cannot be saved",
                   kind_name(t->kind), t->name, (int)d, (long long)t->global_shape[d]);
      return -1;
    }
    sizes[d] = (int)t->global_shape[d], subs[d] = (int)t->local_shape[d];
    starts[d] = (int)t->local_offset[d];
  }
  if (t->local_count > INT_MAX) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s %s: a tile of %lld elements is too large to save",
                 kind_name(t->kind), t->name, (long long)t->local_count);
    return -1;
  }
  *etype = t->dtype == GSLRT_I32 ? MPI_INT32_T : MPI_FLOAT;
  if (MPI_Type_create_subarray(n, sizes, subs, starts, MPI_ORDER_C, *etype, type) != MPI_SUCCESS ||
      MPI_Type_commit(type) != MPI_SUCCESS) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s %s: MPI_Type_create_subarray failed", kind_name(t->kind), t->name);
    return -1;
  }
  return 0;
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

/* Writes (or, if !save, reads) t's tile in path, whose data starts at
 * disp; every rank together; 0 or -1 with err on this rank. */
static int tile_io(gslrt_ctx *ctx, const gslrt_tensor *t, const char *path, const char *head,
                   int64_t disp, int save, char *err) {
  MPI_Datatype etype = MPI_FLOAT, type = MPI_DATATYPE_NULL;
  MPI_File fh = MPI_FILE_NULL;
  MPI_Status st;
  int fail = 0, rc;
  if (tile_type(t, &etype, &type, err) != 0)
    fail = 1;
  if (agree(ctx, fail ? ctx->rank : INT_MAX, err))
    goto fn_fail;
  rc = MPI_File_open(ctx->comm, path, save ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                     MPI_INFO_NULL, &fh);
  if (rc != MPI_SUCCESS)
    mpi_err(rc, "MPI_File_open", path, err), fail = 1;
  if (agree(ctx, fail ? ctx->rank : INT_MAX, err))
    goto fn_fail;
  /* every collective call is made by every rank; the first error is kept */
  if (save && ctx->rank == 0) {
    int got = 0;
    if ((rc = MPI_File_write_at(fh, 0, head, (int)disp, MPI_BYTE, &st)) != MPI_SUCCESS)
      mpi_err(rc, "MPI_File_write_at", path, err), fail = 1;
    else if (MPI_Get_count(&st, MPI_BYTE, &got) != MPI_SUCCESS || got != (int)disp)
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: short write", path), fail = 1;
  }
  rc = MPI_File_set_view(fh, disp, etype, type, "native", MPI_INFO_NULL);
  if (rc != MPI_SUCCESS && !fail)
    mpi_err(rc, "MPI_File_set_view", path, err), fail = 1;
  if (save) {
    int n = writes_tile(ctx, t) ? (int)t->local_count : 0;
    int got = 0;
    rc = MPI_File_write_all(fh, *t->slot, n, etype, &st);
    if (rc != MPI_SUCCESS && !fail)
      mpi_err(rc, "MPI_File_write_all", path, err), fail = 1;
    else if (!fail && (MPI_Get_count(&st, etype, &got) != MPI_SUCCESS || got != n))
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: short write", path), fail = 1;
    rc = MPI_File_sync(fh);
    if (rc != MPI_SUCCESS && !fail)
      mpi_err(rc, "MPI_File_sync", path, err), fail = 1;
  } else {
    rc = MPI_File_read_all(fh, *t->slot, (int)t->local_count, etype, &st);
    int got = 0;
    if (rc != MPI_SUCCESS && !fail)
      mpi_err(rc, "MPI_File_read_all", path, err), fail = 1;
    else if (!fail && (MPI_Get_count(&st, etype, &got) != MPI_SUCCESS || got != (int)t->local_count))
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: short read", path), fail = 1;
  }
  rc = MPI_File_close(&fh);
  if (rc != MPI_SUCCESS && !fail)
    mpi_err(rc, "MPI_File_close", path, err), fail = 1;
  MPI_Type_free(&type);
  return agree(ctx, fail ? ctx->rank : INT_MAX, err) ? -1 : 0;
fn_fail:
  if (fh != MPI_FILE_NULL)
    MPI_File_close(&fh);
  if (type != MPI_DATATYPE_NULL)
    MPI_Type_free(&type);
  return -1;
}

void gslrt_declare_optimizer(gslrt_ctx *ctx, const char *desc) {
  if (ctx->optimizer)
    gslrt_fatal(ctx, "gslrt_declare_optimizer: called twice (%s, then %s)", ctx->optimizer, desc);
  ctx->optimizer = desc;
}

void gslrt_checkpoint_open(gslrt_ctx *ctx) {
  const gslrt_options *op = &ctx->opts;
  char err[GSLRT_ERRLEN] = "";
  int status = 0;
  struct stat st;
  if (op->checkpoint_every && !op->checkpoint)
    gslrt_usage_error(ctx, "--checkpoint-every needs --checkpoint DIR");
  if (op->resume && !op->checkpoint)
    gslrt_usage_error(ctx, "--resume needs --checkpoint DIR");
  if (op->keep && !op->checkpoint)
    gslrt_usage_error(ctx, "--keep needs --checkpoint DIR");
  if (!op->checkpoint)
    return;
  if (strlen(op->checkpoint) > CKPT_PATH - 256)
    gslrt_usage_error(ctx, "--checkpoint: the directory name is too long");
  if (ctx->rank == 0) {
    if (stat(op->checkpoint, &st) != 0) {
      if (errno != ENOENT || mkdir(op->checkpoint, 0777) != 0)
        gslrt_seterr(err, sizeof err, "--checkpoint %s: cannot create %s: %s", op->checkpoint,
                     op->checkpoint, strerror(errno)), status = 1;
    } else if (!S_ISDIR(st.st_mode)) {
      gslrt_seterr(err, sizeof err, "--checkpoint %s: %s is not a directory", op->checkpoint,
                   op->checkpoint), status = 1;
    } else if (access(op->checkpoint, W_OK | X_OK) != 0) {
      gslrt_seterr(err, sizeof err, "--checkpoint %s: cannot write in %s: %s", op->checkpoint,
                   op->checkpoint, strerror(errno)), status = 1;
    }
  }
  gslrt_rank0_verdict(ctx, status ? 1 : 0, err);
}

int gslrt_checkpoint_due(const gslrt_ctx *ctx, int64_t done) {
  const gslrt_options *op = &ctx->opts;
  return op->checkpoint && (done == op->steps || (op->checkpoint_every && done % op->checkpoint_every == 0));
}

/* ---- writing -------------------------------------------------------------- */

/* A JSON string (the names are identifiers; anything else is escaped). */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* Writes dir/manifest.json through a fsync'd temporary; rank 0. */
static int write_manifest(gslrt_ctx *ctx, const char *dir, int64_t done, const uint32_t *crc,
                          const int64_t *bytes, char *err) {
  char path[CKPT_PATH], tmp[CKPT_PATH];
  FILE *f;
  int first = 1, k = 0;
  if (!join(path, dir, "manifest.json") || !join(tmp, dir, "manifest.json.tmp")) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: the path is too long", dir);
    return -1;
  }
  if (!(f = fopen(tmp, "wx"))) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot create %s: %s", tmp, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"format\": \"gsl-checkpoint\",\n  \"version\": %d,\n  \"step\": %lld,\n  \"seed\": %llu,\n",
          CKPT_VERSION, (long long)done, (unsigned long long)ctx->seed);
  fputs("  \"program\": ", f);
  json_str(f, ctx->info->source ? ctx->info->source : "");
  fputs(",\n  \"compiler\": ", f);
  json_str(f, ctx->info->compiler_version ? ctx->info->compiler_version : "");
  fputs(",\n  \"optimizer\": ", f);
  json_str(f, ctx->optimizer ? ctx->optimizer : "none");
  fputs(",\n  \"mesh\": [", f);
  for (int a = 0; a < ctx->naxes; a++) {
    fprintf(f, "%s{\"axis\": ", a ? ", " : "");
    json_str(f, ctx->axis_name[a]);
    fprintf(f, ", \"size\": %lld}", (long long)ctx->axis_size[a]);
  }
  fputs("],\n  \"inputs\": [", f);
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    if (t->kind != GSLRT_INPUT || !t->batches)
      continue;
    fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
    json_str(f, t->name);
    fprintf(f, ", \"batches\": %lld, \"position\": %lld}", (long long)t->batches,
            (long long)(done % t->batches));
    first = 0;
  }
  fprintf(f, "%s],\n  \"tensors\": [", first ? "" : "\n  ");
  first = 1;
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    char shape[256];
    if (!is_saved(t))
      continue;
    shape_str(shape, sizeof shape, t->dtype, t->rank, t->global_shape);
    fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
    json_str(f, t->name);
    fprintf(f, ", \"kind\": \"%s\", \"dtype\": \"%s\", \"shape\": %s, \"file\": ", kind_name(t->kind),
            dtype_name(t->dtype), strchr(shape, '['));
    char file[CKPT_PATH];
    snprintf(file, sizeof file, "%s.npy", t->name);
    json_str(f, file);
    fprintf(f, ", \"bytes\": %lld, \"crc32\": %lu}", (long long)bytes[k], (unsigned long)crc[k]);
    k++;
    first = 0;
  }
  fprintf(f, "%s]\n}\n", first ? "" : "\n  ");
  if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot write %s: %s", tmp, strerror(errno));
    fclose(f);
    return -1;
  }
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Removes, on rank 0, the complete checkpoints older than the newest keep
 * and every leftover temporary but ours; a failure is only a warning. */
static void prune(gslrt_ctx *ctx, const char *mine) {
  const char *dir = ctx->opts.checkpoint;
  DIR *d = opendir(dir);
  struct dirent *e;
  int64_t *steps = NULL;
  int n = 0, cap = 0;
  char path[CKPT_PATH];
  if (!d)
    return;
  while ((e = readdir(d))) {
    int64_t s = step_of(e->d_name);
    if (is_temp(e->d_name) && strcmp(e->d_name, mine) && join(path, dir, e->d_name)) {
      if (remove_dir(path) != 0)
        fprintf(stderr, "%s: warning: cannot remove the leftover %s: %s\n", ctx->prog, path,
                strerror(errno));
    } else if (s >= 0 && is_complete(dir, e->d_name)) {
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
  for (int i = 0; i < n; i++) {
    int newer = 0;
    for (int j = 0; j < n; j++)
      newer += steps[j] > steps[i];
    if (newer >= (ctx->opts.keep ? ctx->opts.keep : CKPT_KEEP)) {
      snprintf(path, sizeof path, "%s/step-%08lld", dir, (long long)steps[i]);
      if (remove_dir(path) != 0)
        fprintf(stderr, "%s: warning: cannot remove the old checkpoint %s: %s\n", ctx->prog, path,
                strerror(errno));
    }
  }
  free(steps);
  fsync_path(dir);
}

/* Commits the complete temporary tmp as final, on rank 0: manifest, fsyncs,
 * renames (an existing final is moved aside first, then removed). */
static int commit(gslrt_ctx *ctx, const char *tmp, const char *final, int64_t done, const uint32_t *crc,
                  const int64_t *bytes, char *err) {
  char old[CKPT_PATH];
  struct stat st;
  int aside = 0;
  if (write_manifest(ctx, tmp, done, crc, bytes, err) != 0)
    return -1;
  if (fsync_path(tmp) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot fsync %s: %s", tmp, strerror(errno));
    return -1;
  }
  if (lstat(final, &st) == 0) {
    if (snprintf(old, sizeof old, "%s.tmp.old.%ld", final, (long)getpid()) >= (int)sizeof old ||
        rename(final, old) != 0) {
      gslrt_seterr(err, GSLRT_ERRLEN, "cannot move the existing %s aside: %s", final, strerror(errno));
      return -1;
    }
    aside = 1;
  }
  if (rename(tmp, final) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    return -1;
  }
  if (fsync_path(ctx->opts.checkpoint) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot fsync %s: %s", ctx->opts.checkpoint, strerror(errno));
    return -1;
  }
  if (aside)
    remove_dir(old);
  return 0;
}

void gslrt_checkpoint_write(gslrt_ctx *ctx, int64_t done) {
  const char *dir = ctx->opts.checkpoint;
  char err[GSLRT_ERRLEN] = "", tmp[CKPT_PATH], final[CKPT_PATH], path[CKPT_PATH], name[64];
  char head[1024];
  long pid = (long)getpid();
  int n = 0, k = 0, fail = 0;
  double start = MPI_Wtime();
  for (int i = 0; i < ctx->ntensors; i++)
    n += is_saved(&ctx->tensors[i]);
  uint32_t *crc = calloc((size_t)n + 1, sizeof *crc), *crc_all = calloc((size_t)n + 1, sizeof *crc);
  int64_t *bytes = calloc((size_t)n + 1, sizeof *bytes), *bytes_all = calloc((size_t)n + 1, sizeof *bytes);
  if (!crc || !crc_all || !bytes || !bytes_all)
    gslrt_fatal(ctx, "checkpoint: out of memory");
  gslrt_mpi_check(ctx, MPI_Bcast(&pid, 1, MPI_LONG, 0, ctx->comm), "MPI_Bcast");
  snprintf(name, sizeof name, "step-%08lld.tmp.%ld", (long long)done, pid);
  snprintf(tmp, sizeof tmp, "%s/%s", dir, name);
  snprintf(final, sizeof final, "%s/step-%08lld", dir, (long long)done);
  if (ctx->rank == 0 && mkdir(tmp, 0777) != 0)
    gslrt_seterr(err, sizeof err, "cannot create %s: %s", tmp, strerror(errno)), fail = 1;
  if (agree(ctx, fail ? 0 : INT_MAX, err))
    goto fn_fail;
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    if (!is_saved(t))
      continue;
    int hlen = gslrt_npy_header(t->dtype, t->rank, t->global_shape, head, sizeof head);
    if (hlen < 0 || snprintf(path, sizeof path, "%s/%s.npy", tmp, t->name) >= (int)sizeof path) {
      /* the same on every rank */
      gslrt_seterr(err, sizeof err, "%s %s: cannot name or describe its file", kind_name(t->kind), t->name);
      goto fn_fail;
    }
    if (tile_io(ctx, t, path, head, hlen, 1, err) != 0)
      goto fn_fail;
  }
  /* the crc32s, file k on rank k mod nranks, which also fsyncs it */
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    if (!is_saved(t))
      continue;
    if (k % ctx->nranks == ctx->rank && !fail) {
      fail = snprintf(path, sizeof path, "%s/%s.npy", tmp, t->name) >= (int)sizeof path ||
             file_crc(path, path, 1, &crc[k], &bytes[k], err) != 0;
    }
    k++;
  }
  if (agree(ctx, fail ? ctx->rank : INT_MAX, err))
    goto fn_fail;
  gslrt_mpi_check(ctx, MPI_Reduce(crc, crc_all, n, MPI_UINT32_T, MPI_BOR, 0, ctx->comm), "MPI_Reduce");
  gslrt_mpi_check(ctx, MPI_Reduce(bytes, bytes_all, n, MPI_INT64_T, MPI_SUM, 0, ctx->comm), "MPI_Reduce");
  if (ctx->rank == 0)
    fail = commit(ctx, tmp, final, done, crc_all, bytes_all, err) != 0;
  if (agree(ctx, fail ? 0 : INT_MAX, err))
    goto fn_fail;
  if (ctx->rank == 0) {
    snprintf(name, sizeof name, "step-%08lld.tmp.%ld", (long long)done, pid);
    prune(ctx, name);
    if (!ctx->opts.quiet) {
      int64_t total = 0;
      for (int i = 0; i < n; i++)
        total += bytes_all[i];
      printf("checkpoint %s written (%lld bytes, %.3f s)\n", final, (long long)total, MPI_Wtime() - start);
      fflush(stdout);
    }
  }
  free(crc), free(crc_all), free(bytes), free(bytes_all);
  return;
fn_fail:
  if (ctx->rank == 0)
    remove_dir(tmp);
  free(crc), free(crc_all), free(bytes), free(bytes_all);
  gslrt_fail_all(ctx, "checkpoint %s: %s (the previous checkpoints are intact)", final, err);
}

/* ---- resuming ------------------------------------------------------------- */

/* One tensor of a manifest. */
typedef struct ckpt_entry {
  char name[256];                /* the tensor's name */
  char file[256];                /* its file, in the checkpoint's directory */
  int32_t kind;                  /* GSLRT_PARAM or GSLRT_STATE */
  int32_t dtype;                 /* GSLRT_F32 or GSLRT_I32 */
  int32_t rank;                  /* number of dimensions */
  int64_t shape[GSLRT_MAX_RANK]; /* global shape */
  int64_t bytes;                 /* the file's size */
  uint32_t crc;                  /* its crc32 */
  int used;                      /* matched by a tensor of the program */
} ckpt_entry;

/* The value of "key": in text[0..end), or NULL. */
static const char *json_key(const char *text, const char *end, const char *key) {
  size_t n = strlen(key);
  for (const char *p = text; p && p + n + 2 < end; p = strchr(p + 1, '"')) {
    if (*p == '"' && !strncmp(p + 1, key, n) && p[n + 1] == '"') {
      const char *q = p + n + 2;
      while (*q == ' ')
        q++;
      if (*q == ':') {
        for (q++; *q == ' ';)
          q++;
        return q;
      }
    }
  }
  return NULL;
}

static int json_string(const char *p, char *buf, size_t len) {
  size_t n = 0;
  if (!p || *p++ != '"')
    return 0;
  for (; *p && *p != '"'; p++) {
    if (*p == '\\' && p[1])
      p++;
    if (n + 1 >= len)
      return 0;
    buf[n++] = *p;
  }
  buf[n] = 0;
  return *p == '"';
}

static int json_uint(const char *p, uint64_t *v) {
  char *end;
  if (!p || *p < '0' || *p > '9')
    return 0;
  errno = 0;
  *v = strtoull(p, &end, 10);
  return !errno && end != p;
}

/* Parses a manifest's tensors into *out (malloc'd), its step and seed;
 * 0, or -1 with the cause in err. */
static int parse_manifest(const char *text, ckpt_entry **out, int *nout, int64_t *step, uint64_t *seed,
                          char *optimizer, size_t optlen, char *err) {
  const char *end = text + strlen(text), *tensors = json_key(text, end, "tensors");
  uint64_t v;
  int n = 0, cap = 0;
  ckpt_entry *list = NULL;
  *out = NULL, *nout = 0;
  if (!tensors || *tensors != '[' || !json_uint(json_key(text, tensors, "version"), &v)) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json is not a checkpoint manifest");
    return -1;
  }
  if (v != CKPT_VERSION) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json has format version %llu, this runtime reads %d",
                 (unsigned long long)v, CKPT_VERSION);
    return -1;
  }
  if (!json_uint(json_key(text, tensors, "step"), &v) || v > INT64_MAX ||
      !json_uint(json_key(text, tensors, "seed"), seed)) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json has no step or seed");
    return -1;
  }
  *step = (int64_t)v;
  if (!json_string(json_key(text, tensors, "optimizer"), optimizer, optlen)) {
    gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json has no optimizer");
    return -1;
  }
  for (const char *p = tensors + 1;;) {
    while (*p == ' ' || *p == '\n' || *p == ',')
      p++;
    if (*p == ']')
      break;
    const char *close = *p == '{' ? strchr(p, '}') : NULL;
    char kind[16], dtype[16];
    const char *sh;
    if (n == cap) {
      ckpt_entry *g = realloc(list, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
      if (!g) {
        gslrt_seterr(err, GSLRT_ERRLEN, "out of memory");
        goto fn_fail;
      }
      list = g;
    }
    ckpt_entry *e = &list[n];
    memset(e, 0, sizeof *e);
    uint64_t bytes = 0, crc = 0;
    if (!close || !json_string(json_key(p, close, "name"), e->name, sizeof e->name) ||
        !json_string(json_key(p, close, "kind"), kind, sizeof kind) ||
        !json_string(json_key(p, close, "dtype"), dtype, sizeof dtype) ||
        !json_string(json_key(p, close, "file"), e->file, sizeof e->file) ||
        !json_uint(json_key(p, close, "bytes"), &bytes) || bytes > INT64_MAX ||
        !json_uint(json_key(p, close, "crc32"), &crc) || crc > UINT32_MAX ||
        !(sh = json_key(p, close, "shape")) || *sh != '[' || strchr(e->file, '/')) {
      gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: tensor %d is malformed", n + 1);
      goto fn_fail;
    }
    e->bytes = (int64_t)bytes, e->crc = (uint32_t)crc;
    e->kind = !strcmp(kind, "state") ? GSLRT_STATE : GSLRT_PARAM;
    e->dtype = !strcmp(dtype, "i32") ? GSLRT_I32 : GSLRT_F32;
    for (sh++; *sh != ']';) {
      while (*sh == ' ' || *sh == ',')
        sh++;
      if (*sh == ']')
        break;
      if (e->rank == GSLRT_MAX_RANK || !json_uint(sh, &v)) {
        gslrt_seterr(err, GSLRT_ERRLEN, "manifest.json: the shape of %s is malformed", e->name);
        goto fn_fail;
      }
      e->shape[e->rank++] = (int64_t)v;
      while (*sh >= '0' && *sh <= '9')
        sh++;
    }
    n++;
    p = close + 1;
  }
  *out = list, *nout = n;
  return 0;
fn_fail:
  free(list);
  return -1;
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
    shape_str(there, sizeof there, e->dtype, e->rank, e->shape);
    shape_str(here, sizeof here, t->dtype, t->rank, t->global_shape);
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

/* Rank 0: the newest complete checkpoint in DIR, its name in found and its
 * manifest in *text (malloc'd). 0 found, 1 none, -1 error with err. */
static int find_newest(gslrt_ctx *ctx, char *found, char **text, char *err) {
  const char *dir = ctx->opts.checkpoint;
  DIR *d = opendir(dir);
  struct dirent *e;
  int64_t best = -1;
  char path[CKPT_PATH];
  FILE *f = NULL;
  long len;
  *text = NULL;
  if (!d) {
    if (errno == ENOENT)
      return 1;
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s: %s", dir, strerror(errno));
    return -1;
  }
  while ((e = readdir(d))) {
    int64_t s = step_of(e->d_name);
    if (s > best && is_complete(dir, e->d_name)) {
      best = s;
      snprintf(found, 256, "%s", e->d_name);
    }
  }
  closedir(d);
  if (best < 0)
    return 1;
  snprintf(path, sizeof path, "%s/%s/manifest.json", dir, found);
  if (!(f = fopen(path, "rb")) || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
      len > CKPT_MAX_MANIFEST || fseek(f, 0, SEEK_SET) != 0 || !(*text = calloc(1, (size_t)len + 1)) ||
      fread(*text, 1, (size_t)len, f) != (size_t)len) {
    gslrt_seterr(err, GSLRT_ERRLEN, "cannot read %s: %s", path, errno ? strerror(errno) : "too long");
    if (f)
      fclose(f);
    free(*text);
    *text = NULL;
    return -1;
  }
  fclose(f);
  return 0;
}

int64_t gslrt_checkpoint_resume(gslrt_ctx *ctx) {
  const char *dir = ctx->opts.checkpoint;
  char err[GSLRT_ERRLEN] = "", found[256] = "", where[CKPT_PATH], path[CKPT_PATH];
  char *text = NULL, optimizer[GSLRT_ERRLEN / 2] = "";
  ckpt_entry *list = NULL;
  int status = 0, n = 0, len = 0, fail = 0;
  int64_t step = 0;
  uint64_t seed = 0;
  if (!ctx->opts.resume)
    return 0;
  if (ctx->rank == 0) {
    status = find_newest(ctx, found, &text, err);
    len = text ? (int)strlen(text) : 0;
  }
  gslrt_mpi_check(ctx, MPI_Bcast(&status, 1, MPI_INT, 0, ctx->comm), "MPI_Bcast");
  if (status < 0)
    gslrt_fail_all(ctx, "--resume: %s", err);
  if (status == 1) {
    if (ctx->rank == 0 && !ctx->opts.quiet) {
      printf("no checkpoint in %s: starting at step 0\n", dir);
      fflush(stdout);
    }
    return 0;
  }
  gslrt_mpi_check(ctx, MPI_Bcast(found, sizeof found, MPI_CHAR, 0, ctx->comm), "MPI_Bcast");
  gslrt_mpi_check(ctx, MPI_Bcast(&len, 1, MPI_INT, 0, ctx->comm), "MPI_Bcast");
  if (ctx->rank != 0 && !(text = calloc(1, (size_t)len + 1)))
    gslrt_fatal(ctx, "--resume: out of memory");
  gslrt_mpi_check(ctx, MPI_Bcast(text, len, MPI_CHAR, 0, ctx->comm), "MPI_Bcast");
  if (snprintf(where, sizeof where, "%s/%s", dir, found) >= (int)sizeof where)
    gslrt_fail_all(ctx, "--resume: the path of %s is too long", found);
  /* every rank parses and checks the same text, and decides alike */
  if (parse_manifest(text, &list, &n, &step, &seed, optimizer, sizeof optimizer, err) != 0 ||
      match(ctx, list, n, err) != 0) {
    free(text), free(list);
    gslrt_fail_all(ctx, "checkpoint %s: %s", where, err);
  }
  free(text);
  if (strcmp(optimizer, ctx->optimizer ? ctx->optimizer : "none")) {
    free(list);
    gslrt_fail_all(ctx, "checkpoint %s: the optimizer is %s there, %s in this program", where, optimizer,
                   ctx->optimizer ? ctx->optimizer : "none");
  }
  if (ctx->opts.seed_given && ctx->opts.seed != seed)
    gslrt_fail_all(ctx, "checkpoint %s: it was saved with --seed %llu, not %llu (resume without --seed, "
                   "or with the same)", where, (unsigned long long)seed,
                   (unsigned long long)ctx->opts.seed);
  ctx->seed = seed;
  /* sizes and crc32s: file k on rank k mod nranks; the first bad file is named */
  int64_t *disp = calloc((size_t)n + 1, sizeof *disp), *disp_all = calloc((size_t)n + 1, sizeof *disp);
  if (!disp || !disp_all)
    gslrt_fatal(ctx, "--resume: out of memory");
  for (int k = 0; k < n && !fail; k++) {
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
      gslrt_seterr(err, sizeof err, "%s has crc32 %08lx, the manifest says %08lx", e->file,
                   (unsigned long)crc, (unsigned long)e->crc), fail = 1;
    else if (gslrt_npy_read_header(path, &h, msg, sizeof msg) != 0)
      gslrt_seterr(err, sizeof err, "%s", msg), fail = 1;
    else if (h.dtype != e->dtype || h.rank != e->rank || memcmp(h.shape, e->shape, (size_t)e->rank * sizeof *h.shape))
      gslrt_seterr(err, sizeof err, "%s: its header does not match the manifest", e->file), fail = 1;
    else
      disp[k] = h.data_offset;
    if (fail)
      status = k;
  }
  if (agree(ctx, fail ? status : INT_MAX, err)) {
    free(list), free(disp), free(disp_all);
    gslrt_fail_all(ctx, "checkpoint %s: %s", where, err);
  }
  gslrt_mpi_check(ctx, MPI_Allreduce(disp, disp_all, n, MPI_INT64_T, MPI_MAX, ctx->comm), "MPI_Allreduce");
  /* every rank reads its own tiles */
  for (int i = 0; i < ctx->ntensors; i++) {
    const gslrt_tensor *t = &ctx->tensors[i];
    int k = 0;
    if (!is_saved(t))
      continue;
    while (strcmp(list[k].name, t->name))
      k++;
    if (snprintf(path, sizeof path, "%s/%s", where, list[k].file) >= (int)sizeof path)
      gslrt_fail_all(ctx, "checkpoint %s: the path of %s is too long", where, list[k].file);
    if (tile_io(ctx, t, path, NULL, disp_all[k], 0, err) != 0) {
      free(list), free(disp), free(disp_all);
      gslrt_fail_all(ctx, "checkpoint %s: %s", where, err);
    }
  }
  free(list), free(disp), free(disp_all);
  if (ctx->rank == 0 && !ctx->opts.quiet) {
    printf("resumed from %s at step %lld\n", where, (long long)step);
    fflush(stdout);
  }
  return step;
}
