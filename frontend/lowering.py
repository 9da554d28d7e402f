"""Lower a captured fx graph to an HLO module, one rule per ATen op.

``LOWERINGS`` maps ATen overload names (``"aten.addmm.default"``) to rules. The table is the union of
the ``RULES`` dicts of the ``ops_*`` modules. A rule is called as ``rule(builder, *args)`` with the
arguments bound to the op's schema (every argument positional, defaults filled in, kwarg-only ones
included), fx nodes replaced by their HLO values, and returns an ``Instruction`` (or a tuple of them
for multi-output ops). Rules raise ``LoweringError`` with a plain message; this module adds the op,
node and source line. Before emitting anything, every op without a rule is collected and reported in
a single ``UnsupportedOpError``.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from hlo.errors import LoweringError, NeuroncError, UnsupportedOpError
from hlo.ir import Instruction, Module, Shape

from . import (
    fx_aliases,
    ops_activation,
    ops_conv,
    ops_create,
    ops_elementwise,
    ops_fused,
    ops_index,
    ops_linalg,
    ops_norm,
    ops_reduce,
    ops_resize,
    ops_rnn,
    ops_shape,
    ops_sort,
    ops_update,
)
from .builder import HloBuilder, hlo_dtype, tensor_to_numpy
from .graph import Call, CapturedGraph, describe, source_location

Rule = Callable[..., Any]


def _build_table() -> dict[str, Rule]:
    table: dict[str, Rule] = {}
    for mod in (ops_elementwise, ops_activation, ops_shape, ops_create, ops_index, ops_linalg, ops_conv, ops_reduce,
                ops_norm, ops_fused, ops_resize, ops_update, ops_rnn, ops_sort):
        for name, rule in mod.RULES.items():
            if name in table:
                raise RuntimeError(f"two lowering rules for {name}")
            table[name] = rule
    return table


LOWERINGS: dict[str, Rule] = _build_table()

# Python-level operations that have no ATen op (fx capture only), called with their own arguments.
PYTHON_RULES: dict[str, Rule] = {"operator.getitem": ops_shape.basic_index, "operator.setitem": ops_update.setitem}


def supported_operators() -> list[str]:
    """The ATen overloads with a lowering rule, sorted."""
    return sorted(LOWERINGS)


_DYNAMO_ROOT = re.compile(r"^L\[?'?self'?\]?\.?|^L__self__\.?")
_INDEX = re.compile(r"\[['\"]?([^\]'\"]+)['\"]?\]")


def module_path(node: fx.Node) -> str:
    """The torch module path of the node's innermost module (``h.0.attn.c_attn``; "" at the top level),
    from fx's ``nn_module_stack`` (dynamo's ``L['self'].h[0]`` form normalized to ``h.0``)."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    innermost = list(stack.values())[-1]  # (path, module type); a bare path in some torch versions
    path = str(innermost[0] if isinstance(innermost, tuple | list) else innermost)
    path = _INDEX.sub(r".\1", _DYNAMO_ROOT.sub("", path))
    return path.strip(".").replace("..", ".")


def _metadata(node: fx.Node, op_name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"op_name": op_name}
    module = module_path(node)
    if module:
        meta["module"] = module
    loc = source_location(node)
    if loc:
        meta["source_file"], meta["source_line"] = loc
    return meta


# ---- resolving nodes to ATen calls --------------------------------------------------------------
@functools.cache
def overload(name: str) -> torch._ops.OpOverload:
    """``"aten.addmm.default"`` -> ``torch.ops.aten.addmm.default``."""
    namespace, packet, name_overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), name_overload)


def bind(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """Arguments in schema order with defaults filled in; unknown or missing arguments are errors."""
    schema = op._schema.arguments
    names = {a.name for a in schema}
    extra = [k for k in kwargs if k not in names]
    if extra:
        raise LoweringError(f"unexpected argument(s) {', '.join(extra)}")
    if len(args) > len(schema):
        raise LoweringError(f"{len(args)} arguments given, the schema takes {len(schema)}")
    bound = []
    for i, arg in enumerate(schema):
        if i < len(args):
            bound.append(args[i])
        elif arg.name in kwargs:
            bound.append(kwargs[arg.name])
        elif arg.has_default_value():
            bound.append(arg.default_value)
        else:
            raise LoweringError(f"missing argument '{arg.name}'")
    return bound


def _has_tensor(value: Any) -> bool:
    found = []
    fx.node.map_aggregate(value, lambda v: found.append(isinstance(v, torch.Tensor)))
    return any(found)


_SIZE_METHODS = ("size", "dim", "numel")
_SIZE_ATTRIBUTES = ("shape", "ndim", "dtype")


def _is_python_value(node: fx.Node, cap: CapturedGraph) -> bool:
    """fx capture: a size computation (x.size(0), x.shape[1] * 2...) recorded as a node (fx_trace
    evaluates most of them while tracing; what remains has its value in ``meta["val"]``).

    Shapes are static, so such values are constants. A non-tensor computed from tensor *data*
    (``x.max().item()``) is not: it stays an operator to lower (and is reported as unsupported).
    """
    if cap.kind != "fx" or "val" not in node.meta or _has_tensor(node.meta["val"]):
        return False
    if node.op == "call_method" and node.target in _SIZE_METHODS:
        return True
    if node.op == "call_function" and node.target is getattr and node.args[1] in _SIZE_ATTRIBUTES:
        return True
    return all(_is_python_value(n, cap) for n in node.all_input_nodes)


_RESULT_FIELDS = {"values": 0, "indices": 1}  # torch.return_types of max/min/sort... (fx capture)


def _structural_index(node: fx.Node) -> int | None:
    """The element a node picks out of a multi-result op: ``t[1]`` or ``t.indices``, else None."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
        return None
    if isinstance(node.args[0].meta.get("val"), torch.Tensor):
        return None
    if node.target is operator.getitem:
        return node.args[1]
    if node.target is getattr and node.args[1] in _RESULT_FIELDS:
        return _RESULT_FIELDS[node.args[1]]
    return None


def _resolve(node: fx.Node, cap: CapturedGraph) -> Call | str | None:
    """A Call, None for structural getitem, or a label naming an unsupported operator."""
    if _structural_index(node) is not None:
        return None
    if node.op == "call_function" and node.target in (operator.getitem, operator.setitem):
        return Call(f"operator.{node.target.__name__}", node.args)
    if cap.kind == "fx":
        return fx_aliases.resolve(node, cap.root, LOWERINGS)
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return Call(str(node.target), node.args, node.kwargs)
    return getattr(node.target, "__name__", str(node.target))


def operators_used(cap: CapturedGraph) -> set[str]:
    """The ATen overloads (and Python operators) the graph's nodes resolve to, supported or not."""
    ops = set()
    for node in cap.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module") and not _is_python_value(node, cap):
            resolved = _resolve(node, cap)
            if resolved is not None:
                ops.add(resolved.op if isinstance(resolved, Call) else resolved)
    return ops


def _check_supported(cap: CapturedGraph) -> dict[fx.Node, Call]:
    calls: dict[fx.Node, Call] = {}
    missing: dict[str, list[fx.Node]] = {}
    for node in cap.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module") or _is_python_value(node, cap):
            continue
        try:
            resolved = _resolve(node, cap)
        except LoweringError as e:
            raise LoweringError(f"{e} ({describe(node)})") from e
        if isinstance(resolved, Call) and (resolved.op in LOWERINGS or resolved.op in PYTHON_RULES):
            calls[node] = resolved
        elif resolved is not None:
            missing.setdefault(resolved.op if isinstance(resolved, Call) else resolved, []).append(node)
    if missing:
        items = []
        for op, nodes in missing.items():
            more = f", and {len(nodes) - 1} more" if len(nodes) > 1 else ""
            items.append(f"{op} ({describe(nodes[0])}{more})")
        raise UnsupportedOpError(f"unsupported PyTorch operators: {', '.join(items)}; "
                                 "run `neuronc list-operators` for the supported list")
    return calls


# ---- the walk -----------------------------------------------------------------------------------
def _check_result(expected: Any, value: Any) -> None:
    """Compare what a rule produced with the shapes and dtypes torch recorded (``meta["val"]``)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(value, Instruction):
            raise LoweringError(f"internal: rule returned {type(value).__name__} for a tensor")
        want = Shape.array(hlo_dtype(expected.dtype), expected.shape)
        if (value.shape.dtype, value.shape.dims) != (want.dtype, want.dims):
            raise LoweringError(f"internal: rule produced {value.shape.dtype}{list(value.shape.dims)}, "
                                f"torch says {want.dtype}{list(want.dims)}")
    elif isinstance(expected, (tuple, list)) and isinstance(value, (tuple, list)):
        if len(expected) != len(value):
            raise LoweringError(f"internal: rule produced {len(value)} results, torch says {len(expected)}")
        for e, v in zip(expected, value):
            _check_result(e, v)


def lower_graph(cap: CapturedGraph) -> Module:
    """Lower a captured graph to an HLO module whose entry computation is ``main``."""
    return _Lowering(cap).run()


class _Lowering:
    def __init__(self, cap: CapturedGraph):
        self.cap = cap
        self.calls = _check_supported(cap)
        self.b = HloBuilder(cap.name)
        self.env: dict[fx.Node, Any] = {}
        self.params: dict[str, Instruction] = {}  # fx capture: module parameters by state_dict key

    def run(self) -> Module:
        cap, b, env = self.cap, self.b, self.env
        inputs = set(cap.inputs)
        n_params = 0
        for node in cap.graph.nodes:
            if node in cap.constants:
                key, tensor = cap.constants[node]
                env[node] = self._constant(key, tensor)
            elif node in inputs:
                val = node.meta.get("val")
                if isinstance(val, torch.Tensor):
                    b.metadata = {"op_name": node.name}
                    env[node] = b.parameter(n_params, Shape.array(hlo_dtype(val.dtype), val.shape), node.name)
                    n_params += 1
                else:
                    env[node] = val
            elif node.op == "get_attr" or _is_python_value(node, cap):
                env[node] = node.meta.get("val")
            elif node in self.calls:
                env[node] = self._lower_call(node, self.calls[node])
            elif _structural_index(node) is not None:
                env[node] = env[node.args[0]][_structural_index(node)]
            elif node.op != "output":
                raise LoweringError(f"cannot lower {node.op} {describe(node)}")
        outputs = [self._value(out) for out in cap.outputs]
        bad = [o for o in outputs if not isinstance(o, Instruction)]
        if bad or not outputs:
            raise LoweringError(f"{cap.name}: every model output must be a tensor (got {bad or 'no outputs'})")
        b.metadata = {"op_name": "output"}
        return b.finish(outputs)

    def _constant(self, key: str, tensor: torch.Tensor) -> Instruction:
        """A weight/buffer constant named by its state_dict key (scalars stay inline, without a key)."""
        if key not in self.params:
            saved, self.b.metadata = self.b.metadata, {"op_name": key}
            data_key = key if tensor.numel() > 1 else None
            self.params[key] = self.b.constant(tensor_to_numpy(tensor), data_key=data_key)
            self.b.metadata = saved
        return self.params[key]

    def _value(self, v: Any) -> Any:
        def one(x: Any) -> Any:
            if isinstance(x, fx.Node):
                return self.env[x]
            if isinstance(x, fx_aliases.Param):
                return self._constant(x.key, x.tensor)
            return x

        return fx.node.map_aggregate(v, one)

    def _lower_call(self, node: fx.Node, call: Call) -> Any:
        b = self.b
        aten = call.op in LOWERINGS
        b.metadata = _metadata(node, call.op.rsplit(".", 1)[0] if aten else call.op)
        try:
            args, kwargs = self._value(call.args), self._value(call.kwargs)
            if aten:
                result = LOWERINGS[call.op](b, *bind(overload(call.op), args, kwargs))
            else:
                result = PYTHON_RULES[call.op](b, *args, **kwargs)
            _check_result(node.meta.get("val"), result)
            return result
        except NeuroncError as e:
            raise LoweringError(f"{call.op} ({describe(node)}): {e}") from e
        except Exception as e:  # a bug in a rule: still report where it happened
            raise LoweringError(f"{call.op} ({describe(node)}): internal error: {type(e).__name__}: {e}") from e
