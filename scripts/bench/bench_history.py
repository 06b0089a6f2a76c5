"""History, pilot and grid policies on the Bernoulli generator (scripts/bench/bench_adaptive.py's
history rows):
GRESO, Pilot-Commit and conformal stopping against GRPO-n4, DAPO and each one's oracle.

A pool of P prompts with pass rates p_i ~ Beta(0.5, 0.5) (U-shaped like real pass rates,
fixed: no learning), B prompts a step in epochs over the pool (PromptIterator's order: a
fresh permutation each epoch), outcomes from the Bernoulli generator's reward
(generators.bernoulli_reward: sample j of prompt i at step t is uniform(fold_in(fold_in(
fold_in(key, t), i), j)) < p_i). Each method runs its policy's own rule (the pure functions of
ada_jax/policies/greso.py, pilot_commit.py, conformal.py) on those outcomes. Reported per
step (mean over the steps): samples generated, mixed groups trained, samples per mixed
group, and samples per unit of gradient-variance reduction: a trained prompt with N_i samples
cuts its gradient estimate's variance p(1−p)/1 of one sample to p(1−p)/N_i (docs/spec.md §3), a
reduction of p_i(1−p_i)(1 − 1/N_i) at the true p_i; zero-variance prompts reduce nothing.
Oracles know each prompt's outcomes or p_i:
  greso_oracle      DAPO that skips, for free, every group that would be zero-variance
  pc_oracle         Pilot-Commit committing by the true p_i (same pilot cost)
  conformal_oracle  stops at the first grid level exactly the prompts whose top-of-grid
                    group would be zero-variance
Pilot-Commit pilots the step's batch and 2·B more pool prompts (3·B) and trains B committed
prompts' fresh samples; conformal calibrates on 64 held-out prompts before the first step and
every 50 steps (their samples counted in its cost).

  python scripts/bench/bench_history.py            # pool 256, B = 32, 4 epochs
  python scripts/bench/bench_history.py --quick    # pool 128, B = 16 (seconds); last line: JSON
"""
import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from ada_jax import generators
from ada_jax.policies import conformal, greso, pilot_commit

N = 4  # group size of GRPO / DAPO / GRESO


_REWARD = jax.jit(generators.bernoulli_reward)


def outcomes(key, p, width):
    """[P, width] outcomes of the Bernoulli generator's reward for every prompt of the pool."""
    P = len(p)
    prompt, seq = jnp.repeat(jnp.arange(P), width), jnp.tile(jnp.arange(width), P)
    r = _REWARD(dict(key=key, p=jnp.asarray(p, jnp.float32)), prompt, seq, None, None)
    return np.asarray(r).reshape(P, width)


def table(rows) -> str:
    head = ("method", "samples/step", "mixed groups/step", "samples/mixed group",
            "samples/var. reduction")
    keys = ("samples_per_step", "mixed_groups_per_step", "samples_per_mixed_group",
            "samples_per_var_reduction")
    lines = [" | ".join(head)] + [" | ".join([r["method"]] + [f"{r[k]:.2f}" for k in keys])
                                  for r in rows]
    return "\n".join(lines)


class Row:
    def __init__(self, name):
        self.name, self.gen, self.mixed, self.var, self.steps = name, 0, 0, 0.0, 0

    def train(self, p, pos, n):
        """Trained groups: their true pass rates, positives and sizes."""
        p, pos, n = map(np.asarray, (p, pos, n))
        ok = n > 0
        self.mixed += int(((pos > 0) & (pos < n) & ok).sum())
        self.var += float((p * (1 - p) * (1 - 1 / np.maximum(n, 1)) * ok).sum())

    def result(self):
        s = max(self.steps, 1)
        return dict(method=self.name, samples_per_step=self.gen / s,
                    mixed_groups_per_step=self.mixed / s,
                    samples_per_mixed_group=self.gen / max(self.mixed, 1),
                    samples_per_var_reduction=self.gen / max(self.var, 1e-12))


def run(P=256, B=32, epochs=4, seed=0, dapo_cap=4, pc=(4, 8, 3, 0.25, 0.75),
        grid=(2, 4, 8, 16), alpha=0.1, auto_delta=True, calib_prompts=64, refit=50):
    rng = np.random.default_rng(seed)
    p = rng.beta(0.5, 0.5, P)
    steps = epochs * P // B
    order = np.concatenate([np.random.default_rng([seed, e]).permutation(P)
                            for e in range(epochs * 8)])
    rows = {k: Row(k) for k in ("grpo_n4", "dapo", "greso", "greso_oracle", "pilot_commit",
                                "pc_oracle", "conformal", "conformal_oracle")}
    g = {"hist": {}, "p": [0.5, 0.5], "queue": []}
    p_cal = rng.beta(0.5, 0.5, calib_prompts)  # conformal's held-out calibration prompts
    cs = {"q": [1.0] * len(grid), "delta": alpha, "since": refit}
    pos_dapo = pos_greso = pos_or = 0  # each method's place in the prompt order
    base = jax.random.key(seed)
    for t in range(steps):
        out = outcomes(jax.random.fold_in(base, t), p, 64)
        used = np.zeros(P, int)  # samples of each prompt drawn this step (per method below)

        def draw(i, k, used):
            got = out[i, used[i]:used[i] + k]
            used[i] += k
            return got
        batch = order[t * B:(t + 1) * B]
        # GRPO-n4: every prompt of the step's batch, 4 samples, all trained
        r = rows["grpo_n4"]
        u = used.copy()
        pos = np.array([draw(i, N, u).sum() for i in batch])
        r.gen += N * B
        r.train(p[batch], pos, np.full(B, N))
        # DAPO / GRESO / oracle: prompt batches drawn in order until B mixed groups (cap)
        for name in ("dapo", "greso", "greso_oracle"):
            r, u, kept, start = rows[name], used.copy(), [], {"dapo": pos_dapo, "greso": pos_greso,
                                                             "greso_oracle": pos_or}[name]
            zero = np.zeros(2)
            rolled = 0
            srng = np.random.default_rng([seed, t])
            for _ in range(dapo_cap):
                cand, draws = [], 0
                while len(cand) < B and draws < 8:
                    ids = order[start:start + B]
                    start += B
                    draws += 1
                    if name == "greso":
                        skip = greso.skip_draw(g, ids, srng)
                        cand += [i for i, s in zip(ids, skip) if not s]
                    else:
                        cand += list(ids)
                cand = cand[:B]
                for i in cand:
                    o = draw(i, N, u)
                    k = int(o.sum())
                    zv = k in (0, N)
                    if name == "greso_oracle" and zv:
                        continue  # skipped for free: the oracle knew
                    r.gen += N
                    rolled += 1
                    if name == "greso":
                        greso.visit(g["hist"], i, k, N)
                        zero += [k == N, k == 0]
                    if not zv:
                        kept.append(i)
                if len(kept) >= B:
                    break
            kept = kept[:B]
            r.train(p[kept], np.full(len(kept), 1), np.full(len(kept), N))  # all mixed
            if name == "greso":
                share = zero / max(rolled, 1)
                g["p"] = [greso.adapt(g["p"][0], share[0], 0.25 / 3, 0.01, 0.05),
                          greso.adapt(g["p"][1], share[1], 0.5 / 3, 0.01, 0.05)]
            if name == "dapo":
                pos_dapo = start
            elif name == "greso":
                pos_greso = start
            else:
                pos_or = start
        # Pilot-Commit and its oracle: pilot on the step's batch and 2·B more pool prompts,
        # commit B (the band first, nearest 1/2), train their fresh commit samples
        pilot, commit, n_batches, lo, hi = pc
        extra_ids = np.random.default_rng([seed, t, 2]).choice(P, (n_batches - 1) * B)
        piloted = np.concatenate([batch, extra_ids])
        for name in ("pilot_commit", "pc_oracle"):
            r, u = rows[name], used.copy()
            ppos = np.array([draw(i, pilot, u).sum() for i in piloted])
            if name == "pilot_commit":
                chosen = pilot_commit.commit(ppos, np.full(len(piloted), pilot), B, lo, hi)
            else:
                chosen = np.sort(pilot_commit.rank(p[piloted] * 1e6, np.full(len(piloted), 1e6),
                                                   lo, hi)[:B])
            ids = piloted[chosen]
            cpos = np.array([draw(i, commit, u).sum() for i in ids])
            r.gen += pilot * len(piloted) + commit * B
            r.train(p[ids], cpos, np.full(B, commit))
        # Conformal stopping along the grid, calibrated on held-out prompts before the first
        # step and every `refit` steps (their samples counted), and its oracle
        r, u = rows["conformal"], used.copy()
        crng = np.random.default_rng([seed, t, 1])
        if cs["since"] >= refit:
            y = crng.random((calib_prompts, grid[-1])) < p_cal[:, None]
            s_cal = np.stack([y[:, :k].sum(1) for k in grid])
            n_cal = np.asarray(grid)[:, None] * np.ones_like(s_cal)
            cs["q"], cs["delta"] = conformal.calibrate(n_cal, s_cal, alpha, auto_delta)
            cs["since"] = 0
            r.gen += calib_prompts * grid[-1]
        n, s, active = np.zeros(B, int), np.zeros(B, int), np.ones(B, bool)
        for j, k in enumerate(grid):
            inc = np.where(active, k - (grid[j - 1] if j else 0), 0)
            got = [draw(i, int(b), u) for i, b in zip(batch, inc)]
            n += inc
            s += np.array([x.sum() for x in got], int)
            if j == len(grid) - 1:
                break
            active &= ~conformal.stops(s, n, cs["q"][j])
        cs["since"] += 1
        r.gen += int(n.sum())
        r.train(p[batch], s, n)
        r = rows["conformal_oracle"]
        full = np.array([out[i, :grid[-1]].sum() for i in batch])
        zv = (full == 0) | (full == grid[-1])
        n_or = np.where(zv, grid[0], grid[-1])
        s_or = np.array([out[i, :m].sum() for i, m in zip(batch, n_or)])
        r.gen += int(n_or.sum())
        r.train(p[batch], s_or, n_or)
        for row in rows.values():
            row.steps += 1
    res = [row.result() for row in rows.values()]
    extra = dict(greso_p_final=g["p"], conformal_q=cs["q"], conformal_delta=cs["delta"],
                 steps=steps, pool=P, batch=B)
    return res, extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="pool 128, B = 16")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    P, B = (128, 16) if a.quick else (256, 32)
    res, extra = run(P=P, B=B, seed=a.seed)
    print(table(res))
    print(json.dumps(dict(extra, rows={r["method"]: {k: v for k, v in r.items()
                                                      if k != "method"} for r in res}),
                     default=float))


if __name__ == "__main__":
    main()
