"""The run directory (ada_jax/rundir.py): one run per workdir, and a workdir or data path that
cannot serve is refused before any work, naming the path and the fix."""
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from ada_jax import base_policy, rundir, train
from tests import helpers
from tests.test_train import _cli, _config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARITH = os.path.join(ROOT, "tests", "data", "arith", "arith_sample.jsonl")


def _holder(path):
    try:
        with open(path) as f:
            return json.loads(f.read() or "{}")
    except (OSError, ValueError):
        return {}


def test_a_second_run_on_a_live_workdir_is_refused(tmp_path, caplog):
    """Two runs at once on one workdir: the second stops at once, naming the first (pid, host,
    start time); a lock left by a killed run is taken over with a warning. Before: both ran,
    each overwriting the other's checkpoints and metrics."""
    wd = tmp_path / "run"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    first = subprocess.Popen(_cli(wd, 50), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        assert helpers.watch(first, lambda: os.path.exists(wd / "run.lock"),
                             until=lambda: _holder(wd / "run.lock").get("pid") == first.pid,
                             what="the first run's lock") is None
        holder = _holder(wd / "run.lock")
        t = time.monotonic()
        with pytest.raises(rundir.Busy) as e:
            train.train_and_evaluate(_config("grpo", **{"sft.steps": 10}), str(wd))
        refused = time.monotonic() - t
        print(f"\nsecond run refused in {refused:.3f}s: {e.value}")
        assert (f"workdir {wd} is in use by another run (pid {first.pid} on host "
                f"{socket.gethostname()}, started {holder['started']}" in str(e.value))
        assert refused < 5 and _holder(wd / "run.lock") == holder  # the first's lock stays
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    with caplog.at_level(logging.WARNING), rundir.lock(str(wd)):
        assert _holder(wd / "run.lock")["pid"] == os.getpid()
    assert (f"taking over the stale lock of pid {first.pid} on host {socket.gethostname()}, "
            f"started {holder['started']} (no longer running)") in caplog.text
    assert not (wd / "run.lock").exists()  # released


@pytest.mark.parametrize("flock", [True, False])
def test_the_lock_is_released_on_any_exit_and_waits_when_asked(tmp_path, monkeypatch, flock):
    """With flock and without it (the record linked into place): a second hold is refused,
    naming the holder, or waits until the first is released."""
    if not flock:
        monkeypatch.setattr(rundir.fcntl, "flock", _no_flock)
    path = str(tmp_path / "x.lock")
    with pytest.raises(KeyError):
        with rundir.hold(path):
            with pytest.raises(rundir.Busy, match=f"pid {os.getpid()} on host"):
                with rundir.hold(path):
                    pass
            raise KeyError
    assert not os.path.exists(path)
    with rundir.hold(path):  # free again
        pass
    order = []

    def first():
        with rundir.hold(path):
            order.append("first holds")
            time.sleep(0.5)
            order.append("first releases")
    t = threading.Thread(target=first)
    t.start()
    while not order:
        time.sleep(0.01)
    with rundir.hold(path, wait=True):
        order.append("second holds")
    t.join()
    assert order == ["first holds", "first releases", "second holds"]
    assert not os.listdir(tmp_path)


def _no_flock(*args):
    raise OSError(errno.ENOLCK, "No locks available")


@pytest.mark.parametrize("make, match", [
    (lambda wd: wd.write_text("x"), r"workdir .*/wd is a file, not a directory: pass another "
                                    r"--workdir \(or move the file away\)"),
    (lambda wd: (wd.mkdir(), (wd / "checkpoints").write_text("x")),
     r"/wd/checkpoints must be a directory: move it away or pass another --workdir"),
    (lambda wd: (wd.mkdir(), (wd / "metrics.jsonl").mkdir()),
     r"/wd/metrics.jsonl must be a file")])
def test_a_workdir_of_the_wrong_kind_is_refused_before_any_work(tmp_path, monkeypatch, make,
                                                                  match):
    """Before: a raw FileExistsError (workdir a file) after nothing, or after SFT and the
    compiles (checkpoints/ a file)."""
    monkeypatch.setattr(base_policy, "load", lambda *a: pytest.fail("SFT ran"))
    make(tmp_path / "wd")
    with pytest.raises(OSError, match=match):
        train.train_and_evaluate(_config("grpo", **{"sft.steps": 10}), str(tmp_path / "wd"))


def test_a_data_path_that_is_a_directory_is_named(tmp_path, monkeypatch):
    """Before: a raw IsADirectoryError from open()."""
    monkeypatch.setattr(base_policy, "load", lambda *a: pytest.fail("SFT ran"))
    c = _config("grpo", **{"task.name": "files", "sampling.max_prompt_len": 24})
    c.task.files = os.path.dirname(ARITH)
    with pytest.raises(IsADirectoryError, match=rf"names the directory {c.task.files}, not a "
                                                rf"data file: name its files, e.g."):
        train.train_and_evaluate(c, str(tmp_path / "wd"))
    assert os.listdir(tmp_path) == []


def _read_only_run(wd):
    """scripts/train.py on a read-only workdir: as a user, a chmod 555 directory; as root
    (whom permissions do not stop), a read-only bind mount."""
    cmd = _cli(wd, 2, ["--config.sft.steps=10"])
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if os.geteuid():
        os.chmod(wd, 0o555)
    else:
        cmd = helpers.with_mount(
            'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0"', wd, cmd)
    return helpers.run(cmd, env=env)


def test_a_read_only_workdir_is_refused_before_sft(tmp_path):
    """Before: found after SFT and 14 compiles, as a raw PermissionError."""
    wd = tmp_path / "wd"
    wd.mkdir()
    t = time.monotonic()
    out = _read_only_run(wd)
    print(f"\nread-only workdir refused in {time.monotonic() - t:.1f}s (a process start)")
    assert out.returncode != 0
    assert (f"PermissionError: workdir {wd} is not writable (permissions or a read-only "
            f"filesystem): make it writable or pass another --workdir") in out.stderr
    assert "SFT" not in out.stderr and "step" not in out.stdout


def _race(tmp_path, takers: int, wait: bool, hold_s: float, stale=None):
    """`takers` processes forked by tests/lock_taker.py (flock unavailable) take one lock at
    the same moment; returns (times the lock was taken, overlaps: takes while another taker
    held it, takers refused)."""
    tmp_path.mkdir()
    lock, log = tmp_path / "x.lock", tmp_path / "log"
    log.write_text("")
    if stale is not None:
        lock.write_text(json.dumps(stale))
    out = helpers.run([sys.executable, os.path.join(ROOT, "tests", "lock_taker.py"), str(lock),
                       str(log), str(takers), str(int(wait)), str(hold_s)],
                      env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    inside, overlaps, taken = 0, 0, 0
    for line in log.read_text().split("\n"):
        if line.startswith("in "):
            taken += 1
            overlaps += inside > 0
            inside += 1
        elif line.startswith("out "):
            inside -= 1
    assert not lock.exists() and not list(tmp_path.glob("x.lock.*"))  # nothing left behind
    return taken, overlaps, int(out.stdout)


def test_without_flock_200_simultaneous_takers_never_overlap(tmp_path):
    """On a filesystem without flock the lock is a record linked into place. Before, the
    record was read and then written: 4 of 200 simultaneous starts held the lock together, and
    `wait` did not wait. Now none overlap; with `wait` every one takes it in turn, and a stale
    record (a dead pid) is taken over by one of them."""
    t = time.monotonic()
    taken, overlaps, busy = _race(tmp_path / "a", 200, wait=False, hold_s=0.2)
    print(f"\n200 takers at once, no wait: taken {taken}, overlaps {overlaps}, refused {busy} "
          f"({time.monotonic() - t:.1f} s)")
    assert overlaps == 0 and taken >= 1 and taken + busy == 200
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    stale = {"pid": dead.pid, "host": socket.gethostname(), "started": "then"}
    t = time.monotonic()
    taken, overlaps, busy = _race(tmp_path / "b", 200, wait=True, hold_s=0.002, stale=stale)
    print(f"200 takers at once, waiting, over a stale lock: taken {taken}, overlaps "
          f"{overlaps} ({time.monotonic() - t:.1f} s)")
    assert (taken, overlaps, busy) == (200, 0, 0)
