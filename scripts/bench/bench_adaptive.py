"""Adaptive engine cost per step: GRPO-n4 vs Ada-Seq-balance (rounds, refill), same prompts.

Tiny model (configs/base.py MODELS["tiny"]) with random weights. The EOS token's tied
embedding is set along the mean direction of the final hidden state, so EOS gets a logit bias
that varies with the context: response lengths spread geometric-ish up to max_new_tokens
(median ~18 of 64, ~14% truncated). The reward is the jittable synthetic one
(ada_jax/rewards/synthetic.py): correct iff the first token id is below the prompt's
threshold; thresholds sit on the arcsine (U-shaped) quantiles, so pass rates spread like real
ones, some prompts at 0 and 1. p_i is exact: the model's first-token mass below the threshold.

For each slots-per-prompt ratio S/B (same B prompts), one step of:
  grpo4_rounds  exit_rule none, budget 4, rounds M=4 R=1: one wave (the trainer's default)
  grpo4_refill  exit_rule none, budget 4, refill: continuous batching of the 4B samples
  ada_rounds    balance k_pos = k_neg = 2, rounds M=8, R=4 (the reference schedule, N_max 32)
  ada_refill    balance k_pos = k_neg = 2, refill, budget 32, engine defaults (launch order)
  ada_refill_completion   (full run) the same with pool_order="completion"
Reported: wall time (median over interleaved repetitions after a warm-up call; the first
call's extra time, mostly compilation, separately), samples in pools / launched (launched
includes samples cut or finished past the stopping point), tokens generated (wasted ones
included), wall time per generated token, slot utilisation = tokens / (S * decode steps),
and the sequential oracle: Σ_i E[N_i] for one-at-a-time balance stopping with budget 32 at the
true p_i (objectives.stopping_moments); tokens vs Σ_i E[N_i]·L̄_i (L̄_i: prompt i's mean
response length under GRPO-n4); slot-steps vs oracle = S * decode steps / oracle tokens (what a
step costs, idle slots included); kept length vs ada_rounds (a length bias of the kept groups).
"vs grpo4" ratios divide by the faster GRPO-n4 variant at the same S; "steps" ratios are the
same ratios from decode-step counts alone (noise-free; the two differ by per-refill overhead).
Then streaming (ada_jax/stream.py) over consecutive steps at S/B = 1, 2, 4, 8 beside per-step
refill, each S/B at the max lag the configs stream it at (configs/base.py default_stream_lag:
1 below S/B = 4, 2 from 4 up; --stream_lag sets one for all): slot utilisation, samples
launched vs the oracle and vs the pools (a launch-order pool is the one-at-a-time process's own
draw on the same outcomes: launched / pool is the waste without the noise of N), time per token
vs GRPO-n4 (wall, and in decode steps: the load-independent headline), the share of trained
samples one step off-policy. Then (full run) a frontier of refill over overcommit x S/B and of
streaming over max lag x overcommit at S/B = 4, 8, and the compiled memory of the jitted engine
at N_max = 32 and 256. Then the history / pilot / grid policies on the Bernoulli generator:
history-based allocation (`allocation_bench`: uniform, Ada-Est, Knapsack-RL, VIP and their oracles at matched
samples: samples per mixed group, and gradient variance vs its minimum; JSON key "allocation")
and GRESO, Pilot-Commit, conformal stopping against GRPO-n4, DAPO and their oracles
(scripts/bench/bench_history.py; JSON key "history_policies"). The last stdout line is one JSON
object; its stream_* keys are the worst case over the streaming ratios
(stream_samples_vs_oracle_max_sb4: over S/B <= 4).

  python scripts/bench/bench_adaptive.py           # B=32, S/B = 4 and 1, 5 reps, frontier (2-4 min)
  python scripts/bench/bench_adaptive.py --quick   # B=16, S/B = 4 and 1, 2 reps, one GRPO-n4 variant,
                                             # no frontier (15 s quiet, about a minute loaded)
  python scripts/bench/bench_adaptive.py --prompts 4 --ratios 1 --reps 1 --new_tokens 8 \
      --frontier 1 --overcommits 0.75 --memory_nmax 32   # the full path at a toy size (test)
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from ada_jax import adaptive as A  # noqa: E402
from ada_jax import allocation  # noqa: E402
from ada_jax import generators  # noqa: E402
from ada_jax import model as model_lib  # noqa: E402
from ada_jax import objectives  # noqa: E402
from ada_jax import sampling, selection  # noqa: E402
from ada_jax import stream  # noqa: E402
from ada_jax.rewards import synthetic  # noqa: E402
from configs.base import MODELS, default_stream_lag  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_history  # noqa: E402

GROUP, K_POS, K_NEG, M, R = 4, 2, 2, 8, 4


# History-based allocation on the Bernoulli generator: B prompts whose pass rates
# sit on the arcsine (Beta(1/2, 1/2)) quantiles, one earlier visit of 8 samples each folded
# into the Ada-Est history (decay 0.9, prior Beta(1, 16)), then each method's budgets at a mean
# of 8 per prompt, run through the engine (BernoulliGenerator, outcomes by (prompt, index)).
ALLOC_MEAN, ALLOC_MIN, ALLOC_MAX = 8, 2, 32


def allocation_methods(p_hat, s2_hat, p, total):
    """name -> budgets; the oracles (and knapsack_true_p: the rule without estimation error)
    see the true p; oracle_var is VIP's rule at the true p."""
    return {
        "uniform": np.full(len(p), ALLOC_MEAN),
        "est": objectives.est_allocation(p_hat, total, "inv_sqrt", n_min=1,
                                         n_max=4 * ALLOC_MEAN),
        # the solvers on the Ada-Est posterior (the policies' own rules, last-visit rates and
        # the Gaussian process: scripts/bench/bench_allocation.py)
        "knapsack_beta": allocation.knapsack_allocation(p_hat, total, ALLOC_MIN, ALLOC_MAX),
        "vip_beta": allocation.vip_allocation(s2_hat, total, ALLOC_MIN, ALLOC_MAX),
        "knapsack_true_p": allocation.knapsack_allocation(p, total, ALLOC_MIN, ALLOC_MAX),
        "oracle_mixed": allocation.knapsack_allocation(p, total, ALLOC_MIN, ALLOC_MAX,
                                                       info_gain=False),
        "oracle_var": allocation.vip_allocation(p * (1 - p), total, ALLOC_MIN, ALLOC_MAX),
    }


def allocation_bench(B: int, draws: int, seed: int = 0) -> list:
    """Per method: samples per mixed group (expected at the true p, and measured over `draws`
    engine draws) against the max-mixed-groups oracle (the knapsack DP at the true p, value
    P(mixed) only), and the gradient variance Σ p(1-p)/(N-1) (RLOO, true p) against its
    minimum (VIP's solver at the true p): var_vs_oracle is the samples a method needs per
    sample of the oracle for the same variance (V ∝ 1/N)."""
    p = np.sin(np.pi / 2 * (np.arange(B) + 0.5) / B) ** 2
    cfg = A.EngineConfig(slots=64, max_new_tokens=1, keep=ALLOC_MAX, exit_rule="none",
                         samples_per_round=ALLOC_MAX, max_rounds=1)
    gen = generators.BernoulliGenerator()
    toks, mask = jnp.zeros((B, 1), jnp.int32), jnp.ones((B, 1), bool)

    def draw(budgets, k):
        st = A.run(None, toks, mask, jnp.asarray(budgets, jnp.int32),
                   dict(key=jax.random.key(k), p=jnp.asarray(p, jnp.float32)),
                   jax.random.key(k + 1), cfg=cfg, gen_fn=gen,
                   reward_fn=generators.bernoulli_reward, group=ALLOC_MAX)
        return np.asarray(st.n_samples), np.asarray(st.n_pos)

    n0, k0 = draw(np.full(B, ALLOC_MEAN), 10_000 + seed)  # the earlier visit
    n_tot, n_pos, _ = objectives.est_update(0.0, 0.0, n0.astype(float), k0.astype(float))
    p_hat, s2_hat = allocation.beta_moments(n_tot, n_pos, 1.0, 16.0)
    total = ALLOC_MEAN * B
    methods = allocation_methods(p_hat, s2_hat, p, total)
    rows = []
    for name, n in methods.items():
        mixed = []
        for d in range(draws):
            got_n, got_k = draw(n, 20_000 + 100 * seed + d)
            assert np.array_equal(got_n, n)
            mixed.append(int(((got_k > 0) & (got_k < got_n)).sum()))
        exp_mixed = float(allocation.knapsack_value(n, p, info_gain=False).sum())
        var = float(allocation.vip_variance(np.maximum(n, 2), p * (1 - p)).sum())
        rows.append(dict(method=name, samples=int(n.sum()), n_min=int(n.min()),
                         n_max=int(n.max()), mixed_expected=exp_mixed,
                         mixed_measured=float(np.mean(mixed)),
                         samples_per_mixed=total / exp_mixed,
                         samples_per_mixed_measured=total / max(np.mean(mixed), 1e-9), var=var))
    best = {r["method"]: r for r in rows}
    for r in rows:
        r["samples_per_mixed_vs_oracle"] = (r["samples_per_mixed"]
                                            / best["oracle_mixed"]["samples_per_mixed"])
        r["var_vs_oracle"] = r["var"] / best["oracle_var"]["var"]
    return rows


def reward_fn(data, prompt_S, seq_S, tokens_SN, lengths_S):
    return synthetic.first_token_reward(tokens_SN, lengths_S,
                                        data["threshold"][jnp.maximum(prompt_S, 0)])


def build(a):
    """Model with an EOS bias, B prompts, U-shaped thresholds and the exact pass rates."""
    cfg = model_lib.ModelConfig.from_config(MODELS["tiny"])
    model = model_lib.Transformer(cfg, nnx.Rngs(a.seed))
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(a.seed)
    V = cfg.vocab_size
    toks = jnp.asarray(rng.integers(1, V, (32, 64)), jnp.int32)

    @jax.jit
    def logits_fn(params, toks):
        m = jnp.ones(toks.shape, bool)
        return nnx.merge(graphdef, params)(toks, model_lib.positions_from_mask(m), m)[0]

    # Mean final hidden state over random contexts, recovered from the logits through the tied
    # embedding (logits = h E^T); EOS's embedding along it gives EOS a context-dependent bias.
    E = np.array(model.embed[...])
    h = np.asarray(logits_fn(params, toks)).reshape(-1, V) @ np.linalg.pinv(E.T)
    mu = h.mean(0)
    eos = V - 1
    E[eos] = a.eos_bias * mu / np.linalg.norm(mu)
    model.embed[...] = jnp.asarray(E)
    graphdef, params = nnx.split(model)

    B, P = a.prompts, a.prompt_len
    lens = rng.integers(P // 2, P + 1, B)
    prompts, mask = sampling.left_pad([rng.integers(1, V - 1, n).tolist() for n in lens], P)
    prompts, mask = jnp.asarray(prompts), jnp.asarray(mask)
    # Problem ids whose hash lands on the arcsine quantiles (i + 1/2) / B.
    ids = np.round((np.arange(B) + 0.5) / B * 100_003).astype(np.int64)
    thr = synthetic.thresholds(ids, V)
    scfg = sampling.SamplingConfig(max_new_tokens=a.new_tokens, eos_id=eos, pad_id=0)
    gen = generators.ModelGenerator(graphdef, cfg, scfg)
    first = jax.nn.softmax(jax.jit(gen.prefill)(params, prompts, mask)["logits"], axis=-1)
    p = np.asarray(jnp.sum(jnp.where(jnp.arange(V)[None] < jnp.asarray(thr)[:, None],
                                     first, 0.0), axis=1), np.float64)
    return dict(params=params, prompts=prompts, mask=mask, gen=gen, p=p,
                data=dict(threshold=jnp.asarray(thr)))


def method_cfgs(a, slots, full=False, **refill_kw):
    """The step's variants at S slots. Quick runs keep one GRPO-n4: one wave where the 4B
    samples fit the slots (S/B >= 4), else continuous batching."""
    base = dict(slots=slots, max_new_tokens=a.new_tokens, keep=GROUP)
    ada = dict(base, exit_rule="balance", k_pos=K_POS, k_neg=K_NEG)
    out = {
        "grpo4_rounds": (A.EngineConfig(**base, exit_rule="none", mode="rounds",
                                        samples_per_round=4, max_rounds=1), 4),
        "grpo4_refill": (A.EngineConfig(**base, exit_rule="none", mode="refill"), 4),
        "ada_rounds": (A.EngineConfig(**ada, mode="rounds", samples_per_round=M, max_rounds=R),
                       M * R),
        "ada_refill": (A.EngineConfig(**ada, mode="refill", **refill_kw), M * R),
    }
    if not full:
        del out["grpo4_refill" if slots >= 4 * a.prompts else "grpo4_rounds"]
    if full:
        out["ada_refill_completion"] = (A.EngineConfig(**ada, mode="refill",
                                                       pool_order="completion", **refill_kw),
                                        M * R)
    return out


def run_once(env, cfg, budget, key):
    B = env["prompts"].shape[0]
    t = time.perf_counter()
    st = A.run(env["params"], env["prompts"], env["mask"], jnp.full((B,), budget, jnp.int32),
               env["data"], key, cfg=cfg, gen_fn=env["gen"], reward_fn=reward_fn, group=GROUP)
    jax.block_until_ready(st)
    wall = time.perf_counter() - t
    batch = selection.select(st, GROUP)
    met = selection.metrics(cfg, st, batch, GROUP)
    met["launched"] = int(np.asarray(st.launched).sum())
    met["wall_s"] = wall
    m = np.asarray(batch.mask_BG)
    met["kept_len_B"] = np.asarray(batch.len_BG).sum(1) / np.maximum(m.sum(1), 1)
    return met


def measure(env, cfgs, reps, seed):
    """Warm up each method, then interleave reps (the same keys for every method)."""
    out = {k: dict(first_s=None, runs=[]) for k in cfgs}
    for name, (cfg, budget) in cfgs.items():
        out[name]["first_s"] = run_once(env, cfg, budget, jax.random.key(seed))["wall_s"]
    for r in range(reps):
        key = jax.random.key(seed + 1 + r)
        for name, (cfg, budget) in cfgs.items():
            out[name]["runs"].append(run_once(env, cfg, budget, key))
    return out


def summarise(name, res, cfg, oracle):
    runs = res["runs"]
    wall = statistics.median(r["wall_s"] for r in runs)
    mean = lambda k: float(np.mean([r[k] for r in runs]))  # noqa: E731
    tokens, samples, launched = mean("generated_tokens"), mean("samples_total"), mean("launched")
    steps = mean("decode_steps")
    return dict(
        method=name, slots=cfg.slots, step_s=wall, compile_s=res["first_s"] - wall,
        samples=samples, launched=launched, tokens=tokens, wasted_tokens=mean("cut_tokens"),
        decode_steps=steps, refills=mean("chunks"),
        us_per_token=1e6 * wall / tokens, us_per_decode_step=1e6 * wall / max(steps, 1),
        steps_per_token=steps / tokens,
        slot_utilisation=tokens / (cfg.slots * max(steps, 1)),
        samples_vs_oracle=launched / oracle["n"], pool_vs_oracle=samples / oracle["n"],
        launched_vs_pool=launched / samples,
        tokens_vs_oracle=tokens / oracle["tokens"],
        slot_steps_vs_oracle=cfg.slots * steps / oracle["tokens"],
        kept_len=float(np.mean([r["kept_len_B"] for r in runs])))


def per_token_vs(r, g) -> dict:
    """Wall time and decode steps per generated token of row r against baseline row g."""
    return dict(time_per_token_vs_grpo4=r["us_per_token"] / g["us_per_token"],
                steps_per_token_vs_grpo4=r["steps_per_token"] / g["steps_per_token"])


def compare(rows):
    """Ratios against the faster GRPO-n4 variant and the ada_rounds kept length."""
    by = {r["method"]: r for r in rows}
    g = min((by[k] for k in ("grpo4_rounds", "grpo4_refill") if k in by),
            key=lambda r: r["us_per_token"])
    for r in rows:
        r["baseline"] = g["method"]
        r.update(per_token_vs(r, g))
        r["step_time_vs_grpo4"] = r["step_s"] / g["step_s"]
        r["samples_vs_grpo4"] = r["launched"] / g["launched"]
        r["kept_len_vs_rounds"] = r["kept_len"] / by["ada_rounds"]["kept_len"]
    return by


def stream_lag(a, slots) -> int:
    """The max lag a stream runs at S slots: --stream_lag, else the configs' default at this S/B
    (configs/base.py `default_stream_lag`)."""
    return a.stream_lag or default_stream_lag(slots / a.prompts)


def stream_steps(env, a, slots, oracle_B, steps: int, warmup: int = 2, lag=None,
                 overcommit: float = A.EngineConfig.overcommit):
    """Ada-Seq-balance streaming (ada_jax/stream.py, B + lag x B resident prompts; lag None =
    `stream_lag`), consecutive steps at S slots; the queue cycles through the B bench prompts
    (prompt serial % B). After `warmup` steps (compilation, filling the table), sums over
    `steps` timed ones: tokens, decode steps, wall, samples launched for the claimed prompts vs
    their oracle E[N] and vs their pools (launch order: a pool is exactly the one-at-a-time
    process's draw on the same outcomes, so launched / pool is the same ratio without the
    sampling noise of N), and the share of trained samples launched under an earlier policy
    version."""
    B, lag = a.prompts, stream_lag(a, slots) if lag is None else lag
    cfg = A.EngineConfig(slots=slots, max_new_tokens=a.new_tokens, keep=GROUP,
                         exit_rule="balance", k_pos=K_POS, k_neg=K_NEG, mode="refill",
                         min_pool=GROUP, overcommit=overcommit)
    s = stream.Stream(cfg, env["gen"], prompts=B, ahead=lag * B, prompt_len=a.prompt_len,
                      group=GROUP, max_lag=lag).init(env["params"])
    prompts, mask = np.asarray(env["prompts"]), np.asarray(env["mask"])
    thr = np.asarray(env["data"]["threshold"])
    serial = 0
    tot = dict(tokens=0, steps=0, wall=0.0, launched=0, pool=0, oracle=0.0, off=0.0)
    for step in range(warmup + steps):
        n = s.free()
        idx = np.arange(serial, serial + n) % B
        serial += n
        s.admit(list(idx), prompts[idx], mask[idx], np.full(n, M * R))
        rows = np.asarray([0 if i is None else i for i in s.items])
        t = time.perf_counter()
        s.run(env["params"], jax.random.key(a.seed + step), reward_fn=reward_fn,
              reward_data=dict(threshold=jnp.asarray(thr[rows])))
        got = s.claim()
        jax.block_until_ready(got.batch)
        wall = time.perf_counter() - t
        if step < warmup:
            continue
        m = got.metrics
        tot["tokens"] += m["generated_tokens"]
        tot["steps"] += m["decode_steps"]
        tot["wall"] += wall
        tot["launched"] += m["samples_launched"]
        tot["pool"] += m["samples_total"]
        tot["oracle"] += float(oracle_B[np.asarray(got.items)].sum())
        tot["off"] += m["off_policy_share"] / steps
    return dict(method="ada_stream", slots=slots, lag=lag, overcommit=overcommit,
                step_s=tot["wall"] / steps, tokens=tot["tokens"] / steps,
                us_per_token=1e6 * tot["wall"] / tot["tokens"],
                steps_per_token=tot["steps"] / tot["tokens"],
                slot_utilisation=tot["tokens"] / (slots * max(tot["steps"], 1)),
                samples_vs_oracle=tot["launched"] / tot["oracle"],
                launched_vs_pool=tot["launched"] / tot["pool"], off_policy_share=tot["off"])


def memory(env, a, slots, quick):
    """Compiled sizes of the whole jitted engine step at each N_max (default 32 and 256)."""
    B = env["prompts"].shape[0]
    rows = []
    nmaxes = [int(x) for x in a.memory_nmax.split(",")]
    cases = [(mode, n) for mode in (("refill",) if quick else ("refill", "rounds"))
             for n in nmaxes]
    for mode, nmax in cases:
        cfg = A.EngineConfig(slots=slots, max_new_tokens=a.new_tokens, keep=GROUP,
                             exit_rule="balance", k_pos=K_POS, k_neg=K_NEG, mode=mode,
                             samples_per_round=M, max_rounds=nmax // M if mode == "rounds" else R)
        t = time.perf_counter()
        comp = A.run.lower(env["params"], env["prompts"], env["mask"],
                           jnp.full((B,), nmax, jnp.int32), env["data"], jax.random.key(0),
                           cfg=cfg, gen_fn=env["gen"], reward_fn=reward_fn,
                           group=GROUP).compile()
        ma = comp.memory_analysis()
        rows.append(dict(mode=mode, n_max=nmax, compile_s=time.perf_counter() - t,
                         temp_mb=ma.temp_size_in_bytes / 2**20,
                         args_mb=ma.argument_size_in_bytes / 2**20,
                         out_mb=ma.output_size_in_bytes / 2**20))
    return rows


def fmt_table(rows, cols):
    lines = ["| " + " | ".join(c for c, _ in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(f(r) for _, f in cols) + " |")
    return "\n".join(lines)


MAIN_COLS = [
    ("method", lambda r: r["method"]), ("S", lambda r: str(r["slots"])),
    ("step s", lambda r: f"{r['step_s']:.3f}"),
    ("× grpo4", lambda r: f"{r['step_time_vs_grpo4']:.2f}"),
    ("1st call +s", lambda r: f"{r['compile_s']:.1f}"),
    ("samples pool/launched", lambda r: f"{r['samples']:.0f}/{r['launched']:.0f}"),
    ("× grpo4", lambda r: f"{r['samples_vs_grpo4']:.2f}"),
    ("tokens (wasted)", lambda r: f"{r['tokens']:.0f} ({r['wasted_tokens']:.0f})"),
    ("µs/token", lambda r: f"{r['us_per_token']:.0f}"),
    ("× grpo4 (steps)", lambda r: f"{r['time_per_token_vs_grpo4']:.2f} "
                                  f"({r['steps_per_token_vs_grpo4']:.2f})"),
    ("slot util", lambda r: f"{r['slot_utilisation']:.3f}"),
    ("launched / oracle", lambda r: f"{r['samples_vs_oracle']:.3f}"),
    ("pool / oracle", lambda r: f"{r['pool_vs_oracle']:.3f}"),
    ("tokens / oracle", lambda r: f"{r['tokens_vs_oracle']:.3f}"),
    ("slot-steps / oracle", lambda r: f"{r['slot_steps_vs_oracle']:.2f}"),
    ("kept len / rounds", lambda r: f"{r['kept_len_vs_rounds']:.2f}"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--prompts", type=int, default=None, help="B (default 32, quick 16)")
    ap.add_argument("--ratios", default=None,
                    help="slots per prompt S/B for the main tables (default 4,1)")
    ap.add_argument("--prompt_len", type=int, default=16)
    ap.add_argument("--new_tokens", type=int, default=64, help="N, max response length")
    ap.add_argument("--reps", type=int, default=None, help="timed reps (default 5, quick 2)")
    ap.add_argument("--eos_bias", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frontier", default=None,
                    help="S/B ratios for the overcommit frontier (default 4,2,1; quick: none)")
    ap.add_argument("--overcommits", default="0,0.25,0.5,0.75,1",
                    help="overcommit values of the frontier")
    ap.add_argument("--memory_nmax", default="32,256", help="N_max values of the memory table")
    ap.add_argument("--stream_ratios", default="1,2,4,8",
                    help="S/B ratios of the streaming table ('' = none)")
    ap.add_argument("--stream_lag", type=int, default=0,
                    help="streaming: max updates a trained sample may lag (ahead = lag x B; "
                         "0 = the configs' default at each S/B, configs/base.py "
                         "default_stream_lag)")
    ap.add_argument("--stream_steps", type=int, default=None,
                    help="timed streaming steps per ratio (default 8, quick 4)")
    ap.add_argument("--stream_frontier", default=None,
                    help="S/B ratios of the streaming lag x overcommit frontier (default 4,8; "
                         "quick: none)")
    ap.add_argument("--stream_lags", default="1,2,3", help="max lags of the streaming frontier")
    ap.add_argument("--stream_overcommits", default="0.5,0.75",
                    help="overcommit values of the streaming frontier")
    ap.add_argument("--alloc_prompts", type=int, default=None,
                    help="B of the allocation rows (default 256, quick 64)")
    ap.add_argument("--alloc_draws", type=int, default=None,
                    help="engine draws per allocation row (default 16, quick 4)")
    a = ap.parse_args()
    a.prompts = a.prompts or (16 if a.quick else 32)
    a.reps = a.reps or (2 if a.quick else 5)
    ratios = [int(x) for x in (a.ratios or "4,1").split(",")]
    overcommits = [float(x) for x in a.overcommits.split(",")]
    frontier_ratios = [int(x) for x in (a.frontier if a.frontier is not None
                                        else ("" if a.quick else "4,2,1")).split(",") if x]
    stream_frontier_ratios = [int(x) for x in (
        a.stream_frontier if a.stream_frontier is not None
        else ("" if a.quick else "4,8")).split(",") if x]
    stream_lags = [int(x) for x in a.stream_lags.split(",") if x]
    # A fresh persistent compilation cache: first calls still compile, but the memory analysis
    # below finds the refill executable already built.
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="bench_adaptive_"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    t_start = time.perf_counter()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} cpus, "
          f"load avg {os.getloadavg()[0]:.1f}; B={a.prompts} S/B={ratios} N={a.new_tokens} "
          f"reps={a.reps}", flush=True)

    env = build(a)
    p = env["p"]
    oracle_B = np.array([objectives.stopping_moments(pi, K_POS, K_NEG, 1, M * R)[0] for pi in p])
    rounds_B = np.array([objectives.stopping_moments(pi, K_POS, K_NEG, M, R)[0] for pi in p])
    print(f"pass rates: 10/50/90% = {np.percentile(p, [10, 50, 90]).round(3)}, "
          f"p<0.05: {np.mean(p < 0.05):.2f}, p>0.95: {np.mean(p > 0.95):.2f}; per prompt E[N]: "
          f"sequential oracle {oracle_B.mean():.2f}, rounds {rounds_B.mean():.2f}", flush=True)

    tables, oracle = {}, None
    for spp in ratios:
        S = a.prompts * spp
        cfgs = method_cfgs(a, S, full=not a.quick)
        res = measure(env, cfgs, a.reps, a.seed)
        if oracle is None:  # oracle tokens: E[N_i] x prompt i's mean length under GRPO-n4
            g = res.get("grpo4_rounds", res.get("grpo4_refill"))
            L_B = np.mean([r["kept_len_B"] for r in g["runs"]], axis=0)
            oracle = dict(n=float(oracle_B.sum()), tokens=float((oracle_B * L_B).sum()))
        rows = [summarise(k, res[k], cfgs[k][0], oracle) for k in cfgs]
        by = compare(rows)
        tables[spp] = by
        print(f"\nS/B = {spp} (B={a.prompts}, S={S}); oracle Σ E[N] = {oracle['n']:.1f} "
              f"samples, {oracle['tokens']:.0f} tokens; ada_rounds pool / predicted "
              f"{by['ada_rounds']['samples'] / rounds_B.sum():.3f}; baseline "
              f"{rows[0]['baseline']}")
        print(fmt_table(rows, MAIN_COLS), flush=True)

    frontier = []
    for spp in frontier_ratios:
        S = a.prompts * spp
        cfgs = {f"oc={oc}": (A.EngineConfig(slots=S, max_new_tokens=a.new_tokens, keep=GROUP,
                                            exit_rule="balance", k_pos=K_POS, k_neg=K_NEG,
                                            mode="refill", overcommit=oc), M * R)
                for oc in overcommits}
        both = method_cfgs(a, S, full=True)  # both GRPO-n4 variants, whatever the ratio
        cfgs["grpo4_rounds"], cfgs["grpo4_refill"] = both["grpo4_rounds"], both["grpo4_refill"]
        res = measure(env, cfgs, max(a.reps - 2, 2), a.seed)
        rows = [summarise(k, res[k], cfgs[k][0], oracle) for k in cfgs]
        g = min(rows[-2:], key=lambda r: r["us_per_token"])
        for r, oc in zip(rows[:-2], overcommits):
            r.update(slots_per_prompt=spp, overcommit=oc, **per_token_vs(r, g))
            frontier.append(r)
            print(f"  frontier S/B={spp} overcommit={oc}: util {r['slot_utilisation']:.3f}, "
                  f"launched/oracle {r['samples_vs_oracle']:.3f}, tokens/oracle "
                  f"{r['tokens_vs_oracle']:.3f}, slot-steps/oracle "
                  f"{r['slot_steps_vs_oracle']:.2f}, step {r['step_s']:.3f}s, time/token vs "
                  f"{g['method']} {r['time_per_token_vs_grpo4']:.2f} "
                  f"(steps {r['steps_per_token_vs_grpo4']:.2f})", flush=True)
    if frontier:
        print("\nRefill frontier (launch order):")
        print(fmt_table(frontier, [
            ("S/B", lambda r: str(r["slots_per_prompt"])),
            ("overcommit", lambda r: f"{r['overcommit']:.2f}"),
            ("slot util", lambda r: f"{r['slot_utilisation']:.3f}"),
            ("launched / oracle", lambda r: f"{r['samples_vs_oracle']:.3f}"),
            ("tokens / oracle", lambda r: f"{r['tokens_vs_oracle']:.3f}"),
            ("slot-steps / oracle", lambda r: f"{r['slot_steps_vs_oracle']:.2f}"),
            ("step s", lambda r: f"{r['step_s']:.3f}"),
            ("time/token × grpo4 (steps)", lambda r: f"{r['time_per_token_vs_grpo4']:.2f} "
                                                     f"({r['steps_per_token_vs_grpo4']:.2f})"),
        ]))

    stream_rows = []
    for spp in [int(x) for x in a.stream_ratios.split(",") if x]:
        S = a.prompts * spp
        cfgs = {k: v for k, v in method_cfgs(a, S, full=not a.quick).items()
                if k in ("grpo4_rounds", "grpo4_refill", "ada_refill")}
        res = measure(env, cfgs, max(a.reps, 3), a.seed)  # the time-per-token baseline
        rows = {k: summarise(k, res[k], cfgs[k][0], oracle) for k in cfgs}
        g = min((rows[k] for k in ("grpo4_rounds", "grpo4_refill") if k in rows),
                key=lambda r: r["us_per_token"])
        st = stream_steps(env, a, S, oracle_B, a.stream_steps or (4 if a.quick else 8))
        for r in (st, rows["ada_refill"]):
            r.update(slots_per_prompt=spp, baseline=g["method"], **per_token_vs(r, g))
            stream_rows.append(r)
        print(f"  stream S/B={spp} lag {st['lag']}: util {st['slot_utilisation']:.3f} (refill "
              f"{rows['ada_refill']['slot_utilisation']:.3f}), launched/oracle "
              f"{st['samples_vs_oracle']:.3f} (refill "
              f"{rows['ada_refill']['samples_vs_oracle']:.3f}),"
              f" time/token vs {g['method']} {st['time_per_token_vs_grpo4']:.2f}, decode steps "
              f"{st['steps_per_token_vs_grpo4']:.2f} (refill "
              f"{rows['ada_refill']['time_per_token_vs_grpo4']:.2f}, "
              f"{rows['ada_refill']['steps_per_token_vs_grpo4']:.2f}), off-policy share "
              f"{st['off_policy_share']:.2f}", flush=True)
    if stream_rows:
        print("\nStreaming vs per-step refill (Ada-Seq-balance, same prompts):")
        print(fmt_table(stream_rows, [
            ("S/B", lambda r: str(r["slots_per_prompt"])), ("method", lambda r: r["method"]),
            ("lag", lambda r: str(r.get("lag", "-"))), ("step s", lambda r: f"{r['step_s']:.3f}"),
            ("slot util", lambda r: f"{r['slot_utilisation']:.3f}"),
            ("launched / oracle", lambda r: f"{r['samples_vs_oracle']:.3f}"),
            ("launched / pool", lambda r: f"{r['launched_vs_pool']:.3f}"),
            ("time/token × grpo4 (steps)", lambda r: f"{r['time_per_token_vs_grpo4']:.2f} "
                                                     f"({r['steps_per_token_vs_grpo4']:.2f})"),
            ("off-policy share", lambda r: f"{r['off_policy_share']:.2f}"
             if "off_policy_share" in r else "0"),
        ]))
    streams = [r for r in stream_rows if r["method"] == "ada_stream"]
    stream_frontier = [
        stream_steps(env, a, a.prompts * spp, oracle_B, a.stream_steps or 8, lag=lag,
                     overcommit=oc)
        for spp in stream_frontier_ratios for lag in stream_lags
        for oc in [float(x) for x in a.stream_overcommits.split(",")]]
    if stream_frontier:
        print("\nStreaming frontier: max lag x overcommit (resident prompts = (lag + 1) x B):")
        print(fmt_table(stream_frontier, [
            ("S/B", lambda r: str(r["slots"] // a.prompts)), ("lag", lambda r: str(r["lag"])),
            ("overcommit", lambda r: f"{r['overcommit']:.2f}"),
            ("slot util", lambda r: f"{r['slot_utilisation']:.3f}"),
            ("launched / oracle", lambda r: f"{r['samples_vs_oracle']:.3f}"),
            ("launched / pool", lambda r: f"{r['launched_vs_pool']:.3f}"),
            ("off-policy share", lambda r: f"{r['off_policy_share']:.2f}")]), flush=True)

    mem = memory(env, a, a.prompts * ratios[0], a.quick)
    print(f"\nCompiled memory of the jitted engine, S={a.prompts * ratios[0]} (MiB):")
    print(fmt_table(mem, [("mode", lambda r: r["mode"]), ("N_max", lambda r: str(r["n_max"])),
                          ("temp", lambda r: f"{r['temp_mb']:.2f}"),
                          ("args", lambda r: f"{r['args_mb']:.2f}"),
                          ("out", lambda r: f"{r['out_mb']:.2f}"),
                          ("compile s", lambda r: f"{r['compile_s']:.1f}")]))
    # The history / pilot / grid policies on the Bernoulli generator (scripts/bench/bench_history.py):
    # a pool of 8B prompts in 4 epochs, B a step.
    hist, hist_extra = bench_history.run(P=8 * a.prompts, B=a.prompts, seed=a.seed)
    print(f"\nGRESO / Pilot-Commit / conformal on the Bernoulli generator (pool {8 * a.prompts}, "
          f"B={a.prompts}, {hist_extra['steps']} steps):")
    print(bench_history.table(hist))
    print(f"total {time.perf_counter() - t_start:.0f}s")

    alloc_B = a.alloc_prompts or (64 if a.quick else 256)
    alloc = allocation_bench(alloc_B, a.alloc_draws or (4 if a.quick else 16), a.seed)
    print(f"\nHistory-based allocation on the Bernoulli generator (B={alloc_B}, "
          f"p on arcsine quantiles, mean budget {ALLOC_MEAN}, budgets in [{ALLOC_MIN}, "
          f"{ALLOC_MAX}]; est: N >= 1; var = Σ p(1-p)/(N-1), N < 2 counted as 2)")
    print(fmt_table(alloc, [
        ("method", lambda r: r["method"]), ("N min-max", lambda r: f"{r['n_min']}-{r['n_max']}"),
        ("mixed E", lambda r: f"{r['mixed_expected']:.1f}"),
        ("mixed meas.", lambda r: f"{r['mixed_measured']:.1f}"),
        ("samples / mixed", lambda r: f"{r['samples_per_mixed']:.2f}"),
        ("vs oracle", lambda r: f"{r['samples_per_mixed_vs_oracle']:.3f}"),
        ("var vs oracle", lambda r: f"{r['var_vs_oracle']:.3f}")]))

    head = tables[min(ratios)]  # the recommended refill setting: fewest slots per prompt
    r4 = lambda x: round(float(x), 4)  # noqa: E731
    out = dict(
        prompts=a.prompts, new_tokens=a.new_tokens, reps=a.reps, headline_slots_per_prompt=min(
            ratios), baseline=head["ada_refill"]["baseline"],
        refill_vs_grpo4_time_per_token=r4(head["ada_refill"]["time_per_token_vs_grpo4"]),
        rounds_vs_grpo4_time_per_token=r4(head["ada_rounds"]["time_per_token_vs_grpo4"]),
        refill_vs_grpo4_step_time=r4(head["ada_refill"]["step_time_vs_grpo4"]),
        rounds_vs_grpo4_step_time=r4(head["ada_rounds"]["step_time_vs_grpo4"]),
        refill_vs_grpo4_steps_per_token=r4(head["ada_refill"]["steps_per_token_vs_grpo4"]),
        slot_utilisation=r4(head["ada_refill"]["slot_utilisation"]),
        samples_vs_oracle=r4(head["ada_refill"]["samples_vs_oracle"]),
        tokens_vs_oracle=r4(head["ada_refill"]["tokens_vs_oracle"]),
        by_slots_per_prompt={str(spp): {f"{m}_{k}": r4(v[k]) for m, v in by.items()
                                        for k in ("step_s", "time_per_token_vs_grpo4",
                                                  "step_time_vs_grpo4", "samples_vs_grpo4",
                                                  "slot_utilisation", "samples_vs_oracle",
                                                  "tokens_vs_oracle", "slot_steps_vs_oracle",
                                                  "kept_len_vs_rounds")}
                             for spp, by in tables.items()},
        memory_temp_mb={f"{m['mode']}_{m['n_max']}": round(m["temp_mb"], 3) for m in mem},
        frontier=[{k: r4(f[k]) for k in ("slots_per_prompt", "overcommit", "slot_utilisation",
                                         "samples_vs_oracle", "tokens_vs_oracle",
                                         "slot_steps_vs_oracle", "time_per_token_vs_grpo4")}
                  for f in frontier])
    out["history_policies"] = {r["method"]: {k: r4(v) for k, v in r.items() if k != "method"}
                                for r in hist}
    out["allocation"] = {r["method"]: {k: r4(r[k]) for k in (
        "samples_per_mixed", "samples_per_mixed_measured", "samples_per_mixed_vs_oracle",
        "var_vs_oracle")} for r in alloc}
    if streams:
        out.update(
            stream_slot_utilisation_min=r4(min(r["slot_utilisation"] for r in streams)),
            stream_samples_vs_oracle_max=r4(max(r["samples_vs_oracle"] for r in streams)),
            stream_samples_vs_oracle_max_sb4=r4(max(
                [r["samples_vs_oracle"] for r in streams if r["slots_per_prompt"] <= 4],
                default=0.0)),
            stream_vs_grpo4_decode_steps_per_token_max=r4(max(r["steps_per_token_vs_grpo4"]
                                                              for r in streams)),
            stream_vs_grpo4_time_per_token_max=r4(max(r["time_per_token_vs_grpo4"]
                                                      for r in streams)),
            stream_launched_vs_pool_max=r4(max(r["launched_vs_pool"] for r in streams)),
            stream_off_policy_share_max=r4(max(r["off_policy_share"] for r in streams)),
            stream_max_lag={str(r["slots_per_prompt"]): r["lag"] for r in streams},
            stream_by_slots_per_prompt={
                str(r["slots_per_prompt"]): dict(lag=r["lag"], **{k: r4(r[k]) for k in (
                    "slot_utilisation", "samples_vs_oracle", "launched_vs_pool",
                    "time_per_token_vs_grpo4", "steps_per_token_vs_grpo4", "off_policy_share",
                    "step_s")})
                for r in streams})
    if stream_frontier:
        out["stream_frontier"] = [
            dict(slots_per_prompt=r["slots"] // a.prompts, lag=r["lag"],
                 **{k: r4(r[k]) for k in ("overcommit", "slot_utilisation", "samples_vs_oracle",
                                          "launched_vs_pool", "off_policy_share")})
            for r in stream_frontier]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
