"""Jitted batched sampling: one prefill, then a `lax.while_loop` over a fixed-size state.

Shapes: B rows, P prompt length (left-padded), N max new tokens, S = P + N cache length, V vocab.

Prefill computes logits at each row's last prompt position only and can run the rows in
chunks (`SamplingConfig.prefill_chunk`), so its float32 transients stay small: the attention
scores of one chunk, never a [B,P,V] logits array. A row stops at `eos_id` or any of
`extra_eos_ids` (e.g. Qwen's <|endoftext|> next to the chat turn's <|im_end|>), or once it ends
with one of `stop_seqs` (stop strings as token sequences: a base model's next "\nQuestion:"). Ids the
tokenizer does not have are never drawn: with `vocab_size` (the tokenizer's size) below the
model's vocabulary (Qwen2.5 pads its embedding to a multiple of 128), the logits of ids >= it are
masked before the draw, like a top-k truncation.

Log-probs returned are log softmax(logits / temperature) of the sampled token, in float32, before
top-k / top-p truncation and the vocabulary mask: the quantity the learner recomputes as π_old
(verl's convention), so at T = 1 and top-p = 1 they are exactly the policy's log-probs. Params are traced arguments (the
graphdef and sampling settings are static), so calls with the same shapes never recompile.
"""
import dataclasses
import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from ada_jax import layer_stack
from ada_jax import model as model_lib
from ada_jax import sharding

log = logging.getLogger(__name__)

# Token draws, each exact for the categorical distribution; a seed's tokens differ between them.
# gumbel: argmax(logits + Gumbel noise), `jax.random.categorical` (B x V random bits a step);
# inverse_cdf: one uniform a row against the cumulative probabilities (`draw_inverse_cdf`).
DRAWS = ("gumbel", "inverse_cdf")


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int
    eos_id: int
    pad_id: int = 0
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    extra_eos_ids: tuple[int, ...] = ()  # further stop tokens besides eos_id
    # token sequences that end a row once it ends with one (stop strings, encoded: a base
    # model's next "\nQuestion:"); kept in the response, as a stop token is
    stop_seqs: tuple[tuple[int, ...], ...] = ()
    prefill_chunk: int = 0  # rows per prefill call (0 = all rows at once)
    vocab_size: int = 0  # ids >= it are never sampled (the tokenizer's size; 0 = no mask)
    draw: str = "gumbel"  # how a token is drawn: one of DRAWS

    def __post_init__(self):
        if self.draw not in DRAWS:
            raise ValueError(f"SamplingConfig.draw={self.draw!r}: choose from {DRAWS}")

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return (self.eos_id, *self.extra_eos_ids)


@struct.dataclass
class SampleOutput:
    tokens_BN: jax.Array  # int32, pad after the end
    logp_BN: jax.Array  # float32, 0 after the end
    lengths_B: jax.Array  # int32, generated tokens including EOS
    steps: jax.Array  # decode iterations run (early exit when every row is done)


@struct.dataclass
class _LoopState:
    step: jax.Array
    key: jax.Array
    logits_BV: jax.Array
    next_pos_B: jax.Array
    done_B: jax.Array
    out: SampleOutput
    cache: dict


def filter_logits(logits_BV, top_k: int, top_p: float):
    """Mask (to -inf) everything outside the top-k and the top-p nucleus."""
    if top_k > 0:
        kth = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
        logits_BV = jnp.where(logits_BV < kth, -jnp.inf, logits_BV)
    if top_p < 1.0:
        sorted_desc = -jnp.sort(-logits_BV, axis=-1)
        probs = jax.nn.softmax(sorted_desc, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        # The smallest logit still inside the nucleus: keep tokens with mass before < p.
        n_keep = jnp.sum(mass_before < top_p, axis=-1, keepdims=True)
        threshold = jnp.take_along_axis(sorted_desc, n_keep - 1, axis=-1)
        logits_BV = jnp.where(logits_BV < threshold, -jnp.inf, logits_BV)
    return logits_BV


@functools.lru_cache(maxsize=None)
def token_limit(tokenizer_vocab: int, model_vocab: int) -> int:
    """`SamplingConfig.vocab_size` for a tokenizer of tokenizer_vocab ids on a model with
    model_vocab logits: 0 (no mask) when they agree, else tokenizer_vocab, said once in the log."""
    if tokenizer_vocab >= model_vocab:
        return 0
    log.info("the model has %d logits, the tokenizer %d ids: ids %d..%d are never sampled",
             model_vocab, tokenizer_vocab, tokenizer_vocab, model_vocab - 1)
    return tokenizer_vocab


def mask_vocab(logits_BV, vocab_size: int):
    """-inf at ids >= vocab_size (0 = no mask)."""
    if 0 < vocab_size < logits_BV.shape[-1]:
        logits_BV = jnp.where(jnp.arange(logits_BV.shape[-1]) < vocab_size, logits_BV, -jnp.inf)
    return logits_BV


def sample_token(logits_BV, key, cfg: SamplingConfig):
    """Draw one token per row; return (token [B] int32, its float32 log-prob [B])."""
    logits_BV = logits_BV.astype(jnp.float32)
    if cfg.temperature == 0.0:
        token = jnp.argmax(mask_vocab(logits_BV, cfg.vocab_size), axis=-1)
        scaled = logits_BV
    else:
        scaled = logits_BV / cfg.temperature
        kept = filter_logits(mask_vocab(scaled, cfg.vocab_size), cfg.top_k, cfg.top_p)
        if cfg.draw == "inverse_cdf":
            token = draw_inverse_cdf(kept, key)
        else:
            token = jax.random.categorical(key, kept)
    logp = jnp.take_along_axis(jax.nn.log_softmax(scaled), token[:, None], axis=-1)[:, 0]
    return token.astype(jnp.int32), logp


def draw_inverse_cdf(logits_BV, key, block: int = 256):
    """One token per row from softmax(logits_BV), by one uniform a row against the cumulative
    probabilities: the Gumbel-max draw needs B x V random bits and two logs per logit, on a CPU
    ~a fifth of a SmolLM2 decode step (docs/benchmarks.md); this reads the logits once more.
    The vocabulary is cut in blocks: the block sums' running total picks the block, a running
    total inside that one block the token. Where float rounding would carry the target past a
    total, the last token (block) of nonzero probability is taken: a token of probability 0
    (-inf logit) is never drawn."""
    B, V = logits_BV.shape
    n_blocks = -(-V // block)
    p_BV = jnp.exp(logits_BV - jnp.max(logits_BV, axis=-1, keepdims=True))
    p_BKC = jnp.pad(p_BV, ((0, 0), (0, n_blocks * block - V))).reshape(B, n_blocks, block)
    blocks_BK = jnp.cumsum(jnp.sum(p_BKC, axis=-1), axis=-1)
    target_B = jax.random.uniform(key, (B,), jnp.float32) * blocks_BK[:, -1]

    def first_above(totals, target):
        """Index of the first running total above target, at most the last increasing one."""
        above = jnp.sum(totals <= target[:, None], axis=-1)
        return jnp.minimum(above, jnp.sum(totals < totals[:, -1:], axis=-1))

    k_B = first_above(blocks_BK, target_B)
    before_B = jnp.where(k_B > 0, jnp.take_along_axis(
        blocks_BK, jnp.maximum(k_B - 1, 0)[:, None], axis=-1)[:, 0], 0.0)
    inside_BC = jnp.cumsum(jnp.take_along_axis(p_BKC, k_B[:, None, None], axis=1)[:, 0], axis=-1)
    return k_B * block + first_above(inside_BC, target_B - before_B)


def is_eos(token_B, eos_ids) -> jax.Array:
    """True where a token is one of the (static) stop ids."""
    done = jnp.zeros(token_B.shape, bool)
    for e in eos_ids:
        done = done | (token_B == e)
    return done


def ends_with(tokens_BN, length_B, seqs) -> jax.Array:
    """True where a row's first length_B tokens end with one of the (static) token sequences."""
    done = jnp.zeros(length_B.shape, bool)
    for seq in seqs:
        k = len(seq)
        at = jnp.clip(length_B[:, None] - k + jnp.arange(k), 0, tokens_BN.shape[1] - 1)
        tail = jnp.take_along_axis(tokens_BN, at, axis=1)
        done = done | ((length_B >= k) & jnp.all(tail == jnp.asarray(seq, tokens_BN.dtype), 1))
    return done


def prefill_rows(model, tokens_BT, mask_BT, last_B, cache_len: int, chunk: int = 0):
    """(logits at position last_B [B,V] float32, cache of cache_len positions with the T
    tokens at 0..T-1): one forward pass over the rows. chunk > 0 runs `chunk` rows at a time
    (rows j, j + n, j + 2n, … of n chunks, so each chunk spreads over batch-sharded devices),
    bounding the float32 attention scores to [chunk, H, T, cache_len]; each chunk is written
    into the one preallocated cache in place (a fori_loop), so no second copy of it is ever
    made. Rows past B (when chunk does not divide it) are padding."""
    B, T = tokens_BT.shape
    cfg = model.cfg

    def rows(tok, mask, last):
        cache = model_lib.init_cache(cfg, tok.shape[0], cache_len)
        logits, cache = model(tok, model_lib.positions_from_mask(mask), mask, cache,
                              logits_at_BU=last[:, None])
        return logits[:, 0], cache

    if chunk <= 0 or chunk >= B:
        return rows(tokens_BT, mask_BT, last_B)
    n = -(-B // chunk)
    pad = n * chunk - B

    def split(x):  # [B, ...] -> [chunk, n, ...]: chunk j is [:, j]
        return jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1)).reshape(chunk, n, *x.shape[1:])

    tok, mask, last = split(tokens_BT), split(mask_BT), split(last_B)
    out = jax.eval_shape(lambda: rows(tok[:, 0], mask[:, 0], last[:, 0]))
    out = jax.tree.map(lambda x: jnp.zeros((chunk, n) + x.shape[1:], x.dtype), out)

    def body(j, out):
        got = rows(tok[:, j], mask[:, j], last[:, j])
        return jax.tree.map(lambda o, g: jax.lax.dynamic_update_index_in_dim(o, g, j, 1), out,
                            got)

    out = jax.lax.fori_loop(0, n, body, out)
    return jax.tree.map(lambda x: x.reshape((n * chunk,) + x.shape[2:])[:B], out)




def prefill(model, prompt_BP, prompt_mask_BP, cache_len: int, chunk_rows: int = 0):
    """Run the left-padded prompts through the model once: (last-position logits [B,V],
    cache, next pos [B]); chunk_rows > 0 prefills that many rows at a time (prefill_rows)."""
    B, P = prompt_BP.shape
    last_B = jnp.full((B,), P - 1, jnp.int32)  # left-padded: every row's last real token
    logits, cache = prefill_rows(model, prompt_BP, prompt_mask_BP, last_B, cache_len,
                                 chunk_rows)
    return logits, cache, jnp.sum(prompt_mask_BP, axis=1).astype(jnp.int32)


def decode_step(model, logits_BV, key, cache, next_pos_B, live_B, cfg: SamplingConfig):
    """Sample a token for every row from logits_BV and feed it back through the model.

    Rows with live_B False still compute (fixed shapes) but write masked-out cache entries.
    Returns (token [B], logp [B], new logits [B,V], new cache).
    """
    token, logp = sample_token(logits_BV, key, cfg)
    token = jnp.where(live_B, token, cfg.pad_id)
    logits, cache = model(token[:, None], next_pos_B[:, None], live_B[:, None], cache)
    return token, logp, logits[:, 0], cache


@functools.partial(jax.jit, static_argnames=("graphdef", "cfg"))
def sample(graphdef, params, prompt_BP, prompt_mask_BP, key, *, cfg: SamplingConfig):
    """Sample up to cfg.max_new_tokens per row; stops a row at any of cfg.eos_ids or once it
    ends with one of cfg.stop_seqs, the loop when all rows have stopped."""
    model = layer_stack.per_layer(nnx.merge(graphdef, params))  # sliced outside the loop
    B, P = prompt_BP.shape
    N = cfg.max_new_tokens
    logits, cache, next_pos = prefill(model, prompt_BP, prompt_mask_BP, P + N,
                                      cfg.prefill_chunk)
    out = SampleOutput(tokens_BN=jnp.full((B, N), cfg.pad_id, jnp.int32),
                       logp_BN=jnp.zeros((B, N), jnp.float32),
                       lengths_B=jnp.zeros((B,), jnp.int32), steps=jnp.int32(0))
    init = _LoopState(step=jnp.int32(0), key=key, logits_BV=logits, next_pos_B=next_pos,
                      done_B=jnp.zeros((B,), bool), out=out, cache=cache)

    # Per-step keys: one vectorised threefry draw here, then RngBitGenerator ("rbg") inside the
    # loop. On CPU threefry lowers to a rolled 5-iteration loop of tiny ops, run twice a step
    # (fold_in and the B×V Gumbel bits) if it were used in the loop body.
    step_seeds_N4 = jax.random.bits(key, (N, 4), jnp.uint32)

    def cond(s):
        return (s.step < N) & ~jnp.all(s.done_B)

    def body(s):
        live = ~s.done_B
        step_key = jax.random.wrap_key_data(step_seeds_N4[s.step], impl="rbg")
        token, logp, logits, cache = decode_step(
            model, s.logits_BV, step_key, s.cache, s.next_pos_B, live, cfg)
        o = s.out
        o = o.replace(tokens_BN=o.tokens_BN.at[:, s.step].set(token),
                      logp_BN=o.logp_BN.at[:, s.step].set(jnp.where(live, logp, 0.0)),
                      lengths_B=o.lengths_B + live.astype(jnp.int32), steps=s.step + 1)
        done = s.done_B | (live & (is_eos(token, cfg.eos_ids)
                                   | ends_with(o.tokens_BN, o.lengths_B, cfg.stop_seqs)))
        return s.replace(step=s.step + 1, logits_BV=logits, next_pos_B=s.next_pos_B + live,
                         done_B=done, out=o, cache=cache)

    return jax.lax.while_loop(cond, body, init).out


def left_pad(seqs, length: int, pad_id: int = 0):
    """Host helper: list of token lists -> (tokens [B,length] int32, mask [B,length] bool)."""
    tokens = np.full((len(seqs), length), pad_id, np.int32)
    mask = np.zeros((len(seqs), length), bool)
    for i, s in enumerate(seqs):
        if len(s) > length:
            raise ValueError(f"prompt {i} has {len(s)} tokens, more than the limit {length}")
        if len(s):
            tokens[i, length - len(s):] = s
            mask[i, length - len(s):] = True
    return tokens, mask


def prompt_width(mask, multiple: int = 16, across_processes: bool = False) -> int:
    """The columns left-padded prompts (mask [B, P]) need: the longest one's length rounded up
    to `multiple`, at most P (0 keeps P). The prefill and every decode step's attention then
    run over the prompts there are, not over sampling.max_prompt_len (SmolLM2's 46-token
    prompts at 128: 2.7x the prefill's work); few widths, so few compiles. `across_processes`:
    the rows are this process's share of one global batch, cut to the longest of all."""
    mask = np.asarray(mask)
    if multiple <= 0:
        return mask.shape[1]
    longest = int(mask.sum(1).max(initial=0))
    if across_processes:
        longest = max(sharding.allgather_json(longest))
    return min(mask.shape[1], max(-(-longest // multiple) * multiple, multiple))


def trim_left_padding(toks, mask, multiple: int = 16, across_processes: bool = False):
    """Left-padded prompts [B, P] cut to `prompt_width` columns (its arguments)."""
    width = prompt_width(mask, multiple, across_processes)
    return toks[:, toks.shape[1] - width:], mask[:, mask.shape[1] - width:]
