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


def plot_runs(workdirs: Sequence[str], out_dir: str, labels: Sequence[str] | None = None):
    """Draw the standard comparison figures; returns the PNG paths."""
    from matplotlib.figure import Figure  # no pyplot: leaves a notebook's backend alone
    os.makedirs(out_dir, exist_ok=True)
    runs = [(labels[i] if labels else os.path.basename(os.path.normpath(w)), load_metrics(w))
            for i, w in enumerate(workdirs)]
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
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{name}.png")
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths


def summary_row(workdir: str, target: float | None = None) -> dict:
    """Final eval accuracy, tokens/wall to reach `target`, mean effective-prompt ratio."""
    recs = load_metrics(workdir)
    k = _eval_key(recs)
    evals = [r for r in recs if k and k in r]
    row = {"run": os.path.basename(os.path.normpath(workdir)),
           "final_eval": evals[-1][k] if evals else float("nan"),
           "tokens": recs[-1].get("cum_generated_tokens", 0),
           "wall_s": recs[-1].get("cum_wall", 0.0),
           "eff_ratio": float(np.mean([r["effective_prompt_ratio"] for r in recs
                                       if "effective_prompt_ratio" in r] or [np.nan]))}
    if target is not None:
        hit = [r for r in evals if r[k] >= target]
        row["tokens_to_target"] = hit[0]["cum_generated_tokens"] if hit else None
    return row


def markdown_table(rows: Sequence[dict]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
