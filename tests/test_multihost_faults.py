"""Long runs and dying processes on 2 processes of 2 fake CPU devices each: scripts/train.py on
the math-files task (tests/data/arith, Ada-Seq-balance, the real verifier pool), RL from the
random init (no SFT), tiny batches. Every wait has a time limit (for a run: minutes without a
new step in metrics.jsonl): a hang fails the test with every process's log.

- slow, soak: 200 steps through scripts/launch_local.sh, evaluations and checkpoints
  included, end without a hang, and process 0's metrics.jsonl holds every step;
- slow, launcher: SIGKILL of process 1 mid-run makes launch_local.sh stop process 0 at once
  and exit with 137, process 0's log naming the dead process; the same launch again resumes
  from the last checkpoint and completes the run;
- slow, bare jax.distributed (coordinator address, process count and id as config flags, no
  launcher): SIGKILL of the worker or of the coordinator (process 0) makes the survivor exit
  non-zero within DEADLINE seconds, saying a peer died; the same two commands again resume
  and complete. A frozen worker (SIGSTOP: no connection closes) is declared dead by JAX's
  heartbeat after config.distributed.heartbeat_timeout_s and the survivor stops.

Fast: the survivor's message, and the timeout fields checked before jax.distributed starts.

The measured times are printed (pytest -s) and recorded in docs/scaling.md §5f-5g.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import ml_collections
import pytest

from ada_jax import sharding
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(ROOT, "scripts", "launch_local.sh")
TRAIN = os.path.join(ROOT, "scripts", "train.py")
ARITH = os.path.join(ROOT, "tests", "data", "arith", "arith_sample.jsonl")
DEADLINE = 60  # seconds from a death to the survivor's exit (measured: under 1 s; frozen: 10 s)
PEER_DIED = re.compile("because another process died|another task died")


def _flags(workdir, steps: int, every: int) -> list:
    """scripts/train.py on 2 processes: 4 prompts per step (one per device), 8 slots."""
    return [TRAIN, f"--workdir={workdir}", "--plots=False",
            "--config=configs/base.py:algo=ada_balance,task=files",
            f"--config.task.files={ARITH}", "--config.task.verifier_workers=1",
            "--config.sampling.max_prompt_len=24", "--config.sampling.max_new_tokens=8",
            "--config.rl.prompts_per_step=4", "--config.rl.n=2", "--config.adaptive.slots=8",
            "--config.adaptive.samples_per_round=4", "--config.adaptive.max_rounds=1",
            "--config.adaptive.k_pos=1", "--config.adaptive.k_neg=1", "--config.sft.steps=0",
            f"--config.rl.steps={steps}", f"--config.eval.every={every}",
            "--config.eval.prompts=4", "--config.eval.k=2", f"--config.checkpoint.every={every}",
            "--config.log.progress=False", "--config.distributed.enabled=True"]


def _env() -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS="--xla_force_host_platform_device_count=2 "
                         "--xla_backend_optimization_level=0")
    for k in [k for k in env if k.startswith("SLURM_") or k == "JAX_COORDINATOR_PORT"]:
        env.pop(k)
    return env


def _launch(run, workdir, steps, every):
    """scripts/launch_local.sh 2 … : the launcher's process; logs in run/logs."""
    return subprocess.Popen(["bash", LAUNCH, "2", sys.executable,
                             *_flags(workdir, steps, every)],
                            env=dict(_env(), LAUNCH_LOG_DIR=str(run / "logs")), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _bare(run, workdir, steps, every, *extra):
    """Two processes joined by explicit coordinator flags, no launcher: [process 0, 1]."""
    (run / "logs").mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    flags = _flags(workdir, steps, every) + [
        f"--config.distributed.coordinator_address=localhost:{port}",
        "--config.distributed.num_processes=2", *extra]
    return [subprocess.Popen([sys.executable, *flags, f"--config.distributed.process_id={i}"],
                             env=_env(), cwd=ROOT, stderr=subprocess.STDOUT,
                             stdout=open(run / "logs" / f"process_{i}.log", "w"),
                             start_new_session=True)
            for i in range(2)]


def _logs(run) -> str:
    return "\n".join(f"--- {p.name}\n" + "".join(
        line for line in p.read_text(errors="replace").splitlines(True)
        if "[Gloo]" not in line)[-3000:] for p in sorted((run / "logs").glob("*.log")))


def _log_sizes(run) -> list:
    """Progress of a job: the sizes of its processes' logs."""
    return [p.stat().st_size for p in sorted((run / "logs").glob("*.log"))]


def _log(run, i: int) -> str:
    return (run / "logs" / f"process_{i}.log").read_text(errors="replace")


def _wait(run, procs, timeout=None) -> list:
    """Exit statuses. With `timeout` (a bound the test asserts: seconds from a death to the
    survivor's exit), past it the processes are stopped and the test fails; without, no new
    log output for helpers.STALL_S seconds (a hang, however slow the machine) fails."""
    if timeout is None:
        try:
            return [helpers.watch(p, lambda: _log_sizes(run), what=lambda: _logs(run))
                    for p in procs]
        finally:
            helpers.stop(*procs)
    end = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(end - time.monotonic(), 0)) for p in procs]
    except subprocess.TimeoutExpired:
        helpers.stop(*procs)
        pytest.fail(f"no exit within {timeout} s (a hang?)\n{_logs(run)}")


def _steps(workdir) -> list:
    path = workdir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in open(path)] if path.exists() else []


def _wait_for_step(run, workdir, step, procs, stall=600) -> None:
    """Until process 0 has written `step` to metrics.jsonl, with every process running; no
    new step for `stall` seconds (a hang, however loaded the machine) fails the test."""
    seen, since = None, time.monotonic()
    while step not in (steps := _steps(workdir)):
        if steps != seen:
            seen, since = steps, time.monotonic()
        if time.monotonic() - since > stall or any(p.poll() is not None for p in procs):
            helpers.stop(*procs)
            pytest.fail(f"step {step} not reached (last: {steps[-1:]})\n{_logs(run)}")
        time.sleep(0.5)


def _task_pid(workdir, i: int) -> int:
    """Process i of a launch_local.sh job on `workdir`: the python that leads its session."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            leader = os.getsid(int(pid)) == int(pid)
        except OSError:
            continue
        if (leader and f"--workdir={workdir}".encode() in cmd
                and f"SLURM_PROCID={i}".encode() in env):
            return int(pid)
    raise AssertionError(f"process {i} of the job on {workdir} not found")


def _completes(run, workdir, procs, steps) -> str:
    """The resumed run ends well and metrics.jsonl holds every step once; its log."""
    assert _wait(run, procs) == [0] * len(procs), _logs(run)
    assert _steps(workdir) == list(range(steps + 1))
    text = _log(run, 0)
    assert re.search(r"resumed from step [1-9]", text), _logs(run)
    return text


@pytest.mark.parametrize("error, says", [
    (jax.errors.JaxRuntimeError("INTERNAL: Gloo all-reduce failed: [pair.cc:538] Read error "
                                "[127.0.0.1]:11187: Connection reset by peer"),
     "a collective with the other processes failed, most likely because another process died"),
    (ValueError("config.rl.steps=0\nmore"), "ValueError: config.rl.steps=0")])
def test_an_exception_on_one_process_ends_it_saying_why(monkeypatch, capsys, error, says):
    codes = []
    monkeypatch.setattr(os, "_exit", codes.append)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    sharding.exit_at_once(type(error), error, None)
    assert codes == [1]
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"ada_jax: process 0 of 2 stops, and with it the job: {says}")


def test_the_error_is_the_last_line_while_other_threads_print():
    """On a full disk orbax's writer threads print tracebacks while the run dies (CI saw
    'RuntimeError: ' from one of them, then the run's line after it, on one line). A thread
    printing half lines without pause stands in for them: the run's line is still last, whole."""
    script = textwrap.dedent("""
        import sys, threading, time
        from ada_jax import sharding
        sys.excepthook = sharding.exit_at_once
        def noise():
            while True:
                sys.stderr.write("RuntimeError: ")
                sys.stderr.flush()
                sys.stderr.write("Event loop is closed\\n")
        threading.Thread(target=noise, daemon=True).start()
        time.sleep(0.2)
        raise ValueError("No space left on device")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == (
        "ada_jax: the run stops: ValueError: No space left on device"), out.stderr[-2000:]


def test_timeouts_must_be_positive_seconds():
    for bad in (0, -5, 1.5, True):
        dist = ml_collections.ConfigDict(dict(enabled=True, coordinator_address="",
                                              num_processes=1, process_id=0,
                                              heartbeat_timeout_s=bad))
        with pytest.raises(ValueError, match=r"config.distributed.heartbeat_timeout_s=.*: must "
                                             r"be a positive integer \(seconds\)"):
            sharding.maybe_initialize_distributed(dist)


@pytest.mark.slow
def test_two_processes_soak_200_steps(tmp_path):
    t0 = time.monotonic()
    launcher = _launch(tmp_path, tmp_path / "work", 200, 50)
    _wait_for_step(tmp_path, tmp_path / "work", 200, [launcher], stall=300)
    assert _wait(tmp_path, [launcher]) == [0], _logs(tmp_path)
    assert _steps(tmp_path / "work") == list(range(201))
    print(f"soak: 200 steps on 2 processes in {time.monotonic() - t0:.0f} s")


@pytest.mark.slow
def test_launcher_stops_the_job_when_a_process_dies_and_it_resumes(tmp_path):
    work, steps = tmp_path / "work", 12
    launcher = _launch(tmp_path / "first", work, steps, 3)
    try:
        _wait_for_step(tmp_path / "first", work, 4, [launcher])  # checkpoint 3 is written
        os.kill(_task_pid(work, 1), signal.SIGKILL)
        t = time.monotonic()
        assert _wait(tmp_path / "first", [launcher], DEADLINE) == [137]
    finally:
        helpers.stop(launcher)
    took = time.monotonic() - t
    assert ("launch_local: process 1 exited with status 137 (signal 9); stopping process 0"
            in _log(tmp_path / "first", 0))
    done = _steps(work)[-1]
    _completes(tmp_path / "again", work, [_launch(tmp_path / "again", work, steps, 3)], steps)
    print(f"launcher: process 1 killed after step {done}, launcher exited {took:.1f} s later")


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "coordinator"])
def test_bare_processes_stop_when_one_dies_and_resume(tmp_path, victim):
    work, steps = tmp_path / "work", 12
    procs = _bare(tmp_path / "first", work, steps, 3)
    try:
        _wait_for_step(tmp_path / "first", work, 4, procs)
        procs[victim].kill()
        t = time.monotonic()
        survivor = 1 - victim
        assert _wait(tmp_path / "first", [procs[survivor]], DEADLINE) != [0]
    finally:
        helpers.stop(*procs)
    took = time.monotonic() - t
    assert PEER_DIED.search(_log(tmp_path / "first", survivor)), _logs(tmp_path / "first")
    done = _steps(work)[-1]
    _completes(tmp_path / "again", work, _bare(tmp_path / "again", work, steps, 3), steps)
    print(f"bare: process {victim} killed after step {done}, process {survivor} exited "
          f"{took:.1f} s later")


@pytest.mark.slow
def test_bare_processes_stop_when_one_freezes(tmp_path):
    """SIGSTOP: the frozen worker's connections stay open, so only the heartbeat finds it."""
    procs = _bare(tmp_path, tmp_path / "work", 40, 20,
                  "--config.distributed.heartbeat_timeout_s=10")
    try:
        _wait_for_step(tmp_path, tmp_path / "work", 4, procs)
        procs[1].send_signal(signal.SIGSTOP)
        t = time.monotonic()
        assert _wait(tmp_path, [procs[0]], 10 + DEADLINE) != [0]
    finally:
        helpers.stop(*procs)
    took = time.monotonic() - t
    assert re.search("stopped sending heartbeats", _log(tmp_path, 0)), _logs(tmp_path)
    assert PEER_DIED.search(_log(tmp_path, 0))
    print(f"bare: process 1 frozen, process 0 exited {took:.1f} s later (heartbeat 10 s)")


def _meta(workdir, step) -> dict:
    """Checkpoint `step`'s metadata less the wall time and the metadata's own checksum (the
    arrays' checksums stay: equal ones mean bitwise equal params and optimizer state)."""
    meta = json.loads((workdir / "checkpoints" / str(step) / "meta" / "metadata").read_text())
    meta.pop("_meta_sha256")
    meta["totals"].pop("wall")
    return meta


def _metrics(workdir) -> list:
    return [{k: v for k, v in json.loads(line).items()
             if not k.startswith("time_") and k != "cum_wall"}
            for line in open(workdir / "metrics.jsonl")]


@pytest.mark.slow
def test_a_preemption_notice_saves_on_every_process_and_resumes_bitwise(tmp_path):
    """SIGTERM on process 1 only: JAX's preemption service tells process 0, both save the
    checkpoint of the same step (off the checkpoint.every schedule), both say so and exit 143
    (the launcher too); the same launch completes the run bitwise equal to an unbroken one."""
    steps, ref, work = 8, tmp_path / "ref_work", tmp_path / "work"
    assert _wait(tmp_path / "ref", [_launch(tmp_path / "ref", ref, steps, 100)]) == [0]
    launcher = _launch(tmp_path / "first", work, steps, 100)
    _wait_for_step(tmp_path / "first", work, 2, [launcher])
    os.kill(_task_pid(work, 1), signal.SIGTERM)
    t = time.monotonic()
    assert _wait(tmp_path / "first", [launcher]) == [143], _logs(tmp_path / "first")
    took = time.monotonic() - t
    said = [re.findall(r"ada_jax: pre-empted: checkpoint saved at step (\d+) on every process",
                       _log(tmp_path / "first", i)) for i in (0, 1)]
    assert said[0] == said[1] and len(said[0]) == 1, _logs(tmp_path / "first")
    saved = int(said[0][0])
    assert 2 <= saved < steps and _steps(work)[-1] == saved
    assert sorted(os.listdir(work / "checkpoints")) == [str(saved)]
    assert _wait(tmp_path / "again", [_launch(tmp_path / "again", work, steps, 100)]) == [0]
    assert _meta(work, steps) == _meta(ref, steps) and _metrics(work) == _metrics(ref)
    print(f"2 processes: SIGTERM to process 1 after step 2, both saved step {saved} and "
          f"exited 143 {took:.1f} s later; resumed bitwise")
