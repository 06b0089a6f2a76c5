"""Small shared builders for tests: tiny model configs and models, a private mount, and
progress-based waits on subprocesses (`watch`, `run`)."""
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import tempfile
import time

import numpy as np
import pytest
from flax import nnx
from scipy import stats

from ada_jax import model as model_lib

TINY = model_lib.ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                             d_ff=64, head_dim=8, max_len=64)


def set_field(config, dotted: str, value) -> None:
    """config.<dotted> = value, through its sections (adaptive.knapsack.n_min)."""
    *path, name = dotted.split(".")
    for part in path:
        config = config[part]
    config[name] = value


def tiny_model(seed: int = 0, **overrides):
    cfg = dataclasses.replace(TINY, **overrides)
    return model_lib.Transformer(cfg, nnx.Rngs(seed))


def logit_diff_vs_hf(graphdef, params, hf_model, toks, mask):
    """(max |ours − HF| logit over the real tokens of a left-padded batch, max |HF logit|)."""
    import jax
    import torch
    pos = np.asarray(model_lib.positions_from_mask(mask))
    ours = jax.jit(lambda p: nnx.merge(graphdef, p)(toks, pos, mask)[0])(params)
    with torch.no_grad():
        ref = hf_model(input_ids=torch.tensor(toks, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       position_ids=torch.tensor(pos, dtype=torch.long)).logits.numpy()
    return float(np.abs(np.asarray(ours) - ref)[mask].max()), float(np.abs(ref).max())


def with_mount(mount: str, path, cmd: list) -> list:
    """`cmd` run after `mount` (shell, `$0` = path) in a private user and mount namespace, as
    the root of that namespace (a read-only or a tiny filesystem at `path` that nobody else
    sees); the test is skipped where unshare cannot make one."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"],
                                                     capture_output=True).returncode:
        pytest.skip("unshare -rm (user and mount namespaces) is not available here")
    return ["unshare", "-rm", "sh", "-c", f'{mount} && exec "$@"', str(path), *cmd]


STALL_S = 600  # a subprocess silent (no new output, no progress) this long is hung


def watch(proc, progress, until=None, stall_s: float = STALL_S, what=""):
    """Wait for `proc` to end, or for `until()` to hold; returns proc's exit status (None when
    `until` came first). The test fails when `progress()` (its output's size, the steps
    written so far: anything comparable) stays the same for `stall_s` seconds: a hang fails
    however loaded the machine, a slow run does not. Then proc (and its process group, if it
    leads one: a launcher stops its tasks on SIGTERM) is stopped, and the failure says `what`
    (text, or a function giving it then: e.g. the processes' logs)."""
    seen, since = progress(), time.monotonic()
    while proc.poll() is None and not (until and until()):
        now = progress()
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since > stall_s:
            stop(proc)
            text = what() if callable(what) else what or proc.args
            pytest.fail(f"no progress for {stall_s} s (a hang?): {text}")
        time.sleep(0.2)
    return proc.poll()


def stop(*procs) -> None:
    """End these processes and what they started: SIGTERM (and SIGCONT: a frozen one takes
    it) to each one's process group where it leads one (a launcher stops its tasks on
    SIGTERM), else to it; SIGKILL to those still running 15 s later."""
    def signal_all(sigs, ps):
        for p in ps:
            for sig in sigs:
                with contextlib.suppress(ProcessLookupError):
                    if os.getpgid(p.pid) == p.pid:
                        os.killpg(p.pid, sig)
                    else:
                        p.send_signal(sig)
    signal_all((signal.SIGTERM, signal.SIGCONT), procs)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            signal_all((signal.SIGKILL,), [p])
            p.wait()


def one_device_flags(*drop: str) -> str:
    """conftest's XLA_FLAGS without its 8 fake devices (and without the flags starting with any
    of `drop`): a subprocess that runs on one CPU device, as a user's command does."""
    return " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                    if not f.startswith(("--xla_force_host_platform_device_count", *drop)))


def run(cmd, stall_s: float = STALL_S, check: bool = False, **kwargs):
    """subprocess.run(cmd, capture_output=True, text=True, **kwargs), failing the test when
    the command writes nothing to stdout or stderr for `stall_s` seconds (not at a fixed
    total: a slow machine is not a hang), or with `check` when it exits non-zero (with the
    end of its stderr)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True,
                                start_new_session=True, **kwargs)
        rc = watch(proc, lambda: (os.fstat(out.fileno()).st_size,
                                  os.fstat(err.fileno()).st_size), stall_s=stall_s,
                   what=" ".join(map(str, cmd))[:200])
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, rc, out.read(), err.read())
    if check and rc:
        pytest.fail(f"{' '.join(map(str, cmd))[:300]} exited with {rc}:\n{done.stderr[-3000:]}")
    return done


def load_script(relpath: str):
    """A script of the repository (e.g. "scripts/tools/check_results.py") as a module."""
    import importlib.util
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    name = os.path.splitext(os.path.basename(relpath))[0]
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, relpath))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def chi2_pvalue(samples, pmf, support):
    """Chi-square goodness of fit, bins merged so each expects >= 5."""
    counts = np.array([np.sum(samples == k) for k in support], float)
    expected = np.array([pmf(k) for k in support]) * len(samples)
    tail = len(samples) - expected.sum()
    counts = np.append(counts, len(samples) - counts.sum())
    expected = np.append(expected, tail)
    obs, exp, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(counts, expected):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 5:
            obs.append(acc_o), exp.append(acc_e)
            acc_o = acc_e = 0.0
    obs[-1] += acc_o
    exp[-1] += acc_e
    return stats.chisquare(obs, exp).pvalue
