"""Evaluate a run's latest checkpoint (or its base policy): avg@k, pass@k, per level; the
config is the workdir's config.json, `--config.x.y=…` flags on top (ada_jax.run_config).

  python scripts/evaluate.py --workdir=workdir --k=16 --samples=2   # + 2 completions per level
  python scripts/evaluate.py --workdir=workdir --out=workdir/heldout.json  # also to a file
"""
import json
import os
import sys

import jax
from absl import app, flags
from ml_collections import config_flags

import ada_jax
from ada_jax import evaluate, run_config, sharding, train
from ada_jax.config_check import parse_flags, refuse_bad_config, validate

_DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "base.py")
refuse_bad_config(sys.argv, _DEFAULT_CONFIG)  # before absl's traceback or bare AttributeError
_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG,
    "Config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "workdir", "Run directory.")
_K = flags.DEFINE_integer("k", 16, "Samples per prompt.")
_BASE = flags.DEFINE_bool("base", False, "Evaluate the base policy instead of the RL one.")
_SAMPLES = flags.DEFINE_integer("samples", 0, "Print this many sample completions per level.")
_OUT = flags.DEFINE_string("out", "", "Also write the metrics (the printed JSON) to this file.")


def main(argv):
    del argv
    ada_jax.console_logging()
    if not os.path.exists(os.path.join(_WORKDIR.value, "config.json")):
        print(f"note: {_WORKDIR.value} has no config.json; evaluating with the command line's "
              f"config", file=sys.stderr)
    config = run_config.for_workdir(_CONFIG.value, sys.argv, _WORKDIR.value)
    validate(config)
    if not _BASE.value:  # the checkpoint brings the params: don't SFT just for the structure
        config.unlock()
        config.sft.steps = 0
    ctx, params = train.setup(config, _WORKDIR.value)
    step = 0
    if not _BASE.value:
        restored = train.restore_policy(ctx, params, _WORKDIR.value)
        if restored is None:
            raise SystemExit(f"no checkpoint in {_WORKDIR.value}/checkpoints (use --base)")
        step, params = restored
    with sharding.activate(ctx.mesh, config.sharding_rules):
        out = evaluate.evaluate(ctx.graphdef, params, ctx.tokenizer, ctx.eval_problems, config,
                                jax.random.key(config.seed + 99), _K.value, _SAMPLES.value)
    for s in out.pop("samples", []):
        print(f"--- level {s['level']}  reward {s['reward']:g}  (answer {s['answer']})\n"
              f"{s['question']}\n>>> {s['completion']}\n")
    out["step"] = step
    print(json.dumps(out))
    if _OUT.value and jax.process_index() == 0:
        tmp = _OUT.value + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, _OUT.value)


if __name__ == "__main__":
    app.run(main, flags_parser=lambda argv: parse_flags(argv, _DEFAULT_CONFIG))
