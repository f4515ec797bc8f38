/* generate.c — text from a program that maps token windows to next-token
 * logits: --generate N, --prompt TEXT or --prompt-file FILE,
 * --temperature T, --top-k K, --seed S (man/gslrun.7, GENERATION).
 *
 * The convention, checked against the declarations (usage errors, every
 * rank alike): the program's one i32 input is the token windows, tokens:
 * i32[B, W], and it outputs logits: f32[B, T, V] (or bf16) with T <= W and
 * V <= 256, logits[b, t, v] being the score of token v as the one after
 * tokens[b, 0..t]. Tokens are bytes, so V <= 256; every table the tokens
 * index (gslrt_declare_index_check) has at least V rows, so that any
 * token the logits can choose is a valid index and nothing need be
 * checked as the windows are bound; any other input is drawn from its
 * initializer. The program gives gsl_forward (gslrt_program_info): the
 * kernels its outputs need, without the backward pass and the update.
 *
 * The loop, on every rank together: the context is the last n <= T bytes
 * of the prompt and the bytes generated so far; every row of the windows
 * holds them in columns 0..n-1 (left-aligned, as a causal model with
 * learned positions was trained to read them) and zeros after; the
 * forward pass runs with key GSLRT_GEN_KEY + j for byte j (its random
 * draws: random routing, inputs drawn from initializers); logits is
 * gathered to rank 0 (gslrt_gather_output, as --output is), which takes
 * row 0's scores at position n - 1, chooses a byte (gslrt_choose_token)
 * with u = gslrt_rng_uniform53(--seed, GSLRT_GEN_STREAM, j, 0), writes it
 * to stdout and flushes it; the byte (or rank 0's error) is broadcast and
 * appended to every rank's context, dropping the oldest byte once there
 * are T. The choice depends on the scores and the seed alone, so a mesh
 * that computes the same logits writes the same text.
 *
 * The prompt. Only its last T bytes are used, but every byte is checked
 * against V, so a --prompt-file is read whole, keeping the last T: a
 * regular file or a FIFO (a pipe, /dev/stdin under `|`) of at most
 * GEN_MAX_PROMPT (64 MiB); a device (/dev/zero, which never ends; a
 * terminal) or a directory is refused before it is opened, as npy.c
 * refuses one, and a longer file or pipe as soon as it is seen to be.
 *
 * Nothing else is written: no checkpoint, no output file, no log; notes go
 * to stderr (not with --quiet), the text alone to stdout. */
#include "internal.h"
#include "seterr.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GEN_MAX_V 256 /* tokens are bytes */
#define GEN_MAX_PROMPT (64 << 20) /* the longest --prompt-file read, in bytes */

/* What generation works with, found in the program's declarations. */
typedef struct gen_plan {
  int tokens;              /* the token input: index into ctx->tensors */
  const gslrt_output *out; /* the logits output */
  int64_t b, w;            /* the windows' shape: B rows of W tokens */
  int64_t t, v;            /* logits' positions T (<= W) and tokens V (<= 256) */
} gen_plan;

/* Checks the program against the convention and --top-k against V; a
 * usage error naming what is missing or wrong. Every rank alike. */
static void find_plan(gslrt_ctx *ctx, gen_plan *p) {
  char have[128], names[256] = "";
  int ni32 = 0;
  size_t n = 0;
  memset(p, 0, sizeof *p);
  p->tokens = -1;
  if (!ctx->info->forward)
    gslrt_usage_error(ctx, "--generate: the program has no forward pass to run (gsl_forward); compile it again "
                      "with this gslc");
  for (int k = 0; k < ctx->noutputs; k++)
    if (!strcmp(ctx->outputs[k].name, "logits"))
      p->out = &ctx->outputs[k];
  if (!p->out)
    gslrt_usage_error(ctx, "--generate: the program has no output named logits (generation needs `output "
                      "logits`, f32[B, T, V]: the scores of the token after each position of the windows)");
  const gslrt_output *o = p->out;
  gslrt_type_str(have, sizeof have, o->dtype, o->rank, o->global_shape);
  if (o->rank != 3 || o->dtype == GSLRT_I32)
    gslrt_usage_error(ctx, "--generate: output logits is %s, not f32[B, T, V] (B windows, T positions, V tokens)",
                      have);
  for (int k = 0; k < ctx->ntensors; k++) {
    const gslrt_tensor *t = &ctx->tensors[k];
    if (t->kind != GSLRT_INPUT || t->dtype != GSLRT_I32)
      continue;
    p->tokens = k;
    if (n < sizeof names)
      n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", ni32 ? ", " : "", t->name);
    ni32++;
  }
  if (ni32 == 0)
    gslrt_usage_error(ctx, "--generate: the program has no i32 input to hold the token windows (i32[B, W])");
  if (ni32 > 1)
    gslrt_usage_error(ctx, "--generate: the program has %d i32 inputs (%s); generation needs exactly one, the "
                      "token windows (i32[B, W])", ni32, names);
  const gslrt_tensor *t = &ctx->tensors[p->tokens];
  char tok[128];
  gslrt_type_str(tok, sizeof tok, t->dtype, t->rank, t->global_shape);
  if (t->rank != 2)
    gslrt_usage_error(ctx, "--generate: input %s, the token windows, is %s, not i32[B, W]", t->name, tok);
  p->b = t->global_shape[0], p->w = t->global_shape[1];
  p->t = o->global_shape[1], p->v = o->global_shape[2];
  if (o->global_shape[0] != p->b)
    gslrt_usage_error(ctx, "--generate: output logits is %s but input %s is %s: their first dimensions (B, the "
                      "windows) differ", have, t->name, tok);
  if (p->t < 1 || p->t > p->w)
    gslrt_usage_error(ctx, "--generate: output logits is %s: its T = %lld positions must be from 1 to the W = "
                      "%lld tokens of a window of input %s (%s)", have, (long long)p->t, (long long)p->w,
                      t->name, tok);
  if (p->v < 1 || p->v > GEN_MAX_V)
    gslrt_usage_error(ctx, "--generate: output logits is %s: generation writes bytes, so V must be from 1 to "
                      "%d, not %lld", have, GEN_MAX_V, (long long)p->v);
  if (ctx->opts.top_k > p->v)
    gslrt_usage_error(ctx, "--top-k %lld: the program has only V = %lld tokens (output logits is %s)",
                      (long long)ctx->opts.top_k, (long long)p->v, have);
  for (int i = 0; i < ctx->nchecks; i++)
    if (ctx->checks[i].tensor == p->tokens && ctx->checks[i].rows < p->v)
      gslrt_usage_error(ctx, "--generate: input %s indexes %s, a table of %lld rows, but output logits scores "
                        "V = %lld tokens: every token it can choose must be a row", t->name, ctx->checks[i].what,
                        (long long)ctx->checks[i].rows, (long long)p->v);
  for (int k = 0; k < ctx->ntensors; k++) {
    const gslrt_tensor *x = &ctx->tensors[k];
    if (x->kind == GSLRT_INPUT && k != p->tokens && x->init == GSLRT_INIT_NONE)
      gslrt_usage_error(ctx, "--generate: input %s has no initializer (generation binds the token windows, "
                        "input %s, and draws every other input from its initializer)", x->name, t->name);
  }
}

/* Checks byte c at offset i of the prompt (what names it) against V; 0,
 * or 2 (a usage error) with the cause in err. */
static int check_byte(unsigned char c, int64_t i, const char *what, int64_t v, char *err) {
  if (c < v)
    return 0;
  char shown[8] = "";
  if (isprint(c))
    snprintf(shown, sizeof shown, "'%c', ", c);
  gslrt_seterr(err, GSLRT_ERRLEN, "%s: byte %d (%s0x%02x) at offset %lld is not a token of this program, whose "
               "logits score tokens 0 to %lld", what, (int)c, shown, (unsigned)c, (long long)i, (long long)v - 1);
  return 2;
}

/* Appends the got bytes of buf to the last *n <= t bytes of the prompt
 * in last, keeping the last t. */
static void keep_last(unsigned char *last, int64_t *n, int64_t t, const unsigned char *buf, int64_t got) {
  if (got >= t) {
    memcpy(last, buf + (got - t), (size_t)t);
    *n = t;
    return;
  }
  int64_t drop = *n + got > t ? *n + got - t : 0;
  memmove(last, last + drop, (size_t)(*n - drop));
  *n -= drop;
  memcpy(last + *n, buf, (size_t)got);
  *n += got;
}

/* What kind of file mode is, for a message: "a directory". */
static const char *kind_of(mode_t mode) {
  return S_ISDIR(mode) ? "a directory" : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device"
         : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

/* Opens the --prompt-file (what names it): a regular file of at most
 * GEN_MAX_PROMPT bytes, or a FIFO (a pipe: /dev/stdin under `|`), whose
 * reading is bounded as it goes; anything else (a device, which may never
 * end, as /dev/zero; a directory) is refused before it is opened, and
 * again after (it may have changed between). NULL, with 2 (a usage error)
 * or 1 (it cannot be opened) in *status and the cause in err. */
static FILE *open_prompt(const char *path, const char *what, int *status, char *err) {
  struct stat st;
  FILE *f = NULL;
  *status = 1;
  if (stat(path, &st) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s: cannot open it: %s", what, strerror(errno));
    return NULL;
  }
  for (int pass = 0; pass < 2; pass++) {
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: it is %s, not a regular file or a FIFO (refusing to read it)", what,
                   kind_of(st.st_mode));
      *status = 2;
      break;
    }
    if (S_ISREG(st.st_mode) && st.st_size > GEN_MAX_PROMPT) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: it is %lld bytes, more than a prompt may be (%d MiB; its last bytes "
                   "are what generation reads: give those)", what, (long long)st.st_size, GEN_MAX_PROMPT >> 20);
      *status = 2;
      break;
    }
    if (pass == 1)
      return f;
    if (!(f = fopen(path, "rb")) || fstat(fileno(f), &st) != 0) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: cannot open it: %s", what, strerror(errno));
      break;
    }
  }
  if (f)
    fclose(f);
  return NULL;
}

/* Rank 0: the prompt's last (up to) t bytes into last, their count into
 * *n; every byte checked against v. 0, or 2 (a usage error: empty, a byte
 * past V, a file that is neither regular nor a FIFO, more than
 * GEN_MAX_PROMPT bytes) or 1 (a file that cannot be read) with the cause
 * in err. */
static int read_prompt(const gslrt_options *op, int64_t t, int64_t v, unsigned char *last, int64_t *n, char *err) {
  char what[GSLRT_ERRLEN];
  int64_t len = 0;
  int status;
  *n = 0;
  if (op->prompt) {
    len = (int64_t)strlen(op->prompt);
    for (int64_t i = 0; i < len; i++)
      if (check_byte((unsigned char)op->prompt[i], i, "--prompt", v, err))
        return 2;
    *n = len < t ? len : t;
    memcpy(last, op->prompt + (len - *n), (size_t)*n);
  } else {
    snprintf(what, sizeof what, "--prompt-file %s", op->prompt_file);
    FILE *f = open_prompt(op->prompt_file, what, &status, err);
    unsigned char buf[4096];
    size_t got;
    if (!f)
      return status;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
      if (len + (int64_t)got > GEN_MAX_PROMPT) { /* a FIFO, or a file that grew */
        gslrt_seterr(err, GSLRT_ERRLEN, "%s: more than %d MiB, more than a prompt may be (its last bytes are "
                     "what generation reads: give those)", what, GEN_MAX_PROMPT >> 20);
        fclose(f);
        return 2;
      }
      for (size_t i = 0; i < got; i++)
        if (check_byte(buf[i], len + (int64_t)i, what, v, err)) {
          fclose(f);
          return 2;
        }
      keep_last(last, n, t, buf, (int64_t)got);
      len += (int64_t)got;
    }
    int bad = ferror(f) ? errno : 0;
    fclose(f);
    if (bad) {
      gslrt_seterr(err, GSLRT_ERRLEN, "%s: cannot read it: %s", what, strerror(bad));
      return 1;
    }
  }
  if (len == 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "%s is empty: generation continues a context of at least one byte (a "
                 "newline, say)", op->prompt ? "--prompt" : what);
    return 2;
  }
  return 0;
}

/* One score and its token, for ordering by score. */
typedef struct scored {
  float z;   /* the score */
  int64_t i; /* the token */
} scored;

/* Higher scores first, then lower tokens. */
static int by_score(const void *x, const void *y) {
  const scored *a = x, *b = y;
  if (a->z != b->z)
    return a->z > b->z ? -1 : 1;
  return a->i < b->i ? -1 : a->i > b->i;
}

int gslrt_choose_token(const float *z, int64_t v, double temperature, int64_t top_k, double u, char *err,
                       int errlen) {
  int64_t best = -1, k = top_k > 0 && top_k < v ? top_k : v;
  for (int64_t i = 0; i < v; i++) {
    if (isnan(z[i]) || z[i] == INFINITY) {
      gslrt_seterr(err, errlen, "the score of token %lld is %s", (long long)i, isnan(z[i]) ? "nan" : "inf");
      return -1;
    }
    if (z[i] > -INFINITY && (best < 0 || z[i] > z[best]))
      best = i;
  }
  if (best < 0) {
    gslrt_seterr(err, errlen, "every score is -inf");
    return -1;
  }
  if (temperature == 0 || k == 1)
    return (int)best;
  /* the k best by score, ties to the lower token, then weights
   * exp((z - max) / temperature) in token order */
  scored *s = malloc((size_t)v * sizeof *s);
  double *w = calloc((size_t)v, sizeof *w);
  if (!s || !w) {
    free(s), free(w);
    gslrt_seterr(err, errlen, "out of memory");
    return -1;
  }
  for (int64_t i = 0; i < v; i++)
    s[i].z = z[i], s[i].i = i;
  qsort(s, (size_t)v, sizeof *s, by_score);
  for (int64_t r = 0; r < k; r++)
    w[s[r].i] = 1;
  double total = 0, acc = 0, m = (double)z[best];
  for (int64_t i = 0; i < v; i++)
    if (w[i] != 0)
      total += w[i] = exp(((double)z[i] - m) / temperature);
  double target = u * total;
  int64_t chosen = -1, last = best;
  for (int64_t i = 0; i < v && chosen < 0; i++)
    if (w[i] > 0) {
      acc += w[i], last = i;
      if (target < acc)
        chosen = i;
    }
  free(s), free(w);
  return (int)(chosen >= 0 ? chosen : last); /* last: u * total rounded up to the sum */
}

/* Rank 0, for byte j: the scores of row 0 at position pos of the logits
 * gathered in all, the byte chosen and written to stdout; 0, or 1 with
 * the cause in err. */
static int next_byte(gslrt_ctx *ctx, const gen_plan *p, const void *all, int64_t pos, int64_t j, int *byte,
                     char *err) {
  float z[GEN_MAX_V];
  char why[GSLRT_ERRLEN];
  int64_t at = pos * p->v; /* row 0, position pos */
  if (p->out->dtype == GSLRT_BF16)
    gslrt_bf16_widen_n(z, (const uint16_t *)all + at, p->v);
  else
    memcpy(z, (const float *)all + at, (size_t)p->v * sizeof *z);
  double u = gslrt_rng_uniform53(ctx->opts.seed, GSLRT_GEN_STREAM, j, 0);
  int c = gslrt_choose_token(z, p->v, ctx->opts.temperature, ctx->opts.top_k, u, why, sizeof why);
  if (c < 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "generating byte %lld: logits[0, %lld, :]: %s", (long long)j + 1,
                 (long long)pos, why);
    return 1;
  }
  *byte = c;
  if (putchar(c) == EOF || fflush(stdout) != 0) {
    gslrt_seterr(err, GSLRT_ERRLEN, "generating byte %lld: cannot write to standard output: %s", (long long)j + 1,
                 strerror(errno));
    return 1;
  }
  return 0;
}

void gslrt_generate(gslrt_ctx *ctx) {
  const gslrt_options *op = &ctx->opts;
  gen_plan p;
  char err[GSLRT_ERRLEN] = "";
  int status = 0;
  int64_t n = 0;
  find_plan(ctx, &p);
  unsigned char *context = calloc((size_t)p.t, 1);
  int32_t *window = calloc((size_t)(p.b * p.w), sizeof *window);
  if (!context || !window)
    gslrt_fatal(ctx, "--generate: cannot allocate the windows (%lld x %lld tokens)", (long long)p.b,
                (long long)p.w);
  if (ctx->rank == 0)
    status = read_prompt(op, p.t, p.v, context, &n, err);
  gslrt_rank0_verdict(ctx, status, err);
  gslrt_world_bcast(ctx, &n, 1, MPI_INT64_T, 0, "the sharing of the generation's context");
  gslrt_world_bcast(ctx, context, (int)n, MPI_UNSIGNED_CHAR, 0, "the sharing of the generation's context");
  gslrt_checkpoint_open(ctx);
  gslrt_init_params(ctx);
  gslrt_checkpoint_resume(ctx);
  if (ctx->rank == 0 && !op->quiet) {
    fprintf(stderr, "%s: %sgenerating %lld byte%s (windows of %lld bytes, temperature %g, top-k %lld, seed %llu)\n",
            ctx->prog, op->checkpoint ? "" : "no --checkpoint: the params as initialized; ", (long long)op->generate,
            op->generate == 1 ? "" : "s", (long long)p.t, op->temperature,
            (long long)(op->top_k ? op->top_k : p.v), (unsigned long long)op->seed);
    fflush(stderr);
  }
  ctx->generating = 1;
  gslrt_doing(ctx, NULL);
  for (int64_t j = 0; j < op->generate; j++) {
    int byte = 0;
    ctx->step = j;
    for (int64_t r = 0; r < p.b; r++)
      for (int64_t c = 0; c < p.w; c++)
        window[r * p.w + c] = c < n ? context[c] : 0;
    gslrt_bind_gen_inputs(ctx, p.tokens, window, GSLRT_GEN_KEY + j);
    ctx->info->forward(ctx, GSLRT_GEN_KEY + j);
    void *all = gslrt_gather_output(ctx, p.out);
    if (ctx->rank == 0)
      status = next_byte(ctx, &p, all, n - 1, j, &byte, err);
    free(all);
    gslrt_rank0_verdict(ctx, status, err);
    gslrt_world_bcast(ctx, &byte, 1, MPI_INT, 0, "the sharing of the byte drawn");
    if (n == p.t) /* the window is full: slide it */
      memmove(context, context + 1, (size_t)p.t - 1), n--;
    context[n++] = (unsigned char)byte;
  }
  ctx->generating = 0;
  free(context);
  free(window);
}
