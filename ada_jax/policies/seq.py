"""Ada-Seq (adaptive.policy='seq') and uniform sampling ('uniform'): one engine call on the
step's prompt batch. Seq gives each prompt up to M·R samples and stops it at its exit rule
(pos / balance); uniform gives each prompt its n rows. No state across steps."""
from ada_jax.policies import rollout

LABEL = "Ada-Seq"  # the display name; `label` names the exit rule


def label(config: dict):
    """"Ada-Seq-<exit rule>" for policy seq; None for uniform (named by its algorithm and n)."""
    a = config.get("adaptive", {})
    if a.get("policy") == "seq" and a.get("exit_rule"):
        return f"Ada-Seq-{a['exit_rule']}"
    return None


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    return rollout.run_engine(ctx, params, next(iterator), key)
