"""scripts/analysis/side_by_side.py on run folders written here: missing seeds, runs that
stopped short and empty metrics files are named, and the FLOP-weighted column is read at a
cost every full run reached."""
import json

import pytest

from tests import helpers

@pytest.fixture(scope="module")
def side():
    return helpers.load_script("scripts/analysis/side_by_side.py")


def _run(root, name, steps=10, planned=10, flop_per_step=300, acc=0.5):
    """A run folder: a record per step (100 samples, `flop_per_step` FLOP-tokens, an eval)."""
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"seed": int(name.rsplit("_s", 1)[1]),
                                               "rl": {"steps": planned}}))
    with open(d / "metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            f.write(json.dumps({"step": step, "cost_samples": 100 * step,
                                "cost_flop_tokens": flop_per_step * step,
                                "effective_prompt_ratio": 0.5,
                                "eval/avg@4": acc + 0.01 * step}) + "\n")


def _table(side, monkeypatch, capsys, root, methods="grpo_n4,dapo"):
    monkeypatch.setattr("sys.argv", ["side_by_side.py", "--root", str(root), "--methods",
                                     methods, "--step", "4", "--costs", "400,800",
                                     "--reference", "grpo_n4", "--uniform", "grpo_n4"])
    side.main()
    return capsys.readouterr()


def test_missing_and_short_runs_are_named_and_the_flop_column_is_common(
        side, monkeypatch, capsys, tmp_path):
    for s in (0, 1):
        _run(tmp_path, f"grpo_n4_s{s}", flop_per_step=300 + 10 * s)
    _run(tmp_path, "dapo_s0", flop_per_step=200)
    _run(tmp_path, "dapo_s2", steps=3, flop_per_step=200)  # crashed at step 3 of 10
    out = _table(side, monkeypatch, capsys, tmp_path)
    assert "no run dapo_s1 (other arms have seed 1)" in out.err
    assert "no run grpo_n4_s2 (other arms have seed 2)" in out.err
    assert "dapo_s2 stopped at step 3 of 10" in out.err
    # the full runs end at 2,000, 3,000 and 3,100 FLOP-tokens: the column is at 2k, not at
    # the crashed run's 600
    assert "at 2k FLOP-tokens: the largest cost every full run reached (set by dapo_s0)" \
        in out.err
    head, rule, grpo, dapo = out.out.splitlines()[1:5]
    assert "2k FLOP-tokens: all" in head
    assert dapo.split(" | ")[8] == "0.600 (1 of 2)"  # dapo_s0 at step 10; not dapo_s2
    assert "warning: 800 samples" not in out.err  # every full run reached 1,000 samples


def test_an_empty_metrics_file_is_named_not_a_crash(side, monkeypatch, capsys, tmp_path):
    _run(tmp_path, "grpo_n4_s0")
    _run(tmp_path, "dapo_s0")
    (tmp_path / "dapo_s1").mkdir()
    (tmp_path / "dapo_s1" / "metrics.jsonl").write_text("")
    out = _table(side, monkeypatch, capsys, tmp_path)
    assert f"{tmp_path / 'dapo_s1'}/metrics.jsonl has no records: left out" in out.err
    assert out.out.splitlines()[4].split(" | ")[1] == "1"  # dapo averages its one run
    (tmp_path / "dapo_s0" / "metrics.jsonl").write_text("")
    with pytest.raises(SystemExit):
        _table(side, monkeypatch, capsys, tmp_path)
    assert "no run with metrics under" in capsys.readouterr().err
