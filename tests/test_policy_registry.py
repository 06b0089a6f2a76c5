"""The collection-policy registry (ada_jax/collect.py POLICIES): every registered policy
declares what the contract in ada_jax/policies/__init__.py asks of it, so a new method that
forgets a piece fails here, not in a run."""
import re
import types

import pytest

from ada_jax import collect, config_check
from ada_jax.policies.settings import Setting
from tests.test_plots import ROOT

MODES = ("stream", "hints")  # chosen by adaptive.mode / rl.hints, not adaptive.policy


@pytest.mark.parametrize("name", sorted(collect.POLICIES))
def test_a_registered_policy_declares_every_piece(name):
    m = collect.POLICIES[name]
    assert callable(getattr(m, "collect", None)), f"{name}: no collect"
    assert isinstance(getattr(m, "LABEL", None), str) and m.LABEL, f"{name}: no LABEL"
    assert m.__doc__ and len(m.__doc__) > 80, f"{name}: no module docstring stating its rule"
    ck, rs, init = (hasattr(m, h) for h in ("checkpoint", "restore", "init_state"))
    assert ck == rs and (init or not ck), f"{name}: checkpoint and restore (and init_state)"
    if name not in MODES:
        assert name in config_check._CHOICES["adaptive.policy"], f"{name}: not a config choice"


def test_every_policy_choice_is_registered_and_has_a_preset():
    """Each adaptive.policy choice runs a module; the policies that declare settings have a
    reproduce preset that runs them (scripts/reproduce.sh reads `collect.presets`), and each
    declared setting is in the default config with its declared default and is documented."""
    from ada_jax import config_doc
    from configs import base
    presets = collect.presets()
    for name in config_check._CHOICES["adaptive.policy"]:
        assert name in collect.POLICIES
        m = collect.POLICIES[name]
        if hasattr(m, "SETTINGS"):
            assert any(name in spec or f"algo={name}|" in spec for spec in presets.values()), \
                name
    c = base.get_config("")
    for field, s in collect.settings().items():
        group, name = field.split(".")
        assert c.adaptive[group][name] == s.default, field
        assert config_doc.FIELDS[f"adaptive.{field}"] == (s.meaning, s.elsewhere)


# The engine's fields every policy shares: the only flat ones in adaptive.
SHARED = {"policy", "exit_rule", "mode", "k_pos", "k_neg", "samples_per_round", "max_rounds",
          "at_budget", "slots", "chunk_len", "select_order", "min_pool", "overcommit"}


def test_policy_settings_are_groups_named_after_their_modules():
    """adaptive holds the shared engine fields and one group per module that declares
    SETTINGS, adaptive.<module name>, with exactly its fields: a policy's field hard-coded in
    configs/base.py, or a module whose settings are not a group, fails here."""
    from configs import base
    c = base.get_config("")
    groups = collect.groups()
    assert set(c.adaptive.keys()) == SHARED | set(groups)
    for m in set(collect.POLICIES.values()):
        name = m.__name__.rsplit(".", 1)[-1]
        if getattr(m, "SETTINGS", None):
            assert groups[name] is m.SETTINGS and collect.group(m) == name
            assert all(isinstance(s, Setting) for s in m.SETTINGS.values()), name
            assert set(c.adaptive[name].keys()) == set(m.SETTINGS), name
        else:
            assert name not in groups and name not in c.adaptive, name
        assert callable(getattr(m, "check", len)), f"{name}: check is not a function"
    for group, fields in groups.items():  # est, gvm, dapo, stream declare theirs like the rest
        assert fields, group
    assert {"est", "gvm", "dapo", "stream", "knapsack", "vip", "greso", "pilot_commit",
            "conformal"} <= set(groups)


# A value each kind refuses (Setting.kind); "any" is the module's own check.
BAD = {"positive_int": 0, "positive": 0.0, "non_negative": -1.0, "unit": 1.5, "open_unit": 1.0,
       "bool": "yes"}


@pytest.fixture(scope="module")
def page():
    """docs/config.md as config_doc renders it from the live defaults."""
    from ada_jax import config_doc
    from configs import base
    return config_doc.reference(base.get_config)


@pytest.mark.parametrize("field", sorted(collect.settings()))
def test_every_setting_is_validated_by_its_kind_with_its_dotted_name(field, page):
    """config_check refuses a value of the wrong kind for adaptive.<group>.<field>, naming it
    (the defaults pass); config_doc renders its meaning in docs/config.md."""
    from configs import base
    s = collect.settings()[field]
    group, name = field.split(".")
    assert f"| `adaptive.{field}` |" in page and s.meaning.split("(")[0].strip() in page
    c = base.get_config("")
    config_check.validate(c)
    if s.kind == "any":
        return
    bad = "__none_of_them__" if s.kind.startswith("choice:") else BAD[s.kind]
    with c.ignore_type():
        c.adaptive[group][name] = bad
    with pytest.raises(ValueError, match=re.escape(f"config.adaptive.{field}={bad!r}")):
        config_check.validate(c)


def test_reproduce_reads_the_presets(tmp_path):
    """`python -m ada_jax.collect presets` prints name=variant|flags lines reproduce.sh reads."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "ada_jax.collect", "presets"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    got = dict(line.split("=", 1) for line in out)
    assert got == collect.presets() and {"knapsack", "vip", "greso", "pilot_commit",
                                         "conformal"} <= set(got)
    with open(f"{ROOT}/scripts/reproduce.sh") as f:
        assert "python -m ada_jax.collect presets" in f.read()


def test_every_reproduce_arm_names_fields_the_config_has():
    """Each arm of scripts/reproduce.sh (its own METHODS and the modules' PRESETS) sets only
    fields the config has (a renamed field left in a preset would stop that arm at start)."""
    with open(f"{ROOT}/scripts/reproduce.sh") as f:
        arms = dict(re.findall(r'^\s+\[(\w+)\]="([^"]*)"$', f.read(), re.M))
    arms.update(collect.presets())
    assert {"grpo_n4", "ada_balance_stream_onpolicy", "dapo", "est_log", "greso"} <= set(arms)
    for name, spec in arms.items():
        variant, flags = spec.split("|")
        argv = ["prog", f"--config={ROOT}/configs/base.py:{variant}", *flags.split()]
        assert config_check.unknown_override(argv, "") is None, (name, spec)
    stale = ["prog", f"--config={ROOT}/configs/base.py:algo=dapo",
             "--config.adaptive.dapo_max_gen_batches=32"]
    assert "adaptive.dapo.max_gen_batches" in config_check.unknown_override(stale, "")


def test_a_new_policy_is_one_module_and_one_registry_row(tmp_path, monkeypatch):
    """A policy module written here, registered in collect.POLICIES (and so a config choice),
    runs an RL step of the smoke config with nothing else changed: the loop takes its group
    size (3 samples a prompt, all trained) and cross-step state from the module alone."""
    from ada_jax import train
    from ada_jax.policies import rollout
    from tests.test_train import _config, _restore

    toy = types.ModuleType("ada_jax.policies.toy", "Toy: every prompt gets 3 samples in one "
                           "engine call, all trained; it counts its steps across the run.")
    toy.LABEL = "Toy"
    toy.group_size = lambda config: (3, 3)
    toy.init_state = lambda ctx, params: {"toy_steps": 0}
    toy.checkpoint = lambda state: {"toy_steps": state["toy_steps"]}
    toy.restore = lambda meta: {"toy_steps": meta.get("toy_steps", 0)}

    def collect_toy(ctx, params, iterator, key, state):
        state["toy_steps"] += 1
        return rollout.run_engine(ctx, params, next(iterator), key)
    toy.collect = collect_toy
    monkeypatch.setitem(collect.POLICIES, "toy", toy)
    monkeypatch.setattr(collect, "_MODULES", collect._MODULES + (toy,))
    monkeypatch.setitem(config_check._CHOICES, "adaptive.policy",
                        config_check._CHOICES["adaptive.policy"] + ("toy",))
    c = _config("grpo", **{"adaptive.policy": "toy", "rl.steps": 1, "rl.minibatches": 1})
    engine, group, rows = collect.engine_config(c)
    assert (engine.keep, engine.samples_per_round, engine.max_rounds, group, rows) == (
        3, 3, 1, 3, 3)
    assert engine.slots == min(c.adaptive.slots, 3 * c.rl.prompts_per_step)
    met = train.train_and_evaluate(c, str(tmp_path))
    assert met["samples_per_prompt_mean"] == 3
    assert met["samples_trained"] == 3 * c.rl.prompts_per_step * c.rl.ppo_epochs
    assert _restore(str(tmp_path))[2]["toy_steps"] == 1
