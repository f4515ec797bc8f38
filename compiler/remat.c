/* remat.c — what recomputing each region would save and cost, and the
 * order --mem-budget takes them in (the regions themselves: sema makes
 * them, autodiff.c recomputes the chosen).
 *
 * Method. The candidates are the outermost regions (a call made from the
 * top level or a loop there) that are not recomputed yet. Measured on a
 * plan built without them (the SPMD program, its buffer plan, the machine
 * the cost search prices with):
 *   - saved: the bytes of the forward buffers built in the region that
 *     stay live into the backward pass and that no forward value outside
 *     the region reads (what it passes on to the next region is kept
 *     either way). Recomputed, these are live only during the region's
 *     own backward; at the turn from forward to backward, where the plan's
 *     peak lies, every one of them is live, so the peak falls by about
 *     their sum.
 *   - seconds: the region's forward on one device, by the same per-op
 *     cost model --auto-shard and --explain use (shard_value_seconds: products at
 *     the GEMM rate, the rest at memory bandwidth, collectives at the
 *     link rate).
 *   - flops: its products' FLOPs (2 per multiply-add), for --stats.
 * The order is the knapsack's greedy one, PyTorch's activation memory
 * budget's: the least seconds per byte saved first. */
#include <stdlib.h>

#include "gslc.h"

/* r's outermost region (r itself if it has no parent), 0: none */
static int top_of(const Program *p, int r) {
  while (r > 0 && p->regions[r - 1].parent)
    r = p->regions[r - 1].parent;
  return r;
}

void remat_measure(Program *g, const Program *s, const Plan *pl, const Machine *m) {
  int n = s->nvalues, nr = g->nregions;
  if (!nr || s->nregions != nr)
    return;
  for (int r = 0; r < nr; r++) {
    g->regions[r].saved = 0;
    g->regions[r].flops = 0;
    g->regions[r].seconds = 0;
  }
  int bwd = n; /* the first step past the forward pass */
  for (int i = 0; i < n && bwd == n; i++)
    if (s->values[i]->pass != PASS_FORWARD)
      bwd = i;
  int *top = xmalloc(sizeof *top * (size_t)(n + 1));
  bool *outside = xcalloc((size_t)n + 1, 1); /* per root buffer: read by a forward value of another region */
  for (int i = 0; i < n; i++)
    top[i] = top_of(s, s->values[i]->region);
  for (int i = 0; i < bwd; i++) {
    const Value *v = s->values[i];
    for (int k = 0; k < v->nargs; k++) {
      int b = pl->root[v->args[k]->id];
      if (top[b] != top[i])
        outside[b] = true;
    }
  }
  for (int i = 0; i < n; i++) {
    const Value *v = s->values[i];
    int r = top[i];
    if (!r || v->pass != PASS_FORWARD)
      continue;
    Region *R = &g->regions[r - 1];
    R->flops += ir_flops(v);
    bool comm;
    R->seconds += shard_value_seconds(s, m, v, &comm);
    if (pl->mat[i] && pl->root[i] == i && pl->offset[i] >= 0 && pl->last[i] >= bwd && !outside[i])
      R->saved += pl->bytes[i];
  }
  free(top);
  free(outside);
}

typedef struct Cand {
  int r;        /* region number */
  double price; /* seconds per byte saved */
} Cand;

static int by_price(const void *x, const void *y) {
  const Cand *a = x, *b = y;
  if (a->price != b->price)
    return a->price < b->price ? -1 : 1;
  return a->r - b->r;
}

int remat_order(const Program *g, int *order) {
  Cand *c = xmalloc(sizeof *c * (size_t)(g->nregions + 1));
  int n = 0;
  for (int r = 1; r <= g->nregions; r++) {
    const Region *R = &g->regions[r - 1];
    if (!R->parent && !R->recompute && R->saved > 0)
      c[n++] = (Cand){r, R->seconds / (double)R->saved};
  }
  qsort(c, (size_t)n, sizeof *c, by_price);
  for (int k = 0; k < n; k++)
    order[k] = c[k].r;
  free(c);
  return n;
}
