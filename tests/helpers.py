"""Small shared builders for tests: tiny model configs and models."""
import dataclasses

from flax import nnx

from ada_jax import model as model_lib

TINY = model_lib.ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                             d_ff=64, head_dim=8, max_len=64)


def tiny_model(seed: int = 0, **overrides):
    cfg = dataclasses.replace(TINY, **overrides)
    return model_lib.Transformer(cfg, nnx.Rngs(seed))
