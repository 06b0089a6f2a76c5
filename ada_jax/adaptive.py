"""Sequential adaptive sampling under fixed shapes: slots, pools, exit rules, kept buffers
(downsampled to training groups by `selection.select`).

Shapes: B prompts, S generation slots, N max new tokens, C kept samples per class (positive /
negative) per prompt, G training group size, P prompt length.

A step's B prompts are prefilled once. S slots decode in parallel; a slot assigned to prompt i
restarts from prompt i's cache. Each prompt carries counters (samples, positives, negatives),
an active flag and a per-prompt budget; exit rules are masks over the counters, so nothing
changes shape. The pos / balance rules stop a prompt at max(min_pool, the rule's stopping
time), capped at its budget (`_stops`): the floor keeps one-at-a-time stopping from training
on groups of one or two samples (the reference's rounds always hold >= M). Finished samples
are scored and merged into per-prompt kept buffers that hold at most C positives and C
negatives (the first C in generation order, or a uniformly random C via bottom-C random
priorities), so memory does not grow with the budget.
"Generation order" is the order samples were launched in (rounds; refill with launch-order
pools) or finished in (refill, pool_order="completion").

Two schedules share the code:
- rounds (reference-faithful): each round every active prompt gets M samples; slots decode
  until all are done; rules are checked at the end of the round; at most R rounds.
- refill: decode until a few slots have finished (`refill_frac` of S, at most `chunk_len`
  steps), score them, retire prompts whose rule holds (their running slots are cut) and hand
  the free slots out again at once. Free slots go to (prompt, next sample) candidates in order
  of the probability that the sample is needed, i.e. that the rule still fails on everything
  launched before it (beta-binomial posterior predictive, `_still_needed`); certain ones first,
  round-robin over prompts; a candidate needs probability >= 1 - `overcommit`. overcommit = 0
  is one-at-a-time stopping exactly (no sample wasted); larger values use more of the slots
  when there are more slots than samples surely needed, at the price of samples launched past
  the stopping point (cut, or finished and dropped). With slots to spare that price is paid in
  otherwise idle slots, so it shortens the step (see docs/benchmarks.md, "Adaptive engine").
  Pools follow launch order by default (`pool_order`): a prompt's pool is the prefix of its
  launch indices up to where the rule first holds, exactly the reference's sequential process,
  whatever the lengths; finished samples past the prefix wait (outcome in a small per-prompt
  ring, tokens already merged into the kept buffers by launch index) until the prefix reaches
  them or the prompt retires. Completion order (pool = whatever finished first) retires
  prompts a little sooner but its pools, and so the kept groups, favour short samples.
With a jittable reward the whole loop is one `lax.while_loop` (`run`); with a host reward the
host scores between chunks (`run_host`), calling the same two jitted halves, never recompiling.
"""
import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ada_jax import sampling, sharding

NEG, POS = 0, 1
_MAX_NEW_PER_PROMPT = 64  # refill: launches one prompt can get per refill
_RING = 128  # refill, launch order: W, samples per prompt launched past its pool
_NEVER = 2**31 - 1  # done_at of a prompt that has not stopped


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    slots: int  # S
    max_new_tokens: int  # N
    keep: int  # C: kept samples per class per prompt (>= the training group size)
    exit_rule: str = "balance"  # none | pos | balance
    k_pos: int = 2
    k_neg: int = 2
    mode: str = "refill"  # rounds | refill
    samples_per_round: int = 8  # M (rounds mode)
    max_rounds: int = 4  # R (rounds mode)
    chunk_len: int = 16  # refill: at most this many decode steps between refills
    select_order: str = "generation"  # generation | random
    # refill: launch a sample only if P(it is needed) >= 1 - overcommit (0 = only samples
    # certain to be needed: exact one-at-a-time stopping; 1 = fill every free slot in budget)
    overcommit: float = 0.75
    refill_frac: float = 1 / 32  # refill: end a chunk early once this share of slots finished
    # refill: a prompt's pool is its first samples in launch order (the reference's one-at-a-
    # time process; unbiased) or in completion order (retires sooner, but favours short samples)
    pool_order: str = "launch"  # launch | completion
    # pos / balance: a prompt stops at max(min_pool, the rule's stopping time), capped at its
    # budget, so its pool (and kept group) holds at least min_pool samples; 1 = the bare rule
    min_pool: int = 1

    _CHOICES = dict(exit_rule=("none", "pos", "balance"), mode=("rounds", "refill"),
                    select_order=("generation", "random"), pool_order=("launch", "completion"))
    _POSITIVE = ("slots", "max_new_tokens", "keep", "samples_per_round", "max_rounds",
                 "chunk_len", "min_pool")

    def __post_init__(self):
        """Reject bad values by field name: a misspelt rule or mode would otherwise run as
        something else (an unknown rule never resolves; an unknown mode runs refill)."""
        for name, choices in self._CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"EngineConfig.{name}={getattr(self, name)!r}: choose from "
                                 f"{choices}")
        for name in self._POSITIVE:
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"EngineConfig.{name}={v!r}: must be a positive integer")
        for name in ("k_pos", "k_neg"):
            if getattr(self, name) < 0:
                raise ValueError(f"EngineConfig.{name}={getattr(self, name)!r}: must be >= 0")
        for name in ("overcommit", "refill_frac"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"EngineConfig.{name}={getattr(self, name)!r}: must be in "
                                 f"[0, 1]")


@struct.dataclass
class EngineState:
    # per prompt [B]
    n_samples: jax.Array
    n_pos: jax.Array
    in_flight: jax.Array
    launched: jax.Array  # samples started (their index seeds oracle draws)
    active: jax.Array
    quota: jax.Array  # rounds mode: launches left in this round
    first_pos: jax.Array  # positives among each prompt's first G pool samples
    done_at: jax.Array  # refill: the chunk count when the prompt stopped (completion order)
    # refill, launch order: outcomes of finished samples by launch index mod W, not yet in the
    # pool (it is the prefix of launch indices 0..n_samples-1) [B, W]
    ring_done: jax.Array
    ring_pos: jax.Array
    ring_len: jax.Array
    # kept buffers [B, 2, C, …]; priority +inf = empty
    kept_tokens: jax.Array
    kept_logp: jax.Array
    kept_len: jax.Array
    kept_prio: jax.Array
    kept_version: jax.Array  # the policy version each kept sample was launched under
    # slots [S, …]
    slot_prompt: jax.Array  # -1 = free
    slot_seq: jax.Array
    slot_tokens: jax.Array
    slot_logp: jax.Array
    slot_len: jax.Array
    slot_done: jax.Array
    slot_version: jax.Array
    gen: Any  # generator's per-slot state (cache, last logits, positions)
    # counters
    key: jax.Array
    version: jax.Array  # policy version of new launches (streaming: the training step)
    chunks: jax.Array
    rounds: jax.Array
    decode_steps: jax.Array
    generated_tokens: jax.Array
    cut_tokens: jax.Array  # tokens of samples launched but left out of every pool


# ----------------------------------------------------------------------------- the engine
def _rule_met(cfg: EngineConfig, n, n_pos):
    n_neg = n - n_pos
    if cfg.exit_rule == "pos":
        return n_pos >= cfg.k_pos
    if cfg.exit_rule == "balance":
        return (n_pos >= cfg.k_pos) & (n_neg >= cfg.k_neg)
    return jnp.zeros_like(n, bool)  # "none": only the budget ends a prompt


def _stops(cfg: EngineConfig, n, n_pos, budget):
    """Whether a pool of n samples (n_pos positive) is final: the rule holds on at least
    min_pool samples, or the budget is reached. The rule only gets easier with more samples,
    so the first such n is max(min_pool, the rule's stopping time), capped at the budget."""
    return (_rule_met(cfg, n, n_pos) & (n >= cfg.min_pool)) | (n >= budget)


def _still_needed(cfg: EngineConfig, n, n_pos, t0, J: int):
    """q[B,J] = P(the rule still fails after t = t0 + j more samples), j < J, given n samples
    with n_pos positives so far: the posterior predictive of a Jeffreys Beta(1/2, 1/2) prior on
    the pass rate (t more samples ~ beta-binomial). It is 1 while t is below the minimum
    further samples the rule needs or the pool is below min_pool, and non-increasing in t.
    Exit rule "none": always 1."""
    if cfg.exit_rule == "none":
        return jnp.ones((n.shape[0], J), jnp.float32)
    n, n_pos = n[:, None].astype(jnp.float32), n_pos[:, None].astype(jnp.float32)
    t0 = t0[:, None].astype(jnp.float32)
    t = t0 + jnp.arange(J, dtype=jnp.float32)[None, :]
    a, b = n_pos + 0.5, n - n_pos + 0.5
    # pmf(s) for s = 0, 1, … (too few positives) and s = t, t-1, … (too few negatives): at t0
    # pmf(0) = B(a, t0+b)/B(a, b), pmf(t0) = B(t0+a, b)/B(a, b); along t by cumulative
    # products, then along s by the ratio recursion (no per-entry lgamma).
    lg = jax.scipy.special.gammaln
    base = lg(a + b) - lg(a + b + t0)

    def along_t(log0, c):  # log0 at t0, times prod_{i < j} (c + t0 + i)/(a + b + t0 + i)
        step = jnp.concatenate([jnp.ones_like(t0), ((c + t) / (a + b + t))[:, :-1]], axis=1)
        return jnp.exp(log0) * jnp.cumprod(step, axis=1)

    lo = along_t(base + lg(t0 + b) - lg(b), b)
    hi = along_t(base + lg(t0 + a) - lg(a), a)
    miss_pos = jnp.maximum(cfg.k_pos - n_pos, 0.0)
    miss_neg = (jnp.maximum(cfg.k_neg - (n - n_pos), 0.0) if cfg.exit_rule == "balance"
                else jnp.zeros_like(n))
    q = jnp.zeros(t.shape, jnp.float32)
    for s in range(cfg.k_pos):  # s positives among the t, s < miss_pos: rule fails
        ok = (s <= t) & (s < miss_pos)
        q = q + jnp.where(ok & ~(t - s < miss_neg), lo, 0.0)  # both shortfalls: count once
        lo = lo * (t - s) / (s + 1) * (s + a) / jnp.maximum(t - s - 1 + b, 1e-6)
    if cfg.exit_rule == "balance":
        for u in range(cfg.k_neg):  # t - u positives, u < miss_neg negatives
            q = q + jnp.where((u <= t) & (u < miss_neg), hi, 0.0)
            hi = hi * (t - u) / (u + 1) * (u + b) / jnp.maximum(t - u - 1 + a, 1e-6)
    certain = (t < miss_pos + miss_neg) | (n + t < cfg.min_pool)
    return jnp.where(certain, 1.0, jnp.clip(q, 0.0, 1.0))


def _assign_refill(cfg: EngineConfig, st: EngineState, budget_B, priority_B=None,
                   overcommit_B=None):
    """Hand free slots to (prompt, next sample) candidates, most likely needed first.

    Candidate j of prompt i is needed iff the prompt has not stopped on the samples launched
    before it (fewer than min_pool, or the rule still fails): the pool, those finished past it
    (launch order: outcomes known) and the t = running + j still unknown (`_still_needed`,
    since the rule only gets easier with more samples).
    Candidates need probability >= 1 - overcommit (`overcommit_B` per prompt if given, else
    the config's) and must fit the budget; ties (e.g. the certain ones) go round-robin over
    prompts. `priority_B` is added to each prompt's candidates' probabilities, so a prompt of
    priority 1 has all its candidates placed before any of a priority-0 prompt, and 1e-3 only
    breaks ties (streaming: the prompts due this call, then the older ones). Returns
    (start_S, prompt_S, seq_S, started_B, whether some candidate got no slot).
    """
    B, S = st.n_samples.shape[0], st.slot_prompt.shape[0]
    J = min(S, _MAX_NEW_PER_PROMPT)
    j = jnp.arange(J)[None, :]
    # Finished past the pool (launch order): their outcomes are known, so count them as drawn.
    known = jnp.sum(st.ring_done, axis=1)
    n, n_pos = st.n_samples + known, st.n_pos + jnp.sum(st.ring_done & st.ring_pos, axis=1)
    t = (st.launched - n)[:, None] + j  # samples still running ahead of candidate j, plus j
    q = _still_needed(cfg, n, n_pos, st.launched - n, J)
    over = cfg.overcommit if overcommit_B is None else overcommit_B[:, None]
    ok = (st.active[:, None] & (t < (budget_B - n)[:, None])
          & (q >= 1.0 - jnp.clip(over, 0.0, 1.0) - 1e-6))
    if _launch_order(cfg):  # launch indices past the pool must fit the ring
        ok = ok & (t + known[:, None] < _window(cfg))
    if priority_B is not None:
        q = q + priority_B[:, None]
    score = jnp.where(ok, q - 1e-6 * j, -1.0).reshape(-1)
    K = min(S, B * J)
    top, idx = jax.lax.top_k(score, K)  # descending; within a prompt a prefix of j
    free = st.slot_prompt < 0
    rank = jnp.cumsum(free) - 1  # r-th free slot takes the r-th best candidate
    r = jnp.clip(rank, 0, K - 1)
    start = free & (rank < K) & (top[r] >= 0)
    prompt = jnp.where(start, idx[r] // J, st.slot_prompt)
    seq = jnp.where(start, st.launched[jnp.maximum(prompt, 0)] + idx[r] % J, st.slot_seq)
    started_B = jnp.zeros((B,), jnp.int32).at[jnp.where(start, prompt, B)].add(1, mode="drop")
    unplaced = jnp.sum(ok) > jnp.sum(start)  # candidates left without a slot
    return start, prompt, seq, started_B, unplaced


def _assign(cfg: EngineConfig, st: EngineState, cap_B):
    """Give free slots to prompts, largest capacity first; returns (start_S, prompt_S)."""
    S = st.slot_prompt.shape[0]
    cap_B = jnp.maximum(cap_B, 0)
    order = jnp.argsort(-cap_B, stable=True)
    wanted = jnp.repeat(order, cap_B[order], total_repeat_length=S)
    free = st.slot_prompt < 0
    rank = jnp.cumsum(free) - 1
    start = free & (rank < jnp.sum(cap_B))
    prompt = jnp.where(start, wanted[jnp.clip(rank, 0, S - 1)], st.slot_prompt)
    return start, prompt


def _decode_chunk(cfg, gen_fn, params, prompt_state, st: EngineState, max_steps,
                  refill_at: int, early=None):
    """Decode live slots for up to max_steps; stop early when none is live or (refill_at > 0,
    and `early` if given) once refill_at slots hold newly finished samples."""
    S, N = st.slot_tokens.shape
    rows = jnp.arange(S)
    params = gen_fn.for_decoding(params)  # once, not at every step of the loop

    parked = jnp.sum((st.slot_prompt >= 0) & st.slot_done)  # finished, waiting for the pool

    def cond(c):
        t, s = c
        busy = s.slot_prompt >= 0
        go = (t < max_steps) & jnp.any(busy & ~s.slot_done)
        if refill_at:
            full = jnp.sum(busy & s.slot_done) - parked >= refill_at
            go = go & ~(full if early is None else full & early)
        return go

    def body(c):
        t, s = c
        live = (s.slot_prompt >= 0) & ~s.slot_done
        key = jax.random.fold_in(s.key, s.decode_steps)
        token, logp, gen = gen_fn.step(params, prompt_state, s.gen, live, s.slot_prompt,
                                       s.slot_seq, key)
        col = jnp.where(live, s.slot_len, N)  # out of range for dead rows: dropped
        length = s.slot_len + live
        tokens = s.slot_tokens.at[rows, col].set(token, mode="drop")
        stop = sampling.is_eos(token, getattr(gen_fn, "eos_ids", (gen_fn.eos_id,))) \
            | sampling.ends_with(tokens, length, getattr(gen_fn, "stop_seqs", ()))
        done = s.slot_done | (live & (stop | (length >= N)))
        s = s.replace(slot_tokens=tokens,
                      slot_logp=s.slot_logp.at[rows, col].set(logp, mode="drop"),
                      slot_len=length, slot_done=done, gen=gen,
                      decode_steps=s.decode_steps + 1,
                      generated_tokens=s.generated_tokens + jnp.sum(live))
        return t + 1, s

    return jax.lax.while_loop(cond, body, (jnp.int32(0), st))[1]


def _launch_and_decode(cfg: EngineConfig, gen_fn, params, prompt_state, budget_B,
                       st: EngineState, priority_B=None, overcommit_B=None):
    """First half of a chunk: assign free slots, restart them, decode."""
    if cfg.mode == "rounds":
        start, prompt = _assign(cfg, st, jnp.where(st.active, st.quota, 0))
        started_B = jnp.zeros_like(st.in_flight).at[jnp.where(start, prompt, 0)].add(start)
        seq = jnp.where(start, st.launched[jnp.maximum(prompt, 0)], st.slot_seq)
        # Several slots may start on one prompt: offset each by its rank among them.
        same = start[:, None] & start[None, :] & (prompt[:, None] == prompt[None, :])
        seq = seq + jnp.sum(jnp.tril(same, -1), axis=1)
    else:
        start, prompt, seq, started_B, unplaced = _assign_refill(cfg, st, budget_B, priority_B,
                                                                   overcommit_B)
    gen = gen_fn.restart(prompt_state, st.gen, start, prompt)
    st = st.replace(
        slot_prompt=prompt, slot_seq=seq, gen=gen,
        slot_tokens=jnp.where(start[:, None], gen_fn.pad_id, st.slot_tokens),
        slot_logp=jnp.where(start[:, None], 0.0, st.slot_logp),
        slot_len=jnp.where(start, 0, st.slot_len), slot_done=jnp.where(start, False, st.slot_done),
        slot_version=jnp.where(start, st.version, st.slot_version),
        in_flight=st.in_flight + started_B, launched=st.launched + started_B,
        quota=st.quota - started_B if cfg.mode == "rounds" else st.quota)
    if cfg.mode == "rounds":
        return _decode_chunk(cfg, gen_fn, params, prompt_state, st, cfg.max_new_tokens, 0)
    S = st.slot_prompt.shape[0]
    refill_at = max(1, int(np.ceil(cfg.refill_frac * S))) if cfg.refill_frac > 0 else 0
    # With no exit rule an early refill helps only if some sample is still waiting for a slot
    # (with one, a finished sample can retire its prompt or change what the others need).
    early = unplaced if cfg.exit_rule == "none" else None
    return _decode_chunk(cfg, gen_fn, params, prompt_state, st, cfg.chunk_len, refill_at, early)


def _window(cfg: EngineConfig) -> int:
    """W: launch-order refill keeps at most W samples per prompt launched past its pool."""
    return _RING if _launch_order(cfg) else 1


def _launch_order(cfg: EngineConfig) -> bool:
    return cfg.mode == "refill" and cfg.pool_order == "launch"


def _advance_prefix(cfg: EngineConfig, budget_B, group: int, st: EngineState, fin, pos):
    """Launch-order pools: record finished outcomes in the ring, then extend each prompt's pool
    over the finished launch indices that follow it, one at a time, stopping where the rule
    first holds (on at least min_pool samples) or at the budget (the one-at-a-time reference
    process, in launch order)."""
    B, W = st.ring_done.shape
    pidx = jnp.where(fin, st.slot_prompt, B)
    col = st.slot_seq % W
    ring_done = st.ring_done.at[pidx, col].set(True, mode="drop")
    ring_pos = st.ring_pos.at[pidx, col].set(pos, mode="drop")
    ring_len = st.ring_len.at[pidx, col].set(st.slot_len, mode="drop")
    rows = jnp.arange(B)[:, None]
    w = jnp.arange(W)[None, :]
    cols = (st.n_samples[:, None] + w) % W  # offset w past the pool, in ring coordinates
    d, p = ring_done[rows, cols], ring_pos[rows, cols]
    run = jnp.cumprod(d, axis=1).astype(bool)  # finished without a gap from the pool's end
    n = st.n_samples[:, None] + w + 1
    n_pos = st.n_pos[:, None] + jnp.cumsum(p & run, axis=1)
    stop = _stops(cfg, n, n_pos, budget_B[:, None])
    take = run & (jnp.cumsum(stop, axis=1) - stop == 0) & st.active[:, None]
    first_pos = st.first_pos + jnp.sum(take & p & (n <= group), axis=1)
    st = st.replace(ring_done=ring_done.at[rows, cols].set(d & ~take),
                    ring_pos=ring_pos, ring_len=ring_len,
                    n_samples=st.n_samples + jnp.sum(take, axis=1),
                    n_pos=st.n_pos + jnp.sum(take & p, axis=1), first_pos=first_pos)
    return st


def _absorb(cfg: EngineConfig, budget_B, group: int, st: EngineState, reward_S):
    """Second half: count finished samples, merge them into kept buffers, retire prompts.

    Completion order (rounds; refill with pool_order="completion"): every finished sample
    joins its prompt's pool. Launch order (refill default): the pool is the prefix of launch
    indices (`_advance_prefix`); finished samples past it wait in the ring and are merged into
    the kept buffers at once with their launch index as priority, so the lowest indices win and
    entries past the final pool are dropped when the prompt retires. With select_order="random"
    a finished sample past the pool instead stays parked in its slot until the pool reaches it.
    """
    B, S = st.n_samples.shape[0], st.slot_prompt.shape[0]
    C = st.kept_prio.shape[2]
    fin = (st.slot_prompt >= 0) & st.slot_done
    pos = fin & (reward_S > 0.5)
    launch = _launch_order(cfg)
    if launch:
        st = _advance_prefix(cfg, budget_B, group, st, fin, pos)
        take = fin
        if cfg.select_order == "random":  # merge only once in the pool; park the rest
            take = fin & (st.slot_seq < st.n_samples[jnp.maximum(st.slot_prompt, 0)])
    else:
        take = fin
    pidx = jnp.where(take, st.slot_prompt, B)  # B = dropped
    onehot = (pidx[None, :] == jnp.arange(B)[:, None])  # [B,S]
    if not launch:
        # Completion ordinal of each finished sample within its prompt (slot order breaks ties).
        same = fin[:, None] & fin[None, :] & (st.slot_prompt[:, None] == st.slot_prompt[None, :])
        rank = jnp.sum(jnp.tril(same, -1), axis=1)
        ordinal = st.n_samples[jnp.minimum(pidx, B - 1)] + rank
        st = st.replace(first_pos=st.first_pos.at[pidx].add(pos & (ordinal < group), mode="drop"),
                        n_samples=st.n_samples.at[pidx].add(fin, mode="drop"),
                        n_pos=st.n_pos.at[pidx].add(pos, mode="drop"))
    in_flight = st.in_flight.at[pidx].add(-take.astype(jnp.int32), mode="drop")

    # Merge into kept buffers: lowest priority wins (generation order, or random).
    if cfg.select_order == "random":
        prio_S = jax.random.uniform(jax.random.fold_in(st.key, -1 - st.chunks), (S,))
    elif launch:
        prio_S = st.slot_seq.astype(jnp.float32)
    else:
        prio_S = (st.chunks * S + jnp.arange(S)).astype(jnp.float32)
    cls_S = pos.astype(jnp.int32)
    cand = jnp.where(onehot[:, None, :] & (cls_S[None, None, :] == jnp.arange(2)[None, :, None]),
                     prio_S[None, None, :], jnp.inf)  # [B,2,S]
    allp = jnp.concatenate([st.kept_prio, cand], axis=2)  # [B,2,C+S]
    _, idx = jax.lax.top_k(-allp, C)  # [B,2,C] ascending priority
    new_prio = jnp.take_along_axis(allp, idx, axis=2)
    from_slot = idx >= C
    sidx = jnp.clip(idx - C, 0, S - 1)
    kidx = jnp.clip(idx, 0, C - 1)

    def merge(kept, slot):
        k = jnp.take_along_axis(kept, kidx.reshape(kidx.shape + (1,) * (kept.ndim - 3)), axis=2)
        s = slot[sidx]
        return jnp.where(from_slot.reshape(from_slot.shape + (1,) * (kept.ndim - 3)), s, k)

    st = st.replace(
        kept_tokens=merge(st.kept_tokens, st.slot_tokens), kept_logp=merge(st.kept_logp,
                                                                           st.slot_logp),
        kept_len=merge(st.kept_len, st.slot_len), kept_prio=new_prio, in_flight=in_flight,
        kept_version=merge(st.kept_version, st.slot_version),
        slot_prompt=jnp.where(take, -1, st.slot_prompt), chunks=st.chunks + 1)

    # Retire prompts: refill mode after every chunk, rounds mode at the end of each round.
    done_B = _stops(cfg, st.n_samples, st.n_pos, budget_B)
    if cfg.mode == "rounds":
        round_over = ~jnp.any(st.active & (st.quota > 0)) & ~jnp.any(st.slot_prompt >= 0)
        active = jnp.where(round_over, st.active & ~done_B, st.active)
        more = round_over & (st.rounds + 1 < cfg.max_rounds)
        active = jnp.where(round_over & ~more, False, active)
        quota = jnp.where(round_over & active,
                          jnp.minimum(cfg.samples_per_round, budget_B - st.n_samples), st.quota)
        st = st.replace(active=active, quota=quota, rounds=st.rounds + round_over)
    else:
        active = st.active & ~done_B
        retired = st.active & ~active
        # Cut the busy slots of retired prompts; their tokens are spent, not counted.
        cut = (st.slot_prompt >= 0) & ~active[jnp.maximum(st.slot_prompt, 0)]
        wasted = jnp.sum(jnp.where(cut, st.slot_len, 0))
        if launch:  # finished past the final pool: out of the ring and the kept buffers
            drop = retired[:, None] & st.ring_done
            if cfg.select_order != "random":  # (random: those are parked slots, cut above)
                wasted += jnp.sum(jnp.where(drop, st.ring_len, 0))
            st = st.replace(ring_done=st.ring_done & ~drop, kept_prio=jnp.where(
                retired[:, None, None] & (st.kept_prio >= st.n_samples[:, None, None]),
                jnp.inf, st.kept_prio) if cfg.select_order != "random" else st.kept_prio)
        st = st.replace(active=active, slot_prompt=jnp.where(cut, -1, st.slot_prompt),
                        done_at=jnp.where(retired, st.chunks, st.done_at),
                        in_flight=st.in_flight.at[jnp.where(cut, st.slot_prompt, B)].add(
                            -cut.astype(jnp.int32), mode="drop"),
                        cut_tokens=st.cut_tokens + wasted)
    return st


def init_state(cfg: EngineConfig, gen_fn, prompt_state, B: int, budget_B, key) -> EngineState:
    S, N, C = cfg.slots, cfg.max_new_tokens, cfg.keep
    W = _window(cfg)
    zB = jnp.zeros((B,), jnp.int32)
    quota = (jnp.minimum(cfg.samples_per_round, budget_B) if cfg.mode == "rounds" else zB)
    return EngineState(
        n_samples=zB, n_pos=zB, in_flight=zB, launched=zB, active=budget_B > 0,
        quota=quota.astype(jnp.int32), first_pos=zB, done_at=jnp.full((B,), _NEVER, jnp.int32),
        ring_done=jnp.zeros((B, W), bool), ring_pos=jnp.zeros((B, W), bool),
        ring_len=jnp.zeros((B, W), jnp.int32),
        kept_tokens=jnp.zeros((B, 2, C, N), jnp.int32),
        kept_logp=jnp.zeros((B, 2, C, N), jnp.float32),
        kept_len=jnp.zeros((B, 2, C), jnp.int32),
        kept_prio=jnp.full((B, 2, C), jnp.inf, jnp.float32),
        kept_version=jnp.zeros((B, 2, C), jnp.int32),
        slot_prompt=jnp.full((S,), -1, jnp.int32), slot_seq=jnp.zeros((S,), jnp.int32),
        slot_tokens=jnp.zeros((S, N), jnp.int32), slot_logp=jnp.zeros((S, N), jnp.float32),
        slot_len=jnp.zeros((S,), jnp.int32), slot_done=jnp.zeros((S,), bool),
        slot_version=jnp.zeros((S,), jnp.int32), gen=gen_fn.init_slots(prompt_state, S),
        key=key, version=jnp.int32(0), chunks=jnp.int32(0),
        rounds=jnp.int32(0), decode_steps=jnp.int32(0), generated_tokens=jnp.int32(0),
        cut_tokens=jnp.int32(0))


def _max_chunks(cfg: EngineConfig, budget_B) -> jax.Array:
    # refill: a chunk ends when a sample finishes or after chunk_len steps (a safety cap only)
    per_sample = 1 if cfg.mode == "rounds" else 1 + -(-cfg.max_new_tokens // cfg.chunk_len)
    return jnp.sum(budget_B) * per_sample + cfg.max_rounds + 2


@functools.partial(jax.jit, static_argnames=("cfg", "gen_fn", "reward_fn", "group"))
def run(params, prompt_BP, mask_BP, budget_B, reward_data, key, *, cfg: EngineConfig, gen_fn,
        reward_fn: Callable, group: int) -> EngineState:
    """The whole adaptive step in one jitted while_loop (jittable reward)."""
    prompt_state = gen_fn.prefill(params, prompt_BP, mask_BP)
    st = init_state(cfg, gen_fn, prompt_state, prompt_BP.shape[0], budget_B, key)
    limit = _max_chunks(cfg, budget_B)

    def body(st):
        st = _launch_and_decode(cfg, gen_fn, params, prompt_state, budget_B, st)
        r = reward_fn(reward_data, st.slot_prompt, st.slot_seq, st.slot_tokens, st.slot_len)
        return _absorb(cfg, budget_B, group, st, r)

    return jax.lax.while_loop(lambda s: jnp.any(s.active) & (s.chunks < limit), body, st)


@functools.partial(jax.jit, static_argnames=("cfg", "gen_fn"))
def _host_begin(params, prompt_BP, mask_BP, budget_B, key, *, cfg, gen_fn):
    prompt_state = gen_fn.prefill(params, prompt_BP, mask_BP)
    return prompt_state, init_state(cfg, gen_fn, prompt_state, prompt_BP.shape[0], budget_B,
                                    key)


_host_decode = jax.jit(_launch_and_decode, static_argnums=(0, 1), donate_argnums=(5,))
_host_absorb = jax.jit(_absorb, static_argnums=(0, 2), donate_argnums=(3,))


def run_host(params, prompt_BP, mask_BP, budget_B, key, *, cfg: EngineConfig, gen_fn,
             score: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray],
             group: int) -> EngineState:
    """Same engine with a host reward: score(prompt_S, seq_S, tokens_SN, len_S) -> r_S.

    Only finished slots' rewards are read (others may be anything)."""
    # Read through sharding.to_host (several processes: one waited-for program each), and
    # before _host_begin, so that no two programs with collectives run at once.
    limit = int(_max_chunks(cfg, sharding.to_host(budget_B)))
    prompt_state, st = _host_begin(params, prompt_BP, mask_BP, budget_B, key, cfg=cfg,
                                   gen_fn=gen_fn)
    while sharding.to_host(st.active).any() and int(st.chunks) < limit:
        st = _host_decode(cfg, gen_fn, params, prompt_state, budget_B, st)
        st = _host_absorb(cfg, budget_B, group, st, host_rewards(st, score))
    return st


def host_rewards(st: EngineState, score) -> jax.Array:
    """r_S for the slots that hold finished samples, scored on the host (0 elsewhere). On
    several processes each scores only the slots on its own devices; the rewards meet on
    device, where `_absorb` combines the per-prompt counters (`sharding.host_rows`)."""
    def rows(prompt_S, seq_S, tokens_SN, len_S, done_S):
        fin = (prompt_S >= 0) & done_S
        r = np.zeros(fin.shape, np.float32)
        if fin.any():
            r[fin] = score(prompt_S[fin], seq_S[fin], tokens_SN[fin], len_S[fin])
        return r
    return sharding.host_rows(rows, st.slot_prompt, st.slot_seq, st.slot_tokens, st.slot_len,
                              st.slot_done)
