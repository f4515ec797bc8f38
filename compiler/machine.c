/* machine.c — the machine description the cost search (autoshard.c)
 * prices a plan with: the rates of one device and of the links between
 * devices.
 *
 * Format (gslc --machine FILE): one setting a line, `key = value`, '#'
 * starting a comment; every key optional, each at most once:
 *   gemm_f32_gflops = 112     matrix products with f32 operands, GFLOP/s
 *   gemm_bf16_gflops = 225    the same with bf16 operands
 *   memory_gbs = 6            every other op: GB/s of the bytes it writes
 *                             (a reduce: that it reads)
 *   rng_gbs = 0.1             random draws (an input or a dropout mask
 *                             drawn each step): GB/s of the draws written
 *   link_gbs = 2.2            bytes a device receives in a collective, GB/s
 *   link_gbs.AXIS = 2.2       the same over mesh axis AXIS (a group of
 *                             several axes: the slowest of them)
 *   latency_us = 0.4          the fixed cost of each collective, microseconds
 * Numbers are positive decimals. The defaults are the reference machine's
 * (2 cores, one rank a core, MPICH over shared memory), as `ONLY=machine
 * make bench` (bench/machine.c) measured them on 2026-11-26: 112.5 and
 * 224.8 GFLOP/s through libgslrt's kernels at 512^3, 5.97 GB/s written,
 * 2.24 GB/s received in a 4 MiB all-reduce, 0.4 us for one of a float;
 * and 0.099 GB/s of normal draws (40 ns a float: ten Philox rounds and
 * Box-Muller in double) the same day later. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

void machine_default(Machine *m) {
  memset(m, 0, sizeof *m);
  m->gemm_flops[DT_F32] = 112e9;
  m->gemm_flops[DT_BF16] = 225e9;
  m->gemm_flops[DT_I32] = 112e9;
  m->mem_bytes_per_s = 6e9;
  m->rng_bytes_per_s = 0.1e9;
  m->link_bytes_per_s = 2.2e9;
  m->latency_s = 0.4e-6;
}

double machine_op_seconds(const Machine *m, const Program *p, const Value *v, const Shape *local,
                          const Shape *const *args) {
  if (v->op == OP_EINSUM) { /* 2 FLOP for each point of its letters' (local) space */
    char seen[2 * GSL_MAX_RANK + 1] = {0};
    double flops = 2;
    int n = 0;
    for (int k = 0; k < v->ein.nin; k++)
      for (int d = 0; v->ein.in[k][d]; d++)
        if (!strchr(seen, v->ein.in[k][d])) {
          seen[n++] = v->ein.in[k][d];
          flops *= (double)args[k]->d[d];
        }
    return flops / m->gemm_flops[v->args[0]->dtype];
  }
  const OpInfo *oi = ir_op(v->op);
  double bytes = (double)dtype_size(v->dtype) * (double)shape_elems(local);
  if (v->op == OP_RNG)
    return bytes / m->rng_bytes_per_s;
  if (v->op == OP_INPUT) { /* each step: its tile drawn (without --input), else read or filled */
    InitKind k = p->tensors[v->tensor].init;
    return bytes / (k == INIT_NORMAL || k == INIT_UNIFORM ? m->rng_bytes_per_s : m->mem_bytes_per_s);
  }
  if (oi->cls == OC_SOURCE || oi->cls == OC_ANNOTATION || (oi->flags & (OF_INDEX_MAP | OF_SPMD)) ||
      v->op == OP_RESHAPE)
    return 0; /* fused into their users, no work, or communication */
  double in = (double)dtype_size(v->args[0]->dtype) * (double)shape_elems(args[0]);
  if ((v->op == OP_REDUCE || v->op == OP_CUMSUM) && in > bytes) /* a reduction reads more than it writes */
    bytes = in;
  if (v->op == OP_SCATTER_ADD) /* it reads its source rows and adds them */
    bytes += in;
  return bytes / m->mem_bytes_per_s;
}

double machine_link(const Machine *m, int axis) {
  return m->axis_link[axis] > 0 ? m->axis_link[axis] : m->link_bytes_per_s;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
    *--e = '\0';
  return s;
}

bool machine_load(Machine *m, const char *path, const char *const *axes, int naxes) {
  FILE *f = fopen(path, "r");
  if (!f) {
    diag_fatal("--machine %s: %s", path, strerror(errno));
    return false;
  }
  static const char *const keys[] = {"gemm_f32_gflops", "gemm_bf16_gflops", "memory_gbs", "link_gbs", "latency_us",
                                     "rng_gbs"};
  bool seen[8 + GSL_MAX_AXES] = {false};
  char line[512];
  int lineno = 0;
  bool ok = true;
  while (ok && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char *s = trim(line);
    if (!*s)
      continue;
    char *eq = strchr(s, '=');
    if (!eq) {
      diag_fatal("--machine %s:%d: expected 'key = value', got '%s'", path, lineno, s);
      ok = false;
      break;
    }
    *eq = '\0';
    char *key = trim(s), *val = trim(eq + 1), *end;
    errno = 0;
    double x = strtod(val, &end);
    if (!*val || *end || errno || !(x > 0) || x > 1e15) {
      diag_fatal("--machine %s:%d: %s takes a positive number, got '%s'", path, lineno, key, val);
      ok = false;
      break;
    }
    int k = -1;
    for (int i = 0; i < 6; i++)
      if (!strcmp(key, keys[i]))
        k = i;
    if (k < 0 && !strncmp(key, "link_gbs.", 9))
      for (int a = 0; a < naxes; a++)
        if (!strcmp(key + 9, axes[a]))
          k = 8 + a;
    if (k < 0) {
      diag_fatal("--machine %s:%d: unknown key '%s' (gemm_f32_gflops, gemm_bf16_gflops, memory_gbs, rng_gbs, "
                 "link_gbs, link_gbs.AXIS for an axis of the mesh, latency_us)", path, lineno, key);
      ok = false;
      break;
    }
    if (seen[k]) {
      diag_fatal("--machine %s:%d: %s is set twice", path, lineno, key);
      ok = false;
      break;
    }
    seen[k] = true;
    switch (k) {
    case 0: m->gemm_flops[DT_F32] = m->gemm_flops[DT_I32] = x * 1e9; break;
    case 1: m->gemm_flops[DT_BF16] = x * 1e9; break;
    case 2: m->mem_bytes_per_s = x * 1e9; break;
    case 3: m->link_bytes_per_s = x * 1e9; break;
    case 4: m->latency_s = x * 1e-6; break;
    case 5: m->rng_bytes_per_s = x * 1e9; break;
    default: m->axis_link[k - 8] = x * 1e9; break;
    }
  }
  if (ok && ferror(f)) {
    diag_fatal("--machine %s: %s", path, strerror(errno));
    ok = false;
  }
  fclose(f);
  return ok;
}
