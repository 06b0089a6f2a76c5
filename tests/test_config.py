"""Config: variants, command-line overrides, and errors that name the field."""
import os
import re
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from ada_jax.config_check import validate
from configs import base
from tests import helpers


@pytest.mark.parametrize("model", sorted(base.MODELS))
def test_every_model_variant_builds(model):
    c = base.get_config(f"model={model}")
    assert c.model.name == model
    assert c.model.n_heads % c.model.n_kv_heads == 0


@pytest.mark.parametrize("algo", sorted(base.ALGOS))
def test_every_algo_variant_builds(algo):
    c = base.get_config(f"algo={algo},smoke=True,task=embedded")
    assert c.algo == algo and c.smoke


def test_command_line_overrides():
    argv = ["prog", "--config=configs/base.py:algo=grpo,model=small,task=embedded",
            "--config.rl.steps=7", "--config.sampling.temperature=0.5"]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", "configs/base.py", flag_values=fv, sys_argv=argv)
    fv(argv)
    c = fv.config
    assert (c.algo, c.model.name, c.rl.steps, c.sampling.temperature) == ("grpo", "small", 7, 0.5)


@pytest.mark.parametrize("field,value,match", [
    ("model.dtype", "float16", "config.model.dtype"),
    ("rl.steps", 0, "config.rl.steps"),
    ("sampling.top_p", 1.5, "config.sampling.top_p"),
    ("sampling.max_new_tokens", 4000, "config.model.max_len"),
    ("adaptive.mode", "bogus", "config.adaptive.mode"),
    ("loss.agg", "mean", "config.loss.agg"),
    ("model.n_kv_heads", 3, "config.model.n_kv_heads"),
    ("mesh.fsdp", 0, "config.mesh.fsdp"),
    ("task.name", "gsm8k", "config.task.name"),
    ("optim.eps", -1.0, "config.optim.eps"),
    ("eval.train_prompts", -2, "config.eval.train_prompts"),
    ("optim.lr", float("nan"), "config.optim.lr"),  # NaN passed every `< 0` check
    ("sampling.temperature", float("nan"), "config.sampling.temperature"),
    ("checkpoint.every", 0, "config.checkpoint.every"),  # was a ZeroDivisionError after a step
    ("sft.careful_share", 1.5, "config.sft.careful_share"),
    ("sft.max_level", -1, "config.sft.max_level"),
])
def test_invalid_values_name_the_field(field, value, match):
    c = base.get_config("task=embedded")
    c.unlock()
    helpers.set_field(c, field, value)
    with pytest.raises(ValueError, match=match.replace(".", r"\.")):
        validate(c)


INF = float("inf")


@pytest.mark.parametrize("field,bad,good,allowed", [
    # Adam's betas: [0, 1); b = 1 never forgets (b2 = 1: the second moment never decays)
    ("optim.b1", 1.0, 0.9, "must be in [0, 1)"),
    ("optim.b1", -0.1, 0.0, "must be in [0, 1)"),
    ("optim.b2", 1.0, 0.999, "must be in [0, 1)"),
    ("optim.b2", float("nan"), 0.95, "must be in [0, 1)"),
    ("sft.lr", 0.0, 1e-4, "must be a finite number > 0"),
    ("sft.lr", INF, 3e-3, "must be a finite number > 0"),
    ("sft.lr", -3e-3, 3e-3, "must be a finite number > 0"),
    ("sft.warmup_steps", -1, 0, "must be an integer >= 0"),
    ("sft.batch_size", 0, 1, "must be a positive integer"),
    ("optim.warmup_steps", -1, 0, "must be an integer >= 0"),
    ("optim.eps", 0.0, 1e-12, "must be a finite number > 0"),  # 0/0 at a zero gradient
    ("optim.grad_clip", 0.0, 0.5, "must be a finite number > 0"),  # 0 zeroes every update
    ("optim.weight_decay", -0.1, 0.0, "must be a finite number >= 0"),
    ("optim.daro_lr", INF, 0.0, "must be a finite number >= 0"),
    ("loss.clip_low", 1.0, 0.99, "must be in [0, 1)"),
    ("loss.clip_high", -0.1, 0.0, "must be a finite number >= 0"),
    ("loss.dual_clip", 1.0, 3.0, "must be 0 (off) or > 1"),
    ("loss.dual_clip", 0.5, 0.0, "must be 0 (off) or > 1"),
    ("loss.behav_cap", 0.5, 1.5, "must be 0 (no cap) or >= 1"),
    ("adaptive.est.decay", 1.5, 1.0, "must be in [0, 1]"),
    ("adaptive.est.alpha", 0.0, 0.5, "must be a finite number > 0"),
    ("adaptive.est.beta", -1.0, 1.0, "must be a finite number > 0"),
    ("adaptive.est.budget_per_prompt", 0, 1, "must be a positive integer"),
    ("adaptive.gvm.pilot", 0, 1, "must be a positive integer"),
    ("adaptive.gvm.budget_per_prompt", 0, 1, "must be a positive integer"),
    ("adaptive.gvm.alpha", -1e-3, 0.0, "must be a finite number >= 0"),
    ("adaptive.gvm.beta", float("nan"), 1.0, "must be a finite number >= 0"),
    ("adaptive.dapo.max_gen_batches", 0, 1, "must be a positive integer"),
    ("rl.objective_alpha", 0.0, 0.25, "must be a finite number > 0"),
    ("rl.daro_buckets", -1, 0, "must be an integer >= 0"),
    ("model.norm_eps", 0.0, 1e-5, "must be a finite number > 0"),
    ("model.rope_base", -1.0, 1.0, "must be a finite number > 0"),
    ("task.verifier_workers", 0, 1, "must be a positive integer"),
    ("task.verifier_timeout", 0.0, 0.5, "must be a finite number > 0"),
    ("task.train_size", 0, 1, "must be a positive integer"),
    ("task.min_level", 0, 1, "need integers 1 <= min_level <= max_level <= 8"),
    ("task.max_level", 9, 8, "need integers 1 <= min_level <= max_level <= 8"),
])
def test_numeric_bounds(field, bad, good, allowed):
    """Each bound both ways: the bad value is refused with the field, the value and the allowed
    range in the message; the good one (at or next to the bound) passes."""
    c = base.get_config("task=embedded")
    c.unlock()
    helpers.set_field(c, field, bad)
    with pytest.raises(ValueError, match=re.escape(f"config.{field}={bad!r}") + ".*"
                       + re.escape(allowed)):
        validate(c)
    helpers.set_field(c, field, good)
    validate(c)


def test_last_number_answers_only_where_the_math_verifier_scores():
    c = base.get_config("task=embedded")
    c.unlock()
    c.task.answer = "last_number"
    with pytest.raises(ValueError, match=re.escape("config.task.answer='last_number' is read by "
                                                   "the math verifier")):
        validate(c)
    c.task.answer = "last_digit"
    with pytest.raises(ValueError, match=re.escape("config.task.answer")):
        validate(c)
    c = base.get_config("task=files")
    c.unlock()
    c.task.answer = "last_number"
    validate(c)


def test_llama3_rope_frequency_factors_are_ordered():
    c = base.get_config("model=llama3_2_1b")
    c.unlock()
    c.model.rope_high_freq_factor = c.model.rope_low_freq_factor
    with pytest.raises(ValueError, match=r"config\.model\.rope_high_freq_factor=1\.0 must exceed "
                                         r"config\.model\.rope_low_freq_factor=1\.0"):
        validate(c)


def test_bad_variant_args():
    with pytest.raises(ValueError, match="model="):
        base.get_config("model=gpt5")
    with pytest.raises(ValueError, match="unknown config arg"):
        base.get_config("colour=red")


@pytest.mark.parametrize("script", ["train.py", "sft.py", "evaluate.py"])
def test_unknown_command_line_field_is_named(script):
    """--config.rl.nn=3: an error naming the field and config.rl's fields (before: a traceback
    ending in a bare AttributeError: 'nn'), before anything runs, in every entry script."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = helpers.run([sys.executable, os.path.join(root, "scripts", script),
                       "--config.rl.nn=3", "--workdir=/nonexistent/never"],
                      env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode != 0
    assert "config.rl.nn" in out.stderr and "minibatches" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_former_flat_policy_field_names_its_group():
    """--config.adaptive.knapsack_n_min=3 (each policy's settings were flat fields of adaptive)
    stops before anything compiles, naming the field now, adaptive.knapsack.n_min."""
    from ada_jax.config_check import FORMER, unknown_override
    for old, new in [("knapsack_n_min", "knapsack.n_min"), ("pc_pilot", "pilot_commit.pilot"),
                     ("stream_max_lag", "stream.max_lag"), ("est_weight", "est.weight"),
                     ("dapo_max_gen_batches", "dapo.max_gen_batches")]:
        got = unknown_override(["prog", f"--config.adaptive.{old}=3"], "configs/base.py")
        assert f"config.adaptive.{old} is now config.adaptive.{new}" in got, got
        assert FORMER[f"adaptive.{old}"] == f"adaptive.{new}"
    assert unknown_override(["prog", "--config.adaptive.knapsack.n_min=3"],
                            "configs/base.py") is None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = helpers.run([sys.executable, os.path.join(root, "scripts", "train.py"),
                       "--config.adaptive.knapsack_n_min=3", "--workdir=/nonexistent/never"],
                      env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert "--config.adaptive.knapsack.n_min=" in out.stderr, out.stderr


def test_a_bool_is_not_a_count():
    """Python's True is the int 1: a count set to True (in code; the command line parses by
    the field's type) is refused, not run as one step."""
    c = base.get_config("algo=grpo,task=embedded")
    c.rl.steps = True
    with pytest.raises(ValueError, match=re.escape("config.rl.steps=True: must be a positive "
                                                   "integer")):
        validate(c)


def _from_command_line(*args):
    argv = ["prog", *args]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", "configs/base.py", flag_values=fv, sys_argv=argv)
    fv(argv)
    return fv.config


def test_eval_files_and_data_dir_from_the_command_line(tmp_path):
    """docs/data.md's task.eval_files and task.data_dir were unknown fields on the command line:
    a separate eval set replaces the hash-chosen 1/8 of `files`."""
    from ada_jax.config_check import unknown_override
    from ada_jax.tasks import load_split
    data = os.path.join(os.path.dirname(__file__), "data")
    args = ["--config=configs/base.py:task=files,smoke=True",
            f"--config.task.files={data}/math_sample.jsonl",
            f"--config.task.eval_files={data}/openr1_sample.jsonl",
            f"--config.task.data_dir={tmp_path}"]
    assert unknown_override(["prog", *args], "configs/base.py") is None
    c = _from_command_line(*args)
    validate(c)
    assert (c.task.eval_files, c.task.data_dir) == (f"{data}/openr1_sample.jsonl", str(tmp_path))
    with open(f"{data}/openr1_sample.jsonl") as f:
        assert len(load_split(c, "eval")) == sum(1 for line in f if line.strip())
    with open(f"{data}/math_sample.jsonl") as f:  # all of `files` trains
        assert len(load_split(c, "train")) == sum(1 for line in f if line.strip())


@pytest.mark.parametrize("field", ["files", "eval_files"])
def test_files_without_a_file_task_are_refused(field):
    """--config.task.files=mine.jsonl without task=files trained on the generated task."""
    c = _from_command_line(f"--config.task.{field}=mine.jsonl")
    with pytest.raises(ValueError, match=re.escape(
            f"config.task.{field}='mine.jsonl' but config.task.name='families'") + ".*"
            + re.escape(f"--config=configs/base.py:task=files --config.task.{field}=mine.jsonl")):
        validate(c)


@pytest.mark.parametrize("model", sorted(base.PRETRAINED) + ["hf"])
@pytest.mark.parametrize("task", ["families", "embedded"])
def test_a_pretrained_model_needs_a_real_task(model, task, tmp_path):
    """A pretrained model on the toy task (the pretrained variants' default before) is refused
    with the flags to pass; with task=files it passes."""
    c = base.get_config(f"model={model},task={task}")
    if model == "hf":  # the architecture comes from init_from's config.json
        import json
        (tmp_path / "config.json").write_text(json.dumps(dict(
            model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=256,
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, rope_theta=1e4, rms_norm_eps=1e-5,
            tie_word_embeddings=True, max_position_embeddings=4096)))
        c.model.init_from = str(tmp_path)
    with pytest.raises(ValueError, match=re.escape(
            f"config.model.name={model!r} is a pretrained model but config.task.name={task!r}")
            + ".*" + re.escape(f"--config=configs/base.py:model={model},task=files "
                               "--config.task.files=")):
        validate(c)
    validate(_from_command_line(f"--config=configs/base.py:model={model},task=files",
                                f"--config.model.init_from={c.model.init_from}"))


def test_misspelled_fields_and_variants_get_a_suggestion():
    from ada_jax.config_check import unknown_override
    got = unknown_override(["prog", "--config.rl.step=3"], "configs/base.py")
    assert "config.rl has no field 'step' (did you mean config.rl.steps?)" in got
    got = unknown_override(["prog", "--config.optm.lr=3"], "configs/base.py")
    assert "(did you mean config.optim?)" in got
    with pytest.raises(ValueError, match=re.escape("algo='grop' (did you mean 'grpo'?)")):
        base.get_config("algo=grop")
    with pytest.raises(ValueError, match=re.escape("model='tinny' (did you mean 'tiny'?)")):
        base.get_config("model=tinny")
    with pytest.raises(ValueError, match=re.escape("'smok' (did you mean 'smoke'?)")):
        base.get_config("smok=True")


@pytest.mark.parametrize("name", ["sage", "sage_light"])
def test_algo_sage_points_to_hints(name):
    with pytest.raises(ValueError, match=re.escape(
            f"--config=configs/base.py:algo=grpo --config.rl.hints={name} "
            f"--config.sampling.max_prompt_len=112")):
        base.get_config(f"algo={name}")
