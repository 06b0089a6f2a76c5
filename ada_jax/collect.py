"""The table of collection policies (ada_jax/policies/: one module each, see its docstring):
`collect` hands a step to the configured policy's module; `engine_fields`,
`max_samples_per_prompt`, `useful_slots` and `engine_config` and `prompts_in_flight` read what it asks of the engine;
`init_state`, `checkpoint`, `restore`, `arrays` and `restore_arrays` gather the cross-step
state the policies declare; `groups`, `settings`, `check`, `presets` and `label` read what
each module declares for configs/base.py, config_check, config_doc, scripts/reproduce.sh and
plots.

  python -m ada_jax.collect presets    # the reproduce presets, one "name=variant|flags" a line
"""
import numpy as np

from ada_jax import adaptive
from ada_jax.policies import dapo, est, gvm, hints, rollout, seq, stream
from ada_jax.policies import conformal, greso, knapsack, pilot_commit, vip
from ada_jax.tasks import task_of

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


def _asking(config) -> tuple:
    """The modules that shape a run's engine: adaptive.policy's, then the one that runs the
    step over it where that differs (stream, hints)."""
    return tuple(dict.fromkeys((POLICIES[config.adaptive.policy],
                                POLICIES[policy_name(config)])))


def engine_fields(config) -> tuple[dict, int, int]:
    """(adaptive.EngineConfig's per-policy fields, G kept samples per prompt, training rows per
    prompt). adaptive.policy's module gives (G, rows) (`group_size`); the fields default to G
    samples a prompt in one round of adaptive.mode, all kept, and each module's
    `engine_fields` changes them (seq: rounds and exit rule; stream: the refill engine)."""
    group, rows = POLICIES[config.adaptive.policy].group_size(config)
    fields = dict(keep=group, exit_rule="none", samples_per_round=group, max_rounds=1,
                  mode=config.adaptive.mode)
    for m in _asking(config):
        if hasattr(m, "engine_fields"):
            fields.update(m.engine_fields(config))
    return fields, group, rows


def max_samples_per_prompt(config) -> int:
    """The most samples one prompt can take in one engine call (its largest budget)."""
    fields = engine_fields(config)[0]
    return fields["samples_per_round"] * fields["max_rounds"]


def prompts_in_flight(config) -> int:
    """Prompts in progress at once: the step's B plus those admitted ahead of it (a module's
    `prompts_ahead`: stream)."""
    return config.rl.prompts_per_step + sum(m.prompts_ahead(config) for m in _asking(config)
                                            if hasattr(m, "prompts_ahead"))


def group(module) -> str:
    """The config group of a policy module's settings: its module name (adaptive.<name>)."""
    return module.__name__.rsplit(".", 1)[-1]


def groups() -> dict:
    """{group: the module's SETTINGS} of every policy module that declares settings: the
    fields adaptive.<group>.<field>."""
    return {group(m): m.SETTINGS for m in _MODULES if getattr(m, "SETTINGS", None)}


def settings() -> dict:
    """{"<group>.<field>" under adaptive: Setting} of every policy module's settings."""
    return {f"{g}.{k}": s for g, fields in groups().items() for k, s in fields.items()}


def check(config) -> None:
    """Every policy module's own check of its settings (config_check.validate runs it)."""
    for m in _MODULES:
        if hasattr(m, "check"):
            m.check(config)


def presets() -> dict:
    """{arm name: "variant|flags"} of every policy module's PRESETS (scripts/reproduce.sh)."""
    return {k: v for m in _MODULES for k, v in getattr(m, "PRESETS", {}).items()}


def label(config: dict):
    """The display name of a run's policy from its config (the dict of config.json): the
    policy module's `label(config)` where it defines one, else its LABEL; None for an unknown
    policy or one named by its algorithm (uniform)."""
    m = POLICIES.get(config.get("adaptive", {}).get("policy"))
    if m is None:
        return None
    return m.label(config) if hasattr(m, "label") else m.LABEL


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    """This step's groups from the configured policy (`state`: `init_state`'s dict); on the
    task that knows its prompts' base pass rates (`Task.base_pass_rate`: the family task) with
    the samples of the trained prompts on hard and easy prompts counted (`base_rate_samples`)."""
    got = POLICIES[policy_name(ctx.config)].collect(ctx, params, iterator, key, state)
    if (base_pass_rate := task_of(ctx.config).base_pass_rate) is not None:
        got.metrics.update(base_rate_samples(got.problems, got.batch.pool_n_B, base_pass_rate))
    return got


def base_rate_samples(problems, pool_n_B, base_pass_rate) -> dict:
    """Samples drawn this step for the trained prompts whose base pass rate is <= 0.1
    (samples_base_p_le_0_1) and >= 0.9 (samples_base_p_ge_0_9), and in all
    (samples_base_counted): where a method spends. Samples a policy drew for prompts it then
    did not train (DAPO's dropped groups, Pilot-Commit's uncommitted pilots, conformal
    calibration) are not counted."""
    n = np.asarray(pool_n_B)
    if len(problems) != len(n):  # this process's rows of a whole-batch counter
        problems = rollout.everyone(problems)
    p = np.asarray([base_pass_rate(q) for q in problems])
    return dict(samples_base_p_le_0_1=int(n[p <= 0.1].sum()),
                samples_base_p_ge_0_9=int(n[p >= 0.9].sum()), samples_base_counted=int(n.sum()))


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


def arrays(state) -> dict:
    """Every policy's array state, saved with the params (the stream's engine)."""
    return {k: v for m in _MODULES if hasattr(m, "arrays") for k, v in m.arrays(state).items()}


def restore_arrays(state, arrays: dict, meta: dict) -> None:
    """Every policy's array state back from a checkpoint (`arrays`' entries), in place."""
    for m in _MODULES:
        if hasattr(m, "restore_arrays"):
            m.restore_arrays(state, arrays, meta)


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["presets"]:
        print("\n".join(f"{k}={v}" for k, v in presets().items()))


def useful_slots(config) -> int:
    """adaptive.slots capped at the most samples a step can have in flight: the prompts in
    progress (B, plus those a stream admits ahead) times a prompt's largest budget. A slot past
    that is never assigned, yet holds a KV cache of P + N positions and a row of V logits: the
    pretrained default of 1024 slots (sized for 8 accelerators) on a CPU step of 8 prompts x 4
    samples held 4.5 GB of caches for 32 samples, copied several times over (17 GB resident;
    docs/benchmarks.md, "Memory"). Several processes need the capped count to be a multiple
    of the devices too (`check_multihost`)."""
    return min(config.adaptive.slots,
               prompts_in_flight(config) * max_samples_per_prompt(config))


def engine_config(config) -> tuple[adaptive.EngineConfig, int, int]:
    """Static engine settings, the kept group size G and the training rows per prompt: the
    policy's own (engine_fields: its rounds, exit rule, budget cap) and the run's
    (slots, lengths, chunking, slot order)."""
    a = config.adaptive
    fields, group, rows_per_prompt = engine_fields(config)
    return adaptive.EngineConfig(slots=useful_slots(config),
                                 max_new_tokens=config.sampling.max_new_tokens,
                                 chunk_len=a.chunk_len, select_order=a.select_order,
                                 overcommit=a.overcommit, **fields), group, rows_per_prompt
