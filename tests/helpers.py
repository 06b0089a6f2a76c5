"""Small shared builders for tests: tiny model configs and models."""
import dataclasses

from flax import nnx

from ada_jax import model as model_lib

TINY = model_lib.ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                             d_ff=64, head_dim=8, max_len=64)


def tiny_model(seed: int = 0, **overrides):
    cfg = dataclasses.replace(TINY, **overrides)
    return model_lib.Transformer(cfg, nnx.Rngs(seed))


def logit_diff_vs_hf(graphdef, params, hf_model, toks, mask):
    """(max |ours − HF| logit over the real tokens of a left-padded batch, max |HF logit|)."""
    import jax
    import numpy as np
    import torch
    pos = np.asarray(model_lib.positions_from_mask(mask))
    ours = jax.jit(lambda p: nnx.merge(graphdef, p)(toks, pos, mask)[0])(params)
    with torch.no_grad():
        ref = hf_model(input_ids=torch.tensor(toks, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       position_ids=torch.tensor(pos, dtype=torch.long)).logits.numpy()
    return float(np.abs(np.asarray(ours) - ref)[mask].max()), float(np.abs(ref).max())
