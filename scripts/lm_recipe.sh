# shellcheck shell=sh
# scripts/lm_recipe.sh — the ten-minute recipe's sizes (doc/lm.md, "Ten
# minutes on two cores"), sourced by scripts/lm.sh and scripts/lm_experts.sh
# so that both train the same model: T, B and SIZES (the -D settings both
# models share), each taken from the environment where it is set, and
# RECIPE_EXPERTS, the MoE's experts (lm.sh's EXPERTS when that is unset).
#
# The recipe (doc/lm.md; its "What was tried" has issue 34's retune of
# 2026-11-26 on the fortunes, where a lower lr did better, 1e-3 in place of
# 2e-3, and issue 44's on the corpus of 2026-11-28, where the data no
# longer run out and 2e-3 did better again: 1.7804 nats/byte against
# 1.7922 after 3000 steps of the MoE, and a capacity factor of 2 changed
# nothing, 1.7922 against 1.7933, at a cost in time).
T=${T:-128}
B=${B:-8}
SIZES=${SIZES:--D T=$T -D B=$B -D M=128 -D NH=4 -D H=512 -D L=4 -D LR=0.002 -D MIN_LR=0.0002 -D WARMUP=200 -D CLIP=1.0}
# the MoE's experts: 16 of width 256, top-2 (as many FLOPs a token as the
# dense model's feed-forward layers of width 512), a capacity factor of 4
# (the products skip the empty slots) and the routing bias in place of the
# aux loss (issue 46's bias_rate, which evens the load from the first
# steps: 2026-11-29's equal-steps table and ten minutes, where the MoE came
# out ahead of the dense model; a capacity factor of 2 dropped 1-6 % of the
# choices and was no faster; doc/lm.md says what else was tried)
# shellcheck disable=SC2034 # read by the scripts that source this
RECIPE_EXPERTS="-D E=16 -D HE=256 -D CAP=4 -D BIAS_RATE=0.001 -D AUX=0"
