"""Data: JSONL/Parquet loader and layouts, bad rows, TFDS builders, the resumable iterator."""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ada_jax.tasks import PromptIterator, load_split
from ada_jax.tasks.embedded import EmbeddedSource
from ada_jax.tasks.files import load_file, load_files
from ada_jax.tasks.problem import split_of
from configs.base import get_config

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def _path(name):
    return os.path.join(DATA, name)


# ---------------------------------------------------------------- files and layouts

@pytest.mark.parametrize("stem,n", [("gsm8k_sample", 13), ("math_sample", 14),
                                    ("openr1_sample", 12)])
def test_jsonl_and_parquet_give_the_same_problems(stem, n):
    a, skipped_a = load_file(_path(stem + ".jsonl"))
    b, skipped_b = load_file(_path(stem + ".parquet"))
    assert a == b and len(a) == n and skipped_a == skipped_b == 0
    assert all(p.question and p.answer for p in a)


def test_layouts_extract_answers_and_solutions():
    gsm, _ = load_file(_path("gsm8k_sample.jsonl"))
    assert gsm[0].answer == "189" and "####" not in gsm[0].solution
    assert gsm[0].solution.startswith("On Tuesday") and gsm[-1].answer == "37500"  # "37,500"
    math, _ = load_file(_path("math_sample.parquet"))
    assert [p.answer for p in math[:4]] == ["\\frac{19}{12}", "6", "5", "8\\sqrt{2}"]
    assert math[0].level == 1 and math[4].level == 3
    r1, _ = load_file(_path("openr1_sample.jsonl"))
    assert r1[-1].answer == "\\frac{1}{6}" and "\\boxed" in r1[-1].solution


def test_field_map_with_custom_columns(tmp_path):
    path = tmp_path / "custom.jsonl"
    rows = [{"prompt": "What is 2+2?", "gt": 4, "worked": "2+2=4"},
            {"prompt": "What is 3+3?", "gt": None, "worked": "So \\boxed{6}."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fm = dict(question="prompt", answer="gt", solution="worked")
    problems, _ = load_file(str(path), fm)
    assert [(p.question, p.answer, p.solution) for p in problems] == [
        ("What is 2+2?", "4", "2+2=4"), ("What is 3+3?", "6", "So \\boxed{6}.")]
    with pytest.raises(ValueError, match="match no known layout"):
        load_file(str(path))


def test_bad_rows_name_file_and_line_or_are_skipped(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([
        json.dumps({"question": "ok?", "answer": "x #### 1"}),
        "{not json",
        json.dumps({"question": "no answer field"}),
        json.dumps(["a", "list"]),
        "",
        json.dumps({"question": {"nested": 1}, "answer": "#### 2"}),
        json.dumps({"question": "ok too", "answer": "#### 3"}),
    ]) + "\n")
    with pytest.raises(ValueError, match=rf"{path}:line 2: invalid JSON"):
        load_file(str(path))
    problems, skipped = load_file(str(path), on_bad_row="skip")
    assert [p.answer for p in problems] == ["1", "3"] and skipped == 4


def test_json_array_files(tmp_path):
    path = tmp_path / "rows.json"
    rows = [json.loads(line) for line in open(_path("openr1_sample.jsonl"))]
    path.write_text(json.dumps(rows + [{"problem": "no answer"}], indent=1))
    with pytest.raises(ValueError, match=r"rows.json:item 13: "):
        load_file(str(path))
    assert load_file(str(path), on_bad_row="skip")[0] == load_file(_path("openr1_sample.jsonl"))[0]


def test_bad_parquet_row_names_the_row(tmp_path):
    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.Table.from_pylist([
        {"problem": "p1", "solution": "\\boxed{1}"},
        {"problem": "p2", "solution": "no boxed answer here"}]), path)
    with pytest.raises(ValueError, match=r"bad.parquet:row 2: no answer"):
        load_file(path)
    assert load_file(path, on_bad_row="skip")[1] == 1


def test_load_files_globs_and_missing_files():
    problems, _ = load_files(_path("*.jsonl"))
    assert len(problems) == 39
    with pytest.raises(FileNotFoundError, match="nothing_here"):
        load_files(_path("nothing_here*.jsonl"))


def test_load_split_for_files_is_disjoint():
    c = get_config("task=files")
    c.task.files = _path("*.jsonl")
    train, evals = load_split(c, "train"), load_split(c, "eval")
    assert len(train) + len(evals) == 39 and evals
    assert not {p.id for p in train} & {p.id for p in evals}
    assert all(split_of(p.question) == "eval" for p in evals)
    with c.unlocked():  # config.task.eval_files: a separate eval set, all of files for train
        c.task.eval_files = _path("math_sample.parquet")
    assert len(load_split(c, "eval")) == 14 and len(load_split(c, "train")) == 39


# ---------------------------------------------------------------- TFDS (no TensorFlow)

def test_tfds_embedded_builder_matches_the_generator(tmp_path):
    from ada_jax.tasks.tfds_builders import TfdsSource, embedded_builder
    builder = embedded_builder(str(tmp_path), seed=3, min_level=1, max_level=8, train_size=40,
                               eval_size=16)
    for split, size in (("train", 40), ("eval", 16)):
        source = TfdsSource(builder, split)
        assert list(source) == list(EmbeddedSource(split, size, seed=3))
    assert "tensorflow" not in sys.modules


def test_tfds_files_builder(tmp_path):
    from ada_jax.tasks.tfds_builders import TfdsSource, math_files_builder
    files = _path("*.parquet")
    builder = math_files_builder(str(tmp_path), files)
    problems, _ = load_files(files)
    for split in ("train", "eval"):
        assert list(TfdsSource(builder, split)) == [
            p for p in problems if split_of(p.question) == split]
    assert "tensorflow" not in sys.modules


def test_load_split_tfds_names(tmp_path):
    c = get_config("task=tfds_embedded,smoke=True")
    c.task.train_size, c.task.eval_size = 24, 8
    with c.unlocked():
        c.task.data_dir = str(tmp_path)
    assert list(load_split(c, "eval")) == list(EmbeddedSource("eval", 8, c.task.seed))


# ---------------------------------------------------------------- iterator

def test_iterator_is_deterministic_and_covers_each_epoch():
    source = EmbeddedSource("train", 50, seed=0)
    a, b = PromptIterator(source, 7, seed=1), PromptIterator(source, 7, seed=1)
    batches = [next(a) for _ in range(15)]
    assert batches == [next(b) for _ in range(15)] and all(len(x) == 7 for x in batches)
    flat = [p for batch in batches for p in batch]
    assert [p.question for p in sorted(flat[:50], key=lambda p: p.question)] == sorted(
        p.question for p in source)  # epoch 0 visits every problem exactly once
    ids = lambda ps: [p.id for p in ps]
    assert ids(flat[:50]) != ids(flat[50:100])  # a fresh shuffle each epoch
    assert ids(flat[:50]) != ids(PromptIterator(source, 50, seed=2).__next__())


def test_iterator_resume_equals_continuous():
    source = EmbeddedSource("train", 23, seed=0)
    it = PromptIterator(source, 5, seed=3)
    for _ in range(7):
        next(it)
    state = it.state()
    assert state == {"epoch": 1, "position": 12} and all(type(v) is int for v in state.values())
    expected = [next(it) for _ in range(10)]
    fresh = PromptIterator(source, 5, seed=3)
    fresh.restore(json.loads(json.dumps(state)))  # survives a round trip through a checkpoint
    assert [next(fresh) for _ in range(10)] == expected
    with pytest.raises(ValueError):
        fresh.restore({"epoch": 0, "position": 23})
