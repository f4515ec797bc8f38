/* diag.c — source files and diagnostics in the C compilers' form:
 *
 *   model.gsl:3:14: error: unknown name 'wq'
 *       y = x @ wq
 *               ^~
 *
 * Sources are read whole and NUL-terminated, so the lexer needs no refill
 * and a span's line can always be printed. A directory is refused with
 * EISDIR (fopen accepts one, and the read error would say only EIO), and a
 * read error keeps its own errno. The device and inode of every file read
 * are remembered, so the driver can refuse to write over a source
 * (source_was_read), with the SHA-256 of what was read (OpenSSL's
 * libcrypto), for the provenance a checkpoint records (source_reads). A
 * file is read up to SOURCE_MAX_BYTES: /dev/zero is refused, not read
 * forever. Diagnostics go through a Diag, the context the driver makes
 * for a run and hands to each phase that reports (a test makes its own
 * over a buffer): where the messages go, and the errors counted, so the
 * driver stops after a phase that reported any. The first 50 errors are
 * shown, then one line says the rest are not; a source line longer than
 * 200 bytes is shown as a window around the error, so no input makes
 * gslc's output explode. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "gslc.h"

#define DIAG_MAX_ERRORS 50   /* errors shown; the rest are counted */
#define DIAG_LINE_WIDTH 200  /* bytes of a long source line shown around its span */
#define SOURCE_MAX_BYTES ((size_t)64 << 20) /* the longest source file read */
#define SOURCE_MAX_TEXT "64 MiB"            /* the same, in words */

/* The identity of a file source_load read. */
typedef struct FileId {
  dev_t dev;        /* its device */
  ino_t ino;        /* its inode */
  char *path;       /* the path it was read by */
  char sha256[65];  /* the SHA-256 of its bytes, in hex */
} FileId;

static FileId *read_files; /* every file source_load read */
static int nread_files;    /* entries in read_files */
static EVP_MD_CTX *read_all; /* SHA-256 of the bytes of read_files, in order */

Source *source_from_string(const char *path, const char *text) {
  Source *s = xcalloc(1, sizeof *s);
  s->path = xstrdup(path);
  s->len = strlen(text);
  s->text = xstrdup(text);
  return s;
}

static void forget_files(void) {
  for (int i = 0; i < nread_files; i++)
    free(read_files[i].path);
  free(read_files);
  read_files = NULL;
  nread_files = 0;
  EVP_MD_CTX_free(read_all);
  read_all = NULL;
}

/* Remembers that the file behind st was read by path, its bytes text[0..len). */
static void remember(const struct stat *st, const char *path, const char *text, size_t len) {
  for (int i = 0; i < nread_files; i++)
    if (read_files[i].dev == st->st_dev && read_files[i].ino == st->st_ino)
      return;
  if (!read_files) {
    atexit(forget_files);
    read_all = EVP_MD_CTX_new();
    if (!read_all || !EVP_DigestInit_ex(read_all, EVP_sha256(), NULL))
      die("OpenSSL's SHA-256 failed");
  }
  if (!EVP_DigestUpdate(read_all, text, len))
    die("OpenSSL's SHA-256 failed");
  read_files = xrealloc(read_files, sizeof *read_files * (size_t)(nread_files + 1));
  FileId *f = &read_files[nread_files++];
  *f = (FileId){st->st_dev, st->st_ino, xstrdup(path), ""};
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  if (!EVP_Digest(text, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
    die("OpenSSL's SHA-256 failed");
  for (unsigned i = 0; i < mdlen; i++)
    snprintf(f->sha256 + 2 * i, 3, "%02x", md[i]);
}

int source_nreads(void) { return nread_files; }
const char *source_read_path(int i) { return read_files[i].path; }
const char *source_read_sha256(int i) { return read_files[i].sha256; }

const char *source_sha256_all(void) {
  static char hex[65];
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  if (!c || (read_all ? !EVP_MD_CTX_copy_ex(c, read_all) : !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) ||
      !EVP_DigestFinal_ex(c, md, &mdlen) || mdlen != 32)
    die("OpenSSL's SHA-256 failed");
  EVP_MD_CTX_free(c);
  for (unsigned i = 0; i < mdlen; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
  return hex;
}

const char *source_strerror(int err) {
  return err == EFBIG ? "longer than " SOURCE_MAX_TEXT ", the most gslc reads of a source file" : strerror(err);
}

const char *source_was_read(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return NULL;
  for (int i = 0; i < nread_files; i++)
    if (read_files[i].dev == st.st_dev && read_files[i].ino == st.st_ino)
      return read_files[i].path;
  return NULL;
}

Source *source_load(const char *path) {
  struct stat st;
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
    int e = S_ISDIR(st.st_mode) ? EISDIR : errno;
    fclose(f);
    errno = e;
    return NULL;
  }
  size_t cap = 4096, len = 0;
  char *buf = xmalloc(cap);
  int err = 0;
  for (;;) {
    if (cap - len < 2)
      buf = xrealloc(buf, cap *= 2);
    errno = 0;
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (len > SOURCE_MAX_BYTES) {
      err = EFBIG;
      break;
    }
    if (n == 0)
      break;
  }
  if (!err && ferror(f))
    err = errno ? errno : EIO;
  fclose(f);
  if (err) {
    free(buf);
    errno = err;
    return NULL;
  }
  buf[len] = '\0';
  remember(&st, path, buf, len);
  Source *s = xcalloc(1, sizeof *s);
  s->path = xstrdup(path);
  s->text = buf;
  s->len = len;
  return s;
}

void source_free(Source *s) {
  if (!s)
    return;
  free((char *)s->path);
  free((char *)s->text);
  free(s);
}

Span span_join(Span a, Span b) {
  if (!a.src)
    return b;
  if (!b.src || b.end < a.off)
    return a;
  a.end = b.end > a.end ? b.end : a.end;
  return a;
}

/* Prints the line holding sp and a caret under it, ~ to the span's end on
 * that line. Tabs are kept so the caret lines up under the same tabs. A
 * line longer than DIAG_LINE_WIDTH bytes is shown as a window of that width
 * around the span's start, "..." marking what is cut. */
static void show_line(FILE *f, const Span *sp) {
  const Source *s = sp->src;
  if (!s || sp->off > s->len)
    return;
  const char *text = s->text;
  size_t start = sp->off, end = sp->off;
  while (start > 0 && text[start - 1] != '\n')
    start--;
  while (end < s->len && text[end] != '\n')
    end++;
  bool cut_left = false, cut_right = false;
  if (end - start > DIAG_LINE_WIDTH) {
    if (sp->off - start > DIAG_LINE_WIDTH / 3) {
      start = sp->off - DIAG_LINE_WIDTH / 3;
      cut_left = true;
    }
    if (end - start > DIAG_LINE_WIDTH) {
      end = start + DIAG_LINE_WIDTH;
      cut_right = true;
    }
  }
  /* built in one buffer and written at once: stderr is unbuffered */
  size_t width = end - start;
  char *buf = xmalloc(2 * width + 64);
  size_t n = (size_t)snprintf(buf, 32, "%5u | ", sp->line);
  if (cut_left)
    n += (size_t)snprintf(buf + n, 4, "...");
  for (size_t i = start; i < end; i++) /* a NUL byte would end the line early */
    buf[n++] = text[i] ? text[i] : ' ';
  if (cut_right)
    n += (size_t)snprintf(buf + n, 4, "...");
  n += (size_t)snprintf(buf + n, 16, "\n      | ");
  if (cut_left)
    n += (size_t)snprintf(buf + n, 4, "   ");
  for (size_t i = start; i < sp->off; i++)
    buf[n++] = text[i] == '\t' ? '\t' : ' ';
  buf[n++] = '^';
  size_t stop = sp->end < end ? sp->end : end;
  for (size_t i = sp->off + 1; i < stop; i++)
    buf[n++] = '~';
  buf[n++] = '\n';
  fwrite(buf, 1, n, f);
  free(buf);
}

/* Prints one message to d's stream (none: nowhere). */
static void report(const Diag *d, const char *level, Span sp, const char *fmt, va_list ap) {
  FILE *f = d->out;
  if (!f)
    return;
  if (sp.src)
    fprintf(f, "%s:%u:%u: %s: ", sp.src->path, sp.line, sp.col, level);
  else
    fprintf(f, "gslc: %s: ", level);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  if (sp.src)
    show_line(f, &sp);
}

/* Past DIAG_MAX_ERRORS errors, one line says so and the rest (with their
 * notes) are counted but not shown: a flood of messages helps nobody. */
static bool shown(const Diag *d) {
  if (d->errors < DIAG_MAX_ERRORS)
    return true;
  if (d->errors == DIAG_MAX_ERRORS && d->out)
    fprintf(d->out, "gslc: error: too many errors; the first %d are shown above\n", DIAG_MAX_ERRORS);
  return false;
}

bool diag_flooded(const Diag *d) { return d->errors > DIAG_MAX_ERRORS; }

void diag_error(Diag *d, Span sp, const char *fmt, ...) {
  d->muted = !shown(d);
  if (!d->muted) {
    va_list ap;
    va_start(ap, fmt);
    report(d, "error", sp, fmt, ap);
    va_end(ap);
  }
  d->errors++;
}

void diag_warning(Diag *d, Span sp, const char *fmt, ...) {
  d->muted = false;
  va_list ap;
  va_start(ap, fmt);
  report(d, "warning", sp, fmt, ap);
  va_end(ap);
}

void diag_note(Diag *d, Span sp, const char *fmt, ...) {
  if (d->muted)
    return;
  va_list ap;
  va_start(ap, fmt);
  report(d, "note", sp, fmt, ap);
  va_end(ap);
}

void diag_fatal(Diag *d, const char *fmt, ...) {
  d->muted = !shown(d);
  if (!d->muted) {
    va_list ap;
    va_start(ap, fmt);
    Span none = {0};
    report(d, "error", none, fmt, ap);
    va_end(ap);
  }
  d->errors++;
}
