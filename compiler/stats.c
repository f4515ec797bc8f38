/* stats.c — what a buffer plan holds, told: gslc --stats, and the
 * largest parts of a device's total for --mem-budget's message.
 *
 * --stats prints, per device: the memory of params, optimizer states,
 * inputs, outputs, the planned arena (with the most bytes live at once and
 * the bytes without reuse) and the runtime's staging (plan.c,
 * plan_arena.c and plan_staging.c compute them), and their total, the one
 * --mem-budget bounds (plan_total); the step's FLOPs by part (forward,
 * backward, optimizer; recomputation apart), the model's (the global
 * program: what MFU counts) and a device's as compiled (replicated work
 * and padding included), from ir_model_flops; for a step that recomputes regions,
 * the activations kept and recomputed and the products' FLOPs done again;
 * every collective of a step with its group, operand and the bytes it
 * receives (sharding.c's model, shard_collective_bytes, the partitioner's);
 * the padding uneven dims cost in bytes and FLOPs; and what bf16 saves.
 * stats_largest names the three largest parts of the total, with the
 * largest tensor of a kind, for the error --mem-budget reports. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

/* ---- the largest parts, for --mem-budget ------------------------------------ */

/* One part of plan_total, for stats_largest. */
typedef struct Part {
  int64_t bytes;      /* its bytes */
  const char *what;   /* what it is */
} Part;

static int by_bytes(const void *x, const void *y) {
  const Part *a = x, *b = y;
  return a->bytes > b->bytes ? -1 : a->bytes < b->bytes;
}

/* "KIND B" for the tensors of kind k, with the largest's name and bytes
 * where there are several */
static Part tensors_part(Arena *a, const Program *p, TensorKind k, const char *kind, int64_t total) {
  const Tensor *big = NULL;
  int n = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i].kind == k) {
      n++;
      if (!big || plan_value_bytes(p->tensors[i].value) > plan_value_bytes(big->value))
        big = &p->tensors[i];
    }
  if (n < 2)
    return (Part){total, big ? arena_printf(a, "%s (%s) %" PRId64, kind, big->name, total) : kind};
  return (Part){total, arena_printf(a, "%s %" PRId64 " (the largest %s, %" PRId64 ")", kind, total, big->name,
                                    plan_value_bytes(big->value))};
}

const char *stats_largest(Arena *a, const Program *p, const Plan *pl) {
  Part part[6] = {
      tensors_part(a, p, TK_PARAM, "params", pl->param_bytes),
      tensors_part(a, p, TK_STATE, "optimizer states", pl->state_bytes),
      tensors_part(a, p, TK_INPUT, "inputs", pl->input_bytes),
      {pl->arena_bytes, arena_printf(a, "intermediates %" PRId64, pl->arena_bytes)},
      {pl->scratch_bytes, arena_printf(a, "collective scratch %" PRId64, pl->scratch_bytes)},
      {pl->gather_bytes, pl->gather_output < 0 ? ""
                                               : arena_printf(a, "gathering output %s on rank 0 %" PRId64,
                                                              p->outputs[pl->gather_output].name, pl->gather_bytes)},
  };
  qsort(part, 6, sizeof *part, by_bytes);
  const char *s = "";
  for (int i = 0; i < 3 && part[i].bytes > 0; i++)
    s = arena_printf(a, "%s%s%s", s, i ? ", " : "", part[i].what);
  return s;
}

/* ---- gslc --stats ------------------------------------------------------------ */

/* The real elements along dim d of SPMD value v's tile on the device at
 * the last block of the dim's cut (an uneven cut's shortest, maybe 0). */
static int64_t last_real(const Program *p, const Value *v, int d) {
  int64_t n = v->gshape.d[d], k = shard_shards(p, &v->sh, d), c = v->shape.d[d];
  return n % k == 0 || c * k <= n ? c /* even, or a tile that is not the cut's (a whole dim) */
                                  : shard_last_real(n, k);
}

static const char *where(Arena *a, Span sp) {
  if (!sp.src)
    return "-";
  const char *base = strrchr(sp.src->path, '/');
  return arena_printf(a, "%s:%u", base ? base + 1 : sp.src->path, sp.line);
}

/* --stats' recomputation section, for a training step that recomputes
 * some region: the bytes of the forward buffers the backward pass reads
 * (live from the forward pass into the backward), of the buffers of the
 * recomputed values, and the products' FLOPs recomputed. */
static void activations_stats(FILE *f, const Program *p, const Plan *pl) {
  int units = 0, marked = 0;
  for (int r = 0; r < p->nregions; r++)
    if (ir_region_unit(p, r + 1) == r + 1) {
      units++;
      marked += p->regions[r].marked;
    }
  if (!units)
    return;
  int bwd = p->nvalues, nkept = 0, nre = 0;
  for (int i = 0; i < p->nvalues && bwd == p->nvalues; i++)
    if (p->values[i]->pass != PASS_FORWARD)
      bwd = i;
  int64_t kept = 0, re = 0;
  double all = 0, again = 0;
  bool *late = xcalloc((size_t)p->nvalues + 1, 1); /* per root buffer: read past the forward pass */
  for (int i = bwd; i < p->nvalues; i++)
    for (int k = 0; k < p->values[i]->nargs; k++)
      late[pl->root[p->values[i]->args[k]->id]] = true;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    double fl = ir_flops(v);
    all += fl;
    if (v->pass == PASS_RECOMPUTE)
      again += fl;
    if (!pl->mat[i] || pl->root[i] != i || pl->offset[i] < 0)
      continue;
    if (v->pass == PASS_FORWARD && late[i]) {
      kept += pl->bytes[i];
      nkept++;
    } else if (v->pass == PASS_RECOMPUTE) {
      re += pl->bytes[i];
      nre++;
    }
  }
  free(late);
  fprintf(f, "\n## recomputation (gsl.7, RECOMPUTATION)\n");
  fprintf(f, "regions recomputed       %12d   (%d marked remat in the source, %d chosen for --mem-budget)\n", units,
          marked, units - marked);
  fprintf(f, "activations kept         %12" PRId64 "   bytes in %d buffers the backward pass reads from the forward\n",
          kept, nkept);
  fprintf(f, "activations recomputed   %12" PRId64 "   bytes in %d buffers, each live within its region's backward\n",
          re, nre);
  fprintf(f, "products recomputed      %12.0f   FLOP a step a device, of the step's %.0f (%.1f%%)\n", again, all,
          all > 0 ? 100.0 * again / all : 0.0);
}

/* --stats' FLOPs: per part of the step, the products' and the other ops'
 * (ir_model_flops), of the model (global, the program before partitioning,
 * over the whole mesh) and of one device (the SPMD program p, on local
 * shapes: replicated work is done on every device, and padding counts).
 * Recomputation is apart: the model does it no FLOPs; a device does. */
static void flops_stats(FILE *f, const Program *p, const Program *global) {
  static const struct {
    Pass pass;
    const char *name;
  } part[] = {{PASS_FORWARD, "forward"},
              {PASS_BACKWARD, "backward"},
              {PASS_UPDATE, "optimizer"},
              {PASS_RECOMPUTE, "recomputed (apart)"}};
  double fl[2][4][2] = {{{0}}}; /* [model, device][part][products, other] */
  bool routed = false;
  for (int w = 0; w < 2; w++) {
    const Program *q = w ? p : global;
    for (int i = 0; i < q->nvalues; i++) {
      const Value *v = q->values[i];
      bool product;
      double n = ir_model_flops(v, &product);
      for (int k = 0; k < 4; k++)
        if (part[k].pass == v->pass)
          fl[w][k][!product] += n;
      routed |= product && v->ein.fill[0];
    }
  }
  fputs("\n## FLOPs a step (products: 2 a multiply-add; other ops: 1 an element computed or summed)\n", f);
  fprintf(f, "%-24s %16s %12s %16s %12s\n", "", "model, products", "other", "a device, products", "other");
  double tot[2][2] = {{0}};
  for (int k = 0; k < 4; k++) {
    if (k > 0 && !fl[0][k][0] && !fl[0][k][1] && !fl[1][k][0] && !fl[1][k][1])
      continue;
    fprintf(f, "%-24s %16.0f %12.0f %16.0f %12.0f\n", part[k].name, fl[0][k][0], fl[0][k][1], fl[1][k][0],
            fl[1][k][1]);
    for (int w = 0; w < 2 && part[k].pass != PASS_RECOMPUTE; w++)
      for (int j = 0; j < 2; j++)
        tot[w][j] += fl[w][k][j];
  }
  fprintf(f, "%-24s %16.0f %12.0f %16.0f %12.0f\n", "step", tot[0][0], tot[0][1], tot[1][0], tot[1][1]);
  if (routed)
    fputs("(a moe block's products count the routed share of its slots, S·K / (E·C): the filled slots when no "
          "choice is dropped)\n",
          f);
}

/* The moe blocks: each one's capacity slots and the bytes of its
 * dispatched tokens, and, for a dropless block (C = S), what that room
 * costs against capacity 1.0. */
static void moe_stats(FILE *f, const Program *g) {
  int n = 0;
  for (int i = 0; i < g->nmoe; i++) {
    const MoeNote *m = &g->moe[i];
    if (m->recomputed)
      continue;
    if (!n++)
      fputs("\n## moe blocks: capacity slots (gsl.7, The moe block)\n", f);
    const char *path = m->span.src ? m->span.src->path : "-", *base = strrchr(path, '/');
    int64_t c1 = (m->k * m->s + m->e - 1) / m->e;
    fprintf(f, "moe at %s:%u  E %" PRId64 "  G %" PRId64 "  top %" PRId64 "  C %" PRId64 " of S %" PRId64
               "  dispatched tokens %" PRId64 " bytes over the mesh",
            base ? base + 1 : path, m->span.line, m->e, m->g, m->k, m->c, m->s, m->bytes);
    if (m->c >= m->s)
      fprintf(f, "  (dropless; %" PRId64 " at capacity 1.0, C %" PRId64 ")", m->bytes / m->c * c1, c1);
    fputc('\n', f);
  }
}

void stats_print(FILE *f, const Program *p, const Plan *pl, const Program *global) {
  Arena *a = arena_new();
  int64_t devices = 1;
  for (int i = 0; i < p->mesh.naxes; i++)
    devices *= p->mesh.size[i];
  fprintf(f, "# %s on ", p->path);
  if (p->mesh.naxes) {
    fputs("mesh [", f);
    for (int i = 0; i < p->mesh.naxes; i++)
      fprintf(f, "%s%s = %" PRId64, i ? ", " : "", p->mesh.name[i], p->mesh.size[i]);
    fprintf(f, "]: %" PRId64 " device%s\n", devices, devices == 1 ? "" : "s");
  } else {
    fputs("one device (no mesh)\n", f);
  }
  fputs("\n## memory per device (bytes)\n", f);
  fprintf(f, "params                   %12" PRId64 "\n", pl->param_bytes);
  if (pl->state_bytes)
    fprintf(f, "optimizer states         %12" PRId64 "\n", pl->state_bytes);
  fprintf(f, "inputs                   %12" PRId64 "\n", pl->input_bytes);
  fprintf(f, "outputs                  %12" PRId64 "   (within the params, inputs and intermediates)\n",
          pl->output_bytes);
  fprintf(f, "intermediates, planned   %12" PRId64 "   (one arena, reused; most live at once: %" PRId64 ")\n",
          pl->arena_bytes, pl->live_bytes);
  fprintf(f, "intermediates, no reuse  %12" PRId64 "   (every buffer of its own)\n", pl->noreuse_bytes);
  fprintf(f, "runtime staging          %12" PRId64 "   (collective scratch %" PRId64
             "; gathering an output on rank 0 %" PRId64 ")\n",
          pl->scratch_bytes + pl->gather_bytes, pl->scratch_bytes, pl->gather_bytes);
  fprintf(f, "total                    %12" PRId64 "   (params%s + inputs + planned + staging)\n",
          plan_total(pl),
          pl->state_bytes ? " + states" : "");
  flops_stats(f, p, global);
  activations_stats(f, p, pl);
  fputs("\n## collectives per step (bytes: received per device)\n", f);
  int64_t total = 0;
  int n = 0, riders = 0;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (ir_op(v->op)->cls != OC_COLLECTIVE)
      continue;
    char axes[256];
    size_t k = 0;
    axes[0] = '\0';
    for (int j = 0; j < v->ngroup && k < sizeof axes; j++)
      k += (size_t)snprintf(axes + k, sizeof axes - k, "%s%s", j ? ", " : "", p->mesh.name[v->group[j]]);
    const char *kind = v->op == OP_ALL_REDUCE && v->fn == RF_MAX ? "all_reduce max" : op_name(v->op);
    int64_t b = shard_collective_bytes(p, v);
    fprintf(f, "%-18s over (%s)  %s%-14s %12" PRId64 "   ; %s%s\n", kind, axes, dtype_name(v->args[0]->dtype),
            shape_str(a, &v->args[0]->shape), b, where(a, v->span), v->carrier ? " (rides the one above)" : "");
    total += b;
    if (v->carrier)
      riders++;
    else
      n++;
  }
  fprintf(f, "total: %" PRId64 " bytes in %d collective%s", total, n, n == 1 ? "" : "s");
  if (riders)
    fprintf(f, " (and %d small all_to_all%s riding in them)", riders, riders == 1 ? "" : "s");
  fputc('\n', f);
  /* uneven dims: the padding the device at the last block of every cut
   * holds (it holds the most), and the products' FLOP a device spends on
   * padding, on average (a dim of n over k in tiles of c: n / k of each
   * tile is real, on average) */
  int64_t padb[3] = {0, 0, 0};
  double lost = 0, flop = 0;
  for (int i = 0; i < p->ntensors; i++) {
    const Value *v = p->tensors[i].value;
    int64_t real = 1;
    for (int d = 0; d < v->shape.rank; d++)
      real *= last_real(p, v, d);
    padb[p->tensors[i].kind == TK_PARAM ? 0 : p->tensors[i].kind == TK_STATE ? 1 : 2] +=
        dtype_size(v->dtype) * (shape_elems(&v->shape) - real);
  }
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (v->op != OP_EINSUM)
      continue;
    char seen[2 * GSL_MAX_RANK + 1] = {0};
    int ns = 0;
    double all = 2, real = 2;
    for (int k = 0; k < v->ein.nin; k++)
      for (int d = 0; v->ein.in[k][d]; d++)
        if (!strchr(seen, v->ein.in[k][d])) {
          const Value *x = v->args[k];
          int64_t n = x->gshape.d[d], kk = shard_shards(p, &x->sh, d), c = x->shape.d[d];
          seen[ns++] = v->ein.in[k][d];
          all *= (double)c;
          real *= n % kk && c * kk > n ? (double)n / (double)kk : (double)c;
        }
    flop += all;
    lost += all - real;
  }
  if (padb[0] + padb[1] + padb[2] || lost > 0) {
    fputs("\n## uneven dimensions: padding (gsl.7, Uneven dimensions)\n", f);
    fprintf(f, "padding held             %12" PRId64 "   bytes on the device holding the most (params %" PRId64
               ", states %" PRId64 ", inputs %" PRId64 ")\n",
            padb[0] + padb[1] + padb[2], padb[0], padb[1], padb[2]);
    fprintf(f, "products on padding      %12.0f   FLOP a step a device, on average (%.1f%% of its products' %.0f)\n",
            lost, flop > 0 ? 100.0 * lost / flop : 0.0, flop);
  }
  /* bf16 (a program's own, or gslc --precision bf16's): what it saves */
  int nbf = 0, nbuf = 0;
  int64_t buf = 0, moved = 0;
  for (int i = 0; i < p->nvalues; i++) {
    const Value *v = p->values[i];
    if (v->dtype != DT_BF16)
      continue;
    nbf++;
    if (ir_op(v->op)->cls == OC_COLLECTIVE)
      moved += shard_collective_bytes(p, v);
    if (pl->mat[i] && pl->root[i] == i && pl->offset[i] >= 0) {
      nbuf++;
      buf += plan_value_bytes(v);
    }
  }
  if (nbf) {
    fprintf(f, "\n## bf16 (%s)\n", p->precision == DT_BF16 ? "gslc --precision bf16" : "the program's own");
    fprintf(f, "bf16 values              %12d   (%d with a buffer of their own)\n", nbf, nbuf);
    fprintf(f, "bf16 buffers             %12" PRId64 "   bytes (the same values as f32: %" PRId64 ")\n", buf,
            2 * buf);
    fprintf(f, "bf16 collectives         %12" PRId64 "   bytes a step (%" PRId64 " as f32: %" PRId64 " saved)\n", moved,
            2 * moved, moved);
  }
  moe_stats(f, global);
  arena_free(a);
}
