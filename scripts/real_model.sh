#!/usr/bin/env bash
# RL methods on a pretrained model from one base, every arm to the same cost, with the held-out
# accuracy per level before and after (docs/real_model.md).
#   bash scripts/real_model.sh MODEL_DIR TASK_DIR [OUT_DIR] [SEEDS]
# MODEL_DIR: a Hugging Face folder (scripts/convert_gguf.py); TASK_DIR: train.jsonl and
# eval.jsonl (scripts/tools/make_arithmetic_task.py). Environment knobs:
#   ARMS (grpo_n4 ada_pos ada_balance; also grpo_n8), BUDGET (samples generated + trained per
#   run, 768), LR (1e-5), PROMPTS (prompts a step, 8), NEW_TOKENS (48), ANSWER (last_number, or
#   boxed), EVAL_K (held-out samples a question, 2), DTYPE (compute dtype, auto: float32 on a
#   CPU, where a bfloat16 step is no faster, bfloat16 on accelerators; docs/real_model.md's
#   first runs set bfloat16), EXTRA (flags added to every run);
#   EVAL_ROWS (rows decoded at once in every held-out evaluation; default the sampler's slots,
#   PROMPTS x 4), GRID_PROMPTS (in-run evaluations, `eval.every_cost` in EXTRA, on the first
#   this many held-out questions, which interleave the levels; default all; the base's and each
#   run's final evaluation always take every question);
#   JOBS (runs at a time, 2: the CPU's cores, each run pinned to its share), PRUNE (1: delete a
#   run's checkpoints once its final evaluation is written, for a study whose checkpoints would
#   fill the disk; such a run cannot be extended to a larger BUDGET), KEEP (a folder, e.g. one
#   in the repository: the base's evaluation and each finished run's metrics.jsonl,
#   config.json and final evaluation are copied there, runs found there are not run again, and
#   the tables read them there: a study that outlives the machine it ran on).
# Runs seed by seed (every arm of seed 0, then of seed 1, ...), so a study cut short holds
# paired comparisons; prints scripts/analysis/before_after.py's tables (each arm against
# each GRPO arm: at the budget, and at matched steps, samples and FLOP-weighted cost). Each run's
# final policy is evaluated into RUN/heldout_BUDGET.json; run again with a larger BUDGET, the
# runs resume where they stopped (a run to a larger budget is the smaller one's run followed by
# more steps: constant lr) and the tables read them at the new budget.
set -euo pipefail
MODEL=$1; TASK=$2; OUT=${3:-runs_real}; SEEDS=${4:-"0 1 2"}
ARMS=${ARMS:-"grpo_n4 ada_pos ada_balance"}
cd "$(dirname "$0")/.."
# This checkout's package, not whichever one pip installed (a study pinned to a clone of another
# commit would otherwise import the editable install's ada_jax)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
# One base for every arm: the checkpoint as converted, its own chat template and stop tokens,
# an empty system turn (the template's default), answers read as the last number by default;
# the held-out evaluation decodes as many samples at once as a step's sampler has slots (its
# memory stays within the run's).
COMMON="--config.model.init_from=$MODEL --config.task.files=$TASK/train.jsonl \
 --config.task.eval_files=$TASK/eval.jsonl --config.task.answer=${ANSWER:-last_number} \
 --config.task.system_prompt= --config.sampling.max_prompt_len=128 \
 --config.sampling.max_new_tokens=${NEW_TOKENS:-48} --config.eval.prompts=100000 \
 --config.eval.batch_rows=${EVAL_ROWS:-$(( ${PROMPTS:-8} * 4 ))} \
 --config.rl.prompts_per_step=${PROMPTS:-8} --config.model.dtype=${DTYPE:-auto}"
# Small steps for 2 cores: one optimiser update a step in micro-batches of 8 rows, no warm-up
# (an arm with fewer, larger steps would otherwise spend its run warming up), Ada-Seq pools of
# up to 4 rounds of 4 samples.
RL="--config.rl.steps=100000 --config.rl.cost_budget=${BUDGET:-768} --config.rl.minibatches=1 \
 --config.rl.microbatches=$(( ${PROMPTS:-8} / 2 )) --config.optim.lr=${LR:-1e-5} \
 --config.optim.warmup_steps=0 --config.adaptive.mode=refill \
 --config.adaptive.slots=$(( ${PROMPTS:-8} * 4 )) --config.adaptive.samples_per_round=4 \
 --config.adaptive.max_rounds=4 --config.eval.every=0 --config.checkpoint.every=100000 \
 --config.log.progress=False --config.eval.prompts=${GRID_PROMPTS:-100000} ${EXTRA:-}"
declare -A METHODS=(
  [grpo_n4]="algo=grpo|--config.rl.n=4"
  [grpo_n8]="algo=grpo|--config.rl.n=8"
  [ada_pos]="algo=ada_pos|--config.adaptive.k_pos=2"
  [ada_balance]="algo=ada_balance|"
)
KEEP=${KEEP:-}
[ -z "$KEEP" ] || { mkdir -p "$KEEP"; [ -f "$OUT/base.json" ] || [ ! -f "$KEEP/base.json" ] \
  || cp "$KEEP/base.json" "$OUT/base.json"; }
[ -f "$OUT/base.json" ] || python scripts/evaluate.py --base --workdir="$OUT/base" \
  --config=configs/base.py:algo=grpo,model=hf,task=files $COMMON $RL --k=4 \
  --config.eval.prompts=100000 --out="$OUT/base.json" > "$OUT/base.log" 2>&1 || { tail -5 "$OUT/base.log" >&2; exit 1; }
[ -z "$KEEP" ] || [ -f "$KEEP/base.json" ] || cp "$OUT/base.json" "$KEEP/base.json"
for name in $ARMS; do
  [ -n "${METHODS[$name]:-}" ] || { echo "unknown arm $name: ${!METHODS[*]}" >&2; exit 2; }
done
jobs=()
final=heldout_${BUDGET:-768}.json
for seed in $SEEDS; do
  for name in $ARMS; do
    IFS='|' read -r variant extra <<< "${METHODS[$name]}"
    wd="$OUT/${name}_s$seed"
    [ -f "$wd/$final" ] || { [ -n "$KEEP" ] && [ -f "$KEEP/${name}_s$seed/$final" ]; } && continue
    after=""
    [ -n "$KEEP" ] && after=" && mkdir -p $KEEP/${name}_s$seed && cp $wd/metrics.jsonl \
      $wd/config.json $wd/$final $KEEP/${name}_s$seed/"
    [ "${PRUNE:-0}" = 1 ] && after="$after && rm -rf $wd/checkpoints"
    jobs+=("python scripts/train.py --workdir=$wd \
      --config=configs/base.py:$variant,model=hf,task=files --config.seed=$seed $COMMON $RL \
      $extra >> $wd.log 2>&1 && python scripts/evaluate.py --workdir=$wd --k=${EVAL_K:-2} \
      --config.eval.prompts=100000 --out=$wd/$final >> $wd.log 2>&1$after")
  done
done
# Several runs at a time: each on its own share of the cores (XLA's thread pools spin while they
# wait, so unpinned runs take each other's cycles: two SmolLM2 runs on 2 cores, 1.17x faster a
# step pinned, the same samples; docs/benchmarks.md). The job's shell pins itself, its run inherits.
PIN=$(( $(nproc) / ${JOBS:-2} ))  # cores a run; 0: not pinned
{ [ "${JOBS:-2}" -gt 1 ] && command -v taskset > /dev/null; } || PIN=0
export PIN
pin='[ "$PIN" -ge 1 ] && taskset -pc $((SLOT * PIN))-$((SLOT * PIN + PIN - 1)) $$ > /dev/null; '
printf '%s\n' "${jobs[@]}" | xargs -P "${JOBS:-2}" --process-slot-var=SLOT -I{} bash -c "$pin"'{}' \
  || echo "some runs failed: see $OUT/*.log"
# The tables over the runs that reached the budget (a study cut short: the seeds done)
groups=(); done_arms=()
RESULTS=${KEEP:-$OUT}
for name in $ARMS; do
  dirs=$(for s in $SEEDS; do
    if [ -f "$RESULTS/${name}_s$s/$final" ]; then printf '%s,' "$RESULTS/${name}_s$s"; fi; done)
  if [ -n "$dirs" ]; then groups+=("$name=${dirs%,}"); done_arms+=("$name"); fi
done
[ ${#groups[@]} -gt 0 ] || { echo "no run reached BUDGET=${BUDGET:-768}" >&2; exit 1; }
# Each arm against each GRPO arm it runs beside (else against the first arm), seed by seed
refs=$(for name in "${done_arms[@]}"; do case $name in grpo_*) printf '%s,' "$name";; esac; done)
refs=${refs%,}
python scripts/analysis/before_after.py --base "$RESULTS/base.json" --groups "${groups[@]}" \
  --reference "${refs:-${done_arms[0]}}" --budget "${BUDGET:-768}"
