"""`smoke=True` on the default task shows the pipeline learn in one short run:
the user's command, in a subprocess on one CPU device (a user's, not conftest's 8 fake ones)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_smoke_run_learns(tmp_path):
    """Over the 6 RL steps the reward, the accuracy on the 8 training prompts and the share of
    held-out responses that open with their family's right marker all rise clearly (the
    measured values: `ada_jax/tasks/families.py`, `configure`)."""
    env = dict(os.environ, XLA_FLAGS=" ".join(
        f for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train.py"),
                    f"--config={ROOT}/configs/base.py:smoke=True", f"--workdir={tmp_path}",
                    "--plots=false", "--config.log.progress=false"],
                   env=env, check=True, capture_output=True, text=True, timeout=600)
    with open(tmp_path / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    evals = [r for r in records if "eval/avg@32" in r]
    rewards = [r["reward_mean"] for r in records if "reward_mean" in r]
    assert [r["step"] for r in evals] == [0, 2, 4, 6] and len(rewards) == 6
    first, last = evals[0], evals[-1]
    assert rewards[-1] > rewards[0] + 0.25, rewards
    assert last["train_eval/avg@32"] > first["train_eval/avg@32"] + 0.3, evals
    # held-out prompts of the same families: their marker follows
    assert last["eval/right_marker_share"] > first["eval/right_marker_share"] + 0.1, evals
    # The console summary shows what rose, not only the held-out accuracy.
    assert "training prompts avg@32: " in proc.stdout and "right-marker share: " in proc.stdout
