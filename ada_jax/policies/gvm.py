"""GVM two-stage sampling (adaptive.policy='gvm'): a pilot of N' samples per prompt gives p_i
and G_i (mean gradient norm of its correct samples); budgets N_i ∝ G_i/√(p_i + α/p_i^(β-1))
(0 where p_i = 0 or G_i = 0) sum to budget_per_prompt·B; then the prompts are sampled again
with those budgets (settings: adaptive.gvm.*). No state across steps.

Budgets are solved over the whole batch on every process alike; each process samples its own
rows with its share of them.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ada_jax import model as model_lib

from ada_jax import logprobs
from ada_jax import objectives, sharding
from ada_jax.learn import global_norm, training_rows
from ada_jax.policies import rollout
from ada_jax.policies.settings import Setting

LABEL = "GVM"  # the display name (plots, tables)
PRESETS = {"gvm": "algo=gvm|"}
SETTINGS = {
    "pilot": Setting(8, "GVM: pilot samples per prompt", "—", "positive_int"),
    "budget_per_prompt": Setting(8, "GVM: mean samples per prompt", "—", "positive_int"),
    "alpha": Setting(1e-3, "GVM allocation alpha", "—", "non_negative"),
    "beta": Setting(2.0, "GVM allocation beta", "—", "non_negative"),
}


def group_size(config) -> tuple[int, int]:
    return rollout.capped_group(config.adaptive.gvm.budget_per_prompt)


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    c, a = ctx.config, ctx.config.adaptive.gvm
    problems = next(iterator)
    first = rollout.run_engine(ctx, params, problems, jax.random.fold_in(key, 0),
                               np.full(len(problems), a.pilot))
    pilot, pmet = first.batch, first.metrics
    B = len(pilot.pool_n_B)  # the whole batch (every process's rows)
    rows = training_rows(pilot, first.prompt_BP, first.mask_BP,
                         B * a.pilot)  # every pilot sample, no padding
    norms = sharding.to_host(sample_grad_norms(
        ctx.graphdef, params, rows["tokens"], rows["mask"], rows["loss_mask"],
        prompt_len=c.sampling.max_prompt_len, temperature=max(c.sampling.temperature, 1e-6)))
    valid = np.flatnonzero(np.asarray(pilot.mask_BG).reshape(-1))
    correct = np.asarray(pilot.reward_BG).reshape(-1)[valid] > 0.5
    owner = valid // ctx.group
    g = np.zeros(B)
    for i in range(B):
        sel = correct & (owner == i)
        g[i] = norms[:len(valid)][sel].mean() if sel.any() else 0.0
    p = np.asarray(pilot.pool_pos_B) / np.maximum(np.asarray(pilot.pool_n_B), 1)
    budgets = objectives.gvm_allocation(p, g, a.budget_per_prompt * B, a.alpha, a.beta,
                                        n_min=0, n_max=ctx.group)
    got = rollout.run_engine(ctx, params, problems, jax.random.fold_in(key, 1),
                             rollout.own_share(budgets))
    met = got.metrics
    for k in rollout.SUMMED:
        met[k] += pmet[k]
    met.update(gvm_pilot_samples=pmet["samples_total"], gvm_zero_budget=int((budgets == 0).sum()),
               all_correct_before=pmet["all_correct_before"],
               all_wrong_before=pmet["all_wrong_before"])
    return got


@functools.partial(jax.jit, static_argnames=("graphdef", "prompt_len", "temperature"))
def sample_grad_norms(graphdef, params, tokens, mask, loss_mask, *, prompt_len, temperature):
    """‖∇θ log π(a|x)‖ per row (sequence log-prob), one row at a time to bound memory."""
    def one(args):
        tok, m, lm = args

        def logp_sum(p):
            logits, _ = nnx.merge(graphdef, p)(tok[None], model_lib.positions_from_mask(m[None]),
                                               m[None], logits_slice=(prompt_len - 1,
                                                                      tok.shape[0] - 1))
            logp, _ = logprobs.token_logprobs(logits, tok[None, prompt_len:], temperature)
            return jnp.sum(logp * lm[None])
        return global_norm(jax.grad(logp_sum)(params))
    return jax.lax.map(one, (tokens, mask, loss_mask))
