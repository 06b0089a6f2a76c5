"""One process of the multi-host test (tests/test_multihost.py), CPU backend.

  XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu PYTHONPATH=. \
  python tests/multihost_worker.py --process_id=0 --num_processes=2 --port=PORT --out=FILE

Joins the run through `sharding.maybe_initialize_distributed`, builds the tiny model sharded
over the global (data=2, fsdp=2, tensor=2) mesh, runs one train step (loss, grads, Adam) and one
sampler call, and saves the fully gathered results. With --num_processes=1 (and 8 devices) it
is the single-process reference.
"""
import argparse

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.experimental import multihost_utils

from ada_jax import model as model_lib
from ada_jax import sharding
from ada_jax.sampling import SamplingConfig, sample
from configs import base
from tests.helpers import TINY

RULES = base.get_config("").sharding_rules


def _global(x, mesh):
    """A host numpy batch (identical on every process) as a global batch-sharded array."""
    s = sharding.batch_sharding(mesh, RULES, x.shape)
    return jax.make_array_from_callback(x.shape, s, lambda idx: x[idx])


def _gather(x):
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def run() -> dict:
    mesh = sharding.make_mesh(dict(data=2, fsdp=2, tensor=2))
    graphdef, params = sharding.init_sharded(
        lambda: model_lib.Transformer(TINY, nnx.Rngs(0)), mesh, RULES)
    rng = np.random.default_rng(0)
    toks = rng.integers(3, TINY.vocab_size, size=(8, 12)).astype(np.int32)
    mask = np.ones_like(toks, bool)
    mask[:3, :4] = False  # left padding
    toks_g, mask_g = _global(toks, mesh), _global(mask, mesh)
    pshard = sharding.state_shardings(params, mesh, RULES)
    opt = optax.adam(1e-2)

    def loss_fn(p, toks, mask):
        logits, _ = nnx.merge(graphdef, p)(toks, model_lib.positions_from_mask(mask), mask)
        logp, _ = model_lib.token_logprobs(logits[:, :-1], toks[:, 1:])
        return -jnp.sum(logp * mask[:, 1:]) / jnp.sum(mask[:, 1:])

    def step(params, opt_state, toks, mask):
        with sharding.activate(mesh, RULES):
            loss, grads = jax.value_and_grad(loss_fn)(params, toks, mask)
        updates, opt_state = opt.update(grads, opt_state, params)
        checksum = sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(grads))
        return optax.apply_updates(params, updates), loss, checksum

    step = jax.jit(step, out_shardings=(pshard, None, None))
    params, loss, grad_checksum = step(params, opt.init(params), toks_g, mask_g)
    out = sample(graphdef, params, toks_g, mask_g, jax.random.key(1),
                 cfg=SamplingConfig(max_new_tokens=8, eos_id=5, temperature=1.0))
    return dict(loss=_gather(loss), grad_checksum=_gather(grad_checksum),
                params=np.concatenate([_gather(x).ravel() for x in jax.tree.leaves(params)]),
                tokens=_gather(out.tokens_BN), logp=_gather(out.logp_BN),
                devices=np.int32(jax.device_count()), local=np.int32(jax.local_device_count()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--process_id", type=int, required=True)
    parser.add_argument("--num_processes", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    jax.config.update("jax_default_matmul_precision", "highest")
    sharding.maybe_initialize_distributed(ml_collections.ConfigDict(dict(
        enabled=args.num_processes > 1, coordinator_address=f"localhost:{args.port}",
        num_processes=args.num_processes, process_id=args.process_id)))
    np.savez(args.out, **run())
    multihost_utils.sync_global_devices("done")  # nobody exits while others still gather


if __name__ == "__main__":
    main()
