/* test_plan.c — plan.c: which values get buffers, their lifetimes, their
 * places in the arena with reuse, and plan_verify. Expected sizes are
 * worked out by hand in the comments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"
#include "tests.h"

static Span nospan;

static Value *input(Program *p, const char *name, Shape sh) {
  Tensor t = {0};
  t.name = name;
  t.kind = TK_INPUT;
  t.dtype = DT_F32;
  t.shape = sh;
  return ir_tensor(p, &t);
}

/* x: f32[16] (64 bytes); c1 = cumsum(x), c2 = cumsum(c1), c3 = cumsum(c2),
 * output c3. Each cumsum has a buffer of 64 bytes; c1 lives over steps 1-2,
 * c2 over 2-3, c3 from 3 to the end. c1 and c3 never live at once, so they
 * share bytes: the arena is 128 bytes, where one buffer each takes 192. */
static void test_reuse(void) {
  Program *p = ir_new("t.gsl");
  Value *x = input(p, "x", shape_of(1, (int64_t[]){16}));
  Value *c1 = ir_cumsum(p, x, 0, false, nospan);
  Value *c2 = ir_cumsum(p, c1, 0, false, nospan);
  Value *c3 = ir_cumsum(p, c2, 0, false, nospan);
  ir_output(p, "c3", c3, nospan);
  Plan *pl = plan_buffers(p);
  CU_ASSERT_TRUE(plan_verify(pl, stderr));
  CU_ASSERT_EQUAL(pl->offset[x->id], -1); /* inputs keep the runtime's storage */
  CU_ASSERT_EQUAL(pl->first[c1->id], 1);
  CU_ASSERT_EQUAL(pl->last[c1->id], 2);
  CU_ASSERT_EQUAL(pl->last[c3->id], p->nvalues); /* an output lives to the end */
  CU_ASSERT_EQUAL(pl->arena_bytes, 128);
  CU_ASSERT_EQUAL(pl->noreuse_bytes, 192);
  CU_ASSERT_EQUAL(pl->live_bytes, 128);
  CU_ASSERT_EQUAL(pl->offset[c1->id], pl->offset[c3->id]);
  CU_ASSERT_NOT_EQUAL(pl->offset[c1->id], pl->offset[c2->id]);
  /* c2 moved onto c1 while both are live at step 2: the check sees it */
  int64_t keep = pl->offset[c2->id];
  pl->offset[c2->id] = pl->offset[c1->id];
  CU_ASSERT_FALSE(plan_verify(pl, NULL));
  pl->offset[c2->id] = keep + 1; /* unaligned */
  CU_ASSERT_FALSE(plan_verify(pl, NULL));
  pl->offset[c2->id] = keep;
  CU_ASSERT_TRUE(plan_verify(pl, NULL));
  plan_free(pl);
  ir_free(p);
}

/* A chain of 200 negations of x: f32[4] is fused in pieces of at most 64
 * ops, so values 64, 128 and 192 of the chain get buffers (16 bytes, 64
 * with alignment), and the last is the output's. */
static void test_fusion_bound(void) {
  Program *p = ir_new("t.gsl");
  Value *v = input(p, "x", shape_of(1, (int64_t[]){4}));
  Value *chain[200];
  for (int i = 0; i < 200; i++)
    v = chain[i] = ir_unary(p, UF_NEG, v, nospan);
  ir_output(p, "y", v, nospan);
  Plan *pl = plan_buffers(p);
  int buffers = 0;
  for (int i = 0; i < 200; i++)
    buffers += pl->mat[chain[i]->id];
  CU_ASSERT_EQUAL(buffers, 4);
  CU_ASSERT_TRUE(pl->mat[chain[63]->id]);
  CU_ASSERT_TRUE(pl->mat[chain[127]->id]);
  CU_ASSERT_TRUE(pl->mat[chain[191]->id]);
  CU_ASSERT_FALSE(pl->mat[chain[62]->id]);
  CU_ASSERT_TRUE(plan_verify(pl, stderr));
  plan_free(pl);
  ir_free(p);
}

void add_plan_tests(void) {
  CU_pSuite s = tests_suite("plan");
  tests_add(s, "lifetimes and reuse", test_reuse);
  tests_add(s, "fusion depth bound", test_fusion_bound);
}
