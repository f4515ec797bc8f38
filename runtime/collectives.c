/* collectives.c — groups of mesh axes, their communicators, and the
 * collectives gsl_step calls on them.
 *
 * Groups. gsl_setup declares every group of mesh axes it will use
 * (gslrt_declare_group; an identical axis list gets the same id back). Once
 * the mesh has been checked against the ranks, gslrt_build_groups validates
 * each group (axes in range, none repeated) and builds its communicator with
 * one MPI_Comm_split of our duplicate of MPI_COMM_WORLD, every rank calling
 * in the same order: the color is the device's block index along the axes
 * NOT in the group (so the members are the devices that differ only in the
 * group's axes) and the key its block index along the group's axes in the
 * order given, major first (gslrt_block_index, the numbering tiles use too),
 * so that the rank in the new communicator is the block index. A group of
 * one device (no axes, or only axes of size 1) has no communicator: its
 * collectives are copies.
 *
 * Collectives. A local tensor of shape s acted on along dimension dim is
 * seen as [outer][s[dim]][inner] (outer, inner: the products of the extents
 * before and after dim). The MPI calls want one contiguous block per member;
 * when outer is 1 the tensor already is g such blocks along dim and MPI reads
 * or writes the caller's buffers directly, otherwise the blocks are packed
 * into (or unpacked from) the context's scratch space, one memcpy per
 * contiguous run of d * inner elements:
 *   all_reduce      MPI_Iallreduce(MPI_IN_PLACE) on the buffer;
 *   all_gather      MPI_Iallgather of the whole input into [g][in] blocks,
 *                   unpacked along dim (direct into out when outer is 1);
 *   reduce_scatter  input packed into [g][block] (unless outer is 1), then
 *                   MPI_Ireduce_scatter_block straight into out;
 *   all_to_all      MPI_Ialltoall when both sides are contiguous blocks;
 *                   otherwise one MPI_Isend/MPI_Irecv per chunk that is
 *                   contiguous on both sides, straight between the
 *                   caller's buffers (all_to_all_direct), or, for chunks
 *                   under 16 KiB, input packed along dim, MPI_Ialltoall,
 *                   output unpacked along dim2.
 *   all_to_all_rider  a small all_to_all (the rider) moved in the call of
 *                   another on the same group (the carrier): the rider's
 *                   blocks are packed into space of their own, one
 *                   MPI_Irecv and MPI_Isend per member are posted, the
 *                   carrier's transfer runs as above, and one wait ends
 *                   the rider's messages: no round of its own.
 *   collective_permute  one MPI_Irecv and one MPI_Isend.
 * Every call is MPI's non-blocking form, its requests waited for by the
 * watchdog (health.c: polled until done or --collective-timeout), each
 * public call between gslrt_watch_enter and gslrt_watch_leave, which
 * announce this rank's arrival to the group and time the call; the
 * numbers are those of the blocking forms: the same reduction ops on the
 * same buffers. gslrt_build_groups sets up the watch over each group and
 * over every rank (ctx->everyone, the runtime's own collectives).
 * Uneven tiles (gslrt.h: a dimension of n in g tiles of c = ceil(n / g),
 * the real elements first): every member still moves whole padded tiles
 * where it can, so the MPI calls keep one count for all:
 *   all_gather      with outer 1, MPI_Iallgatherv of each member's real run
 *                   straight into out; otherwise the padded tiles gathered
 *                   into scratch and each one's real elements unpacked;
 *   reduce_scatter  the input packed into [g][c] tiles with zeros after
 *                   each one's real elements (widened for bf16), then the
 *                   even MPI_Ireduce_scatter_block: padding sums to zero;
 *   all_to_all      the input packed into g padded blocks of c, the even
 *                   MPI_Ialltoall, and each received block's real part
 *                   along dim2 unpacked; never direct. The rider the same.
 * bf16 buffers (2-byte elements) move as they are (MPI_UINT16_T); their
 * sums and maxima are taken in f32: all_reduce widens the buffer into
 * scratch, reduces it there with the same MPI_Iallreduce as an f32 buffer,
 * and rounds it back; reduce_scatter widens the input into scratch while
 * packing it, reduces in place there (MPI_IN_PLACE: the f32 call on the
 * same data), and rounds this member's block into out. So a bf16
 * reduction is the f32 one of the widened values, rounded once, and as
 * independent of the mesh as that is. Scratch sizes: gslrt.h.
 * The scratch space grows to the largest need and is kept until exit.
 * Element counts above INT_MAX per call (8 GiB of f32) go through the MPI-4
 * large-count calls (MPI_Iallgather_c, ...); all_reduce is cut into chunks. */
#include "internal.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The largest element count passed to one classic (int-count) MPI call. */
#ifndef GSLRT_MPI_COUNT_MAX
#define GSLRT_MPI_COUNT_MAX INT_MAX
#endif

int32_t gslrt_declare_group(gslrt_ctx *ctx, int32_t n, const int32_t *axes) {
  if (ctx->groups_built)
    gslrt_fail_all(ctx, "gslrt_declare_group: groups must be declared in gsl_setup");
  if (n < 0 || n > GSLRT_MAX_AXES || (n > 0 && !axes))
    gslrt_fail_all(ctx, "gslrt_declare_group: bad number of axes %d (at most %d)", (int)n,
                   GSLRT_MAX_AXES);
  for (int32_t i = 0; i < n; i++) {
    if (axes[i] < 0)
      gslrt_fail_all(ctx, "gslrt_declare_group: axis %d of the group is %d, not a mesh axis",
                     (int)i, (int)axes[i]);
    for (int32_t j = 0; j < i; j++)
      if (axes[j] == axes[i])
        gslrt_fail_all(ctx, "gslrt_declare_group: mesh axis %d is named twice in one group",
                       (int)axes[i]);
  }
  for (int g = 0; g < ctx->ngroups; g++)
    if (ctx->groups[g].n == n && (n == 0 || !memcmp(ctx->groups[g].axes, axes, (size_t)n * sizeof *axes)))
      return g;
  gslrt_group *grown = realloc(ctx->groups, (size_t)(ctx->ngroups + 1) * sizeof *grown);
  if (!grown)
    gslrt_fatal(ctx, "gslrt_declare_group: out of memory");
  ctx->groups = grown;
  gslrt_group *gr = &ctx->groups[ctx->ngroups];
  memset(gr, 0, sizeof *gr);
  gr->n = n;
  if (n > 0)
    memcpy(gr->axes, axes, (size_t)n * sizeof *axes);
  gr->size = 1;
  gr->comm = gr->watch = MPI_COMM_NULL;
  return ctx->ngroups++;
}

void gslrt_build_groups(gslrt_ctx *ctx) {
  if (ctx->groups_built)
    return;
  ctx->groups_built = 1;
  ctx->watch = MPI_COMM_NULL; /* made by the first group watched (health.c) */
  for (int g = 0; g < ctx->ngroups; g++) {
    gslrt_group *gr = &ctx->groups[g];
    int32_t rest[GSLRT_MAX_AXES];
    int nrest = 0;
    for (int32_t i = 0; i < gr->n; i++)
      if (gr->axes[i] >= ctx->naxes)
        gslrt_fail_all(ctx, "group %d names mesh axis %d, but the mesh has %d ax%s", g,
                       (int)gr->axes[i], ctx->naxes, ctx->naxes == 1 ? "is" : "es");
    for (int a = 0; a < ctx->naxes; a++) {
      int in = 0;
      for (int32_t i = 0; i < gr->n; i++)
        in |= gr->axes[i] == a;
      if (!in)
        rest[nrest++] = a;
    }
    gr->index = gslrt_block_index(ctx, ctx->coord, gr->n, gr->axes, &gr->size);
    if (gr->size == 1)
      continue;
    int64_t color = gslrt_block_index(ctx, ctx->coord, nrest, rest, NULL);
    int got = -1, members = 0;
    gslrt_deadline(ctx, "the MPI_Comm_split making group %d's communicator", g);
    gslrt_mpi_check(ctx, MPI_Comm_split(ctx->comm, (int)color, (int)gr->index, &gr->comm),
                    "MPI_Comm_split");
    gslrt_deadline_off(ctx);
    gslrt_mpi_check(ctx, MPI_Comm_set_errhandler(gr->comm, MPI_ERRORS_RETURN),
                    "MPI_Comm_set_errhandler");
    gslrt_mpi_check(ctx, MPI_Comm_rank(gr->comm, &got), "MPI_Comm_rank");
    gslrt_mpi_check(ctx, MPI_Comm_size(gr->comm, &members), "MPI_Comm_size");
    if (got != gr->index || members != gr->size)
      gslrt_fatal(ctx, "group %d: MPI_Comm_split gave rank %d of %d, expected %lld of %lld", g, got,
                  members, (long long)gr->index, (long long)gr->size);
    gslrt_watch_group(ctx, gr, g + 1);
  }
  gslrt_group *all = &ctx->everyone;
  memset(all, 0, sizeof *all);
  all->size = ctx->nranks > 1 ? ctx->nranks : 1;
  all->index = ctx->rank;
  all->comm = ctx->nranks > 1 ? ctx->comm : MPI_COMM_NULL;
  all->borrowed = 1;
  gslrt_watch_group(ctx, all, 0);
}

void gslrt_free_groups(gslrt_ctx *ctx) {
  for (int g = 0; g < ctx->ngroups; g++) {
    if (ctx->groups_built)
      gslrt_unwatch_group(ctx, &ctx->groups[g]);
    if (ctx->groups[g].comm != MPI_COMM_NULL)
      gslrt_mpi_check(ctx, MPI_Comm_free(&ctx->groups[g].comm), "MPI_Comm_free");
  }
  if (ctx->groups_built)
    gslrt_unwatch_group(ctx, &ctx->everyone);
  if (ctx->groups_built && ctx->watch != MPI_COMM_NULL)
    gslrt_mpi_check(ctx, MPI_Comm_free(&ctx->watch), "MPI_Comm_free");
  free(ctx->groups);
  free(ctx->scratch);
  free(ctx->statuses); /* health.c's */
  ctx->statuses = NULL, ctx->nstatuses = 0;
  free(ctx->rider);
  ctx->groups = NULL, ctx->scratch = NULL, ctx->rider = NULL;
  ctx->ngroups = 0, ctx->groups_built = 0, ctx->scratch_bytes = 0, ctx->rider_bytes = 0;
}

/* The group with id group, built; dies naming call otherwise. */
static gslrt_group *group_of(gslrt_ctx *ctx, int32_t group, const char *call) {
  if (!ctx->groups_built || group < 0 || group >= ctx->ngroups)
    gslrt_fatal(ctx, "%s: no group %d (%d declared%s)", call, (int)group, ctx->ngroups,
                ctx->groups_built ? "" : ", not yet built");
  return &ctx->groups[group];
}

int64_t gslrt_group_index(gslrt_ctx *ctx, int32_t group) {
  return group_of(ctx, group, "gslrt_group_index")->index;
}

int64_t gslrt_group_size(gslrt_ctx *ctx, int32_t group) {
  return group_of(ctx, group, "gslrt_group_size")->size;
}

void gslrt_pack_blocks(void *dst, const void *src, int64_t outer, int64_t g, int64_t d,
                       int64_t inner, int esize) {
  size_t run = (size_t)(d * inner) * (size_t)esize;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < g; j++)
      memcpy((char *)dst + (size_t)(j * outer + o) * run, (const char *)src + (size_t)(o * g + j) * run,
             run);
}

void gslrt_unpack_blocks(void *dst, const void *src, int64_t outer, int64_t g, int64_t d,
                         int64_t inner, int esize) {
  size_t run = (size_t)(d * inner) * (size_t)esize;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < g; j++)
      memcpy((char *)dst + (size_t)(o * g + j) * run, (const char *)src + (size_t)(j * outer + o) * run,
             run);
}

/* Member j's real extent along a dimension of total elements held in tiles
 * of c (gslrt.h): max(0, min(c, total - j * c)). */
static int64_t real_of(int64_t total, int64_t c, int64_t j) {
  int64_t r = total - j * c;
  return r < 0 ? 0 : r > c ? c : r;
}

/* gslrt_pack_blocks for a dimension of n elements cut into g tiles of c
 * (n <= g * c): src = [outer][n][inner] into dst = [g][outer][c][inner],
 * each tile's real elements (real_of) first and zeros after. With widen,
 * src is bf16 and dst f32, each element widened on the way. */
static void pack_padded(void *dst, const void *src, int64_t outer, int64_t g, int64_t c, int64_t n,
                        int64_t inner, int esize, int widen) {
  int ds = widen ? 4 : esize;
  for (int64_t j = 0; j < g; j++) {
    int64_t r = real_of(n, c, j);
    for (int64_t o = 0; o < outer; o++) {
      char *to = (char *)dst + (size_t)((j * outer + o) * c * inner) * (size_t)ds;
      const char *from = (const char *)src + (size_t)((o * n + j * c) * inner) * (size_t)esize;
      if (widen)
        gslrt_bf16_widen_n((float *)to, (const uint16_t *)from, r * inner);
      else if (r > 0)
        memcpy(to, from, (size_t)(r * inner) * (size_t)esize);
      if (r < c)
        memset(to + (size_t)(r * inner) * (size_t)ds, 0, (size_t)((c - r) * inner) * (size_t)ds);
    }
  }
}

/* gslrt_unpack_blocks keeping each tile's real elements: src = [g][outer][c]
 * [inner] into dst = [outer][total][inner] (total <= g * c), tile j giving
 * its first real_of(total, c, j) along the dimension. */
static void unpack_real(void *dst, const void *src, int64_t outer, int64_t g, int64_t c, int64_t total,
                        int64_t inner, int esize) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < g; j++) {
      int64_t r = real_of(total, c, j);
      if (r > 0)
        memcpy((char *)dst + (size_t)((o * total + j * c) * inner) * (size_t)esize,
               (const char *)src + (size_t)((j * outer + o) * c * inner) * (size_t)esize,
               (size_t)(r * inner) * (size_t)esize);
    }
}

/* The MPI type that moves elements of dtype; dies naming call on a bad one. */
static MPI_Datatype mpi_type(gslrt_ctx *ctx, int32_t dtype, const char *call) {
  if (dtype == GSLRT_F32)
    return MPI_FLOAT;
  if (dtype == GSLRT_I32)
    return MPI_INT;
  if (dtype == GSLRT_BF16)
    return MPI_UINT16_T;
  gslrt_fatal(ctx, "%s: bad dtype %d", call, (int)dtype);
}

/* A tensor's (rank, shape) seen around dim as [outer][shape[dim]][inner]. */
typedef struct span {
  int64_t outer; /* elements before dim, as a product of extents */
  int64_t d;     /* the extent of dim */
  int64_t inner; /* elements after dim */
} span;

static span span_of(gslrt_ctx *ctx, const char *call, int32_t rank, const int64_t *shape,
                    int32_t dim) {
  span s = {1, 1, 1};
  if (rank < 1 || rank > GSLRT_MAX_RANK || !shape || dim < 0 || dim >= rank)
    gslrt_fatal(ctx, "%s: bad rank %d or dimension %d", call, (int)rank, (int)dim);
  for (int32_t i = 0; i < rank; i++) {
    if (shape[i] < 0)
      gslrt_fatal(ctx, "%s: negative extent %lld", call, (long long)shape[i]);
    if (i < dim)
      s.outer *= shape[i];
    else if (i > dim)
      s.inner *= shape[i];
  }
  s.d = shape[dim];
  return s;
}

/* At least bytes of scratch space, grown (never shrunk) as needed. */
static void *scratch(gslrt_ctx *ctx, size_t bytes, const char *call) {
  if (bytes > ctx->scratch_bytes) {
    size_t size = (bytes + 63) / 64 * 64;
    free(ctx->scratch);
    ctx->scratch = aligned_alloc(64, size);
    if (!ctx->scratch)
      gslrt_fatal(ctx, "%s: cannot allocate %zu bytes of scratch space", call, size);
    ctx->scratch_bytes = size;
  }
  return ctx->scratch;
}

void gslrt_all_reduce(gslrt_ctx *ctx, int32_t group, int32_t dtype, int32_t op, void *buf,
                      int64_t count) {
  static const char call[] = "gslrt_all_reduce";
  gslrt_group *gr = group_of(ctx, group, call);
  MPI_Datatype type = mpi_type(ctx, dtype, call);
  if (op != GSLRT_SUM && op != GSLRT_MAX)
    gslrt_fatal(ctx, "%s: bad reduction %d", call, (int)op);
  if (count < 0)
    gslrt_fatal(ctx, "%s: negative count %lld", call, (long long)count);
  if (gr->size == 1 || count == 0)
    return;
  gslrt_watch_enter(ctx, gr, "all_reduce");
  void *data = buf;
  if (dtype == GSLRT_BF16) { /* reduced in f32, rounded once */
    if ((uint64_t)count > SIZE_MAX / 4)
      gslrt_fatal(ctx, "%s: %lld elements are too many", call, (long long)count);
    data = scratch(ctx, (size_t)count * 4, call);
    gslrt_bf16_widen_n(data, buf, count);
    type = MPI_FLOAT;
  }
  for (int64_t at = 0; at < count; at += GSLRT_MPI_COUNT_MAX) {
    int64_t n = count - at < GSLRT_MPI_COUNT_MAX ? count - at : GSLRT_MPI_COUNT_MAX;
    MPI_Request req;
    gslrt_mpi_check(ctx, MPI_Iallreduce(MPI_IN_PLACE, (char *)data + 4 * at, (int)n, type,
                                        op == GSLRT_SUM ? MPI_SUM : MPI_MAX, gr->comm, &req),
                    "MPI_Iallreduce");
    gslrt_watch_wait(ctx, 1, &req, "MPI_Iallreduce");
  }
  if (data != buf)
    gslrt_bf16_round_n(buf, data, count);
  gslrt_watch_leave(ctx);
}

#if MPI_VERSION < 4
/* Dies naming call: count elements per member are too many for this MPI. */
static void too_large(gslrt_ctx *ctx, const char *call, int64_t count) __attribute__((noreturn));
static void too_large(gslrt_ctx *ctx, const char *call, int64_t count) {
  gslrt_fatal(ctx, "%s: %lld elements per member are more than one MPI call takes", call,
              (long long)count);
}
#endif

/* Every member's count elements of in into recv, in group order. */
static void gather_blocks(gslrt_ctx *ctx, gslrt_group *gr, MPI_Datatype type, const void *in, void *recv,
                          int64_t count, const char *call) {
  int rc;
  MPI_Request req;
  if (count <= GSLRT_MPI_COUNT_MAX)
    rc = MPI_Iallgather(in, (int)count, type, recv, (int)count, type, gr->comm, &req);
  else
#if MPI_VERSION >= 4
    rc = MPI_Iallgather_c(in, count, type, recv, count, type, gr->comm, &req);
#else
    too_large(ctx, call, count);
#endif
  gslrt_mpi_check(ctx, rc, "MPI_Iallgather");
  gslrt_watch_wait(ctx, 1, &req, "MPI_Iallgather");
}

/* The sum over the group of every member's g blocks of count elements
 * (send, or recv itself for MPI_IN_PLACE), this member's block into recv. */
static void reduce_blocks(gslrt_ctx *ctx, gslrt_group *gr, MPI_Datatype type, const void *send, void *recv,
                          int64_t count, const char *call) {
  int rc;
  MPI_Request req;
  if (count <= GSLRT_MPI_COUNT_MAX)
    rc = MPI_Ireduce_scatter_block(send, recv, (int)count, type, MPI_SUM, gr->comm, &req);
  else
#if MPI_VERSION >= 4
    rc = MPI_Ireduce_scatter_block_c(send, recv, count, type, MPI_SUM, gr->comm, &req);
#else
    too_large(ctx, call, count);
#endif
  gslrt_mpi_check(ctx, rc, "MPI_Ireduce_scatter_block");
  gslrt_watch_wait(ctx, 1, &req, "MPI_Ireduce_scatter_block");
}

/* all_gather's uneven case (total < g * c, gslrt.h): with outer 1 each
 * member's real elements are one run, gathered by MPI_Allgatherv straight
 * into out at j * c; otherwise the padded tiles are gathered whole into
 * scratch, as in the even case, and each one's real elements unpacked. */
static void all_gather_uneven(gslrt_ctx *ctx, gslrt_group *gr, MPI_Datatype type, int es, const void *in,
                              void *out, span s, int64_t total, const char *call) {
  int64_t g = gr->size, count = s.outer * s.d * s.inner;
  int rc;
  MPI_Request req;
  if (g == 1) { /* the first total of the tile's c along dim */
    for (int64_t o = 0; o < s.outer; o++)
      memmove((char *)out + (size_t)(o * total * s.inner) * es, (const char *)in + (size_t)(o * s.d * s.inner) * es,
              (size_t)(total * s.inner) * es);
    return;
  }
  if (s.outer != 1) {
    void *recv = scratch(ctx, (size_t)(g * count) * es, call);
    gather_blocks(ctx, gr, type, in, recv, count, call);
    unpack_real(out, recv, s.outer, g, s.d, total, s.inner, es);
    return;
  }
  int64_t mine = real_of(total, s.d, gr->index) * s.inner;
  if (total * s.inner <= GSLRT_MPI_COUNT_MAX) {
    int *counts = malloc(sizeof *counts * (size_t)g), *displs = malloc(sizeof *displs * (size_t)g);
    if (!counts || !displs)
      gslrt_fatal(ctx, "%s: out of memory", call);
    for (int64_t j = 0; j < g; j++) {
      counts[j] = (int)(real_of(total, s.d, j) * s.inner);
      displs[j] = counts[j] ? (int)(j * s.d * s.inner) : 0;
    }
    rc = MPI_Iallgatherv(in, (int)mine, type, out, counts, displs, type, gr->comm, &req);
    if (rc == MPI_SUCCESS)
      gslrt_watch_wait(ctx, 1, &req, "MPI_Iallgatherv");
    free(counts), free(displs);
  } else {
#if MPI_VERSION >= 4
    MPI_Count *counts = malloc(sizeof *counts * (size_t)g);
    MPI_Aint *displs = malloc(sizeof *displs * (size_t)g);
    if (!counts || !displs)
      gslrt_fatal(ctx, "%s: out of memory", call);
    for (int64_t j = 0; j < g; j++) {
      counts[j] = real_of(total, s.d, j) * s.inner;
      displs[j] = counts[j] ? (MPI_Aint)(j * s.d * s.inner) : 0;
    }
    rc = MPI_Iallgatherv_c(in, mine, type, out, counts, displs, type, gr->comm, &req);
    if (rc == MPI_SUCCESS)
      gslrt_watch_wait(ctx, 1, &req, "MPI_Iallgatherv");
    free(counts), free(displs);
#else
    too_large(ctx, call, total * s.inner);
#endif
  }
  gslrt_mpi_check(ctx, rc, "MPI_Iallgatherv");
}

static void all_gather_body(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                            int32_t rank, const int64_t *in_shape, int32_t dim, int64_t total) {
  static const char call[] = "gslrt_all_gather";
  gslrt_group *gr = group_of(ctx, group, call);
  MPI_Datatype type = mpi_type(ctx, dtype, call);
  span s = span_of(ctx, call, rank, in_shape, dim);
  int64_t count = s.outer * s.d * s.inner, g = gr->size;
  int es = gslrt_dtype_size(dtype);
  if (total < 0 || total > g * s.d)
    gslrt_fatal(ctx, "%s: dimension %d gathers %lld elements, but %lld members hold at most %lld each",
                call, (int)dim, (long long)total, (long long)g, (long long)s.d);
  if (count == 0 || total == 0)
    return;
  if (total != g * s.d) {
    all_gather_uneven(ctx, gr, type, es, in, out, s, total, call);
    return;
  }
  if (g == 1) {
    if (out != in)
      memmove(out, in, (size_t)count * es);
    return;
  }
  void *recv = s.outer == 1 ? out : scratch(ctx, (size_t)(g * count) * es, call);
  gather_blocks(ctx, gr, type, in, recv, count, call);
  if (recv != out)
    gslrt_unpack_blocks(out, recv, s.outer, g, s.d, s.inner, es);
}

/* The public collectives below time and watch the body of each (health.c)
 * when the group has several members: the call's whole time, packing
 * and unpacking included, is the rank's time in collectives. */
void gslrt_all_gather(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                      int32_t rank, const int64_t *in_shape, int32_t dim, int64_t total) {
  gslrt_group *gr = group_of(ctx, group, "gslrt_all_gather");
  if (gr->size > 1)
    gslrt_watch_enter(ctx, gr, "all_gather");
  all_gather_body(ctx, group, dtype, in, out, rank, in_shape, dim, total);
  if (gr->size > 1)
    gslrt_watch_leave(ctx);
}

static void reduce_scatter_body(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                                int32_t rank, const int64_t *in_shape, int32_t dim) {
  static const char call[] = "gslrt_reduce_scatter";
  gslrt_group *gr = group_of(ctx, group, call);
  MPI_Datatype type = mpi_type(ctx, dtype, call);
  span s = span_of(ctx, call, rank, in_shape, dim);
  int64_t g = gr->size, c = (s.d + g - 1) / g; /* the tile's extent along dim */
  int64_t count = s.outer * c * s.inner;
  int es = gslrt_dtype_size(dtype);
  if (count == 0)
    return;
  if (s.d % g != 0) {
    /* uneven (gslrt.h): the input padded to g tiles of c, zeros after each
     * tile's real elements, in [g][outer][c][inner] (widened for bf16),
     * then the even call on that; the padding sums to zero */
    int wide = dtype == GSLRT_BF16;
    void *packed = scratch(ctx, (size_t)(g * count) * (wide ? 4 : es), call);
    pack_padded(packed, in, s.outer, g, c, s.d, s.inner, es, wide);
    if (wide)
      reduce_blocks(ctx, gr, MPI_FLOAT, MPI_IN_PLACE, packed, count, call);
    else
      reduce_blocks(ctx, gr, type, packed, out, count, call);
    if (wide)
      gslrt_bf16_round_n(out, packed, count);
    return;
  }
  if (g == 1) {
    if (out != in)
      memmove(out, in, (size_t)count * es);
    return;
  }
  const void *send = in;
  void *recv = out;
  if (dtype == GSLRT_BF16) {
    /* widened while packed into [g][block] f32, reduced in place there;
     * this member's block ends at the start, rounded into out */
    float *wide = scratch(ctx, (size_t)(g * count) * 4, call);
    int64_t run = (s.d / g) * s.inner;
    for (int64_t o = 0; o < s.outer; o++)
      for (int64_t j = 0; j < g; j++)
        gslrt_bf16_widen_n(wide + (j * s.outer + o) * run, (const uint16_t *)in + (o * g + j) * run, run);
    send = MPI_IN_PLACE, recv = wide, type = MPI_FLOAT;
  } else if (s.outer != 1) {
    void *packed = scratch(ctx, (size_t)(g * count) * es, call);
    gslrt_pack_blocks(packed, in, s.outer, g, s.d / g, s.inner, es);
    send = packed;
  }
  reduce_blocks(ctx, gr, type, send, recv, count, call);
  if (recv != out)
    gslrt_bf16_round_n(out, recv, count);
}

void gslrt_reduce_scatter(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                          int32_t rank, const int64_t *in_shape, int32_t dim) {
  gslrt_group *gr = group_of(ctx, group, "gslrt_reduce_scatter");
  if (gr->size > 1)
    gslrt_watch_enter(ctx, gr, "reduce_scatter");
  reduce_scatter_body(ctx, group, dtype, in, out, rank, in_shape, dim);
  if (gr->size > 1)
    gslrt_watch_leave(ctx);
}

/* The all-to-all in place: the block for (and from) each member is a run
 * of count elements in block order, stored in chunks of ls contiguous
 * elements on the sending side (every g * ls) and of lr on the receiving
 * side (every g * lr); both are suffix products of the block's shape, so
 * min(ls, lr) divides both and each such chunk is contiguous on both sides.
 * Each chunk is one message, straight from in to out: no packing, and MPI
 * moves every byte once. Returns false (nothing done) when the chunks are
 * too small or too many for messages to beat packing. */
static bool all_to_all_direct(gslrt_ctx *ctx, gslrt_group *gr, MPI_Datatype type, int es, const char *in,
                              char *out, int64_t count, int64_t ls, int64_t lr) {
  int64_t g = gr->size, len = ls < lr ? ls : lr, chunks = count / len;
  if (g < 2 || len * es < GSLRT_A2A_MIN_CHUNK || chunks > GSLRT_A2A_MAX_CHUNKS || len > INT_MAX)
    return false;
  size_t n = (size_t)(2 * (g - 1) * chunks);
  MPI_Request *req = malloc(sizeof *req * n);
  if (!req)
    return false;
  int64_t me = gr->index, nreq = 0;
  int rc = MPI_SUCCESS;
  for (int64_t k = 0; k < count && rc == MPI_SUCCESS; k += len) {
    for (int64_t j = 0; j < g && rc == MPI_SUCCESS; j++) {
      const char *src = in + es * ((k / ls) * g * ls + j * ls + k % ls); /* my chunk k for member j */
      char *dst = out + es * ((k / lr) * g * lr + j * lr + k % lr);      /* member j's chunk k for me */
      if (j == me) {
        memcpy(dst, src, (size_t)len * es);
        continue;
      }
      rc = MPI_Irecv(dst, (int)len, type, (int)j, (int)(k / len), gr->comm, &req[nreq++]);
      if (rc == MPI_SUCCESS)
        rc = MPI_Isend(src, (int)len, type, (int)j, (int)(k / len), gr->comm, &req[nreq++]);
    }
  }
  gslrt_mpi_check(ctx, rc, "MPI_Isend/MPI_Irecv (all-to-all)");
  gslrt_watch_wait(ctx, (int)nreq, req, "MPI_Isend/MPI_Irecv (all-to-all)");
  free(req);
  return true;
}

/* An all_to_all's input seen as g blocks along dim (s) and one received
 * block seen along dim2 (r); dies naming call on a bad shape, dims or
 * total2. */
typedef struct a2a_layout {
  span s;         /* the input around dim (s.d: n, whole) */
  int64_t c;      /* a block's extent along dim: ceil(n / g) */
  span r;         /* one block (dim = c) around dim2 (r.d: c2) */
  int64_t count;  /* elements of one block */
  int64_t total2; /* the output's extent along dim2 (<= g * c2) */
  int even;       /* n % g == 0 and total2 == g * c2: no padding on either side */
} a2a_layout;

static a2a_layout a2a_layout_of(gslrt_ctx *ctx, const char *call, int64_t g, int32_t rank,
                                const int64_t *in_shape, int32_t dim, int32_t dim2, int64_t total2) {
  a2a_layout l;
  l.s = span_of(ctx, call, rank, in_shape, dim);
  if (dim2 < 0 || dim2 >= rank)
    gslrt_fatal(ctx, "%s: bad dimension %d", call, (int)dim2);
  l.c = (l.s.d + g - 1) / g;
  l.count = l.s.outer * l.c * l.s.inner;
  int64_t block[GSLRT_MAX_RANK]; /* the shape of one block */
  memcpy(block, in_shape, (size_t)rank * sizeof *block);
  block[dim] = l.c;
  l.r = span_of(ctx, call, rank, block, dim2);
  if (total2 < 0 || total2 > g * l.r.d)
    gslrt_fatal(ctx, "%s: dimension %d joins %lld elements, but %lld members send at most %lld each",
                call, (int)dim2, (long long)total2, (long long)g, (long long)l.r.d);
  l.total2 = total2;
  l.even = l.s.d % g == 0 && total2 == g * l.r.d;
  return l;
}

static void all_to_all_body(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                            int32_t rank, const int64_t *in_shape, int32_t dim, int32_t dim2, int64_t total2) {
  static const char call[] = "gslrt_all_to_all";
  gslrt_group *gr = group_of(ctx, group, call);
  MPI_Datatype type = mpi_type(ctx, dtype, call);
  int64_t g = gr->size;
  a2a_layout l = a2a_layout_of(ctx, call, g, rank, in_shape, dim, dim2, total2);
  span s = l.s, r = l.r;
  int64_t count = l.count; /* elements of one block */
  int es = gslrt_dtype_size(dtype);
  if (count == 0 || total2 == 0)
    return;
  if (g == 1) {
    if (l.even && out != in)
      memmove(out, in, (size_t)count * es);
    else if (!l.even) /* the first total2 of the block's c2 along dim2 */
      for (int64_t o = 0; o < r.outer; o++)
        memmove((char *)out + (size_t)(o * total2 * r.inner) * es,
                (const char *)in + (size_t)(o * r.d * r.inner) * es, (size_t)(total2 * r.inner) * es);
    return;
  }
  size_t bytes = (size_t)(g * count) * es;
  /* a side goes through scratch when its blocks are not contiguous runs
   * of the caller's buffer: outer != 1, or padding to add or drop */
  int send_staged = s.outer != 1 || s.d % g != 0, recv_staged = r.outer != 1 || total2 != g * r.d;
  int staged = send_staged + recv_staged;
  if (l.even && staged && all_to_all_direct(ctx, gr, type, es, in, out, count, l.c * s.inner, r.d * r.inner))
    return;
  char *space = staged ? scratch(ctx, (size_t)staged * bytes, call) : NULL;
  const void *send = in;
  void *recv = out;
  if (send_staged) {
    pack_padded(space, in, s.outer, g, l.c, s.d, s.inner, es, 0);
    send = space;
    space += bytes;
  }
  if (recv_staged)
    recv = space;
  int rc;
  MPI_Request req;
  if (count <= GSLRT_MPI_COUNT_MAX)
    rc = MPI_Ialltoall(send, (int)count, type, recv, (int)count, type, gr->comm, &req);
  else
#if MPI_VERSION >= 4
    rc = MPI_Ialltoall_c(send, count, type, recv, count, type, gr->comm, &req);
#else
    too_large(ctx, call, count);
#endif
  gslrt_mpi_check(ctx, rc, "MPI_Ialltoall");
  gslrt_watch_wait(ctx, 1, &req, "MPI_Ialltoall");
  if (recv != out)
    unpack_real(out, recv, r.outer, g, r.d, total2, r.inner, es);
}

void gslrt_all_to_all(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                      int32_t rank, const int64_t *in_shape, int32_t dim, int32_t dim2, int64_t total2) {
  gslrt_group *gr = group_of(ctx, group, "gslrt_all_to_all");
  if (gr->size > 1)
    gslrt_watch_enter(ctx, gr, "all_to_all");
  all_to_all_body(ctx, group, dtype, in, out, rank, in_shape, dim, dim2, total2);
  if (gr->size > 1)
    gslrt_watch_leave(ctx);
}

/* The rider's messages' tag: the direct all_to_all's chunks take tags
 * below GSLRT_A2A_MAX_CHUNKS, and MPI_Alltoall matches apart from them. */
#define RIDER_TAG (GSLRT_A2A_MAX_CHUNKS + 1)

void gslrt_all_to_all_rider(gslrt_ctx *ctx, int32_t group, int32_t dtype, const void *in, void *out,
                            int32_t rank, const int64_t *in_shape, int32_t dim, int32_t dim2, int64_t total2,
                            int32_t r_dtype, const void *r_in, void *r_out, int32_t r_rank,
                            const int64_t *r_shape, int32_t r_dim, int32_t r_dim2, int64_t r_total2) {
  static const char call[] = "gslrt_all_to_all_rider";
  gslrt_group *gr = group_of(ctx, group, call);
  MPI_Datatype type = mpi_type(ctx, r_dtype, call);
  int64_t g = gr->size, me = gr->index;
  a2a_layout l = a2a_layout_of(ctx, call, g, r_rank, r_shape, r_dim, r_dim2, r_total2);
  int es = gslrt_dtype_size(r_dtype);
  if (g == 1 || l.count == 0 || r_total2 == 0) {
    gslrt_all_to_all(ctx, group, r_dtype, r_in, r_out, r_rank, r_shape, r_dim, r_dim2, r_total2);
    gslrt_all_to_all(ctx, group, dtype, in, out, rank, in_shape, dim, dim2, total2);
    return;
  }
  if (l.count > INT_MAX)
    gslrt_fatal(ctx, "%s: a rider of %lld elements a member is too large to ride", call,
                (long long)l.count);
  size_t bytes = (size_t)(g * l.count) * (size_t)es;
  if (2 * bytes > ctx->rider_bytes) {
    free(ctx->rider);
    ctx->rider = malloc(2 * bytes);
    if (!ctx->rider)
      gslrt_fatal(ctx, "%s: cannot allocate %zu bytes for a rider", call, 2 * bytes);
    ctx->rider_bytes = 2 * bytes;
  }
  gslrt_watch_enter(ctx, gr, "all_to_all");
  char *send = ctx->rider, *recv = send + bytes;
  pack_padded(send, r_in, l.s.outer, g, l.c, l.s.d, l.s.inner, es, 0);
  MPI_Request *req = malloc(sizeof *req * (size_t)(2 * g));
  if (!req)
    gslrt_fatal(ctx, "%s: out of memory", call);
  int rc = MPI_SUCCESS, nreq = 0;
  size_t run = (size_t)l.count * (size_t)es;
  for (int64_t j = 0; j < g && rc == MPI_SUCCESS; j++) {
    if (j == me) {
      memcpy(recv + j * run, send + j * run, run);
      continue;
    }
    rc = MPI_Irecv(recv + j * run, (int)l.count, type, (int)j, RIDER_TAG, gr->comm, &req[nreq++]);
    if (rc == MPI_SUCCESS)
      rc = MPI_Isend(send + j * run, (int)l.count, type, (int)j, RIDER_TAG, gr->comm, &req[nreq++]);
  }
  gslrt_mpi_check(ctx, rc, "MPI_Isend/MPI_Irecv (all-to-all rider)");
  all_to_all_body(ctx, group, dtype, in, out, rank, in_shape, dim, dim2, total2);
  gslrt_watch_wait(ctx, nreq, req, "MPI_Isend/MPI_Irecv (all-to-all rider)");
  free(req);
  unpack_real(r_out, recv, l.r.outer, g, l.r.d, r_total2, l.r.inner, es);
  gslrt_watch_leave(ctx);
}

void gslrt_collective_permute(gslrt_ctx *ctx, int32_t from, int32_t to, int32_t dtype, const void *in,
                              void *out, int64_t count) {
  static const char call[] = "gslrt_collective_permute";
  gslrt_group *gf = group_of(ctx, from, call), *gt = group_of(ctx, to, call);
  MPI_Datatype type = mpi_type(ctx, dtype, call);
  uint32_t mf = 0, mt = 0;
  for (int32_t i = 0; i < gf->n; i++)
    mf |= 1u << gf->axes[i];
  for (int32_t i = 0; i < gt->n; i++)
    mt |= 1u << gt->axes[i];
  if (mf != mt || count < 0)
    gslrt_fatal(ctx, "%s: groups %d and %d are not the same axes", call, (int)from, (int)to);
  if (gf->size == 1 || count == 0) {
    if (out != in && count > 0)
      memmove(out, in, (size_t)count * (size_t)gslrt_dtype_size(dtype));
    return;
  }
  /* receive the block numbered (in from's order) by this device's index in
   * to's order; send this device's block to the device whose index in to's
   * order is this device's index in from's order */
  int src = (int)gt->index;
  int64_t coord[GSLRT_MAX_AXES] = {0}, t = gf->index;
  for (int32_t j = gt->n - 1; j >= 0; j--) {
    int32_t ax = gt->axes[j];
    coord[ax] = t % ctx->axis_size[ax];
    t /= ctx->axis_size[ax];
  }
  int64_t dst = 0;
  for (int32_t j = 0; j < gf->n; j++)
    dst = dst * ctx->axis_size[gf->axes[j]] + coord[gf->axes[j]];
  int rc;
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  gslrt_watch_enter(ctx, gf, "collective_permute");
  if (count <= GSLRT_MPI_COUNT_MAX) {
    rc = MPI_Irecv(out, (int)count, type, src, 0, gf->comm, &req[0]);
    if (rc == MPI_SUCCESS)
      rc = MPI_Isend(in, (int)count, type, (int)dst, 0, gf->comm, &req[1]);
  } else {
#if MPI_VERSION >= 4
    rc = MPI_Irecv_c(out, count, type, src, 0, gf->comm, &req[0]);
    if (rc == MPI_SUCCESS)
      rc = MPI_Isend_c(in, count, type, (int)dst, 0, gf->comm, &req[1]);
#else
    too_large(ctx, call, count);
#endif
  }
  gslrt_mpi_check(ctx, rc, "MPI_Irecv/MPI_Isend (permute)");
  gslrt_watch_wait(ctx, 2, req, "MPI_Irecv/MPI_Isend (permute)");
  gslrt_watch_leave(ctx);
}
