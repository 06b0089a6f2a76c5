"""Budget solvers of the history-based allocation policies (ada_jax/policies/knapsack.py,
vip.py): pure numpy, host side, integers out that sum exactly to the budget. The derivations,
and where each rule differs from its paper, are in docs/theory.md ("Knapsack-RL and VIP").

Dimension letters: B prompts, K budget choices per prompt (n_max - n_min + 1), C spare units.

  Knapsack-RL    knapsack_value V(N, p) = (1 - p^N - (1-p)^N)·p(1-p)², knapsack_allocation
                 (exact dynamic program over integer budgets), knapsack_budgets (the authors'
                 whole rule: unseen, solved and unsolved prompts, spare budget to the unsolved)
  VIP            vip_variance v(n; s²) (RLOO s²/(n-1), Dr.GRPO s²(n-1)/n²),
                 vip_allocation (exact integer minimum of Σ v), vip_continuous (the relaxed
                 program's KKT solution for RLOO, water-filling), vip_gamma_term (the
                 authors' γ·log(p)·n term), gp_logit_mean (their predictor: a Gaussian process
                 over prompts in logit space)
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


def knapsack_cost(p, alpha: float = 0.9):
    """Samples a prompt of pass rate p in (0, 1) needs for a mixed group with probability
    alpha, log(1 - alpha) / log(max(p, 1 - p)): the Knapsack-RL authors' estimate of what the
    prompts they can solve will use (their 'probability' cost)."""
    p = np.asarray(p, np.float64)
    return np.log(1.0 - alpha) / np.log(np.maximum(p, 1.0 - p))


def _spread(out, idx, amount: int, cap: int) -> int:
    """Add `amount` units evenly over prompts `idx` (index order: the first get one more),
    none above cap; returns the units that did not fit."""
    idx = np.asarray(idx, np.int64)
    while amount > 0:
        room = idx[out[idx] < cap]
        if len(room) == 0:
            break
        share, rem = divmod(amount, len(room))
        add = np.minimum(share + (np.arange(len(room)) < rem), cap - out[room])
        out[room] += add
        amount -= int(add.sum())
    return amount


def knapsack_budgets(p, seen, total: int, n_min: int, n_max: int, n_unseen: int,
                     alpha: float = 0.9) -> np.ndarray:
    """Knapsack-RL's budgets as its authors compute them (liziniu/KnapsackRL,
    exploration_utils.sampling_budget_by_knapsack), from p = each prompt's raw success rate
    on its last visit:

    - an unseen prompt gets n_unseen (their n, the uniform budget); a prompt with p = 0 or
      p = 1 gets n_min; a prompt with 0 < p < 1 ('effective') gets n_min plus a share of the
      knapsack below;
    - if the effective prompts' expected need Σ min(n_max, knapsack_cost(p)) is below the
      budget left, the surplus goes evenly to the p = 0 prompts (or, if none, to the other
      non-effective ones) and the knapsack gets the expected need; with no effective prompt
      at all the budget left goes to the p = 0 prompts, or, if none, every prompt is uniform;
    - the knapsack: integers N_i in [n_min, n_max] maximising Σ V(N_i, p_i)
      (knapsack_allocation, exact).
    Budgets never exceed n_max (the kept group): what a cap refuses goes to the prompts with
    room. Integers summing exactly to total."""
    p = np.asarray(p, np.float64)
    seen = np.asarray(seen, bool)
    B, total = len(p), int(total)
    if not (1 <= n_min <= n_unseen <= n_max) or total > B * n_max:
        raise ValueError(f"knapsack budgets: need 1 <= n_min={n_min} <= n_unseen={n_unseen} "
                         f"<= n_max={n_max} and total {total} <= {B}·n_max")
    out = np.where(seen, n_min, n_unseen).astype(np.int64)
    eff = seen & (p > 0) & (p < 1)
    zero = seen & (p <= 0)
    left = total - int(out.sum())
    if left < 0:
        raise ValueError(f"knapsack budgets: total {total} below the floors {int(out.sum())}")
    if not eff.any():
        if zero.any():
            left = _spread(out, np.flatnonzero(zero), left, n_max)
        else:  # the authors' fallback: every prompt uniform
            out = np.full(B, total // B, np.int64) + (np.arange(B) < total % B)
            left = 0
    else:
        need = int(np.minimum(n_max, knapsack_cost(p[eff], alpha)).astype(np.int64).sum())
        if need < left:  # more budget than the solvable prompts need: the rest to p = 0
            to = zero if zero.any() else ~eff
            left = need + _spread(out, np.flatnonzero(to), left - need, n_max)
        K = int(eff.sum())
        use = min(left, K * (n_max - n_min))
        out[eff] = knapsack_allocation(p[eff], K * n_min + use, n_min, n_max)
        left -= use
    left = _spread(out, np.arange(B), left, n_max)
    assert left == 0 and out.sum() == total
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
                   estimator: str = "rloo", linear=None) -> np.ndarray:
    """Integer N_i in [n_min, n_max] with Σ N_i = total minimising Σ_i v(N_i; s²_i)
    (+ Σ_i linear_i·N_i when `linear` is given: the authors' γ·log(p_i) term, vip_gamma_term).

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
    if linear is not None:  # a linear term keeps each prompt's gains decreasing in k
        gain = gain - np.asarray(linear, np.float64)[:, None]
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


VIP_GAMMA = {"rloo": 0.0007, "drgrpo": 0.0004}  # the authors' γ per estimator


def vip_gamma_term(p, gamma: float, eps: float = 1e-6) -> np.ndarray:
    """Per-sample term γ·log(p) of the authors' program (HieuNT91/VIP,
    bernoulli_allocation.solve: min Σ a_i/(n_i - 1) + γ·log(p_i)·n_i): negative, most so
    for the hardest prompts, so spare samples go to low predicted p. p clipped to [eps, 1-eps]
    as theirs."""
    return gamma * np.log(np.clip(np.asarray(p, np.float64), eps, 1.0 - eps))


def vip_objective(n, p, gamma: float, estimator: str = "rloo", eps: float = 1e-6) -> float:
    """The authors' program's value Σ v(n_i; p_i(1-p_i)) + γ·log(p_i)·n_i."""
    p = np.clip(np.asarray(p, np.float64), eps, 1.0 - eps)
    n = np.asarray(n, np.float64)
    return float((vip_variance(n, p * (1 - p), estimator) + vip_gamma_term(p, gamma) * n).sum())


def gp_logit_mean(K_oo, K_qo, p_obs, prior_logit: float = -1.0, jitter: float = 1e-4,
                  eps: float = 1e-6) -> np.ndarray:
    """VIP's success-rate predictor (HieuNT91/VIP, gaussian_process.GPR): Gaussian-process
    regression in logit space, prior mean prior_logit, observations logit(clip(p_obs)) with
    `jitter` on the diagonal. K_oo [O, O] is the kernel between observed prompts, K_qo [Q, O]
    between queried and observed ones. Returns the posterior mean logit [Q]: a prompt never
    seen is predicted from the observed prompts near it."""
    g = np.log(np.clip(p_obs, eps, 1 - eps) / (1 - np.clip(p_obs, eps, 1 - eps)))
    if len(g) == 0:
        return np.full(np.asarray(K_qo).shape[0], prior_logit)
    K = np.asarray(K_oo, np.float64) + jitter * np.eye(len(g))
    w = np.linalg.solve(K, g - prior_logit)
    return prior_logit + np.asarray(K_qo, np.float64) @ w


# --------------------------------------------------------------------------- predictions


def beta_moments(n_tot, n_pos, alpha: float, beta: float):
    """Posterior of p under Beta(alpha, beta) after n_pos of n_tot (the Ada-Est history):
    (E[p], E[p(1-p)]) = (a/(a+b), ab/((a+b)(a+b+1))), a = n_pos + alpha, b = n_tot - n_pos +
    beta. The first is objectives.bayes_pass_rate; the second is the expected Bernoulli
    variance, smaller than E[p](1-E[p]) by the posterior's own variance."""
    a = np.asarray(n_pos, np.float64) + alpha
    b = np.asarray(n_tot, np.float64) - np.asarray(n_pos, np.float64) + beta
    return a / (a + b), a * b / ((a + b) * (a + b + 1.0))
