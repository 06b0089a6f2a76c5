"""Device mesh, logical-axis rules and sharded model init.

Params and activations are annotated with logical axis names ("batch", "embed", "heads", …);
the config's `sharding_rules` map each name to mesh axes ("data", "fsdp", "tensor"). A dimension
that a mesh axis does not divide, or a mesh axis already used by another dimension of the same
array, falls back to replication, so one rule set serves the tiny model on 8 fake CPUs and a 7B
model on a pod.

Multi-host (one process per host or per GPU, `jax.distributed`): each process reads only its
rows of a step's prompt batch (`process_rows`) and contributes them to the global array
(`global_batch`); host-side work over [S, …] slot arrays runs per process on the rows its own
devices hold (`host_rows`); small results every process needs are replicated on device
(`readable`, `to_host`) or gathered (`allgather_json`). Each of these cross-process moves is
one jitted program, dispatched once its inputs are computed and finished before it returns
(`_relaid`), so none is left in flight beside the step's programs (docs/scaling.md §5f).
"""
import contextlib
import functools
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

log = logging.getLogger(__name__)

AXES = ("data", "fsdp", "tensor")
Rules = Sequence[tuple[str, Any]]
_ACTIVE: list[tuple[Mesh, Rules]] = []


def maybe_initialize_distributed(dist_config) -> None:
    """Multi-host entry: call jax.distributed.initialize when the config asks for it (once per
    process: a second call, e.g. a second run in one process, does nothing). Without a
    coordinator address JAX detects the cluster itself (SLURM, TPU pods, Open MPI, k8s)."""
    if not dist_config.enabled or jax.distributed.is_initialized():
        return
    kwargs = {}
    if dist_config.coordinator_address:
        kwargs = dict(coordinator_address=dist_config.coordinator_address,
                      num_processes=dist_config.num_processes,
                      process_id=dist_config.process_id)
    for field, arg in _TIMEOUTS.items():  # a field left out: JAX's default
        if field in dist_config:
            seconds = dist_config[field]
            if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
                raise ValueError(f"config.distributed.{field}={seconds!r}: must be a positive "
                                 f"integer (seconds)")
            kwargs[arg] = seconds
    try:
        jax.distributed.initialize(**kwargs)  # no address: auto-detect on TPU pods / SLURM
    except ValueError as e:
        if dist_config.coordinator_address or "coordinator" not in str(e):
            raise
        raise ValueError(
            "config.distributed.enabled=True but no cluster was detected (SLURM, Open MPI, a "
            "TPU pod, Kubernetes) and config.distributed.coordinator_address is empty: launch "
            "under srun or scripts/launch_local.sh, set coordinator_address, num_processes and "
            f"process_id, or leave distributed.enabled False (JAX: {e})") from None
    if jax.process_count() > 1:
        sys.excepthook = exit_at_once
    log.info("jax.distributed: process %d of %d, %d local / %d global devices",
                 jax.process_index(), jax.process_count(), jax.local_device_count(),
                 jax.device_count())


# config.distributed field -> jax.distributed.initialize argument
_TIMEOUTS = {"initialization_timeout_s": "initialization_timeout",
             "heartbeat_timeout_s": "heartbeat_timeout_seconds",
             "shutdown_timeout_s": "shutdown_timeout_seconds"}
# How a collective fails when a peer process has gone (gloo on CPU; NCCL, ICI elsewhere)
_PEER_GONE = ("gloo", "nccl", "connection", "socket", "broken pipe", "unavailable")


def exit_at_once(*exc_info) -> None:
    """sys.excepthook of a run (scripts/train.py; maybe_initialize_distributed on several
    processes): print the uncaught exception, end with one line saying what it means, and exit
    1 now. A normal exit would print unrelated noise after the error (on a full disk, dozens of
    orbax's unfinished writes: 'Exception ignored … Python is likely shutting down'), and on
    several processes wait (minutes) at JAX's shutdown barrier for peers that wait on this
    process; exiting lets the launcher (srun, launch_local.sh) stop the others, and a peer
    blocked in a collective with this process fails at once (its connection closes)."""
    sys.__excepthook__(*exc_info)
    text = str(exc_info[1])
    if isinstance(exc_info[1], jax.errors.JaxRuntimeError) and any(
            w in text.lower() for w in _PEER_GONE):
        why = ("a collective with the other processes failed, most likely because another "
               "process died (see its log). Run the same command again to resume from the last "
               "checkpoint.")
    else:
        why = exc_info[0].__name__ + (f": {text.splitlines()[0]}" if text else "")
    who = (f"process {jax.process_index()} of {jax.process_count()} stops, and with it the job"
           if jax.process_count() > 1 else "the run stops")
    _last_words(f"ada_jax: {who}: {why}")
    os._exit(1)


def _last_words(line: str) -> None:
    """Write `line` as stderr's last line, whole. Other threads (orbax's unfinished writes)
    print tracebacks while the process dies; from here on their output goes to /dev/null, and
    the line starts on a fresh line in case one of them stopped mid-line."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stream (pytest's capsys)
        print(line, file=sys.stderr)
        return
    keep = os.dup(fd)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    # A write another thread started before the dup2 may still be in flight (preempted, or
    # blocked on a full pipe, under load) and would land after the line: give such writes a
    # moment to finish first.
    time.sleep(0.2)
    os.write(keep, f"\n{line}\n".encode())


def make_mesh(mesh_config, devices=None) -> Mesh:
    """Mesh with axes (data, fsdp, tensor); one axis may be -1 = all remaining devices."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = [int(mesh_config[a]) for a in AXES]
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if len(devices) % known:
            raise ValueError(f"config.mesh {dict(zip(AXES, sizes))}: {len(devices)} devices "
                             f"are not divisible by {known}")
        sizes[sizes.index(-1)] = len(devices) // known
    if int(np.prod(sizes)) != len(devices):
        raise ValueError(f"config.mesh {dict(zip(AXES, sizes))} needs {int(np.prod(sizes))} "
                         f"devices, have {len(devices)}")
    return Mesh(np.asarray(devices).reshape(sizes), AXES)


def logical_spec(shape, logical_axes, rules: Rules, mesh: Mesh) -> PartitionSpec:
    """PartitionSpec for an array with the given logical axis names."""
    table = dict(rules)
    used: set[str] = set()
    spec = []
    for dim, name in zip(shape, logical_axes):
        mesh_axes = table.get(name) if name is not None else None
        if mesh_axes is None:
            spec.append(None)
            continue
        mesh_axes = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes)
        keep = []
        for ax in mesh_axes:
            size = int(np.prod([mesh.shape[a] for a in keep + [ax]]))
            if ax not in used and mesh.shape[ax] > 1 and dim % size == 0:
                keep.append(ax)
        used.update(keep)
        spec.append(None if not keep else keep[0] if len(keep) == 1 else tuple(keep))
    return PartitionSpec(*spec)


@contextlib.contextmanager
def activate(mesh: Mesh, rules: Rules):
    """Within this context (at trace time) `constrain` places activations on the mesh."""
    _ACTIVE.append((mesh, rules))
    try:
        yield
    finally:
        _ACTIVE.pop()


def constrain(x, logical_axes):
    """Sharding constraint by logical names; a no-op outside `activate`."""
    if not _ACTIVE:
        return x
    mesh, rules = _ACTIVE[-1]
    spec = logical_spec(x.shape, logical_axes, rules, mesh)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def _is_var(x):
    return isinstance(x, nnx.Variable)


def state_shardings(state, mesh: Mesh, rules: Rules):
    """NamedSharding per Variable of an NNX state (abstract or concrete), from its metadata."""
    def one(var):
        axes = var.get_metadata().get("logical_axes")
        shape = getattr(var.get_value(), "shape", ())
        if axes is None:
            return NamedSharding(mesh, PartitionSpec())
        return NamedSharding(mesh, logical_spec(shape, axes, rules, mesh))
    return jax.tree.map(one, state, is_leaf=_is_var)


def batch_sharding(mesh: Mesh, rules: Rules, shape) -> NamedSharding:
    """Sharding for a [B, …] batch array: B over the 'batch' rule, the rest replicated."""
    axes = ("batch",) + (None,) * (len(shape) - 1)
    return NamedSharding(mesh, logical_spec(shape, axes, rules, mesh))


def init_sharded(make_module, mesh: Mesh, rules: Rules):
    """Create an NNX module directly in its sharding: (graphdef, state), no full host copy.

    make_module() builds the module (e.g. `lambda: Transformer(cfg, nnx.Rngs(seed))`); it runs
    abstractly first to read shapes and logical axes, then inside one jit whose outputs are
    laid out on the mesh.
    """
    graphdef, abstract_state = nnx.split(nnx.eval_shape(make_module))
    shardings = state_shardings(abstract_state, mesh, rules)
    state = jax.jit(lambda: nnx.state(make_module()), out_shardings=shardings)()
    return graphdef, state


def place_on_mesh(tree, mesh: Mesh):
    """Replicate every leaf not already laid out on `mesh` (optimizer counters, small extra
    params), so one jit sees a single device set and restores keep that layout."""
    def one(x):
        if isinstance(getattr(x, "sharding", None), NamedSharding) and x.sharding.mesh == mesh:
            return x
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec()))
    return jax.tree.map(one, tree)


# ----------------------------------------------------------------------------- multi-host
def process_rows(mesh: Mesh, rules: Rules, batch_size: int) -> tuple[int, int]:
    """[start, stop): the rows of a global [batch_size, …] batch that this process's devices
    hold under the 'batch' rule, i.e. the rows per-host data reads: process p holds block p
    of batch_size / process_count rows. Else (a batch the mesh cannot split over the
    processes is replicated instead) ValueError."""
    n, shape = jax.process_count(), (batch_size,)
    held: dict[int, set] = {}
    for device, index in batch_sharding(mesh, rules, shape).devices_indices_map(shape).items():
        held.setdefault(device.process_index, set()).update(range(*index[0].indices(batch_size)))
    size = batch_size // n
    if batch_size % n or any(held.get(p) != set(range(p * size, (p + 1) * size))
                             for p in range(n)):
        axes = dict(rules).get("batch") or ()
        axes = (axes,) if isinstance(axes, str) else axes
        devices = int(np.prod([mesh.shape[a] for a in axes]))
        raise ValueError(
            f"a batch of {batch_size} rows does not split into one block per process along "
            f"the mesh's batch axes {tuple(axes)} ({devices} devices of mesh "
            f"{dict(mesh.shape)}, {n} processes): use a multiple of {max(devices, n)}")
    p = jax.process_index()
    return p * size, (p + 1) * size


def global_batch(mesh: Mesh, rules: Rules, local) -> jax.Array:
    """The global [process_count · b, …] batch from this process's b rows (`process_rows`),
    laid out by the 'batch' rule (jax.make_array_from_process_local_data); on one process
    `local` itself, unchanged."""
    if jax.process_count() == 1:
        return local
    local = np.asarray(local)
    shape = (local.shape[0] * jax.process_count(),) + local.shape[1:]
    return jax.make_array_from_process_local_data(batch_sharding(mesh, rules, shape), local,
                                                  shape)


@functools.lru_cache(maxsize=None)
def _relayout(shardings):
    """A jitted identity whose outputs have these shardings: one program moves many arrays."""
    return jax.jit(lambda xs: xs, out_shardings=shardings)


def _relaid(arrays: list, shardings: list) -> list:
    """The arrays in the given shardings, moved by one program: dispatched once the arrays are
    computed, and waited for. On CPU, a gloo all-gather once hung among a dozen eager collective
    programs in flight; these moves never leave one in flight."""
    jax.block_until_ready(arrays)
    return list(jax.block_until_ready(_relayout(tuple(shardings))(tuple(arrays))))


def readable(tree):
    """tree (a pytree of arrays) with every array that every process can read with
    np.asarray left as is, and each other one (spanning devices of other processes without
    being replicated) replaced by a replicated copy: an all-gather on device, meant for small
    arrays such as per-prompt counters."""
    leaves, treedef = jax.tree.flatten(tree)
    spread = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array)
              and not (x.is_fully_addressable or x.is_fully_replicated)]
    if spread:
        copies = _relaid([leaves[i] for i in spread],
                         [NamedSharding(leaves[i].sharding.mesh, PartitionSpec())
                          for i in spread])
        for i, copy in zip(spread, copies):
            leaves[i] = copy
    return jax.tree.unflatten(treedef, leaves)


def to_host(x) -> np.ndarray:
    """A global array as numpy on every process (a replicated copy, `readable`, where it
    spans hosts)."""
    return np.asarray(readable(x))


@functools.lru_cache(maxsize=None)
def _processes_mesh() -> Mesh:
    """Every device, one mesh row per process (in process order)."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return Mesh(np.asarray(devices).reshape(jax.process_count(), -1), ("process", "local"))


def _gathered(local: np.ndarray) -> np.ndarray:
    """[process_count, …]: every process's `local` (the same shape on each), stacked in
    process order by one all-gather program (`readable`)."""
    n = jax.process_count()
    rows = jax.make_array_from_process_local_data(
        NamedSharding(_processes_mesh(), PartitionSpec("process")), local[None],
        (n,) + local.shape)
    return np.asarray(readable(rows))


def allgather_json(obj) -> list:
    """[obj of process 0, obj of process 1, …] for a JSON-serialisable obj ([obj] on one
    process): two small all-gathers, the lengths and the UTF-8 bytes (padded to a power of two,
    so a handful of program shapes serve every call)."""
    if jax.process_count() == 1:
        return [obj]
    data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = _gathered(np.int32([data.size]))[:, 0]
    buf = np.zeros(1 << int(sizes.max()).bit_length(), np.uint8)
    buf[:data.size] = data
    return [json.loads(bytes(row[:k]).decode()) for row, k in zip(_gathered(buf), sizes)]


def host_rows(fn: Callable[..., np.ndarray], *arrays: jax.Array) -> jax.Array:
    """fn(*rows) -> float32 [n], run on the host over the rows of [S, …] arrays, returned as
    one [S] device array. On several processes each process runs fn only on the rows its own
    devices hold (the arrays are first split by rows over every device of their mesh, so S
    must be a multiple of the device count) and the results are assembled on device: no
    process reads, or computes on, another's rows."""
    if jax.process_count() == 1:
        return jnp.asarray(fn(*[np.asarray(a) for a in arrays]))
    mesh = arrays[0].sharding.mesh
    S = arrays[0].shape[0]
    if S % mesh.size:
        raise ValueError(f"host_rows: {S} rows do not split over the {mesh.size} devices")
    split = [NamedSharding(mesh, PartitionSpec(mesh.axis_names, *[None] * (a.ndim - 1)))
             for a in arrays]
    rows, values = None, []
    for a in _relaid(arrays, split):
        shards = sorted(a.addressable_shards, key=lambda s: s.index[0].start)
        rows = np.concatenate([np.arange(S)[s.index[0]] for s in shards])
        values.append(np.concatenate([np.asarray(s.data) for s in shards]))
    out = np.zeros(S, np.float32)
    out[rows] = fn(*values)
    by_rows = NamedSharding(mesh, PartitionSpec(mesh.axis_names))
    return jax.make_array_from_callback((S,), by_rows, lambda index: out[index])
