"""Multi-host: two local processes (4 fake CPU devices each, jax.distributed over localhost)
sharing one 8-device mesh give the same train step and samples as one 8-device process."""
import os
import socket
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Unoptimised XLA CPU code compiles ~5x faster; these programs are tiny.
FAST_COMPILE = "--xla_backend_optimization_level=0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _launch(out, process_id, num_processes, port):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT, XLA_FLAGS=(
        f"--xla_force_host_platform_device_count={8 // num_processes} {FAST_COMPILE}"))
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests", "multihost_worker.py"),
         f"--process_id={process_id}", f"--num_processes={num_processes}", f"--port={port}",
         f"--out={out}"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def test_two_processes_match_one(tmp_path):
    port = _free_port()
    outs = [tmp_path / "host0.npz", tmp_path / "host1.npz", tmp_path / "single.npz"]
    procs = [_launch(outs[0], 0, 2, port), _launch(outs[1], 1, 2, port),
             _launch(outs[2], 0, 1, 0)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=180)[0])
    finally:
        for p in procs:  # a worker whose peer died would otherwise wait for it forever
            if p.poll() is None:
                p.kill()
    for p, out, log in zip(procs, outs, logs):
        assert p.returncode == 0, f"{out.stem} failed:\n{log[-4000:]}"
    want = dict(np.load(outs[2]))
    assert want["devices"] == 8 and want["local"] == 8
    for out in outs[:2]:
        got = dict(np.load(out))
        assert got["devices"] == 8 and got["local"] == 4
        np.testing.assert_array_equal(got["tokens"], want["tokens"])
        for k in ("loss", "grad_checksum", "params", "logp"):
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
