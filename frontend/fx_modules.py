"""fx capture: ``nn.Module`` types recorded as one ``call_module`` node, and the ATen op each lowers as.

An adapter is called as ``adapter(module, param, *call_args, **call_kwargs)``; ``param(name)`` turns a
parameter or buffer of the module into an operand (a constant named by its state_dict key) and returns
None for a missing one (``bias=False``). A subclass matches its base's entry only if it does not
override ``forward`` (see ``fx_aliases.is_leaf_module``); modules without an entry are traced through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from hlo.errors import LoweringError

ModuleAdapter = Callable[..., tuple[tuple, dict]]
Param = Callable[[str], Any]


def _act(m: nn.Module, p: Param, x: Any) -> tuple[tuple, dict]:
    return (x,), {}


def _linear(m: nn.Linear, p: Param, x: Any) -> tuple[tuple, dict]:
    return (x, p("weight"), p("bias")), {}


def _layer_norm(m: nn.LayerNorm, p: Param, x: Any) -> tuple[tuple, dict]:
    return (x, list(m.normalized_shape), p("weight"), p("bias"), m.eps), {}


def _rms_norm(m: nn.RMSNorm, p: Param, x: Any) -> tuple[tuple, dict]:
    return (x, list(m.normalized_shape), p("weight"), m.eps), {}


def _group_norm(m: nn.GroupNorm, p: Param, x: Any) -> tuple[tuple, dict]:
    return (x, m.num_groups, p("weight"), p("bias"), m.eps), {}


def _batch_norm(m: nn.modules.batchnorm._BatchNorm, p: Param, x: Any) -> tuple[tuple, dict]:
    """Inference: the running statistics (a module without them would normalize with batch statistics)."""
    if m.running_mean is None:
        raise LoweringError(f"{type(m).__name__}(track_running_stats=False) normalizes with batch statistics, "
                            "which is not supported")
    return (x, p("weight"), p("bias"), p("running_mean"), p("running_var"), False, m.momentum or 0.0, m.eps,
            False), {}


def conv_padding(padding: Any, kernel: tuple[int, ...], dilation: tuple[int, ...]) -> list[int]:
    """torch's conv padding (ints, or 'valid' / 'same') as one symmetric padding per spatial dim."""
    if padding == "valid":
        return [0] * len(kernel)
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        if any(t % 2 for t in totals):
            raise LoweringError("padding='same' with an even kernel pads unevenly, which is not supported")
        return [t // 2 for t in totals]
    return [int(padding)] * len(kernel) if isinstance(padding, int) else [int(v) for v in padding]


def _conv(m: nn.Conv1d | nn.Conv2d, p: Param, x: Any) -> tuple[tuple, dict]:
    if m.padding_mode != "zeros":
        raise LoweringError(f"{type(m).__name__}(padding_mode={m.padding_mode!r}) is not supported")
    padding = conv_padding(m.padding, m.kernel_size, m.dilation)
    return (x, p("weight"), p("bias"), list(m.stride), padding, list(m.dilation), False,
            [0] * len(m.kernel_size), m.groups), {}


def _conv_transpose(m: nn.ConvTranspose1d | nn.ConvTranspose2d, p: Param, x: Any,
                    output_size: Any = None) -> tuple[tuple, dict]:
    if output_size is not None:
        raise LoweringError(f"{type(m).__name__} with output_size is not supported")
    return (x, p("weight"), p("bias"), list(m.stride), list(m.padding), list(m.dilation), True,
            list(m.output_padding), m.groups), {}


def _max_pool(m: nn.MaxPool1d | nn.MaxPool2d, p: Param, x: Any) -> tuple[tuple, dict]:
    if m.return_indices:
        raise LoweringError(f"{type(m).__name__}(return_indices=True) is not supported")
    return (x, m.kernel_size, m.stride or m.kernel_size, m.padding, m.dilation, m.ceil_mode), {}


def _avg_pool1d(m: nn.AvgPool1d, p: Param, x: Any) -> tuple[tuple, dict]:
    return (x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad), {}


def _avg_pool2d(m: nn.AvgPool2d, p: Param, x: Any) -> tuple[tuple, dict]:
    return (x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad, m.divisor_override), {}


def _embedding(m: nn.Embedding, p: Param, x: Any) -> tuple[tuple, dict]:
    if m.max_norm is not None:
        raise LoweringError("embedding with max_norm (renormalizes the weight in place) is not supported")
    return (p("weight"), x), {}


def _softmax(m: nn.Softmax | nn.LogSoftmax, p: Param, x: Any) -> tuple[tuple, dict]:
    if m.dim is None:
        raise LoweringError(f"{type(m).__name__} without an explicit dim is not supported")
    return (x, m.dim), {}


MODULES: dict[type, tuple[str, ModuleAdapter]] = {
    nn.Linear: ("aten.linear.default", _linear),
    nn.Conv1d: ("aten.convolution.default", _conv),
    nn.Conv2d: ("aten.convolution.default", _conv),
    nn.ConvTranspose1d: ("aten.convolution.default", _conv_transpose),
    nn.ConvTranspose2d: ("aten.convolution.default", _conv_transpose),
    nn.LayerNorm: ("aten.layer_norm.default", _layer_norm),
    nn.RMSNorm: ("aten.rms_norm.default", _rms_norm),
    nn.GroupNorm: ("aten.group_norm.default", _group_norm),
    nn.BatchNorm1d: ("aten.batch_norm.default", _batch_norm),
    nn.BatchNorm2d: ("aten.batch_norm.default", _batch_norm),
    nn.MaxPool1d: ("aten.max_pool1d.default", _max_pool),
    nn.MaxPool2d: ("aten.max_pool2d.default", _max_pool),
    nn.AvgPool1d: ("aten.avg_pool1d.default", _avg_pool1d),
    nn.AvgPool2d: ("aten.avg_pool2d.default", _avg_pool2d),
    nn.AdaptiveAvgPool1d: ("aten.adaptive_avg_pool1d.default", lambda m, p, x: ((x, m.output_size), {})),
    nn.AdaptiveAvgPool2d: ("aten.adaptive_avg_pool2d.default", lambda m, p, x: ((x, m.output_size), {})),
    nn.ReLU: ("aten.relu.default", _act),
    nn.GELU: ("aten.gelu.default", lambda m, p, x: ((x,), {"approximate": m.approximate})),
    nn.Tanh: ("aten.tanh.default", _act),
    nn.Sigmoid: ("aten.sigmoid.default", _act),
    nn.SiLU: ("aten.silu.default", _act),
    nn.Mish: ("aten.mish.default", _act),
    nn.Hardswish: ("aten.hardswish.default", _act),
    nn.Hardsigmoid: ("aten.hardsigmoid.default", _act),
    nn.Softplus: ("aten.softplus.default", lambda m, p, x: ((x, m.beta, m.threshold), {})),
    nn.GLU: ("aten.glu.default", lambda m, p, x: ((x, m.dim), {})),
    nn.LeakyReLU: ("aten.leaky_relu.default", lambda m, p, x: ((x, m.negative_slope), {})),
    nn.Hardtanh: ("aten.hardtanh.default", lambda m, p, x: ((x, m.min_val, m.max_val), {})),
    nn.ELU: ("aten.elu.default", lambda m, p, x: ((x, m.alpha), {})),
    nn.Softmax: ("aten.softmax.int", _softmax),
    nn.LogSoftmax: ("aten.log_softmax.int", _softmax),
    nn.Flatten: ("aten.flatten.using_ints", lambda m, p, x: ((x, m.start_dim, m.end_dim), {})),
    nn.Unflatten: ("aten.unflatten.int", lambda m, p, x: ((x, m.dim, list(m.unflattened_size)), {})),
    nn.Dropout: ("aten.clone.default", _act),
    nn.Dropout1d: ("aten.clone.default", _act),
    nn.Dropout2d: ("aten.clone.default", _act),
    nn.Embedding: ("aten.embedding.default", _embedding),
    nn.Identity: ("aten.clone.default", _act),
}
