"""Self-hinting (SAGE, docs/spec.md §5): rescue collapsed groups by re-rolling them under a hint.

When every sample of a prompt is wrong, its group gives no gradient. The hint h reveals part
of the reference solution (`tasks.hint`, strength 1–3); the group is sampled again from
π(·|x, h) with the unchanged reward r(x, a) and trained on-policy on (x, h). Evaluation never
uses hints. Two schedulers:
- "sage": within a step, escalate 1 → 2 → 3 for the prompts still all-wrong;
- "sage_light": one pass; each prompt's level comes from its accuracy the last time it was
  seen (all wrong → one level up, at least half right → one level down), kept in `state`.
One hint per prompt per step.
"""
import jax
import jax.numpy as jnp
import numpy as np

from ada_jax.selection import readable_batch
from ada_jax.tasks import hint as make_hint

LEVELS = (1, 2, 3)


@jax.jit
def _merge(batch, toks, mask, new_batch, new_toks, new_mask, take_B):
    """Rows of the new batch where take_B, else the old ones (one program)."""
    def pick(a, b):
        sel = take_B.reshape((-1,) + (1,) * (a.ndim - 1))
        return jnp.where(sel, b, a)
    batch = jax.tree.map(pick, batch, new_batch)
    toks = jnp.where(take_B[:, None], new_toks, toks)
    mask = jnp.where(take_B[:, None], new_mask, mask)
    return batch, toks, mask


def _all_wrong(batch) -> np.ndarray:
    return (np.asarray(batch.pool_pos_B) == 0) & (np.asarray(batch.pool_n_B) > 0)


def _mixed(batch) -> np.ndarray:
    pos, n = np.asarray(batch.pool_pos_B), np.asarray(batch.pool_n_B)
    return (pos > 0) & (pos < n)


COUNTS = ("samples_total", "generated_tokens", "samples_launched")  # summed over re-rolls


def sage(run_engine, problems, batch, toks, mask, key, budgets):
    """Escalate hint levels for collapsed prompts; returns (batch, toks, mask, metrics).

    run_engine(problems, key, budgets, hints) -> (Batch, toks, mask, metrics).
    A collapsed prompt counts as rescued when its hinted group is mixed (gives a gradient);
    one that turns all correct under a hint stops escalating but is not rescued."""
    collapsed = _all_wrong(batch)
    todo = collapsed.copy()
    level_used = np.zeros(len(problems), int)
    extra = dict.fromkeys(COUNTS, 0)
    for level in LEVELS:
        if not todo.any():
            break
        hints = [make_hint(p, level) if t else "" for p, t in zip(problems, todo)]
        b = np.where(todo, budgets, 0)
        hb, htoks, hmask, met = run_engine(problems, jax.random.fold_in(key, level), b, hints)
        for k in extra:
            extra[k] += met[k]
        batch, toks, mask = jax.block_until_ready(_merge(batch, toks, mask, hb, htoks, hmask,
                                                         todo))
        batch = readable_batch(batch)
        level_used[todo] = level
        todo = todo & _all_wrong(hb)
    n = max(int(collapsed.sum()), 1)
    return batch, toks, mask, dict(
        extra, hint_collapsed_share=float(collapsed.mean()),
        hint_rescued_share=float((collapsed & _mixed(batch)).sum() / n),
        hint_all_correct_share=float((collapsed & ~todo & ~_mixed(batch)).sum() / n),
        hint_level_mean=float(level_used[collapsed].mean()) if collapsed.any() else 0.0)


def light_levels(problems, state: dict) -> list[int]:
    """SAGE-light: this step's hint level per prompt (0 = none) from its stored level."""
    return [int(state.get(str(p.id), 0)) for p in problems]


def light_update(problems, batch, levels, state: dict) -> None:
    """Move each prompt's level after seeing its accuracy: up if all wrong, down if ≥ ½."""
    acc = np.asarray(batch.pool_pos_B) / np.maximum(np.asarray(batch.pool_n_B), 1)
    for p, a, lv in zip(problems, acc, levels):
        if a == 0:
            lv = min(lv + 1, LEVELS[-1])
        elif a >= 0.5:
            lv = max(lv - 1, 0)
        state[str(p.id)] = lv


def light_hints(problems, levels) -> list[str]:
    return [make_hint(p, lv) if lv else "" for p, lv in zip(problems, levels)]
