"""Streaming adaptive sampling: one refill engine whose prompts outlive a training step.

The engine (`adaptive`) keeps its slots busy within a step, but a step's batch ends with its
slowest prompt, and with many slots per prompt the last prompts cannot use them all. Here the
engine state persists across steps over a table of Q = B + A resident prompts (B per step, A
admitted ahead, A <= max_lag x B). Each call:
1. admits queued prompts into the free rows (`admit`); their prompt caches, and those of every
   resident prompt, are prefilled under the current params;
2. decodes (refill schedule, launch-order pools) until B resident prompts have stopped, every
   prompt due by the lag has stopped and, for each h <= max_lag, those due within h calls
   that remain fit the next h batches (`due_needs`), and at least `pace` x the mean call
   length has passed (so a call that finds its groups already complete still starts the
   prompts it admitted).
   Free slots go to whichever resident prompt most needs a sample, older prompts first among
   equals, so slots do not idle behind a straggler; a prompt further from its due call
   speculates less, and with many slots the prompts due now go first (`launch_priority`);
3. `claim` takes the step's B groups, oldest admission first, then earliest stop, and frees
   their rows.
Samples still running at the update continue under the new params; their behaviour log-probs
are the ones recorded when each token was drawn, so the PPO ratio corrects them. A prompt is
trained at most `max_lag` calls after its admission, so every trained sample was launched under
one of the last max_lag + 1 policies (docs/theory.md, "Streaming"). `on_policy=True` instead
restarts every carried-over prompt from an empty pool at each call (running samples cut,
finished ones dropped) and keeps its due date, so it is restarted once at most: only samples of
the current policy are trained, at the cost of the carried work. With A = max_lag x B = B, every
step from the third on trains exactly the prompts admitted one call before (one drawn batch);
only the first two split the first 2B prompts by how quickly they stopped. A prompt's pool
follows launch order, so its stopping law is the one-at-a-time law whatever the policy
versions.

Between calls the engine keeps no slot caches: a call rebuilds the caches of the samples still
running from their tokens (`gen_fn.resume`: one prefill of prompt + tokens drawn so far, under
the current params) and drops them when it ends. So the learner phase holds only the engine's
token-sized arrays (the slot KV caches, 42 GiB per device at the 7B defaults, are not resident
while the learner runs: docs/scaling.md §6), a carried sample's later tokens are drawn from
exactly the current policy (their K/V too, not the K/V an older policy wrote), and a checkpoint
holds tokens, not caches. Row bookkeeping (which prompt, admitted when) is on the host and goes
into a checkpoint's JSON meta; the engine state (counters, kept buffers, running samples'
tokens) and the resident prompts' tokens go into its arrays. A resumed run rebuilds the caches
exactly as the uninterrupted one does at every call, so it continues bitwise equal.

Shapes: Q resident prompt rows, S slots, P prompt length (the rows' columns; a call prefills
the resident prompts' own width, `pad_multiple`), N max new tokens. The engine state
is laid out over the mesh's batch axes by its leading (Q or S) dimension.
"""
import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import NamedSharding, PartitionSpec

from ada_jax import adaptive, sampling, selection, sharding

EMPTY = -1  # admit_call of a free row


def _rows(mask_Q, x):
    return mask_Q.reshape(mask_Q.shape + (1,) * (x.ndim - 1))


def _reset_rows(st: adaptive.EngineState, rows_Q, budget_Q) -> adaptive.EngineState:
    """Empty pools, rings and kept buffers of `rows_Q` (active again iff their budget > 0); slots
    still running on them are cut (their tokens count as cut)."""
    cut = (st.slot_prompt >= 0) & rows_Q[jnp.maximum(st.slot_prompt, 0)]

    def zero(x, v=0):
        return jnp.where(_rows(rows_Q, x), v, x)

    return st.replace(
        n_samples=zero(st.n_samples), n_pos=zero(st.n_pos), in_flight=zero(st.in_flight),
        launched=zero(st.launched), first_pos=zero(st.first_pos),
        done_at=zero(st.done_at, adaptive._NEVER),
        active=jnp.where(rows_Q, budget_Q > 0, st.active),
        ring_done=zero(st.ring_done, False), ring_pos=zero(st.ring_pos, False),
        ring_len=zero(st.ring_len), kept_prio=zero(st.kept_prio, jnp.inf),
        slot_prompt=jnp.where(cut, -1, st.slot_prompt),
        cut_tokens=st.cut_tokens + jnp.sum(jnp.where(cut, st.slot_len, 0)))


def _more(st, need, horizon_Q, need_H, resident_Q, until_step):
    """Keep decoding while a prompt is sampling and: fewer than `need` resident prompts have
    stopped, fewer than need_H[h] of those due within h calls have (horizon_Q <= h: the rest
    must fit the next h batches, oldest claimed first; h = 0: all due now), or the call is
    shorter than its pace (`until_step`)."""
    stopped = resident_Q & ~st.active
    h = jnp.arange(need_H.shape[0])[:, None]
    stopped_H = jnp.sum(stopped[None, :] & (horizon_Q[None, :] <= h), axis=1)
    return jnp.any(st.active) & ((jnp.sum(stopped) < need) | jnp.any(stopped_H < need_H)
                                 | (st.decode_steps < until_step))


def _limit(cfg, st, budget_Q):
    """The chunk count past which a call stops whatever: every resident budget spent (budget_Q
    is 0 on free rows)."""
    return st.chunks + adaptive._max_chunks(cfg, budget_Q)


def due_needs(admit_Q, resident_Q, calls: int, max_lag: int, prompts: int):
    """Calls left before each resident prompt is due (admitted at call a: claimed by call
    a + max_lag), and need_H[h] = how many of those due within h calls must stop in this call
    so that the rest fit the next h batches of `prompts` (h = 0..max_lag)."""
    horizon = np.where(resident_Q, admit_Q + max_lag - calls, max_lag + 1)
    need = [max(int(np.sum(resident_Q & (horizon <= h))) - h * prompts, 0)
            for h in range(max_lag + 1)]
    return horizon.astype(np.int32), np.asarray(need, np.int32)


def _resume(params, prompt_QP, mask_QP, st, *, gen_fn):
    """The state without slot caches (between calls) -> with them, rebuilt for the running
    samples under `params` (`gen_fn.resume`)."""
    return st.replace(gen=gen_fn.resume(params, prompt_QP, mask_QP, st.slot_prompt,
                                        st.slot_tokens, st.slot_len))


def _run(params, prompt_QP, mask_QP, budget_Q, order_Q, more_args, reward_data, st, *, cfg,
         gen_fn, reward_fn, group: int):
    """Decode until the step's groups are complete, in one while_loop (jittable reward); the
    slot caches exist only inside."""
    st = _resume(params, prompt_QP, mask_QP, st, gen_fn=gen_fn)
    prompt_state = gen_fn.prefill(params, prompt_QP, mask_QP)
    limit = _limit(cfg, st, budget_Q)

    def body(st):
        st = adaptive._launch_and_decode(cfg, gen_fn, params, prompt_state, budget_Q, st, *order_Q)
        r = reward_fn(reward_data, st.slot_prompt, st.slot_seq, st.slot_tokens, st.slot_len)
        return adaptive._absorb(cfg, budget_Q, group, st, r)

    st = jax.lax.while_loop(lambda s: _more(s, *more_args) & (s.chunks < limit), body, st)
    return st.replace(gen=None)


@functools.partial(jax.jit, static_argnames=("gen_fn",))
def _prefill(params, prompt_QP, mask_QP, *, gen_fn):
    return gen_fn.prefill(params, prompt_QP, mask_QP)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _call_bounds(st, budget_Q, more_args, *, cfg):
    """(chunk limit, whether to decode at all) of a host-scored call, in one program (on
    several processes reductions across them, read before the next program is sent)."""
    return _limit(cfg, st, budget_Q), _more(st, *more_args)


def _host_decode(params, prompt_state, budget_Q, order_Q, st, *, cfg, gen_fn):
    return adaptive._launch_and_decode(cfg, gen_fn, params, prompt_state, budget_Q, st, *order_Q)


def _host_absorb(budget_Q, more_args, st, r_S, *, cfg, group: int):
    st = adaptive._absorb(cfg, budget_Q, group, st, r_S)
    return st, _more(st, *more_args)


_CLAIMED = ("kept_tokens", "kept_logp", "kept_len", "kept_prio", "kept_version", "n_samples",
            "n_pos", "first_pos", "launched")  # what selection reads of a claimed row


@jax.jit
def _claimed_rows(fields: dict, rows) -> dict:
    """The claimed rows of the engine's per-prompt arrays, in one program (on several
    processes a gather across them: the caller waits for it)."""
    return {k: v[rows] for k, v in fields.items()}


def _begin_call(st, reset_Q, budget_Q, version, key):
    return _reset_rows(st, reset_Q, budget_Q).replace(version=version, key=key)


@dataclasses.dataclass
class Claimed:
    """One step's groups from the stream."""
    rows: np.ndarray  # table rows, in claim order
    items: list  # the prompts (whatever `admit` was given)
    prompt_BP: np.ndarray
    mask_BP: np.ndarray
    batch: selection.Batch
    metrics: dict


class Stream:
    """A table of Q = B + ahead prompts sampled by one persistent refill engine (module doc).

    Use: `admit(items, prompt_BP, mask_BP, budgets)` for up to `free()` prompts, `run(params,
    key, …)`, `claim()`; repeat. `arrays()` / `meta()` checkpoint it (at any point, between
    `admit` and `run` too), `restore` resumes. `calls`, the run's total number of calls when
    known, stops admission once the resident prompts cover every remaining call's batch, so no
    prompt is sampled that no call will train (a run extended past its `calls` on resume
    continues from there, but not bitwise as one started longer: it admitted nothing ahead at
    its first end). Without admitting, run + claim drain the stream (a claim returns fewer
    than B groups once fewer are resident)."""

    def __init__(self, cfg: adaptive.EngineConfig, gen_fn, *, prompts: int, ahead: int,
                 prompt_len: int, group: int, on_policy: bool = False, pace: float = 0.5,
                 max_lag: int = 1, calls: int | None = None, pad_multiple: int = 0):
        if cfg.mode != "refill" or cfg.pool_order != "launch":
            raise ValueError("streaming needs the refill schedule with launch-order pools "
                             f"(mode='refill', pool_order='launch'), got mode={cfg.mode!r}, "
                             f"pool_order={cfg.pool_order!r}")
        if max_lag < 1 or not 0 <= ahead <= max_lag * prompts:
            raise ValueError(f"streaming: prompts admitted ahead ({ahead}) must be in [0, "
                             f"max_lag ({max_lag}) x prompts per step ({prompts})]: a prompt "
                             f"admitted further ahead could be trained more than {max_lag} "
                             f"update(s) after its samples were drawn")
        self.cfg, self.gen_fn, self.group, self.on_policy = cfg, gen_fn, group, on_policy
        self.pace, self.max_lag, self.total_calls = pace, max_lag, calls
        self.pad_multiple = pad_multiple  # a call prefills its residents' width (`run`)
        self.B, self.Q, self.P = prompts, prompts + ahead, prompt_len
        self.due_first = cfg.slots >= 2 * (max_lag + 1) * prompts  # `launch_priority`
        Q = self.Q
        self.items: list = [None] * Q
        self.admit_call = np.full(Q, EMPTY, np.int64)
        self.prompt_QP = np.zeros((Q, prompt_len), np.int32)
        self.mask_QP = np.zeros((Q, prompt_len), bool)
        self.budget_Q = np.zeros(Q, np.int32)
        self.calls = 0  # engine calls so far = the policy version of the next call
        self.fresh = np.zeros(Q, bool)  # admitted since the last call: pools to empty
        self.st = None  # built by init(params)

    # ------------------------------------------------------------------ state
    def init(self, params, mesh=None, rules=None):
        """Build the (empty) engine state; with a mesh, each array's leading (Q or S) dimension
        is laid out by the `rules`' batch axes (`sharding.batch_sharding`, replicated where
        they do not divide it), like the refill engine's rows. Shapes depend only on the
        config. Between calls the state has no slot caches (gen=None, module doc)."""
        init = functools.partial(self._init, gen_fn=self.gen_fn, cfg=self.cfg, Q=self.Q)
        args = (params, jnp.asarray(self.prompt_QP), jnp.asarray(self.mask_QP),
                jax.random.key(0))
        shapes = jax.eval_shape(init, *args)
        full = light = None
        self._mesh, self._rules = mesh, rules
        if mesh is not None:
            full = jax.tree.map(self._sharding, shapes)
            light = full.replace(gen=None)
        self.st = jax.jit(lambda *a: init(*a).replace(gen=None), out_shardings=light)(*args)
        # Every step function returns the state with the layout it got, so each compiles once.
        self._run = jax.jit(_run, static_argnames=("cfg", "gen_fn", "reward_fn", "group"),
                            donate_argnames=("st",), out_shardings=light)
        self._begin = jax.jit(_begin_call, donate_argnames=("st",), out_shardings=light)
        self._resume = jax.jit(_resume, static_argnames=("gen_fn",), donate_argnames=("st",),
                               out_shardings=full)
        self._decode = jax.jit(_host_decode, static_argnames=("cfg", "gen_fn"),
                               donate_argnames=("st",), out_shardings=full)
        self._absorb = jax.jit(_host_absorb, static_argnames=("cfg", "group"),
                               donate_argnames=("st",), out_shardings=(full, None))
        return self

    def _sharding(self, x, replicated: bool = False):
        """The layout of a [Q or S, …] engine array: its leading dimension over the rules'
        batch axes (replicated where they do not divide it, and for scalars)."""
        if replicated or not x.ndim:
            return NamedSharding(self._mesh, PartitionSpec())
        return sharding.batch_sharding(self._mesh, self._rules, x.shape)

    def place(self, x, replicated: bool = False):
        """A host array, the same on every process (the bookkeeping is), as a device array laid
        out like the engine's rows: on several processes each process fills its own shards."""
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            return x  # a key (replicated by jit): no host copy to place
        x = np.asarray(x)
        if self._mesh is None:
            return jnp.asarray(x)
        return jax.make_array_from_callback(x.shape, self._sharding(x, replicated),
                                            lambda index: x[index])

    @staticmethod
    def _init(params, prompt_QP, mask_QP, key, *, gen_fn, cfg, Q):
        prompt_state = gen_fn.prefill(params, prompt_QP, mask_QP)
        return adaptive.init_state(cfg, gen_fn, prompt_state, Q, jnp.zeros((Q,), jnp.int32),
                                   key)

    def arrays(self) -> dict:
        """The engine state (no slot caches; the PRNG key as raw data) and the resident
        prompts' tokens, as a checkpointable tree of arrays."""
        return {"engine": self.st.replace(key=jax.random.key_data(self.st.key)),
                "prompt": self.place(self.prompt_QP, replicated=True),
                "mask": self.place(self.mask_QP, replicated=True)}

    def meta(self, encode_item: Callable = lambda x: x) -> dict:
        """The host bookkeeping (JSON): calls so far, each row's admission call, budget and
        prompt (whatever `admit` was given, through `encode_item`)."""
        return dict(calls=self.calls, admit_call=self.admit_call.tolist(),
                    budget=self.budget_Q.tolist(), fresh=self.fresh.tolist(),
                    items=[None if x is None else encode_item(x) for x in self.items])

    def restore(self, arrays: dict, meta: dict, decode_item: Callable = lambda x: x):
        if len(meta["admit_call"]) != self.Q:
            raise ValueError(f"streaming checkpoint holds {len(meta['admit_call'])} prompt rows, "
                             f"this run has {self.Q} (prompts per step + ahead)")
        engine = arrays["engine"]
        self.st = engine.replace(key=jax.random.wrap_key_data(engine.key))
        self.calls = int(meta["calls"])
        self.admit_call = np.asarray(meta["admit_call"], np.int64)
        self.budget_Q = np.asarray(meta["budget"], np.int32)
        # Rows admitted since the last call (saved between admit and run): their pools still
        # hold the rows' previous prompts and are emptied by the next run. Older checkpoints
        # were saved after a claim, when no row is fresh.
        self.fresh = np.asarray(meta.get("fresh", [False] * self.Q), bool)
        self.prompt_QP = np.array(arrays["prompt"], np.int32)
        self.mask_QP = np.array(arrays["mask"], bool)
        self.items = [None if x is None else decode_item(x) for x in meta["items"]]

    def _counters(self) -> dict:
        st = self.st
        got = jax.device_get((st.decode_steps, st.generated_tokens, st.cut_tokens, st.chunks))
        return dict(zip(("steps", "tokens", "cut", "chunks"), map(int, got)))

    # ------------------------------------------------------------------ a step
    def launch_priority(self, horizon_Q, resident_Q):
        """(priority_Q, overcommit_Q) of the engine's slot assignment (`_assign_refill`).
        A prompt with h more calls before it is due may speculate only (max_lag + 1 - h) /
        (max_lag + 1) of the overcommit: its outcomes will come in before it must stop, so a
        sample launched now should be surer to be needed. Older prompts go first among
        equals; with `due_first` (slots >= 2 x the (max_lag + 1) x B prompts in progress)
        every candidate of a prompt due this call goes before any other's: a call ends when
        its due prompts have stopped, and with that many slots finishing them early shortens
        it, where with fewer it would take slots from samples surely needed
        (docs/benchmarks.md, "Who samples first")."""
        h = np.clip(horizon_Q, 0, self.max_lag)
        age = np.where(resident_Q, self.max_lag - h, 0)
        priority = (self.due_first & resident_Q & (h == 0)) + 1e-3 * age
        overcommit = self.cfg.overcommit * (self.max_lag + 1 - h) / (self.max_lag + 1)
        return priority.astype(np.float32), overcommit.astype(np.float32)

    def free(self) -> int:
        """How many prompts `admit` takes now: the free rows, and once the run's `calls` are
        known no more than the remaining calls will claim (B each) beyond those resident."""
        free = int(np.sum(self.admit_call == EMPTY))
        if self.total_calls is None:
            return free
        wanted = (self.total_calls - self.calls) * self.B - int(np.sum(self.admit_call != EMPTY))
        return min(free, max(wanted, 0))

    def admit(self, items, prompt_BP, mask_BP, budgets) -> None:
        """Put prompts into free rows (lowest first); they are sampled from the next `run`."""
        rows = np.flatnonzero(self.admit_call == EMPTY)[:len(items)]
        if len(items) > self.free():
            raise ValueError(f"Stream.admit: {len(items)} prompts but room for {self.free()} "
                             f"({len(rows)} free rows; the run's remaining {self.total_calls} - "
                             f"{self.calls} calls claim {self.B} each)"
                             if self.total_calls is not None else
                             f"Stream.admit: {len(items)} prompts but {self.free()} free rows")
        for r, it in zip(rows, items):
            self.items[r] = it
        self.admit_call[rows] = self.calls
        self.prompt_QP[rows], self.mask_QP[rows] = prompt_BP, mask_BP
        self.budget_Q[rows] = budgets
        self.fresh[rows] = True

    def run(self, params, key, *, reward_fn=None, reward_data=None, score=None):
        """Decode until this step's groups are complete. reward_fn(reward_data, …) is the
        jittable reward over the Q rows; `score(rows_S, seq_S, tokens_SN, len_S)` a host one."""
        resident = self.admit_call != EMPTY
        fresh = self.fresh & resident
        # Carried over from earlier calls: sampled first. on_policy restarts them from an empty
        # pool instead (keeping their due date, below).
        old = resident & (self.admit_call < self.calls)
        reset = fresh | (old if self.on_policy else np.zeros_like(old))
        self.restarted = int(np.sum(reset & ~fresh))
        self.fresh = np.zeros(self.Q, bool)
        budget = self.place(np.where(resident, self.budget_Q, 0).astype(np.int32))
        self._before = self._counters()
        self.st = self._begin(self.st, self.place(reset), budget, jnp.int32(self.calls), key)
        need = min(self.B, int(resident.sum()))
        # Pace: decode at least `pace` x the mean decode steps of a call so far, so a call that
        # finds its groups already complete still starts the prompts it admits (otherwise
        # they would all be due in the next call, which then waits for their stragglers).
        until = jnp.int32(self._before["steps"]
                          + int(self.pace * self._before["steps"] / max(self.calls, 1)))
        # A restarted prompt (on_policy) keeps its admission call, so it is due as before: it
        # is restarted once at most, never carried (and restarted) forever.
        horizon, need_H = due_needs(self.admit_call, resident, self.calls, self.max_lag,
                                    self.B)
        order = tuple(map(self.place, self.launch_priority(horizon, resident)))
        more_args = (jnp.int32(need), self.place(horizon), jnp.asarray(need_H),
                     self.place(resident), until)
        # The call prefills the resident prompts at the longest one's width rounded up to
        # pad_multiple, not at P (the rows keep P columns; the bookkeeping is the same on
        # every process, so is the width). The caches are rebuilt every call (module doc).
        cut = self.P - sampling.prompt_width(self.mask_QP[resident], self.pad_multiple)
        prompt, mask = self.place(self.prompt_QP[:, cut:]), self.place(self.mask_QP[:, cut:])
        cfg, gen_fn = self.cfg, self.gen_fn
        if score is None:
            self.st = self._run(params, prompt, mask, budget, order, more_args,
                                jax.tree.map(self.place, reward_data), self.st, cfg=cfg,
                                gen_fn=gen_fn, reward_fn=reward_fn, group=self.group)
        else:
            limit, more = map(int, jax.device_get(jax.block_until_ready(
                _call_bounds(self.st, budget, more_args, cfg=cfg))))
            st = self._resume(params, prompt, mask, self.st, gen_fn=gen_fn)
            prompt_state = _prefill(params, prompt, mask, gen_fn=gen_fn)
            while more and int(st.chunks) < limit:
                st = self._decode(params, prompt_state, budget, order, st, cfg=cfg,
                                  gen_fn=gen_fn)
                r = adaptive.host_rewards(st, score)
                st, more = self._absorb(budget, more_args, st, r, cfg=cfg, group=self.group)
                more = bool(more)
            self.st = st.replace(gen=None)  # the slot caches are freed here
        self.calls += 1
        return self

    def claim(self, drop_unresolved: bool = False) -> Claimed:
        """This step's B groups: prompts admitted before the last call first, then by stopping
        order; their rows are freed."""
        st = self.st
        active, done_at = map(np.asarray, sharding.readable((st.active, st.done_at)))
        # Rows admitted since the last run hold their previous prompts' state: not claimable.
        sampled = (self.admit_call != EMPTY) & ~self.fresh
        if not sampled.any():
            raise RuntimeError("Stream.claim: no prompt has been sampled (nothing resident, or "
                               "admitted but not yet run): admit prompts, then run, then claim")
        want = min(self.B, int(sampled.sum()))  # fewer than B once the stream drains
        stopped = sampled & ~active
        order = np.lexsort((np.arange(self.Q), done_at, self.admit_call))
        rows = np.asarray([r for r in order if stopped[r]][:want], np.int64)
        if len(rows) < want:
            raise RuntimeError(f"streaming: only {len(rows)} of {want} groups complete; "
                               "the engine hit its chunk limit")
        left = (self.admit_call != EMPTY) & ~np.isin(np.arange(self.Q), rows)
        if (self.admit_call[left] < self.calls - self.max_lag).any():
            raise RuntimeError(f"streaming: a prompt would be trained more than "
                               f"{self.max_lag} update(s) after its admission")
        sub = st.replace(**jax.block_until_ready(_claimed_rows(
            {f: getattr(st, f) for f in _CLAIMED}, self.place(rows.astype(np.int32),
                                                              replicated=True))))
        drop = ~adaptive._rule_met(self.cfg, sub.n_samples, sub.n_pos) if drop_unresolved \
            else None
        sub, batch = selection.select_readable(sub, self.group, drop)
        met = selection.metrics(self.cfg, sub, batch, self.group)
        after = self._counters()
        d = {k: after[k] - self._before[k] for k in after}
        version = np.asarray(batch.version_BG)[np.asarray(batch.mask_BG)]
        met.update(
            decode_steps=d["steps"], generated_tokens=d["tokens"], cut_tokens=d["cut"],
            chunks=d["chunks"],
            samples_launched=int(np.asarray(sub.launched).sum()),
            slot_utilisation=d["tokens"] / max(self.cfg.slots * d["steps"], 1),
            off_policy_share=float(np.mean(version < self.calls - 1)) if version.size else 0.0,
            off_policy_lag_max=int(self.calls - 1 - version.min()) if version.size else 0,
            stream_restarted=self.restarted,
            stream_carried=int(np.sum((self.admit_call != EMPTY)) - len(rows)))
        claimed = Claimed(rows=rows, items=[self.items[i] for i in rows],
                          prompt_BP=self.prompt_QP[rows].copy(),
                          mask_BP=self.mask_QP[rows].copy(), batch=batch, metrics=met)
        for i in rows:
            self.items[i] = None
        self.admit_call[rows] = EMPTY
        self.budget_Q[rows] = 0
        return claimed
