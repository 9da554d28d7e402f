"""Capture a PyTorch model as an fx graph: torch.export (core ATen) or torch.fx.symbolic_trace.

Both paths produce a ``CapturedGraph``: the graph, its user-input placeholders in order, the tensors
that become HLO constants (weights, buffers, lifted constants, get_attr tensors) with their
state_dict names, and the output values. Every node carries ``meta["val"]`` (a FakeTensor, a meta
tensor, or a plain Python value for size computations) so the lowering sees shapes and dtypes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx.passes.shape_prop import ShapeProp

from compiler.errors import LoweringError

aten = torch.ops.aten

# Ops torch's default (core ATen) table would decompose but that we lower whole: each has a lowering
# rule that emits a compact, recognizable HLO pattern (one dot for linear, a max/exp/sum/divide chain
# for softmax, ...) which later fusion can match, instead of torch's generic decomposition
# (permute + addmm, native_layer_norm with extra outputs, expand + bmm + _unsafe_view for matmul).
KEEP_WHOLE = (
    aten.linear.default,
    aten.matmul.default,
    aten.layer_norm.default,
    aten.softmax.int,
    aten.log_softmax.int,
    aten.silu.default,
    aten.scaled_dot_product_attention.default,
)


@dataclass
class CapturedGraph:
    """An fx graph ready for lowering."""

    name: str
    graph: fx.Graph
    inputs: list[fx.Node]                                   # user-input placeholders, in order
    constants: dict[fx.Node, tuple[str, torch.Tensor]]      # node -> (state_dict name, tensor)
    outputs: list[Any]                                      # fx Nodes (flattened user outputs)
    kind: str                                               # "export" or "fx"
    root: torch.nn.Module | None = None                     # fx: owner of call_module targets


class Call:
    """A graph node resolved to an ATen overload name and its (unbound) arguments."""

    def __init__(self, op: str, args: Sequence[Any], kwargs: dict[str, Any] | None = None):
        self.op, self.args, self.kwargs = op, tuple(args), dict(kwargs or {})


def decomposition_table() -> dict:
    """torch's core-ATen decomposition table minus the ops in ``KEEP_WHOLE``."""
    table = torch.export.default_decompositions()
    for op in KEEP_WHOLE:
        table.pop(op, None)
    return table


def model_name(model: Any, default: str = "model") -> str:
    """The model's class name (for an ExportedProgram, the root module class recorded by export)."""
    if isinstance(model, ExportedProgram):
        for node in model.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if stack:
                _, cls = next(iter(stack.values()))
                cls = cls if isinstance(cls, str) else getattr(cls, "__name__", default)
                return cls.rsplit(".", 1)[-1]
        return default
    return type(model).__name__


def _first_lines(exc: BaseException, n: int = 3) -> str:
    """The first lines of the innermost cause's message (wrappers repeat it with noise)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return "\n".join(lines[:n]) or type(exc).__name__


def capture_export(model: torch.nn.Module | ExportedProgram, example_inputs: Sequence[Any],
                   name: str | None = None) -> CapturedGraph:
    """torch.export the model (or take an ExportedProgram) and run our decomposition table."""
    name = name or model_name(model)
    try:
        if isinstance(model, ExportedProgram):
            ep = model
        else:
            ep = torch.export.export(model.eval(), tuple(example_inputs))
        ep = ep.run_decompositions(decomposition_table())
    except Exception as e:  # torch raises many unrelated types here; report its own words
        raise LoweringError(f"torch.export failed for {name}: {_first_lines(e)}") from e

    sig = ep.graph_signature
    mutations = [s for s in sig.output_specs if s.kind not in (OutputKind.USER_OUTPUT,)]
    if mutations:
        raise LoweringError(f"{name}: the model mutates state in forward "
                            f"({', '.join(str(s.target) for s in mutations)}); this is not supported")
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    inputs: list[fx.Node] = []
    constants: dict[fx.Node, tuple[str, torch.Tensor]] = {}
    for node, spec in zip(placeholders, sig.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            inputs.append(node)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            source = ep.state_dict if spec.target in ep.state_dict else ep.constants
            constants[node] = (spec.target, source[spec.target])
        else:
            raise LoweringError(f"{name}: unsupported exported input kind {spec.kind.name} ({node.name})")
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    outputs = list(output_node.args[0])
    return CapturedGraph(name, ep.graph, inputs, constants, outputs, "export")


class _ValueProp(ShapeProp):
    """ShapeProp that also records each node's result in ``meta["val"]`` (tensors as meta tensors)."""

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        n.meta["val"] = fx.node.map_aggregate(
            result, lambda v: torch.empty_like(v, device="meta") if isinstance(v, torch.Tensor) else v)
        return result


def capture_fx(model: torch.nn.Module, example_inputs: Sequence[Any], name: str | None = None) -> CapturedGraph:
    """symbolic_trace the model (recording stack traces) and propagate example-input values."""
    name = name or model_name(model)
    if isinstance(model, ExportedProgram):
        raise LoweringError("capture='fx' needs an nn.Module, not an ExportedProgram")
    tracer = fx.Tracer()
    tracer.record_stack_traces = True
    try:
        graph = tracer.trace(model.eval())
        gm = fx.GraphModule(tracer.root, graph, name)
        with torch.no_grad():
            _ValueProp(gm).propagate(*example_inputs)
    except Exception as e:
        raise LoweringError(f"torch.fx.symbolic_trace failed for {name}: {_first_lines(e)}") from e

    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    if len(inputs) != len(example_inputs):
        raise LoweringError(f"{name}: forward takes {len(inputs)} inputs, {len(example_inputs)} given")
    constants = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            value = _get_attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                constants[node] = (node.target, value)
    output_node = next(n for n in graph.nodes if n.op == "output")
    outputs: list[Any] = []
    fx.node.map_aggregate(output_node.args[0], outputs.append)
    return CapturedGraph(name, graph, inputs, constants, outputs, "fx", root=gm)


def _get_attr(module: torch.nn.Module, target: str) -> Any:
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part)
    return value
