/* moe_top1_check.c — the C reference of moe_top1.gsl: top 1, capacity 1.0
 * (see moe_ref.h). */
#define MOE_GSL "moe_top1.gsl"
#define MOE_TOP 1
#define MOE_CAPACITY 1.0
#define MOE_WANT_DROPS 1
#define MOE_WANT_DROPPED_TOKEN 1
#define MOE_WANT_EMPTY_SLOTS 1
#include "moe_ref.h"
