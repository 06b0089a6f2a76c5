"""The policy a run starts from (`load`), chosen by the config:

- a pretrained model: config.model.init_from, a Hugging Face folder (scripts/convert_hf.py
  names the matching `model=` variant; scripts/convert_gguf.py writes one from a GGUF file),
  imported by ada_jax/convert.py after checking that its config.json describes config.model;
- the random init of config.model, when sft.steps is 0 (tests, benchmarks);
- else an SFT base (ada_jax/sft.py trains it) from its directory (`base_dir`): sft.base_dir
  when set (a shared base); else `<workdir>/base` when a run made before the cache has one;
  else the base shipped in the package for this SFT config (`SHIPPED`: the family task's
  default, so the main job starts RL at once and every CPU starts from the same weights);
  else the cache, `$ADA_JAX_CACHE/bases/<key>` (default `~/.cache/ada_jax`; on
  several processes only when $ADA_JAX_CACHE is set), where `key` hashes what the base
  depends on (`sft_fingerprint`: model, SFT task and its training problems, sft.*, sequence
  lengths, template, tokenizer, seed). So every workdir with the same SFT config reuses one
  base (the log names it), and a changed SFT field trains a new one. A base that is not
  there yet is trained there; runs that want the same one at once train it one at a time.

`report` measures a base's pass-rate spread (scripts/sft.py writes it beside the base).
"""
import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os

import jax
from flax import nnx

from ada_jax import evaluate, host_cpu, rundir, sft, sharding
from ada_jax import model as model_lib
from ada_jax.checkpoint import Checkpointer, abstract_like
from ada_jax.tasks import load_split

log = logging.getLogger(__name__)

_NOT_SFT = {"sft": ("base_dir", "checkpoint_every"),  # fields SFT's result does not depend on
            "task": ("reward", "verifier_workers", "verifier_timeout")}
# Model fields added after the shipped bases were made: left out of the fingerprint while at
# their default (the architecture the fields did not exist for), so existing bases keep their key
_LATER_MODEL_FIELDS = ("nope_interval", "post_norms_only", "qk_norm_full", "yarn_beta_fast",
                       "yarn_beta_slow", "yarn_truncate", "yarn_attention_factor")


def load(config, workdir: str, mesh, tokenizer, shipped: bool = True):
    """(graphdef, params) of the run's starting policy (module doc): the pretrained folder,
    the random init, or the SFT base (loaded, or trained first). shipped=False passes over a
    base shipped in the package (scripts/sft.py: make one)."""
    if config.model.init_from:
        return pretrained(config, mesh)
    graphdef, params = init_params(config, mesh, config.seed)
    if config.sft.steps == 0:
        log.info("starting policy: the random init of model=%s (sft.steps=0)",
                 config.model.name)
        return graphdef, params
    out_dir, fingerprint, kind = _where(config, workdir, tokenizer, shipped)
    if kind == "shipped":  # read only: no lock, nothing written beside it
        restored = Checkpointer(out_dir, keep=1).restore_latest(abstract_like({"params": params}))
        if restored is None:
            raise FileNotFoundError(f"{out_dir}: the shipped base holds no checkpoint")
        log.info("starting policy: the SFT base shipped for this SFT config, %s (no SFT to "
                 "run)", out_dir)
        return graphdef, restored[1]["params"]
    cached = kind == "cache"
    where = f"{out_dir} (the cached base of this SFT config)" if cached else out_dir
    # The cache or sft.base_dir may be wanted by another run at the same time: one trains,
    # the others wait and load its base.
    with _exclusive(out_dir if out_dir != os.path.join(workdir, "base") else None):
        if os.path.isdir(out_dir):
            restored = Checkpointer(out_dir, keep=1).restore_latest(
                abstract_like({"params": params}))
            if restored is not None:
                log.info("starting policy: the SFT base in %s", where)
                return graphdef, restored[1]["params"]
        log.info("no SFT base in %s: running SFT (%d steps)", where, config.sft.steps)
        if cached and jax.process_index() == 0:  # what the key stands for, for a reader
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "sft_config.json"), "w") as f:
                json.dump(fingerprint, f, indent=1, sort_keys=True, default=str)
        return sft.train_base(config, out_dir, mesh, tokenizer, init=(graphdef, params))


def pretrained(config, mesh):
    """Import config.model.init_from (a Hugging Face folder) with config.model's param dtype,
    compute dtype, remat, scan_layers and max_len, after checking its config.json describes
    config.model."""
    from ada_jax import convert  # safetensors: the `hf` extra, only for pretrained runs
    m = config.model
    hf_cfg = convert.model_config_from_hf(convert.read_hf_config(m.init_from),
                                          source=os.path.join(m.init_from, "config.json"))
    got = convert.architecture(hf_cfg)
    want = convert.architecture(model_lib.ModelConfig.from_config(m))
    diff = [f"config.model.{k}={want[k]!r} but config.json gives {got[k]!r}"
            for k in want if want[k] != got[k]]
    if diff:
        raise ValueError(f"config.model.init_from={m.init_from!r} does not hold model={m.name}: "
                         + "; ".join(diff) + " (`python scripts/convert_hf.py --hf_dir=…` names "
                         "the matching model= variant)")
    _, graphdef, params = convert.load_hf_checkpoint(
        m.init_from, mesh, config.sharding_rules, param_dtype=m.param_dtype, dtype=m.dtype,
        remat=m.remat, scan_layers=m.scan_layers, max_len=m.max_len)
    log.info("starting policy: the pretrained model in %s", m.init_from)
    return graphdef, params


def init_params(config, mesh, seed: int):
    """(graphdef, params) of config.model's random init from `seed`, sharded on `mesh`."""
    cfg = model_lib.ModelConfig.from_config(config.model)
    return sharding.init_sharded(lambda: model_lib.Transformer(cfg, nnx.Rngs(seed)), mesh,
                                 config.sharding_rules)


def cache_dir() -> str:
    """$ADA_JAX_CACHE, else ~/.cache/ada_jax."""
    return os.environ.get("ADA_JAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "ada_jax")


def sft_fingerprint(config, tokenizer) -> dict:
    """What the SFT base depends on, as JSON: model, the SFT task's config (task name, family
    set, seeds, levels, files...) and a hash of its training problems (so a change in a task
    generator is seen too), sft.*, the sequence lengths, template, tokenizer (its model bytes
    and special ids) and seed. RL fields (algo, rl.*, adaptive.*) are not in it."""
    task = sft.sft_task(config)
    fields = {"model": config.model.to_dict(), "task": task.task.to_dict(),
              "sft": config.sft.to_dict()}
    for section, names in _NOT_SFT.items():
        for name in names:
            fields[section].pop(name, None)
    defaults = model_lib.ModelConfig.__dataclass_fields__
    for name in _LATER_MODEL_FIELDS:
        if fields["model"].get(name, defaults[name].default) == defaults[name].default:
            fields["model"].pop(name, None)
    # the few-shot file by its text, not its path (and absent while unset, as it was before
    # the field existed: existing bases keep their key)
    if fields["task"].pop("few_shot_file", "") and getattr(tokenizer, "few_shot", ""):
        fields["task"]["few_shot"] = hashlib.sha256(tokenizer.few_shot.encode()).hexdigest()
    source = load_split(task, "train")
    h = hashlib.sha256()
    for i in range(len(source)):
        p = source[i]
        h.update(f"{p.question}\0{p.solution}\0{p.answer}\0".encode())
    if hasattr(tokenizer, "_sp"):  # sentencepiece
        tok_bytes = tokenizer._sp.serialized_model_proto()
    elif hasattr(tokenizer, "_tok"):  # Hugging Face tokenizers
        tok_bytes = tokenizer._tok.to_str().encode()
    else:
        tok_bytes = repr(type(tokenizer)).encode()
    tok = [hashlib.sha256(tok_bytes).hexdigest(), tokenizer.vocab_size, tokenizer.pad_id,
           getattr(tokenizer, "bos_id", None), tokenizer.eos_id]
    return dict(version=sft.VERSION, seed=config.seed, **fields,
                sampling={k: config.sampling[k] for k in ("max_prompt_len", "max_new_tokens")},
                train_problems=[len(source), h.hexdigest()], tokenizer=tok)


def sft_key(fingerprint: dict) -> str:
    """The cache entry's name: 16 hex digits of the fingerprint's hash."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_dir(config, workdir: str, tokenizer=None, shipped: bool = True) -> str:
    """Where the base policy lives (module doc): sft.base_dir, else an existing
    `<workdir>/base`, else the base shipped in the package for this SFT config, else the cache
    entry of this SFT config (these two need the tokenizer). On several processes the cache
    is used only when $ADA_JAX_CACHE names one (every process must see the same files, and
    ~/.cache is per host on a TPU pod): else `<workdir>/base`."""
    return _where(config, workdir, tokenizer, shipped)[0]


# Bases shipped in the package, one folder per SFT config (named by its `sft_key`): an orbax
# checkpoint of the params, sft_config.json (the fingerprint) and made_by.json (the commit,
# CPU and JAX that trained it), so a run whose SFT config matches starts RL at once, and
# every run from it starts from the same weights whatever CPU it runs on.
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "bases")


def shipped_dir(fingerprint: dict) -> str | None:
    """The base shipped for this SFT config, or None."""
    d = os.path.join(SHIPPED, sft_key(fingerprint))
    return d if os.path.isfile(os.path.join(d, "sft_config.json")) else None


def _is_shipped(path: str) -> bool:
    return os.path.abspath(path).startswith(SHIPPED + os.sep)


def _where(config, workdir: str, tokenizer, shipped: bool = True):
    """(`base_dir`, the fingerprint of its cache entry or None, and which it is: "named"
    (sft.base_dir), "workdir", "shipped" or "cache")."""
    if config.sft.get("base_dir", ""):
        path = config.sft.base_dir
        return path, None, "shipped" if _is_shipped(path) else "named"
    own = os.path.join(workdir, "base")
    if os.path.isdir(own) or tokenizer is None:
        return own, None, "workdir"
    fingerprint = sft_fingerprint(config, tokenizer)
    if shipped and (found := shipped_dir(fingerprint)) is not None:
        return found, None, "shipped"
    if jax.process_count() > 1 and not os.environ.get("ADA_JAX_CACHE"):
        return own, None, "workdir"
    return os.path.join(cache_dir(), "bases", sft_key(fingerprint)), fingerprint, "cache"


def check_base_dir(config, workdir: str) -> None:
    """Refuse, before any work, a place for the base that SFT could not use: sft.base_dir or
    $ADA_JAX_CACHE a file (or under one), or not writable where SFT writes: the lock beside
    sft.base_dir and, while it holds no base yet, the folder itself; the cache's folder (each
    base and its lock go there). Nothing to check when no SFT runs (init_from, sft.steps 0) or
    the workdir holds its own base."""
    if config.model.init_from or not config.sft.steps or _is_shipped(config.sft.base_dir):
        return
    if config.sft.get("base_dir", ""):
        what, path = f"config.sft.base_dir={config.sft.base_dir!r}", config.sft.base_dir
        trained = os.path.isdir(path) and any(n.isdigit() for n in os.listdir(path))
        writes = [os.path.dirname(os.path.abspath(path))] + ([] if trained else [path])
    elif os.path.isdir(os.path.join(workdir, "base")) or (
            jax.process_count() > 1 and not os.environ.get("ADA_JAX_CACHE")):
        return  # the workdir's own base (base_dir)
    else:
        env = os.environ.get("ADA_JAX_CACHE")
        what = f"$ADA_JAX_CACHE={env!r} (the cache of SFT bases)" if env else (
            f"the cache of SFT bases {cache_dir()} (set $ADA_JAX_CACHE to move it)")
        path = cache_dir()
        writes = [path]
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise NotADirectoryError(f"{what}: {existing} is a file, not a directory: name a "
                                 f"directory")
    for d in writes:
        d = os.path.abspath(d)
        while not os.path.exists(d):
            d = os.path.dirname(d)
        if not os.access(d, os.W_OK | os.X_OK):
            raise PermissionError(f"{what}: {d} is not writable (permissions or a read-only "
                                  f"filesystem), and SFT writes its base and a lock there: "
                                  f"make it writable or name another directory")


def _exclusive(path):
    """Hold `<path>.lock`, waiting for another run that holds it (rundir.hold); one process
    only: the processes of one multi-process job each run SFT's collectives, so none may wait
    for another (None: no lock)."""
    if path is None or jax.process_count() > 1:
        return contextlib.nullcontext()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return rundir.hold(f"{path}.lock", wait=True, what=f"the SFT base {path}")


def environment() -> dict:
    """What a base depends on besides its SFT config: XLA compiles for the host, so the same
    SFT (code, config, JAX) on another CPU rounds differently, and 1,200 steps turn that into
    another base (docs/results.md, "What we tried": one SFT config, two CPUs, two bases)."""
    return {"jax": jax.__version__, "jaxlib": importlib.metadata.version("jaxlib"),
            "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
            "cpu": host_cpu()}


def report(config, graphdef, params, tokenizer, k: int = 16) -> dict:
    """Pass-rate spread of the base policy on the eval split at the sampling temperature, and
    the environment it was made in (`environment`)."""
    source = load_split(config, "eval")
    problems = [source[i] for i in range(min(config.eval.prompts, len(source)))]
    cfg = config.copy_and_resolve_references()
    with cfg.unlocked():
        cfg.sampling.eval_temperature = config.sampling.temperature
    out = evaluate.evaluate(graphdef, params, tokenizer, problems, cfg,
                            jax.random.key(config.seed + 7), k)
    return out | {"k": k, "prompts": len(problems), "environment": environment()}


def write_report(report: dict, out_dir: str) -> None:
    """`report`'s dict as `<out_dir>/pass_rates.json`."""
    with open(os.path.join(out_dir, "pass_rates.json"), "w") as f:
        json.dump(report, f, indent=1)
