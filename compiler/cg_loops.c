/* cg_loops.c — the basics every part of codegen builds on: LLVM types,
 * constants and calls; loop nests; affine indices; buffers; and fusion of
 * elementwise expressions.
 *
 * Fusion. Which values have a buffer is the plan's (plan.c). Every other
 * value is inlined into the loop of its user: its elements are computed
 * from its operands at affine indices, so a chain of elementwise ops,
 * broadcasts, transposes, slices, local slices, one_hots and iotas becomes one loop
 * nest whose leaves are loads from buffers at sum_k i_k * stride_k + offset.
 * Index maps compose symbolically (struct Aff: coefficients over the loop
 * counters and the device's indices in groups of mesh axes), so a broadcast
 * gives stride 0, a transpose permutes strides, a slice adds an offset, and
 * a local slice adds the device's index in its group times the local extent
 * (a run-time term, so it fuses like any other index map). Each loop nest
 * runs innermost over the last dimension with i64 counters in rotated
 * canonical form, so LoopVectorize fires; sum reductions along the innermost
 * loop carry llvm.loop.vectorize.enable, which lets the vectorizer
 * reassociate them (and nothing else).
 *
 * Buffers. Every buffer the plan places lies in one arena at its offset;
 * gsl_step loads the arena once and each buffer pointer is arena + offset
 * (params and inputs: the runtime's storage, loaded from their globals). */
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>

#include "codegen.h"

/* ---- types, constants, calls ------------------------------------------- */

LLVMTypeRef cg_elem_type(CG *g, DType dt) { return dt == DT_I32 ? g->t_i32 : g->t_f32; }

LLVMValueRef cg_ci64(CG *g, int64_t v) { return LLVMConstInt(g->t_i64, (unsigned long long)v, 1); }
LLVMValueRef cg_ci32(CG *g, int64_t v) { return LLVMConstInt(g->t_i32, (unsigned long long)v, 1); }
LLVMValueRef cg_cf32(CG *g, double v) { return LLVMConstReal(g->t_f32, v); }

/* A declared function of module g->mod, added on first use. */
static LLVMValueRef declare_fn(CG *g, const char *name, LLVMTypeRef ft) {
  LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
  return f ? f : LLVMAddFunction(g->mod, name, ft);
}

LLVMValueRef cg_call(CG *g, const char *name, LLVMTypeRef ret, int n, LLVMValueRef *args) {
  LLVMTypeRef pt[16];
  for (int i = 0; i < n; i++)
    pt[i] = LLVMTypeOf(args[i]);
  LLVMTypeRef ft = LLVMFunctionType(ret, pt, (unsigned)n, 0);
  return LLVMBuildCall2(g->b, ft, declare_fn(g, name, ft), args, (unsigned)n, "");
}

LLVMValueRef cg_call1(CG *g, const char *name, LLVMValueRef x) {
  return cg_call(g, name, LLVMTypeOf(x), 1, &x);
}

LLVMValueRef cg_call2(CG *g, const char *name, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef a[2] = {x, y};
  return cg_call(g, name, LLVMTypeOf(x), 2, a);
}

/* A private constant global holding s, as an i8 pointer. */
LLVMValueRef cg_cstr(CG *g, const char *s) {
  size_t n = strlen(s);
  LLVMValueRef init = LLVMConstStringInContext(g->ctx, s, (unsigned)n, 0);
  LLVMValueRef gv = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "str");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(gv, LLVMGlobalUnnamedAddr);
  return LLVMConstBitCast(gv, g->t_ptr);
}

/* A private constant array of n integers of type t (at least one element),
 * as a pointer to its first element. */
LLVMValueRef cg_const_array(CG *g, LLVMTypeRef t, int n, const int64_t *v) {
  LLVMValueRef el[GSL_MAX_RANK * GSL_MAX_AXES + 1];
  int m = n > 0 ? n : 1;
  for (int i = 0; i < m; i++)
    el[i] = LLVMConstInt(t, (unsigned long long)(i < n ? v[i] : 0), 1);
  LLVMValueRef init = LLVMConstArray(t, el, (unsigned)m);
  LLVMValueRef gv = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "dims");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(gv, LLVMGlobalUnnamedAddr);
  return LLVMConstBitCast(gv, LLVMPointerType(t, 0));
}

LLVMValueRef cg_shape_array(CG *g, const Shape *s) { return cg_const_array(g, g->t_i64, s->rank, s->d); }

/* ---- loops --------------------------------------------------------------- */

LLVMValueRef cg_loop_open(CG *g, Loop *l, int64_t n) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  l->n = n;
  l->body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "loop");
  LLVMBuildBr(g->b, l->body);
  LLVMPositionBuilderAtEnd(g->b, l->body);
  l->iv = LLVMBuildPhi(g->b, g->t_i64, "i");
  LLVMValueRef zero = cg_ci64(g, 0);
  LLVMAddIncoming(l->iv, &zero, &pre, 1);
  if (g->niv >= CG_MAXL)
    die("loop nest too deep");
  g->iv[g->niv++] = l->iv;
  return l->iv;
}

/* Marks the loop ending in branch br as one whose floating-point reduction
 * the vectorizer may reassociate (llvm.loop.vectorize.enable). */
static void allow_reorder(CG *g, LLVMValueRef br) {
  LLVMMetadataRef en[2] = {LLVMMDStringInContext2(g->ctx, "llvm.loop.vectorize.enable", 26),
                           LLVMValueAsMetadata(LLVMConstInt(g->t_i1, 1, 0))};
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(g->ctx, NULL, 0);
  LLVMMetadataRef ops[2] = {tmp, LLVMMDNodeInContext2(g->ctx, en, 2)};
  LLVMMetadataRef id = LLVMMDNodeInContext2(g->ctx, ops, 2);
  LLVMMetadataReplaceAllUsesWith(tmp, id);
  LLVMSetMetadata(br, g->md_loop, LLVMMetadataAsValue(g->ctx, id));
}

void cg_loop_close(CG *g, Loop *l, bool reorder) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMValueRef next = LLVMBuildNSWAdd(g->b, l->iv, cg_ci64(g, 1), "i.next");
  LLVMValueRef more = LLVMBuildICmp(g->b, LLVMIntSLT, next, cg_ci64(g, l->n), "");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "done");
  LLVMValueRef br = LLVMBuildCondBr(g->b, more, l->body, exit);
  if (reorder)
    allow_reorder(g, br);
  LLVMAddIncoming(l->iv, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(g->b, exit);
  g->niv--;
}

void cg_nest_open(CG *g, Loop *l, int n, const int64_t *dims, Aff *idx) {
  for (int d = 0; d < n; d++) {
    cg_loop_open(g, &l[d], dims[d]);
    idx[d] = cg_aff_unit(g->niv - 1);
  }
}

void cg_nest_close(CG *g, Loop *l, int n) {
  for (int d = n - 1; d >= 0; d--)
    cg_loop_close(g, &l[d], false);
}

LLVMValueRef cg_new_acc(CG *g, LLVMTypeRef t) { return LLVMBuildAlloca(g->ab, t, "acc"); }

/* ---- affine indices ------------------------------------------------------ */

Aff cg_aff_const(int64_t k) {
  Aff a;
  memset(&a, 0, sizeof a);
  a.k = k;
  return a;
}

Aff cg_aff_unit(int loop) {
  Aff a = cg_aff_const(0);
  a.c[loop] = 1;
  return a;
}

/* a + s * b */
static Aff aff_madd(Aff a, int64_t s, const Aff *b) {
  for (int i = 0; i < CG_MAXL; i++)
    a.c[i] += s * b->c[i];
  for (int j = 0; j < CG_MAXG; j++)
    a.dev[j] += s * b->dev[j];
  a.k += s * b->k;
  return a;
}

LLVMValueRef cg_aff_value(CG *g, const Aff *a) {
  LLVMValueRef v = NULL;
  for (int i = 0; i < g->niv + g->nslots; i++) {
    int64_t c = i < g->niv ? a->c[i] : a->dev[i - g->niv];
    LLVMValueRef x = i < g->niv ? g->iv[i] : g->gidx[i - g->niv];
    if (!c)
      continue;
    LLVMValueRef t = c == 1 ? x : LLVMBuildNSWMul(g->b, x, cg_ci64(g, c), "");
    v = v ? LLVMBuildNSWAdd(g->b, v, t, "") : t;
  }
  if (!v)
    return cg_ci64(g, a->k);
  return a->k ? LLVMBuildNSWAdd(g->b, v, cg_ci64(g, a->k), "") : v;
}

void cg_strides_of(const Shape *s, int64_t *st) {
  int64_t m = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    st[d] = m;
    m *= s->d[d];
  }
}

/* The linear (C order) offset of idx in a buffer of shape s. */
Aff cg_linear_of(const Shape *s, const Aff *idx) {
  int64_t st[GSL_MAX_RANK];
  cg_strides_of(s, st);
  Aff lin = cg_aff_const(0);
  for (int d = 0; d < s->rank; d++)
    lin = aff_madd(lin, st[d], &idx[d]);
  return lin;
}

/* ---- buffers ------------------------------------------------------------- */

static LLVMValueRef ptr_at(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin) {
  return LLVMBuildInBoundsGEP2(g->b, cg_elem_type(g, dt), base, &lin, 1, "");
}

LLVMValueRef cg_load_lin(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin) {
  return LLVMBuildLoad2(g->b, cg_elem_type(g, dt), ptr_at(g, base, dt, lin), "");
}

void cg_store_lin(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin, LLVMValueRef x) {
  LLVMBuildStore(g->b, x, ptr_at(g, base, dt, lin));
}

LLVMValueRef cg_buffer_of(CG *g, const Value *v) {
  int r = g->pl->root[v->id];
  if (!g->pl->mat[v->id] || !g->glob[r])
    die("value %%%d has no buffer", v->id);
  if (!g->ptr[r]) { /* first use in this function: load it in the entry block */
    LLVMValueRef raw = LLVMBuildLoad2(g->ab, g->t_ptr, g->glob[r], "");
    g->ptr[r] = LLVMBuildBitCast(g->ab, raw, LLVMPointerType(cg_elem_type(g, g->p->values[r]->dtype), 0), "buf");
    g->loaded[g->nloaded++] = r;
  }
  return g->ptr[r];
}

/* A temporary of n elements of type dt: a private global pointer that
 * gsl_setup fills with gslrt_alloc; loaded where it is used. */

LLVMValueRef cg_temp(CG *g, int t, DType dt) {
  LLVMValueRef off = cg_ci64(g, g->pl->temps[t].offset);
  if (!g->arena)
    g->arena = LLVMBuildLoad2(g->ab, g->t_ptr, g->arena_glob, "arena");
  LLVMValueRef raw = LLVMBuildInBoundsGEP2(g->b, LLVMInt8TypeInContext(g->ctx), g->arena, &off, 1, "tmp");
  return LLVMBuildBitCast(g->b, raw, LLVMPointerType(cg_elem_type(g, dt), 0), "");
}

/* ---- elementwise expressions --------------------------------------------- */

static LLVMValueRef def_elem(CG *g, const Value *v, const Aff *idx);

LLVMValueRef cg_elem_at(CG *g, const Value *v, const Aff *idx) {
  if (!g->pl->mat[v->id])
    return def_elem(g, v, idx);
  if (g->pre[v->id])
    return g->pre[v->id];
  Aff lin = cg_linear_of(&v->shape, idx);
  return cg_load_lin(g, cg_buffer_of(g, v), v->dtype, cg_aff_value(g, &lin));
}

/* The element of v at idx from its operands (v an elementwise op or an
 * index map), ignoring any buffer v itself has. */
static LLVMValueRef def_elem(CG *g, const Value *v, const Aff *idx) {
  LLVMBuilderRef b = g->b;
  const Value *a = v->nargs ? v->args[0] : NULL;
  Aff ai[GSL_MAX_RANK];
  switch (v->op) {
  case OP_CONST:
    return v->dtype == DT_I32 ? cg_ci32(g, v->ival) : cg_cf32(g, v->fval);
  case OP_IOTA: { /* the global index: a tile cut along axis starts at its block's offset */
    LLVMValueRef k = cg_aff_value(g, &idx[v->axis]);
    if (cg_rng_split(g->p, v, v->axis))
      k = LLVMBuildNSWAdd(b, k,
                          LLVMBuildNSWMul(b, cg_group_index(g, v->sh.naxes[v->axis], v->sh.axes[v->axis]),
                                          cg_ci64(g, v->shape.d[v->axis]), ""),
                          "");
    return LLVMBuildTrunc(b, k, g->t_i32, "");
  }
  case OP_UNARY:
    return cg_unary(g, v->fn, cg_convert(g, cg_elem_at(g, a, idx), a->dtype, v->dtype), v->dtype);
  case OP_BINARY:
    return cg_binary(g, v->fn, cg_elem_at(g, a, idx), cg_convert(g, cg_elem_at(g, v->args[1], idx), v->args[1]->dtype, a->dtype),
                  a->dtype, v->dtype);
  case OP_SELECT: {
    LLVMValueRef c = cg_elem_at(g, a, idx);
    c = a->dtype == DT_F32 ? LLVMBuildFCmp(b, LLVMRealUNE, c, cg_cf32(g, 0.0), "")
                           : LLVMBuildICmp(b, LLVMIntNE, c, cg_ci32(g, 0), "");
    LLVMValueRef x = cg_convert(g, cg_elem_at(g, v->args[1], idx), v->args[1]->dtype, v->dtype);
    LLVMValueRef y = cg_convert(g, cg_elem_at(g, v->args[2], idx), v->args[2]->dtype, v->dtype);
    return LLVMBuildSelect(b, c, x, y, "");
  }
  case OP_CAST:
    return cg_convert(g, cg_elem_at(g, a, idx), a->dtype, v->dtype);
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
  case OP_LOCAL_SLICE:
    for (int i = 0; i < v->shape.rank; i++)
      ai[i] = idx[i];
    ai[v->axis].dev[g->groups[g->vgroup[v->id]].slot] += v->shape.d[v->axis];
    return cg_elem_at(g, a, ai);
  case OP_ONE_HOT: {
    int r = v->shape.rank - 1;
    LLVMValueRef k = LLVMBuildSExt(b, cg_elem_at(g, a, idx), g->t_i64, "");
    LLVMValueRef eq = LLVMBuildICmp(b, LLVMIntEQ, k, cg_aff_value(g, &idx[r]), "");
    return cg_bool_to(g, eq, v->dtype);
  }
  case OP_RESHAPE:
    die("reshape %%%d without a buffer", v->id);
  default:
    die("%s %%%d is not elementwise", op_name(v->op), v->id);
  }
}

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

/* v's buffer = v's elements, one loop nest over its shape. */
void cg_emit_map(CG *g, const Value *v) {
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  if (shape_elems(&v->shape) > 1)
    preload_scalars(g, v);
  cg_nest_open(g, l, v->shape.rank, v->shape.d, idx);
  LLVMValueRef x = def_elem(g, v, idx);
  Aff lin = cg_linear_of(&v->shape, idx);
  cg_store_lin(g, cg_buffer_of(g, v), v->dtype, cg_aff_value(g, &lin), x);
  cg_nest_close(g, l, v->shape.rank);
  while (g->npre)
    g->pre[g->pre_ids[--g->npre]] = NULL;
}

