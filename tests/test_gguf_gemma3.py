"""GGUF import of Gemma 3 (ada_jax/gguf_import.py) on a tiny gemma3 GGUF written here with the
`gguf` package's writer as llama.cpp writes one: norms stored as 1 + w, Q8_0 / Q5_0 matrices, 6
layers (5 local with a 4-token window, then a global one), a sentencepiece-style vocabulary
(byte tokens, "▁" for spaces, tokens of spaces stored as spaces, control and user-defined tokens,
no merges). The converted folder equals transformers' own GGUF load tensor for tensor, its
tokenizer encodes as transformers' GGUF tokenizer, and ada_jax computes transformers' logits and
greedy tokens from it (prompts longer than the window). An unsupported architecture is refused from the header alone."""
import json
import os

import numpy as np
import pytest

from ada_jax import convert, evaluate, gguf_import, sampling, sharding
from ada_jax import tokenizer as tok_lib
from configs import base

gguf = pytest.importorskip("gguf", reason="the gguf package writes and reads the GGUF files")

D, F, L, H, K, E, WINDOW = 64, 128, 6, 4, 2, 16, 4
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
USER = ["<start_of_turn>", "<end_of_turn>"]
PIECES = list("abcdefghijklmnopqrstuvwxyz0123456789.,?!+=\u2581") + [
    "\u2581t", "th", "he", "\u2581the", "in", "\u2581a", "an", "is", "\u2581is", "er", "\u2581w",
    "wh", "\u2581wh", "at", "\u2581what", "12", "  ", "   "]
TEXTS = ["what is the answer?", "  the  theater   is 12 + 3 = 15", "é ü ñ 🙂 x",
         "<start_of_turn>user\nwhat<end_of_turn>", "<bos>a<eos>", "\n\n  \t tab"]


def _vocab() -> tuple[list[str], list[int]]:
    tokens = SPECIAL + USER + [f"<0x{b:02X}>" for b in range(256)] + PIECES
    types = [3] * len(SPECIAL) + [4] * len(USER) + [6] * 256 + [1] * len(PIECES)
    return tokens, types


def _weights(vocab: int, seed: int = 0, arch: str = "gemma3") -> dict[str, np.ndarray]:
    """HF-layout float32 weights of a tiny tied Gemma 3 (norm weights w: the model scales by
    1 + w); Gemma 2's have no q/k norms."""
    rng = np.random.default_rng(seed)
    w = {"model.embed_tokens.weight": rng.normal(0, 0.5, (vocab, D)),
         "model.norm.weight": rng.normal(0, 0.1, D)}
    for i in range(L):
        p = f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            w[p + n + ".weight"] = rng.normal(0, 0.1, D)
        w.update({p + "self_attn.q_norm.weight": rng.normal(0, 0.1, E),
                  p + "self_attn.k_norm.weight": rng.normal(0, 0.1, E),
                  p + "self_attn.q_proj.weight": rng.normal(0, 0.2, (H * E, D)),
                  p + "self_attn.k_proj.weight": rng.normal(0, 0.2, (K * E, D)),
                  p + "self_attn.v_proj.weight": rng.normal(0, 0.2, (K * E, D)),
                  p + "self_attn.o_proj.weight": rng.normal(0, 0.2, (D, H * E)),
                  p + "mlp.gate_proj.weight": rng.normal(0, 0.2, (F, D)),
                  p + "mlp.up_proj.weight": rng.normal(0, 0.2, (F, D)),
                  p + "mlp.down_proj.weight": rng.normal(0, 0.2, (D, F))})
        if arch == "gemma2":
            del w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]
    return {k: v.astype(np.float32) for k, v in w.items()}


def write_tiny_gemma3(path: str, arch: str = "gemma3") -> dict[str, np.ndarray]:
    """A tiny gemma3 (gemma2: with soft caps 3 and 5) GGUF as llama.cpp writes one; returns the
    HF weights before quantization."""
    tokens, types = _vocab()
    hf = _weights(len(tokens), arch=arch)
    names = {v: k for k, v in gguf_import.GLOBAL_TENSORS.items()}
    names.update({f"model.layers.{i}.{v}.weight": f"blk.{i}.{k}.weight"
                  for i in range(L) for k, v in gguf_import.ARCHITECTURES[arch].items()})
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny {arch}")
    if arch == "gemma2":
        w.add_attn_logit_softcapping(3.0)
        w.add_final_logit_softcapping(5.0)
    w.add_block_count(L)
    w.add_context_length(1024)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(K)
    w.add_key_length(E)
    w.add_value_length(E)
    w.add_rope_freq_base(1e5)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(WINDOW)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(len(tokens))])
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    for i, (name, x) in enumerate(hf.items()):
        if x.ndim == 1:
            w.add_tensor(names[name], x + np.float32(1))  # llama.cpp stores Gemma's 1 + w
            continue
        q = gguf.GGMLQuantizationType["Q8_0" if i % 2 or "embed" in name else "Q5_0"]
        w.add_tensor(names[name], gguf.quants.quantize(x, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(gguf file, converted folder, HF weights before quantization)."""
    root = tmp_path_factory.mktemp("gemma3")
    file = str(root / "tiny.gguf")
    hf = write_tiny_gemma3(file)
    out = str(root / "hf")
    got = gguf_import.gguf_to_hf(file, out)
    assert got["types"] == ["F32", "Q5_0", "Q8_0"]
    return file, out, hf


def _transformers():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate", reason="transformers loads GGUF files with accelerate")
    return transformers, torch


def _assert_logits_match(out, ref):
    """The folder `out` loaded in ada_jax gives transformers' model `ref`'s logits at every real
    position of TEXTS left-padded (prompts longer than 2 windows); returns (graphdef, params,
    toks, mask)."""
    from tests.helpers import logit_diff_vs_hf
    mesh = sharding.make_mesh(dict(data=1, fsdp=-1, tensor=1))
    _, graphdef, params = convert.load_hf_checkpoint(out, mesh,
                                                     base.get_config("").sharding_rules)
    tok = tok_lib.HFTokenizer(out)
    ids = [tok_lib.prompt_ids(tok, t) for t in TEXTS]
    toks, mask = sampling.left_pad(ids, max(map(len, ids)), tok.pad_id)
    assert max(map(len, ids)) > 2 * WINDOW
    diff, scale = logit_diff_vs_hf(graphdef, params, ref, toks, mask)
    assert diff < 1e-4 * max(scale, 1.0), (diff, scale)
    return graphdef, params, toks, mask


def test_config_and_tensors_equal_transformers_gguf_load(converted):
    """config.json is Gemma 3's (5 local layers to a global one, the window, both RoPE bases)
    and every tensor equals what transformers' GGUF loader builds (norms back to w)."""
    file, out, hf = converted
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    assert (cfg["model_type"], cfg["sliding_window"], cfg["head_dim"]) == ("gemma3_text",
                                                                          WINDOW, E)
    assert cfg["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    ours = convert.model_config_from_hf(cfg)
    assert (ours.sliding_window_pattern, ours.rope_base, ours.rope_local_base,
            ours.query_pre_attn_scalar, ours.tie_embeddings) == (6, 1e5, 1e4, E, True)
    from safetensors.numpy import load_file
    tensors = load_file(os.path.join(out, "model.safetensors"))
    assert sorted(tensors) == sorted(hf)
    for name, x in hf.items():
        if x.ndim == 1:  # F32: exact up to the +1 / -1 round trip
            np.testing.assert_allclose(tensors[name], x, atol=1e-7, err_msg=name)
    transformers, torch = _transformers()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(file), gguf_file=os.path.basename(file), dtype=torch.float32)
    sd = model.state_dict()
    for name, x in tensors.items():
        np.testing.assert_array_equal(x, sd[name].numpy(), err_msg=name)


def test_tokenizer_encodes_as_transformers_gguf_tokenizer(converted):
    file, out, _ = converted
    transformers, _ = _transformers()
    ref = transformers.AutoTokenizer.from_pretrained(os.path.dirname(file),
                                                     gguf_file=os.path.basename(file))
    ours = tok_lib.HFTokenizer(out)
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (2, 1, 0)
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == text
    assert ours.encode("<end_of_turn>") == [6]
    assert tok_lib.prompt_ids(ours, "what") == ref.encode("what")  # BOS first


def test_ada_jax_runs_the_folder_as_transformers_runs_the_gguf(converted):
    """Logits at every real position of left-padded prompts longer than the window, and greedy
    tokens (ada_jax's cached decode) equal to transformers' from the folder (the same tensors as
    its GGUF load; its GGUF config assumes query_pre_attn_scalar 256 where llama.cpp scales by
    head_dim, 16 here: the same for Gemma 3 270M-12B, whose head_dim is 256)."""
    _, out, _ = converted
    transformers, torch = _transformers()
    ref = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    graphdef, params, toks, mask = _assert_logits_match(out, ref)
    N = 10
    import jax
    got = np.asarray(sampling.sample(graphdef, params, toks, mask, jax.random.key(0),
                                     cfg=sampling.SamplingConfig(max_new_tokens=N, eos_id=1,
                                                                 pad_id=0, temperature=0)
                                     ).tokens_BN)
    with torch.no_grad():
        want = ref.generate(torch.tensor(np.asarray(toks)), attention_mask=torch.tensor(
            np.asarray(mask), dtype=torch.long), do_sample=False, max_new_tokens=N,
            eos_token_id=1, pad_token_id=0)[:, toks.shape[1]:].numpy()
    np.testing.assert_array_equal(got, np.pad(want, ((0, 0), (0, N - want.shape[1]))))


def test_unsupported_architecture_is_refused_from_the_header(tmp_path, monkeypatch):
    """One line naming the architecture and the supported ones, before any tensor is read."""
    file = str(tmp_path / "falcon.gguf")
    w = gguf.GGUFWriter(file, "falcon")
    w.add_token_list(["a"] * 1000)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    monkeypatch.setattr(gguf, "GGUFReader", None)  # reading the file would fail otherwise
    with pytest.raises(gguf_import.GGUFError) as e:
        gguf_import.gguf_to_hf(file, str(tmp_path / "out"))
    assert str(e.value) == (f"{file}: architecture 'falcon' is not supported; supported: "
                            f"llama, qwen2, qwen3, phi3, gemma2, gemma3")
    assert not os.path.exists(tmp_path / "out")


def test_a_base_model_without_chat_template_gets_the_plain_prompt(converted):
    """model=hf on the folder (no chat template): the plain "Question: ...\\nAnswer:" prompt
    after BOS, stopping at <eos>."""
    from ada_jax.config_check import validate
    _, out, _ = converted
    c = base.get_config("model=hf,task=files,smoke=True")
    c.model.init_from = out
    c.task.files = "unused.jsonl"
    validate(c)
    assert (c.task.template, c.model.eos_token, c.model.extra_eos_tokens) == ("plain", "<eos>",
                                                                              ())
    assert (c.model.sliding_window, c.model.qk_norm, c.model.mlp_act) == (WINDOW, True,
                                                                          "gelu_tanh")
    tok = tok_lib.load_tokenizer(c)
    assert tok_lib.prompt_text(tok, "what is 12?", "plain") == "Question: what is 12?\nAnswer:"
    ids = tok_lib.encode_prompt(tok, "what is 12?", "plain")
    assert ids[0] == 2 and tok.decode(ids[1:]) == "Question: what is 12?\nAnswer:"
    # ... and stops where a base model writes its next question
    stops = tok_lib.stop_sequences(tok, c)
    assert [tok.decode(s) for s in stops] == ["\nQuestion:", "\n\nQuestion:"]
    assert evaluate.sampling_config(c, tok, 1.0).stop_seqs == stops
    c.sampling.stop_strings = ("",)  # what --config.sampling.stop_strings='' gives: none
    assert tok_lib.stop_sequences(tok, c) == ()
    c.sampling.stop_strings = (" the", "\n\nQuestion:")
    assert [tok.decode(s) for s in tok_lib.stop_sequences(tok, c)] == [" the", "\n\nQuestion:"]


def test_a_few_shot_file_comes_before_every_plain_question(converted, tmp_path):
    """config.task.few_shot_file: its text, before "Question: ..." (after BOS), in training and
    evaluation prompts alike; refused with a non-plain template, empty, or unreadable."""
    from ada_jax.config_check import validate
    from ada_jax.tasks.problem import Problem
    _, out, _ = converted
    shots = tok_lib.few_shot_text([("What is 2 + 2?", "4"), ("What is 9 - 3?", "6")])
    assert shots == ("Question: What is 2 + 2?\nAnswer: 4\n\n"
                     "Question: What is 9 - 3?\nAnswer: 6\n\n")
    (tmp_path / "shots.txt").write_text(shots)
    c = base.get_config("model=hf,task=files,smoke=True")
    c.model.init_from, c.task.files = out, "unused.jsonl"
    c.task.few_shot_file = str(tmp_path / "shots.txt")
    validate(c)
    tok = tok_lib.load_tokenizer(c)
    want = shots + "Question: what is 12?\nAnswer:"
    assert tok_lib.prompt_text(tok, "what is 12?", "plain") == want
    ids, mask = evaluate.encode_prompts(
        tok, [Problem(id=0, question="what is 12?", answer="12")], "plain", 512)
    ids = [int(i) for i, m in zip(ids[0], mask[0]) if m]
    assert ids[0] == 2 and tok.decode(ids[1:]) == want
    c.task.template = "embedded"
    with pytest.raises(ValueError, match="few_shot_file .* plain template.*'embedded'"):
        tok_lib.load_tokenizer(c)
    c.task.template = "plain"
    (tmp_path / "empty.txt").write_text(" \n")
    for path, why in ((tmp_path / "empty.txt", "is empty"), (tmp_path / "none.txt", "No such")):
        c.task.few_shot_file = str(path)
        with pytest.raises(ValueError, match=f"few_shot_file=.*{why}"):
            tok_lib.load_tokenizer(c)


def test_a_gemma2_file_runs_as_transformers_runs_it(tmp_path):
    """Gemma 2: every other layer local, no q/k norms, the file's soft caps (3 and 5: they
    act), llama.cpp's query scale (head_dim): the folder's tensors equal transformers' GGUF
    load, its config is Gemma 2's, and ada_jax computes transformers' logits from it."""
    from safetensors.numpy import load_file
    file, out = str(tmp_path / "tiny.gguf"), str(tmp_path / "hf")
    hf = write_tiny_gemma3(file, "gemma2")
    got = gguf_import.gguf_to_hf(file, out)["config"]
    assert (got["model_type"], got["sliding_window"], got["query_pre_attn_scalar"]) == (
        "gemma2", WINDOW, E)
    assert got["layer_types"] == ["sliding_attention", "full_attention"] * 3
    cfg = convert.model_config_from_hf(got)
    assert (cfg.qk_norm, cfg.sliding_window_pattern, cfg.rope_local_base,
            cfg.attn_logit_softcap, cfg.final_logit_softcap) == (False, 2, 1e5, 3.0, 5.0)
    tensors = load_file(os.path.join(out, "model.safetensors"))
    assert sorted(tensors) == sorted(hf)
    transformers, torch = _transformers()
    sd = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file="tiny.gguf", dtype=torch.float32).state_dict()
    for name, x in tensors.items():
        np.testing.assert_array_equal(x, sd[name].numpy(), err_msg=name)
    ref = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(ref).__name__ == "Gemma2ForCausalLM"
    _assert_logits_match(out, ref)
