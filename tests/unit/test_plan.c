/* test_plan.c — plan.c and plan_arena.c: which values get buffers, their
 * lifetimes, their places in the arena with reuse, and plan_verify.
 * Expected sizes are worked out by hand in the comments; the placement of
 * a large random program is checked against the plain quadratic greedy it
 * implements. */
#include <stdint.h>
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
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  return ir_tensor(&bd, &t);
}

/* x: f32[16] (64 bytes); c1 = cumsum(x), c2 = cumsum(c1), c3 = cumsum(c2),
 * output c3. Each cumsum has a buffer of 64 bytes; c1 lives over steps 1-2,
 * c2 over 2-3, c3 from 3 to the end. c1 and c3 never live at once, so they
 * share bytes: the arena is 128 bytes, where one buffer each takes 192. */
static void test_reuse(void) {
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = input(p, "x", shape_of(1, (int64_t[]){16}));
  Value *c1 = ir_cumsum(&bd, x, 0, false, nospan);
  Value *c2 = ir_cumsum(&bd, c1, 0, false, nospan);
  Value *c3 = ir_cumsum(&bd, c2, 0, false, nospan);
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
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *v = input(p, "x", shape_of(1, (int64_t[]){4}));
  Value *chain[200];
  for (int i = 0; i < 200; i++)
    v = chain[i] = ir_unary(&bd, UF_NEG, v, nospan);
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

/* The placement rule as written, the slow way (plan.c before its byte
 * sets): buffers largest first (then by first step, then in the plan's
 * order: values by id, then temporaries), each into the smallest gap that
 * holds it, the lowest of equal ones, among the buffers placed whose
 * lifetimes overlap its own, sorted by offset every time; else above them. */
typedef struct RefItem {
  int64_t bytes, offset; /* size, place */
  int first, last;       /* live steps */
  int order;             /* the plan's order */
} RefItem;

static int ref_by_size(const void *x, const void *y) {
  const RefItem *a = x, *b = y;
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  if (a->first != b->first)
    return a->first < b->first ? -1 : 1;
  return a->order - b->order;
}

static int ref_by_offset(const void *x, const void *y) {
  const RefItem *a = *(RefItem *const *)x, *b = *(RefItem *const *)y;
  return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* it placed by the rule; returns the arena's size */
static int64_t ref_place(RefItem *it, int nit) {
  qsort(it, (size_t)nit, sizeof *it, ref_by_size);
  RefItem **near = malloc((size_t)(nit > 0 ? nit : 1) * sizeof *near);
  int64_t arena = 0;
  for (int i = 0; i < nit; i++) {
    int nn = 0;
    for (int j = 0; j < i; j++)
      if (it[j].first <= it[i].last && it[i].first <= it[j].last)
        near[nn++] = &it[j];
    qsort(near, (size_t)nn, sizeof *near, ref_by_offset);
    int64_t end = 0, best = -1, best_gap = 0;
    for (int j = 0; j < nn; j++) {
      int64_t gap = near[j]->offset - end;
      if (gap >= it[i].bytes && (best < 0 || gap < best_gap))
        best = end, best_gap = gap;
      if (near[j]->offset + near[j]->bytes > end)
        end = near[j]->offset + near[j]->bytes;
    }
    it[i].offset = best >= 0 ? best : end;
    if (it[i].offset + it[i].bytes > arena)
      arena = it[i].offset + it[i].bytes;
  }
  free(near);
  return arena;
}

static uint32_t rnd_state = 12345;
static uint32_t rnd(uint32_t n) {
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 17;
  rnd_state ^= rnd_state << 5;
  return rnd_state % n;
}

/* 3000 cumsums, each of an earlier value of one of seven shapes (mostly a
 * recent one, sometimes any), some outputs, and matrix products with
 * temporaries: buffers of many sizes, with lifetimes nested, overlapping
 * and disjoint. Every offset must be the slow greedy's. */
static void test_placement_greedy(void) {
  enum { NSHAPE = 7, NVAL = 3000 };
  static const int64_t len[NSHAPE] = {4, 16, 40, 100, 300, 1000, 2500};
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value **by_shape[NSHAPE];
  int count[NSHAPE];
  for (int s = 0; s < NSHAPE; s++) {
    by_shape[s] = malloc(NVAL * sizeof **by_shape);
    char *name = arena_printf(p->arena, "x%d", s);
    by_shape[s][0] = input(p, name, shape_of(1, &len[s]));
    count[s] = 1;
  }
  Value *sq = input(p, "sq", shape_of(3, (int64_t[]){8, 8, 8}));
  for (int i = 0; i < NVAL; i++) {
    int s = (int)rnd(NSHAPE), c = count[s];
    Value *a = by_shape[s][rnd(4) ? c - 1 - (int)rnd(c < 8 ? c : 8) : (int)rnd(c)];
    Value *v = ir_cumsum(&bd, a, 0, false, nospan);
    by_shape[s][count[s]++] = v;
    if (!rnd(100))
      ir_output(p, arena_printf(p->arena, "y%d", i), v, nospan);
    if (!rnd(50)) { /* a batched product with the batch in the middle: a temporary for C */
      EinsumSpec e = {0};
      e.nin = 2;
      strcpy(e.in[0], "bij");
      strcpy(e.in[1], "bjk");
      strcpy(e.out, "ibk");
      sq = ir_einsum(&bd, &e, (Value *[]){sq, sq}, nospan);
    }
  }
  ir_output(p, "sq", sq, nospan);
  Plan *pl = plan_buffers(p);
  CU_ASSERT_TRUE(plan_verify(pl, stderr));
  size_t m = (size_t)p->nvalues + (size_t)pl->ntemps;
  RefItem *it = malloc(m * sizeof *it);
  int64_t *got = malloc(m * sizeof *got); /* the plan's offsets, in its order */
  int nit = 0;
  for (int i = 0; i < p->nvalues; i++)
    if (pl->offset[i] >= 0) {
      got[nit] = pl->offset[i];
      it[nit] = (RefItem){pl->bytes[i], -1, pl->first[i], pl->last[i], nit};
      nit++;
    }
  for (int t = 0; t < pl->ntemps; t++) {
    got[nit] = pl->temps[t].offset;
    it[nit] = (RefItem){pl->temps[t].bytes, -1, pl->temps[t].value, pl->temps[t].value, nit};
    nit++;
  }
  CU_ASSERT_TRUE(nit > 2000 && pl->ntemps > 20);
  CU_ASSERT_EQUAL(ref_place(it, nit), pl->arena_bytes);
  int same = 0;
  for (int k = 0; k < nit; k++)
    same += got[it[k].order] == it[k].offset;
  CU_ASSERT_EQUAL(same, nit);
  CU_ASSERT_TRUE(pl->arena_bytes < pl->noreuse_bytes / 4);
  free(it);
  free(got);
  for (int s = 0; s < NSHAPE; s++)
    free(by_shape[s]);
  plan_free(pl);
  ir_free(p);
}

void add_plan_tests(void) {
  CU_pSuite s = tests_suite("plan");
  tests_add(s, "lifetimes and reuse", test_reuse);
  tests_add(s, "fusion depth bound", test_fusion_bound);
  tests_add(s, "placement is the greedy's", test_placement_greedy);
}
