"""The one config file. Variants are `key=value` args:

  --config=configs/base.py:algo=grpo,model=tiny,smoke=True
  --config.rl.steps=200 --config.sampling.temperature=0.7

`get_config` builds the defaults, applies the variant args, checks every field
(`ada_jax.config_check.validate`) and locks the config so typos fail loudly.
"""
import ml_collections

from ada_jax.tasks import TASKS, task_of
from ada_jax.model import VARIANT_FIELDS, ModelConfig
from ada_jax.tokenizer import CHAT_FAMILIES, SYSTEM_MATH

MODELS = {
    # Embedded default: a few hundred thousand params, trains on 2 CPU cores in minutes.
    "tiny": dict(vocab_size=128, d_model=128, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=384,
                 head_dim=32, rope_base=10_000.0, qkv_bias=False, tie_embeddings=True,
                 norm_eps=1e-6, max_len=256),
    "small": dict(vocab_size=128, d_model=256, n_layers=6, n_heads=8, n_kv_heads=4, d_ff=768,
                  head_dim=32, rope_base=10_000.0, qkv_bias=False, tie_embeddings=True,
                  norm_eps=1e-6, max_len=512),
    "qwen2_5_0_5b": dict(vocab_size=151_936, d_model=896, n_layers=24, n_heads=14, n_kv_heads=2,
                         d_ff=4864, head_dim=64, rope_base=1_000_000.0, qkv_bias=True,
                         tie_embeddings=True, norm_eps=1e-6, max_len=32_768),
    "qwen2_5_math_1_5b": dict(vocab_size=151_936, d_model=1536, n_layers=28, n_heads=12,
                              n_kv_heads=2, d_ff=8960, head_dim=128, rope_base=10_000.0,
                              qkv_bias=True, tie_embeddings=True, norm_eps=1e-6, max_len=4096),
    "qwen2_5_math_7b": dict(vocab_size=152_064, d_model=3584, n_layers=28, n_heads=28,
                            n_kv_heads=4, d_ff=18_944, head_dim=128, rope_base=10_000.0,
                            qkv_bias=True, tie_embeddings=False, norm_eps=1e-6, max_len=4096),
    "llama3_2_1b": dict(vocab_size=128_256, d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8,
                        d_ff=8192, head_dim=64, rope_base=500_000.0, qkv_bias=False,
                        tie_embeddings=True, norm_eps=1e-5, max_len=131_072,
                        rope_scaling="llama3"),
    "llama3_2_3b_instruct": dict(vocab_size=128_256, d_model=3072, n_layers=28, n_heads=24,
                                 n_kv_heads=8, d_ff=8192, head_dim=128, rope_base=500_000.0,
                                 qkv_bias=False, tie_embeddings=True, norm_eps=1e-5,
                                 max_len=131_072, rope_scaling="llama3"),
    # Gemma 3 270M (base): 5 local layers (window 512, RoPE base 1e4) to each global one
    "gemma3_270m": dict(vocab_size=262_144, d_model=640, n_layers=18, n_heads=4, n_kv_heads=1,
                        d_ff=2048, head_dim=256, rope_base=1_000_000.0, qkv_bias=False,
                        tie_embeddings=True, norm_eps=1e-6, max_len=32_768, sliding_window=512,
                        sliding_window_pattern=6, rope_local_base=10_000.0, qk_norm=True,
                        post_norms=True, norm_plus_one=True, mlp_act="gelu_tanh",
                        embed_scale=True, query_pre_attn_scalar=256.0),
}
# Pretrained models: what differs per model. template, eos_token, extra_eos_tokens: the family's
# prompt format and stop tokens (tokenizer.CHAT_FAMILIES); slots: decode slots (global), sized
# for one 8xH100 host by scripts/analysis/memory_estimate.py (docs/scaling.md §6), fewer devices need
# fewer;
# prefill_chunk: rows per prefill chunk (default 64; 7B: 16, so streaming's rebuild of 3k-token
# slot caches fits with 10% headroom).
# max_len is the checkpoint's max_position_embeddings: Qwen2.5-Math's 4096 holds the reference
# prompt 1024 + response 2048 (raise it only with a longer response, past the trained range).
_QWEN, _LLAMA = CHAT_FAMILIES["qwen2"], CHAT_FAMILIES["llama"]
PRETRAINED = {
    "qwen2_5_0_5b": dict(_QWEN, slots=4096),
    "qwen2_5_math_1_5b": dict(_QWEN, slots=4096),
    "qwen2_5_math_7b": dict(_QWEN, slots=2048, prefill_chunk=16),
    "llama3_2_1b": dict(_LLAMA, slots=4096),
    "llama3_2_3b_instruct": dict(_LLAMA, slots=1024),
}
# model=hf: any folder of convert.ARCHITECTURES, the architecture read from config.model.init_from's
# config.json once the command line has set it (config_check.resolve_hf; until then the sizes
# are 0), the template and stop tokens, unless set, the checkpoint's own (its chat template and
# eos tokens: tokenizer.checkpoint_chat), else its model_type's (CHAT_FAMILIES), the
# other settings those of PRETRAINED; 1024 slots, the fewest of PRETRAINED (raise them as far
# as scripts/analysis/memory_estimate.py allows).
HF = "hf"
HF_SLOTS = 1024


def default_stream_lag(slots_per_prompt: float) -> int:
    """adaptive.stream.max_lag for a stream at S/B slots per prompt, as the configs that stream
    by default set it and scripts/bench/bench_adaptive.py measures it: 2 from S/B = 4 up, else 1.
    At most (lag + 1) x B prompts are in progress, and at lag 1 and S/B >= 4 each must hold
    2+ samples past those its rule surely needs (docs/benchmarks.md, "Streaming")."""
    return 2 if slots_per_prompt >= 4 else 1


# Algorithm presets: which advantage estimator and which sampling policy of the engine.
ALGOS = {
    "grpo": dict(advantage="grpo", policy="uniform", n=4),
    "drgrpo": dict(advantage="drgrpo", policy="uniform", n=4, loss_agg="constant"),
    "rloo": dict(advantage="rloo", policy="uniform", n=4),
    "raft": dict(advantage="raft", policy="uniform", n=4),
    "liteppo": dict(advantage="liteppo", policy="uniform", n=4),
    "reinforce_pp": dict(advantage="reinforce_pp", policy="uniform", n=4),
    "dapo": dict(advantage="grpo", policy="dapo", n=4),
    "ada_pos": dict(advantage="pool", policy="seq", n=4, exit_rule="pos"),
    "ada_balance": dict(advantage="pool", policy="seq", n=4, exit_rule="balance"),
    "ada_est": dict(advantage="grpo", policy="est", n=4),
    "gvm": dict(advantage="grpo", policy="gvm", n=4),
    "knapsack": dict(advantage="grpo", policy="knapsack", n=4),
    "vip": dict(advantage="rloo", policy="vip", n=4),
    "daro": dict(advantage="grpo", policy="uniform", n=4, daro=True),
}


def _model_config(name):
    m = ml_collections.ConfigDict(dict(
        name=name, rope_scaling="none", rope_scaling_factor=32.0, rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0, rope_original_max_len=8192,
        param_dtype="float32", dtype="float32", remat=False, scan_layers=False, init_from="", tokenizer="",
        eos_token="", pad_token="", extra_eos_tokens=(),
        **{f: ModelConfig.__dataclass_fields__[f].default for f in VARIANT_FIELDS},
    ))
    # model=hf: placeholders of the right types, filled from init_from (config_check.resolve_hf)
    m.update(MODELS[name] if name != HF else {
        k: type(v)(0) for k, v in MODELS["qwen2_5_math_1_5b"].items()})
    return m


def _did_you_mean(word, choices) -> str:
    import difflib
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _boolean(key: str, word: str) -> bool:
    """A boolean variant arg; a word that is neither true nor false is refused (not read as
    False)."""
    if word.lower() in _TRUE + _FALSE:
        return word.lower() in _TRUE
    raise ValueError(f"config arg {key}={word!r} is not a boolean: use one of "
                     f"{', '.join(_TRUE + _FALSE)} (any case)")


def get_config(arg: str = ""):
    """Defaults, then variant args `algo=…,model=…,task=…,smoke=True`."""
    args = dict(algo="ada_balance", model="tiny", task="families", smoke="False")
    for kv in filter(None, (arg or "").split(",")):
        if "=" not in kv:
            raise ValueError(f"config arg {kv!r} is not key=value")
        k, v = kv.split("=", 1)
        if k not in args:
            raise ValueError(f"unknown config arg {k!r}{_did_you_mean(k, args)}; known: "
                             f"{sorted(args)}")
        args[k] = v
    if args["model"] not in MODELS and args["model"] != HF:
        raise ValueError(f"config arg model={args['model']!r}"
                         f"{_did_you_mean(args['model'], list(MODELS) + [HF])}; choose from "
                         f"{sorted(MODELS) + [HF]}")
    if args["algo"] in ("sage", "sage_light"):  # self-hinting goes on top of an algorithm
        raise ValueError(
            f"config arg algo={args['algo']!r}: SAGE is self-hinting on top of an algorithm, "
            f"not an algo preset: pass e.g. --config=configs/base.py:algo=grpo "
            f"--config.rl.hints={args['algo']} --config.sampling.max_prompt_len=112 (hints "
            f"lengthen the prompts; one that does not fit stops the run at load time, naming "
            f"the length needed)")
    if args["algo"] not in ALGOS:
        raise ValueError(f"config arg algo={args['algo']!r}{_did_you_mean(args['algo'], ALGOS)}"
                         f"; choose from {sorted(ALGOS)}")
    smoke = _boolean("smoke", args["smoke"])
    algo = ALGOS[args["algo"]]

    c = ml_collections.ConfigDict()
    c.seed = 0
    c.algo = args["algo"]
    c.smoke = smoke
    c.model = _model_config(args["model"])

    # Mesh: product of the axis sizes must equal the device count; -1 = "all remaining".
    c.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=-1, tensor=1))
    c.sharding_rules = [  # logical axis -> mesh axes (None = replicated)
        ("batch", ("data", "fsdp")), ("vocab", "tensor"), ("embed", "fsdp"),
        ("heads", "tensor"), ("kv_heads", "tensor"), ("mlp", "tensor"),
        ("head_dim", None), ("layers", None), ("length", None),
    ]
    # Timeouts of jax.distributed (seconds): waiting for every process at start; a process
    # whose heartbeat stops this long is declared dead and the others stop; waiting for every
    # process at exit (docs/scaling.md §5g, "What happens when a process dies").
    c.distributed = ml_collections.ConfigDict(dict(
        enabled=False, coordinator_address="", num_processes=1, process_id=0,
        initialization_timeout_s=300, heartbeat_timeout_s=100, shutdown_timeout_s=300))

    # stop_strings: text that ends a response once it ends with it (matched as the tokenizer
    # encodes it, kept in the response as a stop token is); () = the template's (plain, a base
    # model's: its next "\nQuestion:" or "\n\nQuestion:"; none for the others), ('',) = none.
    # draw: gumbel (the documented runs') or inverse_cdf (the same distribution, other tokens per
    # seed; the sampler 1.35x faster at a 49k vocabulary on a CPU: docs/benchmarks.md)
    # pad_multiple: prompts prefilled at the batch's longest one rounded up to this (0 = always
    # max_prompt_len; the same tokens up to float rounding: docs/benchmarks.md)
    c.sampling = ml_collections.ConfigDict(dict(
        temperature=1.0, top_k=0, top_p=1.0, max_prompt_len=48, max_new_tokens=112,
        eval_temperature=1.0, prefill_chunk=0, stop_strings=(), draw="gumbel",
        pad_multiple=16))

    c.task = ml_collections.ConfigDict(dict(
        name=args["task"], reward="verifier", answer="boxed", template="embedded",
        system_prompt=SYSTEM_MATH, few_shot_file="",
        min_level=1, max_level=8, train_size=20_000,
        eval_size=256, seed=1234, family_set="rl", files=ml_collections.FieldReference("", field_type=str),
        eval_files="", data_dir="",
        field_map=ml_collections.ConfigDict(dict(question="", answer="", solution="")),
        on_bad_row="error", verifier_workers=2, verifier_timeout=5.0))

    # mode: refill (docs/results.md: same accuracy as the reference rounds, 1.8x less wall time).
    # Refill defaults are the measured best (docs/benchmarks.md, "Adaptive engine"): at most
    # 2 slots per prompt (32 slots / 16 prompts; at 4 refill idles or over-samples) and
    # overcommit 0.75 (within 3% of the best slot time at 1, 2 and 4 slots per prompt).
    # min_pool: pos / balance stop at max(min_pool, the rule's stopping time), so every pool
    # holds >= min_pool samples; 0 = rl.n, the group size (balance 2/2 needs 4 anyway; the
    # reference's rounds hold >= samples_per_round = 8, set 8 for that).
    # mode="stream" (policy seq / uniform): the refill engine's prompts outlive a step
    # (ada_jax/stream.py, settings adaptive.stream.*).
    c.adaptive = ml_collections.ConfigDict(dict(
        policy=algo["policy"], exit_rule=algo.get("exit_rule", "none"), mode="refill",
        k_pos=2, k_neg=2, samples_per_round=8, max_rounds=4, at_budget="keep",
        slots=32, chunk_len=16, select_order="generation", min_pool=0, overcommit=0.75))
    # Each policy module's settings (ada_jax/policies/<module>.py SETTINGS), the group
    # adaptive.<module>, defaults from their one home (the contract: ada_jax/policies/__init__.py).
    from ada_jax import collect
    for group, fields in collect.groups().items():
        c.adaptive[group] = ml_collections.ConfigDict({k: s.default for k, s in fields.items()})

    c.rl = ml_collections.ConfigDict(dict(
        steps=40, cost_budget=0, cost_unit="samples", prompts_per_step=16, n=algo["n"],
        advantage=algo["advantage"],
        std_normalise=False, objective="linear", objective_alpha=0.5, objective_weight=False,
        importance_correction=False, ppo_epochs=1, minibatches=2, microbatches=1,
        daro=algo.get("daro", False), daro_buckets=0, inject_nan_step=-1,
        hints="none", pad_multiple=16, share_prompts=True))

    c.loss = ml_collections.ConfigDict(dict(
        clip_low=0.2, clip_high=0.28, dual_clip=0.0, agg=algo.get("loss_agg", "token_mean"),
        kl_coef=0.0, kl_type="k3", kl_in_reward=False, entropy_coef=0.0,
        decoupled="auto", behav_cap=0.0,  # decoupled PPO for stale samples (docs/spec.md §10)
        credit_tokens=0,  # >0: only the first k completion tokens carry the loss (an ablation)
        # The base's SFT corpus replayed beside the policy loss (sft.Replay): coefficient,
        # rows per update, and the first target tokens left out (the family task: its marker)
        replay_coef=0.0, replay_rows=16, replay_skip=0))

    c.optim = ml_collections.ConfigDict(dict(
        lr=1e-4, warmup_steps=10, grad_clip=1.0, weight_decay=0.0, b1=0.9, b2=0.999,
        eps=1e-8, daro_lr=0.0,  # daro_lr: DARO log-weights' own lr (0 = optim.lr)
        max_update_ratio=1.0, max_skipped_steps=5))  # divergence: skip, then stop
    # AdamW's first moment in bfloat16 ("" = the params' dtype): half its memory (Gemma 3
    # 270M: 0.5 GiB); the second moment stays float32 (b2's small steps vanish in bfloat16).
    c.optim.mu_dtype = ""
    # Collapse (ada_jax/collapse.py): the success rate over this many steps improbably far
    # under the run's earlier rate (0 = never watch); stop the run then (exit 1) or only warn.
    c.optim.update(dict(collapse_steps=5, stop_on_collapse=True))

    # Embedded task only: careful_share is the share of SFT targets in the worked
    # line-by-line style (the rest box the answer at once: the choice RL learns), and SFT sees
    # levels up to max_level only (0 = all); docs/results.md.
    # checkpoint_every: SFT's own mid-run checkpoints (0 = a tenth of the run), so a kill resumes
    c.sft = ml_collections.ConfigDict(dict(steps=600, batch_size=64, lr=3e-3, warmup_steps=50,
                                           base_dir="", careful_share=0.3, max_level=6,
                                           checkpoint_every=0))

    # train_prompts > 0 also evaluates on that many training prompts (train_eval/…);
    # every_cost > 0 also evaluates at the first step whose cost (rl.cost_unit: samples generated
    # + trained, or FLOP-weighted tokens) passes each multiple of it: one cost grid for arms
    # whose steps cost differently;
    # batch_rows: samples decoded at once (their caches are the eval's memory; fewer is slower);
    # dtype, draw: the evaluation's compute dtype and token draw ("": model.dtype's,
    # sampling.draw's), e.g. a float32 policy evaluated in bfloat16 where that samples faster.
    c.eval = ml_collections.ConfigDict(dict(every=10, every_cost=0, k=4, prompts=256,
                                            train_prompts=0, batch_rows=256, dtype="",
                                            draw=""))
    # Resuming a workdir refuses a config that differs from its config.json (beyond run length,
    # cadence, layout: config_check.RESUMABLE) unless allow_config_change; when checkpoints
    # exist but none is readable it stops unless start_over_if_unreadable.
    c.checkpoint = ml_collections.ConfigDict(dict(every=20, keep=2, allow_config_change=False,
                                                  start_over_if_unreadable=False))
    # Resume intact checkpoints whose metrics.jsonl lost records (they stay lost).
    c.checkpoint.resume_without_metrics = False
    # memory: refuse, before anything compiles, a run whose predicted host memory (the
    # estimate of ada_jax/memory.py and the eval's rows) exceeds the machine's; False runs anyway
    c.check = ml_collections.ConfigDict(dict(memory=True))
    # wandb: also send the scalars to Weights & Biases (pip install wandb; imported only then)
    c.log = ml_collections.ConfigDict(dict(progress=True, wandb=False, wandb_project="ada_jax"))

    if c.model.name in PRETRAINED or c.model.name == HF:  # the reference run (scaling.md §4)
        p = PRETRAINED.get(c.model.name, dict(template="", eos_token="", extra_eos_tokens=(),
                                              slots=HF_SLOTS))
        # float32 master weights (bf16 params round lr-1e-6 updates away), bfloat16 compute on
        # accelerators, float32 on a CPU host ("auto": model.compute_dtype). Blocks as one scan
        # in the learner: smaller XLA temporaries for deep models.
        c.model.update(param_dtype="float32", dtype="auto", remat=True, scan_layers=True,
                       eos_token=p["eos_token"], extra_eos_tokens=p["extra_eos_tokens"])
        c.task.template = p["template"]
        c.adaptive.slots = p["slots"]
        c.sampling.update(max_prompt_len=1024, max_new_tokens=2048,
                          prefill_chunk=p.get("prefill_chunk", 64))
        # 2048 rows in 4 minibatches of 512; 32 micro-batches of 16 rows = 2 sequences per
        # device on 8 devices, the reference learner's ≈6k tokens per GPU (docs/scaling.md §4).
        c.rl.update(steps=400, prompts_per_step=512, minibatches=4, microbatches=32)
        # >= 4 slots per prompt: per-step refill idles (slot utilisation 0.75 at 4, 0.61 at 8)
        # and launches 1.2-1.35x its pools; streaming keeps >= 0.9 busy and launches fewer
        # (docs/benchmarks.md, "Streaming"), at the lag `default_stream_lag` gives (2 here: 2B
        # prompts admitted ahead, their caches counted by scripts/analysis/memory_estimate.py).
        # Sequential policies only.
        spp = p["slots"] / c.rl.prompts_per_step
        if spp >= 4 and c.adaptive.policy in ("seq", "uniform"):
            c.adaptive.mode = "stream"
            c.adaptive.stream.max_lag = default_stream_lag(spp)
        c.optim.lr = 1e-6
        c.checkpoint.every = 50
        c.eval.every = 50
        c.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=-1, tensor=1))

    if smoke:
        c.rl.steps = 2
        c.rl.prompts_per_step = 4
        c.sampling.max_new_tokens = 16
        if c.model.name in PRETRAINED or c.model.name == HF:  # 16 rows, one micro-batch
            c.rl.update(minibatches=1, microbatches=1)
            c.sampling.max_prompt_len = 256
        c.adaptive.samples_per_round = 4
        c.adaptive.max_rounds = 2
        c.adaptive.slots = 16
        c.sft.steps = 10
        c.eval.every = 2
        c.eval.prompts = 8
        c.eval.k = 2
        c.task.train_size = 256
        c.task.eval_size = 16
    # The task's own defaults (tasks/task.py, `Task.configure`): the family task's tokenizer,
    # reward and recipe on the embedded models, and its smoke run.
    if c.task.name in TASKS and (configure := task_of(c).configure) is not None:
        configure(c, smoke, pretrained=c.model.name in PRETRAINED or c.model.name == HF)

    from ada_jax.config_check import validate  # local import: keep configs importable alone
    validate(c, overrides_pending=True)  # model=hf: init_from comes with the overrides
    c.lock()
    return c
