"""Selection: the adaptive engine's kept buffers -> fixed-size training groups, and the
step's sampling metrics (docs/spec.md §6).

Shapes: B prompts, G training group size, N max new tokens, C kept samples per class.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ada_jax import sharding
from ada_jax.adaptive import NEG, POS, EngineConfig, EngineState, _rule_met


@struct.dataclass
class Batch:
    """Fixed-shape training group per prompt: [B, G, …] with a validity mask."""
    tokens_BGN: jax.Array
    logp_BGN: jax.Array
    len_BG: jax.Array
    reward_BG: jax.Array
    mask_BG: jax.Array
    pool_n_B: jax.Array  # samples drawn for the prompt this step (N_i)
    pool_pos_B: jax.Array  # positives among them
    version_BG: jax.Array  # policy version each sample was launched under


@functools.partial(jax.jit, static_argnames=("group", "balanced"))  # one program
def select(st: EngineState, group: int, *, balanced: bool = True, drop_unresolved=None):
    """Downsample each pool to `group`: ⌈G/2⌉ positives and the rest negatives where available,
    shortfall filled from the other class; kept buffers are already in the chosen order.
    drop_unresolved [B] bool masks out whole groups (passive filtering at budget)."""
    kept_pos = jnp.sum(jnp.isfinite(st.kept_prio[:, POS]), axis=1)
    kept_neg = jnp.sum(jnp.isfinite(st.kept_prio[:, NEG]), axis=1)
    if balanced:
        take_pos = jnp.minimum(kept_pos, jnp.maximum((group + 1) // 2, group - kept_neg))
    else:  # generation order across classes is not tracked; positives first
        take_pos = jnp.minimum(kept_pos, group)
    take_neg = jnp.minimum(kept_neg, group - take_pos)
    j = jnp.arange(group)[None, :]
    is_pos = j < take_pos[:, None]
    mask = j < (take_pos + take_neg)[:, None]
    slot = jnp.where(is_pos, j, j - take_pos[:, None])
    slot = jnp.clip(slot, 0, st.kept_prio.shape[2] - 1)
    cls = is_pos.astype(jnp.int32)

    def pick(arr):  # arr [B,2,C,…] -> [B,G,…]
        b = jnp.arange(arr.shape[0])[:, None]
        return arr[b, cls, slot]

    if drop_unresolved is not None:
        mask = mask & ~drop_unresolved[:, None]
    return Batch(tokens_BGN=pick(st.kept_tokens), logp_BGN=pick(st.kept_logp),
                 len_BG=jnp.where(mask, pick(st.kept_len), 0),
                 reward_BG=jnp.where(mask, is_pos, 0).astype(jnp.float32), mask_BG=mask,
                 pool_n_B=st.n_samples, pool_pos_B=st.n_pos, version_BG=pick(st.kept_version))


def select_readable(st: EngineState, group: int, drop_unresolved=None):
    """(st, batch): `select`, with the per-prompt counters and the batch's small [B, G] fields
    replicated where they span processes (`sharding.readable`), so the host code after it
    (metrics, DAPO's mixed groups, hints) reads them alike on every process."""
    st = st.replace(**sharding.readable({f: getattr(st, f) for f in (
        "n_samples", "n_pos", "first_pos", "launched")}))
    return st, readable_batch(select(st, group, drop_unresolved=drop_unresolved))


def readable_batch(batch: Batch) -> Batch:
    """The batch with its small fields (all but tokens and log-probs) replicated where they
    span processes (`sharding.readable`): host code reads them alike on every process."""
    return batch.replace(**sharding.readable({f: getattr(batch, f) for f in (
        "len_BG", "reward_BG", "mask_BG", "version_BG", "pool_n_B", "pool_pos_B")}))


def kept_metrics(batch: Batch) -> dict:
    """Shares of all B prompts whose kept group is all correct, all wrong, mixed (effective:
    the only ones with a learning signal) or empty (dropped); the four sum to 1. Shares of all
    prompts, not of the kept groups, so runs that drop groups compare with runs that do not."""
    m = np.asarray(batch.mask_BG)
    kept = m.sum(1)
    pos = (np.asarray(batch.reward_BG) * m).sum(1)
    return {"all_correct_after": float(np.mean((kept > 0) & (pos == kept))),
            "all_wrong_after": float(np.mean((kept > 0) & (pos == 0))),
            "effective_prompt_ratio": float(np.mean((kept > 0) & (pos > 0) & (pos < kept))),
            "dropped_after": float(np.mean(kept == 0))}


def metrics(cfg: EngineConfig, st: EngineState, batch: Batch, group: int,
            budget_B=None) -> dict:
    """Host-side summary of one engine call (docs/spec.md §6)."""
    n = np.asarray(st.n_samples)
    pos = np.asarray(st.n_pos)
    first_n = np.minimum(n, group)
    first_pos = np.asarray(st.first_pos)
    resolved = np.asarray(_rule_met(cfg, st.n_samples, st.n_pos))
    out = {
        "samples_per_prompt_mean": float(n.mean()), "samples_per_prompt_max": int(n.max()),
        "samples_total": int(n.sum()),
        "unresolved_prompts": int((~resolved).sum()) if cfg.exit_rule != "none" else 0,
        "all_correct_before": float(np.mean((first_pos == first_n) & (first_n > 0))),
        "all_wrong_before": float(np.mean(first_pos == 0)),
        **kept_metrics(batch),
        "pool_pass_rate_mean": float((pos / np.maximum(n, 1)).mean()),
        "rounds": int(st.rounds), "chunks": int(st.chunks),
        "decode_steps": int(st.decode_steps), "generated_tokens": int(st.generated_tokens),
        "cut_tokens": int(st.cut_tokens),
        "samples_launched": int(np.asarray(st.launched).sum()),
        "slot_utilisation": float(int(st.generated_tokens)
                                  / max(cfg.slots * int(st.decode_steps), 1)),
    }
    hist = np.bincount(n, minlength=1)
    out["samples_histogram"] = hist.tolist()
    return out
