/* sema.h — what the files of semantic analysis share, and no one else:
 * sema.c (names, scopes, statements, expressions, the public API),
 * builtins.c (one handler per builtins.def row), contract.c (einsum and
 * '@' with the shared EinsumSpec), inline.c (calls of GSL functions on
 * IR values), loop.c (for loops, unrolled) and moe.c (the moe block). They are one phase and call each
 * other both ways (an expression's builtin evaluates its arguments as
 * expressions); no other phase calls into them but the driver. Names
 * crossing those files carry the sema_ prefix (inline.c's entry point:
 * inline_fn). */
#ifndef GSLC_SEMA_H
#define GSLC_SEMA_H

#include "gslc.h"

#define SEMA_MAX_DEPTH 64           /* deepest chain of inlined calls and loops */
#define SEMA_MAX_ITERATIONS (1 << 16) /* most loop iterations a program may unroll, all loops together */
#define SEMA_MAX_VALUES (1 << 20)   /* most IR values a program may build (inlining included) */
#define SEMA_MAX_EVALS (1 << 25)    /* most expression nodes a program may evaluate, loops unrolled */
#define SEMA_MAX_NAMES (1 << 22)    /* most names one scope may bind */
#define SEMA_MAX_ARGS 16            /* most positional (and, apart, keyword) arguments of a call */

/* ---- results ----------------------------------------------------------------------- */

typedef enum RKind { R_NONE, R_INT, R_FLOAT, R_VALUE, R_TUPLE } RKind;

/* What an expression gives: kept small, the evaluator passes it by value. */
typedef struct R {
  RKind k;      /* what was computed; R_NONE after an error */
  int n;        /* R_TUPLE: how many values */
  union {
    int64_t i;  /* R_INT */
    double f;   /* R_FLOAT */
    Value *v;   /* R_VALUE */
    Value **vs; /* R_TUPLE: the values */
  };
} R;

static const R none = {R_NONE, 0, {0}};

static inline R rint_(int64_t i) { R r = none; r.k = R_INT; r.i = i; return r; }
static inline R rfloat(double f) { R r = none; r.k = R_FLOAT; r.f = f; return r; }
static inline R rval(Value *v) { R r = none; r.k = v ? R_VALUE : R_NONE; r.v = v; return r; }
static inline bool is_num(R r) { return r.k == R_INT || r.k == R_FLOAT; }
static inline double num(R r) { return r.k == R_INT ? (double)r.i : r.f; }

/* ---- names ------------------------------------------------------------------------- */

/* BK_POISON: a name whose definition failed; uses of it stay silent */
typedef enum BindKind { BK_INT, BK_FLOAT, BK_VALUE, BK_FN, BK_SHAPEVAR, BK_POISON } BindKind;

typedef struct Scope Scope;
typedef struct Binding Binding;
struct Binding {
  const char *name; /* the bound name */
  BindKind kind;    /* what it names */
  int64_t i;        /* BK_INT, BK_SHAPEVAR */
  double f;         /* BK_FLOAT */
  Value *v;         /* BK_VALUE */
  const Node *fn;   /* BK_FN */
  Scope *home;      /* BK_FN: the scope it was defined in, where its body's names resolve */
  Span span;        /* where it was bound */
  bool rebindable;  /* bound by let or as a function's argument: a loop's body may rebind it */
  Binding *next;    /* older binding in the same scope */
  Binding *hnext;   /* next binding in the same hash bucket */
};

/* A name local to the iterations of a loop that has ended, kept to explain
 * a use of it after the loop. */
typedef struct Ended Ended;
struct Ended {
  const char *name; /* the name */
  Span bound;       /* where the loop's body binds it (a loop variable: in the header) */
  bool var;         /* it is a loop's variable */
  Ended *next;      /* older entry */
};

struct Scope {
  Scope *parent;         /* enclosing scope; NULL for a top-level one */
  const Node *loop;      /* an iteration of this FOR's body, NULL for other scopes */
  Ended *ended;          /* names local to loops that ran in this scope */
  Binding *head;         /* newest binding */
  Binding **table;       /* hash buckets (arena), NULL until the first binding */
  uint32_t mask;         /* buckets - 1 */
  uint32_t count;        /* bindings in the scope */
  const char **imported; /* top-level scopes: resolved paths of the modules imported into it */
  int nimported;
};

/* What an error's notes name, outermost first: the calls and loop
 * iterations it happened in. */
typedef enum FrameKind { FRAME_CALL, FRAME_ITERATION } FrameKind;

typedef struct Frame {
  FrameKind kind;   /* a call being inlined or an iteration being unrolled */
  const char *name; /* FRAME_CALL: the function inlined; FRAME_ITERATION: the loop variable */
  int64_t iter;     /* FRAME_ITERATION: the loop variable's value */
  Span at;          /* the call site, or the loop's header */
} Frame;

/* A module the compiler called into (sema_call): its names, apart from the
 * user's. */
typedef struct Module {
  const char *name; /* as given to sema_call */
  Scope *scope;     /* its top-level names */
} Module;

struct Sema {
  Build b;                     /* what the code being elaborated builds with: the program (b.p), and the
                                  call site and region its values are in; a call's body (inline_fn), a
                                  remat for's iteration (loop.c) and sema_call build with their own, and
                                  put this one back whole */
  Arena *ast;                  /* arena for imported ASTs */
  const SemaOptions *opt;      /* search path, -D */
  Diag *diag;                  /* where its errors go (and the parser's, for the modules it imports) */
  int errors;                  /* errors it reported, a module that did not parse counted once: a
                                  construct failed when they grew while it was elaborated */
  Scope global;                /* top-level names of the user's program */
  Frame stack[SEMA_MAX_DEPTH]; /* calls being inlined and loop iterations being unrolled, outermost first */
  int depth;                   /* entries of stack in use */
  int64_t iterations;          /* loop iterations unrolled so far */
  int64_t evals;               /* expression nodes evaluated so far (SEMA_MAX_EVALS) */
  bool have_mesh;              /* a mesh statement was seen */
  bool have_tensor;            /* a param or input was seen */
  bool too_big;                /* the value bound was hit (reported once; all else stops) */
  bool train_twice;            /* a second train statement was reported */
  bool *define_used;           /* per -D: matched a const */
  Module *modules;             /* modules loaded by sema_call */
  int nmodules;
  const Value *moe_member;     /* in a moe body: the stand-in for the expert index e, else NULL */
  int64_t moe_experts;         /* in a moe body: E */
};

/* ---- sema.c ------------------------------------------------------------------------ */

void sema_error(Sema *s, Span sp, const char *fmt, ...); /* with a note per call inlined through */
const char *sema_span_text(Sema *s, Span sp);            /* the source text, shortened */
const char *sema_vtype(Sema *s, const Value *v);         /* "f32[2, 3]" */
/* false (after reporting "WHAT: the result TYPE has more than 2^40
 * elements") when a result of shape sh would be too large */
bool sema_check_shape(Sema *s, const Shape *sh, DType dt, const char *what, Span sp);
bool sema_shape_fits(const Shape *sh); /* at most GSL_MAX_ELEMS elements */
Binding *sema_lookup_local(Scope *sc, const char *name);
Binding *sema_lookup(Scope *sc, const char *name);
Binding *sema_bind(Sema *s, Scope *sc, const char *name, BindKind k, Span sp);
R sema_eval(Sema *s, Scope *sc, const Node *n);
Value *sema_eval_value(Sema *s, Scope *sc, const Node *n);
/* r as one tensor (a number becomes an f32 scalar); NULL after reporting
 * at sp (a tuple) or when r is R_NONE */
Value *sema_value_of(Sema *s, R r, Span sp);   /* a number becomes an f32 scalar */
int64_t sema_eval_int(Sema *s, Scope *sc, const Node *n, const char *what, bool *ok);
double sema_eval_number(Sema *s, Scope *sc, const Node *n, const char *what, bool *ok);
/* A number operand becomes a scalar of the other's dtype; i32 with f32 is f32. */
void sema_promote(Sema *s, R *a, R *b, Span sp, Value **va, Value **vb);
/* "f32", "bf16" or "i32" to its DType; false for another name */
bool sema_dtype_name(const char *name, DType *dt);
/* JAX's promotion of two tensors' dtypes: the same stays, f32 with bf16 or
 * i32 is f32, bf16 with i32 is bf16 */
DType sema_promote_types(DType a, DType b);
Value *sema_elementwise2(Sema *s, int fn, Value *a, Value *b, Span sp);
bool sema_exec_let(Sema *s, Scope *sc, const Node *st);

/* ---- builtins.c -------------------------------------------------------------------- */

typedef enum BuiltinId {
#define X(id, name, lo, hi, kw, handler, fn) BI_##id,
#include "builtins.def"
#undef X
  BI__COUNT
} BuiltinId;

typedef struct Args {
  const Node *call;      /* the CALL node */
  const Node *pos[SEMA_MAX_ARGS]; /* positional arguments */
  int npos;
  const Node *kw[SEMA_MAX_ARGS];  /* keyword arguments (KWARG nodes) */
  int nkw;
} Args;

typedef struct Builtin Builtin;
/* A builtin's handler: checks the arguments and builds the result. */
typedef R BuiltinFn(Sema *s, Scope *sc, const Builtin *b, const Args *a);

struct Builtin {
  BuiltinId id;         /* its row */
  const char *name;     /* as called */
  int lo, hi;           /* positional arguments taken */
  const char *keywords; /* keyword arguments taken, space-separated */
  BuiltinFn *handler;   /* what a call does */
  int fn;               /* the UnaryFn, BinaryFn or ReduceFn it maps to, or -1 */
};

extern const Builtin sema_builtins[BI__COUNT];
int sema_builtin_lookup(const char *name);                   /* BuiltinId, or -1 */
bool sema_split_args(Sema *s, const Node *call, Args *a);
const Node *sema_kwarg(const Args *a, const char *name); /* the value of keyword name, or NULL */
/* keyword name as true or false (dflt when absent; an error, and dflt, when not a boolean) */
bool sema_bool_kwarg(Sema *s, Scope *sc, const Args *a, const char *name, bool dflt);
bool sema_check_builtin_args(Sema *s, int id, const Args *a);
R sema_call_builtin(Sema *s, Scope *sc, int id, const Node *call);
int sema_axis_index(const Sema *s, const char *name);
bool sema_check_sharding(Sema *s, const Sharding *sh, const Shape *shape, const char *what, Span sp);
/* the sharding an annotation call describes; first: its first argument after the tensor */
bool sema_annotation_sharding(Sema *s, Scope *sc, int id, const Args *a, int first, const Shape *shape,
                              Sharding *sh);

/* ---- contract.c -------------------------------------------------------------------- */

Value *sema_einsum(Sema *s, const char *text, Value **ops, int nin, Span sp);
Value *sema_matmul(Sema *s, Value *a, Value *b, Span sp);

/* ---- inline.c ---------------------------------------------------------------------- */

/* fnode (an AST_FN defined in home) inlined on args (tensors, or numbers,
 * which an untyped argument keeps as compile-time numbers): their types
 * checked against its argument types (errors at argspan[i]), shape names
 * bound per call, its body elaborated in a scope on home, with the call on
 * the stack of notes. R_NONE after reporting. */
R inline_fn(Sema *s, Scope *home, const Node *fnode, const R *args, int nargs, const Span *argspan, Span call);
/* a call node of the user function fnode: arguments evaluated in sc */
R sema_call_fn(Sema *s, Scope *sc, const Binding *fn, const Node *call);

/* ---- loop.c ------------------------------------------------------------------------ */

/* for NAME in A..B { body } in scope sc, unrolled; false after reporting */
bool sema_exec_for(Sema *s, Scope *sc, const Node *st);
/* binds the name nm of a let in sc: anew, or, in a loop's body, rebinding
 * a name bound before the loop; NULL after reporting */
Binding *sema_bind_let(Sema *s, Scope *sc, const Node *nm, BindKind k);
/* the binding from before the loop that a let of name in sc would rebind, or NULL */
Binding *sema_rebinds(Scope *sc, const char *name);
/* reports a use at `at` of a name local to a loop that has ended; false
 * (and nothing reported) if name is no such name */
bool sema_explain_ended(Sema *s, Scope *sc, const char *name, Span at);

/* ---- moe.c ------------------------------------------------------------------------- */

/* A moe block (AST_MOE): its outputs, then aux, as an R_TUPLE. */
R sema_moe(Sema *s, Scope *sc, const Node *n);

#endif
