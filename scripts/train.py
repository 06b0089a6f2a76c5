"""Train with RL on the configured task (default: Ada-Seq-balance, tiny model, family task).

  python scripts/train.py                                    # the main job (docs/results.md)
  python scripts/train.py --config=configs/base.py:algo=grpo --config.rl.steps=100 \
      --workdir=/tmp/grpo

The base policy is SFT'd once per SFT config and reused (cached, ada_jax.sft); the workdir
holds checkpoints (resumed automatically), config.json, metrics.jsonl, TensorBoard events and
plots. On a workdir that
has a config.json, that is the config and `--config.x.y=…` flags go on top (ada_jax.run_config):

  python scripts/train.py --workdir=/tmp/grpo --config.rl.steps=200   # resume, to step 200

Exit status: 0 done; 1 an error, named on the last line of the output (a diverged run too);
143 pre-empted (SIGTERM): the checkpoint of the step is saved, and the same command resumes
(docs/scaling.md §5e). One run per workdir: a second one is refused at once (ada_jax.rundir).

Every --config field, its default and its verl / TRL name: docs/config.md.
"""
import os
import sys

from absl import app, flags
from ml_collections import config_flags

import ada_jax
from ada_jax import preemption, run_config, sharding, train
from ada_jax.config_check import parse_flags, refuse_bad_config, validate

_DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "base.py")
refuse_bad_config(sys.argv, _DEFAULT_CONFIG)  # before absl's traceback or bare AttributeError
_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG, "Config file (with :key=value variant args).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "workdir", "Run directory.")
_PLOTS = flags.DEFINE_bool("plots", True, "Draw plots into <workdir>/plots at the end.")


def main(argv):
    del argv
    ada_jax.console_logging()
    sys.excepthook = sharding.exit_at_once  # an error is the log's last line
    config = run_config.for_workdir(_CONFIG.value, sys.argv, _WORKDIR.value)
    validate(config)  # again: command-line overrides come after get_config's check
    try:
        train.train_and_evaluate(config, _WORKDIR.value)
    except preemption.Preempted as e:  # saved: the same command resumes
        print(f"ada_jax: {e}", file=sys.stderr)
        sys.exit(preemption.EXIT_CODE)
    import jax
    if jax.process_index() != 0:  # multi-host: process 0 writes the summary and plots
        return
    from ada_jax import plots
    print(plots.run_summary(_WORKDIR.value))
    if _PLOTS.value:
        print("plots:", *plots.plot_runs([_WORKDIR.value], os.path.join(_WORKDIR.value,
                                                                         "plots")),
              sep="\n  ")


if __name__ == "__main__":
    app.run(main, flags_parser=lambda argv: parse_flags(argv, _DEFAULT_CONFIG))
