"""GRESO (adaptive.policy='greso'; Zheng et al., arXiv 2506.02177): pre-rollout filtering on
top of DAPO's dynamic sampling. Before any rollout, a prompt whose groups were zero-variance
on its last z consecutive visits is skipped with probability 1 − p_e^z (`skip_probability`),
p_e the exploration probability of its kind (p_easy if that last group was all correct,
p_hard if all wrong); the engine runs on B prompts that were not skipped (drawn from as many
prompt batches as needed, at most adaptive.greso.max_draws per engine call); as in DAPO, only
groups with mixed rewards are kept, engine calls repeat until B are kept or
adaptive.dapo.max_gen_batches calls were made (adaptive.dapo.at_cap applies). After the step
each kind's p_e moves by ±delta_p towards its target share of the step's rolled-out groups
(`adapt`): easy target target_zero_var/3, hard 2·target_zero_var/3 (the paper's 1:2 split),
clipped to [p_min, 1] (settings: adaptive.greso.*). docs/theory.md, "GRESO", states where
this differs from the paper.

History needs prompts that recur: the training pool is iterated in epochs (PromptIterator),
so a prompt is seen again once per epoch; with a fresh-prompt stream (a pool larger than the
run) no prompt has a history and nothing is ever skipped: GRESO is then DAPO.

State: `state["greso"]` = {"hist": {problem id: [z, easy]}, "p": [p_easy, p_hard],
"queue": [problems not skipped but not yet rolled out, as dicts]}; checkpointed as
`greso_history` (JSON: exact resume). Every decision is made on the whole batch (every
process's prompts, in process order) with a host RNG seeded by the step key, so every
process decides alike; each process samples its share (`rollout.own_share`).
"""
import dataclasses
import logging

import jax
import numpy as np

from ada_jax import selection
from ada_jax.policies import rollout
from ada_jax.policies.dapo import _assemble, group_size  # noqa: F401  DAPO's groups
from ada_jax.policies.settings import Setting
from ada_jax.tasks.problem import Problem

LABEL = "GRESO"  # the display name (plots, tables)
PRESETS = {"greso": "algo=dapo|--config.adaptive.policy=greso "
                    "--config.adaptive.dapo.max_gen_batches=32"}
SETTINGS = {
    "p_easy": Setting(0.5, "GRESO: initial exploration probability of prompts last seen all "
                      "correct (skipped with 1 - p^z after z zero-variance visits)", "—", "unit"),
    "p_hard": Setting(0.5, "GRESO: initial exploration probability of prompts last seen all "
                      "wrong", "—", "unit"),
    "target_zero_var": Setting(0.25, "GRESO: target share of zero-variance groups among those "
                               "rolled out (1/3 easy, 2/3 hard)", "—", "unit"),
    "delta_p": Setting(0.01, "GRESO: step of the exploration probabilities per training step",
                       "—", "unit"),
    "p_min": Setting(0.05, "GRESO: floor of the exploration probabilities", "—", "unit"),
    "max_draws": Setting(8, "GRESO: prompt batches drawn per engine call at most to find B "
                         "prompts not skipped", "—", "positive_int"),
}


def check(config) -> None:
    g = config.adaptive.greso
    if g.p_min > min(g.p_easy, g.p_hard):
        raise ValueError(f"config.adaptive.greso.p_min={g.p_min!r} exceeds the initial "
                         f"exploration probabilities p_easy={g.p_easy!r} / "
                         f"p_hard={g.p_hard!r}")

log = logging.getLogger(__name__)


def init_state(ctx, params) -> dict:
    a = ctx.config.adaptive.greso
    return {"greso": {"hist": {}, "p": [a.p_easy, a.p_hard], "queue": []}}


def checkpoint(state) -> dict:
    return {"greso_history": state["greso"]}


def restore(meta) -> dict:
    g = meta.get("greso_history")
    if g is None:  # a checkpoint from before this policy
        return {}
    return {"greso": {"hist": {k: [int(v[0]), int(v[1])] for k, v in g["hist"].items()},
                      "p": [float(x) for x in g["p"]], "queue": [dict(q) for q in g["queue"]]}}


def skip_probability(z, p_e):
    """The paper's law: 1 − p_e^z (0 for a prompt with no zero-variance streak)."""
    z = np.asarray(z)
    return np.where(z > 0, 1.0 - np.power(np.asarray(p_e, np.float64), z), 0.0)


def skip_draw(g: dict, ids, rng) -> np.ndarray:
    """[len(ids)] bool: which of these prompts are skipped this time (the law above, each
    prompt's streak and kind from the history, its kind's exploration probability)."""
    z = np.array([g["hist"].get(str(i), [0, 0])[0] for i in ids])
    easy = np.array([g["hist"].get(str(i), [0, 0])[1] for i in ids], bool)
    return rng.random(len(ids)) < skip_probability(z, np.where(easy, g["p"][0], g["p"][1]))


def visit(hist: dict, pid, n_pos: int, n: int) -> None:
    """Record a rolled-out group: a zero-variance one lengthens the prompt's streak z and sets
    its kind (1 all correct, 0 all wrong); a mixed one resets z to 0."""
    if n_pos == 0 or n_pos == n:
        z = hist.get(str(pid), [0, 0])[0]
        hist[str(pid)] = [z + 1, int(n_pos == n)]
    else:
        hist[str(pid)] = [0, 0]


def adapt(p: float, share: float, target: float, delta: float, p_min: float) -> float:
    """One step of the exploration probability: down by delta (skip more) when the observed
    zero-variance share of its kind exceeds its target, else up; within [p_min, 1]."""
    return float(min(1.0, max(p_min, p - delta if share > target else p + delta)))


def _rng(key, salt: int):
    return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist() + [salt])


def _candidates(ctx, iterator, g, B, rng) -> tuple[list, int, int]:
    """B whole-batch problems not skipped (queue first), the prompt batches drawn and the
    prompts skipped; past max_draws batches the rest is filled with skipped ones."""
    a = ctx.config.adaptive.greso
    out = [Problem(**q) for q in g["queue"]]
    g["queue"], skipped, draws = [], [], 0
    while len(out) < B and draws < a.max_draws:
        batch = rollout.everyone(next(iterator))
        draws += 1
        skip = skip_draw(g, [p.id for p in batch], rng)
        out += [p for p, s in zip(batch, skip) if not s]
        skipped += [p for p, s in zip(batch, skip) if s]
    short = max(B - len(out), 0)
    out += skipped[:short]  # past the draw cap: rolled out anyway (counted)
    g["queue"] = [dataclasses.asdict(p) for p in out[B:]]
    return out[:B], draws, len(skipped) - min(short, len(skipped))


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    c, g = ctx.config, state["greso"]
    a, dapo = c.adaptive.greso, c.adaptive.dapo
    rng = _rng(key, 0)
    B = c.rl.prompts_per_step
    drawn, kept, spare, met = [], [], [], {}
    zero = np.zeros(2)  # rolled-out groups all correct, all wrong
    draws = skips = rolled = 0
    for gen_batch in range(dapo.max_gen_batches):
        chosen, d, sk = _candidates(ctx, iterator, g, B, rng)
        draws, skips = draws + d, skips + sk
        got = rollout.run_engine(ctx, params, rollout.own_share(chosen),
                                 jax.random.fold_in(key, gen_batch))
        batch, m = got.batch, got.metrics
        drawn.append((chosen, batch, got.prompt_BP, got.mask_BP))
        met = m if not met else {k: met[k] + m[k] if k in rollout.SUMMED else met[k]
                                 for k in met}
        r, valid = np.asarray(batch.reward_BG), np.asarray(batch.mask_BG)
        n_pos, n = (r * valid).sum(1).astype(int), valid.sum(1).astype(int)
        for p, k_i, n_i in zip(chosen, n_pos, n):
            visit(g["hist"], p.id, k_i, n_i)
        zero += [((n_pos == n) & (n > 0)).sum(), (n_pos == 0).sum()]
        rolled += len(n)
        is_mixed = (n_pos > 0) & (n_pos < n)
        kept += [(gen_batch, i) for i in np.flatnonzero(is_mixed)]
        if len(kept) >= B:
            break
        spare = [(gen_batch, i) for i in np.flatnonzero(~is_mixed)][:B]
    share = zero / max(rolled, 1)
    t = a.target_zero_var
    g["p"] = [adapt(g["p"][0], share[0], t / 3, a.delta_p, a.p_min),
              adapt(g["p"][1], share[1], 2 * t / 3, a.delta_p, a.p_min)]
    short = max(B - len(kept), 0)
    if short and dapo.at_cap == "error":
        raise RuntimeError(f"GRESO: {dapo.max_gen_batches} generation batches gave only "
                           f"{len(kept)} of {B} groups with mixed rewards; raise "
                           f"config.adaptive.dapo.max_gen_batches or set "
                           f"config.adaptive.dapo.at_cap='train'")
    met.update(dapo_gen_batches=gen_batch + 1, dapo_cap_hit=int(short > 0),
               dapo_short_groups=short, greso_skipped=skips, greso_batches_drawn=draws,
               greso_p_easy=g["p"][0], greso_p_hard=g["p"][1], greso_queue=len(g["queue"]))
    chosen = (kept + spare[:short])[:B]
    flat = np.asarray([b * B + i for b, i in chosen], np.int32)
    batch, toks, mask = jax.block_until_ready(_assemble(
        [d[1:] for d in drawn], flat, np.arange(B) < len(kept)))
    every = [p for d in drawn for p in d[0]]
    return rollout.Collected([every[j] for j in flat], selection.readable_batch(batch), toks,
                             mask, met)
