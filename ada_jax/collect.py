"""The table of collection policies (ada_jax/policies/: one module each, see its docstring):
`collect` hands a step to the configured policy's module; `init_state`, `checkpoint` and
`restore` gather the cross-step state the policies declare."""
from ada_jax.policies import dapo, est, gvm, hints, rollout, seq, stream
from ada_jax.policies import conformal, greso, knapsack, pilot_commit, vip

POLICIES = {"uniform": seq, "seq": seq, "est": est, "gvm": gvm, "dapo": dapo,
            "hints": hints, "stream": stream}
POLICIES.update(knapsack=knapsack, vip=vip, greso=greso, pilot_commit=pilot_commit,
                conformal=conformal)  # the field's newer allocation methods
_MODULES = tuple(dict.fromkeys(POLICIES.values()))


def policy_name(config) -> str:
    """adaptive.policy, or 'stream' / 'hints' where adaptive.mode / rl.hints say so (over
    'seq' or 'uniform' only: config_check.validate)."""
    if config.adaptive.mode == "stream":
        return "stream"
    if config.rl.hints != "none":
        return "hints"
    return config.adaptive.policy


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    """This step's groups from the configured policy (`state`: `init_state`'s dict)."""
    return POLICIES[policy_name(ctx.config)].collect(ctx, params, iterator, key, state)


def init_state(ctx, params) -> dict:
    """Every policy's cross-step state at step 0."""
    return {k: v for m in _MODULES if hasattr(m, "init_state")
            for k, v in m.init_state(ctx, params).items()}


def checkpoint(state) -> dict:
    """Every policy's checkpoint metadata entries."""
    return {k: v for m in _MODULES if hasattr(m, "checkpoint")
            for k, v in m.checkpoint(state).items()}


def restore(meta) -> dict:
    """Every policy's state entries from a checkpoint's metadata."""
    return {k: v for m in _MODULES if hasattr(m, "restore") for k, v in m.restore(meta).items()}
