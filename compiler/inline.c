/* inline.c — calls of GSL functions: every call is inlined.
 *
 * Method: inline_fn takes the callee's AST and IR values as its arguments,
 * so a call in the source (sema_call_fn, which evaluates the arguments
 * first) and a call the compiler makes on values it built itself
 * (sema_call, in sema.c) go the same way. The arguments are checked
 * against the callee's argument types, shape names in those types bind per
 * call, and the body is elaborated afresh in a scope that sits on the scope
 * the function was defined in (never on the caller's), so each call has its
 * own static shapes. The call is pushed on the stack of frames that gives
 * every error in the body a note at each call it was inlined through, and
 * its values are built in a region of the call's own inside the caller's
 * (Region), which keeps that chain for the errors of later passes.
 * Inlining is bounded: calls nest at most SEMA_MAX_DEPTH deep, and once the
 * program holds more than SEMA_MAX_VALUES values the call being inlined
 * reports it, once, and every later call stops at once. */
#include <inttypes.h>
#include <string.h>

#include "sema.h"

/* a function's name in messages (a moe body has none) */
static const char *fn_name(const Node *fnode) { return fnode->name ? fnode->name : "moe body"; }

static bool check_arg_type(Sema *s, Scope *fsc, const Node *arg, const Node *fnode, Value *v, Span at) {
  const Node *t = arg->a;
  DType dt;
  if (!sema_dtype_name(t->name, &dt)) {
    sema_error(s, t->span, "unknown type '%s' (expected f32, bf16 or i32)", t->name);
    return false;
  }
  const char *fname = fn_name(fnode);
  if (v->dtype != dt || v->shape.rank != t->list.len) {
    sema_error(s, at, "argument '%s' of '%s' must be %s, got %s", arg->name, fname, sema_span_text(s, t->span), sema_vtype(s, v));
    return false;
  }
  for (int i = 0; i < t->list.len; i++) {
    const Node *d = t->list.items[i];
    int64_t want;
    /* a shape name binds per call (shadowing any global const of that name)
     * unless an earlier argument of this call bound it */
    if (d->kind == AST_NAME && !sema_lookup_local(fsc, d->name)) {
      Binding *b = sema_bind(s, fsc, d->name, BK_SHAPEVAR, d->span);
      if (b)
        b->i = v->shape.d[i];
      continue;
    }
    bool ok = true;
    want = sema_eval_int(s, fsc, d, "a dimension", &ok);
    if (!ok)
      return false;
    if (want != v->shape.d[i]) {
      sema_error(s, at, "argument '%s' of '%s' must be %s, got %s: dimension %d is %" PRId64 ", expected %" PRId64,
           arg->name, fname, sema_span_text(s, t->span), sema_vtype(s, v), i, v->shape.d[i], want);
      return false;
    }
  }
  return true;
}
/* The body of fnode in scope fsc, whose arguments are bound; call is on the
 * stack of frames. */
static R run_body(Sema *s, Scope *fsc, const Node *fnode, Span call) {
  R result = none;
  bool ok = true, returned = false;
  for (int i = 0; i < fnode->list2.len && ok; i++) {
    const Node *st = fnode->list2.items[i];
    if (returned) {
      sema_error(s, st->span, "statement after return");
      ok = false;
      break;
    }
    if (st->kind == AST_LET) {
      ok = sema_exec_let(s, fsc, st);
    } else if (st->kind == AST_FOR) {
      ok = sema_exec_for(s, fsc, st);
    } else if (st->kind == AST_RETURN) {
      returned = true;
      if (st->list.len == 1) {
        result = sema_eval(s, fsc, st->list.items[0]);
        if (result.k == R_TUPLE) {
          sema_error(s, st->span, "return of a call that gives several values: name them with let first");
          result = none;
        }
      } else {
        Value **vs = arena_alloc(s->b.p->arena, sizeof(Value *) * (size_t)st->list.len);
        for (int j = 0; j < st->list.len; j++)
          if (!(vs[j] = sema_eval_value(s, fsc, st->list.items[j])))
            ok = false;
        if (ok) {
          result = none;
          result.k = R_TUPLE;
          result.vs = vs;
          result.n = st->list.len;
        }
      }
      ok = ok && result.k != R_NONE;
    } else if (st->kind != AST_ERROR) {
      sema_error(s, st->span, "only let, for and return may stand in a function body");
      ok = false;
    }
    if (s->too_big)
      return none;
    if (s->b.p->nvalues > SEMA_MAX_VALUES) {
      s->too_big = true;
      s->depth--; /* the notes name the calls this one was inlined through */
      sema_error(s, call, "inlining '%s' here takes the program past %d IR values (do functions call each other "
                 "many times over?)", fn_name(fnode), SEMA_MAX_VALUES);
      s->depth++;
      return none;
    }
  }
  if (ok && !returned)
    sema_error(s, fnode->span, fnode->name ? "function '%s' ends without return" : "the %s ends without return",
               fn_name(fnode));
  return ok && returned ? result : none;
}

R inline_fn(Sema *s, Scope *home, const Node *fnode, const R *args, int nargs, const Span *argspan, Span call) {
  /* past the errors shown, inlining more only finds errors nobody sees: a
   * body that fails, called 4^9 times over, once took a minute */
  if (s->too_big || diag_flooded(s->diag))
    return none;
  if (nargs != fnode->list.len)
    die("inline_fn: '%s' takes %d arguments, %d given", fn_name(fnode), fnode->list.len, nargs);
  if (s->depth == SEMA_MAX_DEPTH) {
    sema_error(s, call, "calls nest more than %d deep (is '%s' recursive?)", SEMA_MAX_DEPTH, fn_name(fnode));
    return none;
  }
  Scope *fsc = arena_alloc(s->b.p->arena, sizeof *fsc);
  fsc->parent = home;
  for (int i = 0; i < nargs; i++) {
    const Node *arg = fnode->list.items[i];
    /* a number stays a compile-time number unless the argument has a type,
     * as a let of a number does: a body can pass it on as moe's top, a
     * shape or an index */
    bool number = is_num(args[i]) && !arg->a;
    Value *v = number ? NULL : args[i].k == R_VALUE ? args[i].v : sema_value_of(s, args[i], argspan[i]);
    if (!number && !v)
      return none;
    if (arg->a && !check_arg_type(s, fsc, arg, fnode, v, argspan[i]))
      return none;
    Binding *b = sema_bind(s, fsc, arg->name, !number ? BK_VALUE : args[i].k == R_INT ? BK_INT : BK_FLOAT, arg->span);
    if (!b)
      return none;
    b->v = v;
    b->i = args[i].k == R_INT ? args[i].i : 0;
    b->f = args[i].k == R_FLOAT ? args[i].f : 0;
    b->rebindable = true;
  }
  s->stack[s->depth++] = (Frame){FRAME_CALL, fn_name(fnode), 0, call};
  Build outer = s->b;
  /* a region of its own, inside the caller's: the calls a value was
   * inlined through, for the errors of later passes (ir_note_calls); the
   * outermost call's is a candidate for --mem-budget, a remat fn's is
   * recomputed */
  const char *loops = NULL; /* the iterations the call is made in (an outermost call's, a remat fn's), for --explain */
  if (!outer.site.src || fnode->flag)
    for (int k = 0; k < s->depth - 1; k++)
      if (s->stack[k].kind == FRAME_ITERATION)
        loops = arena_printf(outer.p->arena, "%s%s%s = %" PRId64, loops ? loops : "", loops ? ", " : "",
                             s->stack[k].name, s->stack[k].iter);
  int region = ir_region_new(outer.p, outer.region, fnode->span, call, fn_name(fnode), -1, loops, fnode->flag);
  /* the body's values carry the outermost call as their site */
  s->b = build_in(outer, outer.site.src ? outer.site : call, region);
  R result = run_body(s, fsc, fnode, call);
  s->depth--;
  s->b = outer;
  return result;
}

R sema_call_fn(Sema *s, Scope *sc, const Binding *fn, const Node *call) {
  const Node *fnode = fn->fn;
  Args a;
  if (!sema_split_args(s, call, &a))
    return none;
  if (a.nkw) {
    sema_error(s, a.kw[0]->span, "'%s' takes no keyword arguments", fnode->name);
    return none;
  }
  if (a.npos != fnode->list.len) {
    sema_error(s, call->span, "'%s' takes %d argument%s, %d given", fnode->name, fnode->list.len,
               fnode->list.len == 1 ? "" : "s", a.npos);
    diag_note(s->diag, fnode->span, "'%s' is defined here", fnode->name);
    return none;
  }
  if (s->depth == SEMA_MAX_DEPTH) {
    sema_error(s, call->span, "calls nest more than %d deep (is '%s' recursive?)", SEMA_MAX_DEPTH, fnode->name);
    return none;
  }
  R vals[SEMA_MAX_ARGS];
  Span spans[SEMA_MAX_ARGS];
  for (int i = 0; i < a.npos; i++) {
    vals[i] = sema_eval(s, sc, a.pos[i]);
    if (vals[i].k != R_VALUE && !is_num(vals[i]) && !sema_value_of(s, vals[i], a.pos[i]->span))
      return none;
    spans[i] = a.pos[i]->span;
  }
  return inline_fn(s, fn->home, fnode, vals, a.npos, spans, call->span);
}
