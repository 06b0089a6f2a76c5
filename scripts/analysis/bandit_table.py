"""Bias / variance table of every gradient estimator on the exact softmax bandit (docs/theory.md).

  python scripts/analysis/bandit_table.py            # 20k Monte-Carlo draws per estimator
  python scripts/analysis/bandit_table.py --quick    # 2k draws

Prints markdown tables and, as its last line, one JSON object of the headline figures.
"""
import argparse
import json
import math

import jax
import numpy as np

from ada_jax import bandit as bd
from ada_jax import objectives as O

P = [0.03, 0.08, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    reps = args.reps or (2000 if args.quick else 20000)
    bandit = bd.make(P, n_actions=32, seed=0)
    p = np.asarray(bd.pass_rate(bandit.logits_BA, bandit.correct_BA), np.float64)
    head = {"reps": reps, "max_abs_bias": {}, "var_ratio": {}}
    weights = {}

    print(f"Softmax bandit: B={len(P)} prompts, A=32 actions, {reps} draws per estimator.\n")
    print("Exact weight ratio w(p)/target(p) per prompt (1 = unbiased for the stated target) and "
          "the Monte-Carlo check: max |z| of measured vs exact weight, measured max |bias|.\n")
    cols = " | ".join(f"p={q:g}" for q in P)
    print(f"| estimator | target | {cols} | MC max abs z | MC max abs bias |")
    print("|---|---|" + "---|" * len(P) + "---|---|")
    max_z = 0.0
    for i, est in enumerate(bd.standard_estimators(bandit)):
        w, t = est.weight(p), est.target(p)
        g = bd.monte_carlo(jax.random.PRNGKey(args.seed * 1000 + i), bandit, est.draw, reps)
        mean_w, se_w = bd.measured_weight(bandit, g)
        z = np.abs(mean_w - w) / se_w
        bias = mean_w / t - 1
        max_z = max(max_z, float(z.max()))
        head["max_abs_bias"][est.name] = round(float(np.abs(w / t - 1).max()), 3)
        weights[est.name] = w
        print(f"| {est.name} | {est.target_name} | " + " | ".join(f"{x:.3f}" for x in w / t)
              + f" | {z.max():.2f} | {np.abs(bias).max():.3f} |")
    head["max_abs_z"] = round(max_z, 2)

    print("\nTrace variance of docs/spec.md §3's oracle estimator f'(p)(r - p)∇log π, total "
          "budget 16·B: "
          "allocation vs uniform (ratio < 1: better).\n")
    print("| objective | allocation | predicted (spec §3) | exact (bandit) | measured ± SE |")
    print("|---|---|---|---|---|")
    total, uniform = 16 * len(P), np.full(len(P), 16)
    allocs = {f: O.variance_optimal_allocation(p, total, f) for f in O.OBJECTIVES}
    for f, alloc_name in (("log", "log"), ("power", "power"), ("linear", "linear"),
                          ("arcsin", "arcsin"), ("arcsin", "log"), ("linear", "log")):
        n_b = allocs[alloc_name]
        vs = []
        for k, alloc in enumerate((n_b, uniform)):
            est = bd.oracle_estimator(f, alloc)
            key = jax.random.PRNGKey(10_000 + 10 * k + args.seed)
            g = bd.monte_carlo(key, bandit, est.draw, reps)
            mean = bd.objective_grad(bandit.logits_BA, bandit.correct_BA, f)
            vs.append(bd.measured_variance(g, mean))
        (a, sa), (b, sb) = vs
        ratio, se = a / b, a / b * math.hypot(sa / a, sb / b)
        pred = O.allocation_variance(p, n_b, f) / O.allocation_variance(p, uniform, f)
        exact = (bd.oracle_variance(bandit.logits_BA, bandit.correct_BA, n_b, f)
                 / bd.oracle_variance(bandit.logits_BA, bandit.correct_BA, uniform, f))
        print(f"| {f} | {alloc_name}-optimal {list(map(int, n_b))} | {pred:.3f} | {exact:.3f} | "
              f"{ratio:.3f} ± {se:.3f} |")
        head["var_ratio"][f"{f}|{alloc_name}"] = dict(predicted=round(pred, 3),
                                                      exact=round(exact, 3),
                                                      measured=round(ratio, 3), se=round(se, 3))

    print("\nImplied per-prompt weight w(p) (E[ĝ_b] = w ∇p_b / B), next to f' of the objectives.\n")
    print("| estimator | " + " | ".join(f"p={q:g}" for q in P) + " |")
    print("|---|" + "---|" * len(P))
    rows = [(f"f' {f}", O.weight(f, p)) for f in ("linear", "arcsin", "log")]
    rows += [(k, weights[k]) for k in ("grpo", "seq_bal_full", "seq_bal_ref", "seq_pos_full",
                                       "seq_pos_ref", "seq_bal_corr_log")]
    for name, w in rows:
        print(f"| {name} | " + " | ".join(f"{x:.3g}" for x in w) + " |")
    print(json.dumps(head))


if __name__ == "__main__":
    main()
