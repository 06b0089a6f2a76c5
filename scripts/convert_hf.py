"""Hugging Face folders in and out: check a download (loads it onto the mesh, names the model=
variant to run it with), or export a trained run's policy so `transformers` generate() runs it.

  python scripts/convert_hf.py --hf_dir=/ckpt/Qwen2.5-Math-7B            # check a download
  python scripts/convert_hf.py --workdir=/runs/qwen7b-ada --out=/tmp/qwen-rl [--step=400]
  python scripts/convert_hf.py --hf_dir=/ckpt/Qwen2.5-Math-7B --out=/tmp/qwen --dtype=bfloat16

Training reads an HF folder directly (`--config.model.init_from=/ckpt/...`).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ada_jax import convert, export, hf_export, model as model_lib, sharding  # noqa: E402
from configs import base  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hf_dir", default="", help="folder with config.json and *.safetensors")
    p.add_argument("--workdir", default="", help="a training run to export (needs --out)")
    p.add_argument("--step", type=int, default=None, help="its checkpoint (default: latest)")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                   help="saved dtype (default: bfloat16 for --hf_dir, the params' for --workdir)")
    p.add_argument("--mesh", default="1,-1,1", help="data,fsdp,tensor (-1: the rest)")
    p.add_argument("--out", default="", help="export to this folder")
    p.add_argument("--max_shard_gb", type=float, default=5.0)
    a = p.parse_args()
    if bool(a.hf_dir) == bool(a.workdir) or (a.workdir and not a.out):
        p.error("give --hf_dir (and optionally --out), or --workdir and --out")
    shard = int(a.max_shard_gb * 2**30)
    mesh = sharding.make_mesh(dict(zip(sharding.AXES, map(int, a.mesh.split(",")))))
    if a.workdir:
        got = export.export_run(a.workdir, a.out, step=a.step, dtype=a.dtype, mesh=mesh,
                                 max_shard_bytes=shard)
        n = convert.human_count(got["params"])
        return print(f"exported step {got['step']} of {a.workdir} ({n} params) to {a.out}: "
                     f"{len(got['files'])} safetensors files, eos_token_id "
                     f"{got['eos_token_id']}, pad_token_id {got['pad_token_id']}")
    cfg, _, params = convert.load_hf_checkpoint(a.hf_dir, mesh, base.get_config("").sharding_rules,
                                                param_dtype=a.dtype or "bfloat16")
    print(f"loaded {convert.human_count(model_lib.count_params(params))} params onto mesh "
          f"{dict(mesh.shape)}\n{cfg}")
    arch = convert.architecture(cfg)
    match = [n for n, entry in base.MODELS.items()
             if convert.architecture(model_lib.ModelConfig(**entry)) == arch]
    print(f"matches configs/base.py model={match[0]}" if match else
          f"no configs/base.py MODELS entry matches; run it with the sizes read from the "
          f"folder: --config=configs/base.py:model=hf --config.model.init_from={a.hf_dir}")
    if a.out:
        files = hf_export.export_hf(params, cfg, a.out, source=a.hf_dir,
                                    dtype=a.dtype or "bfloat16", max_shard_bytes=shard)
        print(f"exported {len(files)} safetensors files to {a.out}")


if __name__ == "__main__":
    main()
