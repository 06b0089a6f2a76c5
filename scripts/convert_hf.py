"""Load a Hugging Face checkpoint (Qwen2/Qwen2.5, Llama-3) onto the device mesh, report its
model config against configs/base.py, and optionally export it back to safetensors.

  python scripts/convert_hf.py --hf_dir=/ckpt/Qwen2.5-Math-7B
  python scripts/convert_hf.py --hf_dir=/ckpt/Qwen2.5-Math-7B --out=/tmp/qwen --dtype=bfloat16

Training reads the folder directly (`--config.model.init_from=/ckpt/...`); this script checks a
download before a run and shows the HF export the trainer's checkpoints go through.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ada_jax import convert, model as model_lib, sharding  # noqa: E402
from configs import base  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hf_dir", required=True, help="folder with config.json and *.safetensors")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--mesh", default="1,-1,1", help="data,fsdp,tensor (-1: the rest)")
    p.add_argument("--out", default="", help="export the loaded params to this folder")
    p.add_argument("--max_shard_gb", type=float, default=5.0)
    a = p.parse_args()
    mesh = sharding.make_mesh(dict(zip(sharding.AXES, map(int, a.mesh.split(",")))))
    config = base.get_config("")
    cfg, _, params = convert.load_hf_checkpoint(a.hf_dir, mesh, config.sharding_rules,
                                                param_dtype=a.dtype)
    print(f"loaded {model_lib.count_params(params) / 1e9:.3f}B params onto mesh "
          f"{dict(mesh.shape)}\n{cfg}")
    arch = convert.architecture(cfg)
    match = [n for n, entry in base.MODELS.items()
             if convert.architecture(model_lib.ModelConfig(**entry)) == arch]
    print(f"matches configs/base.py model={match[0]}" if match else
          f"no configs/base.py MODELS entry matches; add one: {arch}")
    if a.out:
        files = convert.export_hf(params, cfg, a.out, source=a.hf_dir, dtype=a.dtype,
                                  max_shard_bytes=int(a.max_shard_gb * 2**30))
        print(f"exported {len(files)} safetensors files to {a.out}")


if __name__ == "__main__":
    main()
