"""Collection policies side by side: one markdown table of seed means, matched steps and
matched cost (samples generated + trained, and FLOP-weighted), with per-seed counts against a
reference arm and against the best uniform arm, each arm's share of samples on prompts whose
base pass rate is <= 0.1 and >= 0.9 (family task), and the seed-mean eval-vs-cost plot.

  python scripts/analysis/side_by_side.py --root /tmp/side/pool --methods grpo_n4,grpo_n8,dapo,greso \
      --step 8 --costs 2048,4096 --reference grpo_n4 --uniform grpo_n4,grpo_n8 \
      --out /tmp/side/pool/plots

Runs are ROOT/<method>_s<seed> (scripts/reproduce.sh's layout). A warning line on stderr
names each seed an arm lacks that another has, each run that stopped short of its config's
steps or cost budget, and each run with an empty metrics.jsonl (left out). The FLOP-weighted
column reads every run at the largest FLOP-weighted cost (cost_flop_tokens) that every run
which did not stop short reached, and says which run sets it; a short run counts there only if
it got that far. A cell averages the seeds that reached it; where some did not it says
"(k of n)", so no seed drops out unseen. The best uniform arm is the --uniform arm with the highest seed mean at the last
matched cost; each arm counts the seeds (reached by both) where it beats that arm's same seed,
at the last matched cost and, against the reference, at the FLOP-weighted cost.
"""
import argparse
import glob
import os
import sys

import numpy as np

from ada_jax import plots
from ada_jax.train import TRAIN_TOKEN_WEIGHT

TIERS = ("very_hard", "hard")


def _eval(rec: dict, k: int, tier: str | None = None):
    return rec.get(f"eval/avg@{k}" if tier is None else f"eval/tier_{tier}/avg@{k}")


def _interp(recs, k, cost_key, cost, tier=None):
    pts = [(r[cost_key], _eval(r, k, tier)) for r in recs if _eval(r, k, tier) is not None]
    if not pts or cost > pts[-1][0] + 1e-9:
        return None
    xs, ys = zip(*pts)
    return float(np.interp(cost, xs, ys))


def _mean(vals):
    vals = [v for v in vals if v is not None]
    return float(np.mean(vals)) if vals else None


def _fmt(v, nd=3):
    return "-" if v is None else f"{v:.{nd}f}"


def _reached(vals) -> str:
    """"" when every seed has a value, else " (k of n)": the seeds a cell averages."""
    k = sum(v is not None for v in vals)
    return "" if k == len(vals) else f" ({k} of {len(vals)})"


def _cell(vals, nd=3) -> str:
    return _fmt(_mean(vals), nd) + _reached(vals)


def _wins(mine: dict, theirs: dict, k: int, cost: float, key: str = "cost_samples") -> str:
    """Seeds where this arm beats the other arm's same seed at `cost` of `key` ("w of m"; m:
    seeds both reached), the range of the differences, and the seeds not compared."""
    diffs = []
    for seed in sorted(mine):
        a = _interp(mine[seed], k, key, cost)
        b = _interp(theirs[seed], k, key, cost) if seed in theirs else None
        diffs.append(None if a is None or b is None else a - b)
    got = [d for d in diffs if d is not None]
    out = f"{sum(d > 0 for d in got)} of {len(got)}"
    if got:
        out += f" ({min(got):+.2f}..{max(got):+.2f})"
    missed = [str(s) for s, d in zip(sorted(mine), diffs) if d is None]
    return out + (f"; seed {', '.join(missed)} not compared" if missed else "")


def _base_shares(recs) -> str:
    lo = sum(r.get("samples_base_p_le_0_1", 0) for r in recs)
    hi = sum(r.get("samples_base_p_ge_0_9", 0) for r in recs)
    tot = sum(r.get("samples_base_counted", 0) for r in recs)
    return (lo / tot, hi / tot) if tot else None


def load_runs(runs: dict) -> tuple[dict, set, list]:
    """({method: {seed: records}}, the (method, seed) of runs that stopped short, warning
    lines): a seed some arm has and another lacks, a run that stopped short of its config's
    steps or cost budget, and a run with no records (left out, also from `runs`) are each
    named."""
    metrics, short, warnings = {}, set(), []
    for m, dirs in runs.items():
        metrics[m] = {}
        for d in list(dirs):
            recs = plots.load_metrics(d)
            if not recs:
                warnings.append(f"warning: {d}/metrics.jsonl has no records: left out")
                dirs.remove(d)
                continue
            seed = plots.run_seed(d)
            metrics[m][seed] = recs
            why = plots.stopped_short(d, recs)
            if why:
                short.add((m, seed))
                warnings.append(f"warning: {d} {why} (cost {recs[-1].get('cost_samples', 0):,} "
                                f"samples): its cells count only the costs it reached")
    seeds = {s for by_seed in metrics.values() for s in by_seed}
    for m, by_seed in metrics.items():
        for s in sorted(seeds - set(by_seed), key=str):
            warnings.append(f"warning: no run {m}_s{s} (other arms have seed {s})")
    return metrics, short, warnings


def common_cost(metrics: dict, short: set, key: str) -> tuple[float, str]:
    """(the largest `key` every run that did not stop short reached, the run that ends
    there as method_s<seed>); every run's when all stopped short."""
    ends = [(recs[-1].get(key, 0), f"{m}_s{s}") for m, seeds in metrics.items()
            for s, recs in seeds.items() if (m, s) not in short]
    ends = ends or [(recs[-1].get(key, 0), f"{m}_s{s}") for m, seeds in metrics.items()
                    for s, recs in seeds.items()]
    return min(ends)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="folder holding <method>_s<seed> runs")
    ap.add_argument("--methods", required=True, help="comma-separated method names")
    ap.add_argument("--step", type=int, required=True, help="the matched step")
    ap.add_argument("--costs", default="2048,4096", help="matched costs (samples gen. + trained)")
    ap.add_argument("--reference", default="grpo_n4", help="per-seed counts against this arm")
    ap.add_argument("--uniform", default="grpo_n4,grpo_n8,grpo_n16,rloo_n8",
                    help="uniform arms: per-seed counts against the best of those present")
    ap.add_argument("--train_weight", type=float, default=TRAIN_TOKEN_WEIGHT,
                    help="FLOP-weighted cost = generated + this x (trained + replayed) tokens "
                         f"(the runs' own cost_flop_tokens uses {TRAIN_TOKEN_WEIGHT})")
    ap.add_argument("--out", default="", help="write the seed-mean plots here")
    a = ap.parse_args()
    costs = [float(c) for c in a.costs.split(",")]
    runs = {m: sorted(d for d in glob.glob(os.path.join(a.root, f"{m}_s[0-9]*"))
                      if os.path.isdir(d)) for m in a.methods.split(",")}
    missing = [m for m, ds in runs.items() if not ds]
    if missing:
        ap.error(f"no runs under {a.root} for {', '.join(missing)}")
    metrics, short, warnings = load_runs(runs)
    for w in warnings:
        print(w, file=sys.stderr)
    empty = [m for m, seeds in metrics.items() if not seeds]
    if empty:
        ap.error(f"no run with metrics under {a.root} for {', '.join(empty)}")
    if a.train_weight != TRAIN_TOKEN_WEIGHT:  # the same cost with another weight on a trained token
        for seeds in metrics.values():
            for recs in seeds.values():
                for r in recs:
                    if "cum_generated_tokens" in r:
                        r["cost_flop_tokens"] = r["cum_generated_tokens"] + a.train_weight * (
                            r.get("cum_trained_tokens", 0) + r.get("cum_replay_tokens", 0))
    k = plots.eval_k(next(iter(next(iter(metrics.values())).values())))
    flop, by = common_cost(metrics, short, "cost_flop_tokens")
    print(f"FLOP-weighted column at {flop / 1e3:,.0f}k FLOP-tokens: the largest cost every "
          f"full run reached (set by {by})", file=sys.stderr)
    reach, by = common_cost(metrics, short, "cost_samples")
    for c in costs:
        if c > reach:
            print(f"warning: {c:,.0f} samples is past {by}'s end ({reach:,.0f}): that column "
                  f"averages the runs that reached it", file=sys.stderr)
    last = costs[-1]
    ref = metrics.get(a.reference, {})
    uniform = [m for m in a.uniform.split(",") if m in metrics]
    def at_last(m):
        v = _mean([_interp(r, k, "cost_samples", last) for r in metrics[m].values()])
        return -1.0 if v is None else v
    best = max(uniform, key=at_last, default=None)
    head = (["method", "seeds", "steps", "samples/step", "mixed share",
             f"step {a.step}: all / very hard / hard"]
            + [f"{c:,.0f} samples: all" for c in costs[:-1]]
            + [f"{last:,.0f} samples: all / very hard / hard",
               f"{flop / 1e3:,.0f}k FLOP-tokens: all",
               "samples on base p ≤ 0.1 / ≥ 0.9",
               f"> {a.reference} at {last:,.0f} (seeds)",
               f"> best uniform ({best}) at {last:,.0f} (seeds)",
               f"> {a.reference} at {flop / 1e3:,.0f}k FLOP-tokens (seeds)"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, seeds in metrics.items():
        steps = [recs[-1]["step"] for recs in seeds.values()]
        per_step = [recs[-1]["cost_samples"] / max(recs[-1]["step"], 1) for recs in seeds.values()]
        mixed = [np.mean([r["effective_prompt_ratio"] for r in recs
                          if "effective_prompt_ratio" in r]) for recs in seeds.values()]
        at_step = []
        for tier in (None,) + TIERS:
            vals = []
            for recs in seeds.values():
                rec = next((r for r in recs if r.get("step") == a.step
                            and _eval(r, k) is not None), None)
                vals.append(None if rec is None else _eval(rec, k, tier))
            at_step.append(vals)
        cells = [m, str(len(seeds)), f"{min(steps)}–{max(steps)}", f"{np.mean(per_step):.0f}",
                 f"{np.mean(mixed):.2f}",
                 " / ".join(_fmt(_mean(v), 2) for v in at_step) + _reached(at_step[0])]
        for c in costs[:-1]:
            cells.append(_cell([_interp(r, k, "cost_samples", c) for r in seeds.values()]))
        tiers = [[_interp(r, k, "cost_samples", last, t) for r in seeds.values()]
                 for t in (None,) + TIERS]
        cells.append(" / ".join(_fmt(_mean(v), 2) for v in tiers) + _reached(tiers[0]))
        cells.append(_cell([_interp(r, k, "cost_flop_tokens", flop) for r in seeds.values()]))
        sh = [_base_shares(r) for r in seeds.values()]
        sh = [x for x in sh if x is not None]
        cells.append(f"{np.mean([x[0] for x in sh]):.2f} / {np.mean([x[1] for x in sh]):.2f}"
                     if sh else "-")
        cells.append("" if m == a.reference or not ref else _wins(seeds, ref, k, last))
        cells.append("" if best is None or m == best else _wins(seeds, metrics[best], k, last))
        cells.append("" if m == a.reference or not ref
                     else _wins(seeds, ref, k, flop, "cost_flop_tokens"))
        lines.append("| " + " | ".join(cells) + " |")
    print(f"held-out avg@{k}, seed means; matched cost interpolated between evals")
    print("\n".join(lines))
    if a.out:
        paths = plots.plot_groups(list(runs.items()), a.out)
        print("plots:", *paths, sep="\n  ")


if __name__ == "__main__":
    main()
