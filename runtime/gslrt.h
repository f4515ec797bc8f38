/* gslrt.h — libgslrt, the runtime every compiled GSL program links against.
 *
 * The contract with gslc's code generator. A compiled program defines
 *   void gsl_setup(gslrt_ctx *ctx);             declares mesh, tensors, outputs; allocates buffers
 *   void gsl_step(gslrt_ctx *ctx, int64_t step); computes one step
 *   void gsl_forward(gslrt_ctx *ctx, int64_t key); the outputs alone (generation)
 * and a main() that returns gslrt_main(argc, argv, &info). gslrt_main parses
 * the options of SPEC section 7, starts MPI, calls gsl_setup, checks the mesh
 * against the number of ranks, initializes params and optimizer states (or,
 * with --resume, restores them, the seed and the step counter K from a
 * checkpoint), and for every step binds the inputs (from --input files,
 * whose row indices it checks as gslrt_declare_index_check asks, or their
 * initializers), calls gsl_step, evaluates with gsl_eval on the
 * --eval-input batches when an evaluation is due, logs, and writes the
 * checkpoints that fall due; after the last step it writes --output files.
 * gsl_step's step is 0-based and global: after a resume at K the first call is
 * gsl_step(ctx, K), so its random draws are those of an uninterrupted run.
 * Everything a checkpoint must hold is a param or a state declared with
 * gslrt_declare_tensor: the runtime saves exactly those.
 *
 * SIGTERM or SIGINT stops the run after the current step, with a checkpoint
 * of it, and exit status 3.
 *
 * Every public symbol is gslrt_. Errors are fatal: one message naming the
 * rank and the cause on stderr, then every rank ends (MPI_Abort). */
#ifndef GSLRT_H
#define GSLRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GSLRT_MAX_RANK 8 /* as GSL_MAX_RANK */
#define GSLRT_MAX_AXES 8 /* as GSL_MAX_AXES */

typedef struct gslrt_ctx gslrt_ctx;

/* Element types. GSLRT_BF16 is bfloat16 (the top 16 bits of an f32), held
 * in 2 bytes; it is computed in f32 and rounded back to nearest, ties to
 * even (gslrt_bf16_round). */
enum gslrt_dtype { GSLRT_F32 = 0, GSLRT_I32 = 1, GSLRT_BF16 = 2 };

/* bf16 <-> f32. Widening is exact. Rounding is to nearest, ties to even;
 * NaN stays NaN (quiet, sign kept), an infinity stays infinite, a finite
 * value past bf16's largest rounds to infinity. */
static inline float gslrt_bf16_widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t gslrt_bf16_round(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x0040u); /* NaN: quiet it, keep sign and top payload */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
/* Element size in bytes of a dtype. */
static inline int gslrt_dtype_size(int32_t dtype) { return dtype == GSLRT_BF16 ? 2 : 4; }
/* Its name in messages and manifests: "f32", "i32" or "bf16". */
static inline const char *gslrt_dtype_name(int32_t dtype) {
  return dtype == GSLRT_I32 ? "i32" : dtype == GSLRT_BF16 ? "bf16" : "f32";
}
/* The dtype of the .npy file holding a tensor of dtype: bf16 lives on disk
 * as float32 (numpy has no bf16), exactly widened. */
static inline int32_t gslrt_file_dtype(int32_t dtype) { return dtype == GSLRT_BF16 ? GSLRT_F32 : dtype; }
enum gslrt_kind { GSLRT_PARAM = 0, GSLRT_INPUT = 1, GSLRT_STATE = 2 };
enum gslrt_init { GSLRT_INIT_NONE = 0, GSLRT_INIT_ZEROS, GSLRT_INIT_ONES, GSLRT_INIT_NORMAL, GSLRT_INIT_UNIFORM };
enum gslrt_dist { GSLRT_UNIFORM = 0, GSLRT_NORMAL = 1 };

/* What the compiled program tells gslrt_main about itself. */
typedef struct gslrt_program_info {
  const char *source;                       /* the .gsl file it was compiled from */
  const char *compiler_version;             /* gslc's version */
  void (*setup)(gslrt_ctx *ctx);            /* gsl_setup */
  void (*step)(gslrt_ctx *ctx, int64_t step); /* gsl_step */
  /* gsl_eval, or NULL for a program that does not train: the forward pass
   * only, on the inputs as bound, with the params as they stand (nothing is
   * updated). values[0] gets the loss, values[1 + i] the i-th value
   * declared with gslrt_declare_eval. key stands for gsl_step's step in the
   * random draws (random routing, inputs drawn by their initializers): the
   * runtime passes GSLRT_EVAL_KEY + j for held-out batch j, so an
   * evaluation gives the same numbers whenever it runs. */
  void (*eval)(gslrt_ctx *ctx, int64_t key, float *values);
  /* gslc --precision: GSLRT_F32, or GSLRT_BF16 (products in bf16); a
   * checkpoint's manifest records it, and a resume under the other prints
   * a note. 0 (GSLRT_F32) in a program that does not set it. */
  int32_t precision;
  /* gsl_forward: the forward pass alone, computing every value the program
   * outputs (`output`) from the inputs as bound and the params as they
   * stand, and nothing of the backward pass or the update; key as for
   * gsl_eval (generation passes GSLRT_GEN_KEY + j for generated byte j,
   * runtime/generate.c). NULL in a program that does not give it (a
   * hand-written one): it cannot generate text. */
  void (*forward)(gslrt_ctx *ctx, int64_t key);
  /* What gives the program its meaning beyond the shapes a checkpoint
   * shows, as the text of one JSON object, for the manifest's "build"
   * (NULL in a hand-written program):
   *   {"defines": {"L": "8"},                 every -D, as given
   *    "consts": {"L": 8, "TOP": 2, ...},     every const of the program, as
   *                                           compiled
   *    "mesh_consts": ["DATA", "EXPERT"],     the consts a mesh axis's size
   *                                           names (a resume on another mesh
   *                                           changes them: no note)
   *    "sources": [{"file": "lm.gsl", "sha256": "..."}, ...],  every file
   *                                           read, in the order read
   *    "source_sha256": "..."}                SHA-256 of those files' bytes
   *                                           concatenated in that order */
  const char *build;
  /* gslc --same-bits: its bound on the blocks of a sum (0: not given). Set,
   * every matrix product runs pinned.c's chains of FMAs, whose bits for
   * an element do not depend on the product's shape. */
  int32_t same_bits;
} gslrt_program_info;

/* gsl_eval's key for held-out batch 0: far past any training step. */
#define GSLRT_EVAL_KEY ((int64_t)1 << 62)

int gslrt_main(int argc, char **argv, const gslrt_program_info *info);

/* ---- called from gsl_setup ---------------------------------------------- */

/* One mesh axis; called in axis order before any tensor. No call: one device. */
void gslrt_declare_axis(gslrt_ctx *ctx, const char *name, int64_t size);

/* A param, input or optimizer state (dtype GSLRT_F32, GSLRT_I32 or
 * GSLRT_BF16, whose buffer has 2-byte elements). global_shape has rank entries.
 * dim_axes has rank * GSLRT_MAX_AXES entries: for dimension i, the mesh axes
 * splitting it (major first), padded with -1 (all -1: replicated). The runtime allocates
 * the local buffer (zeroed, 64-byte aligned) and stores its address in
 * *slot; params are initialized from (init, a, b, stream) before step 0;
 * inputs are filled before every step, from their --input file or, without
 * one, from their initializer drawn anew for that step. A state (an
 * optimizer's moment, e.g. "adam.m.wi") is kept like a param, initialized
 * once and never bound by --input, but is not one: checkpoints tell them
 * apart. A bf16 tensor's initializer is drawn in f32, exactly as for an
 * f32 one (the same numbers on any mesh), and each element rounded
 * (gslrt_bf16_round); its --input file is float32 (numpy has no bf16),
 * each element rounded as it is read; --output files and checkpoints hold
 * it as float32, each element widened exactly.
 *
 * The layout of a sharded dimension (GSPMD's, uneven splits by padding):
 * a dimension of n elements cut into k shards (k the product of the sizes
 * of the mesh axes splitting it; the shard index j is the device's block
 * index along them, as gslrt_declare_group numbers members) is held in
 * tiles of c = ceil(n / k) elements on every device: shard j holds the
 * global elements [j * c, min(n, (j + 1) * c)), r_j = max(0, min(c,
 * n - j * c)) real elements, at the start of its tile; the other c - r_j
 * are padding. So every device's buffer has the same padded tile shape
 * (the product of the c's), a trailing shard may hold no real element at
 * all (n = 5 over k = 4: c = 2, r = 2, 2, 1, 0), and k > n is an error.
 * When k divides n there is no padding. The runtime keeps padding zero in
 * everything it fills (params and states at init or from a checkpoint,
 * inputs at every step) and never writes it to a file: --input files are
 * read, initializers drawn (keyed by global index, so any mesh draws the
 * same numbers), --output files gathered and checkpoints written and read
 * in the real box alone. What compiled code leaves in padding is its own
 * business (the collectives below treat it as they say). */
void gslrt_declare_tensor(gslrt_ctx *ctx, const char *name, int32_t kind, int32_t dtype,
                          int32_t rank, const int64_t *global_shape, const int32_t *dim_axes,
                          void **slot, int32_t init, double a, double b, uint32_t stream,
                          int32_t frozen);

/* The optimizer a training program updates its params with, and its
 * hyperparameters, e.g. "adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08,
 * weight_decay=0)"; at most once, from gsl_setup. A checkpoint's manifest
 * records it, and --resume refuses a checkpoint saved with another. desc
 * must live as long as the program (a constant string). */
void gslrt_declare_optimizer(gslrt_ctx *ctx, const char *desc);

/* A value --output may name: *slot holds its buffer's address once
 * gsl_setup has returned (it may be a tensor's slot). */
void gslrt_declare_output(gslrt_ctx *ctx, const char *name, int32_t dtype, int32_t rank,
                          const int64_t *global_shape, const int32_t *dim_axes, void **slot);

/* A value gsl_eval reports beside the loss: an f32 scalar the program
 * outputs (`output ce`), logged as eval_NAME. Called from gsl_setup, in
 * the order of gsl_eval's values[1..]. name must live as long as the
 * program (a constant string). */
void gslrt_declare_eval(gslrt_ctx *ctx, const char *name);

/* The elements of input name (declared before) in the box [lo, hi) of its
 * global shape (rank entries each) are the row indices, unchanged, of an
 * op reading a table of rows rows; what names the op and where it is
 * written ("the gather at lm.gsl:40:12") and must live as long as the
 * program (a constant string). After each batch of the input is read from
 * its --input file, or, if gsl_eval runs the op too (in_eval), its
 * --eval-input file, and before any code uses it, every rank checks its
 * tile, and an element outside [0, rows) ends the run on every rank with
 * one message naming the option, the file, the batch, the phase, the first
 * such element (global position, value) and what. Several declarations
 * may name one input. */
void gslrt_declare_index_check(gslrt_ctx *ctx, const char *name, int64_t rows, const int64_t *lo,
                               const int64_t *hi, const char *what, int32_t in_eval);

/* A buffer for an intermediate: zeroed, 64-byte aligned, freed at exit. */
void *gslrt_alloc(gslrt_ctx *ctx, int64_t bytes);

/* ---- called from gsl_step ------------------------------------------------ */

/* Fills out (the local tile, local_shape, at local_offset within a tensor of
 * global_shape; local_offset NULL means all zeros) with counter-based draws
 * keyed by (seed, stream, step, global element index): the same numbers on
 * any mesh. uniform: [a, b); normal: mean 0, std a. On a padded tile
 * (local_shape the padded extents, gslrt_declare_tensor) every real
 * element still gets the draw of its global index; padding elements
 * (past global_shape along some dim) draw nothing and are 0. */
void gslrt_rng_fill(gslrt_ctx *ctx, float *out, int32_t dist, double a, double b,
                    uint32_t stream, int64_t step, int32_t rank, const int64_t *global_shape,
                    const int64_t *local_offset, const int64_t *local_shape);

/* The run's seed (--seed): the key of the draws the compiled code makes
 * inline (dropout's, element by element, as gslrt_rng_fill draws a
 * uniform: word 0 of Philox-4x32-10 of counter {lo32(i), hi32(i),
 * lo32(step), stream ^ hi32(step)} and key {lo32(seed), hi32(seed)}). */
uint64_t gslrt_rng_seed(gslrt_ctx *ctx);

/* C[b] = op(A[b]) * op(B[b]) for b < batch, row-major, through cblas_sgemm
 * (alpha 1, beta 0). op(A) is M x K, op(B) is K x N; stride_* is the distance
 * in elements between consecutive batch entries. */
void gslrt_sgemm(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                 const float *a, int64_t lda, int64_t stride_a,
                 const float *b, int64_t ldb, int64_t stride_b,
                 float *c, int64_t ldc, int64_t stride_c);
/* The same with A and B bf16, products accumulated in f32; C is f32
 * (c_dtype GSLRT_F32) or bf16 (GSLRT_BF16, each element rounded once from
 * its f32 sum). */
void gslrt_gemm_bf16(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                     const uint16_t *a, int64_t lda, int64_t stride_a,
                     const uint16_t *b, int64_t ldb, int64_t stride_b,
                     void *c, int32_t c_dtype, int64_t ldc, int64_t stride_c);
/* gslrt_sgemm over a moe block's filled slots alone (slots.c): per batch
 * entry, the rows of C (depth: the summed index) are `blocks` blocks of
 * `slots`, block j of entry i filled in its first fill[i * blocks + j];
 * rows past a block's count are zeroed (depth: terms past it are left
 * out of the sum). */
void gslrt_sgemm_fill(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const float *a, int64_t lda, int64_t stride_a,
                      const float *b, int64_t ldb, int64_t stride_b,
                      float *c, int64_t ldc, int64_t stride_c,
                      const int32_t *fill, int64_t blocks, int64_t slots, int32_t depth);
/* The same with bf16 A and B and an f32 C (gslrt_gemm_bf16's products). */
void gslrt_gemm_bf16_fill(int64_t batch, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                          const uint16_t *a, int64_t lda, int64_t stride_a,
                          const uint16_t *b, int64_t ldb, int64_t stride_b,
                          float *c, int64_t ldc, int64_t stride_c,
                          const int32_t *fill, int64_t blocks, int64_t slots, int32_t depth);

/* ---- groups of mesh axes and collectives --------------------------------- */

/* Declares, from gsl_setup, a group of mesh axes (axes[0..n), major first)
 * that collectives, local slices or random draws of the program use; returns
 * its id. The communicator of each group is built once, at start-up, after
 * the mesh is checked: its members are the devices that differ only in
 * these axes, ranked by their block index along them,
 *   index = ((c[axes[0]] * size[axes[1]]) + c[axes[1]]) * size[axes[2]] + ...
 * with c the device's mesh coordinates (rank = row-major over all axes in
 * declaration order). */
int32_t gslrt_declare_group(gslrt_ctx *ctx, int32_t n, const int32_t *axes);
/* This device's block index in the group, and the group's size. */
int64_t gslrt_group_index(gslrt_ctx *ctx, int32_t group);
int64_t gslrt_group_size(gslrt_ctx *ctx, int32_t group);

/* The collectives, on dtype GSLRT_F32, GSLRT_I32 or GSLRT_BF16 buffers
 * (bf16: 2-byte elements). A tensor's local shape is (rank, shape); dim is
 * the dimension acted on. all_gather, all_to_all and collective_permute
 * move bf16 elements as they are; all_reduce and reduce_scatter on bf16
 * widen the buffer into f32, reduce that exactly as the f32 path does (the
 * same MPI call, so the same order), and round each result once: a bf16
 * reduction gives round(the f32 reduction of the widened values).
 * Tiles along the dimension acted on are those of gslrt_declare_tensor's
 * layout, over the group's g members in group order: a dimension of n cut
 * in g tiles of c = ceil(n / g), member j's real elements r_j = max(0,
 * min(c, n - j * c)) at the start of its tile. Every member makes the call
 * with the same shapes and totals; a member with r_j = 0 takes part as any
 * other: all_gather takes nothing from it, reduce_scatter leaves it a
 * tile of zeros, all_to_all sends it a block of zeros along dim and keeps
 * nothing it sends along dim2. The padding of an all_gather's in, or of an
 * all_to_all's along dim2, never reaches out; all_reduce and
 * collective_permute treat padding as any element.
 * all_reduce: buf (count elements) is summed (op GSLRT_SUM) or maxed
 *   (GSLRT_MAX) over the group, in place.
 * all_gather: in is a padded tile, in_shape[dim] = c; out, of in's shape
 *   with dim = total (the true global size, 0 <= total <= g * c), holds
 *   member j's first max(0, min(c, total - j * c)) elements along dim,
 *   joined in group order: out's [j * c, ...) along dim is member j's.
 *   total = g * c is the even call
 *   (every member's whole in).
 * reduce_scatter: in is whole along dim (in_shape[dim] = n) and summed
 *   over the group; out, of in's shape with dim = c = ceil(n / g), keeps
 *   this member's [j * c, min(n, (j + 1) * c)) along dim, its padding
 *   zero.
 * all_to_all: in's dim (n = in_shape[dim], whole) is cut into g blocks of
 *   c = ceil(n / g), block j = [j * c, min(n, (j + 1) * c)), padded with
 *   zeros to c, and block j goes to member j; in's dim2 is a padded tile
 *   (c2 = in_shape[dim2], or c if dim2 = dim). out, of in's shape with dim
 *   = c and dim2 = total2 (0 <= total2 <= g * c2), holds the received
 *   blocks joined along dim2 in sender order, keeping from sender j its
 *   first max(0, min(c2, total2 - j * c2)) elements along dim2. With
 *   n % g == 0 and total2 = g * c2 it is the even call: in's dim divided,
 *   dim2 multiplied by g. */
enum gslrt_redop { GSLRT_SUM = 0, GSLRT_MAX = 1 };
void gslrt_all_reduce(gslrt_ctx *ctx, int32_t group, int32_t dtype, int32_t op, void *buf, int64_t count);
void gslrt_all_gather(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                      int32_t rank, const int64_t *in_shape, int32_t dim, int64_t total);
void gslrt_reduce_scatter(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                          int32_t rank, const int64_t *in_shape, int32_t dim);
void gslrt_all_to_all(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                      int32_t rank, const int64_t *in_shape, int32_t dim, int32_t dim2, int64_t total2);
/* all_to_all_rider: the all_to_all of in (the carrier; total2 as for
 * all_to_all) and, in the same call, the all_to_all of r_in (a small rider
 * on the same group, gslc's combine.c; r_total2 its total2): the rider's
 * blocks travel as messages beside the carrier's, ended by the same wait,
 * so the two take one exchange. */
void gslrt_all_to_all_rider(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                            int32_t rank, const int64_t *in_shape, int32_t dim, int32_t dim2, int64_t total2,
                            int32_t r_dtype, const void *r_in, void *r_out, int32_t r_rank,
                            const int64_t *r_shape, int32_t r_dim, int32_t r_dim2, int64_t r_total2);
/* all_to_all goes straight between in and out, one message per run that is
 * contiguous on both sides, when the call is even (n % g == 0 and total2 =
 * g * c2) and those runs are at least GSLRT_A2A_MIN_CHUNK bytes and at
 * most GSLRT_A2A_MAX_CHUNKS per member; otherwise through the context's
 * scratch space (gslc's --stats counts it). */
#define GSLRT_A2A_MIN_CHUNK 16384
#define GSLRT_A2A_MAX_CHUNKS 4096
/* The context's scratch space (what gslc's --stats counts as collective
 * scratch) is the largest any one call takes, in bytes, with b the bytes
 * of the call's input buffer (count times the element size, 2 for bf16),
 * g the group's size and outer the product of the extents before dim:
 *   all_gather        g * b when the dimension is not the first non-1 one
 *                     (outer != 1), else none; the same when total <
 *                     g * c (b: the padded tile in);
 *   reduce_scatter    n % g == 0: f32, i32: b when outer != 1, else none;
 *                     bf16: 2 * b (the widened input, packed), always;
 *                     n % g != 0: with p = g * (out's bytes) (the input
 *                     padded to g * c along dim): f32, i32: p, always;
 *                     bf16: 2 * p, always;
 *   all_reduce        f32, i32: none; bf16: 2 * b (the widened buffer);
 *   all_to_all        none when it goes direct (above), else p per side
 *                     that is staged, with p = g * (the bytes of one
 *                     block: in's shape with dim = c), which is b when
 *                     n % g == 0; the send side is staged when outer !=
 *                     1 or n % g != 0, the receive side when the
 *                     product of a block's extents before dim2 is not 1
 *                     or total2 != g * c2;
 *   all_to_all_rider  the carrier's, and 2 * the rider's p in space of
 *                     the rider's own (kept, as the scratch space is);
 *   collective_permute  none;
 * and none at all for a group of one device (its collectives are copies).
 * (the direct all_to_all's chunk rule counts bytes: a bf16 run needs twice
 * the elements of an f32 one). */
/* Where the next collective is written, as gslc says it ("the all_reduce
 * at t.gsl:9:12 (backward pass)"), for the watchdog's message should it
 * not complete (--collective-timeout): compiled code calls it before each
 * collective. where must live as long as the program (a constant string). */
void gslrt_collective_at(gslrt_ctx *ctx, const char *where);
/* collective_permute: from and to are groups of the same axes in two
 * orders; in (count elements) is this device's block as numbered in from's
 * order; out receives the block whose number in from's order is this
 * device's index in to's order. */
void gslrt_collective_permute(gslrt_ctx *ctx, int32_t from, int32_t to, int32_t dtype, const void *in,
                              void *out, int64_t count);

/* ---- moe routing (runtime/moe.c) ------------------------------------------ */

/* dispatch: out [E, G, C, M] = 0, then for each choice k of token s of
 * group g routed to (e, c) = (expert, slot)[g, s, k] with 0 <= c < C, row
 * (e, g, c) of out = row (g, s) of x [G, S, M]; x and out are of dtype
 * (GSLRT_F32 or GSLRT_BF16). combine: out [G, S, M] of out_dtype, row
 * (g, s) = sum over those choices of weight[g, s, k] * row (e, g, c) of
 * y [E, G, C, M] of y_dtype (each GSLRT_F32 or GSLRT_BF16), summed in f32
 * in choice order and rounded once if out is bf16. dispatch's weight, when
 * not NULL, scales each copied row by its choice's weight (the backward
 * pass of combine), in f32, rounded once if x is bf16. weight is f32. A
 * slot outside [0, C) is a dropped choice; an expert outside [0, E) is a
 * fatal error. */
void gslrt_dispatch(gslrt_ctx *ctx, void *out, const void *x, int32_t dtype, const int32_t *expert,
                    const int32_t *slot, const float *weight, int64_t E, int64_t G, int64_t C, int64_t M,
                    int64_t S, int64_t K);
void gslrt_combine(gslrt_ctx *ctx, void *out, int32_t out_dtype, const void *y, int32_t y_dtype,
                   const int32_t *expert, const int32_t *slot, const float *weight, int64_t E, int64_t G,
                   int64_t C, int64_t M, int64_t S, int64_t K);

/* The step's scalar loss (global: the same on every rank), for the log
 * line and --metrics (training). A NaN or infinite loss ends the run after
 * the step, on every rank, with exit status 1. */
void gslrt_report_loss(gslrt_ctx *ctx, float loss);

/* A training signal: an f32 scalar (count 0) or vector of count elements
 * gsl_step computes every step besides the loss (gslc declares "lr", the
 * learning rate the step used, and "grad_norm", the global gradient norm
 * before clipping, for a program that trains params, and each moe block's
 * expert loads and dropped fraction). Rank 0 logs a scalar with a log_name
 * (not NULL) as log_name in the log line (%.3g), and every signal as name
 * in every --metrics record (%.9g, null if not finite; a vector as an
 * array), and a checkpoint's manifest keeps its value at the checkpoint's
 * step. Called from gsl_setup; the k-th declared (from 0) is signal k of
 * gslrt_report_signal. name and log_name must live as long as the program
 * (constant strings). */
void gslrt_declare_signal(gslrt_ctx *ctx, const char *name, const char *log_name, int32_t count);
/* Signal k's value at this step (the same on every rank): its count
 * elements, or one for a scalar. */
void gslrt_report_signal(gslrt_ctx *ctx, int32_t k, const float *value);

/* A fatal error raised by compiled code (this rank's; see gslrt_fatal). */
void gslrt_fail(gslrt_ctx *ctx, const char *msg);

/* An op's indices are not all in [0, rows) (compiled code checks every
 * index before using any): idx is this rank's tile of them, i32 of
 * local_shape (rank entries), at offset in the whole index tensor (NULL:
 * all zeros). Finds the first index out of range and ends the run as
 * gslrt_fail does, naming what (the op and where it is written, as in
 * gslrt_declare_index_check), that index's value and global position, the
 * table's rows and what the run was doing (training step or evaluation).
 * It scans the whole of local_shape: padding included, if that is what
 * it is given. */
void gslrt_fail_index(gslrt_ctx *ctx, const char *what, int64_t rows, const int32_t *idx, int32_t rank,
                      const int64_t *local_shape, const int64_t *offset);

/* ---- runtime pieces shared with tests and tools -------------------------- */

/* Philox-4x32-10: four 32-bit words from a 128-bit counter and 64-bit key. */
void gslrt_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* .npy files. A header describes dtype, rank and shape (C order, little
 * endian). On disk only float32 ('<f4') and int32 ('<i4'): a bf16 array is
 * written as float32, every element widened exactly, and read from float32,
 * every element rounded (gslrt_bf16_round). */
typedef struct gslrt_npy {
  int32_t dtype;                 /* GSLRT_F32 or GSLRT_I32 (of the file) */
  int32_t rank;
  int64_t shape[GSLRT_MAX_RANK + 1];
  int64_t data_offset;           /* byte offset of element 0 in the file */
} gslrt_npy;

/* 0 on success; otherwise -1 with a message (naming the file and the
 * problem) in err. */
int gslrt_npy_read_header(const char *path, gslrt_npy *h, char *err, int errlen);
/* Reads the tile [offset, offset + count) of a file whose header is h;
 * elements are 4 bytes. */
int gslrt_npy_read_tile(const char *path, const gslrt_npy *h, const int64_t *offset,
                        const int64_t *count, void *out, char *err, int errlen);
/* The same into out of out_dtype: h's own dtype (as gslrt_npy_read_tile),
 * or GSLRT_BF16 from a float32 file, each element rounded; any other pair
 * is refused with a message. */
int gslrt_npy_read_tile_as(const char *path, const gslrt_npy *h, const int64_t *offset,
                           const int64_t *count, void *out, int32_t out_dtype, char *err, int errlen);
/* n bf16 values widened into f32 (exact), and n f32 values rounded to bf16. */
void gslrt_bf16_widen_n(float *dst, const uint16_t *src, int64_t n);
void gslrt_bf16_round_n(uint16_t *dst, const float *src, int64_t n);
/* A rows x cols bf16 matrix (rows lds apart) widened into its f32
 * transpose: dst[j * ldd + i] = widen(src[i * lds + j]), exactly. */
void gslrt_bf16_widen_t(float *dst, int64_t ldd, const uint16_t *src, int64_t lds, int64_t rows, int64_t cols);
/* The same of an f32 matrix: dst[j * ldd + i] = src[i * lds + j]. */
void gslrt_f32_transpose(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
/* The header numpy.save writes for an array (version 1.0, or 2.0 if it
 * needs more room), padded so that the data starts at a multiple of 64
 * bytes: its length in bytes, written to buf, or -1 if cap is too small.
 * GSLRT_BF16 is described as '<f4', as written. */
int gslrt_npy_header(int32_t dtype, int32_t rank, const int64_t *shape, char *buf, size_t cap);
/* Writes a whole array (data of dtype; GSLRT_BF16 data is written as
 * float32, widened); to a new temporary beside path first, renamed over
 * path when complete. */
int gslrt_npy_write(const char *path, int32_t dtype, int32_t rank, const int64_t *shape,
                    const void *data, char *err, int errlen);
/* The same, but leaves the complete temporary for the caller to rename over
 * path or remove: its name (malloc'd) goes to *tmp. */
int gslrt_npy_write_temp(const char *path, int32_t dtype, int32_t rank, const int64_t *shape,
                         const void *data, char **tmp, char *err, int errlen);
/* Whether path can take a new .npy: absent, or a regular file (not a
 * directory, symbolic link, device, ...), in a directory where a file can be
 * created (one is created and removed). 0 with an existing file's device
 * and inode in *dev, *ino (0 if absent); -1 with the cause in err. */
int gslrt_npy_check_target(const char *path, uint64_t *dev, uint64_t *ino, char *err, int errlen);

#ifdef __cplusplus
}
#endif
#endif
