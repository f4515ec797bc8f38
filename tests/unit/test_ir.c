/* test_ir.c — the IR: its text form, the builder, the rewriter, the op
 * tables, the verifier, dead-code removal, where indices come from. */
#include <math.h>
#include <stdint.h>
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
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *v = ir_add(&bd, OP_INPUT, DT_F32, sh, nospan, 0, NULL);
  v->name = name;
  v->tensor = p->ntensors++;
  t->value = v;
  return v;
}

static void add_output(Program *p, const char *name, Value *v) {
  p->outputs = xrealloc(p->outputs, sizeof(Output) * (size_t)(p->noutputs + 1));
  p->outputs[p->noutputs++] = (Output){.name = name, .value = v, .span = nospan};
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
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  Value *w = add_input(p, "w", shape_of(2, (int64_t[]){3, 4}));
  Value *ops[2] = {x, w};
  Value *y = ir_add(&bd, OP_EINSUM, DT_F32, shape_of(2, (int64_t[]){2, 4}), nospan, 2, ops);
  char err[128];
  CU_ASSERT_TRUE(ein_parse("ij,jk->ik", 2, &y->ein, err, sizeof err));
  y->name = "y";
  Value *z = ir_add(&bd, OP_UNARY, DT_F32, y->shape, nospan, 1, &y);
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
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  Value *t = ir_add(&bd, OP_TRANSPOSE, DT_F32, shape_of(2, (int64_t[]){3, 2}), nospan, 1, &x);
  t->perm[0] = 1;
  t->perm[1] = 0;
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  t->perm[1] = 1; /* not a permutation */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  t->perm[1] = 0;
  Value *r = ir_add(&bd, OP_RESHAPE, DT_F32, shape_of(1, (int64_t[]){5}), nospan, 1, &x);
  CU_ASSERT_FALSE(ir_verify(p, NULL)); /* 6 elements into 5 */
  r->shape.d[0] = 6;
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  Value *u = ir_add(&bd, OP_UNARY, DT_F32, shape_of(1, (int64_t[]){6}), nospan, 1, &r);
  r->args[0] = u; /* operand defined after its user */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  ir_free(p);
}

static void test_dce(void) {
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(1, (int64_t[]){4}));
  Value *dead = ir_add(&bd, OP_UNARY, DT_F32, x->shape, nospan, 1, &x);
  dead->fn = UF_EXP;
  Value *live = ir_add(&bd, OP_UNARY, DT_F32, x->shape, nospan, 1, &x);
  live->fn = UF_LOG;
  add_output(p, "y", live);
  ir_dce(p);
  CU_ASSERT_EQUAL(p->nvalues, 2);
  CU_ASSERT_PTR_EQUAL(p->values[1], live);
  CU_ASSERT_EQUAL(live->id, 1);
  IrUses u = ir_uses(p);
  CU_ASSERT_EQUAL(ir_uses_count(&u, x->id), 1);
  CU_ASSERT_EQUAL(ir_uses_count(&u, live->id), 1); /* the output */
  ir_uses_free(&u);
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  ir_free(p);
}

/* x; a = x * x; b = exp(a); c = a + b; outputs c and a (twice). The uses
 * of x: (a, 0), (a, 1); of a: (b, 0), (c, 0), and two outputs; of b:
 * (c, 1); c: an output alone. */
static void test_uses(void) {
  Program *p = ir_new("t.gsl");
  Value *x = add_input(p, "x", shape_of(1, (int64_t[]){4}));
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *a = ir_binary(&bd, BF_MUL, x, x, nospan);
  Value *b = ir_unary(&bd, UF_EXP, a, nospan);
  Value *c = ir_binary(&bd, BF_ADD, a, b, nospan);
  add_output(p, "c", c);
  add_output(p, "a", a);
  add_output(p, "a2", a);
  IrUses u = ir_uses(p);
  CU_ASSERT_EQUAL(u.nvalues, 4);
  CU_ASSERT_EQUAL(u.first[u.nvalues], 5); /* operand slots in all */
  CU_ASSERT_EQUAL(ir_uses_reads(&u, x->id), 2);
  CU_ASSERT_EQUAL(u.list[2 * u.first[x->id]], a->id);
  CU_ASSERT_EQUAL(u.list[2 * u.first[x->id] + 1], 0);
  CU_ASSERT_EQUAL(u.list[2 * u.first[x->id] + 3], 1);
  int j = u.first[a->id];
  CU_ASSERT_EQUAL(ir_uses_reads(&u, a->id), 2);
  CU_ASSERT_TRUE(u.list[2 * j] == b->id && u.list[2 * j + 1] == 0);
  CU_ASSERT_TRUE(u.list[2 * j + 2] == c->id && u.list[2 * j + 3] == 0);
  CU_ASSERT_EQUAL(u.outputs[a->id], 2);
  CU_ASSERT_EQUAL(ir_uses_count(&u, a->id), 4);
  j = u.first[b->id];
  CU_ASSERT_TRUE(ir_uses_reads(&u, b->id) == 1 && u.list[2 * j] == c->id && u.list[2 * j + 1] == 1);
  CU_ASSERT_EQUAL(ir_uses_reads(&u, c->id), 0);
  CU_ASSERT_EQUAL(ir_uses_count(&u, c->id), 1);
  CU_ASSERT_EQUAL(ir_uses_count(&u, a->id), 4); /* two operand slots and two outputs */
  CU_ASSERT_EQUAL(ir_uses_count(&u, x->id), 2);
  ir_uses_free(&u);
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


static Span nospan2;

/* The builder derives shapes: numpy broadcasting inserts broadcasts, an
 * einsum letter private to one operand is summed first, an identity
 * transpose is no op at all. */
static void test_builder(void) {
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  Value *b = add_input(p, "b", shape_of(1, (int64_t[]){3}));
  Value *y = ir_binary(&bd, BF_ADD, x, b, nospan2);
  CU_ASSERT_EQUAL(y->op, OP_BINARY);
  CU_ASSERT_EQUAL(y->shape.rank, 2);
  CU_ASSERT_EQUAL(y->args[1]->op, OP_BROADCAST);
  CU_ASSERT_EQUAL(y->args[1]->perm[0], -1);
  CU_ASSERT_EQUAL(y->args[1]->perm[1], 0);
  CU_ASSERT_PTR_EQUAL(ir_transpose(&bd, x, (int[]){0, 1}, nospan2), x);
  Value *w = add_input(p, "w", shape_of(2, (int64_t[]){3, 5}));
  EinsumSpec e;
  char err[128];
  CU_ASSERT_TRUE_FATAL(ein_parse("ab,bc->a", 2, &e, err, sizeof err));
  Value *ops[2] = {x, w};
  Value *z = ir_einsum(&bd, &e, ops, nospan2);
  CU_ASSERT_EQUAL(z->op, OP_EINSUM);
  CU_ASSERT_EQUAL(z->shape.rank, 1);
  CU_ASSERT_EQUAL(z->shape.d[0], 2);
  CU_ASSERT_EQUAL(z->args[1]->op, OP_REDUCE); /* c summed out of w first */
  CU_ASSERT_STRING_EQUAL(ein_str(p->arena, &z->ein), "ab,b->a");
  Value *c = ir_concat(&bd, (Value *[]){x, x}, 2, 1, nospan2);
  CU_ASSERT_EQUAL(c->shape.d[1], 6);
  add_output(p, "z", z);
  add_output(p, "c", c);
  CU_ASSERT_TRUE(ir_verify(p, stderr));
  ir_free(p);
}

/* bf16 constants are rounded to nearest even when made; values worked out
 * by hand from the bit patterns (bf16 keeps 8 bits of significand). */
static void test_round_bf16(void) {
  CU_ASSERT_EQUAL(ir_round_bf16(1.0), 1.0);
  CU_ASSERT_EQUAL(ir_round_bf16(1.0 + 1.0 / 256), 1.0);                 /* a tie: to the even 1.0 */
  CU_ASSERT_EQUAL(ir_round_bf16(1.0 + 3.0 / 256), 1.0 + 4.0 / 256);     /* a tie: to the even 1 + 2^-6 */
  CU_ASSERT_EQUAL(ir_round_bf16(1.0 + 1.5 / 256), 1.0 + 2.0 / 256);     /* above the tie: up */
  CU_ASSERT_EQUAL(ir_round_bf16(-(1.0 + 0.9 / 256)), -1.0);             /* below it: down in magnitude */
  CU_ASSERT_EQUAL(ir_round_bf16(0.1), 0.10009765625);                  /* 0x3dcd */
  CU_ASSERT_EQUAL(ir_round_bf16(65504.0), 65536.0);                    /* f16's largest is not a bf16 */
  CU_ASSERT_TRUE(isinf(ir_round_bf16(3.4e38)));                        /* past bf16's largest 3.3895e38 */
  CU_ASSERT_EQUAL(ir_round_bf16(3.3895313892515355e38), 3.3895313892515355e38); /* bf16's largest */
  CU_ASSERT_TRUE(isnan(ir_round_bf16(NAN)));
  CU_ASSERT_EQUAL(ir_round_bf16(-INFINITY), -INFINITY);
  CU_ASSERT_EQUAL(ir_round_bf16(0x1p-133), 0x1p-133);                   /* a bf16 subnormal: exact */
  CU_ASSERT_EQUAL(ir_round_bf16(0x1p-149), 0.0);                       /* f32's least subnormal: to 0 */
  /* casts between bf16 and f32: the round trip bf16 -> f32 -> bf16 folds away */
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(1, (int64_t[]){3}));
  Value *h = ir_cast(&bd, x, DT_BF16, nospan2);
  Value *w = ir_cast(&bd, h, DT_F32, nospan2);
  CU_ASSERT_PTR_EQUAL(ir_cast(&bd, w, DT_BF16, nospan2), h);
  CU_ASSERT_PTR_NOT_EQUAL(ir_cast(&bd, h, DT_F32, nospan2), x); /* f32 -> bf16 -> f32 rounds: kept */
  /* a product of bf16 operands is its f32 accumulation, rounded once */
  EinsumSpec e;
  char err[128];
  CU_ASSERT_TRUE_FATAL(ein_parse("a,a->", 2, &e, err, sizeof err));
  Value *ops[2] = {h, h};
  Value *d = ir_einsum(&bd, &e, ops, nospan2);
  CU_ASSERT_EQUAL(d->op, OP_CAST);
  CU_ASSERT_EQUAL(d->dtype, DT_BF16);
  CU_ASSERT_EQUAL(d->args[0]->op, OP_EINSUM);
  CU_ASSERT_EQUAL(d->args[0]->dtype, DT_F32);
  Value *s = ir_reduce(&bd, RF_SUM, h, 1, nospan2); /* summed in f32 */
  CU_ASSERT_EQUAL(s->dtype, DT_BF16);
  CU_ASSERT_EQUAL(s->args[0]->op, OP_REDUCE);
  CU_ASSERT_EQUAL(s->args[0]->args[0]->dtype, DT_F32);
  add_output(p, "d", d);
  add_output(p, "s", s);
  CU_ASSERT_TRUE(ir_verify(p, stderr));
  ir_free(p);
}

/* Spec errors read as the text after 'einsum spec "..."'. */
static void test_ein_parse(void) {
  EinsumSpec e;
  char err[128];
  CU_ASSERT_TRUE(ein_parse(" ij , jk ", 2, &e, err, sizeof err)); /* implicit: i and k, alphabetical */
  CU_ASSERT_STRING_EQUAL(e.out, "ik");
  CU_ASSERT_FALSE(ein_parse("ii->i", 1, &e, err, sizeof err));
  CU_ASSERT_STRING_EQUAL(err, ": index 'i' repeats within one operand (diagonals are not supported)");
  CU_ASSERT_FALSE(ein_parse("a,b,c->a", 3, &e, err, sizeof err));
  CU_ASSERT_STRING_EQUAL(err, " has more than two operands");
  CU_ASSERT_FALSE(ein_parse("ab->z", 1, &e, err, sizeof err));
  CU_ASSERT_STRING_EQUAL(err, ": result index 'z' is in no operand");
}

/* The verifier checks an einsum's letters against the shapes. */
static void test_verify_einsum(void) {
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  Value *w = add_input(p, "w", shape_of(2, (int64_t[]){3, 4}));
  Value *ops[2] = {x, w};
  Value *y = ir_add(&bd, OP_EINSUM, DT_F32, shape_of(2, (int64_t[]){2, 4}), nospan2, 2, ops);
  char err[128];
  CU_ASSERT_TRUE_FATAL(ein_parse("ij,jk->ik", 2, &y->ein, err, sizeof err));
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  y->shape.d[1] = 5; /* k is 4 in w */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  y->shape.d[1] = 4;
  CU_ASSERT_TRUE_FATAL(ein_parse("ij,kj->ik", 2, &y->ein, err, sizeof err)); /* j is 3 and 4 */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  CU_ASSERT_TRUE_FATAL(ein_parse("ijl,jk->ik", 2, &y->ein, err, sizeof err)); /* x has rank 2 */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  ir_free(p);
}

/* The verifier checks the other ops' shapes too. */
static void test_verify_shapes(void) {
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  Value *r = ir_reduce(&bd, RF_SUM, x, 1u << 1, nospan2);
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  r->shape.d[0] = 3; /* reducing dim 1 of [2, 3] leaves [2] */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  r->shape.d[0] = 2;
  Value *c = ir_concat(&bd, (Value *[]){x, x}, 2, 0, nospan2);
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  c->shape.d[0] = 5; /* 2 + 2 */
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  c->shape.d[0] = 4;
  Value *o = ir_one_hot(&bd, ir_cast(&bd, x, DT_I32, nospan2), 7, nospan2);
  CU_ASSERT_TRUE(ir_verify(p, NULL));
  o->dtype = DT_I32;
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  o->dtype = DT_F32;
  Program q = *p; /* a sharding that does not divide its dim */
  q.mesh.naxes = 1;
  q.mesh.name[0] = "d";
  q.mesh.size[0] = 4;
  x->sh.naxes[1] = 1; /* 3 over 4 devices */
  CU_ASSERT_FALSE(ir_verify(&q, NULL));
  x->sh.naxes[0] = 1;
  x->sh.naxes[1] = 0;
  q.mesh.size[0] = 2; /* 2 over 2: fine */
  CU_ASSERT_TRUE(ir_verify(&q, NULL));
  ir_free(p);
}

static Value *swap_exp_for_log(void *ctx, Program *dst, const Value *v, Value **map) {
  (void)ctx;
  if (v->op != OP_UNARY || v->fn != UF_EXP)
    return NULL; /* copied as it is */
  Build bd = build_at(dst, v->pass, v->site, v->region); /* where v was built */
  return ir_unary(&bd, UF_LOG, map[v->args[0]->id], v->span);
}

/* The rewriter copies every value with all its attributes, and lets the
 * callback replace any of them; the program's notes come along, their
 * text its own (the source may be freed first). */
static void test_rewrite(void) {
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  Value *c = ir_cumsum(&bd, x, 1, true, nospan2);
  Value *e = ir_unary(&bd, UF_EXP, c, nospan2);
  add_output(p, "e", e);
  p->nmoe = 1;
  p->moe = arena_alloc(p->arena, sizeof *p->moe);
  p->moe[0].e = 8;
  p->moe[0].why = arena_strdup(p->arena, "a cumsum mixes slots");
  p->nsame = 1;
  p->same = arena_alloc(p->arena, sizeof *p->same);
  p->same[0].kind = "sum";
  p->same[0].fits = arena_strdup(p->arena, "1, 2, 4");
  Program *q = ir_rewrite(p, false, swap_exp_for_log, NULL);
  CU_ASSERT_EQUAL_FATAL(q->nmoe, 1);
  CU_ASSERT_EQUAL(q->moe[0].e, 8);
  CU_ASSERT_STRING_EQUAL(q->moe[0].why, "a cumsum mixes slots");
  CU_ASSERT_PTR_NOT_EQUAL(q->moe[0].why, p->moe[0].why);
  CU_ASSERT_EQUAL_FATAL(q->nsame, 1);
  CU_ASSERT_STRING_EQUAL(q->same[0].fits, "1, 2, 4");
  CU_ASSERT_PTR_NOT_EQUAL(q->same[0].fits, p->same[0].fits);
  CU_ASSERT_EQUAL_FATAL(q->nvalues, 3);
  CU_ASSERT_EQUAL(q->values[1]->op, OP_CUMSUM);
  CU_ASSERT_EQUAL(q->values[1]->axis, 1);
  CU_ASSERT_TRUE(q->values[1]->exclusive);
  CU_ASSERT_EQUAL(q->values[2]->fn, UF_LOG);
  CU_ASSERT_PTR_EQUAL(q->outputs[0].value, q->values[2]);
  CU_ASSERT_PTR_EQUAL(q->tensors[0].value, q->values[0]);
  CU_ASSERT_TRUE(ir_verify(q, stderr));
  ir_free(q);
  ir_free(p);
}

/* The op tables: folds by hand, overflow refused, classes as ops.def says. */
static void test_tables(void) {
  CU_ASSERT_DOUBLE_EQUAL(ir_fold_unary(UF_SIGMOID, 0.0), 0.5, 1e-15);
  /* gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) = 0.5 (1 + tanh(0.8335565)) */
  CU_ASSERT_DOUBLE_EQUAL(ir_fold_unary(UF_GELU, 1.0), 0.5 * (1 + tanh(0.79788456080286535588 * 1.044715)), 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(ir_fold_binary(BF_POW, 2.0, 10.0), 1024.0, 0);
  CU_ASSERT_DOUBLE_EQUAL(ir_fold_binary(BF_LE, 2.0, 2.0), 1.0, 0);
  int64_t r = 7;
  CU_ASSERT_FALSE(ir_fold_binary_int(BF_MUL, 4611686018427387905LL, 4, &r));
  CU_ASSERT_EQUAL(r, 7);
  CU_ASSERT_FALSE(ir_fold_binary_int(BF_SUB, INT64_MIN, 1, &r));
  CU_ASSERT_FALSE(ir_fold_binary_int(BF_DIV, 1, 0, &r));
  CU_ASSERT_TRUE(ir_fold_binary_int(BF_DIV, -7, 2, &r));
  CU_ASSERT_EQUAL(r, -3);
  CU_ASSERT_TRUE(binary_is_compare(BF_NE));
  CU_ASSERT_FALSE(binary_is_compare(BF_MAX));
  CU_ASSERT_TRUE(unary_int_ok(UF_ABS));
  CU_ASSERT_FALSE(unary_int_ok(UF_EXP));
  CU_ASSERT_EQUAL(ir_op(OP_ALL_TO_ALL)->cls, OC_COLLECTIVE);
  CU_ASSERT_EQUAL(ir_op(OP_LOCAL_SLICE)->cls, OC_LOCAL);
  CU_ASSERT_TRUE(ir_op(OP_LOCAL_SLICE)->flags & OF_SPMD);
  CU_ASSERT_EQUAL(ir_op(OP_EINSUM)->level, 1);
  for (int op = 0; op < OP__COUNT; op++)
    CU_ASSERT_PTR_NOT_NULL(ir_op((Op)op)->name);
}

/* The input boxes a gather's indices hold unchanged: traced through
 * slices, transposes, concats, broadcasts and reshapes of a whole tensor;
 * not through arithmetic, nor a reshape of part of one. */
static void test_index_sources(void) {
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *tok = add_input(p, "tok", shape_of(2, (int64_t[]){4, 6}));
  tok->dtype = p->tensors[0].dtype = DT_I32;
  IndexSource s[IR_MAX_SOURCES];
  Value *a = ir_transpose(&bd, ir_slice(&bd, tok, 1, 1, 4, nospan), (int[]){1, 0}, nospan);
  CU_ASSERT_EQUAL_FATAL(ir_index_sources(a, s), 1);
  CU_ASSERT(s[0].tensor == 0 && s[0].lo[0] == 0 && s[0].hi[0] == 4 && s[0].lo[1] == 1 && s[0].hi[1] == 5);
  /* rows 0, 1 of c are rows 2, 3 of tok; rows 2..5 are computed */
  Value *one = ir_broadcast(&bd, ir_const(&bd, DT_I32, 1, nospan), tok->shape, nospan);
  Value *parts[2] = {ir_slice(&bd, tok, 0, 2, 2, nospan), ir_binary(&bd, BF_ADD, tok, one, nospan)};
  Value *c = ir_slice(&bd, ir_concat(&bd, parts, 2, 0, nospan), 0, 1, 3, nospan);
  CU_ASSERT_EQUAL_FATAL(ir_index_sources(c, s), 1);
  CU_ASSERT(s[0].lo[0] == 3 && s[0].hi[0] == 4 && s[0].lo[1] == 0 && s[0].hi[1] == 6);
  CU_ASSERT_EQUAL(ir_index_sources(parts[1], s), 0);
  Value *row = ir_reshape(&bd, ir_slice(&bd, tok, 0, 0, 1, nospan), shape_of(1, (int64_t[]){6}), nospan);
  Value *b = ir_broadcast(&bd, row, shape_of(2, (int64_t[]){3, 6}), nospan);
  CU_ASSERT_EQUAL_FATAL(ir_index_sources(b, s), 1);
  CU_ASSERT(s[0].lo[0] == 0 && s[0].hi[0] == 1 && s[0].lo[1] == 0 && s[0].hi[1] == 6);
  Value *flat = ir_reshape(&bd, tok, shape_of(1, (int64_t[]){24}), nospan);
  CU_ASSERT_EQUAL(ir_index_sources(flat, s), 1);
  CU_ASSERT_EQUAL(ir_index_sources(ir_slice(&bd, flat, 0, 0, 5, nospan), s), 0);
  CU_ASSERT_TRUE(ir_op(OP_ALL_TO_ALL)->flags & OF_MOVE);
  CU_ASSERT_FALSE(ir_op(OP_ALL_REDUCE)->flags & OF_MOVE);
  ir_free(p);
}

/* dropout's builder: p = 0 is x itself; each call a stream of its own;
 * its derivative's (ir_dropout_as) the same p and stream, so the same
 * mask; the verifier holds p within (0, 1) and the stream to one handed
 * out. Draws are OF_DRAW: inlining or batching one draws anew. */
static void test_dropout(void) {
  Program *p = ir_new("t.gsl");
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  Value *x = add_input(p, "x", shape_of(2, (int64_t[]){2, 3}));
  CU_ASSERT_PTR_EQUAL(ir_dropout(&bd, x, 0, nospan), x);
  uint32_t before = p->nstreams;
  Value *a = ir_dropout(&bd, x, 0.25, nospan), *b = ir_dropout(&bd, x, 0.25, nospan);
  CU_ASSERT(a->op == OP_DROPOUT && a->fval == 0.25 && a->stream == before && b->stream == before + 1);
  Build back = build_at(p, PASS_BACKWARD, (Span){0}, 0);
  Value *g = ir_dropout_as(&back, b, a, nospan);
  CU_ASSERT(g->stream == a->stream && g->fval == a->fval && g->args[0] == b && p->nstreams == before + 2);
  add_output(p, "g", g);
  CU_ASSERT_TRUE(ir_verify(p, stderr));
  char *text = print(p);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "%3: f32[2, 3] = dropout p 0.25 stream 0 %2 (backward)\n")); /* a's mask on b */
  free(text);
  a->fval = 1;
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  a->fval = 0.25, a->stream = p->nstreams;
  CU_ASSERT_FALSE(ir_verify(p, NULL));
  CU_ASSERT_TRUE((ir_op(OP_DROPOUT)->flags & OF_DRAW) && (ir_op(OP_RNG)->flags & OF_DRAW));
  CU_ASSERT_FALSE(ir_op(OP_UNARY)->flags & OF_DRAW);
  ir_free(p);
}

void add_ir_tests(void) {
  CU_pSuite s = tests_suite("ir");
  tests_add(s, "print", test_print);
  tests_add(s, "verify catches broken IR", test_verify_catches);
  tests_add(s, "dce", test_dce);
  tests_add(s, "uses", test_uses);
  tests_add(s, "shapes", test_shapes);
  tests_add(s, "builder", test_builder);
  tests_add(s, "bf16 rounding and builder rules", test_round_bf16);
  tests_add(s, "einsum specs", test_ein_parse);
  tests_add(s, "verify checks einsum shapes", test_verify_einsum);
  tests_add(s, "verify checks op shapes and shardings", test_verify_shapes);
  tests_add(s, "rewriter", test_rewrite);
  tests_add(s, "op tables", test_tables);
  tests_add(s, "index sources", test_index_sources);
  tests_add(s, "dropout's builder and verifier", test_dropout);
}
