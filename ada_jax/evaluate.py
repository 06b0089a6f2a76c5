"""Evaluation: k samples per prompt, avg@k and unbiased pass@k, per level and weighted.

pass@j(n, c) = 1 − C(n−c, j) / C(n, j) (docs/spec.md §6), averaged over prompts; avg@k is the mean
reward. Hints are never used here. `eval.dtype` and `eval.draw` set the evaluation's sampler
apart from the learner's (a float32 policy sampled in bfloat16, where that is faster).
"""
import dataclasses
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx

from ada_jax import model as model_lib
from ada_jax import sampling, sharding
from ada_jax.rewards.embedded import score_text
from ada_jax.tasks import Problem, task_of
from ada_jax.tokenizer import Tokenizer, encode_prompt, extra_eos_ids, stop_sequences


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def encode_prompts(tokenizer: Tokenizer, problems: Sequence[Problem], template: str,
                   max_len: int, hints: Sequence[str] | None = None):
    """Left-padded prompt ids [B, max_len] and mask for a batch of problems (`encode_prompt`)."""
    ids = [encode_prompt(tokenizer, p.question, template, hints[i] if hints else "")
           for i, p in enumerate(problems)]
    too_long = [i for i, x in enumerate(ids) if len(x) > max_len]
    if too_long:
        raise ValueError(f"prompt of problem id {problems[too_long[0]].id} has "
                         f"{len(ids[too_long[0]])} tokens > config.sampling.max_prompt_len="
                         f"{max_len}")
    return sampling.left_pad(ids, max_len, tokenizer.pad_id)


def sampling_config(config, tokenizer, temperature: float) -> sampling.SamplingConfig:
    """The sampler settings of a run (stop tokens and stop strings from the tokenizer and
    config; ids past the tokenizer's vocabulary masked)."""
    s = config.sampling
    return sampling.SamplingConfig(
        max_new_tokens=s.max_new_tokens, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id,
        temperature=temperature, top_k=s.top_k, top_p=s.top_p,
        extra_eos_ids=extra_eos_ids(tokenizer, config), prefill_chunk=s.prefill_chunk,
        stop_seqs=stop_sequences(tokenizer, config),
        vocab_size=sampling.token_limit(tokenizer.vocab_size, config.model.vocab_size),
        draw=s.draw)


_GRAPHDEFS = {}  # (graphdef, compute dtype) -> graphdef: one object, so one compile a run


def computing_in(graphdef, params, dtype: str):
    """The policy's graphdef with compute dtype `dtype` ("" or its own: unchanged); its params
    stay as they are (each dot casts them, as model.dtype does)."""
    if not dtype:
        return graphdef
    key = (graphdef, dtype)
    if key not in _GRAPHDEFS:
        cfg = nnx.merge(graphdef, params).cfg
        if cfg.dtype == model_lib.compute_dtype(dtype):
            _GRAPHDEFS[key] = graphdef
        else:
            new = dataclasses.replace(cfg, dtype=dtype)
            _GRAPHDEFS[key] = model_lib.abstract(new)[0]
    return _GRAPHDEFS[key]


def sample_completions(graphdef, params, tokenizer, problems, config, key, k: int,
                       batch_rows: int | None = None, temperature: float | None = None):
    """k completions per problem: (texts in problem-major order, int[len(problems), k] lengths
    in tokens), decoded `batch_rows` (default config.eval.batch_rows) rows at a time, with
    eval.dtype's compute and eval.draw's token draw where they are set."""
    s = config.sampling
    batch_rows = config.eval.batch_rows if batch_rows is None else batch_rows
    scfg = sampling_config(config, tokenizer,
                           s.eval_temperature if temperature is None else temperature)
    if config.eval.draw:
        scfg = dataclasses.replace(scfg, draw=config.eval.draw)
    graphdef = computing_in(graphdef, params, config.eval.dtype)
    rows = [p for p in problems for _ in range(k)]
    # No more rows than there are: padding to 256 held 256 rows of KV cache for 32 completions.
    d = jax.device_count()
    batch_rows = min(batch_rows, max(-(-len(rows) // d) * d, d))
    toks, mask = encode_prompts(tokenizer, rows, config.task.template, s.max_prompt_len)
    toks, mask = sampling.trim_left_padding(toks, mask, s.pad_multiple)
    texts, lengths = [""] * len(rows), np.zeros(len(rows), np.int32)
    for start in range(0, len(rows), batch_rows):
        t, m = toks[start:start + batch_rows], mask[start:start + batch_rows]
        n_real = len(t)
        if n_real < batch_rows:  # pad to a fixed shape: one compile
            t = np.concatenate([t, np.repeat(t[-1:], batch_rows - n_real, 0)])
            m = np.concatenate([m, np.repeat(m[-1:], batch_rows - n_real, 0)])
        res = sampling.sample(graphdef, params, jnp.asarray(t), jnp.asarray(m),
                              jax.random.fold_in(key, start), cfg=scfg)
        gen, lens = sharding.to_host(res.tokens_BN), sharding.to_host(res.lengths_B)
        lengths[start:start + n_real] = lens[:n_real]
        for j in range(n_real):
            texts[start + j] = tokenizer.decode(gen[j, :lens[j]].tolist())
    return texts, lengths.reshape(len(problems), k)


def score_completions(config, problems, texts) -> np.ndarray:
    """Rewards [len(problems), k] of problem-major texts, by the task's verifier. On several
    processes each scores a contiguous share of the texts and the scores are gathered."""
    of_text = [p for p in problems for _ in range(len(texts) // max(len(problems), 1))]
    share = -(-len(texts) // jax.process_count())
    mine = slice(jax.process_index() * share, (jax.process_index() + 1) * share)
    texts, of_text = texts[mine], of_text[mine]
    answers = [p.answer for p in of_text]
    task = task_of(config)
    scorer = task.score_text(config) if task.score_text else None
    if not texts:
        out = []
    elif task.host_verifier:
        from ada_jax.rewards.math_verifier import MathVerifierPool
        with MathVerifierPool.from_config(config) as pool:
            out = pool.score(texts, answers).tolist()
    elif scorer is not None:  # the task's own (the family task's reading reward)
        out = [scorer(p, t) for p, t in zip(of_text, texts)]
    else:
        out = [score_text(t, a) for t, a in zip(texts, answers)]
    out = [r for part in sharding.allgather_json(out) for r in part]
    return np.asarray(out, np.float32).reshape(len(problems), -1)


def summarize(problems: Sequence[Problem], rewards_PK: np.ndarray, lengths_PK=None) -> dict:
    """avg@k, pass@1, pass@k overall and per level, plus the per-prompt pass-rate histogram;
    with the completions' lengths, their mean in tokens. A task's own metrics come from its
    `Task.eval_metrics` (`evaluate`)."""
    n = rewards_PK.shape[1]
    c = rewards_PK.sum(1).astype(int)
    out = {f"avg@{n}": float(rewards_PK.mean()),
           f"pass@{n}": float(np.mean([pass_at_k(n, ci, n) for ci in c])),
           "pass@1": float(np.mean([pass_at_k(n, ci, 1) for ci in c]))}
    levels = np.asarray([p.level for p in problems])
    for lv in sorted(set(levels.tolist())):
        sel = levels == lv
        out[f"level{lv}/avg@{n}"] = float(rewards_PK[sel].mean())
    rates = rewards_PK.mean(1)
    out["share_p_lt_0.1"] = float(np.mean(rates < 0.1))
    out["share_p_gt_0.9"] = float(np.mean(rates > 0.9))
    out["share_p_in_(0,0.15)"] = float(np.mean((rates > 0) & (rates < 0.15)))
    out["pass_rate_histogram"] = np.histogram(rates, bins=10, range=(0, 1))[0].tolist()
    if lengths_PK is not None:
        out["response_len"] = float(np.mean(lengths_PK))
    return out


def evaluate(graphdef, params, tokenizer, problems, config, key, k: int | None = None,
             samples_per_level: int = 0) -> dict:
    """avg@k, pass@k (summarize); with samples_per_level > 0 also "samples": that many
    completions per level (the first sample of the level's first prompts), each a dict of
    level, question, answer, completion and reward."""
    k = config.eval.k if k is None else k
    texts, lengths = sample_completions(graphdef, params, tokenizer, problems, config, key, k)
    rewards_PK = score_completions(config, problems, texts)
    out = summarize(problems, rewards_PK, lengths)
    if (task_metrics := task_of(config).eval_metrics) is not None:
        out.update(task_metrics(problems, rewards_PK, texts))
    if samples_per_level:
        shown = {}
        for i, p in enumerate(problems):
            if len(shown.setdefault(p.level, [])) < samples_per_level:
                shown[p.level].append(dict(level=p.level, question=p.question, answer=p.answer,
                                           completion=texts[i * k],
                                           reward=float(rewards_PK[i, 0])))
        out["samples"] = [s for lv in sorted(shown) for s in shown[lv]]
    return out
