"""Objectives, smoothing, allocation, gate and stopping costs against the closed forms of
docs/spec.md §3-4."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from ada_jax import objectives as O

P = np.array([0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9])


@pytest.mark.parametrize("name", O.OBJECTIVES)
def test_weight_is_derivative_of_value(name):
    grad = jax.vmap(jax.grad(lambda p: O.value(name, p, 0.3)))(jnp.asarray(P, jnp.float32))
    np.testing.assert_allclose(grad, O.weight(name, jnp.asarray(P), 0.3), rtol=1e-4)


def test_transform_constants():
    # f(p) and f'(p) at points where a wrong constant shows (docs/spec.md §3 table).
    assert O.value("arcsin", 0.5) == pytest.approx(math.pi / 2)
    assert O.value("arcsin", 1.0) == pytest.approx(math.pi)
    assert O.weight("arcsin", 0.5) == pytest.approx(2.0)
    assert O.weight("arcsin", 0.1) == pytest.approx(1 / math.sqrt(0.09))
    assert O.weight("log", 0.25) == pytest.approx(4.0)
    assert O.value("log", 0.25) == pytest.approx(math.log(0.25))
    assert O.weight("power", 0.25, alpha=0.5) == pytest.approx(1.0)
    assert O.weight("power", 0.25, alpha=2.0) == pytest.approx(0.5)
    assert O.value("power", 0.25, alpha=0.5) == pytest.approx(0.5)
    assert O.weight("linear", 0.3) == 1.0
    assert isinstance(O.weight("log", jnp.asarray(0.5)), jax.Array)  # JAX in, JAX out
    with pytest.raises(ValueError):
        O.weight("sqrt", 0.5)


def test_smoothing():
    np.testing.assert_allclose(O.clip_pass_rate(np.array([0.0, 0.5, 1.0]), 0.05), [0.05, 0.5, 0.95])
    assert O.bayes_pass_rate(0, 4, 1.0, 1.0) == pytest.approx(1 / 6)
    assert O.bayes_pass_rate(4, 4, 1.0, 1.0) == pytest.approx(5 / 6)
    assert O.bayes_pass_rate(3, 10, 1.0, 16.0) == pytest.approx(4 / 27)
    assert np.isfinite(O.weight("log", O.clip_pass_rate(0.0, 0.01)))


# ----------------------------------------------------------------------------- allocation


def test_arcsin_allocation_is_uniform():
    # f' = 1/√(p(1-p)) ⇒ N* ∝ 1: uniform is already optimal for GRPO (docs/spec.md §3).
    np.testing.assert_array_equal(O.variance_optimal_allocation(P, 128, "arcsin"), np.full(8, 16))
    n = O.variance_optimal_allocation(P, 130, "arcsin")
    assert n.sum() == 130 and n.max() - n.min() == 1


@pytest.mark.parametrize("name,alpha,expect", [
    ("log", 0.5, lambda p, a: np.sqrt((1 - p) / p)),
    ("power", 0.5, lambda p, a: p ** (a - 1) * np.sqrt(p * (1 - p))),
    ("power", 2.0, lambda p, a: p ** (a - 1) * np.sqrt(p * (1 - p))),
    ("linear", 0.5, lambda p, a: np.sqrt(p * (1 - p))),
])
def test_optimal_allocation_closed_forms(name, alpha, expect):
    real = O.allocate_continuous(O.variance_optimal_scores(P, name, alpha), 1000.0, n_min=0)
    want = expect(P, alpha)
    np.testing.assert_allclose(real, 1000.0 * want / want.sum(), rtol=1e-9)
    n = O.variance_optimal_allocation(P, 1000, name, alpha, n_min=0)
    assert n.sum() == 1000 and np.all(np.abs(n - real) < 1.0)


def test_water_filling_by_hand():
    # scores 3, 0, 1, tiny with box [1, 5], total 10: prompt 0 saturates at 5, zero-score prompt and
    # tiny prompt sit at 1, the free prompt takes the remaining 3.
    real = O.allocate_continuous([3, 0, 1, 1e-9], 10, 1, 5)
    np.testing.assert_allclose(real, [5, 1, 3, 1], atol=1e-6)
    np.testing.assert_array_equal(O.allocate([3, 0, 1, 1e-9], 10, 1, 5), [5, 1, 3, 1])
    # Largest remainder: 10 ∝ (1, 1, 1) -> 3.33 each -> one extra unit to the first (stable ties).
    np.testing.assert_array_equal(O.allocate([1, 1, 1], 10, 0), [4, 3, 3])
    with pytest.raises(ValueError):
        O.allocate([1, 1], 10, 1, 4)  # 2·4 < 10: infeasible


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.floats(0.0, 50.0), min_size=1, max_size=24), st.integers(0, 6),
       st.integers(0, 40), st.data())
def test_allocation_invariants(scores, n_min, extra, data):
    b = len(scores)
    n_max = data.draw(st.one_of(st.none(), st.integers(n_min, n_min + 40)))
    hi = np.inf if n_max is None else n_max
    total = b * n_min + min(extra * b, (hi - n_min) * b if n_max is not None else extra * b)
    n = O.allocate(scores, int(total), n_min, n_max)
    assert n.dtype == np.int64 and n.sum() == int(total)
    assert np.all(n >= n_min) and np.all(n <= hi)
    real = O.allocate_continuous(scores, total, n_min, n_max)
    assert np.all(np.abs(n - real) < 1.0 + 1e-6)  # rounding moves each prompt by < 1 unit
    s = np.asarray(scores)
    i, j = np.argmax(s), np.argmin(s)
    assert n[i] >= n[j]  # more score never means fewer samples


def test_lagrange_optimum_beats_perturbations():
    rng = np.random.default_rng(0)
    for name in ("log", "power", "linear"):
        s = O.variance_optimal_scores(P, name, 0.5)
        real = O.allocate_continuous(s, 200.0, n_min=1, n_max=60)
        v = lambda n: np.sum(s ** 2 / n)  # noqa: E731  docs/spec.md §3: Σ f'² p(1-p) / N
        for _ in range(200):
            d = rng.normal(size=len(P))
            d -= d.mean()  # keep the budget
            cand = real + 0.5 * d
            if np.all(cand >= 1) and np.all(cand <= 60):
                assert v(cand) > v(real)
        # the integer allocation is within 1% of the continuous optimum and far better than uniform
        n = O.variance_optimal_allocation(P, 200, name, n_min=1, n_max=60)
        assert v(real) <= v(n) <= 1.01 * v(real)
        assert v(n) <= v(np.full(8, 25.0)) + 1e-12


def test_est_allocation():
    p_hat = np.array([0.01, 0.04, 0.25, 1.0])
    n = O.est_allocation(p_hat, 100, "inv_sqrt")
    np.testing.assert_array_equal(n, O.allocate(1 / np.sqrt(p_hat), 100, 1))
    share = 1 / np.sqrt(p_hat)
    np.testing.assert_allclose(n / n.sum(), share / share.sum(), atol=0.01)
    n = O.est_allocation(p_hat, 20, "inv")  # 1/p̂ = 100:25:4:1 -> at least 1 each
    assert n.sum() == 20 and n.min() >= 1 and n[0] > n[1] > n[2] >= n[3]
    assert O.est_allocation(p_hat, 20, "inv", n_max=8).max() <= 8
    np.testing.assert_array_equal(O.est_allocation(P, 64, "optimal", "arcsin"), np.full(8, 8))


def test_gvm_allocation_and_zero_rules():
    p = np.array([0.0, 0.2, 0.5, 0.05, 0.8])
    g = np.array([3.0, 0.0, 2.0, 1.0, 1.0])
    s = O.gvm_scores(p, g, alpha=1e-3, beta=2.0)
    assert s[0] == 0 and s[1] == 0  # p = 0 or G = 0 -> no samples
    assert s[2] == pytest.approx(2.0 / math.sqrt(0.5 + 1e-3 / 0.5))
    assert s[3] == pytest.approx(1.0 / math.sqrt(0.05 + 1e-3 / 0.05))
    s3 = O.gvm_scores([0.1], [1.0], alpha=0.01, beta=3.0)[0]  # α / p^(β-1) = 0.01 / 0.01
    assert s3 == pytest.approx(1 / math.sqrt(0.1 + 1.0))
    n = O.gvm_allocation(p, g, 8 * len(p))
    assert n.sum() == 40 and n[0] == 0 and n[1] == 0
    np.testing.assert_allclose(n[2:], 40 * s[2:] / s.sum(), atol=1.0)
    np.testing.assert_array_equal(O.gvm_allocation([0.0, 0.0], [1.0, 1.0], 16), [8, 8])  # all zero


# ----------------------------------------------------------------------------- gate and stopping


def test_gate_prob():
    assert O.gate_prob(0.5, 4) == pytest.approx(1 - 2 / 16)
    assert O.gate_prob(0.0, 8) == 0.0 and O.gate_prob(1.0, 8) == 0.0
    assert O.gate_prob(1e-4, 8) == pytest.approx(8e-4, rel=1e-3)  # ≈ n·p for small p
    grid = np.linspace(0.01, 0.99, 99)
    assert grid[np.argmax(O.gate_prob(grid, 6))] == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    draws = rng.random((200_000, 4)) < 0.2
    mixed = draws.any(1) & ~draws.all(1)
    assert mixed.mean() == pytest.approx(O.gate_prob(0.2, 4), abs=4 * math.sqrt(0.6 * 0.4 / 2e5))


@pytest.mark.parametrize("p,k", [(0.5, 1), (0.1, 4), (0.03, 2)])
def test_pos_rule_is_negative_binomial(p, k):
    mean, var = O.stopping_moments(p, k)
    assert mean == pytest.approx(k / p, rel=1e-9)
    assert var == pytest.approx(k * (1 - p) / p ** 2, rel=1e-7)
    t = np.arange(0, 400)
    surv = O.stopping_survival(p, k, 0, 399)
    # P(T > t) = P(fewer than k successes in t trials); scipy's nbinom counts failures.
    np.testing.assert_allclose(surv, stats.nbinom.sf(t - k, k, p), atol=1e-12)


def test_balance_rule():
    for p in (0.5, 0.2, 0.9):  # K = 1/1: first sample, then wait for the other label
        mean, _ = O.stopping_moments(p, 1, 1)
        assert mean == pytest.approx(1 + p / (1 - p) + (1 - p) / p, rel=1e-9)
    grid = np.linspace(0.05, 0.95, 19)
    means = np.array([O.stopping_moments(p, 2, 2)[0] for p in grid])
    assert grid[np.argmin(means)] == pytest.approx(0.5)  # cheapest at p = 1/2
    np.testing.assert_allclose(means, means[::-1], rtol=1e-9)  # symmetric when k_pos = k_neg
    small = np.array([0.01, 0.003, 0.001])
    ratio = [O.stopping_moments(p, 2, 2)[0] * p * (1 - p) for p in small]
    assert np.allclose(ratio, 2.0, rtol=0.02)  # E[N] ~ k/(p(1-p)) as p -> 0 (docs/spec.md §4.4)


@pytest.mark.parametrize("p,k_pos,k_neg", [(0.1, 2, 2), (0.3, 1, 0), (0.7, 2, 2)])
def test_rounds_with_cap_against_simulation(p, k_pos, k_neg):
    m, r = 8, 4
    mean, var = O.stopping_moments(p, k_pos, k_neg, round_size=m, max_rounds=r)
    rng = np.random.default_rng(1)
    draws = rng.random((100_000, m * r)) < p
    cpos = draws.cumsum(1)[:, m - 1::m]
    cneg = np.arange(1, r + 1) * m - cpos
    done = (cpos >= k_pos) & (cneg >= k_neg)
    cost = m * np.where(done.any(1), done.argmax(1) + 1, r)
    se = cost.std() / math.sqrt(len(cost))
    assert abs(cost.mean() - mean) < 4 * se + 1e-9
    assert cost.var() == pytest.approx(var, rel=0.05)


def test_worked_example_12_3():
    # docs/spec.md §4.5: tiers K = 4 / 32 / 256 with shares 62.7% / 16.9% / 1.7%.
    cost = O.tier_cost([4, 32, 256], [0.627, 0.169, 0.017])
    assert cost == pytest.approx(2.508 + 5.408 + 4.352)
    assert round(cost, 1) == 12.3
    # Charging escalation in full (everyone pays 4; the unsolved go on to 32, then 256 in total).
    assert O.escalation_cost([4, 32, 256], [0.627, 0.169, 0.017]) == pytest.approx(
        4 + 28 * 0.373 + 224 * 0.204)


def test_est_update():
    n_tot, n_pos, p_hat = O.est_update(10.0, 2.0, 8.0, 3.0, decay=0.9, alpha=1.0, beta=16.0)
    assert (n_tot, n_pos) == (pytest.approx(17.0), pytest.approx(4.8))
    assert p_hat == pytest.approx(5.8 / 34.0)
    step = jax.jit(lambda a, b: O.est_update(a, b, jnp.full(3, 8.0), jnp.array([0.0, 4.0, 8.0])))
    a = b = jnp.zeros(3)
    for _ in range(300):
        a, b, p = step(a, b)
    # fixed point: N_tot = n/(1-λ) = 80, N_pos = k/(1-λ)
    np.testing.assert_allclose(a, 80.0, rtol=1e-5)
    np.testing.assert_allclose(p, (np.array([0.0, 40.0, 80.0]) + 1) / (80 + 17), rtol=1e-5)
