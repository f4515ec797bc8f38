/* test_ir.c — the global IR: its text form, the verifier, dead-code removal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"
#include "tests.h"

static Span nospan;

static Value *add_input(Program *p, const char *name, Shape sh) {
  p->tensors = xrealloc(p->tensors, sizeof(Tensor) * (size_t)(p->ntensors + 1));
  Tensor *t = &p->tensors[p->ntensors];
  memset(t, 0, sizeof *t);
  t->name = name;
  t->kind = TK_INPUT;
  t->shape = sh;
  Value *v = ir_add(p, OP_INPUT, DT_F32, sh, nospan, 0, NULL);
  v->name = name;
  v->tensor = p->ntensors++;
  t->value = v;
  return v;
}

static void add_output(Program *p, const char *name, Value *v) {
  p->outputs = xrealloc(p->outputs, sizeof(Output) * (size_t)(p->noutputs + 1));
  p->outputs[p->noutputs++] = (Output){name, v, nospan};
}

static char *print(const Program *p) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ir_print(f, p);
  fclose(f);
  return buf;
}

static void test_print(void) {
  Program *p = ir_new("t.gsl");
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  Value *w = add_input(p, "w", shape_of(2, (int64_t[]){3, 4}));
  Value *ops[2] = {x, w};
  Value *y = ir_add(p, OP_EINSUM, DT_F32, shape_of(2, (int64_t[]){2, 4}), nospan, 2, ops);
  char err[128];
  CU_ASSERT_TRUE(ein_parse("ij,jk->ik", 2, &y->ein, err, sizeof err));
  y->name = "y";
  Value *z = ir_add(p, OP_UNARY, DT_F32, y->shape, nospan, 1, &y);
  z->fn = UF_TANH;
  add_output(p, "z", z);
  CU_ASSERT_TRUE(ir_verify(p, stderr));
  char *text = print(p);
  CU_ASSERT_STRING_EQUAL(text, "input x: f32[2, 3] init none(0, 0)\n"
                               "input w: f32[3, 4] init none(0, 0)\n"
                               "%0 x: f32[2, 3] = input x\n"
                               "%1 w: f32[3, 4] = input w\n"
                               "%2 y: f32[2, 4] = einsum \"ij,jk->ik\" %0, %1\n"
                               "%3: f32[2, 4] = unary tanh %2\n"
                               "output z = %3\n");
  free(text);
  ir_free(p);
}

static void test_verify_catches(void) {
  Program *p = ir_new("t.gsl");
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  Value *t = ir_add(p, OP_TRANSPOSE, DT_F32, shape_of(2, (int64_t[]){3, 2}), nospan, 1, &x);
  t->perm[0] = 1;
  t->perm[1] = 0;
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  t->perm[1] = 1; /* not a permutation */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  t->perm[1] = 0;
  Value *r = ir_add(p, OP_RESHAPE, DT_F32, shape_of(1, (int64_t[]){5}), nospan, 1, &x);
  CU_ASSERT_FALSE(ir_verify(p, NULL)); /* 6 elements into 5 */
  r->shape.d[0] = 6;
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  Value *u = ir_add(p, OP_UNARY, DT_F32, shape_of(1, (int64_t[]){6}), nospan, 1, &r);
  r->args[0] = u; /* operand defined after its user */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  ir_free(p);
}

static void test_dce(void) {
  Program *p = ir_new("t.gsl");
  Value *x = add_input(p, "x", shape_of(1, (int64_t[]){4}));
  Value *dead = ir_add(p, OP_UNARY, DT_F32, x->shape, nospan, 1, &x);
  dead->fn = UF_EXP;
  Value *live = ir_add(p, OP_UNARY, DT_F32, x->shape, nospan, 1, &x);
  live->fn = UF_LOG;
  add_output(p, "y", live);
  ir_dce(p);
  CU_ASSERT_EQUAL(p->nvalues, 2);
  CU_ASSERT_PTR_EQUAL(p->values[1], live);
  CU_ASSERT_EQUAL(live->id, 1);
  CU_ASSERT_EQUAL(x->nuses, 1);
  CU_ASSERT_EQUAL(live->nuses, 1); /* the output */
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  ir_free(p);
}

static void test_shapes(void) {
  Shape a = shape_of(3, (int64_t[]){2, 3, 4});
  CU_ASSERT_EQUAL(shape_elems(&a), 24);
  Shape s = shape_of(0, NULL);
  CU_ASSERT_EQUAL(shape_elems(&s), 1);
  Arena *ar = arena_new();
  CU_ASSERT_STRING_EQUAL(shape_str(ar, &a), "[2, 3, 4]");
  CU_ASSERT_STRING_EQUAL(shape_str(ar, &s), "[]");
  arena_free(ar);
}

void add_ir_tests(void) {
  CU_pSuite s = tests_suite("ir");
  tests_add(s, "print", test_print);
  tests_add(s, "verify catches broken IR", test_verify_catches);
  tests_add(s, "dce", test_dce);
  tests_add(s, "shapes", test_shapes);
}
