"""Policy losses: PPO clipped surrogate, aggregation, KL estimators, entropy, DARO
(docs/spec.md §1-2).

Dimension letters: B sequences (rows), T response tokens, G prompt groups, K DARO buckets.
All inputs are cast to float32; masks are bool or {0,1}. Every loss returns (scalar, metrics) and
the metrics dict always has the same keys, so it can be logged from inside jit.

Conventions (verl's core_algos): log-ratio clamped to [-20, 20] before exp; dual clip applies to
A < 0 only and caps the loss at -A·c (c > 1, e.g. 3 in verl, 10 in spec §2); k3 clamps its log-ratio
to ±20 and its value to ±10. Aggregation modes:
  token_mean            Σ_bt ℓ·m / Σ_bt m                       (DAPO / default)
  seq_mean_token_mean   mean over non-empty rows of Σ_t ℓ·m / Σ_t m
  seq_mean_token_sum    mean over non-empty rows of Σ_t ℓ·m
  constant              Σ_bt ℓ·m / (max_len · n_groups)       (Dr.GRPO); max_len defaults to T and
                        n_groups to B, the rows counted (pass fixed values so the normaliser stays
                        constant across micro-batches and steps).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant")
KL_KINDS = ("k1", "k2", "k3")
LOG_RATIO_CLAMP = 20.0


def aggregate(loss_BT, mask_BT, agg: str = "token_mean", max_len=None, n_groups=None):
    """Reduce per-token values to a scalar with one of AGG_MODES (see module docstring)."""
    x = loss_BT.astype(jnp.float32)
    m = mask_BT.astype(jnp.float32)
    tok = m.sum(-1)
    rows = (tok > 0).astype(jnp.float32)
    if agg == "token_mean":
        return (x * m).sum() / jnp.maximum(m.sum(), 1.0)
    if agg == "seq_mean_token_mean":
        return ((x * m).sum(-1) / jnp.maximum(tok, 1.0)).sum() / jnp.maximum(rows.sum(), 1.0)
    if agg == "seq_mean_token_sum":
        return (x * m).sum() / jnp.maximum(rows.sum(), 1.0)
    if agg == "constant":
        t = x.shape[-1] if max_len is None else max_len
        g = x.shape[0] if n_groups is None else n_groups
        return (x * m).sum() / (t * g)
    raise ValueError(f"loss agg {agg!r}: choose from {AGG_MODES}")


def kl_estimate(logp, ref_logp, kind: str = "k3"):
    """Per-token estimators of KL(π‖π_ref) from samples of π (Schulman 2020):
    k1 = log π - log π_ref (unbiased, signed); k2 = ½(log π - log π_ref)² (biased, but its gradient
    as a loss is ∇KL); k3 = e^(log π_ref - log π) - (log π_ref - log π) - 1 (unbiased, ≥ 0)."""
    d = logp.astype(jnp.float32) - ref_logp.astype(jnp.float32)
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d * d
    if kind == "k3":
        neg = jnp.clip(-d, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return jnp.clip(jnp.exp(neg) - neg - 1.0, -10.0, 10.0)
    raise ValueError(f"kl kind {kind!r}: choose from {KL_KINDS}")


def kl_reward_penalty(logp_BT, ref_logp_BT, mask_BT, kl_coef: float, kind: str = "k1"):
    """KL in the reward: per-sequence penalty β·Σ_t kl_t to subtract from outcome rewards before
    computing advantages (verl's compute_rewards uses k1 on the rollout log-probs)."""
    return kl_coef * (kl_estimate(logp_BT, ref_logp_BT, kind) * mask_BT.astype(jnp.float32)).sum(-1)


def entropy_from_logits(logits_BTV):
    """Per-token entropy of softmax(logits), float32."""
    logp = jax.nn.log_softmax(logits_BTV.astype(jnp.float32), axis=-1)
    return -(jnp.exp(logp) * logp).sum(-1)


def behaviour_weight(prox_logp_BT, behav_logp_BT, cap: float = 0.0):
    """Decoupled PPO's importance weight π_prox/π_behav per token (AReaL; docs/spec.md §10),
    capped at `cap` when cap > 0; a constant of the loss (no gradient flows through it)."""
    w = jnp.exp(jnp.clip(prox_logp_BT.astype(jnp.float32) - behav_logp_BT.astype(jnp.float32),
                         -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return jax.lax.stop_gradient(jnp.minimum(w, cap) if cap > 0 else w)


def ppo_token_loss(logp_BT, old_logp_BT, adv_BT, *, clip_low: float, clip_high: float,
                   dual_clip: float = 0.0, behav_logp_BT=None, behav_cap: float = 0.0):
    """Per-token clipped surrogate -min(ρA, clip(ρ, 1-ε_low, 1+ε_high)A), ρ = exp(clamped log ρ);
    with dual_clip = c > 1, tokens with A < 0 are further capped at -A·c. Returns (ℓ_BT, ρ_BT).

    Decoupled (behav_logp_BT given): old_logp_BT is the proximal policy's (the learner's params
    at the start of the step's update), ρ = π/π_prox, and each token's loss is weighted by
    π_prox/π_behav (`behaviour_weight`). When π_prox = π_behav (on-policy) this is plain PPO."""
    log_ratio = jnp.clip(logp_BT.astype(jnp.float32) - old_logp_BT.astype(jnp.float32),
                         -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = jnp.exp(log_ratio)
    adv = adv_BT.astype(jnp.float32)
    loss = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high))
    if dual_clip > 0:
        loss = jnp.where(adv < 0, jnp.minimum(loss, -adv * dual_clip), loss)
    if behav_logp_BT is not None:
        loss = behaviour_weight(old_logp_BT, behav_logp_BT, behav_cap) * loss
    return loss, ratio


def policy_loss(logp_BT, old_logp_BT, adv, mask_BT, *, clip_low: float = 0.2,
                clip_high: float = 0.28, dual_clip: float = 0.0, agg: str = "token_mean",
                max_len=None, n_groups=None, ref_logp_BT=None, kl_coef: float = 0.0,
                kl_type: str = "k3", entropy_BT=None, entropy_coef: float = 0.0,
                behav_logp_BT=None, behav_cap: float = 0.0):
    """PPO policy loss + optional KL-in-loss (kl_coef·agg(kl)) - entropy bonus (coef·agg(H)).
    With behav_logp_BT, decoupled PPO (old_logp_BT is then the proximal policy's; see
    ppo_token_loss) and the metrics add `behav_weight`, the mean weight π_prox/π_behav.

    adv is per sequence [B] (broadcast over tokens) or per token [B, T]. Metrics (token-means):
    clipfrac_high (A>0, ρ>1+ε_high), clipfrac_low (A<0, ρ<1-ε_low), clipfrac_dual (A<0, ρ>c),
    ppo_kl (mean log π_old - log π, verl's), approx_kl (k3 of π_old vs π, ≥ 0), kl (to ref),
    entropy, pg_loss.
    """
    m = mask_BT.astype(jnp.float32)
    adv_BT = jnp.broadcast_to(adv[:, None] if adv.ndim == 1 else adv, m.shape).astype(jnp.float32)
    tok_loss, ratio = ppo_token_loss(logp_BT, old_logp_BT, adv_BT, clip_low=clip_low,
                                     clip_high=clip_high, dual_clip=dual_clip,
                                     behav_logp_BT=behav_logp_BT, behav_cap=behav_cap)
    pg = aggregate(tok_loss, m, agg, max_len, n_groups)
    mean = lambda x: aggregate(x.astype(jnp.float32), m, "token_mean")  # noqa: E731
    kl = jnp.zeros((), jnp.float32)
    if ref_logp_BT is not None:
        kl_tok = kl_estimate(logp_BT, ref_logp_BT, kl_type)
        kl = mean(kl_tok)
        kl_term = aggregate(kl_tok, m, agg, max_len, n_groups)
    else:
        kl_term = 0.0
    ent = mean(entropy_BT) if entropy_BT is not None else jnp.zeros((), jnp.float32)
    ent_term = aggregate(entropy_BT, m, agg, max_len, n_groups) if entropy_BT is not None else 0.0
    loss = pg + kl_coef * kl_term - entropy_coef * ent_term
    metrics = dict(
        pg_loss=pg,
        clipfrac_high=mean((adv_BT > 0) & (ratio > 1.0 + clip_high)),
        clipfrac_low=mean((adv_BT < 0) & (ratio < 1.0 - clip_low)),
        clipfrac_dual=mean((adv_BT < 0) & (ratio > dual_clip)) if dual_clip > 0 else jnp.zeros(()),
        ppo_kl=mean(old_logp_BT.astype(jnp.float32) - logp_BT.astype(jnp.float32)),
        approx_kl=mean(kl_estimate(old_logp_BT, logp_BT, "k3")),
        kl=kl, entropy=ent)
    if behav_logp_BT is not None:
        metrics["behav_weight"] = mean(behaviour_weight(old_logp_BT, behav_logp_BT, behav_cap))
    return loss, metrics


# --------------------------------------------------------------------------- DARO


def daro_bucket(mu_G, n_buckets: int):
    """Bucket index of a group's pass rate μ on the grid {1/K, …, (K-1)/K}: round(μK) - 1, or -1
    for μ ∈ {0, 1} (dropped, as DAPO). Ragged groups (μ = k/n, n ≠ K) go to the nearest level."""
    lvl = jnp.clip(jnp.round(mu_G * n_buckets), 1, n_buckets - 1).astype(jnp.int32) - 1
    return jnp.where((mu_G > 0) & (mu_G < 1), lvl, -1)


def group_shares(loss_BT, mask_BT, group_B, n_groups: int):
    """Each group's share of the token_mean loss: Σ over its rows' tokens of ℓ·m / Σ_all m, so the
    shares sum to aggregate(loss, mask, "token_mean"). group_B maps rows to groups 0..n_groups-1."""
    m = mask_BT.astype(jnp.float32)
    per_row = (loss_BT.astype(jnp.float32) * m).sum(-1) / jnp.maximum(m.sum(), 1.0)
    return jax.ops.segment_sum(per_row, group_B, n_groups)


def daro_loss(per_group_loss_G, mu_G, log_w_K, n_buckets: int | None = None, *, valid_G=None,
              floor: float = 1e-4):
    """DARO: Σ_μ (w_μ·L_μ - ln w_μ) over the buckets present in the batch, w_μ = exp(log_w_μ) > 0.

    per_group_loss_G: each group's share of the policy loss (they sum to the batch loss, e.g. a
    token_mean decomposed by group, see group_shares); mu_G: group pass rates; log_w_K: K-1
    learnable log-weights, one per level μ = j/K, j = 1..K-1 (K = n_buckets, usually the group
    size; train them with the policy params). L_μ sums the groups in bucket μ; valid_G masks
    padding groups.

    L_μ ≤ 0 makes w·L - ln w unbounded below in w (w → ∞), so the weight objective uses
    L̄_μ = max(|L_μ|, floor) with the policy term kept as w·L_μ:
        term = sg(w)·L_μ + (w - sg(w))·sg(L̄_μ) - ln w.
    Its value is the DARO value w·L - ln w; the policy gradient is w·∇L_μ; the log-weight gradient
    is w·L̄_μ - 1, whose root w = 1/L̄_μ (≤ 1/floor) keeps |w_μ L_μ| equal across buckets, the
    stationary condition DARO derives (w_μ L_μ = C). For L_μ > floor this is exactly DARO.
    Buckets with no group this step contribute nothing (their -ln w would push w → ∞).
    """
    n_levels = log_w_K.shape[0] + 1
    if n_buckets is not None and n_buckets != n_levels:
        raise ValueError(f"log_w_K has {n_levels - 1} entries, n_buckets={n_buckets} needs "
                         f"{n_buckets - 1}")
    idx = daro_bucket(mu_G, n_levels)
    keep = idx >= 0 if valid_G is None else (idx >= 0) & valid_G
    seg = jnp.where(keep, idx, n_levels - 1)  # dropped groups go to a spare segment
    lk = jax.ops.segment_sum(jnp.where(keep, per_group_loss_G, 0.0), seg, n_levels)[:-1]
    cnt = jax.ops.segment_sum(keep.astype(jnp.float32), seg, n_levels)[:-1]
    present = cnt > 0
    w = jnp.exp(log_w_K)
    w_sg = jax.lax.stop_gradient(w)
    l_bar = jax.lax.stop_gradient(jnp.maximum(jnp.abs(lk), floor))
    term = w_sg * lk + (w - w_sg) * l_bar - log_w_K
    loss = jnp.where(present, term, 0.0).sum()
    metrics = dict(daro_w=w, daro_L=lk, daro_count=cnt,
                   daro_nonpos=(present & (lk <= floor)).sum().astype(jnp.float32))
    return loss, metrics
