"""Problems for training and evaluation: the embedded task and local math files.

`load_split(config, split)` is the one entry point: it returns a random-access sequence of
`Problem`s for "train" or "eval", chosen by config.task.name:
  embedded       generated on the fly (tasks/embedded.py)
  files          JSONL/Parquet files: config.task.files, and config.task.eval_files for eval
                 (without eval_files, eval is the hash-selected 1/8 of `files`, train the rest)
  tfds_embedded  the embedded task prepared as a TFDS array_record dataset
  tfds_files     the files prepared as a TFDS array_record dataset
"""
import logging
from typing import Sequence

from ada_jax.tasks.embedded import EmbeddedSource
from ada_jax.tasks.iterator import PromptIterator
from ada_jax.tasks.problem import Problem, hint, problem_id, split_of

TASKS = ("embedded", "files", "tfds_embedded", "tfds_files")
__all__ = ["Problem", "PromptIterator", "EmbeddedSource", "hint", "problem_id", "split_of",
           "load_split", "TASKS"]


def load_split(config, split: str) -> Sequence[Problem]:
    """The problems of one split ("train" or "eval") of the task named by config.task.name."""
    t = config.task
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    field_map = {k: t.field_map[k] for k in ("question", "answer", "solution")}
    eval_files, data_dir = t.get("eval_files", ""), t.get("data_dir", "") or None
    if t.name == "embedded":
        size = t.train_size if split == "train" else t.eval_size
        return EmbeddedSource(split, size, t.seed, t.min_level, t.max_level)
    if t.name == "tfds_embedded":
        from ada_jax.tasks.tfds_builders import TfdsSource, embedded_builder
        builder = embedded_builder(data_dir, t.seed, t.min_level, t.max_level,
                                   t.train_size, t.eval_size)
        return TfdsSource(builder, split)
    if t.name in ("files", "tfds_files") and not t.files:
        raise ValueError(f"config.task.name={t.name!r} needs config.task.files")
    if t.name == "files":
        from ada_jax.tasks.files import load_files
        spec = eval_files if split == "eval" and eval_files else t.files
        problems, skipped = load_files(spec, field_map, t.on_bad_row)
        if skipped:
            logging.warning("%s: skipped %d malformed rows", spec, skipped)
        if not eval_files:
            problems = [p for p in problems if split_of(p.question) == split]
        return problems
    if t.name == "tfds_files":
        from ada_jax.tasks.tfds_builders import TfdsSource, math_files_builder
        builder = math_files_builder(data_dir, t.files, eval_files, field_map, t.on_bad_row)
        return TfdsSource(builder, split)
    raise ValueError(f"config.task.name={t.name!r}: choose from {TASKS}")
