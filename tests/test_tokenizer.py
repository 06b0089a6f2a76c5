"""Tokenizers (embedded sentencepiece, HF tokenizer.json adapter), factory and templates."""
import json
import os
import subprocess
import sys

import pytest

from ada_jax.tasks.embedded import EmbeddedSource
from ada_jax.tasks.problem import hint
from ada_jax.tokenizer import (BOXED, CLOSE, HFTokenizer, SentencePieceTokenizer, load_tokenizer,
                               prompt_ids, render_prompt)
from configs.base import get_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tok():
    return SentencePieceTokenizer()


def test_embedded_special_ids_and_size(tok):
    assert tok.vocab_size <= 128
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 2, 3)
    assert tok.encode("") == []


def test_digits_box_and_close_are_single_tokens(tok):
    for piece in [BOXED, CLOSE, "\n", "+", "-", "*", "="] + list("0123456789"):
        assert len(tok.encode(piece)) == 1, piece
    ids = tok.encode("12+345=357\n\\boxed{357}")
    assert [tok.id_to_piece(i) for i in ids] == [
        "1", "2", "+", "3", "4", "5", "=", "3", "5", "7", "\n", BOXED, "3", "5", "7", CLOSE]
    # no piece mixes a digit with anything else
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    assert all(len(p) == 1 for p in pieces if any(c.isdigit() for c in p))


def test_roundtrip_on_task_text(tok):
    for i, p in enumerate(EmbeddedSource("train", 400, seed=5)):
        text = render_prompt(p.question, "embedded", hint(p, 1 + i % 3)) + p.solution
        assert tok.decode(tok.encode(text)) == text


def test_decode_tolerates_ids_past_the_vocabulary(tok):
    assert isinstance(tok.decode([5, 127, 100, 2, 3, 0]), str)


@pytest.mark.parametrize("task,asset", [("embedded", "embedded.model"),
                                        ("families", "families.model")])
def test_packaged_tokenizers_are_reproducible(tmp_path, task, asset):
    out = tmp_path / asset
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tools", "train_tokenizer.py"),
                    f"--task={task}", f"--out={out}"], check=True, cwd=ROOT, capture_output=True)
    with open(os.path.join(ROOT, "ada_jax", "assets", asset), "rb") as f:
        assert out.read_bytes() == f.read()


def _write_hf(tmp_path, config: dict | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<|endoftext|>", "<|im_end|>", "<|im_start|>"])
    t.train_from_iterator(["The answer is \\boxed{42}.", "Please reason step by step."] * 50,
                          trainer=trainer)
    t.save(str(tmp_path / "tokenizer.json"))
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_hf_tokenizer_reads_eos_and_pad_from_the_file(tmp_path):
    path = _write_hf(tmp_path, {"eos_token": {"content": "<|endoftext|>"}, "pad_token": None,
                                "bos_token": None})
    t = HFTokenizer(path)
    assert t.bos_id is None and t.eos_id == t.pad_id == 1
    text = "<|im_start|>The answer is \\boxed{42}.<|im_end|>"
    assert t.decode(t.encode(text)) == text
    assert t.encode("<|im_end|>") == [2]
    assert prompt_ids(t, "The") == t.encode("The")  # no BOS for Qwen-like tokenizers


@pytest.mark.parametrize("add_bos, first", [(None, True), (True, True), (False, False)])
def test_hf_tokenizer_puts_bos_first_unless_its_config_says_not(tmp_path, add_bos, first):
    """A tokenizer with a BOS token puts it before a prompt, but where tokenizer_config.json
    says add_bos_token false (as transformers' tokenizer(text) then adds none)."""
    config = {"eos_token": "<|endoftext|>", "bos_token": "<|im_start|>"}
    if add_bos is not None:
        config["add_bos_token"] = add_bos
    t = HFTokenizer(_write_hf(tmp_path, config))
    assert t.bos_id == t.encode("<|im_start|>")[0]
    want = ([t.bos_id] if first else []) + t.encode("The")
    assert prompt_ids(t, "The") == want


def test_hf_tokenizer_overrides_and_errors(tmp_path):
    path = _write_hf(tmp_path, None)
    with pytest.raises(ValueError, match="no eos token"):
        HFTokenizer(path)
    t = HFTokenizer(os.path.join(path, "tokenizer.json"), eos_token="<|im_end|>",
                    pad_token="<|endoftext|>")
    assert (t.eos_id, t.pad_id) == (2, 1)
    with pytest.raises(ValueError, match="not a token"):
        HFTokenizer(path, eos_token="<eos>")


def test_load_tokenizer_from_config(tmp_path):
    c = get_config("task=embedded")
    tok = load_tokenizer(c)
    assert isinstance(tok, SentencePieceTokenizer)
    c.model.vocab_size = 16
    with pytest.raises(ValueError, match="vocab_size"):
        load_tokenizer(c)
    c.model.vocab_size = 512
    c.model.tokenizer = _write_hf(tmp_path, {"eos_token": "<|endoftext|>"})
    assert isinstance(load_tokenizer(c), HFTokenizer)


def test_templates():
    q = "What is $1+1$?"
    assert render_prompt(q, "embedded") == q + "\n"
    assert render_prompt(q, "embedded", "1+1=2") == q + "\nHint:\n1+1=2\n"
    qwen = render_prompt(q, "qwen_math")
    assert qwen.startswith("<|im_start|>system\nPlease reason step by step, and put your final "
                           "answer within \\boxed{}.<|im_end|>\n<|im_start|>user\n" + q)
    assert qwen.endswith("<|im_end|>\n<|im_start|>assistant\n")
    llama = render_prompt(q, "llama3_chat", "use 2")
    assert "<|start_header_id|>user<|end_header_id|>\n\n" + q + "\n\nHint: use 2<|eot_id|>" in llama
    assert llama.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    with pytest.raises(ValueError, match="unknown template"):
        render_prompt(q, "alpaca")


def test_prompt_ids_add_bos(tok):
    assert prompt_ids(tok, "1+1") == [tok.bos_id] + tok.encode("1+1")
