"""Advantages: hand-computed cases, verl's conventions (loop ports below) and ragged masks."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ada_jax import advantages as A


def _groups(r, m):
    return [list(np.asarray(r)[b][np.asarray(m)[b]]) for b in range(r.shape[0])]


def _scatter(vals, m):
    out = np.zeros(m.shape)
    for b, v in enumerate(vals):
        out[b, np.asarray(m)[b]] = v
    return out


# Loop ports of verl's core_algos outcome estimators (torch.std is unbiased).
def verl_grpo(r, m, eps=1e-6, norm=True):
    vals = []
    for g in _groups(r, m):
        g = np.asarray(g, np.float64)
        mean, std = (0.0, 1.0) if len(g) == 1 else (g.mean(), g.std(ddof=1))
        vals.append((g - mean) / (std + eps) if norm else g - mean)
    return _scatter(vals, m)


def verl_rloo(r, m):
    vals = []
    for g in _groups(r, m):
        g = np.asarray(g, np.float64)
        n = len(g)
        vals.append(g * n / (n - 1) - g.mean() * n / (n - 1) if n > 1 else g)
    return _scatter(vals, m)


def verl_rpp_baseline(r, m, lengths):
    c = verl_grpo(r, m, norm=False)
    w = np.asarray(m) * lengths  # token-level: each sequence counts its length
    mean = (c * w).sum() / w.sum()
    var = ((c - mean) ** 2 * w).sum() / w.sum() * w.sum() / (w.sum() - 1)
    return (c - mean) / np.sqrt(var + 1e-8) * np.asarray(m)


def _ragged(seed, b=6, n=5):
    rng = np.random.default_rng(seed)
    r = (rng.random((b, n)) < 0.4).astype(np.float32)
    sizes = np.array([5, 4, 1, 3, 5, 2])[:b]
    m = np.arange(n)[None, :] < sizes[:, None]
    r[0] = [1, 0, 0, 0, 0]  # a mixed group
    r[4] = 1.0  # an all-correct group
    return jnp.asarray(r), jnp.asarray(m)


def test_grpo_hand_case():
    r = jnp.array([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    m = jnp.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0]], bool)
    adv = A.grpo(r, m)
    # mean 1/4, unbiased std √(3/16 · 4/3) = 1/2 -> (1 - 1/4)/(1/2) = 1.5, (0 - 1/4)/(1/2) = -0.5
    np.testing.assert_allclose(adv[0], [1.5, -0.5, -0.5, -0.5], rtol=1e-5)
    s = math.sqrt(1 / 3)  # [1,1,0,0]: var = 4·(1/4)/3
    np.testing.assert_allclose(adv[1], [0.5 / s, 0.5 / s, -0.5 / s, -0.5 / s], rtol=1e-5)
    np.testing.assert_allclose(adv[2], 0.0)  # collapsed group: no signal
    np.testing.assert_allclose(adv[3], [1.0 / (1 + 1e-6), 0, 0, 0], rtol=1e-6)  # verl singleton


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_against_verl_ports(seed):
    r, m = _ragged(seed)
    np.testing.assert_allclose(A.grpo(r, m), verl_grpo(r, m), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(A.drgrpo(r, m), verl_grpo(r, m, norm=False), atol=1e-6)
    np.testing.assert_allclose(A.rloo(r, m), verl_rloo(r, m), atol=1e-6)
    lengths = np.random.default_rng(seed).integers(1, 50, m.shape).astype(np.float32)
    np.testing.assert_allclose(A.reinforce_pp(r, m, jnp.asarray(lengths)),
                               verl_rpp_baseline(r, m, lengths), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(A.reinforce_pp(r, m), verl_rpp_baseline(r, m, np.ones(m.shape)),
                               rtol=1e-4, atol=1e-5)
    for name in A.NAMES[:-1]:
        adv = A.compute(name, r, m)
        assert adv.dtype == jnp.float32 and np.all(np.asarray(adv)[~np.asarray(m)] == 0)


def test_rloo_raft_drgrpo_hand():
    r = jnp.array([[1.0, 0, 0, 0]])
    m = jnp.ones((1, 4), bool)
    np.testing.assert_allclose(A.rloo(r, m), [[1.0, -1 / 3, -1 / 3, -1 / 3]], rtol=1e-6)
    np.testing.assert_allclose(A.drgrpo(r, m), [[0.75, -0.25, -0.25, -0.25]])
    np.testing.assert_allclose(A.raft(r, m), [[1.0, 0, 0, 0]])
    r2 = jnp.array([[1.0, 1, 0, 0], [0, 0, 0, 0]])
    np.testing.assert_allclose(A.raft(r2, jnp.ones((2, 4), bool), normalise=True),
                               [[2.0, 2.0, 0, 0], [0, 0, 0, 0]])  # n/k: mean over the 2 positives


def test_batch_normalised_hand_case():
    # centred rewards [[.5, -.5], [0, 0]]: batch mean 0, unbiased batch var (0.25 + 0.25)/3 = 1/6
    r = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    m = jnp.ones((2, 2), bool)
    a = 0.5 / math.sqrt(1 / 6)
    np.testing.assert_allclose(A.liteppo(r, m), [[a, -a], [0, 0]], rtol=1e-5)
    np.testing.assert_allclose(A.reinforce_pp(r, m), [[a, -a], [0, 0]], rtol=1e-5)


def test_liteppo():
    r, m = _ragged(3)
    c = verl_grpo(r, m, norm=False)
    vals = c[np.asarray(m)]
    np.testing.assert_allclose(A.liteppo(r, m), c / (vals.std(ddof=1) + 1e-6), rtol=1e-5, atol=1e-6)


def test_pool_baseline_hand_cases():
    r = jnp.array([[1.0, 1, 0, 0]])
    m = jnp.ones((1, 4), bool)
    n, k = jnp.array([10]), jnp.array([2])  # pool pass rate 0.2
    np.testing.assert_allclose(A.pool_baseline(r, m, n, k), [[0.8, 0.8, -0.2, -0.2]], rtol=1e-6)
    # correction: positives (n/N)/(m⁺/k) = (4/10)/(2/2) = 0.4, negatives (4/10)/(2/8) = 1.6
    corr = A.pool_baseline(r, m, n, k, correction=True)
    np.testing.assert_allclose(corr, [[0.32, 0.32, -0.32, -0.32]], rtol=1e-6)
    assert abs(float(corr.sum())) < 1e-6  # kept advantages sum to zero once corrected
    std = math.sqrt(10 / 9 * 0.2 * 0.8)  # unbiased pool std, as the reference's global-stats GRPO
    np.testing.assert_allclose(A.pool_baseline(r, m, n, k, std_normalise=True),
                               [[0.8 / (std + 1e-6)] * 2 + [-0.2 / (std + 1e-6)] * 2], rtol=1e-5)
    np.testing.assert_allclose(A.pool_baseline(r, m, n, k, weight_fn="log"),
                               [[4.0, 4.0, -1.0, -1.0]], rtol=1e-5)  # × 1/p̃ = 5
    inv_sqrt = A.pool_baseline(r, m, n, k, weight_fn=lambda p: 1 / jnp.sqrt(p))
    np.testing.assert_allclose(inv_sqrt, np.array([[0.8, 0.8, -0.2, -0.2]]) / np.sqrt(0.2), rtol=1e-5)


def test_pool_baseline_correction_is_exact_importance_weighting():
    # Enumerate every kept subset a uniform draw of 4 from a pool of 9 (3 positives) could give and
    # compare with the balanced kept group: the corrected (1/n)Σ A_j x_j must equal the full pool's
    # (1/N)Σ (r - p̃) x_j in expectation over which positives / negatives are kept, for any x.
    rng = np.random.default_rng(0)
    big_n, k, n = 9, 3, 4
    x = rng.normal(size=big_n)  # stand-in for each pooled sample's ∇log π
    lab = np.array([1] * k + [0] * (big_n - k), np.float32)
    p = k / big_n
    full = np.mean((lab - p) * x)
    vals = []
    for pos in itertools.combinations(range(k), 2):  # balanced: 2 positives, 2 negatives
        for neg in itertools.combinations(range(k, big_n), 2):
            idx = list(pos) + list(neg)
            adv = A.pool_baseline(jnp.asarray(lab[idx])[None], jnp.ones((1, n), bool),
                                  jnp.array([big_n]), jnp.array([k]), correction=True)
            vals.append(np.mean(np.asarray(adv[0]) * x[idx]))
    assert np.mean(vals) == pytest.approx(full, rel=1e-5)


def test_ragged_shapes_and_jit():
    r, m = _ragged(5)
    n_b = jnp.array([20, 12, 1, 3, 30, 8])
    k_b = jnp.array([4, 3, 0, 1, 30, 2])
    f = jax.jit(lambda r, m, n, k: A.compute("pool", r, m, pool_n_B=n, pool_pos_B=k,
                                             correction=True, std_normalise=True, weight_fn="log"))
    adv = np.asarray(f(r, m, n_b, k_b))
    assert adv.shape == r.shape and np.all(np.isfinite(adv))
    assert np.all(adv[~np.asarray(m)] == 0)
    np.testing.assert_allclose(adv[4], 0.0)  # p̃ = 1: no signal
    with pytest.raises(ValueError):
        A.compute("ppo", r, m)
