"""Plots and tables from run directories (metrics.jsonl), for scripts/analysis/compare.py and notebooks."""
import json
import os
from typing import Sequence

import numpy as np


def load_metrics(workdir: str) -> list[dict]:
    """metrics.jsonl's records, each non-finite number (null, listed under `nonfinite`) as NaN;
    unreadable lines are dropped with a warning naming them."""
    from ada_jax.metrics_log import read_lines, warn_unreadable
    path = os.path.join(workdir, "metrics.jsonl")
    lines, bad = read_lines(path)
    warn_unreadable(path, bad, "left out")
    recs = [rec for _, rec in lines]
    return [{**r, **dict.fromkeys(r.get("nonfinite", ()), float("nan"))} for r in recs]


def _series(records, key, x="step"):
    pts = [(r[x], r[key]) for r in records if key in r and x in r]
    return np.asarray(pts, float).reshape(-1, 2)


def _eval_key(records):
    keys = sorted({k for r in records for k in r if k.startswith("eval/avg@")})
    return keys[0] if keys else None


def eval_k(records) -> int | None:
    """The k of the runs' held-out avg@k."""
    k = _eval_key(records)
    return int(k.rsplit("@", 1)[1]) if k else None


def upto_cost(recs: list[dict], max_cost: float) -> list[dict]:
    """A run's records up to and including the first step whose cost (samples generated +
    trained) reaches `max_cost` (all of them if none does)."""
    reached = next((i for i, r in enumerate(recs) if r.get("cost_samples", 0) >= max_cost), None)
    return recs if reached is None else recs[:reached + 1]


def parse_groups(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """[(label, [dir, …])] of `label=dir1,dir2,…` command-line groups."""
    return [(g.split("=", 1)[0], g.split("=", 1)[1].split(",")) for g in specs]


def truncated_copy(workdir: str, max_cost: float, out: str) -> str:
    """A copy of a run's metrics.jsonl, up to the step whose cost (samples generated +
    trained) reaches `max_cost`, and config.json (rl.cost_budget set to it, in samples) in
    `out`: the run as if its rl.cost_budget were `max_cost` (exact with a constant lr after
    warm-up)."""
    os.makedirs(out, exist_ok=True)
    recs = upto_cost(load_metrics(workdir), max_cost)
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)
    config = load_config(workdir)
    if config:
        config.setdefault("rl", {}).update(cost_budget=max_cost, cost_unit="samples")
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f)
    return out


def load_config(workdir: str) -> dict:
    """The run's config.json as a dict; {} when it is missing or unreadable (plots and tables
    then fall back to folder names and bare metric names)."""
    try:
        with open(os.path.join(workdir, "config.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def stopped_short(workdir: str, recs: list[dict] | None = None) -> str:
    """"" for a run that reached its config's rl.steps or spent its rl.cost_budget, else
    "stopped at step N of M" (a crashed or unfinished run must not read as complete in a table
    or a legend). `recs`: its metrics, when already loaded."""
    recs = load_metrics(workdir) if recs is None else recs
    rl = load_config(workdir).get("rl", {})
    planned, budget = rl.get("steps"), rl.get("cost_budget", 0)
    if planned is None:
        return ""
    reached = recs[-1].get("step", 0) if recs else 0
    unit = f"cost_{rl.get('cost_unit', 'samples')}"
    spent = budget and recs and recs[-1].get(unit, 0) >= budget
    return "" if reached >= planned or spent else f"stopped at step {reached} of {planned}"


ALGO_NAMES = {  # config.algo -> the name used in papers and docs
    "grpo": "GRPO", "drgrpo": "Dr. GRPO", "rloo": "RLOO", "raft": "RAFT", "liteppo": "LitePPO",
    "reinforce_pp": "REINFORCE++", "dapo": "DAPO", "ada_pos": "Ada-Seq-pos",
    "ada_balance": "Ada-Seq-balance", "ada_est": "Ada-Est", "gvm": "GVM", "daro": "DARO",
}
ALGO_NAMES.update(knapsack="Knapsack-RL", vip="VIP")


def run_labels(workdirs: Sequence[str]) -> list[str]:
    """Legend labels from each run's config.json: its collection policy's display name (the
    policy module's, `collect.label`: a GRESO run is GRESO whatever preset it started from),
    or for uniform sampling the algorithm's name and group size (GRPO-n16); runs sharing a
    name add their seed, or their folder when the seeds are equal too. A run without
    config.json is named by its folder."""
    from ada_jax import collect  # the policy registry (imports jax: only when labelling)
    folders = [os.path.basename(os.path.normpath(w)) for w in workdirs]
    configs = [load_config(w) for w in workdirs]
    names = []
    for folder, c in zip(folders, configs):
        name = (collect.label(c) if c else None) or ALGO_NAMES.get(c.get("algo"),
                                                                    c.get("algo") or folder)
        if c.get("adaptive", {}).get("policy") == "uniform" and "n" in c.get("rl", {}):
            name += f"-n{c['rl']['n']}"
        names.append(name)
    labels = []
    for name, folder, c in zip(names, folders, configs):
        twins = [c2 for n2, c2 in zip(names, configs) if n2 == name]
        if len(twins) > 1 and name != folder:
            seeds = [t.get("seed") for t in twins]
            name += (f" (seed {c['seed']})" if "seed" in c and seeds.count(c["seed"]) == 1
                     else f" ({folder})")
        labels.append(name)
    return labels


def _joined(values) -> str:
    """Distinct values in order, "/"-joined: one value when the runs agree."""
    return "/".join(str(v) for v in dict.fromkeys(values))


def metric_label(key: str, configs: Sequence[dict]) -> str:
    """Axis label for an eval key, with what it was measured on, from the runs' configs:
    `eval/avg@4` -> "held-out avg@4 (384 prompts, T = 1.0)"; `train_eval/…` on the training
    prompts; `eval/tier_hard/avg@4` on the hard families. Other keys: AXIS_LABELS or the key."""
    if not key.startswith(("eval/", "train_eval/")):
        return AXIS_LABELS.get(key, key)
    prefix, rest = key.split("/", 1)
    where = "held-out" if prefix == "eval" else "training-prompt"
    count = ("prompts" if prefix == "eval" else "train_prompts")
    details = []
    if rest.startswith("tier_"):  # a subset of the held-out prompts: its size is not logged
        tier, rest = rest.split("/", 1)
        where = f"{tier[5:].replace('_', ' ')} families: {where}"
    elif all(count in c.get("eval", {}) for c in configs) and configs:
        details.append(f"{_joined(c['eval'][count] for c in configs)} prompts")
    temps = [c.get("sampling", {}).get("eval_temperature") for c in configs]
    if configs and None not in temps:
        details.append(f"T = {_joined(temps)}")
    name = {"response_len": "response length, tokens", "careful_share": "careful share"}.get(
        rest, rest)
    return f"{where} {name}" + (f" ({', '.join(details)})" if details else "")


def _title(labels: Sequence[str], configs: Sequence[dict], suffix: str = "") -> str:
    """The runs compared (up to 4 named, else their count) and the task."""
    names = " vs ".join(labels) if len(labels) <= 4 else f"{len(labels)} runs"
    tasks = [c["task"]["name"] for c in configs if "name" in c.get("task", {})]
    return names + (f", {_joined(tasks)} task" if tasks else "") + suffix


RUN_FIGURES = [  # name, x key, y key (None: the held-out eval key), y label (None: from the key)
    ("eval_vs_step", "step", None, None),
    ("eval_vs_tokens", "cum_generated_tokens", None, None),
    ("eval_vs_wall", "cum_wall", None, None),
    ("reward_vs_step", "step", "reward_mean", "train pool reward (mean pass rate)"),
    ("effective_prompt_ratio", "step", "effective_prompt_ratio", None),
    ("all_correct_before", "step", "all_correct_before", "all-correct share (first n)"),
    ("all_wrong_before", "step", "all_wrong_before", "all-wrong share (first n)"),
    ("samples_per_prompt", "step", "samples_per_prompt_mean", "samples per prompt"),
]


def run_figures(workdirs: Sequence[str], labels: Sequence[str] | None = None) -> list:
    """(name, matplotlib Figure) of each standard per-run figure with data, every run a line;
    legends from `labels` or run_labels."""
    from matplotlib.figure import Figure  # no pyplot: leaves a notebook's backend alone
    loaded = [load_metrics(w) for w in workdirs]
    configs = [load_config(w) for w in workdirs]
    labels = list(labels) if labels else run_labels(workdirs)
    runs = [(label + (" (stopped short)" if stopped_short(w, recs) else ""), recs)
            for label, w, recs in zip(labels, workdirs, loaded)]
    k = next((_eval_key(r) for r in loaded if _eval_key(r)), None)
    out = []
    for name, x, key, ylabel in RUN_FIGURES:
        fig = Figure(figsize=(5.5, 3.8))
        ax = fig.subplots()
        for label, recs in runs:
            k_run = key or _eval_key(recs)
            pts = _series(recs, k_run, x) if k_run else np.zeros((0, 2))
            if len(pts):
                ax.plot(pts[:, 0], pts[:, 1], marker="." if key is None else None, label=label)
        if ax.lines:
            _finish(fig, ax, x, ylabel or metric_label(key or k, configs),
                    _title(labels, configs))
            out.append((name, fig))
    return out


def plot_runs(workdirs: Sequence[str], out_dir: str, labels: Sequence[str] | None = None):
    """Draw the standard comparison figures (run_figures) as PNGs; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    return [_save(fig, os.path.join(out_dir, f"{name}.png"))
            for name, fig in run_figures(workdirs, labels)]


AXIS_LABELS = {  # metric key -> axis label
    "step": "RL step", "cum_generated_tokens": "generated tokens", "cum_wall": "RL wall time, s",
    "cost_samples": "cost: samples generated + trained",
    "cost_flop_tokens": "cost: generated + 3 x trained tokens",
    "effective_prompt_ratio": "effective prompt ratio",
}


def compact_number(v: float, _pos=None) -> str:
    """Short tick text: 1500 -> 1.5k, 2.5e6 -> 2.5M, 3e9 -> 3B, 0.25 -> 0.25 (a matplotlib
    FuncFormatter: no offset or x1e5 multiplier to read off the axis corner)."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def _finish(fig, ax, xkey: str, ylabel: str, title: str) -> None:
    """Axis labels (readable names for metric keys), at most 6 round, compact x ticks (whole
    steps on a step axis), title, grid, legend (if any line), tight layout."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10],
                                           integer=xkey == "step"))
    ax.xaxis.set_major_formatter(FuncFormatter(compact_number))
    ax.set_xlabel(AXIS_LABELS.get(xkey, xkey))
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    fig.tight_layout()


def _save(fig, path) -> str:
    fig.savefig(path, dpi=110)
    return path


def _at_tokens(evals, key, tokens):
    """Accuracy `key` linearly interpolated at `tokens` generated tokens; None past the run."""
    pts = _series(evals, key, "cum_generated_tokens")
    if not len(pts) or tokens > pts[-1, 0]:
        return None
    return float(np.interp(tokens, pts[:, 0], pts[:, 1]))


def summary_row(workdir: str, target: float | None = None,
                at_tokens: float | None = None, step: int | None = None) -> dict:
    """Final eval accuracy (held out, and on the training prompts when logged) and its change
    from step 0, tokens / wall to reach `target` (held-out eval), accuracies interpolated at
    `at_tokens` generated tokens (matched cost), mean effective-prompt ratio and samples per
    prompt. `step`: the run read up to that step only (matched steps)."""
    recs = load_metrics(workdir)
    if step is not None:
        recs = [r for r in recs if r.get("step", 0) <= step]
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


def reach(pts: np.ndarray, target: float) -> float | None:
    """The first cost at which the curve `pts` [(cost, accuracy)] reaches `target`,
    interpolated linearly; None if it never does."""
    for i, (x, y) in enumerate(pts):
        if y >= target:
            if i == 0:
                return float(x)
            x0, y0 = pts[i - 1]
            return float(x0 + (x - x0) * (target - y0) / (y - y0))
    return None


def common_grid(series: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Seeds' curves [(x, y), ...] on one x grid: (xs, ys [seeds, len(xs)]), each seed
    interpolated at the union of the seeds' x values over the range they all cover. Seeds
    evaluate at different x (an eval every so many samples falls on different steps, the
    last eval at each run's own end), so pairing their i-th evals would mix costs. At a
    repeated x a seed's last value counts."""
    curves = []
    for s in series:
        rev = s[::-1]
        x, first = np.unique(rev[:, 0], return_index=True)  # first in reverse: the last value
        curves.append((x, rev[first, 1]))
    lo, hi = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    xs = np.unique(np.concatenate([x[(x >= lo) & (x <= hi)] for x, _ in curves]))
    return xs, np.asarray([np.interp(xs, x, y) for x, y in curves])


def cost_to_reach(dirs: Sequence[str], target: float, cost: str,
                  key: str | None = None) -> float | None:
    """The cost (a key of COSTS) at which the seed-mean held-out eval curve of `dirs` (or of
    eval metric `key`) first reaches `target`, interpolated linearly between evals; None if it
    never does. Seeds are averaged at equal cost (common_grid)."""
    runs = [load_metrics(d) for d in dirs]
    k = key or _eval_key(runs[0])
    curves = [_series(recs, k, cost) for recs in runs] if k else []
    if not curves or min(len(c) for c in curves) == 0:
        return None
    xs, ys = common_grid(curves)
    return reach(np.column_stack([xs, ys.mean(0)]), target)


def run_seed(workdir: str):
    """A run's seed: its config.json's, else the `_s<N>` suffix of its folder, else the folder."""
    seed = load_config(workdir).get("seed")
    if seed is not None:
        return seed
    name = os.path.basename(os.path.normpath(workdir))
    tail = name.rsplit("_s", 1)[-1]
    return int(tail) if "_s" in name and tail.isdigit() else name


def smoothed_evals(workdir: str, cost: str, key: str | None = None) -> np.ndarray:
    """[(cost, held-out accuracy)] of a run (or eval metric `key`, e.g. one tier's), each the
    mean of two consecutive evals (one eval is noisy: a bar read on single evals credits a
    lucky one)."""
    recs = load_metrics(workdir)
    k = key or _eval_key(recs)
    pts = np.asarray([(r[cost], r[k]) for r in recs if k and k in r and cost in r], float)
    return (pts[1:] + pts[:-1]) / 2 if len(pts) > 1 else pts.reshape(-1, 2)


def cost_bar(groups: Sequence[tuple[str, Sequence[str]]], references: Sequence[str],
             threshold: float = 0.5, peak: bool = False, key: str | None = None) -> list[dict]:
    """The bar, per seed: each seed's reference is the run of `references` (one arm, or plain
    GRPO's arms at one total cost: the frontier) with the highest accuracy (mean of its last
    two evals; with `peak`, the best mean of two consecutive evals anywhere in its run, so a
    reference that declines late is not read at its decline) on that seed; a method's ratio on
    that seed is its cost to reach that accuracy (smoothed_evals, interpolated) over the
    reference's final cost, per cost of COSTS. Rows: the samples ratio per seed ("-": not
    reached by the run's end), how many seeds meet <= `threshold` per cost, and the pooled
    seed-mean figure (cost_to_reach) beside them. `key`: read an eval metric other than the
    held-out accuracy (one tier's, `eval/tier_very_hard/avg@4`)."""
    by_label = dict(groups)
    level = (lambda pts: pts[:, 1].max()) if peak else (lambda pts: pts[-1, 1])  # noqa: E731
    refs: dict = {}  # seed -> (target, final costs, label)
    for label in references:
        for d in by_label[label]:
            pts = smoothed_evals(d, COSTS[0], key)
            if not len(pts):
                continue
            last = load_metrics(d)[-1]
            best = refs.get(run_seed(d))
            if best is None or level(pts) > best[0]:
                refs[run_seed(d)] = (float(level(pts)), {c: last.get(c) for c in COSTS}, label)
    seeds = sorted(refs, key=str)
    pooled_ref = max(references, key=lambda lb: np.mean(
        [level(smoothed_evals(d, COSTS[0], key)) for d in by_label[lb]]))
    pooled_runs = [load_metrics(d) for d in by_label[pooled_ref]]
    pooled_target = float(np.mean([level(smoothed_evals(d, COSTS[0], key))
                                   for d in by_label[pooled_ref]]))
    rows = [{"method": "reference: accuracy", **{f"seed {s}": f"{refs[s][2]}: {refs[s][0]:.3f}"
                                                  for s in seeds}}]
    for label, dirs in groups:
        mine = {run_seed(d): d for d in dirs}
        row: dict = {"method": label}
        ratios = {c: {} for c in COSTS}
        for seed in seeds:
            if seed not in mine:
                continue
            target, ref_cost, _ = refs[seed]
            for c in COSTS:
                got = reach(smoothed_evals(mine[seed], c, key), target)
                ratios[c][seed] = None if got is None or not ref_cost[c] else got / ref_cost[c]
            r = ratios[COSTS[0]][seed]
            row[f"seed {seed}"] = "-" if r is None else round(r, 3)
        for c in COSTS:
            got = list(ratios[c].values())
            met = sum(r is not None and r <= threshold for r in got)
            row[f"<= {threshold}x ({c})"] = f"{met} of {len(got)}"
        ref_cost = float(np.mean([recs[-1].get(COSTS[0], np.nan) for recs in pooled_runs]))
        got = cost_to_reach(dirs, pooled_target, COSTS[0], key)
        row["pooled (samples)"] = "-" if got is None else round(got / ref_cost, 3)
        rows.append(row)
    return rows


def at_costs(dirs: Sequence[str], costs: Sequence[float], key: str | None = None,
             cost: str = COSTS[0]) -> list:
    """Seed-mean held-out accuracy (or eval metric `key`) interpolated at each cost of
    `costs`; None where a seed's run ended before it."""
    curves = []
    for d in dirs:
        recs = load_metrics(d)
        k = key or _eval_key(recs)
        curves.append(_series([r for r in recs if k in r], k, cost))
    out = []
    for c in costs:
        vals = [float(np.interp(c, pts[:, 0], pts[:, 1])) if len(pts) and c <= pts[-1, 0]
                else None for pts in curves]
        out.append(None if None in vals else float(np.mean(vals)))
    return out


def eval_at_step(workdir: str, step: int) -> dict | None:
    """The run's eval record at `step` (None if it has none there)."""
    return next((r for r in load_metrics(workdir) if r.get("step") == step
                 and _eval_key([r])), None)


def ordering_counts(groups: Sequence[tuple[str, Sequence[str]]], pairs, step: int) -> list[str]:
    """Per pair (a, b) of group labels and per tier (the transfer controls are no claim): on how
    many seeds a's held-out accuracy at `step` is above b's, with the range of the differences,
    in words ("Ada > GRPO-n4 at step 40, hard: 4 of 5 seeds (-0.01..+0.12)"); seeds are paired
    by run_seed."""
    by_label, lines = dict(groups), []
    for a, b in pairs:
        ea = {run_seed(d): eval_at_step(d, step) for d in by_label[a]}
        eb = {run_seed(d): eval_at_step(d, step) for d in by_label[b]}
        seeds = [s for s in ea if s in eb and ea[s] and eb[s]]
        if not seeds:
            lines.append(f"{a} vs {b}: no seed has both evals at step {step}")
            continue
        k = _eval_key([ea[seeds[0]]])
        keys = [("all", k)] + [(t[10:].split("/")[0], t) for t in sorted(ea[seeds[0]])
                               if t.startswith("eval/tier_") and t.endswith(k[4:])
                               and not t.startswith("eval/tier_control")]  # not a claim
        for name, key in keys:
            diffs = [ea[s][key] - eb[s][key] for s in seeds]
            wins = sum(d > 0 for d in diffs)
            word = "holds" if wins == len(seeds) else "does not hold" if len(seeds) == 1 else ""
            lines.append(f"{a} > {b} at step {step}, {name.replace('_', ' ')}: {wins} of "
                         f"{len(seeds)} seed{'s' * (len(seeds) > 1)} ({min(diffs):+.3f}.."
                         f"{max(diffs):+.3f}){' - ' + word if word else ''}")
    return lines


def bar_words(rows: Sequence[dict], threshold: float = 0.5) -> list[str]:
    """cost_bar's rows in words: per method and seed, whether it reached its seed's reference
    accuracy and at what share of the reference's cost (never a bare None)."""
    refs, lines = rows[0], []
    seeds = [c for c in refs if c.startswith("seed ")]
    for row in rows[1:]:
        for c in seeds:
            if c not in row:
                continue
            ref = refs[c]
            r = row[c]
            if r == "-":
                lines.append(f"{row['method']}, {c}: does not reach {ref} by the end of its "
                             f"run - the <= {threshold}x bar is not met")
            else:
                lines.append(f"{row['method']}, {c}: reaches {ref} at {r:.2f}x its cost - "
                             f"the <= {threshold}x bar is {'met' if r <= threshold else 'not met'}")
    return lines


def run_summary(workdir: str) -> str:
    """A few lines for the console: held-out accuracy (per tier and right-marker share on the
    family task), accuracy on the training prompts (eval.train_prompts), careful share
    (embedded task) and response length at the first and last eval, and what the run cost."""
    recs = load_metrics(workdir)
    k = _eval_key(recs)
    evals = [r for r in recs if k and k in r]
    spent = (f"generated tokens {recs[-1].get('cum_generated_tokens', 0):,}, cost "
             f"{recs[-1].get('cost_samples', 0):,} samples (generated + trained), "
             f"RL wall {recs[-1].get('cum_wall', 0.0):.0f} s") if recs else "no steps recorded"
    if not evals:
        return (f"{workdir}: not evaluated (eval.every and eval.every_cost are 0; "
                f"--config.eval.every=N evaluates at step 0, every N steps and at the end; "
                f"scripts/evaluate.py --workdir={workdir} evaluates the last checkpoint)\n"
                + spent)
    first, last = evals[0], evals[-1]
    lines = [f"held-out {k[5:]}: step {first['step']} "
             f"{first[k]:.3f} -> step {last['step']} {last[k]:.3f} ({last[k] - first[k]:+.3f})"]
    order = ("very_hard", "hard", "mid", "easy", "control_hard", "control_easy")
    tiers = [(f"eval/tier_{t}{k[4:]}", f"  {t.replace('_', ' ')} families") for t in order]
    for key, name in (*tiers, ("eval/right_marker_share", "right-marker share"),
                      (f"train_eval/{k[5:]}", f"training prompts {k[5:]}"),
                      ("eval/careful_share", "careful share"),
                      ("eval/response_len", "response length (tokens)")):
        if key in first and key in last:
            lines.append(f"{name}: {first[key]:.2f} -> {last[key]:.2f}")
    return "\n".join(lines + [spent])


def group_figures(groups: Sequence[tuple[str, Sequence[str]]]) -> list:
    """(name, matplotlib Figure) of seed-averaged curves per method (mean line, ±1 sd band):
    held-out and training-prompt eval vs step, generated tokens, costs and wall time,
    effective-prompt ratio, per-tier accuracy, careful share and response length vs step (the
    last three where logged). Figures with no line are left out."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    loaded, configs = [], []
    for label, dirs in groups:
        runs = [load_metrics(d) for d in dirs]
        configs += [load_config(d) for d in dirs]
        short = any(stopped_short(d, r) for d, r in zip(dirs, runs))
        loaded.append((label + (" (a seed stopped short)" if short else ""), runs))
    k = next((_eval_key(r) for _, runs in loaded for r in runs if _eval_key(r)), None)
    tiers = sorted({key for _, runs in loaded for r in runs for rec in r for key in rec
                    if k and key.startswith("eval/tier_") and key.endswith(k[4:])})
    tk = k and "train_" + k
    figures = [("mean_eval_vs_step", "step", k), ("mean_eval_vs_tokens", "cum_generated_tokens", k),
               ("mean_eval_vs_cost", "cost_samples", k),
               ("mean_eval_vs_flop_cost", "cost_flop_tokens", k),
               *[(f"mean_{t[5:].split('/')[0]}_vs_step", "step", t) for t in tiers],
               ("mean_train_eval_vs_step", "step", tk),
               ("mean_train_eval_vs_tokens", "cum_generated_tokens", tk),
               ("mean_effective_prompt_ratio", "step", "effective_prompt_ratio"),
               ("mean_eval_vs_wall", "cum_wall", k),
               ("mean_careful_share_vs_step", "step", "eval/careful_share"),
               ("mean_response_len_vs_step", "step", "eval/response_len")]
    tab20 = colormaps["tab20"].colors
    colors = tab20[::2] + tab20[1::2]  # 20 distinct colours, the strong ones first
    seeds = max(len(dirs) for _, dirs in groups)
    title = _title([label for label, _ in groups], configs,
                   ", mean ± sd over seeds" if seeds > 1 else "")
    out = []
    for name, x, key in figures:
        fig = Figure(figsize=(5.5, 3.8))
        ax = fig.subplots()
        ax.set_prop_cycle(color=colors)
        for label, runs in loaded:
            series = [_series(r, key, x) for r in runs if key]
            series = [s for s in series if len(s)]
            if not series:
                continue
            xs, ys = common_grid(series)
            line, = ax.plot(xs, ys.mean(0), marker="." if len(xs) < 20 else None, label=label)
            if len(ys) > 1:
                ax.fill_between(xs, ys.mean(0) - ys.std(0, ddof=1),
                                ys.mean(0) + ys.std(0, ddof=1), color=line.get_color(), alpha=0.12)
        if ax.lines:
            _finish(fig, ax, x, metric_label(key, configs), title)
            out.append((name, fig))
    return out


def plot_groups(groups: Sequence[tuple[str, Sequence[str]]], out_dir: str):
    """The seed-averaged figures (group_figures) as PNGs; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    return [_save(fig, os.path.join(out_dir, f"{name}.png"))
            for name, fig in group_figures(groups)]


def markdown_table(rows: Sequence[dict]) -> str:
    cols = list(dict.fromkeys(c for r in rows for c in r))
    rows = [{c: r.get(c, "") for c in cols} for r in rows]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
