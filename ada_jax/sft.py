"""Supervised warm start: the base policy RL starts from.

Trains the model on (prompt, reference solution, EOS) pairs of the train split, loss on the
solution tokens only, and saves it with orbax under `<workdir>/base` (or config.sft.base_dir).
`load_base` reuses that checkpoint when it exists, so the main job trains it once. For
pretrained models (config.model.init_from) it imports the Hugging Face checkpoint instead.
"""
import functools
import json
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ada_jax import evaluate, sharding
from ada_jax import model as model_lib
from ada_jax.checkpoint import Checkpointer, abstract_like
from ada_jax.tasks import PromptIterator, families, is_embedded, load_split
from ada_jax.tasks.embedded import hasty_solution
from ada_jax.tokenizer import prompt_ids, render_prompt

log = logging.getLogger(__name__)


def base_dir(config, workdir: str) -> str:
    return config.sft.get("base_dir", "") or os.path.join(workdir, "base")


def init_params(config, mesh, seed: int):
    cfg = model_lib.ModelConfig.from_config(config.model)
    return sharding.init_sharded(lambda: model_lib.Transformer(cfg, nnx.Rngs(seed)), mesh,
                                 config.sharding_rules)


def sft_rows(tokenizer, problems, template: str, length: int, bucket: int = 32, targets=None):
    """Tokens [B, L] (prompt then target then EOS, left-aligned), input mask and the loss mask
    over the target tokens; L is the batch's longest row rounded up to `bucket` (capped at
    `length`), so few shapes compile and short batches cost less. The targets are the
    problems' solutions unless `targets` (one text per problem) says otherwise."""
    rows = []
    for b, p in enumerate(problems):
        prompt = prompt_ids(tokenizer, render_prompt(p.question, template))
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


def train_base(config, out_dir: str, mesh, tokenizer):
    """Run SFT and save the base checkpoint; returns (graphdef, params)."""
    from tqdm.auto import tqdm
    s = config.sft
    graphdef, params = init_params(config, mesh, config.seed)
    warmup = min(s.warmup_steps, s.steps // 2)
    sched = optax.warmup_cosine_decay_schedule(0.0, s.lr, warmup, max(s.steps, warmup + 1),
                                               s.lr * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
    opt_state = opt.init(params)
    length = config.sampling.max_prompt_len + config.sampling.max_new_tokens

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, toks, mask, loss_mask):
        def loss_fn(p):
            model = nnx.merge(graphdef, p)
            logits, _ = model(toks, model_lib.positions_from_mask(mask), mask)
            logp, _ = model_lib.token_logprobs(logits[:, :-1], toks[:, 1:])
            m = loss_mask[:, 1:]
            return -jnp.sum(logp * m) / jnp.maximum(jnp.sum(m), 1)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    it = PromptIterator(load_split(sft_task(config), "train"), s.batch_size, seed=config.seed + 1)
    target_rng = np.random.default_rng(config.seed + 2)
    bar = tqdm(range(s.steps), desc="sft", disable=not config.log.progress, dynamic_ncols=True)
    with sharding.activate(mesh, config.sharding_rules):
        for i in bar:
            problems = next(it)
            toks, mask, loss_mask = sft_rows(tokenizer, problems, config.task.template, length,
                                             targets=sft_targets(config, problems, target_rng))
            params, opt_state, loss = step(params, opt_state, toks, mask, loss_mask)
            if i % 50 == 0 or i == s.steps - 1:
                bar.set_postfix(loss=f"{float(loss):.3f}")
    ckpt = Checkpointer(out_dir, keep=1)
    ckpt.save(s.steps, {"params": params}, {"sft_steps": s.steps})
    ckpt.close()
    return graphdef, params


def load_base(config, workdir: str, mesh, tokenizer):
    """The base policy: HF import, cached SFT checkpoint, or a fresh SFT run."""
    if config.model.init_from:
        return _load_hf(config, mesh)
    out_dir = base_dir(config, workdir)
    graphdef, params = init_params(config, mesh, config.seed)
    if config.sft.steps == 0:  # no warm start: RL from the random init (tests, benchmarks)
        return graphdef, params
    if os.path.isdir(out_dir):
        restored = Checkpointer(out_dir, keep=1).restore_latest(
            abstract_like({"params": params}))
        if restored is not None:
            log.info("base policy from %s", out_dir)
            return graphdef, restored[1]["params"]
    log.info("no base checkpoint in %s: running SFT (%d steps)", out_dir, config.sft.steps)
    return train_base(config, out_dir, mesh, tokenizer)


def _load_hf(config, mesh):
    """Import config.model.init_from (a Hugging Face folder) with config.model's param dtype,
    compute dtype, remat and max_len, after checking its config.json describes config.model."""
    from ada_jax import convert
    m = config.model
    hf_cfg = convert.model_config_from_hf(convert.read_hf_config(m.init_from),
                                          source=os.path.join(m.init_from, "config.json"))
    got = convert.architecture(hf_cfg)
    want = convert.architecture(model_lib.ModelConfig.from_config(m))
    diff = [f"config.model.{k}={want[k]!r} but config.json gives {got[k]!r}"
            for k in want if want[k] != got[k]]
    if diff:
        raise ValueError(f"config.model.init_from={m.init_from!r} does not hold model={m.name}: "
                         + "; ".join(diff) + " (`python scripts/convert_hf.py --hf_dir=…` names "
                         "the matching model= variant)")
    _, graphdef, params = convert.load_hf_checkpoint(
        m.init_from, mesh, config.sharding_rules, param_dtype=m.param_dtype, dtype=m.dtype,
        remat=m.remat, max_len=m.max_len)
    log.info("base policy from %s", m.init_from)
    return graphdef, params


def base_report(config, graphdef, params, tokenizer, k: int = 16) -> dict:
    """Pass-rate spread of the base policy on the eval split at the sampling temperature."""
    source = load_split(config, "eval")
    problems = [source[i] for i in range(min(config.eval.prompts, len(source)))]
    cfg = config.copy_and_resolve_references()
    with cfg.unlocked():
        cfg.sampling.eval_temperature = config.sampling.temperature
    report = evaluate.evaluate(graphdef, params, tokenizer, problems, cfg,
                               jax.random.key(config.seed + 7), k)
    report["k"] = k
    report["prompts"] = len(problems)
    return report


def write_report(report: dict, out_dir: str) -> None:
    with open(os.path.join(out_dir, "pass_rates.json"), "w") as f:
        json.dump(report, f, indent=1)
