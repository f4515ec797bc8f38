/* test_sema.c — semantic analysis: for each check, a program that passes it
 * (asserting the shapes sema computed) and one that fails it (asserting the
 * diagnostic's exact position and text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"
#include "tests.h"

static char *diag_text; /* diagnostics of the last compile */

/* Parses and elaborates text as t.gsl with the source tree's stdlib and the
 * given -D overrides; diagnostics land in diag_text. */
static Program *elaborate_with(const char *text, const Define *defs, int ndefs) {
  free(diag_text);
  diag_text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&diag_text, &len);
  Diag d = {f, 0, false};
  Source *src = source_from_string("t.gsl", text);
  Arena *ast = arena_new();
  Program *p = NULL;
  Node *root = parse_source(src, ast, &d);
  if (root) {
    SemaOptions so = {NULL, 0, TEST_SRCDIR "/stdlib", defs, ndefs};
    p = sema_program(root, src, ast, &so, &d);
    if (p && p->train.loss) { /* the front end as gslc runs it */
      ad_train(p, &d);
      ir_dce(p);
    }
  }
  fclose(f);
  if (p)
    CU_ASSERT_TRUE(ir_verify(p, stderr));
  /* the program's spans point into src and imported sources; keep src alive
   * for as long as the test looks at p by leaking it into a static slot */
  static Source *last_src;
  static Arena *last_ast;
  source_free(last_src);
  arena_free(last_ast);
  last_src = src;
  last_ast = ast;
  return p;
}

static Program *elaborate(const char *text) { return elaborate_with(text, NULL, 0); }

/* the first line of the diagnostics */
static const char *first_diag(void) {
  static char line[512];
  line[0] = '\0';
  if (diag_text) {
    size_t n = strcspn(diag_text, "\n");
    if (n >= sizeof line)
      n = sizeof line - 1;
    memcpy(line, diag_text, n);
    line[n] = '\0';
  }
  return line;
}

static void expect_error(const char *text, const char *want) {
  Program *p = elaborate(text);
  CU_ASSERT_PTR_NULL(p);
  if (strcmp(first_diag(), want) != 0)
    fprintf(stderr, "\n  want: %s\n  got:  %s\n", want, first_diag());
  CU_ASSERT_STRING_EQUAL(first_diag(), want);
  ir_free(p);
}

/* the value bound to output name */
static const Value *output(const Program *p, const char *name) {
  for (int i = 0; p && i < p->noutputs; i++)
    if (strcmp(p->outputs[i].name, name) == 0)
      return p->outputs[i].value;
  CU_FAIL("output not found");
  return NULL;
}

static void expect_shape(const Value *v, DType dt, int rank, const int64_t *d) {
  CU_ASSERT_PTR_NOT_NULL_FATAL(v);
  CU_ASSERT_EQUAL(v->dtype, dt);
  CU_ASSERT_EQUAL_FATAL(v->shape.rank, rank);
  for (int i = 0; i < rank; i++)
    CU_ASSERT_EQUAL(v->shape.d[i], d[i]);
}

static int count_ops(const Program *p, Op op) {
  int n = 0;
  for (int i = 0; i < p->nvalues; i++)
    n += p->values[i]->op == op;
  return n;
}

static void test_names(void) {
  Program *p = elaborate("input x: f32[2]\nlet y = x + 1\noutput y\n");
  CU_ASSERT_PTR_NOT_NULL(p);
  ir_free(p);
  expect_error("input x: f32[2]\nlet y = x + z\noutput y\n", "t.gsl:2:13: error: unknown name 'z'");
  expect_error("input x: f32[2]\nparam x: f32[3]\n", "t.gsl:2:1: error: redefinition of 'x'");
  expect_error("let y = nosuch(1)\n", "t.gsl:1:9: error: unknown function 'nosuch'");
  expect_error("let y = softmaxx(1)\n", "t.gsl:1:9: error: unknown function 'softmaxx'; did you mean 'softmax'?");
  expect_error("input hidden: f32[2]\nlet y = hiden + 1\n", "t.gsl:2:9: error: unknown name 'hiden'; did you mean 'hidden'?");
  /* a failed let poisons its names: later uses add no message */
  expect_error("input x: f32[2]\nlet y = x @ x\nlet z = y + 1\noutput z\n",
               "t.gsl:2:9: error: '@' needs operands of rank 2 or more, got f32[2] and f32[2]");
  CU_ASSERT_PTR_NULL(strstr(diag_text, "t.gsl:3"));
  expect_error("input x: f32[2]\noutput q\n", "t.gsl:2:8: error: unknown name 'q'");
  expect_error("fn f(a, a) { return a }\n", "t.gsl:1:9: error: redefinition of 'a'");
  expect_error("fn exp(a) { return a }\n", "t.gsl:1:1: error: 'exp' is a builtin function and cannot be redefined");
}

static void test_broadcast(void) {
  Program *p = elaborate("input a: f32[2, 1, 3]\ninput b: f32[4, 1]\nlet c = a * b\noutput c\n");
  expect_shape(output(p, "c"), DT_F32, 3, (int64_t[]){2, 4, 3});
  CU_ASSERT_EQUAL(count_ops(p, OP_BROADCAST), 2);
  ir_free(p);
  expect_error("input a: f32[2, 3]\ninput b: f32[4]\nlet c = a + b\n",
               "t.gsl:3:9: error: shapes f32[2, 3] and f32[4] do not broadcast");
  /* an i32 tensor beside a float literal computes in f32, as JAX does */
  p = elaborate("input i: i32[3]\nlet y = i * 0.5\nlet z = i * 2\noutput y, z\n");
  CU_ASSERT_EQUAL(output(p, "y")->dtype, DT_F32);
  CU_ASSERT_EQUAL(output(p, "z")->dtype, DT_I32);
  ir_free(p);
}

static void test_matmul(void) {
  Program *p = elaborate("input a: f32[2, 3, 4]\ninput b: f32[4, 5]\nlet c = a @ b\noutput c\n");
  const Value *c = output(p, "c");
  expect_shape(c, DT_F32, 3, (int64_t[]){2, 3, 5});
  CU_ASSERT_EQUAL(c->op, OP_EINSUM);
  CU_ASSERT_STRING_EQUAL(ein_str(p->arena, &c->ein), "awy,yx->awx");
  ir_free(p);
  /* batch dims broadcast: [1, 3, 4] @ [6, 4, 2] -> [6, 3, 2] */
  p = elaborate("input a: f32[1, 3, 4]\ninput b: f32[6, 4, 2]\nlet c = a @ b\noutput c\n");
  expect_shape(output(p, "c"), DT_F32, 3, (int64_t[]){6, 3, 2});
  ir_free(p);
  expect_error("input a: f32[2, 3]\ninput b: f32[4, 5]\nlet c = a @ b\n",
               "t.gsl:3:9: error: '@' contracts the last dim of f32[2, 3] with the second-to-last of f32[4, 5]: 3 vs 4");
  expect_error("input a: f32[3]\ninput b: f32[3, 5]\nlet c = a @ b\n",
               "t.gsl:3:9: error: '@' needs operands of rank 2 or more, got f32[3] and f32[3, 5]");
}

static void test_einsum(void) {
  Program *p = elaborate("input x: f32[4, 8, 16]\ninput w: f32[16, 3]\n"
                         "let g = einsum(\"gsm,me->gse\", x, w)\nlet t = einsum(\"ij->ji\", w)\n"
                         "let s = einsum(\"gsm,me->e\", x, w)\nlet i = einsum(\"ij,jk\", w, transpose(w))\n"
                         "output g, t, s, i\n");
  expect_shape(output(p, "g"), DT_F32, 3, (int64_t[]){4, 8, 3});
  expect_shape(output(p, "t"), DT_F32, 2, (int64_t[]){3, 16});
  CU_ASSERT_EQUAL(output(p, "t")->op, OP_TRANSPOSE);
  /* letters in one operand only are summed first */
  const Value *s = output(p, "s");
  expect_shape(s, DT_F32, 1, (int64_t[]){3});
  CU_ASSERT_STRING_EQUAL(ein_str(p->arena, &s->ein), "m,me->e");
  CU_ASSERT_EQUAL(s->args[0]->op, OP_REDUCE);
  expect_shape(output(p, "i"), DT_F32, 2, (int64_t[]){16, 16});
  ir_free(p);
  expect_error("input x: f32[4, 8]\ninput w: f32[9, 3]\nlet g = einsum(\"ab,bc->ac\", x, w)\n",
               "t.gsl:3:9: error: einsum spec \"ab,bc->ac\": index 'b' is 8 in one place and 9 in another");
  expect_error("input x: f32[4, 8]\nlet g = einsum(\"ab,bc->ac\", x)\n",
               "t.gsl:2:9: error: einsum spec \"ab,bc->ac\" names 2 operands but 1 is given");
  expect_error("input x: f32[4, 8]\nlet g = einsum(\"abc->a\", x)\n",
               "t.gsl:2:9: error: einsum spec \"abc->a\": operand 1 has 3 indices but its type is f32[4, 8]");
  expect_error("input x: f32[4, 8]\nlet g = einsum(\"ab->z\", x)\n",
               "t.gsl:2:9: error: einsum spec \"ab->z\": result index 'z' is in no operand");
}

static void test_reductions(void) {
  Program *p = elaborate("input x: f32[2, 3, 4]\nlet a = sum(x, 1)\nlet b = mean(x, -1, keep = true)\n"
                         "let c = argmax(x, 2)\nlet d = sum(x)\nlet e = softmax(x, 1)\nlet f = cumsum(x, 0)\n"
                         "output a, b, c, d, e, f\n");
  expect_shape(output(p, "a"), DT_F32, 2, (int64_t[]){2, 4});
  expect_shape(output(p, "b"), DT_F32, 3, (int64_t[]){2, 3, 1});
  expect_shape(output(p, "c"), DT_I32, 2, (int64_t[]){2, 3});
  expect_shape(output(p, "d"), DT_F32, 0, NULL);
  expect_shape(output(p, "e"), DT_F32, 3, (int64_t[]){2, 3, 4});
  expect_shape(output(p, "f"), DT_F32, 3, (int64_t[]){2, 3, 4});
  ir_free(p);
  expect_error("input x: f32[2, 3]\nlet a = sum(x, 2)\n",
               "t.gsl:2:16: error: sum: dimension 2 is out of range for a tensor of rank 2");
  expect_error("input x: f32[2, 3]\nlet a = sum(x, 0, kep = true)\n",
               "t.gsl:2:19: error: sum has no keyword argument 'kep'");
  expect_error("input x: f32[2, 3]\nlet a = cumsum(x)\n", "t.gsl:2:9: error: cumsum needs the dimension to scan: cumsum(x, dim)");
  expect_error("input x: f32[2, 3]\nlet a = sum(x, 0, dim = 1)\n",
               "t.gsl:2:19: error: sum: the dimension is given both by position and as dim");
  /* dim may be given by name */
  p = elaborate("input x: f32[2, 3]\nlet a = softmax(x, dim = 0)\nlet b = sum(x, dim = -1)\n"
                "let c = cumsum(x, dim = 1, exclusive = true)\noutput a, b, c\n");
  expect_shape(output(p, "b"), DT_F32, 1, (int64_t[]){2});
  CU_ASSERT_EQUAL(output(p, "c")->axis, 1);
  CU_ASSERT_TRUE(output(p, "c")->exclusive);
  ir_free(p);
}

static void test_layout(void) {
  Program *p = elaborate("input x: f32[2, 3, 4]\nlet a = reshape(x, [6, -1])\nlet b = transpose(x, [2, 0, 1])\n"
                         "let c = concat([x, x], 1)\nlet d = slice(x, 2, 1, 3)\nlet e = x[1]\nlet f = transpose(a)\n"
                         "output a, b, c, d, e, f\n");
  expect_shape(output(p, "a"), DT_F32, 2, (int64_t[]){6, 4});
  expect_shape(output(p, "b"), DT_F32, 3, (int64_t[]){4, 2, 3});
  expect_shape(output(p, "c"), DT_F32, 3, (int64_t[]){2, 6, 4});
  expect_shape(output(p, "d"), DT_F32, 3, (int64_t[]){2, 3, 2});
  expect_shape(output(p, "e"), DT_F32, 2, (int64_t[]){3, 4});
  expect_shape(output(p, "f"), DT_F32, 2, (int64_t[]){4, 6});
  ir_free(p);
  expect_error("input x: f32[2, 3]\nlet a = reshape(x, [4, 2])\n",
               "t.gsl:2:9: error: reshape: f32[2, 3] has 6 elements but the new shape [4, 2] has 8");
  expect_error("input x: f32[2, 3]\nlet a = transpose(x, [1, 1])\n",
               "t.gsl:2:26: error: transpose: dimension 1 appears twice");
  expect_error("input x: f32[2, 3]\ninput y: f32[2, 4]\nlet a = concat([x, y], 0)\n",
               "t.gsl:3:20: error: concat: f32[2, 4] does not fit beside f32[2, 3] along dimension 0");
  expect_error("input x: f32[2, 3]\nlet a = slice(x, 1, 2, 5)\n",
               "t.gsl:2:9: error: slice: [2, 5) is not a non-empty range within dimension 1 of f32[2, 3] (size 3)");
  expect_error("input x: f32[2, 3]\nlet a = x[2]\n",
               "t.gsl:2:11: error: index 2 is out of range for dimension 0 of f32[2, 3]");
}

static void test_indices(void) {
  Program *p = elaborate("input i: i32[5]\ninput t: f32[10, 4]\nlet a = one_hot(i, 7)\nlet b = gather(t, i)\n"
                         "let c = cast(t, i32)\noutput a, b, c\n");
  expect_shape(output(p, "a"), DT_F32, 2, (int64_t[]){5, 7});
  expect_shape(output(p, "b"), DT_F32, 2, (int64_t[]){5, 4});
  expect_shape(output(p, "c"), DT_I32, 2, (int64_t[]){10, 4});
  ir_free(p);
  expect_error("input x: f32[5]\nlet a = one_hot(x, 3)\n",
               "t.gsl:2:17: error: one_hot needs i32 indices, got f32[5] (use cast(x, i32))");
  expect_error("input t: f32[10, 4]\ninput x: f32[5]\nlet a = gather(t, x)\n",
               "t.gsl:3:19: error: gather needs i32 indices, got f32[5] (use cast(x, i32))");
  expect_error("input x: f32[5]\nlet a = cast(x, f64)\n", "t.gsl:2:17: error: cast: the type must be f32, bf16 or i32");
  expect_error("input x: i32[5]\nlet a = exp(x)\n",
               "t.gsl:2:9: error: exp needs an f32 or bf16 tensor, got i32[5] (use f32(x))");
}

static void test_functions(void) {
  /* shape names bind per call: one fn, two shapes */
  Program *p = elaborate("fn rows(x: f32[N, M]) { return sum(x, 1) * N }\n"
                         "input a: f32[2, 3]\ninput b: f32[5, 7]\nlet ra = rows(a)\nlet rb = rows(b)\n"
                         "fn two(x) { return x, x + 1 }\nlet u, v = two(a)\noutput ra, rb, u, v\n");
  expect_shape(output(p, "ra"), DT_F32, 1, (int64_t[]){2});
  expect_shape(output(p, "rb"), DT_F32, 1, (int64_t[]){5});
  ir_free(p);
  expect_error("fn f(x: f32[N, N]) { return x }\ninput a: f32[2, 3]\nlet b = f(a)\n",
               "t.gsl:3:11: error: argument 'x' of 'f' must be f32[N, N], got f32[2, 3]: dimension 1 is 3, expected 2");
  expect_error("fn f(x) { return x }\nlet b = f(1, 2)\n", "t.gsl:2:9: error: 'f' takes 1 argument, 2 given");
  /* shape names bind per call even where a global const has that name */
  p = elaborate("const N = 7\nfn rows(x: f32[N, M]) { return sum(x, 1) * N }\ninput a: f32[2, 3]\n"
                "let r = rows(a)\ninput b: f32[N]\noutput r, b\n");
  expect_shape(output(p, "r"), DT_F32, 1, (int64_t[]){2});
  expect_shape(output(p, "b"), DT_F32, 1, (int64_t[]){7});
  ir_free(p);
  expect_error("fn f(x) { return f(x) }\nlet b = f(1)\n",
               "t.gsl:1:18: error: calls nest more than 64 deep (is 'f' recursive?)");
  expect_error("fn two(x) { return x, x }\ninput a: f32[2]\nlet b = two(a)\n",
               "t.gsl:3:1: error: let binds 1 name but the expression gives 2 values");
  /* an error inside an inlined body carries a note at the call */
  Program *q = elaborate("fn f(x) { return x @ x }\ninput a: f32[2]\nlet b = f(a)\n");
  CU_ASSERT_PTR_NULL(q);
  CU_ASSERT_PTR_NOT_NULL(strstr(diag_text, "t.gsl:3:9: note: in the call to 'f' here"));
}

static void test_consts_and_defines(void) {
  Define d = {"N", "6"};
  Program *p = elaborate_with("const N = 4\nconst M = N * 2\ninput x: f32[N, M]\noutput x\n", &d, 1);
  expect_shape(output(p, "x"), DT_F32, 2, (int64_t[]){6, 12});
  ir_free(p);
  Define bad = {"Q", "6"};
  p = elaborate_with("const N = 4\ninput x: f32[N]\noutput x\n", &bad, 1);
  CU_ASSERT_PTR_NULL(p);
  CU_ASSERT_STRING_EQUAL(first_diag(), "gslc: error: -D Q: the program has no const named Q");
  expect_error("input x: f32[2]\nconst N = x\n", "t.gsl:2:11: error: const N must be a compile-time number");
  /* a failed declaration adds no messages where its name is used */
  expect_error("const N = zz\ninput x: f32[N]\nlet y = x + N\noutput y\n", "t.gsl:1:11: error: unknown name 'zz'");
  CU_ASSERT_PTR_NULL(strstr(diag_text, "t.gsl:2"));
  CU_ASSERT_PTR_NULL(strstr(diag_text, "t.gsl:3"));
  expect_error("const N = 0\ninput x: f32[N]\n", "t.gsl:2:14: error: dimension 0 is 0; dimensions must be positive");
}

static void test_imports(void) {
  Program *p = elaborate("import \"nn\"\ninput a: f32[4, 3]\ninput b: f32[4, 3]\nlet l = mse(a, b)\n"
                         "input g: f32[3]\nlet n = layer_norm(a, g, g)\noutput l, n\n");
  expect_shape(output(p, "l"), DT_F32, 0, NULL);
  expect_shape(output(p, "n"), DT_F32, 2, (int64_t[]){4, 3});
  ir_free(p);
  expect_error("import \"nosuch\"\n",
               "t.gsl:1:1: error: cannot find module \"nosuch\" (looked for nosuch.gsl in the -I directories and in "
               TEST_SRCDIR "/stdlib)");
}

static const Output *root_of(const Program *p, OutputKind k, const char *name) {
  for (int i = 0; i < p->noutputs; i++)
    if (p->outputs[i].kind == k && (!name || strcmp(p->outputs[i].name, name) == 0))
      return &p->outputs[i];
  return NULL;
}

/* train: the loss root, one update per trained param (p - lr * g for
 * sgd, g of sum(w * x) being x), adam's states made with the param's
 * shape, frozen params left alone, and the located errors and warnings */
static void test_train(void) {
  Program *p = elaborate("param w: f32[2]\ninput x: f32[2]\nparam f: f32[2] frozen\n"
                         "train sum(w * x) + sum(f) with sgd(lr = 0.5)\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  const Output *loss = root_of(p, OUT_LOSS, NULL), *up = root_of(p, OUT_UPDATE, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(loss);
  CU_ASSERT_PTR_NOT_NULL_FATAL(up);
  CU_ASSERT_PTR_NULL(root_of(p, OUT_UPDATE, "f"));
  expect_shape(loss->value, DT_F32, 0, NULL);
  /* sgd's p - lr * g (its numbers: tests/grad, tests/e2e/train_steps) */
  const Value *u = up->value;
  CU_ASSERT_EQUAL(u->op, OP_BINARY);
  CU_ASSERT_EQUAL(u->fn, BF_SUB);
  CU_ASSERT_EQUAL(u->args[0]->op, OP_PARAM);
  CU_ASSERT_EQUAL(u->args[1]->op, OP_BINARY);
  ir_free(p);

  p = elaborate("param w: f32[3, 2]\ninput x: f32[3, 2]\ntrain mean(w * x) with adam(lr = 0.01)\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  int states = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i].kind == TK_STATE) {
      states++;
      const char *n = p->tensors[i].name;
      CU_ASSERT(strcmp(n, "adam.m.w") == 0 || strcmp(n, "adam.v.w") == 0 || strcmp(n, "adam.t") == 0);
      CU_ASSERT_EQUAL(p->tensors[i].init, INIT_ZEROS);
      CU_ASSERT_EQUAL(p->tensors[i].shape.rank, strcmp(n, "adam.t") == 0 ? 0 : 2);
      CU_ASSERT_PTR_NOT_NULL(root_of(p, OUT_UPDATE, n));
    }
  CU_ASSERT_EQUAL(states, 3);
  ir_free(p);

  expect_error("param w: f32[2]\nlet l = w * 2\ntrain l with sgd(lr = 0.1)\n",
               "t.gsl:3:7: error: the loss must be an f32 scalar, not f32[2]");
  expect_error("param w: f32[2]\ntrain sum(w) with rmsprop()\n",
               "t.gsl:2:19: error: unknown optimizer 'rmsprop' (sgd, momentum, adam or adamw)");
  p = elaborate("param w: f32[2]\nparam u: f32[2]\ninput x: f32[2]\n"
                "train sum(x * cast(cast(w, i32), f32)) with sgd()\n");
  CU_ASSERT_PTR_NOT_NULL(p);
  CU_ASSERT_PTR_NOT_NULL(strstr(diag_text, "t.gsl:1:1: warning: param 'w' reaches the loss only through"));
  CU_ASSERT_PTR_NOT_NULL(strstr(diag_text, "t.gsl:2:1: warning: param 'u' does not reach the loss"));
  if (p) {
    CU_ASSERT_PTR_NULL(root_of(p, OUT_UPDATE, "w"));
    CU_ASSERT_PTR_NULL(root_of(p, OUT_UPDATE, "u"));
    ir_free(p);
  }
}

/* a moe block: gating inlined from stdlib/moe.gsl, dispatch, the body
 * batched over the experts (w[e] is w itself), combine */
static void test_moe(void) {
  Program *p = elaborate("param wg: f32[4, 2]\nparam wi: f32[2, 4, 3]\ninput x: f32[2, 8, 4]\n"
                         "let y, aux = moe(x, gate = wg, top = 1, capacity = 1.5) (t, e) {\n"
                         "  return relu(t @ wi[e]) @ transpose(wi[e])\n}\noutput y, aux\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  const Value *y = output(p, "y"), *aux = output(p, "aux");
  CU_ASSERT_EQUAL(y->op, OP_COMBINE);
  CU_ASSERT(shape_eq(&y->shape, &(Shape){3, {2, 8, 4}}));
  CU_ASSERT_EQUAL(aux->shape.rank, 0);
  /* C = ceil(1.5 * 1 * 8 / 2) = 6: the experts' outputs are [E, G, C, M] */
  const Value *out = y->args[0];
  CU_ASSERT_EQUAL(out->op, OP_EINSUM);
  CU_ASSERT(shape_eq(&out->shape, &(Shape){4, {2, 2, 6, 4}}));
  /* routes: i32[G, S, 1] from the gating */
  CU_ASSERT(shape_eq(&y->args[1]->shape, &(Shape){3, {2, 8, 1}}));
  CU_ASSERT_EQUAL(y->args[1]->dtype, DT_I32);
  /* no gather is left: wi[e] batched to wi itself */
  int dispatches = 0;
  for (int i = 0; i < p->nvalues; i++) {
    CU_ASSERT_NOT_EQUAL(p->values[i]->op, OP_GATHER);
    dispatches += p->values[i]->op == OP_DISPATCH;
  }
  CU_ASSERT_EQUAL(dispatches, 1);
  ir_free(p);
  expect_error("param wg: f32[4, 2]\ninput x: f32[1, 4, 4]\n"
               "let y = moe(x, gate = wg, top = 2) (t, e) {\n  return t\n}\n",
               "t.gsl:3:1: error: let binds 1 name but the expression gives 2 values");
  expect_error("param wg: f32[4, 2]\ninput x: f32[1, 4, 4]\n"
               "let y, a = moe(x, gate = wg, top = 3) (t, e) {\n  return t\n}\n",
               "t.gsl:3:36: error: moe's top = 3 needs at least 3 experts, the gate has E = 2");
}

static void test_annotations(void) {
  Program *p = elaborate("mesh [d = 2, m = 2]\nparam w: f32[4, 6] split(1, m)\ninput x: f32[8, 4] split(0)\n"
                         "let h = shard(x @ w, [d, m])\nlet r = replicate(h)\noutput h, r\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(p->mesh.naxes, 2);
  CU_ASSERT_TRUE(p->tensors[0].annotated);
  CU_ASSERT_EQUAL(p->tensors[0].sh.naxes[1], 1);
  CU_ASSERT_EQUAL(p->tensors[0].sh.axes[1][0], 1);
  CU_ASSERT_EQUAL(p->tensors[1].sh.naxes[0], 2); /* split(0) is over every axis */
  const Value *h = output(p, "h");
  CU_ASSERT_EQUAL(h->op, OP_ANNOTATE);
  CU_ASSERT_EQUAL(h->sh_origin, SO_ANNOTATED);
  ir_free(p);
  /* an uneven split is a layout (tiles of ceil(6 / 4) = 2 rows); a split
   * with more shards than elements is the error */
  p = elaborate("mesh [d = 4]\nparam w: f32[6, 3] split(0)\n");
  CU_ASSERT_PTR_NOT_NULL(p);
  ir_free(p);
  expect_error("mesh [d = 4]\nparam w: f32[3, 3] split(0)\n",
               "t.gsl:2:20: error: dimension 0 of param 'w' (size 3) cannot be cut into 4 shards (mesh axes d = 4): "
               "every shard would need at least one element");
  expect_error("mesh [d = 2]\nparam w: f32[6, 3] split(0, q)\n", "t.gsl:2:29: error: unknown mesh axis 'q'");
  expect_error("mesh [d = 2]\nparam w: f32[6, 3] shard([d, d])\n",
               "t.gsl:2:30: error: mesh axis 'd' is used twice in one sharding");
  expect_error("mesh [d = 2]\nparam w: f32[6, 3] split(2)\n",
               "t.gsl:2:26: error: split: dimension 2 is out of range for a tensor of rank 2");
  expect_error("param w: f32[6, 3] shard([_])\n", "t.gsl:1:26: error: shard: the list has 1 entries but the tensor has rank 2");
  expect_error("param w: f32[2]\nmesh [d = 2]\n", "t.gsl:2:1: error: the mesh must be declared before any param or input");
  expect_error("mesh [d = 2]\nmesh [e = 2]\n", "t.gsl:2:1: error: a program has at most one mesh");
}

static void test_initializers(void) {
  Program *p = elaborate("param a: f32[2] = normal(0.5)\nparam b: f32[2] = uniform(-1, 1) frozen\nparam c: f32[2]\n"
                         "input i: i32[3] = ones()\noutput a\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(p->tensors[0].init, INIT_NORMAL);
  CU_ASSERT_DOUBLE_EQUAL(p->tensors[0].a, 0.5, 0);
  CU_ASSERT_EQUAL(p->tensors[1].init, INIT_UNIFORM);
  CU_ASSERT_TRUE(p->tensors[1].frozen);
  CU_ASSERT_NOT_EQUAL(p->tensors[0].stream, p->tensors[1].stream);
  CU_ASSERT_EQUAL(p->tensors[2].init, INIT_ZEROS);
  CU_ASSERT_EQUAL(p->tensors[3].init, INIT_ONES);
  ir_free(p);
  expect_error("input i: i32[3] = normal(1.0)\n",
               "t.gsl:1:19: error: normal() draws floats; input 'i' is i32 (uniform(lo, hi) draws integers lo..hi-1)");
  p = elaborate("input ids: i32[3] = uniform(0, 10)\noutput ids\n");
  CU_ASSERT_PTR_NOT_NULL(p);
  ir_free(p);
  expect_error("param a: f32[2] = uniform(1, 1)\n", "t.gsl:1:19: error: uniform(lo, hi) needs lo < hi");
  expect_error("let z = zeros()\n",
               "t.gsl:1:9: error: zeros() is an initializer: it belongs on a param or input declaration (param w: f32[4] = zeros(...))");
  expect_error("param a: f32[2] = exp(1)\n",
               "t.gsl:1:19: error: expected an initializer: zeros(), ones(), normal(std) or uniform(lo, hi)");
}

static void test_where_and_compare(void) {
  Program *p = elaborate("input x: f32[3, 4]\ninput i: i32[4]\nlet y = where(x > 0, x, 0)\nlet c = i == 2\noutput y, c\n");
  expect_shape(output(p, "y"), DT_F32, 2, (int64_t[]){3, 4});
  expect_shape(output(p, "c"), DT_F32, 1, (int64_t[]){4}); /* comparisons yield 1.0/0.0 */
  ir_free(p);
  expect_error("input x: f32[3, 4]\ninput z: f32[5]\nlet y = where(x > 0, x, z)\n",
               "t.gsl:3:9: error: where: shapes f32[3, 4], f32[3, 4] and f32[5] do not broadcast");
}

static void test_caret(void) {
  Program *p = elaborate("input x: f32[2]\nlet y = x + zz\n");
  CU_ASSERT_PTR_NULL(p);
  CU_ASSERT_STRING_EQUAL(diag_text, "t.gsl:2:13: error: unknown name 'zz'\n"
                                    "    2 | let y = x + zz\n"
                                    "      |             ^~\n");
}

void add_sema_tests(void) {
  CU_pSuite s = tests_suite("sema");
  tests_add(s, "names", test_names);
  tests_add(s, "broadcast", test_broadcast);
  tests_add(s, "matmul", test_matmul);
  tests_add(s, "einsum", test_einsum);
  tests_add(s, "reductions", test_reductions);
  tests_add(s, "layout", test_layout);
  tests_add(s, "indices", test_indices);
  tests_add(s, "functions", test_functions);
  tests_add(s, "consts and -D", test_consts_and_defines);
  tests_add(s, "imports", test_imports);
  tests_add(s, "train", test_train);
  tests_add(s, "moe blocks", test_moe);
  tests_add(s, "annotations", test_annotations);
  tests_add(s, "initializers", test_initializers);
  tests_add(s, "where and comparisons", test_where_and_compare);
  tests_add(s, "caret", test_caret);
}
