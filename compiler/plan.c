/* plan.c — buffer planning, the phase between partitioning and codegen:
 * which values get a buffer, whose buffer each value reads and writes, and
 * how long each buffer lives. Two files below it finish the plan: the
 * allocator places the buffers in one arena, reusing dead buffers' space
 * (plan_arena.c), and the runtime's own staging beside the arena is sized
 * by its rules (plan_staging.c). stats.c tells the result (--stats).
 *
 * Buffers. A value gets a buffer ("is materialized") when it is a param or
 * input, an output, is read more than once, or is an op that needs a whole
 * buffer (ops.def's OF_BUFFER: einsum, reduce, cumsum, gather, concat, rng,
 * collectives); operands of einsum, gather, cumsum and of the collectives
 * other than all_reduce are materialized too. Reshape and a materialized
 * annotate are aliases (OF_ALIAS): their operand's buffer under a new shape
 * (an output's own copy where that buffer is a param's, which the update
 * overwrites); a reshape that only adds or drops dims of size 1 (a layer's
 * gradient as its slice of a stacked one) is an index map instead, fused
 * into its user when it has no buffer. A cast of a buffer is inlined into
 * each of its users, as an index map of one is.
 * An all_reduce runs in place on its operand's buffer when nothing else
 * reads that buffer. Every other value is inlined into its one user's loop;
 * constants, iotas, and index maps (OF_INDEX_MAP) of buffers, are cheap
 * enough to inline into each of several users (Plan.inline_each_use). A
 * chain of more than PLAN_MAX_FUSED inlined ops gets a buffer every
 * PLAN_MAX_FUSED ops, so that codegen's recursion over a fused expression
 * stays shallow on any program (a chain of 9000 additions is legal) and no
 * loop body grows without bound. How often each value is read is ir.c's
 * count (ir_uses). An einsum lowered to a GEMM may copy an operand or its
 * result through temporaries: the lowering is lower.c's (lower_gemm_plan),
 * which codegen builds, and the plan places the temporaries it names.
 * Whether a reshape is an index map is lower.c's too (lower_unit_reshape):
 * the plan reads what codegen reads and never calls into codegen.
 *
 * Loops. Elementwise values of one shape with buffers, where each is read
 * by later ones of them element for element, share one loop nest at the
 * step of the last (multi-output fusion, plan_loops): an optimizer's new
 * param and new states from one read of the param, its gradient and its
 * states; a value and its cast to bf16 in one pass. A value of such a
 * loop that no one reads past it is held in registers, without a buffer.
 *
 * Lifetimes. Steps are value ids: codegen emits each value's code in
 * program order, a loop's at the step of its last value. A buffer is live
 * from the step of the code that writes it (its root's) to the last step
 * that reads it. A value inlined into its users
 * is evaluated at each user's step (a chain of inlined values at the step
 * of the buffer it ends in), and reads the buffers of its operands there;
 * readers of an alias or of an in-place all_reduce read the root's buffer.
 * Outputs live to the end (they are written out after the last step); an
 * einsum's temporaries live only at its own step. Params and inputs keep
 * the runtime's storage and are not planned; so does an optimizer's update
 * written straight into its param or state (see plan_inplace), else copied
 * in at the step's end (codegen).
 *
 * Totals. Params', optimizer states', inputs' and outputs' local tiles are
 * summed here; the arena's size comes from the allocator, the runtime's
 * staging from its rules, and plan_total adds them up: the bytes a device
 * needs, which --mem-budget bounds. */
#include <stdlib.h>

#include "gslc.h"

#define PLAN_MAX_FUSED 64 /* most ops fused into one loop body's expression */
#define PLAN_MAX_LOOP 8   /* most values one loop nest computes (plan_loops) */

static bool in_arena(const Value *v) { return v->op != OP_PARAM && v->op != OP_INPUT; }

/* ---- which values get buffers --------------------------------------------- */

static void decide_buffers(Plan *pl, const Program *p) {
  int n = p->nvalues;
  IrUses uses = ir_uses(p);
  const int *output = uses.outputs; /* per value: the outputs naming it */
  int *depth = xcalloc((size_t)(n > 0 ? n : 1), sizeof *depth); /* ops fused into one element's expression */
  bool *guarded = xcalloc((size_t)(n > 0 ? n : 1), sizeof *guarded); /* read by a local slice past its end */
  for (int i = 0; i < n; i++)
    if (shard_slice_past(p, p->values[i]))
      guarded[p->values[i]->args[0]->id] = true;
  for (int i = 0; i < n; i++) {
    const Value *v = p->values[i];
    const Value *a = v->nargs ? v->args[0] : NULL;
    unsigned fl = ir_op(v->op)->flags;
    if (v->op == OP_RESHAPE && lower_unit_reshape(v)) /* an index map: the elements stay where they are */
      fl = (fl & ~(unsigned)OF_BUFFER) | OF_INDEX_MAP;
    /* a cast of a buffer (bf16 widened, or rounded, and widened back) is a
     * few operations on each load: read in each user's loop, not a pass */
    pl->inline_each_use[i] = !output[i] && (v->op == OP_CONST || v->op == OP_IOTA ||
                                            ((fl & OF_INDEX_MAP || v->op == OP_CAST) &&
                                             (pl->mat[a->id] || pl->inline_each_use[a->id])));
    /* a computed scalar gets its 4 bytes: fused into the loop of a tensor it
     * is broadcast over, it would be computed again for every element (an
     * optimizer's pow(b1, t), say) */
    bool scalar = v->nargs && v->op != OP_CONST && !pl->inline_each_use[i] && shape_elems(&v->shape) == 1;
    pl->mat[i] = (fl & OF_BUFFER) || output[i] || (ir_uses_count(&uses, i) > 1 && !pl->inline_each_use[i]) ||
                 scalar || guarded[i];
    if (guarded[i])
      pl->inline_each_use[i] = false;
    if (pl->mat[i])
      continue;
    for (int j = 0; j < v->nargs; j++)
      if (!pl->mat[v->args[j]->id] && depth[v->args[j]->id] > depth[i])
        depth[i] = depth[v->args[j]->id];
    if (++depth[i] >= PLAN_MAX_FUSED) { /* a buffer ends the chain: codegen's fused expressions stay shallow */
      pl->mat[i] = true;
      pl->inline_each_use[i] = false;
      depth[i] = 0;
    }
  }
  free(depth);
  free(guarded);
  for (int i = n - 1; i >= 0; i--) {
    const Value *v = p->values[i];
    if (!pl->mat[i] && ir_uses_count(&uses, i) == 0)
      continue;
    if (v->rows && pl->mat[i]) /* the counts its loop nest reads (slots.c) */
      pl->mat[v->rows->id] = true;
    switch (v->op) {
    case OP_EINSUM:
      for (int j = 0; j < v->nargs; j++) {
        const Value *a = v->args[j];
        if (a->op == OP_TRANSPOSE && !pl->mat[a->id] && ir_uses_count(&uses, a->id) == 1)
          a = a->args[0];
        pl->mat[a->id] = true;
      }
      break;
    case OP_GATHER:
    case OP_SCATTER_ADD:
    case OP_DISPATCH:
    case OP_COMBINE:
      for (int j = 0; j < v->nargs; j++)
        pl->mat[v->args[j]->id] = true;
      break;
    case OP_RESHAPE:
      if (pl->mat[i] || !lower_unit_reshape(v))
        pl->mat[v->args[0]->id] = true;
      break;
    case OP_CUMSUM:
    case OP_ALL_GATHER:
    case OP_REDUCE_SCATTER:
    case OP_ALL_TO_ALL:
    case OP_COLLECTIVE_PERMUTE:
      pl->mat[v->args[0]->id] = true;
      break;
    case OP_ANNOTATE:
      if (pl->mat[i])
        pl->mat[v->args[0]->id] = true;
      break;
    default:
      break;
    }
  }
  for (int i = 0; i < n; i++) {
    const Value *v = p->values[i];
    bool alias = pl->mat[i] && (ir_op(v->op)->flags & OF_ALIAS);
    if (v->op == OP_ALL_REDUCE) {
      const Value *a = v->args[0];
      alias = pl->mat[a->id] && pl->root[a->id] == a->id && ir_uses_count(&uses, a->id) == 1 && in_arena(a);
    }
    pl->root[i] = alias ? pl->root[v->args[0]->id] : i;
    /* an output that would alias a param's or state's storage gets its own
     * buffer: that storage holds the update by the time outputs are written,
     * and an output other than a param is the value as the step computed it */
    if (alias && output[i] && p->values[pl->root[i]]->op == OP_PARAM)
      pl->root[i] = i;
    if (v->op == OP_CAST && pl->mat[i]) /* a twin: the buffer of the same cast before it */
      for (int u = uses.first[v->args[0]->id]; u < uses.first[v->args[0]->id + 1]; u++) {
        const Value *c = p->values[uses.list[2 * u]];
        if (c->id >= i)
          break;
        if (c->op == OP_CAST && c->dtype == v->dtype && pl->mat[c->id] && pl->root[c->id] == c->id) {
          pl->root[i] = c->id;
          break;
        }
      }
  }
  ir_uses_free(&uses);
}

/* Whether v is a twin: a cast whose buffer is that of the same cast of the
 * same operand before it (decide_buffers), which has no code of its own. */
static bool twin(const Plan *pl, const Value *v) {
  return v->op == OP_CAST && pl->mat[v->id] && pl->root[v->id] != v->id;
}

/* ---- an einsum's temporaries ------------------------------------------------ */

static int add_temp(Plan *pl, const Value *v, int64_t bytes) {
  pl->temps = xrealloc(pl->temps, (size_t)(pl->ntemps + 1) * sizeof *pl->temps);
  pl->temps[pl->ntemps] = (PlanTemp){v->id, plan_align(bytes), -1};
  return pl->ntemps++;
}

/* The temporaries einsum v's lowering copies through (lower_gemm_plan, which
 * codegen reads too), one after another from pl->temp[v->id]. */
static void plan_temps(Plan *pl, const Value *v) {
  GemmPlan g;
  lower_gemm_plan(v, pl->mat, &g);
  int64_t bytes[3] = {g.tmp_a, g.tmp_b, g.tmp_c};
  for (int k = 0; k < 3; k++)
    if (bytes[k] >= 0) {
      int t = add_temp(pl, v, bytes[k]);
      if (pl->temp[v->id] < 0)
        pl->temp[v->id] = t;
    }
}

/* ---- loops computing several values ------------------------------------------ */

/* Whether v is computed element for element from its operands' elements at
 * its own index: a value that can share its loop nest with others. */
static bool same_index_op(const Value *v) {
  return v->op == OP_UNARY || v->op == OP_BINARY || v->op == OP_SELECT || v->op == OP_CAST || v->op == OP_DROPOUT ||
         v->op == OP_ANNOTATE;
}

/* Whether t is read anywhere in v's fused expression. */
static bool reads_any(const Plan *pl, const Value *v, const Value *t) {
  for (int k = 0; k < v->nargs; k++)
    if (v->args[k] == t || (!pl->mat[v->args[k]->id] && reads_any(pl, v->args[k], t)))
      return true;
  return false;
}

/* Whether v's fused expression reads t only element for element: through
 * elementwise ops alone, never through a broadcast, transpose or slice. */
static bool reads_in_step(const Plan *pl, const Value *v, const Value *t) {
  for (int k = 0; k < v->nargs; k++) {
    const Value *a = v->args[k];
    if (a == t) {
      if (!same_index_op(v))
        return false;
    } else if (!pl->mat[a->id] && (same_index_op(a) ? !reads_in_step(pl, a, t) : reads_any(pl, a, t))) {
      return false;
    }
  }
  return true;
}

/* Whether v, a buffer of its own filled by an elementwise loop, may share
 * that loop with other values of its shape. */
static bool loop_candidate(const Plan *pl, const Value *v) {
  return pl->mat[v->id] && pl->root[v->id] == v->id && same_index_op(v) && v->op != OP_ANNOTATE &&
         shape_elems(&v->shape) > 1;
}

/* Adds to cand the buffers v's fused expression reads (its leaves). */
static void add_leaves(const Plan *pl, const Value *v, int *cand, int *ncand, int cap) {
  for (int k = 0; k < v->nargs; k++) {
    const Value *a = v->args[k];
    if (!pl->mat[a->id]) {
      add_leaves(pl, a, cand, ncand, cap);
      continue;
    }
    bool seen = false;
    for (int j = 0; j < *ncand && !seen; j++)
      seen = cand[j] == a->id;
    if (!seen && *ncand < cap)
      cand[(*ncand)++] = a->id;
  }
}

/* Multi-output fusion: values of one shape, each read by a later one of
 * them element for element only, are computed in one loop nest at the step
 * of the last (pl->loop), each element of each computed once, stored to its
 * buffer and handed on in a register to the later ones: an optimizer's
 * update reads the param, its gradient and its states once for the new
 * param and every new state; a value and its cast to bf16 come from one
 * pass. A value a joins the loop of the value L (a < L) when every read of
 * its buffer is by a value of the loop, element for element, or comes
 * after L; when it is of L's pass (gsl_eval and gsl_forward call whole
 * loops of the forward pass); and when no buffer of more than one element
 * but the loop's own is written between a and L. Its operands are then
 * read at step L: their lifetimes stretch to L (pl->at) but meet no tensor
 * they did not, only computed scalars (an optimizer's bias corrections, 64
 * bytes each), so the most bytes live at once grow by those at most; and
 * an update in place of a param read by the loop is refused by
 * plan_inplace as any later read refuses it. A value no one reads past its
 * loop is held in registers only (pl->held), without a buffer. Values are
 * weighed from the last to the first, so that every reader of a candidate
 * has been placed when it is weighed; a loop computes at most
 * PLAN_MAX_LOOP values. */
static void plan_loops(Plan *pl, const Program *p) {
  int n = p->nvalues;
  size_t m = (size_t)(n > 0 ? n : 1);
  IrUses uses = ir_uses(p);
  int *at = xmalloc(m * sizeof *at);   /* per value: its step before any loop is shared */
  int *anext = xmalloc(m * sizeof *anext); /* per value: the next alias of its root, -1: none */
  int *ahead = xmalloc(m * sizeof *ahead); /* per root: its first alias, -1: none */
  int *big = xmalloc((m + 1) * sizeof *big); /* big[i]: arena buffers of more than one element before step i */
  big[0] = 0;
  for (int i = 0; i < n; i++) {
    const Value *v = p->values[i];
    at[i] = pl->mat[i] && !twin(pl, v) ? i : -1;
    ahead[i] = anext[i] = -1;
    big[i + 1] = big[i] + (pl->mat[i] && pl->root[i] == i && in_arena(v) && shape_elems(&v->shape) > 1);
  }
  for (int i = n - 1; i >= 0; i--)
    for (int k = 0; at[i] >= 0 && k < p->values[i]->nargs; k++) {
      int a = p->values[i]->args[k]->id;
      if (!pl->mat[a] && at[a] < at[i])
        at[a] = at[i];
    }
  for (int i = n - 1; i >= 0; i--)
    if (pl->mat[i] && pl->root[i] != i) {
      anext[i] = ahead[pl->root[i]];
      ahead[pl->root[i]] = i;
    }
  for (int L = n - 1; L >= 0; L--) {
    const Value *lead = p->values[L];
    if (pl->loop[L] != L || !loop_candidate(pl, lead))
      continue;
    int members[PLAN_MAX_LOOP], nm = 1, cand[4 * PLAN_MAX_LOOP], nc = 0;
    members[0] = L;
    add_leaves(pl, lead, cand, &nc, 4 * PLAN_MAX_LOOP);
    while (nc > 0 && nm < PLAN_MAX_LOOP) {
      int best = 0; /* the latest candidate: its readers are all weighed */
      for (int j = 1; j < nc; j++)
        if (cand[j] > cand[best])
          best = j;
      const Value *a = p->values[cand[best]];
      cand[best] = cand[--nc];
      if (!loop_candidate(pl, a) || pl->loop[a->id] != a->id || a->pass != lead->pass ||
          !shape_eq(&a->shape, &lead->shape) || big[L] - big[a->id + 1] != nm - 1)
        continue;
      bool ok = true, outside = uses.outputs[a->id] > 0 || ahead[a->id] >= 0; /* read past the loop */
      for (int w = a->id; ok && w >= 0; w = w == a->id ? ahead[a->id] : anext[w])
        for (int u = uses.first[w]; ok && u < uses.first[w + 1]; u++) {
          const Value *r = p->values[uses.list[2 * u]];
          int s = at[r->id];
          if (s < 0)
            continue;
          if (!pl->mat[r->id] && pl->inline_each_use[r->id]) { /* read at several steps */
            ok = false;
          } else if (s <= L) {
            bool member = false;
            for (int j = 0; j < nm && !member; j++)
              member = members[j] == s;
            ok = w == a->id && member && reads_in_step(pl, p->values[s], a);
          } else {
            outside = true;
          }
        }
      if (!ok)
        continue;
      pl->held[a->id] = !outside;
      members[nm++] = a->id;
      add_leaves(pl, a, cand, &nc, 4 * PLAN_MAX_LOOP);
    }
    for (int j = 1; j < nm; j++)
      pl->loop[members[j]] = L;
  }
  free(at);
  free(anext);
  free(ahead);
  free(big);
  ir_uses_free(&uses);
}

/* ---- lifetimes ----------------------------------------------------------- */

static void plan_lifetimes(Plan *pl, const Program *p) {
  int n = p->nvalues;
  int *at = pl->at;
  for (int i = 0; i < n; i++) {
    at[i] = pl->mat[i] && !twin(pl, p->values[i]) ? pl->loop[i] : -1;
    pl->first[i] = pl->last[i] = pl->mat[i] ? pl->loop[i] : i;
    if (p->values[i]->carrier) /* a rider is written by its carrier's call */
      pl->first[i] = p->values[i]->carrier->id;
  }
  for (int i = n - 1; i >= 0; i--) {
    const Value *u = p->values[i];
    if (at[i] < 0)
      continue;
    for (int j = 0; j < u->nargs; j++) {
      const Value *a = u->args[j];
      if (pl->mat[a->id]) {
        int r = pl->root[a->id];
        if (pl->last[r] < at[i])
          pl->last[r] = at[i];
      } else if (at[a->id] < at[i]) {
        at[a->id] = at[i];
      }
    }
    if (u->rows && pl->mat[i] && pl->last[pl->root[u->rows->id]] < at[i]) /* its loop nest reads the counts */
      pl->last[pl->root[u->rows->id]] = at[i];
  }
  for (int i = 0; i < p->noutputs; i++)
    pl->last[pl->root[p->outputs[i].value->id]] = n;
}

/* ---- updates in place ------------------------------------------------------ */

/* An update (OUT_UPDATE) of an elementwise op (or an alias of one of its
 * shape, as the annotation of the param's sharding) is computed straight
 * into its tensor's storage instead of a buffer of its own copied in at
 * the step's end, when no read of the tensor comes after it and it reads
 * the tensor only element for element: the step then holds no second copy of
 * the params and optimizer states. (An output of a param is written from
 * its storage after the last step: the updated value either way.) Reads
 * are ordered by step, and within a loop nest computing several values
 * (plan_loops) by the value computed: a value of the update's loop before
 * it may read the tensor too, element for element, as the update's own
 * expression does; one after it may not. */
static void plan_inplace(Plan *pl, const Program *p) {
  int n = p->nvalues;
  size_t m = (size_t)(n > 0 ? n : 1);
  int64_t *when = xmalloc(m * sizeof *when);     /* per value: when it is evaluated, (step, value) as one number */
  int64_t *lastread = xmalloc(m * sizeof *lastread); /* per value: when it is last read */
  int *lhead = xmalloc(m * sizeof *lhead);       /* per loop's last value: its first other one, -1: none */
  int *lnext = xmalloc(m * sizeof *lnext);       /* per value of a loop: the next, -1: none */
  for (int i = 0; i < n; i++) {
    when[i] = pl->mat[i] && pl->at[i] >= 0 ? (int64_t)pl->at[i] * (n + 1) + i : -1;
    lastread[i] = -1;
    lhead[i] = lnext[i] = -1;
  }
  for (int i = n - 1; i >= 0; i--) {
    const Value *v = p->values[i];
    for (int k = 0; when[i] >= 0 && k < v->nargs; k++)
      if (!pl->mat[v->args[k]->id] && when[v->args[k]->id] < when[i])
        when[v->args[k]->id] = when[i];
    if (pl->loop[i] != i) {
      lnext[i] = lhead[pl->loop[i]];
      lhead[pl->loop[i]] = i;
    }
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < p->values[i]->nargs; k++) {
      int a = p->values[i]->args[k]->id, r = pl->root[a]; /* reading an alias reads its root */
      if (when[i] > lastread[a])
        lastread[a] = when[i];
      if (when[i] > lastread[r])
        lastread[r] = when[i];
    }
  int *into = xmalloc(m * sizeof *into); /* per update in place: its tensor's value */
  for (int i = 0; i < p->noutputs; i++) {
    const Output *o = &p->outputs[i];
    if (o->kind != OUT_UPDATE)
      continue;
    const Value *t = p->tensors[o->tensor].value;
    const Value *u = p->values[pl->root[o->value->id]]; /* the update, or the value it is an alias of */
    if (!pl->mat[o->value->id] || pl->inplace[u->id] || !same_index_op(u) || u->op == OP_ANNOTATE ||
        t->op != OP_PARAM || !shape_eq(&u->shape, &t->shape) || u->dtype != t->dtype ||
        lastread[t->id] > when[u->id] || !reads_in_step(pl, u, t))
      continue;
    int l = pl->loop[u->id];
    bool ok = true;
    for (int j = lhead[l]; ok && j >= 0; j = lnext[j])
      if (j < u->id && reads_any(pl, p->values[j], t))
        ok = reads_in_step(pl, p->values[j], t);
    if (!ok)
      continue;
    pl->inplace[u->id] = true;
    into[u->id] = t->id;
  }
  for (int j = 0; j < n; j++)
    if (pl->inplace[pl->root[j]])
      pl->root[j] = into[pl->root[j]];
  free(into);
  free(lastread);
  free(when);
  free(lhead);
  free(lnext);
}

/* ---- totals ---------------------------------------------------------------- */

/* The bytes of the params', states' and inputs' local tiles, and of the
 * OUT_VALUE outputs'. */
static void plan_totals(Plan *pl, const Program *p) {
  for (int i = 0; i < p->ntensors; i++) {
    int64_t b = plan_value_bytes(p->tensors[i].value);
    if (p->tensors[i].kind == TK_PARAM)
      pl->param_bytes += b;
    else if (p->tensors[i].kind == TK_STATE)
      pl->state_bytes += b;
    else
      pl->input_bytes += b;
  }
  for (int i = 0; i < p->noutputs; i++)
    if (p->outputs[i].kind == OUT_VALUE)
      pl->output_bytes += plan_value_bytes(p->outputs[i].value);
}

/* ---- the plan ---------------------------------------------------------------- */

Plan *plan_buffers(const Program *p) {
  Plan *pl = xcalloc(1, sizeof *pl);
  int n = p->nvalues;
  size_t m = (size_t)(n > 0 ? n : 1);
  pl->nvalues = n;
  pl->mat = xcalloc(m, sizeof *pl->mat);
  pl->inline_each_use = xcalloc(m, sizeof *pl->inline_each_use);
  pl->root = xcalloc(m, sizeof *pl->root);
  pl->offset = xcalloc(m, sizeof *pl->offset);
  pl->bytes = xcalloc(m, sizeof *pl->bytes);
  pl->first = xcalloc(m, sizeof *pl->first);
  pl->last = xcalloc(m, sizeof *pl->last);
  pl->temp = xcalloc(m, sizeof *pl->temp);
  pl->inplace = xcalloc(m, sizeof *pl->inplace);
  pl->at = xcalloc(m, sizeof *pl->at);
  pl->loop = xcalloc(m, sizeof *pl->loop);
  pl->held = xcalloc(m, sizeof *pl->held);
  for (int i = 0; i < n; i++)
    pl->loop[i] = i;
  decide_buffers(pl, p);
  for (int i = 0; i < n; i++) {
    pl->temp[i] = -1;
    if (p->values[i]->op == OP_EINSUM && pl->mat[i])
      plan_temps(pl, p->values[i]);
  }
  plan_loops(pl, p);
  plan_lifetimes(pl, p);
  plan_inplace(pl, p);
  PlanItem *it = xmalloc((m + (size_t)pl->ntemps) * sizeof *it);
  int nit = 0;
  for (int i = 0; i < n; i++) {
    pl->offset[i] = -1;
    if (pl->mat[i] && pl->root[i] == i && in_arena(p->values[i]) && !pl->held[i]) {
      pl->bytes[i] = plan_align(plan_value_bytes(p->values[i]));
      it[nit] = (PlanItem){pl->bytes[i], pl->first[i], pl->last[i], &pl->offset[i], nit};
      nit++;
    }
  }
  for (int t = 0; t < pl->ntemps; t++) {
    int s = pl->temps[t].value;
    it[nit] = (PlanItem){pl->temps[t].bytes, s, s, &pl->temps[t].offset, nit};
    nit++;
  }
  plan_place(pl, it, nit, n);
  free(it);
  plan_totals(pl, p);
  plan_staging(pl, p);
  return pl;
}

int64_t plan_total(const Plan *pl) {
  return pl->param_bytes + pl->state_bytes + pl->input_bytes + pl->arena_bytes + pl->scratch_bytes + pl->gather_bytes;
}

void plan_free(Plan *pl) {
  if (!pl)
    return;
  free(pl->mat);
  free(pl->inline_each_use);
  free(pl->root);
  free(pl->offset);
  free(pl->bytes);
  free(pl->first);
  free(pl->last);
  free(pl->temp);
  free(pl->inplace);
  free(pl->at);
  free(pl->loop);
  free(pl->held);
  free(pl->temps);
  free(pl);
}
