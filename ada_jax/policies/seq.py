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


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): the n kept of each pool."""
    return config.rl.n, config.rl.n


def engine_fields(config) -> dict:
    """Seq's rounds and exit rule: up to M·R samples a prompt, stopped by the rule on pools of
    at least adaptive.min_pool (0 = n); uniform: n samples in one round (the default)."""
    a = config.adaptive
    if a.policy != "seq":
        return {}
    return dict(exit_rule=a.exit_rule, k_pos=a.k_pos, k_neg=a.k_neg,
                samples_per_round=a.samples_per_round, max_rounds=a.max_rounds,
                min_pool=a.min_pool or config.rl.n)


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    return rollout.run_engine(ctx, params, next(iterator), key)
