"""Per-completion advantages for outcome rewards (docs/spec.md §1 and §4 "downsample-correct").

Dimension letters: B prompts (groups), N slots per group. Inputs are rewards_BN (float) and a bool
mask_BN marking real completions, so groups may differ in size under fixed shapes; every output is
float32 [B, N] and exactly 0 where masked.

Conventions follow verl's `core_algos` (the reference implementations run on verl):
  * group std is the unbiased (Bessel, torch.std) std, and GRPO divides by (std + ε), ε = 1e-6;
  * a group with a single completion gets mean 0 and std 1 (verl's singleton rule), so A = r;
  * RLOO is r_j·n/(n-1) - mean·n/(n-1) = r_j - mean_{k≠j} r_k;
  * REINFORCE++-baseline whitens group-centred rewards over the batch, token-weighted when
    lengths are given (verl's masked_whiten: unbiased var, rsqrt(var + 1e-8), mean shifted).
"""
from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

from ada_jax import objectives

NAMES = ("grpo", "drgrpo", "rloo", "raft", "liteppo", "reinforce_pp", "pool")


def _prep(rewards_BN, mask_BN):
    m = mask_BN.astype(jnp.float32)
    return rewards_BN.astype(jnp.float32) * m, m, m.sum(-1, keepdims=True)


def _group_mean(r, m, n):
    """Masked group mean with verl's singleton rule (mean 0 for a group of one)."""
    mean = r.sum(-1, keepdims=True) / jnp.maximum(n, 1.0)
    return jnp.where(n == 1, 0.0, mean)


def _group_std(r, m, n):
    """Unbiased masked group std; 1 for singletons (verl), 0 for empty groups."""
    mean = r.sum(-1, keepdims=True) / jnp.maximum(n, 1.0)
    var = (((r - mean) * m) ** 2).sum(-1, keepdims=True) / jnp.maximum(n - 1.0, 1.0)
    return jnp.where(n == 1, 1.0, jnp.sqrt(var))


def grpo(rewards_BN, mask_BN, eps: float = 1e-6):
    """GRPO: (r - mean) / (std + ε), unbiased std as in verl (torch.std)."""
    r, m, n = _prep(rewards_BN, mask_BN)
    return ((r - _group_mean(r, m, n)) / (_group_std(r, m, n) + eps)) * m


def drgrpo(rewards_BN, mask_BN):
    """Dr.GRPO: r - mean, no std (pair with the "constant" loss aggregation)."""
    r, m, n = _prep(rewards_BN, mask_BN)
    return (r - _group_mean(r, m, n)) * m


def rloo(rewards_BN, mask_BN):
    """RLOO: r_j - mean_{k≠j} r_k; singletons keep A = r (verl)."""
    r, m, n = _prep(rewards_BN, mask_BN)
    tot = r.sum(-1, keepdims=True)
    loo = (tot - r) / jnp.maximum(n - 1.0, 1.0)
    return jnp.where(n > 1, r - loo, r) * m


def raft(rewards_BN, mask_BN, threshold: float = 0.5, normalise: bool = False):
    """RAFT: weight 1 on positives (r > threshold), 0 on negatives: plain log-likelihood on accepted
    samples. normalise=True uses n/k per positive, i.e. the mean over a group's k accepted samples
    (the EM / GVM-RAFT estimator of ∇log p); groups without positives get 0."""
    r, m, n = _prep(rewards_BN, mask_BN)
    pos = (r > threshold).astype(jnp.float32) * m
    if normalise:
        k = pos.sum(-1, keepdims=True)
        pos = pos * n / jnp.maximum(k, 1.0)
    return pos


def liteppo(rewards_BN, mask_BN, eps: float = 1e-6):
    """LitePPO: group-mean baseline, divided by the batch std (unbiased) of the centred rewards."""
    r, m, n = _prep(rewards_BN, mask_BN)
    c = (r - _group_mean(r, m, n)) * m
    tot = m.sum()
    mu = c.sum() / jnp.maximum(tot, 1.0)
    std = jnp.sqrt((((c - mu) * m) ** 2).sum() / jnp.maximum(tot - 1.0, 1.0))
    return c / (std + eps)


def reinforce_pp(rewards_BN, mask_BN, lengths_BN=None, eps: float = 1e-8):
    """REINFORCE++-baseline: group-centred rewards whitened over the batch. With lengths_BN the
    batch mean / var are token-weighted, as verl's token-level masked_whiten."""
    r, m, n = _prep(rewards_BN, mask_BN)
    c = (r - _group_mean(r, m, n)) * m
    w = m if lengths_BN is None else m * lengths_BN.astype(jnp.float32)
    tot = w.sum()
    mu = (c * w).sum() / jnp.maximum(tot, 1.0)
    var = ((c - mu) ** 2 * w).sum() / jnp.maximum(tot, 1.0) * tot / jnp.maximum(tot - 1.0, 1.0)
    return (c - mu) * jnp.reciprocal(jnp.sqrt(var + eps)) * m


def pool_baseline(rewards_BN, mask_BN, pool_n_B, pool_pos_B, *, std_normalise: bool = False,
                  weight_fn: Callable | str | None = None, weight_alpha: float = 0.5,
                  delta: float = 1e-3, correction: bool = False, eps: float = 1e-6,
                  threshold: float = 0.5):
    """Downsample-correct advantage for a kept group drawn from a larger pool (Reinforce-Ada-Seq).

    A_j = r_j - p̃ with p̃ = pool_pos / pool_n, the pool's pass rate (reference: no std).
      std_normalise: divide by (max(std_pool, ε) + ε), std_pool the unbiased std of the pool's
        binary rewards √(N/(N-1)·p̃(1-p̃)) (the reference's global-stats GRPO branch).
      weight_fn: explicit objective weight f'(p̃) on p̃ clipped to [δ, 1-δ]: a callable p -> w, or
        an objective name ("log" ⇒ 1/p̃, "power" with weight_alpha=0.5 ⇒ ∝ 1/√p̃).
      correction: exact importance weights for label-dependent selection. If the kept group holds
        m⁺ of the pool's k positives and m⁻ of its N-k negatives (n = m⁺ + m⁻), a positive's weight
        is (n/N)/(m⁺/k) = n·p̃/m⁺ and a negative's (n/N)/(m⁻/(N-k)) = n(1-p̃)/m⁻: the ratio of its
        inclusion probability under uniform subsampling to that under the balanced selection.
        Given the pool, the kept group's (1/n)Σ_j A_j ∇log π_j then has the same expectation as the
        full pool's (1/N)Σ (r - p̃)∇log π, and its advantages sum to 0. Rewards must be binary.
    Pools of size ≤ 1 use mean 0 / std 1 (verl's singleton rule). The 1/n normalisation assumes
    the learner averages each kept group over its n slots (equal lengths under token-mean).
    """
    r, m, n = _prep(rewards_BN, mask_BN)
    big_n = pool_n_B.astype(jnp.float32)[:, None]
    p = pool_pos_B.astype(jnp.float32)[:, None] / jnp.maximum(big_n, 1.0)
    single = big_n <= 1
    adv = r - jnp.where(single, 0.0, p)
    if correction:
        lab = (r > threshold).astype(jnp.float32) * m
        m_pos, m_neg = lab.sum(-1, keepdims=True), (m - lab).sum(-1, keepdims=True)
        w_pos = n * p / jnp.maximum(m_pos, 1.0)
        w_neg = n * (1.0 - p) / jnp.maximum(m_neg, 1.0)
        adv = jnp.where(single, adv, adv * jnp.where(lab > 0, w_pos, w_neg))
    if std_normalise:
        std = jnp.sqrt(big_n / jnp.maximum(big_n - 1.0, 1.0) * p * (1.0 - p))
        adv = adv / (jnp.where(single, 1.0, jnp.maximum(std, eps)) + eps)
    if weight_fn is not None:
        ps = jnp.clip(p, delta, 1.0 - delta)
        if isinstance(weight_fn, str):
            adv = adv * objectives.weight(weight_fn, ps, weight_alpha)
        else:
            adv = adv * weight_fn(ps)
    return adv * m


def compute(name: str, rewards_BN, mask_BN, **kw):
    """Dispatch by name; "pool" needs pool_n_B and pool_pos_B keyword arguments."""
    fns = dict(grpo=grpo, drgrpo=drgrpo, rloo=rloo, raft=raft, liteppo=liteppo,
               reinforce_pp=reinforce_pp, pool=pool_baseline)
    if name not in fns:
        raise ValueError(f"advantage {name!r}: choose from {NAMES}")
    return fns[name](rewards_BN, mask_BN, **kw)
