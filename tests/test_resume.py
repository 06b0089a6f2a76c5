"""Resume safety: a changed config is refused (not mistaken for corruption), unreadable or
silently corrupted checkpoints, and the metrics file across crashes."""
import glob
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from ada_jax import metrics_log, train
from ada_jax.checkpoint import (CheckpointMismatch, Checkpointer, UnreadableCheckpoints,
                                abstract_like)
from tests.test_train import _config, _restore

RUN = {"rl.steps": 2, "checkpoint.every": 1}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-step grpo run with checkpoints 1 and 2 (read-only: copy it to change it)."""
    wd = str(tmp_path_factory.mktemp("finished"))
    train.train_and_evaluate(_config("grpo", **RUN), wd)
    return wd


def _copy(src, dst):
    shutil.copytree(src, dst)
    return str(dst)


def _listing(wd):
    return sorted(os.listdir(os.path.join(wd, "checkpoints")))


def _read(path):
    with open(path) as f:
        return f.read()


@pytest.mark.parametrize("field,value", [("rl.n", 3), ("optim.daro_lr", 0.1),
                                         ("model.d_model", 32), ("optim.lr", 1e-3)])
def test_changed_config_is_refused_naming_the_field(finished, field, value):
    """Before: shape changes made every checkpoint 'unreadable', moved aside, and training
    restarted from scratch with exit 0; other changes resumed silently."""
    before, config_json = _listing(finished), _read(os.path.join(finished, "config.json"))
    with pytest.raises(ValueError, match=rf"config\.{field}: .*allow_config_change"):
        train.train_and_evaluate(_config("grpo", **RUN, **{field: value}), finished)
    assert _listing(finished) == before
    assert _read(os.path.join(finished, "config.json")) == config_json


def test_allowed_changes_resume(finished, tmp_path):
    """Run length and cadence may change; other fields with allow_config_change; a shape change
    even then is a clear mismatch, and nothing is moved aside."""
    wd = _copy(finished, tmp_path / "wd")
    with pytest.raises(CheckpointMismatch, match="daro"):
        train.train_and_evaluate(_config("grpo", **RUN, **{
            "rl.n": 3, "checkpoint.allow_config_change": True}), wd)
    assert _listing(wd) == ["1", "2"]
    train.train_and_evaluate(_config("grpo", **{
        "rl.steps": 3, "checkpoint.every": 2, "eval.every": 5, "optim.lr": 1e-3,
        "checkpoint.allow_config_change": True}), wd)
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2, 3]
    assert json.loads(_read(os.path.join(wd, "config.json")))["optim"]["lr"] == 1e-3


def test_no_readable_checkpoint_stops_unless_asked(finished, tmp_path):
    """Before: every checkpoint moved aside and training silently started over."""
    wd = _copy(finished, tmp_path / "wd")
    for path in glob.glob(os.path.join(wd, "checkpoints", "*", "meta", "*")):
        with open(path, "wb") as f:
            f.write(b"\x00garbage")
    with pytest.raises(UnreadableCheckpoints, match="start_over_if_unreadable"):
        train.train_and_evaluate(_config("grpo", **RUN), wd)
    assert _listing(wd) == ["1", "2"]
    train.train_and_evaluate(_config("grpo", **RUN, **{
        "checkpoint.start_over_if_unreadable": True}), wd)
    assert [d for d in _listing(wd) if "corrupt" not in d] == ["1", "2"]
    assert len([d for d in _listing(wd) if "corrupt" in d]) == 2


def test_flipped_bytes_fall_back_to_the_previous_checkpoint(tmp_path):
    """Flipped bytes in array data restore without complaint in orbax; the checksum in the
    metadata catches them, and restore falls back to the previous step."""
    d = str(tmp_path / "ckpt")
    tree = {"w": jnp.arange(4096, dtype=jnp.float32).reshape(64, 64) / 7,
            "b": jnp.ones((3,), jnp.bfloat16), "count": jnp.array(5, jnp.int32)}
    ckpt = Checkpointer(d)
    ckpt.save(1, tree, {"step": 1})
    ckpt.save(2, tree, {"step": 2})
    data = max(glob.glob(f"{d}/2/arrays/**/d/*", recursive=True), key=os.path.getsize)
    raw = bytearray(_read_bytes(data))
    raw[len(raw) // 2:len(raw) // 2 + 4] = b"\xff\x7f\x12\x34"
    with open(data, "wb") as f:
        f.write(raw)
    silent = ckpt.manager.restore(2, args=ocp.args.Composite(
        arrays=ocp.args.StandardRestore(abstract_like(tree))))["arrays"]
    assert not np.array_equal(silent["w"], tree["w"])  # orbax alone: no error, wrong values
    step, arrays, meta = ckpt.restore_latest(abstract_like(tree))
    assert (step, meta) == (1, {"step": 1})
    for a, b in zip(jax.tree.leaves(arrays), jax.tree.leaves(tree)):
        np.testing.assert_array_equal(a, b)
    assert sorted(os.listdir(d))[0] == "1" and "2.corrupt-" in sorted(os.listdir(d))[1]
    # Other shapes (another config) are a mismatch, not corruption: nothing moves.
    with pytest.raises(CheckpointMismatch, match=r"\['w'\]: saved \[\[64, 64\]"):
        ckpt.restore_latest(abstract_like(dict(tree, w=jnp.zeros((32, 64)))))
    assert "1" in os.listdir(d)


def test_a_partial_restore_reads_and_checks_the_named_part_alone(tmp_path):
    """The policy alone (evaluate, export): only the named arrays come back, checked against
    their saved checksums (a wrong one falls back to the older step); a wrong checksum of a
    part not read (the optimizer's) does not matter; other shapes of the part are a mismatch."""
    from ada_jax.checkpoint import _META_SUM, _SIGNATURE, meta_checksum
    d = str(tmp_path / "ckpt")
    tree = {"trainable": {"model": {"w": jnp.arange(4096, dtype=jnp.float32).reshape(64, 64)}},
            "opt": {"mu": jnp.arange(8192, dtype=jnp.float32) / 3}}
    part = {"trainable": tree["trainable"]}
    ckpt = Checkpointer(d)
    ckpt.save(1, tree, {"step": 1})
    ckpt.save(2, jax.tree.map(lambda x: x + 1, tree), {"step": 2})

    def wrong_checksum(step, leaf):  # as if that array's bytes had changed on disk
        def edit(meta):
            meta[_SIGNATURE][leaf][2] += 1
            meta.pop(_META_SUM)
            meta[_META_SUM] = meta_checksum(meta)
        _edit_meta(os.path.join(d, str(step), "meta", "metadata"), edit)

    wrong_checksum(2, "['opt']['mu']")
    step, arrays, _ = ckpt.restore_latest(abstract_like(part), partial=True)
    assert step == 2 and jax.tree.structure(arrays) == jax.tree.structure(part)
    np.testing.assert_array_equal(arrays["trainable"]["model"]["w"],
                                  tree["trainable"]["model"]["w"] + 1)
    with pytest.raises(CheckpointMismatch, match=r"\['w'\]: saved \[\[64, 64\]"):
        ckpt.restore_latest({"trainable": {"model": {"w": jax.ShapeDtypeStruct(
            (32, 64), jnp.float32, sharding=arrays["trainable"]["model"]["w"].sharding)}}},
            partial=True)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint of step 7 \(has \[1, 2\]\)"):
        ckpt.restore(7, abstract_like(part), partial=True)
    wrong_checksum(2, "['trainable']['model']['w']")
    step, arrays, _ = ckpt.restore_latest(abstract_like(part), partial=True)
    assert step == 1
    np.testing.assert_array_equal(arrays["trainable"]["model"]["w"],
                                  tree["trainable"]["model"]["w"])


def test_a_checkpoint_of_per_layer_block_weights_is_refused_saying_so(tmp_path):
    """Block weights kept per layer (['blocks'][i]…) against the stacked layout: a mismatch
    that names the layout and what to do, not corruption."""
    d = str(tmp_path / "ckpt")
    ckpt = Checkpointer(d)
    ckpt.save(1, {"blocks": {0: {"w": jnp.ones(3)}, 1: {"w": jnp.ones(3)}}}, {"step": 1})
    with pytest.raises(CheckpointMismatch, match=r"stacked \(\[L, …\]\).*convert_hf"):
        ckpt.restore_latest(abstract_like({"blocks": {"w": jnp.ones((2, 3))}}))
    assert "1" in os.listdir(d)


def _edit_meta(path, edit):
    with open(path) as f:
        meta = json.load(f)
    edit(meta)
    with open(path, "w") as f:
        json.dump(meta, f)


def test_edited_metadata_falls_back_to_the_previous_checkpoint(tmp_path):
    """The metadata (step, data position, Ada-Est history, ...) is checked against its own
    SHA-256: an edit that stays valid JSON is corruption, not a silent resume elsewhere
    Int keys and floats read back equal: no false alarm."""
    d = str(tmp_path / "ckpt")
    tree = {"w": jnp.ones((4, 4), jnp.float32)}
    meta = {"iterator": {"epoch": 0, "position": 32}, "est_history": {7: [0.25, 3]},
            "totals": {"wall": 0.1 + 0.2}}
    ckpt = Checkpointer(d)
    ckpt.save(1, tree, {**meta, "step": 1})
    ckpt.save(2, tree, {**meta, "step": 2})
    assert ckpt.restore_latest(abstract_like(tree))[2]["est_history"] == {"7": [0.25, 3]}
    path = os.path.join(d, "2", "meta", "metadata")
    _edit_meta(path, lambda m: m["iterator"].update(position=48))
    step, _, got = ckpt.restore_latest(abstract_like(tree))
    assert (step, got["step"], got["iterator"]["position"]) == (1, 1, 32)
    assert "2.corrupt-" in sorted(os.listdir(d))[1]
    # A checkpoint from before metadata checksums (no such key) still restores.
    _edit_meta(os.path.join(d, "1", "meta", "metadata"), lambda m: m.pop("_meta_sha256"))
    assert ckpt.restore_latest(abstract_like(tree))[0] == 1


@pytest.mark.slow  # 13 s; the Checkpointer test above covers the check
def test_edited_metadata_resumes_from_the_previous_step(finished, tmp_path):
    """Through the trainer: step 2's data position edited, the run resumes from step 1 and
    redoes step 2 exactly (its params equal the unedited run's)."""
    wd = _copy(finished, tmp_path / "wd")
    _edit_meta(os.path.join(wd, "checkpoints", "2", "meta", "metadata"),
               lambda m: m.update(step=3))
    train.train_and_evaluate(_config("grpo", **RUN), wd)
    assert [d for d in _listing(wd) if "corrupt" not in d] == ["1", "2"]
    assert any("2.corrupt-" in d for d in _listing(wd))
    _, got, _ = _restore(wd)
    _, want, _ = _restore(finished)
    for a, b in zip(jax.tree.leaves(got["trainable"]), jax.tree.leaves(want["trainable"])):
        np.testing.assert_array_equal(a, b)


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def _records(path, steps):
    lines = [json.dumps({"step": s, "cum_samples": 10 * s, "reward_mean": 0.1 * s}) + "\n"
             for s in steps]
    with open(path, "w") as f:
        f.writelines(lines)
    return lines


def test_fresh_start_keeps_no_step0_record(tmp_path):
    """A kill after step 0's eval line but before the first checkpoint: the re-run starts at
    step 0 and writes that line again, so the old one must go (before: step 0 twice)."""
    _records(tmp_path / "metrics.jsonl", [0])
    metrics_log.MetricsWriter(str(tmp_path), 0)
    assert _read(tmp_path / "metrics.jsonl") == ""


def test_metrics_rewrite_is_atomic(tmp_path, monkeypatch):
    """A crash while the file is rewritten on resume leaves the old file (before: emptied)."""
    lines = _records(tmp_path / "metrics.jsonl", [0, 1, 2, 3])

    class Killed(Exception):
        pass

    class DiesOnWrite:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def __getattr__(self, name):
            if name.startswith("write"):
                raise Killed
            return getattr(self.f, name)

    def crashing_open(path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        return DiesOnWrite(f) if "w" in mode else f

    monkeypatch.setattr(metrics_log, "open", crashing_open, raising=False)
    with pytest.raises(Killed):
        metrics_log.MetricsWriter(str(tmp_path), 2)
    assert _read(tmp_path / "metrics.jsonl") == "".join(lines)


def test_garbled_metrics_record_is_an_error(tmp_path):
    """A garbled record of a kept step is refused (before: silently dropped, with its eval);
    a line cut by a crash after the resumed step is dropped; totals come from the resumed
    step's record."""
    path = tmp_path / "metrics.jsonl"
    lines = _records(path, [0, 1, 2, 3])
    with open(path, "w") as f:
        f.writelines(lines[:3] + [lines[3][:9]])  # step 3 cut mid-line
    writer = metrics_log.MetricsWriter(str(tmp_path), 2)
    assert _read(path) == "".join(lines[:3])
    assert writer.last == {"step": 2, "cum_samples": 20, "reward_mean": 0.2}
    with open(path, "w") as f:
        f.writelines([lines[0], lines[1].replace('"step"', '"st\x00p'), lines[2]])
    with pytest.raises(ValueError, match=r"step\(s\) 1 before .*; unreadable lines 2\. "):
        metrics_log.MetricsWriter(str(tmp_path), 2)


def test_a_line_that_is_not_utf8_is_one_unreadable_line(tmp_path, caplog):
    """Bytes that are not UTF-8 (a disk fault, a binary write) stopped a resume with a raw
    UnicodeDecodeError, which resume_without_metrics did not get past; now the line is an
    unreadable line like a cut one: named, refused before the resumed step unless accepted,
    dropped after it, and left out with a warning by the plots' reader."""
    from ada_jax import plots
    from tests.test_train import _config
    path = tmp_path / "metrics.jsonl"
    lines = [line.encode() for line in _records(path, [0, 1, 2, 3])]
    path.write_bytes(lines[0] + b'{"step": 1, "x": "\xff\xfe"}\n' + lines[2] + lines[3])
    with caplog.at_level("WARNING"):
        assert [r["step"] for r in plots.load_metrics(str(tmp_path))] == [0, 2, 3]
    assert f"{path}: unreadable line(s) 2 left out" in caplog.text
    with pytest.raises(ValueError, match=r"step\(s\) 1 before .*; unreadable lines 2\. "):
        metrics_log.MetricsWriter(str(tmp_path), 2)
    c = _config("grpo")
    c.checkpoint.resume_without_metrics = True
    metrics_log.MetricsWriter(str(tmp_path), 2, c).close()
    assert _read(path) == "".join(line.decode() for line in (lines[0], lines[2]))
    path.write_bytes(b"".join(lines[:3]) + b"\xff\xfe garbage\n")
    caplog.clear()
    with caplog.at_level("WARNING"):
        metrics_log.MetricsWriter(str(tmp_path), 2).close()
    assert f"{path}: unreadable line(s) 4 dropped (steps after 2, redone)" in caplog.text
    assert _read(path) == "".join(line.decode() for line in lines[:3])
