"""Self-hinting (rl.hints='sage' or 'sage_light', over adaptive.policy 'seq' or 'uniform'):
groups that collapse (all right or all wrong) are re-rolled under hints (docs/spec.md §5).

Over the whole batch: hint levels and re-rolls are decided from replicated counters on every
process alike; each process samples its own rows (`rollout.own_share`).

State: `state["hint"]`, sage_light's hint level per problem id; checkpointed as `hint_levels`.
"""
import numpy as np

from ada_jax import hints as hint_lib
from ada_jax import selection
from ada_jax.policies import rollout

LABEL = "SAGE"  # the display name (plots, tables)


def init_state(ctx, params) -> dict:
    return {"hint": {}}


def checkpoint(state) -> dict:
    return {"hint_levels": state["hint"]}


def restore(meta) -> dict:
    return {"hint": dict(meta.get("hint_levels", {}))}


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    c = ctx.config
    own = next(iterator)
    problems = rollout.everyone(own)
    share = lambda x: None if x is None else rollout.own_share(x)  # noqa: E731

    def rerun(probs, k, budgets, hint_texts):
        got = rollout.run_engine(ctx, params, share(probs), k, share(budgets),
                                 share(hint_texts))
        return got.batch, got.prompt_BP, got.mask_BP, got.metrics

    if c.rl.hints == "sage_light":
        levels = hint_lib.light_levels(problems, state["hint"])
        batch, toks, mask, met = rerun(problems, key, None,
                                       hint_lib.light_hints(problems, levels))
        hinted = np.asarray(levels) > 0
        mixed = (np.asarray(batch.pool_pos_B) > 0) & (np.asarray(batch.pool_pos_B)
                                                      < np.asarray(batch.pool_n_B))
        met.update(hint_share=float(hinted.mean()), hint_level_mean=float(np.mean(levels)),
                   hint_mixed_share=float(mixed[hinted].mean()) if hinted.any() else 0.0)
        hint_lib.light_update(problems, batch, levels, state["hint"])
        return rollout.Collected(own, batch, toks, mask, met)
    batch, toks, mask, met = rerun(problems, key, None, None)
    before = {f"{k}_before_hints": v for k, v in selection.kept_metrics(batch).items()}
    batch, toks, mask, hmet = hint_lib.sage(rerun, problems, batch, toks, mask, key,
                                            rollout.default_budgets(ctx, len(problems)))
    for k in hint_lib.COUNTS:
        met[k] += hmet.pop(k)
    met.update(hmet, **before, **selection.kept_metrics(batch))  # what is trained on: post-hint
    return rollout.Collected(own, batch, toks, mask, met)
