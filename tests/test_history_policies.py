"""The history / pilot / grid collection policies: GRESO (skip law, history, exploration
probabilities), Pilot-Commit (the commit ranking over the 3·B pilot), conformal stopping
(the authors' quantile, δ and stopping rule; coverage on the Bernoulli generator), each one
training step end to end, and exact resume of the stateful ones."""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ada_jax import collect, generators, selection, train
from ada_jax.policies import conformal, greso, pilot_commit, pools
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
def test_pilot_commit_ranks_the_band_first_then_nearest_half():
    pos, n = np.array([0, 1, 2, 3, 4, 1, 0]), np.array([4, 4, 4, 4, 4, 8, 0])
    # p̂ = 0, .25, .5, .75, 1, .125, unseen; band [.25, .75]: 2 (|.5-.5|=0), 1, 3 (.25, batch
    # order), then outside: 5 (.375 from 1/2), 0 and 4 (.5, batch order), 6 (no pilot: p̂ 0)
    np.testing.assert_array_equal(pilot_commit.rank(pos, n, 0.25, 0.75), [2, 1, 3, 5, 0, 4, 6])


def test_pilot_commit_always_commits_a_full_batch():
    rng = np.random.default_rng(0)
    for _ in range(100):
        B = 4 * int(rng.integers(1, 5))
        n = np.full(3 * B, 4)
        pos = rng.integers(0, 5, 3 * B)
        got = pilot_commit.commit(pos, n, B, 0.25, 0.75)
        assert len(got) == B == len(set(got.tolist())) and (np.diff(got) > 0).all()
        p = pos / 4
        inside = (p >= 0.25) & (p <= 0.75)  # every band prompt before any outside one
        assert inside[got].sum() == min(B, inside.sum())


def _fake_batch(reward_BG, mask_BG):
    B, G = reward_BG.shape
    return selection.Batch(
        tokens_BGN=jnp.zeros((B, G, 2), jnp.int32), logp_BGN=jnp.zeros((B, G, 2)),
        len_BG=jnp.ones((B, G), jnp.int32), reward_BG=jnp.asarray(reward_BG, jnp.float32),
        mask_BG=jnp.asarray(mask_BG), pool_n_B=jnp.asarray(mask_BG.sum(1)),
        pool_pos_B=jnp.asarray((reward_BG * mask_BG).sum(1).astype(np.int32)),
        version_BG=jnp.zeros((B, G), jnp.int32))


def test_pilot_commit_trains_each_committed_prompts_own_pilot_samples():
    """The committed prompts' pilot rows (in commit order) join their commit samples: group
    of pilot + commit, pool counters of both calls."""
    G, pilot, commit = 6, 2, 4
    pilot_R = np.zeros((5, G))
    pilot_R[:, :pilot] = np.arange(5)[:, None] + 10  # piloted prompt i's rewards: 10 + i
    pilot_M = np.zeros((5, G), bool)
    pilot_M[:, :pilot] = True
    commit_M = np.zeros((2, G), bool)
    commit_M[:, :commit] = True
    chosen = np.array([1, 3])
    got = pools.merge([pools.take_rows(_fake_batch(pilot_R, pilot_M), chosen),
                       _fake_batch(np.zeros((2, G)), commit_M)])
    np.testing.assert_array_equal(np.asarray(got.mask_BG).sum(1), [pilot + commit] * 2)
    np.testing.assert_array_equal(np.asarray(got.reward_BG)[:, :pilot], [[11, 11], [13, 13]])
    np.testing.assert_array_equal(np.asarray(got.pool_n_B), [pilot + commit] * 2)


def test_pilot_commit_group_counts_the_pilot_unless_told_not_to():
    c = _config("grpo", **{"adaptive.policy": "pilot_commit"})
    a = c.adaptive.pilot_commit
    assert pilot_commit.group_size(c) == (a.pilot + a.commit,) * 2
    c.adaptive.pilot_commit.train_pilot = False
    assert pilot_commit.group_size(c) == (a.commit,) * 2


# ----------------------------------------------------------------------------- conformal
def test_conformal_quantile_delta_and_stopping_rule():
    assert conformal.quantile([], 0.1) == 1.0
    sc = np.arange(1, 20) / 20.0  # m = 19, δ 0.1 -> rank ceil(20 * 0.9) = 18
    assert conformal.quantile(sc, 0.1) == pytest.approx(18 / 20)
    assert conformal.quantile([0.1, 0.2, 0.3], 0.1) == pytest.approx(0.3)  # rank clamped to m
    # δ from the solve rate at the top level: 3 of 4 solved -> 0.25 + 0.05
    assert conformal.auto_delta(np.array([0.0, 0.5, 0.9, 1.0])) == pytest.approx(0.30)
    assert conformal.auto_delta(np.zeros(8)) == pytest.approx(0.05)  # floor
    assert conformal.auto_delta(np.ones(8)) == pytest.approx(0.95)  # cap
    # stops at k when q̂ < 1 and 1 - s/k <= q̂; a level with q̂ = 1 never stops
    s, k = np.array([0, 1, 2]), np.array([2, 2, 2])
    np.testing.assert_array_equal(conformal.stops(s, k, 0.5), [False, True, True])
    np.testing.assert_array_equal(conformal.stops(s, k, 1.0), [False, False, False])
    n_LB = np.array([[2, 2, 2, 2], [4, 4, 4, 4]])
    s_LB = np.array([[0, 1, 2, 2], [0, 2, 4, 3]])
    q, d = conformal.calibrate(n_LB, s_LB, 0.1, auto=True)
    assert d == pytest.approx(0.30) and len(q) == 2


def _bernoulli(key, p, n):
    """[B, n] outcomes of the Bernoulli generator's reward (sample j of prompt i)."""
    B = len(p)
    prompt = jnp.repeat(jnp.arange(B), n)
    seq = jnp.tile(jnp.arange(n), B)
    r = generators.bernoulli_reward(dict(key=key, p=jnp.asarray(p, jnp.float32)), prompt, seq,
                                    None, None)
    return np.asarray(r).reshape(B, n)


@pytest.mark.parametrize("delta", [0.3, 0.5])
def test_conformal_coverage_on_the_bernoulli_generator(delta):
    """Calibrate the k = 4 score on one set of prompts (pass rates Beta(0.5, 0.5)); on fresh
    prompts the score is within q̂ with frequency >= 1 - δ (split conformal, within a
    binomial tolerance), and not trivially (some prompts stop)."""
    rng = np.random.default_rng(1)
    k, m, T = 4, 2000, 20000
    cal = _bernoulli(jax.random.key(0), rng.beta(0.5, 0.5, m), k)
    q = conformal.quantile(conformal.score(cal.sum(1), k), delta)
    test = _bernoulli(jax.random.key(1), rng.beta(0.5, 0.5, T), k)
    covered = conformal.score(test.sum(1), k) <= q + conformal.TIE
    tol = 3 * math.sqrt(delta * (1 - delta) / T) + 1 / (m + 1)
    assert covered.mean() >= 1 - delta - tol, (covered.mean(), q)
    assert conformal.stops(test.sum(1), np.full(T, k), q).mean() > 0.2


def test_conformal_coverage_fails_with_a_wrong_rank():
    """The test above can fail: the (1 - 2δ) quantile at δ = 0.2 under-covers."""
    rng = np.random.default_rng(1)
    k, m, T, delta = 4, 2000, 20000, 0.2
    cal = _bernoulli(jax.random.key(0), rng.beta(0.5, 0.5, m), k)
    q = conformal.quantile(conformal.score(cal.sum(1), k), 2 * delta)
    test = _bernoulli(jax.random.key(1), rng.beta(0.5, 0.5, T), k)
    covered = conformal.score(test.sum(1), k) <= q + conformal.TIE
    assert covered.mean() < 1 - delta - 3 * math.sqrt(delta * (1 - delta) / T)


# ----------------------------------------------------------------------------- end to end
# The tiny test config of tests/test_train.py (random init, synthetic reward, smoke sizes).
E2E = {
    "greso": {"adaptive.policy": "greso", "task.train_size": 8, "rl.prompts_per_step": 4,
              "adaptive.dapo.max_gen_batches": 2},
    "pilot_commit": {"adaptive.policy": "pilot_commit", "adaptive.pilot_commit.pilot": 2,
                     "adaptive.pilot_commit.commit": 4, "adaptive.pilot_commit.pilot_batches": 3},
    "conformal": {"adaptive.policy": "conformal", "adaptive.conformal.grid": (2, 4),
                  "adaptive.conformal.calib_prompts": 4, "adaptive.conformal.refit_every": 1},
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
    if policy == "pilot_commit":  # pilot 2 on 3·B prompts, commit 4 on B; B groups of 2 + 4
        B = c.rl.prompts_per_step
        assert m["samples_total"] == 2 * 3 * B + 4 * B and m["pc_piloted"] == 3 * B
        assert m["samples_trained"] == (2 + 4) * B
    if policy == "conformal":  # calibrated before the step: 4 held-out prompts x 4 samples
        assert m["conformal_calib_samples"] == 4 * 4
        assert m["samples_trained"] == m["samples_total"] - 16
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
             "conformal": {"q": [0.8, 1.0], "delta": 0.3, "since": 2,
                           "calib": [{"id": 1, "question": "q", "answer": "a", "solution": "",
                                      "level": 0}]}}
    meta = json.loads(json.dumps({**greso.checkpoint(state), **conformal.checkpoint(state)}))
    back = {**greso.restore(meta), **conformal.restore(meta)}
    assert back == state
    assert greso.restore({}) == {} and conformal.restore({}) == {}
    assert set(collect.POLICIES) >= {"greso", "pilot_commit", "conformal"}
