/* autoshard.c — gslc --auto-shard: every value's sharding chosen by a cost
 * search, as an integer linear program (Alpa's intra-operator pass, Zheng
 * et al. 2022 section 4), solved by CBC.
 *
 * The graph. The global IR of the whole step (forward, backward, update;
 * before propagation) is cut into classes: a class is a root value and the
 * values that follow it. A value follows one of its operands when its
 * sharding is a function of that operand's, by its sharding rule (rule.c):
 * an op of one operand (unary, cast, transpose, reshape, broadcast, slice,
 * cumsum, one_hot, reduce), and an op whose operands are indexed alike
 * and keep no factor whole (elementwise: it follows the operand that is
 * not a broadcast or a constant, else the first). Every other value is a
 * root: sources (params, inputs, constants, draws), einsums, gathers,
 * scatter-adds, concats, the moe routing ops, and the user's annotations.
 * Merging the followers is what keeps the problem small: a layer norm's
 * dozen values are one class with the product before them.
 *
 * Strategies. A root's letters are its rule's factors (an einsum's
 * letters; a source's, concat's or annotation's dims; a gather's index
 * and row dims; a dispatch's groups and model dim), and a strategy gives
 * each mesh axis of more than one device one letter to cut, or none (an
 * axis may cut a letter the rule does not keep whole, where every shard
 * gets one of its elements; a cut its shards do not divide is priced on
 * its padded tiles, gsl.7 Uneven dimensions). A letter of the result
 * gives its cut to the result; a letter the result sums over (a
 * contracted one, a scatter-add's index) leaves a partial sum, pending
 * through the linear members that follow it, as the partitioner leaves
 * it (the rules' linear operands), and all-reduced at the end of that
 * chain. The strategy fixes the sharding of every member of the class
 * (each follower's from its operand's by the follower's rule, as
 * propagation and the partitioner read it) and of each operand the root
 * needs. An annotated param, input or value has the one strategy its
 * annotation gives.
 *
 * Costs, in seconds, from the machine description (machine.c); ties go
 * to the plan whose params and inputs hold fewer bytes a device:
 *   - compute: an einsum's 2 * (product of its letters' extents) FLOPs
 *     over the devices its cut letters share them among, at the GEMM rate
 *     of its operands' dtype; other ops the bytes they write, at the
 *     memory rate; layout ops that fuse into their users cost nothing;
 *   - communication: every resharding the partitioner would insert, by
 *     sharding.c's plan and byte model, each step a latency plus its bytes
 *     at the bandwidth of its slowest axis (shard_reshard_seconds): inside
 *     a class (a follower that needs its operand laid out otherwise: a
 *     slice of a cut axis, a reshape that cannot carry a cut, a partial
 *     sum resolved), and on each edge: a value of one class used by
 *     values of others, each layout its uses need made once (the
 *     partitioner reuses a resharding for a second use).
 *
 * The program. A binary x[c][s] per strategy s of class c, one per class
 * summing to 1. An edge's value has layout a (a function of its class's
 * strategy; strategies giving the same layout are grouped, X_U[a] the sum
 * of their x) and a use needs layout r (a function of the user's class's
 * strategy, X_V[r]); making r from a costs C[a][r]. Each use j gets a
 * transport, continuous e_j[a][r] >= 0 with sum_r e_j[a][r] = X_U[a] and
 * sum_a e_j[a][r] = X_V[r]: with one-hot x the only feasible e_j is the
 * product, so it needs no integrality, and the linear program's bound is
 * tight (the lm example's solves end at the root node). With one use the
 * transport carries the cost; with several, continuous n[a][r] >=
 * e_j[a][r] for every j pays C[a][r] once. A use whose side has one layout
 * is a cost on the other side's x alone. The objective is the sum of node
 * and edge costs: the estimated step time of one device.
 *
 * Size. The program over every mesh axis at once grows with the product
 * of the axes' choices (a rank-3 value on two axes: 16 layouts, 256
 * transport columns a use); past AUTO_JOINT_COLUMNS the search goes axis
 * by axis instead: each solve chooses one axis's cuts with the others
 * held, exactly, and the axes are taken in turn from the replicated plan
 * until a round changes nothing. On one axis, and on small programs, the
 * plan is the exact optimum; on two, a fixed point of exact steps.
 *
 * The result. Each value gets its class's chosen sharding, with origin
 * SO_AUTO (propagation keeps it as it keeps annotations); the partitioner
 * then builds the layouts the search costed (a moe route where its result
 * has its groups; partial sums pending as priced), and update.c still
 * decides the sharded optimizer updates. A class rooted at a scalar (a
 * constant's broadcasts and what follows them) has no choice and is
 * priced whole; its values are built as their uses need them
 * (fit_to_uses), which costs no more. The search is deterministic: the
 * same program, mesh and machine give the same problem, in the same
 * order, and CBC (one thread) the same answer. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <coin/Cbc_C_Interface.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gslc.h"

#define NO_LETTER 255
/* a param's or input's bytes a device, priced far below any real cost
 * (8 MiB: 0.08 us), so that of two plans that cost the same the one
 * holding less wins */
#define TIE_SECONDS_PER_BYTE 1e-14
/* One strategy: the letter each mesh axis cuts (NO_LETTER: none). */
typedef struct Strat {
  uint8_t lax[GSL_MAX_AXES];
} Strat;

typedef struct Class {
  const Value *root;
  ShardRule rule;  /* the root's rule (rule.c): its factors are the letters a strategy cuts */
  Strat *st;      /* strategies */
  int nst;
  int *members;   /* value ids, the root first, in program order */
  int nmembers;
  double *cost;   /* per strategy: compute and communication inside the class */
  bool *ok;       /* the strategies a solve may choose (NULL: all) */
  double *mem;    /* per strategy: the bytes a device holds of it (a param's, state's or input's root), or 0 */
  double *comp;   /* per strategy: the compute part of cost */
  bool *base;     /* the strategies a baseline allows (NULL: all), under ok */
  int *xcol;      /* per strategy: its x column in the solve, or -1 */
  int chosen;     /* the strategy the solver chose */
} Class;

/* A use of a value by a value of another class. */
typedef struct Use {
  int cls;   /* the consumer's class */
  int *bmap; /* its strategy -> the layout it needs (an index into the edge's layouts) */
} Use;

/* A value used by other classes: the layouts it may have (a function of
 * its class's strategy) and the layouts its uses need (functions of
 * theirs); each needed layout is made once (the partitioner reuses a
 * resharding), at cost c[a][r]. */
typedef struct Edge {
  int u;           /* the value's class */
  int na, nr;      /* its layouts, the layouts needed */
  int *amap;       /* U's strategy -> its layout */
  Use *use;        /* the uses */
  int nuse;
  double *c;       /* na x nr seconds */
} Edge;

typedef struct Auto {
  Program *p;
  const Machine *m;
  int *cls;          /* value id -> class */
  int *fol;          /* value id -> operand slot it follows, -1 for a root */
  int *midx;         /* value id -> index among its class's members */
  IrUses uses;       /* every value's uses (ir_uses): (consumer id, operand slot) pairs, consumers in program order */
  bool *lin;         /* value id -> a partial sum of it may stay pending (shard_linear_uses) */
  Class *c;
  int nc;
  Edge *e;
  int ne, cape;
  Sharding **msh;    /* per class: nst x nmembers member shardings */
  double budget;     /* the most bytes of params, states and inputs a device may hold; < 0: no bound */
  Arena *a;
} Auto;

/* ---- classes -------------------------------------------------------------- */

/* A broadcast or a constant: it is made in whatever layout its user
 * needs, so an elementwise op follows another of its operands. */
static bool takes_any_layout(const Value *v) {
  return v->op == OP_BROADCAST || v->op == OP_CONST || v->op == OP_IOTA;
}

/* The operand slot v follows, or -1: v is a root. By its rule (rule.c),
 * v follows its one operand, or, where its operands are indexed alike
 * and keep every factor cuttable (elementwise ops), the first that is not
 * made in any layout; the user's annotations are roots. */
static int follow_slot(const Value *v) {
  if (!v->nargs || ir_op(v->op)->cls == OC_ANNOTATION)
    return -1;
  ShardRule r;
  shard_rule(v, &r);
  int data = 0;
  for (int k = 0; k < v->nargs; k++)
    data += rule_role(&r, k) != AR_AUX;
  if (data == 1)
    return 0;
  if (!rule_alike(&r, v) || (rule_kinds(&r) & (1u << FK_WHOLE)))
    return -1;
  for (int k = 0; k < v->nargs; k++)
    if (!takes_any_layout(v->args[k]))
      return k;
  return 0;
}

/* One operand's sharding, for the rule's readings: the followed one's. */
typedef struct Only {
  int k;              /* its slot */
  const Sharding *sh; /* its sharding */
} Only;

static const Sharding *only(void *ctx, const Value *v, int k) {
  (void)v;
  const Only *o = ctx;
  return k == o->k ? o->sh : NULL;
}

/* The sharding follower v has when its followed operand has sh. */
static Sharding follow_sh(const Program *p, const Value *v, const Sharding *sh) {
  ShardRule rule;
  Only o = {follow_slot(v), sh};
  Sharding r = {0};
  const Value *from;
  shard_rule(v, &rule);
  if (!rule_forward(p, v, &rule, only, &o, &r, &from))
    memset(&r, 0, sizeof r);
  r.partial = 0;
  shard_fit(p, &r, &v->shape);
  return r;
}

/* What follower v needs operand k to be when v has sharding sh (the
 * partitioner's natural form); own: with the dims it sums or maxes over
 * as that operand has them (own_sh: the search prices a cut one itself,
 * class_cost), else whole. */
static Sharding follow_need(const Program *p, const Value *v, int k, const Sharding *sh, const Sharding *own_sh) {
  ShardRule rule;
  shard_rule(v, &rule);
  if (rule.reshape)
    return shard_reshape_need(p, sh, &v->args[k]->shape, &v->shape);
  Only o = {k, own_sh};
  return rule_operand(p, v, &rule, k, sh, own_sh ? only : NULL, &o, true);
}

/* ---- letters ----------------------------------------------------------------- */

/* dims indexed by letters (map[i] a letter or -1) cut as strategy st cuts them */
static Sharding by_letters(const Program *p, const Strat *st, const int8_t *map, int rank) {
  Sharding sh = {0};
  for (int i = 0; i < rank; i++)
    if (map[i] >= 0)
      for (int ax = 0; ax < p->mesh.naxes; ax++)
        if (st->lax[ax] == map[i])
          sh.axes[i][sh.naxes[i]++] = (uint8_t)ax;
  return sh;
}

static Sharding root_sh(const Program *p, const Class *c, const Strat *st) {
  return by_letters(p, st, c->rule.res, c->root->shape.rank);
}

/* The mesh axes that cut letters of mask under st. */
static uint32_t axes_on(const Program *p, const Strat *st, uint32_t mask) {
  uint32_t m = 0;
  for (int ax = 0; ax < p->mesh.naxes; ax++)
    if (st->lax[ax] != NO_LETTER && (mask & (1u << st->lax[ax])))
      m |= 1u << ax;
  return m;
}

/* What root v needs operand k to be under strategy st. */
static Sharding root_need(const Program *p, const Class *c, const Strat *st, int k) {
  return by_letters(p, st, rule_map(&c->rule, k), c->root->args[k]->shape.rank);
}

/* The letters of kind `kind` of a rule, as a mask. */
static uint32_t letters(const ShardRule *r, FactorKind kind) {
  uint32_t m = 0;
  for (int f = 0; f < r->nf; f++)
    if (r->kind[f] == kind)
      m |= 1u << f;
  return m;
}

/* Every strategy of rule s's letters on the mesh, in a fixed order; n
 * returned. Axes of one device cut nothing, and no axis a whole letter. */
static Strat *strategies(const Program *p, const ShardRule *s, int *n) {
  int naxes = p->mesh.naxes, cap = 1;
  for (int ax = 0; ax < naxes; ax++)
    cap *= p->mesh.size[ax] > 1 ? s->nf + 1 : 1;
  Strat *out = xcalloc((size_t)cap, sizeof *out);
  int cnt = 0;
  Strat cur;
  int choice[GSL_MAX_AXES] = {0}; /* 0: none, l + 1: letter l */
  for (;;) {
    bool ok = true;
    int64_t cut[RULE_MAX_FACTORS];
    for (int l = 0; l < s->nf; l++)
      cut[l] = 1;
    for (int ax = 0; ax < naxes; ax++) {
      cur.lax[ax] = choice[ax] ? (uint8_t)(choice[ax] - 1) : NO_LETTER;
      if (!choice[ax])
        continue;
      int l = choice[ax] - 1;
      cut[l] *= p->mesh.size[ax];
      if (s->kind[l] == FK_WHOLE || s->size[l] < cut[l])
        ok = false;
    }
    if (ok)
      out[cnt++] = cur;
    int ax = 0;
    for (; ax < naxes; ax++) {
      if (p->mesh.size[ax] <= 1)
        continue;
      if (++choice[ax] <= s->nf)
        break;
      choice[ax] = 0;
    }
    if (ax == naxes)
      break;
  }
  *n = cnt;
  return out;
}

/* The strategy of class c whose root cuts each dim over the axes sharding
 * sh (the user's annotation) cuts it with, or -1. Axes of one device are
 * not compared, nor the order of a dim's axes (a strategy orders them as
 * the mesh does; the annotated value keeps its own order). */
static int strategy_of(const Program *p, const Class *c, const Sharding *sh) {
  uint32_t big = 0;
  for (int ax = 0; ax < p->mesh.naxes; ax++)
    if (p->mesh.size[ax] > 1)
      big |= 1u << ax;
  for (int s = 0; s < c->nst; s++) {
    Sharding r = root_sh(p, c, &c->st[s]);
    bool same = true;
    for (int i = 0; i < c->root->shape.rank && same; i++)
      same = (shard_dim_axes(sh, i) & big) == shard_dim_axes(&r, i);
    if (same)
      return s;
  }
  return -1;
}

/* ---- costs ------------------------------------------------------------------- */

static double local_bytes(const Program *p, const Value *v, const Sharding *sh) {
  Shape local = shard_local_shape(p, &v->shape, sh);
  return (double)dtype_size(v->dtype) * (double)shape_elems(&local);
}

/* The seconds member v of class c takes to compute on one device, with
 * sharding sh (and its followed operand's, in_sh, for a follower): the
 * machine's rule for the op on the local shapes the strategy gives it
 * (a root's operands: as it needs them); a param's or input's bytes,
 * priced for ties. */
static double compute_seconds(const Auto *A, const Class *c, const Strat *st, const Value *v, const Sharding *sh,
                              const Sharding *in_sh) {
  const Program *p = A->p;
  if (v->op == OP_PARAM) /* ties go to the layout that holds fewer bytes a device */
    return local_bytes(p, v, sh) * TIE_SECONDS_PER_BYTE;
  Shape local = shard_local_shape(p, &v->shape, sh), args[GSL_MAX_RANK];
  const Shape *argp[GSL_MAX_RANK] = {0};
  for (int k = 0; k < v->nargs && k < GSL_MAX_RANK; k++) {
    Sharding need = in_sh ? (k == A->fol[v->id] ? *in_sh : *sh) : root_need(p, c, st, k);
    args[k] = shard_local_shape(p, &v->args[k]->shape, &need);
    argp[k] = &args[k];
  }
  double t = machine_op_seconds(A->m, p, v, &local, argp);
  return v->op == OP_INPUT ? t + local_bytes(p, v, sh) * TIE_SECONDS_PER_BYTE : t;
}

/* the seconds of an all-reduce of v's local bytes under sh over the axes of mask */
static double allreduce_seconds(const Auto *A, const Value *v, const Sharding *sh, uint32_t mask) {
  if (!mask)
    return 0;
  Sharding from = *sh, to = *sh;
  from.partial = mask;
  to.partial = 0;
  return shard_reshard_seconds(A->p, A->m, &v->shape, v->dtype, &from, &to);
}

/* Whether member v, with sharding sh (msh: its class's members'), may leave a partial sum
 * pending as the partitioner does (its rule's linear operands): its one use
 * is a linear member of its own class that follows it, needs it as it is,
 * and passes the sum on (a sum or difference would need its other
 * operand partial too, which a value of another class never is). */
static bool defers(const Auto *A, const Sharding *msh, const Value *v, const Sharding *sh) {
  if (!A->lin[v->id]) /* one use, linear */
    return false;
  int u = A->uses.list[2 * A->uses.first[v->id]];
  if (A->cls[u] != A->cls[v->id])
    return false;
  const Value *w = A->p->values[u];
  int k = A->fol[u];
  if (k < 0 || w->args[k] != v)
    return false;
  ShardRule rule;
  shard_rule(w, &rule);
  if (rule.joint && w->nargs > 1)
    return false;
  Sharding need = follow_need(A->p, w, k, &msh[A->midx[u]], sh);
  return shard_eq(&need, sh, v->shape.rank);
}

/* The cost inside class c under strategy s: members' compute, the
 * followers' reshardings of their followed operand, partial sums
 * (resolved where the partitioner resolves them: a partial sum stays
 * pending through a chain of linear members, and is all-reduced once,
 * at its end, on the smaller value there). */
static double class_cost(Auto *A, Class *c, int s, Sharding *msh) {
  const Program *p = A->p;
  const Strat *st = &c->st[s];
  double t = 0, comp = 0;
  uint32_t *pend = xcalloc((size_t)c->nmembers, sizeof *pend); /* each member's pending partial sums */
  for (int j = 0; j < c->nmembers; j++) {
    const Value *v = p->values[c->members[j]];
    const Sharding *sh = &msh[j];
    int k = A->fol[v->id];
    const Value *a = j ? v->args[k] : NULL;
    const Sharding *ash = j ? &msh[A->midx[a->id]] : NULL;
    double cs = compute_seconds(A, c, st, v, sh, ash);
    t += cs;
    comp += cs;
    uint32_t got = 0; /* the partial sums v has */
    if (j == 0) {
      got = axes_on(p, st, letters(&c->rule, FK_SUM) | letters(&c->rule, FK_MAX));
    } else {
      uint32_t in = pend[A->midx[a->id]], keep = in & ~shard_all_axes(sh, v->shape.rank);
      t += allreduce_seconds(A, a, ash, in & ~keep); /* the axes v cuts: resolved before it */
      got = keep;
      /* its operand as it needs it, the dims it sums or maxes over as they
       * are: cut, they leave the partial sums its rule says (argmax's dims,
       * whole, are gathered) */
      Sharding need = follow_need(p, v, k, sh, ash);
      t += shard_reshard_seconds(p, A->m, &a->shape, a->dtype, ash, &need);
      ShardRule rule;
      shard_rule(v, &rule);
      const int8_t *map = rule_map(&rule, k);
      for (int i = 0; i < a->shape.rank; i++)
        if (map[i] >= 0 && (rule.kind[map[i]] == FK_SUM || rule.kind[map[i]] == FK_MAX))
          got |= shard_dim_axes(&need, i);
    }
    if (got && defers(A, msh, v, sh))
      pend[j] = got;
    else
      t += allreduce_seconds(A, v, sh, got);
  }
  free(pend);
  c->comp[s] = comp;
  return t;
}

/* ---- the problem ------------------------------------------------------------- */

/* Cuts p's values into classes (roots in program order) and lists their
 * strategies, member shardings and inner costs. */
static void build_classes(Auto *A) {
  Program *p = A->p;
  int n = p->nvalues;
  A->cls = xcalloc((size_t)n + 1, sizeof *A->cls);
  A->fol = xcalloc((size_t)n + 1, sizeof *A->fol);
  A->midx = xcalloc((size_t)n + 1, sizeof *A->midx);
  A->lin = rule_linear_uses(p);
  A->uses = ir_uses(p);
  int *root_of = xcalloc((size_t)n + 1, sizeof *root_of);
  for (int i = 0; i < n; i++) {
    const Value *v = p->values[i];
    A->fol[i] = follow_slot(v);
    if (A->fol[i] >= 0) {
      A->cls[i] = A->cls[v->args[A->fol[i]]->id];
    } else {
      A->cls[i] = A->nc++;
      root_of[A->cls[i]] = i;
    }
  }
  A->c = xcalloc((size_t)A->nc + 1, sizeof *A->c);
  A->msh = xcalloc((size_t)A->nc + 1, sizeof *A->msh);
  for (int i = 0; i < n; i++)
    A->c[A->cls[i]].nmembers++;
  for (int ci = 0; ci < A->nc; ci++) {
    Class *c = &A->c[ci];
    c->members = xcalloc((size_t)c->nmembers, sizeof *c->members);
    c->nmembers = 0;
    c->root = p->values[root_of[ci]];
  }
  for (int i = 0; i < n; i++) {
    Class *c = &A->c[A->cls[i]];
    A->midx[i] = c->nmembers;
    c->members[c->nmembers++] = i;
  }
  free(root_of);
  for (int ci = 0; ci < A->nc; ci++) {
    Class *c = &A->c[ci];
    const Value *r = c->root;
    shard_rule(r, &c->rule);
    c->st = strategies(p, &c->rule, &c->nst);
    /* the user's annotations are kept: their one strategy */
    const Sharding *fixed = NULL;
    if (r->op == OP_ANNOTATE || ((r->op == OP_PARAM || r->op == OP_INPUT) && p->tensors[r->tensor].annotated))
      fixed = r->op == OP_ANNOTATE ? &r->sh : &p->tensors[r->tensor].sh;
    if (fixed) {
      int s = strategy_of(p, c, fixed);
      if (s < 0)
        die("autoshard: the annotation of %%%d is no strategy of its class", r->id);
      c->st[0] = c->st[s];
      c->nst = 1;
    }
    c->xcol = xcalloc((size_t)c->nst, sizeof *c->xcol);
    c->mem = xcalloc((size_t)c->nst, sizeof *c->mem);
    c->comp = xcalloc((size_t)c->nst, sizeof *c->comp);
    A->msh[ci] = xcalloc((size_t)c->nst * (size_t)c->nmembers, sizeof(Sharding));
    c->cost = xcalloc((size_t)c->nst, sizeof *c->cost);
    for (int s = 0; s < c->nst; s++) {
      Sharding *m = A->msh[ci] + (size_t)s * (size_t)c->nmembers;
      m[0] = root_sh(p, c, &c->st[s]);
      for (int j = 1; j < c->nmembers; j++) {
        const Value *v = p->values[c->members[j]];
        m[j] = follow_sh(p, v, &m[A->midx[v->args[A->fol[v->id]]->id]]);
      }
      c->cost[s] = class_cost(A, c, s, m);
      if (r->op == OP_PARAM || r->op == OP_INPUT) /* params, optimizer states, inputs */
        c->mem[s] = local_bytes(p, r, &m[0]);
    }
  }
}

static const Sharding *member_sh(const Auto *A, int vid, int s) {
  int ci = A->cls[vid];
  return &A->msh[ci][(size_t)s * (size_t)A->c[ci].nmembers + (size_t)A->midx[vid]];
}

/* What v (of class V, under V's strategy t) needs its operand k to be. */
static Sharding need_of(const Auto *A, const Value *v, int k, int t) {
  const Class *c = &A->c[A->cls[v->id]];
  if (c->root == v)
    return root_need(A->p, c, &c->st[t], k);
  return follow_need(A->p, v, k, member_sh(A, v->id, t), NULL);
}

/* Index of sh among the n shardings of list (rank r), appending it if new. */
static int group_of(Sharding *list, int *n, const Sharding *sh, int r) {
  for (int i = 0; i < *n; i++)
    if (shard_eq(&list[i], sh, r))
      return i;
  list[*n] = *sh;
  return (*n)++;
}

/* One edge per value used by values of other classes (a use inside its
 * own class that is not the followed operand is costed on the class). */
static void build_edges(Auto *A) {
  Program *p = A->p;
  int n = p->nvalues;
  for (int ui = 0; ui < n; ui++) {
    const Value *u = p->values[ui];
    int U = A->cls[ui], r = u->shape.rank;
    Class *cu = &A->c[U];
    Edge e = {U, 0, 0, NULL, NULL, 0, NULL};
    Sharding *as = xcalloc((size_t)cu->nst, sizeof *as), *rs = NULL;
    int caprs = 0;
    for (int j = A->uses.first[ui]; j < A->uses.first[ui + 1]; j++) {
      const Value *v = p->values[A->uses.list[2 * j]];
      int k = A->uses.list[2 * j + 1], V = A->cls[v->id];
      if (k == A->fol[v->id]) /* the follower's own operand: costed on its class */
        continue;
      Class *cv = &A->c[V];
      if (V == U) { /* x * x, or a value of the class used twice: a cost on the class */
        for (int t = 0; t < cv->nst; t++) {
          Sharding need = need_of(A, v, k, t);
          cv->cost[t] += shard_reshard_seconds(p, A->m, &u->shape, u->dtype, member_sh(A, ui, t), &need);
        }
        continue;
      }
      if (!e.amap) {
        e.amap = xcalloc((size_t)cu->nst, sizeof(int));
        for (int s2 = 0; s2 < cu->nst; s2++)
          e.amap[s2] = group_of(as, &e.na, member_sh(A, ui, s2), r);
        e.use = xcalloc((size_t)ir_uses_reads(&A->uses, ui), sizeof *e.use);
      }
      Use *us = &e.use[e.nuse++];
      us->cls = V;
      us->bmap = xcalloc((size_t)cv->nst, sizeof(int));
      if (e.nr + cv->nst > caprs) {
        caprs = e.nr + cv->nst;
        rs = xrealloc(rs, (size_t)caprs * sizeof *rs);
      }
      for (int t = 0; t < cv->nst; t++) {
        Sharding need = need_of(A, v, k, t);
        us->bmap[t] = group_of(rs, &e.nr, &need, r);
      }
    }
    if (!e.nuse) {
      free(as);
      free(rs);
      continue;
    }
    e.c = xcalloc((size_t)e.na * (size_t)e.nr, sizeof *e.c);
    bool any = false;
    for (int a = 0; a < e.na; a++)
      for (int b = 0; b < e.nr; b++)
        any |= (e.c[a * e.nr + b] = shard_reshard_seconds(p, A->m, &u->shape, u->dtype, &as[a], &rs[b])) > 0;
    free(as);
    free(rs);
    int V0 = e.use[0].cls;
    if (any && e.nuse == 1 && (e.na == 1 || A->c[V0].nst == 1)) { /* a cost on one side alone */
      for (int s2 = 0; A->c[V0].nst == 1 && s2 < cu->nst; s2++)
        cu->cost[s2] += e.c[e.amap[s2] * e.nr + e.use[0].bmap[0]];
      for (int t = 0; A->c[V0].nst > 1 && t < A->c[V0].nst; t++)
        A->c[V0].cost[t] += e.c[e.use[0].bmap[t]];
      any = false;
    }
    if (!any) {
      free(e.amap);
      for (int j = 0; j < e.nuse; j++)
        free(e.use[j].bmap);
      free(e.use);
      free(e.c);
      continue;
    }
    if (A->ne == A->cape) {
      A->cape = A->cape ? 2 * A->cape : 256;
      A->e = xrealloc(A->e, (size_t)A->cape * sizeof *A->e);
    }
    A->e[A->ne++] = e;
  }
}

/* ---- the integer linear program ------------------------------------------- */

/* The seconds edge e costs with class ci at strategy s and every other
 * class at its chosen one. */
static double edge_cost(const Auto *A, const Edge *e, int ci, int s) {
  int a = e->amap[e->u == ci ? s : A->c[e->u].chosen];
  double t = 0;
  for (int j = 0; j < e->nuse; j++) {
    int r = e->use[j].bmap[e->use[j].cls == ci ? s : A->c[e->use[j].cls].chosen];
    bool first = true; /* each needed layout is made once */
    for (int i = 0; i < j && first; i++)
      first = e->use[i].bmap[e->use[i].cls == ci ? s : A->c[e->use[i].cls].chosen] != r;
    if (first)
      t += e->c[a * e->nr + r];
  }
  return t;
}

/* The cost of class ci under strategy s, every other class at its chosen
 * strategy: what --explain compares the choice with. */
static double local_cost(const Auto *A, int ci, int s) {
  double t = A->c[ci].cost[s];
  for (int i = 0; i < A->ne; i++) {
    const Edge *e = &A->e[i];
    bool touches = e->u == ci;
    for (int j = 0; j < e->nuse && !touches; j++)
      touches = e->use[j].cls == ci;
    if (touches)
      t += edge_cost(A, e, ci, s);
  }
  return t;
}

/* The constraint matrix, built as triplets, then by column. */
typedef struct Lp {
  int ncols, nrows, n, cap;
  int *row, *col;
  double *val;
  double *obj, *lo, *hi, *rlo, *rhi; /* grown with the columns and rows */
  int capc, capr;
} Lp;

static int lp_col(Lp *l, double obj) {
  if (l->ncols == l->capc) {
    l->capc = l->capc ? 2 * l->capc : 1024;
    l->obj = xrealloc(l->obj, (size_t)l->capc * sizeof *l->obj);
    l->lo = xrealloc(l->lo, (size_t)l->capc * sizeof *l->lo);
    l->hi = xrealloc(l->hi, (size_t)l->capc * sizeof *l->hi);
  }
  l->obj[l->ncols] = obj * 1e6; /* the solver works in microseconds: seconds are tiny numbers */
  l->lo[l->ncols] = 0;
  l->hi[l->ncols] = 1;
  return l->ncols++;
}

static int lp_row(Lp *l, double lo, double hi) {
  if (l->nrows == l->capr) {
    l->capr = l->capr ? 2 * l->capr : 1024;
    l->rlo = xrealloc(l->rlo, (size_t)l->capr * sizeof *l->rlo);
    l->rhi = xrealloc(l->rhi, (size_t)l->capr * sizeof *l->rhi);
  }
  l->rlo[l->nrows] = lo;
  l->rhi[l->nrows] = hi;
  return l->nrows++;
}

static void lp_set(Lp *l, int row, int col, double val) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 4096;
    l->row = xrealloc(l->row, (size_t)l->cap * sizeof *l->row);
    l->col = xrealloc(l->col, (size_t)l->cap * sizeof *l->col);
    l->val = xrealloc(l->val, (size_t)l->cap * sizeof *l->val);
  }
  l->row[l->n] = row;
  l->col[l->n] = col;
  l->val[l->n++] = val;
}

#define LP_INF 1e30 /* CBC's infinity */
#define LP_MAX_OBJ 1e9 /* the dearest price the solver is given, microseconds */

/* X_U[a] - the sum of U's allowed x whose strategies give layout a - into row */
static void lp_group(Lp *l, const Class *c, const int *map, int g, int row, double coef) {
  for (int s = 0; s < c->nst; s++)
    if (map[s] == g && c->xcol[s] >= 0)
      lp_set(l, row, c->xcol[s], coef);
}

/* Which layouts of map (over c's strategies) an allowed strategy gives. */
static bool *reach(const Class *c, const int *map, int n) {
  bool *r = xcalloc((size_t)n + 1, sizeof *r);
  for (int s = 0; s < c->nst; s++)
    if (c->xcol[s] >= 0)
      r[map[s]] = true;
  return r;
}

/* Solves the program over the strategies each class allows (Class.ok,
 * NULL: all), setting Class.chosen; false when the solver proves no
 * optimum in its time (the best plan it found, if any, is still chosen
 * and *optimal says not). */
static bool solve(Auto *A, AutoShard *r, double limit, bool *optimal) {
  Lp l = {0};
  for (int ci = 0; ci < A->nc; ci++) {
    Class *c = &A->c[ci];
    int row = lp_row(&l, 1, 1); /* one strategy a class */
    for (int s = 0; s < c->nst; s++) {
      c->xcol[s] = -1;
      if ((!c->ok || c->ok[s]) && (!c->base || c->base[s]))
        lp_set(&l, row, c->xcol[s] = lp_col(&l, c->cost[s]), 1);
    }
  }
  int nx = l.ncols;
  if (A->budget >= 0) { /* the memory budget: one row over every class's bytes */
    int row = lp_row(&l, -LP_INF, A->budget);
    for (int ci = 0; ci < A->nc; ci++)
      for (int s = 0; s < A->c[ci].nst; s++)
        if (A->c[ci].xcol[s] >= 0 && A->c[ci].mem[s] > 0)
          lp_set(&l, row, A->c[ci].xcol[s], A->c[ci].mem[s]);
  }
  for (int i = 0; i < A->ne; i++) {
    Edge *e = &A->e[i];
    const Class *cu = &A->c[e->u];
    bool *ar = reach(cu, e->amap, e->na);
    int *ncol = xcalloc((size_t)e->na * (size_t)e->nr, sizeof *ncol);
    for (int k = 0; k < e->na * e->nr; k++)
      ncol[k] = -1;
    bool several = e->nuse > 1;
    if (several) /* n[a][r] >= e_j[a][r] for every use j pays c[a][r] once */
      for (int a = 0; a < e->na; a++)
        for (int b = 0; b < e->nr; b++)
          if (ar[a] && e->c[a * e->nr + b] > 0)
            ncol[a * e->nr + b] = lp_col(&l, e->c[a * e->nr + b]);
    /* a transport e_j[a][r] >= 0 for each use j, with row sums X_U[a] and
     * column sums X_V[r] (with one use, it carries the cost itself) */
    for (int j = 0; j < e->nuse; j++) {
      const Class *cv = &A->c[e->use[j].cls];
      bool *br = reach(cv, e->use[j].bmap, e->nr);
      int *arow = xcalloc((size_t)e->na, sizeof *arow), *brow = xcalloc((size_t)e->nr, sizeof *brow);
      for (int a = 0; a < e->na; a++)
        if (ar[a])
          lp_group(&l, cu, e->amap, a, arow[a] = lp_row(&l, 0, 0), -1);
      for (int b = 0; b < e->nr; b++)
        if (br[b])
          lp_group(&l, cv, e->use[j].bmap, b, brow[b] = lp_row(&l, 0, 0), -1);
      for (int a = 0; a < e->na; a++)
        for (int b = 0; b < e->nr; b++) {
          if (!ar[a] || !br[b])
            continue;
          int col = lp_col(&l, several ? 0 : e->c[a * e->nr + b]);
          lp_set(&l, arow[a], col, 1);
          lp_set(&l, brow[b], col, 1);
          if (ncol[a * e->nr + b] >= 0) {
            int row = lp_row(&l, 0, LP_INF);
            lp_set(&l, row, ncol[a * e->nr + b], 1);
            lp_set(&l, row, col, -1);
          }
        }
      free(arow);
      free(brow);
      free(br);
    }
    free(ar);
    free(ncol);
  }
  /* by column */
  int *start = xcalloc((size_t)l.ncols + 1, sizeof *start), *index = xcalloc((size_t)l.n + 1, sizeof *index);
  double *value = xcalloc((size_t)l.n + 1, sizeof *value);
  for (int k = 0; k < l.n; k++)
    start[l.col[k] + 1]++;
  for (int j = 0; j < l.ncols; j++)
    start[j + 1] += start[j];
  int *at = xcalloc((size_t)l.ncols + 1, sizeof *at);
  for (int k = 0; k < l.n; k++) { /* stable: rows in the order they were set */
    int q = start[l.col[k]] + at[l.col[k]]++;
    index[q] = l.row[k];
    value[q] = l.val[k];
  }
  free(at);

  /* the prices, in microseconds, scaled down where the dearest is past
   * LP_MAX_OBJ (a slow machine file, a huge program): CBC asserts on an
   * objective coefficient near 1e25 and its tolerances fail long before.
   * Only the solver sees the scale: a plan's cost is reckoned apart. */
  double dearest = 0;
  for (int j = 0; j < l.ncols; j++)
    dearest = fmax(dearest, fabs(l.obj[j]));
  if (dearest > LP_MAX_OBJ)
    for (int j = 0; j < l.ncols; j++)
      l.obj[j] *= LP_MAX_OBJ / dearest;
  Cbc_Model *m = Cbc_newModel();
  Cbc_loadProblem(m, l.ncols, l.nrows, start, index, value, l.lo, l.hi, l.obj, l.rlo, l.rhi);
  for (int j = 0; j < nx; j++)
    Cbc_setInteger(m, j);
  Cbc_setLogLevel(m, getenv("GSL_CBC_LOG") ? atoi(getenv("GSL_CBC_LOG")) : 0);
  if (getenv("GSL_CBC_LOG"))
    fprintf(stderr, "autoshard: %d classes, %d edges, %d columns (%d integer), %d rows, %d nonzeros\n", A->nc, A->ne,
            l.ncols, nx, l.nrows, l.n);
  Cbc_setParameter(m, "threads", "1");
  /* the relaxation is tight (see the header): no preprocessing, cuts or
   * heuristics, which take a quarter of the time and find nothing more */
  Cbc_setParameter(m, "preprocess", "off");
  Cbc_setParameter(m, "cuts", "off");
  Cbc_setParameter(m, "heuristicsOnOff", "off");
  Cbc_setMaximumSeconds(m, limit);
  Cbc_solve(m);
  *optimal = Cbc_isProvenOptimal(m) != 0;
  const double *x = Cbc_getColSolution(m);
  /* a plan: one strategy a class at 1 (the solver's best, proven or not) */
  bool found = x != NULL && !Cbc_isProvenInfeasible(m);
  for (int ci = 0; ci < A->nc && found; ci++) {
    Class *c = &A->c[ci];
    int best = -1;
    for (int s = 0; s < c->nst; s++)
      if (c->xcol[s] >= 0 && x[c->xcol[s]] > 0.5)
        best = s;
    if (best < 0)
      found = false;
    else
      c->chosen = best;
  }
  r->columns += l.ncols;
  r->rows += l.nrows;
  r->integers += nx;
  r->nonzeros += l.n;
  r->solves++;
  Cbc_deleteModel(m);
  free(start);
  free(index);
  free(value);
  free(l.row);
  free(l.col);
  free(l.val);
  free(l.obj);
  free(l.lo);
  free(l.hi);
  free(l.rlo);
  free(l.rhi);
  return found;
}

/* The estimated seconds of the plan every class's chosen strategy makes. */
static double plan_cost(const Auto *A) {
  double t = 0;
  for (int ci = 0; ci < A->nc; ci++)
    t += A->c[ci].cost[A->c[ci].chosen];
  for (int i = 0; i < A->ne; i++)
    t += edge_cost(A, &A->e[i], -1, 0);
  return t;
}

/* Whether strategy s of class c agrees with cur on every axis but axis. */
static bool agrees(const Auto *A, const Class *c, int s, const Strat *cur, int axis) {
  for (int ax = 0; ax < A->p->mesh.naxes; ax++)
    if (ax != axis && c->st[s].lax[ax] != cur->lax[ax])
      return false;
  return true;
}

/* The search: the whole program at once where it is small enough
 * (AUTO_JOINT_COLUMNS, a size the solver finishes in about a second),
 * else one mesh axis at a time, every other axis's cuts held, over the
 * axes in turn until a round changes nothing: each step exact over its
 * axis, the plan a fixed point of them. */
#define AUTO_JOINT_COLUMNS 20000
#define AUTO_SECONDS 60 /* the most one solve may take: past it, its best plan so far */
#define AUTO_ROUNDS 4   /* rounds over the axes at most */
static bool search(Auto *A, AutoShard *r) {
  int cols = 0, big = 0;
  for (int ax = 0; ax < A->p->mesh.naxes; ax++)
    big += A->p->mesh.size[ax] > 1;
  for (int ci = 0; ci < A->nc; ci++)
    cols += A->c[ci].nst;
  for (int i = 0; i < A->ne; i++)
    cols += A->e[i].nuse * A->e[i].na * A->e[i].nr;
  bool optimal = true, one;
  if (big <= 1 || cols <= AUTO_JOINT_COLUMNS) {
    r->joint = true;
    bool ok = solve(A, r, AUTO_SECONDS, &one);
    r->optimal = ok && one;
    return ok;
  }
  /* axis by axis, from the replicated plan (or the least memory's) */
  Strat *cur = xcalloc((size_t)A->nc, sizeof *cur);
  for (int ci = 0; ci < A->nc; ci++) {
    Class *c = &A->c[ci];
    c->ok = xcalloc((size_t)c->nst, sizeof *c->ok);
    for (int ax = 0; ax < GSL_MAX_AXES; ax++)
      cur[ci].lax[ax] = NO_LETTER;
    int least = -1; /* under a budget, from the plan that holds least (which fits, if any does) */
    for (int s = 0; s < c->nst; s++)
      if ((!c->base || c->base[s]) && (least < 0 || c->mem[s] < c->mem[least]))
        least = s;
    if (c->nst == 1 || A->budget >= 0 || c->base)
      cur[ci] = c->st[c->nst == 1 ? 0 : least];
  }
  /* an axis is solved again only when another axis's cuts changed since
   * its last solve: with them unchanged it would find what it found */
  bool ok = true, changed = true, dirty[GSL_MAX_AXES];
  for (int ax = 0; ax < GSL_MAX_AXES; ax++)
    dirty[ax] = true;
  for (int round = 0; ok && changed && round < AUTO_ROUNDS; round++) {
    changed = false;
    for (int ax = 0; ok && ax < A->p->mesh.naxes; ax++) {
      if (A->p->mesh.size[ax] <= 1 || !dirty[ax])
        continue;
      dirty[ax] = false;
      for (int ci = 0; ci < A->nc; ci++) {
        Class *c = &A->c[ci];
        for (int s = 0; s < c->nst; s++)
          c->ok[s] = agrees(A, c, s, &cur[ci], ax);
      }
      ok = solve(A, r, AUTO_SECONDS, &one);
      optimal &= one;
      bool moved = false;
      for (int ci = 0; ok && ci < A->nc; ci++) {
        const Strat *st = &A->c[ci].st[A->c[ci].chosen];
        moved |= memcmp(st->lax, cur[ci].lax, sizeof st->lax) != 0;
        cur[ci] = *st;
      }
      for (int other = 0; moved && other < A->p->mesh.naxes; other++)
        dirty[other] |= other != ax;
      changed |= moved;
    }
    r->rounds = round + 1;
  }
  for (int ci = 0; ci < A->nc; ci++) {
    free(A->c[ci].ok);
    A->c[ci].ok = NULL;
  }
  free(cur);
  r->optimal = ok && optimal;
  return ok;
}

/* ---- the baselines ----------------------------------------------------------- */

/* The chosen plan's compute and communication seconds and held bytes. */
static void totals(const Auto *A, double *t) {
  double all = plan_cost(A);
  t[0] = t[2] = 0;
  for (int ci = 0; ci < A->nc; ci++) {
    t[0] += A->c[ci].comp[A->c[ci].chosen];
    t[2] += A->c[ci].mem[A->c[ci].chosen];
  }
  t[1] = all - t[0];
}

/* The totals of two plans to compare the choice with, the chosen plan
 * kept: replication (every class uncut but the annotated) and pure data
 * parallel (every unannotated input cut on its first dim over as many
 * axes as divide it, every unannotated param and state whole, the rest
 * searched as the plan was). */
static void baselines(Auto *A, AutoShard *r) {
  int *saved = xcalloc((size_t)A->nc + 1, sizeof *saved);
  for (int ci = 0; ci < A->nc; ci++)
    saved[ci] = A->c[ci].chosen;
  totals(A, r->totals[0]);
  for (int ci = 0; ci < A->nc; ci++) {
    Class *c = &A->c[ci];
    for (int s = 0; s < c->nst; s++)
      if (axes_on(A->p, &c->st[s], ~0u) == 0)
        c->chosen = s;
  }
  totals(A, r->totals[2]);
  for (int ci = 0; ci < A->nc; ci++) {
    Class *c = &A->c[ci];
    const Value *v = c->root;
    if (c->nst == 1 || (v->op != OP_PARAM && v->op != OP_INPUT))
      continue;
    c->base = xcalloc((size_t)c->nst, sizeof *c->base);
    int best = 0, most = -1;
    for (int s = 0; s < c->nst; s++) {
      int n = 0; /* axes on the first dim; any axis elsewhere disqualifies */
      bool only = true;
      for (int ax = 0; ax < A->p->mesh.naxes; ax++)
        if (c->st[s].lax[ax] != NO_LETTER) {
          n++;
          only &= c->st[s].lax[ax] == 0 && v->op == OP_INPUT;
        }
      if (only && n > most) {
        most = n;
        best = s;
      }
    }
    c->base[best] = true;
  }
  double budget = A->budget;
  A->budget = -1; /* the baseline as it is, whatever it holds */
  int solves = r->solves, rounds = r->rounds;
  int sizes[4] = {r->columns, r->integers, r->rows, r->nonzeros};
  bool joint = r->joint, optimal = r->optimal;
  if (search(A, r))
    totals(A, r->totals[1]);
  else
    r->totals[1][0] = -1;
  r->solves = solves, r->rounds = rounds, r->joint = joint, r->optimal = optimal;
  r->columns = sizes[0], r->integers = sizes[1], r->rows = sizes[2], r->nonzeros = sizes[3];
  A->budget = budget;
  for (int ci = 0; ci < A->nc; ci++) {
    free(A->c[ci].base);
    A->c[ci].base = NULL;
    A->c[ci].chosen = saved[ci];
  }
  free(saved);
  r->compared = true;
}

/* ---- the result -------------------------------------------------------------- */

static const char *strat_str(Arena *a, const Program *p, const Class *c, int s) {
  Value tmp = *c->root;
  tmp.sh = root_sh(p, c, &c->st[s]);
  return sharding_str(a, p, &tmp);
}

/* The values of a class whose root is a scalar (a constant's broadcasts,
 * and what follows them) have no layout to choose: the search prices them
 * whole, and a use that cuts one slices it, which moves nothing. Built
 * whole, though, each would be computed whole first; so each takes the
 * layout its uses all need, last use first (a whole value is a slice
 * away from any layout), and computes only its part. */
static void fit_to_uses(Auto *A) {
  Program *p = A->p;
  int n = p->nvalues;
  const int *first = A->uses.first, *list = A->uses.list, *out = A->uses.outputs;
  for (int i = n - 1; i >= 0; i--) {
    Value *v = p->values[i];
    const Class *c = &A->c[A->cls[i]];
    if (v->sh_origin != SO_AUTO || !v->shape.rank || c->root->shape.rank || out[i] || first[i] == first[i + 1])
      continue;
    Sharding want = {0};
    bool agree = true;
    for (int j = first[i]; j < first[i + 1] && agree; j++) {
      const Value *u = p->values[list[2 * j]];
      int k = list[2 * j + 1];
      const Class *cu = &A->c[A->cls[u->id]];
      Sharding need = cu->root == u ? root_need(p, cu, &cu->st[cu->chosen], k) : follow_need(p, u, k, &u->sh, NULL);
      need.partial = 0;
      if (j == first[i])
        want = need;
      else
        agree = shard_eq(&want, &need, v->shape.rank);
    }
    if (agree)
      v->sh = want;
  }
}

static void apply(Auto *A) {
  Program *p = A->p;
  for (int i = 0; i < p->nvalues; i++) {
    Value *v = p->values[i];
    if (v->sh_origin == SO_ANNOTATED)
      continue;
    v->sh = *member_sh(A, i, A->c[A->cls[i]].chosen);
    v->sh.partial = 0;
    v->sh_origin = SO_AUTO;
  }
  fit_to_uses(A);
  /* a recomputed value runs as its forward value does, on the same tiles
   * (the same bits: gsl.7, RECOMPUTATION) */
  for (int i = 0; i < p->nvalues; i++) {
    Value *v = p->values[i];
    if (v->remat_of && v->sh_origin == SO_AUTO)
      v->sh = v->remat_of->sh;
  }
  /* each param's and input's choice against its best alternative, the
   * rest of the plan as chosen */
  for (int ti = 0; ti < p->ntensors; ti++) {
    Tensor *t = &p->tensors[ti];
    if (t->kind == TK_STATE || !t->value)
      continue;
    int ci = A->cls[t->value->id];
    const Class *c = &A->c[ci];
    double mine = local_cost(A, ci, c->chosen), best = -1;
    int alt = -1;
    for (int s = 0; s < c->nst; s++) {
      if (s == c->chosen)
        continue;
      double x = local_cost(A, ci, s);
      if (alt < 0 || x < best) {
        alt = s;
        best = x;
      }
    }
    if (t->annotated)
      t->auto_note = "annotated: kept";
    else if (alt < 0)
      t->auto_note = arena_printf(p->arena, "%s: the only layout (%.3g ms)", strat_str(A->a, p, c, c->chosen), mine * 1e3);
    else
      t->auto_note = arena_printf(p->arena, "%s: %.3g ms; the best alternative %s: %.3g ms",
                                  strat_str(A->a, p, c, c->chosen), mine * 1e3, strat_str(A->a, p, c, alt), best * 1e3);
  }
}

static void free_auto(Auto *A) {
  for (int ci = 0; ci < A->nc; ci++) {
    free(A->c[ci].st);
    free(A->c[ci].members);
    free(A->c[ci].cost);
    free(A->c[ci].xcol);
    free(A->c[ci].mem);
    free(A->c[ci].comp);
    free(A->msh[ci]);
  }
  for (int i = 0; i < A->ne; i++) {
    free(A->e[i].amap);
    for (int j = 0; j < A->e[i].nuse; j++)
      free(A->e[i].use[j].bmap);
    free(A->e[i].use);
    free(A->e[i].c);
  }
  free(A->e);
  free(A->c);
  free(A->msh);
  free(A->cls);
  free(A->fol);
  free(A->midx);
  ir_uses_free(&A->uses);
  free(A->lin);
  arena_free(A->a);
}

bool auto_shard(Program *p, const Machine *m, double budget, bool compare, AutoShard *report, Diag *d) {
  memset(report, 0, sizeof *report);
  if (!p->mesh.naxes)
    return true;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  Auto A = {0};
  A.p = p;
  A.m = m;
  A.a = arena_new();
  A.budget = budget;
  build_classes(&A);
  build_edges(&A);
  /* the least bytes the mesh allows: each class's own least (they add) */
  report->least = 0;
  int big[3] = {-1, -1, -1};  /* the classes holding most at their least, largest first */
  double *least = xcalloc((size_t)A.nc + 1, sizeof *least);
  for (int ci = 0; ci < A.nc; ci++) {
    least[ci] = A.c[ci].mem[0];
    for (int s = 1; s < A.c[ci].nst; s++)
      least[ci] = A.c[ci].mem[s] < least[ci] ? A.c[ci].mem[s] : least[ci];
    report->least += least[ci];
    for (int k = 0, c = ci; k < 3 && least[c] > 0; k++)
      if (big[k] < 0 || least[c] > least[big[k]]) {
        int t = big[k];
        big[k] = c;
        if ((c = t) < 0)
          break;
      }
  }
  report->largest = "";
  for (int k = 0; k < 3 && big[k] >= 0; k++) {
    const Value *r = A.c[big[k]].root;
    const Tensor *t = &p->tensors[r->tensor];
    report->largest = arena_printf(p->arena, "%s%s%s %.0f%s", report->largest, k ? ", " : "", t->name, least[big[k]],
                                   t->annotated ? " (as annotated)" : "");
  }
  free(least);
  if (budget >= 0 && report->least > budget) {
    free_auto(&A);
    report->infeasible = true;
    return false;
  }
  report->classes = A.nc;
  report->edges = A.ne;
  report->values = p->nvalues;
  bool ok = search(&A, report);
  if (ok) {
    report->objective = plan_cost(&A);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (compare)
      baselines(&A, report);
    apply(&A);
  }
  if (!ok)
    clock_gettime(CLOCK_MONOTONIC, &t1);
  report->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  free_auto(&A);
  if (!ok && budget >= 0)
    diag_fatal(d, "--auto-shard: the solver found no plan within the budget in %d s", AUTO_SECONDS);
  else if (!ok)
    diag_fatal(d, "--auto-shard: the solver found no plan in %d s", AUTO_SECONDS);
  return ok;
}
