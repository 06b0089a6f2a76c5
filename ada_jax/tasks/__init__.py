"""Problems for training and evaluation: the family task, the embedded task and local math files.

`task_of(config)` gives the run's `Task` (tasks/task.py: its config, reward and metrics hooks);
`load_split(config, split)` is the one entry point for its problems: it returns a random-access
sequence of `Problem`s for "train" or "eval", chosen by config.task.name:
  embedded       generated on the fly (tasks/embedded.py)
  families       the family task, generated on the fly (tasks/families.py): train holds the
                 families of config.task.family_set, eval every family (the controls too)
  files          JSONL/Parquet files: config.task.files, and config.task.eval_files for eval
                 (without eval_files, eval is the hash-selected 1/8 of `files`, train the rest)
  tfds_embedded  the embedded task prepared as a TFDS array_record dataset
  tfds_files     the files prepared as a TFDS array_record dataset
With a tokenizer, file-backed problems whose prompt does not fit the run are bad rows, found
at load time (`prompt_check`); for the generated tasks a prompt that does not fit (say, with a
hint) is a config error, also refused at load time (`_fits`).
"""
import logging
from typing import Callable, Sequence

from ada_jax.tasks import embedded, files
from ada_jax.tasks.embedded import EmbeddedSource
from ada_jax.tasks.iterator import PromptIterator
from ada_jax.tasks.problem import Problem, hint, problem_id, split_of
from ada_jax.tasks.task import Task

log = logging.getLogger(__name__)

TASKS = ("embedded", "families", "files", "tfds_embedded", "tfds_files")
__all__ = ["Problem", "PromptIterator", "EmbeddedSource", "hint", "problem_id", "split_of",
           "load_split", "prompt_check", "prompt_length", "is_embedded", "TASKS", "Task",
           "task_of"]


def task_of(config) -> Task:
    """The `Task` named by config.task.name (a ConfigDict, or the name itself)."""
    from ada_jax.tasks import families  # imports the reward module (jax): not at config time
    name = config if isinstance(config, str) else config.task.name
    known = (embedded.TASK, families.TASK, files.TASK, embedded.TFDS_TASK, files.TFDS_TASK)
    by_name = {t.name: t for t in known}
    if name not in by_name:
        raise ValueError(f"config.task.name={name!r}: choose from {TASKS}")
    return by_name[name]


def _hinted(config, split: str) -> bool:
    """Whether the run builds this split's prompts with hints (train prompts of rl.hints runs)."""
    return split == "train" and config.get("rl", {}).get("hints", "none") != "none"


def prompt_length(config, tokenizer, split: str) -> Callable[[Problem], int]:
    """length(problem) -> tokens of the longest prompt the run builds for it: rendered with
    config.task.template and encoded as the sampler encodes it (`encode_prompt`), with its
    strongest hint for train prompts of a hinted run (config.rl.hints)."""
    from ada_jax.tokenizer import encode_prompt
    template, hinted = config.task.template, _hinted(config, split)
    return lambda p: len(encode_prompt(tokenizer, p.question, template,
                                       hint(p, 3) if hinted else ""))


def prompt_check(config, tokenizer, split: str) -> Callable[[Problem], str | None]:
    """check(problem) -> why the run cannot sample its prompt, or None.

    The prompt (`prompt_length`: with its strongest hint for train prompts of a hinted run, the
    longest the run builds) must fit config.sampling.max_prompt_len. Checked at load time
    because a too-long row would otherwise stop the run at the step that reaches it, naming
    neither file nor line, and again on every resume."""
    template, limit = config.task.template, config.sampling.max_prompt_len
    hinted, length = _hinted(config, split), prompt_length(config, tokenizer, split)

    def check(p: Problem) -> str | None:
        n = length(p)
        if n <= limit:
            return None
        return (f"prompt has {n} tokens{' with its strongest hint' if hinted else ''} > "
                f"config.sampling.max_prompt_len={limit} (template {template!r})")
    return check


def _fits(source: Sequence[Problem], config, tokenizer, split: str, name: str):
    """source, after checking that its longest prompt fits config.sampling.max_prompt_len.

    For the generated tasks (embedded, tfds_embedded), whose prompt lengths are set by the
    config (levels, template, hints), not by bad rows. A hint is a prefix of the solution: with
    the embedded tokenizer a strength-3 hint takes level-8 prompts from <= 38 tokens to 100, past
    the default max_prompt_len=48, and unchecked such a prompt stops the run at the first step
    that hints it, after the base policy is trained. A config error, so refused at load time
    whatever config.task.on_bad_row says: skipping the prompts that do not fit would quietly
    drop the hardest levels, and truncating their hints would quietly weaken the hint levels
    the run reports; both change the experiment. The error names the length needed and the
    fields that change it. Each process measures every process_count-th problem."""
    import jax

    from ada_jax import sharding
    limit, length = config.sampling.max_prompt_len, prompt_length(config, tokenizer, split)
    p, n = jax.process_index(), jax.process_count()
    mine = max(([length(q), q.id, q.level] for q in map(source.__getitem__,
                                                         range(p, len(source), n))),
               default=[0, 0, 0])
    longest, pid, level = max(sharding.allgather_json(mine))
    if longest <= limit:
        return source
    hinted, s = _hinted(config, split), config.sampling
    raise ValueError(
        f"{name}: the longest {split} prompt{' with its strongest hint' if hinted else ''} has "
        f"{longest} tokens (problem id {pid}, level {level}) > config.sampling.max_prompt_len="
        f"{limit} (template {config.task.template!r}): set config.sampling.max_prompt_len >= "
        f"{longest} (with config.model.max_len >= it + config.sampling.max_new_tokens = "
        f"{longest + s.max_new_tokens}), or lower config.task.max_level"
        + (f", or set config.rl.hints='none' (now {config.rl.hints!r})" if hinted else ""))


def _checked(source: Sequence[Problem], check, on_bad_row: str, name: str):
    """source without the problems `check` rejects (on_bad_row="skip", logged), else
    ValueError naming the first one by record number and id (a prepared dataset has no lines).
    On several processes each checks every process_count-th record and the verdicts are
    gathered, so no process reads the whole dataset."""
    import jax

    from ada_jax import sharding
    p, n = jax.process_index(), jax.process_count()
    mine = [[i, source[i].id, r] for i in range(p, len(source), n) if (r := check(source[i]))]
    found = sorted(x for part in sharding.allgather_json(mine) for x in part)
    if found and on_bad_row == "error":
        i, pid, reason = found[0]
        raise ValueError(f"{name}: record {i + 1} (problem id {pid}): {reason}")
    bad = [i for i, _, _ in found]
    if not bad:
        return source
    log.warning("%s: skipped %d problems whose prompt is too long", name, len(bad))
    drop = set(bad)
    return _Subset(source, [i for i in range(len(source)) if i not in drop])


class _Subset(Sequence):
    """source[keep[i]]: a view, so a prepared dataset is still read one record at a time."""

    def __init__(self, source: Sequence[Problem], keep: list[int]):
        self.source, self.keep = source, keep

    def __len__(self) -> int:
        return len(self.keep)

    def __getitem__(self, i: int) -> Problem:
        return self.source[self.keep[i]]


def is_embedded(config) -> bool:
    """Whether the run's task is the embedded one (generated or prepared as TFDS): the task
    with the careful / hasty solution styles."""
    return config.task.name in ("embedded", "tfds_embedded")


def load_split(config, split: str, tokenizer=None) -> Sequence[Problem]:
    """The problems of one split ("train" or "eval") of the task named by config.task.name.
    With the run's tokenizer, file-backed problems must also pass `prompt_check`: rows that
    fail are bad rows (config.task.on_bad_row); the generated tasks' longest prompt must fit
    (`_fits`: a ValueError naming the fields to change)."""
    t = config.task
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    check = prompt_check(config, tokenizer, split) if tokenizer is not None else None
    field_map = {k: t.field_map[k] for k in ("question", "answer", "solution")}
    eval_files, data_dir = t.get("eval_files", ""), t.get("data_dir", "") or None
    if t.name in ("embedded", "tfds_embedded", "families"):
        if t.name == "families":
            from ada_jax.tasks.families import FamilySource
            size = t.train_size if split == "train" else t.eval_size
            source = FamilySource(split, size, t.seed,
                                  t.family_set if split == "train" else "every",
                                  t.min_level, t.max_level)
        elif t.name == "embedded":
            size = t.train_size if split == "train" else t.eval_size
            source = EmbeddedSource(split, size, t.seed, t.min_level, t.max_level)
        else:
            from ada_jax.tasks.tfds_builders import TfdsSource, embedded_builder
            source = TfdsSource(embedded_builder(data_dir, t.seed, t.min_level, t.max_level,
                                                 t.train_size, t.eval_size), split)
        if tokenizer is None:
            return source
        return _fits(source, config, tokenizer, split, f"{t.name} {split} split")
    if t.name in ("files", "tfds_files") and not t.files:
        raise ValueError(f"config.task.name={t.name!r} needs config.task.files")
    if t.name == "files":
        from ada_jax.tasks.files import load_files
        spec = eval_files if split == "eval" and eval_files else t.files
        mine = lambda p: bool(eval_files) or split_of(p.question) == split
        in_split_check = check and (lambda p: check(p) if mine(p) else None)
        field = "eval_files" if split == "eval" and eval_files else "files"
        try:
            problems, skipped = load_files(spec, field_map, t.on_bad_row, in_split_check)
        except OSError as e:  # missing, dangling, a directory, not a regular file: which field
            raise type(e)(f"config.task.{field}={spec!r}: {e}") from None
        if skipped:
            log.warning("%s: skipped %d bad rows", spec, skipped)
        return [p for p in problems if mine(p)]
    if t.name == "tfds_files":
        from ada_jax.tasks.tfds_builders import TfdsSource, math_files_builder
        builder = math_files_builder(data_dir, t.files, eval_files, field_map, t.on_bad_row)
        source = TfdsSource(builder, split)
        name = f"tfds_files {split} ({t.files})"
        return _checked(source, check, t.on_bad_row, name) if check else source
    raise ValueError(f"config.task.name={t.name!r}: choose from {TASKS}")
