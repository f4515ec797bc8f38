/* ir.c — the global tensor IR: building it, printing it, checking it.
 *
 * A Program is an SSA graph kept as one array of Values in program order
 * (every operand before its users), plus the params and inputs (Tensors) and
 * the outputs that root it. Each Value is one tensor with a dtype, a global
 * shape, a source span and a sharding slot.
 *
 * The text form (--emit-ir) is one line per value:
 *   %7 h: f32[8, 32] = einsum "bi,ij->bj" %3, %5   ; mlp.gsl:12
 * (the comment names the source line that produced the value; for code
 * inlined from an imported module, that module's line)
 * with the sharding in braces once one is known, e.g. {[d, _]} or
 * {[_, _] partial(d)}. ir_verify checks what every pass must keep true:
 * operands before users, arity, dtypes and shapes agreeing with the op. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

static const char *const op_names[] = {
#define X(op, s, n) s,
#include "ops.def"
#undef X
};

static const int op_nargs[] = {
#define X(op, s, n) n,
#include "ops.def"
#undef X
};

static const char *const unary_names[] = {"neg",  "exp",  "log",     "sqrt", "rsqrt",
                                          "tanh", "sigmoid", "relu", "gelu", "abs"};
static const char *const binary_names[] = {"add", "sub", "mul", "div", "pow", "max", "min",
                                           "lt",  "le",  "gt",  "ge",  "eq",  "ne"};
static const char *const reduce_names[] = {"sum", "max", "argmax"};
static const char *const dist_names[] = {"uniform", "normal"};

const char *op_name(Op op) { return op < OP__COUNT ? op_names[op] : "?"; }
const char *unary_fn_name(int fn) { return fn >= 0 && fn <= UF_ABS ? unary_names[fn] : "?"; }
const char *binary_fn_name(int fn) { return fn >= 0 && fn <= BF_NE ? binary_names[fn] : "?"; }
const char *dtype_name(DType d) { return d == DT_I32 ? "i32" : "f32"; }

Program *ir_new(const char *path) {
  Arena *a = arena_new();
  Program *p = arena_alloc(a, sizeof *p);
  p->arena = a;
  p->path = arena_strdup(a, path ? path : "<none>");
  return p;
}

void ir_free(Program *p) {
  if (!p)
    return;
  free(p->values);
  free(p->tensors);
  free(p->outputs);
  arena_free(p->arena);
}

Value *ir_add(Program *p, Op op, DType dt, Shape shape, Span sp, int nargs, Value **args) {
  if (p->nvalues == p->capvalues) {
    p->capvalues = p->capvalues ? 2 * p->capvalues : 64;
    p->values = xrealloc(p->values, (size_t)p->capvalues * sizeof *p->values);
  }
  Value *v = arena_alloc(p->arena, sizeof *v);
  v->id = p->nvalues;
  v->op = op;
  v->dtype = dt;
  v->shape = shape;
  v->gshape = shape;
  v->span = sp;
  v->site = sp;
  v->nargs = nargs;
  if (nargs) {
    v->args = arena_alloc(p->arena, (size_t)nargs * sizeof *v->args);
    memcpy(v->args, args, (size_t)nargs * sizeof *args);
  }
  for (int i = 0; i < GSL_MAX_RANK; i++)
    v->perm[i] = -1;
  p->values[p->nvalues++] = v;
  return v;
}

Shape shape_of(int rank, const int64_t *d) {
  Shape s = {0};
  if (rank < 0 || rank > GSL_MAX_RANK)
    die("rank %d out of range", rank);
  s.rank = rank;
  for (int i = 0; i < rank; i++)
    s.d[i] = d[i];
  return s;
}

int64_t shape_elems(const Shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    n *= s->d[i];
  return n;
}

bool shape_eq(const Shape *a, const Shape *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->d[i] != b->d[i])
      return false;
  return true;
}

const char *shape_str(Arena *a, const Shape *s) {
  char buf[32 * GSL_MAX_RANK + 4];
  size_t n = 0;
  buf[n++] = '[';
  for (int i = 0; i < s->rank; i++)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%" PRId64, i ? ", " : "", s->d[i]);
  buf[n++] = ']';
  buf[n] = '\0';
  return arena_strdup(a, buf);
}

const char *sharding_str(Arena *a, const Program *p, const Value *v) {
  char buf[512];
  size_t n = 0;
  buf[n++] = '[';
  for (int i = 0; i < v->shape.rank; i++) {
    if (i)
      n += (size_t)snprintf(buf + n, sizeof buf - n, ", ");
    int k = v->sh.naxes[i];
    if (k == 0)
      n += (size_t)snprintf(buf + n, sizeof buf - n, "_");
    for (int j = 0; j < k; j++)
      n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", k > 1 && j == 0 ? "(" : (j ? ", " : ""),
                            p->mesh.name[v->sh.axes[i][j]]);
    if (k > 1)
      n += (size_t)snprintf(buf + n, sizeof buf - n, ")");
  }
  n += (size_t)snprintf(buf + n, sizeof buf - n, "]");
  if (v->sh.partial) {
    n += (size_t)snprintf(buf + n, sizeof buf - n, " partial(");
    bool first = true;
    for (int ax = 0; ax < p->mesh.naxes; ax++)
      if (v->sh.partial & (1u << ax)) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", first ? "" : ", ", p->mesh.name[ax]);
        first = false;
      }
    n += (size_t)snprintf(buf + n, sizeof buf - n, ")");
  }
  return arena_strdup(a, buf);
}

void ir_count_uses(Program *p) {
  for (int i = 0; i < p->nvalues; i++)
    p->values[i]->nuses = 0;
  for (int i = 0; i < p->nvalues; i++)
    for (int j = 0; j < p->values[i]->nargs; j++)
      p->values[i]->args[j]->nuses++;
  for (int i = 0; i < p->noutputs; i++)
    p->outputs[i].value->nuses++;
}

void ir_dce(Program *p) {
  bool *live = xcalloc((size_t)p->nvalues, sizeof *live);
  for (int i = 0; i < p->noutputs; i++)
    live[p->outputs[i].value->id] = true;
  for (int i = 0; i < p->ntensors; i++)
    live[p->tensors[i].value->id] = true;
  for (int i = p->nvalues - 1; i >= 0; i--)
    if (live[i])
      for (int j = 0; j < p->values[i]->nargs; j++)
        live[p->values[i]->args[j]->id] = true;
  int n = 0;
  for (int i = 0; i < p->nvalues; i++)
    if (live[i]) {
      p->values[n] = p->values[i];
      p->values[n]->id = n;
      n++;
    }
  p->nvalues = n;
  free(live);
  ir_count_uses(p);
}

static void print_attrs(FILE *f, const Program *p, const Value *v) {
  switch (v->op) {
  case OP_PARAM:
  case OP_INPUT:
    fprintf(f, " %s", p->tensors[v->tensor].name);
    break;
  case OP_CONST:
    if (v->dtype == DT_I32)
      fprintf(f, " %" PRId64, v->ival);
    else
      fprintf(f, " %.9g", v->fval);
    break;
  case OP_RNG:
    fprintf(f, " %s(%.9g, %.9g) stream %u", dist_names[v->fn], v->fval, v->fval2, v->stream);
    break;
  case OP_UNARY:
    fprintf(f, " %s", unary_fn_name(v->fn));
    break;
  case OP_BINARY:
    fprintf(f, " %s", binary_fn_name(v->fn));
    break;
  case OP_BROADCAST:
  case OP_TRANSPOSE:
    fputs(" [", f);
    for (int i = 0; i < v->shape.rank; i++)
      fprintf(f, "%s%d", i ? ", " : "", v->perm[i]);
    fputc(']', f);
    break;
  case OP_SLICE:
    fprintf(f, " axis %d start %" PRId64, v->axis, v->start);
    break;
  case OP_CONCAT:
    fprintf(f, " axis %d", v->axis);
    break;
  case OP_CUMSUM:
    fprintf(f, " axis %d%s", v->axis, v->exclusive ? " exclusive" : "");
    break;
  case OP_EINSUM:
    fprintf(f, " \"%s\"", v->spec);
    break;
  case OP_ALL_REDUCE:
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER:
  case OP_ALL_TO_ALL:
  case OP_LOCAL_SLICE:
  case OP_COLLECTIVE_PERMUTE:
    if (v->op == OP_ALL_REDUCE)
      fprintf(f, " %s", reduce_names[v->fn]);
    else if (v->op == OP_ALL_TO_ALL)
      fprintf(f, " split %d concat %d", v->axis, v->axis2);
    else
      fprintf(f, " dim %d", v->axis);
    fputs(" over (", f);
    for (int i = 0; i < v->ngroup; i++)
      fprintf(f, "%s%s", i ? ", " : "", p->mesh.name[v->group[i]]);
    fputc(')', f);
    if (v->op == OP_COLLECTIVE_PERMUTE) {
      fputs(" to (", f);
      for (int i = 0; i < v->ngroup; i++)
        fprintf(f, "%s%s", i ? ", " : "", p->mesh.name[v->group2[i]]);
      fputc(')', f);
    }
    break;
  case OP_REDUCE:
    fprintf(f, " %s [", reduce_names[v->fn]);
    for (int i = 0, first = 1; i < GSL_MAX_RANK; i++)
      if (v->rmask & (1u << i)) {
        fprintf(f, "%s%d", first ? "" : ", ", i);
        first = 0;
      }
    fputc(']', f);
    break;
  default:
    break;
  }
}

void ir_print(FILE *f, const Program *p) {
  Arena *tmp = arena_new();
  if (p->mesh.naxes) {
    fputs("mesh [", f);
    for (int i = 0; i < p->mesh.naxes; i++)
      fprintf(f, "%s%s = %" PRId64, i ? ", " : "", p->mesh.name[i], p->mesh.size[i]);
    fputs("]\n", f);
  }
  for (int i = 0; i < p->ntensors; i++) {
    const Tensor *t = &p->tensors[i];
    static const char *const inits[] = {"none", "zeros", "ones", "normal", "uniform"};
    fprintf(f, "%s %s: %s%s", t->kind == TK_PARAM ? "param" : "input", t->name, dtype_name(t->dtype),
            shape_str(tmp, &t->shape));
    if (p->mesh.naxes && t->value) {
      Value tv = *t->value;
      tv.sh = t->sh;
      tv.shape = t->shape;
      fprintf(f, " {%s}", sharding_str(tmp, p, &tv));
    }
    fprintf(f, " init %s(%.9g, %.9g)%s\n", inits[t->init], t->a, t->b, t->frozen ? " frozen" : "");
  }
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    fprintf(f, "%%%d", v->id);
    if (v->name)
      fprintf(f, " %s", v->name);
    fprintf(f, ": %s%s", dtype_name(v->dtype), shape_str(tmp, &v->shape));
    if (p->mesh.naxes || v->sh_origin != SO_NONE)
      fprintf(f, " {%s}", sharding_str(tmp, p, v));
    fprintf(f, " = %s", op_name(v->op));
    print_attrs(f, p, v);
    for (int j = 0; j < v->nargs; j++)
      fprintf(f, "%s%%%d", j ? ", " : " ", v->args[j]->id);
    if (v->span.src) {
      const char *base = strrchr(v->span.src->path, '/');
      fprintf(f, "   ; %s:%u", base ? base + 1 : v->span.src->path, v->span.line);
    }
    fputc('\n', f);
  }
  for (int i = 0; i < p->noutputs; i++)
    fprintf(f, "output %s = %%%d\n", p->outputs[i].name, p->outputs[i].value->id);
  arena_free(tmp);
}

/* ---- the verifier --------------------------------------------------------- */

typedef struct Check {
  FILE *err;   /* where to report */
  bool ok;     /* nothing broken so far */
} Check;

static void fail(Check *c, const Value *v, const char *what) {
  c->ok = false;
  if (c->err)
    fprintf(c->err, "ir_verify: %%%d (%s): %s\n", v ? v->id : -1, v ? op_name(v->op) : "-", what);
}

static void verify_value(Check *c, const Program *p, const Value *v, int index) {
  if (v->id != index)
    fail(c, v, "id does not match its position");
  if (v->shape.rank < 0 || v->shape.rank > GSL_MAX_RANK)
    fail(c, v, "rank out of range");
  for (int i = 0; i < v->shape.rank; i++)
    if (v->shape.d[i] <= 0)
      fail(c, v, "non-positive extent");
  int want = op_nargs[v->op];
  if (want >= 0 && v->nargs != want)
    fail(c, v, "wrong number of operands");
  for (int j = 0; j < v->nargs; j++)
    if (!v->args[j] || v->args[j]->id >= index || p->values[v->args[j]->id] != v->args[j]) {
      fail(c, v, "operand not defined before use");
      return;
    }
  const Value *a = v->nargs ? v->args[0] : NULL;
  switch (v->op) {
  case OP_PARAM:
  case OP_INPUT:
    if (v->tensor < 0 || v->tensor >= p->ntensors || p->tensors[v->tensor].value != v)
      fail(c, v, "tensor index does not lead back to the value");
    break;
  case OP_UNARY:
  case OP_CAST:
  case OP_ANNOTATE:
    if (!shape_eq(&a->shape, &v->shape))
      fail(c, v, "operand shape differs from result");
    if (v->op != OP_CAST && a->dtype != v->dtype)
      fail(c, v, "operand dtype differs from result");
    break;
  case OP_BINARY:
  case OP_SELECT:
    for (int j = 0; j < v->nargs; j++)
      if (!shape_eq(&v->args[j]->shape, &v->shape))
        fail(c, v, "operand shape differs from result");
    break;
  case OP_RESHAPE:
    if (shape_elems(&a->shape) != shape_elems(&v->shape))
      fail(c, v, "reshape changes the element count");
    break;
  case OP_TRANSPOSE: {
    unsigned seen = 0;
    if (a->shape.rank != v->shape.rank)
      fail(c, v, "transpose changes the rank");
    for (int i = 0; i < v->shape.rank; i++) {
      int q = v->perm[i];
      if (q < 0 || q >= a->shape.rank || (seen & (1u << q)) || a->shape.d[q] != v->shape.d[i])
        fail(c, v, "bad permutation");
      else
        seen |= 1u << q;
    }
    break;
  }
  case OP_BROADCAST:
    for (int i = 0; i < v->shape.rank; i++) {
      int q = v->perm[i];
      if (q >= a->shape.rank || (q >= 0 && a->shape.d[q] != 1 && a->shape.d[q] != v->shape.d[i]))
        fail(c, v, "bad broadcast dimension map");
    }
    break;
  case OP_SLICE:
    if (v->axis < 0 || v->axis >= a->shape.rank || v->start < 0 ||
        v->start + v->shape.d[v->axis] > a->shape.d[v->axis])
      fail(c, v, "slice out of range");
    break;
  case OP_REDUCE:
    if (v->shape.rank != a->shape.rank - __builtin_popcount(v->rmask))
      fail(c, v, "reduce result rank does not match the reduced dims");
    if ((v->fn == RF_ARGMAX) != (v->dtype == DT_I32 && a->dtype == DT_F32) && v->fn == RF_ARGMAX)
      fail(c, v, "argmax must give i32");
    break;
  case OP_EINSUM:
    if (!v->spec || v->nargs < 1 || v->nargs > 2)
      fail(c, v, "einsum needs a spec and one or two operands");
    break;
  case OP_ALL_REDUCE:
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER:
  case OP_ALL_TO_ALL:
  case OP_LOCAL_SLICE:
  case OP_COLLECTIVE_PERMUTE: {
    int64_t n = 1;
    for (int i = 0; i < v->ngroup; i++)
      n *= v->group[i] < p->mesh.naxes ? p->mesh.size[v->group[i]] : 0;
    Shape want = a->shape;
    if (!p->spmd || n <= 0 || (v->op != OP_ALL_REDUCE && (v->axis < 0 || v->axis >= want.rank))) {
      fail(c, v, "collective outside an SPMD program, or with a bad group or dim");
      break;
    }
    if (v->op == OP_ALL_GATHER)
      want.d[v->axis] *= n;
    else if (v->op == OP_REDUCE_SCATTER || v->op == OP_LOCAL_SLICE || v->op == OP_ALL_TO_ALL) {
      if (want.d[v->axis] % n)
        fail(c, v, "dim not divisible by the group size");
      want.d[v->axis] /= n;
    }
    if (v->op == OP_ALL_TO_ALL) {
      if (v->axis2 < 0 || v->axis2 >= want.rank || v->axis2 == v->axis)
        fail(c, v, "bad all_to_all dims");
      else
        want.d[v->axis2] *= n;
    }
    if (v->op == OP_COLLECTIVE_PERMUTE) {
      uint32_t m1 = 0, m2 = 0;
      for (int i = 0; i < v->ngroup; i++) {
        m1 |= 1u << v->group[i];
        m2 |= 1u << v->group2[i];
      }
      if (m1 != m2)
        fail(c, v, "collective_permute between different axes");
    }
    if (!shape_eq(&want, &v->shape) || a->dtype != v->dtype)
      fail(c, v, "collective result shape or dtype does not follow from its operand");
    break;
  }
  case OP_GATHER:
    if (v->args[1]->dtype != DT_I32)
      fail(c, v, "gather index must be i32");
    break;
  case OP_ONE_HOT:
    if (a->dtype != DT_I32 || v->shape.rank != a->shape.rank + 1)
      fail(c, v, "one_hot takes i32 and adds one dimension");
    break;
  default:
    break;
  }
}

bool ir_verify(const Program *p, FILE *err) {
  Check c = {err, true};
  for (int i = 0; i < p->nvalues; i++)
    verify_value(&c, p, p->values[i], i);
  for (int i = 0; i < p->noutputs; i++)
    if (!p->outputs[i].value || p->outputs[i].value->id >= p->nvalues ||
        p->values[p->outputs[i].value->id] != p->outputs[i].value)
      fail(&c, NULL, "output names a value not in the program");
  return c.ok;
}
