/* codegen.c — the tensor IR to one LLVM module, then to an object file,
 * assembly or textual IR for the host.
 *
 * The module defines gsl_setup (declares the mesh, the groups of mesh axes
 * the code uses, the params and inputs, the outputs, and allocates every
 * other buffer through libgslrt), gsl_step (one step of the program) and
 * main (gslrt_main with a constant program info). Every buffer lives behind
 * a module-private global pointer the runtime fills; gsl_step loads them
 * once on entry.
 *
 * SPMD. The program is normally partition.c's per-device program
 * (Program.spmd): every value holds its local tile, so the code below simply
 * runs on local shapes. Tensors and outputs are declared with their global
 * shapes and shardings, and the runtime allocates and fills the local tiles.
 * Each distinct list of mesh axes that a collective, a local slice or a
 * split random draw names becomes one group, declared in gsl_setup (its id
 * kept in a private global); gsl_step asks once on entry for the device's
 * index in each group whose index the code reads. A local slice is an index
 * map like a slice whose offset is that index times the local extent: a
 * run-time term of struct Aff, so it fuses like any other index map. A
 * random draw passes its tile's offset in the global tensor, so draws are
 * keyed by global element index. Collectives are library calls on
 * materialized buffers; an all_reduce runs in place on its operand's buffer
 * when nothing else reads it, and on a copy (into which the operand's
 * expression is computed) otherwise. A program with spmd false (the global
 * IR) is compiled as one device holding whole tensors.
 *
 * Fusion. A value gets a buffer ("is materialized") when it is a param or
 * input, an output, is read more than once, or is an op that needs a whole
 * buffer (einsum, reduce, cumsum, gather, concat, rng, collectives); operands
 * of einsum, gather, cumsum and of the collectives other than all_reduce are
 * materialized too. Reshape and a materialized annotate are aliases: the
 * same buffer under a new shape (buffers are contiguous, C order). Every
 * other value is inlined into the loop of its one user: its elements are
 * computed from its operands at affine indices, so a chain of elementwise
 * ops, broadcasts, transposes, slices, local slices and one_hots becomes one
 * loop nest whose leaves are loads from materialized buffers at
 * sum_k i_k * stride_k + offset. Index maps compose symbolically (struct Aff:
 * coefficients over the loop counters), so a broadcast gives stride 0, a
 * transpose permutes strides and a slice adds an offset. Constants, and index
 * maps of buffers, are cheap enough to inline into each of several users.
 * Reductions and concatenations compute their operand expression inside
 * their own loops. Each loop nest runs innermost over the last dimension with
 * i64 counters in rotated canonical form, so LoopVectorize fires; sum
 * reductions along the innermost loop carry llvm.loop.vectorize.enable,
 * which lets the vectorizer reassociate them (and nothing else). exp (and so
 * tanh, sigmoid, gelu) is a polynomial that vectorizes, since llvm.exp on
 * vectors becomes one libm call per lane on x86.
 *
 * Einsum becomes a batched gslrt_sgemm when its operands are,
 * in memory, [batch, M, K] or [batch, K, M] (and [batch, K, N] or
 * [batch, N, K]), copying an operand to a canonical temporary first when
 * not, and writing the result straight into the output when its order is
 * [batch, M, N] (or [batch, N, M], by swapping the operands), through a
 * temporary and a permuting copy otherwise. An operand that is a transpose
 * with no buffer of its own is read through: its source buffer with the
 * letters permuted, often saving the copy. Anything else (i32, repeated
 * letters, one operand, a letter summed out of one operand) is a plain loop
 * nest. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "gslc.h"

#define CG_MAXL (2 * GSL_MAX_RANK) /* deepest loop nest (an einsum's letters) */
#define CG_MAXG 16                 /* most groups whose device index the code reads */

/* An index as an affine function of the counters of the open loops and of
 * the device's indices in groups of mesh axes. */
typedef struct Aff {
  int64_t c[CG_MAXL];   /* coefficient of loop counter i (outermost first) */
  int64_t dev[CG_MAXG]; /* coefficient of the device's index in the group of slot j */
  int64_t k;            /* constant term */
} Aff;

/* A list of mesh axes the code names (a collective's, a local slice's, a
 * split dimension of a random draw). */
typedef struct Group {
  int n;                      /* axes in it */
  uint8_t axes[GSL_MAX_AXES]; /* which, major first */
  int slot;                   /* index into CG.gidx when the device's index is read, else -1 */
  LLVMValueRef id;            /* private i32 global: gslrt_declare_group's answer */
} Group;

/* One open loop: 0 <= iv < n. */
typedef struct Loop {
  LLVMValueRef iv;        /* the counter (a phi in body) */
  LLVMBasicBlockRef body; /* first block of the body, the loop header */
  int64_t n;              /* trip count, at least 1 */
} Loop;

/* The state of one cg_emit. */
typedef struct CG {
  const Program *p;       /* what is being compiled */
  LLVMContextRef ctx;     /* private context */
  LLVMModuleRef mod;      /* the module being built */
  LLVMBuilderRef b;       /* the builder for code */
  LLVMBuilderRef ab;      /* the builder for allocas, at the end of gsl_step's entry block */
  LLVMTypeRef t_void, t_i1, t_i32, t_i64, t_f32, t_f64; /* scalar types */
  LLVMTypeRef t_ptr;      /* i8*: buffers, ctx, strings */
  unsigned md_loop;       /* kind id of !llvm.loop */
  int *uses;              /* per value: operand slots and outputs reading it */
  bool *mat;              /* per value: has a buffer (its own or its alias root's) */
  bool *cheap;            /* per value: inlined into each user even when read twice */
  int *root;              /* per value: the value owning its buffer (itself unless an alias) */
  LLVMValueRef *glob;     /* per root value: the private global holding its buffer */
  LLVMValueRef *ptr;      /* per root value: in gsl_step, its buffer as a typed pointer */
  LLVMValueRef *temps;    /* globals of temporaries (einsum), allocated by gsl_setup */
  int64_t *temp_bytes;    /* their sizes */
  int ntemps, captemps;   /* temporaries in use, allocated */
  LLVMValueRef fn;        /* the function being emitted (gsl_step) */
  LLVMValueRef step_fn;   /* gsl_step */
  LLVMValueRef ctx_arg;   /* gsl_step's ctx */
  LLVMValueRef step_arg;  /* gsl_step's step */
  LLVMValueRef iv[CG_MAXL]; /* counters of the open loops, outermost first */
  int niv;                /* open loops */
  Group *groups;          /* the groups of mesh axes the code names */
  int ngroups, capgroups; /* in use, allocated */
  int *vgroup;            /* per value: its group (collectives, local slices), else -1 */
  int *vgroup2;           /* per value: COLLECTIVE_PERMUTE's target-order group, else -1 */
  LLVMValueRef gidx[CG_MAXG]; /* in gsl_step, the device's (i64) index in the group of each slot */
  int nslots;             /* slots in use */
} CG;

static Aff aff_unit(int loop);
static void einsum(CG *g, const Value *v);
static bool einsum_check(const Value *v);

/* ---- types, constants, calls ------------------------------------------- */

static LLVMTypeRef elem_type(CG *g, DType dt) { return dt == DT_I32 ? g->t_i32 : g->t_f32; }

static LLVMValueRef ci64(CG *g, int64_t v) { return LLVMConstInt(g->t_i64, (unsigned long long)v, 1); }
static LLVMValueRef ci32(CG *g, int64_t v) { return LLVMConstInt(g->t_i32, (unsigned long long)v, 1); }
static LLVMValueRef cf32(CG *g, double v) { return LLVMConstReal(g->t_f32, v); }

/* A declared function of module g->mod, added on first use. */
static LLVMValueRef declare_fn(CG *g, const char *name, LLVMTypeRef ft) {
  LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
  return f ? f : LLVMAddFunction(g->mod, name, ft);
}

static LLVMValueRef call_fn(CG *g, const char *name, LLVMTypeRef ret, int n, LLVMValueRef *args) {
  LLVMTypeRef pt[16];
  for (int i = 0; i < n; i++)
    pt[i] = LLVMTypeOf(args[i]);
  LLVMTypeRef ft = LLVMFunctionType(ret, pt, (unsigned)n, 0);
  return LLVMBuildCall2(g->b, ft, declare_fn(g, name, ft), args, (unsigned)n, "");
}

static LLVMValueRef call1(CG *g, const char *name, LLVMValueRef x) {
  return call_fn(g, name, LLVMTypeOf(x), 1, &x);
}

static LLVMValueRef call2(CG *g, const char *name, LLVMValueRef x, LLVMValueRef y) {
  LLVMValueRef a[2] = {x, y};
  return call_fn(g, name, LLVMTypeOf(x), 2, a);
}

/* A private constant global holding s, as an i8 pointer. */
static LLVMValueRef cstr(CG *g, const char *s) {
  size_t n = strlen(s);
  LLVMValueRef init = LLVMConstStringInContext(g->ctx, s, (unsigned)n, 0);
  LLVMValueRef gv = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "str");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(gv, LLVMGlobalUnnamedAddr);
  return LLVMConstBitCast(gv, g->t_ptr);
}

/* A private constant array of n integers of type t (at least one element),
 * as a pointer to its first element. */
static LLVMValueRef const_array(CG *g, LLVMTypeRef t, int n, const int64_t *v) {
  LLVMValueRef el[GSL_MAX_RANK * GSL_MAX_AXES + 1];
  int m = n > 0 ? n : 1;
  for (int i = 0; i < m; i++)
    el[i] = LLVMConstInt(t, (unsigned long long)(i < n ? v[i] : 0), 1);
  LLVMValueRef init = LLVMConstArray(t, el, (unsigned)m);
  LLVMValueRef gv = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "dims");
  LLVMSetInitializer(gv, init);
  LLVMSetGlobalConstant(gv, 1);
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(gv, LLVMGlobalUnnamedAddr);
  return LLVMConstBitCast(gv, LLVMPointerType(t, 0));
}

static LLVMValueRef shape_array(CG *g, const Shape *s) { return const_array(g, g->t_i64, s->rank, s->d); }

/* dim_axes for declare_*: per dimension the mesh axes of sh, padded with -1. */
static LLVMValueRef dim_axes_array(CG *g, int rank, const Sharding *sh) {
  int64_t v[GSL_MAX_RANK * GSL_MAX_AXES];
  for (int i = 0; i < rank; i++)
    for (int j = 0; j < GSL_MAX_AXES; j++)
      v[i * GSL_MAX_AXES + j] = sh && j < sh->naxes[i] ? sh->axes[i][j] : -1;
  return const_array(g, g->t_i32, rank * GSL_MAX_AXES, v);
}

/* ---- loops --------------------------------------------------------------- */

static LLVMValueRef loop_open(CG *g, Loop *l, int64_t n) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  l->n = n;
  l->body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "loop");
  LLVMBuildBr(g->b, l->body);
  LLVMPositionBuilderAtEnd(g->b, l->body);
  l->iv = LLVMBuildPhi(g->b, g->t_i64, "i");
  LLVMValueRef zero = ci64(g, 0);
  LLVMAddIncoming(l->iv, &zero, &pre, 1);
  if (g->niv >= CG_MAXL)
    die("loop nest too deep");
  g->iv[g->niv++] = l->iv;
  return l->iv;
}

/* Marks the loop ending in branch br as one whose floating-point reduction
 * the vectorizer may reassociate (llvm.loop.vectorize.enable). */
static void allow_reorder(CG *g, LLVMValueRef br) {
  LLVMMetadataRef en[2] = {LLVMMDStringInContext2(g->ctx, "llvm.loop.vectorize.enable", 26),
                           LLVMValueAsMetadata(LLVMConstInt(g->t_i1, 1, 0))};
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(g->ctx, NULL, 0);
  LLVMMetadataRef ops[2] = {tmp, LLVMMDNodeInContext2(g->ctx, en, 2)};
  LLVMMetadataRef id = LLVMMDNodeInContext2(g->ctx, ops, 2);
  LLVMMetadataReplaceAllUsesWith(tmp, id);
  LLVMSetMetadata(br, g->md_loop, LLVMMetadataAsValue(g->ctx, id));
}

static void loop_close(CG *g, Loop *l, bool reorder) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMValueRef next = LLVMBuildNSWAdd(g->b, l->iv, ci64(g, 1), "i.next");
  LLVMValueRef more = LLVMBuildICmp(g->b, LLVMIntSLT, next, ci64(g, l->n), "");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "done");
  LLVMValueRef br = LLVMBuildCondBr(g->b, more, l->body, exit);
  if (reorder)
    allow_reorder(g, br);
  LLVMAddIncoming(l->iv, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(g->b, exit);
  g->niv--;
}

static void nest_open(CG *g, Loop *l, int n, const int64_t *dims, Aff *idx) {
  for (int d = 0; d < n; d++) {
    loop_open(g, &l[d], dims[d]);
    idx[d] = aff_unit(g->niv - 1);
  }
}

static void nest_close(CG *g, Loop *l, int n) {
  for (int d = n - 1; d >= 0; d--)
    loop_close(g, &l[d], false);
}

static LLVMValueRef new_acc(CG *g, LLVMTypeRef t) { return LLVMBuildAlloca(g->ab, t, "acc"); }

/* ---- affine indices ------------------------------------------------------ */

static Aff aff_const(int64_t k) {
  Aff a;
  memset(&a, 0, sizeof a);
  a.k = k;
  return a;
}

static Aff aff_unit(int loop) {
  Aff a = aff_const(0);
  a.c[loop] = 1;
  return a;
}

/* a + s * b */
static Aff aff_madd(Aff a, int64_t s, const Aff *b) {
  for (int i = 0; i < CG_MAXL; i++)
    a.c[i] += s * b->c[i];
  for (int j = 0; j < CG_MAXG; j++)
    a.dev[j] += s * b->dev[j];
  a.k += s * b->k;
  return a;
}

static LLVMValueRef aff_value(CG *g, const Aff *a) {
  LLVMValueRef v = NULL;
  for (int i = 0; i < g->niv + g->nslots; i++) {
    int64_t c = i < g->niv ? a->c[i] : a->dev[i - g->niv];
    LLVMValueRef x = i < g->niv ? g->iv[i] : g->gidx[i - g->niv];
    if (!c)
      continue;
    LLVMValueRef t = c == 1 ? x : LLVMBuildNSWMul(g->b, x, ci64(g, c), "");
    v = v ? LLVMBuildNSWAdd(g->b, v, t, "") : t;
  }
  if (!v)
    return ci64(g, a->k);
  return a->k ? LLVMBuildNSWAdd(g->b, v, ci64(g, a->k), "") : v;
}

static void strides_of(const Shape *s, int64_t *st) {
  int64_t m = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    st[d] = m;
    m *= s->d[d];
  }
}

/* The linear (C order) offset of idx in a buffer of shape s. */
static Aff linear_of(const Shape *s, const Aff *idx) {
  int64_t st[GSL_MAX_RANK];
  strides_of(s, st);
  Aff lin = aff_const(0);
  for (int d = 0; d < s->rank; d++)
    lin = aff_madd(lin, st[d], &idx[d]);
  return lin;
}

/* ---- buffers ------------------------------------------------------------- */

static LLVMValueRef ptr_at(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin) {
  return LLVMBuildInBoundsGEP2(g->b, elem_type(g, dt), base, &lin, 1, "");
}

static LLVMValueRef load_lin(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin) {
  return LLVMBuildLoad2(g->b, elem_type(g, dt), ptr_at(g, base, dt, lin), "");
}

static void store_lin(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin, LLVMValueRef x) {
  LLVMBuildStore(g->b, x, ptr_at(g, base, dt, lin));
}

static LLVMValueRef buffer_of(CG *g, const Value *v) {
  LLVMValueRef p = g->ptr[g->root[v->id]];
  if (!p)
    die("value %%%d has no buffer", v->id);
  return p;
}

/* A temporary of n elements of type dt: a private global pointer that
 * gsl_setup fills with gslrt_alloc; loaded where it is used. */
static LLVMValueRef new_temp(CG *g, DType dt, int64_t n) {
  if (g->ntemps == g->captemps) {
    g->captemps = g->captemps ? 2 * g->captemps : 8;
    g->temps = xrealloc(g->temps, (size_t)g->captemps * sizeof *g->temps);
    g->temp_bytes = xrealloc(g->temp_bytes, (size_t)g->captemps * sizeof *g->temp_bytes);
  }
  LLVMValueRef gv = LLVMAddGlobal(g->mod, g->t_ptr, "tmp");
  LLVMSetInitializer(gv, LLVMConstNull(g->t_ptr));
  LLVMSetLinkage(gv, LLVMPrivateLinkage);
  g->temps[g->ntemps] = gv;
  g->temp_bytes[g->ntemps++] = 4 * (n > 0 ? n : 1);
  LLVMValueRef raw = LLVMBuildLoad2(g->b, g->t_ptr, gv, "tmp");
  return LLVMBuildBitCast(g->b, raw, LLVMPointerType(elem_type(g, dt), 0), "");
}

/* ---- which values get buffers --------------------------------------------- */

static bool is_index_map(Op op) { return ir_op(op)->flags & OF_INDEX_MAP; }
static bool is_collective(Op op) { return ir_op(op)->cls == OC_COLLECTIVE; }
static bool needs_buffer(Op op) { return ir_op(op)->flags & OF_BUFFER; }

/* Decides mat[] (has a buffer), cheap[] (inlined into each of several
 * users) and root[] (the value whose buffer an alias shares). */
static void plan_buffers(CG *g) {
  const Program *p = g->p;
  int n = p->nvalues;
  bool *output = xcalloc((size_t)n, sizeof *output);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < p->values[i]->nargs; j++)
      g->uses[p->values[i]->args[j]->id]++;
  for (int i = 0; i < p->noutputs; i++) {
    g->uses[p->outputs[i].value->id]++;
    output[p->outputs[i].value->id] = true;
  }
  for (int i = 0; i < n; i++) {
    const Value *v = p->values[i];
    const Value *a = v->nargs ? v->args[0] : NULL;
    g->cheap[i] = !output[i] && (v->op == OP_CONST || (is_index_map(v->op) && (g->mat[a->id] || g->cheap[a->id])));
    g->mat[i] = needs_buffer(v->op) || output[i] || (g->uses[i] > 1 && !g->cheap[i]);
  }
  for (int i = n - 1; i >= 0; i--) {
    const Value *v = p->values[i];
    if (!g->mat[i] && g->uses[i] == 0)
      continue;
    switch (v->op) {
    case OP_EINSUM:
      for (int j = 0; j < v->nargs; j++) {
        const Value *a = v->args[j];
        if (a->op == OP_TRANSPOSE && !g->mat[a->id] && g->uses[a->id] == 1)
          a = a->args[0];
        g->mat[a->id] = true;
      }
      break;
    case OP_GATHER:
      g->mat[v->args[0]->id] = g->mat[v->args[1]->id] = true;
      break;
    case OP_CUMSUM:
    case OP_RESHAPE:
    case OP_ALL_GATHER:
    case OP_REDUCE_SCATTER:
    case OP_ALL_TO_ALL:
    case OP_COLLECTIVE_PERMUTE:
      g->mat[v->args[0]->id] = true;
      break;
    case OP_ANNOTATE:
      if (g->mat[i])
        g->mat[v->args[0]->id] = true;
      break;
    default:
      break;
    }
  }
  for (int i = 0; i < n; i++) {
    const Value *v = p->values[i];
    bool alias = g->mat[i] && (v->op == OP_RESHAPE || v->op == OP_ANNOTATE);
    if (v->op == OP_ALL_REDUCE) {
      /* in place on a buffer of the operand's own that nothing else reads */
      const Value *a = v->args[0];
      alias = g->mat[a->id] && g->root[a->id] == a->id && g->uses[a->id] == 1 && a->op != OP_PARAM &&
              a->op != OP_INPUT;
    }
    g->root[i] = alias ? g->root[v->args[0]->id] : i;
  }
  free(output);
}

/* ---- groups of mesh axes ---------------------------------------------------- */

/* Whether dimension d of random draw v is split over the mesh. */
static bool rng_split(const Program *p, const Value *v, int d) { return p->spmd && v->sh.naxes[d] > 0; }

/* The group of axes[0..n), added on first sight; when index is set, the
 * device's index in it gets a slot (false, after reporting, when there is
 * no slot left). */
static int find_group(CG *g, int n, const uint8_t *axes, bool index, bool *ok) {
  int k = 0;
  while (k < g->ngroups && !(g->groups[k].n == n && !memcmp(g->groups[k].axes, axes, (size_t)n)))
    k++;
  if (k == g->ngroups) {
    if (g->ngroups == g->capgroups) {
      g->capgroups = g->capgroups ? 2 * g->capgroups : 8;
      g->groups = xrealloc(g->groups, (size_t)g->capgroups * sizeof *g->groups);
    }
    Group *gr = &g->groups[g->ngroups++];
    memset(gr, 0, sizeof *gr);
    gr->n = n;
    memcpy(gr->axes, axes, (size_t)n);
    gr->slot = -1;
  }
  if (index && g->groups[k].slot < 0) {
    if (g->nslots == CG_MAXG) {
      if (*ok)
        diag_fatal("the program reads the device's index in more than %d groups of mesh axes", CG_MAXG);
      *ok = false;
    } else {
      g->groups[k].slot = g->nslots++;
    }
  }
  return k;
}

/* Every group the code names, in program order; false after reporting. */
static bool collect_groups(CG *g) {
  const Program *p = g->p;
  bool ok = true;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    g->vgroup[i] = -1;
    if (is_collective(v->op) || v->op == OP_LOCAL_SLICE)
      g->vgroup[i] = find_group(g, v->ngroup, v->group, v->op == OP_LOCAL_SLICE, &ok);
    g->vgroup2[i] = v->op == OP_COLLECTIVE_PERMUTE ? find_group(g, v->ngroup, v->group2, false, &ok) : -1;
    if (v->op == OP_RNG)
      for (int d = 0; d < v->shape.rank; d++)
        if (rng_split(p, v, d))
          find_group(g, v->sh.naxes[d], v->sh.axes[d], true, &ok);
  }
  return ok;
}

/* In gsl_step, the device's index in the group of axes[0..n) (one with a slot). */
static LLVMValueRef group_index(CG *g, int n, const uint8_t *axes) {
  for (int k = 0; k < g->ngroups; k++)
    if (g->groups[k].n == n && !memcmp(g->groups[k].axes, axes, (size_t)n) && g->groups[k].slot >= 0)
      return g->gidx[g->groups[k].slot];
  die("the index in a group of %d mesh axes was not collected", n);
}

/* ---- elementwise expressions --------------------------------------------- */

static LLVMValueRef convert(CG *g, LLVMValueRef x, DType from, DType to) {
  if (from == to)
    return x;
  if (to == DT_F32)
    return LLVMBuildSIToFP(g->b, x, g->t_f32, "");
  /* truncation toward zero, saturating, NaN to 0: never poison */
  LLVMValueRef a[1] = {x};
  return call_fn(g, "llvm.fptosi.sat.i32.f32", g->t_i32, 1, a);
}

static LLVMValueRef bool_to(CG *g, LLVMValueRef c, DType dt) {
  return dt == DT_I32 ? LLVMBuildZExt(g->b, c, g->t_i32, "") : LLVMBuildUIToFP(g->b, c, g->t_f32, "");
}

/* exp in f32 that vectorizes (llvm.exp on vectors becomes one libm call
 * per lane on x86): Cephes' expf. n = round(x log2 e), r = x - n ln 2 in two
 * parts, exp(r) by a degree-7 polynomial, times 2^n built from exponent bits
 * as 2^(n/2) 2^(n - n/2) so results near overflow and subnormal ones are
 * right. x is clamped to [-104, 89] first (beyond, the result is 0 or inf
 * anyway); NaN passes through. About 1 ulp. */
static LLVMValueRef exp_f32(CG *g, LLVMValueRef x) {
  static const double p[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                             4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  LLVMBuilderRef b = g->b;
  LLVMValueRef xc = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, cf32(g, -104.0), ""), x, cf32(g, -104.0), "");
  xc = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, xc, cf32(g, 89.0), ""), xc, cf32(g, 89.0), "");
  LLVMValueRef fx = call1(g, "llvm.floor.f32",
                          LLVMBuildFAdd(b, LLVMBuildFMul(b, xc, cf32(g, 1.44269504088896341), ""), cf32(g, 0.5), ""));
  LLVMValueRef r = LLVMBuildFSub(b, xc, LLVMBuildFMul(b, fx, cf32(g, 0.693359375), ""), "");
  r = LLVMBuildFSub(b, r, LLVMBuildFMul(b, fx, cf32(g, -2.12194440e-4), ""), "");
  LLVMValueRef y = cf32(g, p[0]);
  for (size_t i = 1; i < sizeof p / sizeof *p; i++)
    y = LLVMBuildFAdd(b, LLVMBuildFMul(b, y, r, ""), cf32(g, p[i]), "");
  y = LLVMBuildFMul(b, y, LLVMBuildFMul(b, r, r, ""), "");
  y = LLVMBuildFAdd(b, LLVMBuildFAdd(b, y, r, ""), cf32(g, 1.0), "");
  LLVMValueRef n = LLVMBuildFPToSI(b, fx, g->t_i32, "");
  LLVMValueRef n1 = LLVMBuildAShr(b, n, ci32(g, 1), "");
  LLVMValueRef n2 = LLVMBuildSub(b, n, n1, "");
  LLVMValueRef s1 = LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildAdd(b, n1, ci32(g, 127), ""), ci32(g, 23), ""), g->t_f32, "");
  LLVMValueRef s2 = LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildAdd(b, n2, ci32(g, 127), ""), ci32(g, 23), ""), g->t_f32, "");
  y = LLVMBuildFMul(b, LLVMBuildFMul(b, y, s1, ""), s2, "");
  return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, x, x, ""), x, y, "");
}

/* tanh in f32: an odd Taylor polynomial below 0.4, above it
 * sign(x) (1 - 2 / (exp(2|x|) + 1)) with |x| clamped to 9 (tanh is 1 in f32
 * there); both sides are computed and selected, so it vectorizes. */
static LLVMValueRef tanh_f32(CG *g, LLVMValueRef x) {
  static const double c[] = {21844.0 / 6081075.0, -1382.0 / 155925.0, 62.0 / 2835.0,
                             -17.0 / 315.0,       2.0 / 15.0,           -1.0 / 3.0, 1.0};
  LLVMBuilderRef b = g->b;
  LLVMValueRef ax = call1(g, "llvm.fabs.f32", x);
  LLVMValueRef x2 = LLVMBuildFMul(b, x, x, "");
  LLVMValueRef poly = cf32(g, c[0]);
  for (size_t i = 1; i < sizeof c / sizeof *c; i++)
    poly = LLVMBuildFAdd(b, LLVMBuildFMul(b, poly, x2, ""), cf32(g, c[i]), "");
  LLVMValueRef small = LLVMBuildFMul(b, poly, x, "");
  LLVMValueRef big_ax = LLVMBuildFCmp(b, LLVMRealOGT, ax, cf32(g, 9.0), "");
  LLVMValueRef cl = LLVMBuildSelect(b, big_ax, cf32(g, 9.0), ax, "");
  LLVMValueRef e = exp_f32(g, LLVMBuildFMul(b, cl, cf32(g, 2.0), ""));
  LLVMValueRef t = LLVMBuildFSub(
      b, cf32(g, 1.0), LLVMBuildFDiv(b, cf32(g, 2.0), LLVMBuildFAdd(b, e, cf32(g, 1.0), ""), ""), "");
  LLVMValueRef big = call2(g, "llvm.copysign.f32", t, x);
  LLVMValueRef is_small = LLVMBuildFCmp(b, LLVMRealOLT, ax, cf32(g, 0.4), "");
  return LLVMBuildSelect(b, is_small, small, big, "");
}

/* 1 / (1 + exp(-x)) */
static LLVMValueRef sigmoid_f32(CG *g, LLVMValueRef x) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef e = exp_f32(g, LLVMBuildFNeg(b, x, ""));
  return LLVMBuildFDiv(b, cf32(g, 1.0), LLVMBuildFAdd(b, cf32(g, 1.0), e, ""), "");
}

static LLVMValueRef unary_f32(CG *g, int fn, LLVMValueRef x) {
  LLVMBuilderRef b = g->b;
  switch (fn) {
  case UF_NEG: return LLVMBuildFNeg(b, x, "");
  case UF_EXP: return exp_f32(g, x);
  case UF_LOG: return call1(g, "llvm.log.f32", x);
  case UF_SQRT: return call1(g, "llvm.sqrt.f32", x);
  case UF_RSQRT: return LLVMBuildFDiv(b, cf32(g, 1.0), call1(g, "llvm.sqrt.f32", x), "");
  case UF_TANH: return tanh_f32(g, x);
  case UF_SIGMOID: return sigmoid_f32(g, x);
  case UF_RELU:
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, cf32(g, 0.0), ""), x, cf32(g, 0.0), "");
  case UF_GELU: {
    /* 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
     * the tanh approximation without its cancellation for negative x */
    LLVMValueRef x3 = LLVMBuildFMul(b, LLVMBuildFMul(b, x, x, ""), x, "");
    LLVMValueRef in = LLVMBuildFAdd(b, x, LLVMBuildFMul(b, x3, cf32(g, 0.044715), ""), "");
    LLVMValueRef u2 = LLVMBuildFMul(b, in, cf32(g, 2.0 * 0.79788456080286535588 /* sqrt(2 / pi) */), "");
    return LLVMBuildFMul(b, x, sigmoid_f32(g, u2), "");
  }
  case UF_ABS: return call1(g, "llvm.fabs.f32", x);
  default: die("unknown unary function %d", fn);
  }
}

static LLVMValueRef unary(CG *g, int fn, LLVMValueRef x, DType dt) {
  LLVMBuilderRef b = g->b;
  if (dt == DT_F32)
    return unary_f32(g, fn, x);
  switch (fn) {
  case UF_NEG: return LLVMBuildSub(b, ci32(g, 0), x, "");
  case UF_ABS: {
    LLVMValueRef neg = LLVMBuildICmp(b, LLVMIntSLT, x, ci32(g, 0), "");
    return LLVMBuildSelect(b, neg, LLVMBuildSub(b, ci32(g, 0), x, ""), x, "");
  }
  case UF_RELU:
    return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, x, ci32(g, 0), ""), x, ci32(g, 0), "");
  default:
    return convert(g, unary_f32(g, fn, convert(g, x, DT_I32, DT_F32)), DT_F32, DT_I32);
  }
}

/* Integer division truncating toward zero; x / 0 is 0 and INT_MIN / -1
 * wraps, so neither traps. */
static LLVMValueRef sdiv_safe(CG *g, LLVMValueRef x, LLVMValueRef y) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef zero = LLVMBuildICmp(b, LLVMIntEQ, y, ci32(g, 0), "");
  LLVMValueRef m1 = LLVMBuildICmp(b, LLVMIntEQ, y, ci32(g, -1), "");
  LLVMValueRef d = LLVMBuildSelect(b, LLVMBuildOr(b, zero, m1, ""), ci32(g, 1), y, "");
  LLVMValueRef q = LLVMBuildSDiv(b, x, d, "");
  q = LLVMBuildSelect(b, m1, LLVMBuildSub(b, ci32(g, 0), x, ""), q, "");
  return LLVMBuildSelect(b, zero, ci32(g, 0), q, "");
}

static LLVMValueRef binary(CG *g, int fn, LLVMValueRef x, LLVMValueRef y, DType in, DType out) {
  static const LLVMRealPredicate fcmp[] = {LLVMRealOLT, LLVMRealOLE, LLVMRealOGT,
                                           LLVMRealOGE, LLVMRealOEQ, LLVMRealUNE};
  static const LLVMIntPredicate icmp[] = {LLVMIntSLT, LLVMIntSLE, LLVMIntSGT,
                                          LLVMIntSGE, LLVMIntEQ,  LLVMIntNE};
  LLVMBuilderRef b = g->b;
  if (fn >= BF_LT) {
    LLVMValueRef c = in == DT_F32 ? LLVMBuildFCmp(b, fcmp[fn - BF_LT], x, y, "")
                                  : LLVMBuildICmp(b, icmp[fn - BF_LT], x, y, "");
    return bool_to(g, c, out);
  }
  x = convert(g, x, in, out);
  y = convert(g, y, in, out);
  if (out == DT_F32) {
    switch (fn) {
    case BF_ADD: return LLVMBuildFAdd(b, x, y, "");
    case BF_SUB: return LLVMBuildFSub(b, x, y, "");
    case BF_MUL: return LLVMBuildFMul(b, x, y, "");
    case BF_DIV: return LLVMBuildFDiv(b, x, y, "");
    case BF_POW: return call2(g, "llvm.pow.f32", x, y);
    case BF_MAX: return call2(g, "llvm.maxnum.f32", x, y);
    case BF_MIN: return call2(g, "llvm.minnum.f32", x, y);
    default: break;
    }
  } else {
    switch (fn) {
    case BF_ADD: return LLVMBuildAdd(b, x, y, "");
    case BF_SUB: return LLVMBuildSub(b, x, y, "");
    case BF_MUL: return LLVMBuildMul(b, x, y, "");
    case BF_DIV: return sdiv_safe(g, x, y);
    case BF_POW: {
      LLVMValueRef r = call2(g, "llvm.pow.f32", convert(g, x, DT_I32, DT_F32), convert(g, y, DT_I32, DT_F32));
      return convert(g, r, DT_F32, DT_I32);
    }
    case BF_MAX: return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, x, y, ""), x, y, "");
    case BF_MIN: return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, x, y, ""), x, y, "");
    default: break;
    }
  }
  die("unknown binary function %d", fn);
}

static LLVMValueRef def_elem(CG *g, const Value *v, const Aff *idx);

static LLVMValueRef elem_at(CG *g, const Value *v, const Aff *idx) {
  if (!g->mat[v->id])
    return def_elem(g, v, idx);
  Aff lin = linear_of(&v->shape, idx);
  return load_lin(g, buffer_of(g, v), v->dtype, aff_value(g, &lin));
}

/* The element of v at idx from its operands (v an elementwise op or an
 * index map), ignoring any buffer v itself has. */
static LLVMValueRef def_elem(CG *g, const Value *v, const Aff *idx) {
  LLVMBuilderRef b = g->b;
  const Value *a = v->nargs ? v->args[0] : NULL;
  Aff ai[GSL_MAX_RANK];
  switch (v->op) {
  case OP_CONST:
    return v->dtype == DT_I32 ? ci32(g, v->ival) : cf32(g, v->fval);
  case OP_UNARY:
    return unary(g, v->fn, convert(g, elem_at(g, a, idx), a->dtype, v->dtype), v->dtype);
  case OP_BINARY:
    return binary(g, v->fn, elem_at(g, a, idx), convert(g, elem_at(g, v->args[1], idx), v->args[1]->dtype, a->dtype),
                  a->dtype, v->dtype);
  case OP_SELECT: {
    LLVMValueRef c = elem_at(g, a, idx);
    c = a->dtype == DT_F32 ? LLVMBuildFCmp(b, LLVMRealUNE, c, cf32(g, 0.0), "")
                           : LLVMBuildICmp(b, LLVMIntNE, c, ci32(g, 0), "");
    LLVMValueRef x = convert(g, elem_at(g, v->args[1], idx), v->args[1]->dtype, v->dtype);
    LLVMValueRef y = convert(g, elem_at(g, v->args[2], idx), v->args[2]->dtype, v->dtype);
    return LLVMBuildSelect(b, c, x, y, "");
  }
  case OP_CAST:
    return convert(g, elem_at(g, a, idx), a->dtype, v->dtype);
  case OP_ANNOTATE:
    return elem_at(g, a, idx);
  case OP_BROADCAST:
    for (int q = 0; q < a->shape.rank; q++)
      ai[q] = aff_const(0);
    for (int i = 0; i < v->shape.rank; i++) {
      int q = v->perm[i];
      if (q >= 0 && a->shape.d[q] != 1)
        ai[q] = idx[i];
    }
    return elem_at(g, a, ai);
  case OP_TRANSPOSE:
    for (int i = 0; i < v->shape.rank; i++)
      ai[v->perm[i]] = idx[i];
    return elem_at(g, a, ai);
  case OP_SLICE:
    for (int i = 0; i < v->shape.rank; i++)
      ai[i] = idx[i];
    ai[v->axis].k += v->start;
    return elem_at(g, a, ai);
  case OP_LOCAL_SLICE:
    for (int i = 0; i < v->shape.rank; i++)
      ai[i] = idx[i];
    ai[v->axis].dev[g->groups[g->vgroup[v->id]].slot] += v->shape.d[v->axis];
    return elem_at(g, a, ai);
  case OP_ONE_HOT: {
    int r = v->shape.rank - 1;
    LLVMValueRef k = LLVMBuildSExt(b, elem_at(g, a, idx), g->t_i64, "");
    LLVMValueRef eq = LLVMBuildICmp(b, LLVMIntEQ, k, aff_value(g, &idx[r]), "");
    return bool_to(g, eq, v->dtype);
  }
  case OP_RESHAPE:
    die("reshape %%%d without a buffer", v->id);
  default:
    die("%s %%%d is not elementwise", op_name(v->op), v->id);
  }
}

/* ---- materialized values ------------------------------------------------- */

/* v's buffer = v's elements, one loop nest over its shape. */
static void emit_map(CG *g, const Value *v) {
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  nest_open(g, l, v->shape.rank, v->shape.d, idx);
  LLVMValueRef x = def_elem(g, v, idx);
  Aff lin = linear_of(&v->shape, idx);
  store_lin(g, buffer_of(g, v), v->dtype, aff_value(g, &lin), x);
  nest_close(g, l, v->shape.rank);
}

static LLVMValueRef reduce_op(CG *g, int fn, DType dt, LLVMValueRef acc, LLVMValueRef x) {
  if (fn == RF_SUM)
    return dt == DT_F32 ? LLVMBuildFAdd(g->b, acc, x, "") : LLVMBuildAdd(g->b, acc, x, "");
  if (dt == DT_F32)
    return call2(g, "llvm.maxnum.f32", acc, x);
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, x, acc, ""), x, acc, "");
}

/* argmax along the one reduced dimension: the loops run over the kept
 * dimensions, then the reduced one; a strict > keeps the first maximum. */
static void emit_argmax(CG *g, const Value *v) {
  const Value *a = v->args[0];
  int R = a->shape.rank, rd = __builtin_ctz(v->rmask);
  if (__builtin_popcount(v->rmask) != 1)
    die("argmax over %d dimensions", __builtin_popcount(v->rmask));
  Loop l[GSL_MAX_RANK], lr;
  Aff ai[GSL_MAX_RANK], oi[GSL_MAX_RANK];
  int no = 0;
  for (int d = 0; d < R; d++)
    if (d != rd) {
      loop_open(g, &l[no], a->shape.d[d]);
      oi[no++] = ai[d] = aff_unit(g->niv - 1);
    }
  LLVMTypeRef et = elem_type(g, a->dtype);
  LLVMValueRef best = new_acc(g, et), bi = new_acc(g, g->t_i32);
  LLVMBuildStore(g->b, a->dtype == DT_F32 ? cf32(g, -INFINITY) : ci32(g, INT32_MIN), best);
  LLVMBuildStore(g->b, ci32(g, 0), bi);
  loop_open(g, &lr, a->shape.d[rd]);
  ai[rd] = aff_unit(g->niv - 1);
  LLVMValueRef x = elem_at(g, a, ai);
  LLVMValueRef cur = LLVMBuildLoad2(g->b, et, best, "");
  LLVMValueRef gt = a->dtype == DT_F32 ? LLVMBuildFCmp(g->b, LLVMRealOGT, x, cur, "")
                                       : LLVMBuildICmp(g->b, LLVMIntSGT, x, cur, "");
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, gt, x, cur, ""), best);
  LLVMValueRef k = LLVMBuildTrunc(g->b, lr.iv, g->t_i32, "");
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, gt, k, LLVMBuildLoad2(g->b, g->t_i32, bi, ""), ""), bi);
  loop_close(g, &lr, false);
  Aff lin = linear_of(&v->shape, oi);
  store_lin(g, buffer_of(g, v), DT_I32, aff_value(g, &lin), LLVMBuildLoad2(g->b, g->t_i32, bi, ""));
  for (int d = no - 1; d >= 0; d--)
    loop_close(g, &l[d], false);
}

/* sum / max: loops over the operand's dimensions in order, its expression
 * computed inline. Trailing reduced dimensions accumulate in a register
 * (vectorized as a reduction); reduced dimensions before the last kept one
 * accumulate into the result buffer, filled with the identity first, so the
 * innermost loop runs along a kept dimension and vectorizes plainly. */
static void emit_reduce(CG *g, const Value *v) {
  if (v->fn == RF_ARGMAX) {
    emit_argmax(g, v);
    return;
  }
  const Value *a = v->args[0];
  int R = a->shape.rank, last_kept = -1;
  bool inner_reduced = false;
  for (int d = 0; d < R; d++)
    if (!(v->rmask & (1u << d)))
      last_kept = d;
  for (int d = 0; d < last_kept; d++)
    if (v->rmask & (1u << d))
      inner_reduced = true;
  LLVMValueRef init = v->fn == RF_SUM ? (v->dtype == DT_F32 ? cf32(g, 0.0) : ci32(g, 0))
                                      : (v->dtype == DT_F32 ? cf32(g, -INFINITY) : ci32(g, INT32_MIN));
  LLVMValueRef out = buffer_of(g, v);
  if (inner_reduced) {
    Loop l[GSL_MAX_RANK];
    Aff idx[GSL_MAX_RANK];
    nest_open(g, l, v->shape.rank, v->shape.d, idx);
    Aff lin = linear_of(&v->shape, idx);
    store_lin(g, out, v->dtype, aff_value(g, &lin), init);
    nest_close(g, l, v->shape.rank);
  }
  Loop l[GSL_MAX_RANK];
  Aff ai[GSL_MAX_RANK], oi[GSL_MAX_RANK];
  int no = 0;
  for (int d = 0; d <= last_kept; d++) {
    loop_open(g, &l[d], a->shape.d[d]);
    ai[d] = aff_unit(g->niv - 1);
    if (!(v->rmask & (1u << d)))
      oi[no++] = ai[d];
  }
  LLVMValueRef r;
  if (last_kept < R - 1) {
    LLVMTypeRef et = elem_type(g, v->dtype);
    LLVMValueRef acc = new_acc(g, et);
    LLVMBuildStore(g->b, init, acc);
    for (int d = last_kept + 1; d < R; d++) {
      loop_open(g, &l[d], a->shape.d[d]);
      ai[d] = aff_unit(g->niv - 1);
    }
    LLVMValueRef x = elem_at(g, a, ai);
    LLVMBuildStore(g->b, reduce_op(g, v->fn, v->dtype, LLVMBuildLoad2(g->b, et, acc, ""), x), acc);
    for (int d = R - 1; d > last_kept; d--)
      loop_close(g, &l[d], v->dtype == DT_F32 && v->fn == RF_SUM);
    r = LLVMBuildLoad2(g->b, et, acc, "");
  } else {
    r = elem_at(g, a, ai);
  }
  Aff lin = linear_of(&v->shape, oi);
  LLVMValueRef li = aff_value(g, &lin);
  if (inner_reduced)
    r = reduce_op(g, v->fn, v->dtype, load_lin(g, out, v->dtype, li), r);
  store_lin(g, out, v->dtype, li, r);
  for (int d = last_kept; d >= 0; d--)
    loop_close(g, &l[d], false);
}

/* y[k] = y[k-1] + x[k] (inclusive) or y[k-1] + x[k-1] (exclusive) along the
 * axis, y[-1] = 0; loops in C order, so y[k-1] is ready. */
static void emit_cumsum(CG *g, const Value *v) {
  const Value *a = v->args[0];
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  int64_t st[GSL_MAX_RANK];
  strides_of(&v->shape, st);
  nest_open(g, l, v->shape.rank, v->shape.d, idx);
  LLVMBuilderRef b = g->b;
  LLVMTypeRef et = elem_type(g, v->dtype);
  LLVMValueRef zero = LLVMConstNull(et);
  Aff lin = linear_of(&v->shape, idx);
  LLVMValueRef li = aff_value(g, &lin);
  LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, l[v->axis].iv, ci64(g, 0), "");
  LLVMValueRef prev = LLVMBuildSelect(b, first, li, LLVMBuildNSWSub(b, li, ci64(g, st[v->axis]), ""), "");
  LLVMValueRef out = buffer_of(g, v), in = buffer_of(g, a);
  LLVMValueRef y = load_lin(g, out, v->dtype, prev);
  LLVMValueRef x = convert(g, load_lin(g, in, a->dtype, v->exclusive ? prev : li), a->dtype, v->dtype);
  LLVMValueRef s;
  if (v->exclusive) {
    s = v->dtype == DT_F32 ? LLVMBuildFAdd(b, y, x, "") : LLVMBuildAdd(b, y, x, "");
    s = LLVMBuildSelect(b, first, zero, s, "");
  } else {
    y = LLVMBuildSelect(b, first, zero, y, "");
    s = v->dtype == DT_F32 ? LLVMBuildFAdd(b, y, x, "") : LLVMBuildAdd(b, y, x, "");
  }
  store_lin(g, out, v->dtype, li, s);
  nest_close(g, l, v->shape.rank);
}

/* table[V, D...] rows by idx[I...]: every index is checked first (one
 * gslrt_fail, then gsl_step returns), then rows are copied. */
static void emit_gather(CG *g, const Value *v) {
  const Value *t = v->args[0], *ix = v->args[1];
  LLVMBuilderRef b = g->b;
  int64_t nidx = shape_elems(&ix->shape), V = t->shape.d[0];
  LLVMValueRef ip = buffer_of(g, ix), bad = new_acc(g, g->t_i1);
  LLVMBuildStore(b, LLVMConstInt(g->t_i1, 0, 0), bad);
  Loop lc;
  loop_open(g, &lc, nidx);
  LLVMValueRef k = load_lin(g, ip, DT_I32, lc.iv);
  LLVMValueRef out_of = LLVMBuildICmp(b, LLVMIntUGE, k, ci32(g, V), "");
  LLVMBuildStore(b, LLVMBuildOr(b, LLVMBuildLoad2(b, g->t_i1, bad, ""), out_of, ""), bad);
  loop_close(g, &lc, false);
  LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "gather.fail");
  LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "gather.ok");
  LLVMBuildCondBr(b, LLVMBuildLoad2(b, g->t_i1, bad, ""), fail, ok);
  LLVMPositionBuilderAtEnd(b, fail);
  LLVMValueRef args[2] = {g->ctx_arg, cstr(g, "gather index out of range")};
  call_fn(g, "gslrt_fail", g->t_void, 2, args);
  LLVMBuildRetVoid(b);
  LLVMPositionBuilderAtEnd(b, ok);

  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK];
  int ni = ix->shape.rank;
  nest_open(g, l, v->shape.rank, v->shape.d, idx);
  Aff il = linear_of(&ix->shape, idx);
  LLVMValueRef row = LLVMBuildSExt(b, load_lin(g, ip, DT_I32, aff_value(g, &il)), g->t_i64, "");
  Aff ti[GSL_MAX_RANK];
  ti[0] = aff_const(0);
  for (int d = 1; d < t->shape.rank; d++)
    ti[d] = idx[ni + d - 1];
  Aff tl = linear_of(&t->shape, ti);
  int64_t st[GSL_MAX_RANK];
  strides_of(&t->shape, st);
  LLVMValueRef tli = LLVMBuildNSWAdd(b, LLVMBuildNSWMul(b, row, ci64(g, st[0]), ""), aff_value(g, &tl), "");
  LLVMValueRef x = load_lin(g, buffer_of(g, t), t->dtype, tli);
  Aff ol = linear_of(&v->shape, idx);
  store_lin(g, buffer_of(g, v), v->dtype, aff_value(g, &ol), convert(g, x, t->dtype, v->dtype));
  nest_close(g, l, v->shape.rank);
}

/* One loop nest per operand, each writing its range along the axis. */
static void emit_concat(CG *g, const Value *v) {
  int64_t off = 0;
  for (int j = 0; j < v->nargs; j++) {
    const Value *a = v->args[j];
    Loop l[GSL_MAX_RANK];
    Aff idx[GSL_MAX_RANK];
    nest_open(g, l, a->shape.rank, a->shape.d, idx);
    LLVMValueRef x = convert(g, elem_at(g, a, idx), a->dtype, v->dtype);
    idx[v->axis].k += off;
    Aff lin = linear_of(&v->shape, idx);
    store_lin(g, buffer_of(g, v), v->dtype, aff_value(g, &lin), x);
    nest_close(g, l, a->shape.rank);
    off += a->shape.d[v->axis];
  }
}

/* The local tile of the draw, at its offset in the global tensor: along a
 * split dimension, the device's index in the group of its axes times the
 * local extent. */
static void emit_rng(CG *g, const Value *v) {
  const Program *p = g->p;
  bool split = false;
  for (int d = 0; d < v->shape.rank; d++)
    split |= rng_split(p, v, d);
  LLVMValueRef off = LLVMConstNull(LLVMPointerType(g->t_i64, 0));
  if (split) {
    off = LLVMBuildArrayAlloca(g->ab, g->t_i64, ci64(g, v->shape.rank), "offset");
    for (int d = 0; d < v->shape.rank; d++) {
      LLVMValueRef o = ci64(g, 0), at = ci64(g, d);
      if (rng_split(p, v, d))
        o = LLVMBuildNSWMul(g->b, group_index(g, v->sh.naxes[d], v->sh.axes[d]), ci64(g, v->shape.d[d]), "");
      LLVMBuildStore(g->b, o, LLVMBuildInBoundsGEP2(g->b, g->t_i64, off, &at, 1, ""));
    }
  }
  LLVMValueRef buf = LLVMBuildBitCast(g->b, buffer_of(g, v), LLVMPointerType(g->t_f32, 0), "");
  LLVMValueRef args[11] = {g->ctx_arg,
                           buf,
                           ci32(g, v->fn == RNG_NORMAL ? 1 : 0),
                           LLVMConstReal(g->t_f64, v->fval),
                           LLVMConstReal(g->t_f64, v->fval2),
                           LLVMConstInt(g->t_i32, v->stream, 0),
                           g->step_arg,
                           ci32(g, v->shape.rank),
                           shape_array(g, p->spmd ? &v->gshape : &v->shape),
                           off,
                           shape_array(g, &v->shape)};
  call_fn(g, "gslrt_rng_fill", g->t_void, 11, args);
}

/* ---- collectives ------------------------------------------------------------ */

static LLVMValueRef group_id(CG *g, const Value *v) {
  return LLVMBuildLoad2(g->b, g->t_i32, g->groups[g->vgroup[v->id]].id, "group");
}

static LLVMValueRef raw_buffer(CG *g, const Value *v) {
  return LLVMBuildBitCast(g->b, buffer_of(g, v), g->t_ptr, "");
}

/* In place on v's buffer: the operand's (when that is not the same buffer)
 * with the operand's expression computed into it. */
static void emit_all_reduce(CG *g, const Value *v) {
  if (g->root[v->id] == v->id) {
    Loop l[GSL_MAX_RANK];
    Aff idx[GSL_MAX_RANK];
    nest_open(g, l, v->shape.rank, v->shape.d, idx);
    LLVMValueRef x = elem_at(g, v->args[0], idx);
    Aff lin = linear_of(&v->shape, idx);
    store_lin(g, buffer_of(g, v), v->dtype, aff_value(g, &lin), x);
    nest_close(g, l, v->shape.rank);
  }
  LLVMValueRef args[6] = {g->ctx_arg,
                          group_id(g, v),
                          ci32(g, v->dtype == DT_I32),
                          ci32(g, v->fn == RF_MAX ? 1 : 0),
                          raw_buffer(g, v),
                          ci64(g, shape_elems(&v->shape))};
  call_fn(g, "gslrt_all_reduce", g->t_void, 6, args);
}

/* all_gather, reduce_scatter, all_to_all: operand buffer to v's buffer. */
static void emit_collective(CG *g, const Value *v) {
  const Value *a = v->args[0];
  const char *name = v->op == OP_ALL_GATHER       ? "gslrt_all_gather"
                     : v->op == OP_REDUCE_SCATTER ? "gslrt_reduce_scatter"
                                                  : "gslrt_all_to_all";
  LLVMValueRef args[9] = {g->ctx_arg,
                          group_id(g, v),
                          ci32(g, v->dtype == DT_I32),
                          raw_buffer(g, a),
                          raw_buffer(g, v),
                          ci32(g, a->shape.rank),
                          shape_array(g, &a->shape),
                          ci32(g, v->axis),
                          ci32(g, v->axis2)};
  call_fn(g, name, g->t_void, v->op == OP_ALL_TO_ALL ? 9 : 8, args);
}

/* collective_permute: operand buffer to v's buffer, blocks renumbered. */
static void emit_permute(CG *g, const Value *v) {
  LLVMValueRef args[7] = {g->ctx_arg,
                          group_id(g, v),
                          LLVMBuildLoad2(g->b, g->t_i32, g->groups[g->vgroup2[v->id]].id, "group2"),
                          ci32(g, v->dtype == DT_I32),
                          raw_buffer(g, v->args[0]),
                          raw_buffer(g, v),
                          ci64(g, shape_elems(&v->shape))};
  call_fn(g, "gslrt_collective_permute", g->t_void, 7, args);
}

/* ---- einsum ---------------------------------------------------------------- */

/* An einsum spec taken apart. */
typedef struct Spec {
  char op[2][GSL_MAX_RANK + 1]; /* each operand's letters, in memory order */
  char out[GSL_MAX_RANK + 1];   /* the result's letters */
  int nops;                     /* operands in the spec */
  int64_t ext[256];             /* extent of each letter (0: unused) */
} Spec;

/* s ++ c (s has room) */
static void append(char *s, char c) {
  size_t n = strlen(s);
  s[n] = c;
  s[n + 1] = '\0';
}

static bool has_repeat(const char *s) {
  for (; *s; s++)
    if (strchr(s + 1, *s))
      return true;
  return false;
}

/* v's spec with the extent of each letter; false if it does not fit v's
 * operands. */
static bool parse_spec(const Value *v, Spec *s) {
  memset(s, 0, sizeof *s);
  const EinsumSpec *e = &v->ein;
  if (e->nin != v->nargs || e->nin < 1 || e->nin > 2 || strlen(e->out) != (size_t)v->shape.rank)
    return false;
  s->nops = e->nin;
  for (int j = 0; j < s->nops; j++) {
    if (strlen(e->in[j]) != (size_t)v->args[j]->shape.rank)
      return false;
    strcpy(s->op[j], e->in[j]);
  }
  strcpy(s->out, e->out);
  for (int j = 0; j < s->nops; j++)
    for (int i = 0; s->op[j][i]; i++) {
      unsigned char c = (unsigned char)s->op[j][i];
      int64_t d = v->args[j]->shape.d[i];
      if (s->ext[c] && s->ext[c] != d)
        return false;
      s->ext[c] = d;
    }
  for (int i = 0; s->out[i]; i++) {
    unsigned char c = (unsigned char)s->out[i];
    if (s->ext[c] != v->shape.d[i] || strchr(s->out + i + 1, c))
      return false;
  }
  return true;
}

static bool einsum_check(const Value *v) {
  Spec s;
  if (!parse_spec(v, &s)) {
    diag_fatal("einsum of %%%d does not match its operands' shapes", v->id);
    return false;
  }
  return true;
}

/* Any einsum as one loop nest: the result's letters, then the summed ones;
 * the result is cleared first when there are summed letters. */
static void einsum_loops(CG *g, const Value *v, const Spec *s) {
  char all[CG_MAXL + 1];
  strcpy(all, s->out);
  for (int j = 0; j < s->nops; j++)
    for (int i = 0; s->op[j][i]; i++)
      if (!strchr(all, s->op[j][i]))
        append(all, s->op[j][i]);
  int n = (int)strlen(all), no = v->shape.rank;
  LLVMValueRef out = buffer_of(g, v);
  LLVMTypeRef et = elem_type(g, v->dtype);
  Loop l[CG_MAXL];
  Aff idx[CG_MAXL], ai[GSL_MAX_RANK];
  if (n > no) {
    nest_open(g, l, no, v->shape.d, idx);
    Aff lin = linear_of(&v->shape, idx);
    store_lin(g, out, v->dtype, aff_value(g, &lin), LLVMConstNull(et));
    nest_close(g, l, no);
  }
  int64_t ext[CG_MAXL];
  for (int i = 0; i < n; i++)
    ext[i] = s->ext[(unsigned char)all[i]];
  nest_open(g, l, n, ext, idx);
  LLVMValueRef prod = NULL;
  for (int j = 0; j < s->nops; j++) {
    const Value *a = v->args[j];
    for (int i = 0; s->op[j][i]; i++)
      ai[i] = idx[strchr(all, s->op[j][i]) - all];
    LLVMValueRef x = convert(g, elem_at(g, a, ai), a->dtype, v->dtype);
    prod = !prod ? x : v->dtype == DT_F32 ? LLVMBuildFMul(g->b, prod, x, "") : LLVMBuildMul(g->b, prod, x, "");
  }
  Aff lin = linear_of(&v->shape, idx);
  LLVMValueRef li = aff_value(g, &lin);
  if (n > no) {
    LLVMValueRef o = load_lin(g, out, v->dtype, li);
    prod = v->dtype == DT_F32 ? LLVMBuildFAdd(g->b, o, prod, "") : LLVMBuildAdd(g->b, o, prod, "");
  }
  store_lin(g, out, v->dtype, li, prod);
  for (int i = n - 1; i >= 0; i--)
    loop_close(g, &l[i], i >= no && v->dtype == DT_F32);
}

/* dst (contiguous, letters dl) = src (contiguous, letters sl), f32. */
static void permute_copy(CG *g, LLVMValueRef dst, const char *dl, LLVMValueRef src, const char *sl,
                         const Spec *s) {
  Shape ds = {0}, ss = {0};
  ds.rank = (int)strlen(dl);
  ss.rank = (int)strlen(sl);
  for (int i = 0; i < ds.rank; i++)
    ds.d[i] = s->ext[(unsigned char)dl[i]];
  for (int i = 0; i < ss.rank; i++)
    ss.d[i] = s->ext[(unsigned char)sl[i]];
  Loop l[GSL_MAX_RANK];
  Aff idx[GSL_MAX_RANK], si[GSL_MAX_RANK];
  nest_open(g, l, ds.rank, ds.d, idx);
  for (int i = 0; i < ss.rank; i++)
    si[i] = idx[strchr(dl, sl[i]) - dl];
  Aff slin = linear_of(&ss, si), dlin = linear_of(&ds, idx);
  LLVMValueRef x = load_lin(g, src, DT_F32, aff_value(g, &slin));
  store_lin(g, dst, DT_F32, aff_value(g, &dlin), x);
  nest_close(g, l, ds.rank);
}

static int64_t letters_size(const Spec *s, const char *l) {
  int64_t n = 1;
  for (; *l; l++)
    n *= s->ext[(unsigned char)*l];
  return n;
}

/* a ++ b ++ c into buf */
static const char *cat3(char *buf, const char *a, const char *b, const char *c) {
  snprintf(buf, CG_MAXL + 1, "%s%s%s", a, b, c);
  return buf;
}

/* How two GEMM operands lie in memory for a given order of the K letters. */
typedef struct Layout {
  bool a_n, a_t; /* A is [batch, M, K] / [batch, K, M] */
  bool b_n, b_t; /* B is [batch, K, N] / [batch, N, K] */
  int copies;    /* operands that must be copied to a canonical temporary */
} Layout;

static Layout layout(const char *la, const char *lb, const char *bl, const char *ml, const char *nl,
                     const char *kl) {
  char t[CG_MAXL + 1];
  Layout l;
  l.a_n = !strcmp(la, cat3(t, bl, ml, kl));
  l.a_t = !strcmp(la, cat3(t, bl, kl, ml));
  l.b_n = !strcmp(lb, cat3(t, bl, kl, nl));
  l.b_t = !strcmp(lb, cat3(t, bl, nl, kl));
  l.copies = !(l.a_n || l.a_t) + !(l.b_n || l.b_t);
  return l;
}

/* One operand of a GEMM: its buffer and that buffer's letters, looking
 * through a transpose that has no buffer of its own. */
static const Value *gemm_operand(CG *g, const Value *a, const char *letters, char *out) {
  if (!g->mat[a->id] && a->op == OP_TRANSPOSE) {
    for (int i = 0; i < a->shape.rank; i++)
      out[a->perm[i]] = letters[i];
    out[a->shape.rank] = '\0';
    return a->args[0];
  }
  strcpy(out, letters);
  return a;
}

/* f32 two-operand einsum through gslrt_sgemm; see the file comment. */
static void einsum(CG *g, const Value *v) {
  Spec s;
  if (!parse_spec(v, &s))
    die("einsum %%%d escaped the check", v->id);
  bool plain = v->dtype != DT_F32 || s.nops != 2 || has_repeat(s.op[0]) || has_repeat(s.op[1]);
  for (int j = 0; j < s.nops && !plain; j++) {
    plain = v->args[j]->dtype != DT_F32;
    for (int i = 0; s.op[j][i]; i++)
      if (!strchr(s.out, s.op[j][i]) && !strchr(s.op[1 - j], s.op[j][i]))
        plain = true;
  }
  if (plain) {
    einsum_loops(g, v, &s);
    return;
  }
  char la[GSL_MAX_RANK + 1], lb[GSL_MAX_RANK + 1];
  const Value *va = gemm_operand(g, v->args[0], s.op[0], la);
  const Value *vb = gemm_operand(g, v->args[1], s.op[1], lb);
  char bl[GSL_MAX_RANK + 1] = "", ml[GSL_MAX_RANK + 1] = "", nl[GSL_MAX_RANK + 1] = "";
  char ka[GSL_MAX_RANK + 1] = "", kb[GSL_MAX_RANK + 1] = "";
  /* A supplies the rows: the result's first letter after the batch ones */
  bool swap = false;
  for (int i = 0; s.out[i]; i++) {
    bool in_a = strchr(la, s.out[i]), in_b = strchr(lb, s.out[i]);
    if (in_a != in_b) {
      swap = in_b;
      break;
    }
  }
  if (swap) {
    const Value *t = va;
    va = vb;
    vb = t;
    char tl[GSL_MAX_RANK + 1];
    strcpy(tl, la);
    strcpy(la, lb);
    strcpy(lb, tl);
  }
  for (int i = 0; s.out[i]; i++) {
    char c = s.out[i];
    bool in_a = strchr(la, c), in_b = strchr(lb, c);
    append(in_a && in_b ? bl : in_a ? ml : nl, c);
  }
  for (int i = 0; la[i]; i++)
    if (!strchr(s.out, la[i]))
      append(ka, la[i]);
  for (int i = 0; lb[i]; i++)
    if (!strchr(s.out, lb[i]))
      append(kb, lb[i]);
  char t1[CG_MAXL + 1];
  /* the K order of whichever operand makes fewer copies */
  Layout lay = layout(la, lb, bl, ml, nl, ka);
  const char *kl = ka;
  if (lay.copies) {
    Layout other = layout(la, lb, bl, ml, nl, kb);
    if (other.copies < lay.copies) {
      lay = other;
      kl = kb;
    }
  }
  bool a_n = lay.a_n, a_t = lay.a_t, b_n = lay.b_n, b_t = lay.b_t;
  int64_t nb = letters_size(&s, bl), m = letters_size(&s, ml), n = letters_size(&s, nl),
          k = letters_size(&s, kl);
  LLVMValueRef pa = buffer_of(g, va), pb = buffer_of(g, vb), pc = buffer_of(g, v);
  bool ta = !a_n, tb = !b_n;
  if (!a_n && !a_t) {
    LLVMValueRef t = new_temp(g, DT_F32, nb * m * k);
    permute_copy(g, t, cat3(t1, bl, ml, kl), pa, la, &s);
    pa = t;
    ta = false;
  }
  if (!b_n && !b_t) {
    LLVMValueRef t = new_temp(g, DT_F32, nb * k * n);
    permute_copy(g, t, cat3(t1, bl, kl, nl), pb, lb, &s);
    pb = t;
    tb = false;
  }
  bool direct = !strcmp(s.out, cat3(t1, bl, ml, nl));
  if (!direct)
    pc = new_temp(g, DT_F32, nb * m * n);
  LLVMValueRef args[15] = {ci64(g, nb), ci32(g, ta), ci32(g, tb), ci64(g, m), ci64(g, n), ci64(g, k),
                           pa, ci64(g, ta ? m : k), ci64(g, m * k),
                           pb, ci64(g, tb ? k : n), ci64(g, k * n),
                           pc, ci64(g, n), ci64(g, m * n)};
  call_fn(g, "gslrt_sgemm", g->t_void, 15, args);
  if (!direct)
    permute_copy(g, buffer_of(g, v), s.out, pc, cat3(t1, bl, ml, nl), &s);
}

static void emit_value(CG *g, const Value *v) {
  if (g->mat[v->id] && v->op == OP_ALL_REDUCE)
    emit_all_reduce(g, v);
  if (!g->mat[v->id] || g->root[v->id] != v->id)
    return;
  switch (v->op) {
  case OP_PARAM:
  case OP_INPUT:
    break;
  case OP_RNG: emit_rng(g, v); break;
  case OP_EINSUM: einsum(g, v); break;
  case OP_REDUCE: emit_reduce(g, v); break;
  case OP_CUMSUM: emit_cumsum(g, v); break;
  case OP_GATHER: emit_gather(g, v); break;
  case OP_CONCAT: emit_concat(g, v); break;
  case OP_ALL_REDUCE: break;
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER:
  case OP_ALL_TO_ALL: emit_collective(g, v); break;
  case OP_COLLECTIVE_PERMUTE: emit_permute(g, v); break;
  default: emit_map(g, v); break;
  }
}

/* ---- functions ------------------------------------------------------------ */

static LLVMValueRef add_function(CG *g, const char *name, LLVMTypeRef ft) {
  LLVMValueRef f = LLVMAddFunction(g->mod, name, ft);
  LLVMAttributeRef nounwind = LLVMCreateEnumAttribute(g->ctx, LLVMGetEnumAttributeKindForName("nounwind", 8), 0);
  LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, nounwind);
  return f;
}

static void emit_step(CG *g) {
  const Program *p = g->p;
  g->fn = g->step_fn;
  g->ctx_arg = LLVMGetParam(g->fn, 0);
  g->step_arg = LLVMGetParam(g->fn, 1);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "entry");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "body");
  LLVMPositionBuilderAtEnd(g->ab, entry);
  LLVMPositionBuilderAtEnd(g->b, body);
  for (int i = 0; i < p->nvalues; i++)
    if (g->mat[i] && g->root[i] == i) {
      LLVMValueRef raw = LLVMBuildLoad2(g->b, g->t_ptr, g->glob[i], "");
      g->ptr[i] = LLVMBuildBitCast(g->b, raw, LLVMPointerType(elem_type(g, p->values[i]->dtype), 0), "buf");
    }
  for (int k = 0; k < g->ngroups; k++)
    if (g->groups[k].slot >= 0) {
      LLVMValueRef a[2] = {g->ctx_arg, LLVMBuildLoad2(g->b, g->t_i32, g->groups[k].id, "group")};
      g->gidx[g->groups[k].slot] = call_fn(g, "gslrt_group_index", g->t_i64, 2, a);
    }
  for (int i = 0; i < p->nvalues; i++)
    emit_value(g, p->values[i]);
  LLVMBuildRetVoid(g->b);
  LLVMBuildBr(g->ab, body);
}

static void emit_setup(CG *g, LLVMValueRef fn) {
  const Program *p = g->p;
  LLVMBuilderRef b = g->b;
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
  LLVMValueRef ctx = LLVMGetParam(fn, 0);
  for (int i = 0; i < p->mesh.naxes; i++) {
    LLVMValueRef a[3] = {ctx, cstr(g, p->mesh.name[i]), ci64(g, p->mesh.size[i])};
    call_fn(g, "gslrt_declare_axis", g->t_void, 3, a);
  }
  for (int k = 0; k < g->ngroups; k++) {
    const Group *gr = &g->groups[k];
    int64_t axes[GSL_MAX_AXES];
    for (int j = 0; j < gr->n; j++)
      axes[j] = gr->axes[j];
    LLVMValueRef a[3] = {ctx, ci32(g, gr->n), const_array(g, g->t_i32, gr->n, axes)};
    LLVMBuildStore(b, call_fn(g, "gslrt_declare_group", g->t_i32, 3, a), gr->id);
  }
  for (int i = 0; i < p->ntensors; i++) {
    const Tensor *t = &p->tensors[i];
    LLVMValueRef a[13] = {ctx,
                          cstr(g, t->name),
                          ci32(g, t->kind == TK_INPUT),
                          ci32(g, t->dtype == DT_I32),
                          ci32(g, t->shape.rank),
                          shape_array(g, &t->shape),
                          dim_axes_array(g, t->shape.rank, p->spmd ? &t->sh : NULL),
                          g->glob[t->value->id],
                          ci32(g, t->init),
                          LLVMConstReal(g->t_f64, t->a),
                          LLVMConstReal(g->t_f64, t->b),
                          LLVMConstInt(g->t_i32, t->stream, 0),
                          ci32(g, t->frozen)};
    call_fn(g, "gslrt_declare_tensor", g->t_void, 13, a);
  }
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (!g->mat[i] || g->root[i] != i || v->op == OP_PARAM || v->op == OP_INPUT)
      continue;
    int64_t n = shape_elems(&v->shape);
    LLVMValueRef a[2] = {ctx, ci64(g, 4 * (n > 0 ? n : 1))};
    LLVMBuildStore(b, call_fn(g, "gslrt_alloc", g->t_ptr, 2, a), g->glob[i]);
  }
  for (int i = 0; i < g->ntemps; i++) {
    LLVMValueRef a[2] = {ctx, ci64(g, g->temp_bytes[i])};
    LLVMBuildStore(b, call_fn(g, "gslrt_alloc", g->t_ptr, 2, a), g->temps[i]);
  }
  for (int i = 0; i < p->noutputs; i++) {
    const Value *v = p->outputs[i].value;
    if (p->spmd && v->sh.partial)
      die("output %s is a partial sum", p->outputs[i].name);
    LLVMValueRef a[7] = {ctx,
                         cstr(g, p->outputs[i].name),
                         ci32(g, v->dtype == DT_I32),
                         ci32(g, v->shape.rank),
                         shape_array(g, p->spmd ? &v->gshape : &v->shape),
                         dim_axes_array(g, v->shape.rank, p->spmd ? &v->sh : NULL),
                         g->glob[g->root[v->id]]};
    call_fn(g, "gslrt_declare_output", g->t_void, 7, a);
  }
  LLVMBuildRetVoid(b);
}

static void emit_main(CG *g, LLVMValueRef setup, LLVMValueRef step) {
#ifdef PACKAGE_VERSION
  const char *version = PACKAGE_VERSION;
#else
  const char *version = "0.1.0";
#endif
  LLVMValueRef fields[4] = {cstr(g, g->p->path), cstr(g, version), setup, step};
  LLVMValueRef init = LLVMConstStructInContext(g->ctx, fields, 4, 0);
  LLVMValueRef info = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "gsl_program_info");
  LLVMSetInitializer(info, init);
  LLVMSetGlobalConstant(info, 1);
  LLVMSetLinkage(info, LLVMPrivateLinkage);

  LLVMTypeRef pp = LLVMPointerType(g->t_ptr, 0);
  LLVMTypeRef mp[2] = {g->t_i32, pp};
  LLVMValueRef fn = add_function(g, "main", LLVMFunctionType(g->t_i32, mp, 2, 0));
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
  LLVMValueRef a[3] = {LLVMGetParam(fn, 0), LLVMGetParam(fn, 1), info};
  LLVMBuildRet(g->b, call_fn(g, "gslrt_main", g->t_i32, 3, a));
}

/* ---- driving LLVM ----------------------------------------------------------- */

/* LLVM's errors become ours; its warnings and remarks (for instance a loop
 * the vectorizer was asked to, but could not, vectorize) are dropped. */
static void on_llvm_diag(LLVMDiagnosticInfoRef di, void *failed) {
  if (LLVMGetDiagInfoSeverity(di) != LLVMDSError)
    return;
  char *msg = LLVMGetDiagInfoDescription(di);
  diag_fatal("LLVM: %s", msg);
  LLVMDisposeMessage(msg);
  *(bool *)failed = true;
}

static LLVMTargetMachineRef host_machine(int opt_level) {
  static const LLVMCodeGenOptLevel levels[] = {LLVMCodeGenLevelNone, LLVMCodeGenLevelLess,
                                               LLVMCodeGenLevelDefault, LLVMCodeGenLevelAggressive};
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  char *triple = LLVMGetDefaultTargetTriple(), *err = NULL;
  LLVMTargetRef target;
  LLVMTargetMachineRef tm = NULL;
  if (LLVMGetTargetFromTriple(triple, &target, &err)) {
    diag_fatal("no LLVM target for %s: %s", triple, err);
    LLVMDisposeMessage(err);
  } else {
    char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
    tm = LLVMCreateTargetMachine(target, triple, cpu, features, levels[opt_level], LLVMRelocPIC,
                                 LLVMCodeModelDefault);
    if (!tm)
      diag_fatal("cannot create an LLVM target machine for %s (%s)", triple, cpu);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
  }
  LLVMDisposeMessage(triple);
  return tm;
}

static bool optimize(LLVMModuleRef mod, LLVMTargetMachineRef tm, int level) {
  char pipeline[16];
  snprintf(pipeline, sizeof pipeline, "default<O%d>", level);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(po, level >= 2);
  LLVMPassBuilderOptionsSetSLPVectorization(po, level >= 2);
  LLVMPassBuilderOptionsSetLoopUnrolling(po, level >= 2);
  LLVMPassBuilderOptionsSetLoopInterleaving(po, level >= 2);
  LLVMErrorRef e = LLVMRunPasses(mod, pipeline, tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (e) {
    char *msg = LLVMGetErrorMessage(e);
    diag_fatal("LLVM pass pipeline %s: %s", pipeline, msg);
    LLVMDisposeErrorMessage(msg);
    return false;
  }
  return true;
}

static bool write_output(CG *g, LLVMTargetMachineRef tm, const CodegenOptions *opt) {
  char *err = NULL;
  bool bad;
  if (opt->emit == EMIT_LLVM)
    bad = LLVMPrintModuleToFile(g->mod, opt->out, &err);
  else
    bad = LLVMTargetMachineEmitToFile(tm, g->mod, (char *)opt->out,
                                      opt->emit == EMIT_ASM ? LLVMAssemblyFile : LLVMObjectFile, &err);
  if (bad) {
    diag_fatal("cannot write %s: %s", opt->out, err ? err : "unknown error");
    LLVMDisposeMessage(err);
    return false;
  }
  return true;
}

static void build_module(CG *g) {
  const Program *p = g->p;
  for (int i = 0; i < p->nvalues; i++)
    if (g->mat[i] && g->root[i] == i) {
      char name[64];
      snprintf(name, sizeof name, "buf.%d", i);
      g->glob[i] = LLVMAddGlobal(g->mod, g->t_ptr, name);
      LLVMSetInitializer(g->glob[i], LLVMConstNull(g->t_ptr));
      LLVMSetLinkage(g->glob[i], LLVMPrivateLinkage);
    }
  for (int k = 0; k < g->ngroups; k++) {
    g->groups[k].id = LLVMAddGlobal(g->mod, g->t_i32, "group");
    LLVMSetInitializer(g->groups[k].id, ci32(g, -1));
    LLVMSetLinkage(g->groups[k].id, LLVMPrivateLinkage);
  }
  LLVMTypeRef sp[2] = {g->t_ptr, g->t_i64};
  LLVMValueRef setup = add_function(g, "gsl_setup", LLVMFunctionType(g->t_void, sp, 1, 0));
  g->step_fn = add_function(g, "gsl_step", LLVMFunctionType(g->t_void, sp, 2, 0));
  emit_step(g);
  emit_setup(g, setup);
  emit_main(g, setup, g->step_fn);
}

/* Values the code generator cannot lower, reported before any LLVM work. */
static bool check_program(const Program *p) {
  bool ok = true;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (v->op == OP_REDUCE && v->fn == RF_ARGMAX && __builtin_popcount(v->rmask) != 1) {
      diag_fatal("argmax of %%%d must reduce exactly one dimension", v->id);
      ok = false;
    }
    if (v->op == OP_RNG && v->dtype != DT_F32) {
      diag_fatal("random draws of %%%d must be f32", v->id);
      ok = false;
    }
    if (v->op == OP_EINSUM && !einsum_check(v))
      ok = false;
    if (v->op == OP_ALL_REDUCE && v->fn != RF_SUM && v->fn != RF_MAX) {
      diag_fatal("all_reduce %%%d must sum or take the maximum", v->id);
      ok = false;
    }
  }
  return ok;
}

bool cg_emit(const Program *p, const CodegenOptions *opt) {
  if (opt->opt_level < 0 || opt->opt_level > 3) {
    diag_fatal("optimization level %d out of range 0..3", opt->opt_level);
    return false;
  }
  if (!check_program(p))
    return false;
  LLVMTargetMachineRef tm = host_machine(opt->opt_level);
  if (!tm)
    return false;
  CG g;
  memset(&g, 0, sizeof g);
  bool failed = false, ok = false;
  g.p = p;
  g.ctx = LLVMContextCreate();
  LLVMContextSetDiagnosticHandler(g.ctx, on_llvm_diag, &failed);
  g.mod = LLVMModuleCreateWithNameInContext(p->path, g.ctx);
  g.b = LLVMCreateBuilderInContext(g.ctx);
  g.ab = LLVMCreateBuilderInContext(g.ctx);
  g.t_void = LLVMVoidTypeInContext(g.ctx);
  g.t_i1 = LLVMInt1TypeInContext(g.ctx);
  g.t_i32 = LLVMInt32TypeInContext(g.ctx);
  g.t_i64 = LLVMInt64TypeInContext(g.ctx);
  g.t_f32 = LLVMFloatTypeInContext(g.ctx);
  g.t_f64 = LLVMDoubleTypeInContext(g.ctx);
  g.t_ptr = LLVMPointerType(LLVMInt8TypeInContext(g.ctx), 0);
  g.md_loop = LLVMGetMDKindIDInContext(g.ctx, "llvm.loop", 9);
  size_t n = (size_t)(p->nvalues > 0 ? p->nvalues : 1);
  g.uses = xcalloc(n, sizeof *g.uses);
  g.mat = xcalloc(n, sizeof *g.mat);
  g.cheap = xcalloc(n, sizeof *g.cheap);
  g.root = xcalloc(n, sizeof *g.root);
  g.glob = xcalloc(n, sizeof *g.glob);
  g.ptr = xcalloc(n, sizeof *g.ptr);
  g.vgroup = xcalloc(n, sizeof *g.vgroup);
  g.vgroup2 = xcalloc(n, sizeof *g.vgroup2);

  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(g.mod, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(td);
  LLVMSetDataLayout(g.mod, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetData(td);

  if (collect_groups(&g)) {
    plan_buffers(&g);
    build_module(&g);
    char *msg = NULL;
    if (LLVMVerifyModule(g.mod, LLVMReturnStatusAction, &msg))
      die("LLVM module does not verify: %s", msg);
    LLVMDisposeMessage(msg);
    ok = optimize(g.mod, tm, opt->opt_level) && !failed && write_output(&g, tm, opt) && !failed;
  }

  LLVMDisposeBuilder(g.b);
  LLVMDisposeBuilder(g.ab);
  LLVMDisposeModule(g.mod);
  LLVMContextDispose(g.ctx);
  LLVMDisposeTargetMachine(tm);
  free(g.uses);
  free(g.mat);
  free(g.cheap);
  free(g.root);
  free(g.glob);
  free(g.ptr);
  free(g.temps);
  free(g.temp_bytes);
  free(g.groups);
  free(g.vgroup);
  free(g.vgroup2);
  return ok;
}
