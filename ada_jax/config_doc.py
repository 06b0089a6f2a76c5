"""The config reference, docs/config.md: every field of configs/base.py with its default, what
it means and the nearest verl / TRL setting. `reference(get_config)` renders the page from the
live defaults; tests/test_config_doc.py keeps the page and this table in sync with the config.

  python scripts/tools/config_reference.py > docs/config.md
"""
import json

# field: (meaning, verl / TRL name). "—": no counterpart.
FIELDS = {
    "seed": ("RNG seed: init, sampling (fold_in(seed, step)), the prompt order", "data.seed / seed"),
    "algo": ("algorithm preset (variant arg `algo=`): sets rl.advantage, adaptive.policy, "
             "exit_rule, rl.n, loss.agg, rl.daro", "algorithm.adv_estimator / —"),
    "smoke": ("variant arg `smoke=True`: a short run (2 steps of 4 prompts, short "
              "responses, 10 SFT steps); on the family task (tiny / small model) the task's "
              "own smoke run, whose reward and accuracy visibly rise (its steps and expected "
              "result: `ada_jax/tasks/families.py`, `configure`)", "—"),
    # model
    "model.name": ("model variant (`model=`): tiny, small, a pretrained architecture, or hf "
                   "(read from init_from)", "—"),
    "model.init_from": ("Hugging Face model folder to start from (config.json, safetensors, "
                        "tokenizer.json); empty = SFT the embedded model",
                        "actor_rollout_ref.model.path / model_name_or_path"),
    "model.tokenizer": ("tokenizer: empty = init_from's (else the embedded one), a packaged "
                        "sentencepiece name, a *.model or a tokenizer.json", "— / tokenizer"),
    "model.eos_token": ("end-of-response token (overrides tokenizer_config.json)",
                        "— / generation_config.eos_token_id"),
    "model.pad_token": ("padding token (default: the tokenizer's, else EOS)", "— / pad_token"),
    "model.extra_eos_tokens": ("further tokens that also stop a response", "— / eos_token_id list"),
    "model.param_dtype": ("master weight and Adam state dtype", "actor.fsdp_config / —"),
    "model.dtype": ("compute dtype; auto: bfloat16 on accelerators, float32 on a CPU (a "
                    "bfloat16 training step is no faster there)",
                    "rollout.dtype / bf16"),
    "model.remat": ("recompute activations in the backward pass (less memory)",
                    "model.enable_gradient_checkpointing / gradient_checkpointing"),
    "model.scan_layers": ("run the decoder blocks as one scan over stacked weights in the "
                          "learner: one block in the compiled step and smaller XLA "
                          "temporaries (same values)", "— / scan_layers (MaxText)"),
    "model.vocab_size": ("vocabulary rows of the embedding (>= the tokenizer's ids)", "—"),
    "model.d_model": ("hidden size", "hidden_size"),
    "model.n_layers": ("decoder layers", "num_hidden_layers"),
    "model.n_heads": ("attention (query) heads", "num_attention_heads"),
    "model.n_kv_heads": ("key/value heads (GQA)", "num_key_value_heads"),
    "model.d_ff": ("SwiGLU inner size", "intermediate_size"),
    "model.head_dim": ("size of one head", "head_dim"),
    "model.rope_base": ("RoPE base frequency", "rope_theta"),
    "model.rope_scaling": ("RoPE scaling of the global layers: none, llama3, linear or yarn",
                           "rope_scaling.rope_type"),
    "model.rope_scaling_factor": ("llama3 / linear / yarn RoPE scaling factor",
                                  "rope_scaling.factor"),
    "model.rope_low_freq_factor": ("llama3 RoPE low-frequency factor",
                                   "rope_scaling.low_freq_factor"),
    "model.rope_high_freq_factor": ("llama3 RoPE high-frequency factor",
                                    "rope_scaling.high_freq_factor"),
    "model.rope_original_max_len": ("llama3 / yarn RoPE original context length",
                                    "rope_scaling.original_max_position_embeddings"),
    "model.yarn_beta_fast": ("yarn: rotations over the original context above which a "
                             "frequency is kept", "rope_scaling.beta_fast"),
    "model.yarn_beta_slow": ("yarn: rotations below which a frequency is interpolated",
                             "rope_scaling.beta_slow"),
    "model.yarn_truncate": ("yarn: the ramp's ends rounded outwards to whole frequencies",
                            "rope_scaling.truncate"),
    "model.yarn_attention_factor": ("yarn: rotated queries and keys times this",
                                    "rope_scaling.attention_factor (or from factor, mscale)"),
    "model.qkv_bias": ("biases on the q/k/v projections (Qwen2)", "attention_bias"),
    "model.sliding_window": ("local layers attend to the last this many positions (0: no "
                             "local layers; Gemma 3)", "sliding_window"),
    "model.sliding_window_pattern": ("every n-th layer global, the others local (0: all local)",
                                     "layer_types / sliding_window_pattern"),
    "model.rope_local_base": ("RoPE base of the local layers", "rope_local_base_freq"),
    "model.qk_norm": ("RMSNorm of each head's queries and keys (Gemma 3)", "q_norm / k_norm"),
    "model.post_norms": ("RMSNorm after attention and after the MLP (Gemma 3)",
                         "post_attention_layernorm / post_feedforward_layernorm"),
    "model.norm_plus_one": ("norms scale by 1 + w (Gemma)", "Gemma3RMSNorm"),
    "model.mlp_act": ("gated MLP activation: silu (SwiGLU) or gelu_tanh (GeGLU)",
                      "hidden_act / hidden_activation"),
    "model.embed_scale": ("embeddings times sqrt(d_model) (Gemma)", "Gemma3TextScaledWordEmbedding"),
    "model.query_pre_attn_scalar": ("attention scores times its ** -0.5 (0: head_dim)",
                                    "query_pre_attn_scalar"),
    "model.attn_logit_softcap": ("attention scores soft-capped at this (0: off)",
                                 "attn_logit_softcapping"),
    "model.final_logit_softcap": ("output logits soft-capped at this (0: off)",
                                  "final_logit_softcapping"),
    "model.post_norms_only": ("norms after attention and the MLP only, none before (OLMo 2; "
                              "with post_norms)", "olmo2's layout"),
    "model.qk_norm_full": ("QK-norm over all heads' queries (keys) at once, not per head "
                           "(OLMo 2)", "q_norm / k_norm of size heads x head_dim"),
    "model.nope_interval": ("every n-th layer without RoPE (SmolLM3: 4; 0: every layer has "
                            "it)", "no_rope_layer_interval / no_rope_layers"),
    "model.tie_embeddings": ("output layer shares the embedding", "tie_word_embeddings"),
    "model.norm_eps": ("RMSNorm epsilon", "rms_norm_eps"),
    "model.max_len": ("longest sequence (prompt + response) the model takes",
                      "max_position_embeddings"),
    # layout
    "mesh.data": ("mesh axis `data`: replicated params, split batch (-1 = the rest)",
                  "trainer.nnodes (DDP) / —"),
    "mesh.fsdp": ("mesh axis `fsdp`: params and batch split (-1 = all remaining devices)",
                  "actor.fsdp_config / fsdp"),
    "mesh.tensor": ("mesh axis `tensor`: heads, MLP and vocab split",
                    "rollout.tensor_model_parallel_size / —"),
    "sharding_rules": ("logical axis -> mesh axes, for params and activations", "—"),
    "distributed.enabled": ("call jax.distributed.initialize (multi-host)",
                            "trainer.nnodes / accelerate launch"),
    "distributed.coordinator_address": ("host:port of process 0 (empty = auto-detect)",
                                        "— / main_process_ip"),
    "distributed.num_processes": ("processes (with coordinator_address)", "— / num_processes"),
    "distributed.process_id": ("this process's index (with coordinator_address)",
                               "— / machine_rank"),
    "distributed.initialization_timeout_s": ("seconds every process waits at start for all "
                                             "the others to join", "— / ddp_timeout"),
    "distributed.heartbeat_timeout_s": ("seconds without a heartbeat after which a process is "
                                        "declared dead and the others stop",
                                        "actor_rollout_ref.nccl_timeout / ddp_timeout"),
    "distributed.shutdown_timeout_s": ("seconds a finished process waits at exit for the others",
                                       "—"),
    # sampling
    "sampling.temperature": ("rollout sampling temperature (also the learner's log-prob "
                             "temperature)", "rollout.temperature / temperature"),
    "sampling.top_k": ("top-k sampling (0 = off)", "rollout.top_k / top_k"),
    "sampling.top_p": ("nucleus sampling (1 = off)", "rollout.top_p / top_p"),
    "sampling.max_prompt_len": ("longest prompt in tokens (longer rows are bad rows)",
                                "data.max_prompt_length / max_prompt_length"),
    "sampling.max_new_tokens": ("longest response in tokens",
                                "data.max_response_length / max_completion_length"),
    "sampling.eval_temperature": ("evaluation sampling temperature",
                                  "rollout.val_kwargs.temperature / —"),
    "sampling.prefill_chunk": ("prompt rows per prefill call (0 = all at once)", "—"),
    "sampling.pad_multiple": ("the sampler (training steps, stream calls, evaluations) "
                              "prefills each "
                              "batch's prompts at the longest one's length rounded up to a "
                              "multiple of this, not at max_prompt_len (few widths, few "
                              "compiles); 0 = max_prompt_len always", "—"),
    "sampling.draw": ("how a token is drawn: gumbel (Gumbel-max) or inverse_cdf (one uniform a "
                      "row; the same distribution, other tokens per seed, faster at a large "
                      "vocabulary)", "—"),
    "sampling.stop_strings": ("text that ends a response once it ends with it (matched as the "
                              "tokenizer encodes it; kept in the response, as a stop token "
                              "is); () = the template's (plain: a base model's next question, "
                              "\"\\nQuestion:\" or \"\\n\\nQuestion:\"; none "
                              "otherwise), ('',) = none",
                              "rollout.stop / — (generation_config stop_strings)"),
    # task
    "task.name": ("data (variant arg `task=`): families, embedded, files, tfds_embedded, "
                  "tfds_files", "—"),
    "task.reward": ("verifier (the task's answer check), reading (family task: the answer "
                    "under the family's right reading marker) or synthetic (first-token reward, "
                    "tests)", "reward_model.reward_manager / reward_funcs"),
    "task.answer": ("the answer the math verifier reads: boxed (the last \\boxed{}) or "
                    "last_number (the last number written: models that state a result but never "
                    "box it)", "reward function's extractor"),
    "task.template": ("prompt template: embedded, qwen_math, llama3_chat, chat (the "
                      "checkpoint's own Jinja chat template) or plain (a base model's "
                      "'Question: ...\\nAnswer:')",
                      "data.apply_chat_template / chat template"),
    "task.system_prompt": ("system message of the chat templates (\"\" = none: the template's "
                           "default)", "data.system_prompt / system message"),
    "task.few_shot_file": ("a text file written before every question of the plain template: "
                           "solved examples in its form, 'Question: ...\\nAnswer: ...\\n\\n' "
                           "('' = none)", "few-shot prompt / num_fewshot"),
    "task.min_level": ("embedded task: lowest difficulty level; family task: first family "
                       "number used (1-based)", "—"),
    "task.max_level": ("embedded task: highest difficulty level; family task: last family "
                       "number used", "—"),
    "task.train_size": ("generated tasks: training problems", "—"),
    "task.eval_size": ("generated tasks: held-out problems", "—"),
    "task.seed": ("generated tasks: generator seed", "—"),
    "task.family_set": ("family task: RL's families (rl, hard, every)", "—"),
    "task.files": ("task=files: comma-separated JSONL / JSON / Parquet paths or globs",
                   "data.train_files / train_dataset"),
    "task.eval_files": ("task=files: a separate eval set (empty = the hash-chosen 1/8 of "
                        "files)", "data.val_files / eval_dataset"),
    "task.data_dir": ("TFDS tasks: where the prepared dataset lives (empty = "
                      "~/tensorflow_datasets)", "—"),
    "task.field_map.question": ("column of the question (empty = detect the layout)",
                                "data.prompt_key / —"),
    "task.field_map.answer": ("column of the answer", "reward_model.ground_truth / —"),
    "task.field_map.solution": ("column of a worked solution (SFT, hints)", "—"),
    "task.on_bad_row": ("a malformed or too-long row: error (naming file and line) or skip",
                        "data.filter_overlong_prompts / —"),
    "task.verifier_workers": ("math verifier processes", "reward_model.workers / —"),
    "task.verifier_timeout": ("seconds per verified sample", "—"),
    # adaptive engine
    "adaptive.policy": ("collection policy: uniform, seq (Ada-Seq), est (Ada-Est), gvm, dapo, "
                        "knapsack (Knapsack-RL), vip (VIP), greso, pilot_commit, conformal",
                        "algorithm.filter_groups.enable (dapo) / —"),
    "adaptive.exit_rule": ("seq: when a prompt stops sampling: pos (k_pos positives) or "
                           "balance (k_pos and k_neg)", "—"),
    "adaptive.mode": ("engine: rounds (reference), refill (slots refilled as samples finish), "
                      "stream (prompts outlive a step)", "—"),
    "adaptive.k_pos": ("positives a prompt needs before it stops", "—"),
    "adaptive.k_neg": ("negatives a prompt needs before it stops (balance)", "—"),
    "adaptive.samples_per_round": ("seq: samples per round per active prompt (the budget is "
                                   "rounds x this)", "rollout.n (per round)"),
    "adaptive.max_rounds": ("seq: rounds at most", "—"),
    "adaptive.at_budget": ("seq: a prompt unresolved at its budget: keep or drop its group",
                           "—"),
    "adaptive.slots": ("decode slots (global)", "rollout.max_num_seqs / vllm max_num_seqs"),
    "adaptive.chunk_len": ("refill: decode steps between refills at most", "—"),
    "adaptive.select_order": ("which samples a pool keeps: generation order or random", "—"),
    "adaptive.min_pool": ("seq: a pool holds at least this many samples (0 = rl.n)", "—"),
    "adaptive.overcommit": ("refill: launch a sample if P(it is needed) >= 1 - overcommit",
                            "—"),
    # RL
    "rl.steps": ("RL steps (one prompt batch each)",
                 "trainer.total_training_steps / max_steps"),
    "rl.cost_budget": ("stop after the step whose cost (in rl.cost_unit) reaches this (0 = "
                       "off; rl.steps still caps the run): every arm run to the same total "
                       "cost", "—"),
    "rl.cost_unit": ("what rl.cost_budget and eval.every_cost count: samples (generated + "
                     "trained) or flop_tokens (generated tokens + 3 x trained tokens, a "
                     "compute budget for arms that train fewer tokens per sample)", "—"),
    "rl.prompts_per_step": ("prompts per step (B)", "data.train_batch_size / "
                            "generation_batch_size / num_generations"),
    "rl.n": ("samples kept per prompt (group size)",
             "actor_rollout_ref.rollout.n / num_generations"),
    "rl.advantage": ("advantage estimator: grpo, drgrpo, rloo, raft, liteppo, reinforce_pp, "
                     "pool (Ada-Seq's pool baseline)", "algorithm.adv_estimator / —"),
    "rl.std_normalise": ("pool: divide advantages by the pool's reward std",
                         "algorithm.norm_adv_by_std_in_grpo / scale_rewards"),
    "rl.objective": ("f of the pass rate the budgets (and optional weights) optimise: linear, "
                     "log, arcsin, power", "—"),
    "rl.objective_alpha": ("power objective's exponent", "—"),
    "rl.objective_weight": ("pool: weight advantages by f'(pass rate)", "—"),
    "rl.importance_correction": ("pool: importance weights for the balanced selection", "—"),
    "rl.ppo_epochs": ("passes over a step's samples", "actor.ppo_epochs / num_iterations"),
    "rl.minibatches": ("optimizer updates per epoch (each on rows / minibatches)",
                       "actor.ppo_mini_batch_size (= batch / minibatches) / "
                       "steps_per_generation"),
    "rl.microbatches": ("micro-batches a minibatch's gradient is accumulated over (memory)",
                        "actor.ppo_micro_batch_size_per_gpu / gradient_accumulation_steps"),
    "rl.daro": ("DARO: learned per-difficulty loss weights", "—"),
    "rl.daro_buckets": ("DARO difficulty buckets (0 = rl.n)", "—"),
    "rl.pad_multiple": ("the learner trims each step's rows to the batch's longest prompt and "
                        "completion, rounded up to a multiple of this (few shapes, few "
                        "compiles; long contexts want a larger one); 0 = every column",
                        "— / padding_free (TRL)"),
    "rl.share_prompts": ("the learner runs each prompt once per minibatch and continues its "
                         "samples from the prompt's keys and values (where a minibatch holds "
                         "at least 2 rows per prompt on average); False = every row whole",
                         "— (prefix sharing)"),
    "rl.inject_nan_step": ("tests: make this step's loss NaN (-1 = never)", "—"),
    "rl.hints": ("self-hinting on collapsed groups: none, sage, sage_light (needs a longer "
                 "max_prompt_len)", "—"),
    # loss
    "loss.clip_low": ("PPO ratio clip below: 1 - clip_low", "actor.clip_ratio_low / epsilon"),
    "loss.clip_high": ("PPO ratio clip above: 1 + clip_high (DAPO clip-higher)",
                       "actor.clip_ratio_high / epsilon_high"),
    "loss.dual_clip": ("dual-clip cap for negative advantages (0 = off)",
                       "actor.clip_ratio_c / —"),
    "loss.agg": ("loss aggregation: token_mean, seq_mean_token_mean, seq_mean_token_sum, "
                 "constant (Dr.GRPO)", "actor.loss_agg_mode / loss_type"),
    "loss.kl_coef": ("KL penalty to the reference policy = the base policy (SFT'd or "
                     "init_from); 0 = no reference model",
                     "actor.kl_loss_coef (use_kl_loss) / beta"),
    "loss.kl_type": ("KL estimator: k1, k2, k3", "actor.kl_loss_type (kl, mse, low_var_kl) / —"),
    "loss.kl_in_reward": ("subtract the KL from the reward instead of adding it to the loss",
                          "algorithm.use_kl_in_reward / —"),
    "loss.entropy_coef": ("entropy bonus", "actor.entropy_coeff / —"),
    "loss.decoupled": ("decoupled PPO for stale samples (AReaL): clip against the proximal "
                       "policy (the learner's params before this step's update), weight each "
                       "token by π_prox/π_behav (one extra forward per step; on-policy it "
                       "equals plain PPO): on, off, or auto = on for a stream that carries "
                       "prompts over (docs/results.md, Decoupled PPO)", "actor.use_decoupled_loss (AReaL) / —"),
    "loss.behav_cap": ("cap on decoupled PPO's weight π_prox/π_behav (0 = no cap, else >= 1)",
                       "actor.behav_imp_weight_cap (AReaL) / —"),
    "loss.credit_tokens": ("only the first k completion tokens carry the loss (0 = every "
                           "token): an ablation of sequence-level credit, e.g. k=1 credits a "
                           "family's reading marker alone (docs/results.md)", "—"),
    "loss.replay_coef": ("weight of the base's SFT corpus replayed in every update, a next-token "
                         "loss beside the policy's (the pretraining mix of PPO-ptx; 0 = off); on the "
                         "family task it holds the trained families' lines, not the transfer "
                         "controls (docs/results.md)",
                         "— / — (InstructGPT's ptx_coef)"),
    "loss.replay_rows": ("SFT rows replayed per update (micro-batched as the policy's rows: "
                         "rl.microbatches must divide it)", "—"),
    "loss.replay_skip": ("replay leaves out each target's first k tokens (the family task: 1, "
                         "its reading marker, the choice RL moves)", "—"),
    # optimizer
    "optim.lr": ("AdamW learning rate (constant after the linear warm-up)",
                 "actor.optim.lr / learning_rate"),
    "optim.warmup_steps": ("linear warm-up steps", "actor.optim.lr_warmup_steps / warmup_steps"),
    "optim.grad_clip": ("global gradient-norm clip", "actor.grad_clip / max_grad_norm"),
    "optim.weight_decay": ("AdamW weight decay", "actor.optim.weight_decay / weight_decay"),
    "optim.b1": ("Adam beta1", "actor.optim.betas[0] / adam_beta1"),
    "optim.b2": ("Adam beta2", "actor.optim.betas[1] / adam_beta2"),
    "optim.eps": ("Adam epsilon", "— / adam_epsilon"),
    "optim.daro_lr": ("DARO weights' learning rate (0 = optim.lr)", "—"),
    "optim.mu_dtype": ("AdamW's first moment in bfloat16 (\"\" = the params' dtype; the "
                       "second moment stays float32)", "— / optim_args (bnb, 8-bit)"),
    "optim.max_update_ratio": ("skip an update larger than this times the params (in norm; "
                               "a diverging lr; 0 = never)", "—"),
    "optim.max_skipped_steps": ("stop the run (exit 1) after this many skipped updates with none "
                                "applied in between (non-finite or oversized: divergence; 0 = "
                                "never)",
                                "—"),
    "optim.collapse_steps": ("the collapse window, in steps: a collapse is a rate in the "
                             "last this many steps under a quarter of the run's earlier rate "
                             "and improbably low were it unchanged (Fisher's exact test, "
                             "chance < 1e-4), for the rollouts' prompts with a right sample "
                             "and, where evaluated, the training-prompt accuracy's samples; "
                             "warned once, `collapsed` in the "
                             "metrics (0 = never watch; raise it for small batches)", "—"),
    "optim.stop_on_collapse": ("stop a collapsed run (exit 1) instead of only warning; "
                               "resumed, it stops again while collapsed", "—"),
    # SFT warm start
    "sft.steps": ("warm-start SFT steps before RL (0 = none)", "— / SFTConfig.max_steps"),
    "sft.batch_size": ("SFT batch size", "— / SFTConfig.per_device_train_batch_size"),
    "sft.lr": ("SFT learning rate", "— / SFTConfig.learning_rate"),
    "sft.warmup_steps": ("SFT warm-up steps", "— / SFTConfig.warmup_steps"),
    "sft.base_dir": ("use this SFT'd base instead of training one", "—"),
    "sft.careful_share": ("embedded task: share of SFT targets in the careful style", "—"),
    "sft.max_level": ("embedded task: SFT on levels up to this (0 = all)", "—"),
    "sft.checkpoint_every": ("SFT's mid-run checkpoints, so a kill resumes (0 = a tenth of "
                             "the run)", "— / SFTConfig.save_steps"),
    # eval, checkpoints, logs
    "eval.every": ("evaluate every this many steps (0 = never)",
                   "trainer.test_freq / eval_steps"),
    "eval.every_cost": ("also evaluate at the first step whose cost (in rl.cost_unit) passes "
                        "each multiple of this (0 = off): one cost grid for arms whose steps "
                        "cost differently", "—"),
    "eval.k": ("samples per eval prompt (avg@k, pass@k)", "rollout.val_kwargs.n / —"),
    "eval.prompts": ("held-out eval prompts", "— / (eval_dataset size)"),
    "eval.train_prompts": ("also evaluate on this many training prompts", "—"),
    "eval.batch_rows": ("samples the evaluation decodes at once (their caches are its memory: "
                        "at most the training sampler's rows keeps an evaluation within the "
                        "run's memory; fewer is slower)", "— / per_device_eval_batch_size"),
    "eval.dtype": ("the evaluation's compute dtype (empty: model.dtype's); the params stay "
                   "as trained: a float32 policy sampled in bfloat16 where that is faster",
                   "—"),
    "eval.draw": ("the evaluation's token draw (empty: sampling.draw's)", "—"),
    "checkpoint.every": ("checkpoint every this many steps (and at the end)",
                         "trainer.save_freq / save_steps"),
    "checkpoint.keep": ("checkpoints kept", "trainer.max_actor_ckpt_to_keep / "
                        "save_total_limit"),
    "checkpoint.allow_config_change": ("resume a workdir with a changed config",
                                       "— / (resume_from_checkpoint)"),
    "checkpoint.start_over_if_unreadable": ("no readable checkpoint: start at step 0 instead "
                                            "of stopping", "—"),
    "checkpoint.resume_without_metrics": ("resume intact checkpoints although metrics.jsonl "
                                          "lost records (deleted, emptied): those steps' "
                                          "metrics stay lost, cum_* go on from the checkpoint",
                                          "—"),
    "check.memory": ("refuse, before compiling, a run whose predicted memory on this host "
                     "(ada_jax/memory.py's estimate and the eval's rows) exceeds the "
                     "machine's, naming the largest part and its fields; False runs anyway",
                     "—"),
    "log.progress": ("progress bars", "— / disable_tqdm (inverse)"),
    "log.wandb": ("also log the metrics.jsonl scalars to Weights & Biases (process 0; "
                  "needs `pip install wandb`)", "trainer.logger / report_to"),
    "log.wandb_project": ("Weights & Biases project of log.wandb",
                          "trainer.project_name / WANDB_PROJECT"),
}


def _policy_settings():
    """The meanings the policy modules declare with their settings (collect.settings: the
    fields adaptive.<group>.<field>)."""
    from ada_jax import collect
    return {f"adaptive.{k}": (v.meaning, v.elsewhere) for k, v in collect.settings().items()}


FIELDS.update(_policy_settings())


def leaves(d: dict, prefix: str = ""):
    """(dotted field, value) of every leaf of a nested dict (a config as JSON), in order."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def config_fields(config) -> dict:
    """{dotted field: default} of a config, in its order."""
    return dict(leaves(json.loads(config.to_json_best_effort())))


def _cell(v) -> str:
    text = json.dumps(v) if not isinstance(v, str) else (repr(v) if v else "''")
    if len(text) > 40:
        text = text[:37] + "..."
    return "`" + text.replace("|", "\\|") + "`"


def reference(get_config) -> str:
    """docs/config.md from configs/base.py's get_config."""
    default = config_fields(get_config(""))
    pretrained = config_fields(get_config("model=qwen2_5_math_7b,task=files"))
    lines = [
        "# Config reference",
        "",
        "Every field of `configs/base.py` (generated by `python scripts/tools/config_reference.py > "
        "docs/config.md`;",
        "`tests/test_config_doc.py` keeps it in sync). Set one with `--config.<field>=value`; "
        "choose variants",
        "with `--config=configs/base.py:algo=…,model=…,task=…,smoke=True`. Defaults are the "
        "default run's",
        "(tiny model, family task, Ada-Seq-balance); *pretrained* gives the value of "
        "`model=qwen2_5_math_7b,task=files`",
        "where it differs (model fields aside). On a workdir with a `config.json`, that "
        "file is the config",
        "and the flags go on top (`ada_jax/run_config.py`). The verl / TRL column names the "
        "nearest setting of",
        "verl (`actor_rollout_ref.` / `algorithm.` / `data.` / `trainer.` prefixes shortened) "
        "and of TRL's `GRPOConfig`.",
        "",
        "| field | default | meaning | verl / TRL |",
        "|---|---|---|---|",
    ]
    for name, value in default.items():
        meaning, other = FIELDS[name]
        cell = _cell(value)
        if not name.startswith("model.") and pretrained.get(name, value) != value:
            cell += f"; pretrained {_cell(pretrained[name])}"
        lines.append(f"| `{name}` | {cell} | {meaning} | {other} |")
    return "\n".join(lines) + "\n"
