"""Test setup: fake 8 CPU devices (before jax is imported) so mesh code runs on one machine."""
import atexit
import os
import shutil
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# SFT bases are cached under $ADA_JAX_CACHE (ada_jax/sft.py): tests (and the subprocesses they
# start) use a scratch one, never the user's ~/.cache/ada_jax.
_CACHE = tempfile.mkdtemp(prefix="ada_jax_test_cache_")
os.environ["ADA_JAX_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
