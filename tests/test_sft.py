"""SFT warm start (ada_jax/sft.py): a killed SFT resumes bitwise from its progress checkpoint;
one cached base per SFT config, shared by every workdir."""
import json
import os
import threading
import time

import jax
import numpy as np
import pytest

from ada_jax import sft, sharding
from ada_jax.tokenizer import load_tokenizer
from tests.test_train import _config

# Tiny: a 2-layer model, SFT batches of 4 rows of 24 + 8 tokens (one shape: one compile).
TINY = {"sft.batch_size": 4, "sft.warmup_steps": 1, "sampling.max_prompt_len": 24,
        "sampling.max_new_tokens": 8, "task.train_size": 256}


def _tiny(steps, **overrides):
    c = _config("grpo", **{**TINY, "sft.steps": steps, **overrides})
    return c, sharding.make_mesh(c.mesh), load_tokenizer(c)


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
    _, want = sft.train_base(c, str(tmp_path / "ref"), mesh, tok)
    run = str(tmp_path / "run")
    batches, rows = [], sft.sft_rows

    def killed_at_batch_4(*args, **kw):
        batches.append(1)
        if len(batches) == 4:
            raise Killed
        return rows(*args, **kw)
    monkeypatch.setattr(sft, "sft_rows", killed_at_batch_4)
    with pytest.raises(Killed):
        sft.train_base(c, run, mesh, tok)
    assert sorted(os.listdir(os.path.join(run, "progress"))) == ["2"]
    batches.clear()
    _, got = sft.train_base(c, run, mesh, tok)
    assert len(batches) == 2  # steps 3 and 4 only
    _assert_equal(got, want)
    assert not os.path.exists(os.path.join(run, "progress"))


def _bases(cache):
    return sorted(d for d in os.listdir(cache / "bases") if not d.endswith(".lock"))


def test_workdirs_with_one_sft_config_share_one_cached_base(tmp_path, monkeypatch):
    """Two workdirs (and another algo) with the same SFT config: SFT runs once, into
    $ADA_JAX_CACHE/bases/<key>; a changed SFT field gets a new base; sft.base_dir and an
    existing <workdir>/base still win."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ADA_JAX_CACHE", str(cache))
    trained, train_base = [], sft.train_base

    def counting(config, out_dir, *args, **kw):
        trained.append(out_dir)
        return train_base(config, out_dir, *args, **kw)
    monkeypatch.setattr(sft, "train_base", counting)
    c, mesh, tok = _tiny(2)
    _, first = sft.load_base(c, str(tmp_path / "wd1"), mesh, tok)
    other = _config("ada_balance", **TINY, **{"sft.steps": 2, "rl.steps": 7})
    _, again = sft.load_base(other, str(tmp_path / "wd2"), mesh, tok)
    assert len(trained) == 1 and _bases(cache) == [os.path.basename(trained[0])]
    _assert_equal(again, first)
    with open(os.path.join(trained[0], "sft_config.json")) as f:
        assert json.load(f)["sft"]["steps"] == 2
    assert not os.path.exists(tmp_path / "wd1") and not os.path.exists(tmp_path / "wd2")
    changed, _, _ = _tiny(2, **{"sft.lr": 1e-3})
    sft.load_base(changed, str(tmp_path / "wd3"), mesh, tok)
    assert len(trained) == 2 and len(_bases(cache)) == 2
    for field, value in (("task.max_level", 5), ("seed", 1), ("sampling.max_prompt_len", 64)):
        if "." in field:
            moved, _, _ = _tiny(2, **{field: value})
        else:
            moved, _, _ = _tiny(2)
            moved[field] = value
        assert sft.base_dir(moved, "wd", tok) not in trained, field
    c.sft.base_dir = str(tmp_path / "mine")
    assert sft.base_dir(c, str(tmp_path / "wd1"), tok) == str(tmp_path / "mine")
    c.sft.base_dir = ""
    os.makedirs(tmp_path / "old" / "base")  # a run from before the cache keeps its base
    assert sft.base_dir(c, str(tmp_path / "old"), tok) == str(tmp_path / "old" / "base")


def test_one_run_at_a_time_trains_a_shared_base(tmp_path):
    """Runs started together on one cache entry: the second waits for the first's lock (then
    finds its base) instead of training into the same directory."""
    path, order = str(tmp_path / "bases" / "key"), []

    def first():
        with sft._exclusive(path):
            order.append("first in")
            time.sleep(0.3)
            order.append("first out")
    t = threading.Thread(target=first)
    t.start()
    while not order:
        time.sleep(0.01)
    with sft._exclusive(path):
        order.append("second in")
    t.join()
    assert order == ["first in", "first out", "second in"]


def test_the_base_cache_key_follows_what_sft_depends_on():
    """The reward and RL fields do not change the cached base; an SFT field does."""
    from configs.base import get_config
    config = get_config("task=families,smoke=True")
    tok = load_tokenizer(config)
    key = lambda c: sft.sft_key(sft.sft_fingerprint(c, tok))
    ref = key(config)
    other = get_config("task=families,smoke=True,algo=grpo")
    other.task.reward = "reading"
    other.rl.n = 8
    assert key(other) == ref
    other.sft.steps += 1
    assert key(other) != ref


def test_environment_names_what_a_base_depends_on_besides_its_config():
    """sft.environment (recorded in a base's pass_rates.json): the JAX and jaxlib versions,
    the backend and device, and the CPU, whose float rounding makes another base."""
    import importlib.metadata
    env = sft.environment()
    assert env["jax"] == jax.__version__ and env["jaxlib"] == importlib.metadata.version("jaxlib")
    assert env["backend"] == jax.default_backend() == "cpu"
    assert env["device"] == jax.devices()[0].device_kind and env["cpu"]
    json.dumps(env)  # goes into pass_rates.json
