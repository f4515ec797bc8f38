/* provenance.c — who ran which program, from which sources, where and
 * when (issue 33, item 5): the record "provenance" that a run writes into
 * every checkpoint manifest (ckpt_manifest.c) and into its first --metrics
 * record (main.c), one JSON object, the same in both:
 *
 *   {"user": "alice", "uid": 1000, "hosts": ["n1", "n1", "n2"],
 *    "gslc_version": "0.1.0", "program": "lm.gsl",
 *    "sources": [{"file": "lm.gsl", "sha256": "..."}, ...],
 *    "source_sha256": "...", "binary": "/home/alice/lm",
 *    "binary_sha256": "...", "argv": ["./lm", "--steps", "100"],
 *    "started": "2026-11-26T15:04:39Z"}
 *
 * Made once at the start, only by a run that writes a manifest or metrics
 * (--checkpoint, --metrics; not --generate): every rank together sends
 * its processor name (MPI_Get_processor_name) to rank 0 in one
 * MPI_Gather, "hosts" in rank order; the rest is rank 0's alone, which
 * alone writes manifests and metrics. The user is getpwuid(geteuid())'s
 * name, or the uid in decimal if it has none; "sources" and
 * "source_sha256" are copied from the program's build record (gslc hashed
 * the files it read: compiler/diag.c), [] and null in a program without
 * one; "binary_sha256" is the SHA-256 of /proc/self/exe, read once, null
 * where it cannot be read ("binary", the link's target, null where that
 * cannot be read); "argv" is the
 * command line as the program got it, before MPI_Init; "started" the
 * wall-clock time gslrt_main began, in UTC, ISO 8601 to the second.
 * Strings are UTF-8 as JSON must be: a byte of an argument or a name that
 * is not part of valid UTF-8 becomes U+FFFD.
 *
 * The SHA-256 is FIPS 180-4's, written out here (sha256_*), not OpenSSL's
 * that gslc hashes the sources with: linking libcrypto into every program
 * costs each rank 1.6 MiB of resident memory at start-up whether it
 * hashes or not (its relocations; measured on a program that only links
 * it), which tests/memory.sh's budget does not have, for one hash of the
 * binary a run. tests/provenance_run.sh checks it against sha256sum. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROV_CHUNK (1 << 20) /* bytes of the binary hashed at a time */

/* The length of the valid UTF-8 sequence at s (n bytes left), or 0: no
 * overlong form, no surrogate, nothing above U+10FFFF (RFC 3629). */
static size_t utf8_len(const unsigned char *s, size_t n) {
  size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
                                : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  if (!len || len > n)
    return 0;
  for (size_t i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80)
      return 0;
  if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) || (s[0] == 0xf0 && s[1] < 0x90) ||
      (s[0] == 0xf4 && s[1] > 0x8f))
    return 0;
  return len;
}

/* s as a JSON string, each byte outside valid UTF-8 replaced by U+FFFD;
 * NULL out of memory. */
static json_t *text(const char *s) {
  size_t n = strlen(s), k = 0;
  char *buf = malloc(3 * n + 1); /* a byte becomes at most 3 */
  json_t *v;
  if (!buf)
    return NULL;
  for (size_t i = 0; i < n;) {
    size_t len = utf8_len((const unsigned char *)s + i, n - i);
    if (len) {
      memcpy(buf + k, s + i, len), k += len, i += len;
    } else {
      memcpy(buf + k, "\xef\xbf\xbd", 3), k += 3, i++;
    }
  }
  v = json_stringn(buf, k);
  free(buf);
  return v;
}

/* Sets obj's key to v (a new reference); whether it took. */
static int put(json_t *obj, const char *key, json_t *v) { return v && json_object_set_new(obj, key, v) == 0; }

/* A SHA-256 being computed (FIPS 180-4). */
typedef struct sha256 {
  uint32_t h[8];           /* the hash value so far */
  unsigned char block[64]; /* the block being filled */
  size_t used;             /* bytes in block */
  uint64_t bytes;          /* bytes hashed in all */
} sha256;

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_init(sha256 *s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->used = 0, s->bytes = 0;
}

/* Folds the full block into the hash value. */
static void sha256_block(sha256 *s) {
  uint32_t w[64], v[8];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)s->block[4 * i] << 24 | (uint32_t)s->block[4 * i + 1] << 16 |
           (uint32_t)s->block[4 * i + 2] << 8 | s->block[4 * i + 3];
  for (int i = 16; i < 64; i++)
    w[i] = w[i - 16] + (ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3)) + w[i - 7] +
           (ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10));
  memcpy(v, s->h, sizeof v);
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = v[7] + (ror(v[4], 6) ^ ror(v[4], 11) ^ ror(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) +
                  sha256_k[i] + w[i];
    uint32_t t2 = (ror(v[0], 2) ^ ror(v[0], 13) ^ ror(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
    memmove(v + 1, v, 7 * sizeof *v);
    v[4] += t1;
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; i++)
    s->h[i] += v[i];
}

static void sha256_update(sha256 *s, const unsigned char *p, size_t n) {
  s->bytes += n;
  while (n) {
    size_t k = 64 - s->used < n ? 64 - s->used : n;
    memcpy(s->block + s->used, p, k);
    s->used += k, p += k, n -= k;
    if (s->used == 64)
      sha256_block(s), s->used = 0;
  }
}

/* The digest, in hex, into hex (65 bytes). */
static void sha256_final(sha256 *s, char *hex) {
  uint64_t bits = s->bytes * 8;
  unsigned char pad = 0x80, len[8];
  sha256_update(s, &pad, 1);
  pad = 0;
  while (s->used != 56)
    sha256_update(s, &pad, 1);
  for (int i = 0; i < 8; i++)
    len[i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update(s, len, 8);
  for (int i = 0; i < 8; i++)
    snprintf(hex + 8 * i, 9, "%08x", (unsigned)s->h[i]);
}

/* The SHA-256 of the running binary (/proc/self/exe) in hex, into hex (65
 * bytes); 0, or -1 if it cannot be read. */
static int binary_sha256(char *hex) {
  int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC), rc = -1;
  unsigned char *buf = malloc(PROV_CHUNK);
  sha256 s;
  sha256_init(&s);
  if (fd < 0 || !buf)
    goto fn_exit;
  for (;;) {
    ssize_t k = read(fd, buf, PROV_CHUNK);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      goto fn_exit;
    if (k == 0)
      break;
    sha256_update(&s, buf, (size_t)k);
  }
  sha256_final(&s, hex);
  rc = 0;
fn_exit:
  free(buf);
  if (fd >= 0)
    close(fd);
  return rc;
}

/* The record on rank 0, from the gathered host names (nranks of
 * MPI_MAX_PROCESSOR_NAME bytes); NULL out of memory. */
static json_t *record(gslrt_ctx *ctx, const char *names) {
  json_t *doc = json_object(), *hosts = json_array(), *argv = json_array();
  const json_t *build = ctx->build;
  const json_t *sources = json_object_get(build, "sources"), *all = json_object_get(build, "source_sha256");
  struct passwd *pw = getpwuid(geteuid());
  char uid[32], exe[PATH_MAX], hex[65], when[32];
  struct tm tm;
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  int ok = doc && hosts && argv;
  snprintf(uid, sizeof uid, "%lu", (unsigned long)geteuid());
  if (n >= 0)
    exe[n] = 0;
  if (!gmtime_r(&ctx->started_at, &tm) || !strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(when, sizeof when, "?");
  ok = ok && put(doc, "user", text(pw && pw->pw_name && *pw->pw_name ? pw->pw_name : uid)) &&
       put(doc, "uid", json_integer((json_int_t)geteuid())) && put(doc, "hosts", json_incref(hosts));
  for (int r = 0; ok && r < ctx->nranks; r++)
    ok = json_array_append_new(hosts, text(names + (size_t)r * MPI_MAX_PROCESSOR_NAME)) == 0;
  ok = ok && put(doc, "gslc_version", text(ctx->info->compiler_version ? ctx->info->compiler_version : "")) &&
       put(doc, "program", text(ctx->info->source ? ctx->info->source : "")) &&
       put(doc, "sources", json_is_array(sources) ? json_deep_copy(sources) : json_array()) &&
       put(doc, "source_sha256", json_is_string(all) ? json_deep_copy(all) : json_null()) &&
       put(doc, "binary", n >= 0 ? text(exe) : json_null()) &&
       put(doc, "binary_sha256", binary_sha256(hex) == 0 ? json_string(hex) : json_null()) &&
       put(doc, "argv", json_incref(argv));
  for (int i = 0; ok && i < ctx->argc; i++)
    ok = json_array_append_new(argv, text(ctx->argv[i] ? ctx->argv[i] : "")) == 0;
  ok = ok && put(doc, "started", json_string(when));
  json_decref(hosts);
  json_decref(argv);
  if (!ok) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

void gslrt_provenance_gather(gslrt_ctx *ctx) {
  char name[MPI_MAX_PROCESSOR_NAME] = "", *names = NULL;
  int len = 0;
  if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS || !*name)
    if (gethostname(name, sizeof name - 1) != 0)
      snprintf(name, sizeof name, "?");
  name[sizeof name - 1] = 0;
  if (ctx->rank == 0 && !(names = calloc((size_t)ctx->nranks, MPI_MAX_PROCESSOR_NAME)))
    gslrt_fatal(ctx, "provenance: out of memory");
  gslrt_world_gather(ctx, name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, 0, "the gathering of the provenance's hosts");
  if (ctx->rank == 0 && !(ctx->provenance = record(ctx, names)))
    gslrt_fatal(ctx, "provenance: out of memory");
  free(names);
}

int gslrt_provenance_dump(const gslrt_ctx *ctx, FILE *f) {
  return ctx->provenance ? json_dumpf(ctx->provenance, f, 0) : fputs("{}", f) < 0 ? -1 : 0;
}

void gslrt_provenance_free(gslrt_ctx *ctx) {
  json_decref(ctx->provenance);
  ctx->provenance = NULL;
}
