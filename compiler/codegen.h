/* codegen.h — codegen's private header: the state of one cg_emit and the
 * functions its files share. The files form a stack, each calling only
 * those below it:
 *   codegen.c                              the module, kernels, gsl_step, setup
 *   cg_ops.c  cg_einsum.c  cg_collectives.c  whole-buffer ops (none calls another)
 *   cg_fuse.c                              fused elementwise expressions
 *   cg_math.c                              scalar math
 *   cg_loops.c                             LLVM types, constants, calls, loops,
 *                                          indices, buffers, group indices
 * How a value is lowered where the plan must agree (an einsum's GEMM and
 * its temporaries, a reshape as an index map) is decided below the stack,
 * in lower.c (gslc.h), which knows no LLVM and which plan.c reads too.
 * tests/layers.sh checks the stack and that plan.c calls none of it.
 * Sections follow the stack from the bottom, one per file. */
#ifndef GSLC_CODEGEN_H
#define GSLC_CODEGEN_H

#include <limits.h>

#include <llvm-c/Core.h>

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
  int64_t n;              /* trip count, at least 1 (a loop over a constant range) */
  LLVMValueRef end;       /* a loop over a range [lo, end) known at run time (cg_loop_open_range), else NULL */
  LLVMBasicBlockRef skip; /* with end: the block after it, where an empty range goes straight */
} Loop;

#define SLOT_PARAM INT_MIN

/* A kernel's slot: a buffer, off bytes on; or a number. */
typedef struct Slot {
  int buf;           /* the buffer: a root value's id, -1 - t for the plan's temporary t, or
                        SLOT_PARAM: no buffer, off is a number the code reads (cg_param) */
  int64_t off;       /* bytes past its start, or the number */
  LLVMValueRef ptr;  /* in the kernel, the pointer, loaded in its entry block */
} Slot;

/* A call of a kernel: one value's code, or one piece of a concat's. */
typedef struct KernelCall {
  LLVMValueRef fn;    /* the kernel (one function serves every call whose code is the same) */
  Slot *slots;        /* what its slots name */
  int nslots;
  LLVMValueRef array; /* those slots as a constant array of {global's address, offset} (make_buffers) */
} KernelCall;

/* The state of one cg_emit. */
typedef struct CG {
  const Program *p;       /* what is being compiled */
  const Plan *pl;         /* its buffer plan: who has a buffer, where in the arena */
  const char *build;      /* gslrt_program_info's build (CodegenOptions), or NULL */
  Diag *diag;             /* where its errors, and LLVM's, are reported */
  bool llvm_failed;       /* LLVM reported an error (on_llvm_diag) */
  LLVMContextRef ctx;     /* private context */
  LLVMModuleRef mod;      /* the module being built */
  LLVMBuilderRef b;       /* the builder for code */
  LLVMBuilderRef ab;      /* the builder for allocas, at the end of gsl_step's entry block */
  LLVMTypeRef t_void, t_i1, t_i32, t_i64, t_f32, t_f64; /* scalar types */
  LLVMTypeRef t_ptr;      /* i8*: buffers, ctx, strings */
  unsigned md_loop;       /* kind id of !llvm.loop */
  LLVMValueRef arena_glob; /* private global: the arena gsl_setup allocates */
  LLVMValueRef arena;     /* in the function being emitted, the arena (i8*), loaded on first use */
  LLVMValueRef *glob;     /* per root value: the private global holding its buffer */
  LLVMValueRef *ptr;      /* per root value: in the function being emitted, its buffer as a typed
                             pointer, loaded on first use (cg_buffer_of), else NULL */
  int *loaded, nloaded;   /* the values with ptr set, to clear for the next function */
  LLVMValueRef fn;        /* the function being emitted (a kernel, gsl_step or gsl_eval) */
  LLVMValueRef ctx_arg;   /* its ctx */
  LLVMValueRef step_arg;  /* its step (gsl_eval's key) */
  KernelCall *calls;      /* every kernel call gsl_step makes, in program order (emit_kernels) */
  int ncalls, capcalls;   /* in use, allocated */
  int *kfirst;            /* per value: its first call in calls (its last: the next value's first - 1) */
  bool slotted;           /* the function being emitted is a kernel: its buffers come from its slots */
  LLVMValueRef slots_arg; /* in a kernel, its slots (a pointer to the first {i8**, i64}) */
  LLVMTypeRef t_slot;     /* a slot: {the address of a global holding a buffer, a byte offset} */
  struct Slot *slot;      /* in a kernel, what its slots name, in the order first used */
  int nslot, capslot;     /* in use, allocated */
  LLVMValueRef *tglob;    /* per plan temporary: the private global holding its place in the arena */
  LLVMValueRef *tptr;     /* per plan temporary: in a kernel, its pointer, loaded on first use */
  int *tloaded, ntloaded; /* the temporaries with tptr set, to clear for the next function */
  int nkernels;           /* distinct kernels emitted (emit_kernels) */
  struct Interned *interned; /* constants made once a module (cg_cstr, cg_const_array) */
  int ninterned, capinterned;
  LLVMValueRef gidx_glob[CG_MAXG]; /* private i64 globals: the device's index in each slot's group */
  LLVMValueRef train_glob; /* private i32 global: 1 in gsl_step of a program that trains, else 0 (dropout
                              draws only then); NULL in a program without a dropout */
  LLVMValueRef seed_glob;  /* private i64 global: the run's --seed, the key of the draws made inline */
  LLVMValueRef train_val, seed_val; /* in the function being emitted, those loaded on first use, else NULL */
  LLVMValueRef iv[CG_MAXL]; /* counters of the open loops, outermost first */
  int niv;                /* open loops */
  Group *groups;          /* the groups of mesh axes the code names */
  int ngroups, capgroups; /* in use, allocated */
  int *vgroup;            /* per value: its group (collectives, local slices), else -1 */
  int *vgroup2;           /* per value: COLLECTIVE_PERMUTE's target-order group, else -1 */
  LLVMValueRef gidx[CG_MAXG]; /* in a kernel, the device's (i64) index in the group of each slot */
  int nslots;             /* slots in use */
  LLVMValueRef *pre;      /* per value: its element in the loop nest being emitted (cg_emit_map), held
                             in a register: a one-element buffer's, loaded before the nest, or one the
                             nest computed for a later value of it; else NULL */
  int *pre_ids, npre;     /* the values with pre set, to clear after the nest */
  int *loop_next;         /* per value the plan computes in a loop of several (Plan.loop): the next one
                             in program order, -1: the loop's last */
  int *loop_first;        /* per loop's last value: the loop's first value */
} CG;

/* ---- cg_loops.c: the base: types, constants, calls, loops, indices, buffers ---- */

LLVMTypeRef cg_elem_type(CG *g, DType dt); /* in memory: bf16 is i16 */
LLVMTypeRef cg_reg_type(CG *g, DType dt);  /* in registers: bf16 is computed as f32 */
/* an f32 rounded to the nearest bf16 (ties to even; NaN kept), still as f32 */
LLVMValueRef cg_round_bf16(CG *g, LLVMValueRef x);
int32_t cg_rt_dtype(DType dt); /* the runtime's code for dt (gslrt.h) */
LLVMValueRef cg_ci64(CG *g, int64_t v);
LLVMValueRef cg_ci32(CG *g, int64_t v);
LLVMValueRef cg_cf32(CG *g, double v);
/* a call of the function name (declared on first use) returning ret */
LLVMValueRef cg_call(CG *g, const char *name, LLVMTypeRef ret, int n, LLVMValueRef *args);
LLVMValueRef cg_call1(CG *g, const char *name, LLVMValueRef x); /* returns x's type */
LLVMValueRef cg_call2(CG *g, const char *name, LLVMValueRef x, LLVMValueRef y);
LLVMValueRef cg_cstr(CG *g, const char *s); /* a private constant string, as i8* (one a module for its text) */
void cg_free_interned(CG *g);              /* the table behind cg_cstr and cg_const_array */
uint64_t cg_fnv1a(char kind, const void *p, size_t n); /* FNV-1a of kind and n bytes at p (interning, emit_kernels) */
/* a private constant array of n integers of type t, as a pointer to its first */
LLVMValueRef cg_const_array(CG *g, LLVMTypeRef t, int n, const int64_t *v);
LLVMValueRef cg_shape_array(CG *g, const Shape *s);
LLVMValueRef cg_loop_open(CG *g, Loop *l, int64_t n);
/* reorder: the vectorizer may reassociate the loop's floating-point reduction */
void cg_loop_close(CG *g, Loop *l, bool reorder);
/* A loop over [lo, hi), i64 values known at run time, which may be empty;
 * closed by cg_loop_close. Returns the counter. */
LLVMValueRef cg_loop_open_range(CG *g, Loop *l, LLVMValueRef lo, LLVMValueRef hi);
void cg_nest_open(CG *g, Loop *l, int n, const int64_t *dims, Aff *idx);
void cg_nest_close(CG *g, Loop *l, int n);
LLVMValueRef cg_new_acc(CG *g, LLVMTypeRef t); /* an alloca in the function's entry */
Aff cg_aff_const(int64_t k);
Aff cg_aff_unit(int loop);
LLVMValueRef cg_aff_value(CG *g, const Aff *a);
void cg_strides_of(const Shape *s, int64_t *st);
Aff cg_linear_of(const Shape *s, const Aff *idx); /* C-order offset of idx in shape s */
LLVMValueRef cg_load_lin(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin);
void cg_store_lin(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin, LLVMValueRef x);
/* cg_store_lin of an x that already holds a value of dt (a bf16 one
 * rounded, as every element cg_elem_at gives of a bf16 value is): stored
 * without rounding it again. */
void cg_store_exact(CG *g, LLVMValueRef base, DType dt, LLVMValueRef lin, LLVMValueRef x);
LLVMValueRef cg_buffer_of(CG *g, const Value *v); /* v's buffer (its root's), typed */
/* v's buffer k elements on: in a kernel, a slot of its own, so that code
 * reading or writing at a constant offset (a layer's slice of a stacked
 * param) is the same for every offset */
LLVMValueRef cg_buffer_at(CG *g, const Value *v, int64_t k);
LLVMValueRef cg_temp(CG *g, int t, DType dt);     /* Plan.temps[t] in the arena, typed */
/* the integer x, of type t, as a kernel reads it from a slot (a constant
 * outside kernels): for a number that differs between values whose code is
 * otherwise the same (a random draw's stream, one a layer) */
LLVMValueRef cg_param(CG *g, int64_t x, LLVMTypeRef t);
/* in a kernel, the device's index in the group of axes[0..n) (one codegen.c gave a slot) */
LLVMValueRef cg_group_index(CG *g, int n, const uint8_t *axes);
/* v's dim d (a draw's, an iota's) is split over the mesh: its tile starts at the device's block */
bool cg_dim_split(const Program *p, const Value *v, int d);
/* For run-time messages, into buf: "the gather at lm.gsl:40:12", with
 * "(inlined at FILE:LINE:COL)" for code inlined from another place and the
 * pass if it is not the forward one */
void cg_op_where(const Value *v, char *buf, size_t len);

/* ---- cg_math.c: scalar math -------------------------------------------- */

LLVMValueRef cg_convert(CG *g, LLVMValueRef x, DType from, DType to);
LLVMValueRef cg_bool_to(CG *g, LLVMValueRef c, DType dt);
LLVMValueRef cg_unary(CG *g, int fn, LLVMValueRef x, DType dt);
LLVMValueRef cg_binary(CG *g, int fn, LLVMValueRef x, LLVMValueRef y, DType in, DType out);
/* word 0 of Philox-4x32-10 (runtime/rng.c's gslrt_philox) of the i32
 * counter c[0..4) and key k[0..2) */
LLVMValueRef cg_philox0(CG *g, LLVMValueRef const *c, LLVMValueRef const *k);

/* ---- cg_fuse.c: fused elementwise expressions --------------------------- */

/* v's element at idx: a load from its buffer, or computed from its operands */
LLVMValueRef cg_elem_at(CG *g, const Value *v, const Aff *idx);
/* the buffers of vs[0..n), of one shape, in program order, = their
 * elements, in one loop nest (one value, or a loop of several: Plan.loop) */
void cg_emit_map(CG *g, const Value *const *vs, int n);

/* ---- cg_ops.c: whole-buffer ops ----------------------------------------- */

void cg_emit_reduce(CG *g, const Value *v); /* sum, max, argmax */
void cg_emit_cumsum(CG *g, const Value *v);
void cg_emit_gather(CG *g, const Value *v);
void cg_emit_scatter_add(CG *g, const Value *v);
void cg_emit_route(CG *g, const Value *v); /* dispatch, combine */
void cg_emit_concat(CG *g, const Value *v);
void cg_emit_concat_piece(CG *g, const Value *v, int j); /* the code of operand j's part (a kernel of its own) */
void cg_emit_rng(CG *g, const Value *v);

/* ---- cg_collectives.c ---------------------------------------------------- */

void cg_emit_all_reduce(CG *g, const Value *v);
void cg_emit_collective(CG *g, const Value *v); /* all_gather, reduce_scatter, all_to_all */
void cg_emit_permute(CG *g, const Value *v);
/* before the call of collective v's kernel: where it is written, for the runtime's watchdog */
void cg_emit_collective_site(CG *g, const Value *v);

/* ---- cg_einsum.c ----------------------------------------------------------- */

void cg_emit_einsum(CG *g, const Value *v);

#endif
