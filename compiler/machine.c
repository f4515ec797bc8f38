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
 *   rng_gbs = 0.1             random draws (an input drawn each step, a
 *                             uniform_like): GB/s of the draws written
 *                             (a dropout draws inline, in its loop: priced
 *                             as the elementwise op it is)
 *   link_gbs = 2.2            bytes a device receives in a collective, GB/s
 *   link_gbs.AXIS = 2.2       the same over mesh axis AXIS (a group of
 *                             several axes: the slowest of them)
 *   latency_us = 0.4          the fixed cost of each collective, microseconds
 *   gemm_pinned_gflops = 100  matrix products of gslc --same-bits (runtime/
 *                             pinned.c: chains of FMAs), either dtype
 * Numbers are positive decimals, each within its setting's range (the
 * table `settings` below: 1e-3 to 1e7 GFLOP/s, 1e-6 to 1e6 GB/s and
 * microseconds), so that every price the search makes stays a number the
 * solver handles. Lines may be of any length; the file at most 1 MiB
 * (a device or an endless pipe is refused, not read forever), and what a
 * message quotes of it is escaped. The defaults are the reference machine's
 * (2 cores, one rank a core, MPICH over shared memory), as `ONLY=machine
 * make bench` (bench/machine.c) measured them on 2026-11-26: 112.5 and
 * 224.8 GFLOP/s through libgslrt's kernels at 512^3, 5.97 GB/s written,
 * 2.24 GB/s received in a 4 MiB all-reduce, 0.4 us for one of a float;
 * and 0.099 GB/s of normal draws (40 ns a float: ten Philox rounds and
 * Box-Muller in double) the same day later. The pinned products' rate is
 * the f32 one times what bench/gemm_peak.c measured of them against
 * libgslrt's at 512^3 on 2026-11-26 (178 against 199 GFLOP/s f32, 175
 * against 398 bf16, both widened to f32 FMAs): about 100. */
#include <errno.h>
#include <math.h>
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
  m->pinned_flops = 100e9;
}

double machine_op_seconds(const Machine *m, const Program *p, const Value *v, const Shape *local,
                          const Shape *const *args) {
  if (v->op == OP_EINSUM) /* 2 FLOP for each point of its letters' (local) space */
    return ein_flops(&v->ein, args) / (p->same_bits ? m->pinned_flops : m->gemm_flops[v->args[0]->dtype]);
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
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
    *--e = '\0';
  return s;
}

/* What a message quotes of the file: at most 60 bytes, every byte that is
 * not printable ASCII as \xNN, so no file echoes raw bytes to a terminal. */
static const char *quoted(const char *s, char *buf, size_t cap) {
  size_t n = 0;
  for (int k = 0; *s && n + 5 < cap; s++, k++) {
    if (k == 60) {
      memcpy(buf + n, "...", 4);
      return buf;
    }
    unsigned char c = (unsigned char)*s;
    n += (size_t)(c >= 0x20 && c < 0x7f ? snprintf(buf + n, cap - n, "%c", c) : snprintf(buf + n, cap - n, "\\x%02x", c));
  }
  buf[n] = '\0';
  return buf;
}

/* A machine file's settings: each key, its place in machine_load's switch,
 * the range its value must fall in (wide enough for any machine, narrow
 * enough that every price stays a number the solver handles) and its
 * unit. */
static const struct {
  const char *key;
  double lo, hi;
  const char *unit;
} settings[] = {
    {"gemm_f32_gflops", 1e-3, 1e7, "GFLOP/s"}, {"gemm_bf16_gflops", 1e-3, 1e7, "GFLOP/s"},
    {"memory_gbs", 1e-6, 1e6, "GB/s"},        {"link_gbs", 1e-6, 1e6, "GB/s"},
    {"latency_us", 1e-6, 1e6, "microseconds"}, {"rng_gbs", 1e-6, 1e6, "GB/s"},
    {"gemm_pinned_gflops", 1e-3, 1e7, "GFLOP/s"},
};
enum { NSETTINGS = sizeof settings / sizeof *settings };

/* Reads all of f, NUL-terminated, refusing more than MACHINE_MAX_BYTES (a
 * device or an endless pipe is not a machine file); NULL after reporting. */
#define MACHINE_MAX_BYTES (1 << 20)
static char *read_all(FILE *f, const char *path, size_t *len, Diag *d) {
  size_t cap = 4096, n = 0;
  char *buf = xmalloc(cap);
  for (;;) {
    if (n == cap - 1)
      buf = xrealloc(buf, cap *= 2);
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    n += got;
    if (n > MACHINE_MAX_BYTES) {
      diag_fatal(d, "--machine %s: longer than %d bytes: a machine file is a few lines of 'key = value'", path,
                 MACHINE_MAX_BYTES);
      free(buf);
      return NULL;
    }
    if (got == 0)
      break;
  }
  if (ferror(f)) {
    diag_fatal(d, "--machine %s: %s", path, strerror(errno ? errno : EIO));
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

bool machine_load(Machine *m, const char *path, const char *const *axes, int naxes, Diag *d) {
  FILE *f = fopen(path, "r");
  if (!f) {
    diag_fatal(d, "--machine %s: %s", path, strerror(errno));
    return false;
  }
  size_t len;
  char *text = read_all(f, path, &len, d);
  fclose(f);
  if (!text)
    return false;
  bool seen[NSETTINGS + GSL_MAX_AXES] = {false};
  char q[320];
  bool ok = true;
  int lineno = 0;
  for (char *line = text, *next; ok && line < text + len; line = next) {
    lineno++;
    char *nl = memchr(line, '\n', (size_t)(text + len - line));
    next = nl ? nl + 1 : text + len;
    if (nl)
      *nl = '\0';
    if (strlen(line) != (size_t)((nl ? nl : text + len) - line)) {
      diag_fatal(d, "--machine %s:%d: a NUL byte: a machine file is text", path, lineno);
      ok = false;
      break;
    }
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char *s = trim(line);
    if (!*s)
      continue;
    char *eq = strchr(s, '=');
    if (!eq) {
      diag_fatal(d, "--machine %s:%d: expected 'key = value', got '%s'", path, lineno, quoted(s, q, sizeof q));
      ok = false;
      break;
    }
    *eq = '\0';
    char *key = trim(s), *val = trim(eq + 1), *end;
    int k = -1;
    for (int i = 0; i < NSETTINGS; i++)
      if (!strcmp(key, settings[i].key))
        k = i;
    if (k < 0 && !strncmp(key, "link_gbs.", 9))
      for (int a = 0; a < naxes; a++)
        if (!strcmp(key + 9, axes[a]))
          k = NSETTINGS + a;
    if (k < 0) {
      diag_fatal(d, "--machine %s:%d: unknown key '%s' (gemm_f32_gflops, gemm_bf16_gflops, gemm_pinned_gflops, "
                 "memory_gbs, rng_gbs, link_gbs, link_gbs.AXIS for an axis of the mesh, latency_us)", path, lineno,
                 quoted(key, q, sizeof q));
      ok = false;
      break;
    }
    int r = k < NSETTINGS ? k : 3; /* link_gbs.AXIS: link_gbs's range */
    errno = 0;
    double x = strtod(val, &end);
    if (!*val || *end || !isfinite(x) || x <= 0) {
      diag_fatal(d, "--machine %s:%d: %s takes a positive number (%s), got '%s'", path, lineno, key, settings[r].unit,
                 quoted(val, q, sizeof q));
      ok = false;
      break;
    }
    if (x < settings[r].lo || x > settings[r].hi) {
      diag_fatal(d, "--machine %s:%d: %s = %s is out of range: it takes %g to %g (%s)", path, lineno, key,
                 quoted(val, q, sizeof q), settings[r].lo, settings[r].hi, settings[r].unit);
      ok = false;
      break;
    }
    if (seen[k]) {
      diag_fatal(d, "--machine %s:%d: %s is set twice", path, lineno, key);
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
    case 6: m->pinned_flops = x * 1e9; break;
    default: m->axis_link[k - NSETTINGS] = x * 1e9; break;
    }
  }
  free(text);
  return ok;
}
