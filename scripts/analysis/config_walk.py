"""The walk of a run's config through the package: which modules a call carrying the config
(or a part or copy of it) enters, in order, from an entry point, traced with sys.settrace over
a tiny run. Prints per case the walk (consecutive calls in one module merged), the modules it
crosses and its returns (entries into a module it had already left): a walk that crosses each
module once reads top-down.

  python scripts/analysis/config_walk.py                                 # base_policy.load
  python scripts/analysis/config_walk.py --root=OLD_CHECKOUT --entry=ada_jax.sft:load_base

Cases: a pretrained folder (a tiny model exported to HF format), the random init (sft.steps 0),
an SFT base trained (2 steps) and the same base loaded from the cache.
"""
import argparse
import importlib
import os
import sys
import tempfile


def walk(entry, *args):
    """(result, collapsed list of the modules entered by config-carrying calls) of entry(*args)."""
    from ml_collections import ConfigDict, FrozenConfigDict
    seen = []

    def tracer(frame, event, arg):
        if event != "call" or not frame.f_globals.get("__name__", "").startswith("ada_jax"):
            return None
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        if any(isinstance(frame.f_locals.get(v), (ConfigDict, FrozenConfigDict))
               for v in code.co_varnames[:n]):
            module = frame.f_globals["__name__"].removeprefix("ada_jax.")
            if not seen or seen[-1] != module:
                seen.append(module)
        return None
    sys.settrace(tracer)
    try:
        out = entry(*args)
    finally:
        sys.settrace(None)
    return out, seen


def returns(seen) -> int:
    return sum(m in seen[:i] for i, m in enumerate(seen))


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default=here, help="the checkout whose ada_jax is traced")
    p.add_argument("--entry", default="ada_jax.base_policy:load",
                   help="module:function taking (config, workdir, mesh, tokenizer)")
    a = p.parse_args()
    sys.path.insert(0, os.path.abspath(a.root))
    tmp = tempfile.mkdtemp(prefix="config_walk_")
    os.environ["ADA_JAX_CACHE"] = os.path.join(tmp, "cache")
    from flax import nnx

    from ada_jax import hf_export, sharding
    from ada_jax import model as model_lib
    from ada_jax.tokenizer import load_tokenizer
    from configs import base
    module, name = a.entry.split(":")
    entry = getattr(importlib.import_module(module), name)

    def config(**fields):
        c = base.get_config("algo=grpo,smoke=True,task=embedded")
        c.unlock()
        c.sft.update(batch_size=4, warmup_steps=1, steps=2)
        c.sampling.update(max_prompt_len=24, max_new_tokens=8)
        c.task.train_size = 256
        for k, v in fields.items():
            section, field = k.split(".")
            c[section][field] = v
        return c

    c = config()
    mesh, tokenizer = sharding.make_mesh(c.mesh), load_tokenizer(c)
    cfg = model_lib.ModelConfig.from_config(c.model)
    hf_export.export_hf(nnx.split(model_lib.Transformer(cfg, nnx.Rngs(0)))[1], cfg,
                        os.path.join(tmp, "hf"), model_type="llama")
    cases = [("pretrained", config(**{"model.init_from": os.path.join(tmp, "hf")})),
             ("random init", config(**{"sft.steps": 0})),
             ("SFT trained", c), ("SFT cached", c)]
    for i, (case, cc) in enumerate(cases):
        _, seen = walk(entry, cc, os.path.join(tmp, f"wd{i}"), mesh, tokenizer)
        print(f"{case}: {len(set(seen))} modules, {returns(seen)} returns: {' > '.join(seen)}")


if __name__ == "__main__":
    main()
