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
 * product leaves out are zeros.
 *
 * The elementwise ops between the products (a bias add, an activation,
 * their backward, the casts under --precision bf16) are restricted too:
 * a ROW value that is a unary, binary, select, cast or dropout, its C dim
 * after its E and G dims, gets the counts as a note (Value.rows, its dims
 * of E, G and C in rows_dim), not an operand: it reads no element of
 * them. The partitioner gives the local op the counts' tile on its own
 * cuts of E and G, where those are at hand without moving a byte (the
 * tile a product of the block already reads, or a renaming), its C dim
 * whole; the plan keeps that tile live to the op's loop; and codegen
 * (cg_fuse.c, emit_rows) runs the loop nest of a value with a buffer
 * whose every value names the same counts over c < n[e, g] alone, and
 * sets the rows past it to zero bytes (a memset: the zero of f32, bf16
 * and i32). A skipped row thus holds zero, as a restricted product's
 * does, and the invariant stands: no value of an empty slot is garbage.
 * A filled row is computed as before, from the same filled rows (a ROW
 * value's row reads its operands' same row alone), so its bits do not
 * change; what an empty row holds reaches no result: combine reads
 * routed slots (below the count, which is their largest + 1), the
 * restricted products skip them, and the backward's reductions over
 * slots (a bias's gradient) read zeros there, as they read the
 * cotangent's zeros before (the weighted dispatch writes zeros in empty
 * slots, and a row-wise op of zeros and finite values gave zero, as the
 * zeros written now do). A value inlined into its user's loop is computed
 * where that loop runs; a value without the note (a reduction, a layout
 * op, a loop shared with a value that names other counts or none) runs
 * over every slot and computes on the zero rows as on any row.
 * -fno-moe-skip-loops keeps the products' restriction without this one. */
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
  int loops;                    /* elementwise values restricted (Value.rows) */
  bool products;                /* it has products to restrict (the loops are restricted with them) */
} Block;

typedef struct Slots {
  Block *blk;         /* the moe blocks, in program order */
  int nblk;           /* entries of blk */
  int8_t *st;         /* per value: ST_* */
  int *b;             /* per ROW value: its block */
  int8_t (*pos)[3];   /* per ROW value: the dims of E, G and C */
  bool loops;         /* elementwise values bounded too (else the products alone) */
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
      S->blk[S->nblk] = (Block){v, v->args[1], v->args[2], NULL, NULL, 0, 0, 0, false};
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

/* the block of an einsum to restrict: its ROW operands' */
static int product_block(const Slots *S, const Value *v) {
  int b = -1;
  for (int k = 0; k < v->nargs; k++)
    if (S->st[v->args[k]->id] == ST_ROW)
      b = S->b[v->args[k]->id];
  return b;
}

/* Whether ROW value v, its E, G and C at dims pos, is computed element by
 * element at its own index (a loop nest of its own when it has a buffer)
 * with its C dim inside its E and G dims, so that a loop over C can stop
 * at the count of the (e, g) it is in. */
static bool row_loop(const Value *v, const int8_t *pos) {
  bool elementwise = v->op == OP_UNARY || v->op == OP_BINARY || v->op == OP_SELECT || v->op == OP_CAST ||
                     v->op == OP_DROPOUT;
  return elementwise && v->nargs <= 3 && pos[0] < pos[2] && pos[1] < pos[2];
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
  if (S->loops && S->st[v->id] == ST_ROW && row_loop(v, S->pos[v->id])) {
    Block *B = &S->blk[S->b[v->id]];
    if (B->bad || !B->fills || !B->products)
      return NULL;
    Value *c = ir_copy(dst, v, args);
    c->rows = B->fills;
    memcpy(c->rows_dim, S->pos[v->id], sizeof c->rows_dim);
    B->loops++;
    return c;
  }
  if (v->op != OP_EINSUM || !S->kind[v->id])
    return NULL;
  const char *l = S->letters[v->id];
  Block *B = &S->blk[product_block(S, v)];
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

Program *slots_skip_empty(Program *p, bool enable, bool loops) {
  int n = p->nvalues;
  Slots S = {NULL, 0, xcalloc((size_t)n + 1, 1), xcalloc((size_t)n + 1, sizeof(int)),
             xcalloc((size_t)n + 1, sizeof *S.pos), loops, xcalloc((size_t)n + 1, 1),
             xcalloc((size_t)n + 1, sizeof *S.letters)};
  for (int i = 0; i < n; i++)
    classify(&S, p->values[i]);
  for (int i = 0; i < n; i++)
    if (S.kind[i])
      S.blk[product_block(&S, p->values[i])].products = true;
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
    m->loops = B->loops;
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
