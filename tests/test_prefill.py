"""Sampler memory and stop tokens: logits only where asked, chunked prefill equals one-shot
prefill (also with remat, and with rows sharded over the mesh), several EOS ids."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ada_jax import model as model_lib
from ada_jax import sampling, sharding
from configs import base
from tests.helpers import tiny_model

PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13], [4], [3, 3], [7, 8, 9, 10], [20, 21], [8], [1, 2, 3]]


def _batch(n=5, length=6):
    toks, mask = sampling.left_pad(PROMPTS[:n], length)
    return jnp.asarray(toks), jnp.asarray(mask)


def test_logits_at_positions_equal_those_of_the_full_forward():
    model = tiny_model(0)
    toks, mask = _batch()
    pos = model_lib.positions_from_mask(mask)
    full, _ = model(toks, pos, mask)
    at = jnp.asarray([[5, 0], [2, 5], [5, 5], [4, 1], [3, 5]])
    got, _ = model(toks, pos, mask, logits_at_BU=at)
    assert got.shape == (5, 2, model.cfg.vocab_size)
    np.testing.assert_allclose(got, jnp.take_along_axis(full, at[:, :, None], axis=1),
                               atol=1e-5)


@pytest.mark.parametrize("remat", [False, True])
def test_chunked_prefill_equals_one_shot(remat):
    graphdef, params = nnx.split(tiny_model(0, remat=remat))
    toks, mask = _batch()

    @jax.jit
    def run(params):
        model = nnx.merge(graphdef, params)
        return [sampling.prefill(model, toks, mask, 10, chunk) for chunk in (0, 1, 2, 3)]

    ref, *chunked = run(params)
    full, _ = nnx.merge(graphdef, params)(toks, model_lib.positions_from_mask(mask), mask)
    np.testing.assert_allclose(ref[0], full[:, -1], atol=1e-5)
    for out in chunked:  # 5 rows in chunks of 1, 2 (padded to 6) and 3 (padded to 6)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), out, ref)


def test_chunked_prefill_with_rows_sharded_over_the_mesh():
    rules = base.get_config("task=embedded").sharding_rules
    mesh = sharding.make_mesh(dict(data=2, fsdp=2, tensor=2))
    cfg = model_lib.ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                d_ff=64, head_dim=8, max_len=64)
    graphdef, params = sharding.init_sharded(lambda: model_lib.Transformer(cfg, nnx.Rngs(0)),
                                             mesh, rules)
    toks, mask = _batch(8)

    def run(chunk):
        with sharding.activate(mesh, rules):
            return jax.jit(lambda p: sampling.prefill(nnx.merge(graphdef, p), toks, mask, 12,
                                                      chunk))(params)

    ref = run(0)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), run(4), ref)


def test_sample_with_prefill_chunks_and_remat_equals_plain_sample():
    toks, mask = _batch()
    cfg = sampling.SamplingConfig(max_new_tokens=6, eos_id=-1)
    outs = []
    for remat, chunk in ((False, 0), (True, 2)):
        graphdef, params = nnx.split(tiny_model(0, remat=remat))
        c = sampling.SamplingConfig(max_new_tokens=6, eos_id=-1, prefill_chunk=chunk)
        outs.append(sampling.sample(graphdef, params, toks, mask, jax.random.key(1), cfg=c))
    np.testing.assert_array_equal(outs[0].tokens_BN, outs[1].tokens_BN)
    np.testing.assert_allclose(outs[0].logp_BN, outs[1].logp_BN, atol=1e-5)
    assert cfg.eos_ids == (-1,)


def test_remat_is_a_checkpoint_in_the_learner_only():
    graphdef, params = nnx.split(tiny_model(0, remat=True))
    toks, mask = _batch()
    pos = model_lib.positions_from_mask(mask)

    def loss(p):
        return jnp.mean(nnx.merge(graphdef, p)(toks, pos, mask)[0])
    assert "remat" in str(jax.make_jaxpr(jax.grad(loss))(params))  # jax.checkpoint
    decode = jax.make_jaxpr(lambda p: sampling.prefill(nnx.merge(graphdef, p), toks, mask, 8))
    assert "remat" not in str(decode(params))


def test_any_of_several_eos_ids_stops_a_row():
    graphdef, params = nnx.split(tiny_model(0))
    toks, mask = _batch(3)
    greedy = sampling.SamplingConfig(max_new_tokens=12, eos_id=-1, temperature=0.0)
    ref = np.asarray(sampling.sample(graphdef, params, toks, mask, jax.random.key(0),
                                     cfg=greedy).tokens_BN)
    a, b = int(ref[0, 2]), int(ref[1, 4])  # row 0 emits a at step 2, row 1 emits b at step 4
    cfg = sampling.SamplingConfig(max_new_tokens=12, eos_id=a, extra_eos_ids=(b,),
                                  temperature=0.0)
    assert cfg.eos_ids == (a, b)
    out = sampling.sample(graphdef, params, toks, mask, jax.random.key(0), cfg=cfg)
    for row in range(3):
        hits = np.flatnonzero(np.isin(ref[row], [a, b]))
        want = hits[0] + 1 if len(hits) else 12
        assert int(out.lengths_B[row]) == want
        np.testing.assert_array_equal(out.tokens_BN[row, :want], ref[row, :want])
    np.testing.assert_array_equal(sampling.is_eos(jnp.asarray([a, b, -5]), cfg.eos_ids),
                                  [True, True, a == -5 or b == -5])
