"""Per-device memory estimate (GiB) for RL on a pretrained model; prints the table in
docs/scaling.md.

  python scripts/memory_estimate.py                    # the doc's table
  python scripts/memory_estimate.py --model=qwen2_5_math_7b --fsdp=4 --tensor=2 --slots=512

Counts what ada_jax allocates: float32 master params, float32 grads and Adam moments (optax
keeps them in the param dtype), a bf16 copy of the params for decoding, the sampler's KV caches
(one per prompt from prefill, one per slot), the prefill transients (one chunk's float32
attention scores over the prompt-length cache the engine prefills, and its last-position
logits) and the learner's activations under remat (each block's input kept, one block
recomputed at a time, float32 logits). The prefill terms match XLA's buffer assignment
(`compiled.memory_analysis()`: 2.93 GiB measured vs 2.97 estimated for 4 rows of a 4-layer
Qwen2.5-0.5B, all-position logits, as the code then was); the learner terms are analytic
(XLA:CPU does not honour remat when assigning buffers, so it cannot check them). Params and
optimizer state are split over fsdp x tensor; batch rows over data x fsdp; heads, kv heads, mlp
and vocab over tensor when it divides them. XLA's temporaries and fragmentation come on top:
keep the peak under ~85% of HBM.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from flax import nnx  # noqa: E402

from ada_jax import model as model_lib  # noqa: E402
from configs import base  # noqa: E402

GiB = 2**30


def n_params(cfg: model_lib.ModelConfig) -> int:
    """Exact parameter count, from the abstract model (nothing is allocated)."""
    return model_lib.count_params(nnx.state(nnx.eval_shape(
        lambda: model_lib.Transformer(cfg, nnx.Rngs(0)))))


def estimate(cfg, *, data=1, fsdp=8, tensor=1, prompts=512, slots=512, prompt_len=1024,
             response_len=2048, micro_batch=2, param_bytes=4, compute_bytes=2,
             prefill_chunk=64, hbm=80.0) -> dict:
    """GiB per device for each item, the peaks of the sampling and learning phases, and the
    most slots that fit in 85% of `hbm` GiB. micro_batch: sequences per device in one learner
    forward/backward (gradient accumulation over the rest); slots: rows decoded at once
    (config.adaptive.slots); prompts: prompts prefilled per step; prefill_chunk: rows per
    prefill call over the whole mesh (config.sampling.prefill_chunk; 0 = all at once)."""
    n = n_params(cfg)
    shard = fsdp * tensor
    rows = data * fsdp  # batch rows are split over these
    def split(dim):
        return tensor if dim % tensor == 0 else 1
    S = T = prompt_len + response_len
    kv_token = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * compute_bytes
    kv_token /= split(cfg.n_kv_heads)
    h, f, v = (cfg.n_heads / split(cfg.n_heads), cfg.d_ff / split(cfg.d_ff),
               cfg.vocab_size / split(cfg.vocab_size))
    prefill_rows = -(-prompts // rows)
    chunk = min(-(-prefill_chunk // rows) if prefill_chunk else prefill_rows, prefill_rows)
    out = dict(
        params_b=n / 1e9,
        params=n * param_bytes / shard,
        grads=n * param_bytes / shard,
        adam=2 * n * param_bytes / shard,
        decode_copy=n * compute_bytes / shard if param_bytes != compute_bytes else 0.0,
        prompt_kv=prefill_rows * prompt_len * kv_token,
        slot_kv=-(-slots // rows) * S * kv_token,
        # the engine prefills prompt-length caches; logits at the last position only; in
        # chunks, the chunks' caches are re-ordered into row order (one more prompt_kv)
        prefill_tmp=chunk * (h * prompt_len * prompt_len + v) * 4
        + (prefill_rows * prompt_len * kv_token if chunk < prefill_rows else 0),
        remat_saved=micro_batch * cfg.n_layers * T * cfg.d_model * compute_bytes,
        # one block's backward: ~20 bytes per attention score (f32 scores, masked scores,
        # exp and their grads, bf16 probs), ~6 bf16 [T, F] MLP arrays
        block_tmp=micro_batch * T * (h * T * 20 + 6 * f * compute_bytes),
        logits=micro_batch * T * v * 4 * 3,  # logits, log-softmax, their gradient
    )
    out = {k: (x if k == "params_b" else x / GiB) for k, x in out.items()}
    state = out["params"] + out["adam"]
    out["sampling_peak"] = (state + out["decode_copy"] + out["prompt_kv"] + out["slot_kv"]
                            + out["prefill_tmp"])
    out["learning_peak"] = (state + out["grads"] + out["remat_saved"] + out["block_tmp"]
                            + out["logits"])
    per_slot = out["slot_kv"] / -(-slots // rows)
    free = 0.85 * hbm - (out["sampling_peak"] - out["slot_kv"])
    out["max_slots"] = max(int(free / per_slot), 0) * rows
    return out


def _slots(name):  # the config's default (sized for one 8xH100 host)
    return base.PRETRAINED[name]["slots"]


# (label, model, mesh (data, fsdp, tensor), HBM GiB per device, prompts, slots, micro_batch)
SETUPS = [
    ("8xH100", "qwen2_5_math_1_5b", (1, 8, 1), 80, 512, _slots("qwen2_5_math_1_5b"), 2),
    ("8xH100", "llama3_2_3b_instruct", (1, 8, 1), 80, 512, _slots("llama3_2_3b_instruct"), 2),
    ("8xH100", "qwen2_5_math_7b", (1, 8, 1), 80, 512, _slots("qwen2_5_math_7b"), 1),
    ("8xH100", "qwen2_5_math_7b", (1, 4, 2), 80, 512, _slots("qwen2_5_math_7b"), 1),
    ("TPU v5p-32 (16 chips, 4 hosts)", "qwen2_5_math_7b", (1, 16, 1), 95, 512, 4096, 1),
    ("TPU v4-64 (32 chips, 8 hosts)", "qwen2_5_math_7b", (2, 8, 2), 32, 512, 2048, 1),
    ("TPU v5e-64 (64 chips, 16 hosts)", "qwen2_5_math_1_5b", (4, 16, 1), 16, 512, 4096, 1),
]
COLUMNS = ("params", "adam", "grads", "decode_copy", "prompt_kv", "slot_kv", "prefill_tmp",
           "remat_saved", "block_tmp", "logits", "sampling_peak", "learning_peak", "max_slots")


def table(prompt_len=1024, response_len=2048, **fixes) -> str:
    head = ["hardware", "model", "mesh d/f/t", "HBM", "slots", "micro"] + list(COLUMNS)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, name, (d, f, t), hbm, prompts, slots, micro in SETUPS:
        cfg = model_lib.ModelConfig(**base.MODELS[name])
        e = estimate(cfg, data=d, fsdp=f, tensor=t, prompts=prompts, slots=slots,
                     prompt_len=prompt_len, response_len=response_len, micro_batch=micro,
                     hbm=hbm, **fixes)
        cells = [label, f"{name} ({e['params_b']:.2f}B)", f"{d}/{f}/{t}", str(hbm), str(slots),
                 str(micro)] + [f"{e[c]:.1f}" if c != "max_slots" else str(e[c])
                                for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="")
    p.add_argument("--data", type=int, default=1)
    p.add_argument("--fsdp", type=int, default=8)
    p.add_argument("--tensor", type=int, default=1)
    p.add_argument("--prompts", type=int, default=512)
    p.add_argument("--slots", type=int, default=512)
    p.add_argument("--micro_batch", type=int, default=2)
    p.add_argument("--prompt_len", type=int, default=1024)
    p.add_argument("--response_len", type=int, default=2048)
    p.add_argument("--hbm", type=float, default=80.0)
    p.add_argument("--prefill_chunk", type=int, default=64)
    a = p.parse_args()
    if not a.model:
        print(f"Prompt {a.prompt_len}, response {a.response_len}, prefill in chunks of "
              f"{a.prefill_chunk} rows:\n")
        print(table(a.prompt_len, a.response_len, prefill_chunk=a.prefill_chunk))
        return
    e = estimate(model_lib.ModelConfig(**base.MODELS[a.model]), data=a.data, fsdp=a.fsdp,
                 tensor=a.tensor, prompts=a.prompts, slots=a.slots, micro_batch=a.micro_batch,
                 prompt_len=a.prompt_len, response_len=a.response_len, hbm=a.hbm,
                 prefill_chunk=a.prefill_chunk)
    for k, x in e.items():
        print(f"{k:>14}: " + (f"{x:8d}" if k == "max_slots" else f"{x:8.2f}")
              + ("" if k in ("params_b", "max_slots") else " GiB"))


if __name__ == "__main__":
    main()
