"""scripts/tools/convert_base_layout.py: a base in the per-layer block layout converts to the
stacked one (which this code loads) and back, value for value."""
import jax
import numpy as np
from flax import nnx

from ada_jax.checkpoint import Checkpointer, abstract_like
from tests import helpers


def _tool():
    return helpers.load_script("scripts/tools/convert_base_layout.py")


def test_per_layer_and_back_restores_the_same_params(tmp_path):
    tool = _tool()
    params = nnx.state(helpers.tiny_model(seed=3), nnx.Param)
    src, mid, dst = (str(tmp_path / n) for n in ("stacked", "per_layer", "again"))
    ckpt = Checkpointer(src, keep=1)
    ckpt.save(7, {"params": params}, {"sft_steps": 7})
    ckpt.close()
    assert tool.convert(src, mid, "per_layer") == 7
    layer0 = tool._plain(tool.ocp.CheckpointManager(mid).restore(7)["arrays"]["params"])
    np.testing.assert_array_equal(layer0["blocks"]["1"]["attn"]["q"],
                                  np.asarray(params["blocks"]["attn"]["q"].get_value())[1])
    assert tool.convert(mid, dst, "stacked") == 7
    restored = Checkpointer(dst, keep=1).restore_latest(abstract_like({"params": params}))
    assert restored[0] == 7 and restored[2]["sft_steps"] == 7
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(restored[1]["params"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
