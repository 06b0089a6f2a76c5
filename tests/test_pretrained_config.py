"""Pretrained-model settings: the reference run's defaults per model, validation of the new
fields, the tokenizer read from init_from with its stop tokens, and base_policy's HF import
(runtime fields passed through, a checkpoint of another architecture refused by field)."""
import jax.numpy as jnp
import pytest
from absl import flags
from flax import nnx
from ml_collections import config_flags

from ada_jax import base_policy, hf_export, sampling, sharding
from ada_jax import model as model_lib
from ada_jax import tokenizer as tok_lib
from ada_jax.config_check import validate
from configs import base
from tests.test_hf_tokenizer import LLAMA_SPECIAL, QWEN_SPECIAL, _save


@pytest.mark.parametrize("name", sorted(base.PRETRAINED))
def test_pretrained_variants_carry_the_reference_run(name):
    c = base.get_config(f"model={name}")
    m = c.model
    assert (m.param_dtype, m.dtype, m.remat) == ("float32", "auto", True)
    family = "llama3_chat" if name.startswith("llama3") else "qwen_math"
    assert c.task.template == family
    assert m.eos_token == {"qwen_math": "<|im_end|>", "llama3_chat": "<|eot_id|>"}[family]
    assert (c.sampling.max_prompt_len, c.sampling.max_new_tokens) == (1024, 2048)
    assert c.sampling.max_prompt_len + c.sampling.max_new_tokens <= m.max_len
    assert (c.rl.prompts_per_step, c.rl.minibatches, c.rl.steps) == (512, 4, 400)
    assert (c.checkpoint.every, c.eval.every, c.optim.lr) == (50, 50, 1e-6)
    assert (c.mesh.data, c.mesh.fsdp, c.mesh.tensor) == (1, -1, 1)
    assert c.adaptive.slots == base.PRETRAINED[name]["slots"]
    assert c.sampling.prefill_chunk > 0


def test_embedded_default_is_untouched():
    c = base.get_config("task=embedded")
    assert (c.model.eos_token, c.model.pad_token, c.model.extra_eos_tokens) == ("", "", ())
    assert c.sampling.prefill_chunk == 0 and c.model.param_dtype == "float32"


@pytest.mark.parametrize("field,value,match", [
    ("model.extra_eos_tokens", ("<|endoftext|>", ""), "config.model.extra_eos_tokens"),
    ("sampling.prefill_chunk", -1, "config.sampling.prefill_chunk"),
])
def test_new_fields_are_validated(field, value, match):
    c = base.get_config("model=qwen2_5_math_1_5b")
    c.unlock()
    section, name = field.split(".")
    c[section][name] = value
    with pytest.raises(ValueError, match=match.replace(".", r"\.")):
        validate(c)


def test_bf16_master_weights_with_a_small_lr_warn(caplog):
    c = base.get_config("model=qwen2_5_math_1_5b,task=files")
    c.unlock()
    c.model.param_dtype = "bfloat16"
    validate(c)
    assert "round most updates" in caplog.text


def test_stop_tokens_from_the_command_line():
    argv = ["prog", "--config=configs/base.py:model=qwen2_5_math_7b",
            "--config.model.extra_eos_tokens=('<|endoftext|>', '<|im_start|>')",
            "--config.model.eos_token=<|endoftext|>"]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", "configs/base.py", flag_values=fv, sys_argv=argv)
    fv(argv)
    assert fv.config.model.extra_eos_tokens == ("<|endoftext|>", "<|im_start|>")
    assert fv.config.model.eos_token == "<|endoftext|>"


def test_tokenizer_falls_back_to_init_from(tmp_path):
    path = _save(tmp_path / "qwen", QWEN_SPECIAL, eos_token="<|endoftext|>",
                 pad_token="<|endoftext|>", bos_token=None)
    c = base.get_config("model=qwen2_5_math_1_5b")
    c.model.init_from = path
    tok = tok_lib.load_tokenizer(c)
    assert isinstance(tok, tok_lib.HFTokenizer)
    im_end, eot = tok.encode("<|im_end|>"), tok.encode("<|endoftext|>")
    assert [tok.eos_id] == im_end and [tok.pad_id] == eot  # config eos, tokenizer_config pad
    assert tok_lib.extra_eos_ids(tok, c) == tuple(eot)
    c.model.tokenizer = str(tmp_path / "elsewhere")  # an explicit tokenizer wins
    with pytest.raises(FileNotFoundError, match="config.model.tokenizer="):
        tok_lib.load_tokenizer(c)
    c.model.tokenizer = ""
    c.model.extra_eos_tokens = ("<|eot_id|>",)
    with pytest.raises(ValueError, match="extra_eos_tokens: '<|eot_id|>' is not one token"):
        tok_lib.load_tokenizer(c)


def test_llama_stop_tokens(tmp_path):
    path = _save(tmp_path / "llama", LLAMA_SPECIAL, bos_token="<|begin_of_text|>",
                 eos_token="<|end_of_text|>")  # a base model's tokenizer_config
    c = base.get_config("model=llama3_2_1b")
    c.model.init_from = path
    tok = tok_lib.load_tokenizer(c)
    assert [tok.eos_id] == tok.encode("<|eot_id|>")
    assert tok_lib.extra_eos_ids(tok, c) == tuple(tok.encode("<|end_of_text|>"))


def _tiny_checkpoint(tmp_path, **changes):
    c = base.get_config("model=tiny,task=embedded")
    cfg = model_lib.ModelConfig.from_config(c.model)
    _, params = nnx.split(model_lib.Transformer(cfg, nnx.Rngs(0)))
    hf_export.export_hf(params, cfg, str(tmp_path / "hf"), model_type="llama")
    c.model.init_from = str(tmp_path / "hf")
    c.model.update(changes)
    return c


def test_base_policy_passes_runtime_fields(tmp_path, caplog):
    """The pretrained folder's import takes config.model's runtime fields; the log names the
    folder as the pretrained model, with no word of SFT (none runs)."""
    c = _tiny_checkpoint(tmp_path, dtype="bfloat16", remat=True, max_len=192)
    mesh = sharding.make_mesh(c.mesh)
    with caplog.at_level("INFO", logger="ada_jax"):
        graphdef, params = base_policy.load(c, str(tmp_path / "work"), mesh, None)
    said = [r.getMessage() for r in caplog.records if r.name == "ada_jax.base_policy"]
    assert said == [f"starting policy: the pretrained model in {c.model.init_from}"]
    assert not any("sft" in r.getMessage().lower() for r in caplog.records)
    cfg = nnx.merge(graphdef, params).cfg
    assert (cfg.dtype, cfg.remat, cfg.max_len, cfg.param_dtype) == (
        "bfloat16", True, 192, "float32")
    toks, mask = sampling.left_pad([[5, 6, 7], [8]], 4)
    logits, _ = nnx.merge(graphdef, params)(toks, model_lib.positions_from_mask(mask), mask)
    assert logits.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(logits)))


def test_base_policy_refuses_another_architecture(tmp_path):
    c = _tiny_checkpoint(tmp_path, d_ff=256, rope_base=5e5)
    with pytest.raises(ValueError, match=r"config.model.d_ff=256 but config.json gives 384.*"
                                         r"config.model.rope_base=500000.0"):
        base_policy.load(c, str(tmp_path / "work"), sharding.make_mesh(c.mesh), None)
