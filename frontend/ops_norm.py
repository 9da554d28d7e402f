"""Normalizations: layer_norm, batch_norm (inference), group_norm, instance_norm, rms_norm.

Each is written out in reductions and elementwise ops over the normalized dims: ``x - mean`` and
``rsqrt(var + eps)`` broadcast back, then the affine weight and bias broadcast along their dims.
Half-precision inputs are normalized in f32 and converted back, as torch does on CPU. Batch norm
uses the running statistics (it is an affine map per channel at inference); in training mode it would
update them, which a compiled inference graph cannot do, so it is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hlo.ir import Instruction

from .builder import HLO_TO_TORCH, HloBuilder
from .ops_common import float_dtype, keep_dims, require
from .ops_reduce import expand_back, mean_over

_UPCAST = ("f16", "bf16")


def _compute_dtype(x: Instruction) -> tuple[str, str]:
    """(result dtype, dtype to compute in) of a normalization of ``x``."""
    out = float_dtype(x)
    return out, "f32" if out in _UPCAST else out


def _along(b: HloBuilder, v: Instruction | None, x: Instruction, dim: int) -> Instruction | None:
    """A per-channel vector (weight, bias, statistics) broadcast along ``dim`` of ``x``."""
    if v is None:
        return None
    return b.broadcast(b.convert(b.reshape(v, [v.shape.size]), x.shape.dtype), x.shape.dims, (dim,))


def _affine(b: HloBuilder, out: Instruction, scale: Instruction | None, shift: Instruction | None) -> Instruction:
    if scale is not None:
        out = b.binary("multiply", out, scale)
    if shift is not None:
        out = b.binary("add", out, shift)
    return out


def _normalize(b: HloBuilder, x: Instruction, dims: list[int],
               eps: float) -> tuple[Instruction, Instruction, Instruction]:
    """((x - mean) * rstd, mean, rstd) with mean/rstd reduced over ``dims``."""
    mean_r = mean_over(b, x, dims)
    centered = b.binary("subtract", x, expand_back(b, mean_r, x.shape.dims, dims))
    var_r = mean_over(b, b.binary("multiply", centered, centered), dims)
    rstd_r = b.unary("rsqrt", b.binary("add", var_r, b.scalar(eps, x.shape.dtype)))
    return b.binary("multiply", centered, expand_back(b, rstd_r, x.shape.dims, dims)), mean_r, rstd_r


# ---- layer norm ---------------------------------------------------------------------------------
def _layer_norm(b: HloBuilder, x: Instruction, normalized_shape: Sequence[int], weight: Instruction | None,
                bias: Instruction | None, eps: float) -> tuple[Instruction, Instruction, Instruction]:
    """(out, mean, rstd) over the trailing ``normalized_shape`` dims; mean/rstd keep those dims as 1."""
    n = len(normalized_shape)
    require(tuple(x.shape.dims[x.shape.rank - n:]) == tuple(normalized_shape),
            f"normalized_shape {list(normalized_shape)} does not match input {list(x.shape.dims)}")
    out_dtype, compute = _compute_dtype(x)
    x = b.convert(x, compute)
    dims = list(range(x.shape.rank - n, x.shape.rank))
    out, mean_r, rstd_r = _normalize(b, x, dims, eps)
    scale = None if weight is None else b.broadcast_to(b.convert(weight, compute), x.shape.dims)
    shift = None if bias is None else b.broadcast_to(b.convert(bias, compute), x.shape.dims)
    out = _affine(b, out, scale, shift)
    return (b.convert(out, out_dtype), b.convert(keep_dims(b, mean_r, dims, x.shape.dims), out_dtype),
            b.convert(keep_dims(b, rstd_r, dims, x.shape.dims), out_dtype))  # torch: stats in x's dtype


def layer_norm(b: HloBuilder, x: Instruction, normalized_shape: Sequence[int],
               weight: Instruction | None = None, bias: Instruction | None = None, eps: float = 1e-5,
               cudnn_enable: bool = True) -> Instruction:
    return _layer_norm(b, x, normalized_shape, weight, bias, eps)[0]


def native_layer_norm(b: HloBuilder, x: Instruction, normalized_shape: Sequence[int],
                      weight: Instruction | None, bias: Instruction | None,
                      eps: float) -> tuple[Instruction, Instruction, Instruction]:
    return _layer_norm(b, x, normalized_shape, weight, bias, eps)


def rms_norm(b: HloBuilder, x: Instruction, normalized_shape: Sequence[int], weight: Instruction | None = None,
             eps: float | None = None) -> Instruction:
    """``x * rsqrt(mean(x^2) + eps) * weight`` over the trailing dims (eps defaults to the dtype's epsilon)."""
    n = len(normalized_shape)
    require(tuple(x.shape.dims[x.shape.rank - n:]) == tuple(normalized_shape),
            f"normalized_shape {list(normalized_shape)} does not match input {list(x.shape.dims)}")
    out_dtype, compute = _compute_dtype(x)
    if eps is None:
        eps = float(torch.finfo(HLO_TO_TORCH[out_dtype]).eps)
    x = b.convert(x, compute)
    dims = list(range(x.shape.rank - n, x.shape.rank))
    ms = mean_over(b, b.binary("multiply", x, x), dims)
    rstd = b.unary("rsqrt", b.binary("add", ms, b.scalar(eps, compute)))
    out = b.binary("multiply", x, expand_back(b, rstd, x.shape.dims, dims))
    if weight is not None:
        out = b.binary("multiply", out, b.broadcast_to(b.convert(weight, compute), x.shape.dims))
    return b.convert(out, out_dtype)


# ---- batch norm (inference) ---------------------------------------------------------------------
def _batch_norm(b: HloBuilder, x: Instruction, weight: Instruction | None, bias: Instruction | None,
                running_mean: Instruction, running_var: Instruction, eps: float) -> Instruction:
    """``(x - running_mean) * rsqrt(running_var + eps) * weight + bias`` per channel (dim 1)."""
    require(x.shape.rank >= 2, f"batch_norm input must have a channel dim, got {list(x.shape.dims)}")
    out_dtype, compute = _compute_dtype(x)
    x = b.convert(x, compute)
    var = b.convert(running_var, compute)
    rstd = b.unary("rsqrt", b.binary("add", var, b.scalar(eps, compute)))
    out = b.binary("subtract", x, _along(b, running_mean, x, 1))
    out = b.binary("multiply", out, _along(b, rstd, x, 1))
    return b.convert(_affine(b, out, _along(b, weight, x, 1), _along(b, bias, x, 1)), out_dtype)


def batch_norm(b: HloBuilder, x: Instruction, weight: Instruction | None, bias: Instruction | None,
               running_mean: Instruction | None, running_var: Instruction | None, training: bool,
               momentum: float, eps: float, cudnn_enabled: bool) -> Instruction:
    require(not training and running_mean is not None and running_var is not None,
            "batch_norm with batch statistics (training mode, or no running stats) is not supported: "
            "compiled graphs are for inference")
    return _batch_norm(b, x, weight, bias, running_mean, running_var, eps)


def batch_norm_no_training(b: HloBuilder, x: Instruction, weight: Instruction | None, bias: Instruction | None,
                           running_mean: Instruction, running_var: Instruction, momentum: float,
                           eps: float) -> tuple[Instruction, Instruction, Instruction]:
    """``_native_batch_norm_legit_no_training``: (out, empty, empty) as torch returns it."""
    out = _batch_norm(b, x, weight, bias, running_mean, running_var, eps)
    empty = b.constant(np.zeros((0,), dtype=np.float32))
    return out, empty, empty


# ---- group norm ---------------------------------------------------------------------------------
def _group_norm(b: HloBuilder, x: Instruction, groups: int, weight: Instruction | None, bias: Instruction | None,
                eps: float) -> tuple[Instruction, Instruction, Instruction]:
    """(out, mean, rstd): statistics over each group of channels and all spatial positions; mean/rstd
    are (N, groups)."""
    require(x.shape.rank >= 2, f"group_norm input must have a channel dim, got {list(x.shape.dims)}")
    n, c = x.shape.dims[:2]
    require(groups > 0 and c % groups == 0, f"{c} channels do not split into {groups} groups")
    out_dtype, compute = _compute_dtype(x)
    full = x.shape.dims
    x = b.convert(b.reshape(x, [n, groups, x.shape.size // (n * groups)]), compute)
    out, mean_r, rstd_r = _normalize(b, x, [2], eps)
    out = b.reshape(out, full)
    out = _affine(b, out, _along(b, weight, out, 1), _along(b, bias, out, 1))
    return b.convert(out, out_dtype), b.convert(mean_r, out_dtype), b.convert(rstd_r, out_dtype)


def group_norm(b: HloBuilder, x: Instruction, num_groups: int, weight: Instruction | None = None,
               bias: Instruction | None = None, eps: float = 1e-5, cudnn_enabled: bool = True) -> Instruction:
    return _group_norm(b, x, num_groups, weight, bias, eps)[0]


def native_group_norm(b: HloBuilder, x: Instruction, weight: Instruction | None, bias: Instruction | None,
                      n: int, c: int, hxw: int, group: int, eps: float) -> tuple[Instruction, Instruction, Instruction]:
    return _group_norm(b, x, group, weight, bias, eps)


def instance_norm(b: HloBuilder, x: Instruction, weight: Instruction | None, bias: Instruction | None,
                  running_mean: Instruction | None, running_var: Instruction | None, use_input_stats: bool,
                  momentum: float, eps: float, cudnn_enabled: bool) -> Instruction:
    """Statistics of each (sample, channel) over its spatial positions; or the running ones, as batch
    norm does, when the module tracks them and is in eval mode."""
    if not use_input_stats:
        require(running_mean is not None and running_var is not None, "instance_norm without statistics")
        return _batch_norm(b, x, weight, bias, running_mean, running_var, eps)
    require(x.shape.rank >= 3, f"instance_norm needs spatial dims, got {list(x.shape.dims)}")
    out_dtype, compute = _compute_dtype(x)
    x = b.convert(x, compute)
    out, _, _ = _normalize(b, x, list(range(2, x.shape.rank)), eps)
    return b.convert(_affine(b, out, _along(b, weight, x, 1), _along(b, bias, x, 1)), out_dtype)


def dropout(b: HloBuilder, x: Instruction, p: float, train: Any) -> Instruction:
    """Identity at inference; dropout in training mode draws random numbers and is refused."""
    require(not train or p == 0, f"dropout in training mode (p={p}) is not supported: compiled graphs are for "
                                 "inference")
    return x


RULES = {
    "aten.layer_norm.default": layer_norm,
    "aten.native_layer_norm.default": native_layer_norm,
    "aten.rms_norm.default": rms_norm,
    "aten.batch_norm.default": batch_norm,
    "aten._native_batch_norm_legit_no_training.default": batch_norm_no_training,
    "aten.group_norm.default": group_norm,
    "aten.native_group_norm.default": native_group_norm,
    "aten.instance_norm.default": instance_norm,
    "aten.dropout.default": dropout,
}
