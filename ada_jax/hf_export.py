"""Our Transformer's params as a Hugging Face folder: config.json in the Hub format of the
family the config is (`hf_config_from_model_config`), the tensors in HF names and torch layouts
(`hf_state_dict`), written as safetensors split by size with an index (`export_hf`). The names and
layouts are `convert`'s, read backwards; a training run's checkpoint goes through `export`."""
import glob
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from ada_jax import model as model_lib
from ada_jax.convert import (ACTIVATIONS, ARCHITECTURES, FAMILIES, FAMILY_FIELDS, FUSED,
                             INDEX_FILE, SINGLE_FILE, SOURCE_FIELDS, SOURCE_FILES, _dtype,
                             architecture, model_config_from_hf, read_hf_config, tensor_names)


def hf_config_from_model_config(cfg: model_lib.ModelConfig, model_type: str | None = None,
                                dtype: str | None = None) -> dict:
    """A config.json dict (Hub format) for cfg; model_type defaults to the one family whose
    FAMILIES fields cfg has: olmo2 for norms after attention and the MLP only (olmo3 with
    local layers), gemma3_text for
    Gemma's norms with QK-norm, gemma2 for them without
    it, qwen3 for QK-norm alone, smollm3 for layers without RoPE, qwen2 for
    q/k/v biases, mistral for a sliding window on every layer, else llama. ValueError when cfg
    is not model_type (transformers would build another model)."""
    have = {f for f in FAMILY_FIELDS if getattr(cfg, f)}
    if model_type is None:
        model_type = ("olmo3" if cfg.post_norms_only and cfg.sliding_window else
                      "olmo2" if cfg.post_norms_only else
                      "gemma3_text" if cfg.post_norms and cfg.qk_norm else
                      "gemma2" if cfg.post_norms else "qwen3" if cfg.qk_norm else
                      "smollm3" if cfg.nope_interval else
                      "qwen2" if cfg.qkv_bias else "mistral" if cfg.sliding_window else "llama")
    if model_type not in ARCHITECTURES or model_type in FUSED:
        raise ValueError(f"unsupported model_type {model_type!r}; choose from "
                         f"{sorted(set(ARCHITECTURES) - set(FUSED))} (a model read from a "
                         f"{'/'.join(FUSED)} folder exports as llama, or mistral with a window)")
    fields = FAMILIES[model_type]
    lacks = sorted(f for f, required in fields.items() if required and f not in have)
    extra = sorted(have - set(fields))
    if model_type == "mistral" and cfg.sliding_window and cfg.sliding_window_pattern:
        extra.append("sliding_window_pattern")  # global layers: Gemma's, not Mistral's
    if lacks or extra:
        parts = ([f"{model_type} has {', '.join(lacks)}, which this config lacks"] if lacks
                 else []) + ([f"{model_type} has no {', '.join(extra)}, which this config sets"]
                             if extra else [])
        if model_type == "llama" and "qkv_bias" in extra:
            parts.append("llama's attention_bias=True also biases o_proj, which this model "
                         "lacks: export a model with q/k/v biases as model_type='qwen2'")
        raise ValueError(f"this config is not {model_type}: {'; '.join(parts)}")
    hf = dict(architectures=[ARCHITECTURES[model_type]], model_type=model_type,
              vocab_size=cfg.vocab_size, hidden_size=cfg.d_model,
              num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
              num_key_value_heads=cfg.n_kv_heads, intermediate_size=cfg.d_ff,
              head_dim=cfg.head_dim, rms_norm_eps=cfg.norm_eps,
              hidden_act={v: k for k, v in ACTIVATIONS.items()}[cfg.mlp_act],
              max_position_embeddings=cfg.max_len, rope_theta=cfg.rope_base,
              tie_word_embeddings=cfg.tie_embeddings, torch_dtype=dtype or cfg.param_dtype,
              rope_scaling=None)
    if model_type in ("gemma2", "gemma3_text"):
        if model_type == "gemma2" and (cfg.rope_scaling != "none"
                                       or cfg.rope_local_base != cfg.rope_base):
            raise ValueError("gemma2's local layers use the global RoPE base, unscaled; this "
                             f"config has rope_scaling={cfg.rope_scaling!r}, rope_local_base="
                             f"{cfg.rope_local_base} (rope_base {cfg.rope_base})")
        hf.update(hidden_activation=hf.pop("hidden_act"), attention_bias=False,
                  sliding_window=cfg.sliding_window or None,
                  layer_types=["sliding_attention" if local else "full_attention"
                               for local in model_lib.local_layers(cfg)],
                  query_pre_attn_scalar=_int_if_whole(cfg.query_pre_attn_scalar or cfg.head_dim),
                  attn_logit_softcapping=cfg.attn_logit_softcap or None,
                  final_logit_softcapping=cfg.final_logit_softcap or None)
        if model_type == "gemma3_text":
            hf.update(rope_local_base_freq=cfg.rope_local_base)
    elif model_type == "mistral":
        if cfg.sliding_window and (cfg.rope_scaling != "none"
                                   or cfg.rope_local_base != cfg.rope_base):
            raise ValueError("mistral's window layers use the global RoPE base, unscaled; this "
                             f"config has rope_scaling={cfg.rope_scaling!r}, rope_local_base="
                             f"{cfg.rope_local_base} (rope_base {cfg.rope_base})")
        hf.update(sliding_window=cfg.sliding_window or None)
    elif model_type == "llama":
        hf.update(attention_bias=False, mlp_bias=False)
    elif model_type == "olmo2":
        hf.update(attention_bias=False)
    elif model_type == "olmo3":
        if cfg.rope_local_base != cfg.rope_base:
            raise ValueError("olmo3's local layers use the global RoPE base (unscaled); this "
                             f"config has rope_local_base={cfg.rope_local_base} (rope_base "
                             f"{cfg.rope_base})")
        hf.update(attention_bias=False, sliding_window=cfg.sliding_window,
                  layer_types=["sliding_attention" if local else "full_attention"
                               for local in model_lib.local_layers(cfg)])
    elif model_type == "smollm3":
        hf.update(attention_bias=False, mlp_bias=False, use_sliding_window=False,
                  sliding_window=None, no_rope_layer_interval=cfg.nope_interval or 4,
                  no_rope_layers=[int(r) for r in model_lib.rope_layers(cfg)])
    else:  # qwen2, qwen3
        hf.update(use_sliding_window=False, sliding_window=None,
                  **({"attention_bias": False} if model_type == "qwen3" else {}))
    if cfg.rope_scaling == "linear":
        hf["rope_scaling"] = dict(rope_type="linear", factor=cfg.rope_scaling_factor)
    if cfg.rope_scaling == "llama3":
        hf["rope_scaling"] = dict(
            rope_type="llama3", factor=cfg.rope_scaling_factor,
            low_freq_factor=cfg.rope_low_freq_factor,
            high_freq_factor=cfg.rope_high_freq_factor,
            original_max_position_embeddings=cfg.rope_original_max_len)
    if cfg.rope_scaling == "yarn":
        hf["rope_scaling"] = dict(
            rope_type="yarn", factor=cfg.rope_scaling_factor,
            original_max_position_embeddings=cfg.rope_original_max_len,
            beta_fast=cfg.yarn_beta_fast, beta_slow=cfg.yarn_beta_slow,
            truncate=cfg.yarn_truncate, attention_factor=cfg.yarn_attention_factor)
    return hf


def _int_if_whole(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def _to_hf(kind: str, x: np.ndarray) -> np.ndarray:
    if kind == "in":
        return x.reshape(x.shape[0], -1).T
    if kind == "out":
        return x.reshape(-1, x.shape[-1]).T
    if kind == "T":
        return x.T
    return x.reshape(-1) if kind == "flat" else x


def _host(x) -> np.ndarray:
    """The whole array on this host (an all-gather across processes when it spans hosts)."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(jax.device_get(x))
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _hf_tensor(flat: dict, entry: tuple) -> np.ndarray:
    """One HF tensor (torch layout) from our flat state; entry is a `tensor_names` value."""
    key, kind, layer = entry
    x = flat[key].get_value()
    return _to_hf(kind, _host(x if layer is None else x[layer]))


def hf_state_dict(params, cfg: model_lib.ModelConfig) -> dict[str, np.ndarray]:
    """HF tensor name -> array in torch's layout and our dtype: what a transformers model's
    `load_state_dict` takes (after torch.from_numpy)."""
    flat = dict(nnx.to_flat_state(params))
    return {name: np.ascontiguousarray(_hf_tensor(flat, entry))
            for name, entry in tensor_names(cfg).items()}


def export_hf(params, cfg: model_lib.ModelConfig, out_dir: str, *, source: str | None = None,
              model_type: str | None = None, dtype: str | None = None,
              max_shard_bytes: int = 5 * 2**30) -> list[str]:
    """Write params as HF safetensors (+ index when split) and config.json; returns the files.

    source: the HF folder the params were loaded (or fine-tuned) from. Its config.json gives what
    cfg does not keep (SOURCE_FIELDS: max_position_embeddings, as cfg.max_len is only the length
    this run used, and the bos/eos/pad ids) and its SOURCE_FILES (generation config, tokenizer)
    are copied. Without it max_position_embeddings is cfg.max_len and no token ids are written.
    dtype: the saved dtype (default: the params'). Shards or an index left in out_dir by an
    earlier export are removed, so the folder holds one checkpoint. Multi-host: every process
    must call this (the gathers are collective); only process 0 writes.
    """
    flat = dict(nnx.to_flat_state(params))
    names = tensor_names(cfg)
    save_dtype = jnp.dtype(_dtype(dtype, "dtype") if dtype else flat[("embed",)].get_value().dtype)
    hf = hf_config_from_model_config(cfg, model_type, save_dtype.name)
    if source:
        src_file = os.path.join(source, "config.json")
        src = read_hf_config(source)
        want, got = architecture(model_config_from_hf(src, source=src_file)), architecture(cfg)
        diff = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
        if diff:
            raise ValueError(f"source {src_file} is another model; (its value, cfg's): {diff}")
        hf.update({k: src[k] for k in SOURCE_FIELDS if k in src})
    sizes = {n: int(np.prod(flat[k].get_value().shape[0 if i is None else 1:]))
             * save_dtype.itemsize for n, (k, _, i) in names.items()}
    groups, size = [[]], 0
    for name in names:  # greedy split in HF order, as transformers does
        if groups[-1] and size + sizes[name] > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += sizes[name]
    n = len(groups)
    file_names = ([SINGLE_FILE] if n == 1 else
                  [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)])
    write = jax.process_index() == 0
    if write:
        os.makedirs(out_dir, exist_ok=True)
        keep = set(file_names) | ({INDEX_FILE} if n > 1 else set())
        stale = glob.glob(os.path.join(out_dir, "model-*-of-*.safetensors")) + [
            os.path.join(out_dir, f) for f in (SINGLE_FILE, INDEX_FILE)]
        for file in stale:
            if os.path.basename(file) not in keep and os.path.exists(file):
                os.remove(file)
    for file, group in zip(file_names, groups):
        tensors = {}
        for name in group:
            tensors[name] = np.ascontiguousarray(_hf_tensor(flat, names[name]).astype(save_dtype))
        if write:
            save_file(tensors, os.path.join(out_dir, file), metadata={"format": "pt"})
    if write:
        if n > 1:
            index = {"metadata": {"total_size": sum(sizes.values())},
                     "weight_map": {nm: f for f, g in zip(file_names, groups) for nm in g}}
            with open(os.path.join(out_dir, INDEX_FILE), "w") as f:
                json.dump(index, f, indent=2)
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(hf, f, indent=2)
        for name in SOURCE_FILES if source else ():
            src_file, out_file = os.path.join(source, name), os.path.join(out_dir, name)
            if os.path.exists(src_file) and os.path.abspath(src_file) != os.path.abspath(out_file):
                shutil.copy(src_file, out_file)
    return [os.path.join(out_dir, f) for f in file_names]
