/* loop.c — for loops, unrolled as they are elaborated.
 *
 * Method: `for NAME in A..B { body }` evaluates A and B once, in the scope
 * the loop stands in, as compile-time integers, and elaborates the body
 * B - A times in order, NAME a compile-time integer A, A + 1, ..., B - 1:
 * the IR is what the iterations written out by hand give. Each iteration
 * has its own scope on the loop's scope (one Scope, emptied between
 * iterations) and a frame on the stack of notes, so an error in the body,
 * or in a call made from it, carries a note naming the iteration, as an
 * error in a function carries one per call it was inlined through.
 *
 * Names: a let in the body whose name was bound before the loop, by let
 * or as a function's argument, in the scope the loop stands in or in the
 * body of a loop around it, rebinds that binding in place: later
 * statements and iterations see the new value, and after the loop the
 * name holds the last iteration's. In a function's body the same holds of
 * a name bound outside the function (a global let): the loop rebinds it in
 * a binding of the function's own, made at the first rebinding, so the
 * function's later statements see the last iteration's value and the
 * global itself is unchanged (one rule for loops at the top level and in
 * functions). Every other name the body binds, and
 * the loop variable, is local to one iteration; a use of one after the
 * loop is explained (sema_explain_ended). Consts, params, inputs,
 * functions and loop variables are never rebound.
 *
 * Only let and for may stand in a body: any other statement is reported
 * once, before the first iteration. An iteration that reports an error is
 * the last elaborated (the later ones would repeat it), and the names the
 * loop rebinds are poisoned so that their uses stay silent. The
 * iterations of all loops together are bounded by SEMA_MAX_ITERATIONS,
 * checked before a loop starts. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "sema.h"

/* The binding of name in sc or, while sc is an iteration's scope, in the
 * scopes it sits on up to the first that is not one: what a let of a loop
 * whose iterations sit on sc would rebind. *home: the scope it is in.
 * Else NULL, and where that first scope is a function's body, *home is
 * it and *outer the binding the name has outside the function, if any
 * (a global the loop rebinds inside the function alone). */
static Binding *carried(Scope *sc, const char *name, Scope **home, Binding **outer) {
  *outer = NULL;
  for (; sc; sc = sc->parent) {
    Binding *b = sema_lookup_local(sc, name);
    if (b) {
      *home = sc;
      return b;
    }
    if (!sc->loop)
      break;
  }
  if (sc && sc->parent) {
    *home = sc;
    *outer = sema_lookup(sc->parent, name);
  }
  return NULL;
}

static bool is_loop_var(const Scope *home, const char *name) {
  return home->loop && strcmp(home->loop->c->name, name) == 0;
}

Binding *sema_rebinds(Scope *sc, const char *name) {
  Scope *home;
  Binding *outer;
  Binding *b = sc->loop && !sema_lookup_local(sc, name) ? carried(sc->parent, name, &home, &outer) : NULL;
  return b && b->rebindable ? b : NULL;
}

/* what b, which is no loop variable, is, for the message that it cannot
 * be rebound */
static const char *kind_of(const Binding *b) {
  switch (b->kind) {
  case BK_INT:
  case BK_FLOAT: return "a const";
  case BK_SHAPEVAR: return "a shape name of the function's argument types";
  case BK_FN: return "a function";
  case BK_VALUE: return b->v->op == OP_PARAM ? "a param" : "an input";
  default: return "bound";
  }
}

Binding *sema_bind_let(Sema *s, Scope *sc, const Node *nm, BindKind k) {
  Scope *home = sc;
  Binding *b = sc->loop ? sema_lookup_local(sc, nm->name) : NULL, *outer = NULL;
  if (!b && sc->loop)
    b = carried(sc->parent, nm->name, &home, &outer);
  if (outer && outer->kind != BK_POISON) { /* a name from outside the function the loop is in */
    if (!outer->rebindable) {
      sema_error(s, nm->span, "'%s' is %s, and a loop's body rebinds only names bound by let or as a function's "
                 "argument", nm->name, kind_of(outer));
      diag_note(s->diag, outer->span, "'%s' is bound here", nm->name);
      return NULL;
    }
    /* carried as at the top level, in a binding of the function's own:
     * the function's later statements see it, the global is unchanged */
    if ((b = sema_bind(s, home, nm->name, k, nm->span)))
      b->rebindable = true;
    return b;
  }
  if (b && (b->kind == BK_POISON && !b->rebindable))
    return NULL; /* its declaration failed, and said so */
  if (b && (home != sc || is_loop_var(sc, nm->name))) {
    if (is_loop_var(home, nm->name)) {
      sema_error(s, nm->span, "'%s' is a loop variable and cannot be rebound", nm->name);
      diag_note(s->diag, b->span, "the loop binds '%s' here", nm->name);
      return NULL;
    }
    if (!b->rebindable) {
      sema_error(s, nm->span, "'%s' is %s, and a loop's body rebinds only names bound by let or as a function's "
                 "argument", nm->name, kind_of(b));
      diag_note(s->diag, b->span, "'%s' is bound here", nm->name);
      return NULL;
    }
    b->kind = k;
    b->span = nm->span;
    return b;
  }
  b = sema_bind(s, sc, nm->name, k, nm->span);
  if (b)
    b->rebindable = true;
  return b;
}

/* ---- before and after the iterations ------------------------------------------------ */

/* Reports every statement of loop's body (and of the loops in it) that
 * cannot stand in a loop's body; false if there was one. */
static bool check_body(Sema *s, const Node *loop) {
  bool ok = true;
  for (int i = 0; i < loop->list.len; i++) {
    const Node *st = loop->list.items[i];
    const char *why = NULL;
    switch (st->kind) {
    case AST_LET:
    case AST_ERROR:
      break;
    case AST_FOR:
      ok = check_body(s, st) && ok;
      break;
    case AST_PARAM:
    case AST_INPUT:
      why = arena_printf(s->b.p->arena, "%s cannot stand in a loop's body: declare it before the loop, with a leading "
                         "dimension for the iterations, and index it with the loop variable (%s[%s])",
                         st->kind == AST_PARAM ? "a param" : "an input", st->name, loop->c->name);
      break;
    case AST_CONST: why = "a const cannot stand in a loop's body: a body binds its names with let"; break;
    case AST_FN: why = "a function cannot be defined in a loop's body: define it before the loop"; break;
    case AST_OUTPUT: why = "output cannot stand in a loop's body: name the values after the loop"; break;
    case AST_TRAIN: why = "train cannot stand in a loop's body: a program has one train statement"; break;
    case AST_RETURN: why = "return cannot stand in a loop's body: a function returns after its loops"; break;
    default:
      why = arena_printf(s->b.p->arena, "%s may only stand at the top level, not in a loop's body",
                         ast_kind_name(st->kind));
      break;
    }
    if (why) {
      sema_error(s, st->span, "%s", why);
      ok = false;
    }
  }
  return ok;
}

/* Calls f on every let's bound names and every loop's variable in body,
 * nested loops included. */
static void each_name(Sema *s, Scope *sc, const NodeList *body, const Node *loop,
                      void (*f)(Sema *, Scope *, const Node *nm, bool var)) {
  f(s, sc, loop->c, true);
  for (int i = 0; i < body->len; i++) {
    const Node *st = body->items[i];
    if (st->kind == AST_LET)
      for (int j = 0; j < st->list.len; j++)
        f(s, sc, st->list.items[j], false);
    else if (st->kind == AST_FOR)
      each_name(s, sc, &st->list, st, f);
  }
}

/* after a loop that failed: what it rebinds is poisoned, so that its uses
 * add no messages */
static void spoil(Sema *s, Scope *sc, const Node *nm, bool var) {
  (void)s;
  Scope *home;
  Binding *outer;
  Binding *b = var ? NULL : carried(sc, nm->name, &home, &outer);
  if (b && b->rebindable)
    b->kind = BK_POISON;
}

/* after a loop: a name it did not rebind was local to its iterations */
static void end(Sema *s, Scope *sc, const Node *nm, bool var) {
  Scope *home;
  Binding *outer;
  if (strcmp(nm->name, "_") == 0 || (!var && carried(sc, nm->name, &home, &outer)))
    return;
  Ended *e = NULL;
  for (Ended *o = sc->ended; o && !e; o = o->next)
    if (strcmp(o->name, nm->name) == 0)
      e = o;
  if (!e) {
    e = arena_alloc(s->b.p->arena, sizeof *e);
    e->name = nm->name;
    e->next = sc->ended;
    sc->ended = e;
  }
  e->bound = nm->span;
  e->var = var;
}

bool sema_explain_ended(Sema *s, Scope *sc, const char *name, Span at) {
  for (; sc; sc = sc->parent)
    for (const Ended *e = sc->ended; e; e = e->next) {
      if (strcmp(e->name, name) != 0)
        continue;
      if (e->var) {
        sema_error(s, at, "'%s' is a loop variable, unbound after its loop", name);
        diag_note(s->diag, e->bound, "the loop binds '%s' here", name);
      } else {
        sema_error(s, at, "'%s' is local to each iteration of a loop, unbound after it; to carry it out of the loop, "
                   "bind it before the loop (the body then rebinds it)", name);
        diag_note(s->diag, e->bound, "'%s' is first bound here, in the loop's body", name);
      }
      return true;
    }
  return false;
}

/* ---- the iterations --------------------------------------------------------------------- */

/* An end of the range: a compile-time integer; false after reporting. */
static bool range_end(Sema *s, Scope *sc, const Node *n, const char *which, int64_t *out) {
  R r = sema_eval(s, sc, n);
  if (r.k == R_INT) {
    *out = r.i;
    return true;
  }
  if (r.k == R_FLOAT && r.f == floor(r.f) && fabs(r.f) < 9e15) {
    *out = (int64_t)r.f;
    return true;
  }
  if (r.k == R_FLOAT)
    sema_error(s, n->span, "the loop's %s is %g; it must be a compile-time integer", which, r.f);
  else if (r.k == R_VALUE)
    sema_error(s, n->span, "the loop's %s is a tensor (%s); it must be a compile-time integer, such as a const",
               which, sema_vtype(s, r.v));
  else if (r.k == R_TUPLE)
    sema_error(s, n->span, "the loop's %s is %d values; it must be a compile-time integer", which, r.n);
  return false;
}

/* Elaborates the iterations lo .. hi-1 of st in scope sc; false after an
 * error in one (the last elaborated). */
static bool unroll(Sema *s, Scope *sc, const Node *st, int64_t lo, int64_t hi) {
  int before = s->errors;
  Scope *it = arena_alloc(s->b.p->arena, sizeof *it);
  it->parent = sc;
  it->loop = st;
  Frame *f = &s->stack[s->depth++];
  *f = (Frame){FRAME_ITERATION, st->c->name, lo, st->span};
  bool ok = true;
  for (int64_t i = lo; i < hi && ok; i++) {
    it->head = NULL;
    it->count = 0;
    it->ended = NULL;
    if (it->table)
      memset(it->table, 0, sizeof *it->table * ((size_t)it->mask + 1));
    f->iter = i;
    s->iterations++;
    Binding *var = sema_bind(s, it, st->c->name, BK_INT, st->c->span);
    var->i = i;
    Build outer = s->b;
    if (st->flag) /* a remat for: each iteration a region, recomputed */
      s->b = build_in(outer, outer.site,
                      ir_region_new(outer.p, outer.region, st->span, st->span, st->c->name, i, NULL, true));
    for (int k = 0; k < st->list.len && ok; k++) {
      const Node *body = st->list.items[k];
      if (body->kind == AST_LET)
        sema_exec_let(s, it, body);
      else if (body->kind == AST_FOR)
        sema_exec_for(s, it, body);
      if (!s->too_big && s->b.p->nvalues > SEMA_MAX_VALUES) {
        s->too_big = true;
        sema_error(s, body->span, "this statement takes the program past %d IR values", SEMA_MAX_VALUES);
      }
      if (!s->too_big && s->evals > SEMA_MAX_EVALS) {
        s->too_big = true;
        sema_error(s, body->span, "this statement takes the program past %d operations evaluated while loops "
                   "unroll (a long expression in many iterations)", SEMA_MAX_EVALS);
      }
      ok = !s->too_big && !diag_flooded(s->diag);
    }
    s->b = outer;
    ok = ok && s->errors == before;
  }
  s->depth--;
  return ok;
}

bool sema_exec_for(Sema *s, Scope *sc, const Node *st) {
  int64_t lo = 0, hi = 0;
  bool ok = check_body(s, st);
  ok = range_end(s, sc, st->a, "start", &lo) && ok;
  ok = range_end(s, sc, st->b, "end", &hi) && ok;
  Scope *home;
  Binding *outer;
  Binding *hidden = carried(sc, st->c->name, &home, &outer);
  if (hidden && hidden->kind != BK_POISON) {
    sema_error(s, st->c->span, "the loop variable '%s' would hide the '%s' bound before the loop", st->c->name,
               st->c->name);
    diag_note(s->diag, hidden->span, "'%s' is bound here", st->c->name);
    ok = false;
  }
  if (ok && hi < lo) {
    sema_error(s, span_join(st->a->span, st->b->span), "the range %" PRId64 "..%" PRId64 " runs backwards: a loop's "
               "end must not be below its start (A..A is empty)", lo, hi);
    ok = false;
  }
  if (ok && (uint64_t)hi - (uint64_t)lo > (uint64_t)(SEMA_MAX_ITERATIONS - s->iterations)) {
    sema_error(s, st->span, "this loop's %" PRIu64 " iterations take the program past %d loop iterations in all",
               (uint64_t)hi - (uint64_t)lo, SEMA_MAX_ITERATIONS);
    s->too_big = true;
    ok = false;
  }
  if (ok && s->depth == SEMA_MAX_DEPTH) {
    sema_error(s, st->span, "loops and calls nest more than %d deep", SEMA_MAX_DEPTH);
    ok = false;
  }
  ok = ok && unroll(s, sc, st, lo, hi);
  if (!ok)
    each_name(s, sc, &st->list, st, spoil);
  each_name(s, sc, &st->list, st, end);
  return ok;
}
