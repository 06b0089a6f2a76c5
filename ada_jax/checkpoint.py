"""Orbax checkpoints: array state (params, optimizer, DARO weights) + JSON metadata per step.

Saves are synchronous and atomic (orbax writes a temporary directory and renames it when the
save is complete), so a crash mid-save leaves the previous checkpoint intact; the temporary
directory it leaves is removed by the next run on the directory (`remove_partial`), and one
of a save that fails by the save itself. Each save also
records every array's shape, dtype and a checksum of its bytes in the metadata, so restore can
tell apart
- a checkpoint saved under another config (other shapes): `CheckpointMismatch`, nothing moved;
- a corrupted one (unreadable, or bytes that no longer match the checksum): moved aside as
  `<step>.corrupt-<time>`, and the previous checkpoint is tried. The metadata (JSON: step,
  data position, Ada-Est history, the stream's prompts, the array checksums themselves) carries
  a SHA-256 of its own content, so an edit that leaves it valid JSON is corruption too;
- no readable checkpoint at all: `UnreadableCheckpoints`, nothing moved, unless the caller
  asks to start over.
"""
import hashlib
import json
import logging
import os
import re
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)

_SIGNATURE = "_arrays"  # meta key: {leaf path: [shape, dtype, checksum]}
_META_SUM = "_meta_sha256"  # meta key: SHA-256 of the rest of the metadata (meta_checksum)
_PARTIAL = ".orbax-checkpoint-tmp"  # in the name of orbax's folder of a save in progress


class CheckpointMismatch(ValueError):
    """The checkpoint holds arrays of other shapes or dtypes than the run expects."""


class UnreadableCheckpoints(RuntimeError):
    """Checkpoints exist but none of them can be restored."""


@jax.jit
def _checksums(leaves):
    """uint32[L]: per leaf, Σ_i (2i+1)·word_i mod 2^32 over its bytes as 32-bit words (16- and
    8-bit types widened). Exact under any reduction order and sharding; any changed word changes
    it (odd weights are invertible mod 2^32)."""
    out = []
    for x in leaves:
        if x.dtype.itemsize >= 4:
            w = jax.lax.bitcast_convert_type(x, jnp.uint32)
        elif x.dtype.itemsize == 2:
            w = jax.lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
        else:
            w = x.astype(jnp.uint32)
        w = w.reshape(-1)
        out.append(jnp.sum(w * (2 * jnp.arange(w.size, dtype=jnp.uint32) + 1)))
    return jnp.stack(out) if out else jnp.zeros((0,), jnp.uint32)


# Leaves per `_checksums` program, in bytes: XLA on CPU copies each leaf's words before summing
# them, so one program over a whole train state doubled it at every save (SmolLM2 with AdamW:
# +1.5 GiB). Each group's result is fetched before the next starts: one program in flight, as
# many small programs at once can stall the CPU collectives of a multi-device mesh.
_CHECKSUM_GROUP_BYTES = 64 * 2**20


def _shapes(tree) -> dict:
    return {jax.tree_util.keystr(p): [list(x.shape), str(x.dtype)]
            for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def signature(tree) -> dict:
    """{leaf path: [shape, dtype, checksum]} of a tree of arrays."""
    groups, size = [[]], 0
    for x in jax.tree.leaves(tree):
        nbytes = getattr(x, "nbytes", 0)
        if groups[-1] and size + nbytes > _CHECKSUM_GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(x)
        size += nbytes
    sums = [s for g in groups if g for s in np.asarray(jax.device_get(_checksums(g)))]
    return {k: v + [int(s)] for (k, v), s in zip(_shapes(tree).items(), sums)}


def meta_checksum(meta: dict) -> str:
    """SHA-256 of a JSON-able dict as it reads back from JSON (keys become strings, tuples
    lists), canonically written: the same before saving and after restoring."""
    text = json.dumps(json.loads(json.dumps(meta)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _remove_settled(path: str, tries: int = 40, pause: float = 0.25) -> None:
    """rmtree until the folder stays gone (absent `pause` after a removal): a failed save's
    writer threads may still be adding files to it (on a loaded machine one pass left a failed
    save's folder behind)."""
    for _ in range(tries):
        shutil.rmtree(path, ignore_errors=True)
        time.sleep(pause)
        if not os.path.exists(path):
            return
    log.warning("%s: could not be removed (still being written?)", path)


class Checkpointer:
    def __init__(self, directory: str, keep: int = 2):
        self.directory = os.path.abspath(directory)
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                 enable_async_checkpointing=False))

    def save(self, step: int, arrays, meta: dict) -> None:
        """Save `step`; a save that fails (a full disk) leaves no partial folder behind."""
        meta = {**meta, _SIGNATURE: signature(arrays)}
        meta[_META_SUM] = meta_checksum(meta)
        try:
            self.manager.save(step, args=ocp.args.Composite(
                arrays=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)), force=True)
            self.manager.wait_until_finished()
        except BaseException:
            self.remove_partial(step)
            raise

    def remove_partial(self, step: int | None = None) -> list:
        """Remove the temporary folders of unfinished saves (`<step>.orbax-checkpoint-tmp…`,
        of `step` or of any step), process 0 only; returns their names. Orbax removes one only
        when it saves that step again, and a pre-emption's step is off schedule, so one left
        by a kill mid-save (or a full disk: most of a checkpoint) would stay for good. Call it
        at start only while holding the directory's lock: a live run's save is a temp folder
        too."""
        if jax.process_index() != 0 or not os.path.isdir(self.directory):
            return []
        gone = sorted(name for name in os.listdir(self.directory) if _PARTIAL in name
                      and (step is None or name.startswith(f"{step}.")))
        for name in gone:
            _remove_settled(os.path.join(self.directory, name))
        if gone:
            log.warning("%s: removed the partial checkpoint(s) of an unfinished save: %s",
                        self.directory, ", ".join(gone))
        return gone

    def _restore(self, step: int, abstract_arrays, partial: bool = False):
        """(arrays, meta) of one step; CheckpointMismatch for other shapes, any other exception
        for corruption. `partial`: `abstract_arrays` names a part of what was saved (the
        policy's params alone), only that part is read and checked."""
        try:
            meta = self.manager.restore(step, args=ocp.args.Composite(
                meta=ocp.args.JsonRestore()))["meta"]
        except Exception as e:
            raise OSError(f"metadata unreadable ({type(e).__name__}: {e})") from e
        want_sum = meta.pop(_META_SUM, None)  # None: saved before metadata checksums existed
        if want_sum is not None and meta_checksum(meta) != want_sum:
            raise OSError("metadata checksum mismatch (meta/metadata was edited or corrupted)")
        saved = meta.pop(_SIGNATURE, None)  # None: saved before signatures existed
        if saved is not None:
            want = _shapes(abstract_arrays)
            diff = [f"{k}: saved {saved[k][:2] if k in saved else 'absent'}, "
                    f"expected {want[k] if k in want else 'absent'}"
                    for k in sorted(want.keys() if partial else saved.keys() | want.keys())
                    if k not in saved or k not in want or saved[k][:2] != want[k]]
            if diff:
                per_layer = any(re.search(r"\['blocks'\]\[\d+\]", k) for k in saved)
                why = ("it keeps each layer's block weights apart (['blocks'][i]…), where the "
                       "model now stores them stacked ([L, …]); resume it with the ada_jax that "
                       "wrote it, or export it there (scripts/convert_hf.py) and start a run "
                       "from the export (model.init_from)" if per_layer else
                       "was it saved with another config?")
                raise CheckpointMismatch(
                    f"checkpoint {step} in {self.directory} holds other arrays than this config "
                    f"builds ({why}): " + "; ".join(diff[:5])
                    + (f"; … {len(diff) - 5} more" if len(diff) > 5 else ""))
        if partial:  # a reader of its own: this manager's "arrays" handler is the saver's
            read = ocp.args.PyTreeRestore(
                abstract_arrays, partial_restore=True,
                restore_args=ocp.checkpoint_utils.construct_restore_args(abstract_arrays))
            with ocp.CheckpointManager(self.directory) as reader:
                arrays = reader.restore(step, args=ocp.args.Composite(arrays=read))
        else:
            arrays = self.manager.restore(step, args=ocp.args.Composite(
                arrays=ocp.args.StandardRestore(abstract_arrays)))
        arrays = arrays["arrays"]
        if saved is not None:
            bad = [k for k, v in signature(arrays).items() if v[2] != saved[k][2]]
            if bad:
                raise OSError(f"checksum mismatch in {', '.join(bad[:5])}"
                              + (f" and {len(bad) - 5} more arrays" if len(bad) > 5 else ""))
        return arrays, meta

    def restore(self, step: int, abstract_arrays, partial: bool = False):
        """(arrays, meta) of checkpoint `step` (FileNotFoundError naming the steps there if
        it has none of that step); see _restore."""
        steps = self.manager.all_steps()
        if step not in steps:
            raise FileNotFoundError(f"{self.directory}: no checkpoint of step {step} (has "
                                    f"{sorted(steps)})")
        return self._restore(step, abstract_arrays, partial)

    def restore_latest(self, abstract_arrays, start_over: bool = False, partial: bool = False):
        """(step, arrays, meta) of the newest readable checkpoint, or None if there is none;
        `partial`: only the part of it `abstract_arrays` names (see _restore).

        Corrupted checkpoints newer than the one restored are moved aside. When checkpoints
        exist but none is readable: UnreadableCheckpoints, or with `start_over` move them all
        aside and return None."""
        self.manager.reload()
        bad = []
        found = None
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                found = (step,) + self._restore(step, abstract_arrays, partial)
                break
            except CheckpointMismatch:
                raise
            except Exception as e:  # corrupted / partial: fall back to an older one
                log.warning("checkpoint %d in %s is unreadable (%s: %s)", step,
                                self.directory, type(e).__name__, e)
                bad.append((step, f"{type(e).__name__}: {e}"))
        if found is None and bad and not start_over:
            raise UnreadableCheckpoints(
                f"no checkpoint in {self.directory} is readable: "
                + "; ".join(f"step {s}: {why}" for s, why in bad)
                + ". Move the directory aside to start over.")
        for step, _ in bad:
            path = os.path.join(self.directory, str(step))
            if jax.process_index() == 0:  # one mover on a directory every host shares
                log.warning("moving %s aside", path)
                os.replace(path, f"{path}.corrupt-{int(time.time())}")
        self.manager.reload()
        return found

    def close(self):
        self.manager.close()


def abstract_like(tree):
    """ShapeDtypeStructs (with shardings) to restore `tree`'s layout."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                        tree)


def read_policy(workdir: str, abstract_model, step: int | None = None):
    """(step, params) of the policy alone in a run's checkpoint (its newest readable one, or
    `step`), read into `abstract_model`'s layout (ShapeDtypeStructs with shardings); None when
    the run has no checkpoint. The optimizer's state (twice the params under AdamW) and the
    policies' arrays stay on disk: what an evaluation or an export holds."""
    directory = os.path.join(os.path.abspath(workdir), "checkpoints")
    if not os.path.isdir(directory):
        return None
    ckpt = Checkpointer(directory)
    item = {"trainable": {"model": abstract_model}}  # the rest of the tree is left on disk
    try:
        if step is None:
            got = ckpt.restore_latest(item, partial=True)
            return None if got is None else (got[0], got[1]["trainable"]["model"])
        return step, ckpt.restore(step, item, partial=True)[0]["trainable"]["model"]
    finally:
        ckpt.close()
