"""Small shared builders for tests: tiny model configs and models, a private mount."""
import dataclasses
import shutil
import subprocess

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


def with_mount(mount: str, path, cmd: list) -> list:
    """`cmd` run after `mount` (shell, `$0` = path) in a private user and mount namespace, as
    the root of that namespace (a read-only or a tiny filesystem at `path` that nobody else
    sees); the test is skipped where unshare cannot make one."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"],
                                                     capture_output=True).returncode:
        import pytest
        pytest.skip("unshare -rm (user and mount namespaces) is not available here")
    return ["unshare", "-rm", "sh", "-c", f'{mount} && exec "$@"', str(path), *cmd]
