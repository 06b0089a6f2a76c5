"""Supervised fine-tuning (SFT): trains a model into the base policy RL starts from.

Trains on (prompt, reference solution, EOS) pairs of the train split (`sft_task`'s), loss on
the target tokens only, and saves the result with orbax in the directory it is given;
ada_jax/base_policy.py chooses that directory (the cache of SFT bases, sft.base_dir, a
workdir's own base) and runs SFT only when no base is there. `Replay` replays the same corpus
inside RL updates (loss.replay_coef).

SFT checkpoints its progress like RL (params, optimizer, data position and target RNG every
sft.checkpoint_every steps, default a tenth of the run, in `<base dir>/progress`), so a killed
SFT resumes where it stopped, bitwise equal to an uninterrupted one; the progress goes once
the base is saved.
"""
import functools
import logging
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ada_jax import model as model_lib

from ada_jax import logprobs
from ada_jax import sharding
from ada_jax.checkpoint import CheckpointMismatch, Checkpointer, abstract_like
from ada_jax.tasks import PromptIterator, families, is_embedded, load_split
from ada_jax.tasks.embedded import hasty_solution
from ada_jax.tokenizer import encode_prompt

log = logging.getLogger(__name__)

VERSION = 1  # part of the SFT base's cache key: bump when this module changes what a config trains


def sft_rows(tokenizer, problems, template: str, length: int, bucket: int = 32, targets=None):
    """Tokens [B, L] (prompt then target then EOS, left-aligned), input mask and the loss mask
    over the target tokens; L is the batch's longest row rounded up to `bucket` (capped at
    `length`), so few shapes compile and short batches cost less. The targets are the
    problems' solutions unless `targets` (one text per problem) says otherwise."""
    rows = []
    for b, p in enumerate(problems):
        prompt = encode_prompt(tokenizer, p.question, template)
        target = p.solution if targets is None else targets[b]
        rows.append((prompt, tokenizer.encode(target) + [tokenizer.eos_id]))
    longest = max(len(a) + len(b) for a, b in rows)
    length = min(length, -(-longest // bucket) * bucket)
    toks = np.full((len(problems), length), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(problems), length), bool)
    loss = np.zeros((len(problems), length), bool)
    for i, (prompt, answer) in enumerate(rows):
        seq = (prompt + answer)[:length]
        toks[i, :len(seq)] = seq
        mask[i, :len(seq)] = True
        loss[i, len(prompt):len(seq)] = True
    return toks, mask, loss


def sft_targets(config, problems, rng: np.random.Generator):
    """The SFT targets of a batch, or None for the problems' solutions: the embedded task mixes
    the worked solution (share sft.careful_share) with the one-shot `\\boxed{answer}`; the
    family task writes each family's right reading with its share c_k, else the other."""
    if is_embedded(config):
        careful = rng.random(len(problems)) < config.sft.careful_share
        return [p.solution if c else hasty_solution(p) for p, c in zip(problems, careful)]
    if config.task.name == "families":
        return [families.sft_target(p, u) for p, u in zip(problems, rng.random(len(problems)))]
    return None


def sft_task(config):
    """The config whose train split SFT reads: the embedded task's levels up to
    sft.max_level only. Levels above it stay in RL and eval as problems the base was never
    shown: training on their unlearnable targets would drown the one-digit facts the
    careful style needs (docs/results.md)."""
    t = config.task
    if t.name == "families":  # SFT teaches every family, the transfer controls too
        cfg = config.copy_and_resolve_references()
        with cfg.unlocked():
            cfg.task.family_set = "every"
        return cfg
    if not is_embedded(config) or not config.sft.max_level:
        return config
    cfg = config.copy_and_resolve_references()
    with cfg.unlocked():
        cfg.task.max_level = max(min(t.max_level, config.sft.max_level), t.min_level)
    return cfg


class Replay:
    """The base's SFT corpus replayed inside RL updates (loss.replay_coef > 0): a next-token
    loss on SFT rows (sft_task's train split, sft_targets' targets), every target token but
    the first loss.replay_skip ones: the field's pretraining mix (InstructGPT's PPO-ptx)
    against what RL's updates wear away in shared weights. Skipping the first tokens keeps
    the corpus's choices out of it (the family task's reading marker, whose SFT share c_k RL
    is meant to move): replay trains how a response is written, not which one is chosen. On
    the family task it holds the lines every family writes, the transfer controls' too
    (docs/results.md, "Without replay: line-collapse episodes"). Deterministic from the seed; `state()` goes
    into checkpoints."""

    def __init__(self, config, tokenizer):
        self.config, self.tokenizer = config, tokenizer
        self.length = config.sampling.max_prompt_len + config.sampling.max_new_tokens
        self.iterator = PromptIterator(load_split(sft_task(config), "train"),
                                       config.loss.replay_rows, seed=config.seed + 3)
        self.target_rng = np.random.default_rng(config.seed + 4)

    def rows(self, updates: int) -> dict:
        """`updates` batches of loss.replay_rows rows, stacked: tokens, mask and loss_mask
        [updates, rows, L] (L: the longest row rounded up to 32, one length for all)."""
        problems = [p for _ in range(updates) for p in next(self.iterator)]
        toks, mask, loss = sft_rows(self.tokenizer, problems, self.config.task.template,
                                    self.length, targets=sft_targets(self.config, problems,
                                                                     self.target_rng))
        loss &= np.cumsum(loss, axis=1) > self.config.loss.replay_skip
        shape = (updates, self.config.loss.replay_rows, -1)
        return {"tokens": toks.reshape(shape), "mask": mask.reshape(shape),
                "loss_mask": loss.reshape(shape)}

    def state(self) -> dict:
        return {"iterator": self.iterator.state(),
                "target_rng": self.target_rng.bit_generator.state}

    def restore(self, state: dict) -> None:
        self.iterator.restore(state["iterator"])
        self.target_rng.bit_generator.state = state["target_rng"]


def sequence_nll(model, toks, mask, loss_mask):
    """Mean next-token log-loss of the loss_mask tokens (float32): SFT's loss and replay's."""
    logits, _ = model(toks, model_lib.positions_from_mask(mask), mask)
    logp, _ = logprobs.token_logprobs(logits[:, :-1], toks[:, 1:])
    m = loss_mask[:, 1:]
    return -jnp.sum(logp * m) / jnp.maximum(jnp.sum(m), 1)


def train_base(config, out_dir: str, mesh, tokenizer, init):
    """Run SFT from `init`, the (graphdef, params) it starts from (donated), resuming its
    progress checkpoint in `<out_dir>/progress` if there is one, and save the base checkpoint
    in `out_dir`; returns (graphdef, params)."""
    from tqdm.auto import tqdm
    s = config.sft
    graphdef, params = init
    rules = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in config.sharding_rules)
    opt, step = _sft_step(graphdef, s.steps, s.lr, s.warmup_steps, mesh, rules)
    opt_state = sharding.place_on_mesh(opt.init(params), mesh)  # one layout: restorable
    length = config.sampling.max_prompt_len + config.sampling.max_new_tokens
    it = PromptIterator(load_split(sft_task(config), "train"), s.batch_size, seed=config.seed + 1)
    target_rng = np.random.default_rng(config.seed + 2)
    every = s.get("checkpoint_every", 0) or max(1, s.steps // 10)
    progress_dir = os.path.join(out_dir, "progress")
    progress = Checkpointer(progress_dir, keep=1)
    progress.remove_partial()  # of a save cut short (the caller holds the base's lock)
    start = _restore_progress(progress, params, opt_state, config)
    if start is not None:
        start, params, opt_state, meta = start
        it.restore(meta["iterator"])
        target_rng.bit_generator.state = meta["target_rng"]
        log.info("SFT resumed at step %d of %d from %s", start, s.steps, progress_dir)
    start = start or 0
    bar = tqdm(range(start, s.steps), desc="sft", disable=not config.log.progress,
               dynamic_ncols=True, initial=start, total=s.steps)
    with sharding.activate(mesh, config.sharding_rules):
        for i in bar:
            problems = next(it)
            toks, mask, loss_mask = sft_rows(tokenizer, problems, config.task.template, length,
                                             targets=sft_targets(config, problems, target_rng))
            params, opt_state, loss = step(params, opt_state, toks, mask, loss_mask)
            if i % 10 == 0 or i == s.steps - 1:  # a host sync: every 10 steps, not each
                bar.set_postfix(loss=f"{float(loss):.3f}")
            if (i + 1) % every == 0 and i + 1 < s.steps:
                progress.save(i + 1, {"params": params, "opt": opt_state},
                              {"step": i + 1, "sft_steps": s.steps, "iterator": it.state(),
                               "target_rng": target_rng.bit_generator.state})
    progress.close()
    ckpt = Checkpointer(out_dir, keep=1)
    ckpt.save(s.steps, {"params": params}, {"sft_steps": s.steps})
    ckpt.close()
    if jax.process_index() == 0:
        shutil.rmtree(progress_dir, ignore_errors=True)
    return graphdef, params


@functools.lru_cache(maxsize=4)  # one compile per SFT setting in a process (tests, notebooks)
def _sft_step(graphdef, steps: int, lr: float, warmup_steps: int, mesh, rules):
    """(optimizer, jitted step(params, opt_state, toks, mask, loss_mask) -> (params,
    opt_state, loss)): AdamW on the mean log-loss of the target tokens, warmup then cosine.
    The mesh and sharding rules only key the cache (the step is traced under them)."""
    del mesh, rules
    warmup = min(warmup_steps, steps // 2)
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1),
                                               lr * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, toks, mask, loss_mask):
        def loss_fn(p):
            return sequence_nll(nnx.merge(graphdef, p), toks, mask, loss_mask)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return opt, step


def _restore_progress(progress: Checkpointer, params, opt_state, config):
    """(step, params, opt_state, meta) of the newest readable SFT progress checkpoint of this
    run's length, or None (none, unreadable, or saved by another SFT config: started over)."""
    try:
        found = progress.restore_latest(abstract_like({"params": params, "opt": opt_state}),
                                        start_over=True)
    except CheckpointMismatch as e:
        log.warning("SFT progress in %s is another config's (%s): starting over",
                    progress.directory, e)
        return None
    if found is None or found[2].get("sft_steps") != config.sft.steps:
        return None
    step, arrays, meta = found
    return step, arrays["params"], arrays["opt"], meta


