"""Non-linear pass-rate objectives J_f = E_x[f(p(x))] and the budgets they imply
(docs/spec.md §3-4).

Dimension letters: B prompts, T samples (stopping time). Every f / f' / gate function accepts
numpy or JAX input and returns the same kind (JAX ones are jittable). Allocation solvers run on
the host between steps: numpy in, `np.int64` out, and their integers sum exactly to the budget.

  f-transforms   value(name, p, alpha) = f(p), weight(name, p, alpha) = f'(p) = w(p)
  smoothing      clip_pass_rate (p in [δ, 1-δ]), bayes_pass_rate ((k+α)/(N+α+β))
  allocation     allocate (water-filling + largest remainder), variance_optimal_allocation,
                 est_allocation, gvm_allocation, allocation_variance
  gate / cost    gate_prob u(p) = 1-(1-p)^n-p^n, stopping_survival, stopping_moments, tier_cost,
                 escalation_cost
  Ada-Est        est_update (EMA pass-rate history)
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

OBJECTIVES = ("linear", "log", "arcsin", "power")


def _xp(x):
    """numpy for host values, jax.numpy for traced / device arrays (one code path for both)."""
    return jnp if isinstance(x, jax.Array) else np


def _check(name):
    if name not in OBJECTIVES:
        raise ValueError(f"objective {name!r}: choose from {OBJECTIVES}")


def value(name: str, p, alpha: float = 0.5):
    """f(p): linear p, log log p, arcsin 2·arcsin(√p), power p^α (docs/spec.md §3 table)."""
    _check(name)
    xp = _xp(p)
    p = xp.asarray(p, dtype=xp.float32 if xp is jnp else np.float64)
    if name == "linear":
        return p
    if name == "log":
        return xp.log(p)
    if name == "arcsin":
        return 2.0 * xp.arcsin(xp.sqrt(p))
    return p ** alpha


def weight(name: str, p, alpha: float = 0.5):
    """w(p) = f'(p): 1, 1/p, 1/√(p(1-p)), α·p^(α-1). Singular at 0/1: pass a smoothed p."""
    _check(name)
    xp = _xp(p)
    p = xp.asarray(p, dtype=xp.float32 if xp is jnp else np.float64)
    if name == "linear":
        return xp.ones_like(p)
    if name == "log":
        return 1.0 / p
    if name == "arcsin":
        return 1.0 / xp.sqrt(p * (1.0 - p))
    return alpha * p ** (alpha - 1.0)


def clip_pass_rate(p, delta: float = 0.01):
    """Smoothed pass rate: clip to [δ, 1-δ] so w(p) stays finite."""
    return _xp(p).clip(p, delta, 1.0 - delta)


def bayes_pass_rate(k, n, alpha: float = 1.0, beta: float = 1.0):
    """Smoothed pass rate (k+α)/(n+α+β): posterior mean under a Beta(α, β) prior; never 0 or 1."""
    return (k + alpha) / (n + alpha + beta)


def gate_prob(p, n):
    """u(p) = 1 - (1-p)^n - p^n: chance a group of n has mixed rewards (≈ n·p for small p)."""
    return 1.0 - (1.0 - p) ** n - p ** n


# --------------------------------------------------------------------------- allocation


def allocate_continuous(scores, total: float, n_min=1, n_max=None) -> np.ndarray:
    """Real N_i = clip(t·s_i, lo_i, hi_i) with Σ N_i = total (exact water-filling).

    This is the KKT solution of min Σ s_i²/N_i s.t. Σ N_i = total, lo ≤ N ≤ hi: clamped prompts sit
    at a bound, free ones are ∝ s_i. g(t) = Σ clip(t·s, lo, hi) is piecewise linear and
    non-decreasing, so t is found exactly by interpolating between its breakpoints. Prompts with
    s_i = 0 get lo_i; if the positive-score prompts cannot absorb the budget even at hi, the excess
    is spread over the zero-score prompts as if their scores were equal.
    """
    s = np.asarray(scores, np.float64)
    if s.ndim != 1 or np.any(s < 0) or not np.all(np.isfinite(s)):
        raise ValueError(f"scores must be a finite, non-negative vector, got {s}")
    lo = np.broadcast_to(np.asarray(n_min, np.float64), s.shape).copy()
    hi = np.broadcast_to(np.asarray(np.inf if n_max is None else n_max, np.float64), s.shape).copy()
    if np.any(lo > hi) or lo.sum() > total + 1e-9 or hi.sum() < total - 1e-9:
        raise ValueError(f"infeasible budget {total}: sum(lo)={lo.sum()}, sum(hi)={hi.sum()}")
    pos = s > 0
    if not pos.any():  # nothing to be proportional to: spread evenly
        return allocate_continuous(np.ones_like(s), total, lo, hi)
    cap = hi[pos].sum() + lo[~pos].sum()
    if cap < total:  # positive prompts saturate at hi; the rest goes evenly to zero-score ones
        out = np.where(pos, hi, 0.0)
        out[~pos] = allocate_continuous(np.ones((~pos).sum()), total - hi[pos].sum(),
                                        lo[~pos], hi[~pos])
        return out
    # only ratios matter: rescale, and floor positive ratios so bound / score stays finite
    s = np.where(pos, np.maximum(s / s.max(), 1e-250), 0.0)
    bps = np.concatenate([lo[pos] / s[pos], hi[pos] / s[pos]])
    bps = np.unique(bps[np.isfinite(bps)])
    g = lambda t: np.clip(t * s, lo, hi).sum()  # noqa: E731
    if total >= g(bps[-1]):  # past the last breakpoint only prompts with hi = inf still grow
        free = pos & np.isinf(hi)
        t = bps[-1] + ((total - g(bps[-1])) / s[free].sum() if free.any() else 0.0)
    else:  # bisect for the first breakpoint with g >= total; g is linear in between
        a, b = 0, len(bps) - 1
        while a < b:
            mid = (a + b) // 2
            a, b = (mid + 1, b) if g(bps[mid]) < total else (a, mid)
        t = bps[0]
        if a > 0:
            t0, t1 = bps[a - 1], bps[a]
            g0, g1 = g(t0), g(t1)
            t = t0 + (total - g0) * (t1 - t0) / (g1 - g0)
    return np.clip(t * s, lo, hi)


def allocate(scores, total: int, n_min=1, n_max=None) -> np.ndarray:
    """Integer N_i ∝ scores within [n_min, n_max], summing exactly to `total`.

    Water-filling for the box (allocate_continuous), then largest-remainder rounding: floor every
    N_i and hand the leftover units to the largest fractional parts (ties to the lower index).
    Floors of in-box reals stay in the box, and a unit only goes to a prompt below its bound.
    """
    total = int(total)
    real = allocate_continuous(scores, total, n_min, n_max)
    base = np.floor(real + 1e-9).astype(np.int64)
    left = total - int(base.sum())
    frac = real - base
    lo = np.broadcast_to(np.asarray(n_min), real.shape)
    hi = np.broadcast_to(np.asarray(np.iinfo(np.int64).max if n_max is None else n_max), real.shape)
    if left > 0:
        order = np.argsort(np.where(base < hi, -frac, np.inf), kind="stable")[:left]
        base[order] += 1
    elif left < 0:  # float round-off pushed a floor up; take units back from the smallest fractions
        order = np.argsort(np.where(base > lo, frac, np.inf), kind="stable")[:-left]
        base[order] -= 1
    assert base.sum() == total and np.all(base >= lo) and np.all(base <= hi)
    return base


def variance_optimal_scores(p, objective: str = "log", alpha: float = 0.5, delta: float = 1e-3):
    """s_i = f'(p_i)·√(p_i(1-p_i)) on p clipped to [δ, 1-δ]: the Lagrange optimum N_i* ∝ s_i."""
    p = clip_pass_rate(np.asarray(p, np.float64), delta)
    return weight(objective, p, alpha) * np.sqrt(p * (1.0 - p))


def variance_optimal_allocation(p, total: int, objective: str = "log", alpha: float = 0.5,
                                n_min=1, n_max=None, delta: float = 1e-3) -> np.ndarray:
    """Integer allocation minimising V ∝ Σ f'(p)² p(1-p)/N_i under Σ N_i = total and the box.

    arcsin ⇒ uniform; log ⇒ ∝ √((1-p)/p); power(α) ⇒ ∝ p^(α-1)·√(p(1-p)) (docs/spec.md §3).
    """
    return allocate(variance_optimal_scores(p, objective, alpha, delta), total, n_min, n_max)


def allocation_variance(p, n, objective: str = "log", alpha: float = 0.5, delta: float = 1e-3):
    """docs/spec.md §3's variance model Σ_i f'(p_i)² p_i(1-p_i) / N_i (up to the shared
    E‖∇log π‖² / B²)."""
    s = variance_optimal_scores(p, objective, alpha, delta)
    return float(np.sum(s ** 2 / np.asarray(n, np.float64)))


def est_allocation(p_hat, total: int, kind: str = "inv_sqrt", objective: str = "log",
                   alpha: float = 0.5, n_min: int = 1, n_max=None) -> np.ndarray:
    """Reinforce-Ada-Est budgets: N_i ∝ 1/√p̂ ("inv_sqrt", paper), 1/p̂ ("inv", reference branch)
    or the variance-optimal rule ("optimal", for `objective`); at least n_min each, exact total."""
    p_hat = np.asarray(p_hat, np.float64)
    if kind == "inv_sqrt":
        scores = 1.0 / np.sqrt(p_hat)
    elif kind == "inv":
        scores = 1.0 / p_hat
    elif kind == "optimal":
        scores = variance_optimal_scores(p_hat, objective, alpha)
    else:
        raise ValueError(f"est kind {kind!r}: choose from ('inv_sqrt', 'inv', 'optimal')")
    return allocate(scores, total, n_min, n_max)


def gvm_scores(p, grad_norm, alpha: float = 1e-3, beta: float = 2.0) -> np.ndarray:
    """GVM: s_i = G_i / √(p_i + α / p_i^(β-1)), and 0 where p_i = 0 or G_i = 0 (reference rule)."""
    p = np.asarray(p, np.float64)
    g = np.asarray(grad_norm, np.float64)
    ok = (p > 0) & (g > 0)
    ps = np.where(ok, p, 1.0)
    return np.where(ok, g / np.sqrt(ps + alpha / ps ** (beta - 1.0)), 0.0)


def gvm_allocation(p, grad_norm, total: int, alpha: float = 1e-3, beta: float = 2.0,
                   n_min: int = 0, n_max=None) -> np.ndarray:
    """GVM budgets N_i ∝ G_i/√(p_i + α/p_i^(β-1)) (reference α=1e-3, β=2, total 8·B); zero-score
    prompts get 0 (n_min applies to the others only). If every score is 0, or the others cannot
    absorb the total within n_max, the (excess) budget is spread evenly over the zero-score
    prompts so the total stays exact (the reference would divide by zero)."""
    s = gvm_scores(p, grad_norm, alpha, beta)
    lo = np.where(s > 0, n_min, 0) if s.any() else np.full(s.shape, n_min)
    return allocate(s, total, lo, n_max)


# --------------------------------------------------------------------------- stopping cost


def _log_binom_pmf(t, s, p):
    """log C(t, s) p^s (1-p)^(t-s), vectorised; s outside [0, t] gives -inf."""
    t, s = np.broadcast_arrays(np.asarray(t, np.float64), np.asarray(s, np.float64))
    ok = (s >= 0) & (s <= t)
    ts, ss = np.where(ok, t, 0), np.where(ok, s, 0)
    lg = np.vectorize(math.lgamma)
    with np.errstate(divide="ignore"):
        out = (lg(ts + 1) - lg(ss + 1) - lg(ts - ss + 1)
               + np.where(ss > 0, ss * np.log(p) if p > 0 else -np.inf, 0.0)
               + np.where(ts - ss > 0, (ts - ss) * np.log1p(-p) if p < 1 else -np.inf, 0.0))
    return np.where(ok, out, -np.inf)


def stopping_survival(p: float, k_pos: int, k_neg: int, t_max: int) -> np.ndarray:
    """S[t] = P(rule not met after t samples), t = 0..t_max: the rule is "≥ k_pos positives and
    ≥ k_neg negatives" (pos rule: k_neg = 0). S[t] = P(S_t < k_pos) + P(t-S_t < k_neg) - P(both)."""
    t = np.arange(t_max + 1)[:, None]
    s_lo = np.arange(max(k_pos, 1))[None, :]  # positives below k_pos
    f_lo = np.arange(max(k_neg, 1))[None, :]  # negatives below k_neg
    a = np.exp(_log_binom_pmf(t, s_lo, p)).sum(1) if k_pos > 0 else 0.0
    b = np.exp(_log_binom_pmf(t, t - f_lo, p)).sum(1) if k_neg > 0 else 0.0
    both = 0.0
    if k_pos > 0 and k_neg > 0:  # s < k_pos and t - s < k_neg: only for small t
        both = np.where((s_lo > t - k_neg), np.exp(_log_binom_pmf(t, s_lo, p)), 0.0).sum(1)
    return np.clip(a + b - both, 0.0, 1.0)


def stopping_moments(p: float, k_pos: int, k_neg: int = 0, round_size: int = 1,
                     max_rounds: int | None = None, tol: float = 1e-13) -> tuple[float, float]:
    """Mean and variance of the samples drawn by a pos / balance rule checked after each round of
    `round_size` samples, stopping at the first satisfied check or after `max_rounds` rounds.

    cost = M·(rounds used), P(cost > r·M) = S[r·M] for r < R, so E = M Σ_r S[rM] and
    E[cost²] = M² Σ_r (2r+1) S[rM]. With M = 1 and no cap the pos rule is negative binomial:
    E = K/p, Var = K(1-p)/p²; the balance rule grows like 1/(p(1-p)) (docs/spec.md §4.4).
    """
    m = int(round_size)
    if max_rounds is None:
        if (k_pos > 0 and p <= 0) or (k_neg > 0 and p >= 1):
            return math.inf, math.inf
        mean_guess = (k_pos / p if k_pos else 0.0) + (k_neg / (1 - p) if k_neg else 0.0) + m
        r_max = int(math.ceil(40 * mean_guess / m)) + 8
    else:
        r_max = int(max_rounds)
    surv = stopping_survival(p, k_pos, k_neg, (r_max - 1) * m)[:: m][:r_max]
    if max_rounds is None and surv[-1] > tol:
        raise RuntimeError(f"stopping tail not converged (S={surv[-1]:.2e}); pass max_rounds")
    r = np.arange(len(surv))
    mean = m * surv.sum()
    second = m * m * ((2 * r + 1) * surv).sum()
    return float(mean), float(second - mean ** 2)


def tier_cost(budgets, shares) -> float:
    """The escalation example of docs/spec.md §4.5 as written: Σ_t K_t·share_t. With
    K = 4/32/256 and shares 62.7% / 16.9% / 1.7% this is ≈ 12.3 per prompt. It charges each
    solved prompt only its final tier's budget and ignores unsolved prompts; `escalation_cost`
    charges everything."""
    return float(np.dot(np.asarray(budgets, np.float64), np.asarray(shares, np.float64)))


def escalation_cost(budgets, shares) -> float:
    """Expected samples when every prompt starts at K_1 and unsolved ones escalate to K_{t+1} in
    total: K_1 + Σ_t (K_{t+1} - K_t)·P(unsolved after t), P(unsolved after t) = 1 - Σ_{s≤t} share_s.
    """
    k = np.asarray(budgets, np.float64)
    unsolved = 1.0 - np.cumsum(np.asarray(shares, np.float64))
    return float(k[0] + np.sum(np.diff(k) * unsolved[:-1]))


# --------------------------------------------------------------------------- Ada-Est history


def est_update(n_tot, n_pos, n_t, k_t, decay: float = 0.9, alpha: float = 1.0, beta: float = 16.0):
    """One Ada-Est history step: N_tot ← λN_tot + n_t, N_pos ← λN_pos + k_t,
    p̂ = (N_pos + α)/(N_tot + α + β) (reference λ=0.9, α=1, β=16). Pure and jittable; pass only
    the rows of the prompts seen this step (gather / scatter around it) unless unseen ones should
    decay too."""
    n_tot = decay * n_tot + n_t
    n_pos = decay * n_pos + k_t
    return n_tot, n_pos, bayes_pass_rate(n_pos, n_tot, alpha, beta)
