"""GGUF import of files with a sentencepiece vocabulary (tokenizer.ggml.model "llama": Llama 2,
Mistral, TinyLlama, Phi-3) and of Phi-3 files (ada_jax/gguf_import.py), on tiny GGUFs written
here as llama.cpp writes them: a sentencepiece BPE model trained here (byte fallback, no text
normalization, spaces kept) gives the vocabulary, its scores and token types (no merges in the
file); a llama file stores q/k rows permuted, a phi3 one q/k/v and gate/up fused and unpermuted,
with an output head of its own.

Oracles: sentencepiece's own encoding of the texts (the tokenizer the file was made from), and
transformers' GGUF tokenizer and model loaded from the file itself (logits at every real
position of a left-padded batch)."""
import os

import numpy as np
import pytest

from ada_jax import convert, gguf_import
from tests import standins
from tests.test_gguf import D, E, F, H, K, L
from tests.test_gguf import TEXTS as BPE_TEXTS
from tests.test_gguf import _weights as tiny_llama_weights

gguf = pytest.importorskip("gguf", reason="the gguf package writes and reads the GGUF files")
spm = pytest.importorskip("sentencepiece")

WINDOW = 2047  # Phi-3-mini's
TEXTS = ["What is 27 + 58?", "Hello world!  two  spaces", "\u00e9t\u00e9 \u00fc \U0001F642 x",
         "x=12345\n\nnew line", "The answer is \\boxed{85}."]


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    """A sentencepiece BPE model as Llama 2's: byte fallback, identity normalization, extra
    spaces kept, a dummy prefix; ids 0-2 are <unk>, <s>, </s>."""
    root = tmp_path_factory.mktemp("spm")
    corpus = root / "corpus.txt"
    rows = standins.math_rows(100)
    corpus.write_text("\n".join([r["problem"] + " " + r["solution"] for r in rows]
                                + BPE_TEXTS * 5))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(root / "sp"), vocab_size=400, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, character_coverage=1.0, minloglevel=2)
    return spm.SentencePieceProcessor(model_file=str(root / "sp.model"))


def _token_types(sp) -> list[int]:
    """llama.cpp's token types: 1 normal, 2 unknown, 3 control, 6 byte."""
    return [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1
            for i in range(sp.get_piece_size())]


def _weights(vocab: int) -> dict[str, np.ndarray]:
    """HF-layout float32 weights of a tiny untied Llama: test_gguf's tied one with an output
    head of its own."""
    rng = np.random.default_rng(1)
    return {**tiny_llama_weights(vocab),
            "lm_head.weight": rng.normal(0, 0.2, (vocab, D)).astype(np.float32)}


def _gguf_tensors(hf: dict, arch: str) -> dict[str, np.ndarray]:
    """GGUF name -> array as llama.cpp stores it: llama's q/k rows permuted; phi3's q/k/v and
    gate/up concatenated by rows, unpermuted."""
    out = {v: hf[k] for k, v in {"model.embed_tokens.weight": "token_embd.weight",
                                 "model.norm.weight": "output_norm.weight",
                                 "lm_head.weight": "output.weight"}.items()}
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        out.update({b + "attn_norm.weight": hf[p + "input_layernorm.weight"],
                    b + "ffn_norm.weight": hf[p + "post_attention_layernorm.weight"],
                    b + "attn_output.weight": hf[p + "self_attn.o_proj.weight"],
                    b + "ffn_down.weight": hf[p + "mlp.down_proj.weight"]})
        q, k, v = (hf[p + f"self_attn.{x}_proj.weight"] for x in "qkv")
        gate, up = hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]
        if arch == "phi3":
            out[b + "attn_qkv.weight"] = np.concatenate([q, k, v])
            out[b + "ffn_up.weight"] = np.concatenate([gate, up])
        else:
            out.update({b + "attn_q.weight": gguf_import.permute(q, H),
                        b + "attn_k.weight": gguf_import.permute(k, K),
                        b + "attn_v.weight": v, b + "ffn_gate.weight": gate,
                        b + "ffn_up.weight": up})
    return out


def write_spm_gguf(path: str, sp, arch: str = "llama", extra: dict = None) -> dict:
    """A tiny `arch` (llama or phi3) GGUF with `sp`'s vocabulary; returns the HF weights before
    quantization (Q8_0 matrices, F32 norms). `extra`: more GGUF tensors (name -> array)."""
    vocab = sp.get_piece_size()
    hf = _weights(vocab)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny {arch}")
    w.add_block_count(L)
    w.add_context_length(4096)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(K)
    w.add_rope_dimension_count(E)
    w.add_rope_freq_base(1e4)
    w.add_layer_norm_rms_eps(1e-5)
    if arch == "phi3":
        w.add_sliding_window(WINDOW)
        w.add_rope_scaling_orig_ctx_len(4096)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([sp.id_to_piece(i) for i in range(vocab)])
    w.add_token_scores([sp.get_score(i) for i in range(vocab)])
    w.add_token_types(_token_types(sp))
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    for name, x in {**_gguf_tensors(hf, arch), **(extra or {})}.items():
        if x.ndim == 1:
            w.add_tensor(name, x)
        else:
            q = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(x, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


def _transformers():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate", reason="transformers loads GGUF files with accelerate")
    return transformers, torch


@pytest.fixture(scope="module", params=["llama", "phi3"])
def converted(request, sp, tmp_path_factory):
    """(arch, gguf file, converted folder, HF weights before quantization)."""
    root = tmp_path_factory.mktemp(f"spm_{request.param}")
    file, out = str(root / "tiny.gguf"), str(root / "hf")
    hf = write_spm_gguf(file, sp, request.param)
    got = gguf_import.gguf_to_hf(file, out)
    assert got["config"]["model_type"] == request.param
    return request.param, file, out, hf


def _our_tokenizer(out):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(out, "tokenizer.json"))


def test_the_tokenizer_encodes_as_sentencepiece_and_transformers(converted, sp):
    """The ids sentencepiece itself gives (one "▁" before the text, also before a leading space,
    spaces kept, bytes for the characters it lacks), which transformers' GGUF tokenizer gives
    too, but for a llama file's text that starts with a space (its Metaspace adds no "▁"
    there). Decoding gives the text back."""
    transformers, _ = _transformers()
    arch, file, out, _ = converted
    ours = _our_tokenizer(out)
    theirs = transformers.AutoTokenizer.from_pretrained(os.path.dirname(file),
                                                        gguf_file=os.path.basename(file))
    for text in TEXTS + [" leading space", "  two leading"]:
        got = ours.encode(text, add_special_tokens=False).ids
        assert got == sp.encode(text), text
        if arch == "phi3" or not text.startswith(" "):
            assert got == theirs.encode(text, add_special_tokens=False), text
        assert ours.decode(got) == text
    assert any(sp.is_byte(i) for t in TEXTS for i in sp.encode(t))  # byte fallback exercised


def test_config_marks_bos_and_the_family(converted, sp):
    """llama.cpp adds BOS to a sentencepiece vocabulary whose file does not say otherwise; the
    folder is Phi-3's family with its window (or Llama's) and its fused tensors as
    transformers stores them."""
    import json
    arch, _, out, hf = converted
    with open(os.path.join(out, "tokenizer_config.json")) as f:
        tok_config = json.load(f)
    assert (tok_config["add_bos_token"], tok_config["bos_token"]) == (True, "<s>")
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    cfg = convert.model_config_from_hf(config)
    assert (cfg.sliding_window, cfg.tie_embeddings, cfg.head_dim) == (
        WINDOW if arch == "phi3" else 0, False, E)
    names = set(_load(out))
    fused = {"model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"}
    assert fused <= names if arch == "phi3" else not fused & names


def _load(folder):
    from safetensors.numpy import load_file
    return load_file(os.path.join(folder, "model.safetensors"))


def test_ada_jax_runs_the_folder_as_transformers_runs_the_gguf(converted, sp):
    """The folder's logits in ada_jax are transformers' from the GGUF file itself, at every real
    position of a left-padded batch."""
    transformers, torch = _transformers()
    from tests.test_gguf import _assert_logits_match

    class SpEncoder:  # _assert_logits_match's tokenizer interface, on sentencepiece's ids
        def encode(self, text, add_special_tokens=False):
            return type("Encoding", (), {"ids": [sp.bos_id(), *sp.encode(text)]})
    arch, file, out, _ = converted
    # transformers' Phi-3 config defaults pad_token_id to 32000, past this tiny vocabulary
    extra = dict(pad_token_id=sp.unk_id()) if arch == "phi3" else {}
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(file), gguf_file=os.path.basename(file), dtype=torch.float32,
        **extra).eval()
    assert type(ref).__name__ == ("Phi3ForCausalLM" if arch == "phi3" else "LlamaForCausalLM")
    _assert_logits_match(out, ref, SpEncoder())


def test_phi3_long_context_and_partial_rotary_files_are_refused(sp, tmp_path):
    """Phi-3's 128k files carry longrope factor tensors: refused by name before anything is
    written; RoPE on part of each head is written as such, and refused on load."""
    file, out = str(tmp_path / "long.gguf"), str(tmp_path / "hf")
    factors = {"rope_factors_long.weight": np.ones(E // 2, np.float32),
               "rope_factors_short.weight": np.ones(E // 2, np.float32)}
    write_spm_gguf(file, sp, "phi3", extra=factors)
    with pytest.raises(gguf_import.GGUFError, match="rope_factors_long.weight, "
                                                    "rope_factors_short.weight: long-context"):
        gguf_import.gguf_to_hf(file, out)
    assert not os.path.exists(out)
    meta = {"general.architecture": "phi3", "phi3.embedding_length": D,
            "phi3.attention.head_count": H, "phi3.rope.dimension_count": E // 2,
            "phi3.feed_forward_length": F, "phi3.block_count": L, "phi3.context_length": 4096,
            "phi3.attention.layer_norm_rms_epsilon": 1e-5, "tokenizer.ggml.tokens": ["a"] * 8}
    config = gguf_import.hf_config(meta, tied=False)
    assert config["partial_rotary_factor"] == 0.5
    with pytest.raises(ValueError, match="unsupported partial_rotary_factor=0.5"):
        convert.model_config_from_hf(config)
