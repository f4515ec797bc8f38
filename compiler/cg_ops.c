/* cg_ops.c — values that fill a whole buffer in a loop nest of their own:
 * reductions (sum, max, argmax), cumsum, gather and its transpose
 * scatter_add, the moe routing calls, concat and random draws.
 *
 * Reductions and concatenations compute their operand's expression inside
 * their own loops (fusion, cg_fuse.c). A reduction's trailing reduced
 * dimensions accumulate in a register (vectorized as a reduction), earlier
 * ones into the result buffer. Gather checks every index before copying a
 * row, scatter_add before adding one (the backstop for indices the code
 * computes: an input's are checked as the runtime reads them, codegen.c).
 * A random draw passes its tile's offset in the global tensor, so draws
 * are keyed by global element index, never by rank. */
#include <math.h>

#include <llvm-c/Core.h>

#include "codegen.h"

static LLVMValueRef reduce_op(CG *g, int fn, DType dt, LLVMValueRef acc, LLVMValueRef x) {
  if (fn == RF_SUM)
    return dt == DT_F32 ? LLVMBuildFAdd(g->b, acc, x, "") : LLVMBuildAdd(g->b, acc, x, "");
  if (dt == DT_F32)
    return cg_call2(g, "llvm.maxnum.f32", acc, x);
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, x, acc, ""), x, acc, "");
}

/* argmax along the one reduced dimension: the loops run over the kept
 * dimensions, then the reduced one; a strict > keeps the first maximum. */
static void emit_argmax(CG *g, const Value *v) {
  const Value *a = v->args[0];
  int R = a->shape.rank, rd = __builtin_ctz(v->rmask);
  if (__builtin_popcount(v->rmask) != 1)
    die("argmax over %d dimensions", __builtin_popcount(v->rmask));
  Loop l[GSL_MAX_RANK], lr;
  Aff ai[GSL_MAX_RANK], oi[GSL_MAX_RANK];
  int no = 0;
  for (int d = 0; d < R; d++)
    if (d != rd) {
      cg_loop_open(g, &l[no], a->shape.d[d]);
      oi[no++] = ai[d] = cg_aff_unit(g->niv - 1);
    }
  LLVMTypeRef et = cg_reg_type(g, a->dtype);
  LLVMValueRef best = cg_new_acc(g, et), bi = cg_new_acc(g, g->t_i32);
  LLVMBuildStore(g->b, a->dtype == DT_F32 ? cg_cf32(g, -INFINITY) : cg_ci32(g, INT32_MIN), best);
  LLVMBuildStore(g->b, cg_ci32(g, 0), bi);
  cg_loop_open(g, &lr, a->shape.d[rd]);
  ai[rd] = cg_aff_unit(g->niv - 1);
  LLVMValueRef x = cg_elem_at(g, a, ai);
  LLVMValueRef cur = LLVMBuildLoad2(g->b, et, best, "");
  LLVMValueRef gt = a->dtype == DT_F32 ? LLVMBuildFCmp(g->b, LLVMRealOGT, x, cur, "")
                                       : LLVMBuildICmp(g->b, LLVMIntSGT, x, cur, "");
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, gt, x, cur, ""), best);
  LLVMValueRef k = LLVMBuildTrunc(g->b, lr.iv, g->t_i32, "");
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, gt, k, LLVMBuildLoad2(g->b, g->t_i32, bi, ""), ""), bi);
  cg_loop_close(g, &lr, false);
  Aff lin = cg_linear_of(&v->shape, oi);
  cg_store_lin(g, cg_buffer_of(g, v), DT_I32, cg_aff_value(g, &lin), LLVMBuildLoad2(g->b, g->t_i32, bi, ""));
  for (int d = no - 1; d >= 0; d--)
    cg_loop_close(g, &l[d], false);
}

/* An f32 max over v's trailing reduced dimensions first..R-1 of its
 * operand a (the kept ones' loops open, their indices in ai), when the last
 * has a multiple of MAX_LANES elements: MAX_LANES running maxima, lane j
 * taking a row's elements j, j + MAX_LANES, ..., then the max of the lanes.
 * llvm.maxnum skips NaN (a row of NaN only leaves the -inf every lane
 * starts from, as the one running maximum did) and a tie of zeros may give
 * either, so the order changes nothing, while the lanes' loop vectorizes:
 * one running maximum is a chain of scalar maxima the vectorizer keeps, not
 * knowing maxnum may be reordered (a softmax's max over 64 scores a row took
 * 2 % of the lm example's step so, 0.6 % in lanes). */
#define MAX_LANES 16
static bool max_in_lanes(const Value *v, int last_kept) {
  const Value *a = v->args[0];
  int64_t n = a->shape.d[a->shape.rank - 1];
  return v->fn == RF_MAX && v->dtype == DT_F32 && last_kept < a->shape.rank - 1 && n % MAX_LANES == 0 &&
         n >= 2 * MAX_LANES;
}

static LLVMValueRef emit_max_lanes(CG *g, const Value *a, Aff *ai, Loop *l, int first) {
  LLVMBuilderRef b = g->b;
  int R = a->shape.rank;
  LLVMTypeRef at = LLVMArrayType(g->t_f32, MAX_LANES);
  LLVMValueRef acc = cg_new_acc(g, at), lane[MAX_LANES];
  for (int j = 0; j < MAX_LANES; j++) {
    lane[j] = LLVMBuildInBoundsGEP2(b, at, acc, (LLVMValueRef[]){cg_ci64(g, 0), cg_ci64(g, j)}, 2, "");
    LLVMBuildStore(b, cg_cf32(g, -INFINITY), lane[j]);
  }
  for (int d = first; d < R - 1; d++) {
    cg_loop_open(g, &l[d], a->shape.d[d]);
    ai[d] = cg_aff_unit(g->niv - 1);
  }
  Loop chunk, lj;
  cg_loop_open(g, &chunk, a->shape.d[R - 1] / MAX_LANES);
  int ic = g->niv - 1;
  cg_loop_open(g, &lj, MAX_LANES);
  ai[R - 1] = cg_aff_unit(g->niv - 1);
  ai[R - 1].c[ic] = MAX_LANES;
  LLVMValueRef x = cg_elem_at(g, a, ai);
  LLVMValueRef p = LLVMBuildInBoundsGEP2(b, at, acc, (LLVMValueRef[]){cg_ci64(g, 0), lj.iv}, 2, "");
  LLVMBuildStore(b, cg_call2(g, "llvm.maxnum.f32", LLVMBuildLoad2(b, g->t_f32, p, ""), x), p);
  cg_loop_close(g, &lj, false);
  cg_loop_close(g, &chunk, false);
  for (int d = R - 2; d >= first; d--)
    cg_loop_close(g, &l[d], false);
  LLVMValueRef r = LLVMBuildLoad2(b, g->t_f32, lane[0], "");
  for (int j = 1; j < MAX_LANES; j++)
    r = cg_call2(g, "llvm.maxnum.f32", r, LLVMBuildLoad2(b, g->t_f32, lane[j], ""));
  return r;
}

/* sum / max: loops over the operand's dimensions in order, its expression
 * computed inline. Trailing reduced dimensions accumulate in a register
 * (vectorized as a reduction); reduced dimensions before the last kept one
 * accumulate into the result buffer, filled with the identity first, so the
 * innermost loop runs along a kept dimension and vectorizes plainly. */
void cg_emit_reduce(CG *g, const Value *v) {
  if (v->fn == RF_ARGMAX) {
    emit_argmax(g, v);
    return;
  }
  const Value *a = v->args[0];
  int R = a->shape.rank, last_kept = -1;
  bool inner_reduced = false;
  for (int d = 0; d < R; d++)
    if (!(v->rmask & (1u << d)))
      last_kept = d;
  for (int d = 0; d < last_kept; d++)
    if (v->rmask & (1u << d))
      inner_reduced = true;
  LLVMValueRef init = v->fn == RF_SUM ? (v->dtype == DT_F32 ? cg_cf32(g, 0.0) : cg_ci32(g, 0))
                                      : (v->dtype == DT_F32 ? cg_cf32(g, -INFINITY) : cg_ci32(g, INT32_MIN));
  LLVMValueRef out = cg_buffer_of(g, v);
  if (inner_reduced) {
    Loop l[GSL_MAX_RANK];
    Aff idx[GSL_MAX_RANK];
    cg_nest_open(g, l, v->shape.rank, v->shape.d, idx);
    Aff lin = cg_linear_of(&v->shape, idx);
    cg_store_lin(g, out, v->dtype, cg_aff_value(g, &lin), init);
    cg_nest_close(g, l, v->shape.rank);
  }
  Loop l[GSL_MAX_RANK];
  Aff ai[GSL_MAX_RANK], oi[GSL_MAX_RANK];
  int no = 0;
  for (int d = 0; d <= last_kept; d++) {
    cg_loop_open(g, &l[d], a->shape.d[d]);
    ai[d] = cg_aff_unit(g->niv - 1);
    if (!(v->rmask & (1u << d)))
      oi[no++] = ai[d];
  }
  LLVMValueRef r;
  if (max_in_lanes(v, last_kept)) {
    r = emit_max_lanes(g, a, ai, l, last_kept + 1);
  } else if (last_kept < R - 1) {
    LLVMTypeRef et = cg_reg_type(g, v->dtype);
    LLVMValueRef acc = cg_new_acc(g, et);
    LLVMBuildStore(g->b, init, acc);
    for (int d = last_kept + 1; d < R; d++) {
      cg_loop_open(g, &l[d], a->shape.d[d]);
      ai[d] = cg_aff_unit(g->niv - 1);
    }
    LLVMValueRef x = cg_elem_at(g, a, ai);
    LLVMBuildStore(g->b, reduce_op(g, v->fn, v->dtype, LLVMBuildLoad2(g->b, et, acc, ""), x), acc);
    for (int d = R - 1; d > last_kept; d--)
      cg_loop_close(g, &l[d], v->dtype == DT_F32 && v->fn == RF_SUM);
    r = LLVMBuildLoad2(g->b, et, acc, "");
  } else {
    r = cg_elem_at(g, a, ai);
  }
  Aff lin = cg_linear_of(&v->shape, oi);
  LLVMValueRef li = cg_aff_value(g, &lin);
  if (inner_reduced)
    r = reduce_op(g, v->fn, v->dtype, cg_load_lin(g, out, v->dtype, li), r);
  cg_store_lin(g, out, v->dtype, li, r);
  for (int d = last_kept; d >= 0; d--)
    cg_loop_close(g, &l[d], false);
}

/* y[k] = y[k-1] + x[k] (inclusive) or y[k-1] + x[k-1] (exclusive) along the
 * axis, y[-1] = 0; loops in C order, so y[k-1] is ready. */
void cg_emit_cumsum(CG *g, const Value *v) {
  const Value *a = v->args[0];
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  int64_t st[GSL_MAX_RANK];
  cg_strides_of(&v->shape, st);
  cg_nest_open(g, l, v->shape.rank, v->shape.d, idx);
  LLVMBuilderRef b = g->b;
  LLVMTypeRef et = cg_reg_type(g, v->dtype);
  LLVMValueRef zero = LLVMConstNull(et);
  Aff lin = cg_linear_of(&v->shape, idx);
  LLVMValueRef li = cg_aff_value(g, &lin);
  LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, l[v->axis].iv, cg_ci64(g, 0), "");
  LLVMValueRef prev = LLVMBuildSelect(b, first, li, LLVMBuildNSWSub(b, li, cg_ci64(g, st[v->axis]), ""), "");
  LLVMValueRef out = cg_buffer_of(g, v), in = cg_buffer_of(g, a);
  LLVMValueRef y = cg_load_lin(g, out, v->dtype, prev);
  LLVMValueRef x = cg_convert(g, cg_load_lin(g, in, a->dtype, v->exclusive ? prev : li), a->dtype, v->dtype);
  LLVMValueRef s;
  if (v->exclusive) {
    s = v->dtype == DT_F32 ? LLVMBuildFAdd(b, y, x, "") : LLVMBuildAdd(b, y, x, "");
    s = LLVMBuildSelect(b, first, zero, s, "");
  } else {
    y = LLVMBuildSelect(b, first, zero, y, "");
    s = v->dtype == DT_F32 ? LLVMBuildFAdd(b, y, x, "") : LLVMBuildAdd(b, y, x, "");
  }
  cg_store_lin(g, out, v->dtype, li, s);
  cg_nest_close(g, l, v->shape.rank);
}

/* v's tile's offset in its global tensor: an i64 array among the
 * function's allocas, filled here (the device's index in the group of each
 * split dimension's axes times the local extent), or a null pointer when
 * no dimension is split. */
static LLVMValueRef tile_offset(CG *g, const Value *v) {
  bool split = false;
  for (int d = 0; d < v->shape.rank; d++)
    split |= cg_dim_split(g->p, v, d);
  if (!split)
    return LLVMConstNull(LLVMPointerType(g->t_i64, 0));
  LLVMValueRef off = LLVMBuildArrayAlloca(g->ab, g->t_i64, cg_ci64(g, v->shape.rank), "offset");
  for (int d = 0; d < v->shape.rank; d++) {
    LLVMValueRef o = cg_ci64(g, 0), at = cg_ci64(g, d);
    if (cg_dim_split(g->p, v, d))
      o = LLVMBuildNSWMul(g->b, cg_group_index(g, v->sh.naxes[d], v->sh.axes[d]), cg_ci64(g, v->shape.d[d]), "");
    LLVMBuildStore(g->b, o, LLVMBuildInBoundsGEP2(g->b, g->t_i64, off, &at, 1, ""));
  }
  return off;
}

/* Every index of ix, the indices of v, within [0, V), in one pass that
 * only ORs a flag; else the run fails: gslrt_fail_index finds the first
 * index out of range and names it, its global position and v, and
 * gsl_step returns. */
static void check_indices(CG *g, const Value *v, const Value *ix, int64_t V) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef ip = cg_buffer_of(g, ix), bad = cg_new_acc(g, g->t_i1);
  LLVMBuildStore(b, LLVMConstInt(g->t_i1, 0, 0), bad);
  Loop lc;
  cg_loop_open(g, &lc, shape_elems(&ix->shape));
  LLVMValueRef k = cg_load_lin(g, ip, DT_I32, lc.iv);
  LLVMValueRef out_of = LLVMBuildICmp(b, LLVMIntUGE, k, cg_ci32(g, V), "");
  LLVMBuildStore(b, LLVMBuildOr(b, LLVMBuildLoad2(b, g->t_i1, bad, ""), out_of, ""), bad);
  cg_loop_close(g, &lc, false);
  LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "index.fail");
  LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "index.ok");
  LLVMBuildCondBr(b, LLVMBuildLoad2(b, g->t_i1, bad, ""), fail, ok);
  LLVMPositionBuilderAtEnd(b, fail);
  char what[512];
  cg_op_where(v, what, sizeof what);
  LLVMValueRef args[7] = {g->ctx_arg, cg_cstr(g, what), cg_ci64(g, V), ip, cg_ci32(g, ix->shape.rank),
                          cg_shape_array(g, &ix->shape), tile_offset(g, ix)};
  cg_call(g, "gslrt_fail_index", g->t_void, 7, args);
  LLVMBuildRetVoid(b);
  LLVMPositionBuilderAtEnd(b, ok);
}

/* In a loop nest over [I..., D...] at idx: the linear index, in a buffer
 * of table shape ts [V, D...], of row ix[i...] at columns idx[I...:]. */
static LLVMValueRef table_index(CG *g, const Value *ix, const Shape *ts, const Aff *idx) {
  LLVMBuilderRef b = g->b;
  int ni = ix->shape.rank;
  Aff il = cg_linear_of(&ix->shape, idx);
  LLVMValueRef row = LLVMBuildSExt(b, cg_load_lin(g, cg_buffer_of(g, ix), DT_I32, cg_aff_value(g, &il)), g->t_i64, "");
  Aff ti[GSL_MAX_RANK];
  ti[0] = cg_aff_const(0);
  for (int d = 1; d < ts->rank; d++)
    ti[d] = idx[ni + d - 1];
  Aff tl = cg_linear_of(ts, ti);
  int64_t st[GSL_MAX_RANK];
  cg_strides_of(ts, st);
  return LLVMBuildNSWAdd(b, LLVMBuildNSWMul(b, row, cg_ci64(g, st[0]), ""), cg_aff_value(g, &tl), "");
}

/* table[V, D...] rows by idx[I...]: every index is checked first, then
 * rows are copied. */
void cg_emit_gather(CG *g, const Value *v) {
  const Value *t = v->args[0], *ix = v->args[1];
  check_indices(g, v, ix, t->shape.d[0]);
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  cg_nest_open(g, l, v->shape.rank, v->shape.d, idx);
  LLVMValueRef x = cg_load_lin(g, cg_buffer_of(g, t), t->dtype, table_index(g, ix, &t->shape, idx));
  Aff ol = cg_linear_of(&v->shape, idx);
  cg_store_lin(g, cg_buffer_of(g, v), v->dtype, cg_aff_value(g, &ol), cg_convert(g, x, t->dtype, v->dtype));
  cg_nest_close(g, l, v->shape.rank);
}

/* scatter_add: the result zeroed, then each source row added into the
 * row its index names (indices checked first, as gather's) */
void cg_emit_scatter_add(CG *g, const Value *v) {
  const Value *src = v->args[0], *ix = v->args[1];
  LLVMBuilderRef b = g->b;
  check_indices(g, v, ix, v->shape.d[0]);
  LLVMValueRef out = cg_buffer_of(g, v);
  LLVMBuildMemSet(b, out, LLVMConstInt(LLVMInt8TypeInContext(g->ctx), 0, 0),
                  cg_ci64(g, 4 * shape_elems(&v->shape)), 4);
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  cg_nest_open(g, l, src->shape.rank, src->shape.d, idx);
  LLVMValueRef at = table_index(g, ix, &v->shape, idx);
  Aff sl = cg_linear_of(&src->shape, idx);
  LLVMValueRef x = cg_load_lin(g, cg_buffer_of(g, src), DT_F32, cg_aff_value(g, &sl));
  LLVMValueRef old = cg_load_lin(g, out, DT_F32, at);
  cg_store_lin(g, out, DT_F32, at, LLVMBuildFAdd(b, old, x, ""));
  cg_nest_close(g, l, src->shape.rank);
}

/* dispatch and combine: one libgslrt call each on the local tiles (rows
 * of M elements copied or accumulated by index; the routes are checked there):
 *   gslrt_dispatch(ctx, out, x, dtype, expert, slot, weight or NULL, E, G, C, M, S, K)
 *   gslrt_combine(ctx, out, out_dtype, y, y_dtype, expert, slot, weight, E, G, C, M, S, K) */
void cg_emit_route(CG *g, const Value *v) {
  const Value *big = v->op == OP_DISPATCH ? v : v->args[0], *ex = v->args[1];
  LLVMValueRef a[14];
  int n = 0;
  a[n++] = g->ctx_arg;
  a[n++] = LLVMBuildBitCast(g->b, cg_buffer_of(g, v), g->t_ptr, "");
  if (v->op == OP_COMBINE)
    a[n++] = cg_ci32(g, cg_rt_dtype(v->dtype));
  for (int k = 0; k < v->nargs; k++) {
    a[n++] = LLVMBuildBitCast(g->b, cg_buffer_of(g, v->args[k]), g->t_ptr, "");
    if (k == 0) /* x of a dispatch (out has its dtype), y of a combine */
      a[n++] = cg_ci32(g, cg_rt_dtype(v->args[0]->dtype));
  }
  if (v->op == OP_DISPATCH && v->nargs == 3)
    a[n++] = LLVMConstNull(g->t_ptr);
  for (int i = 0; i < 4; i++)
    a[n++] = cg_ci64(g, big->shape.d[i]);
  a[n++] = cg_ci64(g, ex->shape.d[1]);
  a[n++] = cg_ci64(g, ex->shape.d[2]);
  cg_call(g, v->op == OP_DISPATCH ? "gslrt_dispatch" : "gslrt_combine", g->t_void, n, a);
}

/* One loop nest per operand, each writing its range along the axis. */
void cg_emit_concat_piece(CG *g, const Value *v, int j) {
  int64_t off = 0;
  for (int i = 0; i < j; i++)
    off += v->args[i]->shape.d[v->axis];
  const Value *a = v->args[j];
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  cg_nest_open(g, l, a->shape.rank, a->shape.d, idx);
  LLVMValueRef x = cg_convert(g, cg_elem_at(g, a, idx), a->dtype, v->dtype);
  idx[v->axis].k += off;
  Aff lin = cg_linear_of(&v->shape, idx);
  int64_t k = lin.k; /* the piece's place goes into the buffer's slot */
  lin.k = 0;
  cg_store_lin(g, cg_buffer_at(g, v, k), v->dtype, cg_aff_value(g, &lin), x);
  cg_nest_close(g, l, a->shape.rank);
}

void cg_emit_concat(CG *g, const Value *v) {
  for (int j = 0; j < v->nargs; j++)
    cg_emit_concat_piece(g, v, j);
}

/* The local tile of the draw, at its offset in the global tensor: along a
 * split dimension, the device's index in the group of its axes times the
 * local extent. */
void cg_emit_rng(CG *g, const Value *v) {
  const Program *p = g->p;
  LLVMValueRef off = tile_offset(g, v);
  LLVMValueRef buf = LLVMBuildBitCast(g->b, cg_buffer_of(g, v), LLVMPointerType(g->t_f32, 0), "");
  LLVMValueRef args[11] = {g->ctx_arg,
                           buf,
                           cg_ci32(g, v->fn == RNG_NORMAL ? 1 : 0),
                           LLVMConstReal(g->t_f64, v->fval),
                           LLVMConstReal(g->t_f64, v->fval2),
                           cg_param(g, v->stream, g->t_i32),
                           g->step_arg,
                           cg_ci32(g, v->shape.rank),
                           cg_shape_array(g, p->spmd ? &v->gshape : &v->shape),
                           off,
                           cg_shape_array(g, &v->shape)};
  cg_call(g, "gslrt_rng_fill", g->t_void, 11, args);
}

