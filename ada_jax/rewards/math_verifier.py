"""Math answer verifier: last brace-matched `\\boxed{}` checked against the gold answer with the
`math-verify` library, in a pool of worker processes with a per-sample timeout.

Why a pool of our own: math-verify (sympy underneath) can take unbounded time or memory on
adversarial answers (`10^{10^{10^{10}}}`, deep nesting). Each worker handles one sample at a
time; one that runs past `timeout_s` is killed and respawned and the sample scores 0. Workers
cap their address space, so huge numbers fail with MemoryError instead of swapping.

Safety: answers are parsed as LaTeX only (no `ExprExtractionConfig`, whose sympy `parse_expr`
calls `eval`), and each worker disables sympy's `eval_expr` as a second guard, so no model
text is ever evaluated as Python.
"""
import functools
import multiprocessing
import multiprocessing.connection
import re
import time
from typing import Sequence

import numpy as np

BOXED = "\\boxed{"
_BRACES = re.compile(r"[{}]")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`, braces matched; None if absent or never closed."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    start += len(BOXED)
    depth = 1
    for m in _BRACES.finditer(text, start):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return text[start:m.start()]
    return None


def _refuse_eval(*args, **kwargs):
    raise ValueError("eval of text is disabled in the verifier")


def _worker(conn, memory_mb: int, inner_timeout: int) -> None:
    """Worker loop: receive (pred, gold) content pairs, send back 0.0 / 1.0."""
    import resource
    if memory_mb > 0:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import sympy.parsing.sympy_parser as sympy_parser
    from math_verify import LatexExtractionConfig, parse, verify
    sympy_parser.eval_expr = _refuse_eval
    latex = [LatexExtractionConfig()]

    @functools.lru_cache(maxsize=1024)
    def parse_boxed(content: str):
        return parse(BOXED + content + "}", extraction_config=latex,
                     parsing_timeout=inner_timeout)

    conn.send("ready")
    while True:
        try:
            pred, gold = conn.recv()
        except (EOFError, OSError):
            return
        try:
            ok = verify(parse_boxed(gold), parse_boxed(pred), timeout_seconds=inner_timeout)
            score = 1.0 if ok is True else 0.0
        except BaseException:  # MemoryError, RecursionError, sympy internals: all score 0
            score = 0.0
        conn.send(score)


class _Worker:
    def __init__(self, ctx, memory_mb: int, inner_timeout: int):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, memory_mb, inner_timeout),
                                daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.task: int | None = None  # index of the sample in flight
        self.deadline = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


class MathVerifierPool:
    """Scores completions against gold answers; `score` returns float32[N] of 0/1.

    num_workers processes (2 by default) each verify one sample at a time. A sample whose
    verification exceeds timeout_s scores 0, and its worker is killed and respawned.
    Completions without a closed `\\boxed{}`, or with more than max_answer_chars inside it,
    score 0 without reaching a worker. Counters: n_scored, n_timeouts, n_crashes.
    """

    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0, memory_mb: int = 2048,
                 max_answer_chars: int = 1000, start_timeout_s: float = 120.0):
        self._ctx = multiprocessing.get_context("forkserver")
        # Forked workers start with math-verify already imported (cheap respawns).
        self._ctx.set_forkserver_preload(["ada_jax.rewards.math_verifier", "math_verify"])
        self.timeout_s, self.max_answer_chars = timeout_s, max_answer_chars
        self.start_timeout_s = start_timeout_s
        self._spawn_args = (memory_mb, max(1, int(timeout_s / 3)))
        self._workers = [self._spawn() for _ in range(num_workers)]
        self.n_scored = self.n_timeouts = self.n_crashes = 0

    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, *self._spawn_args)
        worker.deadline = time.monotonic() + self.start_timeout_s
        return worker

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._workers[self._workers.index(worker)] = self._spawn()

    def score(self, completions: Sequence[str | bytes], answers: Sequence[str]) -> np.ndarray:
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
        scores = np.zeros(len(completions), np.float32)
        todo = []
        for i, (text, gold) in enumerate(zip(completions, answers)):
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            pred = last_boxed(text)
            if pred is not None and len(pred) <= self.max_answer_chars:
                todo.append((i, pred, gold))
        todo.reverse()  # pop() from the end keeps submission order
        while todo or any(w.task is not None for w in self._workers):
            now = time.monotonic()
            for w in self._workers:
                if w.ready and w.task is None and todo:
                    i, pred, gold = todo.pop()
                    w.conn.send((pred, gold))
                    w.task, w.deadline = i, now + self.timeout_s
            waiting = [w for w in self._workers if w.task is not None or not w.ready]
            wait_s = max(0.0, min(w.deadline for w in waiting) - now)
            handles = [w.conn for w in waiting] + [w.proc.sentinel for w in waiting]
            multiprocessing.connection.wait(handles, timeout=wait_s)
            for w in list(self._workers):
                self._poll(w, scores)
        self.n_scored += len(completions)
        return scores

    def _poll(self, w: _Worker, scores: np.ndarray) -> None:
        """Collect w's message if any; kill and respawn it if it died or ran past its deadline."""
        try:
            if w.conn.poll():
                msg = w.conn.recv()
                if msg == "ready":
                    w.ready = True
                else:
                    scores[w.task] = msg
                    w.task = None
                return
        except (EOFError, OSError):
            pass  # died: handled below
        if w.proc.is_alive() and time.monotonic() < w.deadline:
            return
        if not w.ready:
            w.kill()
            raise RuntimeError(f"math verifier worker failed to start (exit code "
                               f"{w.proc.exitcode}, start timeout {self.start_timeout_s}s)")
        if w.proc.is_alive():
            self.n_timeouts += 1
        else:
            self.n_crashes += 1
        if w.task is not None:
            scores[w.task] = 0.0
        self._replace(w)

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
