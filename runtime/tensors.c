/* tensors.c — what gsl_setup declares, and the data that flows in and out.
 *
 * Mesh: axes are declared in order; rank r's coordinates are r written
 * row-major over the axis sizes (the last axis varies fastest):
 * r = ((c0 * s1) + c1) * s2 + c2 ... Their product must equal the number of
 * ranks.
 *
 * Tiles: dimension i of a tensor of n elements, split over mesh axes
 * a1..ak (major first) into K = s_a1 * ... * s_ak shards, has local extent
 * c = ceil(n / K), and the rank's shard index j along it is its
 * coordinates on a1..ak read row-major, ((c_a1 * s_a2) + c_a2) * s_a3 + ...
 * (gslrt_block_index, which also numbers the members of a group of axes);
 * the tile starts at j * c and holds r = max(0, min(c, n - j * c)) real
 * elements at its start, the rest padding (gslrt.h, beside
 * gslrt_declare_tensor). Dimensions split by no axis are whole
 * (replicated). The same function gives any rank's tile, which is how rank
 * 0 reassembles a gathered output.
 *
 * Padding: everything that crosses the buffer's edge uses the real box
 * (the tile's offset, its real extents) with the padded tile's strides:
 * inputs read from files, initializer draws, ones, the gathered --output
 * and generation's token windows; every padding element the runtime fills
 * is zero, and none reaches a file. When every dimension divides evenly
 * the real box is the tile and every path is the one it always was.
 *
 * Inputs: a --input file's header is read once, on rank 0, checked against
 * the declaration (the global shape exactly, or [B, ...shape]) and shared;
 * then before every step each rank reads only its own tile (of batch
 * step % B). Without a file an input is drawn from its initializer for the
 * step; params and optimizer states (kept like params, never bound by
 * --input) are drawn once with step -1. i32 tensors take the floor of the
 * drawn value (uniform(0, V) gives ids 0..V-1). Held-out data (--eval-input,
 * eval.c) is the same: a header read and checked once on rank 0 (every
 * --eval-input file of one batch count), then, for held-out batch j, each
 * rank's tile of batch j, or the initializer drawn with key
 * GSLRT_EVAL_KEY + j in place of the step.
 *
 * Index checks: gsl_setup names the boxes of i32 inputs whose elements
 * some gather's (or scatter_add's) indices are, unchanged
 * (gslrt_declare_index_check). After the inputs of a step or of a held-out
 * batch are read, each rank scans its tile of every such box, and the
 * ranks agree on the first element out of range of each in one
 * MPI_Allreduce (only when some checked input was read from a file); one
 * out of range ends the run on every rank together, rank 0 naming the
 * option, the file, the batch, the phase, the element's global position
 * and value, and the op. The same message on any mesh: the position is
 * global and the first in C order. Indices the code computes are checked
 * where they are used (gslrt_fail_index).
 *
 * Outputs: before step 1 rank 0 checks every --output target (two names
 * of one file, or a name of the --metrics file, are a usage error; a
 * target that exists and is not a regular file, or a directory that takes
 * no new file, a run-time error) and shares the verdict. After the last
 * step every rank sends its tile to rank 0 (MPI_Gatherv), which places
 * each tile in the global array and writes it to a temporary beside its
 * file; only when every temporary is complete are they all renamed over
 * their files, and on any failure every temporary is removed, so the
 * outputs are written all or none. The result is shared so every rank
 * exits the same way.
 *
 * Generation (generate.c) binds the token input from windows it holds in
 * memory, whole on every rank (each copies out its tile), and draws every
 * other input with key GSLRT_GEN_KEY + j; it gathers its logits to rank 0
 * as an --output is gathered (gslrt_gather_output).
 *
 * bf16 (issue 19): a bf16 tensor's buffer has 2-byte elements. Its
 * initializer is drawn in f32 exactly as an f32 tensor's (the same Philox
 * numbers, so the same on any mesh) into a temporary, then each element is
 * rounded to nearest, ties to even; ones are 0x3f80. Its --input file is
 * float32, each element rounded as it is read (a value bf16 can hold reads
 * exactly); an int32 file is refused as for an f32 input. An --output of
 * it is gathered as 2-byte elements and written as float32, each element
 * widened exactly.
 *
 * Storage: every tensor and intermediate buffer (gsl_setup's arena too)
 * comes from gslrt_alloc, zeroed and 64-byte aligned, kept in ctx->allocs
 * and freed when the run ends. */
#include "internal.h"
#include "seterr.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- storage --------------------------------------------------------------- */

void *gslrt_alloc(gslrt_ctx *ctx, int64_t bytes) {
  if (bytes < 0 || (uint64_t)bytes > SIZE_MAX - 64)
    gslrt_fatal(ctx, "gslrt_alloc: cannot allocate %lld bytes", (long long)bytes);
  size_t size = ((size_t)bytes + 63) / 64 * 64;
  if (size == 0)
    size = 64;
  if (ctx->nallocs == ctx->cap_allocs) {
    int cap = ctx->cap_allocs ? 2 * ctx->cap_allocs : 64;
    void **grown = realloc(ctx->allocs, (size_t)cap * sizeof *grown);
    if (!grown)
      gslrt_fatal(ctx, "gslrt_alloc: out of memory");
    ctx->allocs = grown;
    ctx->cap_allocs = cap;
  }
  void *p = aligned_alloc(64, size);
  if (!p)
    gslrt_fatal(ctx, "gslrt_alloc: cannot allocate %lld bytes", (long long)bytes);
  memset(p, 0, size);
  ctx->allocs[ctx->nallocs++] = p;
  return p;
}

/* The MPI type that moves elements of dtype as they are. */
static MPI_Datatype move_type(int32_t dtype) {
  return dtype == GSLRT_BF16 ? MPI_UINT16_T : dtype == GSLRT_I32 ? MPI_INT32_T : MPI_FLOAT;
}

static void shape_str(char *buf, size_t len, const char *lead, int32_t rank, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, len, "[%s", lead);
  for (int32_t i = 0; i < rank && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i || *lead ? ", " : "", (long long)shape[i]);
  if (n < len)
    snprintf(buf + n, len - n, "]");
}

void gslrt_check_mesh(gslrt_ctx *ctx) {
  int64_t devices = 1;
  if (ctx->mesh_checked)
    return;
  ctx->mesh_checked = 1;
  for (int i = 0; i < ctx->naxes; i++)
    devices *= ctx->axis_size[i];
  if (devices != ctx->nranks) {
    char mesh[256] = "[";
    size_t n = 1;
    for (int i = 0; i < ctx->naxes && n < sizeof mesh; i++)
      n += (size_t)snprintf(mesh + n, sizeof mesh - n, "%s%s = %lld", i ? ", " : "",
                            ctx->axis_name[i], (long long)ctx->axis_size[i]);
    if (n < sizeof mesh)
      snprintf(mesh + n, sizeof mesh - n, "]");
    if (ctx->naxes == 0)
      gslrt_fail_all(ctx, "the program has no mesh (one device) but it was started on %d ranks "
                     "(run it without mpirun, or with mpirun -np 1)", ctx->nranks);
    gslrt_fail_all(ctx, "the program's mesh %s has %lld device%s but it was started on %d rank%s "
                   "(mpirun -np %lld)", mesh, (long long)devices, devices == 1 ? "" : "s",
                   ctx->nranks, ctx->nranks == 1 ? "" : "s", (long long)devices);
  }
  gslrt_mesh_coords(ctx, ctx->rank, ctx->coord);
}

void gslrt_mesh_coords(const gslrt_ctx *ctx, int64_t r, int64_t *coord) {
  for (int i = ctx->naxes - 1; i >= 0; i--) {
    coord[i] = r % ctx->axis_size[i];
    r /= ctx->axis_size[i];
  }
}

int64_t gslrt_block_index(const gslrt_ctx *ctx, const int64_t *coord, int n, const int32_t *axes,
                          int64_t *blocks) {
  int64_t index = 0, count = 1;
  for (int j = 0; j < n; j++) {
    if (axes[j] < 0)
      continue;
    index = index * ctx->axis_size[axes[j]] + coord[axes[j]];
    count *= ctx->axis_size[axes[j]];
  }
  if (blocks)
    *blocks = count;
  return index;
}

void gslrt_tile_real(gslrt_ctx *ctx, int r, const char *what, int32_t rank, const int64_t *global_shape,
                     const int32_t *dim_axes, int64_t *local_shape, int64_t *local_offset,
                     int64_t *local_real) {
  int64_t coord[GSLRT_MAX_AXES];
  int n = dim_axes ? GSLRT_MAX_AXES : 0;
  gslrt_mesh_coords(ctx, r, coord);
  for (int32_t d = 0; d < rank; d++) {
    const int32_t *axes = dim_axes ? dim_axes + d * GSLRT_MAX_AXES : NULL;
    int64_t shards = 1, index, size = global_shape[d];
    for (int j = 0; j < n; j++)
      if (axes[j] >= ctx->naxes)
        gslrt_fail_all(ctx, "%s: dimension %d is split over mesh axis %d, but the mesh has %d axes",
                       what, (int)d, (int)axes[j], ctx->naxes);
    index = gslrt_block_index(ctx, coord, n, axes, &shards);
    /* an empty dimension splits into empty shards, as it always has */
    if (size < 0 || (size > 0 && shards > size))
      gslrt_fail_all(ctx, "%s: dimension %d of size %lld cannot be split into %lld shards (more "
                     "shards than elements)", what, (int)d, (long long)size, (long long)shards);
    int64_t c = (size + shards - 1) / shards, real = size - index * c;
    local_shape[d] = c;
    local_offset[d] = index * c;
    if (local_real)
      local_real[d] = real < 0 ? 0 : real > c ? c : real;
  }
}

void gslrt_tile(gslrt_ctx *ctx, int r, const char *what, int32_t rank, const int64_t *global_shape,
                const int32_t *dim_axes, int64_t *local_shape, int64_t *local_offset) {
  gslrt_tile_real(ctx, r, what, rank, global_shape, dim_axes, local_shape, local_offset, NULL);
}

/* Calls run(tile, packed, bytes) for each contiguous run of the real box
 * of a padded tile (shape, real: rank entries each), in C order: the box's
 * rows along its last dimension, each at its place in tile and in packed
 * (the box in C order). Nothing for an empty box. */
static void box_runs(char *tile, char *packed, int32_t rank, const int64_t *shape, const int64_t *real,
                     int esize, int to_packed) {
  int64_t idx[GSLRT_MAX_RANK] = {0};
  if (rank == 0) {
    memcpy(to_packed ? packed : tile, to_packed ? tile : packed, (size_t)esize);
    return;
  }
  for (int32_t d = 0; d < rank; d++)
    if (real[d] <= 0)
      return;
  size_t run = (size_t)real[rank - 1] * (size_t)esize;
  for (;;) {
    int64_t e = 0;
    for (int32_t d = 0; d < rank; d++)
      e = e * shape[d] + (d + 1 < rank ? idx[d] : 0);
    if (to_packed)
      memcpy(packed, tile + (size_t)e * (size_t)esize, run);
    else
      memcpy(tile + (size_t)e * (size_t)esize, packed, run);
    packed += run;
    int32_t d = rank - 2;
    while (d >= 0 && ++idx[d] == real[d])
      idx[d] = 0, d--;
    if (d < 0)
      return;
  }
}

void gslrt_box_pack(void *packed, const void *tile, int32_t rank, const int64_t *shape,
                    const int64_t *real, int esize) {
  box_runs((char *)tile, packed, rank, shape, real, esize, 1);
}

void gslrt_box_unpack(void *tile, const void *packed, int32_t rank, const int64_t *shape,
                      const int64_t *real, int esize) {
  int64_t n = 1;
  for (int32_t d = 0; d < rank; d++)
    n *= shape[d];
  memset(tile, 0, (size_t)n * (size_t)esize);
  box_runs(tile, (char *)packed, rank, shape, real, esize, 0);
}

void gslrt_declare_axis(gslrt_ctx *ctx, const char *name, int64_t size) {
  if (ctx->mesh_checked || ctx->naxes >= GSLRT_MAX_AXES || size < 1)
    gslrt_fail_all(ctx, "gslrt_declare_axis: bad mesh axis %s = %lld (declared after a tensor, "
                   "more than %d axes, or size < 1)", name, (long long)size, GSLRT_MAX_AXES);
  ctx->axis_name[ctx->naxes] = name;
  ctx->axis_size[ctx->naxes] = size;
  ctx->naxes++;
}

static int64_t count_of(int32_t rank, const int64_t *shape) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; i++)
    n *= shape[i];
  return n;
}

static void check_decl(gslrt_ctx *ctx, const char *call, const char *name, int32_t dtype,
                       int32_t rank, void **slot) {
  for (int i = 0; i < ctx->ntensors; i++)
    if (!strcmp(ctx->tensors[i].name, name) && !strcmp(call, "gslrt_declare_tensor"))
      gslrt_fail_all(ctx, "%s: %s declared twice", call, name);
  for (int i = 0; i < ctx->noutputs; i++)
    if (!strcmp(ctx->outputs[i].name, name) && !strcmp(call, "gslrt_declare_output"))
      gslrt_fail_all(ctx, "%s: %s declared twice", call, name);
  if ((dtype != GSLRT_F32 && dtype != GSLRT_I32 && dtype != GSLRT_BF16) || rank < 0 || rank > GSLRT_MAX_RANK || !slot)
    gslrt_fail_all(ctx, "%s: %s has a bad dtype %d, rank %d or slot", call, name, (int)dtype,
                   (int)rank);
}

void gslrt_declare_tensor(gslrt_ctx *ctx, const char *name, int32_t kind, int32_t dtype,
                          int32_t rank, const int64_t *global_shape, const int32_t *dim_axes,
                          void **slot, int32_t init, double a, double b, uint32_t stream,
                          int32_t frozen) {
  gslrt_check_mesh(ctx);
  check_decl(ctx, "gslrt_declare_tensor", name, dtype, rank, slot);
  if ((kind != GSLRT_PARAM && kind != GSLRT_INPUT && kind != GSLRT_STATE) || init < GSLRT_INIT_NONE ||
      init > GSLRT_INIT_UNIFORM)
    gslrt_fail_all(ctx, "gslrt_declare_tensor: %s has a bad kind %d or initializer %d", name,
                   (int)kind, (int)init);
  gslrt_tensor *grown = realloc(ctx->tensors, (size_t)(ctx->ntensors + 1) * sizeof *grown);
  if (!grown)
    gslrt_fatal(ctx, "gslrt_declare_tensor: out of memory");
  ctx->tensors = grown;
  gslrt_tensor *t = &ctx->tensors[ctx->ntensors++];
  memset(t, 0, sizeof *t);
  t->name = name, t->kind = kind, t->dtype = dtype, t->rank = rank;
  memcpy(t->global_shape, global_shape, (size_t)rank * sizeof *global_shape);
  t->slot = slot, t->init = init, t->a = a, t->b = b, t->stream = stream, t->frozen = frozen;
  for (int i = 0; i < rank * GSLRT_MAX_AXES; i++)
    t->dim_axes[i] = dim_axes ? dim_axes[i] : -1;
  gslrt_tile_real(ctx, ctx->rank, name, rank, global_shape, dim_axes, t->local_shape, t->local_offset,
                  t->local_real);
  t->local_count = count_of(rank, t->local_shape);
  t->real_count = count_of(rank, t->local_real);
  *slot = gslrt_alloc(ctx, t->local_count * gslrt_dtype_size(dtype));
}

void gslrt_declare_index_check(gslrt_ctx *ctx, const char *name, int64_t rows, const int64_t *lo,
                               const int64_t *hi, const char *what, int32_t in_eval) {
  int k = 0;
  while (k < ctx->ntensors && strcmp(ctx->tensors[k].name, name))
    k++;
  if (k == ctx->ntensors || ctx->tensors[k].kind != GSLRT_INPUT || ctx->tensors[k].dtype != GSLRT_I32)
    gslrt_fail_all(ctx, "gslrt_declare_index_check: %s is not a declared i32 input", name);
  const gslrt_tensor *t = &ctx->tensors[k];
  int ok = rows >= 1 && what;
  for (int32_t d = 0; d < t->rank; d++)
    ok = ok && 0 <= lo[d] && lo[d] < hi[d] && hi[d] <= t->global_shape[d];
  if (!ok)
    gslrt_fail_all(ctx, "gslrt_declare_index_check: input %s: a table of %lld rows, or a box outside "
                   "the input", name, (long long)rows);
  gslrt_index_check *grown = realloc(ctx->checks, (size_t)(ctx->nchecks + 1) * sizeof *grown);
  int64_t *first = grown ? realloc(ctx->check_first, (size_t)(ctx->nchecks + 1) * sizeof *first) : NULL;
  if (grown)
    ctx->checks = grown;
  if (!first)
    gslrt_fatal(ctx, "gslrt_declare_index_check: out of memory");
  ctx->check_first = first;
  gslrt_index_check *c = &ctx->checks[ctx->nchecks++];
  memset(c, 0, sizeof *c);
  c->tensor = k, c->rows = rows, c->what = what, c->in_eval = in_eval != 0;
  memcpy(c->lo, lo, (size_t)t->rank * sizeof *lo);
  memcpy(c->hi, hi, (size_t)t->rank * sizeof *hi);
}

void gslrt_declare_output(gslrt_ctx *ctx, const char *name, int32_t dtype, int32_t rank,
                          const int64_t *global_shape, const int32_t *dim_axes, void **slot) {
  gslrt_check_mesh(ctx);
  check_decl(ctx, "gslrt_declare_output", name, dtype, rank, slot);
  gslrt_output *grown = realloc(ctx->outputs, (size_t)(ctx->noutputs + 1) * sizeof *grown);
  if (!grown)
    gslrt_fatal(ctx, "gslrt_declare_output: out of memory");
  ctx->outputs = grown;
  gslrt_output *o = &ctx->outputs[ctx->noutputs++];
  memset(o, 0, sizeof *o);
  o->name = name, o->dtype = dtype, o->rank = rank, o->slot = slot;
  memcpy(o->global_shape, global_shape, (size_t)rank * sizeof *global_shape);
  for (int i = 0; i < rank * GSLRT_MAX_AXES; i++)
    o->dim_axes[i] = dim_axes ? dim_axes[i] : -1;
  gslrt_tile_real(ctx, ctx->rank, name, rank, global_shape, dim_axes, o->local_shape, o->local_offset,
                  o->local_real);
  o->local_count = count_of(rank, o->local_shape);
  o->real_count = count_of(rank, o->local_real);
}

/* The input that option (--input or --eval-input) binds with b; a usage
 * error if the program has no input of that name. */
static gslrt_tensor *bound_input(gslrt_ctx *ctx, const char *option, const gslrt_binding *b) {
  gslrt_tensor *t = NULL;
  for (int k = 0; k < ctx->ntensors; k++)
    if (!strcmp(ctx->tensors[k].name, b->name))
      t = &ctx->tensors[k];
  if (!t)
    gslrt_usage_error(ctx, "%s %s=%s: the program has no input named %s", option, b->name, b->file, b->name);
  if (t->kind != GSLRT_INPUT)
    gslrt_usage_error(ctx, "%s %s=%s: %s is %s, not an input", option, b->name, b->file, b->name,
                      t->kind == GSLRT_STATE ? "optimizer state" : "a param");
  return t;
}

void gslrt_check_bindings(gslrt_ctx *ctx) {
  const gslrt_options *op = &ctx->opts;
  for (int i = 0; i < op->ninputs; i++)
    bound_input(ctx, "--input", &op->inputs[i])->file = op->inputs[i].file;
  for (int i = 0; i < op->neval_inputs; i++)
    bound_input(ctx, "--eval-input", &op->eval_inputs[i])->eval_file = op->eval_inputs[i].file;
  for (int i = 0; i < op->noutputs; i++) {
    gslrt_output *o = NULL;
    for (int k = 0; k < ctx->noutputs; k++)
      if (!strcmp(ctx->outputs[k].name, op->outputs[i].name))
        o = &ctx->outputs[k];
    if (!o) {
      char names[256] = "";
      size_t n = 0;
      for (int k = 0; k < ctx->noutputs && n < sizeof names; k++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", k ? ", " : "",
                              ctx->outputs[k].name);
      gslrt_usage_error(ctx, "--output %s=%s: the program has no output named %s (%s%s)",
                        op->outputs[i].name, op->outputs[i].file, op->outputs[i].name,
                        ctx->noutputs ? "outputs: " : "it declares no output", names);
    }
    o->file = op->outputs[i].file;
  }
  for (int k = 0; k < ctx->ntensors; k++) {
    gslrt_tensor *t = &ctx->tensors[k];
    /* with --resume, held-out data may be all it needs: the checkpoint
     * may be at --steps (gslrt_check_training_inputs decides after it) */
    if (t->kind == GSLRT_INPUT && !t->file && t->init == GSLRT_INIT_NONE && !(t->eval_file && op->resume))
      gslrt_usage_error(ctx, "input %s has no initializer; bind it with --input %s=FILE", t->name,
                        t->name);
  }
}

void gslrt_check_training_inputs(gslrt_ctx *ctx, int64_t first) {
  for (int k = 0; k < ctx->ntensors; k++) {
    const gslrt_tensor *t = &ctx->tensors[k];
    if (t->kind == GSLRT_INPUT && !t->file && t->init == GSLRT_INIT_NONE)
      gslrt_usage_error(ctx, "input %s has no initializer; bind it with --input %s=FILE (--eval-input "
                        "alone only evaluates a checkpoint at --steps; %lld step%s left to run)",
                        t->name, t->name, (long long)(ctx->opts.steps - first),
                        ctx->opts.steps - first == 1 ? " is" : "s are");
  }
}

/* Checks the header of file, bound to t by the option what ("input x" or
 * "--eval-input x"), against t's declaration, on rank 0, keeping it in *h
 * and its batch count (0: the exact shape) in *batches; 0 or -1 with err. */
static int check_input_file(const gslrt_tensor *t, const char *what, const char *file, gslrt_npy *h,
                            int64_t *batches, char *err, int errlen) {
  int rc = -1;
  char msg[GSLRT_ERRLEN];
  if (gslrt_npy_read_header(file, h, msg, sizeof msg) != 0) {
    gslrt_seterr(err, errlen, "%s: %s", what, msg);
    goto fn_exit;
  }
  int exact = h->rank == t->rank, batched = h->rank == t->rank + 1 && h->shape[0] >= 1;
  for (int32_t d = 0; d < t->rank; d++) {
    exact = exact && h->shape[d] == t->global_shape[d];
    batched = batched && h->shape[d + 1] == t->global_shape[d];
  }
  if (h->dtype != gslrt_file_dtype(t->dtype) || (!exact && !batched)) {
    char found[160], want[160], wantb[160];
    shape_str(found, sizeof found, "", h->rank, h->shape);
    shape_str(want, sizeof want, "", t->rank, t->global_shape);
    shape_str(wantb, sizeof wantb, "B", t->rank, t->global_shape);
    gslrt_seterr(err, errlen, "%s: %s has shape %s (%s), expected %s (%s) or %s", what, file, found,
                 gslrt_dtype_name(h->dtype), want,
                 t->dtype == GSLRT_BF16 ? "f32, rounded to bf16" : gslrt_dtype_name(t->dtype), wantb);
    goto fn_exit;
  }
  *batches = exact ? 0 : h->shape[0];
  rc = 0;
fn_exit:
  return rc;
}

/* Checks file (what binds it to t) on rank 0 and shares its header and
 * batch count, or the verdict on it. */
static void open_input(gslrt_ctx *ctx, const gslrt_tensor *t, const char *what, const char *file,
                       gslrt_npy *h, int64_t *batches) {
  char err[GSLRT_ERRLEN] = "";
  int status = 0;
  if (ctx->rank == 0)
    status = check_input_file(t, what, file, h, batches, err, sizeof err);
  gslrt_rank0_verdict(ctx, status ? 1 : 0, err);
  gslrt_world_bcast(ctx, h, (int)sizeof *h, MPI_BYTE, 0, "the sharing of an input file's header");
  gslrt_world_bcast(ctx, batches, 1, MPI_INT64_T, 0, "the sharing of an input file's batch count");
}

void gslrt_open_inputs(gslrt_ctx *ctx) {
  const gslrt_tensor *first = NULL;
  char what[GSLRT_ERRLEN];
  for (int k = 0; k < ctx->ntensors; k++) {
    gslrt_tensor *t = &ctx->tensors[k];
    if (t->file) {
      snprintf(what, sizeof what, "input %s", t->name);
      open_input(ctx, t, what, t->file, &t->npy, &t->batches);
    }
  }
  /* the held-out files: B batches each (an exact shape is one), the same B */
  for (int k = 0; k < ctx->ntensors; k++) {
    gslrt_tensor *t = &ctx->tensors[k];
    if (!t->eval_file)
      continue;
    snprintf(what, sizeof what, "--eval-input %s", t->name);
    open_input(ctx, t, what, t->eval_file, &t->eval_npy, &t->eval_batches);
    int64_t b = t->eval_batches ? t->eval_batches : 1;
    if (first && b != ctx->eval_batches)
      gslrt_fail_all(ctx, "--eval-input %s=%s holds %lld batch%s but --eval-input %s=%s holds %lld "
                     "(every --eval-input file must hold the same number of held-out batches)",
                     t->name, t->eval_file, (long long)b, b == 1 ? "" : "es", first->name,
                     first->eval_file, (long long)ctx->eval_batches);
    if (!first)
      first = t, ctx->eval_batches = b;
  }
}

/* n ones of dtype into buf. */
static void fill_ones(void *buf, int32_t dtype, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dtype == GSLRT_I32)
      ((int32_t *)buf)[i] = 1;
    else if (dtype == GSLRT_BF16)
      ((uint16_t *)buf)[i] = gslrt_bf16_round(1.0f);
    else
      ((float *)buf)[i] = 1.0f;
  }
}

/* Fills t's tile from its initializer for step; a bf16 tile is drawn in
 * f32 into a temporary and rounded. A padded tile (gslrt.h) is filled in
 * its real box alone, drawn into a packed temporary keyed by the global
 * indices of that box (so any mesh draws the same numbers), then placed
 * in the buffer with every padding element zero. */
static void fill_init(gslrt_ctx *ctx, gslrt_tensor *t, int64_t step) {
  void *buf = *t->slot;
  int es = gslrt_dtype_size(t->dtype);
  if (t->real_count != t->local_count && t->init != GSLRT_INIT_NONE && t->init != GSLRT_INIT_ZEROS) {
    float *draw = malloc((size_t)t->real_count * 4 + 4);
    void *packed = t->dtype == GSLRT_BF16 ? malloc((size_t)t->real_count * 2 + 2) : draw;
    if (!draw || !packed)
      gslrt_fatal(ctx, "%s: cannot allocate %lld bytes to draw its initializer", t->name,
                  (long long)t->real_count * 6);
    if (t->init == GSLRT_INIT_ONES)
      fill_ones(packed, t->dtype, t->real_count);
    else {
      gslrt_rng_fill(ctx, draw, t->init == GSLRT_INIT_NORMAL ? GSLRT_NORMAL : GSLRT_UNIFORM, t->a, t->b,
                     t->stream, step, t->rank, t->global_shape, t->local_offset, t->local_real);
      if (t->dtype == GSLRT_I32)
        for (int64_t i = 0; i < t->real_count; i++)
          ((int32_t *)packed)[i] = (int32_t)floorf(draw[i]);
      if (t->dtype == GSLRT_BF16)
        gslrt_bf16_round_n(packed, draw, t->real_count);
    }
    gslrt_box_unpack(buf, packed, t->rank, t->local_shape, t->local_real, es);
    if (packed != draw)
      free(packed);
    free(draw);
    return;
  }
  switch (t->init) {
  case GSLRT_INIT_NONE:
  case GSLRT_INIT_ZEROS:
    memset(buf, 0, (size_t)t->local_count * (size_t)es);
    return;
  case GSLRT_INIT_ONES:
    fill_ones(buf, t->dtype, t->local_count);
    return;
  default: {
    float *draw = buf;
    if (t->dtype == GSLRT_BF16 && !(draw = malloc((size_t)t->local_count * 4 + 4)))
      gslrt_fatal(ctx, "%s: cannot allocate %lld bytes to draw its initializer", t->name,
                  (long long)t->local_count * 4);
    gslrt_rng_fill(ctx, draw, t->init == GSLRT_INIT_NORMAL ? GSLRT_NORMAL : GSLRT_UNIFORM, t->a, t->b,
                   t->stream, step, t->rank, t->global_shape, t->local_offset, t->local_shape);
    if (t->dtype == GSLRT_I32)
      for (int64_t i = 0; i < t->local_count; i++) {
        float f;
        memcpy(&f, (char *)buf + 4 * i, 4);
        ((int32_t *)buf)[i] = (int32_t)floorf(f);
      }
    if (t->dtype == GSLRT_BF16) {
      gslrt_bf16_round_n(buf, draw, t->local_count);
      free(draw);
    }
  }
  }
}

void gslrt_init_params(gslrt_ctx *ctx) {
  for (int k = 0; k < ctx->ntensors; k++)
    if (ctx->tensors[k].kind == GSLRT_PARAM || ctx->tensors[k].kind == GSLRT_STATE)
      fill_init(ctx, &ctx->tensors[k], -1);
}

/* Reads t's tile of batch b (of batches; 0: the file has t's exact shape)
 * of file, whose header is h, into t's buffer; what names the binding. */
static void read_input(gslrt_ctx *ctx, gslrt_tensor *t, const char *what, const char *file,
                       const gslrt_npy *h, int64_t batches, int64_t b) {
  char err[GSLRT_ERRLEN];
  int64_t off[GSLRT_MAX_RANK + 1], cnt[GSLRT_MAX_RANK + 1];
  int lead = batches ? 1 : 0;
  off[0] = batches ? b : 0;
  cnt[0] = 1;
  for (int32_t d = 0; d < t->rank; d++)
    off[d + lead] = t->local_offset[d], cnt[d + lead] = t->local_real[d];
  if (t->real_count == t->local_count) {
    if (gslrt_npy_read_tile_as(file, h, off, cnt, *t->slot, t->dtype, err, sizeof err) != 0)
      gslrt_fatal(ctx, "%s %s: %s", what, t->name, err);
    return;
  }
  /* a padded tile: its real box read packed, then placed with zero padding */
  int es = gslrt_dtype_size(t->dtype);
  void *packed = malloc((size_t)t->real_count * (size_t)es + 4);
  if (!packed)
    gslrt_fatal(ctx, "%s %s: cannot allocate %lld bytes to read its tile", what, t->name,
                (long long)t->real_count * es);
  if (t->real_count > 0 && gslrt_npy_read_tile_as(file, h, off, cnt, packed, t->dtype, err, sizeof err) != 0)
    gslrt_fatal(ctx, "%s %s: %s", what, t->name, err);
  gslrt_box_unpack(*t->slot, packed, t->rank, t->local_shape, t->local_real, es);
  free(packed);
}

/* The first element of t's real box (its tile without the padding) inside
 * c's box that is outside [0, rows), as its index in C order of t's global
 * shape; INT64_MAX if there is none. Both are boxes of the global shape,
 * so the scan in the tile's C order meets its elements in global C order. */
static int64_t first_out_of_range(const gslrt_tensor *t, const gslrt_index_check *c) {
  int64_t from[GSLRT_MAX_RANK], to[GSLRT_MAX_RANK], at[GSLRT_MAX_RANK];
  const int32_t *x = *t->slot;
  int32_t last = t->rank - 1;
  if (t->rank == 0)
    return x[0] < 0 || x[0] >= c->rows ? 0 : INT64_MAX;
  for (int32_t d = 0; d < t->rank; d++) {
    int64_t o = t->local_offset[d], n = t->local_real[d]; /* padding is not checked */
    from[d] = (c->lo[d] > o ? c->lo[d] : o) - o;
    to[d] = (c->hi[d] < o + n ? c->hi[d] : o + n) - o;
    if (from[d] >= to[d])
      return INT64_MAX;
    at[d] = from[d];
  }
  for (;;) {
    int64_t row = 0;
    for (int32_t d = 0; d < last; d++)
      row = row * t->local_shape[d] + at[d];
    row *= t->local_shape[last];
    for (int64_t i = from[last]; i < to[last]; i++)
      if (x[row + i] < 0 || x[row + i] >= c->rows) {
        int64_t e = 0;
        at[last] = i;
        for (int32_t d = 0; d < t->rank; d++)
          e = e * t->global_shape[d] + t->local_offset[d] + at[d];
        return e;
      }
    int32_t d = last - 1;
    while (d >= 0 && ++at[d] == to[d])
      at[d] = from[d], d--;
    if (d < 0)
      return INT64_MAX;
  }
}

/* Ends the run, on every rank together, for element e (C order of the
 * global shape) of the input of check k, the first out of range: its value
 * comes from the ranks whose tile holds it (the others offer INT32_MAX to
 * the minimum); the message names the first check on that input that the
 * value fails. batch as check_indices has it. */
static void index_error(gslrt_ctx *ctx, int k, int eval, int64_t batch) __attribute__((noreturn));
static void index_error(gslrt_ctx *ctx, int k, int eval, int64_t batch) {
  const gslrt_tensor *t = &ctx->tensors[ctx->checks[k].tensor];
  int64_t e = ctx->check_first[k], at[GSLRT_MAX_RANK], local = 0, rest = e;
  int held = 1;
  for (int32_t d = t->rank - 1; d >= 0; d--) {
    at[d] = rest % t->global_shape[d];
    rest /= t->global_shape[d];
  }
  for (int32_t d = 0; d < t->rank; d++) {
    int64_t l = at[d] - t->local_offset[d];
    held = held && l >= 0 && l < t->local_real[d];
    local = local * t->local_shape[d] + l;
  }
  int32_t value = held ? ((const int32_t *)*t->slot)[local] : INT32_MAX;
  if (ctx->nranks > 1)
    gslrt_world_allreduce(ctx, MPI_IN_PLACE, &value, 1, MPI_INT32_T, MPI_MIN,
                          "the sharing of an index out of range");
  const gslrt_index_check *c = &ctx->checks[k];
  for (int i = 0; i < ctx->nchecks; i++) {
    const gslrt_index_check *ci = &ctx->checks[i];
    int in = ci->tensor == c->tensor && (ci->in_eval || !eval) && (value < 0 || value >= ci->rows);
    for (int32_t d = 0; in && d < t->rank; d++)
      in = ci->lo[d] <= at[d] && at[d] < ci->hi[d];
    if (in) {
      c = ci;
      break;
    }
  }
  int64_t batches = eval ? t->eval_batches : t->batches;
  char pos[32 * GSLRT_MAX_RANK], phase[160];
  gslrt_position(t->rank, t->global_shape, e, NULL, pos, sizeof pos);
  gslrt_phase(ctx, 0, phase, sizeof phase);
  gslrt_fail_all(ctx, "%s %s=%s: batch %lld of %lld (%s): %s%s = %d is out of range for %s, whose table has "
                 "%lld rows", eval ? "--eval-input" : "--input", t->name, eval ? t->eval_file : t->file,
                 (long long)(batches ? batch : 0), (long long)(batches ? batches : 1), phase, t->name, pos,
                 (int)value, c->what, (long long)c->rows);
}

/* After the inputs are bound for training step n (eval 0) or held-out
 * batch n (eval 1): the index checks on the inputs just read from files,
 * each rank its own tile, then (several ranks) the first element out of
 * range of each check, agreed in one MPI_Allreduce, so that every rank
 * goes on, or ends, together. The input declared first, and its first
 * element, is the one reported. */
static void check_indices(gslrt_ctx *ctx, int eval, int64_t n) {
  int any = 0, bad = -1;
  for (int i = 0; i < ctx->nchecks; i++) {
    const gslrt_tensor *t = &ctx->tensors[ctx->checks[i].tensor];
    int read = eval ? t->eval_file && ctx->checks[i].in_eval : t->file != NULL;
    ctx->check_first[i] = read ? first_out_of_range(t, &ctx->checks[i]) : INT64_MAX;
    any |= read;
  }
  if (!any)
    return;
  if (ctx->nranks > 1)
    gslrt_world_allreduce(ctx, MPI_IN_PLACE, ctx->check_first, ctx->nchecks, MPI_INT64_T, MPI_MIN,
                          "the agreement of the inputs' index checks");
  for (int i = 0; i < ctx->nchecks; i++) {
    const gslrt_index_check *c = &ctx->checks[i];
    if (ctx->check_first[i] != INT64_MAX &&
        (bad < 0 || c->tensor < ctx->checks[bad].tensor ||
         (c->tensor == ctx->checks[bad].tensor && ctx->check_first[i] < ctx->check_first[bad])))
      bad = i;
  }
  if (bad >= 0) {
    const gslrt_tensor *t = &ctx->tensors[ctx->checks[bad].tensor];
    int64_t batches = eval ? t->eval_batches : t->batches;
    index_error(ctx, bad, eval, eval || !batches ? n : n % batches);
  }
}

void gslrt_bind_inputs(gslrt_ctx *ctx, int64_t step) {
  for (int k = 0; k < ctx->ntensors; k++) {
    gslrt_tensor *t = &ctx->tensors[k];
    if (t->kind != GSLRT_INPUT)
      continue;
    if (!t->file)
      fill_init(ctx, t, step);
    else
      read_input(ctx, t, "input", t->file, &t->npy, t->batches, t->batches ? step % t->batches : 0);
  }
  check_indices(ctx, 0, step);
}

void gslrt_bind_eval_inputs(gslrt_ctx *ctx, int64_t j) {
  for (int k = 0; k < ctx->ntensors; k++) {
    gslrt_tensor *t = &ctx->tensors[k];
    if (t->kind != GSLRT_INPUT)
      continue;
    if (!t->eval_file)
      fill_init(ctx, t, GSLRT_EVAL_KEY + j);
    else
      read_input(ctx, t, "--eval-input", t->eval_file, &t->eval_npy, t->eval_batches, j);
  }
  check_indices(ctx, 1, j);
}

/* Copies a tile (row-major, local_shape at local_offset, esize-byte
 * elements) into the global array (out 0: tile -> global), or out of it
 * (out 1: global -> tile). */
static void copy_tile(char *global, int32_t rank, const int64_t *gshape, const int64_t *off,
                      const int64_t *shape, char *tile, int esize, int out) {
  int64_t idx[GSLRT_MAX_RANK] = {0}, rows = 1;
  int64_t run = rank ? shape[rank - 1] : 1;
  for (int32_t d = 0; d + 1 < rank; d++)
    rows *= shape[d];
  if (run == 0)
    return;
  for (int64_t r = 0; r < rows; r++) {
    int64_t e = 0;
    for (int32_t d = 0; d < rank; d++)
      e = e * gshape[d] + off[d] + (d + 1 < rank ? idx[d] : 0);
    if (out)
      memcpy(tile, global + esize * e, (size_t)(run * esize));
    else
      memcpy(global + esize * e, tile, (size_t)(run * esize));
    tile += esize * run;
    for (int32_t d = rank - 2; d >= 0; d--) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

void gslrt_bind_gen_inputs(gslrt_ctx *ctx, int tokens, const int32_t *window, int64_t key) {
  for (int k = 0; k < ctx->ntensors; k++) {
    gslrt_tensor *t = &ctx->tensors[k];
    if (t->kind != GSLRT_INPUT)
      continue;
    if (k == tokens && t->real_count == t->local_count)
      copy_tile((char *)window, t->rank, t->global_shape, t->local_offset, t->local_shape, *t->slot, 4, 1);
    else if (k == tokens) { /* a padded tile: its real box, zero padding */
      int32_t *packed = malloc((size_t)t->real_count * 4 + 4);
      if (!packed)
        gslrt_fatal(ctx, "--generate: cannot allocate the tile of input %s", t->name);
      copy_tile((char *)window, t->rank, t->global_shape, t->local_offset, t->local_real, (char *)packed, 4, 1);
      gslrt_box_unpack(*t->slot, packed, t->rank, t->local_shape, t->local_real, 4);
      free(packed);
    } else
      fill_init(ctx, t, key);
  }
}

/* The verdict on the --output targets, on rank 0: 0, or 2 (a usage
 * error) or 1 (a run-time error) with the cause in err. */
static int check_targets(const gslrt_ctx *ctx, char *err, int errlen) {
  int rc = 0;
  char msg[GSLRT_ERRLEN];
  const gslrt_options *op = &ctx->opts;
  uint64_t *dev = calloc((size_t)op->noutputs + 1, sizeof *dev);
  uint64_t *ino = calloc((size_t)op->noutputs + 1, sizeof *ino);
  if (!dev || !ino) {
    gslrt_seterr(err, errlen, "out of memory");
    rc = 1;
    goto fn_exit;
  }
  for (int i = 0; i < op->noutputs; i++) {
    const gslrt_binding *b = &op->outputs[i];
    for (int k = 0; k < i; k++)
      if (!strcmp(op->outputs[k].file, b->file)) {
        gslrt_seterr(err, errlen, "--output %s=%s and --output %s=%s name the same file",
                     op->outputs[k].name, op->outputs[k].file, b->name, b->file);
        rc = 2;
        goto fn_exit;
      }
    if (gslrt_npy_check_target(b->file, &dev[i], &ino[i], msg, sizeof msg) != 0) {
      gslrt_seterr(err, errlen, "--output %s=%s: %s", b->name, b->file, msg);
      rc = 1;
      goto fn_exit;
    }
    for (int k = 0; k < i; k++)
      if (ino[i] && dev[k] == dev[i] && ino[k] == ino[i]) {
        gslrt_seterr(err, errlen, "--output %s=%s and --output %s=%s name the same file",
                     op->outputs[k].name, op->outputs[k].file, b->name, b->file);
        rc = 2;
        goto fn_exit;
      }
    if (ctx->metrics && ino[i] && dev[i] == ctx->metrics_dev && ino[i] == ctx->metrics_ino) {
      gslrt_seterr(err, errlen, "--metrics %s and --output %s=%s name the same file", op->metrics,
                   b->name, b->file);
      rc = 2;
      goto fn_exit;
    }
  }
fn_exit:
  free(dev);
  free(ino);
  return rc;
}

void gslrt_check_outputs(gslrt_ctx *ctx) {
  char err[GSLRT_ERRLEN] = "";
  int status = 0;
  if (ctx->rank == 0)
    status = check_targets(ctx, err, sizeof err);
  gslrt_rank0_verdict(ctx, status, err);
}

void *gslrt_gather_output(gslrt_ctx *ctx, const gslrt_output *o) {
  int *counts = NULL, *displs = NULL;
  char *all = NULL, *global = NULL;
  const void *mine = *o->slot;
  void *packed = NULL;
  int64_t total = 0, gcount = count_of(o->rank, o->global_shape);
  int esize = gslrt_dtype_size(o->dtype);
  if (!mine && o->local_count > 0)
    gslrt_fatal(ctx, "output %s has no buffer (gsl_setup left its slot empty)", o->name);
  if (ctx->rank == 0 && !(global = malloc((size_t)(gcount * esize) + 4)))
    gslrt_fatal(ctx, "output %s: cannot allocate %lld bytes to gather it", o->name, (long long)gcount * esize);
  if (ctx->nranks == 1) {
    if (gcount > 0)
      memcpy(global, mine, (size_t)(gcount * esize));
    return global;
  }
  if (o->real_count != o->local_count) { /* a padded tile: its real box alone */
    if (!(packed = malloc((size_t)(o->real_count * esize) + 4)))
      gslrt_fatal(ctx, "output %s: cannot allocate %lld bytes to gather it", o->name,
                  (long long)o->real_count * esize);
    gslrt_box_pack(packed, mine, o->rank, o->local_shape, o->local_real, esize);
    mine = packed;
  }
  if (ctx->rank == 0) {
    counts = malloc((size_t)ctx->nranks * sizeof *counts);
    displs = malloc((size_t)ctx->nranks * sizeof *displs);
    if (!counts || !displs)
      gslrt_fatal(ctx, "output %s: out of memory", o->name);
    for (int r = 0; r < ctx->nranks; r++) {
      int64_t shape[GSLRT_MAX_RANK], off[GSLRT_MAX_RANK], real[GSLRT_MAX_RANK];
      gslrt_tile_real(ctx, r, o->name, o->rank, o->global_shape, o->dim_axes, shape, off, real);
      int64_t n = count_of(o->rank, real);
      if (total + n > INT32_MAX)
        gslrt_fatal(ctx, "output %s: %lld elements are too many to gather", o->name,
                    (long long)(total + n));
      counts[r] = (int)n, displs[r] = (int)total;
      total += n;
    }
    if (!(all = malloc((size_t)(total * esize) + 4)))
      gslrt_fatal(ctx, "output %s: cannot allocate %lld bytes to gather it", o->name, (long long)total * esize);
  }
  gslrt_world_gatherv(ctx, mine, (int)o->real_count, move_type(o->dtype), all, counts, displs, 0,
                      "the gathering of an output");
  if (ctx->rank == 0)
    for (int r = 0; r < ctx->nranks; r++) {
      int64_t shape[GSLRT_MAX_RANK], off[GSLRT_MAX_RANK], real[GSLRT_MAX_RANK];
      gslrt_tile_real(ctx, r, o->name, o->rank, o->global_shape, o->dim_axes, shape, off, real);
      copy_tile(global, o->rank, o->global_shape, off, real, all + esize * (int64_t)displs[r], esize, 0);
    }
  free(packed);
  free(counts);
  free(displs);
  free(all);
  return global;
}

/* Gathers output o on rank 0 and writes it to a temporary beside its file,
 * whose name goes to *tmp there; returns the status there. */
static int write_output(gslrt_ctx *ctx, gslrt_output *o, char **tmp, char *err, int errlen) {
  if (!*o->slot && o->local_count > 0)
    gslrt_fatal(ctx, "output %s has no buffer (gsl_setup left its slot empty)", o->name);
  if (ctx->nranks == 1) /* the buffer as it is: no copy */
    return gslrt_npy_write_temp(o->file, o->dtype, o->rank, o->global_shape, *o->slot, tmp, err, errlen);
  void *global = gslrt_gather_output(ctx, o);
  int rc = ctx->rank == 0 ? gslrt_npy_write_temp(o->file, o->dtype, o->rank, o->global_shape, global, tmp, err, errlen)
                          : 0;
  free(global);
  return rc;
}

/* Removes the temporaries tmp[0..n) that exist and frees their names. */
static void remove_temps(char **tmp, int n) {
  for (int k = 0; k < n; k++) {
    if (tmp[k])
      unlink(tmp[k]);
    free(tmp[k]);
    tmp[k] = NULL;
  }
}

void gslrt_write_outputs(gslrt_ctx *ctx) {
  char err[GSLRT_ERRLEN] = "";
  char **tmp = calloc((size_t)ctx->noutputs + 1, sizeof *tmp);
  const char *failed = NULL;
  if (!tmp)
    gslrt_fatal(ctx, "writing the outputs: out of memory");
  gslrt_doing(ctx, "writing the outputs");
  for (int k = 0; k < ctx->noutputs && !failed; k++) {
    gslrt_output *o = &ctx->outputs[k];
    if (!o->file)
      continue;
    int status = write_output(ctx, o, &tmp[k], err, sizeof err);
    gslrt_world_bcast(ctx, &status, 1, MPI_INT, 0, "the sharing of an output's verdict");
    if (status != 0)
      failed = o->name;
  }
  if (failed) {
    remove_temps(tmp, ctx->noutputs);
    free(tmp);
    gslrt_fail_all(ctx, "output %s: %s (no output was written)", failed, err);
  }
  /* every temporary is complete: rename them all (rank 0 holds them) */
  int status = 0;
  for (int k = 0; k < ctx->noutputs && status == 0; k++) {
    if (!tmp[k])
      continue;
    if (rename(tmp[k], ctx->outputs[k].file) != 0) {
      gslrt_seterr(err, sizeof err, "output %s: cannot rename %s to %s: %s", ctx->outputs[k].name,
                   tmp[k], ctx->outputs[k].file, strerror(errno));
      status = 1;
    } else {
      free(tmp[k]);
      tmp[k] = NULL;
    }
  }
  remove_temps(tmp, ctx->noutputs);
  free(tmp);
  gslrt_rank0_verdict(ctx, status ? 1 : 0, err);
}

int64_t gslrt_tokens_per_step(const gslrt_ctx *ctx) {
  int64_t n = 1;
  for (int k = 0; k < ctx->ntensors; k++) {
    const gslrt_tensor *t = &ctx->tensors[k];
    if (t->kind != GSLRT_INPUT)
      continue;
    for (int32_t d = 0; d + (t->dtype == GSLRT_I32 ? 0 : 1) < t->rank; d++)
      n *= t->global_shape[d];
    break;
  }
  return n;
}
