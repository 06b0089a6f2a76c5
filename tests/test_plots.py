"""Run summaries, the comparison table and figures from metrics.jsonl files we write here."""
import json
import os
import sys

import numpy as np
import pytest

from ada_jax import plots
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(tmp_path, name, evals, train_evals, eff, tokens=1000, config=None):
    """A run dir: eval records at steps 0, 10, 20 and a step record per step (`tokens` each),
    and `config` as its config.json."""
    d = tmp_path / name
    d.mkdir()
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    with open(d / "metrics.jsonl", "w") as f:
        for step in range(21):
            rec = {"step": step, "cum_generated_tokens": tokens * step, "cum_wall": 2.0 * step,
                   "cost_samples": 100 * step, "cost_flop_tokens": 3000 * step}
            if step:
                rec.update(effective_prompt_ratio=eff, samples_per_prompt_mean=4.0)
            if step % 10 == 0:
                rec["eval/avg@4"] = evals[step // 10]
                rec["train_eval/avg@4"] = train_evals[step // 10]
            f.write(json.dumps(rec) + "\n")
    return str(d)


def test_summary_row(tmp_path):
    d = _run(tmp_path, "a", [0.30, 0.42, 0.40], [0.5, 0.6, 0.75], eff=0.25)
    row = plots.summary_row(d, target=0.41)
    assert row["final_eval"] == 0.40 and row["eval_change"] == pytest.approx(0.10)
    assert row["final_train_eval"] == 0.75 and row["train_eval_change"] == 0.25
    assert row["tokens"] == 20_000 and row["wall_s"] == 40.0
    assert row["eff_ratio"] == 0.25 and row["samples_per_prompt"] == 4.0
    assert row["tokens_to_target"] == 10_000  # first eval at or above the target
    assert plots.summary_row(d, target=0.9)["tokens_to_target"] is None
    at = plots.summary_row(d, at_tokens=15_000)  # halfway between the evals at 10k and 20k
    assert at["eval_at_tokens"] == pytest.approx(0.41) and at["train_eval_at_tokens"] == 0.675
    assert plots.summary_row(d, at_tokens=25_000)["eval_at_tokens"] is None  # past the run


def test_a_run_that_stopped_short_is_marked(tmp_path):
    d = _run(tmp_path, "crashed", [0.3, 0.4, 0.5], [0, 0, 0], eff=0.5)  # 20 steps logged
    assert plots.summary_row(d)["complete"] == "yes"  # no config.json: nothing to compare with
    (tmp_path / "crashed" / "config.json").write_text(json.dumps({"rl": {"steps": 40}}))
    assert plots.stopped_short(d) == "stopped at step 20 of 40"
    row = plots.summary_row(d)
    assert row["complete"] == "stopped at step 20 of 40" and row["steps"] == 20
    (tmp_path / "crashed" / "config.json").write_text(json.dumps({"rl": {"steps": 20}}))
    assert plots.summary_row(d)["complete"] == "yes"


def test_cost_to_reach_pooled(tmp_path):
    """The seed-mean curve is interpolated linearly between evals."""
    ref = [_run(tmp_path, f"ref{s}", [0.3, 0.4, e], [0, 0, 0], eff=0.5)
           for s, e in enumerate((0.5, 0.6))]  # final 0.55 at cost 2000
    fast = [_run(tmp_path, "fast", [0.3, 0.6, 0.7], [0, 0, 0], eff=0.5)]
    slow = [_run(tmp_path, "slow", [0.3, 0.35, 0.4], [0, 0, 0], eff=0.5)]
    # fast: 0.3 at 0 -> 0.6 at 1000 samples: 0.55 is reached 5/6 of the way
    assert plots.cost_to_reach(fast, 0.55, "cost_samples") == pytest.approx(1000 * 5 / 6)
    assert plots.cost_to_reach(slow, 0.55, "cost_samples") is None
    assert plots.cost_to_reach(ref, 0.55, "cost_samples") == pytest.approx(2000)


def test_the_bar_per_seed_against_the_frontier(tmp_path):
    """Each seed's reference is the best reference arm on that seed (mean of its last two
    evals); a method's curve is the mean of consecutive evals, interpolated; the ratio divides
    by that reference run's final cost; seeds are counted, the pooled figure beside."""
    def run(name, seed, evals):
        return _run(tmp_path, f"{name}_s{seed}", evals, [0, 0, 0], eff=0.5,
                    config={"seed": seed, "rl": {"steps": 20}})
    a = [run("a", 0, [0.3, 0.5, 0.6]), run("a", 1, [0.3, 0.4, 0.5])]  # 0.55 / 0.45
    b = [run("b", 0, [0.3, 0.4, 0.5]), run("b", 1, [0.3, 0.5, 0.7])]  # 0.45 / 0.60
    fast = [run("fast", 0, [0.3, 0.7, 0.7]), run("fast", 1, [0.3, 0.5, 0.6])]
    groups = [("a", a), ("b", b), ("fast", fast)]
    rows = {r["method"]: r for r in plots.cost_bar(groups, ["a", "b"])}
    assert rows["reference: accuracy"] == {"method": "reference: accuracy",
                                           "seed 0": "a: 0.550", "seed 1": "b: 0.600"}
    # seed 0: smoothed (500, 0.5) -> (1500, 0.7) crosses 0.55 at 750 of a's 2000
    assert rows["fast"]["seed 0"] == pytest.approx(0.375)
    assert rows["fast"]["seed 1"] == "-"  # smoothed peak 0.55 < b's 0.60
    assert rows["fast"]["<= 0.5x (cost_samples)"] == "1 of 2"
    assert rows["a"]["seed 0"] == pytest.approx(0.75)  # its own target at its last point
    words = plots.bar_words(list(rows.values()))
    assert "fast, seed 0: reaches a: 0.550 at 0.38x its cost - the <= 0.5x bar is met" in words
    assert "fast, seed 1: does not reach b: 0.600 by the end of its run - the <= 0.5x bar " \
           "is not met" in words
    lines = plots.ordering_counts(groups, [("fast", "a")], 20)
    assert lines[0] == "fast > a at step 20, all: 2 of 2 seeds (+0.100..+0.100) - holds"
    # peak: the reference's best two consecutive evals, not its last two; the same where
    # it ends at its best
    late = [run("late", 0, [0.3, 0.8, 0.4])]  # smoothed 0.55, 0.60: last 0.60 = peak
    dip = [run("dip", 0, [0.7, 0.7, 0.3])]  # smoothed 0.70 then 0.50
    assert plots.cost_bar([("dip", dip), ("fast", fast[:1])], ["dip"])[0]["seed 0"] == \
        "dip: 0.500"
    peak = {r["method"]: r for r in plots.cost_bar([("dip", dip), ("fast", fast[:1])],
                                                     ["dip"], peak=True)}
    assert peak["reference: accuracy"]["seed 0"] == "dip: 0.700"
    assert peak["fast"]["seed 0"] == pytest.approx(0.75)  # reaches 0.70 at 1500 of 2000
    assert plots.cost_bar([("late", late)], ["late"], peak=True)[0]["seed 0"] == "late: 0.600"
    # key: the bar on another eval metric (a tier's in docs/results.md; here train_eval/)
    ref = [_run(tmp_path, "ref_s0", [0.5, 0.5, 0.5], [0.1, 0.3, 0.5], eff=0.5,
                config={"seed": 0, "rl": {"steps": 20}})]  # smoothed train 0.2, 0.4
    quick = [_run(tmp_path, "quick_s0", [0.3, 0.3, 0.3], [0.1, 0.7, 0.7], eff=0.5,
                  config={"seed": 0, "rl": {"steps": 20}})]  # smoothed train 0.4, 0.7
    on_key = {r["method"]: r for r in plots.cost_bar([("ref", ref), ("quick", quick)], ["ref"],
                                                       key="train_eval/avg@4")}
    assert on_key["reference: accuracy"]["seed 0"] == "ref: 0.400"
    assert on_key["quick"]["seed 0"] == pytest.approx(0.25)  # 0.4 at 500 of ref's 2000
    assert plots.cost_bar([("ref", ref), ("quick", quick)], ["ref"])[2]["seed 0"] == "-"
    one = [("fast", fast[:1]), ("b", b[:1])]
    assert plots.ordering_counts(one, [("b", "fast")], 20) == [
        "b > fast at step 20, all: 0 of 1 seed (-0.200..-0.200) - does not hold"]


def test_a_run_that_spent_its_cost_budget_is_complete(tmp_path):
    d = _run(tmp_path, "budget", [0.3, 0.4, 0.5], [0, 0, 0], eff=0.5,
             config={"rl": {"steps": 40, "cost_budget": 2000}})  # cost 2000 at step 20
    assert plots.stopped_short(d) == ""
    (tmp_path / "budget" / "config.json").write_text(
        json.dumps({"rl": {"steps": 40, "cost_budget": 2500}}))
    assert plots.stopped_short(d) == "stopped at step 20 of 40"


def test_compare_script_averages_seeds(tmp_path):
    a0 = _run(tmp_path, "a0", [0.3, 0.3, 0.4], [0.5, 0.5, 0.6], eff=0.2)
    a1 = _run(tmp_path, "a1", [0.3, 0.3, 0.6], [0.5, 0.5, 0.8], eff=0.4)
    b0 = _run(tmp_path, "b0", [0.3, 0.3, 0.2], [0.5, 0.5, 0.4], eff=0.1)
    out = tmp_path / "plots"
    res = helpers.run([sys.executable, os.path.join(ROOT, "scripts", "analysis", "compare.py"),
                       "--groups", f"a={a0},{a1}", f"b={b0}", "--out", str(out)], check=True)
    rows = [line for line in res.stdout.splitlines() if line.startswith("| a ")
            or line.startswith("| b ")]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    assert cells[0][:4] == ["a", "2", "0.5 ± 0.14", "0.2 ± 0.14"]  # mean ± sd over seeds
    assert cells[1][:4] == ["b", "1", "0.2", "-0.1"]
    for name in ("mean_eval_vs_step", "mean_train_eval_vs_tokens", "eval_vs_tokens"):
        assert (out / f"{name}.png").stat().st_size > 1000


def _config(algo, seed=0, n=4, policy="uniform"):
    return {"algo": algo, "seed": seed, "rl": {"n": n, "steps": 20},
            "adaptive": {"policy": policy}, "eval": {"k": 4, "prompts": 256, "train_prompts": 32},
            "sampling": {"eval_temperature": 0.6}, "task": {"name": "families"}}


def test_run_labels_name_the_algorithm(tmp_path):
    """Legends name the algorithm from config.json (before: the folder name); runs sharing a
    name add their seed, or their folder when the seeds match too."""
    dirs = [_run(tmp_path, name, [0.3] * 3, [0.3] * 3, eff=0.5, config=cfg) for name, cfg in (
        ("r0", _config("ada_balance", policy="seq")), ("r1", _config("grpo", n=16)),
        ("r2", _config("grpo", seed=0)), ("r3", _config("grpo", seed=1)),
        ("r4", _config("dapo")), ("r5", _config("dapo")), ("r6", None))]
    assert plots.run_labels(dirs) == [
        "Ada-Seq-balance", "GRPO-n16", "GRPO-n4 (seed 0)", "GRPO-n4 (seed 1)",
        "DAPO-n4 (r4)", "DAPO-n4 (r5)", "r6"]


def test_run_labels_come_from_the_policy_registry(tmp_path):
    """A run is named by the policy it ran, not the preset it started from (a GRESO run
    started from algo=dapo is GRESO; Pilot-Commit and conformal from algo=grpo); every
    registered policy has a display name."""
    from ada_jax import collect
    dirs = [_run(tmp_path, name, [0.3] * 3, [0.3] * 3, eff=0.5, config=cfg) for name, cfg in (
        ("g", _config("dapo", policy="greso")), ("p", _config("grpo", policy="pilot_commit")),
        ("c", _config("grpo", policy="conformal")), ("k", _config("knapsack", policy="knapsack")),
        ("r", _config("rloo", n=8)))]
    assert plots.run_labels(dirs) == ["GRESO", "Pilot-Commit", "Conformal stopping",
                                      "Knapsack-RL", "RLOO-n8"]
    for name in collect.POLICIES:
        got = collect.label({"adaptive": {"policy": name, "exit_rule": "pos"}, "algo": "grpo"})
        assert name == "uniform" or (isinstance(got, str) and got)


def _draw(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    FigureCanvasAgg(fig).draw()
    return fig.axes[0]


def test_figures_are_labelled_for_a_paper(tmp_path):
    """Every figure has a title, human axis labels (the eval metric with its k, prompts and
    temperature), compact x ticks that do not overlap and no x1e4 multiplier in the corner
    (before: `cum_generated_tokens`, "eval accuracy", no title, folder-name legends)."""
    a = _run(tmp_path, "ada_s0", [0.3, 0.4, 0.5], [0.3] * 3, eff=0.5, tokens=1500,
             config=_config("ada_balance", policy="seq"))
    g = _run(tmp_path, "grpo_s0", [0.3, 0.35, 0.4], [0.3] * 3, eff=0.5, tokens=1500,
             config=_config("grpo"))
    figures = dict(plots.run_figures([a, g]))
    figures.update(plots.group_figures([("Ada", [a]), ("GRPO", [g])]))
    assert {"eval_vs_tokens", "mean_eval_vs_tokens", "mean_train_eval_vs_step"} <= set(figures)
    for name, fig in figures.items():
        ax = _draw(fig)
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), name
        assert "_" not in ax.get_xlabel() + ax.get_ylabel(), name  # no raw metric keys
        ticks = [t for t in ax.get_xticklabels() if t.get_text()]
        assert 3 <= len(ticks) <= 7 and all(len(t.get_text()) <= 5 for t in ticks), name
        boxes = [t.get_window_extent() for t in ticks]
        assert not any(b0.overlaps(b1) for b0, b1 in zip(boxes, boxes[1:])), name
        assert ax.xaxis.get_offset_text().get_text() == "", name
    ax = figures["eval_vs_tokens"].axes[0]
    assert ax.get_xlabel() == "generated tokens"
    assert {"0", "10k", "20k", "30k"} <= {t.get_text() for t in ax.get_xticklabels()}
    assert ax.get_ylabel() == "held-out avg@4 (256 prompts, T = 0.6)"
    assert ax.get_title() == "Ada-Seq-balance vs GRPO-n4, families task"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Ada-Seq-balance", "GRPO-n4"]
    ax = figures["mean_train_eval_vs_step"].axes[0]
    assert ax.get_ylabel() == "training-prompt avg@4 (32 prompts, T = 0.6)"
    assert ax.get_title() == "Ada vs GRPO, families task"


def test_labels_without_config_json(tmp_path):
    """A run without config.json still gets a labelled figure: folder-name legend, bare metric."""
    d = _run(tmp_path, "old_run", [0.3, 0.4, 0.5], [0.3] * 3, eff=0.5)
    ax = dict(plots.run_figures([d]))["eval_vs_step"].axes[0]
    assert ax.get_ylabel() == "held-out avg@4" and ax.get_title() == "old_run"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["old_run"]
    assert [plots.compact_number(v) for v in (0, 0.25, 950, 1500, 2.5e6, 3e9)] == [
        "0", "0.25", "950", "1.5k", "2.5M", "3B"]


def test_matched_cost_and_matched_step_readings(tmp_path):
    a = _run(tmp_path, "a", [0.3, 0.5, 0.6], [0, 0, 0], eff=0.5)  # cost 0, 1000, 2000
    b = _run(tmp_path, "b", [0.3, 0.7, 0.8], [0, 0, 0], eff=0.5)
    assert plots.at_costs([a, b], [500, 2000, 2500]) == [pytest.approx(0.45), 0.7, None]
    row = plots.summary_row(a, step=10)  # read up to step 10: the eval there is final
    assert row["final_eval"] == 0.5 and row["steps"] == 10
    assert plots.eval_k(plots.load_metrics(a)) == 4


def test_a_run_read_up_to_a_cost_is_that_budget_s_run(tmp_path):
    d = _run(tmp_path, "long", [0.3, 0.5, 0.6], [0, 0, 0], eff=0.5,
             config={"rl": {"steps": 20}})  # cost 100 a step
    short = plots.truncated_copy(d, 950, str(tmp_path / "short"))
    recs = plots.load_metrics(short)
    assert recs[-1]["step"] == 10 and recs[-1]["eval/avg@4"] == 0.5  # the step that reaches it
    assert plots.stopped_short(short) == ""  # complete as a 950-sample run


def test_side_by_side_reads_matched_steps_and_costs(tmp_path):
    """scripts/analysis/side_by_side.py: seed means at the matched step and interpolated at matched
    sample and FLOP-weighted costs, and per-seed wins over the reference arm."""
    root = tmp_path / "runs"
    root.mkdir()
    # ref: evals 0.3, 0.5, 0.7 at costs 0, 1000, 2000; fast: 0.3, 0.7, 0.9 (seed 0) and
    # 0.3, 0.5, 0.6 (seed 1); the FLOP-weighted cost is 30 per sample for both.
    for name, evals in (("ref_s0", [.3, .5, .7]), ("ref_s1", [.3, .5, .7]),
                        ("fast_s0", [.3, .7, .9]), ("fast_s1", [.3, .5, .6])):
        d = _run(root, name, evals, evals, eff=0.5)
        with open(os.path.join(d, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        for r in recs:  # tiers: very hard = half the overall accuracy, hard = the overall
            if "eval/avg@4" in r:
                r["eval/tier_very_hard/avg@4"] = r["eval/avg@4"] / 2
                r["eval/tier_hard/avg@4"] = r["eval/avg@4"]
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
    res = helpers.run([sys.executable, os.path.join(ROOT, "scripts", "analysis", "side_by_side.py"),
                       "--root", str(root), "--methods", "ref,fast", "--step", "10",
                       "--costs", "500,1500", "--reference", "ref"], check=True)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in res.stdout.splitlines() if line.startswith("| ref ")
            or line.startswith("| fast ")}
    assert rows["ref"][1:6] == ["2", "20–20", "100", "0.50", "0.50 / 0.25 / 0.50"]
    assert rows["fast"][5] == "0.60 / 0.30 / 0.60"  # step 10: (0.7 + 0.5) / 2
    assert rows["ref"][6] == "0.400" and rows["fast"][6] == "0.450"  # 500 samples
    assert rows["fast"][7] == "0.68 / 0.34 / 0.68"  # 1500 samples: (0.8 + 0.55) / 2
    assert rows["ref"][8] == "0.700" and rows["fast"][8] == "0.750"  # 60k FLOP = 2000 samples
    assert rows["fast"][9] == "-"  # no family-task sample counts in these runs
    assert rows["fast"][10] == "1 of 2 (-0.05..+0.20)"


def test_side_by_side_flop_weight_of_a_trained_token(tmp_path):
    """The FLOP-weighted column reads every arm at the largest such cost all reached, and
    --train_weight recomputes that cost as generated + W x (trained + replayed) tokens: an arm
    that trains on everything it generates costs 4x its generation at W = 3, 2x at W = 1."""
    root = tmp_path / "runs"
    root.mkdir()
    for name, trained in (("all_s0", 1000), ("few_s0", 0)):  # tokens trained a step
        d = _run(root, name, [.3, .5, .7], [.3, .5, .7], eff=0.5)
        with open(os.path.join(d, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        for r in recs:
            r["cum_trained_tokens"] = trained * r["step"]
            r["cost_flop_tokens"] = r["cum_generated_tokens"] + 3 * r["cum_trained_tokens"]
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)

    def flop_cells(*extra):
        res = helpers.run([sys.executable,
                           os.path.join(ROOT, "scripts", "analysis", "side_by_side.py"),
                           "--root", str(root), "--methods", "all,few", "--step", "10",
                           "--costs", "1000", "--reference", "all", *extra], check=True)
        rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
                for line in res.stdout.splitlines() if line.startswith(("| all ", "| few "))}
        assert "20k FLOP-tokens" in res.stdout  # `few` ends at 20k: 1,000 a step
        return rows["all"][7], rows["few"][7], rows["few"][-1]

    # W = 3: `all` costs 4,000 a step, so 20k is its step 5: 0.3 + (0.5 - 0.3) / 2
    assert flop_cells() == ("0.400", "0.700", "1 of 1 (+0.30..+0.30)")
    # W = 1: 2,000 a step, so 20k is its step 10
    assert flop_cells("--train_weight", "1") == ("0.500", "0.700", "1 of 1 (+0.20..+0.20)")


def test_side_by_side_says_which_seeds_reached_a_column(tmp_path):
    """A seed that stops short of a matched cost is not dropped silently: the cell says
    "(k of n)", and the per-seed counts name the seed not compared; the best uniform arm is
    the uniform arm with the higher mean at the last cost."""
    root = tmp_path / "runs"
    root.mkdir()
    for name, evals in (("grpo_n4_s0", [.3, .5, .7]), ("grpo_n4_s1", [.3, .5, .7]),
                        ("grpo_n8_s0", [.3, .6, .8]), ("grpo_n8_s1", [.3, .6, .8]),
                        ("short_s0", [.3, .7, .9]), ("short_s1", [.3, .9, .9])):
        d = _run(root, name, evals, evals, eff=0.5)
        if name == "short_s1":  # stopped at step 10 (cost 1,000)
            with open(os.path.join(d, "metrics.jsonl")) as f:
                recs = [json.loads(line) for line in f if json.loads(line)["step"] <= 10]
            with open(os.path.join(d, "metrics.jsonl"), "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in recs)
    res = helpers.run([sys.executable, os.path.join(ROOT, "scripts", "analysis", "side_by_side.py"),
                       "--root", str(root), "--methods", "grpo_n4,grpo_n8,short", "--step",
                       "10", "--costs", "500,1500", "--reference", "grpo_n4"], check=True)
    line = next(x for x in res.stdout.splitlines() if x.startswith("| short "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[7].endswith("(1 of 2)") and cells[7].startswith("0.80")  # seed 1 ends at 1000
    assert cells[10] == "1 of 1 (+0.20..+0.20); seed 1 not compared"
    assert "best uniform (grpo_n8)" in res.stdout
    assert cells[11] == "1 of 1 (+0.10..+0.10); seed 1 not compared"


def test_seed_mean_curves_pair_seeds_at_the_same_cost(tmp_path):
    """Two seeds evaluated at different costs (evals every 1,024 samples fall on different
    steps; each run's last eval at its own end) are averaged at the same x, each interpolated,
    over the range both cover; pairing their i-th evals (as before) averaged a's 0.4 at 2,000
    with b's 0.7 at 2,500 and drew it at 2,250. A repeated x keeps the seed's last value."""
    a = np.array([[0, 0.0], [1000, 0.2], [2000, 0.4], [2000, 0.5], [3000, 0.9]])
    b = np.array([[0, 0.0], [1500, 0.3], [2500, 0.7]])
    xs, ys = plots.common_grid([a, b])
    np.testing.assert_array_equal(xs, [0, 1000, 1500, 2000, 2500])
    np.testing.assert_allclose(ys[0], [0.0, 0.2, 0.35, 0.5, 0.7])
    np.testing.assert_allclose(ys[1], [0.0, 0.2, 0.3, 0.5, 0.7])
    runs = []
    for name, pts in (("s0", a), ("s1", b)):
        os.makedirs(tmp_path / name)
        with open(tmp_path / name / "metrics.jsonl", "w") as f:
            for i, (cost, acc) in enumerate(pts):
                f.write(json.dumps({"step": i, "cost_samples": cost, "eval/avg@4": acc}) + "\n")
        runs.append(str(tmp_path / name))
    line = dict(plots.group_figures([("m", runs)]))["mean_eval_vs_cost"].axes[0].lines[0]
    np.testing.assert_allclose(line.get_xdata(), xs)
    np.testing.assert_allclose(line.get_ydata(), ys.mean(0))
    # The bar's pooled figure reads the same equal-cost mean: 0.5 at 2,000 (by eval index: 2,083).
    assert plots.cost_to_reach(runs, 0.5, "cost_samples") == pytest.approx(2000)


def _rl_run(root, name, seed, acc, steps=3, generated=100, trained=50):
    """A finished run of `steps` steps (`generated` / `trained` tokens, 2 s sampling and 1 s
    learning each) with its held-out report `acc` ({'avg@2': …, 'level1/avg@2': …})."""
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"seed": seed, "rl": {"steps": steps}}))
    with open(d / "metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            f.write(json.dumps({"step": step, "generated_tokens": generated,
                                "trained_tokens": trained, "time_sampling": 2.0,
                                "time_learning": 1.0, "cum_samples": 7 * step,
                                "cum_samples_launched": 8 * step,
                                "cost_samples": 12 * step,
                                "cost_flop_tokens": (generated + 3 * trained) * step}) + "\n")
    (d / "heldout.json").write_text(json.dumps({**acc, "step": steps}))
    return str(d)


def test_before_after_reads_levels_spend_and_per_seed_counts(tmp_path):
    """Per-run spend and rates, the change from the base per level with the seeds where it
    rose, and per-seed counts against a reference paired by seed (not by order)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts", "analysis"))
    import before_after
    base = {"avg@4": 0.10, "level1/avg@4": 0.20, "level10/avg@4": 0.0, "step": 0}
    acc = lambda a, l1, l10: {"avg@2": a, "level1/avg@2": l1, "level10/avg@2": l10}  # noqa: E731
    groups = [("ref", [_rl_run(tmp_path, "ref_s1", 1, acc(.2, .3, .1)),
                       _rl_run(tmp_path, "ref_s0", 0, acc(.1, .2, .0))]),
              ("new", [_rl_run(tmp_path, "new_s0", 0, acc(.3, .1, .0), generated=300),
                       _rl_run(tmp_path, "new_s1", 1, acc(.15, .5, .2))])]
    text = before_after.tables(base, groups, reference="ref")
    lines = text.splitlines()
    assert lines[0].endswith("| all | level1 | level10 |")  # levels in numeric order
    assert "| base | | | | | | | | | | | 0.100 | 0.200 | 0.000 |" in lines
    # 3 steps: 7 x 3 samples finished of 8 x 3 launched (the metrics' own), cost 36, 900 generated tokens over 6 s, 150 trained over 3 s
    assert ("| new | 0 | 3 | 21 | 24 | 36 | 900 | 150 | 1350 | 150.0 | 50.0 | 0.300 | 0.100 | 0.000 |"
            in lines)
    change = {l.split("|")[1].strip(): [c.strip() for c in l.strip("|").split("|")[1:]]
              for l in lines[lines.index("| arm | all | level1 | level10 |") + 2:][:2]}
    assert change["ref"] == ["+0.050 (1 up, 0 down of 2)"] * 3
    assert change["new"] == ["+0.125 (2 up, 0 down of 2)", "+0.100 (1 up, 1 down of 2)",
                             "+0.100 (1 up, 0 down of 2)"]
    against = lines[lines.index("| arm | all | level1 | level10 |", lines.index(
        next(l for l in lines if l.startswith("Against ref"))))  + 2]
    # seed 0: .3-.1, .1-.2, 0-0; seed 1: .15-.2, .5-.3, .2-.1
    # with the 95 % t interval at 1 degree of freedom (12.706): half-width 12.706 * SD / sqrt(2)
    assert against == ("| new | +0.075 [-1.513, +1.663] (1 ahead, 1 behind of 2) | +0.050 "
                       "[-1.856, +1.956] (1 ahead, 1 behind of 2) | +0.050 [-0.585, +0.685] "
                       "(1 ahead, 0 behind of 2) |")
    power = before_after.tables(base, groups, reference="ref", power=[5]).splitlines()
    row = next(l for l in power[power.index(next(l for l in power if l.startswith("Power"))):]
               if l.startswith("| new |"))
    sd = np.std([0.3 - 0.1, 0.15 - 0.2], ddof=1)  # the paired differences of "all"
    assert row.split("|")[2].strip() == f"SD {sd:.3f}: {before_after.detectable(sd, 5):.3f}"
    pooled = before_after.tables(base, groups, reference="ref",
                                 pools={"both": ["level1", "level10"]}).splitlines()
    assert pooled[0].endswith("| all | level1 | level10 | both |")
    assert pooled[2].endswith("| 0.100 | 0.200 | 0.000 | 0.100 |")  # the base: (0.2 + 0) / 2
    assert "| 0.300 | 0.100 | 0.000 | 0.050 |" in pooled[pooled.index(
        next(l for l in pooled if l.startswith("| new | 0 |")))]
    with pytest.raises(ValueError, match="reference 'grpo'"):
        before_after.tables(base, groups, reference="grpo")
    # one arm (scripts/real_model.sh with ARMS=grpo_n4): its rows, no empty comparison table
    one = before_after.tables(base, groups[:1], reference="ref").splitlines()
    assert sum(l.startswith("| ref |") for l in one) == 3 and not any("Against" in l for l in one)
    # a run read at a budget: its steps up to the first that reached it, that budget's report
    d = groups[1][1][0]
    with open(os.path.join(d, "heldout_24.json"), "w") as f:
        json.dump(acc(.5, .5, .5), f)
    at = before_after.run_row(d, budget=24)  # cost 12 a step: step 2
    assert (at["steps"], at["cost"], at["generated_tokens"], at["acc"]["all"]) == (2, 24, 600, .5)
    with pytest.raises(ValueError, match="never reached a cost of 48"):
        before_after.run_row(d, budget=48)
    os.remove(os.path.join(groups[0][1][0], "heldout.json"))
    with pytest.raises(FileNotFoundError, match="evaluate.py --workdir="):
        before_after.tables(base, groups)


def test_before_after_pairs_seeds_with_a_t_interval_and_at_matched_axes(tmp_path):
    """The paired mean difference's 95 % interval is the t interval (t at 4 degrees of freedom
    2.7764); the in-run evaluations are read, per axis, at the largest value every compared
    run reached, interpolated linearly between grid points."""
    sys.path.insert(0, os.path.join(ROOT, "scripts", "analysis"))
    import before_after
    d = [0.1, 0.2, 0.3, 0.0, -0.1]  # mean 0.1, SD sqrt(0.1 / 4)
    half = 2.7764451 * np.sqrt(0.1 / 4) / np.sqrt(5)
    assert before_after.paired(d) == (f"+0.100 [{0.1 - half:+.3f}, {0.1 + half:+.3f}] "
                                      f"(3 ahead, 1 behind of 5)")  # a tie is neither
    assert before_after.paired([0.2]) == "+0.200 (1 ahead, 0 behind of 1)"
    # the power table of docs/real_model.md: SD 0.040 -> 0.124 / 0.066 / 0.046 at 3 / 5 / 8
    # seeds, SD 0.063 -> 0.105 at 5 ((t_.975 + t_.8) at n - 1 degrees of freedom x SD / sqrt(n))
    assert [round(before_after.detectable(0.04, n), 3) for n in (3, 5, 8)] == [0.124, 0.066,
                                                                             0.046]
    assert round(before_after.detectable(0.063, 5), 3) == 0.105
    assert before_after.detectable(0.04, 5, power=0.5) < before_after.detectable(0.04, 5)

    def run(name, seed, per_step, accs):  # evaluations at steps 0, 1, 2, …
        r = tmp_path / name
        r.mkdir()
        (r / "config.json").write_text(json.dumps({"seed": seed}))
        (r / "metrics.jsonl").write_text("".join(json.dumps(
            {"step": i, "cum_samples_launched": per_step * i, "cost_flop_tokens": 10 * per_step * i,
             "eval/avg@1": a, "eval/level2/avg@1": a / 2}) + "\n" for i, a in enumerate(accs)))
        return str(r)
    groups = [("ref", [run("ref_s0", 0, 4, [0.0, 0.1, 0.2, 0.3, 0.4]),
                       run("ref_s1", 1, 4, [0.0, 0.2, 0.2, 0.2, 0.2])]),
              ("ada", [run("ada_s0", 0, 8, [0.0, 0.3, 0.5]),
                       run("ada_s1", 1, 8, [0.0, 0.1, 0.3])])]
    pooled = before_after.matched_tables(groups, ["ref"], ["all", "level2", "p"],
                                         pools={"p": ["level2"]})
    assert [l.rsplit("|", 2)[1] for l in pooled if l.startswith("| ada |")] == [
        l.rsplit("|", 3)[1] for l in pooled if l.startswith("| ada |")]  # p is level2
    lines = before_after.matched_tables(groups, ["ref"], ["all", "level2"])
    rows = [l for l in lines if l.startswith("| ada |")]
    # steps: read at step 2 (ada's last): ada 0.5, 0.3 against ref 0.2, 0.2
    assert rows[0].startswith("| ada | 2 | +0.200 [") and "(2 ahead, 0 behind of 2)" in rows[0]
    # samples: ada's 16 samples is ref's step 4 (0.4, 0.2): +0.100 and +0.100, no spread
    assert rows[1] == ("| ada | 16 | +0.100 [+0.100, +0.100] (2 ahead, 0 behind of 2) | +0.050 "
                       "[+0.050, +0.050] (2 ahead, 0 behind of 2) |")
    # a run that went further is read inside its range: ref to 6 steps, ada still at 16
    assert len(rows) == 3 and rows[2].split("|")[2].strip() == "160"
    # an interpolated reading: ada at 12 samples (step 1.5) = 0.4 and 0.2
    x, ys = before_after.eval_curve(groups[1][1][0], "cum_samples_launched")
    assert np.interp(12, x, ys["all"]) == pytest.approx(0.4)
    assert before_after.matched_tables([groups[0]], ["ref"], ["all"]) == []
    # two references: the pair between them once, under the first
    both = before_after.matched_tables(groups, ["ref", "ada"], ["all"])
    assert sum(l.startswith("| ada |") for l in both) == 3
    assert not any(l.startswith("| ref |") for l in both)


def test_the_summary_says_plainly_what_was_evaluated(tmp_path):
    """A run with eval.every=0 ended on '<workdir>: no eval records', which read like an
    error; now it says the run was not evaluated and how to evaluate it, then what it spent."""
    step = {"step": 1, "reward_mean": 0.1, "cum_generated_tokens": 1200, "cost_samples": 64}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    lines = plots.run_summary(str(tmp_path)).splitlines()
    assert lines[0].startswith(f"{tmp_path}: not evaluated (eval.every and eval.every_cost are "
                               f"0; --config.eval.every=N evaluates at step 0")
    assert lines[1].startswith("generated tokens 1,200, cost 64 samples")
    evals = [{"step": 0, "eval/avg@2": 0.25}, {**step, "eval/avg@2": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    lines = plots.run_summary(str(tmp_path)).splitlines()
    assert lines == ["held-out avg@2: step 0 0.250 -> step 1 0.500 (+0.250)",
                     "generated tokens 1,200, cost 64 samples (generated + trained), RL wall 0 s"]
