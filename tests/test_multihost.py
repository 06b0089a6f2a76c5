"""Multi-host: two local processes (4 fake CPU devices each, jax.distributed over localhost)
sharing one 8-device mesh give the same train step and samples as one 8-device process."""
import os
import socket
import subprocess
import sys

import numpy as np

from tests import multihost_worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_match_one(tmp_path):
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS="--xla_force_host_platform_device_count=4")
    procs = [subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests", "multihost_worker.py"),
         f"--process_id={i}", "--num_processes=2", f"--port={port}",
         f"--out={tmp_path / f'out{i}.npz'}"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)]
    want = multihost_worker.run()  # the single-process reference, while the workers run
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:  # a worker whose peer died would wait for it forever
            if p.poll() is None:
                p.kill()
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"worker {i} failed:\n{log[-4000:]}"
    assert want["devices"] == 8 and want["local"] == 8
    for i in range(2):
        got = dict(np.load(tmp_path / f"out{i}.npz"))
        assert got["devices"] == 8 and got["local"] == 4
        np.testing.assert_array_equal(got["tokens"], want["tokens"])
        for k in ("loss", "grad_checksum", "params", "logp"):
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
