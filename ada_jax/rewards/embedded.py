"""The embedded task's verifier: the last `\\boxed{` ... first `}` after it must hold the answer.

`score_tokens` works on token ids and is jittable, so the reward can live inside the sampling
loop; `score_text` is the same rule on strings. They agree whenever `\\boxed{` and `}` are
single tokens that nothing else merges into (true for the embedded tokenizer) and the answer
contains no unknown characters.

Shapes: N completions, T completion length, A max answer length.
"""
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from ada_jax.tokenizer import BOXED, CLOSE, Tokenizer


def score_text(completion: str, answer: str) -> float:
    """1.0 iff the text between the last `\\boxed{` and the next `}` equals `answer`."""
    start = completion.rfind(BOXED)
    if start < 0:
        return 0.0
    start += len(BOXED)
    end = completion.find(CLOSE, start)
    return float(end >= 0 and completion[start:end] == answer)


def score_tokens(completion_ids_NT, lengths_N, answer_ids_NA, answer_len_N, *,
                 boxed_id: int, close_id: int):
    """float32[N]: 1 iff, within the first lengths_N tokens, the tokens between the last
    `boxed_id` and the first `close_id` after it equal answer_ids_NA[:answer_len_N]."""
    T, A = completion_ids_NT.shape[1], answer_ids_NA.shape[1]
    pos_T = jnp.arange(T)
    valid_NT = pos_T[None, :] < lengths_N[:, None]
    box_N = jnp.max(jnp.where(valid_NT & (completion_ids_NT == boxed_id), pos_T, -1), axis=1)
    after_NT = valid_NT & (completion_ids_NT == close_id) & (pos_T[None, :] > box_N[:, None])
    close_N = jnp.min(jnp.where(after_NT, pos_T, T), axis=1)
    found_N = (box_N >= 0) & (close_N < T)
    # content_len == answer_len implies every compared position lies inside the completion
    idx_NA = jnp.clip(box_N[:, None] + 1 + jnp.arange(A), 0, T - 1)
    got_NA = jnp.take_along_axis(completion_ids_NT, idx_NA, axis=1)
    same_NA = (got_NA == answer_ids_NA) | (jnp.arange(A)[None, :] >= answer_len_N[:, None])
    ok_N = found_N & (close_N - box_N - 1 == answer_len_N) & jnp.all(same_NA, axis=1)
    return ok_N.astype(jnp.float32)


def token_scorer(tokenizer: Tokenizer):
    """`score_tokens` with the tokenizer's ids for `\\boxed{` and `}` (which must be single
    tokens, as in the embedded tokenizer)."""
    boxed, close = tokenizer.encode(BOXED), tokenizer.encode(CLOSE)
    if len(boxed) != 1 or len(close) != 1:
        raise ValueError(f"token_scorer needs {BOXED!r} and {CLOSE!r} as single tokens; this "
                         f"tokenizer gives {boxed} and {close}")

    def score(completion_ids_NT, lengths_N, answer_ids_NA, answer_len_N):
        return score_tokens(completion_ids_NT, lengths_N, answer_ids_NA, answer_len_N,
                            boxed_id=boxed[0], close_id=close[0])
    return score


def encode_answers(tokenizer: Tokenizer, answers: Sequence[str], max_len: int):
    """(int32[N, max_len] answer ids padded with tokenizer.pad_id, int32[N] lengths)."""
    ids_NA = np.full((len(answers), max_len), tokenizer.pad_id, np.int32)
    len_N = np.zeros(len(answers), np.int32)
    for n, answer in enumerate(answers):
        ids = tokenizer.encode(answer)
        if len(ids) > max_len:
            raise ValueError(f"answer {answer!r} has {len(ids)} tokens > max_len={max_len}")
        ids_NA[n, :len(ids)], len_N[n] = ids, len(ids)
    return ids_NA, len_N
