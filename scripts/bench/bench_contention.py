"""Wall time over CPU time under contention: ada_jax's sampler vs a 1-thread torch loop.

On a loaded machine a CPU-bound thread gets about 2/L of a core at load L on 2 cores, so any
framework's wall/CPU ratio is near L/2; the question is whether XLA's CPU
runtime does worse than torch's. Each variant runs in its own subprocess, interleaved, and
reports the median of `--reps` calls after two warm-ups: ada_jax `sampling.sample` on the tiny
model (B=32, P=32, N=64) under XLA's defaults and with `--xla_cpu_multi_thread_eigen=false`,
and torch at 1 thread doing 2,560 small matmuls (32 x 256 @ 256 x 256). Start the load
yourself (e.g. `for i in $(seq 14); do python -c "while True: pass" & done`). Last line: JSON.

  python scripts/bench/bench_contention.py --quick    # 1 round, 3 reps
"""
import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker(kind: str, reps: int) -> dict:
    import numpy as np
    if kind == "torch":
        import torch
        torch.set_num_threads(1)
        x, w = torch.randn(32, 256), torch.randn(256, 256)

        def run(i):
            y = x
            for _ in range(64 * 40):
                y = torch.tanh(y @ w)
    else:
        import jax
        import jax.numpy as jnp
        from flax import nnx
        sys.path.insert(0, REPO)
        from ada_jax import model as model_lib, sampling
        from configs.base import MODELS
        cfg = model_lib.ModelConfig.from_config(MODELS["tiny"])
        g, p = nnx.split(model_lib.Transformer(cfg, nnx.Rngs(0)))
        tok = jnp.asarray(np.random.default_rng(0).integers(4, cfg.vocab_size, (32, 32)),
                          jnp.int32)
        sc = sampling.SamplingConfig(max_new_tokens=64, eos_id=-1, temperature=1.0)

        def run(i):
            jax.block_until_ready(sampling.sample(g, p, tok, jnp.ones((32, 32), bool),
                                                  jax.random.key(i), cfg=sc))
    run(0), run(1)
    walls, cpus = [], []
    for i in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        run(i + 2)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return dict(wall_s=float(np.median(walls)), cpu_s=float(np.median(cpus)),
                load=os.getloadavg()[0])


VARIANTS = {"ada_jax": ("jax", {}),
            "ada_jax_eigen_off": ("jax", {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}),
            "torch_1thread": ("torch", {})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 round of 3 reps")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--worker", choices=["jax", "torch"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    reps = a.reps or (3 if a.quick else 5)
    if a.worker:
        print(json.dumps(worker(a.worker, reps)))
        return
    out = {}
    for r in range(a.rounds or (1 if a.quick else 2)):
        for name, (kind, env) in VARIANTS.items():
            res = subprocess.run([sys.executable, __file__, "--worker", kind, "--reps", str(reps)],
                                 env=dict(os.environ, **env), capture_output=True, text=True,
                                 check=True)
            m = json.loads(res.stdout.strip().splitlines()[-1])
            m["wall_over_cpu"] = m["wall_s"] / m["cpu_s"]
            out.setdefault(name, []).append(m)
            print(f"round {r} {name}: wall {m['wall_s']:.2f} s, CPU {m['cpu_s']:.2f} s, "
                  f"wall/CPU {m['wall_over_cpu']:.1f}x, load {m['load']:.1f}", flush=True)
    med = {k: sorted(x["wall_over_cpu"] for x in v)[len(v) // 2] for k, v in out.items()}
    print(json.dumps(dict(wall_over_cpu=med, load=os.getloadavg()[0],
                          jax_vs_torch=med["ada_jax"] / med["torch_1thread"])))


if __name__ == "__main__":
    main()
