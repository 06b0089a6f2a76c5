"""Compile cost of the learner step against depth, with and without model.scan_layers.

Each configuration runs in its own process (so each compile's memory is its own): a random-
weight model of SmolLM2-135M's shape (d 576, 9 / 3 heads, d_ff 1536, vocabulary 49,152,
bfloat16 compute over float32 weights, remat) at L layers, its GRPO `train_step`
(learn.make_train_step: 4 micro-batches of 8 rows, prompt 64 + completion 64 tokens, clipping
and AdamW) lowered and compiled for CPU. Reported per configuration: compile seconds, the
process's resident memory before and after the compile (the compile's own cost: XLA frees
little of it back), the compiled programs' temporary buffers and gradient (`memory_analysis`:
what a step needs beyond the params and optimizer state) and the optimized HLO's size (what
grows with depth).

  python scripts/bench/bench_learner_compile.py --quick     # 6 layers, both variants
  python scripts/bench/bench_learner_compile.py             # 6 and 30 layers
"""
import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

GiB = 2 ** 30


def rss_gib() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / GiB


def one(layers: int, scan: bool) -> dict:
    """Compile the learner step once in this process and measure it."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from ada_jax import host_memory, learn
    from ada_jax import model as model_lib
    from configs import base
    c = base.get_config("algo=grpo,task=embedded")
    c.rl.update(prompts_per_step=8, n=4, minibatches=1, microbatches=4)
    cfg = model_lib.ModelConfig(vocab_size=49_152, d_model=576, n_layers=layers, n_heads=9,
                                n_kv_heads=3, d_ff=1536, head_dim=64, rope_base=1e5,
                                dtype="bfloat16", remat=True, scan_layers=scan)
    graphdef, params = nnx.split(model_lib.Transformer(cfg, nnx.Rngs(0)))
    optimizer = learn.make_optimizer(c)
    trainable = {"model": params}
    opt_state = optimizer.init(trainable)
    host_memory.release_free_heap()
    before = rss_gib()
    R, P, N = 32, 64, 64
    rng = np.random.default_rng(0)
    mb = dict(tokens=jnp.asarray(rng.integers(0, cfg.vocab_size, (R, P + N)), jnp.int32),
              mask=jnp.ones((R, P + N), bool), loss_mask=jnp.ones((R, N), bool),
              old_logp=jnp.full((R, N), -1.0), adv=jnp.asarray(rng.normal(size=R), jnp.float32),
              group=jnp.asarray(np.repeat(np.arange(8), 4), jnp.int32),
              mu=jnp.full((R,), 0.5))
    step = learn.make_train_step(graphdef, optimizer, c, n_groups=8)
    t0 = time.time()
    gradient = step.gradient.lower(trainable, opt_state, mb, jnp.asarray(False)).compile()
    grads = jax.eval_shape(lambda t: t, trainable)
    apply_params = step.apply_params.lower(trainable, opt_state, grads,
                                           jnp.asarray(True)).compile()
    apply_state = step.apply_state.lower(opt_state, grads, trainable,
                                         jnp.asarray(True)).compile()
    seconds = time.time() - t0
    temp = lambda p: p.memory_analysis().temp_size_in_bytes / GiB  # noqa: E731
    out = lambda p: p.memory_analysis().output_size_in_bytes / GiB  # noqa: E731
    return dict(layers=layers, scan=scan, compile_s=round(seconds, 1),
                rss_before_gib=round(before, 2), compile_rss_gib=round(rss_gib() - before, 2),
                # beyond the params and optimizer state: the gradient program's temporaries
                # and its output (the gradient), or an update's temporaries beside the gradient
                temp_gib=round(out(gradient) + max(temp(gradient), temp(apply_params),
                                                   temp(apply_state)), 3),
                hlo_mchars=round(sum(len(p.as_text()) for p in (gradient, apply_params,
                                                                apply_state)) / 1e6, 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="6 layers only")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)  # "layers,scan": a child
    a = ap.parse_args()
    if a.one:
        layers, scan = a.one.split(",")
        print(json.dumps(one(int(layers), scan == "1")))
        return
    results = []
    for layers in (6,) if a.quick else (6, 30):
        for scan in (0, 1):
            got = subprocess.run([sys.executable, __file__, f"--one={layers},{scan}"],
                                 capture_output=True, text=True, cwd=REPO,
                                 env=dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu"))
            if got.returncode:
                raise RuntimeError(got.stderr[-3000:])
            results.append(json.loads(got.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    from ada_jax import host_cpu
    print(json.dumps(dict(host=host_cpu(), date=time.strftime("%Y-%m-%d"), results=results)))


if __name__ == "__main__":
    main()
