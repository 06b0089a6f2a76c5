"""A learnable, jittable synthetic reward with known per-prompt pass rates (tests, benchmarks).

Prompt i gets a threshold t_i; a completion is correct iff its first token id is below t_i.
Under any policy the pass rate is the policy's mass on ids < t_i, so it spreads across (0, 1)
with the thresholds and the policy can learn to raise it. Thresholds come from a stable hash
of the problem id, arcsine-distributed (U-shaped, like real pass rates) over [0, V].
"""
import jax.numpy as jnp
import numpy as np


def thresholds(problem_ids, vocab_size: int) -> np.ndarray:
    """int32 thresholds t_i in [0, V] from the ids (U-shaped spread)."""
    u = (np.asarray(problem_ids, np.uint64) % np.uint64(100_003)).astype(np.float64) / 100_003
    return np.round(np.sin(np.pi / 2 * u) ** 2 * vocab_size).astype(np.int32)


def first_token_reward(tokens_SN, lengths_S, threshold_S):
    """float32[S]: 1 iff the completion is non-empty and its first token id < its threshold."""
    return ((lengths_S > 0) & (tokens_SN[:, 0] < threshold_S)).astype(jnp.float32)
