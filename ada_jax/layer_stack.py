"""The transformer's blocks as one stacked Block ([L, …] weights, the model's layout), their
per-layer slices for decoding, and the scan over the layers that the learner runs."""
import jax
import jax.numpy as jnp
from flax import nnx


def stack_layers(blocks: list) -> nnx.Module:
    """One Block whose every weight holds the weights of `blocks` stacked on a leading layer
    axis ([L, …], logical axis "layers"): the model's own layout. A scan over the layers takes
    each layer's weights as a slice, and the gradient comes out in this same layout, so a step
    makes neither a stacked copy of the weights nor a split of their gradient (SmolLM2's
    run: 0.4 GiB less at its peak, docs/benchmarks.md)."""
    def stack(*variables):
        axes = variables[0].get_metadata()["logical_axes"]
        return variables[0].replace(jnp.stack([v.get_value() for v in variables]),
                                    logical_axes=("layers",) + tuple(axes))
    states = [nnx.state(b) for b in blocks]
    return nnx.merge(nnx.graphdef(blocks[0]),
                     jax.tree.map(stack, *states, is_leaf=lambda v: isinstance(v, nnx.Variable)))


def layers(model) -> list:
    """The model's blocks one layer at a time: slice i of every stacked weight, in the compute
    dtype but the norms' scales (as the block casts them where it uses them), or the blocks of
    a `per_layer` model as they are."""
    if isinstance(model.blocks, nnx.List):
        return list(model.blocks)
    graphdef, stacked = nnx.split(model.blocks)
    dt = jnp.dtype(model.cfg.dtype)

    def layer(i):
        def one(path, w):
            norm = any(getattr(k, "key", None) == "scale" for k in path)  # an RMSNorm's
            return w[i] if norm else w[i].astype(dt)
        return nnx.merge(graphdef, jax.tree_util.tree_map_with_path(one, stacked))
    return [layer(i) for i in range(model.cfg.n_layers)]


def per_layer(model):
    """A copy of `model` whose blocks are a list of per-layer Blocks (`layers`), for decoding:
    it runs every layer at every step inside a while loop, and a slice of a stacked weight
    there is a copy of it at every step (a sampler 1.4x slower on CPU); merged before the
    loop, the slices are taken once per call: one copy of the block weights in the compute
    dtype while decoding. The same values; the learner's scan (`model.scan_layers`) needs the
    stacked model."""
    graphdef, state = nnx.split(model)
    out = nnx.merge(graphdef, state)
    out.blocks = nnx.List(layers(model))
    return out


def scan_blocks(graphdef, stacked, x, positions_BT, rope, masks, local_L, rope_L, cache,
                remat: bool):
    """The blocks as one `lax.scan` over their stacked weights (and the cache's per-layer keys
    / values stacked likewise): (x, per-layer caches or Nones). rope / masks: per layer kind
    (False: global, True: local) as `model.Transformer.__call__` makes them; local_L says each
    layer's kind, rope_L whether it applies RoPE: scanned inputs where layers differ."""
    def body(x, layer):
        state, k, v, local, rotary = layer
        kind, kv_mask = rope[False], masks[False]
        if local is not None:
            kind = jax.tree.map(lambda a, b: jnp.where(local, a, b), rope[True], kind)
            kv_mask = jnp.where(local, masks[True], kv_mask)
        if rotary is not None:
            kind = jax.tree.map(lambda a, b: jnp.where(rotary, a, b), kind, no_rope(kind))
        lc = None if k is None else {"k": k, "v": v, "pos": cache["pos"]}
        x, lc = block_call(nnx.merge(graphdef, state), x, positions_BT, kind, kv_mask, lc,
                            remat)
        return x, (None, None) if lc is None else (lc["k"], lc["v"])

    kv = (None, None) if cache is None else (jnp.stack(cache["k"]), jnp.stack(cache["v"]))
    local = jnp.asarray(local_L) if any(local_L) else None
    rotary = None if all(rope_L) else jnp.asarray(rope_L)
    x, (k_L, v_L) = jax.lax.scan(body, x, (stacked,) + kv + (local, rotary))
    n_layers = jax.tree.leaves(stacked)[0].shape[0]
    if cache is None:
        return x, [None] * n_layers
    return x, [{"k": k_L[i], "v": v_L[i]} for i in range(n_layers)]


def no_rope(rope):
    """A layer without RoPE's (frequencies, queries' scale), for SmolLM3's NoPE layers: zero
    frequencies (an identity rotation) and scale 1."""
    return jnp.zeros_like(rope[0]), jnp.ones_like(rope[1])


def block_call(block, x, positions_BT, rope, kv_mask, layer_cache, remat: bool):
    """One block; with remat only its input is saved for the backward pass.

    Remat is `jax.checkpoint` over a pure function of the block's state (not `nnx.remat`,
    which mutates the caller's Variables and so fails when the model is closed over by an
    inner trace: a `lax.while_loop` / `lax.map` body such as the sampler's).
    """
    if not remat:
        return block(x, positions_BT, rope, kv_mask, layer_cache)
    graphdef, state = nnx.split(block)

    def pure(state, x, positions_BT, rope, kv_mask, layer_cache):
        return nnx.merge(graphdef, state)(x, positions_BT, rope, kv_mask, layer_cache)

    return jax.checkpoint(pure)(state, x, positions_BT, rope, kv_mask, layer_cache)
