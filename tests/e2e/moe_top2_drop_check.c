/* moe_top2_drop_check.c — the C reference of moe_top2_drop.gsl: top 2, no
 * random routing, capacity 0.5 (see moe_ref.h for the computation). */
#define MOE_GSL "moe_top2_drop.gsl"
#define MOE_TOP 2
#define MOE_CAPACITY 0.5
#define MOE_RANDOM 0
#define MOE_WANT_DROPS 1
#define MOE_WANT_DROPPED_TOKEN 1
#include "moe_ref.h"
