"""HF import/export: tiny random checkpoints of every family (`FAMILIES`: Qwen2, Qwen3, Llama-3,
Mistral, Phi-3, OLMo 2 and 3, SmolLM3, Gemma 2 and 3) saved by `transformers` load onto a 2x2x2
mesh and reproduce its logits (left-padded batch) and greedy generations; export gives back the
same tensors (a fused family's split); bad checkpoints fail with the tensor and file named."""
import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest
import torch
from flax import nnx
from jax.sharding import PartitionSpec
from safetensors import safe_open
from safetensors.numpy import save_file

from ada_jax import convert, hf_export, sharding
from ada_jax import model as model_lib
from ada_jax.sampling import SamplingConfig, left_pad, sample
from configs import base
from tests.helpers import logit_diff_vs_hf

transformers = pytest.importorskip("transformers")

RULES = base.get_config("task=embedded").sharding_rules
V = 96
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)
FAMILIES = {
    # Qwen2: q/k/v biases, tied embeddings.
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True, rope_theta=1e6)),
    # Llama-3.2 style: llama3 rope scaling (original length 16 so it acts within the test's
    # positions), untied lm_head.
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(
        tie_word_embeddings=False, rope_theta=5e5, rms_norm_eps=1e-5, rope_scaling=dict(
            rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=16))),
    # Qwen3: QK-norm (plain w, not Gemma's 1 + w), head_dim 16 where d / heads is 8.
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        head_dim=16, tie_word_embeddings=True, rope_theta=1e6)),
    # Mistral: one sliding window (4, shorter than the prompts) on every layer, untied head.
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(
        sliding_window=4, tie_word_embeddings=False, rope_theta=2e4)),
    # Phi-3: Llama's layers in fused q/k/v and gate/up tensors, one window (4) on every
    # layer as Mistral's, untied head.
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(
        tie_word_embeddings=False, rope_theta=2e4, sliding_window=4)),
    # OLMo 2: norms after attention and the MLP only, QK-norm over all heads, untied head.
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(tie_word_embeddings=False, rope_theta=5e5)),
    # OLMo 3: OLMo 2's, a local layer (window 4) then a global one; YaRN on the global one
    # only, as the released 7B (an original context of 16, its attention factor given), the
    # local one unscaled.
    "olmo3": ("Olmo3Config", "Olmo3ForCausalLM", dict(
        tie_word_embeddings=False, rope_theta=5e5, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"], rope_scaling=dict(
            rope_type="yarn", factor=8.0, original_max_position_embeddings=16,
            attention_factor=1.3, beta_fast=4.0, beta_slow=0.25))),
    # SmolLM3: Llama's layers, the second without RoPE (no_rope_layer_interval 2), tied; YaRN
    # (its attention factor from the scaling factor) on the layer that rotates.
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(
        tie_word_embeddings=True, rope_theta=1e4, no_rope_layer_interval=2, rope_scaling=dict(
            rope_type="yarn", factor=4.0, original_max_position_embeddings=32))),
    # Gemma 2: a local layer (window 4) then a global one, one RoPE base; post norms, GeGLU,
    # scaled embeddings, no QK-norm, soft-capped attention scores (cap 2: it acts) and logits.
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        head_dim=8, tie_word_embeddings=True, sliding_window=4, rope_theta=1e5,
        layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=10,
        attn_logit_softcapping=2.0, final_logit_softcapping=5.0)),
    # Gemma 3: a local layer (window 4, shorter than the prompts) then a global one, each with
    # its RoPE base; QK-norm, post norms, GeGLU, scaled embeddings, a query scalar that is not
    # head_dim, soft-capped final logits.
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        head_dim=8, tie_word_embeddings=True, sliding_window=4, rope_theta=1e5,
        rope_local_base_freq=100.0, layer_types=["sliding_attention", "full_attention"],
        query_pre_attn_scalar=10, final_logit_softcapping=5.0)),
}
SHARD = "30KB"  # forces 4 files and an index for these tiny models
# A family stored fused exports as the unfused family with its fields (Phi-3's window: Mistral)
EXPORTED_AS = {"phi3": ("mistral", "MistralForCausalLM")}
FUSED_ROWS = {"self_attn.qkv_proj": [4 * 8, 2 * 8, 2 * 8], "mlp.gate_up_proj": [64, 64]}


def _unfused(tensors: dict, family: str) -> dict:
    """A fused family's tensors as Llama's: each fused tensor's rows split into its parts."""
    out = {}
    for name, x in tensors.items():
        base, _, kind = name.rpartition(".")
        module = base.split(".layers.", 1)[-1].partition(".")[2]
        parts = convert.FUSED.get(family, {}).get(module)
        if not parts:
            out[name] = x
            continue
        pieces = np.split(x, np.cumsum(FUSED_ROWS[module])[:-1])
        out.update({f"{base[:-len(module)]}{p}.{kind}": y for p, y in zip(parts, pieces)})
    return out


def _hf_model(family, dtype=torch.float32):
    config_cls, model_cls, extra = FAMILIES[family]
    config = getattr(transformers, config_cls)(**COMMON, **extra)
    torch.manual_seed(0)
    hf = getattr(transformers, model_cls)(config).eval()
    hf.config._attn_implementation = "eager"
    with torch.no_grad():  # HF zero-inits biases and unit-inits norms: randomise everything
        for name, p in hf.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name
                    else 0.3 * torch.randn_like(p))
    return hf.to(dtype)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def saved(request, tmp_path_factory):
    """(family, HF model, folder holding its sharded safetensors checkpoint)."""
    path = str(tmp_path_factory.mktemp(request.param))
    hf = _hf_model(request.param)
    hf.save_pretrained(path, max_shard_size=SHARD)
    assert os.path.exists(os.path.join(path, convert.INDEX_FILE))
    return request.param, hf, path


@pytest.fixture(scope="module")
def mesh():
    return sharding.make_mesh(dict(data=2, fsdp=2, tensor=2))


def _batch():
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(3, V, size=n)) for n in (13, 20, 6, 17)]
    return left_pad(prompts, 20)


def test_logits_match_transformers(saved, mesh):
    family, hf, path = saved
    cfg, graphdef, params = convert.load_hf_checkpoint(path, mesh, RULES)
    assert cfg.qkv_bias == (family == "qwen2")
    assert cfg.qk_norm == (family in ("qwen3", "gemma3_text", "olmo2", "olmo3"))
    assert cfg.post_norms_only == cfg.qk_norm_full == (family in convert.OLMO)
    assert cfg.norm_plus_one == (family in convert.GEMMA)
    assert cfg.nope_interval == (2 if family == "smollm3" else 0)
    assert (cfg.attn_logit_softcap, cfg.final_logit_softcap) == {
        "gemma2": (2.0, 5.0), "gemma3_text": (0.0, 5.0)}.get(family, (0.0, 0.0))
    assert cfg.head_dim == (16 if family == "qwen3" else 8)
    assert cfg.tie_embeddings == (family not in ("llama", "mistral", "phi3") + convert.OLMO)
    assert (cfg.sliding_window, cfg.sliding_window_pattern, cfg.rope_local_base) == {
        "gemma3_text": (4, 2, 100.0), "gemma2": (4, 2, 1e5), "phi3": (4, 0, 2e4),
        "olmo3": (4, 2, 5e5),
        "mistral": (4, 0, 2e4)}.get(family, (0, 0, 10_000.0))
    assert cfg.rope_scaling == {"llama": "llama3", "olmo3": "yarn", "smollm3": "yarn"}.get(
        family, "none")
    assert cfg.yarn_attention_factor == {"olmo3": 1.3, "smollm3": 0.1 * np.log(4.0) + 1}.get(
        family, 1.0)
    q = params["blocks"]["attn"]["q"][...]  # really placed on the mesh
    assert q.sharding.spec == PartitionSpec(None, "fsdp", "tensor", None)
    blocks = params["blocks"]
    if family in convert.GEMMA:  # Gemma's extra norms: [L, D] over fsdp
        for norm in (blocks["post_attn_norm"], blocks["post_mlp_norm"], blocks["mlp_norm"]):
            assert norm["scale"][...].sharding.spec == PartitionSpec(None, "fsdp")
    if cfg.qk_norm:  # QK-norm's [L, E]: replicated; OLMo 2's [L, H, E]: heads over tensor
        want = (PartitionSpec(None, "tensor", None) if cfg.qk_norm_full
                else PartitionSpec(None, None))
        for norm in (blocks["attn"]["q_norm"], blocks["attn"]["k_norm"]):
            assert norm["scale"][...].sharding.spec == want

    toks, mask = _batch()
    diff, scale = logit_diff_vs_hf(graphdef, params, hf, toks, mask)
    print(f"{family}: max |logit diff| = {diff:.2e} (logits up to {scale:.1f})")
    assert diff < 1e-4
    # the same through one scan over the layers (Gemma's local / global: scanned inputs)
    _, graphdef, params = convert.load_hf_checkpoint(path, mesh, RULES, scan_layers=True)
    assert logit_diff_vs_hf(graphdef, params, hf, toks, mask)[0] < 1e-4


def test_greedy_generation_matches_transformers(saved, mesh):
    family, hf, path = saved
    _, graphdef, params = convert.load_hf_checkpoint(path, mesh, RULES)
    toks, mask = _batch()
    N = 12

    def ours(eos):
        out = sample(graphdef, params, toks, mask, jax.random.key(0),
                     cfg=SamplingConfig(max_new_tokens=N, eos_id=eos, pad_id=0, temperature=0))
        return np.asarray(out.tokens_BN)

    # EOS = a token row 0 emits mid-way, so the stop-and-pad path runs too.
    eos = int(ours(-1)[0, 4])
    got = ours(eos)
    with torch.no_grad():
        ref = hf.generate(torch.tensor(toks, dtype=torch.long),
                          attention_mask=torch.tensor(mask, dtype=torch.long), do_sample=False,
                          max_new_tokens=N, eos_token_id=eos, pad_token_id=0)
    ref = ref[:, toks.shape[1]:].numpy()
    ref = np.pad(ref, ((0, 0), (0, N - ref.shape[1])))  # HF stops when every row is done
    np.testing.assert_array_equal(got, ref)
    assert (got == eos).any(axis=1)[0]


def _tensors(path):
    out = {}
    for file in sorted(os.listdir(path)):
        if file.endswith(".safetensors"):
            with safe_open(os.path.join(path, file), "numpy") as f:
                out.update({name: f.get_tensor(name) for name in f.keys()})
    return out


def test_export_round_trip(saved, mesh, tmp_path):
    family, hf, path = saved
    # A short runtime max_len must not become the export's max_position_embeddings.
    cfg, _, params = convert.load_hf_checkpoint(path, mesh, RULES, max_len=64)
    files = hf_export.export_hf(params, cfg, str(tmp_path), source=path, max_shard_bytes=30_000)
    shards = [f for f in os.listdir(path) if f.endswith(".safetensors")]  # HF's, at 30 KB
    assert len(files) == len(shards) > 1 and os.path.exists(tmp_path / convert.INDEX_FILE)
    want, got = _unfused(_tensors(path), family), _tensors(str(tmp_path))
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    with open(tmp_path / "config.json") as f:
        exported = json.load(f)
    assert convert.model_config_from_hf(exported, max_len=64) == cfg
    assert exported["model_type"] == EXPORTED_AS.get(family, (family,))[0]
    source = convert.read_hf_config(path)
    for key in convert.SOURCE_FIELDS:
        assert exported[key] == source[key] == dict(COMMON)[key], key
    assert os.path.exists(tmp_path / "generation_config.json")
    # ...and transformers reads the export as exactly the same model.
    hf2, info = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path),
                                                                  output_loading_info=True)
    assert type(hf2).__name__ == EXPORTED_AS.get(family, FAMILIES[family])[1]
    assert not any(info.values()), info
    assert hf2.generation_config.eos_token_id == COMMON["eos_token_id"]
    toks, mask = _batch()
    with torch.no_grad():
        logits = [m.eval()(input_ids=torch.tensor(toks, dtype=torch.long),
                           attention_mask=torch.tensor(mask, dtype=torch.long)).logits.numpy()
                  for m in (hf, hf2)]
    np.testing.assert_allclose(logits[1][mask], logits[0][mask], atol=1e-5)


def test_export_without_source_uses_cfg(saved, mesh, tmp_path):
    _, _, path = saved
    cfg, _, params = convert.load_hf_checkpoint(path, mesh, RULES, max_len=64)
    hf_export.export_hf(params, cfg, str(tmp_path))
    exported = convert.read_hf_config(str(tmp_path))
    assert exported["max_position_embeddings"] == 64 and "eos_token_id" not in exported
    assert not os.path.exists(tmp_path / "generation_config.json")
    with pytest.raises(ValueError, match="is another model.*n_layers"):
        hf_export.export_hf(params, dataclasses.replace(cfg, n_layers=1), str(tmp_path),
                            source=path)


def test_bfloat16_checkpoint_round_trips_bit_exactly(mesh, tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    _hf_model("qwen2", torch.bfloat16).save_pretrained(src, max_shard_size=SHARD)
    cfg, _, params = convert.load_hf_checkpoint(str(src), mesh, RULES, param_dtype="bfloat16")
    assert params["embed"][...].dtype == np.dtype("bfloat16") and cfg.dtype == "bfloat16"
    hf_export.export_hf(params, cfg, str(out), max_shard_bytes=15_000)
    want, got = _tensors(str(src)), _tensors(str(out))
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name


def test_runtime_overrides_reach_the_graphdef(saved, mesh):
    _, _, path = saved
    cfg, graphdef, params = convert.load_hf_checkpoint(path, mesh, RULES, dtype="bfloat16",
                                                       remat=True, max_len=64)
    assert cfg.remat and cfg.max_len == 64
    assert (cfg.dtype, cfg.param_dtype) == ("bfloat16", "float32")
    assert nnx.merge(graphdef, params).cfg == cfg
    with pytest.raises(ValueError, match="d_model"):
        convert.load_hf_checkpoint(path, mesh, RULES, d_model=16)


# config.json of the reference models as published on the Hugging Face Hub (the keys we read).
HUB_CONFIGS = {
    "qwen2_5_math_1_5b": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu",
        hidden_size=1536, intermediate_size=8960, max_position_embeddings=4096,
        num_attention_heads=12, num_hidden_layers=28, num_key_value_heads=2, rms_norm_eps=1e-6,
        rope_theta=10000.0, sliding_window=4096, use_sliding_window=False,
        tie_word_embeddings=True, torch_dtype="bfloat16", vocab_size=151936),
    "qwen2_5_math_7b": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu",
        hidden_size=3584, intermediate_size=18944, max_position_embeddings=4096,
        num_attention_heads=28, num_hidden_layers=28, num_key_value_heads=4, rms_norm_eps=1e-6,
        rope_theta=10000.0, sliding_window=4096, use_sliding_window=False,
        tie_word_embeddings=False, torch_dtype="bfloat16", vocab_size=152064),
    "llama3_2_3b_instruct": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False,
        head_dim=128, hidden_act="silu", hidden_size=3072, intermediate_size=8192,
        max_position_embeddings=131072, mlp_bias=False, num_attention_heads=24,
        num_hidden_layers=28, num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                          original_max_position_embeddings=8192, rope_type="llama3"),
        tie_word_embeddings=True, torch_dtype="bfloat16", vocab_size=128256),
    "gemma3_270m": dict(
        architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", attention_bias=False,
        attn_logit_softcapping=None, final_logit_softcapping=None, head_dim=256,
        hidden_activation="gelu_pytorch_tanh", hidden_size=640, intermediate_size=2048,
        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 3,
        max_position_embeddings=32768, num_attention_heads=4, num_hidden_layers=18,
        num_key_value_heads=1, query_pre_attn_scalar=256, rms_norm_eps=1e-6,
        rope_local_base_freq=10000.0, rope_scaling=None, rope_theta=1000000.0,
        sliding_window=512, torch_dtype="bfloat16", use_bidirectional_attention=False,
        vocab_size=262144),
}


@pytest.mark.parametrize("name", sorted(HUB_CONFIGS))
def test_configs_models_match_the_hub(name):
    got = convert.model_config_from_hf(HUB_CONFIGS[name])
    want = model_lib.ModelConfig(**base.MODELS[name])
    assert convert.architecture(got) == convert.architecture(want)
    assert got.max_len == want.max_len


# Other families' reference configs (Hub config.json) and the ModelConfig each must give.
HUB_OTHERS = {
    "qwen3_0_6b": (dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", attention_bias=False,
        head_dim=128, hidden_act="silu", hidden_size=1024, intermediate_size=3072,
        max_position_embeddings=40960, max_window_layers=28, num_attention_heads=16,
        num_hidden_layers=28, num_key_value_heads=8, rms_norm_eps=1e-6, rope_scaling=None,
        rope_theta=1000000, sliding_window=None, tie_word_embeddings=True,
        torch_dtype="bfloat16", use_sliding_window=False, vocab_size=151936),
        dict(vocab_size=151_936, d_model=1024, n_layers=28, n_heads=16, n_kv_heads=8,
             d_ff=3072, head_dim=128, rope_base=1e6, qk_norm=True, tie_embeddings=True,
             norm_eps=1e-6, max_len=40960)),
    "mistral_7b_v0_1": (dict(
        architectures=["MistralForCausalLM"], model_type="mistral", hidden_act="silu",
        hidden_size=4096, intermediate_size=14336, max_position_embeddings=32768,
        num_attention_heads=32, num_hidden_layers=32, num_key_value_heads=8, rms_norm_eps=1e-5,
        rope_theta=10000.0, sliding_window=4096, tie_word_embeddings=False,
        torch_dtype="bfloat16", vocab_size=32000),
        dict(vocab_size=32_000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8,
             d_ff=14_336, head_dim=128, rope_base=1e4, tie_embeddings=False, norm_eps=1e-5,
             max_len=32768, sliding_window=4096, rope_local_base=1e4)),
}


HUB_OTHERS["gemma_2_2b"] = (dict(
    architectures=["Gemma2ForCausalLM"], model_type="gemma2", attention_bias=False,
    attn_logit_softcapping=50.0, final_logit_softcapping=30.0, head_dim=256,
    hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh", hidden_size=2304,
    intermediate_size=9216, max_position_embeddings=8192, num_attention_heads=8,
    num_hidden_layers=26, num_key_value_heads=4, query_pre_attn_scalar=256, rms_norm_eps=1e-6,
    rope_theta=10000.0, sliding_window=4096, torch_dtype="float32", vocab_size=256000),
    dict(vocab_size=256_000, d_model=2304, n_layers=26, n_heads=8, n_kv_heads=4, d_ff=9216,
         head_dim=256, rope_base=1e4, rope_local_base=1e4, tie_embeddings=True, norm_eps=1e-6,
         max_len=8192, mlp_act="gelu_tanh", post_norms=True, norm_plus_one=True,
         embed_scale=True, sliding_window=4096, sliding_window_pattern=2,
         query_pre_attn_scalar=256.0, attn_logit_softcap=50.0, final_logit_softcap=30.0))


HUB_OTHERS["smollm3_3b"] = (dict(
    architectures=["SmolLM3ForCausalLM"], model_type="smollm3", attention_bias=False,
    hidden_act="silu", hidden_size=2048, intermediate_size=11008, max_position_embeddings=65536,
    mlp_bias=False, no_rope_layer_interval=4,
    no_rope_layers=[int((i + 1) % 4 != 0) for i in range(36)], num_attention_heads=16,
    num_hidden_layers=36, num_key_value_heads=4, rms_norm_eps=1e-6, rope_scaling=None,
    rope_theta=5000000.0, sliding_window=None, tie_word_embeddings=True,
    torch_dtype="bfloat16", use_sliding_window=False, vocab_size=128256),
    dict(vocab_size=128_256, d_model=2048, n_layers=36, n_heads=16, n_kv_heads=4, d_ff=11_008,
         head_dim=128, rope_base=5e6, tie_embeddings=True, norm_eps=1e-6, max_len=65536,
         nope_interval=4))
HUB_OTHERS["olmo_2_0425_1b"] = (dict(
    architectures=["Olmo2ForCausalLM"], model_type="olmo2", attention_bias=False,
    hidden_act="silu", hidden_size=2048, intermediate_size=8192, max_position_embeddings=4096,
    num_attention_heads=16, num_hidden_layers=16, num_key_value_heads=16, rms_norm_eps=1e-6,
    rope_scaling=None, rope_theta=500000, tie_word_embeddings=False, torch_dtype="float32",
    vocab_size=100352),
    dict(vocab_size=100_352, d_model=2048, n_layers=16, n_heads=16, n_kv_heads=16, d_ff=8192,
         head_dim=128, rope_base=5e5, tie_embeddings=False, norm_eps=1e-6, max_len=4096,
         qk_norm=True, qk_norm_full=True, post_norms=True, post_norms_only=True))
HUB_OTHERS["phi_3_mini_4k_instruct"] = (dict(
    architectures=["Phi3ForCausalLM"], model_type="phi3", attention_bias=False,
    hidden_act="silu", hidden_size=3072, intermediate_size=8192, max_position_embeddings=4096,
    num_attention_heads=32, num_hidden_layers=32, num_key_value_heads=32,
    original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_scaling=None,
    rope_theta=10000.0, sliding_window=2047, tie_word_embeddings=False,
    torch_dtype="bfloat16", vocab_size=32064),
    dict(vocab_size=32_064, d_model=3072, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=8192,
         head_dim=96, rope_base=1e4, tie_embeddings=False, norm_eps=1e-5, max_len=4096,
         sliding_window=2047))
# Phi-3's fused tensors are written back split, as the Llama / Mistral family


@pytest.mark.parametrize("name", sorted(HUB_OTHERS))
def test_other_families_hub_configs(name):
    hf, want = HUB_OTHERS[name]
    got = convert.model_config_from_hf(hf)
    assert got == model_lib.ModelConfig(**want)
    exported = hf_export.hf_config_from_model_config(got)  # and back, as the same family
    assert exported["model_type"] == EXPORTED_AS.get(hf["model_type"], (hf["model_type"],))[0]
    assert convert.model_config_from_hf(exported) == got


def test_export_refuses_a_config_of_another_family():
    """A config exports only as a family that has exactly its features: transformers would
    otherwise build another model from the export and load it without a word."""
    qwen3, _ = HUB_OTHERS["qwen3_0_6b"]
    cfg = convert.model_config_from_hf(qwen3)
    with pytest.raises(ValueError, match="not llama: llama has no qk_norm"):
        hf_export.hf_config_from_model_config(cfg, "llama")
    with pytest.raises(ValueError, match="not qwen2: qwen2 has qkv_bias, which this config "
                                         "lacks; qwen2 has no qk_norm"):
        hf_export.hf_config_from_model_config(cfg, "qwen2")
    with pytest.raises(ValueError, match="not qwen3: qwen3 has no embed_scale"):
        hf_export.hf_config_from_model_config(dataclasses.replace(cfg, embed_scale=True))
    with pytest.raises(ValueError, match="not mistral: .*sliding_window_pattern"):
        hf_export.hf_config_from_model_config(dataclasses.replace(
            cfg, qk_norm=False, sliding_window=8, sliding_window_pattern=2), "mistral")
    with pytest.raises(ValueError, match="not llama: llama has no sliding_window"):
        hf_export.hf_config_from_model_config(dataclasses.replace(
            cfg, qk_norm=False, sliding_window=8), "llama")
    with pytest.raises(ValueError, match="mistral's window layers use the global RoPE base"):
        hf_export.hf_config_from_model_config(dataclasses.replace(
            cfg, qk_norm=False, sliding_window=8, rope_local_base=10.0))
    with pytest.raises(ValueError, match="'phi3'.*exports as llama, or mistral with a window"):
        hf_export.hf_config_from_model_config(dataclasses.replace(cfg, qk_norm=False), "phi3")


# ---- errors --------------------------------------------------------------------------------

def _copy(saved, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(saved[2], dst)
    return dst


def _edit_config(path, **changes):
    with open(path / "config.json") as f:
        hf = json.load(f)
    hf.update(changes)
    with open(path / "config.json", "w") as f:
        json.dump(hf, f)


def test_unsupported_configs_are_rejected():
    hf = dict(COMMON, model_type="qwen2")
    with pytest.raises(ValueError, match="unsupported architecture model_type='falcon'"):
        convert.model_config_from_hf(dict(hf, model_type="falcon"))
    # RoPE on part of each head (Phi-4-mini's 0.75), in either config.json format; Phi-3's
    # long-context scaling
    for partial in (dict(partial_rotary_factor=0.75), dict(rope_parameters=dict(
            rope_type="default", rope_theta=1e4, partial_rotary_factor=0.75))):
        with pytest.raises(ValueError, match="unsupported partial_rotary_factor=0.75"):
            convert.model_config_from_hf(dict(hf, model_type="phi3", **partial))
    with pytest.raises(ValueError, match="rope scaling 'longrope'"):
        convert.model_config_from_hf(dict(hf, model_type="phi3", rope_scaling=dict(
            type="longrope", short_factor=[1.0] * 4, long_factor=[2.0] * 4)))
    with pytest.raises(ValueError, match="attention_bias=True \\(qwen3 then has an o_proj"):
        convert.model_config_from_hf(dict(hf, model_type="qwen3", attention_bias=True))
    # Mistral: one window on every layer, unscaled RoPE; no per-layer types.
    mistral = dict(hf, model_type="mistral", sliding_window=8)
    with pytest.raises(ValueError, match="layer_types in a mistral config"):
        convert.model_config_from_hf(dict(mistral, layer_types=["full_attention"] * 2))
    with pytest.raises(ValueError, match="rope scaling 'linear' with a sliding window"):
        convert.model_config_from_hf(dict(mistral, rope_scaling=dict(rope_type="linear",
                                                                     factor=2.0)))
    assert convert.model_config_from_hf(dict(mistral, sliding_window=None)).sliding_window == 0
    with pytest.raises(ValueError, match="rope scaling 'dynamic'"):
        convert.model_config_from_hf(dict(hf, rope_scaling=dict(rope_type="dynamic", factor=4.0)))
    with pytest.raises(ValueError, match="hidden_act"):
        convert.model_config_from_hf(dict(hf, hidden_act="gelu"))
    # Qwen2's window starts at layer max_window_layers (default 28): refused only where a layer
    # really uses it.
    with pytest.raises(ValueError, match=r"sliding window attention in layers \[1\]"):
        convert.model_config_from_hf(dict(hf, use_sliding_window=True, sliding_window=8,
                                          max_window_layers=1))
    with pytest.raises(ValueError, match=r"sliding window attention in layers \[0, 1\]"):
        convert.model_config_from_hf(dict(hf, use_sliding_window=True, sliding_window=8,
                                          layer_types=["sliding_attention"] * 2))
    for ok in (dict(max_window_layers=2), {}, dict(sliding_window=None)):
        convert.model_config_from_hf({**hf, "use_sliding_window": True, "sliding_window": 8,
                                      **ok})
    # Both config.json formats: Hub (rope_theta + rope_scaling) and transformers 5.
    old = convert.model_config_from_hf(dict(hf, model_type="llama", rope_theta=5e5))
    new = convert.model_config_from_hf(dict(hf, model_type="llama", rope_parameters=dict(
        rope_type="default", rope_theta=5e5)))
    assert old == new and old.rope_base == 5e5 and not old.qkv_bias and old.head_dim == 8


def test_missing_shard_is_named(saved, mesh, tmp_path):
    path = _copy(saved, tmp_path)
    shard = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))[1]
    os.remove(path / shard)
    with pytest.raises(FileNotFoundError, match=shard):
        convert.load_hf_checkpoint(str(path), mesh, RULES)


def test_shape_mismatch_names_tensor_and_file(saved, mesh, tmp_path):
    family = saved[0]
    path = _copy(saved, tmp_path)
    _edit_config(path, intermediate_size=48)
    name = "model.layers.0.mlp." + ("gate_up_proj" if family in convert.FUSED else "gate_proj")
    with open(path / convert.INDEX_FILE) as f:
        file = json.load(f)["weight_map"][name + ".weight"]
    want = (r"has 128 rows, expected 96" if family in convert.FUSED  # gate and up: 2 x 48
            else r"has shape \[64, 32\], expected \[48, 32\]")
    with pytest.raises(ValueError, match=rf"{file}: tensor '{name}.weight' {want}"):
        convert.load_hf_checkpoint(str(path), mesh, RULES)


def test_missing_and_unexpected_tensors(saved, mesh, tmp_path):
    family, _, _ = saved
    path = _copy(saved, tmp_path)
    more = {"smollm3": dict(no_rope_layers=[1, 0] * 2)}.get(
        family, dict(layer_types=["sliding_attention", "full_attention"] * 2))
    per_layer = family in convert.GEMMA + ("smollm3", "olmo3")  # lists as long as the layers
    _edit_config(path, num_hidden_layers=3,  # the checkpoint has 2
                 **({k: v[:3] for k, v in more.items()} if per_layer else {}))
    with pytest.raises(ValueError, match="lacks tensors.*model.layers.2"):
        convert.load_hf_checkpoint(str(path), mesh, RULES)
    _edit_config(path, num_hidden_layers=2,
                 **({k: v[:2] for k, v in more.items()} if per_layer else {}))
    with open(path / convert.INDEX_FILE) as f:
        index = json.load(f)
    index["weight_map"]["model.layers.0.mlp.gate_proj.bias"] = "extra.safetensors"
    with open(path / convert.INDEX_FILE, "w") as f:
        json.dump(index, f)
    save_file({"model.layers.0.mlp.gate_proj.bias": np.zeros(64, np.float32)},
              str(path / "extra.safetensors"))
    with pytest.raises(ValueError, match="extra.safetensors: unexpected tensor "
                                         "'model.layers.0.mlp.gate_proj.bias'"):
        convert.load_hf_checkpoint(str(path), mesh, RULES)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        convert.load_hf_checkpoint(str(tmp_path), mesh, RULES)


def test_a_multimodal_gemma3_checkpoint_loads_its_language_model(mesh, tmp_path):
    """A Gemma3ForConditionalGeneration folder (the Hub's gemma-3-4b and up): the language
    model's tensors under their multimodal names, the vision tower's left out, logits as
    transformers' multimodal model gives on text; its config.json's text_config as sparse as
    the Hub's (only what differs from Gemma3TextConfig's defaults: our defaults are those)."""
    _, _, extra = FAMILIES["gemma3_text"]
    # transformers' multimodal head does not soft-cap (no released Gemma 3 does)
    text = {**COMMON, **extra, "final_logit_softcapping": None}
    config = transformers.Gemma3Config(
        text_config=text, mm_tokens_per_image=4, vision_config=dict(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            image_size=28, patch_size=14))
    torch.manual_seed(0)
    hf = transformers.Gemma3ForConditionalGeneration(config).eval()
    hf.config._attn_implementation = "eager"
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name
                    else 0.3 * torch.randn_like(p))
    hf.save_pretrained(str(tmp_path))
    with safe_open(str(tmp_path / "model.safetensors"), "np") as f:
        stored = list(f.keys())
    assert any(n.startswith("vision_tower.") for n in stored)
    hub_defaults = transformers.Gemma3TextConfig().to_dict()
    for key, value in convert.GEMMA3_TEXT_DEFAULTS.items():
        if key in hub_defaults:
            assert hub_defaults[key] == value, key
    assert hub_defaults["rope_parameters"]["full_attention"]["rope_theta"] == \
        convert.GEMMA3_TEXT_DEFAULTS["rope_theta"]
    assert hub_defaults["rope_parameters"]["sliding_attention"]["rope_theta"] == \
        convert.GEMMA3_TEXT_DEFAULTS["rope_local_base_freq"]
    cfg_full, graphdef, params = convert.load_hf_checkpoint(str(tmp_path), mesh, RULES)
    toks, mask = _batch()
    diff, scale = logit_diff_vs_hf(graphdef, params, hf, toks, mask)
    assert diff < 1e-4, (diff, scale)
    with open(tmp_path / "config.json") as f:
        full = json.load(f)
    full["text_config"] = {k: v for k, v in full["text_config"].items()
                           if k in ("model_type", "rope_parameters", "layer_types")
                           or hub_defaults.get(k) != v}
    assert "num_attention_heads" in full["text_config"]  # the tiny model's own
    full["text_config"].pop("vocab_size")  # as if it were the default: it comes back as that
    with open(tmp_path / "config.json", "w") as f:
        json.dump(full, f)
    sparse = convert.model_config_from_hf(full)
    assert sparse.vocab_size == 262_208
    assert dataclasses.replace(sparse, vocab_size=V) == cfg_full
