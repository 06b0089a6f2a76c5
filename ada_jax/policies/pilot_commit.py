"""Pilot-Commit (adaptive.policy='pilot_commit'; Kim et al., arXiv 2605.26606) as its authors
run it (databricks/pilot-commit, recipe/pc/pc_ray_trainer.py): a pilot of `pilot` samples on
each of pilot_batches·B prompts (the paper's 3·B) estimates each prompt's pass rate p̂; the
B prompts to train on are committed, those with p̂ in [p_low, p_high] (theirs: the
diversity band 0.25..0.75) first, nearest p̂ = 1/2 first, then the rest nearest 1/2, so
every step trains a full batch of B; each committed prompt gets `commit` fresh samples, and
its training group is its pilot samples and those (theirs: n_explore_effective + n_commit per
prompt, one GRPO group; `train_pilot` False trains the commit samples only). The pilot
samples of the prompts not committed are exploration: counted in the cost, not trained.
Settings: adaptive.pilot_commit.*. No state across steps. docs/theory.md, "The field's
allocation methods as their authors run them", says what differs (the authors' replay buffer
of passing prompts).

On several processes the whole pilot draw is gathered in batch order (the one-process order)
and every process ranks it alike from the replicated pilot counters; each samples its share
of the piloted and of the committed prompts (`rollout.own_share`).
"""
import jax
import numpy as np

from ada_jax.policies import pools, rollout
from ada_jax.policies.settings import Setting

LABEL = "Pilot-Commit"  # the display name (plots, tables)
PRESETS = {"pilot_commit": "algo=grpo|--config.adaptive.policy=pilot_commit"}
SETTINGS = {
    "pilot": Setting(4, "Pilot-Commit: pilot samples per piloted prompt",
                     "— (exploration.n)", "positive_int"),
    "commit": Setting(8, "Pilot-Commit: fresh samples per committed prompt (its training "
                      "group)", "— (rollout.n)", "positive_int"),
    "pilot_batches": Setting(3, "Pilot-Commit: prompt batches piloted per step (the paper's "
                             "3·B); B of them committed", "—", "positive_int"),
    "p_low": Setting(0.25, "Pilot-Commit: commit prompts with pilot pass rate >= this first",
                     "diversity_threshold_lower", "unit"),
    "train_pilot": Setting(True, "Pilot-Commit: a committed prompt's pilot samples join its "
                           "training group (theirs: n_explore_effective + n_commit)",
                           "— (exploration.n_effective)", "bool"),
    "p_high": Setting(0.75, "Pilot-Commit: commit prompts with pilot pass rate <= this first",
                      "1 - diversity_threshold_upper", "unit"),
}


def check(config) -> None:
    a = config.adaptive.pilot_commit
    if a.p_low > a.p_high:
        raise ValueError(f"config.adaptive.pilot_commit.p_low={a.p_low!r} exceeds "
                         f"config.adaptive.pilot_commit.p_high={a.p_high!r}: prompts whose "
                         f"pilot pass rate lies in [p_low, p_high] are committed first")


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): the pilot and commit samples (the commit samples alone
    without train_pilot)."""
    a = config.adaptive.pilot_commit
    G = a.commit + (a.pilot if a.train_pilot else 0)
    return G, G


def rank(pilot_pos, pilot_n, p_low: float, p_high: float) -> np.ndarray:
    """Indices of the piloted prompts, best first: inside the band [p_low, p_high] before
    outside, then nearest p̂ = 1/2, then batch order."""
    n = np.asarray(pilot_n)
    p = np.asarray(pilot_pos, np.float64) / np.maximum(n, 1)
    inside = (n > 0) & (p >= p_low) & (p <= p_high)
    return np.lexsort((np.arange(len(p)), np.abs(p - 0.5), ~inside))


def commit(pilot_pos, pilot_n, B: int, p_low: float, p_high: float) -> np.ndarray:
    """[B] the committed pilot rows, best first by `rank`, in row order."""
    return np.sort(rank(pilot_pos, pilot_n, p_low, p_high)[:B])


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    a = ctx.config.adaptive.pilot_commit
    blocks = [next(iterator) for _ in range(a.pilot_batches)]
    B = len(blocks[0]) * jax.process_count()
    piloted = [p for b in blocks for p in rollout.everyone(b)]  # the whole draw, batch order
    pilot = rollout.run_engine(ctx, params, rollout.own_share(piloted),
                               jax.random.fold_in(key, 0),
                               np.full(len(piloted) // jax.process_count(), a.pilot))
    pos, n = np.asarray(pilot.batch.pool_pos_B), np.asarray(pilot.batch.pool_n_B)
    chosen = commit(pos, n, B, a.p_low, a.p_high)
    committed = rollout.own_share([piloted[i] for i in chosen])
    got = rollout.run_engine(ctx, params, committed, jax.random.fold_in(key, 1),
                             np.full(len(committed), a.commit))
    batch = (pools.merge([pools.take_rows(pilot.batch, chosen), got.batch]) if a.train_pilot
             else got.batch)
    met = pools.step_metrics([got.metrics, pilot.metrics], batch)
    p = pos / np.maximum(n, 1)
    inside = (p >= a.p_low) & (p <= a.p_high)
    met.update(pc_piloted=len(n), pc_in_band=int(inside.sum()),
               pc_committed_in_band=int(inside[chosen].sum()),
               pc_pilot_samples=pilot.metrics["samples_total"])
    return rollout.Collected(got.problems, batch, got.prompt_BP, got.mask_BP, met)
