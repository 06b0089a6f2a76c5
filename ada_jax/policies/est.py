"""Reinforce-Ada-Est (adaptive.policy='est'): each prompt's sample budget from its pass-rate
history across steps (docs/spec.md §4), one engine call, the history updated with the step's pools.
Settings: adaptive.est.*.

State: `state["est"]`, problem id → decayed (N_tot, N_pos); checkpointed as `est_history`.
The knapsack and vip policies read and update the same history (`counts`, `update_history`).
"""
import numpy as np

from ada_jax import objectives, sharding
from ada_jax.policies import rollout
from ada_jax.policies.settings import Setting

LABEL = "Ada-Est"  # the display name (plots, tables)
PRESETS = {"ada_est": "algo=ada_est|",
           "est_log": "algo=ada_est|--config.adaptive.est.weight=optimal --config.rl.objective=log",
           "est_power": "algo=ada_est|--config.adaptive.est.weight=optimal "
                        "--config.rl.objective=power"}
SETTINGS = {
    "decay": Setting(0.9, "Ada-Est: history decay of a prompt's pass rate", "—", "unit"),
    "alpha": Setting(1.0, "Ada-Est: Beta prior alpha of the pass rate", "—", "positive"),
    "beta": Setting(16.0, "Ada-Est: Beta prior beta of the pass rate", "—", "positive"),
    "weight": Setting("inv_sqrt", "Ada-Est allocation weight: inv_sqrt, inv, optimal", "—",
                      "choice:inv_sqrt/inv/optimal"),
    "budget_per_prompt": Setting(8, "Ada-Est: mean samples per prompt", "—", "positive_int"),
}


def group_size(config) -> tuple[int, int]:
    return rollout.capped_group(config.adaptive.est.budget_per_prompt)


def init_state(ctx, params) -> dict:
    return {"est": {}}


def checkpoint(state) -> dict:
    return {"est_history": state["est"]}


def restore(meta) -> dict:
    return {"est": {k: tuple(v) for k, v in meta["est_history"].items()}}


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    """Budgets are solved over the whole batch (every process's ids, so every process alike);
    the history is the same on every process too."""
    got, budgets = collect_budgeted(ctx, params, iterator, key, state, _budgets)
    got.metrics["est_budget_max"] = int(budgets.max())
    return got


def collect_budgeted(ctx, params, iterator, key, state, budgets_for):
    """One engine call at the budgets `budgets_for(config, ids, history)` gives the whole
    batch (every process's problem ids), then the history updated: the step of est, knapsack
    and vip. Returns (Collected, budgets)."""
    c = ctx.config
    problems = next(iterator)
    ids = [i for part in sharding.allgather_json([p.id for p in problems]) for i in part]
    budgets = budgets_for(c, ids, state["est"])
    got = rollout.run_engine(ctx, params, problems, key, rollout.own_share(budgets))
    update_history(c, ids, got.batch, state["est"])
    return got, budgets


def _budgets(config, ids, history) -> np.ndarray:
    """Budgets of the prompts with these problem ids (the whole batch) from their history."""
    a = config.adaptive.est
    p_hat = []
    for i in ids:
        n_tot, n_pos = history.get(str(i), (0.0, 0.0))
        p_hat.append((n_pos + a.alpha) / (n_tot + a.alpha + a.beta))
    total = a.budget_per_prompt * len(ids)
    return objectives.est_allocation(np.asarray(p_hat), total, kind=a.weight,
                                     objective=config.rl.objective,
                                     alpha=config.rl.objective_alpha, n_min=1,
                                     n_max=4 * a.budget_per_prompt)


def counts(ids, history) -> tuple[np.ndarray, np.ndarray]:
    """The decayed (N_tot, N_pos) of the prompts with these problem ids, (0, 0) if unseen: the
    history the knapsack and vip policies read too."""
    got = np.asarray([history.get(str(i), (0.0, 0.0)) for i in ids], np.float64).reshape(-1, 2)
    return got[:, 0], got[:, 1]


def update_history(config, ids, batch, history):
    """Fold this step's pools (the whole batch's counters) into the history."""
    a = config.adaptive.est
    n = np.asarray(batch.pool_n_B)
    k = np.asarray(batch.pool_pos_B)
    for i, n_t, k_t in zip(ids, n, k):
        n_tot, n_pos = history.get(str(i), (0.0, 0.0))
        n_tot, n_pos, _ = objectives.est_update(n_tot, n_pos, float(n_t), float(k_t),
                                                a.decay, a.alpha, a.beta)
        history[str(i)] = (float(n_tot), float(n_pos))
