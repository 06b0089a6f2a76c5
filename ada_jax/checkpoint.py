"""Orbax checkpoints: array state (params, optimizer, DARO weights) + JSON metadata per step.

Saves are synchronous and atomic (orbax writes a temporary directory and renames it when the
save is complete), so a crash mid-save leaves the previous checkpoint intact. Restore walks
back from the newest step and skips any checkpoint it cannot read, logging why.
"""
import logging
import os
import time

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    def __init__(self, directory: str, keep: int = 2):
        self.directory = os.path.abspath(directory)
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                 enable_async_checkpointing=False))

    def save(self, step: int, arrays, meta: dict) -> None:
        self.manager.save(step, args=ocp.args.Composite(
            arrays=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)), force=True)
        self.manager.wait_until_finished()

    def restore_latest(self, abstract_arrays):
        """(step, arrays, meta) of the newest readable checkpoint, or None if there is none."""
        self.manager.reload()
        found = None
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                out = self.manager.restore(step, args=ocp.args.Composite(
                    arrays=ocp.args.StandardRestore(abstract_arrays),
                    meta=ocp.args.JsonRestore()))
                found = step, out["arrays"], out["meta"]
                break
            except Exception as e:  # corrupted / partial: fall back to an older one
                logging.warning("checkpoint %d in %s is unreadable (%s: %s); moving it aside "
                                "and trying older", step, self.directory, type(e).__name__, e)
                bad = os.path.join(self.directory, str(step))
                os.replace(bad, f"{bad}.corrupt-{int(time.time())}")
        self.manager.reload()
        return found

    def close(self):
        self.manager.close()


def abstract_like(tree):
    """ShapeDtypeStructs (with shardings) to restore `tree`'s layout."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                        tree)
