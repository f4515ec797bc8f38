/* lower.c — how values are lowered, decided once for the buffer planner
 * (plan.c) and codegen (cg_*.c) alike. Neither calls the other for it:
 * both read this file, which knows no LLVM, so that what the plan places
 * (an einsum's temporaries) and what it leaves without a buffer (a
 * reshape that is an index map) is what codegen builds.
 *
 * Unit reshapes. A reshape that only adds or drops dims of size 1 (a
 * layer's gradient as its slice of a stacked one) keeps every element
 * where it is: an index map, which the plan need not give a buffer and
 * cg_fuse.c fuses into its user (lower_unit_reshape).
 *
 * Einsums (lower_gemm_plan). A GEMM when the two f32 (or bf16) operands
 * lie, in memory, [batch, M, K] or [batch, K, M] (and [batch, K, N] or
 * [batch, N, K]), reading through a transpose that has no buffer of its
 * own (its source buffer with the letters permuted, often saving a copy);
 * an operand that does not is copied to a canonical temporary first, and
 * a result not in [batch, M, N] order (the operands are swapped to make it
 * [batch, N, M] fit) is written to a temporary and copied out permuted.
 * The K letters take the order of whichever operand makes fewer copies.
 * The temporaries lie in the arena, live only during their einsum. An
 * einsum with fill counts (slots.c) calls gslrt_sgemm_fill, which runs
 * each block's filled rows (or summed terms) alone, when the counted
 * letter is the last of the row (summed) letters, the counts' letters are
 * the batch letters then the other row (summed) letters, in order, and
 * the counted dim is whole on this device. Anything else (i32, repeated
 * letters, one operand, a letter summed out of one operand) is one loop
 * nest (cg_einsum.c): the result's letters, then the summed ones.
 *
 * Cost: a few passes over an einsum's letters (at most GSL_MAX_RANK an
 * operand), or a reshape's dims; no allocation. */
#include <stdio.h>
#include <string.h>

#include "gslc.h"

/* ---- index maps ------------------------------------------------------------- */

bool lower_unit_reshape(const Value *v) {
  const Shape *a = &v->args[0]->shape;
  int q = 0;
  for (int i = 0; i < v->shape.rank; i++) {
    if (v->shape.d[i] == 1)
      continue;
    while (q < a->rank && a->d[q] == 1)
      q++;
    if (q == a->rank || a->d[q++] != v->shape.d[i])
      return false;
  }
  while (q < a->rank && a->d[q] == 1)
    q++;
  return q == a->rank;
}

/* ---- an einsum's letters ------------------------------------------------------ */

void lower_append(char *s, char c) {
  size_t n = strlen(s);
  s[n] = c;
  s[n + 1] = '\0';
}

const char *lower_cat3(char *buf, const char *a, const char *b, const char *c) {
  const char *part[3] = {a, b, c};
  size_t n = 0;
  for (int i = 0; i < 3; i++)
    for (const char *l = part[i]; *l && n < 3 * GSL_MAX_RANK; l++)
      buf[n++] = *l;
  buf[n] = '\0';
  return buf;
}

void lower_einsum_letters(const Value *v, EinsumLetters *s) {
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

/* ---- an einsum's GEMM ------------------------------------------------------------ */

static bool has_repeat(const char *s) {
  for (; *s; s++)
    if (strchr(s + 1, *s))
      return true;
  return false;
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
  l.a_n = !strcmp(g->la, lower_cat3(t, g->bl, g->ml, kl));
  l.a_t = !strcmp(g->la, lower_cat3(t, g->bl, kl, g->ml));
  l.b_n = !strcmp(g->lb, lower_cat3(t, g->bl, kl, g->nl));
  l.b_t = !strcmp(g->lb, lower_cat3(t, g->bl, g->nl, kl));
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

/* v's lowering, its letters s taken apart (lower_einsum_letters). */
static void lower(const Value *v, const EinsumLetters *s, const bool *mat, GemmPlan *g) {
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
    lower_append(in_a && in_b ? g->bl : in_a ? g->ml : g->nl, c);
  }
  char ka[GSL_MAX_RANK + 1] = "", kb[GSL_MAX_RANK + 1] = "";
  for (int i = 0; g->la[i]; i++)
    if (!strchr(e->out, g->la[i]))
      lower_append(ka, g->la[i]);
  for (int i = 0; g->lb[i]; i++)
    if (!strchr(e->out, g->lb[i]))
      lower_append(kb, g->lb[i]);
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
  if (strcmp(e->out, lower_cat3(t, g->bl, g->ml, g->nl)))
    g->tmp_c = 4 * g->nb * g->m * g->n;
  gemm_fill(g, v, s->ext);
}

void lower_gemm_plan(const Value *v, const bool *mat, GemmPlan *g) {
  EinsumLetters s;
  lower_einsum_letters(v, &s);
  lower(v, &s, mat, g);
}
