"""Test setup: fake 8 CPU devices (before jax is imported) so mesh code runs on one machine."""
import atexit
import os
import shutil
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# SFT bases are cached under $ADA_JAX_CACHE (ada_jax/base_policy.py): tests (and the
# subprocesses they start) use a scratch one, never the user's ~/.cache/ada_jax. Under
# pytest-xdist the workers share the controller's (it imports this file before it starts them,
# and removes the folder at its exit): one SFT base and one compile of a program for all.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("ADA_JAX_TEST_CACHE"):
    _CACHE = os.environ["ADA_JAX_TEST_CACHE"]
else:
    _CACHE = tempfile.mkdtemp(prefix="ada_jax_test_cache_")
    os.environ["ADA_JAX_TEST_CACHE"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["ADA_JAX_CACHE"] = _CACHE
# Compiled programs are kept on disk for the whole run and shared with the subprocesses tests
# start: the suite compiles the same tiny models many times over (ADA_JAX_TEST_JIT_CACHE=0: off).
if os.environ.get("ADA_JAX_TEST_JIT_CACHE", "1") != "0":
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(_CACHE, "jit"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")



import gc  # noqa: E402

import pytest  # noqa: E402

_MAPS_BEFORE_CLEARING = 20_000


def _memory_maps() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux
        return 0


@pytest.fixture(autouse=True)
def _release_compiled_code():
    """Drop JAX's compiled executables once the process holds many memory mappings: each
    executable keeps its machine code in mappings of its own, and a whole suite's worth in one
    process passes the kernel's vm.max_map_count (65,530 by default), where the next compile's
    mmap fails and XLA segfaults (seen on CI: exit 139 at the 583rd test)."""
    yield
    if _memory_maps() > _MAPS_BEFORE_CLEARING:
        jax.clear_caches()
        gc.collect()
