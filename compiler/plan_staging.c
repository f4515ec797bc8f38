/* plan_staging.c — the runtime's own staging, beside the planned arena:
 * the bytes libgslrt allocates for itself while a step runs, by its rules
 * (gslrt.h, runtime/collectives.c), so that the plan's total is what a
 * device needs.
 *
 * Collective scratch. A collective whose group's blocks are not contiguous
 * (the dims before the one it cuts or joins hold more than one element)
 * packs or unpacks them through scratch space; a bf16 sum widens
 * to f32 there; uneven tiles (a dim its group does not divide) are padded
 * to whole tiles there; an all-to-all whose contiguous runs are long and
 * few enough goes straight between the buffers, without scratch. The
 * runtime keeps one scratch space, grown to the largest need (scratch_of);
 * a rider (combine.c) packs its blocks into space of its own beside it,
 * the largest rider's added.
 *
 * Gathering an output. On several devices, --output has rank 0 hold every
 * device's tile of an output and the output placed whole after the steps:
 * the largest output's bytes, counted once (Plan.gather_output names it). */
#include "gslc.h"
#include "gslrt.h" /* the runtime's all-to-all chunk rule */

/* devices in v's group */
static int64_t group_size(const Program *p, const Value *v) {
  int64_t n = 1;
  for (int i = 0; i < v->ngroup; i++)
    n *= p->mesh.size[v->group[i]];
  return n;
}

/* elements before dimension dim */
static int64_t outer(const Shape *s, int dim) {
  int64_t n = 1;
  for (int d = 0; d < dim; d++)
    n *= s->d[d];
  return n;
}

/* the bytes of g blocks of an all_to_all's or reduce_scatter's input a
 * cut along dim into g tiles of ceil(n / g) (the input padded to g tiles) */
static int64_t padded_in(const Value *a, int dim, int64_t g) {
  Shape block = a->shape;
  block.d[dim] = (block.d[dim] + g - 1) / g;
  return g * dtype_size(a->dtype) * shape_elems(&block);
}

/* The scratch space runtime/collectives.c takes for v: where the blocks
 * of a group are not contiguous (a split dimension after the first), they
 * are packed or unpacked through it. */
static int64_t scratch_of(const Program *p, const Value *v) {
  const Value *a = v->nargs ? v->args[0] : NULL;
  int64_t esize = a ? dtype_size(a->dtype) : 4, g = group_size(p, v), in = a ? esize * shape_elems(&a->shape) : 0;
  if (g == 1 || in == 0)
    return 0;
  /* uneven tiles (gslrt.h): a dim a reduce-scatter or all-to-all cuts
   * that its group does not divide, or a joined dim short of g tiles (an
   * all-gather's scratch does not depend on them) */
  bool uneven = (v->op == OP_REDUCE_SCATTER || v->op == OP_ALL_TO_ALL) &&
                (a->shape.d[v->axis] % g || (v->op == OP_ALL_TO_ALL && v->shape.d[v->axis2] != g * a->shape.d[v->axis2]));
  if (v->op == OP_REDUCE_SCATTER && uneven) /* the input padded to g tiles, widened for bf16 */
    return plan_align((esize == 2 ? 2 : 1) * padded_in(a, v->axis, g));
  if (esize == 2 && (v->op == OP_ALL_REDUCE || v->op == OP_REDUCE_SCATTER))
    return plan_align(2 * in); /* bf16 sums: widened to f32 (gslrt.h) */
  switch (v->op) {
  case OP_ALL_GATHER:
    return outer(&a->shape, v->axis) != 1 ? plan_align(g * in) : 0;
  case OP_REDUCE_SCATTER:
    return outer(&a->shape, v->axis) != 1 ? plan_align(in) : 0;
  case OP_ALL_TO_ALL: {
    Shape block = a->shape;
    block.d[v->axis] = (block.d[v->axis] + g - 1) / g;
    if (uneven) {
      int staged = (outer(&a->shape, v->axis) != 1 || a->shape.d[v->axis] % g) +
                   (outer(&block, v->axis2) != 1 || v->shape.d[v->axis2] != g * a->shape.d[v->axis2]);
      return plan_align(staged * padded_in(a, v->axis, g));
    }
    int staged = (outer(&a->shape, v->axis) != 1) + (outer(&block, v->axis2) != 1);
    /* runs contiguous on both sides, large and few enough, go straight
     * between the buffers, without scratch (gslrt.h) */
    int64_t ls = 1, lr = 1;
    for (int i = v->axis; i < block.rank; i++)
      ls *= block.d[i];
    for (int i = v->axis2; i < block.rank; i++)
      lr *= block.d[i];
    int64_t len = ls < lr ? ls : lr, count = shape_elems(&block);
    if (staged && esize * len >= GSLRT_A2A_MIN_CHUNK && count / len <= GSLRT_A2A_MAX_CHUNKS)
      return 0;
    return plan_align(staged * in);
  }
  default:
    return 0;
  }
}

void plan_staging(Plan *pl, const Program *p) {
  pl->gather_output = -1;
  int64_t devices = 1;
  for (int i = 0; i < p->mesh.naxes; i++)
    devices *= p->mesh.size[i];
  /* --output on several devices: rank 0 holds every device's tile of an
   * output and the output placed whole */
  for (int i = 0; i < p->noutputs; i++) {
    const Value *v = p->outputs[i].value;
    if (p->outputs[i].kind != OUT_VALUE)
      continue;
    int64_t local = plan_value_bytes(v), global = dtype_size(v->dtype) * shape_elems(p->spmd ? &v->gshape : &v->shape);
    if (devices > 1 && devices * local + global > pl->gather_bytes) {
      pl->gather_bytes = devices * local + global;
      pl->gather_output = i;
    }
  }
  /* a rider packs its blocks into space of its own beside the scratch
   * space its carrier takes (gslrt.h) */
  int64_t rider = 0;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    int64_t s = v->carrier ? 0 : scratch_of(p, v);
    if (s > pl->scratch_bytes)
      pl->scratch_bytes = s;
    int64_t rb = v->carrier ? plan_align(2 * padded_in(v->args[0], v->axis, group_size(p, v))) : 0;
    if (v->carrier && group_size(p, v) > 1 && rb > rider)
      rider = rb;
  }
  pl->scratch_bytes += rider;
}
