"""An exactly solvable softmax bandit: the oracle the estimators are tested against
(docs/spec.md §7).

Dimension letters: B prompts, A actions, N samples (slots) per prompt, R Monte-Carlo replicates,
C label configurations, S terminal states of a sequential pool.

Prompt b has logits θ_b ∈ R^A, policy π_b = softmax(θ_b) and a fixed correct set C_b, so
  p_b = Σ_{a∈C_b} π_ba,   ∇_θb p_b = π_b ⊙ (1_C - p_b),   ∇_θb log π(a) = e_a - π_b,
  J_f = (1/B) Σ_b f(p_b),  ∇_θb J_f = f'(p_b) ∇p_b / B.

Label identity (used for every exact expectation here): given its label r, an action's score has
mean E[∇log π(a) | r] = ∇p·(r - p)/(p(1-p)). Samples are i.i.d., so given all labels the actions
are independent draws from π(·|r). Any estimator ĝ_b = (1/n)Σ_j A_j ∇log π(a_j) whose
coefficients A_j and selected samples depend only on the labels (group baselines, std, pool
counts, sequential stopping, label-dependent downsampling) therefore has
  E[ĝ_b] = w(p_b)·∇p_b,   w(p) = E[Σ_j A_j (r_j - p)] / (n p (1-p)),
an expectation over labels alone, computed exactly below by enumerating label configurations.
w(p) = f'(p) means "unbiased for J_f"; w/f' - 1 is the estimator's bias per prompt.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ada_jax import advantages, objectives


@struct.dataclass
class Bandit:
    logits_BA: jax.Array
    correct_BA: jax.Array  # bool


def make(pass_rates, n_actions: int = 32, n_correct: int | None = None, seed: int = 0,
         spread: float = 0.5) -> Bandit:
    """Random logits (N(0, spread²)) shifted on the correct set so that p_b hits pass_rates[b]."""
    p = np.asarray(pass_rates, np.float64)
    rng = np.random.default_rng(seed)
    n_correct = n_correct or max(1, n_actions // 4)
    logits = rng.normal(0.0, spread, (len(p), n_actions))
    correct = np.zeros_like(logits, bool)
    for b in range(len(p)):
        correct[b, rng.choice(n_actions, n_correct, replace=False)] = True
    e = np.exp(logits)
    s_c, s_w = (e * correct).sum(1), (e * ~correct).sum(1)
    logits = logits + correct * np.log(p * s_w / ((1 - p) * s_c))[:, None]
    return Bandit(jnp.asarray(logits, jnp.float32), jnp.asarray(correct))


def probs(logits_BA):
    return jax.nn.softmax(logits_BA.astype(jnp.float32), -1)


def pass_rate(logits_BA, correct_BA):
    """p_b = Σ_{a ∈ C_b} π_b(a)."""
    return (probs(logits_BA) * correct_BA).sum(-1)


def objective(logits_BA, correct_BA, name: str, alpha: float = 0.5):
    """J_f = (1/B) Σ_b f(p_b)."""
    return objectives.value(name, pass_rate(logits_BA, correct_BA), alpha).mean()


def pass_rate_grad(logits_BA, correct_BA):
    """∇_θb p_b = π_b ⊙ (1_C - p_b)   [B, A]."""
    pi = probs(logits_BA)
    return pi * (correct_BA - (pi * correct_BA).sum(-1, keepdims=True))


def objective_grad(logits_BA, correct_BA, name: str, alpha: float = 0.5):
    """Closed-form ∇J_f = f'(p_b) ∇p_b / B   [B, A]."""
    p = pass_rate(logits_BA, correct_BA)
    w = objectives.weight(name, p, alpha)
    return w[:, None] * pass_rate_grad(logits_BA, correct_BA) / p.shape[0]


def grad_logp(logits_BA, actions_BN):
    """∇_θb log π_b(a) = e_a - π_b   [B, N, A]."""
    return jax.nn.one_hot(actions_BN, logits_BA.shape[-1]) - probs(logits_BA)[:, None, :]


def sample(key, logits_BA, correct_BA, n: int):
    """n i.i.d. actions per prompt: (actions_BN int32, rewards_BN float32, ∇log π [B, N, A])."""
    b = logits_BA.shape[0]
    actions = jax.random.categorical(key, logits_BA[:, None, :], shape=(b, n))
    rewards = jnp.take_along_axis(correct_BA, actions, 1).astype(jnp.float32)
    return actions, rewards, grad_logp(logits_BA, actions)


def group_gradient(logits_BA, actions_BN, coef_BN, mask_BN):
    """ĝ = (1/B) Σ_b (1/n_b) Σ_j A_bj ∇log π(a_bj)   [B, A], n_b = kept slots (per-prompt mean)."""
    b, a = logits_BA.shape
    c = coef_BN.astype(jnp.float32) * mask_BN
    n = jnp.maximum(mask_BN.sum(-1), 1).astype(jnp.float32)[:, None]
    hist = jnp.zeros((b, a), jnp.float32).at[jnp.arange(b)[:, None], actions_BN].add(c)
    return (hist - c.sum(-1, keepdims=True) * probs(logits_BA)) / n / b


def per_sample_variance(logits_BA, correct_BA):
    """σ²_b = E‖(r - p)∇log π‖² - ‖∇p_b‖²: variance (trace) of one sample of (r - p_b)∇log π."""
    pi = probs(logits_BA)
    p = (pi * correct_BA).sum(-1, keepdims=True)
    sq = 1.0 - 2.0 * pi + (pi * pi).sum(-1, keepdims=True)  # ‖e_a - π‖²
    g = pass_rate_grad(logits_BA, correct_BA)
    return (pi * (correct_BA - p) ** 2 * sq).sum(-1) - (g * g).sum(-1)


def oracle_variance(logits_BA, correct_BA, n_B, name: str, alpha: float = 0.5):
    """Exact trace-variance of ĝ = (1/B)Σ_b f'(p_b)(1/N_b)Σ_j (r - p_b)∇log π, which is
    (1/B²) Σ_b f'(p_b)² σ²_b / N_b."""
    p = pass_rate(logits_BA, correct_BA)
    w = objectives.weight(name, p, alpha)
    return float((w ** 2 * per_sample_variance(logits_BA, correct_BA) / jnp.asarray(n_B)).sum()
                 / p.shape[0] ** 2)


def success_grad_norm(logits_BA, correct_BA):
    """GVM's G_b = E[‖∇log π(a)‖ | r = 1] (the pilot's mean gradient norm of accepted samples)."""
    pi = probs(logits_BA)
    norm = jnp.sqrt(1.0 - 2.0 * pi + (pi * pi).sum(-1, keepdims=True))
    return (pi * correct_BA * norm).sum(-1) / (pi * correct_BA).sum(-1)


# --------------------------------------------------------------------------- exact expectations


def weight_from_configs(p: float, rewards_CN, mask_CN, adv_CN, prob_C) -> float:
    """w(p) = Σ_c P_c Σ_j A_cj (r_cj - p) / (n_c p(1-p)) over label configurations c."""
    r, m, a = (np.asarray(x, np.float64) for x in (rewards_CN, mask_CN, adv_CN))
    n = np.maximum(m.sum(-1), 1.0)
    s = (a * (r - p) * m).sum(-1) / n
    return float((np.asarray(prob_C) * s).sum() / (p * (1.0 - p)))


def binomial_configs(p: float, n: int, width: int | None = None):
    """The n+1 label configurations of an i.i.d. group (k ones first, slots ≥ n masked, padded to
    `width` rows and columns) with their probabilities; exact for permutation-equivariant
    advantages, which all of ours are."""
    width = max(width or n, n)
    k = np.arange(width + 1)
    j = np.arange(width)[None, :]
    rewards = (j < k[:, None]).astype(np.float32)
    mask = np.broadcast_to(j < n, rewards.shape)
    kk = np.minimum(k, n)
    logc = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in kk])
    prob = np.where(k <= n, np.exp(logc + kk * np.log(p) + (n - kk) * np.log1p(-p)), 0.0)
    return rewards, mask, prob


@functools.lru_cache(maxsize=None)
def _jit(fn):
    """One compiled copy per advantage function: exact weights call it with a few fixed shapes."""
    return jax.jit(fn)


@functools.lru_cache(maxsize=None)
def _pool_fn(pool_kw: tuple):
    return jax.jit(functools.partial(advantages.pool_baseline, **dict(pool_kw)))


def group_weight(adv_fn: Callable, p: float, n: int, width: int | None = None) -> float:
    """Exact w(p) of the per-prompt-mean estimator with advantages adv_fn(rewards_BN, mask_BN, p_B)
    (p_B is the true pass rate, for oracle baselines / weights; most adv_fn ignore it)."""
    if n <= 0:
        return 0.0
    r, m, prob = binomial_configs(p, n, width)
    adv = _jit(adv_fn)(jnp.asarray(r), jnp.asarray(m), jnp.full((len(prob),), p, jnp.float32))
    return weight_from_configs(p, r, m, np.asarray(adv), prob)


def downsample_counts(pool_n, pool_pos, n: int):
    """Balanced selection (docs/spec.md §4): ⌈n/2⌉ positives and the rest negatives where
    available, any shortfall filled from the other class. Returns (m_pos, m_neg); works on numpy or JAX ints."""
    xp = jnp if isinstance(pool_n, jax.Array) else np
    m_pos = xp.minimum(pool_pos, -(-n // 2))
    m_neg = xp.minimum(pool_n - pool_pos, n - m_pos)
    return xp.minimum(pool_pos, n - m_neg), m_neg


def seq_terminal_states(p: float, round_size: int, max_rounds: int, k_pos: int, k_neg: int):
    """Exact law of a sequential pool: rounds of M samples, stop at the first round end with
    ≥ k_pos positives and ≥ k_neg negatives, at most R rounds. Returns arrays (N_S, k_S, prob_S,
    resolved_S) over terminal states; unresolved pools end at N = M·R."""
    m = round_size
    kk = np.arange(m + 1)
    step = np.exp([math.lgamma(m + 1) - math.lgamma(i + 1) - math.lgamma(m - i + 1) for i in kk]
                  + kk * np.log(p) + (m - kk) * np.log1p(-p))
    alive = np.zeros(m * max_rounds + 1)
    alive[0] = 1.0
    out = []
    for r in range(1, max_rounds + 1):
        alive = np.convolve(alive, step)[: m * max_rounds + 1]
        big_n = r * m
        ks = np.arange(big_n + 1)
        done = (ks >= k_pos) & (big_n - ks >= k_neg)
        for k in ks:
            if alive[k] > 0 and (done[k] or r == max_rounds):
                out.append((big_n, k, alive[k], bool(done[k])))
        alive[: big_n + 1] = np.where(done, 0.0, alive[: big_n + 1])
    n_s, k_s, prob_s, res_s = (np.array(x) for x in zip(*out))
    return n_s, k_s, prob_s, res_s


def seq_weight(p: float, *, round_size: int, max_rounds: int, k_pos: int, k_neg: int,
               n_keep: int, full_pool: bool = False, at_budget: str = "keep", **pool_kw) -> float:
    """Exact w(p) of Ada-Seq with pool-baseline advantages (pool_kw go to advantages.pool_baseline):
    on the kept balanced group of n_keep, or on the whole pool with full_pool=True."""
    n_s, k_s, prob, res = seq_terminal_states(p, round_size, max_rounds, k_pos, k_neg)
    if at_budget == "drop":
        prob = prob * res
    if full_pool:
        width = round_size * max_rounds
        m_pos, m_neg = k_s, n_s - k_s
    else:
        width = n_keep
        m_pos, m_neg = downsample_counts(n_s, k_s, n_keep)
    j = np.arange(width)[None, :]
    rewards = (j < m_pos[:, None]).astype(np.float32)
    mask = j < (m_pos + m_neg)[:, None]
    fn = _pool_fn(tuple(sorted(pool_kw.items())))
    adv = fn(jnp.asarray(rewards), jnp.asarray(mask), jnp.asarray(n_s), jnp.asarray(k_s))
    return weight_from_configs(p, rewards, mask, np.asarray(adv), prob)


# --------------------------------------------------------------------------- Monte Carlo


def simulate_seq(key, logits_BA, correct_BA, *, round_size: int, max_rounds: int, k_pos: int,
                 k_neg: int, n_keep: int):
    """Reference Ada-Seq pool on the bandit (rounds mode, keep at budget, generation order).

    Draws M·R actions per prompt up front; the pool is the first M·(stop round) of them. Returns a
    dict: pool_actions/pool_rewards/pool_mask [B, M·R], pool_n/pool_pos [B], resolved [B], and the
    kept balanced group actions/rewards/mask [B, n_keep] (first m⁺ positives and first m⁻
    negatives in generation order, kept in generation order).
    """
    b = logits_BA.shape[0]
    width = round_size * max_rounds
    actions = jax.random.categorical(key, logits_BA[:, None, :], shape=(b, width))
    r = jnp.take_along_axis(correct_BA, actions, 1)
    cpos = jnp.cumsum(r, 1)[:, round_size - 1::round_size]  # positives after each round
    cneg = jnp.arange(1, max_rounds + 1) * round_size - cpos
    done = (cpos >= k_pos) & (cneg >= k_neg)
    resolved = done.any(1)
    stop = jnp.where(resolved, jnp.argmax(done, 1), max_rounds - 1)
    pool_n = (stop + 1) * round_size
    valid = jnp.arange(width)[None, :] < pool_n[:, None]
    pool_pos = (r & valid).sum(1)
    m_pos, m_neg = downsample_counts(pool_n, pool_pos, n_keep)
    keep = valid & ((r & (jnp.cumsum(r & valid, 1) <= m_pos[:, None]))
                    | (~r & (jnp.cumsum(~r & valid, 1) <= m_neg[:, None])))
    order = jnp.argsort(~keep, axis=1, stable=True)[:, :n_keep]
    take = lambda x: jnp.take_along_axis(x, order, 1)  # noqa: E731
    return dict(pool_actions=actions, pool_rewards=r.astype(jnp.float32), pool_mask=valid,
                pool_n=pool_n, pool_pos=pool_pos, resolved=resolved, actions=take(actions),
                rewards=take(r).astype(jnp.float32), mask=take(keep))


@dataclasses.dataclass(frozen=True)
class Estimator:
    """One gradient estimator on the bandit: `draw(key, logits, correct) -> ĝ [B, A]`, its exact
    per-prompt weight `weight(p) -> w` (E[ĝ_b] = w_b ∇p_b / B) and the weight of what it is meant
    to estimate, `target(p)` (f'(p) for an objective J_f, or another estimator's weight)."""
    name: str
    target_name: str
    draw: Callable
    weight: Callable
    target: Callable


def _group(adv_fn, n_B):
    """i.i.d. groups of n_B[b] samples (slots past n_b masked), advantages adv_fn(r, mask, p)."""
    n_B = np.asarray(n_B, np.int64)
    width = max(int(n_B.max()), 1)

    def draw(key, logits, correct):
        actions, rewards, _ = sample(key, logits, correct, width)
        mask = jnp.arange(width)[None, :] < jnp.asarray(n_B)[:, None]
        coef = adv_fn(rewards, mask, pass_rate(logits, correct))
        return group_gradient(logits, actions, coef, mask)

    def weight(p):
        return np.array([group_weight(adv_fn, float(q), int(k), width) for q, k in zip(p, n_B)])

    return draw, weight


def oracle_estimator(objective_name: str, n_B, alpha: float = 0.5) -> Estimator:
    """docs/spec.md §3's ĝ = (1/B)Σ_b f'(p_b)(1/N_b)Σ_j (r - p_b)∇log π with the true p_b and
    N_b samples: unbiased for J_f under any allocation; its variance is `oracle_variance`."""
    def adv(r, m, q):
        return objectives.weight(objective_name, q, alpha)[:, None] * (r - q[:, None]) * m

    def target(q):
        return objectives.weight(objective_name, np.asarray(q, np.float64), alpha)

    return Estimator(f"oracle_{objective_name}", objective_name, *_group(adv, n_B), target)


def _seq(cfg, full_pool=False, **pool_kw):
    """Ada-Seq pools (simulate_seq) with pool-baseline advantages on the kept group or full pool."""
    def draw(key, logits, correct):
        s = simulate_seq(key, logits, correct, **cfg)
        pre = "pool_" if full_pool else ""
        adv = advantages.pool_baseline(s[pre + "rewards"], s[pre + "mask"], s["pool_n"],
                                       s["pool_pos"], **pool_kw)
        return group_gradient(logits, s[pre + "actions"], adv, s[pre + "mask"])

    def weight(p):
        return np.array([seq_weight(float(q), full_pool=full_pool, **cfg, **pool_kw) for q in p])

    return draw, weight


SEQ_DEFAULT = dict(round_size=8, max_rounds=4, n_keep=4)


def standard_estimators(bandit: Bandit, n: int = 4, pool_n: int = 16, budget_per_prompt: int = 8,
                        seq: dict | None = None, names=None):
    """The estimators of docs/spec.md §7 for `bandit`. Ada-Est and GVM use oracle pilots
    (p̂ = p, exact G), so their allocations are fixed and their weights exact.

      oracle_<f>        f'(p)(r - p), true p: unbiased for J_f (docs/spec.md §3's estimator)
      rloo / drgrpo / grpo / raft           fixed groups of n
      raft_mean_pos     RAFT averaged over a group's accepted samples (EM view): targets log p
      pool<N>_log       (r - p̃)/p̃ on a fixed pool of N: targets log p
      seq_<rule>_full   Ada-Seq pool, every pooled sample, A = r - p̃: what downsampling should keep
      seq_<rule>_ref    kept balanced group, A = r - p̃ (reference code)
      seq_<rule>_corr   kept group with the exact importance correction
      seq_bal_*_log     the same with the explicit 1/p̃ weight
      est_*             Ada-Est: N_i ∝ 1/√p̂ (total budget_per_prompt·B), explicit 1/p̂ weight,
                        group-mean (reference) or leave-one-out baseline
      gvm_raft          GVM: N_i ∝ G_i/√(p + α/p^(β-1)), RAFT mean over accepted samples
    """
    p = np.asarray(pass_rate(bandit.logits_BA, bandit.correct_BA), np.float64)
    bsz = len(p)
    seq = dict(SEQ_DEFAULT, **(seq or {}))
    fw = lambda name: (lambda q: objectives.weight(name, np.asarray(q, np.float64)))  # noqa: E731
    same = lambda k: np.full(bsz, k)  # noqa: E731
    out = []

    def add(name, target_name, dw, target):
        if names is None or name in names:
            out.append(Estimator(name, target_name, dw[0], dw[1], target))

    for f in objectives.OBJECTIVES:
        o = oracle_estimator(f, same(n))
        add(o.name, f, (o.draw, o.weight), o.target)
    plain = lambda fn: (lambda r, m, q: fn(r, m))  # noqa: E731
    add("rloo", "linear", _group(plain(advantages.rloo), same(n)), fw("linear"))
    add("drgrpo", "linear", _group(plain(advantages.drgrpo), same(n)), fw("linear"))
    add("grpo", "arcsin", _group(plain(advantages.grpo), same(n)), fw("arcsin"))
    add("raft", "linear", _group(plain(advantages.raft), same(n)), fw("linear"))
    add("raft_mean_pos", "log", _group(
        plain(lambda r, m: advantages.raft(r, m, normalise=True)), same(n)), fw("log"))
    add(f"pool{pool_n}_log", "log", _group(plain(lambda r, m: advantages.pool_baseline(
        r, m, m.sum(-1), (r * m).sum(-1), weight_fn="log")), same(pool_n)), fw("log"))
    for rule, kp, kn in (("bal", 2, 2), ("pos", 1, 0)):
        cfg = dict(seq, k_pos=kp, k_neg=kn)
        full_w = _seq(cfg, full_pool=True)[1]
        add(f"seq_{rule}_full", "pool", _seq(cfg, full_pool=True), full_w)
        add(f"seq_{rule}_ref", "pool", _seq(cfg), full_w)
        add(f"seq_{rule}_corr", "pool", _seq(cfg, correction=True), full_w)
    cfg = dict(seq, k_pos=2, k_neg=2)
    add("seq_bal_ref_log", "log", _seq(cfg, weight_fn="log"), fw("log"))
    add("seq_bal_corr_log", "log", _seq(cfg, correction=True, weight_fn="log"), fw("log"))
    total = budget_per_prompt * bsz
    n_est = objectives.est_allocation(p, total, "inv_sqrt")
    inv_p = lambda fn: (lambda r, m, q: fn(r, m) / q[:, None])  # noqa: E731
    add("est_drgrpo_log", "log", _group(inv_p(advantages.drgrpo), n_est), fw("log"))
    add("est_rloo_log", "log", _group(inv_p(advantages.rloo), n_est), fw("log"))
    grad_norm = np.asarray(success_grad_norm(bandit.logits_BA, bandit.correct_BA), np.float64)
    n_gvm = objectives.gvm_allocation(p, grad_norm, total)
    add("gvm_raft", "log", _group(plain(lambda r, m: advantages.raft(r, m, normalise=True)), n_gvm),
        fw("log"))
    return out


def monte_carlo(key, bandit: Bandit, draw: Callable, reps: int, chunk: int = 1000):
    """reps independent draws of ĝ [R, B, A] (jit + vmap, in chunks to bound memory)."""
    run = jax.jit(jax.vmap(draw, in_axes=(0, None, None)))
    chunk = min(chunk, reps)
    keys = jax.random.split(key, -(-reps // chunk) * chunk)  # whole chunks: one compiled shape
    out = [run(keys[i:i + chunk], bandit.logits_BA, bandit.correct_BA)
           for i in range(0, len(keys), chunk)]
    return jnp.concatenate(out)[:reps]


def measured_weight(bandit: Bandit, g_RBA):
    """Per-prompt implied weight of each draw, ŵ_b = B·⟨ĝ_b, ∇p_b⟩/‖∇p_b‖², as (mean_B, se_B)."""
    d = pass_rate_grad(bandit.logits_BA, bandit.correct_BA)
    w = g_RBA.shape[1] * (g_RBA * d).sum(-1) / (d * d).sum(-1)
    w = np.asarray(w, np.float64)
    return w.mean(0), w.std(0, ddof=1) / np.sqrt(w.shape[0])


def measured_variance(g_RBA, mean_BA):
    """Trace variance E‖ĝ - E ĝ‖² around the known mean, as (estimate, standard error)."""
    sq = np.asarray(((g_RBA - mean_BA) ** 2).sum((1, 2)), np.float64)
    return sq.mean(), sq.std(ddof=1) / np.sqrt(len(sq))
