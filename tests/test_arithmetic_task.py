"""scripts/tools/make_arithmetic_task.py: every level's answers right, the splits and the shots
disjoint, and the default files unchanged by the levels it can also write."""
import hashlib
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "scripts", "tools", "make_arithmetic_task.py")
SHAPES = {2: (2, 1), 3: (2, 2), 5: (3, 2), 6: (3, 3)}  # level: digits of a, of b


def _make(out, *args):
    subprocess.run([sys.executable, TOOL, f"--out_dir={out}", *args], check=True,
                   capture_output=True, cwd=ROOT)
    rows = {n: [json.loads(line) for line in open(os.path.join(out, f"{n}.jsonl"))]
            for n in ("train", "eval")}
    with open(os.path.join(out, "shots.txt")) as f:
        shots = re.findall(r"Question: (.*)\nAnswer: (\d+)\n\n", f.read())
    return rows, shots


def test_levels_answers_and_disjoint_splits(tmp_path):
    rows, shots = _make(tmp_path, "--levels=2,3,5,6", "--train_per_level=30",
                        "--eval_per_level=10", "--shots_per_level=2")
    assert [sum(r["level"] == lv for r in rows["eval"]) for lv in (2, 3, 5, 6)] == [10] * 4
    assert len(rows["train"]) == 120 and len(shots) == 8
    questions = {n: {r["question"] for r in rs} for n, rs in rows.items()}
    assert not questions["train"] & questions["eval"]
    assert not {q for q, _ in shots} & (questions["train"] | questions["eval"])
    for r in rows["train"] + rows["eval"]:
        a, op, b = re.match(r"What is (\d+) ([+-]) (\d+)\?", r["question"]).groups()
        assert (len(a), len(b)) == SHAPES[r["level"]]
        assert int(r["answer"]) == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0
    # the held-out rows interleave the levels
    assert [r["level"] for r in rows["eval"][:4]] == [2, 3, 5, 6]


def test_an_unknown_level_is_refused(tmp_path):
    got = subprocess.run([sys.executable, TOOL, f"--out_dir={tmp_path}", "--levels=2,7"],
                         capture_output=True, text=True, cwd=ROOT)
    assert got.returncode != 0 and "--levels=2,7: choose from (1, 2, 3, 4, 5, 6)" in got.stderr


def test_the_default_task_is_the_documented_one(tmp_path):
    """The files docs/real_model.md's runs used (seed 0, levels 1-4), byte for byte."""
    _make(tmp_path)
    digest = {n: hashlib.sha256((tmp_path / f"{n}.jsonl").read_bytes()).hexdigest()
              for n in ("train", "eval")}
    assert digest == {
        "train": "ee4f9079e14ceaee5aa80286356f11a47a056dd25320b8d4928f7f41db2e87b0",
        "eval": "ee72e0e81b24746d6e73ffb31823ea7d002c8608aea8812121a938a7efaaff90"}
