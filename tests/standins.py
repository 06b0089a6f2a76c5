"""Local stand-ins for the pretrained checkpoints (no downloads): tiny Qwen2.5-Math and
Llama-3.2-Instruct folders as a user would download them, and a small MATH-style JSONL.

Tokenizer: byte-level BPE trained here with `tokenizers` on the math rows and chat text, with
the real models' pre-tokenizer regex (Qwen2 splits digits one by one, Llama-3 in runs of up to
three), their special tokens appended after the learned vocabulary (as in the real files), and
the real Jinja chat templates (tests/data/chat_templates) in tokenizer_config.json, whose
bos / eos / pad are the real ones (Qwen2.5-Math base: eos = pad = <|endoftext|>, no BOS;
Llama-3.2-Instruct: BOS <|begin_of_text|>, eos <|eot_id|>, no pad).

Model: random weights saved by `transformers` with the real architectures' features: Qwen2 with
q/k/v biases (Qwen3: QK-norm instead, with Qwen2.5-Math's tokenizer and template), tied embeddings and the embedding padded past the tokenizer (to a multiple of 128,
as Qwen2.5 pads 151,665 ids to 151,936 rows); Llama-3 with llama3 RoPE scaling (the 3.2
values), tied embeddings and a vocabulary filled to the model's size with reserved tokens. The
embeddings make a response a short walk "\boxed{d}" + end of turn (answer_walk), so the math
verifier sees right and wrong answers (a one-digit gold ~1 time in 10) and responses stop.
"""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = os.path.join(ROOT, "tests", "data", "chat_templates")

_PRE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_POST = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                "<|image_pad|>", "<|video_pad|>"]
LLAMA_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                 "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                 "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                 "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
FAMILIES = {
    "qwen2": dict(regex=_PRE + r"\p{N}" + _POST, special=QWEN_SPECIAL, nfc=True,
                  template="qwen2_5_math_instruct.jinja", end="<|im_end|>",
                  tokenizer_config=dict(bos_token=None, eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>", model_max_length=4096,
                                        tokenizer_class="Qwen2Tokenizer")),
    "llama": dict(regex=_PRE + r"\p{N}{1,3}" + _POST, special=LLAMA_SPECIAL, nfc=False,
                  template="llama3_2_instruct.jinja", end="<|eot_id|>",
                  tokenizer_config=dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                        model_max_length=131072,
                                        tokenizer_class="PreTrainedTokenizerFast")),
}
FAMILIES["qwen3"] = FAMILIES["qwen2"]  # Qwen3's architecture, Qwen2.5-Math's tokenizer


def chat_template(family: str) -> str:
    with open(os.path.join(TEMPLATES, FAMILIES[family]["template"])) as f:
        return f.read()


def math_rows(n: int = 50) -> list[dict]:
    """MATH-style rows (problem, solution with a boxed answer, answer, level): three in four
    with a one-digit answer (which the stand-ins box one time in ten), the rest LaTeX."""
    rows = []
    for i in range(n):
        a, b = i % 5, (3 * i) % 5
        kind = i % 4
        if kind == 0:
            q, ans = f"What is ${a} + {b}$?", str(a + b)
        elif kind == 1:
            q, ans = f"Solve for $x$: ${a + 2}x = {(a + 2) * b}$.", str(b)
        elif kind == 2:
            q, ans = f"Simplify $\\frac{{{a + 1}}}{{{2 * a + 2}}}$.", "\\frac{1}{2}"
        else:
            q, ans = f"Compute ${9 - a} - {b}$.", str(9 - a - b)
        rows.append(dict(problem=q, answer=ans, level=f"Level {1 + kind}",
                         solution=f"Working it out step by step, the answer is "
                                  f"$\\boxed{{{ans}}}$."))
    return rows


def write_math_jsonl(path: str, n: int = 50) -> str:
    with open(path, "w") as f:
        for row in math_rows(n):
            f.write(json.dumps(row) + "\n")
    return path


def build_tokenizer(path: str, family: str) -> str:
    """tokenizer.json + tokenizer_config.json (with the chat template) in folder `path`."""
    from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    spec = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    if spec["nfc"]:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(spec["regex"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    corpus = [r["problem"] + " " + r["solution"] for r in math_rows(200)]
    corpus += ["Please reason step by step, and put your final answer within \\boxed{}.",
               "system user assistant Cutting Knowledge Date: December 2023 Today Date",
               "Hint: add the numbers first. The answer is"] * 20
    corpus += [f"\\boxed{{{d}}}" for d in range(10)] * 10  # "\\boxed" whole after a newline
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    special = list(spec["special"])
    if family == "llama":  # reserved tokens fill the vocabulary to the model's size (x64)
        size = tok.get_vocab_size() + len(special)
        special += [f"<|reserved_special_token_{i}|>" for i in range(3, 3 + -size % 64)]
        bos = "<|begin_of_text|>"
        tok.add_special_tokens(special)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.add_special_tokens(special)
    os.makedirs(path, exist_ok=True)
    tok.save(os.path.join(path, "tokenizer.json"))
    config = dict(spec["tokenizer_config"], chat_template=chat_template(family),
                  clean_up_tokenization_spaces=False)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return path


def answer_walk(model, tok, family: str) -> None:
    """Set the weights so that a response is a short random walk that boxes a digit: next-token
    logits ~ emb[token]^T W emb[next] (attention and MLP stay near zero), with W = the final
    norm's +-1 scales. Each edge (a, b, c) of the path prompt end -> \\boxed -> { -> digit -> }
    -> end of turn gets two dimensions, a = c(e_p + e_n), b = c(e_p - e_n) with W_n = -1: the
    pair scores 2c^2, a token with itself 0, and the edges' weights rise along the path, so
    sampling boxes a near-uniform digit and ends (~5 tokens) and greedy decoding ends too."""
    ids = tok.token_to_id
    start = tok.encode("\n\n" if family == "llama" else "\n", add_special_tokens=False).ids[-1]
    path = [ids(t) for t in ("\\boxed", "{", "}", FAMILIES[family]["end"])]
    assert None not in path, f"stand-in tokenizer lacks a token of {path}"
    boxed, open_, close, end = path
    digits = [ids(str(d)) for d in range(10)]
    edges = [(start, boxed, 1.5), (boxed, open_, 1.8), (close, end, 3.0)]
    edges += [(open_, d, 2.1 + 0.01 * i) for i, d in enumerate(digits)]
    edges += [(d, close, 2.4) for d in digits]
    emb = model.get_input_embeddings().weight  # [V, D], tied to the output layer
    norm = model.model.norm.weight
    assert 2 * len(edges) <= emb.shape[1]
    emb.normal_(0.0, 0.02)
    norm.fill_(1.0)
    for k, (a, b, c) in enumerate(edges):
        p, n = 2 * k, 2 * k + 1
        norm[n] = -1.0
        emb[a, p] += c
        emb[a, n] += c
        emb[b, p] += c
        emb[b, n] -= c


def build_standin(path: str, family: str, seed: int = 0) -> str:
    """A Hugging Face model folder: tokenizer (build_tokenizer) and random weights."""
    import torch
    import transformers
    from tokenizers import Tokenizer
    build_tokenizer(path, family)
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    n_tok, ids = tok.get_vocab_size(), tok.token_to_id
    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  tie_word_embeddings=True)
    if family in ("qwen2", "qwen3"):
        eot = ids("<|endoftext|>")
        name = "Qwen2" if family == "qwen2" else "Qwen3"
        config = getattr(transformers, name + "Config")(
            vocab_size=-(-n_tok // 128) * 128, max_position_embeddings=4096, rope_theta=10000.0,
            rms_norm_eps=1e-6, use_sliding_window=False, bos_token_id=eot, eos_token_id=eot,
            **common)
        model_cls = getattr(transformers, name + "ForCausalLM")
    else:
        config = transformers.LlamaConfig(
            vocab_size=n_tok, max_position_embeddings=131072, rope_theta=500000.0,
            rms_norm_eps=1e-5, rope_scaling=dict(
                rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=8192),
            bos_token_id=ids("<|begin_of_text|>"), pad_token_id=None,
            eos_token_id=[ids("<|end_of_text|>"), ids("<|eom_id|>"), ids("<|eot_id|>")],
            **common)
        model_cls = transformers.LlamaForCausalLM
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        answer_walk(model, tok, family)
    if family == "llama":  # Llama-3.2-Instruct's generation defaults
        model.generation_config.update(do_sample=True, temperature=0.6, top_p=0.9)
    model.save_pretrained(path)
    return path
