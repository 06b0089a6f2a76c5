"""Collection policies: how a step's training groups are sampled with the adaptive engine.

`collect` dispatches on config.adaptive.policy: seq / uniform (one engine call), est (budgets
from each prompt's pass-rate history), gvm (a pilot call, then gradient-variance budgets), dapo
(more prompt batches until B mixed groups), and self-hinting (collapsed groups re-rolled under
hints). Each returns (problems, Batch, prompt ids, prompt mask, metrics).
"""
import dataclasses
import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ada_jax import adaptive, evaluate, hints, objectives, selection, sharding, stream
from ada_jax import model as model_lib
from ada_jax.learn import global_norm, training_rows
from ada_jax.rewards import synthetic
from ada_jax.rewards.embedded import encode_answers, token_scorer
from ada_jax.tasks.problem import Problem

log = logging.getLogger(__name__)

ANSWER_LEN = 16  # max answer tokens for the jittable verifier


def make_reward(config, tokenizer):
    """Engine reward: the task verifier on token ids, the synthetic first-token reward, or
    None where the host scores (math files: the math verifier between decode chunks). Only
    the reward the task uses is built: the token scorer needs `\\boxed{` and `}` as single
    tokens, which real tokenizers (Qwen2, Llama-3) never give."""
    if uses_math_verifier(config):
        return None
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


def everyone(problems: list) -> list:
    """The whole batch from every process's block of it (process order: the one-process
    batch); on one process `problems` itself. Small records (text), gathered as JSON."""
    if jax.process_count() == 1:
        return problems
    return [Problem(**d) for part in sharding.allgather_json(
        [dataclasses.asdict(p) for p in problems]) for d in part]


def own_share(x):
    """This process's block of a whole-batch list or array (the rows `sharding.process_rows`
    gives it: block p of len(x) / process_count)."""
    n = len(x) // jax.process_count()
    return x[jax.process_index() * n:][:n]


def _est_budgets(config, ids, history) -> np.ndarray:
    """Budgets of the prompts with these problem ids (the whole batch) from their history."""
    a = config.adaptive
    p_hat = []
    for i in ids:
        n_tot, n_pos = history.get(str(i), (0.0, 0.0))
        p_hat.append((n_pos + a.est_alpha) / (n_tot + a.est_alpha + a.est_beta))
    total = a.est_budget_per_prompt * len(ids)
    return objectives.est_allocation(np.asarray(p_hat), total, kind=a.est_weight,
                                     objective=config.rl.objective,
                                     alpha=config.rl.objective_alpha, n_min=1,
                                     n_max=4 * a.est_budget_per_prompt)


def _update_est_history(config, ids, batch, history):
    a = config.adaptive
    n = np.asarray(batch.pool_n_B)
    k = np.asarray(batch.pool_pos_B)
    for i, n_t, k_t in zip(ids, n, k):
        n_tot, n_pos = history.get(str(i), (0.0, 0.0))
        n_tot, n_pos, _ = objectives.est_update(n_tot, n_pos, float(n_t), float(k_t),
                                                a.est_decay, a.est_alpha, a.est_beta)
        history[str(i)] = (float(n_tot), float(n_pos))


def default_budgets(ctx, n_prompts: int) -> np.ndarray:
    """Per-prompt sample budgets: M·R for sequential exits, else the rows per prompt."""
    a = ctx.config.adaptive
    per = a.samples_per_round * a.max_rounds if a.policy == "seq" else ctx.rows_per_prompt
    return np.full(n_prompts, per)


def run_engine(ctx, params, problems, key, budgets=None, hint_texts=None):
    """One engine call on a batch of problems (optionally with hints in the prompts):
    (engine state, Batch, prompt ids, prompt mask, metrics).

    On several processes `problems` and `budgets` are this process's rows of the batch: the
    prompts become one global array (`sharding.global_batch`), so the returned prompt ids and
    mask are global, each process scores only its own slots, and the per-prompt counters and
    kept-group masks come back replicated, so every process computes the same metrics."""
    c = ctx.config
    toks, mask = evaluate.encode_prompts(ctx.tokenizer, problems, c.task.template,
                                         c.sampling.max_prompt_len, hint_texts)
    if budgets is None:
        budgets = default_budgets(ctx, len(problems))
    on_mesh = functools.partial(sharding.global_batch, ctx.mesh, c.sharding_rules)
    toks, mask, budgets = on_mesh(toks), on_mesh(mask), on_mesh(np.asarray(budgets, np.int32))
    budgets = jnp.asarray(budgets, jnp.int32)
    if ctx.math_pool is None:
        st = adaptive.run(params, jnp.asarray(toks), jnp.asarray(mask), budgets,
                          jax.tree.map(on_mesh, reward_data(c, ctx.tokenizer, problems)), key,
                          cfg=ctx.engine, gen_fn=ctx.generator, reward_fn=ctx.reward_fn,
                          group=c.rl.n)
    else:  # math files: the host scores finished samples between decode chunks
        answers = [a for part in sharding.allgather_json([p.answer for p in problems])
                   for a in part]  # any process's slot may hold any prompt's sample
        st = adaptive.run_host(params, jnp.asarray(toks), jnp.asarray(mask), budgets, key,
                               cfg=ctx.engine, gen_fn=ctx.generator,
                               score=_host_score(ctx, answers), group=c.rl.n)
    drop = None
    if drops_unresolved(c):
        drop = ~adaptive._rule_met(ctx.engine, st.n_samples, st.n_pos)
    st, batch = selection.select_readable(st, ctx.group, drop)
    return st, batch, toks, mask, selection.metrics(ctx.engine, st, batch, c.rl.n)


def drops_unresolved(config) -> bool:
    """Passive filtering at budget: Ada-Seq groups whose exit rule failed are masked out."""
    return config.adaptive.policy == "seq" and config.adaptive.at_budget == "drop"


def make_stream(ctx, params):
    """The persistent streaming engine of adaptive.mode='stream' (empty), or None."""
    c = ctx.config
    if c.adaptive.mode != "stream":
        return None
    B = c.rl.prompts_per_step
    lag = c.adaptive.stream_max_lag
    ahead = lag * B if c.adaptive.stream_ahead < 0 else c.adaptive.stream_ahead
    return stream.Stream(ctx.engine, ctx.generator, prompts=B, ahead=ahead,
                         prompt_len=c.sampling.max_prompt_len, group=ctx.group,
                         on_policy=c.adaptive.stream_on_policy, max_lag=lag,
                         calls=c.rl.steps).init(
                             params, ctx.mesh, c.sharding_rules)


_NO_PROBLEM = Problem(id=0, question="", answer="")  # reward data of a free stream row


def _stream_collect(ctx, params, iterator, key, st: dict):
    """Admit queued prompts into the stream's free rows (drawing prompt batches as needed; the
    rest waits in st["pending"]), run it until this step's groups are complete, claim them.

    On several processes each reads its own block of every batch drawn and the blocks are
    gathered (`everyone`): every process keeps the whole table's bookkeeping alike (admits,
    claims, checkpoint meta), while the engine state is laid out over every device and each
    process decodes and scores the slots its own devices hold."""
    c, s = ctx.config, st["stream"]
    while len(st["pending"]) < s.free():
        st["pending"] += everyone(next(iterator))
    new, st["pending"] = st["pending"][:s.free()], st["pending"][s.free():]
    if new:
        toks, mask = evaluate.encode_prompts(ctx.tokenizer, new, c.task.template,
                                             c.sampling.max_prompt_len)
        s.admit(new, toks, mask, default_budgets(ctx, len(new)))
    rows = [p or _NO_PROBLEM for p in s.items]
    if ctx.math_pool is None:
        s.run(params, key, reward_fn=ctx.reward_fn,
              reward_data=reward_data(c, ctx.tokenizer, rows))
    else:
        s.run(params, key, score=_host_score(ctx, [p.answer for p in rows]))
    got = s.claim(drop_unresolved=drops_unresolved(c))
    toks, mask = got.prompt_BP, got.mask_BP
    if jax.process_count() > 1:  # global arrays, as run_engine's (host copies on one process)
        toks, mask = s.place(toks), s.place(mask)
    return got.items, got.batch, toks, mask, got.metrics


def _host_score(ctx, answers):
    """score(prompt_S, seq_S, tokens_SN, len_S) for the engine's host loop: the math verifier
    on the decoded completions against answers[prompt]."""
    def score(prompt_S, seq_S, tokens_SN, len_S):
        texts = [ctx.tokenizer.decode(t[:n].tolist()) for t, n in zip(tokens_SN, len_S)]
        return ctx.math_pool.score(texts, [answers[i] for i in prompt_S])
    return score


def collect(ctx, params, iterator, key, state):
    """Sample this step's groups with the configured policy; returns (problems, batch, toks,
    mask, metrics). `state` holds what persists across steps (Ada-Est history, hint levels)
    and goes into checkpoints. DAPO keeps drawing prompt batches until B mixed groups are
    collected; self-hinting re-rolls collapsed groups under hints."""
    c = ctx.config
    if c.adaptive.mode == "stream":
        return _stream_collect(ctx, params, iterator, key, state)
    problems = next(iterator)
    if c.adaptive.policy == "est":
        # Solved over the whole batch (every process's ids, so every process alike); the
        # history is the same on every process too.
        ids = [i for part in sharding.allgather_json([p.id for p in problems]) for i in part]
        budgets = _est_budgets(c, ids, state["est"])
        _, batch, toks, mask, met = run_engine(ctx, params, problems, key, own_share(budgets))
        _update_est_history(c, ids, batch, state["est"])
        met["est_budget_max"] = int(budgets.max())
        return problems, batch, toks, mask, met
    if c.rl.hints != "none":
        return (problems,) + _collect_with_hints(ctx, params, problems, key, state["hint"])
    if c.adaptive.policy == "gvm":
        return (problems,) + _gvm_collect(ctx, params, problems, key)
    if c.adaptive.policy == "dapo":
        return _dapo_collect(ctx, params, iterator, problems, key, state)
    _, batch, toks, mask, met = run_engine(ctx, params, problems, key)
    return problems, batch, toks, mask, met


def _collect_with_hints(ctx, params, problems, key, levels_state):
    """Self-hinting over the whole batch: hint levels and re-rolls are decided from replicated
    counters on every process alike; each process samples its own rows (`own_share`)."""
    c = ctx.config
    problems = everyone(problems)
    share = lambda x: None if x is None else own_share(x)  # noqa: E731

    def rerun(probs, k, budgets, hint_texts):
        _, b, t, m, met = run_engine(ctx, params, share(probs), k, share(budgets),
                                     share(hint_texts))
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
    before = {f"{k}_before_hints": v for k, v in selection.kept_metrics(batch).items()}
    batch, toks, mask, hmet = hints.sage(rerun, problems, batch, toks, mask, key,
                                         default_budgets(ctx, len(problems)))
    for k in hints.COUNTS:
        met[k] += hmet.pop(k)
    met.update(hmet, **before, **selection.kept_metrics(batch))  # what is trained on: post-hint
    return batch, toks, mask, met


_SUMMED = ("samples_total", "generated_tokens", "decode_steps", "chunks", "cut_tokens",
           "samples_launched")


def _dapo_collect(ctx, params, iterator, problems, key, state):
    """DAPO dynamic sampling: draw prompt batches (n samples each), keep groups with mixed
    rewards until B are collected. Past adaptive.dapo_max_gen_batches, dapo_at_cap="train"
    trains on the mixed groups found (the missing ones are masked-out groups, so shapes stay
    fixed), counts them (dapo_cap_hit, dapo_short_groups) and warns once per run; "error" stops
    the run as verl does. The kept-group count is global (read from replicated rewards), so on
    several processes every process draws alike and agrees when the batch is full."""
    c = ctx.config
    cap = c.adaptive.dapo_max_gen_batches
    drawn, kept, spare, met = [], [], [], {}  # per generation batch; (batch, row) pairs
    for gen_batch in range(cap):
        if gen_batch:
            problems = next(iterator)
        _, batch, toks, mask, m = run_engine(ctx, params, problems,
                                             jax.random.fold_in(key, gen_batch))
        drawn.append((everyone(problems), batch, toks, mask))
        # Shares and ratios describe the first (fresh) batch; costs add up over all.
        met = m if not met else {k: met[k] + m[k] if k in _SUMMED else met[k] for k in met}
        r, valid = np.asarray(batch.reward_BG), np.asarray(batch.mask_BG)
        n_pos = (r * valid).sum(1)
        is_mixed = (n_pos > 0) & (n_pos < valid.sum(1))
        kept += [(gen_batch, i) for i in np.flatnonzero(is_mixed)]
        B = len(is_mixed)
        if len(kept) >= B:
            break
        spare = [(gen_batch, i) for i in np.flatnonzero(~is_mixed)][:B]  # the latest batch's
    short = max(B - len(kept), 0)
    met.update(dapo_gen_batches=gen_batch + 1, dapo_cap_hit=int(short > 0),
               dapo_short_groups=short)
    if short:
        msg = (f"DAPO dynamic sampling: {cap} generation batches gave only {len(kept)} of {B} "
               f"groups with mixed rewards")
        if c.adaptive.dapo_at_cap == "error":
            raise RuntimeError(f"{msg}; raise config.adaptive.dapo_max_gen_batches, lower "
                               f"config.rl.prompts_per_step, or set "
                               f"config.adaptive.dapo_at_cap='train'")
        if not state.get("dapo_warned"):
            log.warning("%s: training on those (the step's other %d groups are masked out; "
                        "metrics dapo_cap_hit, dapo_short_groups count it). Warned once per "
                        "run; raise config.adaptive.dapo_max_gen_batches to sample further.",
                        msg, short)
            state["dapo_warned"] = True
    chosen = (kept + spare[:short])[:B]
    flat = np.asarray([g * B + i for g, i in chosen], np.int32)  # rows of the drawn batches
    batch, toks, mask = jax.block_until_ready(_dapo_assemble(
        [d[1:] for d in drawn], flat, np.arange(B) < len(kept)))
    batch = selection.readable_batch(batch)
    every = [p for d in drawn for p in d[0]]
    return [every[j] for j in flat], batch, toks, mask, met


@jax.jit
def _dapo_assemble(drawn, flat, real_B):
    """(batch, toks, mask) of rows `flat` of the drawn (batch, toks, mask)s stacked, the groups
    past the kept ones (real_B false) masked out: one program (on several processes a gather
    across them, waited for by the caller)."""
    batch, toks, mask = jax.tree.map(lambda *xs: jnp.concatenate(xs)[flat], *drawn)
    real = real_B[:, None]
    return batch.replace(mask_BG=batch.mask_BG & real, len_BG=jnp.where(real, batch.len_BG, 0),
                         reward_BG=jnp.where(real, batch.reward_BG, 0.0)), toks, mask


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
    sum to gvm_budget_per_prompt·B; then the prompts are sampled again with those budgets.
    Budgets are solved over the whole batch on every process alike; each process samples its
    own rows with its share of them."""
    c, a = ctx.config, ctx.config.adaptive
    _, pilot, toks, mask, pmet = run_engine(ctx, params, problems, jax.random.fold_in(key, 0),
                                            np.full(len(problems), a.gvm_pilot))
    B = len(pilot.pool_n_B)  # the whole batch (every process's rows)
    rows = training_rows(pilot, toks, mask, B * a.gvm_pilot)  # every pilot sample, no padding
    norms = sharding.to_host(sample_grad_norms(
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
                                           own_share(budgets))
    for k in _SUMMED:
        met[k] += pmet[k]
    met.update(gvm_pilot_samples=pmet["samples_total"], gvm_zero_budget=int((budgets == 0).sum()),
               all_correct_before=pmet["all_correct_before"],
               all_wrong_before=pmet["all_wrong_before"])
    return batch, toks, mask, met
