"""The interpreter's windowed ops: ``convolution`` and ``reduce-window`` (numpy, one strided view per
window position, so the Python loop runs over the few window positions, not over the output)."""

from __future__ import annotations

import numpy as np

from hlo.interpreter.core import Op, Value, accumulator, call, pad_array, reducer_ufunc
from hlo.ir import Instruction, WindowDim
from hlo.shape_window import conv_dims, window_of, window_output_size


def _window_slices(position: tuple[int, ...], dims: tuple[WindowDim, ...], out: list[int]) -> tuple[slice, ...]:
    """For a window position, the strided slice of the padded input that every output position reads."""
    return tuple(slice(k * w.rhs_dilate, k * w.rhs_dilate + (o - 1) * w.stride + 1, w.stride)
                 for k, w, o in zip(position, dims, out, strict=True))


def _convolution(inst: Instruction, ops: list) -> np.ndarray:
    lhs, rhs = ops
    d = conv_dims(inst.attrs)
    n = len(d.lhs_spatial)
    window = window_of(inst.attrs, n, "the convolution")
    groups, batch_groups = inst.attrs.get("feature_group_count", 1), inst.attrs.get("batch_group_count", 1)
    acc = np.result_type(accumulator(lhs), accumulator(rhs))
    x = lhs.transpose((d.lhs_batch, d.lhs_feature, *d.lhs_spatial)).astype(acc)
    k = rhs.transpose((d.rhs_output, d.rhs_input, *d.rhs_spatial)).astype(acc)
    flipped = tuple(2 + i for i, w in enumerate(window.dims) if w.reversal)
    if flipped:
        k = np.flip(k, axis=flipped)
    x = pad_array(x, 0, [(0, 0, 0)] * 2 + [(w.pad_low, w.pad_high, w.lhs_dilate - 1) for w in window.dims])
    out = [window_output_size(lhs.shape[s], w) for s, w in zip(d.lhs_spatial, window.dims, strict=True)]
    batch, features = x.shape[:2]
    # (group, batch in group, input features in group, spatial...) x (group, outputs in group, inputs, kernel...)
    if batch_groups > 1:
        xg = x.reshape(batch_groups, batch // batch_groups, features, *x.shape[2:])
        g = batch_groups
    else:
        xg = np.moveaxis(x.reshape(batch, groups, features // groups, *x.shape[2:]), 1, 0)
        g = groups
    kg = k.reshape(g, k.shape[0] // g, *k.shape[1:])
    result = np.zeros((g, xg.shape[1], kg.shape[1], *out), acc)
    for position in np.ndindex(*k.shape[2:]):
        view = xg[(slice(None),) * 3 + _window_slices(position, window.dims, out)]
        result += np.einsum("gbi...,goi->gbo...", view, kg[(slice(None),) * 3 + position])
    merged = np.moveaxis(result, 0, 1).reshape(result.shape[1], g * kg.shape[1], *out)  # (batch, feature, sp..)
    source = [0] * (n + 2)
    source[d.out_batch], source[d.out_feature] = 0, 1
    for i, axis in enumerate(d.out_spatial):
        source[axis] = 2 + i
    return merged.transpose(source)


def _reduce_window(inst: Instruction, ops: list) -> Value:
    n = len(ops) // 2
    inputs, inits = ops[:n], ops[n:]
    window = window_of(inst.attrs, inputs[0].ndim, "the operand")
    comp = inst.attrs["to_apply"]
    ufunc = reducer_ufunc(comp) if n == 1 else None
    config = [(w.pad_low, w.pad_high, w.lhs_dilate - 1) for w in window.dims]
    if ufunc is not None:
        dtype = accumulator(inputs[0])
        inputs, inits = [inputs[0].astype(dtype)], [inits[0].astype(dtype)]
    padded = [pad_array(x, init[()], config) for x, init in zip(inputs, inits, strict=True)]
    valid = pad_array(np.ones(inputs[0].shape, np.bool_), False, config)  # padding and holes are skipped
    out = [window_output_size(size, w) for size, w in zip(inputs[0].shape, window.dims, strict=True)]
    acc = [np.full(out, init[()], init.dtype) for init in inits]
    for position in np.ndindex(*(w.size for w in window.dims)):
        slices = _window_slices(position, window.dims, out)
        views = [p[slices] for p in padded]
        if ufunc is not None:
            new = [ufunc(acc[0], views[0])]
        else:
            value = call(comp, acc + views)
            new = list(value) if isinstance(value, tuple) else [value]
        acc = [np.where(valid[slices], v, a) for v, a in zip(new, acc, strict=True)]
    return acc[0] if n == 1 else tuple(acc)


OPS: dict[str, Op] = {"convolution": _convolution, "reduce-window": _reduce_window}
