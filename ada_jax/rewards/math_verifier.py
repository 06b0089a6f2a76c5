"""Math answer verifier: the response's answer (its last brace-matched `\\boxed{}`, or with
`extract="last_number"` its last number) checked against the gold answer with the `math-verify`
library, in a pool of worker processes with a per-sample timeout.

Why a pool of our own: math-verify (sympy underneath) can take unbounded time or memory on
adversarial answers. Each worker handles one sample at a time; one that runs past `timeout_s`
is killed and respawned and the sample scores 0. Workers cap their address space, so huge
numbers fail with MemoryError instead of exhausting the host. Workers are fresh interpreters
that import only this module, never forks of the (multithreaded JAX) trainer, and never re-run
the trainer's main script.

Safety: answers are parsed as LaTeX only (no `ExprExtractionConfig`, whose sympy `parse_expr`
calls `eval`), and sympy's `eval_expr` is replaced by a guard that evaluates only literal
constructor calls (`Integer (12 )`, `Float ('1.5E3' )`, `Symbol ('x' )`) and names of sympy
constants, so no model text is evaluated as Python. Modules sympy imports lazily (simplify()
imports `sympy.physics.units`, which builds its prefixes with `sympify`) are imported before the
guard goes in, so no import runs under it.
"""
import ast
import functools
import importlib
import math
import os
import re
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Sequence

import numpy as np

BOXED = "\\boxed{"
_BRACES = re.compile(r"[{}]")
DEFAULT_CHECK = "ada_jax.rewards.math_verifier:math_verify_check"


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`, braces matched; None if absent or never closed."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    start += len(BOXED)
    end = _closing(text, start)
    return None if end is None else text[start:end]


# A decimal number not glued to a preceding digit or point ("51-6" reads 51 and 6, not -6;
# "v1.2" reads 1.2), thousands separators allowed: "-3", "1,234", "2.5". ASCII digits only.
_NUMBER = re.compile(r"(?<![0-9.])-?[0-9]+(?:,[0-9]{3}(?![0-9]))*(?:\.[0-9]+)?")
EXTRACTORS = ("boxed", "last_number")


def last_number(text: str) -> str | None:
    """The last number written in `text`, thousands separators dropped; None if none.
    For models that state a result ("8 + 2 = 10") but never box it."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def extract_answer(text: str, extract: str = "boxed") -> str | None:
    """The answer a response gives: its last `\\boxed{}` ("boxed") or last number
    ("last_number"); None when it gives none."""
    if extract == "boxed":
        return last_boxed(text)
    if extract == "last_number":
        return last_number(text)
    raise ValueError(f"extract must be one of {EXTRACTORS}, got {extract!r}")


def _closing(text: str, start: int) -> int | None:
    """Index of the `}` that closes a group whose content begins at `start`; None if none."""
    depth = 1
    for m in _BRACES.finditer(text, start):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return m.start()
    return None


# sympy's parse_expr turns text into Python code and evals it. latex2sympy sends it number tokens
# (`Float ('1.5E3' )`), sympy's own modules send names (`sympify('yotta')` -> `Symbol ('yotta' )`,
# `sympify('E')` -> `E `). The guard evaluates only a name bound to a sympy object or a call of one
# of these constructors with literal arguments: no attribute access, subscripts, operators or
# other calls, so nothing runs.
_CONSTRUCTORS = ("Integer", "Float", "Rational", "Symbol")
# Number literals with a decimal exponent beyond this (`Float ('1.5E999999999' )`) are refused:
# mpmath expands the exponent into an exact power of ten, minutes of work that no timeout
# signal interrupts. 10^1000 is far past any answer a math task checks.
_MAX_EXPONENT = 1000
_EXPONENT = re.compile(r"[eE]\s*([+-]?)\s*0*(\d+)")
_PRELOAD = ("sympy.physics.units", "sympy.combinatorics", "sympy.tensor.tensor",
            "sympy.sets.handlers.functions", "sympy.sets.handlers.issubset", "sympy.sets.setexpr",
            "sympy.assumptions.wrapper")  # imported lazily by simplify() and set comparisons
_sympy_eval_expr = None


def _is_literal(code, local_dict: dict, global_dict: dict) -> bool:
    """Is `code` (built by parse_expr) a sympy object's name or a literal constructor call?"""
    import sympy
    if not isinstance(code, str):
        return False  # parse_expr(evaluate=False) passes compiled code: refuse
    try:
        node = ast.parse(code.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False

    def lookup(name):
        return local_dict[name] if name in local_dict else global_dict.get(name)

    if isinstance(node, ast.Name):
        return isinstance(lookup(node.id), sympy.Basic)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords
            and node.func.id in _CONSTRUCTORS
            and lookup(node.func.id) is getattr(sympy, node.func.id)
            and (node.func.id != "Float" or len(node.args) == 1)  # no precision argument
            and all(isinstance(a, ast.Constant) and _small_literal(a.value) for a in node.args))


def _small_literal(value) -> bool:
    """An int, or a str whose decimal exponents (`1.5E3`) are at most _MAX_EXPONENT in size."""
    if isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, str) and all(
        len(m.group(2)) <= 4 and int(m.group(2)) <= _MAX_EXPONENT
        for m in _EXPONENT.finditer(value))


def _literals_only_eval(code, local_dict, global_dict):
    if not _is_literal(code, local_dict or {}, global_dict or {}):
        raise ValueError("the verifier refuses to eval anything but a literal")
    return _sympy_eval_expr(code, local_dict, global_dict)


def _install_guard() -> None:
    """Import what sympy would import lazily, then replace sympy's eval_expr with the guard."""
    global _sympy_eval_expr
    if _sympy_eval_expr is None:
        for module in _PRELOAD:
            importlib.import_module(module)
        import sympy.parsing.sympy_parser as sympy_parser
        _sympy_eval_expr, sympy_parser.eval_expr = sympy_parser.eval_expr, _literals_only_eval


@functools.lru_cache(maxsize=1024)
def _parse_boxed(content: str, inner_timeout: int):
    """math-verify's parse of `\\boxed{content}`. A parse that times out (math-verify's own
    signal), fails or finds nothing raises instead of returning [] (the sample scores 0), so the
    cache never keeps it: one slow moment of a worker must not make a gold answer score 0 for
    every later sample."""
    from math_verify import LatexExtractionConfig, parse
    parsed = parse(BOXED + content + "}", extraction_config=[LatexExtractionConfig()],
                   parsing_timeout=inner_timeout, raise_on_error=True)
    if not parsed:
        raise ValueError(f"math-verify found no answer in {content!r}")
    return parsed


# A number raised to a power (`9^{9^{9^{9}}}`, `2^{100000}`): the exponent is one digit or a
# brace group. sympy computes such powers exactly, seconds to hours for a huge one.
_POWER = re.compile(r"(\d+(?:\.\d+)?)\s*\^\s*")
_TOWER = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:\^\s*(?:(\d)|\{(.*)\}))?\s*", re.S)


def _tower_log10(text: str) -> float | None:
    """log10 of `text` if it is a number or a power tower of numbers (`9^{9^{9}}`), else None."""
    m = _TOWER.fullmatch(text)
    if m is None:
        return None
    base = float(m.group(1))
    if m.group(2) is None and m.group(3) is None:
        return math.log10(base) if base > 0 else -math.inf
    exponent = _tower_log10(m.group(2) or m.group(3))
    if exponent is None or base <= 1:
        return None if exponent is None else 0.0
    return math.inf if exponent > 300 else 10**exponent * math.log10(base)


def _huge_power(content: str) -> bool:
    """Does `content` hold a power of numbers above 10^_MAX_EXPONENT (`9^{9^{9^{9}}}`)?"""
    for m in _POWER.finditer(content):
        end = m.end() + 1
        if content[m.end():end] == "{":
            end = _closing(content, end)
            if end is None:
                return False
            end += 1
        log10 = _tower_log10(content[m.start():end])
        if log10 is not None and log10 > _MAX_EXPONENT:
            return True
    return False


def _squash(content: str) -> str:
    """`content` without spaces and with one-character brace groups unwrapped (`^{9}` = `^9`)."""
    return re.sub(r"\{(.)\}", r"\1", re.sub(r"\s+", "", content))


def math_verify_check(pred: str, gold: str, inner_timeout: int) -> bool:
    """Is the boxed content `pred` equivalent to `gold`? (runs inside a worker)
    A power of numbers above 10^_MAX_EXPONENT never reaches sympy: a huge answer equals only
    the same huge text (a huge number is no smaller one; two forms of one huge number are not
    told apart)."""
    from math_verify import verify
    huge = _huge_power(pred), _huge_power(gold)
    if any(huge):
        return all(huge) and _squash(pred) == _squash(gold)
    _install_guard()
    return verify(_parse_boxed(gold, inner_timeout), _parse_boxed(pred, inner_timeout),
                  timeout_seconds=inner_timeout) is True


_WORKER = ("import sys; from ada_jax.rewards.math_verifier import _worker_main; "
           "_worker_main(*sys.argv[1:])")


def _worker_main(fd: str, memory_mb: str, inner_timeout: str, check_path: str) -> None:
    """Worker loop: receive (pred, gold), send back 0.0 / 1.0; exits when the pool goes."""
    fd, memory_mb, inner_timeout = int(fd), int(memory_mb), int(inner_timeout)
    import logging
    import resource
    logging.disable(logging.CRITICAL)  # math-verify logs whole (possibly 1 MB) inputs on timeouts
    if memory_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
    module, name = check_path.split(":")
    check = getattr(importlib.import_module(module), name)
    try:
        check("1", "1", inner_timeout)  # warm up imports before declaring ready
    except BaseException:  # its first parse timed out (a loaded host): warmed up all the same
        pass
    conn = Connection(fd)
    conn.send("ready")
    while True:
        try:
            pred, gold = conn.recv()
        except (EOFError, OSError):
            return
        try:
            score = 1.0 if check(pred, gold, inner_timeout) else 0.0
        except BaseException:  # MemoryError, RecursionError, sympy internals: all score 0
            score = 0.0
        conn.send(score)


class _Worker:
    """One worker process and its socket; `task` is the index of the sample in flight.

    `deadline` bounds the work in flight (start-up, then each sample) and is inf while the worker
    is idle: time between `score()` calls is not the worker's.
    """

    def __init__(self, args: list[str], start_timeout_s: float):
        parent, child = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(child.fileno()), *args],
            pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL)
        child.close()
        self.conn = Connection(parent.detach())
        self.ready, self.task = False, None
        self.deadline = time.monotonic() + start_timeout_s

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.conn.close()


class MathVerifierPool:
    """Scores completions against gold answers: `score(completions, answers) -> float32[N]`.

    num_workers processes (2 by default) each verify one sample at a time. A sample whose
    verification exceeds timeout_s scores 0, and its worker is killed and respawned; a worker
    found dead (killed while idle, or dying mid-sample) is respawned too.
    Completions without an answer (`extract`: a closed `\\boxed{}`, or with "last_number" a
    number), or with more than max_answer_chars in it, score 0 without reaching a worker; an
    answer identical to the gold scores 1 at once.
    Bytes are decoded as UTF-8 with replacement.
    `check` ("module:function", (pred, gold, inner_timeout) -> bool) replaces math-verify.
    Counters: n_scored, n_timeouts, n_crashes.
    """

    @classmethod
    def from_config(cls, config) -> "MathVerifierPool":
        """config.task.verifier_workers, .verifier_timeout (seconds) and .answer (the
        extractor)."""
        return cls(num_workers=config.task.verifier_workers,
                   timeout_s=config.task.verifier_timeout, extract=config.task.answer)

    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0, memory_mb: int = 2048,
                 max_answer_chars: int = 1000, start_timeout_s: float = 120.0,
                 check: str = DEFAULT_CHECK, extract: str = "boxed"):
        if extract not in EXTRACTORS:
            raise ValueError(f"extract must be one of {EXTRACTORS}, got {extract!r}")
        if num_workers < 1 or timeout_s <= 0:
            raise ValueError(f"need num_workers >= 1 and timeout_s > 0, got {num_workers}, "
                             f"{timeout_s}")
        self.timeout_s, self.max_answer_chars = timeout_s, max_answer_chars
        self.extract = extract
        self.start_timeout_s = start_timeout_s
        # math-verify's own signal-based timeouts end most slow cases before we must kill.
        self._args = [str(memory_mb), str(max(1, int(timeout_s / 2))), check]
        self._workers = [_Worker(self._args, start_timeout_s) for _ in range(num_workers)]
        self.n_scored = self.n_timeouts = self.n_crashes = 0
        self._start_kills = 0  # workers killed by a signal before they were ready, in a row

    def score(self, completions: Sequence[str | bytes], answers: Sequence[str]) -> np.ndarray:
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
        if not self._workers:
            raise RuntimeError("MathVerifierPool is closed")
        scores = np.zeros(len(completions), np.float32)
        todo = []
        for i, (text, gold) in enumerate(zip(completions, answers)):
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            pred, gold = extract_answer(text, self.extract), str(gold)
            if pred is not None and pred.strip() == gold.strip() and gold.strip():
                scores[i] = 1.0  # identical text: no need to ask math-verify
            elif pred is not None and len(pred) <= self.max_answer_chars:
                todo.append((i, pred, gold))
        todo.reverse()  # pop() from the end keeps submission order
        if todo:
            self._respawn_dead()
        while todo or any(w.task is not None for w in self._workers):
            now = time.monotonic()
            for w in self._workers:
                if w.ready and w.task is None and todo:
                    i, pred, gold = todo.pop()
                    try:
                        w.conn.send((pred, gold))
                    except OSError:  # died since it was last seen: _poll replaces it
                        todo.append((i, pred, gold))
                        continue
                    w.task, w.deadline = i, now + self.timeout_s
            busy = [w for w in self._workers if w.task is not None or not w.ready]
            if busy:  # (none: every idle worker refused its send, so _poll replaces them)
                wait([w.conn for w in busy],
                     timeout=max(0.0, min(w.deadline for w in busy) - now))
            for n, w in enumerate(self._workers):
                if not self._poll(w, scores):
                    self._workers[n] = _Worker(self._args, self.start_timeout_s)
        self.n_scored += len(completions)
        return scores

    def _respawn_dead(self) -> None:
        """Replace workers that died while idle (OOM killer, kill -9): a send to one would
        raise BrokenPipeError. Counted in n_crashes."""
        for n, w in enumerate(self._workers):
            if w.proc.poll() is not None and (w.ready or self._killed_at_start(w)):
                w.kill()
                self.n_crashes += 1
                self._workers[n] = _Worker(self._args, self.start_timeout_s)

    def _killed_at_start(self, w: _Worker) -> bool:
        """Did w die of a signal (kill -9, OOM killer) before it was ready? Respawned, a few
        times in a row at most; a start that fails by itself (exit code > 0) raises."""
        self._start_kills += 1
        return w.proc.returncode < 0 and self._start_kills <= 2 * len(self._workers)

    def _poll(self, w: _Worker, scores: np.ndarray) -> bool:
        """Take w's message if any. False (after killing it) if w died or is past its deadline."""
        try:
            if w.conn.poll():
                msg = w.conn.recv()
                if msg == "ready":
                    w.ready, self._start_kills = True, 0
                else:
                    scores[w.task], w.task = msg, None
                w.deadline = math.inf  # idle until the next dispatch sets one
                return True
        except (EOFError, OSError):
            pass  # died; handled below
        alive = w.proc.poll() is None
        if alive and time.monotonic() < w.deadline:
            return True
        w.kill()
        if not w.ready and (alive or not self._killed_at_start(w)):
            self.close()
            raise RuntimeError(f"math verifier worker failed to start (exit code "
                               f"{w.proc.returncode}, start timeout {self.start_timeout_s}s)")
        self.n_timeouts += alive
        self.n_crashes += not alive
        if w.task is not None:
            scores[w.task] = 0.0
        return False

    def close(self) -> None:
        for w in self._workers:
            w.kill()
        self._workers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
