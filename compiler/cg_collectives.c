/* cg_collectives.c — collectives as libgslrt calls on buffers.
 *
 * Each names its group of mesh axes by the id gsl_setup got for it. An
 * all_reduce runs in place on its operand's buffer when the plan shares it
 * (nothing else reads that buffer), and on a buffer of its own, into which
 * the operand's expression is computed first, otherwise. all_gather,
 * reduce_scatter, all_to_all and collective_permute read their operand's
 * buffer and write their own. Before each collective's kernel is called,
 * gsl_step (and gsl_eval, gsl_forward) tells the runtime where it is
 * written (gslrt_collective_at), for the watchdog's message: from the
 * caller, so that the kernels of a stack's layers stay one. */
#include <llvm-c/Core.h>
#include <string.h>

#include "codegen.h"

static LLVMValueRef group_id(CG *g, const Value *v) {
  return LLVMBuildLoad2(g->b, g->t_i32, g->groups[g->vgroup[v->id]].id, "group");
}

static LLVMValueRef raw_buffer(CG *g, const Value *v) {
  return LLVMBuildBitCast(g->b, cg_buffer_of(g, v), g->t_ptr, "");
}

/* In place on v's buffer: the operand's (when that is not the same buffer)
 * with the operand's expression computed into it. */
void cg_emit_all_reduce(CG *g, const Value *v) {
  if (g->pl->root[v->id] == v->id) {
    Loop l[GSL_MAX_RANK];
    Aff idx[GSL_MAX_RANK];
    cg_nest_open(g, l, v->shape.rank, v->shape.d, idx);
    LLVMValueRef x = cg_elem_at(g, v->args[0], idx);
    Aff lin = cg_linear_of(&v->shape, idx);
    cg_store_lin(g, cg_buffer_of(g, v), v->dtype, cg_aff_value(g, &lin), x);
    cg_nest_close(g, l, v->shape.rank);
  }
  LLVMValueRef args[6] = {g->ctx_arg,
                          group_id(g, v),
                          cg_ci32(g, cg_rt_dtype(v->dtype)),
                          cg_ci32(g, v->fn == RF_MAX ? 1 : 0),
                          raw_buffer(g, v),
                          cg_ci64(g, shape_elems(&v->shape))};
  cg_call(g, "gslrt_all_reduce", g->t_void, 6, args);
}

/* all_gather, reduce_scatter, all_to_all: operand buffer to v's buffer.
 * An all_to_all that carries a rider moves the rider's buffer in the same
 * call; the rider itself emits nothing (combine.c). */
void cg_emit_collective(CG *g, const Value *v) {
  if (v->carrier)
    return;
  const Value *a = v->args[0], *r = v->rider;
  const char *name = v->op == OP_ALL_GATHER       ? "gslrt_all_gather"
                     : v->op == OP_REDUCE_SCATTER ? "gslrt_reduce_scatter"
                     : r                          ? "gslrt_all_to_all_rider"
                                                  : "gslrt_all_to_all";
  /* the gathered or joined dim's true extent: uneven tiles arrive padded
   * and are joined without their padding (gslrt.h) */
  LLVMValueRef args[18] = {g->ctx_arg,
                           group_id(g, v),
                           cg_ci32(g, cg_rt_dtype(v->dtype)),
                           raw_buffer(g, a),
                           raw_buffer(g, v),
                           cg_ci32(g, a->shape.rank),
                           cg_shape_array(g, &a->shape),
                           cg_ci32(g, v->axis)};
  int n = 8;
  if (v->op == OP_ALL_GATHER)
    args[n++] = cg_ci64(g, v->shape.d[v->axis]);
  if (v->op == OP_ALL_TO_ALL) {
    args[n++] = cg_ci32(g, v->axis2);
    args[n++] = cg_ci64(g, v->shape.d[v->axis2]);
  }
  if (r) {
    const Value *ra = r->args[0];
    LLVMValueRef more[8] = {cg_ci32(g, cg_rt_dtype(r->dtype)), raw_buffer(g, ra), raw_buffer(g, r),
                            cg_ci32(g, ra->shape.rank), cg_shape_array(g, &ra->shape), cg_ci32(g, r->axis),
                            cg_ci32(g, r->axis2), cg_ci64(g, r->shape.d[r->axis2])};
    memcpy(args + n, more, sizeof more);
    n += 8;
  }
  cg_call(g, name, g->t_void, n, args);
}

/* collective_permute: operand buffer to v's buffer, blocks renumbered. */
void cg_emit_permute(CG *g, const Value *v) {
  LLVMValueRef args[7] = {g->ctx_arg,
                          group_id(g, v),
                          LLVMBuildLoad2(g->b, g->t_i32, g->groups[g->vgroup2[v->id]].id, "group2"),
                          cg_ci32(g, cg_rt_dtype(v->dtype)),
                          raw_buffer(g, v->args[0]),
                          raw_buffer(g, v),
                          cg_ci64(g, shape_elems(&v->shape))};
  cg_call(g, "gslrt_collective_permute", g->t_void, 7, args);
}


/* In the function calling v's kernel, before the call: where collective v
 * is written (cg_op_where), for the runtime's watchdog. Nothing for any
 * other value, nor for a rider (its carrier's call moves it). */
void cg_emit_collective_site(CG *g, const Value *v) {
  if (ir_op(v->op)->cls != OC_COLLECTIVE || v->carrier)
    return;
  char what[512];
  cg_op_where(v, what, sizeof what);
  LLVMValueRef args[2] = {g->ctx_arg, cg_cstr(g, what)};
  cg_call(g, "gslrt_collective_at", g->t_void, 2, args);
}
