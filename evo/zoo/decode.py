"""A real decode loop for a decoder layer (evo.zoo.layer.DecoderLayer): a fixed-capacity KV cache with the sequence
length as a device tensor, so every step of a growing sequence has the same shapes: one launch plan and one CUDA graph
serve every step, and a graph's replay advances the length itself.

    state = DecodeState.for_layer(layer, capacity=4096 + 128)   # the layer's seeded context, room for 128 more
    y = decode_step(layer, x, state.cache, state.length)         # x [T, hidden]; writes K, V; length += T

The cache is [2 (keys, values), 1, kv_heads, capacity, head_dim] in the layer's dtype (the layout of DecoderLayer's
`kv_cache` and of the rope_cache operator), the length an int32 tensor of one element on the same device. A step
rotates its tokens' queries and keys at positions length..length+T-1 (RoPE from the position tensor, as the layer
does from its context), writes keys and values there with `index_copy_` (a slice would need the length on the host:
a device-to-host sync per step that no CUDA graph captures), attends over the whole capacity with a mask from the
length tensor, and adds T to the length in place. The layer's patched roles (evo.zoo.patch) run as in `forward`:
norms, projections and MLP (the linear roles at T <= 16, norms fused), and a patched `rope` role (rope_cache) does the
rotation and the KV write in one launch with the length tensor as its start position and the layer's fp32 tables
(grown to the cache's capacity by `DecodeState.for_layer`). Attention over the masked cache is a patched
`cache_attention` role (operators/cache_attention: the mask from the length tensor), else torch's SDPA; the
`attention` role (attention+causal takes its key length from the shapes, not from a tensor) is not used here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from evo.zoo.layer import DecoderLayer, apply_rope

__all__ = ["DecodeState", "decode_step", "check_decode"]


@dataclass
class DecodeState:
    """A fixed-capacity KV cache and the number of positions it holds (a device tensor)."""

    cache: torch.Tensor  # [2, 1, kv_heads, capacity, head_dim]
    length: torch.Tensor  # int32 [1]: tokens cached; the next token's position

    @classmethod
    def for_layer(cls, layer: DecoderLayer, capacity: int) -> DecodeState:
        """The layer's seeded context (its first `layer.context` cache positions) in a cache of `capacity` positions,
        the rest zero; the length at the context."""
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= layer.context:
            raise ValueError(f"capacity must be an integer above the layer's context ({layer.context}); got "
                             f"{capacity!r}")
        s = layer.spec
        cache = torch.zeros(2, 1, s.num_key_value_heads, capacity, s.head_dim, dtype=layer.kv_cache.dtype,
                            device=layer.kv_cache.device)
        cache[:, :, :, :layer.context] = layer.kv_cache[:, :, :, :layer.context]
        if "rope" in layer.kernels:  # the rope role's tables cover every position of this cache
            layer.rope_cache_args(capacity)
        return cls(cache, torch.tensor([layer.context], dtype=torch.int32, device=cache.device))

    def reset(self, layer: DecoderLayer) -> None:
        """Back to the layer's context, in place (a captured graph keeps using the same tensors)."""
        self.cache.zero_()
        self.cache[:, :, :, :layer.context] = layer.kv_cache[:, :, :, :layer.context]
        self.length.fill_(layer.context)


def check_decode(layer: DecoderLayer, x: torch.Tensor, cache: torch.Tensor, length: torch.Tensor) -> None:
    """ValueError in one line naming the input of a decode step that is of the wrong shape, dtype or device."""
    s = layer.spec
    device = layer.kv_cache.device
    if x.dim() != 2 or x.shape[1] != s.hidden_size:
        raise ValueError(f"decode step: x must be [T, {s.hidden_size}]; got {list(x.shape)}")
    expected = (2, 1, s.num_key_value_heads, cache.shape[3] if cache.dim() == 5 else -1, s.head_dim)
    if cache.dim() != 5 or tuple(cache.shape) != expected or cache.shape[3] < x.shape[0]:
        raise ValueError(f"decode step: the KV cache must be [2, 1, {s.num_key_value_heads}, capacity >= T, "
                         f"{s.head_dim}]; got {list(cache.shape)}")
    if tuple(length.shape) != (1,) or length.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"decode step: the length must be an int32 or int64 tensor of shape [1]; got "
                         f"{length.dtype} {list(length.shape)}")
    for name, t in (("x", x), ("the KV cache", cache), ("the length", length)):
        if t.device != device:
            raise ValueError(f"decode step: {name} is on {t.device}, the layer on {device}")
    for name, t in (("x", x), ("the KV cache", cache)):
        if t.dtype != layer.kv_cache.dtype:
            raise ValueError(f"decode step: {name} is {t.dtype}, the layer {layer.kv_cache.dtype}")
    if "rope" in layer.kernels and layer.rope_cos.shape[0] < cache.shape[3]:
        raise ValueError(f"decode step: the rope role's tables hold {layer.rope_cos.shape[0]} positions, the KV cache "
                         f"{cache.shape[3]} (make the state with DecodeState.for_layer after patching)")


def decode_step(layer: DecoderLayer, x: torch.Tensor, cache: torch.Tensor, length: torch.Tensor,
                check: bool = True) -> torch.Tensor:
    """One decode step of the T tokens x [T, hidden] at positions length..length+T-1 (see the module docstring);
    returns the layer's output [T, hidden]. The caller keeps length + T within the capacity (positions past it are not
    written: nothing on the device checks it without a sync). `check=False` skips the input checks (a compiled or
    captured step checked once)."""
    if check:
        check_decode(layer, x, cache, length)
    s = layer.spec
    t = x.shape[0]
    qkv = layer._project("qkv", layer.qkv_proj, x, norm=layer.input_norm)
    positions = length.long() + torch.arange(t, device=x.device)
    rope = layer.kernels.get("rope")
    if rope is not None:  # rotation and the KV write in one launch, at the length tensor's position
        q = rope(qkv, layer.rope_cos, layer.rope_sin, cache, length)
    else:
        q, k, v = layer.heads(qkv)
        freqs = positions.float()[:, None] * layer.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        q, k = apply_rope(q, emb.cos(), emb.sin()), apply_rope(k, emb.cos(), emb.sin())
        cache[0].index_copy_(2, positions, k)
        cache[1].index_copy_(2, positions, v)
    seen = torch.arange(cache.shape[3], device=x.device)[None, :] <= positions[:, None]  # [T, capacity], causal
    attend = layer._op("cache_attention", t)
    if attend is not None:  # [1, T, H, D]: K and V read once per KV head, the cache's empty slots skipped
        a = attend(q, cache[0], cache[1], seen[None, None]).reshape(t, s.q_size)
    else:
        out = F.scaled_dot_product_attention(q, cache[0], cache[1], attn_mask=seen[None, None],
                                             enable_gqa=s.num_attention_heads != s.num_key_value_heads)
        a = out.squeeze(0).transpose(0, 1).reshape(t, s.q_size)
    h = layer._project("o_proj", layer.o_proj, a, residual=x)
    y = layer.ffn(h)
    length.add_(t)
    return y
