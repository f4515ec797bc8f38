/* cg_einsum.c — einsum: one batched GEMM (gslrt_sgemm) or a plain loop nest.
 *
 * The lowering is decided here, where it is emitted (cg_gemm_plan); the
 * planner (plan.c) calls the same function to learn the temporaries it
 * must place. A GEMM when the two f32 (or bf16) operands lie, in memory,
 * [batch, M, K] or [batch, K, M] (and [batch, K, N] or [batch, N, K]),
 * reading through a transpose that has no buffer of its own (its source
 * buffer with the letters permuted, often saving a copy); an operand that
 * does not is copied to a canonical temporary first, and a result not in
 * [batch, M, N] order (the operands are swapped to make it [batch, N, M]
 * fit) is written to a temporary and copied out permuted. The K letters
 * take the order of whichever operand makes fewer copies. The temporaries
 * lie in the arena, live only during their einsum. An einsum with fill
 * counts (slots.c) calls gslrt_sgemm_fill, which runs each block's filled
 * rows (or summed terms) alone, when the counted letter is the last of the
 * row (summed) letters, the counts' letters are the batch letters then the
 * other row (summed) letters, in order, and the counted dim is whole on
 * this device. Anything else (i32, repeated letters, one operand, a letter
 * summed out of one operand) is one loop nest: the result's letters, then
 * the summed ones. */
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

/* ---- the lowering ------------------------------------------------------------ */

static bool has_repeat(const char *s) {
  for (; *s; s++)
    if (strchr(s + 1, *s))
      return true;
  return false;
}

/* a ++ b ++ c into buf (of 3 * GSL_MAX_RANK + 1), cut at its end */
static const char *cat3(char *buf, const char *a, const char *b, const char *c) {
  const char *part[3] = {a, b, c};
  size_t n = 0;
  for (int i = 0; i < 3; i++)
    for (const char *l = part[i]; *l && n < 3 * GSL_MAX_RANK; l++)
      buf[n++] = *l;
  buf[n] = '\0';
  return buf;
}

static int64_t letters_size(const int64_t *ext, const char *l) {
  int64_t n = 1;
  for (; *l; l++)
    n *= ext[(unsigned char)*l];
  return n;
}

/* How two GEMM operands lie in memory for a given order of the K letters. */
typedef struct Layout {
  bool a_n, a_t; /* A is [batch, M, K] / [batch, K, M] */
  bool b_n, b_t; /* B is [batch, K, N] / [batch, N, K] */
  int copies;    /* operands that must be copied to a canonical temporary */
} Layout;

static Layout layout(const GemmPlan *g, const char *kl) {
  char t[3 * GSL_MAX_RANK + 1];
  Layout l;
  l.a_n = !strcmp(g->la, cat3(t, g->bl, g->ml, kl));
  l.a_t = !strcmp(g->la, cat3(t, g->bl, kl, g->ml));
  l.b_n = !strcmp(g->lb, cat3(t, g->bl, kl, g->nl));
  l.b_t = !strcmp(g->lb, cat3(t, g->bl, g->nl, kl));
  l.copies = !(l.a_n || l.a_t) + !(l.b_n || l.b_t);
  return l;
}

/* One GEMM operand: the value whose buffer is read and that buffer's
 * letters, looking through a transpose that has no buffer of its own. */
static const Value *gemm_operand(const bool *mat, const Value *a, const char *letters, char *out) {
  if (!mat[a->id] && a->op == OP_TRANSPOSE) {
    for (int i = 0; i < a->shape.rank; i++)
      out[a->perm[i]] = letters[i];
    out[a->shape.rank] = '\0';
    return a->args[0];
  }
  strcpy(out, letters);
  return a;
}

/* An einsum with fill counts: how the GEMM may use them (the file
 * comment says when), else GF_NONE. */
static void gemm_fill(GemmPlan *g, const Value *v, const int64_t *ext) {
  const EinsumSpec *e = &v->ein;
  if (!e->fill[0])
    return;
  for (int k = 0; k < e->nin; k++) {
    const char *at = strchr(e->in[k], e->fill_of);
    if (at && v->args[k]->gshape.rank && v->args[k]->gshape.d[at - e->in[k]] != v->args[k]->shape.d[at - e->in[k]])
      return;
  }
  const char *lists[2] = {g->ml, g->kl};
  for (int mode = 0; mode < 2; mode++) {
    size_t n = strlen(lists[mode]);
    char t[3 * GSL_MAX_RANK + 1];
    if (!n || lists[mode][n - 1] != e->fill_of)
      continue;
    snprintf(t, sizeof t, "%s%.*s", g->bl, (int)(n - 1), lists[mode]);
    if (strcmp(t, e->fill))
      continue;
    g->fill = mode ? GF_DEPTH : GF_ROWS;
    g->fills = v->args[e->nin];
    g->slots = ext[(unsigned char)e->fill_of];
    g->blocks = (mode ? g->k : g->m) / g->slots;
    return;
  }
}

/* v's lowering, its spec s taken apart (spec_of). */
static void lower(const Value *v, const Spec *s, const bool *mat, GemmPlan *g) {
  const EinsumSpec *e = &v->ein;
  memset(g, 0, sizeof *g);
  g->tmp_a = g->tmp_b = g->tmp_c = -1;
  /* through a GEMM: f32 operands (gslrt_sgemm) or bf16 ones (gslrt_gemm_bf16), f32 result */
  bool plain = v->dtype != DT_F32 || e->nin != 2 || has_repeat(e->in[0]) || has_repeat(e->in[1]);
  for (int j = 0; j < e->nin && !plain; j++) {
    plain = !dtype_is_float(v->args[j]->dtype);
    for (int i = 0; e->in[j][i]; i++)
      if (!strchr(e->out, e->in[j][i]) && !strchr(e->in[1 - j], e->in[j][i]))
        plain = true;
  }
  if (plain)
    return;
  g->gemm = true;
  g->a = gemm_operand(mat, v->args[0], e->in[0], g->la);
  g->b = gemm_operand(mat, v->args[1], e->in[1], g->lb);
  /* A supplies the rows: the result's first letter after the batch ones */
  for (int i = 0; e->out[i]; i++) {
    bool in_a = strchr(g->la, e->out[i]), in_b = strchr(g->lb, e->out[i]);
    if (in_a != in_b) {
      if (in_b) {
        const Value *t = g->a;
        char tl[GSL_MAX_RANK + 1];
        g->a = g->b;
        g->b = t;
        strcpy(tl, g->la);
        strcpy(g->la, g->lb);
        strcpy(g->lb, tl);
      }
      break;
    }
  }
  for (int i = 0; e->out[i]; i++) {
    char c = e->out[i];
    bool in_a = strchr(g->la, c), in_b = strchr(g->lb, c);
    append(in_a && in_b ? g->bl : in_a ? g->ml : g->nl, c);
  }
  char ka[GSL_MAX_RANK + 1] = "", kb[GSL_MAX_RANK + 1] = "";
  for (int i = 0; g->la[i]; i++)
    if (!strchr(e->out, g->la[i]))
      append(ka, g->la[i]);
  for (int i = 0; g->lb[i]; i++)
    if (!strchr(e->out, g->lb[i]))
      append(kb, g->lb[i]);
  /* the K order of whichever operand makes fewer copies */
  Layout lay = layout(g, ka);
  strcpy(g->kl, ka);
  if (lay.copies) {
    Layout other = layout(g, kb);
    if (other.copies < lay.copies) {
      lay = other;
      strcpy(g->kl, kb);
    }
  }
  g->nb = letters_size(s->ext, g->bl);
  g->m = letters_size(s->ext, g->ml);
  g->n = letters_size(s->ext, g->nl);
  g->k = letters_size(s->ext, g->kl);
  g->a_t = !lay.a_n && lay.a_t;
  g->b_t = !lay.b_n && lay.b_t;
  if (!lay.a_n && !lay.a_t)
    g->tmp_a = dtype_size(g->a->dtype) * g->nb * g->m * g->k;
  if (!lay.b_n && !lay.b_t)
    g->tmp_b = dtype_size(g->b->dtype) * g->nb * g->k * g->n;
  char t[3 * GSL_MAX_RANK + 1];
  if (strcmp(e->out, cat3(t, g->bl, g->ml, g->nl)))
    g->tmp_c = 4 * g->nb * g->m * g->n;
  gemm_fill(g, v, s->ext);
}

void cg_gemm_plan(const Value *v, const bool *mat, GemmPlan *g) {
  Spec s;
  spec_of(v, &s);
  lower(v, &s, mat, g);
}

/* ---- the code ------------------------------------------------------------------ */

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

void cg_emit_einsum(CG *g, const Value *v) {
  Spec s;
  GemmPlan plan, *gp = &plan;
  spec_of(v, &s);
  lower(v, &s, g->pl->mat, gp);
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
    permute_copy(g, gp->a->dtype, t, cat3(t1, gp->bl, gp->ml, gp->kl), pa, gp->la, &s);
    pa = t;
  }
  if (gp->tmp_b >= 0) {
    LLVMValueRef t = cg_temp(g, tmp++, gp->b->dtype);
    permute_copy(g, gp->b->dtype, t, cat3(t1, gp->bl, gp->kl, gp->nl), pb, gp->lb, &s);
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
    permute_copy(g, DT_F32, cg_buffer_of(g, v), s.out, pc, cat3(t1, gp->bl, gp->ml, gp->nl), &s);
}
