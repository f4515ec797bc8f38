/* seterr.h — one error message into a caller's buffer, shared by the
 * runtime's files (npy.c among them, which needs no MPI). */
#ifndef GSLRT_SETERR_H
#define GSLRT_SETERR_H

/* A message into err, truncated to errlen (a long path is cut, not overrun). */
void gslrt_seterr(char *err, int errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
