"""Conformal stopping, C-GRPO (adaptive.policy='conformal'): each prompt is sampled along a
budget grid k_1 < k_2 < … (adaptive.conformal_grid) and stops at level k_j once the
split-conformal prediction set of its next sample's answer is one answer; every sample drawn
is trained on. docs/theory.md, "Conformal stopping", states the rule and where it differs from
the C-GRPO description.

The answer is the verifier's outcome y ∈ {0, 1} (the engine keeps rewards, not answer
strings). At level k with s positives the smoothed pass rate is p̃ = (s + 1)/(k + 2) and the
nonconformity score of a label is score(y) = 1 − p̃ for y = 1, p̃ for y = 0. The set is
C = {y : score(y) ≤ q̂_j}; q̂_j is the ⌈(m+1)(1−α)⌉-th smallest of the m calibration scores
of level j (1 where that rank exceeds m: nothing stops until calibrated), so a fresh prompt's
next answer lies in C with probability ≥ 1 − α (α = adaptive.conformal_alpha).
Calibration: each step a random share (adaptive.conformal_calib_share) of the prompts is
never stopped; for each level below the top, each gives one score (its counts at k_j and the
outcome of one uniformly chosen sample of the next level). Scores are kept for the last
adaptive.conformal_window per level; thresholds are refitted every adaptive.conformal_refit_every
steps.

State: `state["conformal"]` = {"q": [q̂_j], "scores": [[score, …] per level], "since": steps
since the last refit}; checkpointed as `conformal_calibration` (JSON floats: exact resume).
"""
import math

import jax
import numpy as np

from ada_jax.policies import pools, rollout


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): the top of the grid, every sample trained."""
    top = max(config.adaptive.conformal_grid)
    return top, top


def init_state(ctx, params) -> dict:
    levels = len(ctx.config.adaptive.conformal_grid)
    return {"conformal": {"q": [1.0] * levels, "scores": [[] for _ in range(levels)],
                          "since": 0}}


def checkpoint(state) -> dict:
    return {"conformal_calibration": state["conformal"]}


def restore(meta) -> dict:
    c = meta.get("conformal_calibration")
    if c is None:  # a checkpoint from before this policy: nothing calibrated yet
        return {}
    return {"conformal": {"q": [float(x) for x in c["q"]],
                          "scores": [[float(x) for x in s] for s in c["scores"]],
                          "since": int(c["since"])}}


def smoothed(s, k):
    return (np.asarray(s, np.float64) + 1.0) / (np.asarray(k, np.float64) + 2.0)


def score(s, k, y):
    """Nonconformity score of outcome y given s positives in k samples."""
    p = smoothed(s, k)
    return np.where(np.asarray(y) > 0.5, 1.0 - p, p)


def threshold(scores, alpha: float) -> float:
    """Split-conformal q̂: the ⌈(m+1)(1−α)⌉-th smallest score, 1.0 (every label) if m is too
    small for that rank."""
    m = len(scores)
    r = math.ceil((m + 1) * (1.0 - alpha))
    return 1.0 if r > m else float(np.sort(np.asarray(scores, np.float64))[r - 1])


TIE = 1e-9  # scores are ratios of small integers: equal ones may differ in the last bit


def in_set(s, k, y, q):
    """Whether outcome y is in the prediction set {y : score(y) ≤ q} (ties included)."""
    return score(s, k, y) <= q + TIE


def set_size(s, k, q):
    """[B] size of the prediction set {y ∈ {0,1} : score(y) ≤ q} (0, 1 or 2)."""
    return in_set(s, k, 1, q).astype(int) + in_set(s, k, 0, q).astype(int)


def _rng(key, salt: int):
    return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist() + [salt])


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    a = ctx.config.adaptive
    grid, cs = tuple(a.conformal_grid), state["conformal"]
    problems = next(iterator)
    B = len(problems) * jax.process_count()  # the whole batch: every process decides alike
    rng = _rng(key, 0)
    calib = rng.random(B) < a.conformal_calib_share
    n, s = np.zeros(B, np.int64), np.zeros(B, np.int64)
    active = np.ones(B, bool)
    calls, batches, first = [], [], None
    for j, k in enumerate(grid):
        inc = np.where(active, k - (grid[j - 1] if j else 0), 0)
        got = rollout.run_engine(ctx, params, problems, jax.random.fold_in(key, j),
                                 rollout.own_share(inc))
        first = got if first is None else first
        calls.append(got.metrics)
        batches.append(got.batch)
        if j:  # calibration scores of level j-1: one next-level outcome per calibration prompt
            r, m = np.asarray(got.batch.reward_BG), np.asarray(got.batch.mask_BG)
            for i in np.flatnonzero(calib & (m.sum(1) > 0)):
                y = r[i, rng.choice(np.flatnonzero(m[i]))]
                cs["scores"][j - 1].append(float(score(s[i], n[i], y)))
        n += np.asarray(got.batch.pool_n_B)
        s += np.asarray(got.batch.pool_pos_B)
        if j == len(grid) - 1:
            break
        active &= calib | (set_size(s, n, cs["q"][j]) != 1)
        if not active.any():
            break
    cs["since"] += 1
    if cs["since"] >= a.conformal_refit_every:
        cs["scores"] = [sc[-a.conformal_window:] for sc in cs["scores"]]
        cs["q"] = [threshold(sc, a.conformal_alpha) for sc in cs["scores"]]
        cs["since"] = 0
    batch = pools.merge(batches)
    met = pools.step_metrics(calls, batch)
    met.update(conformal_stopped=int((n < grid[-1]).sum()), conformal_calib=int(calib.sum()),
               conformal_q_first=cs["q"][0])
    return rollout.Collected(first.problems, batch, first.prompt_BP, first.mask_BP, met)
