"""Sample generators for the adaptive engine (`adaptive.run`): the transformer, and a
model-free Bernoulli oracle whose outcomes and lengths depend only on (prompt, sample index),
so stopping laws can be checked exactly.

A generator has prefill(params, prompt_BP, mask_BP) -> prompt state, init_slots(prompt state,
S), restart(prompt state, slot state, start_S, prompt_S), for_decoding(params) -> step's
params, step(those, prompt state, slot state, live_S, prompt_S, seq_S, key) -> (token_S,
logp_S, slot state) and resume(params,
prompt_BP, mask_BP, prompt_S, tokens_SN, len_S) -> slot state: the slot state of samples
already running, rebuilt from their tokens (the streaming engine keeps no slot caches between
calls, ada_jax/stream.py).
"""
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from ada_jax import layer_stack
from ada_jax import model as model_lib
from ada_jax import sampling


@dataclasses.dataclass(frozen=True)
class ModelGenerator:
    """Decodes with the transformer; slots restart from a prompt's prefilled cache."""
    graphdef: Any
    model_cfg: model_lib.ModelConfig
    sampling: sampling.SamplingConfig

    @property
    def eos_id(self):
        return self.sampling.eos_id

    @property
    def eos_ids(self):
        return self.sampling.eos_ids

    @property
    def stop_seqs(self):
        return self.sampling.stop_seqs

    @property
    def pad_id(self):
        return self.sampling.pad_id

    def for_decoding(self, params):
        """`step`'s params: the per-layer model (`layer_stack.per_layer`), taken once before a
        decode loop rather than at each of its steps."""
        return nnx.split(layer_stack.per_layer(nnx.merge(self.graphdef, params)))

    def prefill(self, params, prompt_BP, mask_BP):
        model = layer_stack.per_layer(nnx.merge(self.graphdef, params))
        P = prompt_BP.shape[1]
        logits, cache, next_pos = sampling.prefill(model, prompt_BP, mask_BP, P,
                                                   self.sampling.prefill_chunk)
        return dict(logits=logits, cache=cache, next_pos=next_pos, P=jnp.int32(P))

    def init_slots(self, prompt_state, S):
        P = prompt_state["cache"]["valid"].shape[1]
        V = prompt_state["logits"].shape[1]
        return dict(cache=model_lib.init_cache(self.model_cfg, S,
                                               P + self.sampling.max_new_tokens),
                    logits=jnp.zeros((S, V), jnp.float32), next_pos=jnp.zeros((S,), jnp.int32))

    def restart(self, prompt_state, gen, start_S, prompt_S):
        """Copy the prompt's cache into the started slots: a scatter of their first P positions
        only (later positions keep stale keys/values, masked out by `valid`)."""
        pc, sc = prompt_state["cache"], gen["cache"]
        S, P = start_S.shape[0], pc["valid"].shape[1]
        idx = jnp.maximum(prompt_S, 0)
        rows = jnp.where(start_S, jnp.arange(S), S)  # S = out of range: not written

        def put(slot_arr, prompt_arr, name):  # the first P positions of the started slots
            at = (rows,) + (slice(None),) * (model_lib.CACHE_LEN_AXIS[name] - 1) + (slice(0, P),)
            return slot_arr.at[at].set(prompt_arr[idx], mode="drop")

        valid = jnp.where(start_S[:, None],
                          jnp.zeros_like(sc["valid"]).at[:, :P].set(pc["valid"][idx]),
                          sc["valid"])
        cache = dict(k=[put(s, p, "k") for s, p in zip(sc["k"], pc["k"])],
                     v=[put(s, p, "v") for s, p in zip(sc["v"], pc["v"])], valid=valid,
                     pos=jnp.where(start_S, P, sc["pos"]))
        return dict(cache=cache,
                    logits=jnp.where(start_S[:, None], prompt_state["logits"][idx], gen["logits"]),
                    next_pos=jnp.where(start_S, prompt_state["next_pos"][idx], gen["next_pos"]))

    def resume(self, params, prompt_BP, mask_BP, prompt_S, tokens_SN, len_S):
        """Slots whose samples have drawn len_S tokens of prompt prompt_S: their caches as
        decoding wrote them (the prompt's P positions, then the drawn tokens at P, P + 1, …),
        rebuilt by one prefill of prompt + drawn tokens in `sampling.prefill_chunk`-row
        chunks, and the logits of each one's next token (free slots: prompt 0's, unused)."""
        model = layer_stack.per_layer(nnx.merge(self.graphdef, params))
        P, N = prompt_BP.shape[1], tokens_SN.shape[1]
        idx = jnp.maximum(prompt_S, 0)
        drawn_SN = jnp.arange(N)[None] < len_S[:, None]
        mask = jnp.concatenate([mask_BP[idx], drawn_SN], 1)
        tokens = jnp.concatenate([prompt_BP[idx], tokens_SN], 1)
        logits, cache = sampling.prefill_rows(model, tokens, mask, P - 1 + len_S, P + N,
                                              self.sampling.prefill_chunk)
        cache["pos"] = P + len_S
        return dict(cache=cache, logits=logits,
                    next_pos=jnp.sum(mask, axis=1).astype(jnp.int32))

    def step(self, params, prompt_state, gen, live_S, prompt_S, seq_S, key):
        model = nnx.merge(*params)  # for_decoding's (graphdef, state)
        token, logp, logits, cache = sampling.decode_step(
            model, gen["logits"], key, gen["cache"], gen["next_pos"], live_S, self.sampling)
        gen = dict(cache=cache, logits=logits, next_pos=gen["next_pos"] + live_S)
        return token, logp, gen


@dataclasses.dataclass(frozen=True)
class BernoulliGenerator:
    """Model-free oracle: sample j of a prompt is the token j (its index within the prompt).

    max_len = 1 (default): every sample is that one token (use max_new_tokens=1). max_len > 1:
    sample j of prompt i runs L(i, j) steps, uniform on 2..max_len from a hash of (i, j)
    (`oracle_lengths`): the token j, then j again, the last step `eos_id` (use
    max_new_tokens >= max_len), so slots finish out of launch order.

    Pair with `bernoulli_reward`: sample j of prompt i is correct iff
    uniform(fold_in(fold_in(key, i), j)) < p_i, so outcomes depend only on (prompt, index).
    """
    eos_id: int = -1
    pad_id: int = 0
    max_len: int = 1

    def for_decoding(self, params):
        return params

    def prefill(self, params, prompt_BP, mask_BP):
        return {}

    def init_slots(self, prompt_state, S):
        return dict(steps=jnp.zeros((S,), jnp.int32))

    def restart(self, prompt_state, gen, start_S, prompt_S):
        return dict(steps=jnp.where(start_S, 0, gen["steps"]))

    def resume(self, params, prompt_BP, mask_BP, prompt_S, tokens_SN, len_S):
        return dict(steps=len_S)

    def step(self, params, prompt_state, gen, live_S, prompt_S, seq_S, key):
        token = seq_S.astype(jnp.int32)
        if self.max_len > 1:
            last = gen["steps"] + 1 >= oracle_lengths(prompt_S, seq_S, self.max_len)
            token = jnp.where(last, self.eos_id, token)
        return token, jnp.zeros(seq_S.shape, jnp.float32), dict(steps=gen["steps"] + live_S)


def oracle_lengths(prompt_S, seq_S, max_len: int):
    """BernoulliGenerator's sample lengths: uniform on 2..max_len, a hash of (prompt, index)."""
    h = (jnp.maximum(prompt_S, 0).astype(jnp.uint32) * jnp.uint32(2654435761)
         + seq_S.astype(jnp.uint32) * jnp.uint32(40503) + jnp.uint32(12345))
    h = (h ^ (h >> 15)) * jnp.uint32(2246822519)
    h = h ^ (h >> 13)
    return 2 + (h % jnp.uint32(max_len - 1)).astype(jnp.int32)


def bernoulli_reward(reward_data, prompt_S, seq_S, tokens_SN, lengths_S):
    """reward_data = dict(key=…, p=[B], optional id=[B]): reproducible Bernoulli(p_i) draw for
    (prompt, index); the prompt is its row i, or id[i] when given (streaming reuses rows)."""
    row = jnp.maximum(prompt_S, 0)
    ident = reward_data["id"][row] if "id" in reward_data else row

    def draw(i, j):
        return jax.random.uniform(jax.random.fold_in(jax.random.fold_in(reward_data["key"], i), j))
    u = jax.vmap(draw)(ident, seq_S)
    return (u < reward_data["p"][row]).astype(jnp.float32)
