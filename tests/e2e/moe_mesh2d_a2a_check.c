/* moe_mesh2d_a2a_check.c — the C reference of moe_mesh2d_a2a.gsl: top 2, random
 * routing, capacity 1.0, run with --steps 2 --seed 7 (its ARGS; the seed
 * and the last step, 1, are repeated here) — see moe_ref.h. */
#define MOE_GSL "moe_mesh2d_a2a.gsl"
#define MOE_TOP 2
#define MOE_CAPACITY 1.0
#define MOE_RANDOM 1
#define MOE_SEED 7
#define MOE_STEP 1
#define MOE_WANT_DROPS 1
#define MOE_WANT_UNROUTED 1
#include "moe_ref.h"
