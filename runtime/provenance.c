/* provenance.c — who ran which program, from which sources, where and
 * when (issue 33, item 5): the record "provenance" that a run writes into
 * every checkpoint manifest (checkpoint.c) and into its first --metrics
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
 * one; "binary_sha256" is the SHA-256 of /proc/self/exe, read once through
 * OpenSSL's libcrypto (the SHA-256 gslc uses), null where it cannot be
 * read ("binary" then null too if the link cannot be read); "argv" is the
 * command line as the program got it, before MPI_Init; "started" the
 * wall-clock time gslrt_main began, in UTC, ISO 8601 to the second.
 * Strings are UTF-8 as JSON must be: a byte of an argument or a name that
 * is not part of valid UTF-8 becomes U+FFFD. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
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

/* The SHA-256 of the running binary (/proc/self/exe) in hex, into hex (65
 * bytes); 0, or -1 if it cannot be read. */
static int binary_sha256(char *hex) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC), rc = -1;
  unsigned char *buf = malloc(PROV_CHUNK);
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  if (fd < 0 || !buf || !c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL))
    goto fn_exit;
  for (;;) {
    ssize_t k = read(fd, buf, PROV_CHUNK);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      goto fn_exit;
    if (k == 0)
      break;
    if (!EVP_DigestUpdate(c, buf, (size_t)k))
      goto fn_exit;
  }
  if (!EVP_DigestFinal_ex(c, md, &mdlen) || mdlen != 32)
    goto fn_exit;
  for (unsigned i = 0; i < mdlen; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
  rc = 0;
fn_exit:
  EVP_MD_CTX_free(c);
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
  gslrt_mpi_check(ctx, MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                                  0, ctx->comm), "MPI_Gather");
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
