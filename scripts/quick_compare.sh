#!/usr/bin/env bash
# The family task's headline in one command (docs/results.md, "Adaptive sampling where group
# sampling collapses"): GRPO-n4, GRPO-n16, Ada-Seq-pos and Ada-Seq-balance, one seed, one
# shared SFT base, the same optimiser updates per step; prints the table (held-out accuracy
# per tier, cost) and each method's cost to reach GRPO-n16's final accuracy, and writes the
# plots vs step and vs cost to OUT/plots. 4.6 minutes on 2 idle cores, SFT included.
#   bash scripts/quick_compare.sh [OUT_DIR]
# Knobs of scripts/reproduce.sh pass through (LR, BASE, ...).
set -euo pipefail
export TASK=families METHODS_ONLY="grpo_n4 grpo_n16 ada_pos ada_balance" EVAL_EVERY=10
export BAR=grpo_n16
exec bash "$(dirname "$0")/reproduce.sh" "${1:-runs_quick}" 40 0
