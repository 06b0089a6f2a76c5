"""Deterministic, resumable batches of problems for training.

Epoch e visits the source in the order of a permutation drawn from (seed, e); batches run on
across epoch boundaries, so every batch is full. The whole position is two ints, `state()`,
which goes into checkpoints; `restore(state)` continues exactly where it stopped.

Per-host data: on several processes every process follows the same global order (a
permutation of indices, cheap) but reads only its `rows` of each global batch, so the
processes' problems are disjoint and together form the batch a single process would read.
"""
from typing import Sequence

import numpy as np

from ada_jax.tasks.problem import Problem


class PromptIterator:
    """Endless iterator over a random-access source: each call returns rows [start, stop) of
    the next global batch of `batch_size` Problems (default: all of it), reading only those."""

    def __init__(self, source: Sequence[Problem], batch_size: int, seed: int = 0,
                 rows: tuple[int, int] | None = None):
        if len(source) == 0:
            raise ValueError("PromptIterator: the source has no problems")
        if batch_size <= 0:
            raise ValueError(f"PromptIterator: batch_size must be positive, got {batch_size}")
        start, stop = (0, batch_size) if rows is None else (int(rows[0]), int(rows[1]))
        if not 0 <= start < stop <= batch_size:
            raise ValueError(f"PromptIterator: rows {rows} are not a slice of a batch of "
                             f"{batch_size}")
        self.source, self.batch_size, self.seed = source, batch_size, seed
        self.rows = (start, stop)
        self.epoch = self.position = 0
        self._order_epoch, self._order = -1, None

    def state(self) -> dict:
        """This process's state: the global position and the rows it reads."""
        return {"epoch": self.epoch, "position": self.position, "rows": list(self.rows)}

    def restore(self, state: dict | list) -> None:
        """Continue from a `state()`, or from the list of every process's states that a
        multi-process checkpoint holds (they share one global position, which is checked).
        The rows read stay this run's: the global order does not depend on the split."""
        states = state if isinstance(state, list) else [state]
        try:
            positions = {(int(s["epoch"]), int(s["position"])) for s in states}
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"PromptIterator.restore: bad state {state}") from None
        if len(positions) != 1:
            raise ValueError(f"PromptIterator.restore: the processes saved different positions "
                             f"{sorted(positions)}")
        epoch, position = positions.pop()
        if epoch < 0 or not 0 <= position < len(self.source):
            raise ValueError(f"PromptIterator.restore: bad state {state} for a source of "
                             f"{len(self.source)} problems")
        self.epoch, self.position = epoch, position

    def _permutation(self) -> np.ndarray:
        if self._order_epoch != self.epoch:
            rng = np.random.default_rng([self.seed, self.epoch])
            self._order, self._order_epoch = rng.permutation(len(self.source)), self.epoch
        return self._order

    def __iter__(self):
        return self

    def __next__(self) -> list[Problem]:
        batch: list[int] = []  # source indices of the global batch
        while len(batch) < self.batch_size:
            order = self._permutation()
            take = order[self.position:self.position + self.batch_size - len(batch)]
            batch += take.tolist()
            self.position += len(take)
            if self.position == len(self.source):
                self.epoch, self.position = self.epoch + 1, 0
        start, stop = self.rows
        return [self.source[i] for i in batch[start:stop]]
