/* combine.c — small all-to-alls ride with large ones: one exchange where
 * the partitioner found two.
 *
 * A moe block that skips its empty slots (slots.c) needs its fill counts,
 * computed beside the routes on the groups' devices, on the experts'
 * devices: the partitioner gives them an all_to_all of their own, a few
 * dozen bytes, beside the block's tokens' all_to_all of hundreds of
 * kilobytes over the same group. Exchanged apart, the counts would cost a
 * round of messages of their own (and a layer would move its tokens with
 * more than SPEC section 6's one all-to-all each way). Here, as XLA's
 * collective combiners do, such a small all_to_all R becomes the rider of
 * an earlier all_to_all C on the same group: R moves to right after C in
 * program order, and codegen emits one runtime call at C that moves both
 * (gslrt_all_to_all_rider: R's blocks travel as messages beside C's, in
 * the same wait). R keeps its own value and buffer, so nothing else
 * changes; plan.c starts R's buffer's life at C, where it is written.
 *
 * Which C. R's operand must be computed before C (so that it is ready at
 * C's call), C must carry no rider yet and not ride itself, and R must be
 * small (SPMD_RIDER_MAX_BYTES on a device), so that moving it earlier
 * keeps only a little memory alive a little longer. Of the candidates the
 * last before R wins: R's buffer then lives the shortest. Moving R earlier
 * is always sound: its operand is ready at its new place, and its readers
 * all come after its old one. */
#include <string.h>

#include "gslc.h"

static bool same_group(const Value *a, const Value *b) {
  if (a->ngroup != b->ngroup)
    return false;
  for (int i = 0; i < a->ngroup; i++)
    if (a->group[i] != b->group[i])
      return false;
  return true;
}

void spmd_combine(Program *p) {
  for (int r = 0; r < p->nvalues; r++) {
    Value *R = p->values[r];
    if (R->op != OP_ALL_TO_ALL || R->carrier || R->rider ||
        dtype_size(R->dtype) * shape_elems(&R->args[0]->shape) > SPMD_RIDER_MAX_BYTES)
      continue;
    Value *C = NULL;
    for (int c = r - 1; c > R->args[0]->id && !C; c--) {
      Value *v = p->values[c];
      if (v->op == OP_ALL_TO_ALL && !v->rider && !v->carrier && same_group(v, R))
        C = v;
    }
    if (!C)
      continue;
    /* R moves from r to right after C, the values between one place later */
    int at = C->id + 1;
    memmove(&p->values[at + 1], &p->values[at], sizeof *p->values * (size_t)(r - at));
    p->values[at] = R;
    for (int i = at; i <= r; i++)
      p->values[i]->id = i;
    C->rider = R;
    R->carrier = C;
  }
}
