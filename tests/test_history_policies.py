"""The history / pilot / grid collection policies: GRESO (skip law, history, exploration
probabilities), Pilot-Commit (budget split), conformal stopping (coverage on the Bernoulli
generator), each one training step end to end, and exact resume of the stateful ones."""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ada_jax import collect, generators, train
from ada_jax.policies import conformal, greso, pilot_commit
from tests.test_train import _config, _restore


# ----------------------------------------------------------------------------- GRESO
def test_greso_skip_probability_is_one_minus_p_to_the_streak():
    z = np.array([0, 1, 2, 3, 5])
    np.testing.assert_allclose(greso.skip_probability(z, 0.5),
                               [0.0, 0.5, 0.75, 0.875, 1 - 0.5 ** 5])
    np.testing.assert_allclose(greso.skip_probability([2, 2], [0.9, 0.2]), [0.19, 0.96])


def test_greso_skips_at_the_law_rate_in_the_policy_draw():
    """The policy's own draw (skip_draw): prompts with streak z of kind easy / hard are
    skipped at 1 - p_easy^z / 1 - p_hard^z (binomial test over many draws, a fixed seed)."""
    ids = list(range(400))
    z_of = {i: i % 4 for i in ids}  # streaks 0..3; kinds alternate in blocks of 4
    g = {"hist": {str(i): [z_of[i], int(i % 8 < 4)] for i in ids}, "p": [0.7, 0.4],
         "queue": []}
    rng = np.random.default_rng(0)
    count = np.zeros((2, 4, 2), int)  # [easy, z, (skipped, drawn)]
    for _ in range(50):
        skip = greso.skip_draw(g, ids, rng)
        for i in ids:
            count[int(i % 8 < 4), z_of[i]] += [skip[i], 1]
    for easy, p_e in ((1, 0.7), (0, 0.4)):
        assert count[easy, 0, 0] == 0  # no streak: never skipped
        for z in (1, 2, 3):
            k, n = count[easy, z]
            assert stats.binomtest(k, n, 1 - p_e ** z).pvalue > 1e-3, (easy, z, k / n)
            # a wrong law (p^z skipped instead of 1 - p^z) is rejected
            assert stats.binomtest(k, n, p_e ** z).pvalue < 1e-3 or abs(p_e ** z - 0.5) < 0.1


def test_greso_history_and_exploration_updates():
    h = {}
    greso.visit(h, 7, 0, 4)
    greso.visit(h, 7, 0, 4)
    assert h["7"] == [2, 0]
    greso.visit(h, 7, 4, 4)
    assert h["7"] == [3, 1]  # still zero-variance: the streak grows, the kind is now easy
    greso.visit(h, 7, 2, 4)
    assert h["7"] == [0, 0]
    assert greso.adapt(0.5, 0.2, 0.1, 0.01, 0.05) == pytest.approx(0.49)  # too many: skip more
    assert greso.adapt(0.5, 0.05, 0.1, 0.01, 0.05) == pytest.approx(0.51)
    assert greso.adapt(0.05, 0.9, 0.1, 0.01, 0.05) == 0.05
    assert greso.adapt(1.0, 0.0, 0.1, 0.01, 0.05) == 1.0


# ----------------------------------------------------------------------------- Pilot-Commit
def test_pilot_commit_commits_the_informative_band():
    pos, n = np.array([0, 1, 2, 3, 4, 1]), np.array([4, 4, 4, 4, 4, 8])
    np.testing.assert_array_equal(pilot_commit.committed(pos, n, 0.125, 0.75),
                                  [False, True, True, True, False, True])


def test_pilot_commit_budget_split_is_exact():
    # B = 6, 8 per prompt, pilot 4: R = 24 over K = 5 committed -> 5,5,5,5,4
    c = np.array([True, False, True, True, True, True])
    np.testing.assert_array_equal(pilot_commit.split(c, 8, 4, 32), [5, 0, 5, 5, 5, 4])
    assert pilot_commit.split(c, 8, 4, 32).sum() == (8 - 4) * 6
    # one committed prompt: R = 24 capped at G - pilot = 28 -> 24; cap 12 -> 8
    one = np.eye(6, dtype=bool)[2]
    np.testing.assert_array_equal(pilot_commit.split(one, 8, 4, 32), [0, 0, 24, 0, 0, 0])
    np.testing.assert_array_equal(pilot_commit.split(one, 8, 4, 12), [0, 0, 8, 0, 0, 0])
    assert pilot_commit.split(np.zeros(6, bool), 8, 4, 32).sum() == 0
    rng = np.random.default_rng(0)
    for _ in range(200):  # every split: totals exact, shares differ by at most one
        B = int(rng.integers(1, 40))
        c = rng.random(B) < rng.random()
        per, pilot = int(rng.integers(2, 16)), int(rng.integers(1, 8))
        pilot = min(pilot, per)
        s = pilot_commit.split(c, per, pilot, 10 ** 6)
        assert (s[~c] == 0).all()
        if c.any():
            assert s.sum() == (per - pilot) * B and np.ptp(s[c]) <= 1


# ----------------------------------------------------------------------------- conformal
def test_conformal_threshold_and_sets():
    assert conformal.threshold([0.1, 0.2, 0.3], 0.1) == 1.0  # rank 4 > 3: nothing stops
    sc = np.arange(1, 20) / 20.0  # m = 19, alpha 0.1 -> rank ceil(20 * 0.9) = 18
    assert conformal.threshold(sc, 0.1) == pytest.approx(18 / 20)
    # k = 4, s = 0: p~ = 1/6; score(1) = 5/6, score(0) = 1/6
    assert conformal.set_size(np.array([0]), np.array([4]), 0.5)[0] == 1
    assert conformal.set_size(np.array([0]), np.array([4]), 0.9)[0] == 2
    assert conformal.set_size(np.array([2]), np.array([4]), 0.4)[0] == 0
    # a tie in exact arithmetic is in the set whichever way the floats round
    assert conformal.set_size(np.array([1]), np.array([4]), 4 / 6)[0] == 2
    assert conformal.set_size(np.array([1]), np.array([4]), 1 - 2 / 6)[0] == 2


def _bernoulli(key, p, n):
    """[B, n] outcomes of the Bernoulli generator's reward (sample j of prompt i)."""
    B = len(p)
    prompt = jnp.repeat(jnp.arange(B), n)
    seq = jnp.tile(jnp.arange(n), B)
    r = generators.bernoulli_reward(dict(key=key, p=jnp.asarray(p, jnp.float32)), prompt, seq,
                                    None, None)
    return np.asarray(r).reshape(B, n)


@pytest.mark.parametrize("alpha", [0.1, 0.2])
def test_conformal_coverage_on_the_bernoulli_generator(alpha):
    """Calibrate at k = 4 on one set of prompts (pass rates Beta(0.5, 0.5)), then on fresh
    prompts the next sample's outcome lies in the set with frequency >= 1 - alpha (within a
    binomial tolerance)."""
    rng = np.random.default_rng(1)
    k, m, T = 4, 2000, 20000
    p_cal, p_test = rng.beta(0.5, 0.5, m), rng.beta(0.5, 0.5, T)
    cal = _bernoulli(jax.random.key(0), p_cal, k + 1)
    q = conformal.threshold(conformal.score(cal[:, :k].sum(1), k, cal[:, k]), alpha)
    test = _bernoulli(jax.random.key(1), p_test, k + 1)
    s, y = test[:, :k].sum(1), test[:, k]
    covered = conformal.in_set(s, k, y, q)
    tol = 3 * math.sqrt(alpha * (1 - alpha) / T) + 1 / (m + 1)
    assert covered.mean() >= 1 - alpha - tol, (covered.mean(), q)
    # and not trivially: some prompts stop (singleton sets)
    assert (conformal.set_size(s, np.full(T, k), q) == 1).mean() > 0.2


def test_conformal_coverage_fails_with_a_wrong_rank():
    """The test above can fail: a quantile one notch too low at alpha = 0.2 (the (1 - 2α)
    quantile) under-covers."""
    rng = np.random.default_rng(1)
    k, m, T, alpha = 4, 2000, 20000, 0.2
    cal = _bernoulli(jax.random.key(0), rng.beta(0.5, 0.5, m), k + 1)
    q = conformal.threshold(conformal.score(cal[:, :k].sum(1), k, cal[:, k]), 2 * alpha)
    test = _bernoulli(jax.random.key(1), rng.beta(0.5, 0.5, T), k + 1)
    s, y = test[:, :k].sum(1), test[:, k]
    covered = conformal.in_set(s, k, y, q)
    assert covered.mean() < 1 - alpha - 3 * math.sqrt(alpha * (1 - alpha) / T)


# ----------------------------------------------------------------------------- end to end
# The tiny test config of tests/test_train.py (random init, synthetic reward, smoke sizes).
E2E = {
    "greso": {"adaptive.policy": "greso", "task.train_size": 8, "rl.prompts_per_step": 4,
              "adaptive.dapo_max_gen_batches": 2},
    "pilot_commit": {"adaptive.policy": "pilot_commit", "adaptive.pc_pilot": 2,
                     "adaptive.pc_budget_per_prompt": 4, "adaptive.pc_p_low": 0.0,
                     "adaptive.pc_p_high": 1.0},
    "conformal": {"adaptive.policy": "conformal", "adaptive.conformal_grid": (2, 4),
                  "adaptive.conformal_calib_share": 0.5, "adaptive.conformal_refit_every": 1},
}


def _metrics(workdir):
    with open(workdir / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("policy", sorted(E2E))
def test_one_training_step_end_to_end(policy, tmp_path):
    c = _config("grpo", **{"rl.steps": 1, **E2E[policy]})
    m = train.train_and_evaluate(c, str(tmp_path))
    assert np.isfinite(m["loss"]) and m["samples_total"] > 0
    _, _, meta = _restore(str(tmp_path))
    assert {"greso_history", "conformal_calibration"} <= set(meta)
    if policy == "pilot_commit":  # every prompt committed: pilot 2 + commit 2 each
        assert m["samples_total"] == 4 * c.rl.prompts_per_step and m["pc_committed"] == 4
        assert m["samples_trained"] == 4 * c.rl.prompts_per_step
    if policy == "conformal":
        assert m["engine_calls"] in (1, 2) and m["samples_trained"] == m["samples_total"]
    if policy == "greso":
        assert len(meta["greso_history"]["hist"]) >= c.rl.prompts_per_step


@pytest.mark.parametrize("policy", ["greso", "conformal"])
def test_stateful_policies_resume_exactly(policy, tmp_path):
    """Two steps straight equal one step, a resume, and a second step (params, history,
    calibration, metrics): the state goes through the checkpoint."""
    over = {**E2E[policy], "checkpoint.every": 1}
    ref, run = tmp_path / "ref", tmp_path / "run"
    train.train_and_evaluate(_config("grpo", **{"rl.steps": 2, **over}), str(ref))
    train.train_and_evaluate(_config("grpo", **{"rl.steps": 1, **over}), str(run))
    train.train_and_evaluate(_config("grpo", **{"rl.steps": 2, **over}), str(run))
    (sa, aa, ma), (sb, ab, mb) = _restore(str(ref)), _restore(str(run))
    assert sa == sb == 2
    for x, y in zip(jax.tree.leaves(aa), jax.tree.leaves(ab)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    key = {"greso": "greso_history", "conformal": "conformal_calibration"}[policy]
    assert ma[key] == mb[key]
    drop = lambda r: {k: v for k, v in r.items() if not k.startswith(("time_", "cum_wall"))}  # noqa
    assert [drop(r) for r in _metrics(ref)] == [drop(r) for r in _metrics(run)]


def test_state_round_trips_through_checkpoint_metadata():
    state = {"greso": {"hist": {"3": [2, 1]}, "p": [0.49, 0.51],
                       "queue": [{"id": 1, "question": "q", "answer": "a", "solution": "",
                                  "level": 0}]},
             "conformal": {"q": [0.8, 1.0], "scores": [[0.1, 0.3], []], "since": 2}}
    meta = json.loads(json.dumps({**greso.checkpoint(state), **conformal.checkpoint(state)}))
    back = {**greso.restore(meta), **conformal.restore(meta)}
    assert back == state
    assert greso.restore({}) == {} and conformal.restore({}) == {}
    assert set(collect.POLICIES) >= {"greso", "pilot_commit", "conformal"}
