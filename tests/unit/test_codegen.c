/* test_codegen.c — codegen.c end to end: small Programs built by hand are
 * planned and compiled by cg_emit to an object, linked with libgslrt (mpicc), run with
 * --input/--output .npy files, and their outputs compared with plain C
 * references to 1e-5 relative. Programs carry many outputs each, since
 * linking and starting a program cost most of the time. The textual LLVM
 * IR is inspected for fusion (one loop nest, no intermediate buffers).
 * SPMD programs (local shapes, collectives, local slices) are run on a
 * one-device mesh, where collectives are identities, and their IR for a
 * multi-device mesh is checked for the runtime calls and their constant
 * arguments. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gslc.h"
#include "gslrt.h"
#include "tests.h"

#ifndef TEST_BUILDDIR
#define TEST_BUILDDIR "."
#endif

static char tmpdir[64]; /* this suite's scratch directory */

/* ---- building programs ------------------------------------------------------ */

static Value *val(Program *p, Op op, DType dt, int rank, const int64_t *d, int nargs, Value **args) {
  Build bd = build_at(p, PASS_FORWARD, (Span){0}, 0);
  return ir_add(&bd, op, dt, shape_of(rank, d), (Span){0}, nargs, args);
}

static Value *tensor(Program *p, const char *name, TensorKind kind, DType dt, int rank, const int64_t *d) {
  if (p->ntensors == p->captensors) {
    p->captensors = p->captensors ? 2 * p->captensors : 8;
    p->tensors = xrealloc(p->tensors, (size_t)p->captensors * sizeof *p->tensors);
  }
  Value *v = val(p, kind == TK_PARAM ? OP_PARAM : OP_INPUT, dt, rank, d, 0, NULL);
  v->name = arena_strdup(p->arena, name);
  v->tensor = p->ntensors;
  Tensor *t = &p->tensors[p->ntensors++];
  memset(t, 0, sizeof *t);
  t->name = v->name;
  t->kind = kind;
  t->dtype = dt;
  t->shape = v->shape;
  t->value = v;
  t->init = kind == TK_PARAM ? INIT_ZEROS : INIT_NONE;
  return v;
}

static void output(Program *p, const char *name, Value *v) {
  if (p->noutputs == p->capoutputs) {
    p->capoutputs = p->capoutputs ? 2 * p->capoutputs : 8;
    p->outputs = xrealloc(p->outputs, (size_t)p->capoutputs * sizeof *p->outputs);
  }
  p->outputs[p->noutputs++] = (Output){.name = arena_strdup(p->arena, name), .value = v};
}

static Value *un(Program *p, int fn, Value *a) {
  Value *v = val(p, OP_UNARY, a->dtype, a->shape.rank, a->shape.d, 1, &a);
  v->fn = fn;
  return v;
}

static Value *bin(Program *p, int fn, Value *a, Value *b) {
  Value *args[2] = {a, b};
  Value *v = val(p, OP_BINARY, a->dtype, a->shape.rank, a->shape.d, 2, args);
  v->fn = fn;
  return v;
}

static Value *cnst(Program *p, DType dt, double x, int rank, const int64_t *d) {
  Value *v = val(p, OP_CONST, dt, rank, d, 0, NULL);
  v->fval = x;
  v->ival = (int64_t)x;
  return v;
}

static Value *cast(Program *p, DType dt, Value *a) {
  return val(p, OP_CAST, dt, a->shape.rank, a->shape.d, 1, &a);
}

/* perm as in ops.def; rank of the result given by d */
static Value *bcast(Program *p, Value *a, int rank, const int64_t *d, const int *perm) {
  Value *v = val(p, OP_BROADCAST, a->dtype, rank, d, 1, &a);
  memcpy(v->perm, perm, (size_t)rank * sizeof *perm);
  return v;
}

static Value *transpose(Program *p, Value *a, const int *perm) {
  int64_t d[GSL_MAX_RANK];
  for (int i = 0; i < a->shape.rank; i++)
    d[i] = a->shape.d[perm[i]];
  Value *v = val(p, OP_TRANSPOSE, a->dtype, a->shape.rank, d, 1, &a);
  memcpy(v->perm, perm, (size_t)a->shape.rank * sizeof *perm);
  return v;
}

static Value *slice(Program *p, Value *a, int axis, int64_t start, int64_t n) {
  Shape s = a->shape;
  s.d[axis] = n;
  Value *v = val(p, OP_SLICE, a->dtype, s.rank, s.d, 1, &a);
  v->axis = axis;
  v->start = start;
  return v;
}

static Value *reduce(Program *p, int fn, Value *a, uint32_t rmask) {
  int64_t d[GSL_MAX_RANK];
  int r = 0;
  for (int i = 0; i < a->shape.rank; i++)
    if (!(rmask & (1u << i)))
      d[r++] = a->shape.d[i];
  Value *v = val(p, OP_REDUCE, fn == RF_ARGMAX ? DT_I32 : a->dtype, r, d, 1, &a);
  v->fn = fn;
  v->rmask = rmask;
  return v;
}

static Value *einsum(Program *p, const char *spec, int rank, const int64_t *d, Value *a, Value *b) {
  Value *args[2] = {a, b};
  Value *v = val(p, OP_EINSUM, a->dtype, rank, d, b ? 2 : 1, args);
  char err[128];
  CU_ASSERT_FATAL(ein_parse(spec, b ? 2 : 1, &v->ein, err, sizeof err));
  return v;
}

/* ---- SPMD programs ----------------------------------------------------------- */

static Program *spmd_program(const char *path, int naxes, const char *const *names, const int64_t *sizes) {
  Program *p = ir_new(path);
  p->spmd = true;
  p->mesh.naxes = naxes;
  for (int i = 0; i < naxes; i++) {
    p->mesh.name[i] = names[i];
    p->mesh.size[i] = sizes[i];
  }
  return p;
}

/* Splits dimension dim of v (on its local shape) over mesh axis ax, next
 * after the axes already splitting it: the global extent grows. A param's
 * or input's tensor follows. */
static Value *split(Program *p, Value *v, int dim, int ax) {
  v->sh.axes[dim][v->sh.naxes[dim]++] = (uint8_t)ax;
  v->gshape.d[dim] *= p->mesh.size[ax];
  if (v->op == OP_PARAM || v->op == OP_INPUT) {
    p->tensors[v->tensor].sh = v->sh;
    p->tensors[v->tensor].shape = v->gshape;
  }
  return v;
}

/* A collective or local slice over the mesh axes grp[0..ng), of local
 * result shape d. */
static Value *coll(Program *p, Op op, Value *a, int axis, int axis2, int rank, const int64_t *d, int ng,
                   const uint8_t *grp) {
  Value *v = val(p, op, a->dtype, rank, d, 1, &a);
  v->axis = axis;
  v->axis2 = axis2;
  v->ngroup = ng;
  memcpy(v->group, grp, (size_t)ng);
  return v;
}

static Value *rng(Program *p, int dist, double a, double b, uint32_t stream, int rank, const int64_t *d) {
  Value *v = val(p, OP_RNG, DT_F32, rank, d, 0, NULL);
  v->fn = dist;
  v->fval = a;
  v->fval2 = b;
  v->stream = stream;
  return v;
}

/* ---- files and processes -------------------------------------------------- */

static const char *path(const char *name) {
  static char buf[8][256];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, sizeof buf[0], "%s/%s", tmpdir, name);
  return b;
}

static void write_npy(const char *name, int32_t dtype, int rank, const int64_t *d, const void *data) {
  char err[256];
  int rc = gslrt_npy_write(path(name), dtype, rank, d, data, err, sizeof err);
  if (rc)
    fprintf(stderr, "test_codegen: %s\n", err);
  CU_ASSERT_EQUAL(rc, 0);
}

/* Reads name into a fresh buffer of want elements; NULL (a failure) when it
 * is missing or its size is not want. */
static void *read_npy(const char *name, int64_t want) {
  gslrt_npy h;
  char err[256];
  if (gslrt_npy_read_header(path(name), &h, err, sizeof err)) {
    fprintf(stderr, "test_codegen: %s\n", err);
    CU_FAIL("output file unreadable");
    return NULL;
  }
  int64_t n = 1, off[GSLRT_MAX_RANK + 1] = {0};
  for (int i = 0; i < h.rank; i++)
    n *= h.shape[i];
  CU_ASSERT_EQUAL(n, want);
  if (n != want)
    return NULL;
  void *buf = calloc((size_t)(n ? n : 1), 4);
  if (gslrt_npy_read_tile(path(name), &h, off, h.shape, buf, err, sizeof err)) {
    fprintf(stderr, "test_codegen: %s\n", err);
    CU_FAIL("output file unreadable");
    free(buf);
    return NULL;
  }
  return buf;
}

/* p planned (plan_buffers) and compiled as gslc's driver does it, its
 * diagnostics to diags. */
static bool emit_to(const Program *p, const CodegenOptions *o, FILE *diags) {
  Plan *pl = plan_buffers(p);
  Diag d = {diags, 0, false};
  bool ok = cg_emit(p, pl, o, &d);
  plan_free(pl);
  return ok;
}

static bool emit(const Program *p, const CodegenOptions *o) { return emit_to(p, o, stderr); }

/* Compiles p to an object and links it into exe; true on success. */
static bool build(Program *p, const char *exe, int opt_level) {
  CU_ASSERT_TRUE_FATAL(ir_verify(p, stderr));
  char obj[300], cmd[1200];
  snprintf(obj, sizeof obj, "%s.o", exe);
  CodegenOptions o = {.opt_level = opt_level, .emit = EMIT_OBJECT, .out = obj};
  if (!emit(p, &o)) {
    CU_FAIL("codegen failed");
    return false;
  }
  snprintf(cmd, sizeof cmd, "%s %s -o %s %s/runtime/libgslrt.a %s", GSL_LINKER, obj, exe, TEST_BUILDDIR, GSL_LINK_LIBS);
  int rc = system(cmd);
  CU_ASSERT_EQUAL(rc, 0);
  return rc == 0;
}

/* Runs exe with the given arguments (printf style); its exit status. */
static int run(const char *exe, const char *fmt, ...) {
  char args[2000], cmd[2400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "cd %s && %s --quiet %s 2>%s/stderr.txt", tmpdir, exe, args, tmpdir);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static uint32_t seed = 12345;
static float frand(float lo, float hi) {
  seed = seed * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
}

static void fill(float *x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; i++)
    x[i] = frand(lo, hi);
}

/* Compares n floats with |got - want| <= rel |want| + abs; reports the
 * first few mismatches. */
static void check_f(const char *what, const float *got, const double *want, int64_t n, double rel, double abs) {
  int bad = 0;
  if (!got)
    return;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (!(e <= rel * fabs(want[i]) + abs) && !(isinf(want[i]) && got[i] == want[i]) &&
        !(isnan(want[i]) && isnan(got[i]))) {
      if (bad < 5)
        fprintf(stderr, "\n%s[%ld]: got %.9g want %.9g", what, (long)i, got[i], want[i]);
      bad++;
    }
  }
  CU_ASSERT_EQUAL(bad, 0);
}

static void check_i(const char *what, const int32_t *got, const int32_t *want, int64_t n) {
  int bad = 0;
  if (!got)
    return;
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      if (bad < 5)
        fprintf(stderr, "\n%s[%ld]: got %d want %d", what, (long)i, got[i], want[i]);
      bad++;
    }
  CU_ASSERT_EQUAL(bad, 0);
}

/* Reads output file name (n floats) and compares it with want. */
static void expect_f(const char *name, const double *want, int64_t n, double rel, double abs) {
  float *got = read_npy(name, n);
  check_f(name, got, want, n, rel, abs);
  free(got);
}

static void expect_i(const char *name, const int32_t *want, int64_t n) {
  int32_t *got = read_npy(name, n);
  check_i(name, got, want, n);
  free(got);
}

static char *slurp(const char *file) {
  FILE *f = fopen(file, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  s[fread(s, 1, (size_t)n, f)] = '\0';
  fclose(f);
  return s;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *s = hay; (s = strstr(s, needle)); s += strlen(needle))
    n++;
  return n;
}

/* ---- elementwise: fusion, broadcast, index maps, math, casts, i32 --------------- */

enum { R = 4, C = 37, NZ = 1001 };

/* chain = tanh(x * x + y[j]) * 0.5; the four ops are one loop nest */
static Value *chain(Program *p, Value *x, Value *y) {
  int64_t d[2] = {R, C};
  Value *t = bin(p, BF_MUL, x, x);
  t = bin(p, BF_ADD, t, bcast(p, y, 2, d, (int[]){-1, 0}));
  t = un(p, UF_TANH, t);
  return bin(p, BF_MUL, t, cnst(p, DT_F32, 0.5, 2, d));
}

static void test_fusion_ir(void) {
  Program *p = ir_new("chain.gsl");
  int64_t d[2] = {R, C};
  Value *x = tensor(p, "x", TK_INPUT, DT_F32, 2, d);
  Value *y = tensor(p, "y", TK_INPUT, DT_F32, 1, &d[1]);
  output(p, "out", chain(p, x, y));
  const char *ll = path("chain.ll");
  CodegenOptions o = {.emit = EMIT_LLVM, .out = ll};
  CU_ASSERT_TRUE_FATAL(emit(p, &o));
  char *s = slurp(ll);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  /* at O0 the loop counters are the only phis: one nest of two loops */
  CU_ASSERT_EQUAL(count(s, "phi i64"), 2);
  /* one buffer allocated (the output); the inputs come from the runtime */
  CU_ASSERT_EQUAL(count(s, "call i8* @gslrt_alloc"), 1);
  CU_ASSERT_EQUAL(count(s, "call void @gslrt_declare_tensor"), 2);
  CU_ASSERT_EQUAL(count(s, "call void @gslrt_declare_output"), 1);
  free(s);
  o.opt_level = 2;
  CU_ASSERT_TRUE_FATAL(emit(p, &o));
  s = slurp(ll);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT(strstr(s, "define void @gsl_step") != NULL);
  CU_ASSERT(strstr(s, "<8 x float>") != NULL || strstr(s, "<4 x float>") != NULL || strstr(s, "<16 x float>") != NULL);
  CU_ASSERT_EQUAL(count(s, "call i8* @gslrt_alloc"), 1);
  free(s);
  o.emit = EMIT_ASM;
  o.out = path("chain.s");
  CU_ASSERT_TRUE(emit(p, &o));
  s = slurp(o.out);
  CU_ASSERT(s && strstr(s, "gsl_step") && strstr(s, "main"));
  free(s);
  /* an unwritable output is reported, not a crash */
  FILE *sink = tmpfile();
  o.emit = EMIT_OBJECT;
  o.out = "/nonexistent/dir/chain.o";
  CU_ASSERT_FALSE(emit_to(p, &o, sink));
  o.opt_level = 7;
  CU_ASSERT_FALSE(emit_to(p, &o, sink));
  fclose(sink);
  ir_free(p);
}

static double gelu_ref(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

static void test_elementwise(void) {
  Program *p = ir_new("elementwise.gsl");
  int64_t d[2] = {R, C}, dt[2] = {C, R}, nz = NZ;
  Value *x = tensor(p, "x", TK_INPUT, DT_F32, 2, d);
  Value *y = tensor(p, "y", TK_INPUT, DT_F32, 1, &d[1]);
  Value *xt = tensor(p, "xt", TK_INPUT, DT_F32, 2, dt);
  Value *ia = tensor(p, "ia", TK_INPUT, DT_I32, 2, d);
  Value *ib = tensor(p, "ib", TK_INPUT, DT_I32, 2, d);
  Value *z = tensor(p, "z", TK_INPUT, DT_F32, 1, &nz);
  Value *ze = tensor(p, "ze", TK_INPUT, DT_F32, 1, &nz);
  output(p, "exp", un(p, UF_EXP, ze));
  output(p, "chain", chain(p, x, y));
  /* ts = relu(transpose(xt)[:, 3:13]... as x[i, 3 + j] - slice of broadcast) */
  Value *tr = slice(p, transpose(p, xt, (int[]){1, 0}), 1, 3, 10);
  Value *yb = slice(p, bcast(p, y, 2, d, (int[]){-1, 0}), 1, 5, 10);
  output(p, "ts", un(p, UF_RELU, bin(p, BF_SUB, tr, yb)));
  /* sel = where(x < y, x, 2x); also the comparisons alone */
  Value *yb2 = bcast(p, y, 2, d, (int[]){-1, 0});
  Value *lt = bin(p, BF_LT, x, yb2);
  Value *args[3] = {lt, x, bin(p, BF_MUL, x, cnst(p, DT_F32, 2, 2, d))};
  output(p, "sel", val(p, OP_SELECT, DT_F32, 2, d, 3, args));
  output(p, "ge", bin(p, BF_GE, x, bcast(p, y, 2, d, (int[]){-1, 0})));
  output(p, "ieq", bin(p, BF_EQ, ia, ib));
  output(p, "tocast", cast(p, DT_I32, bin(p, BF_MUL, x, cnst(p, DT_F32, 10, 2, d))));
  output(p, "fromcast", cast(p, DT_F32, ia));
  output(p, "iarith", bin(p, BF_SUB, bin(p, BF_MUL, bin(p, BF_ADD, ia, ib), ib), bin(p, BF_MAX, ia, ib)));
  output(p, "idiv", bin(p, BF_DIV, ia, ib));
  output(p, "tanh", un(p, UF_TANH, z));
  output(p, "gelu", un(p, UF_GELU, z));
  output(p, "sigmoid", un(p, UF_SIGMOID, z));
  output(p, "misc", bin(p, BF_ADD, un(p, UF_SQRT, un(p, UF_ABS, z)),
                        bin(p, BF_POW, un(p, UF_EXP, bin(p, BF_MUL, z, cnst(p, DT_F32, 0.1, 1, &nz))),
                            cnst(p, DT_F32, 1.5, 1, &nz))));
  output(p, "rsqrt", un(p, UF_RSQRT, bin(p, BF_ADD, un(p, UF_LOG, bin(p, BF_ADD, un(p, UF_ABS, z), cnst(p, DT_F32, 2, 1, &nz))),
                                       cnst(p, DT_F32, 0, 1, &nz))));
  char exe[256];
  snprintf(exe, sizeof exe, "%s", path("elementwise"));
  if (!build(p, exe, 2)) {
    ir_free(p);
    return;
  }
  float hx[R * C], hy[C], hxt[C * R], hz[NZ];
  int32_t hia[R * C], hib[R * C];
  fill(hx, R * C, -2, 2);
  fill(hy, C, -1, 1);
  fill(hxt, C * R, -2, 2);
  for (int i = 0; i < R * C; i++) {
    hia[i] = (int32_t)frand(-50, 50);
    hib[i] = (int32_t)frand(-5, 5);
  }
  hia[0] = INT32_MIN;
  hib[0] = -1;
  hib[1] = 0;
  for (int i = 0; i < NZ; i++)
    hz[i] = -12.0f + 24.0f * (float)i / (NZ - 1);
  hz[1] = 1e-4f;
  hz[2] = -3e-3f;
  hz[3] = 3.9e-4f; /* tanh: either side of where it returns x itself */
  hz[4] = -4.1e-4f;
  hz[5] = 7.9f; /* and of the clamp at 7.9053 */
  hz[6] = -7.95f;
  write_npy("x.npy", GSLRT_F32, 2, d, hx);
  write_npy("y.npy", GSLRT_F32, 1, &d[1], hy);
  write_npy("xt.npy", GSLRT_F32, 2, dt, hxt);
  write_npy("ia.npy", GSLRT_I32, 2, d, hia);
  write_npy("ib.npy", GSLRT_I32, 2, d, hib);
  write_npy("z.npy", GSLRT_F32, 1, &nz, hz);
  static float hze[NZ];
  for (int i = 0; i < NZ; i++)
    hze[i] = -110.0f + 205.0f * (float)i / (NZ - 1);
  hze[0] = NAN;
  hze[1] = -INFINITY;
  hze[2] = INFINITY;
  hze[3] = 88.72f;
  hze[4] = 88.73f;
  hze[5] = -87.5f;
  write_npy("ze.npy", GSLRT_F32, 1, &nz, hze);
  int rc = run(exe,
               "--input x=x.npy --input y=y.npy --input xt=xt.npy --input ia=ia.npy --input ib=ib.npy "
               "--input z=z.npy --input ze=ze.npy --output exp=exp.npy --output chain=chain.npy --output ts=ts.npy --output sel=sel.npy "
               "--output ge=ge.npy --output ieq=ieq.npy --output tocast=tocast.npy "
               "--output fromcast=fromcast.npy --output iarith=iarith.npy --output idiv=idiv.npy "
               "--output tanh=tanh.npy --output gelu=gelu.npy --output sigmoid=sigmoid.npy "
               "--output misc=misc.npy --output rsqrt=rsqrt.npy");
  CU_ASSERT_EQUAL_FATAL(rc, 0);

  static double w[R * C], wz[NZ];
  static int32_t wi[R * C];
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++)
      w[i * C + j] = tanh((double)hx[i * C + j] * hx[i * C + j] + hy[j]) * 0.5;
  expect_f("chain.npy", w, R * C, 1e-5, 1e-6);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < 10; j++)
      w[i * 10 + j] = fmax((double)hxt[(3 + j) * R + i] - hy[5 + j], 0);
  expect_f("ts.npy", w, R * 10, 1e-5, 1e-6);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) {
      float a = hx[i * C + j];
      w[i * C + j] = a < hy[j] ? a : 2.0 * a;
    }
  expect_f("sel.npy", w, R * C, 1e-6, 0);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++)
      w[i * C + j] = hx[i * C + j] >= hy[j];
  expect_f("ge.npy", w, R * C, 0, 0);
  for (int i = 0; i < R * C; i++)
    wi[i] = hia[i] == hib[i];
  expect_i("ieq.npy", wi, R * C);
  for (int i = 0; i < R * C; i++)
    wi[i] = (int32_t)(hx[i] * 10.0f);
  expect_i("tocast.npy", wi, R * C);
  for (int i = 0; i < R * C; i++)
    w[i] = hia[i];
  expect_f("fromcast.npy", w, R * C, 0, 0);
  for (int i = 1; i < R * C; i++) {
    int32_t s = hia[i] + hib[i], m = hia[i] > hib[i] ? hia[i] : hib[i];
    wi[i] = s * hib[i] - m;
  }
  wi[0] = (int32_t)((uint32_t)((uint32_t)INT32_MIN + (uint32_t)-1) * (uint32_t)-1 - (uint32_t)-1);
  expect_i("iarith.npy", wi, R * C);
  for (int i = 0; i < R * C; i++)
    wi[i] = hib[i] == 0 ? 0 : hib[i] == -1 ? (int32_t)(0u - (uint32_t)hia[i]) : hia[i] / hib[i];
  expect_i("idiv.npy", wi, R * C);
  for (int i = 0; i < NZ; i++)
    wz[i] = (float)exp(hze[i]);
  expect_f("exp.npy", wz, NZ, 3e-7, 3e-45);
  for (int i = 0; i < NZ; i++)
    wz[i] = tanh(hz[i]);
  expect_f("tanh.npy", wz, NZ, 4e-7, 1e-30); /* the rational form's bound (gsl(7)) */
  float *th = read_npy("tanh.npy", NZ);
  int past_one = 0;
  for (int i = 0; i < NZ; i++)
    past_one += fabsf(th[i]) > 1.0f;
  CU_ASSERT_EQUAL(past_one, 0);
  free(th);
  for (int i = 0; i < NZ; i++)
    wz[i] = gelu_ref(hz[i]);
  expect_f("gelu.npy", wz, NZ, 1e-5, 1e-6);
  for (int i = 0; i < NZ; i++)
    wz[i] = 1 / (1 + exp(-(double)hz[i]));
  expect_f("sigmoid.npy", wz, NZ, 1e-5, 1e-30);
  for (int i = 0; i < NZ; i++)
    wz[i] = sqrt(fabs((double)hz[i])) + pow(exp(0.1 * hz[i]), 1.5);
  expect_f("misc.npy", wz, NZ, 1e-5, 1e-6);
  for (int i = 0; i < NZ; i++)
    wz[i] = 1 / sqrt(log(fabs((double)hz[i]) + 2));
  expect_f("rsqrt.npy", wz, NZ, 1e-5, 1e-6);
  ir_free(p);
}

/* ---- reductions, scans, gather, one_hot, concat, reshape, rng ------------------ */

enum { A0 = 3, A1 = 5, A2 = 7, V = 6, E = 4 };

static void test_structural(void) {
  Program *p = ir_new("structural.gsl");
  int64_t d[3] = {A0, A1, A2}, td[2] = {V, E}, id[2] = {2, 3};
  Value *x = tensor(p, "x", TK_INPUT, DT_F32, 3, d);
  Value *tab = tensor(p, "tab", TK_INPUT, DT_F32, 2, td);
  Value *idx = tensor(p, "idx", TK_INPUT, DT_I32, 2, id);
  Value *sq = bin(p, BF_MUL, x, x);
  output(p, "sum_last", reduce(p, RF_SUM, sq, 4));
  output(p, "sum_mid", reduce(p, RF_SUM, bin(p, BF_ADD, x, cnst(p, DT_F32, 1, 3, d)), 2));
  output(p, "max_outer", reduce(p, RF_MAX, x, 5));
  output(p, "sum_all", reduce(p, RF_SUM, x, 7));
  output(p, "argmax_last", reduce(p, RF_ARGMAX, x, 4));
  output(p, "argmax_mid", reduce(p, RF_ARGMAX, x, 2));
  Value *cs = val(p, OP_CUMSUM, DT_F32, 3, d, 1, &x);
  cs->axis = 1;
  output(p, "cumsum", cs);
  Value *cx = val(p, OP_CUMSUM, DT_F32, 3, d, 1, &x);
  cx->axis = 2;
  cx->exclusive = true;
  output(p, "cumsum_ex", cx);
  Value *ga[2] = {tab, idx};
  int64_t gd[3] = {2, 3, E}, od[3] = {2, 3, V};
  output(p, "gather", val(p, OP_GATHER, DT_F32, 3, gd, 2, ga));
  output(p, "onehot", val(p, OP_ONE_HOT, DT_F32, 3, od, 1, &idx));
  int64_t cd[3] = {A0, 2 * A1, A2};
  Value *ca[2] = {x, bin(p, BF_MUL, x, cnst(p, DT_F32, 2, 3, d))};
  Value *cat = val(p, OP_CONCAT, DT_F32, 3, cd, 2, ca);
  cat->axis = 1;
  output(p, "concat", cat);
  int64_t rd[2] = {A0 * A1, A2};
  output(p, "reshape", val(p, OP_RESHAPE, DT_F32, 2, rd, 1, &x));
  Value *rn = val(p, OP_RNG, DT_F32, 2, rd, 0, NULL);
  rn->fn = RNG_UNIFORM;
  rn->fval = 2;
  rn->fval2 = 3;
  output(p, "rng", rn);
  output(p, "scalar", cnst(p, DT_F32, 2.5, 0, NULL));
  char exe[256];
  snprintf(exe, sizeof exe, "%s", path("structural"));
  if (!build(p, exe, 3)) {
    ir_free(p);
    return;
  }
  enum { N = A0 * A1 * A2 };
  float hx[N], ht[V * E];
  int32_t hi[6] = {0, 5, 2, 2, 1, 4};
  fill(hx, N, -3, 3);
  hx[1 * A1 * A2 + 2 * A2 + 3] = hx[1 * A1 * A2 + 2 * A2 + 5] = 9; /* ties: first wins */
  fill(ht, V * E, -1, 1);
  write_npy("sx.npy", GSLRT_F32, 3, d, hx);
  write_npy("tab.npy", GSLRT_F32, 2, td, ht);
  write_npy("idx.npy", GSLRT_I32, 2, id, hi);
  int rc = run(exe,
               "--input x=sx.npy --input tab=tab.npy --input idx=idx.npy --output sum_last=sl.npy "
               "--output sum_mid=sm.npy --output max_outer=mo.npy --output sum_all=sa.npy "
               "--output argmax_last=al.npy --output argmax_mid=am.npy --output cumsum=cs.npy "
               "--output cumsum_ex=cx.npy --output gather=ga.npy --output onehot=oh.npy "
               "--output concat=cc.npy --output reshape=rs.npy --output rng=rn.npy --output scalar=sc.npy");
  CU_ASSERT_EQUAL_FATAL(rc, 0);
#define X3(i, j, k) ((double)hx[((i) * A1 + (j)) * A2 + (k)])
  static double w[4 * N];
  static int32_t wi[N];
  for (int i = 0; i < A0; i++)
    for (int j = 0; j < A1; j++) {
      double s = 0;
      for (int k = 0; k < A2; k++)
        s += X3(i, j, k) * X3(i, j, k);
      w[i * A1 + j] = s;
    }
  expect_f("sl.npy", w, A0 * A1, 1e-5, 1e-6);
  for (int i = 0; i < A0; i++)
    for (int k = 0; k < A2; k++) {
      double s = 0;
      for (int j = 0; j < A1; j++)
        s += X3(i, j, k) + 1;
      w[i * A2 + k] = s;
    }
  expect_f("sm.npy", w, A0 * A2, 1e-5, 1e-5);
  for (int j = 0; j < A1; j++) {
    double m = -INFINITY;
    for (int i = 0; i < A0; i++)
      for (int k = 0; k < A2; k++)
        m = fmax(m, X3(i, j, k));
    w[j] = m;
  }
  expect_f("mo.npy", w, A1, 0, 0);
  double s = 0;
  for (int i = 0; i < N; i++)
    s += hx[i];
  w[0] = s;
  expect_f("sa.npy", w, 1, 1e-5, 1e-5);
  for (int i = 0; i < A0; i++)
    for (int j = 0; j < A1; j++) {
      int b = 0;
      for (int k = 1; k < A2; k++)
        if (X3(i, j, k) > X3(i, j, b))
          b = k;
      wi[i * A1 + j] = b;
    }
  expect_i("al.npy", wi, A0 * A1);
  for (int i = 0; i < A0; i++)
    for (int k = 0; k < A2; k++) {
      int b = 0;
      for (int j = 1; j < A1; j++)
        if (X3(i, j, k) > X3(i, b, k))
          b = j;
      wi[i * A2 + k] = b;
    }
  expect_i("am.npy", wi, A0 * A2);
  for (int i = 0; i < A0; i++)
    for (int k = 0; k < A2; k++) {
      double c = 0;
      for (int j = 0; j < A1; j++)
        w[(i * A1 + j) * A2 + k] = c += X3(i, j, k);
    }
  expect_f("cs.npy", w, N, 1e-5, 1e-5);
  for (int i = 0; i < A0; i++)
    for (int j = 0; j < A1; j++) {
      double c = 0;
      for (int k = 0; k < A2; k++) {
        w[(i * A1 + j) * A2 + k] = c;
        c += X3(i, j, k);
      }
    }
  expect_f("cx.npy", w, N, 1e-5, 1e-5);
  for (int r = 0; r < 6; r++)
    for (int e = 0; e < E; e++)
      w[r * E + e] = ht[hi[r] * E + e];
  expect_f("ga.npy", w, 6 * E, 0, 0);
  for (int r = 0; r < 6; r++)
    for (int v = 0; v < V; v++)
      w[r * V + v] = hi[r] == v;
  expect_f("oh.npy", w, 6 * V, 0, 0);
  for (int i = 0; i < A0; i++)
    for (int j = 0; j < 2 * A1; j++)
      for (int k = 0; k < A2; k++)
        w[(i * 2 * A1 + j) * A2 + k] = j < A1 ? X3(i, j, k) : 2 * X3(i, j - A1, k);
  expect_f("cc.npy", w, 2 * N, 1e-6, 0);
  for (int i = 0; i < N; i++)
    w[i] = hx[i];
  expect_f("rs.npy", w, N, 0, 0);
  float *rn_got = read_npy("rn.npy", N);
  if (rn_got) {
    int bad = 0;
    for (int i = 0; i < N; i++)
      bad += !(rn_got[i] >= 2 && rn_got[i] < 3);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(rn_got[0] != rn_got[1]);
  }
  free(rn_got);
  w[0] = 2.5;
  expect_f("sc.npy", w, 1, 0, 0);

  /* an index out of range stops the program as the input is read, with a
   * message naming the element (the gather has no source: compiler-made) */
  hi[4] = V;
  write_npy("idx_bad.npy", GSLRT_I32, 2, id, hi);
  rc = run(exe, "--input x=sx.npy --input tab=tab.npy --input idx=idx_bad.npy");
  CU_ASSERT_NOT_EQUAL(rc, 0);
  char *err = slurp(path("stderr.txt"));
  CU_ASSERT(err && strstr(err, "error: --input idx=idx_bad.npy: batch 0 of 1 (training step 1): idx[1, 1] = 6 is "
                               "out of range for the gather %"));
  CU_ASSERT(err && strstr(err, " (made by the compiler), whose table has 6 rows\n"));
  free(err);
  ir_free(p);
#undef X3
}

/* A max whose last reduced dimension is a multiple of 16 runs in 16
 * lanes (cg_ops.c, emit_max_lanes): the same results as one running
 * maximum from -inf, fmax's: NaN ignored (an all-NaN row gives -inf, as
 * gsl(7) says), an all -inf row -inf, the maximum found in any lane and
 * chunk. */
static void test_max_lanes(void) {
  enum { MR = 6, MK = 2, ML = 48 };
  Program *p = ir_new("max_lanes.gsl");
  int64_t d[3] = {MR, MK, ML};
  Value *x = tensor(p, "x", TK_INPUT, DT_F32, 3, d);
  output(p, "last", reduce(p, RF_MAX, x, 4));
  output(p, "both", reduce(p, RF_MAX, x, 6));
  char exe[256];
  snprintf(exe, sizeof exe, "%s", path("max_lanes"));
  if (!build(p, exe, 2)) {
    ir_free(p);
    return;
  }
  static float hx[MR * MK * ML];
  fill(hx, MR * MK * ML, -5, 5);
  float *r1 = &hx[1 * MK * ML], *r2 = &hx[2 * MK * ML], *r3 = &hx[3 * MK * ML], *r4 = &hx[4 * MK * ML];
  r1[0] = r1[17] = r1[ML + 47] = NAN;
  for (int k = 0; k < MK * ML; k++)
    r2[k] = -INFINITY, r4[k] = NAN;
  r3[ML - 1] = 7, r3[ML + 33] = 8; /* the last lane of the last chunk; lane 1 of chunk 2 */
  write_npy("mlx.npy", GSLRT_F32, 3, d, hx);
  int rc = run(exe, "--input x=mlx.npy --output last=ml1.npy --output both=ml2.npy");
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  float *got1 = read_npy("ml1.npy", MR * MK), *got2 = read_npy("ml2.npy", MR);
  int bad = 0;
  for (int i = 0; i < MR; i++) {
    double m2 = -INFINITY;
    for (int j = 0; j < MK; j++) {
      double m1 = -INFINITY;
      for (int k = 0; k < ML; k++)
        m1 = fmax(m1, hx[(i * MK + j) * ML + k]);
      m2 = fmax(m2, m1);
      float g = got1[i * MK + j];
      bad += g != (float)m1;
    }
    bad += got2[i] != (float)m2;
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT(got2[3] == 8 && got2[2] == -INFINITY && got2[4] == -INFINITY);
  free(got1);
  free(got2);
  ir_free(p);
}

/* ---- einsum ---------------------------------------------------------------------- */

/* Reference einsum of two operands (or one, b NULL) by brute force. */
static void einsum_ref(const char *spec, const float *a, const int64_t *ad, const float *b, const int64_t *bd,
                       double *out) {
  char la[16] = "", lb[16] = "", lo[16] = "", all[32] = "";
  const char *comma = strchr(spec, ','), *arrow = strstr(spec, "->");
  memcpy(la, spec, (size_t)((comma ? comma : arrow) - spec));
  if (comma)
    memcpy(lb, comma + 1, (size_t)(arrow - comma - 1));
  strcpy(lo, arrow + 2);
  int64_t ext[128] = {0};
  for (int i = 0; la[i]; i++)
    ext[(int)la[i]] = ad[i];
  for (int i = 0; lb[i]; i++)
    ext[(int)lb[i]] = bd[i];
  strcpy(all, lo);
  for (const char *s = la; *s; s++)
    if (!strchr(all, *s))
      lower_append(all, *s);
  for (const char *s = lb; *s; s++)
    if (!strchr(all, *s))
      lower_append(all, *s);
  int n = (int)strlen(all);
  int64_t no = 1;
  for (int i = 0; lo[i]; i++)
    no *= ext[(int)lo[i]];
  for (int64_t i = 0; i < no; i++)
    out[i] = 0;
  int64_t val[128] = {0}, total = 1;
  for (int i = 0; i < n; i++)
    total *= ext[(int)all[i]];
  for (int64_t t = 0; t < total; t++) {
    int64_t r = t;
    for (int i = n - 1; i >= 0; i--) {
      val[(int)all[i]] = r % ext[(int)all[i]];
      r /= ext[(int)all[i]];
    }
    int64_t ia = 0, ib = 0, io = 0;
    for (int i = 0; la[i]; i++)
      ia = ia * ext[(int)la[i]] + val[(int)la[i]];
    for (int i = 0; lb[i]; i++)
      ib = ib * ext[(int)lb[i]] + val[(int)lb[i]];
    for (int i = 0; lo[i]; i++)
      io = io * ext[(int)lo[i]] + val[(int)lo[i]];
    out[io] += (double)a[ia] * (b ? b[ib] : 1.0f);
  }
}

static void test_einsum(void) {
  Program *p = ir_new("einsum.gsl");
  int64_t ad[2] = {5, 6}, bd[2] = {6, 7}, pd[3] = {2, 3, 4}, qd[3] = {2, 4, 5}, wd[2] = {4, 5}, cd[3] = {4, 3, 6};
  Value *a = tensor(p, "a", TK_INPUT, DT_F32, 2, ad);
  Value *b = tensor(p, "b", TK_INPUT, DT_F32, 2, bd);
  Value *pp = tensor(p, "p", TK_INPUT, DT_F32, 3, pd);
  Value *q = tensor(p, "q", TK_INPUT, DT_F32, 3, qd);
  Value *w = tensor(p, "w", TK_PARAM, DT_F32, 2, wd);
  Value *c = tensor(p, "c", TK_INPUT, DT_F32, 3, cd);
  Value *ia = tensor(p, "ia", TK_INPUT, DT_I32, 2, ad);
  Value *ib = tensor(p, "ib", TK_INPUT, DT_I32, 2, bd);
  p->tensors[w->tensor].init = INIT_ONES;
  output(p, "mm", einsum(p, "ij,jk->ik", 2, (int64_t[]){5, 7}, a, b));
  output(p, "bki", einsum(p, "bij,bjk->bki", 3, (int64_t[]){2, 5, 3}, pp, q));
  output(p, "ikb", einsum(p, "bij,bjk->ikb", 3, (int64_t[]){3, 5, 2}, pp, q));
  Value *w2 = bin(p, BF_MUL, w, cnst(p, DT_F32, 0.5, 2, wd));
  output(p, "gse", einsum(p, "gsm,me->gse", 3, (int64_t[]){2, 3, 5}, pp, w2));
  Value *bt = transpose(p, b, (int[]){1, 0});
  output(p, "mmt", einsum(p, "ij,kj->ik", 2, (int64_t[]){5, 7}, a, bt));
  output(p, "copyin", einsum(p, "jik,kl->ijl", 3, (int64_t[]){3, 4, 7}, c, bin(p, BF_ADD, b, b)));
  output(p, "perm", einsum(p, "bij->jbi", 3, (int64_t[]){4, 2, 3}, pp, NULL));
  Value *ie = einsum(p, "ij,jk->ik", 2, (int64_t[]){5, 7}, ia, ib);
  ie->dtype = DT_I32;
  output(p, "imm", ie);
  output(p, "kperm", einsum(p, "ikl,lkj->ij", 2, (int64_t[]){4, 4}, c, transpose(p, c, (int[]){2, 1, 0})));
  Value *rsum = reduce(p, RF_SUM, b, 2);
  output(p, "outer", einsum(p, "i,k->ik", 2, (int64_t[]){6, 6}, rsum, rsum));
  char exe[256];
  snprintf(exe, sizeof exe, "%s", path("einsum"));
  if (!build(p, exe, 2)) {
    ir_free(p);
    return;
  }
  float ha[30], hb[42], hp[24], hq[40], hc[72];
  int32_t hia[30], hib[42];
  fill(ha, 30, -1, 1);
  fill(hb, 42, -1, 1);
  fill(hp, 24, -1, 1);
  fill(hq, 40, -1, 1);
  fill(hc, 72, -1, 1);
  for (int i = 0; i < 30; i++)
    hia[i] = (int32_t)frand(-9, 9);
  for (int i = 0; i < 42; i++)
    hib[i] = (int32_t)frand(-9, 9);
  write_npy("a.npy", GSLRT_F32, 2, ad, ha);
  write_npy("b.npy", GSLRT_F32, 2, bd, hb);
  write_npy("p.npy", GSLRT_F32, 3, pd, hp);
  write_npy("q.npy", GSLRT_F32, 3, qd, hq);
  write_npy("c.npy", GSLRT_F32, 3, cd, hc);
  write_npy("eia.npy", GSLRT_I32, 2, ad, hia);
  write_npy("eib.npy", GSLRT_I32, 2, bd, hib);
  int rc = run(exe,
               "--input a=a.npy --input b=b.npy --input p=p.npy --input q=q.npy --input c=c.npy "
               "--input ia=eia.npy --input ib=eib.npy --output mm=mm.npy --output bki=bki.npy "
               "--output ikb=ikb.npy --output gse=gse.npy --output mmt=mmt.npy --output copyin=ci.npy "
               "--output perm=perm.npy --output imm=imm.npy --output outer=outer.npy --output kperm=kperm.npy");
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  static double want[256];
  einsum_ref("ij,jk->ik", ha, ad, hb, bd, want);
  expect_f("mm.npy", want, 35, 1e-5, 1e-5);
  expect_f("mmt.npy", want, 35, 1e-5, 1e-5);
  einsum_ref("bij,bjk->bki", hp, pd, hq, qd, want);
  expect_f("bki.npy", want, 30, 1e-5, 1e-5);
  einsum_ref("bij,bjk->ikb", hp, pd, hq, qd, want);
  expect_f("ikb.npy", want, 30, 1e-5, 1e-5);
  float hw[20];
  for (int i = 0; i < 20; i++)
    hw[i] = 0.5f;
  einsum_ref("gsm,me->gse", hp, pd, hw, wd, want);
  expect_f("gse.npy", want, 30, 1e-5, 1e-5);
  float hb2[42];
  for (int i = 0; i < 42; i++)
    hb2[i] = hb[i] + hb[i];
  einsum_ref("jik,kl->ijl", hc, cd, hb2, bd, want);
  expect_f("ci.npy", want, 84, 1e-5, 1e-5);
  einsum_ref("bij->jbi", hp, pd, NULL, NULL, want);
  expect_f("perm.npy", want, 24, 0, 0);
  int32_t wi[35];
  for (int i = 0; i < 5; i++)
    for (int k = 0; k < 7; k++) {
      int32_t s = 0;
      for (int j = 0; j < 6; j++)
        s += hia[i * 6 + j] * hib[j * 7 + k];
      wi[i * 7 + k] = s;
    }
  expect_i("imm.npy", wi, 35);
  double rb[6];
  for (int j = 0; j < 6; j++) {
    rb[j] = 0;
    for (int k = 0; k < 7; k++)
      rb[j] += hb[j * 7 + k];
  }
  for (int i = 0; i < 6; i++)
    for (int k = 0; k < 6; k++)
      want[i * 6 + k] = rb[i] * rb[k];
  expect_f("outer.npy", want, 36, 1e-5, 1e-5);
  float hct[72]; /* c transposed to [l, k, i] */
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 3; k++)
      for (int l = 0; l < 6; l++)
        hct[(l * 3 + k) * 4 + i] = hc[(i * 3 + k) * 6 + l];
  einsum_ref("ikl,lkj->ij", hc, cd, hct, (int64_t[]){6, 3, 4}, want);
  expect_f("kperm.npy", want, 16, 1e-5, 1e-5);
  ir_free(p);
}

/* ---- SPMD ---------------------------------------------------------------------------- */

/* The lines of ll calling callee ("@gslrt_all_gather("), each with every
 * constant array it names (@dims...) replaced by that array's initializer
 * ("[2 x i64] [i64 4, i64 3]"), one per line; the caller frees it. */
static char *calls(const char *ll, const char *callee) {
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  out[0] = '\0';
  for (const char *line = ll, *end; *line; line = end ? end + 1 : line + strlen(line)) {
    end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    const char *c = strstr(line, "call "), *f = c ? strstr(c, callee) : NULL;
    if (!f || f > line + n)
      continue;
    for (size_t i = 0; i < n; i++) {
      char piece[512] = "";
      if (!strncmp(line + i, "@dims", 5)) {
        size_t k = i + 1;
        while (k < n && (line[k] == '.' || line[k] == '_' || (line[k] >= '0' && line[k] <= '9') ||
                         (line[k] >= 'a' && line[k] <= 'z')))
          k++;
        char def[96];
        snprintf(def, sizeof def, "\n%.*s = ", (int)(k - i), line + i);
        const char *d = strstr(ll, def), *init = d ? strstr(d, "constant ") : NULL;
        if (init) {
          init += strlen("constant ");
          const char *e = strchr(init, '\n');
          snprintf(piece, sizeof piece, "%.*s", (int)(e ? e - init : (long)strlen(init)), init);
          char *comma = strstr(piece, ", align");
          if (comma)
            *comma = '\0';
        }
        i = k - 1;
      } else {
        piece[0] = line[i];
        piece[1] = '\0';
      }
      size_t m = strlen(piece);
      if (len + m + 2 > cap) {
        cap = 2 * (len + m + 2);
        out = realloc(out, cap);
      }
      memcpy(out + len, piece, m + 1);
      len += m;
    }
    out[len++] = '\n';
    out[len] = '\0';
  }
  return out;
}

/* How many calls to callee in ll contain every one of the NULL-ended
 * strings (after their constant arrays are spelled out). */
static int calls_with(const char *ll, const char *callee, ...) {
  char *all = calls(ll, callee);
  int n = 0;
  for (char *line = all; *line;) {
    char *end = strchr(line, '\n');
    *end = '\0';
    bool ok = true;
    va_list ap;
    va_start(ap, callee);
    for (const char *w; (w = va_arg(ap, const char *));)
      ok = ok && strstr(line, w);
    va_end(ap);
    n += ok;
    line = end + 1;
  }
  free(all);
  return n;
}

/* The text of function fn's definition in ll (freed by the caller). */
static char *function(const char *ll, const char *fn) {
  char pat[64];
  snprintf(pat, sizeof pat, "define void @%s(", fn);
  const char *b = strstr(ll, pat), *e = b ? strstr(b, "\n}\n") : NULL;
  if (!e)
    return strdup("");
  return strndup(b, (size_t)(e - b));
}

/* Mesh [d = 2, e = 2]: tensors, outputs, groups and collectives reach the
 * runtime with the right constants; a local slice fuses into its user; an
 * all_reduce runs in place on a buffer nothing else reads. */
static void test_spmd_ir(void) {
  static const char *const names[2] = {"d", "e"};
  Program *p = spmd_program("spmd.gsl", 2, names, (int64_t[]){2, 2});
  uint8_t gd[1] = {0}, ge[1] = {1}, ged[2] = {1, 0};
  Value *w = split(p, tensor(p, "w", TK_PARAM, DT_F32, 2, (int64_t[]){4, 3}), 1, 0);
  Value *x = split(p, tensor(p, "x", TK_INPUT, DT_F32, 2, (int64_t[]){4, 4}), 0, 0);
  Value *wg = coll(p, OP_ALL_GATHER, w, 1, 0, 2, (int64_t[]){4, 6}, 1, gd);
  Value *y = split(p, einsum(p, "ij,jk->ik", 2, (int64_t[]){4, 6}, x, wg), 0, 0);
  output(p, "y", y);
  Value *xr = coll(p, OP_ALL_GATHER, x, 0, 0, 2, (int64_t[]){8, 4}, 1, gd);
  Value *ls = split(p, coll(p, OP_LOCAL_SLICE, xr, 1, 0, 2, (int64_t[]){8, 1}, 2, ged), 1, 1);
  split(p, ls, 1, 0);
  Value *z = bin(p, BF_MUL, ls, cnst(p, DT_F32, 2, 2, (int64_t[]){8, 1}));
  z->sh = ls->sh;
  z->gshape = ls->gshape;
  output(p, "z", z);
  Value *rs = split(p, split(p, coll(p, OP_REDUCE_SCATTER, y, 1, 0, 2, (int64_t[]){4, 3}, 1, ge), 0, 0), 1, 1);
  output(p, "rs", rs);
  coll(p, OP_ALL_TO_ALL, y, 0, 1, 2, (int64_t[]){2, 12}, 1, ge);
  Value *s = coll(p, OP_ALL_REDUCE, reduce(p, RF_SUM, y, 2), 0, 0, 1, (int64_t[]){4}, 1, ge);
  output(p, "s", split(p, s, 0, 0));
  Value *xm = coll(p, OP_ALL_REDUCE, x, 0, 0, 2, (int64_t[]){4, 4}, 1, gd);
  xm->fn = RF_MAX;
  output(p, "xm", split(p, xm, 0, 0));
  output(p, "noise", split(p, rng(p, RNG_NORMAL, 1, 0, 3, 2, (int64_t[]){4, 3}), 1, 1));
  const char *ll = path("spmd.ll");
  CodegenOptions o = {.emit = EMIT_LLVM, .out = ll};
  CU_ASSERT_TRUE_FATAL(emit(p, &o));
  char *t = slurp(ll);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  char *setup = function(t, "gsl_setup"), *step = function(t, "gsl_step");

  /* tensors and outputs: global shapes, dim_axes from the shardings */
  const char *dw = "[16 x i32] [i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, "
                   "i32 0, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1]";
  const char *dx = "[16 x i32] [i32 0, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, "
                   "i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1]";
  const char *dz = "[16 x i32] [i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, "
                   "i32 1, i32 0, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1, i32 -1]";
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_declare_tensor(", "[i64 4, i64 6]", dw, NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_declare_tensor(", "[i64 8, i64 4]", dx, NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_declare_output(", "[i64 8, i64 6]", dx, NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_declare_output(", "[i64 8, i64 4]", dz, NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_declare_output(", "[1 x i64] [i64 8]", NULL), 1);

  /* groups: (d), (e, d) and (e), declared in setup; indices read in step only */
  CU_ASSERT_EQUAL(count(t, "call i32 @gslrt_declare_group("), 3);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_declare_group(", "i32 1, ", "[1 x i32] zeroinitializer", NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_declare_group(", "i32 1, ", "[1 x i32] [i32 1]", NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_declare_group(", "i32 2, ", "[2 x i32] [i32 1, i32 0]", NULL), 1);
  CU_ASSERT_EQUAL(count(setup, "@gslrt_declare_group("), 3);
  CU_ASSERT_EQUAL(count(setup, "@gslrt_group_index("), 0);
  CU_ASSERT_EQUAL(count(step, "call i64 @gslrt_group_index("), 2);

  /* collectives: operand shape, dims, dtype, op, count */
  CU_ASSERT_EQUAL(count(t, "call void @gslrt_all_gather("), 2);
  /* all_gather and all_to_all end with the gathered or joined dim's
   * true extent (its tiles may be padded: gsl.7, Uneven dimensions) */
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_all_gather(", "i32 0, i8*", "i32 2, i64* ", "[2 x i64] [i64 4, i64 3]",
                             "i32 1, i64 6)", NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_all_gather(", "[2 x i64] [i64 4, i64 4]", "i32 0, i64 8)", NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_reduce_scatter(", "[2 x i64] [i64 4, i64 6]", "i32 1)", NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_all_to_all(", "[2 x i64] [i64 4, i64 6]", "i32 0, i32 1, i64 12)", NULL), 1);
  CU_ASSERT_EQUAL(count(t, "call void @gslrt_all_reduce("), 2);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_all_reduce(", "i32 0, i32 0, i8*", "i64 4)", NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_all_reduce(", "i32 0, i32 1, i8*", "i64 16)", NULL), 1);

  /* random draws: global shape, a run-time offset, local shape */
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_rng_fill(", "[2 x i64] [i64 4, i64 6]", "[2 x i64] [i64 4, i64 3]", NULL), 1);
  CU_ASSERT_EQUAL(calls_with(t, "@gslrt_rng_fill(", "i64* null", NULL), 0);

  /* buffers: wg, y, xr, z, rs, the all_to_all, the sum (reduced in place),
   * the max (a copy of the input x) and the draw; none for the local slice.
   * They lie in one arena (plan.c, plan_arena.c), allocated once; setup keeps each one's
   * address in a global, the kernels load it through their slots, and the
   * step only calls the kernels (one per value with code), computing no
   * address itself (a call's slots are a constant). */
  CU_ASSERT_EQUAL(count(t, "call i8* @gslrt_alloc"), 1);
  CU_ASSERT_EQUAL(count(setup, "getelementptr inbounds i8, i8* %arena, i64"), 9);
  CU_ASSERT_EQUAL(count(step, "= getelementptr"), 0);
  CU_ASSERT(count(step, "call void @k") >= 9);
  free(setup);
  free(step);
  free(t);
  ir_free(p);
}

/* Mesh [d = 1]: the same kinds of calls run end to end (every group has one
 * member, so collectives and local slices are identities, and split random
 * draws equal unsplit ones). */
static void test_spmd_run(void) {
  static const char *const names[1] = {"d"};
  Program *p = spmd_program("spmd1.gsl", 1, names, (int64_t[]){1});
  uint8_t gd[1] = {0};
  int64_t xd[2] = {4, 6}, wd[2] = {6, 5}, yd[2] = {4, 5}, id = 7;
  Value *x = split(p, tensor(p, "x", TK_INPUT, DT_F32, 2, xd), 0, 0);
  Value *w = split(p, tensor(p, "w", TK_INPUT, DT_F32, 2, wd), 1, 0);
  Value *ix = split(p, tensor(p, "ix", TK_INPUT, DT_I32, 1, &id), 0, 0);
  Value *wg = coll(p, OP_ALL_GATHER, w, 1, 0, 2, wd, 1, gd);
  Value *y = coll(p, OP_ALL_REDUCE, einsum(p, "ij,jk->ik", 2, yd, x, wg), 0, 0, 2, yd, 1, gd);
  output(p, "y", split(p, y, 0, 0));
  Value *ls = split(p, coll(p, OP_LOCAL_SLICE, x, 1, 0, 2, xd, 1, gd), 1, 0);
  Value *z = bin(p, BF_ADD, bin(p, BF_MUL, ls, cnst(p, DT_F32, 2, 2, xd)), x);
  output(p, "z", z);
  output(p, "rs", coll(p, OP_REDUCE_SCATTER, x, 0, 0, 2, xd, 1, gd));
  output(p, "a2a", coll(p, OP_ALL_TO_ALL, x, 0, 1, 2, xd, 1, gd));
  Value *xm = coll(p, OP_ALL_REDUCE, un(p, UF_ABS, x), 0, 0, 2, xd, 1, gd);
  xm->fn = RF_MAX;
  output(p, "xm", xm);
  output(p, "ig", coll(p, OP_ALL_GATHER, ix, 0, 0, 1, &id, 1, gd));
  output(p, "isum", coll(p, OP_ALL_REDUCE, bin(p, BF_MUL, ix, ix), 0, 0, 1, &id, 1, gd));
  output(p, "n1", split(p, rng(p, RNG_NORMAL, 1.5, 0, 9, 2, xd), 0, 0));
  output(p, "n2", rng(p, RNG_NORMAL, 1.5, 0, 9, 2, xd));
  char exe[256];
  snprintf(exe, sizeof exe, "%s", path("spmd1"));
  if (!build(p, exe, 2)) {
    ir_free(p);
    return;
  }
  float hx[24], hw[30];
  int32_t hi[7] = {3, -1, 4, 1, -5, 9, 2};
  fill(hx, 24, -1, 1);
  fill(hw, 30, -1, 1);
  write_npy("sx.npy", GSLRT_F32, 2, xd, hx);
  write_npy("sw.npy", GSLRT_F32, 2, wd, hw);
  write_npy("si.npy", GSLRT_I32, 1, &id, hi);
  int rc = run(exe,
               "--input x=sx.npy --input w=sw.npy --input ix=si.npy --output y=sy.npy --output z=sz.npy "
               "--output rs=srs.npy --output a2a=sa.npy --output xm=sxm.npy --output ig=sig.npy "
               "--output isum=sis.npy --output n1=n1.npy --output n2=n2.npy");
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  double want[30];
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 5; k++) {
      want[i * 5 + k] = 0;
      for (int j = 0; j < 6; j++)
        want[i * 5 + k] += (double)hx[i * 6 + j] * hw[j * 5 + k];
    }
  expect_f("sy.npy", want, 20, 1e-5, 1e-5);
  for (int i = 0; i < 24; i++)
    want[i] = 3.0 * hx[i];
  expect_f("sz.npy", want, 24, 1e-6, 0);
  for (int i = 0; i < 24; i++)
    want[i] = hx[i];
  expect_f("srs.npy", want, 24, 0, 0);
  expect_f("sa.npy", want, 24, 0, 0);
  for (int i = 0; i < 24; i++)
    want[i] = fabs(hx[i]);
  expect_f("sxm.npy", want, 24, 0, 0);
  int32_t wi[7];
  expect_i("sig.npy", hi, 7);
  for (int i = 0; i < 7; i++)
    wi[i] = hi[i] * hi[i];
  expect_i("sis.npy", wi, 7);
  float *n1 = read_npy("n1.npy", 24), *n2 = read_npy("n2.npy", 24);
  if (n1 && n2) {
    double nz = 0;
    for (int i = 0; i < 24; i++) {
      want[i] = n2[i];
      nz += fabs(n2[i]);
    }
    check_f("n1", n1, want, 24, 0, 0);
    CU_ASSERT(nz > 0);
  }
  free(n1);
  free(n2);
  ir_free(p);
}

/* ---- the suite ---------------------------------------------------------------------- */

static int suite_init(void) {
  strcpy(tmpdir, "/tmp/gsl_codegen_XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int suite_clean(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return getenv("GSL_KEEP_TMP") || system(cmd) == 0 ? 0 : -1;
}

void add_codegen_tests(void) {
  CU_pSuite s = tests_suite("codegen");
  s->pInitializeFunc = suite_init;
  s->pCleanupFunc = suite_clean;
  tests_add(s, "fusion_and_emit_kinds", test_fusion_ir);
  tests_add(s, "elementwise", test_elementwise);
  tests_add(s, "structural", test_structural);
  tests_add(s, "max_lanes", test_max_lanes);
  tests_add(s, "einsum", test_einsum);
  tests_add(s, "spmd_ir", test_spmd_ir);
  tests_add(s, "spmd_run", test_spmd_run);
}
