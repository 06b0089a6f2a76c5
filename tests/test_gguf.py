"""GGUF import (ada_jax/gguf_import.py) and the checkpoint's own chat template and stop tokens,
on a tiny llama GGUF written here with the `gguf` package's writer (no downloads): Q8_0 / Q4_1
matrices with llama.cpp's q/k row permutation, a byte-level BPE vocabulary with SmolLM2's
pre-tokenizer, control tokens, chat template and eos id in its metadata.

The converted folder holds the dequantized tensors in HF layout (equal to gguf's dequantizer and
to transformers' own GGUF loader), a tokenizer that encodes as the one written, and runs in
ada_jax (model=hf) with transformers' logits; prompts render as transformers'
apply_chat_template does for SmolLM2 and the Qwen2 / Llama-3 stand-ins (tests/standins.py)."""
import json
import os
import re

import numpy as np
import pytest

from ada_jax import convert, gguf_import, sharding
from ada_jax import tokenizer as tok_lib
from ada_jax.config_check import validate
from configs import base
from tests import standins

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install -e '.[real]' or "
                                          "'.[test]') writes and reads the GGUF files")

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# SmolLM2-135M-Instruct's chat template, as its GGUF metadata carries it.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
D, F, L, H, K, E = 64, 128, 2, 4, 2, 16  # d_model, d_ff, layers, heads, kv heads, head dim
TEXTS = ["What is 27 + 58?", "Hello world!  \n\n x=12345", "<|im_start|>user\nhi<|im_end|>\n",
         "The answer is \\boxed{85}."]


def _tokenizer():
    """SmolLM2's kind of tokenizer: digits split one by one, byte-level BPE, specials first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    corpus = [r["problem"] + " " + r["solution"] for r in standins.math_rows(100)]
    corpus += ["system user assistant Please reason step by step, and put your final answer",
               "You are a helpful AI assistant named SmolLM, trained by Hugging Face"] * 10
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=320, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def _weights(vocab: int, seed: int = 0, arch: str = "llama") -> dict[str, np.ndarray]:
    """HF-layout float32 weights of a tiny tied llama (qwen2: with q/k/v biases; qwen3: with
    q/k norms)."""
    rng = np.random.default_rng(seed)
    w = {"model.embed_tokens.weight": rng.normal(0, 0.5, (vocab, D)),
         "model.norm.weight": 1 + rng.normal(0, 0.1, D)}
    for i in range(L):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": 1 + rng.normal(0, 0.1, D),
                  p + "post_attention_layernorm.weight": 1 + rng.normal(0, 0.1, D),
                  p + "self_attn.q_proj.weight": rng.normal(0, 0.2, (H * E, D)),
                  p + "self_attn.k_proj.weight": rng.normal(0, 0.2, (K * E, D)),
                  p + "self_attn.v_proj.weight": rng.normal(0, 0.2, (K * E, D)),
                  p + "self_attn.o_proj.weight": rng.normal(0, 0.2, (D, H * E)),
                  p + "mlp.gate_proj.weight": rng.normal(0, 0.2, (F, D)),
                  p + "mlp.up_proj.weight": rng.normal(0, 0.2, (F, D)),
                  p + "mlp.down_proj.weight": rng.normal(0, 0.2, (D, F))})
        if arch == "qwen2":
            w.update({p + f"self_attn.{x}_proj.bias": rng.normal(0, 0.2, n * E)
                      for x, n in (("q", H), ("k", K), ("v", K))})
        if arch == "qwen3":
            w.update({p + f"self_attn.{x}_norm.weight": 1 + rng.normal(0, 0.1, E)
                      for x in ("q", "k")})
    return {k: v.astype(np.float32) for k, v in w.items()}


def write_tiny_gguf(path: str, qtype: str = "Q8_0", arch: str = "llama", weights: str = None,
                    extra: dict = None, metadata: dict = None) -> tuple[dict, object]:
    """A tiny llama (qwen2, qwen3) GGUF as llama.cpp's converter writes one: returns (the HF
    weights before quantization, the tokenizer). Matrices in `qtype` (embedding Q8_0), norms
    and biases F32, llama's q/k rows (and biases) permuted (gguf_import.permute), no
    output.weight (tied). `weights`: the family of the weights (default `arch`'s); `extra`:
    more HF tensors; `metadata`: more `arch.` keys (str, int or float values)."""
    tok = _tokenizer()
    vocab = tok.get_vocab_size()
    tokens = [tok.id_to_token(i) for i in range(vocab)]
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    hf = {**_weights(vocab, arch=weights or arch), **(extra or {})}
    names = {v: k for k, v in gguf_import.GLOBAL_TENSORS.items()}
    names.update({f"model.layers.{i}.{v}.{kind}": f"blk.{i}.{k}.{kind}" for i in range(L)
                  for k, v in gguf_import.ARCHITECTURES[arch].items()
                  for kind in ("weight", "bias")})
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny {arch}")
    w.add_block_count(L)
    w.add_context_length(1024)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(K)
    w.add_rope_dimension_count(E)
    w.add_rope_freq_base(1e5)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIAL else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(SMOLLM2_TEMPLATE)
    w.add_key_length(E)
    w.add_value_length(E)
    for key, value in (metadata or {}).items():
        add = {str: w.add_string, int: w.add_uint32, float: w.add_float32}[type(value)]
        add(f"{arch}.{key}", value)
    for name, x in hf.items():
        if arch == "llama" and "q_proj" in name:
            x = gguf_import.permute(x, H)
        elif arch == "llama" and "k_proj" in name:
            x = gguf_import.permute(x, K)
        if x.ndim == 1:
            w.add_tensor(names[name], x)
            continue
        q = gguf.GGMLQuantizationType["Q8_0" if "embed" in name else qtype]
        w.add_tensor(names[name], gguf.quants.quantize(x, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf, tok


@pytest.fixture(scope="module", params=["Q8_0", "Q4_1"])
def converted(request, tmp_path_factory):
    """(gguf file, converted folder, HF weights before quantization, tokenizer, qtype)."""
    root = tmp_path_factory.mktemp(f"gguf_{request.param}")
    file = str(root / "tiny.gguf")
    hf, tok = write_tiny_gguf(file, request.param)
    out = str(root / "hf")
    got = gguf_import.gguf_to_hf(file, out)
    assert got["types"] == sorted({"F32", "Q8_0", request.param})
    return file, out, hf, tok, request.param


def _load(folder):
    from safetensors.numpy import load_file
    return load_file(os.path.join(folder, "model.safetensors"))


def test_permute_is_llama_cpp_s_and_unpermute_undoes_it():
    w = np.arange(2 * 8 * 3).reshape(2 * 8, 3)  # 2 heads of 8 rows
    p = gguf_import.permute(w, 2)
    # llama.cpp interleaves each head's halves: rows (0, 4, 1, 5, 2, 6, 3, 7) of HF's head
    np.testing.assert_array_equal(p[:8, 0], w[[0, 4, 1, 5, 2, 6, 3, 7], 0])
    np.testing.assert_array_equal(gguf_import.unpermute(p, 2), w)


def test_tensors_are_dequantized_into_hf_layout(converted):
    """Every tensor equals gguf's own dequantization of what was written, with the q/k
    permutation undone, and lies within the quantization error of the original weights."""
    _, out, hf, _, qtype = converted
    ours = _load(out)
    assert sorted(ours) == sorted(hf)  # tied: no lm_head
    tol = {"Q8_0": 0.02, "Q4_1": 0.25}
    for name, x in hf.items():
        assert ours[name].dtype == np.float32 and ours[name].shape == x.shape, name
        if x.ndim == 1:
            np.testing.assert_array_equal(ours[name], x)
            continue
        heads = H if "q_proj" in name else K if "k_proj" in name else None
        q = gguf.GGMLQuantizationType["Q8_0" if "embed" in name else qtype]
        stored = gguf_import.permute(x, heads) if heads else x
        want = gguf.quants.dequantize(gguf.quants.quantize(stored, q), q)
        np.testing.assert_array_equal(ours[name], gguf_import.unpermute(want, heads)
                                      if heads else want)
        assert np.abs(ours[name] - x).max() < tol[qtype] * np.abs(x).max(), name


def test_config_tokenizer_template_and_eos(converted):
    _, out, _, tok, _ = converted
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (H, K, E)
    assert (cfg["tie_word_embeddings"], cfg["rope_theta"], cfg["rms_norm_eps"]) == (
        True, 1e5, 1e-5)
    assert cfg["vocab_size"] == tok.get_vocab_size()
    with open(os.path.join(out, "generation_config.json")) as f:
        assert json.load(f) == dict(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    ours = tok_lib.HFTokenizer(out)
    for text in TEXTS:  # digits one by one, specials whole, as the tokenizer written
        assert ours.encode(text) == tok.encode(text, add_special_tokens=False).ids, text
        assert ours.decode(ours.encode(text)) == text
    assert ours.encode("<|im_end|>") == [2] and ours.eos_id == 2 and ours.bos_id == 1
    assert ours.chat_template == SMOLLM2_TEMPLATE
    assert tok_lib.checkpoint_chat(out) == dict(template="chat", eos_token="<|im_end|>",
                                                extra_eos_tokens=())


def test_model_hf_uses_the_checkpoint_s_template_not_the_llama3_guess(converted):
    """model_type llama, but the checkpoint's own ChatML template and <|im_end|> (not
    Llama-3's llama3_chat / <|eot_id|>); extra_eos_tokens '' names none."""
    _, out, _, _, _ = converted
    c = base.get_config("model=hf,task=files,smoke=True")
    c.model.init_from = out
    c.task.files = "unused.jsonl"
    validate(c)
    assert (c.task.template, c.model.eos_token, c.model.extra_eos_tokens) == (
        "chat", "<|im_end|>", ())
    tok = tok_lib.load_tokenizer(c)
    text = tok_lib.prompt_text(tok, "What is 2 + 3?", c.task.template)
    assert text == ("<|im_start|>system\n" + tok_lib.SYSTEM_MATH + "<|im_end|>\n<|im_start|>"
                    "user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
    assert tok_lib.encode_prompt(tok, "What is 2 + 3?", "chat") == tok.encode(text)  # no BOS
    c.task.system_prompt = ""  # no system message: the template's own default
    tok = tok_lib.load_tokenizer(c)
    assert "named SmolLM" in tok_lib.prompt_text(tok, "What is 2 + 3?", "chat")
    c.model.extra_eos_tokens = ("",)  # what --config.model.extra_eos_tokens='' gives
    validate(c)
    assert c.model.extra_eos_tokens == ("",) and tok_lib.extra_eos_ids(tok, c) == ()
    c.model.extra_eos_tokens = ("<|endoftext|>",)
    assert tok_lib.extra_eos_ids(tok, c) == (0,)


def _assert_logits_match(out, ref, tok):
    """The folder `out` loaded in ada_jax gives transformers' model `ref`'s logits at every real
    position of TEXTS left-padded."""
    from ada_jax.sampling import left_pad
    from tests.helpers import logit_diff_vs_hf
    mesh = sharding.make_mesh(dict(data=1, fsdp=-1, tensor=1))
    _, graphdef, params = convert.load_hf_checkpoint(
        out, mesh, base.get_config("task=embedded").sharding_rules)
    ids = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
    toks, mask = left_pad(ids, max(map(len, ids)), 2)
    diff, scale = logit_diff_vs_hf(graphdef, params, ref, toks, mask)
    assert diff < 1e-4 * max(scale, 1.0), (diff, scale)


def test_ada_jax_runs_the_converted_folder_as_transformers_runs_the_gguf(converted):
    """The folder loads in ada_jax with the logits transformers computes from the GGUF file
    itself (its own dequantization and q/k unpermutation), and equal to the folder's."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate", reason="transformers loads GGUF files with accelerate")
    file, out, _, tok, _ = converted
    from_gguf = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(file), gguf_file=os.path.basename(file), dtype=torch.float32).eval()
    sd = from_gguf.state_dict()
    for name, x in _load(out).items():
        np.testing.assert_array_equal(x, sd[name].numpy(), err_msg=name)
    _assert_logits_match(out, from_gguf, tok)


def _message_lists():
    """20 conversations: 10 questions, each without and with a system message; some multi-turn,
    some with surrounding whitespace."""
    questions = ["What is 2 + 3?", "  Simplify $\\sqrt{50}$.\n", "Compute 12 * 12.",
                 "Solve $2x = 8$.", "What is 7 - 9?", "Name a prime above 10.",
                 "Is 91 prime?", "What is 1/2 + 1/3?", "Round 2.718 to one digit.",
                 "Factor $x^2 - 1$."]
    lists = []
    for i, q in enumerate(questions):
        turns = [dict(role="user", content=q)]
        if i % 3 == 2:  # a earlier exchange first
            turns = [dict(role="user", content="Hi"), dict(role="assistant", content="Hello!"),
                     *turns]
        lists.append(turns)
        lists.append([dict(role="system", content=[tok_lib.SYSTEM_MATH, "Be brief.",
                                                   " Answer in one line. "][i % 3])] + turns)
    return lists


@pytest.fixture(scope="module")
def templated(tmp_path_factory, converted):
    """{name: folder}: SmolLM2 (the converted GGUF) and the Qwen2 / Llama-3 stand-ins."""
    root = tmp_path_factory.mktemp("templates")
    return {"smollm2": converted[1],
            **{f: standins.build_tokenizer(str(root / f), f) for f in ("qwen2", "llama")}}


@pytest.mark.parametrize("name", ["smollm2", "qwen2", "llama"])
def test_chat_template_renders_as_transformers(name, templated):
    """render_chat equals transformers' apply_chat_template(tokenize=False) on 20 message
    lists (and render_prompt / encode_prompt on [system?, user] equal its text and ids), with
    the date our fixed clock gives (TEMPLATE_DATE) passed to Llama-3's template."""
    transformers = pytest.importorskip("transformers")
    folder = templated[name]
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    ours = tok_lib.HFTokenizer(folder)
    date = tok_lib.TEMPLATE_DATE.strftime("%d %b %Y")
    lists = _message_lists()
    assert len(lists) == 20 and sum(m[0]["role"] == "system" for m in lists) == 10
    for messages in lists:
        want = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                      date_string=date)
        assert tok_lib.render_chat(ours.chat_template, messages, ours.special_tokens) == want
        if len(messages) > 2 or messages[-1]["role"] != "user":
            continue
        system = messages[0]["content"] if len(messages) == 2 else None
        ours.system_prompt = system
        question = messages[-1]["content"]
        assert tok_lib.prompt_text(ours, question, "chat") == want
        ids = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                     return_dict=False, date_string=date)
        assert tok_lib.encode_prompt(ours, question, "chat") == list(ids)


def test_stand_ins_stop_at_their_own_turn_end(tmp_path):
    """The Qwen2.5-Math stand-in's tokenizer_config says eos <|endoftext|>, its template ends
    turns with <|im_end|>: both stop, the turn end first (it ends the SFT targets too)."""
    path = standins.build_tokenizer(str(tmp_path / "qwen2"), "qwen2")
    assert tok_lib.checkpoint_chat(path) == dict(
        template="chat", eos_token="<|im_end|>", extra_eos_tokens=("<|endoftext|>",))
    tok = tok_lib.HFTokenizer(path)
    start = tok.encode("<|im_start|>")
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump(dict(eos_token_id=start), f)  # generation_config's ids come before the eos
    assert tok_lib.checkpoint_chat(path)["extra_eos_tokens"] == ("<|im_start|>", "<|endoftext|>")


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_files_convert_unpermuted_and_run_as_transformers_runs_them(arch, tmp_path):
    """Qwen2's q/k/v biases and Qwen3's q/k norms come through, its q/k rows as stored
    (llama.cpp permutes llama's only); the folder is Qwen's family in ada_jax and runs with the
    logits transformers computes from the GGUF file itself."""
    file, out = str(tmp_path / "tiny.gguf"), str(tmp_path / "hf")
    hf, tok = write_tiny_gguf(file, "Q8_0", arch)
    got = gguf_import.gguf_to_hf(file, out)
    assert got["config"]["model_type"] == arch
    ours = _load(out)
    assert sorted(ours) == sorted(hf)
    for name, x in hf.items():
        if x.ndim == 1:
            np.testing.assert_array_equal(ours[name], x, err_msg=name)
        else:
            q = gguf.GGMLQuantizationType.Q8_0
            want = gguf.quants.dequantize(gguf.quants.quantize(x, q), q)
            np.testing.assert_array_equal(ours[name], want, err_msg=name)
    with open(os.path.join(out, "config.json")) as f:
        cfg = convert.model_config_from_hf(json.load(f))
    assert (cfg.qkv_bias, cfg.qk_norm, cfg.head_dim) == (arch == "qwen2", arch == "qwen3", E)
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate", reason="transformers loads GGUF files with accelerate")
    # transformers' GGUF config mapping skips key_length: its Qwen3 head_dim stays the
    # default 128 (every released Qwen3's), so the tiny model's is passed explicitly
    extra = dict(head_dim=E) if arch == "qwen3" else {}
    from_gguf = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file="tiny.gguf", dtype=torch.float32, **extra).eval()
    assert type(from_gguf).__name__ == f"{arch.capitalize()}ForCausalLM"
    _assert_logits_match(out, from_gguf, tok)


def test_a_llama_file_with_qkv_biases_is_a_qwen2_folder(tmp_path):
    """llama.cpp writes a Llama with q/k/v biases as a llama file, its q/k biases permuted as
    their rows: the folder is Qwen2's family (Llama with q/k/v biases), every tensor in HF's
    order (the biases exactly the ones written), and runs with transformers' logits."""
    file, out = str(tmp_path / "tiny.gguf"), str(tmp_path / "hf")
    hf, tok = write_tiny_gguf(file, "Q8_0", "llama", weights="qwen2")
    got = gguf_import.gguf_to_hf(file, out)
    assert got["config"]["model_type"] == "qwen2"
    ours, q = _load(out), gguf.GGMLQuantizationType.Q8_0
    assert sorted(ours) == sorted(hf)
    for name, x in hf.items():
        if x.ndim == 1:
            np.testing.assert_array_equal(ours[name], x, err_msg=name)
            continue
        heads = H if "q_proj" in name else K if "k_proj" in name else None
        stored = gguf_import.permute(x, heads) if heads else x
        want = gguf.quants.dequantize(gguf.quants.quantize(stored, q), q)
        np.testing.assert_array_equal(ours[name], gguf_import.unpermute(want, heads)
                                      if heads else want, err_msg=name)
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(theirs).__name__ == "Qwen2ForCausalLM"
    _assert_logits_match(out, theirs, tok)


@pytest.mark.parametrize("arch, weights, bias, what", [
    ("llama", "qwen2", "self_attn.o_proj.bias", "attn_output"),
    ("qwen2", "qwen2", "mlp.up_proj.bias", "ffn_up"),
    ("qwen3", "qwen3", "self_attn.q_proj.bias", "attn_q")])
def test_biases_the_model_lacks_are_refused_by_name(arch, weights, bias, what, tmp_path):
    """An output, MLP or qwen3 bias has no place in the model: refused before anything is
    written, naming the tensor kind."""
    rows = {"o_proj": D, "up_proj": F, "q_proj": H * E}[bias.split(".")[1]]
    file, out = str(tmp_path / "tiny.gguf"), str(tmp_path / "hf")
    write_tiny_gguf(file, "Q8_0", arch, weights=weights, extra={
        f"model.layers.{i}.{bias}": np.ones(rows, np.float32) for i in range(L)})
    with pytest.raises(gguf_import.GGUFError, match=f"{arch} file with biases on .*{what}"):
        gguf_import.gguf_to_hf(file, out)
    assert not os.path.exists(out)


YARN = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
        "rope.scaling.original_context_length": 64}


def test_a_yarn_file_runs_as_transformers_runs_its_folder(tmp_path):
    """A file with llama.cpp's YaRN keys (Qwen's long-context files) becomes config.json's
    rope_scaling, which ada_jax and transformers read alike: the factor, the context trained on,
    the attention factor 0.1 ln 4 + 1 (no key: llama.cpp computes it from the factor)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    file, out = str(tmp_path / "yarn.gguf"), str(tmp_path / "hf")
    _, tok = write_tiny_gguf(file, metadata=YARN)
    gguf_import.gguf_to_hf(file, out)
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["rope_scaling"] == dict(
            rope_type="yarn", factor=4.0, original_max_position_embeddings=64)
    m = convert.model_config_from_hf(convert.read_hf_config(out))
    assert (m.rope_scaling, m.rope_original_max_len, m.yarn_beta_fast, m.yarn_beta_slow) == (
        "yarn", 64, 32.0, 1.0)
    assert m.yarn_attention_factor == pytest.approx(0.1 * np.log(4.0) + 1)
    ref = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    _assert_logits_match(out, ref, tok)


@pytest.mark.parametrize("arch, meta, what", [
    ("qwen2", {"rope.scaling.yarn_beta_fast": 16.0, "rope.scaling.yarn_beta_slow": 2.0}, None),
    ("qwen3", {"rope.scaling.original_context_length": None}, None),
    ("llama", {"rope.scaling.yarn_log_multiplier": 0.07},
     "YaRN with llama.rope.scaling.yarn_log_multiplier = 0.07 is not supported"),
    ("llama", {"rope.scaling.yarn_attn_factor": 0.8}, "yarn_attn_factor = 0.8"),
    ("gemma2", {}, "RoPE scaling 'yarn' in a gemma2 file is not supported"),
    ("llama", {"rope.scaling.type": "longrope"}, "'longrope' in a llama file"),
    ("phi3", {"rope.scaling.type": "linear"}, "'linear' in a phi3 file"),
])
def test_yarn_metadata_is_read_or_refused_by_name(arch, meta, what):
    """The ramp's rotations where the file gives them, the file's context where it names no
    original one; keys no HF config expresses, and YaRN outside llama / qwen, refused."""
    keys = {**YARN, "context_length": 1024, **meta}
    metadata = {f"{arch}.{k}": v for k, v in keys.items() if v is not None}
    if what:
        with pytest.raises(gguf_import.GGUFError, match=re.escape(what)):
            gguf_import.rope_scaling_config(metadata, arch)
        return
    got = gguf_import.rope_scaling_config(metadata, arch)
    linear = {**metadata, f"{arch}.rope.scaling.type": "linear"}
    assert gguf_import.rope_scaling_config(linear, arch) == dict(rope_type="linear", factor=4.0)
    assert got["rope_type"] == "yarn" and got["factor"] == 4.0
    original = keys["rope.scaling.original_context_length"] or keys["context_length"]
    assert got["original_max_position_embeddings"] == original
    assert (got.get("beta_fast"), got.get("beta_slow")) == (
        meta.get("rope.scaling.yarn_beta_fast"), meta.get("rope.scaling.yarn_beta_slow"))
