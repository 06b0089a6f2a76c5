"""Convert a base checkpoint between the two block layouts, so that code from either side of
the layout change can start from the same weights (e.g. to cross a base with another
version's RL step):

  per-layer  ['params']['blocks'][i][...]   (each layer's Block apart)
  stacked    ['params']['blocks'][...]      ([L, ...], the model's layout now)

  python scripts/tools/convert_base_layout.py --src=OLD_BASE --dst=NEW_BASE --to=stacked

Reads the newest step of --src (an orbax base folder: `params` only, as sft.train_base writes
it), writes the same values in the other layout to --dst as that step, with the source's
metadata (sft_steps) and a `converted_from` note. Values are copied exactly (no cast)."""
import argparse
import json
import os

import numpy as np
import orbax.checkpoint as ocp


def _plain(tree):
    """Nested dicts of numpy arrays (orbax restores nnx variables as {'value': array})."""
    if isinstance(tree, dict):
        if set(tree) == {"value"}:
            return np.asarray(tree["value"])
        return {k: _plain(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return {str(i): _plain(v) for i, v in enumerate(tree)}
    return np.asarray(tree)


def _wrap(tree, leaf):
    return {k: _wrap(v, leaf) for k, v in tree.items()} if isinstance(tree, dict) else leaf(tree)


def to_stacked(blocks: dict) -> dict:
    """{'0': layer, '1': layer, …} -> one layer tree with every leaf stacked on axis 0."""
    layers = [blocks[str(i)] for i in range(len(blocks))]

    def stack(*xs):
        if isinstance(xs[0], dict):
            return {k: stack(*(x[k] for x in xs)) for k in xs[0]}
        return np.stack(xs)
    return stack(*layers)


def to_per_layer(blocks: dict) -> dict:
    """One layer tree of [L, …] leaves -> {'0': layer, …}."""
    def n_layers(t):
        return n_layers(next(iter(t.values()))) if isinstance(t, dict) else t.shape[0]

    def take(t, i):
        return {k: take(v, i) for k, v in t.items()} if isinstance(t, dict) else t[i]
    return {str(i): take(blocks, i) for i in range(n_layers(blocks))}


def convert(src: str, dst: str, to: str) -> int:
    manager = ocp.CheckpointManager(os.path.abspath(src))
    step = manager.latest_step()
    if step is None:
        raise SystemExit(f"--src={src}: no checkpoint step in the folder")
    got = manager.restore(step, args=ocp.args.Composite(arrays=ocp.args.StandardRestore(),
                                                        meta=ocp.args.JsonRestore()))
    params = _plain(got["arrays"]["params"])
    is_per_layer = "0" in params["blocks"]
    if (to == "stacked") != is_per_layer:
        raise SystemExit(f"--src={src} is already in the {to} layout")
    params["blocks"] = (to_stacked if to == "stacked" else to_per_layer)(params["blocks"])
    meta = {k: v for k, v in got["meta"].items() if not k.startswith("_")}
    meta["converted_from"] = os.path.abspath(src)
    if to == "stacked":  # written as the current code writes it (with the arrays' signature)
        from ada_jax.checkpoint import Checkpointer
        ckpt = Checkpointer(dst, keep=1)
        from flax import nnx
        ckpt.save(step, {"params": _wrap(params, nnx.Param)}, meta)
        ckpt.close()
    else:  # the older code's reader takes a plain orbax save
        out = ocp.CheckpointManager(os.path.abspath(dst))
        out.save(step, args=ocp.args.Composite(arrays=ocp.args.StandardSave(
            {"params": _wrap(params, lambda x: {"value": x})}), meta=ocp.args.JsonSave(meta)))
        out.wait_until_finished()
        out.close()
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--to", choices=("stacked", "per_layer"), default="stacked")
    a = ap.parse_args()
    step = convert(a.src, a.dst, a.to)
    print(json.dumps({"src": a.src, "dst": a.dst, "to": a.to, "step": step}))


if __name__ == "__main__":
    main()
