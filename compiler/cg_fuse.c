/* cg_fuse.c — fusion of elementwise expressions: the element of any value
 * at an affine index, computed from its operands unless it has a buffer,
 * and the loop nest that fills a value's buffer from its elements. Above
 * cg_loops.c and cg_math.c; the op emitters read their operands' elements
 * through it.
 *
 * Which values have a buffer is the plan's (plan.c). Every other value is
 * inlined into the loop of its user: its elements are computed from its
 * operands at affine indices, so a chain of elementwise ops, broadcasts,
 * transposes, slices, local slices, one_hots and iotas becomes one loop
 * nest whose leaves are loads from buffers at sum_k i_k * stride_k +
 * offset. Index maps compose symbolically (struct Aff), so a broadcast
 * gives stride 0, a transpose permutes strides, a slice adds an offset, a
 * reshape that only adds or drops dims of size 1 (lower_unit_reshape) drops
 * or adds a zero index, and a local slice adds the device's index in its
 * group times the local extent (a run-time term, so it fuses like any
 * other index map).
 *
 * One loop nest may fill several buffers of one shape (the plan's loops,
 * Plan.loop): each value's element is computed once, stored, and handed
 * to the later values of the nest in a register (CG.pre), so that an
 * optimizer's update reads the param, its gradient and its states once. */
#include <math.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "codegen.h"

/* ---- elementwise expressions --------------------------------------------- */

static LLVMValueRef def_elem(CG *g, const Value *v, const Aff *idx);

static LLVMValueRef round_to(CG *g, LLVMValueRef x, DType dt) { return dt == DT_BF16 ? cg_round_bf16(g, x) : x; }

LLVMValueRef cg_elem_at(CG *g, const Value *v, const Aff *idx) {
  if (!g->pl->mat[v->id])
    return def_elem(g, v, idx);
  if (g->pre[v->id])
    return g->pre[v->id];
  Aff lin = cg_linear_of(&v->shape, idx);
  int64_t k = lin.k; /* the constant part of the index goes into the buffer's slot */
  lin.k = 0;
  return cg_load_lin(g, cg_buffer_at(g, v, k), v->dtype, cg_aff_value(g, &lin));
}

/* dropout's element at idx (gsl.7, TRAINING, Dropout). In a training
 * step (the flag the function stored on entry, codegen.c) the element's
 * global row-major index i draws as runtime/rng.c draws at (seed,
 * stream, step): bits = word 0 of Philox-4x32-10 of counter {lo32(i),
 * hi32(i), lo32(step), stream ^ hi32(step)} and key {lo32(seed),
 * hi32(seed)}, u = (bits >> 8) 2^-24. The element is 0 where u < p, that
 * is where bits >> 8 < ceil(p 2^24) (an integer compare, exact), else x
 * times s = 1 / (1 - p) as an f32, the product rounded once to the dtype
 * (bf16: x widened, multiplied in f32, rounded to nearest even). Outside
 * one (gsl_eval, gsl_forward) it is x. A tile cut along a dim starts at
 * its block's offset, so every mesh draws the same bits for an element.
 * The draw is ten rounds of integer products, which vectorize, and no
 * memory: the backward pass draws it again (autodiff.c, d_dropout). */
static LLVMValueRef dropout_elem(CG *g, const Value *v, const Aff *idx) {
  LLVMBuilderRef b = g->b;
  const Value *a = v->args[0];
  const Shape *gs = g->p->spmd ? &v->gshape : &v->shape;
  LLVMValueRef x = cg_elem_at(g, a, idx), i = cg_ci64(g, 0);
  int64_t stride = 1;
  for (int d = v->shape.rank - 1; d >= 0; d--) {
    LLVMValueRef k = cg_aff_value(g, &idx[d]);
    if (cg_dim_split(g->p, v, d))
      k = LLVMBuildNSWAdd(b, k,
                          LLVMBuildNSWMul(b, cg_group_index(g, v->sh.naxes[d], v->sh.axes[d]),
                                          cg_ci64(g, v->shape.d[d]), ""),
                          "");
    i = LLVMBuildAdd(b, i, LLVMBuildMul(b, k, cg_ci64(g, stride), ""), "");
    stride *= gs->d[d];
  }
  if (!g->train_val) { /* once a function, in its entry block */
    g->train_val = LLVMBuildLoad2(g->ab, g->t_i32, g->train_glob, "training");
    g->seed_val = LLVMBuildLoad2(g->ab, g->t_i64, g->seed_glob, "seed");
  }
  LLVMValueRef hi = cg_ci64(g, 32), step = g->step_arg;
  LLVMValueRef ctr[4] = {LLVMBuildTrunc(b, i, g->t_i32, ""), LLVMBuildTrunc(b, LLVMBuildLShr(b, i, hi, ""), g->t_i32, ""),
                         LLVMBuildTrunc(b, step, g->t_i32, ""),
                         LLVMBuildXor(b, cg_param(g, v->stream, g->t_i32),
                                      LLVMBuildTrunc(b, LLVMBuildLShr(b, step, hi, ""), g->t_i32, ""), "")};
  LLVMValueRef key[2] = {LLVMBuildTrunc(b, g->seed_val, g->t_i32, ""),
                         LLVMBuildTrunc(b, LLVMBuildLShr(b, g->seed_val, hi, ""), g->t_i32, "")};
  LLVMValueRef u24 = LLVMBuildLShr(b, cg_philox0(g, ctr, key), cg_ci32(g, 8), "");
  LLVMValueRef drop = LLVMBuildICmp(b, LLVMIntULT, u24, cg_ci32(g, (int64_t)ceil(v->fval * 16777216.0)), "");
  LLVMValueRef kept = round_to(g, LLVMBuildFMul(b, x, cg_cf32(g, (float)(1.0 / (1.0 - v->fval))), ""), v->dtype);
  LLVMValueRef y = LLVMBuildSelect(b, drop, cg_cf32(g, 0.0), kept, "");
  LLVMValueRef on = LLVMBuildICmp(b, LLVMIntNE, g->train_val, cg_ci32(g, 0), "");
  return LLVMBuildSelect(b, on, y, x, "");
}

/* The element of v at idx from its operands (v an elementwise op or an
 * index map), ignoring any buffer v itself has. */
static LLVMValueRef def_elem(CG *g, const Value *v, const Aff *idx) {
  LLVMBuilderRef b = g->b;
  const Value *a = v->nargs ? v->args[0] : NULL;
  Aff ai[GSL_MAX_RANK];
  switch (v->op) {
  case OP_CONST: /* a bf16 one rounded, as every bf16 element here is (cg_store_exact) */
    return v->dtype == DT_I32 ? cg_ci32(g, v->ival) : cg_convert(g, cg_cf32(g, v->fval), DT_F32, v->dtype);
  case OP_IOTA: { /* the global index: a tile cut along axis starts at its block's offset */
    LLVMValueRef k = cg_aff_value(g, &idx[v->axis]);
    if (cg_dim_split(g->p, v, v->axis))
      k = LLVMBuildNSWAdd(b, k,
                          LLVMBuildNSWMul(b, cg_group_index(g, v->sh.naxes[v->axis], v->sh.axes[v->axis]),
                                          cg_ci64(g, v->shape.d[v->axis]), ""),
                          "");
    return LLVMBuildTrunc(b, k, g->t_i32, "");
  }
  case OP_UNARY: /* bf16: computed in f32, rounded to bf16 after each op as stored */
    return round_to(g, cg_unary(g, v->fn, cg_convert(g, cg_elem_at(g, a, idx), a->dtype, v->dtype), v->dtype), v->dtype);
  case OP_BINARY:
    return round_to(g,
                    cg_binary(g, v->fn, cg_elem_at(g, a, idx),
                              cg_convert(g, cg_elem_at(g, v->args[1], idx), v->args[1]->dtype, a->dtype), a->dtype,
                              v->dtype),
                    v->dtype);
  case OP_SELECT: {
    LLVMValueRef c = cg_elem_at(g, a, idx);
    c = dtype_is_float(a->dtype) ? LLVMBuildFCmp(b, LLVMRealUNE, c, cg_cf32(g, 0.0), "")
                           : LLVMBuildICmp(b, LLVMIntNE, c, cg_ci32(g, 0), "");
    LLVMValueRef x = cg_convert(g, cg_elem_at(g, v->args[1], idx), v->args[1]->dtype, v->dtype);
    LLVMValueRef y = cg_convert(g, cg_elem_at(g, v->args[2], idx), v->args[2]->dtype, v->dtype);
    return LLVMBuildSelect(b, c, x, y, "");
  }
  case OP_CAST:
    return cg_convert(g, cg_elem_at(g, a, idx), a->dtype, v->dtype);
  case OP_DROPOUT:
    return dropout_elem(g, v, idx);
  case OP_ANNOTATE:
    return cg_elem_at(g, a, idx);
  case OP_BROADCAST:
    for (int q = 0; q < a->shape.rank; q++)
      ai[q] = cg_aff_const(0);
    for (int i = 0; i < v->shape.rank; i++) {
      int q = v->perm[i];
      if (q >= 0 && a->shape.d[q] != 1)
        ai[q] = idx[i];
    }
    return cg_elem_at(g, a, ai);
  case OP_TRANSPOSE:
    for (int i = 0; i < v->shape.rank; i++)
      ai[v->perm[i]] = idx[i];
    return cg_elem_at(g, a, ai);
  case OP_SLICE:
    for (int i = 0; i < v->shape.rank; i++)
      ai[i] = idx[i];
    ai[v->axis].k += v->start;
    return cg_elem_at(g, a, ai);
  case OP_LOCAL_SLICE: {
    for (int i = 0; i < v->shape.rank; i++)
      ai[i] = idx[i];
    ai[v->axis].dev[g->groups[g->vgroup[v->id]].slot] += v->shape.d[v->axis];
    if (!shard_slice_past(g->p, v))
      return cg_elem_at(g, a, ai);
    /* uneven tiles: the last blocks reach past the operand's end; there
     * the load is of element 0 and the result 0 (the plan gave the
     * operand a buffer) */
    LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSLT, cg_aff_value(g, &ai[v->axis]), cg_ci64(g, a->shape.d[v->axis]), "");
    Aff lin = cg_linear_of(&a->shape, ai);
    LLVMValueRef at = LLVMBuildSelect(b, in, cg_aff_value(g, &lin), cg_ci64(g, 0), "");
    LLVMValueRef x = cg_load_lin(g, cg_buffer_of(g, a), a->dtype, at);
    return LLVMBuildSelect(b, in, x, a->dtype == DT_I32 ? cg_ci32(g, 0) : cg_cf32(g, 0.0), "");
  }
  case OP_PAD_MASK: { /* the element's global index along axis: past the dim's end, padding */
    for (int i = 0; i < v->shape.rank; i++)
      ai[i] = idx[i];
    ai[v->axis].dev[g->groups[g->vgroup[v->id]].slot] += v->shape.d[v->axis];
    LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSLT, cg_aff_value(g, &ai[v->axis]), cg_ci64(g, v->gshape.d[v->axis]), "");
    LLVMValueRef fill = v->dtype == DT_I32 ? cg_ci32(g, v->ival) : cg_cf32(g, v->fval);
    return LLVMBuildSelect(b, in, cg_elem_at(g, a, idx), cg_convert(g, fill, v->dtype == DT_I32 ? DT_I32 : DT_F32, v->dtype), "");
  }
  case OP_ONE_HOT: {
    int r = v->shape.rank - 1;
    LLVMValueRef k = LLVMBuildSExt(b, cg_elem_at(g, a, idx), g->t_i64, "");
    LLVMValueRef eq = LLVMBuildICmp(b, LLVMIntEQ, k, cg_aff_value(g, &idx[r]), "");
    return cg_bool_to(g, eq, v->dtype);
  }
  case OP_RESHAPE: { /* one that adds or drops dims of size 1: the others in order */
    if (!lower_unit_reshape(v))
      die("reshape %%%d without a buffer", v->id);
    int q = 0;
    for (int i = 0; i < v->shape.rank; i++)
      if (v->shape.d[i] != 1) {
        while (a->shape.d[q] == 1)
          ai[q++] = cg_aff_const(0);
        ai[q++] = idx[i];
      }
    while (q < a->shape.rank)
      ai[q++] = cg_aff_const(0);
    return cg_elem_at(g, a, ai);
  }
  default:
    die("%s %%%d is not elementwise", op_name(v->op), v->id);
  }
}

/* ---- loop nests filling buffers --------------------------------------------- */

/* Loads, ahead of a loop nest, the one-element buffers (computed scalars:
 * an optimizer's bias corrections, say) that v's fused expression reads:
 * read in the loop, LLVM would reload them at every element, unable to
 * prove the loop's stores miss them, and leave the loop scalar. */
static void preload_scalars(CG *g, const Value *v) {
  for (int k = 0; k < v->nargs; k++) {
    const Value *a = v->args[k];
    if (!g->pl->mat[a->id]) {
      preload_scalars(g, a);
    } else if (shape_elems(&a->shape) == 1 && !g->pre[a->id]) {
      g->pre[a->id] = cg_load_lin(g, cg_buffer_of(g, a), a->dtype, cg_ci64(g, 0));
      g->pre_ids[g->npre++] = a->id;
    }
  }
}

/* The counts that bound the loop nest of vs (Value.rows, slots.c): those
 * every value of it names, at the same dims; else NULL. */
static const Value *rows_of(const Value *const *vs, int n) {
  for (int j = 1; j < n; j++)
    if (vs[j]->rows != vs[0]->rows || memcmp(vs[j]->rows_dim, vs[0]->rows_dim, sizeof vs[0]->rows_dim))
      return NULL;
  return vs[0]->rows;
}

/* The elements of vs at idx (every loop of the nest open): each computed
 * in program order, stored (unless the plan holds it in registers only,
 * Plan.held), and kept for the later ones. */
static void map_body(CG *g, const Value *const *vs, int n, const Aff *idx) {
  Aff lin = cg_linear_of(&vs[n - 1]->shape, idx);
  int64_t k = lin.k;
  lin.k = 0;
  for (int j = 0; j < n; j++) {
    LLVMValueRef x = def_elem(g, vs[j], idx);
    if (!g->pl->held[vs[j]->id])
      cg_store_exact(g, cg_buffer_at(g, vs[j], k), vs[j]->dtype, cg_aff_value(g, &lin), x);
    if (j < n - 1) {
      g->pre[vs[j]->id] = x;
      g->pre_ids[g->npre++] = vs[j]->id;
    }
  }
}

/* The nest of vs over their slot rows (slots.c): the loops down to the
 * C dim as usual; in each (e, g) the count n = counts[e, g] (clamped to
 * [0, C]: on a tile cut unevenly, a padding row's count may be anything);
 * the rows c < n computed, the rows past them (contiguous: the dims after
 * C are the last) set to zero bytes, the zero of every dtype. */
static void emit_rows(CG *g, const Value *const *vs, int n, const Value *counts, Aff *idx) {
  LLVMBuilderRef b = g->b;
  const Shape *s = &vs[n - 1]->shape;
  const int8_t *d = vs[n - 1]->rows_dim;
  int c = d[2];
  Loop l[GSL_MAX_RANK];
  cg_nest_open(g, l, c, s->d, idx);
  Aff at[2] = {idx[d[0]], idx[d[1]]};
  LLVMValueRef cnt = cg_elem_at(g, counts, at), C = cg_ci32(g, s->d[c]);
  cnt = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, cnt, C, ""), cnt, C, "");
  LLVMValueRef end = LLVMBuildZExt(b, cnt, g->t_i64, "filled");
  cg_loop_open_range(g, &l[c], cg_ci64(g, 0), end);
  idx[c] = cg_aff_unit(g->niv - 1);
  cg_nest_open(g, l + c + 1, s->rank - c - 1, s->d + c + 1, idx + c + 1);
  map_body(g, vs, n, idx);
  cg_nest_close(g, l + c + 1, s->rank - c - 1);
  cg_loop_close(g, &l[c], false);
  int64_t inner = 1;
  for (int i = c + 1; i < s->rank; i++)
    inner *= s->d[i];
  idx[c] = cg_aff_const(0);
  for (int i = c + 1; i < s->rank; i++)
    idx[i] = cg_aff_const(0);
  Aff lin = cg_linear_of(s, idx); /* row (.., c = 0, 0, ..); the empty rows start n rows on */
  int64_t k = lin.k;
  lin.k = 0;
  LLVMValueRef from = LLVMBuildNSWAdd(b, cg_aff_value(g, &lin), LLVMBuildNSWMul(b, end, cg_ci64(g, inner), ""), "");
  LLVMValueRef rows = LLVMBuildNSWSub(b, cg_ci64(g, s->d[c]), end, "");
  for (int j = 0; j < n; j++) {
    if (g->pl->held[vs[j]->id])
      continue;
    DType dt = vs[j]->dtype;
    LLVMValueRef p = LLVMBuildInBoundsGEP2(b, cg_elem_type(g, dt), cg_buffer_at(g, vs[j], k), &from, 1, "");
    LLVMValueRef bytes = LLVMBuildNSWMul(b, rows, cg_ci64(g, inner * dtype_size(dt)), "");
    LLVMBuildMemSet(b, p, LLVMConstInt(LLVMInt8TypeInContext(g->ctx), 0, 0), bytes, (unsigned)dtype_size(dt));
  }
  cg_nest_close(g, l, c);
}

/* The buffers of vs[0..n), values of one shape, = their elements, in one
 * loop nest over that shape: each element of each computed in program
 * order, stored (unless the plan holds it in registers only, Plan.held), and
 * kept for the later ones, which read it element for element only (the
 * plan's promise, plan_loops), from the register. A nest whose values'
 * slot rows are bounded (Value.rows) runs over the filled rows alone
 * (emit_rows). */
void cg_emit_map(CG *g, const Value *const *vs, int n) {
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  const Shape *s = &vs[n - 1]->shape;
  for (int j = 0; j < n && shape_elems(s) > 1; j++)
    preload_scalars(g, vs[j]);
  const Value *counts = rows_of(vs, n);
  if (counts) {
    emit_rows(g, vs, n, counts, idx);
  } else {
    cg_nest_open(g, l, s->rank, s->d, idx);
    map_body(g, vs, n, idx);
    cg_nest_close(g, l, s->rank);
  }
  while (g->npre)
    g->pre[g->pre_ids[--g->npre]] = NULL;
}
