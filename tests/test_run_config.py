"""A workdir's config.json is the config of what runs on it (resume, evaluate), command-line
overrides on top; the resume guard still refuses overrides of fields that may not change."""
import json
import os
import sys

import jax
import pytest

from ada_jax import evaluate, run_config, train
from ada_jax.config_check import validate
from configs import base
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _workdir(tmp_path):
    """A workdir whose config.json is a GRPO run on the embedded task with its own settings."""
    c = base.get_config("algo=grpo,task=embedded,smoke=True")
    c.rl.steps, c.eval.prompts, c.model.d_model, c.task.reward = 7, 5, 64, "synthetic"
    (tmp_path / "config.json").write_text(c.to_json_best_effort(indent=1, sort_keys=True))
    return str(tmp_path), c


def _flags(*args):
    """(config as the command line builds it, argv)."""
    from absl import flags
    from ml_collections import config_flags
    argv = ["prog", *args]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", "configs/base.py", flag_values=fv, sys_argv=argv)
    fv(argv)
    return fv.config, argv


def test_saved_config_with_overrides_on_top(tmp_path):
    workdir, saved = _workdir(tmp_path)
    config, argv = _flags("--config.rl.steps=9", "--config.eval.k=3")
    got = run_config.for_workdir(config, argv, workdir)
    validate(got)
    assert (got.algo, got.task.name, got.smoke, got.model.d_model, got.eval.prompts,
            got.task.reward) == ("grpo", "embedded", True, 64, 5, "synthetic")
    assert (got.rl.steps, got.eval.k) == (9, 3)  # the overrides
    assert got.sharding_rules == saved.sharding_rules and got.is_locked
    assert config.algo == "ada_balance"  # the command line's config is left alone
    # the same variants retyped change nothing; other variants are taken as given
    same, argv = _flags("--config=configs/base.py:algo=grpo,task=embedded,smoke=True")
    assert run_config.for_workdir(same, argv, workdir).model.d_model == 64
    other, argv = _flags("--config=configs/base.py:algo=rloo,task=embedded,smoke=True")
    assert run_config.for_workdir(other, argv, workdir).rl.advantage == "rloo"
    assert run_config.for_workdir(config, argv, str(tmp_path / "new")) is config


def test_the_resume_guard_applies_to_overrides(tmp_path):
    workdir, _ = _workdir(tmp_path)
    ok = run_config.for_workdir(*_flags("--config.rl.steps=20"), workdir)
    train.check_resume(ok, workdir)  # run length may change
    bad = run_config.for_workdir(*_flags("--config.rl.n=8"), workdir)
    with pytest.raises(ValueError, match=r"changed: config.rl.n: 4 -> 8"):
        train.check_resume(bad, workdir)


# config.json's adaptive section as runs wrote it while each policy's settings were flat fields
# (a Knapsack-RL run's, four values changed from their defaults).
FLAT_ADAPTIVE = {
    "at_budget": "keep", "chunk_len": 16, "conformal_alpha": 0.1, "conformal_auto_delta": True,
    "conformal_calib_prompts": 64, "conformal_grid": [2, 4], "conformal_refit_every": 50,
    "dapo_at_cap": "train", "dapo_max_gen_batches": 4, "est_alpha": 1.0, "est_beta": 16.0,
    "est_budget_per_prompt": 8, "est_decay": 0.9, "est_weight": "inv_sqrt", "exit_rule": "none",
    "greso_delta_p": 0.01, "greso_max_draws": 8, "greso_p_easy": 0.5, "greso_p_hard": 0.5,
    "greso_p_min": 0.05, "greso_target_zero_var": 0.25, "gvm_alpha": 0.001, "gvm_beta": 2.0,
    "gvm_budget_per_prompt": 8, "gvm_pilot": 8, "k_neg": 2, "k_pos": 2, "knapsack_alpha": 0.9,
    "knapsack_budget_per_prompt": 8, "knapsack_n_max": 32, "knapsack_n_min": 3,
    "max_rounds": 4, "min_pool": 0, "mode": "refill", "overcommit": 0.75, "pc_commit": 8,
    "pc_p_high": 0.75, "pc_p_low": 0.25, "pc_pilot": 2, "pc_pilot_batches": 3,
    "policy": "knapsack", "samples_per_round": 8, "select_order": "generation", "slots": 32,
    "stream_ahead": -1, "stream_max_lag": 2, "stream_on_policy": False,
    "vip_budget_per_prompt": 8, "vip_estimator": "rloo", "vip_gamma": 0.0007,
    "vip_length_scale": 0.4, "vip_max_observed": 512, "vip_n_max": 32, "vip_n_min": 4,
    "vip_prior_logit": -1.0, "vip_smoothing": 0.5}


def test_a_config_json_with_flat_policy_fields_is_read_in_groups(tmp_path, caplog):
    """An older run's config.json (flat adaptive.knapsack_n_min, …) is read with every field
    in its group (resume, evaluate, the resume guard), none ignored, none reported changed;
    a real change is still refused under the field's name now; labels read it too."""
    from ada_jax import plots
    from ada_jax.config_check import FORMER, nest_flat
    c = base.get_config("algo=knapsack,task=embedded,smoke=True")
    saved = json.loads(c.to_json_best_effort())
    assert nest_flat(saved) is saved  # the grouped layout comes back as it is
    saved["adaptive"] = dict(FLAT_ADAPTIVE)
    (tmp_path / "config.json").write_text(json.dumps(saved))
    workdir = str(tmp_path)
    with caplog.at_level("WARNING"):
        got = run_config.for_workdir(*_flags("--config.rl.steps=9"), workdir)
        validate(got)
        train.check_resume(got, workdir)
    # every flat field is read and compared; only fields newer than the flat layout (absent
    # from FLAT_ADAPTIVE's era) may be reported as not compared
    flat_paths = {f"config.{FORMER[f'adaptive.{k}']}" for k in FLAT_ADAPTIVE
                  if f"adaptive.{k}" in FORMER}
    for r in caplog.records:
        msg = r.getMessage()
        assert "not compared: " in msg, msg
        assert not flat_paths & set(msg.split("not compared: ")[1].split(", ")), msg
    a = got.adaptive
    assert (a.knapsack.n_min, a.pilot_commit.pilot, a.stream.max_lag, a.conformal.grid,
            a.policy) == (3, 2, 2, (2, 4), "knapsack")
    assert set(a.keys()) == set(c.adaptive.keys())
    assert nest_flat(saved)["adaptive"]["knapsack"]["n_min"] == 3 and \
        saved["adaptive"] == FLAT_ADAPTIVE  # the read leaves the file's dict alone
    bad = run_config.for_workdir(*_flags("--config.adaptive.knapsack.n_min=4"), workdir)
    with pytest.raises(ValueError, match=r"config.adaptive.knapsack.n_min: 3 -> 4"):
        train.check_resume(bad, workdir)
    assert plots.run_labels([workdir]) == ["Knapsack-RL"]


def test_evaluate_returns_sample_completions_per_level(monkeypatch):
    """--samples=N: N completions per level, the first sample of the level's first prompts,
    with their reward (the sampler stubbed: the slow test below runs the real one)."""
    import numpy as np
    from ada_jax.tasks import EmbeddedSource
    c = base.get_config("task=embedded,smoke=True")
    problems = [EmbeddedSource("eval", 16, 0)[i] for i in range(16)]
    k = 2
    texts = [f"\\boxed{{{p.answer}}}" if j == 0 and i % 3 else "\\boxed{x}"
             for i, p in enumerate(problems) for j in range(k)]
    monkeypatch.setattr(evaluate, "sample_completions",
                        lambda *a, **kw: (texts, np.full((len(problems), k), 5)))
    out = evaluate.evaluate(None, None, None, problems, c, jax.random.key(0), k,
                            samples_per_level=2)
    levels = sorted({p.level for p in problems})
    assert [s["level"] for s in out["samples"]] == sorted(levels * 2)
    firsts = [i for lv in levels for i in [i for i, p in enumerate(problems) if p.level == lv][:2]]
    assert [s["question"] for s in out["samples"]] == [problems[i].question for i in firsts]
    assert [s["reward"] for s in out["samples"]] == [float(i % 3 != 0) for i in firsts]
    assert [s["completion"] for s in out["samples"]] == [texts[i * k] for i in firsts]


def test_evaluate_decodes_eval_batch_rows_samples_at_once(monkeypatch):
    """eval.batch_rows bounds the rows one sampler call decodes (its caches are the eval's
    memory): 10 problems x k 3 at 8 rows a call are 4 calls of 8 rows (the last padded), each
    row's text where it belongs; one call of 32 by default (no more rows than there are)."""
    import numpy as np
    from ada_jax import sampling
    from ada_jax.tasks import EmbeddedSource
    c = base.get_config("task=embedded,smoke=True")
    problems = [EmbeddedSource("eval", 10, 0)[i] for i in range(10)]
    calls = []

    def fake_sample(graphdef, params, toks, mask, key, cfg):
        calls.append(toks.shape[0])
        first = len(calls) - 1
        return sampling_result(np.arange(first * 100, first * 100 + toks.shape[0])[:, None],
                               np.ones(toks.shape[0], np.int32))

    class sampling_result:
        def __init__(self, tokens, lengths):
            self.tokens_BN, self.lengths_B = jax.numpy.asarray(tokens), jax.numpy.asarray(lengths)

    class Tok:
        def decode(self, ids):
            return str(ids[0])

    monkeypatch.setattr(sampling, "sample", fake_sample)
    monkeypatch.setattr(evaluate, "encode_prompts",
                        lambda tok, rows, tmpl, n: (np.zeros((len(rows), 4), np.int32),
                                                    np.ones((len(rows), 4), bool)))
    monkeypatch.setattr(evaluate, "sampling_config", lambda *a: None)
    texts, lengths = evaluate.sample_completions(None, None, Tok(), problems, c,
                                                 jax.random.key(0), 3, batch_rows=8)
    assert calls == [8, 8, 8, 8] and lengths.shape == (10, 3)
    assert texts == [str(100 * (r // 8) + r % 8) for r in range(30)]
    calls.clear()
    evaluate.sample_completions(None, None, Tok(), problems, c, jax.random.key(0), 3)
    assert calls == [32]  # 30 rows, padded to the 8 devices' multiple
    calls.clear()
    c.eval.batch_rows = 16
    evaluate.evaluate(None, None, Tok(), problems, c, jax.random.key(0), 3)
    assert calls == [16, 16]  # the config's eval.batch_rows


def test_evaluate_samples_in_eval_dtype_and_draw(monkeypatch):
    """eval.dtype and eval.draw set the evaluation's sampler apart from the learner's: the
    sampler gets the policy's graphdef computing in bfloat16 (one object across calls: one
    compile) over the very float32 params, and the inverse-CDF draw; unset, the run's own."""
    import numpy as np
    from flax import nnx
    from ada_jax import base_policy, sampling, sharding
    from ada_jax.tasks import EmbeddedSource
    from ada_jax.tokenizer import load_tokenizer
    c = base.get_config("task=embedded,smoke=True")
    graphdef, params = base_policy.init_params(c, sharding.make_mesh(c.mesh), c.seed)
    problems = [EmbeddedSource("eval", 4, 0)[i] for i in range(4)]
    seen = []
    real_sample = sampling.sample

    def spy(gd, p, toks, mask, key, cfg):
        seen.append((gd, p, cfg.draw))
        return real_sample(gd, p, toks, mask, key, cfg=cfg)

    monkeypatch.setattr(sampling, "sample", spy)
    tok = load_tokenizer(c)
    c.sampling.max_new_tokens = 4
    evaluate.sample_completions(graphdef, params, tok, problems, c, jax.random.key(0), 2)
    assert seen[-1] == (graphdef, params, "gumbel")  # the run's own
    c.eval.dtype, c.eval.draw = "bfloat16", "inverse_cdf"
    texts, lengths = evaluate.sample_completions(graphdef, params, tok, problems, c,
                                                 jax.random.key(0), 2)
    gd, p, draw = seen[-1]
    assert p is params and draw == "inverse_cdf" and gd != graphdef
    model = nnx.merge(gd, params)
    assert model.cfg.dtype == "bfloat16" and model.embed[...].dtype == np.float32
    assert len(texts) == 8 and lengths.shape == (4, 2) and (lengths >= 1).all()
    evaluate.sample_completions(graphdef, params, tok, problems, c, jax.random.key(1), 2)
    assert seen[-1][0] is gd  # the same graphdef again: no second compile
    c.eval.dtype = "float32"  # the policy's own dtype: its own graphdef
    assert evaluate.computing_in(graphdef, params, "float32") is graphdef


def test_evaluation_prefills_the_prompts_there_are_not_max_prompt_len():
    """Left padding past the longest prompt (rounded up to 16) is cut before the sampler: the
    same tokens and log-probs as at the full width (padding is masked), from a narrower program;
    never wider than the prompts were padded to."""
    import numpy as np
    from ada_jax import base_policy, sampling, sharding
    c = base.get_config("task=embedded,smoke=True")
    graphdef, params = base_policy.init_params(c, sharding.make_mesh(c.mesh), c.seed)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(3, 50, n).tolist() for n in (5, 17, 9, 1)]
    toks, mask = sampling.left_pad(seqs, 48)
    cut_t, cut_m = sampling.trim_left_padding(toks, mask)
    assert cut_t.shape == (4, 32) and cut_m.sum() == mask.sum()  # 17 -> 32
    np.testing.assert_array_equal(cut_t, toks[:, 16:])
    cfg = sampling.SamplingConfig(max_new_tokens=6, eos_id=-1, pad_id=0, temperature=1.0)
    full = sampling.sample(graphdef, params, jax.numpy.asarray(toks), jax.numpy.asarray(mask),
                           jax.random.key(3), cfg=cfg)
    cut = sampling.sample(graphdef, params, jax.numpy.asarray(cut_t),
                          jax.numpy.asarray(cut_m), jax.random.key(3), cfg=cfg)
    np.testing.assert_array_equal(np.asarray(cut.tokens_BN), np.asarray(full.tokens_BN))
    np.testing.assert_allclose(np.asarray(cut.logp_BN), np.asarray(full.logp_BN), atol=1e-5)
    narrow_t, _ = sampling.trim_left_padding(toks[:, -12:], mask[:, -12:])
    assert narrow_t.shape == (4, 12)  # at most the width it came with


@pytest.mark.slow
def test_resume_and_evaluate_from_the_workdir_alone(tmp_path):
    """Train 1 step with flags, then resume to 2 and evaluate naming only the workdir."""
    from tests.test_train import OVERRIDES
    workdir = str(tmp_path / "run")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    script = lambda name: [sys.executable, os.path.join(ROOT, "scripts", name)]  # noqa: E731
    helpers.run(script("train.py") + [
        f"--config={ROOT}/configs/base.py:algo=grpo,task=embedded,smoke=True",
        f"--workdir={workdir}", "--plots=false", "--config.rl.steps=1"] + [
        f"--config.{k}={v}" for k, v in OVERRIDES.items()], check=True, env=env)
    helpers.run(script("train.py") + [f"--workdir={workdir}", "--plots=false",
                                      "--config.rl.steps=2"], check=True, env=env)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2]
    out = os.path.join(workdir, "heldout.json")
    got = helpers.run(script("evaluate.py") + [f"--workdir={workdir}", "--k=2",
                                               "--samples=1", f"--out={out}"], check=True, env=env)
    report = json.loads(got.stdout.strip().splitlines()[-1])
    assert report["step"] == 2 and "avg@2" in report
    with open(out) as f:
        assert json.load(f) == report
    assert got.stdout.count("--- level ") == len([k for k in report if k.endswith("/avg@2")])
    assert f"config: {workdir}/config.json" in got.stderr
