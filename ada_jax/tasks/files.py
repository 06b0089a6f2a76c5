"""Local math problem files (JSONL or Parquet) -> Problems.

Column layouts, detected from a file's first row unless `field_map.question` is set:
  gsm8k   question, answer = "<worked solution> #### <final answer>"
  math    problem, solution (answer = content of the last \\boxed{} in the solution)
  openr1  problem, answer, solution
With an explicit field map (question, answer, solution: column names, "" = absent) the same
rules apply: an answer holding "####" is split GSM8K-style, a missing answer comes from the
solution's last \\boxed{}. An optional `level` column (3 or "Level 3") fills Problem.level.

A malformed row (invalid JSON or UTF-8, no answer, ..., or failing the caller's `check`, e.g.
a prompt too long for the run) raises ValueError naming file and line (Parquet: row), or is
skipped and counted when on_bad_row == "skip". A file that cannot be read at all (empty,
truncated or corrupt Parquet) raises ValueError naming the file whatever on_bad_row says.
"""
import glob
import json
import os
import re
import stat
from typing import Callable, Iterator, Mapping

from ada_jax.rewards.math_verifier import last_boxed
from ada_jax.tasks.problem import Problem, problem_id
from ada_jax.tasks.task import Task

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


def _utf8_error(data: bytes, e: UnicodeDecodeError) -> tuple[int, BadRow]:
    """(0-based line within data, BadRow) for invalid UTF-8: refused, because decoding with
    replacement turns an answer "5" + bad byte into "5" + U+FFFD, which can never match."""
    start = data.rfind(b"\n", 0, e.start) + 1
    column = len(data[start:e.start].decode("utf-8")) + 1
    return data.count(b"\n", 0, e.start), BadRow(
        f"invalid UTF-8 (byte 0x{data[e.start]:02x} at column {column})")


def _json_row(text: str):
    """One JSONL row, or BadRow with the error's column. The line end is cut first: json counts
    it, so an error at the end of a truncated row was reported as column 1 of the next line."""
    try:
        return json.loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as e:
        return _bad_json(e)


def _bad_json(e: json.JSONDecodeError) -> BadRow:
    return BadRow(f"invalid JSON ({e.msg} at column {e.colno})")


def _parquet_row(batch, i: int):
    """Row i of a record batch, or BadRow naming a text column that holds invalid UTF-8."""
    row = {}
    for name, column in zip(batch.schema.names, batch.columns):
        try:
            row[name] = column[i].as_py()
        except UnicodeDecodeError:
            return BadRow(f"invalid UTF-8 in column {name!r}")
    return row


def _parquet_rows(path: str) -> Iterator[tuple[str, object]]:
    """('row N', row) pairs; an unreadable file (0 bytes, truncated, corrupt) -> ValueError
    naming it (pyarrow's own message names no file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    n = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches():
            try:
                rows = batch.to_pylist()
            except UnicodeDecodeError:  # find the bad row(s): one row at a time
                rows = [_parquet_row(batch, i) for i in range(batch.num_rows)]
            for row in rows:
                n += 1
                yield f"row {n}", row
    except (pa.ArrowException, OSError) as e:
        after = f" after row {n}" if n else ""
        raise ValueError(f"{path}: cannot read Parquet{after} ({e})") from None


def _rows(path: str) -> Iterator[tuple[str, object]]:
    """(location, row or BadRow) pairs, 1-based: 'line N' (JSONL), 'row N' (Parquet),
    'item N' (a .json file holding one array of rows). Text is strict UTF-8."""
    if path.endswith(".parquet"):
        yield from _parquet_rows(path)
        return
    with open(path, "rb") as f:
        if path.endswith(".json"):
            data = f.read()
            if data.lstrip().startswith(b"["):  # one JSON array of rows
                try:
                    rows = json.loads(data.decode("utf-8"))
                except UnicodeDecodeError as e:
                    line, bad = _utf8_error(data, e)
                    yield f"line {line + 1}", bad
                    return
                except json.JSONDecodeError as e:
                    yield f"line {e.lineno}", _bad_json(e)
                    return
                for n, row in enumerate(rows, 1):
                    yield f"item {n}", row
                return
            f.seek(0)
        for n, raw in enumerate(f, 1):  # binary: lines end at b"\n" only, as json counts them
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield f"line {n}", _utf8_error(raw, e)[1]
                continue
            yield f"line {n}", _json_row(text)


def load_file(path: str, field_map: Mapping[str, str] | None = None, on_bad_row: str = "error",
              check: Callable[[Problem], str | None] | None = None) -> tuple[list[Problem], int]:
    """(problems, number of skipped rows) from one .jsonl / .json / .parquet file.

    check(problem) -> reason or None: a further test of each row (e.g. `tasks.prompt_check`,
    prompt length), so a row the run cannot use fails here, with its file and line."""
    if on_bad_row not in ("error", "skip"):
        raise ValueError(f"on_bad_row must be 'error' or 'skip', got {on_bad_row!r}")
    fields = dict(field_map) if field_map and field_map.get("question") else None
    problems, skipped = [], 0
    for where, row in _rows(path):
        try:
            if isinstance(row, BadRow):
                raise row
            fields = fields or detect_layout(row)
            problem = row_to_problem(row, fields)
            if check and (reason := check(problem)):
                raise BadRow(reason)
            problems.append(problem)
        except BadRow as e:
            if on_bad_row == "error":
                raise ValueError(f"{path}:{where}: {e}") from None
            skipped += 1
    if not problems and not skipped:
        raise ValueError(f"{path}: empty file (no rows)")
    return problems, skipped


def _check_regular(path: str) -> None:
    """A data path must be a regular file: a dangling link fails to open, and a FIFO, socket
    or device could block the run (and its workdir's lock) forever in open()."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is a dangling symbolic link (to "
                                f"{os.readlink(path)!r})") from None
    if not stat.S_ISREG(mode):
        raise OSError(f"{path} is not a regular file (a FIFO, socket or device: reading it "
                      f"could wait forever): name a data file")


def load_files(spec: str, field_map: Mapping[str, str] | None = None, on_bad_row: str = "error",
               check: Callable[[Problem], str | None] | None = None
               ) -> tuple[list[Problem], int]:
    """All problems of a comma-separated list of paths or globs, in order, and the skip count
    (`check` as in load_file). No problem at all (every row skipped) is an error."""
    paths = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        matches = sorted(glob.glob(os.path.expanduser(part)))
        if not matches:
            raise FileNotFoundError(f"no file matches {part!r}")
        for m in filter(os.path.isdir, matches):
            raise IsADirectoryError(f"{part!r} names the directory {m}, not a data file: name "
                                    f"its files, e.g. {os.path.join(part, '*.jsonl')!r}")
        for m in matches:
            _check_regular(m)
        paths += matches
    problems, skipped = [], 0
    for path in paths:
        p, s = load_file(path, field_map, on_bad_row, check)
        problems += p
        skipped += s
    if not problems:
        raise ValueError(f"{spec}: no usable rows ({skipped} bad rows skipped)")
    return problems, skipped


# Math files: scored by the math verifier on the decoded text (task.reward=verifier).
TASK = Task(name="files", host_verifier=True)
TFDS_TASK = Task(name="tfds_files", host_verifier=True)  # the same, prepared as TFDS
