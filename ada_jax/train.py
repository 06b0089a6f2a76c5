"""The RL loop: sample (adaptive engine) → score → select → advantages → PPO updates.

`train_and_evaluate(config, workdir)` resumes from the newest readable checkpoint in the
workdir (params, optimizer, DARO weights, step, data position, Ada-Est history); the step's RNG
is fold_in(seed, step), so a resumed run replays exactly what an uninterrupted one would.
Metrics go to `metrics.jsonl` and TensorBoard (`tb/`) every step; evaluation every
`eval.every` steps; checkpoints every `checkpoint.every` steps and at the end.

Shapes: B prompts per step, G kept samples per prompt, R = B·G training rows, P prompt
length, N max new tokens.
"""
import dataclasses
import functools
import json
import logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ada_jax import (adaptive, advantages, evaluate, hints, losses, objectives,
                     sharding, sft)
from ada_jax import model as model_lib
from ada_jax.checkpoint import Checkpointer, UnreadableCheckpoints, abstract_like
from ada_jax.config_check import config_changes, validate
from ada_jax.rewards import synthetic
from ada_jax.rewards.embedded import encode_answers, token_scorer
from ada_jax.tasks import PromptIterator, is_embedded, load_split
from ada_jax.tasks.embedded import is_careful
from ada_jax.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

ANSWER_LEN = 16  # max answer tokens for the jittable verifier


# ----------------------------------------------------------------------------- setup
@dataclasses.dataclass
class Context:
    """Everything a step needs that is fixed for the run."""
    config: Any
    mesh: Any
    tokenizer: Any
    model_cfg: model_lib.ModelConfig
    graphdef: Any
    engine: adaptive.EngineConfig
    generator: adaptive.ModelGenerator
    reward_fn: Any
    group: int  # G: kept samples per prompt
    rows_per_prompt: int  # training rows per prompt (R = B · rows_per_prompt)
    train_source: Any
    eval_problems: list
    train_eval_problems: list  # the first eval.train_prompts training problems (may be [])
    math_pool: Any = None  # MathVerifierPool for math-file tasks (host-side reward)


def engine_config(config) -> tuple[adaptive.EngineConfig, int, int]:
    """Static engine settings, the kept group size G and the training rows per prompt.

    uniform / dapo: exactly n samples per prompt. seq: pos / balance exits on pools of at
    least adaptive.min_pool (0 = n) samples, budget M·R, keep n.
    est / gvm: per-prompt budgets from the allocation solvers (capped at 4× the mean budget),
    every sample trained on, so G is that cap and the rows per prompt are the mean budget.
    """
    a, rl = config.adaptive, config.rl
    common = dict(slots=a.slots, max_new_tokens=config.sampling.max_new_tokens,
                  chunk_len=a.chunk_len, select_order=a.select_order, overcommit=a.overcommit)
    if a.policy == "seq":
        return adaptive.EngineConfig(keep=rl.n, exit_rule=a.exit_rule, k_pos=a.k_pos,
                                     k_neg=a.k_neg, mode=a.mode,
                                     samples_per_round=a.samples_per_round,
                                     max_rounds=a.max_rounds, min_pool=a.min_pool or rl.n,
                                     **common), rl.n, rl.n
    if a.policy in ("est", "gvm"):
        mean = a.est_budget_per_prompt if a.policy == "est" else a.gvm_budget_per_prompt
        cap = 4 * mean
        return adaptive.EngineConfig(keep=cap, exit_rule="none", mode=a.mode,
                                     samples_per_round=cap, max_rounds=1, **common), cap, mean
    return adaptive.EngineConfig(keep=rl.n, exit_rule="none", mode=a.mode,
                                 samples_per_round=rl.n, max_rounds=1, **common), rl.n, rl.n


def _make_reward(config, tokenizer):
    """Engine reward: the task verifier on token ids, or the synthetic first-token reward."""
    if config.task.reward == "synthetic":
        def reward(data, prompt_S, seq_S, tokens_SN, lengths_S):
            return synthetic.first_token_reward(tokens_SN, lengths_S,
                                                data["threshold"][jnp.maximum(prompt_S, 0)])
        return reward
    scorer = token_scorer(tokenizer)

    def reward(data, prompt_S, seq_S, tokens_SN, lengths_S):
        idx = jnp.maximum(prompt_S, 0)
        return scorer(tokens_SN, lengths_S, data["answer_ids"][idx], data["answer_len"][idx])
    return reward


def uses_math_verifier(config) -> bool:
    return config.task.reward == "verifier" and config.task.name in ("files", "tfds_files")


def math_pool(config):
    """The math-verify worker pool for math-file tasks, else None."""
    if not uses_math_verifier(config):
        return None
    from ada_jax.rewards.math_verifier import MathVerifierPool
    return MathVerifierPool(num_workers=config.task.verifier_workers,
                            timeout_s=config.task.verifier_timeout)


def reward_data(config, tokenizer, problems) -> dict:
    if config.task.reward == "synthetic":
        return dict(threshold=jnp.asarray(synthetic.thresholds([p.id for p in problems],
                                                               config.model.vocab_size)))
    ans, ans_len = encode_answers(tokenizer, [p.answer for p in problems], ANSWER_LEN)
    return dict(answer_ids=jnp.asarray(ans), answer_len=jnp.asarray(ans_len))


def global_norm(tree) -> jax.Array:
    """‖tree‖₂ over all leaves, float32 (optax.global_norm is deprecated, optax.tree.norm new)."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)))


def make_optimizer(config):
    """Global-norm clipping, then AdamW with linear warm-up over {model, daro} params. DARO's
    log-weights get their own peak lr when optim.daro_lr > 0: at a policy lr (1e-6 for LLMs)
    they would barely move from w = 1."""
    o = config.optim

    def adamw(peak):
        lr = optax.constant_schedule(peak)
        if o.warmup_steps:  # update k (from 0) runs at peak·k/warmup_steps until the peak
            lr = optax.join_schedules([optax.linear_schedule(0.0, peak, o.warmup_steps), lr],
                                      [o.warmup_steps])
        return optax.adamw(lr, b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay)

    if not o.daro_lr:
        return optax.chain(optax.clip_by_global_norm(o.grad_clip), adamw(o.lr))
    labels = lambda t: {"model": jax.tree.map(lambda _: "model", t["model"]),  # noqa: E731
                        "daro": "daro"}
    return optax.chain(optax.clip_by_global_norm(o.grad_clip),
                       optax.multi_transform({"model": adamw(o.lr), "daro": adamw(o.daro_lr)},
                                             labels))


# ----------------------------------------------------------------------------- sampling
def _est_budgets(config, problems, history) -> np.ndarray:
    a = config.adaptive
    p_hat = []
    for p in problems:
        n_tot, n_pos = history.get(str(p.id), (0.0, 0.0))
        p_hat.append((n_pos + a.est_alpha) / (n_tot + a.est_alpha + a.est_beta))
    total = a.est_budget_per_prompt * len(problems)
    return objectives.est_allocation(np.asarray(p_hat), total, kind=a.est_weight,
                                     objective=config.rl.objective,
                                     alpha=config.rl.objective_alpha, n_min=1,
                                     n_max=4 * a.est_budget_per_prompt)


def _update_est_history(config, problems, batch, history):
    a = config.adaptive
    n = np.asarray(batch.pool_n_B)
    k = np.asarray(batch.pool_pos_B)
    for p, n_t, k_t in zip(problems, n, k):
        n_tot, n_pos = history.get(str(p.id), (0.0, 0.0))
        n_tot, n_pos, _ = objectives.est_update(n_tot, n_pos, float(n_t), float(k_t),
                                                a.est_decay, a.est_alpha, a.est_beta)
        history[str(p.id)] = (float(n_tot), float(n_pos))


def default_budgets(ctx: Context, n_prompts: int) -> np.ndarray:
    """Per-prompt sample budgets: M·R for sequential exits, else the rows per prompt."""
    a = ctx.config.adaptive
    per = a.samples_per_round * a.max_rounds if a.policy == "seq" else ctx.rows_per_prompt
    return np.full(n_prompts, per)


def run_engine(ctx: Context, params, problems, key, budgets=None, hint_texts=None):
    """One engine call on a batch of problems (optionally with hints in the prompts):
    (engine state, Batch, prompt ids, prompt mask, metrics)."""
    c = ctx.config
    toks, mask = evaluate.encode_prompts(ctx.tokenizer, problems, c.task.template,
                                         c.sampling.max_prompt_len, hint_texts)
    if budgets is None:
        budgets = default_budgets(ctx, len(problems))
    budgets = jnp.asarray(budgets, jnp.int32)
    if ctx.math_pool is None:
        st = adaptive.run(params, jnp.asarray(toks), jnp.asarray(mask), budgets,
                          reward_data(c, ctx.tokenizer, problems), key,
                          cfg=ctx.engine, gen_fn=ctx.generator, reward_fn=ctx.reward_fn,
                          group=c.rl.n)
    else:  # math files: the host scores finished samples between decode chunks
        def score(prompt_S, seq_S, tokens_SN, len_S):
            texts = [ctx.tokenizer.decode(t[:n].tolist()) for t, n in zip(tokens_SN, len_S)]
            return ctx.math_pool.score(texts, [problems[i].answer for i in prompt_S])
        st = adaptive.run_host(params, jnp.asarray(toks), jnp.asarray(mask), budgets, key,
                               cfg=ctx.engine, gen_fn=ctx.generator, score=score,
                               group=c.rl.n)
    drop = None
    if c.adaptive.policy == "seq" and c.adaptive.at_budget == "drop":
        drop = ~adaptive._rule_met(ctx.engine, st.n_samples, st.n_pos)
    batch = adaptive.select(st, ctx.group, drop_unresolved=drop)
    return st, batch, toks, mask, adaptive.metrics(ctx.engine, st, batch, c.rl.n)


def collect(ctx: Context, params, iterator, key, state):
    """Sample this step's groups with the configured policy; returns (problems, batch, toks,
    mask, metrics). `state` holds what persists across steps (Ada-Est history, hint levels)
    and goes into checkpoints. DAPO keeps drawing prompt batches until B mixed groups are
    collected; self-hinting re-rolls collapsed groups under hints."""
    c = ctx.config
    problems = next(iterator)
    if c.adaptive.policy == "est":
        budgets = _est_budgets(c, problems, state["est"])
        _, batch, toks, mask, met = run_engine(ctx, params, problems, key, budgets)
        _update_est_history(c, problems, batch, state["est"])
        met["est_budget_max"] = int(budgets.max())
        return problems, batch, toks, mask, met
    if c.rl.hints != "none":
        return (problems,) + _collect_with_hints(ctx, params, problems, key, state["hint"])
    if c.adaptive.policy == "gvm":
        return (problems,) + _gvm_collect(ctx, params, problems, key)
    if c.adaptive.policy == "dapo":
        return _dapo_collect(ctx, params, iterator, problems, key)
    _, batch, toks, mask, met = run_engine(ctx, params, problems, key)
    return problems, batch, toks, mask, met


def _collect_with_hints(ctx, params, problems, key, levels_state):
    c = ctx.config

    def rerun(probs, k, budgets, hint_texts):
        _, b, t, m, met = run_engine(ctx, params, probs, k, budgets, hint_texts)
        return b, t, m, met

    if c.rl.hints == "sage_light":
        levels = hints.light_levels(problems, levels_state)
        batch, toks, mask, met = rerun(problems, key, None, hints.light_hints(problems, levels))
        hinted = np.asarray(levels) > 0
        mixed = (np.asarray(batch.pool_pos_B) > 0) & (np.asarray(batch.pool_pos_B)
                                                      < np.asarray(batch.pool_n_B))
        met.update(hint_share=float(hinted.mean()), hint_level_mean=float(np.mean(levels)),
                   hint_mixed_share=float(mixed[hinted].mean()) if hinted.any() else 0.0)
        hints.light_update(problems, batch, levels, levels_state)
        return batch, toks, mask, met
    batch, toks, mask, met = rerun(problems, key, None, None)
    before = {f"{k}_before_hints": v for k, v in adaptive.kept_metrics(batch).items()}
    batch, toks, mask, hmet = hints.sage(rerun, problems, batch, toks, mask, key,
                                         default_budgets(ctx, len(problems)))
    for k in ("samples_total", "generated_tokens"):
        met[k] += hmet.pop(k)
    met.update(hmet, **before, **adaptive.kept_metrics(batch))  # what is trained on: post-hint
    return batch, toks, mask, met


_SUMMED = ("samples_total", "generated_tokens", "decode_steps", "chunks", "cut_tokens")


def _dapo_collect(ctx, params, iterator, problems, key):
    """DAPO dynamic sampling: draw prompt batches (n samples each), keep groups with mixed
    rewards until B are collected; a clear error past dapo_max_gen_batches (as verl)."""
    c = ctx.config
    B = len(problems)
    kept, met = [], {}
    for gen_batch in range(c.adaptive.dapo_max_gen_batches):
        if gen_batch:
            problems = next(iterator)
        _, batch, toks, mask, m = run_engine(ctx, params, problems,
                                             jax.random.fold_in(key, gen_batch))
        # Shares and ratios describe the first (fresh) batch; costs add up over all.
        met = m if not met else {k: met[k] + m[k] if k in _SUMMED else met[k] for k in met}
        r, valid = np.asarray(batch.reward_BG), np.asarray(batch.mask_BG)
        n_pos = (r * valid).sum(1)
        mixed = np.flatnonzero((n_pos > 0) & (n_pos < valid.sum(1)))
        kept.extend((problems[i], jax.tree.map(lambda x: x[i], batch), toks[i], mask[i])
                    for i in mixed)
        if len(kept) >= B:
            kept = kept[:B]
            met["dapo_gen_batches"] = gen_batch + 1
            batch = jax.tree.map(lambda *xs: jnp.stack(xs), *[k[1] for k in kept])
            return ([k[0] for k in kept], batch, np.stack([k[2] for k in kept]),
                    np.stack([k[3] for k in kept]), met)
    raise RuntimeError(
        f"DAPO dynamic sampling: {c.adaptive.dapo_max_gen_batches} generation batches gave "
        f"only {len(kept)} of {B} groups with mixed rewards; raise "
        f"config.adaptive.dapo_max_gen_batches or lower config.rl.prompts_per_step")


@functools.partial(jax.jit, static_argnames=("graphdef", "prompt_len", "temperature"))
def sample_grad_norms(graphdef, params, tokens, mask, loss_mask, *, prompt_len, temperature):
    """‖∇θ log π(a|x)‖ per row (sequence log-prob), one row at a time to bound memory."""
    def one(args):
        tok, m, lm = args

        def logp_sum(p):
            logits, _ = nnx.merge(graphdef, p)(tok[None], model_lib.positions_from_mask(m[None]),
                                               m[None])
            logp, _ = model_lib.token_logprobs(logits[:, prompt_len - 1:-1],
                                               tok[None, prompt_len:], temperature)
            return jnp.sum(logp * lm[None])
        return global_norm(jax.grad(logp_sum)(params))
    return jax.lax.map(one, (tokens, mask, loss_mask))


def _gvm_collect(ctx, params, problems, key):
    """GVM two-stage: a pilot of N' samples per prompt gives p_i and G_i (mean gradient norm of
    its correct samples); budgets N_i ∝ G_i/√(p_i + α/p_i^(β-1)) (0 where p_i = 0 or G_i = 0)
    sum to gvm_budget_per_prompt·B; then the prompts are sampled again with those budgets."""
    c, a = ctx.config, ctx.config.adaptive
    B = len(problems)
    _, pilot, toks, mask, pmet = run_engine(ctx, params, problems, jax.random.fold_in(key, 0),
                                            np.full(B, a.gvm_pilot))
    rows = training_rows(pilot, toks, mask, B * a.gvm_pilot)  # every pilot sample, no padding
    norms = np.asarray(sample_grad_norms(
        ctx.graphdef, params, rows["tokens"], rows["mask"], rows["loss_mask"],
        prompt_len=c.sampling.max_prompt_len, temperature=max(c.sampling.temperature, 1e-6)))
    valid = np.flatnonzero(np.asarray(pilot.mask_BG).reshape(-1))
    correct = np.asarray(pilot.reward_BG).reshape(-1)[valid] > 0.5
    owner = valid // ctx.group
    g = np.zeros(B)
    for i in range(B):
        sel = correct & (owner == i)
        g[i] = norms[:len(valid)][sel].mean() if sel.any() else 0.0
    p = np.asarray(pilot.pool_pos_B) / np.maximum(np.asarray(pilot.pool_n_B), 1)
    budgets = objectives.gvm_allocation(p, g, a.gvm_budget_per_prompt * B, a.gvm_alpha,
                                        a.gvm_beta, n_min=0, n_max=ctx.group)
    _, batch, toks, mask, met = run_engine(ctx, params, problems, jax.random.fold_in(key, 1),
                                           budgets)
    for k in _SUMMED:
        met[k] += pmet[k]
    met.update(gvm_pilot_samples=pmet["samples_total"], gvm_zero_budget=int((budgets == 0).sum()),
               all_correct_before=pmet["all_correct_before"],
               all_wrong_before=pmet["all_wrong_before"])
    return batch, toks, mask, met


# ----------------------------------------------------------------------------- learning
def compute_advantages(config, batch: adaptive.Batch):
    """Per-sample advantages [B, G] for the configured estimator."""
    rl = config.rl
    if rl.advantage == "pool":
        return advantages.pool_baseline(
            batch.reward_BG, batch.mask_BG, batch.pool_n_B, batch.pool_pos_B,
            std_normalise=rl.std_normalise,
            weight_fn=rl.objective if rl.objective_weight else None,
            weight_alpha=rl.objective_alpha, correction=rl.importance_correction)
    return advantages.compute(rl.advantage, batch.reward_BG, batch.mask_BG)


def training_rows(batch: adaptive.Batch, toks_BP, mask_BP, rows: int):
    """Pack the valid samples of all groups into `rows` training rows (the rest masked):
    prompt+completion tokens [R, P+N], input and loss masks, old log-probs, and the packing
    (`flat` index into [B·G], `real` flag) that `pack` uses to place per-sample values."""
    B, G, N = batch.tokens_BGN.shape
    valid = np.flatnonzero(np.asarray(batch.mask_BG).reshape(-1))
    if len(valid) > rows:
        raise ValueError(f"{len(valid)} kept samples exceed the {rows} training rows per step")
    idx = np.concatenate([valid, np.zeros(rows - len(valid), valid.dtype)])
    real = jnp.asarray(np.arange(rows) < len(valid))
    b_of = jnp.asarray(idx // G)
    flat = lambda x: x.reshape((B * G,) + x.shape[2:])[idx]  # noqa: E731
    lens = flat(batch.len_BG)
    completion_mask = (jnp.arange(N)[None] < lens[:, None]) & real[:, None]
    tokens = jnp.concatenate([jnp.asarray(toks_BP)[b_of], flat(batch.tokens_BGN)], axis=1)
    mask = jnp.concatenate([jnp.asarray(mask_BP)[b_of], completion_mask], axis=1)
    mu = (batch.pool_pos_B / jnp.maximum(batch.pool_n_B, 1)).astype(jnp.float32)
    return dict(tokens=tokens, mask=mask, loss_mask=completion_mask,
                old_logp=flat(batch.logp_BGN), group=b_of, mu=mu[b_of],
                flat=jnp.asarray(idx), real=real)


def pack(rows, values_BG):
    """Per-sample values [B, G] -> per-row [R] (0 on padding rows)."""
    return jnp.where(rows["real"], values_BG.reshape(-1)[rows["flat"]], 0.0)


@functools.partial(jax.jit, static_argnames=("graphdef", "prompt_len", "temperature"))
def completion_logprobs(graphdef, params, tokens, mask, *, prompt_len, temperature):
    """log π(a_t | …) of the completion tokens [R, N] (float32), e.g. under the reference."""
    logits, _ = nnx.merge(graphdef, params)(tokens, model_lib.positions_from_mask(mask), mask)
    return model_lib.token_logprobs(logits[:, prompt_len - 1:-1], tokens[:, prompt_len:],
                                    temperature)[0]


def prepare_rows(ctx, batch, toks, mask, rows_per_step, ref_params):
    """Training rows with advantages (and reference log-probs when KL is on)."""
    c = ctx.config
    rows = training_rows(batch, toks, mask, rows_per_step)
    rewards = batch.reward_BG
    if ref_params is not None:
        rows["ref_logp"] = completion_logprobs(
            ctx.graphdef, ref_params, rows["tokens"], rows["mask"],
            prompt_len=c.sampling.max_prompt_len, temperature=max(c.sampling.temperature, 1e-6))
        if c.loss.kl_in_reward:  # β·Σ_t KL_t subtracted from each sample's outcome reward
            pen = losses.kl_reward_penalty(rows["old_logp"], rows["ref_logp"],
                                           rows["loss_mask"], c.loss.kl_coef, c.loss.kl_type)
            pen_BG = jnp.zeros(rewards.size).at[rows["flat"]].add(jnp.where(rows["real"], pen,
                                                                             0.0))
            rewards = rewards - pen_BG.reshape(rewards.shape)
    rows["adv"] = pack(rows, compute_advantages(c, batch.replace(reward_BG=rewards)))
    return rows


def make_train_step(graphdef, optimizer, config, prompt_len: int, n_groups: int):
    """Jitted PPO minibatch update over {model, daro} params; skips non-finite steps."""
    l, rl = config.loss, config.rl
    temperature = max(config.sampling.temperature, 1e-6)
    N = config.sampling.max_new_tokens

    def loss_fn(trainable, mb, nan_now):
        model = nnx.merge(graphdef, trainable["model"])
        positions = model_lib.positions_from_mask(mb["mask"])
        logits, _ = model(mb["tokens"], positions, mb["mask"])
        logp, ent = model_lib.token_logprobs(logits[:, prompt_len - 1:-1],
                                             mb["tokens"][:, prompt_len:], temperature)
        kl_in_loss = "ref_logp" in mb and not l.kl_in_reward
        loss, met = losses.policy_loss(
            logp, mb["old_logp"], mb["adv"], mb["loss_mask"], clip_low=l.clip_low,
            clip_high=l.clip_high, dual_clip=l.dual_clip, agg=l.agg, max_len=N,
            n_groups=mb["tokens"].shape[0], entropy_BT=ent, entropy_coef=l.entropy_coef,
            ref_logp_BT=mb["ref_logp"] if kl_in_loss else None,
            kl_coef=l.kl_coef if kl_in_loss else 0.0, kl_type=l.kl_type)
        if rl.daro:
            tok, _ = losses.ppo_token_loss(logp, mb["old_logp"],
                                           jnp.broadcast_to(mb["adv"][:, None], logp.shape),
                                           clip_low=l.clip_low, clip_high=l.clip_high,
                                           dual_clip=l.dual_clip)
            shares = losses.group_shares(tok, mb["loss_mask"], mb["group"], n_groups)
            mu_g = jax.ops.segment_max(mb["mu"], mb["group"], n_groups)
            extra = loss - met["pg_loss"]  # policy_loss's KL and entropy terms, kept
            loss, dm = losses.daro_loss(shares, mu_g, trainable["daro"])
            loss = loss + extra
            met.update({k: v for k, v in dm.items() if k == "daro_nonpos"})
        loss = loss + jnp.where(nan_now, jnp.nan, 0.0)
        return loss, met

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    micro = rl.microbatches

    def accumulated_grad(trainable, mb, nan_now):
        """The minibatch's (loss, metrics) and gradient from `micro` sequential micro-batches
        (bounded activation memory). Every aggregation is a sum over rows divided by a count of
        tokens or rows, so micro-batch j's value, weighted by its share of that count, sums
        exactly to the whole minibatch's; metrics are token means, weighted by token share."""
        # Strided split (micro-batch j holds rows j, j + micro, …): with rows sharded in
        # contiguous blocks over the devices, every micro-batch spans all of them.
        split = jax.tree.map(lambda x: jnp.swapaxes(x.reshape((-1, micro) + x.shape[1:]), 0, 1),
                             mb)
        tokens_j = split["loss_mask"].sum((1, 2)).astype(jnp.float32)
        rows_j = (split["loss_mask"].sum(2) > 0).sum(1).astype(jnp.float32)
        if l.agg == "token_mean":
            w_j = tokens_j / jnp.maximum(tokens_j.sum(), 1.0)
        elif l.agg == "constant":
            w_j = jnp.full((micro,), 1.0 / micro)
        else:  # seq_mean_*: divided by the rows with tokens
            w_j = rows_j / jnp.maximum(rows_j.sum(), 1.0)
        wm_j = tokens_j / jnp.maximum(tokens_j.sum(), 1.0)

        def body(acc, xs):
            part, w, wm = xs
            (loss, met), g = grad_fn(trainable, part, nan_now)
            acc_loss, acc_met, acc_g = acc
            met = {k: (w if k == "pg_loss" else wm) * v for k, v in met.items()}
            return (acc_loss + w * loss, jax.tree.map(jnp.add, acc_met, met),
                    jax.tree.map(lambda a, b: a + w * b, acc_g, g)), None

        first = jax.tree.map(lambda x: x[0], split)
        met_shape = jax.eval_shape(lambda: grad_fn(trainable, first, nan_now)[0][1])
        zeros = (jnp.zeros((), jnp.float32),
                 jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), met_shape),
                 jax.tree.map(jnp.zeros_like, trainable))
        (loss, met, grads), _ = jax.lax.scan(body, zeros, (split, w_j, wm_j))
        return (loss, met), grads

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train_step(trainable, opt_state, mb, nan_now):
        if micro > 1:
            (loss, met), grads = accumulated_grad(trainable, mb, nan_now)
        else:
            (loss, met), grads = grad_fn(trainable, mb, nan_now)
        gnorm = global_norm(grads)
        updates, new_opt = optimizer.update(grads, opt_state, trainable)
        new = optax.apply_updates(trainable, updates)
        # The new params too: a finite gradient times a NaN / inf learning rate is not finite.
        finite = jnp.isfinite(loss) & jnp.isfinite(gnorm) & jnp.all(
            jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(new)]))
        keep = lambda a, b: jnp.where(finite, a, b)  # noqa: E731
        trainable = jax.tree.map(keep, new, trainable)
        opt_state = jax.tree.map(keep, new_opt, opt_state)
        return trainable, opt_state, dict(met, loss=loss, grad_norm=gnorm,
                                          skipped=(~finite).astype(jnp.float32))

    return train_step


def learn(ctx, train_step, trainable, opt_state, rows, step: int):
    """ppo_epochs passes over the rows in `minibatches` shuffled minibatches."""
    c = ctx.config
    R = rows["tokens"].shape[0]
    mbs = c.rl.minibatches
    rng = np.random.default_rng([c.seed, step])
    mets = []
    nan_now = jnp.asarray(step == c.rl.get("inject_nan_step", -1))
    for _ in range(c.rl.ppo_epochs):
        perm = rng.permutation(R).reshape(mbs, R // mbs)
        for idx in perm:
            mb = jax.tree.map(lambda x: x[idx], rows)
            trainable, opt_state, met = train_step(trainable, opt_state, mb, nan_now)
            mets.append(met)
    mets = jax.device_get(mets)
    out = {k: float(np.mean([m[k] for m in mets])) for k in mets[0]}
    out["skipped"] = float(np.max([m["skipped"] for m in mets]))
    if c.rl.daro:
        out.update({f"daro_w/{i}": float(w) for i, w in
                    enumerate(np.exp(np.asarray(trainable["daro"])))})
    return trainable, opt_state, out


# ----------------------------------------------------------------------------- logging
class MetricsWriter:
    """JSONL plus TensorBoard scalars. On resume the JSONL keeps the records of steps up to the
    resumed one (none on a fresh start, not even step 0's eval: it is redone), rewritten
    atomically, so a resumed run's file equals a continuous one's. Every step up to the resumed
    one must have a readable record: a missing or garbled one would silently lose that step's
    metrics and restart the cumulative counts, so it is an error."""

    def __init__(self, workdir: str, resume_step: int):
        self.path = os.path.join(workdir, "metrics.jsonl")
        kept, bad = {}, []  # step -> line; unreadable line numbers
        if resume_step and os.path.exists(self.path):
            with open(self.path) as f:
                for i, line in enumerate(f, 1):
                    try:
                        step = json.loads(line)["step"]
                    except (json.JSONDecodeError, TypeError, KeyError):
                        bad.append(i)  # e.g. a line cut by a crash
                        continue
                    if step <= resume_step:
                        kept[step] = line if line.endswith("\n") else line + "\n"
        missing = sorted(set(range(1, resume_step + 1)) - kept.keys())
        if missing:
            raise ValueError(
                f"{self.path}: no readable record of step(s) {missing} before the resumed "
                f"checkpoint (step {resume_step})" + (f"; unreadable lines {bad}" if bad else "")
                + ". Repair or restore the file, or start a new workdir.")
        if bad:
            log.warning("%s: dropping unreadable lines %s (steps after %d, redone)",
                            self.path, bad, resume_step)
        self.last = json.loads(kept[resume_step]) if resume_step else {}
        _write_atomic(self.path, "".join(kept[k] for k in sorted(kept)))
        self.tb = None
        try:
            from tensorboardX import SummaryWriter
            self.tb = SummaryWriter(os.path.join(workdir, "tb"))
        except ImportError:  # pragma: no cover
            log.warning("tensorboardX missing: TensorBoard logging off")

    def write(self, step: int, metrics: dict):
        rec = {"step": step, **metrics}
        with open(self.path, "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        if self.tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and np.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()


def _write_atomic(path: str, text: str) -> None:
    """Write via a temporary file and os.replace: a crash leaves the old file or the new one,
    never a cut or empty one."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- main loop
def check_batches(config, rows_per_prompt: int) -> None:
    """The training rows per step must split into minibatches, and those into micro-batches."""
    rl = config.rl
    rows_per_step = rl.prompts_per_step * rows_per_prompt
    if rl.microbatches > 1 and rl.daro:
        raise ValueError("config.rl.microbatches > 1 is not supported with DARO (its loss is not "
                         "a sum over rows); use more config.rl.minibatches instead")
    if rows_per_step % rl.minibatches:
        raise ValueError(f"config.rl.minibatches={rl.minibatches} must divide the "
                         f"{rows_per_step} training rows per step")
    if (rows_per_step // rl.minibatches) % rl.microbatches:
        raise ValueError(f"config.rl.microbatches={rl.microbatches} must divide the "
                         f"{rows_per_step // rl.minibatches} rows of a minibatch")


def check_resume(config, workdir: str) -> None:
    """Refuse to resume a workdir whose config.json differs from `config` in a field outside
    config_check.RESUMABLE, naming each: other shapes would make every checkpoint unrestorable,
    other settings would silently splice two experiments. config.checkpoint.allow_config_change
    overrides (for settings that leave the array shapes alone)."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is unreadable ({e}): repair it or start a new workdir") from e
    changed, only_one = config_changes(saved, config)
    if only_one:
        log.warning("%s: fields only in the saved or only in the new config (another code "
                        "version?), not compared: %s", path, ", ".join(only_one))
    if changed and config.checkpoint.allow_config_change:
        log.warning("resuming %s with a changed config: %s", workdir, "; ".join(changed))
    elif changed:
        raise ValueError(
            f"workdir {workdir} was started with another config (its config.json); changed: "
            + "; ".join(changed) + ". Resume with the saved settings, use a new --workdir, or "
            "set --config.checkpoint.allow_config_change=True to resume with these (impossible "
            "for fields that change array shapes, e.g. the model size or rl.n).")


def setup(config, workdir: str):
    """Mesh, tokenizer, data, model (from the base checkpoint), engine: (ctx, params). Every
    check runs before the base policy is loaded or trained."""
    validate(config)
    engine, group, rows_per_prompt = engine_config(config)
    check_batches(config, rows_per_prompt)
    sharding.maybe_initialize_distributed(config.distributed)
    mesh = sharding.make_mesh(config.mesh)
    tokenizer = load_tokenizer(config)
    model_cfg = model_lib.ModelConfig.from_config(config.model)
    scfg = evaluate.sampling_config(config, tokenizer, config.sampling.temperature)
    eval_source = load_split(config, "eval", tokenizer)
    eval_problems = [eval_source[i] for i in range(min(config.eval.prompts, len(eval_source)))]
    train_source = load_split(config, "train", tokenizer)
    if config.rl.prompts_per_step > len(train_source):
        raise ValueError(f"config.rl.prompts_per_step={config.rl.prompts_per_step} exceeds the "
                         f"{len(train_source)} training problems")
    train_eval = [train_source[i] for i in range(min(config.eval.train_prompts,
                                                     len(train_source)))]
    graphdef, params = sft.load_base(config, workdir, mesh, tokenizer)
    ctx = Context(config=config, mesh=mesh, tokenizer=tokenizer, model_cfg=model_cfg,
                  graphdef=graphdef, engine=engine,
                  generator=adaptive.ModelGenerator(graphdef, model_cfg, scfg),
                  reward_fn=_make_reward(config, tokenizer), group=group,
                  rows_per_prompt=rows_per_prompt,
                  train_source=train_source, eval_problems=eval_problems,
                  train_eval_problems=train_eval,
                  math_pool=math_pool(config))
    return ctx, params


def run_evals(ctx: Context, params, key) -> dict:
    """avg@k / pass@k on the held-out eval prompts (`eval/…`) and, when eval.train_prompts > 0,
    on a fixed set of training prompts (`train_eval/…`: what RL optimises on a finite pool)."""
    out = {}
    for prefix, problems in (("eval", ctx.eval_problems), ("train_eval", ctx.train_eval_problems)):
        if problems:
            ev = evaluate.evaluate(ctx.graphdef, params, ctx.tokenizer, problems, ctx.config,
                                   jax.random.fold_in(key, len(out)))
            out.update({f"{prefix}/{k}": v for k, v in ev.items() if not isinstance(v, list)})
    return out


def init_train_state(ctx: Context, params):
    """(optimizer, trainable = {model, daro log-weights}, optimizer state), all on the mesh."""
    c = ctx.config
    optimizer = make_optimizer(c)
    n_daro = max(c.rl.daro_buckets or c.rl.n, 2) - 1
    trainable = sharding.place_on_mesh(
        {"model": params, "daro": jnp.zeros((n_daro,), jnp.float32)}, ctx.mesh)
    return optimizer, trainable, sharding.place_on_mesh(optimizer.init(trainable), ctx.mesh)


def restore_checkpoint(ckpt: Checkpointer, trainable, opt_state, start_over: bool = False):
    """(step, trainable, opt_state, meta) from the newest readable checkpoint, or None if there
    is none (or none readable and `start_over`; see Checkpointer.restore_latest)."""
    restored = ckpt.restore_latest(abstract_like({"trainable": trainable, "opt": opt_state}),
                                   start_over)
    if restored is None:
        return None
    step, arrays, meta = restored
    return step, arrays["trainable"], arrays["opt"], meta


def train_and_evaluate(config, workdir: str) -> dict:
    """Train config.rl.steps steps (resuming the workdir's newest readable checkpoint); returns
    the last step's metrics. The workdir's config.json is compared first (check_resume) and
    rewritten only once every check has passed."""
    validate(config)
    os.makedirs(workdir, exist_ok=True)
    check_resume(config, workdir)
    ctx, params = setup(config, workdir)
    c = config
    rows_per_step = c.rl.prompts_per_step * ctx.rows_per_prompt
    optimizer, trainable, opt_state = init_train_state(ctx, params)
    iterator = PromptIterator(ctx.train_source, c.rl.prompts_per_step, seed=c.seed)
    state: dict = {"est": {}, "hint": {}}
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), c.checkpoint.keep)
    start = 0
    try:
        restored = restore_checkpoint(ckpt, trainable, opt_state,
                                      c.checkpoint.start_over_if_unreadable)
    except UnreadableCheckpoints as e:
        raise UnreadableCheckpoints(f"{e} Or set --config.checkpoint.start_over_if_unreadable"
                                    f"=True to train this workdir from step 0.") from None
    if restored is not None:
        start, trainable, opt_state, meta = restored
        iterator.restore(meta["iterator"])
        state = {"est": {k: tuple(v) for k, v in meta["est_history"].items()},
                 "hint": dict(meta.get("hint_levels", {}))}
        log.info("resumed from step %d", start)
    writer = MetricsWriter(workdir, start)
    _write_atomic(os.path.join(workdir, "config.json"),
                  config.to_json_best_effort(indent=1, sort_keys=True))
    # The reference policy for KL is the base policy (a copy: the learner's buffers are donated).
    ref_params = (jax.tree.map(jnp.copy, params) if c.loss.kl_coef > 0 else None)
    train_step = make_train_step(ctx.graphdef, optimizer, c, c.sampling.max_prompt_len,
                                 c.rl.prompts_per_step)
    base_key = jax.random.key(c.seed)
    train_key, eval_key = jax.random.fold_in(base_key, 0), jax.random.fold_in(base_key, 1)
    totals = {"generated_tokens": 0, "samples": 0, "wall": 0.0}
    if start:
        totals = {k: writer.last.get(f"cum_{k}", 0) for k in totals}

    def save(step):
        ckpt.save(step, {"trainable": trainable, "opt": opt_state},
                  {"iterator": iterator.state(), "est_history": state["est"],
                   "hint_levels": state["hint"], "step": step})

    bar = _progress(c, start)
    met = {k: v for k, v in writer.last.items() if k != "step"}  # returned if nothing is left
    with sharding.activate(ctx.mesh, c.sharding_rules):
        if start == 0 and c.eval.every:
            writer.write(0, run_evals(ctx, trainable["model"], jax.random.fold_in(eval_key, 0))
                         | {"cum_generated_tokens": 0, "cum_samples": 0, "cum_wall": 0.0})
        for step in range(start, c.rl.steps):
            t0 = time.perf_counter()
            key = jax.random.fold_in(train_key, step)
            problems, batch, toks, mask, met = collect(ctx, trainable["model"], iterator, key,
                                                      state)
            jax.block_until_ready(batch)
            t1 = time.perf_counter()
            rows = prepare_rows(ctx, batch, toks, mask, rows_per_step, ref_params)
            t2 = time.perf_counter()
            trainable, opt_state, lmet = learn(ctx, train_step, trainable, opt_state, rows,
                                               step)
            t3 = time.perf_counter()
            if lmet["skipped"]:
                log.warning("step %d: non-finite loss or gradient; update skipped", step)
            met.update(lmet)
            met["reward_mean"] = float(np.mean(np.asarray(batch.pool_pos_B)
                                               / np.maximum(np.asarray(batch.pool_n_B), 1)))
            lens = np.asarray(batch.len_BG)[np.asarray(batch.mask_BG)]
            met["response_length"] = float(lens.mean()) if lens.size else 0.0
            if is_embedded(c):
                met["careful_share"] = careful_share(ctx.tokenizer, batch)
            met.update(time_sampling=t1 - t0, time_scoring=t2 - t1, time_learning=t3 - t2)
            totals["generated_tokens"] += met["generated_tokens"]
            totals["samples"] += met["samples_total"]
            totals["wall"] += t3 - t0
            met.update({f"cum_{k}": v for k, v in totals.items()})
            done = step + 1
            if c.eval.every and (done % c.eval.every == 0 or done == c.rl.steps):
                met.update(run_evals(ctx, trainable["model"], jax.random.fold_in(eval_key, done)))
            writer.write(done, {k: v for k, v in met.items() if not isinstance(v, list)})
            # Saved after a skipped (non-finite) update too: the state is the previous, finite
            # one, and a re-run would otherwise repeat that step forever.
            if done % c.checkpoint.every == 0 or done == c.rl.steps:
                save(done)
            bar.update(1)
            bar.set_postfix(reward=f"{met['reward_mean']:.2f}",
                            eff=f"{met['effective_prompt_ratio']:.2f}",
                            spp=f"{met['samples_per_prompt_mean']:.1f}",
                            **({"eval": f"{met[f'eval/avg@{c.eval.k}']:.3f}"}
                               if f"eval/avg@{c.eval.k}" in met else {}))
    bar.close()
    ckpt.close()
    return met


def careful_share(tokenizer, batch: adaptive.Batch) -> float:
    """Share of the kept samples written in the embedded task's careful line-by-line style."""
    toks, lens = np.asarray(batch.tokens_BGN), np.asarray(batch.len_BG)
    keep = np.asarray(batch.mask_BG)
    flags = [is_careful(tokenizer.decode(t[:n].tolist()))
             for t, n in zip(toks[keep], lens[keep])]
    return float(np.mean(flags)) if flags else 0.0


def _progress(config, start):
    from tqdm.auto import tqdm
    return tqdm(total=config.rl.steps, initial=start, desc=f"{config.algo}",
                disable=not config.log.progress, dynamic_ncols=True)
