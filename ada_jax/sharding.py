"""Device mesh, logical-axis rules and sharded model init.

Params and activations are annotated with logical axis names ("batch", "embed", "heads", …);
the config's `sharding_rules` map each name to mesh axes ("data", "fsdp", "tensor"). A dimension
that a mesh axis does not divide, or a mesh axis already used by another dimension of the same
array, falls back to replication, so one rule set serves the tiny model on 8 fake CPUs and a 7B
model on a pod.
"""
import contextlib
import logging
from typing import Any, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

log = logging.getLogger(__name__)

AXES = ("data", "fsdp", "tensor")
Rules = Sequence[tuple[str, Any]]
_ACTIVE: list[tuple[Mesh, Rules]] = []


def maybe_initialize_distributed(dist_config) -> None:
    """Multi-host entry: call jax.distributed.initialize when the config asks for it."""
    if not dist_config.enabled:
        return
    kwargs = {}
    if dist_config.coordinator_address:
        kwargs = dict(coordinator_address=dist_config.coordinator_address,
                      num_processes=dist_config.num_processes,
                      process_id=dist_config.process_id)
    jax.distributed.initialize(**kwargs)  # no args: auto-detect on TPU pods / SLURM
    log.info("jax.distributed: process %d of %d, %d local / %d global devices",
                 jax.process_index(), jax.process_count(), jax.local_device_count(),
                 jax.device_count())


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
