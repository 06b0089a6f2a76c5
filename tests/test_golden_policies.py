"""Each method's behaviour, pinned: three steps of every algorithm and collection policy on a
small deterministic run (embedded task, synthetic reward, random init, a recurring pool of 8
prompts so the history policies use their history), with per step the samples generated,
launched and trained, every prompt's pool size and kept group size, the advantages' sum and
absolute sum, the loss, the gradient norm and the reward. A change in what a method does then
fails here instead of moving a documented result.

When a change is meant to alter a method's behaviour, regenerate and review the diff:
  ADA_JAX_REGEN_GOLDEN=1 python -m pytest tests/test_golden_policies.py
  git diff tests/golden/policies.json
"""
import json
import os

import numpy as np
import pytest

from ada_jax import train
from configs import base
from tests import helpers

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "policies.json")
STEPS = 3
COMMON = {"sft.steps": 0, "task.reward": "synthetic", "eval.every": 0, "log.progress": False,
          "task.train_size": 8, "rl.steps": STEPS, "checkpoint.every": STEPS,
          "model.d_model": 32, "model.n_layers": 1, "model.d_ff": 64, "model.n_heads": 2,
          "model.n_kv_heads": 1, "model.head_dim": 16}
# arm -> (config variant, overrides): every algorithm, then the policies that are not an algo
ARMS = {name: (f"algo={name}", {}) for name in base.ALGOS}
ARMS.update({
    "greso": ("algo=dapo", {"adaptive.policy": "greso"}),
    "pilot_commit": ("algo=grpo", {"adaptive.policy": "pilot_commit"}),
    "conformal": ("algo=grpo", {"adaptive.policy": "conformal"}),
    "ada_balance_stream": ("algo=ada_balance", {"adaptive.mode": "stream"}),
    "ada_balance_rounds": ("algo=ada_balance", {"adaptive.mode": "rounds"}),
    "grpo_sage": ("algo=grpo", {"rl.hints": "sage", "sampling.max_prompt_len": 96,
                                "model.max_len": 128}),  # room for the hints
})
INTS = ("samples_total", "samples_launched", "samples_trained", "generated_tokens")
FLOATS = ("adv_sum", "adv_abs_sum", "loss", "grad_norm", "reward_mean")
LISTS = ("samples_per_prompt", "kept_per_prompt")  # per prompt, from the step's histograms


def _run(arm: str, workdir: str, monkeypatch) -> list[dict]:
    variant, extra = ARMS[arm]
    c = base.get_config(f"{variant},smoke=True,task=embedded")
    c.unlock()
    for k, v in {**COMMON, **extra}.items():
        helpers.set_field(c, k, v)
    records = []
    write = train.MetricsWriter.write

    def capture(self, step, metrics, histograms=None):
        if step > 0:
            assert 0 <= metrics["careful_share"] <= 1  # the task's own metric (Task.train_metrics)
            rec = {k: metrics[k] for k in INTS} | {k: float(metrics[k]) for k in FLOATS}
            rec |= {k: [int(x) for x in np.asarray(histograms[k])] for k in LISTS}
            records.append(rec)
        return write(self, step, metrics, histograms)

    monkeypatch.setattr(train.MetricsWriter, "write", capture)
    train.train_and_evaluate(c, workdir)
    return records


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_method_behaviour_is_pinned(arm, tmp_path, monkeypatch):
    got = _run(arm, str(tmp_path), monkeypatch)
    assert len(got) == STEPS
    want = {}
    if os.path.exists(GOLDEN):
        with open(GOLDEN) as f:
            want = json.load(f)
    if os.environ.get("ADA_JAX_REGEN_GOLDEN"):
        want[arm] = got
        with open(GOLDEN, "w") as f:
            json.dump(want, f, indent=1, sort_keys=True)
    assert arm in want, f"no golden record of {arm}: regenerate (module docstring)"
    for step, (g, w) in enumerate(zip(got, want[arm]), 1):
        for k in INTS + LISTS:
            assert g[k] == w[k], f"{arm} step {step}: {k} {g[k]} != pinned {w[k]}"
        for k in FLOATS:
            np.testing.assert_allclose(g[k], w[k], rtol=1e-3, atol=1e-5,
                                       err_msg=f"{arm} step {step}: {k}")


def test_the_pinned_methods_differ():
    """The table itself: the arms do different things (a shared bug that made every method
    uniform sampling would not pass), and the sequential ones sample more than they train."""
    with open(GOLDEN) as f:
        want = json.load(f)
    assert set(want) == set(ARMS)
    pools = {arm: tuple(tuple(r["samples_per_prompt"]) for r in recs)
             for arm, recs in want.items()}
    assert len(set(pools.values())) >= 8
    for arm in ("ada_pos", "ada_balance"):
        assert sum(r["samples_total"] for r in want[arm]) > sum(
            r["samples_trained"] for r in want[arm])
    # a group baseline's advantages sum to zero per group; the pool baseline's need not
    assert all(abs(r["adv_sum"]) < 1e-4 for r in want["rloo"])
    assert any(abs(r["adv_sum"]) > 1e-3 for r in want["ada_pos"])
