/* options.c — the compiled program's command line (SPEC section 7).
 *
 * A table names each option, whether it takes a value, and where the value
 * goes; gslrt_parse_options walks argv once, accepting both "--opt value"
 * and "--opt=value", and stops at the first usage error with its cause.
 * Checks that need the program's declarations (does the program have an
 * input named x?) happen after gsl_setup (tensors.c, eval.c, checkpoint.c);
 * this file knows only the syntax, so the unit tests can drive it without
 * MPI. */
#include "internal.h"
#include "seterr.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum opt_kind { OPT_FLAG, OPT_COUNT, OPT_SEED, OPT_PATH, OPT_BIND, OPT_TEXT, OPT_REAL };

/* One option of the table, with the values it accepts: every message
 * that refuses a value states the option's range from here. */
typedef struct opt {
  const char *name;   /* "--steps" */
  enum opt_kind kind; /* how the value is parsed (OPT_FLAG: none) */
  int64_t min, max;   /* an OPT_COUNT's least and greatest value */
  const char *lo;     /* an OPT_REAL's least positive value, as text ("1e-6") */
  const char *hi;     /* its greatest value, as text ("1e6") */
  int zero;           /* whether an OPT_REAL may also be 0 */
  size_t field;       /* offsetof the destination in gslrt_options */
} opt;

/* The greatest --steps: a checkpoint is named by its step in at most 18
 * digits (ckdir.c reads no longer name back). */
#define MAX_STEPS 999999999999999999LL
/* The greatest --generate: byte j runs with key GSLRT_GEN_KEY + j, an int64. */
#define MAX_GENERATE (INT64_MAX - GSLRT_GEN_KEY)

#define OFF(f) offsetof(gslrt_options, f)
#define COUNT(lo, hi) OPT_COUNT, lo, hi, NULL, NULL, 0
#define OTHER(kind) kind, 0, 0, NULL, NULL, 0
static const opt opts_table[] = {
    {"--steps", COUNT(1, MAX_STEPS), OFF(steps)},
    {"--seed", OTHER(OPT_SEED), OFF(seed)},
    {"--input", OTHER(OPT_BIND), OFF(inputs)},
    {"--output", OTHER(OPT_BIND), OFF(outputs)},
    {"--eval-input", OTHER(OPT_BIND), OFF(eval_inputs)},
    {"--eval-every", COUNT(1, INT64_MAX), OFF(eval_every)},
    {"--checkpoint", OTHER(OPT_PATH), OFF(checkpoint)},
    {"--checkpoint-every", COUNT(1, INT64_MAX), OFF(checkpoint_every)},
    {"--keep", COUNT(1, INT_MAX), OFF(keep)}, /* ckpt_lock.c counts checkpoints in an int */
    {"--resume", OTHER(OPT_FLAG), OFF(resume)},
    {"--log-every", COUNT(1, INT64_MAX), OFF(log_every)},
    {"--metrics", OTHER(OPT_PATH), OFF(metrics)},
    {"--quiet", OTHER(OPT_FLAG), OFF(quiet)},
    {"--help", OTHER(OPT_FLAG), OFF(help)},
    {"--version", OTHER(OPT_FLAG), OFF(version)},
    {"--generate", COUNT(1, MAX_GENERATE), OFF(generate)},
    {"--prompt", OTHER(OPT_TEXT), OFF(prompt)},
    {"--prompt-file", OTHER(OPT_PATH), OFF(prompt_file)},
    /* below 1e-6 every weight but the best underflows (the argmax, as 0
     * says); beyond 1e6 every weight is 1 to within float rounding */
    {"--temperature", OPT_REAL, 0, 0, "1e-6", "1e6", 1, OFF(temperature)},
    {"--top-k", COUNT(1, INT64_MAX), OFF(top_k)},
    {"--max-time", OPT_REAL, 0, 0, "0.001", "1e9", 0, OFF(max_time)}, /* seconds: a millisecond to 31 years */
    {"--collective-timeout", OPT_REAL, 0, 0, "0.001", "1e9", 1, OFF(collective_timeout)}, /* 0: no watchdog */
};
#define NOPTS (sizeof opts_table / sizeof opts_table[0])

/* The options of training that a run with --generate, which trains
 * nothing, refuses (generate.c says what it does instead). */
static const char *const not_with_generate[] = {"--steps", "--input", "--output", "--eval-input", "--eval-every",
                                                "--checkpoint-every", "--keep", "--log-every", "--metrics",
                                                "--max-time"};
/* The options that only mean something with --generate. */
static const char *const only_with_generate[] = {"--prompt", "--prompt-file", "--temperature", "--top-k"};

/* A decimal integer in [min, max]: digits only, no sign, no spaces. */
static int parse_uint(const char *s, uint64_t max, uint64_t *v) {
  char *end;
  if (*s < '0' || *s > '9')
    return 0;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || *end || x > max)
    return 0;
  *v = x;
  return 1;
}

/* A decimal number in op's range (0, if op->zero, or from op->lo to
 * op->hi): digits with an optional point and exponent (strtod's), no
 * sign, no spaces, no inf or nan. A value too small for a double
 * (1e-320) or too large (1e999) is out of the range like any other. */
static int parse_real(const opt *op, const char *s, double *v) {
  char *end;
  if (!((*s >= '0' && *s <= '9') || *s == '.'))
    return 0;
  errno = 0;
  double x = strtod(s, &end);
  if (*end || end == s)
    return 0;
  if (errno == ERANGE) /* underflow (to a subnormal or 0) or overflow */
    return 0;
  if (!(x == 0 ? op->zero : x >= strtod(op->lo, NULL) && x <= strtod(op->hi, NULL)))
    return 0;
  *v = x;
  return 1;
}

/* Whether the option named name was given (given: per table entry). */
static int was_given(const int *given, const char *name) {
  for (size_t k = 0; k < NOPTS; k++)
    if (!strcmp(opts_table[k].name, name))
      return given[k];
  return 0;
}

/* Options that do not go together, after the whole command line is read:
 * 0, or -1 with the cause in err. */
static int check_generate(const gslrt_options *o, const int *given, char *err, int errlen) {
  for (size_t k = 0; k < sizeof only_with_generate / sizeof *only_with_generate; k++)
    if (!o->generate && was_given(given, only_with_generate[k])) {
      gslrt_seterr(err, errlen, "%s needs --generate N (the bytes of text to generate)", only_with_generate[k]);
      return -1;
    }
  if (!o->generate)
    return 0;
  for (size_t k = 0; k < sizeof not_with_generate / sizeof *not_with_generate; k++)
    if (was_given(given, not_with_generate[k])) {
      gslrt_seterr(err, errlen, "%s does not go with --generate (generation runs no training step)",
                   not_with_generate[k]);
      return -1;
    }
  if (o->prompt && o->prompt_file) {
    gslrt_seterr(err, errlen, "--prompt and --prompt-file are two prompts: give one");
    return -1;
  }
  if (!o->prompt && !o->prompt_file) {
    gslrt_seterr(err, errlen, "--generate needs a prompt: --prompt TEXT or --prompt-file FILE");
    return -1;
  }
  return 0;
}

/* Adds NAME=FILE val to the list of op (--input, --output or --eval-input). */
static int add_binding(gslrt_options *o, const opt *op, const char *val, char *err, int errlen) {
  int rc = -1;
  gslrt_binding *list = o->inputs;
  int *n = &o->ninputs;
  if (op->field == OFF(outputs))
    list = o->outputs, n = &o->noutputs;
  else if (op->field == OFF(eval_inputs))
    list = o->eval_inputs, n = &o->neval_inputs;
  const char *eq = strchr(val, '=');
  if (!eq || eq == val || !eq[1]) {
    gslrt_seterr(err, errlen, "%s %s: expected NAME=FILE", op->name, val);
    goto fn_exit;
  }
  for (int i = 0; i < *n; i++)
    if (strlen(list[i].name) == (size_t)(eq - val) && !strncmp(list[i].name, val, (size_t)(eq - val))) {
      gslrt_seterr(err, errlen, "%s %s given twice", op->name, list[i].name);
      goto fn_exit;
    }
  char *name = malloc((size_t)(eq - val) + 1);
  if (!name) {
    gslrt_seterr(err, errlen, "out of memory");
    goto fn_exit;
  }
  memcpy(name, val, (size_t)(eq - val));
  name[eq - val] = 0;
  list[*n].name = name;
  list[*n].file = eq + 1;
  (*n)++;
  rc = 0;
fn_exit:
  return rc;
}

int gslrt_parse_options(int argc, char **argv, gslrt_options *o, char *err, int errlen) {
  int rc = -1, given[NOPTS] = {0};
  memset(o, 0, sizeof *o);
  o->steps = 1;
  o->temperature = 1.0;
  o->collective_timeout = GSLRT_COLLECTIVE_TIMEOUT;
  o->inputs = calloc((size_t)(argc > 0 ? argc : 1), sizeof *o->inputs);
  o->outputs = calloc((size_t)(argc > 0 ? argc : 1), sizeof *o->outputs);
  o->eval_inputs = calloc((size_t)(argc > 0 ? argc : 1), sizeof *o->eval_inputs);
  if (!o->inputs || !o->outputs || !o->eval_inputs) {
    gslrt_seterr(err, errlen, "out of memory");
    goto fn_exit;
  }
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const opt *op = NULL;
    if (!strcmp(arg, "-h"))
      arg = "--help", len = 6;
    for (size_t k = 0; k < NOPTS; k++)
      if (strlen(opts_table[k].name) == len && !strncmp(opts_table[k].name, arg, len))
        op = &opts_table[k], given[k] = 1;
    if (!op) {
      if (arg[0] == '-')
        gslrt_seterr(err, errlen, "unknown option '%.*s'", (int)len, arg);
      else
        gslrt_seterr(err, errlen, "unexpected argument '%s'", arg);
      goto fn_exit;
    }
    char *dst = (char *)o + op->field;
    if (op->kind == OPT_FLAG) {
      if (eq) {
        gslrt_seterr(err, errlen, "option '%s' takes no value", op->name);
        goto fn_exit;
      }
      *(int *)dst = 1;
      continue;
    }
    const char *val = eq ? eq + 1 : NULL;
    if (!val) {
      if (i + 1 >= argc) {
        gslrt_seterr(err, errlen, "option '%s' requires a value", op->name);
        goto fn_exit;
      }
      val = argv[++i];
    }
    uint64_t v;
    switch (op->kind) {
    case OPT_COUNT:
      if (!parse_uint(val, (uint64_t)op->max, &v) || (int64_t)v < op->min) {
        gslrt_seterr(err, errlen, "invalid value '%s' for %s (expected an integer from %lld to %lld)", val,
                     op->name, (long long)op->min, (long long)op->max);
        goto fn_exit;
      }
      *(int64_t *)dst = (int64_t)v;
      break;
    case OPT_SEED:
      if (!parse_uint(val, UINT64_MAX, &v)) {
        gslrt_seterr(err, errlen, "invalid value '%s' for %s (expected an integer from 0 to %llu)", val,
               op->name, (unsigned long long)UINT64_MAX);
        goto fn_exit;
      }
      *(uint64_t *)dst = v;
      o->seed_given = 1;
      break;
    case OPT_PATH:
      if (!*val) {
        gslrt_seterr(err, errlen, "option '%s' requires a non-empty value", op->name);
        goto fn_exit;
      }
      *(const char **)dst = val;
      break;
    case OPT_BIND:
      if (add_binding(o, op, val, err, errlen) != 0)
        goto fn_exit;
      break;
    case OPT_TEXT: /* any bytes, even none (generate.c says why an empty prompt is refused) */
      *(const char **)dst = val;
      break;
    case OPT_REAL:
      if (!parse_real(op, val, (double *)dst)) {
        gslrt_seterr(err, errlen, "invalid value '%s' for %s (expected %sa number from %s to %s)", val, op->name,
                     op->zero ? "0 or " : "", op->lo, op->hi);
        goto fn_exit;
      }
      break;
    case OPT_FLAG:
      break;
    }
  }
  if (check_generate(o, given, err, errlen) != 0)
    goto fn_exit;
  rc = 0;
fn_exit:
  return rc;
}

void gslrt_free_options(gslrt_options *o) {
  for (int i = 0; i < o->ninputs; i++)
    free(o->inputs[i].name);
  for (int i = 0; i < o->noutputs; i++)
    free(o->outputs[i].name);
  for (int i = 0; i < o->neval_inputs; i++)
    free(o->eval_inputs[i].name);
  free(o->inputs);
  free(o->outputs);
  free(o->eval_inputs);
  o->inputs = o->outputs = o->eval_inputs = NULL;
  o->ninputs = o->noutputs = o->neval_inputs = 0;
}

/* Every step up to 100 steps; beyond, the smallest of 2, 5, 10, 20, 50,
 * 100, 200, ... that logs at most 100 lines. */
int64_t gslrt_log_every(const gslrt_options *o) {
  int64_t k = 1;
  if (o->log_every > 0)
    return o->log_every;
  for (int64_t scale = 1; o->steps > 100 * k; scale *= 10) {
    if (o->steps <= 100 * 2 * scale) {
      k = 2 * scale;
      break;
    }
    if (o->steps <= 100 * 5 * scale) {
      k = 5 * scale;
      break;
    }
    k = 10 * scale;
    if (scale > INT64_MAX / 1000)
      break;
  }
  return k;
}

void gslrt_print_usage(FILE *f, const char *prog) {
  fprintf(f,
          "Usage: %s [options]\n"
          "       mpirun -np N %s [options]   (N = the product of the program's mesh sizes)\n"
          "Runs a program compiled by gslc: initializes its params, then runs its steps;\n"
          "or, with --generate, writes text from them (man gslrun: GENERATION).\n"
          "\n"
          "Options:\n"
          "  --steps N              run N steps (default 1)\n"
          "  --seed S               seed of every random draw (default 0)\n"
          "  --input NAME=FILE      bind input NAME to a .npy file of its global shape,\n"
          "                         or of shape [B, ...] to cycle through B batches\n"
          "                         (f32: '<f4', i32: '<i4'; each rank reads its own tile);\n"
          "                         an input without one is drawn from its initializer\n"
          "  --output NAME=FILE     write output NAME as .npy of its global shape after\n"
          "                         the last step\n"
          "  --eval-input NAME=FILE held-out batches for input NAME: .npy of shape [B, ...]\n"
          "                         or of its global shape (B = 1), one B for all; after\n"
          "                         the last step the loss and the program's f32 scalar\n"
          "                         outputs are averaged over them and logged as\n"
          "                         eval_loss and eval_NAME; needed for every input with\n"
          "                         --input (the others are drawn from their initializers)\n"
          "  --eval-every K         also evaluate every K steps (needs --eval-input)\n"          "  --checkpoint DIR       save a checkpoint in DIR/step-NNNNNNNN after the last\n"
          "                         step (params and optimizer states as .npy files of\n"
          "                         their global shapes, and manifest.json)\n"
          "  --checkpoint-every K   also save one every K steps (needs --checkpoint)\n"
          "  --keep N               keep the newest N checkpoints in DIR (default 2; needs\n"
          "                         --checkpoint; one a --generate is reading stays until\n"
          "                         it is done)\n"
          "  --resume               continue from the newest complete checkpoint in DIR,\n"
          "                         on any mesh (needs --checkpoint); --steps is the\n"
          "                         total, so steps K+1..N run after one of step K\n"
          "  --log-every K          log every K steps and the last (default: every step\n"
          "                         up to 100 steps, otherwise the smallest of 2, 5, 10,\n"
          "                         20, 50, 100, ... that gives at most 100 lines)\n"
          "  --metrics FILE         write one JSON object a line to FILE for every logged\n"
          "                         step, also with --quiet (FILE is created or\n"
          "                         truncated before step 1)\n"
          "  --max-time S           end the run early, as if --steps said so, where one\n"
          "                         more step (and the final evaluation) would take it\n"
          "                         past S seconds (0.001 to 1e9) of wall time since it\n"
          "                         started\n"
          "  --collective-timeout S end the run (exit status 4) when a collective has\n"
          "                         not completed S seconds (0.001 to 1e9) after it\n"
          "                         began, naming it, where it is written and which\n"
          "                         ranks had arrived (default 300; 0: wait forever)\n"
          "  --generate N           write N bytes of text to stdout, sampled from the\n"
          "                         program's `output logits` (f32[B, T, V], the scores\n"
          "                         of the token after each position of its i32[B, W]\n"
          "                         input) and nothing else; no step is trained; the\n"
          "                         params come from the newest checkpoint in\n"
          "                         --checkpoint DIR (read only), else their initializers\n"
          "  --prompt TEXT          the bytes the text continues (with --generate)\n"
          "  --prompt-file FILE     the same from a file (any bytes below V)\n"
          "  --temperature T        divide the scores by T, 0 or from 1e-6 to 1e6 (default 1;\n"
          "                         0: the argmax)\n"
          "  --top-k K              sample among the K best scores only (default: all V)\n"
          "                         --seed S keys the sampling: the same S, the same text\n"
          "  --quiet                print nothing but errors\n"
          "  --help                 print this help and exit\n"
          "  --version              print the version and exit\n"
          "Options also take the form --opt=value.\n"
          "\n"
          "Rank 0 logs lines like\n"
          "  step 10/100  loss 0.123456  lr 0.001  gnorm 1.23  tokens/s 12345  (3.2 ms/step, 0.03 s elapsed)\n"
          "and with --metrics writes lines like\n"
          "  {\"step\": 10, \"loss\": 0.123456789, \"lr\": 0.001, \"grad_norm\": 1.23456789, \"tokens_per_s\": 12345.6,\n"
          "   \"elapsed_s\": 0.031, \"ms_per_step\": 3.2}\n"
          "(loss, the step's learning rate and its gradient norm before clipping only\n"
          "for programs that train; elapsed since step 1 began; tokens are\n"
          "the rows of the first input, or all its elements if it is i32). A step that\n"
          "is evaluated is always logged, with eval_loss and eval_NAME after the loss\n"
          "and the time of the evaluation, left out of ms/step:\n"
          "  step 10/100  loss 0.123456  eval_loss 0.13  tokens/s 12345  (3.2 ms/step, 0.03 s elapsed; eval 0.012 s)\n"
          "A loss that is NaN or infinite stops the run after its step, writing no\n"
          "output; an eval_loss that is not a number is logged (null in --metrics).\n"
          "--resume with --steps at the checkpoint's step and --eval-input evaluates\n"
          "the checkpoint without training.\n"
          "Text: %s --checkpoint DIR --generate 200 --prompt 'The ' --top-k 40\n"
          "writes 200 bytes to stdout, notes to stderr.\n"
          "With several ranks the log line and the metrics also name the slowest rank\n"
          "and its score (the fastest rank's compute time per step over its own); after\n"
          "the last step they give the largest peak RSS (the metrics: every rank's):\n"
          "  step 100/100  tokens/s 12345  (3.2 ms/step, 0.3 s elapsed; slowest rank 1, score 0.93; peak RSS 36.1 MiB on rank 1)\n"
          "Exit status: 0 on success, 2 on a usage error, 1 on a run-time error, 3 when\n"
          "stopped by SIGTERM or SIGINT, 4 when a collective did not complete in time.\n",
          prog, prog, prog);
}
