/* arena.c — memory for the compiler.
 *
 * Everything the compiler allocates goes through xmalloc, which ends the
 * process with a message rather than returning NULL. ASTs and IR live in
 * arenas: chunks handed out by bumping a pointer, freed all at once. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gslc.h"

typedef struct Chunk Chunk;
struct Chunk {
  Chunk *next; /* older chunk */
  size_t used; /* bytes handed out */
  size_t cap;  /* bytes in data */
  _Alignas(16) unsigned char data[];
};

struct Arena {
  Chunk *head; /* newest chunk, the one being filled */
};

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "gslc: error: out of memory (allocating %zu bytes)\n", n);
    exit(1);
  }
  return p;
}

void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "gslc: error: out of memory (allocating %zu x %zu bytes)\n", n, size);
    exit(1);
  }
  return p;
}

void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    fprintf(stderr, "gslc: error: out of memory (allocating %zu bytes)\n", n);
    exit(1);
  }
  return q;
}

char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

Arena *arena_new(void) { return xcalloc(1, sizeof(Arena)); }

void *arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  Chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    c = xmalloc(sizeof(Chunk) + cap);
    c->next = a->head;
    c->used = 0;
    c->cap = cap;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  return memset(p, 0, n);
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = arena_alloc(a, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

void arena_free(Arena *a) {
  if (!a)
    return;
  for (Chunk *c = a->head, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(a);
}

_Noreturn void die_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "gslc: internal compiler error at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n(this is a bug in gslc, not in your program)\n", stderr);
  abort();
}
