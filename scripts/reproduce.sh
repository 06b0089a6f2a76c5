#!/usr/bin/env bash
# The comparisons of docs/results.md: every method, several seeds, same prompt batch and steps,
# all starting from one shared SFT base policy.
#   bash scripts/reproduce.sh [OUT_DIR] [STEPS] [SEEDS]
# Environment knobs: TASK (families, the family task and the config's default; or embedded,
# the style testbed),
# FAMILY_SET (families: rl = every RL family, hard = the hard prompt set), LR (RL learning
# rate; default the config's), TRAIN_SIZE (size of the training prompt pool), EVAL_EVERY, TARGET (accuracy for
# "tokens to reach"), METHODS_ONLY (space-separated subset), BASE (an existing base policy to
# share, e.g. the main job's workdir/base), BAR (a method: everyone's cost to reach its final
# accuracy; comma-separated: the best of them per seed), CLAIMS (a>b pairs: per-seed orderings
# at step STEPS), BUDGET (every arm runs until it has spent this many samples generated +
# trained, STEPS_CAP steps at most; STEPS is then the matched step of the claims), EVAL_COST
# (also evaluate on this cost grid), EXTRA (flags added to every run).
# Runs two at a time (2 CPU cores); prints the markdown table and writes plots to OUT/plots.
set -euo pipefail
OUT=${1:-runs}
STEPS=${2:-30}
SEEDS=${3:-"0 1 2"}
TASK=${TASK:-families}
TRAIN_SIZE=${TRAIN_SIZE:-20000}
EVAL_EVERY=${EVAL_EVERY:-5}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
# The base: BASE if given, else the one the package ships for this SFT config (the family
# task's), else a new one SFT'd into OUT/base.
if [ -z "${BASE:-}" ]; then
  ERR=$(mktemp)
  BASE=$(python scripts/sft.py --config=configs/base.py:task=$TASK --print_shipped 2>"$ERR" \
    | tail -n 1) || { cat "$ERR" >&2; echo "reproduce.sh: scripts/sft.py --print_shipped failed" \
    "(is ada_jax installed? pip install -e .)" >&2; rm -f "$ERR"; exit 1; }
  rm -f "$ERR"
fi
BASE=${BASE:-"$OUT/base"}
[ -d "$BASE" ] || python scripts/sft.py --config=configs/base.py:task=$TASK --workdir="$OUT" \
  --config.sft.base_dir="$BASE" --config.log.progress=False

# Held-out eval (eval/…), avg@4: 256 prompts of the embedded task, 1,488 distinct ones (12 per
# RL family, 48 per control) of the family task. On the family task every method takes 2 optimiser updates per
# step (the reference papers' matched steps); on the embedded task GRPO-n16 takes 4 (its historical
# setting).
if [ "$TASK" = families ]; then
  TASK_FLAGS="--config.task.family_set=${FAMILY_SET:-rl}"; MB_BIG=2
else
  TASK_FLAGS="--config.task.eval_size=256 --config.eval.prompts=256"; MB_BIG=4
fi
RUN_STEPS=$STEPS
if [ -n "${BUDGET:-}" ]; then
  RUN_STEPS=${STEPS_CAP:-1000}
  TASK_FLAGS="$TASK_FLAGS --config.rl.cost_budget=$BUDGET"
fi
COMMON="--config.sft.base_dir=$BASE --config.rl.steps=$RUN_STEPS --config.eval.every=$EVAL_EVERY \
 --config.eval.every_cost=${EVAL_COST:-0} $TASK_FLAGS --config.eval.k=4 \
 ${LR:+--config.optim.lr=$LR} --config.task.train_size=$TRAIN_SIZE \
 --config.checkpoint.every=$RUN_STEPS --config.log.progress=False --plots=false ${EXTRA:-}"
declare -A METHODS=(
  [grpo_n4]="algo=grpo|--config.rl.n=4"
  [grpo_n8]="algo=grpo|--config.rl.n=8"
  [rloo_n4]="algo=rloo|--config.rl.n=4"
  [rloo_n8]="algo=rloo|--config.rl.n=8"
  [grpo_n16]="algo=grpo|--config.rl.n=16 --config.rl.minibatches=$MB_BIG"
  [grpo_n32]="algo=grpo|--config.rl.n=32 --config.rl.minibatches=$MB_BIG"
  [ada_pos]="algo=ada_pos|--config.adaptive.k_pos=2"
  [ada_balance]="algo=ada_balance|"
  [ada_balance_n8]="algo=ada_balance|--config.rl.n=8 --config.adaptive.k_pos=4 --config.adaptive.k_neg=4"
  [ada_balance_rounds]="algo=ada_balance|--config.adaptive.mode=rounds"
  [ada_balance_refill]="algo=ada_balance|--config.adaptive.mode=refill"
  [ada_balance_stream]="algo=ada_balance|--config.adaptive.mode=stream"
  [ada_balance_stream_onpolicy]="algo=ada_balance|--config.adaptive.mode=stream --config.adaptive.stream.on_policy=True"
  [grpo_sage]="algo=grpo|--config.rl.hints=sage --config.sampling.max_prompt_len=112"
  [daro]="algo=daro|"
  [daro_wlr]="algo=daro|--config.optim.daro_lr=0.05"
  [ada_balance_std]="algo=ada_balance|--config.adaptive.mode=refill --config.rl.std_normalise=True"
  [ada_balance_log]="algo=ada_balance|--config.adaptive.mode=refill --config.rl.objective=log --config.rl.objective_weight=True"
)
# The arms each policy module declares (ada_jax/policies/<policy>.py PRESETS: est, gvm, dapo,
# knapsack, vip, greso, pilot_commit, conformal), read from the registry.
while IFS='=' read -r name spec; do
  METHODS[$name]="$spec"
done < <(PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" python -m ada_jax.collect presets)
if [ -n "${METHODS_ONLY:-}" ]; then
  for name in "${!METHODS[@]}"; do
    [[ " $METHODS_ONLY " == *" $name "* ]] || unset "METHODS[$name]"
  done
fi
jobs=()
for name in "${!METHODS[@]}"; do
  for seed in $SEEDS; do
    IFS='|' read -r variant extra <<< "${METHODS[$name]}"
    wd="$OUT/${name}_s${seed}"
    [ -f "$wd/DONE" ] && continue
    jobs+=("python scripts/train.py --config=configs/base.py:$variant,task=$TASK --workdir=$wd \
      --config.seed=$seed $COMMON $extra > $wd.log 2>&1 && touch $wd/DONE")
  done
done
printf '%s\n' "${jobs[@]}" | xargs -P 2 -I{} bash -c '{}' || echo "some runs failed: see $OUT/*.log"
groups=()
for name in $(printf '%s\n' "${!METHODS[@]}" | sort); do
  dirs=$(for s in $SEEDS; do printf '%s,' "$OUT/${name}_s$s"; done)
  groups+=("$name=${dirs%,}")
done
python scripts/analysis/compare.py --groups "${groups[@]}" --out "$OUT/plots" ${TARGET:+--target $TARGET} \
  ${BAR:+--bar $BAR} ${CLAIMS:+--claims $CLAIMS --step $STEPS}
