"""Decoder-only transformer (Flax NNX): RMSNorm, RoPE, grouped-query attention, SwiGLU;
with config fields for Gemma 3 (local sliding-window and global layers with their own RoPE
bases, RMS-normed queries and keys, norms after attention and the MLP, (1 + w) norm scales,
GeGLU, embeddings scaled by sqrt(d), soft-capped logits), SmolLM3 (layers without RoPE) and
OLMo 2 (norms after attention and the MLP only, QK-norm over all heads at once).
Every such field's default leaves Llama / Qwen2 as they are.

Shapes: B batch, T query length, S key/cache length, D model, H query heads, K kv heads,
G = H // K query heads per kv head, E head dim, F mlp hidden, V vocab, L layers.

One `__call__` serves training and decoding. Without a cache it runs causal attention over the
given tokens. With a cache (`init_cache`) it writes the new keys/values at each row's own write
position `cache["pos"]` and attends over everything valid in the cache, so left-padded prompts,
rows at different decode positions and rows restarted from another prompt's cache (the adaptive
engine's slot refill) all go through the same code. The blocks' weights are stored stacked,
[L, …] (`layer_stack`). Params carry `logical_axes` metadata that
`ada_jax.sharding` maps to the device mesh.
"""
import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from ada_jax import layer_stack, sharding

Cache = dict[str, Any]
_NEG_INF = -1e30


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    head_dim: int
    rope_base: float = 10_000.0
    qkv_bias: bool = False
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    max_len: int = 256
    rope_scaling: str = "none"  # "none" | "llama3" | "linear" | "yarn" (global layers only)
    rope_scaling_factor: float = 32.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_len: int = 8192
    # YaRN: the ramp between interpolated and original frequencies (in rotations over
    # rope_original_max_len, rounded outwards unless yarn_truncate is off) and the factor its
    # rotated queries and keys are scaled by (transformers' attention_factor)
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_truncate: bool = True
    yarn_attention_factor: float = 1.0
    param_dtype: str = "float32"
    dtype: str = "float32"  # compute dtype; "auto": `compute_dtype`, resolved here
    remat: bool = False
    scan_layers: bool = False
    # Gemma 3 (Qwen3: qk_norm; Mistral: a window on every layer). Local layers attend to the
    # keys at most sliding_window - 1 positions back (0: no local layers); every
    # sliding_window_pattern-th layer is global (0: none is).
    sliding_window: int = 0
    sliding_window_pattern: int = 0
    rope_local_base: float = 10_000.0  # local layers' RoPE base (rope_base: global layers')
    qk_norm: bool = False  # RMSNorm over each head's queries and keys before RoPE
    post_norms: bool = False  # RMSNorm of the attention's and the MLP's outputs
    norm_plus_one: bool = False  # norms scale by 1 + w (w stored, initialised to 0)
    mlp_act: str = "silu"  # "silu" (SwiGLU) | "gelu_tanh" (GeGLU)
    embed_scale: bool = False  # embeddings times sqrt(d_model)
    query_pre_attn_scalar: float = 0.0  # attention scores times its ** -0.5 (0: head_dim's)
    attn_logit_softcap: float = 0.0  # scores -> cap * tanh(scores / cap) (0: none)
    final_logit_softcap: float = 0.0  # the same for the output logits
    nope_interval: int = 0  # every nope_interval-th layer has no RoPE (SmolLM3's 4; 0: none)
    post_norms_only: bool = False  # no norms before attention and the MLP (OLMo 2: post_norms)
    qk_norm_full: bool = False  # QK-norm over all heads' queries (keys) at once (OLMo 2)

    def __post_init__(self):
        object.__setattr__(self, "dtype", compute_dtype(self.dtype))

    @classmethod
    def from_config(cls, model_config) -> "ModelConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(model_config).items() if k in fields})


# The variant fields above (a checkpoint's config.json sets them; ModelConfig's defaults: off)
VARIANT_FIELDS = ("sliding_window", "sliding_window_pattern", "rope_local_base", "qk_norm",
                  "post_norms", "norm_plus_one", "mlp_act", "embed_scale",
                  "query_pre_attn_scalar", "attn_logit_softcap", "final_logit_softcap",
                  "nope_interval", "post_norms_only", "qk_norm_full", "yarn_beta_fast",
                  "yarn_beta_slow", "yarn_truncate", "yarn_attention_factor")


def compute_dtype(name: str, platform: str | None = None) -> str:
    """The compute dtype `model.dtype` names on `platform` (default: JAX's backend). "auto" is
    bfloat16 on accelerators and float32 on a CPU. On a CPU with bfloat16 dot instructions
    (AVX512-BF16, AMX) bfloat16 samples faster (every dot accumulates in float32, which XLA CPU
    runs natively), but the learner's step is slower, so a training step is no faster
    (docs/benchmarks.md, "bfloat16 on a CPU"); without them XLA converts every weight and cache
    to float32 around each dot."""
    if name != "auto":
        return name
    return "float32" if (platform or jax.default_backend()) == "cpu" else "bfloat16"


def _param(rng, shape, axes, dtype, scale=None, init="normal"):
    if init == "ones":
        value = jnp.ones(shape, dtype)
    elif init == "zeros":
        value = jnp.zeros(shape, dtype)
    else:
        value = (jax.random.normal(rng, shape, jnp.float32) * scale).astype(dtype)
    return nnx.Param(value, logical_axes=axes)


def wide(dtype):
    """The dtype norms, RoPE, attention scores and logits are computed in: float32, or float64
    for a float64 model (jax_enable_x64: the exact reference parity tests compare against)."""
    return jnp.promote_types(dtype, jnp.float32)


class RMSNorm(nnx.Module):
    """RMS norm in float32 (`wide`) over the trailing axes w spans (one: `dim` an int; several:
    a tuple, e.g. OLMo 2's heads x head_dim), scaled by w (or by 1 + w: `plus_one`, Gemma's)."""

    def __init__(self, dim: int | tuple, eps: float, param_dtype, plus_one: bool = False,
                 axis: str | tuple = "embed"):
        shape, axes = ((dim,), (axis,)) if isinstance(dim, int) else (tuple(dim), tuple(axis))
        self.scale = _param(None, shape, axes, param_dtype, init="zeros" if plus_one else "ones")
        self.eps, self.plus_one = eps, plus_one

    def __call__(self, x):
        x32 = x.astype(wide(x.dtype))
        over = tuple(range(-self.scale.ndim, 0))
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=over, keepdims=True) + self.eps)
        scale = self.scale[...].astype(x32.dtype)
        return (x32 * (1.0 + scale if self.plus_one else scale)).astype(x.dtype)


def _norm(cfg: ModelConfig, dim: int | tuple | None = None,
          axis: str | tuple = "embed") -> RMSNorm:
    return RMSNorm(dim or cfg.d_model, cfg.norm_eps, jnp.dtype(cfg.param_dtype),
                   cfg.norm_plus_one, axis)


def local_layers(cfg: ModelConfig) -> tuple[bool, ...]:
    """Per layer: whether it attends within the sliding window (Gemma 3's pattern: every
    sliding_window_pattern-th layer global, the others local)."""
    n = cfg.sliding_window_pattern
    return tuple(bool(cfg.sliding_window) and (not n or (i + 1) % n != 0)
                 for i in range(cfg.n_layers))


def rope_layers(cfg: ModelConfig) -> tuple[bool, ...]:
    """Per layer: whether it rotates its queries and keys (SmolLM3's NoPE layers, every
    nope_interval-th, do not: position reaches them only through the causal mask)."""
    n = cfg.nope_interval
    return tuple(not n or (i + 1) % n != 0 for i in range(cfg.n_layers))


def rope_frequencies(cfg: ModelConfig, local: bool = False) -> jax.Array:
    """Inverse frequencies [E/2] of the global layers (with Llama-3.1 style, linear or YaRN
    scaling when configured), or of the local ones (rope_local_base, unscaled)."""
    base = cfg.rope_local_base if local else cfg.rope_base
    inv = 1.0 / (base ** (jnp.arange(0, cfg.head_dim, 2, dtype=wide(cfg.dtype)) / cfg.head_dim))
    if local:
        return inv
    if cfg.rope_scaling == "linear":
        inv = inv / cfg.rope_scaling_factor
    elif cfg.rope_scaling == "llama3":
        wavelen = 2 * math.pi / inv
        low_wavelen = cfg.rope_original_max_len / cfg.rope_low_freq_factor
        high_wavelen = cfg.rope_original_max_len / cfg.rope_high_freq_factor
        smooth = ((cfg.rope_original_max_len / wavelen - cfg.rope_low_freq_factor)
                  / (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor))
        mid = (1 - smooth) * inv / cfg.rope_scaling_factor + smooth * inv
        inv = jnp.where(wavelen > low_wavelen, inv / cfg.rope_scaling_factor,
                        jnp.where(wavelen < high_wavelen, inv, mid))
    elif cfg.rope_scaling == "yarn":  # interpolated below the ramp, original above it
        dim = cfg.head_dim

        def at(rotations):  # the frequency index that turns `rotations` times over the context
            return (dim * math.log(cfg.rope_original_max_len / (rotations * 2 * math.pi))
                    / (2 * math.log(cfg.rope_base)))
        low, high = at(cfg.yarn_beta_fast), at(cfg.yarn_beta_slow)
        if cfg.yarn_truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        high = high + 0.001 if low == high else high
        ramp = jnp.clip((jnp.arange(dim // 2, dtype=inv.dtype) - low) / (high - low), 0, 1)
        inv = inv / cfg.rope_scaling_factor * ramp + inv * (1 - ramp)
    return inv


def query_scale(cfg: ModelConfig, local: bool = False) -> float:
    """What a layer's queries are multiplied by before attention: YaRN's attention factor
    squared on the global layers (transformers scales both rotated queries and keys by it), 1
    elsewhere."""
    return 1.0 if local or cfg.rope_scaling != "yarn" else cfg.yarn_attention_factor ** 2


def apply_rope(x_BTHE, positions_BT, inv_freq):
    """Rotate-half RoPE (the Llama / Qwen2 convention), computed in float32 (`wide`)."""
    angles = positions_BT[..., None].astype(inv_freq.dtype) * inv_freq  # [B,T,E/2]
    sin = jnp.sin(angles)[:, :, None, :]
    cos = jnp.cos(angles)[:, :, None, :]
    x = x_BTHE.astype(wide(x_BTHE.dtype))
    x1, x2 = jnp.split(x, 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_BTHE.dtype)


def dense(x, w, n_in: int = 1):
    """x [..., *in] times w [*in, *out] -> [..., *out], as one 2-D matmul [N, in] @ [in, out]
    with the leading dims flattened, accumulated in float32 (`wide`: XLA CPU's native bfloat16
    dot, 2-3x its float32 one on a CPU with bfloat16 instructions; a bfloat16 result type takes
    a slow path through float32 copies). The same sums as an einsum such as "btd,dhe->bthe",
    but its gradient is plain 2-D dots too: with two leading dims (b, t) the weight gradient
    contracts over both, which XLA CPU lowers to a transposed copy of the activation gradient
    and a slower dot (a learner step 1.8x slower on CPU; docs/benchmarks.md)."""
    lead, k = x.shape[:x.ndim - n_in], math.prod(x.shape[x.ndim - n_in:])
    y = jnp.dot(x.reshape(-1, k), w.reshape(k, -1), preferred_element_type=wide(x.dtype))
    return y.astype(x.dtype).reshape(lead + w.shape[n_in:])


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        pd = jnp.dtype(cfg.param_dtype)
        D, H, K, E = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        s = 1.0 / math.sqrt(D)
        self.q = _param(rngs.params(), (D, H, E), ("embed", "heads", "head_dim"), pd, s)
        self.k = _param(rngs.params(), (D, K, E), ("embed", "kv_heads", "head_dim"), pd, s)
        self.v = _param(rngs.params(), (D, K, E), ("embed", "kv_heads", "head_dim"), pd, s)
        self.o = _param(rngs.params(), (H, E, D), ("heads", "head_dim", "embed"), pd,
                        1.0 / math.sqrt(H * E * cfg.n_layers))
        if cfg.qkv_bias:
            self.q_bias = _param(None, (H, E), ("heads", "head_dim"), pd, init="zeros")
            self.k_bias = _param(None, (K, E), ("kv_heads", "head_dim"), pd, init="zeros")
            self.v_bias = _param(None, (K, E), ("kv_heads", "head_dim"), pd, init="zeros")
        if cfg.qk_norm and cfg.qk_norm_full:
            self.q_norm = _norm(cfg, (H, E), ("heads", "head_dim"))
            self.k_norm = _norm(cfg, (K, E), ("kv_heads", "head_dim"))
        elif cfg.qk_norm:
            self.q_norm, self.k_norm = _norm(cfg, E, "head_dim"), _norm(cfg, E, "head_dim")
        self.cfg = cfg

    def __call__(self, x_BTD, positions_BT, rope, kv_mask_BTS, layer_cache):
        """rope: (inverse frequencies [E/2], the queries' scale: `query_scale`) of this
        layer."""
        cfg, dt = self.cfg, x_BTD.dtype
        inv_freq, q_scale = rope
        q = dense(x_BTD, self.q[...].astype(dt))  # [B,T,H,E]
        k = dense(x_BTD, self.k[...].astype(dt))  # [B,T,K,E]
        v = dense(x_BTD, self.v[...].astype(dt))
        if cfg.qkv_bias:
            q, k, v = (q + self.q_bias[...].astype(dt), k + self.k_bias[...].astype(dt),
                       v + self.v_bias[...].astype(dt))
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, positions_BT, inv_freq)
        k = apply_rope(k, positions_BT, inv_freq)
        if cfg.rope_scaling == "yarn":
            q = q * q_scale.astype(dt)
        B, T, H, E = q.shape
        K, G = k.shape[2], H // k.shape[2]
        v = v.transpose(0, 2, 1, 3)  # [B,K,T,E]
        # Plain batched matmuls over (b, k) with the G·T queries of a kv head as rows, on the
        # keys as stored (no per-step transposed copy of a cache). The cache holds keys as
        # [B,K,E,S]: decoding's scores are then q [G,E] @ k [E,S] per (b, k), which XLA CPU
        # runs 2-5x faster than against keys [S,E] (a sampler 1.3x faster; docs/benchmarks.md).
        q = q.reshape(B, T, K, G, E).transpose(0, 2, 3, 1, 4).reshape(B, K, G * T, E)
        if layer_cache is None:
            k = k.transpose(0, 2, 1, 3)  # [B,K,T,E]
            scores = jnp.einsum("bkqe,bkse->bkqs", q, k, preferred_element_type=wide(dt))
        else:
            k, v, layer_cache = _write_cache(layer_cache, k.transpose(0, 2, 3, 1), v)
            scores = jnp.einsum("bkqe,bkes->bkqs", q, k, preferred_element_type=wide(dt))
        scores = (scores * cfg.query_pre_attn_scalar ** -0.5 if cfg.query_pre_attn_scalar else
                  scores / math.sqrt(E))
        if cfg.attn_logit_softcap:
            scores = softcap(scores, cfg.attn_logit_softcap)
        scores = scores.reshape(B, K, G, T, -1)
        scores = jnp.where(kv_mask_BTS[:, None, None], scores, _NEG_INF)
        probs = jax.nn.softmax(scores, axis=-1).astype(dt).reshape(B, K, G * T, -1)
        out = jnp.einsum("bkqs,bkse->bkqe", probs, v, preferred_element_type=wide(dt))
        out = out.astype(dt).reshape(B, K, G, T, E)
        out = out.transpose(0, 3, 1, 2, 4).reshape(B, T, H, E)
        return dense(out, self.o[...].astype(dt), n_in=2), layer_cache


def softcap(x, cap: float):
    return jnp.tanh(x / cap) * cap


# The positions' axis of each layer's cached keys [B,K,E,S] and values [B,K,S,E] (`init_cache`).
CACHE_LEN_AXIS = {"k": 3, "v": 2}


def _write_cache(layer_cache, k_BKET, v_BKTE):
    """Write new keys/values at each row's own position; returns the full-length keys
    [B,K,E,S] and values [B,K,S,E]."""
    pos_B = layer_cache["pos"]

    def write(name, new):
        axis = CACHE_LEN_AXIS[name] - 1  # in one row's block (vmapped over the batch)
        cache = layer_cache[name]
        dtype, new = cache.dtype, new.astype(cache.dtype)
        if dtype.itemsize == 2 and new.shape[axis + 1] == 1:
            # One new token a row, 16-bit: a select over the cache, one pass in place. XLA CPU
            # runs a bfloat16 scatter in float32 (the whole cache converted there and back on
            # every decode step), and a scatter of its bits copies the cache twice.
            at = jnp.arange(cache.shape[axis + 1]).reshape(
                [-1 if a == axis + 1 else 1 for a in range(cache.ndim)])
            return jnp.where(at == pos_B.reshape([-1] + [1] * (cache.ndim - 1)), new, cache)
        bits = jnp.uint16 if dtype.itemsize == 2 else None
        if bits:
            cache, new = (jax.lax.bitcast_convert_type(x, bits) for x in (cache, new))
        out = jax.vmap(lambda c, u, i: jax.lax.dynamic_update_slice(
            c, u, tuple(i if a == axis else 0 for a in range(3))))(cache, new, pos_B)
        return jax.lax.bitcast_convert_type(out, dtype) if bits else out

    k, v = write("k", k_BKET), write("v", v_BKTE)
    return k, v, {"k": k, "v": v, "pos": pos_B}


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        pd = jnp.dtype(cfg.param_dtype)
        D, F = cfg.d_model, cfg.d_ff
        self.gate = _param(rngs.params(), (D, F), ("embed", "mlp"), pd, 1.0 / math.sqrt(D))
        self.up = _param(rngs.params(), (D, F), ("embed", "mlp"), pd, 1.0 / math.sqrt(D))
        self.down = _param(rngs.params(), (F, D), ("mlp", "embed"), pd,
                           1.0 / math.sqrt(F * cfg.n_layers))
        if cfg.mlp_act not in ("silu", "gelu_tanh"):
            raise ValueError(f"mlp_act={cfg.mlp_act!r}: choose from ('silu', 'gelu_tanh')")
        self.act = cfg.mlp_act

    def __call__(self, x_BTD):
        dt = x_BTD.dtype
        g = dense(x_BTD, self.gate[...].astype(dt))
        u = dense(x_BTD, self.up[...].astype(dt))
        act = jax.nn.silu if self.act == "silu" else functools.partial(jax.nn.gelu,
                                                                          approximate=True)
        h = sharding.constrain(act(g) * u, ("batch", "length", "mlp"))
        return dense(h, self.down[...].astype(dt))


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.pre_norms = not cfg.post_norms_only
        if self.pre_norms:
            self.attn_norm = _norm(cfg)
        self.attn = Attention(cfg, rngs)
        if self.pre_norms:
            self.mlp_norm = _norm(cfg)
        self.mlp = MLP(cfg, rngs)
        if cfg.post_norms:
            self.post_attn_norm, self.post_mlp_norm = _norm(cfg), _norm(cfg)
        self.post_norms = cfg.post_norms

    def __call__(self, x_BTD, positions_BT, rope, kv_mask_BTS, layer_cache):
        h, layer_cache = self.attn(self.attn_norm(x_BTD) if self.pre_norms else x_BTD,
                                   positions_BT, rope, kv_mask_BTS, layer_cache)
        x_BTD = x_BTD + (self.post_attn_norm(h) if self.post_norms else h)
        h = self.mlp(self.mlp_norm(x_BTD) if self.pre_norms else x_BTD)
        x_BTD = x_BTD + (self.post_mlp_norm(h) if self.post_norms else h)
        return sharding.constrain(x_BTD, ("batch", "length", "embed")), layer_cache


class Transformer(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        pd = jnp.dtype(cfg.param_dtype)
        self.cfg = cfg
        self.embed = _param(rngs.params(), (cfg.vocab_size, cfg.d_model), ("vocab", "embed"),
                            pd, 1.0 / math.sqrt(cfg.d_model))
        self.blocks = layer_stack.stack_layers([Block(cfg, rngs) for _ in range(cfg.n_layers)])
        self.final_norm = _norm(cfg)
        if not cfg.tie_embeddings:
            self.lm_head = _param(rngs.params(), (cfg.d_model, cfg.vocab_size),
                                  ("embed", "vocab"), pd, 1.0 / math.sqrt(cfg.d_model))

    def __call__(self, tokens_BT, positions_BT, mask_BT, cache: Cache | None = None,
                 logits_at_BU=None, logits_slice: tuple[int, int] | None = None,
                 remat: bool | None = None, scan: bool | None = None, hidden: bool = False):
        """Logits [B,T,V] (float32: `wide`) and the updated cache (None without one).

        mask_BT marks real tokens (False = padding). Positions are each token's index among
        its row's real tokens (RoPE). With a cache the T tokens are appended at cache["pos"].
        logits_at_BU: optional int [B,U] indices into T; then the logits are [B,U,V], computed
        only at those positions (the hidden states are gathered before the output head, so the
        [B,T,V] array never exists: prefill passes each row's last position).
        logits_slice: optional static (start, stop); then the logits are [B, stop - start, V]
        at positions start..stop-1 (the learner's completion positions: no output head and
        log-softmax over the prompt).
        remat: recompute each block in the backward pass (default: config.model.remat
        without a cache; decoding is never differentiated).
        scan: run the blocks as one `lax.scan` over their stacked weights (default:
        config.model.scan_layers without a cache), else a loop over the layers' slices: the
        compiled program holds one block instead of n_layers, and XLA's temporaries for the
        learner's step are smaller (docs/benchmarks.md). Same values as the loop.
        hidden: return the final-normed hidden states [B,T,D] (compute dtype) instead of the
        logits, for `logprobs.head_logprobs` to take the output head in chunks.
        """
        cfg = self.cfg
        dt = jnp.dtype(cfg.dtype)
        x = self.embed[...][tokens_BT]  # gather, then cast: no [V, D] copy
        if cfg.embed_scale:  # in the weights' dtype, as transformers' Gemma
            x = x * jnp.asarray(cfg.d_model ** 0.5, x.dtype)
        x = x.astype(dt)
        x = sharding.constrain(x, ("batch", "length", "embed"))
        rope, masks, valid = layer_inputs(cfg, positions_BT, mask_BT, cache)
        remat = cfg.remat and cache is None if remat is None else remat
        scan = cfg.scan_layers and cache is None if scan is None else scan
        if scan:
            if isinstance(self.blocks, nnx.List):
                raise ValueError("a scan over the layers needs the stacked model, not "
                                 "layer_stack.per_layer's")
            x, new_layers = layer_stack.scan_blocks(
                *nnx.split(self.blocks), x, positions_BT, rope, masks, local_layers(cfg),
                rope_layers(cfg), cache, remat)
        else:
            new_layers = []
            for i, (block, local, rotary) in enumerate(zip(
                    layer_stack.layers(self), local_layers(cfg), rope_layers(cfg))):
                lc = None if cache is None else {"k": cache["k"][i], "v": cache["v"][i],
                                                  "pos": cache["pos"]}
                kind = rope[local] if rotary else layer_stack.no_rope(rope[local])
                x, lc = layer_stack.block_call(block, x, positions_BT, kind, masks[local], lc,
                                               remat)
                new_layers.append(lc)
        if logits_slice is not None:
            x = x[:, logits_slice[0]:logits_slice[1]]
        if logits_at_BU is not None:
            x = jnp.take_along_axis(x, logits_at_BU[:, :, None].astype(jnp.int32), axis=1)
        x = self.final_norm(x)
        logits = x if hidden else self.head(x)  # `wide` already
        if cache is None:
            return logits, None
        new_cache = {"k": [lc["k"] for lc in new_layers], "v": [lc["v"] for lc in new_layers],
                     "valid": valid, "pos": cache["pos"] + tokens_BT.shape[1]}
        return logits, new_cache

    def head(self, x_BTD):
        """Logits [..., V] (`wide`: the dot accumulates in float32) from final-normed hidden
        states [..., D]. A tied head contracts the embedding's D axis in place: through a
        transposed [D, V] operand XLA CPU's bfloat16 dot copies the matrix on every call."""
        dt = jnp.dtype(self.cfg.dtype)
        x_ND = x_BTD.reshape(-1, x_BTD.shape[-1])
        if self.cfg.tie_embeddings:
            w, dims = self.embed[...].astype(dt), (((1,), (1,)), ((), ()))
        else:
            w, dims = self.lm_head[...].astype(dt), (((1,), (0,)), ((), ()))
        logits = jax.lax.dot_general(x_ND, w, dims, preferred_element_type=wide(dt))
        logits = logits.reshape(x_BTD.shape[:-1] + (-1,))
        cap = self.cfg.final_logit_softcap
        return softcap(logits, cap) if cap else logits


def layer_inputs(cfg: ModelConfig, positions_BT, mask_BT, cache: Cache | None = None):
    """What every block takes besides x, per layer kind (False: global, True: local, with a
    sliding window): (its RoPE: (inverse frequencies, the queries' scale), the keys' mask
    [B, T, S]), and the cache's
    valid columns after these T tokens (None without a cache). A local layer's query sees the
    keys less than `sliding_window` positions before it."""
    T = mask_BT.shape[1]
    valid = None
    if cache is None:
        causal = jnp.tril(jnp.ones((T, T), bool))
        kv_mask = causal[None] & mask_BT[:, None, :]
        key_pos_BS = positions_BT
    else:
        S = cache["valid"].shape[1]
        pos_B = cache["pos"]
        idx_BT = pos_B[:, None] + jnp.arange(T)[None]
        valid = jax.vmap(lambda c, u, i: jax.lax.dynamic_update_slice(c, u, (i,)))(
            cache["valid"], mask_BT, pos_B)
        kv_mask = valid[:, None, :] & (jnp.arange(S)[None, None, :] <= idx_BT[:, :, None])
        key_pos_BS = jnp.cumsum(valid, axis=1) - 1  # a valid key's position
    def kind(local):
        return rope_frequencies(cfg, local), jnp.asarray(query_scale(cfg, local), jnp.float32)
    rope = {False: kind(False)}
    masks = {False: kv_mask}
    if cfg.sliding_window:
        rope[True] = kind(True)
        masks[True] = kv_mask & (positions_BT[:, :, None] - key_pos_BS[:, None, :]
                                 < cfg.sliding_window)
    return rope, masks, valid


def shared_prompt_logits(model, tokens_RT, mask_RT, group_R, n_groups: int, prompt_len: int,
                         hidden: bool = False):
    """Logits [R, T - P, V] at positions P-1 .. T-2 (those predicting the completion tokens),
    equal to `model(tokens, positions, mask, logits_slice=(P - 1, T - 1))` up to float
    rounding, with each group's prompt run once instead of once per row. Rows with the same
    `group_R` (0..n_groups-1) must hold the same prompt in their first P columns (the
    learner's rows: the samples of one prompt). The prompts' keys and values go into a cache
    that every row of the group continues from, so a step with G samples per prompt runs the
    prompt part on R / G rows. A group with no row here runs on an arbitrary row (unused).
    hidden: the final-normed hidden states instead of the logits (Transformer's `hidden`)."""
    R, T = tokens_RT.shape
    P = prompt_len
    rep_B = jnp.minimum(jax.ops.segment_min(jnp.arange(R), group_R, num_segments=n_groups),
                        R - 1)
    positions = positions_from_mask(mask_RT)
    remat, scan = model.cfg.remat, model.cfg.scan_layers
    first_B, cache = model(tokens_RT[rep_B, :P], positions[rep_B, :P], mask_RT[rep_B, :P],
                           init_cache(model.cfg, n_groups, P),
                           logits_at_BU=jnp.full((n_groups, 1), P - 1), remat=remat, scan=scan,
                           hidden=hidden)
    first = first_B[group_R]
    if T - 1 == P:  # one completion column: its logits come from the prompt's last position
        return first
    more = T - 1 - P  # cache columns for the completion tokens (all but the last)
    grow = lambda x, name: jnp.pad(  # noqa: E731
        x[group_R], [(0, more) if a == CACHE_LEN_AXIS[name] else (0, 0) for a in range(x.ndim)])
    rows = {"k": [grow(k, "k") for k in cache["k"]], "v": [grow(v, "v") for v in cache["v"]],
            "valid": jnp.pad(cache["valid"][group_R], [(0, 0), (0, more)]),
            "pos": cache["pos"][group_R]}
    rest, _ = model(tokens_RT[:, P:T - 1], positions[:, P:T - 1], mask_RT[:, P:T - 1], rows,
                    remat=remat, scan=scan, hidden=hidden)
    return jnp.concatenate([first, rest], axis=1)


def init_cache(cfg: ModelConfig, batch: int, length: int) -> Cache:
    """Empty cache: per-layer keys [B,K,E,S] and values [B,K,S,E] in compute dtype (the
    layouts attention reads fastest, `Attention`; `CACHE_LEN_AXIS`), valid [B,S], write pos
    [B]."""
    B, K, E, S = batch, cfg.n_kv_heads, cfg.head_dim, length
    dt = jnp.dtype(cfg.dtype)
    return {"k": [jnp.zeros((B, K, E, S), dt) for _ in range(cfg.n_layers)],
            "v": [jnp.zeros((B, K, S, E), dt) for _ in range(cfg.n_layers)],
            "valid": jnp.zeros((batch, length), bool),
            "pos": jnp.zeros((batch,), jnp.int32)}


def abstract(cfg: ModelConfig):
    """(graphdef, abstract params) of a Transformer of `cfg`: shapes and dtypes, no memory and
    no compute (what a converter fills, a restore reads into, a memory estimate counts)."""
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0))))


def positions_from_mask(mask_BT):
    """Index of each token among its row's real tokens (0 for left padding)."""
    return jnp.maximum(jnp.cumsum(mask_BT.astype(jnp.int32), axis=1) - 1, 0)


def count_params(params) -> int:
    return sum(x.size for x in jax.tree.leaves(params))
