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
 * (source_was_read). Errors are counted; the driver stops after a phase
 * that reported any. The first 50 errors are shown, then one line says
 * the rest are not; a source line longer than 200 bytes is shown as a
 * window around the error, so no input makes gslc's output explode. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gslc.h"

#define DIAG_MAX_ERRORS 50   /* errors shown; the rest are counted */
#define DIAG_LINE_WIDTH 200  /* bytes of a long source line shown around its span */

/* The identity of a file source_load read. */
typedef struct FileId {
  dev_t dev;        /* its device */
  ino_t ino;        /* its inode */
  char *path;       /* the path it was read by */
} FileId;

static FILE *diag_out;  /* where diagnostics go; NULL means stderr */
static int nerrors;     /* errors reported since the last reset */
static bool muted;      /* the last error was past the limit: its notes are not shown either */
static FileId *read_files; /* every file source_load read */
static int nread_files;    /* entries in read_files */

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
}

/* Remembers that the file behind st was read by path. */
static void remember(const struct stat *st, const char *path) {
  for (int i = 0; i < nread_files; i++)
    if (read_files[i].dev == st->st_dev && read_files[i].ino == st->st_ino)
      return;
  if (!read_files)
    atexit(forget_files);
  read_files = xrealloc(read_files, sizeof *read_files * (size_t)(nread_files + 1));
  read_files[nread_files++] = (FileId){st->st_dev, st->st_ino, xstrdup(path)};
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
  remember(&st, path);
  size_t cap = 4096, len = 0;
  char *buf = xmalloc(cap);
  for (;;) {
    if (cap - len < 2)
      buf = xrealloc(buf, cap *= 2);
    errno = 0;
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0)
      break;
  }
  int err = ferror(f) ? (errno ? errno : EIO) : 0;
  fclose(f);
  if (err) {
    free(buf);
    errno = err;
    return NULL;
  }
  buf[len] = '\0';
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

void diag_set_stream(FILE *f) { diag_out = f; }
int diag_errors(void) { return nerrors; }
void diag_reset(void) {
  nerrors = 0;
  muted = false;
}

static FILE *out(void) { return diag_out ? diag_out : stderr; }

/* Prints the line holding sp and a caret under it, ~ to the span's end on
 * that line. Tabs are kept so the caret lines up under the same tabs. A
 * line longer than DIAG_LINE_WIDTH bytes is shown as a window of that width
 * around the span's start, "..." marking what is cut. */
static void show_line(const Span *sp) {
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
  fwrite(buf, 1, n, out());
  free(buf);
}

static void report(const char *level, Span sp, const char *fmt, va_list ap) {
  FILE *f = out();
  if (sp.src)
    fprintf(f, "%s:%u:%u: %s: ", sp.src->path, sp.line, sp.col, level);
  else
    fprintf(f, "gslc: %s: ", level);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  if (sp.src)
    show_line(&sp);
}

/* Past DIAG_MAX_ERRORS errors, one line says so and the rest (with their
 * notes) are counted but not shown: a flood of messages helps nobody. */
static bool shown(void) {
  if (nerrors < DIAG_MAX_ERRORS)
    return true;
  if (nerrors == DIAG_MAX_ERRORS)
    fprintf(out(), "gslc: error: too many errors; the first %d are shown above\n", DIAG_MAX_ERRORS);
  return false;
}

bool diag_flooded(void) { return nerrors > DIAG_MAX_ERRORS; }

void diag_error(Span sp, const char *fmt, ...) {
  muted = !shown();
  if (!muted) {
    va_list ap;
    va_start(ap, fmt);
    report("error", sp, fmt, ap);
    va_end(ap);
  }
  nerrors++;
}

void diag_warning(Span sp, const char *fmt, ...) {
  muted = false;
  va_list ap;
  va_start(ap, fmt);
  report("warning", sp, fmt, ap);
  va_end(ap);
}

void diag_note(Span sp, const char *fmt, ...) {
  if (muted)
    return;
  va_list ap;
  va_start(ap, fmt);
  report("note", sp, fmt, ap);
  va_end(ap);
}

void diag_fatal(const char *fmt, ...) {
  muted = !shown();
  if (!muted) {
    va_list ap;
    va_start(ap, fmt);
    Span none = {0};
    report("error", none, fmt, ap);
    va_end(ap);
  }
  nerrors++;
}
