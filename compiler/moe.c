/* moe.c — the moe block (SPEC section 6): GShard's position-wise mixture of
 * experts, elaborated into ordinary IR.
 *
 *   let y, aux = moe(x, gate = wg, top = K, capacity = F) (t, e) { body }
 *
 * Method: the arguments are checked (x f32[G, S, M], wg f32[M, E], K from 1
 * to E, C = ceil(F * K * S / E) at least 1, or S for capacity = 0, the
 * dropless block: a token's K choices are K distinct experts, so an expert
 * takes at most S of a group's). The gating is GSL: stdlib/moe.gsl's gates,
 * then top1_routes, top2_routes or topk_routes (K > 2; top-2 keeps its
 * own, whose random routing topk_routes has not), inlined with sema_call,
 * give every token's routes (expert, slot, weight: [G, S, K]) and the
 * load-balancing loss; zloss = W adds W times stdlib's router_zloss to it.
 * The routes take the gates, which weigh, and the scores, which choose:
 * the gates again, or with bias_rate = R the gates plus the block's
 * routing bias, a state tensor (TK_STATE, made here as autodiff makes the
 * optimizers') whose update, stdlib's bias_step of this step's loads, is
 * a root stored at the step's end, so only a training step moves it and
 * a recomputed region reads it as the step began.
 * x is dispatched into [E, G, C, M] by those routes (OP_DISPATCH). The
 * body is elaborated once, for one expert, on stand-ins: t f32[G, C, M]
 * and e an i32 scalar, with `w[e]` checked to index a tensor whose leading
 * dimension is E; ir_vmap then rebuilds it over all E experts at once, t
 * becoming the dispatched tensor and w[e] the whole of w (vmap.c). Each
 * value the body returns, f32[E, G, C, N] after batching, is combined back
 * into f32[G, S, N] (OP_COMBINE). The block gives those, then aux.
 *
 * Sharding needs nothing here: propagation carries the experts' cut of E
 * from the weights into the body before the groups' cut arrives through
 * dispatch and combine (their propagation level), and the partitioner
 * runs dispatch and combine where the tokens are, so the two reshardings
 * around the body are the block's two all-to-alls. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sema.h"

static const char *const moe_keywords[] = {"gate", "top", "capacity", "random_routing", "zloss", "bias_rate", "name"};

static bool check_keywords(Sema *s, const Args *a) {
  for (int i = 0; i < a->nkw; i++) {
    bool known = false;
    for (size_t k = 0; k < sizeof moe_keywords / sizeof *moe_keywords; k++)
      known |= strcmp(a->kw[i]->name, moe_keywords[k]) == 0;
    for (int j = 0; j < i; j++)
      if (strcmp(a->kw[j]->name, a->kw[i]->name) == 0) {
        sema_error(s, a->kw[i]->span, "moe: keyword '%s' given twice", a->kw[i]->name);
        return false;
      }
    if (!known) {
      sema_error(s, a->kw[i]->span, "moe takes no keyword '%s' (it takes gate, top, capacity, random_routing, zloss and name)",
                 a->kw[i]->name);
      return false;
    }
  }
  return true;
}

/* The block's name in its signals: name = "..." (letters, digits, '_',
 * '-', '.'), else the file and line of the outermost call it was inlined
 * through (or of the block itself), "lm.gsl:55"; a name taken already
 * (a block written once and inlined or unrolled again) gets "#2", "#3".
 * NULL after reporting a bad one. */
static const char *block_name(Sema *s, const Node *name_n, Span sp) {
  Program *p = s->b.p;
  const char *base;
  if (name_n) {
    if (name_n->kind != AST_STRING) {
      sema_error(s, name_n->span, "moe's name must be a string, as name = \"router1\"");
      return NULL;
    }
    base = name_n->name;
    bool ok = *base != '\0';
    for (const char *c = base; *c; c++)
      ok &= (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
            *c == '-' || *c == '.';
    if (!ok) {
      sema_error(s, name_n->span, "moe's name \"%s\" must be letters, digits, '_', '-' and '.'", base);
      return NULL;
    }
  } else {
    Span at = s->b.site.src ? s->b.site : sp;
    const char *path = at.src ? at.src->path : "?", *slash = strrchr(path, '/');
    base = arena_printf(p->arena, "%s:%u", slash ? slash + 1 : path, at.line);
  }
  /* base, or base#k after the blocks of that name so far (base, base#2,
   * ...): the highest k taken, found in one look at the signals (asking
   * for each k in turn made a stack of L blocks at one line cost L^3) */
  size_t n = strlen(base);
  long top = 0;
  for (int i = 0; i < p->noutputs; i++) {
    const char *o = p->outputs[i].name;
    if (p->outputs[i].kind != OUT_SIGNAL || strncmp(o, "moe.", 4) || strncmp(o + 4, base, n))
      continue;
    o += 4 + n;
    char *end = (char *)o;
    long k = !strcmp(o, ".drop") ? 1 : *o == '#' && o[1] >= '0' && o[1] <= '9' ? strtol(o + 1, &end, 10) : 0;
    if (k && (k == 1 || !strcmp(end, ".drop")) && k > top)
      top = k;
  }
  return top ? arena_printf(p->arena, "%s#%ld", base, top + 1) : base;
}

/* The body of the block (an FN node whose args are t and e) for one expert,
 * then batched over all of them; the batched results in out, their number
 * returned (-1 after reporting). */
static int run_body(Sema *s, Scope *sc, const Node *body, Value *x, int64_t E, int64_t C, Value *dispatched,
                    Value **out, int max, Span at) {
  if (body->list.len != 2) {
    sema_error(s, body->span, "a moe body takes two arguments, (t, e): the expert's tokens and its index; got %d",
               body->list.len);
    return -1;
  }
  const Build *bd = &s->b;
  int first = bd->p->nvalues;
  Shape ts = {3, {x->shape.d[0], C, x->shape.d[2]}};
  Value *t = ir_broadcast(bd, ir_const(bd, dispatched->dtype, 0.0, at), ts, at); /* bf16 under --precision bf16 */
  Value *e = ir_const(bd, DT_I32, 0.0, at);
  Span spans[2] = {at, at};
  R args[2] = {rval(t), rval(e)};
  const Value *saved_member = s->moe_member;
  int64_t saved_experts = s->moe_experts;
  s->moe_member = e;
  s->moe_experts = E;
  R r = inline_fn(s, sc, body, args, 2, spans, at);
  s->moe_member = saved_member;
  s->moe_experts = saved_experts;
  if (r.k == R_NONE)
    return -1;
  int n = r.k == R_TUPLE ? r.n : 1;
  Value *res[8];
  if (n > max) {
    sema_error(s, body->span, "a moe body returns at most %d values, this one %d", max, n);
    return -1;
  }
  const Node *ret = body->list2.items[body->list2.len - 1];
  for (int j = 0; j < n; j++) {
    R one = r.k == R_TUPLE ? rval(r.vs[j]) : r;
    Value *v = one.k == R_VALUE ? one.v : NULL;
    if (!v || !dtype_is_float(v->dtype) || v->shape.rank != 3 || v->shape.d[0] != ts.d[0] || v->shape.d[1] != C) {
      const Node *at_ret = ret->kind == AST_RETURN && j < ret->list.len ? ret->list.items[j] : ret;
      sema_error(s, at_ret->span, "a moe body must return f32[G, C, N] per expert (here G = %" PRId64 ", C = %" PRId64
                 "), got %s", ts.d[0], C, v ? sema_vtype(s, v) : is_num(one) ? "a number" : "no tensor");
      return -1;
    }
    res[j] = v;
  }
  const Value *bad = ir_vmap(bd, first, E, &t, &dispatched, 1, e, res, out, n);
  if (bad && shape_elems(&bad->shape) > GSL_MAX_ELEMS / E)
    sema_error(s, bad->span, "in a moe body run for all E = %" PRId64 " experts at once, this %s would have more "
               "than 2^40 elements", E, sema_vtype(s, bad));
  else if (bad && bad->op == OP_ANNOTATE)
    sema_error(s, bad->span, "a sharding annotation cannot stand in a moe body: the body runs for all experts at "
               "once, sharded as the block decides");
  else if (bad)
    sema_error(s, bad->span, "moe blocks do not nest");
  if (bad)
    return -1;
  return n;
}

R sema_moe(Sema *s, Scope *sc, const Node *n) {
  Span sp = n->span;
  Args a;
  if (s->moe_member) {
    sema_error(s, sp, "moe blocks do not nest");
    return none;
  }
  if (!sema_split_args(s, n, &a) || !check_keywords(s, &a))
    return none;
  if (a.npos != 1) {
    sema_error(s, sp, "moe takes one positional argument, the tokens x: f32[G, S, M]; %d given", a.npos);
    return none;
  }
  const Node *gate_n = sema_kwarg(&a, "gate"), *top_n = sema_kwarg(&a, "top"), *cap_n = sema_kwarg(&a, "capacity");
  const Node *rr_n = sema_kwarg(&a, "random_routing"), *name_n = sema_kwarg(&a, "name");
  const Node *z_n = sema_kwarg(&a, "zloss"), *br_n = sema_kwarg(&a, "bias_rate");
  if (!gate_n) {
    sema_error(s, sp, "moe needs its gating weights: gate = wg, with wg: f32[M, E]");
    return none;
  }
  Value *x = sema_eval_value(s, sc, a.pos[0]);
  Value *wg = sema_eval_value(s, sc, gate_n);
  bool ok = true;
  int64_t K = top_n ? sema_eval_int(s, sc, top_n, "moe's top", &ok) : 2;
  double F = cap_n ? sema_eval_number(s, sc, cap_n, "moe's capacity", &ok) : 2.0;
  double Z = z_n ? sema_eval_number(s, sc, z_n, "moe's zloss", &ok) : 0.0;
  double rate = br_n ? sema_eval_number(s, sc, br_n, "moe's bias_rate", &ok) : 0.0;
  int before = s->errors;
  bool rr = sema_bool_kwarg(s, sc, &a, "random_routing", K == 2);
  if (!x || !wg || !ok || s->errors != before)
    return none;
  if (x->dtype != DT_F32 || x->shape.rank != 3) {
    sema_error(s, a.pos[0]->span, "moe's tokens must be f32[G, S, M] (groups, tokens per group, model dim), got %s",
               sema_vtype(s, x));
    return none;
  }
  int64_t G = x->shape.d[0], S = x->shape.d[1], M = x->shape.d[2];
  if (wg->dtype != DT_F32 || wg->shape.rank != 2 || wg->shape.d[0] != M) {
    sema_error(s, gate_n->span, "moe's gate must be f32[M, E] with M = %" PRId64 " (the tokens' last dim), got %s", M,
               sema_vtype(s, wg));
    return none;
  }
  int64_t E = wg->shape.d[1];
  if (K < 1) {
    sema_error(s, top_n->span, "moe's top must be from 1 to E (the experts a token is routed to), got %" PRId64, K);
    return none;
  }
  if (K != 2 && rr_n && rr) {
    sema_error(s, rr_n->span, "random_routing applies to top-2's second choice (GShard's): it needs top = 2, not %" PRId64,
               K);
    return none;
  }
  if (!(Z >= 0) || !isfinite(Z)) {
    sema_error(s, z_n->span, "moe's zloss is the weight of the router's z-loss, 0 or more, got %g", Z);
    return none;
  }
  if (!(rate >= 0) || !isfinite(rate)) {
    sema_error(s, br_n->span, "moe's bias_rate is the routing bias's step after each training step, 0 or more, got %g", rate);
    return none;
  }
  if (K > E) {
    sema_error(s, top_n ? top_n->span : sp, "moe's top = %" PRId64 " needs at least %" PRId64 " experts, the gate has E = %" PRId64,
               K, K, E);
    return none;
  }
  /* dropless (capacity = 0): a token's K choices are distinct experts,
   * so S slots hold every choice an expert can get from a group */
  double c = F == 0 ? (double)S : ceil(F * (double)K * (double)S / (double)E);
  if (!(c >= 1) || c > (double)S * (double)K) {
    sema_error(s, cap_n ? cap_n->span : sp,
               "moe's capacity = %g gives C = ceil(%g * %" PRId64 " * %" PRId64 " / %" PRId64 ") = %g slots per expert; "
               "it must give from 1 to top * S = %" PRId64 " (or be 0: dropless, C = S)", F, F, K, S, E, c, K * S);
    return none;
  }
  int64_t C = (int64_t)c;
  Shape big = {4, {E, G, C, M}};
  if (!sema_check_shape(s, &big, DT_F32, "moe's dispatched tokens", sp))
    return none;

  /* gating, in GSL: the gates g weigh, the scores c choose (g, or g plus
   * the block's routing bias, a state moved after each training step) */
  Program *p = s->b.p;
  const char *name = block_name(s, name_n, sp);
  if (!name)
    return none;
  Build gating = build_f32(s->b); /* the gates stay f32 under --precision bf16, as GShard keeps them */
  Value *u = NULL, *cap;
  if (K == 2) {
    Shape us = {2, {G, S}};
    u = rr ? ir_rng(&s->b, RNG_UNIFORM, 0.0, 1.0, us, sp)
           : ir_broadcast(&s->b, ir_const(&s->b, DT_F32, -1.0, sp), us, sp);
  }
  cap = ir_const(&s->b, DT_F32, (double)C, sp);
  Value *gx[2] = {x, wg}, *g, *bias = NULL;
  if (sema_call(s, &gating, "moe", "gates", gx, 2, &g, 1, sp) != 1)
    return none;
  g->name = "g"; /* in --explain and --emit-ir, as the gating functions name it */
  Value *args[4] = {g, g}, *routes[5];
  int nargs = 2;
  if (rate > 0) {
    Tensor st = {0};
    st.name = arena_printf(p->arena, "moe.%s.bias", name);
    st.kind = TK_STATE;
    st.dtype = DT_F32;
    st.shape = (Shape){1, {E}};
    st.span = br_n->span;
    st.init = INIT_ZEROS;
    st.state_of = -1;
    bias = ir_tensor(&s->b, &st);
    args[1] = ir_binary(&gating, BF_ADD, g, bias, sp);
  }
  if (u)
    args[nargs++] = u;
  args[nargs++] = cap;
  int got = K > 2 ? sema_call_nums(s, &gating, "moe", "topk_routes", args, nargs, &K, 1, routes, 5, sp)
                  : sema_call(s, &gating, "moe", K == 2 ? "top2_routes" : "top1_routes", args, nargs, routes, 5, sp);
  if (got != 5)
    return none;
  Value *expert = routes[0], *slot = routes[1], *weight = routes[2], *aux = routes[3];
  if (Z > 0) { /* aux + Z * the router's z-loss, in f32 as the gating */
    Value *zargs[2] = {x, wg}, *zl;
    if (sema_call(s, &gating, "moe", "router_zloss", zargs, 2, &zl, 1, sp) != 1)
      return none;
    aux = ir_binary(&gating, BF_ADD, aux, ir_binary(&gating, BF_MUL, ir_const(&gating, DT_F32, Z, sp), zl, sp), sp);
  }
  /* the signals: each expert's load and the fraction dropped (stdlib's
   * routing_signals), "drop1", "drop2", ... in the log line in block order */
  Value *ent_args[2] = {x, wg}, *entropy;
  if (sema_call(s, &gating, "moe", "token_entropy", ent_args, 2, &entropy, 1, sp) != 1)
    return none;
  Value *sig_args[5] = {expert, slot, routes[4], wg, entropy}, *sig[3];
  if (sema_call(s, &s->b, "moe", "routing_signals", sig_args, 5, sig, 3, sp) != 3)
    return none;
  int nblocks = 0; /* the blocks so far: one logged "moe.NAME.drop" each */
  for (int i = 0; i < p->noutputs; i++)
    nblocks += p->outputs[i].kind == OUT_SIGNAL && !strncmp(p->outputs[i].name, "moe.", 4) &&
               p->outputs[i].log != NULL && str_ends(p->outputs[i].name, ".drop");
  ir_signal(p, arena_printf(p->arena, "moe.%s.load", name), NULL, sig[0], sp);
  ir_signal(p, arena_printf(p->arena, "moe.%s.drop", name), arena_printf(p->arena, "drop%d", nblocks + 1), sig[1], sp);
  /* the load's spread (stdlib's load_summary) and the router's entropy:
   * the busiest expert's load times E logged as "max1", "max2", ... */
  Value *spread[4];
  if (sema_call(s, &s->b, "moe", "load_summary", sig, 1, spread, 4, sp) != 4)
    return none;
  ir_signal(p, arena_printf(p->arena, "moe.%s.load_min", name), NULL, spread[0], sp);
  ir_signal(p, arena_printf(p->arena, "moe.%s.load_max", name), arena_printf(p->arena, "max%d", nblocks + 1),
            spread[1], sp);
  ir_signal(p, arena_printf(p->arena, "moe.%s.load_std", name), NULL, spread[2], sp);
  ir_signal(p, arena_printf(p->arena, "moe.%s.idle", name), NULL, spread[3], sp);
  ir_signal(p, arena_printf(p->arena, "moe.%s.entropy", name), NULL, sig[2], sp);
  if (bias) { /* the bias's step from this step's loads, stored at the step's end (a training step's only) */
    Value *bargs[3] = {bias, sig[0], ir_const(&s->b, DT_F32, rate, br_n->span)}, *next, *range;
    if (sema_call(s, &s->b, "moe", "bias_step", bargs, 3, &next, 1, sp) != 1 ||
        sema_call(s, &s->b, "moe", "bias_range", &bias, 1, &range, 1, sp) != 1)
      return none;
    ir_root(p, OUT_UPDATE, p->tensors[bias->tensor].name, next, bias->tensor, br_n->span);
    ir_signal(p, arena_printf(p->arena, "moe.%s.bias_range", name), arena_printf(p->arena, "bias%d", nblocks + 1),
              range, sp);
  }

  Value *dispatched = ir_dispatch(&s->b, x, expert, slot, E, C, sp);
  Value *outs[8];
  int nout = run_body(s, sc, n->a, x, E, C, dispatched, outs, 7, sp);
  if (nout < 0)
    return none;
  R r = none;
  r.k = R_TUPLE;
  r.n = nout + 1;
  r.vs = arena_alloc(p->arena, sizeof *r.vs * (size_t)r.n);
  for (int j = 0; j < nout; j++)
    r.vs[j] = ir_combine(&s->b, outs[j], expert, slot, weight, sp);
  r.vs[nout] = aux;
  return r;
}
