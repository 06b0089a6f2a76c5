"""Tokenizers and prompt templates.

One interface (`Tokenizer`) over two backends: `SentencePieceTokenizer` for the embedded task's
tiny model (the model ships as `ada_jax/assets/embedded.model`, trained by
`scripts/tools/train_tokenizer.py`) and `HFTokenizer` for pretrained models (a `tokenizer.json`).
`encode` never adds special tokens: templates give the text, `prompt_ids` prepends BOS.

A pretrained checkpoint's prompts are rendered with its own Jinja chat template (template "chat",
as transformers' `apply_chat_template(add_generation_prompt=True)` renders them) and stop at its
own end-of-turn and eos tokens (`checkpoint_chat`); the per-family table (CHAT_FAMILIES) is the
fallback for a checkpoint without a template.
"""
import datetime
import functools
import json
import os
from typing import Protocol, Sequence

import importlib_resources

EMBEDDED_MODEL = "embedded.model"
# Packaged sentencepiece models by name (config.model.tokenizer): the family task's has its
# tags and markers as single pieces (scripts/tools/train_tokenizer.py --task=families).
ASSET_MODELS = {"families": "families.model"}
# Pieces the embedded tokenizer keeps whole, so the embedded verifier can work on token ids.
BOXED, CLOSE = "\\boxed{", "}"
EMBEDDED_SYMBOLS = (BOXED, CLOSE, "\n", *"0123456789", "+", "-", "*", "=")

SYSTEM_MATH = "Please reason step by step, and put your final answer within \\boxed{}."
# chat: the tokenizer's own; plain: a pretrained base model's (no chat template), "Question: ...
# \nAnswer:" after BOS
TEMPLATES = ("embedded", "qwen_math", "llama3_chat", "chat", "plain")
# "Today Date" of llama3_chat's system preamble: Llama-3.2-Instruct's template falls back to this
# date when rendered without strftime_now; transformers passes today's unless given date_string.
LLAMA3_DATE = "26 Jul 2024"
# The clock a chat template reads (strftime_now): fixed, so that a prompt does not change with the
# day it is rendered on (Llama-3's template writes today's date into its system turn).
TEMPLATE_DATE = datetime.datetime(2024, 7, 26)
# Per model family (config.json's model_type): the prompt template, the token that ends an
# answer (the chat turn's end, which overrides tokenizer_config.json's eos: <|endoftext|> for
# the Qwen2.5(-Math) base models) and further stop tokens (the base models' end of text).
CHAT_FAMILIES = {
    "qwen2": dict(template="qwen_math", eos_token="<|im_end|>",
                  extra_eos_tokens=("<|endoftext|>",)),
    "llama": dict(template="llama3_chat", eos_token="<|eot_id|>",
                  extra_eos_tokens=("<|end_of_text|>",)),
    "qwen3": dict(template="qwen_math", eos_token="<|im_end|>",
                  extra_eos_tokens=("<|endoftext|>",)),
    "mistral": dict(template="plain", eos_token="</s>", extra_eos_tokens=()),
    "phi3": dict(template="plain", eos_token="<|end|>", extra_eos_tokens=("<|endoftext|>",)),
    "olmo2": dict(template="plain", eos_token="<|endoftext|>", extra_eos_tokens=()),
    "olmo3": dict(template="plain", eos_token="<|endoftext|>", extra_eos_tokens=()),
    "smollm3": dict(template="plain", eos_token="<|end_of_text|>", extra_eos_tokens=()),
    "gemma2": dict(template="plain", eos_token="<eos>", extra_eos_tokens=()),
    "gemma3_text": dict(template="plain", eos_token="<eos>", extra_eos_tokens=()),
}


class Tokenizer(Protocol):
    vocab_size: int
    bos_id: int | None
    add_bos: bool  # BOS before a prompt (tokenizer_config.json's add_bos_token)
    eos_id: int
    pad_id: int
    chat_template: str | None  # the checkpoint's Jinja chat template (template "chat")
    system_prompt: str | None  # the run's system message (config.task.system_prompt)

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class SentencePieceTokenizer:
    """A sentencepiece model; by default the embedded one (pad 0, unk 1, bos 2, eos 3)."""
    chat_template = None
    system_prompt = SYSTEM_MATH
    add_bos = True

    def __init__(self, model_path: str | None = None, asset: str = EMBEDDED_MODEL):
        import sentencepiece as spm
        if model_path:
            with open(model_path, "rb") as f:
                proto = f.read()
        else:
            proto = (importlib_resources.files("ada_jax") / "assets" / asset).read_bytes()
        self._sp = spm.SentencePieceProcessor(model_proto=proto)
        self.vocab_size = self._sp.get_piece_size()
        self.pad_id, self.bos_id, self.eos_id = (
            self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id())
        if min(self.pad_id, self.bos_id, self.eos_id) < 0:
            raise ValueError(f"{model_path or EMBEDDED_MODEL}: pad, bos and eos must be defined")

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Ids past the vocabulary (a model may have more rows) decode as unk."""
        unk = self._sp.unk_id()
        return self._sp.decode([i if 0 <= i < self.vocab_size else unk for i in map(int, ids)])

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(int(i))


def _tokenizer_config(folder: str) -> dict:
    file = os.path.join(folder, "tokenizer_config.json")
    if not os.path.exists(file):
        return {}
    with open(file) as f:
        return json.load(f)


def _special(cfg: dict, name: str) -> str | None:
    """tokenizer_config.json's special token `name` as a string (it may be an AddedToken dict)."""
    value = cfg.get(name)
    return value.get("content") if isinstance(value, dict) else value


def read_chat_template(folder: str) -> str | None:
    """The folder's Jinja chat template, found where transformers looks: chat_template.jinja,
    else tokenizer_config.json's chat_template (a string, or a list of named templates: the one
    named "default"); None when it has none."""
    file = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(file):
        with open(file) as f:
            return f.read()
    template = _tokenizer_config(folder).get("chat_template")
    if isinstance(template, list):
        template = {t.get("name"): t.get("template") for t in template}.get("default")
    return template or None


class HFTokenizer:
    """A Hugging Face `tokenizers` tokenizer.json. eos/pad: the given token strings, else
    tokenizer_config.json next to the file, else (pad) eos. bos may be None (Qwen), and is not
    put before a prompt where tokenizer_config.json says add_bos_token false (SmolLM2's GGUF:
    transformers' tokenizer(text) adds none there). Carries the folder's chat template
    (`read_chat_template`) and its special tokens for rendering it."""
    system_prompt = SYSTEM_MATH

    def __init__(self, path: str, eos_token: str = "", pad_token: str = ""):
        from tokenizers import Tokenizer as _HF
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        self._tok = _HF.from_file(file)
        cfg = _tokenizer_config(os.path.dirname(file))
        self.chat_template = read_chat_template(os.path.dirname(file))
        # what a chat template sees as bos_token, eos_token, ... (transformers' special tokens)
        self.special_tokens = {k: _special(cfg, k) for k in
                               ("bos_token", "eos_token", "unk_token", "pad_token")
                               if _special(cfg, k) is not None}

        def token(name: str, override: str = "") -> str | None:
            return override or _special(cfg, name)

        def token_id(name: str, text: str | None) -> int | None:
            if text is None:
                return None
            i = self._tok.token_to_id(text)
            if i is None:
                raise ValueError(f"{file}: {name} {text!r} is not a token of this tokenizer")
            return i

        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.bos_id = token_id("bos_token", token("bos_token"))
        self.add_bos = self.bos_id is not None and cfg.get("add_bos_token", True) is not False
        self.eos_id = token_id("eos_token", token("eos_token", eos_token))
        if self.eos_id is None:
            raise ValueError(f"{file}: no eos token; set config.model.eos_token")
        pad = token_id("pad_token", token("pad_token", pad_token))
        self.pad_id = self.eos_id if pad is None else pad

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


def load_tokenizer(config) -> Tokenizer:
    """The tokenizer at config.model.tokenizer, else at config.model.init_from (a Hugging Face
    model folder holds its tokenizer.json): "" = the embedded sentencepiece model, a name of
    ASSET_MODELS = that packaged sentencepiece model, `*.model` =
    another sentencepiece model, else a tokenizer.json (or its folder), whose eos / pad are
    config.model.eos_token / pad_token when set. Checks it fits the model and that
    config.model.extra_eos_tokens are single tokens. The tokenizer carries the run's system prompt
    (config.task.system_prompt; "" = no system message) for `encode_prompt`."""
    m = config.model
    path = m.get("tokenizer", "") or m.get("init_from", "")
    field = "tokenizer" if m.get("tokenizer", "") else "init_from"
    if path in ASSET_MODELS:
        tok = SentencePieceTokenizer(asset=ASSET_MODELS[path])
    elif not path:
        tok = SentencePieceTokenizer()
    else:
        tok = _named(f"config.model.{field}={path!r}", _load_file, path, m)
    if tok.vocab_size > m.vocab_size:
        raise ValueError(f"tokenizer {path or EMBEDDED_MODEL!r} has {tok.vocab_size} tokens, more "
                         f"than config.model.vocab_size={m.vocab_size}")
    if config.task.get("template") == "chat" and not tok.chat_template:
        raise ValueError(f"config.task.template='chat' renders prompts with the checkpoint's own "
                         f"chat template, but tokenizer {path!r} has none (no chat_template.jinja,"
                         f" no chat_template in tokenizer_config.json): choose from {TEMPLATES}")
    tok.system_prompt = config.task.get("system_prompt", SYSTEM_MATH) or None
    tok.few_shot = _few_shot(config)
    extra_eos_ids(tok, config)  # fail now, not at the first sampling call
    stop_sequences(tok, config)
    return tok


def _few_shot(config) -> str:
    """The text of config.task.few_shot_file ("" = none), written before every question of the
    plain template: solved examples in its own form ("Question: ...\nAnswer: ...\n\n", as
    `few_shot_text` writes them) for a base model to continue from."""
    path = config.task.get("few_shot_file", "")
    if not path:
        return ""
    template = config.task.get("template")
    if template != "plain":
        raise ValueError(f"config.task.few_shot_file is written before the questions of the "
                         f"plain template (a base model's prompt), but config.task.template is "
                         f"{template!r}: set --config.task.template=plain or drop the file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"config.task.few_shot_file={path!r}: {e}") from None
    if not text.strip():
        raise ValueError(f"config.task.few_shot_file={path!r} is empty")
    return text


def _load_file(path: str, m) -> Tokenizer:
    """A sentencepiece `*.model` or a tokenizer.json (or its folder) at `path`."""
    if path.endswith(".model"):
        kind = "sentencepiece model"
    else:
        kind = "Hugging Face tokenizer.json"
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
    if not os.path.exists(path):
        dangling = f" (a dangling link to {os.readlink(path)!r})" if os.path.islink(path) else ""
        raise FileNotFoundError(f"no {kind} at {path}{dangling}; set config.model.tokenizer")
    if not os.path.isfile(path):
        raise OSError(f"{path} is not a regular file: name a {kind}")
    try:
        if kind == "sentencepiece model":
            return SentencePieceTokenizer(path)
        return HFTokenizer(path, eos_token=m.get("eos_token", ""), pad_token=m.get("pad_token", ""))
    except (OSError, ValueError):
        raise
    except Exception as e:  # sentencepiece's RuntimeError, tokenizers' bare Exception
        raise ValueError(f"{path} is not a readable {kind} ({type(e).__name__}: "
                         f"{str(e).strip()[:200]})") from None


def _named(what: str, fn, *args):
    """fn(*args), its OSError or ValueError prefixed with `what` (the config field)."""
    try:
        return fn(*args)
    except OSError as e:
        raise type(e)(f"{what}: {e}") from None
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


def extra_eos_ids(tokenizer: Tokenizer, config) -> tuple[int, ...]:
    """Ids of config.model.extra_eos_tokens (stop tokens besides tokenizer.eos_id), for
    `SamplingConfig.extra_eos_ids`; each must encode as exactly one token. An empty string
    (`--config.model.extra_eos_tokens=''` gives ('',)) names none."""
    ids = []
    for text in filter(None, config.model.get("extra_eos_tokens", ())):
        got = tokenizer.encode(text)
        if len(got) != 1:
            raise ValueError(f"config.model.extra_eos_tokens: {text!r} is not one token of the "
                             f"tokenizer (encodes as {got})")
        if got[0] != tokenizer.eos_id and got[0] not in ids:
            ids.append(got[0])
    return tuple(ids)


# Stop strings of a template while config.sampling.stop_strings is unset: a base model's plain
# "Question: ...\nAnswer:" prompt goes on to write the next question.
TEMPLATE_STOP_STRINGS = {"plain": ("\nQuestion:", "\n\nQuestion:")}


def stop_sequences(tokenizer: Tokenizer, config) -> tuple[tuple[int, ...], ...]:
    """config.sampling.stop_strings (unset: the template's, TEMPLATE_STOP_STRINGS), each as the
    tokenizer encodes it, for `SamplingConfig.stop_seqs`; ('',) names none."""
    strings = tuple(config.sampling.get("stop_strings", ())) or TEMPLATE_STOP_STRINGS.get(
        config.task.get("template", ""), ())
    seqs = []
    for text in filter(None, strings):
        got = tuple(tokenizer.encode(text))
        if not got:
            raise ValueError(f"config.sampling.stop_strings: {text!r} encodes as no tokens")
        if got not in seqs:
            seqs.append(got)
    return tuple(seqs)


def render_chat(chat_template: str, messages: list[dict], special_tokens: dict | None = None,
                add_generation_prompt: bool = True) -> str:
    """A Jinja chat template rendered as transformers' `apply_chat_template(messages,
    add_generation_prompt=..., tokenize=False)` renders it: the same sandboxed environment
    (trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception), the tokenizer's
    special tokens (bos_token, eos_token, ...) in scope, but a fixed clock (TEMPLATE_DATE)."""
    return _compiled_chat(chat_template).render(
        messages=messages, tools=None, documents=None,
        add_generation_prompt=add_generation_prompt, **(special_tokens or {}))


@functools.lru_cache(maxsize=8)
def _compiled_chat(chat_template: str):
    """The template compiled once (compiling it took 6 ms a prompt, the rendering 0.1 ms)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception,
                       strftime_now=lambda fmt: TEMPLATE_DATE.strftime(fmt))
    return env.from_string(chat_template)


def turn_end(chat_template: str, special_tokens: dict | None = None) -> str | None:
    """The text a chat template writes right after an assistant message's content (e.g.
    "<|im_end|>\n", "<|eot_id|>"), or None when it cannot tell: its first token is the token
    that ends a response in this chat format."""
    marker = "\x00answer\x00"
    try:
        text = render_chat(chat_template, [dict(role="user", content="question"),
                                           dict(role="assistant", content=marker)],
                           special_tokens, add_generation_prompt=False)
    except Exception:  # noqa: BLE001 (a template may refuse this conversation)
        return None
    return text.split(marker, 1)[1] if text.count(marker) == 1 else None


def render_prompt(question: str, template: str, hint: str = "",
                  system: str | None = SYSTEM_MATH, chat_template: str | None = None,
                  special_tokens: dict | None = None, few_shot: str = "") -> str:
    """The prompt text for one question (and an optional hint) in a template of TEMPLATES, as
    the model's own chat template renders [system, user] with add_generation_prompt (no system
    message when system is None). No BOS for the named templates: `prompt_ids` adds it; "chat"
    renders `chat_template` (`render_chat`, with the tokenizer's `special_tokens`), which writes
    its own BOS where it wants one.

    qwen_math: Qwen2.5-Math-Instruct's ChatML template, whose default system message (without
    one) is SYSTEM_MATH. llama3_chat: Llama-3.2-Instruct's template, whose system turn always
    opens with the knowledge-cutoff / date preamble and which strips the messages' whitespace;
    the date is fixed to LLAMA3_DATE (the template's own default when it is rendered without a
    clock) so that a prompt does not change with the day it is rendered on.
    plain: `few_shot` (solved examples, `few_shot_text`) comes before the question.
    """
    if template == "embedded":
        return f"{question}\n" + (f"Hint:\n{hint}\n" if hint else "")
    if template == "plain":  # a base model continues text: no system or chat turns
        return (f"{few_shot}Question: {question}\n" + (f"Hint: {hint}\n" if hint else "")
                + "Answer:")
    user = f"{question}\n\nHint: {hint}" if hint else question
    if template == "chat":
        if not chat_template:
            raise ValueError("template 'chat' needs the checkpoint's chat template; this "
                             "tokenizer has none")
        messages = [dict(role="user", content=user)]
        return render_chat(chat_template, ([] if system is None else [
            dict(role="system", content=system)]) + messages, special_tokens)
    if template == "qwen_math":
        return (f"<|im_start|>system\n{SYSTEM_MATH if system is None else system}<|im_end|>\n"
                f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
    if template == "llama3_chat":
        return (f"<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
                f"December 2023\nToday Date: {LLAMA3_DATE}\n\n{(system or '').strip()}<|eot_id|>"
                f"<|start_header_id|>user<|end_header_id|>\n\n{user.strip()}<|eot_id|>"
                f"<|start_header_id|>assistant<|end_header_id|>\n\n")
    raise ValueError(f"unknown template {template!r}; choose from {TEMPLATES}")


def prompt_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """Token ids of a rendered prompt, with BOS first when the tokenizer has one and does not
    say to leave it out (`HFTokenizer.add_bos`)."""
    ids = tokenizer.encode(text)
    return [tokenizer.bos_id, *ids] if tokenizer.add_bos else ids


def prompt_text(tokenizer: Tokenizer, question: str, template: str, hint: str = "") -> str:
    """`render_prompt` with the tokenizer's chat template and the run's system prompt."""
    return render_prompt(question, template, hint, system=tokenizer.system_prompt,
                         chat_template=tokenizer.chat_template,
                         special_tokens=getattr(tokenizer, "special_tokens", None),
                         few_shot=getattr(tokenizer, "few_shot", ""))


def few_shot_text(solved) -> str:
    """(question, answer) pairs as the plain template asks the question, each answer after it
    and a blank line: a few-shot file's text (config.task.few_shot_file)."""
    return "".join(f"{render_prompt(q, 'plain')} {a}\n\n" for q, a in solved)


def encode_prompt(tokenizer: Tokenizer, question: str, template: str, hint: str = "") -> list[int]:
    """The ids the sampler starts from for one question: the rendered prompt (`prompt_text`),
    encoded; BOS prepended for the named templates (`prompt_ids`), while a checkpoint's own
    chat template writes it where it wants one (as transformers' tokenize=True does)."""
    text = prompt_text(tokenizer, question, template, hint)
    return tokenizer.encode(text) if template == "chat" else prompt_ids(tokenizer, text)


def checkpoint_chat(folder: str) -> dict | None:
    """A Hugging Face folder's own chat format, or None when it has no chat template:
    template "chat", eos_token = the token its template ends an assistant turn with (else the
    tokenizer's eos), extra_eos_tokens = the other stop tokens it names (generation_config.json's
    eos_token_id, tokenizer_config.json's eos_token), in that order."""
    from tokenizers import Tokenizer as _HF
    template = read_chat_template(folder)
    if not template:
        return None
    tok, cfg = _HF.from_file(os.path.join(folder, "tokenizer.json")), _tokenizer_config(folder)
    special = {k: _special(cfg, k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")
               if _special(cfg, k) is not None}
    stops = []
    end = turn_end(template, special)
    if end:
        first = tok.encode(end, add_special_tokens=False).ids[:1]
        added = tok.get_added_tokens_decoder()
        if first and first[0] in added and added[first[0]].special:
            stops.append(added[first[0]].content)
    gen_file = os.path.join(folder, "generation_config.json")
    gen_ids = []
    if os.path.exists(gen_file):
        with open(gen_file) as f:
            gen_ids = json.load(f).get("eos_token_id") or []
    stops += [tok.id_to_token(int(i)) for i in ([gen_ids] if isinstance(gen_ids, int)
                                                 else gen_ids)]
    stops.append(special.get("eos_token"))
    stops = list(dict.fromkeys(t for t in stops if t))
    if not stops:
        raise ValueError(f"{folder}: no eos token (chat template, generation_config.json, "
                         f"tokenizer_config.json); set config.model.eos_token")
    return dict(template="chat", eos_token=stops[0], extra_eos_tokens=tuple(stops[1:]))
