"""TFDS builders (array_record files, no TensorFlow needed) for the embedded task and local
math files, and `TfdsSource`, which reads a prepared split back as Problems.

Why TFDS at all: a prepared dataset is a versioned, random-access set of files that every host
of a pod can read without regenerating or re-parsing anything (`builder.as_data_source()`).
"""
import dataclasses
import glob
import hashlib
import os

import numpy as np
import tensorflow_datasets as tfds

from ada_jax.tasks.embedded import MAX_LEVEL, EmbeddedSource
from ada_jax.tasks.files import load_files
from ada_jax.tasks.problem import Problem, split_of

_FEATURES = dict(id=np.int64, question=tfds.features.Text(), answer=tfds.features.Text(),
                 solution=tfds.features.Text(), level=np.int32)


def _record(p: Problem) -> dict:
    return dict(id=p.id, question=p.question, answer=p.answer, solution=p.solution,
                level=p.level)


def _info(builder, description: str):
    return tfds.core.DatasetInfo(builder=builder, description=description,
                                 features=tfds.features.FeaturesDict(_FEATURES),
                                 disable_shuffling=True)


@dataclasses.dataclass(eq=False)
class EmbeddedConfig(tfds.core.BuilderConfig):
    seed: int = 0
    min_level: int = 1
    max_level: int = MAX_LEVEL
    train_size: int = 20_000
    eval_size: int = 256


class EmbeddedArithmetic(tfds.core.GeneratorBasedBuilder):
    """The embedded task written out; record i of a split equals EmbeddedSource(split)[i]."""
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return _info(self, type(self).__doc__)

    def _split_generators(self, dl_manager):
        c = self.builder_config
        return {split: self._generate_examples(split, size)
                for split, size in (("train", c.train_size), ("eval", c.eval_size))}

    def _generate_examples(self, split, size):
        c = self.builder_config
        source = EmbeddedSource(split, size, c.seed, c.min_level, c.max_level)
        for i in range(size):
            yield i, _record(source[i])


@dataclasses.dataclass(eq=False)
class MathFilesConfig(tfds.core.BuilderConfig):
    files: str = ""        # comma-separated paths/globs (train, or everything if no eval_files)
    eval_files: str = ""   # "" = eval is the hash-selected part of `files` (problem.split_of)
    field_map: tuple = ()  # (("question", col), ("answer", col), ("solution", col))
    on_bad_row: str = "error"


class MathFiles(tfds.core.GeneratorBasedBuilder):
    """Local JSONL/Parquet math problems (see tasks/files.py) as train/eval splits."""
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return _info(self, type(self).__doc__)

    def _split_generators(self, dl_manager):
        c = self.builder_config
        load = lambda spec: load_files(spec, dict(c.field_map), c.on_bad_row)[0]
        train = load(c.files)
        if c.eval_files:
            evals = load(c.eval_files)
        else:
            train, evals = ([p for p in train if split_of(p.question) == s]
                            for s in ("train", "eval"))
        return {"train": self._generate_examples(train), "eval": self._generate_examples(evals)}

    def _generate_examples(self, problems):
        for i, p in enumerate(problems):
            yield i, _record(p)


def embedded_builder(data_dir: str | None, seed: int, min_level: int, max_level: int,
                     train_size: int, eval_size: int) -> EmbeddedArithmetic:
    name = f"s{seed}_l{min_level}-{max_level}_n{train_size}-{eval_size}"
    config = EmbeddedConfig(name=name, seed=seed, min_level=min_level, max_level=max_level,
                            train_size=train_size, eval_size=eval_size)
    return EmbeddedArithmetic(config=config, data_dir=data_dir, file_format="array_record")


def math_files_builder(data_dir: str | None, files: str, eval_files: str = "",
                       field_map: dict | None = None, on_bad_row: str = "error") -> MathFiles:
    fm = tuple(sorted((field_map or {}).items()))
    # The config name covers the files' sizes and mtimes, so edited files give a new dataset.
    stats = [(p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for spec in (files, eval_files)
             for part in spec.split(",") if part.strip()
             for p in sorted(glob.glob(os.path.expanduser(part.strip())))]
    key = repr((files, eval_files, fm, on_bad_row, stats)).encode()
    name = "f" + hashlib.blake2b(key, digest_size=6).hexdigest()
    config = MathFilesConfig(name=name, files=files, eval_files=eval_files, field_map=fm,
                             on_bad_row=on_bad_row)
    return MathFiles(config=config, data_dir=data_dir, file_format="array_record")


def _prepare(builder: tfds.core.DatasetBuilder) -> tfds.core.DatasetBuilder:
    """The builder of the prepared dataset. Process 0 prepares it first; on several processes
    the others then read what it wrote when they share its data_dir, else prepare their own."""
    import jax
    from jax.experimental import multihost_utils
    if jax.process_index() == 0:
        builder.download_and_prepare()
    if jax.process_count() == 1:
        return builder
    multihost_utils.sync_global_devices(  # a name alike on every host, whatever its data_dir
        f"tfds prepared {builder.name}/{builder.builder_config.name}")
    if jax.process_index() != 0:
        if os.path.exists(os.path.join(builder.data_dir, "dataset_info.json")):
            return tfds.builder_from_directory(builder.data_dir)
        builder.download_and_prepare()
    return builder


class TfdsSource:
    """A prepared split (`builder.as_data_source(split)`) as a sequence of Problems."""

    def __init__(self, builder: tfds.core.DatasetBuilder, split: str):
        self._records = _prepare(builder).as_data_source(split=split)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> Problem:
        if not 0 <= index < len(self._records):
            raise IndexError(f"index {index} out of range for {len(self._records)} problems")
        r = self._records[index]
        text = lambda v: v.decode("utf-8") if isinstance(v, bytes) else str(v)
        return Problem(id=int(r["id"]), question=text(r["question"]), answer=text(r["answer"]),
                       solution=text(r["solution"]), level=int(r["level"]))
