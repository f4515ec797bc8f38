/* moe_bias_check.c — the C reference of moe_bias.gsl: top 2, no random
 * routing, capacity 1.0, body relu(t @ wi[e] + 1.0) @ wo[e] (see moe_ref.h). */
#define MOE_GSL "moe_bias.gsl"
#define MOE_TOP 2
#define MOE_CAPACITY 1.0
#define MOE_RANDOM 0
#define MOE_BIAS 1.0
#define MOE_WANT_DROPS 1
#define MOE_WANT_EMPTY_SLOTS 1
#include "moe_ref.h"
