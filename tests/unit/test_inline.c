/* test_inline.c — the inliners used by the compiler itself (sema_call, and
 * sema_function with ir_inline):
 * values made with the IR builder, a stdlib function inlined on them, the
 * IR it made checked op by op, and its errors located at the call (or in
 * the module, with a note at the call). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"
#include "tests.h"

static char *diags;     /* diagnostics captured since begin() */
static size_t ndiags;
static Diag diag;       /* where they go: a memory stream over diags */
static Source *src;     /* the "caller's" source that call spans point into */
static Arena *ast;
static Program *prog;
static Build top;       /* prog's forward pass at no call site: the test's own values, and its calls */
static Sema *sema;

static void begin(const char *text) {
  diags = NULL;
  diag = (Diag){open_memstream(&diags, &ndiags), 0, false};
  src = source_from_string("t.gsl", text);
  ast = arena_new();
  prog = ir_new("t.gsl");
  top = build_at(prog, PASS_FORWARD, (Span){0}, 0);
  static const SemaOptions so = {NULL, 0, TEST_SRCDIR "/stdlib", NULL, 0};
  sema = sema_new(prog, ast, &so, &diag);
}

/* the captured diagnostics, first lines only (caller frees) */
static char *end(void) {
  sema_free(sema);
  fclose(diag.out);
  char *lines = tests_first_lines(diags);
  free(diags);
  ir_free(prog);
  arena_free(ast);
  source_free(src);
  return lines;
}

/* the span of the first occurrence of what in the source (line 1) */
static Span at(const char *what) {
  const char *p = strstr(src->text, what);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  uint32_t off = (uint32_t)(p - src->text);
  return (Span){src, 1, off + 1, off, off + (uint32_t)strlen(what)};
}

static Value *tensor(const char *name, TensorKind kind, DType dt, int rank, const int64_t *d) {
  Tensor t = {0};
  t.name = name;
  t.kind = kind;
  t.dtype = dt;
  t.shape = shape_of(rank, d);
  t.init = kind == TK_PARAM ? INIT_ZEROS : INIT_NONE;
  return ir_tensor(&top, &t);
}

static void expect_shape(const Value *v, int rank, const int64_t *d) {
  CU_ASSERT_EQUAL_FATAL(v->shape.rank, rank);
  for (int i = 0; i < rank; i++)
    CU_ASSERT_EQUAL(v->shape.d[i], d[i]);
}

/* nn.dense(x, w, b) = x @ w + b on f32[4, 3], f32[3, 5], f32[5]: an einsum
 * "wy,yx->wx" (the letters '@' uses: rows w, inner y, columns x) of x and
 * w, b broadcast to [4, 5], and their sum; every new value carries the
 * call as its site. */
static void test_dense(void) {
  begin("let y = dense(x, w, b)\n");
  int64_t dx[] = {4, 3}, dw[] = {3, 5}, db[] = {5}, dy[] = {4, 5};
  Value *args[3] = {tensor("x", TK_INPUT, DT_F32, 2, dx), tensor("w", TK_PARAM, DT_F32, 2, dw),
                    tensor("b", TK_PARAM, DT_F32, 1, db)};
  int before = prog->nvalues;
  Value *res[2] = {NULL, NULL};
  Span call = at("dense(x, w, b)");
  CU_ASSERT_EQUAL(sema_call(sema, &top, "nn", "dense", args, 3, res, 2, call), 1);
  CU_ASSERT_PTR_NULL(res[1]);
  Value *y = res[0];
  CU_ASSERT_PTR_NOT_NULL_FATAL(y);
  CU_ASSERT_EQUAL(y->op, OP_BINARY);
  CU_ASSERT_EQUAL(y->fn, BF_ADD);
  expect_shape(y, 2, dy);
  CU_ASSERT_EQUAL_FATAL(y->nargs, 2);
  Value *mm = y->args[0], *bb = y->args[1];
  CU_ASSERT_EQUAL(mm->op, OP_EINSUM);
  expect_shape(mm, 2, dy);
  CU_ASSERT_PTR_EQUAL(mm->args[0], args[0]);
  CU_ASSERT_PTR_EQUAL(mm->args[1], args[1]);
  CU_ASSERT_STRING_EQUAL(mm->ein.in[0], "wy");
  CU_ASSERT_STRING_EQUAL(mm->ein.in[1], "yx");
  CU_ASSERT_STRING_EQUAL(mm->ein.out, "wx");
  CU_ASSERT_EQUAL(bb->op, OP_BROADCAST);
  CU_ASSERT_PTR_EQUAL(bb->args[0], args[2]);
  expect_shape(bb, 2, dy);
  CU_ASSERT_EQUAL(prog->nvalues, before + 3); /* einsum, broadcast, add */
  for (int i = before; i < prog->nvalues; i++)
    CU_ASSERT_EQUAL(prog->values[i]->site.off, call.off);
  Value *after = ir_unary(&top, UF_NEG, y, at("y")); /* the call's site ended with it */
  CU_ASSERT_EQUAL(after->site.off, at("y").off);
  CU_ASSERT_EQUAL(after->region, 0);
  ir_output(prog, "y", y, call);
  CU_ASSERT_TRUE(ir_verify(prog, stderr));
  CU_ASSERT_EQUAL(diag.errors, 0);
  free(end());
}

/* cross_entropy(logits: f32[N, C], labels: i32[N]) twice, with N = 4, C = 3
 * and then N = 6, C = 2: shape names bind per call. The result is the
 * negation of a mean, an f32 scalar. */
static void test_shape_names_per_call(void) {
  begin("cross_entropy(l, k)\n");
  int64_t d1[] = {4, 3}, i1[] = {4}, d2[] = {6, 2}, i2[] = {6};
  Value *a1[2] = {tensor("l1", TK_INPUT, DT_F32, 2, d1), tensor("k1", TK_INPUT, DT_I32, 1, i1)};
  Value *a2[2] = {tensor("l2", TK_INPUT, DT_F32, 2, d2), tensor("k2", TK_INPUT, DT_I32, 1, i2)};
  Value *r1 = NULL, *r2 = NULL;
  CU_ASSERT_EQUAL(sema_call(sema, &top, "nn", "cross_entropy", a1, 2, &r1, 1, at("cross_entropy(l, k)")), 1);
  CU_ASSERT_EQUAL(sema_call(sema, &top, "nn", "cross_entropy", a2, 2, &r2, 1, at("cross_entropy(l, k)")), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r2);
  CU_ASSERT_EQUAL(r1->op, OP_UNARY);
  CU_ASSERT_EQUAL(r1->fn, UF_NEG);
  CU_ASSERT_EQUAL(r1->shape.rank, 0);
  CU_ASSERT_EQUAL(r2->shape.rank, 0);
  CU_ASSERT_EQUAL(r1->dtype, DT_F32);
  CU_ASSERT_TRUE(ir_verify(prog, stderr));
  CU_ASSERT_EQUAL(diag.errors, 0);
  free(end());
}

/* A type error of the call is reported at the call; an error in the body
 * in the module, with a note at the call; an unknown function or module at
 * the call. Each call gives -1. */
static void test_errors(void) {
  begin("let z = cross_entropy(l, k) + mse(a, b) + nn.nothing()\n");
  int64_t dl[] = {4, 3}, dk[] = {4}, da[] = {4, 3}, db[] = {5};
  Value *ce[2] = {tensor("l", TK_INPUT, DT_F32, 2, dl), tensor("k", TK_INPUT, DT_F32, 1, dk)};
  Value *ms[2] = {tensor("a", TK_INPUT, DT_F32, 2, da), tensor("b", TK_INPUT, DT_F32, 1, db)};
  Value *r = NULL;
  CU_ASSERT_EQUAL(sema_call(sema, &top, "nn", "cross_entropy", ce, 2, &r, 1, at("cross_entropy(l, k)")), -1);
  CU_ASSERT_EQUAL(sema_call(sema, &top, "nn", "mse", ms, 2, &r, 1, at("mse(a, b)")), -1);
  CU_ASSERT_EQUAL(sema_call(sema, &top, "nn", "nothing", NULL, 0, &r, 1, at("nn.nothing()")), -1);
  CU_ASSERT_EQUAL(sema_call(sema, &top, "nn", "mse", ms, 1, &r, 1, at("mse(a, b)")), -1);
  CU_ASSERT_EQUAL(sema_call(sema, &top, "no_such_module", "f", NULL, 0, &r, 1, at("nn.nothing()")), -1);
  CU_ASSERT_PTR_NULL(r);
  char *got = end();
  const char *want =
      "t.gsl:1:9: error: argument 'labels' of 'cross_entropy' must be i32[N], got f32[4]\n"
      TEST_SRCDIR "/stdlib/nn.gsl:6:11: error: shapes f32[4, 3] and f32[5] do not broadcast\n"
      "t.gsl:1:31: note: in the call to 'mse' here\n"
      "t.gsl:1:43: error: module \"nn\" has no function 'nothing'\n"
      "t.gsl:1:31: error: 'mse' takes 2 arguments, 1 given\n"
      TEST_SRCDIR "/stdlib/nn.gsl:5:1: note: 'mse' is defined here\n"
      "t.gsl:1:43: error: cannot find module \"no_such_module\" (looked for no_such_module.gsl in the -I "
      "directories and in " TEST_SRCDIR "/stdlib)\n";
  if (strcmp(got, want) != 0)
    fprintf(stderr, "\n  want:\n%s  got:\n%s", want, got);
  CU_ASSERT_STRING_EQUAL(got, want);
  free(got);
}

/* After sema_run, the program's own functions can be called too. */
static void test_program_function(void) {
  begin("fn twice(v) {\n  return v + v\n}\n");
  Node *root = parse_source(src, ast, &diag);
  CU_ASSERT_PTR_NOT_NULL_FATAL(root);
  CU_ASSERT_TRUE(sema_run(sema, root));
  int64_t d[] = {7};
  Value *x = tensor("x", TK_INPUT, DT_F32, 1, d), *r = NULL;
  CU_ASSERT_EQUAL(sema_call(sema, &top, NULL, "twice", &x, 1, &r, 1, at("twice")), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  CU_ASSERT_EQUAL(r->op, OP_BINARY);
  CU_ASSERT_EQUAL(r->fn, BF_ADD);
  CU_ASSERT_PTR_EQUAL(r->args[0], x);
  CU_ASSERT_PTR_EQUAL(r->args[1], x);
  expect_shape(r, 1, d);
  free(end());
}

/* sema_function then ir_inline, the seam autodiff uses: optim.sgd(p, g, lr)
 * compiled once at f32[3] (parameters as inputs, lr an f32 scalar) and
 * inlined twice with no sema involved: each time the same ops on the new
 * operands (lr broadcast, times g, subtracted from p), stamped with the
 * builder's pass, none of the function's own values left in the program;
 * a function with a random draw gets a fresh stream per inlining. */
static void test_ir_function(void) {
  begin("fn noisy(v) {\n  return v + uniform_like(v)\n}\n");
  Node *root = parse_source(src, ast, &diag);
  CU_ASSERT_PTR_NOT_NULL_FATAL(root);
  CU_ASSERT_TRUE(sema_run(sema, root));
  int64_t d[] = {3};
  DType dt[3] = {DT_F32, DT_F32, DT_F32};
  Shape sh[3] = {shape_of(1, d), shape_of(1, d), shape_of(0, NULL)};
  Program *sgd = sema_function(sema, "optim", "sgd", dt, sh, 3, at("noisy"));
  Program *noisy = sema_function(sema, NULL, "noisy", dt, sh, 1, at("noisy"));
  sema_free(sema);
  sema = NULL;
  CU_ASSERT_PTR_NOT_NULL_FATAL(sgd);
  CU_ASSERT_PTR_NOT_NULL_FATAL(noisy);
  CU_ASSERT_EQUAL(sgd->ntensors, 3);
  CU_ASSERT_EQUAL(sgd->noutputs, 1);
  CU_ASSERT_PTR_EQUAL(sgd->home, prog);
  int empty = prog->nvalues;
  CU_ASSERT_EQUAL(empty, 0); /* the functions' values are their own */
  Build upd = build_at(prog, PASS_UPDATE, (Span){0}, 0);
  for (int round = 0; round < 2; round++) {
    Value *args[3] = {tensor("w", TK_PARAM, DT_F32, 1, d), tensor("g", TK_INPUT, DT_F32, 1, d),
                      ir_const(&upd, DT_F32, round ? 0.5 : 0.25, at("noisy"))};
    Value *r = NULL;
    CU_ASSERT_EQUAL(ir_inline(&upd, sgd, args, 3, &r, 1), 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->op, OP_BINARY);
    CU_ASSERT_EQUAL(r->fn, BF_SUB);
    CU_ASSERT_EQUAL(r->pass, PASS_UPDATE);
    CU_ASSERT_PTR_EQUAL(r->args[0], args[0]);
    const Value *m = r->args[1];
    CU_ASSERT_EQUAL_FATAL(m->op, OP_BINARY);
    CU_ASSERT_EQUAL(m->fn, BF_MUL);
    CU_ASSERT_EQUAL_FATAL(m->args[0]->op, OP_BROADCAST);
    CU_ASSERT_PTR_EQUAL(m->args[0]->args[0], args[2]);
    CU_ASSERT_PTR_EQUAL(m->args[1], args[1]);
    expect_shape(r, 1, d);
  }
  uint32_t streams[2];
  for (int round = 0; round < 2; round++) {
    Value *x = tensor("x", TK_INPUT, DT_F32, 1, d), *r = NULL;
    CU_ASSERT_EQUAL(ir_inline(&upd, noisy, &x, 1, &r, 1), 1);
    CU_ASSERT_EQUAL_FATAL(r->args[1]->op, OP_RNG);
    streams[round] = r->args[1]->stream;
  }
  CU_ASSERT_NOT_EQUAL(streams[0], streams[1]);
  CU_ASSERT_TRUE(ir_verify(prog, stderr));
  ir_free(sgd);
  ir_free(noisy);
  free(end());
}

void add_inline_tests(void) {
  CU_pSuite s = tests_suite("inline");
  tests_add(s, "a stdlib function inlined on builder values", test_dense);
  tests_add(s, "shape names bind per call", test_shape_names_per_call);
  tests_add(s, "errors at the call and in the module", test_errors);
  tests_add(s, "the program's own functions after sema_run", test_program_function);
  tests_add(s, "IR functions from sema, inlined without it", test_ir_function);
}
