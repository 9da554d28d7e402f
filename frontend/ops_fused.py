"""Fused native kernels torch picks on its inference fast path, written out in the ordinary rules.

Under ``torch.no_grad()`` in eval mode, ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``
(batch-first, batched, no masks) call one native kernel instead of their Python code; TorchDynamo then
records that single op. ``_native_multi_head_attention`` is the input projection (one weight for q, k, v),
scaled dot-product attention per head, and the output projection; ``_transformer_encoder_layer_fwd``
adds the residuals, the two layer norms (before or after each block) and the feed-forward block.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hlo.ir import Instruction

from .builder import HloBuilder
from .ops_activation import gelu, relu
from .ops_common import require
from .ops_linalg import linear, scaled_dot_product_attention
from .ops_norm import layer_norm


def _rows(b: HloBuilder, w: Instruction, i: int, n: int) -> Instruction:
    """Rows [i*n, (i+1)*n) of a packed q/k/v weight (or elements of a packed bias)."""
    ranges = [(0, d, 1) for d in w.shape.dims]
    ranges[0] = (i * n, (i + 1) * n, 1)
    return b.slice(w, ranges)


def _attention(b: HloBuilder, q: Instruction, k: Instruction, v: Instruction, embed_dim: int, num_heads: int,
               qkv_weight: Instruction, qkv_bias: Instruction, proj_weight: Instruction,
               proj_bias: Instruction) -> Instruction:
    require(q.shape.rank == 3, f"the fused attention takes batched (B, L, E) inputs, got {list(q.shape.dims)}")
    require(embed_dim % num_heads == 0, f"embed_dim {embed_dim} does not split into {num_heads} heads")
    if q is k is v:  # self-attention: one packed projection, then q, k, v are slices of its result
        packed = linear(b, q, qkv_weight, qkv_bias)
        projected = [b.slice(packed, [(0, packed.shape.dims[0], 1), (0, packed.shape.dims[1], 1),
                                      (i * embed_dim, (i + 1) * embed_dim, 1)]) for i in range(3)]
    else:
        projected = [linear(b, x, _rows(b, qkv_weight, i, embed_dim), _rows(b, qkv_bias, i, embed_dim))
                     for i, x in enumerate((q, k, v))]
    heads = []
    for p in projected:
        bsz, length, _ = p.shape.dims
        p = b.reshape(p, [bsz, length, num_heads, embed_dim // num_heads])
        heads.append(b.transpose(p, [0, 2, 1, 3]))
    out = scaled_dot_product_attention(b, *heads)
    bsz, _, length, _ = out.shape.dims
    out = b.reshape(b.transpose(out, [0, 2, 1, 3]), [bsz, length, embed_dim])
    return linear(b, out, proj_weight, proj_bias)


def native_multi_head_attention(b: HloBuilder, query: Instruction, key: Instruction, value: Instruction,
                                embed_dim: int, num_head: int, qkv_weight: Instruction, qkv_bias: Instruction,
                                proj_weight: Instruction, proj_bias: Instruction, mask: Instruction | None = None,
                                need_weights: bool = True, average_attn_weights: bool = True,
                                mask_type: int | None = None) -> tuple[Instruction, Instruction]:
    """(attention output, an empty weights tensor): the weights themselves are not supported."""
    require(mask is None, "the fused multi-head attention kernel with a mask is not supported")
    require(not need_weights, "multi-head attention returning its weights (need_weights=True) is not supported")
    out = _attention(b, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias)
    return out, b.constant(np.zeros((0,), dtype=np.float32))


def transformer_encoder_layer_fwd(b: HloBuilder, src: Instruction, embed_dim: int, num_heads: int,
                                  qkv_weight: Instruction, qkv_bias: Instruction, proj_weight: Instruction,
                                  proj_bias: Instruction, use_gelu: bool, norm_first: bool, eps: float,
                                  norm_weight_1: Instruction, norm_bias_1: Instruction,
                                  norm_weight_2: Instruction, norm_bias_2: Instruction,
                                  ffn_weight_1: Instruction, ffn_bias_1: Instruction, ffn_weight_2: Instruction,
                                  ffn_bias_2: Instruction, mask: Instruction | None = None,
                                  mask_type: Any = None) -> Instruction:
    require(mask is None, "the fused transformer encoder layer kernel with a mask is not supported")
    shape = [embed_dim]

    def attention(x: Instruction) -> Instruction:
        return _attention(b, x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias)

    def feed_forward(x: Instruction) -> Instruction:
        h = linear(b, x, ffn_weight_1, ffn_bias_1)
        return linear(b, gelu(b, h) if use_gelu else relu(b, h), ffn_weight_2, ffn_bias_2)

    def norm1(x: Instruction) -> Instruction:
        return layer_norm(b, x, shape, norm_weight_1, norm_bias_1, eps)

    def norm2(x: Instruction) -> Instruction:
        return layer_norm(b, x, shape, norm_weight_2, norm_bias_2, eps)

    x = src
    if norm_first:
        x = b.binary("add", x, attention(norm1(x)))
        return b.binary("add", x, feed_forward(norm2(x)))
    x = norm1(b.binary("add", x, attention(x)))
    return norm2(b.binary("add", x, feed_forward(x)))


RULES = {
    "aten._native_multi_head_attention.default": native_multi_head_attention,
    "aten._transformer_encoder_layer_fwd.default": transformer_encoder_layer_fwd,
}
