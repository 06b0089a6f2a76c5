#!/usr/bin/env bash
# The family task's headline in one command (docs/results.md): GRPO-n4, GRPO-n16, Ada-Seq-pos
# and Ada-Seq-balance, one seed, one shared SFT base, the same optimiser updates per step, every
# arm run to the same total cost (GRPO-n16's 24 steps: 12,288 samples generated + trained;
# GRPO-n4 runs 96 steps). Prints the table (held-out accuracy per tier, cost), which of the
# claims hold on this seed at matched steps (step 24), and the bar: each method's cost to reach
# the accuracy of plain GRPO's better arm at that cost, in words; plots vs step and vs cost in
# OUT/plots. The settings of docs/results.md's 5-seed comparison, one seed of it.
#   bash scripts/quick_compare.sh [OUT_DIR]
# Knobs of scripts/reproduce.sh pass through (LR, BASE, ...); SEED picks the seed (default 0).
set -euo pipefail
export TASK=families METHODS_ONLY="grpo_n4 grpo_n16 ada_pos ada_balance" EVAL_EVERY=24
export BUDGET=12288 EVAL_COST=${EVAL_COST:-2048} BAR=grpo_n4,grpo_n16
export CLAIMS="ada_balance>grpo_n4 ada_pos>grpo_n4 ada_balance>ada_pos ada_balance>grpo_n16"
# These runs are seed 0 of docs/results.md's headline (the 112-family task), bitwise on a
# machine whose SFT makes the same base: XLA compiles for the host CPU, so on another CPU the
# base and every number differ (its pass_rates.json names the environment).
exec bash "$(dirname "$0")/reproduce.sh" "${1:-runs_quick}" 24 "${SEED:-0}"
