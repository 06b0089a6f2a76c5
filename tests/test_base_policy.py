"""The run's starting policy (ada_jax/base_policy.py): one cached SFT base per SFT config,
shared by every workdir, trained by one run at a time; what a base's key and report hold.
(The pretrained folder's import: tests/test_pretrained_config.py.)"""
import json
import os
import threading
import time

import jax

from ada_jax import base_policy, sft, sharding
from ada_jax.tokenizer import load_tokenizer
from tests.test_sft import TINY, _assert_equal, _tiny
from tests.test_train import _config


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
    _, first = base_policy.load(c, str(tmp_path / "wd1"), mesh, tok)
    other = _config("ada_balance", **TINY, **{"sft.steps": 2, "rl.steps": 7})
    _, again = base_policy.load(other, str(tmp_path / "wd2"), mesh, tok)
    assert len(trained) == 1 and _bases(cache) == [os.path.basename(trained[0])]
    _assert_equal(again, first)
    with open(os.path.join(trained[0], "sft_config.json")) as f:
        assert json.load(f)["sft"]["steps"] == 2
    assert not os.path.exists(tmp_path / "wd1") and not os.path.exists(tmp_path / "wd2")
    changed, _, _ = _tiny(2, **{"sft.lr": 1e-3})
    base_policy.load(changed, str(tmp_path / "wd3"), mesh, tok)
    assert len(trained) == 2 and len(_bases(cache)) == 2
    for field, value in (("task.max_level", 5), ("seed", 1), ("sampling.max_prompt_len", 64)):
        if "." in field:
            moved, _, _ = _tiny(2, **{field: value})
        else:
            moved, _, _ = _tiny(2)
            moved[field] = value
        assert base_policy.base_dir(moved, "wd", tok) not in trained, field
    c.sft.base_dir = str(tmp_path / "mine")
    assert base_policy.base_dir(c, str(tmp_path / "wd1"), tok) == str(tmp_path / "mine")
    c.sft.base_dir = ""
    os.makedirs(tmp_path / "old" / "base")  # a run from before the cache keeps its base
    assert base_policy.base_dir(c, str(tmp_path / "old"), tok) == str(tmp_path / "old" / "base")


def test_one_run_at_a_time_trains_a_shared_base(tmp_path):
    """Runs started together on one cache entry: the second waits for the first's lock (then
    finds its base) instead of training into the same directory."""
    path, order = str(tmp_path / "bases" / "key"), []

    def first():
        with base_policy._exclusive(path):
            order.append("first in")
            time.sleep(0.3)
            order.append("first out")
    t = threading.Thread(target=first)
    t.start()
    while not order:
        time.sleep(0.01)
    with base_policy._exclusive(path):
        order.append("second in")
    t.join()
    assert order == ["first in", "first out", "second in"]


def test_the_base_cache_key_follows_what_sft_depends_on():
    """The reward and RL fields do not change the cached base; an SFT field does."""
    from configs.base import get_config
    config = get_config("task=families,smoke=True")
    tok = load_tokenizer(config)
    key = lambda c: base_policy.sft_key(base_policy.sft_fingerprint(c, tok))
    ref = key(config)
    other = get_config("task=families,smoke=True,algo=grpo")
    other.task.reward = "reading"
    other.rl.n = 8
    assert key(other) == ref
    other.sft.steps += 1
    assert key(other) != ref


def test_environment_names_what_a_base_depends_on_besides_its_config():
    """base_policy.environment (recorded in a base's pass_rates.json): the JAX and jaxlib versions,
    the backend and device, and the CPU, whose float rounding makes another base."""
    import importlib.metadata
    env = base_policy.environment()
    assert env["jax"] == jax.__version__ and env["jaxlib"] == importlib.metadata.version("jaxlib")
    assert env["backend"] == jax.default_backend() == "cpu"
    assert env["device"] == jax.devices()[0].device_kind and env["cpu"]
    json.dumps(env)  # goes into pass_rates.json


def test_the_family_task_default_starts_from_the_shipped_base(tmp_path, monkeypatch):
    """The main job's SFT config (and any algorithm's: RL fields are not in the key) has a
    base in the package; it loads read-only, with no SFT and nothing written beside it; a
    changed SFT field goes to the cache; scripts/sft.py (shipped=False) passes over it."""
    from configs import base

    monkeypatch.setenv("ADA_JAX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sft, "train_base", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError("SFT ran")))
    c = base.get_config("")
    tok = load_tokenizer(c)
    where, _, kind = base_policy._where(c, str(tmp_path / "wd"), tok)
    assert kind == "shipped" and os.path.dirname(where) == base_policy.SHIPPED
    with open(os.path.join(where, "sft_config.json")) as f:
        assert base_policy.sft_key(json.load(f)) == os.path.basename(where)
    with open(os.path.join(where, "made_by.json")) as f:
        made = json.load(f)
    assert made["commit"] and made["cpu"] and made["sft_steps"] == c.sft.steps
    other = base.get_config("algo=grpo")
    assert base_policy._where(other, str(tmp_path / "wd"), tok)[0] == where
    before = sorted(os.listdir(where))
    c.unlock()
    c.mesh.update(data=1, fsdp=1, tensor=1)
    mesh = sharding.make_mesh(c.mesh, jax.devices()[:1])
    _, params = base_policy.load(c, str(tmp_path / "wd"), mesh, tok)
    assert sorted(os.listdir(where)) == before and not os.path.exists(where + ".lock")
    leaves = jax.tree.leaves(params)
    assert leaves and all(bool(jax.numpy.isfinite(x).all()) for x in leaves)
    assert base_policy._where(c, str(tmp_path / "wd"), tok, shipped=False)[2] == "cache"
    c.sft.steps += 1
    assert base_policy._where(c, str(tmp_path / "wd"), tok)[2] == "cache"
    c.sft.steps -= 1  # a model field added since the base was made: set, it is another base
    for name in base_policy._LATER_MODEL_FIELDS:
        default = getattr(c.model, name)
        setattr(c.model, name, (not default) if isinstance(default, bool) else default + 1)
        assert base_policy._where(c, str(tmp_path / "wd"), tok)[2] == "cache", name
        setattr(c.model, name, default)
    assert base_policy._where(c, str(tmp_path / "wd"), tok)[0] == where
