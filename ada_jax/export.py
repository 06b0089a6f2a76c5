"""A training run's policy as a Hugging Face folder: its checkpoint's params read alone
(`restore_params`) and written by `hf_export.export_hf` with what `transformers` needs to generate
from it unaided (`export_run`: tokenizer files, stop and pad ids, the checkpoint's context)."""
import dataclasses
import json
import logging
import os
import shutil

import jax
import ml_collections
from flax import nnx

from ada_jax import checkpoint, convert, hf_export, run_config, sharding
from ada_jax import model as model_lib
from ada_jax import tokenizer as tok_lib

log = logging.getLogger(__name__)


def _saved_config(workdir: str):
    """The run's config, as its workdir's config.json saved it."""
    file = os.path.join(workdir, "config.json")
    if not os.path.exists(file):
        raise FileNotFoundError(f"{workdir}: no config.json (is this a training workdir?)")
    return ml_collections.ConfigDict(run_config.read_saved(file))


def restore_params(workdir: str, step: int | None = None, mesh=None):
    """(config, ModelConfig, graphdef, params, step) of a training run's checkpoint (the latest,
    or `step`): the policy params only, placed on `mesh` (default: every device on fsdp) by the
    run's sharding rules, checked against the checkpoint's checksums; the optimizer and engine
    state are not read."""
    config = _saved_config(workdir)
    cfg = model_lib.ModelConfig.from_config(config.model)
    graphdef, abstract = model_lib.abstract(cfg)
    mesh = mesh or sharding.make_mesh(dict(data=1, fsdp=-1, tensor=1))
    rules = [tuple(r) if not isinstance(r[1], list) else (r[0], tuple(r[1]))
             for r in config.sharding_rules]
    shardings = dict(nnx.to_flat_state(sharding.state_shardings(abstract, mesh, rules)))
    target = nnx.from_flat_state([
        (k, v.replace(jax.ShapeDtypeStruct(v.get_value().shape, v.get_value().dtype,
                                           sharding=shardings[k])))
        for k, v in nnx.to_flat_state(abstract)])
    got = checkpoint.read_policy(workdir, target, step)
    if got is None:
        raise FileNotFoundError(f"{os.path.join(os.path.abspath(workdir), 'checkpoints')}: "
                                f"no checkpoint")
    step, params = got
    return config, cfg, graphdef, params, step


def _update_json(file: str, values: dict, defaults: dict | None = None) -> None:
    """Rewrite the JSON object in file (or {}) with values set and defaults where missing."""
    obj = convert.read_json(file) if os.path.exists(file) else {}
    with open(file, "w") as f:
        json.dump({**(defaults or {}), **obj, **values}, f, indent=2)


def export_run(workdir: str, out_dir: str, *, step: int | None = None, dtype: str | None = None,
               mesh=None, max_shard_bytes: int = 5 * 2**30) -> dict:
    """Export a training run's policy (latest checkpoint, or `step`) as a Hugging Face folder
    that `transformers` `generate()` runs with no extra arguments: safetensors + config.json
    (export_hf, architecture and max_position_embeddings of the run's init_from), the
    tokenizer files, and generation_config.json whose eos_token_id is the run's stop tokens
    (config.model.eos_token first, then extra_eos_tokens), with its bos and pad ids (and, unless
    the source sets it, max_length = the checkpoint's context); the same ids go into
    config.json, the tokens into tokenizer_config.json (eos_token, pad_token). The params are
    read onto `mesh` (restore_params). Returns a summary (step, params, files, the ids)."""
    config, cfg, _, params, step = restore_params(workdir, step, mesh)
    m = config.model
    source = m.init_from if m.init_from and os.path.isdir(m.init_from) else None
    if source:  # the run's own length is not the checkpoint's
        cfg = dataclasses.replace(cfg, max_len=convert.hf_field(
            convert.read_hf_config(source), "max_position_embeddings", source,
            default=cfg.max_len))
    files = hf_export.export_hf(params, cfg, out_dir, source=source, dtype=dtype,
                                max_shard_bytes=max_shard_bytes)
    tok = tok_lib.load_tokenizer(config)
    if not isinstance(tok, tok_lib.HFTokenizer):
        log.warning("%s: the run's tokenizer is a sentencepiece model, which a Hugging Face "
                    "folder cannot carry: %s has no tokenizer files", workdir, out_dir)
    eos = [tok.eos_id, *tok_lib.extra_eos_ids(tok, config)]
    ids = dict(bos_token_id=tok.bos_id, eos_token_id=eos if len(eos) > 1 else eos[0],
               pad_token_id=tok.pad_id)
    if jax.process_index() == 0:
        tok_dir = m.tokenizer or m.init_from
        tok_dir = tok_dir if os.path.isdir(tok_dir) else os.path.dirname(tok_dir)
        if isinstance(tok, tok_lib.HFTokenizer) and tok_dir != source:  # a separate tokenizer
            for name in convert.SOURCE_FILES[1:]:
                if os.path.exists(os.path.join(tok_dir, name)):
                    shutil.copy(os.path.join(tok_dir, name), os.path.join(out_dir, name))
        # max_length: the checkpoint's context unless the source sets a length (transformers'
        # default is 20 tokens in all, prompt included; the run's max_new_tokens was a training
        # budget, not the model's)
        _update_json(os.path.join(out_dir, "generation_config.json"), ids,
                     defaults=dict(max_length=cfg.max_len))
        _update_json(os.path.join(out_dir, "config.json"), ids)
        if os.path.exists(os.path.join(out_dir, "tokenizer_config.json")):
            _update_json(os.path.join(out_dir, "tokenizer_config.json"), dict(
                eos_token=tok.decode([tok.eos_id]), pad_token=tok.decode([tok.pad_id])))
    return dict(step=step, params=model_lib.count_params(params), files=files, **ids)
