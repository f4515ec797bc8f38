/* slots.c — no FLOPs on empty expert slots: a moe block's matrix products,
 * forward and backward, run over the capacity slots tokens were routed to.
 *
 * The routing (stdlib/moe.gsl) gives each expert's slots in order 0, 1,
 * 2, ... within a group, so the filled slots of (expert e, group g) are a
 * prefix [0, n[e, g]); at capacity factor 2 about half of them are empty.
 * The counts are taken from the routes as n[e, g] = max over the group's
 * kept choices sent to e of slot + 1 (0 for none): that covers every
 * filled slot whatever the order, and is the prefix's length here. They
 * are ordinary IR, built after the block's dispatch: max over (s, k) of
 * one_hot(expert) * (slot + 1), transposed to i32[E, G], so propagation
 * and the partitioner lay them out like any value. On a mesh they are
 * computed beside the routes, on the groups' devices, and reach the
 * experts' devices by an all_to_all of their own, a few bytes, which
 * combine.c makes ride in the tokens' all_to_all: the counts are built
 * before the dispatch, so that they are ready by its exchange, and a moe
 * layer still moves its tokens in one exchange each way (SPEC section 6).
 *
 * Which blocks. A forward pass over the IR after autodiff gives every
 * value a state: NONE (depends on no block's slots), ROW (its dims pos[0..2]
 * are the block's E, G and C, and its slot row (e, g, c) depends on that
 * block's row (e, g, c) alone, plus values of state NONE), or MIXED. The
 * block's dispatch (and the backward's weighted dispatch on the same
 * routes, the cotangent of its results) is ROW. Elementwise ops, layouts
 * that keep the three dims whole (a broadcast, a transpose, a reshape of
 * the dims after them, a slice, concat or cumsum along another dim),
 * reductions over other dims and einsums that keep the three letters are
 * ROW; combine (which reads routed rows only) is NONE. Anything else that
 * reads a ROW value is MIXED: a forward one disqualifies the block (the
 * body mixes slots: it keeps the padded computation, --explain says
 * which op). In the backward pass a reduction over the slots (a
 * broadcast's transpose) or an einsum that sums them (a weight's
 * gradient) is a gradient summed over slots: NONE, allowed.
 *
 * What is restricted, in a block that qualifies: an einsum whose result is
 * ROW, the slot letter in its ROW operand only, by rows (a row of the
 * result is its slot's); and a backward einsum of two ROW operands that
 * sums the slot letter, by depth (its terms at empty slots are products
 * with the cotangent's empty rows, which are zero: the weighted dispatch
 * writes zeros there, and each row-wise op of the backward keeps them
 * zero). Each gets the counts as a third operand (EinsumSpec.fill); the
 * GEMM lowering (lower.c, gslrt_sgemm_fill) runs each (expert, group) block
 * over its first n rows (or terms) and zeroes the result rows past them,
 * so no value of an empty slot is ever garbage: the rows a restricted
 * product leaves out are zeros, and the ops after it compute on them as on
 * any row. Nothing reads them into a result: combine reads routed slots,
 * the restricted products skip them, and the backward's reductions over
 * slots read the cotangent's zeros there. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

enum { ST_NONE, ST_ROW, ST_MIXED };

typedef struct Block {
  const Value *dispatch;        /* its forward dispatch */
  const Value *expert, *slot;   /* its routes */
  const Value *bad;             /* the first forward op that mixes its slots, or NULL */
  Value *fills;                 /* in the new program: the counts, i32[E, G] */
  int rows, depth;              /* products restricted */
} Block;

typedef struct Slots {
  Block *blk;         /* the moe blocks, in program order */
  int nblk;           /* entries of blk */
  int8_t *st;         /* per value: ST_* */
  int *b;             /* per ROW value: its block */
  int8_t (*pos)[3];   /* per ROW value: the dims of E, G and C */
  int8_t *kind;       /* per einsum: GF_ROWS or GF_DEPTH to restrict, else GF_NONE */
  char (*letters)[3]; /* per einsum to restrict: the letters of E, G and C */
} Slots;

static int find_block(const Slots *S, const Value *expert, const Value *slot) {
  for (int i = 0; i < S->nblk; i++)
    if (S->blk[i].expert == expert && S->blk[i].slot == slot)
      return i;
  return -1;
}

static void set_row(Slots *S, const Value *v, int b, const int *pos) {
  S->st[v->id] = ST_ROW;
  S->b[v->id] = b;
  for (int r = 0; r < 3; r++)
    S->pos[v->id][r] = (int8_t)pos[r];
}

/* v reads slot rows in a way that is not row by row */
static void mixed(Slots *S, const Value *v, int b) {
  S->st[v->id] = ST_MIXED;
  if (b >= 0 && !S->blk[b].bad)
    S->blk[b].bad = v;
}

static bool has_pos(const int8_t *pos, int d) { return pos[0] == d || pos[1] == d || pos[2] == d; }

/* an einsum with ROW operand(s) of block b, the first being operand k0 */
static void classify_einsum(Slots *S, const Value *v, int b, int k0) {
  const EinsumSpec *z = &v->ein;
  const int8_t *P = S->pos[v->args[k0]->id];
  char l[3] = {z->in[k0][P[0]], z->in[k0][P[1]], z->in[k0][P[2]]};
  int nrow = 0;
  for (int k = 0; k < z->nin; k++) {
    if (S->st[v->args[k]->id] != ST_ROW)
      continue;
    nrow++;
    const int8_t *Q = S->pos[v->args[k]->id];
    for (int r = 0; r < 3; r++)
      if (z->in[k][Q[r]] != l[r]) {
        mixed(S, v, b); /* two operands' slots meet on different letters */
        return;
      }
  }
  const char *oe = strchr(z->out, l[0]), *og = strchr(z->out, l[1]), *oc = strchr(z->out, l[2]);
  if (oc && oe && og) {
    int pos[3] = {(int)(oe - z->out), (int)(og - z->out), (int)(oc - z->out)};
    set_row(S, v, b, pos);
    bool other = z->nin == 2 && S->st[v->args[1 - k0]->id] != ST_ROW && strchr(z->in[1 - k0], l[2]);
    if (nrow == 1 && z->nin == 2 && !other) {
      S->kind[v->id] = GF_ROWS;
      memcpy(S->letters[v->id], l, 3);
    }
    return;
  }
  if (!oc && v->pass == PASS_BACKWARD) { /* a gradient summed over the slots */
    S->st[v->id] = ST_NONE;
    if (nrow == 2) {
      S->kind[v->id] = GF_DEPTH;
      memcpy(S->letters[v->id], l, 3);
    }
    return;
  }
  mixed(S, v, b);
}

static void classify(Slots *S, const Value *v) {
  int b = -1, k0 = -1;
  for (int k = 0; k < v->nargs; k++) {
    const Value *a = v->args[k];
    if (S->st[a->id] == ST_MIXED) {
      S->st[v->id] = ST_MIXED;
      return;
    }
    if (S->st[a->id] != ST_ROW)
      continue;
    if (b >= 0 && S->b[a->id] != b) { /* two blocks' slots meet */
      mixed(S, v, b);
      mixed(S, v, S->b[a->id]);
      return;
    }
    b = S->b[a->id];
    if (k0 < 0)
      k0 = k;
  }
  static const int first3[3] = {0, 1, 2};
  if (b < 0) {
    if (v->op == OP_DISPATCH && v->nargs == 3) {
      S->blk = xrealloc(S->blk, sizeof *S->blk * (size_t)(S->nblk + 1));
      S->blk[S->nblk] = (Block){v, v->args[1], v->args[2], NULL, NULL, 0, 0};
      set_row(S, v, S->nblk++, first3);
    } else if (v->op == OP_DISPATCH) { /* the weighted one: a cotangent of the block's results */
      int f = find_block(S, v->args[1], v->args[2]);
      if (f >= 0)
        set_row(S, v, f, first3);
    }
    return;
  }
  const Value *a = v->args[k0];
  const int8_t *P = S->pos[a->id];
  int pos[3] = {P[0], P[1], P[2]};
  switch (v->op) {
  case OP_UNARY:
  case OP_CAST:
  case OP_DROPOUT:
    set_row(S, v, b, pos);
    return;
  case OP_BINARY:
  case OP_SELECT:
    for (int k = 0; k < v->nargs; k++)
      if (S->st[v->args[k]->id] == ST_ROW && memcmp(S->pos[v->args[k]->id], P, 3)) {
        mixed(S, v, b);
        return;
      }
    set_row(S, v, b, pos);
    return;
  case OP_BROADCAST:
  case OP_TRANSPOSE:
    for (int r = 0; r < 3; r++) {
      pos[r] = -1;
      for (int i = 0; i < v->shape.rank; i++)
        if (v->perm[i] == P[r] && v->shape.d[i] == a->shape.d[P[r]])
          pos[r] = i;
      if (pos[r] < 0) {
        mixed(S, v, b);
        return;
      }
    }
    set_row(S, v, b, pos);
    return;
  case OP_RESHAPE:
    if (P[0] == 0 && P[1] == 1 && P[2] == 2 && v->shape.rank >= 3 && v->shape.d[0] == a->shape.d[0] &&
        v->shape.d[1] == a->shape.d[1] && v->shape.d[2] == a->shape.d[2])
      set_row(S, v, b, pos);
    else
      mixed(S, v, b);
    return;
  case OP_SLICE:
  case OP_CUMSUM:
  case OP_CONCAT:
    for (int k = 0; k < v->nargs; k++)
      if (S->st[v->args[k]->id] == ST_ROW && memcmp(S->pos[v->args[k]->id], P, 3)) {
        mixed(S, v, b);
        return;
      }
    if (has_pos(P, v->axis))
      mixed(S, v, b);
    else
      set_row(S, v, b, pos);
    return;
  case OP_REDUCE:
    if (v->rmask & ((1u << P[0]) | (1u << P[1]) | (1u << P[2]))) {
      if (v->pass == PASS_BACKWARD && v->fn == RF_SUM)
        S->st[v->id] = ST_NONE; /* a gradient summed over the slots */
      else
        mixed(S, v, b);
      return;
    }
    for (int r = 0; r < 3; r++)
      for (int i = 0; i < P[r]; i++)
        pos[r] -= (v->rmask >> i) & 1;
    set_row(S, v, b, pos);
    return;
  case OP_EINSUM:
    classify_einsum(S, v, b, k0);
    return;
  case OP_COMBINE:
    if (k0 == 0) { /* reads the routed rows alone */
      S->st[v->id] = ST_NONE;
      return;
    }
    mixed(S, v, b);
    return;
  default:
    mixed(S, v, b);
    return;
  }
}

/* ---- the rewrite ------------------------------------------------------------- */

/* the block's counts: i32[E, G], max over (s, k) of one_hot(expert) * (slot + 1) */
static Value *make_fills(const Build *bd, Value *expert, Value *slot, int64_t E, Span sp) {
  const Shape *rs = &slot->shape; /* [G, S, K] */
  Value *oh = ir_one_hot(bd, expert, E, sp);
  Value *s1 = ir_binary(bd, BF_ADD, ir_cast(bd, slot, DT_F32, sp), ir_const(bd, DT_F32, 1.0, sp), sp);
  Shape col = {4, {rs->d[0], rs->d[1], rs->d[2], 1}};
  Value *m =
      ir_reduce(bd, RF_MAX, ir_binary(bd, BF_MUL, oh, ir_reshape(bd, s1, col, sp), sp), (1u << 1) | (1u << 2), sp);
  int perm[2] = {1, 0};
  return ir_cast(bd, ir_transpose(bd, m, perm, sp), DT_I32, sp);
}

static Value *rewrite(void *ctx, Program *dst, const Value *v, Value **map) {
  Slots *S = ctx;
  Value *args[3];
  for (int k = 0; k < v->nargs && k < 3; k++)
    args[k] = map[v->args[k]->id];
  if (v->op == OP_DISPATCH && v->nargs == 3 && S->st[v->id] == ST_ROW) {
    Block *B = &S->blk[S->b[v->id]];
    if (B->bad)
      return NULL;
    /* the counts: beside the dispatch, in its pass, call site and region */
    Build at = build_at(dst, v->pass, v->site, v->region);
    B->fills = make_fills(&at, args[1], args[2], v->shape.d[0], v->span);
    return ir_copy(dst, v, args);
  }
  if (v->op != OP_EINSUM || !S->kind[v->id])
    return NULL;
  const char *l = S->letters[v->id];
  int b = -1;
  for (int k = 0; k < v->nargs; k++)
    if (S->st[v->args[k]->id] == ST_ROW)
      b = S->b[v->args[k]->id];
  Block *B = &S->blk[b];
  if (B->bad || !B->fills)
    return NULL;
  args[v->nargs] = B->fills;
  Build at = build_at(dst, v->pass, v->site, v->region); /* where v was built */
  Value *c = ir_add(&at, OP_EINSUM, v->dtype, v->shape, v->span, v->nargs + 1, args);
  ir_inherit(c, v);
  c->attr = v->attr;
  c->ein.fill[0] = l[0];
  c->ein.fill[1] = l[1];
  c->ein.fill[2] = '\0';
  c->ein.fill_of = l[2];
  /* G·S·K choices over the block's E·G·C slots (the dispatch's [E, G, C, M], the routes' [G, S, K]) */
  const Shape *ds = &B->dispatch->shape, *rs = &B->expert->shape;
  double share = (double)rs->d[1] * (double)rs->d[2] / ((double)ds->d[0] * (double)ds->d[2]);
  c->ein.fill_share = share < 1 ? share : 1;
  if (S->kind[v->id] == GF_ROWS)
    B->rows++;
  else
    B->depth++;
  return c;
}

Program *slots_skip_empty(Program *p, bool enable) {
  int n = p->nvalues;
  Slots S = {NULL, 0, xcalloc((size_t)n + 1, 1), xcalloc((size_t)n + 1, sizeof(int)),
             xcalloc((size_t)n + 1, sizeof *S.pos), xcalloc((size_t)n + 1, 1), xcalloc((size_t)n + 1, sizeof *S.letters)};
  for (int i = 0; i < n; i++)
    classify(&S, p->values[i]);
  bool any = false;
  for (int i = 0; i < S.nblk; i++)
    any |= enable && !S.blk[i].bad;
  Program *q = any ? ir_rewrite(p, false, rewrite, &S) : NULL;
  Program *noted = q ? q : p; /* the program the notes go with */
  noted->nmoe = S.nblk;
  noted->moe = arena_alloc(noted->arena, sizeof *noted->moe * (size_t)(S.nblk + 1));
  for (int i = 0; i < S.nblk; i++) {
    const Block *B = &S.blk[i];
    MoeNote *m = &noted->moe[i];
    m->span = B->dispatch->span;
    m->e = B->dispatch->shape.d[0];
    m->g = B->dispatch->shape.d[1];
    m->c = B->dispatch->shape.d[2];
    m->m = B->dispatch->shape.d[3];
    m->s = B->dispatch->args[1]->shape.d[1]; /* the routes, i32[G, S, K] */
    m->k = B->dispatch->args[1]->shape.d[2];
    m->bytes = plan_value_bytes(B->dispatch);
    m->rows = B->rows;
    m->depth = B->depth;
    m->recomputed = B->dispatch->pass == PASS_RECOMPUTE;
    if (B->bad) {
      Span sp = B->bad->span;
      const char *base = sp.src ? strrchr(sp.src->path, '/') : NULL;
      m->why = arena_printf(noted->arena, "the body mixes slots: the %s at %s:%u", op_name(B->bad->op),
                            !sp.src ? "-" : base ? base + 1 : sp.src->path, sp.line);
    } else if (!enable) {
      m->why = "-fno-moe-skip-empty";
    } else if (!B->rows && !B->depth)
      m->why = "no matrix product runs over its slots";
  }
  free(S.blk);
  free(S.st);
  free(S.b);
  free(S.pos);
  free(S.kind);
  free(S.letters);
  return q;
}
