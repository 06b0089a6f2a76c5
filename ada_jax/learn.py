"""Learning from collected groups: advantages, packed training rows, the jitted PPO update.

Shapes: B prompts, G kept samples per prompt, R training rows, P prompt length, N max new
tokens.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ada_jax import advantages, host_memory, logprobs, losses, selection, sharding, sft
from ada_jax import model as model_lib


def global_norm(tree) -> jax.Array:
    """‖tree‖₂ over all leaves, float32 (optax.global_norm is deprecated, optax.tree.norm new)."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)))


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """optax.clip_by_global_norm's rule, updates scaled by max_norm / ‖updates‖ when that is
    below 1, as one multiplication by a scalar: XLA repeats a multiplication in each of its
    uses (AdamW's two moments), where it computes optax's division once per element and keeps
    the whole clipped gradient (SmolLM2: 0.5 GiB). Same state (none)."""
    def update(updates, state, params=None):
        del params
        scale = jnp.minimum(1.0, max_norm / global_norm(updates))
        return jax.tree.map(lambda t: t * scale.astype(t.dtype), updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


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
        return optax.adamw(lr, b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay,
                           mu_dtype=o.get("mu_dtype") or None)

    if not o.daro_lr:
        return optax.chain(clip_by_global_norm(o.grad_clip), adamw(o.lr))
    labels = lambda t: {"model": jax.tree.map(lambda _: "model", t["model"]),  # noqa: E731
                        "daro": "daro"}
    return optax.chain(clip_by_global_norm(o.grad_clip),
                       optax.multi_transform({"model": adamw(o.lr), "daro": adamw(o.daro_lr)},
                                             labels))


def compute_advantages(config, batch: selection.Batch):
    """Per-sample advantages [B, G] for the configured estimator."""
    rl = config.rl
    if rl.advantage == "pool":
        return advantages.pool_baseline(
            batch.reward_BG, batch.mask_BG, batch.pool_n_B, batch.pool_pos_B,
            std_normalise=rl.std_normalise,
            weight_fn=rl.objective if rl.objective_weight else None,
            weight_alpha=rl.objective_alpha, correction=rl.importance_correction)
    return advantages.compute(rl.advantage, batch.reward_BG, batch.mask_BG)


def training_rows(batch: selection.Batch, toks_BP, mask_BP, rows: int):
    """Pack the valid samples of all groups into `rows` training rows (the rest masked):
    prompt+completion tokens [R, P+N], input and loss masks, old log-probs, and the packing
    (`flat` index into [B·G], `real` flag) that `pack` uses to place per-sample values."""
    B, G, N = batch.tokens_BGN.shape
    # Replicated first (one program on several processes), so the gathers below are local.
    batch, toks_BP, mask_BP = sharding.readable((batch, toks_BP, mask_BP))
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


def completion_hidden(model, tokens, mask, group, *, prompt_len: int, n_groups: int,
                      share: bool):
    """Final-normed hidden states [R, T - P, D] of rows [R, T] at the positions predicting
    their completion tokens (P = prompt_len), for logprobs.head_logprobs. With `share`, where the
    rows hold at least 2 per group on average, each group's prompt runs once
    (model.shared_prompt_logits: the same values up to float rounding); otherwise every row
    runs whole."""
    R, T = tokens.shape
    if share and R >= 2 * n_groups:
        return model_lib.shared_prompt_logits(model, tokens, mask, group, n_groups, prompt_len,
                                              hidden=True)
    hidden, _ = model(tokens, model_lib.positions_from_mask(mask), mask,
                      logits_slice=(prompt_len - 1, T - 1), hidden=True)
    return hidden


def completion_logprobs_entropy(model, tokens, mask, group, *, prompt_len: int, n_groups: int,
                                share: bool, temperature: float):
    """(log π, entropy) [R, T - P] float32 of the completion tokens of rows [R, T]."""
    hidden = completion_hidden(model, tokens, mask, group, prompt_len=prompt_len,
                               n_groups=n_groups, share=share)
    return logprobs.head_logprobs(model, hidden, tokens[:, prompt_len:], temperature)


@functools.partial(jax.jit, static_argnames=("graphdef", "prompt_len", "temperature",
                                             "n_groups", "share", "micro"))
def completion_logprobs(graphdef, params, tokens, mask, group, *, prompt_len, temperature,
                        n_groups, share, micro: int = 1):
    """log π(a_t | …) of the completion tokens [R, N] (float32), e.g. under the reference.
    micro > 1 runs the rows in that many sequential micro-batches (rows j, j + micro, …, as
    the learner splits them), so the [rows, N, V] logits exist for one micro-batch at a time."""
    model = nnx.merge(graphdef, params)

    def part(xs):
        t, m, g = xs
        return completion_logprobs_entropy(model, t, m, g, prompt_len=prompt_len,
                                           n_groups=n_groups, share=share,
                                           temperature=temperature)[0]

    R = tokens.shape[0]
    if micro <= 1 or R % micro:
        return part((tokens, mask, group))
    out = jax.lax.map(part, _strided_split((tokens, mask, group), micro))  # [micro, R/micro, N]
    return jnp.swapaxes(out, 0, 1).reshape(R, -1)


def decoupled(config) -> bool:
    """Whether the loss is decoupled PPO: loss.decoupled "on", or "auto" (the default) where
    trained samples can be stale, a stream that carries prompts over (not stream.on_policy)."""
    mode = config.loss.get("decoupled", "off")
    return mode == "on" or (mode == "auto" and config.adaptive.mode == "stream"
                            and not config.adaptive.stream.on_policy)


def prepare_rows(ctx, batch, toks, mask, rows_per_step, ref_params, params=None):
    """Training rows with advantages (and reference log-probs when KL is on; with
    decoupled PPO, the proximal log-probs under `params`, the learner's before this update)."""
    c = ctx.config
    rows = training_rows(batch, toks, mask, rows_per_step)
    if c.loss.credit_tokens > 0:  # ablation: credit the first k tokens only (e.g. the marker)
        first_k = jnp.arange(rows["loss_mask"].shape[1]) < c.loss.credit_tokens
        rows["loss_mask"] = rows["loss_mask"] & first_k[None]
    rewards = batch.reward_BG
    logprobs = functools.partial(completion_logprobs, ctx.graphdef,
                                 prompt_len=c.sampling.max_prompt_len,
                                 temperature=max(c.sampling.temperature, 1e-6),
                                 n_groups=rewards.shape[0], share=c.rl.share_prompts,
                                 micro=c.rl.microbatches)
    if decoupled(c):
        if params is None:
            raise ValueError("loss.decoupled needs the learner's params (the proximal policy)")
        rows["prox_logp"] = logprobs(params, rows["tokens"], rows["mask"], rows["group"])
    if ref_params is not None:
        rows["ref_logp"] = logprobs(ref_params, rows["tokens"], rows["mask"], rows["group"])
        if c.loss.kl_in_reward:  # β·Σ_t KL_t subtracted from each sample's outcome reward
            pen = losses.kl_reward_penalty(rows["old_logp"], rows["ref_logp"],
                                           rows["loss_mask"], c.loss.kl_coef, c.loss.kl_type)
            pen_BG = jnp.zeros(rewards.size).at[rows["flat"]].add(jnp.where(rows["real"], pen,
                                                                             0.0))
            rewards = rewards - pen_BG.reshape(rewards.shape)
    rows["adv"] = pack(rows, compute_advantages(c, batch.replace(reward_BG=rewards)))
    return rows


def _strided_split(tree, micro: int):
    """Rows [R, ...] -> [micro, R / micro, ...], micro-batch j holding rows j, j + micro, …:
    with rows sharded in contiguous blocks over the devices, every micro-batch spans them all."""
    return jax.tree.map(lambda x: jnp.swapaxes(x.reshape((-1, micro) + x.shape[1:]), 0, 1), tree)


def _sum_over(fn, xs):
    """Σ_j fn(xs[j]) (a pytree), one j at a time in a scan: micro-batches' weighted losses and
    gradients with one micro-batch's activations alive at once."""
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                         jax.eval_shape(fn, jax.tree.map(lambda x: x[0], xs)))
    total, _ = jax.lax.scan(lambda acc, x: (jax.tree.map(jnp.add, acc, fn(x)), None), zeros, xs)
    return total


def make_train_step(graphdef, optimizer, config, n_groups: int):
    """Jitted PPO minibatch update over {model, daro} params; skips a non-finite update, or
    one larger than optim.max_update_ratio times the params (in norm). The rows' prompt part
    is whatever precedes their completion columns (`trim_padding` may have cut both)."""
    l, rl = config.loss, config.rl
    max_ratio = config.optim.get("max_update_ratio", 0.0)
    temperature = max(config.sampling.temperature, 1e-6)
    N = config.sampling.max_new_tokens

    def loss_fn(trainable, mb, nan_now):
        model = nnx.merge(graphdef, trainable["model"])
        # The head at the completion positions only (those predicting tokens P..T-1).
        prompt_len = mb["tokens"].shape[1] - mb["loss_mask"].shape[1]
        logp, ent = completion_logprobs_entropy(model, mb["tokens"], mb["mask"], mb["group"],
                                                prompt_len=prompt_len, n_groups=n_groups,
                                                share=rl.share_prompts, temperature=temperature)
        kl_in_loss = "ref_logp" in mb and not l.kl_in_reward
        # Decoupled PPO: clip against the proximal policy, the sampler's log-probs as a weight.
        old, behav = (mb["prox_logp"], mb["old_logp"]) if "prox_logp" in mb else (mb["old_logp"],
                                                                                   None)
        loss, met = losses.policy_loss(
            logp, old, mb["adv"], mb["loss_mask"], clip_low=l.clip_low,
            clip_high=l.clip_high, dual_clip=l.dual_clip, agg=l.agg, max_len=N,
            n_groups=mb["tokens"].shape[0], entropy_BT=ent, entropy_coef=l.entropy_coef,
            ref_logp_BT=mb["ref_logp"] if kl_in_loss else None,
            kl_coef=l.kl_coef if kl_in_loss else 0.0, kl_type=l.kl_type,
            behav_logp_BT=behav, behav_cap=l.get("behav_cap", 0.0))
        if rl.daro:
            tok, _ = losses.ppo_token_loss(logp, old,
                                           jnp.broadcast_to(mb["adv"][:, None], logp.shape),
                                           clip_low=l.clip_low, clip_high=l.clip_high,
                                           dual_clip=l.dual_clip, behav_logp_BT=behav,
                                           behav_cap=l.get("behav_cap", 0.0))
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
        split = _strided_split(mb, micro)
        tokens_j = split["loss_mask"].sum((1, 2)).astype(jnp.float32)
        rows_j = (split["loss_mask"].sum(2) > 0).sum(1).astype(jnp.float32)
        if l.agg == "token_mean":
            w_j = tokens_j / jnp.maximum(tokens_j.sum(), 1.0)
        elif l.agg == "constant":
            w_j = jnp.full((micro,), 1.0 / micro)
        else:  # seq_mean_*: divided by the rows with tokens
            w_j = rows_j / jnp.maximum(rows_j.sum(), 1.0)
        wm_j = tokens_j / jnp.maximum(tokens_j.sum(), 1.0)

        def part(xs):
            rows, w, wm = xs
            (loss, met), g = grad_fn(trainable, rows, nan_now)
            met = {k: (w if k == "pg_loss" else wm) * v for k, v in met.items()}
            return w * loss, met, jax.tree.map(lambda x: w * x, g)

        loss, met, grads = _sum_over(part, (split, w_j, wm_j))
        return (loss, met), grads

    def replay_loss(model_params, replay):
        """(loss.replay_coef × the replayed SFT rows' log-loss, the log-loss)."""
        nll = sft.sequence_nll(nnx.merge(graphdef, model_params), replay["tokens"],
                               replay["mask"], replay["loss_mask"])
        return l.replay_coef * nll, nll

    replay_grad_fn = jax.value_and_grad(replay_loss, has_aux=True)

    def replay_grad(model_params, replay):
        """replay_loss and its gradient, over `micro` sequential micro-batches of the rows as
        the policy loss (bounded activation memory): micro-batch j's log-loss, weighted by
        its share of the scored tokens, sums exactly to the whole batch's token mean."""
        if micro == 1:
            return replay_grad_fn(model_params, replay)
        split = _strided_split(replay, micro)
        tokens_j = split["loss_mask"][:, :, 1:].sum((1, 2)).astype(jnp.float32)
        w_j = tokens_j / jnp.maximum(tokens_j.sum(), 1.0)

        def part(xs):
            rows, w = xs
            (weighted, nll), g = replay_grad_fn(model_params, rows)
            return w * weighted, w * nll, jax.tree.map(lambda x: w * x, g)

        weighted, nll, grads = _sum_over(part, (split, w_j))
        return (weighted, nll), grads

    @jax.jit
    def gradient(trainable, opt_state, mb, nan_now, replay=None):
        """(gradient, whether to apply it, metrics). The update is computed here for its norms
        only: decided apart from `apply_params` and `apply_state`, no copy of the new params or
        optimizer state is kept beside the old ones for the choice between them (SmolLM2:
        2.0 GiB of XLA temporaries in one program, the largest of the step)."""
        if micro > 1:
            (loss, met), grads = accumulated_grad(trainable, mb, nan_now)
        else:
            (loss, met), grads = grad_fn(trainable, mb, nan_now)
        if replay is not None:  # the SFT corpus's loss beside the policy's (sft.Replay)
            (weighted, nll), g = replay_grad(trainable["model"], replay)
            grads = {**grads, "model": jax.tree.map(jnp.add, grads["model"], g)}
            loss = loss + weighted
            met = dict(met, replay_nll=nll)
        gnorm = global_norm(grads)
        updates, _ = optimizer.update(grads, opt_state, trainable)
        # The update's size against the params': a diverging lr (1e3) moves them by thousands
        # of times their norm, after which every logit saturates and learning stops.
        ratio = global_norm(updates) / jnp.maximum(global_norm(trainable), 1e-12)
        # The new params too: a finite gradient times a NaN / inf learning rate is not finite.
        # Their norm is finite iff every element is (and the norm below 1.8e19): one scalar
        # behind a square root. An AND over each leaf's own check instead is cheap enough that
        # XLA copies it into every leaf's use: a program quadratic in the number of leaves
        # (30 layers: 58 MB of HLO, 2.7 GiB and minutes to compile on CPU).
        new = optax.apply_updates(trainable, updates)
        ok = jnp.isfinite(loss) & jnp.isfinite(gnorm) & jnp.isfinite(global_norm(new))
        if max_ratio > 0:
            ok &= ratio <= max_ratio
        return grads, ok, dict(met, loss=loss, grad_norm=gnorm, update_ratio=ratio,
                               skipped=(~ok).astype(jnp.float32))

    @functools.partial(jax.jit, donate_argnums=(0,))
    def apply_params(trainable, opt_state, grads, ok):
        """The params after the optimizer's update where `ok`, else unchanged: selected leaf by
        leaf, each new leaf computed and chosen in one pass in place (and keeping its
        sharding: under a `lax.cond` XLA may replicate it). The optimizer state is updated by
        `apply_state`, after: in one program that overwrites the state in place while the
        params' update still reads it, XLA copies the whole old state first (SmolLM2: 0.8 GiB
        of temporaries)."""
        updates, _ = optimizer.update(grads, opt_state, trainable)
        return jax.tree.map(lambda a, b: jnp.where(ok, a, b),
                            optax.apply_updates(trainable, updates), trainable)

    @functools.partial(jax.jit, donate_argnums=(0,))
    def apply_state(opt_state, grads, trainable, ok):
        """The optimizer state after the update where `ok`, else unchanged, in place. It does
        not read the params (clipping and AdamW's moments), so the new params may be passed."""
        _, new_opt = optimizer.update(grads, opt_state, trainable)
        return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new_opt, opt_state)

    compiled = set()

    def compile_first(fn, *args):
        """Compile `fn` for these shapes if not yet, then hand the compile's freed memory back
        to the OS before the program runs: glibc keeps it mapped, and the program's buffers
        come on top (SmolLM2: about 0.5 GiB of the step's peak)."""
        key = (fn, str(jax.tree.map(lambda x: (x.shape, x.dtype), args[2:])))
        if key not in compiled:
            fn.lower(*args).compile()  # jit's own cache: the call below reuses it
            host_memory.release_free_heap()
            compiled.add(key)

    def train_step(trainable, opt_state, mb, nan_now, replay=None):
        """(params, optimizer state, metrics) after one minibatch's update, which is skipped
        when not finite or too large; params and state are donated."""
        compile_first(gradient, trainable, opt_state, mb, nan_now, replay)
        grads, ok, met = gradient(trainable, opt_state, mb, nan_now, replay)
        compile_first(apply_params, trainable, opt_state, grads, ok)
        trainable = apply_params(trainable, opt_state, grads, ok)
        compile_first(apply_state, opt_state, grads, trainable, ok)
        opt_state = apply_state(opt_state, grads, trainable, ok)
        return trainable, opt_state, met

    # to lower and compile each
    train_step.gradient, train_step.apply_params = gradient, apply_params
    train_step.apply_state = apply_state
    return train_step


_ROW_COLUMNS = ("tokens", "mask")  # [R, P + N]: prompt then completion
_COMPLETION_COLUMNS = ("loss_mask", "old_logp", "prox_logp", "ref_logp")  # [R, N]


def trim_padding(rows, prompt_len: int, multiple: int):
    """The training rows cut to the columns that hold tokens: the prompt part from the batch's
    longest prompt on, the completion part up to its longest completion, each rounded up to a
    multiple of `multiple` (few distinct shapes, so few compiles) and capped at its full
    length; 0 keeps every column. Masked columns add nothing to the loss or the gradient, so
    the update is the same up to float rounding, while the learner's work falls with the
    padding (the family task's rows: 80 columns, about 27 used). Prompts may sit anywhere in
    their P columns; the cut keeps every column any row uses."""
    if multiple <= 0:
        return rows
    unknown = [k for k, v in rows.items() if np.ndim(v) >= 2
               and k not in _ROW_COLUMNS + _COMPLETION_COLUMNS]
    if unknown:
        raise ValueError(f"trim_padding does not know the columns of rows {unknown}")
    used = np.asarray(rows["mask"]).any(0)
    N = used.size - prompt_len
    first = int(np.argmax(used[:prompt_len])) if used[:prompt_len].any() else prompt_len
    in_completion = np.flatnonzero(used[prompt_len:])
    last = int(in_completion[-1]) + 1 if in_completion.size else 0
    round_up = lambda n, cap: min(cap, max(multiple, -(-n // multiple) * multiple))  # noqa: E731
    keep_p, keep_n = round_up(prompt_len - first, prompt_len), round_up(last, N)
    cut = {k: v[:, prompt_len - keep_p:prompt_len + keep_n] for k, v in rows.items()
           if k in _ROW_COLUMNS}
    cut.update({k: v[:, :keep_n] for k, v in rows.items() if k in _COMPLETION_COLUMNS})
    return {**rows, **cut}


def check_groups(rows, n_groups: int):
    """Raise unless the rows' groups are 0..n_groups-1 and the rows of a group hold one prompt
    (tokens and mask of the prompt columns): what shared prompts (rl.share_prompts) compute
    from. Every row builder here gives that; a new one that does not would otherwise train on
    another row's prompt without a sign."""
    group = np.asarray(rows["group"])
    P = rows["tokens"].shape[1] - rows["loss_mask"].shape[1]
    if group.min() < 0 or group.max() >= n_groups:
        raise ValueError(f"training rows' groups span {group.min()}..{group.max()}, outside "
                         f"0..{n_groups - 1} (config.rl.prompts_per_step)")
    mask = np.asarray(rows["mask"][:, :P])
    tokens = np.where(mask, np.asarray(rows["tokens"][:, :P]), 0)
    groups, first_row = np.unique(group, return_index=True)
    rep = first_row[np.searchsorted(groups, group)]  # each row's group's first row
    if not (np.array_equal(mask, mask[rep]) and np.array_equal(tokens, tokens[rep])):
        raise ValueError("training rows of one group hold different prompts: "
                         "config.rl.share_prompts=True needs one prompt per group")


def learn(ctx, train_step, trainable, opt_state, rows, step: int, replay=None):
    """ppo_epochs passes over the rows (their padding trimmed) in `minibatches` shuffled
    minibatches; `replay` (sft.Replay.rows: one batch per update) beside them when given."""
    c = ctx.config
    host_memory.release_free_heap()  # the engine's freed buffers, before the step (and its compile)
    rows = trim_padding(rows, c.sampling.max_prompt_len, c.rl.pad_multiple)
    if c.rl.share_prompts:
        check_groups(rows, c.rl.prompts_per_step)
    R = rows["tokens"].shape[0]
    mbs = c.rl.minibatches
    rng = np.random.default_rng([c.seed, step])
    mets = []
    nan_now = jnp.asarray(step == c.rl.get("inject_nan_step", -1))
    for epoch in range(c.rl.ppo_epochs):
        perm = rng.permutation(R).reshape(mbs, R // mbs)
        for i, idx in enumerate(perm):
            mb = jax.tree.map(lambda x: x[idx], rows)
            rep = None if replay is None else jax.tree.map(lambda x: x[epoch * mbs + i], replay)
            trainable, opt_state, met = train_step(trainable, opt_state, mb, nan_now, rep)
            mets.append(met)
    mets = jax.device_get(mets)
    # The step's freed temporaries back to the OS before sampling or saving: glibc keeps them
    # mapped (0.3-1.0 GiB of SmolLM2's peak, at the save that followed)
    host_memory.release_free_heap()
    out = {k: float(np.mean([m[k] for m in mets])) for k in mets[0]}
    out["skipped"] = float(np.max([m["skipped"] for m in mets]))
    if c.rl.daro:
        out.update({f"daro_w/{i}": float(w) for i, w in
                    enumerate(np.exp(np.asarray(trainable["daro"])))})
    return trainable, opt_state, out
