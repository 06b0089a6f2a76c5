"""The collection-policy registry (ada_jax/collect.py POLICIES): every registered policy
declares what the contract in ada_jax/policies/__init__.py asks of it, so a new method that
forgets a piece fails here, not in a run."""
import re

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
    """Each adaptive.policy choice runs a module, and scripts/reproduce.sh has a preset that
    runs it (the side by side's arms)."""
    with open(f"{ROOT}/scripts/reproduce.sh") as f:
        presets = f.read()
    for name in config_check._CHOICES["adaptive.policy"]:
        assert name in collect.POLICIES
        ran_by = re.search(rf"algo=\w+\|[^\"]*policy={name}\b", presets) or \
            re.search(rf"\[\w+\]=\"algo={name}\|", presets)
        assert name in ("uniform", "seq", "est", "gvm", "dapo") or ran_by, name
