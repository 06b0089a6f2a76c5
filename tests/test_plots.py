"""Run summaries, the comparison table and figures from metrics.jsonl files we write here."""
import json
import os
import subprocess
import sys

import pytest

from ada_jax import plots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(tmp_path, name, evals, train_evals, eff):
    """A run dir: eval records at steps 0, 10, 20 and a step record per step (1000 tokens each)."""
    d = tmp_path / name
    d.mkdir()
    with open(d / "metrics.jsonl", "w") as f:
        for step in range(21):
            rec = {"step": step, "cum_generated_tokens": 1000 * step, "cum_wall": 2.0 * step,
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


def test_cost_to_reach_and_the_cost_bar(tmp_path):
    """The seed-mean curve is interpolated linearly between evals; the bar divides by the
    reference's final cost (mean over its seeds)."""
    ref = [_run(tmp_path, f"ref{s}", [0.3, 0.4, e], [0, 0, 0], eff=0.5)
           for s, e in enumerate((0.5, 0.6))]  # final 0.55 at cost 2000
    fast = [_run(tmp_path, "fast", [0.3, 0.6, 0.7], [0, 0, 0], eff=0.5)]
    slow = [_run(tmp_path, "slow", [0.3, 0.35, 0.4], [0, 0, 0], eff=0.5)]
    # fast: 0.3 at 0 -> 0.6 at 1000 samples: 0.55 is reached 5/6 of the way
    assert plots.cost_to_reach(fast, 0.55, "cost_samples") == pytest.approx(1000 * 5 / 6)
    assert plots.cost_to_reach(slow, 0.55, "cost_samples") is None
    assert plots.cost_to_reach(ref, 0.55, "cost_samples") == pytest.approx(2000)
    rows = {r["method"]: r for r in plots.cost_bar([("ref", ref), ("fast", fast),
                                                    ("slow", slow)], "ref")}
    assert rows["fast"]["target"] == pytest.approx(0.55)
    assert rows["fast"]["cost_samples_vs_ref"] == pytest.approx(5 / 12)
    assert rows["fast"]["cost_flop_tokens_vs_ref"] == pytest.approx(5 / 12)
    assert rows["ref"]["cost_samples_vs_ref"] == pytest.approx(1.0)
    assert rows["slow"]["cost_samples_vs_ref"] is None


def test_compare_script_averages_seeds(tmp_path):
    a0 = _run(tmp_path, "a0", [0.3, 0.3, 0.4], [0.5, 0.5, 0.6], eff=0.2)
    a1 = _run(tmp_path, "a1", [0.3, 0.3, 0.6], [0.5, 0.5, 0.8], eff=0.4)
    b0 = _run(tmp_path, "b0", [0.3, 0.3, 0.2], [0.5, 0.5, 0.4], eff=0.1)
    out = tmp_path / "plots"
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compare.py"),
                          "--groups", f"a={a0},{a1}", f"b={b0}", "--out", str(out)],
                         capture_output=True, text=True, check=True)
    rows = [line for line in res.stdout.splitlines() if line.startswith("| a ")
            or line.startswith("| b ")]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    assert cells[0][:4] == ["a", "2", "0.5 ± 0.14", "0.2 ± 0.14"]  # mean ± sd over seeds
    assert cells[1][:4] == ["b", "1", "0.2", "-0.1"]
    for name in ("mean_eval_vs_step", "mean_train_eval_vs_tokens", "eval_vs_tokens"):
        assert (out / f"{name}.png").stat().st_size > 1000
