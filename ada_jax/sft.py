"""Supervised warm start: the base policy RL starts from.

Trains the model on (prompt, reference solution, EOS) pairs of the train split, loss on the
solution tokens only, and saves it with orbax in the base directory (`base_dir`):
config.sft.base_dir when set; else `<workdir>/base` when a run made before the cache has one;
else the cache, `$ADA_JAX_CACHE/bases/<key>` (default `~/.cache/ada_jax`; on several
processes only when $ADA_JAX_CACHE is set), where `key` hashes what the base depends on
(`sft_fingerprint`: model, SFT task and its training problems, sft.*, sequence lengths,
template, tokenizer, seed). So every workdir with the same SFT config reuses one base (the
log names it), and a changed SFT field trains a new one. `load_base` reuses the base when it
exists; runs that want the same one at once train it one at a time.
For pretrained models (config.model.init_from) it imports the Hugging Face checkpoint instead.

SFT checkpoints its progress like RL (params, optimizer, data position and target RNG every
sft.checkpoint_every steps, default a tenth of the run, in `<base dir>/progress`), so a killed
SFT resumes where it stopped, bitwise equal to an uninterrupted one; the progress goes once
the base is saved.
"""
import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ada_jax import evaluate, rundir, sharding
from ada_jax import model as model_lib
from ada_jax.checkpoint import CheckpointMismatch, Checkpointer, abstract_like
from ada_jax.tasks import PromptIterator, families, is_embedded, load_split
from ada_jax.tasks.embedded import hasty_solution
from ada_jax.tokenizer import encode_prompt

log = logging.getLogger(__name__)


_SFT_VERSION = 1  # part of the cache key: bump when this module changes what a config trains
_NOT_SFT = {"sft": ("base_dir", "checkpoint_every"),  # fields SFT's result does not depend on
            "task": ("reward", "verifier_workers", "verifier_timeout")}


def cache_dir() -> str:
    """$ADA_JAX_CACHE, else ~/.cache/ada_jax."""
    return os.environ.get("ADA_JAX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "ada_jax")


def sft_fingerprint(config, tokenizer) -> dict:
    """What the SFT base depends on, as JSON: model, the SFT task's config (task name, family
    set, seeds, levels, files...) and a hash of its training problems (so a change in a task
    generator is seen too), sft.*, the sequence lengths, template, tokenizer (its model bytes
    and special ids) and seed. RL fields (algo, rl.*, adaptive.*) are not in it."""
    task = sft_task(config)
    fields = {"model": config.model.to_dict(), "task": task.task.to_dict(),
              "sft": config.sft.to_dict()}
    for section, names in _NOT_SFT.items():
        for name in names:
            fields[section].pop(name, None)
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
    return dict(version=_SFT_VERSION, seed=config.seed, **fields,
                sampling={k: config.sampling[k] for k in ("max_prompt_len", "max_new_tokens")},
                train_problems=[len(source), h.hexdigest()], tokenizer=tok)


def sft_key(fingerprint: dict) -> str:
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_dir(config, workdir: str, tokenizer=None) -> str:
    """Where the base policy lives (module doc): sft.base_dir, else an existing
    `<workdir>/base`, else the cache entry of this SFT config (needs the tokenizer). On
    several processes the cache is used only when $ADA_JAX_CACHE names one (every process
    must see the same files, and ~/.cache is per host on a TPU pod): else `<workdir>/base`."""
    if config.sft.get("base_dir", ""):
        return config.sft.base_dir
    own = os.path.join(workdir, "base")
    if (os.path.isdir(own) or tokenizer is None
            or (jax.process_count() > 1 and not os.environ.get("ADA_JAX_CACHE"))):
        return own
    return os.path.join(cache_dir(), "bases", sft_key(sft_fingerprint(config, tokenizer)))


def check_base_dir(config, workdir: str) -> None:
    """Refuse, before any work, a place for the base that SFT could not use: sft.base_dir or
    $ADA_JAX_CACHE a file (or under one), or not writable where SFT writes: the lock beside
    sft.base_dir and, while it holds no base yet, the folder itself; the cache's folder (each
    base and its lock go there). Nothing to check when no SFT runs (init_from, sft.steps 0) or
    the workdir holds its own base."""
    if config.model.init_from or not config.sft.steps:
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


def init_params(config, mesh, seed: int):
    cfg = model_lib.ModelConfig.from_config(config.model)
    return sharding.init_sharded(lambda: model_lib.Transformer(cfg, nnx.Rngs(seed)), mesh,
                                 config.sharding_rules)


def sft_rows(tokenizer, problems, template: str, length: int, bucket: int = 32, targets=None):
    """Tokens [B, L] (prompt then target then EOS, left-aligned), input mask and the loss mask
    over the target tokens; L is the batch's longest row rounded up to `bucket` (capped at
    `length`), so few shapes compile and short batches cost less. The targets are the
    problems' solutions unless `targets` (one text per problem) says otherwise."""
    rows = []
    for b, p in enumerate(problems):
        prompt = encode_prompt(tokenizer, p.question, template)
        target = p.solution if targets is None else targets[b]
        rows.append((prompt, tokenizer.encode(target) + [tokenizer.eos_id]))
    longest = max(len(a) + len(b) for a, b in rows)
    length = min(length, -(-longest // bucket) * bucket)
    toks = np.full((len(problems), length), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(problems), length), bool)
    loss = np.zeros((len(problems), length), bool)
    for i, (prompt, answer) in enumerate(rows):
        seq = (prompt + answer)[:length]
        toks[i, :len(seq)] = seq
        mask[i, :len(seq)] = True
        loss[i, len(prompt):len(seq)] = True
    return toks, mask, loss


def sft_targets(config, problems, rng: np.random.Generator):
    """The SFT targets of a batch, or None for the problems' solutions: the embedded task mixes
    the worked solution (share sft.careful_share) with the one-shot `\\boxed{answer}`; the
    family task writes each family's right reading with its share c_k, else the other."""
    if is_embedded(config):
        careful = rng.random(len(problems)) < config.sft.careful_share
        return [p.solution if c else hasty_solution(p) for p, c in zip(problems, careful)]
    if config.task.name == "families":
        return [families.sft_target(p, u) for p, u in zip(problems, rng.random(len(problems)))]
    return None


def sft_task(config):
    """The config whose train split SFT reads: the embedded task's levels up to
    sft.max_level only. Levels above it stay in RL and eval as problems the base was never
    shown: training on their unlearnable targets would drown the one-digit facts the
    careful style needs (docs/results.md)."""
    t = config.task
    if t.name == "families":  # SFT teaches every family, the transfer controls too
        cfg = config.copy_and_resolve_references()
        with cfg.unlocked():
            cfg.task.family_set = "every"
        return cfg
    if not is_embedded(config) or not config.sft.max_level:
        return config
    cfg = config.copy_and_resolve_references()
    with cfg.unlocked():
        cfg.task.max_level = max(min(t.max_level, config.sft.max_level), t.min_level)
    return cfg


class Replay:
    """The base's SFT corpus replayed inside RL updates (loss.replay_coef > 0): a next-token
    loss on SFT rows (sft_task's train split, sft_targets' targets), every target token but
    the first loss.replay_skip ones: the field's pretraining mix (InstructGPT's PPO-ptx)
    against what RL's updates wear away in shared weights. Skipping the first tokens keeps
    the corpus's choices out of it (the family task's reading marker, whose SFT share c_k RL
    is meant to move): replay trains how a response is written, not which one is chosen. On
    the family task it holds the lines every family writes, the transfer controls' too
    (docs/results.md, "Without replay: line-collapse episodes"). Deterministic from the seed; `state()` goes
    into checkpoints."""

    def __init__(self, config, tokenizer):
        self.config, self.tokenizer = config, tokenizer
        self.length = config.sampling.max_prompt_len + config.sampling.max_new_tokens
        self.iterator = PromptIterator(load_split(sft_task(config), "train"),
                                       config.loss.replay_rows, seed=config.seed + 3)
        self.target_rng = np.random.default_rng(config.seed + 4)

    def rows(self, updates: int) -> dict:
        """`updates` batches of loss.replay_rows rows, stacked: tokens, mask and loss_mask
        [updates, rows, L] (L: the longest row rounded up to 32, one length for all)."""
        problems = [p for _ in range(updates) for p in next(self.iterator)]
        toks, mask, loss = sft_rows(self.tokenizer, problems, self.config.task.template,
                                    self.length, targets=sft_targets(self.config, problems,
                                                                     self.target_rng))
        loss &= np.cumsum(loss, axis=1) > self.config.loss.replay_skip
        shape = (updates, self.config.loss.replay_rows, -1)
        return {"tokens": toks.reshape(shape), "mask": mask.reshape(shape),
                "loss_mask": loss.reshape(shape)}

    def state(self) -> dict:
        return {"iterator": self.iterator.state(),
                "target_rng": self.target_rng.bit_generator.state}

    def restore(self, state: dict) -> None:
        self.iterator.restore(state["iterator"])
        self.target_rng.bit_generator.state = state["target_rng"]


def sequence_nll(model, toks, mask, loss_mask):
    """Mean next-token log-loss of the loss_mask tokens (float32): SFT's loss and replay's."""
    logits, _ = model(toks, model_lib.positions_from_mask(mask), mask)
    logp, _ = model_lib.token_logprobs(logits[:, :-1], toks[:, 1:])
    m = loss_mask[:, 1:]
    return -jnp.sum(logp * m) / jnp.maximum(jnp.sum(m), 1)


def train_base(config, out_dir: str, mesh, tokenizer, init=None):
    """Run SFT (resuming its progress checkpoint in `<out_dir>/progress` if there is one) and
    save the base checkpoint; returns (graphdef, params). `init`: the (graphdef, params) of
    init_params(config, mesh, config.seed) when the caller has them (donated)."""
    from tqdm.auto import tqdm
    s = config.sft
    graphdef, params = init or init_params(config, mesh, config.seed)
    rules = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in config.sharding_rules)
    opt, step = _sft_step(graphdef, s.steps, s.lr, s.warmup_steps, mesh, rules)
    opt_state = sharding.place_on_mesh(opt.init(params), mesh)  # one layout: restorable
    length = config.sampling.max_prompt_len + config.sampling.max_new_tokens
    it = PromptIterator(load_split(sft_task(config), "train"), s.batch_size, seed=config.seed + 1)
    target_rng = np.random.default_rng(config.seed + 2)
    every = s.get("checkpoint_every", 0) or max(1, s.steps // 10)
    progress_dir = os.path.join(out_dir, "progress")
    progress = Checkpointer(progress_dir, keep=1)
    progress.remove_partial()  # of a save cut short (the caller holds the base's lock)
    start = _restore_progress(progress, params, opt_state, config)
    if start is not None:
        start, params, opt_state, meta = start
        it.restore(meta["iterator"])
        target_rng.bit_generator.state = meta["target_rng"]
        log.info("SFT resumed at step %d of %d from %s", start, s.steps, progress_dir)
    start = start or 0
    bar = tqdm(range(start, s.steps), desc="sft", disable=not config.log.progress,
               dynamic_ncols=True, initial=start, total=s.steps)
    with sharding.activate(mesh, config.sharding_rules):
        for i in bar:
            problems = next(it)
            toks, mask, loss_mask = sft_rows(tokenizer, problems, config.task.template, length,
                                             targets=sft_targets(config, problems, target_rng))
            params, opt_state, loss = step(params, opt_state, toks, mask, loss_mask)
            if i % 10 == 0 or i == s.steps - 1:  # a host sync: every 10 steps, not each
                bar.set_postfix(loss=f"{float(loss):.3f}")
            if (i + 1) % every == 0 and i + 1 < s.steps:
                progress.save(i + 1, {"params": params, "opt": opt_state},
                              {"step": i + 1, "sft_steps": s.steps, "iterator": it.state(),
                               "target_rng": target_rng.bit_generator.state})
    progress.close()
    ckpt = Checkpointer(out_dir, keep=1)
    ckpt.save(s.steps, {"params": params}, {"sft_steps": s.steps})
    ckpt.close()
    if jax.process_index() == 0:
        shutil.rmtree(progress_dir, ignore_errors=True)
    return graphdef, params


@functools.lru_cache(maxsize=4)  # one compile per SFT setting in a process (tests, notebooks)
def _sft_step(graphdef, steps: int, lr: float, warmup_steps: int, mesh, rules):
    """(optimizer, jitted step(params, opt_state, toks, mask, loss_mask) -> (params,
    opt_state, loss)): AdamW on the mean log-loss of the target tokens, warmup then cosine.
    The mesh and sharding rules only key the cache (the step is traced under them)."""
    del mesh, rules
    warmup = min(warmup_steps, steps // 2)
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1),
                                               lr * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, toks, mask, loss_mask):
        def loss_fn(p):
            return sequence_nll(nnx.merge(graphdef, p), toks, mask, loss_mask)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return opt, step


def _restore_progress(progress: Checkpointer, params, opt_state, config):
    """(step, params, opt_state, meta) of the newest readable SFT progress checkpoint of this
    run's length, or None (none, unreadable, or saved by another SFT config: started over)."""
    try:
        found = progress.restore_latest(abstract_like({"params": params, "opt": opt_state}),
                                        start_over=True)
    except CheckpointMismatch as e:
        log.warning("SFT progress in %s is another config's (%s): starting over",
                    progress.directory, e)
        return None
    if found is None or found[2].get("sft_steps") != config.sft.steps:
        return None
    step, arrays, meta = found
    return step, arrays["params"], arrays["opt"], meta


def load_base(config, workdir: str, mesh, tokenizer):
    """The base policy: HF import, cached SFT checkpoint, or a fresh SFT run."""
    if config.model.init_from:
        return _load_hf(config, mesh)
    graphdef, params = init_params(config, mesh, config.seed)
    if config.sft.steps == 0:  # no warm start: RL from the random init (tests, benchmarks)
        return graphdef, params
    out_dir = base_dir(config, workdir, tokenizer)
    cached = out_dir.startswith(os.path.join(cache_dir(), "bases") + os.sep)
    where = f"{out_dir} (the cached base of this SFT config)" if cached else out_dir
    # The cache or sft.base_dir may be wanted by another run at the same time: one trains,
    # the others wait and load its base.
    with _exclusive(out_dir if out_dir != os.path.join(workdir, "base") else None):
        if os.path.isdir(out_dir):
            restored = Checkpointer(out_dir, keep=1).restore_latest(
                abstract_like({"params": params}))
            if restored is not None:
                log.info("base policy from %s", where)
                return graphdef, restored[1]["params"]
        log.info("no base checkpoint in %s: running SFT (%d steps)", where, config.sft.steps)
        if cached and jax.process_index() == 0:  # what the key stands for, for a reader
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "sft_config.json"), "w") as f:
                json.dump(sft_fingerprint(config, tokenizer), f, indent=1, sort_keys=True,
                          default=str)
        return train_base(config, out_dir, mesh, tokenizer, init=(graphdef, params))


def _exclusive(path):
    """Hold `<path>.lock`, waiting for another run that holds it (rundir.hold); one process
    only: the processes of one multi-process job each run SFT's collectives, so none may wait
    for another (None: no lock)."""
    if path is None or jax.process_count() > 1:
        return contextlib.nullcontext()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return rundir.hold(f"{path}.lock", wait=True, what=f"the SFT base {path}")


def _load_hf(config, mesh):
    """Import config.model.init_from (a Hugging Face folder) with config.model's param dtype,
    compute dtype, remat, scan_layers and max_len, after checking its config.json describes config.model."""
    from ada_jax import convert
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
    log.info("base policy from %s", m.init_from)
    return graphdef, params


def environment() -> dict:
    """What a base depends on besides its SFT config: XLA compiles for the host, so the same
    SFT (code, config, JAX) on another CPU rounds differently, and 1,200 steps turn that into
    another base (docs/results.md, "What we tried": one SFT config, two CPUs, two bases)."""
    import importlib.metadata

    from ada_jax import host_cpu
    return {"jax": jax.__version__, "jaxlib": importlib.metadata.version("jaxlib"),
            "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
            "cpu": host_cpu()}


def base_report(config, graphdef, params, tokenizer, k: int = 16) -> dict:
    """Pass-rate spread of the base policy on the eval split at the sampling temperature, and
    the environment it was made in (`environment`)."""
    source = load_split(config, "eval")
    problems = [source[i] for i in range(min(config.eval.prompts, len(source)))]
    cfg = config.copy_and_resolve_references()
    with cfg.unlocked():
        cfg.sampling.eval_temperature = config.sampling.temperature
    report = evaluate.evaluate(graphdef, params, tokenizer, problems, cfg,
                               jax.random.key(config.seed + 7), k)
    report["k"] = k
    report["prompts"] = len(problems)
    report["environment"] = environment()
    return report


def write_report(report: dict, out_dir: str) -> None:
    with open(os.path.join(out_dir, "pass_rates.json"), "w") as f:
        json.dump(report, f, indent=1)
