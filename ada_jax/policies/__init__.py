"""Collection policies: how a step's training groups are sampled with the adaptive engine.

One module per policy; `ada_jax.collect.POLICIES` maps a policy's name to its module and
`ada_jax.collect.collect` hands the step to it. The pieces every policy shares (one engine
call, rewards and host scoring, a batch's sharing across processes, the `Collected` result)
live in `rollout.py`.

| module | policy name (from the config) |
|---|---|
| `seq.py` | adaptive.policy 'seq' (Ada-Seq) and 'uniform': one engine call |
| `est.py` | 'est' (Ada-Est): budgets from each prompt's pass-rate history |
| `gvm.py` | 'gvm': a pilot call, then gradient-variance budgets |
| `dapo.py` | 'dapo': more prompt batches until B mixed groups |
| `knapsack.py` | 'knapsack' (Knapsack-RL): budgets by a knapsack DP over the est history's p̂ |
| `vip.py` | 'vip' (VIP): budgets minimising predicted gradient variance (est history's p̂) |
| `hints.py` | rl.hints 'sage' / 'sage_light' (over seq / uniform): collapsed groups re-rolled |
| `stream.py` | adaptive.mode 'stream' (over seq / uniform): one persistent engine across steps |
| `greso.py` | 'greso': DAPO with prompts skipped before rollout after zero-variance visits |
| `pilot_commit.py` | 'pilot_commit': a pilot call, the rest of the budget to informative prompts |
| `conformal.py` | 'conformal': a budget grid, stopped once the prediction set is one answer |
| `pools.py` | (helper) several engine calls' samples per prompt as one batch |

A policy module defines:

- `collect(ctx, params, iterator, key, state) -> rollout.Collected`: the step's groups. `ctx`
  is train.Context (fixed for the run), `params` the model's, `iterator` yields this
  process's block of each prompt batch (draw with `next(iterator)`, as many batches as the
  policy needs), `key` the step's RNG key, `state` the dict of cross-step state below (mutate
  it in place).
- Cross-step state, if it keeps any (each optional; a stateless policy defines none):
  `init_state(ctx, params) -> dict`, the state keys it owns and their values at step 0;
  `checkpoint(state) -> dict`, the JSON-able entries it adds to each checkpoint's metadata
  (its checkpoint keys); `restore(meta) -> dict`, its state keys back from that metadata.
  `collect.init_state` / `checkpoint` / `restore` gather every policy's entries, whichever
  policy runs (so a checkpoint holds est_history and hint_levels in every run, as it always
  has), so state keys and checkpoint keys must be unique across policies. Metadata is JSON;
  the one array state, the stream's engine, train.py saves with the params.

Config validation has no per-policy hook: a new policy adds its name to
`config_check._CHOICES["adaptive.policy"]` and any checks of its own fields (or of the other
fields it cannot run with) to `config_check.validate`, which runs before anything compiles.
So a new policy is one new module, one row in `collect.POLICIES`, and its name in
config_check (and its fields in configs/base.py and config_doc.py).

On several processes every policy must keep every process alike wherever it decides on the
host (the number of batches drawn, budgets, the state): decide from the whole batch
(`rollout.everyone`, replicated counters) and sample this process's rows (`rollout.own_share`).
"""
