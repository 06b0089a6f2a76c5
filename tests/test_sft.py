"""SFT (ada_jax/sft.py): a killed SFT resumes bitwise from its progress checkpoint."""
import os

import jax
import numpy as np
import pytest

from ada_jax import base_policy, sft, sharding
from ada_jax.tokenizer import load_tokenizer
from tests.test_train import _config

# Tiny: a 2-layer model, SFT batches of 4 rows of 24 + 8 tokens (one shape: one compile).
TINY = {"sft.batch_size": 4, "sft.warmup_steps": 1, "sampling.max_prompt_len": 24,
        "sampling.max_new_tokens": 8, "task.train_size": 256}


def _tiny(steps, **overrides):
    c = _config("grpo", **{**TINY, "sft.steps": steps, **overrides})
    return c, sharding.make_mesh(c.mesh), load_tokenizer(c)


def _init(c, mesh):
    return base_policy.init_params(c, mesh, c.seed)


def _assert_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


class Killed(Exception):
    pass


def test_killed_sft_resumes_bitwise(tmp_path, monkeypatch):
    """SFT killed after step 3 of 4 (checkpoint every 2) resumes at step 2 and ends with the
    uninterrupted run's params exactly; its progress checkpoints go once the base is saved."""
    c, mesh, tok = _tiny(4)
    c.sft.checkpoint_every = 2
    _, want = sft.train_base(c, str(tmp_path / "ref"), mesh, tok, _init(c, mesh))
    run = str(tmp_path / "run")
    batches, rows = [], sft.sft_rows

    def killed_at_batch_4(*args, **kw):
        batches.append(1)
        if len(batches) == 4:
            raise Killed
        return rows(*args, **kw)
    monkeypatch.setattr(sft, "sft_rows", killed_at_batch_4)
    with pytest.raises(Killed):
        sft.train_base(c, run, mesh, tok, _init(c, mesh))
    assert sorted(os.listdir(os.path.join(run, "progress"))) == ["2"]
    batches.clear()
    _, got = sft.train_base(c, run, mesh, tok, _init(c, mesh))
    assert len(batches) == 2  # steps 3 and 4 only
    _assert_equal(got, want)
    assert not os.path.exists(os.path.join(run, "progress"))
