"""Streaming collection (adaptive.mode='stream', over adaptive.policy 'seq' or 'uniform'): one
persistent refill engine (`ada_jax.stream.Stream`) samples up to adaptive.stream.max_lag steps
ahead; each step admits queued prompts into its free rows, runs it until the step's groups are
complete, and claims them. adaptive.stream.ahead prompts (-1 = max_lag x prompts_per_step, the
most allowed) are admitted ahead of each step so slots need not wait for a straggler; trained
samples may be up to max_lag updates old (PPO-corrected), unless on_policy, which restarts
carried-over prompts.

State: `state["stream"]`, the Stream (None in other modes; its engine state goes into the
checkpoint's arrays (`arrays`, `restore_arrays`) and its table into the meta as `stream`), and
`state["pending"]`, prompts drawn but not yet admitted (checkpointed as `pending`).
"""
import dataclasses

import jax

from ada_jax import evaluate
from ada_jax import stream as stream_lib
from ada_jax.policies import rollout
from ada_jax.policies.settings import Setting
from ada_jax.tasks.problem import Problem

LABEL = "stream"  # the display name (plots, tables)
SETTINGS = {  # ahead and max_lag: checked by `check` (in stream mode only)
    "ahead": Setting(-1, "stream: prompts admitted ahead of a step (-1 = max_lag x "
                     "prompts_per_step)", "—"),
    "max_lag": Setting(1, "stream: updates a trained sample may lag the policy",
                       "— / (async off-policy lag)"),
    "on_policy": Setting(False, "stream: restart carried-over prompts (no stale samples)", "—",
                         "bool"),
}


def check(config) -> None:
    """In stream mode: max_lag >= 1 and -1 <= ahead <= max_lag x rl.prompts_per_step."""
    a = config.adaptive
    if a.mode != "stream":
        return
    lag, ahead = a.stream.max_lag, a.stream.ahead
    if isinstance(lag, bool) or not isinstance(lag, int) or lag < 1:
        raise ValueError(f"config.adaptive.stream.max_lag={lag!r}: must be an integer >= 1 "
                         f"(updates a trained sample may be behind the policy)")
    most = lag * config.rl.prompts_per_step
    if isinstance(ahead, bool) or not isinstance(ahead, int) or not -1 <= ahead <= most:
        raise ValueError(f"config.adaptive.stream.ahead={ahead!r}: must be -1 (= max_lag x "
                         f"rl.prompts_per_step) or in [0, {most}] (further ahead, samples "
                         f"would be more than max_lag updates old)")

_NO_PROBLEM = Problem(id=0, question="", answer="")  # reward data of a free stream row


def engine_fields(config) -> dict:
    """The stream runs the refill engine (over seq's or uniform's rule and budget)."""
    return {"mode": "refill"}


def prompts_ahead(config) -> int:
    """Prompts admitted ahead of a step: adaptive.stream.ahead, -1 = max_lag x B."""
    s = config.adaptive.stream
    return s.max_lag * config.rl.prompts_per_step if s.ahead < 0 else s.ahead


def make_stream(ctx, params):
    """The persistent streaming engine of adaptive.mode='stream' (empty), or None."""
    c = ctx.config
    if c.adaptive.mode != "stream":
        return None
    return stream_lib.Stream(ctx.engine, ctx.generator, prompts=c.rl.prompts_per_step,
                             ahead=prompts_ahead(c), prompt_len=c.sampling.max_prompt_len,
                             group=ctx.group, on_policy=c.adaptive.stream.on_policy,
                             max_lag=c.adaptive.stream.max_lag, calls=c.rl.steps,
                             pad_multiple=c.sampling.pad_multiple).init(
                                 params, ctx.mesh, c.sharding_rules)


def init_state(ctx, params) -> dict:
    return {"stream": make_stream(ctx, params), "pending": []}


def checkpoint(state) -> dict:
    if state["stream"] is None:
        return {}
    return {"stream": state["stream"].meta(dataclasses.asdict),
            "pending": [dataclasses.asdict(p) for p in state["pending"]]}


def restore(meta) -> dict:
    return {"pending": [Problem(**d) for d in meta.get("pending", [])]}


def arrays(state) -> dict:
    """The stream's engine state, saved with the params (mid-stream; its table: the meta)."""
    return {} if state["stream"] is None else {"stream": state["stream"].arrays()}


def restore_arrays(state, arrays: dict, meta: dict) -> None:
    """The stream's engine state and table back from a checkpoint, in place."""
    if state["stream"] is not None:
        state["stream"].restore(arrays["stream"], meta["stream"], lambda d: Problem(**d))


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    """Admit queued prompts into the stream's free rows (drawing prompt batches as needed; the
    rest waits in state["pending"]), run it until this step's groups are complete, claim them.

    On several processes each reads its own block of every batch drawn and the blocks are
    gathered (`rollout.everyone`): every process keeps the whole table's bookkeeping alike
    (admits, claims, checkpoint meta), while the engine state is laid out over every device and
    each process decodes and scores the slots its own devices hold."""
    c, s = ctx.config, state["stream"]
    while len(state["pending"]) < s.free():
        state["pending"] += rollout.everyone(next(iterator))
    new, state["pending"] = state["pending"][:s.free()], state["pending"][s.free():]
    if new:
        toks, mask = evaluate.encode_prompts(ctx.tokenizer, new, c.task.template,
                                             c.sampling.max_prompt_len)
        s.admit(new, toks, mask, rollout.default_budgets(ctx, len(new)))
    rows = [p or _NO_PROBLEM for p in s.items]
    if ctx.math_pool is None:
        s.run(params, key, reward_fn=ctx.reward_fn,
              reward_data=rollout.reward_data(c, ctx.tokenizer, rows))
    else:
        s.run(params, key, score=rollout.host_score(ctx, [p.answer for p in rows]))
    got = s.claim(drop_unresolved=rollout.drops_unresolved(c))
    toks, mask = got.prompt_BP, got.mask_BP
    if jax.process_count() > 1:  # global arrays, as run_engine's (host copies on one process)
        toks, mask = s.place(toks), s.place(mask)
    return rollout.Collected(got.items, got.batch, toks, mask, got.metrics)
