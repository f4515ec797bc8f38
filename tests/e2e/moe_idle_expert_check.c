/* moe_idle_expert_check.c — the C reference of moe_idle_expert.gsl: top 2,
 * no random routing, capacity 1.0, one expert never chosen (see moe_ref.h). */
#define MOE_GSL "moe_idle_expert.gsl"
#define MOE_TOP 2
#define MOE_CAPACITY 1.0
#define MOE_RANDOM 0
#define MOE_WANT_DROPS 1
#define MOE_WANT_EMPTY_SLOTS 1
#define MOE_WANT_IDLE_EXPERT 1
#include "moe_ref.h"
