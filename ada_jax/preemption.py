"""Pre-emption: a notice (SIGTERM) makes every process save a checkpoint at the same step and
exit with status EXIT_CODE (143 = 128 + SIGTERM, what a process killed by SIGTERM reports).

With jax.distributed (every multi-process job, and one process launched with
distributed.enabled), JAX's preemption service owns SIGTERM: a notice on any process reaches
them all, and `multihost_utils.reached_preemption_sync_point(step)`, called at every step on
every process, returns True on all of them at the same step (the largest step any process has
reached, plus one). Without it, a SIGTERM handler of ours sets a flag that the next step end
reads. The RL loop calls `Notice.reached` at each step end and then saves and raises
`Preempted`; scripts/train.py prints its one-line message and exits EXIT_CODE. Running the
same command again resumes from that checkpoint, bitwise as if never stopped. A notice before
the RL loop (setup, SFT) is acted on at its first step end under jax.distributed; without it,
SIGTERM there still ends the process at once (SFT resumes from its progress checkpoints).
"""
import logging
import signal
import threading

import jax
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)

EXIT_CODE = 143


class Preempted(Exception):
    """A pre-emption notice came; the checkpoint of `step` is saved."""

    def __init__(self, step: int):
        super().__init__(f"pre-empted: checkpoint saved at step {step} on every process; run "
                         f"the same command again to resume (exit status {EXIT_CODE})")
        self.step = step


class Notice:
    """`with Notice() as notice:` … `notice.reached(step)` at every step end, on every process:
    has a pre-emption notice come, and is this the step all processes save at?"""

    def __init__(self):
        self.received, self._previous = False, None

    def __enter__(self):
        if not jax.distributed.is_initialized() and (
                threading.current_thread() is threading.main_thread()):
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _on_sigterm(self, signum, frame):
        self.received = True
        log.warning("SIGTERM: a pre-emption notice; saving a checkpoint at the end of this step")

    def reached(self, step: int) -> bool:
        if jax.distributed.is_initialized():
            return multihost_utils.reached_preemption_sync_point(step)
        return self.received
