"""Knapsack-RL (adaptive.policy='knapsack', arXiv 2509.25849) as its authors run it
(liziniu/KnapsackRL, verl/trainer/ppo/exploration_utils.py): each prompt's budget from its
raw success rate p on its last visit (allocation.knapsack_budgets): unseen prompts get the
uniform budget_per_prompt, p = 0 and p = 1 prompts get n_min, the prompts with 0 < p < 1
share a knapsack over N_i in [n_min, n_max] maximising Σ_i (1 - p_i^N_i - (1-p_i)^N_i)·
p_i(1-p_i)², and the budget they are not expected to need (alpha) goes to the unsolved (p = 0)
prompts. Σ N_i = budget_per_prompt·B (settings: adaptive.knapsack.*); one engine call, every
sample trained on (GRPO on the groups). docs/theory.md, "The field's allocation methods as
their authors run them", states the rule, its source and what differs.

State: `state["last_visit"]`, problem id → [samples, positives, level] of the prompt's latest
visit (VIP reads it too); checkpointed as `last_visit`, so a resume is exact.
"""
import numpy as np

from ada_jax import allocation
from ada_jax.policies import rollout
from ada_jax.policies.settings import Setting

LABEL = "Knapsack-RL"  # the display name (plots, tables)
PRESETS = {"knapsack": "algo=knapsack|"}  # scripts/reproduce.sh arms: name -> variant|flags
SETTINGS = {
    "budget_per_prompt": Setting(
        8, "Knapsack-RL: mean samples per prompt (the knapsack's capacity / B); an unseen "
        "prompt's budget", "n", "positive_int"),
    "n_min": Setting(
        2, "Knapsack-RL: a prompt's budget at least, and the budget of a prompt last seen all "
        "correct or all wrong (p = its last visit's raw success rate)",
        "min_n / negative_n / positive_n", "positive_int"),
    "n_max": Setting(32, "Knapsack-RL: a prompt's budget at most (the kept group size)",
                     "max_n", "positive_int"),
    "alpha": Setting(
        0.9, "Knapsack-RL: confidence of a mixed group in the expected need "
        "log(1-a)/log(max(p,1-p)); budget beyond the need goes to the unsolved prompts",
        "alpha", "open_unit"),
}


def check(config) -> None:
    """n_min <= budget_per_prompt <= n_max (else no allocation sums to the budget)."""
    k = config.adaptive.knapsack
    lo, mean, hi = k.n_min, k.budget_per_prompt, k.n_max
    if not lo <= mean <= hi:
        raise ValueError(f"config.adaptive.knapsack.n_min={lo}, knapsack.budget_per_prompt="
                         f"{mean}, knapsack.n_max={hi}: need n_min <= budget_per_prompt <= n_max "
                         f"(the budgets sum to budget_per_prompt x the batch)")


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): every sample trained, at most n_max a prompt."""
    k = config.adaptive.knapsack
    return k.n_max, k.budget_per_prompt


def init_state(ctx, params) -> dict:
    return {"last_visit": {}}


def checkpoint(state) -> dict:
    return {"last_visit": state["last_visit"]}


def restore(meta) -> dict:
    return {"last_visit": {k: list(v) for k, v in meta.get("last_visit", {}).items()}}


def last_rates(problems, visits) -> tuple[np.ndarray, np.ndarray]:
    """([B] raw success rate of each prompt's last visit (0 if unseen), [B] seen)."""
    got = [visits.get(str(p.id)) for p in problems]
    seen = np.asarray([g is not None for g in got])
    p = np.asarray([g[1] / max(g[0], 1) if g else 0.0 for g in got], np.float64)
    return p, seen


def collect_visited(ctx, params, iterator, key, state, budgets_for):
    """One engine call at `budgets_for(config, problems, visits)` (the whole batch, alike on
    every process), then each prompt's last visit recorded: the step of knapsack and vip.
    Returns (Collected, budgets)."""
    problems = next(iterator)
    whole = rollout.everyone(problems)
    visits = state["last_visit"]
    budgets = budgets_for(ctx.config, whole, visits)
    got = rollout.run_engine(ctx, params, problems, key, rollout.own_share(budgets))
    n, k = np.asarray(got.batch.pool_n_B), np.asarray(got.batch.pool_pos_B)
    for p, n_i, k_i in zip(whole, n, k):
        if n_i > 0:  # re-inserted: the dict stays in order of the latest visit
            visits.pop(str(p.id), None)
            visits[str(p.id)] = [int(n_i), int(k_i), int(p.level)]
    got.metrics.update(alloc_budget_max=int(budgets.max()), alloc_budget_min=int(budgets.min()))
    return got, budgets


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    return collect_visited(ctx, params, iterator, key, state, budgets_for)[0]


def budgets_for(config, problems, visits) -> np.ndarray:
    k = config.adaptive.knapsack
    p, seen = last_rates(problems, visits)
    return allocation.knapsack_budgets(p, seen, k.budget_per_prompt * len(problems),
                                       k.n_min, k.n_max, k.budget_per_prompt, k.alpha)
