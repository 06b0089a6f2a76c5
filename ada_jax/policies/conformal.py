"""Conformal stopping, C-GRPO (adaptive.policy='conformal') as its authors run it
(AryaFayyazi/CGRPO train.py, conformal.py, config.py; PyPI trl-cgrpo): each prompt is sampled
along a budget grid k_1 < k_2 < … (adaptive.conformal.grid, theirs 2, 4, 8, 16) and stops at
the first level k whose conformal test passes; every sample drawn is trained on.

The verifier's outcome is binary, so the score is the authors' one for verified (code) tasks:
s_k = 1 − (positives among the first k samples)/k. A prompt stops at k when q̂_k < 1 and
s_k ≤ q̂_k (a level with q̂_k = 1 is skipped, as theirs), else at the top of the grid.
Calibration, before step 1 and again every adaptive.conformal.refit_every steps (theirs 50):
adaptive.conformal.calib_prompts held-out prompts (theirs n_cal = 400; drawn from the
training stream before the first step and never trained on) are sampled to the top of the grid
with the current policy; q̂_k is the ⌈(m+1)(1−δ)⌉-th smallest of the m scores at level k (rank
clamped to [1, m], theirs), and δ = clip(1 − pass@k_top + 0.05, 0.05, 0.95) from the
calibration prompts' solve rate at the top level (theirs auto_delta), or adaptive.conformal.alpha
when adaptive.conformal.auto_delta is False. The calibration samples count in the step's cost.
docs/theory.md, "The field's allocation methods as their authors run them", says what differs.

State: `state["conformal"]` = {"q": [q̂_k], "delta": δ, "since": steps since calibrating,
"calib": the calibration prompts (records) or None}; checkpointed as `conformal_calibration`
(JSON: exact resume).
"""
import dataclasses
import math

import jax
import numpy as np

from ada_jax.policies import pools, rollout
from ada_jax.policies.settings import Setting
from ada_jax.tasks.problem import Problem

LABEL = "Conformal stopping"  # the display name (plots, tables)
PRESETS = {"conformal": "algo=grpo|--config.adaptive.policy=conformal"}
SETTINGS = {
    "grid": Setting((2, 4, 8, 16), "conformal: sample counts at which a prompt may stop",
                    "k_values", "any"),
    "alpha": Setting(0.1, "conformal: miscoverage δ when auto_delta is off", "deltas",
                     "open_unit"),
    "auto_delta": Setting(True, "conformal: δ = 1 - calibration solve rate + 0.05, in "
                          "[0.05, 0.95]", "auto_delta", "bool"),
    "calib_prompts": Setting(64, "conformal: held-out calibration prompts, sampled to the "
                             "grid's top before step 1 (cost counted)", "n_cal", "positive_int"),
    "refit_every": Setting(50, "conformal: steps between recalibrations (the same prompts, the "
                           "current policy)", "recalibrate_every", "positive_int"),
}


def check(config) -> None:
    grid = config.adaptive.conformal.grid
    if (not isinstance(grid, (tuple, list)) or not grid
            or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in grid)
            or any(x >= y for x, y in zip(grid, grid[1:]))):
        raise ValueError(f"config.adaptive.conformal.grid={grid!r}: must be strictly increasing "
                         f"positive integers, e.g. (2, 4, 8, 16) (sample counts at which a "
                         f"prompt may stop)")

DELTA_MARGIN, DELTA_MIN, DELTA_MAX = 0.05, 0.05, 0.95  # the authors' select_delta_auto


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): the top of the grid, every sample trained."""
    top = max(config.adaptive.conformal.grid)
    return top, top


def init_state(ctx, params) -> dict:
    levels = len(ctx.config.adaptive.conformal.grid)
    return {"conformal": {"q": [1.0] * levels, "delta": float(ctx.config.adaptive.conformal.alpha),
                          "since": 0, "calib": None}}


def checkpoint(state) -> dict:
    return {"conformal_calibration": state["conformal"]}


def restore(meta) -> dict:
    c = meta.get("conformal_calibration")
    if c is None or "calib" not in c:  # a checkpoint without a calibration of this rule
        return {}
    return {"conformal": {"q": [float(x) for x in c["q"]], "delta": float(c["delta"]),
                          "since": int(c["since"]), "calib": c["calib"]}}


def score(s, k):
    """Nonconformity score of s positives among the first k samples: 1 − s/k."""
    return 1.0 - np.asarray(s, np.float64) / np.asarray(k, np.float64)


def quantile(scores, delta: float) -> float:
    """The authors' split-conformal q̂: the ⌈(m+1)(1−δ)⌉-th smallest score, rank clamped to
    [1, m]; 1.0 (no stopping) with no scores."""
    m = len(scores)
    if m == 0:
        return 1.0
    r = min(max(math.ceil((m + 1) * (1.0 - delta)), 1), m)
    return float(np.sort(np.asarray(scores, np.float64))[r - 1])


def auto_delta(top_scores) -> float:
    """δ = (1 − share of calibration prompts solved at the top level) + 0.05, in [0.05, 0.95]."""
    solved = float(np.mean(np.asarray(top_scores) < 1.0 - 1e-9)) if len(top_scores) else 0.0
    return float(np.clip(1.0 - solved + DELTA_MARGIN, DELTA_MIN, DELTA_MAX))


def calibrate(n_LB, s_LB, alpha: float, auto: bool) -> tuple[list, float]:
    """(q̂ per level, δ) from the calibration prompts' counts at each level [L, B]."""
    sc = [score(s, n) for n, s in zip(n_LB, s_LB)]
    delta = auto_delta(sc[-1]) if auto else float(alpha)
    return [quantile(x, delta) for x in sc], delta


TIE = 1e-9  # scores are ratios of small integers: equal ones may differ in the last bit


def stops(s, k, q: float):
    """[B] bool: the level's test passes (q̂ < 1 and 1 − s/k ≤ q̂)."""
    return (q < 1.0) & (score(s, k) <= q + TIE)


def _grid_calls(ctx, params, problems, key, grid, stop_at=None):
    """Sample `problems` (this process's rows) along the grid; a prompt stops at the first
    level where stop_at(j, s, n) says so (never, if None). Returns (per-level whole-batch
    counts n_LB, s_LB, the calls' metrics, their batches, the first call)."""
    B = len(problems) * jax.process_count()
    n, s = np.zeros(B, np.int64), np.zeros(B, np.int64)
    active = np.ones(B, bool)
    n_L, s_L, calls, batches, first = [], [], [], [], None
    for j, k in enumerate(grid):
        inc = np.where(active, k - (grid[j - 1] if j else 0), 0)
        if not inc.any():
            break
        got = rollout.run_engine(ctx, params, problems, jax.random.fold_in(key, j),
                                 rollout.own_share(inc))
        first = got if first is None else first
        calls.append(got.metrics)
        batches.append(got.batch)
        n += np.asarray(got.batch.pool_n_B)
        s += np.asarray(got.batch.pool_pos_B)
        n_L.append(n.copy())
        s_L.append(s.copy())
        if stop_at is not None and j < len(grid) - 1:
            active &= ~stop_at(j, s, n)
    return np.asarray(n_L), np.asarray(s_L), calls, batches, first


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    a = ctx.config.adaptive.conformal
    grid, cs = tuple(a.grid), state["conformal"]
    calls = []
    if cs["calib"] is None:  # before the first step: hold out the calibration prompts
        held = []  # whole batches in batch order (the one-process order)
        while len(held) < a.calib_prompts:
            held += rollout.everyone(next(iterator))
        cs["calib"] = [dataclasses.asdict(p) for p in held]
        cs["since"] = a.refit_every
    if cs["since"] >= a.refit_every:
        held = rollout.own_share([Problem(**d) for d in cs["calib"]])
        n_LB, s_LB, cal_calls, _, _ = _grid_calls(ctx, params, held,
                                                  jax.random.fold_in(key, 1 << 20), grid)
        cs["q"], cs["delta"] = calibrate(n_LB, s_LB, a.alpha, a.auto_delta)
        cs["since"] = 0
        calls += cal_calls
    problems = next(iterator)
    n_LB, _, got_calls, batches, first = _grid_calls(
        ctx, params, problems, key, grid, lambda j, s, n: stops(s, n, cs["q"][j]))
    cs["since"] += 1
    batch = pools.merge(batches)
    calib_samples = sum(m["samples_total"] for m in calls)
    met = pools.step_metrics(got_calls + calls, batch)
    n = n_LB[-1]
    met.update(conformal_stopped=int((n < grid[-1]).sum()), conformal_calib_samples=calib_samples,
               conformal_delta=cs["delta"], conformal_q_first=cs["q"][0])
    return rollout.Collected(first.problems, batch, first.prompt_BP, first.mask_BP, met)
