/* cg_einsum.c — einsum: one batched GEMM (gslrt_sgemm) or a plain loop nest.
 *
 * The plan (plan.c) decides the lowering: a GEMM when the two f32
 * operands lie, in memory, [batch, M, K] or [batch, K, M] (and [batch, K, N]
 * or [batch, N, K]), reading through a transpose that has no buffer of its
 * own (its source buffer with the letters permuted, often saving a copy);
 * an operand that does not is copied to a canonical temporary first, and a
 * result not in [batch, M, N] order (or [batch, N, M], by swapping the
 * operands) is written to a temporary and copied out permuted. The
 * temporaries lie in the arena, live only during their einsum. An einsum
 * with fill counts (slots.c) that the plan can use calls gslrt_sgemm_fill,
 * which runs each block's filled rows (or summed terms) alone. Anything
 * else (i32, repeated letters, one operand, a letter summed out of one
 * operand) is one loop nest: the result's letters, then the summed ones. */
#include <string.h>

#include <llvm-c/Core.h>

#include "codegen.h"

/* An einsum's letters with the extent of each. */
typedef struct Spec {
  char op[2][GSL_MAX_RANK + 1]; /* each operand's letters, in memory order */
  char out[GSL_MAX_RANK + 1];   /* the result's letters */
  int nops;                     /* operands in the spec */
  int64_t ext[256];             /* extent of each letter (0: unused) */
} Spec;

/* s ++ c (s has room) */
static void append(char *s, char c) {
  size_t n = strlen(s);
  s[n] = c;
  s[n + 1] = '\0';
}

/* v's spec with the extent of each letter (the verifier checked they fit) */
static void spec_of(const Value *v, Spec *s) {
  memset(s, 0, sizeof *s);
  const EinsumSpec *e = &v->ein;
  if (e->nin + (e->fill[0] != '\0') != v->nargs || e->nin < 1 || e->nin > 2 || strlen(e->out) != (size_t)v->shape.rank)
    die("einsum %%%d does not fit its operands", v->id);
  s->nops = e->nin;
  for (int j = 0; j < s->nops; j++)
    strcpy(s->op[j], e->in[j]);
  strcpy(s->out, e->out);
  for (int j = 0; j < s->nops; j++)
    for (int i = 0; s->op[j][i]; i++)
      s->ext[(unsigned char)s->op[j][i]] = v->args[j]->shape.d[i];
}

/* Any einsum as one loop nest: the result's letters, then the summed ones;
 * the result is cleared first when there are summed letters. */
static void einsum_loops(CG *g, const Value *v, const Spec *s) {
  char all[CG_MAXL + 1];
  strcpy(all, s->out);
  for (int j = 0; j < s->nops; j++)
    for (int i = 0; s->op[j][i]; i++)
      if (!strchr(all, s->op[j][i]))
        append(all, s->op[j][i]);
  int n = (int)strlen(all), no = v->shape.rank;
  LLVMValueRef out = cg_buffer_of(g, v);
  LLVMTypeRef et = cg_reg_type(g, v->dtype);
  Loop l[CG_MAXL];
  Aff idx[CG_MAXL], ai[GSL_MAX_RANK];
  if (n > no) {
    cg_nest_open(g, l, no, v->shape.d, idx);
    Aff lin = cg_linear_of(&v->shape, idx);
    cg_store_lin(g, out, v->dtype, cg_aff_value(g, &lin), LLVMConstNull(et));
    cg_nest_close(g, l, no);
  }
  int64_t ext[CG_MAXL];
  for (int i = 0; i < n; i++)
    ext[i] = s->ext[(unsigned char)all[i]];
  cg_nest_open(g, l, n, ext, idx);
  LLVMValueRef prod = NULL;
  for (int j = 0; j < s->nops; j++) {
    const Value *a = v->args[j];
    for (int i = 0; s->op[j][i]; i++)
      ai[i] = idx[strchr(all, s->op[j][i]) - all];
    LLVMValueRef x = cg_convert(g, cg_elem_at(g, a, ai), a->dtype, v->dtype);
    prod = !prod ? x : v->dtype == DT_F32 ? LLVMBuildFMul(g->b, prod, x, "") : LLVMBuildMul(g->b, prod, x, "");
  }
  Aff lin = cg_linear_of(&v->shape, idx);
  LLVMValueRef li = cg_aff_value(g, &lin);
  if (n > no) {
    LLVMValueRef o = cg_load_lin(g, out, v->dtype, li);
    prod = v->dtype == DT_F32 ? LLVMBuildFAdd(g->b, o, prod, "") : LLVMBuildAdd(g->b, o, prod, "");
  }
  cg_store_lin(g, out, v->dtype, li, prod);
  for (int i = n - 1; i >= 0; i--)
    cg_loop_close(g, &l[i], i >= no && v->dtype == DT_F32);
}

/* dst (contiguous, letters dl) = src (contiguous, letters sl), both dt. */
static void permute_copy(CG *g, DType dt, LLVMValueRef dst, const char *dl, LLVMValueRef src, const char *sl,
                         const Spec *s) {
  Shape ds = {0}, ss = {0};
  ds.rank = (int)strlen(dl);
  ss.rank = (int)strlen(sl);
  for (int i = 0; i < ds.rank; i++)
    ds.d[i] = s->ext[(unsigned char)dl[i]];
  for (int i = 0; i < ss.rank; i++)
    ss.d[i] = s->ext[(unsigned char)sl[i]];
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK], si[GSL_MAX_RANK];
  cg_nest_open(g, l, ds.rank, ds.d, idx);
  for (int i = 0; i < ss.rank; i++)
    si[i] = idx[strchr(dl, sl[i]) - dl];
  Aff slin = cg_linear_of(&ss, si), dlin = cg_linear_of(&ds, idx);
  LLVMValueRef x = cg_load_lin(g, src, dt, cg_aff_value(g, &slin));
  cg_store_lin(g, dst, dt, cg_aff_value(g, &dlin), x);
  cg_nest_close(g, l, ds.rank);
}

/* a ++ b ++ c into buf (of 3 * GSL_MAX_RANK + 1) */
static const char *cat3(char *buf, const char *a, const char *b, const char *c) {
  snprintf(buf, 3 * GSL_MAX_RANK + 1, "%s%s%s", a, b, c);
  return buf;
}

void cg_emit_einsum(CG *g, const Value *v) {
  Spec s;
  spec_of(v, &s);
  const GemmPlan *gp = &g->pl->gemm[v->id];
  if (!gp->gemm) {
    einsum_loops(g, v, &s);
    return;
  }
  char t1[3 * GSL_MAX_RANK + 1];
  LLVMValueRef pa = cg_buffer_of(g, gp->a), pb = cg_buffer_of(g, gp->b), pc = cg_buffer_of(g, v);
  bool ta = gp->a_t, tb = gp->b_t;
  int64_t m = gp->m, n = gp->n, k = gp->k;
  if (gp->tmp_a >= 0) {
    LLVMValueRef t = cg_temp(g, gp->tmp_a, gp->a->dtype);
    permute_copy(g, gp->a->dtype, t, cat3(t1, gp->bl, gp->ml, gp->kl), pa, gp->la, &s);
    pa = t;
  }
  if (gp->tmp_b >= 0) {
    LLVMValueRef t = cg_temp(g, gp->tmp_b, gp->b->dtype);
    permute_copy(g, gp->b->dtype, t, cat3(t1, gp->bl, gp->kl, gp->nl), pb, gp->lb, &s);
    pb = t;
  }
  if (gp->tmp_c >= 0)
    pc = cg_temp(g, gp->tmp_c, DT_F32);
  bool bf = gp->a->dtype == DT_BF16; /* bf16 operands, f32 accumulation and result */
  LLVMValueRef args[16] = {cg_ci64(g, gp->nb), cg_ci32(g, ta), cg_ci32(g, tb), cg_ci64(g, m), cg_ci64(g, n), cg_ci64(g, k),
                           pa, cg_ci64(g, ta ? m : k), cg_ci64(g, m * k),
                           pb, cg_ci64(g, tb ? k : n), cg_ci64(g, k * n),
                           pc, cg_ci64(g, n), cg_ci64(g, m * n)};
  if (bf) { /* bf16 operands: i16 pointers */
    args[6] = LLVMBuildBitCast(g->b, pa, LLVMPointerType(LLVMInt16TypeInContext(g->ctx), 0), "");
    args[9] = LLVMBuildBitCast(g->b, pb, LLVMPointerType(LLVMInt16TypeInContext(g->ctx), 0), "");
  }
  if (gp->fill == GF_NONE && bf) {
    memmove(&args[13], &args[12], 3 * sizeof args[0]); /* c_dtype after c */
    args[12] = LLVMBuildBitCast(g->b, pc, g->t_ptr, "");
    args[13] = cg_ci32(g, cg_rt_dtype(DT_F32));
    cg_call(g, "gslrt_gemm_bf16", g->t_void, 16, args);
  } else if (gp->fill == GF_NONE) {
    cg_call(g, "gslrt_sgemm", g->t_void, 15, args);
  } else { /* the same product over each block's filled rows (or terms) alone */
    LLVMValueRef fa[19];
    memcpy(fa, args, 15 * sizeof args[0]);
    fa[15] = cg_buffer_of(g, gp->fills);
    fa[16] = cg_ci64(g, gp->blocks);
    fa[17] = cg_ci64(g, gp->slots);
    fa[18] = cg_ci32(g, gp->fill == GF_DEPTH);
    cg_call(g, bf ? "gslrt_gemm_bf16_fill" : "gslrt_sgemm_fill", g->t_void, 19, fa);
  }
  if (gp->tmp_c >= 0)
    permute_copy(g, DT_F32, cg_buffer_of(g, v), s.out, pc, cat3(t1, gp->bl, gp->ml, gp->nl), &s);
}
