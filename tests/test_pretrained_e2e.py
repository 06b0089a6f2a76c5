"""The pretrained-model path end to end, on local stand-ins (tests/standins.py; no downloads): a
tiny Qwen2.5-Math (q/k/v biases, tied and padded embedding) and Llama-3.2-Instruct (llama3 RoPE)
saved by `transformers`, with byte-level BPE tokenizers that split text as the real ones do and
carry their special tokens and Jinja chat templates, trained with `task=files` on a MATH-style
JSONL and scored by the math verifier, with `model=hf` (sizes from init_from's config.json).

Default suite: the config of model=hf and smoke for every pretrained model; one Qwen stand-in
run in the pretrained default (Ada-Seq, streaming) whose policy never draws a padded id, is
exported by `export.export_run` and generated from by `transformers` with no arguments,
stopping at <|im_end|>; a base Qwen3 folder without a chat template takes its family's format.
Slow: every other policy / mode / hints on both families and Ada-Seq-pos on a Qwen3 stand-in
(QK-norm), SIGKILL +
resume through scripts/train.py, scripts/evaluate.py and scripts/convert_hf.py on the workdir.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from ada_jax import collect, convert, evaluate, export, sampling, train
from ada_jax import tokenizer as tok_lib
from ada_jax.config_check import validate
from ada_jax.tasks import load_split
from configs import base
from tests import helpers, standins
from tests.helpers import logit_diff_vs_hf

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

ROOT = standins.ROOT
END = {"qwen2": "<|im_end|>", "qwen3": "<|im_end|>", "llama": "<|eot_id|>"}
# The CPU recipe of docs/scaling.md: smoke sizes, float32 compute without remat, no progress bar.
RECIPE = {"model.dtype": "float32", "model.remat": False, "log.progress": False}


@pytest.fixture(scope="session")
def stand_in(tmp_path_factory):
    """family -> a stand-in HF folder, each built once per session when first asked for."""
    root, built = tmp_path_factory.mktemp("standins"), {}

    def get(family):
        if family not in built:
            built[family] = standins.build_standin(str(root / family), family)
        return built[family]
    return get


@pytest.fixture(scope="session")
def math_file(tmp_path_factory):
    return standins.write_math_jsonl(str(tmp_path_factory.mktemp("data") / "math.jsonl"))


def _config(path, data, algo="ada_balance", **overrides):
    c = base.get_config(f"algo={algo},model=hf,task=files,smoke=True")
    for k, v in {"model.init_from": path, "task.files": data, **RECIPE, **overrides}.items():
        helpers.set_field(c, k, v)
    validate(c)
    return c


def _cli(script, workdir, path, data, algo="ada_balance", **overrides):
    args = [sys.executable, os.path.join(ROOT, "scripts", script),
            f"--config={os.path.join(ROOT, 'configs', 'base.py')}:algo={algo},model=hf,"
            f"task=files,smoke=True", f"--workdir={workdir}",
            f"--config.model.init_from={path}", f"--config.task.files={data}"]
    return args + [f"--config.{k}={v}" for k, v in {**RECIPE, **overrides}.items()]


def _env():
    return dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0", JAX_PLATFORMS="cpu")


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


# ----------------------------------------------------------------------------- config (fast)
def test_model_hf_takes_the_architecture_from_init_from(stand_in, math_file):
    path = stand_in("llama")
    c = _config(path, math_file)
    want = convert.model_config_from_hf(convert.read_hf_config(path))
    assert convert.architecture(want) == convert.architecture(
        convert.model_lib.ModelConfig.from_config(c.model))
    assert (c.model.rope_scaling, c.model.max_len, c.model.vocab_size) == (
        "llama3", 131072, want.vocab_size)
    # the checkpoint's own chat template and stop tokens (its template's turn end, then
    # generation_config.json's eos ids), not the family table's
    assert (c.task.template, c.model.eos_token, c.model.extra_eos_tokens) == (
        "chat", "<|eot_id|>", ("<|end_of_text|>", "<|eom_id|>"))
    validate(c)  # idempotent
    c.model.d_ff = 7  # a size set on the command line is checked, not replaced
    with pytest.raises(ValueError, match=r"config.model.d_ff=7 but .*config.json gives 128"):
        validate(c)
    bare = base.get_config("model=hf")  # get_config itself passes: init_from comes later
    with pytest.raises(ValueError, match="config.model.init_from is empty: model=hf"):
        validate(bare)


def test_a_base_folder_without_a_chat_template_uses_its_family_format(stand_in, math_file, tmp_path):
    """A base checkpoint without a chat template: the template and stop tokens of its
    model_type (tokenizer.CHAT_FAMILIES), Qwen3 here."""
    path = shutil.copytree(stand_in("qwen3"), tmp_path / "qwen3_base")
    with open(path / "tokenizer_config.json") as f:
        tok_config = json.load(f)
    del tok_config["chat_template"]
    with open(path / "tokenizer_config.json", "w") as f:
        json.dump(tok_config, f)
    c = _config(str(path), math_file)
    assert c.model.qk_norm and not c.model.qkv_bias
    assert (c.task.template, c.model.eos_token, c.model.extra_eos_tokens) == (
        "qwen_math", "<|im_end|>", ("<|endoftext|>",))


def test_parameter_counts_read_well():
    assert [convert.human_count(n) for n in (980, 35_200, 7_615_616, 1_543_714_304)] == [
        "980", "35.2K", "7.616M", "1.544B"]


@pytest.mark.parametrize("name", sorted(base.PRETRAINED) + ["hf"])
def test_smoke_works_for_every_pretrained_model(name, stand_in):
    c = base.get_config(f"model={name},smoke=True,task=files")
    if name == "hf":
        c.model.init_from = stand_in("qwen2")
    validate(c)
    engine, _, rows_per_prompt = collect.engine_config(c)
    train.check_batches(c, rows_per_prompt)
    assert c.sampling.max_prompt_len + c.sampling.max_new_tokens <= 512
    assert c.rl.steps == 2 and c.adaptive.slots == 16


# ----------------------------------------------------------------------------- a run (fast)
@pytest.fixture(scope="module")
def qwen_run(stand_in, math_file, tmp_path_factory):
    """A finished 2-step Qwen stand-in run: Ada-Seq-balance in stream mode (the pretrained
    default where slots allow); no evaluation (the slow tests evaluate)."""
    workdir = str(tmp_path_factory.mktemp("qwen_run"))
    c = _config(stand_in("qwen2"), math_file, **{"adaptive.mode": "stream", "eval.every": 0})
    train.train_and_evaluate(c, workdir)
    return c, workdir


def test_qwen_stand_in_trains_in_stream_mode(qwen_run):
    c, workdir = qwen_run
    recs = _metrics(workdir)
    assert [r["step"] for r in recs] == [1, 2]
    assert all(r["samples_total"] >= 4 * c.rl.n for r in recs)
    # the verifier scored the boxed digits: some right, some wrong
    assert 0 < np.mean([r["reward_mean"] for r in recs]) < 1


def test_qwen_stand_in_never_samples_a_padded_id(qwen_run):
    """Hot (T=20, near-uniform: without the mask ~19% of draws would be among the 96 padded
    rows of the 512-row embedding) sampling from the trained policy never draws a padded id."""
    c, workdir = qwen_run
    _, _, graphdef, params, _ = export.restore_params(workdir)
    tok = tok_lib.load_tokenizer(c)
    assert tok.vocab_size < c.model.vocab_size == 512
    toks, mask = evaluate.encode_prompts(tok, [load_split(c, "train", tok)[0]] * 32,
                                         c.task.template, c.sampling.max_prompt_len)
    scfg = evaluate.sampling_config(c, tok, temperature=20.0)
    assert scfg.vocab_size == tok.vocab_size
    out = sampling.sample(graphdef, params, toks, mask, jax.random.key(1), cfg=scfg)
    drawn = np.asarray(out.tokens_BN)[np.arange(scfg.max_new_tokens) < np.asarray(
        out.lengths_B)[:, None]]
    assert drawn.size > 100 and drawn.max() < tok.vocab_size


def test_qwen_export_generates_with_transformers(qwen_run, tmp_path):
    """export_run writes a folder transformers loads with no missing keys, whose logits are
    the trained policy's and whose generate() (no arguments) stops at the chat end token."""
    c, workdir = qwen_run
    out = str(tmp_path / "export")
    got = export.export_run(workdir, out)
    assert got["step"] == 2 and got["params"] > 0
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    end, eot = hf_tok.convert_tokens_to_ids("<|im_end|>"), hf_tok.convert_tokens_to_ids(
        "<|endoftext|>")
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not any(info.values()), info
    assert hf.generation_config.eos_token_id == [end, eot]
    assert hf.generation_config.pad_token_id == eot and hf_tok.eos_token == "<|im_end|>"
    assert hf.config.max_position_embeddings == 4096  # the checkpoint's, not the run's
    with open(os.path.join(out, "generation_config.json")) as f:  # a length: the model's
        assert "max_new_tokens" not in json.load(f) and hf.generation_config.max_length == 4096
    messages = [dict(role="user", content="What is $2 + 3$?")]
    enc = hf_tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,
                                     return_tensors="pt")
    text = hf_tok.decode(enc["input_ids"][0])
    assert text == tok_lib.render_prompt("What is $2 + 3$?", "qwen_math")
    _, _, graphdef, params, _ = export.restore_params(workdir)
    ids = enc["input_ids"].numpy().astype(np.int32)
    diff, scale = logit_diff_vs_hf(graphdef, params, hf.eval(), ids, np.ones_like(ids, bool))
    assert diff < 1e-4 * max(scale, 1.0), (diff, scale)
    with torch.no_grad():
        new = hf.generate(**enc)[0, ids.shape[1]:].tolist()
    assert new[-1] == end and end not in new[:-1], hf_tok.decode(new)
    assert len(new) < c.sampling.max_new_tokens


# ----------------------------------------------------------------------------- slow
@pytest.mark.slow
@pytest.mark.parametrize("family,algo,overrides", [
    ("llama", "ada_balance", {"adaptive.mode": "refill"}),
    ("llama", "ada_balance", {"adaptive.mode": "stream"}),
    ("qwen2", "ada_balance", {"adaptive.mode": "refill"}),
    ("qwen2", "grpo", {}),
    ("qwen2", "ada_est", {}),
    ("qwen2", "dapo", {"adaptive.dapo.max_gen_batches": 32}),
    ("qwen2", "gvm", {}),
    ("qwen2", "grpo", {"rl.hints": "sage"}),
    ("qwen3", "ada_pos", {}),
], ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()))
def test_every_policy_runs_on_the_stand_ins(family, algo, overrides, stand_in, math_file,
                                            tmp_path):
    c = _config(stand_in(family), math_file, algo, **overrides)
    last = train.train_and_evaluate(c, str(tmp_path))
    recs = [r for r in _metrics(str(tmp_path)) if "loss" in r]
    assert [r["step"] for r in recs] == [1, 2] and np.isfinite(last["loss"])
    assert f"eval/avg@{c.eval.k}" in last
    assert 0 < np.mean([r["reward_mean"] for r in recs]) < 1


def _latest_step(workdir):
    d = os.path.join(workdir, "checkpoints")
    return max([int(x) for x in os.listdir(d) if x.isdigit()] if os.path.isdir(d) else [],
               default=0)


@pytest.mark.slow
def test_sigkill_resume_evaluate_and_export_through_the_scripts(stand_in, math_file, tmp_path):
    """scripts/train.py on the Llama stand-in in stream mode, killed after a save and resumed,
    ends bitwise equal to an unbroken run; scripts/evaluate.py reads the workdir; and
    scripts/convert_hf.py exports it for transformers' generate() (Llama-3.2's sampling
    defaults), whose samples stop at <|eot_id|>, and names model=hf for the stand-in folder."""
    from tests.test_train import _meta_without_timing, _metrics_without_timing, _restore
    path, steps = stand_in("llama"), 6
    extra = {"adaptive.mode": "stream", "rl.steps": steps, "checkpoint.every": 1}
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    helpers.run(_cli("train.py", ref, path, math_file, **extra) + ["--plots=false"],
                check=True, env=_env())
    proc = subprocess.Popen(_cli("train.py", run, path, math_file, **extra) + ["--plots=false"],
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    helpers.watch(proc, lambda: _latest_step(run), until=lambda: _latest_step(run) >= 1,
                  what="the run to kill")
    time.sleep(random.Random(0).uniform(0.0, 0.5))  # at a random moment after the first save
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _latest_step(run) < steps
    helpers.run(_cli("train.py", run, path, math_file, **extra) + ["--plots=false"],
                check=True, env=_env())
    (step_a, arrays_a, meta_a), (step_b, arrays_b, meta_b) = _restore(ref), _restore(run)
    assert step_a == step_b == steps
    for a, b in zip(jax.tree.leaves(arrays_a), jax.tree.leaves(arrays_b)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert _meta_without_timing(meta_a) == _meta_without_timing(meta_b)
    assert _metrics_without_timing(ref) == _metrics_without_timing(run)

    got = helpers.run(_cli("evaluate.py", run, path, math_file, **extra) + ["--k=2"],
                      check=True, env=_env())
    report = json.loads(got.stdout.strip().splitlines()[-1])
    assert report["step"] == steps and 0 <= report["avg@2"] <= 1

    out = str(tmp_path / "export")
    got = helpers.run([sys.executable, os.path.join(ROOT, "scripts", "convert_hf.py"),
                       f"--workdir={run}", f"--out={out}"], check=True, env=_env())
    assert f"exported step {steps} of {run}" in got.stdout and "K params" in got.stdout
    got = helpers.run([sys.executable, os.path.join(ROOT, "scripts", "convert_hf.py"),
                       f"--hf_dir={path}"], check=True, env=_env())
    assert f"model=hf --config.model.init_from={path}" in got.stdout  # not in MODELS
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    end = hf_tok.convert_tokens_to_ids("<|eot_id|>")
    assert hf.generation_config.do_sample and end in hf.generation_config.eos_token_id
    enc = hf_tok.apply_chat_template([dict(role="user", content="What is $1 + 2$?")],
                                     add_generation_prompt=True, return_dict=True,
                                     return_tensors="pt", date_string=tok_lib.LLAMA3_DATE)
    torch.manual_seed(0)
    with torch.no_grad():
        new = hf.generate(**enc)[0, enc["input_ids"].shape[1]:].tolist()
    assert new[-1] == end and end not in new[:-1], hf_tok.decode(new)


@pytest.mark.slow
def test_real_model_script_runs_arms_to_one_budget_and_tabulates(stand_in, tmp_path):
    """scripts/real_model.sh on the Qwen stand-in and a small arithmetic task: the base's
    evaluation, two arms to one sample budget, each evaluated after, and the table."""
    task, out = str(tmp_path / "task"), str(tmp_path / "out")
    helpers.run([sys.executable, os.path.join(ROOT, "scripts", "tools",
                                              "make_arithmetic_task.py"), f"--out_dir={task}",
                 "--train_per_level=8", "--eval_per_level=2"], check=True, env=_env())
    # its few-shot file: solved questions of neither split, in the plain template's form
    with open(os.path.join(task, "shots.txt")) as f:
        shots = re.findall(r"Question: (.*)\nAnswer: (\d+)\n\n", f.read())
    split = [json.loads(line)["question"] for name in ("train", "eval")
             for line in open(os.path.join(task, f"{name}.jsonl"))]
    assert len(shots) == 4 and not {q for q, _ in shots} & set(split)
    assert all(eval(q.split("What is ")[1].split("?")[0].replace("×", "*")) == int(a)
               for q, a in shots)
    env = dict(_env(), ARMS="grpo_n4 ada_pos", BUDGET="48", PROMPTS="4", NEW_TOKENS="8",
               EXTRA=" ".join(f"--config.{k}={v}" for k, v in RECIPE.items())
               + " --config.eval.every_cost=24 --config.eval.k=1")  # an in-run cost grid
    got = helpers.run(["bash", os.path.join(ROOT, "scripts", "real_model.sh"),
                       stand_in("qwen2"), task, out, "0"], check=True, env=env)
    assert "some runs failed" not in got.stdout, got.stdout
    lines = got.stdout.splitlines()
    assert lines[0].startswith("| arm | seed | steps |") and "| level4 |" in lines[0]
    for arm in ("grpo_n4", "ada_pos"):
        with open(os.path.join(out, f"{arm}_s0", "metrics.jsonl")) as f:
            assert json.loads(f.readlines()[-1])["cost_samples"] >= 48  # ran to the budget
        assert any(line.startswith(f"| {arm} | 0 |") for line in lines)
    assert any(line.startswith("| ada_pos | ") and " of 1)" in line for line in lines)
    # against the GRPO arm at the budget and, from the grid, at matched steps, samples, FLOPs
    for words in ("Against grpo_n4, same seed", "at matched steps, against grpo_n4",
                  "at matched samples generated, against grpo_n4",
                  "at matched FLOP-weighted cost"):
        assert any(words in line for line in lines), (words, got.stdout)
    # a larger budget resumes every run and reads it there; the smaller budget's report stays;
    # PRUNE=1 deletes each run's checkpoints once its final evaluation is written
    got = helpers.run(["bash", os.path.join(ROOT, "scripts", "real_model.sh"),
                       stand_in("qwen2"), task, out, "0"], check=True,
                      env=dict(env, BUDGET="96", PRUNE="1"))
    assert "some runs failed" not in got.stdout, got.stdout
    for arm in ("grpo_n4", "ada_pos"):
        assert os.path.exists(os.path.join(out, f"{arm}_s0", "heldout_48.json"))
        assert os.path.exists(os.path.join(out, f"{arm}_s0", "heldout_96.json"))
        assert not os.path.exists(os.path.join(out, f"{arm}_s0", "checkpoints"))
        with open(os.path.join(out, f"{arm}_s0", "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        assert [r["step"] for r in recs if "eval/avg@1" in r][0] == 0  # the grid's first point
        recs = [r for r in recs if r["step"] > 0]
        costs = [r["cost_samples"] for r in recs]
        assert [r["step"] for r in recs] == list(range(1, len(recs) + 1))  # resumed, once
        assert costs == sorted(costs) and costs[-1] >= 96 > costs[-2]
        row = next(line for line in got.stdout.splitlines() if line.startswith(f"| {arm} | 0 |"))
        header = [c.strip() for c in got.stdout.splitlines()[0].split("|")]
        assert int(row.split("|")[header.index("cost (samples)")]) == costs[-1]
    # KEEP: the base's and each finished run's small files kept in a folder; a study on a new
    # machine (a fresh OUT) finds them there, runs nothing again and tabulates them; the grid on
    # the first GRID_PROMPTS questions, the final evaluation on every question
    keep, fresh = str(tmp_path / "keep"), str(tmp_path / "fresh")
    env = dict(env, BUDGET="48", KEEP=keep, GRID_PROMPTS="3", ARMS="grpo_n4")
    got = helpers.run(["bash", os.path.join(ROOT, "scripts", "real_model.sh"), stand_in("qwen2"),
                       task, str(tmp_path / "out2"), "0"], check=True, env=env)
    assert sorted(os.listdir(os.path.join(keep, "grpo_n4_s0"))) == [
        "config.json", "heldout_48.json", "metrics.jsonl"]
    assert os.path.exists(os.path.join(keep, "base.json"))
    with open(os.path.join(keep, "grpo_n4_s0", "metrics.jsonl")) as f:
        grid = [json.loads(line) for line in f if "eval/avg@1" in line]
    n_eval = sum(1 for _ in open(os.path.join(task, "eval.jsonl")))
    assert grid and all(sum(r.get(f"eval/level{lv}/avg@1") is not None for lv in range(1, 7))
                        <= 3 for r in grid)  # 3 questions: at most 3 levels
    with open(os.path.join(keep, "grpo_n4_s0", "heldout_48.json")) as f:
        final = json.load(f)
    assert n_eval > 3 and sum(k.startswith("level") for k in final) > 3  # every question
    got = helpers.run(["bash", os.path.join(ROOT, "scripts", "real_model.sh"), stand_in("qwen2"),
                       task, fresh, "0"], check=True, env=dict(env, ARMS="grpo_n4 ada_pos"))
    assert not os.path.exists(os.path.join(fresh, "grpo_n4_s0"))  # found in KEEP: not run again
    assert os.path.exists(os.path.join(keep, "ada_pos_s0", "heldout_48.json"))
    lines = got.stdout.splitlines()
    assert any(line.startswith("| grpo_n4 | 0 |") for line in lines)
    assert any("Against grpo_n4, same seed" in line for line in lines)
