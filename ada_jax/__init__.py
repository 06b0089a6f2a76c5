"""ada_jax: adaptive-sampling RL for language models with verifiable rewards (JAX/Flax NNX)."""
import logging
import platform


def console_logging() -> None:
    """What the entry scripts print: ada_jax's own INFO messages and everyone's warnings, not
    the INFO chatter of orbax, jax or TensorBoard (progress bars show the rest)."""
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("ada_jax").setLevel(logging.INFO)


def host_cpu() -> str:
    """The host CPU as "model name (family F, model M)" from /proc/cpuinfo (else platform's
    name): XLA compiles for it, so bases and benchmark ratios are tied to it."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            block = f.read().split("\n\n")[0]
    except OSError:
        return cpu
    first = {k.strip(): v.strip() for k, v in
             (line.split(":", 1) for line in block.splitlines() if ":" in line)}
    return (f"{first.get('model name', cpu)} (family {first.get('cpu family', '?')}, "
            f"model {first.get('model', '?')})")
