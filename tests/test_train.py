"""Trainer: one-step golden values per algorithm, learning signal, exact resume after SIGKILL,
corrupted checkpoints, non-finite steps skipped."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import optax
import pytest

from ada_jax import learn, preemption, train
from ada_jax.checkpoint import Checkpointer
from ada_jax.config_check import validate
from configs import base
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL_MODEL = dict(d_model=64, n_layers=2, d_ff=128, n_heads=4, n_kv_heads=2, head_dim=16)
# Overrides shared by the in-process and subprocess runs: random init, synthetic reward.
OVERRIDES = {"sft.steps": 0, "task.reward": "synthetic", "eval.every": 0, "log.progress": False,
             **{f"model.{k}": v for k, v in SMALL_MODEL.items()}}


def _config(algo, **overrides):
    c = base.get_config(f"algo={algo},smoke=True,task=embedded")
    c.unlock()
    for k, v in {**OVERRIDES, **overrides}.items():
        helpers.set_field(c, k, v)
    return c


def _restore(workdir):
    from ada_jax.checkpoint import abstract_like  # noqa: F401
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"))
    ckpt.manager.reload()
    step = ckpt.manager.latest_step()
    out = ckpt.manager.restore(step)
    ckpt.close()
    return step, out["arrays"], out["meta"]


def test_reward_rises_under_grpo(tmp_path):
    # The same 8 prompts every step, so the pool reward tracks the policy, not the prompts.
    c = _config("grpo", **{"rl.steps": 12, "rl.prompts_per_step": 8, "task.train_size": 8,
                           "optim.lr": 1e-2, "optim.warmup_steps": 1, "checkpoint.every": 100})
    train.train_and_evaluate(c, str(tmp_path))
    with open(tmp_path / "metrics.jsonl") as f:
        r = [json.loads(line)["reward_mean"] for line in f]
    assert np.mean(r[-3:]) > np.mean(r[:3]) + 0.1, r


def _cli(workdir, steps, extra=()):
    args = [sys.executable, os.path.join(ROOT, "scripts", "train.py"),
            f"--config={os.path.join(ROOT, 'configs', 'base.py')}:algo=ada_balance,smoke=True",
            f"--workdir={workdir}", "--plots=false", f"--config.rl.steps={steps}",
            "--config.checkpoint.every=1", "--config.eval.every=2"]
    args += [f"--config.{k}={v}" for k, v in OVERRIDES.items() if k != "eval.every"]
    return args + list(extra)


def _meta_without_timing(meta):
    """A checkpoint's meta less the run's cumulative wall time (the only timing it holds) and
    the metadata's own checksum (which covers that time)."""
    meta = {k: v for k, v in meta.items() if k != "_meta_sha256"}
    return {**meta, "totals": {k: v for k, v in meta["totals"].items() if k != "wall"}}


def _metrics_without_timing(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    return [{k: v for k, v in r.items() if not k.startswith("time_") and k != "cum_wall"}
            for r in recs]


# Slow (70 s a case): a SIGKILL mid-save then a completed resume is
# tests/test_reliability.py's kill test; a resume ending bitwise equal to an unbroken run, the
# in-process resume tests (test_a_run_with_replay_resumes_bitwise, tests/test_resume.py,
# tests/test_stream.py, the policies' resume tests).
@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("--config.adaptive.mode=stream",)],
                         ids=["extra0", "stream"])
def test_resume_after_sigkill_is_bitwise_equal(tmp_path, extra):
    """Killed twice at random moments after a save, the run ends bitwise equal to an unbroken
    one; streaming too (its engine state, resident prompts and queue are in the checkpoint)."""
    steps = 6
    env = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0", JAX_PLATFORMS="cpu")
    ref = str(tmp_path / "ref")
    helpers.run(_cli(ref, steps, extra), check=True, env=env)
    run = str(tmp_path / "run")
    rng = random.Random(0)
    kills = 0
    while kills < 2:
        # Kill at a random moment shortly after the process has saved a new step.
        start_step = _latest_step(run)
        assert start_step < steps - 1, "the runs finished before two kills"
        proc = subprocess.Popen(_cli(run, steps, extra), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        if helpers.watch(proc, lambda: _latest_step(run),
                         until=lambda: _latest_step(run) > start_step) is None:
            time.sleep(rng.uniform(0.0, 1.0))
        assert proc.poll() is None, "the process ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    helpers.run(_cli(run, steps, extra), check=True, env=env)
    assert _restore(ref)[0] == steps
    _same_run(ref, run)


def _steps_written(workdir) -> list:
    path = os.path.join(workdir, "metrics.jsonl")
    return [json.loads(line)["step"] for line in open(path)] if os.path.exists(path) else []


def _same_run(ref, run):
    """Two finished runs' last checkpoints (arrays bitwise, metadata) and metrics (timing aside)
    are equal."""
    step_a, arrays_a, meta_a = _restore(ref)
    step_b, arrays_b, meta_b = _restore(run)
    assert step_a == step_b
    for a, b in zip(jax.tree.leaves(arrays_a), jax.tree.leaves(arrays_b)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert _meta_without_timing(meta_a) == _meta_without_timing(meta_b)
    assert _metrics_without_timing(ref) == _metrics_without_timing(run)


def test_sigterm_is_a_preemption_notice_while_the_loop_runs():
    """One process without jax.distributed: SIGTERM sets the notice instead of killing."""
    before = signal.getsignal(signal.SIGTERM)
    with preemption.Notice() as notice:
        assert not notice.reached(1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert notice.reached(2)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_notice_saves_the_step_off_schedule_and_stops(tmp_path, monkeypatch):
    """At the step the notice is reached the checkpoint is saved (checkpoint.every aside) and
    Preempted raised; the same call then completes the run."""
    monkeypatch.setattr(preemption.Notice, "reached", lambda self, step: step == 2)
    c = _config("grpo", **{"rl.steps": 3, "checkpoint.every": 100})
    with pytest.raises(preemption.Preempted, match="checkpoint saved at step 2"):
        train.train_and_evaluate(c, str(tmp_path))
    assert _latest_step(str(tmp_path)) == 2 and _steps_written(str(tmp_path)) == [1, 2]
    monkeypatch.undo()
    train.train_and_evaluate(c, str(tmp_path))
    assert _steps_written(str(tmp_path)) == [1, 2, 3]


@pytest.mark.slow
def test_sigterm_saves_exits_143_and_the_same_command_resumes_bitwise(tmp_path):
    """A pre-emption notice (SIGTERM) mid-run: the step ends, its checkpoint is saved (off the
    checkpoint.every schedule), the run exits 143 with one line saying so, and the same
    command completes the run bitwise equal to an unbroken one. Before: SIGTERM killed the run
    at once and the steps since the last scheduled checkpoint were lost."""
    steps, extra = 8, ["--config.checkpoint.every=100"]
    env = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0", JAX_PLATFORMS="cpu")
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    helpers.run(_cli(ref, steps, extra), check=True, env=env)
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(_cli(run, steps, extra), env=env, stdout=subprocess.DEVNULL,
                                stderr=err)
        helpers.watch(proc, lambda: _steps_written(run), until=lambda: 2 in _steps_written(run))
        proc.send_signal(signal.SIGTERM)
        rc = helpers.watch(proc, lambda: _steps_written(run))
    last = (tmp_path / "err").read_text().strip().splitlines()[-1]
    assert rc == 143, last
    saved = int(re.fullmatch(r"ada_jax: pre-empted: checkpoint saved at step (\d+) on every "
                             r"process; run the same command again to resume \(exit status "
                             r"143\)", last).group(1))
    assert 2 <= saved < steps and _latest_step(run) == saved == _steps_written(run)[-1]
    helpers.run(_cli(run, steps, extra), check=True, env=env)
    _same_run(ref, run)


def _latest_step(workdir):
    d = os.path.join(workdir, "checkpoints")
    steps = [int(x) for x in os.listdir(d) if x.isdigit()] if os.path.isdir(d) else []
    return max(steps, default=0)


def test_corrupted_and_partial_checkpoints_are_skipped(tmp_path):
    wd = str(tmp_path)
    c = _config("grpo", **{"rl.steps": 2, "checkpoint.every": 1})
    train.train_and_evaluate(c, wd)
    # Corrupt the newest checkpoint's array files and leave a half-written temporary one.
    newest = os.path.join(wd, "checkpoints", "2")
    for root, _, files in os.walk(newest):
        for name in files:
            if "arrays" in root or name.endswith((".zarray", "manifest.ocdbt")):
                with open(os.path.join(root, name), "wb") as f:
                    f.write(b"\x00garbage")
    os.makedirs(os.path.join(wd, "checkpoints", "3.orbax-checkpoint-tmp-123"))
    c = _config("grpo", **{"rl.steps": 3, "checkpoint.every": 1})
    train.train_and_evaluate(c, wd)
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f]
    assert steps == [1, 2, 3]  # resumed from step 1, redid 2 and 3
    assert _restore(wd)[0] == 3


def test_cumulative_totals_resume_from_the_checkpoint(tmp_path):
    """cum_* counts continue from the checkpoint's own totals, which every process holds
    (only process 0 has a metrics file); before, the others restarted them at zero."""
    wd = str(tmp_path)
    train.train_and_evaluate(_config("grpo", **{"rl.steps": 2, "checkpoint.every": 1}), wd)
    path = os.path.join(wd, "metrics.jsonl")
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    totals = _restore(wd)[2]["totals"]
    assert totals == {k: recs[-1][f"cum_{k}"] for k in totals}
    assert {"generated_tokens", "samples", "wall"} <= set(totals)
    with open(path, "w") as f:  # what a process other than 0 knows of the metrics: nothing
        f.writelines(json.dumps({k: v for k, v in r.items() if not k.startswith("cum_")}) + "\n"
                     for r in recs)
    met = train.train_and_evaluate(_config("grpo", **{"rl.steps": 3, "checkpoint.every": 1}), wd)
    for k, step in (("generated_tokens", "generated_tokens"), ("samples", "samples_total")):
        assert met[f"cum_{k}"] == recs[-1][f"cum_{k}"] + met[step] > met[step]


def test_non_finite_step_is_skipped_and_checkpointed(tmp_path):
    """A skipped update leaves the previous (finite) state, which is saved on schedule: before,
    a skipped last step was never saved, so every re-run repeated it."""
    wd = str(tmp_path)
    c = _config("grpo", **{"rl.steps": 2, "checkpoint.every": 1, "rl.inject_nan_step": 1})
    train.train_and_evaluate(c, wd)
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        log = f.read()
    recs = [json.loads(line, parse_constant=_no_nan) for line in log.splitlines()]
    assert [r["skipped"] for r in recs] == [0.0, 1.0]
    assert recs[1]["loss"] is None and "loss" in recs[1]["nonfinite"]  # before: bare NaN
    assert "nonfinite" not in recs[0]
    ckpt = Checkpointer(os.path.join(wd, "checkpoints"))
    assert ckpt.manager.all_steps() == [1, 2]
    params = [ckpt.manager.restore(s)["arrays"]["trainable"]["model"] for s in (1, 2)]
    ckpt.close()
    for a, b in zip(*map(jax.tree.leaves, params)):
        np.testing.assert_array_equal(a, b)  # step 2's update was skipped
    again = train.train_and_evaluate(c, wd)  # finished: nothing is redone
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        assert f.read() == log
    assert again["skipped"] == 1.0


def _no_nan(name):
    raise ValueError(f"{name} is not JSON")


def test_a_diverging_run_stops_saying_so(tmp_path):
    """lr 1e3: the first update moves the params by thousands of times their norm, every
    logit saturates, and reward, loss and gradient sit at 0 (before: all 6 steps ran and the
    run exited 0). Each such update is skipped; optim.max_skipped_steps in a row stop the
    run, the params unharmed. A run at a sane lr stays far below the ratio."""
    c = _config("grpo", **{"rl.steps": 6, "optim.lr": 1e3, "optim.warmup_steps": 0,
                           "optim.max_skipped_steps": 3, "checkpoint.every": 1})
    with pytest.raises(train.Diverged, match=r"3 updates skipped with none applied in between"
                                             r" .* update_ratio \d+.*Lower optim.lr \(1000\)"):
        train.train_and_evaluate(c, str(tmp_path / "lr1e3"))
    with open(tmp_path / "lr1e3" / "metrics.jsonl") as f:
        recs = [json.loads(line) for line in f]
    assert sum(r["skipped"] for r in recs) == 3 and recs[-1]["skipped"] == 1 and len(recs) < 6
    assert all(r["update_ratio"] > 100 for r in recs if r["skipped"])
    assert all(r["grad_norm"] == 0 for r in recs if not r["skipped"])  # no signal: no update
    m = train.train_and_evaluate(_config("grpo", **{"rl.steps": 2, "optim.lr": 1e-2,
                                                    "optim.warmup_steps": 0}),
                                 str(tmp_path / "lr1e-2"))
    assert m["skipped"] == 0 and m["update_ratio"] < 0.1, m["update_ratio"]


def test_nan_learning_rate_update_is_skipped(tmp_path):
    """Finite loss and gradient but a NaN lr: the new params are checked too (before: applied,
    every param NaN)."""
    c = _config("grpo", **{"optim.warmup_steps": 0})
    ctx, params = train.setup(c, str(tmp_path))
    c.optim.lr = float("nan")  # past validation, which now rejects it
    before, after, met = _one_update(c, str(tmp_path), ctx=(ctx, params))
    assert met["skipped"] == 1.0 and np.isfinite(met["grad_norm"])
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)):
        np.testing.assert_array_equal(a, b)


def test_bad_minibatch_count_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="minibatches"):
        train.train_and_evaluate(_config("grpo", **{"rl.minibatches": 3}), str(tmp_path))


@pytest.mark.parametrize("field,value,match", [
    ("rl.minibatches", 3, "minibatches"), ("task.train_size", 3, "prompts_per_step=4")])
def test_batch_checks_run_before_sft_and_config_json(tmp_path, field, value, match):
    """Rejected before the warm start runs (before: SFT first) and before config.json is
    written (before: overwritten first)."""
    with pytest.raises(ValueError, match=match):
        train.train_and_evaluate(_config("grpo", **{"sft.steps": 10, field: value}),
                                 str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_a_failed_start_leaves_no_empty_workdir(tmp_path):
    """A missing data file stops the run at start; the workdir it made (and its new parents)
    is removed, an existing one kept."""
    c = base.get_config("task=files,smoke=True")
    c.task.files = str(tmp_path / "missing.jsonl")
    with pytest.raises((FileNotFoundError, ValueError), match="missing.jsonl"):
        train.train_and_evaluate(c, str(tmp_path / "runs" / "a"))
    assert os.listdir(tmp_path) == []
    with pytest.raises((FileNotFoundError, ValueError), match="missing.jsonl"):
        train.train_and_evaluate(c, str(tmp_path))
    assert tmp_path.is_dir()


def test_config_json_is_kept_when_a_check_fails(tmp_path):
    """An existing workdir's config.json is rewritten only after every check (mesh included)."""
    with open(tmp_path / "config.json", "w") as f:
        f.write(_config("grpo").to_json_best_effort(indent=1, sort_keys=True))
    before = (tmp_path / "config.json").read_text()
    with pytest.raises(ValueError, match="config.mesh"):
        train.train_and_evaluate(_config("grpo", **{"mesh.data": 3}), str(tmp_path))
    assert (tmp_path / "config.json").read_text() == before


def test_kl_to_reference_policy(tmp_path):
    """KL in the loss: zero while the policy equals the reference, positive after updates."""
    c = _config("grpo", **{"rl.steps": 2, "loss.kl_coef": 0.1, "optim.lr": 1e-2,
                           "optim.warmup_steps": 1, "checkpoint.every": 100})
    train.train_and_evaluate(c, str(tmp_path))
    with open(tmp_path / "metrics.jsonl") as f:
        kl = [json.loads(line)["kl"] for line in f]
    assert kl[0] < 1e-6 < kl[1]


@pytest.mark.parametrize("scheduler", ["sage", "sage_light"])
def test_self_hinting_runs_and_reports(tmp_path, scheduler):
    # The embedded verifier on a random model: every group collapses, so SAGE escalates.
    c = _config("grpo", **{"rl.steps": 2, "rl.hints": scheduler, "task.reward": "verifier",
                           "sampling.max_prompt_len": 128, "checkpoint.every": 1,
                           "task.train_size": 4})  # the same 4 prompts every step
    m = train.train_and_evaluate(c, str(tmp_path))
    if scheduler == "sage":
        assert m["hint_collapsed_share"] == 1.0 and m["hint_level_mean"] == 3.0
        assert m["samples_total"] == 4 * 4 * 4  # the group, then three hinted re-rolls
    else:
        assert m["hint_level_mean"] == 1.0  # every prompt failed at step 1: level up
    meta = _restore(str(tmp_path))[2]
    assert meta["hint_levels"] or scheduler == "sage"


def test_eval_on_training_prompts(tmp_path):
    """eval.train_prompts > 0 adds train_eval/… metrics, computed on the first training problems."""
    c = _config("grpo", **{"rl.steps": 1, "eval.every": 1, "eval.prompts": 4,
                           "eval.train_prompts": 3, "checkpoint.every": 100})
    m = train.train_and_evaluate(c, str(tmp_path))
    for prefix in ("eval", "train_eval"):
        assert 0.0 <= m[f"{prefix}/avg@2"] <= m[f"{prefix}/pass@2"] <= 1.0
    ctx, _ = train.setup(c, str(tmp_path))
    src = train.load_split(c, "train")
    assert [p.question for p in ctx.train_eval_problems] == [src[i].question for i in range(3)]


def test_daro_keeps_kl_term(tmp_path):
    """DARO replaces the policy term only. With one minibatch, the updates before step 3 are the
    same with and without KL (step 1 runs at warm-up lr 0, and at step 2 π = π_ref, where the
    KL gradient is 0), so step 3's losses differ by exactly kl_coef · KL."""
    runs = {}
    for coef in (0.0, 0.5):
        c = _config("daro", **{"rl.steps": 3, "rl.minibatches": 1, "loss.kl_coef": coef,
                               "optim.lr": 1e-2, "optim.warmup_steps": 1,
                               "checkpoint.every": 100})
        train.train_and_evaluate(c, str(tmp_path / f"kl{coef}"))
        with open(tmp_path / f"kl{coef}" / "metrics.jsonl") as f:
            runs[coef] = [json.loads(line) for line in f]
    assert runs[0.0][1]["loss"] == pytest.approx(runs[0.5][1]["loss"], abs=1e-6)
    kl = runs[0.5][2]["kl"]
    assert kl > 1e-3
    assert runs[0.5][2]["loss"] - runs[0.0][2]["loss"] == pytest.approx(0.5 * kl, rel=1e-3)


def _synthetic_rows(c, seed=0, lens=(1, 3, 16, 0, 7, 16, 2, 5), prompt_lens=None,
                    mu=(.25, .25, .5, .5, .75, .75, .5, .5)):
    """8 training rows of unequal completion lengths (`lens`; 0: empty) in 4 groups of 2,
    the rows of a group with the same prompt (as the learner's rows: samples of one prompt),
    filling all P columns or, given `prompt_lens` (one per group), left-padded to them."""
    R, P, N = len(lens), c.sampling.max_prompt_len, c.sampling.max_new_tokens
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(4), 2)
    loss_mask = np.arange(N)[None] < np.asarray(lens)[:, None]
    prompt = (np.ones((R, P), bool) if prompt_lens is None
              else np.arange(P)[None] >= P - np.asarray(prompt_lens)[group][:, None])
    tokens = rng.integers(1, 100, (R, P + N)).astype(np.int32)
    tokens[:, :P] = tokens[group * 2, :P]
    return dict(tokens=tokens, mask=np.concatenate([prompt, loss_mask], 1),
                loss_mask=loss_mask, old_logp=-rng.random((R, N)).astype(np.float32),
                ref_logp=-rng.random((R, N)).astype(np.float32),
                adv=rng.normal(size=R).astype(np.float32), group=group,
                mu=np.asarray(mu, np.float32))


def _one_update(c, workdir, ctx=None, mb=None):
    """One train_step on `mb` (default: `_synthetic_rows(c)`): (params before, params after,
    metrics), all on the host. `ctx`: setup's (ctx, params), if done already (the step
    donates those params)."""
    ctx, params = ctx or train.setup(c, workdir)
    optimizer, trainable, opt_state = train.init_train_state(ctx, params)
    before = jax.device_get(trainable)
    step = learn.make_train_step(ctx.graphdef, optimizer, c, 4)
    mb = _synthetic_rows(c) if mb is None else mb
    new, _, met = step(trainable, opt_state, jax.tree.map(jax.numpy.asarray, mb),
                       jax.numpy.asarray(False))
    return before, jax.device_get(new), jax.device_get(met)


def _assert_same_update(got, want, rel=1e-5, atol=1e-7):
    """Two `_one_update` results (params after, metrics) agree: the loss terms, the gradient
    norm and every new param."""
    for k in ("loss", "grad_norm", "pg_loss", "kl", "entropy"):
        assert got[1][k] == pytest.approx(want[1][k], rel=rel, abs=atol), k
    for a, b in zip(jax.tree.leaves(want[0]), jax.tree.leaves(got[0])):
        np.testing.assert_allclose(a, b, rtol=rel, atol=atol)


def _random_tree(tree, seed, scale=1.0):
    keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(tree))))
    return jax.tree.map(lambda x: scale * jax.random.normal(next(keys), x.shape, x.dtype), tree)


@pytest.mark.parametrize("clip", [1e-3, 1e3])  # clipped, and not
def test_clip_by_global_norm_equals_optax(clip):
    grads = _random_tree({"a": np.zeros((7, 5), np.float32), "b": np.zeros(3, np.float32)}, 0)
    got, _ = learn.clip_by_global_norm(clip).update(grads, None)
    want, _ = optax.clip_by_global_norm(clip).update(grads, optax.EmptyState())
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("ok", [True, False])
def test_update_in_two_programs_equals_the_optimizers_update(ok):
    """make_train_step applies an update as two in-place programs, the params then the
    optimizer state: the same params and state as optax's update in one (after a first update,
    so the moments are not zero), or both unchanged when `ok` is False; neither program keeps
    a copy of the state or of the gradient (XLA's temporaries under one leaf's bytes)."""
    from flax import nnx

    from tests.helpers import tiny_model
    c = _config("grpo", **{"optim.grad_clip": 0.5, "optim.weight_decay": 0.1})
    graphdef, params = nnx.split(tiny_model())
    trainable = {"model": params}
    optimizer = learn.make_optimizer(c)
    _, state = optimizer.update(_random_tree(trainable, 1), optimizer.init(trainable), trainable)
    grads = _random_tree(trainable, 2, scale=3.0)
    updates, want_state = optimizer.update(grads, state, trainable)
    want = optax.apply_updates(trainable, updates) if ok else trainable
    want_state = want_state if ok else state
    want, want_state = jax.device_get((want, want_state))
    step = learn.make_train_step(graphdef, optimizer, c, 4)
    flag = jax.numpy.asarray(ok)
    largest = max(x.nbytes for x in jax.tree.leaves(trainable))
    for program, args in ((step.apply_params, (trainable, state, grads, flag)),
                          (step.apply_state, (state, grads, trainable, flag))):
        temp = program.lower(*args).compile().memory_analysis().temp_size_in_bytes
        assert temp < largest, (program, temp, largest)
    copy = lambda t: jax.tree.map(jax.numpy.copy, t)  # noqa: E731  (the programs donate)
    new = step.apply_params(copy(trainable), state, grads, flag)
    new_state = step.apply_state(copy(state), grads, new, flag)
    for a, b in zip(jax.tree.leaves((new, new_state)), jax.tree.leaves((want, want_state))):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_first_moment_in_bfloat16_halves_it_and_keeps_the_update():
    """optim.mu_dtype='bfloat16': AdamW's first moment is stored in bfloat16, the second in
    float32; three updates move the params as float32 moments do, to bfloat16's rounding of
    the moment (~0.4 % of a step), and not identically."""
    from flax import nnx

    from tests.helpers import tiny_model
    _, params = nnx.split(tiny_model())
    trainable = {"model": params}
    got = {}
    for mu in ("", "bfloat16"):
        c = _config("grpo", **{"optim.mu_dtype": mu, "optim.warmup_steps": 0})
        opt = learn.make_optimizer(c)
        state, p = opt.init(trainable), trainable
        for k in range(3):
            updates, state = opt.update(_random_tree(trainable, 10 + k), state, p)
            p = optax.apply_updates(p, updates)
        adam = [s for s in jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "mu"))
                if hasattr(s, "mu")][0]
        want = jax.numpy.dtype("bfloat16" if mu else "float32")
        assert {x.dtype for x in jax.tree.leaves(adam.mu)} == {want}
        assert {x.dtype for x in jax.tree.leaves(adam.nu)} == {jax.numpy.dtype("float32")}
        got[mu] = p
    step = 3 * c.optim.lr
    diffs = [float(np.abs(np.asarray(a) - np.asarray(b)).max())
             for a, b in zip(jax.tree.leaves(got["bfloat16"]), jax.tree.leaves(got[""]))]
    assert 0 < max(diffs) < 0.02 * step, (max(diffs), step)


def test_trim_padding_keeps_the_used_columns_in_multiples():
    P, N = 10, 8
    prompt = np.arange(P)[None] >= np.array([6, 3, 9])[:, None]  # left-padded, 4 / 7 / 1 long
    done = np.arange(N)[None] < np.array([2, 5, 0])[:, None]
    rows = dict(tokens=np.arange(3 * (P + N)).reshape(3, P + N),
                mask=np.concatenate([prompt, done], 1), loss_mask=done,
                old_logp=np.ones((3, N)), adv=np.ones(3))
    cut = learn.trim_padding(rows, P, 2)  # prompt 7 -> 8 columns, completion 5 -> 6
    np.testing.assert_array_equal(cut["tokens"], rows["tokens"][:, 2:16])
    np.testing.assert_array_equal(cut["loss_mask"], done[:, :6])
    assert cut["old_logp"].shape == (3, 6) and cut["adv"] is rows["adv"]
    assert learn.trim_padding(rows, P, 64)["tokens"].shape == (3, P + N)  # capped at the full
    assert learn.trim_padding(rows, P, 0) is rows
    with pytest.raises(ValueError, match="extra"):
        learn.trim_padding({**rows, "extra": np.ones((3, N))}, P, 2)


@pytest.mark.parametrize("agg", ["token_mean", "constant"])
def test_trimmed_rows_give_the_same_update(tmp_path, agg):
    """The learner's update on rows cut to their used columns (rl.pad_multiple) equals the
    update on the full rows: loss, gradient norm and new params, for a per-token and a
    constant (Dr.GRPO, divided by the full max_new_tokens) aggregation."""
    # Adam's first step is about lr·sign(g): with eps 1e-8 a gradient entry near 0 turns a
    # rounding difference into a whole step; eps 1e-3 keeps the params' change ∝ the gradient.
    c = _config("grpo", **{"loss.agg": agg, "loss.kl_coef": 0.1, "loss.entropy_coef": 0.01,
                           "optim.warmup_steps": 0, "optim.eps": 1e-3})
    ctx, params = train.setup(c, str(tmp_path))
    R, P, N = 8, c.sampling.max_prompt_len, c.sampling.max_new_tokens
    mb = _synthetic_rows(c, seed=1, lens=(1, 3, 9, 0, 7, 9, 2, 5),
                         prompt_lens=(4, 19, 7, 12), mu=(0.5,) * 8)
    out = []
    for rows in (mb, learn.trim_padding(mb, P, 4)):  # prompts 19 -> 20, completions 9 -> 12
        _, new, met = _one_update(c, str(tmp_path), (ctx, jax.tree.map(jax.numpy.copy, params)),
                                  rows)
        out.append((new, met, rows["tokens"].shape))
    assert out[1][2] == (R, 20 + 12) and out[0][2] == (R, P + N)
    _assert_same_update(out[1][:2], out[0][:2])


def test_shared_prompts_give_the_same_update(tmp_path):
    """rl.share_prompts (each group's prompt run once, its rows continued from the prompt's
    keys and values) updates the params as whole rows do: loss, gradient norm, new params."""
    out = []
    for share in (False, True):
        c = _config("grpo", **{"rl.share_prompts": share, "loss.kl_coef": 0.1,
                               "loss.entropy_coef": 0.01, "optim.warmup_steps": 0,
                               "optim.eps": 1e-3})  # eps: see test_trimmed_rows_give_…
        out.append(_one_update(c, str(tmp_path / str(share)), mb=_synthetic_rows(
            c, seed=2, prompt_lens=(4, 19, 7, 12)))[1:])
    _assert_same_update(out[1], out[0])
    # The reference / proximal log-probs of prepare_rows, the same way.
    ctx, params = train.setup(c, str(tmp_path / "ref"))
    rows = _synthetic_rows(c, seed=3, prompt_lens=(4, 19, 7, 12))
    logp = [learn.completion_logprobs(ctx.graphdef, params, rows["tokens"], rows["mask"],
                                      rows["group"], prompt_len=c.sampling.max_prompt_len,
                                      temperature=1.0, n_groups=4, share=share)
            for share in (False, True)]
    np.testing.assert_allclose(logp[1] * rows["loss_mask"], logp[0] * rows["loss_mask"],
                               atol=2e-5)


def test_check_groups_refuses_rows_a_shared_prompt_would_get_wrong():
    c = _config("grpo")
    rows = _synthetic_rows(c, prompt_lens=(4, 19, 7, 12))
    learn.check_groups(rows, 4)
    with pytest.raises(ValueError, match="outside 0..2"):
        learn.check_groups(rows, 3)
    other = {**rows, "tokens": rows["tokens"].copy()}
    other["tokens"][3, -c.sampling.max_new_tokens - 1] += 1  # row 3's last prompt token
    with pytest.raises(ValueError, match="different prompts"):
        learn.check_groups(other, 4)
    padded = {**rows, "tokens": rows["tokens"].copy()}
    padded["tokens"][3, 0] += 1  # under the left padding (group 1's prompt is 19 long)
    learn.check_groups(padded, 4)


@pytest.mark.parametrize("agg", ["token_mean", "constant",
                                 *(pytest.param(a, marks=pytest.mark.slow)
                                   for a in ("seq_mean_token_mean", "seq_mean_token_sum"))])
def test_microbatches_give_the_minibatch_gradient(tmp_path, agg):
    """rl.microbatches = 2 (gradient accumulation) updates the params as one pass over the
    minibatch does, for every loss aggregation, with rows of unequal lengths."""
    out = {}
    for micro in (1, 2):
        c = _config("grpo", **{"rl.microbatches": micro, "loss.agg": agg, "loss.kl_coef": 0.1,
                               "loss.entropy_coef": 0.01, "optim.warmup_steps": 0})
        out[micro] = _one_update(c, str(tmp_path / f"m{micro}"))[1:]
    for a, b in zip(jax.tree.leaves(out[1][0]), jax.tree.leaves(out[2][0])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    for k in ("loss", "grad_norm", "pg_loss", "kl", "entropy"):
        assert out[2][1][k] == pytest.approx(out[1][1][k], rel=1e-4, abs=1e-7), k


def test_check_batches_names_what_does_not_divide():
    """train.check_batches refuses, by name, rows that do not split into minibatches, a
    minibatch that does not split into micro-batches, and replayed rows that do not either."""
    c = _config("grpo", **{"rl.minibatches": 3})
    with pytest.raises(ValueError, match="minibatches=3 must divide"):
        train.check_batches(c, c.rl.n)
    c = _config("grpo", **{"rl.microbatches": 3})
    with pytest.raises(ValueError, match="microbatches=3 must divide the .* rows of a minibatch"):
        train.check_batches(c, c.rl.n)
    c = _config("grpo", **{"rl.microbatches": 2, "loss.replay_coef": 1.0, "loss.replay_rows": 3})
    with pytest.raises(ValueError, match="replay_rows=3 replayed SFT rows"):
        train.check_batches(c, c.rl.n)
    c.loss.replay_rows = 4
    train.check_batches(c, c.rl.n)


def test_daro_weights_have_their_own_learning_rate(tmp_path):
    """optim.daro_lr routes DARO's log-weights to their own AdamW: with the policy lr at 0 only
    they move, by the first Adam step's daro_lr per weight."""
    c = _config("daro", **{"optim.lr": 0.0, "optim.daro_lr": 0.05, "optim.warmup_steps": 0})
    before, after, _ = _one_update(c, str(tmp_path))
    for a, b in zip(jax.tree.leaves(before["model"]), jax.tree.leaves(after["model"])):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.abs(after["daro"] - before["daro"]), 0.05, rtol=1e-3)


def test_dapo_at_its_cap_trains_on_the_groups_it_has(tmp_path, caplog):
    """One generation batch (the cap) rarely gives B mixed groups: the step trains on those it
    has (the rest masked out, finite advantages), counts it in the metrics and warns once;
    dapo.at_cap="error" stops (as verl). The whole loop at the cap: the slow test below."""
    from ada_jax import collect
    from ada_jax.tasks import PromptIterator
    c = _config("dapo", **{"adaptive.dapo.max_gen_batches": 1})
    ctx, params = train.setup(c, str(tmp_path))
    iterator, state = PromptIterator(ctx.train_source, c.rl.prompts_per_step, seed=0), {}
    mets = []
    for step in range(2):
        _, batch, toks, mask, met = collect.collect(ctx, params, iterator,
                                                    jax.random.key(step), state)
        groups = np.asarray(batch.mask_BG).any(1)
        assert met["dapo_short_groups"] == c.rl.prompts_per_step - groups.sum()
        rows = learn.prepare_rows(ctx, batch, toks, mask, c.rl.prompts_per_step * c.rl.n, None)
        assert np.isfinite(np.asarray(rows["adv"])).all()
        mets.append(met)
    assert [m["dapo_cap_hit"] for m in mets] == [1, 1] and mets[0]["dapo_gen_batches"] == 1
    assert caplog.text.count("DAPO dynamic sampling: 1 generation batches gave only 2 of 4") == 1
    c.adaptive.dapo.at_cap = "error"
    with pytest.raises(RuntimeError, match="raise config.adaptive.dapo.max_gen_batches"):
        collect.collect(ctx, params, iterator, jax.random.key(0), state)


def test_credit_tokens_keeps_the_loss_on_the_first_completion_tokens(tmp_path):
    """loss.credit_tokens=k (an ablation of sequence-level credit): each row's loss mask is
    its full completion mask cut to the first k tokens; advantages are unchanged."""
    from ada_jax import collect
    from ada_jax.tasks import PromptIterator
    c = _config("grpo")
    ctx, params = train.setup(c, str(tmp_path))
    iterator = PromptIterator(ctx.train_source, c.rl.prompts_per_step, seed=0)
    _, batch, toks, mask, _ = collect.collect(ctx, params, iterator, jax.random.key(0), {})
    rows_n = c.rl.prompts_per_step * c.rl.n
    full = learn.prepare_rows(ctx, batch, toks, mask, rows_n, None)
    for k in (1, 3):
        ctx.config.loss.credit_tokens = k
        cut = learn.prepare_rows(ctx, batch, toks, mask, rows_n, None)
        want = np.asarray(full["loss_mask"]).copy()
        want[:, k:] = False
        np.testing.assert_array_equal(np.asarray(cut["loss_mask"]), want)
        assert want[:, :k].sum() > 0 and want.sum() < np.asarray(full["loss_mask"]).sum()
        np.testing.assert_array_equal(np.asarray(cut["adv"]), np.asarray(full["adv"]))


@pytest.mark.slow
def test_dapo_defaults_run_to_the_end_on_the_default_task(tmp_path):
    """`scripts/train.py --config=configs/base.py:algo=dapo` stopped at step 3: it
    runs to the end (training on fewer groups where its cap is hit)."""
    c = base.get_config("algo=dapo")
    c.log.progress = False
    train.train_and_evaluate(c, str(tmp_path))
    with open(tmp_path / "metrics.jsonl") as f:
        recs = [json.loads(line) for line in f]
    assert recs[-1]["step"] == c.rl.steps and np.isfinite(recs[-1]["loss"])


def test_eval_due_on_steps_and_on_the_cost_grid():
    c = _config("grpo", **{"eval.every": 10, "eval.every_cost": 1000})
    assert train.eval_due(c, 10, False, 500, 400)  # every 10 steps
    assert not train.eval_due(c, 11, False, 999, 900)
    assert train.eval_due(c, 12, False, 1000, 999)  # the step that passes 1000
    assert train.eval_due(c, 13, False, 2100, 1900)  # and 2000
    assert train.eval_due(c, 7, True, 10, 5)  # the last step
    c.eval.every = 0
    assert not train.eval_due(c, 10, False, 500, 400)
    c.eval.every_cost = 0
    assert not train.eval_due(c, 7, True, 10, 5)  # no eval at all


def test_a_cost_budget_stops_the_run_and_a_resume_stays_stopped(tmp_path):
    """rl.cost_budget: the run stops after the step that spends it (checkpointed, evaluated)
    and running the workdir again trains no further step."""
    wd = str(tmp_path)
    cfg = _config("grpo", **{"rl.steps": 10, "rl.cost_budget": 40, "eval.every_cost": 20,
                             "checkpoint.every": 100})
    met = train.train_and_evaluate(cfg, wd)
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    per_step = recs[1]["cost_samples"]  # smoke grpo: 4 prompts x (4 generated + 4 trained)
    assert per_step == 32 and met["cost_samples"] == 64 and recs[-1]["step"] == 2
    assert [r["step"] for r in recs if "eval/avg@2" in r] == [0, 1, 2]  # passes 20, 40, 60
    assert _restore(wd)[0] == 2
    train.train_and_evaluate(cfg, wd)
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        assert [json.loads(line)["step"] for line in f][-1] == 2


def test_a_flop_token_budget_counts_generated_plus_three_times_trained_tokens(tmp_path):
    """rl.cost_unit=flop_tokens: rl.cost_budget and the eval.every_cost grid count generated
    tokens + 3 x trained (and replayed) tokens, not samples; other units are refused."""
    totals = {"samples_launched": 10, "samples_trained": 10, "generated_tokens": 400,
              "trained_tokens": 150, "replay_tokens": 50}
    costs = train.cost(totals)
    c = _config("grpo", **{"rl.cost_budget": 1000})
    assert not train.out_of_budget(c, costs) and train.spent(c, costs) == 20  # samples
    c.rl.cost_unit = "flop_tokens"
    assert train.spent(c, costs) == 1000 and train.out_of_budget(c, costs)
    c.rl.cost_budget = 1001
    assert not train.out_of_budget(c, costs)
    c.rl.cost_unit = "tokens"
    with pytest.raises(ValueError, match="rl.cost_unit='tokens': choose from"):
        validate(c)
    cfg = _config("grpo", **{"rl.steps": 4, "rl.cost_unit": "flop_tokens", "rl.cost_budget": 1,
                             "eval.every": 0, "eval.every_cost": 1, "checkpoint.every": 100})
    met = train.train_and_evaluate(cfg, str(tmp_path))  # any step's tokens spend 1 FLOP-token
    with open(tmp_path / "metrics.jsonl") as f:
        recs = [json.loads(line) for line in f]
    assert [r["step"] for r in recs] == [0, 1] and met["cost_flop_tokens"] > 1
    assert "eval/avg@2" in recs[1]


def test_replay_rows_leave_out_the_first_target_tokens_and_resume():
    """sft.Replay: `updates` batches of loss.replay_rows SFT rows, the loss mask SFT's own minus
    each target's first loss.replay_skip tokens; a restored state gives the same next rows."""
    from ada_jax import sft
    from ada_jax.tokenizer import load_tokenizer
    c = _config("grpo", **{"loss.replay_rows": 3, "loss.replay_skip": 2})
    tok = load_tokenizer(c)
    rep = sft.Replay(c, tok)
    got = rep.rows(2)
    assert got["tokens"].shape[:2] == (2, 3) and got["loss_mask"].shape == got["tokens"].shape
    c0 = _config("grpo", **{"loss.replay_rows": 3, "loss.replay_skip": 0})
    full = sft.Replay(c0, tok).rows(2)  # same seed: the same rows, nothing left out
    np.testing.assert_array_equal(full["tokens"], got["tokens"])
    want = full["loss_mask"].copy()
    for u, r in np.ndindex(2, 3):
        want[u, r, np.flatnonzero(want[u, r])[:2]] = False
    np.testing.assert_array_equal(got["loss_mask"], want)
    assert (full["loss_mask"].sum(-1) - got["loss_mask"].sum(-1) == 2).all()
    state = rep.state()
    nxt = rep.rows(1)
    again = sft.Replay(c, tok)
    again.restore(json.loads(json.dumps(state)))  # as a checkpoint's metadata holds it
    resumed = again.rows(1)
    for k in nxt:
        np.testing.assert_array_equal(resumed[k], nxt[k])


@pytest.mark.parametrize("micro", [1, 2])
def test_replay_adds_its_coefficient_times_the_sft_gradient(tmp_path, micro):
    """With zero advantages the policy loss has no gradient, so an update's gradient is
    loss.replay_coef times the replayed rows' log-loss gradient, and its loss that times the
    log-loss (a wrong or doubled coefficient would show); with rl.microbatches = 2 the replayed
    rows are micro-batched too and give the same (micro-batches of unequal token counts, so
    weighting them equally would show)."""
    from ada_jax import collect, sft
    from ada_jax.tasks import PromptIterator
    from flax import nnx
    coef = 0.37
    c = _config("grpo", **{"loss.replay_coef": coef, "loss.replay_rows": 4,
                           "rl.microbatches": micro})
    ctx, params = train.setup(c, str(tmp_path))
    iterator = PromptIterator(ctx.train_source, c.rl.prompts_per_step, seed=0)
    _, batch, toks, mask, _ = collect.collect(ctx, params, iterator, jax.random.key(0), {})
    rows = learn.prepare_rows(ctx, batch, toks, mask, c.rl.prompts_per_step * c.rl.n, None)
    rows["adv"] = jax.numpy.zeros_like(rows["adv"])
    replay = jax.tree.map(lambda x: x[0], sft.Replay(c, ctx.tokenizer).rows(1))
    scored = np.asarray(replay["loss_mask"])[:, 1:]
    assert scored[0::2].sum() != scored[1::2].sum()  # the strided micro-batches differ
    def reference(p):  # the SFT rows' log-loss and the norm of its gradient
        nll, g = jax.value_and_grad(lambda q: sft.sequence_nll(
            nnx.merge(ctx.graphdef, q), replay["tokens"], replay["mask"], replay["loss_mask"]))(p)
        return nll, learn.global_norm(g)
    # One jitted program: op by op, reductions over the 8 fake devices' shards can deadlock
    # XLA's CPU collectives on a loaded machine ("Termination timeout for all reduce").
    nll, gnorm = jax.jit(reference)(params)
    want_norm = coef * float(gnorm)
    optimizer, trainable, opt_state = train.init_train_state(ctx, params)
    step = learn.make_train_step(ctx.graphdef, optimizer, c, c.rl.prompts_per_step)
    _, _, met = step(trainable, opt_state, rows, jax.numpy.asarray(False), replay)
    assert float(nll) > 0 and want_norm > 0
    np.testing.assert_allclose(float(met["grad_norm"]), want_norm, rtol=1e-5)
    np.testing.assert_allclose(float(met["replay_nll"]), float(nll), rtol=1e-5)
    np.testing.assert_allclose(float(met["loss"]), coef * float(nll), rtol=1e-5, atol=1e-7)


def test_a_run_with_replay_resumes_bitwise(tmp_path, monkeypatch):
    """The replay stream's position is in the checkpoint: stopped at step 2 by a notice and
    resumed, a run with loss.replay_coef ends bitwise equal to an unbroken one."""
    c = lambda: _config("grpo", **{"rl.steps": 3, "checkpoint.every": 100,  # noqa: E731
                                   "loss.replay_coef": 0.5, "loss.replay_rows": 4})
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    train.train_and_evaluate(c(), ref)
    monkeypatch.setattr(preemption.Notice, "reached", lambda self, step: step == 2)
    with pytest.raises(preemption.Preempted):
        train.train_and_evaluate(c(), run)
    monkeypatch.undo()
    train.train_and_evaluate(c(), run)
    _same_run(ref, run)
    with open(os.path.join(ref, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    assert all(r["replay_nll"] > 0 and r["replay_tokens"] > 0 for r in recs)
    assert recs[-1]["cum_replay_tokens"] == sum(r["replay_tokens"] for r in recs)


def test_a_step_prefills_its_prompts_at_their_own_width(tmp_path, monkeypatch):
    """sampling.pad_multiple: the engine runs the step's prompts cut to the longest one
    (rounded up to 16), not max_prompt_len, and keeps the same samples as at the full width
    (padding is masked); the learner's rows keep max_prompt_len columns."""
    from ada_jax import adaptive
    from ada_jax.policies import rollout
    seen = []
    real_run = adaptive.run

    def run(params, prompt_BP, *a, **kw):
        seen.append(prompt_BP.shape[1])
        return real_run(params, prompt_BP, *a, **kw)
    monkeypatch.setattr(adaptive, "run", run)
    got = {}
    for multiple in (16, 0):
        c = _config("ada_pos", **{"sampling.max_prompt_len": 96, "model.max_len": 256,
                                  "sampling.pad_multiple": multiple})
        ctx, params = train.setup(c, str(tmp_path / str(multiple)))
        problems = [ctx.train_source[i] for i in range(c.rl.prompts_per_step)]
        got[multiple] = rollout.run_engine(ctx, params, problems, jax.random.key(4))
    longest = int(np.asarray(got[0].mask_BP).sum(1).max())
    assert longest < 48 and seen == [-(-longest // 16) * 16, 96], (longest, seen)
    for r in (16, 0):
        assert got[r].prompt_BP.shape == got[r].mask_BP.shape == (c.rl.prompts_per_step, 96)
    cut, full = got[16].batch, got[0].batch
    for name in ("tokens_BGN", "len_BG", "reward_BG", "mask_BG", "pool_n_B", "pool_pos_B"):
        np.testing.assert_array_equal(getattr(cut, name), getattr(full, name), err_msg=name)
    np.testing.assert_allclose(cut.logp_BGN, full.logp_BGN, atol=1e-5)
