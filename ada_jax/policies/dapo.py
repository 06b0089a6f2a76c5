"""DAPO dynamic sampling (adaptive.policy='dapo'): draw prompt batches (n samples each), keep
groups with mixed rewards until B are collected (settings: adaptive.dapo.*). Past
max_gen_batches, at_cap="train" trains on the mixed groups found (the missing ones are
masked-out groups, so shapes stay fixed), counts them (dapo_cap_hit, dapo_short_groups) and
warns once per run; "error" stops the run as verl does. The kept-group count is global (read
from replicated rewards), so on several processes every process draws alike and agrees when
the batch is full.

State: `state["dapo_warned"]` (warned once per run; not checkpointed).
"""
import logging

import jax
import jax.numpy as jnp
import numpy as np

from ada_jax import selection
from ada_jax.policies import rollout
from ada_jax.policies.settings import Setting

LABEL = "DAPO"  # the display name (plots, tables)
PRESETS = {"dapo": "algo=dapo|--config.adaptive.dapo.max_gen_batches=32"}
SETTINGS = {
    "max_gen_batches": Setting(4, "DAPO: prompt batches drawn per step at most",
                               "algorithm.filter_groups.max_num_gen_batches / —",
                               "positive_int"),
    "at_cap": Setting("train", "DAPO, fewer than B mixed groups at the cap: train on those "
                      "(counted, warned once) or error (verl)", "—", "choice:train/error"),
}

log = logging.getLogger(__name__)


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): n samples a prompt, all trained."""
    return config.rl.n, config.rl.n


def init_state(ctx, params) -> dict:
    return {"dapo_warned": False}


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    c = ctx.config
    cap = c.adaptive.dapo.max_gen_batches
    drawn, kept, spare, met = [], [], [], {}  # per generation batch; (batch, row) pairs
    for gen_batch in range(cap):
        got = rollout.run_engine(ctx, params, next(iterator), jax.random.fold_in(key, gen_batch))
        batch, m = got.batch, got.metrics
        drawn.append((rollout.everyone(got.problems), batch, got.prompt_BP, got.mask_BP))
        # Shares and ratios describe the first (fresh) batch; costs add up over all.
        met = m if not met else {k: met[k] + m[k] if k in rollout.SUMMED else met[k]
                                 for k in met}
        r, valid = np.asarray(batch.reward_BG), np.asarray(batch.mask_BG)
        n_pos = (r * valid).sum(1)
        is_mixed = (n_pos > 0) & (n_pos < valid.sum(1))
        kept += [(gen_batch, i) for i in np.flatnonzero(is_mixed)]
        B = len(is_mixed)
        if len(kept) >= B:
            break
        spare = [(gen_batch, i) for i in np.flatnonzero(~is_mixed)][:B]  # the latest batch's
    short = max(B - len(kept), 0)
    met.update(dapo_gen_batches=gen_batch + 1, dapo_cap_hit=int(short > 0),
               dapo_short_groups=short)
    if short:
        msg = (f"DAPO dynamic sampling: {cap} generation batches gave only {len(kept)} of {B} "
               f"groups with mixed rewards")
        if c.adaptive.dapo.at_cap == "error":
            raise RuntimeError(f"{msg}; raise config.adaptive.dapo.max_gen_batches, lower "
                               f"config.rl.prompts_per_step, or set "
                               f"config.adaptive.dapo.at_cap='train'")
        if not state.get("dapo_warned"):
            log.warning("%s: training on those (the step's other %d groups are masked out; "
                        "metrics dapo_cap_hit, dapo_short_groups count it). Warned once per "
                        "run; raise config.adaptive.dapo.max_gen_batches to sample further.",
                        msg, short)
            state["dapo_warned"] = True
    chosen = (kept + spare[:short])[:B]
    flat = np.asarray([g * B + i for g, i in chosen], np.int32)  # rows of the drawn batches
    batch, toks, mask = jax.block_until_ready(_assemble(
        [d[1:] for d in drawn], flat, np.arange(B) < len(kept)))
    every = [p for d in drawn for p in d[0]]
    return rollout.Collected([every[j] for j in flat], selection.readable_batch(batch), toks,
                             mask, met)


@jax.jit
def _assemble(drawn, flat, real_B):
    """(batch, toks, mask) of rows `flat` of the drawn (batch, toks, mask)s stacked, the groups
    past the kept ones (real_B false) masked out: one program (on several processes a gather
    across them, waited for by the caller)."""
    batch, toks, mask = jax.tree.map(lambda *xs: jnp.concatenate(xs)[flat], *drawn)
    real = real_B[:, None]
    return batch.replace(mask_BG=batch.mask_BG & real, len_BG=jnp.where(real, batch.len_BG, 0),
                         reward_BG=jnp.where(real, batch.reward_BG, 0.0)), toks, mask
