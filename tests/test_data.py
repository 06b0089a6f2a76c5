"""Data: JSONL/Parquet loader and layouts, bad rows, TFDS builders, the resumable iterator."""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ada_jax import evaluate
from ada_jax.tasks import PromptIterator, load_split
from ada_jax.tasks.embedded import EmbeddedSource
from ada_jax.tasks.files import load_file, load_files
from ada_jax.tasks.problem import hint, split_of
from ada_jax.tokenizer import load_tokenizer
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


def test_invalid_utf8_is_a_bad_row_not_replaced(tmp_path):
    # Decoding with errors="replace" made this answer "5\ufffd", which no completion matches.
    ok = json.dumps({"question": "ok?", "answer": "#### 1"}).encode()
    bad = b'{"question": "q\xc3\xa9?", "answer": "#### 5\xff"}'
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(b"\n".join([ok, bad, ok]) + b"\n")
    where = r"invalid UTF-8 \(byte 0xff at column 38\)"  # columns count characters: é is one
    with pytest.raises(ValueError, match=rf"{path}:line 2: {where}"):
        load_file(str(path))
    problems, skipped = load_file(str(path), on_bad_row="skip")
    assert [p.answer for p in problems] == ["1", "1"] and skipped == 1
    array = tmp_path / "bytes.json"
    array.write_bytes(b"[\n" + ok + b",\n" + bad + b"\n]")
    with pytest.raises(ValueError, match=rf"bytes.json:line 3: {where}"):
        load_file(str(array))
    # Parquet: a string column with invalid UTF-8 (pyarrow writes it unvalidated).
    offsets = pa.array([0, 1, 3], pa.int32()).buffers()[1]
    answers = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"75\xff")])
    pq_path = str(tmp_path / "bytes.parquet")
    pq.write_table(pa.table({"question": ["a?", "b?"], "answer": answers}), pq_path)
    with pytest.raises(ValueError, match=r"bytes.parquet:row 2: invalid UTF-8 in column 'answer'"):
        load_file(pq_path)
    problems, skipped = load_file(pq_path, on_bad_row="skip")
    assert [p.answer for p in problems] == ["7"] and skipped == 1


@pytest.mark.parametrize("name,content", [
    ("empty.jsonl", b""), ("blank.jsonl", b"\n  \n"), ("empty.json", b"[]"),
    ("empty.parquet", b""), ("truncated.parquet", "half")])
def test_empty_or_unreadable_file_is_named(tmp_path, name, content):
    path = tmp_path / name
    if content == "half":
        with open(_path("math_sample.parquet"), "rb") as f:
            data = f.read()
        content = data[:len(data) // 2]
    path.write_bytes(content)
    for on_bad_row in ("error", "skip"):  # a whole file is not a row to skip
        with pytest.raises(ValueError, match=rf"^{path}: (empty file|cannot read Parquet)"):
            load_file(str(path), on_bad_row=on_bad_row)


def test_every_row_skipped_is_an_error(tmp_path):
    path = tmp_path / "all_bad.jsonl"
    path.write_text("{broken\n[1]\n")
    with pytest.raises(ValueError, match=rf"{path}: no usable rows \(2 bad rows skipped\)"):
        load_files(str(path), on_bad_row="skip")


def test_json_errors_report_the_column_of_the_error(tmp_path):
    # json.loads saw the line end, so an error at the end of a truncated row was "column 1".
    truncated = '{"question": "q", "answer": "1"'
    path = tmp_path / "cols.jsonl"
    path.write_text("\n".join([json.dumps({"question": "a", "answer": "#### 1"}), truncated,
                               '{"question": "q" "answer": 1}']) + "\r\n")
    with pytest.raises(ValueError, match=r"line 2: invalid JSON \(Expecting ',' delimiter at "
                                         rf"column {len(truncated) + 1}\)"):
        load_file(str(path))
    path.write_text('{"question": "q" "answer": 1}\r\n')  # a comma missing before column 18
    with pytest.raises(ValueError, match=r"line 1: invalid JSON \(Expecting ',' delimiter at "
                                         r"column 18\)"):
        load_file(str(path))
    array = tmp_path / "cols.json"
    array.write_text('[\n {"question": "a", "answer": "1"},\n {"question": "b" "answer": 2}\n]')
    with pytest.raises(ValueError, match=r"cols.json:line 3: invalid JSON \(Expecting ',' "
                                         r"delimiter at column 19\)"):
        load_file(str(array))


def _files_config(path, **task):
    c = get_config("task=files")
    c.task.files = str(path)
    with c.unlocked():
        c.task.eval_files = _path("openr1_sample.jsonl")  # all of `files` is train
    c.task.update(task)
    return c


def _long_row_file(tmp_path):
    rows = [{"question": "What is 2+2?", "answer": "4"},
            {"question": "What is 3+3?", "answer": "6"},
            {"question": "What is " + "+".join(["1"] * 40) + "?", "answer": "40"}]
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prompt_length_is_checked_at_load_with_file_and_line(tmp_path):
    # An over-long row used to load, then stop the run at the step that reached it (and
    # again at every resume); now load_split(config, split, tokenizer) names it.
    path = _long_row_file(tmp_path)
    c = _files_config(path)
    tok = load_tokenizer(c)
    assert len(load_split(c, "train")) == 3  # without a tokenizer: no check
    with pytest.raises(ValueError, match=rf"{path}:line 3: prompt has \d+ tokens > "
                                         r"config.sampling.max_prompt_len=48"):
        load_split(c, "train", tok)
    c.task.on_bad_row = "skip"
    problems = load_split(c, "train", tok)
    assert [p.answer for p in problems] == ["4", "6"]
    # the check is the sampler's own encoding: what passes encodes, what fails does not
    evaluate.encode_prompts(tok, problems, c.task.template, c.sampling.max_prompt_len)
    with pytest.raises(ValueError, match="max_prompt_len"):
        evaluate.encode_prompts(tok, load_file(str(path))[0][2:], c.task.template,
                                c.sampling.max_prompt_len)


def test_prompt_length_check_counts_the_strongest_hint_on_train_only(tmp_path):
    steps = "\n".join(f"{i}+1={i + 1}" for i in range(1, 25))
    row = {"problem": "Count up.", "answer": "25", "solution": steps + "\n\\boxed{25}"}
    path = tmp_path / "hinted.jsonl"
    path.write_text(json.dumps(row) + "\n")
    c = _files_config(path)
    c.rl.hints = "sage"
    c.task.eval_files = str(path)
    tok = load_tokenizer(c)
    p = load_file(str(path))[0][0]
    evaluate.encode_prompts(tok, [p], "embedded", 48)  # fits bare, not with the strength-3 hint
    with pytest.raises(ValueError, match="max_prompt_len"):
        evaluate.encode_prompts(tok, [p], "embedded", 48, [hint(p, 3)])
    with pytest.raises(ValueError, match=r"hinted.jsonl:line 1: .* with its strongest hint"):
        load_split(c, "train", tok)
    assert load_split(c, "eval", tok) == [p]  # eval never uses hints


def test_generated_task_prompts_must_fit_with_their_strongest_hint(tmp_path):
    """A hint is a solution prefix: level-8 prompts with a strength-3 hint pass the default
    max_prompt_len=48, and a hinted run on the embedded task used to stop at the first step that
    hinted one (ValueError from encode_prompts, after SFT). Now refused at load time, naming
    the length needed and the fields that change it; never skipped (on_bad_row)."""
    from ada_jax import train
    from ada_jax.tokenizer import prompt_ids, render_prompt
    c = get_config("smoke=True,task=embedded")  # 256 train problems, levels 1-8
    c.unlock()
    tok = load_tokenizer(c)
    src = EmbeddedSource("train", c.task.train_size, c.task.seed)
    need = max(len(prompt_ids(tok, render_prompt(p.question, "embedded", hint(p, 3))))
               for p in src)
    assert need > c.sampling.max_prompt_len == 48
    assert len(load_split(c, "train", tok)) == 256  # bare prompts fit
    c.rl.hints, c.task.on_bad_row = "sage", "skip"
    with pytest.raises(ValueError, match=(
            rf"embedded train split: the longest train prompt with its strongest hint has "
            rf"{need} tokens \(problem id \d+, level 8\) > config.sampling.max_prompt_len=48 .*"
            rf"config.sampling.max_prompt_len >= {need} .*config.task.max_level.*"
            rf"config.rl.hints='none'")):
        load_split(c, "train", tok)
    assert len(load_split(c, "eval", tok)) == c.task.eval_size  # eval never uses hints
    with pytest.raises(ValueError, match="max_prompt_len=48"):  # at startup, before SFT
        train.setup(c, str(tmp_path))
    assert "base" not in os.listdir(tmp_path)  # no SFT ran
    c.sampling.max_prompt_len = need - 1
    with pytest.raises(ValueError, match=f"has {need} tokens"):
        load_split(c, "train", tok)
    c.sampling.max_prompt_len = need  # the exact bound: what passes, the sampler encodes
    problems = list(load_split(c, "train", tok))
    evaluate.encode_prompts(tok, problems, "embedded", need, [hint(p, 3) for p in problems])
    c.sampling.max_prompt_len, c.task.max_level = 48, 6  # or fewer levels
    assert len(load_split(c, "train", tok)) == 256
    c.rl.hints, c.sampling.max_prompt_len = "none", 12  # unhinted prompts are checked too
    with pytest.raises(ValueError, match=r"embedded eval split: the longest eval prompt has "):
        load_split(c, "eval", tok)


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


def test_prompt_length_check_on_tfds_files(tmp_path):
    c = _files_config(_long_row_file(tmp_path), name="tfds_files")
    with c.unlocked():
        c.task.data_dir = str(tmp_path / "tfds")
    tok = load_tokenizer(c)
    with pytest.raises(ValueError, match=r"tfds_files train \(.*long.jsonl\): record 3 "
                                         r"\(problem id \d+\): prompt has \d+ tokens > "):
        load_split(c, "train", tok)
    c.task.on_bad_row = "skip"
    assert [p.answer for p in load_split(c, "train", tok)] == ["4", "6"]


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
    assert state == {"epoch": 1, "position": 12, "rows": [0, 5]}
    assert type(state["epoch"]) is int and type(state["position"]) is int
    expected = [next(it) for _ in range(10)]
    fresh = PromptIterator(source, 5, seed=3)
    fresh.restore(json.loads(json.dumps(state)))  # survives a round trip through a checkpoint
    assert [next(fresh) for _ in range(10)] == expected
    with pytest.raises(ValueError):
        fresh.restore({"epoch": 0, "position": 23})
    old = PromptIterator(source, 5, seed=3)
    old.restore({"epoch": 1, "position": 12})  # checkpoints from before per-process states
    assert next(old) == expected[0]


class _Counting(list):
    """A source that records which indices were read."""

    def __init__(self, items):
        super().__init__(items)
        self.read = []

    def __getitem__(self, i):
        self.read.append(i)
        return super().__getitem__(i)


def test_iterator_rows_split_each_batch_and_read_only_their_share():
    """Per-host data: with rows (start, stop) each process reads only its block of every
    global batch (across epoch boundaries too); the blocks together are the one-process
    batches, and their states hold one global position."""
    problems = list(EmbeddedSource("train", 23, seed=0))
    whole = PromptIterator(problems, 8, seed=3)
    sources = [_Counting(problems) for _ in range(4)]
    parts = [PromptIterator(src, 8, seed=3, rows=(2 * p, 2 * p + 2))
             for p, src in enumerate(sources)]
    for _ in range(6):  # 48 problems: two epoch boundaries
        batch = next(whole)
        got = [next(it) for it in parts]
        assert [q for block in got for q in block] == batch
    assert all(len(src.read) == 12 for src in sources)  # 2 per step, nothing else touched
    states = [it.state() for it in parts]
    assert {(s["epoch"], s["position"]) for s in states} == {(whole.epoch, whole.position)}
    assert [s["rows"] for s in states] == [[0, 2], [2, 4], [4, 6], [6, 8]]
    resumed = PromptIterator(problems, 8, seed=3, rows=(4, 6))
    resumed.restore(json.loads(json.dumps(states)))  # a checkpoint's list of every process's
    assert next(resumed) == next(whole)[4:6]
    with pytest.raises(ValueError, match="different positions"):
        resumed.restore([states[0], dict(states[1], position=3)])
    with pytest.raises(ValueError, match="not a slice"):
        PromptIterator(problems, 8, rows=(6, 10))
