/* moe_dropless_check.c — the C reference of moe_dropless.gsl: top 2, no
 * random routing, capacity 0 (dropless: C = S; see moe_ref.h). */
#define MOE_GSL "moe_dropless.gsl"
#define MOE_TOP 2
#define MOE_CAPACITY 0
#define MOE_RANDOM 0
#define MOE_WANT_NO_DROPS 1
#define MOE_WANT_DROPS_AT_ONE 1
#include "moe_ref.h"
