/* paths.c — gslrt_resolve and gslrt_inside: a path resolved through every
 * symbolic link and "..", whether or not its last components exist yet,
 * and whether it lies inside a directory. The runtime refuses a --metrics
 * or --output file inside the --checkpoint directory with them (main.c),
 * and gslrun, which rewrites the --metrics file after each segment, keeps
 * to the same rule (gslrun.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "paths.h"

/* The absolute path path names, into out (PATH_MAX bytes), as the kernel
 * would find it: its longest prefix that exists resolved by realpath
 * (every symbolic link and ".." in it, of the file itself if it exists),
 * the rest appended as written, "." dropped and ".." taking the last
 * component off (nothing there exists, so no link can be among it). 0,
 * or -1 if a path is too long. */
int gslrt_resolve(const char *path, char *out) {
  char prefix[PATH_MAX], rest[PATH_MAX] = "";
  size_t n = strlen(path);
  if (n >= sizeof prefix)
    return -1;
  memcpy(prefix, path, n + 1);
  for (;;) { /* drop a last component until what is left exists */
    while (n > 1 && prefix[n - 1] == '/')
      prefix[--n] = 0;
    if (realpath(n ? prefix : ".", out))
      break;
    char *slash = strrchr(prefix, '/'), tail[PATH_MAX];
    int last = !slash || slash == prefix; /* "name" or "/name": the rest from "." or "/" */
    if (snprintf(tail, sizeof tail, "%s%s%s", slash ? slash + 1 : prefix, *rest ? "/" : "", rest) >=
        (int)sizeof tail)
      return -1;
    memcpy(rest, tail, strlen(tail) + 1);
    if (last) {
      if (!realpath(slash ? "/" : ".", out))
        return -1;
      break;
    }
    *slash = 0;
    n = strlen(prefix);
  }
  for (char *c = strtok(rest, "/"); c; c = strtok(NULL, "/")) {
    size_t len = strlen(out);
    if (!strcmp(c, "."))
      continue;
    if (!strcmp(c, "..")) {
      char *slash = strrchr(out, '/');
      if (slash)
        slash[slash == out ? 1 : 0] = 0;
      continue;
    }
    if (len + 1 + strlen(c) >= PATH_MAX)
      return -1;
    snprintf(out + len, PATH_MAX - len, "%s%s", out[len - 1] == '/' ? "" : "/", c);
  }
  return 0;
}

/* Whether the file path, written by the run, resolves (gslrt_resolve) into the
 * directory whose resolved path is dir, or is it. */
int gslrt_inside(const char *path, const char *dir) {
  char p[PATH_MAX];
  size_t n = strlen(dir);
  if (gslrt_resolve(path, p) != 0)
    return 0; /* too long to open, so never written */
  return !strncmp(p, dir, n) && (p[n] == '/' || p[n] == 0 || (n == 1 && dir[0] == '/'));
}

