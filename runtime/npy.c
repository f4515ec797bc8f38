/* npy.c — reading and writing NumPy .npy files (format versions 1.0, 2.0
 * and 3.0, as numpy/lib/format.py defines them).
 *
 * A file is the magic "\x93NUMPY", a major and minor version byte, the
 * header length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), then
 * the header: a Python dict literal with exactly the keys 'descr',
 * 'fortran_order' and 'shape', padded with spaces and ending in '\n'; the
 * data follows. Only '<f4' (f32) and '<i4' (i32) in C order are accepted.
 * The header is read into a bounded buffer and parsed by a small recursive-
 * free scanner that checks every byte it consumes, so garbage yields a
 * message, never a crash (text of the header that a message quotes is
 * escaped, so it stays one line); the file must hold all the data its
 * shape needs.
 *
 * Tiles are read with pread, one call per contiguous run: the trailing
 * dimensions a tile covers fully merge into one run.
 *
 * bf16 (issue 19) never reaches the disk: numpy has no bf16, so a bf16
 * array is written as float32, each element widened exactly (the header
 * says '<f4'), and a float32 file is read into a bf16 tile by rounding each
 * element to nearest, ties to even (the runs go through a small f32 buffer
 * on the stack). A value a bf16 tensor held reads back as itself.
 *
 * Only regular files are read: a directory, a FIFO or a device is refused
 * by name before it is opened (fopen of a directory succeeds and the first
 * read fails with a bare EISDIR).
 *
 * Writing produces what numpy.save produces (version 1.0 unless the header
 * needs 2.0): the header padded so that magic + version + length + header
 * is a multiple of 64 bytes. The file is written to a new temporary beside
 * PATH (PATH.tmp, or PATH.PID.N.tmp if that exists; created exclusively, so
 * no existing file is touched) and renamed over PATH only when every write and the close
 * succeeded; gslrt_npy_write_temp leaves the rename to the caller, which
 * can then commit several files together or remove them all. A target is
 * checked first (gslrt_npy_check_target): it must not exist or be a
 * regular file, and its directory must take a new file. The host is
 * assumed little-endian (x86-64, AArch64).
 *
 * This file depends on gslrt.h only (not MPI), so tools link it alone. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "gslrt.h"
#include "seterr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAX_HEADER (1 << 20) /* longest header accepted, in bytes */
#define NPY_MAX_DIMS (GSLRT_MAX_RANK + 1)

/* The header scanner: a cursor over the NUL-terminated header text. */
typedef struct scan {
  const char *p; /* next byte */
} scan;

static void skip_space(scan *s) {
  while (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')
    s->p++;
}

static int eat(scan *s, char c) {
  skip_space(s);
  if (*s->p != c)
    return 0;
  s->p++;
  return 1;
}

/* A quoted string (single or double quotes, no escapes) into buf. */
static int scan_string(scan *s, char *buf, size_t len) {
  skip_space(s);
  char q = *s->p;
  if (q != '\'' && q != '"')
    return 0;
  const char *start = ++s->p;
  while (*s->p && *s->p != q)
    s->p++;
  if (*s->p != q || (size_t)(s->p - start) >= len)
    return 0;
  memcpy(buf, start, (size_t)(s->p - start));
  buf[s->p - start] = 0;
  s->p++;
  return 1;
}

static int scan_word(scan *s, const char *w) {
  skip_space(s);
  size_t n = strlen(w);
  if (strncmp(s->p, w, n) != 0)
    return 0;
  s->p += n;
  return 1;
}

/* A tuple of non-negative integers: (), (3,), (2, 3) or (2, 3,). */
static int scan_shape(scan *s, int64_t *shape, int32_t *rank) {
  *rank = 0;
  if (!eat(s, '('))
    return 0;
  for (;;) {
    skip_space(s);
    if (*s->p == ')')
      break;
    if (*s->p < '0' || *s->p > '9' || *rank >= NPY_MAX_DIMS)
      return 0;
    int64_t v = 0;
    while (*s->p >= '0' && *s->p <= '9') {
      if (v > (INT64_MAX - 9) / 10)
        return 0;
      v = v * 10 + (*s->p++ - '0');
    }
    if (*s->p == 'L')
      s->p++;
    shape[(*rank)++] = v;
    skip_space(s);
    if (*s->p == ',')
      s->p++;
    else if (*s->p != ')')
      return 0;
  }
  s->p++;
  return 1;
}

/* Text taken from a header, for a message: bytes outside printable ASCII
 * written as \xNN, so that a message stays one line whatever the file holds. */
static const char *shown(char *buf, size_t len, const char *s) {
  size_t n = 0;
  for (; *s && n + 5 < len; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c < 0x7f)
      buf[n++] = (char)c;
    else
      n += (size_t)snprintf(buf + n, len - n, "\\x%02x", c);
  }
  buf[n] = 0;
  return buf;
}

static void shape_str(char *buf, size_t len, int32_t rank, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, len, "[");
  for (int32_t i = 0; i < rank && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (n < len)
    snprintf(buf + n, len - n, "]");
}

/* What a file that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode))
    return "is a directory";
  if (S_ISLNK(mode))
    return "is a symbolic link";
  if (S_ISCHR(mode))
    return "is a character device";
  if (S_ISBLK(mode))
    return "is a block device";
  if (S_ISFIFO(mode))
    return "is a FIFO";
  if (S_ISSOCK(mode))
    return "is a socket";
  return "is not a regular file";
}

/* Creates a new empty file beside path, exclusively (no existing file is
 * opened): PATH.tmp, or PATH.PID.N.tmp if that exists. Its descriptor, and
 * its name in *tmp (malloc'd); -1 with errno and the last name tried in
 * *tmp (malloc'd, or NULL without memory). */
static int create_temp(const char *path, char **tmp) {
  static unsigned serial; /* distinguishes the temporaries of one process */
  size_t len = strlen(path) + 48;
  char *name = malloc(len);
  int fd = -1;
  *tmp = name;
  if (!name)
    return -1;
  for (int tries = 0; tries < 100 && fd < 0; tries++) {
    if (tries == 0)
      snprintf(name, len, "%s.tmp", path);
    else
      snprintf(name, len, "%s.%ld.%u.tmp", path, (long)getpid(), serial++);
    fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  return fd;
}

int gslrt_npy_check_target(const char *path, uint64_t *dev, uint64_t *ino, char *err, int errlen) {
  struct stat st;
  char *tmp = NULL;
  *dev = *ino = 0;
  if (!*path) {
    gslrt_seterr(err, errlen, "the file name is empty");
    return -1;
  }
  if (lstat(path, &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      gslrt_seterr(err, errlen, "%s %s, not a regular file (refusing to replace it)", path,
                   file_kind(st.st_mode));
      return -1;
    }
    *dev = (uint64_t)st.st_dev, *ino = (uint64_t)st.st_ino;
  } else if (errno != ENOENT && errno != ENOTDIR) {
    gslrt_seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
    return -1;
  }
  int fd = create_temp(path, &tmp);
  if (fd < 0) {
    gslrt_seterr(err, errlen, "cannot create %s: %s", tmp ? tmp : path, strerror(errno));
    free(tmp);
    return -1;
  }
  close(fd);
  unlink(tmp);
  free(tmp);
  return 0;
}

/* Parses the dict text of a header into h. */
static int parse_dict(const char *path, const char *text, gslrt_npy *h, char *err, int errlen) {
  scan s = {text};
  int have_descr = 0, have_fortran = 0, have_shape = 0, rc = -1;
  char key[32], descr[32], show[4 * 32 + 1];
  if (!eat(&s, '{')) {
    gslrt_seterr(err, errlen, "%s: malformed .npy header (expected '{')", path);
    goto fn_exit;
  }
  while (!eat(&s, '}')) {
    if (!scan_string(&s, key, sizeof key) || !eat(&s, ':')) {
      gslrt_seterr(err, errlen, "%s: malformed .npy header (expected a quoted key and ':')", path);
      goto fn_exit;
    }
    if (!strcmp(key, "descr") && !have_descr) {
      if (!scan_string(&s, descr, sizeof descr)) {
        gslrt_seterr(err, errlen, "%s: malformed .npy header (bad 'descr')", path);
        goto fn_exit;
      }
      have_descr = 1;
    } else if (!strcmp(key, "fortran_order") && !have_fortran) {
      if (scan_word(&s, "True")) {
        gslrt_seterr(err, errlen, "%s: fortran_order True is not supported (save the array in C order)",
               path);
        goto fn_exit;
      }
      if (!scan_word(&s, "False")) {
        gslrt_seterr(err, errlen, "%s: malformed .npy header (bad 'fortran_order')", path);
        goto fn_exit;
      }
      have_fortran = 1;
    } else if (!strcmp(key, "shape") && !have_shape) {
      if (!scan_shape(&s, h->shape, &h->rank)) {
        gslrt_seterr(err, errlen, "%s: malformed .npy header (bad 'shape', or more than %d dimensions)",
               path, NPY_MAX_DIMS);
        goto fn_exit;
      }
      have_shape = 1;
    } else {
      gslrt_seterr(err, errlen, "%s: malformed .npy header (unexpected or repeated key '%s')", path,
                   shown(show, sizeof show, key));
      goto fn_exit;
    }
    if (!eat(&s, ',')) {
      if (!eat(&s, '}')) {
        gslrt_seterr(err, errlen, "%s: malformed .npy header (expected ',' or '}')", path);
        goto fn_exit;
      }
      break;
    }
  }
  skip_space(&s);
  if (*s.p) {
    gslrt_seterr(err, errlen, "%s: malformed .npy header (text after the dict)", path);
    goto fn_exit;
  }
  if (!have_descr || !have_fortran || !have_shape) {
    gslrt_seterr(err, errlen, "%s: malformed .npy header (missing '%s')", path,
           !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    goto fn_exit;
  }
  if (!strcmp(descr, "<f4"))
    h->dtype = GSLRT_F32;
  else if (!strcmp(descr, "<i4"))
    h->dtype = GSLRT_I32;
  else {
    gslrt_seterr(err, errlen, "%s: unsupported dtype '%s' (expected '<f4' for f32, '<i4' for i32, or '<f4' "
                 "for bf16: numpy has no bf16, so a bf16 array is stored as float32, widened exactly, and "
                 "rounded to bf16 on reading)", path, shown(show, sizeof show, descr));
    goto fn_exit;
  }
  rc = 0;
fn_exit:
  return rc;
}

int gslrt_npy_read_header(const char *path, gslrt_npy *h, char *err, int errlen) {
  int rc = -1;
  FILE *f = NULL;
  char *text = NULL;
  unsigned char pre[12];
  struct stat st;
  memset(h, 0, sizeof *h);
  if (stat(path, &st) != 0) {
    gslrt_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
    goto fn_exit;
  }
  if (!S_ISREG(st.st_mode)) {
    gslrt_seterr(err, errlen, "cannot read %s: %s", path, file_kind(st.st_mode));
    goto fn_exit;
  }
  f = fopen(path, "rb");
  if (!f) {
    gslrt_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
    goto fn_exit;
  }
  if (fstat(fileno(f), &st) != 0) {
    gslrt_seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
    goto fn_exit;
  }
  if (!S_ISREG(st.st_mode)) {
    gslrt_seterr(err, errlen, "cannot read %s: %s", path, file_kind(st.st_mode));
    goto fn_exit;
  }
  if (fread(pre, 1, 10, f) != 10) {
    gslrt_seterr(err, errlen, "%s: not a .npy file (truncated before the header)", path);
    goto fn_exit;
  }
  if (memcmp(pre, "\x93NUMPY", 6) != 0) {
    gslrt_seterr(err, errlen, "%s: not a .npy file (bad magic)", path);
    goto fn_exit;
  }
  if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0) {
    gslrt_seterr(err, errlen, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
    goto fn_exit;
  }
  int64_t hlen, start;
  if (pre[6] == 1) {
    hlen = pre[8] | (int64_t)pre[9] << 8;
    start = 10;
  } else {
    if (fread(pre + 10, 1, 2, f) != 2) {
      gslrt_seterr(err, errlen, "%s: not a .npy file (truncated before the header)", path);
      goto fn_exit;
    }
    hlen = pre[8] | (int64_t)pre[9] << 8 | (int64_t)pre[10] << 16 | (int64_t)pre[11] << 24;
    start = 12;
  }
  if (hlen < 2 || hlen > NPY_MAX_HEADER) {
    gslrt_seterr(err, errlen, "%s: malformed .npy header (length %lld)", path, (long long)hlen);
    goto fn_exit;
  }
  text = malloc((size_t)hlen + 1);
  if (!text) {
    gslrt_seterr(err, errlen, "%s: out of memory for the header", path);
    goto fn_exit;
  }
  if (fread(text, 1, (size_t)hlen, f) != (size_t)hlen) {
    gslrt_seterr(err, errlen, "%s: truncated .npy header", path);
    goto fn_exit;
  }
  text[hlen] = 0;
  if (strlen(text) != (size_t)hlen) {
    gslrt_seterr(err, errlen, "%s: malformed .npy header (NUL byte)", path);
    goto fn_exit;
  }
  if (parse_dict(path, text, h, err, errlen) != 0)
    goto fn_exit;
  h->data_offset = start + hlen;
  int64_t n = 1;
  for (int32_t i = 0; i < h->rank; i++) {
    if (h->shape[i] != 0 && n > INT64_MAX / 4 / h->shape[i]) {
      gslrt_seterr(err, errlen, "%s: shape too large", path);
      goto fn_exit;
    }
    n *= h->shape[i];
  }
  if ((int64_t)st.st_size - h->data_offset < n * 4) {
    char sh[160];
    shape_str(sh, sizeof sh, h->rank, h->shape);
    gslrt_seterr(err, errlen, "%s: file has %lld bytes, but shape %s needs %lld bytes after the %lld-byte header",
           path, (long long)st.st_size, sh, (long long)(n * 4), (long long)h->data_offset);
    goto fn_exit;
  }
  rc = 0;
fn_exit:
  free(text);
  if (f)
    fclose(f);
  return rc;
}

/* The conversions of whole runs, eight elements at a time in GCC's vector
 * extensions (two SSE2 registers, or one AVX2 register where the compiler
 * may use it), the rest one by one; each element exactly as
 * gslrt_bf16_widen and gslrt_bf16_round give it. The bf16 products'
 * fallback (blas.c) widens every operand it multiplies: one element at a
 * time, that took 18 % of the lm's bf16 step on a CPU without bf16
 * products. */
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));

#define WIDEN_BODY                                                                                 \
  int64_t i = 0;                                                                                   \
  for (; i + 8 <= n; i += 8) {                                                                     \
    u16x8 h;                                                                                       \
    memcpy(&h, src + i, sizeof h);                                                                 \
    u32x8 u = __builtin_convertvector(h, u32x8) << 16;                                             \
    memcpy(dst + i, &u, sizeof u);                                                                 \
  }                                                                                                \
  for (; i < n; i++)                                                                               \
    dst[i] = gslrt_bf16_widen(src[i]);

/* a NaN (magnitude past infinity's bits) keeps its top half, quieted;
 * anything else rounds to nearest, ties to even (infinity stays) */
#define ROUND_BODY                                                                                 \
  int64_t i = 0;                                                                                   \
  for (; i + 8 <= n; i += 8) {                                                                     \
    u32x8 u;                                                                                       \
    memcpy(&u, src + i, sizeof u);                                                                 \
    i32x8 nan = (i32x8)((u & 0x7fffffffu) > 0x7f800000u);                                          \
    u32x8 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x0040u;                     \
    u16x8 h = __builtin_convertvector((q & (u32x8)nan) | (r & ~(u32x8)nan), u16x8);                \
    memcpy(dst + i, &h, sizeof h);                                                                 \
  }                                                                                                \
  for (; i < n; i++)                                                                               \
    dst[i] = gslrt_bf16_round(src[i]);

/* dst[j * ldd + i] = f(src[i * lds + j]) for i < rows, j < cols: a
 * matrix into its f32 transpose, f widening a bf16 (as gslrt_bf16_widen)
 * or copying an f32 (LOAD8(v, p) reads 8 elements of a row into the u32x8
 * v, ONE(x) gives one as a float), blocks of 8 x 8 transposed in
 * registers (unpack, shuffle, swap of halves, as _mm256_unpack*_ps,
 * _mm256_shuffle_ps and _mm256_permute2f128_ps do); the edges one by one.
 * Moves: exact. */
#define L8(...) ((i32x8){__VA_ARGS__})
#define TRANSPOSE_BODY(LOAD8, ONE)                                                                 \
  int64_t i = 0;                                                                                   \
  for (; i + 8 <= rows; i += 8) {                                                                  \
    int64_t j = 0;                                                                                 \
    for (; j + 8 <= cols; j += 8) {                                                                \
      u32x8 r[8], t[8], q[8];                                                                      \
      _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)                                          \
        LOAD8(r[k], src + (i + k) * lds + j);                                                      \
      _Pragma("GCC unroll 4") for (int k = 0; k < 8; k += 2) {                                                             \
        t[k] = __builtin_shuffle(r[k], r[k + 1], L8(0, 8, 1, 9, 4, 12, 5, 13));                    \
        t[k + 1] = __builtin_shuffle(r[k], r[k + 1], L8(2, 10, 3, 11, 6, 14, 7, 15));              \
      }                                                                                            \
      _Pragma("GCC unroll 2") for (int k = 0; k < 8; k += 4)                                       \
        _Pragma("GCC unroll 2") for (int l = 0; l < 2; l++) {                                                              \
          q[k + 2 * l] = __builtin_shuffle(t[k + l], t[k + l + 2], L8(0, 1, 8, 9, 4, 5, 12, 13));  \
          q[k + 2 * l + 1] = __builtin_shuffle(t[k + l], t[k + l + 2], L8(2, 3, 10, 11, 6, 7, 14, 15)); \
        }                                                                                          \
      _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {                                                                \
        u32x8 lo = __builtin_shuffle(q[k], q[k + 4], L8(0, 1, 2, 3, 8, 9, 10, 11));                \
        u32x8 hi = __builtin_shuffle(q[k], q[k + 4], L8(4, 5, 6, 7, 12, 13, 14, 15));              \
        memcpy(dst + (j + k) * ldd + i, &lo, sizeof lo);                                           \
        memcpy(dst + (j + k + 4) * ldd + i, &hi, sizeof hi);                                       \
      }                                                                                            \
    }                                                                                              \
    for (; j < cols; j++)                                                                          \
      for (int k = 0; k < 8; k++)                                                                  \
        dst[j * ldd + i + k] = ONE(src[(i + k) * lds + j]);                                        \
  }                                                                                                \
  for (; i < rows; i++)                                                                            \
    for (int64_t j = 0; j < cols; j++)                                                             \
      dst[j * ldd + i] = ONE(src[i * lds + j]);

#define LOAD8_BF16(v, p)                                                                           \
  do {                                                                                             \
    u16x8 h_;                                                                                      \
    memcpy(&h_, (p), sizeof h_);                                                                   \
    (v) = __builtin_convertvector(h_, u32x8) << 16;                                                \
  } while (0)
#define LOAD8_F32(v, p) memcpy(&(v), (p), sizeof(v))
#define ONE_F32(x) (x)

/* The same code twice, NAME_sse2 for any x86-64 and NAME_avx2 for AVX2
 * (GCC may use its wider registers there), and NAME, which runs the AVX2
 * one where the CPU has it, chosen on the first call. */
#define TWO_WAYS(NAME, PARAMS, ARGS, BODY)                                                         \
  static void NAME##_sse2 PARAMS { BODY }                                                          \
  __attribute__((target("avx2"))) static void NAME##_avx2 PARAMS { BODY }                          \
  void NAME PARAMS {                                                                               \
    static void (*run) PARAMS;                                                                     \
    if (!run)                                                                                      \
      run = __builtin_cpu_supports("avx2") ? NAME##_avx2 : NAME##_sse2;                            \
    run ARGS;                                                                                      \
  }

TWO_WAYS(gslrt_bf16_widen_n, (float *dst, const uint16_t *src, int64_t n), (dst, src, n), WIDEN_BODY)
TWO_WAYS(gslrt_bf16_round_n, (uint16_t *dst, const float *src, int64_t n), (dst, src, n), ROUND_BODY)
TWO_WAYS(gslrt_bf16_widen_t, (float *dst, int64_t ldd, const uint16_t *src, int64_t lds, int64_t rows, int64_t cols),
         (dst, ldd, src, lds, rows, cols), TRANSPOSE_BODY(LOAD8_BF16, gslrt_bf16_widen))
TWO_WAYS(gslrt_f32_transpose, (float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols),
         (dst, ldd, src, lds, rows, cols), TRANSPOSE_BODY(LOAD8_F32, ONE_F32))

#define NPY_STAGE 4096 /* f32 elements converted at a time */

/* Reads n 4-byte elements at byte pos of fd into dst, as elements of
 * out_dtype (bf16: each rounded from f32); 0 or -1 with err. */
static int read_run(int fd, const char *path, int64_t pos, int64_t n, char *dst, int32_t out_dtype,
                    char *err, int errlen) {
  float stage[NPY_STAGE];
  int bf16 = out_dtype == GSLRT_BF16;
  for (int64_t at = 0; at < n;) {
    int64_t m = bf16 ? (n - at < NPY_STAGE ? n - at : NPY_STAGE) : n;
    char *into = bf16 ? (char *)stage : dst;
    size_t want = (size_t)m * 4, got = 0;
    while (got < want) {
      ssize_t k = pread(fd, into + got, want - got, (off_t)(pos + 4 * at + (int64_t)got));
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0) {
        gslrt_seterr(err, errlen, "cannot read %s: %s", path, k < 0 ? strerror(errno) : "unexpected end of file");
        return -1;
      }
      got += (size_t)k;
    }
    if (bf16)
      gslrt_bf16_round_n((uint16_t *)dst + at, stage, m);
    at += m;
  }
  return 0;
}

int gslrt_npy_read_tile(const char *path, const gslrt_npy *h, const int64_t *offset,
                        const int64_t *count, void *out, char *err, int errlen) {
  return gslrt_npy_read_tile_as(path, h, offset, count, out, h->dtype, err, errlen);
}

int gslrt_npy_read_tile_as(const char *path, const gslrt_npy *h, const int64_t *offset,
                           const int64_t *count, void *out, int32_t out_dtype, char *err, int errlen) {
  int rc = -1, fd = -1;
  if (out_dtype != h->dtype && !(out_dtype == GSLRT_BF16 && h->dtype == GSLRT_F32)) {
    gslrt_seterr(err, errlen, "%s: holds %s, which cannot be read as %s", path,
                 h->dtype == GSLRT_I32 ? "int32" : "float32",
                 out_dtype == GSLRT_I32 ? "i32" : out_dtype == GSLRT_BF16 ? "bf16" : "f32");
    return -1;
  }
  int esize = gslrt_dtype_size(out_dtype);
  int32_t r = h->rank;
  int64_t idx[NPY_MAX_DIMS] = {0}, stride[NPY_MAX_DIMS], total = 1;
  for (int32_t d = 0; d < r; d++) {
    if (offset[d] < 0 || count[d] < 0 || offset[d] + count[d] > h->shape[d]) {
      gslrt_seterr(err, errlen, "%s: tile out of range in dimension %d", path, (int)d);
      goto fn_exit;
    }
    total *= count[d];
  }
  for (int32_t d = r - 1; d >= 0; d--)
    stride[d] = d == r - 1 ? 1 : stride[d + 1] * h->shape[d + 1];
  /* The run: the innermost dimension not covered whole, and all after it. */
  int32_t outer = r - 1;
  int64_t run = r ? count[r - 1] : 1;
  while (outer > 0 && count[outer] == h->shape[outer]) {
    outer--;
    run *= count[outer];
  }
  fd = open(path, O_RDONLY);
  if (fd < 0) {
    gslrt_seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
    goto fn_exit;
  }
  char *dst = out;
  for (int64_t done = 0; total > 0 && done < total; done += run) {
    int64_t e = 0;
    for (int32_t d = 0; d < r; d++)
      e += (offset[d] + (d <= outer ? idx[d] : 0)) * stride[d];
    if (read_run(fd, path, h->data_offset + e * 4, run, dst, out_dtype, err, errlen) != 0)
      goto fn_exit;
    dst += (size_t)run * (size_t)esize;
    for (int32_t d = outer - 1; d >= 0; d--) {
      if (++idx[d] < count[d])
        break;
      idx[d] = 0;
    }
  }
  rc = 0;
fn_exit:
  if (fd >= 0)
    close(fd);
  return rc;
}

int gslrt_npy_header(int32_t dtype, int32_t rank, const int64_t *shape, char *buf, size_t cap) {
  char dict[512];
  size_t npre = 10;
  if (rank < 0 || rank > NPY_MAX_DIMS)
    return -1;
  int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     dtype == GSLRT_I32 ? "<i4" : "<f4");
  for (int32_t i = 0; i < rank; i++)
    len += snprintf(dict + len, sizeof dict - (size_t)len, "%s%lld", i ? ", " : "", (long long)shape[i]);
  len += snprintf(dict + len, sizeof dict - (size_t)len, "%s), }", rank == 1 ? "," : "");
  /* Pad with spaces and a final '\n' so the data starts on a 64-byte boundary. */
  size_t total = 10 + (size_t)len + 1;
  if ((total + 63) / 64 * 64 - 10 > 65535)
    npre = 12, total += 2;
  size_t all = (total + 63) / 64 * 64, hlen = all - npre;
  if (all > cap)
    return -1;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = npre == 10 ? 1 : 2;
  buf[7] = 0;
  buf[8] = (char)(hlen & 0xff), buf[9] = (char)((hlen >> 8) & 0xff);
  if (npre == 12)
    buf[10] = (char)((hlen >> 16) & 0xff), buf[11] = (char)((hlen >> 24) & 0xff);
  memcpy(buf + npre, dict, (size_t)len);
  memset(buf + npre + len, ' ', all - npre - (size_t)len - 1);
  buf[all - 1] = '\n';
  return (int)all;
}

int gslrt_npy_write_temp(const char *path, int32_t dtype, int32_t rank, const int64_t *shape,
                         const void *data, char **tmp_out, char *err, int errlen) {
  int rc = -1, fd = -1;
  FILE *f = NULL;
  char *tmp = NULL, head[1024];
  int64_t n = 1;
  *tmp_out = NULL;
  int hlen = gslrt_npy_header(dtype, rank, shape, head, sizeof head);
  if (hlen < 0) {
    gslrt_seterr(err, errlen, "%s: cannot write an array of rank %d", path, (int)rank);
    goto fn_exit;
  }
  for (int32_t i = 0; i < rank; i++)
    n *= shape[i];
  fd = create_temp(path, &tmp);
  if (fd < 0) {
    gslrt_seterr(err, errlen, "cannot create %s: %s", tmp ? tmp : path, strerror(errno));
    free(tmp);
    tmp = NULL;
    goto fn_exit;
  }
  f = fdopen(fd, "wb");
  if (!f) {
    gslrt_seterr(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    goto fn_exit;
  }
  fd = -1;
  int ok = fwrite(head, 1, (size_t)hlen, f) == (size_t)hlen;
  if (dtype == GSLRT_BF16) {
    float stage[NPY_STAGE];
    for (int64_t at = 0; ok && at < n; at += NPY_STAGE) {
      int64_t m = n - at < NPY_STAGE ? n - at : NPY_STAGE;
      gslrt_bf16_widen_n(stage, (const uint16_t *)data + at, m);
      ok = fwrite(stage, 4, (size_t)m, f) == (size_t)m;
    }
  } else {
    ok = ok && (n == 0 || fwrite(data, 4, (size_t)n, f) == (size_t)n);
  }
  if (!ok) {
    gslrt_seterr(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    goto fn_exit;
  }
  FILE *g = f;
  f = NULL;
  if (fclose(g) != 0) {
    gslrt_seterr(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    goto fn_exit;
  }
  *tmp_out = tmp;
  rc = 0;
fn_exit:
  if (f)
    fclose(f);
  if (fd >= 0)
    close(fd);
  if (rc != 0 && tmp) {
    unlink(tmp);
    free(tmp);
  }
  return rc;
}

int gslrt_npy_write(const char *path, int32_t dtype, int32_t rank, const int64_t *shape,
                    const void *data, char *err, int errlen) {
  char *tmp = NULL;
  if (gslrt_npy_write_temp(path, dtype, rank, shape, data, &tmp, err, errlen) != 0)
    return -1;
  int rc = 0;
  if (rename(tmp, path) != 0) {
    gslrt_seterr(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    unlink(tmp);
    rc = -1;
  }
  free(tmp);
  return rc;
}
