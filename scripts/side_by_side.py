"""Collection policies side by side: one markdown table of seed means, matched steps
and matched cost (samples generated + trained, and FLOP-weighted), with per-seed counts
against a reference arm, and the seed-mean eval-vs-cost plot.

  python scripts/side_by_side.py --root /tmp/side/pool --methods grpo_n4,grpo_n16,dapo,greso \
      --step 8 --costs 2048,4096 --reference grpo_n4 --out /tmp/side/pool/plots

Runs are ROOT/<method>_s<seed> (scripts/reproduce.sh's layout). The FLOP-weighted column reads
every run at the largest FLOP-weighted cost (cost_flop_tokens) that every run reached.
"""
import argparse
import glob
import os

import numpy as np

from ada_jax import plots

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="folder holding <method>_s<seed> runs")
    ap.add_argument("--methods", required=True, help="comma-separated method names")
    ap.add_argument("--step", type=int, required=True, help="the matched step")
    ap.add_argument("--costs", default="2048,4096", help="matched costs (samples gen. + trained)")
    ap.add_argument("--reference", default="grpo_n4", help="per-seed counts against this arm")
    ap.add_argument("--out", default="", help="write the seed-mean plots here")
    a = ap.parse_args()
    costs = [float(c) for c in a.costs.split(",")]
    runs = {m: sorted(glob.glob(os.path.join(a.root, f"{m}_s[0-9]*")))
            for m in a.methods.split(",")}
    runs = {m: [d for d in ds if os.path.isdir(d)] for m, ds in runs.items()}
    missing = [m for m, ds in runs.items() if not ds]
    if missing:
        ap.error(f"no runs under {a.root} for {', '.join(missing)}")
    metrics = {m: {plots.run_seed(d): plots.load_metrics(d) for d in ds} for m, ds in runs.items()}
    k = plots.eval_k(next(iter(next(iter(metrics.values())).values())))
    flop = min(recs[-1]["cost_flop_tokens"] for seeds in metrics.values()
               for recs in seeds.values())
    ref = metrics.get(a.reference, {})
    head = (["method", "seeds", "steps", "samples/step", "mixed share",
             f"step {a.step}: all / very hard / hard"]
            + [f"{c:,.0f} samples: all" for c in costs[:-1]]
            + [f"{costs[-1]:,.0f} samples: all / very hard / hard",
               f"{flop / 1e3:,.0f}k FLOP-tokens: all",
               f"> {a.reference} at {costs[-1]:,.0f} (seeds)"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, seeds in metrics.items():
        steps = [recs[-1]["step"] for recs in seeds.values()]
        per_step = [recs[-1]["cost_samples"] / recs[-1]["step"] for recs in seeds.values()]
        mixed = [np.mean([r["effective_prompt_ratio"] for r in recs
                          if "effective_prompt_ratio" in r]) for recs in seeds.values()]
        at_step = []
        for tier in (None,) + TIERS:
            vals = []
            for recs in seeds.values():
                rec = next((r for r in recs if r.get("step") == a.step
                            and _eval(r, k) is not None), None)
                vals.append(None if rec is None else _eval(rec, k, tier))
            at_step.append(_mean(vals))
        cells = [m, str(len(seeds)), f"{min(steps)}–{max(steps)}", f"{np.mean(per_step):.0f}",
                 f"{np.mean(mixed):.2f}", " / ".join(_fmt(v, 2) for v in at_step)]
        for c in costs[:-1]:
            cells.append(_fmt(_mean([_interp(r, k, "cost_samples", c) for r in seeds.values()])))
        cells.append(" / ".join(
            _fmt(_mean([_interp(r, k, "cost_samples", costs[-1], t) for r in seeds.values()]), 2)
            for t in (None,) + TIERS))
        cells.append(_fmt(_mean([_interp(r, k, "cost_flop_tokens", flop)
                                 for r in seeds.values()])))
        if m == a.reference or not ref:
            cells.append("")
        else:
            diffs = [(_interp(r, k, "cost_samples", costs[-1]) or np.nan)
                     - (_interp(ref[s], k, "cost_samples", costs[-1]) or np.nan)
                     for s, r in seeds.items() if s in ref]
            wins = sum(d > 0 for d in diffs if np.isfinite(d))
            rng = [d for d in diffs if np.isfinite(d)]
            cells.append(f"{wins} of {len(diffs)}" + (f" ({min(rng):+.2f}..{max(rng):+.2f})"
                                                      if rng else ""))
        lines.append("| " + " | ".join(cells) + " |")
    print(f"held-out avg@{k}, seed means; matched cost interpolated between evals")
    print("\n".join(lines))
    if a.out:
        paths = plots.plot_groups(list(runs.items()), a.out)
        print("plots:", *paths, sep="\n  ")


if __name__ == "__main__":
    main()
