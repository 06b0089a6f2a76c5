"""Hugging Face checkpoints -> the NNX Transformer, for the Qwen2/Qwen2.5/Qwen3, Llama-3, Mistral,
Phi-3, SmolLM3, OLMo 2 and 3, Gemma 2 and Gemma 3 (text) families; `hf_export` writes them
back.

Import streams: the model is created abstractly (`nnx.eval_shape`), its mesh shardings come from
`sharding.state_shardings`, and each safetensors tensor is read (one at a time, file by file),
converted to our layout and placed straight into its `NamedSharding`, so no device ever holds
more than its own shard. In a multi-host run every process reads the files and keeps only its
addressable shards.

Files are resolved as transformers resolves them: `model.safetensors`, else the index's
`weight_map`; any other *.safetensors file is ignored. Anything unreadable or inconsistent in the
folder raises one `CheckpointError` naming the file and the field or tensor.

Layouts (HF torch Linear weights are [out, in]): q/k/v [H*E, D] <-> [D, H, E]; o [D, H*E] <->
[H, E, D]; gate/up [F, D] <-> [D, F]; down [D, F] <-> [F, D]; lm_head [V, D] <-> [D, V];
q/k/v biases [H*E] <-> [H, E]; embeddings and norm scales unchanged. Gemma 3's
post_attention_layernorm is the norm after attention (ours: post_attn_norm), its
pre/post_feedforward_layernorm the norms around the MLP (mlp_norm, post_mlp_norm); Llama's
post_attention_layernorm is the norm before the MLP (mlp_norm).
"""
import contextlib
import dataclasses
import glob
import json
import logging
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import SafetensorError, safe_open

from ada_jax import model as model_lib
from ada_jax import sharding

log = logging.getLogger(__name__)

ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                 "phi3": "Phi3ForCausalLM", "olmo2": "Olmo2ForCausalLM",
                 "olmo3": "Olmo3ForCausalLM",
                 "smollm3": "SmolLM3ForCausalLM", "gemma2": "Gemma2ForCausalLM",
                 "gemma3_text": "Gemma3ForCausalLM"}
# What each family adds to Llama: ModelConfig fields it requires (True) or allows (False). A
# config with any other of FAMILY_FIELDS set, or without a required one, is not that family.
FAMILY_FIELDS = ("qkv_bias", "qk_norm", "post_norms", "norm_plus_one", "embed_scale",
                 "sliding_window", "query_pre_attn_scalar", "attn_logit_softcap",
                 "final_logit_softcap", "nope_interval", "post_norms_only", "qk_norm_full")
FAMILIES = {
    "llama": {},
    "qwen2": {"qkv_bias": True},  # q/k/v biases
    "qwen3": {"qk_norm": True},  # RMSNorm over each head's queries and keys
    "mistral": {"sliding_window": False},  # one window for every layer
    "smollm3": {"nope_interval": False},  # every n-th layer without RoPE
    # OLMo 2: norms after attention and the MLP instead of before; QK-norm over all heads
    "olmo2": {"post_norms": True, "post_norms_only": True, "qk_norm": True,
              "qk_norm_full": True},
    # OLMo 3: OLMo 2's, every 4th layer global and the others local (one RoPE base)
    "olmo3": {"post_norms": True, "post_norms_only": True, "qk_norm": True,
              "qk_norm_full": True, "sliding_window": True},
    # Phi-3: Llama's (or Mistral's one window) in fused q/k/v and gate/up tensors (`FUSED`)
    "phi3": {"sliding_window": False},
    # Gemma 2: norms after attention and the MLP, (1 + w) norms, scaled embeddings, every other
    # layer local (one RoPE base for all), soft-capped scores and logits
    "gemma2": {"post_norms": True, "norm_plus_one": True, "embed_scale": True,
               "sliding_window": False, "query_pre_attn_scalar": False,
               "attn_logit_softcap": False, "final_logit_softcap": False},
    "gemma3_text": {"qk_norm": True, "post_norms": True, "norm_plus_one": True,
                    "embed_scale": True, "sliding_window": False,
                    "query_pre_attn_scalar": False, "attn_logit_softcap": False,
                    "final_logit_softcap": False},
}
GEMMA = ("gemma2", "gemma3_text")
OLMO = ("olmo2", "olmo3")
# transformers' defaults where a Gemma config.json leaves a field out: every pattern-th layer
# global, the soft caps (Gemma 2's config class caps scores at 50 and logits at 30)
GEMMA_DEFAULTS = {"gemma2": dict(pattern=2, attn_logit_softcapping=50.0,
                                 final_logit_softcapping=30.0),
                  "gemma3_text": dict(pattern=6, attn_logit_softcapping=0.0,
                                      final_logit_softcapping=0.0)}
# config.json's activation -> ModelConfig.mlp_act
ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
# ModelConfig fields a caller may set when loading; everything else comes from config.json.
RUNTIME_FIELDS = ("dtype", "remat", "scan_layers", "max_len")
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DTYPES = ("float32", "bfloat16", "float16")
# config.json fields a load does not keep in ModelConfig (max_len is the runtime length), and the
# files beside it, that export copies from the source folder.
SOURCE_FIELDS = ("max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")
SOURCE_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja")
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some old checkpoints carry
# Families that store several of our tensors as one, rows stacked in this order: fused tensor
# -> its parts (read as `tensor_names`' separate tensors; written back as Llama's / Mistral's)
FUSED = {"phi3": {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj",
                                         "self_attn.v_proj"),
                  "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}}


class CheckpointError(ValueError):
    """A Hugging Face folder that cannot be imported as it is; the message names the file and
    the field or tensor."""


def _dtype(value, what: str) -> str:
    """The name of a float dtype we run in (DTYPES), else ValueError naming the argument."""
    try:
        name = jnp.dtype(value).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"{what}={value!r}: unknown or unsupported dtype; choose from {DTYPES}")
    return name


def hf_field(hf: dict, key: str, source: str, kind=int, default=None):
    """hf[key] as a positive int (or a float); default when missing or null, if there is one."""
    value = hf.get(key)
    if value is None:
        if default is None:
            raise CheckpointError(f"{source}: required field {key!r} is "
                                  f"{'null' if key in hf else 'missing'}")
        return default
    ok = (isinstance(value, (int, float)) if kind is float else
          isinstance(value, int) and value > 0) and not isinstance(value, bool)
    if not ok:
        raise CheckpointError(f"{source}: field {key!r}={value!r} is not "
                              f"{'a number' if kind is float else 'a positive integer'}")
    return kind(value)


def _sliding_layers(hf: dict, n_layers: int) -> list[int]:
    """The layers where transformers' Qwen2 attends within a sliding window: from
    max_window_layers on (or as layer_types says), and only with use_sliding_window."""
    if not hf.get("use_sliding_window") or hf.get("sliding_window") is None:
        return []
    types = hf.get("layer_types") or [
        "sliding_attention" if i >= hf.get("max_window_layers", 28) else "full_attention"
        for i in range(n_layers)]
    return [i for i, t in enumerate(types) if t == "sliding_attention"]


def _layer_pattern(hf: dict, n_layers: int, source: str, pattern: int) -> dict:
    """Gemma's and OLMo 3's local / global layers (layer_types, else every
    sliding_window_pattern-th layer global, default `pattern`) as ModelConfig fields;
    CheckpointError when they follow no such pattern."""
    if hf.get("use_bidirectional_attention"):
        raise CheckpointError(f"{source}: unsupported use_bidirectional_attention=True")
    types = hf.get("layer_types") or [
        "full_attention" if (i + 1) % hf.get("sliding_window_pattern", pattern) == 0 else
        "sliding_attention" for i in range(n_layers)]
    if len(types) != n_layers:
        raise CheckpointError(f"{source}: {len(types)} layer_types for {n_layers} layers")
    full = [i for i, t in enumerate(types) if t != "sliding_attention"]
    fields = dict(sliding_window=hf_field(hf, "sliding_window", source),
                  sliding_window_pattern=full[0] + 1 if full else 0)
    if list(model_lib.local_layers(model_lib.ModelConfig(
            1, 1, n_layers, 1, 1, 1, 1, **fields))) != [t == "sliding_attention" for t in types]:
        raise CheckpointError(f"{source}: layer_types {types} are not every n-th layer global")
    return fields


def _nope_interval(hf: dict, n_layers: int, source: str) -> int:
    """SmolLM3's layers without RoPE (no_rope_layers: 1 rotates, 0 does not; else every
    no_rope_layer_interval-th layer) as ModelConfig.nope_interval; CheckpointError when they
    are not every n-th layer."""
    n = hf_field(hf, "no_rope_layer_interval", source, default=4)
    flags = hf.get("no_rope_layers") or [int((i + 1) % n != 0) for i in range(n_layers)]
    if len(flags) != n_layers:
        raise CheckpointError(f"{source}: {len(flags)} no_rope_layers for {n_layers} layers")
    off = [i for i, f in enumerate(flags) if not f]
    interval = off[0] + 1 if off else 0
    if list(model_lib.rope_layers(model_lib.ModelConfig(
            1, 1, n_layers, 1, 1, 1, 1, nope_interval=interval))) != [bool(f) for f in flags]:
        raise CheckpointError(f"{source}: no_rope_layers {flags} are not every n-th layer")
    return interval


def _mistral_window(hf: dict, source: str, theta: float, rope: dict) -> dict:
    """Mistral's one sliding window, on every layer, as ModelConfig fields (local layers only,
    with the global RoPE base); CheckpointError for per-layer types or a window with RoPE
    scaling, which local layers do not apply."""
    if hf.get("layer_types"):
        raise CheckpointError(f"{source}: unsupported layer_types in a {hf.get('model_type')} "
                              "config (transformers applies its one window to every layer)")
    if rope:
        raise CheckpointError(f"{source}: unsupported rope scaling {rope['rope_scaling']!r} "
                              "with a sliding window")
    return dict(sliding_window=hf_field(hf, "sliding_window", source), sliding_window_pattern=0,
                rope_local_base=theta)


def _local_rope(hf: dict, source: str) -> dict:
    """The local (sliding-window) layers' RoPE parameters as transformers >= 5 writes them
    (Gemma 3, OLMo 3: `rope_parameters["sliding_attention"]`; {} without); CheckpointError for
    a scaled one (local layers rotate unscaled)."""
    local = (hf.get("rope_parameters") or {}).get("sliding_attention") or {}
    if local.get("rope_type", "default") != "default":
        raise CheckpointError(f"{source}: unsupported rope scaling {local['rope_type']!r} of "
                              "the sliding-window layers")
    return local


def _yarn(hf: dict, scaling: dict, factor: float, where: str) -> dict:
    """YaRN's ModelConfig fields as transformers reads them: the original context (a top-level
    original_max_position_embeddings first, as Phi-3 writes it, else the scaling's, else
    max_position_embeddings), the ramp's rotations (32 and 1 by default) and the attention
    factor (given, else from mscale / mscale_all_dim, else 0.1 ln(factor) + 1)."""
    def mscale(m: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
    original = (hf.get("original_max_position_embeddings")
                or scaling.get("original_max_position_embeddings")
                or hf_field(hf, "max_position_embeddings", where))
    attention = scaling.get("attention_factor")
    if attention is None:
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = mscale(m) / mscale(m_all) if m and m_all else mscale()
    return dict(rope_original_max_len=int(original),
                yarn_beta_fast=float(scaling.get("beta_fast") or 32.0),
                yarn_beta_slow=float(scaling.get("beta_slow") or 1.0),
                yarn_truncate=bool(scaling.get("truncate", True)),
                yarn_attention_factor=float(attention))


def _rope(hf: dict, source: str) -> tuple[float, dict | None]:
    """(rope_theta, scaling dict or None) from either config.json format: Hub checkpoints use
    `rope_theta` + `rope_scaling`, transformers >= 5 writes one `rope_parameters` dict (Gemma 3:
    one per layer type; this reads the global layers', "full_attention")."""
    params = dict(hf.get("rope_parameters") or {})
    if "full_attention" in params:
        params = dict(params["full_attention"] or {})
    theta = hf_field(params, "rope_theta", f"{source} rope_parameters", float,
                     hf_field(hf, "rope_theta", source, float, 10_000.0))
    params.pop("rope_theta", None)
    scaling = hf.get("rope_scaling") or params or None
    if scaling and scaling.get("rope_type", scaling.get("type")) in (None, "default"):
        scaling = None
    return theta, scaling


# transformers' Gemma3TextConfig defaults: a multimodal Gemma 3 config.json (the Hub's
# gemma-3-4b and up) lists in its text_config only the fields that differ from them.
GEMMA3_TEXT_DEFAULTS = dict(
    vocab_size=262_208, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
    rms_norm_eps=1e-6, max_position_embeddings=131_072, rope_theta=1_000_000.0,
    rope_local_base_freq=10_000.0, query_pre_attn_scalar=256, sliding_window=4096,
    sliding_window_pattern=6, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)
# A multimodal checkpoint's tensors: the language model's under these prefixes (transformers'
# two layouts), the vision tower's and projector's beside them (not loaded).
TEXT_PREFIXES = {"language_model.model.": "model.", "language_model.lm_head.": "lm_head.",
                 "model.language_model.": "model."}
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                   "model.multi_modal_projector.")


def text_config(hf: dict) -> dict:
    """config.json's language model: a multimodal Gemma 3 config's text_config (its omitted
    fields at Gemma3TextConfig's defaults), else hf."""
    if isinstance(hf.get("text_config"), dict):
        text = hf["text_config"]
        return {**GEMMA3_TEXT_DEFAULTS, **text,
                "model_type": text.get("model_type", "gemma3_text")}
    return hf


def text_tensor_names(names) -> dict[str, str]:
    """A multimodal checkpoint's language-model tensors: {text model name (model.…,
    lm_head.…): stored name}; vision tensors left out. Names outside both kinds stay as they
    are (and are refused later as unexpected)."""
    out = {}
    for name in names:
        if name.startswith(VISION_PREFIXES):
            continue
        prefix = next((p for p in TEXT_PREFIXES if name.startswith(p)), None)
        out[name if prefix is None else TEXT_PREFIXES[prefix] + name[len(prefix):]] = name
    return out


def model_config_from_hf(hf: dict, *, param_dtype: str = "float32", source: str = "config.json",
                         **overrides) -> model_lib.ModelConfig:
    """ModelConfig for a Hugging Face config.json dict (read from `source`, named in errors);
    CheckpointError for a missing or bad field or a variant we cannot run."""
    hf = text_config(hf)
    model_type = hf.get("model_type")
    if model_type not in ARCHITECTURES:
        raise CheckpointError(f"{source}: unsupported architecture model_type={model_type!r} "
                              f"({hf.get('architectures')}); supported: {sorted(ARCHITECTURES)}")
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "silu"
    if act not in ACTIVATIONS:
        raise CheckpointError(f"{source}: unsupported hidden_act={act!r}; supported: "
                              f"{sorted(ACTIVATIONS)}")
    if hf.get("mlp_bias"):
        raise CheckpointError(f"{source}: unsupported mlp_bias=True")
    olmo = model_type in OLMO
    if model_type in ("llama", "qwen3", "smollm3") + OLMO and hf.get("attention_bias"):
        raise CheckpointError(f"{source}: unsupported attention_bias=True ({model_type} then "
                              "has an o_proj bias too, which this model lacks)")
    bad = sorted(set(overrides) - set(RUNTIME_FIELDS))
    if bad:
        raise ValueError(f"{bad} come from config.json; only {RUNTIME_FIELDS} can be overridden")
    param_dtype = _dtype(param_dtype, "param_dtype")
    if "dtype" in overrides:
        overrides["dtype"] = _dtype(model_lib.compute_dtype(overrides["dtype"]), "dtype")
    n_layers = hf_field(hf, "num_hidden_layers", source)
    gemma, mistral = model_type in GEMMA, model_type in ("mistral", "phi3")
    window = [] if gemma or mistral or olmo else _sliding_layers(hf, n_layers)
    if window:
        raise CheckpointError(f"{source}: unsupported sliding window attention in layers "
                              f"{window} (use_sliding_window=True, sliding_window="
                              f"{hf['sliding_window']}); full attention only")
    theta, scaling = _rope(hf, source)
    partial = (hf.get("rope_parameters") or {}).get(
        "partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise CheckpointError(f"{source}: unsupported partial_rotary_factor={partial} (RoPE on "
                              "part of each head; this model rotates all of it)")
    rope = {}
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        where = f"{source} rope_scaling"
        if kind not in ("llama3", "linear", "yarn"):
            raise CheckpointError(f"{source}: unsupported rope scaling {kind!r} (only llama3, "
                                  f"linear, yarn)")
        rope = dict(rope_scaling=kind,
                    rope_scaling_factor=hf_field(scaling, "factor", where, float))
        if kind == "llama3":
            rope.update(
                rope_low_freq_factor=hf_field(scaling, "low_freq_factor", where, float),
                rope_high_freq_factor=hf_field(scaling, "high_freq_factor", where, float),
                rope_original_max_len=hf_field(scaling, "original_max_position_embeddings", where))
        if kind == "yarn":
            rope.update(_yarn(hf, scaling, rope["rope_scaling_factor"], where))
    d_model = hf_field(hf, "hidden_size", source)
    heads = hf_field(hf, "num_attention_heads", source)
    fields = dict(
        vocab_size=hf_field(hf, "vocab_size", source), d_model=d_model, n_layers=n_layers,
        n_heads=heads, n_kv_heads=hf_field(hf, "num_key_value_heads", source, default=heads),
        d_ff=hf_field(hf, "intermediate_size", source),
        head_dim=hf_field(hf, "head_dim", source, default=d_model // heads), rope_base=theta,
        qkv_bias=model_type == "qwen2", qk_norm=olmo or model_type in ("qwen3", "gemma3_text"),
        qk_norm_full=olmo, post_norms=olmo, post_norms_only=olmo,
        tie_embeddings=bool(hf.get("tie_word_embeddings", gemma)),
        norm_eps=hf_field(hf, "rms_norm_eps", source, float, 1e-6),
        max_len=hf_field(hf, "max_position_embeddings", source, default=4096),
        param_dtype=param_dtype, dtype=param_dtype, mlp_act=ACTIVATIONS[act], **rope)
    if gemma:
        defaults, local = GEMMA_DEFAULTS[model_type], _local_rope(hf, source)
        if model_type == "gemma2" and rope:
            raise CheckpointError(f"{source}: unsupported rope scaling {rope['rope_scaling']!r} "
                                  "in a gemma2 config (its local layers share the global RoPE)")

        def cap(key):  # null: no cap; missing: the family's default
            return (hf_field(hf, key, source, float, 0.0) if key in hf else defaults[key])
        fields.update(
            _layer_pattern(hf, n_layers, source, defaults["pattern"]), post_norms=True,
            norm_plus_one=True, embed_scale=True,
            rope_local_base=theta if model_type == "gemma2" else hf_field(
                local, "rope_theta", source, float, hf_field(
                    hf, "rope_local_base_freq", source, float, 10_000.0)),
            query_pre_attn_scalar=hf_field(hf, "query_pre_attn_scalar", source, float, 256.0),
            attn_logit_softcap=cap("attn_logit_softcapping"),
            final_logit_softcap=cap("final_logit_softcapping"))
    if mistral and hf.get("sliding_window") is not None:
        fields.update(_mistral_window(hf, source, theta, rope))
    if model_type == "smollm3":
        fields.update(nope_interval=_nope_interval(hf, n_layers, source))
    if model_type == "olmo3" and hf.get("sliding_window") is not None:
        fields.update(_layer_pattern(hf, n_layers, source, 4), rope_local_base=hf_field(
            _local_rope(hf, source), "rope_theta", source, float, theta))
    return model_lib.ModelConfig(**{**fields, **overrides})


def architecture(cfg: model_lib.ModelConfig) -> dict:
    """The fields a checkpoint fixes (everything but dtypes, remat and max_len): compare a
    loaded checkpoint's config with config.model before training."""
    skip = RUNTIME_FIELDS + ("param_dtype",)
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in skip}


def tensor_names(cfg: model_lib.ModelConfig) -> dict[str, tuple[tuple, str, int | None]]:
    """HF tensor name -> (our state path, layout kind, layer), in HF's order. A layer's tensor
    is slice `layer` of our stacked [L, …] weight (`layer_stack.stack_layers`); layer is None
    for the others."""
    names = {"model.embed_tokens.weight": (("embed",), "copy", None)}
    for i in range(cfg.n_layers):
        pre, path = f"model.layers.{i}.", ("blocks",)
        if not cfg.post_norms_only:
            names[pre + "input_layernorm.weight"] = (path + ("attn_norm", "scale"), "copy", i)
        if cfg.qk_norm:  # each head's [E], or (OLMo 2) all heads' [H*E] <-> [H, E]
            for p in "qk":
                names[pre + f"self_attn.{p}_norm.weight"] = (
                    path + ("attn", f"{p}_norm", "scale"), "flat" if cfg.qk_norm_full else "copy",
                    i)
        for p in "qkv":
            names[pre + f"self_attn.{p}_proj.weight"] = (path + ("attn", p), "in", i)
            if cfg.qkv_bias:
                names[pre + f"self_attn.{p}_proj.bias"] = (path + ("attn", f"{p}_bias"), "flat",
                                                           i)
        names[pre + "self_attn.o_proj.weight"] = (path + ("attn", "o"), "out", i)
        norms = ({"post_attention_layernorm": "post_attn_norm", "pre_feedforward_layernorm":
                  "mlp_norm", "post_feedforward_layernorm": "post_mlp_norm"} if cfg.post_norms
                 else {"post_attention_layernorm": "mlp_norm"})
        if cfg.post_norms_only:  # OLMo 2: the same names, after attention and the MLP only
            norms = {"post_attention_layernorm": "post_attn_norm",
                     "post_feedforward_layernorm": "post_mlp_norm"}
        for hf_name, ours in norms.items():
            names[pre + f"{hf_name}.weight"] = (path + (ours, "scale"), "copy", i)
        for p in ("gate", "up", "down"):
            names[pre + f"mlp.{p}_proj.weight"] = (path + ("mlp", p), "T", i)
    names["model.norm.weight"] = (("final_norm", "scale"), "copy", None)
    if not cfg.tie_embeddings:
        names["lm_head.weight"] = (("lm_head",), "T", None)
    return names


def _hf_shape(kind: str, shape: tuple) -> tuple:
    if kind == "in":  # [D, N, E] <- [N*E, D]
        return (shape[1] * shape[2], shape[0])
    if kind == "out":  # [H, E, D] <- [D, H*E]
        return (shape[2], shape[0] * shape[1])
    if kind == "T":
        return tuple(reversed(shape))
    if kind == "flat":
        return (int(np.prod(shape)),)
    return tuple(shape)


def _to_ours(kind: str, w: np.ndarray, shape: tuple) -> np.ndarray:
    return w.T.reshape(shape) if kind in ("in", "out", "T") else w.reshape(shape)


def read_json(file: str) -> dict:
    """The JSON object in file; CheckpointError naming it when it is not one."""
    try:
        with open(file) as f:
            obj = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{file}: invalid JSON ({e})") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"{file}: expected a JSON object, got {type(obj).__name__}")
    return obj


@contextlib.contextmanager
def _safetensors(file: str):
    """safe_open(file), a truncated or corrupt file raised as a CheckpointError naming it."""
    try:
        with safe_open(file, "numpy") as f:
            yield f
    except SafetensorError as e:
        raise CheckpointError(f"{file}: unreadable safetensors file ({e}); truncated or "
                              "corrupt download?") from e


def _weight_files(path: str) -> dict[str, str]:
    """HF tensor name -> safetensors file, resolved as transformers does: model.safetensors,
    else the index's weight_map. Other *.safetensors files are ignored (a stray copy must not
    replace weights); a folder with both, or with neither, is refused."""
    single, index = os.path.join(path, SINGLE_FILE), os.path.join(path, INDEX_FILE)
    if os.path.exists(single) and os.path.exists(index):
        raise CheckpointError(f"{path}: both {SINGLE_FILE} and {INDEX_FILE} (transformers would "
                              f"read only {SINGLE_FILE}); remove the stale one")
    if os.path.exists(single):
        with _safetensors(single) as f:
            return {name: single for name in f.keys()}
    if not os.path.exists(index):
        others = sorted(os.path.basename(f) for f in glob.glob(os.path.join(path, "*.safetensors")))
        raise FileNotFoundError(f"{path}: no {SINGLE_FILE} or {INDEX_FILE}" + (
            f"; transformers would not read {others} either" if others else ""))
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: no 'weight_map' (tensor name -> file)")
    missing = sorted({os.path.join(path, f) for f in weight_map.values()
                      if not os.path.exists(os.path.join(path, f))})
    if missing:
        raise FileNotFoundError(f"{index} lists shards that do not exist: {missing}")
    return {name: os.path.join(path, f) for name, f in weight_map.items()}


def _fused_parts(cfg: model_lib.ModelConfig, fused: dict, files: dict, stored: dict):
    """(files, stored, rows) with each fused tensor (`FUSED`) replaced by its parts: a part's
    name (as `tensor_names` has it) -> the fused tensor's file and name, and -> ((first row,
    end row), the fused tensor's rows)."""
    size = {"self_attn.q_proj": cfg.n_heads * cfg.head_dim,
            "self_attn.k_proj": cfg.n_kv_heads * cfg.head_dim,
            "self_attn.v_proj": cfg.n_kv_heads * cfg.head_dim,
            "mlp.gate_proj": cfg.d_ff, "mlp.up_proj": cfg.d_ff}
    files, stored, rows = dict(files), dict(stored), {}
    for name in list(files):
        base, _, kind = name.rpartition(".")
        prefix, _, module = base.rpartition(".layers.")
        layer, _, module = module.partition(".")
        if not prefix or module not in fused:
            continue
        file, src = files.pop(name), stored.pop(name)
        start, total = 0, sum(size[p] for p in fused[module])
        for part in fused[module]:
            part_name = f"{prefix}.layers.{layer}.{part}.{kind}"
            files[part_name], stored[part_name] = file, src
            rows[part_name] = ((start, start + size[part]), total)
            start += size[part]
    return files, stored, rows


def read_hf_config(path: str) -> dict:
    file = os.path.join(path, "config.json")
    if not os.path.exists(file):
        raise FileNotFoundError(f"{path}: no config.json (is this a Hugging Face model folder?)")
    return read_json(file)


def load_hf_checkpoint(path: str, mesh, rules, *, param_dtype: str = "float32", **overrides):
    """(ModelConfig, graphdef, params) for a Hugging Face model folder, params (param_dtype)
    placed on the mesh as they are read. overrides may set RUNTIME_FIELDS (dtype: the compute
    dtype, default param_dtype; remat; scan_layers; max_len), which end up in the graphdef's
    config."""
    hf = read_hf_config(path)
    cfg = model_config_from_hf(hf, param_dtype=param_dtype,
                               source=os.path.join(path, "config.json"), **overrides)
    graphdef, abstract = model_lib.abstract(cfg)
    shardings = dict(nnx.to_flat_state(sharding.state_shardings(abstract, mesh, rules)))
    variables = dict(nnx.to_flat_state(abstract))
    names = tensor_names(cfg)
    files = _weight_files(path)
    stored = {n: n for n in files}  # our (text model) name -> the name in the file
    if isinstance(hf.get("text_config"), dict):  # multimodal: its text part
        stored = text_tensor_names(files)
        files = {n: files[s] for n, s in stored.items()}
    rows = {}  # a fused tensor's part -> its rows in the stored tensor
    if hf.get("model_type") in FUSED:
        files, stored, rows = _fused_parts(cfg, FUSED[hf["model_type"]], files, stored)
    for name, file in files.items():
        if name not in names and not (name == "lm_head.weight" and cfg.tie_embeddings
                                      or name.endswith(_IGNORED_SUFFIXES)):
            # (a tied copy of the embeddings and derived buffers are skipped)
            raise CheckpointError(f"{file}: unexpected tensor {name!r} (an unsupported "
                                  f"variant of {cfg}?)")
    missing = [n for n in names if n not in files]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks tensors {missing[:5]}"
                              f"{' and more' if len(missing) > 5 else ''} needed by {cfg}")
    by_key = {}
    for name, (key, _, _) in names.items():
        by_key.setdefault(key, []).append(name)
    loaded = {}
    with contextlib.ExitStack() as files_open:
        readers = {file: files_open.enter_context(_safetensors(file))
                   for file in sorted(set(files[n] for n in names))}
        present = {file: set(reader.keys()) for file, reader in readers.items()}
        for key, key_names in by_key.items():  # one weight at a time on the host
            shape = variables[key].get_value().shape
            x = np.empty(shape, jnp.dtype(cfg.param_dtype))
            for name in key_names:
                file, (_, kind, layer) = files[name], names[name]
                src = stored[name]
                if src not in present[file]:
                    raise CheckpointError(f"{file}: no tensor {src!r}, which {INDEX_FILE} "
                                          "places in this file")
                want = shape if layer is None else shape[1:]
                got = tuple(readers[file].get_slice(src).get_shape())
                if name in rows:  # a part of a fused tensor: its rows
                    (start, stop), total = rows[name]
                    if got[0] != total:
                        raise CheckpointError(f"{file}: tensor {src!r} has {got[0]} rows, "
                                              f"expected {total} from config.json")
                    got = (stop - start,) + got[1:]
                if got != _hf_shape(kind, want):
                    raise CheckpointError(
                        f"{file}: tensor {src!r} has shape {list(got)}, expected "
                        f"{list(_hf_shape(kind, want))} from config.json")
                w = (readers[file].get_slice(src)[rows[name][0][0]:rows[name][0][1]]
                     if name in rows else readers[file].get_tensor(src))
                x[... if layer is None else layer] = _to_ours(kind, w, want)
            loaded[key] = jax.make_array_from_callback(shape, shardings[key],
                                                       lambda idx, x=x: x[idx])
    params = nnx.from_flat_state([(k, v.replace(loaded[k])) for k, v in variables.items()])
    return cfg, graphdef, params


def human_count(n: int) -> str:
    """A parameter count in a readable unit: 1.544B, 7.62M, 35.2K, 980."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return str(n)
