/* eval.c — evaluation while training: --eval-input, --eval-every and
 * gslrt_declare_eval.
 *
 * A program that trains gives gsl_eval (gslrt_program_info.eval): the
 * forward pass alone, on the inputs as bound and the params as they
 * stand, writing the loss to values[0] and the values gsl_setup declared
 * with gslrt_declare_eval (the program's f32 scalar outputs) to values[1..].
 * An evaluation binds held-out batch j = 0..B-1 into the input buffers
 * (gslrt_bind_eval_inputs: its tile of batch j of each --eval-input file,
 * or an input's initializer drawn with key GSLRT_EVAL_KEY + j, so the same
 * numbers every time), calls gsl_eval with that key, and sums each value
 * in double; eval_loss and eval_NAME are the means over the B batches.
 * Each batch's loss is already the global mean over its tokens and the
 * batches are of one size, so eval_loss is the mean over all held-out
 * tokens. Every rank takes part (gsl_eval has collectives); the values
 * are global, the same on every rank.
 *
 * The next step binds its own inputs again (gslrt_bind_inputs reads or
 * draws every input every step), so an evaluation leaves training as it
 * was. Only two things outlive it and are put back: the step's loss,
 * should gsl_eval report one, and, after the last step, the buffers of
 * the --output values, which are written as the last step left them.
 *
 * When: after every --eval-every K-th step (steps counted from 1, global,
 * so after --resume at step 100 with K = 50 at 150), and after the last
 * step, once; main.c logs the step whatever --log-every says. Checked here
 * (usage errors, every rank alike): the program must train (eval not
 * NULL), --eval-every needs --eval-input, and every input bound by --input
 * has an --eval-input (gslrt_check_bindings matched each --eval-input
 * with its input, as each --input). */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void gslrt_declare_eval(gslrt_ctx *ctx, const char *name) {
  if (!name || !*name)
    gslrt_fail_all(ctx, "gslrt_declare_eval: an eval value without a name");
  const char **grown = realloc(ctx->eval_names, (size_t)(ctx->neval + 1) * sizeof *grown);
  if (!grown)
    gslrt_fatal(ctx, "gslrt_declare_eval: out of memory");
  ctx->eval_names = grown;
  ctx->eval_names[ctx->neval++] = name;
}

void gslrt_check_eval(gslrt_ctx *ctx) {
  const gslrt_options *op = &ctx->opts;
  if (!op->neval_inputs && !op->eval_every)
    return;
  /* before anything reads info->eval: a program compiled before gsl_eval
   * existed has no such member, and is only safe without these options */
  if (!ctx->info->eval)
    gslrt_usage_error(ctx, "%s: the program has no loss to evaluate (it has no train statement)",
                      op->neval_inputs ? "--eval-input" : "--eval-every");
  if (!op->neval_inputs)
    gslrt_usage_error(ctx, "--eval-every needs --eval-input NAME=FILE (the held-out data)");
  for (int k = 0; k < ctx->ntensors; k++) {
    const gslrt_tensor *t = &ctx->tensors[k];
    if (t->kind == GSLRT_INPUT && t->file && !t->eval_file)
      gslrt_usage_error(ctx, "input %s is bound by --input %s=%s but has no held-out data; give "
                        "--eval-input %s=FILE", t->name, t->name, t->file, t->name);
  }
  /* eval_NAME must name one value: gslc's contract, not the user's */
  for (int i = 0; i < ctx->neval; i++) {
    if (!strcmp(ctx->eval_names[i], "loss"))
      gslrt_fail_all(ctx, "gslrt_declare_eval: the program declares an eval value named loss, which "
                     "would be logged as eval_loss like the loss itself");
    for (int k = 0; k < i; k++)
      if (!strcmp(ctx->eval_names[k], ctx->eval_names[i]))
        gslrt_fail_all(ctx, "gslrt_declare_eval: %s declared twice", ctx->eval_names[i]);
  }
  ctx->eval_values = gslrt_alloc(ctx, (int64_t)(1 + ctx->neval) * (int64_t)sizeof *ctx->eval_values);
}

int gslrt_eval_due(const gslrt_ctx *ctx, int64_t done) {
  const gslrt_options *op = &ctx->opts;
  return ctx->eval_batches > 0 && (done == ctx->end || (op->eval_every && done % op->eval_every == 0));
}

/* Saves the buffer of every --output value in copy[k] (restore 0), or
 * puts them back and frees the copies (restore 1). */
static void keep_outputs(gslrt_ctx *ctx, void **copy, int restore) {
  for (int k = 0; k < ctx->noutputs; k++) {
    const gslrt_output *o = &ctx->outputs[k];
    size_t bytes = (size_t)o->local_count * (size_t)gslrt_dtype_size(o->dtype);
    if (!o->file || !*o->slot || !bytes)
      continue;
    if (restore) {
      memcpy(*o->slot, copy[k], bytes);
      free(copy[k]);
      copy[k] = NULL;
      continue;
    }
    if (!(copy[k] = malloc(bytes)))
      gslrt_fatal(ctx, "evaluating: cannot allocate %zu bytes to keep output %s", bytes, o->name);
    memcpy(copy[k], *o->slot, bytes);
  }
}

void gslrt_evaluate(gslrt_ctx *ctx, int64_t done, int keep) {
  double start = MPI_Wtime();
  int n = 1 + ctx->neval, have_loss = ctx->have_loss;
  float loss = ctx->loss;
  float *v = malloc((size_t)n * sizeof *v);
  double *sum = calloc((size_t)n, sizeof *sum);
  void **copy = keep ? calloc((size_t)ctx->noutputs + 1, sizeof *copy) : NULL;
  if (!v || !sum || (keep && !copy))
    gslrt_fatal(ctx, "evaluating: out of memory");
  if (keep)
    keep_outputs(ctx, copy, 0);
  ctx->step = done;
  for (int64_t j = 0; j < ctx->eval_batches; j++) {
    ctx->held_out = j;
    gslrt_bind_eval_inputs(ctx, j);
    for (int i = 0; i < n; i++)
      v[i] = NAN; /* a value gsl_eval did not write shows as nan */
    ctx->info->eval(ctx, GSLRT_EVAL_KEY + j, v);
    for (int i = 0; i < n; i++)
      sum[i] += (double)v[i];
  }
  ctx->held_out = -1;
  for (int i = 0; i < n; i++)
    ctx->eval_values[i] = sum[i] / (double)ctx->eval_batches;
  if (keep)
    keep_outputs(ctx, copy, 1);
  free(copy);
  free(sum);
  free(v);
  ctx->loss = loss, ctx->have_loss = have_loss;
  ctx->have_eval = 1;
  ctx->eval_seconds = MPI_Wtime() - start;
}
