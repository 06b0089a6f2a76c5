"""Bytes per device that a run keeps, phase by phase, from its config (scripts/analysis/memory_estimate.py
prints the table of docs/scaling.md §6).

Counted from the shapes the code builds (abstract, nothing is allocated): float32 master params,
their gradients and Adam moments (optax keeps them in the param dtype), a compute-dtype copy of
the params for decoding, the prompt caches the engine prefills (B prompts per step; streaming:
the Q = B + A resident prompts, re-prefilled every call), the slot caches and next-token logits,
the engine's token-sized arrays (kept buffers, slots' tokens and log-probs, counters), one
prefill chunk's float32 attention scores, streaming's rebuild of the running samples' caches
(one chunk of prompt + response rows), the step's batch and training rows (replicated, as the
trainer lays them out), and the learner's activations under remat for the config's micro-batch.

Phases: sampling holds state + decode copy + caches + engine arrays + the larger transient;
learning holds state + grads + batch + activations, and in streaming mode the engine's arrays
(the engine keeps no slot caches between calls: ada_jax/stream.py). `resident_learning` is
what is live when the learner starts (params, Adam, batch, stream engine): the test measures it
(tests/test_memory.py). Params, grads and Adam are split by the sharding rules (exactly, per
leaf); rows over the batch axes (data x fsdp) where they divide them; kv heads, heads, mlp and
vocab over tensor where it divides them. XLA's temporaries and fragmentation come on top: a
config should keep its peak under 90% of HBM.
"""
import types

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ada_jax import adaptive, collect, generators, learn, logprobs, selection, sharding
from ada_jax import model as model_lib
from ada_jax.config_check import resolve_hf

GiB = 2**30


def _mesh_shape(config, devices: int) -> dict:
    sizes = {a: int(config.mesh[a]) for a in sharding.AXES}
    known = int(np.prod([s for s in sizes.values() if s != -1]))
    return {a: (devices // known if s == -1 else s) for a, s in sizes.items()}


def _nbytes(x) -> int:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # raw data: 2 uint32 (threefry)
        return int(np.prod(x.shape)) * 8
    return int(np.prod(x.shape)) * jnp.dtype(x.dtype).itemsize


def _rows_split(n: int, rows: int) -> int:
    """Devices a leading dimension of n rows is split over (batch_sharding: only if it divides)."""
    return rows if rows > 1 and n % rows == 0 else 1


def _per_device(tree, rows: int) -> int:
    """Bytes per device of arrays laid out by their leading dimension over `rows` devices."""
    return sum(_nbytes(x) // (_rows_split(x.shape[0], rows) if x.ndim else 1)
               for x in jax.tree.leaves(tree))


def param_bytes(model_cfg, mesh_shape: dict, rules) -> tuple[int, int]:
    """(parameters, bytes per device of the params as sharded by `rules`)."""
    state = model_lib.abstract(model_cfg)[1]
    mesh = types.SimpleNamespace(shape=mesh_shape)
    n = per_device = 0
    for var in jax.tree.leaves(state, is_leaf=lambda v: isinstance(v, nnx.Variable)):
        x = var.get_value()
        axes = var.get_metadata().get("logical_axes") or (None,) * x.ndim
        split = 1
        for ax in sharding.logical_spec(x.shape, axes, rules, mesh):
            for a in (ax,) if isinstance(ax, str) else (ax or ()):
                split *= mesh_shape[a]
        n += int(np.prod(x.shape))
        per_device += _nbytes(x) // split
    return n, per_device


def head_chunk_bytes(mcfg, rows: int, length: int, vocab_on_device: int) -> int:
    """Float32 logits, softmax and their gradient of one chunk of logprobs.head_logprobs over
    `rows` sequences of `length` positions."""
    r, chunk = logprobs.chunk_plan(rows, length, mcfg.vocab_size, mcfg.tie_embeddings)
    return r * length * chunk * vocab_on_device // mcfg.vocab_size * 4 * 3


def estimate(config, devices: int = 8, hbm_gib: float = 80.0, platform: str = "gpu") -> dict:
    """Bytes per device of each term, the two phases' peaks and what is live when the learner
    starts, for `config` on `devices` devices of `platform` (which resolves model.dtype="auto",
    `model.compute_dtype`; see the module doc); plus `params_b` (billions), `headroom` (1 - the
    larger peak / HBM) and `max_slots` (the most slots whose sampling peak stays within 90% of
    HBM)."""
    resolve_hf(config)  # model=hf: the sizes from init_from's config.json
    engine, group, rows_per_prompt = collect.engine_config(config)
    c, a = config, config.adaptive
    mcfg = model_lib.ModelConfig.from_config(
        dict(c.model, dtype=model_lib.compute_dtype(c.model.dtype, platform)))
    mesh = _mesh_shape(c, devices)
    rows = mesh["data"] * mesh["fsdp"]
    t = mesh["tensor"]

    def split(dim):
        return t if dim % t == 0 else 1

    stream = a.mode == "stream"
    B, P, N = c.rl.prompts_per_step, c.sampling.max_prompt_len, c.sampling.max_new_tokens
    Q, S, L, V = collect.prompts_in_flight(c), engine.slots, P + N, mcfg.vocab_size
    R = B * rows_per_prompt
    micro = R // c.rl.minibatches // c.rl.microbatches
    micro_dev = -(-micro // _rows_split(micro, rows))  # sequences per device per micro-batch
    cb = jnp.dtype(mcfg.dtype).itemsize
    n, pbytes = param_bytes(mcfg, mesh, c.sharding_rules)
    pdt = jnp.dtype(mcfg.param_dtype)
    embed = ((1 if mcfg.tie_embeddings else 2) * mcfg.vocab_size // split(mcfg.vocab_size)
             * mcfg.d_model * pdt.itemsize)  # bytes of the embedding and head on a device

    # Optimizer state: Adam's moments mirror the trainable tree; the rest (step counts, DARO's
    # few weights and their moments) is replicated.
    n_daro = max(c.rl.daro_buckets or c.rl.n, 2) - 1
    abstract = {"model": jax.ShapeDtypeStruct((n,), pdt),
                "daro": jax.ShapeDtypeStruct((n_daro,), jnp.float32)}
    opt = jax.eval_shape(learn.make_optimizer(c).init, abstract)
    mu = jnp.dtype(c.optim.get("mu_dtype") or pdt).itemsize  # AdamW's first moment, then nu
    opt_small = sum(_nbytes(x) for x in jax.tree.leaves(opt)) - n * (mu + pdt.itemsize)

    kv_token = 2 * mcfg.n_layers * mcfg.n_kv_heads * mcfg.head_dim * cb // split(mcfg.n_kv_heads)
    per_rows = lambda k: -(-k // _rows_split(k, rows))  # noqa: E731  rows of k on a device
    h = mcfg.n_heads // split(mcfg.n_heads)
    f = mcfg.d_ff // split(mcfg.d_ff)
    v = V // split(V)
    chunk = c.sampling.prefill_chunk

    def chunk_rows(k):  # rows per device in one prefill chunk of k rows
        return per_rows(min(chunk, k) if chunk > 0 else k)

    # The engine's arrays without slot caches, from the shapes adaptive.init_state builds.
    light = jax.eval_shape(lambda: adaptive.init_state(
        engine, generators.BernoulliGenerator(), {}, Q, jnp.zeros((Q,), jnp.int32),
        jax.random.key(0)).replace(gen=None))
    engine_bytes = _per_device(light, rows)
    batch_shapes = jax.eval_shape(
        lambda s: selection.select(jax.tree.map(lambda x: x[:B] if x.ndim else x, s), group),
        light)
    batch = sum(_nbytes(x) for x in jax.tree.leaves(batch_shapes))  # replicated
    # training rows (learn.training_rows, replicated): tokens int32 and mask [R, P+N], loss
    # mask and old log-probs [R, N], group / mu / flat / adv [R] 4 bytes, real [R] 1 byte
    batch += R * (L * 5 + N * 5 + 4 * 4 + 1)

    out = dict(
        params=pbytes,
        adam=pbytes * (mu + pdt.itemsize) // pdt.itemsize + opt_small,
        grads=pbytes,
        # micro-batches add each one's gradient into a running sum: a second gradient tree
        grad_sum=pbytes if c.rl.microbatches > 1 else 0,
        # decoding's per-layer block weights (layer_stack.per_layer) in the compute dtype, and the
        # embedding cast to it when that differs
        decode_copy=(pbytes - embed) * cb // pdt.itemsize
        + (embed * cb // pdt.itemsize if pdt.itemsize != cb else 0),
        prompt_kv=per_rows(Q) * (P * kv_token + V * 4),  # caches + last-position logits
        slot_kv=per_rows(S) * (L * kv_token + V * 4),  # caches + next-token logits
        engine=engine_bytes,
        decode_tmp=2 * per_rows(S) * v * 4,  # a step's new logits and the draw's noise
        prefill_tmp=chunk_rows(Q) * (h * P * P + v) * 4,
        resume_tmp=chunk_rows(S) * (h * L * L + v) * 4 if stream else 0,
        batch=batch,
        remat_saved=micro_dev * mcfg.n_layers * L * mcfg.d_model * cb,
        # one block's backward: ~20 bytes per attention score (f32 scores, masked scores, exp
        # and their grads, bf16 probs), ~6 [T, F] MLP arrays in the compute dtype
        block_tmp=micro_dev * L * (h * L * 20 + 6 * f * cb),
        # logits, softmax and their gradient at the completion positions, for one chunk of
        # logprobs.head_logprobs: a tied head's chunk of the vocabulary, else a chunk of rows
        logits=head_chunk_bytes(mcfg, micro_dev, N, v),
    )
    state = out["params"] + out["adam"]
    fixed = state + out["decode_copy"] + out["prompt_kv"] + out["engine"]
    out["sampling_peak"] = fixed + out["slot_kv"] + out["decode_tmp"] + max(
        out["prefill_tmp"], out["resume_tmp"])
    out["resident_learning"] = state + out["batch"] + (out["engine"] if stream else 0)
    out["learning_peak"] = (out["resident_learning"] + out["grads"] + out["grad_sum"]
                            + out["remat_saved"]
                            + out["block_tmp"] + out["logits"])
    hbm = hbm_gib * GiB
    out["headroom"] = 1 - max(out["sampling_peak"], out["learning_peak"]) / hbm
    per_slot = (out["slot_kv"] + out["decode_tmp"]) / per_rows(S) + (
        (h * L * L + v) * 4 / per_rows(S) if stream and chunk <= 0 else 0)
    free = 0.9 * hbm - (fixed + max(out["prefill_tmp"], out["resume_tmp"] if chunk > 0 else 0))
    out["max_slots"] = max(int(free // per_slot), 0) * rows
    out["params_b"] = n / 1e9
    out.update(mode=a.mode, slots=S, prompts=Q, micro=micro_dev, devices=devices,
               mesh=f"{mesh['data']}/{mesh['fsdp']}/{mesh['tensor']}")
    return out


# A CPU process's memory besides the estimate's arrays: Python, jax / XLA and their compiled
# programs and compile transients, the tokenizer and the task. Calibrated on one run (a 4-layer
# d-256 stand-in with a 49,152 vocabulary, scripts/bench/bench_memory.py: 1.08 GiB peak RSS,
# 0.42 GiB of it the estimate's learning phase); docs/benchmarks.md ("Memory") checks it on
# others.
HOST_RUNTIME_BYTES = int(0.66 * GiB)


def host_peak_bytes(config) -> int:
    """Predicted peak RSS of a run on one CPU host: the runtime plus the estimate's larger phase
    on one device. XLA's compile-time transients are not counted (docs/benchmarks.md, "Memory":
    the learner step of a 30-layer model takes 2+ GiB to compile on CPU)."""
    e = estimate(config, devices=1, hbm_gib=1e6, platform="cpu")
    return HOST_RUNTIME_BYTES + max(e["sampling_peak"], e["learning_peak"])


def in_gib(est: dict) -> dict:
    """The byte terms of `estimate` in GiB, the rest as they are."""
    keep = ("params_b", "headroom", "max_slots", "mode", "slots", "prompts", "micro", "devices",
            "mesh")
    return {k: (x if k in keep else x / GiB) for k, x in est.items()}
