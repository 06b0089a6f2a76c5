"""Plots and tables from run directories (metrics.jsonl), for scripts/compare.py and notebooks."""
import json
import os
from typing import Sequence

import numpy as np


def load_metrics(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _series(records, key, x="step"):
    pts = [(r[x], r[key]) for r in records if key in r and x in r]
    return np.asarray(pts, float).reshape(-1, 2)


def _eval_key(records):
    keys = sorted({k for r in records for k in r if k.startswith("eval/avg@")})
    return keys[0] if keys else None


def stopped_short(workdir: str, recs: list[dict] | None = None) -> str:
    """"" for a run that reached its config's rl.steps, else "stopped at step N of M" (a crashed
    or unfinished run must not read as complete in a table or a legend). `recs`: its metrics,
    when already loaded."""
    recs = load_metrics(workdir) if recs is None else recs
    try:
        with open(os.path.join(workdir, "config.json")) as f:
            planned = json.load(f)["rl"]["steps"]
    except (OSError, KeyError, ValueError):
        return ""
    reached = recs[-1].get("step", 0) if recs else 0
    return "" if reached >= planned else f"stopped at step {reached} of {planned}"


def plot_runs(workdirs: Sequence[str], out_dir: str, labels: Sequence[str] | None = None):
    """Draw the standard comparison figures; returns the PNG paths."""
    from matplotlib.figure import Figure  # no pyplot: leaves a notebook's backend alone
    os.makedirs(out_dir, exist_ok=True)
    loaded = [load_metrics(w) for w in workdirs]
    runs = [((labels[i] if labels else os.path.basename(os.path.normpath(w)))
             + (" (stopped short)" if stopped_short(w, recs) else ""), recs)
            for i, (w, recs) in enumerate(zip(workdirs, loaded))]
    figures = [
        ("eval_vs_step", "step", None, "eval accuracy"),
        ("eval_vs_tokens", "cum_generated_tokens", None, "eval accuracy"),
        ("eval_vs_wall", "cum_wall", None, "eval accuracy"),
        ("reward_vs_step", "step", "reward_mean", "train pool reward"),
        ("effective_prompt_ratio", "step", "effective_prompt_ratio", "effective prompt ratio"),
        ("all_correct_before", "step", "all_correct_before", "all-correct share (first n)"),
        ("all_wrong_before", "step", "all_wrong_before", "all-wrong share (first n)"),
        ("samples_per_prompt", "step", "samples_per_prompt_mean", "samples per prompt"),
    ]
    paths = []
    for name, x, key, ylabel in figures:
        fig = Figure(figsize=(5, 3.5))
        ax = fig.subplots()
        for label, recs in runs:
            k = key or _eval_key(recs)
            if k is None:
                continue
            pts = _series(recs, k, x)
            if len(pts):
                ax.plot(pts[:, 0], pts[:, 1], marker="." if key is None else None, label=label)
        paths.append(_save(fig, ax, x, ylabel, os.path.join(out_dir, f"{name}.png")))
    return paths


AXIS_LABELS = {  # metric key -> axis label
    "step": "RL step", "cum_generated_tokens": "generated tokens", "cum_wall": "RL wall time, s",
    "cost_samples": "cost: samples generated + trained",
    "cost_flop_tokens": "cost: generated + 3 x trained tokens",
}


def _save(fig, ax, xlabel, ylabel, path) -> str:
    """Label (readable names for metric keys, scientific ticks for large counts), grid, legend
    (if any line), write the PNG; returns its path."""
    if xlabel != "step":
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    ax.set_xlabel(AXIS_LABELS.get(xlabel, xlabel))
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _at_tokens(evals, key, tokens):
    """Accuracy `key` linearly interpolated at `tokens` generated tokens; None past the run."""
    pts = _series(evals, key, "cum_generated_tokens")
    if not len(pts) or tokens > pts[-1, 0]:
        return None
    return float(np.interp(tokens, pts[:, 0], pts[:, 1]))


def summary_row(workdir: str, target: float | None = None,
                at_tokens: float | None = None) -> dict:
    """Final eval accuracy (held out, and on the training prompts when logged) and its change
    from step 0, tokens / wall to reach `target` (held-out eval), accuracies interpolated at
    `at_tokens` generated tokens (matched cost), mean effective-prompt ratio and samples per
    prompt."""
    recs = load_metrics(workdir)
    k = _eval_key(recs)
    evals = [r for r in recs if k and k in r]
    row = {"run": os.path.basename(os.path.normpath(workdir)),
           "final_eval": evals[-1][k] if evals else float("nan"),
           "eval_change": evals[-1][k] - evals[0][k] if evals else float("nan")}
    tk = "train_" + k if k else None
    train_evals = [r for r in recs if tk and tk in r]
    if train_evals:
        row["final_train_eval"] = train_evals[-1][tk]
        row["train_eval_change"] = train_evals[-1][tk] - train_evals[0][tk]
    for key in sorted(kk for kk in (evals[-1] if evals else {}) if kk.startswith("eval/tier_")
                      and kk.endswith(k[4:])):
        row[key[5:].split("/")[0]] = evals[-1][key]  # tier_hard from eval/tier_hard/avg@4
    steps = [r for r in recs if "effective_prompt_ratio" in r]
    row["steps"] = recs[-1].get("step", 0) if recs else 0
    row["complete"] = stopped_short(workdir, recs) or "yes"
    row.update(cost_samples=recs[-1].get("cost_samples", 0),
               cost_flop_tokens=recs[-1].get("cost_flop_tokens", 0))
    row.update(tokens=recs[-1].get("cum_generated_tokens", 0),
               wall_s=recs[-1].get("cum_wall", 0.0),
               eff_ratio=float(np.mean([r["effective_prompt_ratio"] for r in steps] or [np.nan])),
               samples_per_prompt=float(np.mean([r["samples_per_prompt_mean"] for r in steps
                                                 if "samples_per_prompt_mean" in r] or [np.nan])))
    if target is not None:
        hit = [r for r in evals if r[k] >= target]
        row["tokens_to_target"] = hit[0]["cum_generated_tokens"] if hit else None
    if at_tokens is not None:
        row["eval_at_tokens"] = _at_tokens(evals, k, at_tokens)
        if train_evals:
            row["train_eval_at_tokens"] = _at_tokens(train_evals, tk, at_tokens)
    return row


COSTS = ("cost_samples", "cost_flop_tokens", "cum_generated_tokens")


def cost_to_reach(dirs: Sequence[str], target: float, cost: str) -> float | None:
    """The cost (a key of COSTS) at which the seed-mean held-out eval curve of `dirs` first
    reaches `target`, interpolated linearly between evals; None if it never does. Seeds are
    averaged at equal eval steps (same cadence), costs too."""
    runs = [load_metrics(d) for d in dirs]
    k = _eval_key(runs[0])
    curves = [[(r[cost], r[k]) for r in recs if k in r and cost in r] for recs in runs]
    n = min(len(c) for c in curves)
    if not k or n == 0:
        return None
    pts = np.asarray([c[:n] for c in curves], float).mean(0)
    for i, (x, y) in enumerate(pts):
        if y >= target:
            if i == 0:
                return float(x)
            (x0, y0) = pts[i - 1]
            return float(x0 + (x - x0) * (target - y0) / (y - y0))
    return None


def cost_bar(groups: Sequence[tuple[str, Sequence[str]]], reference: str) -> list[dict]:
    """Per group: the cost to reach the reference group's final seed-mean held-out accuracy,
    as a fraction of the reference's final cost, for each cost of COSTS (the issue's bar:
    <= 0.5 of GRPO-n16's)."""
    ref = dict(groups)[reference]
    runs = [load_metrics(d) for d in ref]
    k = _eval_key(runs[0])
    target = float(np.mean([[r for r in recs if k in r][-1][k] for recs in runs]))
    rows = []
    for label, dirs in groups:
        row = {"method": label, "target": target}
        for c in COSTS:
            ref_cost = float(np.mean([recs[-1].get(c, np.nan) for recs in runs]))
            got = cost_to_reach(dirs, target, c)
            row[f"{c}_vs_{reference}"] = None if got is None else got / ref_cost
        rows.append(row)
    return rows


def run_summary(workdir: str) -> str:
    """A few lines for the console: held-out accuracy (per tier on the family task), careful
    share (embedded task) and response length at the first and last eval, and what the run
    cost."""
    recs = load_metrics(workdir)
    k = _eval_key(recs)
    evals = [r for r in recs if k and k in r]
    if not evals:
        return f"{workdir}: no eval records"
    first, last = evals[0], evals[-1]
    lines = [f"held-out {k[5:]}: step {first['step']} "
             f"{first[k]:.3f} -> step {last['step']} {last[k]:.3f} ({last[k] - first[k]:+.3f})"]
    order = ("hard", "mid", "easy", "control_hard", "control_easy")
    tiers = [(f"eval/tier_{t}{k[4:]}", f"  {t.replace('_', ' ')} families") for t in order]
    for key, name in (*tiers, ("eval/careful_share", "careful share"),
                      ("eval/response_len", "response length (tokens)")):
        if key in first and key in last:
            lines.append(f"{name}: {first[key]:.2f} -> {last[key]:.2f}")
    lines.append(f"generated tokens {recs[-1].get('cum_generated_tokens', 0):,}, cost "
                 f"{recs[-1].get('cost_samples', 0):,} samples (generated + trained), "
                 f"RL wall {recs[-1].get('cum_wall', 0.0):.0f} s")
    return "\n".join(lines)


def plot_groups(groups: Sequence[tuple[str, Sequence[str]]], out_dir: str):
    """Seed-averaged curves per method (mean line, ±1 sd band): held-out and training-prompt
    eval vs step, generated tokens and wall time, effective-prompt ratio, careful share and
    response length vs step (the last two where logged). Returns PNG paths."""
    from matplotlib.figure import Figure
    os.makedirs(out_dir, exist_ok=True)
    loaded = []
    for label, dirs in groups:
        runs = [load_metrics(d) for d in dirs]
        short = any(stopped_short(d, r) for d, r in zip(dirs, runs))
        loaded.append((label + (" (a seed stopped short)" if short else ""), runs))
    k = next((_eval_key(r) for _, runs in loaded for r in runs if _eval_key(r)), None)
    tiers = sorted({key for _, runs in loaded for r in runs for rec in r for key in rec
                    if k and key.startswith("eval/tier_") and key.endswith(k[4:])})
    figures = [("mean_eval_vs_step", "step", k, "held-out eval accuracy"),
               ("mean_eval_vs_tokens", "cum_generated_tokens", k, "held-out eval accuracy"),
               ("mean_eval_vs_cost", "cost_samples", k, "held-out eval accuracy"),
               ("mean_eval_vs_flop_cost", "cost_flop_tokens", k, "held-out eval accuracy"),
               *[(f"mean_{t[5:].split('/')[0]}_vs_step", "step", t,
                  f"held-out accuracy, {t[10:].split('/')[0].replace('_', ' ')} families")
                 for t in tiers],
               ("mean_train_eval_vs_step", "step", k and "train_" + k,
                "accuracy on training prompts"),
               ("mean_train_eval_vs_tokens", "cum_generated_tokens", k and "train_" + k,
                "accuracy on training prompts"),
               ("mean_effective_prompt_ratio", "step", "effective_prompt_ratio",
                "effective prompt ratio"),
               ("mean_eval_vs_wall", "cum_wall", k, "held-out eval accuracy"),
               ("mean_careful_share_vs_step", "step", "eval/careful_share",
                "careful share (held-out samples)"),
               ("mean_response_len_vs_step", "step", "eval/response_len",
                "response length, tokens (held-out samples)")]
    from matplotlib import colormaps
    tab20 = colormaps["tab20"].colors
    colors = tab20[::2] + tab20[1::2]  # 20 distinct colours, the strong ones first
    paths = []
    for name, x, key, ylabel in figures:
        fig = Figure(figsize=(5.5, 3.8))
        ax = fig.subplots()
        ax.set_prop_cycle(color=colors)
        for label, runs in loaded:
            series = [_series(r, key, x) for r in runs if key]
            series = [s for s in series if len(s)]
            if not series:
                continue
            n = min(len(s) for s in series)
            xs = np.mean([s[:n, 0] for s in series], 0)
            ys = np.asarray([s[:n, 1] for s in series])
            line, = ax.plot(xs, ys.mean(0), marker="." if n < 20 else None, label=label)
            if len(ys) > 1:
                ax.fill_between(xs, ys.mean(0) - ys.std(0, ddof=1),
                                ys.mean(0) + ys.std(0, ddof=1), color=line.get_color(), alpha=0.12)
        if ax.lines:
            paths.append(_save(fig, ax, x, ylabel, os.path.join(out_dir, f"{name}.png")))
    return paths


def markdown_table(rows: Sequence[dict]) -> str:
    cols = list(dict.fromkeys(c for r in rows for c in r))
    rows = [{c: r.get(c, "") for c in cols} for r in rows]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
