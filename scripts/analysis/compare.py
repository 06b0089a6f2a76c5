"""Compare runs: plots (reward / eval vs step, tokens, wall time; effective-prompt ratio;
all-correct / all-wrong shares; samples per prompt) and a markdown table.

  python scripts/analysis/compare.py --workdirs /tmp/grpo /tmp/ada --out plots/ --target 0.5
  python scripts/analysis/compare.py --groups grpo4=/tmp/g4_s0,/tmp/g4_s1 ada=/tmp/a_s0,/tmp/a_s1 \
      --bar grpo4 --claims "ada>grpo4" --step 40
"""
import argparse
import os
import tempfile

import numpy as np

from ada_jax import plots


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdirs", nargs="*", default=[], help="run directories")
    ap.add_argument("--groups", nargs="*", default=[],
                    help="label=dir1,dir2,… : seeds of one method, averaged in the table")
    ap.add_argument("--out", default="plots", help="where the PNGs go")
    ap.add_argument("--target", type=float, default=None,
                    help="eval accuracy for the tokens-to-target column")
    ap.add_argument("--at_tokens", type=float, default=None,
                    help="also report accuracies interpolated at this many generated tokens")
    ap.add_argument("--bar", default=None,
                    help="group label(s), comma-separated: per seed, each method's cost to "
                         "reach the accuracy of the best of them on that seed (mean of its "
                         "last two evals), as a fraction of that run's final cost")
    ap.add_argument("--bar_peak", action="store_true",
                    help="--bar's target: each reference run's best mean of two consecutive "
                         "evals anywhere in its run instead of its last two (a reference that "
                         "declines late is then read at its best)")
    ap.add_argument("--bar_key", default=None,
                    help="--bar on this eval metric instead of the held-out accuracy (one "
                         "tier's: eval/tier_very_hard/avg@4)")
    ap.add_argument("--claims", nargs="*", default=[],
                    help="a>b pairs of group labels: on how many seeds a beats b per tier at "
                         "--step")
    ap.add_argument("--step", type=int, default=None,
                    help="matched steps: the table and --claims read each run at this step "
                         "(default: the table at each run's end, the claims at step 40)")
    ap.add_argument("--at_costs", default="",
                    help="comma-separated costs (samples generated + trained): seed-mean "
                         "held-out accuracy, all and per tier, interpolated at each")
    ap.add_argument("--upto_cost", type=float, default=None,
                    help="read every run only up to this cost (samples generated + trained): "
                         "with a constant lr after warm-up, a run to a larger budget is a run "
                         "to this one followed by more steps")
    args = ap.parse_args()
    groups = list(zip(plots.run_labels(args.workdirs), ([w] for w in args.workdirs)))
    groups += plots.parse_groups(args.groups)
    if not groups:
        ap.error("give --workdirs or --groups")
    if args.upto_cost is not None:
        tmp = tempfile.mkdtemp(prefix="compare_upto_")
        groups = [(label, [plots.truncated_copy(d, args.upto_cost, os.path.join(tmp, label,
                                                                                str(i)))
                           for i, d in enumerate(ds)]) for label, ds in groups]
    dirs = [d for _, ds in groups for d in ds]
    labels = [label if len(ds) == 1 else f"{label}/{os.path.basename(os.path.normpath(d))}"
              for label, ds in groups for d in ds]
    paths = plots.plot_runs(dirs, args.out, labels)
    paths += plots.plot_groups(groups, args.out)
    print("plots:", *paths, sep="\n  ")
    rows = []
    for label, ds in groups:
        per_seed = [plots.summary_row(d, args.target, args.at_tokens, args.step) for d in ds]
        row = {"method": label, "seeds": len(ds)}
        for k in per_seed[0]:
            if k == "run":
                continue
            vals = [r.get(k) for r in per_seed]
            if all(isinstance(v, (int, float)) for v in vals):
                mean = float(np.mean(vals))
                row[k] = (f"{mean:.4g} ± {np.std(vals, ddof=1):.2g}" if len(vals) > 1
                          else mean)  # mean ± sd over seeds
            else:
                row[k] = "/".join(str(v) for v in vals)
        rows.append(row)
    print(plots.markdown_table(rows))
    pairs = [tuple(c.split(">", 1)) for c in args.claims]
    unknown = [g for g in (args.bar.split(",") if args.bar else []) + [g for p in pairs for g in p]
               if g not in dict(groups)]
    if unknown:
        ap.error(f"--bar / --claims name no group: {', '.join(unknown)} (groups: "
                 f"{', '.join(dict(groups))})")
    if pairs:
        step = 40 if args.step is None else args.step
        print(f"\nmatched steps (held-out accuracy at step {step}, seeds paired):")
        print(*plots.ordering_counts(groups, pairs, step), sep="\n")
    if args.at_costs:
        costs = [float(c) for c in args.at_costs.split(",")]
        recs = plots.load_metrics(groups[0][1][0])
        keys = [None] + sorted({k for r in recs for k in r if k.startswith("eval/tier_")
                                and k.endswith("/avg@" + str(plots.eval_k(recs)))})
        print("\nseed-mean held-out accuracy at matched cost (samples generated + trained; "
              "'-': a run ended before it):")
        for key in keys:
            rows = [{"method": label, **{f"{c:,.0f}": "-" if v is None else round(v, 3)
                                         for c, v in zip(costs, plots.at_costs(ds, costs, key))}}
                    for label, ds in groups]
            print(f"\n{key or 'all held-out prompts'}:")
            print(plots.markdown_table(rows))
    if args.bar:
        refs = args.bar.split(",")
        rows = plots.cost_bar(groups, refs, peak=args.bar_peak, key=args.bar_key)
        which = "its best two consecutive evals" if args.bar_peak else "its last two evals"
        print(f"\nthe bar{' on ' + args.bar_key if args.bar_key else ''}: per seed, cost to "
              f"reach the accuracy of the best of {args.bar} on "
              f"that seed (mean of {which}) / that run's final cost; '-': not "
              f"reached by the end of the run; pooled: the seed-mean curves, beside:")
        print(plots.markdown_table(rows))
        print(*plots.bar_words(rows), sep="\n")


if __name__ == "__main__":
    main()
