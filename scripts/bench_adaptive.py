"""Adaptive engine cost per step: GRPO-n4 vs Ada-Seq-balance (rounds, refill), same prompts.

Tiny model (configs/base.py MODELS["tiny"]) with random weights. The EOS token's tied
embedding is set along the mean direction of the final hidden state, so EOS gets a logit bias
that varies with the context: response lengths spread geometric-ish from a few tokens to
max_new_tokens. The reward is the jittable synthetic one (ada_jax/rewards/synthetic.py):
correct iff the first token id is below the prompt's threshold; thresholds are the arcsine
(U-shaped) quantiles, so the pass rates p_i spread like real ones, with some prompts at 0 and 1.
p_i is computed exactly from the model's first-token distribution (prefill logits).

Per step, at the same B prompts and S slots:
  grpo4        exit_rule none, budget 4 (rounds M=4, R=1: one wave, as the trainer runs it)
  ada_rounds   balance k_pos = k_neg = 2, rounds M=8, R=4 (reference schedule, N_max 32)
  ada_refill   balance k_pos = k_neg = 2, refill, budget 32
Reported: wall time (median over interleaved repetitions after a warm-up; the first call's
extra time, mostly compilation, separately), samples completed / launched (launched counts
the in-flight samples cut when their prompt retired), tokens generated (cut ones included),
wall time per generated token, slot utilisation = tokens / (S · decode steps), and samples vs
the sequential oracle: Σ_i E[N_i] for one-at-a-time balance stopping with budget 32 at the
true p_i (objectives.stopping_moments), tokens vs the oracle's Σ_i E[N_i]·L̄_i (L̄_i: prompt
i's mean response length under GRPO-n4). A frontier over refill's overcommit and slots per
prompt follows, and compiled peak memory (`memory_analysis`) of the jitted engine at N_max =
32 and 256. The last stdout line is one JSON object.

  python scripts/bench_adaptive.py           # B=32 S=128 N=96, 7 reps + frontier (minutes)
  python scripts/bench_adaptive.py --quick   # B=16 S=64 N=64, 3 reps, small frontier (~1 min)
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from ada_jax import adaptive as A  # noqa: E402
from ada_jax import model as model_lib  # noqa: E402
from ada_jax import objectives  # noqa: E402
from ada_jax import sampling  # noqa: E402
from ada_jax.rewards import synthetic  # noqa: E402
from configs.base import MODELS  # noqa: E402

GROUP, K_POS, K_NEG, M, R = 4, 2, 2, 8, 4


def reward_fn(data, prompt_S, seq_S, tokens_SN, lengths_S):
    return synthetic.first_token_reward(tokens_SN, lengths_S,
                                        data["threshold"][jnp.maximum(prompt_S, 0)])


def build(a):
    """Model with an EOS bias, B prompts, U-shaped thresholds and the exact pass rates."""
    cfg = model_lib.ModelConfig.from_config(MODELS["tiny"])
    model = model_lib.Transformer(cfg, nnx.Rngs(a.seed))
    rng = np.random.default_rng(a.seed)
    V = cfg.vocab_size
    # Mean final hidden state over random contexts, recovered from the logits via the tied
    # embedding (logits = h E^T); EOS's embedding along it gives EOS a context-dependent bias.
    toks = jnp.asarray(rng.integers(1, V, (32, 64)), jnp.int32)
    m = jnp.ones(toks.shape, bool)
    logits, _ = model(toks, model_lib.positions_from_mask(m), m)
    E = np.array(model.embed[...])
    h = np.asarray(logits).reshape(-1, V) @ np.linalg.pinv(E.T)
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
    gen = A.ModelGenerator(graphdef, cfg, scfg)
    first = jax.nn.softmax(gen.prefill(params, prompts, mask)["logits"], axis=-1)
    p = np.asarray(jnp.sum(jnp.where(jnp.arange(V)[None] < jnp.asarray(thr)[:, None],
                                     first, 0.0), axis=1), np.float64)
    return dict(params=params, prompts=prompts, mask=mask, gen=gen, p=p,
                data=dict(threshold=jnp.asarray(thr)))


def method_cfgs(a, slots, overcommit=None, chunk_len=None):
    base = dict(slots=slots, max_new_tokens=a.new_tokens, keep=GROUP)
    refill = dict(base, exit_rule="balance", k_pos=K_POS, k_neg=K_NEG, mode="refill")
    if overcommit is not None:
        refill["overcommit"] = overcommit
    if chunk_len is not None:
        refill["chunk_len"] = chunk_len
    return {
        "grpo4": (A.EngineConfig(**base, exit_rule="none", mode="rounds", samples_per_round=4,
                                 max_rounds=1), 4),
        "ada_rounds": (A.EngineConfig(**base, exit_rule="balance", k_pos=K_POS, k_neg=K_NEG,
                                      mode="rounds", samples_per_round=M, max_rounds=R), M * R),
        "ada_refill": (A.EngineConfig(**refill), M * R),
    }


def run_once(env, cfg, budget, key):
    B = env["prompts"].shape[0]
    t = time.perf_counter()
    st = A.run(env["params"], env["prompts"], env["mask"], jnp.full((B,), budget, jnp.int32),
               env["data"], key, cfg=cfg, gen_fn=env["gen"], reward_fn=reward_fn, group=GROUP)
    jax.block_until_ready(st)
    wall = time.perf_counter() - t
    batch = A.select(st, GROUP)
    met = A.metrics(cfg, st, batch, GROUP)
    met["launched"] = int(np.asarray(st.launched).sum())
    met["wall_s"] = wall
    met["n_B"] = np.asarray(st.n_samples)
    met["kept_len_mean_B"] = np.asarray(batch.len_BG).sum(1) / np.maximum(
        np.asarray(batch.mask_BG).sum(1), 1)
    return met


def measure(env, cfgs, reps, seed):
    """Warm up each method, then interleave reps (same keys for every method)."""
    out = {k: dict(first_s=None, runs=[]) for k in cfgs}
    for name, (cfg, budget) in cfgs.items():
        out[name]["first_s"] = run_once(env, cfg, budget, jax.random.key(seed))["wall_s"]
    for r in range(reps):
        key = jax.random.key(seed + 1 + r)
        for name, (cfg, budget) in cfgs.items():
            out[name]["runs"].append(run_once(env, cfg, budget, key))
    return out


def summarise(name, res, cfg, oracle_n, oracle_tokens):
    runs = res["runs"]
    wall = statistics.median(r["wall_s"] for r in runs)
    mean = lambda k: float(np.mean([r[k] for r in runs]))  # noqa: E731
    tokens, samples, launched = mean("generated_tokens"), mean("samples_total"), mean("launched")
    steps = mean("decode_steps")
    return dict(
        method=name, step_s=wall, first_call_extra_s=res["first_s"] - wall,
        samples=samples, launched=launched, tokens=tokens, cut_tokens=mean("cut_tokens"),
        decode_steps=steps, chunks=mean("chunks"),
        us_per_token=1e6 * wall / tokens, us_per_decode_step=1e6 * wall / max(steps, 1),
        slot_utilisation=tokens / (cfg.slots * max(steps, 1)),
        samples_vs_oracle=launched / oracle_n, completed_vs_oracle=samples / oracle_n,
        tokens_vs_oracle=tokens / oracle_tokens)


def memory(env, a, slots):
    """Compiled sizes of the whole jitted engine step at N_max = 32 and 256."""
    B = env["prompts"].shape[0]
    rows = []
    for mode, nmax in [("rounds", 32), ("rounds", 256), ("refill", 32), ("refill", 256)]:
        cfg = A.EngineConfig(slots=slots, max_new_tokens=a.new_tokens, keep=GROUP,
                             exit_rule="balance", k_pos=K_POS, k_neg=K_NEG, mode=mode,
                             samples_per_round=M, max_rounds=nmax // M)
        comp = A.run.lower(env["params"], env["prompts"], env["mask"],
                           jnp.full((B,), nmax, jnp.int32), env["data"], jax.random.key(0),
                           cfg=cfg, gen_fn=env["gen"], reward_fn=reward_fn,
                           group=GROUP).compile()
        ma = comp.memory_analysis()
        rows.append(dict(mode=mode, n_max=nmax,
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--prompts", type=int, default=None, help="B (default 32, quick 16)")
    ap.add_argument("--slots_per_prompt", type=int, default=4, help="S / B for the main table")
    ap.add_argument("--prompt_len", type=int, default=16)
    ap.add_argument("--new_tokens", type=int, default=None, help="N (default 96, quick 64)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--eos_bias", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no_frontier", action="store_true")
    a = ap.parse_args()
    a.prompts = a.prompts or (16 if a.quick else 32)
    a.new_tokens = a.new_tokens or (64 if a.quick else 96)
    a.reps = a.reps or (3 if a.quick else 7)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} cpus; "
          f"B={a.prompts} S={a.prompts * a.slots_per_prompt} N={a.new_tokens} reps={a.reps}",
          flush=True)

    env = build(a)
    p = env["p"]
    oracle_B = np.array([objectives.stopping_moments(pi, K_POS, K_NEG, 1, M * R)[0] for pi in p])
    rounds_B = np.array([objectives.stopping_moments(pi, K_POS, K_NEG, M, R)[0] for pi in p])
    print(f"pass rates: quantiles 10/50/90% = {np.percentile(p, [10, 50, 90]).round(3)}, "
          f"share p<0.05: {np.mean(p < 0.05):.2f}, p>0.95: {np.mean(p > 0.95):.2f}; "
          f"oracle E[N] per prompt {oracle_B.mean():.2f}, rounds E[N] {rounds_B.mean():.2f}")

    S = a.prompts * a.slots_per_prompt
    cfgs = method_cfgs(a, S)
    res = measure(env, cfgs, a.reps, a.seed)
    # Oracle tokens: E[N_i] times prompt i's mean response length under GRPO-n4.
    L_B = np.mean([r["kept_len_mean_B"] for r in res["grpo4"]["runs"]], axis=0)
    oracle_n, oracle_tok = oracle_B.sum(), float((oracle_B * L_B).sum())
    rows = [summarise(k, res[k], cfgs[k][0], oracle_n, oracle_tok) for k in cfgs]
    lens = np.concatenate([r["kept_len_mean_B"] for r in res["grpo4"]["runs"]])
    print(f"GRPO-n4 response length: mean {rows[0]['tokens'] / rows[0]['samples']:.1f} "
          f"(per-prompt means 10/50/90% {np.percentile(lens, [10, 50, 90]).round(1)}) "
          f"of max {a.new_tokens}; measured rounds samples / predicted "
          f"{rows[1]['samples'] / rounds_B.sum():.3f}")
    g = rows[0]
    for r in rows:
        r["time_per_token_vs_grpo4"] = r["us_per_token"] / g["us_per_token"]
        r["step_time_vs_grpo4"] = r["step_s"] / g["step_s"]
        r["samples_vs_grpo4"] = r["launched"] / g["launched"]
    cols = [("method", lambda r: r["method"]), ("step s", lambda r: f"{r['step_s']:.3f}"),
            ("×grpo4 time", lambda r: f"{r['step_time_vs_grpo4']:.2f}"),
            ("compile s", lambda r: f"{r['first_call_extra_s']:.1f}"),
            ("samples done/launched", lambda r: f"{r['samples']:.0f}/{r['launched']:.0f}"),
            ("×grpo4 samples", lambda r: f"{r['samples_vs_grpo4']:.2f}"),
            ("tokens (cut)", lambda r: f"{r['tokens']:.0f} ({r['cut_tokens']:.0f})"),
            ("µs/token", lambda r: f"{r['us_per_token']:.1f}"),
            ("×grpo4 µs/token", lambda r: f"{r['time_per_token_vs_grpo4']:.2f}"),
            ("µs/decode step", lambda r: f"{r['us_per_decode_step']:.0f}"),
            ("slot util", lambda r: f"{r['slot_utilisation']:.3f}"),
            ("launched/oracle", lambda r: f"{r['samples_vs_oracle']:.3f}"),
            ("done/oracle", lambda r: f"{r['completed_vs_oracle']:.3f}"),
            ("tokens/oracle", lambda r: f"{r['tokens_vs_oracle']:.3f}")]
    print(f"\nMain table (B={a.prompts}, S={S}, oracle Σ E[N] = {oracle_n:.1f} samples, "
          f"{oracle_tok:.0f} tokens)")
    print(fmt_table(rows, cols), flush=True)

    frontier = []
    if not a.no_frontier:
        ratios = (4, 1) if a.quick else (4, 2, 1)
        overcommits = (0.0, 0.25, 1.0) if a.quick else (0.0, 0.25, 0.5, 1.0, 2.0)
        for spp in ratios:
            for oc in overcommits:
                c = A.EngineConfig(**{**method_cfgs(a, a.prompts * spp)["ada_refill"][0].__dict__,
                                      "overcommit": oc})
                rr = measure(env, {"refill": (c, M * R)}, max(a.reps // 2, 1), a.seed)
                s = summarise("refill", rr["refill"], c, oracle_n, oracle_tok)
                s.update(slots_per_prompt=spp, overcommit=oc)
                frontier.append(s)
                print(f"  S/B={spp} overcommit={oc}: util {s['slot_utilisation']:.3f} "
                      f"launched/oracle {s['samples_vs_oracle']:.3f} tokens/oracle "
                      f"{s['tokens_vs_oracle']:.3f} step {s['step_s']:.3f}s "
                      f"µs/token {s['us_per_token']:.1f}", flush=True)

    mem = memory(env, a, S)
    print("\nCompiled memory of the jitted engine (MiB):")
    print(fmt_table(mem, [("mode", lambda r: r["mode"]), ("N_max", lambda r: str(r["n_max"])),
                          ("temp", lambda r: f"{r['temp_mb']:.2f}"),
                          ("args", lambda r: f"{r['args_mb']:.2f}"),
                          ("out", lambda r: f"{r['out_mb']:.2f}")]))

    by = {r["method"]: r for r in rows}
    out = dict(
        prompts=a.prompts, slots=S, new_tokens=a.new_tokens, reps=a.reps,
        refill_vs_grpo4_time_per_token=by["ada_refill"]["time_per_token_vs_grpo4"],
        rounds_vs_grpo4_time_per_token=by["ada_rounds"]["time_per_token_vs_grpo4"],
        refill_vs_grpo4_step_time=by["ada_refill"]["step_time_vs_grpo4"],
        rounds_vs_grpo4_step_time=by["ada_rounds"]["step_time_vs_grpo4"],
        refill_vs_grpo4_samples=by["ada_refill"]["samples_vs_grpo4"],
        rounds_vs_grpo4_samples=by["ada_rounds"]["samples_vs_grpo4"],
        slot_utilisation=by["ada_refill"]["slot_utilisation"],
        grpo4_slot_utilisation=by["grpo4"]["slot_utilisation"],
        rounds_slot_utilisation=by["ada_rounds"]["slot_utilisation"],
        samples_vs_oracle=by["ada_refill"]["samples_vs_oracle"],
        completed_vs_oracle=by["ada_refill"]["completed_vs_oracle"],
        tokens_vs_oracle=by["ada_refill"]["tokens_vs_oracle"],
        rounds_samples_vs_oracle=by["ada_rounds"]["samples_vs_oracle"],
        memory_temp_mb={f"{m['mode']}_{m['n_max']}": round(m["temp_mb"], 3) for m in mem},
        frontier=[{k: round(f[k], 4) for k in ("slots_per_prompt", "overcommit",
                                               "slot_utilisation", "samples_vs_oracle",
                                               "tokens_vs_oracle", "step_s", "us_per_token")}
                  for f in frontier])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
