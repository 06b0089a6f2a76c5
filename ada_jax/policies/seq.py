"""Ada-Seq (adaptive.policy='seq') and uniform sampling ('uniform'): one engine call on the
step's prompt batch. Seq gives each prompt up to M·R samples and stops it at its exit rule
(pos / balance); uniform gives each prompt its n rows. No state across steps."""
from ada_jax.policies import rollout


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    return rollout.run_engine(ctx, params, next(iterator), key)
