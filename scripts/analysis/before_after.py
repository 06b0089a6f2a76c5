"""Held-out accuracy before and after RL, per level and per seed, with what each run spent.

Each run directory holds `heldout.json` (`scripts/evaluate.py --workdir=RUN --out=RUN/heldout.json`)
beside its metrics.jsonl, or with `--budget B` `heldout_B.json`, the evaluation of the run's
policy at the first step whose cost reached B samples (scripts/real_model.sh writes one a
budget: a run resumed to a larger budget keeps the smaller one's); `--base` is the base
policy's evaluation (`evaluate.py --base --out=…`).

  python scripts/analysis/before_after.py --base /tmp/rm/base.json \
      --groups grpo_n4=/tmp/rm/grpo_n4_s0,/tmp/rm/grpo_n4_s1 ada_pos=/tmp/rm/ada_pos_s0,… \
      --reference grpo_n4

Prints markdown: one row per run (steps, samples generated (finished: the metrics'
cum_samples), samples launched (cut ones included: cum_samples_launched), cost in samples
launched + trained, generated and trained tokens, the FLOP-weighted cost (generated + 3 x trained tokens),
sampler and learner tokens per second, held-out accuracy
overall and per level), then per arm and level the mean change from the base and on how many
seeds it rose and fell, and with --reference the same against the reference's run of each
seed.
"""
import argparse
import json
import os
import sys

import numpy as np

from ada_jax import plots

HELDOUT = "heldout.json"


def accuracy_keys(report: dict) -> tuple[str, list[str]]:
    """('avg@k', ['level1/avg@k', …]) of an evaluate.py report, levels in numeric order."""
    overall = [k for k in report if k.startswith("avg@")]
    if len(overall) != 1:
        raise ValueError(f"an evaluate.py report has one avg@k, got {overall}")
    levels = [k for k in report if k.startswith("level") and k.endswith("/" + overall[0])]
    return overall[0], sorted(levels, key=lambda k: int(k[len("level"):].split("/")[0]))


def accuracies(report: dict) -> dict:
    """{'all': avg@k, 'level1': …} of an evaluate.py report (any k: avg@k's expectation is
    the pass rate whatever k, so a base at k = 4 and runs at k = 2 compare)."""
    overall, levels = accuracy_keys(report)
    return {"all": report[overall], **{k.split("/")[0]: report[k] for k in levels}}


def run_row(workdir: str, budget: int | None = None) -> dict:
    """What one run spent (summed over its steps; with `budget` up to the first step whose
    cost reached it) and its held-out accuracies (there)."""
    recs = plots.load_metrics(workdir)
    if budget is not None:
        recs = plots.upto_cost(recs, budget)
        if not recs or recs[-1].get("cost_samples", 0) < budget:
            raise ValueError(f"{workdir}: the run never reached a cost of {budget} samples")
    if not recs:
        raise ValueError(f"{workdir}: metrics.jsonl has no steps")
    name = HELDOUT if budget is None else f"heldout_{budget}.json"
    path = os.path.join(workdir, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} missing: run scripts/evaluate.py --workdir={workdir} "
                                f"--out={path}")
    with open(path) as f:
        report = json.load(f)
    total = lambda key: float(sum(r.get(key, 0) for r in recs))  # noqa: E731
    last = recs[-1]
    return {"seed": plots.load_config(workdir).get("seed"), "steps": last["step"],
            "samples": last.get("cum_samples", total("samples_total")),
            "launched": last.get("cum_samples_launched", total("samples_launched")),
            "cost": last.get("cost_samples", float("nan")),
            "flop_tokens": last.get("cost_flop_tokens", float("nan")),
            "generated_tokens": total("generated_tokens"), "trained_tokens": total("trained_tokens"),
            "sampler_tok_s": total("generated_tokens") / max(total("time_sampling"), 1e-9),
            "learner_tok_s": total("trained_tokens") / max(total("time_learning"), 1e-9),
            "short": "" if budget is not None else plots.stopped_short(workdir, recs),
            "acc": accuracies(report)}


def _up_down(d: np.ndarray, words=("up", "down")) -> str:
    """'2 up, 1 down of 3' for per-seed differences `d` (ties are neither)."""
    return f"{int((d > 0).sum())} {words[0]}, {int((d < 0).sum())} {words[1]} of {len(d)}"


def tables(base: dict, groups, reference: str | None = None, budget: int | None = None) -> str:
    """The markdown of the module docstring. `base`: an evaluate.py report; `groups`:
    [(label, [workdir, …])], seeds paired across groups by config seed; `budget`: read every
    run at that cost (run_row)."""
    base_acc = accuracies(base)
    cols = list(base_acc)
    rows = {label: [run_row(d, budget) for d in dirs] for label, dirs in groups}
    out = ["| arm | seed | steps | samples generated | launched (cut included) | cost (samples) | "
           "generated tokens | trained tokens | FLOP-tokens | sampler tok/s | learner tok/s | "
           + " | ".join(cols) + " |", "|" + "---|" * (11 + len(cols)),
           "| base |" + " |" * 10 + " " + " | ".join(f"{base_acc[c]:.3f}" for c in cols) + " |"]
    for label, runs in rows.items():
        for r in runs:
            out.append(f"| {label} | {r['seed']} | {r['steps']}{' (' + r['short'] + ')' if r['short'] else ''} "
                       f"| {r['samples']:.0f} | {r['launched']:.0f} | {r['cost']:.0f} | {r['generated_tokens']:.0f} | "
                       f"{r['trained_tokens']:.0f} | {r['flop_tokens']:.0f} | "
                       f"{r['sampler_tok_s']:.1f} | "
                       f"{r['learner_tok_s']:.1f} | "
                       + " | ".join(f"{r['acc'].get(c, float('nan')):.3f}" for c in cols) + " |")
    out += ["", "Change from the base: seed mean (seeds up, down of all):", "",
            "| arm | " + " | ".join(cols) + " |", "|" + "---|" * (1 + len(cols))]
    for label, runs in rows.items():
        cells = []
        for c in cols:
            d = np.array([r["acc"][c] - base_acc[c] for r in runs])
            cells.append(f"{d.mean():+.3f} ({_up_down(d)})")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    if reference is not None and reference not in rows:
        raise ValueError(f"--reference {reference!r} is not a group: {sorted(rows)}")
    if reference is not None and len(rows) > 1:  # one arm: nothing to compare it with
        ref = {r["seed"]: r for r in rows[reference]}
        out += ["", f"Against {reference}, same seed: mean difference (seeds ahead, behind of "
                    f"those paired):", "", "| arm | " + " | ".join(cols) + " |",
                "|" + "---|" * (1 + len(cols))]
        for label, runs in rows.items():
            if label == reference:
                continue
            paired = [(r, ref[r["seed"]]) for r in runs if r["seed"] in ref]
            cells = []
            for c in cols:
                d = np.array([r["acc"][c] - q["acc"][c] for r, q in paired])
                cells.append(f"{d.mean():+.3f} ({_up_down(d, ('ahead', 'behind'))})"
                             if len(d) else "–")
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="evaluate.py --base report (JSON file)")
    ap.add_argument("--groups", nargs="+", required=True,
                    help="label=dir1,dir2,… : one arm's runs (seeds)")
    ap.add_argument("--reference", default=None, help="a group label: per-seed comparisons")
    ap.add_argument("--budget", type=int, default=None,
                    help="read each run at this cost (samples): its heldout_BUDGET.json")
    args = ap.parse_args(argv)
    with open(args.base) as f:
        base = json.load(f)
    groups = plots.parse_groups(args.groups)
    try:
        print(tables(base, groups, args.reference, args.budget))
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"before_after.py: {e}")


if __name__ == "__main__":
    main()
