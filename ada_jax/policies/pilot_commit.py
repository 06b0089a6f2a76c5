"""Pilot-Commit (adaptive.policy='pilot_commit'; Kim et al., arXiv 2605.26606): a pilot of m
samples per prompt estimates each prompt's pass rate p̂_i; the prompts with p̂_i in
[pc_p_low, pc_p_high] (informative: high reward variance) are committed, and the rest of the
step's budget is split evenly over them; the others are skipped (not trained). No state
across steps. docs/theory.md, "Pilot-Commit", states the rule and where it differs from the
paper.

Budget split (`split`): total T = pc_budget_per_prompt·B; pilot m·B; the remaining
R = T − m·B goes to the K committed prompts, ⌊R/K⌋ each and one more to the first R mod K
(batch order), each capped at G − m (G = 4·pc_budget_per_prompt, the kept group); what the
caps leave (or all of R when K = 0) is not spent. A committed prompt trains on its pilot
and commit samples together (at most G). Budgets are decided on the whole batch (replicated
counters) on every process alike; each process samples its own rows.
"""
import jax
import numpy as np

from ada_jax.policies import pools, rollout


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): the kept group cap and the mean budget."""
    per = config.adaptive.pc_budget_per_prompt
    return 4 * per, per


def committed(pilot_pos, pilot_n, p_low: float, p_high: float) -> np.ndarray:
    """[B] bool: prompts whose pilot pass rate lies in [p_low, p_high]."""
    p = np.asarray(pilot_pos, np.float64) / np.maximum(np.asarray(pilot_n), 1)
    return (np.asarray(pilot_n) > 0) & (p >= p_low) & (p <= p_high)


def split(commit_B, per_prompt: int, pilot: int, cap: int) -> np.ndarray:
    """[B] commit budgets: R = (per_prompt − pilot)·B split evenly over the committed prompts
    (integers, the first R mod K get one more), each at most cap − pilot; 0 elsewhere."""
    commit_B = np.asarray(commit_B, bool)
    B, K = len(commit_B), int(commit_B.sum())
    out = np.zeros(B, np.int64)
    if K == 0:
        return out
    R = (per_prompt - pilot) * B
    share = np.full(K, R // K) + (np.arange(K) < R % K)
    out[commit_B] = np.minimum(share, cap - pilot)
    return out


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    a = ctx.config.adaptive
    problems = next(iterator)
    first = rollout.run_engine(ctx, params, problems, jax.random.fold_in(key, 0),
                               np.full(len(problems), a.pc_pilot))
    pilot = first.batch
    commit_B = committed(pilot.pool_pos_B, pilot.pool_n_B, a.pc_p_low, a.pc_p_high)
    budgets = split(commit_B, a.pc_budget_per_prompt, a.pc_pilot, ctx.group)
    calls, batches = [first.metrics], [pilot]
    if budgets.sum():
        got = rollout.run_engine(ctx, params, problems, jax.random.fold_in(key, 1),
                                 rollout.own_share(budgets))
        calls.append(got.metrics)
        batches.append(got.batch)
    batch = pools.merge(batches, commit_B)
    met = pools.step_metrics(calls, batch)
    met.update(pc_committed=int(commit_B.sum()), pc_pilot_samples=first.metrics["samples_total"],
               pc_unspent=int((a.pc_budget_per_prompt - a.pc_pilot) * len(commit_B)
                              - budgets.sum()))
    return rollout.Collected(first.problems, batch, first.prompt_BP, first.mask_BP, met)
