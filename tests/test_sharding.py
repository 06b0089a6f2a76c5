"""Mesh sharding: a 2x2x2 (data, fsdp, tensor) mesh reproduces one device's logits and grads."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec

from ada_jax import logprobs
from ada_jax import model as model_lib
from ada_jax import sampling
from ada_jax import sharding
from configs import base
from tests.helpers import TINY

RULES = base.get_config("task=embedded").sharding_rules


def _loss(graphdef, params, toks, mask):
    logits, _ = nnx.merge(graphdef, params)(toks, model_lib.positions_from_mask(mask), mask)
    logp, _ = logprobs.token_logprobs(logits[:, :-1], toks[:, 1:])
    return -jnp.sum(logp * mask[:, 1:]) / jnp.sum(mask[:, 1:]), logits


def _step_on(mesh):
    graphdef, params = sharding.init_sharded(lambda: model_lib.Transformer(TINY, nnx.Rngs(0)),
                                             mesh, RULES)
    rng = np.random.default_rng(0)
    toks = rng.integers(3, 64, size=(8, 12)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    mask[:3, :4] = False  # left padding in some rows
    bs = sharding.batch_sharding(mesh, RULES, toks.shape)
    toks, mask = jax.device_put(toks, bs), jax.device_put(mask, bs)
    pshard = sharding.state_shardings(params, mesh, RULES)
    opt = optax.adam(1e-3)

    @jax.jit
    def step(params, opt_state, toks, mask):
        with sharding.activate(mesh, RULES):
            (loss, logits), grads = jax.value_and_grad(
                lambda p: _loss(graphdef, p, toks, mask), has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, logits, grads

    step = jax.jit(step.__wrapped__, in_shardings=(pshard, None, bs, bs),
                   out_shardings=(pshard, None, None, None, pshard), donate_argnums=(0,))
    new_params, _, loss, logits, grads = step(params, opt.init(params), toks, mask)
    return new_params, loss, logits, grads


def test_mesh_2x2x2_matches_single_device():
    mesh8 = sharding.make_mesh(dict(data=2, fsdp=2, tensor=2))
    mesh1 = sharding.make_mesh(dict(data=1, fsdp=1, tensor=1), devices=jax.devices()[:1])
    p8, loss8, logits8, g8 = _step_on(mesh8)
    p1, loss1, logits1, g1 = _step_on(mesh1)
    np.testing.assert_allclose(loss8, loss1, rtol=1e-5)
    np.testing.assert_allclose(logits8, logits1, atol=1e-4)
    for a, b in zip(jax.tree.leaves(g8), jax.tree.leaves(g1)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    for a, b in zip(jax.tree.leaves(p8), jax.tree.leaves(p1)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # Params really are distributed: the q projection is split over fsdp and tensor.
    q = p8["blocks"]["attn"]["q"][...]
    assert q.sharding.spec == PartitionSpec(None, "fsdp", "tensor", None)
    assert q.addressable_shards[0].data.shape == (TINY.n_layers, TINY.d_model // 2,
                                                  TINY.n_heads // 2, TINY.head_dim)


def test_logical_spec_falls_back_to_replication():
    mesh = sharding.make_mesh(dict(data=2, fsdp=2, tensor=2))
    # kv_heads=3 is not divisible by tensor=2 -> replicated; fsdp is used once only.
    spec = sharding.logical_spec((16, 3, 8), ("embed", "kv_heads", "head_dim"), RULES, mesh)
    assert spec == PartitionSpec("fsdp", None, None)
    spec = sharding.logical_spec((8, 5, 16), ("batch", "length", "embed"), RULES, mesh)
    assert spec == PartitionSpec(("data", "fsdp"), None, None)


def test_bad_mesh_is_rejected():
    with pytest.raises(ValueError, match="needs 12 devices"):
        sharding.make_mesh(dict(data=3, fsdp=2, tensor=2))
    with pytest.raises(ValueError, match="not divisible"):
        sharding.make_mesh(dict(data=3, fsdp=-1, tensor=1))


def test_tied_head_by_vocabulary_chunks_on_the_mesh_matches_single_device(monkeypatch):
    """logprobs.tied_head_logprobs (the embedding's rows in chunks, sharded over "tensor" within
    each chunk) gives one device's log-probs, entropies and gradients on the 2x2x2 mesh."""
    monkeypatch.setattr(logprobs, "HEAD_CHUNK_BYTES", 8 * 11 * 16 * 4)  # 4 chunks of 16
    monkeypatch.setattr(logprobs, "MIN_VOCAB_CHUNK", 1)
    rng = np.random.default_rng(1)
    toks = rng.integers(3, 64, size=(8, 12)).astype(np.int32)
    mask = np.ones_like(toks, bool)

    def run(mesh):
        graphdef, params = sharding.init_sharded(
            lambda: model_lib.Transformer(TINY, nnx.Rngs(0)), mesh, RULES)
        bs = sharding.batch_sharding(mesh, RULES, toks.shape)
        t, m = jax.device_put(toks, bs), jax.device_put(mask, bs)

        def loss(p):
            model = nnx.merge(graphdef, p)
            hidden, _ = model(t, model_lib.positions_from_mask(m), m, logits_slice=(0, 11),
                              hidden=True)
            logp, ent = logprobs.head_logprobs(model, hidden, t[:, 1:])
            return jnp.sum(logp) + 0.5 * jnp.sum(ent), (logp, ent)

        def step(p):
            with sharding.activate(mesh, RULES):
                return jax.value_and_grad(loss, has_aux=True)(p)
        jaxpr = jax.make_jaxpr(lambda p: loss(p)[1])(params).jaxpr.eqns
        assert [e.params["length"] for e in jaxpr if e.primitive.name == "scan"] == [4]
        return jax.device_get(jax.jit(step)(params))

    (l8, (logp8, ent8)), g8 = run(sharding.make_mesh(dict(data=2, fsdp=2, tensor=2)))
    (l1, (logp1, ent1)), g1 = run(sharding.make_mesh(dict(data=1, fsdp=1, tensor=1),
                                                     devices=jax.devices()[:1]))
    np.testing.assert_allclose(logp8, logp1, atol=1e-5)
    np.testing.assert_allclose(ent8, ent1, atol=1e-5)
    for a, b in zip(jax.tree.leaves(g8), jax.tree.leaves(g1)):
        np.testing.assert_allclose(a, b, atol=1e-5 * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("draw", sampling.DRAWS)
def test_sampler_on_the_mesh_draws_the_single_devices_tokens(draw):
    """Rows over data x fsdp and the vocabulary's logits over tensor: each token draw takes the
    same tokens as on one device (the inverse-CDF draw's block sums and gather cross shards)."""
    cfg = sampling.SamplingConfig(max_new_tokens=10, eos_id=-1, draw=draw)
    toks = np.random.default_rng(0).integers(3, 64, size=(8, 6)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    out = []
    for mesh in (sharding.make_mesh(dict(data=2, fsdp=2, tensor=2)),
                 sharding.make_mesh(dict(data=1, fsdp=1, tensor=1), devices=jax.devices()[:1])):
        graphdef, params = sharding.init_sharded(
            lambda: model_lib.Transformer(TINY, nnx.Rngs(0)), mesh, RULES)
        bs = sharding.batch_sharding(mesh, RULES, toks.shape)
        with sharding.activate(mesh, RULES):
            out.append(sampling.sample(graphdef, params, jax.device_put(toks, bs),
                                       jax.device_put(mask, bs), jax.random.key(3), cfg=cfg))
    np.testing.assert_array_equal(out[0].tokens_BN, out[1].tokens_BN)
    np.testing.assert_allclose(out[0].logp_BN, out[1].logp_BN, atol=1e-5)
