"""The config of anything run on an existing workdir: the run's saved config.json, with the
command line's `--config.x.y=…` overrides on top.

  python scripts/train.py --workdir=W --config.rl.steps=200   # resume W, now to step 200
  python scripts/evaluate.py --workdir=W --k=16               # W's algo, model, task, sizes

Like the checkpoint, config.json is the run: retyping the original flags is not needed. An
explicit `--config=file.py:args` whose variant args (algo, model, task, smoke) are the run's
changes nothing either; one naming other variants is taken as given (train.py's resume guard
then names what differs; evaluate.py warns). Fields the resume guard refuses to change
(config_check.RESUMABLE lists those that may) stay refused when given as overrides.
"""
import json
import logging
import os
import re

from ada_jax import rundir
from ada_jax.config_check import nest_flat
from ada_jax.config_doc import leaves

log = logging.getLogger(__name__)

VARIANTS = ("algo", "model.name", "task.name", "smoke")  # get_config's key=value args


def override_fields(argv) -> list[str]:
    """The dotted fields set by `--config.x.y=v` / `--config.x.y v` in argv, in order."""
    return [m.group(1) for a in argv[1:] if (m := re.match(r"--config\.([\w.]+)", a))]


def explicit_spec(argv) -> str | None:
    """The `--config=file.py:args` (or `--config file.py:args`) of argv, else None."""
    for i, a in enumerate(argv[1:], 1):
        if a.startswith("--config="):
            return a.split("=", 1)[1]
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _get(config, dotted: str):
    for part in dotted.split("."):
        config = config[part]
    return config


def _set(config, dotted: str, value) -> None:
    *path, name = dotted.split(".")
    for part in path:
        config = config[part]
    config[name] = value


def _like(default, value):
    """A JSON value in the container types of the config's default (tuples stay tuples)."""
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(_like(default[0] if default else None, v) for v in value)
    if isinstance(default, list) and isinstance(value, list):
        return [_like(default[0] if default else None, v) for v in value]
    return value


def read_saved(path: str) -> dict:
    """A workdir's config.json as a dict, an older run's flat policy settings moved into their
    groups (config_check.nest_flat); ValueError naming the file when it is unreadable or not a
    JSON object (a list, a number: not a config)."""
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is unreadable ({e}): repair it or start a new workdir") from e
    if not isinstance(saved, dict):
        raise ValueError(f"{path} holds a JSON {type(saved).__name__}, not a run's config (an "
                         f"object of fields): repair or remove it, or pass another --workdir")
    return nest_flat(saved)


def for_workdir(config, argv, workdir: str):
    """The config to run on `workdir`: `config` (as the command line built it: file, variant
    args, overrides) when the workdir has no config.json or the command line names other
    variants; else the saved config.json with the overrides of argv on top. Returns a new
    config; `config` is left alone."""
    rundir.check_named(workdir)
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return config
    saved = read_saved(path)
    ran = {k: dict(leaves(saved)).get(k) for k in VARIANTS}
    given = {k: _get(config, k) for k in VARIANTS}
    if explicit_spec(argv) is not None and ran != given:
        log.warning("--config=%s names other variants than the run in %s (%s); using it, not "
                    "the saved config", explicit_spec(argv), workdir,
                    ", ".join(f"{k}: {ran[k]!r} -> {given[k]!r}" for k in VARIANTS
                              if ran[k] != given[k]))
        return config
    out = config.copy_and_resolve_references()
    overrides = override_fields(argv)
    unknown = []
    for dotted, value in leaves(saved):
        if dotted in overrides:  # set below, from the command line
            continue
        try:
            default = _get(out, dotted)
        except (KeyError, AttributeError):
            unknown.append(f"config.{dotted}")
            continue
        if dotted.startswith("sharding_rules"):
            value = [tuple(_like((), r) if isinstance(r, list) else r for r in rule)
                     for rule in value]
        try:
            _set(out, dotted, _like(default, value))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: config.{dotted}={value!r} does not fit the field's type "
                             f"{type(default).__name__} ({e}): repair the file, override the "
                             f"field with --config.{dotted}=…, or start a new --workdir"
                             ) from None
    for dotted in overrides:
        _set(out, dotted, _get(config, dotted))
    if unknown:
        log.warning("%s: fields this code does not have (another version?), ignored: %s", path,
                    ", ".join(unknown))
    log.info("config: %s%s", path, f" with {', '.join('--config.' + f for f in overrides)} on "
             f"top" if overrides else "")
    return out
