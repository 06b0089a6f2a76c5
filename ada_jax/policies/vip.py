"""VIP, variance-informed predictive allocation (adaptive.policy='vip', ICLR 2026, arXiv
2602.01601) as its authors run it (HieuNT91/VIP, allocation/bernoulli_allocation.py and
success_rate_prediction/gaussian_process.py):

- prediction: a Gaussian process over prompts in logit space (allocation.gp_logit_mean: RBF
  kernel of length length_scale over a distance between prompts, prior mean prior_logit,
  each observed prompt's last visit as its observation: (k + s)/(n + 2s) with s =
  smoothing, 0.5 by default; s = 0 is the authors' raw rate, which a 0/8 visit
  turns into p = 1e-6, log p = −13.8, and the program then spends on it at any cost: at the
  family task's pass rates that allocation loses to uniform on VIP's own objective at the
  true p, scripts/bench/bench_allocation.py),
  so a prompt never seen is predicted from the prompts near it. The distance
  (`distance`): 0 for the same prompt; on the family task 0.1 within a family (other
  operands), 0.6 within a tier, 1 across tiers; elsewhere 0.2 + 0.2·|level difference|.
- allocation: integers N_i in [n_min, n_max] (the authors' floor 4 and cap 32) minimising
  Σ_i v(N_i; a_i) + γ·log(p_i)·N_i with a_i = p_i(1-p_i), v = a/(n-1) (estimator 'rloo',
  γ = gamma) or a(n-1)/n² ('drgrpo'), under Σ N_i = budget_per_prompt·B
  (allocation.vip_allocation, exact in integers). The γ term sends spare samples to prompts
  predicted hard; a prompt predicted solved gets the floor.
One engine call, every sample trained on (settings: adaptive.vip.*). docs/theory.md, "The
field's allocation methods as their authors run them", says what differs from the authors'
code.

State: knapsack.py's `state["last_visit"]` (checkpointed as `last_visit`): exact resume.
"""
import numpy as np

from ada_jax import allocation
from ada_jax.policies import knapsack, rollout
from ada_jax.policies.settings import Setting
from ada_jax.tasks import families

LABEL = "VIP"  # the display name (plots, tables)
PRESETS = {"vip": "algo=vip|"}
SETTINGS = {
    "budget_per_prompt": Setting(8, "VIP: mean samples per prompt", "batch_budget / B",
                                 "positive_int"),
    "n_min": Setting(4, "VIP: a prompt's budget at least (the authors' floor 4; >= 2 rloo, "
                     ">= 3 drgrpo)", "lower / min_keep", "positive_int"),
    "n_max": Setting(32, "VIP: a prompt's budget at most (the kept group size)", "upper",
                     "positive_int"),
    "estimator": Setting("rloo", "VIP variance model: rloo s²/(n-1) or drgrpo s²(n-1)/n²",
                         "allocation_rule", "choice:rloo/drgrpo"),
    "gamma": Setting(0.0007, "VIP: weight of the γ·log(p)·n term sending spare samples to "
                     "prompts predicted hard (authors: 0.0007 rloo, 0.0004 grpo)", "gamma",
                     "non_negative"),
    "length_scale": Setting(0.4, "VIP: RBF length scale of the Gaussian process over prompt "
                            "distances (logit space)", "length_scale", "positive"),
    "prior_logit": Setting(-1.0, "VIP: the Gaussian process's prior mean (logit of the pass "
                           "rate)", "prior_value", "any"),
    "max_observed": Setting(512, "VIP: the latest observed prompts the Gaussian process "
                            "conditions on", "—", "positive_int"),
    "smoothing": Setting(0.5, "VIP: a last visit of k in n observed as (k+s)/(n+2s); 0 = the "
                         "authors' raw rate (a 0/8 visit predicts p = 1e-6)", "—",
                         "non_negative"),
}


def check(config) -> None:
    """n_min <= budget_per_prompt <= n_max; n_min where the variance model is convex
    (allocation.VIP_MIN_BUDGET); a finite prior."""
    v = config.adaptive.vip
    lo, mean, hi = v.n_min, v.budget_per_prompt, v.n_max
    if not lo <= mean <= hi:
        raise ValueError(f"config.adaptive.vip.n_min={lo}, vip.budget_per_prompt={mean}, "
                         f"vip.n_max={hi}: need n_min <= budget_per_prompt <= n_max (the "
                         f"budgets sum to budget_per_prompt x the batch)")
    least = allocation.VIP_MIN_BUDGET[v.estimator]
    if v.n_min < least:
        raise ValueError(f"config.adaptive.vip.n_min={v.n_min}: must be >= {least} for "
                         f"vip.estimator={v.estimator!r} (its variance s²/(n-1) or "
                         f"s²(n-1)/n² is not convex below)")
    if isinstance(v.prior_logit, bool) or not isinstance(v.prior_logit, (int, float)) \
            or not np.isfinite(v.prior_logit):
        raise ValueError(f"config.adaptive.vip.prior_logit={v.prior_logit!r}: must be a "
                         f"finite number")


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): every sample trained, at most n_max a prompt."""
    v = config.adaptive.vip
    return v.n_max, v.budget_per_prompt


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    return knapsack.collect_visited(ctx, params, iterator, key, state, budgets_for)[0]


def distance(config, ids_a, levels_a, ids_b, levels_b) -> np.ndarray:
    """[A, B] distance between prompts from their features (problem id, level = family
    number on the family task)."""
    ids_a, ids_b = np.asarray(ids_a)[:, None], np.asarray(ids_b)[None, :]
    la, lb = np.asarray(levels_a)[:, None], np.asarray(levels_b)[None, :]
    if config.task.name == "families":
        tier = np.vectorize(families.tier_of, otypes=[object])
        ta, tb = tier(la), tier(lb)
        d = np.where(la == lb, 0.1, np.where(ta == tb, 0.6, 1.0))
    else:
        d = 0.2 + 0.2 * np.abs(la - lb).astype(np.float64)
    return np.where(ids_a == ids_b, 0.0, d)


def predict(config, problems, visits) -> np.ndarray:
    """[B] predicted pass rates: the GP's posterior mean over the last max_observed prompts
    observed."""
    a = config.adaptive.vip
    obs = list(visits.items())[-a.max_observed:]
    ids_o = [k for k, _ in obs]
    lv_o = [v[2] for _, v in obs]
    sm = a.smoothing  # 0: the authors' raw rate (clipped to [1e-6, 1 - 1e-6])
    p_o = np.asarray([(v[1] + sm) / (v[0] + 2 * sm) if v[0] + sm > 0 else 0.0
                      for _, v in obs], np.float64)
    ids_q = [str(p.id) for p in problems]
    lv_q = [p.level for p in problems]

    def kern(d):
        return np.exp(-0.5 * (d / a.length_scale) ** 2)
    K_oo = kern(distance(config, ids_o, lv_o, ids_o, lv_o)) if obs else np.zeros((0, 0))
    K_qo = kern(distance(config, ids_q, lv_q, ids_o, lv_o)) if obs else np.zeros((len(ids_q), 0))
    f = allocation.gp_logit_mean(K_oo, K_qo, p_o, a.prior_logit)
    return 1.0 / (1.0 + np.exp(-f))


def budgets_for(config, problems, visits) -> np.ndarray:
    v = config.adaptive.vip
    p = np.clip(predict(config, problems, visits), 1e-6, 1 - 1e-6)
    return allocation.vip_allocation(p * (1 - p), v.budget_per_prompt * len(problems),
                                     v.n_min, v.n_max, v.estimator,
                                     linear=allocation.vip_gamma_term(p, v.gamma))
