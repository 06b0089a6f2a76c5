"""Faults and bad inputs at the edges of a run: partial checkpoints left by a kill or a full
disk are removed; bad paths and files are refused before anything compiles, naming the field
and the file; a workdir whose metrics.jsonl is lost resumes when asked."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ada_jax import base_policy, train
from tests import helpers
from tests.test_train import _cli, _config, _latest_step, _steps_written

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, XLA_FLAGS="--xla_backend_optimization_level=0", JAX_PLATFORMS="cpu")


def _partial(workdir) -> list:
    d = os.path.join(workdir, "checkpoints")
    return sorted(n for n in os.listdir(d) if ".orbax-checkpoint-tmp" in n) if os.path.isdir(
        d) else []


@pytest.mark.slow  # the clean-up at start: test_train.py::test_corrupted_and_partial_checkpoints_are_skipped
def test_a_kill_during_the_preemption_save_leaves_no_partial_checkpoint(tmp_path):
    """SIGTERM (a pre-emption notice), then SIGKILL while the step's checkpoint is being
    written: orbax leaves `<step>.orbax-checkpoint-tmp…`, which it removes only when it saves
    that step again, and a pre-emption step is off schedule: before, it stayed for good. The
    next run removes it at start (it holds the workdir's lock) and completes."""
    run = str(tmp_path / "run")
    extra = ["--config.checkpoint.every=100"]
    for attempt in range(5):  # the kill must land inside the save's window
        proc = subprocess.Popen(_cli(run, 8, extra), env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        helpers.watch(proc, lambda: _steps_written(run),
                      until=lambda: len(_steps_written(run)) >= 2)
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None and not _partial(run):
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if _partial(run):
            break
        os.system(f"rm -rf {run}")
    left = _partial(run)
    print(f"\nkilled mid-save on attempt {attempt + 1}: {left} left")
    assert left, "no kill landed inside the save in 5 attempts"
    out = helpers.run(_cli(run, 8, extra), env=ENV, check=True)
    assert f"removed the partial checkpoint(s) of an unfinished save: {left[0]}" in out.stderr
    assert _partial(run) == [] and _latest_step(run) == 8 and _steps_written(run) == list(
        range(9))


def test_a_save_on_a_full_disk_ends_the_log_with_the_error_and_leaves_no_partial_checkpoint(
        tmp_path):
    """A checkpoint save on a full disk (a 1.5 MB tmpfs) fails: the run exits 1 and its log's
    last line names the error (before: about 36 'Exception ignored … Python is likely shutting
    down' tracebacks from orbax's unfinished writes came after it), and the save's temporary
    folder (up to most of a checkpoint; before, it stayed behind) is removed. What is left is
    listed inside the private mount, before it goes away."""
    (tmp_path / "disk").mkdir()
    wd = tmp_path / "disk" / "run"
    report = ('"$@"; rc=$?; echo "left: $(ls -a ' + f'{wd}/checkpoints | tr "\\n" " ")"; '
              'exit $rc')
    tiny_disk = helpers.with_mount('mount -t tmpfs -o size=1500k tmpfs "$0"', tmp_path / "disk",
                                   ["sh", "-c", report, "sh", *_cli(wd, 20)])
    out = helpers.run(tiny_disk, env=ENV)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 1, out.stderr[-3000:]
    assert last.startswith("ada_jax: the run stops: ") and "No space left on device" in last, (
        out.stderr[-3000:])
    assert "checkpoint.py" in out.stderr and "in save" in out.stderr  # a save failed
    left = out.stdout.split("left: ")[-1].split()
    print(f"\nafter the failed save: {left}")
    assert not [n for n in left if "orbax-checkpoint-tmp" in n], left


# ----------------------------------------------------------------------------- bad inputs
def _refused(tmp_path, monkeypatch, exc, match, **overrides):
    """train_and_evaluate on `overrides` stops with `exc` matching `match` before any compile
    (SFT / the model's init is the first) and leaves no workdir behind."""
    monkeypatch.setattr(base_policy, "load", lambda *a: pytest.fail("got as far as the model"))
    files = overrides.pop("task.files", None)
    wd = overrides.pop("workdir", None) or str(tmp_path / "wd")
    c = _config("grpo", **overrides)
    if files is not None:
        c.task.files = files
    with pytest.raises(exc, match=match):
        train.train_and_evaluate(c, wd)


def test_run_lock_a_directory_is_refused(tmp_path, monkeypatch):
    (tmp_path / "wd" / "run.lock").mkdir(parents=True)
    _refused(tmp_path, monkeypatch, FileExistsError,
             r"workdir .*/wd: .*/wd/run.lock must be a file: move it away or pass another "
             r"--workdir")


def test_a_workdir_name_too_long_is_refused(tmp_path, monkeypatch):
    """Before: ENAMETOOLONG from os.makedirs, naming the path but not --workdir."""
    monkeypatch.setattr(base_policy, "load", lambda *a: pytest.fail("got as far as the model"))
    with pytest.raises(OSError, match=r"the name x{40}… is 300 bytes, more than the 255 the "
                                      r"filesystem allows: pass a shorter --workdir"):
        train.train_and_evaluate(_config("grpo"), str(tmp_path / ("x" * 300)))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("where", ["cache", "base_dir"])
def test_a_base_dir_or_cache_that_is_a_file_is_refused(tmp_path, monkeypatch, where):
    """Before: a raw FileExistsError / NotADirectoryError from os.makedirs after the data
    loaded, naming neither $ADA_JAX_CACHE nor config.sft.base_dir."""
    (tmp_path / "f").write_text("x")
    if where == "cache":
        monkeypatch.setenv("ADA_JAX_CACHE", str(tmp_path / "f"))
        _refused(tmp_path, monkeypatch, NotADirectoryError,
                 rf"\$ADA_JAX_CACHE='{tmp_path}/f' \(the cache of SFT bases\): {tmp_path}/f is a "
                 rf"file, not a directory", **{"sft.steps": 10})
    else:
        _refused(tmp_path, monkeypatch, NotADirectoryError,
                 rf"config.sft.base_dir='{tmp_path}/f/base': {tmp_path}/f is a file",
                 **{"sft.steps": 10, "sft.base_dir": str(tmp_path / "f" / "base")})


@pytest.mark.parametrize("what", ["run.lock", "cache", "base_dir"])
def test_read_only_lock_cache_or_base_dir_is_refused_before_sft(tmp_path, what):
    """A read-only (bind-mounted) run.lock, $ADA_JAX_CACHE or sft.base_dir parent: before, a
    raw PermissionError / OSError (EROFS) naming a path at most, after the data loaded."""
    wd, ro = tmp_path / "wd", tmp_path / "ro"
    ro.mkdir()
    extra, env = ["--config.sft.steps=10"], dict(ENV)
    if what == "run.lock":
        wd.mkdir()
        ro = wd / "run.lock"
        ro.write_text("")
        match = rf"PermissionError: workdir {wd}: {ro} is not writable: make it writable or pass"
    elif what == "cache":
        env["ADA_JAX_CACHE"] = str(ro)
        match = (rf"PermissionError: \$ADA_JAX_CACHE='{ro}' \(the cache of SFT bases\): {ro} is "
                 rf"not writable \(permissions or a read-only filesystem\), and SFT writes its "
                 rf"base and a lock there")
    else:
        extra.append(f"--config.sft.base_dir={ro}/base")
        match = rf"PermissionError: config.sft.base_dir='{ro}/base': {ro} is not writable"
    cmd = helpers.with_mount('mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0"', ro,
                             _cli(wd, 2, extra))
    out = helpers.run(cmd, env=env)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 1 and re.search(match, last), out.stderr[-2000:]
    assert "running SFT" not in out.stderr


def _bad_file(tmp_path, kind):
    """A path of the given kind: missing, a dangling link, a FIFO, garbage bytes."""
    path = tmp_path / {"missing": "none.model", "dangling": "link.model", "fifo": "fifo.jsonl",
                       "garbage_sp": "bad.model", "garbage_json": "tokenizer.json"}[kind]
    if kind == "dangling":
        os.symlink(tmp_path / "gone.model", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "garbage_sp":
        path.write_bytes(b"\x00not a sentencepiece model\xff" * 10)
    elif kind == "garbage_json":
        path.write_text("{not json")
    return str(path)


@pytest.mark.parametrize("kind, exc, match", [
    ("missing", FileNotFoundError, r"no sentencepiece model at {p}; set config.model.tokenizer"),
    ("dangling", FileNotFoundError, r"no sentencepiece model at {p} \(a dangling link to "
                                    r"'{d}/gone.model'\)"),
    ("garbage_sp", ValueError, r"{p} is not a readable sentencepiece model \(RuntimeError: "),
    ("garbage_json", ValueError, r"{p} is not a readable Hugging Face tokenizer.json \("),
])
def test_a_bad_tokenizer_file_names_the_field(tmp_path, monkeypatch, kind, exc, match):
    """Before: the path alone (missing, dangling) or neither field nor file (garbage: the
    libraries' own 'ParseFromArray failed' / 'expected value at line 1 column 2')."""
    path = _bad_file(tmp_path, kind)
    _refused(tmp_path, monkeypatch, exc, rf"config.model.tokenizer='{path}': "
             + match.format(p=path, d=tmp_path), **{"model.tokenizer": path})


@pytest.mark.parametrize("kind, exc, match", [
    ("missing", FileNotFoundError, r"no file matches '{p}'"),
    ("dangling", FileNotFoundError, r"{p} is a dangling symbolic link \(to '{d}/gone.model'\)"),
    ("fifo", OSError, r"{p} is not a regular file \(a FIFO, socket or device: reading it "
                      r"could wait forever\): name a data file"),
])
def test_a_bad_data_path_names_the_field(tmp_path, monkeypatch, kind, exc, match):
    """A FIFO as task.files hung the run with no message, holding the workdir's lock (open()
    blocks until a writer comes); now refused at once, as is a dangling link."""
    path = _bad_file(tmp_path, kind)
    signal.alarm(120)  # a hang fails the test instead of the suite
    try:
        _refused(tmp_path, monkeypatch, exc, rf"config.task.files='{path}': "
                 + match.format(p=path, d=tmp_path),
                 **{"task.name": "files", "sampling.max_prompt_len": 24, "task.files": path})
    finally:
        signal.alarm(0)


@pytest.mark.parametrize("content", ["[1, 2]", "3"])
def test_config_json_that_is_not_an_object_is_refused(tmp_path, monkeypatch, content):
    """Before: AttributeError ('list' object has no attribute 'items'), naming no file."""
    from ada_jax import run_config
    from configs import base
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "config.json").write_text(content)
    kind = "list" if content.startswith("[") else "int"
    match = (rf"{wd}/config.json holds a JSON {kind}, not a run's config \(an object of "
             rf"fields\): repair or remove it, or pass another --workdir")
    with pytest.raises(ValueError, match=match):  # scripts/train.py reads it first
        run_config.for_workdir(base.get_config("smoke=True"), ["train.py"], str(wd))
    _refused(tmp_path, monkeypatch, ValueError, match, workdir=str(wd))


def test_distributed_without_a_cluster_names_the_field(tmp_path):
    """Before: JAX's 'coordinator_address should be defined.', naming no field. (A process of
    its own: jax.distributed must start before any JAX call.)"""
    env = {k: v for k, v in ENV.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
    out = helpers.run(_cli(tmp_path / "wd", 2, ["--config.distributed.enabled=True"]), env=env)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 1 and last.startswith(
        "ada_jax: the run stops: ValueError: config.distributed.enabled=True but no cluster was "
        "detected (SLURM, Open MPI, a TPU pod, Kubernetes) and "
        "config.distributed.coordinator_address is empty"), out.stderr[-2000:]
    assert not (tmp_path / "wd").exists()


@pytest.mark.parametrize("field, value", [("seed", -1), ("seed", 2 ** 32), ("task.seed", -5)])
def test_a_seed_out_of_range_is_refused_at_validation(field, value):
    """seed=-1 passed validation, compiled, wrote the step-0 eval and failed at step 1 with
    numpy's 'expected non-negative integer'; 2**32 gives the key of seed 0 (JAX wraps)."""
    from ada_jax.config_check import validate
    from configs import base
    c = base.get_config("smoke=True")
    c.unlock()
    section, _, name = field.rpartition(".")
    (c[section] if section else c)[name] = value
    with pytest.raises(ValueError, match=rf"config.{field}={value!r}: must be an integer in "
                                         rf"\[0, 2\*\*32 - 1\]"):
        validate(c)


# ----------------------------------------------------------------------------- lost metrics
@pytest.mark.parametrize("loss", ["deleted", "emptied"])
def test_a_lost_metrics_file_resumes_when_asked(tmp_path, loss):
    """Intact checkpoints, metrics.jsonl deleted or emptied: before, resuming was refused with
    no way on. The refusal now names the flag that accepts the loss; with it the run resumes,
    the lost steps' records stay lost, and the cumulative counts go on from the checkpoint."""
    wd = str(tmp_path)
    train.train_and_evaluate(_config("grpo", **{"rl.steps": 2, "checkpoint.every": 1}), wd)
    path = os.path.join(wd, "metrics.jsonl")
    with open(path) as f:
        before = [json.loads(line) for line in f]
    if loss == "deleted":
        os.remove(path)
    else:
        open(path, "w").close()
    c = _config("grpo", **{"rl.steps": 3, "checkpoint.every": 1})
    with pytest.raises(ValueError, match=r"no readable record of step\(s\) 1-2 before the resumed "
                                         r"checkpoint \(step 2\). .* --config.checkpoint."
                                         r"resume_without_metrics=True \(their metrics are lost"):
        train.train_and_evaluate(c, wd)
    c.checkpoint.resume_without_metrics = True
    met = train.train_and_evaluate(c, wd)
    with open(path) as f:
        after = [json.loads(line) for line in f]
    assert [r["step"] for r in after] == [3]
    assert met["cum_samples"] == before[-1]["cum_samples"] + met["samples_total"]
    assert met["cost_samples"] > before[-1]["cost_samples"]


@pytest.mark.parametrize("rc, why", [
    (143, "(pre-empted: SIGTERM; the same command resumes from the saved checkpoint)"),
    (137, "(signal 9)")])
def test_launch_local_reports_143_as_a_preemption(tmp_path, rc, why):
    """A process that saved its pre-emption checkpoint exits 143 (128 + SIGTERM); the launcher
    said 'signal 15', as for a crash."""
    out = subprocess.run([os.path.join(ROOT, "scripts", "launch_local.sh"), "1", "sh", "-c",
                          f"exit {rc}"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, LAUNCH_LOG_DIR=str(tmp_path)))
    assert out.returncode == rc
    assert f"launch_local: process 0 exited with status {rc} {why}; stopping the others" in (
        out.stderr)


# ------------------------------------------------------------------ refusals on one last line
@pytest.mark.parametrize("argv, line", [
    (["--config=configs/base.py:algo=grpo_n4"],
     "ValueError: config arg algo='grpo_n4' (did you mean 'grpo'?); choose from"),
    (["--config=configs/base.py:task=gsm9k"], "ValueError: config.task.name='gsm9k': choose from"),
    (["--config=configs/base.py:smoke=Ture"], "ValueError: config arg smoke='Ture' is not a "
                                              "boolean: use one of true, 1, yes, false, 0, no"),
    (["--config=configs/nope.py"], "FileNotFoundError: [Errno 2] No such file or directory: "),
    (["--config.rl.nn=3"], "ValueError: unknown field config.rl.nn: config.rl has no field 'nn' "
                           "(did you mean config.rl.n?)"),
])
def test_a_bad_config_is_refused_on_one_line(argv, line, capsys):
    """Before: the error inside a traceback, then absl's 'Pass --helpshort or --helpfull to see
    help on flags.' as the last line (a bare AttributeError for an unknown field)."""
    from ada_jax.config_check import refuse_bad_config
    with pytest.raises(SystemExit) as e:
        refuse_bad_config(["train.py", *argv], "configs/base.py")
    err = capsys.readouterr().err
    assert e.value.code == 1 and err.count("\n") == 1, err
    assert err.startswith(f"ada_jax: the run stops: {line}"), err


@pytest.mark.parametrize("flag, line", [
    ("--config.optim.collapse_steps=nan", "config.optim.collapse_steps='nan' is not an int "
                                          "(invalid literal for int() with base 10: 'nan'): pass "
                                          "e.g. --config.optim.collapse_steps=5"),
    ("--config.optim.stop_on_collapse=maybe", "config.optim.stop_on_collapse='maybe' is not a "
                                              "bool: pass True or False"),
    ("--config.optim.lr=fast", "config.optim.lr='fast' is not a float (could not convert string "
                               "to float: 'fast'): pass e.g. --config.optim.lr=0.0003"),
])
def test_an_override_of_the_wrong_type_is_refused_on_one_line(flag, line, capsys, monkeypatch):
    from absl import flags
    from ml_collections import config_flags
    from ada_jax.config_check import parse_flags
    values = flags.FlagValues()
    monkeypatch.setattr(sys, "argv", ["train.py", flag])  # the override flags come from argv
    config_flags.DEFINE_config_file("config", "configs/base.py", "", flag_values=values,
                                    lock_config=True)
    monkeypatch.setattr(flags, "FLAGS", values)
    with pytest.raises(SystemExit) as e:
        parse_flags(["train.py", flag], "configs/base.py")
    err = capsys.readouterr().err
    assert e.value.code == 1 and err == f"ada_jax: the run stops: ValueError: {line}\n", err


def test_the_entry_script_refuses_on_its_last_line():
    """The wiring of both checks into scripts/train.py, exit 1."""
    for flag, line in (("--config.optim.stop_on_collapse=maybe", "is not a bool"),
                       ("--config=configs/base.py:smoke=maybe", "is not a boolean")):
        out = helpers.run([sys.executable, os.path.join(ROOT, "scripts", "train.py"), flag,
                           "--workdir=/nonexistent/never"],
                          env=dict(ENV, PYTHONPATH=ROOT), cwd=ROOT)
        last = out.stderr.strip().splitlines()[-1]
        assert out.returncode == 1 and last.startswith("ada_jax: the run stops: ValueError: "
                                                       "config") and line in last, out.stderr


def test_an_empty_workdir_or_a_mistyped_config_json_is_named(tmp_path):
    """Before: FileNotFoundError: '' and ml_collections' 'Could not override field', naming
    neither the flag nor the file."""
    from ada_jax import run_config
    c = _config("grpo")
    with pytest.raises(ValueError, match=r"--workdir='' is empty: name the run's directory"):
        run_config.for_workdir(c, ["train.py"], "")
    with pytest.raises(ValueError, match=r"--workdir='' is empty"):
        train.train_and_evaluate(c, "")
    saved = json.loads(c.to_json_best_effort())
    saved["rl"]["steps"] = "forty"
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=rf"{tmp_path}/config.json: config.rl.steps='forty' does "
                                         rf"not fit the field's type int .* --config.rl.steps="):
        run_config.for_workdir(c, ["train.py"], str(tmp_path))
    # the override the message offers gets past it
    got = run_config.for_workdir(c, ["train.py", "--config.rl.steps=3"], str(tmp_path))
    assert got.rl.steps == c.rl.steps


@pytest.mark.parametrize("kind", ["missing", "bad_json"])
def test_a_bad_init_from_names_the_field(tmp_path, kind):
    from ada_jax.config_check import validate
    from configs import base
    folder = tmp_path / "model"
    if kind == "bad_json":
        folder.mkdir()
        (folder / "config.json").write_text("{bad")
    c = base.get_config("model=hf,task=files")
    c.unlock()
    c.model.init_from = str(folder)
    with pytest.raises((OSError, ValueError), match=rf"^config.model.init_from='{folder}': "):
        validate(c)


@pytest.mark.parametrize("field, value, part", [
    ("rl.n", 100_000, r"block_tmp \(\d+\.\d GiB\), is sized by the learner's micro-batch: "
                      r"rl.prompts_per_step x rl.n rows"),
    ("eval.k", 1_000_000_000, r"eval \(\d+\.\d GiB\), is sized by eval.k x \(eval.prompts"),
])
def test_a_run_larger_than_the_machine_is_refused(tmp_path, monkeypatch, field, value, part):
    """rl.n=100000 or a huge eval.k were accepted and ran until killed."""
    _refused(tmp_path, monkeypatch, MemoryError,
             r"this run's predicted peak memory on the host, \d+\.\d GiB, exceeds the machine's "
             rf"\d+\.\d GiB; its largest part, {part}.* --config.check.memory=False to run "
             r"anyway", **{field: value})
    c = _config("grpo", **{field: value, "check.memory": False})
    train.check_memory(c)  # the override goes on


def test_more_training_prompts_to_evaluate_than_there_are_is_refused(tmp_path, monkeypatch):
    _refused(tmp_path, monkeypatch, ValueError, r"config.eval.train_prompts=300 exceeds the 256 "
             r"training problems: pass at most 256", **{"eval.train_prompts": 300})
