"""Transformer: cached decoding = full forward, causality, padding invariance, variants."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ada_jax import logprobs
from ada_jax import model as model_lib
from ada_jax.sampling import left_pad
from tests.helpers import tiny_model

VARIANTS = {
    "base": {},
    "qwen_like": dict(qkv_bias=True, rope_base=1_000_000.0),
    "llama_like": dict(tie_embeddings=False, rope_scaling="llama3", rope_base=500_000.0,
                       rope_original_max_len=16, rope_scaling_factor=8.0),
    "mha": dict(n_kv_heads=4),
}


def _randomise_biases(model, seed=1):
    """Zero-initialised biases would hide a bias bug; give them random values."""
    state = nnx.state(model)
    keys = iter(jax.random.split(jax.random.key(seed), 64))
    state = jax.tree_util.tree_map_with_path(
        lambda path, x: jax.random.normal(next(keys), x.shape) * 0.5
        if "bias" in jax.tree_util.keystr(path) else x, state)
    nnx.update(model, state)
    return model


def _full_logits(model, tokens, mask):
    logits, _ = model(jnp.asarray(tokens), model_lib.positions_from_mask(jnp.asarray(mask)),
                      jnp.asarray(mask))
    return np.asarray(logits)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_decoding_matches_full_forward(variant):
    model = _randomise_biases(tiny_model(**VARIANTS[variant]))
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(3, 64, size=n)) for n in (5, 9, 2)]
    cont = rng.integers(3, 64, size=(3, 6))
    P, N = 9, cont.shape[1]
    ptoks, pmask = left_pad(prompts, P)
    full_toks = np.concatenate([ptoks, cont], axis=1)
    full_mask = np.concatenate([pmask, np.ones_like(cont, bool)], axis=1)
    want = _full_logits(model, full_toks, full_mask)

    cache = model_lib.init_cache(model.cfg, 3, P + N)
    positions = model_lib.positions_from_mask(jnp.asarray(pmask))
    logits, cache = model(jnp.asarray(ptoks), positions, jnp.asarray(pmask), cache)
    np.testing.assert_allclose(np.asarray(logits)[pmask], want[:, :P][pmask], atol=2e-5)
    next_pos = pmask.sum(1)
    for t in range(N):
        tok = jnp.asarray(cont[:, t:t + 1])
        logits, cache = model(tok, jnp.asarray(next_pos + t)[:, None], jnp.ones((3, 1), bool),
                              cache)
        np.testing.assert_allclose(np.asarray(logits)[:, 0], want[:, P + t], atol=2e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("T", [1, 2])
def test_cache_writes_put_each_rows_tokens_at_its_position(dtype, T):
    """Each row's new keys / values land at its own position, bit for bit, one token a row (a
    16-bit cache by a select: XLA CPU would scatter it in float32) or several (a prefill's
    chunk; a 16-bit cache through its uint16 bits)."""
    rng = np.random.default_rng(0)
    B, K, E, S = 3, 2, 4, 9
    dt = jnp.dtype(dtype)
    k0, v0 = rng.normal(size=(B, K, E, S)), rng.normal(size=(B, K, S, E))
    new_k, new_v = rng.normal(size=(B, K, E, T)), rng.normal(size=(B, K, T, E))
    pos = np.array([0, 3, 7])
    cache = {"k": jnp.asarray(k0, dt), "v": jnp.asarray(v0, dt), "pos": jnp.asarray(pos)}
    k, v, out = jax.jit(model_lib._write_cache)(cache, jnp.asarray(new_k, dt),
                                                  jnp.asarray(new_v, dt))
    want_k, want_v = np.asarray(cache["k"]).copy(), np.asarray(cache["v"]).copy()
    for b, p in enumerate(pos):
        want_k[b, :, :, p:p + T] = np.asarray(jnp.asarray(new_k[b], dt))
        want_v[b, :, p:p + T] = np.asarray(jnp.asarray(new_v[b], dt))
    assert k.dtype == v.dtype == dt
    np.testing.assert_array_equal(np.asarray(out["k"]), np.asarray(k))
    np.testing.assert_array_equal(np.asarray(out["pos"]), pos)
    np.testing.assert_array_equal(np.asarray(k), want_k)
    np.testing.assert_array_equal(np.asarray(v), want_v)


def test_bfloat16_cached_decoding_follows_its_full_forward():
    """bfloat16 compute (float32 accumulation in every dot, the cache in bfloat16): decoding
    token by token stays within bfloat16 rounding of the whole-sequence forward."""
    model = tiny_model(dtype="bfloat16")
    rng = np.random.default_rng(1)
    ptoks, pmask = left_pad([list(rng.integers(3, 64, size=n)) for n in (5, 9, 2)], 9)
    cont = rng.integers(3, 64, size=(3, 5))
    full_toks = np.concatenate([ptoks, cont], axis=1)
    full_mask = np.concatenate([pmask, np.ones_like(cont, bool)], axis=1)
    want = _full_logits(model, full_toks, full_mask)
    cache = model_lib.init_cache(model.cfg, 3, full_toks.shape[1])
    assert cache["k"][0].dtype == jnp.bfloat16
    _, cache = model(jnp.asarray(ptoks), model_lib.positions_from_mask(jnp.asarray(pmask)),
                     jnp.asarray(pmask), cache)
    for t in range(cont.shape[1]):
        logits, cache = model(jnp.asarray(cont[:, t:t + 1]),
                              jnp.asarray(pmask.sum(1) + t)[:, None], jnp.ones((3, 1), bool),
                              cache)
        np.testing.assert_allclose(np.asarray(logits)[:, 0], want[:, 9 + t],
                                   atol=0.02 * np.abs(want).max())


def test_causality_future_tokens_do_not_change_past_logits():
    model = tiny_model()
    rng = np.random.default_rng(1)
    toks = rng.integers(3, 64, size=(2, 12))
    mask = np.ones_like(toks, bool)
    a = _full_logits(model, toks, mask)
    toks2 = toks.copy()
    toks2[:, 7:] = rng.integers(3, 64, size=(2, 5))
    b = _full_logits(model, toks2, mask)
    np.testing.assert_allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert np.abs(a[:, 7:] - b[:, 7:]).max() > 1e-3


def test_left_padding_does_not_change_a_rows_logits():
    model = _randomise_biases(tiny_model(qkv_bias=True))
    seq = [7, 8, 9, 10, 11]
    a_t, a_m = left_pad([seq], 5)
    b_t, b_m = left_pad([seq], 11)
    b_t[0, :6] = 33  # garbage under the padding must not leak
    a = _full_logits(model, a_t, a_m)[0]
    b = _full_logits(model, b_t, b_m)[0, 6:]
    np.testing.assert_allclose(a, b, atol=2e-5)


def test_cache_row_restarted_from_another_prompt():
    """The adaptive engine copies a prompt's cache into a slot and resets its write position."""
    model = tiny_model()
    ptoks, pmask = left_pad([[4, 5, 6], [7, 8, 9, 10]], 4)
    cache = model_lib.init_cache(model.cfg, 2, 10)
    _, cache = model(jnp.asarray(ptoks), model_lib.positions_from_mask(jnp.asarray(pmask)),
                     jnp.asarray(pmask), cache)
    # Row 0 decodes some junk, then is restarted from row 1's prompt cache.
    for t in range(3):
        _, cache = model(jnp.full((2, 1), 20 + t), jnp.asarray([[3 + t], [4 + t]]),
                         jnp.ones((2, 1), bool), cache)
    restart = jax.tree.map(lambda x: x, cache)
    restart["k"] = [k.at[0].set(k[1]) for k in cache["k"]]
    restart["v"] = [v.at[0].set(v[1]) for v in cache["v"]]
    restart["valid"] = cache["valid"].at[0].set(cache["valid"][1])
    restart["pos"] = jnp.asarray([4, 7], jnp.int32)  # row 0 back to the end of prompt 1
    logits, _ = model(jnp.asarray([[30], [30]]), jnp.asarray([[4], [7]]),
                      jnp.ones((2, 1), bool), restart)
    want = _full_logits(model, np.asarray([[7, 8, 9, 10, 30]]), np.ones((1, 5), bool))[0, -1]
    np.testing.assert_allclose(np.asarray(logits)[0, 0], want, atol=2e-5)


def test_remat_gives_same_gradients():
    rng = np.random.default_rng(2)
    toks = jnp.asarray(rng.integers(3, 64, size=(2, 8)))
    mask = jnp.ones((2, 8), bool)

    def grads(model):
        graphdef, params = nnx.split(model)

        def loss(p):
            logits, _ = nnx.merge(graphdef, p)(toks, model_lib.positions_from_mask(mask), mask)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 3])
        return jax.jit(jax.grad(loss))(params)

    g1 = grads(tiny_model(remat=False))
    g2 = grads(tiny_model(remat=True))
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("remat,dtype", [(False, "float32"), (True, "float32"),
                                         (True, "bfloat16")])
def test_scan_over_layers_equals_the_loop(remat, dtype):
    """model.scan_layers runs the same blocks as one lax.scan: logits, gradients, the shared-
    prompt (cached) learner pass and a cached decode step equal the unrolled loop's."""
    rng = np.random.default_rng(4)
    toks = jnp.asarray(rng.integers(3, 64, size=(3, 9)))
    mask = jnp.asarray(np.arange(9)[None] >= np.asarray([0, 2, 4])[:, None])
    loop = _randomise_biases(tiny_model(remat=remat, n_layers=3, qkv_bias=True, dtype=dtype))
    graphdef, params = nnx.split(loop)
    # norm scales off 1 (and not bfloat16-exact): kept in float32 by either path
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x * (1.0 + 0.3 * jax.random.normal(jax.random.key(x.size), x.shape))
        if "scale" in jax.tree_util.keystr(path) else x, params)
    scan_graphdef, _ = nnx.split(tiny_model(remat=remat, n_layers=3, qkv_bias=True, dtype=dtype,
                                            scan_layers=True))
    weight = jnp.asarray(rng.normal(size=(3, 9, 64)), jnp.float32)

    def logits(gd, p):
        return nnx.merge(gd, p)(toks, model_lib.positions_from_mask(mask), mask)[0]

    def shared(gd, p):
        return model_lib.shared_prompt_logits(nnx.merge(gd, p), toks, mask,
                                              jnp.asarray([0, 1, 1]), 2, 5)
    # bfloat16: XLA fuses the loop and the scan differently, so they round differently (the
    # loop jitted and not jitted differ as much: ~0.05 on logits of ~3)
    tol = 2e-5 if dtype == "float32" else 3e-2
    for f in (logits, shared):
        want = jax.jit(f, static_argnums=0)(graphdef, params)
        np.testing.assert_allclose(jax.jit(f, static_argnums=0)(scan_graphdef, params), want,
                                   atol=tol * max(1.0, float(jnp.abs(want).max())))
        if dtype != "float32":
            continue  # bfloat16 gradients round too coarsely to compare leaf by leaf
        w = weight[:, :want.shape[1]]
        g_loop = jax.jit(jax.grad(lambda p: jnp.sum(f(graphdef, p) * w)))(params)
        g_scan = jax.jit(jax.grad(lambda p: jnp.sum(f(scan_graphdef, p) * w)))(params)
        for a, b in zip(jax.tree.leaves(g_scan), jax.tree.leaves(g_loop)):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, atol=tol * max(1.0, float(jnp.abs(b).max())))
    cache = model_lib.init_cache(loop.cfg, 3, 12)
    positions = model_lib.positions_from_mask(mask)
    want, want_cache = jax.jit(lambda p, c: nnx.merge(graphdef, p)(toks, positions, mask, c))(
        params, cache)
    got, got_cache = jax.jit(lambda p, c: nnx.merge(scan_graphdef, p)(
        toks, positions, mask, c, scan=True))(params, cache)
    np.testing.assert_allclose(got, want, atol=tol * max(1.0, float(jnp.abs(want).max())))
    for a, b in zip(jax.tree.leaves(got_cache), jax.tree.leaves(want_cache)):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   atol=tol * max(1.0, float(np.abs(np.asarray(b, np.float32)).max())))


@pytest.mark.parametrize("variant,remat,new", [("base", False, 5), ("qwen_like", True, 5),
                                               ("mha", False, 1)])
def test_shared_prompt_logits_equal_the_whole_rows(variant, remat, new):
    """Each group's prompt run once, its samples continued from the prompt's keys and values:
    the logits at the completion positions and their gradients are the whole rows'. Groups
    of different sizes in shuffled order, left-padded prompts of different lengths, ragged
    completions, and one group with no row (n_groups 4, rows of 3)."""
    model = _randomise_biases(tiny_model(remat=remat, **VARIANTS[variant]))
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(5)
    P, N = 7, new
    group = rng.permutation(np.repeat(np.arange(3), [4, 1, 3]))
    prompt_lens = np.asarray([7, 3, 5])
    prompt_mask = np.arange(P)[None] >= (P - prompt_lens)[:, None]
    prompts = rng.integers(3, 64, (3, P)) * prompt_mask
    done = rng.integers(1, N + 1, len(group))
    completion_mask = np.arange(N)[None] < done[:, None]
    tokens = jnp.asarray(np.concatenate([prompts[group],
                                         rng.integers(3, 64, (len(group), N))], 1))
    mask = jnp.asarray(np.concatenate([prompt_mask[group], completion_mask], 1))
    weight = jnp.asarray(rng.normal(size=(len(group), N, 64)) * completion_mask[..., None],
                         jnp.float32)

    def whole(p):
        return nnx.merge(graphdef, p)(tokens, model_lib.positions_from_mask(mask), mask,
                                      logits_slice=(P - 1, P + N - 1))[0]

    def shared(p):
        return model_lib.shared_prompt_logits(nnx.merge(graphdef, p), tokens, mask,
                                              jnp.asarray(group), 4, P)
    np.testing.assert_allclose(jax.jit(shared)(params), jax.jit(whole)(params), atol=2e-5)
    g_whole = jax.jit(jax.grad(lambda p: jnp.sum(whole(p) * weight)))(params)
    g_shared = jax.jit(jax.grad(lambda p: jnp.sum(shared(p) * weight)))(params)
    for a, b in zip(jax.tree.leaves(g_shared), jax.tree.leaves(g_whole)):
        np.testing.assert_allclose(a, b, atol=2e-5 * max(1.0, float(jnp.abs(b).max())))


@pytest.mark.parametrize("tie,cap", [(True, 0.0), (True, 3.0), (False, 0.0)])
def test_head_logprobs_in_chunks_equal_the_whole_batch(tie, cap, monkeypatch):
    """head_logprobs in chunks (a tied head by vocabulary entries with an online
    log-sum-exp, a separate head a few rows at a time; the logits recomputed per chunk in the
    backward pass) gives the log-probs, entropies and gradients of token_logprobs over the
    whole [B,T,V] logits, with and without logit soft-capping."""
    rng = np.random.default_rng(7)
    toks = jnp.asarray(rng.integers(3, 64, size=(6, 8)))
    mask = jnp.ones((6, 8), bool)
    graphdef, params = nnx.split(_randomise_biases(tiny_model(tie_embeddings=tie,
                                                              final_logit_softcap=cap)))
    weight = jnp.asarray(rng.normal(size=(2, 6, 5)), jnp.float32)

    def loss(p):
        model = nnx.merge(graphdef, p)
        hidden, _ = model(toks, model_lib.positions_from_mask(mask), mask, logits_slice=(2, 7),
                          hidden=True)
        logp, ent = logprobs.head_logprobs(model, hidden, toks[:, 3:], temperature=0.7)
        return jnp.sum(logp * weight[0] + ent * weight[1]), (logp, ent)

    def whole(p):
        logits, _ = nnx.merge(graphdef, p)(toks, model_lib.positions_from_mask(mask), mask,
                                           logits_slice=(2, 7))
        logp, ent = logprobs.token_logprobs(logits, toks[:, 3:], temperature=0.7)
        return jnp.sum(logp * weight[0] + ent * weight[1]), (logp, ent)

    (want, (want_logp, want_ent)), want_g = jax.jit(jax.value_and_grad(whole, has_aux=True))(
        params)
    V = tiny_model().cfg.vocab_size
    row_bytes = 5 * V * 4
    # rows that fit in HEAD_CHUNK_BYTES -> chunks. Rows: all 6 at once; 2 a chunk; 4 fit, so 3
    # a chunk (the largest divisor of 6). Vocabulary (the 30 positions at once): fit 2 -> at
    # most V/3 entries -> V/4 a chunk; fit 4 -> V/2; below MIN_VOCAB_CHUNK, by rows.
    cases = [(6, 1, 0), (2, 3, 0), (4, 2, 0)]
    if tie:
        cases = [(6, 1, 1), (2, 4, 1), (4, 2, 1), (2, 3, V)]
    for fit, chunks, min_chunk in cases:
        monkeypatch.setattr(logprobs, "HEAD_CHUNK_BYTES", fit * row_bytes)
        monkeypatch.setattr(logprobs, "MIN_VOCAB_CHUNK", min_chunk)
        (got, (logp, ent)), g = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        scan = jax.make_jaxpr(lambda p: loss(p)[1])(params).jaxpr.eqns
        lengths = [e.params["length"] for e in scan if e.primitive.name == "scan"]
        assert lengths == ([] if chunks == 1 else [chunks]), (fit, lengths)
        np.testing.assert_allclose(logp, want_logp, atol=1e-5)
        np.testing.assert_allclose(ent, want_ent, atol=1e-5)
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(want_g)):
            np.testing.assert_allclose(a, b, atol=1e-5 * max(1.0, float(jnp.abs(b).max())))


def test_bfloat16_compute_is_close_to_float32():
    rng = np.random.default_rng(3)
    toks = rng.integers(3, 64, size=(2, 8))
    mask = np.ones_like(toks, bool)
    f32 = _full_logits(tiny_model(), toks, mask)
    bf16 = _full_logits(tiny_model(dtype="bfloat16"), toks, mask)
    assert bf16.dtype == np.float32  # logits always come back in float32
    assert np.abs(f32 - bf16).max() < 0.1 * np.abs(f32).max()
    params = nnx.state(tiny_model(param_dtype="bfloat16", dtype="bfloat16"))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params))


@pytest.mark.parametrize("truncate, beta_fast, beta_slow", [
    (True, 32.0, 1.0), (False, 32.0, 1.0), (True, 8.0, 0.5)])
def test_yarn_frequencies_and_attention_factor_match_transformers(truncate, beta_fast,
                                                                   beta_slow):
    """YaRN's inverse frequencies (original above the ramp, interpolated below it, blended on
    it) equal transformers' `_compute_yarn_parameters`, and convert reads its attention factor
    (from mscale / mscale_all_dim here) as transformers computes it; the queries' scale is
    its square on the global layers only."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import _compute_yarn_parameters
    from ada_jax import convert
    scaling = dict(rope_type="yarn", factor=40.0, original_max_position_embeddings=4096,
                   beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate, mscale=1.0,
                   mscale_all_dim=0.8)
    hf = dict(model_type="qwen3", vocab_size=8, hidden_size=256, intermediate_size=8,
              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
              rope_theta=1e6, max_position_embeddings=163840, rope_scaling=scaling)
    cfg = convert.model_config_from_hf(hf)
    assert (cfg.rope_scaling, cfg.rope_original_max_len, cfg.yarn_truncate) == (
        "yarn", 4096, truncate)
    want_inv, want_factor = _compute_yarn_parameters(transformers.Qwen3Config(**hf))
    np.testing.assert_allclose(np.asarray(model_lib.rope_frequencies(cfg)), want_inv.numpy(),
                               rtol=2e-6)
    assert cfg.yarn_attention_factor == pytest.approx(want_factor, rel=1e-12)
    assert model_lib.query_scale(cfg) == pytest.approx(want_factor ** 2)
    assert model_lib.query_scale(cfg, local=True) == 1.0


def test_llama3_rope_scaling_matches_reference_formula():
    cfg = model_lib.ModelConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=1, n_kv_heads=1,
                                d_ff=8, head_dim=64, rope_base=500_000.0, rope_scaling="llama3",
                                rope_scaling_factor=32.0, rope_original_max_len=8192)
    got = np.asarray(model_lib.rope_frequencies(cfg))
    inv = 1.0 / 500_000.0 ** (np.arange(0, 64, 2) / 64)
    want = []
    for f in inv:  # Meta's reference loop (llama3.1 apply_scaling)
        wavelen = 2 * np.pi / f
        if wavelen < 8192 / 4.0:
            want.append(f)
        elif wavelen > 8192 / 1.0:
            want.append(f / 32.0)
        else:
            s = (8192 / wavelen - 1.0) / (4.0 - 1.0)
            want.append((1 - s) * f / 32.0 + s * f)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_layer_weights_are_stored_stacked_layer_by_layer():
    """Every block weight is one [L, …] array with "layers" first in its logical axes, and
    slice i runs as layer i: the loop over the slices equals calling each layer's Block."""
    model = tiny_model(n_layers=3, qkv_bias=True)
    graphdef, state = nnx.split(model.blocks)
    for var in jax.tree.leaves(state, is_leaf=lambda v: isinstance(v, nnx.Variable)):
        assert var.get_value().shape[0] == 3
        assert var.get_metadata()["logical_axes"][0] == "layers"
        assert len(var.get_metadata()["logical_axes"]) == var.get_value().ndim
    toks = jnp.asarray(np.random.default_rng(0).integers(3, 64, size=(2, 6)))
    mask = jnp.ones((2, 6), bool)
    positions = model_lib.positions_from_mask(mask)
    x = model.embed[...][toks]
    kv_mask = jnp.tril(jnp.ones((6, 6), bool))[None] & mask[:, None, :]
    rope = (model_lib.rope_frequencies(model.cfg), jnp.float32(1.0))
    for i in range(3):
        block = nnx.merge(graphdef, jax.tree.map(lambda w: w[i], state))
        x, _ = block(x, positions, rope, kv_mask, None)
    want = model.head(model.final_norm(x))
    got, _ = model(toks, positions, mask)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_auto_compute_dtype_is_float32_on_a_cpu_and_bfloat16_elsewhere():
    assert model_lib.compute_dtype("auto", "cpu") == "float32"
    assert model_lib.compute_dtype("auto", "gpu") == "bfloat16"
    assert model_lib.compute_dtype("auto", "tpu") == "bfloat16"
    assert model_lib.compute_dtype("bfloat16", "cpu") == "bfloat16"  # an explicit one stays
    assert tiny_model(dtype="auto").cfg.dtype == model_lib.compute_dtype("auto")
