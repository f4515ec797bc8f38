/* moe_top3_check.c — the C reference of moe_top3.gsl: top 3, capacity
 * 0.75 (see moe_ref.h for the computation). */
#define MOE_GSL "moe_top3.gsl"
#define MOE_TOP 3
#define MOE_CAPACITY 0.75
#define MOE_WANT_DROPS 1
#define MOE_WANT_LATER_KEPT 1
#include "moe_ref.h"
