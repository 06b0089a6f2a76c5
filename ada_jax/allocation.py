"""Budget solvers of the history-based allocation policies (ada_jax/policies/knapsack.py,
vip.py): pure numpy, host side, integers out that sum exactly to the budget. The derivations,
and where each rule differs from its paper, are in docs/theory.md ("Knapsack-RL and VIP").

Dimension letters: B prompts, K budget choices per prompt (n_max - n_min + 1), C spare units.

  Knapsack-RL    knapsack_value V(N, p) = (1 - p^N - (1-p)^N)·p(1-p)², knapsack_allocation
                 (exact dynamic program over integer budgets)
  VIP            vip_variance v(n; s²) (RLOO s²/(n-1), Dr.GRPO s²(n-1)/n²),
                 vip_allocation (exact integer minimum of Σ v), vip_continuous (the relaxed
                 program's KKT solution for RLOO, water-filling)
  predictions    beta_moments: posterior mean of p and of p(1-p) from a (N_tot, N_pos) history
"""
from __future__ import annotations

import numpy as np

from ada_jax import objectives

VIP_ESTIMATORS = ("rloo", "drgrpo")
VIP_MIN_BUDGET = {"rloo": 2, "drgrpo": 3}  # where each estimator's v(n) is convex


def _check_box(B: int, total: int, n_min: int, n_max: int):
    if not (0 <= n_min <= n_max) or not (B * n_min <= total <= B * n_max):
        raise ValueError(f"infeasible budget {total} for {B} prompts in [{n_min}, {n_max}] "
                         f"each: need {B * n_min} <= total <= {B * n_max}")


# --------------------------------------------------------------------------- Knapsack-RL


def knapsack_value(n, p, info_gain: bool = True):
    """V(N, p) = P(the group of N has both outcomes) · InfoGain(p), with P = 1 - p^N - (1-p)^N
    and InfoGain(p) = p(1-p)² (Knapsack-RL, arXiv 2509.25849); info_gain=False: P alone (the
    expected number of mixed groups, the oracle of the bench)."""
    n = np.asarray(n, np.float64)
    p = np.asarray(p, np.float64)
    mixed = 1.0 - p ** n - (1.0 - p) ** n
    return mixed * p * (1.0 - p) ** 2 if info_gain else mixed


def knapsack_allocation(p, total: int, n_min: int, n_max: int,
                        info_gain: bool = True) -> np.ndarray:
    """Integer N_i in [n_min, n_max] with Σ N_i = total maximising Σ_i V(N_i, p_i): a dynamic
    program over the spare units c = Σ (N_i - n_min), f_i(c) = max_e f_{i-1}(c - e) +
    V(n_min + e, p_i), then backtracking. O(B·C·K) time, B·C choices kept. Exact (any value
    table, concave or not); among equal-value optima it takes the smallest e for the last
    prompts first (deterministic)."""
    p = np.asarray(p, np.float64)
    B, total = len(p), int(total)
    _check_box(B, total, n_min, n_max)
    K, C = n_max - n_min + 1, total - B * n_min
    val_BK = knapsack_value(np.arange(n_min, n_max + 1)[None, :], p[:, None], info_gain)
    f = np.full(C + 1, -np.inf)
    f[0] = 0.0
    choice = np.zeros((B, C + 1), np.int64)
    c = np.arange(C + 1)[:, None]
    e = np.arange(K)[None, :]
    prev_idx = np.clip(c - e, 0, C)
    for i in range(B):
        cand = np.where(c - e >= 0, f[prev_idx] + val_BK[i][None, :], -np.inf)  # [C+1, K]
        choice[i] = np.argmax(cand, axis=1)
        f = cand[np.arange(C + 1), choice[i]]
    out = np.zeros(B, np.int64)
    left = C
    for i in range(B - 1, -1, -1):
        out[i] = choice[i, left]
        left -= out[i]
    assert left == 0
    out += n_min
    assert out.sum() == total
    return out


# --------------------------------------------------------------------------- VIP


def vip_variance(n, s2, estimator: str = "rloo"):
    """Per-prompt gradient variance with n samples, up to the shared factor 4·σ_Z² (VIP,
    ICLR 2026): RLOO s²/(n-1), Dr.GRPO s²·(n-1)/n², s² the prompt's p(1-p) (or its
    expectation under the predicted p)."""
    n = np.asarray(n, np.float64)
    s2 = np.asarray(s2, np.float64)
    if estimator == "rloo":
        return s2 / (n - 1.0)
    if estimator == "drgrpo":
        return s2 * (n - 1.0) / n ** 2
    raise ValueError(f"VIP estimator {estimator!r}: choose from {VIP_ESTIMATORS}")


def vip_allocation(s2, total: int, n_min: int, n_max: int,
                   estimator: str = "rloo") -> np.ndarray:
    """Integer N_i in [n_min, n_max] with Σ N_i = total minimising Σ_i v(N_i; s²_i).

    v is convex in n (RLOO for n >= 2, Dr.GRPO for n >= 3: VIP_MIN_BUDGET), so each prompt's
    unit gains g_i(k) = v(k) - v(k+1) decrease in k, and the optimum takes the C largest unit
    gains over all prompts (a greedy exchange argument; equivalently the Lagrangian threshold
    λ with n_i = #{k : g_i(k) > λ}): exact in integers, no rounding step. Ties go to the lower
    k, then the lower prompt index, so every prompt's units stay a prefix."""
    s2 = np.asarray(s2, np.float64)
    B, total = len(s2), int(total)
    _check_box(B, total, n_min, n_max)
    if n_min < VIP_MIN_BUDGET.get(estimator, 0) and n_max > n_min:
        raise ValueError(f"VIP {estimator}: n_min={n_min} must be >= "
                         f"{VIP_MIN_BUDGET[estimator]} (the variance is not convex below)")
    C = total - B * n_min
    k = np.arange(n_min, n_max)[None, :]  # [1, K-1]
    gain = vip_variance(k, s2[:, None], estimator) - vip_variance(k + 1, s2[:, None], estimator)
    idx_k = np.broadcast_to(k, gain.shape).ravel()
    idx_i = np.broadcast_to(np.arange(B)[:, None], gain.shape).ravel()
    order = np.lexsort((idx_i, idx_k, -gain.ravel()))[:C]  # last key sorts first
    out = np.full(B, n_min, np.int64) + np.bincount(idx_i[order], minlength=B)
    assert out.sum() == total
    return out


def vip_continuous(s2, total: float, n_min: float, n_max: float) -> np.ndarray:
    """The relaxed RLOO program min Σ s²_i/(n_i - 1), Σ n_i = total, n_min <= n_i <= n_max,
    solved exactly: with m = n - 1 it is min Σ s²/m, whose KKT point is m_i = clip(t·s_i) (the
    water-filling of objectives.allocate_continuous). The integer optimum lies within one
    unit of it per prompt."""
    s = np.sqrt(np.asarray(s2, np.float64))
    B = len(s)
    return 1.0 + objectives.allocate_continuous(s, total - B, n_min - 1.0, n_max - 1.0)


# --------------------------------------------------------------------------- predictions


def beta_moments(n_tot, n_pos, alpha: float, beta: float):
    """Posterior of p under Beta(alpha, beta) after n_pos of n_tot (the Ada-Est history):
    (E[p], E[p(1-p)]) = (a/(a+b), ab/((a+b)(a+b+1))), a = n_pos + alpha, b = n_tot - n_pos +
    beta. The first is objectives.bayes_pass_rate; the second is the expected Bernoulli
    variance, smaller than E[p](1-E[p]) by the posterior's own variance."""
    a = np.asarray(n_pos, np.float64) + alpha
    b = np.asarray(n_tot, np.float64) - np.asarray(n_pos, np.float64) + beta
    return a / (a + b), a * b / ((a + b) * (a + b + 1.0))
