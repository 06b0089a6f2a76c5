"""Pools built from several engine calls on the same prompts (Pilot-Commit's pilot and commit,
conformal stopping's budget grid): each call's kept samples, concatenated per prompt in call
order, as one training batch, and the step's metrics over all calls.

Shapes: B prompts, G group (kept samples per prompt), N max new tokens, K calls.
"""
import jax
import jax.numpy as jnp
import numpy as np

from ada_jax import selection
from ada_jax.policies import rollout


@jax.jit
def _merge(batches, keep_B):
    G = batches[0].mask_BG.shape[1]
    cat = lambda *xs: jnp.concatenate(xs, axis=1)  # noqa: E731
    whole = jax.tree.map(cat, *[(b.tokens_BGN, b.logp_BGN, b.len_BG, b.reward_BG, b.mask_BG,
                                 b.version_BG) for b in batches])
    tokens, logp, lens, reward, mask, version = whole
    mask = mask & keep_B[:, None]
    order = jnp.argsort(~mask, axis=1, stable=True)[:, :G]  # valid samples first, call order

    def take(x):
        idx = order.reshape(order.shape + (1,) * (x.ndim - 2))
        return jnp.take_along_axis(x, idx, axis=1)
    m = take(mask)
    return selection.Batch(
        tokens_BGN=take(tokens), logp_BGN=take(logp), len_BG=jnp.where(m, take(lens), 0),
        reward_BG=jnp.where(m, take(reward), 0.0), mask_BG=m,
        pool_n_B=sum(b.pool_n_B for b in batches), pool_pos_B=sum(b.pool_pos_B for b in batches),
        version_BG=take(version))


def merge(batches: list, keep_B=None) -> selection.Batch:
    """One batch [B, G] holding each prompt's kept samples of every call (call order, at most
    G: the caller's budgets keep the total within G); prompts with keep_B False are masked
    out (their pool counters stay). Pool counters add up over the calls."""
    if keep_B is None:
        keep_B = np.ones(len(batches[0].pool_n_B), bool)
    return selection.readable_batch(_merge(list(batches), jnp.asarray(keep_B)))


@jax.jit
def _take(batch, rows):
    return jax.tree.map(lambda x: x[rows], batch)


def take_rows(batch: selection.Batch, rows) -> selection.Batch:
    """The batch's rows `rows` (whole-batch indices, alike on every process), in that order:
    an earlier call's samples of the prompts a later call samples again."""
    return _take(batch, jnp.asarray(rows))


def step_metrics(calls: list, batch: selection.Batch) -> dict:
    """The metrics of several engine calls' dicts as one step's: costs (rollout.SUMMED) add
    up, the kept-group shares and per-prompt sample counts are the merged batch's, the
    'before' shares stay the first call's."""
    met = dict(calls[0])
    for m in calls[1:]:
        for k in rollout.SUMMED:
            met[k] += m[k]
    n = np.asarray(batch.pool_n_B)
    met.update(selection.kept_metrics(batch), samples_per_prompt_mean=float(n.mean()),
               samples_per_prompt_max=int(n.max()),
               samples_histogram=np.bincount(n, minlength=1).tolist(),
               pool_pass_rate_mean=float((np.asarray(batch.pool_pos_B)
                                          / np.maximum(n, 1)).mean()),
               engine_calls=len(calls))
    return met
