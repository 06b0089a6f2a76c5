"""Each allocation method on its own objective, against uniform sampling at equal spend.

Prompts are the family task's RL families at their base pass rates (ada_jax/tasks/families.py:
p = a family's share, 1 - share for the easy tier; 48 of 108 families at p <= 0.10, 48 at
p >= 0.90); outcomes are Bernoulli(p) draws. Each repetition draws a batch of B prompts (random
families), gives each one earlier visit of 8 samples, and 3·B other prompts one visit too (the
history a pool run has after a few steps), then asks each method for the batch's budgets at a
mean of 8 per prompt, exactly as its policy module computes them. Each row scores the method's
allocation on the method's own objective at the TRUE p (what its estimates aim at), beside
uniform's score on the same objective and batch:

  knapsack          Knapsack-RL (last visit's raw p, the authors' rule): Σ V(N_i, p_i),
                    V = (1 - p^N - (1-p)^N)·p(1-p)²  (higher is better)
  vip               VIP (Gaussian process over prompts by their question text, γ·log(p)·n
                    program, floor 4): the program's value Σ p(1-p)/(N-1) + γ·log(p)·N  (lower
                    is better); the plain variance Σ p(1-p)/(N-1) beside it
  vip_labels        the same with the distance read from the family / tier labels
                    (vip.features labels): a prompt's family informs it
  vip_raw           the same with the authors' raw last-visit rate (vip.smoothing 0): a 0/8
                    visit is predicted p = 1e-6, and the allocation loses to uniform
  knapsack_beta, vip_beta   the same solvers fed the Ada-Est Beta(1, 16) posterior (how they
                    were run before: the solved prompt looks like p ≈ 0.36), for comparison
  pilot_commit      pilot 4 samples on 3·B prompts, commit B, 8 fresh samples each, a committed
                    prompt's 4 + 8 samples its training group: share of the trained groups that
                    are mixed (higher) vs uniform groups of 12 on a batch of B; and mixed groups
                    per sample generated
  conformal         calibrated on 64 held-out prompts (grid 2, 4, 8, 16; auto δ): samples per
                    trained prompt (lower), the calibration's 64 x 16 samples shared over the
                    prompts a RUN_BUDGET run trains, vs sampling every prompt to the grid's top;
                    the samples in training alone; and the coverage P(score <= q̂) on fresh
                    prompts at the first level (>= 1 - δ)
Every row also gives the share of the method's samples on prompts with p <= 0.1 and >= 0.9.
A method that loses to uniform on its own objective has a defect (tests/test_bench_allocation.py).

  python scripts/bench/bench_allocation.py           # 400 repetitions of B = 16
  python scripts/bench/bench_allocation.py --quick   # 60 repetitions (seconds)
The last stdout line is one JSON object of the headline figures.
"""
import argparse
import json
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from ada_jax import allocation as A  # noqa: E402
from ada_jax.policies import conformal, knapsack, pilot_commit, vip  # noqa: E402
from ada_jax.tasks import families  # noqa: E402
from ada_jax.tasks.problem import Problem  # noqa: E402
from configs import base  # noqa: E402

MEAN, VISIT = 8, 8
RUN_BUDGET = 12_288  # samples generated + trained: the side by side's runs (conformal's calibration)
RL_FAMILIES = [i + 1 for i, f in enumerate(families.FAMILIES) if not f.control]


def base_rate(level: int) -> float:
    """A family's base pass rate: its share of right-reading SFT targets."""
    f = families.FAMILIES[level - 1]
    return f.share


def _draw(rng, levels, start_id):
    """Prompts of the given families, each a question of its family (the text VIP reads)."""
    texts = random.Random(start_id)
    probs = [Problem(start_id + i, families.make_problem(texts, int(lv) - 1).question, "a",
                     level=int(lv)) for i, lv in enumerate(levels)]
    return probs, np.asarray([base_rate(lv) for lv in levels])


def _shares(n, p):
    return float(n[p <= 0.1].sum() / n.sum()), float(n[p >= 0.9].sum() / n.sum())


def allocation_rows(reps: int, B: int = 16, seed: int = 0) -> dict:
    """Per method: its objective and uniform's (means over reps), and its sample shares."""
    rng = np.random.default_rng(seed)
    c_vip = base.get_config("algo=vip")
    c_kn = base.get_config("algo=knapsack")
    a_v, a_k = c_vip.adaptive.vip, c_kn.adaptive.knapsack
    c_raw = base.get_config("algo=vip")
    c_raw.adaptive.vip.smoothing = 0.0
    c_lab = base.get_config("algo=vip")
    c_lab.adaptive.vip.features = "labels"
    acc = {m: [] for m in ("knapsack", "vip", "vip_labels", "vip_raw", "knapsack_beta",
                           "vip_beta")}
    for r in range(reps):
        others, p_o = _draw(rng, rng.choice(RL_FAMILIES, 3 * B), 10_000_000 * (r + 1))
        probs, p = _draw(rng, rng.choice(RL_FAMILIES, B), 10_000_000 * (r + 1) + 5_000_000)
        visits = {}
        for pr, pp in zip(others + probs, np.concatenate([p_o, p])):
            visits[str(pr.id)] = [VISIT, int(rng.binomial(VISIT, pp)), pr.level]
        texts = {str(pr.id): pr.question for pr in others + probs}
        pos = np.asarray([visits[str(pr.id)][1] for pr in probs], np.float64)
        total = MEAN * B
        uni = np.full(B, MEAN)
        n_kn = knapsack.budgets_for(c_kn, probs, visits)
        n_vip = vip.budgets_for(c_vip, probs, visits, texts)
        n_vipl = vip.budgets_for(c_lab, probs, visits, texts)
        n_vipr = vip.budgets_for(c_raw, probs, visits, texts)
        p_hat, s2_hat = A.beta_moments(np.full(B, float(VISIT)), pos, 1.0, 16.0)
        n_knb = A.knapsack_allocation(p_hat, total, a_k.n_min, a_k.n_max)
        n_vipb = A.vip_allocation(s2_hat, total, 2, a_v.n_max)
        kv = lambda n: float(A.knapsack_value(n, p).sum())  # noqa: E731
        vo = lambda n: A.vip_objective(n, p, a_v.gamma)  # noqa: E731
        var = lambda n: float(A.vip_variance(n, p * (1 - p)).sum())  # noqa: E731
        acc["knapsack"].append((kv(n_kn), kv(uni), *_shares(n_kn, p)))
        acc["vip_raw"].append((vo(n_vipr), vo(uni), *_shares(n_vipr, p), var(n_vipr), var(uni)))
        acc["knapsack_beta"].append((kv(n_knb), kv(uni), *_shares(n_knb, p)))
        acc["vip"].append((vo(n_vip), vo(uni), *_shares(n_vip, p), var(n_vip), var(uni)))
        acc["vip_labels"].append((vo(n_vipl), vo(uni), *_shares(n_vipl, p), var(n_vipl),
                                  var(uni)))
        acc["vip_beta"].append((vo(n_vipb), vo(uni), *_shares(n_vipb, p), var(n_vipb),
                                var(uni)))
    rows = {}
    for m, vals in acc.items():
        v = np.asarray(vals).mean(0)
        obj = "knapsack value" if m.startswith("knapsack") else "VIP program"
        rows[m] = dict(objective=obj, better="higher" if obj == "knapsack value" else "lower",
                       method=float(v[0]), uniform=float(v[1]), share_p_le_0_1=float(v[2]),
                       share_p_ge_0_9=float(v[3]))
        if len(v) > 4:
            rows[m].update(variance=float(v[4]), variance_uniform=float(v[5]))
    uni_shares = _shares(np.full(len(RL_FAMILIES), 1.0),
                         np.asarray([base_rate(lv) for lv in RL_FAMILIES]))
    rows["uniform"] = dict(objective="-", better="-", method=None, uniform=None,
                           share_p_le_0_1=uni_shares[0], share_p_ge_0_9=uni_shares[1])
    return rows


def pilot_commit_row(reps: int, B: int = 16, seed: int = 1) -> dict:
    """Mixed share of the trained groups (a committed prompt's pilot and commit samples) vs
    uniform groups of the same size, and mixed groups per sample generated."""
    rng = np.random.default_rng(seed)
    a = base.get_config("algo=grpo").adaptive.pilot_commit
    G = pilot_commit.group_size(base.get_config("algo=grpo"))[0]
    mixed = lambda p, n: 1 - p ** n - (1 - p) ** n  # noqa: E731
    got, uni, spent, sh = [], [], [], []
    for _ in range(reps):
        p = np.asarray([base_rate(lv) for lv in rng.choice(RL_FAMILIES, a.pilot_batches * B)])
        pos = rng.binomial(a.pilot, p)
        chosen = pilot_commit.commit(pos, np.full(len(p), a.pilot), B, a.p_low, a.p_high)
        pc, kc = p[chosen], pos[chosen]
        if a.train_pilot:  # mixed in the pilot, or the commit adds the missing outcome
            m = np.where(kc == 0, 1 - (1 - pc) ** a.commit,
                         np.where(kc == a.pilot, 1 - pc ** a.commit, 1.0))
        else:
            m = mixed(pc, a.commit)
        got.append(m.mean())
        uni.append(mixed(p[:B], G).mean())
        spent.append(a.pilot * len(p) + a.commit * B)
        n = np.full(len(p), a.pilot)
        n[chosen] += a.commit
        sh.append(_shares(n, p))
    per_sample = np.mean(got) * B / np.mean(spent)
    return dict(objective=f"mixed share of trained groups ({G} samples)", better="higher",
                method=float(np.mean(got)), uniform=float(np.mean(uni)),
                mixed_per_sample=float(per_sample),
                mixed_per_sample_uniform=float(np.mean(uni) / G),
                share_p_le_0_1=float(np.mean([s[0] for s in sh])),
                share_p_ge_0_9=float(np.mean([s[1] for s in sh])))


def run_steps(used: float, B: int, a) -> tuple[int, int]:
    """(steps, calibration samples) of a conformal run until RUN_BUDGET samples generated +
    trained (the training loop's stop): calibration (calib_prompts to the grid's top,
    generated, not trained) before step 1 and every refit_every steps, then `used` samples a
    prompt, each generated and trained."""
    spent, calib, steps = 0.0, 0, 0
    while spent < RUN_BUDGET:
        refit = a.calib_prompts * max(a.grid) if steps % a.refit_every == 0 else 0
        spent += refit + 2 * used * B
        calib += refit
        steps += 1
    return steps, calib


def conformal_row(reps: int, B: int = 16, seed: int = 2) -> dict:
    """Samples per prompt with the calibrated stopping rule vs every prompt to the top."""
    rng = np.random.default_rng(seed)
    a = base.get_config("algo=grpo").adaptive.conformal
    grid = tuple(a.grid)
    rates = np.asarray([base_rate(lv) for lv in RL_FAMILIES])

    def counts(p):  # [L, len(p)] positives among the first k of a grid's top samples
        y = rng.random((len(p), grid[-1])) < p[:, None]
        return np.stack([y[:, :k].sum(1) for k in grid])
    used, cover, deltas, sh = [], [], [], []
    for _ in range(reps):
        p_cal = rng.choice(rates, a.calib_prompts)
        s_cal = counts(p_cal)
        n_cal = np.asarray(grid)[:, None] * np.ones_like(s_cal)
        q, d = conformal.calibrate(n_cal, s_cal, a.alpha, a.auto_delta)
        p = rng.choice(rates, B)
        s = counts(p)
        n = np.full(B, grid[-1])
        done = np.zeros(B, bool)
        for j, k in enumerate(grid[:-1]):
            stop = ~done & conformal.stops(s[j], np.full(B, k), q[j])
            n[stop], done = k, done | stop
        used.append(n.mean())
        cover.append((conformal.score(s[0], grid[0]) <= q[0] + conformal.TIE).mean())
        deltas.append(d)
        sh.append(_shares(n, p))
    steps, calib = run_steps(float(np.mean(used)), B, a)
    per_prompt = calib / (steps * B)
    return dict(objective="samples per trained prompt, calibration included", better="lower",
                method=float(np.mean(used)) + per_prompt, uniform=float(grid[-1]),
                in_training=float(np.mean(used)), calibration_per_prompt=per_prompt,
                run_steps=steps, coverage_first_level=float(np.mean(cover)),
                delta=float(np.mean(deltas)),
                share_p_le_0_1=float(np.mean([x[0] for x in sh])),
                share_p_ge_0_9=float(np.mean([x[1] for x in sh])))


def vip_fresh_row(reps: int, B: int = 16, steps: int = 6, seed: int = 3) -> dict:
    """VIP on a fresh stream (no prompt recurs): per features setting, the mean number of the
    B budgets that differ from uniform 8 on steps 2..steps (step 1 has no history: uniform)."""
    rng = np.random.default_rng(seed)
    out = {}
    for feat in ("text", "labels"):
        c = base.get_config("algo=vip")
        c.adaptive.vip.features = feat
        changed = []
        for r in range(max(reps // 10, 1)):
            visits, texts = {}, {}
            for t in range(steps):
                probs, p = _draw(rng, rng.choice(RL_FAMILIES, B), 10_000_000 * (r + 1) + 1000 * t)
                n = vip.budgets_for(c, probs, visits, texts)
                if t:
                    changed.append(int((n != MEAN).sum()))
                for pr, n_i, pp in zip(probs, n, p):
                    visits[str(pr.id)] = [int(n_i), int(rng.binomial(n_i, pp)), pr.level]
                    texts[str(pr.id)] = pr.question
        out[feat] = float(np.mean(changed))
    return out


def bench(reps: int) -> dict:
    rows = allocation_rows(reps)
    rows["pilot_commit"] = pilot_commit_row(reps)
    rows["conformal"] = conformal_row(reps)
    fresh = vip_fresh_row(reps)
    for r in rows.values():
        if r["method"] is not None:
            sign = 1 if r["better"] == "higher" else -1
            r["beats_uniform"] = bool(sign * (r["method"] - r["uniform"]) >= 0)
    rows["vip"]["fresh_budgets_changed"] = fresh["text"]
    rows["vip_labels"]["fresh_budgets_changed"] = fresh["labels"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (400; quick 60)")
    a = ap.parse_args()
    reps = a.reps or (60 if a.quick else 400)
    rows = bench(reps)
    print(f"{reps} repetitions of B = 16 family-task prompts, mean budget 8, objectives at "
          f"the true p")
    print("| method | objective | method | uniform | share p<=0.1 | share p>=0.9 | >= uniform |")
    print("|---|---|---|---|---|---|---|")
    f = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    for m, r in rows.items():
        print(f"| {m} | {r['objective']} ({r['better']}) | {f(r['method'])} | "
              f"{f(r['uniform'])} | {r['share_p_le_0_1']:.2f} | {r['share_p_ge_0_9']:.2f} | "
              f"{r.get('beats_uniform', '-')} |")
    for m in ("vip", "vip_labels", "vip_raw", "vip_beta"):
        print(f"{m}: plain variance {rows[m]['variance']:.4f} vs uniform "
              f"{rows[m]['variance_uniform']:.4f}")
    print(f"vip on a fresh stream: {rows['vip']['fresh_budgets_changed']:.1f} of 16 budgets "
          f"off uniform a step after the first (labels: "
          f"{rows['vip_labels']['fresh_budgets_changed']:.1f})")
    pc, cf = rows["pilot_commit"], rows["conformal"]
    print(f"pilot_commit: mixed groups per sample spent {pc['mixed_per_sample']:.4f} vs uniform "
          f"{pc['mixed_per_sample_uniform']:.4f}")
    print(f"conformal: {cf['in_training']:.2f} samples a prompt in training + "
          f"{cf['calibration_per_prompt']:.2f} of calibration over a {cf['run_steps']}-step run "
          f"of {RUN_BUDGET:,} samples")
    print(f"conformal: coverage at the first level {cf['coverage_first_level']:.3f} "
          f"(target >= 1 - δ, mean δ {cf['delta']:.3f})")
    print(json.dumps({m: {k: v for k, v in r.items() if k not in ("objective", "better")}
                      for m, r in rows.items()}))


if __name__ == "__main__":
    main()
