"""Ship an SFT base in the package (ada_jax/assets/bases/<key>): runs whose SFT config is this
one then start from it, on any CPU, with no SFT to run (ada_jax/base_policy.py, `SHIPPED`).

  python scripts/sft.py --config=configs/base.py:task=families --workdir=/tmp/b \
      --config.sft.base_dir=/tmp/b/base                      # make it (25 min on 2 cores)
  python scripts/tools/ship_base.py --config=configs/base.py:task=families --base=/tmp/b/base

Copies the base's newest checkpoint and its pass-rate report, and writes sft_config.json (the
fingerprint its name hashes) and made_by.json (the commit, CPU and JAX that made it).
"""
import datetime
import json
import os
import shutil
import subprocess
import sys

from absl import app, flags
from ml_collections import config_flags

from ada_jax import base_policy
from ada_jax.checkpoint import Checkpointer
from ada_jax.tokenizer import load_tokenizer

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "..", "configs", "base.py"),
    "The config whose SFT made the base.", lock_config=True)
_BASE = flags.DEFINE_string("base", None, "The base folder (sft.base_dir of scripts/sft.py).",
                            required=True)
_COMMIT = flags.DEFINE_string("commit", "", "The commit whose code made it (default: HEAD).")


def main(argv):
    del argv
    config = _CONFIG.value
    fingerprint = base_policy.sft_fingerprint(config, load_tokenizer(config))
    ckpt = Checkpointer(_BASE.value, keep=1)
    step = ckpt.manager.latest_step()
    ckpt.close()
    if step is None:
        sys.exit(f"--base={_BASE.value}: no checkpoint in it")
    out = os.path.join(base_policy.SHIPPED, base_policy.sft_key(fingerprint))
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(os.path.join(_BASE.value, str(step)), os.path.join(out, str(step)))
    for name in ("pass_rates.json",):
        if os.path.exists(os.path.join(_BASE.value, name)):
            shutil.copy(os.path.join(_BASE.value, name), out)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    commit = _COMMIT.value or subprocess.run(["git", "-C", root, "rev-parse", "HEAD"],
                                            capture_output=True, text=True).stdout.strip()
    with open(os.path.join(out, "sft_config.json"), "w") as f:
        json.dump(fingerprint, f, indent=1, sort_keys=True, default=str)
    with open(os.path.join(out, "made_by.json"), "w") as f:
        json.dump({"commit": commit, "sft_steps": step, **base_policy.environment(),
                   "date": datetime.date.today().isoformat()}, f, indent=1, sort_keys=True)
    print(json.dumps({"shipped": out, "step": step}))


if __name__ == "__main__":
    app.run(main)
