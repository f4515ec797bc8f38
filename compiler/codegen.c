/* codegen.c — the SPMD program to one LLVM module, then to an object file,
 * assembly or textual IR for the host: the module's functions and the
 * driving of LLVM: the top of codegen's stack of files (codegen.h), which
 * calls the op emitters (cg_ops.c, cg_collectives.c, cg_einsum.c), fusion
 * (cg_fuse.c), scalar math (cg_math.c) and the base (cg_loops.c: loops,
 * indices, buffers), none of which calls back up.
 *
 * The module defines gsl_setup (declares the mesh, the groups of mesh axes
 * the code uses, the params and inputs, the checks the runtime makes on
 * inputs that are indices, the outputs, and allocates the one arena of the
 * buffer plan through libgslrt), gsl_step (one step of the
 * program: each value's code in program order), for a program that trains
 * gsl_eval (the same code cut down to what the loss and the f32 scalar
 * outputs need: the forward pass), gsl_forward (cut down to what the
 * `output` values need, for text generation), and main (gslrt_main with
 * a constant program info). Each value's code is a function of its own (kID.OP,
 * internal, so that profiles name it; a concat's, one a piece), which
 * gsl_step and gsl_eval call: LLVM optimizes small functions, and the
 * forward pass is shared, not copied. A kernel names no buffer: it reads
 * each through a slot its call site passes (the address of the global
 * holding the buffer, and an offset into it), so values whose code is the
 * same on other buffers (each layer of a stack) share one kernel, emitted
 * and optimized once (emit_kernels). Params and inputs live behind
 * module-private global pointers the runtime fills; every other buffer is
 * the arena plus its planned offset (plan.c decides who has a buffer,
 * plan_arena.c where), kept in a private global.
 *
 * SPMD. The program is normally partition.c's per-device program
 * (Program.spmd): every value holds its local tile, so the code simply
 * runs on local shapes. Tensors and outputs are declared with their global
 * shapes and shardings, and the runtime allocates and fills the local tiles.
 * Each distinct list of mesh axes that a collective, a local slice or a
 * split random draw names becomes one group, declared in gsl_setup (its id
 * kept in a private global); gsl_step and gsl_eval ask once on entry for
 * the device's index in each group whose index the code reads, and keep it
 * in a private global for the kernels; so too, in a program with a
 * dropout, whether the call is a training step (gsl_step of a program
 * that trains: dropout draws; gsl_eval and gsl_forward: it is the
 * identity) and the run's seed, which keys the draws dropout makes
 * inline: a kernel is one code for the three, and this flag is their
 * difference. A program with spmd false (the global IR) is compiled as
 * one device holding whole tensors. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen.h"
#include "gslrt.h" /* gslrt_program_info's precision codes */

/* ---- groups of mesh axes ---------------------------------------------------- */

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
        diag_fatal(g->diag, "the program reads the device's index in more than %d groups of mesh axes", CG_MAXG);
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
    if (ir_op(v->op)->cls == OC_COLLECTIVE || ir_op(v->op)->cls == OC_LOCAL)
      g->vgroup[i] = find_group(g, v->ngroup, v->group, ir_op(v->op)->cls == OC_LOCAL, &ok);
    g->vgroup2[i] = v->op == OP_COLLECTIVE_PERMUTE ? find_group(g, v->ngroup, v->group2, false, &ok) : -1;
    if (v->op == OP_RNG || v->op == OP_DROPOUT)
      for (int d = 0; d < v->shape.rank; d++)
        if (cg_dim_split(p, v, d))
          find_group(g, v->sh.naxes[d], v->sh.axes[d], true, &ok);
    if (v->op == OP_IOTA && cg_dim_split(p, v, v->axis))
      find_group(g, v->sh.naxes[v->axis], v->sh.axes[v->axis], true, &ok);
    if (v->op == OP_GATHER || v->op == OP_SCATTER_ADD) /* an index out of range is named by its place */
      for (int d = 0; d < v->args[1]->shape.rank; d++)
        if (cg_dim_split(p, v->args[1], d))
          find_group(g, v->args[1]->sh.naxes[d], v->args[1]->sh.axes[d], true, &ok);
  }
  return ok;
}

/* dim_axes for declare_*: per dimension the mesh axes of sh, padded with -1. */
static LLVMValueRef dim_axes_array(CG *g, int rank, const Sharding *sh) {
  int64_t v[GSL_MAX_RANK * GSL_MAX_AXES];
  for (int i = 0; i < rank; i++)
    for (int j = 0; j < GSL_MAX_AXES; j++)
      v[i * GSL_MAX_AXES + j] = sh && j < sh->naxes[i] ? sh->axes[i][j] : -1;
  return cg_const_array(g, g->t_i32, rank * GSL_MAX_AXES, v);
}

/* The values the loop nest of v computes (the plan's loop v is the last
 * of), in program order, and v's elements: one loop nest. */
static void emit_loop(CG *g, const Value *v) {
  int n = 1;
  for (int j = g->loop_first[v->id]; j != v->id; j = g->loop_next[j])
    n++;
  const Value **vs = xmalloc(sizeof *vs * (size_t)n);
  n = 0;
  for (int j = g->loop_first[v->id]; j != v->id; j = g->loop_next[j])
    vs[n++] = g->p->values[j];
  vs[n++] = v;
  cg_emit_map(g, vs, n);
  free(vs);
}

static void emit_value(CG *g, const Value *v) {
  if (g->pl->mat[v->id] && v->op == OP_ALL_REDUCE)
    cg_emit_all_reduce(g, v);
  if (!g->pl->mat[v->id] || (g->pl->root[v->id] != v->id && !g->pl->inplace[v->id]) ||
      g->pl->loop[v->id] != v->id) /* computed in its loop's */
    return;
  switch (v->op) {
  case OP_PARAM:
  case OP_INPUT:
    break;
  case OP_RNG: cg_emit_rng(g, v); break;
  case OP_EINSUM: cg_emit_einsum(g, v); break;
  case OP_REDUCE: cg_emit_reduce(g, v); break;
  case OP_CUMSUM: cg_emit_cumsum(g, v); break;
  case OP_GATHER: cg_emit_gather(g, v); break;
  case OP_SCATTER_ADD: cg_emit_scatter_add(g, v); break;
  case OP_DISPATCH:
  case OP_COMBINE: cg_emit_route(g, v); break;
  case OP_CONCAT: cg_emit_concat(g, v); break;
  case OP_RESHAPE: /* with a buffer of its own (an output of a param's, plan.c): a copy */
    LLVMBuildMemCpy(g->b, cg_buffer_of(g, v), 4, cg_buffer_of(g, v->args[0]), 4,
                    cg_ci64(g, 4 * shape_elems(&v->shape)));
    break;
  case OP_ALL_REDUCE: break;
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER:
  case OP_ALL_TO_ALL: cg_emit_collective(g, v); break;
  case OP_COLLECTIVE_PERMUTE: cg_emit_permute(g, v); break;
  case OP_CONST:
  case OP_IOTA:
  case OP_UNARY:
  case OP_BINARY:
  case OP_SELECT:
  case OP_CAST:
  case OP_DROPOUT:
  case OP_BROADCAST:
  case OP_TRANSPOSE:
  case OP_SLICE:
  case OP_ONE_HOT:
  case OP_ANNOTATE:
  case OP_LOCAL_SLICE:
  case OP_PAD_MASK: emit_loop(g, v); break;
  default: die("no code for %s %%%d", op_name(v->op), v->id);
  }
}

/* ---- functions ------------------------------------------------------------ */

static LLVMValueRef add_function(CG *g, const char *name, LLVMTypeRef ft) {
  LLVMValueRef f = LLVMAddFunction(g->mod, name, ft);
  LLVMAttributeRef nounwind = LLVMCreateEnumAttribute(g->ctx, LLVMGetEnumAttributeKindForName("nounwind", 8), 0);
  LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, nounwind);
  return f;
}

/* Whether v has code: emit_value writes some for it. */
static bool has_code(const CG *g, const Value *v) {
  if (!g->pl->mat[v->id] || v->op == OP_PARAM || v->op == OP_INPUT || g->pl->loop[v->id] != v->id)
    return false;
  return v->op == OP_ALL_REDUCE || g->pl->root[v->id] == v->id || g->pl->inplace[v->id];
}

/* Opens the function fn (ctx, step): an entry block for allocas and the
 * loads of buffers, groups' indices and the arena on first use (g->ab), and
 * the body (g->b). */
static void open_function(CG *g, LLVMValueRef fn) {
  g->fn = fn;
  g->ctx_arg = LLVMGetParam(fn, 0);
  g->step_arg = LLVMGetParam(fn, 1);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(g->ab, entry);
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, fn, "body"));
  for (int i = 0; i < g->nloaded; i++)
    g->ptr[g->loaded[i]] = NULL;
  g->nloaded = 0;
  for (int i = 0; i < g->ntloaded; i++)
    g->tptr[g->tloaded[i]] = NULL;
  g->ntloaded = 0;
  g->arena = NULL;
  g->train_val = g->seed_val = NULL;
  g->slotted = false;
  g->nslot = 0;
  for (int k = 0; k < g->ngroups; k++)
    if (g->groups[k].slot >= 0)
      g->gidx[g->groups[k].slot] = LLVMBuildLoad2(g->ab, g->t_i64, g->gidx_glob[g->groups[k].slot], "gidx");
}

static void close_function(CG *g) {
  LLVMBuildRetVoid(g->b);
  LLVMBuildBr(g->ab, LLVMGetNextBasicBlock(LLVMGetEntryBasicBlock(g->fn)));
}

/* A kernel's text with its name and the numbers of the metadata it names
 * left out: two kernels with one text compute the same from the buffers
 * their slots give. (The one metadata codegen attaches is a loop's
 * llvm.loop, always {self, llvm.loop.vectorize.enable = true}, so where a
 * text names one is all there is to know of it.) */
static char *kernel_text(LLVMValueRef fn) {
  char *raw = LLVMPrintValueToString(fn), *s = strstr(raw, "{\n"); /* the body, past "define ... @name(...) {" */
  s = s ? s : raw;
  char *out = xmalloc(strlen(s) + 1), *o = out;
  while (*s) {
    if (*s == '!' && s[1] >= '0' && s[1] <= '9') { /* !123: !# */
      *o++ = '!', *o++ = '#';
      for (s++; *s >= '0' && *s <= '9'; s++)
        ;
    } else {
      *o++ = *s++;
    }
  }
  *o = '\0';
  LLVMDisposeMessage(raw);
  return out;
}

/* Every value with code gets an internal function kID.OP(ctx, step,
 * slots), never inlined: gsl_step and gsl_eval are lists of calls, and
 * LLVM optimizes one small function at a time (one function of every loop
 * nest of a Transformer's step took it a minute at -O2); a concat gets one
 * a piece (a stacked param's gradient: one a layer). A kernel reads and
 * writes its buffers through slots, each the address of the global
 * holding a buffer and an offset into it (a constant array its call site
 * passes), so it names no buffer or offset of its own: where a kernel
 * comes out as the text of one made before (each layer of a stack: the
 * same ops, shapes, dtypes and layouts on other buffers, or other slices
 * of one), it is dropped and that one is called with its slots. Compile
 * time then follows the distinct kernels, not the depth, as XLA's while
 * body and torch.compile's regional compilation do; fusion is untouched,
 * since a kernel is what it was. */
static void emit_kernels(CG *g) {
  const Program *p = g->p;
  LLVMTypeRef sp[3] = {g->t_ptr, g->t_i64, LLVMPointerType(g->t_slot, 0)};
  LLVMTypeRef ft = LLVMFunctionType(g->t_void, sp, 3, 0);
  unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
  char **texts = NULL;     /* per distinct kernel: its text */
  uint64_t *hashes = NULL; /* ... and its hash */
  LLVMValueRef *fns = NULL; /* ... and its function */
  int nmade = 0, cap = 0;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    g->kfirst[i] = g->ncalls;
    if (!has_code(g, v))
      continue;
    int pieces = v->op == OP_CONCAT ? v->nargs : 1;
    for (int j = 0; j < pieces; j++) {
      char name[64];
      snprintf(name, sizeof name, "k%d.%s", v->id, op_name(v->op));
      LLVMValueRef fn = add_function(g, name, ft);
      LLVMSetLinkage(fn, LLVMInternalLinkage); /* named in profiles */
      LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(g->ctx, noinline, 0));
      open_function(g, fn);
      g->slotted = true;
      g->slots_arg = LLVMGetParam(fn, 2);
      if (v->op == OP_CONCAT)
        cg_emit_concat_piece(g, v, j);
      else
        emit_value(g, v);
      close_function(g);
      if (g->ncalls == g->capcalls)
        g->calls = xrealloc(g->calls, sizeof *g->calls * (size_t)(g->capcalls = g->capcalls ? 2 * g->capcalls : 256));
      KernelCall *c = &g->calls[g->ncalls++];
      c->slots = xmalloc(sizeof(Slot) * ((size_t)g->nslot + 1));
      memcpy(c->slots, g->slot, sizeof(Slot) * (size_t)g->nslot);
      c->nslots = g->nslot;
      c->array = NULL;
      char *text = kernel_text(fn);
      uint64_t h = cg_fnv1a('k', text, strlen(text));
      int same = -1;
      for (int k = 0; k < nmade && same < 0; k++)
        if (hashes[k] == h && !strcmp(texts[k], text))
          same = k;
      if (same >= 0) {
        LLVMDeleteFunction(fn);
        c->fn = fns[same];
        free(text);
        continue;
      }
      if (nmade == cap) {
        cap = cap ? 2 * cap : 256;
        texts = xrealloc(texts, sizeof *texts * (size_t)cap);
        hashes = xrealloc(hashes, sizeof *hashes * (size_t)cap);
        fns = xrealloc(fns, sizeof *fns * (size_t)cap);
      }
      texts[nmade] = text, hashes[nmade] = h, fns[nmade] = fn;
      c->fn = fn;
      nmade++;
    }
  }
  g->kfirst[p->nvalues] = g->ncalls;
  g->nkernels = nmade;
  for (int k = 0; k < nmade; k++)
    free(texts[k]);
  free(texts);
  free(hashes);
  free(fns);
}

/* The device's index in every group whose index the code reads, into the
 * private globals the kernels load it from: once per call of gsl_step or
 * gsl_eval (the groups' communicators exist only after gsl_setup). */
static void store_group_indices(CG *g) {
  for (int k = 0; k < g->ngroups; k++)
    if (g->groups[k].slot >= 0) {
      LLVMValueRef a[2] = {g->ctx_arg, LLVMBuildLoad2(g->b, g->t_i32, g->groups[k].id, "group")};
      LLVMBuildStore(g->b, cg_call(g, "gslrt_group_index", g->t_i64, 2, a), g->gidx_glob[g->groups[k].slot]);
    }
}

/* Whether the kernels about to run draw inline (dropout): training says
 * so (gsl_step of a program that trains; not gsl_eval or gsl_forward,
 * where dropout is the identity), and the run's seed keys the draws; both
 * into the private globals the kernels load them from, once per call of
 * gsl_step, gsl_eval or gsl_forward. */
static void store_draw_state(CG *g, bool training) {
  if (!g->train_glob)
    return;
  LLVMBuildStore(g->b, cg_ci32(g, training), g->train_glob);
  LLVMBuildStore(g->b, cg_call(g, "gslrt_rng_seed", g->t_i64, 1, &g->ctx_arg), g->seed_glob);
}

/* Calls the kernels of the values need marks (every one when need is
 * NULL), in program order. */
/* The buffer globals (each root value's with a buffer, each temporary's),
 * made after the kernels, which name none of them, so that comparing a
 * kernel with the others (LLVM numbering the module's globals to print
 * it) costs what the kernels cost, not the depth; then each value's slots
 * as a constant array of {the address of its buffer's global, offset}. */
static void make_buffers(CG *g) {
  const Program *p = g->p;
  for (int i = 0; i < p->nvalues; i++)
    if (g->pl->mat[i] && g->pl->root[i] == i) {
      char name[64];
      snprintf(name, sizeof name, "buf.%d", i);
      g->glob[i] = LLVMAddGlobal(g->mod, g->t_ptr, name);
      LLVMSetInitializer(g->glob[i], LLVMConstNull(g->t_ptr));
      LLVMSetLinkage(g->glob[i], LLVMPrivateLinkage);
    }
  for (int t = 0; t < g->pl->ntemps; t++) {
    g->tglob[t] = LLVMAddGlobal(g->mod, g->t_ptr, "tmp");
    LLVMSetInitializer(g->tglob[t], LLVMConstNull(g->t_ptr));
    LLVMSetLinkage(g->tglob[t], LLVMPrivateLinkage);
  }
  for (int i = 0; i < g->ncalls; i++) {
    KernelCall *c = &g->calls[i];
    LLVMValueRef *el = xcalloc((size_t)c->nslots + 1, sizeof *el);
    for (int k = 0; k < c->nslots; k++) {
      const Slot *sl = &c->slots[k];
      LLVMValueRef f[2] = {sl->buf == SLOT_PARAM ? LLVMConstNull(LLVMPointerType(g->t_ptr, 0))
                           : sl->buf >= 0           ? g->glob[sl->buf]
                                                    : g->tglob[-1 - sl->buf],
                           cg_ci64(g, sl->off)};
      if (!f[0])
        die("a kernel's slot names value %%%d, which has no buffer", sl->buf);
      el[k] = LLVMConstNamedStruct(g->t_slot, f, 2);
    }
    LLVMValueRef init = LLVMConstArray(g->t_slot, el, (unsigned)c->nslots);
    free(el);
    LLVMValueRef arr = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "slots");
    LLVMSetInitializer(arr, init);
    LLVMSetGlobalConstant(arr, 1);
    LLVMSetLinkage(arr, LLVMPrivateLinkage);
    c->array = LLVMConstBitCast(arr, LLVMPointerType(g->t_slot, 0));
  }
}

static void call_kernels(CG *g, const bool *need) {
  LLVMTypeRef sp[3] = {g->t_ptr, g->t_i64, LLVMPointerType(g->t_slot, 0)};
  LLVMTypeRef ft = LLVMFunctionType(g->t_void, sp, 3, 0);
  for (int i = 0; i < g->p->nvalues; i++)
    for (int k = g->kfirst[i]; k < g->kfirst[i + 1] && (!need || need[i]); k++) {
      if (k == g->kfirst[i])
        cg_emit_collective_site(g, g->p->values[i]);
      LLVMValueRef a[3] = {g->ctx_arg, g->step_arg, g->calls[k].array};
      LLVMBuildCall2(g->b, ft, g->calls[k].fn, a, 3, "");
    }
}

/* The step's end, for a program that trains: the loss and the signals
 * reported to the log (signal k is the k-th OUT_SIGNAL root, as
 * emit_setup declares them), then every update copied into its param's or
 * state's buffer (after all the step's reads of the old contents). */
static void emit_roots(CG *g) {
  const Program *p = g->p;
  int nsig = 0;
  for (int i = 0; i < p->noutputs; i++) {
    const Output *o = &p->outputs[i];
    if (o->kind == OUT_LOSS || o->kind == OUT_SIGNAL) {
      if (p->spmd && (o->value->sh.partial || (o->value->shape.rank && o->value->sh.naxes[0])))
        die("%s is a partial sum or cut", o->name);
      if (o->kind == OUT_LOSS) {
        LLVMValueRef a[2] = {g->ctx_arg, cg_load_lin(g, cg_buffer_of(g, o->value), DT_F32, cg_ci64(g, 0))};
        cg_call(g, "gslrt_report_loss", g->t_void, 2, a);
      } else {
        LLVMValueRef a[3] = {g->ctx_arg, cg_ci32(g, nsig++),
                             LLVMBuildBitCast(g->b, cg_buffer_of(g, o->value), g->t_ptr, "")};
        cg_call(g, "gslrt_report_signal", g->t_void, 3, a);
      }
    } else if (o->kind == OUT_UPDATE) {
      const Value *t = p->tensors[o->tensor].value;
      if (g->pl->root[t->id] == g->pl->root[o->value->id])
        continue;
      if (!shape_eq(&t->shape, &o->value->shape) || (p->spmd && !shard_eq(&t->sh, &o->value->sh, t->shape.rank)))
        die("the update of %s is not laid out as it", p->tensors[o->tensor].name);
      LLVMBuildMemCpy(g->b, cg_buffer_of(g, t), 64, cg_buffer_of(g, o->value), 4,
                      cg_ci64(g, 4 * shape_elems(&t->shape)));
    }
  }
}

/* gsl_step: every kernel, then the roots. */
static void emit_step(CG *g, LLVMValueRef fn) {
  open_function(g, fn);
  store_group_indices(g);
  store_draw_state(g, g->p->train.loss != NULL);
  call_kernels(g, NULL);
  emit_roots(g);
  close_function(g);
}

/* Whether output o is one gsl_eval reports beside the loss: an f32 scalar
 * `output`, unless it is named loss (the runtime's eval_loss is the
 * training loss's). */
static bool is_eval_value(const Output *o) {
  return o->kind == OUT_VALUE && o->value->dtype == DT_F32 && o->value->shape.rank == 0 &&
         strcmp(o->name, "loss") != 0;
}

/* Whether output o is one gsl_forward computes: every `output` value (a
 * param among them has no code). */
static bool is_value_output(const Output *o) { return o->kind == OUT_VALUE; }

/* Whether output o is one gsl_eval computes: the loss, or an eval value. */
static bool is_eval_root(const Output *o) { return o->kind == OUT_LOSS || is_eval_value(o); }

/* Per value: whether a forward pass whose results are the outputs root
 * picks computes it (every value they depend on, and every value of a
 * loop nest computing one of them with others, Plan.loop, and what those
 * depend on; no update is among them); what names that pass in a
 * compiler bug's message. */
static bool *forward_need(const CG *g, bool (*root)(const Output *), const char *what) {
  const Program *p = g->p;
  const int *loop = g->pl->loop;
  bool *need = xcalloc((size_t)(p->nvalues > 0 ? p->nvalues : 1), sizeof *need);
  for (int i = 0; i < p->noutputs; i++)
    if (root(&p->outputs[i]))
      need[p->outputs[i].value->id] = true;
  for (bool again = true; again;) { /* again while a loop's last value is found needed late */
    again = false;
    for (int i = p->nvalues - 1; i >= 0; i--) {
      need[i] = need[i] || need[loop[i]];
      if (!need[i])
        continue;
      const Value *v = p->values[i];
      for (int k = 0; k < v->nargs; k++)
        need[v->args[k]->id] = true;
      need[g->pl->root[i]] = true;
      again = again || !need[loop[i]];
      need[loop[i]] = true;
    }
  }
  for (int i = 0; i < p->nvalues; i++)
    if (need[i] && p->values[i]->pass == PASS_UPDATE)
      die("%s needs %%%d of the update", what, i);
  return need;
}

/* Per value: whether gsl_eval computes it, for the loss and the eval
 * values (the forward pass). */
static bool *eval_need(const CG *g) { return forward_need(g, is_eval_root, "the evaluation of the loss"); }

/* gsl_eval(ctx, key, values): the kernels the loss and the eval values
 * depend on, then the loss into values[0] and the eval values after it.
 * The buffers are the step's own: a subset of a step's code, run in the
 * step's order, reads nothing that the step would not have kept live. */
static void emit_eval(CG *g, LLVMValueRef fn) {
  const Program *p = g->p;
  bool *need = eval_need(g);
  open_function(g, fn);
  LLVMValueRef values = LLVMGetParam(fn, 2);
  store_group_indices(g);
  store_draw_state(g, false);
  call_kernels(g, need);
  int n = 1;
  for (int i = 0; i < p->noutputs; i++) {
    const Output *o = &p->outputs[i];
    if (o->kind != OUT_LOSS && !is_eval_value(o))
      continue;
    if (p->spmd && o->value->sh.partial)
      die("%s is a partial sum", o->name);
    LLVMValueRef x = cg_load_lin(g, cg_buffer_of(g, o->value), DT_F32, cg_ci64(g, 0));
    cg_store_lin(g, values, DT_F32, cg_ci64(g, o->kind == OUT_LOSS ? 0 : n++), x);
  }
  close_function(g);
  free(need);
}

/* gsl_forward(ctx, key): the kernels the program's `output` values depend
 * on, nothing of the backward pass or the update, so the outputs' buffers
 * hold what the params as they stand give on the inputs as bound (text
 * generation, runtime/generate.c). The step's buffers, as gsl_eval. */
static void emit_forward(CG *g, LLVMValueRef fn) {
  bool *need = forward_need(g, is_value_output, "the forward pass");
  open_function(g, fn);
  store_group_indices(g);
  store_draw_state(g, false);
  call_kernels(g, need);
  close_function(g);
  free(need);
}

/* A check the runtime makes on an input's elements as it reads them. */
typedef struct IndexCheck {
  IndexSource src;  /* the input and the box of its elements that are indices */
  int64_t rows;     /* of the table they index */
  bool eval;        /* gsl_eval runs the op too (else only gsl_step does) */
  const Value *op;  /* the gather or scatter_add */
} IndexCheck;

/* The indices of each gather and scatter_add that are an input's elements
 * unchanged (ir_index_sources), declared in gsl_setup for the runtime to
 * check as it reads them from files, naming the file and the element
 * (gslrt_declare_index_check); the in-kernel check (cg_ops.c) stays for
 * computed indices. Ops in program order: a box already checked against as
 * few rows, in every phase the new op runs in, is not declared again (the
 * backward pass's scatter_add after its gather). */
static void emit_index_checks(CG *g, LLVMValueRef ctx) {
  const Program *p = g->p;
  bool *in_eval = p->train.loss ? eval_need(g) : NULL;
  IndexCheck *cs = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (v->op != OP_GATHER && v->op != OP_SCATTER_ADD)
      continue;
    IndexSource src[IR_MAX_SOURCES];
    int ns = ir_index_sources(v->args[1], src);
    int64_t rows = v->op == OP_GATHER ? v->args[0]->shape.d[0] : v->shape.d[0];
    bool ev = in_eval && in_eval[i];
    for (int k = 0; k < ns; k++) {
      int rank = p->tensors[src[k].tensor].shape.rank, j = 0;
      while (j < n && !(cs[j].src.tensor == src[k].tensor &&
                        !memcmp(cs[j].src.lo, src[k].lo, sizeof(int64_t) * (size_t)rank) &&
                        !memcmp(cs[j].src.hi, src[k].hi, sizeof(int64_t) * (size_t)rank) && cs[j].rows <= rows &&
                        (cs[j].eval || !ev)))
        j++;
      if (j < n)
        continue;
      if (n == cap) {
        cap = cap ? 2 * cap : 8;
        cs = xrealloc(cs, (size_t)cap * sizeof *cs);
      }
      cs[n++] = (IndexCheck){src[k], rows, ev, v};
    }
  }
  for (int j = 0; j < n; j++) {
    const Tensor *t = &p->tensors[cs[j].src.tensor];
    char what[512];
    cg_op_where(cs[j].op, what, sizeof what);
    LLVMValueRef a[7] = {ctx,
                         cg_cstr(g, t->name),
                         cg_ci64(g, cs[j].rows),
                         cg_const_array(g, g->t_i64, t->shape.rank, cs[j].src.lo),
                         cg_const_array(g, g->t_i64, t->shape.rank, cs[j].src.hi),
                         cg_cstr(g, what),
                         cg_ci32(g, cs[j].eval)};
    cg_call(g, "gslrt_declare_index_check", g->t_void, 7, a);
  }
  free(cs);
  free(in_eval);
}

static void emit_setup(CG *g, LLVMValueRef fn) {
  const Program *p = g->p;
  LLVMBuilderRef b = g->b;
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
  LLVMValueRef ctx = LLVMGetParam(fn, 0);
  for (int i = 0; i < p->mesh.naxes; i++) {
    LLVMValueRef a[3] = {ctx, cg_cstr(g, p->mesh.name[i]), cg_ci64(g, p->mesh.size[i])};
    cg_call(g, "gslrt_declare_axis", g->t_void, 3, a);
  }
  for (int k = 0; k < g->ngroups; k++) {
    const Group *gr = &g->groups[k];
    int64_t axes[GSL_MAX_AXES];
    for (int j = 0; j < gr->n; j++)
      axes[j] = gr->axes[j];
    LLVMValueRef a[3] = {ctx, cg_ci32(g, gr->n), cg_const_array(g, g->t_i32, gr->n, axes)};
    LLVMBuildStore(b, cg_call(g, "gslrt_declare_group", g->t_i32, 3, a), gr->id);
  }
  for (int i = 0; i < p->ntensors; i++) {
    const Tensor *t = &p->tensors[i];
    LLVMValueRef a[13] = {ctx,
                          cg_cstr(g, t->name),
                          cg_ci32(g, t->kind == TK_INPUT ? 1 : t->kind == TK_STATE ? 2 : 0),
                          cg_ci32(g, cg_rt_dtype(t->dtype)),
                          cg_ci32(g, t->shape.rank),
                          cg_shape_array(g, &t->shape),
                          dim_axes_array(g, t->shape.rank, p->spmd ? &t->sh : NULL),
                          g->glob[t->value->id],
                          cg_ci32(g, t->init),
                          LLVMConstReal(g->t_f64, t->a),
                          LLVMConstReal(g->t_f64, t->b),
                          LLVMConstInt(g->t_i32, t->stream, 0),
                          cg_ci32(g, t->frozen)};
    cg_call(g, "gslrt_declare_tensor", g->t_void, 13, a);
  }
  emit_index_checks(g, ctx);
  if (p->train.loss) {
    /* the optimizer, its hyperparameters, schedule and clipping, for the
     * checkpoints' manifest */
    LLVMValueRef a[2] = {ctx, cg_cstr(g, ir_optim_desc(p->arena, &p->train))};
    cg_call(g, "gslrt_declare_optimizer", g->t_void, 2, a);
  }
  for (int i = 0; i < p->noutputs; i++)
    if (p->outputs[i].kind == OUT_SIGNAL) {
      const Output *o = &p->outputs[i];
      LLVMValueRef a[4] = {ctx, cg_cstr(g, o->name), o->log ? cg_cstr(g, o->log) : LLVMConstNull(g->t_ptr),
                           cg_ci32(g, o->value->shape.rank ? (int32_t)o->value->shape.d[0] : 0)};
      cg_call(g, "gslrt_declare_signal", g->t_void, 4, a);
    }
  if (g->pl->arena_bytes > 0) {
    LLVMValueRef a[2] = {ctx, cg_ci64(g, g->pl->arena_bytes)};
    LLVMValueRef arena = cg_call(g, "gslrt_alloc", g->t_ptr, 2, a);
    LLVMSetValueName2(arena, "arena", 5);
    LLVMBuildStore(b, arena, g->arena_glob);
    for (int i = 0; i < p->nvalues; i++)
      if (g->pl->mat[i] && g->pl->root[i] == i && g->pl->offset[i] >= 0) {
        LLVMValueRef off = cg_ci64(g, g->pl->offset[i]);
        LLVMBuildStore(b, LLVMBuildInBoundsGEP2(b, LLVMInt8TypeInContext(g->ctx), arena, &off, 1, ""), g->glob[i]);
      }
    for (int t = 0; t < g->pl->ntemps; t++) {
      LLVMValueRef off = cg_ci64(g, g->pl->temps[t].offset);
      LLVMBuildStore(b, LLVMBuildInBoundsGEP2(b, LLVMInt8TypeInContext(g->ctx), arena, &off, 1, ""), g->tglob[t]);
    }
  }
  for (int i = 0; i < p->noutputs; i++) {
    const Value *v = p->outputs[i].value;
    if (p->outputs[i].kind != OUT_VALUE)
      continue;
    if (p->spmd && v->sh.partial)
      die("output %s is a partial sum", p->outputs[i].name);
    LLVMValueRef a[7] = {ctx,
                         cg_cstr(g, p->outputs[i].name),
                         cg_ci32(g, cg_rt_dtype(v->dtype)),
                         cg_ci32(g, v->shape.rank),
                         cg_shape_array(g, p->spmd ? &v->gshape : &v->shape),
                         dim_axes_array(g, v->shape.rank, p->spmd ? &v->sh : NULL),
                         g->glob[g->pl->root[v->id]]};
    cg_call(g, "gslrt_declare_output", g->t_void, 7, a);
  }
  for (int i = 0; p->train.loss && i < p->noutputs; i++)
    if (is_eval_value(&p->outputs[i])) {
      LLVMValueRef a[2] = {ctx, cg_cstr(g, p->outputs[i].name)};
      cg_call(g, "gslrt_declare_eval", g->t_void, 2, a);
    }
  LLVMBuildRetVoid(b);
}

/* main: gslrt_main with the program's info (gslrt_program_info; eval NULL
 * for a program that does not train). */
static void emit_main(CG *g, LLVMValueRef setup, LLVMValueRef step, LLVMValueRef eval, LLVMValueRef forward) {
#ifdef PACKAGE_VERSION
  const char *version = PACKAGE_VERSION;
#else
  const char *version = "0.1.0";
#endif
  LLVMValueRef fields[9] = {cg_cstr(g, g->p->path), cg_cstr(g, version), setup, step,
                            eval ? eval : LLVMConstNull(g->t_ptr),
                            cg_ci32(g, g->p->precision == DT_BF16 ? GSLRT_BF16 : GSLRT_F32), forward,
                            g->build ? cg_cstr(g, g->build) : LLVMConstNull(g->t_ptr), cg_ci32(g, g->p->same_bits)};
  LLVMValueRef init = LLVMConstStructInContext(g->ctx, fields, 9, 0);
  LLVMValueRef info = LLVMAddGlobal(g->mod, LLVMTypeOf(init), "gsl_program_info");
  LLVMSetInitializer(info, init);
  LLVMSetGlobalConstant(info, 1);
  LLVMSetLinkage(info, LLVMPrivateLinkage);

  LLVMTypeRef pp = LLVMPointerType(g->t_ptr, 0);
  LLVMTypeRef mp[2] = {g->t_i32, pp};
  LLVMValueRef fn = add_function(g, "main", LLVMFunctionType(g->t_i32, mp, 2, 0));
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
  LLVMValueRef a[3] = {LLVMGetParam(fn, 0), LLVMGetParam(fn, 1), info};
  LLVMBuildRet(g->b, cg_call(g, "gslrt_main", g->t_i32, 3, a));
}

/* ---- driving LLVM ----------------------------------------------------------- */

/* LLVM's errors become ours; its warnings and remarks (for instance a loop
 * the vectorizer was asked to, but could not, vectorize) are dropped. */
static void on_llvm_diag(LLVMDiagnosticInfoRef di, void *cg) {
  if (LLVMGetDiagInfoSeverity(di) != LLVMDSError)
    return;
  CG *g = cg;
  char *msg = LLVMGetDiagInfoDescription(di);
  diag_fatal(g->diag, "LLVM: %s", msg);
  LLVMDisposeMessage(msg);
  g->llvm_failed = true;
}

static LLVMTargetMachineRef host_machine(int opt_level, Diag *d) {
  static const LLVMCodeGenOptLevel levels[] = {LLVMCodeGenLevelNone, LLVMCodeGenLevelLess,
                                               LLVMCodeGenLevelDefault, LLVMCodeGenLevelAggressive};
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  char *triple = LLVMGetDefaultTargetTriple(), *err = NULL;
  LLVMTargetRef target;
  LLVMTargetMachineRef tm = NULL;
  if (LLVMGetTargetFromTriple(triple, &target, &err)) {
    diag_fatal(d, "no LLVM target for %s: %s", triple, err);
    LLVMDisposeMessage(err);
  } else {
    char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
    tm = LLVMCreateTargetMachine(target, triple, cpu, features, levels[opt_level], LLVMRelocPIC,
                                 LLVMCodeModelDefault);
    if (!tm)
      diag_fatal(d, "cannot create an LLVM target machine for %s (%s)", triple, cpu);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
  }
  LLVMDisposeMessage(triple);
  return tm;
}

static bool optimize(LLVMModuleRef mod, LLVMTargetMachineRef tm, int level, Diag *d) {
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
    diag_fatal(d, "LLVM pass pipeline %s: %s", pipeline, msg);
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
    diag_fatal(g->diag, "cannot write %s: %s", opt->out, err ? err : "unknown error");
    LLVMDisposeMessage(err);
    return false;
  }
  return true;
}

static void build_module(CG *g) {
  const Program *p = g->p;
  g->arena_glob = LLVMAddGlobal(g->mod, g->t_ptr, "arena");
  LLVMSetInitializer(g->arena_glob, LLVMConstNull(g->t_ptr));
  LLVMSetLinkage(g->arena_glob, LLVMPrivateLinkage);
  for (int k = 0; k < g->ngroups; k++) {
    g->groups[k].id = LLVMAddGlobal(g->mod, g->t_i32, "group");
    LLVMSetInitializer(g->groups[k].id, cg_ci32(g, -1));
    LLVMSetLinkage(g->groups[k].id, LLVMPrivateLinkage);
  }
  for (int k = 0; k < g->nslots; k++) {
    g->gidx_glob[k] = LLVMAddGlobal(g->mod, g->t_i64, "gidx");
    LLVMSetInitializer(g->gidx_glob[k], cg_ci64(g, 0));
    LLVMSetLinkage(g->gidx_glob[k], LLVMPrivateLinkage);
  }
  for (int i = 0; i < p->nvalues && !g->train_glob; i++)
    if (p->values[i]->op == OP_DROPOUT) {
      g->train_glob = LLVMAddGlobal(g->mod, g->t_i32, "training");
      LLVMSetInitializer(g->train_glob, cg_ci32(g, 0));
      LLVMSetLinkage(g->train_glob, LLVMPrivateLinkage);
      g->seed_glob = LLVMAddGlobal(g->mod, g->t_i64, "seed");
      LLVMSetInitializer(g->seed_glob, cg_ci64(g, 0));
      LLVMSetLinkage(g->seed_glob, LLVMPrivateLinkage);
    }
  LLVMTypeRef sp[3] = {g->t_ptr, g->t_i64, LLVMPointerType(g->t_f32, 0)};
  LLVMValueRef setup = add_function(g, "gsl_setup", LLVMFunctionType(g->t_void, sp, 1, 0));
  LLVMValueRef step = add_function(g, "gsl_step", LLVMFunctionType(g->t_void, sp, 2, 0));
  LLVMValueRef eval = p->train.loss ? add_function(g, "gsl_eval", LLVMFunctionType(g->t_void, sp, 3, 0)) : NULL;
  LLVMValueRef forward = add_function(g, "gsl_forward", LLVMFunctionType(g->t_void, sp, 2, 0));
  emit_kernels(g);
  make_buffers(g);
  emit_step(g, step);
  if (eval)
    emit_eval(g, eval);
  emit_forward(g, forward);
  emit_setup(g, setup);
  emit_main(g, setup, step, eval, forward);
}

/* What the code relies on and the verifier already checks: a broken one is
 * a compiler bug. */
static void check_program(const Program *p) {
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    const OpInfo *info = ir_op(v->op);
    if (v->op == OP_REDUCE && v->fn == RF_ARGMAX && __builtin_popcount(v->rmask) != 1)
      die("argmax %%%d reduces %d dimensions", v->id, __builtin_popcount(v->rmask));
    if (v->op == OP_RNG && v->dtype != DT_F32)
      die("random draw %%%d is not f32", v->id);
    if (v->op == OP_ALL_REDUCE && v->fn != RF_SUM && v->fn != RF_MAX)
      die("all_reduce %%%d neither sums nor takes the maximum", v->id);
    if (info->cls == OC_COLLECTIVE && v->op != OP_ALL_REDUCE && v->op != OP_ALL_GATHER &&
        v->op != OP_REDUCE_SCATTER && v->op != OP_ALL_TO_ALL && v->op != OP_COLLECTIVE_PERMUTE)
      die("no code for collective %s", op_name(v->op));
  }
}

bool cg_emit(const Program *p, const Plan *pl, const CodegenOptions *opt, Diag *d) {
  if (opt->opt_level < 0 || opt->opt_level > 3) {
    diag_fatal(d, "optimization level %d out of range 0..3", opt->opt_level);
    return false;
  }
  check_program(p);
  LLVMTargetMachineRef tm = host_machine(opt->opt_level, d);
  if (!tm)
    return false;
  CG g;
  memset(&g, 0, sizeof g);
  bool ok = false;
  g.p = p;
  g.build = opt->build;
  g.diag = d;
  g.ctx = LLVMContextCreate();
  LLVMContextSetDiagnosticHandler(g.ctx, on_llvm_diag, &g);
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
  g.t_slot = LLVMStructCreateNamed(g.ctx, "slot");
  LLVMTypeRef slot_fields[2] = {LLVMPointerType(g.t_ptr, 0), g.t_i64};
  LLVMStructSetBody(g.t_slot, slot_fields, 2, 0);
  g.md_loop = LLVMGetMDKindIDInContext(g.ctx, "llvm.loop", 9);
  size_t n = (size_t)(p->nvalues > 0 ? p->nvalues : 1);
  g.pl = pl;
  if (g.pl->nvalues != p->nvalues)
    die("the buffer plan is of another program");
  g.glob = xcalloc(n, sizeof *g.glob);
  g.ptr = xcalloc(n, sizeof *g.ptr);
  g.vgroup = xcalloc(n, sizeof *g.vgroup);
  g.vgroup2 = xcalloc(n, sizeof *g.vgroup2);
  g.pre = xcalloc(n, sizeof *g.pre);
  g.pre_ids = xcalloc(n, sizeof *g.pre_ids);
  g.loop_next = xmalloc(n * sizeof *g.loop_next);
  g.loop_first = xmalloc(n * sizeof *g.loop_first);
  for (int i = 0; i < p->nvalues; i++)
    g.loop_first[i] = i;
  for (int i = p->nvalues - 1; i >= 0; i--)
    if (pl->loop[i] != i) {
      g.loop_next[i] = g.loop_first[pl->loop[i]];
      g.loop_first[pl->loop[i]] = i;
    }
  g.kfirst = xcalloc(n + 1, sizeof *g.kfirst);
  g.loaded = xcalloc(n, sizeof *g.loaded);

  size_t nt = (size_t)pl->ntemps + 1;
  g.tglob = xcalloc(nt, sizeof *g.tglob);
  g.tptr = xcalloc(nt, sizeof *g.tptr);
  g.tloaded = xcalloc(nt, sizeof *g.tloaded);

  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(g.mod, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(td);
  LLVMSetDataLayout(g.mod, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetData(td);

  if (collect_groups(&g)) {
    build_module(&g);
    char *msg = NULL;
    if (LLVMVerifyModule(g.mod, LLVMReturnStatusAction, &msg))
      die("LLVM module does not verify: %s", msg);
    LLVMDisposeMessage(msg);
    ok = optimize(g.mod, tm, opt->opt_level, d) && !g.llvm_failed && write_output(&g, tm, opt) && !g.llvm_failed;
  }

  LLVMDisposeBuilder(g.b);
  LLVMDisposeBuilder(g.ab);
  LLVMDisposeModule(g.mod);
  LLVMContextDispose(g.ctx);
  LLVMDisposeTargetMachine(tm);
  free(g.glob);
  free(g.ptr);
  free(g.groups);
  free(g.vgroup);
  free(g.vgroup2);
  free(g.pre);
  free(g.pre_ids);
  free(g.loop_next);
  free(g.loop_first);
  free(g.kfirst);
  for (int i = 0; i < g.ncalls; i++)
    free(g.calls[i].slots);
  free(g.calls);
  free(g.loaded);

  free(g.tglob);
  free(g.tptr);
  free(g.tloaded);
  free(g.slot);
  cg_free_interned(&g);
  return ok;
}

