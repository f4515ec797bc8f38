/* paths.h — where a path leads, for the rule that a run (the program, and
 * gslrun on its behalf) never writes a file of its own into the
 * --checkpoint directory. Needs no MPI: linked into libgslrt and gslrun. */
#ifndef GSLRT_PATHS_H
#define GSLRT_PATHS_H

/* The absolute path path names, as the kernel would find it, into out
 * (PATH_MAX bytes); 0, or -1 if a path is too long. */
int gslrt_resolve(const char *path, char *out);
/* Whether path resolves into the directory whose resolved path is dir, or
 * is it. */
int gslrt_inside(const char *path, const char *dir);

#endif
