"""Adaptive engine: stopping-time distributions, budgets, rules, rounds == sequential, model runs."""
import dataclasses
import json
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from ada_jax import adaptive as A
from ada_jax import generators
from ada_jax import model as model_lib
from ada_jax import logprobs
from ada_jax import sampling, selection
from ada_jax import collect
from configs import base
from tests import helpers
from tests.helpers import tiny_model

GEN = generators.BernoulliGenerator()


def _run_oracle(p, budget, group=4, key=0, gen=GEN, **kw):
    B = len(p)
    cfg = A.EngineConfig(**{"max_new_tokens": gen.max_len, "slots": 64, "keep": group, **kw})
    data = dict(key=jax.random.key(key), p=jnp.asarray(p, jnp.float32))
    st = A.run(None, jnp.zeros((B, 1), jnp.int32), jnp.ones((B, 1), bool),
               jnp.broadcast_to(jnp.asarray(budget, jnp.int32), (B,)), data,
               jax.random.key(1000 + key), cfg=cfg, gen_fn=gen, reward_fn=generators.bernoulli_reward,
               group=group)
    return cfg, st, data


def _sequential(data, p, budget, rule, k_pos, k_neg, min_pool=1):
    """One-at-a-time stopping with the oracle's own draws (the reference semantics), on pools
    of at least min_pool."""
    out = []
    for i in range(len(p)):
        n = pos = 0
        while n < budget:
            u = jax.random.uniform(jax.random.fold_in(jax.random.fold_in(data["key"], i), n))
            pos += bool(u < p[i])
            n += 1
            if pos >= k_pos and (rule == "pos" or n - pos >= k_neg) and n >= min_pool:
                break
        out.append((n, pos))
    return np.asarray(out)


def _floored(pmf, m):
    """Law of max(m, N) from the law of N (a minimum pool of m): N <= m all lands on m."""
    return lambda k: sum(pmf(j) for j in range(1, m + 1)) if k == m else (pmf(k) if k > m
                                                                          else 0.0)


@pytest.mark.parametrize("min_pool", [1, 9])
@pytest.mark.parametrize("mode", ["rounds", "refill"])
def test_pos_stopping_time_is_negative_binomial(mode, min_pool):
    """min_pool 1: negative binomial; min_pool m: max(m, that)."""
    p, K, B = 0.3, 2, 600
    kw = dict(mode=mode, exit_rule="pos", k_pos=K, k_neg=0, min_pool=min_pool)
    kw.update(dict(samples_per_round=1, max_rounds=400) if mode == "rounds"
              else dict(chunk_len=1, overcommit=0.0))
    _, st, _ = _run_oracle([p] * B, 400, **kw)
    n = np.asarray(st.n_samples)
    def nb(k):
        return math.comb(k - 1, K - 1) * p ** K * (1 - p) ** (k - K) if k >= K else 0.0
    pmf = _floored(nb, min_pool)
    assert helpers.chi2_pvalue(n, pmf, range(max(K, min_pool), 40)) > 1e-3
    mean = sum(k * pmf(k) for k in range(1, 400))
    var = sum(k * k * pmf(k) for k in range(1, 400)) - mean ** 2
    assert abs(n.mean() - mean) < 4 * math.sqrt(var / B)
    if min_pool == 1:
        assert abs(mean - K / p) < 1e-9


@pytest.mark.parametrize("min_pool", [1, 7])
def test_balance_stopping_time_matches_exact_distribution(min_pool):
    p, K, B = 0.25, 2, 600
    _, st, _ = _run_oracle([p] * B, 400, mode="refill", exit_rule="balance", k_pos=K, k_neg=K,
                           chunk_len=1, overcommit=0.0, min_pool=min_pool)

    n = np.asarray(st.n_samples)
    pmf = _floored(lambda k: _balance_pmf(k, p, K), min_pool)
    assert helpers.chi2_pvalue(n, pmf, range(max(2 * K, min_pool), 60)) > 1e-3


def _balance_pmf(k, p, K):
    """P(N = k): the k-th sample is the K-th positive with >= K negatives before, or vice versa."""
    q = 1 - p
    pos_last = math.comb(k - 1, K - 1) * p ** K * q ** (k - K) if k - K >= K else 0.0
    neg_last = math.comb(k - 1, K - 1) * q ** K * p ** (k - K) if k - K >= K else 0.0
    return pos_last + neg_last


@pytest.mark.parametrize("rule,min_pool", [("pos", 1), ("balance", 1), ("pos", 6)])
def test_rounds_with_one_sample_equals_sequential_stopping(rule, min_pool):
    p = np.linspace(0.03, 0.97, 24)
    kw = dict(mode="rounds", exit_rule=rule, k_pos=2, k_neg=2, samples_per_round=1,
              max_rounds=40, min_pool=min_pool)
    _, st, data = _run_oracle(p, 40, **kw)
    ref = _sequential(data, p, 40, rule, 2, 2, min_pool)
    np.testing.assert_array_equal(np.asarray(st.n_samples), ref[:, 0])
    np.testing.assert_array_equal(np.asarray(st.n_pos), ref[:, 1])


@pytest.mark.parametrize("order,min_pool", [("launch", 1), ("completion", 1), ("launch", 6)])
def test_refill_without_overcommit_equals_sequential_stopping(order, min_pool):
    p = np.linspace(0.03, 0.97, 24)
    _, st, data = _run_oracle(p, 40, mode="refill", exit_rule="balance", k_pos=2, k_neg=2,
                              chunk_len=1, overcommit=0.0, pool_order=order, min_pool=min_pool)
    ref = _sequential(data, p, 40, "balance", 2, 2, min_pool)
    np.testing.assert_array_equal(np.asarray(st.n_samples), ref[:, 0])


@pytest.mark.parametrize("mode", ["rounds", "refill"])
@pytest.mark.parametrize("rule", ["none", "pos", "balance"])
def test_budgets_respected_and_groups_satisfy_rule(mode, rule):
    rng = np.random.default_rng(0)
    B, group = 40, 4
    p = rng.uniform(0, 1, B)
    p[:5] = 0.0
    p[5:10] = 1.0
    budget = rng.integers(1, 33, B)
    kw = dict(mode=mode, exit_rule=rule, k_pos=2, k_neg=2, samples_per_round=8, max_rounds=4,
              chunk_len=1)
    cfg, st, _ = _run_oracle(p, budget, group=group, **kw)
    n = np.asarray(st.n_samples)
    assert np.all(n <= budget) and np.all(n >= 1)
    assert np.all(np.asarray(st.in_flight) >= 0)
    if mode == "rounds":
        assert np.all(n <= 8 * 4)
    batch = selection.select(st, group)
    r, m = np.asarray(batch.reward_BG), np.asarray(batch.mask_BG)
    pos = np.asarray(st.n_pos)
    assert np.all(pos[:5] == 0) and np.all(pos[5:10] == n[5:10])
    resolved = np.asarray(A._rule_met(cfg, st.n_samples, st.n_pos))
    for i in range(B):
        kept_pos, kept = int((r[i] * m[i]).sum()), int(m[i].sum())
        assert kept == min(group, n[i])
        assert kept_pos <= pos[i] and kept - kept_pos <= n[i] - pos[i]
        # balanced: ⌈G/2⌉ positives when available, shortfall from the other class
        assert kept_pos == min(pos[i], max((group + 1) // 2, group - (n[i] - pos[i])))
        if resolved[i] and rule == "balance":
            assert kept_pos >= 2 and kept - kept_pos >= 2
        if resolved[i] and rule == "pos":
            assert kept_pos >= 2
    if rule == "none":
        np.testing.assert_array_equal(n, budget)


def test_random_selection_keeps_a_uniform_subset():
    # One prompt, p = 1, budget 12, one slot: 4 of the 12 positives are kept. The oracle's
    # token is the sample's index, so we can see which; each should be kept 1/3 of the time.
    hits = np.zeros(12)
    for seed in range(150):
        _, st, _ = _run_oracle([1.0], 12, group=4, key=seed, slots=1, mode="refill",
                               exit_rule="none", chunk_len=1, select_order="random")
        hits[np.asarray(st.kept_tokens[0, A.POS, :, 0])] += 1
    assert hits.sum() == 600
    assert stats.chisquare(hits).pvalue > 1e-3
    # Generation order keeps the first four.
    _, st, _ = _run_oracle([1.0], 12, group=4, slots=1, mode="refill", exit_rule="none",
                           chunk_len=1)
    np.testing.assert_array_equal(st.kept_tokens[0, A.POS, :, 0], [0, 1, 2, 3])


# ----------------------------------------------------------------------------- with the model
def _parity_reward(reward_data, prompt_S, seq_S, tokens_SN, lengths_S):
    """Synthetic jittable reward: first generated token is even."""
    return (tokens_SN[:, 0] % 2 == 0).astype(jnp.float32)


@pytest.mark.parametrize("mode,order", [("rounds", "launch"), ("refill", "launch"),
                                        ("refill", "completion")])
def test_model_engine_produces_valid_batches(mode, order):
    model = tiny_model(3)
    graphdef, params = nnx.split(model)
    scfg = sampling.SamplingConfig(max_new_tokens=6, eos_id=5, pad_id=0)
    gen = generators.ModelGenerator(graphdef, model.cfg, scfg)
    prompts, pmask = sampling.left_pad([[7, 8, 9], [10, 11], [12, 13, 14, 15], [9]], 4)
    cfg = A.EngineConfig(slots=8, max_new_tokens=6, keep=4, exit_rule="balance", k_pos=2,
                         k_neg=2, mode=mode, samples_per_round=4, max_rounds=3, chunk_len=2,
                         pool_order=order)
    budget = jnp.full((4,), 12, jnp.int32)
    st = A.run(params, jnp.asarray(prompts), jnp.asarray(pmask), budget, {},
               jax.random.key(0), cfg=cfg, gen_fn=gen, reward_fn=_parity_reward, group=4)
    batch = selection.select(st, 4)
    toks, lens, m = np.asarray(batch.tokens_BGN), np.asarray(batch.len_BG), np.asarray(batch.mask_BG)
    assert np.all(m.sum(1) == 4)
    for b in range(4):
        for g in range(4):
            L = lens[b, g]
            assert 1 <= L <= 6
            assert toks[b, g, L - 1] == 5 or L == 6  # ends at EOS or the length limit
            assert np.all(toks[b, g, L:] == 0)
            assert batch.reward_BG[b, g] == float(toks[b, g, 0] % 2 == 0)
    # Kept log-probs are the model's log-probs of the kept tokens given the prompt.
    full = jnp.concatenate([jnp.repeat(jnp.asarray(prompts), 4, 0),
                            jnp.asarray(toks.reshape(16, 6))], axis=1)
    fmask = jnp.concatenate([jnp.repeat(jnp.asarray(pmask), 4, 0),
                             jnp.ones((16, 6), bool)], axis=1)
    logits, _ = model(full, model_lib.positions_from_mask(fmask), fmask)
    logp, _ = logprobs.token_logprobs(logits[:, 3:-1], full[:, 4:])
    valid = np.arange(6)[None] < lens.reshape(16, 1)
    np.testing.assert_allclose(np.asarray(logp)[valid],
                               np.asarray(batch.logp_BGN).reshape(16, 6)[valid], atol=3e-5)
    met = selection.metrics(cfg, st, batch, 4)
    assert 0 < met["slot_utilisation"] <= 1.0
    assert met["samples_total"] == int(np.asarray(st.n_samples).sum())


def test_model_engine_stops_at_stop_sequences_as_the_sampler_does():
    """Greedy decoding in the engine (every sample of a prompt the same) ends each response
    where sampling.sample with the same stop sequences ends it, stop tokens kept."""
    model = tiny_model(3)
    graphdef, params = nnx.split(model)
    N = 8
    prompts, pmask = (jnp.asarray(a) for a in sampling.left_pad(
        [[7, 8, 9], [10, 11], [12, 13, 14, 15], [9]], 4))
    free = sampling.SamplingConfig(max_new_tokens=N, eos_id=-1, temperature=0.0)
    ref = np.asarray(sampling.sample(graphdef, params, prompts, pmask, jax.random.key(0),
                                     cfg=free).tokens_BN)
    scfg = sampling.SamplingConfig(max_new_tokens=N, eos_id=-1, temperature=0.0,
                                   stop_seqs=(tuple(int(t) for t in ref[0, 1:3]),
                                              (int(ref[2, 4]),)))
    want = sampling.sample(graphdef, params, prompts, pmask, jax.random.key(0), cfg=scfg)
    assert int(want.lengths_B[0]) <= 3 and int(want.lengths_B[2]) <= 5
    cfg = A.EngineConfig(slots=8, max_new_tokens=N, keep=2, exit_rule="none", mode="refill",
                         chunk_len=2)
    st = A.run(params, prompts, pmask, jnp.full((4,), 2, jnp.int32), {}, jax.random.key(0),
               cfg=cfg, gen_fn=generators.ModelGenerator(graphdef, model.cfg, scfg),
               reward_fn=_parity_reward, group=2)
    batch = selection.select(st, 2)
    for b in range(4):
        L = int(want.lengths_B[b])
        for g in range(2):
            assert int(batch.len_BG[b, g]) == L, (b, g)
            np.testing.assert_array_equal(np.asarray(batch.tokens_BGN)[b, g, :L],
                                          np.asarray(want.tokens_BN)[b, :L])


def test_engine_traces_once_per_shape():
    model = tiny_model(4)
    graphdef, params = nnx.split(model)
    scfg = sampling.SamplingConfig(max_new_tokens=4, eos_id=5)
    gen = generators.ModelGenerator(graphdef, model.cfg, scfg)
    cfg = A.EngineConfig(slots=4, max_new_tokens=4, keep=2, exit_rule="pos", k_pos=1, k_neg=0,
                         mode="refill", chunk_len=2)
    prompts, pmask = sampling.left_pad([[7, 8], [9]], 3)
    before = A.run._cache_size()
    for i in range(3):
        p = jax.tree.map(lambda x: x * (1 + 0.01 * i), params)
        A.run(p, jnp.asarray(prompts), jnp.asarray(pmask), jnp.full((2,), 6, jnp.int32), {},
              jax.random.key(i), cfg=cfg, gen_fn=gen, reward_fn=_parity_reward, group=2)
    assert A.run._cache_size() - before == 1


def test_host_reward_path_matches_jitted_path():
    model = tiny_model(5)
    graphdef, params = nnx.split(model)
    scfg = sampling.SamplingConfig(max_new_tokens=5, eos_id=5)
    gen = generators.ModelGenerator(graphdef, model.cfg, scfg)
    cfg = A.EngineConfig(slots=6, max_new_tokens=5, keep=4, exit_rule="balance", k_pos=1,
                         k_neg=1, mode="refill", chunk_len=2)
    prompts, pmask = sampling.left_pad([[7, 8], [9], [10, 11, 12]], 3)
    args = (params, jnp.asarray(prompts), jnp.asarray(pmask), jnp.full((3,), 10, jnp.int32))
    a = A.run(*args, {}, jax.random.key(1), cfg=cfg, gen_fn=gen, reward_fn=_parity_reward,
              group=4)
    b = A.run_host(*args, jax.random.key(1), cfg=cfg, gen_fn=gen, group=4,
                   score=lambda pr, sq, t, n: (t[:, 0] % 2 == 0).astype(np.float32))
    np.testing.assert_array_equal(a.n_samples, b.n_samples)
    np.testing.assert_array_equal(a.kept_tokens, b.kept_tokens)


# ----------------------------------------------------------------------------- refill scheduling
def test_still_needed_is_the_beta_binomial_survival():
    """P(rule still fails after t more samples) under the Jeffreys posterior predictive."""
    ns, ks = np.array([0, 1, 3, 5, 10, 2, 7]), np.array([0, 1, 1, 0, 3, 2, 6])
    t0 = np.array([0, 0, 2, 5, 1, 0, 3])
    for rule, kp, kn, m in [("balance", 2, 2, 1), ("balance", 3, 1, 1), ("pos", 2, 0, 1),
                            ("pos", 1, 0, 1), ("pos", 1, 0, 9), ("balance", 2, 2, 12)]:
        cfg = A.EngineConfig(slots=1, max_new_tokens=1, keep=1, exit_rule=rule, k_pos=kp,
                             k_neg=kn, min_pool=m)
        q = np.asarray(A._still_needed(cfg, jnp.asarray(ns), jnp.asarray(ks), jnp.asarray(t0),
                                       30))
        for i, (n, k) in enumerate(zip(ns, ks)):
            for j in range(30):
                tt = t0[i] + j
                x = np.arange(tt + 1)
                fail = (k + x < kp) | ((rule == "balance") & (n - k + tt - x < kn))
                fail = fail | (n + tt < m)  # below the minimum pool: not stopped either
                ref = stats.betabinom(tt, k + 0.5, n - k + 0.5).pmf(x)[fail].sum()
                assert abs(q[i, j] - ref) < 2e-5, (rule, n, k, tt)
        assert np.all(np.diff(q, axis=1) <= 1e-6)  # never more likely to be needed later
    cfg = A.EngineConfig(slots=1, max_new_tokens=1, keep=1, exit_rule="none")
    assert np.all(np.asarray(A._still_needed(cfg, jnp.asarray(ns), jnp.asarray(ks),
                                             jnp.asarray(t0), 30)) == 1)


LONG = generators.BernoulliGenerator(max_len=9)  # samples of 2..9 steps: slots finish out of order


@pytest.mark.parametrize("overcommit,slots,min_pool", [(0.0, 8, 1), (0.5, 32, 1), (1.0, 96, 1),
                                                      (0.0, 8, 6), (0.5, 32, 6)])
@pytest.mark.parametrize("select_order", ["generation", "random"])
def test_launch_order_refill_equals_sequential_stopping(overcommit, slots, min_pool,
                                                        select_order):
    """Whatever the slots, overcommit, minimum pool and sample lengths, the pool is the
    one-at-a-time reference process over launch indices, and the kept samples are its first
    per class."""
    p = np.linspace(0.03, 0.97, 24)
    cfg, st, data = _run_oracle(p, 40, gen=LONG, slots=slots, mode="refill",
                                exit_rule="balance", k_pos=2, k_neg=2, chunk_len=4,
                                overcommit=overcommit, select_order=select_order,
                                min_pool=min_pool)
    ref = _sequential(data, p, 40, "balance", 2, 2, min_pool)
    np.testing.assert_array_equal(np.asarray(st.n_samples), ref[:, 0])
    np.testing.assert_array_equal(np.asarray(st.n_pos), ref[:, 1])
    assert np.all(np.asarray(st.in_flight) == 0) and not np.any(np.asarray(st.ring_done))
    launched, n = np.asarray(st.launched), np.asarray(st.n_samples)
    assert np.all(launched >= n)
    if overcommit == 0.0:  # only samples certain to be needed: nothing wasted
        np.testing.assert_array_equal(launched, n)
        assert int(st.cut_tokens) == 0
    # Every generated token is in a pool sample or counted as wasted.
    lengths = lambda i, j: int(generators.oracle_lengths(jnp.int32(i), jnp.int32(j), LONG.max_len))  # noqa
    pool_tokens = sum(lengths(i, j) for i in range(len(p)) for j in range(n[i]))
    assert pool_tokens + int(st.cut_tokens) == int(st.generated_tokens)
    # Kept buffers hold pool samples only (token = launch index), the first C per class.
    for i in range(len(p)):
        u = [float(jax.random.uniform(jax.random.fold_in(jax.random.fold_in(data["key"], i), j)))
             for j in range(n[i])]
        for cls in (A.NEG, A.POS):
            pool = [j for j in range(n[i]) if (u[j] < p[i]) == (cls == A.POS)]
            got = [int(x) for x, pr in zip(np.asarray(st.kept_tokens[i, cls, :, 0]),
                                           np.asarray(st.kept_prio[i, cls])) if np.isfinite(pr)]
            if select_order == "generation":
                assert got == pool[:4]
            else:
                assert len(got) == min(4, len(pool)) and set(got) <= set(pool)


def test_launch_order_random_selection_is_uniform_with_parked_slots():
    # p = 1, budget 12, 4 slots and lengths 2..9: samples finish out of order, and the ones
    # past the pool wait in their slots; each of the 12 should still be kept 1/3 of the time.
    hits = np.zeros(12)
    for seed in range(150):
        _, st, _ = _run_oracle([1.0], 12, group=4, key=seed, gen=LONG, slots=4, mode="refill",
                               exit_rule="none", chunk_len=3, select_order="random")
        hits[np.asarray(st.kept_tokens[0, A.POS, :, 0])] += 1
    assert hits.sum() == 600
    assert stats.chisquare(hits).pvalue > 1e-3


def test_completion_order_pools_favour_short_samples():
    """Why launch order is the default: with parallel samples per prompt, completion-order
    pools are the samples that finished first; launch-order pools do not depend on lengths."""
    p = np.full(64, 0.5)
    out = {}
    for order in ("launch", "completion"):
        _, st, _ = _run_oracle(p, 32, gen=LONG, slots=256, mode="refill", exit_rule="balance",
                               k_pos=2, k_neg=2, chunk_len=1, overcommit=1.0, pool_order=order)
        kept = np.asarray(selection.select(st, 4).len_BG)
        out[order] = kept[kept > 0].mean()
    # Lengths are uniform on 2..9 (mean 5.5) independently of the outcome.
    assert abs(out["launch"] - 5.5) < 0.4
    assert out["completion"] < 4.5


def test_refill_fills_free_slots_by_need():
    """overcommit trades slot use for overshoot: more of it, fewer decode steps."""
    p = np.linspace(0.05, 0.95, 16)
    steps, launched = [], []
    for oc in (0.0, 0.5, 1.0):
        _, st, _ = _run_oracle(p, 32, gen=LONG, slots=64, mode="refill", exit_rule="balance",
                               k_pos=2, k_neg=2, overcommit=oc)
        steps.append(int(st.decode_steps))
        launched.append(int(np.asarray(st.launched).sum()))
    assert steps[0] > steps[1] >= steps[2] and launched[0] < launched[1] <= launched[2]


def test_refill_without_exit_rule_is_continuous_batching():
    """exit_rule none in refill mode: a finished slot takes the next sample at once while any
    is waiting (one decode step per launched-sample length on one slot)."""
    p = np.full(4, 0.5)
    _, st, _ = _run_oracle(p, 6, gen=LONG, slots=4, mode="refill", exit_rule="none",
                           chunk_len=16)
    lengths = np.asarray(generators.oracle_lengths(jnp.repeat(jnp.arange(4), 6),
                                          jnp.tile(jnp.arange(6), 4), LONG.max_len))
    assert int(st.generated_tokens) == lengths.sum()
    # Never more steps than the longest serial chain on a slot could need.
    assert int(st.decode_steps) <= lengths.sum() // 4 + LONG.max_len
    assert float(np.asarray(st.generated_tokens)) / (4 * int(st.decode_steps)) > 0.8


# ----------------------------------------------------------------------------- audit
def _trainer_engine(arg, **overrides):
    """The trainer's EngineConfig for a config variant, on the one-token oracle."""
    c = base.get_config(arg + ",task=embedded")
    for k, v in overrides.items():
        c.adaptive[k] = v
    cfg, group, _ = collect.engine_config(c)
    return dataclasses.replace(cfg, max_new_tokens=1, slots=64), group, c


def test_trainer_pos_rule_keeps_full_groups():
    """pos-1 at p = 0.95 retires most prompts at their first sample; the trainer's minimum
    pool (default rl.n) keeps every group at n samples, as the reference's rounds of 8 do."""
    cfg, group, c = _trainer_engine("algo=ada_pos", mode="refill", k_pos=1)
    assert cfg.min_pool == c.rl.n == group
    budget = c.adaptive.samples_per_round * c.adaptive.max_rounds
    B = 64
    _, st, _ = _run_oracle([0.95] * B, budget, group=group, **{
        f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})
    kept = np.asarray(selection.select(st, group).mask_BG).sum(1)
    np.testing.assert_array_equal(kept, group)
    assert np.all(np.asarray(st.n_samples) >= group)
    # Without the floor (the bug): most kept groups are a single positive.
    _, st, _ = _run_oracle([0.95] * B, budget, group=group, **{
        f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)} | dict(min_pool=1))
    assert np.mean(np.asarray(selection.select(st, group).mask_BG).sum(1) == 1) > 0.8


def test_trainer_refill_defaults_match_the_benchmark():
    """docs/benchmarks.md: refill at <= 2 slots per prompt and overcommit 0.75."""
    c = base.get_config("algo=ada_balance,task=embedded")
    assert c.adaptive.slots / c.rl.prompts_per_step <= 2
    assert c.adaptive.overcommit == 0.75
    cfg, _, _ = collect.engine_config(c)
    assert cfg.overcommit == 0.75 and cfg.min_pool == c.rl.n


@pytest.mark.parametrize("field,value", [("min_pool", -1), ("overcommit", 1.5)])
def test_config_rejects_bad_adaptive_values(field, value):
    c = base.get_config("task=embedded")
    c.unlock()
    c.adaptive[field] = value
    from ada_jax.config_check import validate
    with pytest.raises(ValueError, match=f"config.adaptive.{field}"):
        validate(c)


@pytest.mark.parametrize("field,value", [
    ("exit_rule", "balanced"), ("mode", "round"), ("select_order", "randomly"),
    ("pool_order", "first"), ("slots", 0), ("min_pool", 0), ("keep", 2.0), ("k_pos", -1),
    ("overcommit", 1.5), ("refill_frac", -0.1)])
def test_engine_config_rejects_invalid_values(field, value):
    """A misspelt rule never resolves (spins to the chunk cap); a misspelt mode ran refill."""
    kw = dict(dict(slots=4, max_new_tokens=1, keep=2), **{field: value})
    with pytest.raises(ValueError, match=f"EngineConfig.{field}="):
        A.EngineConfig(**kw)


def test_kept_metrics_shares_sum_to_one_with_dropped_groups():
    """With at_budget="drop", shares are of all prompts, dropped ones named: they sum to 1."""
    p = np.array([0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.3, 0.7])
    cfg, st, _ = _run_oracle(p, 8, exit_rule="balance", k_pos=2, k_neg=2, mode="refill")
    drop = ~A._rule_met(cfg, st.n_samples, st.n_pos)
    met = selection.kept_metrics(selection.select(st, 4, drop_unresolved=drop))
    shares = ("all_correct_after", "all_wrong_after", "effective_prompt_ratio", "dropped_after")
    assert abs(sum(met[k] for k in shares) - 1.0) < 1e-9
    assert met["dropped_after"] == float(np.mean(np.asarray(drop))) >= 3 / 8


@pytest.mark.slow  # 80 s; the engine's paths: the tests above and tests/test_stream.py; the
# script's allocation rows: tests/test_allocation_policies.py
def test_bench_adaptive_full_path_prints_json():
    """The documented full run (frontier, both GRPO-n4 variants, memory) at a toy size."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = helpers.run(
        [sys.executable, os.path.join(root, "scripts", "bench", "bench_adaptive.py"), "--prompts", "4",
         "--ratios", "1", "--reps", "1", "--new_tokens", "4", "--frontier", "1",
         "--overcommits", "0.75", "--memory_nmax", "32", "--stream_ratios", "2,4",
         "--stream_steps", "1", "--stream_frontier", "2", "--stream_lags", "2",
         "--stream_overcommits", "0.5", "--alloc_prompts", "8", "--alloc_draws", "1"],
        cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert [f["overcommit"] for f in res["frontier"]] == [0.75]
    assert "ada_refill_completion_step_s" in res["by_slots_per_prompt"]["1"]
    assert set(res["memory_temp_mb"]) == {"refill_32", "rounds_32"}
    assert 0 < res["stream_slot_utilisation_min"] <= 1 and res["stream_samples_vs_oracle_max"] > 0
    assert set(res["stream_by_slots_per_prompt"]) == {"2", "4"}
    assert res["stream_max_lag"] == {"2": 1, "4": 2}  # each S/B at the configs' default lag
    assert res["stream_samples_vs_oracle_max_sb4"] == res["stream_samples_vs_oracle_max"]
    assert res["stream_vs_grpo4_decode_steps_per_token_max"] > 0
    assert res["stream_launched_vs_pool_max"] >= 1  # pools follow launch order
    assert [(f["lag"], f["overcommit"]) for f in res["stream_frontier"]] == [(2, 0.5)]
    assert res["allocation"]["oracle_mixed"]["samples_per_mixed_vs_oracle"] == 1.0


def test_stream_lag_default_is_one_rule():
    """The configs that stream by default and the bench take the max lag from one rule."""
    assert [base.default_stream_lag(r) for r in (1, 2, 4, 8)] == [1, 1, 2, 2]
    streams = 0
    for name in base.PRETRAINED:
        c = base.get_config(f"algo=ada_balance,model={name}")
        if c.adaptive.mode == "stream":
            streams += 1
            assert c.adaptive.stream.max_lag == base.default_stream_lag(
                c.adaptive.slots / c.rl.prompts_per_step)
    assert streams
