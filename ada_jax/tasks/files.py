"""Local math problem files (JSONL or Parquet) -> Problems.

Column layouts, detected from a file's first row unless `field_map.question` is set:
  gsm8k   question, answer = "<worked solution> #### <final answer>"
  math    problem, solution (answer = content of the last \\boxed{} in the solution)
  openr1  problem, answer, solution
With an explicit field map (question, answer, solution: column names, "" = absent) the same
rules apply: an answer holding "####" is split GSM8K-style, a missing answer comes from the
solution's last \\boxed{}. An optional `level` column (3 or "Level 3") fills Problem.level.

A malformed row raises ValueError naming file and line (Parquet: row), or is skipped and
counted when on_bad_row == "skip".
"""
import glob
import json
import os
import re
from typing import Iterator, Mapping

from ada_jax.rewards.math_verifier import last_boxed
from ada_jax.tasks.problem import Problem, problem_id

LAYOUTS = {
    "openr1": dict(question="problem", answer="answer", solution="solution"),
    "math": dict(question="problem", answer="", solution="solution"),
    "gsm8k": dict(question="question", answer="answer", solution=""),
}


class BadRow(ValueError):
    pass


def detect_layout(row: Mapping) -> dict:
    """The field map of the first layout in LAYOUTS whose required columns the row has."""
    for fields in LAYOUTS.values():
        needed = [c for c in (fields["question"], fields["answer"] or fields["solution"]) if c]
        if all(c in row for c in needed):
            return fields
    raise BadRow(f"columns {sorted(row)} match no known layout ({', '.join(LAYOUTS)}); "
                 f"set config.task.field_map")


def _text(row: Mapping, column: str, required: bool) -> str:
    if not column:
        return ""
    value = row.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise BadRow(f"missing or empty field {column!r}")
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadRow(f"field {column!r} must be text or a number, got {type(value).__name__}")
    return str(value).strip()


def row_to_problem(row: Mapping, fields: Mapping[str, str]) -> Problem:
    """One row -> Problem, or BadRow saying what is wrong."""
    if not isinstance(row, Mapping):
        raise BadRow(f"expected an object, got {type(row).__name__}")
    question = _text(row, fields["question"], required=True)
    solution = _text(row, fields["solution"], required=False)
    answer = _text(row, fields["answer"], required=not fields["solution"])
    if "####" in answer:
        worked, answer = answer.rsplit("####", 1)
        solution = solution or worked.strip()
        answer = answer.strip().replace(",", "")
    if not answer:
        answer = (last_boxed(solution) or "").strip()
    if not answer:
        raise BadRow("no answer: answer field empty and no \\boxed{} in the solution")
    level = row.get("level", 0)
    level = int(m.group()) if (m := re.search(r"\d+", str(level))) else 0
    return Problem(id=problem_id(question), question=question, answer=answer,
                   solution=solution, level=level)


def _rows(path: str) -> Iterator[tuple[str, object]]:
    """(location, row) pairs, 1-based: 'line N' (JSONL), 'row N' (Parquet), 'item N' (a .json
    file holding one array of rows)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        n = 0
        for batch in pq.ParquetFile(path).iter_batches():
            for row in batch.to_pylist():
                n += 1
                yield f"row {n}", row
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        if path.endswith(".json") and f.read(1) == "[":  # one JSON array of rows
            f.seek(0)
            try:
                rows = json.load(f)
            except json.JSONDecodeError as e:
                yield f"line {e.lineno}", BadRow(f"invalid JSON ({e.msg} at column {e.colno})")
                return
            for n, row in enumerate(rows, 1):
                yield f"item {n}", row
            return
        f.seek(0)
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"line {n}", json.loads(line)
            except json.JSONDecodeError as e:
                yield f"line {n}", BadRow(f"invalid JSON ({e.msg} at column {e.colno})")


def load_file(path: str, field_map: Mapping[str, str] | None = None,
              on_bad_row: str = "error") -> tuple[list[Problem], int]:
    """(problems, number of skipped rows) from one .jsonl / .json / .parquet file."""
    if on_bad_row not in ("error", "skip"):
        raise ValueError(f"on_bad_row must be 'error' or 'skip', got {on_bad_row!r}")
    fields = dict(field_map) if field_map and field_map.get("question") else None
    problems, skipped = [], 0
    for where, row in _rows(path):
        try:
            if isinstance(row, BadRow):
                raise row
            fields = fields or detect_layout(row)
            problems.append(row_to_problem(row, fields))
        except BadRow as e:
            if on_bad_row == "error":
                raise ValueError(f"{path}:{where}: {e}") from None
            skipped += 1
    return problems, skipped


def load_files(spec: str, field_map: Mapping[str, str] | None = None,
               on_bad_row: str = "error") -> tuple[list[Problem], int]:
    """All problems of a comma-separated list of paths or globs, in order, and the skip count."""
    paths = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        matches = sorted(glob.glob(os.path.expanduser(part)))
        if not matches:
            raise FileNotFoundError(f"no file matches {part!r}")
        paths += matches
    problems, skipped = [], 0
    for path in paths:
        p, s = load_file(path, field_map, on_bad_row)
        problems += p
        skipped += s
    return problems, skipped
