/* explain.c — gslc --explain: why each value is laid out as it is, and what
 * each collective costs.
 *
 * Part 1 lists every value of the global program with its sharding and
 * where the sharding came from: the user's annotation, propagation from a
 * neighbour (named, with the op it came through and the direction), or
 * nothing (replicated). Then each moe block: whether its products skip
 * empty capacity slots (slots.c), or why not. Part 2 lists every collective of the SPMD program
 * with its kind, mesh axes, the bytes each device receives per step, the
 * source line of the op that needed it and why. Part 3 sums them up.
 *
 * Bytes are what one device receives per step, by sharding.c's cost model
 * (shard_collective_bytes), the same the partitioner plans with. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

static int64_t bytes_of(const Value *v) { return dtype_size(v->dtype) * shape_elems(&v->shape); }

static const char *where(Arena *a, Span sp) {
  if (!sp.src)
    return "-";
  const char *base = strrchr(sp.src->path, '/');
  return arena_printf(a, "%s:%u", base ? base + 1 : sp.src->path, sp.line);
}

/* where(span), the call it was inlined from when that is elsewhere, and
 * the part of a training step it belongs to when not the forward pass */
static const char *where_site(Arena *a, const Value *v) {
  const char *w = where(a, v->span);
  if (v->site.src && (v->site.src != v->span.src || v->site.off != v->span.off))
    w = arena_printf(a, "%s (inlined at %s)", w, where(a, v->site));
  if (v->pass != PASS_FORWARD)
    w = arena_printf(a, "%s, %s", w, ir_pass_name(v->pass));
  return w;
}

static const char *label(Arena *a, const Value *v) {
  return v->name ? arena_printf(a, "%%%d %s", v->id, v->name) : arena_printf(a, "%%%d", v->id);
}

static bool is_operand(const Value *v, const Value *of) {
  for (int i = 0; i < of->nargs; i++)
    if (of->args[i] == v)
      return true;
  return false;
}

static const char *origin(Arena *a, const Program *g, const Value *v) {
  switch (v->sh_origin) {
  case SO_ANNOTATED:
    return arena_printf(a, "annotated at %s", where(a, v->span));
  case SO_PROPAGATED: {
    const Value *f = v->sh_from;
    if (is_operand(f, v))
      return arena_printf(a, "from operand %s through this %s", label(a, f), op_name(v->op));
    return arena_printf(a, "from its user %s, back through that %s", label(a, f), op_name(f->op));
  }
  case SO_UPDATE:
    return arena_printf(a, "the sharded update of %s", label(a, v->sh_from));
  case SO_AUTO:
    return "chosen by --auto-shard";
  case SO_NONE:
    return g->mesh.naxes ? "replicated: no sharding reached it" : "one device";
  }
  die("%%%d has sharding origin %d", v->id, (int)v->sh_origin);
}

/* Each region recomputed for the backward pass (the outermost of nested
 * ones), why, and what its recomputation runs, on the SPMD program s. */
static void recomputation(FILE *f, Arena *a, const Program *s) {
  int nr = s->nregions, any = 0;
  int *vals = xcalloc((size_t)nr + 1, sizeof *vals), *colls = xcalloc((size_t)nr + 1, sizeof *colls);
  double *flops = xcalloc((size_t)nr + 1, sizeof *flops);
  for (int i = 0; i < s->nvalues; i++) {
    const Value *v = s->values[i];
    int u = v->pass == PASS_RECOMPUTE ? ir_region_unit(s, v->region) : 0;
    if (!u)
      continue;
    vals[u]++;
    colls[u] += ir_op(v->op)->cls == OC_COLLECTIVE;
    flops[u] += ir_flops(v);
  }
  for (int r = 1; r <= nr; r++) {
    const Region *R = &s->regions[r - 1];
    if (ir_region_unit(s, r) != r)
      continue;
    if (!any++)
      fputs("\n## recomputation (gsl.7, RECOMPUTATION)\n", f);
    const char *what = R->iter >= 0 ? arena_printf(a, "%s loop %s = %" PRId64, where(a, R->site), R->name, R->iter)
                                    : arena_printf(a, "%s %s called at %s%s%s%s", where(a, R->span), R->name,
                                                   where(a, R->site), R->loops ? " (" : "", R->loops ? R->loops : "",
                                                   R->loops ? ")" : "");
    fprintf(f, "%s: recomputed for the backward pass, %s; %d values computed again (%d collective%s), %.0f "
               "FLOP of products a device\n",
            what, R->why ? R->why : R->iter >= 0 ? "marked remat for in the source" : "marked remat fn in the source",
            vals[r], colls[r], colls[r] == 1 ? "" : "s", flops[r]);
  }
  free(vals);
  free(colls);
  free(flops);
}

/* ", uneven: ..." for each dim of v its shards do not divide (gsl.7,
 * Uneven dimensions): its size, the tiles, what the last shard holds */
static const char *uneven_note(Arena *a, const Program *g, const Value *v) {
  uint32_t pad = shard_padded(g, &v->shape, &v->sh);
  const char *s = "";
  for (int d = 0; d < v->shape.rank; d++) {
    if (!(pad & (1u << d)))
      continue;
    int64_t n = v->shape.d[d], k = shard_shards(g, &v->sh, d);
    s = arena_printf(a, "%s, uneven dim %d: %" PRId64 " over %" PRId64 " in tiles of %" PRId64 " (the last holds %" PRId64 ")",
                     s, d, n, k, (n + k - 1) / k, shard_last_real(n, k));
  }
  return s;
}

/* gslc --same-bits: the sums cut into fixed blocks, a line each. */
static void same_bits(FILE *f, Arena *a, const Program *g) {
  fprintf(f, "\n## same bits (gslc --same-bits=%d): sums over split dimensions in fixed blocks, added in block order\n"
             "%d dimension%s cut into blocks (each: the largest divisor of its extent up to %d); every matrix "
             "product runs the pinned chains of FMAs (man gslc, --same-bits); the collectives that bring the "
             "blocks' partials together are marked below\n",
          g->same_bits, g->nsame, g->nsame == 1 ? "" : "s", g->same_bits);
  for (int i = 0; i < g->nsame; i++) {
    const SameNote *n = &g->same[i];
    Value at = {0};
    at.span = n->span;
    at.site = n->site;
    at.pass = n->pass;
    fprintf(f, "%-11s over %" PRId64 " in %" PRId64 " blocks of %" PRId64 ", split %" PRId64
               " way%s here; whole blocks on %s devices along it   ; %s\n",
            n->kind, n->n, n->blocks, n->n / n->blocks, n->devices, n->devices == 1 ? "" : "s", n->fits,
            where_site(a, &at));
  }
}

void explain_print(FILE *f, const Program *g, const Program *s, const AutoShard *searched, const Machine *m,
                   const double *plain) {
  Arena *a = arena_new();
  int64_t devices = 1;
  for (int i = 0; i < g->mesh.naxes; i++)
    devices *= g->mesh.size[i];
  fprintf(f, "# %s on ", g->path);
  if (g->mesh.naxes) {
    fputs("mesh [", f);
    for (int i = 0; i < g->mesh.naxes; i++)
      fprintf(f, "%s%s = %" PRId64, i ? ", " : "", g->mesh.name[i], g->mesh.size[i]);
    fprintf(f, "]: %" PRId64 " devices\n", devices);
  } else {
    fputs("one device (no mesh)\n", f);
  }
  if (g->precision == DT_BF16) { /* which values --precision bf16 made bf16 */
    int prod[PASS_RECOMPUTE + 1] = {0}, routed = 0, vals = 0;
    for (int i = 0; i < g->nvalues; i++) {
      const Value *v = g->values[i];
      vals += v->dtype == DT_BF16;
      if (v->op == OP_EINSUM && v->args[0]->dtype == DT_BF16)
        prod[v->pass]++;
      if ((v->op == OP_DISPATCH && v->dtype == DT_BF16) || (v->op == OP_COMBINE && v->args[0]->dtype == DT_BF16))
        routed++;
    }
    fprintf(f, "\n## precision bf16 (gslc --precision bf16)\n"
               "%d values are bf16 (the dtype column below); products with bf16 operands and f32 accumulation: "
               "%d forward, %d backward; moe dispatches and combines moving bf16: %d; params, optimizer states "
               "and updates, the loss, norms, softmaxes and moe gating stay f32\n",
            vals, prod[PASS_FORWARD], prod[PASS_BACKWARD], routed);
  }
  if (g->same_bits)
    same_bits(f, a, g);
  if (searched && g->mesh.naxes) {
    fprintf(f, "\n## --auto-shard: the cost search (an integer linear program, solved by CBC)\n"
               "%d values in %d classes, %d edges between them; %s: %d columns (%d integer), %d rows, %d nonzeros; "
               "solved %s in %.3f s; estimated step %.3f ms a device (the summary has the program built's)\n",
            searched->values, searched->classes, searched->edges,
            searched->joint ? "one program over every axis"
                            : arena_printf(a, "axis by axis, %d solves in %d rounds (sizes summed)", searched->solves,
                                           searched->rounds),
            searched->columns, searched->integers, searched->rows, searched->nonzeros,
            searched->optimal ? "to optimality" : "(not proven optimal: the solver's best in its time)",
            searched->seconds, searched->objective * 1e3);
    if (searched->compared) {
      static const char *const names[3] = {"the plan chosen", "pure data parallel", "replicated"};
      fputs("plan                 compute ms   communication ms   step ms   params, states, inputs: bytes a device\n", f);
      for (int k = 0; k < 3; k++) {
        const double *t = searched->totals[k];
        if (t[0] < 0)
          fprintf(f, "%-20s (no plan)\n", names[k]);
        else
          fprintf(f, "%-20s %10.3f   %16.3f   %7.3f   %.0f\n", names[k], t[0] * 1e3, t[1] * 1e3, (t[0] + t[1]) * 1e3,
                  t[2]);
      }
    }
    for (int i = 0; i < g->ntensors; i++)
      if (g->tensors[i].auto_note)
        fprintf(f, "%-14s %s%-16s %s\n", g->tensors[i].name, dtype_name(g->tensors[i].dtype),
                shape_str(a, &g->tensors[i].shape), g->tensors[i].auto_note);
  }
  fputs("\n## values: sharding (per dimension the mesh axes that cut it), and why\n", f);
  for (int i = 0; i < g->nvalues; i++) {
    const Value *v = g->values[i];
    fprintf(f, "%-14s %s%-16s %-14s %-10s %s%s   ; %s\n", label(a, v), dtype_name(v->dtype),
            shape_str(a, &v->shape), sharding_str(a, g, v), op_name(v->op), origin(a, g, v), uneven_note(a, g, v),
            where_site(a, v));
  }
  if (g->train.loss) {
    const Train *t = &g->train;
    int ngrads = 0;
    for (int i = 0; i < g->ntensors; i++)
      ngrads += g->tensors[i].grad != NULL;
    char kw[64];
    double dflt, lr = 0;
    for (int k = 0; ir_optim_keyword(t->opt, k, kw, sizeof kw, &dflt); k++)
      if (strcmp(kw, "lr") == 0)
        lr = t->args[k];
    fprintf(f, "\n## train: the optimizer, its learning rate at step t (from 1), gradient clipping\n%s\n",
            ir_optim_desc(a, t));
    if (!ir_train_scheduled(t))
      fprintf(f, "lr: %g at every step\n", lr);
    else {
      fputs("lr: ", f);
      if (t->warmup > 0)
        fprintf(f, "%g * t / %g up to step %g, then ", lr, t->warmup, t->warmup);
      if (t->decay == DECAY_CONSTANT)
        fprintf(f, "%g\n", lr);
      else
        fprintf(f, "%s from %g at step %g to %g at step %g, and %g after\n", ir_decay_name(t->decay), lr,
                t->warmup + 1, t->min_lr, t->warmup + t->decay_steps + 1, t->min_lr);
    }
    const char *over = arena_printf(a, "the gradients of %d trained param%s", ngrads, ngrads == 1 ? "" : "s");
    if (t->clip > 0)
      fprintf(f, "clip: every gradient times min(1, %g / (grad_norm + 1e-6)); grad_norm over %s, before clipping\n",
              t->clip, over);
    else
      fprintf(f, "clip: none; grad_norm (over %s) is reported\n", over);
  }
  bool updates = false;
  for (int i = 0; i < g->ntensors; i++)
    if (g->tensors[i].update_note) {
      if (!updates)
        fputs("\n## optimizer updates: whole on every device, or sharded over the data axes (ZeRO-1)\n", f);
      updates = true;
      fprintf(f, "%-14s %s%-16s %s\n", g->tensors[i].name, dtype_name(g->tensors[i].dtype),
              shape_str(a, &g->tensors[i].shape), g->tensors[i].update_note);
    }
  if (g->nmoe)
    fputs("\n## moe blocks: matrix products over the filled capacity slots only, or over every slot\n", f);
  for (int i = 0, o = 0; i < g->nmoe; i++) {
    const MoeNote *m = &g->moe[i];
    fprintf(f, "moe at %s (E = %" PRId64 ", G = %" PRId64 ", C = %" PRId64 ")%s: ", where(a, m->span), m->e, m->g,
            m->c, m->recomputed ? ", recomputed for the backward pass" : "");
    if (m->why)
      fprintf(f, "padded (%s)\n", m->why);
    else
      fprintf(f, "empty slots skipped: %d products by rows, %d by summed slots, %d elementwise ops by rows\n",
              m->rows, m->depth, m->loops);
    if (m->c >= m->s && !m->recomputed) { /* no expert can get more than S of a group's choices */
      int64_t c1 = (m->k * m->s + m->e - 1) / m->e, b1 = m->bytes / m->c * c1;
      fprintf(f, "  dropless: C = %" PRId64 " = S, room for every choice; the dispatched tokens take %" PRId64
                 " bytes over the mesh, %" PRId64 " more than at capacity 1.0 (C = %" PRId64 ")%s\n",
              m->c, m->bytes, m->bytes - b1, c1,
              m->why ? "" : ", and no more FLOPs: the products run over the filled slots alone");
    }
    /* its signals: moe.c made them in block order, "moe.NAME.load" and
     * "moe.NAME.drop", the drop alone logged (a recomputed block has none
     * of its own: its original's are the same numbers) */
    if (m->recomputed)
      continue;
    while (o < g->noutputs && !(g->outputs[o].kind == OUT_SIGNAL && g->outputs[o].log &&
                                 !strncmp(g->outputs[o].name, "moe.", 4) && str_ends(g->outputs[o].name, ".drop")))
      o++;
    if (o < g->noutputs) {
      const char *drop = g->outputs[o].name, *max = NULL;
      int base = (int)(strlen(drop) - strlen(".drop"));
      for (int j = o + 1; j < g->noutputs && !max; j++)
        if (g->outputs[j].kind == OUT_SIGNAL && g->outputs[j].log && !strncmp(g->outputs[j].name, drop, (size_t)base) &&
            !strcmp(g->outputs[j].name + base, ".load_max"))
          max = g->outputs[j].log;
      fprintf(f, "  signals: %.*s.load, %s (logged as %s), %.*s.load_max (logged as %s), .load_min, .load_std, .idle, "
                 ".entropy\n",
              base, drop, drop, g->outputs[o].log, base, drop, max ? max : "-");
      o++;
    }
  }
  recomputation(f, a, s);
  fputs("\n## collectives (bytes: received per device per step)\n", f);
  int counts[OP__COUNT] = {0}, per_pass[PASS_RECOMPUTE + 1] = {0}, riders = 0;
  int64_t total = 0;
  int n = 0;
  for (int i = 0; i < s->nvalues; i++) {
    const Value *v = s->values[i];
    if (!(ir_op(v->op)->flags & OF_SPMD) || v->op == OP_PAD_MASK) /* collectives and local slices */
      continue;
    const char *axes = "";
    for (int j = 0; j < v->ngroup; j++)
      axes = arena_printf(a, "%s%s%s", axes, j ? ", " : "", s->mesh.name[v->group[j]]);
    int64_t b = shard_collective_bytes(s, v);
    const char *dims = v->op == OP_ALL_REDUCE   ? ""
                       : v->op == OP_ALL_TO_ALL ? arena_printf(a, " dim %d -> %d", v->axis2, v->axis)
                                                : arena_printf(a, " dim %d", v->axis);
    const char *kind = v->op == OP_ALL_REDUCE && v->fn == RF_MAX ? "all_reduce max" : op_name(v->op);
    fprintf(f, "%-15s over (%s)%s: %s%s -> %s, %" PRId64 " bytes   ; %s: %s%s\n", kind, axes, dims,
            dtype_name(v->dtype), shape_str(a, &v->args[0]->shape), shape_str(a, &v->shape), b,
            where_site(a, v), v->why ? v->why : "",
            v->carrier ? "; rides in the call of the all_to_all above (one exchange)" : "");
    if (v->carrier)
      riders++;
    else
      counts[v->op]++;
    per_pass[v->pass]++;
    total += b;
    n++;
  }
  if (!n)
    fputs("none\n", f);
  fputs("\n## summary\n", f);
  static const Op kinds[] = {OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_TO_ALL, OP_COLLECTIVE_PERMUTE,
                             OP_LOCAL_SLICE};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    fprintf(f, "%-15s %d\n", op_name(kinds[i]), counts[kinds[i]]);
  if (riders)
    fprintf(f, "%d small all_to_all%s ride%s in the calls of others, with no exchange of %s own\n", riders,
            riders == 1 ? "" : "s", riders == 1 ? "s" : "", riders == 1 ? "its" : "their");
  if (per_pass[PASS_RECOMPUTE])
    fprintf(f, "forward %d, recompute %d, backward %d, update %d (the training step's parts)\n",
            per_pass[PASS_FORWARD], per_pass[PASS_RECOMPUTE], per_pass[PASS_BACKWARD], per_pass[PASS_UPDATE]);
  else if (per_pass[PASS_BACKWARD] || per_pass[PASS_UPDATE])
    fprintf(f, "forward %d, backward %d, update %d (the training step's parts)\n", per_pass[PASS_FORWARD],
            per_pass[PASS_BACKWARD], per_pass[PASS_UPDATE]);
  fprintf(f, "bytes received per device per step: %" PRId64 "\n", total);
  int64_t local = 0;
  for (int i = 0; i < s->ntensors; i++)
    local += bytes_of(s->tensors[i].value);
  fprintf(f, "param and input bytes per device: %" PRId64 "\n", local);
  double compute, comm;
  shard_estimate(s, m, &compute, &comm);
  fprintf(f, "estimated step per device: %.3f ms, %.3f computing and %.3f communicating (the cost model of "
             "--auto-shard, with no overlap; man gslc, MACHINE FILES)\n",
          (compute + comm) * 1e3, compute * 1e3, comm * 1e3);
  if (plain) {
    double was = plain[0] + plain[1];
    fprintf(f, "without --same-bits: %.3f ms, %.3f computing and %.3f communicating; --same-bits costs %+.1f %% "
               "by this model (products at gemm_pinned_gflops; the blocks' sums and collectives)\n",
            was * 1e3, plain[0] * 1e3, plain[1] * 1e3, was > 0 ? 100 * ((compute + comm) / was - 1) : 0.0);
  }
  arena_free(a);
}

/* gslc --emit-annotations: each param's and input's declaration as the
 * source has it, with its sharding written in after its type where the
 * source gave none (replicate() for a whole one), then where it is. */
void annotations_print(FILE *f, const Program *g) {
  Arena *a = arena_new();
  fprintf(f, "# %s: the shardings of its params and inputs, written into their declarations\n", g->path);
  for (int i = 0; i < g->ntensors; i++) {
    const Tensor *t = &g->tensors[i];
    if (t->kind == TK_STATE || !t->span.src)
      continue;
    const char *text = t->span.src->text + t->span.off;
    size_t n = t->span.end - t->span.off;
    const char *nl = memchr(text, '\n', n);
    if (nl) /* a declaration over several lines: its first */
      n = (size_t)(nl - text);
    /* the type's closing bracket: the first ']' after the ':' */
    const char *colon = memchr(text, ':', n);
    const char *close = colon ? memchr(colon, ']', n - (size_t)(colon - text)) : NULL;
    bool whole = true;
    for (int d = 0; d < t->shape.rank; d++)
      whole &= t->value->sh.naxes[d] == 0;
    const char *ann = whole ? "replicate()" : arena_printf(a, "shard(%s)", sharding_str(a, g, t->value));
    if (t->annotated || !close || !g->mesh.naxes)
      fprintf(f, "%.*s", (int)n, text);
    else
      fprintf(f, "%.*s %s%.*s", (int)(close + 1 - text), text, ann, (int)(n - (size_t)(close + 1 - text)), close + 1);
    fprintf(f, "   # %s:%u%s\n", t->span.src->path, t->span.line, t->annotated ? " (annotated)" : "");
  }
  arena_free(a);
}
