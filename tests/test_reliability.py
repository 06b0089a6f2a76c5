"""Faults and bad inputs at the edges of a run: partial checkpoints left by a kill or a full
disk are removed; bad paths and files are refused before anything compiles, naming the field
and the file; a workdir whose metrics.jsonl is lost resumes when asked."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ada_jax import sft, train
from tests import helpers
from tests.test_train import _cli, _config, _latest_step, _steps_written

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0", JAX_PLATFORMS="cpu")


def _partial(workdir) -> list:
    d = os.path.join(workdir, "checkpoints")
    return sorted(n for n in os.listdir(d) if ".orbax-checkpoint-tmp" in n) if os.path.isdir(
        d) else []


def test_a_kill_during_the_preemption_save_leaves_no_partial_checkpoint(tmp_path):
    """SIGTERM (a pre-emption notice), then SIGKILL while the step's checkpoint is being
    written: orbax leaves `<step>.orbax-checkpoint-tmp…`, which it removes only when it saves
    that step again, and a pre-emption step is off schedule: before, it stayed for good. The
    next run removes it at start (it holds the workdir's lock) and completes."""
    run = str(tmp_path / "run")
    extra = ["--config.checkpoint.every=100"]
    for attempt in range(5):  # the kill must land inside the save's window
        proc = subprocess.Popen(_cli(run, 8, extra), env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        helpers.watch(proc, lambda: _steps_written(run),
                      until=lambda: len(_steps_written(run)) >= 2)
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None and not _partial(run):
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if _partial(run):
            break
        os.system(f"rm -rf {run}")
    left = _partial(run)
    print(f"\nkilled mid-save on attempt {attempt + 1}: {left} left")
    assert left, "no kill landed inside the save in 5 attempts"
    out = helpers.run(_cli(run, 8, extra), env=ENV, check=True)
    assert f"removed the partial checkpoint(s) of an unfinished save: {left[0]}" in out.stderr
    assert _partial(run) == [] and _latest_step(run) == 8 and _steps_written(run) == list(
        range(9))


def test_a_save_on_a_full_disk_leaves_no_partial_checkpoint(tmp_path):
    """A checkpoint save on a full disk (a 1.5 MB tmpfs) fails; before, its temporary folder
    (up to most of a checkpoint) stayed behind, now the save removes it. What is left is
    listed inside the private mount, before it goes away."""
    (tmp_path / "disk").mkdir()
    wd = tmp_path / "disk" / "run"
    report = ('"$@"; rc=$?; echo "left: $(ls -a ' + f'{wd}/checkpoints | tr "\\n" " ")"; '
              'exit $rc')
    tiny_disk = helpers.with_mount('mount -t tmpfs -o size=1500k tmpfs "$0"', tmp_path / "disk",
                                   ["sh", "-c", report, "sh", *_cli(wd, 20)])
    out = helpers.run(tiny_disk, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode == 1, out.stderr[-3000:]
    assert "No space left on device" in out.stderr.strip().splitlines()[-1]
    assert "checkpoint.py" in out.stderr and "in save" in out.stderr  # a save failed
    left = out.stdout.split("left: ")[-1].split()
    print(f"\nafter the failed save: {left}")
    assert left and not [n for n in left if "orbax-checkpoint-tmp" in n], left
