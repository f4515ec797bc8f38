/* moe_top4_zloss_check.c — the C reference of moe_top4_zloss.gsl: top 4
 * of 8, capacity 1.0, z-loss 0.01 (see moe_ref.h for the computation). */
#define MOE_GSL "moe_top4_zloss.gsl"
#define MOE_TOP 4
#define MOE_CAPACITY 1.0
#define MOE_ZLOSS 0.01
#define MOE_WANT_LATER_KEPT 1
#include "moe_ref.h"
