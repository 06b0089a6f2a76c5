"""Produce the base policy by SFT and report its pass-rate spread.

  python scripts/sft.py --workdir=workdir   # the base (+ pass_rates.json) in the SFT cache
                                            # (ada_jax/base_policy.py), or sft.base_dir when set
  python scripts/sft.py --print_shipped     # the base shipped for this SFT config, if any

It trains a base even where the package ships one for the config (base_policy.SHIPPED).
"""
import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

import ada_jax
from ada_jax import base_policy, sharding
from ada_jax.config_check import parse_flags, refuse_bad_config, validate
from ada_jax.tokenizer import load_tokenizer

_DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "base.py")
refuse_bad_config(sys.argv, _DEFAULT_CONFIG)  # before absl's traceback or bare AttributeError
_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG,
    "Config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "workdir", "Run directory (its base/ if it has one).")
_K = flags.DEFINE_integer("k", 16, "Samples per eval prompt for the pass-rate report.")
_PRINT_SHIPPED = flags.DEFINE_bool("print_shipped", False, "Print the folder of the base "
                                   "shipped for this SFT config (nothing if none) and exit.")


def main(argv):
    del argv
    ada_jax.console_logging()
    config = _CONFIG.value
    validate(config)
    mesh = sharding.make_mesh(config.mesh)
    tokenizer = load_tokenizer(config)
    if _PRINT_SHIPPED.value:
        print(base_policy.shipped_dir(base_policy.sft_fingerprint(config, tokenizer)) or "")
        return
    out_dir = base_policy.base_dir(config, _WORKDIR.value, tokenizer, shipped=False)
    graphdef, params = base_policy.load(config, _WORKDIR.value, mesh, tokenizer, shipped=False)
    with sharding.activate(mesh, config.sharding_rules):
        report = base_policy.report(config, graphdef, params, tokenizer, _K.value)
    base_policy.write_report(report, out_dir)
    print(json.dumps(report))


if __name__ == "__main__":
    app.run(main, flags_parser=lambda argv: parse_flags(argv, _DEFAULT_CONFIG))
