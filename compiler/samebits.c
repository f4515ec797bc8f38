/* samebits.c — gslc --same-bits: every sum whose terms may lie on several
 * devices is added in an order fixed by the program, never by the mesh,
 * so that a program computes the same bits on every mesh it allows.
 *
 * Which sums: those the sharding rules say sum (rule.c: a value whose
 * rule has summed factors, and the operand dims they index,
 * rule_summed_dims): a product (a contraction, a moe product's fill
 * counts included) over a letter, a sum over a dimension, or a
 * scatter-add (its summed factors indexed by indices) over indices, that
 * a mesh axis splits in an operand (propagation's shardings name the axes
 * whatever their size, so the one-device program names them too). Such
 * a dimension of extent n is cut into V fixed blocks of n / V, V the
 * largest divisor of n not above the option's bound (12
 * unless --same-bits=N): the product or sum runs once per block, on the
 * same shapes on every mesh (each block is a batch of a batched product,
 * or a kept dimension of a reduction), which leaves one partial result a
 * block; the partials are then brought together whole (the partitioner's
 * resharding: an all-gather or all-to-all over the axes) and added in
 * block order, by a sum over the block dimension. A scatter-add's block
 * scatters into rows of its own, so the collective that completes the
 * blocks' tables adds one device's term to zeros. A mesh whose tiles of
 * the dimension are not whole blocks is refused at the sum, naming the
 * device counts that would do and the least bound under which this
 * mesh's would (the least divisor of n whose blocks its tiles hold
 * whole: a bound of it cuts n into that many), with a note at each call
 * the sum was inlined through, down to the user's line (its regions,
 * ir_note_calls).
 *
 * What makes it exact: a block is the same terms on one device as on
 * twelve, every product runs the runtime's pinned kernel (one chain of
 * FMAs an element, whatever the shape: runtime/pinned.c), and the final
 * sum reads the V partials in the same order. No sum is left to MPI's
 * order but the scatter-add's exact one (tests/samebits.sh checks the
 * examples' SPMD programs for it).
 *
 * The pass runs after propagation (it reads the axes of each operand's
 * dimensions) and before partitioning; it writes the new values'
 * shardings itself: a block dimension is split as the dimension it was
 * cut from, and the partials are annotated whole along it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

typedef struct SameBits {
  int bound;        /* the most blocks a dimension is cut into */
  const Program *g; /* the program being rewritten (for its mesh) */
  Program *dst;     /* the program being built */
  bool failed;      /* an error was reported */
  Value **remap;    /* g's value id -> its value in dst, to point sh_from at dst's values */
  SameNote *notes;  /* one per dimension blocked, for --explain (malloc'd) */
  int nnotes, cap;
  Diag *diag;       /* where refusals are reported */
} SameBits;

/* The largest divisor of n not above bound. */
static int64_t blocks_of(int64_t n, int bound) {
  for (int64_t v = bound < n ? bound : n; v > 1; v--)
    if (n % v == 0)
      return v;
  return 1;
}

/* The devices along dim d of sh (the product of its axes' sizes). */
static int64_t dim_devices(const Program *g, const Sharding *sh, int d) {
  int64_t n = 1;
  for (int i = 0; i < sh->naxes[d]; i++)
    n *= g->mesh.size[sh->axes[d][i]];
  return n;
}

/* sh with dim d split in two: the first part keeps d's axes (split=true)
 * or none, the second has none. */
static Sharding split_dim(const Sharding *sh, int rank, int d) {
  Sharding r = {0};
  r.partial = sh->partial;
  for (int i = 0, o = 0; i < rank; i++, o++) {
    if (i == d) {
      r.naxes[o] = sh->naxes[i];
      memcpy(r.axes[o], sh->axes[i], sizeof r.axes[o]);
      o++; /* the block's rows: whole */
      continue;
    }
    r.naxes[o] = sh->naxes[i];
    memcpy(r.axes[o], sh->axes[i], sizeof r.axes[o]);
  }
  return r;
}

static Shape split_shape(const Shape *s, int d, int64_t v) {
  Shape r = {0};
  r.rank = s->rank + 1;
  for (int i = 0, o = 0; i < s->rank; i++, o++) {
    if (i == d) {
      r.d[o++] = v;
      r.d[o] = s->d[i] / v;
      continue;
    }
    r.d[o] = s->d[i];
  }
  return r;
}

/* The kinds of sum, by their rule (rule.c), and what each is called (SameNote.kind). */
typedef enum SumKind { SK_NONE, SK_PRODUCT, SK_SCATTER, SK_SUM } SumKind;
static const char *const sum_names[] = {"", "product", "scatter-add", "sum"};

/* What v sums by its rule r: nothing, a contraction (a product), factors
 * an index operand indexes (a scatter-add), or its operand's dims (a sum). */
static SumKind sum_kind(const ShardRule *r, const Value *v) {
  if (!(rule_kinds(r) & (1u << FK_SUM)))
    return SK_NONE;
  if (r->contraction)
    return SK_PRODUCT;
  for (int k = 0; k < v->nargs; k++)
    if (rule_role(r, k) == AR_INDEX && rule_summed_dims(r, v, k))
      return SK_SCATTER;
  return SK_SUM;
}

/* What the sum v is called. */
static const char *sum_name(const Value *v) {
  ShardRule r;
  shard_rule(v, &r);
  return sum_names[sum_kind(&r, v)];
}

/* Whether a dimension of n in v blocks, split dev ways, gives each device
 * whole blocks: its tiles of blocks (ceil(v / dev) of n / v each, the last
 * tile padded) are its tiles of rows (ceil(n / dev), gsl.7 SHARDING). */
static bool whole_blocks(int64_t n, int64_t v, int64_t dev) {
  return (v + dev - 1) / dev * (n / v) == (n + dev - 1) / dev;
}

/* The least bound --same-bits=N under which dev devices hold whole blocks
 * of a dimension of n, 0 when none up to SAMEBITS_MAX_BOUND does: the
 * least divisor of n whose blocks they hold whole (n's blocks of one
 * always are), as a bound that divides n cuts it into that many blocks
 * (blocks_of) and a smaller one into fewer. */
static int64_t fitting_bound(int64_t n, int64_t dev) {
  for (int64_t v = 1; v <= n && v <= SAMEBITS_MAX_BOUND; v++)
    if (n % v == 0 && whole_blocks(n, v, dev))
      return v;
  return 0;
}

/* " of the backward pass" (or another pass's) for a value not of the forward pass, else "" */
static const char *of_pass(Arena *a, const Value *v) {
  return v->pass == PASS_FORWARD ? "" : arena_printf(a, " of the %s pass", ir_pass_name(v->pass));
}

/* Reports a refusal at `at`: the error, note (the remedy, or NULL), and
 * the calls `at` was inlined through, down to the user's line. */
static void refuse(SameBits *S, const Value *at, const char *note, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(S->diag, at->span, "--same-bits: this %s%s %s", sum_name(at), of_pass(S->dst->arena, at), msg);
  if (note)
    diag_note(S->diag, at->span, "%s", note);
  ir_note_calls(S->diag, S->g, at);
  S->failed = true;
}

/* The blocks of dim d (extent n) of sh, which the sum `at` runs over,
 * noted for --explain when more than one; 0 after reporting the error
 * where the mesh's devices along it do not hold whole blocks, with the
 * device counts that would and the least --same-bits=N that fits these. */
static int64_t dim_blocks(SameBits *S, const Value *at, const Sharding *sh, int d, int64_t n) {
  int64_t v = blocks_of(n, S->bound), dev = dim_devices(S->g, sh, d);
  char counts[160] = "";
  size_t len = 0;
  for (int64_t k = 1; k <= v && len + 24 < sizeof counts; k++)
    if (whole_blocks(n, v, k))
      len += (size_t)snprintf(counts + len, sizeof counts - len, "%s%lld", len ? ", " : "", (long long)k);
  if (whole_blocks(n, v, dev)) {
    if (v > 1) { /* a note for --explain */
      if (S->nnotes == S->cap) {
        S->cap = S->cap ? 2 * S->cap : 16;
        S->notes = xrealloc(S->notes, sizeof *S->notes * (size_t)S->cap);
      }
      SameNote *m = &S->notes[S->nnotes++];
      m->span = at->span;
      m->site = at->site;
      m->kind = sum_name(at);
      m->pass = at->pass;
      m->n = n;
      m->blocks = v;
      m->devices = dev;
      m->fits = arena_printf(S->dst->arena, "%s", counts);
    }
    return v;
  }
  Arena *a = S->dst->arena;
  int64_t f = fitting_bound(n, dev);
  const char *remedy =
      f ? arena_printf(a, "--same-bits=%lld cuts it into %lld blocks of %lld, whole on %lld devices (up to %lld a "
                          "device); every other sum is cut by that bound too",
                       (long long)f, (long long)f, (long long)(n / f), (long long)dev, (long long)((f + dev - 1) / dev))
        : arena_printf(a, "no --same-bits=N up to %d cuts it into blocks whole on %lld devices", SAMEBITS_MAX_BOUND,
                       (long long)dev);
  refuse(S, at, arena_printf(a, "it is split %s ways whole; %s", counts, remedy),
         "runs over a dimension of %lld split %lld ways, and %lld devices cannot each hold whole blocks of its %lld "
         "blocks of %lld (the most blocks up to %d that divide %lld)",
         (long long)n, (long long)dev, (long long)dev, (long long)v, (long long)(n / v), S->bound, (long long)n);
  return 0;
}

#define PARTIALS_WHY "the blocks' partials, added in block order (--same-bits)"

/* The value that stands for v: the partials of its blocks (batched), made
 * whole along the block dims and added in block order; why: what the
 * collectives that make them whole say (a partial sum still pending in
 * them is completed there too). */
static Value *finish(SameBits *S, Program *dst, const Value *v, Value *part, int nblock, const char *why) {
  Build at = build_at(dst, v->pass, v->site, v->region);
  /* whole along the block dims (leading), each other dim as v */
  Sharding whole = {0};
  for (int i = 0; i < v->shape.rank; i++) {
    whole.naxes[nblock + i] = v->sh.naxes[i];
    memcpy(whole.axes[nblock + i], v->sh.axes[i], sizeof whole.axes[0]);
  }
  Value *w = ir_annotate(&at, part, &whole, v->span);
  w->site = v->site;
  w->why = why;
  Value *r = ir_reduce(&at, RF_SUM, w, (1u << nblock) - 1, v->span);
  ir_inherit(r, v);
  return r;
}

/* The partials' sharding: the block dims (leading) split as the dims they
 * were cut from, each other dim as v's less those axes. */
static Sharding partial_sharding(const Value *v, const Sharding *blocks, int nblock) {
  Sharding r = {0};
  uint32_t used = 0;
  for (int b = 0; b < nblock; b++) {
    r.naxes[b] = blocks->naxes[b];
    memcpy(r.axes[b], blocks->axes[b], sizeof r.axes[b]);
    for (int i = 0; i < blocks->naxes[b]; i++)
      used |= 1u << blocks->axes[b][i];
  }
  for (int i = 0; i < v->shape.rank; i++)
    for (int k = 0; k < v->sh.naxes[i]; k++)
      if (!(used & (1u << v->sh.axes[i][k])))
        r.axes[nblock + i][r.naxes[nblock + i]++] = v->sh.axes[i][k];
  return r;
}

/* A reshape of x splitting dim d into (v, n / v), sharded accordingly. */
static Value *cut(Program *dst, const Value *at_v, Value *x, int d, int64_t v) {
  Build at = build_at(dst, at_v->pass, at_v->site, at_v->region);
  Value *r = ir_reshape(&at, x, split_shape(&x->shape, d, v), at_v->span);
  r->site = at_v->site;
  r->sh = split_dim(&x->sh, x->shape.rank, d);
  r->sh_origin = SO_PROPAGATED;
  r->sh_from = x;
  return r;
}

/* Whether operands ops (n of them, each cut once more) and a result of
 * rank `rank` stay within GSL_MAX_RANK dimensions; reports the error at
 * v otherwise (a sum left whole would not give the same bits). */
static bool room(SameBits *S, const Value *v, Value *const *ops, int n, int rank) {
  bool ok = rank <= GSL_MAX_RANK;
  for (int k = 0; k < n; k++)
    ok &= !ops[k] || ops[k]->shape.rank + 1 <= GSL_MAX_RANK;
  if (!ok)
    refuse(S, v, NULL, "needs more than %d dimensions to cut its split dimension into blocks", GSL_MAX_RANK);
  return ok;
}

static char unused_letter(const EinsumSpec *e) {
  for (const char *c = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"; *c; c++) {
    bool used = strchr(e->out, *c) != NULL;
    for (int j = 0; j < e->nin && !used; j++)
      used = strchr(e->in[j], *c) != NULL;
    if (!used)
      return *c;
  }
  return 0;
}

static Value *block_einsum(SameBits *S, Program *dst, const Value *v, const ShardRule *rule, Value **map) {
  const EinsumSpec *e = &v->ein;
  if (e->nin < 1 || e->nin > 2)
    return NULL;
  EinsumSpec ne = *e;
  Value *ops[3] = {map[v->args[0]->id], e->nin > 1 ? map[v->args[1]->id] : NULL,
                   e->fill[0] ? map[v->args[e->nin]->id] : NULL};
  Value *counts = ops[e->nin]; /* a moe product's fill counts (slots.c), or NULL */
  Sharding blocks = {0};
  int nblock = 0;
  char out[GSL_MAX_RANK + 1] = "";
  for (int j = 0; j < e->nin; j++)
    for (int d = 0; e->in[j][d]; d++) {
      char l = e->in[j][d];
      if (!(rule_summed_dims(rule, v, j) & (1u << d)) || !v->args[j]->sh.naxes[d] || strchr(out, l))
        continue; /* kept, not split here, or seen */
      int64_t nb = dim_blocks(S, v, &v->args[j]->sh, d, v->args[j]->shape.d[d]);
      if (!nb)
        return NULL;
      if (nb == 1)
        continue;
      char u = unused_letter(&ne);
      if (!u) {
        refuse(S, v, NULL, "has no letter left to name its blocks");
        return NULL;
      }
      if (!room(S, v, ops, e->nin, v->shape.rank + nblock + 1))
        return NULL;
      size_t no = strlen(out);
      out[no] = l;
      out[no + 1] = '\0';
      /* every operand with letter l: its dim cut into (u, l) */
      for (int k = 0; k < e->nin; k++) {
        char *at = strchr(ne.in[k], l);
        if (!at)
          continue;
        int dk = (int)(at - ne.in[k]);
        memmove(at + 1, at, strlen(at) + 1);
        *at = u;
        ops[k] = cut(dst, v, ops[k], dk, nb);
      }
      char *fat = counts ? strchr(ne.fill, l) : NULL;
      if (fat) { /* the counts, indexed by l too, cut alike */
        int dk = (int)(fat - ne.fill);
        memmove(fat + 1, fat, strlen(fat) + 1);
        *fat = u;
        counts = cut(dst, v, counts, dk, nb);
      }
      blocks.naxes[nblock] = v->args[j]->sh.naxes[d];
      memcpy(blocks.axes[nblock], v->args[j]->sh.axes[d], sizeof blocks.axes[0]);
      memmove(ne.out + nblock + 1, ne.out + nblock, strlen(ne.out + nblock) + 1);
      ne.out[nblock] = u;
      nblock++;
    }
  if (!nblock)
    return NULL;
  if (counts) {
    /* the counts' letters as the GEMM over filled slots reads them
     * (cg_einsum.c): the result's letters among them first, in the
     * result's order (the blocks lead), then the rest in their order */
    char order[GSL_MAX_RANK + 1] = "";
    int perm[GSL_MAX_RANK], n = 0;
    for (int i = 0; ne.out[i]; i++) {
      char *at = strchr(ne.fill, ne.out[i]);
      if (at) {
        perm[n] = (int)(at - ne.fill);
        order[n++] = ne.out[i];
      }
    }
    for (int i = 0; ne.fill[i]; i++)
      if (!strchr(ne.out, ne.fill[i])) {
        perm[n] = i;
        order[n++] = ne.fill[i];
      }
    order[n] = '\0';
    bool ident = true;
    for (int i = 0; i < n; i++)
      ident &= perm[i] == i;
    if (!ident) {
      Build tb = build_at(dst, v->pass, v->site, v->region);
      Sharding tsh = {0};
      for (int i = 0; i < n; i++) {
        tsh.naxes[i] = counts->sh.naxes[perm[i]];
        memcpy(tsh.axes[i], counts->sh.axes[perm[i]], sizeof tsh.axes[0]);
      }
      counts = ir_transpose(&tb, counts, perm, v->span);
      counts->site = v->site;
      counts->sh = tsh;
      counts->sh_origin = SO_PROPAGATED;
      strcpy(ne.fill, order);
    }
    ops[e->nin] = counts;
  }
  Shape ps = {0};
  ps.rank = v->shape.rank + nblock;
  for (int b = 0; b < nblock; b++) /* the extent of block letter b: from whichever operand has it */
    for (int j = 0; j < e->nin; j++) {
      char *at = strchr(ne.in[j], ne.out[b]);
      if (at) {
        ps.d[b] = ops[j]->shape.d[at - ne.in[j]];
        break;
      }
    }
  for (int i = 0; i < v->shape.rank; i++)
    ps.d[nblock + i] = v->shape.d[i];
  Build at = build_at(dst, v->pass, v->site, v->region);
  Value *p = ir_add(&at, OP_EINSUM, v->dtype, ps, v->span, e->nin + (counts != NULL), ops);
  p->site = v->site;
  p->attr = v->attr;
  p->ein = ne;
  p->sh = partial_sharding(v, &blocks, nblock);
  p->sh_origin = SO_PROPAGATED;
  p->sh_from = ops[0];
  return finish(S, dst, v, p, nblock, PARTIALS_WHY);
}

static Value *block_reduce(SameBits *S, Program *dst, const Value *v, const ShardRule *rule, Value **map) {
  const Value *a = v->args[0];
  uint32_t summed = rule_summed_dims(rule, v, 0);
  Value *x = map[a->id];
  uint32_t mask = 0;
  int nblock = 0, shift = 0;
  Sharding blocks = {0};
  int bdim[GSL_MAX_RANK]; /* x's (cut) dims that are blocks */
  for (int d = 0; d < a->shape.rank; d++) {
    int xd = d + shift;
    if (!(summed & (1u << d)))
      continue;
    mask |= 1u << xd;
    if (!a->sh.naxes[d])
      continue;
    int64_t nb = dim_blocks(S, v, &a->sh, d, a->shape.d[d]);
    if (!nb)
      return NULL;
    if (nb == 1)
      continue;
    if (!room(S, v, &x, 1, a->shape.rank + nblock + 1))
      return NULL;
    x = cut(dst, v, x, xd, nb);
    mask &= ~(1u << xd);
    bdim[nblock] = xd;
    blocks.naxes[nblock] = a->sh.naxes[d];
    memcpy(blocks.axes[nblock], a->sh.axes[d], sizeof blocks.axes[0]);
    nblock++;
    shift++;
    mask |= 1u << (xd + 1); /* the block's rows are summed */
  }
  if (!nblock)
    return NULL;
  /* the per-block sums keep the block dims where they lie among v's dims;
   * a transpose brings them to the front */
  Build at = build_at(dst, v->pass, v->site, v->region);
  Value *p = ir_reduce(&at, RF_SUM, x, mask, v->span);
  p->site = v->site;
  /* p's dims: x's unreduced dims in order (block dims among them) */
  int perm[GSL_MAX_RANK], np = 0, kept[GSL_MAX_RANK], nk = 0;
  for (int d = 0; d < x->shape.rank; d++)
    if (!(mask & (1u << d))) {
      bool isb = false;
      for (int b = 0; b < nblock; b++)
        isb |= bdim[b] == d;
      if (isb)
        perm[np++] = nk;
      kept[nk++] = isb;
    }
  for (int i = 0; i < nk; i++)
    if (!kept[i])
      perm[np++] = i;
  Sharding psh = partial_sharding(v, &blocks, nblock);
  bool ident = true;
  for (int i = 0; i < np; i++)
    ident &= perm[i] == i;
  if (ident) {
    p->sh = psh;
  } else {
    /* the reduce's own layout: p's dims in its order */
    Sharding raw = {0};
    for (int i = 0; i < np; i++) {
      raw.naxes[perm[i]] = psh.naxes[i];
      memcpy(raw.axes[perm[i]], psh.axes[i], sizeof raw.axes[0]);
    }
    p->sh = raw;
    p = ir_transpose(&at, p, perm, v->span);
    p->site = v->site;
    p->sh = psh;
  }
  p->sh_origin = SO_PROPAGATED;
  return finish(S, dst, v, p, nblock, PARTIALS_WHY);
}

/* A scatter-add whose indices a mesh axis splits: each block of indices
 * scatters into rows of its own (its index plus the block's number times
 * the table's rows), the tables of the blocks are brought together whole
 * (where a device holds a block, the others hold zeros: an exact sum) and
 * added in block order. */
static Value *block_scatter(SameBits *S, Program *dst, const Value *v, const ShardRule *rule, Value **map) {
  const Value *src = v->args[0], *idx = v->args[1];
  uint32_t summed = rule_summed_dims(rule, v, 1);
  Value *x = map[src->id], *ix = map[idx->id];
  int64_t rows = v->shape.d[0], nblocks = 1;
  Build at = build_at(dst, v->pass, v->site, v->region);
  Value *offset = NULL; /* each index's block number, in the cut indices' shape */
  int shift = 0, bd[GSL_MAX_RANK], nb = 0;
  int64_t ub[GSL_MAX_RANK];
  for (int d = 0; d < idx->shape.rank; d++) {
    if (!(summed & (1u << d)) || !idx->sh.naxes[d])
      continue;
    int64_t u = dim_blocks(S, v, &idx->sh, d, idx->shape.d[d]);
    if (!u)
      return NULL;
    if (u == 1)
      continue;
    if (!room(S, v, &x, 1, src->shape.rank + nb + 1))
      return NULL;
    x = cut(dst, v, x, d + shift, u);
    ix = cut(dst, v, ix, d + shift, u);
    bd[nb] = d + shift;
    ub[nb++] = u;
    nblocks *= u;
    shift++;
  }
  if (!nb)
    return NULL;
  int64_t stride = 1;
  for (int b = nb - 1; b >= 0; b--) { /* block number: the blocks' indices in C order */
    Value *io = ir_iota(&at, ix->shape, bd[b], v->span);
    io->sh = ix->sh;
    io->sh_origin = SO_PROPAGATED;
    Value *k = ir_const(&at, DT_I32, (double)(stride * rows), v->span);
    Value *t = ir_binary(&at, BF_MUL, io, k, v->span);
    t->sh = ix->sh;
    t->sh_origin = SO_PROPAGATED;
    if (offset) {
      offset = ir_binary(&at, BF_ADD, offset, t, v->span);
      offset->sh = ix->sh;
      offset->sh_origin = SO_PROPAGATED;
    } else {
      offset = t;
    }
    stride *= ub[b];
  }
  Value *ni = ir_binary(&at, BF_ADD, ix, offset, v->span);
  ni->sh = ix->sh;
  ni->sh_origin = SO_PROPAGATED;
  Value *sc = ir_scatter_add(&at, x, ni, nblocks * rows, v->span);
  sc->site = v->site;
  sc->sh = v->sh; /* rows whole, the rest as v */
  sc->sh_origin = SO_PROPAGATED;
  /* each row of the blocks' tables is filled on one device alone, zeros
   * elsewhere: the collective that completes it adds one term to zeros */
  sc->why = "the blocks' tables, each row filled on one device: exact (--same-bits)";
  Shape ps = {0};
  ps.rank = nb + v->shape.rank;
  for (int b = 0; b < nb; b++)
    ps.d[b] = ub[b];
  for (int i = 0; i < v->shape.rank; i++)
    ps.d[nb + i] = v->shape.d[i];
  Value *p = ir_reshape(&at, sc, ps, v->span);
  p->site = v->site;
  p->why = sc->why; /* where the partial sum is completed if the reshape runs whole, else at finish's annotation */
  Sharding none = {0};
  p->sh = partial_sharding(v, &none, nb);
  p->sh_origin = SO_PROPAGATED;
  return finish(S, dst, v, p, nb, sc->why); /* its tables' rows, each filled on one device */
}

/* Each kind of sum cut into blocks (NULL: none, or not cut). */
typedef Value *BlockFn(SameBits *S, Program *dst, const Value *v, const ShardRule *rule, Value **map);
static BlockFn *const blockers[] = {NULL, block_einsum, block_scatter, block_reduce}; /* by SumKind */

static Value *samebits_rewrite(void *ctx, Program *dst, const Value *v, Value **map) {
  SameBits *S = ctx;
  S->dst = dst;
  Value *r = NULL;
  if (!S->failed && dtype_is_float(v->dtype)) { /* an integer sum is exact in any order */
    ShardRule rule;
    shard_rule(v, &rule);
    BlockFn *block = blockers[sum_kind(&rule, v)];
    if (block)
      r = block(S, dst, v, &rule, map);
  }
  if (!r) {
    Value *stack[16], **args = v->nargs <= 16 ? stack : xmalloc(sizeof *args * (size_t)v->nargs);
    for (int j = 0; j < v->nargs; j++)
      args[j] = map[v->args[j]->id];
    r = ir_copy(dst, v, args);
    if (args != stack)
      free(args);
  }
  S->remap[v->id] = r;
  return r;
}

Program *samebits_block(const Program *g, int bound, Diag *d) {
  SameBits S = {bound, g, NULL, false, xcalloc((size_t)g->nvalues + 1, sizeof(Value *)), NULL, 0, 0, d};
  Program *r = ir_rewrite(g, false, samebits_rewrite, &S);
  /* the shardings' sources in r (g may be freed) */
  for (int i = 0; i < r->nvalues; i++) {
    Value *v = r->values[i];
    const Value *f = v->sh_from;
    if (f && f->id < g->nvalues && g->values[f->id] == f)
      v->sh_from = S.remap[f->id];
    if (v->sh_origin == SO_PROPAGATED && !v->sh_from) /* a value made here: its sharding follows its operand's */
      v->sh_from = v->nargs ? v->args[0] : NULL;
    if (v->sh_origin == SO_PROPAGATED && !v->sh_from)
      v->sh_origin = SO_NONE;
  }
  free(S.remap);
  r->same_bits = bound;
  r->nsame = S.nnotes;
  r->same = S.nnotes ? arena_alloc(r->arena, sizeof *r->same * (size_t)S.nnotes) : NULL;
  for (int i = 0; i < S.nnotes; i++)
    r->same[i] = S.notes[i];
  free(S.notes);
  if (S.failed) {
    ir_free(r);
    return NULL;
  }
  return r;
}
