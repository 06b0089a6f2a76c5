"""ada_jax: adaptive-sampling RL for language models with verifiable rewards (JAX/Flax NNX)."""
import logging


def console_logging() -> None:
    """What the entry scripts print: ada_jax's own INFO messages and everyone's warnings, not
    the INFO chatter of orbax, jax or TensorBoard (progress bars show the rest)."""
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("ada_jax").setLevel(logging.INFO)
