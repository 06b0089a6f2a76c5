"""The embedded task: chained integer arithmetic, evaluated left to right, with a difficulty ladder.

A problem is a start value and a chain of operations, e.g. `Compute left to right: 4+3-5+4`,
meaning ((4+3)-5)+4. A response is written in one of two styles, and the choice between them
is what RL can learn (docs/results.md):

    careful (one operation per line)     hasty (the answer at once)
    4+3=7                                \\boxed{6}
    7-5=2
    2+4=6
    \\boxed{6}

Each careful line is one fact the model can recall reliably on the middle levels; the hasty
style must do the whole chain in one shot, which a small model gets right less and less often
as the chain grows. The SFT data mixes the styles (`sft.careful_share` careful), so the base
policy picks the careful style some of the time on every prompt: RL that rewards correct
answers raises that share on every prompt, held-out ones included, and responses get longer as
accuracy rises. `Problem.solution` is the careful solution (hints reveal its lines);
`hasty_solution` gives the other style and `is_careful` tells a completion's style.

The ladder runs from copying (level 1: no operation, `Compute left to right: 347` ->
`\\boxed{347}`; level 2: one identity operation such as `347*1`) through one-digit facts
(level 3) and chains of two to four of them on values below 10 (levels 4-6) to
operations on three- and four-digit numbers with multiplications (levels 7-8), which a
sub-million-parameter model cannot do line by line either: both tails of the pass-rate
distribution stay populated, the signal-collapse regime the adaptive methods target. All
values stay in [0, bound), so answers are plain digit strings.

Problems are generated on the fly and deterministically from (seed, split, index); train and
eval are disjoint because membership is decided by the question text (`problem.split_of`).
"""
import dataclasses
import random

import numpy as np

from ada_jax.tasks.problem import Problem, problem_id, split_of
from ada_jax.tasks.task import Task

PREFIX = "Compute left to right: "


@dataclasses.dataclass(frozen=True)
class Level:
    steps: int         # operations in the chain = lines of the solution (0: just copy the number)
    start_digits: int  # width of the start value
    digits: int        # width of +/- operands; 0 = identity operations (+0, -0, *1)
    ops: str           # allowed operations; '*' multiplies by 2..9
    bound: int         # every intermediate value lies in [0, bound)


LEVELS = {
    1: Level(steps=0, start_digits=3, digits=0, ops="", bound=1000),
    2: Level(steps=1, start_digits=3, digits=0, ops="+-*", bound=1000),
    3: Level(steps=1, start_digits=1, digits=1, ops="+-", bound=10),
    4: Level(steps=2, start_digits=1, digits=1, ops="+-", bound=10),
    5: Level(steps=3, start_digits=1, digits=1, ops="+-", bound=10),
    6: Level(steps=4, start_digits=1, digits=1, ops="+-", bound=10),
    7: Level(steps=3, start_digits=3, digits=3, ops="+-*", bound=10_000),
    8: Level(steps=5, start_digits=4, digits=4, ops="+-*", bound=10_000),
}
MAX_LEVEL = max(LEVELS)


def _number(rng: random.Random, digits: int) -> int:
    """Uniform over numbers with exactly `digits` digits (0..9 for one digit)."""
    return rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)


def _operand(rng: random.Random, level: Level, op: str) -> int:
    if level.digits == 0:
        return 1 if op == "*" else 0
    return rng.randrange(2, 10) if op == "*" else _number(rng, level.digits)


def _chain(rng: random.Random, level: Level) -> tuple[int, list[tuple[str, int]]]:
    """A start value and `level.steps` (op, operand) pairs keeping every value in [0, bound)."""
    value = start = _number(rng, level.start_digits)
    chain = []
    while len(chain) < level.steps:
        op = rng.choice(level.ops)
        operand = _operand(rng, level, op)
        new = {"+": value + operand, "-": value - operand, "*": value * operand}[op]
        if 0 <= new < level.bound:
            chain.append((op, operand))
            value = new
    return start, chain


def make_problem(rng: random.Random, level: int) -> Problem:
    """One random problem of the given level (1..8)."""
    start, chain = _chain(rng, LEVELS[level])
    question = PREFIX + str(start) + "".join(f"{op}{x}" for op, x in chain)
    lines, value = [], start
    for op, x in chain:
        new = {"+": value + x, "-": value - x, "*": value * x}[op]
        lines.append(f"{value}{op}{x}={new}")
        value = new
    lines.append(f"\\boxed{{{value}}}")
    return Problem(id=problem_id(question), question=question, answer=str(value),
                   solution="\n".join(lines), level=level)


def hasty_solution(problem: Problem) -> str:
    """The one-shot style: the answer with no working (`\\boxed{150}`)."""
    return f"\\boxed{{{problem.answer}}}"


def is_careful(completion: str) -> bool:
    """Whether a completion works line by line (the careful style) rather than boxing the
    answer at once: it writes an `=` before its first `\\boxed{`."""
    box = completion.find("\\boxed{")
    return "=" in (completion if box < 0 else completion[:box])


@dataclasses.dataclass(frozen=True)
class EmbeddedSource:
    """A split of the embedded task as a random-access sequence of `size` Problems.

    Index i has level min_level + i % (number of levels), so every slice of the split is
    stratified by level; the problem itself comes from rng(seed, split, i), resampled until
    its question falls in this split.
    """
    split: str
    size: int
    seed: int = 0
    min_level: int = 1
    max_level: int = MAX_LEVEL

    def __post_init__(self):
        if self.split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {self.split!r}")
        if not 1 <= self.min_level <= self.max_level <= MAX_LEVEL:
            raise ValueError(f"levels must satisfy 1 <= min_level={self.min_level} <= "
                             f"max_level={self.max_level} <= {MAX_LEVEL}")

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Problem:
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} out of range for {self.size} problems")
        level = self.min_level + index % (self.max_level - self.min_level + 1)
        rng = random.Random(f"embedded/{self.seed}/{self.split}/{index}")
        while True:
            problem = make_problem(rng, level)
            if split_of(problem.question) == self.split:
                return problem


def train_metrics(texts) -> dict:
    """The share of the step's kept completions written in the careful line-by-line style."""
    return {"careful_share": sum(map(is_careful, texts)) / len(texts) if texts else 0.0}


def eval_metrics(problems, rewards_PK, texts) -> dict:
    """The style choice at eval: the share of completions in the careful style, overall and per
    level, and each style's accuracy (texts problem-major, k per problem)."""
    careful_PK = np.asarray([is_careful(t) for t in texts]).reshape(rewards_PK.shape)
    levels = np.asarray([p.level for p in problems])
    out = {"careful_share": float(careful_PK.mean())}
    for lv in sorted(set(levels.tolist())):
        out[f"level{lv}/careful_share"] = float(careful_PK[levels == lv].mean())
    for name, sel in (("careful", careful_PK), ("hasty", ~careful_PK)):
        if sel.any():
            out[f"{name}_accuracy"] = float(rewards_PK[sel].mean())
    return out


TASK = Task(name="embedded", train_metrics=train_metrics, eval_metrics=eval_metrics)
TFDS_TASK = Task(name="tfds_embedded", train_metrics=train_metrics,  # the same, prepared
                 eval_metrics=eval_metrics)
