"""Streaming adaptive sampling (ada_jax/stream.py): exact stopping law, every prompt trained
once, at most one update old, and exact mid-stream resume through the trainer."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax import nnx

from ada_jax import adaptive as A
from ada_jax import collect, generators, sampling, stream, train
from tests.helpers import tiny_model
from tests.helpers import chi2_pvalue
from tests.test_adaptive import _balance_pmf, _floored
from tests.test_train import _config, _meta_without_timing, _restore

LONG = generators.BernoulliGenerator(max_len=9)  # samples of 2..9 steps: out-of-order finishes
KEY = jax.random.key(7)


def _stream(B=8, ahead=8, slots=32, on_policy=False, max_lag=1, **kw):
    cfg = A.EngineConfig(**{"slots": slots, "max_new_tokens": 9, "keep": 4,
                            "exit_rule": "balance", "k_pos": 2, "k_neg": 2, "min_pool": 4, **kw})
    return stream.Stream(cfg, LONG, prompts=B, ahead=ahead, prompt_len=1, group=4,
                         on_policy=on_policy, max_lag=max_lag).init(None)


def _admit(s, first, n, budget=32):
    """Admit prompt ids first .. first + n - 1; returns the next id."""
    s.admit(list(range(first, first + n)), np.zeros((n, 1), np.int32), np.ones((n, 1), bool),
            np.full(n, budget))
    return first + n


def _data(s, p_of):
    ids = np.array([-1 if x is None else x for x in s.items])
    p = np.array([0.0 if x is None else p_of(x) for x in s.items], np.float32)
    return dict(key=KEY, p=jnp.asarray(p), id=jnp.asarray(ids))


def _run(s, p_of, step):
    return s.run(None, jax.random.key(step), reward_fn=generators.bernoulli_reward,
                 reward_data=_data(s, p_of))


def _drive(s, p_of, steps, budget=32, host=False):
    """Admit serial prompt ids (pass rate p_of(id)) into free rows, run, claim; per step the
    Claimed record and the engine's version."""
    serial, out = 0, []
    for step in range(steps):
        serial = _admit(s, serial, s.free(), budget)
        data = _data(s, p_of)
        if host:
            def score(rows, seq, toks, lens):  # padded to the slots: one compile
                pad = s.cfg.slots - len(rows)
                r = _host_draw(data, jnp.asarray(np.pad(rows, (0, pad))),
                               jnp.asarray(np.pad(seq, (0, pad))))
                return np.asarray(r)[:len(rows)]
            s.run(None, jax.random.key(step), score=score)
        else:
            s.run(None, jax.random.key(step), reward_fn=generators.bernoulli_reward,
                  reward_data=data)
        out.append(s.claim())
    return out, serial


@jax.jit
def _host_draw(data, rows, seq):
    return generators.bernoulli_reward(data, rows, seq, None, None)


def _sequential(i, p, budget=32, K=2, min_pool=4):
    """One-at-a-time balance stopping on prompt id i's oracle draws (the reference process)."""
    n = pos = 0
    while n < budget:
        u = jax.random.uniform(jax.random.fold_in(jax.random.fold_in(KEY, i), n))
        pos, n = pos + bool(u < p), n + 1
        if pos >= K and n - pos >= K and n >= min_pool:
            break
    return n, pos


def _p_of(i):
    return float(np.linspace(0.03, 0.97, 13)[i % 13])


@pytest.mark.parametrize("ahead,host", [(8, False), (3, False), (8, True)])
def test_stream_pools_equal_one_at_a_time_stopping(ahead, host):
    """Overcommit 0.75 and samples of uneven length, across step boundaries: every claimed
    pool is exactly the sequential process's (n, positives) for that prompt."""
    claims, _ = _drive(_stream(ahead=ahead), _p_of, 6, host=host)
    for c in claims:
        got = list(zip(np.asarray(c.batch.pool_n_B).tolist(),
                       np.asarray(c.batch.pool_pos_B).tolist()))
        assert got == [_sequential(i, _p_of(i)) for i in c.items]


def test_stream_stopping_time_matches_exact_distribution():
    p, claims = 0.25, _drive(_stream(B=32, ahead=32, slots=64), lambda i: 0.25, 12)[0]
    n = np.concatenate([np.asarray(c.batch.pool_n_B) for c in claims])
    pmf = _floored(lambda k: _balance_pmf(k, p, 2), 4)
    assert chi2_pvalue(n, pmf, range(4, 40)) > 1e-3


@pytest.mark.parametrize("on_policy,lag", [(False, 1), (True, 1), (False, 3)])
def test_every_prompt_trained_once_and_at_most_lag_updates_old(on_policy, lag):
    """B per step, none twice, none lost, none more than `lag` updates old. Lag 3 starts with
    4B prompts admitted at once: every later call must also finish enough of them for the
    batches after it (the call-0 prompts fill the next three batches exactly); half of the
    prompts are slow (p = 0.03: budget-bound), half quick."""
    B = 6
    s = _stream(B=B, ahead=lag * B, slots=48, on_policy=on_policy, max_lag=lag)
    p_of = _p_of if lag == 1 else (lambda i: 0.5 if i % 2 else 0.03)
    claims, admitted = _drive(s, p_of, 8)
    trained = [i for c in claims for i in c.items]
    assert len(trained) == len(set(trained)) == B * 8  # B per step, none twice
    resident = {x for x in s.items if x is not None}
    assert set(trained) | resident == set(range(admitted))  # none lost
    assert not set(trained) & resident
    lags = []
    for step, c in enumerate(claims):
        v = np.asarray(c.batch.version_BG)[np.asarray(c.batch.mask_BG)]
        assert v.max() <= step and v.min() >= (step if on_policy else step - lag)
        lags.append(step - v.min())
        share = c.metrics["off_policy_share"]
        assert share == pytest.approx(float(np.mean(v < step)))
    Q = B + lag * B  # call 0 admits ids 0..Q-1, call k >= 1 the next B
    admitted = lambda i: 0 if i < Q else 1 + (i - Q) // B  # noqa: E731
    assert all(step - admitted(i) <= lag for step, c in enumerate(claims) for i in c.items)
    if lag == 1:  # from step 2 on, a step trains exactly the batch admitted one call before
        assert [sorted(c.items) for c in claims[2:]] == [
            list(range(B * k, B * (k + 1))) for k in range(2, 8)]
    if not on_policy:  # the carried-over prompts really were carried (the test has teeth)
        assert np.mean([c.metrics["off_policy_share"] for c in claims[1:]]) > 0.2
        assert max(lags) == lag
    else:
        assert sum(c.metrics["stream_restarted"] for c in claims) > 0


def test_stream_rejects_lookahead_past_one_step():
    with pytest.raises(ValueError, match="ahead"):
        _stream(B=4, ahead=5)
    with pytest.raises(ValueError, match="refill"):
        _stream(mode="rounds")


def _pools(c):
    return (c.items, np.asarray(c.batch.pool_n_B).tolist(), np.asarray(c.batch.pool_pos_B).tolist())


def test_stream_drains_with_fewer_than_b_prompts():
    """A claim with fewer than B prompts resident returns those (was: a "chunk limit" error),
    so run + claim without admitting drain the stream; a claim of nothing says why."""
    s = _stream(B=8, ahead=8)
    with pytest.raises(RuntimeError, match="no prompt has been sampled"):
        s.claim()
    serial = _admit(s, 0, 3)
    with pytest.raises(RuntimeError, match="admitted but not yet run"):
        s.claim()
    assert sorted(_run(s, _p_of, 0).claim().items) == [0, 1, 2]
    serial = _admit(s, serial, 12)
    got = [_run(s, _p_of, step).claim() for step in (1, 2)]
    assert [len(c.items) for c in got] == [8, 4] and s.free() == 16
    assert sorted(i for c in got for i in c.items) == list(range(3, 15))
    for c in got:
        _assert_sequential(c)


def _assert_sequential(c):
    """The claimed pools are the one-at-a-time process's (n, positives) for their prompts."""
    _, n, pos = _pools(c)
    assert list(zip(n, pos)) == [_sequential(i, _p_of(i)) for i in c.items]


def test_stream_admits_no_prompt_past_the_last_call():
    """Given the run's calls, admission stops once the resident prompts cover the remaining
    batches: every admitted prompt is trained and nothing is left sampled at the end (before,
    the last ahead x prompts were sampled for nothing)."""
    B, steps = 6, 5
    wasted = {}
    for calls in (None, steps):
        s = _stream(B=B, ahead=B, slots=24)
        s.total_calls = calls
        claims, admitted = _drive(s, _p_of, steps)
        trained = sorted(i for c in claims for i in c.items)
        resident = np.asarray(s.admit_call) != stream.EMPTY
        wasted[calls] = int(np.asarray(s.st.launched)[resident].sum())
        assert trained == list(range(steps * B))
        assert admitted == steps * B + (B if calls is None else 0)
        assert resident.sum() == (B if calls is None else 0)
    print(f"\nsamples launched for prompts never trained: {wasted[None]} without the run's "
          f"calls, {wasted[steps]} with them")
    assert wasted[None] > 0 == wasted[steps]


def test_stream_saved_between_admit_and_run_resumes_exactly():
    """A checkpoint taken after admit() and before run() restores the rows just admitted as
    such: the next call empties their pools (was: they kept the previous prompts' pools)."""
    s = _stream(B=6, ahead=6, slots=24)
    claims, serial = _drive(s, _p_of, 2)
    _admit(s, serial, s.free())
    arrays = jax.tree.map(lambda x: jnp.array(x, copy=True), s.arrays())
    meta = json.loads(json.dumps(s.meta()))
    r = _stream(B=6, ahead=6, slots=24)
    r.restore(arrays, meta)
    for step in (2, 3):  # the rows just admitted are claimed in the second call
        a, b = _run(s, _p_of, step).claim(), _run(r, _p_of, step).claim()
        assert _pools(a) == _pools(b)
        _assert_sequential(b)
        _admit(s, 100 * step, s.free())
        _admit(r, 100 * step, r.free())


def test_trainer_stream_resumes_mid_stream_exactly(tmp_path, monkeypatch):
    """4 streaming steps in one go vs killed after 2 + resumed: params, optimizer, engine state
    (running slots' tokens; their caches are rebuilt at every call, so in both runs alike) and
    metrics are identical, and the checkpoint holds no KV cache."""
    kw = {"adaptive.mode": "stream", "checkpoint.every": 1, "rl.prompts_per_step": 4,
          "rl.steps": 4}
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    train.train_and_evaluate(_config("ada_balance", **kw), ref)
    calls, collect_fn = [], collect.collect

    def killed_at_step_3(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")
        return collect_fn(*args)
    monkeypatch.setattr(collect, "collect", killed_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(_config("ada_balance", **kw), run)
    monkeypatch.setattr(collect, "collect", collect_fn)
    _, mid, meta_mid = _restore(run)
    assert any(x is not None for x in meta_mid["stream"]["items"])  # prompts were carried
    assert np.any(np.asarray(mid["stream"]["engine"]["slot_prompt"]) >= 0)  # slots running
    assert mid["stream"]["engine"].get("gen") is None  # no slot caches in the checkpoint
    train.train_and_evaluate(_config("ada_balance", **kw), run)
    step_a, arrays_a, meta_a = _restore(ref)
    step_b, arrays_b, meta_b = _restore(run)
    assert step_a == step_b == 4
    for a, b in zip(jax.tree.leaves(arrays_a), jax.tree.leaves(arrays_b)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert _meta_without_timing(meta_a) == _meta_without_timing(meta_b)

    def recs(wd):
        with open(os.path.join(wd, "metrics.jsonl")) as f:
            return [{k: v for k, v in json.loads(line).items()
                     if not k.startswith("time_") and k != "cum_wall"} for line in f]
    assert recs(ref) == recs(run)
    assert max(r["off_policy_share"] for r in recs(ref)[1:]) > 0


def test_stream_calls_prefill_their_prompts_at_their_own_width(tmp_path, monkeypatch):
    """sampling.pad_multiple in stream mode: each call prefills the resident prompts cut to
    the longest one (rounded up to 16), not max_prompt_len, and draws the same samples as at
    the full width (padding is masked): the same rewards, lengths and token counts, losses to
    float rounding; the rows (and the checkpoint) keep max_prompt_len columns."""
    widths, real_run = set(), stream._run

    def run(params, prompt_QP, *a, **kw):
        widths.add(prompt_QP.shape[1])  # at trace time: once per width
        return real_run(params, prompt_QP, *a, **kw)
    monkeypatch.setattr(stream, "_run", run)
    recs, seen = {}, {}
    for multiple in (16, 0):
        widths.clear()
        kw = {"adaptive.mode": "stream", "rl.prompts_per_step": 4, "rl.steps": 3,
              "sampling.max_prompt_len": 96, "model.max_len": 256, "checkpoint.every": 3,
              "sampling.pad_multiple": multiple}
        wd = str(tmp_path / str(multiple))
        train.train_and_evaluate(_config("ada_balance", **kw), wd)
        with open(os.path.join(wd, "metrics.jsonl")) as f:
            recs[multiple] = [json.loads(line) for line in f]
        seen[multiple] = sorted(widths)
        _, arrays, _ = _restore(wd)
        assert np.asarray(arrays["stream"]["prompt"]).shape[1] == 96
    assert seen[0] == [96] and seen[16] and max(seen[16]) <= 48, seen
    for a, b in zip(recs[16], recs[0], strict=True):
        for k in ("reward_mean", "samples_total", "samples_launched", "generated_tokens",
                  "response_length", "trained_tokens"):
            assert a[k] == b[k], (k, a[k], b[k])
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [("float32", 2e-5), ("bfloat16", 0.1)])
def test_resumed_slot_caches_equal_decoded_ones(dtype, tol):
    """`ModelGenerator.resume` (one prefill of prompt + drawn tokens, in chunks) rebuilds what
    decoding one token at a time wrote: the same valid positions, write positions and next
    positions exactly, K/V and next-token logits to float rounding (float32: 2e-5; bfloat16
    compute, whose K/V round to 8 bits: within 0.1 on logits of magnitude ~1)."""
    model = tiny_model(5, dtype=dtype)
    graphdef, params = nnx.split(model)
    scfg = sampling.SamplingConfig(max_new_tokens=7, eos_id=-1, prefill_chunk=2)
    gen = generators.ModelGenerator(graphdef, model.cfg, scfg)
    prompt, pmask = map(jnp.asarray, sampling.left_pad([[7, 8, 9], [10, 11], [12, 13, 14, 15]], 5))
    prompt_S = jnp.asarray([2, 0, -1, 1, 0])  # slot 2 free
    steps_S = jnp.asarray([4, 7, 0, 1, 0])  # tokens drawn per slot (all of N in slot 1)
    ps = gen.prefill(params, prompt, pmask)
    g = gen.restart(ps, gen.init_slots(ps, 5), prompt_S >= 0, prompt_S)
    toks, logits = jnp.zeros((5, 7), jnp.int32), g["logits"]
    for t in range(7):  # slot s decodes steps_S[s] tokens, then stops (as it would finish)
        live = t < steps_S
        tok, _, g = gen.step(gen.for_decoding(params), ps, g, live, prompt_S,
                             jnp.zeros(5, jnp.int32), jax.random.key(t))
        toks = toks.at[:, t].set(jnp.where(live, tok, 0))
        logits = jnp.where(live[:, None], g["logits"], logits)  # a stopped row's are not used
    # stopped rows' write positions advance too; a running sample's is P + its length
    g["cache"]["pos"], g["logits"] = 5 + steps_S, logits
    r = gen.resume(params, prompt, pmask, prompt_S, toks, steps_S)
    run = np.asarray(prompt_S >= 0)
    for f in ("valid", "pos"):
        np.testing.assert_array_equal(np.asarray(r["cache"][f])[run], np.asarray(g["cache"][f])[run])
    np.testing.assert_array_equal(np.asarray(r["next_pos"])[run], np.asarray(g["next_pos"])[run])
    valid = np.asarray(g["cache"]["valid"])[run]
    # keys [S,K,E,len], values [S,K,len,E]: put the cache length second, then pick valid
    for order, name in (((0, 3, 1, 2), "k"), ((0, 2, 1, 3), "v")):
        for a, b in zip(r["cache"][name], g["cache"][name]):
            a, b = np.asarray(a, np.float32)[run], np.asarray(b, np.float32)[run]
            np.testing.assert_allclose(a.transpose(order)[valid], b.transpose(order)[valid],
                                       atol=tol, rtol=0)
    np.testing.assert_allclose(np.asarray(r["logits"])[run], np.asarray(g["logits"])[run],
                               atol=tol, rtol=0)


def _fresh_state(B, S):
    """The fields `_assign_refill` reads, for B prompts with nothing launched and S free slots."""
    from types import SimpleNamespace
    z = jnp.zeros((B,), jnp.int32)
    return SimpleNamespace(n_samples=z, n_pos=z, launched=z, active=jnp.ones((B,), bool),
                           ring_done=jnp.zeros((B, A._RING), bool),
                           ring_pos=jnp.zeros((B, A._RING), bool),
                           slot_prompt=jnp.full((S,), -1, jnp.int32),
                           slot_seq=jnp.zeros((S,), jnp.int32))


def test_assign_refill_per_prompt_overcommit_and_priority():
    """overcommit_B sets each prompt's bar 1 - overcommit on P(needed) (the Jeffreys
    predictive: 1, 1, 1, 1, 0.859, 0.766, 0.697, 0.645, … for a fresh balance-2/2 prompt), and
    a prompt of priority 1 has every candidate placed before any of a priority-0 prompt."""
    cfg = A.EngineConfig(slots=64, max_new_tokens=9, keep=4, exit_rule="balance", k_pos=2,
                         k_neg=2, min_pool=4, mode="refill")
    q = np.asarray(A._still_needed(cfg, jnp.zeros(1), jnp.zeros(1), jnp.zeros(1), 12))[0]
    np.testing.assert_allclose(q[4:8], [0.859, 0.766, 0.697, 0.645], atol=2e-3)
    st, budget = _fresh_state(3, 64), jnp.full((3,), 32, jnp.int32)
    for over, want in [(0.0, 4), (0.2, 5), (0.25, 6), (0.36, 8)]:  # q >= 1 - over: a prefix
        _, _, _, started, _ = A._assign_refill(cfg, st, budget,
                                               overcommit_B=jnp.asarray([over, 0.0, 0.5]))
        assert int(started[0]) == want == int(np.sum(q >= 1 - over - 1e-6))
        assert int(started[1]) == 4  # certain only
    # 6 free slots, prompt 2 first: it takes them all, its speculative ones over 0's certain.
    st = _fresh_state(3, 6)
    _, prompt, seq, started, _ = A._assign_refill(
        cfg, st, budget, priority_B=jnp.asarray([1e-3, 0.0, 1.0]),
        overcommit_B=jnp.asarray([0.75, 0.75, 0.75]))
    assert np.asarray(started).tolist() == [0, 0, 6]
    assert sorted(np.asarray(seq).tolist()) == list(range(6))
    # Among equals, certain candidates go round-robin; 1e-3 (older) puts prompt 0's first.
    _, _, _, started, _ = A._assign_refill(cfg, st, budget)
    assert np.asarray(started).tolist() == [2, 2, 2]
    _, _, _, started, _ = A._assign_refill(cfg, st, budget,
                                           priority_B=jnp.asarray([1e-3, 0.0, 0.0]))
    assert np.asarray(started).tolist() == [4, 1, 1]


@pytest.mark.parametrize("lag,slots", [(1, 16), (1, 8), (2, 24), (2, 23), (3, 32)])
def test_launch_priority_due_first_and_speculation_by_window_left(lag, slots):
    """A row with h calls left may speculate (lag + 1 - h) / (lag + 1) of the overcommit;
    older rows go first among equals (1e-3 x age), and with slots >= 2 x (lag + 1) x B the
    due rows (horizon 0) before all others (priority >= 1)."""
    s = _stream(B=4, ahead=4 * lag, slots=slots, max_lag=lag, overcommit=0.6)
    assert s.due_first == (slots >= 2 * (lag + 1) * 4)
    horizon = np.asarray([0, lag, lag + 1] + list(range(1, lag)))
    resident = horizon <= lag
    prio, over = s.launch_priority(horizon, resident)
    age = lag - np.minimum(horizon, lag)
    want_prio = np.where(resident, s.due_first * (horizon == 0) + 1e-3 * age, 0)
    np.testing.assert_allclose(prio, want_prio, rtol=1e-6)
    h = np.minimum(horizon, lag)
    np.testing.assert_allclose(over, 0.6 * (lag + 1 - h) / (lag + 1), rtol=1e-6)
    assert over[0] == pytest.approx(0.6) and over[1] == pytest.approx(0.6 / (lag + 1))


def test_decoupled_ppo_in_the_trainer(tmp_path):
    """loss.decoupled: on-policy (no stream) it trains like plain PPO (the proximal policy is
    the sampler's, up to float noise); streaming at lag 2 ("auto" turns it on) its behaviour
    weights π_prox/π_behav leave 1 once carried-over samples are trained."""
    def params(wd):
        return [np.asarray(x) for x in jax.tree.leaves(_restore(wd)[1]["trainable"]["model"])]

    kw = {"rl.steps": 2, "rl.prompts_per_step": 4}
    plain, dec = str(tmp_path / "plain"), str(tmp_path / "dec")
    train.train_and_evaluate(_config("grpo", **kw), plain)
    m = train.train_and_evaluate(_config("grpo", **kw, **{"loss.decoupled": "on"}), dec)
    assert m["behav_weight"] == pytest.approx(1.0, abs=1e-3)
    for a, b in zip(params(plain), params(dec)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    wd = str(tmp_path / "stream")
    train.train_and_evaluate(_config("ada_balance", **{
        "adaptive.mode": "stream", "adaptive.stream.max_lag": 2, "rl.prompts_per_step": 4,
        "rl.steps": 4, "loss.behav_cap": 5.0}), wd)  # auto: on for a stream
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    stale = [r for r in recs if r.get("off_policy_share", 0) > 0]
    assert stale and all(0 < r["behav_weight"] <= 5.0 for r in stale)
    assert any(abs(r["behav_weight"] - 1.0) > 1e-3 for r in stale)
