"""Map torch.fx nodes onto the ATen lowering rules.

fx tracing records what the user wrote: ``call_module`` (nn.Linear, nn.Conv2d...: fx_modules.py),
``call_function`` (torch.* / F.* / operator.*) and ``call_method`` (tensor methods). Each alias names the
ATen overload whose rule lowers it (or a function picking the overload from the call, e.g. torch.max(x)
vs torch.max(x, dim)) and an adapter turning the Python call's arguments into that overload's
arguments. torch.X, torch._C._nn.X and Tensor.X whose ATen op is aten.X.default with the same
signature need no entry (``_same_named_op``). Module parameters become ``Param`` references that the
lowering turns into constants named ``<module path>.<parameter>`` (the state_dict key).
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

from hlo.errors import LoweringError

from .fx_modules import MODULES, conv_padding
from .fx_trace import is_inplace_method
from .graph import Call

Adapter = Callable[..., tuple[tuple, dict]]
OpName = str | Callable[..., str]


@dataclass(frozen=True)
class Param:
    """A module parameter or buffer used as an operand: ``key`` is its state_dict name."""

    key: str
    tensor: torch.Tensor


def _same(*args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    return args, kwargs


def _first(x: Any, *ignored: Any, **ignored_kw: Any) -> tuple[tuple, dict]:
    return (x,), {}


def _sizes(x: Any, *size: Any) -> tuple[tuple, dict]:
    """Methods taking a size as varargs or as one sequence: x.view(3, -1) == x.view((3, -1))."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    return (x, list(size)), {}


def _softmax(x: Any, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> tuple[tuple, dict]:
    if dim is None:
        raise LoweringError("softmax without an explicit dim is not supported")
    return (x, dim, dtype), {}


def _gelu(x: Any, approximate: str = "none") -> tuple[tuple, dict]:
    return (x,), {"approximate": approximate}


def _to(x: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """x.to(dtype) / x.to(device, dtype) / x.to(other) / x.to(dtype=...): only the dtype matters."""
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
    return (x,), {"dtype": dtype}


def _type(x: Any, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> tuple[tuple, dict]:
    """x.type(dtype): a cast (x.type() without a dtype returns a string, not a tensor)."""
    if not isinstance(dtype, torch.dtype):
        raise LoweringError(f"Tensor.type({dtype!r}) is supported with a torch.dtype only")
    return (x,), {"dtype": dtype}


def _cast(dtype: torch.dtype) -> Adapter:
    return lambda x, *a, **k: ((x,), {"dtype": dtype})


def _dims_method(x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> tuple[tuple, dict]:
    return (x, dim, keepdim), {"dtype": dtype}


def _dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> tuple[tuple, dict]:
    """Identity at inference; F.dropout defaults to training=True, which would change the values."""
    if training and p > 0:
        raise LoweringError(f"F.dropout with training=True (p={p}) is not supported: pass training=self.training")
    return (x,), {}


def _embedding(x: Any, weight: Any, padding_idx: Any = None, max_norm: Any = None,
               *ignored: Any, **ignored_kw: Any) -> tuple[tuple, dict]:
    if max_norm is not None:
        raise LoweringError("embedding with max_norm (renormalizes the weight in place) is not supported")
    return (weight, x), {}


def _pad(x: Any, pad: Any, mode: str = "constant", value: Any = None) -> tuple[tuple, dict]:
    return (x, list(pad), mode, value), {}


def _arange(*args: Any, dtype: Any = None, **ignored: Any) -> tuple[tuple, dict]:
    """torch.arange(end) / (start, end) / (start, end, step) -> arange.start_step."""
    start, end, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    return (start, end, step), {"dtype": dtype}


def _div(x: Any, y: Any, *, rounding_mode: str | None = None) -> tuple[tuple, dict]:
    return (x, y), {"rounding_mode": rounding_mode}


def _factory(*size: Any, dtype: Any = None, **ignored: Any) -> tuple[tuple, dict]:
    """torch.zeros / torch.ones (size as varargs or one sequence; layout, device... do not matter)."""
    (_, sizes), _ = _sizes(None, *size)
    return (sizes,), {"dtype": dtype}


def _like(x: Any, dtype: Any = None, **ignored: Any) -> tuple[tuple, dict]:
    return (x,), {"dtype": dtype}


def _new(x: Any, *size: Any, dtype: Any = None, **ignored: Any) -> tuple[tuple, dict]:
    """x.new_zeros(2, 3) / x.new_ones((2, 3))."""
    return (*_sizes(x, *size)[0],), {"dtype": dtype}


def _new_full(x: Any, size: Any, fill_value: Any, dtype: Any = None, **ignored: Any) -> tuple[tuple, dict]:
    return (x, list(size), fill_value), {"dtype": dtype}


def _dims_varargs(x: Any, *dims: Any) -> tuple[tuple, dict]:
    """x.flip(0, 1) == x.flip((0, 1)); x.repeat(2, 1) == x.repeat((2, 1))."""
    return _sizes(x, *dims)


def _roll(x: Any, shifts: Any, dims: Any = ()) -> tuple[tuple, dict]:
    as_list = lambda v: [v] if isinstance(v, int) else list(v)  # noqa: E731
    return (x, as_list(shifts), as_list(dims)), {}


def _einsum(equation: str, *operands: Any) -> tuple[tuple, dict]:
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return (equation, list(operands)), {}


def _round(x: Any, *, decimals: int = 0) -> tuple[tuple, dict]:
    return ((x,), {"decimals": decimals}) if decimals else ((x,), {})


def _conv(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
          groups: int = 1) -> tuple[tuple, dict]:
    """F.conv1d / F.conv2d -> convolution (strides, paddings and dilations as one value per spatial dim)."""
    n = x.meta["val"].dim() - 2
    per_dim = lambda v: [int(v)] * n if isinstance(v, int) else [int(i) for i in v]  # noqa: E731
    kernel = tuple(weight.meta["val"].shape[2:]) if isinstance(weight, fx.Node) else tuple(weight.tensor.shape[2:])
    padding = conv_padding(padding, kernel, tuple(per_dim(dilation)))
    return (x, weight, bias, per_dim(stride), padding, per_dim(dilation), False, [0] * n, groups), {}


def _max_pool(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
              ceil_mode: bool = False, return_indices: bool = False) -> tuple[tuple, dict]:
    if return_indices:
        raise LoweringError("max pooling with return_indices=True is not supported")
    return (x, kernel_size, stride or [], padding, dilation, ceil_mode), {}


def _clamp_overload(x: Any, min: Any = None, max: Any = None) -> str:
    return "aten.clamp.Tensor" if isinstance(min, fx.Node) or isinstance(max, fx.Node) else "aten.clamp.default"


def _norm(x: Any, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None,
          **ignored: Any) -> tuple[tuple, dict]:
    """torch.norm / x.norm (vector norms: p a number, "fro" being 2) -> linalg_vector_norm."""
    if isinstance(p, str) and p != "fro":
        raise LoweringError(f"norm with p={p!r} (a matrix norm) is not supported")
    return (x, 2 if p in ("fro", None) else p, dim, keepdim), {"dtype": dtype}


def _vector_norm(x: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
                 dtype: Any = None, **ignored: Any) -> tuple[tuple, dict]:
    return (x, ord, dim, keepdim), {"dtype": dtype}


def _conv_transpose(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                    output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> tuple[tuple, dict]:
    """F.conv_transpose1d / 2d -> convolution(transposed=True)."""
    n = x.meta["val"].dim() - 2
    per_dim = lambda v: [int(v)] * n if isinstance(v, int) else [int(i) for i in v]  # noqa: E731
    return (x, weight, bias, per_dim(stride), per_dim(padding), per_dim(dilation), True, per_dim(output_padding),
            groups), {}


def _reduce_dim(x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> tuple[tuple, dict]:
    """x.prod(dim) / x.any(dim) / torch.max(x, dim): the dim overloads; without a dim, the whole tensor."""
    if dim is None:
        return (x,), ({"dtype": dtype} if dtype is not None else {})
    return (x, dim, keepdim), ({"dtype": dtype} if dtype is not None else {})


def _overload(whole: str, along: str, other: str | None = None) -> Callable[..., str]:
    """Pick the overload of a reduction from its call: no dim (``whole``), a dim (``along``), or a second
    tensor (``other``: torch.max(x, y) is maximum)."""
    def pick(x: Any, *args: Any, **kwargs: Any) -> str:
        dim = kwargs.get("dim", args[0] if args else None)
        if other is not None and isinstance(dim, fx.Node):
            return other
        return whole if dim is None else along

    return pick


def _by_operand(tensor_op: str, scalar_op: str) -> Callable[..., str]:
    """Pick the Tensor or the Scalar overload from the second operand."""
    return lambda x, y, *a, **k: tensor_op if isinstance(y, fx.Node) else scalar_op


def _var(x: Any, dim: Any = None, unbiased: bool = True, keepdim: bool = False, *,
         correction: Any = None) -> tuple[tuple, dict]:
    correction = correction if correction is not None else (1 if unbiased else 0)
    return (x, dim), {"correction": correction, "keepdim": keepdim}


def _layer_norm(x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None,
                eps: float = 1e-5) -> tuple[tuple, dict]:
    return (x, list(normalized_shape), weight, bias, eps), {}


def _flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> tuple[tuple, dict]:
    return (x, start_dim, end_dim), {}


def _sort_overload(packet: str) -> Callable[..., str]:
    """torch.sort / argsort: the .stable overload when `stable` is given (its schema takes it)."""
    return lambda *args, **kwargs: f"aten.{packet}.{'stable' if 'stable' in kwargs else 'default'}"


def _sort_args(x: Any, dim: int = -1, descending: bool = False, **kwargs: Any) -> tuple[tuple, dict]:
    return (x,), {"dim": dim, "descending": descending, **kwargs}


# torch.* / F.* / operator.* -> (ATen overload or overload picker, adapter).
FUNCTIONS: dict[Any, tuple[OpName, Adapter]] = {
    operator.add: ("aten.add.Tensor", _same),
    operator.sub: ("aten.sub.Tensor", _same),
    operator.mul: ("aten.mul.Tensor", _same),
    operator.truediv: ("aten.div.Tensor", _same),
    operator.floordiv: ("aten.div.Tensor_mode", lambda x, y: ((x, y), {"rounding_mode": "floor"})),
    operator.mod: (_by_operand("aten.remainder.Tensor", "aten.remainder.Scalar"), _same),
    operator.neg: ("aten.neg.default", _same),
    operator.matmul: ("aten.matmul.default", _same),
    operator.pow: ("aten.pow.Tensor_Scalar", _same),
    operator.invert: ("aten.bitwise_not.default", _same),
    operator.and_: ("aten.bitwise_and.Tensor", _same),
    operator.or_: ("aten.bitwise_or.Tensor", _same),
    operator.xor: ("aten.bitwise_xor.Tensor", _same),
    operator.gt: ("aten.gt.Tensor", _same),
    operator.ge: ("aten.ge.Tensor", _same),
    operator.lt: ("aten.lt.Tensor", _same),
    operator.le: ("aten.le.Tensor", _same),
    operator.eq: ("aten.eq.Tensor", _same),
    operator.ne: ("aten.ne.Tensor", _same),
    torch.add: ("aten.add.Tensor", _same),
    torch.sub: ("aten.sub.Tensor", _same),
    torch.mul: ("aten.mul.Tensor", _same),
    torch.div: ("aten.div.Tensor_mode", _div),
    torch.remainder: (_by_operand("aten.remainder.Tensor", "aten.remainder.Scalar"), _same),
    torch.fmod: (_by_operand("aten.fmod.Tensor", "aten.fmod.Scalar"), _same),
    torch.softmax: ("aten.softmax.int", _softmax),
    torch.log_softmax: ("aten.log_softmax.int", _softmax),
    torch.flatten: ("aten.flatten.using_ints", _flatten),
    torch.unflatten: ("aten.unflatten.int", _same),
    torch.transpose: ("aten.transpose.int", _same),
    torch.movedim: ("aten.movedim.int", _same),
    torch.reshape: ("aten.view.default", _sizes),
    torch.cat: ("aten.cat.default", _same),
    torch.sum: ("aten.sum.dim_IntList", _dims_method),
    torch.mean: ("aten.mean.dim", _dims_method),
    torch.prod: (_overload("aten.prod.default", "aten.prod.dim_int"), _reduce_dim),
    torch.max: (_overload("aten.max.default", "aten.max.dim", "aten.maximum.default"), _reduce_dim),
    torch.min: (_overload("aten.min.default", "aten.min.dim", "aten.minimum.default"), _reduce_dim),
    torch.any: (_overload("aten.any.default", "aten.any.dim"), _reduce_dim),
    torch.all: (_overload("aten.all.default", "aten.all.dim"), _reduce_dim),
    torch.var: ("aten.var.correction", _var),
    torch.std: ("aten.std.correction", _var),
    torch.var_mean: ("aten.var_mean.correction", _var),
    torch.std_mean: ("aten.std_mean.correction", _var),
    torch.round: (lambda x, **k: "aten.round.decimals" if k.get("decimals") else "aten.round.default", _round),
    torch.where: ("aten.where.self", _same),
    torch.split: ("aten.split.Tensor", lambda x, sizes, dim=0: ((x, sizes, dim), {})),
    torch.pow: (_by_operand("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar"), _same),
    torch.einsum: ("aten.einsum.default", _einsum),
    torch.sort: (_sort_overload("sort"), _sort_args),
    torch.argsort: (_sort_overload("argsort"), _sort_args),
    torch.clamp: (_clamp_overload, _same),
    torch.lstm: ("aten.lstm.input", _same),
    torch.gru: ("aten.gru.input", _same),
    torch.norm: ("aten.linalg_vector_norm.default", _norm),
    torch.linalg.vector_norm: ("aten.linalg_vector_norm.default", _vector_norm),
    torch._C._nn.upsample_nearest1d: ("aten.upsample_nearest1d.vec", _same),
    torch._C._nn.upsample_nearest2d: ("aten.upsample_nearest2d.vec", _same),
    torch._C._nn.upsample_linear1d: ("aten.upsample_linear1d.vec", _same),
    torch._C._nn.upsample_bilinear2d: ("aten.upsample_bilinear2d.vec", _same),
    torch.unbind: ("aten.unbind.int", _same),
    torch.roll: ("aten.roll.default", _roll),
    torch.arange: ("aten.arange.start_step", _arange),
    torch.zeros: ("aten.zeros.default", _factory),
    torch.ones: ("aten.ones.default", _factory),
    torch.zeros_like: ("aten.zeros_like.default", _like),
    torch.ones_like: ("aten.ones_like.default", _like),
    F.relu: ("aten.relu.default", _first),
    F.gelu: ("aten.gelu.default", _gelu),
    F.silu: ("aten.silu.default", _first),
    F.sigmoid: ("aten.sigmoid.default", _first),
    F.tanh: ("aten.tanh.default", _first),
    F.linear: ("aten.linear.default", _same),
    F.conv1d: ("aten.convolution.default", _conv),
    F.conv2d: ("aten.convolution.default", _conv),
    F.conv_transpose1d: ("aten.convolution.default", _conv_transpose),
    F.conv_transpose2d: ("aten.convolution.default", _conv_transpose),
    F.max_pool1d: ("aten.max_pool1d.default", _max_pool),
    F.max_pool2d: ("aten.max_pool2d.default", _max_pool),
    F.softmax: ("aten.softmax.int", _softmax),
    F.log_softmax: ("aten.log_softmax.int", _softmax),
    F.layer_norm: ("aten.layer_norm.default", _layer_norm),
    F.embedding: ("aten.embedding.default", _embedding),
    F.pad: ("aten.pad.default", _pad),
    F.dropout: ("aten.clone.default", _dropout),
    F.leaky_relu: ("aten.leaky_relu.default", lambda x, negative_slope=0.01, inplace=False: ((x, negative_slope), {})),
    F.elu: ("aten.elu.default", lambda x, alpha=1.0, inplace=False: ((x, alpha), {})),
    F.relu6: ("aten.hardtanh.default", lambda x, inplace=False: ((x, 0.0, 6.0), {})),
    F.hardtanh: ("aten.hardtanh.default",
                 lambda x, min_val=-1.0, max_val=1.0, inplace=False: ((x, min_val, max_val), {})),
    F.scaled_dot_product_attention: ("aten.scaled_dot_product_attention.default", _same),
}

# Tensor methods -> (ATen overload or overload picker, adapter)
METHODS: dict[str, tuple[OpName, Adapter]] = {
    "add": ("aten.add.Tensor", _same),
    "__add__": ("aten.add.Tensor", _same),
    "__radd__": ("aten.add.Tensor", _same),
    "__mul__": ("aten.mul.Tensor", _same),
    "__rmul__": ("aten.mul.Tensor", _same),
    "__sub__": ("aten.sub.Tensor", _same),
    "__rsub__": ("aten.rsub.Scalar", _same),
    "__truediv__": ("aten.div.Tensor", _same),
    "__and__": ("aten.bitwise_and.Tensor", _same),
    "__or__": ("aten.bitwise_or.Tensor", _same),
    "__xor__": ("aten.bitwise_xor.Tensor", _same),
    "__invert__": ("aten.bitwise_not.default", _same),
    "__neg__": ("aten.neg.default", _same),
    "__gt__": ("aten.gt.Tensor", _same),
    "__lt__": ("aten.lt.Tensor", _same),
    "__ge__": ("aten.ge.Tensor", _same),
    "__le__": ("aten.le.Tensor", _same),
    "__eq__": ("aten.eq.Tensor", _same),
    "__ne__": ("aten.ne.Tensor", _same),
    "sub": ("aten.sub.Tensor", _same),
    "mul": ("aten.mul.Tensor", _same),
    "div": ("aten.div.Tensor_mode", _div),
    "remainder": (_by_operand("aten.remainder.Tensor", "aten.remainder.Scalar"), _same),
    "fmod": (_by_operand("aten.fmod.Tensor", "aten.fmod.Scalar"), _same),
    "softmax": ("aten.softmax.int", _softmax),
    "log_softmax": ("aten.log_softmax.int", _softmax),
    "view": ("aten.view.default", _sizes),
    "reshape": ("aten.view.default", _sizes),
    "expand": ("aten.expand.default", _sizes),
    "permute": ("aten.permute.default", _sizes),
    "repeat": ("aten.repeat.default", _dims_varargs),
    "flip": ("aten.flip.default", _dims_varargs),
    "roll": ("aten.roll.default", _roll),
    "transpose": ("aten.transpose.int", _same),
    "movedim": ("aten.movedim.int", _same),
    "flatten": ("aten.flatten.using_ints", _flatten),
    "unflatten": ("aten.unflatten.int", _same),
    "squeeze": ("aten.squeeze.dims", lambda x, dim=None: ((x, dim), {})),
    "contiguous": ("aten.clone.default", _first),
    "detach": ("aten.clone.default", _first),
    "sum": ("aten.sum.dim_IntList", _dims_method),
    "mean": ("aten.mean.dim", _dims_method),
    "prod": (_overload("aten.prod.default", "aten.prod.dim_int"), _reduce_dim),
    "max": (_overload("aten.max.default", "aten.max.dim", "aten.maximum.default"), _reduce_dim),
    "sort": (_sort_overload("sort"), _sort_args),
    "argsort": (_sort_overload("argsort"), _sort_args),
    "min": (_overload("aten.min.default", "aten.min.dim", "aten.minimum.default"), _reduce_dim),
    "any": (_overload("aten.any.default", "aten.any.dim"), _reduce_dim),
    "all": (_overload("aten.all.default", "aten.all.dim"), _reduce_dim),
    "round": (lambda x, **k: "aten.round.decimals" if k.get("decimals") else "aten.round.default", _round),
    "split": ("aten.split.Tensor", _same),
    "unbind": ("aten.unbind.int", _same),
    "clamp": (_clamp_overload, _same),
    "norm": ("aten.linalg_vector_norm.default", _norm),
    "masked_fill": ("aten.masked_fill.Scalar", _same),
    "scatter": (lambda x, dim, index, src, **k: f"aten.scatter.{'src' if isinstance(src, fx.Node) else 'value'}",
                _same),
    "pow": (_by_operand("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar"), _same),
    "amax": ("aten.amax.default", lambda x, dim=(), keepdim=False: ((x, dim, keepdim), {})),
    "amin": ("aten.amin.default", lambda x, dim=(), keepdim=False: ((x, dim, keepdim), {})),
    "var": ("aten.var.correction", _var),
    "std": ("aten.std.correction", _var),
    "new_zeros": ("aten.new_zeros.default", _new),
    "new_ones": ("aten.new_ones.default", _new),
    "new_full": ("aten.new_full.default", _new_full),
    "to": ("aten._to_copy.default", _to),
    "type": ("aten._to_copy.default", _type),
    "float": ("aten._to_copy.default", _cast(torch.float32)),
    "half": ("aten._to_copy.default", _cast(torch.float16)),
    "bfloat16": ("aten._to_copy.default", _cast(torch.bfloat16)),
    "long": ("aten._to_copy.default", _cast(torch.int64)),
    "int": ("aten._to_copy.default", _cast(torch.int32)),
    "bool": ("aten._to_copy.default", _cast(torch.bool)),
}


def _module_alias(mod: nn.Module) -> tuple[str, Callable[..., tuple[tuple, dict]]] | None:
    """The alias of the module's class, or of a base class whose ``forward`` it does not override."""
    for cls in type(mod).__mro__:
        if cls in MODULES:
            return MODULES[cls] if type(mod).forward is cls.forward else None
    return None


def is_leaf_module(mod: nn.Module) -> bool:
    """fx capture: record a module as one ``call_module`` node when it has an alias; trace into the others."""
    return _module_alias(mod) is not None


def inline_function(fn: Any) -> bool:
    """fx capture: trace into a torch.nn.functional Python function that has no alias (such as
    F.multi_head_attention_forward) instead of recording it whole."""
    return (isinstance(fn, types.FunctionType) and fn.__module__ == "torch.nn.functional"
            and fn not in FUNCTIONS and bool(_DISPATCH_CHECKS & set(fn.__code__.co_names)))


_DISPATCH_CHECKS = {"has_torch_function", "has_torch_function_unary", "has_torch_function_variadic"}


_SAME_NAME_MODULES = (torch, torch._C._nn, torch.special)


def _same_named_op(node: fx.Node, supported: Container[str], method: str) -> tuple[str, Adapter] | None:
    """torch.X(...) / torch._C._nn.X(...) (the builtins of F.*) / x.X(...) -> aten.X.default when that
    overload has a rule (binding checks the rest)."""
    if node.op == "call_method":
        name = method
    else:
        name = getattr(node.target, "__name__", None)
        if name is None or not any(getattr(m, name, None) is node.target for m in _SAME_NAME_MODULES):
            return None
    op = f"aten.{name}.default"
    return (op, _same) if op in supported else None


def _label(node: fx.Node, root: nn.Module) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_module":
        cls = type(root.get_submodule(node.target))
        return f"{cls.__module__}.{cls.__qualname__}"
    target = node.target
    return f"{getattr(target, '__module__', None) or 'builtins'}.{getattr(target, '__name__', target)}"


def _check_inplace(node: fx.Node, inplace: bool) -> None:
    """An in-place op whose input is read again would need mutation semantics we do not model."""
    if inplace and node.args and isinstance(node.args[0], fx.Node) and len(node.args[0].users) > 1:
        raise LoweringError(f"in-place {_label_short(node)} on %{node.args[0].name}, which is used again, "
                            "is not supported")


def _label_short(node: fx.Node) -> str:
    return str(getattr(node.target, "__name__", node.target))


def _tensor_attribute(node: fx.Node) -> Call | str:
    """``x.T`` / ``x.mT`` (other tensor attributes that give a tensor are unsupported)."""
    x, attr = node.args
    if attr == "T":
        rank = x.meta["val"].dim()
        return Call("aten.permute.default", (x, list(reversed(range(rank)))))
    if attr == "mT":
        return Call("aten.transpose.int", (x, -2, -1))
    return f"Tensor.{attr}"


def resolve(node: fx.Node, root: nn.Module, supported: Container[str]) -> Call | str:
    """A Call for the node, or a label naming the unsupported operator (``supported``: the ATen ops
    with a lowering rule, for the same-name fallback)."""
    if node.op == "call_module":
        mod = root.get_submodule(node.target)
        alias = _module_alias(mod)
        if alias is None:
            return _label(node, root)
        _check_inplace(node, getattr(mod, "inplace", False))

        def param(name: str) -> Param | None:
            tensor = getattr(mod, name)
            return None if tensor is None else Param(f"{node.target}.{name}", tensor)

        op, adapter = alias
        return Call(op, *adapter(mod, param, *node.args, **node.kwargs))
    if node.op == "call_function" and node.target is getattr:
        return _tensor_attribute(node)
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):  # torch.ops.aten.X.Y
        return Call(str(node.target), node.args, node.kwargs)
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverloadPacket):  # torch.ops.aten.X
        overloads = node.target.overloads()
        if len(overloads) == 1:
            return Call(str(getattr(node.target, overloads[0])), node.args, node.kwargs)
        return f"{node.target} (name the overload: one of {', '.join(overloads)})"
    # x.add_(y): fx_trace rebinds x to the result, so the out-of-place op has the same meaning
    rebound = node.op == "call_method" and is_inplace_method(node.target)
    method = node.target[:-1] if rebound else node.target
    table: dict[Any, tuple[OpName, Adapter]] = METHODS if node.op == "call_method" else FUNCTIONS
    try:
        alias = table.get(method)
    except TypeError:  # unhashable target
        alias = None
    alias = alias or _same_named_op(node, supported, method)
    if alias is None:
        return _label(node, root)
    if not rebound:
        _check_inplace(node, bool(node.kwargs.get("inplace", False)))
    op, adapter = alias
    try:
        if callable(op):
            op = op(*node.args, **node.kwargs)
        return Call(op, *adapter(*node.args, **node.kwargs))
    except TypeError as e:
        raise LoweringError(f"{_label(node, root)}: cannot map its arguments onto {op}: {e}") from None
