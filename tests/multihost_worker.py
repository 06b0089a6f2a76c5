"""One process of the multi-process tests (tests/test_multihost.py), CPU backend, started by
scripts/launch_local.sh, which gives it the environment `srun` would:

  JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=4 PYTHONPATH=. \
  scripts/launch_local.sh 2 python tests/multihost_worker.py step --out=DIR

Each process joins through `sharding.maybe_initialize_distributed` (enabled, no coordinator
address: jax.distributed's own SLURM auto-detection) and writes DIR/process_<i>.*.

step: the tiny model sharded over the global (data=1, fsdp=4, tensor=2) mesh, one train step
  (loss, grads, Adam) and one sampler call on a batch every process builds alike; the fully
  gathered results go to process_<i>.npz.
train: `train.train_and_evaluate` on the sums in tests/data/arith (Ada-Seq-balance, the real
  math verifier pool, --source jsonl / parquet / tfds = the same problems as JSONL, Parquet
  or a TFDS array_record dataset; --algo and --overrides for the other policies). Recorded
  per process in process_<i>.json, per step: the ids of each prompt batch this process drew
  (its block), the (prompt, sample) pairs its verifier pool scored, and the whole kept batch
  (gathered); at the end the pool's n_scored; process 0 also writes the params after each
  step (params.npz, step_<k>).
"""
import argparse
import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from ada_jax import collect, learn, sharding, train
from ada_jax.checkpoint import Checkpointer
from ada_jax import model as model_lib
from ada_jax import logprobs
from ada_jax.policies import rollout
from ada_jax.sampling import SamplingConfig, sample
from ada_jax.tasks import PromptIterator
from configs import base
from tests.helpers import TINY, set_field

RULES = base.get_config("task=embedded").sharding_rules
MESH = dict(data=1, fsdp=4, tensor=2)
ARITH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "arith", "arith_sample")


def _global(x, mesh):
    """A host numpy batch (identical on every process) as a global batch-sharded array."""
    s = sharding.batch_sharding(mesh, RULES, x.shape)
    return jax.make_array_from_callback(x.shape, s, lambda idx: x[idx])


def run_step() -> dict:
    mesh = sharding.make_mesh(MESH)
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
        logp, _ = logprobs.token_logprobs(logits[:, :-1], toks[:, 1:])
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
    return dict(loss=sharding.to_host(loss), grad_checksum=sharding.to_host(grad_checksum),
                params=_flat_params(params), tokens=sharding.to_host(out.tokens_BN),
                logp=sharding.to_host(out.logp_BN), devices=np.int32(jax.device_count()),
                local=np.int32(jax.local_device_count()), **per_host(mesh))


def per_host(mesh) -> dict:
    """The per-host primitives: this process's rows of an 8-row batch, that batch assembled
    from every process's rows, host_rows over 16 slots (which rows this process computed on,
    and the assembled result), and a gathered JSON object."""
    start, stop = sharding.process_rows(mesh, RULES, 8)
    local = np.arange(start, stop, dtype=np.int32)[:, None] * np.ones((1, 3), np.int32)
    batch = sharding.global_batch(mesh, RULES, local)
    seen = []

    def fn(ids, values):
        seen.extend(ids.tolist())
        return ids * 10.0 + values[:, 0]

    everywhere = NamedSharding(mesh, PartitionSpec())  # as engine slots may come out
    slots = jax.device_put(np.arange(16, dtype=np.int32), everywhere)
    values = jax.device_put(np.arange(32, dtype=np.int32).reshape(16, 2) % 3, everywhere)
    out = sharding.host_rows(fn, slots, values)
    return dict(rows=np.int32([start, stop]), batch=sharding.to_host(batch),
                host_rows_seen=np.int32(seen), host_rows_out=sharding.to_host(out),
                gathered=np.int32(sharding.allgather_json(jax.process_index())),
                errors=np.asarray([_refused(mesh, {"rl.prompts_per_step": 6}),
                                   _refused(mesh, {"adaptive.slots": 12})]),
                accepted=np.asarray([_refused(mesh, changes) for changes in ACCEPTED]))


# Nothing that runs on one process is refused on several.
ACCEPTED = ({"adaptive.policy": "dapo"}, {"adaptive.policy": "gvm"}, {"adaptive.mode": "stream"},
            {"rl.hints": "sage"}, {"rl.hints": "sage_light"})


def _refused(mesh, changes: dict) -> str:
    """train.check_multihost's error for a config with `changes` ("" if none)."""
    c = train_config("jsonl", 1, "", "", overrides=changes)
    try:
        train.check_multihost(c, mesh)
    except ValueError as e:
        return str(e)
    return ""


def _flat_params(tree) -> np.ndarray:
    return np.concatenate([sharding.to_host(x).ravel() for x in jax.tree.leaves(tree)])


def train_config(source: str, steps: int, base_dir: str, data_dir: str,
                 algo: str = "ada_balance", overrides: dict | None = None):
    """Ada-Seq-balance (or `algo`) on the 16 training sums: 8 prompts per step (one block per
    process), up to 4 samples each, 16 slots, a short SFT into the shared base_dir (made
    once); then `overrides` ({"section.field": value}, e.g. adaptive.mode=stream)."""
    c = base.get_config(f"algo={algo},task=" + ("tfds_files" if source == "tfds" else "files"))
    with c.unlocked():
        c.task.files = ARITH + (".parquet" if source == "parquet" else ".jsonl")
        c.task.data_dir = data_dir
        c.task.verifier_workers = 1
        c.sampling.update(max_prompt_len=24, max_new_tokens=8)
        c.rl.update(steps=steps, prompts_per_step=8, n=2, minibatches=2)
        c.adaptive.update(k_pos=1, k_neg=1, samples_per_round=4, max_rounds=1, slots=16)
        c.adaptive.est.budget_per_prompt = 4
        c.sft.update(steps=15, batch_size=16, base_dir=base_dir)
        c.eval.update(every=2, prompts=4, k=2)
        c.checkpoint.update(every=1, keep=5)
        c.log.progress = False
        c.mesh.update(MESH)
        c.distributed.enabled = True
        for dotted, value in (overrides or {}).items():
            set_field(c, dotted, value)
    return c


class Preempted(Exception):
    """Raised on every process right after the same checkpoint (--stop_after)."""


def run_train(args) -> None:
    """train_and_evaluate with recorders around collect (problems read, kept batch), the host
    scorer (pairs scored) and the learner (final params)."""
    rec = {"drawn": [], "scored": [], "kept": []}
    pools, params = [], {}
    make_pool, host_score, collect_fn, learn_fn = (rollout.math_pool, rollout.host_score,
                                                   collect.collect, learn.learn)
    next_fn, collecting = PromptIterator.__next__, [None]

    def math_pool(config):
        pools.append(make_pool(config))
        return pools[-1]

    def recording_score(ctx, answers):
        score = host_score(ctx, answers)

        def scored(prompt_S, seq_S, tokens_SN, len_S):
            rec["scored"][-1] += [[int(p), int(s)] for p, s in zip(prompt_S, seq_S)]
            return score(prompt_S, seq_S, tokens_SN, len_S)
        return scored

    def recording_next(iterator):
        problems = next_fn(iterator)
        if iterator is collecting[0]:  # not SFT's iterator
            rec["drawn"][-1].append([p.id for p in problems])
        return problems

    def recording_collect(ctx, params, iterator, key, state):
        rec["scored"].append([])
        rec["drawn"].append([])
        collecting[0] = iterator
        out = collect_fn(ctx, params, iterator, key, state)
        batch = out.batch
        rec["kept"].append({k: sharding.to_host(getattr(batch, k)).tolist() for k in (
            "tokens_BGN", "len_BG", "mask_BG", "reward_BG", "pool_n_B", "pool_pos_B")})
        return out

    def recording_learn(ctx, train_step, trainable, opt_state, rows, step, *rest, **kw):
        out = learn_fn(ctx, train_step, trainable, opt_state, rows, step, *rest, **kw)
        params[f"step_{step + 1}"] = _flat_params(out[0])  # collective: every process gathers
        return out

    rollout.math_pool, rollout.host_score = math_pool, recording_score
    collect.collect, learn.learn = recording_collect, recording_learn
    PromptIterator.__next__ = recording_next
    save_fn = Checkpointer.save

    def save_then_stop(ckpt, step, *a, **kw):  # a preemption right after checkpoint `step`
        save_fn(ckpt, step, *a, **kw)
        if step == args.stop_after:
            raise Preempted
    Checkpointer.save = save_then_stop
    config = train_config(args.source, args.steps, args.base, args.data_dir, args.algo,
                          json.loads(args.overrides))
    try:
        train.train_and_evaluate(config, args.workdir)
    except Preempted:
        pass
    rec["pool_scored"] = pools[0].n_scored
    rec["process"], rec["processes"] = jax.process_index(), jax.process_count()
    with open(os.path.join(args.out, f"process_{jax.process_index()}.json"), "w") as f:
        json.dump(rec, f)
    if jax.process_index() == 0:
        np.savez(os.path.join(args.out, "params.npz"), **params)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("step", "train"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--workdir", default="")
    parser.add_argument("--source", choices=("jsonl", "parquet", "tfds"), default="jsonl")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--base", default="")
    parser.add_argument("--data_dir", default="")
    parser.add_argument("--algo", default="ada_balance")
    parser.add_argument("--overrides", default="{}", help="JSON {section.field: value}")
    parser.add_argument("--stop_after", type=int, default=-1,
                        help="stop as if preempted right after saving this step")
    args = parser.parse_args()
    jax.config.update("jax_default_matmul_precision", "highest")
    sharding.maybe_initialize_distributed(ml_collections.ConfigDict(dict(  # as train.setup
        enabled=True, coordinator_address="", num_processes=1, process_id=0)))
    os.makedirs(args.out, exist_ok=True)
    if args.mode == "step":
        np.savez(os.path.join(args.out, f"process_{jax.process_index()}.npz"), **run_step())
    else:
        run_train(args)
    multihost_utils.sync_global_devices("done")  # nobody exits while others still gather


if __name__ == "__main__":
    main()
