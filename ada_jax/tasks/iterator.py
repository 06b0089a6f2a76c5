"""Deterministic, resumable batches of problems for training.

Epoch e visits the source in the order of a permutation drawn from (seed, e); batches run on
across epoch boundaries, so every batch is full. The whole position is two ints, `state()`,
which goes into checkpoints; `restore(state)` continues exactly where it stopped.
"""
from typing import Sequence

import numpy as np

from ada_jax.tasks.problem import Problem


class PromptIterator:
    """Endless iterator of lists of `batch_size` Problems from a random-access source."""

    def __init__(self, source: Sequence[Problem], batch_size: int, seed: int = 0):
        if len(source) == 0:
            raise ValueError("PromptIterator: the source has no problems")
        if batch_size <= 0:
            raise ValueError(f"PromptIterator: batch_size must be positive, got {batch_size}")
        self.source, self.batch_size, self.seed = source, batch_size, seed
        self.epoch = self.position = 0
        self._order_epoch, self._order = -1, None

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def restore(self, state: dict) -> None:
        epoch, position = int(state["epoch"]), int(state["position"])
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
        batch = []
        while len(batch) < self.batch_size:
            order = self._permutation()
            take = order[self.position:self.position + self.batch_size - len(batch)]
            batch += [self.source[int(i)] for i in take]
            self.position += len(take)
            if self.position == len(self.source):
                self.epoch, self.position = self.epoch + 1, 0
        return batch
