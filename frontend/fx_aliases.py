"""Map torch.fx.symbolic_trace nodes onto the ATen lowering rules.

symbolic_trace records what the user wrote: ``call_module`` (nn.Linear, nn.ReLU...), ``call_function``
(torch.* / F.* / operator.*) and ``call_method`` (tensor methods). Each alias names the ATen overload
whose rule lowers it and an adapter turning the Python call's arguments into that overload's
arguments. Module parameters become ``Param`` references that the lowering turns into constants named
``<module path>.<parameter>`` (the state_dict key).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

from compiler.errors import LoweringError

from .capture import Call

Adapter = Callable[..., tuple[tuple, dict]]


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
    if mode != "constant":
        raise LoweringError(f"F.pad mode={mode!r} is not supported")
    return (x, list(pad), 0 if value is None else value), {}


def _arange(*args: Any, dtype: Any = None, **ignored: Any) -> tuple[tuple, dict]:
    """torch.arange(end) / (start, end) / (start, end, step) -> arange.start_step."""
    start, end, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    return (start, end, step), {"dtype": dtype}


def _div(x: Any, y: Any, *, rounding_mode: str | None = None) -> tuple[tuple, dict]:
    return (x, y), {"rounding_mode": rounding_mode}


def _filled(value: Any) -> Adapter:
    """torch.zeros / torch.ones (size as varargs or one sequence) -> full(size, value)."""
    def adapter(*size: Any, dtype: Any = None, **ignored: Any) -> tuple[tuple, dict]:
        (_, sizes), _ = _sizes(None, *size)
        return (sizes, value), {"dtype": dtype}

    return adapter


def _filled_like(value: Any) -> Adapter:
    """torch.zeros_like / torch.ones_like -> full_like(x, value)."""
    return lambda x, dtype=None, **ignored: ((x, value), {"dtype": dtype})


def _var(x: Any, dim: Any = None, unbiased: bool = True, keepdim: bool = False, *,
         correction: Any = None) -> tuple[tuple, dict]:
    correction = correction if correction is not None else (1 if unbiased else 0)
    return (x, dim), {"correction": correction, "keepdim": keepdim}


def _layer_norm(x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None,
                eps: float = 1e-5) -> tuple[tuple, dict]:
    return (x, list(normalized_shape), weight, bias, eps), {}


def _flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> tuple[tuple, dict]:
    return (x, start_dim, end_dim), {}


# torch.* / F.* / operator.* -> (ATen overload, adapter). torch.X and Tensor.X whose ATen op is
# aten.X.default with the same signature (torch.exp, x.sigmoid(), torch.mm...) need no entry: see
# _same_named_op.
FUNCTIONS: dict[Any, tuple[str, Adapter]] = {
    operator.add: ("aten.add.Tensor", _same),
    operator.sub: ("aten.sub.Tensor", _same),
    operator.mul: ("aten.mul.Tensor", _same),
    operator.truediv: ("aten.div.Tensor", _same),
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
    torch.softmax: ("aten.softmax.int", _softmax),
    torch.log_softmax: ("aten.log_softmax.int", _softmax),
    torch.flatten: ("aten.flatten.using_ints", _flatten),
    torch.transpose: ("aten.transpose.int", _same),
    torch.reshape: ("aten.view.default", _sizes),
    torch.cat: ("aten.cat.default", _same),
    torch.sum: ("aten.sum.dim_IntList", _dims_method),
    torch.mean: ("aten.mean.dim", _dims_method),
    torch.where: ("aten.where.self", _same),
    torch.split: ("aten.split.Tensor", lambda x, sizes, dim=0: ((x, sizes, dim), {})),
    torch.pow: ("aten.pow.Tensor_Scalar", _same),
    F.relu: ("aten.relu.default", _first),
    F.gelu: ("aten.gelu.default", _gelu),
    F.silu: ("aten.silu.default", _first),
    F.sigmoid: ("aten.sigmoid.default", _first),
    F.tanh: ("aten.tanh.default", _first),
    F.linear: ("aten.linear.default", _same),
    F.softmax: ("aten.softmax.int", _softmax),
    F.log_softmax: ("aten.log_softmax.int", _softmax),
    F.layer_norm: ("aten.layer_norm.default", _layer_norm),
    F.embedding: ("aten.embedding.default", _embedding),
    F.pad: ("aten.constant_pad_nd.default", _pad),
    torch.arange: ("aten.arange.start_step", _arange),
    torch.zeros: ("aten.full.default", _filled(0)),
    torch.ones: ("aten.full.default", _filled(1)),
    torch.zeros_like: ("aten.full_like.default", _filled_like(0)),
    torch.ones_like: ("aten.full_like.default", _filled_like(1)),
    F.dropout: ("aten.clone.default", _dropout),
    F.leaky_relu: ("aten.leaky_relu.default", lambda x, negative_slope=0.01, inplace=False: ((x, negative_slope), {})),
    F.elu: ("aten.elu.default", lambda x, alpha=1.0, inplace=False: ((x, alpha), {})),
    F.relu6: ("aten.hardtanh.default", lambda x, inplace=False: ((x, 0.0, 6.0), {})),
    F.hardtanh: ("aten.hardtanh.default",
                 lambda x, min_val=-1.0, max_val=1.0, inplace=False: ((x, min_val, max_val), {})),
    F.scaled_dot_product_attention: ("aten.scaled_dot_product_attention.default", _same),
}

# Tensor methods -> (ATen overload, adapter)
METHODS: dict[str, tuple[str, Adapter]] = {
    "add": ("aten.add.Tensor", _same),
    "sub": ("aten.sub.Tensor", _same),
    "mul": ("aten.mul.Tensor", _same),
    "div": ("aten.div.Tensor_mode", _div),
    "softmax": ("aten.softmax.int", _softmax),
    "log_softmax": ("aten.log_softmax.int", _softmax),
    "view": ("aten.view.default", _sizes),
    "reshape": ("aten.view.default", _sizes),
    "expand": ("aten.expand.default", _sizes),
    "permute": ("aten.permute.default", _sizes),
    "transpose": ("aten.transpose.int", _same),
    "flatten": ("aten.flatten.using_ints", _flatten),
    "squeeze": ("aten.squeeze.dims", lambda x, dim=None: ((x, dim), {})),
    "contiguous": ("aten.clone.default", _first),
    "detach": ("aten.clone.default", _first),
    "sum": ("aten.sum.dim_IntList", _dims_method),
    "mean": ("aten.mean.dim", _dims_method),
    "split": ("aten.split.Tensor", _same),
    "masked_fill": ("aten.masked_fill.Scalar", _same),
    "pow": ("aten.pow.Tensor_Scalar", _same),
    "amax": ("aten.amax.default", lambda x, dim=(), keepdim=False: ((x, dim, keepdim), {})),
    "amin": ("aten.amin.default", lambda x, dim=(), keepdim=False: ((x, dim, keepdim), {})),
    "var": ("aten.var.correction", _var),
    "to": ("aten._to_copy.default", _to),
    "float": ("aten._to_copy.default", _cast(torch.float32)),
    "half": ("aten._to_copy.default", _cast(torch.float16)),
    "bfloat16": ("aten._to_copy.default", _cast(torch.bfloat16)),
}


def _linear(m: nn.Linear, p: Callable[[str], Any], x: Any) -> tuple[tuple, dict]:
    return (x, p("weight"), p("bias")), {}


def _ln(m: nn.LayerNorm, p: Callable[[str], Any], x: Any) -> tuple[tuple, dict]:
    return (x, list(m.normalized_shape), p("weight"), p("bias"), m.eps), {}


def _act(m: nn.Module, p: Callable[[str], Any], x: Any) -> tuple[tuple, dict]:
    return (x,), {}


# nn.Module types -> (ATen overload, adapter(module, param_ref, *args)); subclasses match too.
MODULES: dict[type, tuple[str, Callable[..., tuple[tuple, dict]]]] = {
    nn.Linear: ("aten.linear.default", _linear),
    nn.LayerNorm: ("aten.layer_norm.default", _ln),
    nn.ReLU: ("aten.relu.default", _act),
    nn.GELU: ("aten.gelu.default", lambda m, p, x: ((x,), {"approximate": m.approximate})),
    nn.Tanh: ("aten.tanh.default", _act),
    nn.Sigmoid: ("aten.sigmoid.default", _act),
    nn.SiLU: ("aten.silu.default", _act),
    nn.LeakyReLU: ("aten.leaky_relu.default", lambda m, p, x: ((x, m.negative_slope), {})),
    nn.Hardtanh: ("aten.hardtanh.default", lambda m, p, x: ((x, m.min_val, m.max_val), {})),
    nn.ELU: ("aten.elu.default", lambda m, p, x: ((x, m.alpha), {})),
    nn.Softmax: ("aten.softmax.int", lambda m, p, x: _softmax(x, m.dim)),
    nn.LogSoftmax: ("aten.log_softmax.int", lambda m, p, x: _softmax(x, m.dim)),
    nn.Flatten: ("aten.flatten.using_ints", lambda m, p, x: ((x, m.start_dim, m.end_dim), {})),
    nn.Dropout: ("aten.clone.default", _act),
    nn.Embedding: ("aten.embedding.default", lambda m, p, x: _embedding(x, p("weight"), max_norm=m.max_norm)),
    nn.Identity: ("aten.clone.default", _act),
}


def _module_alias(mod: nn.Module) -> tuple[str, Callable[..., tuple[tuple, dict]]] | None:
    for cls in type(mod).__mro__:
        if cls in MODULES:
            return MODULES[cls]
    return None


def _same_named_op(node: fx.Node, supported: Container[str]) -> tuple[str, Adapter] | None:
    """torch.X(...) / x.X(...) -> aten.X.default when that overload has a rule (binding checks the rest)."""
    if node.op == "call_method":
        name = node.target
    else:
        name = getattr(node.target, "__name__", None)
        if name is None or getattr(torch, name, None) is not node.target:
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
    table: dict[Any, tuple[str, Adapter]] = METHODS if node.op == "call_method" else FUNCTIONS
    try:
        alias = table.get(node.target)
    except TypeError:  # unhashable target
        alias = None
    alias = alias or _same_named_op(node, supported)
    if alias is None:
        return _label(node, root)
    _check_inplace(node, bool(node.kwargs.get("inplace", False)))
    op, adapter = alias
    try:
        return Call(op, *adapter(*node.args, **node.kwargs))
    except TypeError as e:
        raise LoweringError(f"{_label(node, root)}: cannot map its arguments onto {op}: {e}") from None
