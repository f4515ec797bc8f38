/* cg_math.c — scalar math in LLVM IR: conversions, the unary functions of
 * unary.def and the binary ones of binary.def, on f32 and i32, and the
 * rounds of the counter-based generator (dropout's draws, made inline).
 *
 * exp (and so tanh, sigmoid, gelu) is a polynomial that vectorizes, since
 * llvm.exp on vectors becomes one libm call per lane on x86. i32 division
 * never traps (x / 0 is 0, INT_MIN / -1 wraps); f32 to i32 saturates. */
#include <llvm-c/Core.h>

#include "codegen.h"

LLVMValueRef cg_convert(CG *g, LLVMValueRef x, DType from, DType to) {
  if (from == to)
    return x;
  if (dtype_is_float(to)) { /* bf16 is held as an f32 of bf16's precision */
    if (from == DT_I32)
      x = LLVMBuildSIToFP(g->b, x, g->t_f32, "");
    return to == DT_BF16 ? cg_round_bf16(g, x) : x;
  }
  /* truncation toward zero, saturating, NaN to 0: never poison */
  LLVMValueRef a[1] = {x};
  return cg_call(g, "llvm.fptosi.sat.i32.f32", g->t_i32, 1, a);
}

LLVMValueRef cg_bool_to(CG *g, LLVMValueRef c, DType dt) {
  return dt == DT_I32 ? LLVMBuildZExt(g->b, c, g->t_i32, "") : LLVMBuildUIToFP(g->b, c, g->t_f32, ""); /* 0, 1: bf16 too */
}

/* exp in f32 that vectorizes (llvm.exp on vectors becomes one libm call
 * per lane on x86): Cephes' expf. n = round(x log2 e), r = x - n ln 2 in two
 * parts, exp(r) by a degree-7 polynomial, times 2^n built from exponent bits
 * as 2^(n/2) 2^(n - n/2) so results near overflow and subnormal ones are
 * right. x is clamped to [-104, 89] first (beyond, the result is 0 or inf
 * anyway); NaN passes through. About 1 ulp. */
static LLVMValueRef exp_f32(CG *g, LLVMValueRef x) {
  static const double p[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                             4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  LLVMBuilderRef b = g->b;
  LLVMValueRef xc = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, cg_cf32(g, -104.0), ""), x, cg_cf32(g, -104.0), "");
  xc = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, xc, cg_cf32(g, 89.0), ""), xc, cg_cf32(g, 89.0), "");
  LLVMValueRef fx = cg_call1(g, "llvm.floor.f32",
                          LLVMBuildFAdd(b, LLVMBuildFMul(b, xc, cg_cf32(g, 1.44269504088896341), ""), cg_cf32(g, 0.5), ""));
  LLVMValueRef r = LLVMBuildFSub(b, xc, LLVMBuildFMul(b, fx, cg_cf32(g, 0.693359375), ""), "");
  r = LLVMBuildFSub(b, r, LLVMBuildFMul(b, fx, cg_cf32(g, -2.12194440e-4), ""), "");
  LLVMValueRef y = cg_cf32(g, p[0]);
  for (size_t i = 1; i < sizeof p / sizeof *p; i++)
    y = LLVMBuildFAdd(b, LLVMBuildFMul(b, y, r, ""), cg_cf32(g, p[i]), "");
  y = LLVMBuildFMul(b, y, LLVMBuildFMul(b, r, r, ""), "");
  y = LLVMBuildFAdd(b, LLVMBuildFAdd(b, y, r, ""), cg_cf32(g, 1.0), "");
  LLVMValueRef n = LLVMBuildFPToSI(b, fx, g->t_i32, "");
  LLVMValueRef n1 = LLVMBuildAShr(b, n, cg_ci32(g, 1), "");
  LLVMValueRef n2 = LLVMBuildSub(b, n, n1, "");
  LLVMValueRef s1 = LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildAdd(b, n1, cg_ci32(g, 127), ""), cg_ci32(g, 23), ""), g->t_f32, "");
  LLVMValueRef s2 = LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildAdd(b, n2, cg_ci32(g, 127), ""), cg_ci32(g, 23), ""), g->t_f32, "");
  y = LLVMBuildFMul(b, LLVMBuildFMul(b, y, s1, ""), s2, "");
  return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, x, x, ""), x, y, "");
}

/* tanh in f32: the odd rational minimax p(x) / q(x) of degrees 13 and 6
 * that Eigen's ptanh_float, XLA's CPU backend and ONNX Runtime's MLAS use,
 * on x clamped to +-7.9053111 (where it reaches +-1 in f32), and x itself
 * below |x| = 0.0004 (where x^3 / 3 is under half an ulp of x). Eleven
 * multiply-adds (llvm.fmuladd: fused where the host has FMA) and one
 * division, all lanes alike, so it vectorizes; within 2.9e-7 relative of
 * tanh fused, 3.9e-7 not (about 5 and 7 ulp; over every 7th f32 of [-11,
 * 11] against double tanh), |result| <= 1, NaN passes through. The
 * Taylor-or-exp form before it cost three times the instructions, and a
 * Transformer's GELU backward recomputes tanh for every activation. */
static LLVMValueRef tanh_f32(CG *g, LLVMValueRef x) {
  static const double p[] = {-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
                             1.48572235717979e-05,  6.37261928875436e-04, 4.89352455891786e-03};
  static const double q[] = {1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03};
  const double lim = 7.90531110763549805;
  LLVMBuilderRef b = g->b;
  LLVMValueRef c = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, cg_cf32(g, lim), ""), cg_cf32(g, lim), x, "");
  c = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, c, cg_cf32(g, -lim), ""), cg_cf32(g, -lim), c, "");
  LLVMValueRef c2 = LLVMBuildFMul(b, c, c, "");
  LLVMValueRef num = cg_cf32(g, p[0]), den = cg_cf32(g, q[0]);
  for (size_t i = 1; i < sizeof p / sizeof *p; i++)
    num = cg_call(g, "llvm.fmuladd.f32", g->t_f32, 3, (LLVMValueRef[]){num, c2, cg_cf32(g, p[i])});
  for (size_t i = 1; i < sizeof q / sizeof *q; i++)
    den = cg_call(g, "llvm.fmuladd.f32", g->t_f32, 3, (LLVMValueRef[]){den, c2, cg_cf32(g, q[i])});
  LLVMValueRef t = LLVMBuildFDiv(b, LLVMBuildFMul(b, num, c, ""), den, "");
  LLVMValueRef tiny = LLVMBuildFCmp(b, LLVMRealOLT, cg_call1(g, "llvm.fabs.f32", x), cg_cf32(g, 0.0004), "");
  return LLVMBuildSelect(b, tiny, x, t, "");
}

/* 1 / (1 + exp(-x)) */
static LLVMValueRef sigmoid_f32(CG *g, LLVMValueRef x) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef e = exp_f32(g, LLVMBuildFNeg(b, x, ""));
  return LLVMBuildFDiv(b, cg_cf32(g, 1.0), LLVMBuildFAdd(b, cg_cf32(g, 1.0), e, ""), "");
}

static LLVMValueRef unary_f32(CG *g, int fn, LLVMValueRef x) {
  LLVMBuilderRef b = g->b;
  switch (fn) {
  case UF_NEG: return LLVMBuildFNeg(b, x, "");
  case UF_EXP: return exp_f32(g, x);
  case UF_LOG: return cg_call1(g, "llvm.log.f32", x);
  case UF_SQRT: return cg_call1(g, "llvm.sqrt.f32", x);
  case UF_RSQRT: return LLVMBuildFDiv(b, cg_cf32(g, 1.0), cg_call1(g, "llvm.sqrt.f32", x), "");
  case UF_TANH: return tanh_f32(g, x);
  case UF_SIGMOID: return sigmoid_f32(g, x);
  case UF_RELU:
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, cg_cf32(g, 0.0), ""), x, cg_cf32(g, 0.0), "");
  case UF_GELU: {
    /* 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
     * the tanh approximation without its cancellation for negative x */
    LLVMValueRef x3 = LLVMBuildFMul(b, LLVMBuildFMul(b, x, x, ""), x, "");
    LLVMValueRef in = LLVMBuildFAdd(b, x, LLVMBuildFMul(b, x3, cg_cf32(g, 0.044715), ""), "");
    LLVMValueRef u2 = LLVMBuildFMul(b, in, cg_cf32(g, 2.0 * 0.79788456080286535588 /* sqrt(2 / pi) */), "");
    return LLVMBuildFMul(b, x, sigmoid_f32(g, u2), "");
  }
  case UF_ABS: return cg_call1(g, "llvm.fabs.f32", x);
  case UF_COS: return cg_call1(g, "llvm.cos.f32", x); /* libm's cosf, as a C reference calls it */
  case UF_SIN: return cg_call1(g, "llvm.sin.f32", x);
  default: die("unknown unary function %d", fn);
  }
}

LLVMValueRef cg_unary(CG *g, int fn, LLVMValueRef x, DType dt) {
  LLVMBuilderRef b = g->b;
  if (dtype_is_float(dt))
    return unary_f32(g, fn, x);
  if (!unary_int_ok(fn)) /* unary.def: defined on i32 only through f32 */
    return cg_convert(g, unary_f32(g, fn, cg_convert(g, x, DT_I32, DT_F32)), DT_F32, DT_I32);
  switch (fn) {
  case UF_NEG: return LLVMBuildSub(b, cg_ci32(g, 0), x, "");
  case UF_ABS: {
    LLVMValueRef neg = LLVMBuildICmp(b, LLVMIntSLT, x, cg_ci32(g, 0), "");
    return LLVMBuildSelect(b, neg, LLVMBuildSub(b, cg_ci32(g, 0), x, ""), x, "");
  }
  case UF_RELU:
    return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, x, cg_ci32(g, 0), ""), x, cg_ci32(g, 0), "");
  default:
    die("unary.def says %s is defined on i32, but codegen has no i32 form", unary_fn_name(fn));
  }
}

/* Integer division truncating toward zero; x / 0 is 0 and INT_MIN / -1
 * wraps, so neither traps. */
static LLVMValueRef sdiv_safe(CG *g, LLVMValueRef x, LLVMValueRef y) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef zero = LLVMBuildICmp(b, LLVMIntEQ, y, cg_ci32(g, 0), "");
  LLVMValueRef m1 = LLVMBuildICmp(b, LLVMIntEQ, y, cg_ci32(g, -1), "");
  LLVMValueRef d = LLVMBuildSelect(b, LLVMBuildOr(b, zero, m1, ""), cg_ci32(g, 1), y, "");
  LLVMValueRef q = LLVMBuildSDiv(b, x, d, "");
  q = LLVMBuildSelect(b, m1, LLVMBuildSub(b, cg_ci32(g, 0), x, ""), q, "");
  return LLVMBuildSelect(b, zero, cg_ci32(g, 0), q, "");
}

LLVMValueRef cg_binary(CG *g, int fn, LLVMValueRef x, LLVMValueRef y, DType in, DType out) {
  static const LLVMRealPredicate fcmp[BF__COUNT] = {[BF_LT] = LLVMRealOLT, [BF_LE] = LLVMRealOLE,
                                                    [BF_GT] = LLVMRealOGT, [BF_GE] = LLVMRealOGE,
                                                    [BF_EQ] = LLVMRealOEQ, [BF_NE] = LLVMRealUNE};
  static const LLVMIntPredicate icmp[BF__COUNT] = {[BF_LT] = LLVMIntSLT, [BF_LE] = LLVMIntSLE,
                                                   [BF_GT] = LLVMIntSGT, [BF_GE] = LLVMIntSGE,
                                                   [BF_EQ] = LLVMIntEQ,  [BF_NE] = LLVMIntNE};
  LLVMBuilderRef b = g->b;
  if (binary_is_compare(fn)) { /* binary.def: yields 1 or 0 */
    if (!fcmp[fn] || !icmp[fn])
      die("comparison %s has no predicate", binary_fn_name(fn));
    LLVMValueRef c = dtype_is_float(in) ? LLVMBuildFCmp(b, fcmp[fn], x, y, "") : LLVMBuildICmp(b, icmp[fn], x, y, "");
    return cg_bool_to(g, c, out);
  }
  x = cg_convert(g, x, in, out);
  y = cg_convert(g, y, in, out);
  if (dtype_is_float(out)) {
    switch (fn) {
    case BF_ADD: return LLVMBuildFAdd(b, x, y, "");
    case BF_SUB: return LLVMBuildFSub(b, x, y, "");
    case BF_MUL: return LLVMBuildFMul(b, x, y, "");
    case BF_DIV: return LLVMBuildFDiv(b, x, y, "");
    case BF_POW: return cg_call2(g, "llvm.pow.f32", x, y);
    case BF_MAX: return cg_call2(g, "llvm.maxnum.f32", x, y);
    case BF_MIN: return cg_call2(g, "llvm.minnum.f32", x, y);
    default: break;
    }
  } else {
    switch (fn) {
    case BF_ADD: return LLVMBuildAdd(b, x, y, "");
    case BF_SUB: return LLVMBuildSub(b, x, y, "");
    case BF_MUL: return LLVMBuildMul(b, x, y, "");
    case BF_DIV: return sdiv_safe(g, x, y);
    case BF_POW: {
      LLVMValueRef r = cg_call2(g, "llvm.pow.f32", cg_convert(g, x, DT_I32, DT_F32), cg_convert(g, y, DT_I32, DT_F32));
      return cg_convert(g, r, DT_F32, DT_I32);
    }
    case BF_MAX: return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, x, y, ""), x, y, "");
    case BF_MIN: return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, x, y, ""), x, y, "");
    default: break;
    }
  }
  die("unknown binary function %d", fn);
}

/* Philox-4x32-10's ten rounds, as runtime/rng.c runs them: words 0 and 2
 * multiplied into 64-bit products (a zero-extended i32 by a 32-bit
 * constant, which x86 vectorizes as vpmuludq), the key bumped by the Weyl
 * constants between rounds; word 0 of the result. */
LLVMValueRef cg_philox0(CG *g, LLVMValueRef const *c, LLVMValueRef const *k) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3], k0 = k[0], k1 = k[1];
  LLVMValueRef m0 = cg_ci64(g, 0xD2511F53), m1 = cg_ci64(g, 0xCD9E8D57), hi = cg_ci64(g, 32);
  for (int r = 0; r < 10; r++) {
    LLVMValueRef p0 = LLVMBuildNUWMul(b, LLVMBuildZExt(b, x0, g->t_i64, ""), m0, "");
    LLVMValueRef p1 = LLVMBuildNUWMul(b, LLVMBuildZExt(b, x2, g->t_i64, ""), m1, "");
    LLVMValueRef h0 = LLVMBuildTrunc(b, LLVMBuildLShr(b, p0, hi, ""), g->t_i32, "");
    LLVMValueRef h1 = LLVMBuildTrunc(b, LLVMBuildLShr(b, p1, hi, ""), g->t_i32, "");
    LLVMValueRef y0 = LLVMBuildXor(b, LLVMBuildXor(b, h1, x1, ""), k0, "");
    LLVMValueRef y2 = LLVMBuildXor(b, LLVMBuildXor(b, h0, x3, ""), k1, "");
    x1 = LLVMBuildTrunc(b, p1, g->t_i32, "");
    x3 = LLVMBuildTrunc(b, p0, g->t_i32, "");
    x0 = y0, x2 = y2;
    k0 = LLVMBuildAdd(b, k0, cg_ci32(g, (int32_t)0x9E3779B9u), "");
    k1 = LLVMBuildAdd(b, k1, cg_ci32(g, (int32_t)0xBB67AE85u), "");
  }
  return x0;
}
