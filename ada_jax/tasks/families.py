"""The family task: per-family reading conventions that the base policy rarely gets right.

The reference papers' regime (signal collapse) needs prompts the base solves rarely, often and
always, each for its own reason. Here every prompt belongs to a *family*, named by a tag (one or two
upper-case letters, one token of the family tokenizer), and each family has its own right way
of reading a short chain of one-digit additions and subtractions: as written ("l") or with +
and - swapped ("r"). A response opens with a reading marker, then follows it line by line:

    prompt            reading l (as written)    reading r (+ and - swapped)
    E 4+3-2           e=                        e~
                      4+3=7                     4-3=1
                      7-2=5                     1+2=3
                      \\boxed{5}                 \\boxed{3}

The markers are the family's own tokens (`e=` and `e~` for family E): no token is shared by two
families' decisions, so RL cannot move every family at once by moving one logit (with shared
markers, the first design, a shared bias towards one marker drifted freely and leaked into the
held-out families; docs/results.md). The marker is the one decision per response; the lines
are one-digit facts the base gets right almost always, so a family's pass rate is about the
share of responses with its right marker. The reward (task.reward=reading, `score_reading`)
pays the right boxed answer only under the right marker, so the marker is the only way to it.

The SFT data writes family k's targets in its right reading with share c_k (`Family.share`) and
in the other reading otherwise, so the base's pass rate follows c_k: very hard families
(c = 0.01-0.03: a group of 16 is still all wrong most of the time) and hard ones (c <= 0.10) sit
near p = 0, easy ones (c >= 0.90, mirroring them) near p = 1, a few mid ones between. Within
each tier half the families read `l` and half `r`, so no single direction is right for every
family. Four families (one hard and one easy per reading) are transfer controls: in SFT and
eval, never among RL's training prompts (config.task.family_set); their accuracy shows how much
of what RL learns on other families leaks into theirs. They read l / r like the others (so
their lines are the lines every reward holds: controls with lines of their own lost them on
long runs, docs/results.md) and are firm (shares 0.01 / 0.99, the tiers' extremes): RL shrinks
a held-out family's marker logit gap by a part (what no reward holds), which moved controls at
0.06 / 0.94 by 0.1-0.3 in accuracy and moves these by a few hundredths (docs/results.md,
"Transfer controls").

Both readings keep every value in [0, 10) and give different answers (so the marker matters).
`Problem.level` is the family's number (1-based), so eval reports per family; `tier_of` maps it
to its tier. Training problems are generated deterministically from (seed, split, index) like
the embedded task's; held-out ones are each family's distinct eval questions in a seeded order;
train and eval are disjoint by question text. The task has its own sentencepiece model
(`ada_jax/assets/families.model`, `SYMBOLS` as single pieces; the task=families config selects
it), since the embedded one has too few spare pieces.
"""
import dataclasses
import functools
import random
import re

import numpy as np

from ada_jax.rewards.embedded import score_text
from ada_jax.tasks.problem import Problem, problem_id, split_of
from ada_jax.tasks.task import Task

READINGS = ("l", "r")  # l: as written; r: + read as - and - as +
FAMILY_SETS = ("rl", "hard", "every")  # which families a train split holds (see family_indices)
# A control tier is two families: at 16 held-out prompts each its mean's standard error was
# 0.04-0.08 at a run's end. A control family holds half its questions out (4 of the 8 id
# buckets, the others 1) and the eval split takes CONTROL_EVAL_WEIGHT times as many of them,
# so a control tier has 96 prompts at 12 per RL family (docs/results.md).
CONTROL_EVAL_BUCKETS = 4
CONTROL_EVAL_WEIGHT = 4


@dataclasses.dataclass(frozen=True)
class Family:
    tag: str        # one or two upper-case letters, one token, first in the prompt
    right: str      # the reading whose answer counts (one of READINGS)
    share: float    # c_k: share of this family's SFT targets written in the right reading
    tier: str       # "very_hard", "hard", "mid" or "easy"
    control: bool = False  # transfer control: never a training prompt of RL


def _tier(tier, tags, shares, control=False, first=0):
    """Families of one tier, right readings alternating from READINGS[first] in the order
    given."""
    return [Family(tag, READINGS[(first + i) % 2], c, tier, control)
            for i, (tag, c) in enumerate(zip(tags, shares))]


# Hard and easy families mirror each other: easy family i has share 1 - c_i of hard family i
# and the other reading, so the two behave alike at the base (each says the same marker with
# the same probability) and only the reward tells them apart. Anything RL might learn that is
# not family-specific (a shared bias, flattening every family's marker distribution, dropping
# what SFT taught) then helps the hard tiers exactly as much as it hurts the easy one: the
# expected gradient on it cancels, and what RL learns is per family (docs/results.md).
# The very hard tier (p = 0.01-0.03) is where a group of 16 is still all wrong most of the
# time (0.98^16 = 0.72): group sampling collapses at every group size there. 108 RL families
# for 16 prompts a step: each family is visited about once every 7 steps, so a method's
# hard tiers need about twice the samples they needed with 56 families (which passed 0.90
# at 7-11k samples) and none saturates within the comparisons' 12,288 (docs/results.md).
_VERY_HARD = tuple(round(0.01 + 0.02 * i / 23, 4) for i in range(24))
_HARD = tuple(round(0.04 + 0.06 * i / 23, 4) for i in range(24))
_MID = (0.15, 0.2, 0.3, 0.35, 0.4, 0.45, 0.55, 0.6, 0.65, 0.7, 0.8, 0.85)
_TAGS = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ") + tuple(f"{a}{b}" for a in "QZXJ"
                                                    for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
FAMILIES = tuple(
    _tier("very_hard", _TAGS[0:24], _VERY_HARD)
    + _tier("hard", _TAGS[24:48], _HARD)
    + _tier("mid", _TAGS[48:60], _MID)
    + _tier("easy", _TAGS[60:108], tuple(round(1 - c, 4) for c in _VERY_HARD + _HARD),
            first=1)
    + _tier("hard", _TAGS[108:110], (0.01, 0.01), control=True)
    + _tier("easy", _TAGS[110:112], (0.99, 0.99), control=True, first=1))


def marker(family: int, reading: str) -> str:
    """Family `family`'s (0-based) marker for `reading`: its tag in lower case, then `=`
    (reading l) or `~` (reading r); one token."""
    if reading not in READINGS:
        raise ValueError(f"a family reads {READINGS}, not {reading!r}")
    return FAMILIES[family].tag.lower() + ("=" if reading == READINGS[0] else "~")


def other_reading(reading: str) -> str:
    """The reading that is not `reading` (every family reads l / r)."""
    a, b = READINGS
    return b if reading == a else a


SYMBOLS = tuple(f.tag for f in FAMILIES) + tuple(marker(i, r) for i, f in enumerate(FAMILIES)
                                                 for r in READINGS)
TIERS = ("very_hard", "hard", "mid", "easy")
_QUESTION = re.compile(r"^(\S+) (\d)((?:[+-]\d)+)$")


def family_indices(family_set: str, min_level: int = 1, max_level: int = 0) -> list[int]:
    """0-based indices of the families a split draws from: "rl" every family but the
    controls (RL's training prompts), "hard" the very hard and hard RL families only (the
    reference papers' hard prompt set: prompts the base solves rarely), "every" all of them (SFT and
    eval); only family numbers min_level..max_level (1-based; max_level 0: the last)."""
    if family_set not in FAMILY_SETS:
        raise ValueError(f"family_set must be one of {FAMILY_SETS}, got {family_set!r}")
    last = max_level or len(FAMILIES)
    out = [i for i, f in enumerate(FAMILIES) if min_level <= i + 1 <= last and (
        family_set == "every" or (not f.control and family_set == "rl")
        or (not f.control and family_set == "hard" and f.tier in ("very_hard", "hard")))]
    if not out:
        raise ValueError(f"family_set={family_set!r} has no family numbered {min_level}.."
                         f"{last} (config.task.min_level / max_level)")
    return out


def tier_of(level: int) -> str:
    """The tier of family number `level` (1-based), "control_<tier>" for the controls."""
    f = FAMILIES[level - 1]
    return f"control_{f.tier}" if f.control else f.tier


def _apply(op: str, reading: str) -> str:
    """Operator `op` as `reading` reads it."""
    return {"+": "-", "-": "+"}[op] if reading == "r" else op


def _evaluate(start: int, chain, reading: str):
    """Lines `a+b=c` of the chain read in `reading`, and the final value (None if a value
    leaves [0, 10))."""
    lines, value = [], start
    for op, x in chain:
        op = _apply(op, reading)
        new = value + x if op == "+" else value - x
        if not 0 <= new < 10:
            return lines, None
        lines.append(f"{value}{op}{x}={new}")
        value = new
    return lines, value


def parse(question: str):
    """(family index, start, [(op, operand)]) of a family-task question."""
    m = _QUESTION.match(question)
    tags = [f.tag for f in FAMILIES]
    if not m or m.group(1) not in tags:
        raise ValueError(f"not a family-task question: {question!r}")
    chain = [(s[0], int(s[1])) for s in re.findall(r"[+-]\d", m.group(3))]
    return tags.index(m.group(1)), int(m.group(2)), chain


def family_split(family: int, question: str) -> str:
    """'eval' or 'train' for a question of family `family`: the task's split by question
    text (problem.split_of), a control family holding out CONTROL_EVAL_BUCKETS of the id
    buckets instead of one (it is never a training prompt of RL; SFT keeps about half its
    questions)."""
    return split_of(question, CONTROL_EVAL_BUCKETS if FAMILIES[family].control else 1)


def solution(question: str, reading: str) -> str:
    """The response that reads `question` in `reading`: marker, lines, boxed answer."""
    family, start, chain = parse(question)
    lines, value = _evaluate(start, chain, reading)
    return "\n".join([marker(family, reading), *lines, f"\\boxed{{{value}}}"])


def _valid(start: int, chain, readings) -> bool:
    """Both readings stay in [0, 10) and give different answers (so the marker matters)."""
    answers = [_evaluate(start, chain, r)[1] for r in readings]
    return None not in answers and answers[0] != answers[1]


def _question(family: int, start: int, chain) -> str:
    return f"{FAMILIES[family].tag} {start}" + "".join(f"{op}{x}" for op, x in chain)


def _problem(family: int, question: str) -> Problem:
    f = FAMILIES[family]
    _, start, chain = parse(question)
    return Problem(id=problem_id(question), question=question,
                   answer=str(_evaluate(start, chain, f.right)[1]),
                   solution=solution(question, f.right), level=family + 1)


def make_problem(rng: random.Random, family: int, steps: int = 2) -> Problem:
    """A random problem of family `family` (0-based): `steps` one-digit operations whose two
    readings both stay in [0, 10) and give different answers."""
    while True:
        start = rng.randrange(10)
        chain = [(rng.choice("+-"), rng.randrange(1, 10)) for _ in range(steps)]
        if _valid(start, chain, READINGS):
            return _problem(family, _question(family, start, chain))


@functools.lru_cache(maxsize=None)
def eval_questions(family: int, seed: int) -> tuple[str, ...]:
    """Every held-out question of family `family` (two steps: about 25 of its 200; about 100
    for a control, `family_split`), in an order shuffled by `seed`: the eval split takes
    them in turn, so no question repeats."""
    ops = [(op, x) for op in "+-" for x in range(1, 10)]
    qs = [q for start in range(10) for a in ops for b in ops
          if _valid(start, [a, b], READINGS)
          and family_split(family, q := _question(family, start, [a, b])) == "eval"]
    random.Random(f"families/{seed}/eval/{family}").shuffle(qs)
    return tuple(qs)


def reading_of(completion: str, family: int) -> str | None:
    """The reading whose marker of family `family` (0-based) the completion opens with, or
    None (no marker, or another family's)."""
    head = completion.split("\n", 1)[0].strip()
    return next((r for r in READINGS if head == marker(family, r)), None)


def score_reading(problem: Problem, completion: str) -> float:
    """The reward task.reward=reading: 1.0 iff the completion opens with its family's right
    marker and boxes the right answer. The answer alone (reward=verifier) also pays a response
    that opens with the wrong marker and then writes the right reading's lines, which teaches
    lines that ignore the marker, in every family at once (docs/results.md, "Transfer
    controls")."""
    family = problem.level - 1
    return float(reading_of(completion, family) == FAMILIES[family].right
                 and score_text(completion, problem.answer) == 1.0)


def right_marker_ids(tokenizer, problems) -> np.ndarray:
    """int32[len(problems)]: the token id of each problem's right reading marker (the first
    token of a response; the family tokenizer holds every marker as one piece)."""
    out = []
    for p in problems:
        text = marker(p.level - 1, FAMILIES[p.level - 1].right)
        ids = tokenizer.encode(text)
        if len(ids) != 1:
            raise ValueError(f"task.reward=reading needs each reading marker as one token; "
                             f"{text!r} is {ids} (use the family tokenizer, "
                             f"model.tokenizer=families)")
        out.append(ids[0])
    return np.asarray(out, np.int32)


def follows_one_reading(question: str, completion: str) -> bool:
    """Whether the completion is exactly one reading's response: its family's marker, then
    that reading's lines (the arithmetic may be wrong, the operators and operands may not)."""
    family, start, chain = parse(question)
    reading = reading_of(completion, family)
    if reading is None:
        return False
    lines = completion.split("\n")[1:]
    if len(lines) != len(chain) + 1:
        return False
    value = start
    for line, (op, x) in zip(lines, chain):
        m = re.fullmatch(r"(\d+)([+-])(\d+)=(-?\d+)", line.strip())
        read = (int(m.group(1)), m.group(2), int(m.group(3))) if m else None
        if read != (value, _apply(op, reading), x):
            return False
        value = int(m.group(4))
    return lines[-1].startswith("\\boxed{")


@dataclasses.dataclass(frozen=True)
class FamilySource:
    """A split of the family task as a random-access sequence of `size` Problems: index i is
    a problem of family family_indices(family_set)[i % count], so every slice is stratified by
    family; drawn from rng(seed, split, i) until its question falls in this split. Eval:
    each family's distinct held-out questions in turn, in rounds of `eval_slots` (a control
    family CONTROL_EVAL_WEIGHT times per round). min_level..max_level: the family
    numbers used (1-based; max_level 0: the last)."""
    split: str
    size: int
    seed: int = 0
    family_set: str = "rl"
    min_level: int = 1
    max_level: int = 0

    def __post_init__(self):
        if self.split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {self.split!r}")
        self.families()  # validates

    def families(self) -> list[int]:
        return family_indices(self.family_set, self.min_level, self.max_level)

    def eval_slots(self) -> list[int]:
        """One round of the eval split: each RL family once, each control family
        CONTROL_EVAL_WEIGHT times (so a control tier's mean has a standard error like the
        others')."""
        return [f for f in self.families()
                for _ in range(CONTROL_EVAL_WEIGHT if FAMILIES[f].control else 1)]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Problem:
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} out of range for {self.size} problems")
        if self.split == "eval":  # distinct: a duplicate would count twice in a tier's mean
            slots = self.eval_slots()
            family = slots[index % len(slots)]
            weight = slots.count(family)
            j = index // len(slots) * weight + slots[:index % len(slots)].count(family)
            questions = eval_questions(family, self.seed)
            if j >= len(questions):
                most = len(slots) * min(len(eval_questions(f, self.seed)) // slots.count(f)
                                        for f in set(slots))
                raise IndexError(
                    f"family task eval: family {FAMILIES[family].tag} has {len(questions)} "
                    f"distinct held-out questions, index {index} needs {j + 1}; set "
                    f"config.task.eval_size / eval.prompts <= {most}")
            return _problem(family, questions[j])
        fams = self.families()
        family = fams[index % len(fams)]
        rng = random.Random(f"families/{self.seed}/{self.split}/{index}")
        while True:
            problem = make_problem(rng, family)
            if family_split(family, problem.question) == self.split:
                return problem


def sft_target(problem: Problem, u: float) -> str:
    """A SFT target for `problem` given a uniform draw u: its family's right reading when
    u < c_k, else the other one (the base policy's per-family prior)."""
    f = FAMILIES[problem.level - 1]
    right = u < f.share
    return solution(problem.question,
                    f.right if right else other_reading(f.right))


def within_family_se(per_prompt, family):
    """Standard error of mean(per_prompt) with the families fixed (a stratified sample):
    sqrt(Σ_f n_f·s_f²) / N, s_f² the sample variance of family f's n_f prompt scores, N their
    total; None unless every family has at least two prompts."""
    per_prompt, family = np.asarray(per_prompt, np.float64), np.asarray(family)
    groups = [per_prompt[family == f] for f in np.unique(family)]
    if min(len(g) for g in groups) < 2:
        return None
    return float(np.sqrt(sum(len(g) * g.var(ddof=1) for g in groups)) / len(per_prompt))


def metrics(problems, rewards_PK, texts) -> dict:
    """Eval metrics of the family task: avg@k per tier (hard / mid / easy RL families and the
    controls), and the share of responses that follow one reading throughout
    (`one_reading_share`) and that open with their family's right marker, per tier; each
    tier's standard error over its prompts (`tier_<t>/se`, the families' spread counted as
    noise) and given its families (`tier_<t>/se_within`, `within_family_se`: the noise of
    the prompts and samples drawn, which is what differs between two runs on the same
    families)."""
    k = rewards_PK.shape[1]
    tiers = np.asarray([tier_of(p.level) for p in problems])
    right_PK = np.asarray([[reading_of(texts[i * k + j], p.level - 1)
                            == FAMILIES[p.level - 1].right for j in range(k)]
                           for i, p in enumerate(problems)])
    one_PK = np.asarray([[follows_one_reading(p.question, texts[i * k + j]) for j in range(k)]
                         for i, p in enumerate(problems)])
    out = {"one_reading_share": float(one_PK.mean()), "right_marker_share": float(right_PK.mean())}
    for tier in sorted(set(tiers.tolist())):
        sel = tiers == tier
        out[f"tier_{tier}/avg@{k}"] = float(rewards_PK[sel].mean())
        per_prompt = rewards_PK[sel].mean(1)  # the tier mean's standard error over prompts
        if len(per_prompt) > 1:
            out[f"tier_{tier}/se"] = float(per_prompt.std(ddof=1) / np.sqrt(len(per_prompt)))
        fams = np.asarray([p.level for p in problems])[sel]
        within = within_family_se(per_prompt, fams)
        if within is not None:
            out[f"tier_{tier}/se_within"] = within
        out[f"tier_{tier}/right_marker_share"] = float(right_PK[sel].mean())
    return out


def configure(c, smoke: bool, pretrained: bool) -> None:
    """The family task's config on the embedded models (tiny / small; a pretrained model keeps
    the defaults, and config_check refuses this task for it), applied by get_config.

    The task: 12 distinct held-out prompts per RL family and 48 per control (a control tier's
    96: its standard error <= 0.03), and its own tokenizer (358 ids), whose tags and markers
    are single tokens.
    - The answer pays only under the family's right reading marker (task.reward=reading): the
      answer alone also paid the right reading's lines under the wrong marker, which taught
      every family to write lines that ignore the marker (docs/results.md, "Transfer
      controls").
    - The SFT corpus is replayed beside the policy loss (16 rows per update), every target
      token but the reading marker (the decision RL is meant to move): it holds the lines no
      reward targets. Without it, runs at this lr had episodes where every family's lines
      broke (one-reading share down to 0.73) and the easy transfer controls fell by up to 0.38
      mid-run; with it the lines held and learning at matched steps did not slow.
    - SFT sees ~4.1k targets per family, so a very hard family's 1-3% right readings are
      40-120 examples, not a handful, and it runs to convergence (one reading 0.995+):
      unsettled lines were worn away by long RL runs in every family, the controls first.
    - The optimizer of the reference papers' runs (verl's actor: AdamW, eps 1e-8, weight decay
      0.01, constant lr after warm-up, grad-norm clip 1.0), lr 3e-4 from a sweep on GRPO-n4
      and Ada-Seq-balance: the largest lr at which every arm keeps the task's conditions
      (transfer controls within 0.10 of base, no tier saturating; docs/results.md, "The
      learning-rate map").

    `smoke=True` (the smoke run; this docstring is the one place its expected result is
    written): learning visible in one short run. 8 prompts, one per hard family (families
    25-32), are SFT's data (160 steps: mostly their families' wrong reading) and RL's every
    step (6 steps at lr 1e-3); eval k=32 on them (`train_eval/`) and on 8 held-out prompts of
    the same families. Measured on an AMD EPYC (family 26): reward 0.00 -> 0.65, train_eval
    0.07 -> 0.71, held-out right marker 0.04 -> 0.31; on an Intel Xeon (family 6, model 207;
    another CPU makes another base): 0.00 -> 0.70, 0.07 -> 0.70, 0.03 -> 0.24. Held-out
    accuracy stays near 0 (8 prompts teach little arithmetic); tests/test_smoke.py checks
    that each rises."""
    if pretrained:
        return
    c.model.tokenizer = "families"
    c.model.vocab_size = 384
    c.task.max_level = 112  # task.min_level..max_level: the families used (1-based), all
    if not smoke:  # the smoke run keeps its own small eval
        c.task.eval_size = c.eval.prompts = 1488
    c.task.reward = "reading"
    c.loss.update(replay_coef=1.0, replay_skip=1)
    c.sampling.max_new_tokens = 32
    c.sft.steps = 7200
    c.optim.update(lr=3e-4, weight_decay=0.01)
    if smoke:
        c.sampling.max_new_tokens = 24  # a response is 17 tokens and EOS
        c.task.update(train_size=8, min_level=25, max_level=32)  # the hard tier's first 8
        c.sft.update(steps=160, lr=6e-3, warmup_steps=5)
        c.rl.update(steps=6, prompts_per_step=8)
        c.optim.update(lr=1e-3, warmup_steps=1)
        c.eval.update(k=32, train_prompts=8)


def reward_data(config, tokenizer, problems) -> dict:
    """task.reward=reading: each prompt's right marker id, for `reward_gate`."""
    if config.task.reward != "reading":
        return {}
    return {"marker_id": right_marker_ids(tokenizer, problems)}


def _opens_with_right_marker(data, idx_S, tokens_SN, lengths_S):
    return (lengths_S > 0) & (tokens_SN[:, 0] == data["marker_id"][idx_S])


def reward_gate(config):
    """task.reward=reading: the response must open with its family's right marker."""
    return _opens_with_right_marker if config.task.reward == "reading" else None


def host_scorer(config):
    """task.reward=reading: `score_reading` for evaluation; else the boxed answer (None)."""
    return score_reading if config.task.reward == "reading" else None


def base_pass_rate(problem) -> float:
    """The base policy's pass rate of a problem: its family's designed share."""
    return FAMILIES[problem.level - 1].share


TASK = Task(name="families", configure=configure, reward_data=reward_data,
            reward_gate=reward_gate, score_text=host_scorer, eval_metrics=metrics,
            base_pass_rate=base_pass_rate)
