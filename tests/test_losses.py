"""Policy loss, aggregation modes, KL estimators and DARO against hand values and definitions."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ada_jax import losses as L

X = jnp.array([[1.0, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]])
M = jnp.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], bool)  # ragged, plus an empty row


@pytest.mark.parametrize("agg,kw,want", [
    ("token_mean", {}, (1 + 2 + 3 + 5) / 4),
    ("seq_mean_token_mean", {}, (6 / 3 + 5) / 2),  # the empty row is not a sequence
    ("seq_mean_token_sum", {}, (6 + 5) / 2),
    ("constant", {}, 11 / (4 * 3)),  # defaults: T × rows
    ("constant", dict(max_len=10, n_groups=2), 11 / 20),
])
def test_aggregation_on_ragged_masks(agg, kw, want):
    assert float(L.aggregate(X, M, agg, **kw)) == pytest.approx(want)


def test_aggregation_rejects_unknown():
    with pytest.raises(ValueError):
        L.aggregate(X, M, "sum")


def _ppo(adv, ratio, **kw):
    old = jnp.zeros((1, len(ratio)))
    logp = jnp.log(jnp.asarray(ratio, jnp.float32))[None]
    adv = jnp.asarray(adv, jnp.float32)[None]
    return L.policy_loss(logp, old, adv, jnp.ones((1, len(ratio)), bool), clip_low=0.2,
                         clip_high=0.28, **kw)


def test_ppo_clip_hand_cases():
    adv, ratio = [1.0, -1.0, -1.0, 1.0], [1.5, 1.5, 0.5, 0.5]
    tok, _ = L.ppo_token_loss(jnp.log(jnp.array([ratio])), jnp.zeros((1, 4)), jnp.array([adv]),
                              clip_low=0.2, clip_high=0.28)
    # A>0, ρ=1.5: capped at 1+ε_high; A<0, ρ=1.5: unclipped (pessimistic max); A<0, ρ=0.5:
    # clipped at 1-ε_low; A>0, ρ=0.5: unclipped.
    np.testing.assert_allclose(tok[0], [-1.28, 1.5, 0.8, -0.5], rtol=1e-6)
    loss, met = _ppo(adv, ratio)
    assert float(loss) == pytest.approx((-1.28 + 1.5 + 0.8 - 0.5) / 4, rel=1e-6)
    assert float(met["clipfrac_high"]) == 0.25 and float(met["clipfrac_low"]) == 0.25
    assert float(met["ppo_kl"]) == pytest.approx(-np.mean(np.log(ratio)), rel=1e-6)
    k3 = np.mean(np.array(ratio) - 1 - np.log(ratio))  # k3 of π_old vs π on samples of π_old
    assert float(met["approx_kl"]) == pytest.approx(k3, rel=1e-5)
    # dual clip caps the A<0, ρ=1.5 token at -A·c = 1.4
    loss, met = _ppo(adv, ratio, dual_clip=1.4)
    assert float(loss) == pytest.approx((-1.28 + 1.4 + 0.8 - 0.5) / 4, rel=1e-6)
    assert float(met["clipfrac_dual"]) == 0.25


def test_sequence_advantage_broadcast_and_gradient():
    rng = np.random.default_rng(0)
    logp = jnp.asarray(rng.normal(size=(3, 4)) * 0.1 - 2.0, jnp.float32)
    adv_B = jnp.array([1.0, -0.5, 2.0])
    loss_fn = lambda lp: L.policy_loss(lp, logp, adv_B, M, agg="token_mean")[0]  # noqa: E731
    # at ρ = 1 the surrogate's gradient is the policy gradient: -A_t / (number of tokens)
    g = jax.grad(loss_fn)(logp)
    want = -np.asarray(adv_B)[:, None] * np.asarray(M) / 4.0
    np.testing.assert_allclose(g, want, rtol=1e-6)
    a, _ = L.policy_loss(logp, logp, adv_B, M)
    b, _ = L.policy_loss(logp, logp, jnp.broadcast_to(adv_B[:, None], (3, 4)), M)
    assert float(a) == float(b)


def test_log_ratio_is_clamped():
    loss, met = L.policy_loss(jnp.array([[60.0, -60.0]]), jnp.zeros((1, 2)), jnp.array([-1.0]),
                              jnp.ones((1, 2), bool))
    g = jax.grad(lambda lp: L.policy_loss(lp, jnp.zeros((1, 2)), jnp.array([-1.0]),
                                          jnp.ones((1, 2), bool))[0])(jnp.array([[60.0, -60.0]]))
    assert np.isfinite(float(loss)) and np.all(np.isfinite(g))
    assert float(loss) == pytest.approx((math.exp(20) + 0.8) / 2, rel=1e-5)


def _categorical():
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.normal(size=12), jnp.float32)
    ref = jax.nn.log_softmax(jnp.asarray(rng.normal(size=12), jnp.float32))
    return logits, ref


def test_kl_estimators_against_definitions():
    logits, ref = _categorical()
    logp = jax.nn.log_softmax(logits)
    pi = jnp.exp(logp)
    kl = float((pi * (logp - ref)).sum())  # KL(π‖π_ref)
    exp = lambda k: float((pi * L.kl_estimate(logp, ref, k)).sum())  # noqa: E731  exact E_{x~π}
    assert exp("k1") == pytest.approx(kl, rel=1e-5)
    assert exp("k3") == pytest.approx(kl, rel=1e-5)
    assert exp("k2") == pytest.approx(float((pi * 0.5 * (logp - ref) ** 2).sum()), rel=1e-6)
    assert float(L.kl_estimate(logp, ref, "k3").min()) >= 0.0  # k3 is non-negative per sample
    d = jnp.array([0.3, -0.7])
    np.testing.assert_allclose(L.kl_estimate(d, 0 * d, "k3"), np.exp(-d) + d - 1, rtol=1e-6)
    with pytest.raises(ValueError):
        L.kl_estimate(d, d, "k4")


def test_kl_estimator_gradients_as_losses():
    # Samples come from π (stop-gradient weights); only the estimator's value is differentiated.
    logits, ref = _categorical()

    def as_loss(kind):
        def f(th):
            lp = jax.nn.log_softmax(th)
            return (jax.lax.stop_gradient(jnp.exp(lp)) * L.kl_estimate(lp, ref, kind)).sum()
        return jax.grad(f)(logits)

    def kl_fwd(th):
        lp = jax.nn.log_softmax(th)
        return (jnp.exp(lp) * (lp - ref)).sum()

    fwd = jax.grad(kl_fwd)
    rev = jax.grad(lambda th: (jnp.exp(ref) * (ref - jax.nn.log_softmax(th))).sum())
    np.testing.assert_allclose(as_loss("k2"), fwd(logits), atol=1e-6)  # k2: ∇KL(π‖ref)
    np.testing.assert_allclose(as_loss("k3"), rev(logits), atol=1e-6)  # k3: ∇KL(ref‖π)
    np.testing.assert_allclose(as_loss("k1"), 0.0, atol=1e-6)  # k1: zero expected gradient


def test_kl_and_entropy_terms():
    rng = np.random.default_rng(2)
    logp = jnp.asarray(-rng.random((3, 4)), jnp.float32)
    ref = jnp.asarray(-rng.random((3, 4)), jnp.float32)
    ent = jnp.asarray(rng.random((3, 4)), jnp.float32)
    adv = jnp.array([1.0, -1.0, 0.5])
    base, _ = L.policy_loss(logp, logp, adv, M, agg="seq_mean_token_sum")
    loss, met = L.policy_loss(logp, logp, adv, M, agg="seq_mean_token_sum", ref_logp_BT=ref,
                              kl_coef=0.1, kl_type="k3", entropy_BT=ent, entropy_coef=0.01)
    kl_agg = L.aggregate(L.kl_estimate(logp, ref, "k3"), M, "seq_mean_token_sum")
    ent_agg = L.aggregate(ent, M, "seq_mean_token_sum")
    assert float(loss) == pytest.approx(float(base + 0.1 * kl_agg - 0.01 * ent_agg), rel=1e-6)
    assert float(met["kl"]) == pytest.approx(float(L.aggregate(L.kl_estimate(logp, ref, "k3"), M)))
    assert float(met["entropy"]) == pytest.approx(float(L.aggregate(ent, M)))
    assert set(met) == set(L.policy_loss(logp, logp, adv, M)[1])  # same keys whatever the options
    pen = L.kl_reward_penalty(logp, ref, M, 0.5, "k1")
    np.testing.assert_allclose(pen, 0.5 * ((logp - ref) * M).sum(-1), rtol=1e-6)
    logits = jnp.array([[[0.0, 0.0, 0.0, 0.0]]])
    assert float(L.entropy_from_logits(logits)[0, 0]) == pytest.approx(math.log(4))


# ----------------------------------------------------------------------------- DARO


def test_daro_buckets():
    mu = jnp.array([0.0, 0.25, 0.5, 0.75, 1.0, 0.4])
    np.testing.assert_array_equal(L.daro_bucket(mu, 4), [-1, 0, 1, 2, -1, 1])


def test_daro_value_and_gradients():
    per_group = jnp.array([0.2, 0.3, -0.1, 0.7, 0.05])
    mu = jnp.array([0.25, 0.25, 0.5, 1.0, 0.0])  # bucket 0 twice, bucket 1 negative, two dropped
    log_w = jnp.array([0.1, -0.2, 0.3])  # bucket 2 (μ = 3/4) absent this step
    loss, met = L.daro_loss(per_group, mu, log_w)
    w = np.exp(np.asarray(log_w))
    assert float(loss) == pytest.approx(w[0] * 0.5 - 0.1 + w[1] * -0.1 + 0.2, rel=1e-6)
    np.testing.assert_allclose(met["daro_count"], [2, 1, 0])
    assert float(met["daro_nonpos"]) == 1
    g_pol = jax.grad(lambda x: L.daro_loss(x, mu, log_w)[0])(per_group)
    np.testing.assert_allclose(g_pol, [w[0], w[0], w[1], 0, 0], rtol=1e-6)  # w_μ ∇L_μ
    g_w = jax.grad(lambda lw: L.daro_loss(per_group, mu, lw)[0])(log_w)
    # w·L̄ - 1 with L̄ = max(|L|, floor); nothing for the absent bucket
    np.testing.assert_allclose(g_w, [w[0] * 0.5 - 1, w[1] * 0.1 - 1, 0.0], rtol=1e-6)


@pytest.mark.parametrize("bucket_loss,want_w", [(0.25, 4.0), (-0.5, 2.0), (0.0, 1e4)])
def test_daro_weights_converge_to_inverse_loss(bucket_loss, want_w):
    # DARO's stationary point w_μ = 1/L_μ; for L ≤ 0 the safe version stays at 1/max(|L|, floor).
    per_group = jnp.array([bucket_loss])
    mu = jnp.array([0.5])
    grad = jax.jit(jax.grad(lambda lw: L.daro_loss(per_group, mu, lw)[0]))
    log_w = jnp.zeros(1)
    scale = max(abs(bucket_loss), 1e-4)
    for _ in range(3000):  # gradient steps on log w (the gradient is w·L̄ - 1), step-size capped
        log_w = log_w - 0.5 * grad(log_w) / jnp.maximum(jnp.exp(log_w) * scale, 1.0)
    assert float(jnp.exp(log_w)[0]) == pytest.approx(want_w, rel=1e-3)


def test_group_shares_sum_to_token_mean():
    rng = np.random.default_rng(3)
    tok = jnp.asarray(rng.normal(size=(3, 4)), jnp.float32)
    shares = L.group_shares(tok, M, jnp.array([0, 1, 1]), 2)
    assert float(shares.sum()) == pytest.approx(float(L.aggregate(tok, M)), rel=1e-6)


# --------------------------------------------------------------------------- decoupled PPO


def test_decoupled_ppo_is_plain_ppo_on_policy_and_weights_stale_tokens():
    """docs/spec.md §10 (AReaL): ρ = π/π_prox is clipped, π_prox/π_behav weights each token; with
    π_prox = π_behav it is plain PPO; the weight is capped and carries no gradient."""
    rng = np.random.default_rng(1)
    logp = jnp.asarray(rng.normal(size=(3, 4)) * 0.3 - 2.0, jnp.float32)
    prox = jnp.asarray(np.asarray(logp) + rng.normal(size=(3, 4)) * 0.1, jnp.float32)
    behav = jnp.asarray(np.asarray(prox) + rng.normal(size=(3, 4)) * 0.5, jnp.float32)
    adv = jnp.array([1.0, -0.5, 2.0])
    plain, _ = L.policy_loss(logp, prox, adv, M)
    same, met = L.policy_loss(logp, prox, adv, M, behav_logp_BT=prox)
    assert float(same) == float(plain) and float(met["behav_weight"]) == 1.0
    # Token by token: w · max(-Aρ, -A clip(ρ)), ρ against the proximal policy, not behaviour.
    w = np.exp(np.asarray(prox) - np.asarray(behav))
    r = np.exp(np.asarray(logp) - np.asarray(prox))
    a = np.broadcast_to(np.asarray(adv)[:, None], r.shape)
    want = w * np.maximum(-a * r, -a * np.clip(r, 0.8, 1.28))
    tok, _ = L.ppo_token_loss(logp, prox, a, clip_low=0.2, clip_high=0.28, behav_logp_BT=behav)
    np.testing.assert_allclose(tok, want, rtol=1e-5)
    capped, _ = L.ppo_token_loss(logp, prox, a, clip_low=0.2, clip_high=0.28,
                                 behav_logp_BT=behav, behav_cap=1.5)
    np.testing.assert_allclose(capped, np.minimum(w, 1.5) * want / w, rtol=1e-5)
    # Gradient: -A·w·ρ / (tokens) where the clip is inactive, 0 where it binds.
    g = jax.grad(lambda lp: L.policy_loss(lp, prox, adv, M, behav_logp_BT=behav)[0])(logp)
    live = np.where(a > 0, r <= 1.28, r >= 0.8)
    want_g = np.where(live, -a * w * r, 0.0) * np.asarray(M) / float(np.asarray(M).sum())
    np.testing.assert_allclose(g, want_g, rtol=1e-5, atol=1e-7)
    _, met = L.policy_loss(logp, prox, adv, M, behav_logp_BT=behav)
    assert float(met["behav_weight"]) == pytest.approx(
        float((w * np.asarray(M)).sum() / np.asarray(M).sum()), rel=1e-5)
