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
seeds it rose and fell, and with --reference (one arm or several, comma-separated) each other
arm against the reference's run of the same seed: the paired mean difference, its 95 % t
interval and the seeds ahead and behind. Where the runs hold in-run evaluations on a cost grid
(`eval.every_cost`), the same paired comparison at matched steps, matched samples generated and
matched FLOP-weighted cost: each run's evaluations interpolated (linearly, never extrapolated)
at the largest value of that axis every compared run reached. With --power 5,8: per arm and
level the SD of the paired differences so far and the difference detectable at 80 % power with
5 and 8 seeds (the study's power calculation, docs/real_model.md); --pool hard=level2,level3,…
adds a column of those levels' mean.
"""
import argparse
import json
import os
import sys

import numpy as np
from scipy import stats

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


def paired(d) -> str:
    """'+0.021 [-0.010, +0.052] (4 ahead, 1 behind of 5)': the mean of per-seed differences
    `d`, its two-sided 95 % t interval (none from one seed), and the seeds on either side."""
    d = np.asarray(d, float)
    if not len(d):
        return "–"
    if len(d) < 2:
        return f"{d.mean():+.3f} ({_up_down(d, ('ahead', 'behind'))})"
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return (f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}] "
            f"({_up_down(d, ('ahead', 'behind'))})")


def detectable(sd: float, n: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest paired mean difference a two-sided t-test at `alpha` finds with `power`
    from n seeds whose per-seed differences have standard deviation sd: (t_{1 - alpha/2} +
    t_{power}) at n - 1 degrees of freedom x sd / sqrt(n)."""
    df = n - 1
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd / np.sqrt(n))


def power_lines(rows: dict, ref: str, cols: list[str], seeds: list[int],
                skip=()) -> list[str]:
    """Per arm (but `skip`'s) and column against `ref`: the SD of the paired differences over
    the seeds so far and the difference detectable at 80 % power with each of `seeds` seeds
    (markdown)."""
    out = ["", f"Power against {ref}: SD of the per-seed difference so far; the difference a "
               f"two-sided t-test (5 %) finds with 80 % power at {', '.join(map(str, seeds))} "
               "seeds:", "", "| arm | " + " | ".join(cols) + " |", "|" + "---|" * (1 + len(cols))]
    by_seed = {r["seed"]: r for r in rows[ref]}
    for label, runs in rows.items():
        pairs = [(r, by_seed[r["seed"]]) for r in runs if r["seed"] in by_seed]
        if label == ref or label in skip or len(pairs) < 2:
            continue
        cells = []
        for c in cols:
            sd = float(np.std([r["acc"][c] - q["acc"][c] for r, q in pairs], ddof=1))
            cells.append(f"SD {sd:.3f}: " + ", ".join(f"{detectable(sd, n):.3f}" for n in seeds))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


MATCHED_AXES = (("step", "steps"), ("cum_samples_launched", "samples generated"),
                ("cost_flop_tokens", "FLOP-weighted cost (generated + 3 x trained tokens)"))


def eval_curve(workdir: str, axis: str) -> tuple[np.ndarray, dict]:
    """A run's in-run evaluations along `axis`: (x [E], {'all': [E], 'level1': [E], …}),
    x increasing; empty when the run holds none."""
    recs = [r for r in plots.load_metrics(workdir) if plots.eval_k([r]) and axis in r]
    if not recs:
        return np.zeros(0), {}
    k = plots.eval_k(recs)
    levels = [key for key in recs[0]
              if key.startswith("eval/level") and key.endswith(f"/avg@{k}")]
    keys = {"all": f"eval/avg@{k}", **{key.split("/")[1]: key for key in levels}}
    x = np.asarray([r[axis] for r in recs], float)
    order = np.argsort(x, kind="stable")
    return x[order], {c: np.asarray([r.get(key, np.nan) for r in recs], float)[order]
                      for c, key in keys.items()}


def with_pools(acc: dict, pools: dict | None) -> dict:
    """acc ({'all': …, 'level1': …} or arrays of them) with a column per pool: the mean of its
    levels (the pooled accuracy where the levels hold as many questions each)."""
    return {**acc, **{name: sum(acc[k] for k in levels) / len(levels)
                      for name, levels in (pools or {}).items()}}


def matched_tables(groups, references: list[str], cols: list[str],
                   pools: dict | None = None) -> list[str]:
    """Per axis of MATCHED_AXES and per reference, each other arm's paired differences, read
    at the largest value of the axis that every run of the two arms reached (markdown lines;
    none when the runs hold no in-run evaluations)."""
    out = []
    for axis, words in MATCHED_AXES:
        curves = {label: {plots.run_seed(d): _pooled(eval_curve(d, axis), pools)
                          for d in dirs} for label, dirs in groups}
        if not all(len(x) for runs in curves.values() for x, _ in runs.values()):
            continue
        for i, ref in enumerate(references):
            lines = []
            for label, runs in curves.items():
                if label == ref or label in references[:i]:  # each pair once
                    continue
                seeds = sorted(s for s in runs if s in curves[ref])
                if not seeds:
                    continue
                at = min(min(runs[s][0][-1], curves[ref][s][0][-1]) for s in seeds)
                read = lambda x, y: float(np.interp(at, x, y))  # noqa: E731
                cells = [paired([read(*_one(runs[s], c)) - read(*_one(curves[ref][s], c))
                                 for s in seeds]) for c in cols]
                lines.append(f"| {label} | {at:,.0f} | " + " | ".join(cells) + " |")
            if lines:
                out += ["", f"In-run evaluations at matched {words}, against {ref} (same seed): "
                            f"mean difference [95 % interval] (seeds ahead, behind):", "",
                        "| arm | at | " + " | ".join(cols) + " |",
                        "|" + "---|" * (2 + len(cols))] + lines
    return out


def _pooled(curve, pools):
    x, ys = curve
    return x, with_pools(ys, pools) if len(x) else ys


def _one(curve, col):
    x, ys = curve
    return x, ys.get(col, np.full(len(x), np.nan))


def tables(base: dict, groups, reference: str | list[str] | None = None,
           budget: int | None = None, power: list[int] | None = None,
           pools: dict | None = None) -> str:
    """The markdown of the module docstring. `base`: an evaluate.py report; `groups`:
    [(label, [workdir, …])], seeds paired across groups by config seed; `budget`: read every
    run at that cost (run_row); `power`: seed counts for `power_lines` against each reference;
    `pools`: {name: [level, …]}, a column each (`with_pools`)."""
    base_acc = with_pools(accuracies(base), pools)
    cols = list(base_acc)
    rows = {label: [run_row(d, budget) for d in dirs] for label, dirs in groups}
    for runs in rows.values():
        for r in runs:
            r["acc"] = with_pools(r["acc"], pools)
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
    references = [reference] if isinstance(reference, str) else list(reference or [])
    for name in references:
        if name not in rows:
            raise ValueError(f"--reference {name!r} is not a group: {sorted(rows)}")
    if len(rows) < 2:  # one arm: nothing to compare it with
        references = []
    for i, name in enumerate(references):
        ref = {r["seed"]: r for r in rows[name]}
        lines = []
        for label, runs in rows.items():
            if label == name or label in references[:i]:  # each pair once
                continue
            pairs = [(r, ref[r["seed"]]) for r in runs if r["seed"] in ref]
            cells = [paired([r["acc"][c] - q["acc"][c] for r, q in pairs]) for c in cols]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        if lines:
            out += ["", f"Against {name}, same seed: mean difference [95 % interval] (seeds "
                        f"ahead, behind of those paired):", "", "| arm | " + " | ".join(cols)
                    + " |", "|" + "---|" * (1 + len(cols))] + lines
        if power:
            out += power_lines(rows, name, cols, power, skip=references[:i])
    out += matched_tables(groups, references, cols, pools)
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="evaluate.py --base report (JSON file)")
    ap.add_argument("--groups", nargs="+", required=True,
                    help="label=dir1,dir2,… : one arm's runs (seeds)")
    ap.add_argument("--reference", default=None,
                    help="group labels, comma-separated: per-seed comparisons against each")
    ap.add_argument("--budget", type=int, default=None,
                    help="read each run at this cost (samples): its heldout_BUDGET.json")
    ap.add_argument("--power", default=None,
                    help="seed counts, comma-separated (e.g. 5,8): per arm and level the SD "
                         "of the paired differences so far and the difference detectable at "
                         "80 %% power with that many seeds, against each --reference")
    ap.add_argument("--pool", nargs="*", default=[],
                    help="name=level2,level3,… : a column of those levels' mean (e.g. the "
                         "hard levels pooled)")
    args = ap.parse_args(argv)
    with open(args.base) as f:
        base = json.load(f)
    groups = plots.parse_groups(args.groups)
    try:
        pools = {name: levels.split(",") for name, levels in
                 (p.split("=", 1) for p in args.pool)}
        print(tables(base, groups, args.reference and args.reference.split(","), args.budget,
                     args.power and [int(n) for n in args.power.split(",")], pools))
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"before_after.py: {e}")


if __name__ == "__main__":
    main()
