"""The collection-policy registry (ada_jax/collect.py POLICIES): every registered policy
declares what the contract in ada_jax/policies/__init__.py asks of it, so a new method that
forgets a piece fails here, not in a run."""
import pytest

from ada_jax import collect, config_check
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
        assert c.adaptive[field] == (list(s.default) if isinstance(s.default, tuple)
                                     else s.default) or c.adaptive[field] == s.default
        assert config_doc.FIELDS[f"adaptive.{field}"] == (s.meaning, s.elsewhere)


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
