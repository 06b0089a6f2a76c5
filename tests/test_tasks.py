"""The embedded task: determinism, disjoint splits, correct solutions, ladder, lengths, hints."""
import collections
import re

import numpy as np
import pytest

from ada_jax.tasks import load_split
from ada_jax.tasks.embedded import LEVELS, PREFIX, EmbeddedSource, hasty_solution, is_careful
from ada_jax.tasks.problem import Problem, hint, problem_id, split_of
from ada_jax.tokenizer import SentencePieceTokenizer, prompt_ids, render_prompt
from configs.base import get_config


def _evaluate(question: str) -> tuple[list[int], list[str]]:
    """Values and operations of a question, evaluated left to right (independent re-derivation)."""
    body = question[len(PREFIX):]
    tokens = re.findall(r"\d+|[+\-*]", body)
    values, ops, value = [int(tokens[0])], [], int(tokens[0])
    for op, x in zip(tokens[1::2], map(int, tokens[2::2])):
        value = value + x if op == "+" else value - x if op == "-" else value * x
        values.append(value)
        ops.append(op)
    return values, ops


def test_deterministic_and_seeded():
    a = list(EmbeddedSource("train", 50, seed=7))
    assert a == list(EmbeddedSource("train", 50, seed=7))
    assert a != list(EmbeddedSource("train", 50, seed=8))
    assert EmbeddedSource("train", 50, seed=7)[17] == a[17]  # random access == iteration


def test_golden_problem():
    p = EmbeddedSource("train", 8, seed=0)[3]
    assert p.question == "Compute left to right: 9+0-4"
    assert p.solution == "9+0=9\n9-4=5\n\\boxed{5}"
    assert (p.answer, p.level, p.id) == ("5", 4, 391158035818600900)
    assert problem_id("What is 1+1?") == 6479696108400038509


def test_train_and_eval_are_disjoint():
    c = get_config("task=embedded")
    train = {p.question for p in load_split(c, "train")}
    evals = [p for p in load_split(c, "eval")]
    assert len(train) > 0.6 * c.task.train_size and len(evals) == c.task.eval_size  # L1-4 repeat
    assert not train & {p.question for p in evals}
    assert all(split_of(q) == "train" for q in train)
    assert all(split_of(p.question) == "eval" and p.id % 8 == 0 for p in evals)


def test_solutions_are_correct_and_levels_follow_the_ladder():
    source = EmbeddedSource("train", 800, seed=1)
    counts = collections.Counter()
    for p in source:
        spec = LEVELS[p.level]
        values, ops = _evaluate(p.question)
        assert len(ops) == spec.steps and set(ops) <= set(spec.ops)
        assert all(0 <= v < spec.bound for v in values)
        lines = p.solution.split("\n")
        assert lines[-1] == f"\\boxed{{{p.answer}}}" and p.answer == str(values[-1])
        for line, a, b, op in zip(lines, values, values[1:], ops):
            assert line.startswith(f"{a}{op}") and line.endswith(f"={b}")
        counts[p.level] += 1
    assert set(counts.values()) == {100}  # stratified: every level equally often


def test_levels_get_harder():
    """Proxy for difficulty: result digits the model must compute (identity lines are copies)."""
    def work(level):
        ps = list(EmbeddedSource("train", 300, seed=2, min_level=level, max_level=level))
        digits = 0
        for p in ps:
            values, ops = _evaluate(p.question)
            digits += sum(len(str(b)) for a, b in zip(values, values[1:]) if a != b)
        return digits / len(ps)
    costs = [work(level) for level in sorted(LEVELS)]
    assert costs[0] == costs[1] == 0 and all(a < b for a, b in zip(costs[1:], costs[2:]))


def test_token_lengths_fit_the_default_budget():
    """prompt (BOS + question) <= max_prompt_len and solution + EOS <= max_new_tokens; a
    strength-3 hint makes prompts up to 100 tokens (docs/data.md)."""
    c, tok = get_config("task=embedded"), SentencePieceTokenizer()
    prompt_len = solution_len = hinted_len = 0
    for p in EmbeddedSource("train", 2000, seed=4):
        prompt_len = max(prompt_len, len(prompt_ids(tok, render_prompt(p.question, "embedded"))))
        hinted = render_prompt(p.question, "embedded", hint(p, 3))
        hinted_len = max(hinted_len, len(prompt_ids(tok, hinted)))
        solution_len = max(solution_len, len(tok.encode(p.solution)) + 1)
    assert prompt_len <= c.sampling.max_prompt_len
    assert solution_len <= c.sampling.max_new_tokens
    assert prompt_len <= 38 and solution_len <= 82 and hinted_len <= 100


def test_hints_reveal_more_with_strength_and_never_the_answer():
    for p in EmbeddedSource("train", 80, seed=6, min_level=4):
        hints = [hint(p, s) for s in (1, 2, 3)]
        lines = p.solution.split("\n")
        for h in hints:
            assert p.solution.startswith(h) and "\\boxed" not in h
            assert len(h.split("\n")) < len(lines) - 1  # the last step stays hidden
        assert len(hints[0]) <= len(hints[1]) <= len(hints[2]) and hints[2]
    with pytest.raises(ValueError):
        hint(p, 4)


def test_hint_on_prose_solutions():
    p = Problem(id=1, question="q", answer="7", solution=(
        "First we add. Then we subtract. Then we divide. Finally the answer is $\\boxed{7}$."))
    assert hint(p, 1) == "First we add."
    assert hint(p, 3) == "First we add.\nThen we subtract."
    assert hint(Problem(id=1, question="q", answer="7"), 2) == ""


def test_level_range_and_errors():
    ps = list(EmbeddedSource("eval", 30, seed=0, min_level=3, max_level=5))
    assert {p.level for p in ps} == {3, 4, 5}
    with pytest.raises(ValueError):
        EmbeddedSource("eval", 10, min_level=0)
    with pytest.raises(ValueError):
        EmbeddedSource("test", 10)
    with pytest.raises(IndexError):
        EmbeddedSource("eval", 10)[10]


def test_solution_styles_and_their_detection():
    """Careful = the worked lines (Problem.solution), hasty = the boxed answer at once;
    is_careful tells them apart on completions, whatever follows the box."""
    for p in EmbeddedSource("train", 64, seed=9, min_level=3, max_level=6):
        assert hasty_solution(p) == f"\\boxed{{{p.answer}}}"
        assert is_careful(p.solution) and not is_careful(hasty_solution(p))
    assert is_careful("4+3=7\n")  # cut before the box: still the careful style
    assert not is_careful("\\boxed{7}\n4+3=7")  # working after the answer does not count
    assert not is_careful("") and not is_careful("7")


def test_sft_mixes_the_styles_and_stops_at_sft_max_level():
    from ada_jax.sft import sft_rows, sft_task
    c, tok = get_config("task=embedded"), SentencePieceTokenizer()
    assert (c.sft.careful_share, c.sft.max_level) == (0.3, 6)
    sft_source = load_split(sft_task(c), "train")
    assert {sft_source[i].level for i in range(80)} == set(range(1, 7))
    rl_source = load_split(c, "train")
    assert {rl_source[i].level for i in range(80)} == set(range(1, 9))  # RL keeps 7-8
    problems = [sft_source[i] for i in range(2, 6)]  # levels 3..6
    toks, _, loss = sft_rows(tok, problems, "embedded", 160,
                             targets=[p.solution if careful else hasty_solution(p) for p, careful
                                      in zip(problems, [True, False, True, False])])
    targets = [tok.decode(t[m].tolist()).replace("</s>", "") for t, m in zip(toks, loss)]
    assert targets == [problems[0].solution, hasty_solution(problems[1]),
                       problems[2].solution, hasty_solution(problems[3])]
