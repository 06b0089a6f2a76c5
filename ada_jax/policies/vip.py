"""VIP, variance-informed predictive allocation (adaptive.policy='vip', ICLR 2026, arXiv
2602.01601): each prompt's budget N_i in [vip_n_min, vip_n_max] minimises the predicted
gradient variance Σ_i v(N_i; s²_i) under Σ N_i = vip_budget_per_prompt·B, with
v = s²/(n-1) (vip_estimator 'rloo') or s²(n-1)/n² ('drgrpo') and s²_i = E[p_i(1-p_i)] under
the predicted p_i; solved exactly in integers (allocation.vip_allocation). One engine call,
every sample trained on.

The prediction is the Ada-Est history's Beta posterior (est.py: est_alpha, est_beta,
est_decay), not the paper's Gaussian process over prompts (docs/theory.md says why).

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
    _, s2 = allocation.beta_moments(n_tot, n_pos, a.est_alpha, a.est_beta)
    return allocation.vip_allocation(s2, a.vip_budget_per_prompt * len(ids), a.vip_n_min,
                                     a.vip_n_max, a.vip_estimator)
