"""The RL loop: sample (adaptive engine) → score → select → advantages → PPO updates.

`train_and_evaluate(config, workdir)` resumes from the newest readable checkpoint in the
workdir (params, optimizer, DARO weights, step, data position, Ada-Est history); the step's RNG
is fold_in(seed, step), so a resumed run replays exactly what an uninterrupted one would.
Metrics go to `metrics.jsonl` (strict JSON) and TensorBoard (`tb/`) every step; evaluation
every `eval.every` steps and on the `eval.every_cost` grid; checkpoints every
`checkpoint.every` steps, at the end (`rl.steps`, or the step that spends `rl.cost_budget`),
and at a pre-emption notice (ada_jax.preemption). The workdir is locked for the run
(ada_jax.rundir); a diverging run stops (`Diverged`, optim.max_skipped_steps), and so does a
collapsing one (`collapse.Collapsed`, optim.collapse_steps, optim.stop_on_collapse).

Shapes: B prompts per step, G kept samples per prompt, R = B·G training rows, P prompt
length, N max new tokens.
"""
import contextlib
import dataclasses
import logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ada_jax import (adaptive, base_policy, collapse, collect, evaluate, generators,
                     host_memory, learn, memory, preemption, run_config, rundir, selection,
                     sharding, sft)
from ada_jax import model as model_lib
from ada_jax.metrics_log import MetricsWriter, _wandb, _write_atomic
from ada_jax.checkpoint import Checkpointer, UnreadableCheckpoints, abstract_like, read_policy
from ada_jax.config_check import config_changes, validate
from ada_jax.policies import rollout
from ada_jax.tasks import PromptIterator, load_split, task_of
from ada_jax.tokenizer import load_tokenizer

log = logging.getLogger(__name__)


class Diverged(RuntimeError):
    """optim.max_skipped_steps updates were skipped with none applied in between."""


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
    generator: generators.ModelGenerator
    reward_fn: Any
    group: int  # G: kept samples per prompt
    rows_per_prompt: int  # training rows per prompt (R = B · rows_per_prompt)
    train_source: Any
    eval_problems: list
    train_eval_problems: list  # the first eval.train_prompts training problems (may be [])
    math_pool: Any = None  # MathVerifierPool for math-file tasks (host-side reward)


# ----------------------------------------------------------------------------- main loop
def check_batches(config, rows_per_prompt: int) -> None:
    """The training rows per step must split into minibatches, and those (and the replayed SFT
    rows of an update) into micro-batches."""
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
    if config.loss.replay_coef > 0 and config.loss.replay_rows % rl.microbatches:
        raise ValueError(f"config.rl.microbatches={rl.microbatches} must divide the "
                         f"config.loss.replay_rows={config.loss.replay_rows} replayed SFT rows "
                         f"of an update (they are micro-batched as the policy's)")


# What sizes each part of memory.estimate, for check_memory's message.
_SIZED_BY = {
    "block_tmp": "the learner's micro-batch: rl.prompts_per_step x rl.n rows / rl.minibatches / "
                 "rl.microbatches, sampling.max_prompt_len + max_new_tokens long",
    "slot_kv": "adaptive.slots x (sampling.max_prompt_len + max_new_tokens)",
    "prompt_kv": "rl.prompts_per_step x sampling.max_prompt_len",
    "batch": "rl.prompts_per_step x rl.n training rows",
    "engine": "the engine's pools: rl.prompts_per_step, rl.n, adaptive.samples_per_round x "
              "max_rounds",
    "adam": "the model's size",
    "eval": "eval.k x (eval.prompts + eval.train_prompts) rows",
}
_SIZED_BY.update(remat_saved=_SIZED_BY["block_tmp"], logits=_SIZED_BY["block_tmp"],
                 decode_tmp=_SIZED_BY["slot_kv"], prefill_tmp=_SIZED_BY["prompt_kv"],
                 params=_SIZED_BY["adam"], grads=_SIZED_BY["adam"])


def eval_host_bytes(config) -> int:
    """Host bytes of an eval's rows (evaluate.sample_completions holds every row at once: its
    prompt ids as Python lists while encoding, up to 36 bytes a token, then as int32 tokens and
    a mask, its completion text and score): about 41 x max_prompt_len + 4 x max_new_tokens +
    150 bytes a row."""
    e, s = config.eval, config.sampling
    return e.k * (e.prompts + e.train_prompts) * (41 * s.max_prompt_len + 4 * s.max_new_tokens
                                                    + 150)


def check_memory(config) -> None:
    """Refuse, before anything compiles, a run whose predicted memory on this host exceeds the
    machine's (a huge rl.n or eval.k ran until killed), naming the largest part and the fields
    that size it; check.memory=False runs anyway. On a CPU the whole run is on the host
    (memory.host_peak_bytes); on an accelerator the eval's rows are."""
    if not config.check.memory:
        return
    on_cpu = jax.default_backend() == "cpu"
    parts = {"eval": eval_host_bytes(config)}
    if on_cpu:
        est = memory.estimate(config, devices=1, hbm_gib=1e6, platform="cpu")
        parts.update({k: est[k] for k in _SIZED_BY if k != "eval"})
    peak = (memory.host_peak_bytes(config) if on_cpu else memory.HOST_RUNTIME_BYTES) \
        + parts["eval"]
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if peak <= have:
        return
    big = max(parts, key=parts.get)
    raise MemoryError(
        f"this run's predicted peak memory on the host, {peak / memory.GiB:.1f} GiB, exceeds "
        f"the machine's {have / memory.GiB:.1f} GiB; its largest part, {big} "
        f"({parts[big] / memory.GiB:.1f} GiB), is sized by {_SIZED_BY[big]}: lower them, or "
        f"pass --config.check.memory=False to run anyway")


def check_resume(config, workdir: str) -> None:
    """Refuse to resume a workdir whose config.json differs from `config` in a field outside
    config_check.RESUMABLE, naming each: other shapes would make every checkpoint unrestorable,
    other settings would silently splice two experiments. config.checkpoint.allow_config_change
    overrides (for settings that leave the array shapes alone)."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return
    changed, only_one = config_changes(run_config.read_saved(path), config)
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


def check_multihost(config, mesh) -> None:
    """On several processes: per-host data needs the step's prompts to split into one block
    per process along the mesh's batch axes, and per-host scoring the slots to split over
    every device. Every policy, engine mode and hint scheduler runs (ada_jax/policies/)."""
    n = jax.process_count()
    if n == 1:
        return
    a = config.adaptive
    try:
        sharding.process_rows(mesh, config.sharding_rules, config.rl.prompts_per_step)
    except ValueError as e:
        raise ValueError(f"config.rl.prompts_per_step={config.rl.prompts_per_step}: {e} "
                         f"(per-host data)") from None
    slots = collect.useful_slots(config)  # the engine's: adaptive.slots, capped
    if slots % mesh.size:
        capped = f" (capped at {slots}: collect.useful_slots)" if slots != a.slots else ""
        raise ValueError(f"config.adaptive.slots={a.slots}{capped} must be a multiple of the "
                         f"{mesh.size} devices on {n} processes (per-host scoring: each "
                         f"process scores the slots on its own devices)")


def setup(config, workdir: str):
    """Mesh, tokenizer, data, model (from the base checkpoint), engine: (ctx, params). Every
    check runs before the base policy is loaded or trained."""
    validate(config)
    engine, group, rows_per_prompt = collect.engine_config(config)
    check_batches(config, rows_per_prompt)
    check_memory(config)
    sharding.maybe_initialize_distributed(config.distributed)
    mesh = sharding.make_mesh(config.mesh)
    check_multihost(config, mesh)
    tokenizer = load_tokenizer(config)
    model_cfg = model_lib.ModelConfig.from_config(config.model)
    scfg = evaluate.sampling_config(config, tokenizer, config.sampling.temperature)
    eval_source = load_split(config, "eval", tokenizer)
    eval_problems = [eval_source[i] for i in range(min(config.eval.prompts, len(eval_source)))]
    train_source = load_split(config, "train", tokenizer)
    if config.rl.prompts_per_step > len(train_source):
        raise ValueError(f"config.rl.prompts_per_step={config.rl.prompts_per_step} exceeds the "
                         f"{len(train_source)} training problems")
    if config.eval.train_prompts > len(train_source):
        raise ValueError(f"config.eval.train_prompts={config.eval.train_prompts} exceeds the "
                         f"{len(train_source)} training problems: pass at most "
                         f"{len(train_source)}")
    train_eval = [train_source[i] for i in range(config.eval.train_prompts)]
    graphdef, params = base_policy.load(config, workdir, mesh, tokenizer)
    ctx = Context(config=config, mesh=mesh, tokenizer=tokenizer, model_cfg=model_cfg,
                  graphdef=graphdef, engine=engine,
                  generator=generators.ModelGenerator(graphdef, model_cfg, scfg),
                  reward_fn=rollout.make_reward(config, tokenizer), group=group,
                  rows_per_prompt=rows_per_prompt,
                  train_source=train_source, eval_problems=eval_problems,
                  train_eval_problems=train_eval,
                  math_pool=rollout.math_pool(config))
    return ctx, params


def run_evals(ctx: Context, params, key) -> dict:
    """avg@k / pass@k on the held-out eval prompts (`eval/…`) and, when eval.train_prompts > 0,
    on a fixed set of training prompts (`train_eval/…`: what RL optimises on a finite pool);
    `eval/samples`: up to 4 held-out completions spread over the levels (TensorBoard text)."""
    out = {}
    for prefix, problems in (("eval", ctx.eval_problems), ("train_eval", ctx.train_eval_problems)):
        if problems:
            ev = evaluate.evaluate(ctx.graphdef, params, ctx.tokenizer, problems, ctx.config,
                                   jax.random.fold_in(key, len(out)),
                                   samples_per_level=int(prefix == "eval"))
            out.update({f"{prefix}/{k}": v for k, v in ev.items() if not isinstance(v, list)})
            if prefix == "eval":  # one per level: keep every ceil(levels / 4)-th
                out["eval/samples"] = ev["samples"][::-(-len(ev["samples"]) // 4) or 1]
    return out


def init_train_state(ctx: Context, params):
    """(optimizer, trainable = {model, daro log-weights}, optimizer state), all on the mesh."""
    c = ctx.config
    optimizer = learn.make_optimizer(c)
    n_daro = max(c.rl.daro_buckets or c.rl.n, 2) - 1
    trainable = sharding.place_on_mesh(
        {"model": params, "daro": jnp.zeros((n_daro,), jnp.float32)}, ctx.mesh)
    return optimizer, trainable, sharding.place_on_mesh(optimizer.init(trainable), ctx.mesh)


def restore_checkpoint(ckpt: Checkpointer, trainable, opt_state, start_over: bool = False,
                       state=None):
    """(step, trainable, opt_state, meta) from the newest readable checkpoint, or None if there
    is none (or none readable and `start_over`; see Checkpointer.restore_latest). With the
    policies' `state` (collect.init_state), the array state they keep (a stream's engine) is
    restored into it too."""
    arrays = {"trainable": trainable, "opt": opt_state,
              **(collect.arrays(state) if state is not None else {})}
    restored = ckpt.restore_latest(abstract_like(arrays), start_over)
    if restored is None:
        return None
    step, arrays, meta = restored
    if state is not None:
        collect.restore_arrays(state, arrays, meta)
    return step, arrays["trainable"], arrays["opt"], meta


def restore_policy(ctx: Context, params, workdir: str):
    """(step, params) of the policy in the workdir's newest readable checkpoint, or None if it
    has none. Reads the params alone: an evaluation holds neither the optimizer's state (twice
    the params under AdamW) nor the policies' arrays. `params`: the model's params as set up
    (the layout to read into)."""
    placed = sharding.place_on_mesh(params, ctx.mesh)
    del params
    return read_policy(workdir, abstract_like(placed))


def train_and_evaluate(config, workdir: str) -> dict:
    """Train config.rl.steps steps (resuming the workdir's newest readable checkpoint); returns
    the last step's metrics. The workdir is checked first and locked for the run's life
    (rundir: a second run on it is refused at once); its config.json is compared
    (check_resume) and rewritten only once every check has passed."""
    validate(config)
    if config.log.wandb:
        _wandb()  # a missing package stops the run now, not after SFT
    rundir.check(workdir)
    sharding.maybe_initialize_distributed(config.distributed)  # each process's lock
    base_policy.check_base_dir(config, workdir)
    created, started = rundir.make(workdir), False
    try:
        with rundir.lock(workdir):
            check_resume(config, workdir)
            ctx, params = setup(config, workdir)
            started = True
            return _train(ctx, params, workdir)
    except BaseException:  # e.g. a missing data file: leave no empty workdir behind
        if not started:
            rundir.remove_empty(created)
        raise


def _train(ctx: Context, params, workdir: str) -> dict:
    """train_and_evaluate's loop, from the restored checkpoint (if any) to config.rl.steps
    or the step that spends config.rl.cost_budget."""
    c = config = ctx.config
    rows_per_step = c.rl.prompts_per_step * ctx.rows_per_prompt
    optimizer, trainable, opt_state = init_train_state(ctx, params)
    iterator = PromptIterator(ctx.train_source, c.rl.prompts_per_step, seed=c.seed,
                              rows=sharding.process_rows(ctx.mesh, c.sharding_rules,
                                                         c.rl.prompts_per_step))
    # What persists across steps besides params: what the policies declare (Ada-Est history,
    # hint levels, the stream; ada_jax/policies/).
    state = collect.init_state(ctx, trainable["model"])
    replay = sft.Replay(c, ctx.tokenizer) if c.loss.replay_coef > 0 else None
    task_metrics = task_of(c).train_metrics  # the task's own per-step metrics, or None
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), c.checkpoint.keep)
    ckpt.remove_partial()  # of a save cut short (this process holds the workdir's lock)
    start = 0
    try:
        restored = restore_checkpoint(ckpt, trainable, opt_state,
                                      c.checkpoint.start_over_if_unreadable, state)
    except UnreadableCheckpoints as e:
        raise UnreadableCheckpoints(f"{e} Or set --config.checkpoint.start_over_if_unreadable"
                                    f"=True to train this workdir from step 0.") from None
    watch = collapse.Watch(c.optim.collapse_steps, c.eval.k,
                           len(ctx.train_eval_problems) * c.eval.k)
    if restored is not None:
        start, trainable, opt_state, meta = restored
        watch.restore(meta.get("collapse"))
        iterator.restore(meta["iterator"])
        state.update(collect.restore(meta))
        if replay is not None and "replay" in meta:
            replay.restore(meta["replay"])
        elif replay is not None:  # turned on at this resume (checkpoint.allow_config_change)
            log.info("loss.replay_coef is on from step %d: replay starts the SFT corpus", start)
        log.info("resumed from step %d", start)
    writer = MetricsWriter(workdir, start, c)
    _write_atomic(os.path.join(workdir, "config.json"),
                  config.to_json_best_effort(indent=1, sort_keys=True))
    # The reference policy for KL is the base policy (a copy: the learner's buffers are donated).
    ref_params = (jax.tree.map(jnp.copy, params) if c.loss.kl_coef > 0 else None)
    train_step = learn.make_train_step(ctx.graphdef, optimizer, c, c.rl.prompts_per_step)
    base_key = jax.random.key(c.seed)
    train_key, eval_key = jax.random.fold_in(base_key, 0), jax.random.fold_in(base_key, 1)
    totals = {"generated_tokens": 0, "samples": 0, "samples_launched": 0, "samples_trained": 0,
              "trained_tokens": 0, "replay_tokens": 0, "wall": 0.0}
    if start:  # from the checkpoint (every process has it; older ones: process 0's metrics)
        saved = meta.get("totals") or {f: writer.last.get(f"cum_{f}", 0) for f in totals}
        totals = {k: saved.get(k, 0) for k in totals}

    def save(step):
        host_memory.release_free_heap()  # what sampling or the learner freed, before the writes
        ckpt.save(step, {"trainable": trainable, "opt": opt_state, **collect.arrays(state)},
                  {"iterator": sharding.allgather_json(iterator.state()),
                   **collect.checkpoint(state), "step": step, "totals": dict(totals),
                   "collapse": watch.state(),
                   **({"replay": replay.state()} if replay is not None else {})})

    bar, skipped = _progress(c, start), 0  # updates skipped since the last one applied
    met = {k: v for k, v in writer.last.items() if k != "step"}  # returned if nothing is left
    with sharding.activate(ctx.mesh, c.sharding_rules), preemption.Notice() as notice, \
            contextlib.closing(writer), contextlib.closing(ckpt), contextlib.closing(bar):
        if start == 0 and (c.eval.every or c.eval.every_cost):
            first = (run_evals(ctx, trainable["model"], jax.random.fold_in(eval_key, 0))
                     | {f"cum_{k}": v for k, v in totals.items()} | cost(totals))
            watch.update(0, first)
            writer.write(0, first)
        end = start if out_of_budget(c, cost(totals)) else c.rl.steps
        for step in range(start, end):
            t0 = time.perf_counter()
            spent_before = spent(c, cost(totals))
            key = jax.random.fold_in(train_key, step)
            got = collect.collect(ctx, trainable["model"], iterator, key, state)
            batch, met = got.batch, got.metrics
            jax.block_until_ready(batch)
            t1 = time.perf_counter()
            rows = learn.prepare_rows(ctx, batch, got.prompt_BP, got.mask_BP, rows_per_step,
                                      ref_params, trainable["model"])
            t2 = time.perf_counter()
            replay_rows = (replay.rows(c.rl.ppo_epochs * c.rl.minibatches)
                           if replay is not None else None)
            trainable, opt_state, lmet = learn.learn(ctx, train_step, trainable, opt_state, rows,
                                                     step, replay_rows)
            t3 = time.perf_counter()
            if lmet["skipped"]:
                skipped += 1
                log.warning("step %d: update skipped (loss %g, grad_norm %g, update_ratio %g)",
                            step + 1, lmet["loss"], lmet["grad_norm"], lmet["update_ratio"])
            elif lmet["grad_norm"] > 0:  # an update applied (a zero gradient is no evidence)
                skipped = 0
            met.update(lmet)
            met.update(advantage_sums(rows))
            pool_n_B, pool_pos_B = np.asarray(batch.pool_n_B), np.asarray(batch.pool_pos_B)
            pass_rate_B = pool_pos_B / np.maximum(pool_n_B, 1)
            met["reward_mean"] = float(np.mean(pass_rate_B))
            met["lr"] = learning_rate(c, step)
            lens = np.asarray(batch.len_BG)[np.asarray(batch.mask_BG)]
            met["response_length"] = float(lens.mean()) if lens.size else 0.0
            met["samples_trained"] = int(lens.size) * c.rl.ppo_epochs
            met["trained_tokens"] = int(lens.sum()) * c.rl.ppo_epochs
            met["replay_tokens"] = (int(replay_rows["loss_mask"].sum())
                                    if replay is not None else 0)
            if task_metrics is not None:  # the task's own (the embedded task's style share)
                met.update(task_metrics(kept_texts(ctx.tokenizer, batch)))
            met.update(time_sampling=t1 - t0, time_scoring=t2 - t1, time_learning=t3 - t2)
            totals["generated_tokens"] += met["generated_tokens"]
            totals["samples"] += met["samples_total"]
            for k in ("samples_launched", "samples_trained", "trained_tokens", "replay_tokens"):
                totals[k] += met[k]
            totals["wall"] += t3 - t0
            met.update({f"cum_{k}": v for k, v in totals.items()}, **cost(totals))
            done = step + 1
            last = done == c.rl.steps or out_of_budget(c, met)
            if eval_due(c, done, last, spent(c, met), spent_before):
                met.update(run_evals(ctx, trainable["model"], jax.random.fold_in(eval_key, done)))
            solved = (int((pool_n_B > 0).sum()), int((pool_pos_B > 0).sum()))  # prompts
            if watch.update(done, met, solved):
                log.warning("%s", watch.message(done, c.optim))
            writer.write(done, met, {"pass_rate": pass_rate_B, "samples_per_prompt": pool_n_B,
                                     "kept_per_prompt": np.asarray(batch.mask_BG).sum(1),
                                     "response_length": lens})
            # Saved after a skipped (non-finite) update too: the state is the previous, finite
            # one, and a re-run would otherwise repeat that step forever.
            saved = done % c.checkpoint.every == 0 or last
            if saved:
                save(done)
            if notice.reached(done) and not last:  # every process at this step
                if not saved:
                    save(done)
                raise preemption.Preempted(done)
            if c.optim.max_skipped_steps and skipped >= c.optim.max_skipped_steps:
                raise Diverged(
                    f"step {done}: {skipped} updates skipped with none applied in between "
                    f"(non-finite loss, gradient or params, or an update over "
                    f"optim.max_update_ratio={c.optim.max_update_ratio:g} times the params; "
                    f"last loss {lmet['loss']:g}, grad_norm {lmet['grad_norm']:g}, "
                    f"update_ratio {lmet['update_ratio']:g}): the run diverged. Lower "
                    f"optim.lr ({c.optim.lr:g}) and resume with "
                    f"--config.checkpoint.allow_config_change=True")
            if c.optim.stop_on_collapse and met.get("collapsed"):
                raise collapse.Collapsed(watch.message(done, c.optim))
            bar.update(1)
            bar.set_postfix(reward=f"{met['reward_mean']:.2f}",
                            eff=f"{met['effective_prompt_ratio']:.2f}",
                            spp=f"{met['samples_per_prompt_mean']:.1f}",
                            **({"eval": f"{met[f'eval/avg@{c.eval.k}']:.3f}"}
                               if f"eval/avg@{c.eval.k}" in met else {}))
            if last:
                break
    return met


def advantage_sums(rows) -> dict:
    """Σ A and Σ |A| over the step's real training rows: a pool baseline's kept group does not
    sum to zero (docs/spec.md §4), a group baseline's does; both pin what an estimator did."""
    adv = np.asarray(rows["adv"], np.float64)[np.asarray(rows["real"])]
    return {"adv_sum": float(adv.sum()), "adv_abs_sum": float(np.abs(adv).sum())}


# A trained token's cost in generated tokens: a forward and a backward pass, about 3 forwards.
TRAIN_TOKEN_WEIGHT = 3


def cost(totals: dict) -> dict:
    """What a run has spent so far, the reference papers' way (training is not free;
    docs/spec.md §9): `cost_samples` = samples generated (launched, cut ones included) +
    samples trained (times PPO epochs);
    `cost_flop_tokens` = generated tokens + TRAIN_TOKEN_WEIGHT (3) x trained response tokens
    (prompts are the same for every method), plus 3 x the replayed SFT tokens
    (loss.replay_coef; not samples: nothing is generated)."""
    return {"cost_samples": totals["samples_launched"] + totals["samples_trained"],
            "cost_flop_tokens": totals["generated_tokens"] + TRAIN_TOKEN_WEIGHT * (
                totals["trained_tokens"] + totals["replay_tokens"])}


def spent(config, costs: dict) -> int:
    """A run's cost so far (`cost`'s dict) in rl.cost_unit, what rl.cost_budget and
    eval.every_cost count."""
    return costs[f"cost_{config.rl.cost_unit}"]


def out_of_budget(config, costs: dict) -> bool:
    """Whether a run with rl.cost_budget has spent it (in rl.cost_unit)."""
    return bool(config.rl.cost_budget) and spent(config, costs) >= config.rl.cost_budget


def eval_due(config, done: int, last: bool, cost_after: int, cost_before: int) -> bool:
    """Evaluate after step `done`: every eval.every steps, at the run's last step, and at the
    first step whose cost passes each multiple of eval.every_cost (cost before -> after it)."""
    e = config.eval
    if not (e.every or e.every_cost):
        return False
    grid = bool(e.every_cost) and cost_after // e.every_cost > cost_before // e.every_cost
    return last or grid or bool(e.every) and done % e.every == 0


def learning_rate(config, step: int) -> float:
    """The policy's learning rate at the last optimizer update of RL step `step` (from 0):
    learn.make_optimizer's schedule, linear warm-up over optim.warmup_steps updates, then
    optim.lr; a step makes ppo_epochs x minibatches updates."""
    o = config.optim
    update = (step + 1) * config.rl.ppo_epochs * config.rl.minibatches - 1
    return o.lr * min(1.0, update / o.warmup_steps) if o.warmup_steps else o.lr


def kept_texts(tokenizer, batch: selection.Batch) -> list[str]:
    """The step's kept completions, decoded (for the task's `train_metrics`)."""
    toks, lens = sharding.to_host(batch.tokens_BGN), np.asarray(batch.len_BG)
    keep = np.asarray(batch.mask_BG)
    return [tokenizer.decode(t[:n].tolist()) for t, n in zip(toks[keep], lens[keep])]


def _progress(config, start):
    from tqdm.auto import tqdm
    return tqdm(total=config.rl.steps, initial=start, desc=f"{config.algo}",
                disable=not config.log.progress, dynamic_ncols=True)
