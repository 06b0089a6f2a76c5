"""HF import: which files a folder's weights come from (as transformers resolves them), and one
clear error, naming the file and the field or tensor, for each way a folder can be broken."""
import json
import os
import shutil

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from ada_jax import convert, hf_export, sharding
from ada_jax.sampling import left_pad
from configs import base
from tests.helpers import logit_diff_vs_hf

transformers = pytest.importorskip("transformers")

RULES = base.get_config("task=embedded").sharding_rules
CONFIG = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
              tie_word_embeddings=True)


def _save(path, shard="30KB", **changes):
    """A tiny random Qwen2 saved by transformers; returns the model."""
    torch.manual_seed(0)
    hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**{**CONFIG, **changes})).eval()
    with torch.no_grad():  # HF zero-inits biases: randomise everything
        for p in hf.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    hf.save_pretrained(path, max_shard_size=shard)
    return hf


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{"single": folder with model.safetensors, "sharded": folder with an index and shards}."""
    root = tmp_path_factory.mktemp("qwen2")
    _save(root / "single", shard="10MB")
    _save(root / "sharded")
    assert os.path.exists(root / "single" / "model.safetensors")
    assert os.path.exists(root / "sharded" / convert.INDEX_FILE)
    return root


@pytest.fixture(scope="module")
def mesh():
    return sharding.make_mesh(dict(data=2, fsdp=2, tensor=2))


@pytest.fixture
def single(saved, tmp_path):
    return shutil.copytree(saved / "single", tmp_path / "single")


@pytest.fixture
def sharded(saved, tmp_path):
    return shutil.copytree(saved / "sharded", tmp_path / "sharded")


def _load(path, mesh, **kw):
    return convert.load_hf_checkpoint(str(path), mesh, RULES, **kw)


def _index(path):
    with open(path / convert.INDEX_FILE) as f:
        return json.load(f)


def _write_json(file, obj):
    with open(file, "w") as f:
        json.dump(obj, f)


# ---- which files ---------------------------------------------------------------------------

def test_stray_safetensors_file_is_ignored_like_transformers(single, mesh):
    """transformers reads only model.safetensors; a stray file (sorting after it) used to be
    merged in and win."""
    _, _, want = _load(single, mesh)
    save_file({"model.embed_tokens.weight": np.zeros((96, 32), np.float32)},
              str(single / "model_old.safetensors"))
    _, _, got = _load(single, mesh)
    np.testing.assert_array_equal(got["embed"][...], want["embed"][...])
    assert np.abs(np.asarray(got["embed"][...])).max() > 0


def test_single_file_and_index_together_are_refused(saved, single, mesh):
    shutil.copy(saved / "sharded" / convert.INDEX_FILE, single)
    for file in _index(saved / "sharded")["weight_map"].values():
        shutil.copy(saved / "sharded" / file, single)
    with pytest.raises(convert.CheckpointError, match="both model.safetensors and "
                                                      "model.safetensors.index.json"):
        _load(single, mesh)


def test_other_file_names_are_refused(single, mesh):
    os.rename(single / "model.safetensors", single / "weights.safetensors")
    with pytest.raises(FileNotFoundError, match=r"no model.safetensors or "
                                                r"model.safetensors.index.json.*weights"):
        _load(single, mesh)


def test_reexport_removes_stale_files(saved, mesh, tmp_path):
    cfg, _, params = _load(saved / "sharded", mesh)
    hf_export.export_hf(params, cfg, str(tmp_path), max_shard_bytes=20_000)
    assert os.path.exists(tmp_path / convert.INDEX_FILE)
    hf_export.export_hf(params, cfg, str(tmp_path))  # one file now: the old shards must go
    assert sorted(f for f in os.listdir(tmp_path) if "safetensors" in f) == ["model.safetensors"]
    _load(tmp_path, mesh)


# ---- broken files --------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_shard_is_named(sharded, mesh, damage):
    file = sharded / _index(sharded)["weight_map"]["model.layers.1.mlp.up_proj.weight"]
    data = file.read_bytes()
    file.write_bytes(data[:len(data) // 2] if damage == "truncate" else b"not safetensors")
    with pytest.raises(convert.CheckpointError, match=rf"{file}: unreadable safetensors"):
        _load(sharded, mesh)


@pytest.mark.parametrize("name", ["config.json", convert.INDEX_FILE])
def test_invalid_json_is_named(sharded, mesh, name):
    text = (sharded / name).read_text()
    (sharded / name).write_text(text[:len(text) // 2])
    with pytest.raises(convert.CheckpointError, match=rf"{sharded / name}: invalid JSON"):
        _load(sharded, mesh)


def test_index_without_weight_map(sharded, mesh):
    _write_json(sharded / convert.INDEX_FILE, {"metadata": {}})
    with pytest.raises(convert.CheckpointError,
                       match=rf"{sharded / convert.INDEX_FILE}: no 'weight_map'"):
        _load(sharded, mesh)


def test_tensor_missing_from_the_shard_the_index_names(sharded, mesh):
    index = _index(sharded)
    name = "model.layers.1.self_attn.k_proj.weight"
    other = next(f for f in sorted(set(index["weight_map"].values()))
                 if f != index["weight_map"][name])
    index["weight_map"][name] = other
    _write_json(sharded / convert.INDEX_FILE, index)
    with pytest.raises(convert.CheckpointError, match=rf"{sharded / other}: no tensor '{name}'"):
        _load(sharded, mesh)


@pytest.mark.parametrize("field,value", [("hidden_size", "missing"), ("vocab_size", None),
                                         ("num_hidden_layers", "2"),
                                         ("num_attention_heads", 0)])
def test_bad_required_config_field_is_named(single, mesh, field, value):
    with open(single / "config.json") as f:
        hf = json.load(f)
    if value == "missing":
        del hf[field]
    else:
        hf[field] = value
    _write_json(single / "config.json", hf)
    with pytest.raises(convert.CheckpointError, match=rf"{single / 'config.json'}: .*'{field}'"):
        _load(single, mesh)


def test_bad_rope_scaling_field_is_named():
    hf = dict(CONFIG, model_type="llama", rope_scaling=dict(rope_type="llama3", factor=8.0))
    with pytest.raises(convert.CheckpointError, match="rope_scaling.*'low_freq_factor'"):
        convert.model_config_from_hf(hf)


def test_unknown_dtype_is_refused(saved, mesh, tmp_path):
    path = saved / "single"
    with pytest.raises(ValueError, match="param_dtype='float33'"):
        _load(path, mesh, param_dtype="float33")
    with pytest.raises(ValueError, match="dtype='bf16'"):
        _load(path, mesh, dtype="bf16")
    cfg, _, params = _load(path, mesh, param_dtype="bfloat16", dtype="float32")
    assert (cfg.param_dtype, cfg.dtype) == ("bfloat16", "float32")
    with pytest.raises(ValueError, match="dtype='int8'"):
        hf_export.export_hf(params, cfg, str(tmp_path), dtype="int8")


# ---- attention variants --------------------------------------------------------------------

def test_llama_attention_bias_is_refused(saved, mesh, tmp_path):
    """llama's attention_bias=True also biases o_proj, which our model lacks: q/k/v biases
    export as qwen2 only, and such llama checkpoints are refused on import."""
    cfg, _, params = _load(saved / "single", mesh)
    with pytest.raises(ValueError, match="attention_bias"):
        hf_export.export_hf(params, cfg, str(tmp_path), model_type="llama")
    with pytest.raises(convert.CheckpointError, match="attention_bias"):
        convert.model_config_from_hf(dict(CONFIG, model_type="llama", attention_bias=True))


@pytest.mark.parametrize("max_window_layers", [2, 1])
def test_sliding_window_refused_only_where_a_layer_uses_it(mesh, tmp_path, max_window_layers):
    """Qwen2 applies the window from layer max_window_layers on: with max_window_layers >= the
    layer count transformers attends fully, and so do we (logits match past the window)."""
    hf = _save(tmp_path, use_sliding_window=True, sliding_window=4,
               max_window_layers=max_window_layers)
    if max_window_layers == 1:
        with pytest.raises(convert.CheckpointError, match="sliding window.*layers \\[1\\]"):
            _load(tmp_path, mesh)
        return
    _, graphdef, params = _load(tmp_path, mesh)
    toks, mask = left_pad([list(range(3, 19)), list(range(5, 14))], 16)
    assert logit_diff_vs_hf(graphdef, params, hf, toks, mask)[0] < 1e-4
