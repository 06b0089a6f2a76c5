"""HFTokenizer and the pretrained-model prompt templates, on tiny byte-level BPE tokenizers
trained here with Qwen2.5 / Llama-3 special tokens (no downloads): special tokens encode as
single ids, EOS / pad / BOS come from tokenizer_config.json or overrides, and the rendered
prompts tokenize exactly as the real Qwen2.5-Math-Instruct / Llama-3.2-Instruct Jinja templates
do (on the stand-in tokenizers of tests/standins.py)."""
import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ada_jax import tokenizer as tok_lib
from configs import base
from tests import standins

QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|eot_id|>"]
CORPUS = ["What is 2 + 3? Please reason step by step.", "The answer is \\boxed{5}.",
          "system user assistant", "Hint: add the numbers first."] * 4
QUESTION = "What is 12 + 30?"



def _save(path, special, **tokenizer_config):
    """A byte-level BPE tokenizer.json (+ tokenizer_config.json) in folder `path`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path.mkdir(exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    if tokenizer_config:
        with open(path / "tokenizer_config.json", "w") as f:
            json.dump(tokenizer_config, f)
    return str(path)


@pytest.fixture
def qwen(tmp_path):  # Qwen2.5-Math base: eos and pad are <|endoftext|>, no BOS
    return _save(tmp_path / "qwen", QWEN_SPECIAL, eos_token="<|endoftext|>",
                 pad_token="<|endoftext|>", bos_token=None)


@pytest.fixture
def llama(tmp_path):  # Llama-3.2-Instruct: BOS <|begin_of_text|>, EOS <|eot_id|>, no pad
    return _save(tmp_path / "llama", LLAMA_SPECIAL, bos_token="<|begin_of_text|>",
                 eos_token={"content": "<|eot_id|>", "special": True})


def _id(t, text):
    ids = t.encode(text)
    assert len(ids) == 1, f"{text!r} is not one token: {ids}"
    return ids[0]


def test_qwen_eos_pad_and_override(qwen):
    t = tok_lib.HFTokenizer(qwen)
    assert t.bos_id is None
    assert t.eos_id == t.pad_id == _id(t, "<|endoftext|>")
    # The chat template ends answers with <|im_end|>: the config overrides EOS, pad stays.
    t = tok_lib.HFTokenizer(qwen, eos_token="<|im_end|>")
    assert t.eos_id == _id(t, "<|im_end|>") and t.pad_id == _id(t, "<|endoftext|>")
    assert t.vocab_size == 300


def test_llama_bos_and_pad_falls_back_to_eos(llama):
    t = tok_lib.HFTokenizer(llama)
    assert t.bos_id == _id(t, "<|begin_of_text|>")
    assert t.eos_id == t.pad_id == _id(t, "<|eot_id|>")  # AddedToken dict format read too
    assert tok_lib.HFTokenizer(llama, pad_token="<|end_of_text|>").pad_id == _id(
        t, "<|end_of_text|>")


def test_bad_special_tokens_are_rejected(tmp_path):
    path = _save(tmp_path / "plain", QWEN_SPECIAL)  # no tokenizer_config.json
    with pytest.raises(ValueError, match="no eos token"):
        tok_lib.HFTokenizer(path)
    with pytest.raises(ValueError, match=r"eos_token '<\|eot_id\|>' is not a token"):
        tok_lib.HFTokenizer(path, eos_token="<|eot_id|>")
    assert tok_lib.HFTokenizer(path + "/tokenizer.json", eos_token="<|im_end|>").eos_id == 2


def test_qwen_math_template_renders_and_encodes(qwen):
    t = tok_lib.HFTokenizer(qwen, eos_token="<|im_end|>")
    text = tok_lib.render_prompt(QUESTION, "qwen_math")
    assert text == ("<|im_start|>system\nPlease reason step by step, and put your final answer "
                    "within \\boxed{}.<|im_end|>\n<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    ids = tok_lib.prompt_ids(t, text)
    start, end = _id(t, "<|im_start|>"), _id(t, "<|im_end|>")
    assert ids[0] == start and ids.count(start) == 3 and ids.count(end) == 2
    assert t.decode(ids) == text
    # A generated answer ending in EOS decodes back with the marker.
    assert t.decode(t.encode("The answer is \\boxed{42}.") + [t.eos_id]).endswith("<|im_end|>")
    hinted = tok_lib.render_prompt(QUESTION, "qwen_math", hint="add the numbers")
    assert "What is 12 + 30?\n\nHint: add the numbers<|im_end|>" in hinted


def test_llama3_template_renders_and_encodes(llama):
    t = tok_lib.HFTokenizer(llama)
    text = tok_lib.render_prompt(QUESTION, "llama3_chat")
    assert text.startswith("<|start_header_id|>system<|end_header_id|>\n\n")
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    ids = tok_lib.prompt_ids(t, text)
    assert ids[0] == t.bos_id and ids.count(t.bos_id) == 1
    assert ids.count(_id(t, "<|start_header_id|>")) == 3 and ids.count(t.eos_id) == 2
    assert t.decode(ids) == "<|begin_of_text|>" + text


@pytest.fixture(scope="module")
def real_templates(tmp_path_factory):
    """{template: folder} of stand-in tokenizers with the models' real regexes, special tokens
    and Jinja chat templates (tests/standins.py)."""
    root = tmp_path_factory.mktemp("chat")
    return {t: standins.build_tokenizer(str(root / f), f)
            for t, f in (("qwen_math", "qwen2"), ("llama3_chat", "llama"))}


@pytest.mark.parametrize("template", ["qwen_math", "llama3_chat"])
@pytest.mark.parametrize("system", [tok_lib.SYSTEM_MATH, None, "  Be brief.\n"])
def test_prompt_ids_equal_the_real_chat_template(template, system, real_templates):
    """render_prompt + prompt_ids give exactly the ids of transformers' apply_chat_template
    with Qwen2.5-Math-Instruct's / Llama-3.2-Instruct's own Jinja template (Llama: its date
    preamble at the fixed LLAMA3_DATE, stripped messages; Qwen: its default system message),
    with and without a system message, hints and surrounding whitespace included."""
    transformers = pytest.importorskip("transformers")
    path = real_templates[template]
    hf = transformers.AutoTokenizer.from_pretrained(path)
    ours = tok_lib.HFTokenizer(path)
    for question, hint in ((QUESTION, ""), ("  Simplify $\\sqrt{50}$.\n", "use 25 * 2")):
        user = f"{question}\n\nHint: {hint}" if hint else question
        messages = ([] if system is None else [dict(role="system", content=system)]) + [
            dict(role="user", content=user)]
        want = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                      return_dict=False, date_string=tok_lib.LLAMA3_DATE)
        text = tok_lib.render_prompt(question, template, hint, system=system)
        assert tok_lib.prompt_ids(ours, text) == list(want), (template, system, question)
        if template == "llama3_chat" and system is None:  # the default date is the fixed one
            assert hf.apply_chat_template(messages, add_generation_prompt=True,
                                          tokenize=False).count("Today Date: ") == 1
            assert "Today Date: 26 Jul 2024\n\n<|eot_id|>" in text


def test_load_tokenizer_from_config(qwen):
    config = base.get_config("model=qwen2_5_math_1_5b")
    config.model.tokenizer = qwen
    t = tok_lib.load_tokenizer(config)
    assert isinstance(t, tok_lib.HFTokenizer) and t.vocab_size <= config.model.vocab_size
    small = base.get_config("model=tiny,task=embedded")  # 128 ids cannot hold a 300-token vocabulary
    small.model.tokenizer = qwen
    with pytest.raises(ValueError, match="more than config.model.vocab_size=128"):
        tok_lib.load_tokenizer(small)
