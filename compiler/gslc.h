/* gslc.h — the compiler's one internal header.
 *
 * The pipeline (driven by main.c) reads one representation and writes the
 * next: source text -> tokens (grammar/lexer.re) -> AST (grammar/parser.y,
 * ast.c) -> global tensor IR (sema.c: names, consts, inlined calls, static
 * shapes, built through ir.c's builder) -> for a program that trains, its
 * gradients and the optimizer's update (autodiff.c, on IR functions sema
 * made; on a copy of sema's program per --mem-budget attempt, recomputing
 * the regions main.c chose with remat.c's measures) -> moe products
 * restricted to filled slots (slots.c) -> with --auto-shard, the
 * unannotated shardings chosen by a cost search (autoshard.c) -> every
 * value sharded (propagate.c, then update.c's sharded optimizer updates)
 * -> the SPMD program, local shapes and collectives (partition.c, then
 * combine.c's riding all-to-alls; the search, propagation and the
 * partitioner all read each op's sharding rule, rule.c, and all rest on
 * sharding.c's algebra, plans and costs) -> buffers and their lifetimes
 * planned (plan.c), placed in one arena (plan_arena.c), beside the
 * runtime's staging (plan_staging.c); told by --stats (stats.c) -> LLVM
 * module (codegen.c, cg_*.c) -> object file -> executable (main.c spawns
 * the linker). ir_verify runs after each pass. Files call only downward:
 * no pass calls into one that runs before it.
 *
 * Sections follow the file that defines the functions they declare. */
#ifndef GSLC_H
#define GSLC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define GSL_MAX_RANK 8 /* most dimensions a tensor may have */
#define GSL_MAX_AXES 8 /* most axes a mesh may have */

/* ---- arena.c: memory ---------------------------------------------------- */

typedef struct Arena Arena;

void *xmalloc(size_t n);                /* malloc that dies cleanly on exhaustion */
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
Arena *arena_new(void);
void *arena_alloc(Arena *a, size_t n);  /* zeroed, 16-byte aligned */
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...);
void arena_free(Arena *a);
/* broken invariants: a compiler bug, never a user error */
_Noreturn void die_at(const char *file, int line, const char *fmt, ...);
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)

/* ---- diag.c: sources, spans and diagnostics ----------------------------- */

typedef struct Source {
  const char *path;  /* as given on the command line or found on the search path */
  const char *text;  /* whole file, NUL-terminated */
  size_t len;        /* bytes of text, without the NUL */
} Source;

typedef struct Span {
  const Source *src; /* NULL for a construct with no source (compiler-made) */
  uint32_t line;     /* 1-based line of the first byte */
  uint32_t col;      /* 1-based column (in bytes) of the first byte */
  uint32_t off;      /* byte offset of the first byte */
  uint32_t end;      /* byte offset one past the last byte */
} Span;

Source *source_load(const char *path);                  /* NULL (and errno) if unreadable */
const char *source_strerror(int err); /* what source_load's errno means (EFBIG: past its bound) */
/* The files source_load read, each once, in the order first read: their
 * paths and the SHA-256 of their bytes in hex (the manifest's "build"). */
int source_nreads(void);
const char *source_read_path(int i);
const char *source_read_sha256(int i);
const char *source_sha256_all(void); /* of their bytes one after another, in that order */
const char *source_was_read(const char *path);          /* the path source_load read path's file by, or NULL */
Source *source_from_string(const char *path, const char *text);
void source_free(Source *s);
Span span_join(Span a, Span b);                         /* from a's start to b's end */

/* Where diagnostics go and what they counted: the driver makes one for a
 * run and hands it to every phase that reports (the parser, sema,
 * autodiff, the passes that refuse a program, codegen, the linker's
 * driver); a test makes its own over a buffer. */
typedef struct Diag {
  FILE *out;  /* where messages go; NULL: nowhere (a pass run again, whose messages were given) */
  int errors; /* errors reported */
  bool muted; /* the last error was past the limit shown: its notes are not shown either */
} Diag;

void diag_error(Diag *d, Span sp, const char *fmt, ...);   /* file:line:col: error: ..., line, caret */
void diag_note(Diag *d, Span sp, const char *fmt, ...);    /* file:line:col: note: ... */
void diag_warning(Diag *d, Span sp, const char *fmt, ...); /* file:line:col: warning: ..., line, caret (not an error) */
void diag_fatal(Diag *d, const char *fmt, ...);            /* gslc: error: ... (no location) */
bool diag_flooded(const Diag *d);                          /* past the errors shown: further work is wasted */

/* ---- ast.c: the syntax tree --------------------------------------------- */

typedef enum AstKind {
#define X(k, s) AST_##k,
#include "ast.def"
#undef X
  AST__COUNT
} AstKind;

typedef enum BinOp {
  BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_MATMUL,
  BIN_LT, BIN_LE, BIN_GT, BIN_GE, BIN_EQ, BIN_NE,
  UN_NEG
} BinOp;

typedef struct Node Node;
typedef struct NodeList {
  Node **items; /* arena-allocated */
  int len;      /* items in use */
  int cap;      /* items allocated */
} NodeList;

struct Node {
  AstKind kind;   /* what the node is; ast.def says what the fields mean */
  Span span;      /* the source it covers */
  const char *name; /* identifier, callee, keyword, string text, dtype name */
  int op;         /* BINARY/UNARY: a BinOp */
  int64_t ival;   /* INT: value */
  double fval;    /* FLOAT: value */
  bool flag;      /* PARAM: frozen; BOOL: value; FN, FOR: remat */
  Node *a, *b, *c;  /* fixed children, per kind */
  NodeList list;  /* variable children, per kind */
  NodeList list2; /* second list (FN body) */
};

const char *ast_kind_name(AstKind k);
const char *ast_op_text(int op);                 /* "+", "@", "<=", ... */
Node *ast_new(Arena *a, AstKind k, Span sp);
void ast_push(Arena *a, NodeList *l, Node *n);
void ast_dump(FILE *f, const Node *n);           /* S-expression, for tests */

/* ---- grammar/parser.y: the parser --------------------------------------- */

/* Parses a whole file; NULL (after reporting every syntax error found to
 * d) when the text is not a program. The tree lives in arena a. */
Node *parse_source(const Source *src, Arena *a, Diag *d);

/* ---- ir.c: the tensor IR, its op tables, its builder, its rewriter ------ */

/* Element types. DT_BF16 is bfloat16: stored in 2 bytes, computed in f32
 * and rounded to nearest even after each op (as XLA's CPU backend does). */
typedef enum DType { DT_F32, DT_I32, DT_BF16 } DType;
static inline bool dtype_is_float(DType d) { return d != DT_I32; }
static inline int dtype_size(DType d) { return d == DT_BF16 ? 2 : 4; } /* bytes of an element */
/* whether s ends with suffix (a moe block's signal "moe.NAME.drop", say) */
static inline bool str_ends(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

typedef enum Op {
#define X(op, s, n, cls, lvl, fl, d, ds, sh) OP_##op,
#include "ops.def"
#undef X
  OP__COUNT
} Op;

/* What kind of computation an op is (ops.def's class column). */
typedef enum OpClass {
  OC_SOURCE,      /* param, input, const, rng, iota: no operands */
  OC_ELEMENTWISE, /* result element i from operand elements i */
  OC_LAYOUT,      /* elements moved or repeated, none computed */
  OC_CONTRACTION, /* einsum */
  OC_REDUCTION,   /* elements combined along dimensions (reduce, cumsum) */
  OC_INDEX,       /* data-dependent indices (gather, one_hot) */
  OC_ANNOTATION,  /* the user's sharding annotation */
  OC_COLLECTIVE,  /* SPMD: communicates over a group of mesh axes */
  OC_LOCAL        /* SPMD: a device's own block, no communication */
} OpClass;

/* ops.def's flags column */
enum {
  OF_INDEX_MAP = 1 << 0, /* reads its one operand at an affine map of its index: fuses into its user */
  OF_BUFFER = 1 << 1,    /* always has a buffer of its own (or its operand's, with OF_ALIAS) */
  OF_ALIAS = 1 << 2,     /* when it has a buffer, it may be its operand's under another shape */
  OF_SPMD = 1 << 3,      /* only in the SPMD program (partition.c makes it) */
  OF_MOVE = 1 << 4,      /* its elements are its operands' elements, moved or repeated, none changed:
                            layouts, annotations, the collectives that move tiles (ir_index_sources) */
  OF_DRAW = 1 << 5       /* draws from the counter-based RNG under its stream: a copy made by inlining or
                            batching draws anew (a new stream); one made by recomputation or autodiff
                            keeps it, and so its draws */
};

typedef struct OpInfo {
  const char *name;  /* its text in --emit-ir */
  int nargs;         /* operands, -1 for any number */
  OpClass cls;       /* kind of computation */
  int level;         /* propagation priority, -1: never propagates */
  unsigned flags;    /* OF_* */
  const char *deriv; /* the name of its reverse-mode rule (autodiff.c's d_RULE) */
  unsigned dslots;   /* bit k: operand k gets a cotangent */
} OpInfo;

const OpInfo *ir_op(Op op); /* ops.def's row; dies on an op not in it */

typedef enum UnaryFn {
#define X(id, name, fold, int_ok, d) UF_##id,
#include "unary.def"
#undef X
  UF__COUNT
} UnaryFn;

typedef enum BinaryFn {
#define X(id, name, sym, fold, cmp, dx, dy) BF_##id,
#include "binary.def"
#undef X
  BF__COUNT
} BinaryFn;

typedef enum ReduceFn { RF_SUM, RF_MAX, RF_ARGMAX } ReduceFn; /* argmax: i32 result, first maximum */
typedef enum RngDist { RNG_UNIFORM, RNG_NORMAL } RngDist;     /* uniform [fval, fval2); normal(0, fval) */

const char *unary_fn_name(int fn);
bool unary_int_ok(int fn);                 /* defined on i32 without a trip through f32 */
double ir_fold_unary(int fn, double x);    /* unary.def's fold */
const char *binary_fn_name(int fn);
bool binary_is_compare(int fn);            /* yields 1/0 */
double ir_fold_binary(int fn, double x, double y); /* binary.def's fold */
/* fn on 64-bit integers; false when the result overflows or is undefined
 * (division by zero), *out untouched then. Comparisons give 1 or 0. */
bool ir_fold_binary_int(int fn, int64_t x, int64_t y, int64_t *out);
const char *reduce_fn_name(int fn);

/* The optimizers `train LOSS with OPT(...)` takes (optim.def): sema checks
 * the statement against them, sema and autodiff lay out the update's
 * arguments by them, codegen describes them to the runtime. */
typedef enum OptimId {
#define X(id, name, fn, states, step, kw) OPT_##id,
#include "optim.def"
#undef X
  OPT__COUNT
} OptimId;

typedef struct OptimInfo {
  const char *name;      /* as written after `with` */
  const char *fn;        /* its stdlib/optim.gsl function */
  const char *states;    /* per-param state names, space-separated */
  bool step;             /* takes the step number t */
  const char *keywords;  /* NAME=DEFAULT ..., in the function's order */
} OptimInfo;

const OptimInfo *ir_optim(int id);       /* optim.def's row */
int ir_optim_lookup(const char *name);   /* an OptimId, or -1 */
/* state k (from 0) of optimizer id: its name; false past the last */
bool ir_optim_state(int id, int k, char *name, size_t cap);
/* keyword k (from 0) of optimizer id: its name and default; false past the last */
bool ir_optim_keyword(int id, int k, char *name, size_t cap, double *dflt);

/* The learning-rate decays after warmup (decay.def), a keyword of every
 * optimizer. */
typedef enum DecayId {
#define X(id, name, fn, peak, at) DECAY_##id,
#include "decay.def"
#undef X
  DECAY__COUNT
} DecayId;

const char *ir_decay_name(int id);     /* "cosine" */
const char *ir_decay_fn(int id);       /* its stdlib/optim.gsl function */
int ir_decay_lookup(const char *name); /* a DecayId, or -1 */
/* the largest multiple of lr - min_lr decay id's arithmetic reaches, and
 * the expression (*at) that reaches it */
double ir_decay_peak(int id, const char **at);


typedef struct Shape {
  int rank;                 /* number of dimensions; 0 for a scalar */
  int64_t d[GSL_MAX_RANK];  /* extents */
} Shape;

#define GSL_MAX_ELEMS (1LL << 40) /* most elements a tensor may have */

typedef struct Mesh {
  int naxes;                      /* 0: one device */
  const char *name[GSL_MAX_AXES]; /* axis names */
  int64_t size[GSL_MAX_AXES];     /* devices along each axis */
  Span span;                      /* the mesh declaration */
} Mesh;

/* How a value is laid out over the mesh: per dimension the mesh axes that
 * split it (major to minor), plus the axes over which it is a pending partial
 * sum; replicated over every other axis. */
typedef struct Sharding {
  uint8_t naxes[GSL_MAX_RANK];              /* how many axes split dimension i */
  uint8_t axes[GSL_MAX_RANK][GSL_MAX_AXES]; /* which mesh axes, major first */
  uint32_t partial;                         /* bit a: partial sum over mesh axis a */
} Sharding;

typedef enum ShardOrigin {
  SO_NONE,       /* not yet decided */
  SO_ANNOTATED,  /* fixed by the user */
  SO_PROPAGATED, /* found by propagation (sh_from says from which value) */
  SO_UPDATE,     /* part of a sharded optimizer update (update.c; sh_from: the param) */
  SO_AUTO        /* chosen by gslc --auto-shard's cost search (autoshard.c), kept as an annotation is */
} ShardOrigin;

/* An einsum's spec, taken apart once: the index letters of each operand and
 * of the result. Every pass reads it; none re-parses text. */
typedef struct EinsumSpec {
  int nin;                      /* operands: 1 or 2 */
  char in[2][GSL_MAX_RANK + 1]; /* each operand's letters, one per dimension */
  char out[GSL_MAX_RANK + 1];   /* the result's letters */
  char fill[GSL_MAX_RANK + 1];  /* "" or, with a third operand (i32, one dim per letter here), the
                                   letters that index the fill counts (moe_skip_empty's) */
  char fill_of;                 /* with fill: the letter the counts bound: terms and result elements
                                   whose fill_of index is at or past the count may be left out
                                   (result elements then zero); 0 without */
  double fill_share;            /* with fill: the share of the slots its moe block's routed choices fill
                                   when none is dropped, min(1, S·K / (E·C)) (slots.c): the model's part of
                                   the product, for --stats' FLOPs; 0 without */
} EinsumSpec;

/* Parses "ab,bc->ac" (or numpy's implicit form "ab,bc") for nin operands;
 * false with what is wrong in err (to follow "einsum spec \"...\"", as
 * " has more than two operands" or ": index 'b' repeats ...") if the
 * text is not a spec of nin operands. Checks the letters only, not shapes. */
bool ein_parse(const char *text, int nin, EinsumSpec *out, char *err, size_t errlen);
const char *ein_str(Arena *a, const EinsumSpec *e); /* "ab,bc->ac" */
/* The FLOPs of the product e on operands of shapes args: 2 per point of
 * its letters' space (a multiply and an add). */
double ein_flops(const EinsumSpec *e, const Shape *const *args);

/* The attributes an op reads (ops.def says which), in one struct so that a
 * pass that copies a value copies them all: v->attr = w->attr. The same
 * fields are reachable directly (v->fn) through an anonymous twin. */
#define GSL_ATTR_FIELDS                                                                        \
  int fn;                          /* UnaryFn, BinaryFn, ReduceFn or RngDist */                \
  int axis;                        /* SLICE, CONCAT, CUMSUM, IOTA; collectives: the dim they act on */ \
  int axis2;                       /* ALL_TO_ALL: the dim received blocks are joined along */   \
  uint8_t group[GSL_MAX_AXES];     /* collectives: mesh axes, major first */                    \
  int ngroup;                      /* collectives: entries of group */                          \
  uint8_t group2[GSL_MAX_AXES];    /* COLLECTIVE_PERMUTE: the same axes, in the target's order */ \
  int64_t start;                   /* SLICE */                                                  \
  bool exclusive;                  /* CUMSUM */                                                 \
  uint32_t rmask;                  /* REDUCE: dims reduced */                                   \
  int perm[GSL_MAX_RANK];          /* TRANSPOSE, BROADCAST */                                   \
  double fval, fval2;              /* CONST (f32), RNG parameters, DROPOUT's p (fval) */        \
  int64_t ival;                    /* CONST (i32) */                                            \
  uint32_t stream;                 /* RNG, DROPOUT: draw number, stable in program order */     \
  EinsumSpec ein;                  /* EINSUM */                                                 \
  int tensor;                      /* PARAM, INPUT: index in Program.tensors */

typedef struct Attr {
  GSL_ATTR_FIELDS
} Attr;

/* Which part of a training step built a value (--explain and --emit-ir say so). */
typedef enum Pass {
  PASS_FORWARD,  /* the program as written */
  PASS_BACKWARD, /* autodiff's gradients */
  PASS_UPDATE,   /* the optimizer's update of params and states */
  PASS_RECOMPUTE /* forward values computed again for the backward pass (a region recomputed) */
} Pass;

/* "forward", "backward", "update" or "recompute" */
const char *ir_pass_name(Pass pass);

/* A region of the forward program that may be recomputed for the backward
 * pass instead of kept (rematerialization, jax.checkpoint's unit): the
 * values one call of a function builds, or one iteration of a `remat for`
 * loop. The candidates are the outermost (a call made from the top level
 * or a loop there); a `remat fn`'s calls and a `remat for`'s iterations
 * are recomputed; the other calls' regions are recomputed only with one
 * around them, and serve as the chain of calls a value was inlined
 * through (ir_note_calls). Regions nest as the calls and loops do; a value
 * belongs to the innermost it was built in (Value.region). sema makes
 * them; main.c chooses which are recomputed; autodiff.c recomputes them. */
typedef struct Region {
  Span span;        /* the function's definition, or the loop's header */
  Span site;        /* the call, or the loop's header */
  const char *name; /* the function's name, or the loop variable's */
  int64_t iter;     /* a loop's iteration, else -1 */
  const char *loops; /* a call in loops: their variables' values, "p = 3" (outermost first), else NULL */
  int parent;       /* the enclosing region's number, 0: none */
  bool marked;      /* the source asks for it: `remat fn` or `remat for` */
  bool recompute;   /* chosen: recomputed for the backward pass (with the regions inside it) */
  const char *why;  /* why chosen, for --explain (NULL: marked, or not chosen) */
  double flops;     /* its forward's product FLOPs on one device (remat_measure) */
  double seconds;   /* its forward's time on one device, by the cost model (remat_measure) */
  int64_t saved;    /* bytes a device keeps less when it is recomputed, as estimated (remat_measure) */
} Region;

typedef struct Value Value;
struct Value {
  int id;            /* SSA number: index in Program.values, in program order */
  Op op;             /* what computes it */
  DType dtype;       /* element type */
  Shape shape;       /* global shape (local shape in the SPMD program) */
  Span span;         /* source construct that produced it */
  Span site;         /* for code inlined from a call: the outermost call (else span) */
  Pass pass;         /* the part of the step that built it */
  const char *name;  /* the user's name for it (let, param, input), or NULL */
  Value **args;      /* operands */
  int nargs;         /* number of operands */
  int region;        /* the innermost Region it was built in (a number: Program.regions[region - 1]),
                        0: none; a backward value: its forward value's */
  const Value *remat_of; /* PASS_RECOMPUTE: the forward value it computes again */
  union {
    Attr attr;                   /* the op's attributes, copied whole */
    struct { GSL_ATTR_FIELDS };  /* the same, by field */
  };
  /* sharding */
  Sharding sh;         /* the value's sharding (global IR: decided by propagation) */
  ShardOrigin sh_origin;
  const Value *sh_from; /* SO_PROPAGATED: the neighbour it came from */
  /* SPMD IR (partition.c) */
  Shape gshape;        /* the global shape whose tile `shape` is (== shape in global IR) */
  const Value *orig;   /* the global value it computes, or NULL (collectives) */
  const char *why;     /* collectives: what needed them, for --explain */
  Value *rider;        /* all_to_all: a small all_to_all on the same group moved right after it and
                          exchanged in its call (combine.c), or NULL */
  const Value *carrier; /* an all_to_all that rides: the one whose call moves it, or NULL */
  /* a moe block's slot rows (slots.c) */
  const Value *rows;   /* an elementwise value whose slot rows run over the filled slots alone: its block's
                          counts, i32[E, G] (in the SPMD program: their tile on this value's cuts), or NULL */
  int8_t rows_dim[3];  /* with rows: the value's dims of E, G and C; the elements whose C index is at or
                          past the count n[e, g] may be left out, and then hold zero */
};

typedef enum InitKind { INIT_NONE, INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_UNIFORM } InitKind;
/* TK_STATE: an optimizer's state (autodiff.c makes them): lives across
 * steps like a param, starts at zeros, never trained itself */
typedef enum TensorKind { TK_PARAM, TK_INPUT, TK_STATE } TensorKind;

typedef struct Tensor {
  const char *name; /* declared name */
  TensorKind kind;  /* param or input */
  DType dtype;
  Shape shape;      /* global shape */
  Span span;        /* the declaration */
  InitKind init;    /* initializer (INIT_NONE: inputs must be bound by --input) */
  double a, b;      /* its arguments: normal(std=a), uniform(a, b) */
  bool frozen;      /* param not trained */
  int state_of;     /* TK_STATE: the index of the param it belongs to, or -1 for the whole
                       optimizer's (the step count); unused for others */
  uint32_t stream;  /* RNG stream of its initializer */
  Value *value;     /* the OP_PARAM/OP_INPUT value */
  bool annotated;   /* declaration carried a sharding */
  Sharding sh;      /* that sharding */
  Value *grad;      /* a trained param: its gradient (autodiff.c), else NULL */
  const char *update_note; /* a trained param on a mesh: how its update runs and why (update.c) */
  const char *auto_note;   /* --auto-shard: its layout, estimated cost, the best alternative's (autoshard.c) */
} Tensor;

/* What roots the program: a value each step computes for a reason. */
typedef enum OutputKind {
  OUT_VALUE,  /* `output NAME`: --output may write it */
  OUT_LOSS,   /* the training loss: a replicated f32 scalar, reported to the log every step */
  OUT_UPDATE, /* a param's or optimizer state's contents for the next step, stored at the step's end */
  OUT_SIGNAL  /* a training signal: a replicated f32 scalar or vector, reported to the log every step */
} OutputKind;

typedef struct Output {
  const char *name; /* the name after `output`; the tensor's for OUT_UPDATE; "loss" */
  Value *value;     /* what it names */
  Span span;        /* the output (or train) statement */
  OutputKind kind;  /* why the value is computed */
  int tensor;       /* OUT_UPDATE: index in Program.tensors, else -1 */
  const char *log;  /* OUT_SIGNAL: its key in the log line, or NULL (only in --metrics records) */
} Output;

/* The `train LOSS with OPT(...)` statement, as sema found it, for autodiff.c. */
#define GSL_MAX_OPT_ARGS 8
typedef struct Train {
  Value *loss;      /* the f32 scalar to minimize; NULL: the program does not train */
  Span span;        /* the statement */
  Span opt_span;    /* the optimizer's call */
  int opt;          /* an OptimId (optim.def) */
  double args[GSL_MAX_OPT_ARGS]; /* its hyperparameters, in optim.def's order, defaults filled in */
  double warmup;    /* steps of linear warmup (0: none) */
  int decay;        /* a DecayId: how the lr falls after warmup */
  double decay_steps; /* steps the decay takes (0 with DECAY_CONSTANT) */
  double min_lr;    /* the lr the decay ends at, and stays at */
  double clip;      /* the most the global gradient norm may be (0: no clipping) */
  struct Program **updates; /* the optimizer's update as IR functions (ir_inline), one per shape of
                               a trained param: sema makes them, autodiff inlines and frees them */
  int nupdates;             /* entries of updates */
  struct Program *schedule; /* the lr of a step (decay.def's function) as an IR function, or NULL
                               (ir_train_scheduled false: lr constant); sema makes it, autodiff frees it */
} Train;

/* Whether the train statement's lr changes from step to step (a warmup
 * or a decay). */
bool ir_train_scheduled(const Train *t);
/* Its optimizer with every hyperparameter, then the schedule's and
 * clipping's keywords where they are not the defaults, as checkpoints'
 * manifests and --explain give it: "adam(lr=0.001, beta1=0.9, ...,
 * warmup=100, decay=cosine, decay_steps=1000, min_lr=0, clip=1)". */
const char *ir_optim_desc(Arena *a, const Train *t);

/* A sum samebits.c cut into fixed blocks, for --explain. */
typedef struct SameNote {
  Span span, site;     /* the op, and the call it was inlined from */
  const char *kind;    /* what was blocked: "product", "sum" or "scatter-add" (a static string) */
  Pass pass;           /* the part of the step */
  int64_t n, blocks;   /* the dimension's extent and its blocks */
  int64_t devices;     /* devices along it on this mesh */
  const char *fits;    /* the device counts that hold whole blocks, "1, 2, 4, 8" (in the arena) */
} SameNote;

/* What slots_skip_empty made of one moe block, for --explain. */
typedef struct MoeNote {
  Span span;       /* the block (its dispatch) */
  int64_t e, g, c; /* experts, groups, capacity slots */
  int64_t s, k, m; /* tokens a group, choices a token, the tokens' width */
  int64_t bytes;   /* the dispatched tokens' bytes, E·G·C·M elements, over the whole mesh */
  int rows, depth; /* products restricted to the filled slots: by rows, by summed slots */
  int loops;       /* elementwise values restricted to the filled slots (Value.rows) */
  const char *why; /* padded: why (the op that mixes slots, or the option); NULL: skipped */
  bool recomputed; /* the block computed again for the backward pass (its region recomputed) */
} MoeNote;

/* A const of the user's program as elaborated (-D applied). */
typedef struct ConstDef {
  const char *name; /* its name */
  bool is_int;      /* an integer (i), else a float (f) */
  bool mesh;        /* a mesh axis's size is this const, by name */
  int64_t i;
  double f;
} ConstDef;

typedef struct Program {
  Arena *arena;     /* owns everything below */
  const char *path; /* main source file */
  Mesh mesh;        /* the device mesh */
  Value **values;   /* every value, in program order (operands first) */
  int nvalues, capvalues;
  Tensor *tensors;  /* params and inputs, in declaration order */
  int ntensors, captensors;
  Output *outputs;  /* in declaration order (then the loss and updates training adds) */
  int noutputs, capoutputs;
  Train train;      /* the train statement, if any */
  uint32_t nstreams; /* RNG streams handed out */
  bool spmd;         /* values carry local shapes (partition.c's output) */
  DType precision;   /* gslc --precision: DT_F32, or DT_BF16 (products and moe bodies in bf16; build_at
                        reads it) */
  int same_bits;     /* gslc --same-bits: its bound on a sum's blocks (samebits.c), 0: not given */
  SameNote *same;    /* samebits_block's notes, one per dimension blocked (in the arena), carried by rewrites */
  int nsame;         /* entries of same */
  MoeNote *moe;      /* slots_skip_empty's notes, one per moe block (in the arena), carried by rewrites */
  int nmoe;          /* entries of moe */
  struct Program *home; /* an IR function (ir_new_fn): the program it is inlined into, whose arena
                           holds it; NULL for a program of its own */
  Region *regions;   /* sema's regions, numbered from 1 (in the arena) */
  int nregions, capregions;
  const struct Program *base; /* a copy (ir_clone): the program copied, whose IR functions it may inline */
  ConstDef *consts;  /* sema's: the user's consts in source order, for the manifest's "build" */
  int nconsts;       /* entries of consts */
} Program;

Program *ir_new(const char *path);
/* An IR function for home: a program of its own values whose parameters
 * are its tensors (TK_INPUT, in order) and whose results are its outputs
 * (in order), stored in home's arena (so its spans, names and sources live
 * as long as home) and inlined into home by ir_inline. */
Program *ir_new_fn(Program *home);
void ir_free(Program *p); /* an IR function: its arrays (its values stay in home's arena) */

/* How a pass builds IR: the program new values go into and the modes they
 * are built in, one value the pass makes (build_at) and hands to every
 * builder call. None of it is kept in the program, so a mode lasts as long
 * as the Build that carries it: nothing is left set when a pass returns,
 * and a scope's modes (a call's site, a moe block's f32 gating) end with
 * the scope's Build. */
typedef struct Build {
  Program *p;    /* the program new values are appended to */
  Pass pass;     /* the part of the step they belong to, stamped on them */
  Span site;     /* the outermost call being inlined, stamped on them (src NULL: none, each its own span) */
  int region;    /* the Region they are built in, stamped on them (0: none) */
  bool autocast; /* gslc --precision bf16: a product of f32 operands takes them rounded to bf16, and a moe
                    block's routed tokens move as bf16 (ir_einsum_acc, ir_dispatch, ir_combine) */
} Build;

/* A builder of pass's values into p, at call site `site` (src NULL: none)
 * and in region `region`; its products autocast when p's precision is
 * bf16 and pass is PASS_FORWARD (read now: set p->precision first). */
Build build_at(Program *p, Pass pass, Span site, int region);
/* b at another call site and region: an inlined call's body, a remat
 * for's iteration */
Build build_in(Build b, Span site, int region);
/* b with its products in f32 whatever the precision (a moe block's gates,
 * as GShard keeps them; an IR function's body) */
Build build_f32(Build b);

/* appends a value to b->p, stamped with b's pass, site (or sp where b has
 * none) and region; args copied into the arena */
Value *ir_add(const Build *b, Op op, DType dt, Shape shape, Span sp, int nargs, Value **args);
Shape shape_of(int rank, const int64_t *d);
int64_t shape_elems(const Shape *s);
bool shape_eq(const Shape *a, const Shape *b);
const char *shape_str(Arena *a, const Shape *s);            /* "f32[2, 3]" without dtype: "[2, 3]" */
/* numpy broadcasting of two shapes; false (and the first result dim that
 * does not broadcast in *bad_dim, if given) when they do not */
bool shape_broadcast(const Shape *a, const Shape *b, Shape *out, int *bad_dim);
const char *dtype_name(DType d);
const char *op_name(Op op);
const char *sharding_str(Arena *a, const Program *p, const Value *v); /* "[d, _] partial(e)" */

/* The builder: the one way any pass makes IR. Each call takes the Build
 * it builds with and operands that fit (a misfit is a compiler bug, and
 * dies: user errors are sema's to report first), works out the result's
 * dtype and shape, and returns the new value (or its operand, where the op
 * would change nothing). Its modes are bd's alone. */
Value *ir_const(const Build *bd, DType dt, double x, Span sp);             /* a scalar */
double ir_round_bf16(double x); /* x as f32, rounded to the nearest bf16 (ties to even); NaN kept */
Value *ir_unary(const Build *bd, int fn, Value *x, Span sp);
Value *ir_binary(const Build *bd, int fn, Value *a, Value *b, Span sp);   /* numpy-broadcasts a and b; same dtype */
Value *ir_select(const Build *bd, Value *c, Value *a, Value *b, Span sp); /* broadcasts all three */
Value *ir_cast(const Build *bd, Value *x, DType dt, Span sp);
Value *ir_broadcast(const Build *bd, Value *x, Shape to, Span sp);        /* numpy: trailing dims aligned */
Value *ir_reshape(const Build *bd, Value *x, Shape to, Span sp);
Value *ir_transpose(const Build *bd, Value *x, const int *perm, Span sp); /* result dim i is x's dim perm[i] */
Value *ir_slice(const Build *bd, Value *x, int axis, int64_t start, int64_t len, Span sp);
Value *ir_concat(const Build *bd, Value **xs, int n, int axis, Span sp);
Value *ir_reduce(const Build *bd, int fn, Value *x, uint32_t mask, Span sp); /* the dims in mask dropped */
Value *ir_cumsum(const Build *bd, Value *x, int axis, bool exclusive, Span sp);
/* einsum of one or two operands: letters private to one operand are summed
 * first, a one-operand spec is a transpose */
Value *ir_einsum(const Build *bd, const EinsumSpec *e, Value **ops, Span sp);
/* the same without the final rounding: an einsum of bf16 operands as its
 * f32 accumulation (OP_EINSUM's result on bf16 operands is f32) */
Value *ir_einsum_acc(const Build *bd, const EinsumSpec *e, Value **ops, Span sp);
Value *ir_gather(const Build *bd, Value *table, Value *idx, Span sp);
/* gather's transpose: f32[rows, D...] of zeros, then each src[i..., :] of
 * src f32[I..., D...] added into row idx[i...] (idx i32[I...]) */
Value *ir_scatter_add(const Build *bd, Value *src, Value *idx, int64_t rows, Span sp);
Value *ir_one_hot(const Build *bd, Value *idx, int64_t n, Span sp);
/* moe routing: x f32[G, S, M] into e experts' c slots, f32[E, G, C, M], by
 * expert and slot i32[G, S, K] (a slot outside [0, c) drops the choice);
 * and back: f32[G, S, M] = sum over kept choices of weight f32[G, S, K]
 * times y f32[E, G, C, M] at the choice's (expert, group, slot) */
Value *ir_dispatch(const Build *bd, Value *x, Value *expert, Value *slot, int64_t e, int64_t c, Span sp);
/* the same, each row scaled by its choice's weight f32[G, S, K] (autodiff's
 * transpose of combine) */
Value *ir_dispatch_weighted(const Build *bd, Value *x, Value *expert, Value *slot, Value *weight, int64_t e, int64_t c,
                            Span sp);
/* dispatch's x and result, and combine's y, are f32 or bf16; combine's
 * result is f32 (its sum over choices, weighted by f32 gates) */
Value *ir_combine(const Build *bd, Value *y, Value *expert, Value *slot, Value *weight, Span sp);
Value *ir_rng(const Build *bd, int dist, double a, double b, Shape shape, Span sp); /* a new stream */
/* dropout(x, p) with a new stream (x itself for p = 0); p in [0, 1), x a float */
Value *ir_dropout(const Build *bd, Value *x, double p, Span sp);
/* x dropped and scaled as dropout d is (d's p and stream: the same mask on
 * x of d's shape): d's derivative */
Value *ir_dropout_as(const Build *bd, Value *x, const Value *d, Span sp);
Value *ir_iota(const Build *bd, Shape shape, int axis, Span sp); /* i32 of shape: each element its index along axis */
Value *ir_annotate(const Build *bd, Value *x, const Sharding *sh, Span sp);
/* a param or input: t copied into bd->p->tensors, its value made and returned */
Value *ir_tensor(const Build *bd, const Tensor *t);
void ir_output(Program *p, const char *name, Value *v, Span sp);     /* an OUT_VALUE */
/* any kind of root; tensor: OUT_UPDATE's, else -1 */
void ir_root(Program *p, OutputKind kind, const char *name, Value *v, int tensor, Span sp);
/* A training signal (OUT_SIGNAL): v, an f32 scalar or vector, reported
 * every step as name in --metrics records and, if log is not NULL and v a
 * scalar, as log in the log line; name is unique among the signals. */
void ir_signal(Program *p, const char *name, const char *log, Value *v, Span sp);
/* Whether a signal named name exists. */
bool ir_has_signal(const Program *p, const char *name);

/* The rewriter: copies src into a new program value by value, in order.
 * map[id] holds the new value standing for src's value id; fn makes it
 * (fn NULL, or fn returning NULL: ir_copy with the mapped operands).
 * Tensors and outputs follow the map. The new program has src's mesh,
 * streams and notes (moe, same, the tensors' update_note and auto_note:
 * their text copied), and is spmd if spmd is set. */
typedef Value *IrRewriteFn(void *ctx, Program *dst, const Value *v, Value **map);
Program *ir_rewrite(const Program *src, bool spmd, IrRewriteFn *fn, void *ctx);
/* Adds a region of p inside region `parent` (0: none), recomputed if
 * marked until main.c chooses otherwise; returns its number, for the
 * builder of its values (build_in). */
int ir_region_new(Program *p, int parent, Span span, Span site, const char *name, int64_t iter, const char *loops,
                  bool marked);
/* The unit region r is recomputed in: the outermost recomputed region
 * around it (or r itself), 0 when r (a number, 0: none) is kept. */
int ir_region_unit(const Program *p, int r);
/* Notes under an error at v (a value of p, after sema), reported to d,
 * that lead from its span to the user's line, as sema's errors do: "in
 * the call to 'f' here" at each call it was inlined through (its
 * regions), innermost first, and "in iteration i = 3 of the loop here" at
 * a remat for's header. */
void ir_note_calls(Diag *d, const Program *p, const Value *v);
/* The FLOPs of v on its operands' shapes: ein_flops for a product, 0 for any other op. */
double ir_flops(const Value *v);
/* The FLOPs v's op does for the model, on its shapes (--stats): a
 * product's 2 a multiply-add, over the routed share of a moe block's slots
 * (EinsumSpec.fill_share) when it runs over the filled slots alone; any
 * other op 1 an element it computes (elementwise ops) or sums (reductions,
 * scatter-add, combine's weighted sum, a weighted dispatch's scaling);
 * layouts, gathers, one-hots, annotations and collectives 0. *product:
 * whether v is a product. */
double ir_model_flops(const Value *v, bool *product);
/* A copy of src (ir_rewrite's, regions included) that may inline src's
 * IR functions (its train statement's update and schedule, borrowed: they
 * stay src's), so that autodiff can run on it while src stays as it is. */
Program *ir_clone(const Program *src);
/* v into dst with operands args: same op, dtype, shape, span and
 * attributes, and what ir_inherit gives */
Value *ir_copy(Program *dst, const Value *v, Value **args);
/* What a value made to stand for `from` (its copy, its SPMD value, the sum
 * --same-bits makes of it) takes of it: its call site, pass, region, name,
 * and sharding with its origin. Not its op's attributes (the op may
 * differ), nor what only SPMD values or collectives carry. */
void ir_inherit(Value *v, const Value *from);
/* The inliner on IR: copies IR function fn (ir_new_fn(bd->p)) into bd->p
 * with its parameters standing for args (each of its parameter's dtype and
 * shape), stamping bd's pass, region and call site (if it has one) and new
 * RNG streams, and stores its results in results. Returns how many (dies
 * if more than maxresults). No front end needed: passes call it on
 * functions sema made. */
int ir_inline(const Build *bd, const Program *fn, Value **args, int nargs, Value **results, int maxresults);

/* Where an index comes from: a box of an input's elements, which an op's
 * indices hold unchanged. */
typedef struct IndexSource {
  int tensor;               /* the input: index into Program.tensors */
  int64_t lo[GSL_MAX_RANK]; /* the box, in the input's global coordinates: from lo */
  int64_t hi[GSL_MAX_RANK]; /* to hi (exclusive), per dimension */
} IndexSource;

#define IR_MAX_SOURCES 16 /* most boxes ir_index_sources finds for one value */

/* The input elements that i32 value ix (a gather's or scatter_add's
 * indices) holds unchanged: ix traced back through ops that move elements
 * (ops.def's OF_MOVE) to inputs, each box of an input whose every element
 * is one of ix's, in global coordinates (so the same on the global and the
 * SPMD program). Stored in out; returns how many (at most
 * IR_MAX_SOURCES; a box past that, or one a reshape cuts up, is left out).
 * Elements computed on the way (tokens + 1) have no source. */
int ir_index_sources(const Value *ix, IndexSource *out);

/* The uses of every value of a program, counted in one place: the operand
 * slots that read each value, as a CSR of (consumer id, operand slot)
 * pairs, and the outputs that name it. Value ids must be the values'
 * indices (as every pass keeps them). */
typedef struct IrUses {
  int nvalues;  /* values of the program counted */
  int *first;   /* value id -> its first pair in list; its pairs end at first[id + 1] (nvalues + 1 entries) */
  int *list;    /* (consumer id, operand slot) pairs, 2 ints each: every value's together, its consumers in
                   program order (a consumer reading it twice: slots ascending) */
  int *outputs; /* value id -> the entries of Program.outputs that name it */
} IrUses;

IrUses ir_uses(const Program *p); /* arrays xmalloc'd: ir_uses_free */
void ir_uses_free(IrUses *u);
/* the operand slots that read value id */
static inline int ir_uses_reads(const IrUses *u, int id) { return u->first[id + 1] - u->first[id]; }
/* the operand slots and outputs that read value id */
static inline int ir_uses_count(const IrUses *u, int id) { return ir_uses_reads(u, id) + u->outputs[id]; }
void ir_dce(Program *p);                  /* drops values no output, tensor or the loss needs; renumbers */
void ir_print(FILE *f, const Program *p); /* --emit-ir, --emit-spmd */

/* ---- vmap.c: batching a body built for one member ---------------------------- */

/* The values bd->p->values[first..) were built for one member of a batch
 * of n (a moe body, for one expert): seeds[i] stands for the member's
 * slice of batch[i] (batch[i] has a leading dim n), and member (or NULL)
 * for the member's index, an i32 scalar (batched: 0..n-1; a tensor with
 * leading dim n indexed by it batches to itself). Rebuilds every value
 * that depends on a seed over [n, ...] (random draws too: one per member)
 * with bd at the call site of the value it batches, and stores the batched
 * form of results[j] in out[j] (broadcast if it depends on no seed).
 * Returns NULL, or the first value it cannot batch: one whose
 * op has no batching rule (an annotation, a routing op), or one that would
 * have more than GSL_MAX_ELEMS elements batched; out is then unset. */
const Value *ir_vmap(const Build *bd, int first, int64_t n, Value **seeds, Value **batch, int nseeds,
                     const Value *member, Value **results, Value **out, int nresults);

/* ---- slots.c: no products over empty moe slots ------------------------------- */

/* After autodiff, before propagation. Each moe block whose body treats its
 * capacity slots row by row (slots.c's header says how that is found) gets
 * its fill counts (i32[E, G], from the routing) and its matrix products,
 * forward and backward, a third operand: those counts (EinsumSpec.fill);
 * with loops, its elementwise values are bounded by them too (Value.rows).
 * Returns the new program (p must outlive it: the new one shares its
 * strings) with a MoeNote per block, or NULL when no block qualifies or
 * enable is false: the notes are then p's. */
Program *slots_skip_empty(Program *p, bool enable, bool loops);

/* ---- verify.c: the IR verifier --------------------------------------------- */

/* Every op's operands, dtypes, shapes and attributes agree (einsum letters
 * with extents included); in the SPMD program, collectives and local shapes
 * too. false and a report to err (if not NULL) when broken. */
bool ir_verify(const Program *p, FILE *err);

/* ---- sema.c (builtins.c, contract.c, inline.c): names, constants, inlining, shapes -> global IR */

typedef struct Define {
  const char *name;  /* -D NAME=VALUE */
  const char *value;
} Define;

typedef struct SemaOptions {
  const char **include_dirs; /* -I, searched first for imports */
  int ninclude;
  const char *stdlib_dir;    /* searched last */
  const Define *defines;     /* -D overrides of const */
  int ndefines;
} SemaOptions;

/* Elaborates a parsed program into global IR; NULL after reporting errors
 * to d. The convenience wrapper of the calls below (sema only: a program
 * that trains still needs ad_train, then ir_dce). */
Program *sema_program(const Node *root, const Source *src, Arena *ast_arena, const SemaOptions *opt, Diag *d);

/* A sema context kept alive, so that the compiler can call GSL functions
 * (the stdlib's, or the program's own) on IR values it made itself:
 *   Sema *s = sema_new(p, ast_arena, &opt, &diag);  sema_run(s, root);
 *   Build b = build_at(p, PASS_FORWARD, (Span){0}, 0);
 *   ... sema_call(s, &b, "nn", "dense", args, 3, res, 1, at) ...
 *   sema_free(s);  ir_dce(p);
 * The program p (from ir_new) and ast_arena (where imported modules are
 * parsed) stay the caller's, and must outlive the context. The program's
 * own statements are built with build_at(p, PASS_FORWARD, no site, no
 * region), made here: set p->precision first. Its errors, and those of
 * the modules it parses, are reported to d. */
typedef struct Sema Sema;
Sema *sema_new(Program *p, Arena *ast_arena, const SemaOptions *opt, Diag *d);
/* Elaborates root's statements into p; false after reporting errors. A
 * program that trains gets its optimizer's update as IR functions in
 * p->train.updates and its lr schedule in p->train.schedule (sema_function),
 * for autodiff. */
bool sema_run(Sema *s, const Node *root);
/* Inlines function fn of module (a name found as by import, e.g. "nn",
 * loaded once into a scope of its own; NULL: the program's own functions)
 * on args, values of bd->p, built with bd (in its body, at bd's call site,
 * or at `at` and in a region of its own where bd has none, as a call at
 * the top level). Types and arity are checked and shape names bound per
 * call, as for a call in the source; errors are located in the module
 * with a note at `at` (errors of the call itself are at `at`). Returns how
 * many values fn gives (a number comes back as an f32 scalar), stored in
 * results (dies if more than maxresults), or -1 after reporting errors. */
int sema_call(Sema *s, const Build *bd, const char *module, const char *fn, Value **args, int nargs,
              Value **results, int maxresults, Span at);
/* As sema_call, with nnums compile-time integers after the values: the
 * function's untyped parameters (a loop's bound, a shape's dim), bound as
 * a number argument in the source binds them. */
int sema_call_nums(Sema *s, const Build *bd, const char *module, const char *fn, Value **args, int nargs,
                   const int64_t *nums, int nnums, Value **results, int maxresults, Span at);
/* Function fn of module (as sema_call) specialized to nargs parameters of
 * dtypes dt and shapes sh: an IR function of p (ir_new_fn) whose results
 * are fn's, built in f32 (ir_inline copies it as built), for a later pass
 * to ir_inline without the front end. Errors as sema_call's; NULL after
 * reporting them. */
Program *sema_function(Sema *s, const char *module, const char *fn, const DType *dt, const Shape *sh, int nargs,
                       Span at);
void sema_free(Sema *s); /* the context only; p is left as it is */

/* ---- autodiff.c: reverse-mode differentiation and the optimizer step ------- */

/* For p->train (sema found it): the gradient of the loss with respect to
 * every param that is not frozen, built as IR after the forward values
 * (each op's rule from ops.def's rule column); then the step's learning
 * rate (p->train.schedule's IR function, if any, of the step count), the
 * gradients' global norm and, with clip, the factor every gradient is
 * scaled by; then, per trained param, its state tensors (made here,
 * TK_STATE) and the optimizer's update, p->train.updates' IR function of
 * the param's shape inlined on the param, its gradient, the states, the
 * step number and the hyperparameters; the new values become OUT_UPDATE
 * roots, the lr and the norm OUT_SIGNAL roots and the loss the OUT_LOSS
 * root. Params that get no gradient are warned about (to d) and left as
 * they are. The IR functions are freed. Nothing here is an error: sema
 * checked it all. */
void ad_train(Program *p, Diag *d);

/* ---- machine.c: the rates the cost search prices a plan with ------------- */

typedef struct Machine {
  double gemm_flops[3];            /* matrix products, FLOP/s, by the operands' DType */
  double mem_bytes_per_s;          /* every other op: bytes written (or read) a second */
  double rng_bytes_per_s;          /* random draws: bytes written a second */
  double link_bytes_per_s;         /* bytes a device receives in a collective, a second */
  double axis_link[GSL_MAX_AXES];  /* the same over one mesh axis; 0: link_bytes_per_s */
  double latency_s;                /* the fixed cost of a collective */
  double pinned_flops;             /* matrix products under gslc --same-bits (pinned.c), FLOP/s */
} Machine;

void machine_default(Machine *m); /* the reference machine's rates (machine.c says how measured) */
/* Overrides m's rates from FILE (machine.c gives the format; axes: the
 * mesh's axis names, for link_gbs.AXIS); false after reporting to d. */
bool machine_load(Machine *m, const char *path, const char *const *axes, int naxes, Diag *d);
double machine_link(const Machine *m, int axis); /* bytes a second over mesh axis `axis` */
/* The seconds op v takes on one device where its result has shape local
 * and its operand k shape args[k] (every op's rule: an einsum's FLOPs at
 * the GEMM rate of its operands' dtype; any other op's bytes written, a
 * reduction's read, at the memory rate; a draw's bytes at the rate of
 * draws, as an input's with a random initializer (drawn each step unless
 * --input binds a file; any other input's read or filled at the memory
 * rate); layouts that fuse into their users, other sources and
 * collectives nothing). */
double machine_op_seconds(const Machine *m, const Program *p, const Value *v, const Shape *local,
                          const Shape *const *args);

/* ---- sharding.c: the sharding algebra, resharding plans, their cost ------- */

bool shard_eq(const Sharding *a, const Sharding *b, int rank);
uint32_t shard_dim_axes(const Sharding *sh, int dim);    /* bitmask of the axes cutting dim */
uint32_t shard_all_axes(const Sharding *sh, int rank);   /* bitmask of the axes cutting any dim */
void shard_copy_dim(Sharding *to, int dt, const Sharding *from, int df); /* to's dim dt := from's df */
int64_t shard_group_size(const Program *p, const uint8_t *axes, int n); /* devices in a group of mesh axes */
int64_t shard_shards(const Program *p, const Sharding *sh, int dim);    /* devices dim is cut over */
/* The tile a device holds: a dim of n cut over k devices has ceil(n / k)
 * elements, shard j's real ones (global [j c, min(n, (j + 1) c))) first,
 * padding after: the same shape on every device (gsl.7, SHARDING). */
Shape shard_local_shape(const Program *p, const Shape *global, const Sharding *sh);
/* The dims of a value of global shape `global` whose shards do not divide
 * them (bitmask): its tiles end in padding on some device. */
uint32_t shard_padded(const Program *p, const Shape *global, const Sharding *sh);
/* The real elements the last of k shards of a dim of n holds (tiles of
 * ceil(n / k)): the fewest any shard holds, 0 where trailing shards hold
 * padding only. */
int64_t shard_last_real(int64_t n, int64_t k);
/* SPMD local slice v's last blocks reach past its operand's end (uneven
 * tiles of a whole dim): those elements are 0, and the operand is read
 * from a buffer (plan.c gives it one). */
bool shard_slice_past(const Program *s, const Value *v);
/* Fits an offered sharding to shape s: drops its partial sums, an axis used
 * twice, and each dimension's axes from the first that would leave a shard
 * without an element. */
void shard_fit(const Program *p, Sharding *sh, const Shape *s);
/* A reshape from `from` to `to` carries a split of a group's first real
 * dimension (size > 1) onto the other side's, where the tiles on both
 * sides hold the same elements (uneven splits rarely do); other splits
 * are dropped. */
Sharding shard_reshape(const Program *p, const Sharding *sh, const Shape *from, const Shape *to);

/* One step of a resharding plan: a collective or a local slice. */
typedef struct ShardStep {
  Op op;                        /* ALL_REDUCE, REDUCE_SCATTER, ALL_TO_ALL, COLLECTIVE_PERMUTE, ALL_GATHER, LOCAL_SLICE */
  int axis, axis2;              /* as in Value */
  uint8_t group[GSL_MAX_AXES];  /* mesh axes, major first */
  int ngroup;                   /* entries of group */
  uint8_t group2[GSL_MAX_AXES]; /* COLLECTIVE_PERMUTE: the target order */
  Sharding after;               /* the sharding once it is done */
} ShardStep;

#define SHARD_MAX_STEPS (4 * GSL_MAX_RANK + 2) /* most steps a plan takes */

/* Plans the resharding of a value of global shape gshape from `from` to
 * `to` into steps; returns their number (0: the shardings are equal). `to`
 * may keep some of from's partial sums pending (over axes it cuts no dim
 * with); the others are resolved. Steps over axes of size 1 are kept. */
int shard_plan(const Program *p, const Shape *gshape, const Sharding *from, const Sharding *to, ShardStep *steps);
/* Bytes one device receives for one step of kind op, with `in` local input
 * bytes, over a group of n devices. */
int64_t shard_step_bytes(Op op, int64_t in, int64_t n);
/* Bytes one device receives for a plan on a value of global shape gshape
 * that starts in sharding start. */
int64_t shard_plan_bytes(const Program *p, const Shape *gshape, DType dt, const Sharding *start, const ShardStep *steps,
                         int n);
/* The same for the plan from `from` to `to`. */
int64_t shard_reshard_bytes(const Program *p, const Shape *gshape, DType dt, const Sharding *from, const Sharding *to);
/* Bytes one device receives for collective (or local slice) v of the SPMD program. */
int64_t shard_collective_bytes(const Program *spmd, const Value *v);
/* The seconds of one step of kind op over the group's axes with `in`
 * local input bytes on machine m: a latency plus the bytes received at
 * the slowest axis's rate (0 for a local slice or a group of one). */
double shard_step_seconds(const Program *p, const Machine *m, Op op, int64_t in, const uint8_t *group, int ngroup);
/* The seconds of the plan from `from` to `to` on machine m. */
double shard_reshard_seconds(const Program *p, const Machine *m, const Shape *gshape, DType dt, const Sharding *from,
                             const Sharding *to);
/* The model's estimate of SPMD program s, built: the seconds one device
 * computes (machine_op_seconds) and communicates (shard_step_seconds) a
 * step, with no overlap (--explain's summary; --auto-shard prices plans
 * by the same rules before they are built). */
void shard_estimate(const Program *s, const Machine *m, double *compute, double *comm);
/* The seconds SPMD value v takes on one device by that model; *comm
 * set for a collective's (communication), clear for computation. */
double shard_value_seconds(const Program *s, const Machine *m, const Value *v, bool *comm);
/* The operand sharding that a reshape from `from` to `to` needs for its
 * result to have sh on tiles alone, or whole (no cut) where the tiles
 * cannot carry sh (the reshape is then done whole and cut after). */
Sharding shard_reshape_need(const Program *p, const Sharding *sh, const Shape *from, const Shape *to);

/* ---- rule.c: each op's sharding rule --------------------------------------- */

#define RULE_MAX_FACTORS (2 * GSL_MAX_RANK + 2) /* most factors a rule has */
#define RULE_MAX_ARGS 4                         /* operands a rule maps one by one (a concat's share one map) */

/* What a factor is to its op (rule.c's header). */
typedef enum FactorKind {
  FK_PASS,  /* in the result: a cut carries between operands and result */
  FK_SUM,   /* summed over: a cut leaves the result a partial sum */
  FK_MAX,   /* maxed over: a cut's local maxima are all-reduced */
  FK_WHOLE  /* kept whole on every device */
} FactorKind;

typedef enum ArgRole {
  AR_DATA,  /* takes and gives cuts of every factor it indexes */
  AR_INDEX, /* indices or routes: takes only the result's cuts; its padding reads and routes nowhere */
  AR_AUX    /* laid out as its factors are, never propagated (an einsum's fill counts) */
} ArgRole;

/* One value's sharding rule (shard_rule). */
typedef struct ShardRule {
  int nf;                                    /* factors */
  int64_t size[RULE_MAX_FACTORS];            /* each factor's extent */
  uint8_t kind[RULE_MAX_FACTORS];            /* each factor's FactorKind */
  int8_t res[GSL_MAX_RANK];                  /* result dim -> its factor, -1: none */
  int nmaps;                                 /* operands with a map of their own */
  int8_t arg[RULE_MAX_ARGS][GSL_MAX_RANK];   /* operand k's dim -> its factor, -1: none (rule_map) */
  uint8_t role[RULE_MAX_ARGS];               /* operand k's ArgRole (rule_role) */
  uint8_t order[RULE_MAX_ARGS];              /* the operands in the order they lead */
  double fill[RULE_MAX_ARGS];                /* an index operand's padding: the index or weight it reads as */
  unsigned linear;                           /* bit k: a pending partial sum of operand k passes through */
  bool joint;                                /* linear in all operands at once (a sum of them): their pending
                                                sums pass where they agree; else each alone, the others whole */
  bool variadic;                             /* every operand maps as operand 0 (a concat's) */
  bool reshape;                              /* the operand's dims map by shard_reshape, not by arg */
  bool route;                                /* moe routing: the partitioner weighs two layouts of its groups */
  bool contraction;                          /* the partitioner weighs keeping the operands' cuts of its summed
                                                factors (a partial sum to reduce-scatter) against its result's */
} ShardRule;

/* The mesh axes of each factor of a rule, major first. */
typedef struct Cuts {
  uint8_t naxes[RULE_MAX_FACTORS];
  uint8_t axes[RULE_MAX_FACTORS][GSL_MAX_AXES];
  uint32_t used;                             /* every axis some factor has */
} Cuts;

/* Operand k of v's sharding as a reader sees it (propagation: NULL while
 * undecided). */
typedef const Sharding *RuleArgFn(void *ctx, const Value *v, int k);

void shard_rule(const Value *v, ShardRule *r); /* v's rule: ops.def's r_SHARDING of v */
const int8_t *rule_map(const ShardRule *r, int k); /* operand k's dims -> factors */
ArgRole rule_role(const ShardRule *r, int k);
bool rule_linear(const ShardRule *r, int k);   /* a partial sum of operand k passes through */
/* Operands indexed alike, none summed over (elementwise ops, concat):
 * where they disagree, one operand's sharding is taken whole. */
bool rule_alike(const ShardRule *r, const Value *v);
uint32_t rule_kinds(const ShardRule *r);       /* bit FK_*: a factor of that kind exists */
/* The sharding of dims indexed by map (rank of them) under cuts c: each
 * dim its factor's axes, whole factors' dims and unmapped dims uncut. */
Sharding rule_apply(const ShardRule *r, const int8_t *map, int rank, const Cuts *c);
/* The mesh axes that cut factors of kind `kind` under c. */
uint32_t rule_cut_axes(const ShardRule *r, const Cuts *c, FactorKind kind);
/* The result's sharding from its operands' (get: NULL for undecided):
 * operands indexed alike give the one sharding the others reach with
 * the fewest bytes moved; others give each pass factor from the first
 * operand, in the rule's order, that cuts it with axes still free.
 * False when no operand is decided; *from: the operand that led. */
bool rule_forward(const Program *p, const Value *v, const ShardRule *r, RuleArgFn *get, void *ctx, Sharding *out,
                  const Value **from);
/* Operand k's sharding when the result has res: its pass factors as the
 * result cuts them; a data operand's summed and maxed factors as the
 * other operands cut them (get NULL: whole), or (own) as operand k
 * itself does. */
Sharding rule_operand(const Program *p, const Value *v, const ShardRule *r, int k, const Sharding *res,
                      RuleArgFn *get, void *ctx, bool own);
/* The cuts op v runs on when its result is to be res (the partitioner):
 * the result's pass factors, and the summed and maxed factors as the
 * operands (get) cut them, with axes still free; summed_first: those
 * first, the result's after (a contraction keeps its operands' cuts and
 * leaves a partial sum to reduce-scatter). */
Cuts rule_layout(const ShardRule *r, const Value *v, const Sharding *res, RuleArgFn *get, void *ctx,
                 bool summed_first);
/* Per value id of g (xcalloc'd): its one use passes a partial sum on
 * (rule_linear), so a partial sum of it may stay pending (the
 * partitioner's rule, which --auto-shard's search prices). */
bool *rule_linear_uses(const Program *g);
/* Operand k's dims (bit d) that a summed factor indexes: a cut of one
 * leaves v a partial sum (an einsum's contracted letters, a reduce-sum's
 * dims, a scatter-add's index dims), which --same-bits cuts into blocks. */
uint32_t rule_summed_dims(const ShardRule *r, const Value *v, int k);
/* The partial sums that pass through v from its n operands: pend[k],
 * what operand k has pending that may stay so through v (on no axis that
 * cuts its layout or v), held[k], all it has pending. An op linear in
 * all its operands at once passes the sums they all have pending alike,
 * less `summed` (the axes v sums over itself); one linear in each alone
 * passes one linear operand's where the others hold none. *from: that
 * operand, or -1 (every operand). */
uint32_t rule_pass_partial(const ShardRule *r, int n, const uint32_t *pend, const uint32_t *held, uint32_t summed,
                           int *from);
/* Whether reshape v, sharded sh, runs on tiles, its operand's cuts (want)
 * carrying sh (sharding.c's groups of dimensions); else it runs whole,
 * and a partial sum pending in its operand is resolved before. */
bool rule_reshape_tiles(const Program *p, const Value *v, const Sharding *sh, Sharding *want);
/* The partial sums of a program after propagation, per value id, as the
 * partitioner will build them (rule_partials). */
typedef struct RulePartials {
  uint32_t *made; /* the mesh axes over which the value comes out of its op a pending partial sum, less
                     those that cut it: its summed factors' cuts (rule_layout on the operands'
                     shardings) and the sums its operands leave pending that pass through it
                     (rule_pass_partial); an annotation's, what reaches it, resolved into its layout */
  uint32_t *left; /* of made, what stays pending into its one use (rule_linear_uses), else 0 */
} RulePartials;
RulePartials rule_partials(const Program *g);
void rule_partials_free(RulePartials *pp);
/* The mesh axes that cut sh over which, were v sharded sh, a partial sum
 * its operands leave pending (pp) would be resolved whole before v and
 * its result then sliced, not resolved into sh's cuts (a reduce-scatter):
 * a concat cut along its axis, a reshape whose tiles cannot carry sh. */
uint32_t rule_resolved_whole(const Program *g, const Value *v, const Sharding *sh, const RulePartials *pp);

/* ---- autoshard.c: gslc --auto-shard, the cost search ----------------------- */

/* What the search did, for --explain and --stats. */
typedef struct AutoShard {
  int values, classes, edges;      /* the IR's values, the classes they merge into, edges between classes */
  int columns, integers, rows, nonzeros; /* the integer programs' sizes, summed over the solves */
  int solves, rounds;              /* the solves; the rounds over the mesh axes (0: one joint solve) */
  bool joint;                      /* one program over every axis at once, not axis by axis */
  double objective;                /* the chosen plan's estimated seconds a step, one device */
  bool optimal;                    /* every solve proven optimal by the solver */
  double seconds;                  /* the search's wall time */
  double least;                    /* the least bytes of params, states and inputs a device can hold */
  const char *largest;             /* the largest parts of least, for a message (in the program's arena) */
  bool infeasible;                 /* least is past the budget: nothing was searched (the caller reports) */
  bool compared;                   /* totals holds the baselines too */
  double totals[3][3];             /* the chosen plan, pure data parallel, replication: compute and
                                      communication seconds, bytes held of params, states and inputs
                                      (data parallel: compute -1 if none was found) */
} AutoShard;

/* Chooses the sharding of every value of p (global IR, before
 * propagation) that no annotation fixes, minimizing the estimated step
 * time on machine m with at most `budget` bytes of params, optimizer
 * states and inputs a device (budget < 0: no bound); the choices get
 * origin SO_AUTO, each param's and input's reasons Tensor.auto_note.
 * False after reporting to d, or, with report->infeasible, with nothing
 * reported: no plan can hold them within the budget (report->least).
 * compare: also price pure data parallel and replication (--explain). */
bool auto_shard(Program *p, const Machine *m, double budget, bool compare, AutoShard *report, Diag *d);

/* ---- propagate.c: sharding propagation (GSPMD section 3.5) --------------- */

/* Gives every value of the global IR a sharding: user annotations held
 * fixed, others found by propagation to a fixed point, replicated where
 * nothing reaches. */
void shard_propagate(Program *p);
/* Undoes propagation, the sharded updates and --auto-shard's choices:
 * every value but the annotated ones undecided again (to search again). */
void shard_reset(Program *p);

/* ---- update.c: where each optimizer update runs (ZeRO-1) --------------- */

/* After propagation: each trained param whose gradient is a partial sum
 * over axes it is whole on gets its update sharded over them where that
 * moves no more bytes (update.c's header says how); Tensor.update_note
 * says what was chosen. */
void shard_updates(Program *p);

/* ---- partition.c: the SPMD partitioner ----------------------------------- */

/* The per-device program: every value on its local shape, with the
 * collectives that resharding needs. A new Program; p is left as it is. */
Program *spmd_partition(const Program *p);

/* ---- combine.c: small all-to-alls ride with large ones ------------------- */

/* An all_to_all of at most this many bytes a device rides with an earlier
 * one on the same group (the largest small enough in one message). */
#define SPMD_RIDER_MAX_BYTES 65536
/* Moves each small all_to_all whose operand is ready at an earlier
 * all_to_all of the same group right after it, as its rider (Value.rider,
 * Value.carrier): one exchange moves both. */
void spmd_combine(Program *p);
/* samebits.c (gslc --same-bits): g with every sum over a dimension a mesh
 * axis splits done in fixed blocks (the largest divisor of its extent not
 * above bound), the blocks' partials added in block order, so that every
 * mesh computes the same bits (its notes in same, for --explain).
 * NULL after reporting to d a dimension whose tiles on this mesh are not
 * whole blocks (or one too deep to cut). */
Program *samebits_block(const Program *g, int bound, Diag *d);
/* The largest bound --same-bits=N takes, and the same in words. */
#define SAMEBITS_MAX_BOUND 4096
#define SAMEBITS_MAX_TEXT "4096"

/* ---- explain.c: --explain ------------------------------------------------ */

/* searched: what gslc --auto-shard's search did, or NULL without it; m:
 * the rates the summary's estimate of the step uses (shard_estimate);
 * plain: under --same-bits, that estimate of the program built without it
 * (compute and communication seconds), else NULL */
void explain_print(FILE *f, const Program *global, const Program *spmd, const AutoShard *searched, const Machine *m,
                   const double *plain);
/* gslc --emit-annotations: the params' and inputs' declarations with their shardings written in */
void annotations_print(FILE *f, const Program *global);

/* ---- lower.c: how values are lowered, decided once for the plan and codegen ---- */

/* Whether reshape v only adds or drops dims of size 1: an index map, which
 * codegen fuses (cg_fuse.c) and the plan need not give a buffer. */
bool lower_unit_reshape(const Value *v);

/* An einsum's letters with the extent of each. */
typedef struct EinsumLetters {
  char op[2][GSL_MAX_RANK + 1]; /* each operand's letters, in memory order */
  char out[GSL_MAX_RANK + 1];   /* the result's letters */
  int nops;                     /* operands in the spec */
  int64_t ext[256];             /* extent of each letter (0: unused) */
} EinsumLetters;

/* Einsum v's letters with their extents; dies when its spec does not fit its operands. */
void lower_einsum_letters(const Value *v, EinsumLetters *s);
/* Letter strings: s ++ c (s has room); a ++ b ++ c into buf (of 3 * GSL_MAX_RANK + 1), cut at its end. */
void lower_append(char *s, char c);
const char *lower_cat3(char *buf, const char *a, const char *b, const char *c);

/* Which rows of a GEMM its fill counts let it skip (gslrt_sgemm_fill);
 * slots.c names the products it restricts by the same kinds. */
typedef enum GemmFill {
  GF_NONE,  /* all of them: no counts, or counts the layout cannot use */
  GF_ROWS,  /* rows of A and C past each block's count: C's are zeroed */
  GF_DEPTH  /* terms of the sum past each block's count */
} GemmFill;

/* How an einsum is lowered: a plain loop nest, or one batched GEMM on
 * operands (and a result) laid out [batch, M, K] x [batch, K, N] ->
 * [batch, M, N] up to a transpose of A or B, through temporaries where not. */
typedef struct GemmPlan {
  bool gemm;                     /* through gslrt_sgemm (false: a plain loop nest) */
  const Value *a, *b;            /* the values whose buffers are read as A (rows) and B (columns) */
  char la[GSL_MAX_RANK + 1];     /* A's letters in memory order */
  char lb[GSL_MAX_RANK + 1];     /* B's letters in memory order */
  char bl[GSL_MAX_RANK + 1];     /* batch letters */
  char ml[GSL_MAX_RANK + 1];     /* row letters (A and the result) */
  char nl[GSL_MAX_RANK + 1];     /* column letters (B and the result) */
  char kl[GSL_MAX_RANK + 1];     /* summed letters, in the order the GEMM uses */
  bool a_t, b_t;                 /* A lies [batch, K, M], B lies [batch, N, K] */
  int64_t nb, m, n, k;           /* batch count and GEMM sizes */
  int64_t tmp_a, tmp_b, tmp_c;   /* the bytes of its temporaries, -1: none: A, B copied to [batch, M, K],
                                    [batch, K, N]; C before its permuting copy to the result (the plan places
                                    them, in this order, from Plan.temp) */
  GemmFill fill;                 /* an einsum with fill counts: how the GEMM reads them */
  const Value *fills;            /* GF_ROWS, GF_DEPTH: the i32 counts, one per batch entry and block */
  int64_t blocks, slots;         /* GF_ROWS (GF_DEPTH): M (K) is blocks blocks of slots, per batch entry */
} GemmPlan;

/* Einsum v's lowering (lower.c's header says how it is chosen), given
 * which values have buffers (mat: Plan.mat, per value): what cg_emit
 * builds, and the temporaries plan_buffers places for it. */
void lower_gemm_plan(const Value *v, const bool *mat, GemmPlan *g);

/* ---- plan.c: which values get buffers, whose, and how long they live --------- */

#define PLAN_ALIGN 64 /* bytes: the runtime's allocation alignment, of every buffer's offset and size */
/* n rounded up to a multiple of PLAN_ALIGN */
static inline int64_t plan_align(int64_t n) { return (n + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }
/* the bytes of v's local tile (at least one element, as the runtime allocates) */
static inline int64_t plan_value_bytes(const Value *v) {
  int64_t n = shape_elems(&v->shape);
  return dtype_size(v->dtype) * (n > 0 ? n : 1);
}

/* A buffer that lives within one value's code (an einsum's copies). */
typedef struct PlanTemp {
  int value;      /* the value whose code uses it */
  int64_t bytes;  /* its size, 64-byte multiple */
  int64_t offset; /* its place in the arena */
} PlanTemp;

/* What codegen allocates: every intermediate at an offset in one arena,
 * reused once its value is dead. Params and inputs keep the runtime's own
 * storage. Sizes are per device (the program's local shapes). */
typedef struct Plan {
  int nvalues;            /* of the program planned */
  bool *mat;              /* per value: has a buffer (its own or its root's) */
  bool *inline_each_use;  /* per value: inlined into each of its users (computed again in each) even when
                             read twice: consts, iotas, index maps of buffers or of these */
  int *root;              /* per value: the value owning its buffer (itself unless an alias or in place) */
  bool *inplace;          /* per value: an update computed straight into its param's or state's
                             storage (root names that tensor's value) */
  int *loop;              /* per value with a buffer: the value whose loop nest computes it with others of
                             its shape (the last of them, plan_loops), itself when none */
  bool *held;             /* per value of such a loop: read by its loop alone, held in registers, no buffer */
  int *at;                /* per value: the step (value id) its code runs at, -1: never */
  int64_t *offset;        /* per root value: its buffer's byte offset in the arena, -1: not in it */
  int64_t *bytes;         /* per root value in the arena: its buffer's size, 64-byte multiple */
  int *first, *last;      /* per root value in the arena: the steps (value ids) it is live over */
  PlanTemp *temps;        /* temporaries */
  int *temp;              /* per value: its first temporary in temps, -1: none (an einsum's, as many as its
                             lowering asks for, lower_gemm_plan: A's, B's, C's, one after another) */
  int ntemps;             /* entries of temps */
  int64_t arena_bytes;    /* the arena: peak intermediate bytes, with reuse */
  int64_t live_bytes;     /* the most bytes live at one step (a lower bound of arena_bytes) */
  int64_t noreuse_bytes;  /* every buffer of the arena on its own: the bytes without reuse */
  int64_t param_bytes;    /* params' local tiles */
  int64_t state_bytes;    /* optimizer states' local tiles */
  int64_t input_bytes;    /* inputs' local tiles */
  int64_t output_bytes;   /* OUT_VALUE outputs' local tiles (held in the arena or the params and inputs) */
  int64_t scratch_bytes;  /* the runtime's collective scratch space (the largest one needs) */
  int64_t gather_bytes;   /* rank 0, after the steps: an output gathered and placed (several devices) */
  int gather_output;      /* the output gather_bytes is for (an index of the program's outputs), or -1 */
} Plan;

/* The plan of p (the SPMD program, or a global one as one device): its
 * buffers and lifetimes, placed (plan_place), with the runtime's staging
 * (plan_staging) and the totals. */
Plan *plan_buffers(const Program *p);
void plan_free(Plan *pl);
/* The bytes a device needs: params, states, inputs, the planned arena and the runtime's staging (--stats' total). */
int64_t plan_total(const Plan *pl);

/* ---- plan_arena.c: the allocator, placing buffers in one arena ------------------ */

/* One buffer to place. */
typedef struct PlanItem {
  int64_t bytes;   /* size, a multiple of PLAN_ALIGN */
  int first, last; /* live steps */
  int64_t *offset; /* where its offset goes */
  int order;       /* tie-break: creation order (values by id, then temporaries) */
} PlanItem;

/* Places the nit buffers of it, live over steps within [0, nsteps], in
 * one arena (plan_arena.c's header says how): sets each *offset, and pl's
 * arena_bytes, noreuse_bytes and live_bytes. Reorders it. */
void plan_place(Plan *pl, PlanItem *it, int nit, int nsteps);
/* No two buffers share arena bytes while both are live; every buffer lies
 * aligned inside the arena. false and a report to err (if not NULL) when
 * broken. (Pairs of byte-sharing buffers past 5e7 go unchecked.) */
bool plan_verify(const Plan *pl, FILE *err);

/* ---- plan_staging.c: the runtime's own staging beside the arena ---------------- */

/* Sets pl's scratch_bytes (the collectives' scratch space, riders' included),
 * gather_bytes and gather_output (rank 0 gathering an output) for p. */
void plan_staging(Plan *pl, const Program *p);

/* ---- stats.c: gslc --stats, the plan told --------------------------------------- */

/* The largest parts of plan_total, largest first, for a message: "gathering
 * output w1 on rank 0 201326592, intermediates 168034496, params 151035904
 * (w1 67108864)" (in a). */
const char *stats_largest(Arena *a, const Program *p, const Plan *pl);
/* gslc --stats: memory per device and bytes each collective moves per step
 * (p the SPMD program, pl its plan), and the moe blocks' capacity slots
 * (global's notes, slots.c) */
void stats_print(FILE *f, const Program *p, const Plan *pl, const Program *global);

/* ---- remat.c: what recomputing a region saves and costs ------------------------------- */

/* Fills the saved, seconds and flops of g's outermost regions, measured
 * on s (g's SPMD program, with g's regions) and its plan pl, priced on m. */
void remat_measure(Program *g, const Program *s, const Plan *pl, const Machine *m);
/* The outermost regions of g not recomputed that would save bytes, the
 * least seconds per byte saved first, into order (room for g->nregions);
 * returns how many. */
int remat_order(const Program *g, int *order);

/* ---- codegen.c (and cg_*.c): LLVM ---------------------------------------------------- */

typedef enum EmitKind { EMIT_OBJECT, EMIT_ASM, EMIT_LLVM } EmitKind;

typedef struct CodegenOptions {
  int opt_level;   /* 0..3 */
  EmitKind emit;   /* what to write */
  const char *out; /* file to write */
  const char *build; /* gslrt_program_info's build: a JSON object's text (main.c), or NULL */
} CodegenOptions;

/* Lowers p to LLVM with its buffer plan pl (plan_buffers(p)), optimizes
 * and writes opt->out; false after reporting to d. */
bool cg_emit(const Program *p, const Plan *pl, const CodegenOptions *opt, Diag *d);

#endif
