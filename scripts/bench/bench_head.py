"""A tied output head's log-probs and their gradient, by rows against by vocabulary chunks
(`logprobs.head_logprobs`; docs/benchmarks.md, "A tied head by vocabulary chunks").

  python scripts/bench/bench_head.py [--model_dir=/tmp/smollm2] [--rows=8] [--length=48] [--quick]

One jitted value_and_grad from final hidden states [rows, length, d] to the log-probs and
entropies (gradient to the embedding and the hidden states), on one device, each path forced
(`logprobs.MIN_VOCAB_CHUNK` above the vocabulary sends a tied head by rows), calls interleaved:
CPU seconds per call (min, median, every repetition) and XLA's temporary bytes of each program.
Last line: one JSON object.
"""
import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from ada_jax import convert, sharding  # noqa: E402
from ada_jax import logprobs  # noqa: E402
from configs import base  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model_dir", default="/tmp/smollm2", help="a converted HF folder")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--length", type=int, default=48)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 repetitions")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.model_dir, "config.json")):
        sys.exit(f"no converted model at {a.model_dir}: scripts/convert_gguf.py (README)")
    mesh = sharding.make_mesh(dict(data=1, fsdp=1, tensor=1), jax.devices()[:1])
    cfg, graphdef, params = convert.load_hf_checkpoint(a.model_dir, mesh,
                                                       base.get_config("").sharding_rules)
    if not cfg.tie_embeddings:
        sys.exit(f"{a.model_dir}: a separate output head; this compares a tied head's paths")
    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.normal(size=(a.rows, a.length, cfg.d_model)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, cfg.vocab_size, size=(a.rows, a.length)))
    paths = {"rows": cfg.vocab_size + 1, "vocab": logprobs.MIN_VOCAB_CHUNK}
    programs, temp = {}, {}
    for name, min_chunk in paths.items():
        logprobs.MIN_VOCAB_CHUNK = min_chunk  # read at trace time

        def loss(p, h):
            lp, ent = logprobs.head_logprobs(nnx.merge(graphdef, p), h, targets)
            return lp.sum() + ent.sum()
        compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(
            params, hidden).compile()
        temp[name] = compiled.memory_analysis().temp_size_in_bytes
        programs[name] = compiled
        jax.block_until_ready(compiled(params, hidden))
    reps = 2 if a.quick else a.reps
    times = {name: [] for name in programs}
    for _ in range(reps):
        for name, fn in programs.items():
            t = time.process_time()
            jax.block_until_ready(fn(params, hidden))
            times[name].append(time.process_time() - t)
    out = dict(model_dir=a.model_dir, vocab=cfg.vocab_size, rows=a.rows, length=a.length,
               vocab_chunk=logprobs.vocab_chunk(a.rows * a.length, cfg.vocab_size),
               cpu_s={k: dict(min=min(v), median=float(np.median(v)), reps=v)
                      for k, v in times.items()},
               temp_bytes=temp,
               ratio_vocab_over_rows=float(np.median(times["vocab"]) / np.median(times["rows"])))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
