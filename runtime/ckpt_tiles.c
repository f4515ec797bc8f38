/* ckpt_tiles.c — a checkpoint's tensors in their files, every rank
 * together through MPI-IO, and the ranks' agreements on how the files
 * went (checkpoint.c calls both; "Collectives" there counts them).
 *
 * Method. A tensor's file holds its global array after the .npy header;
 * each rank moves only its own tile through a file view, a subarray of
 * the global shape at the tile's offset displaced by the header (the real
 * box of a padded tile, packed: no padding reaches a file, and the file is
 * the same on any mesh); of a tile replicated over some mesh axes only the
 * copy at coordinate 0 of those axes is written. A failure's place in the
 * order every rank agrees on is one int64 (failure_order), so one
 * MPI_MAX all-reduce carries the first failure and any facts (a file's
 * data offset) together; its message follows in one broadcast. A file's
 * crc32 is zlib's, read back in 1 MiB chunks.
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
 * Without per-file agreements (checkpoint.c, "Collectives"), a rank
 * that fails in a file goes on (tile_io): it still makes every
 * collective call of that file and of the files after it, moving 0
 * elements where it has nothing sound to move, keeps its first message, and the agreement after the last file shares the first
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
#include "ckpt.h"
#include "seterr.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_CHUNK (1 << 20)       /* bytes read at a time for a crc32 */

int64_t gslrt_ckpt_failure_order(const gslrt_ctx *ctx, int key) {
  return key == INT_MAX ? INT64_MIN : -((int64_t)key * ctx->nranks + ctx->rank);
}

int gslrt_ckpt_failure_rank(const gslrt_ctx *ctx, int64_t order) { return (int)(-order % ctx->nranks); }

int gslrt_ckpt_agree_facts(gslrt_ctx *ctx, int key, char *err, int64_t *facts, int n, const char *what) {
  int64_t *all = malloc(((size_t)n + 1) * sizeof *all), first;
  if (!all)
    gslrt_fatal(ctx, "checkpoint: out of memory");
  all[0] = gslrt_ckpt_failure_order(ctx, key);
  if (n)
    memcpy(all + 1, facts, (size_t)n * sizeof *all);
  gslrt_world_allreduce(ctx, MPI_IN_PLACE, all, n + 1, MPI_INT64_T, MPI_MAX, what);
  if (n)
    memcpy(facts, all + 1, (size_t)n * sizeof *all);
  first = all[0];
  free(all);
  if (first == INT64_MIN)
    return 0;
  gslrt_world_bcast(ctx, err, GSLRT_ERRLEN, MPI_CHAR, gslrt_ckpt_failure_rank(ctx, first),
                    "the sharing of the checkpoint's failure");
  return 1;
}

int gslrt_ckpt_agree(gslrt_ctx *ctx, int key, char *err) {
  return gslrt_ckpt_agree_facts(ctx, key, err, NULL, 0, "the checkpoint's agreement of every rank");
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

int gslrt_ckpt_file_crc(const char *path, const char *shown, int sync, uint32_t *crc, int64_t *bytes,
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

int gslrt_ckpt_tile_key(int k, int phase) { return k < INT_MAX / 4 ? 3 * k + phase - 1 : INT_MAX - 1; }

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
int gslrt_ckpt_tile_io(gslrt_ctx *ctx, const gslrt_tensor *t, const char *path, const char *head,
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
