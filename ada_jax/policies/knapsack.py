"""Knapsack-RL (adaptive.policy='knapsack', arXiv 2509.25849): each prompt's budget N_i in
[knapsack_n_min, knapsack_n_max] maximises Σ_i (1 - p_i^N_i - (1-p_i)^N_i)·p_i(1-p_i)² under
Σ N_i = knapsack_budget_per_prompt·B (a dynamic program over integer budgets,
allocation.knapsack_allocation); one engine call, every sample trained on (GRPO on the groups).

p_i is the Ada-Est pass-rate estimate (est.py's history, its prior and decay: est_alpha,
est_beta, est_decay; decay 0 = the paper's last visit), updated with the step's pools.

State: est.py's `state["est"]` (checkpointed as `est_history`), so a resume is exact.
"""
import numpy as np

from ada_jax import allocation
from ada_jax.policies import est, rollout


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    """Budgets are solved over the whole batch (every process's ids), alike on every process."""
    got, budgets = est.collect_budgeted(ctx, params, iterator, key, state, budgets_for)
    got.metrics.update(alloc_budget_max=int(budgets.max()), alloc_budget_min=int(budgets.min()))
    return got


def budgets_for(config, ids, history) -> np.ndarray:
    a = config.adaptive
    n_tot, n_pos = est.counts(ids, history)
    p_hat, _ = allocation.beta_moments(n_tot, n_pos, a.est_alpha, a.est_beta)
    return allocation.knapsack_allocation(p_hat, a.knapsack_budget_per_prompt * len(ids),
                                          a.knapsack_n_min, a.knapsack_n_max)
