"""What a process holds now: the live jax arrays on a device (`live_bytes`) and the host heap's
free pages handed back to the OS (`release_free_heap`). A bottom layer: the learner, the loop
and the memory tests use it; the estimate of what a run will hold is ada_jax/memory.py."""
import ctypes
import dataclasses
import functools

import jax


@dataclasses.dataclass
class Live:
    """Bytes of the live jax arrays on one device (`live_bytes`)."""
    total: int
    arrays: list  # (bytes, shape, dtype, sharding) of each


def live_bytes(device=None) -> Live:
    """What is resident on `device` (default: the first) now: the sum over live arrays of
    their shards' bytes there."""
    device = device or jax.devices()[0]
    got = []
    for x in jax.live_arrays():
        b = sum(s.data.nbytes for s in x.addressable_shards if s.device == device)
        if b:
            got.append((b, x.shape, str(x.dtype), str(x.sharding)))
    return Live(sum(g[0] for g in got), sorted(got, key=lambda g: -g[0]))


@functools.lru_cache(maxsize=None)
def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): nothing to trim
        return None


def release_free_heap() -> None:
    """Hand the host heap's free pages back to the OS (glibc `malloc_trim`). XLA's CPU
    compiler frees gigabytes after compiling a program, which glibc keeps mapped; trimmed
    before the learner's compile, that transient lands on a smaller resident set."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
