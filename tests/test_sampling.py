"""Sampler: determinism, greedy limit, exact top-k / top-p support, EOS handling, one trace."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ada_jax import model as model_lib

from ada_jax import logprobs
from ada_jax import sampling
from tests.helpers import chi2_pvalue, tiny_model


def _setup(seed=0):
    graphdef, params = nnx.split(tiny_model(seed))
    toks, mask = sampling.left_pad([[5, 6, 7], [9, 10, 11, 12, 13], [4]], 6)
    return graphdef, params, jnp.asarray(toks), jnp.asarray(mask)


def _run(cfg, key=0, seed=0):
    graphdef, params, toks, mask = _setup(seed)
    return sampling.sample(graphdef, params, toks, mask, jax.random.key(key), cfg=cfg)


@pytest.mark.parametrize("draw", sampling.DRAWS)
def test_sampling_is_deterministic_for_a_key(draw):
    cfg = sampling.SamplingConfig(max_new_tokens=12, eos_id=-1, draw=draw)
    a, b, c = _run(cfg, key=1), _run(cfg, key=1), _run(cfg, key=2)
    np.testing.assert_array_equal(a.tokens_BN, b.tokens_BN)
    np.testing.assert_array_equal(a.logp_BN, b.logp_BN)
    assert not np.array_equal(a.tokens_BN, c.tokens_BN)


@pytest.mark.parametrize("draw,block", [("gumbel", 0), ("inverse_cdf", 256), ("inverse_cdf", 7)])
def test_each_draw_samples_the_softmax_distribution(draw, block):
    """100k draws from one row of 300 logits (not a multiple of the block; a peak, 110 -inf
    ids in the middle and at the end) follow softmax(logits) (chi-square below its 0.999
    quantile), never take a -inf id; a row with one finite logit, first or last, always takes
    it. Catches a draw off by one token or one block."""
    V, n = 300, 100_000
    logits = np.random.default_rng(1).normal(size=V).astype(np.float32) * 2
    logits[3], logits[100:160], logits[250:] = 6.0, -np.inf, -np.inf
    probs = np.asarray(jax.nn.softmax(jnp.asarray(logits)), np.float64)
    if draw == "gumbel":
        one = lambda row, k: jax.random.categorical(k, row)  # noqa: E731
    else:
        one = lambda row, k: sampling.draw_inverse_cdf(row[None], k, block)[0]  # noqa: E731
    keys = jax.random.split(jax.random.key(2), n)
    toks = np.asarray(jax.jit(jax.vmap(lambda k: one(jnp.asarray(logits), k)))(keys))
    counts = np.bincount(toks, minlength=V)
    assert counts[100:160].sum() == counts[250:].sum() == 0
    assert chi2_pvalue(toks, lambda i: probs[i], range(V)) > 1e-3  # below the 0.999 quantile
    for only in (0, V - 1):
        row = jnp.full((V,), -jnp.inf).at[only].set(0.0)
        assert set(np.asarray(jax.vmap(lambda k: one(row, k))(keys[:500]))) == {only}


def test_an_unknown_draw_is_refused():
    with pytest.raises(ValueError, match="choose from"):
        sampling.SamplingConfig(max_new_tokens=1, eos_id=-1, draw="multinomial")


def test_low_temperature_equals_greedy():
    greedy = _run(sampling.SamplingConfig(max_new_tokens=10, eos_id=-1, temperature=0.0))
    cold = _run(sampling.SamplingConfig(max_new_tokens=10, eos_id=-1, temperature=1e-4), key=5)
    np.testing.assert_array_equal(greedy.tokens_BN, cold.tokens_BN)


def test_greedy_matches_argmax_of_full_forward():
    graphdef, params, toks, mask = _setup()
    out = sampling.sample(graphdef, params, toks, mask, jax.random.key(0),
                          cfg=sampling.SamplingConfig(max_new_tokens=5, eos_id=-1,
                                                      temperature=0.0))
    model = nnx.merge(graphdef, params)
    full = jnp.concatenate([toks, out.tokens_BN], axis=1)
    fmask = jnp.concatenate([mask, jnp.ones_like(out.tokens_BN, bool)], axis=1)
    logits, _ = model(full, model_lib.positions_from_mask(fmask), fmask)
    np.testing.assert_array_equal(np.argmax(logits[:, 5:-1], -1), out.tokens_BN)
    # Returned log-probs are the model's log-probs of those tokens (T=1 for greedy).
    logp, _ = logprobs.token_logprobs(logits[:, 5:-1], out.tokens_BN)
    np.testing.assert_allclose(out.logp_BN, logp, atol=2e-5)


def test_sampled_logprobs_match_learner_at_temperature():
    cfg = sampling.SamplingConfig(max_new_tokens=8, eos_id=-1, temperature=0.7)
    graphdef, params, toks, mask = _setup()
    out = sampling.sample(graphdef, params, toks, mask, jax.random.key(3), cfg=cfg)
    full = jnp.concatenate([toks, out.tokens_BN], axis=1)
    fmask = jnp.concatenate([mask, jnp.ones_like(out.tokens_BN, bool)], axis=1)
    logits, _ = nnx.merge(graphdef, params)(full, model_lib.positions_from_mask(fmask), fmask)
    logp, _ = logprobs.token_logprobs(logits[:, 5:-1], out.tokens_BN, temperature=0.7)
    np.testing.assert_allclose(out.logp_BN, logp, atol=2e-5)


def _numpy_support(logits, top_k, top_p):
    keep = np.ones_like(logits, bool)
    for i, row in enumerate(logits):
        order = np.argsort(-row, kind="stable")
        allowed = set(order[:top_k]) if top_k else set(order)
        r = np.where([j in allowed for j in range(len(row))], row, -np.inf)
        if top_p < 1.0:
            p = np.exp(r - r.max())
            p /= p.sum()
            order = np.argsort(-r, kind="stable")
            cum, nucleus = 0.0, set()
            for j in order:
                if cum >= top_p:
                    break
                nucleus.add(j)
                cum += p[j]
            allowed &= nucleus
        keep[i] = [j in allowed for j in range(len(row))]
    return keep


@pytest.mark.parametrize("draw", sampling.DRAWS)
@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), (0, 0.3), (0, 0.9), (7, 0.6), (1, 1.0)])
def test_top_k_top_p_keep_exactly_the_right_support(top_k, top_p, draw):
    logits = np.random.default_rng(top_k).normal(size=(16, 40)).astype(np.float32) * 2
    got = np.isfinite(np.asarray(sampling.filter_logits(jnp.asarray(logits), top_k, top_p)))
    np.testing.assert_array_equal(got, _numpy_support(logits, top_k, top_p))
    # And samples only ever come from that support.
    cfg = sampling.SamplingConfig(max_new_tokens=1, eos_id=-1, top_k=top_k, top_p=top_p,
                                  draw=draw)
    keys = jax.random.split(jax.random.key(0), 200)
    toks, _ = jax.vmap(lambda k: sampling.sample_token(jnp.asarray(logits), k, cfg))(keys)
    for i in range(16):
        assert set(np.asarray(toks[:, i])) <= set(np.flatnonzero(got[i]))


def test_eos_stops_rows_and_loop_exits_early():
    graphdef, params, toks, mask = _setup()
    greedy = sampling.SamplingConfig(max_new_tokens=12, eos_id=-1, temperature=0.0)
    ref = sampling.sample(graphdef, params, toks, mask, jax.random.key(0), cfg=greedy)
    eos = int(ref.tokens_BN[0, 2])  # row 0 emits this token at step 2
    cfg = sampling.SamplingConfig(max_new_tokens=12, eos_id=eos, temperature=0.0, pad_id=0)
    out = sampling.sample(graphdef, params, toks, mask, jax.random.key(0), cfg=cfg)
    for row in range(3):
        hits = np.flatnonzero(np.asarray(ref.tokens_BN[row]) == eos)
        want_len = hits[0] + 1 if len(hits) else 12
        assert out.lengths_B[row] == want_len
        np.testing.assert_array_equal(out.tokens_BN[row, :want_len],
                                      ref.tokens_BN[row, :want_len])
        assert np.all(np.asarray(out.tokens_BN[row, want_len:]) == 0)
        assert np.all(np.asarray(out.logp_BN[row, want_len:]) == 0)
    assert int(out.steps) == int(out.lengths_B.max())


def test_ends_with_matches_each_rows_tail():
    """ends_with: a row's first length tokens end with one of the sequences (not a later
    position, not a row too short to hold it)."""
    toks = jnp.asarray([[1, 2, 3, 0], [2, 3, 2, 3], [3, 9, 9, 9], [5, 2, 3, 7]])
    got = sampling.ends_with(toks, jnp.asarray([3, 3, 1, 4]), ((2, 3), (9,)))
    np.testing.assert_array_equal(got, [True, False, False, False])
    got = sampling.ends_with(toks, jnp.asarray([2, 4, 3, 3]), ((2, 3), (9,)))
    np.testing.assert_array_equal(got, [False, True, True, True])
    assert not sampling.ends_with(toks, jnp.asarray([4, 4, 4, 4]), ()).any()


def test_stop_sequences_end_rows_where_they_first_end():
    """A row stops at the first step its response ends with a stop sequence, which it keeps
    (as it keeps an EOS); the rest is padding; oracle: the unstopped greedy rows."""
    graphdef, params, toks, mask = _setup()
    N = 12
    greedy = sampling.SamplingConfig(max_new_tokens=N, eos_id=-1, temperature=0.0)
    ref = np.asarray(sampling.sample(graphdef, params, toks, mask, jax.random.key(0),
                                     cfg=greedy).tokens_BN)
    stops = (tuple(int(t) for t in ref[0, 2:4]), (int(ref[1, 5]),))
    cfg = sampling.SamplingConfig(max_new_tokens=N, eos_id=-1, temperature=0.0, pad_id=0,
                                  stop_seqs=stops)
    out = sampling.sample(graphdef, params, toks, mask, jax.random.key(0), cfg=cfg)
    for row in range(3):
        ends = [i + 1 for i in range(N) for seq in stops
                if i + 1 >= len(seq) and tuple(ref[row, i + 1 - len(seq):i + 1]) == seq]
        want = min(ends, default=N)
        assert out.lengths_B[row] == want, (row, ends)
        np.testing.assert_array_equal(out.tokens_BN[row, :want], ref[row, :want])
        assert np.all(np.asarray(out.tokens_BN[row, want:]) == 0)
    assert int(out.lengths_B[0]) <= 4 and int(out.lengths_B[1]) <= 6


def test_sampler_traces_once_per_shape():
    graphdef, params, toks, mask = _setup()
    cfg = sampling.SamplingConfig(max_new_tokens=4, eos_id=-1)
    counted = jax.jit(chex.assert_max_traces(sampling.sample.__wrapped__, n=1),
                      static_argnames=("graphdef", "cfg"))
    for i in range(3):  # new params values and keys: no retrace
        p = jax.tree.map(lambda x: x * (1 + 0.01 * i), params)
        counted(graphdef, p, toks, mask, jax.random.key(i), cfg=cfg)
    before = sampling.sample._cache_size()
    for i in range(3):
        p = jax.tree.map(lambda x: x * (1 + 0.01 * i), params)
        sampling.sample(graphdef, p, toks, mask, jax.random.key(i), cfg=cfg)
    assert sampling.sample._cache_size() - before <= 1


@pytest.mark.parametrize("draw", sampling.DRAWS)
def test_ids_past_the_tokenizer_are_never_sampled(caplog, draw):
    """A model with more logits than the tokenizer has ids (Qwen2.5 pads its embedding) never
    draws the padded ids, greedy or sampled, with top-k / top-p; the log-prob stays the full
    softmax's (what the learner recomputes); the mask is logged once per size pair."""
    V, keep = tiny_model().cfg.vocab_size, 7
    logits_BV = jnp.tile(jnp.arange(V, dtype=jnp.float32)[None] / 4, (64, 1))  # high ids likely
    for cfg in (dict(temperature=0.0), dict(temperature=1.0), dict(top_k=20, top_p=0.9)):
        cfg = sampling.SamplingConfig(max_new_tokens=1, eos_id=-1, vocab_size=keep, draw=draw,
                                      **cfg)
        token, logp = sampling.sample_token(logits_BV, jax.random.key(0), cfg)
        assert int(token.max()) < keep, cfg
        if cfg.temperature == 1.0:
            want = jax.nn.log_softmax(logits_BV)[jnp.arange(64), token]
            np.testing.assert_allclose(logp, want, rtol=1e-6)
    out = _run(sampling.SamplingConfig(max_new_tokens=12, eos_id=-1, vocab_size=keep, draw=draw))
    assert int(out.tokens_BN.max()) < keep
    assert int(_run(sampling.SamplingConfig(max_new_tokens=12, eos_id=-1)).tokens_BN.max()) >= keep
    sampling.token_limit.cache_clear()
    with caplog.at_level("INFO", logger="ada_jax.sampling"):
        assert sampling.token_limit(100, 128) == sampling.token_limit(100, 128) == 100
        assert sampling.token_limit(128, 128) == 0
    assert caplog.text.count("never sampled") == 1
