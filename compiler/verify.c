/* verify.c — ir_verify: what every pass must keep true of the IR, checked
 * after each one (QBE's ssacheck, for tensors).
 *
 * Method: one walk over the values in program order. Each value's id
 * matches its place, its operands come before it, its op is in ops.def
 * with the arity the table gives, and its dtype, shape and attributes are
 * what its op makes of its operands' (an einsum's letters against the
 * extents of its operands and result included). Every value's sharding
 * names real mesh axes once each and cuts its dimensions evenly; in the
 * SPMD program its shape is the tile of its global shape, and collectives
 * change shapes as their kind says. Tensors and outputs must name values
 * of the program. A failure is a compiler bug: the report names the value
 * and what is wrong, and the driver dies. */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "gslc.h"

/* ---- the verifier --------------------------------------------------------- */

typedef struct Check {
  FILE *err;   /* where to report */
  bool ok;     /* nothing broken so far */
} Check;

static void fail(Check *c, const Value *v, const char *fmt, ...) {
  c->ok = false;
  if (!c->err)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(c->err, "ir_verify: %%%d (%s): ", v ? v->id : -1, v && v->op < OP__COUNT ? op_name(v->op) : "-");
  vfprintf(c->err, fmt, ap);
  fputc('\n', c->err);
  va_end(ap);
}

static bool same(const Shape *a, const Shape *b) { return shape_eq(a, b); }

/* an einsum's letters against its operands' and result's shapes */
static void verify_einsum(Check *c, const Value *v) {
  const EinsumSpec *e = &v->ein;
  int nfill = e->fill[0] != '\0';
  if (e->nin + nfill != v->nargs || e->nin < 1 || e->nin > 2) {
    fail(c, v, "spec names %d operands%s, the op has %d", e->nin, nfill ? " and fill counts" : "", v->nargs);
    return;
  }
  int64_t size[128];
  for (int i = 0; i < 128; i++)
    size[i] = -1;
  for (int k = 0; k < e->nin; k++) {
    const Value *a = v->args[k];
    if ((int)strlen(e->in[k]) != a->shape.rank) {
      fail(c, v, "operand %d has rank %d, its letters \"%s\" say %d", k + 1, a->shape.rank, e->in[k],
           (int)strlen(e->in[k]));
      return;
    }
    if (a->dtype != v->args[0]->dtype || a->dtype != (v->dtype == DT_F32 && a->dtype == DT_BF16 ? DT_BF16 : v->dtype))
      fail(c, v, "operand %d's dtype differs from the result's (bf16 operands give f32)", k + 1);
    for (int i = 0; e->in[k][i]; i++) {
      int l = e->in[k][i] & 127;
      if (size[l] >= 0 && size[l] != a->shape.d[i])
        fail(c, v, "letter '%c' is %" PRId64 " and %" PRId64, l, size[l], a->shape.d[i]);
      size[l] = a->shape.d[i];
    }
  }
  if ((int)strlen(e->out) != v->shape.rank) {
    fail(c, v, "result has rank %d, its letters \"%s\" say %d", v->shape.rank, e->out, (int)strlen(e->out));
    return;
  }
  for (int i = 0; e->out[i]; i++)
    if (size[e->out[i] & 127] != v->shape.d[i])
      fail(c, v, "result letter '%c' has extent %" PRId64 ", the operands say %" PRId64, e->out[i], v->shape.d[i],
           size[e->out[i] & 127]);
  for (int k = 0; k < e->nin; k++)
    for (int i = 0; e->in[k][i]; i++)
      if (!strchr(e->out, e->in[k][i]) && !(e->nin == 2 && strchr(e->in[1 - k], e->in[k][i])))
        fail(c, v, "letter '%c' of operand %d is in neither the other operand nor the result", e->in[k][i], k + 1);
  if (!nfill) {
    if (e->fill_of)
      fail(c, v, "fill letter '%c' without fill counts", e->fill_of);
    return;
  }
  const Value *f = v->args[e->nin];
  if (f->dtype != DT_I32 || (int)strlen(e->fill) != f->shape.rank) {
    fail(c, v, "fill counts (%s of rank %d) do not fit their letters \"%s\"", dtype_name(f->dtype),
         f->shape.rank, e->fill);
    return;
  }
  for (int i = 0; e->fill[i]; i++)
    if (size[e->fill[i] & 127] != f->shape.d[i] || e->fill[i] == e->fill_of)
      fail(c, v, "fill letter '%c' has extent %" PRId64 ", the operands say %" PRId64, e->fill[i], f->shape.d[i],
           size[e->fill[i] & 127]);
  if (!e->fill_of || size[e->fill_of & 127] < 0)
    fail(c, v, "the letter the fill counts bound, '%c', is in no operand", e->fill_of ? e->fill_of : '?');
}

static void verify_collective(Check *c, const Program *p, const Value *v) {
  const Value *a = v->args[0];
  int64_t n = 1;
  for (int i = 0; i < v->ngroup; i++)
    n *= v->group[i] < p->mesh.naxes ? p->mesh.size[v->group[i]] : 0;
  Shape want = a->shape;
  if (!p->spmd || n <= 0 || v->ngroup < 1 || (v->op != OP_ALL_REDUCE && (v->axis < 0 || v->axis >= want.rank))) {
    fail(c, v, "collective outside an SPMD program, or with a bad group or dim");
    return;
  }
  if (v->op == OP_ALL_REDUCE && v->fn != RF_SUM && v->fn != RF_MAX)
    fail(c, v, "all_reduce must sum or take the maximum");
  /* uneven tiles (a dim of n over k shards: tiles of ceil(n / k)): a
   * gathered dim is at most n tiles, more than n - 1 of them (the last
   * members may hold padding only, so at least one element) */
  int64_t got = v->shape.rank == want.rank && v->axis >= 0 && v->axis < want.rank ? v->shape.d[v->axis] : -1;
  if (v->op == OP_ALL_GATHER) {
    if (got < 1 || got > want.d[v->axis] * n)
      fail(c, v, "all_gather's dim is not at most the group's tiles");
    want.d[v->axis] = got;
  } else if (v->op == OP_REDUCE_SCATTER || v->op == OP_LOCAL_SLICE || v->op == OP_ALL_TO_ALL) {
    if (want.d[v->axis] < n)
      fail(c, v, "a dim of %" PRId64 " cut into %" PRId64 " blocks", want.d[v->axis], n);
    want.d[v->axis] = (want.d[v->axis] + n - 1) / n;
  }
  if (v->op == OP_ALL_TO_ALL) {
    if (v->axis2 < 0 || v->axis2 >= want.rank || v->axis2 == v->axis) {
      fail(c, v, "bad all_to_all dims");
    } else {
      int64_t got2 = v->shape.rank == want.rank ? v->shape.d[v->axis2] : -1;
      if (got2 < 1 || got2 > want.d[v->axis2] * n)
        fail(c, v, "all_to_all's joined dim is not at most the group's tiles");
      want.d[v->axis2] = got2;
    }
  }
  if (v->op == OP_COLLECTIVE_PERMUTE) {
    uint32_t m1 = 0, m2 = 0;
    for (int i = 0; i < v->ngroup; i++) {
      m1 |= 1u << v->group[i];
      m2 |= 1u << v->group2[i];
    }
    if (m1 != m2)
      fail(c, v, "collective_permute between different axes");
  }
  if (!same(&want, &v->shape) || a->dtype != v->dtype)
    fail(c, v, "collective result shape or dtype does not follow from its operand");
  /* a rider sits right after its carrier, on its group, its operand ready
   * before the carrier's call */
  const Value *r = v->rider, *k = v->carrier;
  if (r && (v->op != OP_ALL_TO_ALL || r->op != OP_ALL_TO_ALL || r->carrier != v || r->id != v->id + 1 ||
            r->args[0]->id >= v->id || r->ngroup != v->ngroup ||
            memcmp(r->group, v->group, (size_t)v->ngroup) || r->rider))
    fail(c, v, "its rider is not an all_to_all on its group right after it, ready before it");
  if (k && (k->rider != v || v->rider))
    fail(c, v, "rides an all_to_all that does not carry it");
}

/* the value's sharding names real axes once each and cuts dims evenly; in
 * the SPMD program its shape is the tile of its global shape */
static void verify_sharding(Check *c, const Program *p, const Value *v) {
  uint32_t used = 0;
  const Shape *g = p->spmd ? &v->gshape : &v->shape;
  Shape local = *g;
  if (g->rank != v->shape.rank) {
    fail(c, v, "global and local ranks differ");
    return;
  }
  for (int i = 0; i < GSL_MAX_RANK; i++) {
    if (i >= g->rank) {
      if (v->sh.naxes[i])
        fail(c, v, "sharding cuts dim %d of a rank-%d value", i, g->rank);
      continue;
    }
    int64_t shards = 1;
    for (int j = 0; j < v->sh.naxes[i]; j++) {
      int ax = v->sh.axes[i][j];
      if (ax >= p->mesh.naxes || (used & (1u << ax))) {
        fail(c, v, "sharding names mesh axis %d badly (unknown or twice)", ax);
        return;
      }
      used |= 1u << ax;
      shards *= p->mesh.size[ax];
    }
    if (g->d[i] < shards)
      fail(c, v, "dim %d (%" PRId64 ") is cut into more shards (%" PRId64 ")", i, g->d[i], shards);
    local.d[i] = (local.d[i] + shards - 1) / shards;
  }
  if (p->mesh.naxes && (v->sh.partial >> p->mesh.naxes))
    fail(c, v, "partial over an axis the mesh lacks");
  if (p->spmd && !same(&local, &v->shape))
    fail(c, v, "local shape is not the tile of the global shape under its sharding");
}

static void verify_value(Check *c, const Program *p, const Value *v, int index) {
  if (v->id != index)
    fail(c, v, "id does not match its position");
  if ((unsigned)v->op >= OP__COUNT) {
    fail(c, v, "op not in ops.def");
    return;
  }
  if (v->shape.rank < 0 || v->shape.rank > GSL_MAX_RANK) {
    fail(c, v, "rank out of range");
    return;
  }
  for (int i = 0; i < v->shape.rank; i++)
    if (v->shape.d[i] <= 0)
      fail(c, v, "non-positive extent");
  if (shape_elems(&v->shape) > GSL_MAX_ELEMS || shape_elems(&v->shape) <= 0)
    fail(c, v, "more than 2^40 elements");
  const OpInfo *oi = ir_op(v->op);
  if (oi->nargs >= 0 && v->nargs != oi->nargs) {
    fail(c, v, "wrong number of operands");
    return;
  }
  if ((oi->flags & OF_SPMD) && !p->spmd)
    fail(c, v, "an SPMD-only op in the global program");
  for (int j = 0; j < v->nargs; j++)
    if (!v->args[j] || v->args[j]->id >= index || p->values[v->args[j]->id] != v->args[j]) {
      fail(c, v, "operand not defined before use");
      return;
    }
  verify_sharding(c, p, v);
  const Value *a = v->nargs ? v->args[0] : NULL;
  switch (v->op) {
  case OP_PARAM:
  case OP_INPUT:
    if (v->tensor < 0 || v->tensor >= p->ntensors || p->tensors[v->tensor].value != v)
      fail(c, v, "tensor index does not lead back to the value");
    else if (!same(&p->tensors[v->tensor].shape, &v->gshape) || p->tensors[v->tensor].dtype != v->dtype)
      fail(c, v, "shape or dtype differs from its declaration");
    break;
  case OP_CONST:
    break;
  case OP_IOTA:
    if (v->dtype != DT_I32 || v->axis < 0 || v->axis >= v->shape.rank)
      fail(c, v, "iota is i32 with its axis one of its dims");
    else if (v->gshape.d[v->axis] > (int64_t)INT32_MAX + 1)
      fail(c, v, "iota's indices do not fit i32");
    break;
  case OP_RNG:
    if (v->dtype != DT_F32 || (v->fn != RNG_UNIFORM && v->fn != RNG_NORMAL))
      fail(c, v, "random draws are f32 uniform or normal");
    break;
  case OP_DROPOUT:
    if (!dtype_is_float(v->dtype) || a->dtype != v->dtype || !same(&a->shape, &v->shape))
      fail(c, v, "dropout is of a float operand, whose dtype and shape it keeps");
    else if (!(v->fval > 0 && v->fval < 1))
      fail(c, v, "dropout's p is outside (0, 1)");
    else if (v->stream >= p->nstreams)
      fail(c, v, "dropout's stream was not handed out");
    break;
  case OP_UNARY:
    if (v->fn < 0 || v->fn >= UF__COUNT)
      fail(c, v, "unary function not in unary.def");
    /* fall through */
  case OP_CAST:
  case OP_ANNOTATE:
    if (!same(&a->shape, &v->shape))
      fail(c, v, "operand shape differs from result");
    if (v->op != OP_CAST && a->dtype != v->dtype)
      fail(c, v, "operand dtype differs from result");
    break;
  case OP_BINARY:
    if (v->fn < 0 || v->fn >= BF__COUNT)
      fail(c, v, "binary function not in binary.def");
    /* fall through */
  case OP_SELECT:
    for (int j = 0; j < v->nargs; j++)
      if (!same(&v->args[j]->shape, &v->shape))
        fail(c, v, "operand %d's shape differs from the result's", j + 1);
    for (int j = v->op == OP_SELECT; j < v->nargs; j++)
      if (v->args[j]->dtype != v->dtype)
        fail(c, v, "operand %d's dtype differs from the result's", j + 1);
    break;
  case OP_RESHAPE:
    if (shape_elems(&a->shape) != shape_elems(&v->shape) || a->dtype != v->dtype)
      fail(c, v, "reshape changes the element count or dtype");
    break;
  case OP_TRANSPOSE: {
    unsigned seen = 0;
    if (a->shape.rank != v->shape.rank || a->dtype != v->dtype)
      fail(c, v, "transpose changes the rank or dtype");
    for (int i = 0; i < v->shape.rank; i++) {
      int q = v->perm[i];
      if (q < 0 || q >= a->shape.rank || (seen & (1u << q)) || a->shape.d[q] != v->shape.d[i])
        fail(c, v, "bad permutation");
      else
        seen |= 1u << q;
    }
    break;
  }
  case OP_BROADCAST: {
    unsigned seen = 0;
    if (a->dtype != v->dtype)
      fail(c, v, "broadcast changes the dtype");
    for (int i = 0; i < v->shape.rank; i++) {
      int q = v->perm[i];
      if (q >= a->shape.rank || (q >= 0 && ((seen & (1u << q)) || (a->shape.d[q] != 1 && a->shape.d[q] != v->shape.d[i]))))
        fail(c, v, "bad broadcast dimension map");
      else if (q >= 0)
        seen |= 1u << q;
    }
    if (a->shape.rank < 32 && seen != (1u << a->shape.rank) - 1)
      fail(c, v, "broadcast drops an operand dim");
    break;
  }
  case OP_SLICE: {
    Shape want = a->shape;
    if (v->axis < 0 || v->axis >= a->shape.rank || v->start < 0 ||
        v->start + v->shape.d[v->axis] > a->shape.d[v->axis]) {
      fail(c, v, "slice out of range");
      break;
    }
    want.d[v->axis] = v->shape.d[v->axis];
    if (!same(&want, &v->shape) || a->dtype != v->dtype)
      fail(c, v, "slice changes a dim other than its axis, or the dtype");
    break;
  }
  case OP_CONCAT: {
    if (v->axis < 0 || v->axis >= v->shape.rank) {
      fail(c, v, "concat along no dim");
      break;
    }
    int64_t total = 0;
    for (int j = 0; j < v->nargs; j++) {
      Shape want = v->shape;
      want.d[v->axis] = v->args[j]->shape.d[v->axis];
      if (v->args[j]->shape.rank != v->shape.rank || !same(&want, &v->args[j]->shape) || v->args[j]->dtype != v->dtype)
        fail(c, v, "operand %d does not fit", j + 1);
      total += v->args[j]->shape.d[v->axis];
    }
    if (total != v->shape.d[v->axis])
      fail(c, v, "the operands' extents do not add up along the axis");
    break;
  }
  case OP_EINSUM:
    verify_einsum(c, v);
    break;
  case OP_REDUCE: {
    Shape want = {0};
    if (v->fn != RF_SUM && v->fn != RF_MAX && v->fn != RF_ARGMAX) {
      fail(c, v, "reduce function unknown");
      break;
    }
    if (a->shape.rank < 32 && (v->rmask >> a->shape.rank)) {
      fail(c, v, "reduces dims the operand lacks");
      break;
    }
    for (int i = 0; i < a->shape.rank; i++)
      if (!(v->rmask & (1u << i)))
        want.d[want.rank++] = a->shape.d[i];
    if (!same(&want, &v->shape))
      fail(c, v, "result shape is not the operand's less the reduced dims");
    if (v->fn == RF_ARGMAX ? (v->dtype != DT_I32 || a->dtype != DT_F32 || __builtin_popcount(v->rmask) != 1)
                           : v->dtype != a->dtype || a->dtype == DT_BF16)
      fail(c, v, v->fn == RF_ARGMAX ? "argmax takes f32 over one dim and gives i32"
                                    : "reduce changes the dtype, or reduces bf16 (widened to f32 first)");
    break;
  }
  case OP_CUMSUM:
    if (!same(&a->shape, &v->shape) || a->dtype != v->dtype || a->dtype == DT_BF16 || v->axis < 0 ||
        v->axis >= v->shape.rank)
      fail(c, v, "cumsum changes the shape or dtype, sums bf16 (widened to f32 first), or has no axis");
    break;
  case OP_GATHER: {
    const Value *ix = v->args[1];
    Shape want = ix->shape;
    if (ix->dtype != DT_I32 || a->shape.rank < 1 || ix->shape.rank + a->shape.rank - 1 > GSL_MAX_RANK) {
      fail(c, v, "gather index must be i32, the table of rank 1 or more");
      break;
    }
    for (int i = 1; i < a->shape.rank; i++)
      want.d[want.rank++] = a->shape.d[i];
    if (!same(&want, &v->shape) || v->dtype != a->dtype)
      fail(c, v, "gather result is not idx's shape then the table's row shape");
    break;
  }
  case OP_SCATTER_ADD: {
    const Value *ix = v->args[1];
    Shape want = {1, {v->shape.rank ? v->shape.d[0] : 0}};
    if (ix->dtype != DT_I32 || a->dtype != DT_F32 || v->dtype != DT_F32 || ix->shape.rank > a->shape.rank) {
      fail(c, v, "scatter_add takes f32 rows and i32 indices");
      break;
    }
    for (int i = 0; i < ix->shape.rank; i++)
      if (ix->shape.d[i] != a->shape.d[i])
        fail(c, v, "scatter_add rows do not match the indices' shape");
    for (int i = ix->shape.rank; i < a->shape.rank && want.rank < GSL_MAX_RANK; i++)
      want.d[want.rank++] = a->shape.d[i];
    if (!same(&want, &v->shape) || want.d[0] < 1)
      fail(c, v, "scatter_add result is not [rows] then the source's row shape");
    break;
  }
  case OP_ONE_HOT: {
    Shape want = a->shape;
    if (a->dtype != DT_I32 || v->dtype != DT_F32 || v->shape.rank != a->shape.rank + 1) {
      fail(c, v, "one_hot takes i32, gives f32 and adds one dimension");
      break;
    }
    want.d[want.rank++] = v->shape.d[a->shape.rank];
    if (!same(&want, &v->shape))
      fail(c, v, "one_hot result is not the indices' shape plus one dim");
    break;
  }
  case OP_DISPATCH:
  case OP_COMBINE: {
    /* x [G, S, M] -> y [E, G, C, M], or back */
    const Value *x = v->op == OP_DISPATCH ? a : v, *y = v->op == OP_DISPATCH ? v : a;
    if (v->nargs < 3) {
      fail(c, v, "routing without expert and slot indices");
      break;
    }
    const Value *ex = v->args[1], *sl = v->args[2];
    bool types = v->op == OP_DISPATCH ? dtype_is_float(x->dtype) && y->dtype == x->dtype
                                      : dtype_is_float(y->dtype) && x->dtype == DT_F32;
    if (x->shape.rank != 3 || y->shape.rank != 4 || !types || x->shape.d[0] != y->shape.d[1] ||
        x->shape.d[2] != y->shape.d[3]) {
      fail(c, v, "routes between [G, S, M] and [E, G, C, M] with other extents, or other dtypes than "
                 "dispatch's x -> x's, combine's f32 or bf16 -> f32");
      break;
    }
    if (ex->dtype != DT_I32 || sl->dtype != DT_I32 || ex->shape.rank != 3 || !same(&ex->shape, &sl->shape) ||
        ex->shape.d[0] != x->shape.d[0] || ex->shape.d[1] != x->shape.d[1])
      fail(c, v, "expert and slot indices are not i32[G, S, K]");
    if (v->op == OP_DISPATCH && v->nargs != 3 && v->nargs != 4)
      fail(c, v, "dispatch takes x, expert, slot and optionally weights");
    else if (v->nargs == 4 && (v->args[3]->dtype != DT_F32 || !same(&v->args[3]->shape, &ex->shape)))
      fail(c, v, "routing weights are not f32[G, S, K]");
    break;
  }
  case OP_ALL_REDUCE:
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER:
  case OP_ALL_TO_ALL:
  case OP_LOCAL_SLICE:
  case OP_COLLECTIVE_PERMUTE:
    verify_collective(c, p, v);
    break;
  case OP_PAD_MASK:
    if (!p->spmd || v->ngroup < 1 || v->axis < 0 || v->axis >= v->shape.rank ||
        !same(&v->shape, &v->args[0]->shape) || v->dtype != v->args[0]->dtype)
      fail(c, v, "pad_mask outside an SPMD program, or not of its operand's shape, or with a bad group or dim");
    break;
  case OP__COUNT:
    break;
  }
}

bool ir_verify(const Program *p, FILE *err) {
  Check c = {err, true};
  for (int i = 0; i < p->nvalues; i++)
    verify_value(&c, p, p->values[i], i);
  for (int i = 0; i < p->nvalues; i++) { /* a recomputed value: an earlier forward one, computed alike */
    const Value *v = p->values[i], *o = v->remat_of;
    if (!o)
      continue;
    if (v->pass != PASS_RECOMPUTE || o->id >= v->id || p->values[o->id] != o || o->pass != PASS_FORWARD ||
        o->op != v->op || o->dtype != v->dtype || !same(&o->shape, &v->shape) || o->nargs != v->nargs)
      fail(&c, v, "a recomputed value that is not its forward value's copy");
  }
  for (int i = 0; i < p->nvalues; i++) { /* slot rows bounded: by earlier counts i32[E, G] of the dims named */
    const Value *v = p->values[i], *n = v->rows;
    if (!n)
      continue;
    const int8_t *d = v->rows_dim;
    bool dims = d[0] >= 0 && d[1] >= 0 && d[0] < d[2] && d[1] < d[2] && d[0] != d[1] && d[2] < v->shape.rank;
    if (n->id >= v->id || p->values[n->id] != n || n->dtype != DT_I32 || n->shape.rank != 2 || !dims ||
        n->shape.d[0] != v->shape.d[d[0]] || n->shape.d[1] != v->shape.d[d[1]])
      fail(&c, v, "slot rows bounded by %%%d, not earlier counts of its dims %d and %d (before its dim %d)", n->id,
           d[0], d[1], d[2]);
  }
  for (int r = 0; r < p->nregions; r++)
    if (p->regions[r].parent < 0 || p->regions[r].parent > r)
      fail(&c, NULL, "region %d's parent %d is not before it", r + 1, p->regions[r].parent);
  for (int i = 0; i < p->nvalues; i++)
    if (p->values[i]->region < 0 || p->values[i]->region > p->nregions)
      fail(&c, p->values[i], "a value in region %d of %d", p->values[i]->region, p->nregions);
  for (int i = 0; i < p->ntensors; i++)
    if (!p->tensors[i].value || p->tensors[i].value->id >= p->nvalues ||
        p->values[p->tensors[i].value->id] != p->tensors[i].value)
      fail(&c, NULL, "tensor %s's value is not in the program", p->tensors[i].name);
  for (int i = 0; i < p->noutputs; i++)
    if (!p->outputs[i].value || p->outputs[i].value->id >= p->nvalues ||
        p->values[p->outputs[i].value->id] != p->outputs[i].value)
      fail(&c, NULL, "output names a value not in the program");
    else if (p->outputs[i].kind == OUT_LOSS &&
             (p->outputs[i].value->dtype != DT_F32 || p->outputs[i].value->shape.rank != 0))
      fail(&c, p->outputs[i].value, "the loss is not an f32 scalar");
    else if (p->outputs[i].kind == OUT_SIGNAL &&
             (p->outputs[i].value->dtype != DT_F32 || p->outputs[i].value->shape.rank > 1 ||
              (p->outputs[i].log && p->outputs[i].value->shape.rank != 0)))
      fail(&c, p->outputs[i].value, "a training signal that is not an f32 scalar or vector (a scalar, if logged)");
    else if (p->outputs[i].kind == OUT_UPDATE &&
             (p->outputs[i].tensor < 0 || p->outputs[i].tensor >= p->ntensors ||
              p->tensors[p->outputs[i].tensor].kind == TK_INPUT ||
              p->tensors[p->outputs[i].tensor].dtype != p->outputs[i].value->dtype ||
              !same(&p->tensors[p->outputs[i].tensor].shape, &p->outputs[i].value->gshape)))
      fail(&c, p->outputs[i].value, "an update that does not fit its param");
  return c.ok;
}
