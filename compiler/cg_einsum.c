/* cg_einsum.c — einsum: one batched GEMM (gslrt_sgemm) or a plain loop nest.
 *
 * How each einsum is lowered is lower.c's (lower_gemm_plan), which the
 * planner (plan.c) reads too, to place the temporaries: this file builds
 * what that plan says. A GEMM reads its operands' buffers (a transpose
 * without a buffer of its own looked through), first copying an operand
 * that does not lie [batch, M, K] or [batch, K, M] ([batch, K, N] or
 * [batch, N, K]) to its temporary, and writes the result, or its
 * temporary copied out permuted after the call; with fill counts it calls
 * gslrt_sgemm_fill (gslrt_gemm_bf16_fill) on the same layout. Anything
 * else is one loop nest: the result's letters, then the summed ones, the
 * result cleared first when there are summed letters. */
#include <string.h>

#include <llvm-c/Core.h>

#include "codegen.h"

/* Any einsum as one loop nest: the result's letters, then the summed ones;
 * the result is cleared first when there are summed letters. */
static void einsum_loops(CG *g, const Value *v, const EinsumLetters *s) {
  char all[CG_MAXL + 1];
  strcpy(all, s->out);
  for (int j = 0; j < s->nops; j++)
    for (int i = 0; s->op[j][i]; i++)
      if (!strchr(all, s->op[j][i]))
        lower_append(all, s->op[j][i]);
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
                         const EinsumLetters *s) {
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

void cg_emit_einsum(CG *g, const Value *v) {
  EinsumLetters s;
  GemmPlan plan, *gp = &plan;
  lower_einsum_letters(v, &s);
  lower_gemm_plan(v, g->pl->mat, gp);
  if (!gp->gemm) {
    einsum_loops(g, v, &s);
    return;
  }
  int tmp = g->pl->temp[v->id]; /* the next of its temporaries the plan placed */
  if (tmp < 0 && (gp->tmp_a >= 0 || gp->tmp_b >= 0 || gp->tmp_c >= 0))
    die("einsum %%%d: its temporaries are not in the plan", v->id);
  char t1[3 * GSL_MAX_RANK + 1];
  LLVMValueRef pa = cg_buffer_of(g, gp->a), pb = cg_buffer_of(g, gp->b), pc = cg_buffer_of(g, v);
  bool ta = gp->a_t, tb = gp->b_t;
  int64_t m = gp->m, n = gp->n, k = gp->k;
  if (gp->tmp_a >= 0) {
    LLVMValueRef t = cg_temp(g, tmp++, gp->a->dtype);
    permute_copy(g, gp->a->dtype, t, lower_cat3(t1, gp->bl, gp->ml, gp->kl), pa, gp->la, &s);
    pa = t;
  }
  if (gp->tmp_b >= 0) {
    LLVMValueRef t = cg_temp(g, tmp++, gp->b->dtype);
    permute_copy(g, gp->b->dtype, t, lower_cat3(t1, gp->bl, gp->kl, gp->nl), pb, gp->lb, &s);
    pb = t;
  }
  if (gp->tmp_c >= 0)
    pc = cg_temp(g, tmp, DT_F32);
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
    permute_copy(g, DT_F32, cg_buffer_of(g, v), s.out, pc, lower_cat3(t1, gp->bl, gp->ml, gp->nl), &s);
}
