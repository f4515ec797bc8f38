/* seterr.c — gslrt_seterr: the runtime's functions that return -1 put their
 * one-line message into the caller's buffer with it. */
#include <stdarg.h>
#include <stdio.h>

#include "seterr.h"

void gslrt_seterr(char *err, int errlen, const char *fmt, ...) {
  if (!err || errlen <= 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, (size_t)errlen, fmt, ap);
  va_end(ap);
}
