/* test_parser.c — the parser (grammar/parser.y) and the AST dump (ast.c).
 *
 * Programs are parsed and their ast_dump compared whole with the expected
 * S-expression: the SPEC's whole program and every form of SPEC sections
 * 3-6, precedence, spans. Bad programs are checked for the exact
 * diagnostics (captured by a Diag over a memory stream) and a NULL tree.
 * A fuzz test mutates the SPEC program with a fixed seed and checks that
 * the parser neither crashes nor disagrees with itself about errors. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "gslc.h"
#include "tests.h"

/* What parsing a text gave. */
typedef struct Parsed {
  char *dump;  /* ast_dump of the tree, or NULL when parse_source failed */
  char *diags; /* diagnostics as printed */
  int nerrors; /* the errors the parse reported */
} Parsed;

static Parsed parse_text_len(const char *text, size_t len) {
  Parsed r = {0};
  size_t n;
  FILE *df = open_memstream(&r.diags, &n);
  char *buf = malloc(len + 1);
  memcpy(buf, text, len);
  buf[len] = '\0';
  Source src = {"m.gsl", buf, len};
  Arena *a = arena_new();
  Diag d = {df, 0, false};
  Node *root = parse_source(&src, a, &d);
  r.nerrors = d.errors;
  fclose(df);
  if (root) {
    FILE *f = open_memstream(&r.dump, &n);
    ast_dump(f, root);
    fclose(f);
  }
  arena_free(a);
  free(buf);
  return r;
}

static Parsed parse_text(const char *text) { return parse_text_len(text, strlen(text)); }

static void parsed_free(Parsed *r) {
  free(r->dump);
  free(r->diags);
}

/* Asserts that text parses, without diagnostics, to the tree want. */
static void check_ast(const char *text, const char *want) {
  Parsed r = parse_text(text);
  CU_ASSERT_PTR_NOT_NULL(r.dump);
  if (r.dump)
    CU_ASSERT_STRING_EQUAL(r.dump, want);
  CU_ASSERT_STRING_EQUAL(r.diags, "");
  CU_ASSERT_EQUAL(r.nerrors, 0);
  parsed_free(&r);
}


/* Asserts that text fails to parse with exactly these diagnostic lines. */
static void check_errors(const char *text, const char *want, int nerrors) {
  Parsed r = parse_text(text);
  CU_ASSERT_PTR_NULL(r.dump);
  char *d = tests_first_lines(r.diags);
  CU_ASSERT_STRING_EQUAL(d, want);
  CU_ASSERT_EQUAL(r.nerrors, nerrors);
  free(d);
  parsed_free(&r);
}

static const char spec_program[] =
  "# examples/moe.gsl — one GShard mixture-of-experts layer, trained to imitate a\n"
  "# fixed random teacher. Groups of tokens are split over the devices; so are\n"
  "# the experts. The compiler finds the two all-to-alls between them.\n"
  "import \"nn\"\n"
  "\n"
  "mesh [d = 4]                        # 4 devices on one axis named d\n"
  "\n"
  "const G = 4                         # token groups (one per device)\n"
  "const S = 256                       # tokens per group\n"
  "const M = 64                        # model width\n"
  "const H = 256                       # expert hidden width\n"
  "const E = 8                         # experts (two per device)\n"
  "\n"
  "param wg: f32[M, E]    replicate() = normal(0.02)\n"
  "param wi: f32[E, M, H] split(0)    = normal(0.02)\n"
  "param wo: f32[E, H, M] split(0)    = normal(0.02)\n"
  "param teacher: f32[M, M] replicate() = normal(0.125) frozen\n"
  "\n"
  "input x: f32[G, S, M] split(0) = normal(1.0)   # fresh synthetic batch each step\n"
  "\n"
  "fn layer(x) {\n"
  "  let y, aux = moe(x, gate = wg, top = 2, capacity = 2.0) (t, e) {\n"
  "    return relu(t @ wi[e]) @ wo[e]\n"
  "  }\n"
  "  return y, aux\n"
  "}\n"
  "\n"
  "let y, aux = layer(x)\n"
  "output y\n"
  "train mse(y, tanh(x @ teacher)) + 0.01 * aux with adam(lr = 0.001)\n";

static void test_parse_spec_program(void) {
  check_ast(spec_program,
            "(program (import \"nn\") (mesh (axis d (int 4))) (const G (int 4)) (const S (int 256)) "
            "(const M (int 64)) (const H (int 256)) (const E (int 8)) "
            "(param wg (type f32 (name M) (name E)) (call replicate) (call normal (float 0.02))) "
            "(param wi (type f32 (name E) (name M) (name H)) (call split (int 0)) (call normal (float 0.02))) "
            "(param wo (type f32 (name E) (name H) (name M)) (call split (int 0)) (call normal (float 0.02))) "
            "(param teacher (type f32 (name M) (name M)) (call replicate) (call normal (float 0.125)) frozen) "
            "(input x (type f32 (name G) (name S) (name M)) (call split (int 0)) (call normal (float 1.0))) "
            "(fn layer (args (arg x)) (body "
            "(let (y aux) (moe (name x) (kwarg gate (name wg)) (kwarg top (int 2)) (kwarg capacity (float 2.0)) "
            "(fn nil (args (arg t) (arg e)) (body "
            "(return (@ (call relu (@ (name t) (index (name wi) (name e)))) (index (name wo) (name e)))))))) "
            "(return (name y) (name aux)))) "
            "(let (y aux) (call layer (name x))) (output y) "
            "(train (+ (call mse (name y) (call tanh (@ (name x) (name teacher)))) (* (float 0.01) (name aux))) "
            "(call adam (kwarg lr (float 0.001)))))");
}

static void test_parse_declarations(void) {
  check_ast("import \"nn\"", "(program (import \"nn\"))");
  check_ast("mesh [a = 2, b = 4]", "(program (mesh (axis a (int 2)) (axis b (int 4))))");
  check_ast("mesh [a = 2,]; mesh []", "(program (mesh (axis a (int 2))) (mesh))");
  check_ast("const N = 4\nconst F = 2.5\nconst K = N * 2",
            "(program (const N (int 4)) (const F (float 2.5)) (const K (* (name N) (int 2))))");
  check_ast("param s: f32\nparam w: f32[N, M]\nparam b: i32[N] = zeros() frozen\n"
            "param v: f32[E, M] split(0, d) = uniform(-1, 1)\nparam u: f32[2] replicate() frozen",
            "(program (param s (type f32) nil nil) (param w (type f32 (name N) (name M)) nil nil) "
            "(param b (type i32 (name N)) nil (call zeros) frozen) "
            "(param v (type f32 (name E) (name M)) (call split (int 0) (name d)) "
            "(call uniform (neg (int 1)) (int 1))) "
            "(param u (type f32 (int 2)) (call replicate) nil frozen))");
  check_ast("input x: f32[B, M]\ninput y: i32[B] = ones()\ninput z: f32[B] split(0) = normal(1.0)",
            "(program (input x (type f32 (name B) (name M)) nil nil) "
            "(input y (type i32 (name B)) nil (call ones)) "
            "(input z (type f32 (name B)) (call split (int 0)) (call normal (float 1.0))))");
  check_ast("fn f(a, b: f32[N, M]) { return a @ b }\n"
            "fn g() {\n\n  let c = 1; let d, e = h(c)\n  return d, e\n}\n"
            "fn k(x: f32,) {\n}",
            "(program (fn f (args (arg a) (arg b (type f32 (name N) (name M)))) (body (return (@ (name a) (name b))))) "
            "(fn g (args) (body (let (c) (int 1)) (let (d e) (call h (name c))) (return (name d) (name e)))) "
            "(fn k (args (arg x (type f32))) (body)))");
}

static void test_parse_statements(void) {
  check_ast("let a = 1\nlet a, b = f(x)", "(program (let (a) (int 1)) (let (a b) (call f (name x))))");
  check_ast("output y\noutput a, b", "(program (output y) (output a b))");
  check_ast("train loss with sgd(lr = 0.1)", "(program (train (name loss) (call sgd (kwarg lr (float 0.1)))))");
  check_ast("", "(program)");
  check_ast("\n\n;;\n; let a = 1;;\n", "(program (let (a) (int 1)))");
}

static void test_parse_annotations(void) {
  check_ast("let r = replicate(x)\nlet s = split(x, 0)\nlet t = split(x, 0, d)\n"
            "let u = shard(x, [a, _, (b, c)])\nparam w: f32[A, B, C] shard([a, _, (b, c)])",
            "(program (let (r) (call replicate (name x))) (let (s) (call split (name x) (int 0))) "
            "(let (t) (call split (name x) (int 0) (name d))) "
            "(let (u) (call shard (name x) (list (name a) (name _) (tuple (name b) (name c))))) "
            "(param w (type f32 (name A) (name B) (name C)) "
            "(call shard (list (name a) (name _) (tuple (name b) (name c)))) nil))");
}

static void test_parse_expressions(void) {
  check_ast("let a = einsum(\"gsm,me->gse\", x, w)\nlet b = cast(x, i32)\nlet c = x[e] + -y\n"
            "let d = [] ; let e = [1, 2.5, \"s\", true, false,]\nlet f = sum(x, 0)[1, 2]\n"
            "let g = where(a >= b, a, b) ; let h = (a)\nlet i = a == b; let j = a != b; let k = a <= b\n"
            "let l = a > b",
            "(program (let (a) (call einsum (string \"gsm,me->gse\") (name x) (name w))) "
            "(let (b) (call cast (name x) (name i32))) "
            "(let (c) (+ (index (name x) (name e)) (neg (name y)))) "
            "(let (d) (list)) (let (e) (list (int 1) (float 2.5) (string \"s\") (bool true) (bool false))) "
            "(let (f) (index (call sum (name x) (int 0)) (int 1) (int 2))) "
            "(let (g) (call where (>= (name a) (name b)) (name a) (name b))) (let (h) (name a)) "
            "(let (i) (== (name a) (name b))) (let (j) (!= (name a) (name b))) (let (k) (<= (name a) (name b))) "
            "(let (l) (> (name a) (name b))))");
  check_ast("let t = f(\n  a,\n  [b,\n   c],\n  k = (1, 2),\n)",
            "(program (let (t) (call f (name a) (list (name b) (name c)) (kwarg k (tuple (int 1) (int 2))))))");
}

static void test_parse_precedence(void) {
  check_ast("let x = a + b * c @ d < e",
            "(program (let (x) (< (+ (name a) (@ (* (name b) (name c)) (name d))) (name e))))");
  check_ast("let x = a - b - c / d / e",
            "(program (let (x) (- (- (name a) (name b)) (/ (/ (name c) (name d)) (name e)))))");
  check_ast("let x = -a[0] * -(b + c) == 2",
            "(program (let (x) (== (* (neg (index (name a) (int 0))) (neg (+ (name b) (name c)))) (int 2))))");
  check_ast("let x = a @ b[e] @ c", "(program (let (x) (@ (@ (name a) (index (name b) (name e))) (name c))))");
}

static void test_parse_moe(void) {
  check_ast("let y, aux = moe(x, gate = wg, top = 1, capacity = 1.25, random_routing = true) (t, e) {\n"
            "  let h = relu(t @ wi[e])\n  return h @ wo[e]\n}",
            "(program (let (y aux) (moe (name x) (kwarg gate (name wg)) (kwarg top (int 1)) "
            "(kwarg capacity (float 1.25)) (kwarg random_routing (bool true)) "
            "(fn nil (args (arg t) (arg e)) (body (let (h) (call relu (@ (name t) (index (name wi) (name e))))) "
            "(return (@ (name h) (index (name wo) (name e)))))))))");
}

static void test_parse_loops(void) {
  /* at the top level, nested, in a function; a body takes any statement
   * (sema says which cannot stand there) */
  check_ast("for l in 0..2 * L {\n  let h = f(h, w[l])\n  for i in l..L { let a, b = g(i) }\n}\nlet z = h",
            "(program (for l (int 0) (* (int 2) (name L)) (body (let (h) (call f (name h) (index (name w) (name l)))) "
            "(for i (name l) (name L) (body (let (a b) (call g (name i))))))) (let (z) (name h)))");
  /* remat: a flag on the fn or for node (gsl.7, RECOMPUTATION) */
  check_ast("remat fn f(x) {\n  remat for i in 0..3 { let x = x * i }\n  return x\n}\nremat for j in 0..1 { let y = f(j) }",
            "(program (fn remat f (args (arg x)) (body (for remat i (int 0) (int 3) (body (let (x) (* (name x) (name i))))) "
            "(return (name x)))) (for remat j (int 0) (int 1) (body (let (y) (call f (name j))))))");
  check_ast("fn f(x) {\n  for i in 0..3 { let x = x * i }\n  return x\n}",
            "(program (fn f (args (arg x)) (body (for i (int 0) (int 3) (body (let (x) (* (name x) (name i))))) "
            "(return (name x)))))");
  check_ast("for i in 0..1 {\n  param w: f32\n  output w\n  return w\n}\n",
            "(program (for i (int 0) (int 1) (body (param w (type f32) nil nil) (output w) (return (name w)))))");
  check_ast("for i in 0..0 {}", "(program (for i (int 0) (int 0) (body)))");
  /* the node spans the header, where notes point */
  Arena *a = arena_new();
  Source src = {"m.gsl", "for l in 0..L {\n  let h = h\n}\n", 29};
  Diag d = {stderr, 0, false};
  Node *root = parse_source(&src, a, &d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(root);
  Node *loop = root->list.items[0];
  CU_ASSERT_EQUAL(loop->kind, AST_FOR);
  CU_ASSERT_EQUAL(loop->span.off, 0);
  CU_ASSERT_EQUAL(loop->span.end, 13);
  CU_ASSERT_EQUAL(loop->c->span.col, 5);
  arena_free(a);
  /* a loop's '{' is closed at the end of the input, not by a top-level keyword */
  check_errors("for l in 0..2 {\n  let h = 1\nparam w: f32\n",
               "m.gsl:3:13: error: syntax error, missing '}' at end of file\n"
               "m.gsl:1:15: note: to match this '{'\n",
               1);
  check_errors("for l in 0..2\nlet a = 1\n", "m.gsl:1:14: error: syntax error, unexpected newline, expecting operator or '{'\n", 1);
  check_errors("for in 0..1 {}\n", "m.gsl:1:5: error: syntax error, unexpected 'in', expecting name\n", 1);
  check_errors("for i 0..1 {}\n", "m.gsl:1:7: error: syntax error, unexpected number, expecting 'in'\n", 1);
  check_errors("for i in 0 {}\n", "m.gsl:1:12: error: syntax error, unexpected '{', expecting operator or '..'\n", 1);
}

static void test_parse_spans(void) {
  Arena *a = arena_new();
  const char *text = "const N = 4\n  let x = a +\tb * c\n";
  Source src = {"m.gsl", text, strlen(text)};
  Diag d = {stderr, 0, false};
  Node *root = parse_source(&src, a, &d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(root);
  CU_ASSERT_EQUAL(root->list.len, 2);
  Node *let = root->list.items[1];
  CU_ASSERT_EQUAL(let->kind, AST_LET);
  CU_ASSERT_EQUAL(let->span.line, 2);
  CU_ASSERT_EQUAL(let->span.col, 3);
  CU_ASSERT_EQUAL(let->span.off, 14);
  CU_ASSERT_EQUAL(let->span.end, 31);
  Node *add = let->a;
  CU_ASSERT_EQUAL(add->kind, AST_BINARY);
  CU_ASSERT_EQUAL(add->op, BIN_ADD);
  CU_ASSERT_EQUAL(add->span.col, 11);
  CU_ASSERT_EQUAL(add->span.off, 22);
  CU_ASSERT_EQUAL(add->span.end, 31);
  CU_ASSERT_EQUAL(add->b->span.col, 15);
  CU_ASSERT_PTR_EQUAL(add->b->span.src, &src);
  CU_ASSERT_EQUAL(let->list.items[0]->span.col, 7);
  arena_free(a);
}

static void test_parse_one_error_full_text(void) {
  Parsed r = parse_text("const N = 4\nlet x = f(a, (b c)\n");
  CU_ASSERT_PTR_NULL(r.dump);
  CU_ASSERT_STRING_EQUAL(r.diags,
                         "m.gsl:2:17: error: syntax error, unexpected name, expecting operator, ',' or ')'\n"
                         "    2 | let x = f(a, (b c)\n"
                         "      |                 ^\n");
  CU_ASSERT_EQUAL(r.nerrors, 1);
  parsed_free(&r);
}

static void test_parse_several_errors(void) {
  check_errors("let a = (1 + )\n"
               "const = 3\n"
               "let b = 2\n"
               "param w f32\n"
               "let c = f(1, [2 3], 4) * 2\n"
               "return c\n"
               "train a with b\n"
               "output a\n",
               "m.gsl:1:14: error: syntax error, unexpected ')', expecting expression\n"
               "m.gsl:2:7: error: syntax error, unexpected '=', expecting name\n"
               "m.gsl:4:9: error: syntax error, unexpected name, expecting ':'\n"
               "m.gsl:5:17: error: syntax error, unexpected number, expecting operator, ',' or ']'\n"
               "m.gsl:6:1: error: syntax error, unexpected 'return', expecting statement\n"
               "m.gsl:7:15: error: syntax error, unexpected newline, expecting '('\n",
               6);
  check_errors("x = 1\nlet a = 1 < 2 < 3\nfn f(x) { let y = x; output y }\nlet k = g(a = 1, 2)\n",
               "m.gsl:1:1: error: syntax error, unexpected name, expecting statement\n"
               "m.gsl:2:15: error: syntax error, unexpected '<', expecting operator, newline or ';'\n"
               "m.gsl:3:22: error: syntax error, unexpected 'output', expecting 'let', 'return', 'for', 'remat' or '}'\n"
               "m.gsl:4:18: error: positional argument follows keyword argument\n",
               4);
}

static void test_parse_missing_closer(void) {
  /* a missing ')' is reported at the end of its line, with its '(' */
  check_errors("let x = f(a, g(b)\nlet y = x\noutput y\n",
               "m.gsl:1:18: error: syntax error, missing ')' at end of line\n"
               "m.gsl:1:10: note: to match this '('\n",
               1);
  /* and the parse goes on after it */
  check_errors("let x = [1, 2\nlet y = )\nfn f(x) {\n  let z = x\n\nparam w: f32\nlet q = h(1,\n  2",
               "m.gsl:1:14: error: syntax error, missing ']' at end of line\n"
               "m.gsl:1:9: note: to match this '['\n"
               "m.gsl:2:9: error: syntax error, unexpected ')', expecting expression\n"
               "m.gsl:4:12: error: syntax error, missing '}' at end of line\n"
               "m.gsl:3:9: note: to match this '{'\n"
               "m.gsl:8:4: error: syntax error, missing ')' at end of file\n"
               "m.gsl:7:10: note: to match this '('\n",
               4);
  /* a closer expected on a later line than its opener names the opener */
  check_errors("let x = f(a,\n  b c)\n",
               "m.gsl:2:5: error: syntax error, unexpected name, expecting operator, '=', ',' or ')'\n"
               "m.gsl:1:10: note: to match this '('\n",
               1);
}

static void test_parse_lexical_errors_fail(void) {
  check_errors("let a = 1 $\n", "m.gsl:1:11: error: unexpected character '$'\n", 1);
  Parsed r = parse_text_len("let a = 1\0\n", 11);
  CU_ASSERT_PTR_NULL(r.dump);
  CU_ASSERT_EQUAL(r.nerrors, 1);
  parsed_free(&r);
}

static void test_parse_deep_nesting(void) {
  size_t n = 30000;
  char *text = malloc(n + 16);
  strcpy(text, "let a = ");
  memset(text + 8, '(', n);
  strcpy(text + 8 + n, "1");
  Parsed r = parse_text(text);
  CU_ASSERT_PTR_NULL(r.dump);
  CU_ASSERT(r.nerrors >= 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(r.diags, "nested too deeply"));
  parsed_free(&r);
  free(text);
}

static void test_parse_error_limit(void) {
  char *text = calloc(100, 16);
  for (int i = 0; i < 100; i++)
    strcat(text, i % 2 ? "let a = )\n" : "let $ = 1\n");
  Parsed r = parse_text(text);
  CU_ASSERT_PTR_NULL(r.dump);
  CU_ASSERT_EQUAL(r.nerrors, 50);
  const char *note = strstr(r.diags, "m.gsl:49:5: note: too many errors, giving up on this file\n");
  CU_ASSERT_PTR_NOT_NULL(note);
  if (note)
    CU_ASSERT_PTR_NULL(strstr(strchr(note, '\n'), "note:"));
  parsed_free(&r);
  free(text);
}

/* xorshift64*: a fixed, portable stream of pseudo-random numbers */
static uint64_t next_random(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

/* Mutated SPEC programs and random bytes: the parser must return, and
 * return a tree exactly when it reported no error. */
static void test_parse_fuzz(void) {
  static const char interesting[] = "()[]{},;:=+-*@<>\n\"#\\ \0\xff_aZ09.eE";
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  size_t base = sizeof spec_program - 1;
  char *buf = malloc(base + 64);
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 400; iter++) {
    size_t len = base;
    memcpy(buf, spec_program, base);
    int edits = 1 + (int)(next_random(&seed) % 6);
    for (int e = 0; e < edits; e++) {
      uint64_t r = next_random(&seed);
      size_t at = (size_t)(r >> 8) % (len ? len : 1);
      switch (r % 4) {
      case 0: /* delete a byte */
        if (len > 0) {
          memmove(buf + at, buf + at + 1, len - at - 1);
          len--;
        }
        break;
      case 1: /* insert a byte */
        if (len < base + 60) {
          memmove(buf + at + 1, buf + at, len - at);
          buf[at] = interesting[(r >> 40) % (sizeof interesting - 1)];
          len++;
        }
        break;
      case 2: /* swap two bytes */
        if (len > 1) {
          size_t to = (size_t)(r >> 32) % len;
          char c = buf[at];
          buf[at] = buf[to];
          buf[to] = c;
        }
        break;
      default: /* overwrite with a random byte */
        if (len > 0)
          buf[at] = (char)(r >> 48);
        break;
      }
    }
    Parsed p = parse_text_len(buf, len);
    CU_ASSERT((p.dump != NULL) == (p.nerrors == 0));
    if (p.dump)
      ok++;
    else
      failed++;
    parsed_free(&p);
  }
  for (int iter = 0; iter < 100; iter++) {
    size_t len = (size_t)(next_random(&seed) % 200);
    for (size_t i = 0; i < len; i++)
      buf[i] = (char)(next_random(&seed) >> 56);
    Parsed p = parse_text_len(buf, len);
    CU_ASSERT((p.dump != NULL) == (p.nerrors == 0));
    parsed_free(&p);
  }
  /* the mutations must exercise both outcomes */
  CU_ASSERT(ok > 0);
  CU_ASSERT(failed > 100);
  free(buf);
}

void add_parser_tests(void) {
  CU_pSuite s = tests_suite("parser");
  tests_add(s, "the SPEC program", test_parse_spec_program);
  tests_add(s, "declarations", test_parse_declarations);
  tests_add(s, "statements", test_parse_statements);
  tests_add(s, "sharding annotations", test_parse_annotations);
  tests_add(s, "expressions", test_parse_expressions);
  tests_add(s, "precedence", test_parse_precedence);
  tests_add(s, "moe block", test_parse_moe);
  tests_add(s, "for loops", test_parse_loops);
  tests_add(s, "spans", test_parse_spans);
  tests_add(s, "an error in full", test_parse_one_error_full_text);
  tests_add(s, "several errors", test_parse_several_errors);
  tests_add(s, "missing closers", test_parse_missing_closer);
  tests_add(s, "lexical errors fail the parse", test_parse_lexical_errors_fail);
  tests_add(s, "deep nesting", test_parse_deep_nesting);
  tests_add(s, "error limit", test_parse_error_limit);
  tests_add(s, "fuzz", test_parse_fuzz);
}
