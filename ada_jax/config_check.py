"""Config validation: every bad value is rejected with the field's dotted name, before compiling.
Also: which fields may change when a workdir is resumed, and clear errors for unknown
command-line fields."""
import difflib
import json
import logging
import math
import re
import sys
from typing import Any

from ada_jax.tasks import TASKS, task_of
from ada_jax.model import VARIANT_FIELDS
from ada_jax.sampling import DRAWS
from ada_jax.tasks.embedded import MAX_LEVEL

log = logging.getLogger(__name__)

_CHOICES = {
    "model.param_dtype": ("float32", "bfloat16"),
    "model.dtype": ("float32", "bfloat16", "auto"),
    "optim.mu_dtype": ("", "bfloat16"),
    "model.rope_scaling": ("none", "llama3", "linear", "yarn"),
    "model.mlp_act": ("silu", "gelu_tanh"),
    "task.name": TASKS,
    "task.reward": ("verifier", "reading", "synthetic"),
    "task.answer": ("boxed", "last_number"),
    "task.template": ("embedded", "qwen_math", "llama3_chat", "chat", "plain"),
    "task.on_bad_row": ("error", "skip"),
    "task.family_set": ("rl", "hard", "every"),
    "sampling.draw": DRAWS,
    "eval.dtype": ("", "float32", "bfloat16", "auto"),
    "eval.draw": ("",) + DRAWS,
    "adaptive.exit_rule": ("none", "pos", "balance"),
    "adaptive.mode": ("rounds", "refill", "stream"),
    "adaptive.at_budget": ("keep", "drop"),
    "adaptive.select_order": ("generation", "random"),
    "rl.advantage": ("grpo", "drgrpo", "rloo", "raft", "liteppo", "reinforce_pp", "pool"),
    "rl.objective": ("linear", "log", "arcsin", "power"),
    "rl.hints": ("none", "sage", "sage_light"),
    "rl.cost_unit": ("samples", "flop_tokens"),
    "loss.agg": ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant"),
    "loss.kl_type": ("k1", "k2", "k3"),
    "loss.decoupled": ("auto", "on", "off"),
}
_POSITIVE_INTS = (
    "model.vocab_size", "model.d_model", "model.n_layers", "model.n_heads", "model.n_kv_heads",
    "model.d_ff", "model.head_dim", "model.max_len", "sampling.max_prompt_len",
    "sampling.max_new_tokens", "rl.steps", "rl.prompts_per_step", "rl.n", "rl.ppo_epochs",
    "rl.minibatches", "rl.microbatches", "adaptive.samples_per_round", "adaptive.max_rounds",
    "adaptive.slots", "adaptive.chunk_len", "eval.k", "eval.prompts", "eval.batch_rows",
    "checkpoint.keep", "checkpoint.every", "model.rope_original_max_len", "sft.batch_size",
    "task.train_size", "task.eval_size", "task.verifier_workers", "loss.replay_rows",
)
_NON_NEGATIVE_INTS = (  # step counts and cadences (0 = none / off), counts
    "optim.warmup_steps", "sft.steps", "sft.warmup_steps", "sft.checkpoint_every", "eval.every",
    "eval.train_prompts", "eval.every_cost", "rl.cost_budget",
    "sampling.top_k", "adaptive.k_pos", "adaptive.k_neg", "rl.daro_buckets",
    "optim.max_skipped_steps", "loss.credit_tokens", "rl.pad_multiple", "loss.replay_skip",
    "sampling.pad_multiple",
)
_NON_NEGATIVE = (
    "sampling.temperature", "loss.clip_high", "loss.kl_coef", "loss.entropy_coef", "optim.lr",
    "adaptive.overcommit", "sampling.prefill_chunk", "optim.daro_lr",
    "sampling.eval_temperature", "optim.weight_decay", "loss.dual_clip",
    "optim.max_update_ratio", "loss.behav_cap", "loss.replay_coef",
)
# Finite and > 0. optim.grad_clip = 0 is not "off": every update is clipped to 0 (NaN at a zero
# gradient); optim.eps = 0 divides 0 by 0 where a gradient is 0.
_POSITIVE = (
    "optim.eps", "optim.grad_clip", "sft.lr", "model.rope_base", "model.norm_eps",
    "model.rope_scaling_factor", "model.rope_low_freq_factor", "model.rope_high_freq_factor",
    "task.verifier_timeout", "rl.objective_alpha", "model.yarn_beta_fast", "model.yarn_beta_slow",
    "model.yarn_attention_factor",
)
# name: (low, high, whether high itself is allowed); low is allowed.
_IN_RANGE = {
    "optim.b1": (0, 1, False),  # Adam's moment decay rates
    "optim.b2": (0, 1, False),
    "loss.clip_low": (0, 1, False),  # the ratio's lower clip 1 - clip_low stays > 0
}
_STRINGS = ("model.init_from", "model.tokenizer", "model.eos_token", "model.pad_token",
            "task.system_prompt", "task.few_shot_file",
            "task.files", "task.eval_files", "task.data_dir")

# The model variants sized for the generated tasks (their own small tokenizers); every other
# model (configs/base.py PRETRAINED, model=hf) is a real language model and needs real data.
TOY_MODELS = ("tiny", "small")
_FILE_TASKS, _TOY_TASKS = ("files", "tfds_files"), ("embedded", "families", "tfds_embedded")
_BOOLS = ("checkpoint.allow_config_change", "checkpoint.start_over_if_unreadable",
          "rl.share_prompts")
# Collapse detection (ada_jax/collapse.py); resuming a workdir whose metrics.jsonl is lost.
_NON_NEGATIVE_INTS += ("optim.collapse_steps",)
_BOOLS += ("optim.stop_on_collapse", "checkpoint.resume_without_metrics", "check.memory")
# Seeds: jax.random.key wraps any other value silently (-1 and 2**32 - 1 give one key, 2**32
# and 0 another) and the data order's numpy generator refuses a negative one at step 1.
_SEEDS = ("seed", "task.seed")


# The flat names of the policy settings that older runs' config.json files hold, each the
# group's field now: adaptive.<group>_<field> is adaptive.<group>.<field> (Pilot-Commit's were
# pc_<field>). Refused on the command line naming the new field (`unknown_field`), moved into
# their groups when such a file is read (`nest_flat`, run_config.read_saved).
_FLAT_PREFIX = {"pilot_commit": "pc"}
FORMER = {}


def _policy_settings() -> None:
    """The policy names and the settings each policy module declares (ada_jax/collect.py:
    POLICIES, `settings`) into the tables above, by each setting's kind; what involves several
    fields is the module's own `check` (run by validate through `collect.check`)."""
    global _POSITIVE_INTS, _POSITIVE, _NON_NEGATIVE, _BOOLS
    from ada_jax import collect
    _CHOICES["adaptive.policy"] = tuple(n for n in collect.POLICIES
                                        if n not in ("stream", "hints"))  # those are modes
    for group, fields in collect.groups().items():
        FORMER.update({f"adaptive.{_FLAT_PREFIX.get(group, group)}_{k}": f"adaptive.{group}.{k}"
                       for k in fields})
    for name, s in collect.settings().items():
        f = f"adaptive.{name}"
        if s.kind == "positive_int":
            _POSITIVE_INTS += (f,)
        elif s.kind == "positive":
            _POSITIVE += (f,)
        elif s.kind == "non_negative":
            _NON_NEGATIVE += (f,)
        elif s.kind == "bool":
            _BOOLS += (f,)
        elif s.kind in ("unit", "open_unit"):
            _IN_RANGE[f] = (0, 1, s.kind == "unit")
        elif s.kind.startswith("choice:"):
            _CHOICES[f] = tuple(s.kind[len("choice:"):].split("/"))


_policy_settings()


def _get(config, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def _finite(v) -> bool:
    """A real int or float, not NaN or ±inf (True / False are not numbers here)."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


# The architecture fields model=hf reads from init_from's config.json (max_len: only while 0).
HF_FIELDS = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "head_dim",
             "rope_base", "qkv_bias", "tie_embeddings", "norm_eps", "rope_scaling",
             "rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor",
             "rope_original_max_len", *VARIANT_FIELDS)
HF_SIZES = HF_FIELDS[:7]  # 0 until read: a size set on the command line is checked, not replaced


def resolve_hf(config, overrides_pending: bool = False) -> bool:
    """model=hf: fill config.model's architecture from config.model.init_from's config.json (and
    max_len, while 0, from its max_position_embeddings), and task.template / model.eos_token /
    model.extra_eos_tokens, while empty, from the checkpoint's own chat template and eos tokens
    (tokenizer.checkpoint_chat), else, without a template, from its family
    (tokenizer.CHAT_FAMILIES); extra_eos_tokens ('',) (the command line's '') means none. A size
    (HF_SIZES) set on the command line must equal the checkpoint's. Idempotent; returns whether
    the model is known (False only for model=hf without init_from while overrides_pending)."""
    m = config.model
    if m.name != "hf":
        return True
    if not m.init_from:
        if overrides_pending:
            return False
        raise ValueError("config.model.init_from is empty: model=hf takes the architecture from "
                         "a Hugging Face model folder; pass --config.model.init_from=/path/to/"
                         "folder (with config.json, *.safetensors and tokenizer.json)")
    import os
    from ada_jax import convert, tokenizer
    path = os.path.join(m.init_from, "config.json")
    try:
        hf = convert.read_hf_config(m.init_from)
        got = convert.model_config_from_hf(hf, source=path)
    except (OSError, ValueError) as e:  # the folder's own error, with the field that named it
        raise type(e)(f"config.model.init_from={m.init_from!r}: {e}") from None
    for name in HF_FIELDS:
        value, have = getattr(got, name), m[name]
        if name in HF_SIZES and have and have != value:
            raise ValueError(f"config.model.{name}={have!r} but {path} gives {value!r}: model=hf "
                             f"takes the architecture from the checkpoint; drop the override")
        m[name] = value
    if not m.max_len:
        m.max_len = got.max_len
    if not (config.task.template and m.eos_token and m.extra_eos_tokens):
        tok_dir = m.tokenizer or m.init_from
        tok_dir = tok_dir if os.path.isdir(tok_dir) else os.path.dirname(tok_dir)
        chat = (tokenizer.checkpoint_chat(tok_dir)
                if os.path.exists(os.path.join(tok_dir, "tokenizer.json")) else None)
        family = chat or tokenizer.CHAT_FAMILIES[convert.text_config(hf)["model_type"]]
        if not config.task.template:
            config.task.template = family["template"]
        if not m.eos_token:
            m.eos_token = family["eos_token"]
        if not m.extra_eos_tokens:
            m.extra_eos_tokens = family["extra_eos_tokens"]
    return True


def validate(config, overrides_pending: bool = False) -> None:
    """Raise ValueError naming the first offending field. Call after command-line overrides
    (get_config calls it before them with overrides_pending: model=hf's init_from may still
    come). With model=hf, first fills the architecture from the checkpoint (resolve_hf); until
    init_from is known there is nothing to check yet (the call after the overrides checks)."""
    if not resolve_hf(config, overrides_pending):
        return
    for name, choices in _CHOICES.items():
        if _get(config, name) not in choices:
            raise ValueError(f"config.{name}={_get(config, name)!r}: choose from {choices}")
    for name in _POSITIVE_INTS:
        v = _get(config, name)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:  # True is an int
            raise ValueError(f"config.{name}={v!r}: must be a positive integer")
    for name in _NON_NEGATIVE_INTS:
        v = _get(config, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"config.{name}={v!r}: must be an integer >= 0")
    for name in _NON_NEGATIVE:  # NaN passes a plain `< 0` test
        v = _get(config, name)
        if not _finite(v) or v < 0:
            raise ValueError(f"config.{name}={v!r}: must be a finite number >= 0")
    for name in _POSITIVE:
        v = _get(config, name)
        if not _finite(v) or v <= 0:
            raise ValueError(f"config.{name}={v!r}: must be a finite number > 0")
    for name, (low, high, closed) in _IN_RANGE.items():
        v = _get(config, name)
        if not _finite(v) or not (low <= v <= high if closed else low <= v < high):
            raise ValueError(f"config.{name}={v!r}: must be in "
                             f"[{low}, {high}{']' if closed else ')'}")
    if not isinstance(config.sampling.prefill_chunk, int):
        raise ValueError(f"config.sampling.prefill_chunk={config.sampling.prefill_chunk!r}: "
                         f"must be an integer (rows per prefill call, 0 = all)")
    for name in _STRINGS:
        if not isinstance(_get(config, name), str):
            raise ValueError(f"config.{name}={_get(config, name)!r}: must be a string")
    for name in _BOOLS:
        if not isinstance(_get(config, name), bool):
            raise ValueError(f"config.{name}={_get(config, name)!r}: must be True or False")
    for name in _SEEDS:
        v = _get(config, name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2 ** 32:
            raise ValueError(f"config.{name}={v!r}: must be an integer in [0, 2**32 - 1]")
    m = config.model
    extra = m.extra_eos_tokens
    if (not isinstance(extra, (tuple, list)) or not all(isinstance(t, str) for t in extra)
            or ("" in extra and len(extra) > 1)):
        raise ValueError(f"config.model.extra_eos_tokens={extra!r}: must be a tuple of "
                         f"token strings, or '' for none")
    if m.param_dtype == "bfloat16" and config.optim.lr < 1e-4:
        log.warning("config.model.param_dtype='bfloat16' with config.optim.lr=%g: bf16 "
                        "weights round most updates this small away; use float32 params "
                        "(with dtype='bfloat16' compute)", config.optim.lr)
    if m.n_heads % m.n_kv_heads:
        raise ValueError(f"config.model.n_heads={m.n_heads} must be a multiple of "
                         f"config.model.n_kv_heads={m.n_kv_heads}")
    if m.head_dim % 2:
        raise ValueError(f"config.model.head_dim={m.head_dim} must be even (RoPE)")
    if m.rope_scaling == "llama3" and m.rope_high_freq_factor <= m.rope_low_freq_factor:
        raise ValueError(f"config.model.rope_high_freq_factor={m.rope_high_freq_factor!r} must "
                         f"exceed config.model.rope_low_freq_factor={m.rope_low_freq_factor!r}")
    t = config.task
    if t.name in ("embedded", "tfds_embedded") and not (
            isinstance(t.min_level, int) and isinstance(t.max_level, int)
            and 1 <= t.min_level <= t.max_level <= MAX_LEVEL):
        raise ValueError(f"config.task.min_level={t.min_level!r}, config.task.max_level="
                         f"{t.max_level!r}: need integers 1 <= min_level <= max_level <= "
                         f"{MAX_LEVEL}")
    if t.reward == "reading" and t.name != "families":
        raise ValueError(f"config.task.reward='reading' checks the family task's reading marker; "
                         f"task {t.name!r} has none: use 'verifier'")
    if t.answer != "boxed" and not (t.reward == "verifier" and task_of(config).host_verifier):
        raise ValueError(f"config.task.answer={t.answer!r} is read by the math verifier of the "
                         f"math-file tasks (files, tfds_files with task.reward=verifier); task "
                         f"{t.name!r} with reward {t.reward!r} scores the boxed answer: leave "
                         f"task.answer='boxed'")
    if t.name == "families":
        from ada_jax.tasks.families import FAMILIES
        if not (isinstance(t.min_level, int) and isinstance(t.max_level, int)
                and 1 <= t.min_level <= t.max_level <= len(FAMILIES)):
            raise ValueError(f"config.task.min_level={t.min_level!r}, config.task.max_level="
                             f"{t.max_level!r}: the family task's family numbers, need integers "
                             f"1 <= min_level <= max_level <= {len(FAMILIES)}")
    if 0 < config.loss.behav_cap < 1:
        raise ValueError(f"config.loss.behav_cap={config.loss.behav_cap!r}: must be 0 (no cap) or "
                         ">= 1 (a cap below 1 shrinks every on-policy token's weight)")
    if 0 < config.loss.dual_clip <= 1:
        raise ValueError(f"config.loss.dual_clip={config.loss.dual_clip!r}: must be 0 (off) or "
                         f"> 1 (the cap on -A·ratio for A < 0 must lie above the clipped loss)")
    s = config.sampling
    if not 0.0 < s.top_p <= 1.0:
        raise ValueError(f"config.sampling.top_p={s.top_p!r}: must be in (0, 1]")
    if s.max_prompt_len + s.max_new_tokens > m.max_len:
        raise ValueError(
            f"config.sampling.max_prompt_len + max_new_tokens = "
            f"{s.max_prompt_len + s.max_new_tokens} exceeds config.model.max_len={m.max_len}")
    a = config.adaptive
    if a.exit_rule == "balance" and (a.k_pos < 1 or a.k_neg < 1):
        raise ValueError("config.adaptive.k_pos and k_neg must be >= 1 for exit_rule='balance'")
    if a.exit_rule == "pos" and a.k_pos < 1:
        raise ValueError("config.adaptive.k_pos must be >= 1 for exit_rule='pos'")
    if isinstance(a.min_pool, bool) or not isinstance(a.min_pool, int) or a.min_pool < 0:
        raise ValueError(f"config.adaptive.min_pool={a.min_pool!r}: must be an integer >= 0 "
                         f"(0 = rl.n)")
    if a.policy == "seq" and 0 < a.min_pool < config.rl.n:
        log.warning("config.adaptive.min_pool=%d < config.rl.n=%d: pools that stop early "
                        "give kept groups of fewer than n samples", a.min_pool, config.rl.n)
    from ada_jax import collect
    collect.check(config)  # each policy module's own check of its settings
    if a.overcommit > 1:
        raise ValueError(f"config.adaptive.overcommit={a.overcommit!r}: must be in [0, 1] "
                         f"(a tolerated probability that a launched sample is wasted)")
    s = config.sft
    if isinstance(s.careful_share, bool) or not isinstance(s.careful_share, (int, float)) or \
            not 0 <= s.careful_share <= 1:
        raise ValueError(f"config.sft.careful_share={s.careful_share!r}: must be in [0, 1] (the "
                         f"share of SFT targets in the careful style)")
    if isinstance(s.max_level, bool) or not isinstance(s.max_level, int) or s.max_level < 0:
        raise ValueError(f"config.sft.max_level={s.max_level!r}: must be an integer >= 0 "
                         f"(0 = every level)")
    if config.rl.n < 2 and config.rl.advantage in ("grpo", "rloo", "drgrpo", "liteppo"):
        raise ValueError(f"config.rl.n={config.rl.n}: group estimators need n >= 2")
    if config.rl.hints != "none" and a.policy not in ("uniform", "seq"):
        raise ValueError(f"config.rl.hints={config.rl.hints!r} works with adaptive.policy "
                         f"'uniform' or 'seq', not {a.policy!r}")
    if a.mode == "stream" and (a.policy not in ("uniform", "seq") or config.rl.hints != "none"):
        raise ValueError(f"config.adaptive.mode='stream' works with adaptive.policy 'uniform' "
                         f"or 'seq' and no hints, not policy={a.policy!r}, "
                         f"hints={config.rl.hints!r}")
    for axis in ("data", "fsdp", "tensor"):
        v = config.mesh[axis]
        if not isinstance(v, int) or (v < 1 and v != -1):
            raise ValueError(f"config.mesh.{axis}={v!r}: must be a positive integer or -1")
    if [config.mesh[a] for a in ("data", "fsdp", "tensor")].count(-1) > 1:
        raise ValueError("config.mesh: at most one axis may be -1")
    if not overrides_pending:  # the command line may still set the task
        check_task(config)


def check_task(config) -> None:
    """Refuse data the run would silently ignore: task.files / eval_files without a file task
    (the run would train on the generated task), and a pretrained model on a generated task
    (a 7B model RL'd on the toy ladder, with a tokenizer that task was not built for)."""
    t, m = config.task, config.model
    for name in ("files", "eval_files"):
        if t.get(name) and t.name not in _FILE_TASKS:
            raise ValueError(
                f"config.task.{name}={t[name]!r} but config.task.name={t.name!r}, which does not "
                f"read files (the run would train on the generated task): pass the task=files "
                f"variant, e.g. --config=configs/base.py:task=files --config.task.{name}="
                f"{t[name]} (or task=tfds_files)")
    if t.get("data_dir") and not t.name.startswith("tfds_"):
        log.warning("config.task.data_dir=%r is read by the TFDS tasks only (tfds_files, "
                    "tfds_embedded), not by task.name=%r", t.data_dir, t.name)
    if m.name not in TOY_MODELS and t.name in _TOY_TASKS:
        raise ValueError(
            f"config.model.name={m.name!r} is a pretrained model but config.task.name={t.name!r} "
            f"is a generated toy task for the tiny models: give it math data, e.g. "
            f"--config=configs/base.py:model={m.name},task=files "
            f"--config.task.files=/data/deepscaler/deepscaler.json "
            f"--config.task.eval_files=/data/math500/test.jsonl "
            f"--config.task.field_map.question=problem --config.task.field_map.answer=answer "
            f"(docs/data.md 'Files', docs/scaling.md §4)")


# Fields that may differ from a workdir's config.json when it is resumed: run length, eval /
# log / checkpoint cadence, the hardware layout and memory knobs. Everything else changes what a
# step computes (or the shapes of the saved arrays), so a changed value is refused.
RESUMABLE = ("rl.steps", "rl.cost_budget", "eval.every", "eval.every_cost", "checkpoint", "log", "mesh", "distributed",
             "sharding_rules", "model.remat", "model.scan_layers", "rl.microbatches", "sampling.prefill_chunk",
             "sampling.pad_multiple",
             "task.verifier_workers", "optim.max_update_ratio", "optim.max_skipped_steps")
RESUMABLE += ("optim.collapse_steps", "optim.stop_on_collapse", "check.memory", "rl.cost_unit")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_changes(saved: dict, config) -> tuple[list, list]:
    """Fields that differ between a saved config.json (a dict) and `config`, leaving out
    RESUMABLE ones: (changed 'config.x: old -> new' lines, fields present in only one of them,
    e.g. added by a newer version of the code)."""
    old = _flatten(saved)
    new = _flatten(json.loads(config.to_json_best_effort()))
    free = lambda k: any(k == f or k.startswith(f + ".") for f in RESUMABLE)  # noqa: E731
    changed = [f"config.{k}: {old[k]!r} -> {new[k]!r}" for k in sorted(old.keys() & new.keys())
               if old[k] != new[k] and not free(k)]
    return changed, sorted(f"config.{k}" for k in old.keys() ^ new.keys() if not free(k))


def nest_flat(saved: dict) -> dict:
    """A saved config (config.json's dict) with the flat policy settings of older runs
    (FORMER: adaptive.knapsack_n_min) moved into their groups (adaptive.knapsack.n_min); a
    dict without them comes back as it is."""
    adaptive = saved.get("adaptive")
    flat = {k: v for k, v in adaptive.items() if f"adaptive.{k}" in FORMER} \
        if isinstance(adaptive, dict) else {}
    if not flat:
        return saved
    adaptive = {k: v for k, v in adaptive.items() if k not in flat}
    for k, v in flat.items():
        group, field = FORMER[f"adaptive.{k}"].split(".")[1:]
        adaptive[group] = {field: v, **adaptive.get(group, {})}  # a nested value wins
    return {**saved, "adaptive": adaptive}


def unknown_field(config, dotted: str):
    """For a dotted field that `config` lacks: an error naming it and the known fields of the
    deepest section that exists (for a former flat policy setting: its field now); None if the
    field exists."""
    if dotted in FORMER:
        return (f"config.{dotted} is now config.{FORMER[dotted]} (each policy's settings are "
                f"its group adaptive.<policy>): pass --config.{FORMER[dotted]}=…")
    node, seen = config, []
    for part in dotted.split("."):
        where = "config." + ".".join(seen) if seen else "config"
        if not hasattr(node, "keys"):
            return f"unknown field config.{dotted}: {where} is a value, not a section"
        if part not in node:
            close = difflib.get_close_matches(part, list(node.keys()), n=1, cutoff=0.6)
            guess = f" (did you mean config.{'.'.join(seen + close)}?)" if close else ""
            return (f"unknown field config.{dotted}: {where} has no field {part!r}{guess}; "
                    f"known fields of {where}: {', '.join(sorted(node.keys()))}")
        node, seen = node[part], seen + [part]
    return None


def _command_line_config(argv, default_spec: str):
    """The config of argv's `--config=file.py:args` (else default_spec), before overrides;
    the file's or its variant args' error as raised."""
    import importlib.util
    specs = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--config=")]
    path, _, arg = (specs[-1] if specs else default_spec).partition(":")  # absl's: the last
    module_spec = importlib.util.spec_from_file_location("_ada_jax_config", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg) if arg else module.get_config()


def unknown_override(argv, default_spec: str):
    """The error for the first `--config.x.y` in argv that the config lacks, or None. The config
    comes from argv's `--config=file.py:args`, else default_spec (None too when it fails)."""
    fields = [m.group(1) for a in argv[1:] if (m := re.match(r"--config\.([\w.]+)", a))]
    if not fields:
        return None
    try:
        config = _command_line_config(argv, default_spec)
    except Exception:  # a bad file or variant: refuse_bad_config reports it
        return None
    return next(filter(None, (unknown_field(config, f) for f in fields)), None)


def _refuse(line: str):
    print(f"ada_jax: the run stops: {line}", file=sys.stderr)
    raise SystemExit(1)


def refuse_bad_config(argv, default_spec: str) -> None:
    """Before absl defines the config flag (an entry script's import): a config file or
    variant arg that fails, or a `--config.x.y` the config lacks, ends the output on one line
    naming it and the fix, exit 1 (absl printed the first amid a traceback, then its own 'Pass
    --helpshort …' line, and ml_collections the second as a bare AttributeError: 'y')."""
    try:
        _command_line_config(argv, default_spec)
    except Exception as e:
        _refuse(f"{type(e).__name__}: {str(e).strip().splitlines()[0]}")
    if bad := unknown_override(argv, default_spec):
        _refuse(f"ValueError: {bad}")


def parse_flags(argv, default_spec: str) -> list:
    """absl's flag parsing for the entry scripts (`app.run(main, flags_parser=…)`): an override
    value of the wrong type ends the output on one line naming the field, the value, the type
    and an example, exit 1 (absl: its error, then 'Pass --helpshort …')."""
    from absl import flags
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        message = str(e)
    m = re.match(r"flag --config\.([\w.]+)=(.*?): (.*)", message, re.S)
    if not m:
        _refuse(f"ValueError: {message.strip().splitlines()[0]}")
    field, value, why = m.groups()
    default = _command_line_config(argv, default_spec)
    for part in field.split("."):
        default = default[part]
    if isinstance(default, bool):
        _refuse(f"ValueError: config.{field}={value!r} is not a bool: pass True or False")
    kind = type(default).__name__
    _refuse(f"ValueError: config.{field}={value!r} is not a{'n' * (kind[0] in 'aeiou')} {kind} "
            f"({why.splitlines()[0]}): pass e.g. --config.{field}={default}")
