"""Where the learner's CPU time goes: XLA's dot against torch's matmul on the learner's
GEMM shapes, and the learner step (forward + backward of the peer bench's base Qwen2 sizes) with
parts of the model removed.

  python scripts/bench/bench_gemm.py [--quick]

(a) GEMMs: [rows·T, d] x [d, d_ff] and the backward's shapes, CPU seconds per call of a jitted
    XLA dot and of torch.mm (torch at --threads threads), interleaved; GFLOP per CPU-second.
(b) Ablation: CPU seconds of one value_and_grad of the completion log-likelihood (the learner's
    forward and backward) for the whole model, and with RoPE, attention (all but its q and o
    projections) or the MLP replaced by the identity: what each part costs.
(c) Decode dots by dtype: a sampler's [M, 576] @ [576, 1536] (SmolLM2's MLP) and tied head
    [M, 576] x [49152, 576] at M = 16 and 64, in float32, bfloat16 with a bfloat16 result and
    bfloat16 accumulated in float32 (the model's dots); the head contracting the embedding in
    place or through its transpose. GFLOP per CPU-second.
(d) Token draws: CPU milliseconds of one `sampling.sample_token` on [M, 49152] float32 logits
    (SmolLM2's vocabulary) at M = 16 and 64, for each `sampling.draw` (Gumbel-max's B x V
    random bits against the inverse CDF's one uniform a row), the log-prob included.
Torch is optional: without it (a) reports XLA alone. Last line: one JSON object.
"""
import argparse
import os
import json
import time

import jax
import jax.numpy as jnp
import numpy as np


def _cpu(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        ts.append(time.process_time() - t)
    return float(np.median(ts))


def gemms(rows_t: int, d: int, f: int, reps: int, threads: int) -> dict:
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    out = {}
    for m, k, n in ((rows_t, d, f), (rows_t, f, d), (d, rows_t, f), (rows_t, d, d)):
        a = np.random.default_rng(0).standard_normal((m, k), np.float32)
        b = np.random.default_rng(1).standard_normal((k, n), np.float32)
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        dot = jax.jit(lambda x, y: x @ y)
        gf = 2 * m * k * n / 1e9
        row = {"xla_gflops_per_cpu_s": gf / _cpu(lambda: dot(ja, jb).block_until_ready(), reps)}
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            row["torch_gflops_per_cpu_s"] = gf / _cpu(lambda: torch.mm(ta, tb), reps)
            row["torch_over_xla"] = row["torch_gflops_per_cpu_s"] / row["xla_gflops_per_cpu_s"]
        out[f"{m}x{k}x{n}"] = {key: round(v, 2) for key, v in row.items()}
    return out


def ablation(rows: int, prompt: int, new: int, reps: int) -> dict:
    from flax import nnx

    from ada_jax import model as M

    from ada_jax import logprobs
    cfg = M.ModelConfig(vocab_size=512, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2,
                        d_ff=1024, head_dim=64, rope_base=1e4, qkv_bias=True,
                        tie_embeddings=True, norm_eps=1e-6, max_len=prompt + new)
    toks = jnp.asarray(np.random.default_rng(0).integers(0, 500, (rows, prompt + new)))
    mask = jnp.ones(toks.shape, bool)
    adv = jnp.asarray(np.random.default_rng(1).standard_normal(rows), jnp.float32)
    originals = (M.apply_rope, M.Attention.__call__, M.MLP.__call__)

    def attention_projections_only(self, x, positions, rope, kv_mask, layer_cache):
        return M.dense(M.dense(x, self.q[...]), self.o[...], n_in=2), layer_cache

    variants = {"whole": {}, "no_rope": {"rope": lambda x, p, f: x},
                "no_attention": {"attn": attention_projections_only},
                "no_mlp": {"mlp": lambda self, x: x}}
    out = {}
    for name, patch in variants.items():
        M.apply_rope = patch.get("rope", originals[0])
        M.Attention.__call__ = patch.get("attn", originals[1])
        M.MLP.__call__ = patch.get("mlp", originals[2])
        graphdef, params = nnx.split(M.Transformer(cfg, nnx.Rngs(0)))

        def loss(p):
            logits, _ = nnx.merge(graphdef, p)(toks, M.positions_from_mask(mask), mask,
                                               logits_slice=(prompt - 1, prompt + new - 1))
            return -jnp.mean(logprobs.token_logprobs(logits, toks[:, prompt:])[0] * adv[:, None])

        step = jax.jit(jax.value_and_grad(loss))
        out[name] = round(_cpu(lambda: jax.block_until_ready(step(params)), reps), 4)
    M.apply_rope, M.Attention.__call__, M.MLP.__call__ = originals
    out["mlp_share"] = round(1 - out["no_mlp"] / out["whole"], 3)
    out["attention_share"] = round(1 - out["no_attention"] / out["whole"], 3)
    out["rope_share"] = round(1 - out["no_rope"] / out["whole"], 3)
    return out


def decode_dtypes(reps: int, d: int = 576, f: int = 1536, vocab: int = 49152,
                  rows: tuple[int, ...] = (16, 64)) -> dict:
    out = {}
    f32, bf16 = jnp.float32, jnp.bfloat16
    mlp = jax.random.normal(jax.random.key(0), (d, f))
    emb = jax.random.normal(jax.random.key(1), (vocab, d))
    in_place = (((1,), (1,)), ((), ()))
    for m in rows:
        x = jax.random.normal(jax.random.key(2), (m, d))
        cases = {
            "mlp_float32": (lambda a, b: a @ b, x, mlp),
            "mlp_bfloat16_result": (lambda a, b: a @ b, x.astype(bf16), mlp.astype(bf16)),
            "mlp_bfloat16_float32_acc": (
                lambda a, b: jnp.dot(a, b, preferred_element_type=f32), x.astype(bf16),
                mlp.astype(bf16)),
            "head_float32": (lambda a, e: jax.lax.dot_general(a, e, in_place), x, emb),
            "head_bfloat16_in_place": (
                lambda a, e: jax.lax.dot_general(a, e, in_place, preferred_element_type=f32),
                x.astype(bf16), emb.astype(bf16)),
            "head_bfloat16_transposed": (
                lambda a, e: jnp.dot(a, e.T, preferred_element_type=f32), x.astype(bf16),
                emb.astype(bf16)),
        }
        for name, (fn, a, b) in cases.items():
            f = jax.jit(fn)
            gf = 2 * m * a.shape[1] * (b.shape[0] if name.startswith("head") else b.shape[1])
            cpu = _cpu(lambda: f(a, b).block_until_ready(), reps)
            out[f"{name}_m{m}"] = gf / 1e9 / cpu
    return out


def token_draws(reps: int, vocab: int = 49152, rows: tuple[int, ...] = (16, 64)) -> dict:
    from ada_jax import sampling
    out = {}
    for m in rows:
        logits = jax.random.normal(jax.random.key(3), (m, vocab)) * 3
        key = jax.random.wrap_key_data(jnp.arange(4, dtype=jnp.uint32), impl="rbg")  # as `sample`
        for draw in sampling.DRAWS:
            cfg = sampling.SamplingConfig(max_new_tokens=1, eos_id=-1, draw=draw)
            f = jax.jit(lambda x, k, cfg=cfg: sampling.sample_token(x, k, cfg))
            out[f"{draw}_m{m}"] = 1e3 * _cpu(lambda: jax.block_until_ready(f(logits, key)), reps)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 reps, 32 rows")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    a = ap.parse_args()
    reps, rows = (3, 32) if a.quick else (9, 64)
    res = {"gemm": gemms(rows * 128, 256, 1024, reps, a.threads),
           "learner_cpu_s": ablation(rows, 64, 64, reps),
           "decode_gflops_per_cpu_s": decode_dtypes(reps * 5),
           "token_draw_cpu_ms": token_draws(reps * 5), "rows": rows, "tokens_per_row": 128,
           "load": round(os.getloadavg()[0], 1)}
    for shape, row in res["gemm"].items():
        print(shape, row)
    print("learner CPU s:", res["learner_cpu_s"])
    print("decode dots, GFLOP per CPU-s:",
          {k: round(v, 1) for k, v in res["decode_gflops_per_cpu_s"].items()})
    print("token draws, CPU ms:", {k: round(v, 1) for k, v in res["token_draw_cpu_ms"].items()})
    print(json.dumps(res))


if __name__ == "__main__":
    main()
