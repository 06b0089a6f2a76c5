"""Verifiers: the embedded token/text scorer and the math-verify worker pool (incl. fuzzing)."""
import os
import random
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ada_jax.rewards.embedded import encode_answers, score_text, score_tokens, token_scorer
from ada_jax.rewards.math_verifier import (MathVerifierPool, extract_answer, last_boxed,
                                          last_number, math_verify_check)
from ada_jax.tasks.embedded import EmbeddedSource
from ada_jax.tokenizer import SentencePieceTokenizer
from tests import helpers

TOK = SentencePieceTokenizer()
SCORE = jax.jit(token_scorer(TOK))


# ---------------------------------------------------------------- embedded verifier

def _pad(rows, width, fill=0):
    out = np.full((len(rows), width), fill, np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def _token_scores(texts, answers, truncate=None):
    ids = [TOK.encode(t) for t in texts]
    lengths = np.array([len(x) if truncate is None else min(len(x), t)
                        for x, t in zip(ids, truncate or [0] * len(ids))], np.int32)
    ans_ids, ans_len = encode_answers(TOK, answers, max_len=12)
    width = max(max(map(len, ids)), 1)
    return np.asarray(SCORE(_pad(ids, width), lengths, ans_ids, ans_len)), ids, lengths


def test_reference_solutions_score_one_and_wrong_answers_zero():
    problems = list(EmbeddedSource("eval", 64, seed=3))
    good = [p.solution for p in problems]
    wrong_answer = [p.solution.replace(f"{{{p.answer}}}", f"{{{int(p.answer) + 1}}}")
                    for p in problems]
    answers = [p.answer for p in problems]
    s_good, _, _ = _token_scores(good, answers)
    s_bad, _, _ = _token_scores(wrong_answer, answers)
    assert s_good.dtype == np.float32 and s_good.shape == (64,)
    assert s_good.tolist() == [1.0] * 64 and s_bad.tolist() == [0.0] * 64
    assert [score_text(t, a) for t, a in zip(good, answers)] == [1.0] * 64


@pytest.mark.parametrize("text,answer,expected", [
    ("\\boxed{42}", "42", 1.0),
    ("\\boxed{41}\\boxed{42}", "42", 1.0),          # the last box counts
    ("\\boxed{42}\\boxed{41}", "42", 0.0),
    ("\\boxed{42", "42", 0.0),                      # unclosed
    ("\\boxed{42 }", "42", 0.0),
    ("\\boxed{042}", "42", 0.0),                    # exact match, no normalisation
    ("}\\boxed{}", "", 1.0),
    ("\\boxed{4\\boxed{42}}", "42", 1.0),
    ("42}", "42", 0.0),
    ("\\\\boxed{42}", "42", 1.0),
    ("\\boxed{42}}}", "42", 1.0),
    ("\\boxed{\\boxed{42}", "42", 1.0),
])
def test_adversarial_cases_agree(text, answer, expected):
    s, _, _ = _token_scores([text], [answer])
    assert score_text(text, answer) == expected
    assert s[0] == expected


def test_length_mask_hides_the_tail():
    text = "12+3=15\n\\boxed{15}"
    s, ids, _ = _token_scores([text, text, text], ["15"] * 3, truncate=[len(TOK.encode(text)) - 1,
                                                                       100, 3])
    assert s.tolist() == [0.0, 1.0, 0.0]


def _random_text(rng: random.Random) -> tuple[str, str]:
    """Random strings built from pieces that stress the rule: boxes, braces, digits, junk."""
    pieces = ["\\boxed{", "}", "{", "\\boxed", "\\", "\n", " ", "=", "+", "-", "*",
              "é", "x", "Compute", "Hint:"] + list("0123456789") * 3
    answer = str(rng.randrange(0, 10 ** rng.randrange(1, 5)))
    parts = [rng.choice(pieces) for _ in range(rng.randrange(0, 30))]
    if rng.random() < 0.5:  # plant the answer (sometimes off by a character) in a box
        planted = answer if rng.random() < 0.6 else answer + rng.choice(["", "0", " ", "}"])
        parts.insert(rng.randrange(0, len(parts) + 1), f"\\boxed{{{planted}}}")
    return "".join(parts), answer


def test_token_and_text_verifiers_agree_on_random_strings():
    rng = random.Random(0)
    cases = [_random_text(rng) for _ in range(3000)]
    texts, answers = zip(*cases)
    cut = [rng.randrange(0, 60) if rng.random() < 0.3 else 10**6 for _ in cases]
    s, ids, lengths = _token_scores(texts, answers, truncate=cut)
    expected = [score_text(TOK.decode(x[:n]), a) for x, n, a in zip(ids, lengths, answers)]
    assert s.tolist() == expected
    assert 0.15 < np.mean(expected) < 0.6  # both outcomes well represented


def test_score_tokens_jits_with_explicit_ids():
    fn = jax.jit(score_tokens, static_argnames=("boxed_id", "close_id"))
    ids = jnp.array([[4, 8, 5], [4, 9, 5]], jnp.int32)
    out = fn(ids, jnp.array([3, 3]), jnp.array([[8], [8]]), jnp.array([1, 1]),
             boxed_id=4, close_id=5)
    assert out.tolist() == [1.0, 0.0]


def test_token_scorer_rejects_tokenizers_without_single_box_token():
    class CharTok:
        def encode(self, text):
            return [ord(c) for c in text]
    with pytest.raises(ValueError, match="single tokens"):
        token_scorer(CharTok())


# ---------------------------------------------------------------- last_boxed

@pytest.mark.parametrize("text,expected", [
    ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("\\boxed{1} then \\boxed{2}", "2"),
    ("\\boxed{1} then \\boxed{2", None),
    ("no box", None),
    ("\\boxed{a{b{c}}d}e}", "a{b{c}}d"),
    ("\\boxed{}", ""),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_last_boxed_is_linear_on_megabyte_inputs():
    t = time.perf_counter()
    assert last_boxed("\\boxed{" * 150_000) is None
    assert last_boxed("{" * 10**6 + "\\boxed{1}") == "1"
    assert last_boxed("\\boxed{" + "{" * 500_000 + "}" * 500_000 + "}") is not None
    assert time.perf_counter() - t < 5


@pytest.mark.parametrize("text,expected", [
    ("8 + 2 = 10", "10"), ("The sum of 8 and 2 is 16.", "16"), ("51-6=45", "45"),
    ("51 - 6", "6"), ("so x = -3", "-3"), ("1,234 apples", "1234"), ("pi is 3.14.", "3.14"),
    ("7,8,9", "9"), ("twelve: \u0661\u0662", None), ("\\boxed{12} and 5", "5"), ("no digits", None),
    ("", None),
])
def test_last_number(text, expected):
    assert last_number(text) == expected


def test_extract_answer_reads_the_box_or_the_last_number():
    text = "We get \\boxed{12}, then 13"
    assert extract_answer(text, "boxed") == "12"
    assert extract_answer(text, "last_number") == "13"
    with pytest.raises(ValueError, match="last_number"):
        extract_answer(text, "first_word")
    with pytest.raises(ValueError, match="last_number"):
        MathVerifierPool(num_workers=1, extract="first_word")


def test_last_number_is_linear_on_megabyte_inputs():
    t = time.perf_counter()
    assert last_number("1," * 500_000 + "7") == "7"
    assert last_number("-" * 10**6) is None
    assert time.perf_counter() - t < 5


# ---------------------------------------------------------------- math verifier pool

# one per test process: two pytest-xdist workers must not remove each other's evidence
SENTINEL = f"/tmp/ada_jax_verifier_sentinel_{os.getpid()}"
INJECTIONS = [
    f"__import__('os').system('touch {SENTINEL}')",
    f"\\boxed{{__import__('os').system('touch {SENTINEL}')}}",
    f"\\boxed{{eval(\"__import__('os').system('touch {SENTINEL}')\")}}",
    f"\\boxed{{exec('import os; os.system(\"touch {SENTINEL}\")')}}",
    f"\\boxed{{\\text{{__import__('os').system('touch {SENTINEL}')}}}}",
    f"\\boxed{{x = __import__(\"os\").system(\"touch {SENTINEL}\")}}",
    "\\boxed{().__class__.__bases__[0].__subclasses__()}",
    f"\\boxed{{open('{SENTINEL}', 'w')}}",
]
BOMBS = [
    "\\boxed{10^{10^{10^{10}}}}", "\\boxed{9^{9^{9^{9}}}}", "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    "\\boxed{(10^{7})!}", "\\boxed{10000000!}", "\\boxed{\\sum_{n=1}^{10^{12}} n^{n}}",
    "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}", "\\boxed{" + "(" * 3000 + ")" * 3000 + "}",
    "\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}",
    "\\boxed{" + "x^{" * 400 + "1" + "}" * 400 + "}",
    "\\boxed{1" + "+1" * 400 + "}",
    "\\boxed{" + "{" * 100, "}" * 1000 + "\\boxed{", "\\boxed{\\begin{pmatrix}" + "1&" * 400 + "1\\end{pmatrix}}",
]


@pytest.fixture(scope="module")
def pool():
    if os.path.exists(SENTINEL):
        os.remove(SENTINEL)
    with MathVerifierPool(num_workers=2, timeout_s=3.0) as p:
        yield p
        print(f"\nverifier pool: {p.n_scored} scored, {p.n_timeouts} timeouts, "
              f"{p.n_crashes} crashes")
    assert not os.path.exists(SENTINEL), "model text was executed"


def test_equivalences(pool):
    cases = [
        ("The answer is \\boxed{72}.", "72", 1), ("\\boxed{0.5}", "\\frac{1}{2}", 1),
        ("\\boxed{\\frac12}", "0.5", 1), ("\\boxed{2^{1/2}}", "\\sqrt{2}", 1),
        ("\\boxed{(1, 2]}", "(1,2]", 1), ("\\boxed{1+x^2}", "x^2+1", 1),
        ("\\boxed{25\\pi}", "25\\pi", 1), ("\\boxed{8\\sqrt{2}}", "8\\sqrt{2}", 1),
        ("\\boxed{73}", "72", 0), ("\\boxed{x^2}", "x^3", 0), ("no answer", "1", 0),
        ("\\boxed{1} and finally \\boxed{2}", "1", 0), ("\\boxed{2", "2", 0),
        (b"\\boxed{7}\xff\xfe", "7", 1), ("\\boxed{7}\udcff", "7", 1),
    ]
    scores = pool.score([c for c, _, _ in cases], [g for _, g, _ in cases])
    assert scores.dtype == np.float32
    assert scores.tolist() == [float(e) for _, _, e in cases]


def test_last_number_pool_scores_stated_results():
    """The extractor for models that never box: the last number, equal by value."""
    cases = [("8 + 2 = 10", "10", 1), ("The sum of 8 and 2 is 16.", "10", 0),
             ("so the answer is 17.0", "17", 1), ("\\boxed{12}", "12", 1),
             ("12 apples, 13 pears", "12", 0), ("no number", "3", 0), ("-4", "-4", 1)]
    with MathVerifierPool(num_workers=1, timeout_s=3.0, extract="last_number") as p:
        scores = p.score([c for c, _, _ in cases], [g for _, g, _ in cases])
    assert scores.tolist() == [float(e) for _, _, e in cases]


def test_injections_and_bombs_score_zero_within_the_timeout(pool):
    texts = INJECTIONS + BOMBS
    t = time.monotonic()
    scores = pool.score(texts, ["1"] * len(texts))
    elapsed = time.monotonic() - t
    assert scores.tolist() == [0.0] * len(texts)
    # Every sample ends within its timeout (+ respawn slack): 2 workers in parallel.
    assert elapsed < len(texts) * pool.timeout_s / 2 + 30
    assert not os.path.exists(SENTINEL)
    assert pool.score(["\\boxed{3}"], ["\\frac{6}{2}"]).tolist() == [1.0]  # still healthy


def misbehave_on_marker(pred: str, gold: str, inner_timeout: int) -> bool:
    """A check that hangs (as if stuck in C code) on 'HANG' and dies on 'EXIT'."""
    if pred == "HANG":
        while True:
            time.sleep(1)
    if pred == "EXIT":
        os._exit(3)
    return pred.isdigit() and gold.isdigit() and int(pred) == int(gold)


def test_hung_or_dead_workers_are_replaced_and_score_zero():
    with MathVerifierPool(num_workers=2, timeout_s=1.0, memory_mb=0,
                          check=f"{__name__}:misbehave_on_marker") as p:
        texts = ["\\boxed{HANG}", "\\boxed{1}", "\\boxed{HANG}", "\\boxed{EXIT}", "\\boxed{2}",
                 "\\boxed{3}"]
        t = time.monotonic()
        scores = p.score(texts, ["x", "01", "x", "x", "02", "4"])  # "01": not a text match
        elapsed = time.monotonic() - t
        assert scores.tolist() == [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
        assert (p.n_timeouts, p.n_crashes) == (2, 1)
        assert elapsed < 2 * 1.0 + 60  # two timeouts + respawns (slow on a loaded machine)
        assert p.score(["\\boxed{5}"] * 4, ["05"] * 4).tolist() == [1.0] * 4


def test_idle_workers_survive_gaps_between_calls():
    """Deadlines belong to samples in flight: a call made longer than timeout_s after the last
    one neither kills nor respawns the workers that sat idle in between."""
    with MathVerifierPool(num_workers=2, timeout_s=1.0, memory_mb=0,
                          check=f"{__name__}:misbehave_on_marker") as p:
        t = time.monotonic()
        while not all(w.ready for w in p._workers) and time.monotonic() - t < 120:
            p.score(["\\boxed{1}"], ["01"])  # until both workers have started
        assert p.score(["\\boxed{1}", "\\boxed{2}"], ["01", "02"]).tolist() == [1.0, 1.0]
        pids = [w.proc.pid for w in p._workers]
        time.sleep(1.5)
        assert p.score(["\\boxed{3}"], ["03"]).tolist() == [1.0]  # one worker stays idle
        assert (p.n_timeouts, p.n_crashes) == (0, 0)
        assert [w.proc.pid for w in p._workers] == pids


def test_workers_killed_while_idle_are_respawned():
    """A worker that dies between calls (OOM killer, kill -9) is replaced before work is sent
    to it: the next score() works instead of raising BrokenPipeError."""
    with MathVerifierPool(num_workers=2, timeout_s=1.0, memory_mb=0,
                          check=f"{__name__}:misbehave_on_marker") as p:
        t = time.monotonic()
        while not all(w.ready for w in p._workers) and time.monotonic() - t < 120:
            p.score(["\\boxed{1}"], ["01"])  # until both workers have started
        for killed in ([0], [0, 1]):  # one, then both
            for n in killed:
                os.kill(p._workers[n].proc.pid, signal.SIGKILL)
                p._workers[n].proc.wait()
            assert p.score(["\\boxed{1}", "\\boxed{2}", "\\boxed{4}"],
                           ["01", "02", "3"]).tolist() == [1.0, 1.0, 0.0]
        assert (p.n_timeouts, p.n_crashes) == (0, 3)


def test_enormous_exponents_score_zero_at_once(pool):
    """`Float('1.5E999999999')` would expand 10^999999999 in C code that no signal interrupts
    (a timeout and a worker restart each): the guard refuses such literals, so they score 0
    at once; ordinary exponents still compare."""
    texts = ["\\boxed{1.5E999999999}", "\\boxed{-2.5e99999999}", "\\boxed{1.5E-999999999}",
             "\\boxed{3E1001}", "\\boxed{1.5E3}"]
    pool.score(["\\boxed{1}"] * 2, ["01"] * 2)  # both workers started
    before = (pool.n_timeouts, pool.n_crashes)
    t = time.monotonic()
    scores = pool.score(texts, ["1", "1", "0", "3", "1500"])
    elapsed = time.monotonic() - t
    print(f"\n{len(texts)} enormous-exponent answers scored in {elapsed:.2f}s")
    assert scores.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert (pool.n_timeouts, pool.n_crashes) == before
    assert elapsed < pool.timeout_s


def time_out_first_half(pred: str, gold: str, inner_timeout: int) -> bool:
    """math_verify_check in a worker whose first parse of `\\frac{1}{2}` times out, as
    math-verify's own timeout does: [] returned, or TimeoutException with raise_on_error."""
    import math_verify
    from math_verify.errors import TimeoutException
    real = math_verify.parse
    if not _SLOWED and pred != "1":  # after the worker's warm-up
        _SLOWED.append(True)

        def parse(text, *args, raise_on_error=False, **kwargs):
            if "frac{1}{2}" not in text:
                return real(text, *args, raise_on_error=raise_on_error, **kwargs)
            math_verify.parse = real  # once
            if raise_on_error:
                raise TimeoutException(f"Timeout during parsing: {text}")
            return []
        math_verify.parse = parse
    return math_verify_check(pred, gold, inner_timeout)


_SLOWED = []  # time_out_first_half has slowed its worker's parse


def test_a_timed_out_parse_is_not_cached():
    """Before: the empty parse of a timed-out gold answer was cached, and every later sample
    against that gold scored 0 in that worker."""
    with MathVerifierPool(num_workers=1, timeout_s=4.0,
                          check=f"{__name__}:time_out_first_half") as p:
        half = ["\\frac{1}{2}"]
        assert p.score(["\\boxed{0.5}"], half).tolist() == [0.0]  # timed out
        assert p.score(["\\boxed{0.5}", "\\boxed{2/4}"], half * 2).tolist() == [1.0, 1.0]


def test_power_towers_score_at_once(pool):
    """Powers above 10^1000 never reach sympy (before: each took the whole inner timeout, 1 s
    here, 2 s at the default 5 s): unequal to any number below, equal to the same text."""
    pool.score(["\\boxed{1}"] * 2, ["01"] * 2)  # both workers started
    cases = [("9^{9^{9^{9}}}", "9", 0), ("10^{10^{10}}", "1", 0), ("2^{100000}", "2", 0),
             ("x^{9^{9^{9}}}", "x", 0), ("9^{9^{9^{9}}}", "9^{9^{9^9}}", 1),
             ("9^{9^{9^{9}}}", "9^{9^{9^{8}}}", 0), ("3", "9^{9^{9^{9}}}", 0),
             ("2^{10}", "1024", 1), ("2^{2^{3}}", "256", 1)]
    before = (pool.n_timeouts, pool.n_crashes)
    t = time.monotonic()
    scores = pool.score([f"\\boxed{{{p}}}" for p, _, _ in cases], [g for _, g, _ in cases])
    elapsed = time.monotonic() - t
    print(f"\n{len(cases)} power-tower answers scored in {elapsed:.3f}s")
    assert scores.tolist() == [float(e) for _, _, e in cases]
    assert (pool.n_timeouts, pool.n_crashes) == before
    assert elapsed < 1.0


_fragments = st.sampled_from(
    ["\\boxed{", "}", "{", "\\frac{", "^{", "10", "9", "!", "\\sqrt{", "(", ")", "\\left(",
     "\\right)", "x", "=", "+", "-", "\\", "\\begin{pmatrix}", "\\end{pmatrix}", "&", "\\\\",
     "\\infty", "\\pi", "\\text{", "__import__('os')", ".system(", "eval(", "'", '"', "\x00",
     "\udcff", "é", "\u202e", " "] + INJECTIONS[:2])
_adversarial = st.one_of(
    st.lists(_fragments, max_size=40).map("".join),
    st.text(max_size=200),
    st.builds(lambda d, s: "\\boxed{" + "{" * d + s + "}" * d + "}",
              st.integers(0, 3000), st.text(max_size=20)),
    st.builds(lambda k: "\\boxed{" + "10^{" * k + "10" + "}" * k + "}", st.integers(1, 60)),
)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(texts=st.lists(_adversarial, min_size=1, max_size=4), gold=st.sampled_from(["1", "x"]))
def test_fuzz_fast(pool, texts, gold):
    t = time.monotonic()
    scores = pool.score(texts, [gold] * len(texts))
    assert scores.shape == (len(texts),) and set(scores.tolist()) <= {0.0, 1.0}
    assert time.monotonic() - t < len(texts) * pool.timeout_s + 30
    assert not os.path.exists(SENTINEL)


def test_megabyte_and_non_utf8_outputs(pool):
    big = "x" * 10**6 + "\\boxed{5}"
    texts = [big, "\\boxed{" + "1" * 10**6 + "}", random.Random(0).randbytes(10**6), b"\xc3\x28\\boxed{5}"]
    t = time.monotonic()
    assert pool.score(texts, ["5"] * 4).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert time.monotonic() - t < 30


@pytest.mark.slow
@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(texts=st.lists(st.one_of(_adversarial, st.sampled_from(BOMBS + INJECTIONS)),
                      min_size=1, max_size=8),
       gold=st.sampled_from(["1", "x", "\\frac{1}{2}", "10^{10}"]))
def test_fuzz_slow(pool, texts, gold):
    t = time.monotonic()
    scores = pool.score(texts, [gold] * len(texts))
    assert set(scores.tolist()) <= {0.0, 1.0}
    assert time.monotonic() - t < len(texts) * pool.timeout_s + 30
    assert not os.path.exists(SENTINEL)


@pytest.mark.slow
def test_megabyte_answers_reach_the_workers_and_time_out_cleanly():
    with MathVerifierPool(num_workers=2, timeout_s=2.0, max_answer_chars=10**7) as p:
        texts = ["\\boxed{" + "1+" * 500_000 + "1}", "\\boxed{" + "{" * 300_000 + "}" * 300_000
                 + "}", "\\boxed{7}"]
        t = time.monotonic()
        assert p.score(texts, ["1", "1", "7"]).tolist() == [0.0, 0.0, 1.0]
        assert time.monotonic() - t < 2 * 2.0 + 60


GUARD_REFUSES = [  # sympify(text) under the guard: each must raise, none may touch FLAG
    "__import__('pathlib').Path(FLAG).touch()",
    "Symbol('x').__class__.__base__.__subclasses__()",
    "Integer(1).__class__",
    "Symbol(chr(70))",
    "Symbol('x', commutative=__import__('pathlib').Path(FLAG).touch())",
    "Function('f')(Symbol('x'))",
    "Integer(1) + Integer(2)",
    "[Integer(1)]",
    "lambda: 0",
    "exec('1')",
    "Float('1.5E999999999')",  # enormous exponents: minutes in C code
    "Float('1.5e+0999999999')",
    "Float('1.5', 999999999)",
]


def test_eval_guard_lets_only_literals_through(tmp_path):
    """In a worker process sympy's eval is replaced: literals and sympy's own lazily imported
    modules (simplify() pulls in sympy.physics.units) work, code does not run."""
    import sys
    flag = tmp_path / "ran"
    code = (
        "from ada_jax.rewards.math_verifier import math_verify_check\n"
        "import sys, sympy\n"
        "assert math_verify_check('1', '1', 5)\n"
        "assert 'sympy.physics.units' in sys.modules\n"
        "assert math_verify_check('(x+1)^2', 'x^2+2x+1', 5)\n"  # needs simplify()
        "assert sympy.Number('12') == 12 and sympy.Number('1.5') == 1.5\n"
        "assert sympy.sympify('1.5E3') == sympy.Float(1500) and sympy.Number('2.5e-3') > 0\n"
        "assert sympy.sympify('yotta') == sympy.Symbol('yotta') and sympy.sympify('E') is sympy.E\n"
        f"for text in {GUARD_REFUSES!r}:\n"
        f"    text = text.replace('FLAG', {repr(str(flag))!r})\n"
        "    try:\n        sympy.sympify(text)\n"
        "    except ValueError as e:\n        assert 'refuses' in str(e), (text, e)\n"
        "    else:\n        raise SystemExit(f'sympify evaluated {text}')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    helpers.run([sys.executable, "-c", code], check=True, cwd=root)
    assert not flag.exists()
    # Without the pre-imports, sympy's lazy import of sympy.physics.units runs under the guard.
    code = ("import ada_jax.rewards.math_verifier as mv\n"
            "mv._PRELOAD = ()\n"
            "assert mv.math_verify_check('(x+1)^2', 'x^2+2x+1', 5)\n")
    helpers.run([sys.executable, "-c", code], check=True, cwd=root)
