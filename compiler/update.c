/* update.c — where each trained param's optimizer update runs: whole, or
 * sharded over the data-parallel axes as ZeRO stage 1 does (Rajbhandari et
 * al. 2020; GSPMD's weight-update sharding, Xu et al. 2021 section 3.4).
 *
 * After propagation, a param that is whole over some mesh axes along which
 * its gradient is a partial sum (the data-parallel axes) gets, by default,
 * one all-reduce of its gradient and a full copy of its optimizer states
 * and update on every device. The sharded alternative cuts one of the
 * param's whole dims over those axes for the update alone: the gradient
 * is reduce-scattered instead, each device keeps 1/n of every state and
 * computes 1/n of the update, and the new param is all-gathered. Nothing
 * but sharding changes: the update's values (the optimizer's, of the
 * param's shape) and the state tensors take the cut, and the partitioner
 * finds the reduce-scatter (the gradient's partial sum into the cut), the
 * local slice of the param (free) and the all-gather (the update back to
 * the param's sharding).
 *
 * The choice is by the partitioner's byte cost (sharding.c): the sharded
 * update is taken when it moves no more bytes than the all-reduce (with
 * ring collectives the two tie: a reduce-scatter and an all-gather are an
 * all-reduce), and the param holds at least UPDATE_MIN_BYTES per device:
 * below that, the second collective's latency costs more than the few
 * bytes of state it saves. Each decision is written into the param's
 * Tensor.update_note for --explain.
 *
 * Which axes a gradient is partial over is the sharding rules' reading
 * (rule_partials), the one the partitioner builds by: a contraction or
 * sum over a cut dim leaves a partial sum over its axes, and the ops its
 * rule calls linear pass one through (a concat of a stacked param's
 * layers, a product with a whole value, a sharding annotation). A dim is
 * cut only where the gradient's op resolves that sum into the cut
 * (rule_resolved_whole): not a concat's axis, whose operands would be
 * summed whole and the result sliced, which the cost above does not
 * price. The driver runs this pass after propagation. */
#include <stdlib.h>

#include "gslc.h"

#define UPDATE_MIN_BYTES 65536 /* per device: a smaller param keeps its one all-reduce */

static const char *axes_str(Arena *a, const Program *p, uint32_t axes) {
  const char *s = "";
  for (int i = 0; i < p->mesh.naxes; i++)
    if (axes & (1u << i))
      s = arena_printf(a, "%s%s%s", s, *s ? ", " : "", p->mesh.name[i]);
  return arena_printf(a, "(%s)", s);
}

/* Gives every value of param ti's update (the optimizer's values of its
 * shape, back from the update roots of it and its states) and its state
 * tensors the sharding sh; the gradient takes it too (shard_updates), and
 * so does every elementwise value of the update of its shape that reads
 * the gradient, among them the squares of the gradient norm, which reach
 * no update root through values of its shape: cut, they are summed where
 * they lie and the sum all-reduced, where whole they would gather the
 * gradient. */
static void shard_update(Program *p, int ti, const Sharding *sh) {
  const Tensor *t = &p->tensors[ti];
  bool *in = xcalloc((size_t)p->nvalues + 1, 1);
  for (int i = 0; i < p->nvalues; i++) {
    Value *v = p->values[i];
    bool reads = false;
    for (int k = 0; k < v->nargs; k++)
      reads |= v->args[k] == t->grad;
    if (reads && v->pass == PASS_UPDATE && ir_op(v->op)->cls == OC_ELEMENTWISE && shape_eq(&v->shape, &t->shape)) {
      v->sh = *sh;
      v->sh_origin = SO_UPDATE;
      v->sh_from = t->value;
    }
  }
  for (int i = 0; i < p->noutputs; i++) {
    const Output *o = &p->outputs[i];
    if (o->kind == OUT_UPDATE &&
        (o->tensor == ti || (p->tensors[o->tensor].kind == TK_STATE && p->tensors[o->tensor].state_of == ti)))
      in[o->value->id] = true;
  }
  for (int i = p->nvalues - 1; i >= 0; i--) {
    Value *v = p->values[i];
    if (!in[i] || v->pass != PASS_UPDATE || !shape_eq(&v->shape, &t->shape)) {
      in[i] = false;
      continue;
    }
    v->sh = *sh;
    v->sh_origin = SO_UPDATE;
    v->sh_from = t->value;
    if (v->op == OP_PARAM)
      p->tensors[v->tensor].sh = *sh;
    for (int k = 0; k < v->nargs; k++)
      in[v->args[k]->id] = true;
  }
  free(in);
}

void shard_updates(Program *p) {
  if (!p->mesh.naxes)
    return;
  RulePartials pp = rule_partials(p);
  for (int ti = 0; ti < p->ntensors; ti++) {
    Tensor *t = &p->tensors[ti];
    if (t->kind != TK_PARAM || !t->grad)
      continue;
    const Value *pv = t->value, *g = t->grad;
    int rank = t->shape.rank;
    uint32_t whole = ~shard_all_axes(&pv->sh, rank) & ((1u << p->mesh.naxes) - 1);
    uint32_t z = pp.made[g->id] & whole;
    Arena *a = p->arena;
    if (!z) {
      t->update_note = "whole: its gradient is no partial sum over an axis it is whole on";
      continue;
    }
    uint8_t axes[GSL_MAX_AXES];
    int nz = 0;
    for (int i = 0; i < p->mesh.naxes; i++)
      if (z & (1u << i))
        axes[nz++] = (uint8_t)i;
    int64_t n = shard_group_size(p, axes, nz);
    /* the cut: the dim, of those the devices of z divide (after its own
     * cuts) and the gradient's op resolves its sum into (not a concat's
     * axis: its operands would be summed whole, then sliced), whose
     * sharded update moves the fewest bytes */
    Sharding gs = g->sh, cut = pv->sh;
    gs.partial = z;
    int64_t plain = shard_reshard_bytes(p, &t->shape, t->dtype, &gs, &pv->sh), sharded = -1;
    int dim = -1, unresolved = 0;
    for (int d = 0; d < rank; d++) {
      if (t->shape.d[d] % (shard_shards(p, &pv->sh, d) * n) != 0)
        continue;
      Sharding c = pv->sh;
      for (int k = 0; k < nz; k++)
        c.axes[d][c.naxes[d]++] = axes[k];
      if (rule_resolved_whole(p, g, &c, &pp) & z) {
        unresolved++;
        continue;
      }
      int64_t b = shard_reshard_bytes(p, &t->shape, t->dtype, &gs, &c) +
                  shard_reshard_bytes(p, &t->shape, t->dtype, &c, &pv->sh);
      if (dim < 0 || b < sharded) {
        dim = d;
        sharded = b;
        cut = c;
      }
    }
    if (dim < 0) {
      if (unresolved)
        t->update_note = arena_printf(a,
                                      "whole: its gradient's partial sums over %s are summed whole before any "
                                      "dimension the %lld devices divide would be cut; one all-reduce",
                                      axes_str(a, p, z), (long long)n);
      else
        t->update_note = arena_printf(a, "whole: no dimension divides by the %lld devices of %s; one all-reduce",
                                      (long long)n, axes_str(a, p, z));
      continue;
    }
    int64_t local = 4 * shape_elems(&t->shape);
    for (int d = 0; d < rank; d++)
      local /= shard_shards(p, &pv->sh, d);
    if (sharded > plain || local < UPDATE_MIN_BYTES) {
      t->update_note = arena_printf(
          a, "whole: %s (a sharded update over %s would move %lld bytes, the all-reduce moves %lld)",
          sharded > plain ? "it moves fewer bytes"
                          : arena_printf(a, "%lld bytes per device, below %d", (long long)local, UPDATE_MIN_BYTES),
          axes_str(a, p, z), (long long)sharded, (long long)plain);
      continue;
    }
    shard_update(p, ti, &cut);
    t->grad->sh = cut; /* its partial sum resolved straight into the cut: a reduce-scatter */
    t->grad->sh_origin = SO_UPDATE;
    t->grad->sh_from = pv;
    t->update_note = arena_printf(
        a, "sharded over %s on dim %d (ZeRO-1): the gradient reduce-scattered, states and update 1/%lld per "
           "device, the new param all-gathered; %lld bytes, the all-reduce's %lld",
        axes_str(a, p, z), dim, (long long)n, (long long)sharded, (long long)plain);
  }
  rule_partials_free(&pp);
}
