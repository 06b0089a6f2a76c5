"""Per-device memory (GiB) of a run, counted for the mode that runs (ada_jax/memory.py); prints
the table in docs/scaling.md §6.

  python scripts/analysis/memory_estimate.py                         # every pretrained config, 8xH100
  python scripts/analysis/memory_estimate.py $RUN --devices=1 --host   # a run of scripts/train.py
  python scripts/analysis/memory_estimate.py --config=configs/base.py:model=qwen2_5_math_7b \\
      --devices=16 --hbm=95 --config.mesh.fsdp=16 --config.adaptive.slots=4096

It reads the same flags as scripts/train.py and estimates the run they describe (README, "Bring
a real model": `$RUN`); a flag left out is the config's default (model=hf's: the reference
run's 512 prompts a step, sized for a pod).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from ada_jax import memory  # noqa: E402
from configs import base  # noqa: E402

config_flags.DEFINE_config_file("config", None, "a config (default: every pretrained model)",
                                lock_config=False)
flags.DEFINE_integer("devices", 8, "devices the mesh spans")
flags.DEFINE_float("hbm", 80.0, "GiB of memory per device")
flags.DEFINE_bool("host", False, "also print the predicted peak RSS of the run on one CPU host "
                  "(memory.host_peak_bytes)")
COLUMNS = ("params", "adam", "grads", "decode_copy", "prompt_kv", "slot_kv", "engine",
           "prefill_tmp", "resume_tmp", "batch", "remat_saved", "block_tmp", "logits",
           "sampling_peak", "learning_peak", "resident_learning")


def row(config, devices, hbm) -> str:
    e = memory.in_gib(memory.estimate(config, devices, hbm))
    cells = [f"{config.model.name} ({e['params_b']:.2f}B)", e["mode"], e["mesh"], str(e["slots"]),
             str(e["prompts"]), str(e["micro"])] + [f"{e[k]:.2f}" for k in COLUMNS]
    return "| " + " | ".join(cells + [f"{100 * e['headroom']:.0f}%", str(e["max_slots"])]) + " |"


def main(_):
    f = flags.FLAGS
    configs = [f.config] if f.config else [base.get_config(f"model={m}") for m in base.PRETRAINED]
    head = ["model", "mode", "mesh d/f/t", "slots", "prompts", "micro"] + list(COLUMNS) + [
        "headroom", "max_slots"]
    print(f"GiB per device, {f.devices} devices of {f.hbm:g} GiB\n")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for c in configs:
        print(row(c, f.devices, f.hbm))
    if f.host:
        for c in configs:
            print(f"\n{c.model.name}: predicted peak RSS on one CPU host "
                  f"{memory.host_peak_bytes(c) / memory.GiB:.2f} GiB")


if __name__ == "__main__":
    app.run(main)
