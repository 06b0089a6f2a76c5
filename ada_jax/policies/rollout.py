"""What every collection policy shares: the step's result (`Collected`), one engine call on a
batch of problems (`run_engine`), the rewards it scores with (a jittable verifier, or the math
verifier on the host: `host_score`), and a batch's sharing across processes (`everyone`,
`own_share`).

Shapes: B prompts, P prompt length, S slots, N max new tokens.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ada_jax import adaptive, evaluate, sampling, selection, sharding
from ada_jax.rewards import synthetic
from ada_jax.rewards.embedded import encode_answers, token_scorer
from ada_jax.tasks import task_of
from ada_jax.tasks.problem import Problem

ANSWER_LEN = 16  # max answer tokens for the jittable verifier

# Engine costs that add up over several engine calls in one step (the other metrics describe
# the step's first, fresh call).
SUMMED = ("samples_total", "generated_tokens", "decode_steps", "chunks", "cut_tokens",
          "samples_launched")


@dataclasses.dataclass
class Collected:
    """One step's training groups, as a policy hands them to the learner."""
    problems: list  # the step's prompts (Problem): this process's rows, or, for DAPO and the
    #                 stream, the whole batch in group order
    batch: selection.Batch  # the kept groups [B, G, …] and pool counters
    prompt_BP: jax.Array  # prompt tokens of the groups (global arrays on several processes)
    mask_BP: jax.Array
    metrics: dict

    def __iter__(self):  # unpacks as the (problems, batch, toks, mask, metrics) it replaces
        return iter((self.problems, self.batch, self.prompt_BP, self.mask_BP, self.metrics))


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
    task = task_of(config)
    gate = task.reward_gate(config) if task.reward_gate else None  # e.g. the right marker

    def reward(data, prompt_S, seq_S, tokens_SN, lengths_S):
        idx = jnp.maximum(prompt_S, 0)
        ok_S = scorer(tokens_SN, lengths_S, data["answer_ids"][idx], data["answer_len"][idx])
        if gate is not None:
            ok_S = ok_S * gate(data, idx, tokens_SN, lengths_S)
        return ok_S
    return reward


def uses_math_verifier(config) -> bool:
    return config.task.reward == "verifier" and task_of(config).host_verifier


def math_pool(config):
    """The math-verify worker pool for math-file tasks, else None."""
    if not uses_math_verifier(config):
        return None
    from ada_jax.rewards.math_verifier import MathVerifierPool
    return MathVerifierPool.from_config(config)


def reward_data(config, tokenizer, problems) -> dict:
    if config.task.reward == "synthetic":
        return dict(threshold=jnp.asarray(synthetic.thresholds([p.id for p in problems],
                                                               config.model.vocab_size)))
    ans, ans_len = encode_answers(tokenizer, [p.answer for p in problems], ANSWER_LEN)
    data = dict(answer_ids=jnp.asarray(ans), answer_len=jnp.asarray(ans_len))
    task = task_of(config)
    if task.reward_data:  # what the task's reward gate reads (`make_reward`)
        data.update({k: jnp.asarray(v) for k, v in task.reward_data(config, tokenizer,
                                                                      problems).items()})
    return data


def host_score(ctx, answers):
    """score(prompt_S, seq_S, tokens_SN, len_S) for the engine's host loop: the math verifier
    on the decoded completions against answers[prompt]."""
    def score(prompt_S, seq_S, tokens_SN, len_S):
        texts = [ctx.tokenizer.decode(t[:n].tolist()) for t, n in zip(tokens_SN, len_S)]
        return ctx.math_pool.score(texts, [answers[i] for i in prompt_S])
    return score


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


def default_budgets(ctx, n_prompts: int) -> np.ndarray:
    """Per-prompt sample budgets: M·R for sequential exits, else the rows per prompt."""
    a = ctx.config.adaptive
    per = a.samples_per_round * a.max_rounds if a.policy == "seq" else ctx.rows_per_prompt
    return np.full(n_prompts, per)


def capped_group(mean: int) -> tuple[int, int]:
    """(G, training rows per prompt) of budgets that average `mean` samples a prompt and are
    capped at 4x it, every sample trained (est, gvm)."""
    return 4 * mean, mean


def drops_unresolved(config) -> bool:
    """Passive filtering at budget: Ada-Seq groups whose exit rule failed are masked out."""
    return config.adaptive.policy == "seq" and config.adaptive.at_budget == "drop"


def run_engine(ctx, params, problems, key, budgets=None, hint_texts=None) -> Collected:
    """One engine call on a batch of problems (optionally with hints in the prompts).

    On several processes `problems` and `budgets` are this process's rows of the batch: the
    prompts become one global array (`sharding.global_batch`), so the returned prompt ids and
    mask are global, each process scores only its own slots, and the per-prompt counters and
    kept-group masks come back replicated, so every process computes the same metrics."""
    c = ctx.config
    toks, mask = evaluate.encode_prompts(ctx.tokenizer, problems, c.task.template,
                                         c.sampling.max_prompt_len, hint_texts)
    # The engine prefills the step's prompts at their own width (sampling.pad_multiple); the
    # learner's rows keep max_prompt_len columns (it trims them itself: rl.pad_multiple).
    run_toks, run_mask = sampling.trim_left_padding(toks, mask, c.sampling.pad_multiple,
                                                    across_processes=True)
    if budgets is None:
        budgets = default_budgets(ctx, len(problems))
    on_mesh = functools.partial(sharding.global_batch, ctx.mesh, c.sharding_rules)
    toks, mask, budgets = on_mesh(toks), on_mesh(mask), on_mesh(np.asarray(budgets, np.int32))
    run_toks, run_mask = jnp.asarray(on_mesh(run_toks)), jnp.asarray(on_mesh(run_mask))
    budgets = jnp.asarray(budgets, jnp.int32)
    if ctx.math_pool is None:
        st = adaptive.run(params, run_toks, run_mask, budgets,
                          jax.tree.map(on_mesh, reward_data(c, ctx.tokenizer, problems)), key,
                          cfg=ctx.engine, gen_fn=ctx.generator, reward_fn=ctx.reward_fn,
                          group=c.rl.n)
    else:  # math files: the host scores finished samples between decode chunks
        answers = [a for part in sharding.allgather_json([p.answer for p in problems])
                   for a in part]  # any process's slot may hold any prompt's sample
        st = adaptive.run_host(params, run_toks, run_mask, budgets, key,
                               cfg=ctx.engine, gen_fn=ctx.generator,
                               score=host_score(ctx, answers), group=c.rl.n)
    drop = None
    if drops_unresolved(c):
        drop = ~adaptive._rule_met(ctx.engine, st.n_samples, st.n_pos)
    st, batch = selection.select_readable(st, ctx.group, drop)
    return Collected(problems, batch, toks, mask, selection.metrics(ctx.engine, st, batch,
                                                                    c.rl.n))
