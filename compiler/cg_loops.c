/* cg_loops.c — the base of codegen, which every other cg file builds on
 * and which calls none of them: LLVM types, constants and calls; loop
 * nests; affine indices; buffers; the device's index in a group of mesh
 * axes. Above it: cg_math.c (scalar math), cg_fuse.c (fused elementwise
 * expressions), the op emitters (cg_ops.c, cg_einsum.c, cg_collectives.c),
 * and codegen.c (the module, the kernels, gsl_step) on top.
 *
 * Loops. Each loop nest runs innermost over the last dimension with i64
 * counters in rotated canonical form, so LoopVectorize fires; sum
 * reductions along the innermost loop carry llvm.loop.vectorize.enable,
 * which lets the vectorizer reassociate them (and nothing else).
 *
 * Indices. An index is an affine function (struct Aff) of the loop
 * counters and of the device's indices in groups of mesh axes (run-time
 * terms, read from the slots codegen.c fills at a kernel's entry).
 *
 * Buffers. Every buffer the plan places lies in one arena at its offset,
 * its address kept in a private global that gsl_setup fills; a kernel
 * loads the ones it uses (and the arena, for temporaries) once, in its
 * entry block, on first use (params and inputs: the runtime's storage,
 * behind globals of their own). */
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>

#include "codegen.h"
#include "gslrt.h" /* the runtime's dtype codes */

/* ---- types, constants, calls ------------------------------------------- */

LLVMTypeRef cg_elem_type(CG *g, DType dt) {
  return dt == DT_I32 ? g->t_i32 : dt == DT_BF16 ? LLVMInt16TypeInContext(g->ctx) : g->t_f32;
}
LLVMTypeRef cg_reg_type(CG *g, DType dt) { return dt == DT_I32 ? g->t_i32 : g->t_f32; }

LLVMValueRef cg_ci64(CG *g, int64_t v) { return LLVMConstInt(g->t_i64, (unsigned long long)v, 1); }
LLVMValueRef cg_ci32(CG *g, int64_t v) { return LLVMConstInt(g->t_i32, (unsigned long long)v, 1); }
LLVMValueRef cg_cf32(CG *g, double v) { return LLVMConstReal(g->t_f32, v); }

/* A declared function of module g->mod, added on first use. */
static LLVMValueRef declare_fn(CG *g, const char *name, LLVMTypeRef ft) {
  LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
  return f ? f : LLVMAddFunction(g->mod, name, ft);
}

LLVMValueRef cg_call(CG *g, const char *name, LLVMTypeRef ret, int n, LLVMValueRef *args) {
  LLVMTypeRef pt[24];
  if (n > 24)
    die("a call of %s with %d arguments", name, n);
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

/* A constant global made once a module for its contents (so that two
 * kernels naming the same string or shape name the same global, and can
 * be one: codegen.c's emit_kernels). */
typedef struct Interned {
  uint64_t hash;      /* of kind and bytes */
  char kind;          /* 's' a string, else an array's element type's width */
  size_t len;         /* bytes */
  char *bytes;        /* its contents */
  LLVMValueRef value; /* the pointer to it */
} Interned;

uint64_t cg_fnv1a(char kind, const void *p, size_t n) {
  uint64_t h = 1469598103934665603ull ^ (unsigned char)kind;
  for (size_t i = 0; i < n; i++)
    h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

static LLVMValueRef interned(CG *g, char kind, const void *p, size_t n) {
  uint64_t h = cg_fnv1a(kind, p, n);
  for (int i = 0; i < g->ninterned; i++)
    if (g->interned[i].hash == h && g->interned[i].kind == kind && g->interned[i].len == n &&
        !memcmp(g->interned[i].bytes, p, n))
      return g->interned[i].value;
  return NULL;
}

static LLVMValueRef intern(CG *g, char kind, const void *p, size_t n, LLVMValueRef value) {
  if (g->ninterned == g->capinterned)
    g->interned = xrealloc(g->interned, sizeof *g->interned * (size_t)(g->capinterned = g->capinterned ? 2 * g->capinterned : 64));
  char *copy = xmalloc(n + 1);
  memcpy(copy, p, n);
  g->interned[g->ninterned++] = (Interned){cg_fnv1a(kind, p, n), kind, n, copy, value};
  return value;
}

void cg_free_interned(CG *g) {
  for (int i = 0; i < g->ninterned; i++)
    free(g->interned[i].bytes);
  free(g->interned);
  g->interned = NULL;
  g->ninterned = g->capinterned = 0;
}

/* A private constant global holding s, as an i8 pointer. */
LLVMValueRef cg_cstr(CG *g, const char *s) {
  size_t n = strlen(s);
  LLVMValueRef known = interned(g, 's', s, n);
  if (known)
    return known;
  LLVMValueRef init = LLVMConstStringInContext(g->ctx, s, (unsigned)n, 0);
  LLVMValueRef gv = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "str");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(gv, LLVMGlobalUnnamedAddr);
  return intern(g, 's', s, n, LLVMConstBitCast(gv, g->t_ptr));
}

/* A private constant array of n integers of type t (at least one element),
 * as a pointer to its first element. */
LLVMValueRef cg_const_array(CG *g, LLVMTypeRef t, int n, const int64_t *v) {
  int64_t key[GSL_MAX_RANK * GSL_MAX_AXES + 1];
  int m = n > 0 ? n : 1;
  for (int i = 0; i < m; i++)
    key[i] = i < n ? v[i] : 0;
  char kind = (char)LLVMGetIntTypeWidth(t);
  LLVMValueRef known = interned(g, kind, key, sizeof *key * (size_t)m);
  if (known)
    return known;
  LLVMValueRef el[GSL_MAX_RANK * GSL_MAX_AXES + 1];
  for (int i = 0; i < m; i++)
    el[i] = LLVMConstInt(t, (unsigned long long)key[i], 1);
  LLVMValueRef init = LLVMConstArray(t, el, (unsigned)m);
  LLVMValueRef gv = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "dims");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(gv, LLVMGlobalUnnamedAddr);
  return intern(g, kind, key, sizeof *key * (size_t)m, LLVMConstBitCast(gv, LLVMPointerType(t, 0)));
}

LLVMValueRef cg_shape_array(CG *g, const Shape *s) { return cg_const_array(g, g->t_i64, s->rank, s->d); }

/* ---- loops --------------------------------------------------------------- */

/* the loop's header block, its counter starting at lo, entered from
 * where the builder is (after the branch to it there) */
static LLVMValueRef loop_header(CG *g, Loop *l, LLVMBasicBlockRef pre, LLVMValueRef lo) {
  LLVMPositionBuilderAtEnd(g->b, l->body);
  l->iv = LLVMBuildPhi(g->b, g->t_i64, "i");
  LLVMAddIncoming(l->iv, &lo, &pre, 1);
  if (g->niv >= CG_MAXL)
    die("loop nest too deep");
  g->iv[g->niv++] = l->iv;
  return l->iv;
}

LLVMValueRef cg_loop_open(CG *g, Loop *l, int64_t n) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  l->n = n;
  l->end = NULL;
  l->skip = NULL;
  l->body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "loop");
  LLVMBuildBr(g->b, l->body);
  return loop_header(g, l, pre, cg_ci64(g, 0));
}

LLVMValueRef cg_loop_open_range(CG *g, Loop *l, LLVMValueRef lo, LLVMValueRef hi) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  l->n = 0;
  l->end = hi;
  l->body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "loop");
  l->skip = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "done");
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, lo, hi, ""), l->body, l->skip);
  return loop_header(g, l, pre, lo);
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
  LLVMValueRef more = LLVMBuildICmp(g->b, LLVMIntSLT, next, l->end ? l->end : cg_ci64(g, l->n), "");
  LLVMBasicBlockRef exit = l->skip ? l->skip : LLVMAppendBasicBlockInContext(g->ctx, g->fn, "done");
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
  LLVMTypeRef et = cg_elem_type(g, dt);
  base = LLVMBuildBitCast(g->b, base, LLVMPointerType(et, 0), ""); /* folded away when it already is */
  return LLVMBuildInBoundsGEP2(g->b, et, base, &lin, 1, "");
}

/* bf16 in memory is the top half of an f32: widened exactly on load,
 * rounded to nearest even on store (cg_round_bf16) */
LLVMValueRef cg_load_lin(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin) {
  LLVMValueRef x = LLVMBuildLoad2(g->b, cg_elem_type(g, dt), ptr_at(g, base, dt, lin), "");
  if (dt != DT_BF16)
    return x;
  LLVMValueRef u = LLVMBuildShl(g->b, LLVMBuildZExt(g->b, x, g->t_i32, ""), cg_ci32(g, 16), "");
  return LLVMBuildBitCast(g->b, u, g->t_f32, "");
}

void cg_store_lin(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin, LLVMValueRef x) {
  cg_store_exact(g, base, dt, lin, dt == DT_BF16 ? cg_round_bf16(g, x) : x);
}

void cg_store_exact(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin, LLVMValueRef x) {
  if (dt == DT_BF16) {
    LLVMValueRef u = LLVMBuildBitCast(g->b, x, g->t_i32, "");
    x = LLVMBuildTrunc(g->b, LLVMBuildLShr(g->b, u, cg_ci32(g, 16), ""), LLVMInt16TypeInContext(g->ctx), "");
  }
  LLVMBuildStore(g->b, x, ptr_at(g, base, dt, lin));
}

LLVMValueRef cg_round_bf16(CG *g, LLVMValueRef x) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef u = LLVMBuildBitCast(b, x, g->t_i32, "");
  LLVMValueRef lsb = LLVMBuildAnd(b, LLVMBuildLShr(b, u, cg_ci32(g, 16), ""), cg_ci32(g, 1), "");
  LLVMValueRef r = LLVMBuildAdd(b, u, LLVMBuildAdd(b, lsb, cg_ci32(g, 0x7fff), ""), "");
  LLVMValueRef nan = LLVMBuildOr(b, u, cg_ci32(g, 0x00400000), ""); /* NaN: quieted, kept */
  LLVMValueRef isnan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
  r = LLVMBuildAnd(b, LLVMBuildSelect(b, isnan, nan, r, ""), cg_ci32(g, (int64_t)(int32_t)0xffff0000u), "");
  return LLVMBuildBitCast(b, r, g->t_f32, "");
}

int32_t cg_rt_dtype(DType dt) { return dt == DT_I32 ? GSLRT_I32 : dt == DT_BF16 ? GSLRT_BF16 : GSLRT_F32; }

/* In a kernel, the pointer its slot for (glob, off) gives, loaded in the
 * entry block on first use: the buffer the global holds, off bytes on.
 * Slots are numbered in the order first asked for; the kernel's code
 * names no buffer or offset of its own, so it serves every value whose
 * code is the same on other buffers (emit_kernels). */
static LLVMValueRef slot_ptr(CG *g, int buf, int64_t off) {
  int k = 0;
  while (k < g->nslot && (g->slot[k].buf != buf || g->slot[k].off != off))
    k++;
  if (k < g->nslot)
    return g->slot[k].ptr;
  if (g->nslot == g->capslot)
    g->slot = xrealloc(g->slot, sizeof *g->slot * (size_t)(g->capslot = g->capslot ? 2 * g->capslot : 8));
  LLVMValueRef at[2] = {cg_ci64(g, k), cg_ci32(g, 0)};
  LLVMValueRef holder = LLVMBuildLoad2(g->ab, LLVMPointerType(g->t_ptr, 0),
                                       LLVMBuildInBoundsGEP2(g->ab, g->t_slot, g->slots_arg, at, 2, ""), "slot");
  at[1] = cg_ci32(g, 1);
  LLVMValueRef o = LLVMBuildLoad2(g->ab, g->t_i64, LLVMBuildInBoundsGEP2(g->ab, g->t_slot, g->slots_arg, at, 2, ""), "off");
  LLVMValueRef base = LLVMBuildLoad2(g->ab, g->t_ptr, holder, "");
  LLVMValueRef p = LLVMBuildGEP2(g->ab, LLVMInt8TypeInContext(g->ctx), base, &o, 1, "buf");
  g->slot[g->nslot++] = (Slot){buf, off, p};
  return p;
}

LLVMValueRef cg_buffer_of(CG *g, const Value *v) { return cg_buffer_at(g, v, 0); }

LLVMValueRef cg_param(CG *g, int64_t x, LLVMTypeRef t) {
  if (!g->slotted)
    return LLVMConstInt(t, (unsigned long long)x, 1);
  int k = 0;
  while (k < g->nslot && (g->slot[k].buf != SLOT_PARAM || g->slot[k].off != x))
    k++;
  if (k == g->nslot) {
    if (g->nslot == g->capslot)
      g->slot = xrealloc(g->slot, sizeof *g->slot * (size_t)(g->capslot = g->capslot ? 2 * g->capslot : 8));
    LLVMValueRef at[2] = {cg_ci64(g, k), cg_ci32(g, 1)};
    LLVMValueRef o = LLVMBuildLoad2(g->ab, g->t_i64, LLVMBuildInBoundsGEP2(g->ab, g->t_slot, g->slots_arg, at, 2, ""), "param");
    g->slot[g->nslot++] = (Slot){SLOT_PARAM, x, o};
  }
  return LLVMBuildTrunc(g->b, g->slot[k].ptr, t, "");
}

LLVMValueRef cg_buffer_at(CG *g, const Value *v, int64_t k) {
  int r = g->pl->root[v->id];
  if (!g->pl->mat[v->id] || (!g->slotted && !g->glob[r]))
    die("value %%%d has no buffer", v->id);
  LLVMTypeRef et = cg_elem_type(g, g->p->values[r]->dtype);
  if (g->slotted)
    return LLVMBuildBitCast(g->ab, slot_ptr(g, r, k * dtype_size(g->p->values[r]->dtype)),
                            LLVMPointerType(et, 0), "");
  if (!g->ptr[r]) { /* first use in this function: load it in the entry block */
    LLVMValueRef raw = LLVMBuildLoad2(g->ab, g->t_ptr, g->glob[r], "");
    g->ptr[r] = LLVMBuildBitCast(g->ab, raw, LLVMPointerType(et, 0), "buf");
    g->loaded[g->nloaded++] = r;
  }
  if (!k)
    return g->ptr[r];
  LLVMValueRef at = cg_ci64(g, k);
  return LLVMBuildGEP2(g->b, et, g->ptr[r], &at, 1, "");
}

/* A temporary of the plan: a private global pointer that gsl_setup points
 * at its place in the arena; loaded on first use. */
LLVMValueRef cg_temp(CG *g, int t, DType dt) {
  if (!g->tptr[t]) {
    g->tptr[t] = g->slotted ? slot_ptr(g, -1 - t, 0) : LLVMBuildLoad2(g->ab, g->t_ptr, g->tglob[t], "tmp");
    g->tloaded[g->ntloaded++] = t;
  }
  return LLVMBuildBitCast(g->b, g->tptr[t], LLVMPointerType(cg_elem_type(g, dt), 0), "");
}

/* ---- the device's place on the mesh -------------------------------------- */

LLVMValueRef cg_group_index(CG *g, int n, const uint8_t *axes) {
  for (int k = 0; k < g->ngroups; k++)
    if (g->groups[k].n == n && !memcmp(g->groups[k].axes, axes, (size_t)n) && g->groups[k].slot >= 0)
      return g->gidx[g->groups[k].slot];
  die("the index in a group of %d mesh axes was not collected", n);
}

bool cg_dim_split(const Program *p, const Value *v, int d) { return p->spmd && v->sh.naxes[d] > 0; }

/* ---- messages ------------------------------------------------------------- */

/* file:line:col of sp, the file by its base name (as --explain names it) */
static size_t put_span(char *buf, size_t len, Span sp) {
  const char *base = strrchr(sp.src->path, '/');
  return (size_t)snprintf(buf, len, "%s:%u:%u", base ? base + 1 : sp.src->path, sp.line, sp.col);
}

void cg_op_where(const Value *v, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "the %s", op_name(v->op));
  bool inlined = v->site.src && (v->site.src != v->span.src || v->site.off != v->span.off);
  if (!v->span.src) {
    if (n < len)
      snprintf(buf + n, len - n, " %%%d (made by the compiler)", v->id);
    return;
  }
  if (n < len)
    n += (size_t)snprintf(buf + n, len - n, " at ");
  if (n < len)
    n += put_span(buf + n, len - n, v->span);
  if (inlined && n < len) {
    n += (size_t)snprintf(buf + n, len - n, " (inlined at ");
    if (n < len)
      n += put_span(buf + n, len - n, v->site);
  }
  if (v->pass != PASS_FORWARD && n < len)
    n += (size_t)snprintf(buf + n, len - n, "%s%s pass", inlined ? "; " : " (",
                          ir_pass_name(v->pass));
  if ((inlined || v->pass != PASS_FORWARD) && n < len)
    snprintf(buf + n, len - n, ")");
}
