"""Multi-process runs on fake CPU devices, started by scripts/launch_local.sh: the launch
docs/scaling.md documents (SLURM-style environment, jax.distributed auto-detection) is the one
tested. Every run shares one 8-device (data=1, fsdp=4, tensor=2) mesh, so N processes of 8/N
devices must give what one process of 8 gives.

- a train step and the sampler: 2 processes equal 1;
- slow: `train_and_evaluate` on the math-files task (tests/data/arith, Ada-Seq-balance, the real
  math verifier pool), one process reading JSONL against 2 processes reading Parquet and 4
  reading a TFDS array_record dataset (the same problems): each process reads its own block of
  every batch, each verifier pool scores only its process's slots, and kept samples, metrics
  (written once, by process 0) and params equal the one-process run's; a checkpoint of the
  4-process run resumes on 4 processes, and on 2, exactly; Ada-Est on 2 processes equals 1;
- slow: the policies that are more than one engine call on the step's own prompts (the
  stream, DAPO, GVM, self-hinting) on 2 processes equal 1, and the stream on 4 processes
  equals 1 and resumes on 4 and on 2 exactly.
"""
import json
import os
from collections import Counter
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(ROOT, "scripts", "launch_local.sh")
WORKER = os.path.join(ROOT, "tests", "multihost_worker.py")
# Unoptimised XLA CPU code compiles ~5x faster; these programs are tiny.
FAST_COMPILE = "--xla_backend_optimization_level=0"
BATCH = 8  # prompts per step (tests/multihost_worker.py: train_config)


def launch(n: int, run_dir, *args):
    """scripts/launch_local.sh n … tests/multihost_worker.py *args, 8/n CPU devices each;
    returns run_dir/out. A failure, or no new log output for helpers.STALL_S seconds (a hang),
    shows every process's log."""
    logs = run_dir / "logs"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT, LAUNCH_LOG_DIR=str(logs),
               XLA_FLAGS=f"--xla_force_host_platform_device_count={8 // n} {FAST_COMPILE}")
    env.pop("JAX_COORDINATOR_PORT", None)
    proc = subprocess.Popen(["bash", LAUNCH, str(n), sys.executable, WORKER, *args,
                             f"--out={run_dir / 'out'}"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    text = lambda: "\n".join(f"--- {p.name}\n" + "".join(  # noqa: E731
        line for line in p.read_text(errors="replace").splitlines(True)
        if "[Gloo]" not in line)[-3000:] for p in sorted(logs.glob("*.log")))
    rc = helpers.watch(proc, lambda: [p.stat().st_size for p in logs.glob("*.log")],
                       what=lambda: f"{n} processes (launch_local.sh)\n" + text())
    if rc:
        pytest.fail(f"{n} processes: launch_local.sh exited with {rc}\n" + text())
    return run_dir / "out"


def test_two_processes_match_one(tmp_path):
    outs = [launch(2, tmp_path / "two", "step"), launch(1, tmp_path / "one", "step")]
    want = dict(np.load(outs[1] / "process_0.npz"))
    assert want["devices"] == 8 and want["local"] == 8
    for i in range(2):
        got = dict(np.load(outs[0] / f"process_{i}.npz"))
        assert got["devices"] == 8 and got["local"] == 4
        np.testing.assert_array_equal(got["tokens"], want["tokens"])
        for k in ("loss", "grad_checksum", "params", "logp"):
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
        # Per-host primitives: process i holds rows 4i..4i+3 of an 8-row batch and the
        # batch assembled from those rows is the whole; host_rows computes on this
        # process's 8 of 16 slots only and assembles the same result as one process.
        np.testing.assert_array_equal(got["rows"], [4 * i, 4 * i + 4])
        np.testing.assert_array_equal(got["batch"], want["batch"])
        np.testing.assert_array_equal(got["host_rows_seen"], np.arange(8 * i, 8 * i + 8))
        np.testing.assert_array_equal(got["host_rows_out"], want["host_rows_out"])
        np.testing.assert_array_equal(got["gathered"], [0, 1])
        # A batch or slot count that does not split over the processes is refused by name.
        batch_error, slots_error = got["errors"]
        assert batch_error.startswith("config.rl.prompts_per_step=6: a batch of 6 rows does "
                                      "not split into one block per process") and (
            "use a multiple of 4" in batch_error)
        assert slots_error.startswith("config.adaptive.slots=12 must be a multiple of the 8 "
                                      "devices on 2 processes")
        assert list(got["accepted"]) == [""] * 5  # every policy, stream, hints: not refused
    assert list(want["errors"]) == ["", ""]  # one process: nothing to split
    np.testing.assert_array_equal(want["rows"], [0, 8])
    np.testing.assert_array_equal(want["batch"], np.arange(8)[:, None] * np.ones((1, 3)))
    np.testing.assert_array_equal(want["host_rows_seen"], np.arange(16))
    np.testing.assert_array_equal(want["host_rows_out"],
                                  np.arange(16) * 10 + np.arange(0, 32, 2) % 3)


# ----------------------------------------------------------------------------- training
def _train(n, run_dir, workdir, shared, steps, source, algo="ada_balance", overrides=None,
           stop_after=-1):
    return launch(n, run_dir, "train", f"--workdir={workdir}", f"--steps={steps}",
                  f"--source={source}", f"--base={shared / 'base'}",
                  f"--data_dir={shared / 'tfds'}", f"--algo={algo}",
                  f"--overrides={json.dumps(overrides or {})}", f"--stop_after={stop_after}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process of 8 devices, 3 steps from JSONL (it also trains the shared SFT base)."""
    shared = tmp_path_factory.mktemp("multihost")
    out = _train(1, shared / "one", shared / "one" / "work", shared, 3, "jsonl")
    return shared, out, shared / "one" / "work"


def _records(out, n):
    return [json.load(open(out / f"process_{i}.json")) for i in range(n)]


def _metrics(workdir):
    return [json.loads(line) for line in open(workdir / "metrics.jsonl")]


def _same_metrics(got: dict, want: dict):
    varying = lambda k: k.startswith("time_") or k == "cum_wall"  # noqa: E731
    assert {k for k in got if not varying(k)} == {k for k in want if not varying(k)}
    for k, v in want.items():
        if not varying(k):
            assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k


def _check_run(reference, out, workdir, n, steps, first=0):
    """The n-process run's steps first+1 … first+steps against the reference's."""
    shared, ref_out, ref_work = reference
    (one,), recs = _records(ref_out, 1), _records(out, n)
    for s in range(steps):
        r = first + s
        # Each prompt batch drawn (one per step, or as many as DAPO / the stream need): every
        # process drew its own block, disjoint, in process order, together the one-process batch.
        assert [len(rec["drawn"][s]) for rec in recs] == [len(one["drawn"][r])] * n
        for d, want in enumerate(one["drawn"][r]):
            blocks = [rec["drawn"][s][d] for rec in recs]
            assert [len(x) for x in blocks] == [len(want) // n] * n
            assert [i for x in blocks for i in x] == want
        # What each verifier pool scored: its own share (no pair twice across processes where
        # the one process scored it once), together what the one process scored.
        scored = [Counter(tuple(pair) for pair in rec["scored"][s]) for rec in recs]
        assert sum(scored, Counter()) == Counter(tuple(pair) for pair in one["scored"][r])
        for rec in recs:  # the kept batch, gathered
            assert rec["kept"][s] == one["kept"][r]
    # Each pool saw exactly what its process scored, a share of the whole.
    assert [rec["pool_scored"] for rec in recs] == [
        sum(len(x) for x in rec["scored"]) for rec in recs]
    assert sum(rec["pool_scored"] for rec in recs) == sum(
        len(one["scored"][first + s]) for s in range(steps))
    want, got = np.load(ref_out / "params.npz"), np.load(out / "params.npz")
    assert sorted(got) == [f"step_{first + s + 1}" for s in range(steps)]
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    lines = _metrics(workdir)
    assert [m["step"] for m in lines] == list(range(first + steps + 1))  # process 0 alone
    ref_lines = _metrics(ref_work)
    for m in lines:
        _same_metrics(m, ref_lines[m["step"]])
    return recs


def _shares(recs) -> str:
    return (f"prompts drawn per step {[[sum(map(len, d)) for d in r['drawn']] for r in recs]}, "
            f"completions scored per pool {[r['pool_scored'] for r in recs]}")


@pytest.mark.slow
def test_two_processes_train_like_one(reference, tmp_path):
    shared = reference[0]
    out = _train(2, tmp_path, tmp_path / "work", shared, 2, "parquet")
    recs = _check_run(reference, out, tmp_path / "work", 2, 2)
    print("2 processes:", _shares(recs))


@pytest.mark.slow
def test_four_processes_train_like_one_and_resume(reference, tmp_path):
    shared, work = reference[0], tmp_path / "work"
    out = _train(4, tmp_path / "first", work, shared, 2, "tfds")
    recs = _check_run(reference, out, work, 4, 2)
    with open(work / "checkpoints" / "2" / "meta" / "metadata") as f:
        states = json.load(f)["iterator"]  # every process's iterator state
    assert [s["rows"] for s in states] == [[0, 2], [2, 4], [4, 6], [6, 8]]
    # A preemption after step 2, resumed from checkpoint 2 by the same 4-process launch and
    # (a copy of the workdir) by 2 processes: a job restarted on fewer hosts.
    shutil.copytree(work, tmp_path / "work_on_2")
    resumed = _train(4, tmp_path / "resumed", work, shared, 3, "tfds")
    again = _check_run(reference, resumed, work, 4, 1, first=2)
    on_two = _train(2, tmp_path / "resumed_on_2", tmp_path / "work_on_2", shared, 3, "tfds")
    fewer = _check_run(reference, on_two, tmp_path / "work_on_2", 2, 1, first=2)
    print("4 processes:", _shares(recs), "; resumed step 3:", _shares(again),
          "; resumed on 2 processes:", _shares(fewer))


@pytest.mark.slow
def test_two_processes_ada_est_like_one(reference, tmp_path):
    """Ada-Est: budgets solved over the whole batch from every process's ids, the same
    pass-rate history on every process."""
    shared = reference[0]
    one = _train(1, tmp_path / "one", tmp_path / "one" / "work", shared, 2, "jsonl", "ada_est")
    out = _train(2, tmp_path / "two", tmp_path / "two" / "work", shared, 2, "jsonl", "ada_est")
    _check_run((shared, one, tmp_path / "one" / "work"), out, tmp_path / "two" / "work", 2, 2)


# The policies whose batch is more than one engine call on the step's own prompts: the
# stream (prompts outlive a step), DAPO (more prompt batches until B mixed groups), GVM (a
# pilot, then budgets) and self-hinting (collapsed groups re-rolled under hints).
POLICIES = {  # policy: (algo, overrides, steps)
    # 4 steps: a resume after step 2 samples in steps 3 and 4 (3 calls admit nothing at the 3rd)
    "stream": ("ada_balance", {"adaptive.mode": "stream"}, 4),
    "dapo": ("dapo", {}, 3),
    "gvm": ("gvm", {"adaptive.gvm.pilot": 2, "adaptive.gvm.budget_per_prompt": 2}, 3),
    # T = 2: the SFT base solves most sums at T = 1, and only all-wrong groups are re-rolled.
    "sage": ("grpo", {"rl.hints": "sage", "sampling.temperature": 2.0}, 3),
}
# History-based allocation: budgets from every process's ids and one history.
POLICIES.update(knapsack=("knapsack", {}, 3), vip=("vip", {}, 3))
# GRESO (skips from one history, more prompt batches as DAPO), Pilot-Commit (a pilot call, then
# commit budgets decided on the whole batch), conformal (grid calls, one calibration state).
POLICIES.update(greso=("dapo", {"adaptive.policy": "greso"}, 3),
                pilot_commit=("grpo", {"adaptive.policy": "pilot_commit"}, 3),
                conformal=("grpo", {"adaptive.policy": "conformal"}, 3))


@pytest.fixture(scope="module")
def one_process(reference):
    """Each policy's one-process run, 3 steps (made on first use)."""
    shared, runs = reference[0], {}

    def get(policy):
        if policy not in runs:
            run_dir, (algo, overrides, steps) = shared / f"one_{policy}", POLICIES[policy]
            runs[policy] = (shared, _train(1, run_dir, run_dir / "work", shared, steps, "jsonl",
                                           algo, overrides), run_dir / "work")
        return runs[policy]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_on_two_processes_like_one(one_process, tmp_path, policy):
    ref, (algo, overrides, steps) = one_process(policy), POLICIES[policy]
    out = _train(2, tmp_path, tmp_path / "work", ref[0], steps, "parquet", algo, overrides)
    recs = _check_run(ref, out, tmp_path / "work", 2, steps)
    print(f"{policy} on 2 processes:", _shares(recs))


@pytest.mark.slow
def test_stream_on_four_processes_resumes_on_four_and_on_two(one_process, tmp_path):
    """Each process checkpoints its shards of the stream's engine state (and process 0 the
    bookkeeping every process holds alike); after a preemption at step 2 of 3 (a run of 2
    steps would admit nothing ahead at its end), a restart on 4 processes, or on 2, continues
    the one-process run exactly."""
    ref, work = one_process("stream"), tmp_path / "work"
    shared, (algo, overrides, steps) = ref[0], POLICIES["stream"]
    recs = _check_run(ref, _train(4, tmp_path / "first", work, shared, steps, "tfds", algo,
                                  overrides, stop_after=2), work, 4, 2)
    shutil.copytree(work, tmp_path / "work_on_2")
    again = _check_run(ref, _train(4, tmp_path / "resumed", work, shared, steps, "tfds", algo,
                                   overrides), work, 4, steps - 2, first=2)
    fewer = _check_run(ref, _train(2, tmp_path / "on_2", tmp_path / "work_on_2", shared, steps,
                                   "tfds", algo, overrides), tmp_path / "work_on_2", 2,
                       steps - 2, first=2)
    print("stream on 4 processes:", _shares(recs), "; resumed:", _shares(again),
          "; resumed on 2 processes:", _shares(fewer))
