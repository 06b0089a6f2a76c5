"""Log-probabilities of target tokens under the model's output head, float32, with bounded
memory: the head's [rows, length, vocab] logits are taken in chunks (of rows, or for a tied head
of vocabulary entries) once they pass HEAD_CHUNK_BYTES, each chunk recomputed in the backward
pass."""
import jax
import jax.numpy as jnp

from ada_jax import sharding
from ada_jax.model import softcap, wide


def token_logprobs(logits_BTV, targets_BT, temperature: float = 1.0):
    """log π(target) under softmax(logits / temperature), float32, and entropy [B,T]. From
    the log-normaliser [B,T] (log π(a) = z_a - lse, H = lse - Σ π z): one [B,T,V] array (π)
    besides the logits, where a log-softmax copy and its exponential made two."""
    logits = logits_BTV.astype(jnp.float32) / max(temperature, 1e-6)
    lse = jax.nn.logsumexp(logits, axis=-1)
    logp = jnp.take_along_axis(logits, targets_BT[..., None], axis=-1)[..., 0] - lse
    entropy = lse - jnp.sum(jnp.exp(logits - lse[..., None]) * logits, axis=-1)
    return logp, entropy


HEAD_CHUNK_BYTES = 32 * 2**20  # float32 logits of one chunk in `head_logprobs`
MIN_VOCAB_CHUNK = 256  # a tied head chunked by fewer entries than this goes by rows instead


def head_chunk_rows(rows: int, length: int, vocab: int) -> int:
    """Rows per chunk of `head_logprobs`: all of them when their [rows, length, vocab] float32
    logits fit in HEAD_CHUNK_BYTES, else the largest divisor of `rows` whose chunk fits (1 at
    least)."""
    fit = max(1, HEAD_CHUNK_BYTES // (length * vocab * 4))
    return rows if fit >= rows else max(r for r in range(1, fit + 1) if rows % r == 0)


def vocab_chunk(positions: int, vocab: int) -> int:
    """Vocabulary entries per chunk of a tied head's log-probs over `positions` rows: the
    largest divisor of `vocab` whose [positions, chunk] float32 logits fit in
    HEAD_CHUNK_BYTES, or 0 when that is under MIN_VOCAB_CHUNK (too many small matmuls)."""
    fit = HEAD_CHUNK_BYTES // (positions * 4)
    best = max((c for c in range(1, min(fit, vocab) + 1) if vocab % c == 0), default=0)
    return best if best >= MIN_VOCAB_CHUNK else 0


def chunk_plan(rows: int, length: int, vocab: int, tied: bool) -> tuple[int, int]:
    """(rows, vocabulary entries) of one chunk of `head_logprobs`: everything when the float32
    logits fit in HEAD_CHUNK_BYTES, else a tied head's vocabulary in chunks over all the rows
    (`vocab_chunk`), else chunks of rows (`head_chunk_rows`)."""
    by_rows = head_chunk_rows(rows, length, vocab)
    chunk = vocab_chunk(rows * length, vocab) if tied and by_rows < rows else 0
    return (rows, chunk) if chunk else (by_rows, vocab)


def tied_head_logprobs(model, hidden_ND, targets_N, chunk: int, temperature: float = 1.0):
    """token_logprobs of a tied head (logits h · Eᵀ), `chunk` vocabulary entries at a time:
    a scan over E's rows carrying the running max, Σ e^(z-max), Σ e^(z-max)·z and the target's
    logit (an online log-sum-exp). E's chunks are the scan's inputs, so the backward pass
    writes each chunk's gradient into its own slice of E's: no [V, D] gradient temporary
    beside the accumulated one, as a scan over rows needs for each chunk (Gemma 3's 262k × 640
    embedding: 640 MiB), and the logits exist for one chunk at once (recomputed backward)."""
    cfg = model.cfg
    V, D = model.embed.shape
    cd = jnp.dtype(cfg.dtype)
    h = hidden_ND.astype(cd)
    inv_t = 1.0 / max(temperature, 1e-6)
    cap = cfg.final_logit_softcap

    @jax.checkpoint
    def step(carry, xs):
        m, s, sz, zt = carry
        e_CD, start = xs
        z = jax.lax.dot_general(h, e_CD.astype(cd), (((1,), (1,)), ((), ())),
                                preferred_element_type=wide(cd))
        z = (softcap(z, cap) if cap else z).astype(jnp.float32) * inv_t
        m_new = jnp.maximum(m, z.max(-1))
        scale = jnp.exp(m - m_new)
        p = jnp.exp(z - m_new[:, None])
        idx = targets_N - start
        inside = (idx >= 0) & (idx < chunk)
        z_t = jnp.take_along_axis(z, jnp.clip(idx, 0, chunk - 1)[:, None], axis=-1)[:, 0]
        return (m_new, s * scale + p.sum(-1), sz * scale + (p * z).sum(-1),
                zt + jnp.where(inside, z_t, 0.0)), None

    n = h.shape[0]
    init = (jnp.full((n,), -1e30, jnp.float32),) + (jnp.zeros((n,), jnp.float32),) * 3
    chunks = sharding.constrain(model.embed[...].reshape(V // chunk, chunk, D),
                                (None, "vocab", "embed"))
    (m, s, sz, zt), _ = jax.lax.scan(step, init,
                                     (chunks, jnp.arange(V // chunk, dtype=jnp.int32) * chunk))
    lse = m + jnp.log(s)
    return zt - lse, lse - sz / s


def head_logprobs(model, hidden_BTD, targets_BT, temperature: float = 1.0):
    """token_logprobs of the output head on final-normed hidden states (Transformer's
    `hidden`), in chunks when [B,T,V] float32 logits exceed HEAD_CHUNK_BYTES: a tied head by
    vocabulary entries (`tied_head_logprobs`), a separate one a chunk of rows at a time, each
    chunk's logits recomputed in the backward pass (jax.checkpoint), so the logits and their
    softmax exist for one chunk at once instead of as several [B,T,V] copies (SmolLM2's
    vocabulary of 49,152: 12.6 MB per row of 64 positions). Same values as the whole batch at
    once, up to float rounding."""
    B, T = targets_BT.shape
    # rows over the batch axes, as the blocks leave them (the shared-prompt path's gather and
    # concatenation would otherwise let XLA replicate the head's work)
    hidden_BTD = sharding.constrain(hidden_BTD, ("batch", "length", "embed"))
    V = model.cfg.vocab_size
    rows, chunk = chunk_plan(B, T, V, model.cfg.tie_embeddings)
    if (rows, chunk) == (B, V):
        return token_logprobs(model.head(hidden_BTD).astype(jnp.float32), targets_BT,
                              temperature)
    if chunk < V:
        logp, ent = tied_head_logprobs(model, hidden_BTD.reshape(B * T, -1),
                                       targets_BT.reshape(B * T), chunk, temperature)
        return logp.reshape(B, T), ent.reshape(B, T)

    @jax.checkpoint
    def chunk_rows(_, xs):
        h, t = xs
        return None, token_logprobs(model.head(h).astype(jnp.float32), t, temperature)

    split = lambda x: x.reshape((B // rows, rows) + x.shape[1:])  # noqa: E731
    _, (logp, ent) = jax.lax.scan(chunk_rows, None, (split(hidden_BTD), split(targets_BT)))
    return logp.reshape(B, T), ent.reshape(B, T)
