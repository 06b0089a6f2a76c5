"""Knapsack-RL and VIP (ada_jax/allocation.py, ada_jax/policies/knapsack.py, vip.py): the
solvers against brute force and a numerical optimizer, the authors' rules around them (last
visit's raw success rate, unseen / solved / unsolved prompts, the γ·log(p) term, the Gaussian
process over prompts), the config checks, one training step of each, and an exact resume."""
import itertools
import json
import os

import jax
import numpy as np
import pytest
from scipy import optimize, stats

from ada_jax import allocation as A
from ada_jax import config_check, objectives, train
from configs import base
from tests.test_train import _config, _restore

# --------------------------------------------------------------------------- Knapsack-RL


def test_knapsack_value_is_the_papers():
    """V(N, p) = (1 - p^N - (1-p)^N)·p(1-p)², by hand at a few points."""
    assert A.knapsack_value(4, 0.5) == pytest.approx((1 - 2 / 16) * 0.5 * 0.25)
    assert A.knapsack_value(2, 0.25) == pytest.approx((1 - 0.0625 - 0.5625) * 0.25 * 0.5625)
    assert A.knapsack_value(3, 0.1, info_gain=False) == pytest.approx(1 - 1e-3 - 0.729)
    assert A.knapsack_value(7, 0.0) == 0.0 and A.knapsack_value(7, 1.0) == 0.0
    # InfoGain p(1-p)² favours the hard side: at equal P(mixed) the lower p is worth more
    assert A.knapsack_value(8, 0.3) > A.knapsack_value(8, 0.7)


def _brute(values_fn, B, total, n_min, n_max):
    best, arg = None, None
    for n in itertools.product(range(n_min, n_max + 1), repeat=B):
        if sum(n) == total:
            v = values_fn(np.asarray(n))
            if best is None or v > best:
                best, arg = v, n
    return best, arg


@pytest.mark.parametrize("seed", range(12))
def test_knapsack_dp_equals_brute_force(seed):
    """The DP's total value equals the best of every feasible integer allocation."""
    rng = np.random.default_rng(seed)
    B = int(rng.integers(2, 5))
    n_min = int(rng.integers(1, 3))
    n_max = n_min + int(rng.integers(1, 6))
    total = int(rng.integers(B * n_min, B * n_max + 1))
    p = rng.uniform(0, 1, B)
    p[rng.uniform(size=B) < 0.2] = rng.choice([0.0, 1.0])  # some at the edges
    info = bool(seed % 3)
    got = A.knapsack_allocation(p, total, n_min, n_max, info_gain=info)
    value = lambda n: float(A.knapsack_value(n, p, info).sum())  # noqa: E731
    best, _ = _brute(value, B, total, n_min, n_max)
    assert got.sum() == total and got.min() >= n_min and got.max() <= n_max
    assert value(got) == pytest.approx(best, rel=1e-12, abs=1e-15)


def test_knapsack_shifts_budget_to_informative_prompts():
    """Nearly-solved prompts get the floor; the budget goes to the hard-but-solvable ones."""
    p = np.array([0.98, 0.97, 0.5, 0.1, 0.05])
    n = A.knapsack_allocation(p, 40, 2, 32)
    assert n.sum() == 40 and n[0] == n[1] == 2 and n[3] > 8 and n[4] > 8
    with pytest.raises(ValueError, match="infeasible budget"):
        A.knapsack_allocation(p, 9, 2, 32)


def test_knapsack_budgets_follow_the_authors_rules():
    """Unseen prompts get the uniform budget, solved (p = 1) the floor, the budget the
    solvable prompts are not expected to need goes to the unsolved (p = 0) ones, and the
    solvable ones share an exact knapsack over what is left."""
    p = np.array([0.0, 0.0, 0.25, 0.5, 1.0, 1.0, 0.75, 0.0])
    seen = np.array([1, 1, 1, 1, 1, 1, 1, 0], bool)
    n = A.knapsack_budgets(p, seen, 64, 2, 32, 8)
    assert n.sum() == 64 and n[7] == 8 and n[4] == n[5] == 2
    # needs: int(min(32, log .1 / log max(p, 1-p))) = 8, 3, 8 -> 19 of the 42 left; the other
    # 23 go to the two unsolved prompts, 12 and 11
    assert list(n[:2]) == [2 + 12, 2 + 11]
    eff = np.array([2, 3, 6])
    best, _ = _brute(lambda m: float(A.knapsack_value(m, p[eff]).sum()), 3, 6 + 19, 2, 32)
    assert float(A.knapsack_value(n[eff], p[eff]).sum()) == pytest.approx(best)
    # nothing solvable: the budget left to the unsolved prompts; nothing unsolved: uniform
    np.testing.assert_array_equal(A.knapsack_budgets(np.array([0, 1, 1, 1.]), np.ones(4, bool),
                                                     32, 2, 32, 8), [26, 2, 2, 2])
    np.testing.assert_array_equal(A.knapsack_budgets(np.ones(4), np.ones(4, bool), 32, 2, 32, 8),
                                  [8, 8, 8, 8])
    np.testing.assert_array_equal(A.knapsack_budgets(np.zeros(4), np.zeros(4, bool), 32, 2, 32, 8),
                                  [8, 8, 8, 8])  # nothing seen: uniform


def test_knapsack_budgets_never_favour_the_solved_prompt():
    """The inversion the Beta(1, 16) posterior caused: after one visit of 8, a prompt solved
    8/8 must not get more than one solved 0/8; and caps hold, totals are exact."""
    n = A.knapsack_budgets(np.array([1.0, 0.0]), np.ones(2, bool), 16, 2, 32, 8)
    assert n[0] < n[1]
    rng = np.random.default_rng(0)
    for _ in range(300):
        B = int(rng.integers(2, 20))
        p = rng.choice([0.0, 1.0, 0.125, 0.5, 0.875], B)
        seen = rng.random(B) < 0.8
        n = A.knapsack_budgets(p, seen, 8 * B, 2, 32, 8)
        assert n.sum() == 8 * B and n.min() >= 2 and n.max() <= 32
        solved, unsolved = seen & (p == 1), seen & (p == 0)
        if solved.any() and unsolved.any():
            assert n[solved].max() <= n[unsolved].min()


# --------------------------------------------------------------------------- VIP


@pytest.mark.parametrize("estimator", A.VIP_ESTIMATORS)
@pytest.mark.parametrize("seed", range(8))
def test_vip_integer_optimum_equals_brute_force(estimator, seed):
    rng = np.random.default_rng(100 + seed)
    B = int(rng.integers(2, 5))
    n_min = A.VIP_MIN_BUDGET[estimator] + int(rng.integers(0, 2))
    n_max = n_min + int(rng.integers(1, 6))
    total = int(rng.integers(B * n_min, B * n_max + 1))
    p = rng.uniform(0, 1, B)
    s2 = p * (1 - p)
    if seed % 4 == 0:
        s2[0] = 0.0  # a prompt predicted solved or hopeless
    got = A.vip_allocation(s2, total, n_min, n_max, estimator)
    var = lambda n: float(A.vip_variance(n, s2, estimator).sum())  # noqa: E731
    best, _ = _brute(lambda n: -var(n), B, total, n_min, n_max)
    assert got.sum() == total and got.min() >= n_min and got.max() <= n_max
    assert var(got) == pytest.approx(-best, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("seed", range(6))
def test_vip_continuous_is_the_kkt_point_and_scipy_agrees(seed):
    """min Σ s²/(n-1), Σ n = total, n in [lo, hi]: free prompts share one multiplier
    s²/(n-1)² = λ, clamped ones sit where the multiplier says; SLSQP finds no better point;
    the integer optimum is within one unit of it per prompt and no worse than its rounding."""
    rng = np.random.default_rng(200 + seed)
    B, lo, hi = 8, 2, 12
    p = rng.beta(0.5, 0.5, B)
    s2 = p * (1 - p)
    total = int(rng.integers(B * lo + 4, B * hi - 4))
    n = A.vip_continuous(s2, total, lo, hi)
    assert n.sum() == pytest.approx(total) and n.min() >= lo - 1e-9 and n.max() <= hi + 1e-9
    marg = s2 / (n - 1) ** 2  # -d/dn of s²/(n-1)
    free = (n > lo + 1e-9) & (n < hi - 1e-9)
    assert free.any()
    lam = marg[free].mean()
    np.testing.assert_allclose(marg[free], lam, rtol=1e-9)
    assert np.all(marg[n <= lo + 1e-9] <= lam * (1 + 1e-9))
    assert np.all(marg[n >= hi - 1e-9] >= lam * (1 - 1e-9))
    obj = lambda x: float(np.sum(s2 / (x - 1)))  # noqa: E731
    res = optimize.minimize(obj, np.full(B, total / B), method="SLSQP",
                            bounds=[(lo, hi)] * B,
                            constraints=[{"type": "eq", "fun": lambda x: x.sum() - total}],
                            options=dict(ftol=1e-14, maxiter=500))
    assert res.success and obj(n) <= res.fun * (1 + 1e-7)
    k = A.vip_allocation(s2, total, lo, hi, "rloo")
    assert np.all(np.abs(k - n) < 1 + 1e-9)
    rounded = 1 + objectives.allocate(np.sqrt(s2), total - B, lo - 1, hi - 1)  # largest rem.
    assert obj(n) <= obj(k) + 1e-12 and obj(k) <= obj(rounded) + 1e-12


def test_vip_spends_on_uncertain_prompts_and_checks_convexity():
    s2 = np.array([0.25, 0.2, 0.01, 0.0])
    n = A.vip_allocation(s2, 24, 2, 16)
    assert n.sum() == 24 and n[0] >= n[1] > n[2] and n[3] == 2
    with pytest.raises(ValueError, match="not convex"):
        A.vip_allocation(s2, 24, 2, 16, "drgrpo")


def test_beta_moments_match_scipy():
    n_tot, n_pos, a, b = np.array([0.0, 8.0, 3.5]), np.array([0.0, 2.0, 3.5]), 1.0, 16.0
    mean, s2 = A.beta_moments(n_tot, n_pos, a, b)
    for i in range(3):
        d = stats.beta(n_pos[i] + a, n_tot[i] - n_pos[i] + b)
        assert mean[i] == pytest.approx(d.mean())
        assert s2[i] == pytest.approx(d.mean() - d.var() - d.mean() ** 2)  # E[p] - E[p²]


@pytest.mark.parametrize("seed", range(6))
def test_vip_with_the_gamma_term_equals_brute_force(seed):
    """min Σ v(n_i; a_i) + γ·log(p_i)·n_i over the integer box (the authors' program)."""
    rng = np.random.default_rng(300 + seed)
    B, n_min, n_max = 3, 4, 4 + int(rng.integers(2, 7))
    total = int(rng.integers(B * n_min, B * n_max + 1))
    p = rng.choice([1e-6, 0.02, 0.3, 0.6, 0.97], B)
    lin = A.vip_gamma_term(p, 0.0007)
    got = A.vip_allocation(p * (1 - p), total, n_min, n_max, linear=lin)
    obj = lambda n: A.vip_objective(n, p, 0.0007)  # noqa: E731
    best, _ = _brute(lambda n: -obj(n), B, total, n_min, n_max)
    assert got.sum() == total and obj(got) == pytest.approx(-best, rel=1e-12)


def test_vip_sends_spare_samples_to_prompts_predicted_hard():
    """With the γ term a prompt predicted unsolved gets the spare samples and one predicted
    solved the floor 4 (without it the near-0 and near-1 prompts are alike)."""
    p = np.array([1e-3, 0.5, 0.999, 0.999])
    n = A.vip_allocation(p * (1 - p), 32, 4, 32, linear=A.vip_gamma_term(p, 0.0007))
    assert n[2] == n[3] == 4 and n[0] > n[1] > 4


def test_gp_pools_information_across_prompts():
    """The Gaussian process in logit space: the posterior mean equals the closed form, an
    observed prompt is predicted near its observation, and an unseen prompt takes its
    near neighbours' value, a far one the prior."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 2))
    d = np.linalg.norm(X[:, None] - X[None], axis=-1)
    K = np.exp(-0.5 * (d / 0.4) ** 2)
    p_obs = np.array([0.1, 0.9, 0.5, 0.3, 0.7])
    f = A.gp_logit_mean(K, K, p_obs, -1.0)
    g = np.log(p_obs / (1 - p_obs))
    np.testing.assert_allclose(f, -1 + K @ np.linalg.inv(K + 1e-4 * np.eye(5)) @ (g + 1),
                               rtol=1e-10)
    np.testing.assert_allclose(f, g, atol=1e-2)
    near, far = np.exp(-0.5 * (0.1 / 0.4) ** 2), np.exp(-0.5 * (3.0 / 0.4) ** 2)
    f2 = A.gp_logit_mean(np.ones((1, 1)), np.array([[near], [far]]), np.array([0.02]), -1.0)
    assert f2[0] < -3 and abs(f2[1] + 1) < 1e-6
    assert A.gp_logit_mean(np.zeros((0, 0)), np.zeros((3, 0)), np.zeros(0), -1.0).tolist() \
        == [-1.0] * 3


def test_vip_predicts_unseen_prompts_from_their_family():
    """On the family task an unseen prompt of a family whose other prompt was all wrong is
    predicted hard and gets more samples than one of a family seen all right."""
    from ada_jax.policies import vip
    from ada_jax.tasks.problem import Problem
    c = base.get_config("algo=vip")
    c.adaptive.vip.features = "labels"
    visits = {"1": [8, 0, 3], "2": [8, 8, 70]}  # family 3 (very hard) 0/8, family 70 8/8
    probs = [Problem(10, "q", "a", level=3), Problem(11, "q", "a", level=70),
             Problem(12, "q", "a", level=50), Problem(13, "q", "a", level=51)]
    p = vip.predict(c, probs, visits)
    assert p[0] < 0.1 and p[1] > 0.9  # 0/8 and 8/8, observed with add-half smoothing
    n = vip.budgets_for(c, probs, visits)
    assert n.sum() == 32 and n[0] > n[1] == n.min()


def test_vip_text_features_read_the_question_not_the_labels():
    """The default distance is between embeddings of the question text: the same text is at
    0, texts sharing no word part at sqrt(2); a prompt seen before is predicted from its own
    visit, an unseen one with a new text stays near the prior whatever its label says."""
    from ada_jax.policies import vip
    from ada_jax.tasks.problem import Problem
    c = base.get_config("algo=vip")
    assert c.adaptive.vip.features == "text"
    d = vip.distance(c, ([1, 2, 3], [0, 0, 0], ["A 4+4-3", "A 4+4-3", "xyz"]),
                     ([1], [0], ["A 4+4-3"]))
    np.testing.assert_allclose(d[:, 0], [0.0, 0.0, np.sqrt(2)], atol=1e-6)
    visits = {"1": [8, 0, 3], "2": [8, 8, 3]}  # same label, different questions
    texts = {"1": "E 4+3-2", "2": "QO 5-1+1"}
    probs = [Problem(1, "E 4+3-2", "a", level=3), Problem(2, "QO 5-1+1", "a", level=3),
             Problem(3, "ZZ 7-7+7", "a", level=3)]
    p = vip.predict(c, probs, visits, texts)
    assert p[0] < 0.1 and p[1] > 0.9
    assert abs(p[2] - 1 / (1 + np.exp(1.0))) < 0.02  # the prior, logit -1
    c.adaptive.vip.features = "labels"  # the labels tie the three prompts together
    assert vip.predict(c, probs, visits, texts)[2] != pytest.approx(p[2], abs=0.02)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("field,value,match", [
    ("knapsack.n_min", 9, "need n_min <= budget_per_prompt <= n_max"),
    ("knapsack.n_max", 4, "need n_min <= budget_per_prompt <= n_max"),
    ("vip.budget_per_prompt", 40, "need n_min <= budget_per_prompt <= n_max"),
    ("vip.n_min", 1, "must be >= 2 for vip.estimator='rloo'"),
    ("vip.n_min", 0, "must be a positive integer"),
    ("vip.estimator", "grpo", "choose from"),
])
def test_bad_allocation_fields_are_refused(field, value, match):
    c = base.get_config("algo=vip")
    group, name = field.split(".")
    c.adaptive[group][name] = value
    with pytest.raises(ValueError, match=f"{field}.*{match}"):
        config_check.validate(c)


def test_drgrpo_needs_three_samples_per_prompt():
    c = base.get_config("algo=vip")
    c.adaptive.vip.n_min = 2
    c.adaptive.vip.estimator = "drgrpo"
    with pytest.raises(ValueError, match="vip.n_min=2: must be >= 3"):
        config_check.validate(c)
    c.adaptive.vip.n_min = 3
    config_check.validate(c)


# --------------------------------------------------------------------------- end to end


def _alloc_config(algo, **kw):
    # 4 prompts that recur every step, so the second step's budgets come from the history
    return _config(algo, **{"task.train_size": 4, "checkpoint.every": 1, **kw})


@pytest.mark.parametrize("algo", ["knapsack", "vip"])
def test_one_training_step(algo, tmp_path):
    c = _alloc_config(algo, **{"rl.steps": 1})
    m = train.train_and_evaluate(c, str(tmp_path))
    B = c.rl.prompts_per_step
    assert m["samples_total"] == 8 * B  # the budgets sum to budget_per_prompt x B
    assert np.isfinite(m["loss"]) and m["grad_norm"] > 0
    assert m["alloc_budget_min"] == m["alloc_budget_max"] == 8  # nothing seen yet: uniform
    hist = _restore(str(tmp_path))[2]["last_visit"]
    assert len(hist) == B and sum(v[0] for v in hist.values()) == 8 * B


@pytest.mark.parametrize("algo", ["knapsack", pytest.param("vip", marks=pytest.mark.slow)])
def test_resume_is_exact(algo, tmp_path):
    """Two steps in one go equal one step, a stop, and a resumed second step: the history that
    sets step 2's budgets comes back from the checkpoint."""
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    train.train_and_evaluate(_alloc_config(algo, **{"rl.steps": 2}), ref)
    train.train_and_evaluate(_alloc_config(algo, **{"rl.steps": 1}), run)
    train.train_and_evaluate(_alloc_config(algo, **{"rl.steps": 2}), run)
    (sa, arr_a, meta_a), (sb, arr_b, meta_b) = _restore(ref), _restore(run)
    assert sa == sb == 2
    for x, y in zip(jax.tree.leaves(arr_a), jax.tree.leaves(arr_b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert meta_a["last_visit"] == meta_b["last_visit"]
    assert meta_a["vip_questions"] == meta_b["vip_questions"]
    with open(os.path.join(run, "metrics.jsonl")) as f, open(os.path.join(ref, "metrics.jsonl")) \
            as g:
        got, want = [json.loads(line) for line in f], [json.loads(line) for line in g]
    assert got[-1]["alloc_budget_max"] == want[-1]["alloc_budget_max"]


def test_bench_allocation_rows_meet_their_oracles():
    """scripts/bench/bench_adaptive.py's allocation rows: budgets sum to the matched total, no row
    expects more mixed groups than oracle_mixed or less variance than oracle_var."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "bench_adaptive", os.path.join(root, "scripts", "bench", "bench_adaptive.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = {r["method"]: r for r in bench.allocation_bench(16, 1)}
    assert {"uniform", "est", "knapsack_beta", "vip_beta", "oracle_mixed",
            "oracle_var"} <= set(rows)
    for r in rows.values():
        assert r["samples"] == 8 * 16
        assert r["samples_per_mixed_vs_oracle"] >= 1 - 1e-12
        if r["n_min"] >= 2:  # (N = 1 is counted as 2 samples' variance: not comparable)
            assert r["var_vs_oracle"] >= 1 - 1e-12
    assert rows["oracle_mixed"]["samples_per_mixed_vs_oracle"] == pytest.approx(1.0)
    assert rows["oracle_var"]["var_vs_oracle"] == pytest.approx(1.0)
