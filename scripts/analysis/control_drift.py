"""Where a family-task run's transfer-control drift lives: the exact probability of each
tier's right marker at the first response token (no sampling noise) for the base, the RL
checkpoint, and the checkpoint with one group of parameters put back to the base's
(embedding, norms, attention, MLP). The group whose reversal brings the controls back is
where RL moved them (docs/results.md, "Transfer controls"). Per control family it also gives
the logit gap right - wrong marker, base and RL, and the reading its base prefers: which way
each control moved.

  python scripts/analysis/control_drift.py --workdir=W     # W: a family-task run with a checkpoint
"""
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx
from ml_collections import config_flags

import ada_jax
from ada_jax import evaluate, model as model_lib, run_config, train
from ada_jax.tasks import families

_DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "base.py")
_CONFIG = config_flags.DEFINE_config_file("config", _DEFAULT_CONFIG, "Config file.")
_WORKDIR = flags.DEFINE_string("workdir", "workdir", "Run directory.")
GROUPS = {"embedding": ("embed",), "norms": ("norm",), "attention": ("'attn'",),
          "mlp": ("'mlp'",)}


def decision_logits(ctx, params) -> np.ndarray:
    """Float32 logits [prompts, vocab] at the first response token of every eval prompt."""
    toks, mask = evaluate.encode_prompts(ctx.tokenizer, ctx.eval_problems,
                                         ctx.config.task.template,
                                         ctx.config.sampling.max_prompt_len)
    logits, _ = nnx.merge(ctx.graphdef, params)(
        jnp.asarray(toks), model_lib.positions_from_mask(jnp.asarray(mask)), jnp.asarray(mask))
    return np.asarray(logits[:, -1].astype(jnp.float32))


def marker_ids(ctx):
    """Token ids of each eval prompt's right and wrong marker, and its family (0-based)."""
    fam = np.asarray([p.level - 1 for p in ctx.eval_problems])
    enc = lambda f, r: ctx.tokenizer.encode(families.marker(f, r))[0]
    right = np.asarray([enc(f, families.FAMILIES[f].right) for f in fam])
    wrong = np.asarray([enc(f, families.other_reading(families.FAMILIES[f].right))
                        for f in fam])
    return right, wrong, fam


def right_marker_probability(ctx, logits) -> dict:
    """Per tier: mean over the eval prompts of pi(right marker | prompt), exact."""
    right, _, fam = marker_ids(ctx)
    p_right = np.asarray(jax.nn.softmax(logits))[np.arange(len(fam)), right]
    tiers = np.asarray([families.tier_of(f + 1) for f in fam])
    return {t: round(float(p_right[tiers == t].mean()), 3) for t in sorted(set(tiers))}


def family_gaps(ctx, logits) -> dict:
    """Family (0-based) -> mean logit gap right - wrong marker over its eval prompts."""
    right, wrong, fam = marker_ids(ctx)
    gap = logits[np.arange(len(fam)), right] - logits[np.arange(len(fam)), wrong]
    return {f: float(gap[fam == f].mean()) for f in sorted(set(fam.tolist()))}


def control_gaps(base_gaps, rl_gaps) -> dict:
    """Per control family: its gap at base and after RL, and the reading its base prefers."""
    out = {}
    for f, g_base in base_gaps.items():
        family = families.FAMILIES[f]
        if family.control:
            out[family.tag] = {"tier": family.tier, "right": family.right,
                               "base_prefers": family.right if g_base > 0 else
                               families.other_reading(family.right),
                               "gap_base": round(g_base, 2), "gap_rl": round(rl_gaps[f], 2)}
    return out


def gap_scale_by_tier(base_gaps, rl_gaps) -> dict:
    """Per tier: median and range over its families of gap_rl / gap_base. A family no reward
    holds (a control) keeps its sign and shrinks towards 0 when RL makes the network forget
    it; a trained family moves its own way."""
    out = {}
    for tier in sorted({families.tier_of(f + 1) for f in base_gaps}):
        ratios = [rl_gaps[f] / g for f, g in base_gaps.items() if families.tier_of(f + 1) == tier]
        out[tier] = {"median": round(float(np.median(ratios)), 2),
                     "range": [round(float(min(ratios)), 2), round(float(max(ratios)), 2)]}
    return out


def _in_group(path, parts) -> bool:
    return any(p in jax.tree_util.keystr(path) for p in parts)


def parameter_change(base, rl) -> dict:
    """Relative change ||rl - base|| / ||base|| of all parameters and of each group: how far
    RL moved the network (forgetting of what no reward holds grows with it)."""
    def norms(parts):
        pick = lambda path: parts is None or _in_group(path, parts)
        d = b = 0.0
        for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(base),
                                jax.tree_util.tree_leaves(rl)):
            if pick(path):
                x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
                d, b = d + float(((y - x) ** 2).sum()), b + float((x ** 2).sum())
        return round(float(np.sqrt(d / b)), 4)
    return {"all": norms(None), **{name: norms(parts) for name, parts in GROUPS.items()}}


def main(argv):
    del argv
    ada_jax.console_logging()
    # the run's own config.json (its base, its task), whatever --config names: a config of
    # other variants would point at another base and compare the run with the wrong one
    argv = [a for a in sys.argv if not (a.startswith("--config=") or a == "--config")]
    config = run_config.for_workdir(_CONFIG.value, argv, _WORKDIR.value)
    if config.task.name != "families":
        raise SystemExit("control_drift.py reads the family task's markers: task=families only")
    ctx, base = train.setup(config, _WORKDIR.value)
    restored = train.restore_policy(ctx, base, _WORKDIR.value)
    if restored is None:
        raise SystemExit(f"no checkpoint in {_WORKDIR.value}/checkpoints")
    step, rl = restored
    base_logits, rl_logits = decision_logits(ctx, base), decision_logits(ctx, rl)
    out = {"step": step, "base": right_marker_probability(ctx, base_logits),
           "rl": right_marker_probability(ctx, rl_logits)}
    for name, parts in GROUPS.items():
        mixed = jax.tree_util.tree_map_with_path(
            lambda path, a, b: b if _in_group(path, parts) else a,
            rl, base)
        out[f"rl, {name} reverted"] = right_marker_probability(ctx, decision_logits(ctx, mixed))
    base_gaps, rl_gaps = family_gaps(ctx, base_logits), family_gaps(ctx, rl_logits)
    out["control_gaps"] = control_gaps(base_gaps, rl_gaps)
    out["gap_rl_over_gap_base"] = gap_scale_by_tier(base_gaps, rl_gaps)
    out["parameter_change"] = parameter_change(base, rl)
    print(json.dumps(out))


if __name__ == "__main__":
    app.run(main)
