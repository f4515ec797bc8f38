/* plan.c — buffer planning, the phase between partitioning and codegen:
 * which values get a buffer, how long each buffer lives, and where in one
 * arena it lies, so that dead buffers' space is reused.
 *
 * Buffers. A value gets a buffer ("is materialized") when it is a param or
 * input, an output, is read more than once, or is an op that needs a whole
 * buffer (ops.def's OF_BUFFER: einsum, reduce, cumsum, gather, concat, rng,
 * collectives); operands of einsum, gather, cumsum and of the collectives
 * other than all_reduce are materialized too. Reshape and a materialized
 * annotate are aliases (OF_ALIAS): their operand's buffer under a new shape
 * (an output's own copy where that buffer is a param's, which the update
 * overwrites).
 * An all_reduce runs in place on its operand's buffer when nothing else
 * reads that buffer. Every other value is inlined into its one user's loop;
 * constants, iotas, and index maps (OF_INDEX_MAP) of buffers, are cheap enough to
 * inline into each of several users. A chain of more than PLAN_MAX_FUSED
 * inlined ops gets a buffer every PLAN_MAX_FUSED ops, so that codegen's
 * recursion over a fused expression stays shallow on any program (a chain
 * of 9000 additions is legal) and no loop body grows without bound. An
 * einsum lowered to a GEMM may copy an operand or its result through
 * temporaries: codegen decides the lowering (cg_gemm_plan, cg_einsum.c),
 * and the plan asks it which temporaries to place.
 *
 * Lifetimes. Steps are value ids: codegen emits each value's code in
 * program order. A buffer is live from the step of the value that writes it
 * (its root) to the last step that reads it. A value inlined into its users
 * is evaluated at each user's step (a chain of inlined values at the step
 * of the buffer it ends in), and reads the buffers of its operands there;
 * readers of an alias or of an in-place all_reduce read the root's buffer.
 * Outputs live to the end (they are written out after the last step); an
 * einsum's temporaries live only at its own step. Params and inputs keep
 * the runtime's storage and are not planned; so does an optimizer's update
 * written straight into its param or state (see plan_inplace), else copied
 * in at the step's end (codegen).
 *
 * Placement. Buffers, largest first (then by first step, then in value
 * order, temporaries last), each go to the best-fitting gap (the smallest
 * that holds it, the lowest of equal ones) between the buffers already
 * placed whose lifetimes overlap its own, else above them all; offsets are
 * multiples of 64 bytes. The arena is the highest end; the most bytes live
 * at one step bound it from below, and --stats shows both, with the sum of
 * all buffers (what one allocation per buffer would take).
 * The buffers placed are not looked at one by one: they are kept as byte
 * sets on a segment tree over the steps (Busy), each set a treap of
 * disjoint runs of bytes, touching runs merged. The bytes of the buffers
 * live at some step of [first, last] are the union of O(log n) of these
 * sets, whose gaps are walked upwards by merging the sets' runs in order,
 * stopping at a gap that fits exactly. With n buffers and steps, placing a
 * buffer costs O(log^2 n) and O(log n) more per run the walk passes,
 * adding it O(log^2 n) amortized. A program whose buffers meet few runs
 * (a deep network's activations, stacked one on another, make one run in
 * most sets) is planned in O(n log^2 n), where sorting all overlapping
 * buffers for each buffer placed took O(n^2 log n); one with thousands of
 * buffers live at once, scattered among gaps, still costs about a walk
 * over them per buffer. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"
#include "gslrt.h" /* the runtime's all-to-all chunk rule */

#define PLAN_ALIGN 64     /* bytes: the runtime's allocation alignment */
#define PLAN_MAX_FUSED 64 /* most ops fused into one loop body's expression */
#define PLAN_VERIFY_PAIRS 50000000L /* most pairs of byte-sharing buffers plan_verify compares */

static int64_t round_up(int64_t n) { return (n + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }

/* bytes of v's local tile (at least one element, as the runtime allocates) */
static int64_t value_bytes(const Value *v) {
  int64_t n = shape_elems(&v->shape);
  return dtype_size(v->dtype) * (n > 0 ? n : 1);
}

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
    pl->inline_each_use[i] = !output[i] && (v->op == OP_CONST || v->op == OP_IOTA ||
                                            ((fl & OF_INDEX_MAP) && (pl->mat[a->id] || pl->inline_each_use[a->id])));
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
    case OP_CUMSUM:
    case OP_RESHAPE:
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
  }
  ir_uses_free(&uses);
}

/* ---- an einsum's temporaries ------------------------------------------------ */

static int add_temp(Plan *pl, const Value *v, int64_t bytes) {
  pl->temps = xrealloc(pl->temps, (size_t)(pl->ntemps + 1) * sizeof *pl->temps);
  pl->temps[pl->ntemps] = (PlanTemp){v->id, round_up(bytes), -1};
  return pl->ntemps++;
}

/* The temporaries einsum v's lowering copies through (cg_gemm_plan, which
 * codegen reads too), one after another from pl->temp[v->id]. */
static void plan_temps(Plan *pl, const Value *v) {
  GemmPlan g;
  cg_gemm_plan(v, pl->mat, &g);
  int64_t bytes[3] = {g.tmp_a, g.tmp_b, g.tmp_c};
  for (int k = 0; k < 3; k++)
    if (bytes[k] >= 0) {
      int t = add_temp(pl, v, bytes[k]);
      if (pl->temp[v->id] < 0)
        pl->temp[v->id] = t;
    }
}

/* ---- lifetimes ----------------------------------------------------------- */

static void plan_lifetimes(Plan *pl, const Program *p) {
  int n = p->nvalues;
  int *at = pl->at;
  for (int i = 0; i < n; i++) {
    at[i] = pl->mat[i] ? i : -1;
    pl->first[i] = pl->last[i] = i;
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
  }
  for (int i = 0; i < p->noutputs; i++)
    pl->last[pl->root[p->outputs[i].value->id]] = n;
}

/* ---- updates in place ------------------------------------------------------ */

/* Whether t is read anywhere in v's fused expression. */
static bool reads_any(const Plan *pl, const Value *v, const Value *t) {
  for (int k = 0; k < v->nargs; k++)
    if (v->args[k] == t || (!pl->mat[v->args[k]->id] && reads_any(pl, v->args[k], t)))
      return true;
  return false;
}

static bool same_index_op(const Value *v) {
  return v->op == OP_UNARY || v->op == OP_BINARY || v->op == OP_SELECT || v->op == OP_CAST || v->op == OP_ANNOTATE;
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

/* An update (OUT_UPDATE) of an elementwise op is computed straight into
 * its tensor's storage instead of a buffer of its own copied in at the
 * step's end, when no step after it reads the tensor and it reads the
 * tensor only element for element: the step then holds no second copy of
 * the params and optimizer states. (An output of a param is written from
 * its storage after the last step: the updated value either way.) */
static void plan_inplace(Plan *pl, const Program *p) {
  int n = p->nvalues;
  int *lastread = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *lastread); /* per value: the last step reading it */
  for (int i = 0; i < n; i++)
    lastread[i] = -1;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < p->values[i]->nargs; k++) {
      int a = p->values[i]->args[k]->id, r = pl->root[a]; /* reading an alias reads its root */
      if (pl->at[i] > lastread[a])
        lastread[a] = pl->at[i];
      if (pl->at[i] > lastread[r])
        lastread[r] = pl->at[i];
    }
  int *into = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *into); /* per update in place: its tensor's value */
  for (int i = 0; i < p->noutputs; i++) {
    const Output *o = &p->outputs[i];
    if (o->kind != OUT_UPDATE)
      continue;
    const Value *u = o->value, *t = p->tensors[o->tensor].value;
    if (!pl->mat[u->id] || pl->root[u->id] != u->id || pl->inplace[u->id] || !same_index_op(u) ||
        u->op == OP_ANNOTATE || t->op != OP_PARAM || !shape_eq(&u->shape, &t->shape) || u->dtype != t->dtype ||
        lastread[t->id] > u->id || !reads_in_step(pl, u, t))
      continue;
    pl->inplace[u->id] = true;
    into[u->id] = t->id;
  }
  for (int j = 0; j < n; j++)
    if (pl->inplace[pl->root[j]])
      pl->root[j] = into[pl->root[j]];
  free(into);
  free(lastread);
}

/* ---- placement ------------------------------------------------------------ */

typedef struct Item {
  int64_t bytes;   /* size */
  int first, last; /* live steps */
  int64_t *offset; /* where its offset goes */
  int order;       /* tie-break: creation order */
} Item;

static int by_size(const void *x, const void *y) {
  const Item *a = x, *b = y;
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  if (a->first != b->first)
    return a->first < b->first ? -1 : 1;
  return a->order - b->order;
}

/* A byte set: disjoint ranges of the arena, none touching another
 * (touching ranges merge), kept as a treap keyed by lo; a Run is one of
 * its nodes. */
typedef struct Run {
  int64_t lo, hi; /* the bytes [lo, hi) */
  unsigned prio;  /* a max-heap on prio keeps the treap shallow */
  int kid[2];     /* runs below lo and above it: nodes, 0 for none */
} Run;

/* The buffers placed so far, as byte sets on a segment tree over the
 * steps (node 1 the root, node k's children 2k and 2k + 1, leaf size + s
 * step s). A buffer live over steps [first, last] goes into own[c] for
 * each node c of the interval's canonical cover, and into sub[] of those
 * nodes and of every node above its first and last leaves. own[x] then
 * holds only buffers live over all of x's steps, and sub[x] only buffers
 * live at some step of x's, at least those stored at x or below it. */
typedef struct Busy {
  Run *run;      /* node pool: run[0] unused (0 is no node) */
  int nrun, cap; /* nodes used (freed ones included), allocated */
  int freed;     /* freed nodes, a list through kid[0] */
  unsigned seed; /* xorshift state for prio (the treaps' shape, never the plan, depends on it) */
  int size;      /* leaves: a power of two above the last step */
  int *own, *sub; /* per tree node: its byte sets (treap roots) */
} Busy;

static int run_new(Busy *b, int64_t lo, int64_t hi) {
  int x = b->freed;
  if (x) {
    b->freed = b->run[x].kid[0];
  } else {
    if (b->nrun == b->cap) {
      b->cap *= 2;
      b->run = xrealloc(b->run, (size_t)b->cap * sizeof *b->run);
    }
    x = b->nrun++;
  }
  b->seed ^= b->seed << 13;
  b->seed ^= b->seed >> 17;
  b->seed ^= b->seed << 5;
  b->run[x] = (Run){lo, hi, b->seed, {0, 0}};
  return x;
}

static void run_free_all(Busy *b, int t) {
  while (t) {
    run_free_all(b, b->run[t].kid[1]);
    int l = b->run[t].kid[0];
    b->run[t].kid[0] = b->freed;
    b->freed = t;
    t = l;
  }
}

/* t split into the runs below key (*l) and those from key up (*r) */
static void run_split(Busy *b, int t, int64_t key, int *l, int *r) {
  if (!t) {
    *l = *r = 0;
  } else if (b->run[t].lo < key) {
    run_split(b, b->run[t].kid[1], key, &b->run[t].kid[1], r);
    *l = t;
  } else {
    run_split(b, b->run[t].kid[0], key, l, &b->run[t].kid[0]);
    *r = t;
  }
}

/* l and r joined, every run of l below every run of r */
static int run_join(Busy *b, int l, int r) {
  if (!l || !r)
    return l ? l : r;
  if (b->run[l].prio > b->run[r].prio) {
    b->run[l].kid[1] = run_join(b, b->run[l].kid[1], r);
    return l;
  }
  b->run[r].kid[0] = run_join(b, l, b->run[r].kid[0]);
  return r;
}

/* the run of t with the highest lo (0: t is empty) */
static int run_last(const Busy *b, int t) {
  while (t && b->run[t].kid[1])
    t = b->run[t].kid[1];
  return t;
}

/* the run of t with the highest lo at most y, or (above) the lowest lo
 * above y; 0: none */
static int run_near(const Busy *b, int t, int64_t y, bool above) {
  int found = 0;
  while (t) {
    bool le = b->run[t].lo <= y;
    if (le != above)
      found = t;
    t = b->run[t].kid[le];
  }
  return found;
}

/* *set with the bytes [lo, hi) added */
static void set_add(Busy *b, int *set, int64_t lo, int64_t hi) {
  int l, m, r;
  run_split(b, *set, lo, &l, &r);
  int x = run_last(b, l);
  if (x && b->run[x].hi >= lo) { /* the run below reaches lo: merged */
    lo = b->run[x].lo;
    if (b->run[x].hi > hi)
      hi = b->run[x].hi;
    run_split(b, l, lo, &l, &m);
    run_free_all(b, m);
  }
  run_split(b, r, hi + 1, &m, &r); /* runs starting in [lo, hi]: merged */
  x = run_last(b, m);
  if (x && b->run[x].hi > hi)
    hi = b->run[x].hi;
  run_free_all(b, m);
  *set = run_join(b, run_join(b, l, run_new(b, lo, hi)), r);
}

/* The sets that together hold exactly the buffers live at some step of
 * [first, last]: sub[] of the interval's canonical cover and own[] of every
 * node above its first and last leaves. Returns how many went to sets. */
static int busy_sets(const Busy *b, int first, int last, int *sets) {
  int n = 0;
  for (int lo = first + b->size, hi = last + b->size + 1; lo < hi; lo >>= 1, hi >>= 1) {
    if (lo & 1)
      sets[n++] = b->sub[lo++];
    if (hi & 1)
      sets[n++] = b->sub[--hi];
  }
  for (int x = (first + b->size) >> 1, y = (last + b->size) >> 1; x; x >>= 1, y >>= 1) {
    sets[n++] = b->own[x];
    if (y != x)
      sets[n++] = b->own[y];
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    if (sets[i])
      sets[k++] = sets[i];
  return k;
}

static void busy_add(Busy *b, const Item *it) {
  int64_t lo = *it->offset, hi = lo + it->bytes;
  for (int l = it->first + b->size, h = it->last + b->size + 1; l < h; l >>= 1, h >>= 1) {
    if (l & 1) {
      set_add(b, &b->own[l], lo, hi);
      set_add(b, &b->sub[l++], lo, hi);
    }
    if (h & 1) {
      set_add(b, &b->own[--h], lo, hi);
      set_add(b, &b->sub[h], lo, hi);
    }
  }
  for (int x = (it->first + b->size) >> 1, y = (it->last + b->size) >> 1; x; x >>= 1, y >>= 1) {
    set_add(b, &b->sub[x], lo, hi);
    if (y != x)
      set_add(b, &b->sub[y], lo, hi);
  }
}

/* the run of t with the lowest lo among those ending above y (0: none) */
static int run_seek(const Busy *b, int t, int64_t y) {
  int x = run_near(b, t, y, false);
  return x && b->run[x].hi > y ? x : run_near(b, t, y, true);
}

/* Where it goes: the lowest of the smallest gaps that hold it among the
 * buffers placed whose lifetimes overlap its own, else above them all.
 * The sets are merged as sorted lists are, each through a cursor (its
 * lowest run ending above y) in a heap on the cursors' lo: y, the top of
 * the bytes walked, passes the lowest cursor's run when that run begins
 * at or below y, else there is a gap from y to it. A cursor left behind
 * skips in one step to its run ending above y. */
static int64_t best_fit(const Busy *b, const Item *it) {
  int sets[4 * 32], n = busy_sets(b, it->first, it->last, sets); /* 2 log2(size) in the cover, 2 above */
  int cur[4 * 32], heap[4 * 32], nh = 0; /* per set its cursor; the heap of sets, lowest cursor first */
  int64_t y = 0, best = -1, best_gap = 0;
  for (int i = 0; i < n; i++) {
    cur[i] = run_seek(b, sets[i], 0);
    int k = nh++;
    for (; k > 0 && b->run[cur[heap[(k - 1) / 2]]].lo > b->run[cur[i]].lo; k = (k - 1) / 2)
      heap[k] = heap[(k - 1) / 2];
    heap[k] = i;
  }
  while (nh > 0) {
    int i = heap[0];
    const Run *r = &b->run[cur[i]];
    if (r->lo > y) {
      int64_t gap = r->lo - y;
      if (gap >= it->bytes && (best < 0 || gap < best_gap)) {
        best = y;
        best_gap = gap;
        if (gap == it->bytes)
          break; /* no gap fits closer, and any other lies higher */
      }
      y = r->lo;
    }
    if (r->hi > y)
      y = r->hi;
    cur[i] = run_seek(b, sets[i], y);
    if (!cur[i])
      i = heap[--nh]; /* the set is walked: the last of the heap sifts down from the top */
    int k = 0;
    for (;;) {
      int c = 2 * k + 1;
      if (c >= nh)
        break;
      if (c + 1 < nh && b->run[cur[heap[c + 1]]].lo < b->run[cur[heap[c]]].lo)
        c++;
      if (b->run[cur[heap[c]]].lo >= b->run[cur[i]].lo)
        break;
      heap[k] = heap[c];
      k = c;
    }
    if (nh > 0)
      heap[k] = i;
  }
  return best >= 0 ? best : y;
}

static void place(Plan *pl, Item *it, int nit, int nsteps) {
  qsort(it, (size_t)nit, sizeof *it, by_size);
  Busy b = {0};
  b.cap = 1024;
  b.run = xmalloc((size_t)b.cap * sizeof *b.run);
  b.nrun = 1;
  b.seed = 2463534242u;
  for (b.size = 1; b.size <= nsteps; b.size *= 2)
    ;
  b.own = xcalloc(2 * (size_t)b.size, sizeof *b.own);
  b.sub = xcalloc(2 * (size_t)b.size, sizeof *b.sub);
  for (int i = 0; i < nit; i++) {
    *it[i].offset = best_fit(&b, &it[i]);
    busy_add(&b, &it[i]);
    if (*it[i].offset + it[i].bytes > pl->arena_bytes)
      pl->arena_bytes = *it[i].offset + it[i].bytes;
    pl->noreuse_bytes += it[i].bytes;
  }
  free(b.run);
  free(b.own);
  free(b.sub);
  /* the most bytes live at one step */
  int64_t *delta = xcalloc((size_t)nsteps + 2, sizeof *delta), live = 0;
  for (int i = 0; i < nit; i++) {
    delta[it[i].first] += it[i].bytes;
    delta[it[i].last + 1] -= it[i].bytes;
  }
  for (int s = 0; s <= nsteps; s++) {
    live += delta[s];
    if (live > pl->live_bytes)
      pl->live_bytes = live;
  }
  free(delta);
}

/* ---- the runtime's own staging ------------------------------------------- */

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
    return round_up((esize == 2 ? 2 : 1) * padded_in(a, v->axis, g));
  if (esize == 2 && (v->op == OP_ALL_REDUCE || v->op == OP_REDUCE_SCATTER))
    return round_up(2 * in); /* bf16 sums: widened to f32 (gslrt.h) */
  switch (v->op) {
  case OP_ALL_GATHER:
    return outer(&a->shape, v->axis) != 1 ? round_up(g * in) : 0;
  case OP_REDUCE_SCATTER:
    return outer(&a->shape, v->axis) != 1 ? round_up(in) : 0;
  case OP_ALL_TO_ALL: {
    Shape block = a->shape;
    block.d[v->axis] = (block.d[v->axis] + g - 1) / g;
    if (uneven) {
      int staged = (outer(&a->shape, v->axis) != 1 || a->shape.d[v->axis] % g) +
                   (outer(&block, v->axis2) != 1 || v->shape.d[v->axis2] != g * a->shape.d[v->axis2]);
      return round_up(staged * padded_in(a, v->axis, g));
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
    return round_up(staged * in);
  }
  default:
    return 0;
  }
}

static void plan_totals(Plan *pl, const Program *p) {
  pl->gather_output = -1;
  int64_t devices = 1;
  for (int i = 0; i < p->mesh.naxes; i++)
    devices *= p->mesh.size[i];
  for (int i = 0; i < p->ntensors; i++) {
    int64_t b = value_bytes(p->tensors[i].value);
    if (p->tensors[i].kind == TK_PARAM)
      pl->param_bytes += b;
    else if (p->tensors[i].kind == TK_STATE)
      pl->state_bytes += b;
    else
      pl->input_bytes += b;
  }
  for (int i = 0; i < p->noutputs; i++) {
    const Value *v = p->outputs[i].value;
    if (p->outputs[i].kind != OUT_VALUE)
      continue;
    int64_t local = value_bytes(v), global = dtype_size(v->dtype) * shape_elems(p->spmd ? &v->gshape : &v->shape);
    pl->output_bytes += local;
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
    int64_t rb = v->carrier ? round_up(2 * padded_in(v->args[0], v->axis, group_size(p, v))) : 0;
    if (v->carrier && group_size(p, v) > 1 && rb > rider)
      rider = rb;
  }
  pl->scratch_bytes += rider;
}

/* ---- the plan's own check --------------------------------------------------- */

/* One placed buffer, for plan_verify. */
typedef struct Placed {
  int64_t offset, bytes; /* where in the arena */
  int first, last;       /* live steps */
  int who;               /* value id (a temporary: its value's id) */
} Placed;

static int by_place(const void *x, const void *y) {
  const Placed *a = x, *b = y;
  return a->offset < b->offset ? -1 : a->offset > b->offset;
}

bool plan_verify(const Plan *pl, FILE *err) {
  int n = pl->nvalues, nit = 0;
  Placed *it = xmalloc(((size_t)n + (size_t)pl->ntemps + 1) * sizeof *it);
  bool ok = true;
  for (int i = 0; i < n; i++)
    if (pl->offset[i] >= 0)
      it[nit++] = (Placed){pl->offset[i], pl->bytes[i], pl->first[i], pl->last[i], i};
  for (int t = 0; t < pl->ntemps; t++)
    it[nit++] = (Placed){pl->temps[t].offset, pl->temps[t].bytes, pl->temps[t].value, pl->temps[t].value,
                         pl->temps[t].value};
  for (int i = 0; i < nit && ok; i++)
    if (it[i].offset < 0 || it[i].offset % PLAN_ALIGN || it[i].offset + it[i].bytes > pl->arena_bytes ||
        it[i].first > it[i].last) {
      if (err)
        fprintf(err, "plan_verify: the buffer of %%%d lies outside the arena, unaligned, or lives backwards\n",
                it[i].who);
      ok = false;
    }
  /* sorted by offset, each buffer meets only those that start inside it */
  qsort(it, (size_t)nit, sizeof *it, by_place);
  long pairs = 0;
  for (int i = 0; i < nit && ok; i++)
    for (int j = i + 1; j < nit && it[j].offset < it[i].offset + it[i].bytes && ok; j++) {
      if (++pairs > PLAN_VERIFY_PAIRS)
        goto done; /* checked as far as is cheap */
      if (it[i].first <= it[j].last && it[j].first <= it[i].last) {
        if (err)
          fprintf(err, "plan_verify: %%%d and %%%d share arena bytes while both are live\n", it[i].who, it[j].who);
        ok = false;
      }
    }
done:
  free(it);
  return ok;
}

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
  decide_buffers(pl, p);
  for (int i = 0; i < n; i++) {
    pl->temp[i] = -1;
    if (p->values[i]->op == OP_EINSUM && pl->mat[i])
      plan_temps(pl, p->values[i]);
  }
  plan_lifetimes(pl, p);
  plan_inplace(pl, p);
  Item *it = xmalloc((m + (size_t)pl->ntemps) * sizeof *it);
  int nit = 0;
  for (int i = 0; i < n; i++) {
    pl->offset[i] = -1;
    if (pl->mat[i] && pl->root[i] == i && in_arena(p->values[i])) {
      pl->bytes[i] = round_up(value_bytes(p->values[i]));
      it[nit] = (Item){pl->bytes[i], pl->first[i], pl->last[i], &pl->offset[i], nit};
      nit++;
    }
  }
  for (int t = 0; t < pl->ntemps; t++) {
    int s = pl->temps[t].value;
    it[nit] = (Item){pl->temps[t].bytes, s, s, &pl->temps[t].offset, nit};
    nit++;
  }
  place(pl, it, nit, n);
  free(it);
  plan_totals(pl, p);
  return pl;
}

int64_t plan_total(const Plan *pl) {
  return pl->param_bytes + pl->state_bytes + pl->input_bytes + pl->arena_bytes + pl->scratch_bytes + pl->gather_bytes;
}

/* One part of plan_total, for plan_largest. */
typedef struct Part {
  int64_t bytes;      /* its bytes */
  const char *what;   /* what it is */
} Part;

static int by_bytes(const void *x, const void *y) {
  const Part *a = x, *b = y;
  return a->bytes > b->bytes ? -1 : a->bytes < b->bytes;
}

/* "KIND B" for the tensors of kind k, with the largest's name and bytes
 * where there are several */
static Part tensors_part(Arena *a, const Program *p, TensorKind k, const char *kind, int64_t total) {
  const Tensor *big = NULL;
  int n = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i].kind == k) {
      n++;
      if (!big || value_bytes(p->tensors[i].value) > value_bytes(big->value))
        big = &p->tensors[i];
    }
  if (n < 2)
    return (Part){total, big ? arena_printf(a, "%s (%s) %" PRId64, kind, big->name, total) : kind};
  return (Part){total, arena_printf(a, "%s %" PRId64 " (the largest %s, %" PRId64 ")", kind, total, big->name,
                                    value_bytes(big->value))};
}

const char *plan_largest(Arena *a, const Program *p, const Plan *pl) {
  Part part[6] = {
      tensors_part(a, p, TK_PARAM, "params", pl->param_bytes),
      tensors_part(a, p, TK_STATE, "optimizer states", pl->state_bytes),
      tensors_part(a, p, TK_INPUT, "inputs", pl->input_bytes),
      {pl->arena_bytes, arena_printf(a, "intermediates %" PRId64, pl->arena_bytes)},
      {pl->scratch_bytes, arena_printf(a, "collective scratch %" PRId64, pl->scratch_bytes)},
      {pl->gather_bytes, pl->gather_output < 0 ? ""
                                               : arena_printf(a, "gathering output %s on rank 0 %" PRId64,
                                                              p->outputs[pl->gather_output].name, pl->gather_bytes)},
  };
  qsort(part, 6, sizeof *part, by_bytes);
  const char *s = "";
  for (int i = 0; i < 3 && part[i].bytes > 0; i++)
    s = arena_printf(a, "%s%s%s", s, i ? ", " : "", part[i].what);
  return s;
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
  free(pl->temps);
  free(pl);
}

/* ---- gslc --stats ------------------------------------------------------------ */

/* The real elements along dim d of SPMD value v's tile on the device at
 * the last block of the dim's cut (an uneven cut's shortest, maybe 0). */
static int64_t last_real(const Program *p, const Value *v, int d) {
  int64_t n = v->gshape.d[d], k = shard_shards(p, &v->sh, d), c = v->shape.d[d];
  return n % k == 0 || c * k <= n ? c /* even, or a tile that is not the cut's (a whole dim) */
                                  : shard_last_real(n, k);
}

static const char *where(Arena *a, Span sp) {
  if (!sp.src)
    return "-";
  const char *base = strrchr(sp.src->path, '/');
  return arena_printf(a, "%s:%u", base ? base + 1 : sp.src->path, sp.line);
}

/* --stats' recomputation section, for a training step that recomputes
 * some region: the bytes of the forward buffers the backward pass reads
 * (live from the forward pass into the backward), of the buffers of the
 * recomputed values, and the products' FLOPs recomputed. */
static void activations_stats(FILE *f, const Program *p, const Plan *pl) {
  int units = 0, marked = 0;
  for (int r = 0; r < p->nregions; r++)
    if (ir_region_unit(p, r + 1) == r + 1) {
      units++;
      marked += p->regions[r].marked;
    }
  if (!units)
    return;
  int bwd = p->nvalues, nkept = 0, nre = 0;
  for (int i = 0; i < p->nvalues && bwd == p->nvalues; i++)
    if (p->values[i]->pass != PASS_FORWARD)
      bwd = i;
  int64_t kept = 0, re = 0;
  double all = 0, again = 0;
  bool *late = xcalloc((size_t)p->nvalues + 1, 1); /* per root buffer: read past the forward pass */
  for (int i = bwd; i < p->nvalues; i++)
    for (int k = 0; k < p->values[i]->nargs; k++)
      late[pl->root[p->values[i]->args[k]->id]] = true;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    double fl = ir_flops(v);
    all += fl;
    if (v->pass == PASS_RECOMPUTE)
      again += fl;
    if (!pl->mat[i] || pl->root[i] != i || pl->offset[i] < 0)
      continue;
    if (v->pass == PASS_FORWARD && late[i]) {
      kept += pl->bytes[i];
      nkept++;
    } else if (v->pass == PASS_RECOMPUTE) {
      re += pl->bytes[i];
      nre++;
    }
  }
  free(late);
  fprintf(f, "\n## recomputation (gsl.7, RECOMPUTATION)\n");
  fprintf(f, "regions recomputed       %12d   (%d marked remat in the source, %d chosen for --mem-budget)\n", units,
          marked, units - marked);
  fprintf(f, "activations kept         %12" PRId64 "   bytes in %d buffers the backward pass reads from the forward\n",
          kept, nkept);
  fprintf(f, "activations recomputed   %12" PRId64 "   bytes in %d buffers, each live within its region's backward\n",
          re, nre);
  fprintf(f, "products recomputed      %12.0f   FLOP a step a device, of the step's %.0f (%.1f%%)\n", again, all,
          all > 0 ? 100.0 * again / all : 0.0);
}

void plan_stats(FILE *f, const Program *p, const Plan *pl) {
  Arena *a = arena_new();
  int64_t devices = 1;
  for (int i = 0; i < p->mesh.naxes; i++)
    devices *= p->mesh.size[i];
  fprintf(f, "# %s on ", p->path);
  if (p->mesh.naxes) {
    fputs("mesh [", f);
    for (int i = 0; i < p->mesh.naxes; i++)
      fprintf(f, "%s%s = %" PRId64, i ? ", " : "", p->mesh.name[i], p->mesh.size[i]);
    fprintf(f, "]: %" PRId64 " device%s\n", devices, devices == 1 ? "" : "s");
  } else {
    fputs("one device (no mesh)\n", f);
  }
  fputs("\n## memory per device (bytes)\n", f);
  fprintf(f, "params                   %12" PRId64 "\n", pl->param_bytes);
  if (pl->state_bytes)
    fprintf(f, "optimizer states         %12" PRId64 "\n", pl->state_bytes);
  fprintf(f, "inputs                   %12" PRId64 "\n", pl->input_bytes);
  fprintf(f, "outputs                  %12" PRId64 "   (within the params, inputs and intermediates)\n",
          pl->output_bytes);
  fprintf(f, "intermediates, planned   %12" PRId64 "   (one arena, reused; most live at once: %" PRId64 ")\n",
          pl->arena_bytes, pl->live_bytes);
  fprintf(f, "intermediates, no reuse  %12" PRId64 "   (every buffer of its own)\n", pl->noreuse_bytes);
  fprintf(f, "runtime staging          %12" PRId64 "   (collective scratch %" PRId64
             "; gathering an output on rank 0 %" PRId64 ")\n",
          pl->scratch_bytes + pl->gather_bytes, pl->scratch_bytes, pl->gather_bytes);
  fprintf(f, "total                    %12" PRId64 "   (params%s + inputs + planned + staging)\n",
          plan_total(pl),
          pl->state_bytes ? " + states" : "");
  activations_stats(f, p, pl);
  fputs("\n## collectives per step (bytes: received per device)\n", f);
  int64_t total = 0;
  int n = 0, riders = 0;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (ir_op(v->op)->cls != OC_COLLECTIVE)
      continue;
    char axes[256];
    size_t k = 0;
    axes[0] = '\0';
    for (int j = 0; j < v->ngroup && k < sizeof axes; j++)
      k += (size_t)snprintf(axes + k, sizeof axes - k, "%s%s", j ? ", " : "", p->mesh.name[v->group[j]]);
    const char *kind = v->op == OP_ALL_REDUCE && v->fn == RF_MAX ? "all_reduce max" : op_name(v->op);
    int64_t b = shard_collective_bytes(p, v);
    fprintf(f, "%-18s over (%s)  %s%-14s %12" PRId64 "   ; %s%s\n", kind, axes, dtype_name(v->args[0]->dtype),
            shape_str(a, &v->args[0]->shape), b, where(a, v->span), v->carrier ? " (rides the one above)" : "");
    total += b;
    if (v->carrier)
      riders++;
    else
      n++;
  }
  fprintf(f, "total: %" PRId64 " bytes in %d collective%s", total, n, n == 1 ? "" : "s");
  if (riders)
    fprintf(f, " (and %d small all_to_all%s riding in them)", riders, riders == 1 ? "" : "s");
  fputc('\n', f);
  /* uneven dims: the padding the device at the last block of every cut
   * holds (it holds the most), and the products' FLOP a device spends on
   * padding, on average (a dim of n over k in tiles of c: n / k of each
   * tile is real, on average) */
  int64_t padb[3] = {0, 0, 0};
  double lost = 0, flop = 0;
  for (int i = 0; i < p->ntensors; i++) {
    const Value *v = p->tensors[i].value;
    int64_t real = 1;
    for (int d = 0; d < v->shape.rank; d++)
      real *= last_real(p, v, d);
    padb[p->tensors[i].kind == TK_PARAM ? 0 : p->tensors[i].kind == TK_STATE ? 1 : 2] +=
        dtype_size(v->dtype) * (shape_elems(&v->shape) - real);
  }
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (v->op != OP_EINSUM)
      continue;
    char seen[2 * GSL_MAX_RANK + 1] = {0};
    int ns = 0;
    double all = 2, real = 2;
    for (int k = 0; k < v->ein.nin; k++)
      for (int d = 0; v->ein.in[k][d]; d++)
        if (!strchr(seen, v->ein.in[k][d])) {
          const Value *x = v->args[k];
          int64_t n = x->gshape.d[d], kk = shard_shards(p, &x->sh, d), c = x->shape.d[d];
          seen[ns++] = v->ein.in[k][d];
          all *= (double)c;
          real *= n % kk && c * kk > n ? (double)n / (double)kk : (double)c;
        }
    flop += all;
    lost += all - real;
  }
  if (padb[0] + padb[1] + padb[2] || lost > 0) {
    fputs("\n## uneven dimensions: padding (gsl.7, Uneven dimensions)\n", f);
    fprintf(f, "padding held             %12" PRId64 "   bytes on the device holding the most (params %" PRId64
               ", states %" PRId64 ", inputs %" PRId64 ")\n",
            padb[0] + padb[1] + padb[2], padb[0], padb[1], padb[2]);
    fprintf(f, "products on padding      %12.0f   FLOP a step a device, on average (%.1f%% of its products' %.0f)\n",
            lost, flop > 0 ? 100.0 * lost / flop : 0.0, flop);
  }
  /* bf16 (a program's own, or gslc --precision bf16's): what it saves */
  int nbf = 0, nbuf = 0;
  int64_t buf = 0, moved = 0;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (v->dtype != DT_BF16)
      continue;
    nbf++;
    if (ir_op(v->op)->cls == OC_COLLECTIVE)
      moved += shard_collective_bytes(p, v);
    if (pl->mat[i] && pl->root[i] == i && pl->offset[i] >= 0) {
      nbuf++;
      buf += value_bytes(v);
    }
  }
  if (nbf) {
    fprintf(f, "\n## bf16 (%s)\n", p->precision == DT_BF16 ? "gslc --precision bf16" : "the program's own");
    fprintf(f, "bf16 values              %12d   (%d with a buffer of their own)\n", nbf, nbuf);
    fprintf(f, "bf16 buffers             %12" PRId64 "   bytes (the same values as f32: %" PRId64 ")\n", buf,
            2 * buf);
    fprintf(f, "bf16 collectives         %12" PRId64 "   bytes a step (%" PRId64 " as f32: %" PRId64 " saved)\n", moved,
            2 * moved, moved);
  }
  arena_free(a);
}
