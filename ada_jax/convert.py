"""Hugging Face checkpoints <-> the NNX Transformer, for the Qwen2/Qwen2.5 and Llama-3 families.

Import streams: the model is created abstractly (`nnx.eval_shape`), its mesh shardings come from
`sharding.state_shardings`, and each safetensors tensor is read (one at a time, file by file),
converted to our layout and placed straight into its `NamedSharding`, so no device ever holds
more than its own shard. In a multi-host run every process reads the files and keeps only its
addressable shards. Export writes HF names and layouts back, split into files by size.

Layouts (HF torch Linear weights are [out, in]): q/k/v [H*E, D] <-> [D, H, E]; o [D, H*E] <->
[H, E, D]; gate/up [F, D] <-> [D, F]; down [D, F] <-> [F, D]; lm_head [V, D] <-> [D, V];
q/k/v biases [H*E] <-> [H, E]; embeddings and norm scales unchanged.
"""
import dataclasses
import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open
from safetensors.numpy import save_file

from ada_jax import model as model_lib
from ada_jax import sharding

ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}
# ModelConfig fields a caller may set when loading; everything else comes from config.json.
RUNTIME_FIELDS = ("dtype", "remat", "max_len")
INDEX_FILE = "model.safetensors.index.json"
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some old checkpoints carry


def _rope(hf: dict) -> tuple[float, dict | None]:
    """(rope_theta, scaling dict or None) from either config.json format: Hub checkpoints use
    `rope_theta` + `rope_scaling`, transformers >= 5 writes one `rope_parameters` dict."""
    params = dict(hf.get("rope_parameters") or {})
    theta = params.pop("rope_theta", hf.get("rope_theta", 10_000.0))
    scaling = hf.get("rope_scaling") or params or None
    if scaling and scaling.get("rope_type", scaling.get("type")) in (None, "default"):
        scaling = None
    return float(theta), scaling


def model_config_from_hf(hf: dict, param_dtype: str = "float32", **overrides
                         ) -> model_lib.ModelConfig:
    """ModelConfig for a Hugging Face config.json dict; ValueError for what we cannot run."""
    model_type = hf.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ValueError(f"unsupported architecture model_type={model_type!r} "
                         f"({hf.get('architectures')}); supported: {sorted(ARCHITECTURES)}")
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"unsupported hidden_act={hf['hidden_act']!r} (only silu)")
    if hf.get("mlp_bias"):
        raise ValueError("unsupported mlp_bias=True")
    if hf.get("use_sliding_window"):
        raise ValueError("unsupported use_sliding_window=True (full attention only)")
    bad = sorted(set(overrides) - set(RUNTIME_FIELDS))
    if bad:
        raise ValueError(f"{bad} come from config.json; only {RUNTIME_FIELDS} can be overridden")
    theta, scaling = _rope(hf)
    rope = {}
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind != "llama3":
            raise ValueError(f"unsupported rope scaling {kind!r} (only llama3)")
        rope = dict(rope_scaling="llama3", rope_scaling_factor=float(scaling["factor"]),
                    rope_low_freq_factor=float(scaling["low_freq_factor"]),
                    rope_high_freq_factor=float(scaling["high_freq_factor"]),
                    rope_original_max_len=int(scaling["original_max_position_embeddings"]))
    heads = hf["num_attention_heads"]
    fields = dict(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"], n_heads=heads,
        n_kv_heads=hf.get("num_key_value_heads") or heads, d_ff=hf["intermediate_size"],
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads, rope_base=theta,
        qkv_bias=model_type == "qwen2" or bool(hf.get("attention_bias")),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_len=int(hf.get("max_position_embeddings", 4096)), param_dtype=param_dtype,
        dtype=param_dtype, **rope)
    return model_lib.ModelConfig(**{**fields, **overrides})


def architecture(cfg: model_lib.ModelConfig) -> dict:
    """The fields a checkpoint fixes (everything but dtypes, remat and max_len): compare a
    loaded checkpoint's config with config.model before training."""
    skip = RUNTIME_FIELDS + ("param_dtype",)
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in skip}


def hf_config_from_model_config(cfg: model_lib.ModelConfig, model_type: str | None = None,
                                dtype: str | None = None) -> dict:
    """A config.json dict (Hub format) for cfg; model_type defaults to qwen2 iff qkv_bias."""
    model_type = model_type or ("qwen2" if cfg.qkv_bias else "llama")
    if model_type not in ARCHITECTURES:
        raise ValueError(f"unsupported model_type {model_type!r}; choose from "
                         f"{sorted(ARCHITECTURES)}")
    if model_type == "qwen2" and not cfg.qkv_bias:
        raise ValueError("qwen2 always has q/k/v biases; this config has qkv_bias=False")
    hf = dict(architectures=[ARCHITECTURES[model_type]], model_type=model_type,
              vocab_size=cfg.vocab_size, hidden_size=cfg.d_model,
              num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
              num_key_value_heads=cfg.n_kv_heads, intermediate_size=cfg.d_ff,
              head_dim=cfg.head_dim, hidden_act="silu", rms_norm_eps=cfg.norm_eps,
              max_position_embeddings=cfg.max_len, rope_theta=cfg.rope_base,
              tie_word_embeddings=cfg.tie_embeddings, torch_dtype=dtype or cfg.param_dtype,
              rope_scaling=None)
    if model_type == "llama":
        hf.update(attention_bias=cfg.qkv_bias, mlp_bias=False)
    else:
        hf.update(use_sliding_window=False)
    if cfg.rope_scaling == "llama3":
        hf["rope_scaling"] = dict(
            rope_type="llama3", factor=cfg.rope_scaling_factor,
            low_freq_factor=cfg.rope_low_freq_factor,
            high_freq_factor=cfg.rope_high_freq_factor,
            original_max_position_embeddings=cfg.rope_original_max_len)
    return hf


def tensor_names(cfg: model_lib.ModelConfig) -> dict[str, tuple[tuple, str]]:
    """HF tensor name -> (our state path, layout kind), in HF's order."""
    names = {"model.embed_tokens.weight": (("embed",), "copy")}
    for i in range(cfg.n_layers):
        pre, path = f"model.layers.{i}.", ("blocks", i)
        names[pre + "input_layernorm.weight"] = (path + ("attn_norm", "scale"), "copy")
        for p in "qkv":
            names[pre + f"self_attn.{p}_proj.weight"] = (path + ("attn", p), "in")
            if cfg.qkv_bias:
                names[pre + f"self_attn.{p}_proj.bias"] = (path + ("attn", f"{p}_bias"), "flat")
        names[pre + "self_attn.o_proj.weight"] = (path + ("attn", "o"), "out")
        names[pre + "post_attention_layernorm.weight"] = (path + ("mlp_norm", "scale"), "copy")
        for p in ("gate", "up", "down"):
            names[pre + f"mlp.{p}_proj.weight"] = (path + ("mlp", p), "T")
    names["model.norm.weight"] = (("final_norm", "scale"), "copy")
    if not cfg.tie_embeddings:
        names["lm_head.weight"] = (("lm_head",), "T")
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


def _to_hf(kind: str, x: np.ndarray) -> np.ndarray:
    if kind == "in":
        return x.reshape(x.shape[0], -1).T
    if kind == "out":
        return x.reshape(-1, x.shape[-1]).T
    if kind == "T":
        return x.T
    return x.reshape(-1) if kind == "flat" else x


def _weight_files(path: str) -> dict[str, str]:
    """HF tensor name -> safetensors file, from the index when there is one."""
    index = os.path.join(path, INDEX_FILE)
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        missing = sorted({os.path.join(path, f) for f in weight_map.values()
                          if not os.path.exists(os.path.join(path, f))})
        if missing:
            raise FileNotFoundError(f"{index} lists shards that do not exist: {missing}")
        return {name: os.path.join(path, f) for name, f in weight_map.items()}
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors files (and no {INDEX_FILE})")
    out = {}
    for file in files:
        with safe_open(file, "numpy") as f:
            out.update({name: file for name in f.keys()})
    return out


def read_hf_config(path: str) -> dict:
    file = os.path.join(path, "config.json")
    if not os.path.exists(file):
        raise FileNotFoundError(f"{path}: no config.json (is this a Hugging Face model folder?)")
    with open(file) as f:
        return json.load(f)


def load_hf_checkpoint(path: str, mesh, rules, dtype: str = "float32", **overrides):
    """(ModelConfig, graphdef, params) for a Hugging Face model folder, params placed on the
    mesh as they are read. dtype is the param dtype; overrides may set RUNTIME_FIELDS (compute
    dtype, remat, max_len), which end up in the graphdef's config."""
    cfg = model_config_from_hf(read_hf_config(path), dtype, **overrides)
    graphdef, abstract = nnx.split(nnx.eval_shape(
        lambda: model_lib.Transformer(cfg, nnx.Rngs(0))))
    shardings = dict(nnx.to_flat_state(sharding.state_shardings(abstract, mesh, rules)))
    variables = dict(nnx.to_flat_state(abstract))
    names = tensor_names(cfg)
    files = _weight_files(path)
    missing = [n for n in names if n not in files]
    if missing:
        raise ValueError(f"{path}: checkpoint lacks tensors {missing[:5]}"
                         f"{' and more' if len(missing) > 5 else ''} needed by {cfg}")
    order = {name: i for i, name in enumerate(names)}
    loaded = {}
    for file in sorted(set(files.values())):
        with safe_open(file, "numpy") as f:
            for name in sorted(f.keys(), key=lambda n: order.get(n, -1)):
                if name not in names:
                    if (name == "lm_head.weight" and cfg.tie_embeddings
                            or name.endswith(_IGNORED_SUFFIXES)):
                        continue  # a tied copy of the embeddings, or a derived buffer
                    raise ValueError(f"{file}: unexpected tensor {name!r} (an unsupported "
                                     f"variant of {cfg}?)")
                key, kind = names[name]
                shape = variables[key].get_value().shape
                sl = f.get_slice(name)
                if tuple(sl.get_shape()) != _hf_shape(kind, shape):
                    raise ValueError(f"{file}: tensor {name!r} has shape {sl.get_shape()}, "
                                     f"expected {list(_hf_shape(kind, shape))} from config.json")
                x = _to_ours(kind, f.get_tensor(name), shape).astype(jnp.dtype(dtype))
                loaded[key] = jax.make_array_from_callback(shape, shardings[key],
                                                           lambda idx: x[idx])
    params = nnx.from_flat_state([(k, v.replace(loaded[k])) for k, v in variables.items()])
    return cfg, graphdef, params


def _host(x) -> np.ndarray:
    """The whole array on this host (an all-gather across processes when it spans hosts)."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(jax.device_get(x))
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def export_hf(params, cfg: model_lib.ModelConfig, out_dir: str, *, model_type: str | None = None,
              dtype: str | None = None, max_shard_bytes: int = 5 * 2**30) -> list[str]:
    """Write params as HF safetensors (+ index when split) and config.json; returns the files.

    dtype: the saved dtype (default: the params'). Multi-host: every process must call this
    (the gathers are collective); only process 0 writes.
    """
    flat = dict(nnx.to_flat_state(params))
    names = tensor_names(cfg)
    save_dtype = jnp.dtype(dtype or flat[("embed",)].get_value().dtype)
    sizes = {n: int(np.prod(flat[k].get_value().shape)) * save_dtype.itemsize
             for n, (k, _) in names.items()}
    groups, size = [[]], 0
    for name in names:  # greedy split in HF order, as transformers does
        if groups[-1] and size + sizes[name] > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += sizes[name]
    n = len(groups)
    file_names = (["model.safetensors"] if n == 1 else
                  [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)])
    write = jax.process_index() == 0
    if write:
        os.makedirs(out_dir, exist_ok=True)
    for file, group in zip(file_names, groups):
        tensors = {}
        for name in group:
            key, kind = names[name]
            x = _host(flat[key].get_value())
            tensors[name] = np.ascontiguousarray(_to_hf(kind, x).astype(save_dtype))
        if write:
            save_file(tensors, os.path.join(out_dir, file), metadata={"format": "pt"})
    if write:
        if n > 1:
            index = {"metadata": {"total_size": sum(sizes.values())},
                     "weight_map": {nm: f for f, g in zip(file_names, groups) for nm in g}}
            with open(os.path.join(out_dir, INDEX_FILE), "w") as f:
                json.dump(index, f, indent=2)
        hf = hf_config_from_model_config(cfg, model_type, str(save_dtype))
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(hf, f, indent=2)
    return [os.path.join(out_dir, f) for f in file_names]

