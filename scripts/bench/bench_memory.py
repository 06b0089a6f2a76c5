"""Peak host memory of RL steps against model size, batch and lengths, with memory_estimate's
prediction beside each.

Each configuration runs `scripts/train.py` (model=hf, task=files: arithmetic questions from
scripts/tools/make_arithmetic_task.py, eval on 16 prompts x 2, then 2 RL steps) in its own process
under `/usr/bin/time -v`; its "Maximum resident set size" is the peak. The models are
random-weight Llama stand-ins of chosen sizes written here with SmolLM2-135M's vocabulary of
49,152 (the stand-in tokenizer is small: ids past it are masked, never drawn; random weights
never stop early, so every response runs its full length, the worst case), plus the real
SmolLM2 folder given by --real (skipped when absent). The prediction is
`memory.host_peak_bytes` (the estimate's larger phase on one device, plus the process's
runtime).

  python scripts/bench/bench_memory.py --quick        # two small stand-ins
  python scripts/bench/bench_memory.py --real=/work/models/smollm2_hf
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

# (name, layers, d_model, heads, kv heads, d_ff): SmolLM2-135M's shape, and halves / quarters
SIZES = {"s30x576": (30, 576, 9, 3, 1536), "s8x576": (8, 576, 9, 3, 1536),
         "s4x256": (4, 256, 4, 2, 768)}
VOCAB = 49_152


def standin(path: str, size: str) -> str:
    """A random-weight Llama folder of SIZES[size] with VOCAB logits and the tests' small
    Llama-3 tokenizer (tests/standins.py)."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from tests import standins
    L, D, H, K, F = SIZES[size]
    standins.build_tokenizer(path, "llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                      num_attention_heads=H, num_key_value_heads=K, head_dim=D // H,
                      tie_word_embeddings=True, rope_theta=1e5, max_position_embeddings=2048,
                      bos_token_id=None, eos_token_id=None)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def flags_for(run: dict, model_dir: str, task_dir: str, real: bool) -> list[str]:
    f = [f"--config=configs/base.py:algo={run['algo']},model=hf,task=files",
         f"--config.model.init_from={model_dir}",
         f"--config.task.files={task_dir}/train.jsonl",
         f"--config.task.eval_files={task_dir}/eval.jsonl",
         "--config.rl.steps=2", f"--config.rl.prompts_per_step={run['prompts']}",
         "--config.rl.minibatches=1", f"--config.rl.microbatches={run['micro']}",
         f"--config.sampling.max_prompt_len={run['prompt_len']}",
         f"--config.sampling.max_new_tokens={run['new_tokens']}",
         "--config.eval.prompts=16", "--config.eval.k=2", "--config.checkpoint.every=1000",
         "--config.log.progress=false"]
    return f + [f"--config.{k}={v}" for k, v in run.get("extra", {}).items()]


def measure(run: dict, model_dir: str, task_dir: str, real: bool, work: str) -> dict:
    """Peak RSS (GiB) of one 2-step run and the estimate's prediction."""
    args = flags_for(run, model_dir, task_dir, real)
    wd = os.path.join(work, "runs", run["name"])
    out = wd + ".time"
    os.makedirs(os.path.dirname(wd), exist_ok=True)
    t0 = time.time()
    p = subprocess.run(["/usr/bin/time", "-v", "-o", out, sys.executable, "scripts/train.py",
                        f"--workdir={wd}", "--plots=false", *args], cwd=REPO,
                       env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{run['name']} failed:\n{p.stderr[-3000:]}")
    peak_kb = next(int(line.split()[-1]) for line in open(out)
                   if "Maximum resident set size" in line)
    # The same config as the run saw, through memory_estimate.py's own flag parsing.
    est = subprocess.run([sys.executable, "scripts/analysis/memory_estimate.py", "--devices=1", "--host",
                          *args], cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO),
                         capture_output=True, text=True, check=True).stdout
    predicted = float(est.split("predicted peak RSS on one CPU host")[1].split()[0])
    return dict(run, peak_gib=round(peak_kb / 2**20, 3), predicted_gib=round(predicted, 3),
                error=round(predicted / (peak_kb / 2**20) - 1, 3), wall_s=round(time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two stand-ins only")
    ap.add_argument("--real", default="/work/models/smollm2_hf",
                    help="a SmolLM2-135M-Instruct HF folder (skipped when absent)")
    ap.add_argument("--work", default="", help="where models, tasks and runs go (default: tmp)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="bench_memory_")
    task_dir = os.path.join(work, "task")
    subprocess.run([sys.executable, "scripts/tools/make_arithmetic_task.py", f"--out_dir={task_dir}"],
                   cwd=REPO, check=True, capture_output=True)
    base = dict(algo="grpo", prompts=8, micro=4, prompt_len=128, new_tokens=64)
    runs = [dict(base, name="s4x256", size="s4x256"),
            dict(base, name="s8x576", size="s8x576")]
    if not a.quick:
        runs += [dict(base, name="s30x576", size="s30x576"),
                 dict(base, name="s8x576_p16", size="s8x576", prompts=16, micro=8),
                 dict(base, name="s8x576_n256", size="s8x576", new_tokens=256)]
        if os.path.exists(os.path.join(a.real, "config.json")):
            runs += [dict(base, name="smollm2_grpo", size="real"),
                     dict(base, name="smollm2_balance16", size="real", algo="ada_balance",
                          prompts=16, new_tokens=256, micro=16,
                          extra={"adaptive.samples_per_round": 4, "adaptive.max_rounds": 4,
                                 "adaptive.slots": 64})]
    from ada_jax import host_cpu
    results = []
    for run in runs:
        real = run["size"] == "real"
        model_dir = a.real if real else standin(os.path.join(work, "models", run["size"]),
                                                run["size"])
        r = measure(run, model_dir, task_dir, real, work)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(json.dumps(dict(host=host_cpu(), date=time.strftime("%Y-%m-%d"),
                          peak_gib={r["name"]: r["peak_gib"] for r in results},
                          predicted_gib={r["name"]: r["predicted_gib"] for r in results},
                          max_abs_error=max(abs(r["error"]) for r in results))))


if __name__ == "__main__":
    main()
