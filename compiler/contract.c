/* contract.c — sema's contraction rules: einsum(spec, a[, b]) and a @ b.
 *
 * Method: both end in one EinsumSpec (gslc.h), the type every pass reads.
 * einsum's text is taken apart by ein_parse; its letters are then checked
 * against the operands' ranks, dtypes and extents, with the user's errors.
 * '@' writes its spec itself: one letter per batch position, then rows,
 * inner and columns; batch dims broadcast (a size-1 dim facing a larger one
 * is reshaped away from its operand). ir_einsum builds the op. */
#include <inttypes.h>
#include <string.h>

#include "sema.h"

/* einsum(spec, a[, b]): the spec's letters checked against the operands'
 * ranks and extents, with the user's errors; the builder does the rest. */
Value *sema_einsum(Sema *s, const char *text, Value **ops, int nin, Span sp) {
  EinsumSpec z;
  char why[160];
  if (!ein_parse(text, nin, &z, why, sizeof why)) {
    sema_error(s, sp, "einsum spec \"%s\"%s", text, why);
    return NULL;
  }
  int64_t size[128];
  for (int i = 0; i < 128; i++)
    size[i] = -1;
  for (int k = 0; k < nin; k++) {
    if ((int)strlen(z.in[k]) != ops[k]->shape.rank) {
      sema_error(s, sp, "einsum spec \"%s\": operand %d has %d indices but its type is %s", text, k + 1,
           (int)strlen(z.in[k]), sema_vtype(s, ops[k]));
      return NULL;
    }
    if (ops[k]->dtype != ops[0]->dtype && (ops[k]->dtype == DT_I32 || ops[0]->dtype == DT_I32)) {
      sema_error(s, sp, "einsum operands differ in dtype: %s and %s", sema_vtype(s, ops[0]), sema_vtype(s, ops[k]));
      return NULL;
    }
    for (int i = 0; z.in[k][i]; i++) {
      int c = (unsigned char)z.in[k][i];
      if (size[c] >= 0 && size[c] != ops[k]->shape.d[i]) {
        sema_error(s, sp, "einsum spec \"%s\": index '%c' is %" PRId64 " in one place and %" PRId64 " in another",
             text, c, size[c], ops[k]->shape.d[i]);
        return NULL;
      }
      size[c] = ops[k]->shape.d[i];
    }
  }
  Shape out = {0};
  for (int i = 0; z.out[i]; i++)
    out.d[out.rank++] = size[(unsigned char)z.out[i]];
  DType dt = nin == 2 ? sema_promote_types(ops[0]->dtype, ops[1]->dtype) : ops[0]->dtype;
  if (!sema_check_shape(s, &out, dt, "einsum", sp))
    return NULL;
  Value *cast[2] = {ir_cast(&s->b, ops[0], dt, sp), nin == 2 ? ir_cast(&s->b, ops[1], dt, sp) : NULL};
  return ir_einsum(&s->b, &z, cast, sp);
}

/* a @ b: batched matrix product over the last two dims, batch dims broadcast */
Value *sema_matmul(Sema *s, Value *a, Value *b, Span sp) {
  if (a->shape.rank < 2 || b->shape.rank < 2) {
    sema_error(s, sp, "'@' needs operands of rank 2 or more, got %s and %s", sema_vtype(s, a), sema_vtype(s, b));
    return NULL;
  }
  int ra = a->shape.rank, rb = b->shape.rank;
  if (a->shape.d[ra - 1] != b->shape.d[rb - 2]) {
    sema_error(s, sp, "'@' contracts the last dim of %s with the second-to-last of %s: %" PRId64 " vs %" PRId64,
         sema_vtype(s, a), sema_vtype(s, b), a->shape.d[ra - 1], b->shape.d[rb - 2]);
    return NULL;
  }
  if (a->dtype != b->dtype && (a->dtype == DT_I32 || b->dtype == DT_I32)) {
    sema_error(s, sp, "'@' operands differ in dtype: %s and %s", sema_vtype(s, a), sema_vtype(s, b));
    return NULL;
  }
  DType dt = sema_promote_types(a->dtype, b->dtype); /* f32 with bf16: f32, as JAX */
  a = ir_cast(&s->b, a, dt, sp);
  b = ir_cast(&s->b, b, dt, sp);
  /* letters: one per batch position ('a', 'b', ...), then rows w, inner y,
   * columns x. A size-1 batch dim facing a larger one is squeezed out of its
   * operand (it broadcasts); a missing one is simply absent. */
  int nb = (ra > rb ? ra : rb) - 2;
  char la[GSL_MAX_RANK + 1] = {0}, lb[GSL_MAX_RANK + 1] = {0}, lo[GSL_MAX_RANK + 1] = {0};
  Shape sa = {0}, sb = {0}, out = {0};
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - (ra - 2)), ib = i - (nb - (rb - 2));
    int64_t da = ia >= 0 ? a->shape.d[ia] : 0, db = ib >= 0 ? b->shape.d[ib] : 0;
    if (da > 1 && db > 1 && da != db) {
      sema_error(s, sp, "'@' batch dims of %s and %s do not broadcast", sema_vtype(s, a), sema_vtype(s, b));
      return NULL;
    }
    char c = (char)('a' + i);
    if (ia >= 0 && !(da == 1 && db > 1)) {
      la[sa.rank] = c;
      sa.d[sa.rank++] = da;
    }
    if (ib >= 0 && !(db == 1 && da > 1)) {
      lb[sb.rank] = c;
      sb.d[sb.rank++] = db;
    }
    lo[out.rank] = c;
    out.d[out.rank++] = da > db ? da : db;
  }
  la[sa.rank] = 'w';
  sa.d[sa.rank++] = a->shape.d[ra - 2];
  la[sa.rank] = 'y';
  sa.d[sa.rank++] = a->shape.d[ra - 1];
  lb[sb.rank] = 'y';
  sb.d[sb.rank++] = b->shape.d[rb - 2];
  lb[sb.rank] = 'x';
  sb.d[sb.rank++] = b->shape.d[rb - 1];
  lo[out.rank] = 'w';
  out.d[out.rank++] = a->shape.d[ra - 2];
  lo[out.rank] = 'x';
  out.d[out.rank++] = b->shape.d[rb - 1];
  if (!sema_check_shape(s, &out, a->dtype, "'@'", sp))
    return NULL;
  Value *ops[2] = {ir_reshape(&s->b, a, sa, sp), ir_reshape(&s->b, b, sb, sp)};
  EinsumSpec e = {.nin = 2};
  strcpy(e.in[0], la);
  strcpy(e.in[1], lb);
  strcpy(e.out, lo);
  return ir_einsum(&s->b, &e, ops, sp);
}

