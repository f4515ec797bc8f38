/* gslc.h — the compiler's one internal header.
 *
 * The pipeline (driven by main.c) reads one representation and writes the
 * next: source text -> tokens (grammar/lexer.re) -> AST (grammar/parser.y,
 * ast.c) -> global tensor IR (sema.c: names, consts, inlined calls, static
 * shapes) -> [propagate, partition: the sharding issue] -> LLVM module
 * (codegen.c) -> object file -> executable (main.c spawns the linker).
 *
 * Sections follow the file that defines the functions they declare. */
#ifndef GSLC_H
#define GSLC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
Source *source_from_string(const char *path, const char *text);
void source_free(Source *s);
Span span_join(Span a, Span b);                         /* from a's start to b's end */
void diag_set_stream(FILE *f);                          /* default stderr; tests capture */
void diag_error(Span sp, const char *fmt, ...);         /* file:line:col: error: ..., line, caret */
void diag_note(Span sp, const char *fmt, ...);          /* file:line:col: note: ... */
void diag_fatal(const char *fmt, ...);                  /* gslc: error: ... (no location) */
int diag_errors(void);                                  /* errors reported so far */
void diag_reset(void);

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
  bool flag;      /* PARAM: frozen; BOOL: value */
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

/* Parses a whole file; NULL (after reporting every syntax error found) when
 * the text is not a program. The tree lives in arena a. */
Node *parse_source(const Source *src, Arena *a);

/* ---- ir.c: the global tensor IR ----------------------------------------- */

typedef enum DType { DT_F32, DT_I32 } DType;

typedef enum Op {
#define X(op, s, n) OP_##op,
#include "ops.def"
#undef X
  OP__COUNT
} Op;

typedef enum UnaryFn {
  UF_NEG, UF_EXP, UF_LOG, UF_SQRT, UF_RSQRT, UF_TANH, UF_SIGMOID, UF_RELU,
  UF_GELU, UF_ABS
} UnaryFn;
typedef enum BinaryFn {
  BF_ADD, BF_SUB, BF_MUL, BF_DIV, BF_POW, BF_MAX, BF_MIN,
  BF_LT, BF_LE, BF_GT, BF_GE, BF_EQ, BF_NE /* comparisons yield 1/0 in the result dtype */
} BinaryFn;
typedef enum ReduceFn { RF_SUM, RF_MAX, RF_ARGMAX } ReduceFn; /* argmax: i32 result, first maximum */
typedef enum RngDist { RNG_UNIFORM, RNG_NORMAL } RngDist;     /* uniform [fval, fval2); normal(0, fval) */

typedef struct Shape {
  int rank;                 /* number of dimensions; 0 for a scalar */
  int64_t d[GSL_MAX_RANK];  /* extents */
} Shape;

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
  SO_PROPAGATED  /* found by propagation (sh_from says from which value) */
} ShardOrigin;

typedef struct Value Value;
struct Value {
  int id;            /* SSA number: index in Program.values, in program order */
  Op op;             /* what computes it */
  DType dtype;       /* element type */
  Shape shape;       /* global shape */
  Span span;         /* source construct that produced it */
  Span site;         /* for code inlined from a call: the outermost call (else span) */
  const char *name;  /* the user's name for it (let, param, input), or NULL */
  Value **args;      /* operands */
  int nargs;         /* number of operands */
  int nuses;         /* operand slots that read it (ir_count_uses) */
  /* attributes, per op (ops.def) */
  int fn;            /* UnaryFn, BinaryFn, ReduceFn or RngDist */
  int axis;          /* SLICE, CONCAT, CUMSUM; collectives: the dim they act on */
  int axis2;         /* ALL_TO_ALL: the dim received blocks are joined along */
  uint8_t group[GSL_MAX_AXES]; /* collectives: mesh axes, major first */
  int ngroup;        /* collectives: entries of group */
  uint8_t group2[GSL_MAX_AXES]; /* COLLECTIVE_PERMUTE: the same axes, in the target's order */
  int64_t start;     /* SLICE */
  bool exclusive;    /* CUMSUM */
  uint32_t rmask;    /* REDUCE: dims reduced */
  int perm[GSL_MAX_RANK]; /* TRANSPOSE, BROADCAST */
  double fval, fval2;/* CONST (f32), RNG parameters */
  int64_t ival;      /* CONST (i32) */
  uint32_t stream;   /* RNG: draw number, stable in program order */
  const char *spec;  /* EINSUM: "ab,bc->ac" */
  int tensor;        /* PARAM, INPUT: index in Program.tensors */
  /* sharding */
  Sharding sh;         /* the value's sharding (global IR: decided by propagation) */
  ShardOrigin sh_origin;
  const Value *sh_from; /* SO_PROPAGATED: the neighbour it came from */
  /* SPMD IR (partition.c) */
  Shape gshape;        /* the global shape whose tile `shape` is (== shape in global IR) */
  const Value *orig;   /* the global value it computes, or NULL (collectives) */
  const char *why;     /* collectives: what needed them, for --explain */
};

typedef enum InitKind { INIT_NONE, INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_UNIFORM } InitKind;
typedef enum TensorKind { TK_PARAM, TK_INPUT } TensorKind;

typedef struct Tensor {
  const char *name; /* declared name */
  TensorKind kind;  /* param or input */
  DType dtype;
  Shape shape;      /* global shape */
  Span span;        /* the declaration */
  InitKind init;    /* initializer (INIT_NONE: inputs must be bound by --input) */
  double a, b;      /* its arguments: normal(std=a), uniform(a, b) */
  bool frozen;      /* param not trained */
  uint32_t stream;  /* RNG stream of its initializer */
  Value *value;     /* the OP_PARAM/OP_INPUT value */
  bool annotated;   /* declaration carried a sharding */
  Sharding sh;      /* that sharding */
} Tensor;

typedef struct Output {
  const char *name; /* the name after `output` */
  Value *value;     /* what it names */
  Span span;        /* the output statement */
} Output;

typedef struct Program {
  Arena *arena;     /* owns everything below */
  const char *path; /* main source file */
  Mesh mesh;        /* the device mesh */
  Value **values;   /* every value, in program order (operands first) */
  int nvalues, capvalues;
  Tensor *tensors;  /* params and inputs, in declaration order */
  int ntensors, captensors;
  Output *outputs;  /* in declaration order */
  int noutputs, capoutputs;
  uint32_t nstreams; /* RNG streams handed out */
  bool spmd;         /* values carry local shapes (partition.c's output) */
} Program;

Program *ir_new(const char *path);
void ir_free(Program *p);
/* appends a value; args copied into the arena */
Value *ir_add(Program *p, Op op, DType dt, Shape shape, Span sp, int nargs, Value **args);
Shape shape_of(int rank, const int64_t *d);
int64_t shape_elems(const Shape *s);
bool shape_eq(const Shape *a, const Shape *b);
const char *shape_str(Arena *a, const Shape *s);            /* "f32[2, 3]" without dtype: "[2, 3]" */
const char *dtype_name(DType d);
const char *op_name(Op op);
const char *unary_fn_name(int fn);
const char *binary_fn_name(int fn);
const char *sharding_str(Arena *a, const Program *p, const Value *v); /* "{0:d, 1:_}" style */
void ir_count_uses(Program *p);
void ir_dce(Program *p);                  /* drops values no output or tensor needs; renumbers */
void ir_print(FILE *f, const Program *p); /* --emit-ir */
bool ir_verify(const Program *p, FILE *err); /* structural checks; false and a report if broken */

/* ---- sema.c: names, constants, inlining, shapes -> global IR ------------ */

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

/* Elaborates a parsed program into global IR; NULL after reporting errors. */
Program *sema_program(const Node *root, const Source *src, Arena *ast_arena, const SemaOptions *opt);

/* ---- propagate.c: sharding propagation (GSPMD section 3.5) --------------- */

/* Gives every value of the global IR a sharding: user annotations held
 * fixed, others found by propagation to a fixed point, replicated where
 * nothing reaches. */
void shard_propagate(Program *p);
bool sharding_eq(const Sharding *a, const Sharding *b, int rank);
uint32_t sharding_dim_axes(const Sharding *sh, int dim);    /* bitmask of the axes cutting dim */
uint32_t sharding_all_axes(const Sharding *sh, int rank);   /* bitmask of the axes cutting any dim */
void sharding_copy_dim(Sharding *to, int dt, const Sharding *from, int df); /* to's dim dt := from's df */
int64_t sharding_shards(const Program *p, const Sharding *sh, int dim); /* devices dim is cut over */
Shape local_shape(const Program *p, const Shape *global, const Sharding *sh);
/* A reshape from `from` to `to` carries a split of a group's first real
 * dimension (size > 1) onto the other side's; other splits are dropped. */
Sharding reshape_sharding(const Sharding *sh, const Shape *from, const Shape *to);
typedef struct Letters {
  char in[2][GSL_MAX_RANK + 1]; /* a two-operand einsum's operand letters */
  char out[GSL_MAX_RANK + 1];   /* its result's */
} Letters;
void einsum_letters(const Value *v, Letters *l);

/* ---- partition.c: the SPMD partitioner ----------------------------------- */

/* The per-device program: every value on its local shape, with the
 * collectives that resharding needs. A new Program; p is left as it is. */
Program *spmd_partition(const Program *p);
/* Bytes one device receives to reshard a value of global shape gshape from
 * one sharding to another (no partial sums in to), as --explain counts. */
int64_t reshard_bytes(const Program *p, const Shape *gshape, const Sharding *from, const Sharding *to);

/* ---- explain.c: --explain ------------------------------------------------ */

void explain_print(FILE *f, const Program *global, const Program *spmd);
int64_t collective_bytes(const Program *spmd, const Value *v); /* sent per device per step */

/* ---- codegen.c: LLVM ---------------------------------------------------- */

typedef enum EmitKind { EMIT_OBJECT, EMIT_ASM, EMIT_LLVM } EmitKind;

typedef struct CodegenOptions {
  int opt_level;   /* 0..3 */
  EmitKind emit;   /* what to write */
  const char *out; /* file to write */
} CodegenOptions;

/* Lowers p to LLVM, optimizes and writes opt->out; false after reporting. */
bool cg_emit(const Program *p, const CodegenOptions *opt);

#endif
