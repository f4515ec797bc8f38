/* ckpt.h — what the checkpoint's files share, and nothing else sees:
 * checkpoint.c (the write and the resume, every rank together) over
 * ckpt_lock.c (the directory on rank 0: its lock, its checks, commits and
 * pruning, the readers' lock), ckpt_manifest.c (the manifest's schema,
 * written and read, and the program's build record) and ckpt_tiles.c (the
 * tiled MPI-IO of each tensor's file and the ranks' agreements on it),
 * all over ckdir.c (the directory's layout, shared with gslrun). Sectioned
 * by the file that defines each function. */
#ifndef GSLRT_CKPT_H
#define GSLRT_CKPT_H

#include <jansson.h>

#include "ckdir.h"
#include "internal.h"

static inline int is_saved(const gslrt_tensor *t) { return t->kind == GSLRT_PARAM || t->kind == GSLRT_STATE; }
static inline const char *kind_name(int32_t kind) { return kind == GSLRT_STATE ? "state" : "param"; }

/* One tensor of a manifest. */
typedef struct ckpt_entry {
  char name[CKDIR_NAME];         /* the tensor's name */
  char file[CKDIR_NAME];         /* its file, in the checkpoint's directory */
  int32_t kind;                  /* GSLRT_PARAM or GSLRT_STATE */
  int32_t dtype;                 /* GSLRT_F32 or GSLRT_I32 */
  int32_t rank;                  /* number of dimensions */
  int64_t shape[GSLRT_MAX_RANK]; /* global shape */
  int64_t bytes;                 /* the file's size */
  uint32_t crc;                  /* its crc32 */
  int used;                      /* matched by a tensor of the program */
} ckpt_entry;

/* What a manifest says that resuming uses. */
typedef struct ckpt_manifest {
  char run[CKDIR_RUN];           /* the run's identity */
  int64_t step;                  /* steps done */
  uint64_t seed;                 /* the seed */
  char optimizer[GSLRT_ERRLEN / 2]; /* the optimizer's description */
  char precision[8];             /* "f32" or "bf16" ("f32" in a version 2 manifest) */
  json_t *build;                 /* the program's build record (a reference), or NULL before version 5 */
  ckpt_entry *list;              /* the tensors (malloc'd) */
  int n;                         /* entries in list */
} ckpt_manifest;

/* ---- ckpt_tiles.c: the tiled MPI-IO and the agreements ------------------ */

/* Where a rank's tile_io failed first: before the file's open, in it, or
 * in the header's write, the view, the transfer, the sync or the close. */
enum { TILE_PREP = 1, TILE_OPEN, TILE_MOVE };

/* A failure's place in the order every rank agrees on, as one number
 * that MPI_MAX combines into the first: key is INT_MAX on a rank that did
 * not fail (INT64_MIN, below every failure), else its order (the rank, a
 * file's index, or a file's index and how far its I/O went), ties going
 * to the least rank. */
int64_t gslrt_ckpt_failure_order(const gslrt_ctx *ctx, int key);
/* The rank whose failure an order combined by MPI_MAX is (not INT64_MIN). */
int gslrt_ckpt_failure_rank(const gslrt_ctx *ctx, int64_t order);
/* Shares a failure and n facts in one all-reduce, every rank together:
 * key as failure_order's; facts[0..n) this rank's share of numbers never
 * negative, 0 where it knows nothing (a fact one rank finds: a file's
 * offset), each replaced by the greatest of every rank's. The message of
 * the least key then goes to err on every rank (a broadcast, only after a
 * failure). Whether any rank failed. */
int gslrt_ckpt_agree_facts(gslrt_ctx *ctx, int key, char *err, int64_t *facts, int n, const char *what);
/* Shares a failure alone (agree_facts without facts). */
int gslrt_ckpt_agree(gslrt_ctx *ctx, int key, char *err);
/* The crc32 and size of a whole file, read in chunks; fsync'd if sync.
 * Only a regular file is read (not through a link; a FIFO or device, which
 * could block or never end, is refused before any read). */
int gslrt_ckpt_file_crc(const char *path, const char *shown, int sync, uint32_t *crc, int64_t *bytes, char *err);
/* The key (agree's) of a failure at phase of the k-th file: the files in
 * order, and in each the phases in order, as the per-file agreements
 * that it replaces would have found it first. */
int gslrt_ckpt_tile_key(int k, int phase);
/* Writes (or, if !save, reads) t's tile in path, whose data starts at
 * disp; every rank together, with no agreement of its own: see
 * ckpt_tiles.c. *phase is 0, or where this rank failed first (TILE_*),
 * with err; -1 after a failed MPI_File_open (on every rank alike: the
 * caller stops with every rank), else 0. */
int gslrt_ckpt_tile_io(gslrt_ctx *ctx, const gslrt_tensor *t, const char *path, const char *head, int64_t disp,
                       int save, int *phase, char *err);

/* ---- ckpt_manifest.c: the manifest's schema and the build record --------- */

/* Writes DIR/tmp/manifest.json of the checkpoint of step done (crc and
 * bytes: the saved tensors' files in order) through a fsync'd temporary;
 * rank 0. */
int gslrt_ckpt_write_manifest(gslrt_ctx *ctx, const char *tmp, int64_t done, const int64_t *crc,
                              const int64_t *bytes, char *err);
/* Parses and checks a manifest's text, of the checkpoint of step
 * dir_step, into *m; 0, or -1 naming the field in err. Every rank alike. */
int gslrt_ckpt_parse_manifest(const char *text, size_t len, int64_t dir_step, ckpt_manifest *m, char *err);
/* Matches the program's params and states with the manifest: 0, or -1
 * naming the first that differs. Every rank alike. */
int gslrt_ckpt_match(gslrt_ctx *ctx, ckpt_entry *list, int n, char *err);
/* Rank 0, after a resume from where: a note on stderr for a precision
 * that differs from the manifest's, and one per tensor restored from f32
 * into bf16 (rounded) or from bf16 into f32 (widened). */
void gslrt_ckpt_precision_notes(const gslrt_ctx *ctx, const char *where, const ckpt_manifest *m);
/* Rank 0, after a resume from where: one note on stderr if the program
 * that wrote the checkpoint was compiled with other consts or from other
 * sources than this one (see ckpt_manifest.c). */
void gslrt_ckpt_build_note(const gslrt_ctx *ctx, const char *where, const ckpt_manifest *m);

/* ---- ckpt_lock.c: the directory on rank 0 ---------------------------------- */

/* Removes the entry DIR/name: a link or file itself, or a directory of
 * files, each unlinked (a link in it is removed, never followed); 0, or
 * -1 with errno. */
int gslrt_ckpt_remove_entry(int dfd, const char *name);
/* Whether the manifest open as fd is still DIR/name/manifest.json: not
 * removed, not renamed away, not replaced by another. */
int gslrt_ckpt_still_there(int dfd, const char *name, int fd);
/* Commits the complete temporary DIR/tmp as DIR/final, on rank 0:
 * manifest, fsyncs, renames. An existing final is replaced only if it is
 * a checkpoint of this run (moved aside first, then removed). */
int gslrt_ckpt_commit(gslrt_ctx *ctx, const char *tmp, const char *final, int64_t done, const int64_t *crc,
                      const int64_t *bytes, char *err);
/* Removes, on rank 0, this run's complete checkpoints older than its
 * newest keep, and every leftover temporary but ours (mine); a failure is
 * only a warning. */
void gslrt_ckpt_prune(gslrt_ctx *ctx, const char *mine);
/* Rank 0: the newest complete checkpoint in DIR, its name in found and its
 * manifest in *text (malloc'd, *len bytes). 0 found, 1 none, -1 error with
 * err. A reader (lock not NULL) holds the manifest flock'd LOCK_SH, its
 * descriptor in *lock: see ckpt_lock.c. */
int gslrt_ckpt_find_newest(gslrt_ctx *ctx, char *found, char **text, size_t *len, int *lock, char *err);

#endif
