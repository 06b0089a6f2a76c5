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
| `knapsack.py` | 'knapsack' (Knapsack-RL): the authors' rule on each prompt's last visit |
| `vip.py` | 'vip' (VIP): a Gaussian process over prompts (by question text), the authors' γ·log(p)·n program |
| `hints.py` | rl.hints 'sage' / 'sage_light' (over seq / uniform): collapsed groups re-rolled |
| `stream.py` | adaptive.mode 'stream' (over seq / uniform): one persistent engine across steps |
| `greso.py` | 'greso': DAPO with prompts skipped before rollout after zero-variance visits |
| `pilot_commit.py` | 'pilot_commit': a pilot on 3·B prompts, B committed, their pilot and commit samples trained |
| `conformal.py` | 'conformal': a budget grid, stopped by a test calibrated on held-out prompts |
| `pools.py` | (helper) several engine calls' samples per prompt as one batch |
| `settings.py` | (helper) `Setting`: how a module declares the config fields it owns |

A policy module defines (`tests/test_policy_registry.py` fails where one is missing):

- its docstring: the rule it runs, its source (paper, the authors' code) and what differs.
- `LABEL`: its display name (plots, tables; `collect.label`), or `label(config_dict)` where
  the name depends on its settings (seq: Ada-Seq-pos / Ada-Seq-balance).
- `collect(ctx, params, iterator, key, state) -> rollout.Collected`: the step's groups. `ctx`
  is train.Context (fixed for the run), `params` the model's, `iterator` yields this
  process's block of each prompt batch (draw with `next(iterator)`, as many batches as the
  policy needs), `key` the step's RNG key, `state` the dict of cross-step state below (mutate
  it in place).
- Its settings, if it has its own: `SETTINGS = {field: settings.Setting(default, meaning,
  the authors' name, kind)}`, in one place. They form the config group named after the
  module: `adaptive.<module name>.<field>` (knapsack.py: `adaptive.knapsack.n_min`,
  pilot_commit.py: `adaptive.pilot_commit.pilot`), a nested ConfigDict; configs/base.py takes
  the defaults, config_doc the meanings and config_check the kind's check (a positive integer,
  a number in [0, 1], one of some strings, …) from `collect.groups`. `check(config)` raises
  ValueError for what involves several fields (run by config_check.validate before anything
  compiles; it reads its group `config.adaptive.<module name>` and whatever else it depends
  on). A policy may read another's group (greso: `adaptive.dapo.max_gen_batches`). The
  engine's shared settings (policy, exit_rule, mode, slots, …) stay flat in `adaptive`. The
  flat names of older runs' config.json (`adaptive.knapsack_n_min`; Pilot-Commit's `pc_*`)
  are moved into the groups when such a file is read and refused, naming the new field, on
  the command line (config_check.FORMER).
- What it asks of the engine (`collect.engine_fields`; collect.engine_config builds the engine
  from it and names no policy): `group_size(config) -> (G, training rows per prompt)`, required
  of every `adaptive.policy` choice (G: kept samples per prompt); by default a prompt gets G
  samples in one round, all kept, so G is also its largest budget. `engine_fields(config) ->
  dict` changes adaptive.EngineConfig's fields where it runs otherwise (seq: M·R samples in
  rounds, stopped by the exit rule; stream: the refill engine); the largest budget is then
  samples_per_round x max_rounds (`collect.max_samples_per_prompt`, which caps the slots).
  `prompts_ahead(config)`: prompts it keeps in progress beyond the step's B (stream).
- `PRESETS = {arm name: "variant|flags"}`: the arms scripts/reproduce.sh runs it as
  (`python -m ada_jax.collect presets`).
- Cross-step state, if it keeps any (each optional; a stateless policy defines none):
  `init_state(ctx, params) -> dict`, the state keys it owns and their values at step 0;
  `checkpoint(state) -> dict`, the JSON-able entries it adds to each checkpoint's metadata
  (its checkpoint keys); `restore(meta) -> dict`, its state keys back from that metadata.
  `collect.init_state` / `checkpoint` / `restore` gather every policy's entries, whichever
  policy runs (so a checkpoint holds est_history, last_visit and hint_levels in every run),
  so state keys and checkpoint keys must be unique across policies. Metadata is JSON; array
  state (the stream's engine) goes beside the params: `arrays(state) -> dict` and
  `restore_arrays(state, arrays, meta)` (in place).

So a new policy is one new module and one row in `collect.POLICIES`: its name becomes an
`adaptive.policy` choice (config_check reads the registry), its settings (the group
`adaptive.<module name>`), label and presets come with it.

On several processes every policy must keep every process alike wherever it decides on the
host (the number of batches drawn, budgets, the state): decide from the whole batch
(`rollout.everyone`, replicated counters) and sample this process's rows (`rollout.own_share`).
"""
