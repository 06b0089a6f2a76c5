"""Sampler throughput: ada_jax `sampling.sample` vs HF `transformers` `generate`, same function.

Both frameworks get the same architecture and the same random weights (built by ada_jax, copied
into a Llama/Qwen2ForCausalLM built from a matching config), the same prompts, and sample B×N
new tokens at T=1 with no top-k/top-p and no EOS (every row runs the full N tokens). The HF
worker first checks it computes our function: one HF forward over prompt + ada_jax's samples
must reproduce the log-probs our sampler returned (prefill and cached decode paths).

Each framework lives in its own subprocess, so its peak RSS (`ru_maxrss` of that process, read
at its end) is its own. The subprocesses are started, warmed up (JAX: the first call traces and
compiles, reported as `first_call_s`), and then timed one repetition at a time in alternating
order, so all of them see the same machine load. Reported per framework: median wall time and
median process CPU time (`time.process_time`, all threads) per `generate`/`sample` call. On a
shared machine the CPU-time ratio is the steadier one; wall time is what a user waits.

HF runs with `torch.set_num_threads(2)` (the headline) and 1, with OMP_WAIT_POLICY=PASSIVE:
with the default (spinning) policy and the two cores oversubscribed by other processes, a
2-thread torch `generate` was up to 100× slower than with 1 thread. XLA keeps its defaults.

FLOP fraction: useful FLOPs (see `_flops`) per median second over the f32 matmul peak, measured
in the same run with a jitted 2048³ matmul (best of the reps, at start and end; wall-clock and
per-CPU-second variants). The last stdout line is one JSON object.

  python scripts/bench/bench_sampler.py          # tiny + small, B=32 P=32 N=64, 7 reps, HF 2+1 threads
  python scripts/bench/bench_sampler.py --quick  # 2 reps, HF 2 threads only (about a minute when idle)
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OMP_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")


def _rss_mb():
    """(current RSS, peak RSS) of this process in MiB."""
    cur = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
    return cur, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _flops(m, B, P, N):
    """Useful FLOPs to sample N tokens after a P-token prompt, per batch of B rows.

    Tokens through the model: the P prompt tokens, then the first N-1 sampled ones (the N-th is
    never fed back). Matmuls: 2 FLOPs per weight per token (q, k, v, o, gate, up, down, lm head;
    not the embedding gather). Attention: 4·H·E per (query, key) pair, counting only keys the
    query really attends to (causal prompt, then the growing context), not the padded cache.
    """
    D, L, H, K, E, F, V = (m["d_model"], m["n_layers"], m["n_heads"], m["n_kv_heads"],
                           m["head_dim"], m["d_ff"], m["vocab_size"])
    per_tok_weights = L * (D * H * E + 2 * D * K * E + H * E * D + 3 * D * F) + D * V
    pairs = P * (P + 1) // 2 + sum(P + i + 1 for i in range(N - 1))
    mm = 2 * per_tok_weights * B * (P + N - 1)
    attn = 4 * H * E * L * B * pairs
    return mm + attn, mm, attn


# ----------------------------------------------------------------------------- JAX worker
def worker_jax(a):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from ada_jax import model as model_lib
    from ada_jax import sampling
    from configs.base import MODELS

    cfg = model_lib.ModelConfig.from_config(MODELS[a.model])
    B, P, N = a.batch, a.prompt_len, a.new_tokens
    assert P + N <= cfg.max_len, (P, N, cfg.max_len)
    model = model_lib.Transformer(cfg, nnx.Rngs(a.seed))
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(a.seed)
    prompts = rng.integers(4, cfg.vocab_size, size=(B, P), dtype=np.int32)
    mask = np.ones((B, P), bool)
    tok, msk = jnp.asarray(prompts), jnp.asarray(mask)

    scfg = sampling.SamplingConfig(max_new_tokens=N, eos_id=-1, temperature=1.0)

    def run(i):
        out = sampling.sample(graphdef, params, tok, msk, jax.random.key(100 + i), cfg=scfg)
        return jax.block_until_ready(out)

    rss_before, _ = _rss_mb()
    t0 = time.perf_counter()
    out = run(0)  # trace + compile + one run
    first = time.perf_counter() - t0
    assert int(out.steps) == N and bool(np.all(np.asarray(out.lengths_B) == N))
    # Export for the HF worker: HF-named weights, the prompts, and this run's samples with their
    # log-probs, which HF recomputes with one full forward (checks prefill and cached decode).
    np.savez(os.path.join(a.workdir, "export.npz"), prompts=prompts,
             tokens=np.asarray(out.tokens_BN), logp=np.asarray(out.logp_BN),
             **{"w/" + k: v for k, v in to_hf_state_dict(cfg, params).items()})
    run(1)
    return _serve(run, dict(framework="ada_jax", first_call_s=first,
                            params=model_lib.count_params(params),
                            rss_before_sampling_mb=rss_before, jax_version=jax.__version__,
                            xla_flags=os.environ.get("XLA_FLAGS", "")))


def _serve(run, info):
    """Timed reps on the driver's command ("run" / "done"), so frameworks interleave."""
    print("READY", flush=True)
    times, cpu = [], []
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0, c0 = time.perf_counter(), time.process_time()
        run(len(times) + 2)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        print(json.dumps(dict(time_s=times[-1], cpu_s=cpu[-1])), flush=True)
    _, peak = _rss_mb()
    return dict(info, times_s=times, cpu_s=cpu, peak_rss_mb=peak)


def to_hf_state_dict(cfg, params):
    """ada_jax params -> HF Llama/Qwen2 state dict (numpy float32, torch layouts)."""
    import numpy as np

    from ada_jax import hf_export
    return {k: v.astype(np.float32) for k, v in hf_export.hf_state_dict(params, cfg).items()}


# ----------------------------------------------------------------------------- HF worker
def hf_model(m, threads):
    import torch
    import transformers

    torch.set_num_threads(threads)
    common = dict(vocab_size=m["vocab_size"], hidden_size=m["d_model"],
                  num_hidden_layers=m["n_layers"], num_attention_heads=m["n_heads"],
                  num_key_value_heads=m["n_kv_heads"], intermediate_size=m["d_ff"],
                  head_dim=m["head_dim"], rms_norm_eps=m["norm_eps"],
                  max_position_embeddings=m["max_len"], hidden_act="silu",
                  tie_word_embeddings=m["tie_embeddings"],
                  rope_parameters={"rope_type": "default", "rope_theta": m["rope_base"]},
                  pad_token_id=0, bos_token_id=None, eos_token_id=None)
    if m["qkv_bias"]:
        config = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    else:
        config = transformers.LlamaConfig(attention_bias=False, mlp_bias=False, **common)
        cls = transformers.LlamaForCausalLM
    return cls(config).eval()


def worker_hf(a):
    import numpy as np
    import torch
    import transformers

    from configs.base import MODELS

    m = MODELS[a.model]
    B, P, N = a.batch, a.prompt_len, a.new_tokens
    model = hf_model(m, a.threads)
    data = np.load(os.path.join(a.workdir, "export.npz"))
    sd = {k[2:]: torch.from_numpy(data[k]) for k in data.files if k.startswith("w/")}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if m["tie_embeddings"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = torch.from_numpy(data["prompts"].astype(np.int64))
    am = torch.ones_like(ids)
    full = torch.cat([ids, torch.from_numpy(data["tokens"].astype(np.int64))], dim=1)
    with torch.inference_mode():
        logits = model(input_ids=full, attention_mask=torch.ones_like(full)).logits[:, P - 1:-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, full[:, P:, None])[..., 0]
    logp_diff = float(np.abs(logp.numpy() - data["logp"]).max())
    rss_before, _ = _rss_mb()

    gen = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, min_new_tokens=N,
               eos_token_id=None, pad_token_id=0, use_cache=True)

    def run(i, n=N):
        torch.manual_seed(100 + i)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=am, max_new_tokens=n,
                                 **dict(gen, min_new_tokens=n))
        assert out.shape == (B, P + n), out.shape
        return out

    t0 = time.perf_counter()
    run(0, n=8)  # warm-up (eager torch: no compilation; first-call allocations, lazy init)
    first = time.perf_counter() - t0
    return _serve(run, dict(framework="hf", first_call_s=first, logp_max_abs_diff=logp_diff,
                            rss_before_sampling_mb=rss_before,
                            torch_threads=torch.get_num_threads(), torch_version=torch.__version__,
                            omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", ""),
                            transformers_version=transformers.__version__,
                            attn_implementation=model.config._attn_implementation))


# ----------------------------------------------------------------------------- peak worker
def worker_peak(a):
    import jax
    import jax.numpy as jnp

    n = a.peak_n
    x = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(x, y).block_until_ready()
    times, cpu = [], []
    for _ in range(a.peak_reps):
        t0, c0 = time.perf_counter(), time.process_time()
        f(x, y).block_until_ready()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    best = min(times)
    return dict(matmul_n=n, matmul_best_s=best, peak_flops=2 * n ** 3 / best,
                peak_flops_per_cpu_s=2 * n ** 3 / min(cpu),
                matmul_median_flops=2 * n ** 3 / _median(times), jax_devices=str(jax.devices()))


# ----------------------------------------------------------------------------- driver
class _Worker:
    """A framework in its own subprocess; the driver asks it for one timed rep at a time."""

    def __init__(self, kind, extra):
        self.kind = kind
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind] + extra
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"),
                   TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
        if kind == "hf":  # idle OpenMP threads sleep instead of spinning (see the module doc)
            env.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
        self.err = tempfile.TemporaryFile("w+")
        self.p = subprocess.Popen(cmd, env=env, cwd=REPO, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)

    def _line(self, prefix):
        for line in self.p.stdout:
            if line.startswith(prefix):
                return line
        self.p.wait()
        self.err.seek(0)
        sys.stderr.write(self.err.read())
        raise SystemExit(f"worker {self.kind} failed (exit {self.p.returncode})")

    def ready(self):
        self._line("READY")
        return self

    def run(self):
        self.p.stdin.write("run\n")
        self.p.stdin.flush()
        return json.loads(self._line("{"))

    def finish(self):
        if self.kind != "peak":
            self.p.stdin.write("done\n")
            self.p.stdin.close()
        out = json.loads(self._line("{"))
        self.p.wait()
        return out


def _stats(w, tokens):
    med, best = _median(w["times_s"]), min(w["times_s"])
    return dict(w, median_s=med, best_s=best, tokens_per_s=tokens / med,
                best_tokens_per_s=tokens / best, median_cpu_s=_median(w["cpu_s"]))


def bench_model(name, a, peak):
    from configs.base import MODELS

    B, P, N = a.batch, a.prompt_len, a.new_tokens
    common = ["--model", name, "--batch", str(B), "--prompt_len", str(P),
              "--new_tokens", str(N), "--seed", str(a.seed)]
    with tempfile.TemporaryDirectory(prefix="bench_sampler_") as wd:
        common += ["--workdir", wd]
        jx = _Worker("jax", common).ready()  # exports weights/prompts/reference before HF loads
        hfs = {t: _Worker("hf", common + ["--threads", str(t)]).ready() for t in a.hf_threads}
        workers = [jx] + list(hfs.values())
        for r in range(a.reps):  # interleaved, order alternating: same machine load for all
            for w in (workers if r % 2 == 0 else workers[::-1]):
                w.run()
        j = _stats(jx.finish(), B * N)
        hs = {t: _stats(w.finish(), B * N) for t, w in hfs.items()}
    total, _, attn = _flops(MODELS[name], B, P, N)
    peak_flops, peak_cpu = peak["peak_flops"], peak["peak_flops_per_cpu_s"]
    h = hs[a.hf_threads[0]]
    r = dict(params=j["params"], ada_jax_tokens_per_s=j["tokens_per_s"],
             hf_tokens_per_s=h["tokens_per_s"],
             speedup_vs_hf=j["tokens_per_s"] / h["tokens_per_s"],
             speedup_vs_hf_best_of_reps=j["best_tokens_per_s"] / h["best_tokens_per_s"],
             speedup_vs_hf_cpu_time=h["median_cpu_s"] / j["median_cpu_s"],
             ada_jax_median_s=j["median_s"], hf_median_s=h["median_s"],
             ada_jax_first_call_s=j["first_call_s"],
             ada_jax_compile_s=max(j["first_call_s"] - j["median_s"], 0.0),
             hf_warmup_s=h["first_call_s"],
             useful_gflop=total / 1e9, attn_gflop=attn / 1e9,
             ada_jax_flop_frac=total / j["median_s"] / peak_flops,
             ada_jax_flop_frac_best=total / j["best_s"] / peak_flops,
             hf_flop_frac=total / h["median_s"] / peak_flops,
             ada_jax_flop_frac_cpu=total / j["median_cpu_s"] / peak_cpu,
             hf_flop_frac_cpu=total / h["median_cpu_s"] / peak_cpu,
             ada_jax_peak_rss_mb=j["peak_rss_mb"], hf_peak_rss_mb=h["peak_rss_mb"],
             ada_jax_rss_before_sampling_mb=j["rss_before_sampling_mb"],
             hf_rss_before_sampling_mb=h["rss_before_sampling_mb"],
             logp_max_abs_diff=h["logp_max_abs_diff"],
             hf_attn_implementation=h["attn_implementation"],
             ada_jax_times_s=[round(t, 4) for t in j["times_s"]],
             ada_jax_cpu_s=[round(t, 4) for t in j["cpu_s"]])
    for t, hh in hs.items():
        r[f"hf_threads{t}_tokens_per_s"] = hh["tokens_per_s"]
        r[f"hf_threads{t}_times_s"] = [round(x, 4) for x in hh["times_s"]]
        r[f"hf_threads{t}_cpu_s"] = [round(x, 4) for x in hh["cpu_s"]]
    best_hf = max(hh["tokens_per_s"] for hh in hs.values())
    r["speedup_vs_best_hf_threads"] = j["tokens_per_s"] / best_hf
    r["speedup_vs_best_hf_threads_cpu_time"] = (
        min(hh["median_cpu_s"] for hh in hs.values()) / j["median_cpu_s"])
    print(f"[{name}] {r['params']:,} params")
    for label, w, first in [("ada_jax ", j, "first call")] + [
            (f"HF t={t}  ", hh, "warm-up") for t, hh in hs.items()]:
        print(f"  {label}: {w['tokens_per_s']:9,.0f} tok/s  median {w['median_s'] * 1e3:7.1f} ms "
              f"(best {w['best_s'] * 1e3:.1f}, CPU {w['median_cpu_s'] * 1e3:.1f})  {first} "
              f"{w['first_call_s']:.2f} s  peak RSS {w['peak_rss_mb']:.0f} MiB "
              f"(before sampling {w['rss_before_sampling_mb']:.0f})")
    print(f"  speedup {r['speedup_vs_hf']:.1f}x wall, {r['speedup_vs_hf_cpu_time']:.1f}x CPU time "
          f"(best-of-reps {r['speedup_vs_hf_best_of_reps']:.1f}x; vs the faster HF thread count "
          f"{r['speedup_vs_best_hf_threads']:.1f}x wall, "
          f"{r['speedup_vs_best_hf_threads_cpu_time']:.1f}x CPU)\n"
          f"  same function: HF's log-probs of ada_jax's {B}x{N} samples differ by at most "
          f"{r['logp_max_abs_diff']:.1e}", flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 reps, HF at 2 threads only")
    ap.add_argument("--models", default="tiny,small")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt_len", type=int, default=32)
    ap.add_argument("--new_tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=None, help="timed reps (default 7, quick 2)")
    ap.add_argument("--hf_threads", default=None,
                    help="torch.set_num_threads per HF worker; the first is the headline "
                         "(default 2,1; quick 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peak_n", type=int, default=2048)
    ap.add_argument("--peak_reps", type=int, default=None)
    ap.add_argument("--worker", choices=["jax", "hf", "peak"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        fn = dict(jax=worker_jax, hf=worker_hf, peak=worker_peak)[a.worker]
        print(json.dumps(fn(a)), flush=True)
        return

    sys.path.insert(0, REPO)
    from ada_jax import host_cpu
    a.reps = a.reps or (2 if a.quick else 7)
    a.peak_reps = a.peak_reps or (3 if a.quick else 10)
    a.hf_threads = [int(t) for t in (a.hf_threads or ("2" if a.quick else "2,1")).split(",")]
    t_start = time.perf_counter()
    B, P, N = a.batch, a.prompt_len, a.new_tokens
    load0 = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load avg {load0[0]:.2f} at start; B={B} P={P} N={N},"
          f" T=1, no top-k/top-p, no EOS; {a.reps} interleaved timed reps after warm-up; "
          f"torch threads {a.hf_threads} (OMP_WAIT_POLICY={OMP_WAIT_POLICY}); XLA CPU defaults "
          f"(its own pool over all cores)", flush=True)
    peak_args = ["--peak_n", str(a.peak_n), "--peak_reps", str(a.peak_reps)]
    p0 = _Worker("peak", peak_args).finish()
    print(f"f32 matmul peak (jitted {a.peak_n}^3, best of {a.peak_reps}): "
          f"{p0['peak_flops'] / 1e9:.1f} GFLOP/s wall, "
          f"{p0['peak_flops_per_cpu_s'] / 1e9:.1f} GFLOP per CPU-second", flush=True)
    # The machine is shared: the peak is measured again at the end and the better of the two
    # kept; the FLOP fractions are computed once both are known.
    rs = {name: bench_model(name, a, p0) for name in a.models.split(",")}
    p1 = _Worker("peak", peak_args).finish()
    print(f"f32 matmul peak at the end: {p1['peak_flops'] / 1e9:.1f} GFLOP/s wall, "
          f"{p1['peak_flops_per_cpu_s'] / 1e9:.1f} GFLOP per CPU-second", flush=True)
    peak = {k: max(p0[k], p1[k]) for k in ("peak_flops", "peak_flops_per_cpu_s")}
    results = {}
    for name, r in rs.items():
        for k in ("ada_jax_flop_frac", "ada_jax_flop_frac_best", "hf_flop_frac"):
            r[k] *= p0["peak_flops"] / peak["peak_flops"]
        for k in ("ada_jax_flop_frac_cpu", "hf_flop_frac_cpu"):
            r[k] *= p0["peak_flops_per_cpu_s"] / peak["peak_flops_per_cpu_s"]
        results[name] = r
        print(f"[{name}] {r['useful_gflop']:.2f} useful GFLOP: ada_jax "
              f"{100 * r['ada_jax_flop_frac']:.1f}% of the wall peak "
              f"({100 * r['ada_jax_flop_frac_cpu']:.1f}% per CPU-second), HF "
              f"{100 * r['hf_flop_frac']:.1f}% ({100 * r['hf_flop_frac_cpu']:.1f}%)")
    head = results[a.models.split(",")[0]]
    summary = dict(
        speedup_vs_hf=head["speedup_vs_hf"], ada_jax_tokens_per_s=head["ada_jax_tokens_per_s"],
        hf_tokens_per_s=head["hf_tokens_per_s"], ada_jax_flop_frac=head["ada_jax_flop_frac"],
        hf_flop_frac=head["hf_flop_frac"], ada_jax_flop_frac_cpu=head["ada_jax_flop_frac_cpu"],
        hf_flop_frac_cpu=head["hf_flop_frac_cpu"], headline_model=a.models.split(",")[0],
        peak_gflops=peak["peak_flops"] / 1e9,
        peak_gflop_per_cpu_s=peak["peak_flops_per_cpu_s"] / 1e9,
        batch=B, prompt_len=P, new_tokens=N, reps=a.reps, hf_threads=a.hf_threads,
        omp_wait_policy=OMP_WAIT_POLICY, cpus=os.cpu_count(), cpu=host_cpu(),
        loadavg_start=load0[0], loadavg_end=os.getloadavg()[0],
        wall_s=time.perf_counter() - t_start, models=results)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
