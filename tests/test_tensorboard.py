"""TensorBoard and Weights & Biases logging: tags equal the metrics.jsonl keys, the learning
rate, histograms, eval sample completions; W&B only when asked for, with a clear error when the
package is missing."""
import glob
import json
import os
import struct
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ada_jax import learn, metrics_log, train
from tests.test_train import _config


def read_events(logdir):
    """(step, Summary.Value) of every summary in the event files under `logdir` (TFRecord
    framing: 8-byte length, its 4-byte CRC, the Event proto, its 4-byte CRC)."""
    from tensorboardX.proto.event_pb2 import Event
    out = []
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            event = Event.FromString(data[i + 12:i + 12 + n])
            out += [(event.step, v) for v in event.summary.value]
            i += 12 + n + 4
    return out


class FakeWandb(types.ModuleType):
    """Records what a `wandb` module is given."""

    def __init__(self):
        super().__init__("wandb")
        self.logged, self.inits, self.finished = [], [], False

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return self

    def log(self, data, step):
        self.logged.append((step, dict(data)))

    def finish(self):
        self.finished = True


def test_a_run_logs_jsonl_keys_lr_histograms_and_samples(tmp_path, monkeypatch):
    """A 2-step run with evals at steps 0 and 2 (avg@2) and a fake wandb: every TensorBoard
    scalar tag and every W&B key is a metrics.jsonl key of that step (before: `eval/avg@2`
    became `eval/avg_2`), `lr` is logged each step, each step has histograms and each eval
    its sample completions as text."""
    wandb = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    c = _config("ada_balance", **{"rl.steps": 2, "eval.every": 2, "eval.k": 2,
                                  "eval.prompts": 8, "log.wandb": True,
                                  "log.wandb_project": "proj"})
    wd = str(tmp_path / "run")
    train.train_and_evaluate(c, wd)
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        records = {r["step"]: r for r in map(json.loads, f)}
    assert sorted(records) == [0, 1, 2]
    numbers = {s: {k: v for k, v in r.items() if k != "step" and isinstance(v, (int, float))
                   and np.isfinite(v)} for s, r in records.items()}
    events = read_events(os.path.join(wd, "tb"))
    scalars = {s: {v.tag: v.simple_value for st, v in events if st == s and v.HasField(
        "simple_value")} for s in records}
    for s in records:
        assert scalars[s].keys() == numbers[s].keys()
        assert scalars[s] == pytest.approx(numbers[s], rel=1e-5)  # float32 in the protos
    assert "eval/avg@2" in scalars[2] and "eval/avg@2" in scalars[0]
    for s in (1, 2):
        assert records[s]["lr"] == train.learning_rate(c, s - 1) > 0
    hists = {(s, v.tag) for s, v in events if v.HasField("histo")}
    assert hists == {(s, f"hist/{k}") for s in (1, 2)
                     for k in ("pass_rate", "samples_per_prompt", "kept_per_prompt",
                               "response_length")}
    texts = {s: v.tensor.string_val[0].decode() for s, v in events
             if v.tag == "eval/samples/text_summary"}
    assert sorted(texts) == [0, 2]
    assert 1 <= texts[2].count("**level") <= 4 and "completion:" in texts[2]
    assert wandb.inits[0]["project"] == "proj" and wandb.inits[0]["config"]["log"]["wandb"]
    assert [s for s, _ in wandb.logged] == [0, 1, 2]
    assert all(d == numbers[s] for s, d in wandb.logged)
    assert wandb.finished


def test_learning_rate_is_the_optimizers(tmp_path):
    """train.learning_rate equals the rate learn.make_optimizer applies: with zero gradients
    and weight decay 1 on a parameter of 1, AdamW's update is exactly -lr."""
    c = _config("grpo", **{"optim.warmup_steps": 5, "optim.weight_decay": 1.0,
                           "rl.minibatches": 2})
    opt = learn.make_optimizer(c)
    params = {"model": {"w": jnp.ones(())}, "daro": jnp.zeros((1,))}
    state = opt.init(params)
    zeros = jax.tree.map(jnp.zeros_like, params)
    applied = []
    for _ in range(8):  # 4 RL steps of 2 minibatches
        updates, state = opt.update(zeros, state, params)
        applied.append(-float(updates["model"]["w"]))
    assert applied[1::2] == pytest.approx([train.learning_rate(c, s) for s in range(4)])
    assert applied[-1] == pytest.approx(c.optim.lr)


def test_wandb_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    c = _config("grpo", **{"log.wandb": True})
    with pytest.raises(ImportError, match="log.wandb=True needs the wandb package: pip install"):
        metrics_log.MetricsWriter(str(tmp_path), 0, c)
    with pytest.raises(ImportError, match="needs the wandb package"):  # at once: no SFT first
        train.train_and_evaluate(c, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    metrics_log.MetricsWriter(str(tmp_path), 0, _config("grpo")).close()  # off by default


def test_tensorboard_logging_does_not_load_torch(tmp_path):
    """tensorboardX imports torch where it is installed; the writer keeps it out (0.2 GiB of a
    CPU host's run), and `import torch` still works afterwards."""
    code = ("import sys; from ada_jax import metrics_log; "
            f"w = metrics_log.MetricsWriter({str(tmp_path)!r}, 0); "
            "w.write(0, {'loss': 1.5}, {'x': [1.0, 2.0]}); w.close(); "
            "print('torch' in sys.modules); import torch; print(torch.zeros(1).sum().item())")
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert got == ["False", "0.0"]
    assert [v.tag for _, v in read_events(str(tmp_path / "tb"))][:1] == ["loss"]
